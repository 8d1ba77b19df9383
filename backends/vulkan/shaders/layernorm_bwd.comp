#version 450
#extension GL_GOOGLE_include_directive : require
// The input gradient of layer normalization, one invocation per row of x [rows, cols]:
// dx = rstd * (gd - mean(gd) - xhat * mean(gd * xhat)), gd = dy * gamma, xhat = (x - mean) *
// rstd, the means in float. 2 * cols loop iterations: the host bounds cols.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer DY { float dy[]; };
layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 2) readonly buffer M { float mean[]; };
layout(std430, set = 0, binding = 3) readonly buffer R { float rstd[]; };
layout(std430, set = 0, binding = 4) readonly buffer G { float gamma[]; };
layout(std430, set = 0, binding = 5) writeonly buffer DX { float dx[]; };
layout(push_constant) uniform P {
  uint rows, cols, dy_off, x_off, mean_off, rstd_off, gamma_off, dx_off;
} pc;

void main() {
  uint r = dpt_gid();
  if (r >= pc.rows) return;
  uint base = r * pc.cols;
  float m = mean[pc.mean_off + r], inv = rstd[pc.rstd_off + r];
  float s = 0.0, sx = 0.0;
  for (uint c = 0u; c < pc.cols; ++c) {
    precise float gd = dy[pc.dy_off + base + c] * gamma[pc.gamma_off + c];
    precise float xhat = (x[pc.x_off + base + c] - m) * inv;
    s += gd;
    sx += gd * xhat;
  }
  float ma = s / float(pc.cols), mb = sx / float(pc.cols);
  for (uint c = 0u; c < pc.cols; ++c) {
    precise float gd = dy[pc.dy_off + base + c] * gamma[pc.gamma_off + c];
    precise float xhat = (x[pc.x_off + base + c] - m) * inv;
    precise float v = inv * (gd - ma - xhat * mb);
    dx[pc.dx_off + base + c] = v;
  }
}
