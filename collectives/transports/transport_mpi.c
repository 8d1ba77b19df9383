/* MPI transport: one member per rank, on a private duplicate of the application's
 * communicator with MPI_ERRORS_RETURN, so every MPI failure becomes a dpt_status (the MPI
 * error string in dpt_last_error()) instead of aborting the job.
 *
 * Only nonblocking point-to-point calls move data (MPI_Isend / MPI_Irecv, completed by
 * MPI_Testsome polling against a deadline), so no collective can hang on a missing rank.
 * Abandoning a request after a timeout: a receive is cancelled and polled for a moment; one
 * that MPI had already matched (partly received, from a peer now unreachable) cannot be
 * cancelled, so it is left pending and the communicator marked stranded (comm_struct.h) rather
 * than waited for. A send is cancelled if MPI can, else released with MPI_Request_free (MPI
 * may still read the caller's buffer to deliver it: it never writes it).
 *
 * The blocking MPI calls left (MPI_Init_thread, the set-up collectives, MPI_Allreduce once
 * every rank has arrived, MPI_Abort) run under a watch (base/watchdog.h): past the deadline
 * the process prints why and exits, since nothing can take such a call back.
 *
 * Inside a node, ranks exchange through shared-memory channels (shm.c) when they can: a
 * communicator on one node uses them for every message, one that spans nodes for the
 * messages between ranks of the same node (each node has its own segment) and MPI for the
 * others; isend/irecv route by peer, poll progresses both kinds in one wait.
 *
 * MPI ownership: if the application has not initialized MPI, the first communicator does
 * (MPI_Init_thread, SERIALIZED requested: the library never calls MPI from two threads at
 * once, staging threads make no MPI calls, and a communicator's progress thread runs only
 * while no other thread may call MPI through this library: request.c) and the last one
 * destroyed finalizes it.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/common/comm_struct.h"
#include "collectives/transports/transport.h"
#include "collectives/transports/backoff.h"
#include "collectives/transports/shm.h"
#include "collectives/common/reduce.h"
#include "collectives/common/comm_util.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/watchdog.h"
#include "base/env.h"

_Static_assert(sizeof(MPI_Request) <= sizeof(((dpt_req *)0)->mpi), "MPI_Request too large");

typedef struct mpi_state {
  MPI_Comm comm;
  /* The ranks of this rank's local index on every node, in node order (the hierarchical
   * all-reduce's cross-node phase: mpi_cross_allreduce); MPI_COMM_NULL unless the nodes hold
   * the same number (> 1) of ranks each. */
  MPI_Comm cross;
  MPI_Op f16_sum;
  MPI_Op bf16_sum;
  int oversubscribed; /* more ranks on this node than cores: yield while waiting */
  dpt_shm *shm;       /* channels to the ranks of this node, NULL without (owner: this) */
  int all_shm;        /* every rank is reached through shm */
  int any_shm;        /* some node's ranks use channels (this one's, or another's) */
  uint64_t p2p_sent;  /* bytes of the MPI sends posted */
} mpi_state;

static pthread_mutex_t g_mpi_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_mpi_owned; /* this library called MPI_Init_thread */
static int g_mpi_live;  /* communicators alive that count on it */

static dpt_status mpi_fail(int rc, const char *fmt_call, int peer) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
  if (peer >= 0) return dpt_set_error(DPT_ERR_COMM, "%s (rank %d): %s", fmt_call, peer, msg);
  return dpt_set_error(DPT_ERR_COMM, "%s: %s", fmt_call, msg);
}

static MPI_Request get_req(const dpt_req *r) {
  MPI_Request q;
  memcpy(&q, r->mpi, sizeof q);
  return q;
}

static void set_req(dpt_req *r, MPI_Request q) {
  memcpy(r->mpi, &q, sizeof q);
}

/* The request goes through the shared-memory channels (its peer is on this node). */
static int on_shm(const mpi_state *s, const dpt_req *r) {
  return s->shm && (s->all_shm || dpt_shm_reaches(s->shm, r->peer));
}

static dpt_status mpi_isend(dpt_comm *c, dpt_req *r) {
  mpi_state *s = c->impl;
  if (on_shm(s, r)) return dpt_shm_isend(s->shm, r);
  if (r->bytes > INT_MAX)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "MPI_Isend: %zu bytes exceed INT_MAX", r->bytes);
  MPI_Request q;
  int rc = MPI_Isend(r->buf, (int)r->bytes, MPI_BYTE, r->peer, r->tag, s->comm, &q);
  if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Isend", r->peer);
  s->p2p_sent += r->bytes;
  set_req(r, q);
  r->active = 1;
  r->done = 0;
  r->err = DPT_OK;
  return DPT_OK;
}

static dpt_status mpi_irecv(dpt_comm *c, dpt_req *r) {
  mpi_state *s = c->impl;
  if (on_shm(s, r)) return dpt_shm_irecv(s->shm, r);
  if (r->bytes > INT_MAX)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "MPI_Irecv: %zu bytes exceed INT_MAX", r->bytes);
  MPI_Request q;
  int rc = MPI_Irecv(r->buf, (int)r->bytes, MPI_BYTE, r->peer, r->tag, s->comm, &q);
  if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Irecv", r->peer);
  set_req(r, q);
  r->active = 1;
  r->done = 0;
  r->got = 0;
  r->err = DPT_OK;
  return DPT_OK;
}

/* One MPI_Testsome over the active MPI requests (those through the shared-memory channels
 * are skipped); marks the completed ones. */
static dpt_status test_some(const mpi_state *s, dpt_req **reqs, int n, int *ndone) {
  MPI_Request q[DPT_POLL_MAX];
  MPI_Status stat[DPT_POLL_MAX];
  int idx[DPT_POLL_MAX], map[DPT_POLL_MAX];
  int m = 0;
  for (int i = 0; i < n && m < DPT_POLL_MAX; ++i) {
    if (!reqs[i]->active || on_shm(s, reqs[i])) continue;
    q[m] = get_req(reqs[i]);
    map[m++] = i;
  }
  if (m == 0) return DPT_OK;
  int out = 0;
  int rc = MPI_Testsome(m, q, &out, idx, stat);
  if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) return mpi_fail(rc, "MPI_Testsome", -1);
  if (out == MPI_UNDEFINED) return DPT_OK;
  for (int k = 0; k < out; ++k) {
    dpt_req *r = reqs[map[idx[k]]];
    set_req(r, MPI_REQUEST_NULL);
    r->active = 0;
    r->done = 1;
    ++*ndone;
    int err = rc == MPI_ERR_IN_STATUS ? stat[k].MPI_ERROR : MPI_SUCCESS;
    if (err != MPI_SUCCESS) {
      int cls = 0;
      MPI_Error_class(err, &cls);
      if (r->is_recv && cls == MPI_ERR_TRUNCATE) {
        r->err = DPT_ERR_MISMATCH; /* a larger message than expected: the caller reports */
        continue;
      }
      return mpi_fail(err, r->is_recv ? "MPI_Irecv" : "MPI_Isend", r->peer);
    }
    if (r->is_recv) {
      int count = 0;
      MPI_Get_count(&stat[k], MPI_BYTE, &count);
      r->got = (size_t)count;
    }
  }
  return DPT_OK;
}

static dpt_status mpi_poll(dpt_comm *c, dpt_req **reqs, int n, int block, double deadline,
                           double since, int *ndone) {
  mpi_state *s = c->impl;
  const uint64_t current = c->seq ? c->seq - 1 : 0;
  if (s->all_shm)
    return dpt_shm_poll(s->shm, reqs, n, block, deadline, since, ndone, current, s->oversubscribed);
  /* Both kinds: the channels' requests complete inside dpt_shm_progress (counted by their
   * change of state), MPI's in MPI_Testsome. */
  unsigned char was[DPT_POLL_MAX];
  for (int i = 0; i < n; ++i)
    was[i] = reqs[i]->active && on_shm(s, reqs[i]);
  *ndone = 0;
  /* Spin (the peers are usually microseconds away), yielding the core when there are more
   * ranks than cores here (a spinning rank would keep the one it waits for off the CPU),
   * then sleep (dpt_backoff). */
  dpt_backoff b;
  dpt_backoff_start(&b, since, s->oversubscribed);
  for (;;) {
    if (s->shm) {
      dpt_shm_progress(s->shm, current);
      for (int i = 0; i < n; ++i)
        if (was[i] && !reqs[i]->active) {
          was[i] = 0;
          ++*ndone;
        }
    }
    dpt_status st = test_some(s, reqs, n, ndone);
    if (st != DPT_OK || *ndone > 0 || !block) return st;
    /* Sleeping: a node peer that died is named instead of waited for until the deadline. */
    if (s->shm && b.nap > 0) DPT_TRY(dpt_shm_watch_check(s->shm, reqs, n));
    if (b.nap > 0) DPT_TRY(dpt_req_teardown_check(reqs, n, since));
    if (dpt_backoff_pause(&b, deadline)) return DPT_OK;
  }
}

/* How long a cancelled receive may take to complete. An unmatched one completes at once; a
 * matched one completes only when the rest of its message arrives. */
#define CANCEL_GRACE_S 0.2

/* Tests a cancelled receive until it completes or CANCEL_GRACE_S pass, waiting as every other
 * wait of the transport does (dpt_backoff): 1 if it completed. */
static int recv_cancelled(const mpi_state *s, MPI_Request *q) {
  const double now = dpt_now();
  dpt_backoff b;
  dpt_backoff_start(&b, now, s->oversubscribed);
  for (;;) {
    int flag = 0;
    if (MPI_Test(q, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag) return 1;
    if (dpt_backoff_pause(&b, now + CANCEL_GRACE_S)) return 0;
  }
}

static void mpi_cancel(dpt_comm *c, dpt_req *r) {
  mpi_state *s = c->impl;
  if (on_shm(s, r)) {
    dpt_shm_cancel(s->shm, r);
    return;
  }
  if (!r->active) return;
  MPI_Request q = get_req(r);
  MPI_Cancel(&q);
  if (r->is_recv) {
    /* Not waited for: MPI_Wait on a matched receive whose sender is cut off never returns. */
    if (!recv_cancelled(s, &q)) c->stranded = 1;
  } else {
    int flag = 0;
    MPI_Test(&q, &flag, MPI_STATUS_IGNORE);
    if (!flag) MPI_Request_free(&q);
  }
  set_req(r, MPI_REQUEST_NULL);
  r->active = 0;
}

static void f16_sum_op(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  dpt_sum_into(inout, in, (size_t)*len, DPT_COMM_F16);
}

static void bf16_sum_op(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  dpt_sum_into(inout, in, (size_t)*len, DPT_COMM_BF16);
}

/* In-place sum over `comm` in parts of at most INT_MAX elements. `arrived`: every rank of
 * comm is known to be in this collective, so the blocking call (the library's fastest);
 * otherwise the nonblocking one, polled against the deadline (Open MPI's nonblocking
 * collectives are several times slower). */
static dpt_status allreduce_on(dpt_comm *c, MPI_Comm comm, void *data, size_t count,
                               dpt_comm_dtype dtype, int arrived, double deadline) {
  mpi_state *s = c->impl;
  const size_t es = dpt_dtype_size(dtype);
  MPI_Datatype type = dtype == DPT_COMM_F32   ? MPI_FLOAT
                      : dtype == DPT_COMM_I64 ? MPI_INT64_T
                                              : MPI_UINT16_T;
  MPI_Op op = dtype == DPT_COMM_F16 ? s->f16_sum : dtype == DPT_COMM_BF16 ? s->bf16_sum : MPI_SUM;
  for (size_t done = 0; done < count;) {
    size_t n = count - done < (size_t)INT_MAX ? count - done : (size_t)INT_MAX;
    void *p = (unsigned char *)data + done * es;
    int rc;
    if (arrived) {
      /* Every rank is in: only a stopped rank or a cut link keeps this from returning. */
      dpt_watch w;
      DPT_TRY(dpt_watch_arm(&w, c->opt.timeout_s, DPT_EXIT_STALLED, c->rank, "MPI_Allreduce",
                            "a rank stopped, or a link to another node is down"));
      rc = MPI_Allreduce(MPI_IN_PLACE, p, (int)n, type, op, comm);
      dpt_watch_disarm(&w);
      if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Allreduce", -1);
      done += n;
      continue;
    }
    MPI_Request q;
    rc = MPI_Iallreduce(MPI_IN_PLACE, p, (int)n, type, op, comm, &q);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Iallreduce", -1);
    dpt_backoff b;
    dpt_backoff_start(&b, dpt_now(), s->oversubscribed);
    for (;;) {
      int flag = 0;
      rc = MPI_Test(&q, &flag, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Iallreduce", -1);
      if (flag) break;
      if (dpt_backoff_pause(&b, deadline)) {
        /* A nonblocking collective cannot be cancelled: the communicator is unusable. */
        c->stranded = 1;
        return dpt_set_error(DPT_ERR_TIMEOUT,
                             "MPI_Iallreduce did not complete before the deadline");
      }
    }
    done += n;
  }
  return DPT_OK;
}

static dpt_status mpi_native_allreduce(dpt_comm *c, void *data, size_t count, dpt_comm_dtype dtype,
                                       int arrived, double deadline) {
  mpi_state *s = c->impl;
  return allreduce_on(c, s->comm, data, count, dtype, arrived, deadline);
}

static dpt_status mpi_cross_allreduce(dpt_comm *c, void *data, size_t count, dpt_comm_dtype dtype,
                                      int arrived, double deadline) {
  mpi_state *s = c->impl;
  if (s->cross == MPI_COMM_NULL)
    return dpt_set_error(DPT_ERR_UNSUPPORTED, "no cross-node communicator (unequal nodes)");
  return allreduce_on(c, s->cross, data, count, dtype, arrived, deadline);
}

/* Whether c's nodes each hold the same number (> 1) of ranks, as dpt_hier_applies says. */
static int equal_nodes(const dpt_comm *c) {
  if (c->nnodes < 2 || !c->node || c->size % c->nnodes) return 0;
  const int per = c->size / c->nnodes;
  for (int n = 0; n < c->nnodes; ++n) {
    int k = 0;
    for (int r = 0; r < c->size; ++r)
      k += c->node[r] == n;
    if (k != per) return 0;
  }
  return per > 1;
}

/* Collective: s->cross, the ranks sharing this rank's local index (its place among its node's
 * ranks, by rank), ordered by node, when the nodes are equal; built from c->node, so that fake
 * nodes (DPT_COMM_FAKE_NODES) group the ranks as real ones would. Every rank sees the same
 * node[] and makes the same decision. */
static dpt_status make_cross(dpt_comm *c, mpi_state *s) {
  if (!equal_nodes(c)) return DPT_OK;
  int local = 0;
  for (int q = 0; q < c->rank; ++q)
    local += c->node[q] == c->node[c->rank];
  int rc = MPI_Comm_split(s->comm, local, c->node[c->rank], &s->cross);
  if (rc != MPI_SUCCESS) {
    s->cross = MPI_COMM_NULL;
    return mpi_fail(rc, "MPI_Comm_split", -1);
  }
  rc = MPI_Comm_set_errhandler(s->cross, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Comm_set_errhandler", -1);
  c->cross_native = 1;
  return DPT_OK;
}

static void mpi_destroy(dpt_comm *c) {
  mpi_state *s = c->impl;
  dpt_shm_close(s->shm);
  int finalized = 0;
  MPI_Finalized(&finalized);
  /* Stranded: no MPI call that could wait, no MPI_Finalize (it would wait for the peer). */
  if (c->stranded) finalized = 1;
  if (!finalized) {
    if (s->f16_sum != MPI_OP_NULL) MPI_Op_free(&s->f16_sum);
    if (s->bf16_sum != MPI_OP_NULL) MPI_Op_free(&s->bf16_sum);
    if (s->cross != MPI_COMM_NULL) MPI_Comm_free(&s->cross);
    /* Local in Open MPI and MPICH (the context id is released lazily): never waits. */
    MPI_Comm_free(&s->comm);
  }
  free(s);
  pthread_mutex_lock(&g_mpi_lock);
  if (--g_mpi_live == 0 && g_mpi_owned && !finalized) {
    MPI_Finalize();
    g_mpi_owned = 0;
  }
  pthread_mutex_unlock(&g_mpi_lock);
}

/* Seconds MPI_Abort may take before the process ends without it. */
#define ABORT_GRACE_S 1.5

/* MPI_Abort on the duplicate: the same processes as the application's communicator, and a
 * handle that stays valid while this communicator lives, whatever the application freed. */
static dpt_status mpi_abort(dpt_comm *c, int code) {
  mpi_state *s = c->impl;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    return dpt_set_error(DPT_ERR_UNSUPPORTED, "dpt_comm_abort: MPI is already finalized");
  /* MPI_Abort asks the launcher to end the job; where it cannot reach it (a cut link) it may
   * never return, so this process ends itself after ABORT_GRACE_S. */
  dpt_watch w;
  DPT_TRY(dpt_watch_arm(&w, ABORT_GRACE_S, code, c->rank, "MPI_Abort",
                        "the launcher or other nodes are unreachable: this process ends alone"));
  int rc = MPI_Abort(s->comm, code);
  dpt_watch_disarm(&w);
  return mpi_fail(rc, "MPI_Abort", -1);
}

/* A progress thread calls MPI: that needs MPI_THREAD_SERIALIZED at least (an application that
 * initialized MPI itself may have asked for less). */
static dpt_status mpi_async_ok(dpt_comm *c) {
  (void)c;
  int level = MPI_THREAD_SINGLE;
  int rc = MPI_Query_thread(&level);
  if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Query_thread", -1);
  if (level < MPI_THREAD_SERIALIZED)
    return dpt_set_error(DPT_ERR_UNSUPPORTED,
                         "MPI runs at thread level %d, below MPI_THREAD_SERIALIZED: a progress "
                         "thread may not call it (initialize MPI with MPI_Init_thread and "
                         "MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE)",
                         level);
  return DPT_OK;
}

static void mpi_paths(const dpt_comm *c, dpt_comm_paths *out) {
  const mpi_state *s = c->impl;
  out->shm = s->any_shm;
  out->shm_bytes = s->shm ? dpt_shm_sent_bytes(s->shm) : 0;
  out->p2p_bytes = s->p2p_sent;
}

static const dpt_transport mpi_transport = {
    .name = "mpi",
    .isend = mpi_isend,
    .irecv = mpi_irecv,
    .poll = mpi_poll,
    .cancel = mpi_cancel,
    .destroy = mpi_destroy,
    .abort = mpi_abort,
    .native_allreduce = mpi_native_allreduce,
    .cross_allreduce = mpi_cross_allreduce,
    .serialized = 1,
    .async_ok = mpi_async_ok,
    .paths = mpi_paths,
};

int dpt_comm_mpi_compiled(void) {
  return 1;
}

/* Why a start-up call may not return, for the watch's line. */
#define SETUP_WHY                                                                                  \
  "a rank of the job stopped, has not started or cannot be reached; DPT_COMM_TIMEOUT sets the "    \
  "limit"

/* This process's rank as the launcher says it (before MPI can), or -1. */
static int launcher_rank(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
                                     "SLURM_PROCID"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; ++i) {
    const char *v = dpt_env_get(vars[i]);
    char *end = NULL;
    long r = v ? strtol(v, &end, 10) : -1;
    if (v && end != v && !*end && r >= 0 && r <= INT_MAX) return (int)r;
  }
  return -1;
}

/* Initializes MPI when nobody has (lock held), waiting at most timeout_s. */
static dpt_status mpi_ensure_init(double timeout_s) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (fin)
    return dpt_set_error(DPT_ERR_UNSUPPORTED,
                         "dpt_comm_create_mpi: MPI was already finalized (it cannot be "
                         "initialized twice)");
  if (init) return DPT_OK;
  int provided = 0;
  /* MPI_Init_thread waits for every rank of the job: one stopped or unreachable would keep it
   * from ever returning. */
  dpt_watch w;
  DPT_TRY(dpt_watch_arm(&w, timeout_s, DPT_EXIT_STALLED, launcher_rank(), "MPI_Init_thread",
                        SETUP_WHY));
  int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
  dpt_watch_disarm(&w);
  if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Init_thread", -1);
  g_mpi_owned = 1;
  return DPT_OK;
}

/* This rank's place among its node's ranks and their count, as the launcher's environment says
 * (Open MPI, MPICH, Slurm), for when MPI cannot say: else the rank alone on its node. */
static void launcher_local(int rank, int local[2]) {
  static const char *const vars[][2] = {
      {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
      {"SLURM_LOCALID", NULL}};
  local[0] = rank;
  local[1] = 1;
  for (size_t i = 0; i < sizeof vars / sizeof *vars; ++i) {
    const char *v = dpt_env_get(vars[i][0]);
    const char *n = vars[i][1] ? dpt_env_get(vars[i][1]) : NULL;
    if (!v || !*v) continue;
    local[0] = atoi(v);
    local[1] = n && atoi(n) > local[0] ? atoi(n) : local[0] + 1;
    return;
  }
}

/* Each rank's node, as the lowest rank of `comm` on it: leader[0 .. size) (collective, the
 * same array on every rank), and local[0], local[1]: this rank's place among the ranks of its
 * node and their count. MPI_COMM_TYPE_SHARED says which ranks share this node (a rank where
 * that fails counts as a node of its own, its place taken from the launcher's environment).
 * `fake` > 0 (DPT_COMM_FAKE_NODES, tests): every `fake` consecutive ranks of one node are a
 * node of their own in leader[]; local[] stays the real node's (the devices and cores are). */
static dpt_status find_leaders(MPI_Comm comm, int rank, int size, int fake, int *leader,
                               int local[2]) {
  MPI_Comm node;
  int mine = rank;
  launcher_local(rank, local);
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    int low = rank, place = 0, count = 0;
    if (MPI_Allreduce(&rank, &low, 1, MPI_INT, MPI_MIN, node) == MPI_SUCCESS) mine = low;
    if (MPI_Comm_rank(node, &place) == MPI_SUCCESS && MPI_Comm_size(node, &count) == MPI_SUCCESS) {
      local[0] = place;
      local[1] = count;
    }
    MPI_Comm_free(&node);
  }
  int rc = MPI_Allgather(&mine, 1, MPI_INT, leader, 1, MPI_INT, comm);
  if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Allgather", -1);
  /* The lowest rank of r's block on r's node; from the last rank down, so that leader[] of
   * the lower ranks is still MPI's. */
  for (int r = size - 1; fake > 0 && r >= 0; --r) {
    int q = r / fake * fake;
    while (leader[q] != leader[r])
      ++q;
    leader[r] = q;
  }
  return DPT_OK;
}

/* c->nnodes and c->node from the leaders: nodes numbered by first appearance in rank order
 * (a node's leader is its lowest rank); node stays NULL on one node. */
static dpt_status number_nodes(dpt_comm *c, const int *leader) {
  int *node = malloc((size_t)c->size * sizeof *node);
  if (!node) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_comm_create_mpi: no memory");
  int n = 0;
  for (int r = 0; r < c->size; ++r)
    node[r] = leader[r] == r ? n++ : node[leader[r]];
  c->nnodes = n;
  if (n > 1) {
    c->node = node;
  } else {
    free(node);
  }
  return DPT_OK;
}

/* The settings every rank must share, one record per rank: whatever changes the algorithm
 * choice, the schedule, the message sizes, the desync check (and with it the message
 * format), the deadline or the data path. DPT_COMM_STAGING and DPT_COMM_SHM_COPY are left
 * out: they say how this rank moves its own bytes (staging of its device buffers, how it
 * writes its own slots), and ranks may differ there. */
enum {
  OPT_OK, /* this rank's settings are valid (else its own error reports, not this check) */
  OPT_TIMEOUT,
  OPT_DESYNC,
  OPT_ALGO,
  OPT_DIRECT,
  OPT_MPI,
  OPT_MPI_NODES,
  OPT_RD,
  OPT_PIECE,
  OPT_BLOCK,
  OPT_SHM,
  OPT_FAKE,
  OPT_HELLO,
  OPT_N
};
static const char *const opt_vars[OPT_N] = {[OPT_TIMEOUT] = "DPT_COMM_TIMEOUT",
                                            [OPT_DESYNC] = "DPT_COMM_DESYNC_CHECK",
                                            [OPT_ALGO] = "DPT_ALLREDUCE_ALGO",
                                            [OPT_DIRECT] = "DPT_ALLREDUCE_DIRECT_MAX",
                                            [OPT_MPI] = "DPT_ALLREDUCE_MPI_MAX",
                                            [OPT_RD] = "DPT_ALLREDUCE_RD_MAX",
                                            [OPT_MPI_NODES] = "DPT_ALLREDUCE_MPI_NODES_MAX",
                                            [OPT_PIECE] = "DPT_COMM_PIECE",
                                            [OPT_BLOCK] = "DPT_COMM_BLOCK",
                                            [OPT_SHM] = "DPT_COMM_SHM",
                                            [OPT_FAKE] = "DPT_COMM_FAKE_NODES",
                                            [OPT_HELLO] = "DPT_COMM_HELLO_FLAT_MAX"};

/* Formats field f of a record as its variable would say it. */
static const char *opt_text(char *out, size_t n, int f, const int64_t *rec) {
  if (f == OPT_TIMEOUT) {
    double t;
    memcpy(&t, &rec[f], sizeof t);
    snprintf(out, n, "%g", t);
  } else if (f == OPT_ALGO) {
    const char *name = dpt_allreduce_algo_name((dpt_allreduce_algo)rec[f]);
    snprintf(out, n, "%s", name ? name : "?");
  } else {
    snprintf(out, n, "%lld", (long long)rec[f]);
  }
  return out;
}

/* Collective: every rank's settings to every rank; when they differ (and every rank's are
 * valid), DPT_ERR_MISMATCH on every rank, naming each variable and the ranks whose value
 * differs from rank 0's. Before any collective of ours: a rank without the desync check
 * would otherwise skip the hello round that the others wait in. */
static dpt_status agree_options(dpt_comm *c, MPI_Comm comm, int ok, int shm, int fake) {
  int64_t mine[OPT_N];
  memset(mine, 0, sizeof mine);
  const dpt_comm_options *o = &c->opt;
  mine[OPT_OK] = ok;
  if (ok) {
    memcpy(&mine[OPT_TIMEOUT], &o->timeout_s, sizeof o->timeout_s);
    mine[OPT_DESYNC] = o->desync_check;
    mine[OPT_ALGO] = o->algo;
    mine[OPT_DIRECT] = (int64_t)o->direct_max_bytes;
    mine[OPT_MPI] = (int64_t)o->mpi_max_bytes;
    mine[OPT_MPI_NODES] = (int64_t)o->mpi_nodes_max_bytes;
    mine[OPT_RD] = (int64_t)o->rd_max_bytes;
    mine[OPT_PIECE] = (int64_t)o->piece_bytes;
    mine[OPT_BLOCK] = (int64_t)o->block_bytes;
    mine[OPT_SHM] = shm;
    mine[OPT_FAKE] = fake;
    mine[OPT_HELLO] = c->hello_flat_max;
  }
  int64_t *all = malloc((size_t)c->size * sizeof mine);
  if (!all) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_comm_create_mpi: no memory");
  int rc = MPI_Allgather(mine, OPT_N, MPI_INT64_T, all, OPT_N, MPI_INT64_T, comm);
  if (rc != MPI_SUCCESS) {
    free(all);
    return mpi_fail(rc, "MPI_Allgather", -1);
  }
  int valid = 1;
  for (int r = 0; r < c->size; ++r)
    valid &= all[(size_t)r * OPT_N + OPT_OK] != 0;
  char msg[2048], v[64];
  size_t len = 0;
  msg[0] = '\0';
  for (int f = OPT_OK + 1; valid && f < OPT_N && len < sizeof msg - 256; ++f) {
    int listed = 0, more = 0;
    for (int r = 1; r < c->size; ++r) {
      const int64_t *rec = all + (size_t)r * OPT_N;
      if (rec[f] == all[f]) continue;
      if (listed == 8) {
        ++more;
        continue;
      }
      if (!listed)
        len += (size_t)snprintf(msg + len, sizeof msg - len,
                                "%s%s differs across ranks: ", len ? "; " : "", opt_vars[f]);
      len += (size_t)snprintf(msg + len, sizeof msg - len, "rank %d has %s, ", r,
                              opt_text(v, sizeof v, f, rec));
      ++listed;
    }
    if (more) len += (size_t)snprintf(msg + len, sizeof msg - len, "%d more ranks, ", more);
    if (listed)
      len += (size_t)snprintf(msg + len, sizeof msg - len, "rank 0 has %s",
                              opt_text(v, sizeof v, f, all));
  }
  free(all);
  if (len == 0) return DPT_OK;
  return dpt_set_error(DPT_ERR_MISMATCH,
                       "dpt_comm_create_mpi: %s (every rank must run with the same settings)", msg);
}

/* What rank 0 tells the others at creation. */
typedef struct setup {
  unsigned uid;
  char name[48]; /* the segments' names begin with it (each node appends its number) */
} setup;

/* Says once per process, from rank 0, that the shared-memory channels could not be set up:
 * the job still runs, about 3x slower on large collectives, and nothing else would tell. The
 * one line the library prints (docs/collectives.md). */
static void say_no_shm(const char *reason) {
  static atomic_flag said = ATOMIC_FLAG_INIT;
  if (atomic_flag_test_and_set(&said)) return;
  fprintf(stderr,
          "dptrain: shared-memory channels unavailable (%s); using MPI point-to-point, slower\n",
          reason);
}

/* The collective part of creation: the communicator's id, each rank's node, the
 * shared-memory segment of each node with two ranks or more (unless DPT_COMM_SHM is 0), and
 * agreement that every rank succeeded, so that a failure on one rank fails the creation
 * everywhere instead of leaving the others waiting. `ok`: this rank's own setup succeeded;
 * `copy`: how its slots are written; `shm`: DPT_COMM_SHM allows the segments and `fake`:
 * DPT_COMM_FAKE_NODES (both the same on every rank: agree_options). Every node uses its
 * segment or none does: the lowest rank of each node creates it, says whether it could (an
 * allgather), the node's other ranks map it, and a rank that cannot create or map makes all of
 * them drop theirs. */
static dpt_status agree_setup(dpt_comm *c, mpi_state *s, int ok, dpt_shm_copy copy, int shm,
                              int fake) {
  setup su;
  memset(&su, 0, sizeof su);
  char why[256] = ""; /* why this rank could not create or map the segment */
  int *leader = malloc((size_t)c->size * 3 * sizeof *leader);
  if (!leader) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_comm_create_mpi: no memory");
  int *made = leader + c->size, *members = made + c->size;
  if (c->rank == 0) {
    uint64_t x = (uint64_t)(dpt_now() * 1e9) ^ (uint64_t)(uintptr_t)c ^ ((uint64_t)getpid() << 32);
    x *= 0x9E3779B97F4A7C15ull;
    su.uid = (unsigned)(x >> 32);
    snprintf(su.name, sizeof su.name, "/dptrain-%d-%08x", (int)getpid(), su.uid);
  }
  int rc = MPI_Bcast(&su, (int)sizeof su, MPI_BYTE, 0, s->comm);
  dpt_status st = rc == MPI_SUCCESS ? DPT_OK : mpi_fail(rc, "MPI_Bcast", -1);
  c->uid = su.uid;
  /* Collective: every rank asks, whatever its environment says. */
  int on_node[2] = {c->rank, 1}; /* this rank's place on its machine, the ranks there */
  if (st == DPT_OK) st = find_leaders(s->comm, c->rank, c->size, fake, leader, on_node);
  c->local_rank = on_node[0];
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  s->oversubscribed = cores > 0 && on_node[1] > cores;
  if (st == DPT_OK) st = number_nodes(c, leader);
  if (st != DPT_OK) {
    free(leader);
    return st;
  }
  /* This node's ranks (members[0 .. local)), this rank's place among them, and whether any
   * node has two ranks or more. */
  int local = 0, me = 0, shared = 0;
  for (int r = 0; r < c->size; ++r) {
    shared |= leader[r] != r;
    if (r == c->rank) me = local;
    if (leader[r] == leader[c->rank]) members[local++] = r;
  }
  const int want = shm && local > 1;
  char name[80];
  snprintf(name, sizeof name, "%s-%d", su.name, c->node ? c->node[c->rank] : 0);
  int created = 0;
  if (me == 0 && ok && want) {
    created = dpt_shm_open(name, 1, 0, local, copy, &s->shm) == DPT_OK;
    if (!created) snprintf(why, sizeof why, "rank %d: %s", c->rank, dpt_last_error());
  }
  rc = MPI_Allgather(&created, 1, MPI_INT, made, 1, MPI_INT, s->comm);
  if (rc != MPI_SUCCESS) {
    free(leader);
    return mpi_fail(rc, "MPI_Allgather", -1);
  }
  const int segment = made[leader[c->rank]]; /* this node's segment exists */
  if (me != 0 && segment && dpt_shm_open(name, 0, me, local, copy, &s->shm) != DPT_OK) {
    snprintf(why, sizeof why, "rank %d: %s", c->rank, dpt_last_error());
    s->shm = NULL;
  }
  if (s->shm && dpt_shm_map_ranks(s->shm, members, c->size) != DPT_OK) {
    snprintf(why, sizeof why, "rank %d: %s", c->rank, dpt_last_error());
    dpt_shm_close(s->shm);
    s->shm = NULL;
  }
  /* This rank should have channels and has none (a node's first rank that could not create
   * the segment: its node's other ranks just see no segment). */
  const int failed = (me == 0 ? want && ok : segment) && !s->shm;
  /* Every rank ok, none failed, the first rank that failed. */
  int mine[3] = {ok, !failed, failed ? c->rank : INT_MAX};
  int all[3] = {0, 0, 0};
  rc = MPI_Allreduce(mine, all, 3, MPI_INT, MPI_MIN, s->comm);
  if (created) dpt_shm_unlink(name); /* the node's ranks have mapped it, or failed */
  free(leader);
  if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Allreduce", -1);
  if (!all[1]) { /* some rank could not create or map its segment: MPI's own path for all */
    dpt_shm_close(s->shm);
    s->shm = NULL;
  }
  if (s->shm) dpt_shm_watch_peers(s->shm);
  if (!all[0])
    return ok ? dpt_set_error(DPT_ERR_COMM, "dpt_comm_create_mpi: another rank failed to create "
                                            "its communicator (its error says why)")
              : DPT_ERR_INVALID_ARG;
  if (!all[1]) { /* rank 0 reports the reason of the first rank that could not */
    rc = MPI_Bcast(why, (int)sizeof why, MPI_CHAR, all[2], s->comm);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Bcast", -1);
    why[sizeof why - 1] = '\0';
  }
  const int wanted = shm && shared; /* some node wanted channels */
  if (c->rank == 0 && wanted && !all[1]) say_no_shm(why);
  s->any_shm = wanted && all[1];
  s->all_shm = s->shm && local == c->size;
  /* The hello round cuts its messages in pieces of eager_bytes, the same on every rank. */
  c->eager_bytes = s->all_shm ? dpt_shm_slot_bytes(s->shm) : 4000;
  /* MPI copies what arrives: adding on arrival only when every message uses the channels. */
  c->recv_reduce = s->all_shm;
  return DPT_OK;
}

/* DPT_COMM_FAKE_NODES (a testing knob): a positive count of ranks per node, 0 when unset. */
static dpt_status fake_nodes(int *out) {
  const char *v = dpt_env_get("DPT_COMM_FAKE_NODES");
  *out = 0;
  if (!v) return DPT_OK;
  char *end = NULL;
  errno = 0;
  long k = strtol(v, &end, 10);
  if (end == v || *end || errno || k < 1 || k > INT_MAX)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "DPT_COMM_FAKE_NODES='%s' is not a positive count of ranks per node", v);
  *out = (int)k;
  return DPT_OK;
}

int dpt_comm_mpi_large_slots(const dpt_comm *c, uint64_t out[2]) {
  if (!c || c->tp != &mpi_transport || !((const mpi_state *)c->impl)->shm) return 0;
  dpt_shm_large_slots(((const mpi_state *)c->impl)->shm, out);
  return 1;
}

dpt_status dpt_transport_mpi_create(const void *mpi_comm, const dpt_comm_setup *up,
                                    dpt_comm **out) {
  pthread_mutex_lock(&g_mpi_lock);
  dpt_status st = mpi_ensure_init(up->timeout_s);
  if (st == DPT_OK) ++g_mpi_live;
  pthread_mutex_unlock(&g_mpi_lock);
  if (st != DPT_OK) return st;

  /* The set-up's collectives (MPI_Comm_dup, MPI_Comm_split_type, the agreements) block until
   * every rank takes part. */
  dpt_watch setup_watch;
  st = dpt_watch_arm(&setup_watch, up->timeout_s, DPT_EXIT_STALLED, launcher_rank(),
                     "the communicator's set-up (dpt_comm_create_mpi)", SETUP_WHY);
  dpt_comm *c = st == DPT_OK ? calloc(1, sizeof *c) : NULL;
  mpi_state *s = st == DPT_OK ? calloc(1, sizeof *s) : NULL;
  int rc = MPI_SUCCESS, rank = 0, size = 0, *tag_ub = NULL, flag = 0;
  const char *call = "";
  if (st != DPT_OK) goto fail;
  if (!c || !s) {
    st = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_comm_create_mpi: no memory");
    goto fail;
  }
  s->comm = MPI_COMM_NULL;
  s->cross = MPI_COMM_NULL;
  s->f16_sum = MPI_OP_NULL;
  s->bf16_sum = MPI_OP_NULL;
  MPI_Comm parent = mpi_comm ? *(const MPI_Comm *)mpi_comm : MPI_COMM_WORLD;
  if ((rc = MPI_Comm_dup(parent, &s->comm)) != MPI_SUCCESS)
    call = "MPI_Comm_dup";
  else if ((rc = MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN)) != MPI_SUCCESS)
    call = "MPI_Comm_set_errhandler";
  else if ((rc = MPI_Comm_rank(s->comm, &rank)) != MPI_SUCCESS)
    call = "MPI_Comm_rank";
  else if ((rc = MPI_Comm_size(s->comm, &size)) != MPI_SUCCESS)
    call = "MPI_Comm_size";
  else if ((rc = MPI_Comm_get_attr(s->comm, MPI_TAG_UB, &tag_ub, &flag)) != MPI_SUCCESS)
    call = "MPI_Comm_get_attr(MPI_TAG_UB)";
  else if ((rc = MPI_Op_create(f16_sum_op, 1, &s->f16_sum)) != MPI_SUCCESS)
    call = "MPI_Op_create";
  else if ((rc = MPI_Op_create(bf16_sum_op, 1, &s->bf16_sum)) != MPI_SUCCESS)
    call = "MPI_Op_create";
  if (rc != MPI_SUCCESS) {
    st = mpi_fail(rc, call, -1);
    goto fail;
  }
  st = up->init(c, &mpi_transport, s, rank, size, flag && tag_ub ? *tag_ub : 32767);
  const char *copy_env = dpt_env_get("DPT_COMM_SHM_COPY");
  dpt_shm_copy copy = DPT_SHM_COPY_AUTO;
  if (st == DPT_OK && copy_env) st = dpt_shm_copy_parse(copy_env, &copy);
  const char *shm_env = dpt_env_get("DPT_COMM_SHM");
  const int shm = !shm_env || strcmp(shm_env, "0");
  if (st == DPT_OK && shm_env && strcmp(shm_env, "0") && strcmp(shm_env, "1"))
    st = dpt_set_error(DPT_ERR_INVALID_ARG, "DPT_COMM_SHM='%s' is not 0 or 1", shm_env);
  int fake = 0;
  if (st == DPT_OK) st = fake_nodes(&fake);
  /* Both steps are collective, and every rank reaches the same verdict on the first. */
  dpt_status agreed = agree_options(c, s->comm, st == DPT_OK, shm, fake);
  if (agreed == DPT_OK) agreed = agree_setup(c, s, st == DPT_OK, copy, shm, fake);
  if (agreed == DPT_OK) agreed = make_cross(c, s);
  if (st == DPT_OK) st = agreed;
  if (st != DPT_OK) {
    free(c->payload);
    free(c->node);
    goto fail;
  }
  dpt_watch_disarm(&setup_watch);
  *out = c;
  return DPT_OK;

fail:
  dpt_watch_disarm(&setup_watch);
  if (s) dpt_shm_close(s->shm);
  if (s && s->f16_sum != MPI_OP_NULL) MPI_Op_free(&s->f16_sum);
  if (s && s->bf16_sum != MPI_OP_NULL) MPI_Op_free(&s->bf16_sum);
  if (s && s->cross != MPI_COMM_NULL) MPI_Comm_free(&s->cross);
  if (s && s->comm != MPI_COMM_NULL) MPI_Comm_free(&s->comm);
  free(s);
  free(c);
  pthread_mutex_lock(&g_mpi_lock);
  if (--g_mpi_live == 0 && g_mpi_owned) {
    MPI_Finalize();
    g_mpi_owned = 0;
  }
  pthread_mutex_unlock(&g_mpi_lock);
  return st;
}
