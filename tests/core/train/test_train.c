/* The training core: the equivalence at the heart of the product (R replicas behave exactly
 * like one replica on the combined batch), whole-model gradients against finite differences,
 * weights files, and what bad input gets.
 *
 * Run without arguments: threads transport. Run as `test_train mpi` under mpiexec: every rank
 * trains as one replica over MPI and compares with a one-replica run it computes itself. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/train/optimizer.h"
#include "dptrain/advanced.h"
#include "tools/prep/vocab.h"
#include "train_data.h"

static void mlp_config(dpt_train_config *cfg, dpt_dataset *train, size_t batch) {
  dpt_train_config_default(cfg);
  const size_t hidden[2] = {32, 16};
  ck_assert_int_eq(dpt_model_spec_mlp(&cfg->model, 1, 8, 8, hidden, 2, 10), DPT_OK);
  cfg->data.train = train;
  cfg->schedule.global_batch = batch;
  cfg->schedule.epochs = 100;
  cfg->schedule.max_steps = 20;
  cfg->schedule.seed = 7;
  cfg->checks.check_every = 5;
  cfg->optim.lr = 0.05f;
  cfg->optim.momentum = 0.9f;
}

static double max_rel_diff(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (d > num) num = d;
    if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
  }
  return num / (den > 0 ? den : 1);
}

/* The model's parameter count (0 when it cannot be built); plain C, so that the MPI tests
 * outside Check use it too. */
static size_t num_params(const dpt_model_spec *spec) {
  dpt_backend *be = NULL;
  dpt_model *m = NULL;
  size_t n = 0;
  if (dpt_backend_create(DPT_BACKEND_CPU, 0, &be) == DPT_OK &&
      dpt_model_create(be, spec, 1, &m) == DPT_OK)
    n = dpt_model_num_params(m);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
  return n;
}

/* Trains cfg with `replicas` threads; returns the final parameters (malloc'd). */
static float *train_threads(dpt_train_config cfg, int replicas, dpt_train_report *rep) {
  size_t n = num_params(&cfg.model);
  float *out = malloc(n * sizeof(float));
  cfg.devices.replicas = replicas;
  cfg.final_params = out;
  dpt_status st = dpt_train(&cfg, NULL, rep);
  ck_assert_msg(st == DPT_OK, "%d replicas: %s: %s", replicas, dpt_status_str(st),
                dpt_last_error());
  return out;
}

static void check_equivalence(size_t n_samples, size_t batch, int keep_last, int max_r) {
  dpt_dataset *ds = make_data(n_samples, 11);
  dpt_train_config cfg;
  mlp_config(&cfg, ds, batch);
  cfg.schedule.keep_last = keep_last;
  size_t n = num_params(&cfg.model);
  dpt_train_report r1, rr;
  float *ref = train_threads(cfg, 1, &r1);
  ck_assert_int_eq(r1.steps, 20);
  ck_assert(r1.imbalance_seconds == 0.0); /* one replica cannot be uneven */
  for (int r = 2; r <= max_r; ++r) {
    float *got = train_threads(cfg, r, &rr);
    double d = max_rel_diff(got, ref, n);
    ck_assert_msg(d <= 1e-5, "R=%d B=%zu: parameters differ from one replica by %g (rel)", r, batch,
                  d);
    ck_assert_int_eq(rr.replicas, r);
    ck_assert_int_eq(rr.steps, 20);
    /* Replicas' step times are never all equal to the nanosecond: the slowest is above the
     * mean, by less than the run took. */
    ck_assert_msg(rr.imbalance_seconds > 0 && rr.imbalance_seconds < rr.seconds,
                  "R=%d: imbalance %g s in a %g s run", r, rr.imbalance_seconds, rr.seconds);
    free(got);
  }
  /* Training moved the parameters away from their initialization. */
  dpt_train_config c0 = cfg;
  c0.schedule.max_steps = 1;
  c0.optim.lr = 1e-30f;
  float *init = train_threads(c0, 1, &rr);
  ck_assert_double_gt(max_rel_diff(ref, init, n), 1e-3);
  free(init);
  free(ref);
  dpt_dataset_destroy(ds);
}

START_TEST(equivalence_even) {
  check_equivalence(640, 64, 0, 4);
}
END_TEST

START_TEST(equivalence_uneven) {
  /* B = 250 over 3 and 4 replicas: slices 84/83/83 and 63/63/62/62. */
  check_equivalence(1000, 250, 0, 4);
}
END_TEST

START_TEST(equivalence_keep_last) {
  /* 203 samples, B = 50: four full batches and a last one of 3 (fewer than 4 replicas). */
  check_equivalence(203, 50, 1, 4);
}
END_TEST

START_TEST(cnn_equivalence) {
  dpt_dataset *ds = make_data(96, 5);
  dpt_train_config cfg;
  mlp_config(&cfg, ds, 32);
  ck_assert_int_eq(dpt_model_spec_cnn(&cfg.model, 1, 8, 8, 4, 6, 10), DPT_OK);
  cfg.schedule.max_steps = 6;
  size_t n = num_params(&cfg.model);
  dpt_train_report rep;
  float *ref = train_threads(cfg, 1, &rep);
  float *got = train_threads(cfg, 3, &rep);
  double d = max_rel_diff(got, ref, n);
  ck_assert_msg(d <= 1e-5, "cnn R=3: parameters differ by %g (rel)", d);
  free(ref);
  free(got);
  dpt_dataset_destroy(ds);
}
END_TEST

/* The sharded step (the default) against the full step (all-reduce, whole optimizer on every
 * replica): with the ring all-reduce the parameters are the same bits; with clipping the
 * norm is summed per shard, so only rounding may differ. Tiny ring blocks give every replica
 * several shard ranges. */
START_TEST(sharded_matches_full_step) {
  dpt_dataset *ds = make_data(640, 13);
  ck_assert_int_eq(setenv("DPT_ALLREDUCE_ALGO", "ring", 1), 0);
  for (int tiny = 0; tiny < 2; ++tiny) {
    if (tiny) {
      ck_assert_int_eq(setenv("DPT_COMM_BLOCK", "1K", 1), 0);
      ck_assert_int_eq(setenv("DPT_COMM_PIECE", "256", 1), 0);
    }
    for (int o = 0; o < 4; ++o) {
      dpt_train_config cfg;
      mlp_config(&cfg, ds, 64);
      if (o == 1) {
        cfg.optim.nesterov = 1;
        cfg.optim.weight_decay = 1e-3f;
      } else if (o == 2) {
        dpt_optim_config_default(&cfg.optim, DPT_OPTIM_ADAMW);
      } else if (o == 3) {
        cfg.optim.clip_norm = 0.05f; /* below the gradient norm: clips every step */
      }
      size_t n = num_params(&cfg.model);
      dpt_train_report rep;
      float *one = train_threads(cfg, 1, &rep);
      for (int r = 2; r <= 4; ++r) {
        float *sharded = train_threads(cfg, r, &rep);
        dpt_train_config full_cfg = cfg;
        full_cfg.exchange.full_optimizer_step = 1;
        float *full = train_threads(full_cfg, r, &rep);
        if (o == 3)
          ck_assert_msg(max_rel_diff(sharded, full, n) <= 1e-6, "clip R=%d: %g", r,
                        max_rel_diff(sharded, full, n));
        else
          ck_assert_msg(memcmp(sharded, full, n * sizeof(float)) == 0,
                        "optimizer %d R=%d tiny %d: sharded and full steps differ by %g", o, r,
                        tiny, max_rel_diff(sharded, full, n));
        ck_assert_msg(max_rel_diff(sharded, one, n) <= 1e-5, "optimizer %d R=%d: %g from R=1", o, r,
                      max_rel_diff(sharded, one, n));
        free(sharded);
        free(full);
      }
      free(one);
    }
  }
  unsetenv("DPT_COMM_BLOCK");
  unsetenv("DPT_COMM_PIECE");
  unsetenv("DPT_COMM_PIECE");
  unsetenv("DPT_ALLREDUCE_ALGO");
  dpt_dataset_destroy(ds);
}
END_TEST

/* A sharded optimizer (state for its ranges only, packed) steps exactly like a full one
 * stepped on the same ranges, and so do both stepped in parts (dpt_optimizer_step_part in the
 * buckets' order, the end of the parameters first, then dpt_optimizer_end_step), for SGD with
 * momentum and AdamW with weight decay on weights only (parts cut inside tensors); parts do
 * not count as steps. A sharded optimizer refuses other ranges, parts across or outside its
 * ranges, and the full step; clipping and LAMB refuse parts. */
START_TEST(optimizer_sharded_state) {
  dpt_model_spec spec;
  const size_t hidden[1] = {40};
  ck_assert_int_eq(dpt_model_spec_mlp(&spec, 1, 8, 8, hidden, 1, 10), DPT_OK);
  dpt_backend *be;
  ck_assert_int_eq(dpt_backend_create(DPT_BACKEND_CPU, 0, &be), DPT_OK);
  const dpt_range rg[3] = {{3, 100}, {500, 250}, {2000, 10}};
  /* rg in two calls, the later ranges first: bucket 0 [450, end), bucket 1 [0, 450) */
  const dpt_range late[3] = {{500, 120}, {620, 130}, {2000, 10}}, early[2] = {{3, 50}, {53, 50}};
  for (int kind = 0; kind < 2; ++kind) {
    dpt_optim_config oc;
    dpt_optim_config_default(&oc, kind ? DPT_OPTIM_ADAMW : DPT_OPTIM_SGD);
    oc.momentum = kind ? 0.0f : 0.9f;
    oc.weight_decay = 0.01f;
    oc.decay_weights_only = 1;
    /* 0, 1: full and sharded, step_ranges; 2, 3: full and sharded, in parts */
    dpt_model *m[4];
    dpt_optimizer *o[4];
    for (int i = 0; i < 4; ++i) {
      ck_assert_int_eq(dpt_model_create(be, &spec, 4, &m[i]), DPT_OK);
      ck_assert_int_eq(dpt_model_init(m[i], 3), DPT_OK);
      ck_assert_int_eq(i % 2 ? dpt_optimizer_create_sharded(m[i], &oc, rg, 3, &o[i])
                             : dpt_optimizer_create(m[i], &oc, &o[i]),
                       DPT_OK);
    }
    ck_assert(dpt_optimizer_steps_in_parts(o[3]));
    size_t n = dpt_model_num_params(m[0]);
    float *g = malloc(n * sizeof *g), *w[4];
    for (int step = 0; step < 3; ++step) {
      for (size_t e = 0; e < n; ++e)
        g[e] = (float)sin((double)e * 0.7 + step) * 0.01f;
      for (int i = 0; i < 4; ++i)
        ck_assert_int_eq(dpt_buffer_upload(dpt_model_grads(m[i]), 0, g, n * sizeof *g), DPT_OK);
      for (int i = 0; i < 2; ++i)
        ck_assert_msg(dpt_optimizer_step_ranges(o[i], rg, 3, 0.0, NULL) == DPT_OK, "%s",
                      dpt_last_error());
      for (int i = 2; i < 4; ++i) {
        ck_assert_msg(dpt_optimizer_step_part(o[i], late, 3) == DPT_OK, "%s", dpt_last_error());
        ck_assert_int_eq(dpt_optimizer_step_part(o[i], early, 2), DPT_OK);
        ck_assert_int_eq(dpt_optimizer_steps(o[i]), step);
        ck_assert_int_eq(dpt_optimizer_end_step(o[i]), DPT_OK);
      }
    }
    for (int i = 0; i < 4; ++i) {
      w[i] = malloc(n * sizeof(float));
      ck_assert_int_eq(dpt_model_get_params(m[i], w[i]), DPT_OK);
      ck_assert_msg(memcmp(w[0], w[i], n * sizeof(float)) == 0, "kind %d: optimizer %d differs",
                    kind, i);
    }
    /* Not its shard, parts across or outside its ranges, or the full step: refused, nothing
     * changed. */
    const dpt_range other[3] = {{3, 100}, {500, 250}, {2000, 11}};
    const dpt_range across[1] = {{90, 500}}, outside[1] = {{200, 10}};
    ck_assert_int_eq(dpt_optimizer_step_ranges(o[1], other, 3, 0.0, NULL), DPT_ERR_INVALID_ARG);
    ck_assert_int_eq(dpt_optimizer_step_ranges(o[1], rg, 2, 0.0, NULL), DPT_ERR_INVALID_ARG);
    ck_assert_int_eq(dpt_optimizer_step_part(o[1], across, 1), DPT_ERR_INVALID_ARG);
    ck_assert_int_eq(dpt_optimizer_step_part(o[1], outside, 1), DPT_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(dpt_last_error(), "shard ranges"));
    ck_assert_int_eq(dpt_optimizer_step(o[1], NULL), DPT_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(dpt_last_error(), "sharded"));
    ck_assert_int_eq(dpt_optimizer_steps(o[1]), 3);
    ck_assert_int_eq(dpt_model_get_params(m[1], w[1]), DPT_OK);
    ck_assert_int_eq(memcmp(w[0], w[1], n * sizeof(float)), 0);
    for (int i = 0; i < 4; ++i) {
      dpt_optimizer_destroy(o[i]);
      dpt_model_destroy(m[i]);
      free(w[i]);
    }
    free(g);
  }
  /* Bad shards are refused at creation. */
  dpt_model *m;
  dpt_optimizer *o = NULL;
  dpt_optim_config oc;
  dpt_optim_config_default(&oc, DPT_OPTIM_SGD);
  ck_assert_int_eq(dpt_model_create(be, &spec, 4, &m), DPT_OK);
  const dpt_range overlap[2] = {{0, 10}, {5, 10}}, past[1] = {{0, (size_t)1 << 40}};
  ck_assert_int_eq(dpt_optimizer_create_sharded(m, &oc, overlap, 2, &o), DPT_ERR_INVALID_ARG);
  ck_assert_int_eq(dpt_optimizer_create_sharded(m, &oc, past, 1, &o), DPT_ERR_INVALID_ARG);
  ck_assert_int_eq(dpt_optimizer_create_sharded(m, &oc, NULL, 1, &o), DPT_ERR_INVALID_ARG);
  ck_assert_ptr_null(o);
  ck_assert_int_eq(dpt_optimizer_create_sharded(m, &oc, NULL, 0, &o), DPT_OK); /* empty shard */
  ck_assert_int_eq(dpt_optimizer_step_ranges(o, NULL, 0, 0.0, NULL), DPT_OK);
  dpt_optimizer_destroy(o);
  /* Clipping and LAMB need the whole gradient first. */
  for (int k = 0; k < 2; ++k) {
    dpt_optim_config_default(&oc, k ? DPT_OPTIM_LAMB : DPT_OPTIM_SGD);
    oc.clip_norm = k ? 0.0f : 1.0f;
    ck_assert_int_eq(dpt_optimizer_create(m, &oc, &o), DPT_OK);
    ck_assert(!dpt_optimizer_steps_in_parts(o));
    ck_assert_int_eq(dpt_optimizer_step_part(o, rg, 3), DPT_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(dpt_last_error(), k ? "LAMB" : "clip_norm"));
    dpt_optimizer_destroy(o);
  }
  ck_assert_int_eq(dpt_optimizer_step_part(NULL, rg, 3), DPT_ERR_INVALID_ARG);
  ck_assert_int_eq(dpt_optimizer_end_step(NULL), DPT_ERR_INVALID_ARG);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
}
END_TEST

/* Which tensors take weight decay: all; weights only (decay_weights_only); none that no_decay
 * names. With zero gradients one AdamW step scales a decayed tensor by exactly 1 - lr * wd and
 * leaves the others as they were. Also the linear schedule's rates. */
START_TEST(weight_decay_scope) {
  dpt_model_spec spec;
  const size_t hidden[1] = {6};
  ck_assert_int_eq(dpt_model_spec_mlp(&spec, 1, 2, 2, hidden, 1, 3), DPT_OK); /* 1.*, 3.* */
  dpt_backend *be;
  ck_assert_int_eq(dpt_backend_create(DPT_BACKEND_CPU, 0, &be), DPT_OK);
  struct {
    int weights_only;
    const char *no_decay;
    int decayed[4]; /* 1.weight, 1.bias, 3.weight, 3.bias */
  } cases[] = {{0, NULL, {1, 1, 1, 1}},
               {1, NULL, {1, 0, 1, 0}},
               {0, "*.bias", {1, 0, 1, 0}},
               {0, "3.*,nothing", {1, 1, 0, 0}},
               {1, "1.w*", {0, 0, 1, 0}}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    dpt_optim_config oc;
    dpt_optim_config_default(&oc, DPT_OPTIM_ADAMW);
    oc.lr = 0.5f;
    oc.weight_decay = 0.5f;
    oc.decay_weights_only = cases[c].weights_only;
    oc.no_decay = cases[c].no_decay;
    dpt_model *m;
    dpt_optimizer *o;
    ck_assert_int_eq(dpt_model_create(be, &spec, 1, &m), DPT_OK);
    ck_assert_int_eq(dpt_model_init(m, 3), DPT_OK);
    ck_assert_int_eq(dpt_optimizer_create(m, &oc, &o), DPT_OK);
    const size_t n = dpt_model_num_params(m);
    float *w0 = malloc(n * sizeof(float)), *w1 = malloc(n * sizeof(float));
    ck_assert_int_eq(dpt_model_get_params(m, w0), DPT_OK);
    ck_assert_int_eq(dpt_buffer_fill_f32(dpt_model_grads(m), 0, n, 0.0f), DPT_OK);
    ck_assert_int_eq(dpt_optimizer_step(o, NULL), DPT_OK);
    ck_assert_int_eq(dpt_model_get_params(m, w1), DPT_OK);
    for (size_t t = 0; t < dpt_model_num_tensors(m); ++t) {
      dpt_tensor_info ti;
      ck_assert_int_eq(dpt_model_tensor(m, t, &ti), DPT_OK);
      const float f = cases[c].decayed[t] ? 0.75f : 1.0f;
      for (size_t e = ti.offset; e < ti.offset + ti.count; ++e)
        ck_assert_msg(w1[e] == w0[e] * f, "case %zu, %s[%zu]: %g from %g", c, ti.name,
                      e - ti.offset, (double)w1[e], (double)w0[e]);
    }
    dpt_optimizer_destroy(o);
    dpt_model_destroy(m);
    free(w0);
    free(w1);
  }
  dpt_backend_destroy(be);
  /* linear: from lr to min_lr over total_steps after the warmup, then min_lr */
  dpt_optim_config lin;
  dpt_optim_config_default(&lin, DPT_OPTIM_ADAMW);
  lin.schedule = DPT_SCHEDULE_LINEAR;
  lin.lr = 1.0f;
  lin.min_lr = 0.25f;
  lin.warmup_steps = 2;
  lin.total_steps = 4;
  const double want[] = {0.5, 1.0, 1.0, 0.8125, 0.625, 0.4375, 0.25, 0.25};
  for (int st = 0; st < 8; ++st)
    ck_assert_msg(fabs(dpt_optim_lr_at(&lin, st) - want[st]) < 1e-12, "step %d: %g", st,
                  dpt_optim_lr_at(&lin, st));
  lin.total_steps = 0;
  ck_assert_int_eq(dpt_optim_config_check(&lin), DPT_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(dpt_last_error(), "linear schedule"));
}
END_TEST

/* LAMB by hand on a host copy: the moments, the direction r = m^ / (sqrt(v^) + eps) + wd w, and
 * w -= lr * ||w|| / ||r|| * r per tensor; two steps with fixed gradients, within float rounding
 * of the library's. Then the sharded two-phase step with the sums of two halves added matches
 * the whole step. */
static void lamb_reference(const dpt_model *m, float *w, float *mo, float *ve, const float *g,
                           int64_t step, const dpt_optim_config *oc) {
  const double bc1 = 1 - pow(oc->beta1, (double)step), bc2 = 1 - pow(oc->beta2, (double)step);
  for (size_t t = 0; t < dpt_model_num_tensors(m); ++t) {
    dpt_tensor_info ti;
    dpt_model_tensor(m, t, &ti);
    double wn = 0, rn = 0;
    double *r = malloc(ti.count * sizeof *r);
    for (size_t k = 0; k < ti.count; ++k) {
      const size_t e = ti.offset + k;
      mo[e] = oc->beta1 * mo[e] + (1 - oc->beta1) * g[e];
      ve[e] = oc->beta2 * ve[e] + (1 - oc->beta2) * g[e] * g[e];
      r[k] = mo[e] / bc1 / (sqrt(ve[e] / bc2) + oc->eps) + oc->weight_decay * w[e];
      wn += (double)w[e] * w[e];
      rn += r[k] * r[k];
    }
    const double trust = wn > 0 && rn > 0 ? sqrt(wn / rn) : 1;
    for (size_t k = 0; k < ti.count; ++k)
      w[ti.offset + k] -= (float)(oc->lr * trust * r[k]);
    free(r);
  }
}

START_TEST(lamb_by_hand) {
  dpt_model_spec spec;
  const size_t hidden[1] = {12};
  ck_assert_int_eq(dpt_model_spec_mlp(&spec, 1, 3, 3, hidden, 1, 4), DPT_OK);
  dpt_backend *be;
  ck_assert_int_eq(dpt_backend_create(DPT_BACKEND_CPU, 0, &be), DPT_OK);
  dpt_optim_config oc;
  dpt_optim_config_default(&oc, DPT_OPTIM_LAMB);
  oc.lr = 0.02f;
  dpt_model *m[2];
  dpt_optimizer *o[2];
  for (int i = 0; i < 2; ++i) {
    ck_assert_int_eq(dpt_model_create(be, &spec, 1, &m[i]), DPT_OK);
    ck_assert_int_eq(dpt_model_init(m[i], 5), DPT_OK);
  }
  const size_t n = dpt_model_num_params(m[0]);
  const dpt_range whole = {0, n}, half[2] = {{0, n / 2}, {n / 2, n - n / 2}};
  ck_assert_int_eq(dpt_optimizer_create(m[0], &oc, &o[0]), DPT_OK);
  ck_assert_int_eq(dpt_optimizer_create(m[1], &oc, &o[1]), DPT_OK);
  ck_assert_uint_eq(dpt_optimizer_num_sums(o[0]), 2 * dpt_model_num_tensors(m[0]));
  float *w = malloc(n * sizeof *w), *mo = calloc(n, sizeof *mo), *ve = calloc(n, sizeof *ve),
        *g = malloc(n * sizeof *g), *got = malloc(n * sizeof *got);
  double *sums = calloc(dpt_optimizer_num_sums(o[0]), sizeof *sums),
         *part = calloc(dpt_optimizer_num_sums(o[0]), sizeof *part);
  ck_assert_int_eq(dpt_model_get_params(m[0], w), DPT_OK);
  for (int step = 1; step <= 2; ++step) {
    for (size_t e = 0; e < n; ++e)
      g[e] = (float)cos((double)e * 0.37 + step) * 0.1f;
    for (int i = 0; i < 2; ++i)
      ck_assert_int_eq(dpt_buffer_upload(dpt_model_grads(m[i]), 0, g, n * sizeof *g), DPT_OK);
    ck_assert_int_eq(dpt_optimizer_step_ranges(o[0], &whole, 1, 0.0, NULL), DPT_OK);
    /* Two "replicas": each half's partial sums, added, then each half's update. */
    memset(sums, 0, dpt_optimizer_num_sums(o[1]) * sizeof *sums);
    for (int h = 0; h < 2; ++h) {
      ck_assert_int_eq(dpt_optimizer_prepare_ranges(o[1], &half[h], 1, 0.0, part), DPT_OK);
      for (size_t k = 0; k < dpt_optimizer_num_sums(o[1]); ++k)
        sums[k] += part[k];
    }
    ck_assert_int_eq(dpt_optimizer_finish_ranges(o[1], half, 2, sums), DPT_OK);
    lamb_reference(m[0], w, mo, ve, g, step, &oc);
  }
  ck_assert_int_eq(dpt_model_get_params(m[0], got), DPT_OK);
  for (size_t e = 0; e < n; ++e)
    ck_assert_msg(fabsf(got[e] - w[e]) <= 1e-6f * (1 + fabsf(w[e])), "w[%zu] %g, by hand %g", e,
                  (double)got[e], (double)w[e]);
  ck_assert_int_eq(dpt_model_get_params(m[1], w), DPT_OK);
  for (size_t e = 0; e < n; ++e)
    ck_assert_msg(fabsf(got[e] - w[e]) <= 1e-6f * (1 + fabsf(w[e])), "two phases, w[%zu] %g vs %g",
                  e, (double)w[e], (double)got[e]);
  ck_assert_int_eq(dpt_optimizer_steps(o[1]), 2);
  /* Phase two without phase one, or two phases of another optimizer: refused. */
  ck_assert_int_eq(dpt_optimizer_finish_ranges(o[1], &whole, 1, sums), DPT_ERR_INVALID_ARG);
  for (int i = 0; i < 2; ++i) {
    dpt_optimizer_destroy(o[i]);
    dpt_model_destroy(m[i]);
  }
  free(w);
  free(mo);
  free(ve);
  free(g);
  free(got);
  free(sums);
  free(part);
  dpt_backend_destroy(be);
}
END_TEST

/* LAMB data-parallel: 2 and 3 replicas with the sharded step (the per-tensor norms summed over
 * the replicas) and 2 with the full step match one replica within 1e-5 after 20 steps. */
START_TEST(lamb_equivalence) {
  dpt_dataset *ds = make_data(240, 5);
  dpt_train_config cfg;
  mlp_config(&cfg, ds, 24);
  dpt_optim_config_default(&cfg.optim, DPT_OPTIM_LAMB);
  cfg.optim.lr = 0.01f;
  cfg.optim.clip_norm = 1.0f;
  float *one = train_threads(cfg, 1, NULL);
  const size_t n = num_params(&cfg.model);
  const int reps[] = {2, 3, 2}, full[] = {0, 0, 1};
  for (int i = 0; i < 3; ++i) {
    cfg.exchange.full_optimizer_step = full[i];
    float *many = train_threads(cfg, reps[i], NULL);
    const double d = max_rel_diff(many, one, n);
    ck_assert_msg(d < 1e-5, "%d replicas (full step %d): %g from one", reps[i], full[i], d);
    free(many);
  }
  free(one);
  dpt_dataset_destroy(ds);
}
END_TEST

/* Whole-model gradient against central finite differences of the loss, for an MLP and a CNN. */
static void gradient_check(const dpt_model_spec *spec) {
  dpt_backend *be;
  dpt_model *m;
  const size_t b = 5;
  ck_assert_int_eq(dpt_backend_create(DPT_BACKEND_CPU, 0, &be), DPT_OK);
  ck_assert_int_eq(dpt_model_create(be, spec, b, &m), DPT_OK);
  ck_assert_int_eq(dpt_model_init(m, 3), DPT_OK);
  size_t in = dpt_model_input_size(m), np = dpt_model_num_params(m);
  float *x = malloc(b * in * sizeof(float));
  int32_t y[5] = {0, 3, 9, 3, 7};
  uint32_t s = 99;
  for (size_t i = 0; i < b * in; ++i) {
    s = s * 1664525u + 1013904223u;
    x[i] = (float)(s >> 8) / 16777216.0f;
  }
  dpt_buffer *bx, *by;
  ck_assert_int_eq(dpt_buffer_alloc(be, b * in * sizeof(float), &bx), DPT_OK);
  ck_assert_int_eq(dpt_buffer_alloc(be, sizeof y, &by), DPT_OK);
  ck_assert_int_eq(dpt_buffer_upload(bx, 0, x, b * in * sizeof(float)), DPT_OK);
  ck_assert_int_eq(dpt_buffer_upload(by, 0, y, sizeof y), DPT_OK);
  double loss;
  ck_assert_int_eq(dpt_model_train_step(m, bx, by, b, 1.0f, &loss, NULL), DPT_OK);
  float *g = malloc(np * sizeof(float)), *w = malloc(np * sizeof(float));
  ck_assert_int_eq(dpt_buffer_download(dpt_model_grads(m), 0, g, np * sizeof(float)), DPT_OK);
  ck_assert_int_eq(dpt_model_get_params(m, w), DPT_OK);
  /* Probe parameters spread over every tensor. */
  int checked = 0, probes = 0;
  for (size_t t = 0; t < dpt_model_num_tensors(m); ++t) {
    dpt_tensor_info ti;
    ck_assert_int_eq(dpt_model_tensor(m, t, &ti), DPT_OK);
    for (size_t j = 0; j < ti.count; j += ti.count / 7 + 1) {
      size_t p = ti.offset + j;
      /* Central differences at two step sizes: where they disagree the probe straddles a
       * kink (a relu or max-pool switch) and says nothing about the gradient: skip it. */
      double fd[2];
      const float eps[2] = {1e-3f, 5e-4f};
      for (int e = 0; e < 2; ++e) {
        float keep = w[p];
        double lp, lm;
        w[p] = keep + eps[e];
        ck_assert_int_eq(dpt_model_set_params(m, w), DPT_OK);
        ck_assert_int_eq(dpt_model_evaluate(m, bx, by, b, &lp, NULL), DPT_OK);
        w[p] = keep - eps[e];
        ck_assert_int_eq(dpt_model_set_params(m, w), DPT_OK);
        ck_assert_int_eq(dpt_model_evaluate(m, bx, by, b, &lm, NULL), DPT_OK);
        w[p] = keep;
        fd[e] = (lp - lm) / (2.0 * (double)eps[e]);
      }
      ++probes;
      if (fabs(fd[0] - fd[1]) > 1e-3 + 1e-2 * fabs(fd[0])) continue;
      ck_assert_msg(fabs(fd[0] - (double)g[p]) <= 1e-3 + 2e-2 * fabs(fd[0]),
                    "%s[%zu]: backprop %g, finite difference %g", ti.name, j, (double)g[p], fd[0]);
      ++checked;
    }
  }
  ck_assert_int_gt(checked, 10);
  ck_assert_int_ge(checked * 5, probes * 4); /* kinks are the exception */
  free(x);
  free(g);
  free(w);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
}

START_TEST(gradient_mlp) {
  dpt_model_spec spec;
  const size_t hidden[2] = {12, 7};
  ck_assert_int_eq(dpt_model_spec_mlp(&spec, 1, 4, 5, hidden, 2, 10), DPT_OK);
  gradient_check(&spec);
}
END_TEST

START_TEST(gradient_cnn) {
  dpt_model_spec spec;
  ck_assert_int_eq(dpt_model_spec_cnn(&spec, 2, 8, 8, 3, 4, 10), DPT_OK);
  gradient_check(&spec);
}
END_TEST

START_TEST(state_dict_layout) {
  dpt_model_spec spec;
  ck_assert_int_eq(dpt_model_spec_cnn(&spec, 1, 28, 28, 32, 64, 10), DPT_OK);
  dpt_backend *be;
  dpt_model *m;
  ck_assert_int_eq(dpt_backend_create(DPT_BACKEND_CPU, 0, &be), DPT_OK);
  ck_assert_int_eq(dpt_model_create(be, &spec, 2, &m), DPT_OK);
  /* nn.Sequential(Conv2d(1,32,3,padding=1), ReLU, MaxPool2d(2), Conv2d(32,64,3,padding=1), ReLU,
   * MaxPool2d(2), Flatten, Linear(64*7*7, 10)) */
  const char *names[] = {"0.weight", "0.bias", "3.weight", "3.bias", "7.weight", "7.bias"};
  const size_t counts[] = {32 * 9, 32, 64 * 32 * 9, 64, 10 * 64 * 49, 10};
  ck_assert_uint_eq(dpt_model_num_tensors(m), 6);
  size_t off = 0;
  for (size_t i = 0; i < 6; ++i) {
    dpt_tensor_info t;
    ck_assert_int_eq(dpt_model_tensor(m, i, &t), DPT_OK);
    ck_assert_str_eq(t.name, names[i]);
    ck_assert_uint_eq(t.count, counts[i]);
    ck_assert_uint_eq(t.offset, off);
    off += t.count;
  }
  ck_assert_uint_eq(dpt_model_num_params(m), off);
  dpt_tensor_info t;
  ck_assert_int_eq(dpt_model_tensor(m, 2, &t), DPT_OK);
  ck_assert_int_eq(t.ndim, 4);
  ck_assert_int_eq(t.shape[0], 64);
  ck_assert_int_eq(t.shape[1], 32);
  ck_assert_int_eq(t.shape[2], 3);
  /* PyTorch's default bound: 1/sqrt(fan_in). */
  ck_assert_int_eq(dpt_model_init(m, 1), DPT_OK);
  float *w = malloc(off * sizeof(float));
  ck_assert_int_eq(dpt_model_get_params(m, w), DPT_OK);
  double bound = 1.0 / sqrt(32.0 * 9.0), maxabs = 0;
  for (size_t i = 0; i < t.count; ++i)
    if (fabs(w[t.offset + i]) > maxabs) maxabs = fabs(w[t.offset + i]);
  ck_assert_double_le(maxabs, bound);
  ck_assert_double_gt(maxabs, 0.9 * bound);
  free(w);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
}
END_TEST

START_TEST(weights_round_trip) {
  dpt_model_spec spec;
  const size_t hidden[1] = {6};
  ck_assert_int_eq(dpt_model_spec_mlp(&spec, 1, 2, 3, hidden, 1, 10), DPT_OK);
  dpt_backend *be;
  dpt_model *a, *b;
  ck_assert_int_eq(dpt_backend_create(DPT_BACKEND_CPU, 0, &be), DPT_OK);
  ck_assert_int_eq(dpt_model_create(be, &spec, 1, &a), DPT_OK);
  ck_assert_int_eq(dpt_model_create(be, &spec, 1, &b), DPT_OK);
  ck_assert_int_eq(dpt_model_init(a, 1), DPT_OK);
  ck_assert_int_eq(dpt_model_init(b, 2), DPT_OK);
  char path[] = "/tmp/dpt_weights_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  ck_assert_int_eq(dpt_model_save(a, path), DPT_OK);
  ck_assert_int_eq(dpt_model_load(b, path), DPT_OK);
  size_t n = dpt_model_num_params(a);
  float *wa = malloc(n * sizeof(float)), *wb = malloc(n * sizeof(float));
  ck_assert_int_eq(dpt_model_get_params(a, wa), DPT_OK);
  ck_assert_int_eq(dpt_model_get_params(b, wb), DPT_OK);
  ck_assert_int_eq(memcmp(wa, wb, n * sizeof(float)), 0);

  /* A file for another model: the message names the tensor. */
  dpt_model_spec other;
  const size_t hidden2[1] = {7};
  dpt_model *c;
  ck_assert_int_eq(dpt_model_spec_mlp(&other, 1, 2, 3, hidden2, 1, 10), DPT_OK);
  ck_assert_int_eq(dpt_model_create(be, &other, 1, &c), DPT_OK);
  ck_assert_int_eq(dpt_model_load(c, path), DPT_ERR_BAD_FORMAT);
  ck_assert_ptr_nonnull(strstr(dpt_last_error(), "1.weight"));
  /* A missing file. */
  ck_assert_int_eq(dpt_model_load(c, "/nonexistent/w.safetensors"), DPT_ERR_IO);
  unlink(path);
  free(wa);
  free(wb);
  dpt_model_destroy(a);
  dpt_model_destroy(b);
  dpt_model_destroy(c);
  dpt_backend_destroy(be);
}
END_TEST

/* Gradient accumulation: accumulate 1 is today's step bit for bit; K micro-batches per slice
 * equal one replica on the whole batch within 1e-5 at 1-3 replicas (slices of 64 / R split in
 * K uneven parts, some empty when K exceeds the slice) with the model's activations for one
 * micro-batch; what it does not combine with is refused. */
START_TEST(accumulate_equivalence) {
  dpt_dataset *ds = make_data(640, 11);
  dpt_train_config cfg;
  mlp_config(&cfg, ds, 64);
  const size_t n = num_params(&cfg.model);
  dpt_train_report r1, rr;
  float *ref = train_threads(cfg, 1, &r1);
  cfg.schedule.accumulate = 1;
  float *one = train_threads(cfg, 1, &rr);
  ck_assert_int_eq(memcmp(one, ref, n * sizeof(float)), 0);
  ck_assert_uint_eq(rr.activation_bytes, r1.activation_bytes);
  free(one);
  static const size_t ks[3] = {3, 5, 40};
  for (int R = 1; R <= 3; ++R)
    for (int k = 0; k < 3; ++k) {
      cfg.schedule.accumulate = ks[k];
      float *got = train_threads(cfg, R, &rr);
      const double d = max_rel_diff(got, ref, n);
      ck_assert_msg(d <= 1e-5, "R=%d K=%zu: %g from one replica's step (rel)", R, ks[k], d);
      ck_assert_double_eq_tol(rr.train_loss, r1.train_loss, 1e-5 * r1.train_loss);
      ck_assert_int_eq(rr.steps, 20);
      ck_assert_uint_lt(rr.activation_bytes, r1.activation_bytes);
      free(got);
    }
  cfg.devices.replicas = 2;
  cfg.schedule.accumulate = 65;
  ck_assert_int_eq(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG);
  ck_assert_msg(strstr(dpt_last_error(), "accumulate 65") && strstr(dpt_last_error(), "64"),
                "message: %s", dpt_last_error());
  cfg.schedule.accumulate = 2;
  cfg.exchange.sync_bn = 1;
  ck_assert_int_eq(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG);
  ck_assert_msg(strstr(dpt_last_error(), "does not combine with sync_bn"), "message: %s",
                dpt_last_error());
  free(ref);
  dpt_dataset_destroy(ds);
}
END_TEST

/* cfg.on_log: appends the line to the char[4096] at user. */
static void keep_log(const char *line, void *user) {
  char *log = user;
  const size_t len = strlen(log);
  snprintf(log + len, 4096 - len, "%s\n", line);
}

/* A bucketed run (cfg.bucket_bytes set) against the same run's one exchange (ref, and its
 * report r0 or NULL): the same parameters bit for bit (and hash), and a report of how long the
 * exchanges ran and the steps waited for them. */
static void expect_bucketed_same(dpt_train_config cfg, int R, const float *ref,
                                 const dpt_train_report *r0, size_t n, const char *what) {
  dpt_train_report rb;
  float *got = train_threads(cfg, R, &rb);
  ck_assert_msg(memcmp(got, ref, n * sizeof(float)) == 0, "%s: parameters differ from one exchange",
                what);
  if (r0) ck_assert_uint_eq(rb.param_hash, r0->param_hash);
  ck_assert(rb.exchange_seconds > 0);
  ck_assert(rb.exposed_seconds >= 0 && rb.exposed_seconds <= rb.allreduce_seconds + 1e-9);
  free(got);
}

/* Gradient buckets exchanged while backward goes on: the parameters are bit for bit those of
 * one exchange after backward, with the sharded step and with the full step (the ring forced,
 * as the unbucketed run picks it for large models), for buckets of 1 and 3 ring blocks (4 KiB
 * blocks here: 9 to 68 buckets) and 2-3 replicas; the report says how long the exchanges ran
 * and how long the steps waited for them. */
START_TEST(buckets_bit_for_bit) {
  setenv("DPT_COMM_BLOCK", "4096", 1);
  setenv("DPT_COMM_PIECE", "1024", 1);
  setenv("DPT_ALLREDUCE_ALGO", "ring", 1);
  dpt_dataset *ds = make_data(640, 11);
  dpt_train_config cfg;
  mlp_config(&cfg, ds, 64);
  const size_t n = num_params(&cfg.model);
  for (int full = 0; full <= 1; ++full)
    for (int R = 2; R <= 3; ++R) {
      cfg.exchange.full_optimizer_step = full;
      cfg.exchange.bucket_bytes = 0;
      dpt_train_report r0;
      float *ref = train_threads(cfg, R, &r0);
      ck_assert_double_eq(r0.exposed_seconds, r0.exchange_seconds);
      ck_assert(r0.exchange_seconds > 0);
      static const size_t sizes[2] = {4096, 3 * 4096};
      for (int k = 0; k < 2; ++k) {
        cfg.exchange.bucket_bytes = sizes[k];
        char what[64];
        snprintf(what, sizeof what, "R=%d full=%d bucket %zu", R, full, sizes[k]);
        expect_bucketed_same(cfg, R, ref, &r0, n, what);
      }
      free(ref);
    }
  /* The update bucket by bucket (the runs above), and after the last bucket where clipping, a
   * skipping policy or LAMB needs the whole gradient, or where bucket_whole_update asks for it:
   * the same bits, and the log says which. */
  static const struct {
    dpt_optim_kind kind;
    float clip;
    dpt_nonfinite_policy policy;
    const char *says;
    int whole;
  } variants[5] = {
      {DPT_OPTIM_ADAMW, 0.0f, DPT_NONFINITE_STOP, "each bucket's shard of the update runs once", 0},
      {DPT_OPTIM_SGD, 0.5f, DPT_NONFINITE_STOP, "waits for the last bucket: clipping", 0},
      {DPT_OPTIM_SGD, 0.0f, DPT_NONFINITE_SKIP, "waits for the last bucket: a skipped step", 0},
      {DPT_OPTIM_LAMB, 0.0f, DPT_NONFINITE_STOP, "waits for the last bucket: LAMB", 0},
      {DPT_OPTIM_ADAMW, 0.0f, DPT_NONFINITE_STOP, "waits for the last bucket: asked for", 1}};
  for (int v = 0; v < 5; ++v) {
    dpt_train_config vc = cfg;
    vc.exchange.full_optimizer_step = 0;
    dpt_optim_config_default(&vc.optim, variants[v].kind);
    vc.optim.lr = 0.01f;
    vc.optim.clip_norm = variants[v].clip;
    vc.checks.on_nonfinite = variants[v].policy;
    vc.exchange.bucket_bytes = 0;
    float *ref = train_threads(vc, 2, NULL);
    vc.exchange.bucket_bytes = 4096;
    vc.exchange.bucket_whole_update = variants[v].whole;
    char log[4096] = "";
    vc.callbacks.on_log = keep_log;
    vc.callbacks.user = log;
    expect_bucketed_same(vc, 2, ref, NULL, n, variants[v].says);
    ck_assert_msg(strstr(log, variants[v].says), "log: %s", log);
    free(ref);
  }
  /* With micro-batches the buckets start after the last one: still the same bits. */
  cfg.exchange.full_optimizer_step = 0;
  cfg.schedule.accumulate = 3;
  cfg.exchange.bucket_bytes = 0;
  float *ref = train_threads(cfg, 2, NULL);
  cfg.exchange.bucket_bytes = 4096;
  expect_bucketed_same(cfg, 2, ref, NULL, n, "accumulate 3");
  free(ref);
  unsetenv("DPT_COMM_BLOCK");
  unsetenv("DPT_COMM_PIECE");
  unsetenv("DPT_ALLREDUCE_ALGO");
  dpt_dataset_destroy(ds);
}
END_TEST

/* Gradient buckets with the 16-bit exchange (grad_dtype F16 and BF16, with and without error
 * feedback): each bucket narrows its range when it starts and widens it when the step waits;
 * the parameters are bit for bit those of the unbucketed 16-bit exchange (the ring forced, 1 KiB
 * blocks of 512 16-bit elements: 6 buckets of 1 block, 3 of up to 3), at 2 and 3 replicas, also
 * with 3 micro-batches, and differ from the float32 exchange's (the 16-bit rounding happened). With
 * the algorithm left to AUTO a larger model's one exchange (34 KB) takes the ring and its buckets
 * (1 and 8 KiB) `direct`: the same bits with 2 replicas (one addition per element); with 3 the sums
 * differ (measured 3.3e-4 relative for binary16, 1.7e-3 for bfloat16), checked within 1 % as the
 * 16-bit exchange against float32's. */
START_TEST(buckets_16bit_bit_for_bit) {
  setenv("DPT_COMM_BLOCK", "1024", 1);
  setenv("DPT_COMM_PIECE", "256", 1);
  setenv("DPT_ALLREDUCE_ALGO", "ring", 1);
  dpt_dataset *ds = make_data(640, 11);
  dpt_train_config cfg;
  mlp_config(&cfg, ds, 64);
  const size_t n = num_params(&cfg.model);
  ck_assert_uint_gt(n, 5 * 512); /* more than 5 blocks of 16-bit elements */
  static const dpt_comm_dtype dtypes[2] = {DPT_COMM_F16, DPT_COMM_BF16};
  static const size_t sizes[2] = {1024, 3 * 1024};
  for (int R = 2; R <= 3; ++R) {
    cfg.exchange.grad_dtype = DPT_COMM_F32;
    cfg.exchange.grad_error_feedback = 0;
    cfg.exchange.bucket_bytes = 0;
    float *f32 = train_threads(cfg, R, NULL);
    for (int d = 0; d < 2; ++d)
      for (int ef = 0; ef <= 1; ++ef) {
        cfg.exchange.grad_dtype = dtypes[d];
        cfg.exchange.grad_error_feedback = ef;
        cfg.exchange.bucket_bytes = 0;
        dpt_train_report r0;
        float *ref = train_threads(cfg, R, &r0);
        ck_assert_msg(memcmp(ref, f32, n * sizeof(float)) != 0, "dtype %d: float32's bits",
                      (int)dtypes[d]);
        for (int k = 0; k < 2; ++k) {
          cfg.exchange.bucket_bytes = sizes[k];
          char what[80];
          snprintf(what, sizeof what, "R=%d dtype %d feedback %d bucket %zu", R, (int)dtypes[d], ef,
                   sizes[k]);
          expect_bucketed_same(cfg, R, ref, &r0, n, what);
        }
        free(ref);
      }
    free(f32);
  }
  /* With micro-batches the buckets start after the last one: still the same bits. */
  cfg.exchange.grad_dtype = DPT_COMM_BF16;
  cfg.exchange.grad_error_feedback = 1;
  cfg.schedule.accumulate = 3;
  cfg.exchange.bucket_bytes = 0;
  float *acc_ref = train_threads(cfg, 3, NULL);
  cfg.exchange.bucket_bytes = 1024;
  expect_bucketed_same(cfg, 3, acc_ref, NULL, n, "accumulate 3");
  free(acc_ref);
  cfg.schedule.accumulate = 1;
  unsetenv("DPT_ALLREDUCE_ALGO");
  const size_t hidden[2] = {128, 64}; /* 17226 parameters: 34 KB in 16 bits */
  ck_assert_int_eq(dpt_model_spec_mlp(&cfg.model, 1, 8, 8, hidden, 2, 10), DPT_OK);
  const size_t nb = num_params(&cfg.model);
  cfg.exchange.grad_error_feedback = 0;
  for (int R = 2; R <= 3; ++R)
    for (int d = 0; d < 2; ++d) {
      cfg.exchange.grad_dtype = dtypes[d];
      cfg.exchange.bucket_bytes = 0;
      float *ref = train_threads(cfg, R, NULL);
      cfg.exchange.bucket_bytes = 8 * 1024;
      float *got = train_threads(cfg, R, NULL);
      const int same = memcmp(got, ref, nb * sizeof(float)) == 0;
      const double rel = max_rel_diff(got, ref, nb);
      ck_assert_msg(R == 2 ? same : rel < 1e-2, "AUTO, R=%d dtype %d: equal %d, %g (rel)", R,
                    (int)dtypes[d], same, rel);
      free(got);
      free(ref);
    }
  unsetenv("DPT_COMM_BLOCK");
  unsetenv("DPT_COMM_PIECE");
  dpt_dataset_destroy(ds);
}
END_TEST

/* The timeline (trace): 2 replicas with gradient buckets write one file holding both replicas'
 * rows: a load per step, every layer's forward and backward per step, each bucket's exchange,
 * its part of the update (after its exchange) and its parameters' all-gather per step; the
 * first bucket starts before the step's backward ends (the exchange overlaps it); a path that
 * cannot be written fails the run naming it. */
START_TEST(trace_file) {
  setenv("DPT_COMM_BLOCK", "8192", 1);
  setenv("DPT_COMM_PIECE", "1024", 1);
  dpt_dataset *ds = make_data(640, 11);
  dpt_train_config cfg;
  mlp_config(&cfg, ds, 64);
  cfg.schedule.max_steps = 4;
  cfg.exchange.bucket_bytes = 8192;
  char path[] = "/tmp/dpt_trace_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  cfg.trace = path;
  dpt_train_report rep;
  float *p = train_threads(cfg, 2, &rep);
  free(p);
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  ck_assert_msg(root != NULL, "%s: %s (line %d)", path, err.text, err.line);
  json_t *ev = json_object_get(root, "traceEvents");
  ck_assert(json_is_array(ev));
  size_t count[2][6] = {{0}}, gathers[2] = {0, 0};
  double bwd_end[2] = {0, 0}, first_bucket[2] = {-1, -1}, bwd_first_start[2] = {-1, -1};
  double bucket0_end[2] = {-1, -1}, part0_start[2] = {-1, -1};
  for (size_t i = 0; i < json_array_size(ev); ++i) {
    json_t *e = json_array_get(ev, i);
    if (strcmp(json_string_value(json_object_get(e, "ph")), "X") != 0) continue;
    const int pid = (int)json_integer_value(json_object_get(e, "pid"));
    const int tid = (int)json_integer_value(json_object_get(e, "tid"));
    ck_assert(pid >= 0 && pid < 2 && tid >= 0 && tid < 6);
    ++count[pid][tid];
    const double ts = json_number_value(json_object_get(e, "ts"));
    const double dur = json_number_value(json_object_get(e, "dur"));
    const char *name = json_string_value(json_object_get(e, "name"));
    /* the first step's backward and its first bucket */
    if (tid == 2 && count[pid][2] <= 6) {
      if (bwd_first_start[pid] < 0) bwd_first_start[pid] = ts;
      bwd_end[pid] = ts + dur;
    }
    if (tid == 3 && !strcmp(name, "bucket 0") && first_bucket[pid] < 0) {
      first_bucket[pid] = ts;
      bucket0_end[pid] = ts + dur;
    }
    if (tid == 4 && !strcmp(name, "optimizer, bucket 0") && part0_start[pid] < 0)
      part0_start[pid] = ts;
    gathers[pid] += tid == 3 && !strncmp(name, "all-gather ", 11);
  }
  const size_t layers = cfg.model.num_layers, steps = 4;
  for (int pid = 0; pid < 2; ++pid) {
    ck_assert_uint_eq(count[pid][0], steps);          /* loads */
    ck_assert_uint_eq(count[pid][1], steps * layers); /* forward */
    ck_assert_uint_eq(count[pid][2], steps * layers); /* backward */
    /* 2778 parameters in blocks of 2048: 2 buckets, each updated and gathered on its own */
    ck_assert_uint_eq(count[pid][4], 2 * steps); /* the optimizer's parts */
    ck_assert_uint_eq(gathers[pid], 2 * steps);
    ck_assert_uint_eq(count[pid][3], 4 * steps); /* buckets and all-gathers */
    ck_assert_msg(part0_start[pid] >= bucket0_end[pid],
                  "replica %d: bucket 0 updated at %g us, "
                  "exchanged until %g",
                  pid, part0_start[pid], bucket0_end[pid]);
    ck_assert_msg(first_bucket[pid] >= bwd_first_start[pid] && first_bucket[pid] < bwd_end[pid],
                  "replica %d: bucket 0 at %g us, backward %g..%g", pid, first_bucket[pid],
                  bwd_first_start[pid], bwd_end[pid]);
  }
  json_decref(root);
  unlink(path);
  cfg.trace = "/nonexistent-dir/trace.json";
  cfg.devices.replicas = 2;
  ck_assert_int_eq(dpt_train(&cfg, NULL, NULL), DPT_ERR_IO);
  ck_assert_msg(strstr(dpt_last_error(), "/nonexistent-dir/trace.json"), "message: %s",
                dpt_last_error());
  unsetenv("DPT_COMM_BLOCK");
  unsetenv("DPT_COMM_PIECE");
  dpt_dataset_destroy(ds);
}
END_TEST

/* Mean |a - b| over the parameters. */
static double mean_abs_diff(const float *a, const float *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i)
    s += fabs((double)a[i] - (double)b[i]);
  return n ? s / (double)n : 0;
}

/* A 16-bit gradient exchange (dtype) against float32's: with one replica nothing is exchanged
 * (the float32 run's bits); with 2 and 3 the parameters stay within 1 % of the float32
 * exchange's after 20 steps, with and without error feedback, and differ from them (the
 * rounding is real), and error feedback brings them closer (mean |difference|). */
static void check_16bit_exchange(dpt_train_config cfg, dpt_comm_dtype dtype) {
  const size_t n = num_params(&cfg.model);
  float *ref1 = train_threads(cfg, 1, NULL);
  cfg.exchange.grad_dtype = dtype;
  float *one = train_threads(cfg, 1, NULL);
  ck_assert_int_eq(memcmp(one, ref1, n * sizeof(float)), 0);
  free(one);
  free(ref1);
  for (int R = 2; R <= 3; ++R) {
    cfg.exchange.grad_dtype = DPT_COMM_F32;
    cfg.exchange.grad_error_feedback = 0;
    float *ref = train_threads(cfg, R, NULL);
    cfg.exchange.grad_dtype = dtype;
    double drift[2];
    for (int ef = 0; ef <= 1; ++ef) {
      cfg.exchange.grad_error_feedback = ef;
      dpt_train_report rep;
      float *got = train_threads(cfg, R, &rep);
      const double d = max_rel_diff(got, ref, n);
      drift[ef] = mean_abs_diff(got, ref, n);
      ck_assert_msg(d > 0 && d < 1e-2, "dtype %d R=%d feedback %d: %g from the float32 exchange",
                    (int)dtype, R, ef, d);
      ck_assert(isfinite(rep.train_loss));
      free(got);
    }
    ck_assert_msg(drift[1] < drift[0], "dtype %d R=%d: error feedback drifts %g, without %g",
                  (int)dtype, R, drift[1], drift[0]);
    free(ref);
  }
}

/* The binary16 exchange (check_16bit_exchange; measured mean drift without -> with error
 * feedback: 5.4e-7 -> 4.0e-7 on 2 replicas, 5.6e-7 -> 5.0e-7 on 3); error feedback without it
 * is refused. */
START_TEST(f16_exchange) {
  dpt_dataset *ds = make_data(640, 11);
  dpt_train_config cfg;
  mlp_config(&cfg, ds, 64);
  check_16bit_exchange(cfg, DPT_COMM_F16);
  cfg.devices.replicas = 2;
  cfg.exchange.grad_dtype = DPT_COMM_F32;
  cfg.exchange.grad_error_feedback = 1;
  ck_assert_int_eq(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG);
  ck_assert_msg(strstr(dpt_last_error(), "needs a 16-bit exchange"), "message: %s",
                dpt_last_error());
  dpt_dataset_destroy(ds);
}
END_TEST

/* The bfloat16 exchange (check_16bit_exchange; measured mean drift without -> with error
 * feedback: 3.9e-6 -> 3.0e-6 on 2 replicas, 2.1e-5 -> 3.9e-6 on 3). */
START_TEST(bf16_exchange) {
  dpt_dataset *ds = make_data(640, 11);
  dpt_train_config cfg;
  mlp_config(&cfg, ds, 64);
  check_16bit_exchange(cfg, DPT_COMM_BF16);
  dpt_dataset_destroy(ds);
}
END_TEST

START_TEST(bad_config) {
  dpt_dataset *ds = make_data(64, 1);
  dpt_train_config cfg;
  mlp_config(&cfg, ds, 8);
  cfg.devices.replicas = 4;
  cfg.schedule.global_batch = 3; /* fewer samples than replicas */
  ck_assert_int_eq(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(dpt_last_error(), "global batch 3"));
  cfg.schedule.global_batch = 0;
  ck_assert_int_eq(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG);
  cfg.schedule.global_batch = 8;
  cfg.devices.replicas = 0;
  ck_assert_int_eq(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG);
  cfg.devices.replicas = 1;
  cfg.schedule.global_batch = 100; /* more than the 64 samples, last batch dropped: nothing to do */
  ck_assert_int_eq(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(dpt_last_error(), "global batch 100"));
  cfg.schedule.global_batch = 8;
  cfg.exchange.bucket_whole_update = 1; /* without buckets */
  ck_assert_int_eq(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG);
  ck_assert_msg(strstr(dpt_last_error(), "bucket_whole_update needs gradient buckets"), "%s",
                dpt_last_error());
  cfg.exchange.bucket_whole_update = 0;
  cfg.data.train = NULL;
  ck_assert_int_eq(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG);
  /* A model whose input does not match the data. */
  mlp_config(&cfg, ds, 8);
  const size_t hidden[1] = {4};
  ck_assert_int_eq(dpt_model_spec_mlp(&cfg.model, 1, 9, 9, hidden, 1, 10), DPT_OK);
  ck_assert_int_eq(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG);
  ck_assert_msg(strstr(dpt_last_error(), "81") != NULL, "message: %s", dpt_last_error());
  dpt_dataset_destroy(ds);
}
END_TEST

START_TEST(nonfinite_loss) {
  dpt_dataset *ds = make_data(256, 3);
  dpt_train_config cfg;
  mlp_config(&cfg, ds, 32);
  cfg.optim.lr = 1e30f; /* diverges at once */
  cfg.optim.momentum = 0.0f;
  cfg.devices.replicas = 2;
  dpt_status st = dpt_train(&cfg, NULL, NULL);
  ck_assert_int_eq(st, DPT_ERR_NONFINITE);
  ck_assert_ptr_nonnull(strstr(dpt_last_error(), "step"));
  /* With gradient buckets each shard is updated before the replicas agree on the step: the run
   * still stops at the same step with the same message, every request waited for (the
   * sharded step and the full step). */
  char msg[512];
  snprintf(msg, sizeof msg, "%s", dpt_last_error());
  setenv("DPT_COMM_BLOCK", "4096", 1);
  setenv("DPT_COMM_PIECE", "1024", 1);
  cfg.exchange.bucket_bytes = 4096;
  for (int full = 0; full <= 1; ++full) {
    cfg.exchange.full_optimizer_step = full;
    ck_assert_int_eq(dpt_train(&cfg, NULL, NULL), DPT_ERR_NONFINITE);
    ck_assert_msg(full || strcmp(dpt_last_error(), msg) == 0, "buckets: %s; without: %s",
                  dpt_last_error(), msg);
  }
  cfg.exchange.full_optimizer_step = 0;
  cfg.exchange.bucket_bytes = 0;
  unsetenv("DPT_COMM_BLOCK");
  unsetenv("DPT_COMM_PIECE");
  /* Skipping cannot hide the divergence: the run fails once too many steps were skipped (or
   * the parameters went non-finite), alike on every replica. */
  cfg.checks.on_nonfinite = DPT_NONFINITE_SKIP;
  st = dpt_train(&cfg, NULL, NULL);
  ck_assert_int_eq(st, DPT_ERR_NONFINITE);
  ck_assert_msg(strstr(dpt_last_error(), "skipped") || strstr(dpt_last_error(), "not finite"), "%s",
                dpt_last_error());
  dpt_dataset_destroy(ds);
}
END_TEST

/* The last report of replica 0. */
static void keep_report(const dpt_train_report *rep, void *user) {
  *(dpt_train_report *)user = *rep;
}

/* A finite loss with a non-finite gradient (the 16 units of the second hidden layer feed
 * logits of +-1e38 x 3.2e-28 = +-5e11, finite; back through them the gradient reaches
 * 10 x 16 x 2e38 / 8 = 4e39 on the first hidden layer: inf, and NaN where it meets a zero
 * pixel). With clipping the optimizer sees a non-finite norm: it stops the run, or with
 * DPT_NONFINITE_SKIP every replica skips the step alike and the parameters stay as they started.
 * Sharded and full step, 1 and 2 replicas. */
START_TEST(nonfinite_gradient_norm) {
  dpt_dataset *ds = make_data(256, 5);
  dpt_train_config cfg;
  mlp_config(&cfg, ds, 8);
  enum { W1 = 32 * 64, B1 = 32, W2 = 16 * 32, B2 = 16, W3 = 10 * 16, B3 = 10 };
  enum { NP = W1 + B1 + W2 + B2 + W3 + B3 };
  static float init[NP];
  float *p = init;
  for (int i = 0; i < W1; ++i)
    *p++ = 0.0f;
  for (int i = 0; i < B1; ++i)
    *p++ = 1e-30f;
  for (int i = 0; i < W2; ++i)
    *p++ = 10.0f;
  for (int i = 0; i < B2; ++i)
    *p++ = 1e-30f;
  for (int i = 0; i < W3; ++i)
    *p++ = (i / 16) % 2 ? -1e38f : 1e38f; /* row c: + for even classes, - for odd */
  for (int i = 0; i < B3; ++i)
    *p++ = 0.0f;
  cfg.init_params = init;
  cfg.optim.clip_norm = 1.0f;
  cfg.schedule.max_steps = 6;
  for (int full = 0; full < 2; ++full)
    for (int R = 1; R <= 2; ++R) {
      cfg.exchange.full_optimizer_step = full;
      cfg.devices.replicas = R;
      cfg.checks.on_nonfinite = DPT_NONFINITE_STOP;
      /* Caught at the first step: by the count of the reduced gradient's non-finite values, or
       * (sharded step) by the agreed gradient norm. */
      ck_assert_int_eq(dpt_train(&cfg, NULL, NULL), DPT_ERR_NONFINITE);
      ck_assert_msg(strstr(dpt_last_error(), "not finite at step 1"), "%s", dpt_last_error());
      /* With DPT_NONFINITE_SKIP (and with clipping off too: the reduced gradient is checked)
       * every step is skipped alike, the parameters stay as they started, and a run that
       * trained nothing fails; past max_skipped steps in a row it fails earlier. */
      cfg.checks.on_nonfinite = DPT_NONFINITE_SKIP;
      cfg.checks.max_skipped = -1;
      for (int clip = 0; clip < 2; ++clip) {
        dpt_train_report rep;
        memset(&rep, 0, sizeof rep);
        cfg.optim.clip_norm = clip ? 1.0f : 0.0f;
        cfg.callbacks.on_report = keep_report;
        cfg.callbacks.user = &rep;
        ck_assert_int_eq(dpt_train(&cfg, NULL, NULL), DPT_ERR_NONFINITE);
        ck_assert_msg(strstr(dpt_last_error(), "every one of the 6 steps was skipped"), "%s",
                      dpt_last_error());
        ck_assert_int_eq(rep.steps, 6);
        ck_assert_int_eq(rep.skipped_steps, 6);
        ck_assert(rep.param_hash == dpt_fingerprint(init, sizeof init));
      }
      cfg.callbacks.on_report = NULL;
      cfg.checks.max_skipped = 3;
      ck_assert_int_eq(dpt_train(&cfg, NULL, NULL), DPT_ERR_NONFINITE);
      ck_assert_msg(strstr(dpt_last_error(), "4 steps in a row"), "%s", dpt_last_error());
      cfg.checks.max_skipped = 10;
      cfg.optim.clip_norm = 1.0f;
    }
  /* Without clipping or skipping, the reduced gradient's non-finite values stop the run at the
   * step, before its update makes the parameters non-finite. */
  cfg.checks.on_nonfinite = DPT_NONFINITE_STOP;
  cfg.optim.clip_norm = 0.0f;
  cfg.schedule.max_steps = 1;
  for (int R = 1; R <= 2; ++R) {
    cfg.devices.replicas = R;
    ck_assert_int_eq(dpt_train(&cfg, NULL, NULL), DPT_ERR_NONFINITE);
    ck_assert_msg(strstr(dpt_last_error(), "reduced gradient has values that are not finite at "
                                           "step 1"),
                  "%s", dpt_last_error());
  }
  dpt_dataset_destroy(ds);
}
END_TEST

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The drift check's fingerprint: known values (from an independent implementation of the
 * same definition), any alignment, every single-bit change and every length told apart. */
START_TEST(fingerprint) {
  enum { N = 1003 };
  unsigned char buf[N + 8], *pat = buf + 1;
  unsigned char seq[100];
  for (int i = 0; i < 100; ++i)
    seq[i] = (unsigned char)i;
  for (int i = 0; i < N; ++i)
    pat[i] = (unsigned char)(i * 37 + 11);
  ck_assert_uint_eq(dpt_fingerprint(NULL, 0), 0x5d395b95d713e56bull);
  ck_assert_uint_eq(dpt_fingerprint(seq, 100), 0x91d6675e57c98656ull);
  const uint64_t h0 = dpt_fingerprint(pat, N);
  ck_assert_uint_eq(h0, 0x64af03efe23e0695ull);
  for (int a = 0; a < 8; ++a) { /* the same bytes at every alignment */
    unsigned char *q = buf + a;
    memmove(q, pat, N);
    ck_assert_uint_eq(dpt_fingerprint(q, N), h0);
    pat = q;
  }
  uint64_t *h = malloc(8 * N * sizeof(uint64_t));
  ck_assert_ptr_nonnull(h);
  for (int bit = 0; bit < 8 * N; ++bit) {
    pat[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    h[bit] = dpt_fingerprint(pat, N);
    pat[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    ck_assert_msg(h[bit] != h0, "flipping bit %d leaves the fingerprint", bit);
  }
  qsort(h, 8 * N, sizeof(uint64_t), cmp_u64);
  for (int i = 1; i < 8 * N; ++i)
    ck_assert_msg(h[i] != h[i - 1], "two single-bit changes give one fingerprint");
  /* Sign bits of two floats one lane-round apart (a pure xor-multiply lane would cancel). */
  pat[7] ^= 0x80;
  pat[39] ^= 0x80;
  ck_assert_uint_ne(dpt_fingerprint(pat, N), h0);
  pat[7] ^= 0x80;
  pat[39] ^= 0x80;
  for (int n = 0; n <= 72; ++n) /* every prefix length differs, 0 included */
    h[n] = dpt_fingerprint(pat, (size_t)n);
  qsort(h, 73, sizeof(uint64_t), cmp_u64);
  for (int i = 1; i <= 72; ++i)
    ck_assert_uint_ne(h[i], h[i - 1]);
  free(h);
}
END_TEST

START_TEST(learns) {
  dpt_dataset *train = make_data(2000, 21), *test = make_data(500, 22);
  dpt_train_config cfg;
  mlp_config(&cfg, train, 50);
  cfg.data.test = test;
  cfg.schedule.max_steps = 0;
  cfg.schedule.epochs = 5;
  cfg.devices.replicas = 2;
  dpt_train_report rep;
  ck_assert_int_eq(dpt_train(&cfg, NULL, &rep), DPT_OK);
  ck_assert_int_eq(rep.final, 1);
  ck_assert_int_eq(rep.steps, 5 * 40);
  ck_assert_double_gt(rep.test_accuracy, 0.9);
  dpt_dataset_destroy(train);
  dpt_dataset_destroy(test);
}
END_TEST

/* ---- BERT on text ---------------------------------------------------------------------------- */

/* Made-up documents of words drawn from a small lexicon: text a tiny vocabulary learns. */
static char *bert_text(size_t docs) {
  static const char *const words[] = {"the", "cat", "sat", "on",  "a",    "mat", "and",  "dog",
                                      "ran", "to",  "his", "red", "ball", "in",  "park", "sun"};
  char *t = malloc(docs * 200 + 1), *p = t;
  uint32_t x = 12345;
  for (size_t d = 0; d < docs; ++d) {
    const size_t n = 6 + d % 9;
    for (size_t w = 0; w < n; ++w) {
      x = x * 1664525u + 1013904223u;
      p += sprintf(p, "%s%s", w ? " " : "", words[(x >> 20) % 16]);
    }
    p += sprintf(p, ".\n%%\n");
  }
  return t;
}

/* A tiny BERT (1 layer, hidden 32, 2 heads, ffn 64, sequences of 16, vocabulary ~300, dropout
 * 0.1) trained 20 steps on 1, 2, 3 and 4 thread replicas: the same parameters, tensor by tensor
 * within 1e-4 of the tensor's largest value, with the gradient scaled by the targets of the
 * whole global batch (uneven splits: 10 sequences over 3 and 4 replicas). */
START_TEST(bert_equivalence) {
  char *text = bert_text(120);
  dpt_text_corpus *c = NULL;
  dpt_bpe *bpe = NULL;
  dpt_text_sequences *seqs = NULL;
  dpt_dataset *train = NULL, *valid = NULL;
  ck_assert_int_eq(dpt_text_corpus_from_memory(text, strlen(text), &c), DPT_OK);
  ck_assert_int_eq(dpt_bpe_train(c, 300, &bpe), DPT_OK);
  ck_assert_int_eq(dpt_text_sequences_build(c, bpe, 16, 10, &seqs), DPT_OK);
  ck_assert_int_eq(dpt_dataset_from_text(seqs, DPT_TEXT_TRAIN, 3, &train), DPT_OK);
  ck_assert_int_eq(dpt_dataset_from_text(seqs, DPT_TEXT_VALIDATION, 3, &valid), DPT_OK);
  ck_assert_uint_ge(dpt_dataset_count(train), 30);
  ck_assert_uint_ge(dpt_dataset_count(valid), 2);
  dpt_bert_options bo;
  dpt_bert_options_default(&bo);
  bo.vocab = dpt_bpe_vocab_size(bpe);
  bo.seq_len = 16;
  bo.layers = 1;
  bo.hidden = 32;
  bo.heads = 2;
  bo.ffn = 64;
  dpt_train_config cfg;
  dpt_train_config_default(&cfg);
  ck_assert_int_eq(dpt_model_spec_bert(&cfg.model, &bo), DPT_OK);
  cfg.data.train = train;
  cfg.data.test = valid;
  cfg.schedule.global_batch = 10;
  cfg.schedule.max_steps = 20;
  cfg.schedule.epochs = 10;
  cfg.schedule.seed = 5;
  cfg.checks.check_every = 1;
  dpt_optim_config_default(&cfg.optim, DPT_OPTIM_ADAMW);
  cfg.optim.lr = 1e-3f;
  cfg.optim.clip_norm = 1.0f;
  cfg.optim.no_decay = "*bias,*norm*.weight";

  dpt_backend *be;
  dpt_model *m;
  ck_assert_int_eq(dpt_backend_create(DPT_BACKEND_CPU, 0, &be), DPT_OK);
  ck_assert_int_eq(dpt_model_create(be, &cfg.model, 1, &m), DPT_OK);
  ck_assert_uint_eq(dpt_model_labels_per_sample(m), 16);
  dpt_train_report r1, rr;
  float *ref = train_threads(cfg, 1, &r1);
  ck_assert_int_eq(r1.steps, 20);
  ck_assert_uint_eq(r1.labels_per_sample, 16);
  ck_assert(isfinite(r1.test_loss) && r1.test_accuracy >= 0 && r1.test_accuracy <= 1);
  ck_assert_double_eq_tol(r1.test_perplexity, exp(r1.test_loss), 1e-9 * r1.test_perplexity);
  for (int R = 2; R <= 4; ++R) {
    float *got = train_threads(cfg, R, &rr);
    for (size_t t = 0; t < dpt_model_num_tensors(m); ++t) {
      dpt_tensor_info ti;
      ck_assert_int_eq(dpt_model_tensor(m, t, &ti), DPT_OK);
      const double d = max_rel_diff(got + ti.offset, ref + ti.offset, ti.count);
      ck_assert_msg(d <= 1e-4, "R=%d: %s differs from one replica by %g (rel)", R, ti.name, d);
    }
    ck_assert_double_eq_tol(rr.test_loss, r1.test_loss, 1e-4 * r1.test_loss);
    ck_assert_double_eq_tol(rr.train_loss, r1.train_loss, 1e-4 * r1.train_loss);
    free(got);
  }
  /* Micro-batches: 2 replicas of 5 sequences as 2 and 3 (the targets, dropout's masks keyed by
   * the global sample and the loss summed over them). */
  dpt_train_config ca = cfg;
  ca.schedule.accumulate = 3;
  float *acc = train_threads(ca, 2, &rr);
  ck_assert_double_le(max_rel_diff(acc, ref, dpt_model_num_params(m)), 1e-4);
  ck_assert_double_eq_tol(rr.train_loss, r1.train_loss, 1e-4 * r1.train_loss);
  ck_assert_uint_lt(rr.activation_bytes, r1.activation_bytes);
  free(acc);
  /* The steps moved the parameters; a classifier's data is refused with a clear line. */
  dpt_train_config c0 = cfg;
  c0.schedule.max_steps = 1;
  c0.optim.lr = 1e-30f;
  float *init = train_threads(c0, 1, &rr);
  ck_assert_double_gt(max_rel_diff(ref, init, dpt_model_num_params(m)), 1e-4);
  uint8_t px[64 * 16] = {0};
  int32_t lab[64] = {0};
  dpt_dataset *images = NULL; /* 16 values a sample, as the sequences */
  ck_assert_int_eq(dpt_dataset_from_memory(px, lab, 64, 4, 4, 10, &images), DPT_OK);
  c0.data.train = images;
  c0.data.test = NULL;
  ck_assert_int_ne(dpt_train(&c0, NULL, NULL), DPT_OK);
  ck_assert_ptr_nonnull(strstr(dpt_last_error(), "token model"));
  dpt_train_config c1;
  mlp_config(&c1, images, 8);
  c1.data.train = train; /* an MLP on text: refused too */
  c1.model.in_h = 1;
  c1.model.in_w = 16;
  ck_assert_int_eq(dpt_model_spec_mlp(&c1.model, 1, 1, 16, (const size_t[]){8}, 1, 10), DPT_OK);
  ck_assert_int_ne(dpt_train(&c1, NULL, NULL), DPT_OK);
  ck_assert_ptr_nonnull(strstr(dpt_last_error(), "classifier"));
  dpt_dataset_destroy(images);
  free(init);
  free(ref);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
  dpt_dataset_destroy(train);
  dpt_dataset_destroy(valid);
  dpt_text_sequences_destroy(seqs);
  dpt_bpe_destroy(bpe);
  dpt_text_corpus_destroy(c);
  free(text);
}
END_TEST

static Suite *threads_suite(void) {
  Suite *s = suite_create("train");
  TCase *tc = tcase_create("train");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, fingerprint);
  tcase_add_test(tc, equivalence_even);
  tcase_add_test(tc, equivalence_uneven);
  tcase_add_test(tc, equivalence_keep_last);
  tcase_add_test(tc, cnn_equivalence);
  tcase_add_test(tc, sharded_matches_full_step);
  tcase_add_test(tc, optimizer_sharded_state);
  tcase_add_test(tc, weight_decay_scope);
  tcase_add_test(tc, lamb_by_hand);
  tcase_add_test(tc, lamb_equivalence);
  tcase_add_test(tc, gradient_mlp);
  tcase_add_test(tc, gradient_cnn);
  tcase_add_test(tc, state_dict_layout);
  tcase_add_test(tc, weights_round_trip);
  tcase_add_test(tc, accumulate_equivalence);
  tcase_add_test(tc, buckets_bit_for_bit);
  tcase_add_test(tc, buckets_16bit_bit_for_bit);
  tcase_add_test(tc, trace_file);
  tcase_add_test(tc, f16_exchange);
  tcase_add_test(tc, bf16_exchange);
  tcase_add_test(tc, bad_config);
  tcase_add_test(tc, nonfinite_loss);
  tcase_add_test(tc, nonfinite_gradient_norm);
  tcase_add_test(tc, learns);
  tcase_add_test(tc, bert_equivalence);
  suite_add_tcase(s, tc);
  return s;
}

/* Whether a backend is compiled in and has a device here (every rank sees the same machine). */
static int present(dpt_backend_kind kind) {
  int count = 0;
  return dpt_backend_compiled(kind) && dpt_device_count(kind, &count) == DPT_OK && count > 0;
}

/* Parses "opencl,vulkan" into kinds; returns the count, 0 on a bad name. */
static int parse_kinds(const char *list, dpt_backend_kind *kinds, int max) {
  char buf[128];
  snprintf(buf, sizeof buf, "%s", list);
  int n = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && n < max;
       tok = strtok_r(NULL, ",", &save))
    if (dpt_backend_kind_parse(tok, &kinds[n++]) != DPT_OK) return 0;
  return n;
}

/* A 5-step run of a small MLP on `ds` with a global batch of 64. */
static void tiny_mlp_config(dpt_train_config *cfg, const dpt_dataset *ds) {
  dpt_train_config_default(cfg);
  const size_t hidden[1] = {8};
  dpt_model_spec_mlp(&cfg->model, 1, 8, 8, hidden, 1, 10);
  cfg->data.train = ds;
  cfg->schedule.global_batch = 64;
  cfg->schedule.max_steps = 5;
}

/* Under mpiexec: every rank trains one replica over MPI, rank r on backends[r % count]; each
 * rank also computes the one-replica CPU reference itself and rank 0 compares (1e-5 relative
 * on the CPU backend, 1e-4 with GPU backends, whose gemm rounds differently). Ranks on
 * different backends (e.g. OpenCL and Vulkan) must also stay identical: the fingerprint check
 * runs every 5 steps. Plain main (not Check) so every rank takes part in every collective. */
static int mpi_main(const char *backends) {
  dpt_backend_kind kinds[8];
  int nk = parse_kinds(backends, kinds, 8);
  if (nk == 0) {
    fprintf(stderr, "bad backend list '%s'\n", backends);
    return 2;
  }
  int gpu = 0;
  for (int i = 0; i < nk; ++i) {
    if (!present(kinds[i])) {
      printf("%s: no device, skipped\n", dpt_backend_kind_name(kinds[i]));
      return 77;
    }
    gpu |= kinds[i] != DPT_BACKEND_CPU;
  }
  const double tolerance = gpu ? 1e-4 : 1e-5;
  dpt_comm *comm = NULL;
  dpt_status st = dpt_comm_create_mpi(NULL, &comm);
  if (st == DPT_ERR_UNSUPPORTED) {
    printf("MPI not compiled in: skipped\n");
    return 77;
  }
  if (st != DPT_OK) {
    fprintf(stderr, "dpt_comm_create_mpi: %s\n", dpt_last_error());
    return 1;
  }
  int rank = dpt_comm_rank(comm), size = dpt_comm_size(comm), failures = 0;
  const size_t batches[2] = {64, 250};
  for (int t = 0; t < 2; ++t) {
    dpt_dataset *ds = make_data(1000, 11);
    dpt_train_config cfg;
    dpt_train_config_default(&cfg);
    const size_t hidden[2] = {32, 16};
    dpt_model_spec_mlp(&cfg.model, 1, 8, 8, hidden, 2, 10);
    cfg.data.train = ds;
    cfg.schedule.global_batch = batches[t];
    cfg.schedule.max_steps = 20;
    cfg.schedule.seed = 7;
    cfg.checks.check_every = 5;
    const size_t n = num_params(&cfg.model);
    float *ref = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    dpt_train_report rep;
    cfg.final_params = got;
    cfg.devices.backend = kinds[rank % nk];
    st = dpt_train(&cfg, comm, &rep);
    if (st != DPT_OK) {
      fprintf(stderr, "rank %d: mpi training failed: %s\n", rank, dpt_last_error());
      ++failures;
    } else if (rep.ranks != size || rep.replicas != size || rep.steps != 20) {
      fprintf(stderr, "rank %d: report says %d ranks %d replicas %lld steps\n", rank, rep.ranks,
              rep.replicas, (long long)rep.steps);
      ++failures;
    } else if (size == 1 ? rep.imbalance_seconds != 0.0
                         : !(rep.imbalance_seconds > 0 && rep.imbalance_seconds < rep.seconds)) {
      fprintf(stderr, "rank %d: imbalance %g s in a %g s run\n", rank, rep.imbalance_seconds,
              rep.seconds);
      ++failures;
    }
    cfg.final_params = ref;
    cfg.devices.replicas = 1;
    cfg.devices.backend = DPT_BACKEND_CPU;
    if (dpt_train(&cfg, NULL, NULL) != DPT_OK) {
      fprintf(stderr, "rank %d: reference failed: %s\n", rank, dpt_last_error());
      ++failures;
    }
    if (rank == 0 && st == DPT_OK) {
      double d = max_rel_diff(got, ref, n);
      printf("%d ranks (%s), B=%zu: max relative difference to one CPU replica %.3g\n", size,
             backends, cfg.schedule.global_batch, d);
      if (!(d <= tolerance)) ++failures;
    }
    free(ref);
    free(got);
    dpt_dataset_destroy(ds);
  }
  /* Gradient buckets under MPI: the progress thread's reduce-scatters run while backward goes
   * on (1 KiB ring blocks: 3 buckets); the parameters are bit for bit the unbucketed run's. */
  {
    dpt_comm_options o0, o;
    dpt_comm_get_options(comm, &o0);
    o = o0;
    o.block_bytes = 1024;
    o.piece_bytes = 256;
    dpt_comm_set_options(comm, &o);
    dpt_dataset *ds = make_data(1000, 11);
    dpt_train_config cfg;
    tiny_mlp_config(&cfg, ds);
    cfg.devices.backend = kinds[rank % nk];
    const size_t n = num_params(&cfg.model);
    float *ref = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    dpt_train_report r0, rb;
    cfg.final_params = ref;
    st = dpt_train(&cfg, comm, &r0);
    cfg.final_params = got;
    cfg.exchange.bucket_bytes = 1024;
    if (st == DPT_OK) st = dpt_train(&cfg, comm, &rb);
    if (st != DPT_OK) {
      fprintf(stderr, "rank %d: bucketed training failed: %s\n", rank, dpt_last_error());
      ++failures;
    } else if (rank == 0 && (memcmp(got, ref, n * sizeof(float)) != 0 ||
                             rb.param_hash != r0.param_hash || !(rb.exchange_seconds > 0))) {
      fprintf(stderr, "buckets under MPI: parameters differ from one exchange (%016llx, %016llx)\n",
              (unsigned long long)rb.param_hash, (unsigned long long)r0.param_hash);
      ++failures;
    } else if (rank == 0) {
      printf("%d ranks (%s): buckets bit for bit, exchange %.3f s, exposed %.3f s\n", size,
             backends, rb.exchange_seconds, rb.exposed_seconds);
    }
    free(ref);
    free(got);
    dpt_dataset_destroy(ds);
    dpt_comm_set_options(comm, &o0);
  }
  /* Ranks whose data sets differ in size (each rank reads its own files) all stop at start-up
   * with the same error. */
  if (size > 1) {
    dpt_comm_set_timeout(comm, 20.0);
    dpt_dataset *ds = make_data(rank == size - 1 ? 999 : 1000, 11);
    dpt_train_config cfg;
    tiny_mlp_config(&cfg, ds);
    st = dpt_train(&cfg, comm, NULL); /* a rank left waiting would end in DPT_ERR_TIMEOUT */
    char want[128];
    snprintf(want, sizeof want, "training samples: replica 0 has 1000, replica %d has 999",
             size - 1);
    if (st != DPT_ERR_MISMATCH || !strstr(dpt_last_error(), want)) {
      fprintf(stderr, "rank %d: different data sets: %s: %s\n", rank, dpt_status_name(st),
              dpt_last_error());
      ++failures;
    }
    dpt_dataset_destroy(ds);
  }
  /* The last rank starts with another setting, or other data of the same size: every rank
   * stops at start-up with DPT_ERR_MISMATCH naming the field. */
  static const char *const fields[] = {
      "the optimizer (optim.kind", "the learning rate", "the seed",
      "the global batch",          "the step limit",    "the training set's contents"};
  for (int f = 0; size > 1 && f < (int)(sizeof fields / sizeof fields[0]); ++f) {
    dpt_comm_set_timeout(comm, 20.0);
    const int odd = rank == size - 1;
    dpt_dataset *ds = make_data(1000, odd && f == 5 ? 12 : 11);
    dpt_train_config cfg;
    tiny_mlp_config(&cfg, ds);
    if (odd && f == 0) dpt_optim_config_default(&cfg.optim, DPT_OPTIM_ADAMW);
    if (odd && f == 1) cfg.optim.lr = 0.1f;
    if (odd && f == 2) cfg.schedule.seed = 8;
    if (odd && f == 3) cfg.schedule.global_batch = 32;
    if (odd && f == 4) cfg.schedule.max_steps = 4;
    st = dpt_train(&cfg, comm, NULL);
    if (st != DPT_ERR_MISMATCH || !strstr(dpt_last_error(), fields[f])) {
      fprintf(stderr, "rank %d: different %s: %s: %s\n", rank, fields[f], dpt_status_name(st),
              dpt_last_error());
      ++failures;
    }
    dpt_dataset_destroy(ds);
  }
  /* The last rank cannot start (no such device): it returns its own failure, every other rank
   * DPT_ERR_PEER naming it, all at start-up. */
  if (size > 1) {
    dpt_comm_set_timeout(comm, 20.0);
    dpt_dataset *ds = make_data(1000, 11);
    dpt_train_config cfg;
    tiny_mlp_config(&cfg, ds);
    cfg.devices.device = rank == size - 1 ? 1000 : -1;
    st = dpt_train(&cfg, comm, NULL);
    char want[64];
    snprintf(want, sizeof want, "replica %d could not start", size - 1);
    const int ok = rank == size - 1 ? st != DPT_OK && st != DPT_ERR_PEER
                                    : st == DPT_ERR_PEER && strstr(dpt_last_error(), want);
    if (!ok) {
      fprintf(stderr, "rank %d: one rank without a device: %s: %s\n", rank, dpt_status_name(st),
              dpt_last_error());
      ++failures;
    }
    dpt_dataset_destroy(ds);
  }
  dpt_comm_destroy(comm);
  printf("rank %d: %s\n", rank, failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}

/* `test_train backend NAME`: 2 replicas (threads) on a GPU backend train 20 steps and must
 * match one CPU replica within 1e-4 relative (gemm rounds differently on each backend). */
static dpt_backend_kind g_backend;

START_TEST(backend_matches_cpu) {
  dpt_dataset *ds = make_data(640, 11);
  dpt_train_config cfg;
  mlp_config(&cfg, ds, 64);
  size_t n = num_params(&cfg.model);
  dpt_train_report rep;
  float *ref = train_threads(cfg, 1, &rep);
  cfg.devices.backend = g_backend;
  float *got = train_threads(cfg, 2, &rep);
  ck_assert_str_eq(rep.backend, dpt_backend_kind_name(g_backend));
  double d = max_rel_diff(got, ref, n);
  printf("%s, 2 replicas, 20 steps: max relative difference to one CPU replica %.3g\n", rep.backend,
         d);
  ck_assert_msg(d <= 1e-4, "%s differs from the CPU by %g (rel)", rep.backend, d);
  free(ref);
  free(got);
  dpt_dataset_destroy(ds);
}
END_TEST

/* On the device, 3 replicas, the ring forced: gradient buckets with the bfloat16 exchange and
 * error feedback (the conversions at the buckets' offsets in device buffers, their staged
 * nonblocking all-reduces, each bucket's part of the full step's update), and with the sharded
 * float32 step (each bucket's shard updated, its parameters all-gathered by a nonblocking
 * request), give the unbucketed exchange's parameters bit for bit. */
START_TEST(backend_buckets) {
  setenv("DPT_COMM_BLOCK", "1024", 1);
  setenv("DPT_COMM_PIECE", "256", 1);
  setenv("DPT_ALLREDUCE_ALGO", "ring", 1);
  dpt_dataset *ds = make_data(640, 11);
  dpt_train_config cfg;
  mlp_config(&cfg, ds, 64);
  const size_t n = num_params(&cfg.model);
  cfg.devices.backend = g_backend;
  cfg.exchange.grad_dtype = DPT_COMM_BF16;
  cfg.exchange.grad_error_feedback = 1;
  float *ref = train_threads(cfg, 3, NULL);
  cfg.exchange.bucket_bytes = 1024;
  float *got = train_threads(cfg, 3, NULL);
  ck_assert_msg(memcmp(got, ref, n * sizeof(float)) == 0, "bfloat16: buckets differ");
  free(ref);
  free(got);
  cfg.exchange.grad_dtype = DPT_COMM_F32;
  cfg.exchange.grad_error_feedback = 0;
  cfg.exchange.bucket_bytes = 0;
  ref = train_threads(cfg, 3, NULL);
  cfg.exchange.bucket_bytes = 2048;
  got = train_threads(cfg, 3, NULL);
  ck_assert_msg(memcmp(got, ref, n * sizeof(float)) == 0, "float32, sharded: buckets differ");
  free(ref);
  free(got);
  unsetenv("DPT_COMM_BLOCK");
  unsetenv("DPT_COMM_PIECE");
  unsetenv("DPT_ALLREDUCE_ALGO");
  dpt_dataset_destroy(ds);
}
END_TEST

static int backend_main(const char *name) {
  if (parse_kinds(name, &g_backend, 1) != 1) return 2;
  if (!present(g_backend)) {
    printf("%s: no device, skipped\n", name);
    return 77;
  }
  Suite *s = suite_create("train_backend");
  TCase *tc = tcase_create(name);
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, backend_matches_cpu);
  tcase_add_test(tc, backend_buckets);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK); /* drivers' threads do not survive a fork */
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "mpi") == 0) return mpi_main(argc > 2 ? argv[2] : "cpu");
  if (argc > 2 && strcmp(argv[1], "backend") == 0) return backend_main(argv[2]);
  SRunner *sr = srunner_create(threads_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
