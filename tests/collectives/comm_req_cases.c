/* Nonblocking collectives (dpt_*_start, dpt_request_*), shared by the threads and MPI suites:
 * each rank runs a case on its own member; 0 on success, else -1 with a message in err. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_cases.h"
#include "dptrain/comm.h"

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    snprintf(err, errlen, __VA_ARGS__);                                                            \
    rc = -1;                                                                                       \
    goto out;                                                                                      \
  } while (0)

/* Order-dependent values (sums that are not exact), so that "bit-identical to the blocking
 * call" means the same reduction order. */
static float inexact(int rank, size_t i) {
  return sinf((float)i * 0.37f + (float)rank) * 1000.0f / (float)(i % 97 + 1);
}

enum { NREQ = 4 };

/* Several requests back to back on disjoint ranges of one buffer (an all-reduce, a
 * reduce-scatter, an all-gather of the shards, an all-reduce), waited out of order, while this
 * thread runs axpy on another range of the same buffer until they are done. */
int comm_case_requests(dpt_comm *c, dpt_backend *be, char *err, size_t errlen) {
  const int rank = dpt_comm_rank(c);
  const size_t n = 20000;       /* elements per request range */
  const size_t work = NREQ * n; /* the caller's range: x = [work, work + w), y after it */
  const size_t w = 4096, total = work + 2 * w;
  float *host = malloc(total * sizeof *host), *ref = malloc(NREQ * n * sizeof *ref);
  float *got = malloc(total * sizeof *got);
  dpt_buffer *buf = NULL;
  dpt_request *req[NREQ] = {NULL};
  int rc = 0;
  if (!host || !ref || !got) FAIL("out of host memory");
  for (size_t i = 0; i < work; ++i)
    host[i] = inexact(rank, i);
  for (size_t i = 0; i < w; ++i) {
    host[work + i] = (float)(i % 7);  /* x */
    host[work + w + i] = (float)rank; /* y */
  }
  if (dpt_buffer_alloc(be, total * sizeof(float), &buf) != DPT_OK ||
      dpt_buffer_upload(buf, 0, host, total * sizeof(float)) != DPT_OK)
    FAIL("buffer: %s", dpt_last_error());
  /* The reference: the blocking calls on the same data. */
  for (int k = 0; k < NREQ; ++k) {
    dpt_status st = k % 3 == 1   ? dpt_reduce_scatter_buffer(c, buf, k * n, n, DPT_COMM_F32)
                    : k % 3 == 2 ? dpt_allgather_shards_buffer(c, buf, k * n, n, DPT_COMM_F32)
                                 : dpt_allreduce_buffer(c, buf, k * n, n, DPT_COMM_F32);
    if (st != DPT_OK) FAIL("blocking %d: %s", k, dpt_last_error());
  }
  if (dpt_buffer_download(buf, 0, ref, NREQ * n * sizeof(float)) != DPT_OK ||
      dpt_buffer_upload(buf, 0, host, total * sizeof(float)) != DPT_OK)
    FAIL("reference: %s", dpt_last_error());

  for (int k = 0; k < NREQ; ++k) {
    dpt_status st =
        k % 3 == 1   ? dpt_reduce_scatter_buffer_start(c, buf, k * n, n, DPT_COMM_F32, &req[k])
        : k % 3 == 2 ? dpt_allgather_shards_buffer_start(c, buf, k * n, n, DPT_COMM_F32, &req[k])
                     : dpt_allreduce_buffer_start(c, buf, k * n, n, DPT_COMM_F32, &req[k]);
    if (st != DPT_OK) FAIL("start %d: %s", k, dpt_last_error());
  }
  /* Backend work on the other range while the requests run: y += x until all are done, in
   * bursts of 64 kernels without waiting for them (the requests' transfers wait only for the
   * work before their start); each burst is waited for, as a backward pass's work is finite. */
  long iters = 0;
  for (int done = 0; !done; ++iters) {
    if (dpt_axpy(be, w, 1.0f, buf, work, buf, work + w) != DPT_OK ||
        (iters % 64 == 63 && dpt_backend_synchronize(be) != DPT_OK))
      FAIL("axpy: %s", dpt_last_error());
    done = 1;
    for (int k = 0; k < NREQ; ++k) {
      int d = 0;
      if (dpt_request_test(req[k], &d) != DPT_OK) FAIL("test: %s", dpt_last_error());
      done &= d;
    }
  }
  /* Out of order: the last first, then the others in order. */
  dpt_request_info info[NREQ];
  const int order[NREQ] = {NREQ - 1, 0, 1, 2};
  for (int j = 0; j < NREQ; ++j) {
    const int k = order[j];
    dpt_status st = dpt_request_wait(req[k], &info[k]);
    req[k] = NULL;
    if (st != DPT_OK) FAIL("wait %d: %s", k, dpt_last_error());
  }
  for (int k = 0; k < NREQ; ++k) {
    if (!(info[k].queued <= info[k].started && info[k].started <= info[k].ready &&
          info[k].ready <= info[k].finished))
      FAIL("request %d: times out of order (queued %.9f started %.9f ready %.9f finished %.9f)", k,
           info[k].queued, info[k].started, info[k].ready, info[k].finished);
    if (k > 0 && info[k].started < info[k - 1].finished)
      FAIL("request %d started at %.9f before request %d finished at %.9f (not FIFO)", k,
           info[k].started, k - 1, info[k - 1].finished);
    if (k > 0 && info[k].queued < info[k - 1].queued) FAIL("request %d queued before %d", k, k - 1);
  }
  if (dpt_buffer_download(buf, 0, got, total * sizeof(float)) != DPT_OK)
    FAIL("download: %s", dpt_last_error());
  for (size_t i = 0; i < NREQ * n; ++i)
    if (memcmp(&got[i], &ref[i], sizeof(float)))
      FAIL("element %zu (request %zu): %.9g, the blocking call gave %.9g", i, i / n, got[i],
           ref[i]);
  for (size_t i = 0; i < w; ++i) {
    const float x = (float)(i % 7), y = (float)rank + (float)iters * x;
    if (got[work + i] != x || got[work + w + i] != y)
      FAIL("caller's range at %zu after %ld axpy: x %g y %g, expected %g %g", i, iters,
           got[work + i], got[work + w + i], x, y);
  }
out:
  for (int k = 0; k < NREQ; ++k)
    dpt_request_wait(req[k], NULL);
  dpt_buffer_free(buf);
  free(host);
  free(ref);
  free(got);
  return rc;
}

/* A blocking collective (and an option change) while a request is pending: refused, naming
 * it; the request still completes with the closed-form sum. */
int comm_case_request_overlap(dpt_comm *c, dpt_backend *be, char *err, size_t errlen) {
  const int rank = dpt_comm_rank(c);
  const size_t n = 6000, half = n / 2;
  float host[6000], ref[6000], got[6000];
  dpt_buffer *buf = NULL;
  dpt_request *a = NULL, *b = NULL;
  int rc = 0;
  for (size_t i = 0; i < n; ++i)
    host[i] = inexact(rank, i);
  if (dpt_buffer_alloc(be, sizeof host, &buf) != DPT_OK ||
      dpt_buffer_upload(buf, 0, host, sizeof host) != DPT_OK)
    FAIL("buffer: %s", dpt_last_error());
  /* The reference: [0, n) all-reduced, then [half, n) all-reduced again. */
  if (dpt_allreduce_buffer(c, buf, 0, n, DPT_COMM_F32) != DPT_OK ||
      dpt_allreduce_buffer(c, buf, half, n - half, DPT_COMM_F32) != DPT_OK ||
      dpt_buffer_download(buf, 0, ref, sizeof ref) != DPT_OK ||
      dpt_buffer_upload(buf, 0, host, sizeof host) != DPT_OK)
    FAIL("reference: %s", dpt_last_error());
  if (dpt_allreduce_buffer_start(c, buf, 0, n, DPT_COMM_F32, &a) != DPT_OK ||
      dpt_allreduce_buffer_start(c, buf, half, n - half, DPT_COMM_F32, &b) != DPT_OK)
    FAIL("start: %s", dpt_last_error());
  dpt_status sa = dpt_request_wait(a, NULL), sb = dpt_request_wait(b, NULL);
  a = b = NULL;
  if (sa != DPT_OK || sb != DPT_OK) FAIL("wait: %s", dpt_last_error());
  if (dpt_buffer_download(buf, 0, got, sizeof got) != DPT_OK)
    FAIL("download: %s", dpt_last_error());
  for (size_t i = 0; i < n; ++i)
    if (memcmp(&got[i], &ref[i], sizeof(float)))
      FAIL("element %zu: %.9g, the blocking calls gave %.9g", i, (double)got[i], (double)ref[i]);
out:
  (void)dpt_request_wait(a, NULL);
  (void)dpt_request_wait(b, NULL);
  dpt_buffer_free(buf);
  return rc;
}

int comm_case_request_pending(dpt_comm *c, dpt_backend *be, char *err, size_t errlen) {
  const int rank = dpt_comm_rank(c), size = dpt_comm_size(c);
  const size_t n = 5000;
  float *host = malloc(n * sizeof *host);
  dpt_buffer *buf = NULL;
  dpt_request *req = NULL;
  int rc = 0;
  if (!host) FAIL("out of host memory");
  for (size_t i = 0; i < n; ++i)
    host[i] = comm_case_input(rank, i);
  if (dpt_buffer_alloc(be, n * sizeof(float), &buf) != DPT_OK ||
      dpt_buffer_upload(buf, 0, host, n * sizeof(float)) != DPT_OK)
    FAIL("buffer: %s", dpt_last_error());
  if (dpt_allreduce_buffer_start(c, buf, 0, n, DPT_COMM_F32, &req) != DPT_OK)
    FAIL("start: %s", dpt_last_error());
  float one = 1.0f;
  dpt_status st = dpt_allreduce_host(c, &one, 1, DPT_COMM_F32);
  if (st != DPT_ERR_INVALID_ARG || !strstr(dpt_last_error(), "dpt_allreduce_host") ||
      !strstr(dpt_last_error(), "#1 dpt_allreduce_buffer_start"))
    FAIL("blocking all-reduce with a request pending: status %d, '%s'", (int)st, dpt_last_error());
  st = dpt_barrier(c);
  if (st != DPT_ERR_INVALID_ARG || !strstr(dpt_last_error(), "pending"))
    FAIL("barrier with a request pending: status %d, '%s'", (int)st, dpt_last_error());
  st = dpt_comm_set_timeout(c, 5.0);
  if (st != DPT_ERR_INVALID_ARG || !strstr(dpt_last_error(), "dpt_comm_set_options"))
    FAIL("option change with a request pending: status %d, '%s'", (int)st, dpt_last_error());
  if ((st = dpt_request_wait(req, NULL)) != DPT_OK) FAIL("wait: %s", dpt_last_error());
  req = NULL;
  if (dpt_buffer_download(buf, 0, host, n * sizeof(float)) != DPT_OK)
    FAIL("download: %s", dpt_last_error());
  for (size_t i = 0; i < n; ++i)
    if (host[i] != comm_case_expected(size, i))
      FAIL("element %zu: %g, expected %g", i, host[i], comm_case_expected(size, i));
  /* Waited for: blocking collectives run again. */
  if ((st = dpt_allreduce_host(c, &one, 1, DPT_COMM_F32)) != DPT_OK || one != (float)size)
    FAIL("all-reduce after the wait: status %d (%s), %g", (int)st, dpt_last_error(), one);
out:
  dpt_request_wait(req, NULL);
  dpt_buffer_free(buf);
  free(host);
  return rc;
}

/* A bad argument on rank 0 (a range past the end of its buffer), seen by its progress thread:
 * the request fails on every rank (rank 0 with its own message), the request queued behind it
 * fails with the same status without running, and the communicator's blocking collectives
 * still work once both were waited for. */
int comm_case_request_failure(dpt_comm *c, dpt_backend *be, char *err, size_t errlen) {
  const int rank = dpt_comm_rank(c), size = dpt_comm_size(c);
  const size_t n = 1000;
  dpt_buffer *buf = NULL;
  dpt_request *r1 = NULL, *r2 = NULL;
  int rc = 0;
  if (dpt_buffer_alloc(be, n * sizeof(float), &buf) != DPT_OK ||
      dpt_buffer_fill_f32(buf, 0, n, 1.0f) != DPT_OK)
    FAIL("buffer: %s", dpt_last_error());
  if (dpt_allreduce_buffer_start(c, buf, rank == 0 ? n : 0, n, DPT_COMM_F32, &r1) != DPT_OK ||
      dpt_allreduce_buffer_start(c, buf, 0, n, DPT_COMM_F32, &r2) != DPT_OK)
    FAIL("start: %s", dpt_last_error());
  dpt_status s1 = dpt_request_wait(r1, NULL);
  r1 = NULL;
  char msg1[1024];
  snprintf(msg1, sizeof msg1, "%s", dpt_last_error());
  if (s1 == DPT_OK) FAIL("the bad request succeeded");
  if (rank == 0 &&
      (s1 != DPT_ERR_INVALID_ARG || !strstr(msg1, "outside the buffer") || !strstr(msg1, "#1")))
    FAIL("rank 0: status %d, '%s'", (int)s1, msg1);
  if (strlen(msg1) == 0) FAIL("no message on the waiting thread");
  dpt_status s2 = dpt_request_wait(r2, NULL);
  r2 = NULL;
  if (s2 != s1 || !strstr(dpt_last_error(), "not run") || !strstr(dpt_last_error(), "#1"))
    FAIL("the request behind: status %d (first %d), '%s'", (int)s2, (int)s1, dpt_last_error());
  float one = 1.0f;
  dpt_status st = dpt_allreduce_host(c, &one, 1, DPT_COMM_F32);
  if (st != DPT_OK || one != (float)size)
    FAIL("all-reduce after the failure: status %d (%s), %g", (int)st, dpt_last_error(), one);
out:
  dpt_request_wait(r1, NULL);
  dpt_request_wait(r2, NULL);
  dpt_buffer_free(buf);
  return rc;
}

/* Requests left queued: dpt_comm_destroy runs them first (the buffer must outlive it), then
 * the buffer holds the sums. `c` is destroyed here. */
int comm_case_request_destroy(dpt_comm *c, dpt_backend *be, char *err, size_t errlen) {
  const int rank = dpt_comm_rank(c), size = dpt_comm_size(c);
  const size_t n = 3000;
  float *host = malloc(3 * n * sizeof *host);
  dpt_buffer *buf = NULL;
  int rc = 0;
  if (!host) FAIL("out of host memory");
  for (size_t i = 0; i < 3 * n; ++i)
    host[i] = comm_case_input(rank, i % n);
  if (dpt_buffer_alloc(be, 3 * n * sizeof(float), &buf) != DPT_OK ||
      dpt_buffer_upload(buf, 0, host, 3 * n * sizeof(float)) != DPT_OK)
    FAIL("buffer: %s", dpt_last_error());
  for (int k = 0; k < 3; ++k) {
    dpt_request *r = NULL;
    if (dpt_allreduce_buffer_start(c, buf, k * n, n, DPT_COMM_F32, &r) != DPT_OK)
      FAIL("start: %s", dpt_last_error());
  }
  dpt_comm_destroy(c);
  c = NULL;
  if (dpt_buffer_download(buf, 0, host, 3 * n * sizeof(float)) != DPT_OK)
    FAIL("download: %s", dpt_last_error());
  for (size_t i = 0; i < 3 * n; ++i)
    if (host[i] != comm_case_expected(size, i % n))
      FAIL("element %zu: %g, expected %g", i, host[i], comm_case_expected(size, i % n));
out:
  dpt_comm_destroy(c);
  dpt_buffer_free(buf);
  free(host);
  return rc;
}
