/* The communicator's public calls: options, the hello round, and the collectives' entry
 * points (argument checks, algorithm choice, staging of device buffers).
 *
 * The hello round opens a collective when the desync check is on (and is the whole algorithm
 * for `direct`, small allgathers, small broadcasts and the barrier): every rank sends every
 * other rank an 80-byte header (sequence number, operation, count, dtype, algorithm, root,
 * chunk sizes), followed by an inline payload when the collective is small enough, and
 * receives theirs. Every rank sees every header, so all reach the same verdict: a
 * disagreement is DPT_ERR_MISMATCH everywhere (nothing else has moved), and a header that
 * does not arrive before the deadline names exactly the ranks that are missing. Headers use
 * one fixed tag so that a rank one collective ahead is matched and seen as a mismatch instead
 * of waiting for ever; data messages use a tag derived from the sequence number so that
 * leftovers of a failed collective never match a later one.
 * Cost: one round of 2(N-1) small messages per rank (N-1 in flight each way at once).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend_impl.h"
#include "collectives/comm_impl.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/size.h"
#include "base/parse.h"

#define DPT_HELLO_MAGIC 0x48545044u /* "DPTH" */

enum {
  OP_ALLREDUCE = 1,
  OP_BROADCAST = 2,
  OP_ALLGATHER = 3,
  OP_BARRIER = 4,
  OP_REDUCE_SCATTER = 5,
  OP_ALLGATHER_SHARDS = 6
};
enum { HELLO_FAILED = 1 }; /* the sender failed before the collective (bad arguments) */

/* Fixed layout, 80 bytes, host byte order (ranks of one job share it). */
typedef struct dpt_hello {
  uint32_t magic;
  uint32_t op;
  uint64_t seq;
  uint64_t count; /* elements (allreduce), bytes (broadcast, allgather per rank), 0 (barrier) */
  uint32_t dtype;
  uint32_t algo;
  int32_t root;
  uint32_t flags;
  uint64_t piece, block;
  uint64_t payload; /* bytes of inline payload after the header */
  uint32_t uid;     /* the communicator's (dpt_comm.uid) */
  uint32_t reserved;
  uint64_t reserved2;
} dpt_hello;
_Static_assert(sizeof(dpt_hello) == 80, "hello header is 80 bytes");

/* ---- small shared helpers ----------------------------------------------------------------- */

dpt_status dpt_comm_scratch(unsigned char **buf, size_t *have, size_t bytes, dpt_what *what) {
  if (*have >= bytes) return DPT_OK;
  unsigned char *p = calloc(1, bytes); /* zeroed: request slots start inactive */
  if (!p)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes of scratch",
                         dpt_what_str(what), bytes);
  free(*buf);
  *buf = p;
  *have = bytes;
  return DPT_OK;
}

int dpt_comm_data_tag(const dpt_comm *c, uint64_t seq) {
  return 1 + (int)((seq + c->uid) % (uint64_t)(c->tag_ub - 1));
}

size_t dpt_dtype_size(dpt_comm_dtype dtype) {
  return dtype == DPT_COMM_F16 ? 2 : 4;
}

const char *dpt_dtype_name(dpt_comm_dtype dtype) {
  return dtype == DPT_COMM_F16 ? "float16" : dtype == DPT_COMM_F32 ? "float32" : "?";
}

size_t dpt_comm_inline_cap(int size) {
  if (size < 2) return 0;
  size_t cap = ((size_t)1 << 20) / (size_t)(size - 1);
  if (cap > ((size_t)64 << 10)) cap = (size_t)64 << 10;
  if (cap < 1024) cap = 1024;
  return cap;
}

/* ---- options ------------------------------------------------------------------------------ */

static const char *const algo_names[] = {"auto", "ring", "rd", "direct", "mpi"};

const char *dpt_allreduce_algo_name(dpt_allreduce_algo algo) {
  if ((unsigned)algo >= sizeof algo_names / sizeof *algo_names) return NULL;
  return algo_names[algo];
}

dpt_status dpt_allreduce_algo_parse(const char *name, dpt_allreduce_algo *out) {
  if (!name || !out)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_allreduce_algo_parse: NULL argument");
  for (unsigned i = 0; i < sizeof algo_names / sizeof *algo_names; ++i) {
    if (!strcmp(name, algo_names[i])) {
      *out = (dpt_allreduce_algo)i;
      return DPT_OK;
    }
  }
  return dpt_set_error(DPT_ERR_INVALID_ARG,
                       "unknown all-reduce algorithm '%s' (auto, ring, rd, direct, mpi)", name);
}

void dpt_comm_options_default(dpt_comm_options *o) {
  memset(o, 0, sizeof *o);
  o->timeout_s = 300.0;
  o->desync_check = 1;
  o->algo = DPT_ALLREDUCE_AUTO;
  /* Measured with bench/allreduce --algo (docs/performance.md, 2 ranks, one node): direct
   * wins up to 4 KiB, ties with rd and the ring at 16 KiB, and the ring (which moves half the
   * bytes, summed in place as they arrive) wins from 64 KiB; MPI_Allreduce nowhere. For more
   * ranks direct's traffic grows as (N-1) n (the limit bounds that), rd's as n log2(N)
   * against the ring's 2(N-1) latency steps: rd up to 16 KiB. */
  o->direct_max_bytes = (size_t)16 << 10;
  o->mpi_max_bytes = 0;
  o->rd_max_bytes = (size_t)16 << 10;
  /* 512 KiB blocks of 128 KiB pieces: the best host figures from 1 to 16 MiB, within 10 % of
   * 1 MiB blocks at 64 MiB, and device buffers 15 % faster than with 1 MiB blocks (their
   * staging slots stay in cache; 4 MiB blocks ran them at half the speed). */
  o->piece_bytes = (size_t)128 << 10;
  o->block_bytes = (size_t)512 << 10;
  o->staging = DPT_STAGING_AUTO;
}

static dpt_status check_options(const dpt_comm *c, const dpt_comm_options *o, const char *fn) {
  if (!(o->timeout_s > 0) || !isfinite(o->timeout_s))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: timeout_s %g is not a positive number", fn,
                         o->timeout_s);
  if (o->desync_check != 0 && o->desync_check != 1)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: desync_check %d is not 0 or 1", fn,
                         o->desync_check);
  if (!dpt_allreduce_algo_name(o->algo))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: algo %d is not a dpt_allreduce_algo", fn,
                         (int)o->algo);
  if (o->algo == DPT_ALLREDUCE_MPI && (!c || !c->tp->native_allreduce))
    return dpt_set_error(DPT_ERR_UNSUPPORTED,
                         "%s: algorithm 'mpi' needs the MPI transport (this one is %s)", fn,
                         c ? c->tp->name : "?");
  if (o->piece_bytes < 64 || o->piece_bytes > ((size_t)1 << 30))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: piece_bytes %zu outside [64, 1 GiB]", fn,
                         o->piece_bytes);
  if (o->block_bytes < o->piece_bytes)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: block_bytes %zu < piece_bytes %zu", fn,
                         o->block_bytes, o->piece_bytes);
  if (o->staging != DPT_STAGING_AUTO && o->staging != DPT_STAGING_INLINE &&
      o->staging != DPT_STAGING_THREAD)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: staging %d is not a dpt_staging_mode", fn,
                         (int)o->staging);
  return DPT_OK;
}

/* A whole string of bytes (dpt_parse_bytes with nothing after it). */
static int parse_bytes(const char *s, size_t *out) {
  const char *end;
  size_t v;
  if (!dpt_parse_bytes(s, &end, &v) || *end != '\0') return 0;
  *out = v;
  return 1;
}

static dpt_status env_bytes(const char *name, size_t *field) {
  const char *v = getenv(name);
  if (!v) return DPT_OK;
  if (!parse_bytes(v, field))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s='%s' is not a byte count (digits, optional K, M or G)", name, v);
  return DPT_OK;
}

/* The environment variables of comm.h over the defaults. */
static dpt_status options_from_env(dpt_comm_options *o) {
  const char *v;
  dpt_status st;
  if ((v = getenv("DPT_ALLREDUCE_ALGO")) != NULL) {
    st = dpt_allreduce_algo_parse(v, &o->algo);
    if (st != DPT_OK) return dpt_error_context(st, "DPT_ALLREDUCE_ALGO");
  }
  if ((st = env_bytes("DPT_ALLREDUCE_DIRECT_MAX", &o->direct_max_bytes)) != DPT_OK ||
      (st = env_bytes("DPT_ALLREDUCE_MPI_MAX", &o->mpi_max_bytes)) != DPT_OK ||
      (st = env_bytes("DPT_ALLREDUCE_RD_MAX", &o->rd_max_bytes)) != DPT_OK ||
      (st = env_bytes("DPT_COMM_PIECE", &o->piece_bytes)) != DPT_OK ||
      (st = env_bytes("DPT_COMM_BLOCK", &o->block_bytes)) != DPT_OK)
    return st;
  if ((v = getenv("DPT_COMM_TIMEOUT")) != NULL) {
    char *end;
    errno = 0;
    double t = strtod(v, &end);
    if (end == v || *end || errno || !(t > 0) || !isfinite(t))
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "DPT_COMM_TIMEOUT='%s' is not a positive number of seconds", v);
    o->timeout_s = t;
  }
  if ((v = getenv("DPT_COMM_DESYNC_CHECK")) != NULL) {
    if (strcmp(v, "0") && strcmp(v, "1"))
      return dpt_set_error(DPT_ERR_INVALID_ARG, "DPT_COMM_DESYNC_CHECK='%s' is not 0 or 1", v);
    o->desync_check = v[0] == '1';
  }
  if ((v = getenv("DPT_COMM_STAGING")) != NULL) {
    if (!strcmp(v, "auto"))
      o->staging = DPT_STAGING_AUTO;
    else if (!strcmp(v, "inline"))
      o->staging = DPT_STAGING_INLINE;
    else if (!strcmp(v, "thread"))
      o->staging = DPT_STAGING_THREAD;
    else
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "DPT_COMM_STAGING='%s' is not auto, inline or thread", v);
  }
  return DPT_OK;
}

dpt_status dpt_comm_init(dpt_comm *c, const dpt_transport *tp, void *impl, int rank, int size,
                         int tag_ub) {
  c->tp = tp;
  c->impl = impl;
  c->rank = rank;
  c->size = size;
  c->tag_ub = tag_ub;
  c->seq = 0;
  c->uid = 0;
  c->eager_bytes = SIZE_MAX; /* the transport lowers it */
  c->recv_reduce = 0;        /* the transport raises it */
  c->payload = calloc((size_t)size, sizeof *c->payload);
  if (!c->payload)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "communicator: %d payload pointers", size);
  dpt_comm_options_default(&c->opt);
  dpt_status st = options_from_env(&c->opt);
  if (st == DPT_OK) st = check_options(c, &c->opt, "environment");
  if (st != DPT_OK) {
    free(c->payload);
    c->payload = NULL;
  }
  return st;
}

dpt_status dpt_comm_get_options(const dpt_comm *c, dpt_comm_options *out) {
  if (!c || !out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_comm_get_options: NULL argument");
  *out = c->opt;
  return DPT_OK;
}

dpt_status dpt_comm_set_options(dpt_comm *c, const dpt_comm_options *o) {
  if (!c || !o) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_comm_set_options: NULL argument");
  dpt_status st = check_options(c, o, "dpt_comm_set_options");
  if (st == DPT_OK) c->opt = *o;
  return st;
}

dpt_status dpt_comm_set_timeout(dpt_comm *c, double seconds) {
  if (!c) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_comm_set_timeout: comm is NULL");
  dpt_comm_options o = c->opt;
  o.timeout_s = seconds;
  return dpt_comm_set_options(c, &o);
}

dpt_status dpt_comm_set_desync_check(dpt_comm *c, int on) {
  if (!c) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_comm_set_desync_check: comm is NULL");
  dpt_comm_options o = c->opt;
  o.desync_check = on ? 1 : 0;
  return dpt_comm_set_options(c, &o);
}

dpt_status dpt_comm_set_algo(dpt_comm *c, dpt_allreduce_algo algo) {
  if (!c) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_comm_set_algo: comm is NULL");
  dpt_comm_options o = c->opt;
  o.algo = algo;
  return dpt_comm_set_options(c, &o);
}

static void hello_unpost(dpt_comm *c);

/* ---- handles ------------------------------------------------------------------------------ */

void dpt_comm_destroy(dpt_comm *c) {
  if (!c) return;
  hello_unpost(c);
  free(c->hello_buf);
  free(c->slot_buf);
  free(c->payload);
  c->tp->destroy(c);
  free(c);
}

int dpt_comm_rank(const dpt_comm *c) {
  return c ? c->rank : -1;
}

int dpt_comm_size(const dpt_comm *c) {
  return c ? c->size : 0;
}

const char *dpt_comm_transport(const dpt_comm *c) {
  return c ? c->tp->name : "";
}

int dpt_comm_mpi_launched(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

#ifndef DPT_HAVE_MPI
int dpt_comm_mpi_compiled(void) {
  return 0;
}

dpt_status dpt_comm_create_mpi(const void *mpi_comm, dpt_comm **out) {
  (void)mpi_comm;
  if (out) *out = NULL;
  return dpt_set_error(DPT_ERR_UNSUPPORTED,
                       "dpt_comm_create_mpi: this dptrain was built without MPI "
                       "(install libopenmpi-dev and configure with -DDPT_WITH_MPI=ON)");
}
#endif

/* ---- algorithm choice ---------------------------------------------------------------------- */

static size_t payload_bytes(size_t count, dpt_comm_dtype dtype) {
  size_t b;
  return dpt_mul_ok(count, dpt_dtype_size(dtype), &b) ? b : SIZE_MAX;
}

dpt_allreduce_algo dpt_comm_pick_algo(const dpt_comm *c, size_t count, dpt_comm_dtype dtype) {
  if (!c) return DPT_ALLREDUCE_RING;
  const size_t bytes = payload_bytes(count, dtype);
  const size_t cap = dpt_comm_inline_cap(c->size);
  dpt_allreduce_algo a = c->opt.algo;
  if (a == DPT_ALLREDUCE_AUTO) {
    /* direct sends (N-1) payloads per rank: the limit bounds their sum. */
    size_t sent;
    if (bytes <= cap && dpt_mul_ok(bytes, (size_t)(c->size > 1 ? c->size - 1 : 1), &sent) &&
        sent <= c->opt.direct_max_bytes)
      return DPT_ALLREDUCE_DIRECT;
    if (c->tp->native_allreduce && bytes <= c->opt.mpi_max_bytes) return DPT_ALLREDUCE_MPI;
    if (bytes <= c->opt.rd_max_bytes) return DPT_ALLREDUCE_RD;
    return DPT_ALLREDUCE_RING;
  }
  /* `direct` carries the vector in the hello message: larger ones use rd. */
  if (a == DPT_ALLREDUCE_DIRECT && bytes > cap) return DPT_ALLREDUCE_RD;
  return a;
}

/* ---- the hello round ------------------------------------------------------------------------ */

static void describe(char *out, size_t n, const dpt_what *h) {
  if (h->op == OP_ALLREDUCE) {
    const char *algo = dpt_allreduce_algo_name((dpt_allreduce_algo)h->algo);
    snprintf(out, n, "allreduce #%llu (%llu x %s, %s)", (unsigned long long)h->seq,
             (unsigned long long)h->count, dpt_dtype_name((dpt_comm_dtype)h->dtype),
             algo ? algo : "?");
  } else if (h->op == OP_BROADCAST) {
    snprintf(out, n, "broadcast #%llu (%llu bytes from rank %d)", (unsigned long long)h->seq,
             (unsigned long long)h->count, (int)h->root);
  } else if (h->op == OP_ALLGATHER) {
    snprintf(out, n, "allgather #%llu (%llu bytes per rank)", (unsigned long long)h->seq,
             (unsigned long long)h->count);
  } else if (h->op == OP_REDUCE_SCATTER || h->op == OP_ALLGATHER_SHARDS) {
    snprintf(out, n, "%s #%llu (%llu x %s)",
             h->op == OP_REDUCE_SCATTER ? "reduce-scatter" : "allgather of shards",
             (unsigned long long)h->seq, (unsigned long long)h->count,
             dpt_dtype_name((dpt_comm_dtype)h->dtype));
  } else if (h->op == OP_BARRIER) {
    snprintf(out, n, "barrier #%llu", (unsigned long long)h->seq);
  } else {
    snprintf(out, n, "unknown operation %u #%llu", (unsigned)h->op, (unsigned long long)h->seq);
  }
}

const char *dpt_what_str(dpt_what *w) {
  if (!w) return "collective";
  if (!w->text[0]) describe(w->text, sizeof w->text, w);
  return w->text;
}

static dpt_what what_of(const dpt_hello *h) {
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
    if (h[r]->flags & HELLO_FAILED) {
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
    dpt_what w = what_of(h[r]);
    describe(d, sizeof d, &w);
    len += (size_t)snprintf(msg + len, sizeof msg - len, "%s rank %d: %s%s", r ? ";" : "", r, d,
                            (h[r]->flags & HELLO_FAILED) ? " [failed before the call]" : "");
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
static void hello_unpost(dpt_comm *c) {
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
    dpt_status st = c->tp->poll(c, list + at, w, 0, 0.0, &ndone);
    if (st == DPT_OK && ndone == 0) {
      /* The clock is read only when a pass completes nothing. */
      double now = dpt_now();
      if (*deadline == 0.0) *deadline = now + c->opt.timeout_s;
      if (now >= *deadline) return hello_timeout(c, L, recv, wt);
      /* More requests than one window: wake up often to look at the others. */
      double until = (size_t)w<m && * deadline> now + 1e-3 ? now + 1e-3 : *deadline;
      st = c->tp->poll(c, list + at, w, 1, until, &ndone);
      if (ndone == 0) at += (size_t)w;
    }
    if (st != DPT_OK) return st;
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

/* Exchanges headers and inline payloads with every rank: ours carries `mine->payload` bytes
 * of `data`; rank r's is expected to carry `expect` bytes (every rank when expect_root < 0,
 * else only expect_root). On success payload[r] points to rank r's payload (payload[rank] to
 * this rank's copy), valid until the next collective. */
static dpt_status hello_round(dpt_comm *c, const dpt_hello *mine, const void *data, size_t expect,
                              int expect_root, dpt_what *wt, const void **payload) {
  const int n = c->size;
  hello_layout L;
  dpt_status st = hello_scratch(c, wt, &L);
  if (st != DPT_OK) return st;
  const int set = c->hello_set;
  if (!c->hello_posted && (st = hello_post(c, &L, set)) != DPT_OK)
    return dpt_error_context(st, "%s", dpt_what_str(wt));
  c->hello_posted = 0; /* they are this round's now */
  dpt_req *recv = L.recv[set];
  const int cont_tag = dpt_comm_data_tag(c, mine->seq);

  /* The continuation fragments we expect (their slots are cleared: hello_wait looks at
   * nf_recv fragments of every rank), then our own message. */
  const size_t nf_recv = frags_of(&L, sizeof *mine + expect);
  for (int r = 0; r < n && st == DPT_OK; ++r) {
    const int expected = r != c->rank && (expect_root < 0 || r == expect_root);
    for (size_t j = 1; j < nf_recv && st == DPT_OK; ++j) {
      if (expected)
        st = hello_post_one(c, &L, set, r, j, cont_tag);
      else
        recv[(size_t)r * L.maxf + j].active = 0;
    }
  }
  unsigned char *sendmsg = hello_slot(c, &L, set, c->rank);
  const size_t bytes = sizeof *mine + mine->payload;
  const size_t nf_send = frags_of(&L, bytes);
  memcpy(sendmsg, mine, sizeof *mine);
  if (mine->payload) memcpy(sendmsg + sizeof *mine, data, mine->payload);
  for (int r = 0; r < n && st == DPT_OK; ++r) {
    for (size_t j = 0; j < nf_send && st == DPT_OK; ++j) {
      dpt_req *q = &L.send[(size_t)r * L.maxf + j];
      if (r == c->rank) {
        q->active = 0;
        continue;
      }
      memset(q, 0, sizeof *q);
      q->peer = r;
      q->seq = mine->seq;
      q->tag = j == 0 ? DPT_TAG_HELLO : cont_tag;
      q->buf = sendmsg + j * L.frag;
      q->bytes = bytes - j * L.frag < L.frag ? bytes - j * L.frag : L.frag;
      st = c->tp->isend(c, q);
    }
  }

  /* Headers first: every rank then reaches the same verdict without waiting for payloads
   * that a disagreeing peer may never send. */
  double deadline = 0.0;
  if (st == DPT_OK) st = hello_wait(c, &L, recv, nf_recv, nf_send, 1, &deadline, wt);
  const dpt_hello *hdr[DPT_POLL_MAX];
  const dpt_hello **h = hdr;
  if (st == DPT_OK && n > DPT_POLL_MAX) {
    h = malloc((size_t)n * sizeof *h);
    if (!h) st = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: no memory", dpt_what_str(wt));
  }
  int judged = 0;
  for (int r = 0; r < n && st == DPT_OK; ++r) {
    const dpt_req *q = &recv[(size_t)r * L.maxf];
    h[r] = (const dpt_hello *)(const void *)hello_slot(c, &L, set, r);
    payload[r] = (const unsigned char *)h[r] + sizeof(dpt_hello);
    if (r == c->rank) continue;
    if (q->err != DPT_OK || q->got < sizeof *h[r] || h[r]->magic != DPT_HELLO_MAGIC ||
        h[r]->payload > L.cap - sizeof *h[r] ||
        q->got != (sizeof *h[r] + h[r]->payload < L.frag ? sizeof *h[r] + h[r]->payload : L.frag))
      st = dpt_set_error(DPT_ERR_MISMATCH,
                         "%s: rank %d sent a malformed or oversized header (%zu bytes): it runs "
                         "another version or other options",
                         dpt_what_str(wt), r, q->got);
  }
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

/* ---- entry points ---------------------------------------------------------------------------- */

typedef struct coll {
  dpt_hello h;
  dpt_what w;
  int tag;
} coll;

/* Numbers the collective and describes it. */
static void coll_begin(dpt_comm *c, coll *k, uint32_t op, uint64_t count, dpt_comm_dtype dtype,
                       dpt_allreduce_algo algo, int root) {
  memset(&k->h, 0, sizeof k->h);
  k->h.magic = DPT_HELLO_MAGIC;
  k->h.op = op;
  k->h.seq = c->seq++;
  k->h.count = count;
  k->h.dtype = (uint32_t)dtype;
  k->h.algo = (uint32_t)algo;
  k->h.root = root;
  k->h.piece = c->opt.piece_bytes;
  k->h.block = c->opt.block_bytes;
  k->h.uid = c->uid;
  k->tag = dpt_comm_data_tag(c, k->h.seq);
  k->w = what_of(&k->h);
}

/* The hello round with `payload` bytes of `data`, expecting `expect` bytes from every rank
 * (from expect_root only when >= 0); c->payload[r] then points to rank r's. */
static dpt_status coll_hello(dpt_comm *c, coll *k, const void *data, size_t payload, size_t expect,
                             int expect_root) {
  k->h.payload = payload;
  return hello_round(c, &k->h, data, expect, expect_root, &k->w, c->payload);
}

/* This rank cannot take part (its message is set): with the desync check it still says
 * hello, flagged, so that the others fail at once instead of at the deadline. */
static dpt_status coll_fail(dpt_comm *c, coll *k, dpt_status st) {
  if (c->size == 1 || !c->opt.desync_check) return st;
  char own[1024];
  snprintf(own, sizeof own, "%s", dpt_last_error());
  k->h.flags = HELLO_FAILED;
  coll_hello(c, k, NULL, 0, 0, -1);
  return dpt_set_error(st, "%s", own);
}

static dpt_status check_comm(const dpt_comm *c, const char *fn) {
  if (!c) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: comm is NULL", fn);
  return DPT_OK;
}

static dpt_status check_dtype(dpt_comm_dtype dtype, const char *fn) {
  if (dtype != DPT_COMM_F32 && dtype != DPT_COMM_F16)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: dtype %d is not a dpt_comm_dtype", fn,
                         (int)dtype);
  return DPT_OK;
}

/* Checks a (buffer, byte offset, bytes) range. */
static dpt_status check_range(const dpt_buffer *buf, size_t offset, size_t bytes, const char *fn) {
  if (!buf) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: buf is NULL", fn);
  size_t end;
  if (!dpt_add_ok(offset, bytes, &end) || end > dpt_buffer_size(buf))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: bytes [%zu, %zu + %zu) outside the buffer of %zu bytes", fn, offset,
                         offset, bytes, dpt_buffer_size(buf));
  return DPT_OK;
}

/* Checks a (buffer, element offset, count) range; the byte offset and size in *off, *bytes. */
static dpt_status check_elems(const dpt_buffer *buf, size_t offset, size_t count,
                              dpt_comm_dtype dtype, size_t *off, size_t *bytes, const char *fn) {
  *off = *bytes = 0;
  if ((*bytes = payload_bytes(count, dtype)) == SIZE_MAX)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: count %zu overflows", fn, count);
  if (!dpt_mul_ok(offset, dpt_dtype_size(dtype), off))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: offset %zu overflows", fn, offset);
  return check_range(buf, *off, *bytes, fn);
}

/* A zero-copy host view of a device range, when staging is AUTO and the backend's memory is
 * host-addressable (CPU backend, CPU drivers, integrated GPUs): the collective then runs on it
 * as on host data, with no staging copy. *ptr = NULL otherwise. */
static dpt_status map_range(const dpt_comm *c, dpt_buffer *buf, size_t offset, size_t bytes,
                            void **ptr) {
  *ptr = NULL;
  if (c->opt.staging != DPT_STAGING_AUTO || bytes == 0) return DPT_OK;
  return dpt_buffer_map_host(buf, offset, bytes, ptr);
}

static dpt_status unmap_range(dpt_buffer *buf, void *ptr, dpt_status st) {
  dpt_status st2 = dpt_buffer_unmap_host(buf, ptr);
  return st != DPT_OK ? st : st2;
}

/* Runs a schedule over a staged device range: the stage's hooks drive the transfers. */
static dpt_status run_staged(dpt_comm *c, coll *k, dpt_buffer *buf, size_t offset, size_t bytes,
                             size_t esize, int download, int upload,
                             dpt_status (*run)(dpt_comm *, const dpt_ring_args *, const dpt_sched *,
                                               coll *, const void *),
                             const dpt_ring_args *args, const void *extra) {
  dpt_stage *stage = NULL;
  const size_t block = dpt_ring_block_elems(c, esize) * esize;
  dpt_status st = dpt_stage_create(c, buf, offset, bytes, block, download, upload, &stage);
  if (st != DPT_OK) return dpt_error_context(st, "%s", dpt_what_str(&k->w));
  dpt_sched hooks;
  dpt_stage_hooks(stage, &hooks);
  dpt_ring_args a = *args;
  a.data = NULL;
  a.block_ptr = dpt_stage_block_ptr;
  st = run(c, &a, &hooks, k, extra);
  dpt_status st2 = dpt_stage_finish(stage, st == DPT_OK);
  if (st != DPT_OK) return st;
  return st2 != DPT_OK ? dpt_error_context(st2, "%s", dpt_what_str(&k->w)) : DPT_OK;
}

static dpt_status run_ring(dpt_comm *c, const dpt_ring_args *a, const dpt_sched *hooks, coll *k,
                           const void *extra) {
  (void)extra;
  return dpt_ring_allreduce(c, a, hooks, k->tag, &k->w);
}

static dpt_status run_chain(dpt_comm *c, const dpt_ring_args *a, const dpt_sched *hooks, coll *k,
                            const void *extra) {
  (void)extra;
  return dpt_chain_broadcast(c, a, hooks, k->h.root, k->tag, &k->w);
}

/* The all-reduce on host data once the arguments are known good. */
static dpt_status allreduce_run(dpt_comm *c, coll *k, void *data, size_t count,
                                dpt_comm_dtype dtype, dpt_allreduce_algo algo) {
  dpt_status st = DPT_OK;
  if (c->opt.desync_check || algo == DPT_ALLREDUCE_DIRECT) {
    const size_t inl = algo == DPT_ALLREDUCE_DIRECT ? count * dpt_dtype_size(dtype) : 0;
    st = coll_hello(c, k, data, inl, inl, -1);
  }
  if (st != DPT_OK) return st;
  switch (algo) {
  case DPT_ALLREDUCE_DIRECT:
    dpt_direct_sum(c, data, c->payload, count, dtype);
    return DPT_OK;
  case DPT_ALLREDUCE_RD:
    return dpt_rd_allreduce(c, data, count, dtype, k->tag, &k->w);
  case DPT_ALLREDUCE_MPI:
    if (count == 0) return DPT_OK;
    st = c->tp->native_allreduce(c, data, count, dtype, c->opt.desync_check,
                                 dpt_now() + c->opt.timeout_s);
    return st == DPT_OK ? st : dpt_error_context(st, "%s", dpt_what_str(&k->w));
  default: {
    dpt_ring_args a = {data, NULL, count, dtype, DPT_RING_BOTH};
    return dpt_ring_allreduce(c, &a, NULL, k->tag, &k->w);
  }
  }
}

/* Numbers an all-reduce, picks its algorithm and checks the arguments both entry points
 * share. */
static dpt_status allreduce_begin(dpt_comm *c, coll *k, size_t count, dpt_comm_dtype dtype,
                                  const char *fn) {
  coll_begin(c, k, OP_ALLREDUCE, count, dtype, dpt_comm_pick_algo(c, count, dtype), 0);
  dpt_status st = check_dtype(dtype, fn);
  if (st == DPT_OK && payload_bytes(count, dtype) == SIZE_MAX)
    st = dpt_set_error(DPT_ERR_INVALID_ARG, "%s: count %zu overflows", fn, count);
  return st;
}

dpt_status dpt_allreduce_host(dpt_comm *c, void *data, size_t count, dpt_comm_dtype dtype) {
  const char *fn = "dpt_allreduce_host";
  dpt_status st = check_comm(c, fn);
  if (st != DPT_OK) return st;
  coll k;
  st = allreduce_begin(c, &k, count, dtype, fn);
  const dpt_allreduce_algo algo = (dpt_allreduce_algo)k.h.algo;
  if (st == DPT_OK && !data && count > 0)
    st = dpt_set_error(DPT_ERR_INVALID_ARG, "%s: data is NULL with count %zu", fn, count);
  if (st != DPT_OK) return coll_fail(c, &k, st);
  if (c->size == 1) return DPT_OK;
  return allreduce_run(c, &k, data, count, dtype, algo);
}

dpt_status dpt_allreduce_buffer(dpt_comm *c, dpt_buffer *buf, size_t offset, size_t count,
                                dpt_comm_dtype dtype) {
  const char *fn = "dpt_allreduce_buffer";
  dpt_status st = check_comm(c, fn);
  if (st != DPT_OK) return st;
  coll k;
  st = allreduce_begin(c, &k, count, dtype, fn);
  const dpt_allreduce_algo algo = (dpt_allreduce_algo)k.h.algo;
  const size_t es = dpt_dtype_size(dtype);
  size_t off_bytes = 0, bytes = 0;
  if (st == DPT_OK) st = check_elems(buf, offset, count, dtype, &off_bytes, &bytes, fn);
  if (st != DPT_OK) return coll_fail(c, &k, st);
  if (c->size == 1) return DPT_OK;
  if (count == 0) return allreduce_run(c, &k, NULL, 0, dtype, algo);
  void *host;
  if ((st = map_range(c, buf, off_bytes, bytes, &host)) != DPT_OK) return coll_fail(c, &k, st);
  if (host) return unmap_range(buf, host, allreduce_run(c, &k, host, count, dtype, algo));

  if (algo != DPT_ALLREDUCE_RING) {
    /* The small-message algorithms work on one host copy (small by choice; forced on a
     * large buffer, this is the "one host copy of the data" of the bound). */
    void *tmp = malloc(bytes);
    if (!tmp)
      st = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu host bytes", fn, bytes);
    else
      st = dpt_buffer_download(buf, off_bytes, tmp, bytes);
    if (st != DPT_OK) {
      free(tmp);
      return coll_fail(c, &k, st);
    }
    st = allreduce_run(c, &k, tmp, count, dtype, algo);
    if (st == DPT_OK) st = dpt_buffer_upload(buf, off_bytes, tmp, bytes);
    free(tmp);
    return st;
  }
  if (c->opt.desync_check && (st = coll_hello(c, &k, NULL, 0, 0, -1)) != DPT_OK) return st;
  dpt_ring_args a = {NULL, NULL, count, dtype, DPT_RING_BOTH};
  return run_staged(c, &k, buf, off_bytes, bytes, es, 1, 1, run_ring, &a, NULL);
}

/* One phase of the ring on host data, or on a buffer range when on_buf. */
static dpt_status ring_phase(dpt_comm *c, void *data, int on_buf, dpt_buffer *buf, size_t offset,
                             size_t count, dpt_comm_dtype dtype, dpt_ring_phase phase,
                             const char *fn) {
  dpt_status st = check_comm(c, fn);
  if (st != DPT_OK) return st;
  coll k;
  coll_begin(c, &k, phase == DPT_RING_REDUCE_SCATTER ? OP_REDUCE_SCATTER : OP_ALLGATHER_SHARDS,
             count, dtype, DPT_ALLREDUCE_RING, 0);
  st = check_dtype(dtype, fn);
  size_t bytes = 0, off_bytes = 0;
  if (st == DPT_OK && on_buf)
    st = check_elems(buf, offset, count, dtype, &off_bytes, &bytes, fn);
  else if (st == DPT_OK && (bytes = payload_bytes(count, dtype)) == SIZE_MAX)
    st = dpt_set_error(DPT_ERR_INVALID_ARG, "%s: count %zu overflows", fn, count);
  else if (st == DPT_OK && !data && count > 0)
    st = dpt_set_error(DPT_ERR_INVALID_ARG, "%s: data is NULL with count %zu", fn, count);
  void *host = NULL;
  if (st == DPT_OK && on_buf) st = map_range(c, buf, off_bytes, bytes, &host);
  if (st != DPT_OK) return coll_fail(c, &k, st);
  if (c->size > 1 && c->opt.desync_check) st = coll_hello(c, &k, NULL, 0, 0, -1);
  dpt_ring_args a = {host ? host : data, NULL, count, dtype, phase};
  if (st == DPT_OK && c->size > 1 && count > 0) {
    if (!on_buf || host)
      st = dpt_ring_allreduce(c, &a, NULL, k.tag, &k.w);
    else
      st =
          run_staged(c, &k, buf, off_bytes, bytes, dpt_dtype_size(dtype), 1, 1, run_ring, &a, NULL);
  }
  return host ? unmap_range(buf, host, st) : st;
}

dpt_status dpt_reduce_scatter_host(dpt_comm *c, void *data, size_t count, dpt_comm_dtype dtype) {
  return ring_phase(c, data, 0, NULL, 0, count, dtype, DPT_RING_REDUCE_SCATTER,
                    "dpt_reduce_scatter_host");
}

dpt_status dpt_reduce_scatter_buffer(dpt_comm *c, dpt_buffer *buf, size_t offset, size_t count,
                                     dpt_comm_dtype dtype) {
  return ring_phase(c, NULL, 1, buf, offset, count, dtype, DPT_RING_REDUCE_SCATTER,
                    "dpt_reduce_scatter_buffer");
}

dpt_status dpt_allgather_shards_host(dpt_comm *c, void *data, size_t count, dpt_comm_dtype dtype) {
  return ring_phase(c, data, 0, NULL, 0, count, dtype, DPT_RING_ALLGATHER,
                    "dpt_allgather_shards_host");
}

dpt_status dpt_allgather_shards_buffer(dpt_comm *c, dpt_buffer *buf, size_t offset, size_t count,
                                       dpt_comm_dtype dtype) {
  return ring_phase(c, NULL, 1, buf, offset, count, dtype, DPT_RING_ALLGATHER,
                    "dpt_allgather_shards_buffer");
}

/* Broadcast of host data, or of a buffer range when buf is set. */
static dpt_status broadcast(dpt_comm *c, void *data, dpt_buffer *buf, size_t offset, size_t bytes,
                            int root, const char *fn) {
  dpt_status st = check_comm(c, fn);
  if (st != DPT_OK) return st;
  coll k;
  coll_begin(c, &k, OP_BROADCAST, bytes, DPT_COMM_F32, DPT_ALLREDUCE_AUTO, root);
  if (root < 0 || root >= c->size)
    st = dpt_set_error(DPT_ERR_INVALID_ARG, "%s: root %d outside [0, %d)", fn, root, c->size);
  else if (buf)
    st = check_range(buf, offset, bytes, fn);
  else if (!data && bytes > 0)
    st = dpt_set_error(DPT_ERR_INVALID_ARG, "%s: data is NULL with %zu bytes", fn, bytes);
  if (st != DPT_OK) return coll_fail(c, &k, st);
  if (c->size == 1) return DPT_OK;

  const int is_root = c->rank == root;
  const int inline_ok = bytes > 0 && bytes <= dpt_comm_inline_cap(c->size);
  /* A large buffer is mapped before the hello round, so that a failure to map it is announced
   * there (coll_fail) instead of leaving the other ranks waiting for its data. */
  void *host = NULL;
  if (buf && !inline_ok && bytes > 0 && (st = map_range(c, buf, offset, bytes, &host)) != DPT_OK)
    return coll_fail(c, &k, st);
  if (c->opt.desync_check || inline_ok) {
    /* Small: the root's data rides in its hello message. */
    unsigned char *tmp = NULL;
    const void *src = data;
    if (inline_ok && buf && is_root) {
      tmp = malloc(bytes);
      st = tmp ? dpt_buffer_download(buf, offset, tmp, bytes)
               : dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: no memory", dpt_what_str(&k.w));
      if (st != DPT_OK) {
        free(tmp);
        return coll_fail(c, &k, st);
      }
      src = tmp;
    }
    st = coll_hello(c, &k, src, is_root && inline_ok ? bytes : 0, inline_ok ? bytes : 0, root);
    free(tmp);
    if (st == DPT_OK && inline_ok && !is_root) {
      if (buf)
        st = dpt_buffer_upload(buf, offset, c->payload[root], bytes);
      else
        memcpy(data, c->payload[root], bytes);
    }
    if (st != DPT_OK || inline_ok) return host ? unmap_range(buf, host, st) : st;
  }
  dpt_ring_args a = {data, NULL, bytes, DPT_COMM_F32, DPT_RING_BOTH};
  if (!buf) return dpt_chain_broadcast(c, &a, NULL, root, k.tag, &k.w);
  if (bytes == 0) return DPT_OK;
  if (host) {
    a.data = host;
    return unmap_range(buf, host, dpt_chain_broadcast(c, &a, NULL, root, k.tag, &k.w));
  }
  return run_staged(c, &k, buf, offset, bytes, 1, is_root, !is_root, run_chain, &a, NULL);
}

dpt_status dpt_broadcast_host(dpt_comm *c, void *data, size_t bytes, int root) {
  return broadcast(c, data, NULL, 0, bytes, root, "dpt_broadcast_host");
}

dpt_status dpt_broadcast_buffer(dpt_comm *c, dpt_buffer *buf, size_t offset, size_t bytes,
                                int root) {
  return broadcast(c, NULL, buf, offset, bytes, root, "dpt_broadcast_buffer");
}

dpt_status dpt_allgather_host(dpt_comm *c, const void *send, size_t bytes, void *recv) {
  const char *fn = "dpt_allgather_host";
  dpt_status st = check_comm(c, fn);
  if (st != DPT_OK) return st;
  coll k;
  coll_begin(c, &k, OP_ALLGATHER, bytes, DPT_COMM_F32, DPT_ALLREDUCE_AUTO, 0);
  size_t total = 0;
  if (!dpt_mul_ok(bytes, (size_t)c->size, &total))
    st = dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %zu bytes x %d ranks overflows", fn, bytes,
                       c->size);
  else if (bytes > 0 && (!send || !recv))
    st = dpt_set_error(DPT_ERR_INVALID_ARG, "%s: send or recv is NULL", fn);
  else if (bytes > 0 && (const unsigned char *)send < (unsigned char *)recv + total &&
           (unsigned char *)recv < (const unsigned char *)send + bytes)
    st = dpt_set_error(DPT_ERR_INVALID_ARG, "%s: send and recv overlap", fn);
  if (st != DPT_OK) return coll_fail(c, &k, st);
  if (bytes > 0) memcpy((unsigned char *)recv + (size_t)c->rank * bytes, send, bytes);
  if (c->size == 1) return DPT_OK;
  const int inline_ok = bytes <= dpt_comm_inline_cap(c->size);
  if (c->opt.desync_check || inline_ok) {
    st = coll_hello(c, &k, send, inline_ok ? bytes : 0, inline_ok ? bytes : 0, -1);
    if (st == DPT_OK && inline_ok && bytes > 0)
      for (int r = 0; r < c->size; ++r)
        if (r != c->rank) memcpy((unsigned char *)recv + (size_t)r * bytes, c->payload[r], bytes);
    if (st != DPT_OK || inline_ok) return st;
  }
  return dpt_ring_allgather(c, recv, bytes, k.tag, &k.w);
}

dpt_status dpt_barrier(dpt_comm *c) {
  dpt_status st = check_comm(c, "dpt_barrier");
  if (st != DPT_OK) return st;
  coll k;
  coll_begin(c, &k, OP_BARRIER, 0, DPT_COMM_F32, DPT_ALLREDUCE_AUTO, 0);
  if (c->size == 1) return DPT_OK;
  return coll_hello(c, &k, NULL, 0, 0, -1);
}
