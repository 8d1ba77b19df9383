#version 450
#extension GL_GOOGLE_include_directive : require
// out[i, d] = table[idx[i], d]; an index outside [0, vocab) gives NaN. n = rows * dim. The table
// binding holds rows [first, first + trows) (a table larger than one window takes a dispatch
// per chunk of rows): rows of other indices are left to the other dispatches, the NaN rows to
// the one with first == 0.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer T { float table[]; };
layout(std430, set = 0, binding = 1) readonly buffer I { int idx[]; };
layout(std430, set = 0, binding = 2) writeonly buffer O { float outv[]; };
layout(push_constant) uniform P {
  uint n, t_off, i_off, o_off, dim, vocab, first, trows;
} pc;

void main() {
  uint t = dpt_gid();
  if (t >= pc.n) return;
  uint i = t / pc.dim;
  uint d = t % pc.dim;
  int v = idx[pc.i_off + i];
  uint r = uint(v) - pc.first; // wraps past trows for v < first (first + trows <= 2^32)
  if (v >= 0 && r < pc.trows) {
    outv[pc.o_off + t] = table[pc.t_off + r * pc.dim + d];
  } else if (pc.first == 0u && (v < 0 || uint(v) >= pc.vocab)) {
    outv[pc.o_off + t] = DPT_NAN;
  }
}
