/* OpenCL backend specifics that the op conformance suite does not reach: enumeration and device
 * info, the missing-driver path, error translation (OpenCL and CLBlast codes, out of memory,
 * kernel build failures with their log), float16 conversion swept far beyond the conformance
 * cases, scatter-add with heavily repeated indices, multi-group reductions, work-group sizes,
 * gemm called from several threads at once (one backend each).
 *
 * Usage: test_opencl            the suite (exit 77 when there is no OpenCL device)
 *        test_opencl nodriver   run with OCL_ICD_VENDORS pointing at an empty place: checks
 *                               the "no driver" contract (0 devices, DPT_OK, the message). */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/opencl/ocl_internal.h"
#include "test_util.h"

#define NO_DRIVER_TEXT                                                                             \
  "no OpenCL driver installed (for a CPU driver: apt-get install pocl-opencl-icd)"

static dpt_backend *ocl(void) {
  dpt_backend *be = NULL;
  TU_OK(dpt_backend_create(DPT_BACKEND_OPENCL, 0, &be));
  ck_assert_ptr_nonnull(be);
  return be;
}

/* ---- enumeration --------------------------------------------------------------------------- */

START_TEST(test_device_info) {
  int count = 0;
  TU_OK(dpt_device_count(DPT_BACKEND_OPENCL, &count));
  ck_assert_int_ge(count, 1);
  for (int i = 0; i < count; ++i) {
    dpt_device_info a, b;
    TU_OK(dpt_device_get_info(DPT_BACKEND_OPENCL, i, &a));
    TU_OK(dpt_device_get_info(DPT_BACKEND_OPENCL, i, &b));
    ck_assert_int_eq(a.backend, DPT_BACKEND_OPENCL);
    ck_assert_int_eq(a.index, i);
    ck_assert_msg(a.name[0] && a.vendor[0] && a.driver[0], "empty info fields for device %d", i);
    ck_assert_msg(strstr(a.driver, ", driver ") != NULL, "driver '%s' lacks the driver version",
                  a.driver);
    ck_assert_uint_gt(a.memory_bytes, 0);
    /* The order is stable between calls. */
    ck_assert_str_eq(a.name, b.name);
    ck_assert_str_eq(a.driver, b.driver);
  }
  /* GPUs first, then accelerators, then CPUs. */
  int last_rank = 0;
  for (int i = 0; i < count; ++i) {
    dpt_device_info a;
    TU_OK(dpt_device_get_info(DPT_BACKEND_OPENCL, i, &a));
    int rank = a.type == DPT_DEVICE_GPU_DISCRETE || a.type == DPT_DEVICE_GPU_INTEGRATED ? 0
               : a.type == DPT_DEVICE_ACCELERATOR                                       ? 1
               : a.type == DPT_DEVICE_CPU                                               ? 2
                                                                                        : 3;
    ck_assert_msg(rank >= last_rank, "device %d (%s) is out of type order", i, a.name);
    last_rank = rank;
  }
  dpt_device_info info;
  ck_assert_int_eq(dpt_device_get_info(DPT_BACKEND_OPENCL, count, &info), DPT_ERR_INVALID_ARG);
}
END_TEST

/* ---- errors -------------------------------------------------------------------------------- */

START_TEST(test_error_names) {
  ck_assert_str_eq(dpt_ocl_error_name(CL_INVALID_KERNEL_ARGS), "CL_INVALID_KERNEL_ARGS");
  ck_assert_str_eq(dpt_ocl_error_name(-54), "CL_INVALID_WORK_GROUP_SIZE");
  ck_assert_str_eq(dpt_ocl_error_name(-1001), "CL_PLATFORM_NOT_FOUND_KHR");
  ck_assert_str_eq(dpt_ocl_error_name(-9999), "CL_UNKNOWN_ERROR");

  ck_assert_int_eq(dpt_ocl_fail(-54, "clEnqueueNDRangeKernel", "relu_fwd", 0), DPT_ERR_DEVICE);
  ck_assert_str_eq(dpt_last_error(),
                   "clEnqueueNDRangeKernel(relu_fwd): CL_INVALID_WORK_GROUP_SIZE (-54)");
  ck_assert_int_eq(dpt_ocl_fail(CL_MEM_OBJECT_ALLOCATION_FAILURE, "clCreateBuffer", "x", 4096),
                   DPT_ERR_OUT_OF_MEMORY);
  ck_assert_str_eq(
      dpt_last_error(),
      "clCreateBuffer(x): CL_MEM_OBJECT_ALLOCATION_FAILURE (-4) (asked for 4096 bytes)");
  ck_assert_int_eq(dpt_ocl_fail(CL_OUT_OF_RESOURCES, "clFinish", "", 0), DPT_ERR_OUT_OF_MEMORY);
  ck_assert_int_eq(dpt_ocl_fail(CL_OUT_OF_HOST_MEMORY, "clFinish", "", 0), DPT_ERR_OUT_OF_MEMORY);
  ck_assert_str_eq(dpt_last_error(), "clFinish: CL_OUT_OF_HOST_MEMORY (-6)");

  /* CLBlast: its own codes by name, the shared ones as OpenCL names. */
  ck_assert_int_eq(dpt_ocl_clblast_fail(-1016, "CLBlastSgemm", "m 1"), DPT_ERR_DEVICE);
  ck_assert_str_eq(dpt_last_error(), "CLBlastSgemm(m 1): CLBlastInvalidLeadDimA (-1016)");
  ck_assert_int_eq(dpt_ocl_clblast_fail(-4, "CLBlastSgemm", "m 1"), DPT_ERR_OUT_OF_MEMORY);
  ck_assert_int_eq(dpt_ocl_clblast_fail(-2046, "CLBlastSgemm", "m 1"), DPT_ERR_OUT_OF_MEMORY);
  ck_assert_int_eq(dpt_ocl_clblast_fail(-1024, "CLBlastSgemm", "m 1"), DPT_ERR_UNSUPPORTED);
}
END_TEST

START_TEST(test_alloc_too_large) {
  dpt_backend *be = ocl();
  dpt_ocl_ctx *c = dpt_ocl_ctx_of(be);
  size_t asked = (size_t)c->lim.max_alloc + 1;
  dpt_buffer *b = NULL;
  ck_assert_int_eq(dpt_buffer_alloc(be, asked, &b), DPT_ERR_OUT_OF_MEMORY);
  ck_assert_ptr_null(b);
  char text[32];
  snprintf(text, sizeof text, "%zu bytes", asked);
  ck_assert_msg(strstr(dpt_last_error(), text) != NULL, "message lacks the size: %s",
                dpt_last_error());
  /* The backend still works. */
  b = tu_f32_fill(be, 8, 2.0f);
  float v[8];
  tu_get(b, 0, v, 8);
  ck_assert_float_eq(v[7], 2.0f);
  dpt_buffer_free(b);
  dpt_backend_destroy(be);
}
END_TEST

START_TEST(test_build_failure) {
  dpt_backend *be = ocl();
  dpt_ocl_ctx *c = dpt_ocl_ctx_of(be);
  const char *src = "__kernel void broken(__global float *x) { x[0] = no_such_variable; }\n";
  size_t len = strlen(src);
  cl_program prog = NULL;
  ck_assert_int_eq(dpt_ocl_compile(c, 1, &src, &len, &prog), DPT_ERR_KERNEL_BUILD);
  ck_assert_ptr_null(prog);
  const char *msg = dpt_last_error();
  ck_assert_msg(strstr(msg, be->info.name) != NULL, "no device name in: %s", msg);
  ck_assert_msg(strstr(msg, "CL_BUILD_PROGRAM_FAILURE") != NULL, "no CL name in: %s", msg);
  ck_assert_msg(strstr(msg, "no_such_variable") != NULL, "no build log in: %s", msg);
  /* Our own program still builds and runs afterwards. */
  float x[3] = {-1.0f, 2.0f, -3.0f};
  dpt_buffer *b = tu_f32(be, x, 3);
  TU_OK(dpt_relu_fwd(be, 3, b, 0, b, 0));
  tu_get(b, 0, x, 3);
  ck_assert_float_eq(x[0], 0.0f);
  ck_assert_float_eq(x[1], 2.0f);
  dpt_buffer_free(b);
  dpt_backend_destroy(be);
}
END_TEST

/* ---- launch configuration ------------------------------------------------------------------ */

START_TEST(test_work_group_sizes) {
  dpt_backend *be = ocl();
  dpt_ocl_ctx *c = dpt_ocl_ctx_of(be);
  TU_OK(dpt_ocl_ensure_program(c));
  for (int k = 0; k < DPT_OCL_K_COUNT; ++k) {
    size_t l = c->local_size[k], kernel_max = 0;
    ck_assert_int_eq(clGetKernelWorkGroupInfo(c->kernels[k], c->device, CL_KERNEL_WORK_GROUP_SIZE,
                                              sizeof kernel_max, &kernel_max, NULL),
                     CL_SUCCESS);
    ck_assert_uint_ge(l, 1);
    ck_assert_uint_le(l, kernel_max);
    ck_assert_uint_le(l, c->lim.max_wg);
    if (DPT_OCL_KERNEL_NEEDS_POW2(k)) ck_assert_msg((l & (l - 1)) == 0, "kernel %d: %zu", k, l);
  }
  dpt_backend_destroy(be);
}
END_TEST

/* ---- ops beyond the conformance cases ------------------------------------------------------ */

/* float32 -> float16 over 2^22 bit patterns spread over the whole range (every 1024th pattern,
 * low bits varied so ties and sticky bits occur), and float16 -> float32 for all 65536
 * patterns: bit-exact with the scalar reference. */
START_TEST(test_f16_sweep) {
  dpt_backend *be = ocl();
  const size_t n = (size_t)1 << 22;
  uint32_t *bits = malloc(n * sizeof *bits);
  uint16_t *half = malloc(n * sizeof *half);
  ck_assert_ptr_nonnull(bits);
  ck_assert_ptr_nonnull(half);
  for (size_t i = 0; i < n; ++i)
    bits[i] = (uint32_t)(i << 10) | (uint32_t)((i * 2654435761u) & 0x3ffu);
  bits[0] = 0x00001000u; /* ties at the subnormal edge */
  bits[1] = 0x33000000u;
  bits[2] = 0x477ff000u;
  dpt_buffer *src = tu_buf(be, bits, n * sizeof *bits);
  dpt_buffer *dst = tu_buf(be, NULL, n * sizeof *half);
  TU_OK(dpt_f32_to_f16(be, n, src, 0, dst, 0));
  TU_OK(dpt_buffer_download(dst, 0, half, n * sizeof *half));
  /* Asserting once per element would make Check record every passing check: count, then
   * report the first mismatch. */
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; ++i) {
    float f;
    memcpy(&f, &bits[i], sizeof f);
    if (half[i] != dpt_f32_to_f16_scalar(f) && bad++ == 0) first = i;
  }
  if (bad > 0) {
    float f;
    memcpy(&f, &bits[first], sizeof f);
    ck_abort_msg("%zu mismatches; first: f32 bits 0x%08x gave 0x%04x, want 0x%04x", bad,
                 bits[first], half[first], dpt_f32_to_f16_scalar(f));
  }
  dpt_buffer_free(src);
  dpt_buffer_free(dst);

  for (uint32_t i = 0; i < 65536; ++i)
    half[i] = (uint16_t)i;
  src = tu_buf(be, half, 65536 * sizeof *half);
  dst = tu_buf(be, NULL, 65536 * sizeof(float));
  TU_OK(dpt_f16_to_f32(be, 65536, src, 0, dst, 0));
  TU_OK(dpt_buffer_download(dst, 0, bits, 65536 * sizeof(float)));
  for (uint32_t i = 0; i < 65536; ++i) {
    float want = dpt_f16_to_f32_scalar((uint16_t)i);
    if (memcmp(&bits[i], &want, sizeof want) != 0)
      ck_abort_msg("f16 0x%04x: got f32 bits 0x%08x", i, bits[i]);
  }
  dpt_buffer_free(src);
  dpt_buffer_free(dst);
  free(bits);
  free(half);
  dpt_backend_destroy(be);
}
END_TEST

/* Runs embed_scatter_add on both backends from the same inputs and demands identical bits:
 * the OpenCL kernel adds each row's terms in the CPU's order. */
static void scatter_case(dpt_backend *cl, dpt_backend *cpu, size_t n, size_t vocab, size_t dim,
                         const int32_t *idx) {
  tu_rng r = {n * 31 + dim};
  size_t nt = vocab * dim, nd = n * dim;
  float *table = malloc(nt * sizeof *table), *dout = malloc(nd * sizeof *dout);
  float *got = malloc(nt * sizeof *got), *want = malloc(nt * sizeof *want);
  ck_assert(table && dout && got && want);
  tu_fill(&r, table, nt, -1, 1);
  tu_fill(&r, dout, nd, -1, 1);
  dpt_backend *bes[2] = {cl, cpu};
  float *outs[2] = {got, want};
  for (int b = 0; b < 2; ++b) {
    dpt_buffer *t = tu_f32(bes[b], table, nt), *d = tu_f32(bes[b], dout, nd);
    dpt_buffer *ix = tu_i32(bes[b], idx, n);
    TU_OK(dpt_embed_scatter_add(bes[b], n, vocab, dim, d, 0, ix, 0, t, 0));
    tu_get(t, 0, outs[b], nt);
    dpt_buffer_free(t);
    dpt_buffer_free(d);
    dpt_buffer_free(ix);
  }
  for (size_t i = 0; i < nt; ++i)
    if (memcmp(&got[i], &want[i], sizeof got[i]) != 0)
      ck_abort_msg("n %zu vocab %zu dim %zu: dtable[%zu] got %.9g want %.9g", n, vocab, dim, i,
                   (double)got[i], (double)want[i]);
  free(table);
  free(dout);
  free(got);
  free(want);
}

START_TEST(test_scatter_repeated) {
  dpt_backend *cl = ocl(), *cpu = tu_cpu();
  enum { N = 2000 };
  static int32_t idx[N];
  for (size_t i = 0; i < N; ++i) /* one hot row, a few others, some invalid */
    idx[i] = i % 5 == 0 ? 3 : i % 7 == 0 ? -1 : i % 11 == 0 ? 1000 : (int32_t)(i % 3);
  scatter_case(cl, cpu, N, 40, 1, idx);
  scatter_case(cl, cpu, N, 40, 3, idx);
  scatter_case(cl, cpu, N, 4, 300, idx);
  for (size_t i = 0; i < N; ++i)
    idx[i] = 7;
  scatter_case(cl, cpu, N, 8, 17, idx);
  dpt_backend_destroy(cl);
  dpt_backend_destroy(cpu);
}
END_TEST

/* Reductions long enough to use many work-groups and every partial. */
START_TEST(test_reduce_large) {
  dpt_backend *cl = ocl();
  const size_t n = ((size_t)1 << 21) + 3;
  float *x = malloc(n * sizeof *x);
  ck_assert_ptr_nonnull(x);
  tu_rng r = {7};
  tu_fill(&r, x, n, -1, 2);
  x[12345] = INFINITY;
  x[n - 1] = NAN;
  dpt_buffer *b = tu_f32(cl, x, n);
  uint64_t nonfinite;
  double got_sum, got_sumsq;
  TU_OK(dpt_count_nonfinite(cl, n, b, 0, &nonfinite));
  ck_assert_uint_eq(nonfinite, 2);
  TU_OK(dpt_sum(cl, n - 1, b, 0, &got_sum)); /* the infinity, not the NaN */
  ck_assert(isinf(got_sum) && got_sum > 0);

  x[12345] = 0.5f;
  TU_OK(dpt_buffer_upload(b, 12345 * sizeof(float), &x[12345], sizeof(float)));
  double sum = 0, sumsq = 0;
  for (size_t i = 0; i < n - 1; ++i) {
    sum += x[i];
    sumsq += (double)x[i] * x[i];
  }
  TU_OK(dpt_sum(cl, n - 1, b, 0, &got_sum));
  TU_OK(dpt_sumsq(cl, n - 1, b, 0, &got_sumsq));
  /* Double accumulators on the device: only the order differs; float: partial sums round. */
  double tol = dpt_ocl_ctx_of(cl)->lim.fp64 ? 1e-12 : 1e-5;
  ck_assert_msg(fabs(got_sum - sum) <= tol * fabs(sum), "sum %.17g want %.17g", got_sum, sum);
  ck_assert_msg(fabs(got_sumsq - sumsq) <= tol * sumsq, "sumsq %.17g want %.17g", got_sumsq, sumsq);
  dpt_buffer_free(b);
  free(x);
  dpt_backend_destroy(cl);
}
END_TEST

/* Memory calls at unaligned byte offsets and a device copy inside one buffer. */
START_TEST(test_memory_offsets) {
  dpt_backend *cl = ocl();
  unsigned char host[1000], back[1000];
  for (int i = 0; i < 1000; ++i)
    host[i] = (unsigned char)(i * 7);
  dpt_buffer *b = tu_buf(cl, NULL, 4000);
  TU_OK(dpt_buffer_upload(b, 3, host, 1000));
  TU_OK(dpt_buffer_copy(b, 2001, b, 3, 1000));
  TU_OK(dpt_buffer_download(b, 2001, back, 1000));
  ck_assert_mem_eq(back, host, 1000);
  TU_OK(dpt_buffer_fill_f32(b, 1, 3, -1.5f));
  float f[5];
  TU_OK(dpt_buffer_download(b, 0, f, sizeof f));
  ck_assert_float_eq(f[1], -1.5f);
  ck_assert_float_eq(f[3], -1.5f);
  ck_assert_mem_eq(&f[4], host + 13, 4); /* bytes 16..19 = host[13..16], untouched */
  TU_OK(dpt_backend_synchronize(cl));
  dpt_buffer_free(b);
  dpt_backend_destroy(cl);
}
END_TEST

/* ---- several threads, one backend each ------------------------------------------------------ */

/* Replicas driven as threads of one process each call gemm on their own backend at once.
 * CLBlast is not safe for that (its routine set-up races; CLBlast issue #486): the backend
 * serializes the calls. Each thread checks its results against a host gemm. */
enum { GEMM_THREADS = 8 };

static void *gemm_thread(void *arg) {
  int *failed = arg;
  dpt_backend *cl = NULL;
  if (dpt_backend_create(DPT_BACKEND_OPENCL, 0, &cl) != DPT_OK) {
    *failed = 1;
    return NULL;
  }
  const size_t shapes[][3] = {{3, 5, 7}, {32, 32, 64}, {64, 128, 96}, {130, 17, 33}};
  for (int rep = 0; rep < 3 && !*failed; ++rep)
    for (size_t s = 0; s < 4 && !*failed; ++s) {
      const size_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
      float *a = malloc(m * k * sizeof(float)), *b = malloc(k * n * sizeof(float));
      float *c = malloc(m * n * sizeof(float));
      dpt_buffer *ba = NULL, *bb = NULL, *bc = NULL;
      if (!a || !b || !c) {
        *failed = 1;
      } else {
        for (size_t i = 0; i < m * k; ++i)
          a[i] = (float)((int)(i % 7) - 3);
        for (size_t i = 0; i < k * n; ++i)
          b[i] = (float)((int)(i % 5) - 2);
        if (dpt_buffer_alloc(cl, m * k * 4, &ba) != DPT_OK ||
            dpt_buffer_alloc(cl, k * n * 4, &bb) != DPT_OK ||
            dpt_buffer_alloc(cl, m * n * 4, &bc) != DPT_OK ||
            dpt_buffer_upload(ba, 0, a, m * k * 4) != DPT_OK ||
            dpt_buffer_upload(bb, 0, b, k * n * 4) != DPT_OK ||
            dpt_gemm(cl, 0, 0, m, n, k, 1.0f, ba, 0, k, bb, 0, n, 0.0f, bc, 0, n) != DPT_OK ||
            dpt_buffer_download(bc, 0, c, m * n * 4) != DPT_OK)
          *failed = 1;
        for (size_t i = 0; i < m && !*failed; ++i)
          for (size_t j = 0; j < n && !*failed; ++j) {
            float want = 0; /* small integers: exact in any order */
            for (size_t p = 0; p < k; ++p)
              want += a[i * k + p] * b[p * n + j];
            if (c[i * n + j] != want) *failed = 2;
          }
      }
      dpt_buffer_free(ba);
      dpt_buffer_free(bb);
      dpt_buffer_free(bc);
      free(a);
      free(b);
      free(c);
    }
  dpt_backend_destroy(cl);
  return NULL;
}

START_TEST(test_gemm_from_threads) {
  for (int round = 0; round < 3; ++round) {
    pthread_t th[GEMM_THREADS];
    int failed[GEMM_THREADS] = {0};
    for (int t = 0; t < GEMM_THREADS; ++t)
      ck_assert_int_eq(pthread_create(&th[t], NULL, gemm_thread, &failed[t]), 0);
    for (int t = 0; t < GEMM_THREADS; ++t)
      pthread_join(th[t], NULL);
    for (int t = 0; t < GEMM_THREADS; ++t)
      ck_assert_msg(failed[t] == 0, "round %d thread %d: %s", round, t,
                    failed[t] == 2 ? "wrong gemm result" : "a call failed");
  }
}
END_TEST

/* ---- the missing-driver contract ----------------------------------------------------------- */

static int run_nodriver(void) {
  int count = -1;
  dpt_status st = dpt_device_count(DPT_BACKEND_OPENCL, &count);
  if (st != DPT_OK || count != 0 || strcmp(dpt_last_error(), NO_DRIVER_TEXT) != 0) {
    fprintf(stderr, "device_count: %s, %d devices, '%s'\n", dpt_status_name(st), count,
            dpt_last_error());
    return 1;
  }
  dpt_backend *be = NULL;
  st = dpt_backend_create(DPT_BACKEND_OPENCL, 0, &be);
  if (st != DPT_ERR_UNSUPPORTED || be != NULL || !strstr(dpt_last_error(), NO_DRIVER_TEXT)) {
    fprintf(stderr, "create: %s, '%s'\n", dpt_status_name(st), dpt_last_error());
    return 1;
  }
  printf("no driver: %s\n", dpt_last_error());
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "nodriver") == 0) return run_nodriver();
  int count = 0;
  if (dpt_device_count(DPT_BACKEND_OPENCL, &count) != DPT_OK || count == 0) {
    printf("SKIP: no OpenCL device: %s\n", dpt_last_error());
    return 77;
  }
  Suite *s = suite_create("opencl");
  TCase *tc = tcase_create("opencl");
  tcase_add_test(tc, test_device_info);
  tcase_add_test(tc, test_error_names);
  tcase_add_test(tc, test_alloc_too_large);
  tcase_add_test(tc, test_build_failure);
  tcase_add_test(tc, test_work_group_sizes);
  tcase_add_test(tc, test_f16_sweep);
  tcase_add_test(tc, test_scatter_repeated);
  tcase_add_test(tc, test_reduce_large);
  tcase_add_test(tc, test_memory_offsets);
  tcase_add_test(tc, test_gemm_from_threads);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  /* One process: OpenCL drivers (PoCL's worker threads) do not survive fork(). */
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
