/* Internal: the body of struct dpt_comm, the state every layer of collectives/ reads: the
 * transport and its state, rank and size, the options, the scratch of the hello round and the
 * engine, the queue of nonblocking requests (api/request.c), the nodes of the hierarchical
 * collectives. */
#ifndef DPTRAIN_COLLECTIVES_COMMON_COMM_STRUCT_H
#define DPTRAIN_COLLECTIVES_COMMON_COMM_STRUCT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dptrain/comm.h"

typedef struct dpt_transport dpt_transport; /* transports/transport.h */

struct dpt_comm {
  const dpt_transport *tp;
  void *impl; /* transport state (owner: the transport) */
  int rank, size;
  /* This member's place among the members on its machine: MPI's shared-memory group
   * (MPI_COMM_TYPE_SHARED) for the MPI transport, the rank for threads (one process). */
  int local_rank;
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
   * Set by the transport after the common set-up (owner: this struct). */
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

#endif
