/* The recommendation model in the layer graph: slice, embedding_bag, concat and interaction
 * against finite differences through a tiny DLRM (dot and cat interactions, bags of 1 and 2,
 * sum and mean, empty slots), binary cross-entropy with one logit per sample, the DLRM
 * builder's state_dict names and shapes, its spec through JSON field by field, and what bad
 * specs and options get.
 *
 * Usage: test_dlrm                     the suite above (CPU)
 *        test_dlrm backend <kind>      a training step on the device against the CPU
 *        test_dlrm backend <kind> big  AdamW steps with tables beyond the Vulkan windows
 *                                      (with DPT_VULKAN_TEST_MAX_RANGE=4096) against the CPU */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/train/optimizer.h"
#include "dptrain/advanced.h"
#include "grad_check.h"
#include "test_util.h"

/* ---- a tiny DLRM and its batch ------------------------------------------------------------- */

enum { TD_DENSE = 3, TD_TABLES = 3, TD_DIM = 4, TD_BATCH = 6 };
static const size_t td_rows[TD_TABLES] = {5, 7, 4};
/* Tables beyond the windows of test_dlrm_vulkan_big_table (4 KiB): 8000 and 1200 floats. */
static const size_t td_big_rows[TD_TABLES] = {2000, 7, 300};
static const size_t *td_table_rows = td_rows; /* the tables of td_options and td_records */
static const size_t td_bottom[1] = {6};
static const size_t td_top[1] = {5};

static dpt_dlrm_options td_options(int interaction, size_t bag, int mode) {
  dpt_dlrm_options o;
  dpt_dlrm_options_default(&o);
  o.num_dense = TD_DENSE;
  o.num_tables = TD_TABLES;
  o.table_rows = td_table_rows;
  o.dim = TD_DIM;
  o.bag = bag;
  o.mode = mode;
  o.bottom = td_bottom;
  o.num_bottom = 1;
  o.top = td_top;
  o.num_top = 1;
  o.interaction = interaction;
  return o;
}

/* TD_BATCH records [dense floats][TD_TABLES * bag ids] into host[] (the caller's, of
 * TD_BATCH * (TD_DENSE + TD_TABLES * bag) slots): dense values in [-1, 1), ids covering every
 * row of each table (a table of more than 64 rows: spread over it), slot 1 of table 0 empty (-1)
 * in some records, a bag with no id at all. */
static void td_records(size_t bag, float *host) {
  size_t width = TD_DENSE + TD_TABLES * bag;
  uint32_t s = 12345;
  for (size_t i = 0; i < TD_BATCH; ++i) {
    float *r = host + i * width;
    for (size_t f = 0; f < TD_DENSE; ++f) {
      s = s * 1664525u + 1013904223u;
      r[f] = (float)(s >> 8) / 8388608.0f - 1.0f;
    }
    for (size_t t = 0; t < TD_TABLES; ++t)
      for (size_t k = 0; k < bag; ++k) {
        const size_t rows = td_table_rows[t];
        size_t v = (i * 3 + t + 2 * k) % rows;
        if (rows > 64) v = (v * 389 + i * 53 + k * 701) % rows;
        int32_t id = (int32_t)v;
        if (bag > 1 && t == 0 && k == 1 && i % 2 == 0) id = -1; /* an empty slot */
        if (bag > 1 && t == 2 && i == 3) id = -1;               /* a bag with no id */
        memcpy(&r[TD_DENSE + t * bag + k], &id, sizeof id);
      }
  }
}

static const int32_t td_labels[TD_BATCH] = {1, 0, 0, 1, 1, 0};

typedef struct td_model {
  dpt_backend *be;
  dpt_model *m;
  dpt_buffer *bx, *by;
} td_model;

static td_model td_create_on(dpt_backend_kind kind, const dpt_dlrm_options *o, uint64_t seed) {
  td_model t;
  dpt_model_spec spec;
  TU_OK(dpt_model_spec_dlrm(&spec, o));
  TU_OK(dpt_backend_create(kind, 0, &t.be));
  TU_OK(dpt_model_create(t.be, &spec, TD_BATCH, &t.m));
  TU_OK(dpt_model_init(t.m, seed));
  size_t bag = o->bag ? o->bag : 1, width = TD_DENSE + TD_TABLES * bag;
  ck_assert_uint_eq(dpt_model_input_size(t.m), width);
  float *x = malloc(TD_BATCH * width * sizeof(float));
  td_records(bag, x);
  t.bx = tu_f32(t.be, x, TD_BATCH * width);
  t.by = tu_i32(t.be, td_labels, TD_BATCH);
  free(x);
  return t;
}

static td_model td_create(const dpt_dlrm_options *o, uint64_t seed) {
  return td_create_on(DPT_BACKEND_CPU, o, seed);
}

static void td_destroy(td_model *t) {
  dpt_buffer_free(t->bx);
  dpt_buffer_free(t->by);
  dpt_model_destroy(t->m);
  dpt_backend_destroy(t->be);
}

/* The interaction's input gradient reaches the tables and the bottom MLP only through it: a
 * wrong interaction backward shows in emb_l.* and bot_l.*. Weights scaled so that the logits
 * stay in the sigmoid's slope. */
static void gradient_case(int interaction, size_t bag, int mode) {
  dpt_dlrm_options o = td_options(interaction, bag, mode);
  td_model t = td_create(&o, 7);
  size_t np = dpt_model_num_params(t.m);
  float *w = malloc(np * sizeof(float));
  TU_OK(dpt_model_get_params(t.m, w));
  for (size_t t2 = 0; t2 < TD_TABLES; ++t2) { /* tables normal(0, 1) -> normal(0, 0.5) */
    dpt_tensor_info ti;
    TU_OK(dpt_model_tensor(t.m, t2, &ti));
    for (size_t j = 0; j < ti.count; ++j)
      w[ti.offset + j] *= 0.5f;
  }
  TU_OK(dpt_model_set_params(t.m, w));
  free(w);
  gc_check_gradients(t.m, t.bx, t.by, TD_BATCH, 7, 40);
  td_destroy(&t);
}

START_TEST(gradient_dot) {
  gradient_case(DPT_DLRM_DOT, 1, DPT_BAG_SUM);
}
END_TEST

START_TEST(gradient_cat) {
  gradient_case(DPT_DLRM_CAT, 1, DPT_BAG_SUM);
}
END_TEST

START_TEST(gradient_bag_sum) {
  gradient_case(DPT_DLRM_DOT, 2, DPT_BAG_SUM);
}
END_TEST

START_TEST(gradient_bag_mean) {
  gradient_case(DPT_DLRM_DOT, 2, DPT_BAG_MEAN);
  gradient_case(DPT_DLRM_CAT, 2, DPT_BAG_MEAN);
}
END_TEST

/* The parameter gradient of a bag (rows used by no sample get 0), and the table gradients
 * are overwritten by each step rather than accumulated. */
START_TEST(table_gradient_overwritten) {
  dpt_dlrm_options o = td_options(DPT_DLRM_DOT, 2, DPT_BAG_SUM);
  td_model t = td_create(&o, 3);
  size_t np = dpt_model_num_params(t.m);
  float *g1 = malloc(np * sizeof(float)), *g2 = malloc(np * sizeof(float));
  TU_OK(dpt_model_train_step(t.m, t.bx, t.by, TD_BATCH, 0.5f, NULL, NULL));
  TU_OK(dpt_buffer_download(dpt_model_grads(t.m), 0, g1, np * sizeof(float)));
  TU_OK(dpt_model_train_step(t.m, t.bx, t.by, TD_BATCH, 0.5f, NULL, NULL));
  TU_OK(dpt_buffer_download(dpt_model_grads(t.m), 0, g2, np * sizeof(float)));
  ck_assert_int_eq(memcmp(g1, g2, np * sizeof(float)), 0);
  free(g1);
  free(g2);
  td_destroy(&t);
}
END_TEST

/* dpt_model_set_sparse_table_grads: turning it on zeroes the tables' gradients; then a step
 * adds into them (two steps hold twice one step's rows) and still overwrites the rest. */
START_TEST(sparse_table_grads_accumulate) {
  dpt_dlrm_options o = td_options(DPT_DLRM_DOT, 2, DPT_BAG_SUM);
  td_model t = td_create(&o, 3);
  size_t np = dpt_model_num_params(t.m);
  float *g1 = malloc(np * sizeof(float)), *g2 = malloc(np * sizeof(float));
  TU_OK(dpt_model_train_step(t.m, t.bx, t.by, TD_BATCH, 0.5f, NULL, NULL));
  TU_OK(dpt_buffer_download(dpt_model_grads(t.m), 0, g1, np * sizeof(float)));
  TU_OK(dpt_model_set_sparse_table_grads(t.m, 1));
  TU_OK(dpt_buffer_download(dpt_model_grads(t.m), 0, g2, np * sizeof(float)));
  size_t table_floats = 0, nonzero = 0;
  for (size_t k = 0; k < TD_TABLES; ++k) {
    dpt_tensor_info ti;
    TU_OK(dpt_model_tensor(t.m, k, &ti));
    ck_assert_str_eq(ti.name + strlen(ti.name) - 7, ".weight");
    ck_assert_int_eq(strncmp(ti.name, "emb_l.", 6), 0);
    table_floats += ti.count;
    for (size_t j = ti.offset; j < ti.offset + ti.count; ++j) {
      ck_assert(g2[j] == 0.0f);
      nonzero += g1[j] != 0.0f;
    }
  }
  ck_assert_uint_gt(nonzero, 0);
  for (int step = 0; step < 2; ++step)
    TU_OK(dpt_model_train_step(t.m, t.bx, t.by, TD_BATCH, 0.5f, NULL, NULL));
  TU_OK(dpt_buffer_download(dpt_model_grads(t.m), 0, g2, np * sizeof(float)));
  for (size_t j = 0; j < np; ++j) { /* the tables come first in the flat buffer */
    const double want = j < table_floats ? 2.0 * g1[j] : g1[j]; /* a row sums several uses */
    ck_assert_msg(fabs(g2[j] - want) <= 1e-6 * fabs(want), "gradient %zu: %g, one step %g", j,
                  (double)g2[j], (double)g1[j]);
  }
  TU_OK(dpt_model_set_sparse_table_grads(t.m, 0));
  TU_OK(dpt_model_train_step(t.m, t.bx, t.by, TD_BATCH, 0.5f, NULL, NULL));
  TU_OK(dpt_buffer_download(dpt_model_grads(t.m), 0, g2, np * sizeof(float)));
  ck_assert_int_eq(memcmp(g1, g2, np * sizeof(float)), 0);
  free(g1);
  free(g2);
  td_destroy(&t);
}
END_TEST

/* ---- binary cross-entropy -------------------------------------------------------------------- */

START_TEST(bce_loss_and_correct) {
  dpt_dlrm_options o = td_options(DPT_DLRM_DOT, 2, DPT_BAG_MEAN);
  td_model t = td_create(&o, 11);
  ck_assert_uint_eq(dpt_model_num_classes(t.m), 1);
  float logits[TD_BATCH];
  TU_OK(dpt_model_logits(t.m, t.bx, TD_BATCH, logits));
  double want = 0;
  int64_t want_correct = 0;
  for (int i = 0; i < TD_BATCH; ++i) {
    double x = logits[i], y = td_labels[i];
    ck_assert(isfinite(x));
    want += fmax(x, 0.0) - x * y + log1p(exp(-fabs(x)));
    want_correct += (x > 0) == (y == 1);
  }
  double loss = 0, train = 0;
  int64_t correct = -1, train_correct = -1;
  TU_OK(dpt_model_evaluate(t.m, t.bx, t.by, TD_BATCH, &loss, &correct));
  ck_assert_double_eq_tol(loss, want, 1e-5 * (1 + want));
  ck_assert_int_eq(correct, want_correct);
  TU_OK(dpt_model_train_step(t.m, t.bx, t.by, TD_BATCH, 1.0f, &train, &train_correct));
  ck_assert_double_eq_tol(train, want, 1e-5 * (1 + want)); /* no dropout: the same forward */
  ck_assert_int_eq(train_correct, want_correct);
  /* An ignored label counts for nothing. */
  int32_t ignored[TD_BATCH];
  memcpy(ignored, td_labels, sizeof ignored);
  ignored[2] = DPT_IGNORE_INDEX;
  dpt_buffer *by = tu_i32(t.be, ignored, TD_BATCH);
  double x2 = logits[2];
  TU_OK(dpt_model_evaluate(t.m, t.bx, by, TD_BATCH, &loss, &correct));
  ck_assert_double_eq_tol(loss, want - (fmax(x2, 0.0) + log1p(exp(-fabs(x2)))), 1e-5 * (1 + want));
  dpt_buffer_free(by);
  /* Steps of plain SGD lower the loss on the batch. */
  size_t np = dpt_model_num_params(t.m);
  float *w = malloc(np * sizeof(float)), *g = malloc(np * sizeof(float));
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    TU_OK(dpt_model_train_step(t.m, t.bx, t.by, TD_BATCH, 1.0f / TD_BATCH, &last, NULL));
    if (step == 0) first = last;
    TU_OK(dpt_model_get_params(t.m, w));
    TU_OK(dpt_buffer_download(dpt_model_grads(t.m), 0, g, np * sizeof(float)));
    for (size_t j = 0; j < np; ++j)
      w[j] -= 0.5f * g[j];
    TU_OK(dpt_model_set_params(t.m, w));
  }
  ck_assert_msg(last < 0.5 * first, "loss %g after 50 steps, %g at first", last, first);
  free(w);
  free(g);
  td_destroy(&t);
}
END_TEST

/* ---- the builder's names and shapes --------------------------------------------------------- */

typedef struct want_tensor {
  const char *name;
  int64_t rows, cols; /* cols 0: a vector */
} want_tensor;

static void expect_tensors(const dpt_model *m, const want_tensor *want, size_t n) {
  ck_assert_uint_eq(dpt_model_num_tensors(m), n);
  ck_assert_uint_eq(dpt_model_num_buffers(m), 0);
  for (size_t i = 0; i < n; ++i) {
    dpt_tensor_info ti;
    TU_OK(dpt_model_tensor(m, i, &ti));
    ck_assert_str_eq(ti.name, want[i].name);
    ck_assert_int_eq(ti.ndim, want[i].cols ? 2 : 1);
    ck_assert_int_eq(ti.shape[0], want[i].rows);
    if (want[i].cols) ck_assert_int_eq(ti.shape[1], want[i].cols);
  }
}

START_TEST(builder_names_and_shapes) {
  /* dot: K = 4 vectors of 4, the top takes 4 + 6 values */
  const want_tensor dot[] = {
      {"emb_l.0.weight", 5, 4}, {"emb_l.1.weight", 7, 4},  {"emb_l.2.weight", 4, 4},
      {"bot_l.0.weight", 6, 3}, {"bot_l.0.bias", 6, 0},    {"bot_l.2.weight", 4, 6},
      {"bot_l.2.bias", 4, 0},   {"top_l.0.weight", 5, 10}, {"top_l.0.bias", 5, 0},
      {"top_l.2.weight", 1, 5}, {"top_l.2.bias", 1, 0}};
  dpt_dlrm_options o = td_options(DPT_DLRM_DOT, 2, DPT_BAG_SUM);
  td_model t = td_create(&o, 1);
  expect_tensors(t.m, dot, sizeof dot / sizeof dot[0]);
  ck_assert_uint_eq(dpt_model_input_size(t.m), TD_DENSE + TD_TABLES * 2);
  td_destroy(&t);
  /* cat: the top takes the 4 x 4 concatenation */
  want_tensor cat[sizeof dot / sizeof dot[0]];
  memcpy(cat, dot, sizeof cat);
  cat[7].cols = 16;
  o = td_options(DPT_DLRM_CAT, 1, DPT_BAG_SUM);
  t = td_create(&o, 1);
  expect_tensors(t.m, cat, sizeof cat / sizeof cat[0]);
  ck_assert_uint_eq(dpt_model_input_size(t.m), TD_DENSE + TD_TABLES);
  td_destroy(&t);
  /* No hidden layers: bot_l.0 (linear to dim), bot_l.1 (relu), top_l.0 (linear to 1). */
  dpt_model_spec spec;
  o = td_options(DPT_DLRM_DOT, 1, DPT_BAG_SUM);
  o.num_bottom = o.num_top = 0;
  TU_OK(dpt_model_spec_dlrm(&spec, &o));
  ck_assert_uint_eq(spec.num_classes, 1);
  ck_assert_uint_eq(spec.num_layers, 3 + 1 + 2 + 3 + 1 + 1);
  ck_assert_str_eq(spec.layers[4].name, "bot_l.0");
  ck_assert_int_eq(spec.layers[5].kind, DPT_LAYER_RELU);
  ck_assert_str_eq(spec.layers[spec.num_layers - 1].name, "top_l.0");
  ck_assert_uint_eq(spec.layers[spec.num_layers - 1].size, 1);
  ck_assert_int_eq(spec.layers[spec.num_layers - 2].kind, DPT_LAYER_INTERACTION);
  /* The records' slots: table t's ids at num_dense + t * bag. */
  o = td_options(DPT_DLRM_CAT, 3, DPT_BAG_MEAN);
  TU_OK(dpt_model_spec_dlrm(&spec, &o));
  ck_assert_uint_eq(spec.in_c * spec.in_h, 1);
  ck_assert_uint_eq(spec.in_w, TD_DENSE + 3 * TD_TABLES);
  for (size_t t2 = 0; t2 < TD_TABLES; ++t2) {
    ck_assert_int_eq(spec.layers[t2].kind, DPT_LAYER_EMBEDDING_BAG);
    ck_assert_uint_eq(spec.layers[t2].offset, TD_DENSE + 3 * t2);
    ck_assert_uint_eq(spec.layers[t2].bag, 3);
    ck_assert_int_eq(spec.layers[t2].mode, DPT_BAG_MEAN);
    ck_assert_uint_eq(spec.layers[t2].vocab, td_rows[t2]);
  }
}
END_TEST

/* ---- JSON ----------------------------------------------------------------------------------- */

static void expect_same_spec(const dpt_model_spec *a, const dpt_model_spec *b) {
  ck_assert_uint_eq(a->in_c, b->in_c);
  ck_assert_uint_eq(a->in_h, b->in_h);
  ck_assert_uint_eq(a->in_w, b->in_w);
  ck_assert_uint_eq(a->num_classes, b->num_classes);
  ck_assert_uint_eq(a->seq_len, b->seq_len);
  ck_assert_uint_eq(a->num_layers, b->num_layers);
  for (size_t i = 0; i < a->num_layers; ++i) {
    const dpt_layer_spec *x = &a->layers[i], *y = &b->layers[i];
    ck_assert_int_eq(x->kind, y->kind);
    ck_assert_str_eq(x->name, y->name);
    ck_assert_uint_eq(x->size, y->size);
    ck_assert_int_eq(x->num_inputs, y->num_inputs);
    for (int j = 0; j < x->num_inputs; ++j)
      ck_assert_int_eq(x->inputs[j], y->inputs[j]);
    ck_assert_uint_eq(x->vocab, y->vocab);
    ck_assert_uint_eq(x->offset, y->offset);
    ck_assert_uint_eq(x->bag, y->bag);
    ck_assert_int_eq(x->mode, y->mode);
    ck_assert_uint_eq(x->kernel, y->kernel);
    ck_assert_uint_eq(x->stride, y->stride);
    ck_assert_int_eq(x->no_bias, y->no_bias);
    ck_assert(x->p == y->p && x->eps == y->eps && x->init_std == y->init_std);
    ck_assert_int_eq(x->tie, y->tie);
  }
}

START_TEST(json_round_trip) {
  const int cases[3][3] = {
      {DPT_DLRM_DOT, 2, DPT_BAG_MEAN}, {DPT_DLRM_CAT, 1, DPT_BAG_SUM}, {DPT_DLRM_DOT, 0, 0}};
  for (int c = 0; c < 3; ++c) {
    dpt_dlrm_options o = td_options(cases[c][0], (size_t)cases[c][1], cases[c][2]);
    dpt_model_spec spec, back;
    TU_OK(dpt_model_spec_dlrm(&spec, &o));
    char *text = NULL;
    TU_OK(dpt_model_spec_to_json(&spec, &text));
    ck_assert_ptr_nonnull(strstr(text, "\"kind\":\"embedding_bag\""));
    ck_assert_ptr_nonnull(strstr(text, "\"offset\":3"));
    ck_assert_ptr_nonnull(strstr(text, "\"kind\":\"slice\""));
    ck_assert_ptr_nonnull(strstr(text, "\"kind\":\"concat\""));
    ck_assert((strstr(text, "\"kind\":\"interaction\"") != NULL) == (cases[c][0] == DPT_DLRM_DOT));
    ck_assert((strstr(text, "\"mode\":\"mean\"") != NULL) == (cases[c][2] == DPT_BAG_MEAN));
    ck_assert((strstr(text, "\"bag\":2") != NULL) == (cases[c][1] == 2));
    TU_OK(dpt_model_spec_parse_json(text, "dlrm", &back));
    expect_same_spec(&spec, &back);
    free(text);
  }
  /* Written by hand: "mode": "sum" is the default, mean the other. */
  const char *hand =
      "{\"input\": [1, 1, 5], \"classes\": 1, \"layers\": ["
      "{\"name\": \"e\", \"kind\": \"embedding_bag\", \"inputs\": \"input\", \"out\": 2,"
      " \"vocab\": 9, \"offset\": 3, \"bag\": 2, \"mode\": \"sum\"},"
      "{\"name\": \"d\", \"kind\": \"slice\", \"inputs\": \"input\", \"out\": 2},"
      "{\"name\": \"c\", \"kind\": \"concat\", \"inputs\": [\"d\", \"e\"]},"
      "{\"name\": \"i\", \"kind\": \"interaction\", \"out\": 2},"
      "{\"name\": \"fc\", \"kind\": \"linear\", \"out\": \"classes\"}]}";
  dpt_model_spec spec;
  TU_OK(dpt_model_spec_parse_json(hand, "hand", &spec));
  ck_assert_int_eq(spec.layers[0].mode, DPT_BAG_SUM);
  ck_assert_uint_eq(spec.layers[0].bag, 2);
  ck_assert_uint_eq(spec.layers[0].offset, 3);
  dpt_backend *be = tu_cpu();
  dpt_model *m = NULL;
  TU_OK(dpt_model_create(be, &spec, 2, &m));
  dpt_tensor_info ti;
  TU_OK(dpt_model_tensor(m, 1, &ti)); /* e.weight [9, 2], fc.weight [1, 2 + 1], fc.bias */
  ck_assert_str_eq(ti.name, "fc.weight");
  ck_assert_int_eq(ti.shape[1], 3);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
  const char *bad = "{\"input\": [1, 1, 5], \"classes\": 1, \"layers\": ["
                    "{\"name\": \"e\", \"kind\": \"embedding_bag\", \"out\": 2, \"vocab\": 9,"
                    " \"mode\": \"max\"}, {\"kind\": \"linear\", \"out\": 1}]}";
  EXPECT_FAIL(dpt_model_spec_parse_json(bad, "bad", &spec), DPT_ERR_BAD_FORMAT, "'e'", "mode",
              NULL);
}
END_TEST

/* ---- bad specs ------------------------------------------------------------------------------ */

/* A record model on [1, 1, 6]: dense (slice 0..2) and a table on slots 2..4. */
static void record_base(dpt_model_spec *s, size_t classes) {
  dpt_model_spec_init(s, 1, 1, 6, classes);
}

static int add(dpt_model_spec *s, dpt_layer_spec l, const char *name, int in0, int in1) {
  snprintf(l.name, sizeof l.name, "%s", name);
  l.num_inputs = in1 >= -1 ? 2 : in0 >= -1 ? 1 : 0;
  l.inputs[0] = in0;
  l.inputs[1] = in1;
  int index = -1;
  TU_OK(dpt_model_spec_add(s, &l, &index));
  return index;
}

#define PREV (-2)

static void expect_create_fails(const dpt_model_spec *s, const char *n1, const char *n2) {
  dpt_backend *be = tu_cpu();
  dpt_model *m = NULL;
  EXPECT_FAIL(dpt_model_create(be, s, 2, &m), DPT_ERR_INVALID_ARG, n1, n2, NULL);
  ck_assert_ptr_null(m);
  dpt_backend_destroy(be);
}

START_TEST(bad_layers) {
  const int in = DPT_LAYER_INPUT_MODEL;
  dpt_layer_spec fc1 = {.kind = DPT_LAYER_LINEAR, .size = 1};
  dpt_layer_spec eb = {.kind = DPT_LAYER_EMBEDDING_BAG, .size = 2, .vocab = 5, .offset = 2};
  dpt_layer_spec sl = {.kind = DPT_LAYER_SLICE, .size = 2};
  dpt_model_spec s;
  /* embedding_bag not on the model input */
  record_base(&s, 1);
  add(&s, sl, "dense", in, PREV);
  add(&s, eb, "emb", PREV, PREV);
  add(&s, fc1, "fc", PREV, PREV);
  expect_create_fails(&s, "'emb' (embedding_bag)", "model input");
  /* embedding_bag reading beyond the record, a bad mode, no rows */
  record_base(&s, 1);
  dpt_layer_spec e2 = eb;
  e2.offset = 5;
  e2.bag = 2;
  add(&s, e2, "emb", in, PREV);
  add(&s, fc1, "fc", PREV, PREV);
  expect_create_fails(&s, "'emb'", "beyond the record's 6");
  s.layers[0] = eb;
  snprintf(s.layers[0].name, sizeof s.layers[0].name, "emb");
  s.layers[0].num_inputs = 1;
  s.layers[0].inputs[0] = in;
  s.layers[0].mode = 2;
  expect_create_fails(&s, "'emb'", "mode 2");
  s.layers[0].mode = DPT_BAG_MEAN;
  s.layers[0].vocab = 0;
  expect_create_fails(&s, "'emb'", "vocab 0");
  /* slice beyond its input */
  record_base(&s, 1);
  dpt_layer_spec s2 = sl;
  s2.offset = 5;
  add(&s, s2, "dense", in, PREV);
  add(&s, fc1, "fc", PREV, PREV);
  expect_create_fails(&s, "'dense' (slice)", "beyond its input's 6");
  /* slice of an image */
  dpt_model_spec_init(&s, 1, 4, 4, 1);
  add(&s, (dpt_layer_spec){.kind = DPT_LAYER_CONV2D, .size = 2, .kernel = 3}, "conv", PREV, PREV);
  add(&s, sl, "cut", PREV, PREV);
  add(&s, fc1, "fc", PREV, PREV);
  expect_create_fails(&s, "'cut' (slice)", "vector");
  /* concat of non-vectors: the model input */
  record_base(&s, 1);
  int d = add(&s, sl, "dense", in, PREV);
  add(&s, (dpt_layer_spec){.kind = DPT_LAYER_CONCAT}, "cat", d, in);
  add(&s, fc1, "fc", PREV, PREV);
  expect_create_fails(&s, "'cat' (concat)", "vectors");
  /* concat with one input */
  record_base(&s, 1);
  add(&s, sl, "dense", in, PREV);
  add(&s, (dpt_layer_spec){.kind = DPT_LAYER_CONCAT}, "cat", PREV, PREV);
  add(&s, fc1, "fc", PREV, PREV);
  expect_create_fails(&s, "'cat'", "takes 2 inputs");
  /* interaction input not a multiple of size */
  record_base(&s, 1);
  d = add(&s, sl, "dense", in, PREV);
  int e =
      add(&s, (dpt_layer_spec){.kind = DPT_LAYER_EMBEDDING_BAG, .size = 3, .vocab = 5, .offset = 2},
          "emb", in, PREV);
  add(&s, (dpt_layer_spec){.kind = DPT_LAYER_CONCAT}, "cat", d, e);
  add(&s, (dpt_layer_spec){.kind = DPT_LAYER_INTERACTION, .size = 2}, "dot", PREV, PREV);
  add(&s, fc1, "fc", PREV, PREV);
  expect_create_fails(&s, "'dot' (interaction)", "not a multiple");
  s.layers[3].size = 5; /* one vector of 5: no pairs */
  expect_create_fails(&s, "'dot' (interaction)", "multiple (2 or more)");
  /* one logit: the last layer must give 1 output */
  record_base(&s, 1);
  add(&s, sl, "dense", in, PREV);
  add(&s, (dpt_layer_spec){.kind = DPT_LAYER_LINEAR, .size = 2}, "fc", PREV, PREV);
  expect_create_fails(&s, "gives 2 outputs", "num_classes is 1");
  /* a token model has no records */
  dpt_model_spec_init(&s, 1, 1, 6, 4);
  s.seq_len = 6;
  add(&s, eb, "emb", in, PREV);
  add(&s, (dpt_layer_spec){.kind = DPT_LAYER_LINEAR, .size = 4}, "fc", PREV, PREV);
  expect_create_fails(&s, "'emb'", "token");
}
END_TEST

START_TEST(bad_options) {
  dpt_model_spec s;
  dpt_dlrm_options o = td_options(DPT_DLRM_DOT, 1, DPT_BAG_SUM);
  const size_t zero_row[TD_TABLES] = {5, 0, 4}, zero[1] = {0};
  EXPECT_FAIL(dpt_model_spec_dlrm(&s, NULL), DPT_ERR_INVALID_ARG, "options", NULL, NULL);
  o.num_dense = 0;
  EXPECT_FAIL(dpt_model_spec_dlrm(&s, &o), DPT_ERR_INVALID_ARG, "num_dense", NULL, NULL);
  o = td_options(DPT_DLRM_DOT, 1, DPT_BAG_SUM);
  o.num_tables = 0;
  EXPECT_FAIL(dpt_model_spec_dlrm(&s, &o), DPT_ERR_INVALID_ARG, "num_tables", NULL, NULL);
  o = td_options(DPT_DLRM_DOT, 1, DPT_BAG_SUM);
  o.table_rows = NULL;
  EXPECT_FAIL(dpt_model_spec_dlrm(&s, &o), DPT_ERR_INVALID_ARG, "table_rows", NULL, NULL);
  o.table_rows = zero_row;
  EXPECT_FAIL(dpt_model_spec_dlrm(&s, &o), DPT_ERR_INVALID_ARG, "table_rows[1]", NULL, NULL);
  o = td_options(DPT_DLRM_DOT, 1, DPT_BAG_SUM);
  o.dim = 0;
  EXPECT_FAIL(dpt_model_spec_dlrm(&s, &o), DPT_ERR_INVALID_ARG, "dim", NULL, NULL);
  o = td_options(DPT_DLRM_DOT, 1, 3);
  EXPECT_FAIL(dpt_model_spec_dlrm(&s, &o), DPT_ERR_INVALID_ARG, "mode 3", NULL, NULL);
  o = td_options(7, 1, DPT_BAG_SUM);
  EXPECT_FAIL(dpt_model_spec_dlrm(&s, &o), DPT_ERR_INVALID_ARG, "interaction 7", NULL, NULL);
  o = td_options(DPT_DLRM_DOT, 1, DPT_BAG_SUM);
  o.bottom = zero;
  EXPECT_FAIL(dpt_model_spec_dlrm(&s, &o), DPT_ERR_INVALID_ARG, "bottom[0]", NULL, NULL);
  o = td_options(DPT_DLRM_DOT, 1, DPT_BAG_SUM);
  o.top = NULL;
  EXPECT_FAIL(dpt_model_spec_dlrm(&s, &o), DPT_ERR_INVALID_ARG, "top is NULL", NULL, NULL);
  o = td_options(DPT_DLRM_DOT, 1, DPT_BAG_SUM);
  o.num_top = 300;
  EXPECT_FAIL(dpt_model_spec_dlrm(&s, &o), DPT_ERR_INVALID_ARG, "layers", NULL, NULL);
}
END_TEST

/* ---- a device against the CPU ------------------------------------------------------------- */

/* The device's values against the CPU's, tensor by tensor: the relative L2 difference, at most
 * 1e-5 each (what names the values in the message); returns the largest. */
static double worst_tensor_diff(const dpt_model *m, const float *dev, const float *cpu,
                                const char *what) {
  double worst = 0;
  for (size_t i = 0; i < dpt_model_num_tensors(m); ++i) {
    dpt_tensor_info ti;
    TU_OK(dpt_model_tensor(m, i, &ti));
    double num = 0, den = 0;
    for (size_t j = ti.offset; j < ti.offset + ti.count; ++j) {
      num += ((double)dev[j] - cpu[j]) * ((double)dev[j] - cpu[j]);
      den += (double)cpu[j] * cpu[j];
    }
    const double rel = sqrt(num) / (den > 0 ? sqrt(den) : 1.0);
    ck_assert_msg(rel <= 1e-5, "%s: %s differ from the CPU's by %g", ti.name, what, rel);
    worst = rel > worst ? rel : worst;
  }
  return worst;
}

static dpt_backend_kind device_kind = DPT_BACKEND_CPU;

/* One training step of the tiny DLRM (bags of 2 with empty slots, mean and sum, dot and cat) on
 * the device against the CPU from the same parameters: the loss, the correct count and every
 * gradient tensor (norm of the difference over the norm). */
START_TEST(device_matches_cpu) {
  if (!tu_device_present(device_kind)) {
    printf("%s: no device, nothing to compare\n", dpt_backend_kind_name(device_kind));
    return;
  }
  const int interaction = _i % 2 ? DPT_DLRM_CAT : DPT_DLRM_DOT;
  const int mode = _i / 2 ? DPT_BAG_MEAN : DPT_BAG_SUM;
  dpt_dlrm_options o = td_options(interaction, 2, mode);
  td_model t[2] = {td_create(&o, 4), td_create_on(device_kind, &o, 4)};
  size_t np = dpt_model_num_params(t[0].m);
  float *w = malloc(np * sizeof(float)), *g[2];
  TU_OK(dpt_model_get_params(t[0].m, w));
  TU_OK(dpt_model_set_params(t[1].m, w));
  double loss[2];
  int64_t correct[2];
  for (int k = 0; k < 2; ++k) {
    TU_OK(dpt_model_train_step(t[k].m, t[k].bx, t[k].by, TD_BATCH, 0.5f, &loss[k], &correct[k]));
    g[k] = malloc(np * sizeof(float));
    TU_OK(dpt_buffer_download(dpt_model_grads(t[k].m), 0, g[k], np * sizeof(float)));
  }
  ck_assert_double_eq_tol(loss[1], loss[0], 1e-5 * fabs(loss[0]));
  ck_assert_int_eq(correct[1], correct[0]);
  const double worst = worst_tensor_diff(t[0].m, g[1], g[0], "gradient");
  printf("%s, tiny DLRM (%s, %s): loss %.7f against %.7f, worst gradient tensor %.3g\n",
         dpt_backend_kind_name(device_kind), interaction == DPT_DLRM_CAT ? "cat" : "dot",
         mode == DPT_BAG_MEAN ? "mean" : "sum", loss[1], loss[0], worst);
  for (int k = 0; k < 2; ++k) {
    free(g[k]);
    td_destroy(&t[k]);
  }
  free(w);
}
END_TEST

/* The tiny DLRM with tables beyond the Vulkan backend's windows (DPT_VULKAN_TEST_MAX_RANGE,
 * set by the test's registration, shrinks them to a few KiB): three AdamW steps with gradient
 * clipping on the device and on the CPU from the same parameters, the last one as the trainer's
 * sparse_tables mode takes it (the dense ranges through the optimizer, the tables by axpy), the
 * gradients checked for non-finite values in between. The losses, correct counts and every
 * parameter tensor agree within 1e-5 (norm of the difference over the norm). */
START_TEST(big_table_matches_cpu) {
  const char *range = getenv("DPT_VULKAN_TEST_MAX_RANGE");
  ck_assert_msg(range != NULL, "DPT_VULKAN_TEST_MAX_RANGE is not set");
  ck_assert_uint_gt(td_big_rows[0] * TD_DIM * sizeof(float), 3 * strtoul(range, NULL, 10));
  if (!tu_device_present(device_kind)) {
    printf("%s: no device, nothing to compare\n", dpt_backend_kind_name(device_kind));
    return;
  }
  td_table_rows = td_big_rows;
  const int interaction = _i % 2 ? DPT_DLRM_CAT : DPT_DLRM_DOT;
  const int mode = _i / 2 ? DPT_BAG_MEAN : DPT_BAG_SUM;
  dpt_dlrm_options o = td_options(interaction, 2, mode);
  td_model t[2] = {td_create(&o, 5), td_create_on(device_kind, &o, 5)};
  const size_t np = dpt_model_num_params(t[0].m);
  float *w[2] = {malloc(np * sizeof(float)), malloc(np * sizeof(float))};
  TU_OK(dpt_model_get_params(t[0].m, w[0]));
  TU_OK(dpt_model_set_params(t[1].m, w[0]));
  /* the tables' ranges and the dense ranges between them */
  dpt_range tables[TD_TABLES], dense[TD_TABLES + 1];
  size_t nd = 0, at = 0;
  for (size_t k = 0; k < TD_TABLES; ++k) {
    dpt_tensor_info ti;
    TU_OK(dpt_model_tensor(t[0].m, k, &ti));
    ck_assert_uint_eq(ti.count, td_big_rows[k] * TD_DIM);
    tables[k] = (dpt_range){ti.offset, ti.count};
    if (ti.offset > at) dense[nd++] = (dpt_range){at, ti.offset - at};
    at = ti.offset + ti.count;
  }
  if (np > at) dense[nd++] = (dpt_range){at, np - at};
  dpt_optim_config oc;
  dpt_optim_config_default(&oc, DPT_OPTIM_ADAMW);
  oc.lr = 0.01f;
  oc.weight_decay = 0.01f;
  oc.clip_norm = 0.5f;
  dpt_optimizer *opt[2];
  for (int k = 0; k < 2; ++k)
    TU_OK(dpt_optimizer_create(t[k].m, &oc, &opt[k]));
  for (int step = 0; step < 3; ++step) {
    double loss[2], norm[2];
    int64_t correct[2];
    for (int k = 0; k < 2; ++k) {
      dpt_model *m = t[k].m;
      TU_OK(dpt_model_train_step(m, t[k].bx, t[k].by, TD_BATCH, 1.0f / TD_BATCH, &loss[k],
                                 &correct[k]));
      uint64_t bad = 1;
      TU_OK(dpt_count_nonfinite(t[k].be, np, dpt_model_grads(m), 0, &bad));
      ck_assert_uint_eq(bad, 0);
      if (step < 2) {
        TU_OK(dpt_optimizer_step(opt[k], &norm[k]));
        continue;
      }
      double sumsq = 0;
      TU_OK(dpt_optimizer_grad_sumsq(opt[k], dense, nd, &sumsq));
      norm[k] = sqrt(sumsq);
      const float lr = dpt_optimizer_lr(opt[k]);
      TU_OK(dpt_optimizer_step_ranges(opt[k], dense, nd, sumsq, NULL));
      for (size_t j = 0; j < TD_TABLES; ++j)
        TU_OK(dpt_axpy(t[k].be, tables[j].count, -lr, dpt_model_grads(m), tables[j].offset,
                       dpt_model_params(m), tables[j].offset));
    }
    ck_assert_double_eq_tol(loss[1], loss[0], 1e-5 * fabs(loss[0]));
    ck_assert_int_eq(correct[1], correct[0]);
    ck_assert_double_eq_tol(norm[1], norm[0], 1e-5 * norm[0]);
    ck_assert_double_gt(norm[0], 0);
  }
  for (int k = 0; k < 2; ++k)
    TU_OK(dpt_model_get_params(t[k].m, w[k]));
  const double worst = worst_tensor_diff(t[0].m, w[1], w[0], "parameters");
  printf("%s, DLRM with tables of %zu and %zu rows (%s, %s): worst parameter tensor %.3g\n",
         dpt_backend_kind_name(device_kind), td_big_rows[0], td_big_rows[2],
         interaction == DPT_DLRM_CAT ? "cat" : "dot", mode == DPT_BAG_MEAN ? "mean" : "sum", worst);
  for (int k = 0; k < 2; ++k) {
    dpt_optimizer_destroy(opt[k]);
    free(w[k]);
    td_destroy(&t[k]);
  }
  td_table_rows = td_rows;
}
END_TEST

int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "backend") == 0) {
    if (dpt_backend_kind_parse(argv[2], &device_kind) != DPT_OK) return 2;
    Suite *s = suite_create("dlrm_device");
    TCase *tc = tcase_create("device");
    tcase_set_timeout(tc, 300);
    if (argc > 3 && strcmp(argv[3], "big") == 0) {
      tcase_add_loop_test(tc, big_table_matches_cpu, 0, 4);
    } else {
      tcase_add_loop_test(tc, device_matches_cpu, 0, 4);
    }
    suite_add_tcase(s, tc);
    return tu_run(s);
  }

  Suite *s = suite_create("dlrm");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, gradient_dot);
  tcase_add_test(tc, gradient_cat);
  tcase_add_test(tc, gradient_bag_sum);
  tcase_add_test(tc, gradient_bag_mean);
  tcase_add_test(tc, table_gradient_overwritten);
  tcase_add_test(tc, sparse_table_grads_accumulate);
  tcase_add_test(tc, bce_loss_and_correct);
  tcase_add_test(tc, builder_names_and_shapes);
  tcase_add_test(tc, json_round_trip);
  tcase_add_test(tc, bad_layers);
  tcase_add_test(tc, bad_options);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
