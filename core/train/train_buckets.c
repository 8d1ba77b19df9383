/* The trainer's gradient buckets (dpt_train_config.bucket_bytes): the flat gradient cut into
 * block-aligned ranges from its end, in the order backward completes them, each exchanged by a
 * nonblocking collective as soon as the model's layer hook says it is complete, while backward
 * goes on with the layers below. The step then waits for them; the time it waits is the exposed
 * communication. Each bucket starts on a block boundary of the ring (block_bytes), so the ring
 * cuts it as it cuts the whole buffer: every element is summed in the same order and the
 * reduce-scatter's shards are the same ranges (the parameters equal the unbucketed step's bit
 * for bit). With a 16-bit exchange (grad_dtype) each bucket narrows its range into s->gh when it
 * starts and widens it back when the step waits for it; its blocks are those of the 16-bit
 * buffer (block_bytes / 2 elements), which the unbucketed 16-bit all-reduce cuts.
 *
 * Where the optimizer can step in parts (no clipping, not LAMB) and a step that turns out not
 * finite is not skipped (on_nonfinite stop or rollback: the run ends, or the checkpoint's state
 * replaces everything), the step updates each bucket's part of this replica's ranges as soon as
 * the bucket's exchange is done, while the later buckets are still exchanged; with the sharded
 * step it then starts the all-gather of the bucket's parameters. Each element gets the same
 * update as in the whole step, so the bits are the same. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "backends/backend_impl.h"
#include "core/train/optimizer.h"
#include "core/train/trace.h"
#include "core/train/exchange.h"
#include "core/train/replica.h"
#include "core/train/train_buckets.h"

struct train_buckets {
  size_t n;               /* buckets */
  size_t *lo;             /* [n + 1]: bucket j is [lo[j], lo[j - 1]) with lo[-1] = num params; lo[n]
                             unused. Descending: bucket 0 ends the buffer, the first backward fills */
  dpt_request **req;      /* [n]: started this step, not yet waited for */
  dpt_request_info *info; /* [n]: the last step's */
  /* The update in parts (step_parts): bucket j's part of this replica's ranges is
   * parts[part_lo[j] .. part_lo[j + 1]); gather[j]: its parameters' all-gather (sharded). */
  int step_parts;
  dpt_range *parts;
  size_t *part_lo;       /* [n + 1] */
  dpt_request **gather;  /* [n] */
  const char *whole_why; /* !step_parts: why the update waits for the last bucket */
  dpt_comm_dtype dtype;  /* the exchange's: F32, or grad_dtype's 16 bits (into s->gh) */
  size_t next;           /* the next bucket to start */
  int armed;             /* the hook starts buckets (the step's last backward) */
  dpt_status start_failed;
  replica *r;
  replica_state *s;
};

void dpt_train_buckets_free(replica_state *s) {
  train_buckets *b = s->buckets;
  if (!b) return;
  for (size_t j = 0; j < b->n; ++j) {
    (void)dpt_request_wait(b->req[j], NULL);
    if (b->gather) (void)dpt_request_wait(b->gather[j], NULL);
  }
  free(b->lo);
  free(b->req);
  free(b->info);
  free(b->parts);
  free(b->part_lo);
  free(b->gather);
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

/* The update in parts, when the run allows it: bucket j's part is where this replica's ranges
 * (its shard, or everything) meet the bucket. With the sharded step these pieces must be the
 * shards the buckets' reduce-scatters complete, whether the update runs in parts or after the
 * last bucket (they are: both are cut on ring blocks); a layout where they are not would
 * update sums that are not complete, so it fails the set-up. */
static dpt_status setup_parts(train_buckets *b, const dpt_train_config *cfg) {
  replica_state *s = b->s;
  b->whole_why = cfg->exchange.bucket_whole_update ? "asked for (bucket_whole_update)"
                 : cfg->checks.on_nonfinite == DPT_NONFINITE_SKIP
                     ? "a skipped step must leave the parameters as they were"
                 : dpt_optimizer_steps_in_parts(s->opt) ? NULL
                 : cfg->optim.kind == DPT_OPTIM_LAMB    ? "LAMB's trust ratios need whole tensors"
                                                     : "clipping needs the whole gradient's norm";
  const int parts = !b->whole_why;
  if (!parts && s->mode != STEP_SHARDED) return DPT_OK;
  const size_t np = dpt_model_num_params(s->model);
  const dpt_range whole = {0, np};
  const dpt_range *own = s->mode == STEP_SHARDED ? s->shard : &whole;
  const size_t nown = s->mode == STEP_SHARDED ? s->nshard : 1;
  b->parts = malloc((nown + b->n) * sizeof *b->parts);
  b->part_lo = malloc((b->n + 1) * sizeof *b->part_lo);
  b->gather = parts && s->mode == STEP_SHARDED ? calloc(b->n, sizeof *b->gather) : NULL;
  if (!b->parts || !b->part_lo || (parts && s->mode == STEP_SHARDED && !b->gather))
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "buckets: out of host memory");
  size_t m = 0;
  for (size_t j = 0; j < b->n; ++j) {
    size_t off = 0, n = 0;
    bucket_range(b, np, j, &off, &n);
    b->part_lo[j] = m;
    for (size_t i = 0; i < nown; ++i) {
      const size_t lo = own[i].offset > off ? own[i].offset : off;
      const size_t hi =
          own[i].offset + own[i].count < off + n ? own[i].offset + own[i].count : off + n;
      if (lo < hi) b->parts[m++] = (dpt_range){lo, hi - lo};
    }
    if (s->mode == STEP_SHARDED) {
      /* The bucket's reduce-scatter completes its own shards: they must be these parts. */
      const size_t k = m - b->part_lo[j];
      dpt_range *mine = malloc((k ? k : 1) * sizeof *mine);
      if (!mine) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "buckets: out of host memory");
      int same = dpt_comm_shard(b->r->comm, n, DPT_COMM_F32, b->r->index, mine, k) == k;
      for (size_t i = 0; same && i < k; ++i)
        same = mine[i].offset + off == b->parts[b->part_lo[j] + i].offset &&
               mine[i].count == b->parts[b->part_lo[j] + i].count;
      free(mine);
      if (!same)
        return dpt_set_error(DPT_ERR_UNSUPPORTED,
                             "buckets: the reduce-scatter of bucket %zu (%zu elements) "
                             "completes other ranges than this replica's shard holds there",
                             j, n);
    }
  }
  b->part_lo[b->n] = m;
  b->step_parts = parts;
  return DPT_OK;
}

dpt_status dpt_train_buckets_setup(replica *r, replica_state *s, size_t bucket_bytes) {
  if (!bucket_bytes || s->mode == STEP_LOCAL || s->sparse) return DPT_OK;
  dpt_comm_options o;
  DPT_TRY(dpt_comm_get_options(r->comm, &o));
  const size_t np = dpt_model_num_params(s->model);
  /* The 16-bit exchange's buffer s->gh exists with more than one replica (else float32). */
  const dpt_comm_dtype dtype = s->gh ? r->cfg->exchange.grad_dtype : DPT_COMM_F32;
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
  return setup_parts(b, r->cfg);
}

void dpt_train_buckets_arm(replica_state *s, int armed) {
  if (s->buckets) s->buckets->armed = armed;
}

/* After bucket j's exchange (step_parts): its part of the update, then with the sharded step
 * the start of its parameters' all-gather, which every replica joins whatever its outcome. */
static void step_part(train_buckets *b, size_t j, dpt_status first) {
  replica_state *s = b->s;
  const size_t lo = b->part_lo[j], np = dpt_model_num_params(s->model);
  if (first == DPT_OK && s->pending == DPT_OK)
    dpt_train_keep_failure(s,
                           dpt_optimizer_step_part(s->opt, b->parts + lo, b->part_lo[j + 1] - lo));
  if (s->mode != STEP_SHARDED) return;
  size_t off = 0, n = 0;
  bucket_range(b, np, j, &off, &n);
  const dpt_status st = dpt_allgather_shards_buffer_start(b->r->comm, dpt_model_params(s->model),
                                                          off, n, DPT_COMM_F32, &b->gather[j]);
  if (st != DPT_OK && b->start_failed == DPT_OK) b->start_failed = st;
}

/* Bucket j's part of the update (step_part), timed: the time counts as optimizer time, not as
 * exposed communication, and shows on the trace's optimizer track. */
static void timed_step_part(train_buckets *b, size_t j, dpt_status first, bucket_times *t) {
  replica_state *s = b->s;
  const double tu = dpt_now();
  step_part(b, j, first);
  const double tv = dpt_now();
  t->optimizer += tv - tu;
  if (s->trace) {
    char name[48];
    snprintf(name, sizeof name, "optimizer, bucket %zu", j);
    dpt_trace_event(s->trace, DPT_TRACE_OPTIMIZER, name, tu, tv);
  }
}

/* Waits for bucket j's exchange (np: parameters): its busy time into t, the first failure into
 * *first; then a 16-bit exchange's widening back to float32 and, in parts, its update. */
static void finish_bucket(train_buckets *b, size_t j, size_t np, dpt_status *first,
                          bucket_times *t) {
  replica_state *s = b->s;
  memset(&b->info[j], 0, sizeof b->info[j]);
  dpt_status st = dpt_request_wait(b->req[j], &b->info[j]);
  b->req[j] = NULL;
  const double from = b->info[j].ready > b->info[j].started ? b->info[j].ready : b->info[j].started;
  if (b->info[j].finished > from) t->busy += b->info[j].finished - from;
  if (st != DPT_OK && *first == DPT_OK) *first = st;
  if (b->dtype != DPT_COMM_F32 && *first == DPT_OK && s->pending == DPT_OK) {
    size_t off = 0, n = 0;
    bucket_range(b, np, j, &off, &n);
    dpt_train_keep_failure(s, dpt_train_widen_16(s, b->dtype, off, n));
  }
  if (b->step_parts) timed_step_part(b, j, *first, t);
}

/* The sharded step in parts: waits for every bucket's parameter all-gather (each replica joins
 * all of them), traced as exchanges. Returns first, else the first failure among them. */
static dpt_status wait_gathers(train_buckets *b, dpt_status first) {
  replica_state *s = b->s;
  if (b->start_failed != DPT_OK && first == DPT_OK) first = b->start_failed;
  for (size_t j = 0; j < b->n; ++j) {
    dpt_request_info in;
    memset(&in, 0, sizeof in);
    const dpt_status st = dpt_request_wait(b->gather[j], &in);
    if (st != DPT_OK && first == DPT_OK) first = st;
    if (s->trace && b->gather[j]) {
      char name[48];
      snprintf(name, sizeof name, "all-gather %zu (parameters)", j);
      dpt_trace_event(s->trace, DPT_TRACE_EXCHANGE, name, in.queued, in.finished);
    }
    b->gather[j] = NULL;
  }
  return first;
}

dpt_status dpt_train_buckets_finish(replica_state *s, bucket_times *t) {
  train_buckets *b = s->buckets;
  memset(t, 0, sizeof *t);
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
  const size_t np = dpt_model_num_params(s->model);
  for (size_t j = 0; j < b->n; ++j)
    finish_bucket(b, j, np, &first, t);
  t->exposed = dpt_now() - t0 - t->optimizer;
  if (b->step_parts && s->mode == STEP_SHARDED) first = wait_gathers(b, first);
  b->next = 0;
  b->armed = 0;
  b->start_failed = DPT_OK;
  return first;
}

int dpt_train_buckets_stepped(const replica_state *s) {
  return s->buckets && s->buckets->step_parts;
}

void dpt_train_buckets_describe(const replica_state *s, char *out, size_t cap) {
  const train_buckets *b = s->buckets;
  if (!b) {
    snprintf(out, cap, "no gradient buckets");
    return;
  }
  const size_t np = dpt_model_num_params(s->model);
  const size_t esize = b->dtype == DPT_COMM_F32 ? sizeof(float) : sizeof(uint16_t);
  size_t off = 0, first = 0, next = 0;
  bucket_range(b, np, 0, &off, &first);
  if (b->n > 1) bucket_range(b, np, 1, &off, &next);
  const char *what = s->mode == STEP_SHARDED ? "reduce-scatter" : "all-reduce";
  int len = snprintf(out, cap, "%zu gradient bucket%s (the first %zu KiB", b->n,
                     b->n == 1 ? "" : "s", (first * esize + 1023) >> 10);
  if (len >= 0 && (size_t)len < cap && b->n > 1)
    len +=
        snprintf(out + len, cap - (size_t)len, ", then up to %zu KiB", (next * esize + 1023) >> 10);
  if (len < 0 || (size_t)len >= cap) return;
  if (b->step_parts)
    snprintf(out + len, cap - (size_t)len,
             "); each bucket's %s of the update runs once its %s is done%s",
             s->mode == STEP_SHARDED ? "shard" : "part", what,
             s->mode == STEP_SHARDED ? ", then its parameters' all-gather" : "");
  else
    snprintf(out + len, cap - (size_t)len, "); the update waits for the last bucket: %s",
             b->whole_why);
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
  DPT_TRY(dpt_comm_agree_ready(r->comm, buf ? DPT_OK : DPT_ERR_OUT_OF_MEMORY,
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

/* ---- the exchange kinds: buckets over the full and the sharded step (exchange.h) ---- */

/* After backward: the buckets' exchanges waited for (and the update in parts where it runs),
 * each bucket an event on the timeline. */
static dpt_status buckets_reduce(replica *r, replica_state *s, exchange_times *t) {
  (void)r;
  bucket_times bt;
  dpt_status st = dpt_train_buckets_finish(s, &bt);
  t->exposed = bt.exposed;
  t->busy = bt.busy;
  t->optimizer = bt.optimizer;
  size_t nb = 0;
  const dpt_request_info *in = s->trace ? dpt_train_buckets_info(s, &nb) : NULL;
  for (size_t j = 0; j < nb; ++j) {
    char name[32];
    snprintf(name, sizeof name, "bucket %zu", j);
    dpt_trace_event(s->trace, DPT_TRACE_EXCHANGE, name, in[j].queued, in[j].finished);
  }
  return st;
}

static int buckets_full_applies(const replica_state *s) {
  return s->buckets != NULL && s->mode == STEP_FULL;
}
static int buckets_sharded_applies(const replica_state *s) {
  return s->buckets != NULL && s->mode == STEP_SHARDED;
}

const train_exchange dpt_train_exchange_buckets_full = {.name = "buckets",
                                                        .applies = buckets_full_applies,
                                                        .reduce = buckets_reduce,
                                                        .count_nonfinite =
                                                            dpt_train_exchange_count_grads,
                                                        .update = dpt_train_exchange_full_update,
                                                        .stepped = dpt_train_buckets_stepped};
const train_exchange dpt_train_exchange_buckets_sharded = {
    .name = "buckets, sharded",
    .applies = buckets_sharded_applies,
    .reduce = buckets_reduce,
    .count_nonfinite = dpt_train_exchange_count_grads,
    .update = dpt_train_exchange_sharded_update,
    .gather = dpt_train_exchange_sharded_gather,
    .stepped = dpt_train_buckets_stepped};
