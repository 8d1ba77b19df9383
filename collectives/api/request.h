/* Internal: what the rest of collectives/ asks of the nonblocking collectives (request.c):
 * whether a call may run while requests are pending, whether the calling thread is running a
 * request and the fence it took, the lock of serialized transports, starting a request and
 * ending the progress thread. */
#ifndef DPTRAIN_COLLECTIVES_API_REQUEST_H
#define DPTRAIN_COLLECTIVES_API_REQUEST_H

#include <stdatomic.h>
#include <stddef.h>

#include "collectives/common/comm_struct.h"
#include "collectives/transports/transport.h"
#include "dptrain/comm.h"

/* Nonzero while a communicator of a serialized transport (MPI) has requests pending. */
extern atomic_int dpt_serial_pending;

/* DPT_OK unless a call named fn may not run now because of pending requests: on this
 * communicator (blocking collectives, option changes), or on another communicator of a
 * serialized transport (MPI: no other thread may call MPI meanwhile); the message names
 * them. The progress thread itself passes. `c` NULL: only the serialized check (creation). */
dpt_status dpt_comm_check_idle_slow(const dpt_comm *c, int serialized, const char *fn);
static inline dpt_status dpt_comm_check_idle(const dpt_comm *c, const char *fn) {
  const int serialized = c->tp->serialized;
  if (atomic_load_explicit(&c->pending, memory_order_relaxed) == 0 &&
      (!serialized || atomic_load_explicit(&dpt_serial_pending, memory_order_relaxed) == 0))
    return DPT_OK;
  return dpt_comm_check_idle_slow(c, serialized, fn);
}
/* dpt_comm_destroy's first step: waits until every queued request has run, joins the
 * progress thread and frees the requests nobody waited for. */
void dpt_progress_destroy(dpt_comm *c);
/* A blocking entry point that a request runs on the progress thread (dpt_allreduce_buffer,
 * dpt_reduce_scatter_buffer, dpt_allgather_shards_buffer). */
typedef dpt_status (*dpt_request_fn)(dpt_comm *c, dpt_buffer *buf, size_t offset, size_t count,
                                     dpt_comm_dtype dtype);
/* Queues a request that runs `run` with these arguments on c's progress thread (started on
 * the first call); fn is the start call's name in messages. The arguments are checked by
 * `run`, on the progress thread. */
dpt_status dpt_request_start(dpt_comm *c, const char *fn, dpt_request_fn run, dpt_buffer *buf,
                             size_t offset, size_t count, dpt_comm_dtype dtype, dpt_request **out);
/* Held around calls into a serialized transport that may overlap a progress thread's
 * (dpt_comm_destroy of another communicator); the progress thread holds it per request. */
void dpt_serial_lock(void);
void dpt_serial_unlock(void);

#endif
