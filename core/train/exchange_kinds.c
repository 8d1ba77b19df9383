/* The list of the step's exchange kinds (core/train/exchange.h), in the order they are tried:
 * the first that applies to a run is its kind. A new kind is one line here. */
#include <stddef.h>

#include "core/train/exchange.h"
#include "core/train/train_buckets.h"
#include "core/train/train_sparse.h"

const train_exchange *const dpt_train_exchange_kinds[] = {
    &dpt_train_exchange_none,            /* no exchange (skip_allreduce) */
    &dpt_train_exchange_sparse,          /* sparse tables: touched rows */
    &dpt_train_exchange_buckets_sharded, /* buckets, then each shard updated */
    &dpt_train_exchange_buckets_full,    /* buckets, float32 or 16-bit */
    &dpt_train_exchange_half,            /* the whole gradient in 16 bits */
    &dpt_train_exchange_sharded,         /* reduce-scatter, update the shard, all-gather */
    &dpt_train_exchange_full,            /* all-reduce, update everything */
    NULL,
};

const train_exchange *dpt_train_exchange_pick(const replica_state *s) {
  for (size_t i = 0; dpt_train_exchange_kinds[i]; ++i)
    if (dpt_train_exchange_kinds[i]->applies(s)) return dpt_train_exchange_kinds[i];
  return &dpt_train_exchange_full; /* every mode has a kind: not reached */
}
