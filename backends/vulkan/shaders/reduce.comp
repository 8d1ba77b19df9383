#version 450
#extension GL_GOOGLE_include_directive : require
// Per-workgroup partial sums (MODE 0) or sums of squares (MODE 1) of x[0, n); the host adds
// the partials in double. Invocations stride over the whole range (groups * 256 apart).
layout(local_size_x = 256) in;
#include "common.glsl"
layout(constant_id = 0) const uint MODE = 0;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer R { float part[]; };
layout(push_constant) uniform P { uint n, x_off, part_off, groups; } pc;

shared float s[256];

void main() {
  uint g = dpt_group();
  uint lid = gl_LocalInvocationID.x;
  if (g >= pc.groups) return;
  float acc = 0.0;
  for (uint i = g * 256u + lid; i < pc.n; i += pc.groups * 256u) {
    float v = x[pc.x_off + i];
    acc += MODE == 1u ? v * v : v;
  }
  s[lid] = acc;
  barrier();
  for (uint w = 128u; w > 0u; w >>= 1) {
    if (lid < w) s[lid] += s[lid + w];
    barrier();
  }
  if (lid == 0u) part[pc.part_off + g] = s[0];
}
