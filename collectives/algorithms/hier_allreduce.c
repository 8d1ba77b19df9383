/* Hierarchical all-reduce over M nodes of L ranks each (L > 1, M > 1): a ring inside each
 * node, a ring across the nodes, a ring inside each node again.
 *
 *   node 0:  a0 -> a1 -> a2 -> a0      (local ring: local index l, the node's ranks by rank)
 *   node 1:  b0 -> b1 -> b2 -> b0
 *             |     |     |            cross rings: the ranks of local index l on every node,
 *   node 2:  c0 -> c1 -> c2 -> c0       a_l -> b_l -> c_l -> a_l (nodes in id order)
 *
 * Each block (block_bytes) is cut into L segments, segment k into M sub-segments (balanced
 * splits, as the ring's). Rank (node m, local l), steps of one block:
 *
 *   1. intra reduce-scatter, L-1 steps: the ring's reduce-scatter over the node's ranks; rank
 *      l ends with segment (l + 1) mod L summed over its node.
 *   2. cross all-reduce, 2(M-1) steps: the ring all-reduce of that segment over the ranks of
 *      local index l; its reduce-scatter leaves sub-segment (m + 1) mod M summed over all
 *      ranks (the shard: dpt_hier_shard), its all-gather copies every sub-segment to all.
 *   3. intra all-gather, L-1 steps: every segment from its owner to the node's ranks.
 *
 *   L = 2, M = 2, segments s0 s1, sub-segments .0 .1 (rank = node m, local l):
 *     step     (0,0)            (0,1)            (1,0)            (1,1)
 *     intra    s0 -> (0,1)      s1 -> (0,0)      s0 -> (1,1)      s1 -> (1,0)     add
 *     cross    s1.0 -> (1,0)    s0.0 -> (1,1)    s1.1 -> (0,0)    s0.1 -> (0,1)   add
 *     cross    s1.1 -> (1,0)    s0.1 -> (1,1)    s1.0 -> (0,0)    s0.0 -> (0,1)   copy
 *     intra    s1 -> (0,1)      s0 -> (0,0)      s1 -> (1,1)      s0 -> (1,0)     copy
 *
 * Sum order of an element of segment k, sub-segment j: each node adds its ranks' values in
 * local-ring order starting at local index k, ((x_k + x_k+1) + ...) + x_k-1 (indices mod L);
 * then the node sums are added in node order starting at node j, ((P_j + P_j+1) + ...) +
 * P_j-1 (mod M). The owner's bits are copied to every rank: results are bit-identical. The
 * same on every run: a cross-node sum never starts before the node's sum is complete (dep2).
 *
 * Cost (alpha-beta, vector of V bytes): 2(L-1) intra steps of V/L bytes and 2(M-1) cross
 * steps of V/(L M) bytes, 2(L+M-2) latencies against the flat ring's 2(LM-1); each rank
 * sends 2(M-1)/(LM) V across nodes, and the L ranks of a node together 2(M-1)/M V, where
 * the flat ring puts 2(N-1)/N V on each of its node-crossing links. Pieces (piece_bytes) and
 * blocks (block_bytes) as for the ring, so device buffers are staged the same way. The
 * halves (dpt_ring_phase) run steps 1 + 2's reduce-scatter, and 2's all-gather + 3.
 *
 * Native variant: a whole all-reduce of host data on a transport with cross_allreduce (MPI,
 * where the nodes are equal: an MPI communicator per local index, in node order) runs step 1
 * over the whole vector as one block, then the transport's MPI_Allreduce of this rank's
 * segment (l + 1) mod L among the ranks of local index l, then step 3. Across nodes that is
 * MPI's own algorithm (measured faster than the p2p ring over TCP: docs/performance.md); no
 * blocks, so device buffers that are staged block by block keep the p2p schedule, as do the
 * halves (their shard layout is the p2p one). Sum order: the node sums as above, segment k
 * over the whole vector; the cross-node sum in MPI_Allreduce's order, assumed to give every
 * member the same bits (Open MPI's reductions do); for M = 2 it is P_0 + P_1 in either order,
 * so for L = M = 2 (two addends per sum) both variants give the halves' bits.
 */
#include <stdio.h>

#include "collectives/algorithms/algorithms.h"
#include "base/clock.h"
#include "base/error.h"
#include "collectives/common/comm_struct.h"
#include "collectives/transports/transport.h"
#include "collectives/common/comm_util.h"

enum { FULL, LAST }; /* kinds of block: full ones, and the last, partial one */

typedef struct hier {
  int L, l, M, m;        /* ranks per node, local index; nodes, this rank's node */
  int in_left, in_right; /* ranks of local l-1, l+1 on this node */
  int x_left, x_right;   /* ranks of local l on nodes m-1, m+1 */
  size_t a, b;           /* L-1 intra steps, M-1 cross steps per phase */
  size_t esize, count, block, piece, nfull;
  size_t s0, s1;          /* steps [s0, s1) of the 2a + 2b run */
  size_t c_in[2], c_x[2]; /* pieces per segment (intra) / sub-segment (cross), per kind */
  size_t msgs[2];         /* messages per direction of a block, per kind */
  unsigned char *data;
  void *(*block_ptr)(void *st, size_t b);
  void *st;
} hier;

static size_t div_up(size_t a, size_t b) {
  return a / b + (a % b != 0);
}

static size_t mod(long long a, int n) {
  long long r = a % n;
  return (size_t)(r < 0 ? r + n : r);
}

/* ---- the node layout --------------------------------------------------------------------- */

int dpt_hier_applies(const dpt_comm *c) {
  if (!c || c->nnodes < 2 || !c->node) return 0;
  dpt_comm *w = (dpt_comm *)c; /* the cache only */
  int per = atomic_load_explicit(&w->node_ranks, memory_order_relaxed);
  if (per == 0) {
    /* Once per communicator: every node's count against node 0's. */
    per = 0;
    for (int r = 0; r < c->size; ++r)
      per += c->node[r] == 0;
    for (int n = 1; n < c->nnodes && per > 0; ++n) {
      int k = 0;
      for (int r = 0; r < c->size; ++r)
        k += c->node[r] == n;
      if (k != per) per = -1;
    }
    if (per == 0) per = -1;
    atomic_store_explicit(&w->node_ranks, per, memory_order_relaxed);
  }
  return per > 1;
}

/* Local index of rank r: its place among its node's ranks, by rank. */
static int local_index(const dpt_comm *c, int r) {
  int l = 0;
  for (int q = 0; q < r; ++q)
    l += c->node[q] == c->node[r];
  return l;
}

/* The rank of local index l on node n. */
static int rank_at(const dpt_comm *c, int n, int l) {
  for (int r = 0; r < c->size; ++r)
    if (c->node[r] == n && l-- == 0) return r;
  return -1;
}

static void layout(const dpt_comm *c, int rank, hier *g) {
  g->L = c->size / c->nnodes;
  g->M = c->nnodes;
  g->l = local_index(c, rank);
  g->m = c->node[rank];
  g->in_left = rank_at(c, g->m, (g->l + g->L - 1) % g->L);
  g->in_right = rank_at(c, g->m, (g->l + 1) % g->L);
  g->x_left = rank_at(c, (g->m + g->M - 1) % g->M, g->l);
  g->x_right = rank_at(c, (g->m + 1) % g->M, g->l);
  g->a = (size_t)g->L - 1;
  g->b = (size_t)g->M - 1;
}

/* Rank `rank`'s shard inside one block of `len` elements: [*off, *off + *part). */
static void shard_in_block(const hier *g, size_t len, size_t *off, size_t *part) {
  size_t seg_off, seg_len, sub_off;
  dpt_split(len, (size_t)g->L, (size_t)(g->l + 1) % (size_t)g->L, &seg_off, &seg_len);
  dpt_split(seg_len, (size_t)g->M, (size_t)(g->m + 1) % (size_t)g->M, &sub_off, part);
  *off = seg_off + sub_off;
}

size_t dpt_hier_shard(const dpt_comm *c, size_t count, dpt_comm_dtype dtype, int rank,
                      dpt_range *out, size_t max) {
  hier g;
  layout(c, rank, &g);
  const size_t block = dpt_block_elems(c, dpt_dtype_size(dtype));
  size_t n = 0;
  for (size_t start = 0; start < count; start += block) {
    size_t len = count - start < block ? count - start : block, off, part;
    shard_in_block(&g, len, &off, &part);
    if (part == 0) continue;
    if (n < max) out[n] = (dpt_range){start + off, part};
    ++n;
  }
  return n;
}

/* ---- the schedule ------------------------------------------------------------------------ */

/* The four phases of a block: [lo, hi) of its 2a + 2b steps; intra phases cut segments,
 * cross phases sub-segments. */
static size_t phase_lo(const hier *g, int p) {
  const size_t at[5] = {0, g->a, g->a + g->b, g->a + 2 * g->b, 2 * g->a + 2 * g->b};
  return at[p];
}

static size_t pieces_at(const hier *g, int kind, size_t s) {
  return s < g->a || s >= g->a + 2 * g->b ? g->c_in[kind] : g->c_x[kind];
}

typedef struct where {
  size_t blk, s, c;
  int kind;
} where;

/* Messages of block kind `kind` in steps [s0, s). */
static size_t before(const hier *g, int kind, size_t s) {
  size_t n = 0;
  for (int p = 0; p < 4; ++p) {
    size_t lo = phase_lo(g, p), hi = phase_lo(g, p + 1);
    if (lo < g->s0) lo = g->s0;
    if (hi > s) hi = s;
    if (hi > lo) n += (hi - lo) * pieces_at(g, kind, phase_lo(g, p));
  }
  return n;
}

static where locate(const hier *g, size_t i) {
  where w;
  size_t rem;
  if (i < g->nfull * g->msgs[FULL]) {
    w.blk = i / g->msgs[FULL];
    rem = i % g->msgs[FULL];
    w.kind = FULL;
  } else {
    w.blk = g->nfull;
    rem = i - g->nfull * g->msgs[FULL];
    w.kind = LAST;
  }
  for (int p = 0; p < 4; ++p) {
    size_t lo = phase_lo(g, p), hi = phase_lo(g, p + 1);
    if (lo < g->s0) lo = g->s0;
    if (hi > g->s1) hi = g->s1;
    if (hi <= lo) continue;
    const size_t per = pieces_at(g, w.kind, lo), n = (hi - lo) * per;
    if (rem < n) {
      w.s = lo + rem / per;
      w.c = rem % per;
      return w;
    }
    rem -= n;
  }
  w.s = g->s1; /* not reached: i is below the message count */
  w.c = 0;
  return w;
}

static size_t index_of(const hier *g, const where *w, size_t s, size_t c) {
  return w->blk * g->msgs[FULL] + before(g, w->kind, s) + c;
}

/* Piece w->c of block w->blk's segment `part` (intra), or of sub-segment `part` of this rank's
 * segment (cross). */
static void piece_of(const hier *g, const where *w, int intra, size_t part, dpt_xfer *x) {
  const size_t len = w->blk < g->nfull ? g->block : g->count - g->nfull * g->block;
  size_t off, n, sub_off, sub_len;
  if (intra) {
    dpt_split(len, (size_t)g->L, part, &off, &n);
    dpt_split(n, g->c_in[w->kind], w->c, &sub_off, &sub_len);
  } else {
    size_t seg_off, seg_len;
    dpt_split(len, (size_t)g->L, (size_t)(g->l + 1) % (size_t)g->L, &seg_off, &seg_len);
    dpt_split(seg_len, (size_t)g->M, part, &off, &n);
    off += seg_off;
    dpt_split(n, g->c_x[w->kind], w->c, &sub_off, &sub_len);
  }
  unsigned char *base =
      g->block_ptr ? g->block_ptr(g->st, w->blk) : g->data + w->blk * g->block * g->esize;
  x->ptr = base + (off + sub_off) * g->esize;
  x->bytes = sub_len * g->esize;
  x->block = w->blk;
}

static void send_at(const void *ctx, size_t i, dpt_xfer *x) {
  const hier *g = ctx;
  const where w = locate(g, i);
  const size_t s = w.s, a = g->a, b = g->b;
  x->reduce_dst = NULL;
  x->dep2 = DPT_NO_DEP;
  /* Each send forwards what the previous step received: the same piece within a phase; at a
   * phase change between segments and sub-segments, after the whole previous step. */
  if (s == g->s0)
    x->dep = DPT_NO_DEP;
  else if (s == a || s == a + 2 * b)
    x->dep = index_of(g, &w, s - 1, pieces_at(g, w.kind, s - 1) - 1);
  else
    x->dep = index_of(g, &w, s - 1, w.c);
  if (s < a) { /* intra reduce-scatter */
    piece_of(g, &w, 1, mod((long long)g->l - (long long)s, g->L), x);
    x->peer = g->in_right;
  } else if (s < a + b) { /* cross reduce-scatter */
    piece_of(g, &w, 0, mod((long long)g->m - (long long)(s - a), g->M), x);
    x->peer = g->x_right;
  } else if (s < a + 2 * b) { /* cross all-gather */
    piece_of(g, &w, 0, mod((long long)g->m + 1 - (long long)(s - a - b), g->M), x);
    x->peer = g->x_right;
  } else { /* intra all-gather */
    piece_of(g, &w, 1, mod((long long)g->l + 1 - (long long)(s - a - 2 * b), g->L), x);
    x->peer = g->in_right;
  }
}

static void recv_at(const void *ctx, size_t i, dpt_xfer *x) {
  const hier *g = ctx;
  const where w = locate(g, i);
  const size_t s = w.s, a = g->a, b = g->b;
  x->dep = DPT_NO_DEP;
  x->dep2 = DPT_NO_DEP;
  if (s < a + b) { /* the reduce-scatters: into a slot, added */
    if (s < a) {
      piece_of(g, &w, 1, mod((long long)g->l - (long long)s - 1, g->L), x);
      x->peer = g->in_left;
    } else {
      piece_of(g, &w, 0, mod((long long)g->m - (long long)(s - a) - 1, g->M), x);
      x->peer = g->x_left;
      /* Added only after this rank's segment holds its node's sum: the first cross send,
       * which waits for the last intra receive, has completed. */
      if (g->s0 < a) x->dep2 = index_of(g, &w, a, 0);
    }
    x->reduce_dst = x->ptr;
    x->ptr = NULL;
    return;
  }
  /* The all-gathers: into place, once the reduce-scatter's send of that piece is gone. */
  x->reduce_dst = NULL;
  if (s < a + 2 * b) {
    const size_t t = s - a - b;
    piece_of(g, &w, 0, mod((long long)g->m - (long long)t, g->M), x);
    x->peer = g->x_left;
    if (a + t >= g->s0) x->dep = index_of(g, &w, a + t, w.c);
  } else {
    const size_t t = s - a - 2 * b;
    piece_of(g, &w, 1, mod((long long)g->l - (long long)t, g->L), x);
    x->peer = g->in_left;
    if (t >= g->s0) x->dep = index_of(g, &w, t, w.c);
  }
}

/* Steps [s0, s1) of the schedule over blocks of `block` elements. */
static dpt_status run_steps(dpt_comm *c, const dpt_ring_args *a, const dpt_sched *hooks, int tag,
                            dpt_what *what, size_t block, size_t s0, size_t s1) {
  hier g = {0};
  layout(c, c->rank, &g);
  g.esize = dpt_dtype_size(a->dtype);
  g.count = a->count;
  g.block = block;
  g.piece = c->opt.piece_bytes / g.esize ? c->opt.piece_bytes / g.esize : 1;
  g.nfull = a->count / g.block;
  const size_t lens[2] = {g.block, a->count % g.block};
  for (int k = 0; k < 2; ++k) {
    const size_t seg = div_up(lens[k], (size_t)g.L), sub = div_up(seg, (size_t)g.M);
    g.c_in[k] = seg > g.piece ? div_up(seg, g.piece) : 1;
    g.c_x[k] = sub > g.piece ? div_up(sub, g.piece) : 1;
  }
  g.s0 = s0;
  g.s1 = s1;
  for (int k = 0; k < 2; ++k)
    g.msgs[k] = before(&g, k, g.s1);
  g.data = a->data;
  g.block_ptr = a->block_ptr;
  g.st = hooks ? hooks->st : NULL;

  const size_t nmsg = g.nfull * g.msgs[FULL] + (lens[LAST] ? g.msgs[LAST] : 0);
  const size_t first = a->count < g.block ? a->count : g.block;
  size_t slot = div_up(first, (size_t)g.L);
  if (slot > g.piece) slot = g.piece;

  const dpt_sched s =
      dpt_sched_of(hooks, nmsg, nmsg, send_at, recv_at, &g, a->dtype, slot * g.esize);
  return dpt_engine_run(c, &s, tag, what);
}

/* A failed cross-node call, named with the ranks it waited for (the other nodes' ranks of
 * local index l: one of them did not arrive, or failed). */
static dpt_status cross_failed(const dpt_comm *c, const hier *g, dpt_status st, dpt_what *what) {
  char peers[128] = "";
  size_t len = 0;
  for (int n = 0, k = 0; n < g->M && len < sizeof peers - 16; ++n) {
    if (n == g->m) continue;
    if (k++ == 8) {
      len += (size_t)snprintf(peers + len, sizeof peers - len, ", ...");
      break;
    }
    len += (size_t)snprintf(peers + len, sizeof peers - len, "%s%d", k > 1 ? ", " : "",
                            rank_at(c, n, g->l));
  }
  return dpt_error_context(st, "%s: across nodes, %s rank%s %s", dpt_what_str(what),
                           st == DPT_ERR_TIMEOUT ? "waiting for" : "with", g->M > 2 ? "s" : "",
                           peers);
}

/* The native variant: the intra reduce-scatter over the whole vector as one block, the
 * transport's all-reduce of this rank's segment across nodes, the intra all-gather. */
static dpt_status run_native(dpt_comm *c, const dpt_ring_args *a, int tag, dpt_what *what) {
  hier g;
  layout(c, c->rank, &g);
  const size_t n = a->count, steps = 2 * (g.a + g.b);
  DPT_TRY(run_steps(c, a, NULL, tag, what, n, 0, g.a));
  size_t off, len;
  dpt_split(n, (size_t)g.L, (size_t)(g.l + 1) % (size_t)g.L, &off, &len);
  if (len > 0) {
    /* With the desync check the hello round has seen every rank arrive: the blocking call,
     * as for the `mpi` algorithm. */
    unsigned char *seg = (unsigned char *)a->data + off * dpt_dtype_size(a->dtype);
    dpt_status st = c->tp->cross_allreduce(c, seg, len, a->dtype, c->opt.desync_check,
                                           dpt_now() + c->opt.timeout_s);
    if (st != DPT_OK) return cross_failed(c, &g, st, what);
  }
  return run_steps(c, a, NULL, tag, what, n, g.a + 2 * g.b, steps);
}

static int native_applies(const dpt_comm *c, const dpt_ring_args *a, const dpt_sched *hooks) {
  return a->phase == DPT_RING_BOTH && !hooks && a->data && c->cross_native &&
         c->tp->cross_allreduce;
}

dpt_status dpt_hier_allreduce(dpt_comm *c, const dpt_ring_args *a, const dpt_sched *hooks, int tag,
                              dpt_what *what) {
  if (a->count == 0) return DPT_OK;
  if (native_applies(c, a, hooks)) return run_native(c, a, tag, what);
  hier g;
  layout(c, c->rank, &g);
  const size_t s0 = a->phase == DPT_RING_ALLGATHER ? g.a + g.b : 0;
  const size_t s1 = a->phase == DPT_RING_REDUCE_SCATTER ? g.a + g.b : 2 * (g.a + g.b);
  return run_steps(c, a, hooks, tag, what, dpt_block_elems(c, dpt_dtype_size(a->dtype)), s0, s1);
}
