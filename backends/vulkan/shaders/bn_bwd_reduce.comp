#version 450
#extension GL_GOOGLE_include_directive : require
// Per channel of dy, x [n, c, p]: sum_dy = sum of dy, sum_dy_xhat = sum of dy * xhat with
// xhat = (x - mean) * invstd, invstd = 1 / sqrt(var + eps). One workgroup per channel, float
// partial sums reduced as a tree in shared memory. With relu, dy is taken as 0 where act (the
// fused forward's output) is not > 0.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer DY { float dy[]; };
layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 2) readonly buffer M { float mean[]; };
layout(std430, set = 0, binding = 3) readonly buffer V { float var[]; };
layout(std430, set = 0, binding = 4) writeonly buffer SX { float sum_dy_xhat[]; };
layout(std430, set = 0, binding = 5) writeonly buffer SD { float sum_dy[]; };
layout(std430, set = 0, binding = 6) readonly buffer A { float act[]; };
layout(push_constant) uniform P {
  uint n, c, p, dy_off, x_off, mean_off, var_off, sx_off, sd_off, act_off, relu;
  float eps;
} pc;

shared vec2 part[256];

void main() {
  uint ch = dpt_group();
  if (ch >= pc.c) return; // whole workgroups leave together
  uint l = gl_LocalInvocationID.x;
  uint cnt = pc.n * pc.p;
  float m = mean[pc.mean_off + ch];
  precise float inv = 1.0 / sqrt(var[pc.var_off + ch] + pc.eps);
  vec2 s = vec2(0.0);
  for (uint e = l; e < cnt; e += 256u) {
    uint i = e / pc.p;
    uint at = (i * pc.c + ch) * pc.p + (e - i * pc.p);
    float g = pc.relu == 0u || act[pc.act_off + at] > 0.0 ? dy[pc.dy_off + at] : 0.0;
    precise float xhat = (x[pc.x_off + at] - m) * inv;
    s += vec2(g, g * xhat);
  }
  part[l] = s;
  barrier();
  for (uint h = 128u; h > 0u; h >>= 1) {
    if (l < h) part[l] += part[l + h];
    barrier();
  }
  if (l == 0u) {
    sum_dy[pc.sd_off + ch] = part[0].x;
    sum_dy_xhat[pc.sx_off + ch] = part[0].y;
  }
}
