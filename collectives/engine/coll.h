/* Internal: one collective in progress, as the entry points (comm.c) run it (coll.c):
 * numbered and described, opened by the hello round, a failure announced to the other
 * ranks, and its data reached wherever it lives (host memory, a device range mapped into
 * host memory, one temporary host copy, or staged block by block). */
#ifndef DPTRAIN_COLLECTIVES_COLL_H
#define DPTRAIN_COLLECTIVES_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/engine/engine.h"
#include "collectives/engine/hello.h"
#include "dptrain/comm.h"

typedef struct dpt_coll {
  dpt_hello h; /* our header: the call as this rank sees it */
  dpt_what w;  /* its name in messages */
  int tag;     /* tag of its data messages */
} dpt_coll;

/* Numbers the collective (c->seq) and describes it. */
void dpt_coll_begin(dpt_comm *c, dpt_coll *k, uint32_t op, uint64_t count, dpt_comm_dtype dtype,
                    dpt_allreduce_algo algo, int root);

/* The hello round with `payload` bytes of `data`, expecting `expect` bytes from every rank
 * (from expect_root only when >= 0); c->payload[r] then points to rank r's. */
dpt_status dpt_coll_hello(dpt_comm *c, dpt_coll *k, const void *data, size_t payload, size_t expect,
                          int expect_root);

/* This rank cannot take part (its message is set): with the desync check it still says
 * hello, flagged, so that the others fail at once instead of at the deadline. Returns st
 * with this rank's own message. */
dpt_status dpt_coll_fail(dpt_comm *c, dpt_coll *k, dpt_status st);

/* The data of a collective and the steps that move it (dpt_coll_run). */
typedef struct dpt_coll_data {
  void *data;      /* host data, or NULL with buf */
  dpt_buffer *buf; /* device data: bytes [offset, offset + bytes) of buf */
  size_t offset, bytes;
  size_t esize;         /* staged blocks hold whole blocks of elements of this size */
  int download, upload; /* this rank reads / writes the device range */
  int map;              /* try a zero-copy host mapping first (staging AUTO) */
  int copy;             /* not mapped: one host copy of the range instead of staging */
  dpt_ring_args args;   /* count, dtype, phase; data and block_ptr are set by dpt_coll_run */
  /* The hello round (or nothing) before any data moves; a->data: the data in host memory,
   * NULL when staged. *done = 1 when the collective is complete after it. */
  dpt_status (*hello)(dpt_comm *c, dpt_coll *k, const dpt_ring_args *a, int *done);
  /* The algorithm: on host memory (hooks NULL) or on staged blocks. */
  dpt_status (*move)(dpt_comm *c, dpt_coll *k, const dpt_ring_args *a, const dpt_sched *hooks);
} dpt_coll_data;

/* Runs a collective whose arguments are checked: reaches the data (a device range mapped,
 * copied or staged as d asks; a failure to map or copy is announced with dpt_coll_fail), runs
 * d->hello, then d->move unless the hello completed it, and writes a copy back. */
dpt_status dpt_coll_run(dpt_comm *c, dpt_coll *k, const dpt_coll_data *d);

#endif
