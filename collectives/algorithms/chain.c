/* Broadcast along the ring, and the ring allgather.
 *
 * Broadcast (pipelined chain): root -> root+1 -> ... -> root-1, the data cut into pieces;
 * every rank but the last forwards piece c as soon as it has arrived, so after the pipeline
 * fills all links carry pieces at once.
 *
 *   root ==p0==> r1 ==p0==> r2         time ~ bytes / bw + (N - 2) * piece / bw + N * latency
 *   root ==p1==> r1 ==p0==> r2
 *
 * Ring allgather: N-1 steps; at step s rank r sends block (r - s) mod N to its right and
 * receives block (r - s - 1) mod N from its left, straight into place (pieces as above).
 * Each rank sends and receives (N-1)/N of the result.
 */
#include <string.h>

#include "collectives/algorithms/algorithms.h"
#include "collectives/common/comm_struct.h"
#include "collectives/common/comm_util.h"

typedef struct chain {
  int rank, size, left, right, pos;
  size_t block, piece; /* bytes */
  size_t nfull, c_full, c_last, bytes;
  unsigned char *data;
  void *(*block_ptr)(void *st, size_t b);
  void *st;
} chain;

static size_t div_up(size_t a, size_t b) {
  return a / b + (a % b != 0);
}

static void chain_piece(const chain *g, size_t i, dpt_xfer *x) {
  size_t b, c, chunks;
  if (i < g->nfull * g->c_full) {
    b = i / g->c_full;
    c = i % g->c_full;
    chunks = g->c_full;
  } else {
    b = g->nfull;
    c = i - g->nfull * g->c_full;
    chunks = g->c_last;
  }
  size_t len = b < g->nfull ? g->block : g->bytes - g->nfull * g->block;
  size_t base = len / chunks, extra = len % chunks;
  size_t off = c * base + (c < extra ? c : extra);
  unsigned char *p = g->block_ptr ? g->block_ptr(g->st, b) : g->data + b * g->block;
  x->ptr = p + off;
  x->bytes = base + (c < extra);
  x->block = b;
  x->reduce_dst = NULL;
  x->dep = DPT_NO_DEP;
  x->dep2 = DPT_NO_DEP;
}

static void bcast_send_at(const void *ctx, size_t i, dpt_xfer *x) {
  const chain *g = ctx;
  chain_piece(g, i, x);
  x->peer = g->right;
  if (g->pos != 0) x->dep = i; /* forward what arrived */
}

static void bcast_recv_at(const void *ctx, size_t i, dpt_xfer *x) {
  const chain *g = ctx;
  chain_piece(g, i, x);
  x->peer = g->left;
}

dpt_status dpt_chain_broadcast(dpt_comm *c, const dpt_ring_args *a, const dpt_sched *hooks,
                               int root, int tag, dpt_what *what) {
  if (c->size == 1 || a->count == 0) return DPT_OK;
  chain g = {0};
  g.rank = c->rank;
  g.size = c->size;
  g.left = (c->rank + c->size - 1) % c->size;
  g.right = (c->rank + 1) % c->size;
  g.pos = (c->rank - root + c->size) % c->size;
  g.bytes = a->count;
  g.block = dpt_block_elems(c, 1);
  g.piece = c->opt.piece_bytes;
  g.nfull = g.bytes / g.block;
  g.c_full = div_up(g.block, g.piece);
  g.c_last = div_up(g.bytes % g.block, g.piece);
  g.data = a->data;
  g.block_ptr = a->block_ptr;
  g.st = hooks ? hooks->st : NULL;
  const size_t n = g.nfull * g.c_full + g.c_last;
  /* no sums: receives go into place */
  const dpt_sched s = dpt_sched_of(hooks, g.pos == c->size - 1 ? 0 : n, g.pos == 0 ? 0 : n,
                                   bcast_send_at, bcast_recv_at, &g, DPT_COMM_F32, 0);
  return dpt_engine_run(c, &s, tag, what);
}

typedef struct gather {
  int rank, size, left, right;
  size_t bytes, piece, pieces;
  unsigned char *recv;
} gather;

static void gather_piece(const gather *g, size_t blk, size_t c, dpt_xfer *x) {
  size_t base = g->bytes / g->pieces, extra = g->bytes % g->pieces;
  size_t off = c * base + (c < extra ? c : extra);
  x->ptr = g->recv + blk * g->bytes + off;
  x->bytes = base + (c < extra);
  x->block = 0;
  x->reduce_dst = NULL;
  x->dep = DPT_NO_DEP;
  x->dep2 = DPT_NO_DEP;
}

static void gather_send_at(const void *ctx, size_t i, dpt_xfer *x) {
  const gather *g = ctx;
  size_t s = i / g->pieces, c = i % g->pieces;
  gather_piece(g, (size_t)((g->rank - (int)(s % (size_t)g->size) + g->size) % g->size), c, x);
  x->peer = g->right;
  if (s > 0) x->dep = i - g->pieces; /* forward what arrived at the previous step */
}

static void gather_recv_at(const void *ctx, size_t i, dpt_xfer *x) {
  const gather *g = ctx;
  size_t s = i / g->pieces, c = i % g->pieces;
  gather_piece(g, (size_t)((g->rank - (int)(s % (size_t)g->size) - 1 + 2 * g->size) % g->size), c,
               x);
  x->peer = g->left;
}

dpt_status dpt_ring_allgather(dpt_comm *c, void *recv, size_t bytes, int tag, dpt_what *what) {
  if (c->size == 1 || bytes == 0) return DPT_OK;
  gather g = {0};
  g.rank = c->rank;
  g.size = c->size;
  g.left = (c->rank + c->size - 1) % c->size;
  g.right = (c->rank + 1) % c->size;
  g.bytes = bytes;
  g.piece = c->opt.piece_bytes;
  g.pieces = div_up(bytes, g.piece);
  g.recv = recv;
  const size_t n = (size_t)(c->size - 1) * g.pieces;
  const dpt_sched s = dpt_sched_of(NULL, n, n, gather_send_at, gather_recv_at, &g, DPT_COMM_F32, 0);
  return dpt_engine_run(c, &s, tag, what);
}
