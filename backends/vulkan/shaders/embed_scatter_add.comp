#version 450
#extension GL_GOOGLE_include_directive : require
// Second pass of embed_scatter_add, a gather: the first row i of each index v owns
// dtable[v, :] and adds dout[j, d] for j = i, links[i], links[links[i]], ... in increasing j,
// the order of a sequential scatter, so repeated indices need no atomics. n = rows * dim. The
// dtable binding holds rows [first, first + trows) (a table larger than one window takes a
// dispatch per chunk of rows); owners of other rows are left to the other dispatches.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer G { float dout[]; };
layout(std430, set = 0, binding = 1) readonly buffer I { int idx[]; };
layout(std430, set = 0, binding = 2) readonly buffer K { uint links[]; };
layout(std430, set = 0, binding = 3) buffer T { float dtable[]; };
layout(push_constant) uniform P {
  uint n, g_off, i_off, t_off, dim, rows, first, trows;
} pc;

const uint NONE = 0xffffffffu;

void main() {
  uint t = dpt_gid();
  if (t >= pc.n) return;
  uint i = t / pc.dim;
  uint d = t % pc.dim;
  if (links[pc.rows + i] == 0u) return;
  uint r = uint(idx[pc.i_off + i]) - pc.first; // valid here; wraps past trows below first
  if (r >= pc.trows) return;
  uint at = pc.t_off + r * pc.dim + d;
  float acc = dtable[at];
  for (uint j = i; j != NONE; j = links[j]) acc += dout[pc.g_off + j * pc.dim + d];
  dtable[at] = acc;
}
