#version 450
#extension GL_GOOGLE_include_directive : require
// dx = x > 0 ? dy : 0; dx may alias dy.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer DY { float dy[]; };
layout(std430, set = 0, binding = 2) buffer DX { float dx[]; };
layout(push_constant) uniform P { uint n, x_off, dy_off, dx_off; } pc;

void main() {
  uint i = dpt_gid();
  if (i >= pc.n) return;
  float g = dy[pc.dy_off + i];
  dx[pc.dx_off + i] = x[pc.x_off + i] > 0.0 ? g : 0.0;
}
