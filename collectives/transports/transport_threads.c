/* Threads transport: the members of a group are threads of one process.
 *
 * Every ordered pair (src, dst) has a channel: the sends src posted to dst and the receives
 * dst posted from src, each a FIFO. A receive matches the earliest send with its tag (MPI's
 * rule), and the receiving thread copies the data straight from the sender's buffer (one
 * copy, done by the receiver in its poll, outside the lock); the send completes when the copy
 * is done, like an MPI rendezvous. One mutex guards the group; each member waits on its own
 * condition variable (monotonic clock, timed) and an epoch counter that every event
 * concerning it advances, so no wake-up is lost. Request fields that other threads set are
 * written under the lock (`fin`) and turned into done/active by the owner's poll.
 *
 * Before sleeping, a member with a core of its own (no more members than cores) spins on its
 * epoch for up to TH_SPIN_SECONDS: a condition-variable wake-up takes tens of microseconds
 * and a collective's pieces arrive closer together than that.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collectives/common/comm_struct.h"
#include "collectives/transports/transport.h"
#include "collectives/transports/backoff.h"
#include "base/clock.h"
#include "base/error.h"

/* How long a member spins for an event before it sleeps on its condition variable. */
#define TH_SPIN_SECONDS 200e-6

typedef struct member {
  pthread_cond_t cond;
  _Atomic uint64_t epoch; /* advanced on every event concerning this member (lock held); read
                             without the lock while spinning */
  int joined;
} member;

struct dpt_comm_group {
  pthread_mutex_t lock;
  int size;
  int refs; /* the creator's handle + members alive */
  int spin; /* members spin a while before sleeping: no more members than cores */
  member *m;
  int nnodes, *node; /* [size]: the nodes members see, renumbered (NULL: one node) */
  int obtained;      /* a member was obtained: the nodes are fixed */
  /* channels [src * size + dst]: FIFO lists linked through dpt_req.next */
  dpt_req **send_head, **send_tail, **recv_head, **recv_tail;
};

/* Completion set by another thread, under the lock; the owner's poll reads it. dpt_req has
 * no such field in the generic part, so the threads transport uses `matched` = 2. */
#define FIN 2

/* Frees the group's memory; `initialized`: its lock and condition variables exist. */
static void group_free(dpt_comm_group *g, int initialized) {
  if (initialized) {
    for (int i = 0; i < g->size; ++i)
      pthread_cond_destroy(&g->m[i].cond);
    pthread_mutex_destroy(&g->lock);
  }
  free(g->m);
  free(g->node);
  free(g->send_head);
  free(g->send_tail);
  free(g->recv_head);
  free(g->recv_tail);
  free(g);
}

/* Drops one reference (lock held); frees the group (and unlocks) at zero. */
static void group_unref(dpt_comm_group *g) {
  int last = --g->refs == 0;
  pthread_mutex_unlock(&g->lock);
  if (last) group_free(g, 1);
}

static void wake(dpt_comm_group *g, int rank) {
  atomic_fetch_add_explicit(&g->m[rank].epoch, 1, memory_order_release);
  pthread_cond_broadcast(&g->m[rank].cond);
}

/* Queues a send (on channel me -> peer) or a receive (peer -> me). A new send wakes its
 * receiver; the receiver itself matches and copies in its poll. */
static dpt_status th_post(dpt_comm *c, dpt_req *r, int is_recv) {
  dpt_comm_group *g = c->impl;
  const size_t me = (size_t)c->rank, peer = (size_t)r->peer, n = (size_t)g->size;
  const size_t ch = is_recv ? peer * n + me : me * n + peer;
  pthread_mutex_lock(&g->lock);
  r->active = 1;
  r->done = 0;
  r->matched = 0;
  r->owner = c->rank;
  r->err = DPT_OK;
  r->got = 0;
  if (is_recv) {
    dpt_req_push(&g->recv_head[ch], &g->recv_tail[ch], r);
  } else {
    dpt_req_push(&g->send_head[ch], &g->send_tail[ch], r);
    wake(g, r->peer);
  }
  pthread_mutex_unlock(&g->lock);
  return DPT_OK;
}

static dpt_status th_isend(dpt_comm *c, dpt_req *r) {
  return th_post(c, r, 0);
}

static dpt_status th_irecv(dpt_comm *c, dpt_req *r) {
  return th_post(c, r, 1);
}

/* Matches and copies everything that can be matched on channel ch (lock held; released
 * during copies). */
static void drain_channel(dpt_comm_group *g, size_t ch) {
  for (;;) {
    dpt_req *rv = NULL, *sd = NULL;
    for (dpt_req *q = g->recv_head[ch]; q && !sd; q = q->next) {
      for (dpt_req *p = g->send_head[ch]; p; p = p->next) {
        if (p->tag == q->tag) {
          rv = q;
          sd = p;
          break;
        }
      }
    }
    if (!sd) return;
    dpt_req_unlink(&g->recv_head[ch], &g->recv_tail[ch], rv);
    dpt_req_unlink(&g->send_head[ch], &g->send_tail[ch], sd);
    rv->matched = 1;
    sd->matched = 1;
    const int fits = sd->bytes <= rv->bytes;
    pthread_mutex_unlock(&g->lock);
    if (fits) dpt_req_deliver(rv, 0, sd->buf, sd->bytes);
    pthread_mutex_lock(&g->lock);
    rv->got = fits ? sd->bytes : 0;
    rv->err = fits ? DPT_OK : DPT_ERR_MISMATCH;
    rv->matched = FIN;
    sd->matched = FIN;
    wake(g, sd->owner);
  }
}

static void to_timespec(double t, struct timespec *ts) {
  /* A timeout meant as "forever" (any finite timeout_s is accepted) must not overflow time_t:
   * ten million years is as good. */
  if (t > 3e14) t = 3e14;
  ts->tv_sec = (time_t)t;
  ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec += 1;
    ts->tv_nsec -= 1000000000L;
  }
}

/* Waits up to TH_SPIN_SECONDS for an event on `me` without the lock (lock held on entry and on
 * return): 1 when one came. A condition-variable wake-up costs tens of microseconds, and a
 * collective's messages follow each other closer than that; the spin catches them. */
static int spin_for_event(dpt_comm_group *g, member *me, uint64_t epoch, double deadline) {
  pthread_mutex_unlock(&g->lock);
  double until = dpt_now() + TH_SPIN_SECONDS;
  if (until > deadline) until = deadline;
  unsigned k = 0;
  while (atomic_load_explicit(&me->epoch, memory_order_acquire) == epoch) {
    dpt_cpu_relax();
    if ((++k & 63) == 0 && dpt_now() >= until) break;
    if ((k & 1023) == 0) sched_yield(); /* a staging helper thread may want this core */
  }
  pthread_mutex_lock(&g->lock);
  /* Read again under the lock: an event between the last look and the lock would otherwise
   * be slept through (its wake-up came before this thread waits on the condition). */
  return atomic_load_explicit(&me->epoch, memory_order_relaxed) != epoch;
}

/* `since` is not needed: a member sleeps on its condition variable after one short spin. */
static dpt_status th_poll(dpt_comm *c, dpt_req **reqs, int n, int block, double deadline,
                          double since, int *ndone) {
  (void)since;
  dpt_comm_group *g = c->impl;
  member *me = &g->m[c->rank];
  *ndone = 0;
  pthread_mutex_lock(&g->lock);
  for (;;) {
    const uint64_t epoch = atomic_load_explicit(&me->epoch, memory_order_relaxed);
    for (int i = 0; i < n; ++i) {
      if (reqs[i]->active && reqs[i]->is_recv && !reqs[i]->matched)
        drain_channel(g, (size_t)reqs[i]->peer * (size_t)g->size + (size_t)c->rank);
    }
    for (int i = 0; i < n; ++i) {
      dpt_req *r = reqs[i];
      if (r->active && r->matched == FIN) {
        r->active = 0;
        r->done = 1;
        ++*ndone;
      }
    }
    if (*ndone > 0 || !block) break;
    if (atomic_load_explicit(&me->epoch, memory_order_relaxed) != epoch) continue;
    if (dpt_now() >= deadline) break;
    if (g->spin && spin_for_event(g, me, epoch, deadline)) continue;
    struct timespec ts;
    to_timespec(deadline, &ts);
    int rc = pthread_cond_timedwait(&me->cond, &g->lock, &ts);
    if (rc != 0 && rc != ETIMEDOUT) {
      pthread_mutex_unlock(&g->lock);
      return dpt_set_error(DPT_ERR_COMM, "threads transport: pthread_cond_timedwait: %s",
                           strerror(rc));
    }
  }
  pthread_mutex_unlock(&g->lock);
  return DPT_OK;
}

static void th_cancel(dpt_comm *c, dpt_req *r) {
  dpt_comm_group *g = c->impl;
  pthread_mutex_lock(&g->lock);
  if (r->active) {
    if (r->matched == 0) {
      size_t ch = r->is_recv ? (size_t)r->peer * (size_t)g->size + (size_t)c->rank
                             : (size_t)c->rank * (size_t)g->size + (size_t)r->peer;
      if (r->is_recv)
        dpt_req_unlink(&g->recv_head[ch], &g->recv_tail[ch], r);
      else
        dpt_req_unlink(&g->send_head[ch], &g->send_tail[ch], r);
    }
    /* A receiver copying from this send right now: let it finish before the buffer goes. */
    while (r->matched == 1)
      pthread_cond_wait(&g->m[c->rank].cond, &g->lock);
    r->active = 0;
  }
  pthread_mutex_unlock(&g->lock);
}

static void th_destroy(dpt_comm *c) {
  dpt_comm_group *g = c->impl;
  pthread_mutex_lock(&g->lock);
  g->m[c->rank].joined = 2; /* gone: the rank cannot be obtained again */
  group_unref(g);
}

static const dpt_transport threads_transport = {
    .name = "threads",
    .isend = th_isend,
    .irecv = th_irecv,
    .poll = th_poll,
    .cancel = th_cancel,
    .destroy = th_destroy,
    .native_allreduce = NULL,
};

dpt_status dpt_comm_group_create(int size, dpt_comm_group **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_comm_group_create: out is NULL");
  *out = NULL;
  if (size < 1 || size > 4096)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_comm_group_create: size %d outside [1, 4096]",
                         size);
  dpt_comm_group *g = calloc(1, sizeof *g);
  const size_t nch = (size_t)size * (size_t)size;
  if (g) {
    g->m = calloc((size_t)size, sizeof *g->m);
    g->send_head = calloc(nch, sizeof *g->send_head);
    g->send_tail = calloc(nch, sizeof *g->send_tail);
    g->recv_head = calloc(nch, sizeof *g->recv_head);
    g->recv_tail = calloc(nch, sizeof *g->recv_tail);
  }
  if (!g || !g->m || !g->send_head || !g->send_tail || !g->recv_head || !g->recv_tail) {
    if (g) group_free(g, 0);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_comm_group_create: %d members", size);
  }
  g->size = size;
  g->refs = 1;
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  g->spin = cores > 0 && size <= cores;
  pthread_mutex_init(&g->lock, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  for (int i = 0; i < size; ++i)
    pthread_cond_init(&g->m[i].cond, &attr);
  pthread_condattr_destroy(&attr);
  *out = g;
  return DPT_OK;
}

dpt_status dpt_transport_threads_member(dpt_comm_group *g, int rank, const dpt_comm_setup *up,
                                        dpt_comm **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_comm_group_member: out is NULL");
  *out = NULL;
  if (!g) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_comm_group_member: group is NULL");
  if (rank < 0 || rank >= g->size)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_comm_group_member: rank %d outside [0, %d)",
                         rank, g->size);
  dpt_comm *c = calloc(1, sizeof *c);
  if (!c) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_comm_group_member: no memory");
  pthread_mutex_lock(&g->lock);
  if (g->m[rank].joined) {
    pthread_mutex_unlock(&g->lock);
    free(c);
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_comm_group_member: rank %d was already obtained",
                         rank);
  }
  g->m[rank].joined = 1;
  g->refs++;
  g->obtained = 1;
  pthread_mutex_unlock(&g->lock);
  dpt_status st = up->init(c, &threads_transport, g, rank, g->size, INT_MAX);
  c->recv_reduce = 1;
  if (st == DPT_OK && g->node) { /* fixed since the first member: read without the lock */
    c->node = malloc((size_t)g->size * sizeof *c->node);
    if (!c->node) {
      st = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_comm_group_member: no memory");
      free(c->payload);
    } else {
      memcpy(c->node, g->node, (size_t)g->size * sizeof *c->node);
      c->nnodes = g->nnodes;
    }
  }
  if (st != DPT_OK) {
    pthread_mutex_lock(&g->lock);
    g->m[rank].joined = 0;
    group_unref(g);
    free(c);
    return st;
  }
  *out = c;
  return DPT_OK;
}

dpt_status dpt_comm_group_set_nodes(dpt_comm_group *g, const int *node) {
  const char *fn = "dpt_comm_group_set_nodes";
  if (!g) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: group is NULL", fn);
  int *ids = NULL, n = 1;
  if (node) {
    ids = malloc((size_t)g->size * sizeof *ids);
    if (!ids) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: no memory", fn);
    /* Renumbered in order of first appearance: ids[r] is the renumbered id of node[r]. */
    n = 0;
    for (int r = 0; r < g->size; ++r) {
      if (node[r] < 0) {
        free(ids);
        return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: rank %d's node %d is negative", fn, r,
                             node[r]);
      }
      int q = 0;
      while (q < r && node[q] != node[r])
        ++q;
      ids[r] = q < r ? ids[q] : n++;
    }
  }
  pthread_mutex_lock(&g->lock);
  if (g->obtained) {
    pthread_mutex_unlock(&g->lock);
    free(ids);
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: members were already obtained", fn);
  }
  free(g->node);
  g->node = n > 1 ? ids : NULL;
  g->nnodes = n;
  pthread_mutex_unlock(&g->lock);
  if (n <= 1) free(ids);
  return DPT_OK;
}

void dpt_comm_group_destroy(dpt_comm_group *g) {
  if (!g) return;
  pthread_mutex_lock(&g->lock);
  group_unref(g);
}
