/* The step's plain exchange kinds (core/train/exchange.h): none, full, sharded and 16-bit, and
 * the pieces other kinds reuse (train_buckets.c, train_sparse.c). The list they are chosen from
 * is exchange_kinds.c. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#include "base/clock.h"
#include "base/error.h"
#include "core/train/exchange.h"
#include "core/train/optimizer.h"

const dpt_range *dpt_train_own_ranges(const replica_state *s, dpt_range *whole, size_t *n) {
  if (s->mode == STEP_SHARDED) {
    *n = s->nshard;
    return s->shard;
  }
  *whole = (dpt_range){0, dpt_model_num_params(s->model)};
  *n = 1;
  return whole;
}

dpt_status dpt_train_count_nonfinite_own(replica_state *s, const dpt_buffer *buf, int64_t *out) {
  dpt_range whole;
  size_t n = 0;
  const dpt_range *rg = dpt_train_own_ranges(s, &whole, &n);
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    uint64_t c = 0;
    DPT_TRY(dpt_count_nonfinite(s->be, rg[i].count, buf, rg[i].offset, &c));
    total += c;
  }
  *out = (int64_t)total;
  return DPT_OK;
}

dpt_status dpt_train_exchange_count_grads(replica_state *s, int64_t *out) {
  return dpt_train_count_nonfinite_own(s, dpt_model_grads(s->model), out);
}

void dpt_train_exchange_one_piece(replica_state *s, exchange_times *t, double t0,
                                  const char *name) {
  t->exposed = t->busy = dpt_now() - t0;
  t->optimizer = 0;
  dpt_train_trace_since(s, DPT_TRACE_EXCHANGE, name, t0);
}

/* ---- full: all-reduce, every replica updates everything ---- */

static dpt_status full_reduce(replica *r, replica_state *s, exchange_times *t) {
  const double t0 = dpt_now();
  const size_t np = dpt_model_num_params(s->model);
  dpt_status st = dpt_allreduce_buffer(r->comm, dpt_model_grads(s->model), 0, np, DPT_COMM_F32);
  dpt_train_exchange_one_piece(s, t, t0, "all-reduce");
  return st;
}

dpt_status dpt_train_exchange_full_update(replica *r, replica_state *s, double sumsq) {
  (void)sumsq;
  /* Clipping computes the gradient norm: kept for the run's log. */
  double *norm = r->cfg->optim.clip_norm > 0.0f ? &s->grad_norm : NULL;
  return s->pending == DPT_OK ? dpt_optimizer_step(s->opt, norm) : DPT_OK;
}

/* ---- sharded: reduce-scatter, each replica updates its shard, all-gather ---- */

static dpt_status sharded_reduce(replica *r, replica_state *s, exchange_times *t) {
  const double t0 = dpt_now();
  const size_t np = dpt_model_num_params(s->model);
  dpt_status st =
      dpt_reduce_scatter_buffer(r->comm, dpt_model_grads(s->model), 0, np, DPT_COMM_F32);
  dpt_train_exchange_one_piece(s, t, t0, "reduce-scatter");
  return st;
}

/* LAMB's sharded update: the per-tensor sums of this replica's pieces, summed over the replicas
 * in replica order (identical everywhere), then the update. Every replica joins the sum unless
 * the step is skipped, which the agreed gradient norm decides alike everywhere. */
static dpt_status two_phase_step(replica *r, replica_state *s, double sumsq) {
  const size_t count = dpt_optimizer_num_sums(s->opt);
  double *sums = calloc(count, sizeof *sums);
  dpt_status st = sums ? DPT_OK : dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "LAMB: out of host memory");
  if (st == DPT_OK && s->pending == DPT_OK)
    st = dpt_optimizer_prepare_ranges(s->opt, s->shard, s->nshard, sumsq, sums);
  if (st == DPT_ERR_NONFINITE) {
    free(sums);
    return st;
  }
  dpt_train_keep_failure(s, st);
  st = sums ? dpt_train_sum_over_replicas(r, sums, count) : DPT_OK;
  if (dpt_train_out_of_step(st)) {
    free(sums);
    return dpt_train_stop_after(s, st);
  }
  dpt_train_keep_failure(s, st);
  if (s->pending == DPT_OK) st = dpt_optimizer_finish_ranges(s->opt, s->shard, s->nshard, sums);
  free(sums);
  return st;
}

dpt_status dpt_train_exchange_sharded_update(replica *r, replica_state *s, double sumsq) {
  if (dpt_optimizer_num_sums(s->opt) > 0) return two_phase_step(r, s, sumsq);
  if (s->pending != DPT_OK) return DPT_OK;
  return dpt_optimizer_step_ranges(s->opt, s->shard, s->nshard, sumsq, NULL);
}

/* The shards' parameters to every replica. Out of step: stop now. Any other failure
 * (DPT_ERR_COMM included) meets the others at the next exchange, where the replica that failed
 * first reports why. */
dpt_status dpt_train_exchange_sharded_gather(replica *r, replica_state *s) {
  const double t1 = dpt_now();
  dpt_status st = dpt_allgather_shards_buffer(r->comm, dpt_model_params(s->model), 0,
                                              dpt_model_num_params(s->model), DPT_COMM_F32);
  s->t.comm += dpt_now() - t1;
  dpt_train_trace_since(s, DPT_TRACE_EXCHANGE, "all-gather (parameters)", t1);
  if (dpt_train_out_of_step(st)) return dpt_train_stop_after(s, st);
  dpt_train_keep_failure(s, st); /* local (staging, device): announced at the next exchange */
  return DPT_OK;
}

/* ---- 16-bit: the gradient narrowed, all-reduced in grad_dtype, widened back ---- */

/* A local failure is kept and the all-reduce joined regardless. */
static dpt_status half_reduce(replica *r, replica_state *s, exchange_times *t) {
  const double t0 = dpt_now();
  const dpt_comm_dtype dt = r->cfg->exchange.grad_dtype;
  const size_t np = dpt_model_num_params(s->model);
  dpt_status st = s->pending;
  if (st == DPT_OK) st = dpt_train_narrow_16(s, dt, 0, np);
  dpt_train_keep_failure(s, st);
  st = dpt_allreduce_buffer(r->comm, s->gh, 0, np, dt);
  if (st == DPT_OK && s->pending == DPT_OK)
    dpt_train_keep_failure(s, dpt_train_widen_16(s, dt, 0, np));
  dpt_train_exchange_one_piece(
      s, t, t0, dt == DPT_COMM_BF16 ? "all-reduce (bfloat16)" : "all-reduce (binary16)");
  return st;
}

/* ---- the tables ---- */

static int none_applies(const replica_state *s) {
  return s->mode == STEP_LOCAL;
}
static int full_applies(const replica_state *s) {
  return s->mode == STEP_FULL;
}
static int sharded_applies(const replica_state *s) {
  return s->mode == STEP_SHARDED;
}
static int half_applies(const replica_state *s) {
  return s->mode == STEP_FULL && s->gh != NULL;
}

const train_exchange dpt_train_exchange_none = {.name = "none",
                                                .applies = none_applies,
                                                .count_nonfinite = dpt_train_exchange_count_grads,
                                                .update = dpt_train_exchange_full_update};
const train_exchange dpt_train_exchange_full = {.name = "full",
                                                .applies = full_applies,
                                                .reduce = full_reduce,
                                                .count_nonfinite = dpt_train_exchange_count_grads,
                                                .update = dpt_train_exchange_full_update};
const train_exchange dpt_train_exchange_sharded = {.name = "sharded",
                                                   .applies = sharded_applies,
                                                   .reduce = sharded_reduce,
                                                   .count_nonfinite =
                                                       dpt_train_exchange_count_grads,
                                                   .update = dpt_train_exchange_sharded_update,
                                                   .gather = dpt_train_exchange_sharded_gather};
const train_exchange dpt_train_exchange_half = {.name = "16-bit",
                                                .applies = half_applies,
                                                .reduce = half_reduce,
                                                .count_nonfinite = dpt_train_exchange_count_grads,
                                                .update = dpt_train_exchange_full_update};
