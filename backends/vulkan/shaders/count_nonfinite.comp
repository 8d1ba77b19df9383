#version 450
#extension GL_GOOGLE_include_directive : require
// Per-workgroup counts of NaN / infinite elements of x[0, n), added on the host.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer R { uint part[]; };
layout(push_constant) uniform P { uint n, x_off, part_off, groups; } pc;

shared uint s[256];

void main() {
  uint g = dpt_group();
  uint lid = gl_LocalInvocationID.x;
  if (g >= pc.groups) return;
  uint acc = 0u;
  for (uint i = g * 256u + lid; i < pc.n; i += pc.groups * 256u)
    if (dpt_nonfinite(x[pc.x_off + i])) ++acc;
  s[lid] = acc;
  barrier();
  for (uint w = 128u; w > 0u; w >>= 1) {
    if (lid < w) s[lid] += s[lid + w];
    barrier();
  }
  if (lid == 0u) part[pc.part_off + g] = s[0];
}
