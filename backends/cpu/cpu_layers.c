/* The layer ops of the cpu backend: batched gemm, average pooling, layer normalization, GELU
 * (include/dptrain/backend.h states what each computes; batch normalization is in cpu_bn.c,
 * dropout and the fused linear bias + GELU in cpu_fused.c). Like cpu_ops.c these are plain loops
 * that spell out the contract, since the other backends are tested against them: sums
 * accumulate in double, element-wise formulas run in float in the documented order. */
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

/* ---- layer normalization ------------------------------------------------------------------ */

/* Columns per pass of the parameter gradients' sums (double accumulators on the stack). */
enum { LN_CHUNK = 64 };

/* Per row: mean and biased variance in double (two passes), rounded to float once; rstd =
 * 1 / sqrt(var + eps) and y = (x - mean) * rstd * gamma + beta in float. */
dpt_status dpt_cpu_layernorm_fwd(dpt_backend *be, const dpt_layernorm_fwd_args *a) {
  (void)be;
  const size_t cols = a->g.cols;
  const float *x = dpt_cpu_f32(a->x), *gamma = dpt_cpu_f32(a->gamma), *beta = dpt_cpu_f32(a->beta);
  float *y = dpt_cpu_f32(a->y), *mean = dpt_cpu_f32(a->mean), *rstd = dpt_cpu_f32(a->rstd);
  for (size_t r = 0; r < a->g.rows; ++r) {
    const float *xr = x + r * cols;
    float *yr = y + r * cols;
    double s = 0.0, q = 0.0;
    for (size_t c = 0; c < cols; ++c)
      s += xr[c];
    const double md = s / (double)cols;
    for (size_t c = 0; c < cols; ++c)
      q += ((double)xr[c] - md) * ((double)xr[c] - md);
    const float m = (float)md, inv = 1.0f / sqrtf((float)(q / (double)cols) + a->g.eps);
    mean[r] = m;
    rstd[r] = inv;
    for (size_t c = 0; c < cols; ++c)
      yr[c] = (xr[c] - m) * inv * gamma[c] + beta[c];
  }
  return DPT_OK;
}

/* Per row, with xhat = (x - mean) * rstd and gd = dy * gamma in float: the means of gd and
 * gd * xhat in double, rounded to float, then dx = rstd * (gd - mean(gd) - xhat * mean(gd xhat)).
 */
dpt_status dpt_cpu_layernorm_bwd(dpt_backend *be, const dpt_layernorm_bwd_args *a) {
  (void)be;
  const size_t cols = a->g.cols;
  const float *x = dpt_cpu_f32(a->x), *dy = dpt_cpu_f32(a->dy), *gamma = dpt_cpu_f32(a->gamma);
  const float *mean = dpt_cpu_f32(a->mean), *rstd = dpt_cpu_f32(a->rstd);
  float *dx = dpt_cpu_f32(a->dx);
  for (size_t r = 0; r < a->g.rows; ++r) {
    const float *xr = x + r * cols, *dyr = dy + r * cols;
    float *dxr = dx + r * cols;
    const float m = mean[r], inv = rstd[r];
    double s = 0.0, sx = 0.0;
    for (size_t c = 0; c < cols; ++c) {
      const float gd = dyr[c] * gamma[c], xhat = (xr[c] - m) * inv;
      s += gd;
      sx += (double)gd * (double)xhat;
    }
    const float ma = (float)(s / (double)cols), mb = (float)(sx / (double)cols);
    for (size_t c = 0; c < cols; ++c) {
      const float gd = dyr[c] * gamma[c], xhat = (xr[c] - m) * inv;
      dxr[c] = inv * (gd - ma - xhat * mb);
    }
  }
  return DPT_OK;
}

/* dgamma = sum of dy * xhat (xhat in float), dbeta = sum of dy, per column in row order, in
 * double accumulators (a chunk of columns at a time, reading rows in memory order). */
dpt_status dpt_cpu_layernorm_bwd_params(dpt_backend *be, const dpt_layernorm_bwd_params_args *a) {
  (void)be;
  const size_t cols = a->g.cols;
  const float *x = dpt_cpu_f32(a->x), *dy = dpt_cpu_f32(a->dy);
  const float *mean = dpt_cpu_f32(a->mean), *rstd = dpt_cpu_f32(a->rstd);
  float *dgamma = dpt_cpu_f32(a->dgamma), *dbeta = dpt_cpu_f32(a->dbeta);
  for (size_t c0 = 0; c0 < cols; c0 += LN_CHUNK) {
    const size_t nc = cols - c0 < LN_CHUNK ? cols - c0 : LN_CHUNK;
    double sg[LN_CHUNK] = {0}, sb[LN_CHUNK] = {0};
    for (size_t r = 0; r < a->g.rows; ++r) {
      const float *xr = x + r * cols + c0, *dyr = dy + r * cols + c0;
      const float m = mean[r], inv = rstd[r];
      for (size_t j = 0; j < nc; ++j) {
        const float xhat = (xr[j] - m) * inv;
        sg[j] += (double)dyr[j] * (double)xhat;
        sb[j] += dyr[j];
      }
    }
    for (size_t j = 0; j < nc; ++j) {
      dgamma[c0 + j] = (float)sg[j];
      dbeta[c0 + j] = (float)sb[j];
    }
  }
  return DPT_OK;
}

/* ---- GELU --------------------------------------------------------------------------------- */

#define GELU_SQRT_2_OVER_PI 0.7978845608028654
#define GELU_COEF           0.044715
#define GELU_INV_SQRT_2     0.7071067811865476
#define GELU_INV_SQRT_2PI   0.3989422804014327

/* Phi(x) (or its tanh approximation) in *cdf and d(x Phi(x)) / dx in *slope, in double. Both
 * tails stay accurate: erfc instead of 1 + erf, and 0.5 (1 + tanh u) as 1 / (1 + e^(-2u)) with
 * 1 - tanh^2 u = 4 cdf (1 - cdf), each side from e = e^(-2|u|). */
static void gelu_eval(double x, dpt_gelu_approx approx, double *cdf, double *slope) {
  if (approx == DPT_GELU_TANH) {
    const double u = GELU_SQRT_2_OVER_PI * (x + GELU_COEF * x * x * x), e = exp(-2.0 * fabs(u));
    const double hi = 1.0 / (1.0 + e), lo = e / (1.0 + e); /* the cdf of |u|, of -|u| */
    *cdf = u >= 0.0 ? hi : lo;
    *slope = *cdf + 2.0 * x * hi * lo * GELU_SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_COEF * x * x);
    return;
  }
  *cdf = 0.5 * erfc(-x * GELU_INV_SQRT_2);
  *slope = *cdf + x * GELU_INV_SQRT_2PI * exp(-0.5 * x * x);
}

dpt_status dpt_cpu_gelu_fwd(dpt_backend *be, const dpt_gelu_fwd_args *a) {
  (void)be;
  const float *x = dpt_cpu_f32(a->x);
  float *y = dpt_cpu_f32(a->y);
  for (size_t i = 0; i < a->n; ++i) {
    double cdf, slope;
    gelu_eval(x[i], a->approx, &cdf, &slope);
    y[i] = (float)((double)x[i] * cdf);
  }
  return DPT_OK;
}

dpt_status dpt_cpu_gelu_bwd(dpt_backend *be, const dpt_gelu_bwd_args *a) {
  (void)be;
  const float *x = dpt_cpu_f32(a->x), *dy = dpt_cpu_f32(a->dy);
  float *dx = dpt_cpu_f32(a->y);
  for (size_t i = 0; i < a->n; ++i) {
    double cdf, slope;
    gelu_eval(x[i], a->approx, &cdf, &slope);
    dx[i] = (float)((double)dy[i] * slope);
  }
  return DPT_OK;
}

/* ---- attention's softmax ------------------------------------------------------------------- */

dpt_status dpt_cpu_attn_softmax(dpt_backend *be, const dpt_attn_softmax_args *a) {
  (void)be;
  const dpt_attn_geom g = a->g;
  const float *s = dpt_cpu_f32(a->scores);
  float *p = dpt_cpu_f32(a->probs);
  const int32_t *ids = a->has_ids ? dpt_cpu_i32(a->ids) : NULL;
  const size_t rows = g.heads * g.n * g.q;
  for (size_t r = 0; r < rows; ++r) {
    const int32_t *key = ids ? ids + ((r / g.q) % g.n) * g.k : NULL;
    const float *x = s + r * g.k;
    float *y = p + r * g.k;
    double max = -INFINITY, sum = 0.0;
    for (size_t t = 0; t < g.k; ++t)
      if (!key || key[t] != a->pad_id) max = fmax(max, (double)a->scale * x[t]);
    for (size_t t = 0; t < g.k; ++t) {
      double e = (!key || key[t] != a->pad_id) ? exp((double)a->scale * x[t] - max) : 0.0;
      y[t] = (float)e; /* in place: x[t] is read before y[t] is written */
      sum += e;
    }
    const double inv = sum > 0.0 ? 1.0 / sum : 0.0;
    for (size_t t = 0; t < g.k; ++t)
      y[t] = (float)(y[t] * inv);
  }
  return DPT_OK;
}

dpt_status dpt_cpu_softmax_bwd(dpt_backend *be, const dpt_softmax_bwd_args *a) {
  (void)be;
  const float *y = dpt_cpu_f32(a->y), *dy = dpt_cpu_f32(a->dy);
  float *dx = dpt_cpu_f32(a->dx);
  for (size_t r = 0; r < a->rows; ++r) {
    const float *yr = y + r * a->cols, *dyr = dy + r * a->cols;
    float *dxr = dx + r * a->cols;
    double dot = 0.0;
    for (size_t c = 0; c < a->cols; ++c)
      dot += (double)yr[c] * dyr[c];
    for (size_t c = 0; c < a->cols; ++c)
      dxr[c] = (float)((double)yr[c] * ((double)dyr[c] - dot));
  }
  return DPT_OK;
}

/* ---- embedding bags, column gathers, binary cross-entropy ---------------------------------- */

/* The valid ids of sample i's bag (id >= 0), for the mean. */
static size_t bag_count(const int32_t *ids, size_t bag) {
  size_t c = 0;
  for (size_t s = 0; s < bag; ++s)
    c += ids[s] >= 0;
  return c;
}

dpt_status dpt_cpu_embed_bag(dpt_backend *be, const dpt_embed_bag_args *a) {
  (void)be;
  const float *table = dpt_cpu_f32(a->table);
  const int32_t *idx = dpt_cpu_i32(a->idx);
  float *out = dpt_cpu_f32(a->out);
  for (size_t i = 0; i < a->n; ++i) {
    const int32_t *ids = idx + i * a->idx_stride;
    float *row = out + i * a->dim;
    size_t cnt = bag_count(ids, a->bag);
    float inv = a->mode == DPT_BAG_MEAN && cnt > 0 ? 1.0f / (float)cnt : 1.0f;
    memset(row, 0, a->dim * sizeof(float));
    for (size_t s = 0; s < a->bag; ++s) {
      const int32_t t = ids[s];
      if (t < 0) continue;
      if ((size_t)t >= a->vocab) {
        for (size_t d = 0; d < a->dim; ++d)
          row[d] = NAN;
        break;
      }
      const float *src = table + (size_t)t * a->dim;
      for (size_t d = 0; d < a->dim; ++d)
        row[d] += src[d];
    }
    if (inv != 1.0f)
      for (size_t d = 0; d < a->dim; ++d)
        row[d] *= inv;
  }
  return DPT_OK;
}

dpt_status dpt_cpu_embed_bag_bwd(dpt_backend *be, const dpt_embed_bag_bwd_args *a) {
  (void)be;
  const float *dout = dpt_cpu_f32(a->dout);
  const int32_t *idx = dpt_cpu_i32(a->idx);
  float *dtable = dpt_cpu_f32(a->dtable);
  for (size_t i = 0; i < a->n; ++i) {
    const int32_t *ids = idx + i * a->idx_stride;
    size_t cnt = bag_count(ids, a->bag);
    float inv = a->mode == DPT_BAG_MEAN && cnt > 0 ? 1.0f / (float)cnt : 1.0f;
    const float *src = dout + i * a->dim;
    for (size_t s = 0; s < a->bag; ++s) {
      const int32_t t = ids[s];
      if (t < 0 || (size_t)t >= a->vocab) continue;
      float *row = dtable + (size_t)t * a->dim;
      for (size_t d = 0; d < a->dim; ++d)
        row[d] += inv * src[d];
    }
  }
  return DPT_OK;
}

/* Whether map[0..cols) is c0, c0 + 1, ... within [0, ld): the columns move as one block. */
static int contiguous_cols(const int32_t *map, size_t cols, size_t ld) {
  if (cols == 0 || map[0] < 0 || (size_t)map[0] + cols > ld) return 0;
  for (size_t j = 1; j < cols; ++j)
    if (map[j] != map[0] + (int32_t)j) return 0;
  return 1;
}

/* d[j] += g[j], j < n (separate buffers: vectorized). */
static void add_row(float *restrict d, const float *restrict g, size_t n) {
  for (size_t j = 0; j < n; ++j)
    d[j] += g[j];
}

dpt_status dpt_cpu_gather_cols(dpt_backend *be, const dpt_gather_cols_args *a) {
  (void)be;
  const float *x = dpt_cpu_f32(a->x);
  const int32_t *map = dpt_cpu_i32(a->map);
  float *y = dpt_cpu_f32(a->y);
  if (contiguous_cols(map, a->cols, a->ldx)) { /* slices and concatenations */
    for (size_t r = 0; r < a->rows; ++r)
      memmove(y + r * a->ldy, x + r * a->ldx + (size_t)map[0], a->cols * sizeof(float));
    return DPT_OK;
  }
  for (size_t r = 0; r < a->rows; ++r)
    for (size_t j = 0; j < a->cols; ++j) {
      const int32_t c = map[j];
      y[r * a->ldy + j] = c >= 0 && (size_t)c < a->ldx ? x[r * a->ldx + (size_t)c] : 0.0f;
    }
  return DPT_OK;
}

dpt_status dpt_cpu_scatter_cols_add(dpt_backend *be, const dpt_scatter_cols_add_args *a) {
  (void)be;
  float *dx = dpt_cpu_f32(a->x);
  const int32_t *map = dpt_cpu_i32(a->map);
  const float *dy = dpt_cpu_f32(a->y);
  if (a->x.buf != a->y.buf && contiguous_cols(map, a->cols, a->ldx)) { /* the same adds */
    for (size_t r = 0; r < a->rows; ++r)
      add_row(dx + r * a->ldx + (size_t)map[0], dy + r * a->ldy, a->cols);
    return DPT_OK;
  }
  for (size_t r = 0; r < a->rows; ++r)
    for (size_t j = 0; j < a->cols; ++j) {
      const int32_t c = map[j];
      if (c >= 0 && (size_t)c < a->ldx) dx[r * a->ldx + (size_t)c] += dy[r * a->ldy + j];
    }
  return DPT_OK;
}

dpt_status dpt_cpu_bce_logits(dpt_backend *be, const dpt_bce_logits_args *a) {
  (void)be;
  const float *x = dpt_cpu_f32(a->logits);
  const int32_t *y = dpt_cpu_i32(a->labels);
  float *dx = a->dlogits.buf ? dpt_cpu_f32(a->dlogits) : NULL;
  double loss = 0.0;
  int64_t correct = 0;
  for (size_t i = 0; i < a->n; ++i) {
    const double v = x[i];
    const int32_t label = y[i];
    const int valid = label == 0 || label == 1;
    if (valid) {
      loss += fmax(v, 0.0) - v * label + log1p(exp(-fabs(v)));
      correct += (v > 0.0) == (label == 1);
    } else if (label != DPT_IGNORE_INDEX) {
      loss += NAN;
    }
    if (dx) dx[i] = valid ? (float)((double)a->scale * (1.0 / (1.0 + exp(-v)) - label)) : 0.0f;
  }
  if (a->loss_sum) *a->loss_sum = loss;
  if (a->correct) *a->correct = correct;
  return DPT_OK;
}
