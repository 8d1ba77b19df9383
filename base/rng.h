/* Internal: the library's deterministic pseudo-random generator.
 *
 * xoshiro256** (Blackman & Vigna, 2018) seeded through splitmix64. Pure 64-bit integer
 * arithmetic, so a (seed, stream) pair gives the same sequence on every platform and compiler;
 * every rank of a distributed run that seeds alike draws alike (the shuffling sampler, weight
 * initialization). Not for cryptography. One generator is used by one thread at a time.
 */
#ifndef DPTRAIN_BASE_RNG_H
#define DPTRAIN_BASE_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct dpt_rng {
  uint64_t s[4]; /* xoshiro256 state; never all zero */
} dpt_rng;

/* Seeds from a (seed, stream) pair: different streams of one seed are independent sequences
 * (e.g. stream = epoch for the sampler, or a parameter tensor's index for initialization). */
void dpt_rng_seed(dpt_rng *rng, uint64_t seed, uint64_t stream);

/* Seeds from a seed and a key of n words (e.g. epoch, sequence, position): the words are
 * folded through splitmix64's finalizer into the stream, starting from `domain`, a constant
 * per use that keeps one use's streams apart from another's. Every draw then depends on the
 * (seed, key) pair alone, not on what was drawn before. */
void dpt_rng_seed_key(dpt_rng *rng, uint64_t seed, uint64_t domain, const uint64_t *key, size_t n);

/* The next 64 uniformly distributed bits. */
uint64_t dpt_rng_next(dpt_rng *rng);

/* Uniform double in [0, 1) with 53 random bits (a multiple of 2^-53). */
double dpt_rng_uniform(dpt_rng *rng);

/* Uniform integer in [0, n) without modulo bias (rejection sampling); 0 when n is 0. The
 * number of draws it consumes depends only on the values drawn, so it stays reproducible. */
uint64_t dpt_rng_below(dpt_rng *rng, uint64_t n);

/* Standard normal sample (Box-Muller, one value per two draws). Uses libm's log, sqrt and cos:
 * the draws are identical everywhere, the result is identical wherever libm rounds alike
 * (glibc on x86-64 and aarch64 does). */
double dpt_rng_normal(dpt_rng *rng);

#endif
