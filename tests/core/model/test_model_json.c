/* Model descriptions as JSON: dpt_model_spec_to_json, read back by dpt_model_spec_parse_json,
 * gives the spec field by field (built-in models and a hand-made graph), and the description
 * travels in a weights file (dpt_model_save -> dpt_model_spec_from_weights). */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dptrain/advanced.h"
#include "test_util.h"

static void expect_same(const dpt_model_spec *a, const dpt_model_spec *b) {
  ck_assert_uint_eq(a->in_c, b->in_c);
  ck_assert_uint_eq(a->in_h, b->in_h);
  ck_assert_uint_eq(a->in_w, b->in_w);
  ck_assert_uint_eq(a->num_classes, b->num_classes);
  ck_assert_uint_eq(a->num_layers, b->num_layers);
  for (size_t i = 0; i < a->num_layers; ++i) {
    const dpt_layer_spec *x = &a->layers[i], *y = &b->layers[i];
    ck_assert_msg(x->kind == y->kind, "layer %zu: kind %d vs %d", i, x->kind, y->kind);
    ck_assert_msg(x->size == y->size && x->kernel == y->kernel && x->stride == y->stride &&
                      x->padding == y->padding && x->no_bias == y->no_bias,
                  "layer %zu: size/kernel/stride/padding/no_bias differ", i);
    ck_assert_msg(x->p == y->p, "layer %zu: p %g vs %g", i, (double)x->p, (double)y->p);
    ck_assert_msg(x->eps == y->eps && x->approximate == y->approximate,
                  "layer %zu: eps %g vs %g, approximate %d vs %d", i, (double)x->eps,
                  (double)y->eps, x->approximate, y->approximate);
    ck_assert_msg(x->num_inputs == y->num_inputs, "layer %zu: %d vs %d inputs", i, x->num_inputs,
                  y->num_inputs);
    for (int j = 0; j < x->num_inputs; ++j)
      ck_assert_msg(x->inputs[j] == y->inputs[j], "layer %zu input %d: %d vs %d", i, j,
                    x->inputs[j], y->inputs[j]);
    ck_assert_msg(strcmp(x->name, y->name) == 0, "layer %zu: name '%s' vs '%s'", i, x->name,
                  y->name);
  }
}

static void round_trip(const dpt_model_spec *spec) {
  char *text = NULL;
  TU_OK(dpt_model_spec_to_json(spec, &text));
  ck_assert_ptr_nonnull(text);
  dpt_model_spec *back = malloc(sizeof *back);
  ck_assert_ptr_nonnull(back);
  memset(back, 0xab, sizeof *back);
  TU_OK(dpt_model_spec_parse_json(text, "round trip", back));
  expect_same(spec, back);
  free(back);
  free(text);
}

/* A graph with what the built-in models lack: unnamed layers taken as inputs, the model input
 * named explicitly, dropout's p, a linear layer without bias, pools, batchnorm1d, layernorm's
 * eps and gelu's tanh form. */
static void hand_made(dpt_model_spec *s) {
  TU_OK(dpt_model_spec_init(s, 3, 8, 8, 7));
  int conv, relu, pool, flat, drop;
  dpt_layer_spec l = {.kind = DPT_LAYER_CONV2D, .size = 4, .kernel = 3, .padding = 1};
  l.num_inputs = 1;
  l.inputs[0] = DPT_LAYER_INPUT_MODEL;
  TU_OK(dpt_model_spec_add(s, &l, &conv));
  l = (dpt_layer_spec){.kind = DPT_LAYER_RELU};
  TU_OK(dpt_model_spec_add(s, &l, &relu));
  l = (dpt_layer_spec){.kind = DPT_LAYER_CONV2D,
                       .size = 4,
                       .kernel = 3,
                       .padding = 1,
                       .no_bias = 1,
                       .num_inputs = 1,
                       .inputs = {relu}};
  strcpy(l.name, "branch");
  int branch;
  TU_OK(dpt_model_spec_add(s, &l, &branch));
  l = (dpt_layer_spec){.kind = DPT_LAYER_ADD, .num_inputs = 2, .inputs = {branch, conv}};
  TU_OK(dpt_model_spec_add(s, &l, NULL));
  l = (dpt_layer_spec){.kind = DPT_LAYER_AVGPOOL, .kernel = 2};
  TU_OK(dpt_model_spec_add(s, &l, &pool));
  l = (dpt_layer_spec){
      .kind = DPT_LAYER_MAXPOOL, .kernel = 3, .stride = 1, .num_inputs = 1, .inputs = {pool}};
  TU_OK(dpt_model_spec_add(s, &l, NULL));
  l = (dpt_layer_spec){.kind = DPT_LAYER_FLATTEN};
  TU_OK(dpt_model_spec_add(s, &l, &flat));
  l = (dpt_layer_spec){.kind = DPT_LAYER_LINEAR, .size = 16, .no_bias = 1};
  TU_OK(dpt_model_spec_add(s, &l, NULL));
  l = (dpt_layer_spec){.kind = DPT_LAYER_BATCHNORM1D};
  strcpy(l.name, "bn");
  TU_OK(dpt_model_spec_add(s, &l, NULL));
  l = (dpt_layer_spec){.kind = DPT_LAYER_LAYERNORM, .eps = 1e-12f};
  strcpy(l.name, "ln");
  TU_OK(dpt_model_spec_add(s, &l, NULL));
  l = (dpt_layer_spec){.kind = DPT_LAYER_GELU, .approximate = DPT_GELU_TANH};
  TU_OK(dpt_model_spec_add(s, &l, NULL));
  l = (dpt_layer_spec){.kind = DPT_LAYER_DROPOUT, .p = 0.3f};
  TU_OK(dpt_model_spec_add(s, &l, &drop));
  l = (dpt_layer_spec){.kind = DPT_LAYER_LINEAR, .size = 7, .num_inputs = 1, .inputs = {drop}};
  strcpy(l.name, "head");
  TU_OK(dpt_model_spec_add(s, &l, NULL));
  (void)flat;
}

START_TEST(builtins_round_trip) {
  dpt_model_spec *s = malloc(sizeof *s);
  ck_assert_ptr_nonnull(s);
  const size_t hidden[3] = {512, 256, 3};
  TU_OK(dpt_model_spec_mlp(s, 1, 28, 28, hidden, 3, 10));
  round_trip(s);
  TU_OK(dpt_model_spec_cnn(s, 1, 28, 28, 32, 64, 10));
  round_trip(s);
  TU_OK(dpt_model_spec_resnet(s, 3, 32, 32, 20, 10));
  round_trip(s);
  TU_OK(dpt_model_spec_resnet(s, 1, 28, 28, 110, 100));
  round_trip(s);
  hand_made(s);
  round_trip(s);
  free(s);
}
END_TEST

START_TEST(hand_made_names) {
  dpt_model_spec *s = malloc(sizeof *s);
  ck_assert_ptr_nonnull(s);
  hand_made(s);
  char *text = NULL;
  TU_OK(dpt_model_spec_to_json(s, &text));
  /* Layers 0 (conv), 1 (relu), 4 (avgpool) and 11 (dropout) are taken as inputs: named by
   * their index; the others stay unnamed. */
  ck_assert_msg(strstr(text, "{\"name\":\"0\",\"kind\":\"conv2d\",\"inputs\":[\"input\"]"), "%s",
                text);
  ck_assert_msg(strstr(text, "{\"name\":\"1\",\"kind\":\"relu\"}"), "%s", text);
  ck_assert_msg(strstr(text, "{\"kind\":\"add\",\"inputs\":[\"branch\",\"0\"]}"), "%s", text);
  ck_assert_msg(strstr(text, "\"name\":\"4\",\"kind\":\"avgpool\""), "%s", text);
  ck_assert_msg(strstr(text, "\"p\":0.30000001192092896"), "%s", text);
  ck_assert_msg(strstr(text, "{\"kind\":\"maxpool\",\"inputs\":[\"4\"],\"kernel\":3,\"stride\":1}"),
                "%s", text);
  ck_assert_msg(strstr(text, "\"input\":[3,8,8],\"classes\":7"), "%s", text);
  ck_assert_msg(
      strstr(text, "{\"name\":\"ln\",\"kind\":\"layernorm\",\"eps\":9.999999960041972e-13}"), "%s",
      text);
  ck_assert_msg(strstr(text, "{\"kind\":\"gelu\",\"approximate\":\"tanh\"}"), "%s", text);
  free(text);
  /* An index given as a name that another layer already has cannot be written. */
  strcpy(s->layers[7].name, "4");
  EXPECT_FAIL(dpt_model_spec_to_json(s, &text), DPT_ERR_INVALID_ARG, "'4'", NULL, NULL);
  ck_assert_ptr_null(text);
  /* Bad specs are refused, not written. */
  s->layers[7].name[0] = '\0';
  s->layers[3].inputs[0] = 5;
  EXPECT_FAIL(dpt_model_spec_to_json(s, &text), DPT_ERR_INVALID_ARG, "layer 3", NULL, NULL);
  s->num_layers = 0;
  EXPECT_FAIL(dpt_model_spec_to_json(s, &text), DPT_ERR_INVALID_ARG, "0 layers", NULL, NULL);
  EXPECT_FAIL(dpt_model_spec_to_json(NULL, &text), DPT_ERR_INVALID_ARG, NULL, NULL, NULL);
  free(s);
}
END_TEST

START_TEST(parse_errors) {
  dpt_model_spec *s = malloc(sizeof *s);
  ck_assert_ptr_nonnull(s);
  EXPECT_FAIL(
      dpt_model_spec_parse_json("{\"classes\": 10, \"layers\": [{\"kind\": \"relu\"}]}", "here", s),
      DPT_ERR_BAD_FORMAT, "here", "\"input\"", NULL);
  EXPECT_FAIL(dpt_model_spec_parse_json(
                  "{\"input\": [1, 2, 2], \"layers\": [{\"kind\": \"relu\"}]}", "here", s),
              DPT_ERR_BAD_FORMAT, "here", "\"classes\"", NULL);
  EXPECT_FAIL(dpt_model_spec_parse_json("{\"input\": [1, 2", "here", s), DPT_ERR_BAD_FORMAT,
              "here: line 1", NULL, NULL);
  TU_OK(dpt_model_spec_parse_json("{\"input\": [1, 2, 2], \"classes\": 3, \"layers\": "
                                  "[{\"kind\": \"flatten\"}, {\"kind\": \"linear\", \"out\": "
                                  "\"classes\"}]}",
                                  "here", s));
  ck_assert_uint_eq(s->layers[1].size, 3);
  free(s);
}
END_TEST

/* The weights file carries the model: saved, the spec comes back from the file alone. */
START_TEST(weights_carry_the_model) {
  char path[] = "/tmp/dpt_model_json_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  dpt_model_spec *s = malloc(sizeof *s), *back = malloc(sizeof *back);
  ck_assert_ptr_nonnull(s);
  ck_assert_ptr_nonnull(back);
  hand_made(s);
  dpt_backend *be = tu_cpu();
  dpt_model *m = NULL;
  TU_OK(dpt_model_create(be, s, 2, &m));
  TU_OK(dpt_model_init(m, 1));
  TU_OK(dpt_model_save(m, path));
  TU_OK(dpt_model_spec_from_weights(path, back));
  expect_same(s, back);
  dpt_model *m2 = NULL;
  TU_OK(dpt_model_create(be, back, 2, &m2));
  TU_OK(dpt_model_load(m2, path));
  dpt_model_destroy(m2);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
  /* A file without the description: the message names the file and the key. */
  const float one = 1.0f;
  dpt_st_tensor t = {.name = "w", .data = &one, .ndim = 1, .shape = {1}};
  TU_OK(dpt_safetensors_write(path, &t, 1, NULL));
  EXPECT_FAIL(dpt_model_spec_from_weights(path, back), DPT_ERR_BAD_FORMAT, path,
              DPT_MODEL_METADATA_KEY, NULL);
  const char *const meta[] = {DPT_MODEL_METADATA_KEY, "{\"input\": 3}", NULL};
  TU_OK(dpt_safetensors_write(path, &t, 1, meta));
  EXPECT_FAIL(dpt_model_spec_from_weights(path, back), DPT_ERR_BAD_FORMAT, path, "\"input\"", NULL);
  remove(path);
  EXPECT_FAIL(dpt_model_spec_from_weights(path, back), DPT_ERR_IO, path, NULL, NULL);
  free(s);
  free(back);
}
END_TEST

int main(void) {
  Suite *s = suite_create("model_json");
  TCase *tc = tcase_create("model_json");
  tcase_add_test(tc, builtins_round_trip);
  tcase_add_test(tc, hand_made_names);
  tcase_add_test(tc, parse_errors);
  tcase_add_test(tc, weights_carry_the_model);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
