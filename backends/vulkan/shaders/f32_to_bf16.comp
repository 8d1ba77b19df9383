#version 450
#extension GL_GOOGLE_include_directive : require
// float32 -> bfloat16 (the top 16 bits) by integer arithmetic: round to nearest even (a carry
// moves into the exponent, up to infinity), NaN stays NaN (quiet, top payload bits kept). The
// output is addressed in 32-bit words as f32_to_f16.comp's: invocation t writes word
// (dst_off >> 1) + t; a value outside [dst_off, dst_off + n) keeps its old bits.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer S { uint src[]; };
layout(std430, set = 0, binding = 1) buffer D { uint dst[]; };
layout(push_constant) uniform P { uint n, src_off, dst_off; } pc;

uint to_bf16(uint x) {
  if ((x & 0x7fffffffu) > 0x7f800000u) return (x >> 16) | 0x40u; // NaN
  return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
}

void main() {
  uint t = dpt_gid();
  uint first_word = pc.dst_off >> 1;
  uint last_word = (pc.dst_off + pc.n - 1u) >> 1;
  uint word = first_word + t;
  if (word > last_word) return;
  uint q0 = word * 2u; // index of the low half
  bool lo_in = q0 >= pc.dst_off;
  bool hi_in = q0 + 1u < pc.dst_off + pc.n;
  uint old = (lo_in && hi_in) ? 0u : dst[word];
  uint lo = lo_in ? to_bf16(src[pc.src_off + (q0 - pc.dst_off)]) : (old & 0xffffu);
  uint hi = hi_in ? to_bf16(src[pc.src_off + (q0 + 1u - pc.dst_off)]) : (old >> 16);
  dst[word] = lo | (hi << 16);
}
