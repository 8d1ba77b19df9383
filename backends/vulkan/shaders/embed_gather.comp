#version 450
#extension GL_GOOGLE_include_directive : require
// out[i, d] = table[idx[i], d]; an index outside [0, vocab) gives NaN. n = rows * dim.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer T { float table[]; };
layout(std430, set = 0, binding = 1) readonly buffer I { int idx[]; };
layout(std430, set = 0, binding = 2) writeonly buffer O { float outv[]; };
layout(push_constant) uniform P { uint n, t_off, i_off, o_off, dim, vocab; } pc;

void main() {
  uint t = dpt_gid();
  if (t >= pc.n) return;
  uint i = t / pc.dim;
  uint d = t % pc.dim;
  int v = idx[pc.i_off + i];
  float r = DPT_NAN;
  if (v >= 0 && uint(v) < pc.vocab) r = table[pc.t_off + uint(v) * pc.dim + d];
  outv[pc.o_off + t] = r;
}
