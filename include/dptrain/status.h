/* dptrain: status codes and the per-thread error message.
 *
 * Every fallible call returns a dpt_status. DPT_OK is 0; every failure is negative.
 * dpt_status_str() names a status; dpt_last_error() returns the detailed message of the
 * calling thread's most recent failure (the OpenCL build log, the byte offset of a corrupt
 * field, the argument that was rejected). The library never exits or aborts on a runtime
 * failure, except dpt_comm_abort and a blocking MPI call past its deadline (comm.h).
 */
#ifndef DPTRAIN_STATUS_H
#define DPTRAIN_STATUS_H

#include "dptrain/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The one list of status codes: X(ENUM_SUFFIX, value, "short name"). */
#define DPT_STATUS_MAP(X)                                                                          \
  X(OK, 0, "ok")                                                                                   \
  X(ERR_INVALID_ARG, -1, "invalid argument")                                                       \
  X(ERR_OUT_OF_MEMORY, -2, "out of memory")                                                        \
  X(ERR_DEVICE, -3, "device error")                                                                \
  X(ERR_KERNEL_BUILD, -4, "kernel build failed")                                                   \
  X(ERR_UNSUPPORTED, -5, "unsupported")                                                            \
  X(ERR_COMM, -6, "communication error")                                                           \
  X(ERR_MISMATCH, -7, "mismatch across ranks")                                                     \
  X(ERR_TIMEOUT, -8, "timeout")                                                                    \
  X(ERR_IO, -9, "I/O error")                                                                       \
  X(ERR_BAD_FORMAT, -10, "bad file format")                                                        \
  X(ERR_NONFINITE, -11, "non-finite values")                                                       \
  X(ERR_PEER, -12, "another replica failed")                                                       \
  X(ERR_INTERRUPTED, -13, "stopped on request")

typedef enum dpt_status {
#define DPT_STATUS_ENUM_(name, value, text) DPT_##name = value,
  DPT_STATUS_MAP(DPT_STATUS_ENUM_)
#undef DPT_STATUS_ENUM_
} dpt_status;

/* Short, static name of a status ("out of memory"); "unknown status" for values not in the
 * list. Never NULL. */
DPT_API const char *dpt_status_str(dpt_status status);

/* Symbolic name of a status ("DPT_ERR_OUT_OF_MEMORY"); "DPT_UNKNOWN" for others. */
DPT_API const char *dpt_status_name(dpt_status status);

/* The calling thread's detailed message for its most recent failure, "" if none. The pointer
 * stays valid until the next dptrain call on this thread. Successful calls do not clear it. */
DPT_API const char *dpt_last_error(void);

/* Clears the calling thread's message. */
DPT_API void dpt_clear_error(void);

#ifdef __cplusplus
}
#endif

#endif
