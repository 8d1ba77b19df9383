#version 450
#extension GL_GOOGLE_include_directive : require
// bias_gelu's backward: dx = dy * gelu'(x) (gelu.glsl) and db[c] = beta * db[c] + sum_r dx[r, c].
// A workgroup owns 32 columns; its 8 rows of invocations stride over the rows and meet in shared
// memory in a fixed order. dx may be dy; beta == 0 does not read db.
layout(local_size_x = 32, local_size_y = 8) in;
#include "common.glsl"
#include "gelu.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer DY { float dy[]; };
layout(std430, set = 0, binding = 2) buffer DX { float dx[]; };
layout(std430, set = 0, binding = 3) buffer DB { float db[]; };
layout(push_constant) uniform P {
  uint rows, cols, x_off, dy_off, dx_off, db_off;
  float beta;
  uint approx;
} pc;

shared float part[8][32];

void main() {
  uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
  uint c = dpt_group() * 32u + lx;
  float acc = 0.0;
  if (c < pc.cols)
    for (uint r = ly; r < pc.rows; r += 8u) {
      uint i = r * pc.cols + c;
      float slope;
      dpt_gelu_eval(x[pc.x_off + i], pc.approx, slope);
      float d = dy[pc.dy_off + i] * slope;
      dx[pc.dx_off + i] = d;
      acc += d;
    }
  part[ly][lx] = acc;
  barrier();
  if (ly == 0u && c < pc.cols) {
    float s = part[0][lx];
    for (uint k = 1u; k < 8u; ++k) s += part[k][lx];
    if (pc.beta != 0.0) s += pc.beta * db[pc.db_off + c];
    db[pc.db_off + c] = s;
  }
}
