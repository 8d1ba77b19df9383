#version 450
#extension GL_GOOGLE_include_directive : require
// The softmax's backward, one workgroup per row of y, dy, dx [rows, cols]:
//   dx = y * (dy - sum_c y[c] * dy[c]).
// Each invocation reads and writes only its own columns (lid, lid + 128, ...), so dx may be
// dy (in place).
layout(local_size_x = 128) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 1) readonly buffer D { float dy[]; };
layout(std430, set = 0, binding = 2) buffer X { float dx[]; };
layout(push_constant) uniform P {
  uint rows, cols, y_off, dy_off, dx_off;
} pc;

shared float sv[128];

void main() {
  uint row = dpt_group();
  uint lid = gl_LocalInvocationID.x;
  if (row >= pc.rows) return; // the whole workgroup leaves together
  uint yb = pc.y_off + row * pc.cols, db = pc.dy_off + row * pc.cols;
  uint xb = pc.dx_off + row * pc.cols;

  float d = 0.0;
  for (uint c = lid; c < pc.cols; c += 128u) d += y[yb + c] * dy[db + c];
  sv[lid] = d;
  barrier();
  for (uint w = 64u; w > 0u; w >>= 1) {
    if (lid < w) sv[lid] += sv[lid + w];
    barrier();
  }
  d = sv[0];

  for (uint c = lid; c < pc.cols; c += 128u) dx[xb + c] = y[yb + c] * (dy[db + c] - d);
}
