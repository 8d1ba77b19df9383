/* Internal: the deterministic step's groups (exchange_exact.c). Under cfg->deterministic the
 * step runs the replica's slice as groups of group_size samples, each group's gradient computed
 * alone and kept on the host; the exact exchange then sums every group's gradient, batch-norm
 * running statistics and loss in 64-bit fixed point, so the result is the same bits whichever
 * replica ran which group. */
#ifndef DPTRAIN_CORE_TRAIN_EXCHANGE_EXACT_H
#define DPTRAIN_CORE_TRAIN_EXCHANGE_EXACT_H

#include "core/train/replica.h"

/* Sets up s->exact when the run is deterministic (after the model exists); else nothing. */
dpt_status dpt_train_exact_setup(const replica *r, replica_state *s);
void dpt_train_exact_free(replica_state *s);

/* Samples per group (0 when the run is not deterministic). */
size_t dpt_train_exact_group(const replica_state *s);
/* A new step: no group kept yet; the batch norm buffers as they are now are the start of every
 * group's forward. `bcount`: the global batch's samples (its groups set the fixed point's range).
 */
dpt_status dpt_train_exact_begin(replica_state *s, size_t bcount);
/* Before a group's forward: the buffers put back to the step's start. */
dpt_status dpt_train_exact_rewind(replica_state *s);
/* After a group's backward: its gradient, buffers and loss kept. */
dpt_status dpt_train_exact_keep(replica_state *s, double loss);
/* After the exchange: the batch's loss, summed exactly (the same bits on every replica). */
double dpt_train_exact_loss(const replica_state *s);

#endif
