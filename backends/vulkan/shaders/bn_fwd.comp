#version 450
#extension GL_GOOGLE_include_directive : require
// y = (x - mean) * invstd * gamma + beta over x [n, c, p], invstd = 1 / sqrt(var + eps), in
// float left to right without contraction (as the CPU backend), then max(y, 0) (NaN kept) with
// relu; one invocation per element.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer M { float mean[]; };
layout(std430, set = 0, binding = 2) readonly buffer V { float var[]; };
layout(std430, set = 0, binding = 3) readonly buffer G { float gamma[]; };
layout(std430, set = 0, binding = 4) readonly buffer B { float beta[]; };
layout(std430, set = 0, binding = 5) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P {
  uint total, c, p, x_off, mean_off, var_off, gamma_off, beta_off, y_off, relu;
  float eps;
} pc;

void main() {
  uint t = dpt_gid();
  if (t >= pc.total) return;
  uint ch = (t / pc.p) % pc.c;
  precise float inv = 1.0 / sqrt(var[pc.var_off + ch] + pc.eps);
  precise float v = (x[pc.x_off + t] - mean[pc.mean_off + ch]) * inv * gamma[pc.gamma_off + ch] +
                    beta[pc.beta_off + ch];
  y[pc.y_off + t] = pc.relu == 0u || v > 0.0 || dpt_isnan(v) ? v : 0.0;
}
