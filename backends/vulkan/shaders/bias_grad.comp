#version 450
#extension GL_GOOGLE_include_directive : require
// db[c] = beta * db[c] + sum_r dy[r, c]. A workgroup owns 32 columns; its 8 rows of
// invocations stride over the rows and meet in shared memory. beta == 0 does not read db.
layout(local_size_x = 32, local_size_y = 8) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer DY { float dy[]; };
layout(std430, set = 0, binding = 1) buffer DB { float db[]; };
layout(push_constant) uniform P { uint rows, cols, dy_off, db_off; float beta; } pc;

shared float part[8][32];

void main() {
  uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
  uint c = dpt_group() * 32u + lx;
  float acc = 0.0;
  if (c < pc.cols)
    for (uint r = ly; r < pc.rows; r += 8u) acc += dy[pc.dy_off + r * pc.cols + c];
  part[ly][lx] = acc;
  barrier();
  if (ly == 0u && c < pc.cols) {
    float s = part[0][lx];
    for (uint k = 1u; k < 8u; ++k) s += part[k][lx];
    if (pc.beta != 0.0) s += pc.beta * db[pc.db_off + c];
    db[pc.db_off + c] = s;
  }
}
