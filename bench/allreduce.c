/* bench allreduce: dptrain's all-reduce next to MPI_Allreduce on the same data, same run.
 *
 * Run under mpirun -np N. For each size (1 KiB .. 256 MiB, x4 by default) it times, in
 * alternation so that drift hits all columns alike:
 *   dpt      dpt_allreduce_host / dpt_allreduce_buffer, desync check on (the default)
 *   nocheck  the same with the desync check off (the check's cost is the difference)
 *   mpi      MPI_Allreduce(MPI_IN_PLACE) on the same host data; for device buffers the naive
 *            staged equivalent: download all, MPI_Allreduce, upload all
 * Each figure is the median over repeats of the slowest rank's time (barrier before each, the
 * data rewritten before each call).
 * busbw = algbw * 2(N-1)/N (nccl-tests' definition: comparable with the link bandwidth).
 * ratio = mpi time / dpt time (> 1: dptrain is faster). shm% = the share of the bytes the dpt
 * column's calls sent (all ranks) that went through the shared-memory channels, the rest through
 * MPI point-to-point (the header says how many nodes and whether channels are in use). The
 * single-core memcpy bandwidth of the machine is printed first as the physical reference.
 *
 * With --threads N (no mpirun) the ranks are threads of this process (the threads transport),
 * grouped into --nodes M fake nodes, and the reference column is dptrain's flat ring forced:
 * a quick look at the hierarchical all-reduce without a cluster (in-process copies, so every
 * "link" is the same memory: it shows the schedule's cost, not a network's).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/parse.h"
#include "bench/bench.h"
#include "collectives/common/comm_struct.h"
#include "collectives/transports/transport.h"
#include "dptrain/backend.h"
#include "dptrain/comm.h"

#ifdef DPT_HAVE_MPI
#include <mpi.h>
#endif

static void usage(FILE *f) {
  fprintf(f,
          "usage: mpirun -np N dptrain bench allreduce [options]   (or bench_allreduce)\n"
          "Times dptrain's all-reduce and MPI_Allreduce on the same data, one row per size.\n"
          "  --sizes MIN:MAX    byte range (default 1K:256M; K, M, G suffixes)\n"
          "  --factor F         size step factor (default 4)\n"
          "  --buffer B         host | cpu | opencl | vulkan: where the data lives (default host)\n"
          "  --dtype T          f32 | f16 | bf16 (default f32)\n"
          "  --algo A           auto | ring | rd | direct | mpi | hier (default auto; auto and\n"
          "                     hier run hier where the ranks span nodes of equal size)\n"
          "  --piece BYTES      ring message size; --block BYTES: ring block / staging chunk\n"
          "  --staging S        auto (zero-copy where the device memory is the host's, else\n"
          "                     staged) | inline | thread (always staged; device buffers)\n"
          "  --repeat N         timed calls per figure (default: enough for ~0.25 s, 5..1000)\n"
          "  --no-check         skip the correctness check before timing\n"
          "  --threads N        no mpirun: N members of the threads transport in this process,\n"
          "                     timed against the flat ring forced (instead of MPI_Allreduce)\n"
          "  --nodes M          with --threads: rank r on fake node r*M/N (default 1), so that\n"
          "                     auto / hier run the hierarchical all-reduce\n"
          "  --json             one JSON object per size: bytes, ranks, buffer, dpt_us,\n"
          "                     dpt_busbw_gbs, mpi_us, mpi_busbw_gbs, ratio (+ nocheck_us,\n"
          "                     algo, dtype, shm_share); first line: memcpy_gbs, ranks,\n"
          "                     nodes, shm\n");
}

#ifndef DPT_HAVE_MPI
int dpt_bench_allreduce(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "bench allreduce: this dptrain was built without MPI\n");
  return 1;
}
#else

#define MAX_REPEAT 1000

typedef struct config {
  size_t min, max;
  unsigned factor;
  int have_buffer; /* data in a device buffer */
  dpt_backend_kind backend;
  const char *buffer_name;
  dpt_comm_dtype dtype;
  int repeat, check, json;
  int threads, nodes; /* --threads, --nodes (0: MPI) */
  dpt_comm_options opt;
} config;

/* A byte size, alone or before the ':' of a MIN:MAX range; 0 on success, -1 otherwise. */
static int parse_size(const char *s, size_t *out) {
  const char *end;
  return dpt_parse_bytes(s, &end, out) && (*end == '\0' || *end == ':') ? 0 : -1;
}

static int parse_args(int argc, char **argv, config *cfg, int rank) {
  cfg->min = 1024;
  cfg->max = (size_t)256 << 20;
  cfg->factor = 4;
  cfg->buffer_name = "host";
  cfg->dtype = DPT_COMM_F32;
  cfg->check = 1;
  dpt_comm_options_default(&cfg->opt);
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int bad = 0;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      if (rank == 0) usage(stdout);
      return 1;
    } else if (!strcmp(a, "--json")) {
      cfg->json = 1;
    } else if (!strcmp(a, "--no-check")) {
      cfg->check = 0;
    } else if (!v) {
      bad = 1;
    } else if (!strcmp(a, "--sizes")) {
      const char *colon = strchr(v, ':');
      bad = !colon || parse_size(v, &cfg->min) || parse_size(colon + 1, &cfg->max) ||
            cfg->min == 0 || cfg->max < cfg->min;
      ++i;
    } else if (!strcmp(a, "--factor")) {
      cfg->factor = (unsigned)atoi(v);
      bad = cfg->factor < 2;
      ++i;
    } else if (!strcmp(a, "--buffer")) {
      cfg->buffer_name = v;
      cfg->have_buffer = strcmp(v, "host") != 0;
      bad = cfg->have_buffer && dpt_backend_kind_parse(v, &cfg->backend) != DPT_OK;
      ++i;
    } else if (!strcmp(a, "--dtype")) {
      bad = strcmp(v, "f32") && strcmp(v, "f16") && strcmp(v, "bf16");
      cfg->dtype = !strcmp(v, "f16")    ? DPT_COMM_F16
                   : !strcmp(v, "bf16") ? DPT_COMM_BF16
                                        : DPT_COMM_F32;
      ++i;
    } else if (!strcmp(a, "--algo")) {
      bad = dpt_allreduce_algo_parse(v, &cfg->opt.algo) != DPT_OK;
      ++i;
    } else if (!strcmp(a, "--piece")) {
      bad = parse_size(v, &cfg->opt.piece_bytes);
      ++i;
    } else if (!strcmp(a, "--block")) {
      bad = parse_size(v, &cfg->opt.block_bytes);
      ++i;
    } else if (!strcmp(a, "--staging")) {
      if (!strcmp(v, "auto"))
        cfg->opt.staging = DPT_STAGING_AUTO;
      else if (!strcmp(v, "inline"))
        cfg->opt.staging = DPT_STAGING_INLINE;
      else if (!strcmp(v, "thread"))
        cfg->opt.staging = DPT_STAGING_THREAD;
      else
        bad = 1;
      ++i;
    } else if (!strcmp(a, "--threads")) {
      cfg->threads = atoi(v);
      bad = cfg->threads < 2 || cfg->threads > 4096;
      ++i;
    } else if (!strcmp(a, "--nodes")) {
      cfg->nodes = atoi(v);
      bad = cfg->nodes < 1 || cfg->nodes > 4096;
      ++i;
    } else if (!strcmp(a, "--repeat")) {
      cfg->repeat = atoi(v);
      bad = cfg->repeat < 1 || cfg->repeat > MAX_REPEAT;
      ++i;
    } else {
      bad = 1;
    }
    if (bad) {
      if (rank == 0) {
        fprintf(stderr, "bench allreduce: bad or incomplete option '%s'\n", a);
        usage(stderr);
      }
      return 2;
    }
  }
  if (cfg->nodes > 0 && (!cfg->threads || cfg->nodes > cfg->threads)) {
    if (rank == 0) fprintf(stderr, "bench allreduce: --nodes needs --threads N >= the nodes\n");
    return 2;
  }
  if (cfg->threads && (cfg->have_buffer || cfg->json)) {
    if (rank == 0) fprintf(stderr, "bench allreduce: --threads: host data, a table only\n");
    return 2;
  }
  return 0;
}

/* Single-core memcpy bandwidth, GB/s (64 MiB, best of 5): the physical reference. */
static double memcpy_gbs(void) {
  const size_t n = (size_t)64 << 20;
  unsigned char *a = malloc(n), *b = malloc(n);
  double best = 0;
  if (a && b) {
    memset(a, 1, n);
    memset(b, 2, n);
    for (int k = 0; k < 5; ++k) {
      double t = dpt_now();
      memcpy(b, a, n);
      t = dpt_now() - t;
      if (t > 0 && n / t > best) best = (double)n / t;
    }
  }
  free(a);
  free(b);
  return best * 1e-9;
}

typedef struct run {
  const config *cfg;
  dpt_comm *comm;    /* desync check on */
  dpt_comm *nocheck; /* desync check off */
  int rank, size;
  dpt_buffer *buf; /* device data, or NULL */
  void *host;      /* host data (also the staging copy for mpi with device buffers) */
  size_t count, bytes;
} run;

/* "f32", "f16", "bf16" and "float32", "float16", "bfloat16" */
static const char *dtype_flag(dpt_comm_dtype dt) {
  return dt == DPT_COMM_F16 ? "f16" : dt == DPT_COMM_BF16 ? "bf16" : "f32";
}
static const char *dtype_name(dpt_comm_dtype dt) {
  return dt == DPT_COMM_F16 ? "float16" : dt == DPT_COMM_BF16 ? "bfloat16" : "float32";
}

/* Rank `rank`'s closed-form input: element i is ((i%5)+1) * (rank+1). */
static void fill_values(void *host, size_t count, dpt_comm_dtype dtype, int rank) {
  for (size_t i = 0; i < count; ++i) {
    float v = (float)((i % 5) + 1) * (float)(rank + 1);
    if (dtype == DPT_COMM_F16)
      ((uint16_t *)host)[i] = dpt_f32_to_f16_scalar(v);
    else if (dtype == DPT_COMM_BF16)
      ((uint16_t *)host)[i] = dpt_f32_to_bf16_scalar(v);
    else
      ((float *)host)[i] = v;
  }
}

/* 0 when the sums over `size` ranks are right; else prints the first wrong element. */
static int verify(const void *host, size_t count, dpt_comm_dtype dtype, int size, int rank) {
  const float w = (float)(size * (size + 1) / 2);
  for (size_t i = 0; i < count; ++i) {
    float want = (float)((i % 5) + 1) * w;
    const uint16_t h = dtype == DPT_COMM_F32 ? 0 : ((const uint16_t *)host)[i];
    float got = dtype == DPT_COMM_F16    ? dpt_f16_to_f32_scalar(h)
                : dtype == DPT_COMM_BF16 ? dpt_bf16_to_f32_scalar(h)
                                         : ((const float *)host)[i];
    if (got != want) {
      fprintf(stderr, "rank %d: %zu elements: element %zu is %g, expected %g\n", rank, count, i,
              got, want);
      return -1;
    }
  }
  return 0;
}

static void fill(run *r) {
  fill_values(r->host, r->count, r->cfg->dtype, r->rank);
}

/* One timed call of method m (0 dpt, 1 dpt without the check, 2 MPI). The data is written
 * anew first (not timed), as a backward pass writes gradients: the previous call must not
 * leave the buffer in a state that favours or hinders the next method (after
 * MPI_Allreduce, whose single-copy transfers let the peer read the buffer, its cache lines
 * sit shared in the other core's cache and every write of the next call first invalidates
 * them). */
static int call(run *r, int m, double *seconds) {
  const config *cfg = r->cfg;
  dpt_status st = DPT_OK;
  fill(r);
  if (r->buf) st = dpt_buffer_upload(r->buf, 0, r->host, r->bytes);
  MPI_Barrier(MPI_COMM_WORLD);
  double t = dpt_now();
  if (m < 2) {
    dpt_comm *c = m == 0 ? r->comm : r->nocheck;
    st = r->buf ? dpt_allreduce_buffer(c, r->buf, 0, r->count, cfg->dtype)
                : dpt_allreduce_host(c, r->host, r->count, cfg->dtype);
  } else {
    MPI_Datatype type = cfg->dtype == DPT_COMM_F32 ? MPI_FLOAT : MPI_UINT16_T;
    if (r->buf) st = dpt_buffer_download(r->buf, 0, r->host, r->bytes);
    /* MPI has no 16-bit float sum: for f16 and bf16 it reduces the same bytes as uint16
     * (same traffic). */
    int rc = MPI_Allreduce(MPI_IN_PLACE, r->host, (int)r->count, type, MPI_SUM, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) st = DPT_ERR_COMM;
    if (st == DPT_OK && r->buf) st = dpt_buffer_upload(r->buf, 0, r->host, r->bytes);
  }
  double dt = dpt_now() - t;
  MPI_Allreduce(&dt, seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  int bad = st != DPT_OK, any = 0;
  if (bad) fprintf(stderr, "rank %d: %s: %s\n", r->rank, dpt_status_str(st), dpt_last_error());
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any ? -1 : 0;
}

/* Checks one all-reduce of the closed-form input: element i sums to ((i%5)+1) * N(N+1)/2. */
static int check(run *r) {
  fill(r);
  dpt_status st = DPT_OK;
  if (r->buf) st = dpt_buffer_upload(r->buf, 0, r->host, r->bytes);
  if (st == DPT_OK)
    st = r->buf ? dpt_allreduce_buffer(r->comm, r->buf, 0, r->count, r->cfg->dtype)
                : dpt_allreduce_host(r->comm, r->host, r->count, r->cfg->dtype);
  if (st == DPT_OK && r->buf) st = dpt_buffer_download(r->buf, 0, r->host, r->bytes);
  int bad = st != DPT_OK;
  if (!bad) bad = verify(r->host, r->count, r->cfg->dtype, r->size, r->rank) != 0;
  if (st != DPT_OK) fprintf(stderr, "rank %d: %s\n", r->rank, dpt_last_error());
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any ? -1 : 0;
}

static int bench(const config *cfg, int rank, int size) {
  int rc = 0;
  dpt_backend *be = NULL;
  run r = {0};
  r.cfg = cfg;
  r.rank = rank;
  r.size = size;
  dpt_status st = dpt_comm_create_mpi(NULL, &r.comm);
  if (st == DPT_OK) st = dpt_comm_set_options(r.comm, &cfg->opt);
  if (st == DPT_OK) st = dpt_comm_create_mpi(NULL, &r.nocheck);
  if (st == DPT_OK) st = dpt_comm_set_options(r.nocheck, &cfg->opt);
  if (st == DPT_OK) st = dpt_comm_set_desync_check(r.nocheck, 0);
  if (st == DPT_OK && cfg->have_buffer) st = dpt_backend_create(cfg->backend, 0, &be);
  const size_t es = cfg->dtype == DPT_COMM_F32 ? 4 : 2;
  if (st == DPT_OK) {
    r.host = malloc(cfg->max);
    if (!r.host) st = DPT_ERR_OUT_OF_MEMORY;
  }
  if (st == DPT_OK && be) st = dpt_buffer_alloc(be, cfg->max, &r.buf);
  int bad = st != DPT_OK, any = 0;
  if (bad) fprintf(stderr, "bench allreduce: rank %d: %s\n", rank, dpt_last_error());
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any) rc = 1;

  /* The other ranks wait asleep while rank 0 measures memcpy: a rank spinning in MPI_Barrier
   * on a sibling hardware thread would halve the figure. */
  double mc = 0;
  if (!rc) {
    if (rank == 0) mc = memcpy_gbs();
    dpt_bench_sleeping_barrier();
  }
  dpt_comm_paths paths = {0};
  if (!rc) dpt_comm_get_paths(r.comm, &paths);
  if (!rc && rank == 0) {
    if (cfg->json) {
      printf("{\"memcpy_gbs\": %.2f, \"ranks\": %d, \"nodes\": %d, \"shm\": %d}\n", mc, size,
             paths.nodes, paths.shm);
    } else {
      printf("# dptrain bench allreduce: %d ranks (MPI) on %d node%s, shared memory inside "
             "nodes: %s, buffer %s, %s, algo %s\n",
             size, paths.nodes, paths.nodes == 1 ? "" : "s", paths.shm ? "yes" : "no",
             cfg->buffer_name, dtype_name(cfg->dtype), dpt_allreduce_algo_name(cfg->opt.algo));
      printf("# memcpy, one core, 64 MiB: %.2f GB/s (the physical reference)\n", mc);
      printf("# times: median of the slowest rank, us; busbw = algbw * 2(N-1)/N, GB/s;\n"
             "# nocheck = dptrain without the desync check; ratio = mpi_us / dpt_us;\n"
             "# shm%% = share of dpt's bytes sent through shared memory (the rest: MPI p2p)\n");
      printf("%12s %7s %11s %10s %11s %11s %10s %7s %5s\n", "bytes", "algo", "dpt_us", "dpt_busbw",
             "nocheck_us", "mpi_us", "mpi_busbw", "ratio", "shm%");
    }
    fflush(stdout);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  double *t[3] = {malloc(MAX_REPEAT * sizeof(double)), malloc(MAX_REPEAT * sizeof(double)),
                  malloc(MAX_REPEAT * sizeof(double))};
  if (!t[0] || !t[1] || !t[2]) rc = 1;
  for (size_t bytes = cfg->min; !rc && bytes <= cfg->max; bytes *= cfg->factor) {
    r.count = bytes / es;
    r.bytes = r.count * es;
    if (cfg->check && check(&r)) {
      rc = 1;
      break;
    }
    fill(&r);
    if (r.buf && dpt_buffer_upload(r.buf, 0, r.host, r.bytes) != DPT_OK) rc = 1;
    /* Warm-up (first touch, scratch growth), then enough repeats for ~0.25 s per column. */
    double w = 0, w2;
    for (int m = 0; m < 3 && !rc; ++m) {
      if (call(&r, m, &w2) || call(&r, m, &w2)) rc = 1;
      if (w2 > w) w = w2;
    }
    if (rc) break;
    int reps = cfg->repeat;
    if (!reps) {
      reps = w > 0 ? (int)(0.25 / w) : MAX_REPEAT;
      if (reps < 5) reps = 5;
      if (reps > MAX_REPEAT) reps = MAX_REPEAT;
    }
    dpt_comm_paths p0, p1;
    dpt_comm_get_paths(r.comm, &p0);
    for (int k = 0; k < reps && !rc; ++k)
      for (int m = 0; m < 3 && !rc; ++m)
        if (call(&r, m, &t[m][k])) rc = 1;
    if (rc) break;
    dpt_comm_get_paths(r.comm, &p1);
    /* Bytes sent by every rank: through shared memory, through MPI point-to-point. */
    uint64_t sent[2] = {p1.shm_bytes - p0.shm_bytes, p1.p2p_bytes - p0.p2p_bytes}, all[2];
    MPI_Allreduce(sent, all, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    const double shm_share = all[0] + all[1] ? (double)all[0] / (double)(all[0] + all[1]) : 0.0;
    double us[3];
    for (int m = 0; m < 3; ++m)
      us[m] = dpt_bench_median(t[m], reps) * 1e6;
    const double f = 2.0 * (size - 1) / size;
    const double dpt_bw = (double)r.bytes / (us[0] * 1e-6) * f * 1e-9;
    const double mpi_bw = (double)r.bytes / (us[2] * 1e-6) * f * 1e-9;
    const char *algo = dpt_allreduce_algo_name(dpt_comm_pick_algo(r.comm, r.count, cfg->dtype));
    if (rank == 0) {
      if (cfg->json)
        printf("{\"bytes\": %zu, \"ranks\": %d, \"buffer\": \"%s\", \"dtype\": \"%s\", "
               "\"algo\": \"%s\", \"dpt_us\": %.2f, \"dpt_busbw_gbs\": %.3f, "
               "\"nocheck_us\": %.2f, \"mpi_us\": %.2f, \"mpi_busbw_gbs\": %.3f, "
               "\"ratio\": %.3f, \"shm_share\": %.3f, \"repeats\": %d}\n",
               r.bytes, size, cfg->buffer_name, dtype_flag(cfg->dtype), algo, us[0], dpt_bw, us[1],
               us[2], mpi_bw, us[2] / us[0], shm_share, reps);
      else
        printf("%12zu %7s %11.1f %10.2f %11.1f %11.1f %10.2f %7.2f %5.0f\n", r.bytes, algo, us[0],
               dpt_bw, us[1], us[2], mpi_bw, us[2] / us[0], 100.0 * shm_share);
      fflush(stdout);
    }
  }
  for (int m = 0; m < 3; ++m)
    free(t[m]);
  dpt_buffer_free(r.buf);
  dpt_backend_destroy(be);
  free(r.host);
  dpt_comm_destroy(r.nocheck);
  dpt_comm_destroy(r.comm);
  return rc;
}

/* ---- --threads N: the threads transport, fake nodes -------------------------------------- */

typedef struct th_shared {
  const config *cfg;
  dpt_comm_group *group;
  int size, reps;
  size_t count;
  double *t;      /* [2][reps][size]: seconds of method m (0 dpt, 1 ring), repeat k, rank r */
  atomic_int bad; /* a rank failed */
  dpt_allreduce_algo pick; /* what the dpt column ran (rank 0's pick) */
} th_shared;

typedef struct th_arg {
  th_shared *sh;
  int rank;
} th_arg;

/* One member: a checked all-reduce, then warm-up and `reps` timed calls of each method, a
 * barrier before each. */
static void *th_rank(void *p) {
  const th_arg *a = p;
  th_shared *sh = a->sh;
  const config *cfg = sh->cfg;
  const size_t es = cfg->dtype != DPT_COMM_F32 ? 2 : 4;
  void *host = malloc(sh->count * es);
  dpt_comm *c = NULL;
  dpt_status st = host ? dpt_comm_group_member(sh->group, a->rank, &c) : DPT_ERR_OUT_OF_MEMORY;
  if (st == DPT_OK) st = dpt_comm_set_options(c, &cfg->opt);
  if (st == DPT_OK && cfg->check) {
    fill_values(host, sh->count, cfg->dtype, a->rank);
    st = dpt_allreduce_host(c, host, sh->count, cfg->dtype);
    if (st == DPT_OK && verify(host, sh->count, cfg->dtype, sh->size, a->rank))
      st = DPT_ERR_MISMATCH;
  }
  if (st == DPT_OK && a->rank == 0) sh->pick = dpt_comm_pick_algo(c, sh->count, cfg->dtype);
  for (int k = -1; k < sh->reps && st == DPT_OK; ++k) { /* k = -1: warm-up */
    for (int m = 0; m < 2 && st == DPT_OK; ++m) {
      st = dpt_comm_set_algo(c, m ? DPT_ALLREDUCE_RING : cfg->opt.algo);
      fill_values(host, sh->count, cfg->dtype, a->rank);
      if (st == DPT_OK) st = dpt_barrier(c);
      const double t0 = dpt_now();
      if (st == DPT_OK) st = dpt_allreduce_host(c, host, sh->count, cfg->dtype);
      if (k >= 0)
        sh->t[((size_t)m * (size_t)sh->reps + (size_t)k) * (size_t)sh->size + (size_t)a->rank] =
            dpt_now() - t0;
    }
  }
  if (st != DPT_OK) {
    fprintf(stderr, "bench allreduce: rank %d: %s\n", a->rank, dpt_last_error());
    atomic_store(&sh->bad, 1);
  }
  dpt_comm_destroy(c);
  free(host);
  return NULL;
}

static int bench_threads(const config *cfg) {
  const int n = cfg->threads, nodes = cfg->nodes ? cfg->nodes : 1;
  const int reps = cfg->repeat ? cfg->repeat : 20;
  const size_t es = cfg->dtype != DPT_COMM_F32 ? 2 : 4;
  int *node = malloc((size_t)n * sizeof *node);
  pthread_t *th = malloc((size_t)n * sizeof *th);
  th_arg *args = malloc((size_t)n * sizeof *args);
  double *t = malloc(2 * (size_t)reps * (size_t)n * sizeof *t), slow[2][MAX_REPEAT];
  int rc = node && th && args && t ? 0 : 1;
  for (int r = 0; r < n && !rc; ++r)
    node[r] = (int)((long long)r * nodes / n);
  if (!rc) {
    printf("# dptrain bench allreduce: %d ranks (threads), %d fake node%s, %s, algo %s\n", n, nodes,
           nodes > 1 ? "s" : "", dtype_name(cfg->dtype), dpt_allreduce_algo_name(cfg->opt.algo));
    printf("# times: median of the slowest rank, us; busbw = algbw * 2(N-1)/N, GB/s;\n"
           "# ring = the flat ring forced; ratio = ring_us / dpt_us\n");
    printf("%12s %7s %11s %10s %11s %10s %7s\n", "bytes", "algo", "dpt_us", "dpt_busbw", "ring_us",
           "ring_busbw", "ratio");
  }
  for (size_t bytes = cfg->min; !rc && bytes <= cfg->max; bytes *= cfg->factor) {
    th_shared sh = {.cfg = cfg, .size = n, .reps = reps, .count = bytes / es, .t = t};
    atomic_init(&sh.bad, 0);
    if (dpt_comm_group_create(n, &sh.group) != DPT_OK ||
        (nodes > 1 && dpt_comm_group_set_nodes(sh.group, node) != DPT_OK)) {
      fprintf(stderr, "bench allreduce: %s\n", dpt_last_error());
      dpt_comm_group_destroy(sh.group);
      rc = 1;
      break;
    }
    int started = 0;
    for (; started < n; ++started) {
      args[started] = (th_arg){&sh, started};
      if (pthread_create(&th[started], NULL, th_rank, &args[started]) != 0) break;
    }
    for (int r = 0; r < started; ++r)
      pthread_join(th[r], NULL);
    dpt_comm_group_destroy(sh.group);
    if (started < n || atomic_load(&sh.bad)) {
      rc = 1;
      break;
    }
    double us[2];
    for (int m = 0; m < 2; ++m) {
      for (int k = 0; k < reps; ++k) {
        slow[m][k] = 0;
        for (int r = 0; r < n; ++r) {
          const double v = t[((size_t)m * (size_t)reps + (size_t)k) * (size_t)n + (size_t)r];
          if (v > slow[m][k]) slow[m][k] = v;
        }
      }
      us[m] = dpt_bench_median(slow[m], reps) * 1e6;
    }
    const double f = 2.0 * (n - 1) / n, b = (double)(sh.count * es);
    printf("%12.0f %7s %11.1f %10.2f %11.1f %10.2f %7.2f\n", b, dpt_allreduce_algo_name(sh.pick),
           us[0], b / (us[0] * 1e-6) * f * 1e-9, us[1], b / (us[1] * 1e-6) * f * 1e-9,
           us[1] / us[0]);
    fflush(stdout);
  }
  free(node);
  free(th);
  free(args);
  free(t);
  return rc;
}

int dpt_bench_allreduce(int argc, char **argv) {
  for (int i = 1; i < argc; ++i) /* --threads: no MPI at all */
    if (!strcmp(argv[i], "--threads")) {
      config cfg;
      memset(&cfg, 0, sizeof cfg);
      const int rc = parse_args(argc, argv, &cfg, 0);
      return rc == 1 ? 0 : rc ? rc : bench_threads(&cfg);
    }
  int init = 0, provided = 0;
  MPI_Initialized(&init);
  if (!init && MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "bench allreduce: MPI_Init_thread failed\n");
    return 1;
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  config cfg;
  memset(&cfg, 0, sizeof cfg);
  int rc = parse_args(argc, argv, &cfg, rank);
  if (rc == 0 && size < 2 && rank == 0)
    fprintf(stderr, "bench allreduce: %d rank: run it under mpirun -np 2 (or more)\n", size);
  if (rc == 0 && size >= 2)
    rc = bench(&cfg, rank, size);
  else if (rc == 1)
    rc = 0; /* --help */
  else if (rc == 0)
    rc = 1;
  if (!init) MPI_Finalize();
  return rc;
}
#endif
