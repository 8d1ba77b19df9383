/* Element-wise ops: one work-item per element. */

__kernel void relu_fwd(ulong n, __global const float *x, ulong x_off, __global float *y,
                       ulong y_off) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  float v = x[x_off + i];
  /* NaN propagates, so that a non-finite check downstream still sees it. */
  y[y_off + i] = v > 0.0f || isnan(v) ? v : 0.0f;
}

/* y = max(a + b, 0), NaN kept; y may equal a or b. */
__kernel void add_relu(ulong n, __global const float *a, ulong a_off, __global const float *b,
                       ulong b_off, __global float *y, ulong y_off) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  float v = a[a_off + i] + b[b_off + i];
  y[y_off + i] = v > 0.0f || isnan(v) ? v : 0.0f;
}

__kernel void relu_bwd(ulong n, __global const float *x, ulong x_off, __global const float *dy,
                       ulong dy_off, __global float *dx, ulong dx_off) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  dx[dx_off + i] = x[x_off + i] > 0.0f ? dy[dy_off + i] : 0.0f;
}

/* y [rows, cols] += bias [cols] broadcast over rows; n = rows * cols. */
__kernel void bias_add(ulong n, ulong cols, __global float *y, ulong y_off,
                       __global const float *bias, ulong bias_off) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  y[y_off + i] += bias[bias_off + i % cols];
}

__kernel void axpy(ulong n, float alpha, __global const float *x, ulong x_off, __global float *y,
                   ulong y_off) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  y[y_off + i] += alpha * x[x_off + i];
}

__kernel void scale(ulong n, float alpha, __global float *x, ulong x_off) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  x[x_off + i] *= alpha;
}
