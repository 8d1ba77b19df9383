/* The hello round: the desync check, arrival, and the inline payloads of small collectives.
 *
 * Every rank sends every other rank an 80-byte header (sequence number, operation, count,
 * dtype, algorithm, root, chunk sizes), followed by an inline payload when the collective is
 * small enough, and receives theirs. Every rank sees every header, so all reach the same
 * verdict: a disagreement is DPT_ERR_MISMATCH everywhere (nothing else has moved), and a
 * header that does not arrive before the deadline names exactly the ranks that are missing.
 * Headers use one fixed tag so that a rank one collective ahead is matched and seen as a
 * mismatch instead of waiting for ever; data messages use a tag derived from the sequence
 * number so that leftovers of a failed collective never match a later one.
 *
 *   rank r:  post receives (slot s of set k) --> send header + payload to every s != r
 *            wait for every header --> judge (same verdict everywhere) --> wait for payloads
 *            post the next round's header receives into set k ^ 1
 *
 * Cost: one round of 2(N-1) small messages per rank (N-1 in flight each way at once).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/hello.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/size.h"
#include "collectives/comm_impl.h"

dpt_what dpt_hello_what(const dpt_hello *h) {
  dpt_what w;
  w.text[0] = '\0';
  w.op = h->op;
  w.root = h->root;
  w.seq = h->seq;
  w.count = h->count;
  w.dtype = h->dtype;
  w.algo = h->algo;
  return w;
}

static int same_call(const dpt_hello *a, const dpt_hello *b) {
  return a->op == b->op && a->seq == b->seq && a->count == b->count && a->dtype == b->dtype &&
         a->algo == b->algo && a->root == b->root && a->piece == b->piece && a->block == b->block &&
         a->uid == b->uid;
}

/* The verdict every rank reaches from the same headers. */
static dpt_status judge(const dpt_comm *c, const dpt_hello *const *h, dpt_what *wt) {
  int failed = -1, ref = -1, differ = 0;
  for (int r = 0; r < c->size; ++r) {
    if (h[r]->flags & DPT_HELLO_FAILED) {
      if (failed < 0) failed = r;
    } else if (ref < 0) {
      ref = r;
    } else if (!same_call(h[r], h[ref])) {
      differ = 1;
    }
  }
  if (!differ && failed < 0) return DPT_OK;
  const char *what = dpt_what_str(wt);
  if (!differ)
    return dpt_set_error(DPT_ERR_COMM,
                         "%s: rank %d failed before the collective (its own error says why); "
                         "no data moved",
                         what, failed);
  char msg[3072];
  size_t len =
      (size_t)snprintf(msg, sizeof msg, "%s: the ranks disagree on the call, no data moved:", what);
  int r = 0;
  for (; r < c->size && len < sizeof msg - 256; ++r) {
    char d[160];
    dpt_what w = dpt_hello_what(h[r]);
    dpt_what_describe(d, sizeof d, &w);
    len += (size_t)snprintf(msg + len, sizeof msg - len, "%s rank %d: %s%s", r ? ";" : "", r, d,
                            (h[r]->flags & DPT_HELLO_FAILED) ? " [failed before the call]" : "");
    if (h[r]->uid != h[ref]->uid)
      len += (size_t)snprintf(msg + len, sizeof msg - len,
                              " [from another communicator: left over from a failed one]");
    if (h[r]->piece != h[ref]->piece || h[r]->block != h[ref]->block)
      len += (size_t)snprintf(msg + len, sizeof msg - len, " piece %llu block %llu",
                              (unsigned long long)h[r]->piece, (unsigned long long)h[r]->block);
  }
  if (r < c->size) snprintf(msg + len, sizeof msg - len, "; ... (%d more)", c->size - r);
  return dpt_set_error(DPT_ERR_MISMATCH, "%s", msg);
}

/* Scratch layout of the hello round: two sets of `size` message slots (cap bytes each; slot r
 * of a set receives rank r's message, slot rank holds ours), then the requests: per set and
 * rank `maxf` receive fragments, then `maxf` send fragments per rank. A message longer than
 * the transport's eager size goes in fragments of that size (the first carries the header),
 * so that every fragment takes MPI's eager path (one copy each way, no rendezvous round
 * trip). Rounds alternate between the sets, and the first-fragment receives of the next
 * round are posted as soon as a round is over: a peer's next hello then finds its receive
 * waiting (MPI's expected path, one copy less) and cannot overwrite payloads still being
 * read. Continuation fragments carry the collective's data tag, so a peer that sends more of
 * them than expected (a mismatch) never feeds a later round. */
typedef struct hello_layout {
  size_t cap;   /* bytes of one message slot */
  size_t total; /* bytes of one set of slots */
  size_t frag;  /* bytes of one fragment */
  size_t maxf;  /* fragments of a full slot */
  dpt_req *recv[2], *send;
  dpt_req **list; /* room for every request of a round (hello_wait) */
} hello_layout;

static size_t frags_of(const hello_layout *L, size_t bytes) {
  size_t f = bytes / L->frag + (bytes % L->frag != 0);
  return f ? f : 1;
}

static dpt_status hello_scratch(dpt_comm *c, dpt_what *wt, hello_layout *L) {
  const size_t n = (size_t)c->size;
  L->cap = (dpt_comm_inline_cap(c->size) + sizeof(dpt_hello) + 63) & ~(size_t)63;
  L->frag = c->eager_bytes < L->cap ? c->eager_bytes : L->cap;
  L->maxf = frags_of(L, L->cap);
  size_t need, nreq, reqs_bytes;
  if (!dpt_mul_ok(L->cap, n, &L->total) || !dpt_mul_ok(L->total, 2, &need) ||
      !dpt_mul_ok(3 * n, L->maxf, &nreq) ||
      !dpt_mul_ok(nreq, sizeof(dpt_req) + sizeof(dpt_req *), &reqs_bytes) ||
      !dpt_add_ok(need, reqs_bytes, &need))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: hello buffers overflow", dpt_what_str(wt));
  /* The size depends only on the group size: allocated once, never moved (requests live
   * in it while posted). */
  dpt_status st = dpt_comm_scratch(&c->hello_buf, &c->hello_bytes, need, wt);
  if (st != DPT_OK) return st;
  dpt_req *reqs = (dpt_req *)(void *)(c->hello_buf + 2 * L->total);
  L->recv[0] = reqs;
  L->recv[1] = reqs + n * L->maxf;
  L->send = reqs + 2 * n * L->maxf;
  L->list = (dpt_req **)(void *)(reqs + 3 * n * L->maxf);
  return DPT_OK;
}

static unsigned char *hello_slot(const dpt_comm *c, const hello_layout *L, int set, int rank) {
  return c->hello_buf + (size_t)set * L->total + (size_t)rank * L->cap;
}

/* Posts fragment j of rank r's message into `set`. */
static dpt_status hello_post_one(dpt_comm *c, const hello_layout *L, int set, int r, size_t j,
                                 int tag) {
  dpt_req *q = &L->recv[set][(size_t)r * L->maxf + j];
  memset(q, 0, sizeof *q);
  q->is_recv = 1;
  q->peer = r;
  q->tag = tag;
  q->seq = c->seq; /* the next collective's, for the pre-posted first fragments */
  q->buf = hello_slot(c, L, set, r) + j * L->frag;
  q->bytes = L->frag;
  return c->tp->irecv(c, q);
}

/* Cancels every posted receive of `set` (and the sends, with `sends`). */
static void hello_cancel(dpt_comm *c, const hello_layout *L, int set, int sends) {
  const size_t n = (size_t)c->size * L->maxf;
  for (size_t i = 0; i < n; ++i) {
    if (L->recv[set][i].active) c->tp->cancel(c, &L->recv[set][i]);
    if (sends && L->send[i].active) c->tp->cancel(c, &L->send[i]);
  }
}

/* Posts the first-fragment receives of a round into `set`. */
static dpt_status hello_post(dpt_comm *c, const hello_layout *L, int set) {
  for (int r = 0; r < c->size; ++r) {
    if (r == c->rank) {
      L->recv[set][(size_t)r * L->maxf].active = 0;
      continue;
    }
    dpt_status st = hello_post_one(c, L, set, r, 0, DPT_TAG_HELLO);
    if (st != DPT_OK) {
      hello_cancel(c, L, set, 0);
      return st;
    }
  }
  return DPT_OK;
}

/* Cancels the receives posted for the next round (before the communicator goes away). */
void dpt_hello_unpost(dpt_comm *c) {
  if (!c->hello_posted || !c->hello_buf) return;
  hello_layout L;
  if (hello_scratch(c, NULL, &L) != DPT_OK) return;
  hello_cancel(c, &L, c->hello_set, 0);
  c->hello_posted = 0;
}

/* Names the ranks whose header has not arrived. */
static dpt_status hello_timeout(dpt_comm *c, const hello_layout *L, const dpt_req *recv,
                                dpt_what *wt) {
  char missing[1024];
  size_t len = 0;
  int count = 0;
  missing[0] = '\0';
  for (int r = 0; r < c->size; ++r) {
    if (r == c->rank || !recv[(size_t)r * L->maxf].active) continue;
    if (len < sizeof missing - 16)
      len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d", count ? ", " : "", r);
    ++count;
  }
  if (count == 0)
    return dpt_set_error(DPT_ERR_TIMEOUT,
                         "%s: timed out after %.3g s: every header arrived but not all of the "
                         "data, or a peer did not take ours",
                         dpt_what_str(wt), c->opt.timeout_s);
  return dpt_set_error(DPT_ERR_TIMEOUT,
                       "%s: timed out after %.3g s: rank%s %s did not enter the collective",
                       dpt_what_str(wt), c->opt.timeout_s, count == 1 ? "" : "s", missing);
}

/* Waits until no request of the round is active (headers_only: until every first fragment
 * has been sent and received). The active requests are listed once, then polled in windows
 * of DPT_POLL_MAX that move on when one completes nothing; the list drops what completed. */
static dpt_status hello_wait(dpt_comm *c, const hello_layout *L, dpt_req *recv, size_t nf_recv,
                             size_t nf_send, int headers_only, double *deadline, dpt_what *wt) {
  dpt_req **list = L->list;
  size_t m = 0, at = 0;
  double since = 0.0; /* when the current quiet spell began (0: not yet read) */
  /* Headers: ours delivered (a threads-transport send completes when the peer takes it) and
   * theirs received. Only the fragments posted are looked at (a slot has room for more). */
  if (headers_only) nf_recv = nf_send = 1;
  for (int r = 0; r < c->size; ++r) {
    dpt_req *rq = &recv[(size_t)r * L->maxf], *sq = &L->send[(size_t)r * L->maxf];
    for (size_t j = 0; j < nf_recv; ++j)
      if (rq[j].active) list[m++] = &rq[j];
    for (size_t j = 0; j < nf_send; ++j)
      if (sq[j].active) list[m++] = &sq[j];
  }
  while (m > 0) {
    if (at >= m) at = 0;
    const int w = m - at < DPT_POLL_MAX ? (int)(m - at) : DPT_POLL_MAX;
    int ndone = 0;
    dpt_status st = c->tp->poll(c, list + at, w, 0, 0.0, 0.0, &ndone);
    if (st == DPT_OK && ndone == 0) {
      /* The clock is read only when a pass completes nothing. */
      double now = dpt_now();
      if (*deadline == 0.0) *deadline = now + c->opt.timeout_s;
      if (since == 0.0) since = now;
      if (now >= *deadline) return hello_timeout(c, L, recv, wt);
      /* More requests than one window: wake up often to look at the others. */
      double until = ((size_t)w<m && * deadline> now + 1e-3) ? now + 1e-3 : *deadline;
      st = c->tp->poll(c, list + at, w, 1, until, since, &ndone);
      if (ndone == 0) at += (size_t)w;
    }
    if (st != DPT_OK) return st;
    if (ndone > 0) since = 0.0;
    /* Drop the completed: this window's, and with several windows any other's too, which a
     * transport that moves every channel on each poll (shared memory) may have completed
     * meanwhile without counting them (they were not in the window it was given). */
    if (ndone > 0 || m > DPT_POLL_MAX) {
      size_t k = 0;
      for (size_t i = 0; i < m; ++i)
        if (list[i]->active) list[k++] = list[i];
      m = k;
    }
  }
  return DPT_OK;
}

/* Posts the continuation-fragment receives of the ranks expected to send `nf_recv`
 * fragments; the other ranks' are marked inactive (hello_wait looks at nf_recv fragments of
 * every rank). */
static dpt_status hello_expect(dpt_comm *c, const hello_layout *L, int set, size_t nf_recv,
                               int expect_root, int cont_tag) {
  dpt_status st = DPT_OK;
  for (int r = 0; r < c->size && st == DPT_OK; ++r) {
    const int expected = r != c->rank && (expect_root < 0 || r == expect_root);
    for (size_t j = 1; j < nf_recv && st == DPT_OK; ++j) {
      if (expected)
        st = hello_post_one(c, L, set, r, j, cont_tag);
      else
        L->recv[set][(size_t)r * L->maxf + j].active = 0;
    }
  }
  return st;
}

/* Copies our header and payload into our slot and sends it to every other rank in nf_send
 * fragments (the first on the hello tag, the rest on the collective's data tag). */
static dpt_status hello_send(dpt_comm *c, const hello_layout *L, int set, const dpt_hello *mine,
                             const void *data, size_t nf_send, int cont_tag) {
  unsigned char *sendmsg = hello_slot(c, L, set, c->rank);
  const size_t bytes = sizeof *mine + mine->payload;
  memcpy(sendmsg, mine, sizeof *mine);
  if (mine->payload) memcpy(sendmsg + sizeof *mine, data, mine->payload);
  dpt_status st = DPT_OK;
  for (int r = 0; r < c->size && st == DPT_OK; ++r) {
    for (size_t j = 0; j < nf_send && st == DPT_OK; ++j) {
      dpt_req *q = &L->send[(size_t)r * L->maxf + j];
      if (r == c->rank) {
        q->active = 0;
        continue;
      }
      memset(q, 0, sizeof *q);
      q->peer = r;
      q->seq = mine->seq;
      q->tag = j == 0 ? DPT_TAG_HELLO : cont_tag;
      q->buf = sendmsg + j * L->frag;
      q->bytes = bytes - j * L->frag < L->frag ? bytes - j * L->frag : L->frag;
      st = c->tp->isend(c, q);
    }
  }
  return st;
}

/* Points h[r] at rank r's received header and payload[r] at its payload; a first fragment
 * that is not a well-formed header of this size is a mismatch. */
static dpt_status hello_headers(const dpt_comm *c, const hello_layout *L, int set,
                                const dpt_hello **h, const void **payload, dpt_what *wt) {
  for (int r = 0; r < c->size; ++r) {
    const dpt_req *q = &L->recv[set][(size_t)r * L->maxf];
    h[r] = (const dpt_hello *)(const void *)hello_slot(c, L, set, r);
    payload[r] = (const unsigned char *)h[r] + sizeof(dpt_hello);
    if (r == c->rank) continue;
    const size_t whole = sizeof *h[r] + h[r]->payload;
    if (q->err != DPT_OK || q->got < sizeof *h[r] || h[r]->magic != DPT_HELLO_MAGIC ||
        h[r]->payload > L->cap - sizeof *h[r] || q->got != (whole < L->frag ? whole : L->frag))
      return dpt_set_error(DPT_ERR_MISMATCH,
                           "%s: rank %d sent a malformed or oversized header (%zu bytes): it "
                           "runs another version or other options",
                           dpt_what_str(wt), r, q->got);
  }
  return DPT_OK;
}

dpt_status dpt_hello_round(dpt_comm *c, const dpt_hello *mine, const void *data, size_t expect,
                           int expect_root, dpt_what *wt, const void **payload) {
  hello_layout L;
  dpt_status st = hello_scratch(c, wt, &L);
  if (st != DPT_OK) return st;
  const int set = c->hello_set;
  if (!c->hello_posted && (st = hello_post(c, &L, set)) != DPT_OK)
    return dpt_error_context(st, "%s", dpt_what_str(wt));
  c->hello_posted = 0; /* they are this round's now */
  const int cont_tag = dpt_comm_data_tag(c, mine->seq);
  const size_t nf_recv = frags_of(&L, sizeof *mine + expect);
  const size_t nf_send = frags_of(&L, sizeof *mine + mine->payload);
  st = hello_expect(c, &L, set, nf_recv, expect_root, cont_tag);
  if (st == DPT_OK) st = hello_send(c, &L, set, mine, data, nf_send, cont_tag);

  /* Headers first: every rank then reaches the same verdict without waiting for payloads
   * that a disagreeing peer may never send. */
  double deadline = 0.0;
  dpt_req *recv = L.recv[set];
  if (st == DPT_OK) st = hello_wait(c, &L, recv, nf_recv, nf_send, 1, &deadline, wt);
  const dpt_hello *hdr[DPT_POLL_MAX];
  const dpt_hello **h = hdr;
  if (st == DPT_OK && c->size > DPT_POLL_MAX) {
    h = malloc((size_t)c->size * sizeof *h);
    if (!h) st = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: no memory", dpt_what_str(wt));
  }
  int judged = 0;
  if (st == DPT_OK) st = hello_headers(c, &L, set, h, payload, wt);
  if (st == DPT_OK) {
    st = judge(c, h, wt);
    judged = 1;
  }
  if (st == DPT_OK) st = hello_wait(c, &L, recv, nf_recv, nf_send, 0, &deadline, wt);
  if (h != hdr) free(h);
  if (st != DPT_OK) hello_cancel(c, &L, set, 1);
  /* Unless a peer is missing (the communicator is then broken anyway), the next round's
   * receives go up now, into the other set. */
  if (st == DPT_OK || judged) {
    c->hello_set = set ^ 1;
    if (hello_post(c, &L, c->hello_set) == DPT_OK) c->hello_posted = 1;
  }
  return st;
}
