/* Internal: the trainer's batch split, cfg->devices.split (train_split.c). */
#ifndef DPTRAIN_CORE_TRAIN_TRAIN_SPLIT_H
#define DPTRAIN_CORE_TRAIN_TRAIN_SPLIT_H

#include "core/train/replica.h"

/* The largest slice of a batch of `batch` samples over `count` replicas: the even slice, or
 * with the proportional split twice that (at most batch - count + 1). */
size_t dpt_train_split_cap(const dpt_train_config *cfg, int count, size_t batch);
/* The shares, even at first; reads the DPT_TEST_SLOW_REPLICA testing knob. */
dpt_status dpt_train_split_setup(replica *r, replica_state *s);
void dpt_train_split_free(replica_state *s);
/* This replica's slice of a batch of bcount samples (<= the global batch). */
dpt_status dpt_train_split_slice(const replica *r, const replica_state *s, size_t bcount,
                                 size_t *start, size_t *count);
/* After a step's exchange (s->gather holds every replica's stats): the window's times, and at
 * its end new shares, the same on every replica; cfg->callbacks.on_split when they change. */
void dpt_train_split_after_step(replica *r, replica_state *s);
/* Whether the split measures the replicas' compute times (proportional, several replicas). */
int dpt_train_split_measures(const replica_state *s);
/* [count] samples per replica of a full global batch; NULL before the set-up. */
const size_t *dpt_train_split_shares(const replica_state *s);
/* The testing knob: sleeps (factor - 1) x seconds on the replica it names. */
void dpt_train_split_slow_down(const replica_state *s, double seconds);

#endif
