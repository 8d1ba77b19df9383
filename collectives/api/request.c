/* Nonblocking collectives: a FIFO of requests per communicator and the progress thread that
 * runs them.
 *
 *   caller's thread                     progress thread (one per communicator, lazily)
 *   dpt_*_start -> queue (tail) ------> pop (head) -> dpt_allreduce_buffer (the blocking
 *   (comm.c: dpt_request_start)          entry point, unchanged, as the start call named it)
 *                                        -> status, message, times
 *   dpt_request_wait <----------------- done + broadcast
 *
 * Requests run one after another in the order they were started, each exactly as its blocking
 * form, so the same sums come out bit for bit and the ranks stay in step (every rank starts the
 * same collectives in the same order). Rules, checked where cheap:
 *   - no blocking collective (nor option change) on a communicator with requests pending
 *     (started and not yet waited for): it would race the progress thread for the
 *     communicator's state and its sequence numbers;
 *   - serialized transports (MPI, initialized MPI_THREAD_SERIALIZED): at most one such
 *     communicator has requests pending, and while it does no other of its calls (blocking
 *     collectives, starts, creation) runs; its destruction waits for the request in progress
 *     (dpt_serial_lock), so two threads never call MPI at once;
 *   - after a request fails, every later request of the communicator fails with its status
 *     without communicating: the ranks may have queued different numbers of requests when the
 *     failure happened, so only "all of them" is the same set on every rank.
 * The progress thread maps a buffer for zero-copy host access only on the CPU backend (plain
 * host memory); on OpenCL and Vulkan a mapped buffer must not be used by kernels, which the
 * caller's thread may launch meanwhile, so those are staged. A request takes a fence of the
 * buffer's backend when it starts (backends/backend_impl.h): its transfers then wait for the
 * work the caller submitted before the start, not for the work submitted since (the rest of a
 * backward pass, which leaves the range alone).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/api/request.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/size.h"
#include "backends/backend_impl.h"
#include "collectives/common/comm_struct.h"
#include "collectives/transports/transport.h"
#include "collectives/common/comm_util.h"
#include "collectives/common/running.h"

struct dpt_request {
  dpt_comm *comm;
  const char *name;   /* the start call, in messages */
  dpt_request_fn run; /* the blocking entry point it runs */
  dpt_buffer *buf;
  size_t offset, count;
  dpt_comm_dtype dtype;
  dpt_fence *fence;           /* the buffer's backend's work when the request started, or NULL */
  uint64_t id;                /* 1, 2, ... per communicator: the name in messages */
  struct dpt_request *next;   /* the queue (under the progress lock) */
  struct dpt_request *o_prev; /* the list of requests not yet waited for (caller's thread) */
  struct dpt_request *o_next;
  /* Under the progress lock: */
  int state; /* 0 queued, 1 running, 2 finished */
  dpt_status st;
  char msg[1024];
  dpt_request_info info;
};

typedef struct dpt_progress {
  pthread_mutex_t lock;
  pthread_cond_t work; /* the queue got a request, or stop */
  pthread_cond_t done; /* a request finished */
  pthread_t thread;
  int stop;
  dpt_request *head, *tail; /* queued, not started */
  dpt_request *out;         /* started and not waited for (caller's thread only) */
  uint64_t next_id;
  /* The first failure: every request after it fails with this status (under lock). */
  dpt_status failed;
  uint64_t failed_id;
  char failed_msg[1024];
} dpt_progress;

atomic_int dpt_serial_pending;
static const dpt_comm *g_serial_owner; /* the serialized comm with requests pending (caller's
                                          threads; guarded by g_owner_lock) */
static pthread_mutex_t g_owner_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_serial_lock = PTHREAD_MUTEX_INITIALIZER;

void dpt_serial_lock(void) {
  pthread_mutex_lock(&g_serial_lock);
}

void dpt_serial_unlock(void) {
  pthread_mutex_unlock(&g_serial_lock);
}

dpt_status dpt_comm_check_idle_slow(const dpt_comm *c, int serialized, const char *fn) {
  if (dpt_request_running(c)) return DPT_OK; /* the progress thread running a request */
  const int n = c ? atomic_load_explicit(&c->pending, memory_order_relaxed) : 0;
  if (n > 0) {
    /* Name the pending requests (this list is the caller's thread's own). */
    char list[512] = "";
    size_t len = 0;
    dpt_progress *p = c->progress;
    pthread_mutex_lock(&p->lock);
    for (const dpt_request *r = p->out; r && len < sizeof list - 64; r = r->o_next) {
      static const char *const states[] = {"queued", "running", "finished"};
      int w = snprintf(list + len, sizeof list - len, "%s#%llu %s (%s)", len ? ", " : "",
                       (unsigned long long)r->id, r->name, states[r->state]);
      if (w > 0) len += (size_t)w;
    }
    pthread_mutex_unlock(&p->lock);
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: %d nonblocking request%s pending on this communicator: %s; wait "
                         "for %s first (dpt_request_wait)",
                         fn, n, n == 1 ? " is" : "s are", list, n == 1 ? "it" : "them");
  }
  if (!serialized) return DPT_OK;
  pthread_mutex_lock(&g_owner_lock);
  const dpt_comm *owner = g_serial_owner;
  const int other = owner && owner != c ? atomic_load(&owner->pending) : 0;
  pthread_mutex_unlock(&g_owner_lock);
  if (other > 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: %d nonblocking request%s pending on another MPI communicator "
                         "(rank %d of %d): MPI is called by one thread at a time "
                         "(MPI_THREAD_SERIALIZED), so wait for %s first (dpt_request_wait)",
                         fn, other, other == 1 ? " is" : "s are", owner->rank, owner->size,
                         other == 1 ? "it" : "them");
  return DPT_OK;
}

/* Runs one request on the progress thread: the blocking entry point, or the failure of a
 * request before it. */
static dpt_status run_request(dpt_comm *c, dpt_progress *p, const dpt_request *r) {
  pthread_mutex_lock(&p->lock);
  const dpt_status failed = p->failed;
  char msg[sizeof p->failed_msg];
  const uint64_t failed_id = p->failed_id;
  snprintf(msg, sizeof msg, "%s", p->failed_msg);
  pthread_mutex_unlock(&p->lock);
  if (failed != DPT_OK)
    return dpt_set_error(failed, "%s #%llu: not run, request #%llu before it failed: %s", r->name,
                         (unsigned long long)r->id, (unsigned long long)failed_id, msg);
  if (c->tp->serialized) dpt_serial_lock();
  dpt_status st = r->run(c, r->buf, r->offset, r->count, r->dtype);
  if (c->tp->serialized) dpt_serial_unlock();
  if (st != DPT_OK) st = dpt_error_context(st, "%s #%llu", r->name, (unsigned long long)r->id);
  return st;
}

static void *progress_main(void *arg) {
  dpt_comm *c = arg;
  dpt_progress *p = c->progress;
  dpt_running_set_thread(c);
  pthread_mutex_lock(&p->lock);
  for (;;) {
    while (!p->head && !p->stop)
      pthread_cond_wait(&p->work, &p->lock);
    dpt_request *r = p->head;
    if (!r) break; /* stop, and the queue is empty */
    p->head = r->next;
    if (!p->head) p->tail = NULL;
    r->state = 1;
    pthread_mutex_unlock(&p->lock);

    const double started = dpt_now();
    /* The device work before the start first (a failure shows again in the collective's own
     * transfers, which tell the other ranks). */
    (void)dpt_fence_wait(r->fence);
    const double ready = dpt_now();
    dpt_running_set_fence(r->fence);
    const dpt_status st = run_request(c, p, r);
    dpt_running_set_fence(NULL);
    dpt_fence_free(r->fence);
    r->fence = NULL;
    const double finished = dpt_now();

    pthread_mutex_lock(&p->lock);
    r->info.started = started;
    r->info.finished = finished;
    r->info.ready = ready;
    r->st = st;
    if (st != DPT_OK) {
      snprintf(r->msg, sizeof r->msg, "%s", dpt_last_error());
      if (p->failed == DPT_OK) {
        p->failed = st;
        p->failed_id = r->id;
        snprintf(p->failed_msg, sizeof p->failed_msg, "%s", r->msg);
      }
    }
    r->state = 2;
    pthread_cond_broadcast(&p->done);
  }
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

/* Creates the queue and starts the progress thread (the first start call). */
static dpt_status progress_start(dpt_comm *c, const char *fn) {
  if (c->tp->async_ok) {
    dpt_status st = c->tp->async_ok(c);
    if (st != DPT_OK) return dpt_error_context(st, "%s", fn);
  }
  dpt_progress *p = calloc(1, sizeof *p);
  if (!p) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: cannot allocate the queue", fn);
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->work, NULL);
  pthread_cond_init(&p->done, NULL);
  p->failed = DPT_OK;
  c->progress = p;
  int rc = pthread_create(&p->thread, NULL, progress_main, c);
  if (rc != 0) {
    c->progress = NULL;
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->lock);
    free(p);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: cannot start the progress thread (%s)", fn,
                         strerror(rc));
  }
  return DPT_OK;
}

/* Whether a request not yet waited for works on bytes of [off, off + bytes) of buf: a fence
 * would read the range before that request's results are written back, so the new request
 * transfers in order behind it instead (caller's thread: p->out is its own list). */
static int overlaps_pending(const dpt_progress *p, const dpt_buffer *buf, size_t off,
                            size_t bytes) {
  for (const dpt_request *q = p->out; q; q = q->o_next) {
    const size_t esize = dpt_dtype_size(q->dtype);
    if (q->buf != buf || !esize) continue;
    const size_t lo = q->offset * esize, hi = lo + q->count * esize; /* checked at its start */
    if (lo < off + bytes && off < hi) return 1;
  }
  return 0;
}

dpt_status dpt_request_start(dpt_comm *c, const char *fn, dpt_request_fn run, dpt_buffer *buf,
                             size_t offset, size_t count, dpt_comm_dtype dtype, dpt_request **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: out is NULL", fn);
  *out = NULL;
  if (!c) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: comm is NULL", fn);
  if (dpt_running_on_progress_thread()) /* a request cannot start requests */
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: called on a progress thread", fn);
  /* Only the serialized rule: requests may pile up on this communicator. The arguments are
   * checked by the progress thread, which announces a bad one to the other ranks as the
   * blocking call does. */
  if (c->tp->serialized && atomic_load_explicit(&c->pending, memory_order_relaxed) == 0)
    DPT_TRY(dpt_comm_check_idle_slow(NULL, 1, fn));
  if (!c->progress) DPT_TRY(progress_start(c, fn));
  dpt_request *r = calloc(1, sizeof *r);
  if (!r) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: cannot allocate the request", fn);
  dpt_progress *p = c->progress;
  r->comm = c;
  r->name = fn;
  r->run = run;
  r->buf = buf;
  r->offset = offset;
  r->count = count;
  r->dtype = dtype;
  /* The range as the work submitted so far leaves it: the progress thread's transfers wait for
   * that work only, not for what this thread submits meanwhile (which leaves the range alone). */
  size_t esize = dpt_dtype_size(dtype), off_bytes = 0, bytes = 0;
  if (buf && c->size > 1 && esize && dpt_mul_ok(offset, esize, &off_bytes) &&
      dpt_mul_ok(count, esize, &bytes) && !overlaps_pending(p, buf, off_bytes, bytes))
    r->fence = dpt_buffer_fence(buf, off_bytes, bytes);
  r->st = DPT_OK;
  r->id = ++p->next_id;
  r->info.queued = dpt_now();
  r->o_next = p->out; /* the list of requests not waited for */
  if (p->out) p->out->o_prev = r;
  p->out = r;
  if (atomic_fetch_add(&c->pending, 1) == 0 && c->tp->serialized) {
    pthread_mutex_lock(&g_owner_lock);
    g_serial_owner = c;
    atomic_fetch_add(&dpt_serial_pending, 1);
    pthread_mutex_unlock(&g_owner_lock);
  }
  pthread_mutex_lock(&p->lock);
  if (p->tail)
    p->tail->next = r;
  else
    p->head = r;
  p->tail = r;
  pthread_cond_signal(&p->work);
  pthread_mutex_unlock(&p->lock);
  *out = r;
  return DPT_OK;
}

dpt_status dpt_request_test(dpt_request *r, int *done) {
  if (!done) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_request_test: done is NULL");
  *done = 0;
  if (!r) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_request_test: req is NULL");
  dpt_progress *p = r->comm->progress;
  pthread_mutex_lock(&p->lock);
  *done = r->state == 2;
  pthread_mutex_unlock(&p->lock);
  return DPT_OK;
}

/* Takes a finished request off the list of the caller's thread and frees it. */
static void release(dpt_request *r) {
  dpt_comm *c = r->comm;
  dpt_progress *p = c->progress;
  if (r->o_prev)
    r->o_prev->o_next = r->o_next;
  else
    p->out = r->o_next;
  if (r->o_next) r->o_next->o_prev = r->o_prev;
  if (atomic_fetch_sub(&c->pending, 1) == 1 && c->tp->serialized) {
    pthread_mutex_lock(&g_owner_lock);
    if (g_serial_owner == c) g_serial_owner = NULL;
    atomic_fetch_sub(&dpt_serial_pending, 1);
    pthread_mutex_unlock(&g_owner_lock);
  }
  dpt_fence_free(r->fence); /* NULL once run */
  free(r);
}

dpt_status dpt_request_wait(dpt_request *r, dpt_request_info *info) {
  if (!r) return DPT_OK;
  dpt_progress *p = r->comm->progress;
  pthread_mutex_lock(&p->lock);
  while (r->state != 2)
    pthread_cond_wait(&p->done, &p->lock);
  pthread_mutex_unlock(&p->lock);
  const dpt_status st = r->st;
  if (info) *info = r->info;
  /* The progress thread's message, now this thread's (dpt_last_error is per thread). */
  if (st != DPT_OK) dpt_set_error(st, "%s", r->msg);
  release(r);
  return st;
}

void dpt_progress_destroy(dpt_comm *c) {
  dpt_progress *p = c->progress;
  if (!p) return;
  pthread_mutex_lock(&p->lock);
  p->stop = 1; /* the thread drains the queue, then ends */
  pthread_cond_signal(&p->work);
  pthread_mutex_unlock(&p->lock);
  pthread_join(p->thread, NULL);
  while (p->out)
    release(p->out);
  pthread_cond_destroy(&p->done);
  pthread_cond_destroy(&p->work);
  pthread_mutex_destroy(&p->lock);
  free(p);
  c->progress = NULL;
}
