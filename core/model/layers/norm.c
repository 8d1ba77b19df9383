/* Batch norm (batchnorm2d, batchnorm1d; sync-bn's sums over the replicas) and layer norm:
 * plans, memory, initialization, forward and backward. */
#include <math.h>

#include "base/error.h"
#include "core/model/layer.h"
#include "core/model/layer_util.h"

/* PyTorch's BatchNorm defaults. */
#define BN_MOMENTUM 0.1f
#define BN_EPS      1e-5f

/* Batch and layer norm: weight 1, bias 0 (PyTorch's). */
static void norm_init(const dpt_model *m, const dpt_node *L, uint64_t seed, float *host) {
  (void)seed;
  const dpt_tensor_info *wt = &m->tensors[L->w_index];
  for (size_t j = 0; j < wt->count; ++j) {
    host[wt->offset + j] = 1.0f;
    host[m->tensors[L->b_index].offset + j] = 0.0f;
  }
}

static dpt_bn_geom bn_geom(const dpt_node *L, size_t b) {
  dpt_bn_geom g = {b, L->oshape.c, L->oshape.h * L->oshape.w, BN_EPS};
  return g;
}

/* batchnorm2d over [C, H, W] images, batchnorm1d over [C] vectors: weight and bias [C], then
 * the buffers running_mean, running_var [C] and num_batches_tracked (one float). */
static dpt_status plan_batchnorm(dpt_model *m, size_t i, dpt_sample_shape *x) {
  dpt_node *L = &m->layers[i];
  if (L->spec.kind == DPT_LAYER_BATCHNORM2D) DPT_TRY(dpt_layer_need_image(m, i, x));
  if (L->spec.kind == DPT_LAYER_BATCHNORM1D && !x->flat)
    return LAYER_ERR(m, i,
                     "needs a feature vector (after flatten or linear), not a %zu x %zu x "
                     "%zu image",
                     x->c, x->h, x->w);
  const int64_t c[1] = {(int64_t)x->c};
  DPT_TRY(dpt_layer_add_tensor(m, i, 0, "weight", 1, c, &L->w_index));
  DPT_TRY(dpt_layer_add_tensor(m, i, 0, "bias", 1, c, &L->b_index));
  L->buf_offset = m->num_buffer_floats;
  DPT_TRY(dpt_layer_add_tensor(m, i, 1, "running_mean", 1, c, NULL));
  DPT_TRY(dpt_layer_add_tensor(m, i, 1, "running_var", 1, c, NULL));
  return dpt_layer_add_tensor(m, i, 1, "num_batches_tracked", 0, c, NULL);
}

/* The step's mean and var [2C], then the combined sums [2C]. */
static dpt_status bn_alloc(dpt_model *m, size_t i, size_t n, shared_sizes *sh) {
  (void)n;
  (void)sh;
  dpt_node *L = &m->layers[i];
  return dpt_layer_alloc_floats(m, 4 * L->oshape.c, sizeof(float), &L->aux);
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

/* With fuse_relu the ReLU reading this layer runs here (bn_relu ops): out holds its output. */
static dpt_status bn_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *in, size_t b) {
  size_t C = L->oshape.c, w = m->tensors[L->w_index].offset, bias = m->tensors[L->b_index].offset;
  dpt_bn_geom g = bn_geom(L, b);
  const dpt_buffer *stats = m->bufs;
  size_t at = L->buf_offset;
  if (m->training) {
    DPT_TRY(bn_batch_stats(m, L, in, b));
    stats = L->aux;
    at = 0;
  }
  return (L->fuse_relu ? dpt_bn_relu_fwd : dpt_bn_fwd)(m->be, &g, in, 0, stats, at, stats, at + C,
                                                       m->params, w, m->params, bias, L->out, 0);
}

static dpt_status bn_fwd(dpt_model *m, const dpt_node *L, const dpt_buffer *in, const dpt_buffer *x,
                         size_t b) {
  (void)x;
  return bn_forward(m, L, in, b);
}

/* The sums of the gradients of gamma and beta are these layer's parameter gradients; with
 * sync-bn the input gradient needs them summed over the replicas (into aux[2C, 4C)). */
static dpt_status bn_backward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                              dpt_buffer *din, size_t b) {
  size_t C = L->oshape.c, w = m->tensors[L->w_index].offset, bias = m->tensors[L->b_index].offset;
  dpt_bn_geom g = bn_geom(L, b);
  if (L->fuse_relu)
    DPT_TRY(dpt_bn_relu_bwd_reduce(m->be, &g, L->dout, 0, L->out, 0, in, 0, L->aux, 0, L->aux, C,
                                   m->grads, w, m->grads, bias));
  else
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
  if (L->fuse_relu)
    return dpt_bn_relu_bwd(m->be, &g, (size_t)count, L->dout, 0, L->out, 0, in, 0, L->aux, 0,
                           L->aux, C, m->params, w, sums, s_xhat, sums, s_dy, din, 0);
  return dpt_bn_bwd(m->be, &g, (size_t)count, L->dout, 0, in, 0, L->aux, 0, L->aux, C, m->params, w,
                    sums, s_xhat, sums, s_dy, din, 0);
}

const dpt_layer_ops dpt_layer_ops_BATCHNORM2D = {
    .flags = DPT_LAYER_SYNC_STATS,
    .plan = plan_batchnorm,
    .alloc = bn_alloc,
    .init = norm_init,
    .forward = bn_fwd,
    .backward = bn_backward,
};

const dpt_layer_ops dpt_layer_ops_BATCHNORM1D = {
    .flags = DPT_LAYER_SYNC_STATS,
    .plan = plan_batchnorm,
    .alloc = bn_alloc,
    .init = norm_init,
    .forward = bn_fwd,
    .backward = bn_backward,
};

/* layernorm over the last dimension (a vector's features, an image's width): weight and bias
 * [features]; eps 0 becomes PyTorch's 1e-5. */
static dpt_status plan_layernorm(dpt_model *m, size_t i, dpt_sample_shape *x) {
  dpt_node *L = &m->layers[i];
  if (L->spec.eps == 0.0f) L->spec.eps = 1e-5f;
  if (!(L->spec.eps > 0.0f) || !isfinite(L->spec.eps))
    return LAYER_ERR(m, i, "has eps %g, not a positive number", (double)L->spec.eps);
  const int64_t f[1] = {(int64_t)(x->flat ? x->c : x->w)};
  DPT_TRY(dpt_layer_add_tensor(m, i, 0, "weight", 1, f, &L->w_index));
  return dpt_layer_add_tensor(m, i, 0, "bias", 1, f, &L->b_index);
}

/* The rows' mean and rstd: 2 per row of every sample. */
static dpt_status ln_alloc(dpt_model *m, size_t i, size_t n, shared_sizes *sh) {
  (void)sh;
  dpt_node *L = &m->layers[i];
  return dpt_layer_alloc_floats(m, 2 * (n / m->tensors[L->w_index].count), sizeof(float), &L->aux);
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

static dpt_status layernorm_fwd(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                const dpt_buffer *x, size_t b) {
  (void)x;
  return layernorm_forward(m, L, in, b);
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

const dpt_layer_ops dpt_layer_ops_LAYERNORM = {
    .plan = plan_layernorm,
    .alloc = ln_alloc,
    .init = norm_init,
    .forward = layernorm_fwd,
    .backward = layernorm_backward,
};
