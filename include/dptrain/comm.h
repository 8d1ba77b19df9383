/* dptrain: collectives on a communicator (all-reduce, broadcast, allgather, barrier; the
 * advanced tier). Creating a communicator: dptrain/communicator.h.
 *
 * A dpt_comm is one member (rank) of a group of `size` ranks that run collectives together.
 * Two transports sit behind the same calls:
 *   - MPI: one member per process, on a private duplicate of an MPI communicator;
 *   - threads: `size` members inside one process, one per thread (one per local replica).
 * Every member calls the same collectives in the same order with matching arguments. A member
 * is used by one thread at a time; different members may run on different threads at once.
 *
 * Guarantees of every collective:
 *   - Results are bit-identical on every rank (the reduction order is the same everywhere).
 *   - Desync check (on by default): before moving data the ranks agree on (sequence number,
 *     operation, element count, dtype, algorithm, chunk sizes); any difference returns
 *     DPT_ERR_MISMATCH on every rank, with a message naming the operation, the sequence
 *     number and each rank's count. No data is moved then, nothing hangs or is truncated.
 *   - Deadline (300 s by default): a rank that does not arrive makes the others return
 *     DPT_ERR_TIMEOUT naming the missing ranks; during data movement, a collective that makes
 *     no progress for that long returns DPT_ERR_TIMEOUT naming the rank it waited for.
 *     After DPT_ERR_TIMEOUT (or DPT_ERR_COMM) the communicator may hold messages of the
 *     failed collective: destroy it (local, see dpt_comm_destroy), or under MPI end the
 *     job with dpt_comm_abort when a peer may be stopped (MPI_Finalize would wait for it).
 *     A receive MPI cannot take back (matched, its sender cut off) strands the communicator:
 *     later collectives fail with DPT_ERR_COMM and destroying it leaks its buffers.
 *   - Blocking MPI calls that cannot be taken back (MPI_Init_thread, the set-up collectives
 *     of dpt_comm_create_mpi, MPI_Allreduce once every rank has arrived) that outlive the
 *     deadline end the process: one line on stderr naming the call and the rank, then
 *     _exit(69) (EX_UNAVAILABLE). This is the library's only exit; docs/collectives.md.
 *   - The sum is a sum: averaging (dividing by the number of ranks) is the caller's business.
 *
 * Environment variables, read when a communicator is created (the dpt_comm_set_* calls
 * override them afterwards); an invalid value makes the creation fail with a message naming
 * the variable. Under MPI every rank must have the same values (DPT_COMM_STAGING and
 * DPT_COMM_SHM_COPY excepted), else creation fails with DPT_ERR_MISMATCH on every rank:
 *   DPT_ALLREDUCE_ALGO        auto | ring | rd | direct | mpi | hier
 *   DPT_ALLREDUCE_DIRECT_MAX  bytes: auto uses `direct` while (size - 1) * payload <= this
 *   DPT_ALLREDUCE_MPI_MAX     bytes: then MPI_Allreduce up to this (MPI transport only)
 *   DPT_ALLREDUCE_RD_MAX      bytes: then recursive doubling up to this, the ring above
 *   DPT_COMM_TIMEOUT          seconds (> 0)
 *   DPT_COMM_DESYNC_CHECK     1 | 0
 *   DPT_COMM_PIECE            bytes of one ring message (K, M, G suffixes allowed)
 *   DPT_COMM_BLOCK            bytes of one ring block / staging chunk (K, M, G suffixes)
 *   DPT_COMM_STAGING          auto | inline | thread
 *   DPT_COMM_SHM              0: MPI point-to-point for every message (default: shared-
 *                             memory channels between the ranks of each node, MPI
 *                             point-to-point between nodes)
 *   DPT_COMM_SHM_COPY         auto | cached | streaming: how shared-memory slots are written
 *                             (auto: measured per channel; docs/collectives.md)
 *   DPT_COMM_FAKE_NODES       K (testing): every K consecutive ranks of a node count as a
 *                             node of their own, so one machine runs the paths across nodes
 *   DPT_COMM_HELLO_FLAT_MAX   ranks: groups up to this size say hello all-to-all, larger ones
 *                             by dissemination (default 4; docs/collectives.md)
 * See docs/collectives.md for the algorithms and their costs, docs/performance.md for the
 * measurements behind the thresholds.
 */
#ifndef DPTRAIN_COMM_H
#define DPTRAIN_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/backend.h"
#include "dptrain/communicator.h"
#include "dptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* All-reduce algorithms, the one list: X(ENUM_SUFFIX, value, "name"); the name is what
 * DPT_ALLREDUCE_ALGO accepts and dpt_allreduce_algo_name() returns. AUTO picks by payload
 * size from the thresholds below.
 *   RING    reduce-scatter + all-gather, 2(N-1) steps: large payloads
 *   RD      recursive doubling, log2(N) steps of the whole vector
 *   DIRECT  the vectors ride in the hello round (every rank to every other in groups of up
 *           to 4, else gathered in ceil(log2 N) rounds) and every rank sums them in rank
 *           order; payloads up to the inline limit (64 KiB for up to 17 ranks)
 *   MPI     the MPI library's own (MPI transport only)
 *   HIER    hierarchical, for ranks on several nodes: reduce-scatter inside each node, ring
 *           all-reduce of each shard across the nodes, all-gather inside each node; where
 *           the nodes do not all hold the same number (> 1) of ranks, the ring runs instead */
#define DPT_ALLREDUCE_ALGO_MAP(X)                                                                  \
  X(AUTO, 0, "auto")                                                                               \
  X(RING, 1, "ring")                                                                               \
  X(RD, 2, "rd")                                                                                   \
  X(DIRECT, 3, "direct")                                                                           \
  X(MPI, 4, "mpi")                                                                                 \
  X(HIER, 5, "hier")

typedef enum dpt_allreduce_algo {
#define DPT_ALLREDUCE_ALGO_ENUM_(name, value, text) DPT_ALLREDUCE_##name = value,
  DPT_ALLREDUCE_ALGO_MAP(DPT_ALLREDUCE_ALGO_ENUM_)
#undef DPT_ALLREDUCE_ALGO_ENUM_
} dpt_allreduce_algo;

/* How device buffers are staged through host memory, the one list: X(ENUM_SUFFIX, value,
 * "name"); the name is what DPT_COMM_STAGING accepts.
 *   AUTO    no staging where the backend's memory is host-addressable (CPU backend, CPU
 *           drivers, integrated GPUs with host-visible memory): the collective works on the
 *           mapped buffer in place; otherwise THREAD for GPU devices, INLINE for CPU devices
 *   INLINE  the calling thread does downloads/uploads while it waits for messages (a
 *           memcpy-like transfer gains nothing from a thread)
 *   THREAD  a helper thread does downloads/uploads while the calling thread communicates
 *           (overlaps DMA transfers with communication) */
#define DPT_STAGING_MODE_MAP(X)                                                                    \
  X(AUTO, 0, "auto")                                                                               \
  X(INLINE, 1, "inline")                                                                           \
  X(THREAD, 2, "thread")

typedef enum dpt_staging_mode {
#define DPT_STAGING_MODE_ENUM_(name, value, text) DPT_STAGING_##name = value,
  DPT_STAGING_MODE_MAP(DPT_STAGING_MODE_ENUM_)
#undef DPT_STAGING_MODE_ENUM_
} dpt_staging_mode;

typedef struct dpt_comm_options {
  double timeout_s;           /* deadline of a collective, seconds (> 0); default 300 */
  int desync_check;           /* 1: agree on the call before each collective (default 1) */
  dpt_allreduce_algo algo;    /* default AUTO */
  size_t direct_max_bytes;    /* AUTO: `direct` while (size - 1) * payload is at most this */
  size_t mpi_max_bytes;       /* AUTO: then MPI_Allreduce up to this (0: never) */
  size_t mpi_nodes_max_bytes; /* AUTO on a communicator that spans nodes: after rd, MPI_Allreduce
                                 up to this (0: only where hier does not apply) */
  size_t rd_max_bytes;        /* AUTO: then recursive doubling up to this (0: never), else ring */
  size_t piece_bytes;         /* largest message of the ring / rd / broadcast (>= 64, <= 1 GiB) */
  size_t block_bytes;         /* the ring runs block by block (cache-sized), and device buffers
                                 are staged in blocks of this many bytes (>= piece_bytes) */
  dpt_staging_mode staging;   /* default AUTO */
} dpt_comm_options;

/* Which ways this rank's messages go, and how many bytes went each way: for benchmarks and
 * checks. Counts the point-to-point messages this rank has posted (sends), not the
 * MPI_Allreduce of the `mpi` algorithm. */
typedef struct dpt_comm_paths {
  int nodes;          /* as dpt_comm_nodes */
  int shm;            /* 1: ranks of one node exchange through shared-memory channels (MPI) */
  uint64_t shm_bytes; /* sent through the shared-memory channels */
  uint64_t p2p_bytes; /* sent through MPI point-to-point (other nodes, or no channels) */
} dpt_comm_paths;
/* Call it while none of the member's nonblocking collectives is pending (its progress thread
 * updates the counts meanwhile). DPT_ERR_INVALID_ARG for NULL arguments. */
DPT_API dpt_status dpt_comm_get_paths(const dpt_comm *comm, dpt_comm_paths *out);

/* ---- options (per member; the desync check verifies that all ranks use the same) -------- */

/* The built-in defaults (no environment variables). */
DPT_API void dpt_comm_options_default(dpt_comm_options *out);
DPT_API dpt_status dpt_comm_get_options(const dpt_comm *comm, dpt_comm_options *out);
/* Validates and applies all options; DPT_ERR_INVALID_ARG naming the field otherwise. */
DPT_API dpt_status dpt_comm_set_options(dpt_comm *comm, const dpt_comm_options *opt);
DPT_API dpt_status dpt_comm_set_timeout(dpt_comm *comm, double seconds);
DPT_API dpt_status dpt_comm_set_desync_check(dpt_comm *comm, int on);
/* DPT_ERR_UNSUPPORTED for DPT_ALLREDUCE_MPI on the threads transport. */
DPT_API dpt_status dpt_comm_set_algo(dpt_comm *comm, dpt_allreduce_algo algo);

/* "auto", "ring", "rd", "direct", "mpi", "hier"; NULL outside the list. */
DPT_API const char *dpt_allreduce_algo_name(dpt_allreduce_algo algo);
DPT_API dpt_status dpt_allreduce_algo_parse(const char *name, dpt_allreduce_algo *out);
/* The algorithm AUTO (or the forced one) uses for `count` elements of `dtype` on this member. */
DPT_API dpt_allreduce_algo dpt_comm_pick_algo(const dpt_comm *comm, size_t count,
                                              dpt_comm_dtype dtype);

/* ---- collectives --------------------------------------------------------------------------- */

/* In-place sum over all ranks of `count` elements at `data` (host memory, float or uint16_t
 * per dtype; NULL only when count == 0). */
DPT_API dpt_status dpt_allreduce_host(dpt_comm *comm, void *data, size_t count,
                                      dpt_comm_dtype dtype);

/* In-place sum of `count` elements starting at ELEMENT `offset` of a buffer of any backend.
 * The data is staged through host memory block by block (download, communicate, upload
 * overlap); host memory used: 3 blocks (block_bytes, at most the data size) + 4 ring
 * messages (piece_bytes), whatever the buffer size. The buffer's backend is used only by
 * this call (from this thread, or from the staging thread) until it returns. */
DPT_API dpt_status dpt_allreduce_buffer(dpt_comm *comm, dpt_buffer *buf, size_t offset,
                                        size_t count, dpt_comm_dtype dtype);

/* ---- sharded collectives: the two halves of the ring all-reduce ---------------------------
 *
 * A reduce-scatter followed by an all-gather is the ring all-reduce cut in two; between them
 * each rank may work on its shard alone (the sharded optimizer step: each replica updates
 * 1/N of the parameters, then the parameters are all-gathered). The ring runs block by block
 * (block_bytes) and cuts each block into `size` segments (lengths differ by at most one);
 * rank r's shard is segment (r + 1) mod size of every block: a list of ranges, the same on
 * every rank for the same count, dtype and options (the desync check compares them). Where
 * the hierarchical all-reduce applies (several nodes of equal size, algorithm AUTO or HIER)
 * the two halves are its halves and each block's shard is a sub-segment of a segment
 * (docs/collectives.md); dpt_comm_shard lists whichever layout the calls use. With one rank
 * the shard is the whole vector and both calls do nothing. */

/* The shard of `rank` for `count` elements of `dtype`: returns how many ranges it has (one
 * per block, empty ones left out) and stores the first `max` of them in `out` (element
 * offsets from the start of the vector, in increasing order). 0 for a bad rank or dtype. */
DPT_API size_t dpt_comm_shard(const dpt_comm *comm, size_t count, dpt_comm_dtype dtype, int rank,
                              dpt_range *out, size_t max);

/* In-place reduce-scatter of `count` elements: afterwards this rank's shard holds the sum
 * over all ranks (bit-identical to what dpt_allreduce_* with the ring, or the hierarchical
 * algorithm where the shards are its, computes there); the
 * elements outside it hold partial sums. Host data, or a range of a buffer of any backend
 * (staged as for the all-reduce). */
DPT_API dpt_status dpt_reduce_scatter_host(dpt_comm *comm, void *data, size_t count,
                                           dpt_comm_dtype dtype);
DPT_API dpt_status dpt_reduce_scatter_buffer(dpt_comm *comm, dpt_buffer *buf, size_t offset,
                                             size_t count, dpt_comm_dtype dtype);
/* In-place all-gather of the shards: afterwards every element holds the bits its owner had.
 * `dtype` only sets the element size (the shards depend on it). */
DPT_API dpt_status dpt_allgather_shards_host(dpt_comm *comm, void *data, size_t count,
                                             dpt_comm_dtype dtype);
DPT_API dpt_status dpt_allgather_shards_buffer(dpt_comm *comm, dpt_buffer *buf, size_t offset,
                                               size_t count, dpt_comm_dtype dtype);

/* Copies `bytes` at `data` on rank `root` to `data` on every other rank (chunked, pipelined
 * along the ring from the root). */
DPT_API dpt_status dpt_broadcast_host(dpt_comm *comm, void *data, size_t bytes, int root);
/* The same for `bytes` at byte `offset` of a buffer of any backend (staged in blocks). */
DPT_API dpt_status dpt_broadcast_buffer(dpt_comm *comm, dpt_buffer *buf, size_t offset,
                                        size_t bytes, int root);

/* recv[r * bytes .. (r+1) * bytes) = rank r's `send` (bytes each), on every rank. recv holds
 * size * bytes; send and recv must not overlap. Meant for small values (metrics,
 * fingerprints); large ones go around the ring. */
DPT_API dpt_status dpt_allgather_host(dpt_comm *comm, const void *send, size_t bytes, void *recv);

/* Returns once every rank has entered the barrier. */
DPT_API dpt_status dpt_barrier(dpt_comm *comm);

/* The start-up agreement of the members of `comm`: each says whether it is ready (`mine` is
 * DPT_OK) or why not (`mine` and `message`), and all learn the outcome together, so a member
 * that could not start stops the others at once instead of leaving them at their first
 * collective. Returns DPT_OK when every member is ready; else a failed member returns its own
 * status and message, and the others DPT_ERR_PEER naming the first that failed ("<member> N
 * could not start"; `member` is the word for a member, e.g. "rank" or "replica").
 * *same_as_first (may be NULL) is set to 1 on a member other than 0 whose failure is exactly
 * member 0's (status and message), which member 0 reports for all. comm NULL: returns `mine`. */
DPT_API dpt_status dpt_comm_agree_ready(dpt_comm *comm, dpt_status mine, const char *message,
                                        const char *member, int *same_as_first);

/* ---- nonblocking collectives ---------------------------------------------------------------
 *
 * A start call queues the collective and returns a request at once; the communicator's
 * progress thread (started with the first request, joined by dpt_comm_destroy) runs the queued
 * collectives one after another in the order they were started, each exactly as its blocking
 * form would (the same sums, bit for bit), so every rank must start the same collectives in
 * the same order. The caller's thread is free meanwhile: it may use the buffer's backend for
 * other work (backend calls are serialized with the progress thread's staging; see
 * backend.h), but must not touch the range being reduced, and must not call a blocking
 * collective (nor dpt_comm_set_*) on this communicator until every request has been waited
 * for (such a call returns DPT_ERR_INVALID_ARG naming the pending requests; finished requests
 * count until waited for). After a request fails, the ones queued behind it, and any started
 * later, fail with the same status without communicating (only that set is the same on every
 * rank); blocking collectives run again once all were waited for.
 *
 * MPI: the library initializes MPI with MPI_THREAD_SERIALIZED, so the progress thread calls
 * MPI only while no other thread does: while an MPI communicator has requests pending, the
 * library's other MPI calls are refused (DPT_ERR_INVALID_ARG: blocking collectives and starts
 * on other MPI communicators, dpt_comm_create_mpi), destroying another one waits for the
 * request in progress, and the application makes no MPI calls of its own meanwhile (unless it
 * initialized MPI_THREAD_MULTIPLE). Below MPI_THREAD_SERIALIZED a start call returns
 * DPT_ERR_UNSUPPORTED.
 *
 * dpt_comm_destroy runs the requests still queued first, then frees those not waited for (the
 * buffers must outlive it; the request handles are invalid afterwards). docs/collectives.md
 * says which backends truly overlap compute with the communication, and why. */
typedef struct dpt_request dpt_request;

/* When a request's collective ran, on dpt_now()'s clock (base/clock.h): queued by the start
 * call, started and finished by the progress thread; ready once the device work submitted
 * before the start call had finished (the progress thread waits for it before it communicates;
 * = started on the CPU backend and for host memory), so finished - ready is the communication
 * without the wait for the device. */
typedef struct dpt_request_info {
  double queued, started, finished;
  double ready;
} dpt_request_info;

/* The start calls check only comm and out (DPT_ERR_INVALID_ARG) and the MPI rule above; the
 * progress thread checks the rest as the blocking call does (a bad argument fails the request
 * on every rank, reported by dpt_request_wait). */
DPT_API dpt_status dpt_allreduce_buffer_start(dpt_comm *comm, dpt_buffer *buf, size_t offset,
                                              size_t count, dpt_comm_dtype dtype,
                                              dpt_request **out);
DPT_API dpt_status dpt_reduce_scatter_buffer_start(dpt_comm *comm, dpt_buffer *buf, size_t offset,
                                                   size_t count, dpt_comm_dtype dtype,
                                                   dpt_request **out);
DPT_API dpt_status dpt_allgather_shards_buffer_start(dpt_comm *comm, dpt_buffer *buf, size_t offset,
                                                     size_t count, dpt_comm_dtype dtype,
                                                     dpt_request **out);
/* *done: 1 once the collective has finished (successfully or not), else 0; never blocks. */
DPT_API dpt_status dpt_request_test(dpt_request *req, int *done);
/* Waits for the collective, returns its status (its message in dpt_last_error() on this
 * thread), fills *info (may be NULL) and frees the request. NULL req: DPT_OK. */
DPT_API dpt_status dpt_request_wait(dpt_request *req, dpt_request_info *info);

#ifdef __cplusplus
}
#endif

#endif
