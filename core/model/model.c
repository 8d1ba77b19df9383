/* Models as layer graphs: the specs (builder, MLP, CNN, ResNet), planning (shapes, tensors,
 * buffers), activation memory, parameters and initialization. Each kind's own rules are in its
 * family's file under core/model/layers/ (reached through core/model/layer.h's table); forward
 * and backward are in core/model/model_exec.c, weight files in core/model/model_io.c, model
 * files in core/model/model_json.c.
 *
 * Layouts follow PyTorch so weights move between the two unchanged: activations are NCHW
 * ([batch, c, h, w]) and a linear layer computes y = x W^T + b with W [out, in]. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/size.h"
#include "core/model/fuse.h"
#include "core/model/layer.h"
#include "core/model/layer_util.h"
#include "core/model/model_impl.h"

/* ---- specs -------------------------------------------------------------------------------- */

dpt_status dpt_model_spec_init(dpt_model_spec *spec, size_t c, size_t h, size_t w,
                               size_t num_classes) {
  if (!spec) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_spec_init: spec is NULL");
  memset(spec, 0, sizeof *spec);
  spec->in_c = c;
  spec->in_h = h;
  spec->in_w = w;
  spec->num_classes = num_classes;
  return DPT_OK;
}

dpt_status dpt_model_spec_add(dpt_model_spec *spec, const dpt_layer_spec *layer, int *index) {
  const char *fn = "dpt_model_spec_add";
  if (!spec || !layer) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: spec/layer is NULL", fn);
  if (spec->num_layers >= DPT_MODEL_MAX_LAYERS)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: the model already has %d layers, the most", fn,
                         DPT_MODEL_MAX_LAYERS);
  if (!dpt_layer_kind_name(layer->kind))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: unknown layer kind %d", fn, (int)layer->kind);
  if (memchr(layer->name, '\0', sizeof layer->name) == NULL)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: the layer name is not NUL-terminated", fn);
  if (layer->num_inputs < 0 || layer->num_inputs > DPT_LAYER_MAX_INPUTS)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: layer '%s' has %d inputs", fn, layer->name,
                         layer->num_inputs);
  for (int j = 0; j < layer->num_inputs; ++j)
    if (layer->inputs[j] < DPT_LAYER_INPUT_MODEL || layer->inputs[j] >= (int)spec->num_layers)
      return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: layer '%s' input %d is not an earlier layer",
                           fn, layer->name, layer->inputs[j]);
  if (index) *index = (int)spec->num_layers;
  spec->layers[spec->num_layers++] = *layer;
  return DPT_OK;
}

dpt_status dpt_model_spec_mlp(dpt_model_spec *spec, size_t c, size_t h, size_t w,
                              const size_t *hidden, size_t num_hidden, size_t num_classes) {
  if (!spec) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_spec_mlp: spec is NULL");
  if (num_hidden > 0 && !hidden)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_spec_mlp: hidden is NULL");
  if (2 + 2 * num_hidden > DPT_MODEL_MAX_LAYERS)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_spec_mlp: %zu hidden layers is too many",
                         num_hidden);
  DPT_TRY(dpt_model_spec_init(spec, c, h, w, num_classes));
  spec->layers[spec->num_layers++].kind = DPT_LAYER_FLATTEN;
  for (size_t i = 0; i < num_hidden; ++i) {
    spec->layers[spec->num_layers].kind = DPT_LAYER_LINEAR;
    spec->layers[spec->num_layers++].size = hidden[i];
    spec->layers[spec->num_layers++].kind = DPT_LAYER_RELU;
  }
  spec->layers[spec->num_layers].kind = DPT_LAYER_LINEAR;
  spec->layers[spec->num_layers++].size = num_classes;
  return DPT_OK;
}

dpt_status dpt_model_spec_cnn(dpt_model_spec *spec, size_t c, size_t h, size_t w, size_t c1,
                              size_t c2, size_t num_classes) {
  if (!spec) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_spec_cnn: spec is NULL");
  DPT_TRY(dpt_model_spec_init(spec, c, h, w, num_classes));
  const size_t channels[2] = {c1, c2};
  for (int b = 0; b < 2; ++b) {
    dpt_layer_spec conv = {
        .kind = DPT_LAYER_CONV2D, .size = channels[b], .kernel = 3, .stride = 1, .padding = 1};
    dpt_layer_spec relu = {.kind = DPT_LAYER_RELU};
    dpt_layer_spec pool = {.kind = DPT_LAYER_MAXPOOL, .kernel = 2, .stride = 2};
    spec->layers[spec->num_layers++] = conv;
    spec->layers[spec->num_layers++] = relu;
    spec->layers[spec->num_layers++] = pool;
  }
  spec->layers[spec->num_layers++].kind = DPT_LAYER_FLATTEN;
  spec->layers[spec->num_layers].kind = DPT_LAYER_LINEAR;
  spec->layers[spec->num_layers++].size = num_classes;
  return DPT_OK;
}

/* Appends a layer named printf-style, taking inputs in[0..n) (n 0: the layer before); the
 * ready-made specs (ResNet, BERT, DLRM) build with it. */
static int add_named(dpt_model_spec *s, dpt_layer_spec l, int n, int in0, int in1, const char *fmt,
                     ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(l.name, sizeof l.name, fmt, ap);
  va_end(ap);
  l.num_inputs = n;
  l.inputs[0] = in0;
  l.inputs[1] = in1;
  s->layers[s->num_layers] = l;
  return (int)s->num_layers++;
}

/* conv (no bias) + batch norm named <prefix>conv<k>/bn<k>, or shortcut.0/.1 when k is 0. */
static int resnet_conv_bn(dpt_model_spec *s, const char *prefix, int k, int in, size_t out,
                          size_t kernel, size_t stride) {
  dpt_layer_spec conv = {.kind = DPT_LAYER_CONV2D,
                         .size = out,
                         .kernel = kernel,
                         .stride = stride,
                         .padding = kernel / 2,
                         .no_bias = 1};
  dpt_layer_spec bn = {.kind = DPT_LAYER_BATCHNORM2D};
  if (k == 0) {
    add_named(s, conv, 1, in, 0, "%sshortcut.0", prefix);
    return add_named(s, bn, 0, 0, 0, "%sshortcut.1", prefix);
  }
  add_named(s, conv, 1, in, 0, "%sconv%d", prefix, k);
  return add_named(s, bn, 0, 0, 0, "%sbn%d", prefix, k);
}

/* One basic block: conv-bn-relu-conv-bn, plus the input (or its projection), then relu. */
static int resnet_block(dpt_model_spec *s, int stage, int block, int in, size_t in_c, size_t out,
                        size_t stride) {
  char prefix[32];
  snprintf(prefix, sizeof prefix, "layer%d.%d.", stage, block);
  dpt_layer_spec relu = {.kind = DPT_LAYER_RELU}, add = {.kind = DPT_LAYER_ADD};
  resnet_conv_bn(s, prefix, 1, in, out, 3, stride);
  int r1 = add_named(s, relu, 0, 0, 0, "%srelu1", prefix);
  int main_path = resnet_conv_bn(s, prefix, 2, r1, out, 3, 1);
  int shortcut = in;
  if (stride != 1 || in_c != out) shortcut = resnet_conv_bn(s, prefix, 0, in, out, 1, stride);
  add_named(s, add, 2, main_path, shortcut, "%sadd", prefix);
  return add_named(s, relu, 0, 0, 0, "%srelu2", prefix);
}

dpt_status dpt_model_spec_resnet(dpt_model_spec *spec, size_t c, size_t h, size_t w, size_t depth,
                                 size_t num_classes) {
  const char *fn = "dpt_model_spec_resnet";
  if (!spec) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: spec is NULL", fn);
  if (depth < 8 || (depth - 2) % 6 != 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: depth %zu is not 6n+2 with n >= 1 (20, 32, 44, "
                         "56, 110)",
                         fn, depth);
  size_t n = (depth - 2) / 6;
  if (6 + 3 * (8 * n) > DPT_MODEL_MAX_LAYERS)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: depth %zu needs more than %d layers", fn, depth,
                         DPT_MODEL_MAX_LAYERS);
  DPT_TRY(dpt_model_spec_init(spec, c, h, w, num_classes));
  dpt_layer_spec conv = {
      .kind = DPT_LAYER_CONV2D, .size = 16, .kernel = 3, .stride = 1, .padding = 1, .no_bias = 1};
  dpt_layer_spec bn = {.kind = DPT_LAYER_BATCHNORM2D}, relu = {.kind = DPT_LAYER_RELU};
  dpt_layer_spec gap = {.kind = DPT_LAYER_GLOBAL_AVGPOOL}, flat = {.kind = DPT_LAYER_FLATTEN};
  dpt_layer_spec fc = {.kind = DPT_LAYER_LINEAR, .size = num_classes};
  add_named(spec, conv, 0, 0, 0, "conv1");
  add_named(spec, bn, 0, 0, 0, "bn1");
  int x = add_named(spec, relu, 0, 0, 0, "relu");
  size_t width = 16;
  for (int stage = 1; stage <= 3; ++stage) {
    size_t out = (size_t)16 << (stage - 1);
    for (size_t b = 0; b < n; ++b) {
      size_t stride = stage > 1 && b == 0 ? 2 : 1;
      x = resnet_block(spec, stage, (int)b, x, width, out, stride);
      width = out;
    }
  }
  add_named(spec, gap, 0, 0, 0, "avgpool");
  add_named(spec, flat, 0, 0, 0, "flatten");
  add_named(spec, fc, 0, 0, 0, "fc");
  return DPT_OK;
}

void dpt_bert_options_default(dpt_bert_options *o) {
  if (!o) return;
  *o = (dpt_bert_options){.seq_len = 128,
                          .layers = 4,
                          .hidden = 256,
                          .heads = 4,
                          .ffn = 1024,
                          .dropout = 0.1f,
                          .attn_dropout = 0.1f};
}

#define BERT_INIT_STD 0.02f
#define BERT_LN_EPS   1e-12f

/* Checks BERT's options (pos: the position table's size) before anything is built, so that a
 * bad option leaves the spec as it was. */
static dpt_status check_bert_options(const dpt_bert_options *o, size_t pos) {
  const char *fn = "dpt_model_spec_bert";
  if (o->vocab < DPT_BERT_MIN_VOCAB)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: vocabulary of %zu tokens, at least %d needed",
                         fn, o->vocab, DPT_BERT_MIN_VOCAB);
  if (o->seq_len < 3)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: sequence length %zu, at least 3 needed ([CLS], a token, [SEP])", fn,
                         o->seq_len);
  if (o->seq_len > pos)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: sequence length %zu is beyond the position table's %zu positions", fn,
                         o->seq_len, pos);
  if (o->hidden == 0 || o->heads == 0 || o->ffn == 0 || o->layers == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: layers %zu, hidden %zu, heads %zu, ffn %zu: "
                         "none may be 0",
                         fn, o->layers, o->hidden, o->heads, o->ffn);
  if (o->hidden % o->heads != 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %zu heads do not divide the hidden size %zu", fn,
                         o->heads, o->hidden);
  if (8 + 10 * o->layers > DPT_MODEL_MAX_LAYERS) /* 4 embedding, 10 per block, 4 head layers */
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %zu layers need more than %d graph layers", fn,
                         o->layers, DPT_MODEL_MAX_LAYERS);
  if (!(o->dropout >= 0.0f && o->dropout < 1.0f) ||
      !(o->attn_dropout >= 0.0f && o->attn_dropout < 1.0f))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: dropout %g / attention dropout %g not in [0, 1)",
                         fn, (double)o->dropout, (double)o->attn_dropout);
  return DPT_OK;
}

/* The layer specs an encoder block is made of (the MLM head reuses some). */
typedef struct bert_block_layers {
  const dpt_layer_spec *attn, *drop, *add, *norm, *ffn1, *gelu, *dense;
} bert_block_layers;

/* Encoder block i over x, post-norm as in BERT: attention, then the feed-forward network, each
 * followed by dropout, the residual add and a layer norm. Returns the block's output. */
static int add_bert_block(dpt_model_spec *spec, const bert_block_layers *b, size_t i, int x) {
  add_named(spec, *b->attn, 1, x, 0, "blocks.%zu.attn", i);
  int d1 = add_named(spec, *b->drop, 0, 0, 0, "blocks.%zu.drop1", i);
  add_named(spec, *b->add, 2, d1, x, "blocks.%zu.add1", i);
  int n1 = add_named(spec, *b->norm, 0, 0, 0, "blocks.%zu.norm1", i);
  add_named(spec, *b->ffn1, 0, 0, 0, "blocks.%zu.ffn1", i);
  add_named(spec, *b->gelu, 0, 0, 0, "blocks.%zu.act", i);
  add_named(spec, *b->dense, 0, 0, 0, "blocks.%zu.ffn2", i);
  int d2 = add_named(spec, *b->drop, 0, 0, 0, "blocks.%zu.drop2", i);
  add_named(spec, *b->add, 2, d2, n1, "blocks.%zu.add2", i);
  return add_named(spec, *b->norm, 0, 0, 0, "blocks.%zu.norm2", i);
}

dpt_status dpt_model_spec_bert(dpt_model_spec *spec, const dpt_bert_options *o) {
  const char *fn = "dpt_model_spec_bert";
  if (!spec || !o) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: spec/options is NULL", fn);
  size_t pos = o->max_positions ? o->max_positions : o->seq_len;
  DPT_TRY(check_bert_options(o, pos));
  float eps = o->ln_eps > 0.0f ? o->ln_eps : BERT_LN_EPS;
  DPT_TRY(dpt_model_spec_init(spec, 1, 1, o->seq_len, o->vocab));
  spec->seq_len = o->seq_len;
  const float sd = BERT_INIT_STD;
  dpt_layer_spec tok = {
      .kind = DPT_LAYER_EMBEDDING, .size = o->hidden, .vocab = o->vocab, .init_std = sd};
  dpt_layer_spec posl = {.kind = DPT_LAYER_POSITION_EMBEDDING, .vocab = pos, .init_std = sd};
  dpt_layer_spec norm = {.kind = DPT_LAYER_LAYERNORM, .eps = eps};
  dpt_layer_spec drop = {.kind = DPT_LAYER_DROPOUT, .p = o->dropout};
  dpt_layer_spec attn = {
      .kind = DPT_LAYER_ATTENTION, .heads = o->heads, .p = o->attn_dropout, .init_std = sd};
  dpt_layer_spec add = {.kind = DPT_LAYER_ADD}, gelu = {.kind = DPT_LAYER_GELU};
  dpt_layer_spec ffn1 = {.kind = DPT_LAYER_LINEAR, .size = o->ffn, .init_std = sd};
  dpt_layer_spec dense = {.kind = DPT_LAYER_LINEAR, .size = o->hidden, .init_std = sd};
  const bert_block_layers block = {&attn, &drop, &add, &norm, &ffn1, &gelu, &dense};
  int t = add_named(spec, tok, 0, 0, 0, "embed.tok");
  add_named(spec, posl, 0, 0, 0, "embed.pos");
  add_named(spec, norm, 0, 0, 0, "embed.norm");
  int x = add_named(spec, drop, 0, 0, 0, "embed.drop");
  for (size_t i = 0; i < o->layers; ++i)
    x = add_bert_block(spec, &block, i, x);
  add_named(spec, dense, 0, 0, 0, "mlm.dense");
  add_named(spec, gelu, 0, 0, 0, "mlm.act");
  add_named(spec, norm, 0, 0, 0, "mlm.norm");
  dpt_layer_spec dec = {.kind = DPT_LAYER_LINEAR, .size = o->vocab, .tie = t + 1, .init_std = sd};
  add_named(spec, dec, 0, 0, 0, "mlm.decoder");
  return DPT_OK;
}

void dpt_dlrm_options_default(dpt_dlrm_options *o) {
  if (!o) return;
  *o = (dpt_dlrm_options){.dim = 16, .bag = 1, .mode = DPT_BAG_SUM, .interaction = DPT_DLRM_DOT};
}

/* A list of MLP sizes: none zero. */
static dpt_status dlrm_sizes(const char *fn, const char *what, const size_t *v, size_t n) {
  if (n > 0 && !v) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %s is NULL", fn, what);
  for (size_t i = 0; i < n; ++i)
    if (v[i] == 0) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %s[%zu] is 0", fn, what, i);
  return DPT_OK;
}

static dpt_status dlrm_check(const char *fn, const dpt_dlrm_options *o) {
  if (o->num_dense == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: num_dense is 0 (the bottom MLP needs dense "
                         "features)",
                         fn);
  if (o->num_tables == 0) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: num_tables is 0", fn);
  if (!o->table_rows) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: table_rows is NULL", fn);
  for (size_t t = 0; t < o->num_tables; ++t)
    if (o->table_rows[t] == 0 || o->table_rows[t] > INT32_MAX)
      return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: table_rows[%zu] is %zu, not in 1 .. 2^31 - 1",
                           fn, t, o->table_rows[t]);
  if (o->dim == 0) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: dim is 0", fn);
  if (o->mode != DPT_BAG_SUM && o->mode != DPT_BAG_MEAN)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: mode %d is not sum (0) or mean (1)", fn,
                         o->mode);
  if (o->interaction != DPT_DLRM_DOT && o->interaction != DPT_DLRM_CAT)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: interaction %d is not dot (0) or cat (1)", fn,
                         o->interaction);
  size_t bag = o->bag ? o->bag : 1, ids = o->num_tables * bag;
  if (o->num_tables > DPT_MODEL_MAX_LAYERS || o->num_bottom > DPT_MODEL_MAX_LAYERS ||
      o->num_top > DPT_MODEL_MAX_LAYERS ||
      2 * o->num_tables + 2 * (o->num_bottom + 1) + 2 * o->num_top + 3 > DPT_MODEL_MAX_LAYERS)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: num_tables %zu, num_bottom %zu and num_top %zu need more than %d "
                         "layers",
                         fn, o->num_tables, o->num_bottom, o->num_top, DPT_MODEL_MAX_LAYERS);
  DPT_TRY(dlrm_sizes(fn, "bottom", o->bottom, o->num_bottom));
  DPT_TRY(dlrm_sizes(fn, "top", o->top, o->num_top));
  if (bag > INT32_MAX / o->num_tables || o->num_dense > INT32_MAX - ids)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: a record of %zu dense features and %zu x %zu ids "
                         "is too large",
                         fn, o->num_dense, o->num_tables, bag);
  return DPT_OK;
}

dpt_status dpt_model_spec_dlrm(dpt_model_spec *spec, const dpt_dlrm_options *o) {
  const char *fn = "dpt_model_spec_dlrm";
  if (!spec || !o) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: spec/options is NULL", fn);
  DPT_TRY(dlrm_check(fn, o));
  size_t bag = o->bag ? o->bag : 1, T = o->num_tables, d = o->dim;
  DPT_TRY(dpt_model_spec_init(spec, 1, 1, o->num_dense + T * bag, 1));
  const int in = DPT_LAYER_INPUT_MODEL;
  int emb[DPT_MODEL_MAX_LAYERS];
  for (size_t t = 0; t < T; ++t) {
    dpt_layer_spec eb = {.kind = DPT_LAYER_EMBEDDING_BAG,
                         .size = d,
                         .vocab = o->table_rows[t],
                         .offset = o->num_dense + t * bag,
                         .bag = o->bag,
                         .mode = o->mode,
                         /* DLRM_Net's uniform(+-sqrt(1/rows)) variance, as a normal */
                         .init_std = (float)sqrt(1.0 / (3.0 * (double)o->table_rows[t]))};
    emb[t] = add_named(spec, eb, 1, in, 0, "emb_l.%zu", t);
  }
  dpt_layer_spec dense = {.kind = DPT_LAYER_SLICE, .size = o->num_dense};
  add_named(spec, dense, 1, in, 0, "dense");
  dpt_layer_spec lin = {.kind = DPT_LAYER_LINEAR}, relu = {.kind = DPT_LAYER_RELU};
  size_t k = 0;
  for (size_t i = 0; i <= o->num_bottom; ++i) {
    lin.size = i < o->num_bottom ? o->bottom[i] : d;
    add_named(spec, lin, 0, 0, 0, "bot_l.%zu", k++);
    add_named(spec, relu, 0, 0, 0, "bot_l.%zu", k++);
  }
  int x = (int)spec->num_layers - 1;
  dpt_layer_spec cat = {.kind = DPT_LAYER_CONCAT};
  for (size_t t = 0; t < T; ++t)
    x = add_named(spec, cat, 2, x, emb[t], "cat.%zu", t);
  if (o->interaction == DPT_DLRM_DOT) {
    dpt_layer_spec inter = {.kind = DPT_LAYER_INTERACTION, .size = d};
    add_named(spec, inter, 0, 0, 0, "interact");
  }
  k = 0;
  for (size_t i = 0; i <= o->num_top; ++i) {
    lin.size = i < o->num_top ? o->top[i] : 1;
    add_named(spec, lin, 0, 0, 0, "top_l.%zu", k++);
    if (i < o->num_top) add_named(spec, relu, 0, 0, 0, "top_l.%zu", k++);
  }
  return DPT_OK;
}

/* ---- planning: shapes, tensors, buffers ---------------------------------------------------- */

/* Planning runs inside dpt_model_create; its messages carry that name and the layer. */
static const char plan_fn[] = "dpt_model_create";

/* Which layers feed layer i: the spec's inputs, or the layer before. */
static dpt_status plan_inputs(dpt_model *m, size_t i) {
  dpt_node *L = &m->layers[i];
  const dpt_layer_spec *l = &m->spec.layers[i];
  const dpt_layer_ops *ops = dpt_layer_ops_of(l->kind);
  int want = ops && ops->num_inputs == 2 ? 2 : 1;
  if (l->num_inputs == 0 && want == 1) {
    L->num_src = 1;
    L->src[0] = (int)i - 1; /* DPT_LAYER_INPUT_MODEL for layer 0 */
    return DPT_OK;
  }
  if (l->num_inputs != want)
    return LAYER_ERR(m, i, "takes %d input%s, the spec names %d", want, want > 1 ? "s" : "",
                     l->num_inputs);
  L->num_src = want;
  for (int j = 0; j < want; ++j) {
    L->src[j] = l->inputs[j];
    if (L->src[j] < DPT_LAYER_INPUT_MODEL || L->src[j] >= (int)i)
      return LAYER_ERR(m, i, "input %d is not an earlier layer (nor the model input, %d)",
                       L->src[j], DPT_LAYER_INPUT_MODEL);
  }
  return DPT_OK;
}

/* Layer i's shape rule and tensors, by its kind's table. */
static dpt_status plan_kind(dpt_model *m, size_t i, dpt_sample_shape *x) {
  dpt_node *L = &m->layers[i];
  const dpt_layer_ops *ops = dpt_layer_ops_of(L->spec.kind);
  if (!ops) return LAYER_ERR(m, i, "has unknown kind %d", (int)L->spec.kind);
  return ops->plan ? ops->plan(m, i, x) : DPT_OK;
}

/* Layer i's inputs, shapes and tensors. */
static dpt_status plan_layer(dpt_model *m, size_t i) {
  dpt_node *L = &m->layers[i];
  L->spec = m->spec.layers[i];
  L->w_index = L->b_index = L->w2_index = L->b2_index = SIZE_MAX;
  if (memchr(L->spec.name, '\0', sizeof L->spec.name) == NULL)
    return LAYER_ERR(m, i, "has a name that is not NUL-terminated");
  DPT_TRY(plan_inputs(m, i));
  int a = L->src[0];
  if (m->spec.seq_len && !dpt_layer_has(L->spec.kind, DPT_LAYER_TAKES_TOKENS))
    for (int j = 0; j < L->num_src; ++j)
      if (L->src[j] == DPT_LAYER_INPUT_MODEL)
        return LAYER_ERR(m, i, "takes the token ids; only an embedding layer can");
  if (L->spec.tie && !dpt_layer_has(L->spec.kind, DPT_LAYER_CAN_TIE))
    return LAYER_ERR(m, i, "has a tie; only a linear layer can share an embedding's weight");
  dpt_sample_shape x = a == DPT_LAYER_INPUT_MODEL
                           ? (dpt_sample_shape){m->spec.in_c, m->spec.in_h, m->spec.in_w, 0, 0}
                           : m->layers[a].oshape;
  L->ishape = x;
  if (!dpt_mul_ok(x.c, x.h, &L->in_size) || !dpt_mul_ok(L->in_size, x.w, &L->in_size))
    return LAYER_ERR(m, i, "input too large");
  DPT_TRY(plan_kind(m, i, &x));
  L->oshape = x;
  if (!dpt_mul_ok(x.c, x.h, &L->out_size) || !dpt_mul_ok(L->out_size, x.w, &L->out_size))
    return LAYER_ERR(m, i, "output too large");
  return DPT_OK;
}

/* Each layer's store: itself, or for an alias (a flatten, an absorbed layer) its input's. */
static void plan_stores(dpt_model *m) {
  for (size_t i = 0; i < m->num_layers; ++i) {
    dpt_node *L = &m->layers[i];
    const int a = L->src[0];
    L->store = dpt_node_is_alias(L) ? (a < 0 ? a : m->layers[a].store) : (int)i;
  }
}

/* The spec's model-wide fields: input shape, layer count, classes. */
static dpt_status plan_check_spec(const dpt_model_spec *s) {
  const char *fn = plan_fn;
  if (s->in_c == 0 || s->in_h == 0 || s->in_w == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: input shape %zu x %zu x %zu has a zero", fn,
                         s->in_c, s->in_h, s->in_w);
  if (s->num_layers == 0 || s->num_layers > DPT_MODEL_MAX_LAYERS)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: num_layers %zu not in 1..%d", fn, s->num_layers,
                         DPT_MODEL_MAX_LAYERS);
  if (s->num_classes < 1) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: num_classes is 0", fn);
  if (s->seq_len && (s->in_c != 1 || s->in_h != 1 || s->in_w != s->seq_len))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: a token model of seq_len %zu has input 1 x 1 x %zu, not %zu x %zu x "
                         "%zu",
                         fn, s->seq_len, s->seq_len, s->in_c, s->in_h, s->in_w);
  return DPT_OK;
}

/* Two layers with one name would give one state_dict entry two tensors. */
static dpt_status plan_check_names(const dpt_model *m) {
  for (size_t i = 0; i < m->num_layers; ++i)
    for (size_t j = 0; j < i && m->spec.layers[i].name[0]; ++j)
      if (strcmp(m->spec.layers[i].name, m->spec.layers[j].name) == 0)
        return LAYER_ERR(m, i, "has the name of layer %zu", j);
  return DPT_OK;
}

/* Every state_dict name once: a layer named "7" and the unnamed layer 7 would both give
 * "7.weight". */
static dpt_status plan_check_tensor_names(const dpt_model *m) {
  size_t n = m->num_tensors + m->num_buffers;
  for (size_t i = 0; i < n; ++i) {
    const char *a = i < m->num_tensors ? m->tensors[i].name : m->buffers[i - m->num_tensors].name;
    for (size_t j = 0; j < i; ++j) {
      const char *b = j < m->num_tensors ? m->tensors[j].name : m->buffers[j - m->num_tensors].name;
      if (strcmp(a, b) == 0)
        return dpt_set_error(DPT_ERR_INVALID_ARG,
                             "%s: two tensors are named '%s' (a layer's name is another's index)",
                             plan_fn, a);
    }
  }
  return DPT_OK;
}

/* The last layer computes the logits (one per class); every other layer's output is used, and
 * something is trained. */
static dpt_status plan_check_graph(const dpt_model *m) {
  const char *fn = plan_fn;
  const dpt_node *last = &m->layers[m->num_layers - 1];
  if (dpt_layer_has(last->spec.kind, DPT_LAYER_ALIAS))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: the last layer must compute the logits, not flatten them", fn);
  if (m->spec.seq_len) {
    if (!last->oshape.seq || last->oshape.w != m->spec.num_classes)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "%s: the last layer (%s) of a token model must give %zu logits per "
                           "position, it gives %zu x %zu x %zu",
                           fn, dpt_layer_kind_name(last->spec.kind), m->spec.num_classes,
                           last->oshape.c, last->oshape.h, last->oshape.w);
  } else if (last->out_size != m->spec.num_classes)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: the last layer (%s) gives %zu outputs but num_classes is %zu", fn,
                         dpt_layer_kind_name(last->spec.kind), last->out_size, m->spec.num_classes);
  for (size_t i = 0; i + 1 < m->num_layers; ++i) {
    int used = 0;
    for (size_t j = i + 1; j < m->num_layers && !used; ++j)
      for (int k = 0; k < m->layers[j].num_src; ++k)
        used |= m->layers[j].src[k] == (int)i;
    if (!used) return LAYER_ERR(m, i, "has an output no layer uses");
  }
  if (m->num_params == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: the model has no parameters", fn);
  return plan_check_tensor_names(m);
}

/* Derives every layer's inputs, shapes and the tensor lists from the spec; allocates only the
 * host-side lists. */
static dpt_status plan(dpt_model *m) {
  const dpt_model_spec *s = &m->spec;
  DPT_TRY(plan_check_spec(s));
  m->num_layers = s->num_layers;
  m->layers = calloc(m->num_layers, sizeof *m->layers);
  m->tensors = calloc(4 * m->num_layers, sizeof *m->tensors);
  m->buffers = calloc(3 * m->num_layers, sizeof *m->buffers);
  m->names = calloc(7 * m->num_layers, sizeof *m->names);
  m->grad_written = calloc(m->num_layers, 1);
  m->w_written = calloc(4 * m->num_layers, 1);
  if (!m->layers || !m->tensors || !m->buffers || !m->names || !m->grad_written || !m->w_written)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of host memory", plan_fn);
  DPT_TRY(plan_check_names(m));
  for (size_t i = 0; i < s->num_layers; ++i)
    DPT_TRY(plan_layer(m, i));
  DPT_TRY(plan_check_graph(m));
  dpt_model_plan_fusions(m);
  plan_stores(m);
  return DPT_OK;
}

/* ---- memory -------------------------------------------------------------------------------- */

/* How many layers take their input from store s (through flattens, which do not count). */
static int consumers_of(const dpt_model *m, int s) {
  int n = 0;
  for (size_t j = 0; j < m->num_layers; ++j) {
    const dpt_node *L = &m->layers[j];
    for (int k = 0; k < L->num_src && !dpt_node_is_alias(L); ++k)
      n += L->src[k] >= 0 && m->layers[L->src[k]].store == s;
  }
  return n;
}

/* Layer i's activation buffers for max_batch samples: its output and the gradient wrt it, and
 * what its kind keeps between forward and backward (its table's alloc). A flatten layer aliases its
 * input and owns nothing. */
static dpt_status alloc_layer(dpt_model *m, size_t i, shared_sizes *sh) {
  dpt_node *L = &m->layers[i];
  size_t n;
  if (!dpt_mul_ok(m->max_batch, L->out_size, &n))
    return LAYER_ERR(m, i, "output for %zu samples is too large", m->max_batch);
  if (dpt_node_is_alias(L)) return DPT_OK;
  if (consumers_of(m, (int)i) > 1 && n > sh->scratch) sh->scratch = n;
  DPT_TRY(dpt_layer_alloc_floats(m, n, sizeof(float), &L->out));
  DPT_TRY(dpt_layer_alloc_floats(m, n, sizeof(float), &L->dout));
  const dpt_layer_ops *ops = dpt_layer_ops_of(L->spec.kind);
  return ops->alloc ? ops->alloc(m, i, n, sh) : DPT_OK;
}

static dpt_status alloc_all(dpt_model *m) {
  shared_sizes sh = {0, 1, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < m->num_layers; ++i)
    DPT_TRY(alloc_layer(m, i, &sh));
  if (sh.z) DPT_TRY(dpt_layer_alloc_floats(m, sh.z, sizeof(float), &m->zbuf));
  if (sh.iota) {
    int32_t *iota = malloc(sh.iota * sizeof(int32_t));
    if (!iota) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_model_create: out of host memory");
    for (size_t j = 0; j < sh.iota; ++j)
      iota[j] = (int32_t)j;
    dpt_status st = dpt_layer_upload_i32(m, iota, sh.iota, &m->iota);
    free(iota);
    DPT_TRY(st);
  }
  if (sh.col) DPT_TRY(dpt_layer_alloc_floats(m, sh.col, sizeof(float), &m->col));
  if (sh.col) DPT_TRY(dpt_layer_alloc_floats(m, sh.col, sizeof(float), &m->dcol));
  if (sh.scratch) DPT_TRY(dpt_layer_alloc_floats(m, sh.scratch, sizeof(float), &m->scratch));
  if (sh.qkv) {
    DPT_TRY(dpt_layer_alloc_floats(m, sh.qkv, sizeof(float), &m->dqkv));
    DPT_TRY(dpt_layer_alloc_floats(m, sh.probs, sizeof(float), &m->dprobs));
    DPT_TRY(dpt_layer_alloc_floats(m, sh.ctx, sizeof(float), &m->dctx));
  }
  DPT_TRY(dpt_layer_alloc_floats(m, sh.plane, sizeof(float), &m->ones));
  DPT_TRY(dpt_buffer_fill_f32(m->ones, 0, sh.plane, 1.0f));
  size_t before = m->activation_bytes;
  DPT_TRY(dpt_layer_alloc_floats(m, m->num_params, sizeof(float), &m->params));
  DPT_TRY(dpt_layer_alloc_floats(m, m->num_params, sizeof(float), &m->grads));
  if (m->num_buffer_floats)
    DPT_TRY(dpt_layer_alloc_floats(m, m->num_buffer_floats, sizeof(float), &m->bufs));
  m->activation_bytes = before; /* parameters, gradients and buffers are not activations */
  return DPT_OK;
}

dpt_status dpt_model_create(dpt_backend *be, const dpt_model_spec *spec, size_t max_batch,
                            dpt_model **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_create: out is NULL");
  *out = NULL;
  if (!be) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_create: backend is NULL");
  if (!spec) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_create: spec is NULL");
  if (max_batch == 0) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_create: max_batch is 0");
  dpt_model *m = calloc(1, sizeof *m);
  if (!m) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_model_create: out of host memory");
  m->be = be;
  m->spec = *spec;
  m->max_batch = max_batch;
  dpt_status st = plan(m);
  if (st == DPT_OK) st = alloc_all(m);
  if (st != DPT_OK) {
    dpt_model_destroy(m);
    return st;
  }
  *out = m;
  return DPT_OK;
}

void dpt_model_destroy(dpt_model *m) {
  if (!m) return;
  for (size_t i = 0; m->layers && i < m->num_layers; ++i) {
    dpt_buffer_free(m->layers[i].out);
    dpt_buffer_free(m->layers[i].dout);
    dpt_buffer_free(m->layers[i].aux);
    dpt_buffer_free(m->layers[i].probs);
    dpt_buffer_free(m->layers[i].probs_drop);
    dpt_buffer_free(m->layers[i].ctx);
    dpt_buffer_free(m->layers[i].map);
  }
  dpt_buffer *shared[] = {m->params,  m->grads, m->bufs,   m->ones, m->col,  m->dcol,
                          m->scratch, m->dqkv,  m->dprobs, m->dctx, m->iota, m->zbuf};
  for (size_t i = 0; i < sizeof shared / sizeof shared[0]; ++i)
    dpt_buffer_free(shared[i]);
  free(m->layers);
  free(m->tensors);
  free(m->buffers);
  free(m->names);
  free(m->grad_written);
  free(m->w_written);
  free(m->sync_host);
  free(m->sync_acc);
  free(m->ready_from);
  free(m);
}

/* ---- accessors ----------------------------------------------------------------------------- */

size_t dpt_model_num_tensors(const dpt_model *m) {
  return m ? m->num_tensors : 0;
}

dpt_status dpt_model_tensor(const dpt_model *m, size_t index, dpt_tensor_info *out) {
  if (!m || !out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_tensor: model/out is NULL");
  if (index >= m->num_tensors)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_tensor: index %zu >= %zu tensors", index,
                         m->num_tensors);
  *out = m->tensors[index];
  return DPT_OK;
}

size_t dpt_model_num_buffers(const dpt_model *m) {
  return m ? m->num_buffers : 0;
}

dpt_status dpt_model_buffer_info(const dpt_model *m, size_t index, dpt_tensor_info *out) {
  if (!m || !out)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_buffer_info: model/out is NULL");
  if (index >= m->num_buffers)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_buffer_info: index %zu >= %zu buffers",
                         index, m->num_buffers);
  *out = m->buffers[index];
  return DPT_OK;
}

size_t dpt_model_num_buffer_floats(const dpt_model *m) {
  return m ? m->num_buffer_floats : 0;
}
dpt_buffer *dpt_model_buffers(const dpt_model *m) {
  return m ? m->bufs : NULL;
}
size_t dpt_model_activation_bytes(const dpt_model *m) {
  return m ? m->activation_bytes : 0;
}
size_t dpt_model_num_params(const dpt_model *m) {
  return m ? m->num_params : 0;
}
dpt_buffer *dpt_model_params(const dpt_model *m) {
  return m ? m->params : NULL;
}
dpt_buffer *dpt_model_grads(const dpt_model *m) {
  return m ? m->grads : NULL;
}
dpt_backend *dpt_model_backend(const dpt_model *m) {
  return m ? m->be : NULL;
}
size_t dpt_model_input_size(const dpt_model *m) {
  return m ? m->spec.in_c * m->spec.in_h * m->spec.in_w : 0;
}
size_t dpt_model_num_classes(const dpt_model *m) {
  return m ? m->spec.num_classes : 0;
}
size_t dpt_model_labels_per_sample(const dpt_model *m) {
  return !m ? 0 : m->spec.seq_len ? m->spec.seq_len : 1;
}
size_t dpt_model_state_size(const dpt_model *m) {
  return m ? m->num_params + m->num_buffer_floats : 0;
}

dpt_status dpt_model_set_sync_bn(dpt_model *m, dpt_model_allreduce_fn sum, void *ctx) {
  if (!m) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_set_sync_bn: model is NULL");
  /* The host side of the sums, once for the widest batch norm: none on the training step. */
  size_t widest = 0;
  for (size_t i = 0; i < m->num_layers; ++i)
    if (dpt_layer_has(m->layers[i].spec.kind, DPT_LAYER_SYNC_STATS))
      widest = m->layers[i].oshape.c > widest ? m->layers[i].oshape.c : widest;
  free(m->sync_host);
  free(m->sync_acc);
  m->sync_host = sum ? malloc((2 * widest + 1) * sizeof(float)) : NULL;
  m->sync_acc = sum ? malloc((2 * widest + 1) * sizeof(double)) : NULL;
  if (sum && (!m->sync_host || !m->sync_acc))
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_model_set_sync_bn: out of host memory");
  m->sync_sum = sum;
  m->sync_ctx = ctx;
  return DPT_OK;
}

dpt_status dpt_model_set_layer_hook(dpt_model *m, dpt_model_layer_fn fn, void *ctx) {
  if (!m) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_set_layer_hook: model is NULL");
  if (fn && !m->ready_from) {
    m->ready_from = malloc((m->num_layers ? m->num_layers : 1) * sizeof *m->ready_from);
    if (!m->ready_from)
      return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_model_set_layer_hook: out of host memory");
    size_t lo = m->num_params;
    for (size_t i = m->num_layers; i-- > 0;) {
      const dpt_node *L = &m->layers[i];
      const size_t own[4] = {L->spec.tie ? SIZE_MAX : L->w_index, L->b_index, L->w2_index,
                             L->b2_index};
      for (int k = 0; k < 4; ++k)
        if (own[k] != SIZE_MAX && m->tensors[own[k]].offset < lo) lo = m->tensors[own[k]].offset;
      m->ready_from[i] = lo;
    }
  }
  m->hook = fn;
  m->hook_ctx = ctx;
  return DPT_OK;
}

const char *dpt_model_layer_name(const dpt_model *m, size_t layer) {
  return m && layer < m->num_layers ? m->layers[layer].spec.name : NULL;
}

const char *dpt_model_layer_kind_name(const dpt_model *m, size_t layer) {
  return m && layer < m->num_layers ? dpt_layer_kind_name(m->layers[layer].spec.kind) : NULL;
}

dpt_status dpt_model_set_sparse_table_grads(dpt_model *m, int on) {
  if (!m)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_set_sparse_table_grads: model is NULL");
  m->sparse_table_grads = on != 0;
  if (!on) return DPT_OK;
  for (size_t i = 0; i < m->num_layers; ++i)
    if (dpt_layer_has(m->layers[i].spec.kind, DPT_LAYER_SPARSE_ROWS)) {
      const dpt_tensor_info *W = &m->tensors[m->layers[i].w_index];
      DPT_TRY(dpt_buffer_fill_f32(m->grads, W->offset, W->count, 0.0f));
    }
  return DPT_OK;
}

dpt_status dpt_model_set_step(dpt_model *m, uint64_t seed, uint64_t step, uint32_t first_sample) {
  if (!m) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_set_step: model is NULL");
  m->seed = seed;
  m->step = step;
  m->first_sample = first_sample;
  return DPT_OK;
}

dpt_status dpt_model_get_params(const dpt_model *m, float *host) {
  if (!m || !host)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_get_params: model/host is NULL");
  return dpt_buffer_download(m->params, 0, host, m->num_params * sizeof(float));
}

dpt_status dpt_model_set_params(dpt_model *m, const float *host) {
  if (!m || !host)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_set_params: model/host is NULL");
  return dpt_buffer_upload(m->params, 0, host, m->num_params * sizeof(float));
}

dpt_status dpt_model_get_state(const dpt_model *m, float *host) {
  if (!m || !host)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_get_state: model/host is NULL");
  DPT_TRY(dpt_model_get_params(m, host));
  if (!m->bufs) return DPT_OK;
  return dpt_buffer_download(m->bufs, 0, host + m->num_params,
                             m->num_buffer_floats * sizeof(float));
}

dpt_status dpt_model_set_state(dpt_model *m, const float *host) {
  if (!m || !host)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_set_state: model/host is NULL");
  DPT_TRY(dpt_model_set_params(m, host));
  if (!m->bufs) return DPT_OK;
  return dpt_buffer_upload(m->bufs, 0, host + m->num_params, m->num_buffer_floats * sizeof(float));
}

/* ---- initialization ------------------------------------------------------------------------ */

/* Layer L's parameters into host (the flat layout), as PyTorch initializes its module (each
 * kind's table says how). One generator stream per tensor index keeps a tensor's values
 * independent of the layers before it. */
static void init_layer(const dpt_model *m, const dpt_node *L, uint64_t seed, float *host) {
  dpt_layer_ops_of(L->spec.kind)->init(m, L, seed, host);
}

dpt_status dpt_model_init(dpt_model *m, uint64_t seed) {
  if (!m) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_init: model is NULL");
  size_t n = dpt_model_state_size(m);
  float *host = malloc(n * sizeof(float));
  if (!host)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_model_init: cannot allocate %zu bytes",
                         n * sizeof(float));
  for (size_t i = 0; i < m->num_layers; ++i)
    if (m->layers[i].w_index != SIZE_MAX) init_layer(m, &m->layers[i], seed, host);
  /* Buffers, three per batch norm layer: running_mean 0, running_var 1, num_batches_tracked 0. */
  for (size_t b = 0; b < m->num_buffers; ++b) {
    const dpt_tensor_info *t = &m->buffers[b];
    float v = b % 3 == 1 ? 1.0f : 0.0f;
    for (size_t j = 0; j < t->count; ++j)
      host[m->num_params + t->offset + j] = v;
  }
  dpt_status st = dpt_model_set_state(m, host);
  free(host);
  return st;
}
