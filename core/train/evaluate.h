/* Internal: data-parallel evaluation (evaluate.c). */
#ifndef DPTRAIN_CORE_TRAIN_EVALUATE_H
#define DPTRAIN_CORE_TRAIN_EVALUATE_H

#include "core/train/replica.h"

/* The test set, each replica a contiguous shard: loss and accuracy per target. */
dpt_status dpt_train_evaluate(replica *r, replica_state *s, double *loss, double *accuracy);
/* Per-replica validation records: loss, accuracy, exact AUC and logloss into rep. */
dpt_status dpt_train_evaluate_records(replica *r, replica_state *s, dpt_train_report *rep);

#endif
