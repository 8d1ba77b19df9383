/* Internal: the struct bodies of the communicator and its requests, and the transports'
 * contract (dpt_transport), including the shared-memory channels of the MPI transport.
 *
 * Files of collectives/ and what they may include (an arrow: "includes"):
 *   comm.c            public entry points, the handle   -> coll.h, algorithms.h, comm_options.h
 *   comm_options.c    options, environment variables    -> algorithms.h (the algorithm check)
 *   allreduce_algo.c  the all-reduce choice and dispatch -> algorithms.h
 *   coll.c            one collective: hello, failure, where its data lives (mapped, one host
 *                     copy, staged)                     -> hello.h, staging.h, algorithms.h
 *   hello.c           the hello round (desync check, arrival, inline payloads)
 *   ring_allreduce.c, hier_allreduce.c, rd_allreduce.c, chain.c, reduce.c: the algorithms
 *                     -> engine.h
 *   engine.c          the message engine: windows of nonblocking sends/receives, dependencies
 *                     between them, deadline, staging hooks
 *   staging.c         device buffers through host memory in blocks -> engine.h
 *   request.c         nonblocking collectives: the request queue and its progress thread,
 *                     which runs the entry points of comm.c
 *   comm_util.c       shared helpers (comm_util.h: dtypes, scratch, tags, names, sums), and
 *                     the transports' backoff from spinning to sleeping (dpt_backoff, here)
 *   transport_threads.c, transport_mpi.c, shm.c: the transports
 * Every file may include comm_util.h and this header. The arrows point one way, entry points
 * -> coll -> hello, staging -> engine <- algorithms: an algorithm or the engine never includes
 * coll.h, hello.h, staging.h or comm_options.h.
 */
#ifndef DPTRAIN_COLLECTIVES_COMM_IMPL_H
#define DPTRAIN_COLLECTIVES_COMM_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "collectives/common/comm_util.h"
#include "dptrain/comm.h"

/* Tag of the hello round (fixed, so that a rank a collective ahead or behind is matched and
 * seen as a mismatch); data messages use 1 + (seq + uid) % (tag_ub - 1) so that messages left
 * over from a failed collective never match a later one; tag_ub itself carries the notes a
 * rank sends after its hello round timed out (hello.c). */
#define DPT_TAG_HELLO 0

/* Most requests one poll call handles (window sizes are bounded by what callers pass; the
 * hello round's larger sets are polled in slices). */
#define DPT_POLL_MAX 64

/* One nonblocking send or receive. Posted by the transport's isend/irecv, completed by poll
 * (done = 1), or abandoned by cancel. Lives in the caller's memory until completed or
 * cancelled. */
typedef struct dpt_req {
  int active; /* posted and neither completed nor cancelled */
  int done;   /* completed (set by poll) */
  int is_recv;
  int peer; /* rank of the other side */
  int tag;
  void *buf;      /* send: source (not written); recv: destination; owner: the caller */
  size_t bytes;   /* send: size; recv: capacity */
  size_t got;     /* recv: bytes received */
  dpt_status err; /* completion status: DPT_ERR_MISMATCH when a larger message arrived */
  uint64_t seq;   /* the collective it belongs to (shared-memory channels drop stale data) */
  int reduce;     /* recv: add the message into buf (elements of `dtype`) instead of copying
                     it; only on a communicator with recv_reduce */
  dpt_comm_dtype dtype;
  size_t off; /* shared-memory channels: bytes already copied */
  /* threads transport: the channel queues and the copy in flight */
  struct dpt_req *next;
  int matched; /* claimed by a receiver that is copying; cancel waits for it */
  int owner;   /* rank that posted it */
  /* MPI transport: the MPI_Request, stored as bytes so this header does not need mpi.h */
  _Alignas(8) unsigned char mpi[16];
} dpt_req;

/* FIFO lists of requests linked through dpt_req.next (the threads and shared-memory channels
 * keep their posted requests in them). */
static inline void dpt_req_push(dpt_req **head, dpt_req **tail, dpt_req *r) {
  r->next = NULL;
  if (*tail)
    (*tail)->next = r;
  else
    *head = r;
  *tail = r;
}

/* Removes r if listed; 1 if it was. */
static inline int dpt_req_unlink(dpt_req **head, dpt_req **tail, dpt_req *r) {
  dpt_req *prev = NULL;
  for (dpt_req *q = *head; q; prev = q, q = q->next) {
    if (q != r) continue;
    if (prev)
      prev->next = q->next;
    else
      *head = q->next;
    if (*tail == q) *tail = prev;
    q->next = NULL;
    return 1;
  }
  return 0;
}

typedef struct dpt_transport {
  const char *name;
  /* Post a request: the caller filled peer, tag, buf, bytes, is_recv. bytes <= INT_MAX. */
  dpt_status (*isend)(dpt_comm *c, dpt_req *r);
  dpt_status (*irecv)(dpt_comm *c, dpt_req *r);
  /* Completes what it can among reqs[0..n) (n <= DPT_POLL_MAX; inactive entries ignored),
   * setting done/got/err and clearing active. With `block`, waits until at least one
   * completes or the monotonic clock passes `deadline`; `since` is when the caller last saw
   * progress (its quiet spell began: dpt_backoff), so that a wait cut into several calls
   * backs off as one. *ndone counts the newly completed. Failure only for transport errors
   * (the message names the peer). */
  dpt_status (*poll)(dpt_comm *c, dpt_req **reqs, int n, int block, double deadline, double since,
                     int *ndone);
  /* Abandons a pending request: afterwards the transport no longer writes its buffer, unless
   * it could not take the request back (a receive that MPI had begun to fill, from a peer now
   * unreachable) and set dpt_comm.stranded instead. Returns within a bounded time. */
  void (*cancel)(dpt_comm *c, dpt_req *r);
  void (*destroy)(dpt_comm *c);
  /* Optional: ends every process of the job at once (dpt_comm_abort); returns only on failure. */
  dpt_status (*abort)(dpt_comm *c, int code);
  /* Optional: the library's own all-reduce over the whole vector, in place. `arrived`: the
   * hello round has just seen every rank enter the collective. */
  dpt_status (*native_allreduce)(dpt_comm *c, void *data, size_t count, dpt_comm_dtype dtype,
                                 int arrived, double deadline);
  /* Optional, where dpt_comm.cross_native: the same over the ranks of this rank's local index
   * on every node (the hierarchical all-reduce's cross-node phase), the same result bits on
   * each of them; `arrived`: they have all entered the collective. */
  dpt_status (*cross_allreduce)(dpt_comm *c, void *data, size_t count, dpt_comm_dtype dtype,
                                int arrived, double deadline);
  /* 1: the library may call this transport from one thread at a time in the whole process
   * (MPI, initialized MPI_THREAD_SERIALIZED): at most one such communicator may have
   * nonblocking requests pending, and nothing else calls it meanwhile (request.c). */
  int serialized;
  /* Optional: DPT_OK if a progress thread may drive this communicator (MPI: the thread level
   * is at least MPI_THREAD_SERIALIZED), else the reason. */
  dpt_status (*async_ok)(dpt_comm *c);
  /* Optional: fills the shm flag and the byte counts of dpt_comm_get_paths (default: none,
   * zeros). */
  void (*paths)(const dpt_comm *c, dpt_comm_paths *out);
} dpt_transport;

struct dpt_comm {
  const dpt_transport *tp;
  void *impl; /* transport state (owner: the transport) */
  int rank, size;
  int tag_ub; /* largest usable tag */
  /* Largest message that takes the transport's cheap path (MPI: eager, copied through at
   * once); the hello round cuts longer messages into pieces of this size. */
  size_t eager_bytes;
  /* The transport can add a message into the receive buffer as it arrives (dpt_req.reduce):
   * one pass over the data instead of a copy into a slot and a sum (threads; shared memory). */
  int recv_reduce;
  uint64_t seq; /* collectives started by this member, the next one's number */
  uint32_t uid; /* the same on every rank, random per communicator (MPI): keeps messages left
                   over from a destroyed communicator out of a new one on the same context */
  dpt_comm_options opt;
  /* Scratch reused across calls (owner: this struct, grown on demand): the hello round's
   * send message and receive buffers, and the engine's receive slots. */
  unsigned char *hello_buf;
  size_t hello_bytes;
  int hello_set;    /* which of the two hello slot sets the next round uses */
  int hello_posted; /* its receives are already posted */
  /* Groups of up to this many members say hello all-to-all (one round of N-1 messages each
   * way), larger ones by dissemination (ceil(log2 N) rounds per phase, hello.c). Fixed before
   * the first collective (tests lower it). */
  int hello_flat_max;
  uint64_t hello_msgs; /* messages (not fragments) this member sent in its last hello round */
  unsigned char *slot_buf;
  size_t slot_bytes;
  const void **payload; /* [size]: each rank's inline payload after a hello round (owner:
                           this struct; the pointers point into hello_buf) */
  /* Nonblocking collectives (request.c): the queue and its progress thread, NULL until the
   * first start call; and the requests started and not yet waited for (written by the
   * caller's thread, read by the progress thread too). */
  struct dpt_progress *progress;
  atomic_int pending;
  /* Nodes, for the hierarchical collectives: node[r] is rank r's node, 0 .. nnodes-1 numbered
   * in order of first appearance by rank; NULL with nnodes 1 when every rank is on one node.
   * Set by the transport after dpt_comm_init (owner: this struct). */
  int nnodes;
  int *node;
  /* Ranks per node when every node has as many, -1 when they differ, 0 until first asked
   * (hier_allreduce.c computes it from node[] on first use). */
  atomic_int node_ranks;
  /* The transport built the group of each local index across nodes: cross_allreduce serves. */
  int cross_native;
  /* A request could not be taken back (cancel, or a nonblocking MPI collective past its
   * deadline): MPI may still write its buffer. Every later collective fails, and destroying
   * the member frees neither its scratch buffers nor MPI (it leaves them to the process's
   * end, which dpt_comm_abort brings). */
  int stranded;
};

/* ---- nonblocking collectives (request.c) ------------------------------------------------ */

/* Nonzero while a communicator of a serialized transport (MPI) has requests pending. */
extern atomic_int dpt_serial_pending;

/* DPT_OK unless a call named fn may not run now because of pending requests: on this
 * communicator (blocking collectives, option changes), or on another communicator of a
 * serialized transport (MPI: no other thread may call MPI meanwhile); the message names
 * them. The progress thread itself passes. `c` NULL: only the serialized check (creation). */
dpt_status dpt_comm_check_idle_slow(const dpt_comm *c, int serialized, const char *fn);
static inline dpt_status dpt_comm_check_idle(const dpt_comm *c, const char *fn) {
  const int serialized = c->tp->serialized;
  if (atomic_load_explicit(&c->pending, memory_order_relaxed) == 0 &&
      (!serialized || atomic_load_explicit(&dpt_serial_pending, memory_order_relaxed) == 0))
    return DPT_OK;
  return dpt_comm_check_idle_slow(c, serialized, fn);
}
/* 1 when the calling thread is c's progress thread (running one of its requests). */
int dpt_request_running(const dpt_comm *c);
/* The fence the running request took when it started (its transfers wait for the work before
 * it, not for the work the caller submitted since); NULL outside a request or without one. */
typedef struct dpt_fence dpt_fence;
const dpt_fence *dpt_request_fence(const dpt_comm *c);
/* dpt_comm_destroy's first step: waits until every queued request has run, joins the
 * progress thread and frees the requests nobody waited for. */
void dpt_progress_destroy(dpt_comm *c);
/* A blocking entry point that a request runs on the progress thread (dpt_allreduce_buffer,
 * dpt_reduce_scatter_buffer, dpt_allgather_shards_buffer). */
typedef dpt_status (*dpt_request_fn)(dpt_comm *c, dpt_buffer *buf, size_t offset, size_t count,
                                     dpt_comm_dtype dtype);
/* Queues a request that runs `run` with these arguments on c's progress thread (started on
 * the first call); fn is the start call's name in messages. The arguments are checked by
 * `run`, on the progress thread. */
dpt_status dpt_request_start(dpt_comm *c, const char *fn, dpt_request_fn run, dpt_buffer *buf,
                             size_t offset, size_t count, dpt_comm_dtype dtype, dpt_request **out);
/* Held around calls into a serialized transport that may overlap a progress thread's
 * (dpt_comm_destroy of another communicator); the progress thread holds it per request. */
void dpt_serial_lock(void);
void dpt_serial_unlock(void);

/* Inside a spin-wait loop: lets a sibling hardware thread run (x86 PAUSE). */
static inline void dpt_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* How a transport waits for a message (the MPI transport and its shared-memory channels).
 * During the first DPT_SPIN_SECONDS of a quiet spell it spins: the pieces of a collective
 * follow each other within microseconds, and the replicas of a training step reach a
 * collective within a millisecond or two of each other (docs/performance.md), so a wake-up
 * there would cost latency. After that it sleeps between looks, 1 us at first, doubling up to
 * DPT_NAP_MAX_SECONDS: a rank that waits seconds for a stalled peer then costs a few hundred
 * wake-ups a second instead of a core, and the deadline is still seen within that nap. */
#define DPT_SPIN_SECONDS    2e-3
#define DPT_NAP_MAX_SECONDS 1e-3
typedef struct dpt_backoff {
  double spin_until; /* spinning ends here (dpt_now()'s clock, seconds) */
  double nap;        /* the next sleep, seconds; 0 while spinning */
  unsigned pass;     /* passes that found nothing so far */
  int yield;         /* more ranks than cores here: give the core away while spinning */
} dpt_backoff;
/* A wait whose quiet spell began at `since` (dpt_now()'s clock). */
void dpt_backoff_start(dpt_backoff *b, double since, int yield);
/* After a pass that found nothing: spins (PAUSE, the clock read every 256 passes) inside the
 * spin window, then sleeps, never past `deadline`. 1 once the deadline has passed. */
int dpt_backoff_pause(dpt_backoff *b, double deadline);

/* Delivers `bytes` of a message into receive r at byte `at`: copied, or added into place when
 * r->reduce (transports with recv_reduce). */
void dpt_req_deliver(dpt_req *r, size_t at, const void *src, size_t bytes);

/* ---- shared-memory channels (shm.c), the MPI transport's path inside a node ------------- */

typedef struct dpt_shm dpt_shm;
/* How senders write large slots (DPT_COMM_SHM_COPY): chosen per channel from what each way
 * costs, plain memcpy, or streaming stores. */
typedef enum dpt_shm_copy {
  DPT_SHM_COPY_AUTO,
  DPT_SHM_COPY_CACHED,
  DPT_SHM_COPY_STREAM
} dpt_shm_copy;
/* "auto" | "cached" | "streaming"; anything else is DPT_ERR_INVALID_ARG naming the variable. */
dpt_status dpt_shm_copy_parse(const char *v, dpt_shm_copy *out);
/* A receiver's record of what one channel's slots cost in each mode, by kind of delivery:
 * 0 copy, 1 float32 sum, 2 float16 sum, 3 bfloat16 sum (their costs per KiB differ). */
enum { DPT_COPY_KINDS = 4 };
typedef struct dpt_copy_choice {
  float est[DPT_COPY_KINDS][2]; /* [kind][cached 0, streaming 1]: ns per KiB, sender +
                                   receiver; 0 until a first sample */
  int prefer;                   /* 0 cached, 1 streaming */
  float gap; /* cost of the other mode over the preferred one's (0: not known yet) */
} dpt_copy_choice;
/* Adds the cost of one slot (both copies, ns per KiB) written in `mode` and delivered as
 * `kind`; returns the mode preferred from now on: the other one once it costs 10 % less,
 * summed over the kinds where both modes have samples. */
int dpt_copy_choice_add(dpt_copy_choice *c, int kind, int mode, double ns_per_kib);
/* Maps the segment `name` (creating it when `create`) holding the channels of `size` ranks;
 * this process is `rank`. Slot count and size derive from `size`. The requests' peers are these
 * numbers unless dpt_shm_map_ranks says otherwise. */
dpt_status dpt_shm_open(const char *name, int create, int rank, int size, dpt_shm_copy copy,
                        dpt_shm **out);
void dpt_shm_unlink(const char *name);
/* The segment holds the ranks global[0 .. size) of a communicator of `world` ranks (global[i]:
 * the communicator's rank of the segment's rank i): requests name their peer by that rank. */
dpt_status dpt_shm_map_ranks(dpt_shm *s, const int *global, int world);
/* 1 when the communicator's rank `peer` is in the segment (on this node). */
int dpt_shm_reaches(const dpt_shm *s, int peer);
/* Bytes of the sends posted on the channels by this process. */
uint64_t dpt_shm_sent_bytes(const dpt_shm *s);
/* Once every rank has mapped the segment: when this process can see every peer's process (the
 * same process-id namespace), a wait that sleeps looks every 0.25 s whether the peers it waits
 * for still exist, and fails naming a vanished one (DPT_ERR_COMM) instead of waiting for the
 * deadline. */
void dpt_shm_watch_peers(dpt_shm *s);
/* Unmaps (local: never waits for the other ranks). NULL does nothing. */
void dpt_shm_close(dpt_shm *s);
/* Bytes of one slot: the largest message copied in one piece. */
size_t dpt_shm_slot_bytes(const dpt_shm *s);
/* Slots of 32 KiB or more this process has written: out[0] with memcpy, out[1] streaming. */
void dpt_shm_large_slots(const dpt_shm *s, uint64_t out[2]);
/* The same for an MPI communicator's shared-memory channels (tests); 0 when it has none. */
int dpt_comm_mpi_large_slots(const dpt_comm *c, uint64_t out[2]);
dpt_status dpt_shm_isend(dpt_shm *s, dpt_req *r);
dpt_status dpt_shm_irecv(dpt_shm *s, dpt_req *r);
/* As dpt_transport.poll; `current` is the sequence number of the collective in progress
 * (older data messages are dropped), `yield` gives the core away while spinning. */
dpt_status dpt_shm_poll(dpt_shm *s, dpt_req **reqs, int n, int block, double deadline, double since,
                        int *ndone, uint64_t current, int yield);
/* One pass of poll over every channel, for a caller that waits on other requests too (the
 * MPI transport across nodes): the requests it completes are marked done. */
void dpt_shm_progress(dpt_shm *s, uint64_t current);
/* A sleeping wait's look at the peers (dpt_shm_watch_peers), at most every 0.25 s: a failure
 * naming the first of this node's peers that reqs wait for whose process is gone. Requests
 * to ranks on other nodes are skipped. */
dpt_status dpt_shm_watch_check(dpt_shm *s, dpt_req **reqs, int n);
void dpt_shm_cancel(dpt_shm *s, dpt_req *r);

/* ---- transports ------------------------------------------------------------------------- */

dpt_status dpt_comm_init(dpt_comm *c, const dpt_transport *tp, void *impl, int rank, int size,
                         int tag_ub);

/* Threads transport, for tests of the hierarchical collectives: the members obtained from g
 * afterwards see `node` (size entries: node[r] is rank r's node, any ids >= 0) as their nodes,
 * renumbered 0 .. nnodes-1 in order of first appearance. NULL: one node (the default).
 * DPT_ERR_INVALID_ARG once a member was obtained or for a negative id. */
dpt_status dpt_comm_group_set_nodes(dpt_comm_group *g, const int *node);

#endif
