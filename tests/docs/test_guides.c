/* The guides' worked examples, built from the pages as they stand (tests/guides.cmake): the
 * scale layer of docs/layers.md against known values and finite differences, in model files and
 * messages; the halves exchange of docs/training.md against the full step, bit for bit, and what
 * DPT_EXCHANGE refuses. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/advanced.h"
#include "grad_check.h"
#include "test_util.h"
#include "train_data.h"

/* ---- the scale layer ------------------------------------------------------------------------ */

enum { B = 5, F = 4 }; /* samples, features (and classes) of the scale-only model */

/* A model of one scale layer on F features and F classes: the logits are a x. */
static void scale_only(dpt_model_spec *spec) {
  const dpt_layer_spec s = {.kind = DPT_LAYER_SCALE};
  TU_OK(dpt_model_spec_init(spec, 1, 1, F, F));
  TU_OK(dpt_model_spec_add(spec, &s, NULL));
}

/* The logits at a = 1 (the initial value) are x, at a = 2.5 they are 2.5 x; the gradient of a
 * is the closed form sum_i sum_j (softmax(a x_i)_j - [j = y_i]) x_ij. */
START_TEST(scale_values) {
  dpt_model_spec spec;
  scale_only(&spec);
  dpt_backend *be;
  dpt_model *m;
  TU_OK(dpt_backend_create(DPT_BACKEND_CPU, 0, &be));
  TU_OK(dpt_model_create(be, &spec, B, &m));
  TU_OK(dpt_model_init(m, 1));
  ck_assert_uint_eq(dpt_model_num_params(m), 1);
  dpt_tensor_info ti;
  TU_OK(dpt_model_tensor(m, 0, &ti));
  ck_assert_str_eq(ti.name, "0.weight");
  ck_assert_int_eq(ti.ndim, 1);
  ck_assert_int_eq(ti.shape[0], 1);
  float x[B * F], logits[B * F], a = 0;
  int32_t y[B] = {0, 3, 1, 2, 3};
  for (int i = 0; i < B * F; ++i)
    x[i] = 0.25f * (float)((i * 7) % 11) - 1.0f;
  dpt_buffer *bx, *by;
  TU_OK(dpt_buffer_alloc(be, sizeof x, &bx));
  TU_OK(dpt_buffer_alloc(be, sizeof y, &by));
  TU_OK(dpt_buffer_upload(bx, 0, x, sizeof x));
  TU_OK(dpt_buffer_upload(by, 0, y, sizeof y));
  TU_OK(dpt_model_get_params(m, &a));
  ck_assert(a == 1.0f);
  TU_OK(dpt_model_logits(m, bx, B, logits));
  for (int i = 0; i < B * F; ++i)
    ck_assert_msg(logits[i] == x[i], "logit %d: %g, not %g", i, (double)logits[i], (double)x[i]);
  a = 2.5f;
  TU_OK(dpt_model_set_params(m, &a));
  TU_OK(dpt_model_logits(m, bx, B, logits));
  for (int i = 0; i < B * F; ++i)
    ck_assert_msg(logits[i] == 2.5f * x[i], "logit %d: %g, not %g", i, (double)logits[i],
                  2.5 * (double)x[i]);
  double want = 0, loss = 0;
  for (int i = 0; i < B; ++i) {
    double mx = -INFINITY, z = 0;
    for (int j = 0; j < F; ++j)
      mx = fmax(mx, 2.5 * x[i * F + j]);
    for (int j = 0; j < F; ++j)
      z += exp(2.5 * x[i * F + j] - mx);
    for (int j = 0; j < F; ++j)
      want += (exp(2.5 * x[i * F + j] - mx) / z - (j == y[i])) * x[i * F + j];
  }
  float g = 0;
  TU_OK(dpt_model_train_step(m, bx, by, B, 1.0f, &loss, NULL));
  TU_OK(dpt_buffer_download(dpt_model_grads(m), 0, &g, sizeof g));
  ck_assert_msg(fabs((double)g - want) <= 1e-5 + 1e-4 * fabs(want), "da %g, closed form %g",
                (double)g, want);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
}
END_TEST

/* linear then scale: every parameter's gradient against finite differences. */
START_TEST(scale_gradients) {
  dpt_model_spec spec;
  const dpt_layer_spec lin = {.kind = DPT_LAYER_LINEAR, .size = 4};
  const dpt_layer_spec s = {.kind = DPT_LAYER_SCALE};
  TU_OK(dpt_model_spec_init(&spec, 1, 1, 6, 4));
  TU_OK(dpt_model_spec_add(&spec, &lin, NULL));
  TU_OK(dpt_model_spec_add(&spec, &s, NULL));
  dpt_backend *be;
  dpt_model *m;
  TU_OK(dpt_backend_create(DPT_BACKEND_CPU, 0, &be));
  TU_OK(dpt_model_create(be, &spec, B, &m));
  TU_OK(dpt_model_init(m, 5));
  ck_assert_uint_eq(dpt_model_num_params(m), 4 * 6 + 4 + 1);
  float x[B * 6], a = 1.7f;
  int32_t y[B] = {1, 0, 3, 2, 2};
  for (int i = 0; i < B * 6; ++i)
    x[i] = 0.3f * (float)((i * 5) % 7) - 0.8f;
  size_t np = dpt_model_num_params(m);
  float *w = malloc(np * sizeof(float));
  TU_OK(dpt_model_get_params(m, w));
  w[np - 1] = a; /* the scale's weight is the last tensor */
  TU_OK(dpt_model_set_params(m, w));
  dpt_buffer *bx, *by;
  TU_OK(dpt_buffer_alloc(be, sizeof x, &bx));
  TU_OK(dpt_buffer_alloc(be, sizeof y, &by));
  TU_OK(dpt_buffer_upload(bx, 0, x, sizeof x));
  TU_OK(dpt_buffer_upload(by, 0, y, sizeof y));
  gc_check_gradients(m, bx, by, B, 7, 10);
  free(w);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
}
END_TEST

/* The kind by name: model files read and write it, and the unknown-kind message lists it. */
START_TEST(scale_by_name) {
  dpt_layer_kind k;
  TU_OK(dpt_layer_kind_parse("scale", &k));
  ck_assert_int_eq(k, DPT_LAYER_SCALE);
  ck_assert_str_eq(dpt_layer_kind_name(DPT_LAYER_SCALE), "scale");
  ck_assert_int_eq(dpt_layer_kind_parse("scales", &k), DPT_ERR_INVALID_ARG);
  ck_assert_msg(strstr(dpt_last_error(), ", interaction, scale)") != NULL, "%s", dpt_last_error());
  dpt_model_spec spec;
  TU_OK(dpt_model_spec_parse_json("{\"input\": [1, 1, 4], \"classes\": 4, \"layers\": [{\"name\": "
                                  "\"s\", \"kind\": \"scale\"}]}",
                                  "test", &spec));
  ck_assert_uint_eq(spec.num_layers, 1);
  ck_assert_int_eq(spec.layers[0].kind, DPT_LAYER_SCALE);
  char *json = NULL;
  TU_OK(dpt_model_spec_to_json(&spec, &json));
  ck_assert_msg(strstr(json, "\"kind\":\"scale\"") != NULL, "%s", json);
  free(json);
}
END_TEST

/* ---- the halves exchange ----------------------------------------------------------------------
 */

static void small_config(dpt_train_config *cfg, dpt_dataset *train) {
  dpt_train_config_default(cfg);
  const size_t hidden[1] = {16};
  TU_OK(dpt_model_spec_mlp(&cfg->model, 1, 8, 8, hidden, 1, 10));
  cfg->data.train = train;
  cfg->schedule.global_batch = 24;
  cfg->schedule.epochs = 10;
  cfg->schedule.max_steps = 6;
  cfg->schedule.seed = 3;
  cfg->optim.lr = 0.05f;
  cfg->optim.momentum = 0.9f;
}

/* cfg.callbacks.on_log: appends the line to the char[2048] at user. */
static void keep_log(const char *line, void *user) {
  char *log = user;
  const size_t len = strlen(log);
  snprintf(log + len, 2048 - len, "%s\n", line);
}

/* Trains cfg on `replicas` threads with DPT_EXCHANGE = exchange (NULL: unset): the status, the
 * final parameters into params[n], the log into log[2048]. */
static dpt_status train_with(dpt_train_config cfg, int replicas, const char *exchange,
                             float *params, char *log) {
  if (exchange)
    setenv("DPT_EXCHANGE", exchange, 1);
  else
    unsetenv("DPT_EXCHANGE");
  log[0] = '\0';
  cfg.devices.replicas = replicas;
  cfg.final_params = params;
  cfg.callbacks.on_log = keep_log;
  cfg.callbacks.user = log;
  dpt_status st = dpt_train(&cfg, NULL, NULL);
  unsetenv("DPT_EXCHANGE");
  return st;
}

/* The floats of the spec's model state (final_params' size). */
static size_t state_of(const dpt_model_spec *spec) {
  dpt_backend *be;
  dpt_model *m;
  TU_OK(dpt_backend_create(DPT_BACKEND_CPU, 0, &be));
  TU_OK(dpt_model_create(be, spec, 1, &m));
  const size_t n = dpt_model_state_size(m);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
  return n;
}

/* The full step with DPT_EXCHANGE=halves gives the full kind's parameters bit for bit, with 2
 * and 3 replicas (the ring all-reduce, whose halves it runs), and says so at start-up. */
START_TEST(halves_matches_full) {
  dpt_dataset *ds = make_data(96, 5);
  dpt_train_config cfg;
  small_config(&cfg, ds);
  cfg.exchange.full_optimizer_step = 1;
  const size_t n = state_of(&cfg.model);
  float *ref = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
  char log[2048];
  setenv("DPT_ALLREDUCE_ALGO", "ring", 1);
  for (int r = 2; r <= 3; ++r) {
    dpt_status st = train_with(cfg, r, NULL, ref, log);
    ck_assert_msg(st == DPT_OK, "full, %d replicas: %s", r, dpt_last_error());
    ck_assert_ptr_null(strstr(log, "DPT_EXCHANGE"));
    st = train_with(cfg, r, "halves", got, log);
    ck_assert_msg(st == DPT_OK, "halves, %d replicas: %s", r, dpt_last_error());
    ck_assert_msg(strstr(log, "exchange kind 'halves' (DPT_EXCHANGE)") != NULL, "%s", log);
    ck_assert_msg(memcmp(ref, got, n * sizeof(float)) == 0,
                  "%d replicas: halves' parameters differ from the full step's", r);
  }
  unsetenv("DPT_ALLREDUCE_ALGO");
  free(ref);
  free(got);
  dpt_dataset_destroy(ds);
}
END_TEST

/* DPT_EXCHANGE naming the kind a run has anyway, or empty, changes nothing; a name of no kind,
 * or a kind that does not serve the run, stops it at start-up saying why. */
START_TEST(forced_by_name) {
  dpt_dataset *ds = make_data(96, 5);
  dpt_train_config cfg;
  small_config(&cfg, ds);
  const size_t n = state_of(&cfg.model);
  float *ref = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
  char log[2048];
  TU_OK(train_with(cfg, 2, NULL, ref, log));
  TU_OK(train_with(cfg, 2, "sharded", got, log));
  ck_assert(memcmp(ref, got, n * sizeof(float)) == 0);
  TU_OK(train_with(cfg, 2, "", got, log)); /* empty: as unset */
  ck_assert(memcmp(ref, got, n * sizeof(float)) == 0);
  ck_assert_ptr_null(strstr(log, "DPT_EXCHANGE"));
  ck_assert_int_eq(train_with(cfg, 2, "quarters", got, log), DPT_ERR_INVALID_ARG);
  ck_assert_msg(strstr(dpt_last_error(), "DPT_EXCHANGE='quarters' names no exchange kind") &&
                    strstr(dpt_last_error(), "'full', 'halves')"),
                "%s", dpt_last_error());
  ck_assert_int_eq(train_with(cfg, 2, "halves", got, log), DPT_ERR_INVALID_ARG);
  ck_assert_msg(strstr(dpt_last_error(), "DPT_EXCHANGE='halves': that exchange kind does not "
                                         "serve this run (its settings call for 'sharded')"),
                "%s", dpt_last_error());
  free(ref);
  free(got);
  dpt_dataset_destroy(ds);
}
END_TEST

int main(void) {
  Suite *s = suite_create("guides");
  TCase *layer = tcase_create("layer kind");
  tcase_add_test(layer, scale_values);
  tcase_add_test(layer, scale_gradients);
  tcase_add_test(layer, scale_by_name);
  suite_add_tcase(s, layer);
  TCase *exchange = tcase_create("exchange kind");
  tcase_add_test(exchange, halves_matches_full);
  tcase_add_test(exchange, forced_by_name);
  suite_add_tcase(s, exchange);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
