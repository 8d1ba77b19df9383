/* Sequential models: shapes, the flat parameter/gradient buffers, forward and backward through
 * the op set.
 *
 * Layouts follow PyTorch so weights move between the two unchanged: activations are NCHW
 * ([batch, c, h, w]) and a linear layer computes y = x W^T + b with W [out, in]. A convolution
 * goes through im2col: per image, y_i[cout, oh*ow] = W[cout, cin*k*k] * col_i[cin*k*k, oh*ow],
 * and its bias is added (and reduced in backward) with a rank-1 gemm against a vector of ones. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/size.h"
#include "core/rng.h"
#include "dptrain/model.h"

typedef struct layer {
  dpt_layer_spec spec;
  size_t in_c, in_h, in_w;    /* input shape of one sample */
  size_t out_c, out_h, out_w; /* output shape of one sample */
  size_t in_size, out_size;   /* floats per sample */
  size_t w_index, b_index;    /* tensor indices (SIZE_MAX when the layer has no parameters) */
  dpt_buffer *out;            /* [max_batch, out_size] owned; NULL for flatten (alias) */
  dpt_buffer *dout;           /* [max_batch, out_size] gradient wrt out; NULL for flatten */
  dpt_buffer *aux;            /* conv2d: col [max_batch, cin*k*k, oh*ow]; maxpool: int32 argmax
                                 [max_batch, out_size] */
  dpt_buffer *daux;           /* conv2d: dcol [cin*k*k, oh*ow], one image at a time */
} layer;

struct dpt_model {
  dpt_backend *be;
  dpt_model_spec spec;
  size_t max_batch;
  size_t num_layers;
  layer layers[DPT_MODEL_MAX_LAYERS];
  size_t num_tensors;
  dpt_tensor_info tensors[2 * DPT_MODEL_MAX_LAYERS];
  char names[2 * DPT_MODEL_MAX_LAYERS][24]; /* backing store of tensors[i].name */
  size_t num_params;
  dpt_buffer *params; /* [num_params] */
  dpt_buffer *grads;  /* [num_params] */
  dpt_buffer *ones;   /* [max oh*ow] of 1.0f, for conv bias */
};

/* ---- specs -------------------------------------------------------------------------------- */

dpt_status dpt_model_spec_mlp(dpt_model_spec *spec, size_t c, size_t h, size_t w,
                              const size_t *hidden, size_t num_hidden, size_t num_classes) {
  if (!spec) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_spec_mlp: spec is NULL");
  if (num_hidden > 0 && !hidden)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_spec_mlp: hidden is NULL");
  if (2 + 2 * num_hidden > DPT_MODEL_MAX_LAYERS)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_spec_mlp: %zu hidden layers is too many",
                         num_hidden);
  memset(spec, 0, sizeof *spec);
  spec->in_c = c;
  spec->in_h = h;
  spec->in_w = w;
  spec->num_classes = num_classes;
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
  memset(spec, 0, sizeof *spec);
  spec->in_c = c;
  spec->in_h = h;
  spec->in_w = w;
  spec->num_classes = num_classes;
  const size_t channels[2] = {c1, c2};
  for (int b = 0; b < 2; ++b) {
    dpt_layer_spec conv = {DPT_LAYER_CONV2D, channels[b], 3, 1, 1};
    dpt_layer_spec relu = {DPT_LAYER_RELU, 0, 0, 0, 0};
    dpt_layer_spec pool = {DPT_LAYER_MAXPOOL, 0, 2, 2, 0};
    spec->layers[spec->num_layers++] = conv;
    spec->layers[spec->num_layers++] = relu;
    spec->layers[spec->num_layers++] = pool;
  }
  spec->layers[spec->num_layers++].kind = DPT_LAYER_FLATTEN;
  spec->layers[spec->num_layers].kind = DPT_LAYER_LINEAR;
  spec->layers[spec->num_layers++].size = num_classes;
  return DPT_OK;
}

/* ---- shapes and tensors ------------------------------------------------------------------ */

const char *dpt_layer_kind_name(dpt_layer_kind kind) {
  switch (kind) {
#define DPT_LAYER_KIND_NAME_(name, value, text)                                                    \
  case DPT_LAYER_##name:                                                                           \
    return text;
    DPT_LAYER_KIND_MAP(DPT_LAYER_KIND_NAME_)
#undef DPT_LAYER_KIND_NAME_
  default:
    return NULL;
  }
}

/* Appends tensor "<layer_index>.<what>" of shape[ndim] to the tensor list and to the end of the
 * flat buffers; *index_out receives its index. */
static dpt_status add_tensor(dpt_model *m, size_t layer_index, const char *what, int ndim,
                             const int64_t *shape, size_t *index_out) {
  size_t i = m->num_tensors++;
  dpt_tensor_info *t = &m->tensors[i];
  snprintf(m->names[i], sizeof m->names[i], "%zu.%s", layer_index, what);
  t->name = m->names[i];
  t->ndim = ndim;
  t->count = 1;
  for (int d = 0; d < ndim; ++d) {
    t->shape[d] = shape[d];
    if (!dpt_mul_ok(t->count, (size_t)shape[d], &t->count))
      return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_create: tensor %s is too large",
                           t->name);
  }
  t->offset = m->num_params;
  if (!dpt_add_ok(m->num_params, t->count, &m->num_params))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_create: too many parameters");
  *index_out = i;
  return DPT_OK;
}

/* Layer i's "i.weight" of shape w_shape[ndim] and "i.bias" [w_shape[0]], weight first, as
 * PyTorch's state_dict orders them. */
static dpt_status add_weight_and_bias(dpt_model *m, size_t i, int ndim, const int64_t *w_shape) {
  layer *L = &m->layers[i];
  DPT_TRY(add_tensor(m, i, "weight", ndim, w_shape, &L->w_index));
  return add_tensor(m, i, "bias", 1, w_shape, &L->b_index);
}

/* Planning runs inside dpt_model_create; its messages carry that name. */
static const char plan_fn[] = "dpt_model_create";

/* The shape of one sample between two layers. After a flatten or linear layer the sample is a
 * vector of c features (h = w = 1) and `flat` is set: image layers refuse it. */
typedef struct sample_shape {
  size_t c, h, w;
  int flat;
} sample_shape;

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
  return DPT_OK;
}

/* linear: weight [out, in_features], bias [out]; the output is a vector of `size` features. */
static dpt_status plan_linear(dpt_model *m, size_t i, size_t in_features, sample_shape *x) {
  layer *L = &m->layers[i];
  if (L->spec.size == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: layer %zu (linear) has size 0", plan_fn, i);
  const int64_t ws[2] = {(int64_t)L->spec.size, (int64_t)in_features};
  DPT_TRY(add_weight_and_bias(m, i, 2, ws));
  x->c = L->spec.size;
  x->h = x->w = 1;
  x->flat = 1;
  return DPT_OK;
}

/* conv2d: weight [out, c, k, k], bias [out]; stride 0 means 1. */
static dpt_status plan_conv2d(dpt_model *m, size_t i, sample_shape *x) {
  const char *fn = plan_fn;
  layer *L = &m->layers[i];
  if (x->flat)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: layer %zu (conv2d) needs an image input, not a flattened one", fn, i);
  if (L->spec.size == 0 || L->spec.kernel == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: layer %zu (conv2d) needs out channels and kernel > 0", fn, i);
  size_t stride = L->spec.stride ? L->spec.stride : 1;
  L->spec.stride = stride;
  dpt_conv_geom g = {1,
                     x->c,
                     x->h,
                     x->w,
                     L->spec.kernel,
                     L->spec.kernel,
                     stride,
                     stride,
                     L->spec.padding,
                     L->spec.padding};
  size_t oh, ow;
  dpt_status st = dpt_conv_out_size(&g, &oh, &ow);
  if (st != DPT_OK) return dpt_error_context(st, "%s: layer %zu (conv2d)", fn, i);
  const int64_t ws[4] = {(int64_t)L->spec.size, (int64_t)x->c, (int64_t)L->spec.kernel,
                         (int64_t)L->spec.kernel};
  DPT_TRY(add_weight_and_bias(m, i, 4, ws));
  x->c = L->spec.size;
  x->h = oh;
  x->w = ow;
  return DPT_OK;
}

/* maxpool: channels kept, each plane pooled; stride 0 means the kernel. */
static dpt_status plan_maxpool(dpt_model *m, size_t i, sample_shape *x) {
  const char *fn = plan_fn;
  layer *L = &m->layers[i];
  if (x->flat)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: layer %zu (maxpool) needs an image input, not a flattened one", fn,
                         i);
  if (L->spec.kernel == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: layer %zu (maxpool) has kernel 0", fn, i);
  if (L->spec.stride == 0) L->spec.stride = L->spec.kernel;
  dpt_pool_geom g = {x->c,           x->h,           x->w,          L->spec.kernel,
                     L->spec.kernel, L->spec.stride, L->spec.stride};
  size_t oh, ow;
  dpt_status st = dpt_pool_out_size(&g, &oh, &ow);
  if (st != DPT_OK) return dpt_error_context(st, "%s: layer %zu (maxpool)", fn, i);
  x->h = oh;
  x->w = ow;
  return DPT_OK;
}

/* Layer i's shapes and tensors from the sample shape `x` entering it; `x` leaves as its output. */
static dpt_status plan_layer(dpt_model *m, size_t i, sample_shape *x) {
  layer *L = &m->layers[i];
  L->spec = m->spec.layers[i];
  L->in_c = x->c;
  L->in_h = x->h;
  L->in_w = x->w;
  L->w_index = L->b_index = SIZE_MAX;
  size_t in_features;
  if (!dpt_mul_ok(x->c, x->h, &in_features) || !dpt_mul_ok(in_features, x->w, &in_features))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: layer %zu input too large", plan_fn, i);
  switch (L->spec.kind) {
  case DPT_LAYER_LINEAR:
    DPT_TRY(plan_linear(m, i, in_features, x));
    break;
  case DPT_LAYER_RELU:
    break;
  case DPT_LAYER_FLATTEN:
    x->c = in_features;
    x->h = x->w = 1;
    x->flat = 1;
    break;
  case DPT_LAYER_CONV2D:
    DPT_TRY(plan_conv2d(m, i, x));
    break;
  case DPT_LAYER_MAXPOOL:
    DPT_TRY(plan_maxpool(m, i, x));
    break;
  default:
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: layer %zu has unknown kind %d", plan_fn, i,
                         (int)L->spec.kind);
  }
  L->out_c = x->c;
  L->out_h = x->h;
  L->out_w = x->w;
  L->in_size = in_features;
  if (!dpt_mul_ok(x->c, x->h, &L->out_size) || !dpt_mul_ok(L->out_size, x->w, &L->out_size))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: layer %zu output too large", plan_fn, i);
  return DPT_OK;
}

/* The last layer computes the logits (one per class), and something is trained. */
static dpt_status plan_check_output(const dpt_model *m) {
  const char *fn = plan_fn;
  const layer *last = &m->layers[m->num_layers - 1];
  if (last->spec.kind == DPT_LAYER_FLATTEN)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: the last layer must compute the logits, not "
                         "flatten them",
                         fn);
  if (last->out_size != m->spec.num_classes)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: the last layer (%s) gives %zu outputs but num_classes is %zu", fn,
                         dpt_layer_kind_name(last->spec.kind), last->out_size, m->spec.num_classes);
  if (m->num_params == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: the model has no parameters", fn);
  return DPT_OK;
}

/* Derives every layer's shapes and the tensor list from the spec; allocates nothing. */
static dpt_status plan(dpt_model *m) {
  const dpt_model_spec *s = &m->spec;
  DPT_TRY(plan_check_spec(s));
  sample_shape x = {s->in_c, s->in_h, s->in_w, 0};
  m->num_layers = s->num_layers;
  for (size_t i = 0; i < s->num_layers; ++i)
    DPT_TRY(plan_layer(m, i, &x));
  return plan_check_output(m);
}

static dpt_status alloc_floats(dpt_backend *be, size_t count, size_t elem, dpt_buffer **out) {
  size_t bytes;
  if (!dpt_mul_ok(count, elem, &bytes))
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_model_create: buffer size overflows");
  return dpt_buffer_alloc(be, bytes ? bytes : elem, out);
}

/* Layer i's activation buffers for max_batch samples: output and its gradient, and what the
 * kind keeps between forward and backward (maxpool: argmax; conv2d: im2col columns and one
 * image's column gradient). A flatten layer aliases its input and owns nothing. max_plane grows
 * to the largest conv2d output plane (the length of the ones vector for its bias). */
static dpt_status alloc_layer(dpt_model *m, size_t i, size_t *max_plane) {
  dpt_backend *be = m->be;
  layer *L = &m->layers[i];
  if (L->spec.kind == DPT_LAYER_FLATTEN) return DPT_OK;
  size_t n;
  if (!dpt_mul_ok(m->max_batch, L->out_size, &n))
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_model_create: layer %zu too large", i);
  DPT_TRY(alloc_floats(be, n, sizeof(float), &L->out));
  DPT_TRY(alloc_floats(be, n, sizeof(float), &L->dout));
  if (L->spec.kind == DPT_LAYER_MAXPOOL) return alloc_floats(be, n, sizeof(int32_t), &L->aux);
  if (L->spec.kind != DPT_LAYER_CONV2D) return DPT_OK;
  size_t k = L->in_c * L->spec.kernel * L->spec.kernel, plane = L->out_h * L->out_w, col;
  if (plane > *max_plane) *max_plane = plane;
  if (!dpt_mul_ok(k, plane, &col) || !dpt_mul_ok(col, m->max_batch, &n))
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_model_create: layer %zu too large", i);
  DPT_TRY(alloc_floats(be, n, sizeof(float), &L->aux));
  return alloc_floats(be, col, sizeof(float), &L->daux);
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
  size_t max_plane = 1;
  for (size_t i = 0; i < m->num_layers && st == DPT_OK; ++i)
    st = alloc_layer(m, i, &max_plane);
  if (st == DPT_OK) st = alloc_floats(be, m->num_params, sizeof(float), &m->params);
  if (st == DPT_OK) st = alloc_floats(be, m->num_params, sizeof(float), &m->grads);
  if (st == DPT_OK) st = alloc_floats(be, max_plane, sizeof(float), &m->ones);
  if (st == DPT_OK) st = dpt_buffer_fill_f32(m->ones, 0, max_plane, 1.0f);
  if (st != DPT_OK) {
    dpt_model_destroy(m);
    return st;
  }
  *out = m;
  return DPT_OK;
}

void dpt_model_destroy(dpt_model *m) {
  if (!m) return;
  for (size_t i = 0; i < m->num_layers; ++i) {
    dpt_buffer_free(m->layers[i].out);
    dpt_buffer_free(m->layers[i].dout);
    dpt_buffer_free(m->layers[i].aux);
    dpt_buffer_free(m->layers[i].daux);
  }
  dpt_buffer_free(m->params);
  dpt_buffer_free(m->grads);
  dpt_buffer_free(m->ones);
  free(m);
}

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

dpt_status dpt_model_init(dpt_model *m, uint64_t seed) {
  if (!m) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_init: model is NULL");
  float *host = malloc(m->num_params * sizeof(float));
  if (!host)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_model_init: cannot allocate %zu bytes",
                         m->num_params * sizeof(float));
  /* PyTorch: kaiming_uniform_(a=sqrt(5)) on the weight gives bound sqrt(6/((1+5) fan_in)) =
   * 1/sqrt(fan_in); the bias is uniform in the same bound. One RNG stream per tensor keeps a
   * tensor's values independent of the layers before it. */
  for (size_t i = 0; i < m->num_layers; ++i) {
    const layer *L = &m->layers[i];
    if (L->w_index == SIZE_MAX) continue;
    const dpt_tensor_info *wt = &m->tensors[L->w_index];
    size_t fan_in = wt->count / (size_t)wt->shape[0];
    double bound = 1.0 / sqrt((double)fan_in);
    size_t idx[2] = {L->w_index, L->b_index};
    for (int t = 0; t < 2; ++t) {
      const dpt_tensor_info *ti = &m->tensors[idx[t]];
      dpt_rng rng;
      dpt_rng_seed(&rng, seed, (uint64_t)idx[t]);
      for (size_t j = 0; j < ti->count; ++j)
        host[ti->offset + j] = (float)((2.0 * dpt_rng_uniform(&rng) - 1.0) * bound);
    }
  }
  dpt_status st = dpt_model_set_params(m, host);
  free(host);
  return st;
}

/* ---- forward / backward ------------------------------------------------------------------ */

/* The buffer holding layer i's input: the model input for layer 0, else the previous layer's
 * output (a flatten layer passes its input through). */
static const dpt_buffer *input_of(const dpt_model *m, size_t i, const dpt_buffer *x) {
  while (i > 0 && m->layers[i - 1].spec.kind == DPT_LAYER_FLATTEN)
    --i;
  return i == 0 ? x : m->layers[i - 1].out;
}

/* The buffer receiving the gradient wrt layer i's input, NULL when no layer needs it. */
static dpt_buffer *dinput_of(const dpt_model *m, size_t i) {
  while (i > 0 && m->layers[i - 1].spec.kind == DPT_LAYER_FLATTEN)
    --i;
  return i == 0 ? NULL : m->layers[i - 1].dout;
}

static dpt_status linear_forward(dpt_model *m, const layer *L, const dpt_buffer *in, size_t b) {
  const dpt_tensor_info *W = &m->tensors[L->w_index], *B = &m->tensors[L->b_index];
  size_t in_f = L->in_size, out_f = L->out_size;
  /* y[b, out] = x[b, in] * W[out, in]^T + bias */
  DPT_TRY(dpt_gemm(m->be, 0, 1, b, out_f, in_f, 1.0f, in, 0, in_f, m->params, W->offset, in_f, 0.0f,
                   L->out, 0, out_f));
  return dpt_bias_add(m->be, b, out_f, L->out, 0, m->params, B->offset);
}

static dpt_status conv2d_forward(dpt_model *m, const layer *L, const dpt_buffer *in, size_t b) {
  dpt_backend *be = m->be;
  const dpt_tensor_info *W = &m->tensors[L->w_index], *B = &m->tensors[L->b_index];
  size_t k = L->spec.kernel, K = L->in_c * k * k, P = L->out_h * L->out_w, co = L->out_c;
  dpt_conv_geom g = {b, L->in_c,        L->in_h,        L->in_w,         k,
                     k, L->spec.stride, L->spec.stride, L->spec.padding, L->spec.padding};
  DPT_TRY(dpt_im2col(be, &g, in, 0, L->aux, 0));
  for (size_t n = 0; n < b; ++n) {
    /* y_n[co, P] = W[co, K] * col_n[K, P] + bias[co] * ones[1, P] */
    DPT_TRY(dpt_gemm(be, 0, 0, co, P, K, 1.0f, m->params, W->offset, K, L->aux, n * K * P, P, 0.0f,
                     L->out, n * co * P, P));
    DPT_TRY(dpt_gemm(be, 0, 0, co, P, 1, 1.0f, m->params, B->offset, 1, m->ones, 0, P, 1.0f, L->out,
                     n * co * P, P));
  }
  return DPT_OK;
}

static dpt_status maxpool_forward(dpt_model *m, const layer *L, const dpt_buffer *in, size_t b) {
  dpt_pool_geom g = {b * L->in_c,    L->in_h,        L->in_w,       L->spec.kernel,
                     L->spec.kernel, L->spec.stride, L->spec.stride};
  return dpt_maxpool_fwd(m->be, &g, in, 0, L->out, 0, L->aux, 0);
}

static dpt_status forward(dpt_model *m, const dpt_buffer *x, size_t b) {
  for (size_t i = 0; i < m->num_layers; ++i) {
    layer *L = &m->layers[i];
    const dpt_buffer *in = input_of(m, i, x);
    switch (L->spec.kind) {
    case DPT_LAYER_LINEAR:
      DPT_TRY(linear_forward(m, L, in, b));
      break;
    case DPT_LAYER_RELU:
      DPT_TRY(dpt_relu_fwd(m->be, b * L->out_size, in, 0, L->out, 0));
      break;
    case DPT_LAYER_CONV2D:
      DPT_TRY(conv2d_forward(m, L, in, b));
      break;
    case DPT_LAYER_MAXPOOL:
      DPT_TRY(maxpool_forward(m, L, in, b));
      break;
    case DPT_LAYER_FLATTEN:
    case DPT_LAYER_KIND_COUNT: /* refused by plan */
      break;
    }
  }
  return DPT_OK;
}

/* din is NULL for the first layer: its input needs no gradient. */
static dpt_status linear_backward(dpt_model *m, const layer *L, const dpt_buffer *in,
                                  dpt_buffer *din, size_t b) {
  dpt_backend *be = m->be;
  const dpt_tensor_info *W = &m->tensors[L->w_index], *B = &m->tensors[L->b_index];
  size_t in_f = L->in_size, out_f = L->out_size;
  /* dW[out, in] = dy[b, out]^T * x[b, in];  db = column sums of dy;  dx = dy * W */
  DPT_TRY(dpt_gemm(be, 1, 0, out_f, in_f, b, 1.0f, L->dout, 0, out_f, in, 0, in_f, 0.0f, m->grads,
                   W->offset, in_f));
  DPT_TRY(dpt_bias_grad(be, b, out_f, L->dout, 0, 0.0f, m->grads, B->offset));
  if (din)
    DPT_TRY(dpt_gemm(be, 0, 0, b, in_f, out_f, 1.0f, L->dout, 0, out_f, m->params, W->offset, in_f,
                     0.0f, din, 0, in_f));
  return DPT_OK;
}

static dpt_status conv2d_backward(dpt_model *m, const layer *L, dpt_buffer *din, size_t b) {
  dpt_backend *be = m->be;
  const dpt_tensor_info *W = &m->tensors[L->w_index], *B = &m->tensors[L->b_index];
  size_t k = L->spec.kernel, K = L->in_c * k * k, P = L->out_h * L->out_w, co = L->out_c;
  dpt_conv_geom g1 = {1, L->in_c,        L->in_h,        L->in_w,         k,
                      k, L->spec.stride, L->spec.stride, L->spec.padding, L->spec.padding};
  for (size_t n = 0; n < b; ++n) {
    float beta = n == 0 ? 0.0f : 1.0f;
    /* dW[co, K] += dy_n[co, P] * col_n[K, P]^T;  db[co] += dy_n[co, P] * ones[P] */
    DPT_TRY(dpt_gemm(be, 0, 1, co, K, P, 1.0f, L->dout, n * co * P, P, L->aux, n * K * P, P, beta,
                     m->grads, W->offset, K));
    DPT_TRY(dpt_gemm(be, 0, 0, co, 1, P, 1.0f, L->dout, n * co * P, P, m->ones, 0, 1, beta,
                     m->grads, B->offset, 1));
    if (din) {
      /* dcol[K, P] = W[co, K]^T * dy_n[co, P];  dx_n = col2im(dcol) */
      DPT_TRY(dpt_gemm(be, 1, 0, K, P, co, 1.0f, m->params, W->offset, K, L->dout, n * co * P, P,
                       0.0f, L->daux, 0, P));
      DPT_TRY(dpt_col2im(be, &g1, L->daux, 0, din, n * L->in_size));
    }
  }
  return DPT_OK;
}

static dpt_status maxpool_backward(dpt_model *m, const layer *L, dpt_buffer *din, size_t b) {
  dpt_pool_geom g = {b * L->in_c,    L->in_h,        L->in_w,       L->spec.kernel,
                     L->spec.kernel, L->spec.stride, L->spec.stride};
  return dpt_maxpool_bwd(m->be, &g, L->dout, 0, L->aux, 0, din, 0);
}

/* Walks the layers in reverse; each reads its dout and writes its parameters' gradients and,
 * unless it is the first, the dout of the layer before it. */
static dpt_status backward(dpt_model *m, const dpt_buffer *x, size_t b) {
  for (size_t i = m->num_layers; i-- > 0;) {
    layer *L = &m->layers[i];
    if (L->spec.kind == DPT_LAYER_FLATTEN) continue;
    const dpt_buffer *in = input_of(m, i, x);
    dpt_buffer *din = dinput_of(m, i);
    switch (L->spec.kind) {
    case DPT_LAYER_LINEAR:
      DPT_TRY(linear_backward(m, L, in, din, b));
      break;
    case DPT_LAYER_RELU:
      if (din) DPT_TRY(dpt_relu_bwd(m->be, b * L->out_size, L->out, 0, L->dout, 0, din, 0));
      break;
    case DPT_LAYER_CONV2D:
      DPT_TRY(conv2d_backward(m, L, din, b));
      break;
    case DPT_LAYER_MAXPOOL:
      if (din) DPT_TRY(maxpool_backward(m, L, din, b));
      break;
    case DPT_LAYER_FLATTEN:
    case DPT_LAYER_KIND_COUNT: /* refused by plan */
      break;
    }
  }
  return DPT_OK;
}

static dpt_status check_batch(const dpt_model *m, const char *fn, const dpt_buffer *x,
                              const dpt_buffer *labels, size_t b) {
  if (!m) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: model is NULL", fn);
  if (!x || !labels) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: x/labels is NULL", fn);
  if (b == 0 || b > m->max_batch)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: batch %zu not in 1..%zu", fn, b, m->max_batch);
  if (dpt_buffer_size(x) < b * dpt_model_input_size(m) * sizeof(float))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: x holds %zu bytes, batch needs %zu", fn,
                         dpt_buffer_size(x), b * dpt_model_input_size(m) * sizeof(float));
  return DPT_OK;
}

dpt_status dpt_model_train_step(dpt_model *m, const dpt_buffer *x, const dpt_buffer *labels,
                                size_t b, float grad_scale, double *loss_sum, int64_t *correct) {
  DPT_TRY(check_batch(m, "dpt_model_train_step", x, labels, b));
  DPT_TRY(forward(m, x, b));
  layer *last = &m->layers[m->num_layers - 1]; /* never a flatten (checked in plan) */
  DPT_TRY(dpt_softmax_xent(m->be, b, m->spec.num_classes, last->out, 0, labels, 0, grad_scale,
                           last->dout, 0, loss_sum, correct));
  return backward(m, x, b);
}

dpt_status dpt_model_evaluate(dpt_model *m, const dpt_buffer *x, const dpt_buffer *labels, size_t b,
                              double *loss_sum, int64_t *correct) {
  DPT_TRY(check_batch(m, "dpt_model_evaluate", x, labels, b));
  DPT_TRY(forward(m, x, b));
  const layer *last = &m->layers[m->num_layers - 1];
  return dpt_softmax_xent(m->be, b, m->spec.num_classes, last->out, 0, labels, 0, 1.0f, NULL, 0,
                          loss_sum, correct);
}
