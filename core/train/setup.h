/* Internal: a replica's set-up and tear-down (setup.c). */
#ifndef DPTRAIN_CORE_TRAIN_SETUP_H
#define DPTRAIN_CORE_TRAIN_SETUP_H

#include "core/train/replica.h"

/* The exchange arrays, first of all (so a replica that fails later still takes part in the
 * start-up agreement). */
dpt_status dpt_train_alloc_exchange(replica *r, replica_state *s);
/* Backend, model, batch buffers, the parts (split, sparse tables, buckets, checkpoints), the
 * optimizer, the timeline, the initial parameters. */
dpt_status dpt_train_replica_setup(replica *r, replica_state *s);
/* Collective: every replica's terms of the run against replica 0's; the run's batches and
 * planned steps. */
dpt_status dpt_train_agree_on_run(replica *r, replica_state *s);
/* Collective: replica 0's parameters to every replica, then the first drift check. */
dpt_status dpt_train_broadcast_params(replica *r, replica_state *s);
/* This replica's backend: its entry of replica_backends, else cfg->devices.backend. */
dpt_backend_kind dpt_train_backend_of(const replica *r);
/* Frees everything the set-up made (waits for a checkpoint being written first). */
void dpt_train_state_free(replica_state *s);

#endif
