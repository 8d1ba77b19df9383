/* The element-wise layers: relu, gelu (with the bias of the linear before it when the planner
 * fused them) and dropout (identity in evaluation), each a plan check, forward and backward. */
#include "base/error.h"
#include "core/model/layer.h"
#include "core/model/layer_util.h"

static dpt_status relu_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                               const dpt_buffer *x, size_t b) {
  (void)x;
  return dpt_relu_fwd(m->be, b * L->out_size, in, 0, L->out, 0);
}

static dpt_status relu_backward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                dpt_buffer *din, size_t b) {
  (void)in;
  if (!din) return DPT_OK;
  return dpt_relu_bwd(m->be, b * L->out_size, L->out, 0, L->dout, 0, din, 0);
}

const dpt_layer_ops dpt_layer_ops_RELU = {
    .forward = relu_forward,
    .backward = relu_backward,
};

static dpt_status plan_gelu(dpt_model *m, size_t i, dpt_sample_shape *x) {
  const dpt_node *L = &m->layers[i];
  (void)x;
  if (L->spec.approximate != DPT_GELU_ERF && L->spec.approximate != DPT_GELU_TANH)
    return LAYER_ERR(m, i, "has approximate %d, not 0 (erf) or 1 (tanh)", L->spec.approximate);
  return DPT_OK;
}

/* A GELU fused with the linear before it (DPT_FUSE_BIAS_GELU): the linear's rows and features,
 * its output (the pre-activation, bias added here) and its bias's offset. */
static dpt_buffer *fused_linear(dpt_model *m, const dpt_node *L, size_t b, size_t *rows,
                                size_t *cols, size_t *bias_off) {
  const dpt_node *F = &m->layers[L->src[0]];
  *cols = F->oshape.seq ? F->oshape.w : F->out_size;
  *rows = b * (F->out_size / *cols);
  *bias_off = m->tensors[F->b_index].offset;
  return F->out;
}

static dpt_status gelu_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                               const dpt_buffer *x, size_t b) {
  (void)x;
  if (L->fuse == DPT_FUSE_BIAS_GELU) {
    size_t rows, cols, bo;
    dpt_buffer *pre = fused_linear(m, L, b, &rows, &cols, &bo);
    return dpt_bias_gelu_fwd(m->be, rows, cols, (dpt_gelu_approx)L->spec.approximate, pre, 0,
                             m->params, bo, L->out, 0);
  }
  return dpt_gelu_fwd(m->be, b * L->out_size, (dpt_gelu_approx)L->spec.approximate, in, 0, L->out,
                      0);
}

static dpt_status gelu_backward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                dpt_buffer *din, size_t b) {
  if (L->fuse == DPT_FUSE_BIAS_GELU) { /* dx of the pre-activation and the linear's bias grad */
    size_t rows, cols, bo;
    fused_linear(m, L, b, &rows, &cols, &bo);
    return dpt_bias_gelu_bwd(m->be, rows, cols, (dpt_gelu_approx)L->spec.approximate, in, 0,
                             L->dout, 0, din ? din : m->layers[L->src[0]].dout, 0, 0.0f, m->grads,
                             bo);
  }
  if (!din) return DPT_OK;
  return dpt_gelu_bwd(m->be, b * L->out_size, (dpt_gelu_approx)L->spec.approximate, in, 0, L->dout,
                      0, din, 0);
}

const dpt_layer_ops dpt_layer_ops_GELU = {
    .plan = plan_gelu,
    .forward = gelu_forward,
    .backward = gelu_backward,
};

static dpt_status plan_dropout(dpt_model *m, size_t i, dpt_sample_shape *x) {
  const dpt_node *L = &m->layers[i];
  (void)x;
  if (!(L->spec.p >= 0.0f && L->spec.p < 1.0f))
    return LAYER_ERR(m, i, "has p %g, not in [0, 1)", (double)L->spec.p);
  return DPT_OK;
}

static dpt_status dropout_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *in, size_t b) {
  if (!m->training || L->spec.p == 0.0f)
    return dpt_buffer_copy(L->out, 0, in, 0, b * L->out_size * sizeof(float));
  dpt_dropout_params p = dpt_layer_dropout_params(m, L);
  return dpt_dropout(m->be, b, L->out_size, &p, in, 0, L->out, 0);
}

static dpt_status dropout_fwd(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                              const dpt_buffer *x, size_t b) {
  (void)x;
  return dropout_forward(m, L, in, b);
}

static dpt_status dropout_backward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                   dpt_buffer *din, size_t b) {
  (void)in;
  if (!din) return DPT_OK;
  if (L->spec.p == 0.0f) return dpt_buffer_copy(din, 0, L->dout, 0, b * L->out_size * 4);
  dpt_dropout_params p = dpt_layer_dropout_params(m, L);
  return dpt_dropout(m->be, b, L->out_size, &p, L->dout, 0, din, 0);
}

const dpt_layer_ops dpt_layer_ops_DROPOUT = {
    .plan = plan_dropout,
    .forward = dropout_fwd,
    .backward = dropout_backward,
};
