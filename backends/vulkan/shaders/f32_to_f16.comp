#version 450
#extension GL_GOOGLE_include_directive : require
// float32 -> IEEE binary16 by bit manipulation (no 16-bit features needed): round to nearest
// even, overflow to infinity, NaN stays NaN (quiet, top payload bits kept). The output is
// addressed in 32-bit words: invocation t writes word (dst_off >> 1) + t, two halves; a half
// outside [dst_off, dst_off + n) keeps its old value (read-modify-write of the edge words).
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer S { float src[]; };
layout(std430, set = 0, binding = 1) buffer D { uint dst[]; };
layout(push_constant) uniform P { uint n, src_off, dst_off; } pc;

uint to_half(float f) {
  uint x = floatBitsToUint(f);
  uint sign = (x >> 16) & 0x8000u;
  uint ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) // infinity or NaN
    return sign | 0x7c00u | (ax > 0x7f800000u ? 0x0200u | ((ax >> 13) & 0x03ffu) : 0u);
  if (ax >= 0x477ff000u) return sign | 0x7c00u; // rounds to 65536 or more
  if (ax >= 0x38800000u) {                       // normal half
    uint h = (ax - 0x38000000u) >> 13;           // rebias exponent 127 -> 15
    uint rest = ax & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0u)) ++h; // may carry into exponent
    return sign | h;
  }
  if (ax < 0x33000000u) return sign; // below half the smallest subnormal: zero
  // subnormal half: mantissa with the implicit bit, shifted to units of 2^-24
  uint e = ax >> 23;
  uint mant = (ax & 0x7fffffu) | 0x800000u;
  uint shift = 126u - e; // 14 .. 24 for e in [102, 112]
  uint h = mant >> shift;
  uint rest = mant & ((1u << shift) - 1u);
  uint half_ulp = 1u << (shift - 1u);
  if (rest > half_ulp || (rest == half_ulp && (h & 1u) != 0u)) ++h;
  return sign | h;
}

void main() {
  uint t = dpt_gid();
  uint first_word = pc.dst_off >> 1;
  uint last_word = (pc.dst_off + pc.n - 1u) >> 1;
  uint word = first_word + t;
  if (word > last_word) return;
  uint q0 = word * 2u; // half index of the low half
  bool lo_in = q0 >= pc.dst_off;
  bool hi_in = q0 + 1u < pc.dst_off + pc.n;
  uint old = (lo_in && hi_in) ? 0u : dst[word];
  uint lo = lo_in ? to_half(src[pc.src_off + (q0 - pc.dst_off)]) : (old & 0xffffu);
  uint hi = hi_in ? to_half(src[pc.src_off + (q0 + 1u - pc.dst_off)]) : (old >> 16);
  dst[word] = lo | (hi << 16);
}
