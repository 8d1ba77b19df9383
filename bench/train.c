/* bench train: training throughput of a model (the MLP 784-512-256-10 by default, the CNN or
 * a ResNet, global batch 256) on one backend,
 * side by side: one replica with the gradient all-reduce skipped (the bare step), one replica
 * (the whole data-parallel machinery), and R replicas. Without MPI the replicas are threads of
 * this process (one core each on the CPU backend); under `mpirun -np R` they are the R ranks,
 * and the one-replica figures come from rank 0 alone while the others sleep. Every figure is
 * the median of --repeat runs of --steps steps on Fashion-MNIST (or random data when it is not
 * installed), timed from the end of each run's first step (a warm-up); the variants take turns
 * within each repeat. --model dlrm is bench/train_dlrm.c's (the dense exchange of the tables
 * against --sparse-tables). */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "bench/bench.h"
#include "bench/text_setup.h"
#include "dptrain/advanced.h"

#ifdef DPT_HAVE_MPI
#include <mpi.h>
#endif

static void usage(FILE *f) {
  fprintf(f,
          "usage: dptrain bench train [options]   (or bench_train; under mpirun -np R)\n"
          "Samples/s of a model: 1 replica without the all-reduce, 1 replica, and R replicas\n"
          "with the sharded and the full step, side by side, with each variant's time split\n"
          "per step.\n"
          "  --model M      mlp (784-512-256-10) | cnn (32,64 channels) | resnet | bert |\n"
          "                 dlrm\n"
          "                 (default mlp; bert: 4 layers, hidden 256, 4 heads, ffn 1024,\n"
          "                 dropout 0.1, sequences of --seq-len 128 tokens of the fortunes\n"
          "                 text with a 4096-token vocabulary, global batch 32; tokens/s\n"
          "                 counts every position of a sequence, padding included; dlrm:\n"
          "                 the dense exchange next to --sparse-tables on interaction\n"
          "                 shards, see `dptrain bench train --model dlrm --help`)\n"
          "  --seq-len N    bert: tokens per sequence (default 128)\n"
          "  --depth N      resnet depth, 6n+2 (default 20)\n"
          "  --global-batch B  samples per step over all replicas (default 256)\n"
          "  --backend B    cpu | opencl | vulkan (default cpu)\n"
          "  --replicas R   replicas as threads of this process (default 2); under mpirun\n"
          "                 the replicas are the ranks and this is ignored\n"
          "  --steps N      steps per variant and repeat (default 100); samples/s counts\n"
          "                 the steps after the first (a warm-up), where there are more\n"
          "  --repeat N     repeats, the variants taking turns; figures are medians (default 5)\n"
          "  --data DIR     Fashion-MNIST directory (default /usr/share/datasets/fashion-mnist;\n"
          "                 random data when it cannot be read)\n"
          "  --checkpoint-every N  also R replicas (sharded step) with a checkpoint every N\n"
          "                 steps: the cost next to the same run without (default: none)\n"
          "  --bucket-mb F|auto  also R replicas (sharded step) exchanging the gradient in\n"
          "                 buckets of F MiB (auto: measured) during backward, with each\n"
          "                 bucket's update once its exchange is done and with the update\n"
          "                 after the last bucket: step time and exposed communication\n"
          "                 next to one exchange after backward (default: none)\n"
          "  --deterministic  also 1 and R replicas with --deterministic (the default group\n"
          "                 size): their cost next to the default runs\n"
          "  --json         one JSON object instead of the table\n");
}

static dpt_dataset *random_data(size_t n) {
  uint8_t *px = malloc(n * 784);
  int32_t *lab = malloc(n * sizeof(int32_t));
  dpt_dataset *ds = NULL;
  if (px && lab) {
    uint32_t s = 1;
    for (size_t i = 0; i < n * 784; ++i)
      px[i] = (uint8_t)((s = s * 1664525u + 1013904223u) >> 24);
    for (size_t i = 0; i < n; ++i)
      lab[i] = (int32_t)(i % 10);
    dpt_dataset_from_memory(px, lab, n, 28, 28, 10, &ds);
  }
  free(px);
  free(lab);
  return ds;
}

/* One configuration of the comparison. */
typedef struct variant {
  int replicas, skip_allreduce, full_step;
  const char *ckpt_dir; /* checkpoints into this directory (NULL: none) */
  size_t bucket_bytes;  /* gradient buckets (0: one exchange after backward) */
  int whole_update;     /* with buckets: the update after the last one (bucket_whole_update) */
  int det;              /* deterministic */
  dpt_comm *comm;       /* MPI mode: this rank's communicator, NULL when it sits this one out */
  int mpi;              /* MPI mode */
  double *sps;          /* samples/s of each repeat */
  dpt_train_report r;   /* the report of the last repeat (time split) */
  double first, last;   /* when the first and the latest step ended (replica 0 of rank 0) */
  long ended;           /* steps ended in the current run */
} variant;

/* Marks the end of a step: the figures time the steps after the first, which pays for the
 * run's allocations, first-touched pages and kernel creation (a warm-up step). */
static void step_ended(int64_t epoch, size_t batch, size_t batches, double loss, void *user) {
  (void)epoch, (void)batch, (void)batches, (void)loss;
  variant *v = user;
  v->last = dpt_now();
  if (v->ended++ == 0) v->first = v->last;
}

/* Under MPI, ranks that sit a run out wait asleep, then all agree whether every run
 * succeeded. */
static int mpi_settle(int rc) {
#ifdef DPT_HAVE_MPI
  dpt_bench_sleeping_barrier();
  int any = 0;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
#else
  return rc;
#endif
}

/* One training run of variant v; 0 on success. */
static int run_once(dpt_train_config cfg, variant *v, int rep) {
  int rc = 0;
  if (!v->mpi || v->comm) {
    cfg.devices.replicas = v->mpi ? 1 : v->replicas;
    cfg.exchange.skip_allreduce = v->skip_allreduce;
    cfg.exchange.full_optimizer_step = v->full_step;
    cfg.checkpoints.checkpoint_dir = v->ckpt_dir;
    cfg.exchange.bucket_bytes = v->bucket_bytes;
    cfg.exchange.bucket_whole_update = v->whole_update;
    cfg.deterministic = v->det;
    cfg.checkpoints.keep_checkpoints = 1;
    if (v->ckpt_dir)
      dpt_bench_remove_dir(v->ckpt_dir); /* a run refuses another run's checkpoints */
    /* Skipping the all-reduce lets replicas drift on purpose: no fingerprint checks then. */
    cfg.checks.check_every = v->skip_allreduce ? 0 : cfg.checks.check_every;
    cfg.callbacks.on_progress = step_ended;
    cfg.callbacks.user = v;
    v->ended = 0;
    dpt_status st = dpt_train(&cfg, v->comm, &v->r);
    if (st != DPT_OK) {
      fprintf(stderr, "bench train: %s: %s\n", dpt_status_str(st), dpt_last_error());
      rc = -1;
    } else {
      v->sps[rep] = v->r.samples_per_sec; /* one step, or not replica 0 of rank 0 */
      if (v->ended >= 2 && v->last > v->first)
        v->sps[rep] =
            (double)cfg.schedule.global_batch * (double)(v->ended - 1) / (v->last - v->first);
    }
  }
  return v->mpi ? mpi_settle(rc) : rc;
}

/* Milliseconds per step of one part of the time split. */
static double ms_per_step(double seconds, const dpt_train_report *r) {
  return r->steps > 0 ? 1e3 * seconds / (double)r->steps : 0;
}

int dpt_bench_train(int argc, char **argv) {
  const char *dir = "/usr/share/datasets/fashion-mnist", *backend = "cpu", *model = "mlp";
  int replicas = 2, repeat = 5, json = 0, det = 0;
  size_t depth = 20, batch = 0, seq_len = 128;
  long steps = 100;
  double bucket_mb = 0;
  for (int i = 1; i + 1 < argc; ++i)
    if (!strcmp(argv[i], "--model") && !strcmp(argv[i + 1], "dlrm"))
      return dpt_bench_train_dlrm(argc, argv);
  const char *dlrm_only = dpt_bench_train_dlrm_only(argc, argv);
  if (dlrm_only) {
    fprintf(stderr, "bench train: %s is for --model dlrm\n", dlrm_only);
    return 2;
  }
  dpt_train_config cfg;
  dpt_train_config_default(&cfg);
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--json")) {
      json = 1;
    } else if (!strcmp(a, "--deterministic")) {
      det = 1;
    } else if (v && !strcmp(a, "--backend")) {
      backend = argv[++i];
    } else if (v && !strcmp(a, "--model")) {
      model = argv[++i];
    } else if (v && !strcmp(a, "--seq-len")) {
      seq_len = (size_t)atol(argv[++i]);
    } else if (v && !strcmp(a, "--depth")) {
      depth = (size_t)atol(argv[++i]);
    } else if (v && !strcmp(a, "--global-batch")) {
      batch = (size_t)atol(argv[++i]);
    } else if (v && !strcmp(a, "--data")) {
      dir = argv[++i];
    } else if (v && !strcmp(a, "--replicas")) {
      replicas = atoi(argv[++i]);
    } else if (v && !strcmp(a, "--steps")) {
      steps = atol(argv[++i]);
    } else if (v && !strcmp(a, "--repeat")) {
      repeat = atoi(argv[++i]);
    } else if (v && !strcmp(a, "--checkpoint-every")) {
      cfg.checkpoints.checkpoint_every = atol(argv[++i]);
    } else if (v && !strcmp(a, "--bucket-mb")) {
      ++i;
      bucket_mb = !strcmp(argv[i], "auto") ? -1 : atof(argv[i]);
    } else {
      fprintf(stderr, "bench train: unknown or incomplete option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (replicas < 1 || replicas > 64 || steps < 1 || repeat < 1 || repeat > 100 ||
      cfg.checkpoints.checkpoint_every < 0 ||
      !(bucket_mb == -1 || (bucket_mb >= 0 && bucket_mb <= 1024))) {
    fprintf(stderr, "bench train: --replicas 1..64, --steps >= 1, --repeat 1..100, "
                    "--checkpoint-every >= 0, --bucket-mb 0..1024\n");
    return 2;
  }
  if (dpt_backend_kind_parse(backend, &cfg.devices.backend) != DPT_OK) {
    fprintf(stderr, "bench train: %s\n", dpt_last_error());
    return 2;
  }
  const int bert = !strcmp(model, "bert");
  if (!batch) batch = bert ? 32 : 256;
  dpt_dataset *ds = NULL;
  const char *data = dir;
  dpt_text_run text;
  memset(&text, 0, sizeof text);
  if (bert) {
    /* The fortunes text (DPT_TEXT_DEFAULT_DIR) and a 4096-token vocabulary learned from it. */
    dpt_text_options to;
    dpt_text_options_default(&to);
    to.seq_len = seq_len;
    char msg[1024];
    if (seq_len < 3 || dpt_text_run_load(&to, &text, msg, sizeof msg) != DPT_OK) {
      fprintf(stderr, "bench train: bert: %s\n", seq_len < 3 ? "--seq-len must be >= 3" : msg);
      return seq_len < 3 ? 2 : 1;
    }
    ds = text.train;
    data = DPT_TEXT_DEFAULT_DIR;
  } else if (dpt_dataset_load_dir(dir, "train", 10, &ds) != DPT_OK) {
    ds = random_data(256 * 8);
    data = "random data";
  }
  if (!ds) {
    fprintf(stderr, "bench train: cannot build a data set\n");
    return 1;
  }
  const size_t hidden[2] = {512, 256};
  char title[64] = "MLP 784-512-256-10";
  dpt_status ms = DPT_ERR_INVALID_ARG;
  if (!strcmp(model, "mlp")) {
    ms = dpt_model_spec_mlp(&cfg.model, 1, 28, 28, hidden, 2, 10);
  } else if (!strcmp(model, "cnn")) {
    ms = dpt_model_spec_cnn(&cfg.model, 1, 28, 28, 32, 64, 10);
    snprintf(title, sizeof title, "CNN 32,64");
  } else if (!strcmp(model, "resnet")) {
    ms = dpt_model_spec_resnet(&cfg.model, 1, 28, 28, depth, 10);
    snprintf(title, sizeof title, "ResNet-%zu", depth);
  } else if (bert) {
    dpt_bert_options bo;
    dpt_bert_options_default(&bo);
    bo.seq_len = seq_len;
    bo.vocab = dpt_tokenizer_vocab_size(text.tok);
    ms = dpt_model_spec_bert(&cfg.model, &bo);
    snprintf(title, sizeof title, "BERT 4x256 seq %zu vocab %zu", seq_len, bo.vocab);
  }
  if (ms != DPT_OK || batch < 1) {
    fprintf(stderr, "bench train: --model mlp|cnn|resnet|bert|dlrm (resnet --depth 6n+2), "
                    "--global-batch >= 1\n");
    if (bert)
      dpt_text_run_free(&text);
    else
      dpt_dataset_destroy(ds);
    return 2;
  }
  cfg.schedule.global_batch = batch;
  cfg.data.train = ds;
  cfg.schedule.epochs = 1000;
  cfg.schedule.max_steps = steps;
  /* MPI mode: rank 0 alone (a communicator of its own) for the one-replica variants, every
   * rank for the last. */
  int mpi = 0, rank = 0, rc = 0;
  dpt_comm *world = NULL, *solo = NULL;
  if (!dpt_comm_mpi_launched() && dpt_comm_check_launch(NULL) != DPT_OK) {
    fprintf(stderr, "bench train: %s\n", dpt_last_error());
    return 2;
  }
#ifdef DPT_HAVE_MPI
  MPI_Comm solo_mpi = MPI_COMM_NULL;
  if (dpt_comm_mpi_launched()) {
    mpi = 1;
    /* Creating the first communicator initializes MPI (and destroying it finalizes). */
    dpt_status st = dpt_comm_create_mpi(NULL, &world);
    if (st == DPT_OK) {
      rank = dpt_comm_rank(world);
      replicas = dpt_comm_size(world);
      MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? 0 : MPI_UNDEFINED, 0, &solo_mpi);
      if (rank == 0) st = dpt_comm_create_mpi(&solo_mpi, &solo);
    }
    if (st != DPT_OK) {
      fprintf(stderr, "bench train: %s: %s\n", dpt_status_str(st), dpt_last_error());
      rc = 1;
    }
    if (world) rc = mpi_settle(rc);
  }
#endif
  /* The variants take turns within each repeat, so a slow spell of the machine hits them
   * alike; the figures are medians over the repeats. */
  char ckpt_dir[128];
  snprintf(ckpt_dir, sizeof ckpt_dir, "/tmp/dptrain-bench-ckpt-%ld", (long)getpid());
  const size_t bucket_bytes = bucket_mb < 0 ? DPT_BUCKET_AUTO : (size_t)(bucket_mb * 1048576.0);
  const int ckpt = cfg.checkpoints.checkpoint_every > 0, buckets = bucket_bytes > 0;
  enum { NV = 9 };
  variant v[NV] = {{1, 1, 0, NULL, 0, 0, 0, solo, mpi, NULL, {0}, 0, 0, 0},
                   {1, 0, 0, NULL, 0, 0, 0, solo, mpi, NULL, {0}, 0, 0, 0},
                   {replicas, 0, 0, NULL, 0, 0, 0, world, mpi, NULL, {0}, 0, 0, 0},
                   {replicas, 0, 1, NULL, 0, 0, 0, world, mpi, NULL, {0}, 0, 0, 0},
                   {replicas, 0, 0, ckpt_dir, 0, 0, 0, world, mpi, NULL, {0}, 0, 0, 0},
                   {replicas, 0, 0, NULL, bucket_bytes, 0, 0, world, mpi, NULL, {0}, 0, 0, 0},
                   {replicas, 0, 0, NULL, bucket_bytes, 1, 0, world, mpi, NULL, {0}, 0, 0, 0},
                   {1, 0, 0, NULL, 0, 0, 1, solo, mpi, NULL, {0}, 0, 0, 0},
                   {replicas, 0, 0, NULL, 0, 0, 1, world, mpi, NULL, {0}, 0, 0, 0}};
  const int on[NV] = {1, 1, 1, 1, ckpt, buckets, buckets, det, det};
  for (int k = 0; k < NV; ++k)
    if (!(v[k].sps = calloc((size_t)repeat, sizeof(double)))) rc = 1;
  for (int r = 0; r < repeat && !rc; ++r)
    for (int k = 0; k < NV && !rc; ++k)
      if (on[k]) rc = run_once(cfg, &v[k], r) != 0;
  if (bert)
    dpt_text_run_free(&text); /* ds is the text's */
  else
    dpt_dataset_destroy(ds);
  double sps[NV] = {0};
  for (int k = 0; k < NV; ++k) {
    if (!rc && on[k]) sps[k] = dpt_bench_median(v[k].sps, repeat);
    free(v[k].sps);
  }
  const double bare = sps[0], one = sps[1], many = sps[2], full = sps[3];
  dpt_comm_destroy(solo);
#ifdef DPT_HAVE_MPI
  if (solo_mpi != MPI_COMM_NULL) MPI_Comm_free(&solo_mpi);
#endif
  dpt_comm_destroy(world);
  if (ckpt && rank == 0) dpt_bench_remove_dir(ckpt_dir);
  if (rc) return 1;
  if (rank != 0) return 0;
  const dpt_train_report *o = &v[1].r, *m = &v[2].r, *f = &v[3].r, *bk = &v[5].r, *bw = &v[6].r;
  if (json) {
    printf("{\"model\": \"%s\", \"global_batch\": %zu, ", title, batch);
    printf("\"backend\": \"%s\", \"steps\": %ld, \"bare_samples_per_sec\": %.1f, "
           "\"one_replica_samples_per_sec\": %.1f, \"replicas\": %d, "
           "\"replicas_samples_per_sec\": %.1f, \"full_step_samples_per_sec\": %.1f, "
           "\"machinery_overhead\": %.4f, \"speedup\": %.3f, "
           "\"replicas_ms_per_step\": {\"compute\": %.3f, \"communication\": %.3f, "
           "\"imbalance\": %.3f, \"optimizer\": %.3f}",
           backend, steps, bare, one, replicas, many, full, bare / one - 1.0, many / one,
           ms_per_step(m->compute_seconds, m), ms_per_step(m->allreduce_seconds, m),
           ms_per_step(m->imbalance_seconds, m), ms_per_step(m->optimizer_seconds, m));
    if (bert)
      printf(", \"seq_len\": %zu, \"bare_tokens_per_sec\": %.1f, "
             "\"one_replica_tokens_per_sec\": %.1f, \"replicas_tokens_per_sec\": %.1f, "
             "\"full_step_tokens_per_sec\": %.1f",
             seq_len, bare * (double)seq_len, one * (double)seq_len, many * (double)seq_len,
             full * (double)seq_len);
    if (buckets)
      printf(", \"bucket_mb\": %g, \"buckets_samples_per_sec\": %.1f, \"step_ms\": %.3f, "
             "\"buckets_step_ms\": %.3f, \"exchange_ms\": %.3f, \"exposed_ms\": %.3f, "
             "\"buckets_exchange_ms\": %.3f, \"buckets_exposed_ms\": %.3f, "
             "\"whole_update_step_ms\": %.3f, \"whole_update_exchange_ms\": %.3f, "
             "\"whole_update_exposed_ms\": %.3f",
             bucket_mb, sps[5], 1e3 * (double)batch / many, 1e3 * (double)batch / sps[5],
             ms_per_step(m->exchange_seconds, m), ms_per_step(m->exposed_seconds, m),
             ms_per_step(bk->exchange_seconds, bk), ms_per_step(bk->exposed_seconds, bk),
             1e3 * (double)batch / sps[6], ms_per_step(bw->exchange_seconds, bw),
             ms_per_step(bw->exposed_seconds, bw));
    if (ckpt)
      printf(", \"checkpoint_every\": %lld, \"checkpoint_samples_per_sec\": %.1f, "
             "\"checkpoint_cost\": %.4f, \"checkpoint_pause_ms\": %.2f",
             (long long)cfg.checkpoints.checkpoint_every, sps[4], many / sps[4] - 1.0,
             v[4].r.checkpoints ? 1e3 * v[4].r.checkpoint_seconds / (double)v[4].r.checkpoints : 0);
    if (det)
      printf(", \"deterministic_one_replica_samples_per_sec\": %.1f, "
             "\"deterministic_replicas_samples_per_sec\": %.1f, \"deterministic_cost_one\": %.4f, "
             "\"deterministic_cost_replicas\": %.4f",
             sps[7], sps[8], one / sps[7] - 1.0, many / sps[8] - 1.0);
    printf("}\n");
  } else {
    printf("%s, global batch %zu, %ld steps, %s backend, %s (median of %d)\n", title, batch, steps,
           backend, data, repeat);
    printf("samples/s   %16s %12s %16d %s\n", "1 replica,", "1 replica", replicas,
           mpi ? "MPI ranks" : "replicas (threads)");
    printf("            %16s %12s %16s %18s\n", "no all-reduce", "", "sharded step", "full step");
    printf("            %16.0f %12.0f %16.0f %18.0f\n", bare, one, many, full);
    if (bert) /* every position of a sequence, padding included */
      printf("tokens/s    %16.0f %12.0f %16.0f %18.0f\n", bare * (double)seq_len,
             one * (double)seq_len, many * (double)seq_len, full * (double)seq_len);
    printf("ms per step (last repeat)\n");
    printf("  forward + backward       %16.2f %16.2f %18.2f\n", ms_per_step(o->compute_seconds, o),
           ms_per_step(m->compute_seconds, m), ms_per_step(f->compute_seconds, f));
    printf("  communication (waiting)  %16.2f %16.2f %18.2f\n",
           ms_per_step(o->allreduce_seconds, o), ms_per_step(m->allreduce_seconds, m),
           ms_per_step(f->allreduce_seconds, f));
    printf("%-27s%16.2f %16.2f %18.2f\n", "  slowest f+b - mean f+b",
           ms_per_step(o->imbalance_seconds, o), ms_per_step(m->imbalance_seconds, m),
           ms_per_step(f->imbalance_seconds, f));
    printf("  optimizer step           %16.2f %16.2f %18.2f\n",
           ms_per_step(o->optimizer_seconds, o), ms_per_step(m->optimizer_seconds, m),
           ms_per_step(f->optimizer_seconds, f));
    printf("data-parallel machinery on one replica: %+.1f%%; %d replicas: %.2fx one replica "
           "(full step: %.2fx)\n",
           100.0 * (bare / one - 1.0), replicas, many / one, full / one);
    if (buckets) {
      char bm[32] = "auto";
      if (bucket_mb >= 0) snprintf(bm, sizeof bm, "%g", bucket_mb);
      printf("gradient buckets (--bucket-mb %s, %d replicas, sharded step), per step, ms:\n", bm,
             replicas);
      printf("  %-28s %14s %14s %20s\n", "", "one exchange", "buckets", "buckets, update");
      printf("  %-28s %14s %14s %20s\n", "", "", "", "after the last");
      printf("  %-28s %14.2f %14.2f %20.2f\n", "step", 1e3 * (double)batch / many,
             1e3 * (double)batch / sps[5], 1e3 * (double)batch / sps[6]);
      printf("  %-28s %14.2f %14.2f %20.2f\n", "gradient exchange (running)",
             ms_per_step(m->exchange_seconds, m), ms_per_step(bk->exchange_seconds, bk),
             ms_per_step(bw->exchange_seconds, bw));
      printf("  %-28s %14.2f %14.2f %20.2f\n", "exposed (step waited)",
             ms_per_step(m->exposed_seconds, m), ms_per_step(bk->exposed_seconds, bk),
             ms_per_step(bw->exposed_seconds, bw));
      printf("  %-28s %14.2f %14.2f %20.2f\n", "optimizer", ms_per_step(m->optimizer_seconds, m),
             ms_per_step(bk->optimizer_seconds, bk), ms_per_step(bw->optimizer_seconds, bw));
      printf("  buckets: %.2fx the step time, exposed %.0f %% of the exchange (update after the "
             "last: %.2fx, %.0f %%; one exchange: %.0f %%)\n",
             many / sps[5],
             bk->exchange_seconds > 0 ? 100 * bk->exposed_seconds / bk->exchange_seconds : 0,
             many / sps[6],
             bw->exchange_seconds > 0 ? 100 * bw->exposed_seconds / bw->exchange_seconds : 0,
             m->exchange_seconds > 0 ? 100 * m->exposed_seconds / m->exchange_seconds : 0);
    }
    if (ckpt)
      printf("checkpoints every %lld steps (%d replicas, sharded step): %.0f samples/s, %+.1f%% "
             "time; the step paused %.2f ms per checkpoint (%lld in the last repeat)\n",
             (long long)cfg.checkpoints.checkpoint_every, replicas, sps[4],
             100.0 * (many / sps[4] - 1.0),
             v[4].r.checkpoints ? 1e3 * v[4].r.checkpoint_seconds / (double)v[4].r.checkpoints : 0,
             (long long)v[4].r.checkpoints);
    if (det)
      printf("--deterministic: 1 replica %.0f samples/s (%+.1f%% time), %d replicas %.0f "
             "samples/s (%+.1f%% time against the sharded step; exchange %.2f ms per step)\n",
             sps[7], 100.0 * (one / sps[7] - 1.0), replicas, sps[8], 100.0 * (many / sps[8] - 1.0),
             ms_per_step(v[8].r.exchange_seconds, &v[8].r));
  }
  return 0;
}
