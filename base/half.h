/* IEEE 754 binary32 <-> binary16 and binary32 <-> bfloat16 conversion in integer arithmetic
 * (no _Float16, no F16C), inline for the loops that convert element by element (the
 * all-reduce's 16-bit sums); the reference every backend's f32_to_f16 / f16_to_f32 and
 * f32_to_bf16 / bf16_to_f32 ops are compared with bit for bit (dpt_f32_to_f16_scalar,
 * dpt_f32_to_bf16_scalar, ... in backends/half.c).
 *
 * binary16: sign 1 | exponent 5 (bias 15) | mantissa 10. Largest finite 65504, smallest
 * normal 2^-14, smallest subnormal 2^-24. binary32: 1 | 8 (bias 127) | 23.
 * bfloat16: the top 16 bits of a binary32, 1 | 8 (bias 127) | 7: the same range (largest
 * finite 0x1.fep127, subnormals down to 2^-133), 8 significant bits.
 */
#ifndef DPTRAIN_BASE_HALF_H
#define DPTRAIN_BASE_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t dpt_f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static inline float dpt_bits_f32(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

static inline uint16_t dpt_half_from_f32(float x) {
  const uint32_t u = dpt_f32_bits(x);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  const uint32_t mag = u & 0x7fffffffu;

  if (mag >= 0x7f800000u) {
    if (mag == 0x7f800000u) return sign | 0x7c00u;
    /* NaN: keep the top payload bits and force the quiet bit, so the result is never inf. */
    return (uint16_t)(sign | 0x7e00u | ((mag >> 13) & 0x03ffu));
  }
  /* 65520 = 65504 + half an ulp: from there on round-to-nearest-even goes to infinity. */
  if (mag >= 0x477ff000u) return sign | 0x7c00u;

  if (mag >= 0x38800000u) {
    /* Normal result (|x| >= 2^-14). Rebias the exponent in place (127 - 15 = 112), then round
     * the 23-bit mantissa to 10 bits: add just under half an ulp plus the ulp's low bit, so
     * ties go to even; a mantissa carry correctly bumps the exponent. */
    uint32_t r = mag - (112u << 23);
    r += 0x0fffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
  }

  /* Subnormal result or zero. |x| <= 2^-25 is at most half the smallest subnormal: the tie at
   * exactly 2^-25 rounds to even, i.e. to zero. */
  if (mag <= 0x33000000u) return sign;
  /* |x| = m * 2^(e - 150) with the implicit bit in m; in units of 2^-24 that is
   * m >> (126 - e), shift in [14, 24] for e in [102, 112]. A rounded-up 0x3ff gives 0x400,
   * which is exactly the encoding of the smallest normal. */
  const uint32_t e = mag >> 23;
  const uint32_t m = (mag & 0x007fffffu) | 0x00800000u;
  const uint32_t shift = 126u - e;
  uint32_t h = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (h & 1u))) h += 1u;
  return (uint16_t)(sign | h);
}

static inline float dpt_half_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x03ffu;

  if (exp == 0x1fu) {
    /* inf, or NaN with its payload kept and the quiet bit set (as hardware converts). */
    return dpt_bits_f32(sign | 0x7f800000u | (man << 13) | (man != 0 ? 0x00400000u : 0u));
  }
  if (exp != 0) return dpt_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
  if (man == 0) return dpt_bits_f32(sign);
  /* Subnormal: man * 2^-24 is exact in binary32 (a normal number there). */
  const float mag = (float)man * 0x1p-24f;
  return dpt_bits_f32(sign | dpt_f32_bits(mag));
}

/* Round to nearest even by adding just under half an ulp plus the kept part's low bit; a
 * carry moves into the exponent, so subnormals become normals and the largest finite
 * value's upper half (>= 0x1.fefp127) becomes infinity, as IEEE rounding does. */
static inline uint16_t dpt_bfloat_from_f32(float x) {
  const uint32_t u = dpt_f32_bits(x);
  /* NaN: keep the sign and top payload bits and force the quiet bit, so a payload only in
   * the dropped bits never turns into infinity. */
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* Exact; a NaN keeps its payload and gets the quiet bit (as hardware converts). */
static inline float dpt_bfloat_to_f32(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  return dpt_bits_f32((u & 0x7fffffffu) > 0x7f800000u ? u | 0x00400000u : u);
}

/* n values at a time (base/half.c): F16C where the CPU has it, with the same bits as the
 * functions above (round to nearest even, subnormals kept, NaN payloads kept, quiet). */
void dpt_half_from_f32_n(uint16_t *dst, const float *src, size_t n);
void dpt_half_to_f32_n(float *dst, const uint16_t *src, size_t n);
/* dst[i] = a[i] + b[i] in float32, rounded to binary16; dst may equal a or b. */
void dpt_half_sum_n(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n);

#endif
