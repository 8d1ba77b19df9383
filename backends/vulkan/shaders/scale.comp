#version 450
#extension GL_GOOGLE_include_directive : require
// x *= alpha
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) buffer X { float x[]; };
layout(push_constant) uniform P { uint n, x_off; float alpha; } pc;

void main() {
  uint i = dpt_gid();
  if (i >= pc.n) return;
  x[pc.x_off + i] *= pc.alpha;
}
