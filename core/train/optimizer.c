/* Optimizers and learning-rate schedules over a model's flat buffers. */
#define _POSIX_C_SOURCE 200809L
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/train/optimizer.h"

struct dpt_optimizer {
  dpt_model *model;
  dpt_optim_config cfg;
  int64_t steps;
  double lr_scale;    /* rollbacks' factor on the schedule's rate (1: none) */
  dpt_buffer *state0; /* SGD: velocity; AdamW: first moment. zero-initialized */
  dpt_buffer *state1; /* AdamW, LAMB: second moment */
  dpt_buffer *dir;    /* LAMB: the update direction, negated (-r), in the state's layout */
  int prepared;       /* LAMB: phase one done, phase two due */
  /* Sharded: state for these ranges only, packed in order (range i at state_off[i]);
   * NULL: state for every parameter, at the parameter's own offset. */
  dpt_range *shard;
  size_t *state_off;
  size_t nshard;
};

const char *dpt_optim_kind_name(dpt_optim_kind kind) {
  switch (kind) {
#define DPT_OPTIM_KIND_NAME_(name, value, text)                                                    \
  case DPT_OPTIM_##name:                                                                           \
    return text;
    DPT_OPTIM_KIND_MAP(DPT_OPTIM_KIND_NAME_)
#undef DPT_OPTIM_KIND_NAME_
  default:
    return NULL;
  }
}

const char *dpt_schedule_kind_name(dpt_schedule_kind kind) {
  switch (kind) {
#define DPT_SCHEDULE_KIND_NAME_(name, value, text)                                                 \
  case DPT_SCHEDULE_##name:                                                                        \
    return text;
    DPT_SCHEDULE_KIND_MAP(DPT_SCHEDULE_KIND_NAME_)
#undef DPT_SCHEDULE_KIND_NAME_
  default:
    return NULL;
  }
}

void dpt_optim_config_default(dpt_optim_config *cfg, dpt_optim_kind kind) {
  if (!cfg) return;
  dpt_optim_config c = {0};
  c.kind = kind;
  c.schedule = DPT_SCHEDULE_CONSTANT;
  c.beta1 = 0.9f;
  c.beta2 = 0.999f;
  c.eps = 1e-8f;
  c.gamma = 0.1f;
  if (kind != DPT_OPTIM_SGD) {
    c.lr = 1e-3f;
    c.weight_decay = 0.01f;
  } else {
    c.lr = 0.01f;
  }
  *cfg = c;
}

dpt_status dpt_optim_config_check(const dpt_optim_config *c) {
  const char *fn = "optimizer";
  if (!c) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: config is NULL", fn);
  if (!dpt_optim_kind_name(c->kind))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: unknown kind %d", fn, (int)c->kind);
  if (!(c->lr > 0.0f) || !isfinite(c->lr))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: lr %g must be a positive number", fn,
                         (double)c->lr);
  if (!(c->momentum >= 0.0f && c->momentum < 1.0f))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: momentum %g must be in [0, 1)", fn,
                         (double)c->momentum);
  if (c->nesterov && c->momentum == 0.0f)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: nesterov needs momentum > 0", fn);
  if (!(c->weight_decay >= 0.0f) || !isfinite(c->weight_decay))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: weight_decay %g must be >= 0", fn,
                         (double)c->weight_decay);
  if (c->kind != DPT_OPTIM_SGD && (!(c->beta1 >= 0.0f && c->beta1 < 1.0f) ||
                                   !(c->beta2 >= 0.0f && c->beta2 < 1.0f) || !(c->eps > 0.0f)))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %s needs betas in [0, 1) and eps > 0", fn,
                         c->kind == DPT_OPTIM_LAMB ? "LAMB" : "AdamW");
  if (c->warmup_steps < 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: warmup_steps must be >= 0", fn);
  if (c->schedule == DPT_SCHEDULE_STEP &&
      (c->step_size < 1 || !(c->gamma > 0.0f) || !isfinite(c->gamma)))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: step schedule needs step_size >= 1, gamma > 0",
                         fn);
  if ((c->schedule == DPT_SCHEDULE_COSINE || c->schedule == DPT_SCHEDULE_LINEAR) &&
      (c->total_steps < 1 || !(c->min_lr >= 0.0f) || !(c->min_lr <= c->lr)))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: %s schedule needs total_steps >= 1 and 0 <= min_lr <= lr", fn,
                         dpt_schedule_kind_name(c->schedule));
  if (!dpt_schedule_kind_name(c->schedule))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: unknown schedule %d", fn, (int)c->schedule);
  if (!(c->clip_norm >= 0.0f))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: clip_norm must be >= 0", fn);
  return DPT_OK;
}

double dpt_optim_lr_at(const dpt_optim_config *c, int64_t step) {
  if (!c) return 0.0;
  if (step < 0) step = 0;
  if (c->warmup_steps > 0 && step < c->warmup_steps)
    return (double)c->lr * (double)(step + 1) / (double)c->warmup_steps;
  int64_t s = step - c->warmup_steps;
  switch (c->schedule) {
  case DPT_SCHEDULE_STEP:
    return (double)c->lr * pow((double)c->gamma, (double)(s / c->step_size));
  case DPT_SCHEDULE_LINEAR: {
    double t = s >= c->total_steps ? 1.0 : (double)s / (double)c->total_steps;
    return (double)c->min_lr + ((double)c->lr - (double)c->min_lr) * (1.0 - t);
  }
  case DPT_SCHEDULE_COSINE: {
    double t = s >= c->total_steps ? 1.0 : (double)s / (double)c->total_steps;
    return (double)c->min_lr +
           ((double)c->lr - (double)c->min_lr) * 0.5 * (1.0 + cos(3.14159265358979323846 * t));
  }
  default:
    return (double)c->lr;
  }
}

static dpt_status check_ranges(const dpt_model *model, const dpt_range *ranges, size_t n,
                               const char *fn);

/* Creates the optimizer with state for `n` elements (shard: the ranges they cover, or NULL). */
static dpt_status create(dpt_model *model, const dpt_optim_config *cfg, const dpt_range *shard,
                         size_t nshard, dpt_optimizer **out, const char *fn) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: out is NULL", fn);
  *out = NULL;
  if (!model) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: model is NULL", fn);
  dpt_status st = dpt_optim_config_check(cfg);
  if (st == DPT_OK && shard) st = check_ranges(model, shard, nshard, fn);
  if (st != DPT_OK) return st;
  dpt_optimizer *o = calloc(1, sizeof *o);
  if (!o) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  o->model = model;
  o->cfg = *cfg;
  o->lr_scale = 1.0;
  dpt_backend *be = dpt_model_backend(model);
  size_t n = dpt_model_num_params(model);
  if (shard) {
    o->nshard = nshard;
    o->shard = malloc((nshard ? nshard : 1) * sizeof *o->shard);
    o->state_off = malloc((nshard ? nshard : 1) * sizeof *o->state_off);
    if (!o->shard || !o->state_off) {
      dpt_optimizer_destroy(o);
      return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    n = 0;
    for (size_t i = 0; i < nshard; ++i) {
      o->shard[i] = shard[i];
      o->state_off[i] = n;
      n += shard[i].count; /* no overflow: the ranges lie inside the parameters */
    }
  }
  int states = cfg->kind != DPT_OPTIM_SGD ? 2 : cfg->momentum > 0.0f ? 1 : 0;
  if (n == 0) n = 1; /* an empty shard: a buffer all the same */
  if (states >= 1) st = dpt_buffer_alloc(be, n * sizeof(float), &o->state0);
  if (st == DPT_OK && states >= 1) st = dpt_buffer_fill_f32(o->state0, 0, n, 0.0f);
  if (st == DPT_OK && states >= 2) st = dpt_buffer_alloc(be, n * sizeof(float), &o->state1);
  if (st == DPT_OK && states >= 2) st = dpt_buffer_fill_f32(o->state1, 0, n, 0.0f);
  if (st == DPT_OK && cfg->kind == DPT_OPTIM_LAMB)
    st = dpt_buffer_alloc(be, n * sizeof(float), &o->dir);
  if (st != DPT_OK) {
    dpt_optimizer_destroy(o);
    return st;
  }
  *out = o;
  return DPT_OK;
}

dpt_status dpt_optimizer_create(dpt_model *model, const dpt_optim_config *cfg,
                                dpt_optimizer **out) {
  return create(model, cfg, NULL, 0, out, "dpt_optimizer_create");
}

dpt_status dpt_optimizer_create_sharded(dpt_model *model, const dpt_optim_config *cfg,
                                        const dpt_range *ranges, size_t n, dpt_optimizer **out) {
  if (out) *out = NULL;
  if (n > 0 && !ranges)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_optimizer_create_sharded: ranges is NULL");
  static const dpt_range none = {0, 0};
  return create(model, cfg, ranges ? ranges : &none, n, out, "dpt_optimizer_create_sharded");
}

void dpt_optimizer_destroy(dpt_optimizer *o) {
  if (!o) return;
  dpt_buffer_free(o->state0);
  dpt_buffer_free(o->state1);
  dpt_buffer_free(o->dir);
  free(o->shard);
  free(o->state_off);
  free(o);
}

int64_t dpt_optimizer_steps(const dpt_optimizer *o) {
  return o ? o->steps : 0;
}

/* Checks that the ranges lie inside the parameters, in increasing order without overlap. */
static dpt_status check_ranges(const dpt_model *model, const dpt_range *ranges, size_t n,
                               const char *fn) {
  if (n > 0 && !ranges) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: ranges is NULL", fn);
  const size_t np = dpt_model_num_params(model);
  for (size_t i = 0; i < n; ++i) {
    if (ranges[i].offset > np || ranges[i].count > np - ranges[i].offset)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "%s: range %zu [%zu, +%zu) outside the %zu parameters", fn, i,
                           ranges[i].offset, ranges[i].count, np);
    if (i > 0 && ranges[i].offset < ranges[i - 1].offset + ranges[i - 1].count)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "%s: range %zu starts at %zu, inside or before range %zu", fn, i,
                           ranges[i].offset, i - 1);
  }
  return DPT_OK;
}

/* Checks a step's ranges: inside the parameters, and a sharded optimizer's own shard. */
static dpt_status check_step_ranges(const dpt_optimizer *o, const dpt_range *ranges, size_t n,
                                    const char *fn) {
  if (!o) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: optimizer is NULL", fn);
  if (o->shard &&
      (n != o->nshard || (n > 0 && (!ranges || memcmp(ranges, o->shard, n * sizeof *ranges) != 0))))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: this optimizer keeps state for its own %zu shard ranges; pass "
                         "exactly those",
                         fn, o->nshard);
  return check_ranges(o->model, ranges, n, fn);
}

dpt_status dpt_optimizer_grad_sumsq(dpt_optimizer *o, const dpt_range *ranges, size_t n,
                                    double *out) {
  if (!o) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_optimizer_grad_sumsq: optimizer is NULL");
  dpt_status st = check_ranges(o->model, ranges, n, "dpt_optimizer_grad_sumsq");
  if (st != DPT_OK) return st;
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_optimizer_grad_sumsq: out is NULL");
  dpt_backend *be = dpt_model_backend(o->model);
  const dpt_buffer *g = dpt_model_grads(o->model);
  double total = 0;
  for (size_t i = 0; i < n && st == DPT_OK; ++i) {
    double sq = 0;
    st = dpt_sumsq(be, ranges[i].count, g, ranges[i].offset, &sq);
    total += sq;
  }
  *out = total;
  return st;
}

/* Whether a name matches one of the comma-separated fnmatch patterns of `list`. */
static int matches(const char *list, const char *name) {
  char pat[256];
  for (const char *p = list; p && *p;) {
    const char *e = strchr(p, ',');
    const size_t len = e ? (size_t)(e - p) : strlen(p);
    snprintf(pat, sizeof pat, "%.*s", (int)(len < sizeof pat ? len : sizeof pat - 1), p);
    if (pat[0] && fnmatch(pat, name, 0) == 0) return 1;
    p = e ? e + 1 : p + len;
  }
  return 0;
}

/* Whether tensor t takes weight decay: under decay_weights_only, linear and conv2d weights;
 * never one that no_decay names. */
static int decays(const dpt_optim_config *c, const dpt_tensor_info *t) {
  if (matches(c->no_decay, t->name)) return 0;
  size_t n = strlen(t->name);
  return !c->decay_weights_only ||
         (t->ndim >= 2 && n >= 7 && strcmp(t->name + n - 7, ".weight") == 0);
}

/* One optimizer call on [off, off + cnt) (state at so) with weight decay wd. */
static dpt_status update_range(dpt_optimizer *o, size_t off, size_t cnt, size_t so, float lr,
                               float wd) {
  dpt_backend *be = dpt_model_backend(o->model);
  dpt_buffer *w = dpt_model_params(o->model), *g = dpt_model_grads(o->model);
  if (o->cfg.kind == DPT_OPTIM_SGD) {
    dpt_sgd_params p = {lr, o->cfg.momentum, wd, o->cfg.nesterov};
    return dpt_sgd_update(be, cnt, &p, w, off, g, off, o->state0, so);
  }
  dpt_adamw_params p = {lr, o->cfg.beta1, o->cfg.beta2, o->cfg.eps, wd, o->steps + 1};
  return dpt_adamw_update(be, cnt, &p, w, off, g, off, o->state0, so, o->state1, so);
}

/* The range's update, cut at tensor boundaries when only some tensors take weight decay. */
static dpt_status update_tensors(dpt_optimizer *o, size_t off, size_t cnt, size_t so, float lr) {
  if ((!o->cfg.decay_weights_only && !o->cfg.no_decay) || o->cfg.weight_decay == 0.0f)
    return update_range(o, off, cnt, so, lr, o->cfg.weight_decay);
  for (size_t t = 0; t < dpt_model_num_tensors(o->model); ++t) {
    dpt_tensor_info ti;
    DPT_TRY(dpt_model_tensor(o->model, t, &ti));
    size_t a = ti.offset > off ? ti.offset : off;
    size_t b = ti.offset + ti.count < off + cnt ? ti.offset + ti.count : off + cnt;
    if (a >= b) continue;
    DPT_TRY(update_range(o, a, b - a, so + (a - off), lr,
                         decays(&o->cfg, &ti) ? o->cfg.weight_decay : 0));
  }
  return DPT_OK;
}

/* The clipping factor of a step from the whole gradient's sum of squares (1: none);
 * DPT_ERR_NONFINITE for a non-finite norm. torch.nn.utils.clip_grad_norm_: scale by
 * clip / (norm + 1e-6) when the norm exceeds clip. */
static dpt_status clip_factor(const dpt_optimizer *o, double sumsq, double *grad_norm,
                              float *scale) {
  *scale = 1.0f;
  if (grad_norm) *grad_norm = 0.0;
  if (o->cfg.clip_norm <= 0.0f) return DPT_OK;
  double norm = sqrt(sumsq);
  if (grad_norm) *grad_norm = norm;
  if (!isfinite(norm))
    return dpt_set_error(DPT_ERR_NONFINITE, "optimizer step %lld: gradient norm is %g",
                         (long long)o->steps + 1, norm);
  if (norm > (double)o->cfg.clip_norm) *scale = (float)((double)o->cfg.clip_norm / (norm + 1e-6));
  return DPT_OK;
}

/* Calls fn on every piece of `ranges` that lies in one tensor: the tensor's index, the piece's
 * parameter offset, length and state offset. */
typedef dpt_status (*piece_fn)(dpt_optimizer *o, size_t t, const dpt_tensor_info *ti, size_t off,
                               size_t cnt, size_t so, void *ctx);
static dpt_status for_pieces(dpt_optimizer *o, const dpt_range *ranges, size_t n, piece_fn fn,
                             void *ctx) {
  for (size_t i = 0; i < n; ++i) {
    const size_t off = ranges[i].offset, cnt = ranges[i].count;
    const size_t so = o->state_off ? o->state_off[i] : off;
    for (size_t t = 0; t < dpt_model_num_tensors(o->model); ++t) {
      dpt_tensor_info ti;
      DPT_TRY(dpt_model_tensor(o->model, t, &ti));
      size_t a = ti.offset > off ? ti.offset : off;
      size_t b = ti.offset + ti.count < off + cnt ? ti.offset + ti.count : off + cnt;
      if (a < b) DPT_TRY(fn(o, t, &ti, a, b - a, so + (a - off), ctx));
    }
  }
  return DPT_OK;
}

/* LAMB phase one on a piece: dir = -(m^ / (sqrt(v^) + eps) + wd w), through AdamW's update at
 * rate 1 of a copy of the weights (w' = w - r, then dir = w' - w); the sums of squares of the
 * weights and of dir into sums[2t], sums[2t + 1]. */
static dpt_status lamb_direction(dpt_optimizer *o, size_t t, const dpt_tensor_info *ti, size_t off,
                                 size_t cnt, size_t so, void *ctx) {
  double *sums = ctx, sq = 0;
  dpt_backend *be = dpt_model_backend(o->model);
  dpt_buffer *w = dpt_model_params(o->model);
  const float wd = decays(&o->cfg, ti) ? o->cfg.weight_decay : 0.0f;
  const dpt_adamw_params p = {1.0f, o->cfg.beta1, o->cfg.beta2, o->cfg.eps, wd, o->steps + 1};
  DPT_TRY(dpt_buffer_copy(o->dir, so * sizeof(float), w, off * sizeof(float), cnt * sizeof(float)));
  DPT_TRY(dpt_adamw_update(be, cnt, &p, o->dir, so, dpt_model_grads(o->model), off, o->state0, so,
                           o->state1, so));
  DPT_TRY(dpt_axpy(be, cnt, -1.0f, w, off, o->dir, so));
  DPT_TRY(dpt_sumsq(be, cnt, w, off, &sq));
  sums[2 * t] += sq;
  DPT_TRY(dpt_sumsq(be, cnt, o->dir, so, &sq));
  sums[2 * t + 1] += sq;
  return DPT_OK;
}

typedef struct lamb_apply_ctx {
  const double *sums;
  float lr;
} lamb_apply_ctx;

/* LAMB phase two on a piece: w += lr * ||w|| / ||r|| * dir, the norms of the whole tensor. */
static dpt_status lamb_apply(dpt_optimizer *o, size_t t, const dpt_tensor_info *ti, size_t off,
                             size_t cnt, size_t so, void *ctx) {
  (void)ti;
  const lamb_apply_ctx *c = ctx;
  const double wn = sqrt(c->sums[2 * t]), rn = sqrt(c->sums[2 * t + 1]);
  const double trust = wn > 0 && rn > 0 ? wn / rn : 1.0;
  return dpt_axpy(dpt_model_backend(o->model), cnt, (float)((double)c->lr * trust), o->dir, so,
                  dpt_model_params(o->model), off);
}

size_t dpt_optimizer_num_sums(const dpt_optimizer *o) {
  return o && o->cfg.kind == DPT_OPTIM_LAMB ? 2 * dpt_model_num_tensors(o->model) : 0;
}

dpt_status dpt_optimizer_prepare_ranges(dpt_optimizer *o, const dpt_range *ranges, size_t n,
                                        double grad_sumsq, double *sums) {
  const char *fn = "dpt_optimizer_prepare_ranges";
  DPT_TRY(check_step_ranges(o, ranges, n, fn));
  if (o->cfg.kind != DPT_OPTIM_LAMB || !sums)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %s", fn,
                         sums ? "only LAMB steps in two phases" : "sums is NULL");
  float scale = 1.0f;
  DPT_TRY(clip_factor(o, grad_sumsq, NULL, &scale));
  for (size_t i = 0; i < n && scale != 1.0f; ++i)
    DPT_TRY(dpt_scale(dpt_model_backend(o->model), ranges[i].count, scale,
                      dpt_model_grads(o->model), ranges[i].offset));
  memset(sums, 0, dpt_optimizer_num_sums(o) * sizeof *sums);
  DPT_TRY(for_pieces(o, ranges, n, lamb_direction, sums));
  o->prepared = 1;
  return DPT_OK;
}

dpt_status dpt_optimizer_finish_ranges(dpt_optimizer *o, const dpt_range *ranges, size_t n,
                                       const double *sums) {
  const char *fn = "dpt_optimizer_finish_ranges";
  DPT_TRY(check_step_ranges(o, ranges, n, fn));
  if (!o->prepared || !sums)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %s", fn,
                         sums ? "no phase one (dpt_optimizer_prepare_ranges) to finish"
                              : "sums is NULL");
  lamb_apply_ctx c = {sums, (float)(dpt_optim_lr_at(&o->cfg, o->steps) * o->lr_scale)};
  o->prepared = 0;
  DPT_TRY(for_pieces(o, ranges, n, lamb_apply, &c));
  ++o->steps;
  return DPT_OK;
}

/* A LAMB step on ranges that hold whole tensors: both phases with this replica's sums. */
static dpt_status lamb_step(dpt_optimizer *o, const dpt_range *ranges, size_t n, double sumsq,
                            double *grad_norm) {
  float scale = 1.0f;
  DPT_TRY(clip_factor(o, sumsq, grad_norm, &scale));
  double *sums = calloc(dpt_optimizer_num_sums(o) + 1, sizeof *sums);
  if (!sums) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "LAMB: out of host memory");
  dpt_status st = dpt_optimizer_prepare_ranges(o, ranges, n, sumsq, sums);
  if (st == DPT_OK) st = dpt_optimizer_finish_ranges(o, ranges, n, sums);
  free(sums);
  return st;
}

/* The update of one step on `ranges`; sumsq: of the whole gradient (used when clipping). */
static dpt_status update(dpt_optimizer *o, const dpt_range *ranges, size_t n, double sumsq,
                         double *grad_norm) {
  if (o->cfg.kind == DPT_OPTIM_LAMB) return lamb_step(o, ranges, n, sumsq, grad_norm);
  dpt_backend *be = dpt_model_backend(o->model);
  dpt_buffer *g = dpt_model_grads(o->model);
  dpt_status st = DPT_OK;
  float clip_scale = 1.0f;
  DPT_TRY(clip_factor(o, sumsq, grad_norm, &clip_scale));
  float lr = (float)(dpt_optim_lr_at(&o->cfg, o->steps) * o->lr_scale);
  for (size_t i = 0; i < n && st == DPT_OK; ++i) {
    const size_t off = ranges[i].offset, cnt = ranges[i].count;
    const size_t so = o->state_off ? o->state_off[i] : off; /* the range's optimizer state */
    if (clip_scale != 1.0f) st = dpt_scale(be, cnt, clip_scale, g, off);
    if (st == DPT_OK) st = update_tensors(o, off, cnt, so, lr);
  }
  if (st == DPT_OK) ++o->steps;
  return st;
}

dpt_status dpt_optimizer_step(dpt_optimizer *o, double *grad_norm) {
  if (!o) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_optimizer_step: optimizer is NULL");
  if (o->shard)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_optimizer_step: this optimizer is sharded "
                                              "(state for its shard only): use "
                                              "dpt_optimizer_step_ranges");
  const dpt_range all = {0, dpt_model_num_params(o->model)};
  double sumsq = 0;
  if (o->cfg.clip_norm > 0.0f) {
    dpt_status st =
        dpt_sumsq(dpt_model_backend(o->model), all.count, dpt_model_grads(o->model), 0, &sumsq);
    if (st != DPT_OK) return st;
  }
  return update(o, &all, 1, sumsq, grad_norm);
}

dpt_status dpt_optimizer_step_ranges(dpt_optimizer *o, const dpt_range *ranges, size_t n,
                                     double grad_sumsq, double *grad_norm) {
  dpt_status st = check_step_ranges(o, ranges, n, "dpt_optimizer_step_ranges");
  if (st != DPT_OK) return st;
  return update(o, ranges, n, grad_sumsq, grad_norm);
}

int dpt_optimizer_steps_in_parts(const dpt_optimizer *o) {
  return o && o->cfg.kind != DPT_OPTIM_LAMB && !(o->cfg.clip_norm > 0.0f);
}

dpt_status dpt_optimizer_step_part(dpt_optimizer *o, const dpt_range *parts, size_t n) {
  const char *fn = "dpt_optimizer_step_part";
  if (!o) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: optimizer is NULL", fn);
  if (!dpt_optimizer_steps_in_parts(o))
    return dpt_set_error(DPT_ERR_UNSUPPORTED, "%s: %s needs the whole gradient first", fn,
                         o->cfg.kind == DPT_OPTIM_LAMB ? "LAMB" : "clipping (clip_norm)");
  DPT_TRY(check_ranges(o->model, parts, n, fn));
  const float lr = dpt_optimizer_lr(o);
  /* Each part's state: at its own offset, or in the sharded optimizer's range that holds it. */
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t off = parts[i].offset, cnt = parts[i].count;
    size_t so = off;
    if (o->shard) {
      while (at < o->nshard && o->shard[at].offset + o->shard[at].count <= off)
        ++at;
      if (at == o->nshard || off < o->shard[at].offset ||
          off + cnt > o->shard[at].offset + o->shard[at].count)
        return dpt_set_error(DPT_ERR_INVALID_ARG,
                             "%s: part %zu [%zu, +%zu) is not inside one of this optimizer's %zu "
                             "shard ranges",
                             fn, i, off, cnt, o->nshard);
      so = o->state_off[at] + (off - o->shard[at].offset);
    }
    if (cnt > 0) DPT_TRY(update_tensors(o, off, cnt, so, lr));
  }
  return DPT_OK;
}

dpt_status dpt_optimizer_end_step(dpt_optimizer *o) {
  if (!o) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_optimizer_end_step: optimizer is NULL");
  ++o->steps;
  return DPT_OK;
}

int dpt_optimizer_num_slots(const dpt_optimizer *o) {
  return !o ? 0 : o->state1 ? 2 : o->state0 ? 1 : 0;
}

const char *dpt_optimizer_slot_name(const dpt_optimizer *o, int slot) {
  if (slot < 0 || slot >= dpt_optimizer_num_slots(o)) return NULL;
  if (o->cfg.kind == DPT_OPTIM_SGD) return "momentum_buffer";
  return slot == 0 ? "exp_avg" : "exp_avg_sq";
}

/* Slot `slot` of the optimizer in *out, after the arguments' checks for `fn`. */
static dpt_status slot_buffer(const dpt_optimizer *o, int slot, const void *host, const char *fn,
                              dpt_buffer **out) {
  if (!o || !host) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: NULL argument", fn);
  if (slot < 0 || slot >= dpt_optimizer_num_slots(o))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: slot %d outside the optimizer's %d", fn, slot,
                         dpt_optimizer_num_slots(o));
  *out = slot == 0 ? o->state0 : o->state1;
  return DPT_OK;
}

dpt_status dpt_optimizer_get_state(const dpt_optimizer *o, int slot, float *host) {
  dpt_buffer *b = NULL;
  DPT_TRY(slot_buffer(o, slot, host, "dpt_optimizer_get_state", &b));
  if (!o->shard)
    return dpt_buffer_download(b, 0, host, dpt_model_num_params(o->model) * sizeof(float));
  for (size_t i = 0; i < o->nshard; ++i)
    DPT_TRY(dpt_buffer_download(b, o->state_off[i] * sizeof(float), host + o->shard[i].offset,
                                o->shard[i].count * sizeof(float)));
  return DPT_OK;
}

dpt_status dpt_optimizer_set_state(dpt_optimizer *o, int slot, const float *host) {
  dpt_buffer *b = NULL;
  DPT_TRY(slot_buffer(o, slot, host, "dpt_optimizer_set_state", &b));
  if (!o->shard)
    return dpt_buffer_upload(b, 0, host, dpt_model_num_params(o->model) * sizeof(float));
  for (size_t i = 0; i < o->nshard; ++i)
    DPT_TRY(dpt_buffer_upload(b, o->state_off[i] * sizeof(float), host + o->shard[i].offset,
                              o->shard[i].count * sizeof(float)));
  return DPT_OK;
}

dpt_status dpt_optimizer_set_steps(dpt_optimizer *o, int64_t steps) {
  if (!o || steps < 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_optimizer_set_steps: %s",
                         o ? "steps must be >= 0" : "optimizer is NULL");
  o->steps = steps;
  return DPT_OK;
}

float dpt_optimizer_lr(const dpt_optimizer *o) {
  return o ? (float)(dpt_optim_lr_at(&o->cfg, o->steps) * o->lr_scale) : 0.0f;
}

dpt_status dpt_optimizer_set_lr_scale(dpt_optimizer *o, double scale) {
  if (!o || !(scale > 0.0) || !isfinite(scale))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_optimizer_set_lr_scale: %s",
                         o ? "the scale must be a positive number" : "optimizer is NULL");
  o->lr_scale = scale;
  return DPT_OK;
}
