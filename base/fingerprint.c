/* The parameter fingerprint of the drift checks and the reports' param_hash.
 *
 * Four independent lanes over 64-bit little-endian words (multiply, rotate, multiply: every
 * input bit reaches every bit of its lane within two words), folded together with the tail
 * bytes and the length, then avalanched. Four lanes keep the multiplier busy, which matters
 * because the drift check hashes every parameter each check_every steps. Same bytes, same
 * value, on any host and at any alignment. */
#include "dptrain/fingerprint.h"

#define FP_K1 0x9E3779B185EBCA87ull
#define FP_K2 0xC2B2AE3D27D4EB4Full
#define FP_K3 0x165667B19E3779F9ull

static uint64_t fp_rotl(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}

static uint64_t fp_load(const unsigned char *p) { /* little-endian, any alignment */
  return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
         (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

static uint64_t fp_round(uint64_t lane, uint64_t w) {
  return fp_rotl(lane + w * FP_K2, 31) * FP_K1;
}

uint64_t dpt_fingerprint(const void *data, size_t bytes) {
  const unsigned char *p = data;
  uint64_t h0 = FP_K1 + FP_K2, h1 = FP_K2, h2 = 0, h3 = (uint64_t)0 - FP_K1;
  size_t i = 0;
  if (bytes > 0 && !p) return 0;
  for (; i + 32 <= bytes; i += 32) {
    h0 = fp_round(h0, fp_load(p + i));
    h1 = fp_round(h1, fp_load(p + i + 8));
    h2 = fp_round(h2, fp_load(p + i + 16));
    h3 = fp_round(h3, fp_load(p + i + 24));
  }
  const uint64_t h[4] = {h0, h1, h2, h3};
  uint64_t x = FP_K3 + (uint64_t)bytes;
  for (int l = 0; l < 4; ++l)
    x = fp_rotl(x ^ fp_round(0, h[l]), 27) * FP_K1 + FP_K3;
  for (; i + 8 <= bytes; i += 8)
    x = fp_rotl(x ^ fp_round(0, fp_load(p + i)), 27) * FP_K1 + FP_K3;
  for (; i < bytes; ++i)
    x = fp_rotl(x ^ (p[i] * FP_K3), 11) * FP_K1;
  x ^= x >> 33;
  x *= FP_K2;
  x ^= x >> 29;
  x *= FP_K3;
  return x ^ (x >> 32);
}
