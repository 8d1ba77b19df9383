/* A replica's samples (a data set's, transformed) or records (its interaction shards) uploaded as
 * the device batch (core/train/batch.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "core/train/batch.h"
#include "dptrain/train.h"

/* Uploads the given samples, transformed by t for `epoch` (t NULL: as stored), as the device
 * batch. */
dpt_status dpt_train_load_batch(replica_state *s, const dpt_dataset *ds, const uint64_t *idx,
                                size_t count, const dpt_data_transform *t, int64_t epoch) {
  const size_t input = dpt_model_input_size(s->model);
  dpt_status st = dpt_dataset_gather_transformed(ds, idx, count, t, (uint64_t)epoch, s->hx, s->hy);
  if (st == DPT_OK) st = dpt_buffer_upload(s->x, 0, s->hx, count * input * sizeof(float));
  if (st == DPT_OK) st = dpt_buffer_upload(s->y, 0, s->hy, count * s->labels * sizeof(int32_t));
  return st;
}

/* The targets among n labels: those not DPT_IGNORE_INDEX. */
int64_t dpt_train_count_targets(const int32_t *labels, size_t n) {
  int64_t t = 0;
  for (size_t i = 0; i < n; ++i)
    t += labels[i] != DPT_IGNORE_INDEX;
  return t;
}

/* Uploads count records of d (local indices idx) as the device batch: each sample the record
 * [num_dense floats][num_sparse ids as int32 bits], its label 0 or 1. */
dpt_status dpt_train_load_records(replica_state *s, const dpt_interactions *d, const uint64_t *idx,
                                  size_t count) {
  const size_t nd = dpt_interactions_num_dense(d), ns = dpt_interactions_num_sparse(d);
  const size_t input = nd + ns;
  for (size_t i = 0; i < count; ++i) {
    float *row = s->hx + i * input;
    memcpy(row, dpt_interactions_dense(d, idx[i]), nd * sizeof(float));
    memcpy(row + nd, dpt_interactions_sparse(d, idx[i]), ns * sizeof(int32_t));
    s->hy[i] = dpt_interactions_label(d, idx[i]) >= 0.5f ? 1 : 0;
  }
  dpt_status st = dpt_buffer_upload(s->x, 0, s->hx, count * input * sizeof(float));
  if (st == DPT_OK) st = dpt_buffer_upload(s->y, 0, s->hy, count * sizeof(int32_t));
  return st;
}
