/* Vulkan backend specifics that the op conformance suite does not reach: enumeration order and
 * device info, VkResult translation and device loss, the sub-allocator, batching (no submit per
 * op), host writes ordered after pending device work, deferred frees, dispatches split to fit
 * maxStorageBufferRange, every gemm kernel variant (transpositions x vector widths x both
 * kernels), and the validation-layer reporting.
 *
 * Usage: test_vulkan            the suite (exit 77 when there is no Vulkan device)
 *        test_vulkan nodriver   run with VK_DRIVER_FILES pointing at nothing: checks the
 *                               "no driver" contract (0 devices, DPT_OK, the message)
 *        test_vulkan nolayer    run with DPT_VULKAN_VALIDATION=1 and VK_LAYER_PATH pointing at
 *                               nothing: creation fails with DPT_ERR_UNSUPPORTED naming the layer
 */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/vulkan/vk_internal.h"
#include "backends/vulkan/vulkan_debug.h"
#include "test_util.h"

#define NO_DRIVER_TEXT                                                                             \
  "no Vulkan driver installed (for a CPU driver: apt-get install mesa-vulkan-drivers)"

static dpt_backend *vk(void) {
  dpt_backend *be = NULL;
  TU_OK(dpt_backend_create(DPT_BACKEND_VULKAN, 0, &be));
  ck_assert_ptr_nonnull(be);
  return be;
}

/* A backend created with one environment variable set (a test knob read at creation). */
static dpt_backend *vk_with(const char *var, const char *value) {
  setenv(var, value, 1);
  dpt_backend *be = NULL;
  dpt_status st = dpt_backend_create(DPT_BACKEND_VULKAN, 0, &be);
  unsetenv(var);
  TU_OK(st);
  return be;
}

static dpt_vk_ctx *ctx_of(dpt_backend *be) {
  return be->ctx;
}

/* ---- enumeration ----------------------------------------------------------------------------- */

static int type_rank(dpt_device_type t) {
  switch (t) {
  case DPT_DEVICE_GPU_DISCRETE:
    return 0;
  case DPT_DEVICE_GPU_INTEGRATED:
    return 1;
  case DPT_DEVICE_GPU_VIRTUAL:
    return 2;
  case DPT_DEVICE_CPU:
    return 4;
  default:
    return 3;
  }
}

START_TEST(test_device_info) {
  int count = 0;
  TU_OK(dpt_device_count(DPT_BACKEND_VULKAN, &count));
  ck_assert_int_ge(count, 1);
  int last_rank = 0;
  for (int i = 0; i < count; ++i) {
    dpt_device_info a, b;
    TU_OK(dpt_device_get_info(DPT_BACKEND_VULKAN, i, &a));
    TU_OK(dpt_device_get_info(DPT_BACKEND_VULKAN, i, &b));
    ck_assert_int_eq(a.backend, DPT_BACKEND_VULKAN);
    ck_assert_int_eq(a.index, i);
    ck_assert_msg(a.name[0] && a.vendor[0] && a.driver[0], "empty info fields for device %d", i);
    ck_assert_msg(strstr(a.driver, "Vulkan 1.") != NULL, "driver '%s' lacks the API version",
                  a.driver);
    ck_assert_uint_gt(a.memory_bytes, 0);
    ck_assert_str_eq(a.name, b.name); /* stable between calls */
    ck_assert_msg(type_rank(a.type) >= last_rank, "device %d (%s) is out of type order", i, a.name);
    last_rank = type_rank(a.type);
  }
  dpt_device_info info;
  ck_assert_int_eq(dpt_device_get_info(DPT_BACKEND_VULKAN, count, &info), DPT_ERR_INVALID_ARG);
  dpt_backend *be = vk();
  TU_OK(dpt_backend_get_info(be, &info));
  ck_assert_int_eq(info.backend, DPT_BACKEND_VULKAN);
  dpt_backend_destroy(be);
}
END_TEST

/* ---- errors ---------------------------------------------------------------------------------- */

START_TEST(test_error_translation) {
  ck_assert_str_eq(dpt_vk_result_name(VK_ERROR_DEVICE_LOST), "VK_ERROR_DEVICE_LOST");
  ck_assert_str_eq(dpt_vk_result_name(VK_ERROR_OUT_OF_POOL_MEMORY), "VK_ERROR_OUT_OF_POOL_MEMORY");
  ck_assert_str_eq(dpt_vk_result_name((VkResult)-123456), "VK_RESULT_UNKNOWN");
  ck_assert_int_eq(dpt_vk_check(NULL, VK_SUCCESS, "vkQueueSubmit", 0), DPT_OK);
  ck_assert_int_eq(dpt_vk_check(NULL, VK_ERROR_INITIALIZATION_FAILED, "vkCreateDevice", 0),
                   DPT_ERR_DEVICE);
  ck_assert_str_eq(dpt_last_error(), "vkCreateDevice: VK_ERROR_INITIALIZATION_FAILED (-3)");
  ck_assert_int_eq(dpt_vk_check(NULL, VK_ERROR_OUT_OF_DEVICE_MEMORY, "vkAllocateMemory", 4096),
                   DPT_ERR_OUT_OF_MEMORY);
  ck_assert_str_eq(dpt_last_error(),
                   "vkAllocateMemory (4096 bytes): VK_ERROR_OUT_OF_DEVICE_MEMORY (-2)");
  ck_assert_int_eq(dpt_vk_check(NULL, VK_ERROR_OUT_OF_HOST_MEMORY, "vkCreateFence", 0),
                   DPT_ERR_OUT_OF_MEMORY);
  ck_assert_str_eq(dpt_last_error(), "vkCreateFence: VK_ERROR_OUT_OF_HOST_MEMORY (-1)");
}
END_TEST

/* A lost device refuses further work; destroying it still frees everything (ASan checks). */
START_TEST(test_device_lost) {
  dpt_backend *be = vk();
  dpt_buffer *x = tu_f32_fill(be, 1000, 1.0f);
  dpt_buffer *y = tu_f32_fill(be, 1000, 2.0f);
  TU_OK(dpt_axpy(be, 1000, 1.0f, x, 0, y, 0)); /* pending work at the loss */
  ck_assert_int_eq(dpt_vk_check(ctx_of(be), VK_ERROR_DEVICE_LOST, "vkQueueSubmit", 0),
                   DPT_ERR_DEVICE);
  ck_assert_str_eq(dpt_last_error(), "vkQueueSubmit: VK_ERROR_DEVICE_LOST (-4)");
  ck_assert_int_eq(be->lost, 1);
  ck_assert_int_eq(dpt_axpy(be, 1000, 1.0f, x, 0, y, 0), DPT_ERR_DEVICE);
  ck_assert_int_eq(dpt_backend_synchronize(be), DPT_ERR_DEVICE);
  float v;
  ck_assert_int_eq(dpt_buffer_download(y, 0, &v, sizeof v), DPT_ERR_DEVICE);
  dpt_backend_destroy(be); /* with live buffers */
}
END_TEST

START_TEST(test_alloc_too_large) {
  dpt_backend *be = vk();
  dpt_buffer *b = NULL;
  size_t bytes = (size_t)1 << 40;
  ck_assert_int_eq(dpt_buffer_alloc(be, bytes, &b), DPT_ERR_OUT_OF_MEMORY);
  ck_assert_ptr_null(b);
  ck_assert_msg(strstr(dpt_last_error(), "1099511627776") != NULL, "message lacks the size: %s",
                dpt_last_error());
  /* The backend still works. */
  b = tu_f32_fill(be, 10, 3.0f);
  double s = 0;
  TU_OK(dpt_sum(be, 10, b, 0, &s));
  ck_assert_double_eq(s, 30.0);
  dpt_backend_destroy(be);
}
END_TEST

/* ---- memory ---------------------------------------------------------------------------------- */

/* A buffer freed while recorded work still uses it is held until that work completes; an
 * allocation that needs its memory (a device-memory budget stands for a full device) finishes
 * the work and gets it, instead of failing. What does not fit at all still fails. */
START_TEST(test_alloc_reuses_held_memory) {
  dpt_backend *be = vk();
  dpt_vk_ctx *c = ctx_of(be);
  const size_t bytes = (size_t)c->dedicated_min * 2, n = bytes / sizeof(float);
  dpt_buffer *a = tu_f32_fill(be, n, 1.0f), *b = NULL, *d = NULL;
  c->test_budget = c->device_bytes + bytes / 2;
  TU_OK(dpt_scale(be, n, 2.0f, a, 0)); /* recorded, not run yet */
  dpt_buffer_free(a);
  ck_assert_uint_gt(c->ndeferred, 0);
  TU_OK(dpt_buffer_alloc(be, bytes, &b));
  ck_assert_uint_eq(c->ndeferred, 0);
  ck_assert_int_eq(dpt_buffer_alloc(be, bytes, &d), DPT_ERR_OUT_OF_MEMORY);
  ck_assert_ptr_null(d);
  ck_assert_msg(strstr(dpt_last_error(), "test budget"), "%s", dpt_last_error());
  dpt_buffer_free(b);
  dpt_backend_destroy(be);
}
END_TEST

static size_t count_blocks(dpt_vk_ctx *c, int dedicated) {
  size_t n = 0;
  for (dpt_vk_block *b = c->blocks; b; b = b->next)
    if (b->kind == DPT_VK_MEM_DEVICE && b->dedicated == dedicated) ++n;
  return n;
}

START_TEST(test_suballocation) {
  enum { N = 2000 };
  dpt_backend *be = vk();
  dpt_vk_ctx *c = ctx_of(be);
  static dpt_buffer *bufs[N];
  for (int i = 0; i < N; ++i) {
    size_t bytes = 4 + (size_t)(i * 37) % 4093; /* 4 .. 4096 bytes, odd sizes included */
    TU_OK(dpt_buffer_alloc(be, bytes, &bufs[i]));
    dpt_vk_alloc *al = bufs[i]->handle;
    ck_assert_uint_eq(al->offset % c->props.limits.minStorageBufferOffsetAlignment, 0);
    uint32_t tag = 0x9e3779b9u * (uint32_t)(i + 1);
    TU_OK(dpt_buffer_upload(bufs[i], 0, &tag, sizeof tag));
  }
  /* Thousands of small tensors share a few device allocations. */
  ck_assert_uint_le(count_blocks(c, 0), 2);
  ck_assert_uint_eq(count_blocks(c, 1), 0);
  for (int i = 0; i < N; i += 2)
    dpt_buffer_free(bufs[i]);
  for (int i = 0; i < N; i += 2)
    TU_OK(dpt_buffer_alloc(be, 64, &bufs[i]));
  for (int i = 1; i < N; i += 2) {
    uint32_t tag = 0;
    TU_OK(dpt_buffer_download(bufs[i], 0, &tag, sizeof tag));
    ck_assert_uint_eq(tag, 0x9e3779b9u * (uint32_t)(i + 1));
  }
  /* A large buffer gets its own allocation, released with it. */
  dpt_buffer *big = NULL;
  TU_OK(dpt_buffer_alloc(be, (size_t)40 << 20, &big));
  ck_assert_uint_eq(count_blocks(c, 1), 1);
  TU_OK(dpt_buffer_fill_f32(big, ((size_t)10 << 20) - 5, 5, 2.5f));
  double s = 0;
  TU_OK(dpt_sum(be, 5, big, ((size_t)10 << 20) - 5, &s));
  ck_assert_double_eq(s, 12.5);
  dpt_buffer_free(big);
  TU_OK(dpt_backend_synchronize(be));
  ck_assert_uint_eq(count_blocks(c, 1), 0);
  for (int i = 0; i < N; ++i)
    dpt_buffer_free(bufs[i]);
  TU_OK(dpt_backend_synchronize(be));
  ck_assert_uint_le(count_blocks(c, 0), 1); /* one empty block is kept for reuse */
  dpt_backend_destroy(be);
}
END_TEST

/* ---- batching and ordering ------------------------------------------------------------------- */

START_TEST(test_batching) {
  dpt_backend *be = vk();
  dpt_vk_ctx *c = ctx_of(be);
  dpt_buffer *x = tu_f32_fill(be, 4096, 1.0f);
  dpt_buffer *y = tu_f32_fill(be, 4096, 0.0f);
  TU_OK(dpt_backend_synchronize(be));
  uint64_t first = c->next_serial;
  for (int i = 0; i < 1000; ++i)
    TU_OK(dpt_axpy(be, 4096, 1.0f, x, 0, y, 0));
  float got[4096];
  tu_get(y, 0, got, 4096);
  for (int i = 0; i < 4096; ++i)
    ck_assert_float_eq(got[i], 1000.0f);
  /* 1000 dispatches went to the device in batches, not one submission each. */
  uint64_t batches = c->next_serial - first;
  ck_assert_msg(batches <= 1000 / DPT_VK_BATCH_DISPATCHES + 2, "%llu batches for 1000 ops",
                (unsigned long long)batches);
  dpt_backend_destroy(be);
}
END_TEST

/* An upload into a buffer that recorded work still reads must land after that work. */
static void check_upload_ordering(dpt_backend *be) {
  enum { N = 3000 };
  dpt_buffer *x = tu_f32_fill(be, N, 1.0f);
  dpt_buffer *y = tu_f32_fill(be, N, 0.0f);
  TU_OK(dpt_axpy(be, N, 1.0f, x, 0, y, 0)); /* y = 1, recorded, not yet run */
  static float two[N];
  for (int i = 0; i < N; ++i)
    two[i] = 2.0f;
  TU_OK(dpt_buffer_upload(x, 0, two, sizeof two));
  TU_OK(dpt_axpy(be, N, 1.0f, x, 0, y, 0)); /* y = 3 */
  float got[N];
  tu_get(y, 0, got, N);
  for (int i = 0; i < N; ++i)
    ck_assert_float_eq(got[i], 3.0f);
  /* A freed buffer's memory is not handed out while pending work still reads it. */
  dpt_buffer *a = tu_f32_fill(be, N, 1.0f);
  TU_OK(dpt_axpy(be, N, 1.0f, a, 0, y, 0)); /* y = 4 */
  dpt_buffer_free(a);
  dpt_buffer *b = NULL;
  TU_OK(dpt_buffer_alloc(be, N * sizeof(float), &b));
  static float five[N];
  for (int i = 0; i < N; ++i)
    five[i] = 5.0f;
  TU_OK(dpt_buffer_upload(b, 0, five, sizeof five));
  tu_get(y, 0, got, N);
  for (int i = 0; i < N; ++i)
    ck_assert_float_eq(got[i], 4.0f);
  /* Large transfers in pieces through the staging buffer. */
  size_t big = (size_t)9 << 20; /* floats: 36 MiB, more than the staging buffer */
  float *h = malloc(big * sizeof(float));
  ck_assert_ptr_nonnull(h);
  for (size_t i = 0; i < big; ++i)
    h[i] = (float)(i % 1000);
  dpt_buffer *z = tu_buf(be, NULL, big * sizeof(float));
  TU_OK(dpt_scale(be, 1, 1.0f, z, 0)); /* makes z busy, so the upload goes through staging */
  TU_OK(dpt_buffer_upload(z, 0, h, big * sizeof(float)));
  memset(h, 0, big * sizeof(float));
  TU_OK(dpt_buffer_download(z, 0, h, big * sizeof(float)));
  for (size_t i = 0; i < big; i += 4099)
    ck_assert_float_eq(h[i], (float)(i % 1000));
  ck_assert_float_eq(h[big - 1], (float)((big - 1) % 1000));
  free(h);
}

START_TEST(test_upload_ordering) {
  dpt_backend *be = vk();
  check_upload_ordering(be);
  dpt_backend_destroy(be);
}
END_TEST

/* The same through the staging paths a discrete GPU takes. */
START_TEST(test_upload_ordering_staged) {
  dpt_backend *be = vk_with("DPT_VULKAN_FORCE_STAGING", "1");
  ck_assert_int_eq(ctx_of(be)->direct, 0);
  check_upload_ordering(be);
  dpt_backend_destroy(be);
}
END_TEST

/* ---- dispatches split to fit maxStorageBufferRange --------------------------------------------
 */

static void expect_same(const char *what, dpt_buffer *a, dpt_buffer *b, size_t n, double tol) {
  float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
  ck_assert(x && y);
  tu_get(a, 0, x, n);
  tu_get(b, 0, y, n);
  for (size_t i = 0; i < n; ++i) {
    if (isnan(y[i])) {
      ck_assert_msg(isnan(x[i]), "%s[%zu]: want NaN, got %g", what, i, (double)x[i]);
      continue;
    }
    double scale = fabs(y[i]) > 1 ? fabs(y[i]) : 1;
    ck_assert_msg(fabs((double)x[i] - y[i]) <= tol * scale, "%s[%zu]: want %.9g, got %.9g", what, i,
                  (double)y[i], (double)x[i]);
  }
  free(x);
  free(y);
}

START_TEST(test_split_dispatches) {
  enum { N = 10007, COLS = 37 };
  dpt_backend *g = vk_with("DPT_VULKAN_TEST_MAX_RANGE", "4096");
  ck_assert_uint_eq(ctx_of(g)->props.limits.maxStorageBufferRange, 4096);
  dpt_backend *r = tu_cpu();
  static float hx[N], hy[N];
  static int32_t labels[N / COLS];
  tu_rng rng = {7};
  tu_fill(&rng, hx, N, -2, 2);
  tu_fill(&rng, hy, N, -1, 1);
  hx[17] = NAN;
  hx[9000] = INFINITY;
  for (int i = 0; i < N / COLS; ++i)
    labels[i] = i % (COLS + 1) - 1; /* some invalid */
  dpt_backend *be[2] = {g, r};
  dpt_buffer *x[2], *y[2], *h[2], *f[2], *l[2], *d[2];
  double sums[2][3];
  uint64_t nonfinite[2];
  double loss[2];
  int64_t correct[2];
  for (int k = 0; k < 2; ++k) {
    x[k] = tu_f32(be[k], hx, N);
    y[k] = tu_f32(be[k], hy, N);
    h[k] = tu_buf(be[k], NULL, (N + 1) * 2);
    f[k] = tu_f32_fill(be[k], N, 0.0f);
    l[k] = tu_i32(be[k], labels, N / COLS);
    d[k] = tu_f32_fill(be[k], N, 0.0f);
    TU_OK(dpt_axpy(be[k], N, 0.5f, x[k], 0, y[k], 0));
    TU_OK(dpt_scale(be[k], N - 3, -1.5f, y[k], 3));
    TU_OK(dpt_relu_fwd(be[k], N, y[k], 0, y[k], 0));
    TU_OK(dpt_bias_add(be[k], N / COLS, COLS, y[k], 0, x[k], 100));
    TU_OK(dpt_f32_to_f16(be[k], N, x[k], 0, h[k], 1)); /* odd half offset */
    TU_OK(dpt_f16_to_f32(be[k], N, h[k], 1, f[k], 0));
    dpt_sgd_params sp = {0.1f, 0.9f, 0.01f, 1};
    TU_OK(dpt_sgd_update(be[k], N, &sp, f[k], 0, y[k], 0, d[k], 0));
    TU_OK(dpt_sum(be[k], N, y[k], 0, &sums[k][0]));
    TU_OK(dpt_sumsq(be[k], N, y[k], 0, &sums[k][1]));
    TU_OK(dpt_sum(be[k], 1000, y[k], 5000, &sums[k][2])); /* finite part */
    TU_OK(dpt_count_nonfinite(be[k], N, x[k], 0, &nonfinite[k]));
    TU_OK(dpt_softmax_xent(be[k], N / COLS, COLS, y[k], 0, l[k], 0, 0.5f, d[k], 0, &loss[k],
                           &correct[k]));
  }
  expect_same("y", y[0], y[1], N, 1e-6);
  expect_same("f", f[0], f[1], N, 1e-6);
  expect_same("dlogits", d[0], d[1], N, 1e-5);
  static uint16_t h0[N + 1], h1[N + 1];
  TU_OK(dpt_buffer_download(h[0], 2, h0, N * 2));
  TU_OK(dpt_buffer_download(h[1], 2, h1, N * 2));
  ck_assert_int_eq(memcmp(h0, h1, N * 2), 0);
  for (int i = 0; i < 3; ++i)
    ck_assert_msg((isnan(sums[0][i]) && isnan(sums[1][i])) ||
                      fabs(sums[0][i] - sums[1][i]) <= 1e-4 * fabs(sums[1][i]) + 1e-3,
                  "sum %d: %.9g vs %.9g", i, sums[0][i], sums[1][i]);
  ck_assert_uint_eq(nonfinite[0], 2);
  ck_assert_uint_eq(nonfinite[1], 2);
  ck_assert(isnan(loss[0]) && isnan(loss[1])); /* invalid labels */
  ck_assert_int_eq(correct[0], correct[1]);
  /* An op whose single tensor exceeds the window says so. */
  dpt_conv_geom cg = {.n = 1,
                      .c = 4,
                      .h = 40,
                      .w = 40,
                      .kh = 3,
                      .kw = 3,
                      .stride_h = 1,
                      .stride_w = 1,
                      .pad_h = 1,
                      .pad_w = 1};
  dpt_buffer *img = tu_f32_fill(g, 4 * 40 * 40, 1.0f);
  dpt_buffer *col = tu_buf(g, NULL, 4 * 9 * 40 * 40 * sizeof(float));
  ck_assert_int_eq(dpt_im2col(g, &cg, img, 0, col, 0), DPT_ERR_UNSUPPORTED);
  ck_assert_msg(strstr(dpt_last_error(), "maxStorageBufferRange") != NULL, "%s", dpt_last_error());
  TU_OK(dpt_backend_synchronize(g));
  dpt_backend_destroy(g);
  dpt_backend_destroy(r);
}
END_TEST

/* The embedding ops over a table of 8 windows (windows shrunk to 4 KiB: 64 rows of 12 floats
 * each). Bags mixing ids of several chunks, empty slots, ids >= vocab: forward (sum, mean) and
 * backward into a nonzero dtable; embed_gather and embed_scatter_add with the same ids; all bit
 * for bit the CPU backend's and the one-window Vulkan path's (the same float additions in the
 * same order). */
START_TEST(test_embed_split) {
  enum { N = 37, BAG = 5, STRIDE = 7, VOCAB = 500, DIM = 12, OFF = 3 };
  dpt_backend *be[3] = {vk_with("DPT_VULKAN_TEST_MAX_RANGE", "4096"), vk(), tu_cpu()};
  ck_assert_uint_ge(VOCAB * DIM, 7 * dpt_vk_chunk_elems(ctx_of(be[0]), 4) + 1);
  ck_assert_uint_ge(dpt_vk_chunk_elems(ctx_of(be[1]), 4), VOCAB * DIM);
  static float table[OFF + VOCAB * DIM], dout[N * DIM], dt0[OFF + VOCAB * DIM];
  static int32_t ids[N * STRIDE];
  tu_rng rng = {5};
  tu_fill(&rng, table, OFF + VOCAB * DIM, -1, 1);
  tu_fill(&rng, dout, N * DIM, -1, 1);
  tu_fill(&rng, dt0, OFF + VOCAB * DIM, -0.5, 0.5);
  for (int i = 0; i < N; ++i)
    for (int s = 0; s < STRIDE; ++s) {
      int32_t v = (int32_t)((i * 131 + s * 97) % VOCAB); /* spread over the chunks */
      if (s == 1) v = VOCAB - 1 - i % 3;                 /* the last chunk */
      if (s == 2 && i % 4 == 0) v = -1;                  /* an empty slot */
      if (s == 3) v = i % 9 == 5 ? VOCAB : v % 64;       /* the first chunk, or out of range */
      if (i == 11) v = -1;                               /* a bag with no id */
      ids[i * STRIDE + s] = s < BAG ? v : 7777;          /* gap: not an id */
    }
  static float got[3][OFF + VOCAB * DIM];
  for (int mode = DPT_BAG_SUM; mode <= DPT_BAG_MEAN; ++mode) {
    for (int k = 0; k < 3; ++k) {
      dpt_buffer *t = tu_f32(be[k], table, OFF + VOCAB * DIM), *x = tu_i32(be[k], ids, N * STRIDE);
      dpt_buffer *o = tu_f32_fill(be[k], 1 + N * DIM, NAN);
      TU_OK(dpt_embed_bag(be[k], N, BAG, VOCAB, DIM, mode, t, OFF, x, 0, STRIDE, o, 1));
      tu_get(o, 1, got[k], N * DIM);
      dpt_buffer_free(t);
      dpt_buffer_free(x);
      dpt_buffer_free(o);
    }
    for (int i = 0; i < N; ++i) {
      int bad = 0, cnt = 0;
      for (int s = 0; s < BAG; ++s) {
        bad |= ids[i * STRIDE + s] >= VOCAB;
        cnt += ids[i * STRIDE + s] >= 0;
      }
      for (int d = 0; d < DIM; ++d) {
        float want = 0.0f; /* the slots in order, as documented */
        for (int s = 0; s < BAG; ++s)
          if (ids[i * STRIDE + s] >= 0 && ids[i * STRIDE + s] < VOCAB)
            want += table[OFF + ids[i * STRIDE + s] * DIM + d];
        if (mode == DPT_BAG_MEAN && cnt > 0) want *= 1.0f / (float)cnt;
        float g = got[0][i * DIM + d];
        if (bad) {
          ck_assert_msg(isnan(g), "mode %d out[%d,%d] = %g, want NaN", mode, i, d, (double)g);
        } else {
          ck_assert_msg(memcmp(&g, &want, 4) == 0, "mode %d out[%d,%d] = %.9g, want %.9g", mode, i,
                        d, (double)g, (double)want);
        }
        for (int k = 1; k < 3; ++k)
          ck_assert_msg(isnan(g) ? isnan(got[k][i * DIM + d])
                                 : memcmp(&g, &got[k][i * DIM + d], 4) == 0,
                        "mode %d out[%d,%d]: %.9g split, %.9g on backend %d", mode, i, d, (double)g,
                        (double)got[k][i * DIM + d], k);
      }
    }
    for (int k = 0; k < 3; ++k) {
      dpt_buffer *g = tu_f32(be[k], dout, N * DIM), *x = tu_i32(be[k], ids, N * STRIDE);
      dpt_buffer *t = tu_f32(be[k], dt0, OFF + VOCAB * DIM);
      TU_OK(dpt_embed_bag_bwd(be[k], N, BAG, VOCAB, DIM, mode, g, 0, x, 0, STRIDE, t, OFF));
      tu_get(t, 0, got[k], OFF + VOCAB * DIM);
      dpt_buffer_free(g);
      dpt_buffer_free(x);
      dpt_buffer_free(t);
    }
    size_t touched = 0;
    for (size_t j = 0; j < OFF + VOCAB * DIM; ++j) {
      touched += memcmp(&got[0][j], &dt0[j], 4) != 0;
      for (int k = 1; k < 3; ++k)
        ck_assert_msg(memcmp(&got[0][j], &got[k][j], 4) == 0,
                      "mode %d dtable[%zu]: %.9g split, %.9g on backend %d", mode, j,
                      (double)got[0][j], (double)got[k][j], k);
    }
    for (size_t j = 0; j < OFF; ++j) /* before the table: untouched */
      ck_assert(memcmp(&got[0][j], &dt0[j], 4) == 0);
    ck_assert_uint_gt(touched, 100 * DIM); /* rows of every chunk received gradients */
  }
  /* embed_gather and embed_scatter_add over the same table: the first samples' ids in a row,
   * repeated ids (scatter: added in order) and ids outside the table (gather: NaN rows) */
  enum { M = 12 * BAG }; /* M * DIM within one window */
  int32_t flat[M];
  for (int i = 0; i < M / BAG; ++i)
    for (int s = 0; s < BAG; ++s)
      flat[i * BAG + s] = ids[i * STRIDE + s] == -1 && i % 2 ? 7 : ids[i * STRIDE + s];
  static float dflat[M * DIM];
  tu_fill(&rng, dflat, M * DIM, -1, 1);
  for (int k = 0; k < 3; ++k) {
    dpt_buffer *t = tu_f32(be[k], table, OFF + VOCAB * DIM), *x = tu_i32(be[k], flat, M);
    dpt_buffer *o = tu_f32_fill(be[k], M * DIM, 5.0f);
    TU_OK(dpt_embed_gather(be[k], M, VOCAB, DIM, t, OFF, x, 0, o, 0));
    tu_get(o, 0, got[k], M * DIM);
    dpt_buffer_free(t);
    dpt_buffer_free(o);
    for (int j = 0; j < M; ++j)
      for (int d = 0; d < DIM; ++d) {
        const float g = got[k][j * DIM + d];
        if (flat[j] < 0 || flat[j] >= VOCAB) {
          ck_assert_msg(isnan(g), "gather backend %d out[%d,%d] = %g, want NaN", k, j, d,
                        (double)g);
        } else {
          ck_assert_msg(memcmp(&g, &table[OFF + flat[j] * DIM + d], 4) == 0,
                        "gather backend %d out[%d,%d] = %.9g, want %.9g", k, j, d, (double)g,
                        (double)table[OFF + flat[j] * DIM + d]);
        }
      }
    dpt_buffer *g = tu_f32(be[k], dflat, M * DIM);
    t = tu_f32(be[k], dt0, OFF + VOCAB * DIM);
    TU_OK(dpt_embed_scatter_add(be[k], M, VOCAB, DIM, g, 0, x, 0, t, OFF));
    tu_get(t, 0, got[k], OFF + VOCAB * DIM);
    dpt_buffer_free(g);
    dpt_buffer_free(x);
    dpt_buffer_free(t);
  }
  for (size_t j = 0; j < OFF + VOCAB * DIM; ++j)
    for (int k = 1; k < 3; ++k)
      ck_assert_msg(memcmp(&got[0][j], &got[k][j], 4) == 0,
                    "scatter dtable[%zu]: %.9g split, %.9g on backend %d", j, (double)got[0][j],
                    (double)got[k][j], k);
  for (int k = 0; k < 3; ++k)
    dpt_backend_destroy(be[k]);
}
END_TEST

/* ---- gemm kernels ---------------------------------------------------------------------------- */

/* Every transposition, leading dimensions and offsets that allow 8-, 4- and 1-wide loads, edge
 * tiles in every direction, beta == 0 over NaN, against the CPU backend. */
static void check_gemm_variants(dpt_backend *g) {
  dpt_backend *r = tu_cpu();
  const size_t m = 150, n = 70, k = 45;
  const size_t pads[3] = {0, 4, 3}; /* ld = 8-multiple + pad, see below */
  const size_t offs[3] = {8, 4, 1};
  tu_rng rng = {11};
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      for (int v = 0; v < 3; ++v) {
        size_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
        /* contiguous extents rounded to 8 so that v selects the vector width */
        size_t lda = (ac + 7) / 8 * 8 + pads[v], ldb = (bc + 7) / 8 * 8 + pads[v];
        size_t ldc = n + 5;
        size_t an = offs[v] + ar * lda, bn = offs[v] + br * ldb, cn = 2 + m * ldc;
        float *ha = malloc(an * 4), *hb = malloc(bn * 4), *hc = malloc(cn * 4);
        ck_assert(ha && hb && hc);
        tu_fill(&rng, ha, an, -1, 1);
        tu_fill(&rng, hb, bn, -1, 1);
        for (int beta_case = 0; beta_case < 2; ++beta_case) {
          float beta = beta_case ? 0.5f : 0.0f;
          for (size_t i = 0; i < cn; ++i)
            hc[i] = beta_case ? (float)(i % 7) : NAN;
          dpt_buffer *a[2], *b[2], *c[2];
          dpt_backend *be[2] = {g, r};
          for (int q = 0; q < 2; ++q) {
            a[q] = tu_f32(be[q], ha, an);
            b[q] = tu_f32(be[q], hb, bn);
            c[q] = tu_f32(be[q], hc, cn);
            TU_OK(dpt_gemm(be[q], ta, tb, m, n, k, 1.25f, a[q], offs[v], lda, b[q], offs[v], ldb,
                           beta, c[q], 2, ldc));
          }
          float *got = malloc(cn * 4), *want = malloc(cn * 4);
          ck_assert(got && want);
          tu_get(c[0], 0, got, cn);
          tu_get(c[1], 0, want, cn);
          for (size_t i = 0; i < cn; ++i) {
            size_t rel = i >= 2 ? i - 2 : 0, col = rel % ldc;
            int inside = i >= 2 && col < n;
            if (!inside) { /* gaps and guards untouched */
              ck_assert_msg(memcmp(&got[i], &hc[i], 4) == 0, "gemm ta=%d tb=%d v=%d: [%zu] written",
                            ta, tb, v, i);
              continue;
            }
            ck_assert_msg(fabsf(got[i] - want[i]) <= 1e-5f * (1.0f + fabsf(want[i])),
                          "gemm ta=%d tb=%d v=%d beta=%g: C[%zu,%zu] = %.8g, want %.8g", ta, tb, v,
                          (double)beta, rel / ldc, col, (double)got[i], (double)want[i]);
          }
          free(got);
          free(want);
          for (int q = 0; q < 2; ++q) {
            dpt_buffer_free(a[q]);
            dpt_buffer_free(b[q]);
            dpt_buffer_free(c[q]);
          }
        }
        free(ha);
        free(hb);
        free(hc);
      }
    }
  }
  dpt_backend_destroy(r);
}

START_TEST(test_gemm_variants) {
  dpt_backend *be = vk();
  check_gemm_variants(be);
  dpt_backend_destroy(be);
}
END_TEST

/* Operands larger than one shader binding (maxStorageBufferRange, shrunk to 4 KiB here) run
 * as smaller gemms split along M, N or K: same checks, every transposition. */
START_TEST(test_gemm_split) {
  dpt_backend *be = vk_with("DPT_VULKAN_TEST_MAX_RANGE", "4096");
  ck_assert_uint_eq(ctx_of(be)->props.limits.maxStorageBufferRange, 4096);
  check_gemm_variants(be);
  TU_OK(dpt_backend_synchronize(be));
  dpt_backend_destroy(be);
}
END_TEST

/* The portable kernel (the one GPUs run), on a CPU driver too. */
START_TEST(test_gemm_variants_portable) {
  dpt_backend *be = vk_with("DPT_VULKAN_PORTABLE", "1");
  ck_assert_int_eq(ctx_of(be)->gemm_cpu, 0);
  check_gemm_variants(be);
  dpt_backend_destroy(be);
}
END_TEST

/* ---- environment knobs ------------------------------------------------------------------------
 * Each accepts what vulkan_debug.h documents; anything else fails the creation naming the
 * variable and the value, instead of silently meaning the default. */

START_TEST(test_env_values) {
  static const struct {
    const char *var, *value;
    int ok;
  } cases[] = {
      {"DPT_VULKAN_VALIDATION", "yes", 0},       {"DPT_VULKAN_VALIDATION", "2", 0},
      {"DPT_VULKAN_VALIDATION", "0", 1},         {"DPT_VULKAN_FORCE_STAGING", "true", 0},
      {"DPT_VULKAN_FORCE_STAGING", " 1", 0},     {"DPT_VULKAN_FORCE_STAGING", "0", 1},
      {"DPT_VULKAN_FORCE_STAGING", "", 1},       {"DPT_VULKAN_PORTABLE", "on", 0},
      {"DPT_VULKAN_PORTABLE", "10", 0},          {"DPT_VULKAN_PORTABLE", "0", 1},
      {"DPT_VULKAN_TEST_MAX_RANGE", "4k", 0},    {"DPT_VULKAN_TEST_MAX_RANGE", "1023", 0},
      {"DPT_VULKAN_TEST_MAX_RANGE", "-4096", 0}, {"DPT_VULKAN_TEST_MAX_RANGE", "4294967296", 0},
      {"DPT_VULKAN_TEST_MAX_RANGE", "1024", 1},
  };
  /* The ctest entry sets DPT_VULKAN_VALIDATION: put it back after the cases that change it. */
  const char *saved = getenv("DPT_VULKAN_VALIDATION");
  char keep[16] = "";
  if (saved) snprintf(keep, sizeof keep, "%s", saved);
  for (size_t i = 0; i < sizeof cases / sizeof *cases; ++i) {
    setenv(cases[i].var, cases[i].value, 1);
    dpt_backend *be = NULL;
    dpt_status st = dpt_backend_create(DPT_BACKEND_VULKAN, 0, &be);
    if (saved)
      setenv("DPT_VULKAN_VALIDATION", keep, 1);
    else
      unsetenv("DPT_VULKAN_VALIDATION");
    if (strcmp(cases[i].var, "DPT_VULKAN_VALIDATION") != 0) unsetenv(cases[i].var);
    if (cases[i].ok) {
      ck_assert_msg(st == DPT_OK, "%s='%s': %s: %s", cases[i].var, cases[i].value,
                    dpt_status_str(st), dpt_last_error());
      dpt_backend_destroy(be);
      continue;
    }
    ck_assert_msg(st == DPT_ERR_INVALID_ARG && be == NULL, "%s='%s' gave %s", cases[i].var,
                  cases[i].value, dpt_status_str(st));
    ck_assert_msg(
        strstr(dpt_last_error(), cases[i].var) && strstr(dpt_last_error(), cases[i].value),
        "message '%s' names neither %s nor '%s'", dpt_last_error(), cases[i].var, cases[i].value);
  }
}
END_TEST

/* ---- validation ------------------------------------------------------------------------------ */

/* With DPT_VULKAN_VALIDATION=1: a real validation error (a descriptor offset that breaks
 * minStorageBufferOffsetAlignment) is counted and returned by the next call, once. */
START_TEST(test_validation_reports) {
  if (!dpt_vulkan_validation_requested()) return; /* the ctest entry sets it */
  dpt_backend *be = vk();
  dpt_vk_ctx *c = ctx_of(be);
  uint64_t before = dpt_vulkan_validation_errors_total();
  ck_assert_uint_eq(dpt_vulkan_validation_errors(be), 0);
  dpt_buffer *x = tu_f32_fill(be, 64, 1.0f);
  TU_OK(dpt_backend_synchronize(be));
  dpt_vk_win w;
  TU_OK(dpt_vk_window(c, x->handle, 0, 64, 4, &w));
  w.offset += 4; /* misaligned on purpose */
  w.range -= 4;
  uint32_t push[3] = {1, 0, 0x3f800000u};
  fprintf(stderr, "test_validation_reports: one validation error expected below\n");
  TU_OK(dpt_vk_dispatch(c, DPT_VK_PIPE_SCALE, &w, 1, push, sizeof push, 1));
  ck_assert_uint_ge(dpt_vulkan_validation_errors(be), 1);
  ck_assert_uint_ge(dpt_vulkan_validation_errors_total(), before + 1);
  ck_assert_int_eq(dpt_backend_synchronize(be), DPT_ERR_DEVICE);
  ck_assert_msg(strstr(dpt_last_error(), "Vulkan validation error") != NULL, "%s",
                dpt_last_error());
  TU_OK(dpt_backend_synchronize(be)); /* reported once */
  dpt_backend_destroy(be);
}
END_TEST

/* A whole backend lifetime over every op path raises no validation error (the conformance
 * suite covers the ops; this covers the memory paths and destruction). */
START_TEST(test_validation_clean) {
  if (!dpt_vulkan_validation_requested()) return;
  uint64_t before = dpt_vulkan_validation_errors_total();
  dpt_backend *be = vk_with("DPT_VULKAN_FORCE_STAGING", "1");
  check_upload_ordering(be);
  dpt_backend_destroy(be);
  be = vk();
  check_upload_ordering(be);
  dpt_backend_destroy(be);
  ck_assert_uint_eq(dpt_vulkan_validation_errors_total(), before);
}
END_TEST

/* ---- missing driver / layer ------------------------------------------------------------------ */

static int run_nodriver(void) {
  int count = -1;
  dpt_status st = dpt_device_count(DPT_BACKEND_VULKAN, &count);
  if (st != DPT_OK || count != 0 || strcmp(dpt_last_error(), NO_DRIVER_TEXT) != 0) {
    fprintf(stderr, "device_count: %s, %d devices, '%s'\n", dpt_status_name(st), count,
            dpt_last_error());
    return 1;
  }
  dpt_backend *be = NULL;
  st = dpt_backend_create(DPT_BACKEND_VULKAN, 0, &be);
  if (st != DPT_ERR_UNSUPPORTED || be != NULL || !strstr(dpt_last_error(), NO_DRIVER_TEXT)) {
    fprintf(stderr, "create: %s, '%s'\n", dpt_status_name(st), dpt_last_error());
    return 1;
  }
  printf("no driver: %s\n", dpt_last_error());
  return 0;
}

static int run_nolayer(void) {
  dpt_backend *be = NULL;
  dpt_status st = dpt_backend_create(DPT_BACKEND_VULKAN, 0, &be);
  if (st != DPT_ERR_UNSUPPORTED || be != NULL ||
      !strstr(dpt_last_error(), "VK_LAYER_KHRONOS_validation")) {
    fprintf(stderr, "create: %s, '%s'\n", dpt_status_name(st), dpt_last_error());
    return 1;
  }
  printf("no layer: %s\n", dpt_last_error());
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "nodriver") == 0) return run_nodriver();
  if (argc == 2 && strcmp(argv[1], "nolayer") == 0) return run_nolayer();
  int count = 0;
  if (dpt_device_count(DPT_BACKEND_VULKAN, &count) != DPT_OK || count == 0) {
    printf("SKIP: no Vulkan device: %s\n", dpt_last_error());
    return 77;
  }
  Suite *s = suite_create("vulkan");
  TCase *tc = tcase_create("vulkan");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_device_info);
  tcase_add_test(tc, test_env_values);
  tcase_add_test(tc, test_error_translation);
  tcase_add_test(tc, test_device_lost);
  tcase_add_test(tc, test_alloc_too_large);
  tcase_add_test(tc, test_alloc_reuses_held_memory);
  tcase_add_test(tc, test_suballocation);
  tcase_add_test(tc, test_batching);
  tcase_add_test(tc, test_upload_ordering);
  tcase_add_test(tc, test_upload_ordering_staged);
  tcase_add_test(tc, test_split_dispatches);
  tcase_add_test(tc, test_embed_split);
  tcase_add_test(tc, test_gemm_variants);
  tcase_add_test(tc, test_gemm_split);
  tcase_add_test(tc, test_gemm_variants_portable);
  tcase_add_test(tc, test_validation_reports);
  tcase_add_test(tc, test_validation_clean);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
