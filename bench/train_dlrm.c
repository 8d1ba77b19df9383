/* bench train --model dlrm: DLRM's training throughput on interaction shards, the tables'
 * gradients in the dense exchange (the ring all-reduce of whole tables) next to --sparse-tables
 * (only the rows a step touched), for the same model in the same run. Each replica reads only
 * its own shards (dpt_train_config.local_train), as `dptrain train --model dlrm` does. The
 * shards are `dptrain data synth`'s (dpt_synth_record), written by rank 0 into a temporary
 * directory that the bench removes at the end, or an existing --data 'DIR/shard-*.bin'.
 * Without MPI the replicas are threads of this process; under `mpirun -np R` they are the R
 * ranks (one machine: the temporary directory is rank 0's /tmp; across machines give --data
 * on shared storage). Every figure is the median of --repeat runs of --steps steps, the
 * variants taking turns within each repeat. Memory: each rank's peak resident set (VmHWM,
 * reset before each run through /proc/self/clear_refs) next to the bytes of its shards and of
 * the whole data set. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/bench.h"
#include "dptrain/advanced.h"
#include "tools/prep/shards.h"

#ifdef DPT_HAVE_MPI
#include <mpi.h>
#endif

static void usage(FILE *f) {
  fprintf(f,
          "usage: dptrain bench train --model dlrm [options]   (or under mpirun -np R)\n"
          "Samples/s of DLRM (bottom 64,32, top 64,32, dot interaction; AdamW lr 1e-3, tables\n"
          "with --sparse-tables: SGD on the touched rows) with the tables' gradients in the\n"
          "dense exchange and with --sparse-tables, side by side, each replica reading only its\n"
          "shards; table bytes sent per step and replica; each rank's peak RSS next to the\n"
          "bytes of its shards and of the whole data set.\n"
          "  --data PATTERN    existing shards, e.g. 'DIR/shard-*.bin' (quoted; default: write\n"
          "                    `dptrain data synth` shards into a temporary directory)\n"
          "  --rows N          synthetic: ids per table (default 100000)\n"
          "  --tables T        synthetic: tables (default 8)\n"
          "  --samples N       synthetic: records (default 262144)\n"
          "  --shards K        synthetic: shard files (default 8; at least the replicas)\n"
          "  --embedding-dim D the model's embedding dimension (default 16)\n"
          "  --global-batch B  samples per step over all replicas (default 2048)\n"
          "  --sparse-tables   only the --sparse-tables variant (default: both)\n"
          "  --dense-tables    only the dense exchange (default: both)\n"
          "  --backend B       cpu | opencl | vulkan (default cpu)\n"
          "  --replicas R      replicas as threads of this process (default 2); under mpirun\n"
          "                    the replicas are the ranks and this is ignored\n"
          "  --steps N         steps per variant and repeat (default 20)\n"
          "  --repeat N        repeats; figures are medians (default 3)\n"
          "  --json            one JSON object instead of the table\n");
}

/* `dptrain data synth`'s shards: record i into shard i mod K (no .prob files). */
static dpt_status write_synth(const char *dir, const dpt_synth_config *c, uint64_t samples,
                              uint64_t shards) {
  dpt_shard_writer **w = calloc(shards, sizeof *w);
  uint64_t *sizes = malloc(c->tables * sizeof *sizes);
  float *dense = malloc((c->num_dense + 1) * sizeof *dense);
  int32_t *sparse = malloc(c->tables * sizeof *sparse);
  dpt_status st = w && sizes && dense && sparse ? DPT_OK : DPT_ERR_OUT_OF_MEMORY;
  for (uint32_t t = 0; st == DPT_OK && t < c->tables; ++t)
    sizes[t] = c->rows;
  char path[512];
  for (uint64_t s = 0; st == DPT_OK && s < shards; ++s) {
    snprintf(path, sizeof path, "%s/synth-%05" PRIu64 ".bin", dir, s);
    st = dpt_shard_writer_open(path, c->num_dense, c->tables, sizes, &w[s]);
  }
  for (uint64_t i = 0; st == DPT_OK && i < samples; ++i) {
    float label, prob;
    st = dpt_synth_record(c, i, dense, sparse, &label, &prob);
    if (st == DPT_OK) st = dpt_shard_writer_add(w[i % shards], label, dense, sparse);
  }
  for (uint64_t s = 0; w && s < shards; ++s) {
    if (st == DPT_OK)
      st = dpt_shard_writer_close(w[s]);
    else
      dpt_shard_writer_abort(w[s]);
  }
  free(w);
  free(sizes);
  free(dense);
  free(sparse);
  return st;
}

/* A field of /proc/self/status in bytes ("VmHWM", "VmRSS"); 0 when unreadable. */
static double proc_status_bytes(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  double kb = 0;
  const size_t n = strlen(field);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, field, n) && line[n] == ':') kb = atof(line + n + 1);
  if (f) fclose(f);
  return kb * 1024.0;
}

/* Resets VmHWM to the current RSS (Linux 4.0+); 0 on success. */
static int reset_peak_rss(void) {
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (!f) return -1;
  const int ok = fputs("5", f) >= 0;
  return fclose(f) == 0 && ok ? 0 : -1;
}

static double file_bytes(const char *path) {
  struct stat sb;
  return path && stat(path, &sb) == 0 ? (double)sb.st_size : 0;
}

/* n bytes as "12.3 kB" or "4.56 MB" into buf. */
static const char *human(char *buf, size_t size, double n) {
  if (n < 1e6)
    snprintf(buf, size, "%.1f kB", n / 1e3);
  else
    snprintf(buf, size, "%.2f MB", n / 1e6);
  return buf;
}

/* Under MPI every rank agrees whether every rank succeeded (sleeping until the slowest is
 * there); without MPI rc itself. */
static int settle(int mpi, int rc) {
#ifdef DPT_HAVE_MPI
  if (mpi) {
    dpt_bench_sleeping_barrier();
    int any = 0;
    MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any;
  }
#endif
  (void)mpi;
  return rc;
}

/* What each rank measures, gathered to rank 0. */
enum { M_SHARDS, M_SHARD_BYTES, M_RSS_LOADED, M_PEAK_DENSE, M_PEAK_SPARSE, M_COUNT };

static int is_dlrm_only(const char *a) {
  static const char *const only[] = {"--rows",        "--tables",        "--samples",
                                     "--shards",      "--embedding-dim", "--sparse-tables",
                                     "--dense-tables"};
  for (size_t i = 0; i < sizeof only / sizeof only[0]; ++i)
    if (!strcmp(a, only[i])) return 1;
  return 0;
}

const char *dpt_bench_train_dlrm_only(int argc, char **argv) {
  for (int i = 1; i < argc; ++i)
    if (is_dlrm_only(argv[i])) return argv[i];
  return NULL;
}

int dpt_bench_train_dlrm(int argc, char **argv) {
  const char *backend = "cpu", *pattern = NULL;
  int replicas = 2, repeat = 3, json = 0, want_dense = 1, want_sparse = 1;
  long steps = 20;
  size_t batch = 2048, dim = 16;
  uint64_t samples = 262144, shards = 8;
  dpt_synth_config sc;
  dpt_synth_default(&sc);
  int synth_given = 0;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--json")) {
      json = 1;
    } else if (!strcmp(a, "--sparse-tables")) {
      want_dense = 0;
    } else if (!strcmp(a, "--dense-tables")) {
      want_sparse = 0;
    } else if (v && !strcmp(a, "--model")) {
      ++i; /* dlrm: the caller looked */
    } else if (v && !strcmp(a, "--backend")) {
      backend = argv[++i];
    } else if (v && !strcmp(a, "--data")) {
      pattern = argv[++i];
    } else if (v && !strcmp(a, "--rows")) {
      sc.rows = strtoull(argv[++i], NULL, 10), synth_given = 1;
    } else if (v && !strcmp(a, "--tables")) {
      sc.tables = (uint32_t)atol(argv[++i]), synth_given = 1;
    } else if (v && !strcmp(a, "--samples")) {
      samples = strtoull(argv[++i], NULL, 10), synth_given = 1;
    } else if (v && !strcmp(a, "--shards")) {
      shards = strtoull(argv[++i], NULL, 10), synth_given = 1;
    } else if (v && !strcmp(a, "--embedding-dim")) {
      dim = (size_t)atol(argv[++i]);
    } else if (v && !strcmp(a, "--global-batch")) {
      batch = (size_t)atol(argv[++i]);
    } else if (v && !strcmp(a, "--replicas")) {
      replicas = atoi(argv[++i]);
    } else if (v && !strcmp(a, "--steps")) {
      steps = atol(argv[++i]);
    } else if (v && !strcmp(a, "--repeat")) {
      repeat = atoi(argv[++i]);
    } else if (!strcmp(a, "--depth") || !strcmp(a, "--seq-len") ||
               !strcmp(a, "--checkpoint-every")) {
      fprintf(stderr, "bench train: %s does not apply to --model dlrm\n", a);
      return 2;
    } else {
      fprintf(stderr, "bench train: unknown or incomplete option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (!want_dense && !want_sparse) {
    fprintf(stderr, "bench train: --sparse-tables and --dense-tables exclude each other (the "
                    "default is both)\n");
    return 2;
  }
  if (pattern && synth_given) {
    fprintf(stderr, "bench train: --rows, --tables, --samples and --shards are for the "
                    "synthetic shards, not --data (its headers give them)\n");
    return 2;
  }
  if (replicas < 1 || replicas > 64 || steps < 1 || repeat < 1 || repeat > 100 || dim < 1 ||
      batch < 1 || sc.rows < 1 || sc.rows > DPT_SHARD_MAX_TABLE || sc.tables < 2 ||
      sc.tables > 1024 || samples < 1 || shards < 1 || shards > 512) {
    fprintf(stderr, "bench train: --replicas 1..64, --steps >= 1, --repeat 1..100, "
                    "--embedding-dim >= 1, --global-batch >= 1, --rows 1..2^31, --tables 2..1024, "
                    "--samples >= 1, --shards 1..512\n");
    return 2;
  }
  dpt_train_config cfg;
  dpt_train_config_default(&cfg);
  if (dpt_backend_kind_parse(backend, &cfg.devices.backend) != DPT_OK) {
    fprintf(stderr, "bench train: %s\n", dpt_last_error());
    return 2;
  }
  int mpi = 0, rank = 0, rc = 0;
  dpt_comm *world = NULL;
  if (!dpt_comm_mpi_launched() && dpt_comm_check_launch(NULL) != DPT_OK) {
    fprintf(stderr, "bench train: %s\n", dpt_last_error());
    return 2;
  }
#ifdef DPT_HAVE_MPI
  if (dpt_comm_mpi_launched()) {
    mpi = 1;
    /* Creating the first communicator initializes MPI (and destroying it finalizes). */
    dpt_status st = dpt_comm_create_mpi(NULL, &world);
    if (st != DPT_OK) {
      fprintf(stderr, "bench train: %s: %s\n", dpt_status_str(st), dpt_last_error());
      return 1;
    }
    rank = dpt_comm_rank(world);
    replicas = dpt_comm_size(world);
  }
#endif
  /* The synthetic shards: rank 0 writes them, every rank reads the same directory. */
  char tmp[256] = "", glob_pattern[300] = "";
  if (!pattern) {
    if ((uint64_t)replicas > shards) shards = (uint64_t)replicas;
    if (rank == 0) {
      snprintf(tmp, sizeof tmp, "/tmp/dptrain-bench-dlrm-XXXXXX");
      if (!mkdtemp(tmp)) {
        fprintf(stderr, "bench train: cannot create a temporary directory in /tmp\n");
        tmp[0] = '\0';
        rc = 1;
      } else if (write_synth(tmp, &sc, samples, shards) != DPT_OK) {
        fprintf(stderr, "bench train: synthetic shards: %s\n", dpt_last_error());
        rc = 1;
      }
    }
#ifdef DPT_HAVE_MPI
    if (mpi) MPI_Bcast(tmp, (int)sizeof tmp, MPI_CHAR, 0, MPI_COMM_WORLD);
#endif
    rc = settle(mpi, rc);
    snprintf(glob_pattern, sizeof glob_pattern, "%s/synth-*.bin", tmp);
    pattern = glob_pattern;
  }
  /* This process's readers: one per replica with threads, this rank's under MPI. */
  const int nreaders = mpi ? 1 : replicas;
  dpt_interactions **rd = calloc((size_t)nreaders, sizeof *rd);
  char msg[1024] = "out of memory";
  const int failed_before = rc;
  if (!rd) rc = 1;
  for (int i = 0; i < nreaders && !rc; ++i)
    if (dpt_interactions_open(pattern, mpi ? rank : i, replicas, &rd[i]) != DPT_OK) {
      snprintf(msg, sizeof msg, "%s", dpt_last_error());
      rc = 1;
    }
  double m[M_COUNT] = {0}, data_bytes = 0;
  size_t rows[DPT_SHARD_MAX_SPARSE];
  const size_t bottom[2] = {64, 32}, top[2] = {64, 32};
  dpt_dlrm_options lo;
  dpt_dlrm_options_default(&lo);
  uint64_t total_records = 0;
  size_t nshards = 0, table_params = 0;
  if (!rc) {
    m[M_RSS_LOADED] = proc_status_bytes("VmRSS");
    const dpt_interactions *d = rd[0];
    nshards = dpt_interactions_num_shards(d);
    total_records = dpt_interactions_total_records(d);
    for (size_t s = 0; s < nshards; ++s)
      data_bytes += file_bytes(dpt_interactions_shard_path(d, s));
    for (int i = 0; i < nreaders; ++i)
      for (size_t k = 0; k < dpt_interactions_local_shards(rd[i]); ++k) {
        m[M_SHARDS] += 1;
        m[M_SHARD_BYTES] +=
            file_bytes(dpt_interactions_shard_path(rd[i], dpt_interactions_local_shard(rd[i], k)));
      }
    lo.num_dense = dpt_interactions_num_dense(d);
    lo.num_tables = dpt_interactions_num_sparse(d);
    for (size_t t = 0; t < lo.num_tables; ++t) {
      rows[t] = (size_t)dpt_interactions_table_sizes(d)[t];
      table_params += rows[t] * dim;
    }
    lo.table_rows = rows;
    lo.dim = dim;
    lo.bottom = bottom;
    lo.num_bottom = 2;
    lo.top = top;
    lo.num_top = 2;
    if (lo.num_dense < 1) {
      snprintf(msg, sizeof msg, "the shards have no dense feature (DLRM needs one)");
      rc = 1;
    } else if (dpt_model_spec_dlrm(&cfg.model, &lo) != DPT_OK) {
      snprintf(msg, sizeof msg, "%s", dpt_last_error());
      rc = 1;
    } else if (batch < (size_t)replicas || dpt_interactions_steps(d, batch) < 1) {
      snprintf(msg, sizeof msg, "--global-batch %zu needs %d replicas .. %" PRIu64 " records",
               batch, replicas, total_records);
      rc = 2;
    }
  }
  /* Every rank learns whether all are ready; a failure that is rank 0's too is printed once. */
  if (!failed_before) {
    int same_as_first = 0;
    const dpt_status ready =
        dpt_comm_agree_ready(world, rc ? DPT_ERR_INVALID_ARG : DPT_OK, msg, "rank", &same_as_first);
    if (ready != DPT_OK && !same_as_first && (rc || rank == 0))
      fprintf(stderr, "bench train: %s\n", rc ? msg : dpt_last_error());
    if (ready != DPT_OK && !rc) rc = 1;
  }
  /* `dptrain train --model dlrm`'s recipe: AdamW lr 1e-3 without weight decay, constant. */
  dpt_optim_config_default(&cfg.optim, DPT_OPTIM_ADAMW);
  cfg.optim.lr = 1e-3f;
  cfg.optim.weight_decay = 0.0f;
  cfg.optim.schedule = DPT_SCHEDULE_CONSTANT;
  cfg.schedule.global_batch = batch;
  cfg.schedule.epochs = 1000;
  cfg.schedule.max_steps = steps;
  cfg.devices.replicas = mpi ? 1 : replicas;
  cfg.data.local_train = rd;
  /* The variants take turns within each repeat; figures are medians. */
  double *sps[2] = {calloc((size_t)repeat, sizeof(double)), calloc((size_t)repeat, sizeof(double))};
  dpt_train_report rep[2];
  memset(rep, 0, sizeof rep);
  const int want[2] = {want_dense, want_sparse};
  int peak_ok = 1;
  if (!sps[0] || !sps[1]) rc = 1;
  for (int r = 0; r < repeat && !rc; ++r)
    for (int k = 0; k < 2 && !rc; ++k) {
      if (!want[k]) continue;
      cfg.exchange.sparse_tables = k;
      if (reset_peak_rss() != 0) peak_ok = 0;
      dpt_status st = dpt_train(&cfg, world, &rep[k]);
      if (st != DPT_OK) {
        fprintf(stderr, "bench train: %s: %s\n", dpt_status_str(st), dpt_last_error());
        rc = 1;
      } else {
        sps[k][r] = rep[k].samples_per_sec;
        const double peak = proc_status_bytes("VmHWM");
        if (peak > m[M_PEAK_DENSE + k]) m[M_PEAK_DENSE + k] = peak;
      }
      rc = settle(mpi, rc);
    }
  double med[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    if (!rc && want[k]) med[k] = dpt_bench_median(sps[k], repeat);
    free(sps[k]);
  }
  /* Every rank's measurements on rank 0. */
  double *all = calloc((size_t)replicas * M_COUNT, sizeof(double));
  if (!all) rc = 1;
  if (!rc) {
#ifdef DPT_HAVE_MPI
    if (mpi)
      MPI_Gather(m, M_COUNT, MPI_DOUBLE, all, M_COUNT, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    else
#endif
      memcpy(all, m, sizeof m);
  }
  for (int i = 0; i < nreaders && rd; ++i)
    dpt_interactions_destroy(rd[i]);
  free(rd);
  if (tmp[0]) {
    rc = settle(mpi, rc); /* every rank is done with the files */
    if (rank == 0) dpt_bench_remove_dir(tmp);
  }
  dpt_comm_destroy(world);
  if (rc || rank != 0) {
    free(all);
    return rc ? (rc == 2 ? 2 : 1) : 0;
  }
  /* Table bytes per step and replica: the ring all-reduce of the tables' dense gradients,
   * 2 (R - 1) / R x rows x dim x 4 per table (dpt_sparse_stats.dense_bytes), and what the
   * sparse exchange sent (dpt_train_report.sparse_sent_bytes). */
  double dense_bytes = 0;
  for (size_t t = 0; t < lo.num_tables; ++t)
    dense_bytes += (double)(2 * (size_t)(replicas - 1) * rows[t] * dim * 4 / (size_t)replicas);
  const double sparse_bytes =
      rep[1].steps > 0 ? (double)rep[1].sparse_sent_bytes / (double)rep[1].steps : 0;
  const int nrows = mpi ? replicas : 1; /* threads: one process holds every replica */
  char title[160];
  snprintf(title, sizeof title,
           "DLRM %zu tables x %zu rows, dim %zu, %zu dense, bottom 64,32, top 64,32", lo.num_tables,
           rows[0], dim, lo.num_dense);
  if (json) {
    printf("{\"model\": \"%s\", \"global_batch\": %zu, \"backend\": \"%s\", \"steps\": %ld, "
           "\"repeat\": %d, \"replicas\": %d, \"mpi\": %s, \"tables\": %zu, \"rows\": %zu, "
           "\"embedding_dim\": %zu, \"num_params\": %zu, \"table_bytes\": %.0f, "
           "\"records\": %" PRIu64 ", \"shards\": %zu, \"dataset_bytes\": %.0f",
           title, batch, backend, steps, repeat, replicas, mpi ? "true" : "false", lo.num_tables,
           rows[0], dim, rep[want_dense ? 0 : 1].num_params, 4.0 * (double)table_params,
           total_records, nshards, data_bytes);
    if (want_dense)
      printf(", \"dense_samples_per_sec\": %.1f, \"dense_table_bytes_per_step\": %.0f", med[0],
             dense_bytes);
    if (want_sparse)
      printf(", \"sparse_samples_per_sec\": %.1f, \"sparse_table_bytes_per_step\": %.0f", med[1],
             sparse_bytes);
    if (want_dense && want_sparse) printf(", \"sparse_over_dense\": %.3f", med[1] / med[0]);
    printf(", \"peak_rss_reset\": %s, \"ranks\": [", peak_ok ? "true" : "false");
    for (int r = 0; r < nrows; ++r) {
      const double *a = all + (size_t)r * M_COUNT;
      printf("%s{\"rank\": %d, \"shards\": %.0f, \"shard_bytes\": %.0f, "
             "\"rss_loaded_bytes\": %.0f",
             r ? ", " : "", r, a[M_SHARDS], a[M_SHARD_BYTES], a[M_RSS_LOADED]);
      if (want_dense) printf(", \"dense_peak_rss_bytes\": %.0f", a[M_PEAK_DENSE]);
      if (want_sparse) printf(", \"sparse_peak_rss_bytes\": %.0f", a[M_PEAK_SPARSE]);
      printf("}");
    }
    printf("]}\n");
    free(all);
    return 0;
  }
  printf("%s\n", title);
  printf("global batch %zu, %ld steps, %s backend, %d %s, median of %d\n", batch, steps, backend,
         replicas,
         mpi ? (replicas == 1 ? "MPI rank" : "MPI ranks")
             : (replicas == 1 ? "replica" : "replicas (threads of one process)"),
         repeat);
  char b1[32], b2[32];
  printf("data: %" PRIu64 " records in %zu shards, %s (%s)\n", total_records, nshards,
         human(b1, sizeof b1, data_bytes), tmp[0] ? "synthetic, removed at the end" : pattern);
  printf("model: %zu parameters, tables %.2f MB per replica\n", rep[want_dense ? 0 : 1].num_params,
         4e-6 * (double)table_params);
  printf("%-34s %16s %16s\n", "", "dense exchange", "--sparse-tables");
#define CELL(k, fmt, x)                                                                            \
  do {                                                                                             \
    if (want[k])                                                                                   \
      printf(" %16" fmt, x);                                                                       \
    else                                                                                           \
      printf(" %16s", "-");                                                                        \
  } while (0)
  printf("%-34s", "samples/s");
  CELL(0, ".0f", med[0]);
  CELL(1, ".0f", med[1]);
  printf("\n%-34s %16s", "steps/s, sparse / dense", "");
  if (want_dense && want_sparse)
    printf(" %15.2fx\n", med[1] / med[0]);
  else
    printf(" %16s\n", "-");
  printf("%-34s", "table bytes per step per replica");
  CELL(0, ".0f", dense_bytes);
  CELL(1, ".0f", sparse_bytes);
  printf("\n%s\n", peak_ok ? "peak RSS (VmHWM, reset per run), MiB"
                           : "peak RSS (VmHWM of the whole process), MiB");
  for (int r = 0; r < nrows; ++r) {
    const double *a = all + (size_t)r * M_COUNT;
    char name[48];
    if (mpi)
      snprintf(name, sizeof name, "  rank %d", r);
    else
      snprintf(name, sizeof name, "  the process (%d replicas)", replicas);
    printf("%-34s", name);
    CELL(0, ".1f", a[M_PEAK_DENSE] / 1048576.0);
    CELL(1, ".1f", a[M_PEAK_SPARSE] / 1048576.0);
    printf("\n");
  }
#undef CELL
  for (int r = 0; r < nrows; ++r) {
    const double *a = all + (size_t)r * M_COUNT;
    printf("%s %d: %.0f of %zu shards, %s of the data set's %s (RSS %.1f MiB once loaded)\n",
           mpi ? "rank" : "process, replicas 0 ..", mpi ? r : replicas - 1, a[M_SHARDS], nshards,
           human(b1, sizeof b1, a[M_SHARD_BYTES]), human(b2, sizeof b2, data_bytes),
           a[M_RSS_LOADED] / 1048576.0);
  }
  free(all);
  return 0;
}
