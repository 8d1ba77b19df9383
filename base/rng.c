/* xoshiro256** seeded by splitmix64; see base/rng.h. */
#include "base/rng.h"

#include <math.h>

/* splitmix64 (Steele, Lea & Flood, 2014): a bijective mix of a Weyl sequence, so distinct
 * counters give distinct outputs and even seeds 0, 1, 2 start from well-spread states. */
static uint64_t dpt_splitmix64(uint64_t *counter) {
  uint64_t z = (*counter += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t dpt_rotl64(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

void dpt_rng_seed(dpt_rng *rng, uint64_t seed, uint64_t stream) {
  /* Every state word mixes both inputs: xoshiro's first outputs depend on single state words,
   * so words taken from the seed alone would repeat across streams. The stream counter is
   * offset so that (s, s) does not cancel to zero under the XOR. */
  uint64_t a = seed;
  uint64_t b = stream ^ 0x6a09e667f3bcc909ull;
  for (int i = 0; i < 4; i++) {
    const uint64_t x = dpt_splitmix64(&a);
    rng->s[i] = x ^ dpt_rotl64(dpt_splitmix64(&b), 17 + 8 * i);
  }
  if ((rng->s[0] | rng->s[1] | rng->s[2] | rng->s[3]) == 0) rng->s[0] = 1; /* the one bad state */
}

/* splitmix64's finalizer: a bijection, so distinct inputs give distinct outputs. */
static uint64_t dpt_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void dpt_rng_seed_key(dpt_rng *rng, uint64_t seed, uint64_t domain, const uint64_t *key, size_t n) {
  uint64_t stream = dpt_mix64(domain);
  for (size_t i = 0; i < n; i++)
    stream = dpt_mix64(stream + key[i]);
  dpt_rng_seed(rng, seed, stream);
}

uint64_t dpt_rng_next(dpt_rng *rng) {
  uint64_t *s = rng->s;
  const uint64_t result = dpt_rotl64(s[1] * 5u, 7) * 9u;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = dpt_rotl64(s[3], 45);
  return result;
}

double dpt_rng_uniform(dpt_rng *rng) {
  return (double)(dpt_rng_next(rng) >> 11) * 0x1.0p-53;
}

uint64_t dpt_rng_below(dpt_rng *rng, uint64_t n) {
  if (n == 0) return 0;
  /* 2^64 mod n values at the bottom of the range are rejected so the accepted range is a
   * multiple of n; (-n) % n computes 2^64 mod n in 64-bit arithmetic. */
  const uint64_t threshold = (0u - n) % n;
  for (;;) {
    const uint64_t r = dpt_rng_next(rng);
    if (r >= threshold) return r % n;
  }
}

double dpt_rng_normal(dpt_rng *rng) {
  /* 1 - u lies in (0, 1], so the log is finite. */
  const double u1 = 1.0 - dpt_rng_uniform(rng);
  const double u2 = dpt_rng_uniform(rng);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}
