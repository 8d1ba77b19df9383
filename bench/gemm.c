/* bench gemm: GFLOP/s of C = A*B (square, n x n, float32) on every backend present, side by
 * side in one run. Each figure is the median of --repeat timed calls (after one warm-up call,
 * which also absorbs kernel compilation), each timed from enqueue to synchronize. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "bench/bench.h"
#include "dptrain/backend.h"

#define MAX_COLUMNS 16
#define MAX_SIZES   16

typedef struct column {
  dpt_backend_kind kind;
  int device;
  const char *cpu_gemm; /* DPT_CPU_GEMM value for CPU columns, NULL otherwise */
  char label[48];
  dpt_device_info info;
} column;

static void usage(FILE *f) {
  fprintf(f,
          "usage: dptrain bench gemm [--sizes 256,512,1024,2048] [--backends cpu,opencl,vulkan]\n"
          "                          [--repeat N] [--json]\n"
          "Prints GFLOP/s of a square float32 gemm (C = A*B) per backend and size, side by\n"
          "side. Every device of every listed backend that is present gets a column; the CPU\n"
          "backend gets one column per gemm implementation compiled in (openblas, portable).\n"
          "  --sizes LIST     matrix sizes n (default 256,512,1024,2048)\n"
          "  --backends LIST  backends to measure (default: all compiled in)\n"
          "  --repeat N       timed calls per figure, the median is printed (default 5)\n"
          "  --json           one JSON object per (backend, size): backend, device, n, gflops\n");
}

static int add_columns(column *cols, int *ncols, dpt_backend_kind kind) {
  int count = 0;
  if (!dpt_backend_compiled(kind) || dpt_device_count(kind, &count) != DPT_OK) return 0;
  for (int d = 0; d < count && *ncols < MAX_COLUMNS; ++d) {
    /* The CPU backend: one column per gemm implementation (DPT_CPU_GEMM picks it at create). */
    static const char *const cpu_impls[] = {"openblas", "portable"};
    int variants = kind == DPT_BACKEND_CPU ? 2 : 1;
    for (int v = 0; v < variants && *ncols < MAX_COLUMNS; ++v) {
      column *c = &cols[(*ncols)++];
      memset(c, 0, sizeof *c);
      c->kind = kind;
      c->device = d;
      c->cpu_gemm = kind == DPT_BACKEND_CPU ? cpu_impls[v] : NULL;
      if (c->cpu_gemm)
        snprintf(c->label, sizeof c->label, "cpu/%s", c->cpu_gemm);
      else
        snprintf(c->label, sizeof c->label, "%s:%d", dpt_backend_kind_name(kind), d);
    }
  }
  return 0;
}

static void fill_random(float *x, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
}

/* GFLOP/s of one n x n gemm on `be`, median of `repeat`; < 0 on failure (message printed). */
static double measure(dpt_backend *be, size_t n, int repeat) {
  dpt_buffer *a = NULL, *b = NULL, *c = NULL;
  double gflops = -1.0;
  size_t bytes = n * n * sizeof(float);
  float *host = malloc(bytes);
  double *t = calloc((size_t)repeat, sizeof *t);
  dpt_status st = host && t ? DPT_OK : DPT_ERR_OUT_OF_MEMORY;
  if (st == DPT_OK) st = dpt_buffer_alloc(be, bytes, &a);
  if (st == DPT_OK) st = dpt_buffer_alloc(be, bytes, &b);
  if (st == DPT_OK) st = dpt_buffer_alloc(be, bytes, &c);
  if (st == DPT_OK) {
    fill_random(host, n * n, 1);
    st = dpt_buffer_upload(a, 0, host, bytes);
  }
  if (st == DPT_OK) {
    fill_random(host, n * n, 2);
    st = dpt_buffer_upload(b, 0, host, bytes);
  }
  /* Warm-up: kernel compilation, first-touch of memory. */
  if (st == DPT_OK) st = dpt_gemm(be, 0, 0, n, n, n, 1.0f, a, 0, n, b, 0, n, 0.0f, c, 0, n);
  if (st == DPT_OK) st = dpt_backend_synchronize(be);
  for (int r = 0; r < repeat && st == DPT_OK; ++r) {
    double t0 = dpt_now();
    st = dpt_gemm(be, 0, 0, n, n, n, 1.0f, a, 0, n, b, 0, n, 0.0f, c, 0, n);
    if (st == DPT_OK) st = dpt_backend_synchronize(be);
    t[r] = dpt_now() - t0;
  }
  if (st == DPT_OK) {
    double med = dpt_bench_median(t, repeat);
    gflops = 2.0 * (double)n * (double)n * (double)n / med * 1e-9;
  } else {
    fprintf(stderr, "bench gemm: n=%zu: %s: %s\n", n, dpt_status_str(st), dpt_last_error());
  }
  dpt_buffer_free(a);
  dpt_buffer_free(b);
  dpt_buffer_free(c);
  free(host);
  free(t);
  return gflops;
}

static void json_string(const char *s) {
  putchar('"');
  for (; *s; ++s) {
    if (*s == '"' || *s == '\\')
      printf("\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      printf("\\u%04x", (unsigned char)*s);
    else
      putchar(*s);
  }
  putchar('"');
}

int dpt_bench_gemm(int argc, char **argv) {
  size_t sizes[MAX_SIZES] = {256, 512, 1024, 2048};
  size_t nsizes = 4;
  int repeat = 5, json = 0;
  int want[DPT_BACKEND_KIND_COUNT] = {0};
  int any_want = 0;
  for (int i = 1; i < argc; ++i) {
    const char *arg = argv[i];
    if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(arg, "--json")) {
      json = 1;
    } else if (!strcmp(arg, "--sizes") && i + 1 < argc) {
      if (dpt_parse_size_list(argv[++i], sizes, MAX_SIZES, 16384, &nsizes)) {
        fprintf(stderr, "bench gemm: bad --sizes '%s' (comma-separated sizes 1..16384)\n", argv[i]);
        return 2;
      }
    } else if (!strcmp(arg, "--repeat") && i + 1 < argc) {
      repeat = atoi(argv[++i]);
      if (repeat < 1 || repeat > 1000) {
        fprintf(stderr, "bench gemm: bad --repeat '%s' (1..1000)\n", argv[i]);
        return 2;
      }
    } else if (!strcmp(arg, "--backends") && i + 1 < argc) {
      char *list = strdup(argv[++i]);
      if (!list) return 1;
      for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
           tok = strtok_r(NULL, ",", &save)) {
        dpt_backend_kind k;
        if (dpt_backend_kind_parse(tok, &k) != DPT_OK) {
          fprintf(stderr, "bench gemm: %s\n", dpt_last_error());
          free(list);
          return 2;
        }
        want[k] = any_want = 1;
      }
      free(list);
    } else {
      fprintf(stderr, "bench gemm: unknown or incomplete option '%s'\n", arg);
      usage(stderr);
      return 2;
    }
  }

  column cols[MAX_COLUMNS];
  int ncols = 0;
  for (int k = 0; k < DPT_BACKEND_KIND_COUNT; ++k)
    if (!any_want || want[k]) add_columns(cols, &ncols, (dpt_backend_kind)k);
  if (ncols == 0) {
    fprintf(stderr, "bench gemm: no device found for the requested backends\n");
    return 1;
  }

  double results[MAX_COLUMNS][MAX_SIZES];
  int used = 0;
  for (int ci = 0; ci < ncols; ++ci) {
    column *c = &cols[ci];
    if (c->cpu_gemm) setenv("DPT_CPU_GEMM", c->cpu_gemm, 1);
    dpt_backend *be = NULL;
    dpt_status st = dpt_backend_create(c->kind, c->device, &be);
    if (c->cpu_gemm) unsetenv("DPT_CPU_GEMM");
    if (st == DPT_OK) st = dpt_backend_get_info(be, &c->info);
    /* A CPU variant that is not compiled in falls back to another: keep one column each. */
    if (st == DPT_OK && c->cpu_gemm && !strstr(c->info.driver, c->cpu_gemm)) {
      dpt_backend_destroy(be);
      continue;
    }
    if (st != DPT_OK) {
      fprintf(stderr, "bench gemm: %s: %s: %s\n", c->label, dpt_status_str(st), dpt_last_error());
      dpt_backend_destroy(be);
      continue;
    }
    if (!json)
      fprintf(stderr, "measuring %s (%s, %s)...\n", c->label, c->info.name, c->info.driver);
    for (size_t s = 0; s < nsizes; ++s) {
      results[used][s] = measure(be, sizes[s], repeat);
      if (json && results[used][s] >= 0) {
        printf("{\"backend\": ");
        json_string(c->label);
        printf(", \"device\": ");
        json_string(c->info.name);
        printf(", \"n\": %zu, \"gflops\": %.3f}\n", sizes[s], results[used][s]);
        fflush(stdout);
      }
    }
    dpt_backend_destroy(be);
    cols[used++] = *c;
  }
  if (used == 0) return 1;
  if (!json) {
    printf("gemm GFLOP/s (C = A*B, float32, n x n; median of %d)\n", repeat);
    printf("%6s", "n");
    for (int ci = 0; ci < used; ++ci)
      printf(" %16s", cols[ci].label);
    printf("\n");
    for (size_t s = 0; s < nsizes; ++s) {
      printf("%6zu", sizes[s]);
      for (int ci = 0; ci < used; ++ci) {
        if (results[ci][s] < 0)
          printf(" %16s", "failed");
        else
          printf(" %16.2f", results[ci][s]);
      }
      printf("\n");
    }
    printf("devices:\n");
    for (int ci = 0; ci < used; ++ci)
      printf("  %-16s %s [%s]\n", cols[ci].label, cols[ci].info.name, cols[ci].info.driver);
  }
  return 0;
}
