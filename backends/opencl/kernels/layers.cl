/* The layer ops beyond convolution: the batch sum of a summed batched gemm, batch
 * normalization, average pooling, dropout, layer normalization, GELU (alone and with a linear
 * layer's bias) and attention's softmax with its dropout. Same conventions as every kernel (common.cl); no atomics: each work-item owns
 * the elements it writes, each work-group the channels it reduces. */

/* c [m, n] (leading dimension ldc) = beta * c + s_0 + s_1 + ... + s_{batch-1}, where s_i [m, n]
 * (dense) is item i of a batched gemm already scaled by alpha, stored at s + i * m * n. The
 * items are added in order, in float, like the CPU reference's loop of gemms (C = alpha A_0
 * B_0 + beta C, then C = alpha A_i B_i + C). first != 0: the beta term is added (the first
 * chunk of a batch); otherwise c is the running sum. With first and beta == 0, c is not read.
 * One work-item per element of c (total = m * n). */
__kernel void gemm_batch_sum(ulong total, ulong n, ulong ldc, ulong batch, int first, float beta,
                             __global const float *s, ulong s_off, __global float *c,
                             ulong c_off) {
  size_t g = get_global_id(0);
  if (g >= total) return;
  ulong ci = c_off + (g / n) * ldc + g % n;
  __global const float *si = s + s_off + g;
  float acc = si[0];
  if (!first)
    acc = acc + c[ci];
  else if (beta != 0.0f)
    acc = acc + beta * c[ci];
  for (ulong i = 1; i < batch; ++i)
    acc = acc + si[i * total];
  c[ci] = acc;
}

/* ---- batch normalization over x [n, c, p] --------------------------------------------------- */

/* The per-channel reductions: one work-group per channel (group id = channel); its work-items
 * walk the channel's n*p values, value j = img * p + pos at x[(img * c + ch) * p + pos]. Each
 * work-item starts at j = local id and steps by the local size L, advancing (img, pos) by
 * (L / p, L % p) with a carry instead of dividing. */
typedef struct dpt_bn_walk {
  ulong img, pos, step_img, step_pos;
} dpt_bn_walk;

inline dpt_bn_walk dpt_bn_walk_start(ulong p) {
  ulong lid = get_local_id(0), L = get_local_size(0);
  dpt_bn_walk w = {lid / p, lid % p, L / p, L % p};
  return w;
}

inline void dpt_bn_walk_next(dpt_bn_walk *w, ulong p) {
  w->img += w->step_img;
  w->pos += w->step_pos;
  if (w->pos >= p) {
    w->pos -= p;
    ++w->img;
  }
}

/* mean[c] and biased var[c] (two passes over the channel: the mean, then the mean of squared
 * deviations from it), accumulated in acc_t. scratch: local size acc_t. */
__kernel void bn_stats(ulong n, ulong c, ulong p, __global const float *x, ulong x_off,
                       __global float *mean, ulong mean_off, __global float *var, ulong var_off,
                       __local acc_t *scratch) {
  ulong ch = get_group_id(0);
  acc_t count = (acc_t)(n * p);
  acc_t acc = 0;
  for (dpt_bn_walk w = dpt_bn_walk_start(p); w.img < n; dpt_bn_walk_next(&w, p))
    acc += (acc_t)x[x_off + (w.img * c + ch) * p + w.pos];
  scratch[get_local_id(0)] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  DPT_TREE_REDUCE(scratch);
  acc_t m = scratch[0] / count;
  barrier(CLK_LOCAL_MEM_FENCE); /* every work-item read scratch[0] before it is reused */
  acc = 0;
  for (dpt_bn_walk w = dpt_bn_walk_start(p); w.img < n; dpt_bn_walk_next(&w, p)) {
    acc_t d = (acc_t)x[x_off + (w.img * c + ch) * p + w.pos] - m;
    acc += d * d;
  }
  scratch[get_local_id(0)] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  DPT_TREE_REDUCE(scratch);
  if (get_local_id(0) == 0) {
    mean[mean_off + ch] = (float)m;
    var[var_off + ch] = (float)(scratch[0] / count);
  }
}

/* invstd = 1 / sqrt(var + eps) in float, with the correctly rounded sqrt and division the
 * program is built with where the device has them (ocl_program.c). */
inline float dpt_bn_invstd(float var, float eps) {
  return 1.0f / sqrt(var + eps);
}

/* y = (x - mean) * invstd * gamma + beta, then max(y, 0) (NaN kept) with relu; one work-item
 * per element (total = n * c * p). */
__kernel void bn_fwd(ulong total, ulong c, ulong p, ulong relu, float eps, __global const float *x,
                     ulong x_off, __global const float *mean, ulong mean_off,
                     __global const float *var, ulong var_off, __global const float *gamma,
                     ulong gamma_off, __global const float *beta, ulong beta_off,
                     __global float *y, ulong y_off) {
  size_t g = get_global_id(0);
  if (g >= total) return;
  ulong ch = (g / p) % c;
  float invstd = dpt_bn_invstd(var[var_off + ch], eps);
  float xhat = (x[x_off + g] - mean[mean_off + ch]) * invstd;
  float v = xhat * gamma[gamma_off + ch] + beta[beta_off + ch];
  y[y_off + g] = relu && !(v > 0.0f || isnan(v)) ? 0.0f : v;
}

/* sum_dy[c] and sum_dy_xhat[c] with xhat = (x - mean) * invstd in float, accumulated in acc_t;
 * with relu, dy is taken as 0 where act (the fused forward's output) is not > 0. One
 * work-group per channel; s_dy, s_dyx: local size acc_t each. */
__kernel void bn_bwd_reduce(ulong n, ulong c, ulong p, ulong relu, float eps,
                            __global const float *dy, ulong dy_off, __global const float *act,
                            ulong act_off, __global const float *x, ulong x_off,
                            __global const float *mean, ulong mean_off, __global const float *var,
                            ulong var_off, __global float *sum_dy_xhat, ulong sum_dy_xhat_off,
                            __global float *sum_dy, ulong sum_dy_off, __local acc_t *s_dy,
                            __local acc_t *s_dyx) {
  ulong ch = get_group_id(0);
  float m = mean[mean_off + ch];
  float invstd = dpt_bn_invstd(var[var_off + ch], eps);
  acc_t a_dy = 0, a_dyx = 0;
  for (dpt_bn_walk w = dpt_bn_walk_start(p); w.img < n; dpt_bn_walk_next(&w, p)) {
    ulong i = (w.img * c + ch) * p + w.pos;
    float d = !relu || act[act_off + i] > 0.0f ? dy[dy_off + i] : 0.0f;
    float xhat = (x[x_off + i] - m) * invstd;
    a_dy += (acc_t)d;
    a_dyx += (acc_t)(d * xhat);
  }
  size_t lid = get_local_id(0);
  s_dy[lid] = a_dy;
  s_dyx[lid] = a_dyx;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (size_t s = get_local_size(0) / 2; s > 0; s /= 2) {
    if (lid < s) {
      s_dy[lid] += s_dy[lid + s];
      s_dyx[lid] += s_dyx[lid + s];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) {
    sum_dy[sum_dy_off + ch] = (float)s_dy[0];
    sum_dy_xhat[sum_dy_xhat_off + ch] = (float)s_dyx[0];
  }
}

/* dx = gamma * invstd * (dy - sum_dy / count - xhat * sum_dy_xhat / count), dy masked as in
 * bn_bwd_reduce with relu; one work-item per element (total = n * c * p). */
__kernel void bn_bwd(ulong total, ulong c, ulong p, ulong count, ulong relu, float eps,
                     __global const float *dy, ulong dy_off, __global const float *act,
                     ulong act_off, __global const float *x, ulong x_off,
                     __global const float *mean, ulong mean_off, __global const float *var,
                     ulong var_off, __global const float *gamma, ulong gamma_off,
                     __global const float *sum_dy_xhat, ulong sum_dy_xhat_off,
                     __global const float *sum_dy, ulong sum_dy_off, __global float *dx,
                     ulong dx_off) {
  size_t g = get_global_id(0);
  if (g >= total) return;
  ulong ch = (g / p) % c;
  float invstd = dpt_bn_invstd(var[var_off + ch], eps);
  float k = gamma[gamma_off + ch] * invstd;
  float a = sum_dy[sum_dy_off + ch] / (float)count;
  float b = sum_dy_xhat[sum_dy_xhat_off + ch] / (float)count;
  float xhat = (x[x_off + g] - mean[mean_off + ch]) * invstd;
  float d = !relu || act[act_off + g] > 0.0f ? dy[dy_off + g] : 0.0f;
  dx[dx_off + g] = k * (d - a - xhat * b);
}

/* ---- average pooling (no padding) ----------------------------------------------------------- */

/* y [planes, oh, ow] = window sum (row-major order) / (kh * kw); one work-item per output. */
__kernel void avgpool_fwd(ulong total, ulong h, ulong w, ulong kh, ulong kw, ulong sh, ulong sw,
                          ulong oh, ulong ow, __global const float *x, ulong x_off,
                          __global float *y, ulong y_off) {
  size_t g = get_global_id(0);
  if (g >= total) return;
  ulong ox = g % ow, t = g / ow;
  ulong oy = t % oh, p = t / oh;
  __global const float *xp = x + x_off + p * h * w + (oy * sh) * w + ox * sw;
  float sum = 0.0f;
  for (ulong ki = 0; ki < kh; ++ki)
    for (ulong kj = 0; kj < kw; ++kj)
      sum += xp[ki * w + kj];
  y[y_off + g] = sum / (float)(kh * kw);
}

/* dx [planes, h, w] (overwritten) = sum over the windows holding the element, in (oy, ox)
 * order, of dy / (kh * kw): the gather form of the CPU reference's scatter; one work-item per
 * dx element. Windows holding row iy: oy * sh <= iy < oy * sh + kh. */
__kernel void avgpool_bwd(ulong total, ulong h, ulong w, ulong kh, ulong kw, ulong sh, ulong sw,
                          ulong oh, ulong ow, __global const float *dy, ulong dy_off,
                          __global float *dx, ulong dx_off) {
  size_t g = get_global_id(0);
  if (g >= total) return;
  ulong hw = h * w;
  ulong i = g % hw, p = g / hw;
  ulong iy = i / w, ix = i % w;
  ulong oy0 = iy >= kh ? (iy - kh) / sh + 1 : 0, oy1 = min(iy / sh, oh - 1);
  ulong ox0 = ix >= kw ? (ix - kw) / sw + 1 : 0, ox1 = min(ix / sw, ow - 1);
  __global const float *dyp = dy + dy_off + p * oh * ow;
  float area = (float)(kh * kw);
  float sum = 0.0f;
  /* oy0 > oy1 (an element below or right of every window) leaves the sum 0. */
  for (ulong oy = oy0; oy <= oy1; ++oy)
    for (ulong ox = ox0; ox <= ox1; ++ox)
      sum += dyp[oy * ow + ox] / area;
  dx[dx_off + g] = sum;
}

/* ---- dropout -------------------------------------------------------------------------------- */

/* lowbias32, as dpt_mix32 of backends/backend_impl.h (32-bit unsigned arithmetic). */
inline uint dpt_mix32(uint h) {
  h ^= h >> 16;
  h *= 0x7feb352dU;
  h ^= h >> 15;
  h *= 0x846ca68bU;
  h ^= h >> 16;
  return h;
}

/* y [rows, cols] = keep ? x * scale : 0 with keep = (mix(mix(key ^ (first_row + r)) ^ c) >> 8)
 * >= threshold; one work-item per element (total = rows * cols); y may be x. */
__kernel void dropout(ulong total, ulong cols, uint key, uint threshold, uint first_row,
                      float scale, __global const float *x, ulong x_off, __global float *y,
                      ulong y_off) {
  size_t g = get_global_id(0);
  if (g >= total) return;
  uint r = (uint)(g / cols), col = (uint)(g % cols);
  uint h = dpt_mix32(dpt_mix32(key ^ (first_row + r)) ^ col);
  y[y_off + g] = (h >> 8) >= threshold ? x[x_off + g] * scale : 0.0f;
}

/* ---- layer normalization over x [rows, cols] ------------------------------------------------ */

/* One work-item per row: mean and biased variance in acc_t (two passes), rstd = 1 / sqrt(var +
 * eps), y = (x - mean) * rstd * gamma + beta in float. */
__kernel void layernorm_fwd(ulong rows, ulong cols, float eps, __global const float *x,
                            ulong x_off, __global const float *gamma, ulong gamma_off,
                            __global const float *beta, ulong beta_off, __global float *y,
                            ulong y_off, __global float *mean, ulong mean_off,
                            __global float *rstd, ulong rstd_off) {
  size_t r = get_global_id(0);
  if (r >= rows) return;
  __global const float *xr = x + x_off + r * cols;
  __global float *yr = y + y_off + r * cols;
  acc_t s = 0, q = 0;
  for (ulong c = 0; c < cols; ++c)
    s += (acc_t)xr[c];
  acc_t md = s / (acc_t)cols;
  for (ulong c = 0; c < cols; ++c) {
    acc_t d = (acc_t)xr[c] - md;
    q += d * d;
  }
  float m = (float)md, inv = 1.0f / sqrt((float)(q / (acc_t)cols) + eps);
  mean[mean_off + r] = m;
  rstd[rstd_off + r] = inv;
  for (ulong c = 0; c < cols; ++c)
    yr[c] = (xr[c] - m) * inv * gamma[gamma_off + c] + beta[beta_off + c];
}

/* One work-item per row: dx = rstd * (gd - mean(gd) - xhat * mean(gd * xhat)), gd = dy * gamma,
 * the means accumulated in acc_t. */
__kernel void layernorm_bwd(ulong rows, ulong cols, __global const float *dy, ulong dy_off,
                            __global const float *x, ulong x_off, __global const float *mean,
                            ulong mean_off, __global const float *rstd, ulong rstd_off,
                            __global const float *gamma, ulong gamma_off, __global float *dx,
                            ulong dx_off) {
  size_t r = get_global_id(0);
  if (r >= rows) return;
  __global const float *xr = x + x_off + r * cols, *dyr = dy + dy_off + r * cols;
  __global float *dxr = dx + dx_off + r * cols;
  float m = mean[mean_off + r], inv = rstd[rstd_off + r];
  acc_t s = 0, sx = 0;
  for (ulong c = 0; c < cols; ++c) {
    float gd = dyr[c] * gamma[gamma_off + c], xhat = (xr[c] - m) * inv;
    s += (acc_t)gd;
    sx += (acc_t)gd * (acc_t)xhat;
  }
  float ma = (float)(s / (acc_t)cols), mb = (float)(sx / (acc_t)cols);
  for (ulong c = 0; c < cols; ++c) {
    float gd = dyr[c] * gamma[gamma_off + c], xhat = (xr[c] - m) * inv;
    dxr[c] = inv * (gd - ma - xhat * mb);
  }
}

/* One work-item per column: dgamma = sum of dy * xhat, dbeta = sum of dy over the rows in row
 * order (acc_t), so the result does not depend on scheduling. */
__kernel void layernorm_bwd_params(ulong cols, ulong rows, __global const float *dy, ulong dy_off,
                                   __global const float *x, ulong x_off,
                                   __global const float *mean, ulong mean_off,
                                   __global const float *rstd, ulong rstd_off,
                                   __global float *dgamma, ulong dgamma_off,
                                   __global float *dbeta, ulong dbeta_off) {
  size_t c = get_global_id(0);
  if (c >= cols) return;
  acc_t sg = 0, sb = 0;
  for (ulong r = 0; r < rows; ++r) {
    float d = dy[dy_off + r * cols + c];
    float xhat = (x[x_off + r * cols + c] - mean[mean_off + r]) * rstd[rstd_off + r];
    sg += (acc_t)d * (acc_t)xhat;
    sb += (acc_t)d;
  }
  dgamma[dgamma_off + c] = (float)sg;
  dbeta[dbeta_off + c] = (float)sb;
}

/* ---- GELU ----------------------------------------------------------------------------------- */

/* Phi(x) (approx 0: 0.5 (1 + erf(x / sqrt 2)); 1: 0.5 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))))
 * and the slope d(x Phi(x)) / dx, in float, both tails accurate as in the CPU reference: erfc
 * for 1 + erf, and 1 / (1 + e^(-2u)) for 0.5 (1 + tanh u), with 1 - tanh^2 = 4 cdf (1 - cdf). */
inline float dpt_gelu_eval(float x, ulong approx, float *slope) {
  if (approx) {
    float u = 0.7978845608f * (x + 0.044715f * x * x * x), e = exp(-2.0f * fabs(u));
    float hi = 1.0f / (1.0f + e), lo = e / (1.0f + e);
    float cdf = u >= 0.0f ? hi : lo;
    *slope = cdf + 2.0f * x * hi * lo * 0.7978845608f * (1.0f + 0.134145f * x * x);
    return cdf;
  }
  float cdf = 0.5f * erfc(-x * 0.7071067812f);
  *slope = cdf + x * 0.3989422804f * exp(-0.5f * x * x);
  return cdf;
}

/* y = x * Phi(x); one work-item per element; y may be x. */
__kernel void gelu_fwd(ulong n, ulong approx, __global const float *x, ulong x_off,
                       __global float *y, ulong y_off) {
  size_t g = get_global_id(0);
  if (g >= n) return;
  float v = x[x_off + g], slope;
  y[y_off + g] = v * dpt_gelu_eval(v, approx, &slope);
}

/* dx = dy * gelu'(x); one work-item per element; dx may be dy. */
__kernel void gelu_bwd(ulong n, ulong approx, __global const float *x, ulong x_off,
                       __global const float *dy, ulong dy_off, __global float *dx, ulong dx_off) {
  size_t g = get_global_id(0);
  if (g >= n) return;
  float slope;
  dpt_gelu_eval(x[x_off + g], approx, &slope);
  dx[dx_off + g] = dy[dy_off + g] * slope;
}

/* Linear's bias and GELU fused: x[r, c] += bias[c] (x keeps the pre-activation), y = x Phi(x);
 * one work-item per element. */
__kernel void bias_gelu_fwd(ulong n, ulong cols, ulong approx, __global float *x, ulong x_off,
                            __global const float *bias, ulong bias_off, __global float *y,
                            ulong y_off) {
  size_t g = get_global_id(0);
  if (g >= n) return;
  float v = x[x_off + g] + bias[bias_off + g % cols], slope;
  x[x_off + g] = v;
  y[y_off + g] = v * dpt_gelu_eval(v, approx, &slope);
}

/* Its backward: dx = dy * gelu'(x) and db = beta * db + column sums of dx; one work-item per
 * column walks down the rows in order. dx may be dy; beta == 0 does not read db. */
__kernel void bias_gelu_bwd(ulong cols, ulong rows, ulong approx, float beta,
                            __global const float *x, ulong x_off, __global const float *dy,
                            ulong dy_off, __global float *dx, ulong dx_off, __global float *db,
                            ulong db_off) {
  size_t c = get_global_id(0);
  if (c >= cols) return;
  acc_t acc = 0;
  for (ulong r = 0; r < rows; ++r) {
    float slope;
    dpt_gelu_eval(x[x_off + r * cols + c], approx, &slope);
    float d = dy[dy_off + r * cols + c] * slope;
    dx[dx_off + r * cols + c] = d;
    acc += d;
  }
  acc_t old = beta == 0.0f ? 0 : (acc_t)beta * db[db_off + c];
  db[db_off + c] = (float)(old + acc);
}

/* ---- attention's probabilities, fused (one work-group per row, reducing in local memory) ----- */

/* One head: probs[r] = softmax as attn_softmax (in place: the scores in, row r = query r % q of
 * sample i = r / q) and, with has_drop, dropped[r, t] = keep ? probs * drop_scale : 0 with keep
 * the dropout mask of row first_row + i, column (r % q) * k + t. */
__kernel void attn_probs_fwd(ulong q, ulong k, float scale, int has_ids, int pad_id,
                             __global const int *ids, ulong ids_off, __global float *probs,
                             ulong probs_off, int has_drop, uint key, uint threshold,
                             uint first_row, float drop_scale, __global float *dropped,
                             ulong dropped_off, __local acc_t *lred) {
  ulong r = get_group_id(0), lid = get_local_id(0), nl = get_local_size(0), i = r / q;
  __global float *y = probs + probs_off + r * k, *yd = dropped + dropped_off + r * k;
  __global const int *kid = ids + ids_off + i * k;

  acc_t mx = -INFINITY;
  for (ulong t = lid; t < k; t += nl)
    if (!has_ids || kid[t] != pad_id) mx = fmax(mx, (acc_t)scale * (acc_t)y[t]);
  mx = dpt_group_reduce(mx, 0, lred);

  acc_t sum = 0;
  for (ulong t = lid; t < k; t += nl)
    if (!has_ids || kid[t] != pad_id) sum += exp((acc_t)scale * (acc_t)y[t] - mx);
  sum = dpt_group_reduce(sum, 1, lred);

  acc_t inv = sum > 0 ? 1 / sum : 0;
  uint hr = dpt_mix32(key ^ (first_row + (uint)i)), c0 = (uint)((r % q) * k);
  for (ulong t = lid; t < k; t += nl) {
    acc_t e = (!has_ids || kid[t] != pad_id) ? exp((acc_t)scale * (acc_t)y[t] - mx) : 0;
    float p = (float)(e * inv);
    y[t] = p; /* each work-item reads and writes only its own columns */
    if (has_drop) {
      uint h = dpt_mix32(hr ^ (c0 + (uint)t));
      yd[t] = (h >> 8) >= threshold ? p * drop_scale : 0.0f;
    }
  }
}

/* dx[r] = y * (g - sum_c y * g), g = dropped != 0 ? dy * drop_scale : 0 (has_drop), else dy;
 * dx may be dy. */
__kernel void attn_probs_bwd(ulong cols, int has_drop, float drop_scale, __global const float *y,
                             ulong y_off, __global const float *dropped, ulong dropped_off,
                             __global const float *dy, ulong dy_off, __global float *dx,
                             ulong dx_off, __local acc_t *lred) {
  ulong r = get_group_id(0), lid = get_local_id(0), nl = get_local_size(0);
  __global const float *yr = y + y_off + r * cols, *dr = dropped + dropped_off + r * cols;
  __global const float *dyr = dy + dy_off + r * cols;
  __global float *dxr = dx + dx_off + r * cols;
  acc_t dot = 0;
  for (ulong c = lid; c < cols; c += nl) {
    float g = !has_drop ? dyr[c] : dr[c] != 0.0f ? dyr[c] * drop_scale : 0.0f;
    dot += (acc_t)yr[c] * (acc_t)g;
  }
  dot = dpt_group_reduce(dot, 1, lred);
  for (ulong c = lid; c < cols; c += nl) {
    float g = !has_drop ? dyr[c] : dr[c] != 0.0f ? dyr[c] * drop_scale : 0.0f;
    dxr[c] = (float)((acc_t)yr[c] * ((acc_t)g - dot));
  }
}
