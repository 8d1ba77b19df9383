/* Convolution through gemm (im2col / col2im) and max pooling. One work-item per element of
 * the tensor that is written, so no two work-items ever write the same address: the adjoint
 * ops (col2im, maxpool_bwd) gather what the forward op scattered instead of scattering with
 * atomics, and add their terms in the same order as the CPU reference's scatter loops. */

/* col [n, c*kh*kw, oh*ow], one work-item per col element (total = its element count). */
__kernel void im2col(ulong total, ulong c, ulong h, ulong w, ulong kh, ulong kw, ulong sh,
                     ulong sw, ulong ph, ulong pw, ulong oh, ulong ow, __global const float *x,
                     ulong x_off, __global float *col, ulong col_off) {
  size_t g = get_global_id(0);
  if (g >= total) return;
  ulong plane = oh * ow, rows = c * kh * kw;
  ulong s = g % plane, t = g / plane;
  ulong r = t % rows, img = t / rows;
  ulong ch = r / (kh * kw), ki = (r / kw) % kh, kj = r % kw;
  ulong oy = s / ow, ox = s % ow;
  /* Input coordinates may be negative (padding): compare before subtracting the pad. */
  ulong iy_p = oy * sh + ki, ix_p = ox * sw + kj; /* padded coordinates */
  float v = 0.0f;
  if (iy_p >= ph && iy_p - ph < h && ix_p >= pw && ix_p - pw < w)
    v = x[x_off + ((img * c + ch) * h + (iy_p - ph)) * w + (ix_p - pw)];
  col[col_off + g] = v;
}

/* dx [n, c, h, w] (overwritten) = sum of the col entries that im2col copied from each
 * element; one work-item per dx element (total = its element count). For a fixed (ki, kj),
 * the output position is oy = (iy + ph - ki) / sh when that division is exact. */
__kernel void col2im(ulong total, ulong c, ulong h, ulong w, ulong kh, ulong kw, ulong sh,
                     ulong sw, ulong ph, ulong pw, ulong oh, ulong ow, __global const float *col,
                     ulong col_off, __global float *dx, ulong dx_off) {
  size_t g = get_global_id(0);
  if (g >= total) return;
  ulong ix = g % w, t = g / w;
  ulong iy = t % h;
  t /= h;
  ulong ch = t % c, img = t / c;
  ulong plane = oh * ow;
  __global const float *cimg = col + col_off + (img * c + ch) * kh * kw * plane;
  float sum = 0.0f;
  for (ulong ki = 0; ki < kh; ++ki) {
    ulong ty = iy + ph; /* padded row of this element */
    if (ty < ki || (ty - ki) % sh != 0) continue;
    ulong oy = (ty - ki) / sh;
    if (oy >= oh) continue;
    for (ulong kj = 0; kj < kw; ++kj) {
      ulong tx = ix + pw;
      if (tx < kj || (tx - kj) % sw != 0) continue;
      ulong ox = (tx - kj) / sw;
      if (ox >= ow) continue;
      sum += cimg[(ki * kw + kj) * plane + oy * ow + ox];
    }
  }
  dx[dx_off + g] = sum;
}

/* y, argmax [planes, oh, ow]; one work-item per output element. The window is scanned in
 * row-major order and only a strictly greater value replaces the best, so argmax is the first
 * maximal element; the first NaN wins and propagates. */
__kernel void maxpool_fwd(ulong total, ulong h, ulong w, ulong kh, ulong kw, ulong sh, ulong sw,
                          ulong oh, ulong ow, __global const float *x, ulong x_off,
                          __global float *y, ulong y_off, __global int *argmax,
                          ulong argmax_off) {
  size_t g = get_global_id(0);
  if (g >= total) return;
  ulong ox = g % ow, t = g / ow;
  ulong oy = t % oh, p = t / oh;
  __global const float *xp = x + x_off + p * h * w;
  ulong y0 = oy * sh, x0 = ox * sw;
  ulong bi = y0 * w + x0;
  float best = xp[bi];
  for (ulong ki = 0; ki < kh; ++ki) {
    for (ulong kj = 0; kj < kw; ++kj) {
      ulong i = (y0 + ki) * w + (x0 + kj);
      float v = xp[i];
      if (v > best || (isnan(v) && !isnan(best))) {
        best = v;
        bi = i;
      }
    }
  }
  y[y_off + g] = best;
  argmax[argmax_off + g] = (int)bi;
}

/* dx [planes, h, w] (overwritten): each element sums dy over the windows that contain it and
 * whose argmax points at it, in (oy, ox) order. Windows containing row iy: oy*sh <= iy <
 * oy*sh + kh. Correct for overlapping windows (stride < kernel) without atomics. */
__kernel void maxpool_bwd(ulong total, ulong h, ulong w, ulong kh, ulong kw, ulong sh, ulong sw,
                          ulong oh, ulong ow, __global const float *dy, ulong dy_off,
                          __global const int *argmax, ulong argmax_off, __global float *dx,
                          ulong dx_off) {
  size_t g = get_global_id(0);
  if (g >= total) return;
  ulong hw = h * w;
  ulong i = g % hw, p = g / hw;
  ulong iy = i / w, ix = i % w;
  ulong oy0 = iy >= kh ? (iy - kh) / sh + 1 : 0, oy1 = min(iy / sh, oh - 1);
  ulong ox0 = ix >= kw ? (ix - kw) / sw + 1 : 0, ox1 = min(ix / sw, ow - 1);
  ulong base = p * oh * ow;
  float sum = 0.0f;
  for (ulong oy = oy0; oy <= oy1; ++oy)
    for (ulong ox = ox0; ox <= ox1; ++ox) {
      ulong o = base + oy * ow + ox;
      if (argmax[argmax_off + o] == (int)i) sum += dy[dy_off + o];
    }
  dx[dx_off + g] = sum;
}
