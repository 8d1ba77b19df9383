#version 450
#extension GL_GOOGLE_include_directive : require
// Layer normalization over x [rows, cols], one invocation per row: mean and biased variance in
// float (two passes), rstd = 1 / sqrt(var + eps), y = (x - mean) * rstd * gamma + beta without
// contraction (as the CPU backend). 3 * cols loop iterations: the host bounds cols.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer G { float gamma[]; };
layout(std430, set = 0, binding = 2) readonly buffer B { float beta[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 4) writeonly buffer M { float mean[]; };
layout(std430, set = 0, binding = 5) writeonly buffer R { float rstd[]; };
layout(push_constant) uniform P {
  uint rows, cols, x_off, gamma_off, beta_off, y_off, mean_off, rstd_off;
  float eps;
} pc;

void main() {
  uint r = dpt_gid();
  if (r >= pc.rows) return;
  uint base = r * pc.cols;
  float s = 0.0;
  for (uint c = 0u; c < pc.cols; ++c)
    s += x[pc.x_off + base + c];
  float m = s / float(pc.cols);
  float q = 0.0;
  for (uint c = 0u; c < pc.cols; ++c) {
    float d = x[pc.x_off + base + c] - m;
    q += d * d;
  }
  precise float inv = 1.0 / sqrt(q / float(pc.cols) + pc.eps);
  mean[pc.mean_off + r] = m;
  rstd[pc.rstd_off + r] = inv;
  for (uint c = 0u; c < pc.cols; ++c) {
    precise float v = (x[pc.x_off + base + c] - m) * inv * gamma[pc.gamma_off + c] +
                      beta[pc.beta_off + c];
    y[pc.y_off + base + c] = v;
  }
}
