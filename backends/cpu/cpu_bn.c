/* The CPU backend's batch normalization, plain and with the ReLU after it fused in (bn_relu):
 * statistics, forward, and the two backward passes. Element-wise formulas run in float in the
 * order the contract gives; sums accumulate in double, each row of a channel in eight lanes
 * added in a fixed tree, so a result depends on the shape alone and the loops vectorize. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"

/* x is [n, c, p]: channel ch of sample i is the p contiguous values at (i*c + ch)*p. The
 * reductions walk channels in chunks, so x is read in memory order even for p == 1
 * (batchnorm1d, where a channel is a strided column). */
enum { BN_CHUNK = 64, BN_LANES = 8 };

/* An AVX2 copy of the hot loops where the compiler can make one, picked at load time; both
 * copies compute the same values (no contraction in ISO C, the lanes fixed by the source). */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__) && !defined(__SANITIZE_ADDRESS__)
#define BN_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define BN_CLONES
#endif

static inline float bn_invstd(float var, float eps) {
  return 1.0f / sqrtf(var + eps);
}

/* The eight lanes' sum, in a fixed tree. */
static inline double lanes_sum(const double *l) {
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/* Four floats, four doubles and the comparison mask of four floats (GCC and Clang vectors). */
typedef float bn_f4 __attribute__((vector_size(16)));
typedef double bn_d4 __attribute__((vector_size(32)));
typedef int32_t bn_i4 __attribute__((vector_size(16)));

static inline bn_f4 load4(const float *p) {
  bn_f4 v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* Sum of row[0..p) - shift, and of its squares, in double: lane j % 8 takes value j (lanes 0-3
 * and 4-7 as two vectors), the lanes added in a fixed tree. */
BN_CLONES static void row_sums(const float *row, size_t p, double shift, int squares, double *out) {
  bn_d4 l[2] = {{0}};
  size_t j = 0;
  for (; j + BN_LANES <= p; j += BN_LANES)
    for (int h = 0; h < 2; ++h) {
      const bn_d4 d = __builtin_convertvector(load4(row + j + 4 * (size_t)h), bn_d4) - shift;
      l[h] += squares ? d * d : d;
    }
  double t[BN_LANES];
  memcpy(t, l, sizeof t);
  for (int k = 0; j < p; ++j, ++k) {
    const double d = (double)row[j] - shift;
    t[k] += squares ? d * d : d;
  }
  *out += lanes_sum(t);
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
      for (size_t k = 0; k < w; ++k)
        row_sums(x + (i * g->c + c0 + k) * g->p, g->p, 0.0, 0, &s[k]);
    for (size_t k = 0; k < w; ++k)
      s[k] /= cnt;
    for (size_t i = 0; i < g->n; ++i)
      for (size_t k = 0; k < w; ++k)
        row_sums(x + (i * g->c + c0 + k) * g->p, g->p, s[k], 1, &q[k]);
    for (size_t k = 0; k < w; ++k) {
      mean[c0 + k] = (float)s[k];
      var[c0 + k] = (float)(q[k] / cnt);
    }
  }
  return DPT_OK;
}

/* One row: y = (x - m) * inv * gm + bt in float, left to right; then max(y, 0) with relu. */
BN_CLONES static void fwd_row(const float *x, float *y, size_t p, float m, float inv, float gm,
                              float bt, int relu) {
  if (relu) {
    for (size_t j = 0; j < p; ++j) {
      const float v = (x[j] - m) * inv * gm + bt;
      y[j] = v > 0.0f || isnan(v) ? v : 0.0f;
    }
  } else {
    for (size_t j = 0; j < p; ++j)
      y[j] = (x[j] - m) * inv * gm + bt;
  }
}

dpt_status dpt_cpu_bn_fwd(dpt_backend *be, const dpt_bn_fwd_args *a) {
  (void)be;
  const dpt_bn_geom *g = &a->g;
  const float *x = dpt_cpu_f32(a->x), *mean = dpt_cpu_f32(a->mean), *var = dpt_cpu_f32(a->var);
  const float *gamma = dpt_cpu_f32(a->gamma), *beta = dpt_cpu_f32(a->beta);
  float *y = dpt_cpu_f32(a->y);
  for (size_t i = 0; i < g->n; ++i)
    for (size_t ch = 0; ch < g->c; ++ch) {
      const size_t o = (i * g->c + ch) * g->p;
      fwd_row(x + o, y + o, g->p, mean[ch], bn_invstd(var[ch], g->eps), gamma[ch], beta[ch],
              a->relu);
    }
  return DPT_OK;
}

dpt_status dpt_cpu_bn_relu_fwd(dpt_backend *be, const dpt_bn_relu_fwd_args *a) {
  return dpt_cpu_bn_fwd(be, a);
}

/* One row's sums of dy and dy * xhat (xhat = (x - m) * inv in float), dy taken as 0 where
 * act is not > 0 with relu: lanes 0-3 and 4-7 of row_sums' eight, as vectors. */
BN_CLONES static void bwd_row_sums(const float *x, const float *dy, const float *act, size_t p,
                                   float m, float inv, int relu, double *s, double *sx) {
  bn_d4 l[2] = {{0}}, lx[2] = {{0}};
  const bn_i4 all = {-1, -1, -1, -1};
  size_t j = 0;
  for (; j + BN_LANES <= p; j += BN_LANES)
    for (int h = 0; h < 2; ++h) {
      const size_t o = j + 4 * (size_t)h;
      const bn_i4 keep = relu ? (bn_i4)(load4(act + o) > 0.0f) : all;
      const bn_f4 d = (bn_f4)((bn_i4)load4(dy + o) & keep);
      const bn_f4 xhat = (load4(x + o) - m) * inv;
      const bn_d4 dd = __builtin_convertvector(d, bn_d4);
      l[h] += dd;
      lx[h] += dd * __builtin_convertvector(xhat, bn_d4);
    }
  double t[BN_LANES], tx[BN_LANES];
  memcpy(t, l, sizeof t);
  memcpy(tx, lx, sizeof tx);
  for (int k = 0; j < p; ++j, ++k) {
    const float d = !relu || act[j] > 0.0f ? dy[j] : 0.0f;
    const float xhat = (x[j] - m) * inv;
    t[k] += (double)d;
    tx[k] += (double)d * (double)xhat;
  }
  *s += lanes_sum(t);
  *sx += lanes_sum(tx);
}

/* sum_dy and sum_dy_xhat per channel. */
dpt_status dpt_cpu_bn_bwd_reduce(dpt_backend *be, const dpt_bn_bwd_reduce_args *a) {
  (void)be;
  const dpt_bn_geom *g = &a->g;
  const float *x = dpt_cpu_f32(a->x), *dy = dpt_cpu_f32(a->dy), *act = dpt_cpu_f32(a->act);
  const float *mean = dpt_cpu_f32(a->mean), *var = dpt_cpu_f32(a->var);
  float *sum_dy = dpt_cpu_f32(a->sum_dy), *sum_dy_xhat = dpt_cpu_f32(a->sum_dy_xhat);
  for (size_t c0 = 0; c0 < g->c; c0 += BN_CHUNK) {
    const size_t w = g->c - c0 < BN_CHUNK ? g->c - c0 : BN_CHUNK;
    double s[BN_CHUNK] = {0}, sx[BN_CHUNK] = {0};
    for (size_t i = 0; i < g->n; ++i)
      for (size_t k = 0; k < w; ++k) {
        const size_t o = (i * g->c + c0 + k) * g->p;
        bwd_row_sums(x + o, dy + o, act + o, g->p, mean[c0 + k], bn_invstd(var[c0 + k], g->eps),
                     a->relu, &s[k], &sx[k]);
      }
    for (size_t k = 0; k < w; ++k) {
      sum_dy[c0 + k] = (float)s[k];
      sum_dy_xhat[c0 + k] = (float)sx[k];
    }
  }
  return DPT_OK;
}

dpt_status dpt_cpu_bn_relu_bwd_reduce(dpt_backend *be, const dpt_bn_relu_bwd_reduce_args *a) {
  return dpt_cpu_bn_bwd_reduce(be, a);
}

/* One row: dx = k * (dy - ma - xhat * mb) in float, dy taken as 0 where act is not > 0 with
 * relu. */
BN_CLONES static void bwd_row(const float *x, const float *dy, const float *act, float *dx,
                              size_t p, float m, float inv, float k, float ma, float mb, int relu) {
  for (size_t j = 0; j < p; ++j) {
    const float d = !relu || act[j] > 0.0f ? dy[j] : 0.0f;
    const float xhat = (x[j] - m) * inv;
    dx[j] = k * (d - ma - xhat * mb);
  }
}

/* k = gamma * invstd, ma = sum_dy / count, mb = sum_dy_xhat / count, all in float. */
dpt_status dpt_cpu_bn_bwd(dpt_backend *be, const dpt_bn_bwd_args *a) {
  (void)be;
  const dpt_bn_geom *g = &a->g;
  const float *x = dpt_cpu_f32(a->x), *dy = dpt_cpu_f32(a->dy), *act = dpt_cpu_f32(a->act);
  const float *mean = dpt_cpu_f32(a->mean), *var = dpt_cpu_f32(a->var);
  const float *gamma = dpt_cpu_f32(a->gamma);
  const float *sum_dy = dpt_cpu_f32(a->sum_dy), *sum_dy_xhat = dpt_cpu_f32(a->sum_dy_xhat);
  float *dx = dpt_cpu_f32(a->dx);
  const float count = (float)a->count;
  for (size_t i = 0; i < g->n; ++i)
    for (size_t ch = 0; ch < g->c; ++ch) {
      const float inv = bn_invstd(var[ch], g->eps);
      const size_t o = (i * g->c + ch) * g->p;
      bwd_row(x + o, dy + o, act + o, dx + o, g->p, mean[ch], inv, gamma[ch] * inv,
              sum_dy[ch] / count, sum_dy_xhat[ch] / count, a->relu);
    }
  return DPT_OK;
}

dpt_status dpt_cpu_bn_relu_bwd(dpt_backend *be, const dpt_bn_relu_bwd_args *a) {
  return dpt_cpu_bn_bwd(be, a);
}
