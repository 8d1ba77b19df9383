#version 450
#extension GL_GOOGLE_include_directive : require
// Batch-norm statistics of x [n, c, p]: one workgroup per channel (the linear workgroup index)
// sums its n*p values in float partial sums (a strided share per invocation, then a tree in
// shared memory): the mean first, then the mean of squared deviations (the biased variance).
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer M { float mean[]; };
layout(std430, set = 0, binding = 2) writeonly buffer V { float var[]; };
layout(push_constant) uniform P {
  uint n, c, p, x_off, mean_off, var_off;
} pc;

shared float part[256];

float total(float v) {
  uint l = gl_LocalInvocationID.x;
  part[l] = v;
  barrier();
  for (uint s = 128u; s > 0u; s >>= 1) {
    if (l < s) part[l] += part[l + s];
    barrier();
  }
  float t = part[0];
  barrier();
  return t;
}

void main() {
  uint ch = dpt_group();
  if (ch >= pc.c) return; // whole workgroups leave together
  uint cnt = pc.n * pc.p;
  float s = 0.0;
  for (uint e = gl_LocalInvocationID.x; e < cnt; e += 256u) {
    uint i = e / pc.p;
    s += x[pc.x_off + (i * pc.c + ch) * pc.p + (e - i * pc.p)];
  }
  float m = total(s) / float(cnt);
  float q = 0.0;
  for (uint e = gl_LocalInvocationID.x; e < cnt; e += 256u) {
    uint i = e / pc.p;
    float d = x[pc.x_off + (i * pc.c + ch) * pc.p + (e - i * pc.p)] - m;
    q += d * d;
  }
  float v = total(q) / float(cnt);
  if (gl_LocalInvocationID.x == 0u) {
    mean[pc.mean_off + ch] = m;
    var[pc.var_off + ch] = v;
  }
}
