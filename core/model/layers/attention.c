/* Self-attention (PyTorch's MultiheadAttention, batch_first, [PAD] keys masked): plan, memory,
 * initialization, forward and backward. */
#include <math.h>

#include "base/size.h"
#include "base/error.h"
#include "core/model/layer.h"
#include "core/model/layer_util.h"

/* attention: nn.MultiheadAttention's tensors; the shape is kept. */
static dpt_status plan_attention(dpt_model *m, size_t i, dpt_sample_shape *x) {
  dpt_node *L = &m->layers[i];
  DPT_TRY(dpt_layer_need_seq(m, i, x));
  size_t F = x->w, H = L->spec.heads;
  if (H == 0 || F % H != 0)
    return LAYER_ERR(m, i, "has %zu heads, which do not divide its %zu features", H, F);
  if (!(L->spec.p >= 0.0f && L->spec.p < 1.0f))
    return LAYER_ERR(m, i, "has p %g, not in [0, 1)", (double)L->spec.p);
  const int64_t in_w[2] = {(int64_t)(3 * F), (int64_t)F}, in_b[1] = {(int64_t)(3 * F)};
  const int64_t out_w[2] = {(int64_t)F, (int64_t)F}, out_b[1] = {(int64_t)F};
  DPT_TRY(dpt_layer_add_tensor(m, i, 0, "in_proj_weight", 2, in_w, &L->w_index));
  DPT_TRY(dpt_layer_add_tensor(m, i, 0, "in_proj_bias", 1, in_b, &L->b_index));
  DPT_TRY(dpt_layer_add_tensor(m, i, 0, "out_proj.weight", 2, out_w, &L->w2_index));
  return dpt_layer_add_tensor(m, i, 0, "out_proj.bias", 1, out_b, &L->b2_index);
}

/* q, k, v, the probabilities (and after dropout) and the heads' outputs; their gradients are
 * shared by every attention layer. */
static dpt_status attention_alloc(dpt_model *m, size_t i, size_t n, shared_sizes *sh) {
  dpt_node *L = &m->layers[i];
  size_t S = L->ishape.h, probs;
  if (!dpt_mul_ok(S * S, m->max_batch * L->spec.heads, &probs))
    return LAYER_ERR(m, i, "attention probabilities for %zu samples are too large", m->max_batch);
  DPT_TRY(dpt_layer_alloc_floats(m, 3 * n, sizeof(float), &L->aux));
  DPT_TRY(dpt_layer_alloc_floats(m, probs, sizeof(float), &L->probs));
  if (L->spec.p > 0.0f) DPT_TRY(dpt_layer_alloc_floats(m, probs, sizeof(float), &L->probs_drop));
  DPT_TRY(dpt_layer_alloc_floats(m, n, sizeof(float), &L->ctx));
  if (3 * n > sh->qkv) sh->qkv = 3 * n;
  if (probs > sh->probs) sh->probs = probs;
  if (n > sh->ctx) sh->ctx = n;
  return DPT_OK;
}

/* xavier_uniform_ on in_proj_weight, out_proj.weight as linear, biases 0 (PyTorch's); with
 * init_std > 0 the weights normal(0, init_std). */
static void attention_init(const dpt_model *m, const dpt_node *L, uint64_t seed, float *host) {
  const double sd = L->spec.init_std;
  const dpt_tensor_info *in = &m->tensors[L->w_index];
  double fan = (double)(in->shape[0] + in->shape[1]);
  dpt_layer_init_tensor(m, L->w_index, seed, sqrt(6.0 / fan), sd, host);
  dpt_layer_init_tensor(m, L->w2_index, seed, 1.0 / sqrt((double)in->shape[1]), sd, host);
  dpt_layer_zero_tensor(m, L->b_index, host);
  dpt_layer_zero_tensor(m, L->b2_index, host);
}

/* Attention's sizes: S positions, F features, H heads of D features; the probabilities of head
 * h start at h * b * S * S ([heads, b, S, S]). */
typedef struct attn_dims {
  size_t S, F, H, D, b;
} attn_dims;

static attn_dims attn_dims_of(const dpt_node *L, size_t b) {
  attn_dims d = {L->ishape.h, L->ishape.w, L->spec.heads, L->ishape.w / L->spec.heads, b};
  return d;
}

/* Head h's dropout on the probabilities: the layer's generator with the head mixed in, rows
 * the samples (their place in the global batch), columns the head's S x S values. */
static dpt_dropout_params attn_dropout(const dpt_model *m, const dpt_node *L, size_t h) {
  dpt_dropout_params p = dpt_layer_dropout_params(m, L);
  p.seed ^= (uint64_t)(h + 1) * DPT_ATTN_HEAD_SEED_MIX;
  return p;
}

/* The probabilities from the scores in place (softmax over the unmasked keys) and, training
 * with p > 0, their dropout into probs_drop; *p receives the ones the product with V reads. */
static dpt_status attn_probs_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *x, size_t b,
                                     const dpt_buffer **p) {
  const attn_dims d = attn_dims_of(L, b);
  const size_t SS = d.S * d.S;
  const float scale = (float)(1.0 / sqrt((double)d.D));
  const int dropped = m->training && L->spec.p > 0.0f;
  dpt_attn_geom g = {b, d.H, d.S, d.S};
  *p = dropped ? L->probs_drop : L->probs;
  if (L->fuse == DPT_FUSE_ATTN_PROBS) {
    dpt_dropout_params dp = dpt_layer_dropout_params(m, L);
    return dpt_attn_probs_fwd(m->be, &g, scale, x, 0, 0, dropped ? &dp : NULL, L->probs, 0,
                              L->probs_drop, 0);
  }
  DPT_TRY(dpt_attn_softmax(m->be, &g, scale, x, 0, 0, L->probs, 0, L->probs, 0));
  for (size_t h = 0; dropped && h < d.H; ++h) {
    dpt_dropout_params dp = attn_dropout(m, L, h);
    DPT_TRY(dpt_dropout(m->be, b, SS, &dp, L->probs, h * b * SS, L->probs_drop, h * b * SS));
  }
  return DPT_OK;
}

static dpt_status attention_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                    const dpt_buffer *x, size_t b) {
  dpt_backend *be = m->be;
  const attn_dims d = attn_dims_of(L, b);
  const size_t S = d.S, F = d.F, F3 = 3 * F, SS = S * S, rows = b * S;
  const dpt_tensor_info *Wi = &m->tensors[L->w_index], *Wo = &m->tensors[L->w2_index];
  /* qkv[rows, 3F] = x W_in^T + b_in: q at column 0, k at F, v at 2F */
  DPT_TRY(dpt_gemm(be, 0, 1, rows, F3, F, 1.0f, in, 0, F, m->params, Wi->offset, F, 0.0f, L->aux, 0,
                   F3));
  DPT_TRY(dpt_bias_add(be, rows, F3, L->aux, 0, m->params, m->tensors[L->b_index].offset));
  /* scores_h,i[S, S] = q_h,i k_h,i^T, one batched gemm per head over the samples */
  for (size_t h = 0; h < d.H; ++h) {
    dpt_gemm_batch sc = {b, S * F3, S * F3, SS};
    DPT_TRY(dpt_gemm_batched(be, &sc, 0, 1, S, S, d.D, 1.0f, L->aux, h * d.D, F3, L->aux,
                             F + h * d.D, F3, 0.0f, L->probs, h * b * SS, S));
  }
  const dpt_buffer *p = NULL;
  DPT_TRY(attn_probs_forward(m, L, x, b, &p));
  /* ctx_h,i[S, D] = p_h,i[S, S] v_h,i[S, D], into the head's columns of ctx [rows, F] */
  for (size_t h = 0; h < d.H; ++h) {
    dpt_gemm_batch cb = {b, SS, S * F3, S * F};
    DPT_TRY(dpt_gemm_batched(be, &cb, 0, 0, S, d.D, S, 1.0f, p, h * b * SS, S, L->aux,
                             2 * F + h * d.D, F3, 0.0f, L->ctx, h * d.D, F));
  }
  /* y = ctx W_out^T + b_out */
  DPT_TRY(dpt_gemm(be, 0, 1, rows, F, F, 1.0f, L->ctx, 0, F, m->params, Wo->offset, F, 0.0f, L->out,
                   0, F));
  return dpt_bias_add(be, rows, F, L->out, 0, m->params, m->tensors[L->b2_index].offset);
}

static dpt_status attention_backward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                     dpt_buffer *din, size_t b) {
  dpt_backend *be = m->be;
  const attn_dims d = attn_dims_of(L, b);
  const size_t S = d.S, F = d.F, F3 = 3 * F, SS = S * S, rows = b * S;
  const dpt_tensor_info *Wi = &m->tensors[L->w_index], *Wo = &m->tensors[L->w2_index];
  const float scale = (float)(1.0 / sqrt((double)d.D));
  const int dropped = m->training && L->spec.p > 0.0f, fused = L->fuse == DPT_FUSE_ATTN_PROBS;
  const dpt_buffer *p = dropped ? L->probs_drop : L->probs;
  /* dW_out = dy^T ctx;  db_out = column sums of dy;  dctx = dy W_out */
  DPT_TRY(dpt_gemm(be, 1, 0, F, F, rows, 1.0f, L->dout, 0, F, L->ctx, 0, F, 0.0f, m->grads,
                   Wo->offset, F));
  DPT_TRY(dpt_bias_grad(be, rows, F, L->dout, 0, 0.0f, m->grads, m->tensors[L->b2_index].offset));
  DPT_TRY(dpt_gemm(be, 0, 0, rows, F, F, 1.0f, L->dout, 0, F, m->params, Wo->offset, F, 0.0f,
                   m->dctx, 0, F));
  for (size_t h = 0; h < d.H; ++h) {
    /* dp_h,i = dctx_h,i v_h,i^T;  dv_h,i = p_h,i^T dctx_h,i */
    dpt_gemm_batch dpb = {b, S * F, S * F3, SS}, dvb = {b, SS, S * F, S * F3};
    DPT_TRY(dpt_gemm_batched(be, &dpb, 0, 1, S, S, d.D, 1.0f, m->dctx, h * d.D, F, L->aux,
                             2 * F + h * d.D, F3, 0.0f, m->dprobs, h * b * SS, S));
    DPT_TRY(dpt_gemm_batched(be, &dvb, 1, 0, S, d.D, S, 1.0f, p, h * b * SS, S, m->dctx, h * d.D, F,
                             0.0f, m->dqkv, 2 * F + h * d.D, F3));
    if (dropped && !fused) {
      dpt_dropout_params dp = attn_dropout(m, L, h);
      DPT_TRY(dpt_dropout(be, b, SS, &dp, m->dprobs, h * b * SS, m->dprobs, h * b * SS));
    }
  }
  /* ds = softmax backward (in place, through the dropout when fused); dq = scale ds k;
   * dk = scale ds^T q */
  if (fused)
    DPT_TRY(dpt_attn_probs_bwd(be, d.H * rows, S, L->probs, 0, dropped ? L->probs_drop : NULL, 0,
                               L->spec.p, m->dprobs, 0, m->dprobs, 0));
  else
    DPT_TRY(dpt_softmax_bwd(be, d.H * rows, S, L->probs, 0, m->dprobs, 0, m->dprobs, 0));
  for (size_t h = 0; h < d.H; ++h) {
    dpt_gemm_batch qb = {b, SS, S * F3, S * F3};
    DPT_TRY(dpt_gemm_batched(be, &qb, 0, 0, S, d.D, S, scale, m->dprobs, h * b * SS, S, L->aux,
                             F + h * d.D, F3, 0.0f, m->dqkv, h * d.D, F3));
    DPT_TRY(dpt_gemm_batched(be, &qb, 1, 0, S, d.D, S, scale, m->dprobs, h * b * SS, S, L->aux,
                             h * d.D, F3, 0.0f, m->dqkv, F + h * d.D, F3));
  }
  /* dW_in = dqkv^T x;  db_in = column sums of dqkv;  dx = dqkv W_in */
  DPT_TRY(dpt_gemm(be, 1, 0, F3, F, rows, 1.0f, m->dqkv, 0, F3, in, 0, F, 0.0f, m->grads,
                   Wi->offset, F));
  DPT_TRY(dpt_bias_grad(be, rows, F3, m->dqkv, 0, 0.0f, m->grads, m->tensors[L->b_index].offset));
  if (!din) return DPT_OK;
  return dpt_gemm(be, 0, 0, rows, F, F3, 1.0f, m->dqkv, 0, F3, m->params, Wi->offset, F, 0.0f, din,
                  0, F);
}

const dpt_layer_ops dpt_layer_ops_ATTENTION = {
    .plan = plan_attention,
    .alloc = attention_alloc,
    .init = attention_init,
    .forward = attention_forward,
    .backward = attention_backward,
};
