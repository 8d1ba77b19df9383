/* Closed-form collective cases shared by the threads and MPI suites: each rank runs a case on
 * its own member; inputs depend on the rank so that the expected result has a closed form,
 * and every rank reports a fingerprint of its result so the suites can check that all ranks
 * ended bit-identical. */
#ifndef DPTRAIN_TESTS_COMM_CASES_H
#define DPTRAIN_TESTS_COMM_CASES_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/comm.h"

/* 1 when a hello-round timeout message names rank m: alone ("rank m did not enter"), or in
 * the list of ranks not heard from ("no header from 5 ranks (3-6, 9)"). */
int comm_case_names_rank(const char *msg, int m);

/* Where the data of a case lives. */
typedef struct comm_place {
  int device; /* 0: host memory, 1: a buffer of `backend` */
  dpt_backend_kind backend;
} comm_place;

/* The odd counts every all-reduce is run with (0, 1, fewer than ranks, not divisible, several
 * pieces and blocks with the tiny knobs). `ranks` adds size-dependent ones. */
int comm_case_counts(int ranks, size_t *out, int max);

/* Options that make tiny pieces and blocks (64 B / 256 B), so that small vectors exercise
 * many pieces, many blocks, partial blocks and empty segments. */
void comm_case_tiny(dpt_comm_options *o);

/* Rank r's input element i, and the expected sum over `ranks` ranks (exact in float32 and
 * binary16: small integers; bfloat16 cases use smaller ones, see comm_cases.c). */
float comm_case_input(int rank, size_t i);
float comm_case_expected(int ranks, size_t i);

/* One all-reduce on `c` (options already set): builds the input, runs it (host pointer or a
 * buffer on `be` at an element offset, with guard elements around), checks every element
 * and the guards. 0 on success; else -1 with a message in err. *hash gets a fingerprint of
 * the result bytes. `be` is NULL for host data. */
int comm_case_allreduce(dpt_comm *c, dpt_backend *be, size_t count, dpt_comm_dtype dtype,
                        uint64_t *hash, char *err, size_t errlen);

/* The sharded pair on `c`: the shards of all ranks must cover [0, count) exactly once; a
 * reduce-scatter must leave this rank's shard summed; with everything outside the shard then
 * overwritten, an all-gather of the shards must restore the whole sum (guards untouched).
 * Host data or a buffer of `be`, as for the all-reduce; *hash fingerprints the result. */
int comm_case_sharded(dpt_comm *c, dpt_backend *be, size_t count, dpt_comm_dtype dtype,
                      uint64_t *hash, char *err, size_t errlen);

/* Reduce-scatter + all-gather of order-dependent sums gives the bits of the all-reduce with
 * `algo` (RING, or HIER on a communicator that spans nodes); the algorithm stays set. */
int comm_case_sharded_inexact(dpt_comm *c, size_t count, dpt_allreduce_algo algo, char *err,
                              size_t errlen);

/* The signature both comm_case_allreduce and comm_case_sharded have. */
typedef int (*comm_count_case)(dpt_comm *c, dpt_backend *be, size_t count, dpt_comm_dtype dtype,
                               uint64_t *hash, char *err, size_t errlen);

/* One broadcast of `bytes` from `root` (host or buffer), checked. */
int comm_case_broadcast(dpt_comm *c, dpt_backend *be, size_t bytes, int root, char *err,
                        size_t errlen);

/* One allgather of `bytes` per rank, checked. */
int comm_case_allgather(dpt_comm *c, size_t bytes, char *err, size_t errlen);

/* Rank r's element i of the order-dependent case. */
float comm_case_inexact_input(int rank, size_t i);
/* An all-reduce of values whose sum is not exact (order matters); *hash fingerprints it. */
int comm_case_inexact(dpt_comm *c, size_t count, uint64_t *hash, char *err, size_t errlen);
/* The same in bfloat16 (rounded after every addition): within the rounding's bound of the
 * exact sum, and with `direct` exactly the sum rounded in rank order. */
int comm_case_inexact_bf16(dpt_comm *c, size_t count, uint64_t *hash, char *err, size_t errlen);

/* The backends compiled in and present, as a list (cpu first); returns how many. */
int comm_case_backends(dpt_backend_kind *out, int max);

uint64_t comm_case_hash(const void *p, size_t bytes);

/* ---- nonblocking collectives (comm_req_cases.c); buffers of `be` ------------------------- */

/* Four requests (all-reduce, reduce-scatter) on disjoint ranges of one buffer, started back to
 * back and waited out of order while this thread runs axpy on another range of the buffer:
 * results bit-identical to the blocking calls, times ordered, FIFO. */
int comm_case_requests(dpt_comm *c, dpt_backend *be, char *err, size_t errlen);
/* Two requests on overlapping ranges, started back to back: the second reduces the first's
 * result, bit-identical to the blocking calls one after the other. */
int comm_case_request_overlap(dpt_comm *c, dpt_backend *be, char *err, size_t errlen);
/* A blocking collective and an option change with a request pending: DPT_ERR_INVALID_ARG
 * naming it; the request still completes. */
int comm_case_request_pending(dpt_comm *c, dpt_backend *be, char *err, size_t errlen);
/* A bad argument on rank 0: the request fails everywhere, the one behind it too (same status,
 * "not run"), and blocking collectives work afterwards. */
int comm_case_request_failure(dpt_comm *c, dpt_backend *be, char *err, size_t errlen);
/* Requests still queued at dpt_comm_destroy(c), which runs them first; destroys c. */
int comm_case_request_destroy(dpt_comm *c, dpt_backend *be, char *err, size_t errlen);

/* The staging modes the buffer tests run: the two staged paths, then AUTO (zero-copy where the
 * backend's memory is host-addressable, as on the CPU backend). */
enum { COMM_CASE_STAGINGS = 3 };
static inline dpt_staging_mode comm_case_staging(int i) {
  return i == 0 ? DPT_STAGING_INLINE : i == 1 ? DPT_STAGING_THREAD : DPT_STAGING_AUTO;
}
static inline const char *comm_case_staging_name(int i) {
  return i == 0 ? "inline" : i == 1 ? "thread" : "auto";
}

#endif
