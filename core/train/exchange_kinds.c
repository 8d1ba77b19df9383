/* The list of the step's exchange kinds (core/train/exchange.h), in the order they are tried:
 * the first that applies to a run is its kind, unless DPT_EXCHANGE names one. A new kind is its
 * own file and one line in DPT_EXCHANGE_KINDS. */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/env.h"
#include "core/train/exchange.h"

/* X(kind): the table dpt_train_exchange_<kind>, defined in the kind's file. */
#define DPT_EXCHANGE_KINDS(X)                                                                      \
  X(none)            /* no exchange (skip_allreduce) */                                            \
  X(exact)           /* deterministic: groups summed in fixed point */                             \
  X(sparse)          /* sparse tables: touched rows */                                             \
  X(buckets_sharded) /* buckets, then each shard updated */                                        \
  X(buckets_full)    /* buckets, float32 or 16-bit */                                              \
  X(half)            /* the whole gradient in 16 bits */                                           \
  X(sharded)         /* reduce-scatter, update the shard, all-gather */                            \
  X(full)            /* all-reduce, update everything */

#define DPT_EXCHANGE_DECLARE_(kind) extern const train_exchange dpt_train_exchange_##kind;
DPT_EXCHANGE_KINDS(DPT_EXCHANGE_DECLARE_)
#undef DPT_EXCHANGE_DECLARE_

const train_exchange *const dpt_train_exchange_kinds[] = {
#define DPT_EXCHANGE_ENTRY_(kind) &dpt_train_exchange_##kind,
    DPT_EXCHANGE_KINDS(DPT_EXCHANGE_ENTRY_)
#undef DPT_EXCHANGE_ENTRY_
        NULL,
};

const char *dpt_train_exchange_forced(void) {
  const char *v = dpt_env_get("DPT_EXCHANGE");
  return v && *v ? v : NULL;
}

/* The first kind of the list that applies. */
static const train_exchange *first_applying(const replica_state *s) {
  for (size_t i = 0; dpt_train_exchange_kinds[i]; ++i)
    if (dpt_train_exchange_kinds[i]->applies(s)) return dpt_train_exchange_kinds[i];
  return &dpt_train_exchange_full; /* every mode has a kind: not reached */
}

dpt_status dpt_train_exchange_pick(const replica_state *s, const train_exchange **out) {
  const char *want = dpt_train_exchange_forced();
  *out = first_applying(s);
  if (!want) return DPT_OK;
  for (size_t i = 0; dpt_train_exchange_kinds[i]; ++i) {
    const train_exchange *x = dpt_train_exchange_kinds[i];
    if (strcmp(want, x->name) != 0) continue;
    if (!x->applies(s))
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "DPT_EXCHANGE='%s': that exchange kind does not serve this run (its "
                           "settings call for '%s')",
                           want, (*out)->name);
    *out = x;
    return DPT_OK;
  }
  char names[512] = "";
  size_t len = 0;
  for (size_t i = 0; dpt_train_exchange_kinds[i] && len < sizeof names; ++i)
    len += (size_t)snprintf(names + len, sizeof names - len, "%s'%s'", i ? ", " : "",
                            dpt_train_exchange_kinds[i]->name);
  return dpt_set_error(DPT_ERR_INVALID_ARG, "DPT_EXCHANGE='%s' names no exchange kind (%s)", want,
                       names);
}
