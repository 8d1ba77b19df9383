/* `dptrain train`: data-parallel training of an MLP or CNN on an IDX data set (Fashion-MNIST by
 * default), alone or under mpirun. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench.h"
#include "dptrain/dptrain.h"
#include "tools/commands.h"

#define DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"

static void usage(FILE *f) {
  fprintf(f, "usage: dptrain train [options]            (one process)\n"
             "       mpirun -np N dptrain train [options] (N ranks, one replica each)\n"
             "\n"
             "Trains a classifier data-parallel: every replica holds the whole model, takes its\n"
             "slice of each global batch, gradients are summed with a ring all-reduce, and one\n"
             "synchronized optimizer step keeps the replicas identical.\n"
             "\n"
             "model and data:\n"
             "  --model mlp|cnn        model (default mlp)\n"
             "  --hidden LIST          mlp hidden sizes, comma-separated (default 512,256)\n"
             "  --channels C1,C2       cnn channels of its two conv blocks (default 32,64)\n"
             "  --data DIR             IDX files (train-*, t10k-*, plain or .gz)\n"
             "                         (default " DEFAULT_DATA_DIR ")\n"
             "  --init-weights FILE    start from these weights (safetensors, PyTorch names)\n"
             "  --save-weights FILE    write the final weights (safetensors)\n"
             "devices:\n"
             "  --backend B            auto|cpu|opencl|vulkan (default auto: a GPU if one\n"
             "                         exists, else cpu); a comma-separated list gives one\n"
             "                         backend per rank (rank i takes entry i mod length)\n"
             "  --device N             device index (default: the local rank / replica index)\n"
             "  --replicas K           replicas as threads of this process (no MPI; default 1)\n"
             "schedule:\n"
             "  --global-batch B       samples per step over all replicas (default 256)\n"
             "  --epochs E             (default 10)\n"
             "  --max-steps S          stop after S steps (default: no limit)\n"
             "  --keep-last            keep each epoch's final partial batch (default: drop it)\n"
             "  --no-shuffle           fixed sample order\n"
             "  --seed S               initialization and shuffling seed (default 0)\n"
             "optimizer:\n"
             "  --optimizer sgd|adamw  (default sgd)\n"
             "  --lr X                 learning rate (default 0.05 sgd, 0.001 adamw)\n"
             "  --momentum X           sgd momentum (default 0.9)\n"
             "  --nesterov             sgd Nesterov momentum\n"
             "  --weight-decay X       (default 0 sgd, 0.01 adamw)\n"
             "  --schedule S           constant|step|cosine (default cosine: from --lr to 0 over\n"
             "                         the run, after the warmup)\n"
             "  --step-size N --gamma X  step schedule: lr *= gamma every N steps (--step-size\n"
             "                         required, gamma default 0.1)\n"
             "  --warmup N             linear warmup over N steps\n"
             "  --clip-norm X          clip the global gradient norm to X\n"
             "  --full-step            every replica runs the whole optimizer step after an\n"
             "                         all-reduce (default: the sharded step: reduce-scatter,\n"
             "                         each replica updates 1/R of the parameters, all-gather;\n"
             "                         the same update with less work)\n"
             "checks and output:\n"
             "  --check-every N        compare replica fingerprints every N steps (default 100)\n"
             "  --skip-nonfinite       skip steps with a non-finite loss or, with --clip-norm,\n"
             "                         gradient norm (default: stop)\n"
             "  --json                 one JSON object per epoch, then a final one\n"
             "  --quiet                no progress bar\n");
}

typedef struct cli {
  dpt_train_config cfg;
  const char *data_dir, *init_weights, *save_weights, *backend;
  int json, quiet, tty, rank;
  int mlp;
  size_t hidden[16], num_hidden, channels[2];
} cli;

static int parse_i64(const char *s, int64_t min, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end || errno || v < min) return -1;
  *out = v;
  return 0;
}

static int parse_float(const char *s, float *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !isfinite(v)) return -1;
  *out = (float)v;
  return 0;
}

/* Entry `i` of a comma-separated --backend list into tok (NUL-terminated); the number of
 * entries, empty ones included. */
static int backend_entry(const char *spec, int i, char *tok, size_t cap) {
  int n = 0;
  tok[0] = '\0';
  for (const char *p = spec;; ++n) {
    const char *e = strchr(p, ',');
    const size_t len = e ? (size_t)(e - p) : strlen(p);
    if (n == i) snprintf(tok, cap, "%.*s", (int)(len < cap ? len : cap - 1), p);
    if (!e) return n + 1;
    p = e + 1;
  }
}

/* Every entry of the list is auto or a backend name: checked the same on every rank before
 * any rank starts, so a bad entry stops them all instead of only the rank that draws it. */
static int check_backend_list(const char *spec) {
  char tok[32];
  const int n = backend_entry(spec, 0, tok, sizeof tok);
  for (int i = 0; i < n; ++i) {
    backend_entry(spec, i, tok, sizeof tok);
    dpt_backend_kind k;
    if (strcmp(tok, "auto") != 0 && dpt_backend_kind_parse(tok, &k) != DPT_OK) return -1;
  }
  return 0;
}

/* The backend of `rank`: entry rank mod (entries) of a list check_backend_list accepted;
 * "auto" = the first GPU found (OpenCL, then Vulkan), else the CPU. */
static void pick_backend(const char *spec, int rank, dpt_backend_kind *out) {
  char tok[32];
  const int n = backend_entry(spec, 0, tok, sizeof tok);
  backend_entry(spec, rank % n, tok, sizeof tok);
  if (strcmp(tok, "auto") == 0) {
    const dpt_backend_kind order[] = {DPT_BACKEND_OPENCL, DPT_BACKEND_VULKAN};
    for (size_t k = 0; k < 2; ++k) {
      int count = 0;
      if (!dpt_backend_compiled(order[k]) || dpt_device_count(order[k], &count) != DPT_OK) continue;
      for (int d = 0; d < count; ++d) {
        dpt_device_info info;
        if (dpt_device_get_info(order[k], d, &info) == DPT_OK && info.type != DPT_DEVICE_CPU &&
            info.type != DPT_DEVICE_OTHER) {
          *out = order[k];
          return;
        }
      }
    }
    *out = DPT_BACKEND_CPU;
    return;
  }
  (void)dpt_backend_kind_parse(tok, out); /* checked by check_backend_list */
}

/* Options that take a value (the others are flags). */
static int takes_value(const char *opt) {
  static const char *const names[] = {
      "--model",        "--hidden",       "--channels",   "--data",      "--init-weights",
      "--save-weights", "--backend",      "--device",     "--replicas",  "--global-batch",
      "--epochs",       "--max-steps",    "--seed",       "--optimizer", "--lr",
      "--momentum",     "--weight-decay", "--schedule",   "--step-size", "--gamma",
      "--warmup",       "--clip-norm",    "--check-every"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i)
    if (!strcmp(opt, names[i])) return 1;
  return 0;
}

/* JSON has no NaN: a value that is not finite is null. */
static void json_number(const char *key, double v, const char *fmt) {
  printf("\"%s\": ", key);
  if (isfinite(v))
    printf(fmt, v);
  else
    printf("null");
  printf(", ");
}

static void json_report(const dpt_train_report *r) {
  printf("{");
  if (r->final)
    printf("\"final\": true, ");
  else
    printf("\"epoch\": %lld, ", (long long)r->epoch);
  printf("\"steps\": %lld, \"skipped_steps\": %lld, ", (long long)r->steps,
         (long long)r->skipped_steps);
  if (!r->final) json_number("train_loss", r->train_loss, "%.6f");
  json_number("test_loss", r->test_loss, "%.6f");
  json_number("test_accuracy", r->test_accuracy, "%.4f");
  json_number("samples_per_sec", r->samples_per_sec, "%.1f");
  json_number("seconds", r->seconds, "%.3f");
  if (r->final) {
    json_number("compute_seconds", r->compute_seconds, "%.3f");
    json_number("allreduce_seconds", r->allreduce_seconds, "%.3f");
    json_number("optimizer_seconds", r->optimizer_seconds, "%.3f");
    json_number("imbalance_seconds", r->imbalance_seconds, "%.3f");
  }
  printf("\"ranks\": %d, \"replicas\": %d, \"backend\": \"%s\", \"param_hash\": \"%016llx\"}\n",
         r->ranks, r->replicas, r->backend, (unsigned long long)r->param_hash);
  fflush(stdout);
}

static void on_report(const dpt_train_report *r, void *user) {
  cli *c = user;
  if (c->tty && !c->quiet && !c->json) fprintf(stderr, "\r\033[K");
  if (c->json) {
    json_report(r);
    return;
  }
  if (r->final) {
    printf("done: %lld steps in %.1f s, %.0f samples/s, %d replica%s (%d rank%s, %s), "
           "test accuracy %.4f, parameters %016llx\n",
           (long long)r->steps, r->seconds, r->samples_per_sec, r->replicas,
           r->replicas == 1 ? "" : "s", r->ranks, r->ranks == 1 ? "" : "s", r->backend,
           r->test_accuracy, (unsigned long long)r->param_hash);
    if (r->compute_seconds + r->allreduce_seconds + r->optimizer_seconds > 0)
      printf("time on replica 0: forward+backward %.2f s, communication %.2f s, "
             "optimizer %.2f s\n",
             r->compute_seconds, r->allreduce_seconds, r->optimizer_seconds);
    if (r->replicas > 1)
      printf("uneven replicas: %.2f s (the slowest replica's forward+backward over the mean, "
             "summed over the steps)\n",
             r->imbalance_seconds);
  } else {
    printf("epoch %3lld  loss %.4f  test loss %.4f  test accuracy %.4f  %8.0f samples/s  %6.1f s",
           (long long)r->epoch, r->train_loss, r->test_loss, r->test_accuracy, r->samples_per_sec,
           r->seconds);
    if (r->skipped_steps) printf("  (%lld steps skipped)", (long long)r->skipped_steps);
    printf("\n");
  }
  fflush(stdout);
}

static void on_progress(int64_t epoch, size_t batch, size_t batches, double loss, void *user) {
  cli *c = user;
  if (!c->tty || c->quiet || c->json) return;
  if (batch != batches && batch % 10 != 0) return;
  int width = 30, filled = (int)((double)width * (double)batch / (double)batches);
  fprintf(stderr, "\repoch %lld [%.*s%*s] %zu/%zu loss %.4f", (long long)epoch, filled,
          "##############################", width - filled, "", batch, batches, loss);
  fflush(stderr);
}

/* Prints a failure: one line, from the rank where it happened. Decisions every rank takes
 * together (non-finite loss, drift, timeouts) and failures seen on another replica are printed
 * by rank 0 only. */
static int fail(const cli *c, dpt_status st, const char *msg) {
  if (!msg) msg = dpt_last_error();
  int global = st == DPT_ERR_NONFINITE || st == DPT_ERR_MISMATCH || st == DPT_ERR_TIMEOUT ||
               strstr(msg, "another replica") != NULL || strstr(msg, "could not start") != NULL ||
               strstr(msg, "the same data sets") != NULL;
  if (c->rank == 0 || !global) {
    if (c->rank > 0)
      fprintf(stderr, "dptrain: rank %d: %s: %s\n", c->rank, dpt_status_str(st), msg);
    else
      fprintf(stderr, "dptrain: %s: %s\n", dpt_status_str(st), msg);
  }
  return 1;
}

int dpt_cmd_train(int argc, char **argv) {
  cli c;
  memset(&c, 0, sizeof c);
  dpt_train_config_default(&c.cfg);
  /* A fixed-length run ends better annealed: cosine is the tool's default (the library's
   * default stays constant); docs/training.md has the measurements. */
  c.cfg.optim.schedule = DPT_SCHEDULE_COSINE;
  c.data_dir = DEFAULT_DATA_DIR;
  c.backend = "auto";
  c.mlp = 1;
  c.hidden[0] = 512;
  c.hidden[1] = 256;
  c.num_hidden = 2;
  c.channels[0] = 32;
  c.channels[1] = 64;
  int lr_set = 0, wd_set = 0;
  const char *optimizer = "sgd";
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    int bad = 0, takes = 1;
    int64_t iv;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--json")) {
      c.json = 1, takes = 0;
    } else if (!strcmp(a, "--quiet")) {
      c.quiet = 1, takes = 0;
    } else if (!strcmp(a, "--keep-last")) {
      c.cfg.keep_last = 1, takes = 0;
    } else if (!strcmp(a, "--no-shuffle")) {
      c.cfg.shuffle = 0, takes = 0;
    } else if (!strcmp(a, "--nesterov")) {
      c.cfg.optim.nesterov = 1, takes = 0;
    } else if (!strcmp(a, "--skip-nonfinite")) {
      c.cfg.skip_nonfinite = 1, takes = 0;
    } else if (!strcmp(a, "--full-step")) {
      c.cfg.full_optimizer_step = 1, takes = 0;
    } else if (!takes_value(a)) {
      fprintf(stderr, "dptrain train: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    } else if (!v) {
      fprintf(stderr, "dptrain train: %s needs a value\n", a);
      usage(stderr);
      return 2;
    } else if (!strcmp(a, "--model")) {
      if (!strcmp(v, "mlp"))
        c.mlp = 1;
      else if (!strcmp(v, "cnn"))
        c.mlp = 0;
      else
        bad = 1;
    } else if (!strcmp(a, "--hidden")) {
      bad = dpt_parse_size_list(v, c.hidden, 14, 1000000, &c.num_hidden) != 0;
    } else if (!strcmp(a, "--channels")) {
      size_t n = 0;
      bad = dpt_parse_size_list(v, c.channels, 2, 100000, &n) != 0 || n != 2;
    } else if (!strcmp(a, "--data")) {
      c.data_dir = v;
    } else if (!strcmp(a, "--init-weights")) {
      c.init_weights = v;
    } else if (!strcmp(a, "--save-weights")) {
      c.save_weights = v;
    } else if (!strcmp(a, "--backend")) {
      c.backend = v;
    } else if (!strcmp(a, "--device")) {
      bad = parse_i64(v, 0, &iv) != 0 || iv > 1024;
      c.cfg.device = (int)iv;
    } else if (!strcmp(a, "--replicas")) {
      bad = parse_i64(v, 1, &iv) != 0 || iv > 256;
      c.cfg.replicas = (int)iv;
    } else if (!strcmp(a, "--global-batch")) {
      bad = parse_i64(v, 1, &iv) != 0;
      c.cfg.global_batch = (size_t)iv;
    } else if (!strcmp(a, "--epochs")) {
      bad = parse_i64(v, 1, &c.cfg.epochs) != 0;
    } else if (!strcmp(a, "--max-steps")) {
      bad = parse_i64(v, 1, &c.cfg.max_steps) != 0;
    } else if (!strcmp(a, "--seed")) {
      bad = parse_i64(v, 0, &iv) != 0;
      c.cfg.seed = (uint64_t)iv;
    } else if (!strcmp(a, "--optimizer")) {
      optimizer = v;
      bad = strcmp(v, "sgd") && strcmp(v, "adamw");
    } else if (!strcmp(a, "--lr")) {
      bad = parse_float(v, &c.cfg.optim.lr) != 0;
      lr_set = 1;
    } else if (!strcmp(a, "--momentum")) {
      bad = parse_float(v, &c.cfg.optim.momentum) != 0;
    } else if (!strcmp(a, "--weight-decay")) {
      bad = parse_float(v, &c.cfg.optim.weight_decay) != 0;
      wd_set = 1;
    } else if (!strcmp(a, "--schedule")) {
      if (!strcmp(v, "constant"))
        c.cfg.optim.schedule = DPT_SCHEDULE_CONSTANT;
      else if (!strcmp(v, "step"))
        c.cfg.optim.schedule = DPT_SCHEDULE_STEP;
      else if (!strcmp(v, "cosine"))
        c.cfg.optim.schedule = DPT_SCHEDULE_COSINE;
      else
        bad = 1;
    } else if (!strcmp(a, "--step-size")) {
      bad = parse_i64(v, 1, &c.cfg.optim.step_size) != 0;
    } else if (!strcmp(a, "--gamma")) {
      bad = parse_float(v, &c.cfg.optim.gamma) != 0;
    } else if (!strcmp(a, "--warmup")) {
      bad = parse_i64(v, 0, &c.cfg.optim.warmup_steps) != 0;
    } else if (!strcmp(a, "--clip-norm")) {
      bad = parse_float(v, &c.cfg.optim.clip_norm) != 0;
    } else if (!strcmp(a, "--check-every")) {
      bad = parse_i64(v, 0, &c.cfg.check_every) != 0;
    } else {
      fprintf(stderr, "dptrain train: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    }
    if (bad) {
      fprintf(stderr, "dptrain train: bad value '%s' for %s\n", v, a);
      usage(stderr);
      return 2;
    }
    i += takes;
  }
  if (!strcmp(optimizer, "adamw")) {
    dpt_optim_config o = c.cfg.optim;
    dpt_optim_config_default(&c.cfg.optim, DPT_OPTIM_ADAMW);
    c.cfg.optim.schedule = o.schedule;
    c.cfg.optim.step_size = o.step_size;
    c.cfg.optim.gamma = o.gamma;
    c.cfg.optim.warmup_steps = o.warmup_steps;
    c.cfg.optim.clip_norm = o.clip_norm;
    if (lr_set) c.cfg.optim.lr = o.lr;
    if (wd_set) c.cfg.optim.weight_decay = o.weight_decay;
  } else if (!wd_set) {
    c.cfg.optim.weight_decay = 0.0f;
  }
  c.tty = isatty(STDERR_FILENO);

  if (check_backend_list(c.backend) != 0) {
    fprintf(stderr,
            "dptrain train: bad --backend '%s' (auto, cpu, opencl, vulkan or a "
            "comma-separated list of them)\n",
            c.backend);
    return 2;
  }
  /* Communicator first: the rank decides the backend, the device and who prints. */
  dpt_comm *comm = NULL;
  dpt_status st = DPT_OK;
  if (dpt_comm_mpi_launched()) {
    if (c.cfg.replicas != 1) {
      fprintf(stderr, "dptrain train: --replicas is for one process; under mpirun every rank is "
                      "one replica\n");
      return 2;
    }
    st = dpt_comm_create_mpi(NULL, &comm);
    if (st != DPT_OK) return fail(&c, st, NULL);
    c.rank = dpt_comm_rank(comm);
  }
  pick_backend(c.backend, c.rank, &c.cfg.backend);
  if (c.cfg.optim.schedule == DPT_SCHEDULE_COSINE && c.cfg.optim.total_steps == 0)
    c.cfg.optim.total_steps = 1; /* replaced once the data set size is known */

  char other[128] = ""; /* a message of the tool's own, replacing dpt_last_error() */
  dpt_dataset *train = NULL, *test = NULL;
  float *init = NULL, *final_params = NULL;
  st = dpt_dataset_load_dir(c.data_dir, "train", 10, &train);
  if (st == DPT_OK) st = dpt_dataset_load_dir(c.data_dir, "test", 10, &test);
  if (st == DPT_OK) {
    size_t rows = dpt_dataset_rows(train), cols = dpt_dataset_cols(train);
    st = c.mlp ? dpt_model_spec_mlp(&c.cfg.model, 1, rows, cols, c.hidden, c.num_hidden, 10)
               : dpt_model_spec_cnn(&c.cfg.model, 1, rows, cols, c.channels[0], c.channels[1], 10);
  }
  if (st == DPT_OK && c.cfg.optim.schedule == DPT_SCHEDULE_COSINE) {
    size_t per_epoch =
        dpt_sampler_num_batches(dpt_dataset_count(train), c.cfg.global_batch, c.cfg.keep_last);
    int64_t total = per_epoch > 0 && c.cfg.epochs > INT64_MAX / (int64_t)per_epoch
                        ? INT64_MAX
                        : (int64_t)per_epoch * c.cfg.epochs;
    if (c.cfg.max_steps > 0 && c.cfg.max_steps < total) total = c.cfg.max_steps;
    total -= c.cfg.optim.warmup_steps;
    c.cfg.optim.total_steps = total > 0 ? total : 1;
  }
  /* Weights files go through a host-side model description on the CPU backend. */
  dpt_backend *host_be = NULL;
  dpt_model *host_model = NULL;
  if (st == DPT_OK && (c.init_weights || c.save_weights)) {
    st = dpt_backend_create(DPT_BACKEND_CPU, 0, &host_be);
    if (st == DPT_OK) st = dpt_model_create(host_be, &c.cfg.model, 1, &host_model);
    size_t np = host_model ? dpt_model_num_params(host_model) : 0;
    if (st == DPT_OK && c.init_weights) {
      init = malloc(np * sizeof(float));
      if (init) {
        st = dpt_model_load_params(host_model, c.init_weights, init);
      } else {
        snprintf(other, sizeof other, "cannot allocate %zu parameters", np);
        st = DPT_ERR_OUT_OF_MEMORY;
      }
      c.cfg.init_params = init;
    }
    if (st == DPT_OK && c.save_weights) {
      final_params = malloc(np * sizeof(float));
      if (!final_params) {
        snprintf(other, sizeof other, "cannot allocate %zu parameters", np);
        st = DPT_ERR_OUT_OF_MEMORY;
      }
      c.cfg.final_params = final_params;
    }
  }
  /* Under MPI the ranks agree that all of them are ready, so a rank that failed to read its
   * input stops the others at once instead of leaving them at the first collective. */
  int quiet_failure = 0;
  if (comm) {
    /* Each rank's status and message; a rank stays quiet only when rank 0 reports the very
     * same failure (the same file, the same problem). */
    typedef struct start_state {
      int status;
      char msg[256];
    } start_state;
    int size = dpt_comm_size(comm);
    start_state mine;
    memset(&mine, 0, sizeof mine);
    mine.status = (int)st;
    if (st != DPT_OK)
      snprintf(mine.msg, sizeof mine.msg, "%s", other[0] ? other : dpt_last_error());
    start_state *all = calloc((size_t)size, sizeof *all);
    dpt_status sg = all ? dpt_allgather_host(comm, &mine, sizeof mine, all) : DPT_ERR_OUT_OF_MEMORY;
    if (sg != DPT_OK && st == DPT_OK) st = sg;
    for (int r = 0; all && sg == DPT_OK && r < size; ++r) {
      if (all[r].status == DPT_OK) continue;
      if (st == DPT_OK) {
        st = (dpt_status)all[r].status;
        snprintf(other, sizeof other, "rank %d could not start (see its message)", r);
      } else if (c.rank > 0 && all[0].status == mine.status && !strcmp(all[0].msg, mine.msg)) {
        quiet_failure = 1; /* rank 0 prints the same failure */
      }
      break;
    }
    free(all);
  }
  if (st == DPT_OK) {
    c.cfg.train = train;
    c.cfg.test = test;
    c.cfg.on_report = on_report;
    c.cfg.on_progress = on_progress;
    c.cfg.user = &c;
    static const char *const schedules[] = {"constant", "step", "cosine"};
    const unsigned sk = (unsigned)c.cfg.optim.schedule;
    const int nrep = comm ? dpt_comm_size(comm) : c.cfg.replicas;
    if (c.rank == 0 && !c.json)
      printf("training %s on %s: %d %s%s, global batch %zu, %lld epochs, %s lr %g (%s)\n",
             c.mlp ? "mlp" : "cnn", c.data_dir, nrep, comm ? "rank" : "replica",
             nrep == 1 ? "" : "s", c.cfg.global_batch, (long long)c.cfg.epochs, optimizer,
             (double)c.cfg.optim.lr, sk < 3 ? schedules[sk] : "?");
    st = dpt_train(&c.cfg, comm, NULL);
  }
  if (st == DPT_OK && c.save_weights && c.rank == 0)
    st = dpt_model_save_params(host_model, final_params, c.save_weights);
  int rc = st == DPT_OK ? 0 : quiet_failure ? 1 : fail(&c, st, other[0] ? other : NULL);
  dpt_model_destroy(host_model);
  dpt_backend_destroy(host_be);
  free(init);
  free(final_params);
  dpt_dataset_destroy(train);
  dpt_dataset_destroy(test);
  dpt_comm_destroy(comm);
  return rc;
}
