/* The linear layer: its plan (a tie to an embedding's table included), forward, backward and
 * initialization (y = x W^T + b with W [out, in], on a vector or on each position). */
#include "base/error.h"
#include "core/model/layer.h"
#include "core/model/layer_util.h"

/* A tied linear uses embedding layer tie - 1's table [vocab, in] as its weight: out = vocab. */
static dpt_status plan_tie(dpt_model *m, size_t i, size_t in_f) {
  dpt_node *L = &m->layers[i];
  int e = L->spec.tie - 1;
  if (e < 0 || e >= (int)i || m->layers[e].spec.kind != DPT_LAYER_EMBEDDING)
    return LAYER_ERR(m, i, "is tied to layer %d, which is not an earlier embedding layer", e);
  const dpt_tensor_info *t = &m->tensors[m->layers[e].w_index];
  if (L->spec.size == 0) L->spec.size = (size_t)t->shape[0];
  if ((size_t)t->shape[1] != in_f || (size_t)t->shape[0] != L->spec.size)
    return LAYER_ERR(m, i,
                     "is tied to an embedding of %lld x %lld, which cannot map %zu features to "
                     "%zu outputs",
                     (long long)t->shape[0], (long long)t->shape[1], in_f, L->spec.size);
  L->w_index = m->layers[e].w_index;
  if (L->spec.no_bias) return DPT_OK;
  const int64_t bs[1] = {(int64_t)L->spec.size};
  return dpt_layer_add_tensor(m, i, 0, "bias", 1, bs, &L->b_index);
}

/* linear on a vector, or on each position of a sequence (its last dimension). */
static dpt_status plan_linear(dpt_model *m, size_t i, dpt_sample_shape *x) {
  dpt_node *L = &m->layers[i];
  size_t in_f = x->seq ? x->w : L->in_size;
  if (L->spec.tie)
    DPT_TRY(plan_tie(m, i, in_f));
  else {
    if (L->spec.size == 0) return LAYER_ERR(m, i, "has size 0");
    const int64_t ws[2] = {(int64_t)L->spec.size, (int64_t)in_f};
    DPT_TRY(dpt_layer_add_weight_and_bias(m, i, 2, ws));
  }
  *x = x->seq ? (dpt_sample_shape){1, x->h, L->spec.size, 0, 1}
              : (dpt_sample_shape){L->spec.size, 1, 1, 1, 0};
  return DPT_OK;
}

/* A linear layer's rows (samples, or positions of a sequence) and features in and out. */
static void linear_dims(const dpt_node *L, size_t b, size_t *rows, size_t *in_f, size_t *out_f) {
  int seq = L->ishape.seq;
  *rows = seq ? b * L->ishape.h : b;
  *in_f = seq ? L->ishape.w : L->in_size;
  *out_f = seq ? L->oshape.w : L->out_size;
}

static dpt_status linear_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *in, size_t b) {
  const dpt_tensor_info *W = &m->tensors[L->w_index];
  size_t in_f, out_f;
  linear_dims(L, b, &b, &in_f, &out_f);
  /* y[b, out] = x[b, in] * W[out, in]^T + bias */
  DPT_TRY(dpt_gemm(m->be, 0, 1, b, out_f, in_f, 1.0f, in, 0, in_f, m->params, W->offset, in_f, 0.0f,
                   L->out, 0, out_f));
  if (L->b_index == SIZE_MAX || L->fuse == DPT_FUSE_BIAS_TO_NEXT) return DPT_OK; /* GELU adds it */
  return dpt_bias_add(m->be, b, out_f, L->out, 0, m->params, m->tensors[L->b_index].offset);
}

static dpt_status linear_fwd(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                             const dpt_buffer *x, size_t b) {
  (void)x;
  return linear_forward(m, L, in, b);
}

static dpt_status linear_backward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                  dpt_buffer *din, size_t b) {
  dpt_backend *be = m->be;
  const dpt_tensor_info *W = &m->tensors[L->w_index];
  size_t in_f, out_f;
  linear_dims(L, b, &b, &in_f, &out_f);
  /* dW[out, in] = dy[b, out]^T * x[b, in];  db = column sums of dy;  dx = dy * W */
  DPT_TRY(dpt_gemm(be, 1, 0, out_f, in_f, b, 1.0f, L->dout, 0, out_f, in, 0, in_f,
                   dpt_layer_weight_beta(m, L->w_index), m->grads, W->offset, in_f));
  if (L->b_index != SIZE_MAX && L->fuse != DPT_FUSE_BIAS_TO_NEXT) /* else GELU's backward did */
    DPT_TRY(dpt_bias_grad(be, b, out_f, L->dout, 0, 0.0f, m->grads, m->tensors[L->b_index].offset));
  if (!din) return DPT_OK;
  return dpt_gemm(be, 0, 0, b, in_f, out_f, 1.0f, L->dout, 0, out_f, m->params, W->offset, in_f,
                  0.0f, din, 0, in_f);
}

const dpt_layer_ops dpt_layer_ops_LINEAR = {
    .flags = DPT_LAYER_CAN_TIE,
    .plan = plan_linear,
    .init = dpt_layer_init_weight_bias,
    .forward = linear_fwd,
    .backward = linear_backward,
};
