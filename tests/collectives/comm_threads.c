/* Collectives over the threads transport: every rank is a thread of this process (as in
 * gloo's tests), inputs depend on the rank so results have a closed form, and the ranks'
 * results are compared byte for byte. Covers every algorithm, both dtypes, the odd counts,
 * host data and buffers of every backend present, broadcast, allgather, barrier, the desync
 * check (mismatched counts, dtypes, operations, roots), stalls (a rank that skips a
 * collective) and the options.
 *
 * `comm_threads` covers host data and CPU-backend buffers; `comm_threads opencl` (or vulkan)
 * runs the buffer tests on that backend (exit 77 when it is absent); `comm_threads large` runs
 * only the > 2^31-byte all-reduce (about 4.5 GB of memory, a few seconds). */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives/common/comm_struct.h"
#include "collectives/transports/transport.h"
#include "collectives/transports/shm.h"
#include "collectives/common/reduce.h"
#include "comm_cases.h"
#include "dptrain/comm.h"

#define MAX_RANKS 8

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- a team of threads, one per rank ------------------------------------------------------ */

typedef struct member_out {
  int rc;            /* 0: the rank's checks passed */
  dpt_status st;     /* for the failure tests: the status the rank saw */
  char err[1024];    /* message of the first failure, or of st */
  uint64_t hash[64]; /* fingerprints of results, compared across ranks */
  int nhash;
  double seconds; /* time the rank spent in its function */
} member_out;

typedef struct team team;
typedef void (*rank_fn)(dpt_comm *c, const team *t, member_out *out);

struct team {
  int size;
  dpt_comm_options opt; /* applied to every member */
  dpt_backend_kind backend;
  int use_backend; /* data in buffers of `backend` */
  int mixed;       /* odd ranks use host data, even ranks buffers */
  int fn_destroys; /* fn destroys its member itself */
  const void *arg;
  const int *nodes; /* [size]: fake nodes of the ranks (dpt_comm_group_set_nodes), or NULL */
  rank_fn fn;
  dpt_comm_group *group;
  member_out out[MAX_RANKS];
};

typedef struct thread_arg {
  team *t;
  int rank;
} thread_arg;

static void *rank_main(void *p) {
  thread_arg *a = p;
  team *t = a->t;
  member_out *out = &t->out[a->rank];
  dpt_comm *c = NULL;
  dpt_status st = dpt_comm_group_member(t->group, a->rank, &c);
  if (st == DPT_OK) st = dpt_comm_set_options(c, &t->opt);
  if (st != DPT_OK) {
    out->rc = -1;
    snprintf(out->err, sizeof out->err, "member %d: %s", a->rank, dpt_last_error());
  } else {
    double t0 = now_s();
    t->fn(c, t, out);
    out->seconds = now_s() - t0;
  }
  if (st != DPT_OK || !t->fn_destroys) dpt_comm_destroy(c);
  return NULL;
}

/* Runs fn on `size` ranks and asserts that every rank passed and that their fingerprints
 * agree. */
static void run_team(team *t) {
  pthread_t th[MAX_RANKS];
  thread_arg args[MAX_RANKS];
  memset(t->out, 0, sizeof t->out);
  ck_assert_int_eq(dpt_comm_group_create(t->size, &t->group), DPT_OK);
  if (t->nodes) ck_assert_int_eq(dpt_comm_group_set_nodes(t->group, t->nodes), DPT_OK);
  for (int r = 0; r < t->size; ++r) {
    args[r].t = t;
    args[r].rank = r;
    ck_assert_int_eq(pthread_create(&th[r], NULL, rank_main, &args[r]), 0);
  }
  for (int r = 0; r < t->size; ++r)
    pthread_join(th[r], NULL);
  dpt_comm_group_destroy(t->group);
  for (int r = 0; r < t->size; ++r)
    ck_assert_msg(t->out[r].rc == 0, "size %d rank %d: %s", t->size, r, t->out[r].err);
  for (int r = 1; r < t->size; ++r) {
    ck_assert_int_eq(t->out[r].nhash, t->out[0].nhash);
    for (int i = 0; i < t->out[0].nhash; ++i)
      ck_assert_msg(t->out[r].hash[i] == t->out[0].hash[i],
                    "size %d: result %d of rank %d differs from rank 0's (not bit-identical)",
                    t->size, i, r);
  }
}

static void team_init(team *t, int size, rank_fn fn, const void *arg) {
  memset(t, 0, sizeof *t);
  t->size = size;
  t->fn = fn;
  t->arg = arg;
  dpt_comm_options_default(&t->opt);
  t->opt.timeout_s = 20.0; /* a broken test fails in seconds, not minutes */
}

/* A backend for this rank when the team uses buffers (NULL: host data). */
static dpt_backend *rank_backend(dpt_comm *c, const team *t, member_out *out) {
  if (!t->use_backend || (t->mixed && dpt_comm_rank(c) % 2 == 1)) return NULL;
  dpt_backend *be = NULL;
  if (dpt_backend_create(t->backend, 0, &be) != DPT_OK) {
    out->rc = -1;
    snprintf(out->err, sizeof out->err, "backend %s: %s", dpt_backend_kind_name(t->backend),
             dpt_last_error());
  }
  return be;
}

/* ---- all-reduce: closed form over the odd counts ------------------------------------------ */

/* fn (an all-reduce or the sharded pair) over every odd count and both dtypes. */
static void counts_with(dpt_comm *c, const team *t, member_out *out, comm_count_case fn,
                        const char *label) {
  dpt_backend *be = rank_backend(c, t, out);
  if (out->rc) return;
  size_t counts[32];
  int n = comm_case_counts(dpt_comm_size(c), counts, 32);
  static const dpt_comm_dtype dts[] = {DPT_COMM_F32, DPT_COMM_F16, DPT_COMM_BF16};
  static const char *const names[] = {"f32", "f16", "bf16"};
  for (int d = 0; d < 3 && out->rc == 0; ++d) {
    for (int i = 0; i < n && out->rc == 0 && out->nhash < 64; ++i) {
      out->rc = fn(c, be, counts[i], dts[d], &out->hash[out->nhash++], out->err, sizeof out->err);
      if (out->rc) {
        size_t len = strlen(out->err);
        snprintf(out->err + len, sizeof out->err - len, " [count %zu %s %s]", counts[i], names[d],
                 label);
      }
    }
  }
  dpt_backend_destroy(be);
}

static void allreduce_counts(dpt_comm *c, const team *t, member_out *out) {
  counts_with(c, t, out, comm_case_allreduce, dpt_allreduce_algo_name(t->opt.algo));
}

static const dpt_allreduce_algo own_algos[] = {DPT_ALLREDUCE_AUTO, DPT_ALLREDUCE_RING,
                                               DPT_ALLREDUCE_RD, DPT_ALLREDUCE_DIRECT};

START_TEST(allreduce_host_closed_form) {
  for (int size = 1; size <= 5; ++size) {
    for (unsigned a = 0; a < sizeof own_algos / sizeof *own_algos; ++a) {
      for (int tiny = 0; tiny < 2; ++tiny) {
        team t;
        team_init(&t, size, allreduce_counts, NULL);
        t.opt.algo = own_algos[a];
        if (tiny) comm_case_tiny(&t.opt);
        run_team(&t);
      }
    }
  }
}
END_TEST

START_TEST(allreduce_desync_off) {
  for (int size = 2; size <= 4; ++size) {
    for (unsigned a = 0; a < sizeof own_algos / sizeof *own_algos; ++a) {
      team t;
      team_init(&t, size, allreduce_counts, NULL);
      t.opt.algo = own_algos[a];
      t.opt.desync_check = 0;
      comm_case_tiny(&t.opt);
      run_team(&t);
    }
  }
}
END_TEST

/* The backend whose buffers the buffer tests use (main's argument, CPU by default). */
static dpt_backend_kind g_backend = DPT_BACKEND_CPU;

/* Buffers of the backend under test, every staging mode. */
START_TEST(allreduce_buffers) {
  const int sizes[] = {2, 3};
  for (int s = 0; s < 2; ++s) {
    for (unsigned a = 0; a < sizeof own_algos / sizeof *own_algos; ++a) {
      for (int mode = 0; mode < COMM_CASE_STAGINGS; ++mode) {
        /* GPU drivers on the CPU are slow to create: 3 ranks only on the CPU backend. */
        if (g_backend != DPT_BACKEND_CPU && sizes[s] != 2) continue;
        team t;
        team_init(&t, sizes[s], allreduce_counts, NULL);
        t.use_backend = 1;
        t.backend = g_backend;
        t.opt.algo = own_algos[a];
        t.opt.staging = comm_case_staging(mode);
        comm_case_tiny(&t.opt);
        run_team(&t);
      }
    }
  }
}
END_TEST

/* Host data on some ranks and device buffers on others take part in the same collectives. */
START_TEST(allreduce_mixed_host_and_buffers) {
  team t;
  team_init(&t, 3, allreduce_counts, NULL);
  t.use_backend = 1;
  t.mixed = 1;
  t.backend = DPT_BACKEND_CPU;
  comm_case_tiny(&t.opt);
  run_team(&t);
}
END_TEST

/* Default knobs, buffers larger than a block: several staging blocks in flight. */
static void allreduce_big(dpt_comm *c, const team *t, member_out *out) {
  dpt_backend *be = rank_backend(c, t, out);
  if (out->rc) return;
  const size_t counts[] = {(3u << 20) + 7, (1u << 20) + 1}; /* 12 MiB + 28 B, 4 MiB + 4 B */
  for (int i = 0; i < 2 && out->rc == 0; ++i)
    out->rc = comm_case_allreduce(c, be, counts[i], DPT_COMM_F32, &out->hash[out->nhash++],
                                  out->err, sizeof out->err);
  dpt_backend_destroy(be);
}

START_TEST(allreduce_buffers_several_blocks) {
  for (int mode = 0; mode < COMM_CASE_STAGINGS; ++mode) {
    team t;
    team_init(&t, 2, allreduce_big, NULL);
    t.use_backend = 1;
    t.backend = DPT_BACKEND_CPU;
    t.opt.staging = comm_case_staging(mode);
    t.opt.block_bytes = (size_t)1 << 20;
    run_team(&t);
  }
}
END_TEST

/* Sums that depend on the order of additions still come out bit-identical on every rank. */
static void inexact(dpt_comm *c, const team *t, member_out *out) {
  (void)t;
  const size_t counts[] = {3, 1000, 10007, 70001};
  for (int i = 0; i < 4 && out->rc == 0; ++i)
    out->rc = comm_case_inexact(c, counts[i], &out->hash[out->nhash++], out->err, sizeof out->err);
  for (int i = 0; i < 4 && out->rc == 0; ++i)
    out->rc =
        comm_case_inexact_bf16(c, counts[i], &out->hash[out->nhash++], out->err, sizeof out->err);
}

START_TEST(allreduce_bit_identical) {
  for (int size = 2; size <= 5; ++size) {
    for (unsigned a = 0; a < sizeof own_algos / sizeof *own_algos; ++a) {
      for (int tiny = 0; tiny < 2; ++tiny) {
        team t;
        team_init(&t, size, inexact, NULL);
        t.opt.algo = own_algos[a];
        if (tiny) {
          t.opt.piece_bytes = 256;
          t.opt.block_bytes = 4096;
        }
        run_team(&t);
      }
    }
  }
}
END_TEST

/* ---- reduce-scatter and all-gather of shards ---------------------------------------------- */

static void sharded_counts(dpt_comm *c, const team *t, member_out *out) {
  counts_with(c, t, out, comm_case_sharded, "reduce-scatter + all-gather");
}

START_TEST(sharded_host_closed_form) {
  for (int size = 1; size <= 5; ++size)
    for (int tiny = 0; tiny < 2; ++tiny) {
      team t;
      team_init(&t, size, sharded_counts, NULL);
      if (tiny) comm_case_tiny(&t.opt);
      t.opt.desync_check = size != 4; /* also without the hello round */
      run_team(&t);
    }
}
END_TEST

START_TEST(sharded_buffers) {
  for (int size = 2; size <= 3; ++size)
    for (int mode = 0; mode < COMM_CASE_STAGINGS; ++mode) {
      if (g_backend != DPT_BACKEND_CPU && size != 2) continue;
      team t;
      team_init(&t, size, sharded_counts, NULL);
      t.use_backend = 1;
      t.backend = g_backend;
      t.opt.staging = comm_case_staging(mode);
      comm_case_tiny(&t.opt);
      run_team(&t);
    }
}
END_TEST

static void sharded_inexact(dpt_comm *c, const team *t, member_out *out) {
  (void)t;
  const size_t counts[] = {3, 1000, 10007, 70001};
  for (int i = 0; i < 4 && out->rc == 0; ++i)
    out->rc =
        comm_case_sharded_inexact(c, counts[i], DPT_ALLREDUCE_RING, out->err, sizeof out->err);
}

START_TEST(sharded_equals_ring) {
  for (int size = 2; size <= 5; ++size)
    for (int tiny = 0; tiny < 2; ++tiny) {
      team t;
      team_init(&t, size, sharded_inexact, NULL);
      if (tiny) {
        t.opt.piece_bytes = 256;
        t.opt.block_bytes = 4096;
      }
      run_team(&t);
    }
}
END_TEST

/* ---- hierarchical all-reduce over fake nodes ---------------------------------------------- */

typedef struct grouping {
  int size;
  int node[MAX_RANKS]; /* rank r's node (any ids) */
  const char *name;
} grouping;

/* Every node the same number of ranks: the hierarchical path applies. */
static const grouping even_groupings[] = {
    {4, {0, 0, 1, 1}, "2x2"},
    {6, {0, 0, 0, 1, 1, 1}, "2 nodes x 3"},
    {6, {0, 0, 1, 1, 2, 2}, "3 nodes x 2"},
    {8, {0, 0, 1, 1, 2, 2, 3, 3}, "4 nodes x 2"},
    {6, {7, 3, 7, 3, 3, 7}, "2 nodes x 3, interleaved"},
    {8, {0, 1, 2, 3, 3, 2, 1, 0}, "4 nodes x 2, mirrored"},
};
enum { N_EVEN = sizeof even_groupings / sizeof *even_groupings };

/* The algorithm a large all-reduce must pick: HIER where it applies and is allowed. */
static dpt_allreduce_algo large_pick(const team *t, int applies) {
  return applies && (t->opt.algo == DPT_ALLREDUCE_AUTO || t->opt.algo == DPT_ALLREDUCE_HIER)
             ? DPT_ALLREDUCE_HIER
             : DPT_ALLREDUCE_RING;
}

static void check_pick(dpt_comm *c, const team *t, member_out *out) {
  const int applies = *(const int *)t->arg;
  const dpt_allreduce_algo want = large_pick(t, applies),
                           got = dpt_comm_pick_algo(c, (size_t)1 << 24, DPT_COMM_F32);
  if (got != want) {
    out->rc = -1;
    snprintf(out->err, sizeof out->err, "rank %d: a 64 MiB all-reduce picks %s, expected %s",
             dpt_comm_rank(c), dpt_allreduce_algo_name(got), dpt_allreduce_algo_name(want));
  }
}

static void hier_allreduce_counts(dpt_comm *c, const team *t, member_out *out) {
  check_pick(c, t, out);
  if (out->rc == 0) allreduce_counts(c, t, out);
}

static void hier_sharded_counts(dpt_comm *c, const team *t, member_out *out) {
  check_pick(c, t, out);
  if (out->rc == 0) sharded_counts(c, t, out);
}

static const int applies_yes = 1, applies_no = 0;

START_TEST(hier_host_closed_form) {
  const dpt_allreduce_algo algos[] = {DPT_ALLREDUCE_HIER, DPT_ALLREDUCE_AUTO, DPT_ALLREDUCE_RING};
  for (int g = 0; g < N_EVEN; ++g)
    for (int a = 0; a < 3; ++a)
      for (int tiny = 0; tiny < 2; ++tiny) {
        team t;
        team_init(&t, even_groupings[g].size, hier_allreduce_counts, &applies_yes);
        t.nodes = even_groupings[g].node;
        t.opt.algo = algos[a];
        if (tiny) comm_case_tiny(&t.opt);
        t.opt.desync_check = g != 1; /* also without the hello round */
        run_team(&t);
      }
}
END_TEST

START_TEST(hier_sharded_closed_form) {
  for (int g = 0; g < N_EVEN; ++g)
    for (int tiny = 0; tiny < 2; ++tiny) {
      team t;
      team_init(&t, even_groupings[g].size, hier_sharded_counts, &applies_yes);
      t.nodes = even_groupings[g].node;
      if (tiny) comm_case_tiny(&t.opt);
      run_team(&t);
    }
}
END_TEST

/* Host data on some ranks, CPU-backend buffers on others, every staging mode. */
START_TEST(hier_buffers) {
  const int pick[] = {0, 4, 3}; /* 2x2, 2 x 3 interleaved, 4 x 2 */
  for (int p = 0; p < 3; ++p)
    for (int mode = 0; mode < COMM_CASE_STAGINGS; ++mode)
      for (int sharded = 0; sharded < 2; ++sharded) {
        const grouping *gr = &even_groupings[pick[p]];
        team t;
        team_init(&t, gr->size, sharded ? hier_sharded_counts : hier_allreduce_counts,
                  &applies_yes);
        t.nodes = gr->node;
        t.use_backend = 1;
        t.mixed = p == 1;
        t.backend = DPT_BACKEND_CPU;
        t.opt.algo = DPT_ALLREDUCE_HIER;
        t.opt.staging = comm_case_staging(mode);
        comm_case_tiny(&t.opt);
        run_team(&t);
      }
}
END_TEST

/* Part i of a balanced split of len into n (the split the algorithms use, rewritten). */
static void test_split(size_t len, size_t n, size_t i, size_t *off, size_t *part) {
  *off = 0;
  for (size_t q = 0; q < i; ++q)
    *off += len / n + (q < len % n);
  *part = len / n + (i < len % n);
}

/* Element i of the hierarchical all-reduce of comm_case_inexact_input, in the order
 * docs/collectives.md states: in each node from local index k (the element's segment), then
 * across the nodes from node j (its sub-segment). */
static float hier_order_sum(const int *node, int size, size_t block, size_t count, size_t i) {
  int id[MAX_RANKS], nn = 0, members[MAX_RANKS][MAX_RANKS], nmem[MAX_RANKS] = {0};
  for (int r = 0; r < size; ++r) {
    int q = 0;
    while (q < r && node[q] != node[r])
      ++q;
    id[r] = q < r ? id[q] : nn++;
    members[id[r]][nmem[id[r]]++] = r;
  }
  const size_t M = (size_t)nn, L = (size_t)size / M;
  const size_t start = i / block * block, len = count - start < block ? count - start : block;
  const size_t pos = i - start;
  size_t k = 0, j = 0, off = 0, part = 0, sub_off = 0, sub = 0;
  for (k = 0; k < L; ++k) {
    test_split(len, L, k, &off, &part);
    if (pos < off + part) break;
  }
  for (j = 0; j < M; ++j) {
    test_split(part, M, j, &sub_off, &sub);
    if (pos - off < sub_off + sub) break;
  }
  float total = 0.0f;
  for (size_t q = 0; q < M; ++q) {
    const size_t n = (j + q) % M;
    float p = comm_case_inexact_input(members[n][k], i);
    for (size_t u = 1; u < L; ++u)
      p = p + comm_case_inexact_input(members[n][(k + u) % L], i);
    total = q ? total + p : p;
  }
  return total;
}

/* Order-dependent sums: the stated order bit for bit, and reduce-scatter + all-gather give
 * the all-reduce's bits. */
static void hier_order(dpt_comm *c, const team *t, member_out *out) {
  const size_t counts[] = {3, 1000, 10007, 70001};
  const int rank = dpt_comm_rank(c);
  const size_t block = t->opt.block_bytes / sizeof(float);
  for (int n = 0; n < 4 && out->rc == 0; ++n) {
    const size_t count = counts[n];
    float *x = malloc(count * sizeof *x);
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < count; ++i)
      x[i] = comm_case_inexact_input(rank, i);
    dpt_status st = dpt_allreduce_host(c, x, count, DPT_COMM_F32);
    if (st != DPT_OK) {
      out->rc = -1;
      snprintf(out->err, sizeof out->err, "all-reduce: %s", dpt_last_error());
    }
    for (size_t i = 0; i < count && out->rc == 0; ++i) {
      const float want = hier_order_sum(t->nodes, t->size, block, count, i);
      if (memcmp(&want, &x[i], sizeof want) != 0) {
        out->rc = -1;
        snprintf(out->err, sizeof out->err,
                 "rank %d: element %zu of %zu is %.9g, the stated order gives %.9g", rank, i, count,
                 (double)x[i], (double)want);
      }
    }
    out->hash[out->nhash++] = comm_case_hash(x, count * sizeof *x);
    free(x);
    if (out->rc == 0)
      out->rc = comm_case_sharded_inexact(c, count, DPT_ALLREDUCE_HIER, out->err, sizeof out->err);
  }
}

/* The trainer's buckets: a reduce-scatter cut into block-aligned ranges leaves the whole
 * vector's shard with the same bits as one reduce-scatter of all of it. */
static void hier_buckets(dpt_comm *c, const team *t, member_out *out) {
  const size_t count = 10007, block = t->opt.block_bytes / sizeof(float), cut = 37 * block;
  const int rank = dpt_comm_rank(c);
  float *x = malloc(count * sizeof *x), *y = malloc(count * sizeof *y);
  dpt_range *rg = malloc(count * sizeof *rg);
  ck_assert(x && y && rg);
  for (size_t i = 0; i < count; ++i)
    x[i] = y[i] = comm_case_inexact_input(rank, i);
  dpt_status st = dpt_reduce_scatter_host(c, x, count, DPT_COMM_F32);
  if (st == DPT_OK) st = dpt_reduce_scatter_host(c, y + cut, count - cut, DPT_COMM_F32);
  if (st == DPT_OK) st = dpt_reduce_scatter_host(c, y, cut, DPT_COMM_F32);
  if (st != DPT_OK) {
    out->rc = -1;
    snprintf(out->err, sizeof out->err, "reduce-scatter: %s", dpt_last_error());
  }
  const size_t n = dpt_comm_shard(c, count, DPT_COMM_F32, rank, rg, count);
  for (size_t i = 0; i < n && out->rc == 0; ++i)
    if (memcmp(x + rg[i].offset, y + rg[i].offset, rg[i].count * sizeof *x) != 0) {
      out->rc = -1;
      snprintf(out->err, sizeof out->err, "rank %d: shard range %zu differs when bucketed", rank,
               i);
    }
  free(x);
  free(y);
  free(rg);
}

START_TEST(hier_bucketed_reduce_scatter) {
  for (int g = 0; g < N_EVEN; ++g) {
    team t;
    team_init(&t, even_groupings[g].size, hier_buckets, NULL);
    t.nodes = even_groupings[g].node;
    t.opt.piece_bytes = 128;
    t.opt.block_bytes = 256;
    run_team(&t);
  }
}
END_TEST

START_TEST(hier_sum_order) {
  for (int g = 0; g < N_EVEN; ++g)
    for (int tiny = 0; tiny < 2; ++tiny) {
      team t;
      team_init(&t, even_groupings[g].size, hier_order, NULL);
      t.nodes = even_groupings[g].node;
      t.opt.algo = DPT_ALLREDUCE_HIER;
      if (tiny) {
        t.opt.piece_bytes = 256;
        t.opt.block_bytes = 4096;
      }
      run_team(&t);
    }
}
END_TEST

/* Nodes of unequal sizes, or of one rank each: the flat ring, with its shards. */
START_TEST(hier_fallback) {
  const grouping uneven[] = {
      {5, {0, 0, 1, 1, 2}, "2 + 2 + 1"},
      {3, {0, 1, 2}, "3 nodes x 1"},
      {5, {4, 4, 4, 4, 4}, "one node"},
  };
  for (int g = 0; g < 3; ++g)
    for (int a = 0; a < 2; ++a)
      for (int sharded = 0; sharded < 2; ++sharded) {
        team t;
        team_init(&t, uneven[g].size, sharded ? hier_sharded_counts : hier_allreduce_counts,
                  &applies_no);
        t.nodes = uneven[g].node;
        t.opt.algo = a ? DPT_ALLREDUCE_AUTO : DPT_ALLREDUCE_HIER;
        comm_case_tiny(&t.opt);
        run_team(&t);
      }
}
END_TEST

/* The shard layout on 2 nodes x 2 (8 elements, one block): rank (node m, local l) owns
 * sub-segment (m + 1) mod 2 of segment (l + 1) mod 2; with the ring forced, the ring's. Node
 * ids are fixed before the first member is obtained. */
START_TEST(hier_shard_layout) {
  dpt_comm_group *g = NULL;
  ck_assert_int_eq(dpt_comm_group_create(4, &g), DPT_OK);
  const int bad[] = {0, -1, 1, 1}, nodes[] = {0, 0, 1, 1};
  ck_assert_int_eq(dpt_comm_group_set_nodes(g, bad), DPT_ERR_INVALID_ARG);
  ck_assert_int_eq(dpt_comm_group_set_nodes(g, nodes), DPT_OK);
  dpt_comm *c[4];
  for (int r = 0; r < 4; ++r)
    ck_assert_int_eq(dpt_comm_group_member(g, r, &c[r]), DPT_OK);
  ck_assert_int_eq(dpt_comm_group_set_nodes(g, NULL), DPT_ERR_INVALID_ARG);
  for (int r = 0; r < 4; ++r) {
    const size_t m = (size_t)r / 2, l = (size_t)r % 2;
    dpt_range rg[2];
    ck_assert_uint_eq(dpt_comm_shard(c[0], 8, DPT_COMM_F32, r, rg, 2), 1);
    ck_assert_uint_eq(rg[0].offset, 4 * ((l + 1) % 2) + 2 * ((m + 1) % 2));
    ck_assert_uint_eq(rg[0].count, 2);
  }
  ck_assert_int_eq(dpt_comm_set_algo(c[0], DPT_ALLREDUCE_RING), DPT_OK);
  dpt_range rg;
  ck_assert_uint_eq(dpt_comm_shard(c[0], 8, DPT_COMM_F32, 0, &rg, 1), 1);
  ck_assert_uint_eq(rg.offset, 2);
  for (int r = 0; r < 4; ++r)
    dpt_comm_destroy(c[r]);
  dpt_comm_group_destroy(g);
}
END_TEST

/* ---- broadcast, allgather, barrier ---------------------------------------------------------- */

static void broadcasts(dpt_comm *c, const team *t, member_out *out) {
  dpt_backend *be = rank_backend(c, t, out);
  if (out->rc) return;
  const size_t sizes[] = {0, 1, 100, 65536, 65537, 300001};
  const int size = dpt_comm_size(c);
  const int roots[] = {0, size - 1, size / 2};
  for (int r = 0; r < 3 && out->rc == 0; ++r)
    for (int i = 0; i < 6 && out->rc == 0; ++i)
      out->rc = comm_case_broadcast(c, be, sizes[i], roots[r], out->err, sizeof out->err);
  dpt_backend_destroy(be);
}

START_TEST(broadcast_host_and_buffers) {
  for (int size = 1; size <= 4; ++size) {
    for (int dev = 0; dev < 2; ++dev) {
      for (int variant = 0; variant < 3; ++variant) {
        team t;
        team_init(&t, size, broadcasts, NULL);
        t.use_backend = dev;
        t.backend = g_backend;
        if (variant >= 1) {
          t.opt.piece_bytes = 1024;
          t.opt.block_bytes = 4096;
        }
        if (variant == 2) t.opt.desync_check = 0;
        run_team(&t);
      }
    }
  }
}
END_TEST

static void allgathers(dpt_comm *c, const team *t, member_out *out) {
  (void)t;
  const size_t sizes[] = {0, 1, 8, 65536, 65537, 200003};
  for (int i = 0; i < 6 && out->rc == 0; ++i)
    out->rc = comm_case_allgather(c, sizes[i], out->err, sizeof out->err);
}

START_TEST(allgather_sizes) {
  for (int size = 1; size <= 4; ++size) {
    for (int desync = 0; desync < 2; ++desync) {
      team t;
      team_init(&t, size, allgathers, NULL);
      t.opt.desync_check = desync;
      t.opt.piece_bytes = 4096;
      t.opt.block_bytes = 4096;
      run_team(&t);
    }
  }
}
END_TEST

static int arrived;
static pthread_mutex_t arrived_lock = PTHREAD_MUTEX_INITIALIZER;

static void barrier_rank(dpt_comm *c, const team *t, member_out *out) {
  /* Late arrivals: rank r sleeps r * 20 ms; nobody may leave before the last has come. */
  for (int round = 0; round < 3 && out->rc == 0; ++round) {
    struct timespec ts = {0, (long)dpt_comm_rank(c) * 20000000L};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&arrived_lock);
    ++arrived;
    pthread_mutex_unlock(&arrived_lock);
    dpt_status st = dpt_barrier(c);
    pthread_mutex_lock(&arrived_lock);
    int seen = arrived;
    pthread_mutex_unlock(&arrived_lock);
    if (st != DPT_OK || seen < (round + 1) * t->size) {
      out->rc = -1;
      snprintf(out->err, sizeof out->err, "barrier round %d: %s, %d of %d arrived", round,
               dpt_status_name(st), seen, (round + 1) * t->size);
    }
    /* The next round's increments must not be seen by this round's check. */
    if (dpt_barrier(c) != DPT_OK) out->rc = -1;
  }
}

/* One all-reduce of rank + 1 on 2 members (sum 3), a failure recorded in *out for round i. */
static void sum_pair(dpt_comm *c, int i, member_out *out) {
  float x = (float)(dpt_comm_rank(c) + 1);
  dpt_status st = dpt_allreduce_host(c, &x, 1, DPT_COMM_F32);
  if (st != DPT_OK || x != 3.0f) {
    out->rc = -1;
    snprintf(out->err, sizeof out->err, "round %d: %s: %s (sum %g)", i, dpt_status_name(st),
             st == DPT_OK ? "" : dpt_last_error(), (double)x);
  }
}

/* Many small all-reduces where one member arrives after a random delay around the spin
 * window of the threads transport: the other member's wait ends in the spin, in the sleep,
 * or right between the two. A wake-up lost there stalls the member until the (short)
 * timeout. */
static void wakeup_rank(dpt_comm *c, const team *t, member_out *out) {
  (void)t;
  const int rank = dpt_comm_rank(c);
  uint32_t s = 12345u + (uint32_t)rank;
  for (int i = 0; i < 4000 && out->rc == 0; ++i) {
    s = s * 1664525u + 1013904223u;
    if (rank == 1) { /* 0 to 400 us, busy: the spin window is 200 us */
      const double until = now_s() + (double)(s >> 8) / (double)(1u << 24) * 400e-6;
      while (now_s() < until) {
      }
    }
    sum_pair(c, i, out);
  }
}

START_TEST(wakeups_around_the_spin) {
  team t;
  team_init(&t, 2, wakeup_rank, NULL);
  t.opt.timeout_s = 5.0;
  run_team(&t);
}
END_TEST

/* A member 20 ms late, so that the other one sleeps on its condition variable rather than
 * spinning: with a timeout meant as "forever" the sleep's deadline must still be a valid
 * time (it overflowed time_t, and every sleep failed with EINVAL). */
static void late_rank(dpt_comm *c, const team *t, member_out *out) {
  (void)t;
  const int rank = dpt_comm_rank(c);
  for (int i = 0; i < 3 && out->rc == 0; ++i) {
    if (rank == 1) nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    sum_pair(c, i, out);
  }
}

START_TEST(timeout_forever) {
  const double forever[] = {1e20, 1e300};
  for (int k = 0; k < 2; ++k) {
    team t;
    team_init(&t, 2, late_rank, NULL);
    t.opt.timeout_s = forever[k];
    run_team(&t);
  }
}
END_TEST

START_TEST(barrier_waits_for_all) {
  arrived = 0;
  team t;
  team_init(&t, 4, barrier_rank, NULL);
  run_team(&t);
}
END_TEST

/* ---- desync check: every rank returns DPT_ERR_MISMATCH, promptly ------------------------ */

typedef struct mismatch_case {
  const char *name;
  int kind; /* 0: rank 1's count, 1: dtype, 2: op, 3: broadcast root, 4: piece option,
               5: rank 1 reduce-scatters where the others all-reduce, 6: rank 1's count in an
               all-gather of shards, 7: rank 1 sums bfloat16 where the others sum float16 */
  size_t count1;
} mismatch_case;

static void mismatch_rank(dpt_comm *c, const team *t, member_out *out) {
  const mismatch_case *m = t->arg;
  const int rank = dpt_comm_rank(c);
  const size_t count = 1000;
  float *x = calloc(2 * count + 2, sizeof *x);
  dpt_status st = DPT_OK;
  if (m->kind == 0) {
    st = dpt_allreduce_host(c, x, rank == 1 ? m->count1 : count, DPT_COMM_F32);
  } else if (m->kind == 1) {
    st = dpt_allreduce_host(c, x, count, rank == 1 ? DPT_COMM_F16 : DPT_COMM_F32);
  } else if (m->kind == 7) {
    st = dpt_allreduce_host(c, x, count, rank == 1 ? DPT_COMM_BF16 : DPT_COMM_F16);
  } else if (m->kind == 2) {
    st = rank == 1 ? dpt_barrier(c) : dpt_allreduce_host(c, x, count, DPT_COMM_F32);
  } else if (m->kind == 3) {
    st = dpt_broadcast_host(c, x, count, rank == 1 ? 1 : 0);
  } else if (m->kind == 5) {
    st = rank == 1 ? dpt_reduce_scatter_host(c, x, count, DPT_COMM_F32)
                   : dpt_allreduce_host(c, x, count, DPT_COMM_F32);
  } else if (m->kind == 6) {
    st = dpt_allgather_shards_host(c, x, rank == 1 ? m->count1 : count, DPT_COMM_F32);
  } else {
    if (rank == 1) {
      dpt_comm_options o;
      dpt_comm_get_options(c, &o);
      o.piece_bytes /= 2;
      dpt_comm_set_options(c, &o);
    }
    st = dpt_allreduce_host(c, x, count * 100, DPT_COMM_F32);
  }
  free(x);
  out->st = st;
  snprintf(out->err, sizeof out->err, "%s", dpt_last_error());
}

START_TEST(mismatch_reported_everywhere) {
  const mismatch_case cases[] = {
      {"count 2x", 0, 2000},
      {"count 1/2x", 0, 500},
      {"count +1", 0, 1001},
      {"count 0", 0, 0},
      {"dtype", 1, 0},
      {"operation", 2, 0},
      {"root", 3, 0},
      {"piece size", 4, 0},
      {"reduce-scatter vs all-reduce", 5, 0},
      {"shards count +1", 6, 1001},
      {"bfloat16 vs float16", 7, 0},
  };
  for (unsigned i = 0; i < sizeof cases / sizeof *cases; ++i) {
    for (int desync_algo = 0; desync_algo < 2; ++desync_algo) {
      team t;
      team_init(&t, 3, mismatch_rank, &cases[i]);
      t.opt.timeout_s = 5.0;
      t.opt.algo = desync_algo ? DPT_ALLREDUCE_RING : DPT_ALLREDUCE_AUTO;
      double t0 = now_s();
      run_team(&t);
      double took = now_s() - t0;
      ck_assert_msg(took < 4.0, "%s: took %.1f s (deadline 5 s)", cases[i].name, took);
      for (int r = 0; r < 3; ++r) {
        ck_assert_msg(t.out[r].st == DPT_ERR_MISMATCH, "%s: rank %d returned %s: %s", cases[i].name,
                      r, dpt_status_name(t.out[r].st), t.out[r].err);
        ck_assert_msg(strstr(t.out[r].err, "#0"), "%s: no sequence number in '%s'", cases[i].name,
                      t.out[r].err);
        for (int q = 0; q < 3; ++q) {
          char who[32];
          snprintf(who, sizeof who, "rank %d: ", q);
          ck_assert_msg(strstr(t.out[r].err, who), "%s: '%s' does not name rank %d", cases[i].name,
                        t.out[r].err, q);
        }
      }
      if (cases[i].kind == 5)
        ck_assert_msg(strstr(t.out[0].err, "rank 1: reduce-scatter #0 (1000 x float32)"), "%s",
                      t.out[0].err);
      if (cases[i].kind == 6)
        ck_assert_msg(strstr(t.out[2].err, "rank 1: allgather of shards #0 (1001 x float32)"), "%s",
                      t.out[2].err);
      if (cases[i].kind == 7) {
        ck_assert_msg(strstr(t.out[0].err, "rank 1: allreduce #0 (1000 x bfloat16"), "%s",
                      t.out[0].err);
        ck_assert_msg(strstr(t.out[2].err, "rank 0: allreduce #0 (1000 x float16"), "%s",
                      t.out[2].err);
      }
      if (cases[i].kind == 0) {
        char want[64];
        snprintf(want, sizeof want, "rank 1: allreduce #0 (%zu x float32", cases[i].count1);
        ck_assert_msg(strstr(t.out[0].err, want), "'%s' lacks '%s'", t.out[0].err, want);
        ck_assert_msg(strstr(t.out[0].err, "rank 0: allreduce #0 (1000 x float32"), "%s",
                      t.out[0].err);
      }
    }
  }
}
END_TEST

/* A rank that rejects its arguments makes the others fail at once, not at the deadline. */
static void bad_args_rank(dpt_comm *c, const team *t, member_out *out) {
  (void)t;
  float x[16] = {0};
  out->st = dpt_allreduce_host(c, dpt_comm_rank(c) == 1 ? NULL : x, 16, DPT_COMM_F32);
  snprintf(out->err, sizeof out->err, "%s", dpt_last_error());
}

START_TEST(bad_arguments_on_one_rank) {
  team t;
  team_init(&t, 3, bad_args_rank, NULL);
  t.opt.timeout_s = 5.0;
  double t0 = now_s();
  run_team(&t);
  ck_assert(now_s() - t0 < 4.0);
  ck_assert_int_eq(t.out[1].st, DPT_ERR_INVALID_ARG);
  ck_assert_msg(strstr(t.out[1].err, "data is NULL"), "%s", t.out[1].err);
  for (int r = 0; r < 3; r += 2) {
    ck_assert_int_eq(t.out[r].st, DPT_ERR_COMM);
    ck_assert_msg(strstr(t.out[r].err, "rank 1 failed"), "%s", t.out[r].err);
  }
}
END_TEST

/* ---- stalls: a rank that skips a collective ----------------------------------------------- */

typedef struct stall_case {
  int desync;
  int op; /* 0 allreduce, 1 broadcast, 2 barrier, 3 allgather, 4 buffer all-reduce */
  dpt_allreduce_algo algo;
} stall_case;

static void stall_rank(dpt_comm *c, const team *t, member_out *out) {
  const stall_case *s = t->arg;
  if (dpt_comm_rank(c) == 1) return; /* skips the collective and leaves */
  enum { N = 100000 };
  float *x = calloc(N * 4, sizeof *x);
  dpt_backend *be = NULL;
  dpt_buffer *buf = NULL;
  switch (s->op) {
  case 0:
    out->st = dpt_allreduce_host(c, x, N, DPT_COMM_F32);
    break;
  case 1:
    out->st = dpt_broadcast_host(c, x, N * sizeof *x, 0);
    break;
  case 2:
    out->st = dpt_barrier(c);
    break;
  case 3:
    out->st = dpt_allgather_host(c, x, 16, x + 16);
    break;
  default:
    out->st = dpt_backend_create(DPT_BACKEND_CPU, 0, &be);
    if (out->st == DPT_OK) out->st = dpt_buffer_alloc(be, N * sizeof *x, &buf);
    if (out->st == DPT_OK) out->st = dpt_allreduce_buffer(c, buf, 0, N, DPT_COMM_F32);
    dpt_buffer_free(buf);
    dpt_backend_destroy(be);
  }
  snprintf(out->err, sizeof out->err, "%s", dpt_last_error());
  free(x);
}

START_TEST(stall_gives_timeout) {
  const stall_case cases[] = {
      {1, 0, DPT_ALLREDUCE_AUTO}, {1, 0, DPT_ALLREDUCE_RING}, {1, 1, DPT_ALLREDUCE_AUTO},
      {1, 2, DPT_ALLREDUCE_AUTO}, {1, 3, DPT_ALLREDUCE_AUTO}, {1, 4, DPT_ALLREDUCE_AUTO},
      {0, 0, DPT_ALLREDUCE_RING}, {0, 0, DPT_ALLREDUCE_RD},   {0, 1, DPT_ALLREDUCE_AUTO},
      {0, 4, DPT_ALLREDUCE_AUTO},
  };
  for (unsigned i = 0; i < sizeof cases / sizeof *cases; ++i) {
    team t;
    team_init(&t, 3, stall_rank, &cases[i]);
    t.opt.timeout_s = 0.25;
    t.opt.desync_check = cases[i].desync;
    t.opt.algo = cases[i].algo;
    double t0 = now_s();
    run_team(&t);
    double took = now_s() - t0;
    ck_assert_msg(took < 3.0, "case %u took %.2f s", i, took);
    for (int r = 0; r < 3; r += 2) {
      ck_assert_msg(t.out[r].st == DPT_ERR_TIMEOUT, "case %u rank %d: %s: %s", i, r,
                    dpt_status_name(t.out[r].st), t.out[r].err);
      ck_assert_msg(t.out[r].seconds >= 0.25, "case %u rank %d gave up after %.3f s", i, r,
                    t.out[r].seconds);
      if (cases[i].desync)
        ck_assert_msg(strstr(t.out[r].err, "rank 1 did not enter"), "case %u: '%s'", i,
                      t.out[r].err);
      else
        ck_assert_msg(strstr(t.out[r].err, "waiting for rank"), "case %u: '%s'", i, t.out[r].err);
    }
  }
}
END_TEST

/* ---- nonblocking collectives ---------------------------------------------------------------- */

typedef int (*request_case)(dpt_comm *c, dpt_backend *be, char *err, size_t errlen);

/* The request case t->arg on a buffer of the backend under test. */
static void request_rank(dpt_comm *c, const team *t, member_out *out) {
  dpt_backend *be = rank_backend(c, t, out);
  if (out->rc == 0) { /* comm_case_request_destroy destroys c (fn_destroys) */
    out->rc = (*(const request_case *)t->arg)(c, be, out->err, sizeof out->err);
    size_t len = strlen(out->err);
    if (out->rc)
      snprintf(out->err + len, sizeof out->err - len, " [%s staging %d]",
               dpt_backend_kind_name(t->backend), (int)t->opt.staging);
  } else if (t->fn_destroys) {
    dpt_comm_destroy(c);
  }
  dpt_backend_destroy(be);
}

static void run_request_case(request_case fn, int size, int staging, int fn_destroys) {
  team t;
  team_init(&t, size, request_rank, &fn);
  t.use_backend = 1;
  t.backend = g_backend;
  t.opt.staging = comm_case_staging(staging);
  t.fn_destroys = fn_destroys;
  run_team(&t);
}

/* Requests back to back, out-of-order waits, backend work on the same buffer meanwhile; every
 * staging mode (the staging thread and the inline transfers inside the progress thread). */
START_TEST(requests_overlap) {
  for (int size = 2; size <= 4; ++size) {
    if (g_backend != DPT_BACKEND_CPU && size != 2) continue;
    for (int mode = 0; mode < COMM_CASE_STAGINGS; ++mode) {
      run_request_case(comm_case_requests, size, mode, 0);
      run_request_case(comm_case_request_pending, size, mode, 0);
      run_request_case(comm_case_request_overlap, size, mode, 0);
    }
  }
}
END_TEST

START_TEST(request_failure) {
  for (int size = 2; size <= 3; ++size) {
    run_request_case(comm_case_request_failure, size, 2, 0);
    run_request_case(comm_case_request_destroy, size, 2, 1);
  }
}
END_TEST

/* Rank 1 never joins: rank 0's request times out naming it, the one behind fails alike
 * without waiting again, and destroy returns. */
static void request_stall_rank(dpt_comm *c, const team *t, member_out *out) {
  (void)t;
  if (dpt_comm_rank(c) == 1) return;
  dpt_backend *be = NULL;
  dpt_buffer *buf = NULL;
  dpt_request *r1 = NULL, *r2 = NULL;
  if (dpt_backend_create(DPT_BACKEND_CPU, 0, &be) != DPT_OK ||
      dpt_buffer_alloc(be, 4096 * sizeof(float), &buf) != DPT_OK ||
      dpt_buffer_fill_f32(buf, 0, 4096, 1.0f) != DPT_OK ||
      dpt_allreduce_buffer_start(c, buf, 0, 2048, DPT_COMM_F32, &r1) != DPT_OK ||
      dpt_reduce_scatter_buffer_start(c, buf, 2048, 2048, DPT_COMM_F32, &r2) != DPT_OK) {
    out->rc = -1;
    snprintf(out->err, sizeof out->err, "%s", dpt_last_error());
  }
  dpt_status s1 = dpt_request_wait(r1, NULL);
  char msg[400];
  snprintf(msg, sizeof msg, "%.399s", dpt_last_error());
  double t0 = now_s();
  dpt_status s2 = dpt_request_wait(r2, NULL);
  double took = now_s() - t0;
  if (out->rc == 0 && (s1 != DPT_ERR_TIMEOUT || !strstr(msg, "rank 1") || s2 != s1 ||
                       !strstr(dpt_last_error(), "not run") || took > 0.2)) {
    out->rc = -1;
    snprintf(out->err, sizeof out->err, "%s '%s', then %s after %.3f s '%.400s'",
             dpt_status_name(s1), msg, dpt_status_name(s2), took, dpt_last_error());
  }
  dpt_buffer_free(buf);
  dpt_backend_destroy(be);
}

START_TEST(request_stall_gives_timeout) {
  team t;
  team_init(&t, 2, request_stall_rank, NULL);
  t.opt.timeout_s = 0.3;
  double t0 = now_s();
  run_team(&t);
  double took = now_s() - t0;
  ck_assert_msg(took < 3.0, "took %.2f s", took);
}
END_TEST

/* ---- options, handles ----------------------------------------------------------------------- */

START_TEST(options_and_environment) {
  dpt_comm_group *g = NULL;
  dpt_comm *c = NULL;
  ck_assert_int_eq(dpt_comm_group_create(2, &g), DPT_OK);

  setenv("DPT_ALLREDUCE_ALGO", "bogus", 1);
  ck_assert_int_eq(dpt_comm_group_member(g, 0, &c), DPT_ERR_INVALID_ARG);
  ck_assert_msg(strstr(dpt_last_error(), "DPT_ALLREDUCE_ALGO"), "%s", dpt_last_error());
  ck_assert_ptr_null(c);
  /* Values that parse but are refused name their variable, not the field. */
  setenv("DPT_ALLREDUCE_ALGO", "mpi", 1);
  ck_assert_int_eq(dpt_comm_group_member(g, 0, &c), DPT_ERR_UNSUPPORTED);
  ck_assert_msg(strstr(dpt_last_error(), "DPT_ALLREDUCE_ALGO='mpi'"), "%s", dpt_last_error());
  unsetenv("DPT_ALLREDUCE_ALGO");
  setenv("DPT_COMM_PIECE", "16", 1);
  ck_assert_int_eq(dpt_comm_group_member(g, 0, &c), DPT_ERR_INVALID_ARG);
  ck_assert_msg(strstr(dpt_last_error(), "DPT_COMM_PIECE='16'") &&
                    !strstr(dpt_last_error(), "piece_bytes"),
                "%s", dpt_last_error());
  setenv("DPT_COMM_PIECE", "1M", 1);
  ck_assert_int_eq(dpt_comm_group_member(g, 0, &c), DPT_ERR_INVALID_ARG);
  ck_assert_msg(strstr(dpt_last_error(), "DPT_COMM_BLOCK (unset: 524288) is less than "
                                         "DPT_COMM_PIECE='1M'"),
                "%s", dpt_last_error());
  ck_assert_ptr_null(c);
  setenv("DPT_ALLREDUCE_ALGO", "rd", 1);
  setenv("DPT_COMM_PIECE", "8K", 1);
  setenv("DPT_COMM_BLOCK", "1M", 1);
  setenv("DPT_COMM_TIMEOUT", "2.5", 1);
  setenv("DPT_COMM_DESYNC_CHECK", "0", 1);
  ck_assert_int_eq(dpt_comm_group_member(g, 0, &c), DPT_OK);
  /* One process: one node, no shared-memory channels, nothing counted. */
  dpt_comm_paths paths;
  ck_assert_int_eq(dpt_comm_nodes(c), 1);
  ck_assert_int_eq(dpt_comm_nodes(NULL), 0);
  ck_assert_int_eq(dpt_comm_local_rank(c), 0); /* member 0 of this process's group */
  ck_assert_int_eq(dpt_comm_local_rank(NULL), -1);
  ck_assert_int_eq(dpt_comm_get_paths(c, &paths), DPT_OK);
  ck_assert(paths.nodes == 1 && !paths.shm && !paths.shm_bytes && !paths.p2p_bytes);
  ck_assert_int_eq(dpt_comm_get_paths(NULL, &paths), DPT_ERR_INVALID_ARG);
  ck_assert_int_eq(dpt_comm_get_paths(c, NULL), DPT_ERR_INVALID_ARG);
  dpt_comm_options o;
  ck_assert_int_eq(dpt_comm_get_options(c, &o), DPT_OK);
  ck_assert_int_eq(o.algo, DPT_ALLREDUCE_RD);
  ck_assert_uint_eq(o.piece_bytes, 8192);
  ck_assert_uint_eq(o.block_bytes, 1 << 20);
  ck_assert(o.timeout_s == 2.5);
  ck_assert_int_eq(o.desync_check, 0);
  ck_assert_int_eq(dpt_comm_pick_algo(c, 10, DPT_COMM_F32), DPT_ALLREDUCE_RD);
  unsetenv("DPT_ALLREDUCE_ALGO");

  /* The API overrides, and validates. */
  ck_assert_int_eq(dpt_comm_set_algo(c, DPT_ALLREDUCE_MPI), DPT_ERR_UNSUPPORTED);
  ck_assert_int_eq(dpt_comm_set_timeout(c, 0.0), DPT_ERR_INVALID_ARG);
  ck_assert_int_eq(dpt_comm_set_timeout(c, 1.0), DPT_OK);
  o.piece_bytes = 16;
  ck_assert_int_eq(dpt_comm_set_options(c, &o), DPT_ERR_INVALID_ARG);
  ck_assert_msg(strstr(dpt_last_error(), "piece_bytes"), "%s", dpt_last_error());
  dpt_comm_options_default(&o);
  ck_assert_int_eq(dpt_comm_set_options(c, &o), DPT_OK);
  ck_assert_int_eq(dpt_comm_pick_algo(c, 16, DPT_COMM_F32), DPT_ALLREDUCE_DIRECT);
  ck_assert_int_eq(dpt_comm_pick_algo(c, 64 << 20, DPT_COMM_F32), DPT_ALLREDUCE_RING);
  o.direct_max_bytes = 0;
  o.rd_max_bytes = 1 << 20;
  ck_assert_int_eq(dpt_comm_set_options(c, &o), DPT_OK);
  ck_assert_int_eq(dpt_comm_pick_algo(c, 16, DPT_COMM_F32), DPT_ALLREDUCE_RD);
  ck_assert_int_eq(dpt_comm_pick_algo(c, 1 << 20, DPT_COMM_F32), DPT_ALLREDUCE_RING);
  /* Forced `direct` beyond the inline limit runs rd. */
  ck_assert_int_eq(dpt_comm_set_algo(c, DPT_ALLREDUCE_DIRECT), DPT_OK);
  ck_assert_int_eq(dpt_comm_pick_algo(c, 1 << 20, DPT_COMM_F32), DPT_ALLREDUCE_RD);

  for (int a = 0; a <= DPT_ALLREDUCE_MPI; ++a) {
    dpt_allreduce_algo back;
    ck_assert_int_eq(dpt_allreduce_algo_parse(dpt_allreduce_algo_name(a), &back), DPT_OK);
    ck_assert_int_eq(back, a);
  }
  ck_assert_ptr_null(dpt_allreduce_algo_name((dpt_allreduce_algo)99));
  ck_assert_str_eq(dpt_comm_transport(c), "threads");
  ck_assert_int_eq(dpt_comm_rank(c), 0);
  ck_assert_int_eq(dpt_comm_size(c), 2);

  /* Each rank once; the group outlives its handle while members live. */
  dpt_comm *again = NULL;
  ck_assert_int_eq(dpt_comm_group_member(g, 0, &again), DPT_ERR_INVALID_ARG);
  ck_assert_int_eq(dpt_comm_group_member(g, 2, &again), DPT_ERR_INVALID_ARG);
  dpt_comm_group_destroy(g);
  dpt_comm_destroy(c);
  dpt_comm_destroy(NULL);
  dpt_comm_group_destroy(NULL);
  ck_assert_int_eq(dpt_comm_group_create(0, &g), DPT_ERR_INVALID_ARG);

  /* direct's limit bounds the (size - 1) payloads each rank sends. */
  ck_assert_int_eq(dpt_comm_group_create(5, &g), DPT_OK);
  ck_assert_int_eq(dpt_comm_group_member(g, 0, &c), DPT_OK);
  ck_assert_int_eq(dpt_comm_pick_algo(c, 1024, DPT_COMM_F32), DPT_ALLREDUCE_DIRECT); /* 4 x 4K */
  ck_assert_int_eq(dpt_comm_pick_algo(c, 1025, DPT_COMM_F32), DPT_ALLREDUCE_RD);
  ck_assert_int_eq(dpt_comm_pick_algo(c, 4096, DPT_COMM_F32), DPT_ALLREDUCE_RD); /* 16 KiB */
  ck_assert_int_eq(dpt_comm_pick_algo(c, 4097, DPT_COMM_F32), DPT_ALLREDUCE_RING);
  ck_assert_int_eq(dpt_comm_pick_algo(c, 1 << 20, DPT_COMM_F32), DPT_ALLREDUCE_RING);
  dpt_comm_destroy(c);
  dpt_comm_group_destroy(g);

  /* Invalid calls on a 1-rank group return at once. */
  ck_assert_int_eq(dpt_comm_group_create(1, &g), DPT_OK);
  ck_assert_int_eq(dpt_comm_group_member(g, 0, &c), DPT_OK);
  ck_assert_int_eq(dpt_allreduce_host(c, NULL, 3, DPT_COMM_F32), DPT_ERR_INVALID_ARG);
  ck_assert_int_eq(dpt_allreduce_host(c, NULL, 0, DPT_COMM_F32), DPT_OK);
  ck_assert_int_eq(dpt_allreduce_host(c, NULL, 0, (dpt_comm_dtype)7), DPT_ERR_INVALID_ARG);
  ck_assert_int_eq(dpt_broadcast_host(c, NULL, 0, 1), DPT_ERR_INVALID_ARG);
  ck_assert_int_eq(dpt_allreduce_buffer(c, NULL, 0, 0, DPT_COMM_F32), DPT_ERR_INVALID_ARG);
  ck_assert_int_eq(dpt_allreduce_host(NULL, NULL, 0, DPT_COMM_F32), DPT_ERR_INVALID_ARG);
  char buf[8];
  ck_assert_int_eq(dpt_allgather_host(c, buf, 4, buf + 2), DPT_ERR_INVALID_ARG);
  ck_assert_int_eq(dpt_barrier(c), DPT_OK);
  dpt_comm_destroy(c);
  dpt_comm_group_destroy(g);
  ck_assert_int_eq(dpt_comm_create_mpi(NULL, NULL), DPT_ERR_INVALID_ARG);
}
END_TEST

/* ---- > 2^31 bytes --------------------------------------------------------------------------- */

static void allreduce_huge(dpt_comm *c, const team *t, member_out *out) {
  (void)t;
  const size_t count = ((size_t)1 << 29) + 3; /* 2 GiB + 12 bytes of float32 */
  float *x = malloc(count * sizeof *x);
  if (!x) {
    out->rc = -1;
    snprintf(out->err, sizeof out->err, "no memory for %zu floats", count);
    return;
  }
  const int rank = dpt_comm_rank(c), size = dpt_comm_size(c);
  for (size_t i = 0; i < count; ++i)
    x[i] = comm_case_input(rank, i);
  dpt_status st = dpt_allreduce_host(c, x, count, DPT_COMM_F32);
  if (st != DPT_OK) {
    out->rc = -1;
    snprintf(out->err, sizeof out->err, "%s", dpt_last_error());
  }
  for (size_t i = 0; i < count && out->rc == 0; ++i) {
    if (x[i] != comm_case_expected(size, i)) {
      out->rc = -1;
      snprintf(out->err, sizeof out->err, "element %zu is %g, expected %g", i, x[i],
               comm_case_expected(size, i));
    }
  }
  out->hash[out->nhash++] = comm_case_hash(x + count - 4096, 4096 * sizeof *x);
  free(x);
}

START_TEST(allreduce_over_2gib) {
  team t;
  team_init(&t, 2, allreduce_huge, NULL);
  t.opt.timeout_s = 120.0;
  run_team(&t);
}
END_TEST

/* The launcher check reads the variables mpirun (Open MPI), MPICH/Hydra (PMI) and PMIx set;
 * this process was started by ctest, not a launcher, until one is set here. */
START_TEST(mpi_launched_from_environment) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
  for (int i = 0; i < 3; ++i)
    unsetenv(vars[i]);
  ck_assert_int_eq(dpt_comm_mpi_launched(), 0);
  for (int i = 0; i < 3; ++i) {
    setenv(vars[i], "2", 1);
    ck_assert_msg(dpt_comm_mpi_launched() == 1, "%s set, not seen as an MPI launch", vars[i]);
    unsetenv(vars[i]);
  }
  ck_assert_int_eq(dpt_comm_mpi_launched(), 0);
}
END_TEST

/* The scheduler's task count against the world: SLURM_STEP_NUM_TASKS above 1 without an MPI
 * world (comm NULL) is refused naming both numbers and srun --mpi=pmix; a world of that size
 * passes; an unset, invalid or single-task value passes; ranks mpirun started are not compared
 * (OMPI_COMM_WORLD_SIZE set). */
START_TEST(launch_check_against_slurm) {
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("SLURM_STEP_NUM_TASKS");
  ck_assert_int_eq(dpt_comm_check_launch(NULL), DPT_OK);
  setenv("SLURM_STEP_NUM_TASKS", "1", 1);
  ck_assert_int_eq(dpt_comm_check_launch(NULL), DPT_OK);
  setenv("SLURM_STEP_NUM_TASKS", "x2", 1);
  ck_assert_int_eq(dpt_comm_check_launch(NULL), DPT_OK);
  setenv("SLURM_STEP_NUM_TASKS", "2", 1);
  ck_assert_int_eq(dpt_comm_check_launch(NULL), DPT_ERR_MISMATCH);
  const char *msg = dpt_last_error();
  ck_assert_msg(strstr(msg, "Slurm started 2 tasks") && strstr(msg, "MPI sees 1 rank") &&
                    strstr(msg, "srun --mpi=pmix"),
                "%s", msg);
  dpt_comm_group *g = NULL;
  dpt_comm *c0 = NULL, *c1 = NULL;
  ck_assert_int_eq(dpt_comm_group_create(2, &g), DPT_OK);
  ck_assert_int_eq(dpt_comm_group_member(g, 0, &c0), DPT_OK);
  ck_assert_int_eq(dpt_comm_group_member(g, 1, &c1), DPT_OK);
  ck_assert_int_eq(dpt_comm_check_launch(c0), DPT_OK);
  setenv("SLURM_STEP_NUM_TASKS", "4", 1);
  ck_assert_int_eq(dpt_comm_check_launch(c0), DPT_ERR_MISMATCH);
  ck_assert_msg(strstr(dpt_last_error(), "MPI sees 2 ranks"), "%s", dpt_last_error());
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  ck_assert_int_eq(dpt_comm_check_launch(c0), DPT_OK);
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("SLURM_STEP_NUM_TASKS");
  dpt_comm_destroy(c0);
  dpt_comm_destroy(c1);
  dpt_comm_group_destroy(g);
}
END_TEST

/* A stranded member (a request its transport could not take back) refuses every collective
 * with DPT_ERR_COMM saying why, and is destroyed without waiting. */
START_TEST(stranded_refuses) {
  dpt_comm_group *g = NULL;
  dpt_comm *c = NULL;
  ck_assert_int_eq(dpt_comm_group_create(1, &g), DPT_OK);
  ck_assert_int_eq(dpt_comm_group_member(g, 0, &c), DPT_OK);
  float x[4] = {1, 2, 3, 4};
  ck_assert_int_eq(dpt_allreduce_host(c, x, 4, DPT_COMM_F32), DPT_OK);
  free(c->hello_buf); /* what a stranded member leaks, freed here for the leak checker */
  free(c->slot_buf);
  c->hello_buf = NULL;
  c->slot_buf = NULL;
  c->stranded = 1;
  ck_assert_int_eq(dpt_allreduce_host(c, x, 4, DPT_COMM_F32), DPT_ERR_COMM);
  ck_assert_msg(strstr(dpt_last_error(), "unusable") && strstr(dpt_last_error(), "dpt_comm_abort"),
                "%s", dpt_last_error());
  ck_assert_int_eq(dpt_barrier(c), DPT_ERR_COMM);
  ck_assert(x[0] == 1 && x[3] == 4);
  dpt_comm_destroy(c);
  dpt_comm_group_destroy(g);
}
END_TEST

/* The 16-bit sums (reduce.c: bfloat16 8 lanes at a time where the compiler allows, binary16
 * through F16C where the CPU has it) give the bits of the scalar conversions around one float32
 * addition, for every 16-bit a against random b (NaN, infinities, subnormals and overflow
 * included), at odd lengths and offsets; NaN results only have to be NaN. */
static void check_sum_bits(dpt_comm_dtype dtype) {
  enum { N = 65536 + 3 };
  const int bf = dtype == DPT_COMM_BF16;
  const uint16_t exp_mask = bf ? 0x7f80u : 0x7c00u;
  uint16_t *a = malloc(N * 2), *b = malloc(N * 2), *d = malloc(N * 2);
  ck_assert(a && b && d);
  uint64_t x = 88172645463325252ull;
  for (int round = 0; round < 4; ++round) {
    for (size_t i = 0; i < N; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      a[i] = (uint16_t)i;
      b[i] = (uint16_t)(round == 0 ? x : round == 1 ? (x & 0x80ffu) : (x >> 20));
    }
    const size_t off = (size_t)round % 3, n = N - off - (size_t)round;
    dpt_sum_to(d + off, a + off, b + off, n, dtype);
    for (size_t i = off; i < off + n; ++i) {
      const uint16_t want =
          bf ? dpt_f32_to_bf16_scalar(dpt_bf16_to_f32_scalar(a[i]) + dpt_bf16_to_f32_scalar(b[i]))
             : dpt_f32_to_f16_scalar(dpt_f16_to_f32_scalar(a[i]) + dpt_f16_to_f32_scalar(b[i]));
      /* Which NaN operand's payload an addition keeps is the compiler's choice (a + b may be
       * emitted as b + a): a NaN only has to stay a NaN. */
      const int both_nan = (d[i] & 0x7fffu) > exp_mask && (want & 0x7fffu) > exp_mask;
      ck_assert_msg(d[i] == want || both_nan, "%s: 0x%04x + 0x%04x = 0x%04x, want 0x%04x",
                    bf ? "bf16" : "f16", a[i], b[i], d[i], want);
    }
  }
  free(a);
  free(b);
  free(d);
}

START_TEST(bf16_sum_bits) {
  check_sum_bits(DPT_COMM_BF16);
}
END_TEST

START_TEST(f16_sum_bits) {
  check_sum_bits(DPT_COMM_F16);
}
END_TEST

/* The receiver's choice of how shared-memory slots are written (shm.c): the cheaper mode,
 * with a 10 % margin, followed within a few samples when costs change, not flipped by one
 * slow copy, and only from kinds (copy / sum) where both modes have been measured. */
START_TEST(shm_copy_choice) {
  dpt_copy_choice c = {0};
  enum { CACHED = 0, STREAM = 1, COPY = 0, SUM = 1 };
  ck_assert_int_eq(c.prefer, CACHED);
  /* Streaming cheaper, but only measured for copies while cached is for sums: no verdict. */
  dpt_copy_choice apart = {0};
  ck_assert_int_eq(dpt_copy_choice_add(&apart, COPY, STREAM, 50), CACHED);
  ck_assert_int_eq(dpt_copy_choice_add(&apart, SUM, CACHED, 100), CACHED);
  ck_assert(apart.gap == 0.0f);
  /* Both modes known for sums; streaming 1.7x dearer there: cached stays. */
  ck_assert_int_eq(dpt_copy_choice_add(&c, COPY, STREAM, 150), CACHED);
  ck_assert_int_eq(dpt_copy_choice_add(&c, SUM, CACHED, 100), CACHED);
  ck_assert_int_eq(dpt_copy_choice_add(&c, SUM, STREAM, 170), CACHED);
  /* The other mode's relative cost, which spaces out the sender's explorations. */
  ck_assert_float_eq_tol(c.gap, 1.7f, 1e-5f);
  ck_assert_int_eq(dpt_copy_choice_add(&c, COPY, CACHED, 80), CACHED);
  for (int i = 0; i < 20; ++i) {
    ck_assert_int_eq(dpt_copy_choice_add(&c, COPY, CACHED, 80), CACHED);
    ck_assert_int_eq(dpt_copy_choice_add(&c, SUM, CACHED, 100), CACHED);
  }
  ck_assert_int_eq(dpt_copy_choice_add(&c, COPY, STREAM, 140), CACHED);
  /* One preempted copy (100x) does not flip it. */
  ck_assert_int_eq(dpt_copy_choice_add(&c, SUM, CACHED, 10000), CACHED);
  ck_assert_int_eq(dpt_copy_choice_add(&c, SUM, CACHED, 100), CACHED);
  /* The cores move apart: cached copies cost 4x; streaming wins within a few slots. */
  int n = 0;
  while (dpt_copy_choice_add(&c, n % 2 ? SUM : COPY, CACHED, n % 2 ? 400 : 320) == CACHED)
    ck_assert_int_le(++n, 8);
  ck_assert_int_eq(c.prefer, STREAM);
  for (int i = 0; i < 20; ++i) {
    ck_assert_int_eq(dpt_copy_choice_add(&c, COPY, STREAM, 120), STREAM);
    ck_assert_int_eq(dpt_copy_choice_add(&c, SUM, STREAM, 150), STREAM);
  }
  ck_assert_msg(c.gap > 1.2f, "cached should now look dearer, gap %g", (double)c.gap);
  /* And back: the explored cached slots cost 80 / 100 again; a few of them switch back. */
  n = 0;
  while (dpt_copy_choice_add(&c, n % 2 ? SUM : COPY, CACHED, n % 2 ? 100 : 80) == STREAM)
    ck_assert_int_le(++n, 8);
  ck_assert_int_eq(c.prefer, CACHED);
}
END_TEST

int main(int argc, char **argv) {
  const int on_backend = argc > 1 && strcmp(argv[1], "large") != 0;
  if (on_backend) { /* before any suite exists: a skip leaves nothing allocated */
    int count = 0;
    if (dpt_backend_kind_parse(argv[1], &g_backend) != DPT_OK) {
      fprintf(stderr, "comm_threads: %s\n", dpt_last_error());
      return 2;
    }
    if (!dpt_backend_compiled(g_backend) || dpt_device_count(g_backend, &count) != DPT_OK ||
        count < 1) {
      printf("comm_threads: no %s device, skipped\n", argv[1]);
      return 77;
    }
  }
  Suite *s = suite_create("comm_threads");
  if (argc > 1 && !strcmp(argv[1], "large")) {
    TCase *tc = tcase_create("large");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, allreduce_over_2gib);
    suite_add_tcase(s, tc);
  } else if (on_backend) {
    TCase *tc = tcase_create(argv[1]);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, allreduce_buffers);
    tcase_add_test(tc, sharded_buffers);
    tcase_add_test(tc, broadcast_host_and_buffers);
    tcase_add_test(tc, requests_overlap);
    suite_add_tcase(s, tc);
  } else {
    TCase *tc = tcase_create("allreduce");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, allreduce_host_closed_form);
    tcase_add_test(tc, allreduce_desync_off);
    tcase_add_test(tc, allreduce_buffers);
    tcase_add_test(tc, allreduce_mixed_host_and_buffers);
    tcase_add_test(tc, allreduce_buffers_several_blocks);
    tcase_add_test(tc, allreduce_bit_identical);
    suite_add_tcase(s, tc);
    tc = tcase_create("sharded");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, sharded_host_closed_form);
    tcase_add_test(tc, sharded_buffers);
    tcase_add_test(tc, sharded_equals_ring);
    suite_add_tcase(s, tc);
    tc = tcase_create("hier");
    tcase_set_timeout(tc, 200);
    tcase_add_test(tc, hier_shard_layout);
    tcase_add_test(tc, hier_host_closed_form);
    tcase_add_test(tc, hier_sharded_closed_form);
    tcase_add_test(tc, hier_buffers);
    tcase_add_test(tc, hier_sum_order);
    tcase_add_test(tc, hier_bucketed_reduce_scatter);
    tcase_add_test(tc, hier_fallback);
    suite_add_tcase(s, tc);
    tc = tcase_create("requests");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, requests_overlap);
    tcase_add_test(tc, request_failure);
    tcase_add_test(tc, request_stall_gives_timeout);
    suite_add_tcase(s, tc);
    tc = tcase_create("others");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, broadcast_host_and_buffers);
    tcase_add_test(tc, allgather_sizes);
    tcase_add_test(tc, barrier_waits_for_all);
    tcase_add_test(tc, wakeups_around_the_spin);
    tcase_add_test(tc, timeout_forever);
    tcase_add_test(tc, mpi_launched_from_environment);
    tcase_add_test(tc, launch_check_against_slurm);
    tcase_add_test(tc, stranded_refuses);
    tcase_add_test(tc, shm_copy_choice);
    tcase_add_test(tc, bf16_sum_bits);
    tcase_add_test(tc, f16_sum_bits);
    suite_add_tcase(s, tc);
    tc = tcase_create("failures");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, mismatch_reported_everywhere);
    tcase_add_test(tc, bad_arguments_on_one_rank);
    tcase_add_test(tc, stall_gives_timeout);
    tcase_add_test(tc, options_and_environment);
    suite_add_tcase(s, tc);
  }
  SRunner *sr = srunner_create(s);
  /* The device query above started the driver's threads: a forked child would inherit the
   * driver without them and hang. */
  if (argc > 1 && strcmp(argv[1], "large")) srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
