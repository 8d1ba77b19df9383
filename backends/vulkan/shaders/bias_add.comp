#version 450
#extension GL_GOOGLE_include_directive : require
// y[r, c] += bias[c] over y [rows, cols]; n = rows * cols.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) buffer Y { float y[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float bias[]; };
layout(push_constant) uniform P { uint n, y_off, b_off, cols; } pc;

void main() {
  uint i = dpt_gid();
  if (i >= pc.n) return;
  y[pc.y_off + i] += bias[pc.b_off + i % pc.cols];
}
