/* Internal: how a step combines the replicas' gradients and updates the parameters (exchange.c).
 *
 * One kind per way of doing it: the full step (all-reduce, every replica updates everything),
 * the sharded step (reduce-scatter, each replica updates its shard, all-gather), the 16-bit
 * exchange, gradient buckets over each of those, sparse tables, and no exchange at all. The
 * kind is chosen once per run (dpt_train_exchange_pick) and the step calls it at three points:
 * after backward (reduce), to count what is not finite, and to update. A new way of exchanging
 * is a new file exchange_<kind>.c with its table of these calls and a line in the list of
 * exchange_kinds.c (docs/training.md, *Adding an exchange kind*). */
#ifndef DPTRAIN_CORE_TRAIN_EXCHANGE_H
#define DPTRAIN_CORE_TRAIN_EXCHANGE_H

#include "core/train/replica.h"

/* Seconds of a step's exchange. */
typedef struct exchange_times {
  double exposed;   /* waiting for it after backward */
  double busy;      /* it ran (buckets: each from when its range was ready) */
  double optimizer; /* the update in parts it did (buckets), counted as the optimizer's */
} exchange_times;

struct train_exchange {
  const char *name; /* for messages, the docs and DPT_EXCHANGE */
  /* Whether this kind serves the replica's run (its step mode, s->gh, s->buckets, s->sparse);
   * the first kind of the list that applies is the run's. */
  int (*applies)(const replica_state *s);
  /* After backward: the gradient summed over the replicas in what this replica updates (its
   * shard, or everything). Every replica joins, whatever its local outcome (s->pending); a
   * collective's failure is returned. NULL: no exchange (each replica keeps its own). */
  dpt_status (*reduce)(replica *r, replica_state *s, exchange_times *t);
  /* Non-finite values in the reduced gradient this replica holds. */
  dpt_status (*count_nonfinite)(replica_state *s, int64_t *out);
  /* The optimizer's update of what this replica owns, with sumsq the agreed squared gradient
   * norm (0 when not agreed). Joins the collectives the update needs whatever s->pending says;
   * updates nothing after a local failure. DPT_ERR_NONFINITE: a non-finite gradient norm. */
  dpt_status (*update)(replica *r, replica_state *s, double sumsq);
  /* Optional: after the update, the parameters made whole on every replica; every replica
   * joins. Returns its time spent in *comm seconds. */
  dpt_status (*gather)(replica *r, replica_state *s);
  /* Optional: 1 when reduce did the update and the gather too (buckets, in parts): the step is
   * then only counted. */
  int (*stepped)(const replica_state *s);
};

/* The kinds, in the order they are tried (exchange_kinds.c): the first that applies. */
extern const train_exchange *const dpt_train_exchange_kinds[];
/* The kind for this replica's run into *out, once the buckets are set up: the first of the list
 * that applies, or the one whose name DPT_EXCHANGE gives (every replica must see the same);
 * DPT_ERR_INVALID_ARG when that names no kind, or one that does not apply to the run. */
dpt_status dpt_train_exchange_pick(const replica_state *s, const train_exchange **out);
/* DPT_EXCHANGE, the name of the kind a run is to take; NULL when unset or empty. */
const char *dpt_train_exchange_forced(void);

/* The kinds of exchange.c, and what other kinds reuse of them. */
extern const train_exchange dpt_train_exchange_none, dpt_train_exchange_full,
    dpt_train_exchange_sharded, dpt_train_exchange_half;
/* count_nonfinite: the reduced gradient in this replica's own ranges. */
dpt_status dpt_train_exchange_count_grads(replica_state *s, int64_t *out);
/* update: the optimizer's step over everything (full step), and over this replica's shard. */
dpt_status dpt_train_exchange_full_update(replica *r, replica_state *s, double sumsq);
dpt_status dpt_train_exchange_sharded_update(replica *r, replica_state *s, double sumsq);
/* gather: the shards' parameters to every replica. */
dpt_status dpt_train_exchange_sharded_gather(replica *r, replica_state *s);
/* A reduce run in one piece after backward, begun at t0: all of it exposed, and its event on
 * the timeline. */
void dpt_train_exchange_one_piece(replica_state *s, exchange_times *t, double t0, const char *name);

/* The parameter ranges this replica owns in the step: its shard (sharded step) or all of them.
 * `whole` is storage for the latter. */
const dpt_range *dpt_train_own_ranges(const replica_state *s, dpt_range *whole, size_t *n);
/* Non-finite values in this replica's ranges of `buf` (gradients or parameters). */
dpt_status dpt_train_count_nonfinite_own(replica_state *s, const dpt_buffer *buf, int64_t *out);

#endif
