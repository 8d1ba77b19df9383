/* Internal: setting the calling thread's error message, and DPT_TRY for passing a failure up. */
#ifndef DPTRAIN_BASE_ERROR_H
#define DPTRAIN_BASE_ERROR_H

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

/* Evaluates a dpt_status expression and returns its status from the enclosing function when it
 * is not DPT_OK (the message is already set by whoever failed). */
#define DPT_TRY(expr)                                                                              \
  do {                                                                                             \
    dpt_status try_st_ = (expr);                                                                   \
    if (try_st_ != DPT_OK) return try_st_;                                                         \
  } while (0)

#endif
