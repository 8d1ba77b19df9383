/* The distributed sampler and the batch split. Both are pure functions of their arguments, so
 * every rank and replica computes the same epoch order and the same slices without talking.
 *
 *   permutation (n samples)   | p0 p1 p2 ... | ... | ... p(n-1) |
 *   global batches of B        [   batch 0   ][  batch 1 ] ... [last: n % B, only with keep_last]
 *   batch k split over R       [ r0 | r1 | r2 | r3 ]   sizes B/R or B/R + 1, larger ones first
 */

#include "base/error.h"
#include "base/rng.h"
#include "dptrain/data.h"

dpt_status dpt_sampler_permutation(uint64_t seed, uint64_t epoch, int shuffle, size_t n,
                                   uint64_t *perm) {
  if (n == 0) return DPT_OK;
  if (!perm) return dpt_set_error(DPT_ERR_INVALID_ARG, "sampler_permutation: perm is NULL");
  for (size_t i = 0; i < n; i++)
    perm[i] = i;
  if (!shuffle) return DPT_OK;
  dpt_rng rng;
  dpt_rng_seed(&rng, seed, epoch);
  /* Fisher-Yates from the top: position i swaps with a uniform j in [0, i]. The draws go through
   * dpt_rng_below, whose result does not depend on the width of size_t. */
  for (size_t i = n - 1; i > 0; i--) {
    const size_t j = (size_t)dpt_rng_below(&rng, (uint64_t)i + 1u);
    const uint64_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  return DPT_OK;
}

size_t dpt_sampler_num_batches(size_t n, size_t global_batch, int keep_last) {
  if (global_batch == 0) return 0;
  return n / global_batch + (keep_last && n % global_batch != 0 ? 1u : 0u);
}

size_t dpt_sampler_last_batch(size_t n, size_t global_batch, int keep_last) {
  if (dpt_sampler_num_batches(n, global_batch, keep_last) == 0) return 0;
  return keep_last && n % global_batch != 0 ? n % global_batch : global_batch;
}

dpt_status dpt_sampler_batch(size_t n, size_t global_batch, int keep_last, size_t k, size_t *start,
                             size_t *count) {
  if (!start || !count)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "sampler_batch: %s is NULL",
                         !start ? "start" : "count");
  if (global_batch == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "sampler_batch: global batch size is 0");
  const size_t batches = dpt_sampler_num_batches(n, global_batch, keep_last);
  if (k >= batches)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "sampler_batch: batch %zu is past the epoch's %zu batches (%zu samples, "
                         "batch size %zu, keep_last %d)",
                         k, batches, n, global_batch, keep_last ? 1 : 0);
  /* k < batches <= ceil(n / B), so k * B < n: no overflow. */
  *start = k * global_batch;
  *count = n - *start < global_batch ? n - *start : global_batch;
  return DPT_OK;
}

dpt_status dpt_batch_split(size_t batch, int replicas, int replica, size_t *start, size_t *count) {
  if (!start || !count)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "batch_split: %s is NULL",
                         !start ? "start" : "count");
  if (replicas < 1)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "batch_split: replica count %d must be >= 1",
                         replicas);
  if (replica < 0 || replica >= replicas)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "batch_split: replica %d is outside [0, %d)", replica,
                         replicas);
  if (batch == 0) return dpt_set_error(DPT_ERR_INVALID_ARG, "batch_split: batch size is 0");
  const size_t r = (size_t)replicas, i = (size_t)replica;
  if (batch < r) { /* the first `batch` replicas take one sample each, the others none */
    *start = i < batch ? i : batch;
    *count = i < batch ? 1u : 0u;
    return DPT_OK;
  }
  const size_t base = batch / r, extra = batch % r;
  /* Replicas below `extra` hold base + 1 samples, the rest base. */
  *start = i * base + (i < extra ? i : extra);
  *count = base + (i < extra ? 1u : 0u);
  return DPT_OK;
}
