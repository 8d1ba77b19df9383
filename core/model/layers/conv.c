/* conv2d and the pools (maxpool, avgpool, global_avgpool): plans, memory, forward, backward and
 * conv2d's initialization. A convolution runs as the backend's direct convolution where it has
 * one (dpt_conv2d_fwd: oneDNN on the CPU), else through im2col and strided-batched gemms:
 * y_i[cout, oh*ow] = W[cout, cin*k*k] * col_i[cin*k*k, oh*ow], the bias added with a rank-1 gemm
 * against a vector of ones; its columns are recomputed in backward (except where the column
 * buffer still holds them: the forward's last convolution on devices). */
#include "base/size.h"
#include "base/error.h"
#include "core/model/layer.h"
#include "core/model/layer_util.h"

/* Images per im2col pass: the whole batch on devices (one dispatch per op), a few at a time on
 * the CPU so the columns stay in cache between im2col and gemm (the results are the same:
 * each image's gemm is unchanged, and the summed weight gradient takes the images in order). */
size_t dpt_model_conv_chunk(const dpt_model *m, const dpt_node *L, size_t b) {
  if (dpt_backend_get_kind(m->be) != DPT_BACKEND_CPU) return b;
  size_t per_image = L->ishape.c * L->spec.kernel * L->spec.kernel * L->oshape.h * L->oshape.w;
  size_t n = DPT_MODEL_CPU_COL_FLOATS / (per_image ? per_image : 1);
  return n < 1 ? 1 : n < b ? n : b;
}

/* The backend convolves directly: no columns, the whole batch in one call per op. */
static int conv_direct(const dpt_model *m) {
  return dpt_backend_supports(m->be, DPT_OP_CONV2D_FWD) &&
         dpt_backend_supports(m->be, DPT_OP_CONV2D_BWD_DATA) &&
         dpt_backend_supports(m->be, DPT_OP_CONV2D_BWD_WEIGHTS);
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

/* conv2d: weight [out, c, k, k], bias [out]; stride 0 means 1. */
static dpt_status plan_conv2d(dpt_model *m, size_t i, dpt_sample_shape *x) {
  dpt_node *L = &m->layers[i];
  DPT_TRY(dpt_layer_need_image(m, i, x));
  if (L->spec.size == 0) return LAYER_ERR(m, i, "has 0 output channels");
  if (L->spec.stride == 0) L->spec.stride = 1;
  size_t k = L->spec.kernel, s = L->spec.stride, p = L->spec.padding;
  dpt_conv_geom g = {1, x->c, x->h, x->w, k, k, s, s, p, p};
  size_t oh, ow;
  dpt_status st = dpt_conv_out_size(&g, &oh, &ow);
  if (st != DPT_OK) return LAYER_ERR(m, i, "%s", dpt_last_error());
  const int64_t ws[4] = {(int64_t)L->spec.size, (int64_t)x->c, (int64_t)k, (int64_t)k};
  DPT_TRY(dpt_layer_add_weight_and_bias(m, i, 4, ws));
  *x = (dpt_sample_shape){L->spec.size, oh, ow, 0, 0};
  return DPT_OK;
}

/* The im2col columns of its largest pass and its output plane of ones, shared. */
static dpt_status conv2d_alloc(dpt_model *m, size_t i, size_t n, shared_sizes *sh) {
  dpt_node *L = &m->layers[i];
  (void)n;
  if (conv_direct(m)) return DPT_OK;
  size_t k = L->ishape.c * L->spec.kernel * L->spec.kernel, plane = L->oshape.h * L->oshape.w, col;
  if (!dpt_mul_ok(k, plane, &col) ||
      !dpt_mul_ok(col, dpt_model_conv_chunk(m, L, m->max_batch), &col))
    return LAYER_ERR(m, i, "im2col columns for %zu samples are too large", m->max_batch);
  if (col > sh->col) sh->col = col;
  if (plane > sh->plane) sh->plane = plane;
  return DPT_OK;
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

static dpt_status conv2d_fwd(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                             const dpt_buffer *x, size_t b) {
  (void)x;
  if (!conv_direct(m)) return conv2d_forward(m, L, in, b);
  dpt_conv_geom g = conv_geom(L, b);
  int bias = L->b_index != SIZE_MAX;
  return dpt_conv2d_fwd(m->be, &g, L->oshape.c, in, 0, m->params, m->tensors[L->w_index].offset,
                        bias ? m->params : NULL, bias ? m->tensors[L->b_index].offset : 0, L->out,
                        0);
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

/* The direct backward: dW and db over the whole batch, then the input gradient. */
static dpt_status conv2d_backward_direct(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                         dpt_buffer *din, size_t b) {
  dpt_conv_geom g = conv_geom(L, b);
  size_t co = L->oshape.c, w_off = m->tensors[L->w_index].offset;
  int bias = L->b_index != SIZE_MAX;
  DPT_TRY(dpt_conv2d_bwd_weights(m->be, &g, co, in, 0, L->dout, 0, m->grads, w_off,
                                 bias ? m->grads : NULL, bias ? m->tensors[L->b_index].offset : 0));
  if (!din) return DPT_OK;
  return dpt_conv2d_bwd_data(m->be, &g, co, L->dout, 0, m->params, w_off, din, 0);
}

static dpt_status conv2d_backward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                  dpt_buffer *din, size_t b) {
  if (conv_direct(m)) return conv2d_backward_direct(m, L, in, din, b);
  size_t chunk = dpt_model_conv_chunk(m, L, b);
  for (size_t n0 = 0; n0 < b; n0 += chunk)
    DPT_TRY(conv2d_backward_chunk(m, L, in, din, n0, b - n0 < chunk ? b - n0 : chunk));
  return DPT_OK;
}

const dpt_layer_ops dpt_layer_ops_CONV2D = {
    .plan = plan_conv2d,
    .alloc = conv2d_alloc,
    .init = dpt_layer_init_weight_bias,
    .forward = conv2d_fwd,
    .backward = conv2d_backward,
};

/* maxpool / avgpool / global_avgpool: channels kept, each plane pooled. */
static dpt_status plan_pool(dpt_model *m, size_t i, dpt_sample_shape *x) {
  dpt_node *L = &m->layers[i];
  DPT_TRY(dpt_layer_need_image(m, i, x));
  if (L->spec.kind == DPT_LAYER_GLOBAL_AVGPOOL) {
    L->spec.kernel = x->h > x->w ? x->h : x->w; /* for messages only; the window is h x w */
    *x = (dpt_sample_shape){x->c, 1, 1, 0, 0};
    return DPT_OK;
  }
  if (L->spec.kernel == 0) return LAYER_ERR(m, i, "has kernel 0");
  if (L->spec.stride == 0) L->spec.stride = L->spec.kernel;
  dpt_pool_geom g = {x->c,           x->h,           x->w,          L->spec.kernel,
                     L->spec.kernel, L->spec.stride, L->spec.stride};
  size_t oh, ow;
  dpt_status st = dpt_pool_out_size(&g, &oh, &ow);
  if (st != DPT_OK) return LAYER_ERR(m, i, "%s", dpt_last_error());
  x->h = oh;
  x->w = ow;
  return DPT_OK;
}

/* maxpool: the int32 argmax of every output. */
static dpt_status maxpool_alloc(dpt_model *m, size_t i, size_t n, shared_sizes *sh) {
  (void)sh;
  return dpt_layer_alloc_floats(m, n, sizeof(int32_t), &m->layers[i].aux);
}

static dpt_status maxpool_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                  const dpt_buffer *x, size_t b) {
  (void)x;
  dpt_pool_geom g = pool_geom(L, b);
  return dpt_maxpool_fwd(m->be, &g, in, 0, L->out, 0, L->aux, 0);
}

static dpt_status avgpool_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                  const dpt_buffer *x, size_t b) {
  (void)x;
  dpt_pool_geom g = pool_geom(L, b);
  return dpt_avgpool_fwd(m->be, &g, in, 0, L->out, 0);
}

static dpt_status maxpool_backward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                   dpt_buffer *din, size_t b) {
  (void)in;
  if (!din) return DPT_OK;
  dpt_pool_geom g = pool_geom(L, b);
  return dpt_maxpool_bwd(m->be, &g, L->dout, 0, L->aux, 0, din, 0);
}

static dpt_status avgpool_backward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                   dpt_buffer *din, size_t b) {
  (void)in;
  if (!din) return DPT_OK;
  dpt_pool_geom g = pool_geom(L, b);
  return dpt_avgpool_bwd(m->be, &g, L->dout, 0, din, 0);
}

const dpt_layer_ops dpt_layer_ops_MAXPOOL = {
    .plan = plan_pool,
    .alloc = maxpool_alloc,
    .forward = maxpool_forward,
    .backward = maxpool_backward,
};

const dpt_layer_ops dpt_layer_ops_AVGPOOL = {
    .plan = plan_pool,
    .forward = avgpool_forward,
    .backward = avgpool_backward,
};

const dpt_layer_ops dpt_layer_ops_GLOBAL_AVGPOOL = {
    .plan = plan_pool,
    .forward = avgpool_forward,
    .backward = avgpool_backward,
};
