/* Small helpers shared by the unit tests: buffers from host
 * arrays and back, status assertions, a deterministic random source. Header-only so that each
 * test executable stays one source file. */
#ifndef DPT_TESTS_TEST_UTIL_H
#define DPT_TESTS_TEST_UTIL_H

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dptrain/backend.h"

/* Asserts that a dptrain call returned DPT_OK, printing the status and the message. */
/* Asserts the status and that the message holds each of the (up to three) needles. */
#define EXPECT_FAIL(call, want, n1, n2, n3)                                                        \
  do {                                                                                             \
    dpt_status st_ = (call);                                                                       \
    ck_assert_msg(st_ == (want), "%s returned %s, want %s (%s)", #call, dpt_status_name(st_),      \
                  dpt_status_name(want), dpt_last_error());                                        \
    const char *needles_[3] = {(n1), (n2), (n3)};                                                  \
    for (int k_ = 0; k_ < 3; k_++)                                                                 \
      ck_assert_msg(!needles_[k_] || strstr(dpt_last_error(), needles_[k_]),                       \
                    "message '%s' lacks '%s'", dpt_last_error(), needles_[k_]);                    \
  } while (0)

#define TU_OK(call)                                                                                \
  do {                                                                                             \
    dpt_status tu_st_ = (call);                                                                    \
    ck_assert_msg(tu_st_ == DPT_OK, "%s returned %s: %s", #call, dpt_status_str(tu_st_),           \
                  dpt_last_error());                                                               \
  } while (0)

/* A CPU backend (device 0). */
static inline dpt_backend *tu_cpu(void) {
  dpt_backend *be = NULL;
  TU_OK(dpt_backend_create(DPT_BACKEND_CPU, 0, &be));
  ck_assert_ptr_nonnull(be);
  return be;
}

/* A buffer holding `bytes` bytes copied from host `data` (NULL: left undefined). */
static inline dpt_buffer *tu_buf(dpt_backend *be, const void *data, size_t bytes) {
  dpt_buffer *b = NULL;
  TU_OK(dpt_buffer_alloc(be, bytes, &b));
  ck_assert_ptr_nonnull(b);
  if (data) TU_OK(dpt_buffer_upload(b, 0, data, bytes));
  return b;
}

static inline dpt_buffer *tu_f32(dpt_backend *be, const float *v, size_t n) {
  return tu_buf(be, v, n * sizeof(float));
}

static inline dpt_buffer *tu_i32(dpt_backend *be, const int32_t *v, size_t n) {
  return tu_buf(be, v, n * sizeof(int32_t));
}

/* A buffer of n floats, all `value`. */
static inline dpt_buffer *tu_f32_fill(dpt_backend *be, size_t n, float value) {
  dpt_buffer *b = tu_buf(be, NULL, n * sizeof(float));
  TU_OK(dpt_buffer_fill_f32(b, 0, n, value));
  return b;
}

/* Downloads n floats starting at element offset `off`. */
static inline void tu_get(const dpt_buffer *b, size_t off, float *out, size_t n) {
  TU_OK(dpt_buffer_download(b, off * sizeof(float), out, n * sizeof(float)));
}

/* Asserts |got[i] - want[i]| <= tol * max(1, |want[i]|) for every i; NaN must match NaN. */
static inline void tu_expect_f32(const char *what, const float *got, const double *want, size_t n,
                                 double tol) {
  for (size_t i = 0; i < n; i++) {
    if (isnan(want[i])) {
      ck_assert_msg(isnan(got[i]), "%s[%zu]: want NaN, got %.9g", what, i, (double)got[i]);
      continue;
    }
    double scale = fabs(want[i]) > 1.0 ? fabs(want[i]) : 1.0;
    ck_assert_msg(fabs((double)got[i] - want[i]) <= tol * scale,
                  "%s[%zu]: want %.9g, got %.9g (tol %.3g)", what, i, want[i], (double)got[i], tol);
  }
}

/* Downloads n floats of buffer b at element offset off and compares them with want. */
static inline void tu_expect_buf(const char *what, const dpt_buffer *b, size_t off,
                                 const double *want, size_t n, double tol) {
  float got[4096];
  ck_assert_msg(n <= sizeof got / sizeof got[0], "tu_expect_buf: %zu elements is too many", n);
  tu_get(b, off, got, n);
  tu_expect_f32(what, got, want, n, tol);
}

/* Deterministic uniform values in [lo, hi). */
typedef struct tu_rng {
  uint64_t s;
} tu_rng;

static inline double tu_unit(tu_rng *r) {
  r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(r->s >> 11) * 0x1.0p-53;
}

static inline void tu_fill(tu_rng *r, float *v, size_t n, double lo, double hi) {
  for (size_t i = 0; i < n; i++)
    v[i] = (float)(lo + (hi - lo) * tu_unit(r));
}

/* Whether a backend is compiled in and has a device here. */
static inline int tu_device_present(dpt_backend_kind kind) {
  int count = 0;
  return dpt_backend_compiled(kind) && dpt_device_count(kind, &count) == DPT_OK && count > 0;
}

/* Runs the suite (fork mode as Check's environment says) and returns the process exit status:
 * 0 when every test passed, 1 otherwise. */
static inline int tu_run(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}

#endif
