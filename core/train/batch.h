/* Internal: loading a replica's samples or records as the device batch (batch.c). */
#ifndef DPTRAIN_CORE_TRAIN_BATCH_H
#define DPTRAIN_CORE_TRAIN_BATCH_H

#include "core/train/replica.h"

/* Uploads the given samples, transformed by t for `epoch` (t NULL: as stored), as the device
 * batch. */
dpt_status dpt_train_load_batch(replica_state *s, const dpt_dataset *ds, const uint64_t *idx,
                                size_t count, const dpt_data_transform *t, int64_t epoch);
/* The targets among n labels: those not DPT_IGNORE_INDEX. */
int64_t dpt_train_count_targets(const int32_t *labels, size_t n);
/* Uploads count records of d (local indices idx) as the device batch. */
dpt_status dpt_train_load_records(replica_state *s, const dpt_interactions *d, const uint64_t *idx,
                                  size_t count);

#endif
