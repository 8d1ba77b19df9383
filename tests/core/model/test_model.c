/* Layer graphs: a small residual network with every layer kind against finite differences,
 * model files (and what bad ones get), batch norm's buffers in weights files, and batch norm
 * under data parallelism: with sync-bn R replicas match one replica on the combined batch,
 * without it they do not.
 *
 * Run without arguments: threads transport. Run as `test_model mpi` under mpiexec: every rank
 * trains one replica over MPI with sync-bn and rank 0 compares with one replica. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dptrain/advanced.h"
#include "grad_check.h"
#include "test_util.h"
#include "train_data.h"

static int add_layer(dpt_model_spec *s, dpt_layer_spec l, const char *name, int in0, int in1) {
  snprintf(l.name, sizeof l.name, "%s", name);
  l.num_inputs = in1 >= -1 ? 2 : in0 >= -1 ? 1 : 0;
  l.inputs[0] = in0;
  l.inputs[1] = in1;
  int index = -1;
  if (dpt_model_spec_add(s, &l, &index) != DPT_OK) {
    fprintf(stderr, "add_layer %s: %s\n", name, dpt_last_error());
    exit(1);
  }
  return index;
}

#define PREV (-2) /* add_layer: the layer before */

/* Every layer kind on 8x8 inputs: two residual blocks (identity, then a strided 1x1
 * projection; between them gelu and a layernorm over the image rows), an average pool, gelu
 * (tanh), a global average pool, layernorm and gelu on the features, batchnorm1d and dropout.
 * `dropout` 0 leaves the dropout layer out. The first block ends in gelu, not relu: a relu
 * there, before the layernorm, let float noise flip a kink within the sync-bn test's steps. */
static void mini_resnet(dpt_model_spec *s, float dropout) {
  dpt_model_spec_init(s, 1, 8, 8, 10); /* cannot fail with a spec */
  dpt_layer_spec conv3 = {
      .kind = DPT_LAYER_CONV2D, .size = 4, .kernel = 3, .padding = 1, .no_bias = 1};
  dpt_layer_spec bn = {.kind = DPT_LAYER_BATCHNORM2D}, relu = {.kind = DPT_LAYER_RELU};
  add_layer(s, conv3, "conv1", PREV, PREV);
  add_layer(s, bn, "bn1", PREV, PREV);
  int x = add_layer(s, relu, "relu", PREV, PREV);
  add_layer(s, conv3, "b1.conv", PREV, PREV);
  int y = add_layer(s, bn, "b1.bn", PREV, PREV);
  add_layer(s, (dpt_layer_spec){.kind = DPT_LAYER_ADD}, "b1.add", y, x);
  add_layer(s, (dpt_layer_spec){.kind = DPT_LAYER_GELU}, "b1.gelu", PREV, PREV);
  x = add_layer(s, (dpt_layer_spec){.kind = DPT_LAYER_LAYERNORM, .eps = 1e-3f}, "b1.ln", PREV,
                PREV);
  dpt_layer_spec proj = {
      .kind = DPT_LAYER_CONV2D, .size = 6, .kernel = 1, .stride = 2, .no_bias = 1};
  add_layer(s, proj, "b2.shortcut.0", x, PREV);
  int sc = add_layer(s, bn, "b2.shortcut.1", PREV, PREV);
  dpt_layer_spec down = {
      .kind = DPT_LAYER_CONV2D, .size = 6, .kernel = 3, .stride = 2, .padding = 1};
  add_layer(s, down, "b2.conv", x, PREV);
  y = add_layer(s, bn, "b2.bn", PREV, PREV);
  add_layer(s, (dpt_layer_spec){.kind = DPT_LAYER_ADD}, "b2.add", y, sc);
  add_layer(s, relu, "b2.relu", PREV, PREV);
  add_layer(s, (dpt_layer_spec){.kind = DPT_LAYER_AVGPOOL, .kernel = 2}, "pool", PREV, PREV);
  add_layer(s, (dpt_layer_spec){.kind = DPT_LAYER_GELU, .approximate = DPT_GELU_TANH}, "gelu_p",
            PREV, PREV);
  add_layer(s, (dpt_layer_spec){.kind = DPT_LAYER_GLOBAL_AVGPOOL}, "gap", PREV, PREV);
  add_layer(s, (dpt_layer_spec){.kind = DPT_LAYER_FLATTEN}, "flat", PREV, PREV);
  add_layer(s, (dpt_layer_spec){.kind = DPT_LAYER_LINEAR, .size = 8}, "fc1", PREV, PREV);
  add_layer(s, (dpt_layer_spec){.kind = DPT_LAYER_LAYERNORM}, "ln_f", PREV, PREV);
  add_layer(s, (dpt_layer_spec){.kind = DPT_LAYER_GELU}, "gelu_f", PREV, PREV);
  add_layer(s, (dpt_layer_spec){.kind = DPT_LAYER_BATCHNORM1D}, "bnf", PREV, PREV);
  add_layer(s, relu, "relu_f", PREV, PREV);
  if (dropout > 0)
    add_layer(s, (dpt_layer_spec){.kind = DPT_LAYER_DROPOUT, .p = dropout}, "drop", PREV, PREV);
  add_layer(s, (dpt_layer_spec){.kind = DPT_LAYER_LINEAR, .size = 10}, "fc", PREV, PREV);
}

/* ---- gradients ---------------------------------------------------------------------------- */

START_TEST(gradient_graph) {
  dpt_model_spec spec;
  mini_resnet(&spec, 0.25f);
  const size_t b = 6;
  dpt_backend *be = tu_cpu();
  dpt_model *m;
  TU_OK(dpt_model_create(be, &spec, b, &m));
  TU_OK(dpt_model_init(m, 5));
  TU_OK(dpt_model_set_step(m, 1, 2, 3));
  size_t in = dpt_model_input_size(m);
  float *x = malloc(b * in * sizeof(float));
  int32_t y[6] = {0, 3, 9, 3, 7, 1};
  uint32_t s = 99;
  for (size_t i = 0; i < b * in; ++i) {
    s = s * 1664525u + 1013904223u;
    x[i] = (float)(s >> 8) / 16777216.0f;
  }
  dpt_buffer *bx, *by;
  TU_OK(dpt_buffer_alloc(be, b * in * sizeof(float), &bx));
  TU_OK(dpt_buffer_alloc(be, sizeof y, &by));
  TU_OK(dpt_buffer_upload(bx, 0, x, b * in * sizeof(float)));
  TU_OK(dpt_buffer_upload(by, 0, y, sizeof y));
  gc_check_gradients(m, bx, by, b, 5, 40);
  free(x);
  dpt_buffer_free(bx);
  dpt_buffer_free(by);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
}
END_TEST

/* The planner's fusions (a batch norm or an add with the ReLU after it) against every layer alone
 * (DPT_FUSE=0): one training step gives the same loss and gradients bit for bit on the CPU, and
 * the fused model keeps fewer activations. */
START_TEST(fusion_matches_unfused) {
  dpt_model_spec spec;
  mini_resnet(&spec, 0.0f);
  const size_t b = 6;
  dpt_backend *be = tu_cpu();
  dpt_model *m[2];
  float *g[2];
  double loss[2];
  int64_t correct[2];
  size_t in = 0, np = 0;
  float x[6 * 64];
  const int32_t y[6] = {0, 3, 9, 3, 7, 1};
  for (size_t i = 0; i < sizeof x / sizeof x[0]; ++i)
    x[i] = (float)((i * 37u) % 101u) / 50.0f - 1.0f;
  for (int k = 0; k < 2; ++k) {
    if (k == 1) ck_assert_int_eq(setenv("DPT_FUSE", "0", 1), 0);
    TU_OK(dpt_model_create(be, &spec, b, &m[k]));
    unsetenv("DPT_FUSE");
    TU_OK(dpt_model_init(m[k], 5));
    in = dpt_model_input_size(m[k]);
    np = dpt_model_num_params(m[k]);
    dpt_buffer *bx, *by;
    TU_OK(dpt_buffer_alloc(be, b * in * sizeof(float), &bx));
    TU_OK(dpt_buffer_alloc(be, sizeof y, &by));
    TU_OK(dpt_buffer_upload(bx, 0, x, b * in * sizeof(float)));
    TU_OK(dpt_buffer_upload(by, 0, y, sizeof y));
    TU_OK(dpt_model_train_step(m[k], bx, by, b, 1.0f, &loss[k], &correct[k]));
    g[k] = malloc(np * sizeof(float));
    TU_OK(dpt_buffer_download(dpt_model_grads(m[k]), 0, g[k], np * sizeof(float)));
    dpt_buffer_free(bx);
    dpt_buffer_free(by);
  }
  ck_assert(in * b <= sizeof x / sizeof x[0]);
  ck_assert(loss[0] == loss[1] && correct[0] == correct[1]);
  ck_assert(memcmp(g[0], g[1], np * sizeof(float)) == 0);
  /* three ReLUs absorbed (after bn1, b2.add, bnf), each an output and its gradient */
  const size_t saved = 2 * b * (4 * 8 * 8 + 6 * 4 * 4 + 8) * sizeof(float);
  ck_assert_uint_eq(dpt_model_activation_bytes(m[1]) - dpt_model_activation_bytes(m[0]), saved);
  for (int k = 0; k < 2; ++k) {
    free(g[k]);
    dpt_model_destroy(m[k]);
  }
  dpt_backend_destroy(be);
}
END_TEST

/* A tiny BERT: token and position embeddings, attention with [PAD] keys masked, dropout on the
 * hidden states and the attention probabilities, the MLM head tied to the token embedding, and
 * the loss over the labelled positions only. Samples 1 and 3 end in padding. */
enum { TB_SEQ = 6, TB_VOCAB = 13, TB_BATCH = 4 };
static const int32_t tb_ids[TB_BATCH * TB_SEQ] = {1, 5, 3, 7, 9, 2, 1, 12, 3, 2, 0, 0,
                                                  1, 4, 4, 8, 3, 2, 1, 6,  2, 0, 0, 0};
static const int32_t tb_labels[TB_BATCH * TB_SEQ] = {
    -100, -100, 6,    -100, 11, -100, -100, -100, 10,   -100, -100, -100,
    -100, 5,    -100, 9,    7,  -100, -100, 6,    -100, -100, -100, -100};

static void tiny_bert(dpt_model_spec *spec, size_t layers, float dropout) {
  dpt_bert_options o;
  dpt_bert_options_default(&o);
  o.vocab = TB_VOCAB;
  o.seq_len = TB_SEQ;
  o.max_positions = TB_SEQ + 2;
  o.layers = layers;
  o.hidden = 8;
  o.heads = 2;
  o.ffn = 12;
  o.dropout = o.attn_dropout = dropout;
  TU_OK(dpt_model_spec_bert(spec, &o));
}

static void tb_upload(dpt_backend *be, dpt_buffer **bx, dpt_buffer **by) {
  TU_OK(dpt_buffer_alloc(be, sizeof tb_ids, bx));
  TU_OK(dpt_buffer_alloc(be, sizeof tb_labels, by));
  TU_OK(dpt_buffer_upload(*bx, 0, tb_ids, sizeof tb_ids));
  TU_OK(dpt_buffer_upload(*by, 0, tb_labels, sizeof tb_labels));
}

START_TEST(gradient_bert) {
  dpt_model_spec spec;
  tiny_bert(&spec, 2, 0.2f);
  dpt_backend *be = tu_cpu();
  dpt_model *m;
  TU_OK(dpt_model_create(be, &spec, TB_BATCH, &m));
  TU_OK(dpt_model_init(m, 3));
  /* Larger weights than BERT's 0.02 so that every path carries a measurable gradient. */
  size_t np = dpt_model_num_params(m);
  float *w = malloc(np * sizeof(float));
  TU_OK(dpt_model_get_params(m, w));
  for (size_t i = 0; i < np; ++i)
    w[i] *= 5.0f;
  TU_OK(dpt_model_set_params(m, w));
  TU_OK(dpt_model_set_step(m, 1, 4, 8));
  dpt_buffer *bx, *by;
  tb_upload(be, &bx, &by);
  gc_check_gradients(m, bx, by, TB_BATCH, 5, 60);
  free(w);
  dpt_buffer_free(bx);
  dpt_buffer_free(by);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
}
END_TEST

/* The planner's fusions (linear bias + GELU, attention's softmax and dropout) change no more than
 * rounding: the gradients of one training step with them and with DPT_FUSE=0 agree within 1e-4 of
 * the largest. */
static void bert_step_grads(float *g, double *loss) {
  dpt_model_spec spec;
  tiny_bert(&spec, 2, 0.2f);
  dpt_backend *be = tu_cpu();
  dpt_model *m;
  TU_OK(dpt_model_create(be, &spec, TB_BATCH, &m));
  TU_OK(dpt_model_init(m, 3));
  TU_OK(dpt_model_set_step(m, 1, 4, 8));
  dpt_buffer *bx, *by;
  tb_upload(be, &bx, &by);
  TU_OK(dpt_model_train_step(m, bx, by, TB_BATCH, 1.0f, loss, NULL));
  TU_OK(dpt_buffer_download(dpt_model_grads(m), 0, g, dpt_model_num_params(m) * sizeof(float)));
  dpt_buffer_free(bx);
  dpt_buffer_free(by);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
}

START_TEST(bert_fused_matches_unfused) {
  enum { MAXP = 1 << 16 };
  float *fused = malloc(MAXP * sizeof(float)), *plain = malloc(MAXP * sizeof(float));
  double lf = 0.0, lp = 0.0;
  bert_step_grads(fused, &lf);
  setenv("DPT_FUSE", "0", 1);
  bert_step_grads(plain, &lp);
  unsetenv("DPT_FUSE");
  dpt_model_spec spec;
  tiny_bert(&spec, 2, 0.2f);
  dpt_backend *be = tu_cpu();
  dpt_model *m;
  TU_OK(dpt_model_create(be, &spec, TB_BATCH, &m));
  const size_t np = dpt_model_num_params(m);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
  ck_assert_uint_le(np, MAXP);
  ck_assert_msg(fabs(lf - lp) <= 1e-5 * fabs(lp), "loss %.9g fused, %.9g not", lf, lp);
  double top = 0.0;
  for (size_t i = 0; i < np; ++i)
    top = fmax(top, fabs(plain[i]));
  for (size_t i = 0; i < np; ++i)
    ck_assert_msg(fabs(fused[i] - plain[i]) <= 1e-4 * top, "grad %zu: %.9g fused, %.9g not", i,
                  (double)fused[i], (double)plain[i]);
  free(fused);
  free(plain);
}
END_TEST

/* The layer hook: forward calls in layer order, backward calls in reverse with ready_from never
 * increasing and 0 after the first layer; the gradients it declares complete are final (the
 * same bytes after the whole backward), also for BERT's decoder tied to the token embedding. */
typedef struct hook_log {
  dpt_model *m;
  size_t calls, next_fwd, next_bwd, last_ready;
  float *seen;   /* [np]: grads[ready_from..] copied as the hook saw them */
  size_t lowest; /* the lowest ready_from seen */
  int order_ok;
} hook_log;

static void log_layer(void *ctx, size_t layer, int backward, size_t ready_from) {
  hook_log *h = ctx;
  const size_t np = dpt_model_num_params(h->m);
  ++h->calls;
  if (!backward) {
    h->order_ok &= layer == h->next_fwd++ && ready_from == np;
    return;
  }
  h->order_ok &= layer == h->next_bwd-- && ready_from <= h->last_ready;
  h->last_ready = ready_from;
  if (ready_from < np)
    TU_OK(dpt_buffer_download(dpt_model_grads(h->m), ready_from * sizeof(float),
                              h->seen + ready_from, (np - ready_from) * sizeof(float)));
  h->lowest = ready_from;
}

static void check_hook(dpt_model *m, size_t nl, const dpt_buffer *bx, const dpt_buffer *by,
                       size_t b) {
  const size_t np = dpt_model_num_params(m);
  hook_log h = {m, 0, 0, nl - 1, np, calloc(np, sizeof(float)), np, 1};
  float *final = malloc(np * sizeof(float));
  TU_OK(dpt_model_set_layer_hook(m, log_layer, &h));
  TU_OK(dpt_model_train_step(m, bx, by, b, 0.25f, NULL, NULL));
  ck_assert_msg(h.order_ok, "hook order");
  ck_assert_uint_eq(h.calls, 2 * nl);
  ck_assert_uint_eq(h.lowest, 0);
  TU_OK(dpt_buffer_download(dpt_model_grads(m), 0, final, np * sizeof(float)));
  ck_assert_int_eq(memcmp(h.seen, final, np * sizeof(float)), 0);
  TU_OK(dpt_model_set_layer_hook(m, NULL, NULL));
  h.calls = 0;
  TU_OK(dpt_model_train_step(m, bx, by, b, 0.25f, NULL, NULL));
  ck_assert_uint_eq(h.calls, 0);
  free(h.seen);
  free(final);
}

START_TEST(layer_hook) {
  dpt_model_spec spec;
  tiny_bert(&spec, 2, 0.0f);
  dpt_backend *be = tu_cpu();
  dpt_model *m;
  TU_OK(dpt_model_create(be, &spec, TB_BATCH, &m));
  TU_OK(dpt_model_init(m, 3));
  ck_assert_str_eq(dpt_model_layer_name(m, 0), "embed.tok");
  ck_assert_ptr_null(dpt_model_layer_name(m, spec.num_layers));
  ck_assert_str_eq(dpt_model_layer_kind_name(m, 0), "embedding");
  ck_assert_ptr_null(dpt_model_layer_kind_name(m, spec.num_layers));
  dpt_buffer *bx, *by;
  tb_upload(be, &bx, &by);
  check_hook(m, spec.num_layers, bx, by, TB_BATCH);
  dpt_buffer_free(bx);
  dpt_buffer_free(by);
  dpt_model_destroy(m);
  mini_resnet(&spec, 0.0f);
  TU_OK(dpt_model_create(be, &spec, 6, &m));
  TU_OK(dpt_model_init(m, 5));
  const size_t in = dpt_model_input_size(m);
  float *x = calloc(6 * in, sizeof(float));
  for (size_t i = 0; i < 6 * in; ++i)
    x[i] = (float)((i * 37) % 11) / 11.0f;
  const int32_t y[6] = {0, 3, 9, 3, 7, 1};
  bx = tu_f32(be, x, 6 * in);
  by = tu_i32(be, y, 6);
  check_hook(m, spec.num_layers, bx, by, 6);
  free(x);
  dpt_buffer_free(bx);
  dpt_buffer_free(by);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
}
END_TEST

/* The encoder's state_dict as BertMLM in tools/pytorch_reference.py has it (the decoder holds
 * only its bias), its JSON description read back field by field, and what bad options get. */
START_TEST(bert_spec) {
  dpt_model_spec spec, back;
  tiny_bert(&spec, 1, 0.1f);
  dpt_backend *be = tu_cpu();
  dpt_model *m;
  TU_OK(dpt_model_create(be, &spec, 2, &m));
  static const char *const names[] = {"embed.tok.weight",
                                      "embed.pos.weight",
                                      "embed.norm.weight",
                                      "embed.norm.bias",
                                      "blocks.0.attn.in_proj_weight",
                                      "blocks.0.attn.in_proj_bias",
                                      "blocks.0.attn.out_proj.weight",
                                      "blocks.0.attn.out_proj.bias",
                                      "blocks.0.norm1.weight",
                                      "blocks.0.norm1.bias",
                                      "blocks.0.ffn1.weight",
                                      "blocks.0.ffn1.bias",
                                      "blocks.0.ffn2.weight",
                                      "blocks.0.ffn2.bias",
                                      "blocks.0.norm2.weight",
                                      "blocks.0.norm2.bias",
                                      "mlm.dense.weight",
                                      "mlm.dense.bias",
                                      "mlm.norm.weight",
                                      "mlm.norm.bias",
                                      "mlm.decoder.bias"};
  ck_assert_uint_eq(dpt_model_num_tensors(m), sizeof names / sizeof names[0]);
  for (size_t t = 0; t < dpt_model_num_tensors(m); ++t) {
    dpt_tensor_info ti;
    TU_OK(dpt_model_tensor(m, t, &ti));
    ck_assert_str_eq(ti.name, names[t]);
  }
  dpt_tensor_info ti;
  TU_OK(dpt_model_tensor(m, 4, &ti));
  ck_assert_int_eq(ti.shape[0], 24);
  ck_assert_int_eq(ti.shape[1], 8);
  ck_assert_uint_eq(dpt_model_labels_per_sample(m), TB_SEQ);
  ck_assert_uint_eq(dpt_model_num_classes(m), TB_VOCAB);
  /* BERT's initialization: weights of deviation 0.02, biases 0, norms 1 */
  float *w = malloc(dpt_model_num_params(m) * sizeof(float));
  TU_OK(dpt_model_init(m, 7));
  TU_OK(dpt_model_get_params(m, w));
  TU_OK(dpt_model_tensor(m, 0, &ti));
  double sq = 0;
  for (size_t j = 0; j < ti.count; ++j)
    sq += (double)w[ti.offset + j] * w[ti.offset + j];
  ck_assert_double_eq_tol(sqrt(sq / (double)ti.count), 0.02, 0.004);
  TU_OK(dpt_model_tensor(m, 5, &ti));
  for (size_t j = 0; j < ti.count; ++j)
    ck_assert_float_eq(w[ti.offset + j], 0.0f);
  free(w);
  char *text = NULL;
  TU_OK(dpt_model_spec_to_json(&spec, &text));
  ck_assert_ptr_nonnull(strstr(text, "\"tokens\":6"));
  ck_assert_ptr_nonnull(strstr(text, "\"tie\":\"embed.tok\""));
  TU_OK(dpt_model_spec_parse_json(text, "bert", &back));
  ck_assert_uint_eq(back.seq_len, spec.seq_len);
  ck_assert_uint_eq(back.num_layers, spec.num_layers);
  for (size_t i = 0; i < spec.num_layers; ++i)
    ck_assert_msg(memcmp(&back.layers[i], &spec.layers[i], sizeof spec.layers[i]) == 0,
                  "layer %zu '%s' differs after the JSON round trip", i, spec.layers[i].name);
  free(text);
  dpt_model_destroy(m);

  dpt_bert_options o;
  dpt_bert_options_default(&o);
  o.vocab = 100;
  o.heads = 3;
  ck_assert_int_eq(dpt_model_spec_bert(&spec, &o), DPT_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(dpt_last_error(), "3 heads do not divide the hidden size 256"));
  o.heads = 4;
  o.max_positions = 64;
  ck_assert_int_eq(dpt_model_spec_bert(&spec, &o), DPT_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(dpt_last_error(), "beyond the position table's 64 positions"));
  /* a token model's layers other than the embedding cannot read the ids */
  tiny_bert(&spec, 1, 0.0f);
  spec.layers[1].num_inputs = 1;
  spec.layers[1].inputs[0] = DPT_LAYER_INPUT_MODEL;
  ck_assert_int_eq(dpt_model_create(be, &spec, 2, &m), DPT_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(dpt_last_error(), "only an embedding layer can"));
  dpt_backend_destroy(be);
}
END_TEST

/* Names, shapes and buffers as PyTorch's state_dict has them; running statistics move in
 * training and not in evaluation. */
START_TEST(bn_buffers) {
  dpt_model_spec spec;
  mini_resnet(&spec, 0.0f);
  dpt_backend *be = tu_cpu();
  dpt_model *m;
  TU_OK(dpt_model_create(be, &spec, 4, &m));
  TU_OK(dpt_model_init(m, 1));
  ck_assert_uint_eq(dpt_model_num_buffers(m), 5 * 3);
  dpt_tensor_info t;
  TU_OK(dpt_model_buffer_info(m, 0, &t));
  ck_assert_str_eq(t.name, "bn1.running_mean");
  TU_OK(dpt_model_buffer_info(m, 2, &t));
  ck_assert_str_eq(t.name, "bn1.num_batches_tracked");
  ck_assert_int_eq(t.ndim, 0);
  TU_OK(dpt_model_tensor(m, 0, &t));
  ck_assert_str_eq(t.name, "conv1.weight"); /* no bias: conv1.bias does not exist */
  TU_OK(dpt_model_tensor(m, 1, &t));
  ck_assert_str_eq(t.name, "bn1.weight");
  size_t n = dpt_model_state_size(m), np = dpt_model_num_params(m);
  ck_assert_uint_eq(n, np + dpt_model_num_buffer_floats(m));
  ck_assert_uint_gt(dpt_model_activation_bytes(m), 0);
  float *s0 = malloc(n * sizeof(float)), *s1 = malloc(n * sizeof(float));
  TU_OK(dpt_model_get_state(m, s0));
  ck_assert(s0[np] == 0.0f && s0[np + 4] == 1.0f && s0[np + 8] == 0.0f); /* mean, var, count */
  dpt_dataset *ds = make_data(4, 3);
  float x[4 * 64];
  int32_t y[4];
  uint64_t idx[4] = {0, 1, 2, 3};
  TU_OK(dpt_dataset_gather(ds, idx, 4, x, y));
  dpt_buffer *bx, *by;
  TU_OK(dpt_buffer_alloc(be, sizeof x, &bx));
  TU_OK(dpt_buffer_alloc(be, sizeof y, &by));
  TU_OK(dpt_buffer_upload(bx, 0, x, sizeof x));
  TU_OK(dpt_buffer_upload(by, 0, y, sizeof y));
  TU_OK(dpt_model_evaluate(m, bx, by, 4, NULL, NULL));
  TU_OK(dpt_model_get_state(m, s1));
  ck_assert(memcmp(s0, s1, n * sizeof(float)) == 0);
  TU_OK(dpt_model_train_step(m, bx, by, 4, 0.25f, NULL, NULL));
  TU_OK(dpt_model_get_state(m, s1));
  ck_assert(s1[np + 8] == 1.0f);                   /* one batch tracked */
  ck_assert(s1[np] != 0.0f && s1[np + 4] != 1.0f); /* mean and var moved */
  free(s0);
  free(s1);
  dpt_buffer_free(bx);
  dpt_buffer_free(by);
  dpt_dataset_destroy(ds);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
}
END_TEST

/* ---- model files --------------------------------------------------------------------------- */

static char tmpdir[64];

static const char *write_file(const char *name, const char *text) {
  static char path[128];
  snprintf(path, sizeof path, "%s/%s", tmpdir, name);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
  return path;
}

static void setup_tmp(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/dpt_model_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown_tmp(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  ck_assert_int_eq(system(cmd), 0);
}

/* The file form of a small residual block, layers out of order on purpose. */
static const char *block_json =
    "{\"input\": [1, 8, 8], \"classes\": 10, \"layers\": [\n"
    "  {\"name\": \"conv1\", \"kind\": \"conv2d\", \"out\": 4, \"kernel\": 3, \"padding\": 1,\n"
    "   \"bias\": false},\n"
    "  {\"name\": \"bn1\", \"kind\": \"batchnorm2d\"},\n"
    "  {\"name\": \"relu\", \"kind\": \"relu\"},\n"
    "  {\"name\": \"sum\", \"kind\": \"add\", \"inputs\": [\"bn2\", \"relu\"]},\n"
    "  {\"name\": \"conv2\", \"kind\": \"conv2d\", \"out\": 4, \"kernel\": 3, \"padding\": 1,\n"
    "   \"bias\": false, \"inputs\": \"relu\"},\n"
    "  {\"name\": \"bn2\", \"kind\": \"batchnorm2d\"},\n"
    "  {\"name\": \"gap\", \"kind\": \"global_avgpool\", \"inputs\": \"sum\"},\n"
    "  {\"name\": \"flat\", \"kind\": \"flatten\"},\n"
    "  {\"name\": \"drop\", \"kind\": \"dropout\", \"p\": 0.5},\n"
    "  {\"name\": \"fc\", \"kind\": \"linear\", \"out\": \"classes\"}]}\n";

START_TEST(model_file) {
  dpt_model_spec spec;
  TU_OK(dpt_model_spec_load_json(write_file("ok.json", block_json), 1, 8, 8, 10, &spec));
  ck_assert_uint_eq(spec.num_layers, 10);
  /* Ordered so each layer follows its inputs: conv2 and bn2 come before the sum. */
  ck_assert_str_eq(spec.layers[3].name, "conv2");
  ck_assert_str_eq(spec.layers[4].name, "bn2");
  ck_assert_str_eq(spec.layers[5].name, "sum");
  ck_assert_int_eq(spec.layers[5].inputs[0], 4);
  ck_assert_int_eq(spec.layers[5].inputs[1], 2);
  ck_assert_uint_eq(spec.layers[9].size, 10);
  ck_assert(spec.layers[8].p == 0.5f);
  ck_assert_int_eq(spec.layers[0].no_bias, 1);
  dpt_backend *be = tu_cpu();
  dpt_model *m;
  TU_OK(dpt_model_create(be, &spec, 2, &m));
  ck_assert_uint_eq(dpt_model_num_params(m), 4 * 9 + 8 + 4 * 36 + 8 + 40 + 10);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
}
END_TEST

/* layernorm and gelu in a file: their options, PyTorch's names and shapes (over a vector's
 * features, over an image's width), eps's default. */
START_TEST(model_file_layernorm_gelu) {
  dpt_model_spec spec;
  const char *text = "{\"layers\": [\n"
                     "  {\"name\": \"ln_img\", \"kind\": \"layernorm\"},\n"
                     "  {\"name\": \"act\", \"kind\": \"gelu\", \"approximate\": \"tanh\"},\n"
                     "  {\"name\": \"flat\", \"kind\": \"flatten\"},\n"
                     "  {\"name\": \"fc1\", \"kind\": \"linear\", \"out\": 12},\n"
                     "  {\"name\": \"ln\", \"kind\": \"layernorm\", \"eps\": 1e-12},\n"
                     "  {\"name\": \"act2\", \"kind\": \"gelu\", \"approximate\": \"none\"},\n"
                     "  {\"name\": \"fc\", \"kind\": \"linear\", \"out\": \"classes\"}]}\n";
  TU_OK(dpt_model_spec_load_json(write_file("ln.json", text), 1, 8, 8, 10, &spec));
  ck_assert_int_eq(spec.layers[0].kind, DPT_LAYER_LAYERNORM);
  ck_assert(spec.layers[0].eps == 0.0f); /* the default, 1e-5, applies at creation */
  ck_assert_int_eq(spec.layers[1].approximate, DPT_GELU_TANH);
  ck_assert(spec.layers[4].eps == 1e-12f);
  ck_assert_int_eq(spec.layers[5].approximate, DPT_GELU_ERF);
  dpt_backend *be = tu_cpu();
  dpt_model *m;
  TU_OK(dpt_model_create(be, &spec, 2, &m));
  const char *names[] = {"ln_img.weight", "ln_img.bias", "fc1.weight", "fc1.bias",
                         "ln.weight",     "ln.bias",     "fc.weight",  "fc.bias"};
  const int64_t dims[] = {8, 8, 12, 12, 12, 12, 10, 10};
  ck_assert_uint_eq(dpt_model_num_tensors(m), 8);
  for (size_t t = 0; t < 8; ++t) {
    dpt_tensor_info ti;
    TU_OK(dpt_model_tensor(m, t, &ti));
    ck_assert_str_eq(ti.name, names[t]);
    ck_assert_int_eq(ti.shape[0], dims[t]);
  }
  dpt_model_destroy(m);
  /* Bad values through the C API name the layer too. */
  spec.layers[4].eps = -1.0f;
  EXPECT_FAIL(dpt_model_create(be, &spec, 2, &m), DPT_ERR_INVALID_ARG, "'ln' (layernorm)", "eps",
              NULL);
  spec.layers[4].eps = 0.0f;
  spec.layers[5].approximate = 2;
  EXPECT_FAIL(dpt_model_create(be, &spec, 2, &m), DPT_ERR_INVALID_ARG, "'act2' (gelu)",
              "approximate 2", NULL);
  dpt_backend_destroy(be);
}
END_TEST

/* One model file each: the load (or the model's creation) fails with one message naming the
 * problem. */
static void expect_bad_file(const char *text, dpt_status want, const char *n1, const char *n2) {
  dpt_model_spec spec;
  dpt_status st = dpt_model_spec_load_json(write_file("bad.json", text), 1, 8, 8, 10, &spec);
  if (st == DPT_OK) {
    dpt_backend *be = tu_cpu();
    dpt_model *m = NULL;
    st = dpt_model_create(be, &spec, 2, &m);
    ck_assert_ptr_null(m);
    dpt_backend_destroy(be);
  }
  ck_assert_msg(st == want, "%s: got %s (%s)", text, dpt_status_name(st), dpt_last_error());
  ck_assert_msg(strstr(dpt_last_error(), n1), "'%s' lacks '%s'", dpt_last_error(), n1);
  ck_assert_msg(!n2 || strstr(dpt_last_error(), n2), "'%s' lacks '%s'", dpt_last_error(), n2);
}

START_TEST(model_file_bad_input) {
  const dpt_status BAD = DPT_ERR_BAD_FORMAT, ARG = DPT_ERR_INVALID_ARG;
  expect_bad_file("{\"layers\": [{\"kind\": \"linear\", \"out\": 10}", BAD, "line 1", "column");
  expect_bad_file("{\"layers\": [], \"layers\": []}", BAD, "duplicate", NULL);
  expect_bad_file("{\"layers\": [{\"name\": \"a\", \"kind\": \"relu\", \"inputs\": \"b\"},"
                  "{\"name\": \"b\", \"kind\": \"relu\", \"inputs\": \"a\"},"
                  "{\"kind\": \"linear\", \"out\": 10}]}",
                  BAD, "cycle", "'a'");
  expect_bad_file("{\"layers\": [{\"kind\": \"conv3d\"}]}", BAD, "conv3d", "layer 0");
  expect_bad_file("{\"layers\": [{\"kind\": \"add\", \"inputs\": [\"input\", \"nope\"]}]}", BAD,
                  "'nope'", NULL);
  expect_bad_file("{\"layers\": [{\"kind\": \"linear\", \"outs\": 10}]}", BAD, "\"outs\"", NULL);
  expect_bad_file("{\"layers\": [{\"name\": \"x\", \"kind\": \"relu\"},"
                  "{\"name\": \"x\", \"kind\": \"linear\", \"out\": 10}]}",
                  BAD, "both called 'x'", NULL);
  expect_bad_file("{\"input\": [3, 8, 8], \"layers\": [{\"kind\": \"linear\", \"out\": 10}]}", BAD,
                  "[1, 8, 8]", NULL);
  expect_bad_file(
      "{\"layers\": [{\"name\": \"c\", \"kind\": \"conv2d\", \"out\": 2, \"kernel\": 3},"
      "{\"name\": \"s\", \"kind\": \"add\", \"inputs\": [\"c\", \"input\"]},"
      "{\"kind\": \"linear\", \"out\": 10}]}",
      ARG, "'s' (add)", "2 x 6 x 6 and 1 x 8 x 8");
  expect_bad_file("{\"layers\": [{\"name\": \"h\", \"kind\": \"linear\", \"out\": 0},"
                  "{\"kind\": \"linear\", \"out\": 10}]}",
                  ARG, "'h' (linear)", "size 0");
  expect_bad_file("{\"layers\": [{\"kind\": \"linear\", \"out\": 4611686018427387904},"
                  "{\"kind\": \"linear\", \"out\": 10}]}",
                  ARG, "too large", NULL);
  expect_bad_file("{\"layers\": [{\"name\": \"b\", \"kind\": \"batchnorm1d\"},"
                  "{\"kind\": \"linear\", \"out\": 10}]}",
                  ARG, "'b' (batchnorm1d)", "feature vector");
  expect_bad_file("{\"layers\": [{\"name\": \"unused\", \"kind\": \"relu\"},"
                  "{\"kind\": \"linear\", \"out\": 10, \"inputs\": \"input\"}]}",
                  ARG, "'unused'", "no layer uses");
  expect_bad_file("{\"layers\": [{\"kind\": \"linear\", \"out\": 4},"
                  "{\"name\": \"0\", \"kind\": \"linear\", \"out\": 10}]}",
                  ARG, "two tensors are named '0.weight'", NULL);
  expect_bad_file("{\"layers\": [{\"name\": \"n\", \"kind\": \"layernorm\", \"eps\": -1},"
                  "{\"kind\": \"linear\", \"out\": 10}]}",
                  BAD, "'n'", "\"eps\"");
  expect_bad_file("{\"layers\": [{\"name\": \"n\", \"kind\": \"layernorm\", \"eps\": \"small\"},"
                  "{\"kind\": \"linear\", \"out\": 10}]}",
                  BAD, "'n'", "\"eps\"");
  expect_bad_file("{\"layers\": [{\"name\": \"g\", \"kind\": \"gelu\", \"approximate\": \"erf\"},"
                  "{\"kind\": \"linear\", \"out\": 10}]}",
                  BAD, "'g'", "\"approximate\"");
  dpt_model_spec spec;
  EXPECT_FAIL(dpt_model_spec_load_json("/nonexistent/m.json", 1, 8, 8, 10, &spec), DPT_ERR_IO,
              "/nonexistent/m.json", NULL, NULL);
}
END_TEST

/* ---- weights files ------------------------------------------------------------------------- */

/* Loading is strict about buffers too: a missing or misshaped running statistic is refused,
 * naming it. */
START_TEST(weights_buffers_strict) {
  dpt_model_spec spec;
  mini_resnet(&spec, 0.0f);
  dpt_backend *be = tu_cpu();
  dpt_model *m;
  TU_OK(dpt_model_create(be, &spec, 2, &m));
  TU_OK(dpt_model_init(m, 9));
  char path[128];
  snprintf(path, sizeof path, "%s/w.safetensors", tmpdir);
  TU_OK(dpt_model_save(m, path));
  TU_OK(dpt_model_load(m, path));
  /* The same tensors, without bn1.running_var, then with it misshaped. */
  size_t nt = dpt_model_num_tensors(m), nb = dpt_model_num_buffers(m);
  size_t np = dpt_model_num_params(m), n = dpt_model_state_size(m);
  float *state = malloc(n * sizeof(float));
  TU_OK(dpt_model_get_state(m, state));
  dpt_st_tensor *ts = calloc(nt + nb, sizeof *ts);
  for (size_t i = 0; i < nt + nb; ++i) {
    dpt_tensor_info t;
    TU_OK(i < nt ? dpt_model_tensor(m, i, &t) : dpt_model_buffer_info(m, i - nt, &t));
    ts[i].name = t.name;
    ts[i].data = state + t.offset + (i < nt ? 0 : np);
    ts[i].ndim = t.ndim;
    for (int d = 0; d < t.ndim; ++d)
      ts[i].shape[d] = t.shape[d];
  }
  size_t rv = nt + 1; /* bn1.running_var */
  ck_assert_str_eq(ts[rv].name, "bn1.running_var");
  dpt_st_tensor keep = ts[rv];
  ts[rv] = ts[nt + nb - 1];
  TU_OK(dpt_safetensors_write(path, ts, nt + nb - 1, NULL));
  EXPECT_FAIL(dpt_model_load(m, path), DPT_ERR_BAD_FORMAT, "bn1.running_var", NULL, NULL);
  ts[rv] = keep;
  ts[rv].shape[0] = 3;
  TU_OK(dpt_safetensors_write(path, ts, nt + nb, NULL));
  EXPECT_FAIL(dpt_model_load(m, path), DPT_ERR_BAD_FORMAT, "bn1.running_var", "[3]", "[4]");
  free(ts);
  free(state);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
}
END_TEST

/* ---- batch norm under data parallelism ----------------------------------------------------- */

static void bn_config(dpt_train_config *cfg, dpt_dataset *train, int sync_bn) {
  dpt_train_config_default(cfg);
  mini_resnet(&cfg->model, 0.2f);
  cfg->data.train = train;
  cfg->schedule.global_batch = 24;
  cfg->schedule.epochs = 100;
  cfg->schedule.max_steps = 20;
  cfg->schedule.seed = 7;
  cfg->checks.check_every = 5;
  cfg->exchange.sync_bn = sync_bn;
  cfg->optim.lr = 0.05f;
}

/* Also used outside Check (the MPI mode): no ck_assert. */
static size_t state_size(const dpt_model_spec *spec, dpt_model **keep, dpt_backend **be) {
  if (dpt_backend_create(DPT_BACKEND_CPU, 0, be) != DPT_OK ||
      dpt_model_create(*be, spec, 1, keep) != DPT_OK) {
    fprintf(stderr, "state_size: %s\n", dpt_last_error());
    exit(1);
  }
  return dpt_model_state_size(*keep);
}

/* The largest per-tensor relative difference |a - b| / |b| (norms over the tensor), over the
 * parameters and the buffers. */
static double worst_tensor(const dpt_model *m, const float *a, const float *b) {
  double worst = 0;
  size_t nt = dpt_model_num_tensors(m), nb = dpt_model_num_buffers(m);
  for (size_t i = 0; i < nt + nb; ++i) {
    dpt_tensor_info t;
    if (i < nt)
      dpt_model_tensor(m, i, &t);
    else
      dpt_model_buffer_info(m, i - nt, &t);
    size_t off = t.offset + (i < nt ? 0 : dpt_model_num_params(m));
    double num = 0, den = 0;
    for (size_t j = 0; j < t.count; ++j) {
      double d = (double)a[off + j] - (double)b[off + j];
      num += d * d;
      den += (double)b[off + j] * (double)b[off + j];
    }
    double rel = sqrt(num) / (den > 0 ? sqrt(den) : 1.0);
    if (rel > worst) worst = rel;
  }
  return worst;
}

static float *train_state(dpt_train_config cfg, int replicas, size_t n) {
  float *out = malloc(n * sizeof(float));
  cfg.devices.replicas = replicas;
  cfg.final_params = out;
  dpt_train_report rep;
  dpt_status st = dpt_train(&cfg, NULL, &rep);
  ck_assert_msg(st == DPT_OK, "%d replicas: %s", replicas, dpt_last_error());
  ck_assert_int_eq(rep.steps, 20);
  return out;
}

START_TEST(sync_bn_equivalence) {
  dpt_dataset *ds = make_data(240, 5);
  dpt_train_config cfg;
  bn_config(&cfg, ds, 1);
  dpt_backend *be;
  dpt_model *m;
  size_t n = state_size(&cfg.model, &m, &be);
  float *ref = train_state(cfg, 1, n);
  for (int r = 2; r <= 4; ++r) {
    float *got = train_state(cfg, r, n);
    double d = worst_tensor(m, got, ref);
    ck_assert_msg(d <= 1e-4, "sync-bn, %d replicas: a tensor differs from one replica by %g", r, d);
    free(got);
  }
  /* Without sync-bn each replica normalizes over its own 12 samples: another model. */
  cfg.exchange.sync_bn = 0;
  float *own = train_state(cfg, 2, n);
  double d = worst_tensor(m, own, ref);
  ck_assert_msg(d > 1e-3, "per-replica batch norm matches one replica (%g): the test is blind", d);
  free(own);
  free(ref);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
  dpt_dataset_destroy(ds);
}
END_TEST

/* A skipped step leaves batch norm's running statistics as they were: the first step's huge
 * learning rate makes every later forward pass overflow, those steps are skipped, and the run
 * still ends with finite buffers (the drift check would stop it on a non-finite one). */
START_TEST(skipped_step_keeps_buffers) {
  dpt_dataset *ds = make_data(240, 5);
  dpt_train_config cfg;
  bn_config(&cfg, ds, 0);
  cfg.optim.lr = 1e30f;
  cfg.optim.momentum = 0.0f;
  cfg.checks.on_nonfinite = DPT_NONFINITE_SKIP;
  cfg.checks.max_skipped = -1;
  cfg.schedule.max_steps = 4;
  dpt_backend *be;
  dpt_model *m;
  size_t n = state_size(&cfg.model, &m, &be);
  float *state = malloc(n * sizeof(float));
  cfg.final_params = state;
  dpt_train_report rep;
  TU_OK(dpt_train(&cfg, NULL, &rep));
  ck_assert_int_eq(rep.steps, 4);
  ck_assert_int_ge(rep.skipped_steps, 2);
  for (size_t i = dpt_model_num_params(m); i < n; ++i)
    ck_assert_msg(isfinite(state[i]), "buffer float %zu is %g", i, (double)state[i]);
  free(state);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
  dpt_dataset_destroy(ds);
}
END_TEST

/* Sync-bn needs every replica in every step: a kept last batch smaller than the replica count
 * is refused before training. */
START_TEST(sync_bn_small_last_batch) {
  dpt_dataset *ds = make_data(49, 5);
  dpt_train_config cfg;
  bn_config(&cfg, ds, 1);
  cfg.schedule.keep_last = 1;
  cfg.devices.replicas = 2; /* 49 = 2 * 24 + 1 */
  EXPECT_FAIL(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG, "sync-bn", "1 samples", NULL);
  dpt_dataset_destroy(ds);
}
END_TEST

/* GPU backends train the graph like the CPU: 2 replicas with sync-bn and dropout, 20 steps,
 * every tensor within 1e-4 of one CPU replica (their float sums round differently). */
static dpt_backend_kind device_kind = DPT_BACKEND_CPU;

START_TEST(device_matches_cpu) {
  if (!tu_device_present(device_kind)) {
    printf("%s: no device, nothing to compare\n", dpt_backend_kind_name(device_kind));
    return;
  }
  dpt_dataset *ds = make_data(240, 5);
  dpt_train_config cfg;
  bn_config(&cfg, ds, 1);
  dpt_backend *be;
  dpt_model *m;
  size_t n = state_size(&cfg.model, &m, &be);
  float *ref = train_state(cfg, 1, n);
  cfg.devices.backend = device_kind;
  float *got = train_state(cfg, 2, n);
  double d = worst_tensor(m, got, ref);
  printf("%s, 2 replicas, sync-bn: worst tensor differs from one CPU replica by %.3g\n",
         dpt_backend_kind_name(device_kind), d);
  ck_assert_msg(d <= 1e-4, "%s: a tensor differs from the CPU by %g",
                dpt_backend_kind_name(device_kind), d);
  free(got);
  free(ref);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
  dpt_dataset_destroy(ds);
}
END_TEST

/* One training step of the tiny BERT (dropout on) on the device against the CPU from the same
 * parameters: the loss, the correct count and every tensor's gradient. */
START_TEST(bert_device_matches_cpu) {
  if (!tu_device_present(device_kind)) {
    printf("%s: no device, nothing to compare\n", dpt_backend_kind_name(device_kind));
    return;
  }
  dpt_model_spec spec;
  tiny_bert(&spec, 2, 0.2f);
  dpt_backend *be[2];
  dpt_model *m[2];
  TU_OK(dpt_backend_create(DPT_BACKEND_CPU, 0, &be[0]));
  TU_OK(dpt_backend_create(device_kind, 0, &be[1]));
  double loss[2];
  int64_t correct[2];
  size_t np = 0;
  float *g[2], *w = NULL;
  for (int k = 0; k < 2; ++k) {
    TU_OK(dpt_model_create(be[k], &spec, TB_BATCH, &m[k]));
    np = dpt_model_num_params(m[k]);
    if (k == 0) {
      TU_OK(dpt_model_init(m[0], 11));
      w = malloc(np * sizeof(float));
      TU_OK(dpt_model_get_params(m[0], w));
      for (size_t i = 0; i < np; ++i)
        w[i] *= 5.0f; /* as in gradient_bert: logits far from uniform */
    }
    TU_OK(dpt_model_set_params(m[k], w));
    TU_OK(dpt_model_set_step(m[k], 9, 3, 5));
    dpt_buffer *bx, *by;
    tb_upload(be[k], &bx, &by);
    TU_OK(dpt_model_train_step(m[k], bx, by, TB_BATCH, 0.1f, &loss[k], &correct[k]));
    g[k] = malloc(np * sizeof(float));
    TU_OK(dpt_buffer_download(dpt_model_grads(m[k]), 0, g[k], np * sizeof(float)));
    dpt_buffer_free(bx);
    dpt_buffer_free(by);
  }
  double d = worst_tensor(m[0], g[1], g[0]);
  printf("%s, tiny BERT: loss %.6f against %.6f, worst gradient tensor differs by %.3g\n",
         dpt_backend_kind_name(device_kind), loss[1], loss[0], d);
  ck_assert_double_eq_tol(loss[1], loss[0], 1e-5 * fabs(loss[0]));
  ck_assert_int_eq(correct[1], correct[0]);
  ck_assert_msg(d <= 1e-4, "a gradient tensor differs from the CPU's by %g", d);
  for (int k = 0; k < 2; ++k) {
    free(g[k]);
    dpt_model_destroy(m[k]);
    dpt_backend_destroy(be[k]);
  }
  free(w);
}
END_TEST

/* ---- MPI mode ------------------------------------------------------------------------------ */

static int mpi_main(void) {
  dpt_comm *comm = NULL;
  dpt_status st = dpt_comm_create_mpi(NULL, &comm);
  if (st == DPT_ERR_UNSUPPORTED) return 77;
  if (st != DPT_OK) {
    fprintf(stderr, "dpt_comm_create_mpi: %s\n", dpt_last_error());
    return 1;
  }
  int rank = dpt_comm_rank(comm), failures = 0;
  dpt_dataset *ds = make_data(240, 5);
  dpt_train_config cfg;
  bn_config(&cfg, ds, 1);
  dpt_backend *be;
  dpt_model *m;
  size_t n = state_size(&cfg.model, &m, &be);
  float *got = malloc(n * sizeof(float)), *ref = malloc(n * sizeof(float));
  cfg.final_params = got;
  if (dpt_train(&cfg, comm, NULL) != DPT_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, dpt_last_error());
    ++failures;
  }
  cfg.final_params = ref;
  if (dpt_train(&cfg, NULL, NULL) != DPT_OK) ++failures;
  if (rank == 0 && !failures) {
    double d = worst_tensor(m, got, ref);
    printf("sync-bn over %d ranks: worst tensor differs from one replica by %.3g\n",
           dpt_comm_size(comm), d);
    failures += !(d <= 1e-4);
  }
  free(got);
  free(ref);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
  dpt_dataset_destroy(ds);
  dpt_comm_destroy(comm);
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "mpi") == 0) return mpi_main();
  if (argc > 2 && strcmp(argv[1], "backend") == 0) {
    if (dpt_backend_kind_parse(argv[2], &device_kind) != DPT_OK) return 2;
    Suite *s = suite_create("model_device");
    TCase *tc = tcase_create("device");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, device_matches_cpu);
    tcase_add_test(tc, bert_device_matches_cpu);
    suite_add_tcase(s, tc);
    return tu_run(s);
  }
  Suite *s = suite_create("model");
  TCase *graph = tcase_create("graph");
  tcase_set_timeout(graph, 120);
  tcase_add_test(graph, gradient_graph);
  tcase_add_test(graph, fusion_matches_unfused);
  tcase_add_test(graph, gradient_bert);
  tcase_add_test(graph, bert_fused_matches_unfused);
  tcase_add_test(graph, layer_hook);
  tcase_add_test(graph, bert_spec);
  tcase_add_test(graph, bn_buffers);
  suite_add_tcase(s, graph);
  TCase *files = tcase_create("files");
  tcase_add_checked_fixture(files, setup_tmp, teardown_tmp);
  tcase_add_test(files, model_file);
  tcase_add_test(files, model_file_layernorm_gelu);
  tcase_add_test(files, model_file_bad_input);
  tcase_add_test(files, weights_buffers_strict);
  suite_add_tcase(s, files);
  TCase *dp = tcase_create("data_parallel");
  tcase_set_timeout(dp, 300);
  tcase_add_test(dp, sync_bn_equivalence);
  tcase_add_test(dp, sync_bn_small_last_batch);
  tcase_add_test(dp, skipped_step_keeps_buffers);
  suite_add_tcase(s, dp);
  return tu_run(s);
}
