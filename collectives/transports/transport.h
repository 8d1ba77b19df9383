/* Internal: the transports' contract: one nonblocking send or receive (dpt_req), the
 * transport's vtable (dpt_transport), the transports' create calls with what they are handed
 * from above (dpt_comm_setup) and delivering a message into a receive (transport.c). */
#ifndef DPTRAIN_COLLECTIVES_TRANSPORTS_TRANSPORT_H
#define DPTRAIN_COLLECTIVES_TRANSPORTS_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/comm.h"

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

/* Delivers `bytes` of a message into receive r at byte `at`: copied, or added into place when
 * r->reduce (transports with recv_reduce). */
void dpt_req_deliver(dpt_req *r, size_t at, const void *src, size_t bytes);

/* In a blocking poll's sleep: DPT_ERR_COMM naming the rank waited for once the launcher is ending
 * the job and the wait has been quiet since `since` (dpt_teardown_due); else DPT_OK. */
dpt_status dpt_req_teardown_check(dpt_req **reqs, int n, double since);

/* What a transport's create call needs from the layer above, handed down by the public create
 * calls (api/comm.c) so that no transport calls up: the communicator's common part set up (impl
 * the transport's state, tag_ub the largest usable tag; the options from the environment), and
 * the seconds the set-up's blocking calls may wait (DPT_COMM_TIMEOUT). */
typedef struct dpt_comm_setup {
  dpt_status (*init)(dpt_comm *c, const dpt_transport *tp, void *impl, int rank, int size,
                     int tag_ub);
  double timeout_s;
} dpt_comm_setup;

/* dpt_comm_create_mpi's work once api/ has checked that no request is pending (out not NULL,
 * *out NULL): transport_mpi.c. */
dpt_status dpt_transport_mpi_create(const void *mpi_comm, const dpt_comm_setup *up, dpt_comm **out);
/* dpt_comm_group_member's work (transport_threads.c). */
dpt_status dpt_transport_threads_member(dpt_comm_group *g, int rank, const dpt_comm_setup *up,
                                        dpt_comm **out);

/* Threads transport, for tests of the hierarchical collectives: the members obtained from g
 * afterwards see `node` (size entries: node[r] is rank r's node, any ids >= 0) as their nodes,
 * renumbered 0 .. nnodes-1 in order of first appearance. NULL: one node (the default).
 * DPT_ERR_INVALID_ARG once a member was obtained or for a negative id. */
dpt_status dpt_comm_group_set_nodes(dpt_comm_group *g, const int *node);

#endif
