/* Internal: the message engine (engine.c), the contract between a collective's schedule
 * and the transport. An algorithm describes, for this rank, an ordered list of sends and an
 * ordered list of receives (dpt_sched: counts plus send_at / recv_at callbacks that fill a
 * dpt_xfer), and dpt_engine_run moves them: windows of nonblocking requests, dependencies,
 * sums of slot receives, staging hooks, the deadline. */
#ifndef DPTRAIN_COLLECTIVES_ENGINE_H
#define DPTRAIN_COLLECTIVES_ENGINE_H

#include <stddef.h>

#include "collectives/common/comm_util.h"
#include "dptrain/comm.h"

#define DPT_NO_DEP ((size_t)-1)

/* One message of a schedule as this rank sees it. */
typedef struct dpt_xfer {
  int peer;
  size_t bytes; /* 0: nothing is sent/received (both sides know it), counts as done (a
                   send once its dep is met) */
  void *ptr;    /* send: source; recv: destination, or NULL to receive into a slot and add
                   the slot into `reduce_dst` (elements of the schedule's dtype) */
  void *reduce_dst;
  size_t dep;   /* send: index of the receive that must be processed before it is posted;
                   recv: index of the send that must have completed before it is posted */
  size_t dep2;  /* recv into a slot: send that must have completed before the sum is done */
  size_t block; /* staging block the message reads or writes */
} dpt_xfer;

typedef struct dpt_sched {
  size_t nsend, nrecv;
  void (*send_at)(const void *ctx, size_t i, dpt_xfer *x);
  void (*recv_at)(const void *ctx, size_t j, dpt_xfer *x);
  const void *ctx;
  dpt_comm_dtype dtype;
  size_t slot_bytes; /* largest slot receive (0 if none) */
  /* Staging hooks, NULL for host data. ready: 1 when block b may be read and written (it is
   * in host memory), 0 not yet, < 0 staging failed. done: blocks [0, b) will not be touched
   * again. idle: do one piece of staging work on this thread; 1 if it did some. */
  int (*ready)(void *st, size_t b);
  void (*done)(void *st, size_t b);
  int (*idle)(void *st);
  void *st;
} dpt_sched;

/* A schedule of nsend sends and nrecv receives (send_at / recv_at on ctx), over the staging
 * hooks of `hooks` (NULL: host data). */
static inline dpt_sched dpt_sched_of(const dpt_sched *hooks, size_t nsend, size_t nrecv,
                                     void (*send_at)(const void *, size_t, dpt_xfer *),
                                     void (*recv_at)(const void *, size_t, dpt_xfer *),
                                     const void *ctx, dpt_comm_dtype dtype, size_t slot_bytes) {
  dpt_sched s = {0};
  if (hooks) s = *hooks;
  s.nsend = nsend;
  s.nrecv = nrecv;
  s.send_at = send_at;
  s.recv_at = recv_at;
  s.ctx = ctx;
  s.dtype = dtype;
  s.slot_bytes = slot_bytes;
  return s;
}

/* Which part of the ring all-reduce to run. */
typedef enum dpt_ring_phase {
  DPT_RING_BOTH = 0,       /* the all-reduce: reduce-scatter, then all-gather */
  DPT_RING_REDUCE_SCATTER, /* only the first half: rank r ends with its shard summed */
  DPT_RING_ALLGATHER       /* only the second half: every rank's shard to all */
} dpt_ring_phase;

/* The data of a block-wise algorithm (ring, broadcast chain): `count` elements; block b lives
 * at block_ptr(hooks->st, b) when staging, else at data + b * block elements. */
typedef struct dpt_ring_args {
  void *data;                             /* host data, or NULL when staging */
  void *(*block_ptr)(void *st, size_t b); /* staging: host copy of block b */
  size_t count;
  dpt_comm_dtype dtype;
  dpt_ring_phase phase; /* dpt_ring_allreduce only */
} dpt_ring_args;

/* Runs a schedule to completion: receives posted ahead of sends (a window of a few), sends
 * in order, slot receives summed in order. `what` names the collective in messages ("allreduce
 * #12 (ring)"). DPT_ERR_TIMEOUT when nothing progresses for the comm's timeout. On failure
 * every pending request is cancelled before returning. */
dpt_status dpt_engine_run(dpt_comm *c, const dpt_sched *s, int tag, dpt_what *what);

#endif
