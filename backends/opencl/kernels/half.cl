/* float32 <-> IEEE binary16 and float32 <-> bfloat16 by bit manipulation (no cl_khr_fp16),
 * bit-exact with dpt_f32_to_f16_scalar / dpt_f16_to_f32_scalar / dpt_f32_to_bf16_scalar /
 * dpt_bf16_to_f32_scalar. Both sides are read and written as integers,
 * so no float operation can flush subnormals or quiet NaN payloads on the way. */

inline ushort dpt_f32_bits_to_f16(uint x) {
  ushort sign = (ushort)((x >> 16) & 0x8000u);
  uint ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) /* inf, NaN: keep the top payload bits, force a quiet NaN */
    return sign | (ax == 0x7f800000u ? 0x7c00u : (0x7e00u | ((ax >> 13) & 0x3ffu)));
  if (ax >= 0x477ff000u) /* rounds to >= 65520: overflows to infinity */
    return sign | 0x7c00u;
  if (ax >= 0x38800000u) /* normal half: rebias the exponent, round the mantissa to even */
    return sign | (ushort)((ax - 0x38000000u + 0xfffu + ((ax >> 13) & 1u)) >> 13);
  uint e = ax >> 23;
  if (e < 102u) /* below 2^-25: rounds to zero (2^-25 itself ties to the even 0) */
    return sign;
  /* Subnormal half: units of 2^-24, q = mantissa >> (126 - e), round half to even. */
  uint m = (ax & 0x7fffffu) | 0x800000u;
  uint shift = 126u - e; /* 14 .. 24 */
  uint q = m >> shift, rem = m & ((1u << shift) - 1u), tie = 1u << (shift - 1u);
  if (rem > tie || (rem == tie && (q & 1u))) ++q;
  return sign | (ushort)q; /* q == 0x400 is the smallest normal, encoded correctly */
}

/* h: the 16 bits, widened by the caller. The exponent field is tested in place with range
 * compares: the equality tests on a 5-bit field that compilers turn into an i5 switch are
 * mis-simulated by Oclgrind 21.10, which the conformance suite is meant to run under. */
inline uint dpt_f16_to_f32_bits(uint h) {
  uint sign = (h & 0x8000u) << 16;
  uint em = h & 0x7c00u, m = h & 0x3ffu;
  if (em >= 0x7c00u) /* inf, or NaN with its payload kept and the quiet bit set */
    return sign | 0x7f800000u | (m << 13) | (m != 0u ? 0x00400000u : 0u);
  if (em > 0u) /* normal: rebias the exponent by 127 - 15 = 112 */
    return sign | ((em + (112u << 10)) << 13) | (m << 13);
  if (m == 0u) return sign;
  /* Subnormal half: normalize, value m * 2^-24. */
  uint e = 113u;
  while ((m & 0x400u) == 0u) {
    m <<= 1;
    --e;
  }
  return sign | (e << 23) | ((m & 0x3ffu) << 13);
}

__kernel void f32_to_f16(ulong n, __global const uint *src, ulong src_off, __global ushort *dst,
                         ulong dst_off) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  dst[dst_off + i] = dpt_f32_bits_to_f16(src[src_off + i]);
}

__kernel void f16_to_f32(ulong n, __global const ushort *src, ulong src_off, __global uint *dst,
                         ulong dst_off) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  dst[dst_off + i] = dpt_f16_to_f32_bits((uint)src[src_off + i]);
}

/* bfloat16 is the top half of a float32: round to nearest even (a carry moves into the
 * exponent, up to infinity); NaN keeps its top payload bits and gets the quiet bit. */
__kernel void f32_to_bf16(ulong n, __global const uint *src, ulong src_off, __global ushort *dst,
                          ulong dst_off) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  uint x = src[src_off + i];
  if ((x & 0x7fffffffu) > 0x7f800000u)
    dst[dst_off + i] = (ushort)((x >> 16) | 0x40u);
  else
    dst[dst_off + i] = (ushort)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

__kernel void bf16_to_f32(ulong n, __global const ushort *src, ulong src_off, __global uint *dst,
                          ulong dst_off) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  uint x = (uint)src[src_off + i] << 16;
  dst[dst_off + i] = (x & 0x7fffffffu) > 0x7f800000u ? x | 0x00400000u : x;
}
