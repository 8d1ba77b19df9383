/* The CPU backend's direct convolution through oneDNN: forward, backward-data and
 * backward-weights primitives in the layouts oneDNN picks for this machine ("any": blocked
 * formats on AVX2/AVX-512), the plain [n, c, h, w] tensors reordered in and out through
 * scratch buffers shared by every primitive of the backend. Primitives are cached per shape.
 * Without oneDNN (or with DPT_CPU_CONV=im2col) the ops are off and layers use im2col + gemm. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "base/env.h"
#include "base/error.h"

dpt_status dpt_cpu_conv_select(int *mode) {
  const char *v = dpt_env_get("DPT_CPU_CONV");
  if (!v || !*v || strcmp(v, "onednn") == 0) {
#ifdef DPT_HAVE_ONEDNN
    *mode = DPT_CPU_CONV_ONEDNN;
    return DPT_OK;
#else
    *mode = DPT_CPU_CONV_OFF;
    if (v && *v)
      return dpt_set_error(DPT_ERR_UNSUPPORTED,
                           "cpu: DPT_CPU_CONV=onednn but this build has no oneDNN");
    return DPT_OK;
#endif
  }
  if (strcmp(v, "im2col") == 0 || strcmp(v, "reference") == 0) {
    *mode = v[0] == 'i' ? DPT_CPU_CONV_OFF : DPT_CPU_CONV_REFERENCE;
    return DPT_OK;
  }
  return dpt_set_error(DPT_ERR_INVALID_ARG,
                       "cpu: DPT_CPU_CONV='%s' is not one of onednn, im2col, reference", v);
}

int dpt_cpu_op_enabled(const dpt_backend *be, dpt_op op) {
  const dpt_cpu_ctx *ctx = be->ctx;
  if (op == DPT_OP_CONV2D_FWD || op == DPT_OP_CONV2D_BWD_DATA || op == DPT_OP_CONV2D_BWD_WEIGHTS)
    return ctx && ctx->conv_mode != DPT_CPU_CONV_OFF;
  return 1;
}

enum { CONV_FWD, CONV_BWD_DATA, CONV_BWD_WEIGHTS };

/* ---- the reference: the definition as loops, sums in double ------------------------------ */

/* The input pixel under output (oy, ox) and kernel tap (ki, kj), or -1 in the padding. */
static long conv_src(const dpt_conv_geom *g, size_t oy, size_t ox, size_t ki, size_t kj) {
  long y = (long)(oy * g->stride_h + ki) - (long)g->pad_h;
  long x = (long)(ox * g->stride_w + kj) - (long)g->pad_w;
  if (y < 0 || x < 0 || y >= (long)g->h || x >= (long)g->w) return -1;
  return y * (long)g->w + x;
}

/* mode 0: y = conv(x, w) (+ bias); 1: dx; 2: dw (+ db). One walk over every (sample, output
 * channel, input channel, output pixel, tap) with the roles of the three tensors swapped. */
static void ref_conv(int mode, const dpt_conv_geom *g, size_t co, size_t oh, size_t ow, float *x,
                     float *w, float *y, float *b) {
  size_t kk = g->kh * g->kw, plane = g->h * g->w, op = oh * ow;
  if (mode == 1) memset(x, 0, g->n * g->c * plane * sizeof(float));
  for (size_t o = 0; mode == 2 && o < co; o++)
    for (size_t i = 0; i < g->c * kk; i++) {
      double acc = 0;
      for (size_t n = 0; n < g->n; n++)
        for (size_t p = 0; p < op; p++) {
          long s = conv_src(g, p / ow, p % ow, (i % kk) / g->kw, i % g->kw);
          if (s >= 0) acc += (double)y[(n * co + o) * op + p] * x[(n * g->c + i / kk) * plane + s];
        }
      w[o * g->c * kk + i] = (float)acc;
    }
  for (size_t n = 0; mode != 2 && n < g->n; n++)
    for (size_t o = 0; o < co; o++)
      for (size_t p = 0; p < op; p++) {
        double acc = mode == 0 && b ? b[o] : 0;
        for (size_t i = 0; i < g->c * kk; i++) {
          long s = conv_src(g, p / ow, p % ow, (i % kk) / g->kw, i % g->kw);
          if (s < 0) continue;
          float *xs = &x[(n * g->c + i / kk) * plane + s];
          if (mode == 0)
            acc += (double)w[o * g->c * kk + i] * *xs;
          else
            *xs += w[o * g->c * kk + i] * y[(n * co + o) * op + p];
        }
        if (mode == 0) y[(n * co + o) * op + p] = (float)acc;
      }
  for (size_t o = 0; mode == 2 && b && o < co; o++) {
    double acc = 0;
    for (size_t n = 0; n < g->n; n++)
      for (size_t p = 0; p < op; p++)
        acc += y[(n * co + o) * op + p];
    b[o] = (float)acc;
  }
}

#ifndef DPT_HAVE_ONEDNN

dpt_status dpt_cpu_conv_create(dpt_cpu_conv **out) {
  *out = NULL;
  return DPT_OK;
}
void dpt_cpu_conv_destroy(dpt_cpu_conv *cv) {
  (void)cv;
}
void dpt_cpu_conv_describe(char *text, size_t len) {
  if (len) text[0] = '\0';
}
static dpt_status conv_run(dpt_backend *be, int kind, const dpt_conv_geom *g, size_t co,
                           int has_bias, float *const *ptr) {
  (void)be, (void)kind, (void)g, (void)co, (void)has_bias, (void)ptr;
  return dpt_set_error(DPT_ERR_UNSUPPORTED, "cpu: oneDNN is not in this build");
}

#else

#include <dnnl.h>
#include <omp.h>

enum { CONV_MAX_ARGS = 4, CONV_CACHE = 64 };

/* What a cached primitive was made for. Compared with memcmp: always zero-filled first. */
typedef struct conv_key {
  int kind, has_bias;
  dpt_conv_geom g;
  size_t co;
} conv_key;

/* One argument of a primitive: the plain layout the caller holds, the one the primitive wants,
 * and the reorder between them (NULL when they are the same). */
typedef struct conv_arg {
  int arg, out; /* DNNL_ARG_*, 1 for an output */
  dnnl_memory_desc_t plain, want;
  dnnl_primitive_t reorder;
} conv_arg;

typedef struct conv_entry {
  conv_key key;
  dnnl_primitive_t prim;
  conv_arg args[CONV_MAX_ARGS];
  int nargs;
} conv_entry;

struct dpt_cpu_conv {
  dnnl_engine_t eng;
  dnnl_stream_t stream;
  conv_entry cache[CONV_CACHE];
  size_t used, next; /* entries in use; the next to replace when full */
  void *scratch[CONV_MAX_ARGS];
  size_t scratch_bytes[CONV_MAX_ARGS];
};

static dpt_status dnnl_fail(const char *what, dnnl_status_t s) {
  return dpt_set_error(s == dnnl_out_of_memory ? DPT_ERR_OUT_OF_MEMORY : DPT_ERR_DEVICE,
                       "cpu: oneDNN %s failed (status %d)", what, (int)s);
}
#define DNNL_TRY(what, call)                                                                       \
  do {                                                                                             \
    dnnl_status_t s_ = (call);                                                                     \
    if (s_ != dnnl_success) return dnnl_fail(what, s_);                                            \
  } while (0)

dpt_status dpt_cpu_conv_create(dpt_cpu_conv **out) {
  dpt_cpu_conv *cv = calloc(1, sizeof *cv);
  if (!cv) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "cpu: cannot allocate the conv context");
  dnnl_status_t s = dnnl_engine_create(&cv->eng, dnnl_cpu, 0);
  if (s == dnnl_success) s = dnnl_stream_create(&cv->stream, cv->eng, dnnl_stream_default_flags);
  if (s != dnnl_success) {
    dpt_cpu_conv_destroy(cv);
    return dnnl_fail("engine creation", s);
  }
  *out = cv;
  return DPT_OK;
}

static void entry_free(conv_entry *e) {
  if (e->prim) dnnl_primitive_destroy(e->prim);
  for (int i = 0; i < e->nargs; i++)
    if (e->args[i].reorder) dnnl_primitive_destroy(e->args[i].reorder);
  memset(e, 0, sizeof *e);
}

void dpt_cpu_conv_destroy(dpt_cpu_conv *cv) {
  if (!cv) return;
  for (size_t i = 0; i < cv->used; i++)
    entry_free(&cv->cache[i]);
  for (int i = 0; i < CONV_MAX_ARGS; i++)
    free(cv->scratch[i]);
  if (cv->stream) dnnl_stream_destroy(cv->stream);
  if (cv->eng) dnnl_engine_destroy(cv->eng);
  free(cv);
}

void dpt_cpu_conv_describe(char *text, size_t len) {
  const dnnl_version_t *v = dnnl_version();
  snprintf(text, len, "oneDNN %d.%d.%d conv", v->major, v->minor, v->patch);
}

/* The plain descriptors of x [n,c,h,w], w [co,c,kh,kw], bias [co] and y [n,co,oh,ow]; with
 * any = 1 the same shapes in the layout the primitive chooses (bias stays plain). */
typedef struct conv_mds {
  dnnl_memory_desc_t x, w, b, y;
} conv_mds;

static dpt_status conv_descs(const conv_key *k, int any, conv_mds *d) {
  const dpt_conv_geom *g = &k->g;
  size_t oh = (g->h + 2 * g->pad_h - g->kh) / g->stride_h + 1;
  size_t ow = (g->w + 2 * g->pad_w - g->kw) / g->stride_w + 1;
  dnnl_dims_t xd = {(int64_t)g->n, (int64_t)g->c, (int64_t)g->h, (int64_t)g->w};
  dnnl_dims_t wd = {(int64_t)k->co, (int64_t)g->c, (int64_t)g->kh, (int64_t)g->kw};
  dnnl_dims_t bd = {(int64_t)k->co};
  dnnl_dims_t yd = {(int64_t)g->n, (int64_t)k->co, (int64_t)oh, (int64_t)ow};
  dnnl_format_tag_t act = any ? dnnl_format_tag_any : dnnl_nchw;
  DNNL_TRY("memory desc", dnnl_memory_desc_init_by_tag(&d->x, 4, xd, dnnl_f32, act));
  DNNL_TRY("memory desc", dnnl_memory_desc_init_by_tag(&d->w, 4, wd, dnnl_f32,
                                                       any ? dnnl_format_tag_any : dnnl_oihw));
  DNNL_TRY("memory desc", dnnl_memory_desc_init_by_tag(&d->b, 1, bd, dnnl_f32, dnnl_x));
  DNNL_TRY("memory desc", dnnl_memory_desc_init_by_tag(&d->y, 4, yd, dnnl_f32, act));
  return DPT_OK;
}

/* The forward primitive descriptor (also the hint of the backward ones). */
static dpt_status fwd_pd(dpt_cpu_conv *cv, const conv_key *k, const conv_mds *any,
                         dnnl_primitive_desc_t *pd) {
  dnnl_dims_t st = {(int64_t)k->g.stride_h, (int64_t)k->g.stride_w};
  dnnl_dims_t pad = {(int64_t)k->g.pad_h, (int64_t)k->g.pad_w};
  dnnl_convolution_desc_t d;
  DNNL_TRY("convolution desc", dnnl_convolution_forward_desc_init(
                                   &d, dnnl_forward_training, dnnl_convolution_direct, &any->x,
                                   &any->w, k->has_bias ? &any->b : NULL, &any->y, st, pad, pad));
  DNNL_TRY("convolution primitive desc", dnnl_primitive_desc_create(pd, &d, NULL, cv->eng, NULL));
  return DPT_OK;
}

/* The primitive descriptor of k's kind. */
static dpt_status kind_pd(dpt_cpu_conv *cv, const conv_key *k, dnnl_primitive_desc_t *pd) {
  conv_mds any;
  DPT_TRY(conv_descs(k, 1, &any));
  dnnl_primitive_desc_t fwd;
  DPT_TRY(fwd_pd(cv, k, &any, &fwd));
  if (k->kind == CONV_FWD) {
    *pd = fwd;
    return DPT_OK;
  }
  dnnl_dims_t st = {(int64_t)k->g.stride_h, (int64_t)k->g.stride_w};
  dnnl_dims_t pad = {(int64_t)k->g.pad_h, (int64_t)k->g.pad_w};
  dnnl_convolution_desc_t d;
  dnnl_status_t s =
      k->kind == CONV_BWD_DATA
          ? dnnl_convolution_backward_data_desc_init(&d, dnnl_convolution_direct, &any.x, &any.w,
                                                     &any.y, st, pad, pad)
          : dnnl_convolution_backward_weights_desc_init(&d, dnnl_convolution_direct, &any.x, &any.w,
                                                        k->has_bias ? &any.b : NULL, &any.y, st,
                                                        pad, pad);
  if (s == dnnl_success) s = dnnl_primitive_desc_create(pd, &d, NULL, cv->eng, fwd);
  dnnl_primitive_desc_destroy(fwd);
  if (s != dnnl_success) return dnnl_fail("backward convolution primitive desc", s);
  return DPT_OK;
}

/* Argument i of e: its plain layout, what pd wants, the reorder between them. */
static dpt_status add_arg(dpt_cpu_conv *cv, conv_entry *e, const_dnnl_primitive_desc_t pd, int arg,
                          int out, const dnnl_memory_desc_t *plain) {
  conv_arg *a = &e->args[e->nargs++];
  a->arg = arg;
  a->out = out;
  a->plain = *plain;
  a->want = *dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
  if (dnnl_memory_desc_equal(&a->plain, &a->want)) return DPT_OK;
  dnnl_primitive_desc_t rpd;
  DNNL_TRY(
      "reorder primitive desc",
      out ? dnnl_reorder_primitive_desc_create(&rpd, &a->want, cv->eng, &a->plain, cv->eng, NULL)
          : dnnl_reorder_primitive_desc_create(&rpd, &a->plain, cv->eng, &a->want, cv->eng, NULL));
  dnnl_status_t s = dnnl_primitive_create(&a->reorder, rpd);
  dnnl_primitive_desc_destroy(rpd);
  if (s != dnnl_success) return dnnl_fail("reorder primitive", s);
  return DPT_OK;
}

/* The arguments of each kind in the order the caller's pointers come. */
static dpt_status add_args(dpt_cpu_conv *cv, conv_entry *e, const_dnnl_primitive_desc_t pd) {
  conv_mds p;
  DPT_TRY(conv_descs(&e->key, 0, &p));
  switch (e->key.kind) {
  case CONV_FWD:
    DPT_TRY(add_arg(cv, e, pd, DNNL_ARG_SRC, 0, &p.x));
    DPT_TRY(add_arg(cv, e, pd, DNNL_ARG_WEIGHTS, 0, &p.w));
    DPT_TRY(add_arg(cv, e, pd, DNNL_ARG_DST, 1, &p.y));
    if (e->key.has_bias) DPT_TRY(add_arg(cv, e, pd, DNNL_ARG_BIAS, 0, &p.b));
    return DPT_OK;
  case CONV_BWD_DATA:
    DPT_TRY(add_arg(cv, e, pd, DNNL_ARG_DIFF_DST, 0, &p.y));
    DPT_TRY(add_arg(cv, e, pd, DNNL_ARG_WEIGHTS, 0, &p.w));
    DPT_TRY(add_arg(cv, e, pd, DNNL_ARG_DIFF_SRC, 1, &p.x));
    return DPT_OK;
  default:
    DPT_TRY(add_arg(cv, e, pd, DNNL_ARG_SRC, 0, &p.x));
    DPT_TRY(add_arg(cv, e, pd, DNNL_ARG_DIFF_DST, 0, &p.y));
    DPT_TRY(add_arg(cv, e, pd, DNNL_ARG_DIFF_WEIGHTS, 1, &p.w));
    if (e->key.has_bias) DPT_TRY(add_arg(cv, e, pd, DNNL_ARG_DIFF_BIAS, 1, &p.b));
    return DPT_OK;
  }
}

static dpt_status entry_make(dpt_cpu_conv *cv, conv_entry *e) {
  dnnl_primitive_desc_t pd;
  DPT_TRY(kind_pd(cv, &e->key, &pd));
  dpt_status st = add_args(cv, e, pd);
  dnnl_status_t s = st == DPT_OK ? dnnl_primitive_create(&e->prim, pd) : dnnl_success;
  dnnl_primitive_desc_destroy(pd);
  if (s != dnnl_success) return dnnl_fail("convolution primitive", s);
  return st;
}

/* The cached entry for k, made on first use (the oldest replaced when the cache is full). */
static dpt_status entry_for(dpt_cpu_conv *cv, const conv_key *k, conv_entry **out) {
  for (size_t i = 0; i < cv->used; i++)
    if (memcmp(&cv->cache[i].key, k, sizeof *k) == 0) {
      *out = &cv->cache[i];
      return DPT_OK;
    }
  conv_entry *e = &cv->cache[cv->used < CONV_CACHE ? cv->used++ : cv->next];
  if (cv->used == CONV_CACHE) cv->next = (cv->next + 1) % CONV_CACHE;
  entry_free(e);
  e->key = *k;
  dpt_status st = entry_make(cv, e);
  if (st != DPT_OK) {
    entry_free(e);
    e->key.kind = -1; /* matches no request */
    return st;
  }
  *out = e;
  return DPT_OK;
}

static dpt_status scratch(dpt_cpu_conv *cv, int i, size_t bytes, void **p) {
  if (bytes > cv->scratch_bytes[i]) {
    void *n = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!n) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "cpu: conv scratch of %zu bytes", bytes);
    free(cv->scratch[i]);
    cv->scratch[i] = n;
    cv->scratch_bytes[i] = bytes;
  }
  *p = cv->scratch[i];
  return DPT_OK;
}

/* Runs e on the caller's plain tensors ptr[i] (in the order of e's arguments): inputs reordered
 * into scratch where the primitive wants another layout, the primitive, outputs reordered back. */
static dpt_status entry_run(dpt_cpu_conv *cv, const conv_entry *e, float *const *ptr) {
  dnnl_memory_t user[CONV_MAX_ARGS] = {0}, inner[CONV_MAX_ARGS] = {0};
  dnnl_exec_arg_t args[CONV_MAX_ARGS];
  dpt_status st = DPT_OK;
  dnnl_status_t s = dnnl_success;
  for (int i = 0; i < e->nargs && st == DPT_OK && s == dnnl_success; i++) {
    const conv_arg *a = &e->args[i];
    void *in = ptr[i];
    s = dnnl_memory_create(&user[i], &a->plain, cv->eng, ptr[i]);
    if (s == dnnl_success && a->reorder)
      st = scratch(cv, i, dnnl_memory_desc_get_size(&a->want), &in);
    if (st == DPT_OK && s == dnnl_success && a->reorder)
      s = dnnl_memory_create(&inner[i], &a->want, cv->eng, in);
    args[i] = (dnnl_exec_arg_t){a->arg, inner[i] ? inner[i] : user[i]};
    if (st == DPT_OK && s == dnnl_success && a->reorder && !a->out) {
      dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, user[i]}, {DNNL_ARG_TO, inner[i]}};
      s = dnnl_primitive_execute(a->reorder, cv->stream, 2, r);
    }
  }
  if (st == DPT_OK && s == dnnl_success)
    s = dnnl_primitive_execute(e->prim, cv->stream, e->nargs, args);
  for (int i = 0; i < e->nargs && st == DPT_OK && s == dnnl_success; i++) {
    if (!e->args[i].reorder || !e->args[i].out) continue;
    dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, inner[i]}, {DNNL_ARG_TO, user[i]}};
    s = dnnl_primitive_execute(e->args[i].reorder, cv->stream, 2, r);
  }
  if (st == DPT_OK && s == dnnl_success) s = dnnl_stream_wait(cv->stream);
  for (int i = 0; i < e->nargs; i++) {
    if (user[i]) dnnl_memory_destroy(user[i]);
    if (inner[i]) dnnl_memory_destroy(inner[i]);
  }
  if (st != DPT_OK) return st;
  return s == dnnl_success ? DPT_OK : dnnl_fail("convolution", s);
}

static dpt_status conv_run(dpt_backend *be, int kind, const dpt_conv_geom *g, size_t co,
                           int has_bias, float *const *ptr) {
  dpt_cpu_conv *cv = ((dpt_cpu_ctx *)be->ctx)->conv;
  if (!cv) return dpt_set_error(DPT_ERR_UNSUPPORTED, "cpu: direct convolution is off here");
  /* One thread, in the caller's: oneDNN's kernels and their sums over the batch then do not
   * depend on the machine's core count, and replicas in one process do not oversubscribe. */
  omp_set_num_threads(1);
  conv_key k;
  memset(&k, 0, sizeof k);
  k.kind = kind;
  k.has_bias = has_bias;
  k.g = *g;
  k.co = co;
  conv_entry *e;
  DPT_TRY(entry_for(cv, &k, &e));
  return entry_run(cv, e, ptr);
}

#endif

/* ---- the op entries: the reference or oneDNN, as the backend was created ----------------- */

/* The loops where asked for, or where oneDNN takes no empty dimension (the sums over none). */
static int conv_ref(dpt_backend *be, const dpt_conv_geom *g) {
  return ((dpt_cpu_ctx *)be->ctx)->conv_mode == DPT_CPU_CONV_REFERENCE || g->n == 0 || g->c == 0;
}

dpt_status dpt_cpu_conv2d_fwd(dpt_backend *be, const dpt_conv2d_fwd_args *a) {
  int bias = a->bias.buf != NULL;
  float *ptr[4] = {dpt_cpu_f32(a->x), dpt_cpu_f32(a->w), dpt_cpu_f32(a->y),
                   bias ? dpt_cpu_f32(a->bias) : NULL};
  if (!conv_ref(be, &a->g)) return conv_run(be, CONV_FWD, &a->g, a->co, bias, ptr);
  ref_conv(0, &a->g, a->co, a->out_h, a->out_w, ptr[0], ptr[1], ptr[2], ptr[3]);
  return DPT_OK;
}

dpt_status dpt_cpu_conv2d_bwd_data(dpt_backend *be, const dpt_conv2d_bwd_data_args *a) {
  float *ptr[3] = {dpt_cpu_f32(a->dy), dpt_cpu_f32(a->w), dpt_cpu_f32(a->dx)};
  if (!conv_ref(be, &a->g)) return conv_run(be, CONV_BWD_DATA, &a->g, a->co, 0, ptr);
  ref_conv(1, &a->g, a->co, a->out_h, a->out_w, ptr[2], ptr[1], ptr[0], NULL);
  return DPT_OK;
}

dpt_status dpt_cpu_conv2d_bwd_weights(dpt_backend *be, const dpt_conv2d_bwd_weights_args *a) {
  int bias = a->db.buf != NULL;
  float *ptr[4] = {dpt_cpu_f32(a->x), dpt_cpu_f32(a->dy), dpt_cpu_f32(a->dw),
                   bias ? dpt_cpu_f32(a->db) : NULL};
  if (conv_ref(be, &a->g)) {
    ref_conv(2, &a->g, a->co, a->out_h, a->out_w, ptr[0], ptr[2], ptr[1], ptr[3]);
    return DPT_OK;
  }
  return conv_run(be, CONV_BWD_WEIGHTS, &a->g, a->co, bias, ptr);
}
