/* Internal: the hello round (hello.c), which opens a collective when the desync check is on
 * and is the whole of the small ones: every rank gathers every rank's header describing its
 * call, plus the inline payloads it needs when the collective is small enough (all-to-all in
 * small groups, by dissemination in ceil(log2 N) rounds in larger ones). */
#ifndef DPTRAIN_COLLECTIVES_HELLO_H
#define DPTRAIN_COLLECTIVES_HELLO_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/common/comm_util.h"
#include "dptrain/comm.h"

#define DPT_HELLO_MAGIC 0x48545044u /* "DPTH" */
/* Largest group that says hello all-to-all (dpt_comm.hello_flat_max's default): below it the
 * one round of N-1 messages is faster than ceil(log2 N) rounds (docs/performance.md). */
#define DPT_HELLO_FLAT_MAX 4
/* dpt_hello.flags: the sender failed before the collective (bad arguments). */
#define DPT_HELLO_FAILED 1u

/* Fixed layout, 80 bytes, host byte order (ranks of one job share it). */
typedef struct dpt_hello {
  uint32_t magic;
  uint32_t op; /* DPT_COLL_* */
  uint64_t seq;
  uint64_t count; /* elements (allreduce), bytes (broadcast, allgather per rank), 0 (barrier) */
  uint32_t dtype;
  uint32_t algo;
  int32_t root;
  uint32_t flags;
  uint64_t piece, block;
  uint64_t payload; /* bytes of inline payload after the header */
  uint32_t uid;     /* the communicator's (dpt_comm.uid) */
  uint32_t reserved;
  uint64_t reserved2;
} dpt_hello;
_Static_assert(sizeof(dpt_hello) == 80, "hello header is 80 bytes");

/* The description of the call a header announces. */
dpt_what dpt_hello_what(const dpt_hello *h);

/* Exchanges headers and inline payloads with every rank: ours carries `mine->payload` bytes
 * of `data`; rank r's is expected to carry `expect` bytes (every rank when expect_root < 0,
 * else only expect_root). Every rank reaches the same verdict: DPT_ERR_MISMATCH when the
 * calls differ, DPT_ERR_COMM when a rank announced a failure, DPT_ERR_TIMEOUT naming the
 * ranks that did not arrive. On success payload[r] points to rank r's payload (payload[rank]
 * to this rank's copy), valid until the next collective. */
dpt_status dpt_hello_round(dpt_comm *c, const dpt_hello *mine, const void *data, size_t expect,
                           int expect_root, dpt_what *wt, const void **payload);

/* Cancels the receives posted for the next round (before the communicator goes away). */
void dpt_hello_unpost(dpt_comm *c);

#endif
