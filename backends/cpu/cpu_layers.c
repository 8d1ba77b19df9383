/* The layer ops of the cpu backend: batched gemm, batch normalization, average pooling,
 * dropout (include/dptrain/backend.h states what each computes). Like cpu_ops.c these are
 * plain loops that spell out the contract, since the other backends are tested against them:
 * sums accumulate in double, element-wise formulas run in float in the documented order. */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"

/* One dpt_cpu_gemm per item. A summed batch (stride_c 0) runs item 0 with the caller's beta
 * and the rest with beta 1, in order: bit for bit the loop of dpt_gemm calls it replaces. */
dpt_status dpt_cpu_gemm_batched(dpt_backend *be, const dpt_gemm_batched_args *a) {
  for (size_t i = 0; i < a->batch; ++i) {
    dpt_gemm_args g = a->g;
    g.a.off += i * a->stride_a;
    g.b.off += i * a->stride_b;
    g.c.off += i * a->stride_c;
    if (a->stride_c == 0 && i > 0) g.beta = 1.0f;
    dpt_status st = dpt_cpu_gemm(be, &g);
    if (st != DPT_OK) return st;
  }
  return DPT_OK;
}

/* ---- batch normalization ------------------------------------------------------------------
 * x is [n, c, p]: channel ch of sample i is the p contiguous values at (i*c + ch)*p. The
 * reductions walk channels in chunks with double accumulators on the stack, so x is read in
 * memory order even for p == 1 (batchnorm1d, where a channel is a strided column). */
enum { BN_CHUNK = 64 };

static inline float bn_invstd(float var, float eps) {
  return 1.0f / sqrtf(var + eps);
}

/* The p values of sample i, channel ch. */
static inline const float *bn_row(const dpt_bn_geom *g, const float *x, size_t i, size_t ch) {
  return x + (i * g->c + ch) * g->p;
}

/* Biased mean and variance, two passes in double: the mean, then the mean squared deviation. */
dpt_status dpt_cpu_bn_stats(dpt_backend *be, const dpt_bn_stats_args *a) {
  (void)be;
  const dpt_bn_geom *g = &a->g;
  const float *x = dpt_cpu_f32(a->x);
  float *mean = dpt_cpu_f32(a->mean), *var = dpt_cpu_f32(a->var);
  const double cnt = (double)g->n * (double)g->p;
  for (size_t c0 = 0; c0 < g->c; c0 += BN_CHUNK) {
    const size_t w = g->c - c0 < BN_CHUNK ? g->c - c0 : BN_CHUNK;
    double s[BN_CHUNK] = {0}, q[BN_CHUNK] = {0};
    for (size_t i = 0; i < g->n; ++i)
      for (size_t k = 0; k < w; ++k) {
        const float *row = bn_row(g, x, i, c0 + k);
        for (size_t j = 0; j < g->p; ++j)
          s[k] += row[j];
      }
    for (size_t k = 0; k < w; ++k)
      s[k] /= cnt;
    for (size_t i = 0; i < g->n; ++i)
      for (size_t k = 0; k < w; ++k) {
        const float *row = bn_row(g, x, i, c0 + k);
        for (size_t j = 0; j < g->p; ++j) {
          const double d = (double)row[j] - s[k];
          q[k] += d * d;
        }
      }
    for (size_t k = 0; k < w; ++k) {
      mean[c0 + k] = (float)s[k];
      var[c0 + k] = (float)(q[k] / cnt);
    }
  }
  return DPT_OK;
}

/* y = (x - mean) * invstd * gamma + beta, in float, left to right. */
dpt_status dpt_cpu_bn_fwd(dpt_backend *be, const dpt_bn_fwd_args *a) {
  (void)be;
  const dpt_bn_geom *g = &a->g;
  const float *x = dpt_cpu_f32(a->x), *mean = dpt_cpu_f32(a->mean), *var = dpt_cpu_f32(a->var);
  const float *gamma = dpt_cpu_f32(a->gamma), *beta = dpt_cpu_f32(a->beta);
  float *y = dpt_cpu_f32(a->y);
  for (size_t i = 0; i < g->n; ++i)
    for (size_t ch = 0; ch < g->c; ++ch) {
      const float m = mean[ch], inv = bn_invstd(var[ch], g->eps), gm = gamma[ch], bt = beta[ch];
      const size_t o = (i * g->c + ch) * g->p;
      for (size_t j = 0; j < g->p; ++j)
        y[o + j] = (x[o + j] - m) * inv * gm + bt;
    }
  return DPT_OK;
}

/* sum_dy and sum_dy_xhat per channel: xhat in float as bn_fwd has it, sums in double. */
dpt_status dpt_cpu_bn_bwd_reduce(dpt_backend *be, const dpt_bn_bwd_reduce_args *a) {
  (void)be;
  const dpt_bn_geom *g = &a->g;
  const float *x = dpt_cpu_f32(a->x), *dy = dpt_cpu_f32(a->dy);
  const float *mean = dpt_cpu_f32(a->mean), *var = dpt_cpu_f32(a->var);
  float *sum_dy = dpt_cpu_f32(a->sum_dy), *sum_dy_xhat = dpt_cpu_f32(a->sum_dy_xhat);
  for (size_t c0 = 0; c0 < g->c; c0 += BN_CHUNK) {
    const size_t w = g->c - c0 < BN_CHUNK ? g->c - c0 : BN_CHUNK;
    double s[BN_CHUNK] = {0}, sx[BN_CHUNK] = {0};
    float inv[BN_CHUNK];
    for (size_t k = 0; k < w; ++k)
      inv[k] = bn_invstd(var[c0 + k], g->eps);
    for (size_t i = 0; i < g->n; ++i)
      for (size_t k = 0; k < w; ++k) {
        const float *xr = bn_row(g, x, i, c0 + k), *dr = bn_row(g, dy, i, c0 + k);
        const float m = mean[c0 + k];
        for (size_t j = 0; j < g->p; ++j) {
          const float xhat = (xr[j] - m) * inv[k];
          s[k] += dr[j];
          sx[k] += (double)dr[j] * (double)xhat;
        }
      }
    for (size_t k = 0; k < w; ++k) {
      sum_dy[c0 + k] = (float)s[k];
      sum_dy_xhat[c0 + k] = (float)sx[k];
    }
  }
  return DPT_OK;
}

/* dx = k * (dy - a - xhat * b) with k = gamma * invstd, a = sum_dy / count,
 * b = sum_dy_xhat / count, all in float. */
dpt_status dpt_cpu_bn_bwd(dpt_backend *be, const dpt_bn_bwd_args *a) {
  (void)be;
  const dpt_bn_geom *g = &a->g;
  const float *x = dpt_cpu_f32(a->x), *dy = dpt_cpu_f32(a->dy), *mean = dpt_cpu_f32(a->mean);
  const float *var = dpt_cpu_f32(a->var), *gamma = dpt_cpu_f32(a->gamma);
  const float *sum_dy = dpt_cpu_f32(a->sum_dy), *sum_dy_xhat = dpt_cpu_f32(a->sum_dy_xhat);
  float *dx = dpt_cpu_f32(a->dx);
  const float count = (float)a->count;
  for (size_t i = 0; i < g->n; ++i)
    for (size_t ch = 0; ch < g->c; ++ch) {
      const float m = mean[ch], inv = bn_invstd(var[ch], g->eps), k = gamma[ch] * inv;
      const float ma = sum_dy[ch] / count, mb = sum_dy_xhat[ch] / count;
      const size_t o = (i * g->c + ch) * g->p;
      for (size_t j = 0; j < g->p; ++j) {
        const float xhat = (x[o + j] - m) * inv;
        dx[o + j] = k * (dy[o + j] - ma - xhat * mb);
      }
    }
  return DPT_OK;
}

/* ---- average pooling ---------------------------------------------------------------------- */

/* y = window sum (in double) / (kh*kw), rounded to float once. */
dpt_status dpt_cpu_avgpool_fwd(dpt_backend *be, const dpt_avgpool_fwd_args *a) {
  (void)be;
  const dpt_pool_geom *g = &a->g;
  const float *x = dpt_cpu_f32(a->in);
  float *y = dpt_cpu_f32(a->out);
  const double area = (double)(g->kh * g->kw);
  for (size_t p = 0; p < g->planes; ++p) {
    const float *xp = x + p * g->h * g->w;
    float *yp = y + p * a->out_h * a->out_w;
    for (size_t oy = 0; oy < a->out_h; ++oy)
      for (size_t ox = 0; ox < a->out_w; ++ox) {
        const float *win = xp + oy * g->stride_h * g->w + ox * g->stride_w;
        double s = 0.0;
        for (size_t ki = 0; ki < g->kh; ++ki)
          for (size_t kj = 0; kj < g->kw; ++kj)
            s += win[ki * g->w + kj];
        yp[oy * a->out_w + ox] = (float)(s / area);
      }
  }
  return DPT_OK;
}

/* dx = 0, then dy / (kh*kw) (in float) added to every element of each window, windows in
 * row-major order of the output. */
dpt_status dpt_cpu_avgpool_bwd(dpt_backend *be, const dpt_avgpool_bwd_args *a) {
  (void)be;
  const dpt_pool_geom *g = &a->g;
  const float *dy = dpt_cpu_f32(a->in);
  float *dx = dpt_cpu_f32(a->out);
  const float area = (float)(g->kh * g->kw);
  memset(dx, 0, g->planes * g->h * g->w * sizeof(float));
  for (size_t p = 0; p < g->planes; ++p) {
    float *dxp = dx + p * g->h * g->w;
    const float *dyp = dy + p * a->out_h * a->out_w;
    for (size_t oy = 0; oy < a->out_h; ++oy)
      for (size_t ox = 0; ox < a->out_w; ++ox) {
        const float v = dyp[oy * a->out_w + ox] / area;
        float *win = dxp + oy * g->stride_h * g->w + ox * g->stride_w;
        for (size_t ki = 0; ki < g->kh; ++ki)
          for (size_t kj = 0; kj < g->kw; ++kj)
            win[ki * g->w + kj] += v;
      }
  }
  return DPT_OK;
}

/* ---- dropout ------------------------------------------------------------------------------ */

/* y = keep ? x * scale : 0, the mask hashed from (key, global row, column) alone, so it does
 * not depend on how rows are split across calls or devices. y may equal x. */
dpt_status dpt_cpu_dropout(dpt_backend *be, const dpt_dropout_args *a) {
  (void)be;
  const float *x = dpt_cpu_f32(a->x);
  float *y = dpt_cpu_f32(a->y);
  for (size_t r = 0; r < a->rows; ++r) {
    const uint32_t hr = dpt_mix32(a->key ^ (uint32_t)(a->first_row + r));
    const float *xr = x + r * a->cols;
    float *yr = y + r * a->cols;
    for (size_t c = 0; c < a->cols; ++c) {
      const uint32_t h = dpt_mix32(hr ^ (uint32_t)c);
      yr[c] = (h >> 8) >= a->threshold ? xr[c] * a->scale : 0.0f;
    }
  }
  return DPT_OK;
}
