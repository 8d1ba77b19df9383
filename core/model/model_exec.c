/* Forward and backward through the layer graph, one op-set call sequence per layer kind.
 *
 * Layers run in spec order forward and in reverse backward (the order puts every layer after
 * its inputs). A layer's output gradient (dout) may have several contributions, one per layer
 * that takes it as input: the first overwrites it, each later one is written to the scratch
 * buffer and added. A convolution goes through im2col over the whole batch and strided-batched
 * gemms: y_i[cout, oh*ow] = W[cout, cin*k*k] * col_i[cin*k*k, oh*ow], the bias added with a
 * rank-1 gemm against a vector of ones; its columns are recomputed in backward (except where the
 * column buffer still holds them: the forward's last convolution on devices), so one column
 * buffer serves every convolution. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/model/model_impl.h"

/* PyTorch's BatchNorm defaults. */
#define BN_MOMENTUM 0.1f
#define BN_EPS      1e-5f

const dpt_buffer *dpt_model_out_of(const dpt_model *m, int i, const dpt_buffer *x) {
  if (i < 0) return x;
  int s = m->layers[i].store;
  return s < 0 ? x : m->layers[s].out;
}

/* Where layer L's input j gradient goes: the input's dout when it is the first contribution,
 * else the scratch buffer (*add set: the caller adds it with add_gradient). NULL when the input
 * is the model input, which needs no gradient. */
static dpt_buffer *grad_target(dpt_model *m, const dpt_node *L, int j, int *add) {
  int src = L->src[j];
  int s = src < 0 ? -1 : m->layers[src].store;
  *add = 0;
  if (s < 0) return NULL;
  if (!m->grad_written[s]) {
    m->grad_written[s] = 1;
    return m->layers[s].dout;
  }
  *add = 1;
  return m->scratch;
}

/* The first use of a weight this step overwrites its gradient, a later one adds (a weight
 * shared by a tied linear and its embedding): the beta of that use's gemm. */
static float weight_beta(dpt_model *m, size_t w) {
  float beta = m->w_written[w] ? 1.0f : 0.0f;
  m->w_written[w] = 1;
  return beta;
}

static dpt_status add_gradient(dpt_model *m, const dpt_node *L, int j, size_t b) {
  const dpt_node *S = &m->layers[m->layers[L->src[j]].store];
  return dpt_axpy(m->be, b * S->out_size, 1.0f, m->scratch, 0, S->dout, 0);
}

static dpt_conv_geom conv_geom(const dpt_node *L, size_t b) {
  size_t k = L->spec.kernel, s = L->spec.stride, p = L->spec.padding;
  dpt_conv_geom g = {b, L->ishape.c, L->ishape.h, L->ishape.w, k, k, s, s, p, p};
  return g;
}

static dpt_pool_geom pool_geom(const dpt_node *L, size_t b) {
  if (L->spec.kind == DPT_LAYER_GLOBAL_AVGPOOL) {
    dpt_pool_geom g = {b * L->ishape.c, L->ishape.h, L->ishape.w, L->ishape.h,
                       L->ishape.w,     L->ishape.h, L->ishape.w};
    return g;
  }
  dpt_pool_geom g = {b * L->ishape.c, L->ishape.h,    L->ishape.w,   L->spec.kernel,
                     L->spec.kernel,  L->spec.stride, L->spec.stride};
  return g;
}

static dpt_bn_geom bn_geom(const dpt_node *L, size_t b) {
  dpt_bn_geom g = {b, L->oshape.c, L->oshape.h * L->oshape.w, BN_EPS};
  return g;
}

/* ---- forward ------------------------------------------------------------------------------- */

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
  if (L->b_index == SIZE_MAX) return DPT_OK;
  return dpt_bias_add(m->be, b, out_f, L->out, 0, m->params, m->tensors[L->b_index].offset);
}

/* The columns of L's input for images [n0, n0 + g->n) into col, unless col holds them already
 * (the backward of the forward's last convolution). */
static dpt_status conv_columns(dpt_model *m, const dpt_node *L, const dpt_conv_geom *g,
                               const dpt_buffer *in, size_t n0) {
  if (m->col_layer == L && m->col_in == in && m->col_n0 == n0 && m->col_nb == g->n) return DPT_OK;
  m->col_layer = NULL;
  DPT_TRY(dpt_im2col(m->be, g, in, n0 * L->in_size, m->col, 0));
  m->col_layer = L;
  m->col_in = in;
  m->col_n0 = n0;
  m->col_nb = g->n;
  return DPT_OK;
}

static dpt_status conv2d_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *in, size_t b) {
  dpt_backend *be = m->be;
  const dpt_tensor_info *W = &m->tensors[L->w_index];
  size_t k = L->spec.kernel, K = L->ishape.c * k * k, P = L->oshape.h * L->oshape.w,
         co = L->oshape.c, chunk = dpt_model_conv_chunk(m, L, b);
  for (size_t n0 = 0; n0 < b; n0 += chunk) {
    size_t nb = b - n0 < chunk ? b - n0 : chunk;
    dpt_conv_geom g = conv_geom(L, nb);
    DPT_TRY(conv_columns(m, L, &g, in, n0));
    /* y_i[co, P] = W[co, K] * col_i[K, P] (+ bias[co] * ones[1, P]) */
    dpt_gemm_batch y = {nb, 0, K * P, co * P};
    DPT_TRY(dpt_gemm_batched(be, &y, 0, 0, co, P, K, 1.0f, m->params, W->offset, K, m->col, 0, P,
                             0.0f, L->out, n0 * co * P, P));
    if (L->b_index == SIZE_MAX) continue;
    dpt_gemm_batch bias = {nb, 0, 0, co * P};
    DPT_TRY(dpt_gemm_batched(be, &bias, 0, 0, co, P, 1, 1.0f, m->params,
                             m->tensors[L->b_index].offset, 1, m->ones, 0, P, 1.0f, L->out,
                             n0 * co * P, P));
  }
  return DPT_OK;
}

/* Combines the replicas' batch statistics (mean, biased var over n_r values each) in aux into
 * the statistics of the whole batch, and returns its count in *count: two sums, the means
 * first, then each replica's squared deviations about the combined mean (Chan et al.). */
static dpt_status bn_sync_stats(dpt_model *m, const dpt_node *L, size_t b, double *count) {
  size_t C = L->oshape.c;
  double n_r = (double)(b * L->oshape.h * L->oshape.w);
  float *h = m->sync_host;
  double *acc = m->sync_acc;
  DPT_TRY(dpt_buffer_download(L->aux, 0, h, 2 * C * sizeof(float)));
  for (size_t c = 0; c < C; ++c)
    acc[c] = n_r * (double)h[c];
  acc[C] = n_r;
  DPT_TRY(m->sync_sum(m->sync_ctx, acc, C + 1));
  const double N = acc[C];
  for (size_t c = 0; c < C; ++c) {
    double mean = acc[c] / N, d = (double)h[c] - mean;
    h[c] = (float)mean;
    acc[c] = n_r * ((double)h[C + c] + d * d);
  }
  DPT_TRY(m->sync_sum(m->sync_ctx, acc, C));
  for (size_t c = 0; c < C; ++c)
    h[C + c] = (float)(acc[c] / N);
  *count = N;
  return dpt_buffer_upload(L->aux, 0, h, 2 * C * sizeof(float));
}

/* Sync-bn's backward: this replica's sums of dy * xhat and dy (its gamma and beta gradients,
 * at grads[w] and grads[bias]) summed over the replicas into aux[2C, 4C); *count becomes the
 * values per channel over all replicas. */
static dpt_status bn_sync_sums(dpt_model *m, const dpt_node *L, size_t w, size_t bias,
                               double *count) {
  size_t C = L->oshape.c;
  float *h = m->sync_host;
  double *acc = m->sync_acc;
  DPT_TRY(dpt_buffer_download(m->grads, w * sizeof(float), h, C * sizeof(float)));
  DPT_TRY(dpt_buffer_download(m->grads, bias * sizeof(float), h + C, C * sizeof(float)));
  for (size_t c = 0; c < 2 * C; ++c)
    acc[c] = (double)h[c];
  acc[2 * C] = *count;
  DPT_TRY(m->sync_sum(m->sync_ctx, acc, 2 * C + 1));
  for (size_t c = 0; c < 2 * C; ++c)
    h[c] = (float)acc[c];
  *count = acc[2 * C];
  return dpt_buffer_upload(L->aux, 2 * C * sizeof(float), h, 2 * C * sizeof(float));
}

/* Training: the batch statistics (combined over the replicas with sync-bn) into aux, and the
 * running statistics updated as PyTorch does (unbiased variance, momentum 0.1). */
static dpt_status bn_batch_stats(dpt_model *m, const dpt_node *L, const dpt_buffer *in, size_t b) {
  dpt_backend *be = m->be;
  size_t C = L->oshape.c, rm = L->buf_offset, rv = rm + C;
  dpt_bn_geom g = bn_geom(L, b);
  DPT_TRY(dpt_bn_stats(be, &g, in, 0, L->aux, 0, L->aux, C));
  double count = (double)(b * g.p);
  if (m->sync_sum) DPT_TRY(bn_sync_stats(m, L, b, &count));
  if (count < 2.0)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "layer %zu '%s' (%s): batch norm in training needs more than one value "
                         "per channel, the batch gives %g (a slice of %zu samples)",
                         (size_t)(L - m->layers), L->spec.name, dpt_layer_kind_name(L->spec.kind),
                         count, b);
  DPT_TRY(dpt_scale(be, 2 * C, 1.0f - BN_MOMENTUM, m->bufs, rm));
  DPT_TRY(dpt_axpy(be, C, BN_MOMENTUM, L->aux, 0, m->bufs, rm));
  DPT_TRY(dpt_axpy(be, C, (float)(BN_MOMENTUM * count / (count - 1.0)), L->aux, C, m->bufs, rv));
  return dpt_axpy(be, 1, 1.0f, m->ones, 0, m->bufs, rv + C); /* num_batches_tracked += 1 */
}

static dpt_status bn_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *in, size_t b) {
  size_t C = L->oshape.c, w = m->tensors[L->w_index].offset, bias = m->tensors[L->b_index].offset;
  dpt_bn_geom g = bn_geom(L, b);
  if (m->training) {
    DPT_TRY(bn_batch_stats(m, L, in, b));
    return dpt_bn_fwd(m->be, &g, in, 0, L->aux, 0, L->aux, C, m->params, w, m->params, bias, L->out,
                      0);
  }
  return dpt_bn_fwd(m->be, &g, in, 0, m->bufs, L->buf_offset, m->bufs, L->buf_offset + C, m->params,
                    w, m->params, bias, L->out, 0);
}

/* The layer's index is mixed into the seed, so two dropout layers draw different masks. */
static dpt_dropout_params dropout_params(const dpt_model *m, const dpt_node *L) {
  uint64_t layer = (uint64_t)(L - m->layers) + 1;
  dpt_dropout_params p = {L->spec.p, m->seed ^ (layer * 0x9e3779b97f4a7c15ULL), m->step,
                          m->first_sample};
  return p;
}

static dpt_dropout_params attn_dropout(const dpt_model *m, const dpt_node *L, size_t h) {
  dpt_dropout_params p = dropout_params(m, L);
  p.seed ^= (uint64_t)(h + 1) * 0xbf58476d1ce4e5b9ULL;
  return p;
}

static dpt_status dropout_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *in, size_t b) {
  if (!m->training || L->spec.p == 0.0f)
    return dpt_buffer_copy(L->out, 0, in, 0, b * L->out_size * sizeof(float));
  dpt_dropout_params p = dropout_params(m, L);
  return dpt_dropout(m->be, b, L->out_size, &p, in, 0, L->out, 0);
}

/* layernorm's rows: b samples of in_size / features rows each; aux holds the rows' mean at 0 and
 * their rstd after room for max_batch samples. */
static dpt_ln_geom ln_geom(const dpt_model *m, const dpt_node *L, size_t b) {
  size_t f = m->tensors[L->w_index].count;
  dpt_ln_geom g = {b * (L->in_size / f), f, L->spec.eps};
  return g;
}

static size_t ln_rstd_off(const dpt_model *m, const dpt_node *L) {
  return m->max_batch * (L->in_size / m->tensors[L->w_index].count);
}

static dpt_status layernorm_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                    size_t b) {
  dpt_ln_geom g = ln_geom(m, L, b);
  return dpt_layernorm_fwd(m->be, &g, in, 0, m->params, m->tensors[L->w_index].offset, m->params,
                           m->tensors[L->b_index].offset, L->out, 0, L->aux, 0, L->aux,
                           ln_rstd_off(m, L));
}

static dpt_status add_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *a,
                              const dpt_buffer *x, size_t b) {
  size_t n = b * L->out_size;
  const dpt_buffer *other = dpt_model_out_of(m, L->src[1], x);
  DPT_TRY(dpt_buffer_copy(L->out, 0, a, 0, n * sizeof(float)));
  return dpt_axpy(m->be, n, 1.0f, other, 0, L->out, 0);
}

/* ---- token models: embeddings and attention ---------------------------------------------- */

static dpt_status embedding_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *x,
                                    size_t b) {
  const dpt_tensor_info *W = &m->tensors[L->w_index];
  return dpt_embed_gather(m->be, b * L->oshape.h, (size_t)W->shape[0], (size_t)W->shape[1],
                          m->params, W->offset, x, 0, L->out, 0);
}

static dpt_status embedding_backward(dpt_model *m, const dpt_node *L, const dpt_buffer *x,
                                     size_t b) {
  const dpt_tensor_info *W = &m->tensors[L->w_index];
  if (weight_beta(m, L->w_index) == 0.0f)
    DPT_TRY(dpt_buffer_fill_f32(m->grads, W->offset, W->count, 0.0f));
  return dpt_embed_scatter_add(m->be, b * L->oshape.h, (size_t)W->shape[0], (size_t)W->shape[1],
                               L->dout, 0, x, 0, m->grads, W->offset);
}

/* y = x + table[0:S] at every sample (a bias over the sample's S x F values). */
static dpt_status position_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                   size_t b) {
  DPT_TRY(dpt_buffer_copy(L->out, 0, in, 0, b * L->out_size * sizeof(float)));
  return dpt_bias_add(m->be, b, L->out_size, L->out, 0, m->params, m->tensors[L->w_index].offset);
}

static dpt_status position_backward(dpt_model *m, const dpt_node *L, dpt_buffer *din, size_t b) {
  const dpt_tensor_info *W = &m->tensors[L->w_index];
  DPT_TRY(dpt_bias_grad(m->be, b, L->out_size, L->dout, 0, 0.0f, m->grads, W->offset));
  if (W->count > L->out_size) /* the positions beyond the sequence get no gradient */
    DPT_TRY(dpt_buffer_fill_f32(m->grads, W->offset + L->out_size, W->count - L->out_size, 0.0f));
  if (!din) return DPT_OK;
  return dpt_buffer_copy(din, 0, L->dout, 0, b * L->out_size * sizeof(float));
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
static dpt_dropout_params attn_dropout(const dpt_model *m, const dpt_node *L, size_t h);

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
  dpt_attn_geom g = {b, d.H, S, S};
  DPT_TRY(dpt_attn_softmax(be, &g, (float)(1.0 / sqrt((double)d.D)), x, 0, 0, L->probs, 0, L->probs,
                           0));
  const dpt_buffer *p = L->probs;
  if (m->training && L->spec.p > 0.0f) {
    for (size_t h = 0; h < d.H; ++h) {
      dpt_dropout_params dp = attn_dropout(m, L, h);
      DPT_TRY(dpt_dropout(be, b, SS, &dp, L->probs, h * b * SS, L->probs_drop, h * b * SS));
    }
    p = L->probs_drop;
  }
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
  const int dropped = m->training && L->spec.p > 0.0f;
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
    if (dropped) {
      dpt_dropout_params dp = attn_dropout(m, L, h);
      DPT_TRY(dpt_dropout(be, b, SS, &dp, m->dprobs, h * b * SS, m->dprobs, h * b * SS));
    }
  }
  /* ds = softmax backward (in place); dq = scale ds k;  dk = scale ds^T q */
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

/* ---- records: slice, embedding_bag, concat, interaction -------------------------------------- */

/* slice: y[:, j] = x[:, offset + j], the map being iota from offset. */
static dpt_status slice_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *in, size_t b) {
  return dpt_gather_cols(m->be, b, L->out_size, in, 0, L->in_size, m->iota, L->spec.offset, L->out,
                         0, L->out_size);
}

/* Its adjoint into a zeroed din: the columns outside the slice get 0. */
static dpt_status slice_backward(dpt_model *m, const dpt_node *L, dpt_buffer *din, size_t b) {
  if (!din) return DPT_OK;
  DPT_TRY(dpt_buffer_fill_f32(din, 0, b * L->in_size, 0.0f));
  return dpt_scatter_cols_add(m->be, b, L->out_size, L->dout, 0, L->out_size, m->iota,
                              L->spec.offset, din, 0, L->in_size);
}

/* embedding_bag: the ids at int32 slot `offset` of each record (the model input x, a record
 * every in_size slots). */
static dpt_status embedding_bag_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *x,
                                        size_t b) {
  const dpt_tensor_info *W = &m->tensors[L->w_index];
  return dpt_embed_bag(m->be, b, L->spec.bag, (size_t)W->shape[0], (size_t)W->shape[1],
                       (dpt_bag_mode)L->spec.mode, m->params, W->offset, x, L->spec.offset,
                       L->in_size, L->out, 0);
}

static dpt_status embedding_bag_backward(dpt_model *m, const dpt_node *L, const dpt_buffer *x,
                                         size_t b) {
  const dpt_tensor_info *W = &m->tensors[L->w_index];
  if (!m->sparse_table_grads) DPT_TRY(dpt_buffer_fill_f32(m->grads, W->offset, W->count, 0.0f));
  return dpt_embed_bag_bwd(m->be, b, L->spec.bag, (size_t)W->shape[0], (size_t)W->shape[1],
                           (dpt_bag_mode)L->spec.mode, L->dout, 0, x, L->spec.offset, L->in_size,
                           m->grads, W->offset);
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
    dpt_buffer *din = grad_target(m, L, j, &add);
    if (!din) continue;
    /* din is written whole: a copy of its columns of dout */
    DPT_TRY(dpt_gather_cols(m->be, b, width[j], L->dout, 0, L->out_size, m->iota, first[j], din, 0,
                            width[j]));
    if (add) DPT_TRY(add_gradient(m, L, j, b));
  }
  return DPT_OK;
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

static dpt_status forward_layer(dpt_model *m, const dpt_node *L, const dpt_buffer *x, size_t b) {
  const dpt_buffer *in = dpt_model_out_of(m, L->src[0], x);
  switch (L->spec.kind) {
  case DPT_LAYER_LINEAR:
    return linear_forward(m, L, in, b);
  case DPT_LAYER_RELU:
    return dpt_relu_fwd(m->be, b * L->out_size, in, 0, L->out, 0);
  case DPT_LAYER_CONV2D:
    return conv2d_forward(m, L, in, b);
  case DPT_LAYER_MAXPOOL: {
    dpt_pool_geom g = pool_geom(L, b);
    return dpt_maxpool_fwd(m->be, &g, in, 0, L->out, 0, L->aux, 0);
  }
  case DPT_LAYER_AVGPOOL:
  case DPT_LAYER_GLOBAL_AVGPOOL: {
    dpt_pool_geom g = pool_geom(L, b);
    return dpt_avgpool_fwd(m->be, &g, in, 0, L->out, 0);
  }
  case DPT_LAYER_BATCHNORM1D:
  case DPT_LAYER_BATCHNORM2D:
    return bn_forward(m, L, in, b);
  case DPT_LAYER_ADD:
    return add_forward(m, L, in, x, b);
  case DPT_LAYER_DROPOUT:
    return dropout_forward(m, L, in, b);
  case DPT_LAYER_LAYERNORM:
    return layernorm_forward(m, L, in, b);
  case DPT_LAYER_GELU:
    return dpt_gelu_fwd(m->be, b * L->out_size, (dpt_gelu_approx)L->spec.approximate, in, 0, L->out,
                        0);
  case DPT_LAYER_EMBEDDING:
    return embedding_forward(m, L, x, b);
  case DPT_LAYER_POSITION_EMBEDDING:
    return position_forward(m, L, in, b);
  case DPT_LAYER_ATTENTION:
    return attention_forward(m, L, in, x, b);
  case DPT_LAYER_SLICE:
    return slice_forward(m, L, in, b);
  case DPT_LAYER_EMBEDDING_BAG:
    return embedding_bag_forward(m, L, x, b);
  case DPT_LAYER_CONCAT:
    return concat_forward(m, L, in, x, b);
  case DPT_LAYER_INTERACTION:
    return interaction_forward(m, L, in, b);
  default: /* flatten: an alias */
    return DPT_OK;
  }
}

dpt_status dpt_model_forward(dpt_model *m, const dpt_buffer *x, size_t b) {
  m->col_layer = NULL; /* new inputs: columns of an earlier forward are stale */
  for (size_t i = 0; i < m->num_layers; ++i) {
    DPT_TRY(forward_layer(m, &m->layers[i], x, b));
    if (m->hook) m->hook(m->hook_ctx, i, 0, m->num_params);
  }
  return DPT_OK;
}

/* ---- backward ------------------------------------------------------------------------------ */

static dpt_status linear_backward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                  dpt_buffer *din, size_t b) {
  dpt_backend *be = m->be;
  const dpt_tensor_info *W = &m->tensors[L->w_index];
  size_t in_f, out_f;
  linear_dims(L, b, &b, &in_f, &out_f);
  /* dW[out, in] = dy[b, out]^T * x[b, in];  db = column sums of dy;  dx = dy * W */
  DPT_TRY(dpt_gemm(be, 1, 0, out_f, in_f, b, 1.0f, L->dout, 0, out_f, in, 0, in_f,
                   weight_beta(m, L->w_index), m->grads, W->offset, in_f));
  if (L->b_index != SIZE_MAX)
    DPT_TRY(dpt_bias_grad(be, b, out_f, L->dout, 0, 0.0f, m->grads, m->tensors[L->b_index].offset));
  if (!din) return DPT_OK;
  return dpt_gemm(be, 0, 0, b, in_f, out_f, 1.0f, L->dout, 0, out_f, m->params, W->offset, in_f,
                  0.0f, din, 0, in_f);
}

/* One pass over images [n0, n0 + nb): its share of dW and db (summed over the images in
 * order, the first pass overwriting), and its input gradient. */
static dpt_status conv2d_backward_chunk(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                        dpt_buffer *din, size_t n0, size_t nb) {
  dpt_backend *be = m->be;
  const dpt_tensor_info *W = &m->tensors[L->w_index];
  size_t k = L->spec.kernel, K = L->ishape.c * k * k, P = L->oshape.h * L->oshape.w,
         co = L->oshape.c, dy = n0 * co * P;
  float beta = n0 == 0 ? 0.0f : 1.0f;
  dpt_conv_geom g = conv_geom(L, nb);
  DPT_TRY(conv_columns(m, L, &g, in, n0));
  /* dW[co, K] += sum_i dy_i[co, P] * col_i[K, P]^T;  db[co] += sum_i dy_i[co, P] * ones[P] */
  dpt_gemm_batch dw = {nb, co * P, K * P, 0};
  DPT_TRY(dpt_gemm_batched(be, &dw, 0, 1, co, K, P, 1.0f, L->dout, dy, P, m->col, 0, P, beta,
                           m->grads, W->offset, K));
  if (L->b_index != SIZE_MAX) {
    dpt_gemm_batch db = {nb, co * P, 0, 0};
    DPT_TRY(dpt_gemm_batched(be, &db, 0, 0, co, 1, P, 1.0f, L->dout, dy, P, m->ones, 0, 1, beta,
                             m->grads, m->tensors[L->b_index].offset, 1));
  }
  if (!din) return DPT_OK;
  /* dcol_i[K, P] = W[co, K]^T * dy_i[co, P];  dx = col2im(dcol) */
  dpt_gemm_batch dc = {nb, 0, co * P, K * P};
  DPT_TRY(dpt_gemm_batched(be, &dc, 1, 0, K, P, co, 1.0f, m->params, W->offset, K, L->dout, dy, P,
                           0.0f, m->dcol, 0, P));
  return dpt_col2im(be, &g, m->dcol, 0, din, n0 * L->in_size);
}

static dpt_status conv2d_backward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                  dpt_buffer *din, size_t b) {
  size_t chunk = dpt_model_conv_chunk(m, L, b);
  for (size_t n0 = 0; n0 < b; n0 += chunk)
    DPT_TRY(conv2d_backward_chunk(m, L, in, din, n0, b - n0 < chunk ? b - n0 : chunk));
  return DPT_OK;
}

/* The sums of the gradients of gamma and beta are these layer's parameter gradients; with
 * sync-bn the input gradient needs them summed over the replicas (into aux[2C, 4C)). */
static dpt_status bn_backward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                              dpt_buffer *din, size_t b) {
  size_t C = L->oshape.c, w = m->tensors[L->w_index].offset, bias = m->tensors[L->b_index].offset;
  dpt_bn_geom g = bn_geom(L, b);
  DPT_TRY(dpt_bn_bwd_reduce(m->be, &g, L->dout, 0, in, 0, L->aux, 0, L->aux, C, m->grads, w,
                            m->grads, bias));
  const dpt_buffer *sums = m->grads;
  size_t s_xhat = w, s_dy = bias;
  double count = (double)(b * g.p);
  if (m->sync_sum) {
    DPT_TRY(bn_sync_sums(m, L, w, bias, &count));
    sums = L->aux;
    s_xhat = 2 * C;
    s_dy = 3 * C;
  }
  if (!din) return DPT_OK;
  return dpt_bn_bwd(m->be, &g, (size_t)count, L->dout, 0, in, 0, L->aux, 0, L->aux, C, m->params, w,
                    sums, s_xhat, sums, s_dy, din, 0);
}

/* The weight and bias gradients (sums over the rows, overwritten), then the input gradient. */
static dpt_status layernorm_backward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                     dpt_buffer *din, size_t b) {
  dpt_ln_geom g = ln_geom(m, L, b);
  size_t w = m->tensors[L->w_index].offset, rs = ln_rstd_off(m, L);
  DPT_TRY(dpt_layernorm_bwd_params(m->be, &g, L->dout, 0, in, 0, L->aux, 0, L->aux, rs, m->grads, w,
                                   m->grads, m->tensors[L->b_index].offset));
  if (!din) return DPT_OK;
  return dpt_layernorm_bwd(m->be, &g, L->dout, 0, in, 0, L->aux, 0, L->aux, rs, m->params, w, din,
                           0);
}

/* add: the output gradient goes to both inputs unchanged. */
static dpt_status add_backward(dpt_model *m, const dpt_node *L, size_t b) {
  size_t n = b * L->out_size;
  for (int j = 0; j < 2; ++j) {
    int src = L->src[j];
    int s = src < 0 ? -1 : m->layers[src].store;
    if (s < 0) continue;
    if (m->grad_written[s]) {
      DPT_TRY(dpt_axpy(m->be, n, 1.0f, L->dout, 0, m->layers[s].dout, 0));
    } else {
      m->grad_written[s] = 1;
      DPT_TRY(dpt_buffer_copy(m->layers[s].dout, 0, L->dout, 0, n * sizeof(float)));
    }
  }
  return DPT_OK;
}

/* The kinds with one input: parameter gradients, and the input gradient into din (NULL: the
 * model input, no gradient needed). */
static dpt_status backward_one(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                               dpt_buffer *din, size_t b) {
  switch (L->spec.kind) {
  case DPT_LAYER_LINEAR:
    return linear_backward(m, L, in, din, b);
  case DPT_LAYER_CONV2D:
    return conv2d_backward(m, L, in, din, b);
  case DPT_LAYER_BATCHNORM1D:
  case DPT_LAYER_BATCHNORM2D:
    return bn_backward(m, L, in, din, b);
  case DPT_LAYER_LAYERNORM:
    return layernorm_backward(m, L, in, din, b);
  case DPT_LAYER_POSITION_EMBEDDING:
    return position_backward(m, L, din, b);
  case DPT_LAYER_ATTENTION:
    return attention_backward(m, L, in, din, b);
  case DPT_LAYER_SLICE:
    return slice_backward(m, L, din, b);
  case DPT_LAYER_INTERACTION:
    return interaction_backward(m, L, in, din, b);
  default:
    break;
  }
  if (!din) return DPT_OK;
  switch (L->spec.kind) {
  case DPT_LAYER_RELU:
    return dpt_relu_bwd(m->be, b * L->out_size, L->out, 0, L->dout, 0, din, 0);
  case DPT_LAYER_MAXPOOL: {
    dpt_pool_geom g = pool_geom(L, b);
    return dpt_maxpool_bwd(m->be, &g, L->dout, 0, L->aux, 0, din, 0);
  }
  case DPT_LAYER_AVGPOOL:
  case DPT_LAYER_GLOBAL_AVGPOOL: {
    dpt_pool_geom g = pool_geom(L, b);
    return dpt_avgpool_bwd(m->be, &g, L->dout, 0, din, 0);
  }
  case DPT_LAYER_DROPOUT: {
    if (L->spec.p == 0.0f) return dpt_buffer_copy(din, 0, L->dout, 0, b * L->out_size * 4);
    dpt_dropout_params p = dropout_params(m, L);
    return dpt_dropout(m->be, b, L->out_size, &p, L->dout, 0, din, 0);
  }
  case DPT_LAYER_GELU:
    return dpt_gelu_bwd(m->be, b * L->out_size, (dpt_gelu_approx)L->spec.approximate, in, 0,
                        L->dout, 0, din, 0);
  default:
    return DPT_OK;
  }
}

static dpt_status backward_layer(dpt_model *m, const dpt_node *L, const dpt_buffer *x, size_t b) {
  switch (L->spec.kind) {
  case DPT_LAYER_FLATTEN:
    return DPT_OK;
  case DPT_LAYER_EMBEDDING:
    return embedding_backward(m, L, x, b);
  case DPT_LAYER_ADD:
    return add_backward(m, L, b);
  case DPT_LAYER_EMBEDDING_BAG:
    return embedding_bag_backward(m, L, x, b);
  case DPT_LAYER_CONCAT:
    return concat_backward(m, L, b);
  default: {
    int add = 0;
    dpt_buffer *din = grad_target(m, L, 0, &add);
    DPT_TRY(backward_one(m, L, dpt_model_out_of(m, L->src[0], x), din, b));
    return add ? add_gradient(m, L, 0, b) : DPT_OK;
  }
  }
}

/* Walks the layers in reverse; each reads its dout (complete: every layer taking its output
 * came later and has run) and writes its parameters' gradients and its inputs' gradients. */
dpt_status dpt_model_backward(dpt_model *m, const dpt_buffer *x, size_t b) {
  memset(m->grad_written, 0, m->num_layers);
  memset(m->w_written, 0, m->num_tensors);
  m->grad_written[m->num_layers - 1] = 1; /* the loss gradient */
  for (size_t i = m->num_layers; i-- > 0;) {
    DPT_TRY(backward_layer(m, &m->layers[i], x, b));
    if (m->hook) m->hook(m->hook_ctx, i, 1, m->ready_from[i]);
  }
  return DPT_OK;
}

/* ---- entry points -------------------------------------------------------------------------- */

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

static const dpt_node *last_layer(const dpt_model *m) {
  return &m->layers[m->num_layers - 1]; /* never a flatten (checked in plan) */
}

/* The loss's rows for b samples: one per sample, or per position of a token model. */
static size_t loss_rows(const dpt_model *m, size_t b) {
  return b * dpt_model_labels_per_sample(m);
}

/* The loss over the logits: softmax cross-entropy over the classes, or with one class binary
 * cross-entropy with logits (labels 0 or 1). */
static dpt_status loss(dpt_model *m, size_t b, const dpt_node *last, const dpt_buffer *labels,
                       float scale, dpt_buffer *dlogits, double *loss_sum, int64_t *correct) {
  if (m->spec.num_classes == 1)
    return dpt_bce_logits(m->be, loss_rows(m, b), last->out, 0, labels, 0, scale, dlogits, 0,
                          loss_sum, correct);
  return dpt_softmax_xent(m->be, loss_rows(m, b), m->spec.num_classes, last->out, 0, labels, 0,
                          scale, dlogits, 0, loss_sum, correct);
}

dpt_status dpt_model_train_step(dpt_model *m, const dpt_buffer *x, const dpt_buffer *labels,
                                size_t b, float grad_scale, double *loss_sum, int64_t *correct) {
  DPT_TRY(check_batch(m, "dpt_model_train_step", x, labels, b));
  m->training = 1;
  DPT_TRY(dpt_model_forward(m, x, b));
  const dpt_node *last = last_layer(m);
  DPT_TRY(loss(m, b, last, labels, grad_scale, last->dout, loss_sum, correct));
  return dpt_model_backward(m, x, b);
}

dpt_status dpt_model_evaluate(dpt_model *m, const dpt_buffer *x, const dpt_buffer *labels, size_t b,
                              double *loss_sum, int64_t *correct) {
  DPT_TRY(check_batch(m, "dpt_model_evaluate", x, labels, b));
  m->training = 0;
  DPT_TRY(dpt_model_forward(m, x, b));
  return loss(m, b, last_layer(m), labels, 1.0f, NULL, loss_sum, correct);
}

dpt_status dpt_model_logits(dpt_model *m, const dpt_buffer *x, size_t b, float *logits) {
  DPT_TRY(check_batch(m, "dpt_model_logits", x, x, b));
  if (!logits) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_logits: logits is NULL");
  m->training = 0;
  DPT_TRY(dpt_model_forward(m, x, b));
  return dpt_buffer_download(last_layer(m)->out, 0, logits,
                             loss_rows(m, b) * m->spec.num_classes * sizeof(float));
}
