/* The trainer's gradient buckets (dpt_train_config.bucket_bytes): the flat gradient cut into
 * block-aligned ranges from its end, in the order backward completes them, each exchanged by a
 * nonblocking collective as soon as the model's layer hook says it is complete, while backward
 * goes on with the layers below. The step then waits for them; the time it waits is the exposed
 * communication. Each bucket starts on a block boundary of the ring (block_bytes), so the ring
 * cuts it as it cuts the whole buffer: every element is summed in the same order and the
 * reduce-scatter's shards are the same ranges (the parameters equal the unbucketed step's bit
 * for bit). With a 16-bit exchange (grad_dtype) each bucket narrows its range into s->gh when it
 * starts and widens it back when the step waits for it; its blocks are those of the 16-bit
 * buffer (block_bytes / 2 elements), which the unbucketed 16-bit all-reduce cuts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "backends/backend_impl.h"
#include "core/trainer_impl.h"

struct train_buckets {
  size_t n;               /* buckets */
  size_t *lo;             /* [n + 1]: bucket j is [lo[j], lo[j - 1]) with lo[-1] = num params; lo[n]
                             unused. Descending: bucket 0 ends the buffer, the first backward fills */
  dpt_request **req;      /* [n]: started this step, not yet waited for */
  dpt_request_info *info; /* [n]: the last step's */
  dpt_comm_dtype dtype;   /* the exchange's: F32, or grad_dtype's 16 bits (into s->gh) */
  size_t next;            /* the next bucket to start */
  int armed;              /* the hook starts buckets (the step's last backward) */
  dpt_status start_failed;
  replica *r;
  replica_state *s;
};

void dpt_train_buckets_free(replica_state *s) {
  train_buckets *b = s->buckets;
  if (!b) return;
  for (size_t j = 0; j < b->n; ++j)
    (void)dpt_request_wait(b->req[j], NULL);
  free(b->lo);
  free(b->req);
  free(b->info);
  free(b);
  s->buckets = NULL;
}

/* Bucket j's first element and count. */
static void bucket_range(const train_buckets *b, size_t np, size_t j, size_t *off, size_t *n) {
  const size_t hi = j == 0 ? np : b->lo[j - 1];
  *off = b->lo[j];
  *n = hi - b->lo[j];
}

static void start_bucket(train_buckets *b, size_t j) {
  replica_state *s = b->s;
  size_t off = 0, n = 0;
  bucket_range(b, dpt_model_num_params(s->model), j, &off, &n);
  dpt_status st;
  if (b->dtype != DPT_COMM_F32) { /* always the full step */
    /* A replica that failed joins with whatever s->gh holds; its step fails anyway. */
    if (s->pending == DPT_OK) dpt_train_keep_failure(s, dpt_train_narrow_16(s, b->dtype, off, n));
    st = dpt_allreduce_buffer_start(b->r->comm, s->gh, off, n, b->dtype, &b->req[j]);
  } else {
    dpt_buffer *g = dpt_model_grads(s->model);
    st = s->mode == STEP_SHARDED
             ? dpt_reduce_scatter_buffer_start(b->r->comm, g, off, n, DPT_COMM_F32, &b->req[j])
             : dpt_allreduce_buffer_start(b->r->comm, g, off, n, DPT_COMM_F32, &b->req[j]);
  }
  if (st != DPT_OK && b->start_failed == DPT_OK) b->start_failed = st;
}

void dpt_train_buckets_on_layer(replica_state *s, int backward, size_t ready_from) {
  train_buckets *b = s->buckets;
  if (!b || !b->armed || !backward) return;
  while (b->next < b->n && b->lo[b->next] >= ready_from)
    start_bucket(b, b->next++);
}

dpt_status dpt_train_buckets_setup(replica *r, replica_state *s, size_t bucket_bytes) {
  if (!bucket_bytes || s->mode == STEP_LOCAL || s->sparse) return DPT_OK;
  dpt_comm_options o;
  DPT_TRY(dpt_comm_get_options(r->comm, &o));
  const size_t np = dpt_model_num_params(s->model);
  /* The 16-bit exchange's buffer s->gh exists with more than one replica (else float32). */
  const dpt_comm_dtype dtype = s->gh ? r->cfg->grad_dtype : DPT_COMM_F32;
  const size_t esize = dtype == DPT_COMM_F32 ? sizeof(float) : sizeof(uint16_t);
  const size_t block = o.block_bytes / esize ? o.block_bytes / esize : 1; /* ring block, elements */
  size_t per = bucket_bytes / o.block_bytes;                              /* blocks per bucket */
  if (per == 0) per = 1;
  const size_t nblocks = (np + block - 1) / block;
  train_buckets *b = calloc(1, sizeof *b);
  if (!b) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "buckets: out of host memory");
  s->buckets = b;
  b->r = r;
  b->s = s;
  b->dtype = dtype;
  b->lo = malloc((nblocks + 1) * sizeof *b->lo);
  b->req = calloc(nblocks + 1, sizeof *b->req);
  b->info = calloc(nblocks + 1, sizeof *b->info);
  if (!b->lo || !b->req || !b->info)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "buckets: out of host memory");
  /* The first bucket is the last block alone, so that the exchange starts early (as DDP's
   * small first bucket); then `per` blocks each, down to the start of the buffer. */
  size_t at = nblocks; /* blocks above the next bucket's start */
  for (size_t take = 1; at > 0; take = per) {
    at = at > take ? at - take : 0;
    b->lo[b->n++] = at * block;
  }
  return DPT_OK;
}

void dpt_train_buckets_arm(replica_state *s, int armed) {
  if (s->buckets) s->buckets->armed = armed;
}

dpt_status dpt_train_buckets_finish(replica_state *s, double *exposed, double *busy) {
  train_buckets *b = s->buckets;
  /* Every replica starts every bucket, in the same order, whatever its backward did. */
  while (b->next < b->n)
    start_bucket(b, b->next++);
  /* Where the device runs behind the host (OpenCL, Vulkan), the step first waits for the end of
   * backward on the device, without the backend's lock (the exchanges' transfers go on): the
   * time after that is the exposed communication, and each bucket's exchange counts from when
   * its range was ready on the host (dpt_request_info.ready), not from when it started waiting
   * for the device. */
  dpt_fence *end = dpt_backend_fence(s->be);
  dpt_train_keep_failure(s, dpt_fence_wait(end));
  dpt_fence_free(end);
  dpt_status first = b->start_failed;
  const double t0 = dpt_now();
  double work = 0;
  for (size_t j = 0; j < b->n; ++j) {
    memset(&b->info[j], 0, sizeof b->info[j]);
    dpt_status st = dpt_request_wait(b->req[j], &b->info[j]);
    b->req[j] = NULL;
    const double from =
        b->info[j].ready > b->info[j].started ? b->info[j].ready : b->info[j].started;
    if (b->info[j].finished > from) work += b->info[j].finished - from;
    if (st != DPT_OK && first == DPT_OK) first = st;
    if (b->dtype != DPT_COMM_F32 && first == DPT_OK && s->pending == DPT_OK) {
      size_t off = 0, n = 0;
      bucket_range(b, dpt_model_num_params(s->model), j, &off, &n);
      dpt_train_keep_failure(s, dpt_train_widen_16(s, b->dtype, off, n));
    }
  }
  *exposed = dpt_now() - t0;
  *busy = work;
  b->next = 0;
  b->armed = 0;
  b->start_failed = DPT_OK;
  return first;
}

const dpt_request_info *dpt_train_buckets_info(const replica_state *s, size_t *n) {
  *n = s->buckets ? s->buckets->n : 0;
  return s->buckets ? s->buckets->info : NULL;
}

/* Bus bandwidth of the all-reduce of n bytes: the ring's 2 (R - 1) / R n over the seconds. */
static double bus_bandwidth(int R, size_t n, double seconds) {
  return seconds > 0 ? 2.0 * (R - 1) / R * (double)n / seconds : 0;
}

dpt_status dpt_train_buckets_measure(replica *r, dpt_comm_dtype dtype, size_t *bytes, char *table,
                                     size_t cap) {
  dpt_comm_options o;
  DPT_TRY(dpt_comm_get_options(r->comm, &o));
  const int R = dpt_comm_size(r->comm);
  const size_t esize = dtype == DPT_COMM_F32 ? sizeof(float) : sizeof(uint16_t);
  enum { SIZES = 7, REPEAT = 3 }; /* 1 to 64 blocks */
  const size_t largest = o.block_bytes << (SIZES - 1);
  float *buf = calloc(largest / sizeof(float), sizeof(float));
  /* every replica joins the measurement, so one short of memory says so first */
  DPT_TRY(dpt_train_agree_ready(r->comm, buf ? DPT_OK : DPT_ERR_OUT_OF_MEMORY,
                                "bucket size: out of host memory", "replica", NULL));
  double bw[SIZES] = {0}, peak = 0;
  dpt_status st = DPT_OK;
  for (int k = 0; k < SIZES && st == DPT_OK; ++k) {
    const size_t n = o.block_bytes << k;
    double best = 0;
    for (int i = 0; i < REPEAT && st == DPT_OK; ++i) {
      const double t0 = dpt_now();
      st = dpt_allreduce_host(r->comm, buf, n / esize, dtype);
      const double b = bus_bandwidth(R, n, dpt_now() - t0);
      best = b > best ? b : best;
    }
    bw[k] = best;
    peak = best > peak ? best : peak;
  }
  free(buf);
  DPT_TRY(st);
  /* Replica 0's choice for all: the smallest size within 80 % of the peak. */
  uint64_t pick = o.block_bytes << (SIZES - 1);
  for (int k = SIZES - 1; k >= 0; --k)
    if (bw[k] >= 0.8 * peak) pick = o.block_bytes << k;
  DPT_TRY(dpt_broadcast_host(r->comm, &pick, sizeof pick, 0));
  *bytes = (size_t)pick;
  size_t len = 0;
  for (int k = 0; table && k < SIZES && len < cap; ++k)
    len += (size_t)snprintf(table + len, cap - len, "%s%zu KiB %.2f GB/s", k ? ", " : "",
                            (o.block_bytes << k) >> 10, bw[k] / 1e9);
  return DPT_OK;
}
