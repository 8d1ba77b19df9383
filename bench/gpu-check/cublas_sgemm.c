/* cuBLAS sgemm GFLOP/s (C = A*B, square n x n, float32) timed the way bench gemm times dptrain:
 * one warm-up call, then the median of --repeat calls, each from enqueue to synchronize, in
 * the default math mode (float32 throughout, no TF32).
 * bench/gpu-check.sh builds it only where the cuBLAS headers and library exist, for a vendor
 * column next to bench gemm's; it is no part of the library.
 * Usage: cublas_sgemm [--sizes 256,512,1024,2048] [--repeat N] [--device D]
 * Prints "n gflops" per size; exit 0, 1 on a CUDA or cuBLAS error, 2 on usage. */
#define _POSIX_C_SOURCE 200809L
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SIZES 16

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The same values bench gemm uploads (bench/gemm.c, fill_random). */
static void fill_random(float *x, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
}

static int parse_sizes(const char *s, size_t *out, size_t *count) {
  *count = 0;
  while (*s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 1 || v > 16384 || *count == MAX_SIZES || (*end && *end != ',')) return -1;
    out[(*count)++] = (size_t)v;
    s = *end ? end + 1 : end;
  }
  return *count ? 0 : -1;
}

/* GFLOP/s of one size, or < 0 after printing the failing call. */
static double measure(cublasHandle_t h, size_t n, int repeat, double *t) {
  const size_t bytes = n * n * sizeof(float);
  const float alpha = 1.0f, beta = 0.0f;
  const int in = (int)n;
  float *host = malloc(bytes), *a = NULL, *b = NULL, *c = NULL;
  double gflops = -1.0;
  cudaError_t ce = host ? cudaSuccess : cudaErrorMemoryAllocation;
  if (ce == cudaSuccess) ce = cudaMalloc((void **)&a, bytes);
  if (ce == cudaSuccess) ce = cudaMalloc((void **)&b, bytes);
  if (ce == cudaSuccess) ce = cudaMalloc((void **)&c, bytes);
  if (ce == cudaSuccess) {
    fill_random(host, n * n, 1);
    ce = cudaMemcpy(a, host, bytes, cudaMemcpyHostToDevice);
  }
  if (ce == cudaSuccess) {
    fill_random(host, n * n, 2);
    ce = cudaMemcpy(b, host, bytes, cudaMemcpyHostToDevice);
  }
  cublasStatus_t bs = CUBLAS_STATUS_SUCCESS;
  /* Warm-up, then the timed calls. */
  for (int r = -1; r < repeat && ce == cudaSuccess && bs == CUBLAS_STATUS_SUCCESS; ++r) {
    double t0 = now();
    bs = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, in, in, in, &alpha, a, in, b, in, &beta, c, in);
    if (bs == CUBLAS_STATUS_SUCCESS) ce = cudaDeviceSynchronize();
    if (r >= 0) t[r] = now() - t0;
  }
  if (ce != cudaSuccess)
    fprintf(stderr, "cublas_sgemm: n=%zu: %s\n", n, cudaGetErrorString(ce));
  else if (bs != CUBLAS_STATUS_SUCCESS)
    fprintf(stderr, "cublas_sgemm: n=%zu: cublasSgemm status %d\n", n, (int)bs);
  else
    gflops = 2.0 * (double)n * (double)n * (double)n / median(t, repeat) * 1e-9;
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  free(host);
  return gflops;
}

int main(int argc, char **argv) {
  size_t sizes[MAX_SIZES] = {256, 512, 1024, 2048}, nsizes = 4;
  int repeat = 5, device = 0;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v && !strcmp(a, "--sizes") && !parse_sizes(v, sizes, &nsizes)) {
      ++i;
    } else if (v && !strcmp(a, "--repeat") && (repeat = atoi(v)) >= 1 && repeat <= 1000) {
      ++i;
    } else if (v && !strcmp(a, "--device") && (device = atoi(v)) >= 0) {
      ++i;
    } else {
      fprintf(stderr, "usage: cublas_sgemm [--sizes 256,512,1024,2048] [--repeat 1..1000] "
                      "[--device D]\n");
      return 2;
    }
  }
  cudaError_t ce = cudaSetDevice(device);
  if (ce != cudaSuccess) {
    fprintf(stderr, "cublas_sgemm: device %d: %s\n", device, cudaGetErrorString(ce));
    return 1;
  }
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) printf("# device: %s\n", prop.name);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "cublas_sgemm: cublasCreate failed\n");
    return 1;
  }
  cublasSetMathMode(h, CUBLAS_DEFAULT_MATH); /* float32 sgemm: no TF32 */
  double *t = calloc((size_t)repeat, sizeof *t);
  int rc = t ? 0 : 1;
  printf("%6s %12s\n", "n", "cublas");
  for (size_t i = 0; i < nsizes && !rc; ++i) {
    double g = measure(h, sizes[i], repeat, t);
    if (g < 0)
      rc = 1;
    else
      printf("%6zu %12.2f\n", sizes[i], g);
  }
  free(t);
  cublasDestroy(h);
  return rc;
}
