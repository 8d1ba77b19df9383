#version 450
#extension GL_GOOGLE_include_directive : require
// Attention's probabilities' backward, one workgroup per row of y, dropped, dy, dx [rows, cols]:
//   g = dropped != 0 ? dy * drop_scale : 0 (has_drop != 0; else g = dy), then
//   dx = y * (g - sum_c y[c] * g[c]).
// Each invocation reads and writes only its own columns, so dx may be dy (in place).
layout(local_size_x = 128) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 1) readonly buffer R { float dropped[]; };
layout(std430, set = 0, binding = 2) readonly buffer D { float dy[]; };
layout(std430, set = 0, binding = 3) buffer X { float dx[]; };
layout(push_constant) uniform P {
  uint rows, cols, y_off, r_off, dy_off, dx_off, has_drop;
  float drop_scale;
} pc;

shared float sv[128];

float grad(uint rb, uint db, uint c) {
  if (pc.has_drop == 0u) return dy[db + c];
  return dropped[rb + c] != 0.0 ? dy[db + c] * pc.drop_scale : 0.0;
}

void main() {
  uint row = dpt_group();
  uint lid = gl_LocalInvocationID.x;
  if (row >= pc.rows) return; // the whole workgroup leaves together
  uint yb = pc.y_off + row * pc.cols, rb = pc.r_off + row * pc.cols;
  uint db = pc.dy_off + row * pc.cols, xb = pc.dx_off + row * pc.cols;

  float d = 0.0;
  for (uint c = lid; c < pc.cols; c += 128u) d += y[yb + c] * grad(rb, db, c);
  sv[lid] = d;
  barrier();
  for (uint w = 64u; w > 0u; w >>= 1) {
    if (lid < w) sv[lid] += sv[lid + w];
    barrier();
  }
  d = sv[0];

  for (uint c = lid; c < pc.cols; c += 128u) dx[xb + c] = y[yb + c] * (grad(rb, db, c) - d);
}
