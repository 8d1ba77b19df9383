#version 450
#extension GL_GOOGLE_include_directive : require
// y += alpha * x
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform P { uint n, x_off, y_off; float alpha; } pc;

void main() {
  uint i = dpt_gid();
  if (i >= pc.n) return;
  y[pc.y_off + i] += pc.alpha * x[pc.x_off + i];
}
