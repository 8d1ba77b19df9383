/* The batch split (dpt_train_config.split): the proportional split with replicas of unequal
 * speed (one slowed by the DPT_TEST_SLOW_REPLICA testing knob) trains the same parameters as
 * the even split within float rounding, its shares really are unequal and stay within their
 * bounds, replicas of equal speed keep about even shares, and bad settings are refused. Also
 * replicas on different backends in one process (replica_backends). */
#define _XOPEN_SOURCE 700 /* tmp_dir.h: mkdtemp, nftw */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/advanced.h"
#include "tmp_dir.h"
#include "train_data.h"

/* What the callbacks saw: every split change, and the final report's shares. */
typedef struct seen {
  int changes;    /* on_split calls */
  int replicas;   /* from the last call */
  size_t last[8]; /* the latest shares */
  size_t lo, hi;  /* the smallest and largest share ever given */
  size_t final_shares[8];
  int final_seen;
  char backend[64]; /* the final report's backend */
  size_t batch;     /* the global batch the shares must sum to */
  int bad;          /* a callback saw shares that do not sum to it, or no shares */
  char log[2048];   /* the on_log lines */
} seen;

static void on_log(const char *line, void *user) {
  seen *w = user;
  const size_t len = strlen(w->log);
  snprintf(w->log + len, sizeof w->log - len, "%s\n", line);
}

static void on_split(int64_t step, const size_t *shares, const double *per, int replicas,
                     void *user) {
  seen *w = user;
  ++w->changes;
  w->replicas = replicas;
  printf("  after step %lld:", (long long)step);
  for (int i = 0; i < replicas; ++i)
    printf(" %zu (%.3g ms/sample)", shares[i], per[i] * 1e3);
  printf("\n");
  size_t sum = 0;
  for (int i = 0; i < replicas && i < 8; ++i) {
    w->last[i] = shares[i];
    sum += shares[i];
    if (w->lo == 0 || shares[i] < w->lo) w->lo = shares[i];
    if (shares[i] > w->hi) w->hi = shares[i];
  }
  /* Called on a replica's thread: recorded here, asserted by the test. */
  if (sum != w->batch || !(per[0] > 0)) w->bad = 1;
}

static void on_report(const dpt_train_report *r, void *user) {
  seen *w = user;
  if (!r->final) return;
  if (!r->shares) {
    w->bad = 1;
    return;
  }
  for (int i = 0; i < r->replicas && i < 8; ++i)
    w->final_shares[i] = r->shares[i];
  w->final_seen = 1;
  snprintf(w->backend, sizeof w->backend, "%s", r->backend);
}

/* An MLP with dropout, so that the dropout key (the sample's place in the global batch) is
 * part of what must match. */
static void model(dpt_model_spec *s) {
  ck_assert_int_eq(dpt_model_spec_init(s, 1, 8, 8, 10), DPT_OK);
  const dpt_layer_spec layers[] = {
      {.kind = DPT_LAYER_FLATTEN},
      {.kind = DPT_LAYER_LINEAR, .size = 512},
      {.kind = DPT_LAYER_RELU},
      {.kind = DPT_LAYER_DROPOUT, .p = 0.25f},
      {.kind = DPT_LAYER_LINEAR, .size = 10},
  };
  for (size_t i = 0; i < sizeof layers / sizeof layers[0]; ++i)
    ck_assert_int_eq(dpt_model_spec_add(s, &layers[i], NULL), DPT_OK);
}

/* The test's configuration, with what the callbacks see (*w) cleared. */
static void config(dpt_train_config *cfg, dpt_dataset *train, size_t batch, seen *w) {
  memset(w, 0, sizeof *w);
  dpt_train_config_default(cfg);
  model(&cfg->model);
  cfg->data.train = train;
  cfg->schedule.global_batch = batch;
  cfg->schedule.epochs = 100;
  cfg->schedule.max_steps = 30;
  cfg->schedule.seed = 3;
  cfg->checks.check_every = 5;
  cfg->optim.lr = 0.05f;
  cfg->optim.momentum = 0.9f;
  cfg->callbacks.on_split = on_split;
  cfg->callbacks.on_report = on_report;
  cfg->callbacks.on_log = on_log;
  cfg->callbacks.user = w;
  w->batch = batch;
}

static size_t state_size(const dpt_model_spec *spec) {
  dpt_backend *be = NULL;
  dpt_model *m = NULL;
  size_t n = 0;
  if (dpt_backend_create(DPT_BACKEND_CPU, 0, &be) == DPT_OK &&
      dpt_model_create(be, spec, 1, &m) == DPT_OK)
    n = dpt_model_state_size(m);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
  return n;
}

static float *train(dpt_train_config cfg, int replicas, dpt_train_report *rep) {
  float *out = malloc(state_size(&cfg.model) * sizeof(float));
  cfg.devices.replicas = replicas;
  cfg.final_params = out;
  const dpt_status st = dpt_train(&cfg, NULL, rep);
  ck_assert_msg(st == DPT_OK, "%d replicas: %s: %s", replicas, dpt_status_str(st),
                dpt_last_error());
  return out;
}

static double max_rel_diff(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = fabs((double)a[i] - (double)b[i]);
    num = d > num ? d : num;
    den = fabs((double)b[i]) > den ? fabs((double)b[i]) : den;
  }
  return num / (den > 0 ? den : 1);
}

/* R replicas, replica R-1 slowed 4x: the proportional split against the even one. `n`
 * samples with batch B and keep_last give a shorter last batch, cut in proportion too. */
static void check_slowed(int R, size_t n, size_t B, int keep_last) {
  dpt_dataset *ds = make_data(n, 13);
  seen w;
  dpt_train_config cfg;
  config(&cfg, ds, B, &w);
  cfg.schedule.keep_last = keep_last;
  const size_t np = state_size(&cfg.model);
  dpt_train_report rep;
  float *even = train(cfg, R, &rep);
  ck_assert_int_eq(w.changes, 0); /* the even split never changes */
  char knob[32];
  snprintf(knob, sizeof knob, "%d:4", R - 1);
  setenv("DPT_TEST_SLOW_REPLICA", knob, 1);
  cfg.devices.split = DPT_SPLIT_PROPORTIONAL;
  cfg.devices.split_every = 4;
  memset(&w, 0, sizeof w);
  w.batch = B;
  float *prop = train(cfg, R, &rep);
  unsetenv("DPT_TEST_SLOW_REPLICA");
  const double d = max_rel_diff(prop, even, np);
  printf("R=%d B=%zu: %d split changes, final shares", R, B, w.changes);
  for (int i = 0; i < R; ++i)
    printf(" %zu", w.final_shares[i]);
  printf("; parameters differ from the even split by %.3g (rel)\n", d);
  ck_assert_msg(d <= 1e-5, "R=%d: proportional differs from even by %g (rel)", R, d);
  ck_assert_int_eq(rep.steps, 30);
  ck_assert(w.final_seen && !w.bad);
  ck_assert_int_ge(w.changes, 1);
  /* The shares sum to the batch, each in [1, 2 x the even slice], and the slowed replica has
   * fewer samples than every other one. */
  const size_t even_slice = (B + (size_t)R - 1) / (size_t)R;
  size_t sum = 0;
  for (int i = 0; i < R; ++i) {
    sum += w.final_shares[i];
    ck_assert_uint_ge(w.final_shares[i], 1);
    ck_assert_uint_le(w.final_shares[i], 2 * even_slice);
    if (i < R - 1) ck_assert_uint_lt(w.final_shares[R - 1], w.final_shares[i]);
  }
  ck_assert_uint_eq(sum, B);
  ck_assert_uint_ge(w.lo, 1);
  ck_assert_uint_le(w.hi, 2 * even_slice);
  free(even);
  free(prop);
  dpt_dataset_destroy(ds);
}

START_TEST(slowed_two) {
  check_slowed(2, 640, 64, 0);
}
END_TEST

START_TEST(slowed_three_keep_last) {
  /* 611 samples, B = 60: ten full batches and one of 11, cut by the shares. */
  check_slowed(3, 611, 60, 1);
}
END_TEST

/* Equal replicas (no knob): the shares stay about even. The replicas share the host's cores
 * with whatever else runs, so "about" is generous: within 50 % of the even slice. */
START_TEST(equal_speed_stays_even) {
  dpt_dataset *ds = make_data(640, 5);
  seen w;
  dpt_train_config cfg;
  config(&cfg, ds, 64, &w);
  cfg.devices.split = DPT_SPLIT_PROPORTIONAL;
  cfg.devices.split_every = 5;
  cfg.schedule.max_steps = 40;
  dpt_train_report rep;
  free(train(cfg, 2, &rep));
  printf("equal speed: %d split changes, final shares %zu %zu\n", w.changes, w.final_shares[0],
         w.final_shares[1]);
  ck_assert(w.final_seen);
  ck_assert_uint_eq(w.final_shares[0] + w.final_shares[1], 64);
  for (int i = 0; i < 2; ++i) {
    ck_assert_uint_ge(w.final_shares[i], 16);
    ck_assert_uint_le(w.final_shares[i], 48);
  }
  dpt_dataset_destroy(ds);
}
END_TEST

/* With gradient accumulation the slices' micro-batches follow the shares, and the activations
 * are sized for the cap. */
START_TEST(slowed_accumulate) {
  dpt_dataset *ds = make_data(640, 17);
  seen w;
  dpt_train_config cfg;
  config(&cfg, ds, 64, &w);
  cfg.schedule.accumulate = 3;
  cfg.schedule.max_steps = 20;
  const size_t np = state_size(&cfg.model);
  dpt_train_report rep;
  float *even = train(cfg, 2, &rep);
  setenv("DPT_TEST_SLOW_REPLICA", "0:4", 1);
  cfg.devices.split = DPT_SPLIT_PROPORTIONAL;
  cfg.devices.split_every = 3;
  float *prop = train(cfg, 2, &rep);
  unsetenv("DPT_TEST_SLOW_REPLICA");
  const double d = max_rel_diff(prop, even, np);
  ck_assert_msg(d <= 1e-5, "accumulate: proportional differs from even by %g (rel)", d);
  ck_assert_int_ge(w.changes, 1);
  ck_assert_uint_lt(w.final_shares[0], w.final_shares[1]);
  free(even);
  free(prop);
  dpt_dataset_destroy(ds);
}
END_TEST

/* The split is a run term a resume may change: even for 10 steps with a checkpoint, then resumed
 * with the proportional split (one replica slowed) to step 20, against 20 even steps. */
START_TEST(resume_changes_split) {
  tu_tmp_make("split");
  dpt_dataset *ds = make_data(640, 19);
  seen w;
  dpt_train_config cfg;
  config(&cfg, ds, 64, &w);
  cfg.schedule.max_steps = 20;
  const size_t np = state_size(&cfg.model);
  dpt_train_report rep;
  float *ref = train(cfg, 2, &rep);
  cfg.checkpoints.checkpoint_dir = tmp_dir;
  cfg.checkpoints.checkpoint_every = 10;
  cfg.schedule.max_steps = 10;
  free(train(cfg, 2, &rep));
  cfg.schedule.max_steps = 20;
  cfg.checkpoints.resume = 1;
  cfg.devices.split = DPT_SPLIT_PROPORTIONAL;
  cfg.devices.split_every = 2;
  memset(&w, 0, sizeof w);
  w.batch = 64;
  setenv("DPT_TEST_SLOW_REPLICA", "1:4", 1);
  float *got = train(cfg, 2, &rep);
  unsetenv("DPT_TEST_SLOW_REPLICA");
  ck_assert_msg(strstr(w.log, "resumed from") && strstr(w.log, "the batch split"), "log: %s",
                w.log);
  ck_assert_int_eq(rep.steps, 20);
  ck_assert_int_ge(w.changes, 1);
  const double d = max_rel_diff(got, ref, np);
  ck_assert_msg(d <= 1e-5, "resumed with the proportional split: %g (rel) from even", d);
  free(ref);
  free(got);
  tu_tmp_remove();
  dpt_dataset_destroy(ds);
}
END_TEST

START_TEST(bad_settings) {
  dpt_dataset *ds = make_data(64, 1);
  seen w;
  dpt_train_config cfg;
  config(&cfg, ds, 32, &w);
  cfg.devices.replicas = 2;
  cfg.devices.split = (dpt_split_mode)7;
  ck_assert_int_eq(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(dpt_last_error(), "split"));
  cfg.devices.split = DPT_SPLIT_PROPORTIONAL;
  cfg.devices.split_every = -1;
  ck_assert_int_eq(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(dpt_last_error(), "split_every"));
  dpt_dataset_destroy(ds);
}
END_TEST

/* ---- replicas on different backends in one process ---- */

static int present(dpt_backend_kind k) {
  int n = 0;
  return dpt_backend_compiled(k) && dpt_device_count(k, &n) == DPT_OK && n > 0;
}

static dpt_backend_kind g_other; /* the second replica's backend */

/* Replica 0 on the CPU, replica 1 on g_other: the drift checks (every 5 steps and at the end)
 * find the same parameters on both, and they match a 2-replica CPU run within 1e-5. */
START_TEST(mixed_backends) {
  dpt_dataset *ds = make_data(640, 11);
  seen w;
  dpt_train_config cfg;
  config(&cfg, ds, 64, &w);
  cfg.schedule.max_steps = 20;
  const size_t np = state_size(&cfg.model);
  dpt_train_report rep;
  float *ref = train(cfg, 2, &rep);
  const uint64_t ref_hash = rep.param_hash;
  const dpt_backend_kind kinds[2] = {DPT_BACKEND_CPU, g_other};
  cfg.devices.replica_backends = kinds;
  float *got = train(cfg, 2, &rep);
  char want[64];
  snprintf(want, sizeof want, "cpu,%s", dpt_backend_kind_name(g_other));
  ck_assert_str_eq(w.backend, want);
  const double d = max_rel_diff(got, ref, np);
  printf("replicas cpu,%s: parameters %016llx (cpu only: %016llx), max relative difference "
         "%.3g\n",
         dpt_backend_kind_name(g_other), (unsigned long long)rep.param_hash,
         (unsigned long long)ref_hash, d);
  ck_assert_msg(d <= 1e-5, "cpu,%s differs from cpu,cpu by %g (rel)",
                dpt_backend_kind_name(g_other), d);
  /* The proportional split over the two backends trains the same too. */
  cfg.devices.split = DPT_SPLIT_PROPORTIONAL;
  cfg.devices.split_every = 4;
  free(got);
  got = train(cfg, 2, &rep);
  const double dp = max_rel_diff(got, ref, np);
  printf("replicas cpu,%s, proportional: shares %zu %zu, max relative difference %.3g\n",
         dpt_backend_kind_name(g_other), w.final_shares[0], w.final_shares[1], dp);
  ck_assert_msg(dp <= 1e-5, "proportional cpu,%s differs by %g (rel)",
                dpt_backend_kind_name(g_other), dp);
  free(ref);
  free(got);
  dpt_dataset_destroy(ds);
}
END_TEST

static int run(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK); /* drivers' threads do not survive a fork */
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "mixed") == 0) {
    if (dpt_backend_kind_parse(argv[2], &g_other) != DPT_OK) return 2;
    if (!present(g_other)) {
      printf("%s: no device, skipped\n", argv[2]);
      return 77;
    }
    Suite *s = suite_create("train_mixed");
    TCase *tc = tcase_create(argv[2]);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, mixed_backends);
    suite_add_tcase(s, tc);
    return run(s);
  }
  Suite *s = suite_create("train_split");
  TCase *tc = tcase_create("split");
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, slowed_two);
  tcase_add_test(tc, slowed_three_keep_last);
  tcase_add_test(tc, slowed_accumulate);
  tcase_add_test(tc, equal_speed_stays_even);
  tcase_add_test(tc, resume_changes_split);
  tcase_add_test(tc, bad_settings);
  suite_add_tcase(s, tc);
  return run(s);
}
