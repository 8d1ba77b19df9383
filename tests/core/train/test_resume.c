/* Checkpoints in training: a run stopped on request and resumed ends bit for bit as the
 * uninterrupted run (SGD and AdamW, full and sharded step, an MLP and a batch norm model); at
 * another world size within 1e-5; a corrupt newest checkpoint is passed over; a changed
 * configuration is refused or logged; a non-finite step rolls back alike on every replica. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/io/checkpoint.h"
#include "dptrain/advanced.h"
#include "train_data.h"

static char tmpdir[64];

static void setup_tmp(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/dpt_resume_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

/* Empties the checkpoint directory: a run that does not resume refuses one with checkpoints. */
static void clear_tmp(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -f %s/ckpt-*", tmpdir);
  ck_assert_int_eq(system(cmd), 0);
}

static void teardown_tmp(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  ck_assert_int_eq(system(cmd), 0);
}

/* What the callbacks see: the steps so far, a stop request to raise at step `stop_at`, the
 * log lines. */
typedef struct watch {
  int64_t steps, stop_at;
  volatile sig_atomic_t stop;
  char log[8192];
} watch;

/* Counts the steps; raises the stop request after step stop_at. */
static void on_progress(int64_t epoch, size_t batch, size_t batches, double loss, void *user) {
  (void)epoch, (void)batch, (void)batches, (void)loss;
  watch *w = user;
  if (++w->steps == w->stop_at) w->stop = SIGTERM;
}

static void on_log(const char *line, void *user) {
  watch *w = user;
  size_t len = strlen(w->log);
  snprintf(w->log + len, sizeof w->log - len, "%s\n", line);
}

enum { MODEL_MLP, MODEL_BN };

/* A convolution, batch norm, ReLU, global average pool and linear classifier. */
static void bn_model(dpt_model_spec *s) {
  dpt_model_spec_init(s, 1, 8, 8, 10);
  const dpt_layer_spec layers[] = {
      {.kind = DPT_LAYER_CONV2D, .size = 4, .kernel = 3, .padding = 1, .no_bias = 1},
      {.kind = DPT_LAYER_BATCHNORM2D},
      {.kind = DPT_LAYER_RELU},
      {.kind = DPT_LAYER_GLOBAL_AVGPOOL},
      {.kind = DPT_LAYER_FLATTEN},
      {.kind = DPT_LAYER_LINEAR, .size = 10}};
  const char *names[] = {"conv", "bn", "relu", "gap", "flat", "fc"};
  for (size_t i = 0; i < sizeof layers / sizeof layers[0]; ++i) {
    dpt_layer_spec l = layers[i];
    snprintf(l.name, sizeof l.name, "%s", names[i]);
    /* no inputs named: the layer before */
    ck_assert_int_eq(dpt_model_spec_add(s, &l, NULL), DPT_OK);
  }
}

/* 240 samples in batches of 24: 10 steps an epoch, so 14 steps cross an epoch's end. */
static void config(dpt_train_config *cfg, dpt_dataset *ds, int model, dpt_optim_kind opt) {
  dpt_train_config_default(cfg);
  const size_t hidden[2] = {32, 16};
  if (model == MODEL_MLP)
    ck_assert_int_eq(dpt_model_spec_mlp(&cfg->model, 1, 8, 8, hidden, 2, 10), DPT_OK);
  else
    bn_model(&cfg->model);
  dpt_optim_config_default(&cfg->optim, opt);
  if (opt == DPT_OPTIM_SGD) {
    cfg->optim.lr = 0.05f;
    cfg->optim.momentum = 0.9f;
  }
  cfg->optim.schedule = DPT_SCHEDULE_COSINE;
  cfg->optim.total_steps = 14;
  cfg->data.train = ds;
  cfg->schedule.global_batch = 24;
  cfg->schedule.epochs = 100;
  cfg->schedule.max_steps = 14;
  cfg->schedule.seed = 11;
  cfg->checks.check_every = 3;
}

static size_t state_floats(const dpt_model_spec *spec) {
  dpt_backend *be;
  dpt_model *m;
  ck_assert_int_eq(dpt_backend_create(DPT_BACKEND_CPU, 0, &be), DPT_OK);
  ck_assert_int_eq(dpt_model_create(be, spec, 1, &m), DPT_OK);
  size_t n = dpt_model_state_size(m);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
  return n;
}

/* Runs cfg with `replicas` threads; the final state (malloc'd), or NULL when `want` is not
 * DPT_OK (the run must then fail with it). */
static float *run(dpt_train_config cfg, int replicas, watch *w, dpt_status want,
                  dpt_train_report *rep) {
  const size_t n = state_floats(&cfg.model);
  float *out = calloc(n, sizeof(float));
  cfg.devices.replicas = replicas;
  cfg.final_params = out;
  if (w) {
    w->steps = 0;
    w->stop = 0;
    cfg.callbacks.user = w;
    cfg.callbacks.on_progress = on_progress;
    cfg.callbacks.on_log = on_log;
    cfg.checks.stop_request = &w->stop;
  }
  dpt_train_report local;
  dpt_status st = dpt_train(&cfg, NULL, rep ? rep : &local);
  ck_assert_msg(st == want, "%d replicas: got %s (%s), want %s", replicas, dpt_status_str(st),
                dpt_last_error(), dpt_status_str(want));
  if (want == DPT_OK) return out;
  free(out);
  return NULL;
}

/* Stopped by a request after step `stop_at` with checkpoints every 4 steps, resumed with
 * `after` replicas: the final state next to the uninterrupted run's with `before` replicas. */
static void stop_and_resume(dpt_train_config cfg, int before, int after, int64_t stop_at,
                            float **ref, float **resumed) {
  *ref = run(cfg, before, NULL, DPT_OK, NULL);
  cfg.checkpoints.checkpoint_dir = tmpdir;
  cfg.checkpoints.checkpoint_every = 4;
  watch w = {.stop_at = stop_at};
  run(cfg, before, &w, DPT_ERR_INTERRUPTED, NULL);
  ck_assert_msg(strstr(dpt_last_error(), "checkpoint"), "%s", dpt_last_error());
  cfg.checkpoints.resume = 1;
  memset(&w, 0, sizeof w);
  dpt_train_report rep;
  *resumed = run(cfg, after, &w, DPT_OK, &rep);
  ck_assert_msg(strstr(w.log, "resumed from"), "log: %s", w.log);
  ck_assert_int_eq(rep.steps, 14);
  ck_assert_int_eq(w.steps, 14 - (stop_at + 1)); /* the stop comes at the next step's end */
}

START_TEST(resume_bit_for_bit) {
  dpt_dataset *ds = make_data(240, 3);
  const int models[] = {MODEL_MLP, MODEL_BN};
  const dpt_optim_kind opts[] = {DPT_OPTIM_SGD, DPT_OPTIM_ADAMW};
  /* replicas 1; 2 sharded; 2 with the full step */
  const int reps[] = {1, 2, 2}, full[] = {0, 0, 1};
  for (int m = 0; m < 2; ++m)
    for (int o = 0; o < 2; ++o)
      for (int v = 0; v < 3; ++v) {
        dpt_train_config cfg;
        config(&cfg, ds, models[m], opts[o]);
        cfg.exchange.full_optimizer_step = full[v];
        float *ref, *res;
        stop_and_resume(cfg, reps[v], reps[v], 6, &ref, &res);
        const size_t n = state_floats(&cfg.model);
        ck_assert_msg(memcmp(ref, res, n * sizeof(float)) == 0,
                      "model %d, optimizer %d, variant %d: the resumed run differs", m, o, v);
        free(ref);
        free(res);
        teardown_tmp();
        setup_tmp();
      }
  dpt_dataset_destroy(ds);
}
END_TEST

/* The largest |a - b| over the state, relative to the largest |b|. */
static double max_rel(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num = fmax(num, fabs((double)a[i] - (double)b[i]));
    den = fmax(den, fabs((double)b[i]));
  }
  return num / (den > 0 ? den : 1);
}

START_TEST(resume_other_world_size) {
  dpt_dataset *ds = make_data(240, 3);
  /* Batch norm over each replica's slice depends on the split: the world-size-independent
   * models are those without it, or with sync-bn. */
  const int from[] = {2, 3, 2, 3}, to[] = {3, 2, 3, 2},
            model[] = {MODEL_MLP, MODEL_MLP, MODEL_BN, MODEL_BN};
  for (int i = 0; i < 4; ++i) {
    dpt_train_config cfg;
    config(&cfg, ds, model[i], DPT_OPTIM_ADAMW);
    cfg.exchange.sync_bn = model[i] == MODEL_BN;
    float *ref, *res;
    stop_and_resume(cfg, from[i], to[i], 5, &ref, &res);
    double d = max_rel(res, ref, state_floats(&cfg.model));
    printf("model %d, %d -> %d replicas: %.2g from the uninterrupted run\n", model[i], from[i],
           to[i], d);
    ck_assert_msg(d < 1e-5, "model %d, %d -> %d replicas: %g from the uninterrupted run", model[i],
                  from[i], to[i], d);
    free(ref);
    free(res);
    teardown_tmp();
    setup_tmp();
  }
  dpt_dataset_destroy(ds);
}
END_TEST

/* Checkpoints at steps 4 and 8 of an 8-step run (and at the end: the same step). */
static void two_checkpoints(dpt_train_config cfg) {
  cfg.checkpoints.checkpoint_dir = tmpdir;
  cfg.checkpoints.checkpoint_every = 4;
  cfg.schedule.max_steps = 8;
  free(run(cfg, 1, NULL, DPT_OK, NULL));
}

START_TEST(resume_refuses_changes) {
  dpt_dataset *ds = make_data(240, 3);
  dpt_train_config cfg;
  config(&cfg, ds, MODEL_MLP, DPT_OPTIM_SGD);
  two_checkpoints(cfg);
  cfg.checkpoints.checkpoint_dir = tmpdir;
  cfg.checkpoints.resume = 1;
  struct {
    const char *field;
    dpt_train_config c;
  } cases[4];
  for (int i = 0; i < 4; ++i)
    cases[i].c = cfg;
  cases[0].field = "global batch";
  cases[0].c.schedule.global_batch = 12;
  cases[1].field = "the model";
  const size_t hidden[2] = {32, 8};
  ck_assert_int_eq(dpt_model_spec_mlp(&cases[1].c.model, 1, 8, 8, hidden, 2, 10), DPT_OK);
  cases[2].field = "the seed";
  cases[2].c.schedule.seed = 12;
  cases[3].field = "momentum";
  cases[3].c.optim.momentum = 0.5f;
  for (int i = 0; i < 4; ++i) {
    watch w = {0};
    run(cases[i].c, 1, &w, DPT_ERR_MISMATCH, NULL);
    const char *e = dpt_last_error();
    ck_assert_msg(strstr(e, cases[i].field) && strstr(e, "ckpt-"), "%s", e);
  }
  /* A new learning rate is allowed, and said. */
  watch w = {0};
  cfg.optim.lr = 0.02f;
  free(run(cfg, 1, &w, DPT_OK, NULL));
  ck_assert_msg(strstr(w.log, "learning rate") && strstr(w.log, "0.05") && strstr(w.log, "0.02"),
                "%s", w.log);
  dpt_dataset_destroy(ds);
}
END_TEST

/* Flips one byte at `offset` from the end of the file. */
static void flip_byte(const char *path, long from_end) {
  FILE *f = fopen(path, "r+b");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fseek(f, -from_end, SEEK_END), 0);
  int c = fgetc(f);
  ck_assert_int_eq(fseek(f, -from_end, SEEK_END), 0);
  fputc(c ^ 0x40, f);
  fclose(f);
}

START_TEST(corrupt_newest_is_passed_over) {
  dpt_dataset *ds = make_data(240, 3);
  dpt_train_config cfg;
  config(&cfg, ds, MODEL_BN, DPT_OPTIM_SGD);
  float *ref = run(cfg, 1, NULL, DPT_OK, NULL);
  two_checkpoints(cfg);
  char newest[160];
  snprintf(newest, sizeof newest, "%s/ckpt-000000000008.safetensors", tmpdir);
  flip_byte(newest, 8);
  cfg.checkpoints.checkpoint_dir = tmpdir;
  cfg.checkpoints.resume = 1;
  watch w = {0};
  float *res = run(cfg, 1, &w, DPT_OK, NULL);
  ck_assert_msg(strstr(w.log, "passing over") && strstr(w.log, "ckpt-000000000008") &&
                    strstr(w.log, "CRC"),
                "%s", w.log);
  ck_assert_msg(strstr(w.log, "step 4"), "%s", w.log);
  ck_assert_int_eq(w.steps, 10);
  ck_assert_int_eq(memcmp(ref, res, state_floats(&cfg.model) * sizeof(float)), 0);
  free(ref);
  free(res);
  dpt_dataset_destroy(ds);
}
END_TEST

/* The test set of make_data as floats in a safetensors file, sample `poison` a NaN. */
static dpt_dataset *poisoned_data(size_t n, size_t poison) {
  dpt_dataset *src = make_data(n, 3);
  uint64_t *idx = malloc(n * sizeof *idx);
  float *x = malloc(n * 64 * sizeof(float));
  int32_t *y = malloc(n * sizeof(int32_t));
  for (size_t i = 0; i < n; ++i)
    idx[i] = i;
  ck_assert_int_eq(dpt_dataset_gather(src, idx, n, x, y), DPT_OK);
  for (size_t p = 0; p < 64; ++p) /* the loader refuses NaN; the forward pass overflows */
    x[poison * 64 + p] = FLT_MAX;
  char path[128];
  snprintf(path, sizeof path, "%s/poisoned.safetensors", tmpdir);
  dpt_st_tensor t[2] = {
      {.name = "x", .data = x, .ndim = 4, .shape = {(int64_t)n, 1, 8, 8}},
      {.name = "y", .dtype = "I32", .bytes = y, .ndim = 1, .shape = {(int64_t)n}}};
  ck_assert_int_eq(dpt_safetensors_write(path, t, 2, NULL), DPT_OK);
  dpt_dataset *ds = NULL;
  ck_assert_int_eq(dpt_dataset_load_safetensors(path, 10, &ds), DPT_OK);
  dpt_dataset_destroy(src);
  free(idx);
  free(x);
  free(y);
  return ds;
}

/* The rollback runs: the batch norm model, no shuffling (the poisoned sample 130 is in batch 6
 * of the first epoch), 9 steps, checkpoints every 4, rollback. */
static void rollback_config(dpt_train_config *cfg, dpt_dataset *ds) {
  config(cfg, ds, MODEL_BN, DPT_OPTIM_SGD);
  cfg->schedule.shuffle = 0;
  cfg->schedule.max_steps = 9;
  cfg->checkpoints.checkpoint_dir = tmpdir;
  cfg->checkpoints.checkpoint_every = 4;
  cfg->checks.on_nonfinite = DPT_NONFINITE_ROLLBACK;
}

START_TEST(rollback_after_poisoned_sample) {
  /* Sample 130 is in batch 6 of the first epoch (no shuffling): step 6 diverges, the run goes
   * back to the checkpoint of step 4 and on with batch 7. Sync-bn: 1 and 2 replicas compute the
   * same function, so their results compare. */
  dpt_dataset *ds = poisoned_data(240, 130);
  float *first = NULL;
  for (int replicas = 1; replicas <= 2; ++replicas) {
    dpt_train_config cfg;
    rollback_config(&cfg, ds);
    cfg.exchange.sync_bn = 1;
    cfg.checks.rollback_lr_scale = 0.5;
    watch w = {0};
    dpt_train_report rep;
    clear_tmp();
    float *res = run(cfg, replicas, &w, DPT_OK, &rep);
    ck_assert_int_eq(rep.rollbacks, 1);
    ck_assert_int_eq(rep.steps, 9);
    char line[256];
    snprintf(line, sizeof line,
             "non-finite values at step 6: rolled back to %s/ckpt-000000000004.safetensors (step "
             "4), going on with batch 7 of epoch 1; learning rate factor 0.5",
             tmpdir);
    ck_assert_msg(strstr(w.log, line), "%s", w.log);
    const size_t n = state_floats(&cfg.model);
    for (size_t i = 0; i < n; ++i)
      ck_assert_msg(isfinite(res[i]), "state %zu is not finite", i);
    if (replicas == 2) {
      /* Gradient buckets update each shard before the replicas agree that the step is finite:
       * the rollback puts the checkpoint's state back all the same (the same bits). */
      setenv("DPT_COMM_BLOCK", "4096", 1);
      setenv("DPT_COMM_PIECE", "1024", 1);
      dpt_train_config bc = cfg;
      bc.exchange.bucket_bytes = 4096;
      watch bw = {0};
      clear_tmp();
      float *bres = run(bc, replicas, &bw, DPT_OK, &rep);
      unsetenv("DPT_COMM_BLOCK");
      unsetenv("DPT_COMM_PIECE");
      ck_assert_int_eq(rep.rollbacks, 1);
      ck_assert_msg(strstr(bw.log, "each bucket's shard of the update"), "%s", bw.log);
      ck_assert_msg(memcmp(bres, res, n * sizeof(float)) == 0, "buckets: another state");
      free(bres);
    }
    if (first) {
      double d = max_rel(res, first, n);
      ck_assert_msg(d < 1e-4, "2 replicas roll back to %g from 1", d);
      free(res);
    } else {
      first = res;
    }
    /* With no rollback allowed, the same run stops and says why. */
    cfg.checks.max_rollbacks = 0;
    clear_tmp();
    run(cfg, replicas, NULL, DPT_ERR_NONFINITE, NULL);
    ck_assert_msg(strstr(dpt_last_error(), "max_rollbacks"), "%s", dpt_last_error());
    /* Without a policy, the poisoned step stops the run, naming it. */
    cfg.checks.on_nonfinite = DPT_NONFINITE_STOP;
    clear_tmp();
    run(cfg, replicas, NULL, DPT_ERR_NONFINITE, NULL);
    ck_assert_msg(strstr(dpt_last_error(), "step 6"), "%s", dpt_last_error());
  }
  free(first);
  dpt_dataset_destroy(ds);
}
END_TEST

/* Skipped steps do not move the schedule: a resume after one is still bit for bit (AdamW's bias
 * correction and a cosine schedule count updates). */
START_TEST(resume_after_skipped_step) {
  dpt_dataset *ds = poisoned_data(240, 130);
  dpt_train_config cfg;
  config(&cfg, ds, MODEL_MLP, DPT_OPTIM_ADAMW);
  cfg.schedule.shuffle = 0;
  cfg.checks.on_nonfinite = DPT_NONFINITE_SKIP;
  dpt_train_report rep;
  free(run(cfg, 2, NULL, DPT_OK, &rep));
  ck_assert_int_eq(rep.skipped_steps, 1);
  float *ref, *res;
  stop_and_resume(cfg, 2, 2, 7, &ref, &res);
  ck_assert_int_eq(memcmp(ref, res, state_floats(&cfg.model) * sizeof(float)), 0);
  free(ref);
  free(res);
  dpt_dataset_destroy(ds);
}
END_TEST

/* The steps of a log's steps.jsonl, in order ("1 2 3"), and which of them a line marks with
 * `mark` (e.g. "\"skipped\":true"), each line's "loss":null with it. */
static void log_steps(const char *dir, const char *mark, char *steps, char *marked) {
  char path[160], line[1024];
  snprintf(path, sizeof path, "%s/steps.jsonl", dir);
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  steps[0] = marked[0] = '\0';
  while (fgets(line, sizeof line, f)) {
    const char *at = strstr(line, "{\"step\":");
    ck_assert_ptr_nonnull(at);
    const long step = strtol(at + 8, NULL, 10);
    sprintf(steps + strlen(steps), "%s%ld", *steps ? " " : "", step);
    if (strstr(line, mark))
      sprintf(marked + strlen(marked), "%s%ld%s", *marked ? " " : "", step,
              strstr(line, "\"loss\":null") ? " (loss null)" : "");
  }
  fclose(f);
}

/* The log directory marks the steps the policy gave up: a skipped one (its loss null), and a
 * rolled back one, after which the steps from the checkpoint on are logged again. */
START_TEST(log_marks_given_up_steps) {
  dpt_dataset *ds = poisoned_data(240, 130);
  char dir[160], steps[256], marked[256];
  dpt_train_config cfg;
  config(&cfg, ds, MODEL_MLP, DPT_OPTIM_SGD);
  cfg.schedule.shuffle = 0;
  cfg.schedule.max_steps = 9;
  cfg.checks.on_nonfinite = DPT_NONFINITE_SKIP;
  snprintf(dir, sizeof dir, "%s/log_skip", tmpdir);
  cfg.log_dir = dir;
  dpt_train_report rep;
  free(run(cfg, 2, NULL, DPT_OK, &rep));
  ck_assert_int_eq(rep.skipped_steps, 1);
  log_steps(dir, "\"skipped\":true", steps, marked);
  ck_assert_str_eq(steps, "1 2 3 4 5 6 7 8 9");
  ck_assert_str_eq(marked, "6 (loss null)");
  rollback_config(&cfg, ds);
  snprintf(dir, sizeof dir, "%s/log_rollback", tmpdir);
  cfg.log_dir = dir;
  clear_tmp();
  free(run(cfg, 1, NULL, DPT_OK, &rep));
  ck_assert_int_eq(rep.rollbacks, 1);
  log_steps(dir, "\"rolled_back\":true", steps, marked);
  ck_assert_str_eq(steps, "1 2 3 4 5 6 5 6 7 8 9");
  ck_assert_str_eq(marked, "6"); /* batch norm keeps this model's loss finite */
  log_steps(dir, "\"skipped\":true", steps, marked);
  ck_assert_str_eq(marked, "");
  dpt_dataset_destroy(ds);
}
END_TEST

/* checkpoint_minutes: a checkpoint at every step boundary once the time has passed. */
START_TEST(checkpoint_by_time) {
  dpt_dataset *ds = make_data(240, 3);
  dpt_train_config cfg;
  config(&cfg, ds, MODEL_MLP, DPT_OPTIM_SGD);
  cfg.checkpoints.checkpoint_dir = tmpdir;
  cfg.checkpoints.checkpoint_minutes = 1e-9;
  cfg.checkpoints.keep_checkpoints = 2;
  dpt_train_report rep;
  free(run(cfg, 2, NULL, DPT_OK, &rep));
  ck_assert_int_eq(rep.checkpoints, 14);
  char path[160];
  snprintf(path, sizeof path, "%s/ckpt-000000000013.safetensors", tmpdir);
  ck_assert_int_eq(dpt_checkpoint_verify(path, NULL), DPT_OK);
  snprintf(path, sizeof path, "%s/ckpt-000000000012.safetensors", tmpdir);
  ck_assert_int_ne(access(path, F_OK), 0); /* keep 2 */
  dpt_dataset_destroy(ds);
}
END_TEST

/* A directory holding another run's checkpoints, or one that cannot be written, is refused
 * before the first step. */
START_TEST(checkpoint_dir_refused) {
  dpt_dataset *ds = make_data(240, 3);
  dpt_train_config cfg;
  config(&cfg, ds, MODEL_MLP, DPT_OPTIM_SGD);
  two_checkpoints(cfg);
  cfg.checkpoints.checkpoint_dir = tmpdir;
  watch w = {0};
  run(cfg, 2, &w, DPT_ERR_INVALID_ARG, NULL);
  ck_assert_msg(strstr(dpt_last_error(), "holds checkpoints of another run") &&
                    strstr(dpt_last_error(), "--resume"),
                "%s", dpt_last_error());
  ck_assert_int_eq(w.steps, 0);
  /* A directory another run holds (its lock) is refused before step 1, naming the holder. */
  char other[160];
  snprintf(other, sizeof other, "%s/other", tmpdir);
  ck_assert_int_eq(mkdir(other, 0777), 0);
  int held = -1;
  ck_assert_int_eq(dpt_ckpt_lock_dir(other, &held), DPT_OK);
  cfg.checkpoints.checkpoint_dir = other;
  watch wl = {0};
  run(cfg, 2, &wl, DPT_ERR_IO, NULL);
  char pid[32];
  snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
  ck_assert_msg(strstr(dpt_last_error(), "in use by another run") && strstr(dpt_last_error(), pid),
                "%s", dpt_last_error());
  ck_assert_int_eq(wl.steps, 0);
  dpt_ckpt_unlock_dir(held);
  free(run(cfg, 1, NULL, DPT_OK, NULL)); /* free again: this run takes it, and lets it go */
  ck_assert_int_eq(dpt_ckpt_lock_dir(other, &held), DPT_OK);
  dpt_ckpt_unlock_dir(held);
  char bad[160];
  snprintf(bad, sizeof bad, "%s/ckpt-000000000004.safetensors/sub", tmpdir);
  cfg.checkpoints.checkpoint_dir = bad;
  run(cfg, 1, NULL, DPT_ERR_IO, NULL);
  ck_assert_msg(strstr(dpt_last_error(), bad) && strstr(dpt_last_error(), "cannot create"), "%s",
                dpt_last_error());
  dpt_dataset_destroy(ds);
}
END_TEST

START_TEST(stop_without_checkpoints) {
  dpt_dataset *ds = make_data(240, 3);
  dpt_train_config cfg;
  config(&cfg, ds, MODEL_MLP, DPT_OPTIM_SGD);
  watch w = {.stop_at = 3};
  run(cfg, 2, &w, DPT_ERR_INTERRUPTED, NULL);
  ck_assert_msg(strstr(dpt_last_error(), "after step 4") &&
                    strstr(dpt_last_error(), "no checkpoint"),
                "%s", dpt_last_error());
  ck_assert_int_eq(w.steps, 4);
  /* Resuming or rolling back needs a directory. */
  cfg.checkpoints.resume = 1;
  run(cfg, 1, NULL, DPT_ERR_INVALID_ARG, NULL);
  cfg.checkpoints.resume = 0;
  cfg.checks.on_nonfinite = DPT_NONFINITE_ROLLBACK;
  run(cfg, 1, NULL, DPT_ERR_INVALID_ARG, NULL);
  ck_assert_msg(strstr(dpt_last_error(), "checkpoint directory"), "%s", dpt_last_error());
  dpt_dataset_destroy(ds);
}
END_TEST

START_TEST(resume_without_checkpoint_starts) {
  dpt_dataset *ds = make_data(240, 3);
  dpt_train_config cfg;
  config(&cfg, ds, MODEL_MLP, DPT_OPTIM_SGD);
  float *ref = run(cfg, 1, NULL, DPT_OK, NULL);
  cfg.checkpoints.checkpoint_dir = tmpdir;
  cfg.checkpoints.resume = 1;
  watch w = {0};
  float *res = run(cfg, 1, &w, DPT_OK, NULL);
  ck_assert_msg(strstr(w.log, "starting from the beginning"), "%s", w.log);
  ck_assert_int_eq(memcmp(ref, res, state_floats(&cfg.model) * sizeof(float)), 0);
  /* The run's end left a checkpoint of step 14 (the default keeps 3). */
  char path[160];
  snprintf(path, sizeof path, "%s/ckpt-000000000014.safetensors", tmpdir);
  dpt_checkpoint_progress p;
  ck_assert_int_eq(dpt_checkpoint_verify(path, &p), DPT_OK);
  ck_assert_int_eq(p.step, 14);
  ck_assert_int_eq(p.world_size, 1);
  free(ref);
  free(res);
  dpt_dataset_destroy(ds);
}
END_TEST

/* ---- under mpirun: every rank one replica -------------------------------------------------- */

/* A run of cfg over comm; rank 0's final state (malloc'd) when it ends with `want`, else NULL
 * after a line saying what happened. */
static float *run_mpi(dpt_train_config cfg, dpt_comm *comm, watch *w, dpt_status want,
                      dpt_train_report *rep) {
  float *out = calloc(state_floats(&cfg.model), sizeof(float));
  cfg.final_params = out;
  if (w) {
    cfg.callbacks.user = w;
    cfg.callbacks.on_progress = on_progress;
    cfg.callbacks.on_log = on_log;
    cfg.checks.stop_request = &w->stop;
  }
  dpt_train_report local;
  dpt_status st = dpt_train(&cfg, comm, rep ? rep : &local);
  if (st == want) return out;
  fprintf(stderr, "rank %d: got %s (%s), want %s\n", dpt_comm_rank(comm), dpt_status_str(st),
          dpt_last_error(), dpt_status_str(want));
  free(out);
  return NULL;
}

/* Stop on rank 0's request after step 6, resume, compare with the uninterrupted run on rank 0:
 * 1 when they differ (or a run failed). */
static int mpi_stop_and_resume(dpt_train_config cfg, dpt_comm *comm) {
  const int rank = dpt_comm_rank(comm);
  char cmd[128]; /* a fresh directory: another case's checkpoints would be refused */
  snprintf(cmd, sizeof cmd, "rm -f %s/ckpt-*", tmpdir);
  ck_assert_int_eq(system(cmd), 0);
  float *ref = run_mpi(cfg, comm, NULL, DPT_OK, NULL);
  cfg.checkpoints.checkpoint_dir = tmpdir;
  cfg.checkpoints.checkpoint_every = 4;
  watch w = {.stop_at = rank == 0 ? 6 : -1};
  float *none = run_mpi(cfg, comm, &w, DPT_ERR_INTERRUPTED, NULL);
  cfg.checkpoints.resume = 1;
  memset(&w, 0, sizeof w);
  float *res = run_mpi(cfg, comm, &w, DPT_OK, NULL);
  int bad = !ref || !none || !res;
  if (!bad && rank == 0 && memcmp(ref, res, state_floats(&cfg.model) * sizeof(float)) != 0) {
    fprintf(stderr, "the resumed run differs from the uninterrupted one\n");
    bad = 1;
  }
  free(ref);
  free(none);
  free(res);
  return bad;
}

static dpt_comm *world; /* MPI mode: every rank one replica */

/* Resume bit for bit (an MLP with SGD, a batch norm model with AdamW, with the full step). */
START_TEST(mpi_resume) {
  dpt_dataset *ds = make_data(240, 3);
  const int models[] = {MODEL_MLP, MODEL_BN, MODEL_BN}, full[] = {0, 0, 1};
  const dpt_optim_kind opts[] = {DPT_OPTIM_SGD, DPT_OPTIM_ADAMW, DPT_OPTIM_SGD};
  for (int i = 0; i < 3; ++i) {
    dpt_train_config cfg;
    config(&cfg, ds, models[i], opts[i]);
    cfg.exchange.full_optimizer_step = full[i];
    ck_assert_msg(!mpi_stop_and_resume(cfg, world), "case %d", i);
  }
  dpt_dataset_destroy(ds);
}
END_TEST

/* A rollback alike on every rank. */
START_TEST(mpi_rollback) {
  dpt_dataset *ds = poisoned_data(240, 130);
  dpt_train_config cfg;
  rollback_config(&cfg, ds);
  dpt_train_report rep;
  float *res = run_mpi(cfg, world, NULL, DPT_OK, &rep);
  ck_assert_ptr_nonnull(res);
  ck_assert_int_eq(rep.rollbacks, 1);
  ck_assert_int_eq(rep.steps, 9);
  free(res);
  dpt_dataset_destroy(ds);
}
END_TEST

/* Check without forking (a forked child cannot use the MPI connection): every rank runs every
 * test, so every rank takes part in every collective. */
static int mpi_main(void) {
  dpt_status st = dpt_comm_create_mpi(NULL, &world);
  if (st == DPT_ERR_UNSUPPORTED) {
    printf("MPI not compiled in: skipped\n");
    return 77;
  }
  if (st != DPT_OK) {
    fprintf(stderr, "dpt_comm_create_mpi: %s\n", dpt_last_error());
    return 1;
  }
  Suite *s = suite_create("resume_mpi");
  TCase *tc = tcase_create("mpi");
  tcase_add_checked_fixture(tc, setup_tmp, teardown_tmp);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, mpi_resume);
  tcase_add_test(tc, mpi_rollback);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  dpt_comm_destroy(world);
  return failed ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "mpi") == 0) return mpi_main();
  Suite *s = suite_create("resume");
  TCase *tc = tcase_create("threads");
  tcase_add_checked_fixture(tc, setup_tmp, teardown_tmp);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, resume_bit_for_bit);
  tcase_add_test(tc, resume_other_world_size);
  tcase_add_test(tc, resume_refuses_changes);
  tcase_add_test(tc, corrupt_newest_is_passed_over);
  tcase_add_test(tc, rollback_after_poisoned_sample);
  tcase_add_test(tc, stop_without_checkpoints);
  tcase_add_test(tc, resume_after_skipped_step);
  tcase_add_test(tc, log_marks_given_up_steps);
  tcase_add_test(tc, checkpoint_by_time);
  tcase_add_test(tc, checkpoint_dir_refused);
  tcase_add_test(tc, resume_without_checkpoint_starts);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
