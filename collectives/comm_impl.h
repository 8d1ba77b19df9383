/* Internal: the communicator, its transports, and what the collective algorithms share.
 *
 * Layering inside collectives/:
 *   comm.c            public entry points, options, the "hello" round (desync check, arrival)
 *   stream.c          the message engine: windows of nonblocking sends/receives, dependencies
 *                     between them, deadline, staging hooks
 *   ring_allreduce.c  ring schedule (reduce-scatter + all-gather), block by block
 *   rd_allreduce.c    recursive doubling schedule; the one-round `direct` reduction
 *   chain.c           broadcast along the ring, ring allgather
 *   staging.c         device buffers through host memory in blocks
 *   reduce.c          the sum kernels (float32, float16)
 *   transport_threads.c, transport_mpi.c
 */
#ifndef DPTRAIN_COLLECTIVES_COMM_IMPL_H
#define DPTRAIN_COLLECTIVES_COMM_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/comm.h"

/* Tag of the hello round (fixed, so that a rank a collective ahead or behind is matched and
 * seen as a mismatch); data messages use 1 + (seq + uid) % (tag_ub - 1) so that messages left
 * over from a failed collective never match a later one. */
#define DPT_TAG_HELLO 0

/* Most requests one poll call handles (window sizes and 2 * (size - 1) for the hello round
 * are bounded by what callers pass; larger sets are polled in slices). */
#define DPT_POLL_MAX 64

/* Largest inline payload of the hello round: 64 KiB up to 17 ranks, then 1 MiB / (size - 1)
 * (at least 1 KiB), so the receive buffers of one round stay around 1 MiB. */
size_t dpt_comm_inline_cap(int size);

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
   * completes or the monotonic clock passes `deadline`. *ndone counts the newly completed.
   * Failure only for transport errors (the message names the peer). */
  dpt_status (*poll)(dpt_comm *c, dpt_req **reqs, int n, int block, double deadline, int *ndone);
  /* Abandons a pending request: afterwards the transport no longer writes its buffer. */
  void (*cancel)(dpt_comm *c, dpt_req *r);
  void (*destroy)(dpt_comm *c);
  /* Optional: the library's own all-reduce over the whole vector, in place. `arrived`: the
   * hello round has just seen every rank enter the collective. */
  dpt_status (*native_allreduce)(dpt_comm *c, void *data, size_t count, dpt_comm_dtype dtype,
                                 int arrived, double deadline);
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
  unsigned char *slot_buf;
  size_t slot_bytes;
  const void **payload; /* [size]: each rank's inline payload after a hello round (owner:
                           this struct; the pointers point into hello_buf) */
};

/* Names a collective in error messages ("allreduce #12 (1000 x float32, ring)"); the text
 * is formatted only when a message needs it (formatting costs as much as a small
 * all-reduce). */
typedef struct dpt_what {
  uint32_t op; /* DPT_OP_* of comm.c */
  int32_t root;
  uint64_t seq, count;
  uint32_t dtype, algo;
  char text[160]; /* "" until dpt_what_str */
} dpt_what;
const char *dpt_what_str(dpt_what *w);

/* Inside a spin-wait loop: lets a sibling hardware thread run (x86 PAUSE). */
static inline void dpt_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Delivers `bytes` of a message into receive r at byte `at`: copied, or added into place when
 * r->reduce (transports with recv_reduce). */
void dpt_req_deliver(dpt_req *r, size_t at, const void *src, size_t bytes);

/* Grows *buf to at least `bytes` (contents not kept). */
dpt_status dpt_comm_scratch(unsigned char **buf, size_t *have, size_t bytes, dpt_what *what);
/* The tag of data messages of collective `seq`. */
int dpt_comm_data_tag(const dpt_comm *c, uint64_t seq);
size_t dpt_dtype_size(dpt_comm_dtype dtype);
const char *dpt_dtype_name(dpt_comm_dtype dtype);

/* ---- sums (reduce.c) ------------------------------------------------------------------- */

/* dst[i] += src[i] for n elements (dst and src do not overlap). */
void dpt_sum_into(void *dst, const void *src, size_t n, dpt_comm_dtype dtype);
/* dst[i] = a[i] + b[i]; dst may equal a or b (elementwise). */
void dpt_sum_to(void *dst, const void *a, const void *b, size_t n, dpt_comm_dtype dtype);

/* ---- the message engine (stream.c) --------------------------------------------------------- */

#define DPT_NO_DEP ((size_t)-1)

/* One message of a schedule as this rank sees it. */
typedef struct dpt_xfer {
  int peer;
  size_t bytes; /* 0: nothing is sent/received (both sides know it), counts as done */
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

/* Runs a schedule to completion: receives posted ahead of sends (a window of a few), sends
 * in order, slot receives summed in order. `what` names the collective in messages ("allreduce
 * #12 (ring)"). DPT_ERR_TIMEOUT when nothing progresses for the comm's timeout. On failure
 * every pending request is cancelled before returning. */
dpt_status dpt_stream_run(dpt_comm *c, const dpt_sched *s, int tag, dpt_what *what);

/* ---- schedules ----------------------------------------------------------------------------- */

/* Block geometry shared by the ring and staging: the data is cut into blocks of
 * block_elems (the last one shorter). */
size_t dpt_ring_block_elems(const dpt_comm *c, size_t esize);

/* Ring all-reduce (or one of its phases) over `count` elements; block b lives at block_ptr(st, b)
 * when staging, else at data + b * block_elems. */
typedef enum dpt_ring_phase {
  DPT_RING_BOTH = 0,       /* the all-reduce: reduce-scatter, then all-gather */
  DPT_RING_REDUCE_SCATTER, /* only the first half: rank r ends with its shard summed */
  DPT_RING_ALLGATHER       /* only the second half: every rank's shard to all */
} dpt_ring_phase;
typedef struct dpt_ring_args {
  void *data;                             /* host data, or NULL when staging */
  void *(*block_ptr)(void *st, size_t b); /* staging: host copy of block b */
  size_t count;
  dpt_comm_dtype dtype;
  dpt_ring_phase phase; /* dpt_ring_allreduce only */
} dpt_ring_args;
dpt_status dpt_ring_allreduce(dpt_comm *c, const dpt_ring_args *a, const dpt_sched *hooks, int tag,
                              dpt_what *what);

/* Recursive doubling over the whole vector (host data). */
dpt_status dpt_rd_allreduce(dpt_comm *c, void *data, size_t count, dpt_comm_dtype dtype, int tag,
                            dpt_what *what);

/* One-round reduction after the hello round delivered every rank's payload: data = sum in
 * rank order of payload[0..size) (payload[rank] is this rank's own copy). */
void dpt_direct_sum(const dpt_comm *c, void *data, const void *const *payload, size_t count,
                    dpt_comm_dtype dtype);

/* Broadcast along the ring from root, in pieces; blocks as for the ring. */
dpt_status dpt_chain_broadcast(dpt_comm *c, const dpt_ring_args *a, const dpt_sched *hooks,
                               int root, int tag, dpt_what *what);
/* Ring allgather of `bytes` per rank into recv (host). */
dpt_status dpt_ring_allgather(dpt_comm *c, void *recv, size_t bytes, int tag, dpt_what *what);

/* ---- staging (staging.c) ------------------------------------------------------------------- */

typedef struct dpt_stage dpt_stage;
/* Stages bytes [offset, offset + bytes) of buf in blocks of block_bytes: `download` fills
 * host blocks before the engine uses them, `upload` writes finished blocks back. */
dpt_status dpt_stage_create(dpt_comm *c, dpt_buffer *buf, size_t offset, size_t bytes,
                            size_t block_bytes, int download, int upload, dpt_stage **out);
/* Sets the hooks of a schedule to this stage. */
void dpt_stage_hooks(dpt_stage *s, dpt_sched *hooks);
void *dpt_stage_block_ptr(void *s, size_t b);
/* Finishes every upload (when ok) and frees everything; returns the first staging failure. */
dpt_status dpt_stage_finish(dpt_stage *s, int ok);

/* ---- shared-memory channels (shm.c), the MPI transport's path inside one node ---------- */

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
 * 0 copy, 1 float32 sum, 2 float16 sum (their costs per KiB differ). */
enum { DPT_COPY_KINDS = 3 };
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
 * this process is `rank`. Slot count and size derive from `size`. */
dpt_status dpt_shm_open(const char *name, int create, int rank, int size, dpt_shm_copy copy,
                        dpt_shm **out);
void dpt_shm_unlink(const char *name);
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
dpt_status dpt_shm_poll(dpt_shm *s, dpt_req **reqs, int n, int block, double deadline, int *ndone,
                        uint64_t current, int yield);
void dpt_shm_cancel(dpt_shm *s, dpt_req *r);

/* ---- transports ------------------------------------------------------------------------- */

dpt_status dpt_comm_init(dpt_comm *c, const dpt_transport *tp, void *impl, int rank, int size,
                         int tag_ub);

#endif
