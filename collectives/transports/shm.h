/* Internal: the shared-memory channels (shm.c), the MPI transport's path inside a node. */
#ifndef DPTRAIN_COLLECTIVES_TRANSPORTS_SHM_H
#define DPTRAIN_COLLECTIVES_TRANSPORTS_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/transports/transport.h"
#include "dptrain/comm.h"

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

#endif
