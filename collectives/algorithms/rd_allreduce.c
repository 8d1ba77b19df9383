/* Recursive doubling all-reduce: log2(N) rounds, each exchanging the whole vector.
 *
 *   round 0: r0 <-> r1   r2 <-> r3        (partner = r XOR 1)
 *   round 1: r0 <-> r2   r1 <-> r3        (partner = r XOR 2)
 *   after round k every rank holds the sum over its group of 2^(k+1) ranks.
 *
 * Both partners compute mine + theirs from the same two vectors, and IEEE addition is
 * commutative, so the two results are bit-identical; by induction all ranks end identical.
 * N not a power of two: with p the largest power of two <= N and e = N - p, ranks 0 .. 2e-1
 * pair up first (even r sends its vector to r+1, which adds it and takes part as rank r/2;
 * ranks >= 2e take part as r - e), the p participants run the rounds, and each odd rank of
 * the first pairs sends the result back to its even partner.
 *
 * Cost: log2(p) rounds (+2 when N is not a power of two), each moving the whole vector each
 * way: latency-optimal for small vectors, log2(N) times the ring's traffic for large ones.
 * The vector moves in pieces (piece_bytes) so that no message exceeds the transport's limit
 * and the sum of piece c overlaps the transfer of piece c+1.
 */
#include "collectives/algorithms/algorithms.h"
#include "collectives/common/comm_struct.h"
#include "collectives/common/comm_util.h"

typedef struct rd {
  int rank;
  int role;   /* 0: folded out (even of the first pairs), 1: folded in (odd), 2: plain */
  int vrank;  /* rank among the p participants */
  int rounds; /* log2(p) */
  int extra;  /* N - p */
  size_t pieces, piece, count, esize;
  unsigned char *data;
} rd;

/* Real rank of participant v. */
static int real_rank(const rd *g, int v) {
  return v < g->extra ? 2 * v + 1 : v + g->extra;
}

static void piece_at(const rd *g, size_t c, dpt_xfer *x) {
  size_t off = c * g->piece;
  size_t n = g->count - off < g->piece ? g->count - off : g->piece;
  x->ptr = g->data + off * g->esize;
  x->bytes = n * g->esize;
  x->block = 0;
  x->reduce_dst = NULL;
  x->dep = DPT_NO_DEP;
  x->dep2 = DPT_NO_DEP;
}

static void send_at(const void *ctx, size_t i, dpt_xfer *x) {
  const rd *g = ctx;
  size_t phase = i / g->pieces, c = i % g->pieces;
  piece_at(g, c, x);
  if (g->role == 0) { /* the whole vector to the odd partner */
    x->peer = g->rank + 1;
    return;
  }
  const size_t fold = g->role == 1 ? g->pieces : 0; /* receives before round 0 */
  if (phase < (size_t)g->rounds) {
    x->peer = real_rank(g, g->vrank ^ (1 << phase));
    if (phase > 0)
      x->dep = fold + (phase - 1) * g->pieces + c;
    else if (g->role == 1)
      x->dep = c;
  } else { /* the result back to the even partner */
    x->peer = g->rank - 1;
    x->dep = fold + ((size_t)g->rounds - 1) * g->pieces + c;
  }
}

static void recv_at(const void *ctx, size_t j, dpt_xfer *x) {
  const rd *g = ctx;
  size_t phase = j / g->pieces, c = j % g->pieces;
  piece_at(g, c, x);
  if (g->role == 0) { /* the result, into place once our own send of it is gone */
    x->peer = g->rank + 1;
    x->dep = c;
    return;
  }
  x->reduce_dst = x->ptr;
  x->ptr = NULL;
  if (g->role == 1) {
    if (phase == 0) {
      x->peer = g->rank - 1;
      return;
    }
    --phase;
  }
  x->peer = real_rank(g, g->vrank ^ (1 << phase));
  x->dep2 = phase * g->pieces + c; /* our send of this piece in this round */
}

dpt_status dpt_rd_allreduce(dpt_comm *c, void *data, size_t count, dpt_comm_dtype dtype, int tag,
                            dpt_what *what) {
  if (c->size == 1 || count == 0) return DPT_OK;
  rd g = {0};
  g.rank = c->rank;
  g.esize = dpt_dtype_size(dtype);
  g.count = count;
  g.data = data;
  g.piece = c->opt.piece_bytes / g.esize ? c->opt.piece_bytes / g.esize : 1;
  g.pieces = count / g.piece + (count % g.piece != 0);
  int p = 1;
  while (p * 2 <= c->size) {
    p *= 2;
    ++g.rounds;
  }
  g.extra = c->size - p;
  if (c->rank < 2 * g.extra) {
    g.role = c->rank % 2 == 0 ? 0 : 1;
    g.vrank = c->rank / 2;
  } else {
    g.role = 2;
    g.vrank = c->rank - g.extra;
  }
  const size_t n = g.role == 0 ? g.pieces : ((size_t)g.rounds + (g.role == 1)) * g.pieces;
  const dpt_sched s = dpt_sched_of(NULL, n, n, send_at, recv_at, &g, dtype,
                                   (count < g.piece ? count : g.piece) * g.esize);
  return dpt_engine_run(c, &s, tag, what);
}
