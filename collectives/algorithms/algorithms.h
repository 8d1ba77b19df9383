/* Internal: the collective algorithms (one file each) and the all-reduce choice among them.
 * Each algorithm builds a schedule (engine.h) and runs it on the engine; the entry points
 * (comm.c) reach them only through this header. */
#ifndef DPTRAIN_COLLECTIVES_ALGORITHMS_H
#define DPTRAIN_COLLECTIVES_ALGORITHMS_H

#include <stddef.h>

#include "collectives/common/comm_util.h"
#include "collectives/engine/engine.h"
#include "dptrain/comm.h"

/* ---- algorithms ---------------------------------------------------------------------------- */

/* Ring all-reduce, or one of its phases (ring_allreduce.c). hooks: staging, or NULL. */
dpt_status dpt_ring_allreduce(dpt_comm *c, const dpt_ring_args *a, const dpt_sched *hooks, int tag,
                              dpt_what *what);

/* dpt_comm_shard for the ring's layout (c->size > 1; arguments checked): the shard of `rank`
 * is segment (rank + 1) mod N of every block. */
size_t dpt_ring_shard(const dpt_comm *c, size_t count, dpt_comm_dtype dtype, int rank,
                      dpt_range *out, size_t max);

/* Hierarchical all-reduce, or one of its phases, over the nodes of c (hier_allreduce.c); only
 * where dpt_hier_applies(c). hooks: staging, or NULL. */
dpt_status dpt_hier_allreduce(dpt_comm *c, const dpt_ring_args *a, const dpt_sched *hooks, int tag,
                              dpt_what *what);
/* 1 when c spans several nodes that each hold the same number (> 1) of ranks. */
int dpt_hier_applies(const dpt_comm *c);
/* dpt_comm_shard for the hierarchical layout (where dpt_hier_applies(c)). */
size_t dpt_hier_shard(const dpt_comm *c, size_t count, dpt_comm_dtype dtype, int rank,
                      dpt_range *out, size_t max);

/* Recursive doubling over the whole vector, host data (rd_allreduce.c). */
dpt_status dpt_rd_allreduce(dpt_comm *c, void *data, size_t count, dpt_comm_dtype dtype, int tag,
                            dpt_what *what);

/* Broadcast along the ring from root, in pieces; blocks as for the ring (chain.c). */
dpt_status dpt_chain_broadcast(dpt_comm *c, const dpt_ring_args *a, const dpt_sched *hooks,
                               int root, int tag, dpt_what *what);
/* Ring allgather of `bytes` per rank into recv (host) (chain.c). */
dpt_status dpt_ring_allgather(dpt_comm *c, void *recv, size_t bytes, int tag, dpt_what *what);

/* ---- the all-reduce choice (allreduce_algo.c) -------------------------------------------- */

/* DPT_OK when this communicator can run `algo`; otherwise the error, prefixed with fn. */
dpt_status dpt_allreduce_algo_check(const dpt_comm *c, dpt_allreduce_algo algo, const char *fn);
/* 1 when the reduce-scatter, the all-gather of shards and dpt_comm_shard use the hierarchical
 * layout: it applies and the algorithm is AUTO or HIER (a forced flat one keeps the ring's). */
int dpt_comm_hier_sharded(const dpt_comm *c);
/* 1 when `algo` carries the vector in the hello round (its inline payload). */
int dpt_allreduce_algo_inline(dpt_allreduce_algo algo);
/* Runs the picked algorithm on host data once the hello round (when any) is done. */
dpt_status dpt_allreduce_algo_run(dpt_comm *c, dpt_allreduce_algo algo, void *data, size_t count,
                                  dpt_comm_dtype dtype, int tag, dpt_what *what);

#endif
