/* Internal: setting the calling thread's error message. */
#ifndef DPTRAIN_CORE_ERROR_H
#define DPTRAIN_CORE_ERROR_H

#include <stddef.h>

#include "dptrain/status.h"

#if defined(__GNUC__)
#define DPT_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define DPT_PRINTF(fmt, args)
#endif

/* Records a printf-formatted message as the calling thread's last error and returns `status`,
 * so failures read `return dpt_set_error(DPT_ERR_INVALID_ARG, "gemm: lda %zu < k %zu", ...);`. */
dpt_status dpt_set_error(dpt_status status, const char *fmt, ...) DPT_PRINTF(2, 3);

/* Prepends "context: " to the current message (keeps the status), for adding the call site
 * to an error reported deeper down. Returns `status`. */
dpt_status dpt_error_context(dpt_status status, const char *fmt, ...) DPT_PRINTF(2, 3);

/* a * b into *out; returns 0 on overflow. */
static inline int dpt_mul_ok(size_t a, size_t b, size_t *out) {
  if (a != 0 && b > (size_t)-1 / a) return 0;
  *out = a * b;
  return 1;
}

static inline int dpt_add_ok(size_t a, size_t b, size_t *out) {
  if (b > (size_t)-1 - a) return 0;
  *out = a + b;
  return 1;
}

#endif
