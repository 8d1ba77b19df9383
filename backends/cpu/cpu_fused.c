/* The CPU backend's vectorized layer ops: a linear layer's bias with GELU (fused), forward and
 * backward, in one pass over the activations, in float with branch-free exp and erfc; the
 * dropout mask; attention's softmax with its dropout (fused). The loops vectorize (AVX2 where the
 * machine has it, the same results either way: no contraction, no libm). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"

/* x86-64 with GCC or Clang: an AVX2 clone of the row loops, picked at load time. Without FMA
 * (ISO C mode keeps contraction off) both clones round alike. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(DPT_NO_CLONES)
#define CPU_FUSED_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CPU_FUSED_CLONES
#endif

#define GELU_SQRT_2_OVER_PI 0.7978845608f
#define GELU_COEF           0.044715f
#define GELU_INV_SQRT_2     0.7071067812f
#define GELU_INV_SQRT_2PI   0.3989422804f

/* e^x for x clamped to [-87, 88]: 2^n e^r with n = round(x / ln 2), |r| <= ln 2 / 2, and a
 * degree-6 Taylor polynomial (relative error about 2e-7). */
static inline float fexp(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  const float n = (x * 1.442695041f + 12582912.0f) - 12582912.0f; /* round to nearest */
  const float r = (x - n * 0.693145752f) - n * 1.428606820e-6f;
  const float p =
      1.0f +
      r * (1.0f +
           r * (0.5f + r * (0.1666666667f +
                            r * (0.04166666667f + r * (0.008333333333f + r * 0.001388888889f)))));
  const int32_t bits = ((int32_t)n + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

/* erfc(z) for z >= 0, Numerical Recipes' erfcc (fractional error below 1.2e-7 in exact
 * arithmetic), as the Vulkan shaders compute it. */
static inline float erfc_pos(float z) {
  const float t = 1.0f / (1.0f + 0.5f * z);
  const float q =
      -1.26551223f +
      t * (1.00002368f +
           t * (0.37409196f +
                t * (0.09678418f +
                     t * (-0.18628806f +
                          t * (0.27886807f +
                               t * (-1.13520398f +
                                    t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f))))))));
  return t * fexp(-z * z + q);
}

/* Phi(x) of the erf form and its slope d(x Phi(x)) / dx. */
static inline float cdf_erf(float x, float *slope) {
  const float z = x * GELU_INV_SQRT_2, e = erfc_pos(fabsf(z));
  const float cdf = 0.5f * (z >= 0.0f ? 2.0f - e : e);
  *slope = cdf + x * GELU_INV_SQRT_2PI * fexp(-0.5f * x * x);
  return cdf;
}

/* 0.5 (1 + tanh u) as 1 / (1 + e^(-2u)), each tail from e^(-2|u|), and the slope. */
static inline float cdf_tanh(float x, float *slope) {
  const float u = GELU_SQRT_2_OVER_PI * (x + GELU_COEF * x * x * x), e = fexp(-2.0f * fabsf(u));
  const float hi = 1.0f / (1.0f + e), lo = e / (1.0f + e);
  const float cdf = u >= 0.0f ? hi : lo;
  *slope = cdf + 2.0f * x * hi * lo * GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_COEF * x * x);
  return cdf;
}

CPU_FUSED_CLONES
static void bias_gelu_row(size_t cols, int tanh_form, float *restrict x, const float *restrict bias,
                          float *restrict y) {
  if (tanh_form) {
    for (size_t c = 0; c < cols; ++c) {
      float v = x[c] + bias[c], s;
      x[c] = v;
      y[c] = v * cdf_tanh(v, &s);
    }
    return;
  }
  for (size_t c = 0; c < cols; ++c) {
    float v = x[c] + bias[c], s;
    x[c] = v;
    y[c] = v * cdf_erf(v, &s);
  }
}

dpt_status dpt_cpu_bias_gelu_fwd(dpt_backend *be, const dpt_bias_gelu_fwd_args *a) {
  (void)be;
  float *x = dpt_cpu_f32(a->x), *y = dpt_cpu_f32(a->y);
  const float *bias = dpt_cpu_f32(a->bias);
  for (size_t r = 0; r < a->rows; ++r)
    bias_gelu_row(a->cols, a->approx == DPT_GELU_TANH, x + r * a->cols, bias, y + r * a->cols);
  return DPT_OK;
}

/* One row's width columns: dx = dy * slope(x), added to the double sums. dx may be dy. */
CPU_FUSED_CLONES
static void bias_gelu_bwd_row(size_t width, int tanh_form, const float *x, const float *dy,
                              float *dx, double *restrict acc) {
  if (tanh_form) {
    for (size_t j = 0; j < width; ++j) {
      float s;
      cdf_tanh(x[j], &s);
      const float d = dy[j] * s;
      dx[j] = d;
      acc[j] += (double)d;
    }
    return;
  }
  for (size_t j = 0; j < width; ++j) {
    float s;
    cdf_erf(x[j], &s);
    const float d = dy[j] * s;
    dx[j] = d;
    acc[j] += (double)d;
  }
}

/* A chunk of columns at a time down the rows (row-major reads), the bias gradient summed per
 * column in row order in double, as bias_grad does. */
dpt_status dpt_cpu_bias_gelu_bwd(dpt_backend *be, const dpt_bias_gelu_bwd_args *a) {
  (void)be;
  enum { CHUNK = 256 };
  const float *x = dpt_cpu_f32(a->x), *dy = dpt_cpu_f32(a->dy);
  float *dx = dpt_cpu_f32(a->dx), *db = dpt_cpu_f32(a->db);
  const int tanh_form = a->approx == DPT_GELU_TANH;
  for (size_t c0 = 0; c0 < a->cols; c0 += CHUNK) {
    const size_t width = a->cols - c0 < CHUNK ? a->cols - c0 : CHUNK;
    double acc[CHUNK] = {0};
    for (size_t r = 0; r < a->rows; ++r) {
      const size_t o = r * a->cols + c0;
      bias_gelu_bwd_row(width, tanh_form, x + o, dy + o, dx + o, acc);
    }
    for (size_t j = 0; j < width; ++j)
      db[c0 + j] = a->beta == 0.0f ? (float)acc[j] : (float)((double)a->beta * db[c0 + j] + acc[j]);
  }
  return DPT_OK;
}

/* ---- dropout ------------------------------------------------------------------------------ */

CPU_FUSED_CLONES
static void dropout_row(size_t cols, uint32_t hr, uint32_t threshold, float scale, const float *x,
                        float *y) {
  for (size_t c = 0; c < cols; ++c) {
    const uint32_t h = dpt_mix32(hr ^ (uint32_t)c);
    y[c] = (h >> 8) >= threshold ? x[c] * scale : 0.0f;
  }
}

/* y = keep ? x * scale : 0, the mask hashed from (key, global row, column) alone, so it does
 * not depend on how rows are split across calls or devices. y may equal x. */
dpt_status dpt_cpu_dropout(dpt_backend *be, const dpt_dropout_args *a) {
  (void)be;
  const float *x = dpt_cpu_f32(a->x);
  float *y = dpt_cpu_f32(a->y);
  for (size_t r = 0; r < a->rows; ++r)
    dropout_row(a->cols, dpt_mix32(a->key ^ (uint32_t)(a->first_row + r)), a->threshold, a->scale,
                x + r * a->cols, y + r * a->cols);
  return DPT_OK;
}

/* ---- attention's probabilities: softmax, key mask and dropout in one pass per row ----------- */

/* y[t] = e^(scale * y[t] - mx) for unmasked keys (key NULL: all), 0 for masked ones. */
CPU_FUSED_CLONES
static void attn_exp_row(size_t k, float scale, float mx, const int32_t *key, int32_t pad_id,
                         float *y) {
  if (key)
    for (size_t t = 0; t < k; ++t) {
      const float e = fexp(scale * y[t] - mx);
      y[t] = key[t] != pad_id ? e : 0.0f;
    }
  else
    for (size_t t = 0; t < k; ++t)
      y[t] = fexp(scale * y[t] - mx);
}

/* y *= inv, and with yd the row's dropout: yd = keep(hr, c0 + t) ? y * ds : 0. */
CPU_FUSED_CLONES
static void attn_norm_drop_row(size_t k, float inv, const dpt_attn_probs_fwd_args *a, uint32_t hr,
                               uint32_t c0, float *restrict y, float *restrict yd) {
  for (size_t t = 0; t < k; ++t)
    y[t] *= inv;
  if (!yd) return;
  for (size_t t = 0; t < k; ++t) {
    const uint32_t h = dpt_mix32(hr ^ (c0 + (uint32_t)t));
    yd[t] = (h >> 8) >= a->threshold ? y[t] * a->drop_scale : 0.0f;
  }
}

/* One head (a->sm.g.heads == 1): row r is query r % q of sample r / q. The maximum and the exps
 * in float, the sum in double. */
dpt_status dpt_cpu_attn_probs_fwd(dpt_backend *be, const dpt_attn_probs_fwd_args *a) {
  (void)be;
  const dpt_attn_geom g = a->sm.g;
  float *p = dpt_cpu_f32(a->sm.probs), *pd = a->has_drop ? dpt_cpu_f32(a->dropped) : NULL;
  const int32_t *ids = a->sm.has_ids ? dpt_cpu_i32(a->sm.ids) : NULL;
  for (size_t r = 0; r < g.n * g.q; ++r) {
    const size_t i = r / g.q, j = r % g.q;
    const int32_t *key = ids ? ids + i * g.k : NULL;
    float *y = p + r * g.k, mx = -INFINITY;
    for (size_t t = 0; t < g.k; ++t) {
      const float v = a->sm.scale * y[t];
      if ((!key || key[t] != a->sm.pad_id) && v > mx) mx = v;
    }
    attn_exp_row(g.k, a->sm.scale, mx, key, a->sm.pad_id, y);
    double sum = 0.0;
    for (size_t t = 0; t < g.k; ++t)
      sum += y[t];
    const uint32_t hr = dpt_mix32(a->key ^ (a->first_row + (uint32_t)i));
    attn_norm_drop_row(g.k, sum > 0.0 ? (float)(1.0 / sum) : 0.0f, a, hr, (uint32_t)(j * g.k), y,
                       pd ? pd + r * g.k : NULL);
  }
  return DPT_OK;
}

/* dx = y * (g - dot), g the gradient through the dropout (dropped != 0 marks a kept value). */
CPU_FUSED_CLONES
static void attn_probs_bwd_row(size_t cols, const dpt_attn_probs_bwd_args *a, const float *y,
                               const float *yd, const float *dy, float *dx) {
  double dot = 0.0;
  for (size_t c = 0; c < cols; ++c) {
    const float g = !yd ? dy[c] : yd[c] != 0.0f ? dy[c] * a->drop_scale : 0.0f;
    dot += (double)y[c] * g;
  }
  for (size_t c = 0; c < cols; ++c) {
    const float g = !yd ? dy[c] : yd[c] != 0.0f ? dy[c] * a->drop_scale : 0.0f;
    dx[c] = (float)((double)y[c] * ((double)g - dot));
  }
}

dpt_status dpt_cpu_attn_probs_bwd(dpt_backend *be, const dpt_attn_probs_bwd_args *a) {
  (void)be;
  const float *y = dpt_cpu_f32(a->y), *yd = a->has_drop ? dpt_cpu_f32(a->dropped) : NULL;
  const float *dy = dpt_cpu_f32(a->dy);
  float *dx = dpt_cpu_f32(a->dx);
  for (size_t r = 0; r < a->rows; ++r) {
    const size_t o = r * a->cols;
    attn_probs_bwd_row(a->cols, a, y + o, yd ? yd + o : NULL, dy + o, dx + o);
  }
  return DPT_OK;
}
