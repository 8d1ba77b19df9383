#version 450
#extension GL_GOOGLE_include_directive : require
// Embedding bags over a table larger than one window, forward, first pass: for each slot s of
// sample i whose id lies in the table chunk [first, first + trows) (bound as binding 0),
// rows[(i * bag + s) * dim + d] = table[id - first, d]. One dispatch per chunk fills every slot
// with a valid id; embed_bag.comp (gathered != 0) then sums them in slot order. Slots with other
// ids are left alone. One invocation per (sample, slot, d): n = samples * bag * dim.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer T { float table[]; };
layout(std430, set = 0, binding = 1) readonly buffer I { int idx[]; };
layout(std430, set = 0, binding = 2) writeonly buffer R { float rows[]; };
layout(push_constant) uniform P {
  uint n, t_off, i_off, r_off, dim, bag, stride, first, trows;
} pc;

void main() {
  uint g = dpt_gid();
  if (g >= pc.n) return;
  uint d = g % pc.dim;
  uint q = g / pc.dim;
  uint i = q / pc.bag;
  uint s = q % pc.bag;
  int k = idx[pc.i_off + i * pc.stride + s];
  uint r = uint(k) - pc.first; // wraps past trows for k < first (first + trows <= 2^32)
  if (k < 0 || r >= pc.trows) return;
  rows[pc.r_off + g] = table[pc.t_off + r * pc.dim + d];
}
