/* Ring all-reduce: reduce-scatter, then all-gather, over N ranks in a ring.
 *
 *        +--------> r0 ---------> r1 ---------> r2 ---------> r3 --------+
 *        |          (each rank sends to its right, receives from its left)  |
 *        +-----------------------------------------------------------------+
 *
 * The vector is cut into N segments (lengths differ by at most one element: the leftover
 * count % N goes one element each to the first segments). Rank r, step s = 0 .. N-2:
 *
 *   reduce-scatter:  send segment (r - s) mod N, receive segment (r - s - 1) mod N and add
 *                    it into the local copy. After N-1 steps rank r holds the complete sum
 *                    of segment (r + 1) mod N, added in ring order starting at its owner.
 *   all-gather:      send segment (r + 1 - s) mod N, receive segment (r - s) mod N straight
 *                    into place. Every rank ends with the owner's bits: bit-identical.
 *
 *   N = 3, segments a b c, after the reduce-scatter r0 owns b, r1 owns c, r2 owns a:
 *     step   r0 sends / receives     r1 sends / receives     r2 sends / receives
 *     RS 0     a  /  c (+=)            b  /  a (+=)            c  /  b (+=)
 *     RS 1     c  /  b (+=)            a  /  c (+=)            b  /  a (+=)
 *     AG 0     b  /  a                 c  /  b                 a  /  c
 *     AG 1     a  /  c                 b  /  a                 c  /  b
 *
 * Cost: 2(N-1) steps; each rank sends and receives 2(N-1)/N of the vector, which is why
 * busbw = algbw * 2(N-1)/N is the figure to compare with link bandwidth. Each segment is
 * sent in pieces (piece_bytes) so that the transfer of piece c+1 overlaps the sum of piece c
 * and the next step's send of piece c starts as soon as its sum is done; no message exceeds
 * piece_bytes (MPI counts are int). The vector is processed block by block (block_bytes), each
 * block a complete ring, so that the all-gather re-reads a block while it is still in cache
 * and device buffers can be staged one block at a time; the message stream of block b+1
 * follows block b's without a gap.
 *
 * The two phases also run alone (dpt_ring_phase): the reduce-scatter leaves rank r the sum
 * of segment (r + 1) mod N of every block (its shard, dpt_ring_shard); the all-gather copies
 * every rank's shard to all. Between them the sharded optimizer step updates only the shard.
 */
#include "collectives/algorithms/algorithms.h"
#include "collectives/common/comm_struct.h"
#include "collectives/common/comm_util.h"

typedef struct ring {
  int rank, size, left, right;
  size_t esize, count;
  size_t block;  /* elements per block */
  size_t piece;  /* elements per piece, at most */
  size_t nfull;  /* number of full blocks */
  size_t c_full; /* pieces per segment of a full block */
  size_t c_last; /* pieces per segment of the last, partial block */
  size_t m_full; /* messages per direction of a full block */
  size_t s0, ns; /* first step of the phase(s) run, and their step count */
  unsigned char *data;
  void *(*block_ptr)(void *st, size_t b);
  void *st;
} ring;

static size_t div_up(size_t a, size_t b) {
  return a / b + (a % b != 0);
}

static size_t pieces_for(const ring *g, size_t len) {
  size_t seg = div_up(len, (size_t)g->size);
  size_t c = div_up(seg, g->piece);
  return c ? c : 1;
}

typedef struct where {
  size_t b, s, c, chunks; /* block, step, piece, pieces per segment */
} where;

static where locate(const ring *g, size_t i) {
  where w;
  size_t rem;
  if (i < g->nfull * g->m_full) {
    w.b = i / g->m_full;
    rem = i % g->m_full;
    w.chunks = g->c_full;
  } else {
    w.b = g->nfull;
    rem = i - g->nfull * g->m_full;
    w.chunks = g->c_last;
  }
  w.s = rem / w.chunks + g->s0;
  w.c = rem % w.chunks;
  return w;
}

static size_t index_of(const ring *g, where w, size_t s) {
  return w.b * g->m_full + (s - g->s0) * w.chunks + w.c;
}

static size_t mod(long long a, int n) {
  long long m = a % n;
  return (size_t)(m < 0 ? m + n : m);
}

/* Pointer and size of piece w.c of segment k of block w.b. */
static void piece_of(const ring *g, where w, size_t k, dpt_xfer *x) {
  size_t len = w.b < g->nfull ? g->block : g->count - g->nfull * g->block;
  size_t seg_off, seg_len, off, part;
  dpt_split(len, (size_t)g->size, k, &seg_off, &seg_len);
  dpt_split(seg_len, w.chunks, w.c, &off, &part);
  unsigned char *base =
      g->block_ptr ? g->block_ptr(g->st, w.b) : g->data + w.b * g->block * g->esize;
  x->ptr = base + (seg_off + off) * g->esize;
  x->bytes = part * g->esize;
  x->block = w.b;
}

static void send_at(const void *ctx, size_t i, dpt_xfer *x) {
  const ring *g = ctx;
  where w = locate(g, i);
  const size_t n1 = (size_t)g->size - 1;
  size_t k = w.s < n1 ? mod((long long)g->rank - (long long)w.s, g->size)
                      : mod((long long)g->rank + 1 - (long long)(w.s - n1), g->size);
  piece_of(g, w, k, x);
  x->peer = g->right;
  x->reduce_dst = NULL;
  x->dep = w.s == g->s0 ? DPT_NO_DEP : index_of(g, w, w.s - 1);
  x->dep2 = DPT_NO_DEP;
}

static void recv_at(const void *ctx, size_t i, dpt_xfer *x) {
  const ring *g = ctx;
  where w = locate(g, i);
  const size_t n1 = (size_t)g->size - 1;
  x->peer = g->left;
  x->dep2 = DPT_NO_DEP;
  if (w.s < n1) {
    piece_of(g, w, mod((long long)g->rank - (long long)w.s - 1, g->size), x);
    x->reduce_dst = x->ptr;
    x->ptr = NULL;
    x->dep = DPT_NO_DEP;
  } else {
    size_t t = w.s - n1;
    piece_of(g, w, mod((long long)g->rank - (long long)t, g->size), x);
    x->reduce_dst = NULL;
    /* The reduce-scatter sent this same piece at step t; it must be gone before the
     * all-gather overwrites it (nothing to wait for when the all-gather runs alone). */
    x->dep = t >= g->s0 ? index_of(g, w, t) : DPT_NO_DEP;
  }
}

size_t dpt_ring_shard(const dpt_comm *c, size_t count, dpt_comm_dtype dtype, int rank,
                      dpt_range *out, size_t max) {
  const size_t block = dpt_block_elems(c, dpt_dtype_size(dtype));
  const size_t k = (size_t)(rank + 1) % (size_t)c->size;
  size_t n = 0;
  for (size_t start = 0; start < count; start += block) {
    size_t len = count - start < block ? count - start : block, off, part;
    dpt_split(len, (size_t)c->size, k, &off, &part);
    if (part == 0) continue;
    if (n < max) out[n] = (dpt_range){start + off, part};
    ++n;
  }
  return n;
}

dpt_status dpt_ring_allreduce(dpt_comm *c, const dpt_ring_args *a, const dpt_sched *hooks, int tag,
                              dpt_what *what) {
  if (c->size == 1 || a->count == 0) return DPT_OK;
  ring g = {0};
  g.rank = c->rank;
  g.size = c->size;
  g.left = (c->rank + c->size - 1) % c->size;
  g.right = (c->rank + 1) % c->size;
  g.esize = dpt_dtype_size(a->dtype);
  g.count = a->count;
  g.block = dpt_block_elems(c, g.esize);
  g.piece = c->opt.piece_bytes / g.esize ? c->opt.piece_bytes / g.esize : 1;
  g.nfull = a->count / g.block;
  g.c_full = pieces_for(&g, g.block);
  g.c_last = pieces_for(&g, a->count % g.block);
  const size_t n1 = (size_t)(c->size - 1);
  g.s0 = a->phase == DPT_RING_ALLGATHER ? n1 : 0;
  g.ns = a->phase == DPT_RING_BOTH ? 2 * n1 : n1;
  g.m_full = g.ns * g.c_full;
  g.data = a->data;
  g.block_ptr = a->block_ptr;
  g.st = hooks ? hooks->st : NULL;

  size_t last_len = a->count - g.nfull * g.block;
  size_t nmsg = g.nfull * g.m_full + (last_len ? g.ns * g.c_last : 0);
  size_t first = a->count < g.block ? a->count : g.block;
  size_t slot = div_up(first, (size_t)c->size);
  if (slot > g.piece) slot = g.piece;

  const dpt_sched s =
      dpt_sched_of(hooks, nmsg, nmsg, send_at, recv_at, &g, a->dtype, slot * g.esize);
  return dpt_engine_run(c, &s, tag, what);
}
