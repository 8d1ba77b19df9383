/* The hello round: the desync check, arrival, and the inline payloads of small collectives.
 *
 * Every rank gathers every rank's 80-byte header (sequence number, operation, count, dtype,
 * algorithm, root, chunk sizes) and the inline payloads it needs. Every rank sees every
 * header, so all reach the same verdict: a disagreement is DPT_ERR_MISMATCH everywhere
 * (nothing else has moved), and a header that does not arrive before the deadline is
 * DPT_ERR_TIMEOUT naming the ranks not heard from. Headers use one fixed tag so that a rank
 * one collective ahead is matched and seen as a mismatch instead of waiting for ever; data
 * messages use a tag derived from the sequence number so that leftovers of a failed
 * collective never match a later one.
 *
 * Small groups (N <= hello_flat_max, 4 by default): all-to-all, header and payload in one
 * message per peer.
 *
 *   rank r:  post receives (slot s of set k) --> send header + payload to every s != r
 *            wait for every header --> judge (same verdict everywhere) --> wait for payloads
 *            post the next round's header receives into set k ^ 1
 *
 *   Cost: one round of 2(N-1) small messages per rank (N-1 in flight each way at once).
 *
 * Larger groups: dissemination, in two phases of K = ceil(log2 N) rounds. In round k rank r
 * sends what it has gathered, the entries of ranks r, r-1, .., r-cnt_k+1 with
 * cnt_k = min(2^k, N - 2^k), to rank r + 2^k, and receives the same from rank r - 2^k (mod N).
 * After K rounds every rank holds all N entries. N = 5, the ranks rank 0 holds:
 *
 *   round  distance  0 sends to  0 receives from  0 then holds
 *     0       1          1             4           0 4
 *     1       2          2             3           0 4 3 2
 *     2       4          4             1           0 4 3 2 1      (cnt_2 = 1)
 *
 * Phase 1 gathers the headers (hello tag; sizes depend only on N, so they are known to both
 * sides before anything arrives), then every rank judges. Phase 2, only when the verdict is
 * OK, gathers the inline payloads the same way (data tag): each round's message holds the
 * payloads of the entries it covers, so `direct` and allgather move every payload and a
 * broadcast only the root's (empty messages are not sent). Its sizes come from the headers,
 * which every rank has checked against its own call.
 *
 *   Cost: K messages sent per phase and rank, at most 2K in all; bytes sent per rank
 *   (N-1) * 80 for the headers plus (N-1) payloads (all-to-all moves the same bytes), the
 *   largest message (N/2) entries. Messages longer than the transport's eager size go in
 *   pieces of that size.
 *
 * A rank that does not enter holds up the ranks that relay its header, so the ranks a rank
 * has no header from at its deadline are a superset of the missing ones. To tell them apart,
 * a rank that times out sends every other rank a note and collects theirs for a grace period
 * (failure path only: N-1 small messages each way): those it has no header from but a note
 * from entered; the others are named as not having entered.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/engine/hello.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/size.h"
#include "collectives/common/comm_struct.h"
#include "collectives/transports/transport.h"
#include "collectives/common/comm_util.h"

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

/* Cancels the receives posted for the next round. */
static void flat_unpost(dpt_comm *c) {
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

/* One pass over the window of list[0..*m) that begins at *at: polls it, and when nothing
 * completes blocks until something does (briefly when there are other windows to look at,
 * then moves on to the next window). The deadline is set on the first quiet pass; *expired = 1
 * once it has passed. Drops the completed requests from the list. */
static dpt_status poll_pass(dpt_comm *c, dpt_req **list, size_t *m, size_t *at, double *since,
                            double *deadline, int *expired) {
  *expired = 0;
  if (*at >= *m) *at = 0;
  const int w = *m - *at < DPT_POLL_MAX ? (int)(*m - *at) : DPT_POLL_MAX;
  int ndone = 0;
  dpt_status st = c->tp->poll(c, list + *at, w, 0, 0.0, 0.0, &ndone);
  if (st == DPT_OK && ndone == 0) {
    /* The clock is read only when a pass completes nothing. */
    double now = dpt_now();
    if (*deadline == 0.0) *deadline = now + c->opt.timeout_s;
    if (*since == 0.0) *since = now;
    if (now >= *deadline) {
      *expired = 1;
      return DPT_OK;
    }
    /* More requests than one window: wake up often to look at the others. */
    double until = ((size_t)w<*m && * deadline> now + 1e-3) ? now + 1e-3 : *deadline;
    st = c->tp->poll(c, list + *at, w, 1, until, *since, &ndone);
    if (ndone == 0) *at += (size_t)w;
  }
  if (st != DPT_OK) return st;
  if (ndone > 0) *since = 0.0;
  /* Drop the completed: this window's, and with several windows any other's too, which a
   * transport that moves every channel on each poll (shared memory) may have completed
   * meanwhile without counting them (they were not in the window it was given). */
  if (ndone > 0 || *m > DPT_POLL_MAX) {
    size_t k = 0;
    for (size_t i = 0; i < *m; ++i)
      if (list[i]->active) list[k++] = list[i];
    *m = k;
  }
  return DPT_OK;
}

/* Waits until no request of the round is active (headers_only: until every first fragment
 * has been sent and received). The active requests are listed once, then polled in windows
 * of DPT_POLL_MAX that move on when one completes nothing. */
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
    int expired = 0;
    dpt_status st = poll_pass(c, list, &m, &at, &since, deadline, &expired);
    if (st != DPT_OK) return st;
    if (expired) return hello_timeout(c, L, recv, wt);
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

static dpt_status flat_round(dpt_comm *c, const dpt_hello *mine, const void *data, size_t expect,
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
  c->hello_msgs = (uint64_t)(c->size - 1);

  /* Headers first: every rank then reaches the same verdict without waiting for payloads
   * that a disagreeing peer may never send. */
  double deadline = 0.0;
  dpt_req *recv = L.recv[set];
  if (st == DPT_OK) st = hello_wait(c, &L, recv, nf_recv, nf_send, 1, &deadline, wt);
  const dpt_hello *hdr[DPT_POLL_MAX] = {0};
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

/* ---- dissemination: N > hello_flat_max ------------------------------------------------------ */

/* Rounds of the dissemination pattern: ceil(log2 size). */
#define DISS_MAX_ROUNDS 32

/* Scratch layout of the dissemination round. Entries are kept by offset: entry j of a buffer
 * belongs to rank (rank - j) mod N, so that what a rank sends in round k (its entries
 * [0, cnt_k)) lands as entries [2^k, 2^k + cnt_k) of its partner, both contiguous: nothing is
 * packed or unpacked. Headers: two sets of N entries of 80 bytes (the next round's receives are
 * posted into the other set). Payloads: one buffer, entries packed (pos[] gives where each
 * begins), filled only after the verdict. Requests per round k start at hfirst[k] (header
 * fragments) and pfirst[k] (payload fragments, room for cnt_k full payloads). */
typedef struct diss_layout {
  int rounds;  /* ceil(log2 N) */
  size_t cap;  /* largest inline payload of one rank */
  size_t frag; /* bytes of one fragment */
  size_t hfirst[DISS_MAX_ROUNDS + 1], pfirst[DISS_MAX_ROUNDS + 1];
  unsigned char *hdr[2]; /* [N * 80] headers by offset, per set */
  unsigned char *pay;    /* [N * cap] payloads by offset, packed */
  size_t *hpos, *ppos;   /* [N + 1] byte where entry j begins, headers and payloads */
  dpt_req *hrecv[2], *hsend, *precv, *psend;
  dpt_req **list; /* room for every request of one phase */
} diss_layout;

/* Entries that move in round k: cnt_k = min(2^k, N - 2^k). */
static size_t diss_cnt(int size, int k) {
  const size_t d = (size_t)1 << k, n = (size_t)size;
  return d < n - d ? d : n - d;
}

static size_t diss_frags(const diss_layout *L, size_t bytes) {
  return bytes / L->frag + (bytes % L->frag != 0);
}

static size_t align64(size_t x) {
  return (x + 63) & ~(size_t)63;
}

static dpt_status diss_scratch(dpt_comm *c, dpt_what *wt, diss_layout *L) {
  const size_t n = (size_t)c->size;
  L->rounds = 0;
  while (((size_t)1 << L->rounds) < n)
    ++L->rounds;
  L->cap = dpt_comm_inline_cap(c->size);
  L->frag = c->eager_bytes;
  L->hfirst[0] = L->pfirst[0] = 0;
  int ok = 1;
  for (int k = 0; k < L->rounds && ok; ++k) {
    size_t pb = 0;
    const size_t cnt = diss_cnt(c->size, k);
    ok = dpt_mul_ok(cnt, L->cap, &pb);
    L->hfirst[k + 1] = L->hfirst[k] + diss_frags(L, cnt * sizeof(dpt_hello));
    L->pfirst[k + 1] = L->pfirst[k] + diss_frags(L, pb);
  }
  const size_t hf = L->hfirst[L->rounds], pf = L->pfirst[L->rounds];
  const size_t nreq = 3 * hf + 2 * pf, nlist = 2 * (hf > pf ? hf : pf);
  size_t hdr, pay, pos, reqs, need = 0;
  if (!ok || !dpt_mul_ok(n, sizeof(dpt_hello), &hdr) || !dpt_mul_ok(n, L->cap, &pay) ||
      !dpt_mul_ok(n + 1, sizeof(size_t), &pos) || !dpt_mul_ok(nreq, sizeof(dpt_req), &reqs) ||
      !dpt_add_ok(align64(reqs), align64(nlist * sizeof(dpt_req *)), &need) ||
      !dpt_add_ok(need, 2 * align64(hdr) + align64(pay) + 2 * align64(pos), &need))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: hello buffers overflow", dpt_what_str(wt));
  /* The size depends only on the group size: allocated once, never moved (requests live in
   * it while posted). */
  dpt_status st = dpt_comm_scratch(&c->hello_buf, &c->hello_bytes, need, wt);
  if (st != DPT_OK) return st;
  unsigned char *p = c->hello_buf;
  dpt_req *rq = (dpt_req *)(void *)p;
  L->hrecv[0] = rq;
  L->hrecv[1] = rq + hf;
  L->hsend = rq + 2 * hf;
  L->precv = rq + 3 * hf;
  L->psend = rq + 3 * hf + pf;
  p += align64(reqs);
  L->list = (dpt_req **)(void *)p;
  p += align64(nlist * sizeof(dpt_req *));
  L->hdr[0] = p;
  L->hdr[1] = p + align64(hdr);
  p += 2 * align64(hdr);
  L->pay = p;
  p += align64(pay);
  L->hpos = (size_t *)(void *)p;
  L->ppos = (size_t *)(void *)(p + align64(pos));
  for (size_t j = 0; j <= n; ++j)
    L->hpos[j] = j * sizeof(dpt_hello);
  return DPT_OK;
}

/* One phase of the dissemination (headers, or payloads): its buffer by offset, where each
 * entry begins, its requests and their tag. */
typedef struct diss_phase {
  unsigned char *buf;
  const size_t *pos;
  dpt_req *recv, *send;
  const size_t *first; /* round k's requests: [first[k], first[k + 1]) */
  int tag;
  uint64_t seq;
} diss_phase;

/* Bytes of round k's message: the one this rank sends (its entries [0, cnt_k)), or the one
 * it receives (entries [2^k, 2^k + cnt_k), landing at *recv_at). */
static size_t diss_bytes(const dpt_comm *c, const diss_phase *P, int k, int send, size_t *recv_at) {
  const size_t d = (size_t)1 << k, cnt = diss_cnt(c->size, k);
  if (recv_at) *recv_at = P->pos[d];
  return send ? P->pos[cnt] - P->pos[0] : P->pos[d + cnt] - P->pos[d];
}

static int diss_from(const dpt_comm *c, int k) {
  return (int)(((size_t)c->rank + (size_t)c->size - ((size_t)1 << k)) % (size_t)c->size);
}

static int diss_to(const dpt_comm *c, int k) {
  return (int)(((size_t)c->rank + ((size_t)1 << k)) % (size_t)c->size);
}

/* Posts (or, send = 1, sends) the fragments of round k: the first fragment-sized pieces of
 * the message, the last one shorter. */
static dpt_status diss_post(dpt_comm *c, const diss_layout *L, const diss_phase *P, int k,
                            int send) {
  size_t at = 0;
  const size_t bytes = diss_bytes(c, P, k, send, &at);
  const size_t nf = diss_frags(L, bytes);
  dpt_req *q = (send ? P->send : P->recv) + P->first[k];
  unsigned char *base = P->buf + (send ? 0 : at);
  for (size_t j = 0; j < nf; ++j, ++q) {
    memset(q, 0, sizeof *q);
    q->is_recv = !send;
    q->peer = send ? diss_to(c, k) : diss_from(c, k);
    q->tag = P->tag;
    q->seq = P->seq;
    q->buf = base + j * L->frag;
    q->bytes = bytes - j * L->frag < L->frag ? bytes - j * L->frag : L->frag;
    dpt_status st = send ? c->tp->isend(c, q) : c->tp->irecv(c, q);
    if (st != DPT_OK) return st;
  }
  return DPT_OK;
}

/* 1 when round k's message has been received in full (nothing of it is pending). */
static int diss_received(const dpt_comm *c, const diss_layout *L, const diss_phase *P, int k) {
  const size_t nf = diss_frags(L, diss_bytes(c, P, k, 0, NULL));
  for (size_t j = 0; j < nf; ++j)
    if (P->recv[P->first[k] + j].active) return 0;
  return 1;
}

/* Cancels every request of the phase still pending. */
static void diss_cancel(dpt_comm *c, const diss_layout *L, const diss_phase *P) {
  for (int k = 0; k < L->rounds; ++k) {
    const size_t nr = diss_frags(L, diss_bytes(c, P, k, 0, NULL));
    const size_t ns = diss_frags(L, diss_bytes(c, P, k, 1, NULL));
    for (size_t j = 0; j < nr || j < ns; ++j) {
      dpt_req *r = &P->recv[P->first[k] + j], *s = &P->send[P->first[k] + j];
      if (j < nr && r->active) c->tp->cancel(c, r);
      if (j < ns && s->active) c->tp->cancel(c, s);
    }
  }
}

/* The header phase of set `set` (headers by offset, hello tag) for collective `seq`. */
static diss_phase diss_headers(const diss_layout *L, int set, uint64_t seq) {
  diss_phase P = {L->hdr[set], L->hpos, L->hrecv[set], L->hsend, L->hfirst, DPT_TAG_HELLO, seq};
  return P;
}

/* How long a rank that timed out collects the other ranks' notes: a quarter of the timeout,
 * at most 1 s. */
static double diss_grace(const dpt_comm *c) {
  const double t = c->opt.timeout_s / 4;
  return t < 1.0 ? t : 1.0;
}

/* After a header phase timed out: sends every other rank a note (this collective's number,
 * on the tag no collective uses, tag_ub) and collects theirs for a grace period of a quarter
 * of the timeout (at most 1 s), so that among the ranks not heard from, those that entered
 * (and wait, held up like this one) can be told from those that did not. Ranks that time out
 * about together exchange notes; a rank that entered much later sends its note too late and
 * is named with the missing. Sets note[r] = 1 for every rank whose note came; 0 when the
 * notes cannot be sent (no memory, transport error: the caller names all it lacks). */
static int diss_notes(dpt_comm *c, uint64_t seq, unsigned char *note) {
  const size_t n = (size_t)c->size;
  dpt_req *q = calloc(2 * n, sizeof *q);
  dpt_req **list = malloc(2 * n * sizeof *list);
  uint64_t *got = calloc(n + 1, sizeof *got);
  int ok = q && list && got;
  if (ok) got[n] = seq;
  size_t m = 0;
  for (size_t r = 0; r < n && ok; ++r) {
    if (r == (size_t)c->rank) continue;
    for (int send = 0; send < 2 && ok; ++send) {
      dpt_req *x = &q[2 * r + (size_t)send];
      x->is_recv = !send;
      x->peer = (int)r;
      x->tag = c->tag_ub;
      x->seq = seq;
      x->buf = send ? (void *)&got[n] : (void *)&got[r];
      x->bytes = sizeof *got;
      ok = (send ? c->tp->isend(c, x) : c->tp->irecv(c, x)) == DPT_OK;
      if (ok) list[m++] = x;
    }
  }
  double until = dpt_now() + diss_grace(c), since = 0.0;
  size_t at = 0;
  int expired = 0;
  while (ok && m > 0 && !expired)
    ok = poll_pass(c, list, &m, &at, &since, &until, &expired) == DPT_OK;
  for (size_t r = 0; r < n; ++r) {
    note[r] =
        ok && r != (size_t)c->rank && q[2 * r].done && q[2 * r].got == sizeof *got && got[r] == seq;
    for (size_t k = 2 * r; q && k < 2 * r + 2; ++k)
      if (q[k].active) c->tp->cancel(c, &q[k]);
  }
  free(q);
  free(list);
  free(got);
  return ok;
}

/* Appends the ranks r with set[r] as runs "a-b" in rank order (a round's entries are
 * consecutive ranks, so there are few runs); returns how many. */
static int rank_runs(char *out, size_t size, const unsigned char *set, int n) {
  size_t len = 0;
  int count = 0, run = -1;
  out[0] = '\0';
  for (int r = 0; r <= n; ++r) {
    if (r < n && set[r]) {
      ++count;
      if (run < 0) run = r;
      continue;
    }
    if (run < 0) continue;
    const char *sep = len ? ", " : "";
    if (len < size - 32)
      len += (size_t)(run == r - 1 ? snprintf(out + len, size - len, "%s%d", sep, run)
                                   : snprintf(out + len, size - len, "%s%d-%d", sep, run, r - 1));
    else if (len < size - 6)
      len += (size_t)snprintf(out + len, size - len, ", ...");
    run = -1;
  }
  return count;
}

/* Names the ranks that did not enter (headers), or what is still pending (payloads). Entry j
 * came in round floor(log2 j), so the ranks not heard from are those of the rounds not yet
 * received; the notes (diss_notes) tell which of them entered; the first round not received
 * is the partner waited for. */
static dpt_status diss_timeout(dpt_comm *c, const diss_layout *L, const diss_phase *P, int headers,
                               dpt_what *wt) {
  int waited = -1, wait_round = -1;
  int got[DISS_MAX_ROUNDS];
  for (int k = 0; k < L->rounds; ++k) {
    got[k] = diss_received(c, L, P, k);
    if (!got[k] && waited < 0) {
      waited = diss_from(c, k);
      wait_round = k;
    }
  }
  if (waited < 0)
    return dpt_set_error(DPT_ERR_TIMEOUT,
                         "%s: timed out after %.3g s: every %s arrived, but a peer did not take "
                         "ours",
                         dpt_what_str(wt), c->opt.timeout_s, headers ? "header" : "payload");
  if (!headers)
    return dpt_set_error(DPT_ERR_TIMEOUT,
                         "%s: timed out after %.3g s: every header arrived but not all of the "
                         "data (waiting for rank %d, round %d of %d)",
                         dpt_what_str(wt), c->opt.timeout_s, waited, wait_round + 1, L->rounds);
  const size_t n = (size_t)c->size;
  unsigned char *lack = calloc(3 * n, 1), *note = lack + n, *absent = lack + 2 * n;
  if (!lack)
    return dpt_set_error(DPT_ERR_TIMEOUT, "%s: timed out after %.3g s waiting for rank %d",
                         dpt_what_str(wt), c->opt.timeout_s, waited);
  for (size_t r = 0; r < n; ++r) {
    const size_t j = ((size_t)c->rank + n - r) % n;
    int k = 0;
    while (j >> (k + 1))
      ++k;
    lack[r] = j != 0 && !got[k];
  }
  const int noted = diss_notes(c, P->seq, note);
  for (size_t r = 0; r < n; ++r)
    absent[r] = lack[r] && !note[r];
  char who[256], held[256];
  const int nabsent = rank_runs(who, sizeof who, absent, c->size);
  const int nlack = rank_runs(held, sizeof held, lack, c->size);
  dpt_status st;
  const double grace = diss_grace(c);
  if (noted && nabsent > 0 && nabsent == nlack)
    st = dpt_set_error(DPT_ERR_TIMEOUT,
                       "%s: timed out after %.3g s: rank%s %s did not enter the collective",
                       dpt_what_str(wt), c->opt.timeout_s, nabsent == 1 ? "" : "s", who);
  else if (noted && nabsent > 0)
    st = dpt_set_error(DPT_ERR_TIMEOUT,
                       "%s: timed out after %.3g s: rank%s %s did not enter the collective, or "
                       "entered over %.2g s after this rank (no header from %d ranks, %s: the "
                       "others entered and wait; this rank waited for rank %d, round %d of %d)",
                       dpt_what_str(wt), c->opt.timeout_s, nabsent == 1 ? "" : "s", who, grace,
                       nlack, held, waited, wait_round + 1, L->rounds);
  else
    /* Every rank not heard from answered (it entered, late), or the notes could not be sent:
     * name them all. */
    st = dpt_set_error(DPT_ERR_TIMEOUT,
                       "%s: timed out after %.3g s: no header from %d rank%s (%s): at least "
                       "one of them entered late or not at all (this rank waited for rank %d, "
                       "round %d of %d)",
                       dpt_what_str(wt), c->opt.timeout_s, nlack, nlack == 1 ? "" : "s", held,
                       waited, wait_round + 1, L->rounds);
  free(lack);
  return st;
}

/* Runs one phase: the receives of every round are up from the start (posted here unless
 * `posted`), round k's message goes out once rounds 0 .. k-1 have arrived, and the phase
 * ends when everything is received and every send has been taken. A received fragment of
 * another size than expected is a mismatch. */
static dpt_status diss_run(dpt_comm *c, const diss_layout *L, const diss_phase *P, int posted,
                           int headers, double *deadline, dpt_what *wt) {
  const int K = L->rounds;
  dpt_status st = DPT_OK;
  for (int k = 0; k < K && !posted && st == DPT_OK; ++k)
    st = diss_post(c, L, P, k, 0);
  int next = 0; /* the next round to send */
  size_t at = 0;
  double since = 0.0;
  while (st == DPT_OK) {
    while (st == DPT_OK && next < K && (next == 0 || diss_received(c, L, P, next - 1))) {
      if (diss_bytes(c, P, next, 1, NULL) > 0) ++c->hello_msgs;
      st = diss_post(c, L, P, next++, 1);
    }
    if (st != DPT_OK) break;
    size_t m = 0;
    for (int k = 0; k < K; ++k) {
      const size_t nr = diss_frags(L, diss_bytes(c, P, k, 0, NULL));
      const size_t ns = k < next ? diss_frags(L, diss_bytes(c, P, k, 1, NULL)) : 0;
      for (size_t j = 0; j < nr; ++j)
        if (P->recv[P->first[k] + j].active) L->list[m++] = &P->recv[P->first[k] + j];
      for (size_t j = 0; j < ns; ++j)
        if (P->send[P->first[k] + j].active) L->list[m++] = &P->send[P->first[k] + j];
    }
    if (m == 0) break;
    int expired = 0;
    st = poll_pass(c, L->list, &m, &at, &since, deadline, &expired);
    if (st == DPT_OK && expired) st = diss_timeout(c, L, P, headers, wt);
  }
  if (st != DPT_OK) return st;
  for (int k = 0; k < K; ++k) {
    const size_t nf = diss_frags(L, diss_bytes(c, P, k, 0, NULL));
    for (size_t j = 0; j < nf; ++j) {
      const dpt_req *q = &P->recv[P->first[k] + j];
      if (q->err != DPT_OK || q->got != q->bytes)
        return dpt_set_error(DPT_ERR_MISMATCH,
                             "%s: rank %d sent a malformed or oversized hello message (%zu bytes "
                             "where %zu were expected): it runs another version or other options",
                             dpt_what_str(wt), q->peer, q->got, q->bytes);
    }
  }
  return DPT_OK;
}

/* Posts the header receives of every round into `set`, for the next collective. */
static dpt_status diss_prepost(dpt_comm *c, const diss_layout *L, int set) {
  const diss_phase P = diss_headers(L, set, c->seq); /* the next collective's */
  dpt_status st = DPT_OK;
  for (int k = 0; k < L->rounds && st == DPT_OK; ++k)
    st = diss_post(c, L, &P, k, 0);
  if (st != DPT_OK) diss_cancel(c, L, &P);
  return st;
}

/* The headers gathered (every rank's, rank order) are well formed (before the verdict) and,
 * once the calls agree (`sizes`), every rank's payload has the size the call implies:
 * `expect` bytes from every rank (expect_root < 0) or from expect_root only, nothing from the
 * others. Every rank sees the same headers, so all reach the same verdict. */
static dpt_status diss_check(const dpt_comm *c, const diss_layout *L, const dpt_hello *const *h,
                             int sizes, size_t expect, int expect_root, dpt_what *wt) {
  for (int r = 0; r < c->size; ++r) {
    const size_t want = expect_root < 0 || r == expect_root ? expect : 0;
    if (!sizes && (h[r]->magic != DPT_HELLO_MAGIC || h[r]->payload > L->cap))
      return dpt_set_error(DPT_ERR_MISMATCH,
                           "%s: rank %d sent a malformed or oversized header: it runs another "
                           "version or other options",
                           dpt_what_str(wt), r);
    if (sizes && h[r]->payload != want)
      return dpt_set_error(DPT_ERR_MISMATCH,
                           "%s: rank %d carries %llu bytes of inline data where %zu were "
                           "expected: the ranks' options differ",
                           dpt_what_str(wt), r, (unsigned long long)h[r]->payload, want);
  }
  return DPT_OK;
}

/* Headers by dissemination (every rank gathers every header in ceil(log2 N) rounds), the
 * verdict, then the inline payloads the same way, each round's message holding only the
 * entries that carry one. */
static dpt_status diss_round(dpt_comm *c, const dpt_hello *mine, const void *data, size_t expect,
                             int expect_root, dpt_what *wt, const void **payload) {
  diss_layout L;
  dpt_status st = diss_scratch(c, wt, &L);
  if (st != DPT_OK) return st;
  const int set = c->hello_set, n = c->size;
  const diss_phase H = diss_headers(&L, set, mine->seq);
  const int posted = c->hello_posted;
  c->hello_posted = 0; /* they are this round's now */
  c->hello_msgs = 0;
  memcpy(H.buf, mine, sizeof *mine);
  double deadline = 0.0;
  st = diss_run(c, &L, &H, posted, 1, &deadline, wt);
  if (st != DPT_OK && st != DPT_ERR_MISMATCH) {
    diss_cancel(c, &L, &H);
    return st;
  }
  const dpt_hello *hdr[DPT_POLL_MAX] = {0};
  const dpt_hello **h = hdr;
  if (st == DPT_OK && n > DPT_POLL_MAX) {
    h = malloc((size_t)n * sizeof *h);
    if (!h) st = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: no memory", dpt_what_str(wt));
  }
  if (st == DPT_OK) {
    for (int r = 0; r < n; ++r)
      h[r] = (const dpt_hello *)(const void *)(H.buf + L.hpos[(c->rank + n - r) % n]);
    st = diss_check(c, &L, h, 0, expect, expect_root, wt);
    if (st == DPT_OK) st = judge(c, h, wt);
    if (st == DPT_OK) st = diss_check(c, &L, h, 1, expect, expect_root, wt);
  }
  /* Every header phase message is in (or the verdict is out): the next round's receives go
   * up now, into the other set. */
  c->hello_set = set ^ 1;
  if (diss_prepost(c, &L, c->hello_set) == DPT_OK) c->hello_posted = 1;
  if (st == DPT_OK) {
    size_t *pos = L.ppos;
    pos[0] = 0;
    for (int j = 0; j < n; ++j)
      pos[j + 1] = pos[j] + h[(c->rank + n - j) % n]->payload;
    if (pos[n] > 0) {
      if (mine->payload) memcpy(L.pay, data, mine->payload);
      const diss_phase P = {
          L.pay, pos, L.precv, L.psend, L.pfirst, dpt_comm_data_tag(c, mine->seq), mine->seq};
      st = diss_run(c, &L, &P, 0, 0, &deadline, wt);
      if (st != DPT_OK) diss_cancel(c, &L, &P);
    }
    for (int r = 0; r < n; ++r)
      payload[r] = L.pay + pos[(c->rank + n - r) % n];
  }
  if (h != hdr) free(h);
  return st;
}

/* ---- entry points ------------------------------------------------------------------------ */

dpt_status dpt_hello_round(dpt_comm *c, const dpt_hello *mine, const void *data, size_t expect,
                           int expect_root, dpt_what *wt, const void **payload) {
  if (c->size <= c->hello_flat_max)
    return flat_round(c, mine, data, expect, expect_root, wt, payload);
  return diss_round(c, mine, data, expect, expect_root, wt, payload);
}

void dpt_hello_unpost(dpt_comm *c) {
  if (c->size <= c->hello_flat_max) {
    flat_unpost(c);
    return;
  }
  if (!c->hello_posted || !c->hello_buf) return;
  diss_layout L;
  if (diss_scratch(c, NULL, &L) != DPT_OK) return;
  const diss_phase H = diss_headers(&L, c->hello_set, c->seq);
  diss_cancel(c, &L, &H);
  c->hello_posted = 0;
}
