/* Collectives over the MPI transport, run under mpiexec with 2, 3 and 4 ranks: closed-form
 * results for the odd counts with every algorithm (MPI_Allreduce included), both dtypes,
 * host data and buffers of every backend present; results bit-identical across ranks;
 * broadcast, allgather, barrier; mismatched counts give DPT_ERR_MISMATCH on every rank; a
 * rank that skips a collective gives DPT_ERR_TIMEOUT naming it.
 *
 * `comm_mpi gpu` runs the buffer tests on the OpenCL and Vulkan backends too (those present).
 *
 * Every rank runs every test (Check without fork: MPI and fork do not mix). Each test ends
 * with an exchange of every rank's outcome over MPI_COMM_WORLD before anything is asserted,
 * so all ranks pass or fail a test together and none is left waiting in a collective. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "collectives/common/comm_struct.h"
#include "collectives/transports/shm.h"
#include "comm_cases.h"
#include "dptrain/comm.h"

#define MAX_HASH 64

static int world_rank, world_size;
static int g_gpu; /* also GPU backends' buffers */

static double now_s(void) {
  return MPI_Wtime();
}

typedef struct outcome {
  int rc;
  char err[1024];
  uint64_t hash[MAX_HASH];
  int nhash;
} outcome;

/* Shares every rank's outcome; asserts that all passed and that results are bit-identical. */
static void agree(const outcome *o, const char *what) {
  int *rcs = calloc((size_t)world_size, sizeof *rcs);
  uint64_t *hashes = calloc((size_t)world_size * MAX_HASH, sizeof *hashes);
  char *errs = calloc((size_t)world_size, sizeof o->err);
  ck_assert(rcs && hashes && errs);
  MPI_Allgather(&o->rc, 1, MPI_INT, rcs, 1, MPI_INT, MPI_COMM_WORLD);
  MPI_Allgather(o->hash, MAX_HASH, MPI_UINT64_T, hashes, MAX_HASH, MPI_UINT64_T, MPI_COMM_WORLD);
  MPI_Allgather(o->err, (int)sizeof o->err, MPI_CHAR, errs, (int)sizeof o->err, MPI_CHAR,
                MPI_COMM_WORLD);
  for (int r = 0; r < world_size; ++r)
    ck_assert_msg(rcs[r] == 0, "%s: rank %d: %s", what, r, errs + (size_t)r * sizeof o->err);
  for (int r = 1; r < world_size; ++r)
    for (int i = 0; i < o->nhash; ++i)
      ck_assert_msg(hashes[(size_t)r * MAX_HASH + i] == hashes[i],
                    "%s: result %d of rank %d differs from rank 0's (not bit-identical)", what, i,
                    r);
  free(rcs);
  free(hashes);
  free(errs);
}

static dpt_comm *make_comm(const dpt_comm_options *o) {
  dpt_comm *c = NULL;
  ck_assert_msg(dpt_comm_create_mpi(NULL, &c) == DPT_OK, "%s", dpt_last_error());
  ck_assert_int_eq(dpt_comm_rank(c), world_rank);
  ck_assert_int_eq(dpt_comm_size(c), world_size);
  ck_assert_str_eq(dpt_comm_transport(c), "mpi");
  if (o) ck_assert_msg(dpt_comm_set_options(c, o) == DPT_OK, "%s", dpt_last_error());
  return c;
}

static void base_options(dpt_comm_options *o) {
  dpt_comm_options_default(o);
  o->timeout_s = 30.0;
}

/* fn (an all-reduce or the sharded pair) over all counts and both dtypes on `c`, data on `be`
 * (NULL: host). */
static void counts_with(dpt_comm *c, dpt_backend *be, outcome *o, comm_count_case fn,
                        const char *label) {
  size_t counts[32];
  int n = comm_case_counts(world_size, counts, 32);
  static const dpt_comm_dtype dts[] = {DPT_COMM_F32, DPT_COMM_F16, DPT_COMM_BF16};
  static const char *const names[] = {"f32", "f16", "bf16"};
  for (int d = 0; d < 3 && o->rc == 0; ++d) {
    for (int i = 0; i < n && o->rc == 0 && o->nhash < MAX_HASH; ++i) {
      o->rc = fn(c, be, counts[i], dts[d], &o->hash[o->nhash++], o->err, sizeof o->err);
      if (o->rc) {
        size_t len = strlen(o->err);
        snprintf(o->err + len, sizeof o->err - len, " [%s count %zu %s]", label, counts[i],
                 names[d]);
      }
    }
  }
}

static const dpt_allreduce_algo algos[] = {DPT_ALLREDUCE_AUTO, DPT_ALLREDUCE_RING, DPT_ALLREDUCE_RD,
                                           DPT_ALLREDUCE_DIRECT, DPT_ALLREDUCE_MPI};

START_TEST(allreduce_host_closed_form) {
  for (unsigned a = 0; a < sizeof algos / sizeof *algos; ++a) {
    for (int variant = 0; variant < 3; ++variant) {
      dpt_comm_options opt;
      base_options(&opt);
      opt.algo = algos[a];
      if (variant >= 1) comm_case_tiny(&opt);
      if (variant == 2) opt.desync_check = 0;
      dpt_comm *c = make_comm(&opt);
      outcome o = {0};
      char label[64];
      snprintf(label, sizeof label, "%s variant %d", dpt_allreduce_algo_name(algos[a]), variant);
      counts_with(c, NULL, &o, comm_case_allreduce, label);
      dpt_comm_destroy(c);
      agree(&o, label);
    }
  }
}
END_TEST

START_TEST(allreduce_buffers) {
  /* Without `gpu` the GPU drivers are not even asked (they start threads and keep memory). */
  dpt_backend_kind kinds[DPT_BACKEND_KIND_COUNT] = {DPT_BACKEND_CPU};
  int nk = g_gpu ? comm_case_backends(kinds, DPT_BACKEND_KIND_COUNT) : 1;
  ck_assert_int_ge(nk, 1);
  for (int k = 0; k < nk; ++k) {
    for (unsigned a = 0; a < sizeof algos / sizeof *algos; ++a) {
      for (int mode = 0; mode < COMM_CASE_STAGINGS; ++mode) {
        dpt_comm_options opt;
        base_options(&opt);
        opt.algo = algos[a];
        opt.staging = comm_case_staging(mode);
        comm_case_tiny(&opt);
        dpt_comm *c = make_comm(&opt);
        outcome o = {0};
        dpt_backend *be = NULL;
        if (dpt_backend_create(kinds[k], 0, &be) != DPT_OK) {
          o.rc = -1;
          snprintf(o.err, sizeof o.err, "%s", dpt_last_error());
        }
        char label[64];
        snprintf(label, sizeof label, "%s %s %s", dpt_backend_kind_name(kinds[k]),
                 dpt_allreduce_algo_name(algos[a]), comm_case_staging_name(mode));
        /* Every rank runs the same collectives even when its backend failed (host data). */
        counts_with(c, be, &o, comm_case_allreduce, label);
        dpt_backend_destroy(be);
        dpt_comm_destroy(c);
        agree(&o, label);
      }
    }
  }
}
END_TEST

START_TEST(allreduce_large_buffers) {
  /* Default pieces and blocks, several staging blocks, every staging mode. */
  for (int mode = 0; mode < COMM_CASE_STAGINGS; ++mode) {
    dpt_comm_options opt;
    base_options(&opt);
    opt.staging = comm_case_staging(mode);
    opt.block_bytes = (size_t)1 << 20;
    dpt_comm *c = make_comm(&opt);
    outcome o = {0};
    dpt_backend *be = NULL;
    if (dpt_backend_create(DPT_BACKEND_CPU, 0, &be) != DPT_OK) o.rc = -1;
    const size_t count = ((size_t)3 << 20) + 7;
    if (o.rc == 0)
      o.rc =
          comm_case_allreduce(c, be, count, DPT_COMM_F32, &o.hash[o.nhash++], o.err, sizeof o.err);
    if (o.rc == 0)
      o.rc = comm_case_allreduce(c, NULL, count, DPT_COMM_F32, &o.hash[o.nhash++], o.err,
                                 sizeof o.err);
    dpt_backend_destroy(be);
    dpt_comm_destroy(c);
    char label[64];
    snprintf(label, sizeof label, "large buffers, staging %s", comm_case_staging_name(mode));
    agree(&o, label);
  }
}
END_TEST

START_TEST(allreduce_bit_identical) {
  for (unsigned a = 0; a < sizeof algos / sizeof *algos; ++a) {
    dpt_comm_options opt;
    base_options(&opt);
    opt.algo = algos[a];
    opt.piece_bytes = 256;
    opt.block_bytes = 4096;
    dpt_comm *c = make_comm(&opt);
    outcome o = {0};
    const size_t counts[] = {3, 1000, 10007, 70001};
    for (int i = 0; i < 4 && o.rc == 0; ++i)
      o.rc = comm_case_inexact(c, counts[i], &o.hash[o.nhash++], o.err, sizeof o.err);
    for (int i = 0; i < 4 && o.rc == 0; ++i)
      o.rc = comm_case_inexact_bf16(c, counts[i], &o.hash[o.nhash++], o.err, sizeof o.err);
    dpt_comm_destroy(c);
    agree(&o, dpt_allreduce_algo_name(algos[a]));
  }
}
END_TEST

/* Reduce-scatter and all-gather of shards: host data and CPU-backend buffers (every staging
 * mode), tiny and default knobs; the pair gives the ring all-reduce's bits. */
START_TEST(sharded_closed_form) {
  for (int variant = 0; variant < 2 + COMM_CASE_STAGINGS; ++variant) {
    dpt_comm_options opt;
    base_options(&opt);
    if (variant >= 1) comm_case_tiny(&opt);
    if (variant >= 2) opt.staging = comm_case_staging(variant - 2);
    dpt_comm *c = make_comm(&opt);
    outcome o = {0};
    dpt_backend *be = NULL;
    if (variant >= 2 && dpt_backend_create(DPT_BACKEND_CPU, 0, &be) != DPT_OK) {
      o.rc = -1;
      snprintf(o.err, sizeof o.err, "%s", dpt_last_error());
    }
    char label[64];
    snprintf(label, sizeof label, "sharded variant %d", variant);
    counts_with(c, be, &o, comm_case_sharded, label);
    const size_t inexact[] = {3, 1000, 70001};
    for (int i = 0; i < 3 && o.rc == 0; ++i)
      o.rc = comm_case_sharded_inexact(c, inexact[i], DPT_ALLREDUCE_RING, o.err, sizeof o.err);
    dpt_backend_destroy(be);
    dpt_comm_destroy(c);
    agree(&o, label);
  }
}
END_TEST

/* Nodes of equal size (> 1 rank), as the hierarchical all-reduce needs; *per: ranks per node. */
static int equal_nodes(const dpt_comm *c, int *per) {
  *per = 0;
  if (c->nnodes < 2 || !c->node || world_size % c->nnodes) return 0;
  *per = world_size / c->nnodes;
  for (int n = 0; n < c->nnodes; ++n) {
    int k = 0;
    for (int r = 0; r < world_size; ++r)
      k += c->node[r] == n;
    if (k != *per) return 0;
  }
  return *per > 1;
}

/* On nodes of equal size (comm_mpi_4_nodes: 2 x 2 fake nodes) the hierarchical all-reduce of
 * host data crosses nodes through MPI_Allreduce over each local index's ranks: sums exact in
 * closed form, bit-identical on every rank, no MPI point-to-point bytes (desync check off: no
 * hello round either); the halves keep the point-to-point ring and their shard layout, and on
 * 2 x 2 (every sum has two addends, the same bits in either order) the all-reduce's bits. */
START_TEST(hier_native_cross) {
  dpt_comm *probe = make_comm(NULL);
  int per = 0;
  const int equal = equal_nodes(probe, &per), nodes = probe->nnodes;
  const int cross = probe->cross_native;
  dpt_comm_destroy(probe);
  ck_assert_int_eq(cross, equal);
  if (!equal) return;
  size_t big[] = {((size_t)1 << 20) + 3, ((size_t)3 << 20) + 7};
  for (int variant = 0; variant < 3; ++variant) {
    dpt_comm_options opt;
    base_options(&opt);
    opt.algo = DPT_ALLREDUCE_HIER;
    if (variant == 1) comm_case_tiny(&opt);
    if (variant == 2) opt.desync_check = 0;
    dpt_comm *c = make_comm(&opt);
    outcome o = {0};
    char label[64];
    snprintf(label, sizeof label, "hier native variant %d", variant);
    dpt_comm_paths p0, p1, p2;
    ck_assert_int_eq(dpt_comm_get_paths(c, &p0), DPT_OK);
    counts_with(c, NULL, &o, comm_case_allreduce, label);
    for (int i = 0; i < 2 && o.rc == 0; ++i)
      o.rc = comm_case_allreduce(c, NULL, big[i], i ? DPT_COMM_F16 : DPT_COMM_F32,
                                 &o.hash[o.nhash++], o.err, sizeof o.err);
    for (int i = 0; i < 2 && o.rc == 0; ++i)
      o.rc = comm_case_inexact(c, big[i] - 2, &o.hash[o.nhash++], o.err, sizeof o.err);
    ck_assert_int_eq(dpt_comm_get_paths(c, &p1), DPT_OK);
    if (o.rc == 0 && variant == 2 && p1.p2p_bytes != p0.p2p_bytes) {
      o.rc = -1;
      snprintf(o.err, sizeof o.err, "%s: %llu bytes through MPI point-to-point (expected none)",
               label, (unsigned long long)(p1.p2p_bytes - p0.p2p_bytes));
    }
    /* The halves: the ring across nodes, point-to-point. */
    const int before = o.nhash;
    counts_with(c, NULL, &o, comm_case_sharded, label);
    if (o.rc == 0) o.nhash = before; /* their hashes: the all-reduce's, checked above */
    ck_assert_int_eq(dpt_comm_get_paths(c, &p2), DPT_OK);
    if (o.rc == 0 && p2.p2p_bytes == p1.p2p_bytes) {
      o.rc = -1;
      snprintf(o.err, sizeof o.err, "%s: the halves sent nothing through MPI point-to-point",
               label);
    }
    const size_t inexact[] = {3, 1000, 70001, ((size_t)1 << 20) + 5};
    for (int i = 0; i < 4 && o.rc == 0 && per == 2 && nodes == 2; ++i)
      o.rc = comm_case_sharded_inexact(c, inexact[i], DPT_ALLREDUCE_HIER, o.err, sizeof o.err);
    dpt_comm_destroy(c);
    agree(&o, label);
  }
}
END_TEST

START_TEST(broadcast_allgather_barrier) {
  for (int variant = 0; variant < 3; ++variant) {
    dpt_comm_options opt;
    base_options(&opt);
    if (variant >= 1) {
      opt.piece_bytes = 1024;
      opt.block_bytes = 4096;
    }
    if (variant == 2) opt.desync_check = 0;
    dpt_comm *c = make_comm(&opt);
    outcome o = {0};
    dpt_backend *be = NULL;
    if (dpt_backend_create(DPT_BACKEND_CPU, 0, &be) != DPT_OK) o.rc = -1;
    const size_t sizes[] = {0, 1, 100, 65536, 65537, 300001};
    const int roots[] = {0, world_size - 1, world_size / 2};
    for (int dev = 0; dev < 2; ++dev)
      for (int r = 0; r < 3; ++r)
        for (int i = 0; i < 6 && o.rc == 0; ++i)
          o.rc = comm_case_broadcast(c, dev ? be : NULL, sizes[i], roots[r], o.err, sizeof o.err);
    for (int i = 0; i < 6 && o.rc == 0; ++i)
      o.rc = comm_case_allgather(c, sizes[i], o.err, sizeof o.err);
    for (int i = 0; i < 3 && o.rc == 0; ++i) {
      if (dpt_barrier(c) != DPT_OK) {
        o.rc = -1;
        snprintf(o.err, sizeof o.err, "barrier: %s", dpt_last_error());
      }
    }
    dpt_backend_destroy(be);
    dpt_comm_destroy(c);
    agree(&o, "broadcast / allgather / barrier");
  }
}
END_TEST

/* Mismatched counts: every rank returns DPT_ERR_MISMATCH, well before the deadline. */
START_TEST(mismatch_reported_everywhere) {
  const size_t count1[] = {2000, 500, 1001};
  for (int i = 0; i < 3; ++i) {
    for (int forced_ring = 0; forced_ring < 2; ++forced_ring) {
      dpt_comm_options opt;
      base_options(&opt);
      opt.timeout_s = 5.0;
      if (forced_ring) opt.algo = DPT_ALLREDUCE_RING;
      dpt_comm *c = make_comm(&opt);
      float *x = calloc(4000, sizeof *x);
      double t0 = now_s();
      dpt_status st = dpt_allreduce_host(c, x, world_rank == 1 ? count1[i] : 1000, DPT_COMM_F32);
      double took = now_s() - t0;
      outcome o = {0};
      char want[64];
      snprintf(want, sizeof want, "rank 1: allreduce #0 (%zu x float32", count1[i]);
      if (st != DPT_ERR_MISMATCH || took > 4.0 || !strstr(dpt_last_error(), want) ||
          !strstr(dpt_last_error(), "rank 0: allreduce #0 (1000 x float32")) {
        o.rc = -1;
        snprintf(o.err, sizeof o.err, "count %zu: %s after %.2f s: %s", count1[i],
                 dpt_status_name(st), took, dpt_last_error());
      }
      /* The communicator is still usable after a mismatch. */
      if (o.rc == 0)
        o.rc = comm_case_allreduce(c, NULL, 1003, DPT_COMM_F32, &o.hash[o.nhash++], o.err,
                                   sizeof o.err);
      free(x);
      dpt_comm_destroy(c);
      agree(&o, "mismatch");
    }
  }
}
END_TEST

/* Rank 1 skips a collective: the others time out naming it. It waits for them on
 * MPI_COMM_WORLD before destroying its communicator, so their headers to it land in its
 * queue and leave with it. */
START_TEST(stall_gives_timeout) {
  for (int variant = 0; variant < 4; ++variant) {
    dpt_comm_options opt;
    base_options(&opt);
    opt.timeout_s = 0.3;
    opt.desync_check = variant < 2;
    opt.algo = variant % 2 ? DPT_ALLREDUCE_RING : DPT_ALLREDUCE_AUTO;
    dpt_comm *c = make_comm(&opt);
    outcome o = {0};
    if (world_rank != 1) {
      float *x = calloc(100000, sizeof *x);
      double t0 = now_s();
      dpt_status st = dpt_allreduce_host(c, x, 100000, DPT_COMM_F32);
      double took = now_s() - t0;
      /* Without the check, a rank waits for its neighbour, which may itself be waiting. With
       * it, all-to-all names exactly rank 1, dissemination (DPT_COMM_HELLO_FLAT_MAX=0) the
       * ranks not heard from, rank 1 among them. */
      const int named = opt.desync_check ? comm_case_names_rank(dpt_last_error(), 1)
                                         : strstr(dpt_last_error(), "waiting for rank") != NULL;
      const int exact = !opt.desync_check || c->size > c->hello_flat_max ||
                        strstr(dpt_last_error(), "rank 1 did not enter");
      if (st != DPT_ERR_TIMEOUT || took < 0.3 || took > 5.0 || !named || !exact) {
        o.rc = -1;
        snprintf(o.err, sizeof o.err, "variant %d: %s after %.2f s: %s", variant,
                 dpt_status_name(st), took, dpt_last_error());
      }
      free(x);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    dpt_comm_destroy(c);
    agree(&o, "stall");
  }
}
END_TEST

/* ---- nonblocking collectives ---------------------------------------------------------------- */

typedef int (*request_case)(dpt_comm *c, dpt_backend *be, char *err, size_t errlen);

/* Each request case on a communicator of its own, buffers of every backend present (`gpu`) or
 * of the CPU backend, every staging mode. */
START_TEST(requests) {
  const request_case cases[] = {comm_case_requests, comm_case_request_pending,
                                comm_case_request_failure, comm_case_request_destroy,
                                comm_case_request_overlap};
  const char *names[] = {"requests", "pending", "failure", "destroy", "overlap"};
  dpt_backend_kind kinds[DPT_BACKEND_KIND_COUNT] = {DPT_BACKEND_CPU};
  int nk = g_gpu ? comm_case_backends(kinds, DPT_BACKEND_KIND_COUNT) : 1;
  for (int k = 0; k < nk; ++k) {
    for (int mode = 0; mode < COMM_CASE_STAGINGS; ++mode) {
      for (unsigned i = 0; i < sizeof cases / sizeof *cases; ++i) {
        if (mode != 2 && i >= 2) continue; /* failure and destroy: one mode */
        dpt_comm_options opt;
        base_options(&opt);
        opt.staging = comm_case_staging(mode);
        dpt_comm *c = make_comm(&opt);
        outcome o = {0};
        dpt_backend *be = NULL;
        if (dpt_backend_create(kinds[k], 0, &be) != DPT_OK) {
          o.rc = -1;
          snprintf(o.err, sizeof o.err, "%s", dpt_last_error());
        } else {
          o.rc = cases[i](c, be, o.err, sizeof o.err);
        }
        if (i != 3 || o.rc != 0 || !be) dpt_comm_destroy(c); /* the destroy case did it */
        dpt_backend_destroy(be);
        char label[96];
        snprintf(label, sizeof label, "%s %s %s", names[i], dpt_backend_kind_name(kinds[k]),
                 comm_case_staging_name(mode));
        agree(&o, label);
      }
    }
  }
}
END_TEST

/* MPI is called by one thread at a time: while one communicator has requests pending, another
 * refuses its collectives and its starts, and no communicator is created; destroying another
 * one waits for the request in progress. */
START_TEST(requests_one_mpi_comm_at_a_time) {
  dpt_comm_options opt;
  base_options(&opt);
  dpt_comm *a = make_comm(&opt), *b = make_comm(&opt), *spare = make_comm(&opt);
  outcome o = {0};
  dpt_backend *be = NULL;
  dpt_buffer *buf = NULL;
  dpt_request *r = NULL, *rb = NULL;
  ck_assert_int_eq(dpt_backend_create(DPT_BACKEND_CPU, 0, &be), DPT_OK);
  ck_assert_int_eq(dpt_buffer_alloc(be, 100000 * sizeof(float), &buf), DPT_OK);
  ck_assert_int_eq(dpt_buffer_fill_f32(buf, 0, 100000, 1.0f), DPT_OK);
  ck_assert_msg(dpt_allreduce_buffer_start(a, buf, 0, 100000, DPT_COMM_F32, &r) == DPT_OK, "%s",
                dpt_last_error());
  float x = 1.0f;
  dpt_status st = dpt_allreduce_host(b, &x, 1, DPT_COMM_F32);
  dpt_comm *extra = NULL;
  if (st != DPT_ERR_INVALID_ARG || !strstr(dpt_last_error(), "another MPI communicator")) {
    o.rc = -1;
    snprintf(o.err, sizeof o.err, "collective on b: %d '%s'", (int)st, dpt_last_error());
  } else if ((st = dpt_allreduce_buffer_start(b, buf, 0, 10, DPT_COMM_F32, &rb)) !=
                 DPT_ERR_INVALID_ARG ||
             rb) {
    o.rc = -1;
    snprintf(o.err, sizeof o.err, "start on b: %d '%s'", (int)st, dpt_last_error());
  } else if ((st = dpt_comm_create_mpi(NULL, &extra)) != DPT_ERR_INVALID_ARG || extra) {
    o.rc = -1;
    snprintf(o.err, sizeof o.err, "create: %d '%s'", (int)st, dpt_last_error());
  }
  dpt_comm_destroy(spare); /* local; serialized with a's progress thread */
  if ((st = dpt_request_wait(r, NULL)) != DPT_OK && o.rc == 0) {
    o.rc = -1;
    snprintf(o.err, sizeof o.err, "wait: %s", dpt_last_error());
  }
  /* Waited for: b works again. */
  if (o.rc == 0 &&
      ((st = dpt_allreduce_host(b, &x, 1, DPT_COMM_F32)) != DPT_OK || x != (float)world_size)) {
    o.rc = -1;
    snprintf(o.err, sizeof o.err, "collective on b after the wait: %d '%s' %g", (int)st,
             dpt_last_error(), x);
  }
  dpt_buffer_free(buf);
  dpt_backend_destroy(be);
  dpt_comm_destroy(b);
  dpt_comm_destroy(a);
  agree(&o, "one MPI communicator at a time");
}
END_TEST

/* Seconds of CPU this process has used (every thread). */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Rank 1 reaches the collective 1 s late; the others wait without burning a core: after a
 * short spin they sleep, so their CPU time over the wait stays well under its wall time.
 * Both places a rank waits: the hello round (a barrier), and the message engine (a ring
 * all-reduce without the desync check). The deadline stays honoured: a 30 s one does not
 * fire, and the wait ends within a few naps of rank 1's arrival. */
START_TEST(late_rank_waits_asleep) {
  const double late = 1.0;
  for (int variant = 0; variant < 2; ++variant) {
    dpt_comm_options opt;
    base_options(&opt);
    opt.desync_check = variant == 0;
    opt.algo = DPT_ALLREDUCE_RING;
    dpt_comm *c = make_comm(&opt);
    outcome o = {0};
    float *x = calloc(100000, sizeof *x);
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now_s(), cpu0 = cpu_s();
    if (world_rank == 1) nanosleep(&(struct timespec){.tv_sec = 1}, NULL);
    dpt_status st = variant == 0 ? dpt_barrier(c) : dpt_allreduce_host(c, x, 100000, DPT_COMM_F32);
    const double wall = now_s() - t0, cpu = cpu_s() - cpu0;
    if (st != DPT_OK) {
      o.rc = -1;
      snprintf(o.err, sizeof o.err, "%s: %s", dpt_status_name(st), dpt_last_error());
    } else if (world_rank != 1 && (wall < 0.9 * late || wall > late + 1.0 || cpu > 0.3 * wall)) {
      o.rc = -1;
      snprintf(o.err, sizeof o.err, "%s: waited %.3f s using %.3f s of CPU (%.0f %%)",
               variant == 0 ? "barrier" : "ring all-reduce", wall, cpu, 100.0 * cpu / wall);
    }
    if (world_rank == 0)
      printf("late_rank_waits_asleep (%s): waited %.3f s, %.3f s of CPU (%.1f %%)\n",
             variant == 0 ? "barrier" : "ring", wall, cpu, 100.0 * cpu / wall);
    free(x);
    dpt_comm_destroy(c);
    agree(&o, "late rank");
  }
}
END_TEST

/* A communicator on a sub-communicator given by the application. */
START_TEST(sub_communicator) {
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &half);
  dpt_comm *c = NULL;
  outcome o = {0};
  if (dpt_comm_create_mpi(&half, &c) != DPT_OK) {
    o.rc = -1;
    snprintf(o.err, sizeof o.err, "%s", dpt_last_error());
  } else {
    int hr, hs;
    MPI_Comm_rank(half, &hr);
    MPI_Comm_size(half, &hs);
    if (dpt_comm_rank(c) != hr || dpt_comm_size(c) != hs) o.rc = -1;
    if (o.rc == 0)
      o.rc = comm_case_allreduce(c, NULL, 1003, DPT_COMM_F32, NULL, o.err, sizeof o.err);
  }
  dpt_comm_destroy(c);
  MPI_Comm_free(&half);
  agree(&o, "sub-communicator");
}
END_TEST

#if defined(__x86_64__)
#define SHM_STREAMS 1
#else
#define SHM_STREAMS 0
#endif

/* The environment variable `name` as it was (NULL: unset), to put back with env_restore. */
static char *env_save(const char *name) {
  const char *v = getenv(name);
  return v ? strdup(v) : NULL;
}

static void env_restore(const char *name, char *saved) {
  if (saved)
    setenv(name, saved, 1);
  else
    unsetenv(name);
  free(saved);
}

/* With name=value, creating a communicator fails on this rank with DPT_ERR_INVALID_ARG and a
 * message that quotes the setting; a failure is recorded in *o (unless one already is). */
static void expect_bad_env(outcome *o, const char *name, const char *value) {
  setenv(name, value, 1);
  char quoted[128];
  snprintf(quoted, sizeof quoted, "%s='%s'", name, value);
  dpt_comm *bad = NULL;
  dpt_status st = dpt_comm_create_mpi(NULL, &bad);
  if (o->rc == 0 && (st != DPT_ERR_INVALID_ARG || bad || !strstr(dpt_last_error(), quoted))) {
    o->rc = -1;
    snprintf(o->err, sizeof o->err, "%s: %s: %s", quoted, dpt_status_name(st),
             st == DPT_OK ? "accepted" : dpt_last_error());
  }
  dpt_comm_destroy(bad);
}

/* Every way of writing shared-memory slots (DPT_COMM_SHM_COPY) gives the same closed-form,
 * bit-identical result: 3.1M floats (a partial last block: slots that are no multiple of 64
 * bytes) move in hundreds of slots, enough for the auto mode to measure and try both (the
 * test counts the slots written each way). A value that is not a mode fails the creation on
 * every rank, with the variable named. */
START_TEST(shm_copy_modes) {
  const char *modes[] = {"cached", "streaming", "auto"};
  char *saved = env_save("DPT_COMM_SHM_COPY");
  outcome o = {0};
  /* Every rank runs every step whatever its own results (a collective that failed on one rank
   * only must not leave the others waiting); the first error is kept. */
  for (int m = 0; m < 3; ++m) {
    setenv("DPT_COMM_SHM_COPY", modes[m], 1);
    dpt_comm *c = make_comm(NULL);
    for (int rep = 0; rep < 2; ++rep) {
      char err[sizeof o.err - 64];
      int rc = comm_case_allreduce(c, NULL, ((size_t)3 << 20) + 100003, DPT_COMM_F32,
                                   &o.hash[o.nhash++], err, sizeof err);
      if (rc && o.rc == 0) {
        o.rc = rc;
        snprintf(o.err, sizeof o.err, "%s [DPT_COMM_SHM_COPY=%s]", err, modes[m]);
      }
    }
    /* The slots this rank wrote went the way the mode says (x86-64: streaming stores exist):
     * auto measured and tried both. Across nodes a rank whose ring successor is on another
     * node writes no slot: nothing to check there. */
    uint64_t large[2];
    const int next = (world_rank + 1) % world_size;
    const int next_here = !c->node || c->node[next] == c->node[world_rank];
    if (dpt_comm_mpi_large_slots(c, large) && o.rc == 0 && next_here) {
      const int want_cached = m != 1, want_stream = m != 0;
      const int ok = SHM_STREAMS ? (large[0] > 0) == want_cached && (large[1] > 0) == want_stream
                                 : large[0] > 0 && large[1] == 0;
      if (!ok) {
        o.rc = -1;
        snprintf(o.err, sizeof o.err,
                 "DPT_COMM_SHM_COPY=%s: %llu slots written by memcpy, %llu "
                 "streamed",
                 modes[m], (unsigned long long)large[0], (unsigned long long)large[1]);
      }
    }
    dpt_comm_destroy(c);
  }
  for (int i = 1; i < o.nhash && o.rc == 0; ++i)
    if (o.hash[i] != o.hash[0]) {
      o.rc = -1;
      snprintf(o.err, sizeof o.err, "result %d differs from the cached mode's", i);
    }
  expect_bad_env(&o, "DPT_COMM_SHM_COPY", "fast");
  env_restore("DPT_COMM_SHM_COPY", saved);
  agree(&o, "shm copy modes");
}
END_TEST

/* DPT_COMM_SHM takes 0 or 1; anything else fails the creation on every rank, naming the
 * variable (a typo must not silently keep the path the user meant to turn off). */
START_TEST(shm_switch_checked) {
  char *saved = env_save("DPT_COMM_SHM");
  outcome o = {0};
  expect_bad_env(&o, "DPT_COMM_SHM", "off");
  for (int v = 0; v < 2; ++v) {
    setenv("DPT_COMM_SHM", v ? "1" : "0", 1);
    dpt_comm *c = NULL;
    dpt_status st = dpt_comm_create_mpi(NULL, &c);
    uint64_t large[2];
    /* One node here: "1" gives the shared-memory channels, "0" MPI point-to-point. */
    if (o.rc == 0 && (st != DPT_OK || dpt_comm_mpi_large_slots(c, large) != v)) {
      o.rc = -1;
      snprintf(o.err, sizeof o.err, "DPT_COMM_SHM=%d: %s: %s", v, dpt_status_name(st),
               st == DPT_OK ? "wrong data path" : dpt_last_error());
    }
    dpt_comm_destroy(c);
  }
  env_restore("DPT_COMM_SHM", saved);
  agree(&o, "DPT_COMM_SHM checked");
}
END_TEST

/* Creation with setting `name` = `value` on rank `who` only (-1: on every rank but 0):
 * DPT_ERR_MISMATCH on every rank, quickly, with a message containing `want` (rank 0's value
 * being the default). */
static void expect_mismatch(outcome *o, const char *name, const char *value, int who,
                            const char *want) {
  char *saved = env_save(name);
  if (world_rank == who || (who < 0 && world_rank > 0)) setenv(name, value, 1);
  dpt_comm *c = NULL;
  const double t0 = now_s();
  dpt_status st = dpt_comm_create_mpi(NULL, &c);
  const double took = now_s() - t0;
  if (o->rc == 0 &&
      (st != DPT_ERR_MISMATCH || c || took > 5.0 || !strstr(dpt_last_error(), want))) {
    o->rc = -1;
    snprintf(o->err, sizeof o->err, "%s=%s on rank %d: %s after %.2f s: %s", name, value, who,
             dpt_status_name(st), took, st == DPT_OK ? "accepted" : dpt_last_error());
  }
  dpt_comm_destroy(c);
  env_restore(name, saved);
}

/* Settings that change the schedule, the sizes, the algorithm choice or the desync check
 * must agree across ranks: one rank without the desync check would skip the hello round the
 * others wait in (a hang until the deadline). Staging and the slot copy mode may differ. */
START_TEST(options_must_agree) {
  outcome o = {0};
  char want[128];
  expect_mismatch(&o, "DPT_COMM_DESYNC_CHECK", "0", 1,
                  "DPT_COMM_DESYNC_CHECK differs across ranks: rank 1 has 0, rank 0 has 1");
  const int last = world_size - 1;
  snprintf(want, sizeof want,
           "DPT_COMM_PIECE differs across ranks: rank %d has 65536, rank 0 has 131072", last);
  expect_mismatch(&o, "DPT_COMM_PIECE", "64K", last, want);
  /* Every rank but 0 differs: all are named. */
  snprintf(want, sizeof want, "DPT_COMM_DESYNC_CHECK differs across ranks: rank 1 has 0, %s",
           world_size > 2 ? "rank 2 has 0, " : "rank 0 has 1");
  expect_mismatch(&o, "DPT_COMM_DESYNC_CHECK", "0", -1, want);
  expect_mismatch(&o, "DPT_ALLREDUCE_ALGO", "ring", 1,
                  "DPT_ALLREDUCE_ALGO differs across ranks: rank 1 has ring, rank 0 has auto");
  expect_mismatch(&o, "DPT_COMM_TIMEOUT", "7.5", 1,
                  "DPT_COMM_TIMEOUT differs across ranks: rank 1 has 7.5, rank 0 has 300");
  expect_mismatch(&o, "DPT_ALLREDUCE_MPI_NODES_MAX", "0", 1,
                  "DPT_ALLREDUCE_MPI_NODES_MAX differs across ranks: rank 1 has 0, rank 0 has "
                  "1048576");
  /* Per-rank settings: accepted, and the collectives agree. */
  char *staging = env_save("DPT_COMM_STAGING"), *copy = env_save("DPT_COMM_SHM_COPY");
  if (world_rank == 1) {
    setenv("DPT_COMM_STAGING", "inline", 1);
    setenv("DPT_COMM_SHM_COPY", "cached", 1);
  }
  dpt_comm *c = NULL;
  dpt_status st = dpt_comm_create_mpi(NULL, &c);
  if (o.rc == 0 && st != DPT_OK) {
    o.rc = -1;
    snprintf(o.err, sizeof o.err, "per-rank staging and copy mode: %s", dpt_last_error());
  }
  if (o.rc == 0)
    o.rc =
        comm_case_allreduce(c, NULL, 300007, DPT_COMM_F32, &o.hash[o.nhash++], o.err, sizeof o.err);
  dpt_comm_destroy(c);
  env_restore("DPT_COMM_STAGING", staging);
  env_restore("DPT_COMM_SHM_COPY", copy);
  agree(&o, "options agree across ranks");
}
END_TEST

/* When the shared-memory segment cannot be created (here: rank 0 may not write files over
 * 64 KiB, as on a full /dev/shm), every rank falls back to MPI point-to-point, the results
 * are unchanged, and rank 0 says so on stderr in one line, once per process however many
 * communicators fall back. Under DPT_COMM_SHM=0 nothing is said (nothing was wanted). */
START_TEST(shm_fallback_said_once) {
  const char *env = getenv("DPT_COMM_SHM");
  const int want_shm = !env || strcmp(env, "0");
  outcome o = {0};
  struct rlimit was;
  getrlimit(RLIMIT_FSIZE, &was);
  void (*was_sig)(int) = SIG_DFL;
  int saved_err = -1;
  FILE *log = NULL;
  if (world_rank == 0) {
    log = tmpfile();
    ck_assert_ptr_nonnull(log);
    fflush(stderr);
    saved_err = dup(2);
    dup2(fileno(log), 2);
    was_sig = signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = was;
    small.rlim_cur = 64 << 10;
    setrlimit(RLIMIT_FSIZE, &small);
  }
  for (int k = 0; k < 2 && o.rc == 0; ++k) {
    dpt_comm *c = NULL;
    uint64_t large[2];
    if (dpt_comm_create_mpi(NULL, &c) != DPT_OK) {
      o.rc = -1;
      snprintf(o.err, sizeof o.err, "creation: %s", dpt_last_error());
    } else if (dpt_comm_mpi_large_slots(c, large)) {
      o.rc = -1;
      snprintf(o.err, sizeof o.err, "rank %d uses shared memory", world_rank);
    } else {
      o.rc = comm_case_allreduce(c, NULL, 100003, DPT_COMM_F32, &o.hash[o.nhash++], o.err,
                                 sizeof o.err);
    }
    dpt_comm_destroy(c);
  }
  if (world_rank == 0) {
    setrlimit(RLIMIT_FSIZE, &was);
    signal(SIGXFSZ, was_sig);
    fflush(stderr);
    dup2(saved_err, 2);
    close(saved_err);
    char text[2048] = "";
    rewind(log);
    size_t n = fread(text, 1, sizeof text - 1, log);
    text[n] = '\0';
    fclose(log);
    int lines = 0;
    for (size_t i = 0; i < n; ++i)
      lines += text[i] == '\n';
    const char *head = "dptrain: shared-memory channels unavailable (";
    const char *tail = "); using MPI point-to-point, slower\n";
    const int ok = want_shm ? lines == 1 && !strncmp(text, head, strlen(head)) &&
                                  n > strlen(tail) && !strcmp(text + n - strlen(tail), tail)
                            : n == 0;
    if (o.rc == 0 && !ok) {
      o.rc = -1;
      snprintf(o.err, sizeof o.err, "stderr of rank 0 (%d lines): '%s'", lines, text);
    }
    if (want_shm) printf("shm_fallback_said_once: %s", text);
  }
  agree(&o, "shared-memory fallback");
}
END_TEST

/* Node ids as the library numbers them: node[0] is 0 and each rank's is at most one more than
 * the largest before it (first appearance), all below nnodes, and every id used. */
static int nodes_numbered(const int *node, int size, int nnodes) {
  int top = -1;
  for (int r = 0; r < size; ++r) {
    if (node[r] < 0 || node[r] > top + 1) return 0;
    if (node[r] > top) top = node[r];
  }
  return top == nnodes - 1;
}

/* Each rank's node: every rank sees the same count and ids, numbered by first appearance;
 * the count is DPT_TEST_NODES when set (the cluster test), else ceil(size / K) under
 * DPT_COMM_FAKE_NODES=K (rank r on node r / K), else 1. A direct all-reduce (every rank sends
 * to every other) then sends bytes through the shared-memory channels exactly when this rank
 * has a peer on its node (and DPT_COMM_SHM is not 0), through MPI exactly when there are other
 * nodes (or no channels), and sums right. */
START_TEST(nodes_and_paths) {
  const char *fake = getenv("DPT_COMM_FAKE_NODES"), *want_env = getenv("DPT_TEST_NODES");
  const char *shm_env = getenv("DPT_COMM_SHM");
  const int k = fake ? atoi(fake) : 0, shm = !shm_env || strcmp(shm_env, "0");
  const int want = want_env ? atoi(want_env) : k > 0 ? (world_size + k - 1) / k : 1;
  outcome o = {0};
  dpt_comm *c = make_comm(NULL);
  const int nodes = dpt_comm_nodes(c);
  int *node = calloc((size_t)world_size, sizeof *node);
  ck_assert_ptr_nonnull(node);
  if (c->node) memcpy(node, c->node, (size_t)world_size * sizeof *node);
  int peers = 0, multi = 0; /* ranks on this rank's node; some node has two ranks or more */
  for (int r = 0; r < world_size; ++r) {
    peers += r != world_rank && node[r] == node[world_rank];
    for (int q = 0; q < r; ++q)
      multi |= node[q] == node[r];
  }
  if (nodes != want || (c->node == NULL) != (nodes == 1) ||
      !nodes_numbered(node, world_size, nodes))
    snprintf(o.err, sizeof o.err, "%d nodes (expected %d), node[] %s", nodes, want,
             c->node ? "set" : "NULL");
  for (int r = 0; r < world_size && !o.err[0] && k > 0 && !want_env; ++r)
    if (node[r] != r / k)
      snprintf(o.err, sizeof o.err, "DPT_COMM_FAKE_NODES=%d: rank %d on node %d", k, r, node[r]);
  /* The place on the machine, from MPI's shared-memory group: mpiexec's own count where it
   * exports one, else (real nodes) the ranks below this one on its node. */
  const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  int below = 0;
  for (int r = 0; r < world_rank; ++r)
    below += node[r] == node[world_rank];
  const int want_local = lr ? atoi(lr) : k > 0 ? -1 : below;
  if (!o.err[0] && want_local >= 0 && dpt_comm_local_rank(c) != want_local)
    snprintf(o.err, sizeof o.err, "local rank %d, expected %d", dpt_comm_local_rank(c), want_local);
  if (o.err[0]) o.rc = -1;
  o.hash[o.nhash++] = comm_case_hash(node, (size_t)world_size * sizeof *node);
  dpt_comm_paths before, after;
  ck_assert_int_eq(dpt_comm_get_paths(c, &before), DPT_OK);
  ck_assert_int_eq(dpt_comm_set_algo(c, DPT_ALLREDUCE_DIRECT), DPT_OK);
  if (o.rc == 0)
    o.rc =
        comm_case_allreduce(c, NULL, 1003, DPT_COMM_F32, &o.hash[o.nhash++], o.err, sizeof o.err);
  ck_assert_int_eq(dpt_comm_get_paths(c, &after), DPT_OK);
  const uint64_t via_shm = after.shm_bytes - before.shm_bytes;
  const uint64_t via_mpi = after.p2p_bytes - before.p2p_bytes;
  if (o.rc == 0 && (after.nodes != nodes || after.shm != (shm && multi) ||
                    (via_shm > 0) != (shm && peers > 0) || (via_mpi > 0) != (nodes > 1 || !shm))) {
    o.rc = -1;
    snprintf(o.err, sizeof o.err,
             "paths: %d nodes, shm %d, %llu bytes through shared memory, %llu through MPI "
             "(%d peers on this node, DPT_COMM_SHM %d)",
             after.nodes, after.shm, (unsigned long long)via_shm, (unsigned long long)via_mpi,
             peers, shm);
  }
  /* And a ring all-reduce over several blocks through both paths. */
  ck_assert_int_eq(dpt_comm_set_algo(c, DPT_ALLREDUCE_RING), DPT_OK);
  if (o.rc == 0)
    o.rc = comm_case_allreduce(c, NULL, ((size_t)1 << 20) + 3, DPT_COMM_F32, &o.hash[o.nhash++],
                               o.err, sizeof o.err);
  if (world_rank == 0)
    printf("nodes_and_paths: %d nodes, rank 0: %llu bytes through shared memory, %llu through "
           "MPI (direct all-reduce)\n",
           nodes, (unsigned long long)via_shm, (unsigned long long)via_mpi);
  free(node);
  dpt_comm_destroy(c);
  agree(&o, "nodes and paths");
}
END_TEST

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  g_gpu = argc > 1 && !strcmp(argv[1], "gpu");

  Suite *s = suite_create("comm_mpi");
  TCase *tc = tcase_create("mpi");
  tcase_set_timeout(tc, 0); /* ctest's TIMEOUT bounds the whole run */
  tcase_add_test(tc, allreduce_host_closed_form);
  tcase_add_test(tc, allreduce_buffers);
  tcase_add_test(tc, allreduce_large_buffers);
  tcase_add_test(tc, allreduce_bit_identical);
  tcase_add_test(tc, sharded_closed_form);
  tcase_add_test(tc, hier_native_cross);
  tcase_add_test(tc, broadcast_allgather_barrier);
  tcase_add_test(tc, mismatch_reported_everywhere);
  tcase_add_test(tc, stall_gives_timeout);
  tcase_add_test(tc, late_rank_waits_asleep);
  tcase_add_test(tc, sub_communicator);
  tcase_add_test(tc, shm_copy_modes);
  tcase_add_test(tc, shm_switch_checked);
  tcase_add_test(tc, options_must_agree);
  tcase_add_test(tc, shm_fallback_said_once);
  suite_add_tcase(s, tc);
  tc = tcase_create("requests");
  tcase_set_timeout(tc, 0);
  tcase_add_test(tc, requests);
  tcase_add_test(tc, requests_one_mpi_comm_at_a_time);
  suite_add_tcase(s, tc);
  /* Alone (CK_RUN_CASE=nodes) in the cluster test. */
  tc = tcase_create("nodes");
  tcase_set_timeout(tc, 0);
  tcase_add_test(tc, nodes_and_paths);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, world_rank == 0 ? CK_NORMAL : CK_SILENT);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  /* Every rank's verdict decides the exit code of all of them. */
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any ? 1 : 0;
}
