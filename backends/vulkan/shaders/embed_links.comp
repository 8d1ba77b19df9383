#version 450
#extension GL_GOOGLE_include_directive : require
// First pass of embed_scatter_add: for every row i, links[i] = the next row j > i with the same
// index (NONE if none) and links[n + i] = 1 when i is the first row of its index (valid
// indices only). O(n^2) comparisons, staged through shared memory 256 indices at a time.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer I { int idx[]; };
layout(std430, set = 0, binding = 1) writeonly buffer K { uint links[]; };
layout(push_constant) uniform P { uint n, i_off, vocab; } pc;

const uint NONE = 0xffffffffu;
shared int tile[256];

void main() {
  uint i = dpt_gid();
  uint lid = gl_LocalInvocationID.x;
  int v = i < pc.n ? idx[pc.i_off + i] : -1;
  bool first = true;
  uint next = NONE;
  for (uint base = 0u; base < pc.n; base += 256u) {
    barrier();
    tile[lid] = base + lid < pc.n ? idx[pc.i_off + base + lid] : -1;
    barrier();
    uint count = min(256u, pc.n - base);
    for (uint k = 0u; k < count; ++k) {
      uint j = base + k;
      if (tile[k] != v) continue;
      if (j < i) first = false;
      else if (j > i && next == NONE) next = j;
    }
  }
  if (i < pc.n) {
    bool valid = v >= 0 && uint(v) < pc.vocab;
    links[i] = next;
    links[pc.n + i] = (valid && first) ? 1u : 0u;
  }
}
