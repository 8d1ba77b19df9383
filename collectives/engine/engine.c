/* The message engine every collective schedule runs on.
 *
 * A schedule is, for this rank, an ordered list of sends and an ordered list of receives
 * (dpt_sched). The engine keeps up to DPT_WINDOW of each in flight:
 *
 *   receives  [r_proc ............ r_post)      posted ahead, into place or into a slot
 *   sends     [s_done ............ s_post)      posted in order once their input is ready
 *
 *   - receives are posted before the sends that will feed the peer's receives, and both are
 *     posted in schedule order, so per (peer, tag) the n-th send matches the n-th receive;
 *   - a send waits for the receive it forwards (dep: processed), a receive into memory that a
 *     send still reads waits for that send (dep: completed), a slot receive is summed into
 *     its destination in order, after the send reading that destination (dep2) completed;
 *   - with staging, a message waits until its block is in host memory, finished blocks are
 *     handed back, and while nothing arrives the calling thread does staging work (idle).
 * Progress is any post, completion or sum; nothing for `timeout_s` is a stall: every pending
 * request is cancelled and DPT_ERR_TIMEOUT names the rank the engine was waiting for.
 */
#include <string.h>

#include "collectives/engine/engine.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/size.h"
#include "collectives/common/comm_struct.h"
#include "collectives/transports/transport.h"
#include "collectives/common/reduce.h"
#include "collectives/common/comm_util.h"

/* Messages in flight per direction: enough to overlap a sum with the next transfers. */
#define DPT_WINDOW 4

typedef struct engine {
  dpt_comm *c;
  const dpt_sched *s;
  int tag;
  dpt_what *what;
  size_t esize;
  dpt_req sreq[DPT_WINDOW], rreq[DPT_WINDOW];
  dpt_xfer sx[DPT_WINDOW], rx[DPT_WINDOW];
  size_t s_post, s_done, r_post, r_proc;
  size_t blocks_done;
  int staging_wait; /* the last pass stopped on a block that is not staged yet */
} engine;

/* *ok = 1 when block b is in host memory. */
static dpt_status staged(engine *e, size_t block, int *ok) {
  *ok = 1;
  if (!e->s->ready) return DPT_OK;
  int r = e->s->ready(e->s->st, block);
  if (r < 0) return dpt_error_context((dpt_status)r, "%s: staging", dpt_what_str(e->what));
  if (r == 0) {
    *ok = 0;
    e->staging_wait = 1;
  }
  return DPT_OK;
}

static dpt_status post_recvs(engine *e, int *progress) {
  const dpt_sched *s = e->s;
  while (e->r_post < s->nrecv && e->r_post - e->r_proc < DPT_WINDOW) {
    const size_t k = e->r_post % DPT_WINDOW;
    dpt_xfer *x = &e->rx[k];
    s->recv_at(s->ctx, e->r_post, x);
    dpt_req *r = &e->rreq[k];
    memset(r, 0, sizeof *r);
    if (x->bytes == 0) {
      r->done = 1;
    } else {
      if (x->dep != DPT_NO_DEP && x->dep >= e->s_done) break;
      int ok;
      dpt_status st = staged(e, x->block, &ok);
      if (st != DPT_OK) return st;
      if (!ok) break;
      r->is_recv = 1;
      r->peer = x->peer;
      r->tag = e->tag;
      r->seq = e->what->seq;
      r->bytes = x->bytes;
      /* A sum the transport can do as the data arrives skips the slot, unless a send may
       * still read the destination. */
      r->reduce = !x->ptr && e->c->recv_reduce && (x->dep2 == DPT_NO_DEP || x->dep2 < e->s_done);
      r->dtype = s->dtype;
      r->buf = x->ptr ? x->ptr : r->reduce ? x->reduce_dst : e->c->slot_buf + k * s->slot_bytes;
      st = e->c->tp->irecv(e->c, r);
      if (st != DPT_OK) return dpt_error_context(st, "%s", dpt_what_str(e->what));
    }
    ++e->r_post;
    *progress = 1;
  }
  return DPT_OK;
}

static dpt_status post_sends(engine *e, int *progress) {
  const dpt_sched *s = e->s;
  while (e->s_post < s->nsend && e->s_post - e->s_done < DPT_WINDOW) {
    const size_t k = e->s_post % DPT_WINDOW;
    dpt_xfer *x = &e->sx[k];
    s->send_at(s->ctx, e->s_post, x);
    /* Even an empty send waits for its receive: a later message may depend on it as on a
     * sign that the receive was processed (hier_allreduce.c's dep2). */
    if (x->dep != DPT_NO_DEP && x->dep >= e->r_proc) break;
    dpt_req *r = &e->sreq[k];
    memset(r, 0, sizeof *r);
    if (x->bytes == 0) {
      r->done = 1;
    } else {
      int ok;
      dpt_status st = staged(e, x->block, &ok);
      if (st != DPT_OK) return st;
      if (!ok) break;
      r->peer = x->peer;
      r->tag = e->tag;
      r->seq = e->what->seq;
      r->bytes = x->bytes;
      r->buf = x->ptr;
      st = e->c->tp->isend(e->c, r);
      if (st != DPT_OK) return dpt_error_context(st, "%s", dpt_what_str(e->what));
    }
    ++e->s_post;
    *progress = 1;
  }
  return DPT_OK;
}

/* Sends complete in any order; s_done counts the completed prefix. */
static void advance_sends(engine *e, int *progress) {
  while (e->s_done < e->s_post && e->sreq[e->s_done % DPT_WINDOW].done) {
    ++e->s_done;
    *progress = 1;
  }
}

/* Receives are summed in order (a slot is reused only after its sum). */
static dpt_status process_recvs(engine *e, int *progress) {
  while (e->r_proc < e->r_post) {
    const size_t k = e->r_proc % DPT_WINDOW;
    const dpt_req *r = &e->rreq[k];
    const dpt_xfer *x = &e->rx[k];
    if (!r->done) break;
    if (x->bytes > 0) {
      if (r->err == DPT_ERR_COMM) /* the message stopped half way: its sender gave up */
        return dpt_set_error(DPT_ERR_COMM,
                             "%s: rank %d stopped sending half way through message %zu of %zu "
                             "(it failed or left the collective; its error says why)",
                             dpt_what_str(e->what), x->peer, e->r_proc, e->s->nrecv);
      if (r->err != DPT_OK || r->got != x->bytes)
        return dpt_set_error(DPT_ERR_MISMATCH,
                             "%s: rank %d sent %s bytes where %zu were expected (message %zu "
                             "of %zu): the ranks disagree on the call",
                             dpt_what_str(e->what), x->peer, r->err != DPT_OK ? "more" : "fewer",
                             x->bytes, e->r_proc, e->s->nrecv);
      if (!x->ptr && !r->reduce) { /* a slot receive: sum it now */
        if (x->dep2 != DPT_NO_DEP && x->dep2 >= e->s_done) break;
        int ok;
        dpt_status st = staged(e, x->block, &ok);
        if (st != DPT_OK) return st;
        if (!ok) break;
        dpt_sum_into(x->reduce_dst, r->buf, x->bytes / e->esize, e->s->dtype);
      }
    }
    ++e->r_proc;
    *progress = 1;
  }
  return DPT_OK;
}

/* Hands back the blocks no pending message touches any more. */
static void report_blocks(engine *e) {
  if (!e->s->done) return;
  size_t low = (size_t)-1;
  dpt_xfer x;
  if (e->s_done < e->s->nsend) {
    e->s->send_at(e->s->ctx, e->s_done, &x);
    low = x.block;
  }
  if (e->r_proc < e->s->nrecv) {
    e->s->recv_at(e->s->ctx, e->r_proc, &x);
    if (x.block < low) low = x.block;
  }
  if (low != (size_t)-1 && low > e->blocks_done) {
    e->blocks_done = low;
    e->s->done(e->s->st, low);
  }
}

/* Collects the active requests (at most 2 * DPT_WINDOW). */
static int active_reqs(engine *e, dpt_req **list) {
  int n = 0;
  for (size_t i = e->s_done; i < e->s_post; ++i) {
    dpt_req *r = &e->sreq[i % DPT_WINDOW];
    if (r->active) list[n++] = r;
  }
  for (size_t i = e->r_proc; i < e->r_post; ++i) {
    dpt_req *r = &e->rreq[i % DPT_WINDOW];
    if (r->active) list[n++] = r;
  }
  return n;
}

static void cancel_all(engine *e) {
  dpt_req *list[2 * DPT_WINDOW];
  int n = active_reqs(e, list);
  for (int i = 0; i < n; ++i)
    e->c->tp->cancel(e->c, list[i]);
}

static dpt_status stalled(engine *e, double waited) {
  int peer = -1;
  const char *dir = "";
  size_t idx = 0, total = 0;
  if (e->r_proc < e->s->nrecv) {
    dpt_xfer x;
    e->s->recv_at(e->s->ctx, e->r_proc, &x);
    peer = x.peer;
    dir = "receiving message";
    idx = e->r_proc;
    total = e->s->nrecv;
  } else if (e->s_done < e->s->nsend) {
    dpt_xfer x;
    e->s->send_at(e->s->ctx, e->s_done, &x);
    peer = x.peer;
    dir = "sending message";
    idx = e->s_done;
    total = e->s->nsend;
  }
  return dpt_set_error(DPT_ERR_TIMEOUT,
                       "%s: no progress for %.3g s, waiting for rank %d (%s %zu of %zu); that "
                       "rank (or one before it in the schedule) stopped or left the collective",
                       dpt_what_str(e->what), waited, peer, dir, idx, total);
}

/* The receive slots of a window (c->slot_buf, reused across collectives). */
static dpt_status reserve_slots(dpt_comm *c, const dpt_sched *s, dpt_what *what) {
  if (s->slot_bytes == 0) return DPT_OK;
  size_t need;
  if (!dpt_mul_ok(s->slot_bytes, DPT_WINDOW, &need))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: slot size overflows", dpt_what_str(what));
  return dpt_comm_scratch(&c->slot_buf, &c->slot_bytes, need, what);
}

dpt_status dpt_engine_run(dpt_comm *c, const dpt_sched *s, int tag, dpt_what *what) {
  engine e;
  memset(&e, 0, sizeof e);
  e.c = c;
  e.s = s;
  e.tag = tag;
  e.what = what;
  e.esize = dpt_dtype_size(s->dtype);
  dpt_status st = reserve_slots(c, s, what);
  if (st != DPT_OK) return st;
  const double timeout = c->opt.timeout_s;
  double last = dpt_now();
  while (e.s_done < s->nsend || e.r_proc < s->nrecv) {
    int progress = 0;
    e.staging_wait = 0;
    st = post_recvs(&e, &progress);
    if (st == DPT_OK) st = post_sends(&e, &progress);
    dpt_req *list[2 * DPT_WINDOW];
    int n = active_reqs(&e, list), ndone = 0;
    if (st == DPT_OK && n > 0) st = c->tp->poll(c, list, n, 0, 0.0, 0.0, &ndone);
    if (st == DPT_OK) {
      advance_sends(&e, &progress);
      st = process_recvs(&e, &progress);
    }
    if (st != DPT_OK) break;
    report_blocks(&e);
    if (progress || ndone > 0) {
      last = dpt_now();
      continue;
    }
    if (s->idle && s->idle(s->st) > 0) {
      last = dpt_now();
      continue;
    }
    const double now = dpt_now();
    if (now - last > timeout) {
      st = stalled(&e, now - last);
      break;
    }
    /* Nothing to do but wait: block in the transport, briefly when a staging thread may
     * make a block ready without any message arriving; quiet since `last`, so a wait cut
     * into such slices still backs off from spinning to sleeping. */
    double until = last + timeout;
    if (e.staging_wait && until > now + 1e-3) until = now + 1e-3;
    n = active_reqs(&e, list);
    st = c->tp->poll(c, list, n, 1, until, last, &ndone);
    if (st != DPT_OK) break;
    if (ndone > 0) last = dpt_now();
  }
  if (st != DPT_OK) {
    cancel_all(&e);
    return st;
  }
  if (s->done) s->done(s->st, (size_t)-1);
  return DPT_OK;
}
