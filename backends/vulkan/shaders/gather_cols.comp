#version 450
#extension GL_GOOGLE_include_directive : require
// Column gather between row-major matrices (SCATTER 0): y[r * ldy + j] = x[r * ldx + map[j]],
// 0 for an entry outside [0, ldx); its adjoint (SCATTER 1, scatter_cols_add):
// x[r * ldx + map[j]] += y[r * ldy + j], entries outside [0, ldx) skipped. The in-range entries
// are distinct (the API's contract), so each x element has at most one writer. One invocation
// per (r, j): n = rows * cols.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(constant_id = 0) const uint SCATTER = 0;
layout(std430, set = 0, binding = 0) buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer M { int map[]; };
layout(std430, set = 0, binding = 2) buffer Y { float y[]; };
layout(push_constant) uniform P { uint n, x_off, m_off, y_off, cols, ldx, ldy; } pc;

void main() {
  uint g = dpt_gid();
  if (g >= pc.n) return;
  uint r = g / pc.cols;
  uint j = g % pc.cols;
  int c = map[pc.m_off + j];
  bool in_range = c >= 0 && uint(c) < pc.ldx;
  uint xi = pc.x_off + r * pc.ldx + uint(c);
  uint yi = pc.y_off + r * pc.ldy + j;
  if (SCATTER == 0u) {
    y[yi] = in_range ? x[xi] : 0.0;
  } else if (in_range) {
    precise float s = x[xi] + y[yi];
    x[xi] = s;
  }
}
