/* Internal: the trainer's gradient buckets, cfg->exchange.bucket_bytes (train_buckets.c). */
#ifndef DPTRAIN_CORE_TRAIN_TRAIN_BUCKETS_H
#define DPTRAIN_CORE_TRAIN_TRAIN_BUCKETS_H

#include "core/train/replica.h"

/* The buckets over the flat gradient, exchanged in float32 or, with s->gh, in grad_dtype; a
 * no-op without bucket_bytes, with one replica or with sparse_tables. */
dpt_status dpt_train_buckets_setup(replica *r, replica_state *s, size_t bucket_bytes);
void dpt_train_buckets_free(replica_state *s);
/* Whether the layer hook starts buckets during the next backward (the step's last one). */
void dpt_train_buckets_arm(replica_state *s, int armed);
/* The layer hook's part: starts the buckets that [ready_from, num params) now covers. */
void dpt_train_buckets_on_layer(replica_state *s, int backward, size_t ready_from);
/* Seconds of a bucketed step's exchange (dpt_train_buckets_finish). */
typedef struct bucket_times {
  double exposed;   /* waiting for the gradient's exchanges after backward */
  double busy;      /* the exchanges ran (each from when its range was ready) */
  double optimizer; /* the update in parts, between the waits */
} bucket_times;
/* After backward: starts the buckets not started yet, waits for all (in order, every one, as
 * every replica does), with the update in parts after each where the run allows it (then with
 * the sharded step the all-gathers too). Returns the first failure. */
dpt_status dpt_train_buckets_finish(replica_state *s, bucket_times *t);
/* Whether dpt_train_buckets_finish does the step's update (and all-gather) in parts: the
 * optimizer then only counts the step. */
int dpt_train_buckets_stepped(const replica_state *s);
/* Collective: the bucket size for bucket_bytes DPT_BUCKET_AUTO, the smallest all-reduce (1 to
 * 64 ring blocks) of the exchange's dtype whose bus bandwidth is within 80 % of the largest
 * measured, replica 0's choice for all; table (may be NULL) receives the measurements as text. */
dpt_status dpt_train_buckets_measure(replica *r, dpt_comm_dtype dtype, size_t *bytes, char *table,
                                     size_t cap);
/* One line for the log: how many buckets, their sizes, and whether the update runs bucket by
 * bucket (or why it waits for the last one). */
void dpt_train_buckets_describe(const replica_state *s, char *out, size_t cap);
/* The last step's request times, [*n] (for the timeline). */
const dpt_request_info *dpt_train_buckets_info(const replica_state *s, size_t *n);

/* The exchange kinds of gradient buckets over the full and the sharded step (exchange.h). */
extern const train_exchange dpt_train_exchange_buckets_full, dpt_train_exchange_buckets_sharded;

#endif
