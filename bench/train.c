/* bench train: training throughput of the MLP (784-512-256-10, global batch 256) on one backend,
 * side by side: one replica with the gradient all-reduce skipped (the bare step), one replica
 * (the whole data-parallel machinery), and R replicas. Replicas are threads of this process
 * (one core each on the CPU backend); every figure is the median of --repeat runs of --steps
 * steps on Fashion-MNIST (or random data when it is not installed). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "dptrain/dptrain.h"

static void usage(FILE *f) {
  fprintf(f, "usage: dptrain bench train [--backend cpu|opencl|vulkan] [--replicas R]\n"
             "                           [--steps N] [--repeat N] [--data DIR] [--json]\n"
             "Samples/s of the MLP 784-512-256-10 with global batch 256: 1 replica without the\n"
             "all-reduce, 1 replica, and R replicas (threads; default 2), side by side.\n");
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

/* Samples/s of one configuration (median of `repeat` runs); < 0 on failure. */
static double measure(dpt_train_config cfg, int replicas, int skip_allreduce, int repeat) {
  double *v = calloc((size_t)repeat, sizeof *v);
  if (!v) return -1;
  cfg.replicas = replicas;
  cfg.skip_allreduce = skip_allreduce;
  /* Skipping the all-reduce lets replicas drift on purpose: no fingerprint checks then. */
  cfg.check_every = skip_allreduce ? 0 : cfg.check_every;
  for (int r = 0; r < repeat; ++r) {
    dpt_train_report rep;
    dpt_status st = dpt_train(&cfg, NULL, &rep);
    if (st != DPT_OK) {
      fprintf(stderr, "bench train: %s: %s\n", dpt_status_str(st), dpt_last_error());
      free(v);
      return -1;
    }
    v[r] = rep.samples_per_sec;
  }
  double med = dpt_bench_median(v, repeat);
  free(v);
  return med;
}

int dpt_bench_train(int argc, char **argv) {
  const char *dir = "/usr/share/datasets/fashion-mnist", *backend = "cpu";
  int replicas = 2, repeat = 3, json = 0;
  long steps = 100;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--json")) {
      json = 1;
    } else if (v && !strcmp(a, "--backend")) {
      backend = argv[++i];
    } else if (v && !strcmp(a, "--data")) {
      dir = argv[++i];
    } else if (v && !strcmp(a, "--replicas")) {
      replicas = atoi(argv[++i]);
    } else if (v && !strcmp(a, "--steps")) {
      steps = atol(argv[++i]);
    } else if (v && !strcmp(a, "--repeat")) {
      repeat = atoi(argv[++i]);
    } else {
      fprintf(stderr, "bench train: unknown or incomplete option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (replicas < 1 || replicas > 64 || steps < 1 || repeat < 1 || repeat > 100) {
    fprintf(stderr, "bench train: --replicas 1..64, --steps >= 1, --repeat 1..100\n");
    return 2;
  }
  dpt_train_config cfg;
  dpt_train_config_default(&cfg);
  if (dpt_backend_kind_parse(backend, &cfg.backend) != DPT_OK) {
    fprintf(stderr, "bench train: %s\n", dpt_last_error());
    return 2;
  }
  dpt_dataset *ds = NULL;
  const char *data = dir;
  if (dpt_dataset_load_dir(dir, "train", 10, &ds) != DPT_OK) {
    ds = random_data(256 * 8);
    data = "random data";
  }
  if (!ds) {
    fprintf(stderr, "bench train: cannot build a data set\n");
    return 1;
  }
  const size_t hidden[2] = {512, 256};
  dpt_model_spec_mlp(&cfg.model, 1, 28, 28, hidden, 2, 10);
  cfg.train = ds;
  cfg.epochs = 1000;
  cfg.max_steps = steps;
  double bare = measure(cfg, 1, 1, repeat);
  double one = measure(cfg, 1, 0, repeat);
  double many = measure(cfg, replicas, 0, repeat);
  dpt_dataset_destroy(ds);
  if (bare < 0 || one < 0 || many < 0) return 1;
  if (json) {
    printf("{\"backend\": \"%s\", \"steps\": %ld, \"bare_samples_per_sec\": %.1f, "
           "\"one_replica_samples_per_sec\": %.1f, \"replicas\": %d, "
           "\"replicas_samples_per_sec\": %.1f, \"machinery_overhead\": %.4f, \"speedup\": %.3f}\n",
           backend, steps, bare, one, replicas, many, bare / one - 1.0, many / one);
  } else {
    printf("MLP 784-512-256-10, global batch 256, %ld steps, %s backend, %s (median of %d)\n",
           steps, backend, data, repeat);
    printf("%26s %26s %26s\n", "1 replica, no all-reduce", "1 replica", "replicas");
    printf("%20.0f s/s %20.0f s/s %14d: %7.0f s/s\n", bare, one, replicas, many);
    printf("data-parallel machinery on one replica: %+.1f%%; %d replicas: %.2fx one replica\n",
           100.0 * (bare / one - 1.0), replicas, many / one);
  }
  return 0;
}
