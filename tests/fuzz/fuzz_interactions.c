/* Fuzz target: interaction shards (core/recsys/interactions.c), one shard through a memfd,
 * read as rank 0 of 1. An accepted shard's records are labels 0/1 and ids inside their tables,
 * and its first epoch's steps index only local records. */
#include <stdlib.h>
#include <unistd.h>

#include "dptrain/interactions.h"
#include "tests/fuzz/fuzz.h"

static void walk_records(const dpt_interactions *d) {
  const size_t n = dpt_interactions_local_records(d);
  const uint32_t ns = dpt_interactions_num_sparse(d);
  const uint64_t *tables = dpt_interactions_table_sizes(d);
  dpt_fuzz_check(n == dpt_interactions_total_records(d), "one rank holds fewer than all");
  for (size_t i = 0; i < n; i++) {
    const float label = dpt_interactions_label(d, i);
    dpt_fuzz_check(label == 0.0f || label == 1.0f, "a label other than 0 or 1");
    const int32_t *ids = dpt_interactions_sparse(d, i);
    for (uint32_t j = 0; j < ns; j++)
      dpt_fuzz_check(ids[j] >= 0 && (uint64_t)ids[j] < tables[j], "an id outside its table");
  }
}

static void walk_epoch(dpt_interactions *d) {
  const size_t n = dpt_interactions_local_records(d);
  const size_t batch = n < 4 ? n : 4;
  if (batch == 0) return;
  const uint64_t steps = dpt_interactions_steps(d, batch);
  const size_t local = dpt_interactions_local_batch(d, batch);
  uint64_t *idx = malloc(local * sizeof *idx);
  float *labels = malloc(local * sizeof *labels);
  dpt_fuzz_check(idx && labels, "out of memory");
  for (uint64_t s = 0; s < steps && s < 64; s++) {
    dpt_fuzz_check(dpt_interactions_step_indices(d, 7, 0, batch, s, idx) == DPT_OK,
                   "step_indices failed on a step < steps");
    for (size_t k = 0; k < local; k++)
      dpt_fuzz_check(idx[k] < n, "a step index past the local records");
    dpt_fuzz_check(dpt_interactions_gather(d, idx, local, NULL, NULL, labels) == DPT_OK,
                   "gather failed on the step's indices");
  }
  dpt_fuzz_rejected(dpt_interactions_step_indices(d, 7, 0, batch, steps, idx));
  free(idx);
  free(labels);
}

int dpt_fuzz_one(const uint8_t *data, size_t size) {
  char path[64];
  const int fd = dpt_fuzz_memfd(data, size, path);
  dpt_interactions *d = NULL;
  const dpt_status s = dpt_interactions_open(path, 0, 1, &d);
  close(fd);
  if (s != DPT_OK) return dpt_fuzz_rejected(s);
  walk_records(d);
  walk_epoch(d);
  dpt_interactions_destroy(d);
  return 1;
}
