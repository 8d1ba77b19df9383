#version 450
#extension GL_GOOGLE_include_directive : require
// bfloat16 -> float32, exact: the 16 bits become the top half; a NaN gets the quiet bit. The
// output is written as integers, so no float operation can flush subnormals. The source is
// read by 32-bit words; offsets count halves.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer S { uint src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer D { uint dst[]; };
layout(push_constant) uniform P { uint n, src_off, dst_off; } pc;

void main() {
  uint i = dpt_gid();
  if (i >= pc.n) return;
  uint q = pc.src_off + i;
  uint word = src[q >> 1];
  uint x = ((q & 1u) != 0u ? word >> 16 : word & 0xffffu) << 16;
  dst[pc.dst_off + i] = (x & 0x7fffffffu) > 0x7f800000u ? x | 0x00400000u : x;
}
