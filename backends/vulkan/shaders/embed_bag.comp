#version 450
#extension GL_GOOGLE_include_directive : require
// Embedding bags, forward: out[i, d] = the sum (mean != 0: the mean) of table[id, d] over sample
// i's ids idx[i * stride + s], s < bag, added slot by slot in order like the CPU reference; an
// id < 0 is an empty slot, an id >= vocab makes the row NaN, a mean of no id is 0. One
// invocation per output element (n = samples * dim); bag iterations each (the host bounds bag
// by lavapipe's loop budget). gathered != 0: binding 0 holds the slots' rows instead of the
// table, slot s of sample i at row i * bag + s (embed_bag_gather.comp, for a table split into
// windows), so the sum keeps the slot order of the unsplit table.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer T { float table[]; };
layout(std430, set = 0, binding = 1) readonly buffer I { int idx[]; };
layout(std430, set = 0, binding = 2) writeonly buffer O { float outv[]; };
layout(push_constant) uniform P {
  uint n, t_off, i_off, o_off, dim, vocab, bag, stride, mean, gathered;
} pc;

void main() {
  uint g = dpt_gid();
  if (g >= pc.n) return;
  uint i = g / pc.dim;
  uint d = g % pc.dim;
  uint ib = pc.i_off + i * pc.stride;
  float acc = 0.0;
  uint cnt = 0u;
  for (uint s = 0u; s < pc.bag; ++s) {
    int t = idx[ib + s];
    if (t < 0) continue;
    if (uint(t) >= pc.vocab) {
      outv[pc.o_off + g] = DPT_NAN;
      return;
    }
    ++cnt;
    uint row = pc.gathered != 0u ? i * pc.bag + s : uint(t);
    acc += table[pc.t_off + row * pc.dim + d];
  }
  if (pc.mean != 0u && cnt > 0u) {
    precise float inv = 1.0 / float(cnt);
    acc *= inv;
  }
  outv[pc.o_off + g] = acc;
}
