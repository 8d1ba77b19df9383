#version 450
#extension GL_GOOGLE_include_directive : require
// Training-mode batch-norm input gradient over [n, c, p], one invocation per element, in float
// without contraction (as the CPU backend): k = gamma * invstd, a = sum_dy / count,
// b = sum_dy_xhat / count, dx = k * (dy - a - xhat * b), xhat = (x - mean) * invstd.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer DY { float dy[]; };
layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 2) readonly buffer M { float mean[]; };
layout(std430, set = 0, binding = 3) readonly buffer V { float var[]; };
layout(std430, set = 0, binding = 4) readonly buffer G { float gamma[]; };
layout(std430, set = 0, binding = 5) readonly buffer SX { float sum_dy_xhat[]; };
layout(std430, set = 0, binding = 6) readonly buffer SD { float sum_dy[]; };
layout(std430, set = 0, binding = 7) writeonly buffer DX { float dx[]; };
layout(push_constant) uniform P {
  uint total, c, p, dy_off, x_off, mean_off, var_off, gamma_off, sx_off, sd_off, dx_off;
  float eps, count;
} pc;

void main() {
  uint t = dpt_gid();
  if (t >= pc.total) return;
  uint ch = (t / pc.p) % pc.c;
  precise float inv = 1.0 / sqrt(var[pc.var_off + ch] + pc.eps);
  precise float k = gamma[pc.gamma_off + ch] * inv;
  precise float a = sum_dy[pc.sd_off + ch] / pc.count;
  precise float b = sum_dy_xhat[pc.sx_off + ch] / pc.count;
  precise float xhat = (x[pc.x_off + t] - mean[pc.mean_off + ch]) * inv;
  precise float v = k * (dy[pc.dy_off + t] - a - xhat * b);
  dx[pc.dx_off + t] = v;
}
