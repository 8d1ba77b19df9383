/* The API's tiers: this file includes only the training tier (dptrain.h), checks that it pulls
 * in no advanced-tier header, and trains, checkpoints, evaluates and saves through it alone. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dptrain/dptrain.h"

#if defined(DPTRAIN_BACKEND_H) || defined(DPTRAIN_COMM_H) || defined(DPTRAIN_MODEL_DEVICE_H) ||    \
    defined(DPTRAIN_OPTIMIZER_H) || defined(DPTRAIN_SPARSE_H) || defined(DPTRAIN_SAFETENSORS_H) || \
    defined(DPTRAIN_FINGERPRINT_H) || defined(DPTRAIN_ADVANCED_H)
#error "dptrain.h includes an advanced-tier header"
#endif

enum { N = 48, W = 6 };

/* A data set that the first pixel decides: class 1 when it is bright. */
static dpt_dataset *make_data(void) {
  uint8_t px[N * W];
  int32_t labels[N];
  for (int i = 0; i < N; i++) {
    labels[i] = (i * 7) % 3 == 0;
    px[i * W] = (uint8_t)(labels[i] ? 220 : 30);
    for (int j = 1; j < W; j++)
      px[i * W + j] = (uint8_t)((i * 31 + j * 17) % 256);
  }
  dpt_dataset *ds = NULL;
  ck_assert_int_eq(dpt_dataset_from_memory(px, labels, N, 1, W, 2, &ds), DPT_OK);
  return ds;
}

/* Train two thread replicas with checkpoints, predict with the final weights, save and load
 * them: every step of the intended usage in dptrain.h. */
START_TEST(train_evaluate_save) {
  char dir[] = "/tmp/dpt_tiers_XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  dpt_dataset *ds = make_data();
  dpt_train_config cfg;
  dpt_train_config_default(&cfg);
  const size_t hidden[1] = {8};
  ck_assert_int_eq(dpt_model_spec_mlp(&cfg.model, 1, 1, W, hidden, 1, 2), DPT_OK);
  ck_assert_int_eq(dpt_backend_compiled(DPT_BACKEND_CPU), 1);
  dpt_optim_config_default(&cfg.optim, DPT_OPTIM_ADAMW);
  cfg.optim.lr = 0.02f;
  cfg.data.train = ds;
  cfg.data.test = ds;
  cfg.devices.replicas = 2;
  cfg.schedule.global_batch = 12;
  cfg.schedule.epochs = 20;
  cfg.schedule.seed = 5;
  cfg.checkpoints.checkpoint_dir = dir;
  cfg.checkpoints.checkpoint_every = 10;

  dpt_backend *be = NULL;
  dpt_model *model = NULL;
  ck_assert_int_eq(dpt_backend_create(DPT_BACKEND_CPU, 0, &be), DPT_OK);
  ck_assert_int_eq(dpt_model_create(be, &cfg.model, N, &model), DPT_OK);
  float *state = malloc(dpt_model_state_size(model) * sizeof *state);
  ck_assert_ptr_nonnull(state);
  cfg.final_params = state;
  dpt_train_report final;
  ck_assert_msg(dpt_train(&cfg, NULL, &final) == DPT_OK, "%s", dpt_last_error());
  ck_assert_int_eq(final.replicas, 2);
  ck_assert_msg(final.test_accuracy >= 0.9, "accuracy %g", final.test_accuracy);

  /* The checkpoint the run left verifies and names the run's steps. */
  char path[4096];
  int found = 0;
  dpt_checkpoint_progress prog;
  ck_assert_int_eq(dpt_checkpoint_find_latest(dir, NULL, NULL, path, sizeof path, &found, &prog),
                   DPT_OK);
  ck_assert_int_eq(found, 1);
  ck_assert_int_le(prog.step, final.steps);

  /* Predictions from the final weights score what the report says. */
  ck_assert_int_eq(dpt_model_set_state(model, state), DPT_OK);
  float x[N * W], logits[N * 2], labels_f[N], probs[N];
  int32_t labels[N];
  uint64_t idx[N];
  for (int i = 0; i < N; i++)
    idx[i] = (uint64_t)i;
  ck_assert_int_eq(dpt_dataset_gather(ds, idx, N, x, labels), DPT_OK);
  ck_assert_int_eq(dpt_model_predict(model, x, N, logits), DPT_OK);
  int correct = 0;
  for (int i = 0; i < N; i++) {
    correct += (logits[2 * i + 1] > logits[2 * i]) == (labels[i] == 1);
    labels_f[i] = (float)labels[i];
    probs[i] = (float)(1.0 / (1.0 + exp((double)logits[2 * i] - logits[2 * i + 1])));
  }
  ck_assert_int_eq(correct, (int)lround(final.test_accuracy * N));
  double auc = 0;
  ck_assert_int_eq(dpt_auc(probs, labels_f, N, &auc), DPT_OK);
  ck_assert_msg(auc > 0.9, "auc %g", auc);

  /* Saved weights load back into a model built from the file alone. */
  char weights[4200];
  snprintf(weights, sizeof weights, "%s/w.safetensors", dir);
  ck_assert_int_eq(dpt_model_save(model, weights), DPT_OK);
  dpt_model_spec spec;
  ck_assert_int_eq(dpt_model_spec_from_weights(weights, &spec), DPT_OK);
  dpt_model *again = NULL;
  ck_assert_int_eq(dpt_model_create(be, &spec, N, &again), DPT_OK);
  ck_assert_int_eq(dpt_model_load(again, weights), DPT_OK);
  float logits2[N * 2];
  ck_assert_int_eq(dpt_model_predict(again, x, N, logits2), DPT_OK);
  ck_assert_int_eq(memcmp(logits, logits2, sizeof logits), 0);

  dpt_model_destroy(again);
  dpt_model_destroy(model);
  dpt_backend_destroy(be);
  free(state);
  dpt_dataset_destroy(ds);
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* dpt_model_predict refuses what it cannot run, naming it. */
START_TEST(predict_arguments) {
  dpt_model_spec spec;
  const size_t hidden[1] = {4};
  ck_assert_int_eq(dpt_model_spec_mlp(&spec, 1, 1, W, hidden, 1, 2), DPT_OK);
  dpt_backend *be = NULL;
  dpt_model *model = NULL;
  ck_assert_int_eq(dpt_backend_create(DPT_BACKEND_CPU, 0, &be), DPT_OK);
  ck_assert_int_eq(dpt_model_create(be, &spec, 2, &model), DPT_OK);
  ck_assert_int_eq(dpt_model_init(model, 1), DPT_OK);
  float x[5 * W] = {0}, logits[5 * 2];
  ck_assert_int_eq(dpt_model_predict(model, NULL, 1, logits), DPT_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(dpt_last_error(), "x is NULL"));
  ck_assert_int_eq(dpt_model_predict(model, x, 0, logits), DPT_ERR_INVALID_ARG);
  /* More samples than the model's batch run in pieces, with the same logits per sample. */
  ck_assert_int_eq(dpt_model_predict(model, x, 5, logits), DPT_OK);
  for (int i = 1; i < 5; i++)
    ck_assert(logits[2 * i] == logits[0] && logits[2 * i + 1] == logits[1]);
  dpt_model_destroy(model);
  dpt_backend_destroy(be);
}
END_TEST

/* The configuration's size: the defaults set it, dpt_train refuses a size it does not know. */
START_TEST(config_size) {
  dpt_train_config cfg;
  ck_assert_int_eq(dpt_train_config_default(&cfg), DPT_OK);
  ck_assert_uint_eq(cfg.size, sizeof cfg);
  ck_assert_int_eq(cfg.schedule.epochs, 10);
  ck_assert_int_eq(cfg.devices.replicas, 1);
  ck_assert_int_eq(dpt_train_config_init(&cfg, sizeof cfg + 8), DPT_ERR_INVALID_ARG);
  ck_assert_uint_eq(cfg.size, 0);
  ck_assert_int_eq(dpt_train_config_default(&cfg), DPT_OK);
  dpt_dataset *ds = make_data();
  const size_t hidden[1] = {4};
  ck_assert_int_eq(dpt_model_spec_mlp(&cfg.model, 1, 1, W, hidden, 1, 2), DPT_OK);
  cfg.data.train = ds;
  cfg.schedule.global_batch = 8;
  cfg.schedule.epochs = 1;
  const size_t sizes[] = {0, sizeof cfg - 4, sizeof cfg + 8};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    cfg.size = sizes[i];
    ck_assert_int_eq(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG);
    ck_assert_msg(strstr(dpt_last_error(), "size") != NULL, "%s", dpt_last_error());
  }
  cfg.size = sizeof cfg;
  ck_assert_msg(dpt_train(&cfg, NULL, NULL) == DPT_OK, "%s", dpt_last_error());
  /* A caller built before log_dir: the field past its size is not read (this path would be
   * refused: a log directory under a regular file). */
  cfg.log_dir = "/dev/null/log";
  cfg.size = offsetof(dpt_train_config, log_dir);
  ck_assert_msg(dpt_train(&cfg, NULL, NULL) == DPT_OK, "%s", dpt_last_error());
  cfg.size = sizeof cfg;
  ck_assert_int_eq(dpt_train(&cfg, NULL, NULL), DPT_ERR_IO);
  ck_assert_msg(strstr(dpt_last_error(), "/dev/null/log") != NULL, "%s", dpt_last_error());
  /* A caller built before options_json: not read; read, it must be a JSON object. */
  cfg.log_dir = NULL;
  cfg.options_json = "[1, 2]";
  cfg.size = offsetof(dpt_train_config, options_json);
  ck_assert_msg(dpt_train(&cfg, NULL, NULL) == DPT_OK, "%s", dpt_last_error());
  cfg.size = sizeof cfg;
  ck_assert_int_eq(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG);
  ck_assert_msg(strstr(dpt_last_error(), "options_json") != NULL, "%s", dpt_last_error());
  cfg.options_json = "{\"epochs\": 1}";
  ck_assert_msg(dpt_train(&cfg, NULL, NULL) == DPT_OK, "%s", dpt_last_error());
  dpt_dataset_destroy(ds);
}
END_TEST

int main(void) {
  Suite *s = suite_create("tiers");
  TCase *tc = tcase_create("training tier");
  tcase_add_test(tc, train_evaluate_save);
  tcase_add_test(tc, predict_arguments);
  tcase_add_test(tc, config_size);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
