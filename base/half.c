/* Arrays of binary16 conversions (base/half.h): F16C where the CPU has it, 8 values at a time
 * with the same bits as the portable conversions, else those. */
#include "base/half.h"

/* GCC only: clang's __builtin_cpu_supports knows no "f16c" (clang builds the fuzz targets). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define DPT_F16C 1

static int have_f16c(void) {
  return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
}

__attribute__((target("avx,f16c"))) static size_t from_f32_f16c(uint16_t *dst, const float *src,
                                                                size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(void *)(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  return i;
}

__attribute__((target("avx,f16c"))) static size_t to_f32_f16c(float *dst, const uint16_t *src,
                                                              size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + i))));
  return i;
}

__attribute__((target("avx,f16c"))) static size_t sum_f16c(uint16_t *dst, const uint16_t *a,
                                                           const uint16_t *b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 va = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(a + i)));
    const __m256 vb = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(b + i)));
    _mm_storeu_si128((__m128i *)(void *)(dst + i),
                     _mm256_cvtps_ph(_mm256_add_ps(va, vb), _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}
#endif

void dpt_half_from_f32_n(uint16_t *dst, const float *src, size_t n) {
  size_t i = 0;
#if defined(DPT_F16C)
  if (have_f16c()) i = from_f32_f16c(dst, src, n);
#endif
  for (; i < n; ++i)
    dst[i] = dpt_half_from_f32(src[i]);
}

void dpt_half_to_f32_n(float *dst, const uint16_t *src, size_t n) {
  size_t i = 0;
#if defined(DPT_F16C)
  if (have_f16c()) i = to_f32_f16c(dst, src, n);
#endif
  for (; i < n; ++i)
    dst[i] = dpt_half_to_f32(src[i]);
}

void dpt_half_sum_n(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n) {
  size_t i = 0;
#if defined(DPT_F16C)
  if (have_f16c()) i = sum_f16c(dst, a, b, n);
#endif
  for (; i < n; ++i)
    dst[i] = dpt_half_from_f32(dpt_half_to_f32(a[i]) + dpt_half_to_f32(b[i]));
}
