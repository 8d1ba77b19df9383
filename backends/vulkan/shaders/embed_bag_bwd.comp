#version 450
#extension GL_GOOGLE_include_directive : require
// Embedding bags, backward: dtable[k, d] += dout[i, d] (times 1 / the bag's ids for mean != 0)
// for each slot of sample i holding an id k in [0, vocab). Deterministic and race-free without
// atomics: invocation (b, d), b < buckets, owns column d of every row k with k % buckets == b
// and walks this dispatch's samples i = 0 .. rows-1 and their slots s = 0 .. bag-1 in order,
// so each dtable element has one writer that adds its terms in the CPU reference's order. The
// host splits the samples over dispatches (recorded in order) to stay within lavapipe's loop
// budget: rows * (1 + 2 * bag) iterations per invocation. n = buckets * dim. dtable is the
// window of table rows [first, first + trows) (a table larger than one window takes a dispatch
// per chunk of rows); ids outside it are left to the other chunks' dispatches.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer G { float dout[]; };
layout(std430, set = 0, binding = 1) readonly buffer I { int idx[]; };
layout(std430, set = 0, binding = 2) buffer T { float dtable[]; };
layout(push_constant) uniform P {
  uint n, g_off, i_off, t_off, dim, first, trows, bag, stride, mean, rows, buckets;
} pc;

void main() {
  uint g = dpt_gid();
  if (g >= pc.n) return;
  uint d = g % pc.dim;
  uint b = g / pc.dim;
  for (uint i = 0u; i < pc.rows; ++i) {
    uint ib = pc.i_off + i * pc.stride;
    // The mean's count, in every invocation: a count inside the divergent search below would
    // run once per distinct first-match slot across the SIMD lanes, past the loop budget.
    float inv = 1.0;
    if (pc.mean != 0u) {
      uint cnt = 0u;
      for (uint u = 0u; u < pc.bag; ++u) cnt += idx[ib + u] >= 0 ? 1u : 0u;
      inv = cnt > 0u ? 1.0 / float(cnt) : 1.0;
    }
    precise float term = inv * dout[pc.g_off + i * pc.dim + d];
    for (uint s = 0u; s < pc.bag; ++s) {
      int k = idx[ib + s];
      uint r = uint(k) - pc.first; // wraps past trows for k < first (first + trows <= 2^32)
      if (k < 0 || r >= pc.trows || r % pc.buckets != b) continue;
      uint at = pc.t_off + r * pc.dim + d;
      precise float sum = dtable[at] + term;
      dtable[at] = sum;
    }
  }
}
