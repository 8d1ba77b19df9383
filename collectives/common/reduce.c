/* The sums the collectives apply to received data: float32, binary16 and bfloat16 (both
 * summed in float32, rounded to the 16-bit type after every addition), and int64 (modulo 2^64,
 * through unsigned arithmetic: exact in any order). Every rank applies the same
 * additions in the same order, so results are bit-identical; a + b == b + a exactly in IEEE
 * arithmetic, which lets a rank add a partner's vector to its own in either order. */
#include <string.h>

#include "collectives/common/reduce.h"
#include "base/half.h"
#include "collectives/common/comm_struct.h"

#if defined(__GNUC__)
/* 8 floats at a time through the compiler's vector extension: without it gcc -O2 keeps the
 * loop scalar, and a sum that runs from cache then costs more than the transfer. */
typedef float dpt_v8f __attribute__((vector_size(32)));
#define DPT_V8 8
#endif

static void sum_f32(float *dst, const float *a, const float *b, size_t n) {
  size_t i = 0;
#if defined(DPT_V8)
  for (; i + DPT_V8 <= n; i += DPT_V8) {
    dpt_v8f va, vb;
    memcpy(&va, a + i, sizeof va);
    memcpy(&vb, b + i, sizeof vb);
    va += vb;
    memcpy(dst + i, &va, sizeof va);
  }
#endif
  for (; i < n; ++i)
    dst[i] = a[i] + b[i];
}

static void sum_f16(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n) {
  dpt_half_sum_n(dst, a, b, n); /* F16C where the CPU has it */
}

#if defined(DPT_V8)
/* bfloat16 sums on 4 words of two values: the hardware's width on SSE2, where gcc -O2 turns a
 * wider vector's compares into one compare per lane. */
typedef uint32_t dpt_v4u __attribute__((vector_size(16)));
typedef int32_t dpt_v4i __attribute__((vector_size(16)));
typedef float dpt_v4f __attribute__((vector_size(16)));

/* All ones in the lanes of x (float32 bits) that hold a NaN: a signed compare (SSE2 has no
 * unsigned one), exact as the magnitudes are non-negative int32. */
static inline dpt_v4u v4_nan(dpt_v4u x) {
  return (dpt_v4u)((dpt_v4i)(x & 0x7fffffffu) > 0x7f800000);
}

/* A bfloat16 in the top half of each lane (low half zero) to float32, NaN quieted. */
static inline dpt_v4f v4_widen(dpt_v4u x) {
  return (dpt_v4f)(x | (v4_nan(x) & 0x00400000u));
}

/* float32 to bfloat16 in the top half of each lane (low half garbage), as
 * dpt_bfloat_from_f32: round to nearest even, NaN quieted. */
static inline dpt_v4u v4_narrow(dpt_v4f f) {
  const dpt_v4u u = (dpt_v4u)f, nan = v4_nan(u);
  return ((u | 0x00400000u) & nan) | ((u + 0x7fffu + ((u >> 16) & 1u)) & ~nan);
}
#endif

static void sum_bf16(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n) {
  size_t i = 0;
#if defined(DPT_V8)
  /* 8 values at a time as 4 words of two: a bfloat16 is the top half of its float32, so each
   * half of a word becomes a float32 by a shift or a mask and the rounded sum goes back there,
   * without changing the lane width (which SSE2 lacks). Either byte order works: both halves
   * are treated alike and written back where they came from. */
  for (; i + DPT_V8 <= n; i += DPT_V8) {
    dpt_v4u wa, wb;
    memcpy(&wa, a + i, sizeof wa);
    memcpy(&wb, b + i, sizeof wb);
    const dpt_v4u lo = v4_narrow(v4_widen(wa << 16) + v4_widen(wb << 16));
    const dpt_v4u hi = v4_narrow(v4_widen(wa & 0xffff0000u) + v4_widen(wb & 0xffff0000u));
    const dpt_v4u out = (hi & 0xffff0000u) | (lo >> 16);
    memcpy(dst + i, &out, sizeof out);
  }
#endif
  for (; i < n; ++i)
    dst[i] = dpt_bfloat_from_f32(dpt_bfloat_to_f32(a[i]) + dpt_bfloat_to_f32(b[i]));
}

static void sum_i64(int64_t *dst, const int64_t *a, const int64_t *b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    dst[i] = (int64_t)((uint64_t)a[i] + (uint64_t)b[i]);
}

void dpt_sum_to(void *dst, const void *a, const void *b, size_t n, dpt_comm_dtype dtype) {
  if (dtype == DPT_COMM_I64)
    sum_i64(dst, a, b, n);
  else if (dtype == DPT_COMM_F16)
    sum_f16(dst, a, b, n);
  else if (dtype == DPT_COMM_BF16)
    sum_bf16(dst, a, b, n);
  else
    sum_f32(dst, a, b, n);
}

void dpt_sum_into(void *dst, const void *src, size_t n, dpt_comm_dtype dtype) {
  dpt_sum_to(dst, dst, src, n, dtype);
}

void dpt_direct_sum(const dpt_comm *c, void *data, const void *const *payload, size_t count,
                    dpt_comm_dtype dtype) {
  /* ((x0 + x1) + x2) + ... on every rank; this rank's own vector is read from its copy in
   * payload[rank], since `data` is overwritten by the first addition. */
  if (c->size == 1 || count == 0) return;
  dpt_sum_to(data, payload[0], payload[1], count, dtype);
  for (int r = 2; r < c->size; ++r)
    dpt_sum_into(data, payload[r], count, dtype);
}
