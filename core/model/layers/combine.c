/* The layers that combine or reshape their inputs: add (the residual sum), concat, slice, flatten
 * (an alias) and DLRM's dot interaction; plans, memory, forward and backward. */
#include <stdlib.h>

#include "base/size.h"
#include "base/error.h"
#include "core/model/layer.h"
#include "core/model/layer_util.h"

static dpt_status plan_add(dpt_model *m, size_t i, dpt_sample_shape *x) {
  const dpt_node *L = &m->layers[i];
  int b = L->src[1];
  dpt_sample_shape y = b == DPT_LAYER_INPUT_MODEL
                           ? (dpt_sample_shape){m->spec.in_c, m->spec.in_h, m->spec.in_w, 0, 0}
                           : m->layers[b].oshape;
  if (x->c != y.c || x->h != y.h || x->w != y.w)
    return LAYER_ERR(m, i, "adds inputs of shapes %zu x %zu x %zu and %zu x %zu x %zu", x->c, x->h,
                     x->w, y.c, y.h, y.w);
  return DPT_OK;
}

/* With fuse_relu the ReLU reading this layer runs here (add_relu): out holds its output. */
static dpt_status add_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *a,
                              const dpt_buffer *x, size_t b) {
  size_t n = b * L->out_size;
  const dpt_buffer *other = dpt_model_out_of(m, L->src[1], x);
  if (L->fuse_relu) return dpt_add_relu(m->be, n, a, 0, other, 0, L->out, 0);
  DPT_TRY(dpt_buffer_copy(L->out, 0, a, 0, n * sizeof(float)));
  return dpt_axpy(m->be, n, 1.0f, other, 0, L->out, 0);
}

/* With fuse_relu, the masked gradient (relu_bwd over out): written straight into the first
 * input's dout where that is its first contribution, else into dout in place. *g is where it
 * is, *first whether the first input has it. */
static dpt_status add_relu_backward(dpt_model *m, const dpt_node *L, size_t n, const dpt_buffer **g,
                                    int *first) {
  const int s0 = dpt_layer_store_of(m, L->src[0]);
  *first = s0 >= 0 && s0 != dpt_layer_store_of(m, L->src[1]) && !m->grad_written[s0];
  dpt_buffer *to = *first ? m->layers[s0].dout : L->dout;
  if (*first) m->grad_written[s0] = 1;
  *g = to;
  return dpt_relu_bwd(m->be, n, L->out, 0, L->dout, 0, to, 0);
}

/* add: the output gradient goes to both inputs unchanged (with fuse_relu, masked first). */
static dpt_status add_backward(dpt_model *m, const dpt_node *L, size_t b) {
  size_t n = b * L->out_size;
  const dpt_buffer *g = L->dout;
  int first = 0;
  if (L->fuse_relu) DPT_TRY(add_relu_backward(m, L, n, &g, &first));
  for (int j = first; j < 2; ++j) {
    int s = dpt_layer_store_of(m, L->src[j]);
    if (s < 0) continue;
    if (m->grad_written[s]) {
      DPT_TRY(dpt_axpy(m->be, n, 1.0f, g, 0, m->layers[s].dout, 0));
    } else {
      m->grad_written[s] = 1;
      DPT_TRY(dpt_buffer_copy(m->layers[s].dout, 0, g, 0, n * sizeof(float)));
    }
  }
  return DPT_OK;
}

static dpt_status add_bwd(dpt_model *m, const dpt_node *L, const dpt_buffer *x, size_t b) {
  (void)x;
  return add_backward(m, L, b);
}

const dpt_layer_ops dpt_layer_ops_ADD = {
    .num_inputs = 2,
    .plan = plan_add,
    .forward = add_forward,
    .backward_all = add_bwd,
};

/* concat: two vectors, the first's values then the second's. */
static dpt_status plan_concat(dpt_model *m, size_t i, dpt_sample_shape *x) {
  dpt_sample_shape y = dpt_layer_input_shape(m, i, 1);
  if (!x->flat || !y.flat)
    return LAYER_ERR(m, i,
                     "concatenates vectors, not inputs of shapes %zu x %zu x %zu and %zu x "
                     "%zu x %zu (the model input and images are not vectors)",
                     x->c, x->h, x->w, y.c, y.h, y.w);
  if (x->c + y.c > INT32_MAX) return LAYER_ERR(m, i, "output beyond 2^31 - 1 values");
  *x = dpt_layer_vector_shape(x->c + y.c);
  return DPT_OK;
}

/* The maps: iota, from 0 (forward) or from an input's first column. */
static dpt_status concat_alloc(dpt_model *m, size_t i, size_t n, shared_sizes *sh) {
  const dpt_node *L = &m->layers[i];
  (void)n;
  if (L->out_size > sh->iota) sh->iota = L->out_size;
  return DPT_OK;
}

/* concat: the first input into columns [0, a), the second into [a, a + c). */
static dpt_status concat_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                 const dpt_buffer *x, size_t b) {
  size_t a = L->in_size, c = L->out_size - a;
  DPT_TRY(dpt_gather_cols(m->be, b, a, in, 0, a, m->iota, 0, L->out, 0, L->out_size));
  return dpt_gather_cols(m->be, b, c, dpt_model_out_of(m, L->src[1], x), 0, c, m->iota, 0, L->out,
                         a, L->out_size);
}

static dpt_status concat_backward(dpt_model *m, const dpt_node *L, size_t b) {
  size_t width[2] = {L->in_size, L->out_size - L->in_size}, first[2] = {0, L->in_size};
  for (int j = 0; j < 2; ++j) {
    int add = 0;
    dpt_buffer *din = dpt_layer_grad_target(m, L, j, &add);
    if (!din) continue;
    /* din is written whole: a copy of its columns of dout */
    DPT_TRY(dpt_gather_cols(m->be, b, width[j], L->dout, 0, L->out_size, m->iota, first[j], din, 0,
                            width[j]));
    if (add) DPT_TRY(dpt_layer_add_gradient(m, L, j, b));
  }
  return DPT_OK;
}

static dpt_status concat_bwd(dpt_model *m, const dpt_node *L, const dpt_buffer *x, size_t b) {
  (void)x;
  return concat_backward(m, L, b);
}

const dpt_layer_ops dpt_layer_ops_CONCAT = {
    .num_inputs = 2,
    .plan = plan_concat,
    .alloc = concat_alloc,
    .forward = concat_forward,
    .backward_all = concat_bwd,
};

/* slice: floats [offset, offset + size) of the model input or of a vector. */
static dpt_status plan_slice(dpt_model *m, size_t i, dpt_sample_shape *x) {
  dpt_node *L = &m->layers[i];
  DPT_TRY(dpt_layer_need_records(m, i));
  if (L->src[0] != DPT_LAYER_INPUT_MODEL && !x->flat)
    return LAYER_ERR(m, i, "needs the model input or a vector, not a %zu x %zu x %zu input", x->c,
                     x->h, x->w);
  if (L->spec.size == 0) return LAYER_ERR(m, i, "has size 0");
  if (L->spec.offset > L->in_size || L->spec.size > L->in_size - L->spec.offset)
    return LAYER_ERR(m, i, "takes floats [%zu, %zu + %zu) beyond its input's %zu", L->spec.offset,
                     L->spec.offset, L->spec.size, L->in_size);
  if (L->in_size > INT32_MAX) return LAYER_ERR(m, i, "has an input beyond 2^31 - 1 values");
  *x = dpt_layer_vector_shape(L->spec.size);
  return DPT_OK;
}

/* The map: iota from offset. */
static dpt_status slice_alloc(dpt_model *m, size_t i, size_t n, shared_sizes *sh) {
  const dpt_node *L = &m->layers[i];
  (void)n;
  if (L->in_size > sh->iota) sh->iota = L->in_size;
  return DPT_OK;
}

/* slice: y[:, j] = x[:, offset + j], the map being iota from offset. */
static dpt_status slice_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *in, size_t b) {
  return dpt_gather_cols(m->be, b, L->out_size, in, 0, L->in_size, m->iota, L->spec.offset, L->out,
                         0, L->out_size);
}

static dpt_status slice_fwd(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                            const dpt_buffer *x, size_t b) {
  (void)x;
  return slice_forward(m, L, in, b);
}

/* Its adjoint into a zeroed din: the columns outside the slice get 0. */
static dpt_status slice_backward(dpt_model *m, const dpt_node *L, dpt_buffer *din, size_t b) {
  if (!din) return DPT_OK;
  DPT_TRY(dpt_buffer_fill_f32(din, 0, b * L->in_size, 0.0f));
  return dpt_scatter_cols_add(m->be, b, L->out_size, L->dout, 0, L->out_size, m->iota,
                              L->spec.offset, din, 0, L->in_size);
}

static dpt_status slice_bwd(dpt_model *m, const dpt_node *L, const dpt_buffer *in, dpt_buffer *din,
                            size_t b) {
  (void)in;
  return slice_backward(m, L, din, b);
}

const dpt_layer_ops dpt_layer_ops_SLICE = {
    .plan = plan_slice,
    .alloc = slice_alloc,
    .forward = slice_fwd,
    .backward = slice_bwd,
};

/* flatten: its input as a vector; an alias (no memory, no work). */
static dpt_status plan_flatten(dpt_model *m, size_t i, dpt_sample_shape *x) {
  *x = (dpt_sample_shape){m->layers[i].in_size, 1, 1, 1, 0};
  return DPT_OK;
}

const dpt_layer_ops dpt_layer_ops_FLATTEN = {
    .flags = DPT_LAYER_ALIAS,
    .plan = plan_flatten,
};

/* interaction: K vectors of size features to the first one and the K (K - 1) / 2 dot products. */
static dpt_status plan_interaction(dpt_model *m, size_t i, dpt_sample_shape *x) {
  dpt_node *L = &m->layers[i];
  size_t d = L->spec.size;
  if (!x->flat)
    return LAYER_ERR(m, i, "needs a vector of K vectors, not a %zu x %zu x %zu input", x->c, x->h,
                     x->w);
  if (d == 0) return LAYER_ERR(m, i, "has size 0");
  if (L->in_size % d != 0 || L->in_size / d < 2)
    return LAYER_ERR(m, i, "input of %zu values is not a multiple (2 or more) of its size %zu",
                     L->in_size, d);
  size_t K = L->in_size / d;
  if (K > 46340) return LAYER_ERR(m, i, "has %zu vectors, more than 46340", K);
  *x = dpt_layer_vector_shape(d + K * (K - 1) / 2);
  return DPT_OK;
}

/* interaction: the pairs (i, j), i > j, of Z [K, K] in torch.tril_indices(K, K, -1) order (row
 * by row), as flat indices i K + j; Z [max_batch, K, K] shared. */
static dpt_status alloc_interaction(dpt_model *m, size_t i, shared_sizes *sh) {
  dpt_node *L = &m->layers[i];
  size_t K = L->in_size / L->spec.size, T = K * (K - 1) / 2, z;
  if (!dpt_mul_ok(K * K, m->max_batch, &z))
    return LAYER_ERR(m, i, "interactions for %zu samples are too large", m->max_batch);
  int32_t *map = malloc((T ? T : 1) * sizeof(int32_t));
  if (!map) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_model_create: out of host memory");
  size_t n = 0;
  for (size_t r = 1; r < K; ++r)
    for (size_t c = 0; c < r; ++c)
      map[n++] = (int32_t)(r * K + c);
  dpt_status st = dpt_layer_upload_i32(m, map, T, &L->map);
  free(map);
  if (z > sh->z) sh->z = z;
  if (L->spec.size > sh->iota) sh->iota = L->spec.size;
  return st;
}

static dpt_status interaction_alloc(dpt_model *m, size_t i, size_t n, shared_sizes *sh) {
  (void)n;
  return alloc_interaction(m, i, sh);
}

/* interaction on X_i [K, d] (sample i's input): Z_i = X_i X_i^T [K, K] into the shared zbuf,
 * then the output [x0 (d), the pairs of Z_i below the diagonal (T)]. */
static dpt_status interaction_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                      size_t b) {
  size_t d = L->spec.size, K = L->in_size / d, T = L->out_size - d;
  dpt_gemm_batch zb = {b, K * d, K * d, K * K};
  DPT_TRY(
      dpt_gemm_batched(m->be, &zb, 0, 1, K, K, d, 1.0f, in, 0, d, in, 0, d, 0.0f, m->zbuf, 0, K));
  DPT_TRY(dpt_gather_cols(m->be, b, d, in, 0, L->in_size, m->iota, 0, L->out, 0, L->out_size));
  return dpt_gather_cols(m->be, b, T, m->zbuf, 0, K * K, L->map, 0, L->out, d, L->out_size);
}

static dpt_status interaction_fwd(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                  const dpt_buffer *x, size_t b) {
  (void)x;
  return interaction_forward(m, L, in, b);
}

/* dZ_i: the pairs' gradients at their places (0 elsewhere); dX_i = (dZ_i + dZ_i^T) X_i, then x0's
 * own gradient added to its columns. */
static dpt_status interaction_backward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                       dpt_buffer *din, size_t b) {
  size_t d = L->spec.size, K = L->in_size / d, T = L->out_size - d;
  if (!din) return DPT_OK;
  DPT_TRY(dpt_buffer_fill_f32(m->zbuf, 0, b * K * K, 0.0f));
  DPT_TRY(dpt_scatter_cols_add(m->be, b, T, L->dout, d, L->out_size, L->map, 0, m->zbuf, 0, K * K));
  dpt_gemm_batch gb = {b, K * K, K * d, K * d};
  DPT_TRY(
      dpt_gemm_batched(m->be, &gb, 0, 0, K, d, K, 1.0f, m->zbuf, 0, K, in, 0, d, 0.0f, din, 0, d));
  DPT_TRY(
      dpt_gemm_batched(m->be, &gb, 1, 0, K, d, K, 1.0f, m->zbuf, 0, K, in, 0, d, 1.0f, din, 0, d));
  return dpt_scatter_cols_add(m->be, b, d, L->dout, 0, L->out_size, m->iota, 0, din, 0, L->in_size);
}

const dpt_layer_ops dpt_layer_ops_INTERACTION = {
    .plan = plan_interaction,
    .alloc = interaction_alloc,
    .forward = interaction_fwd,
    .backward = interaction_backward,
};
