/* One synchronized step (core/train/step.h, the contract in include/dptrain/train.h), one named
 * function per stage: forward and backward over the replica's slice, the gradient exchange
 * (full, sharded, 16-bit, buckets or sparse tables), the agreement on the step, the optimizer,
 * the non-finite policy. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "core/train/batch.h"
#include "core/train/exchange.h"
#include "core/train/exchange_exact.h"
#include "core/train/optimizer.h"
#include "core/train/step.h"
#include "core/train/train_buckets.h"
#include "core/train/train_sparse.h"
#include "core/train/train_split.h"
#include "dptrain/train.h"

/* How much longer the slowest replica's forward and backward took than the replicas' mean, from
 * the gathered step stats (seconds). In replica order, so the same on every replica; 0 for
 * one replica. The synchronized step runs at the slowest replica's pace: this is what uneven
 * replicas (a slower device or core, a busier host) cost the step. */
static double train_imbalance(const step_stats *gathered, int count) {
  double slowest = 0, total = 0;
  for (int i = 0; i < count; ++i) {
    slowest = gathered[i].compute > slowest ? gathered[i].compute : slowest;
    total += gathered[i].compute;
  }
  return count > 0 ? slowest - total / (double)count : 0;
}

/* The targets of the whole global batch at `bstart` (bcount samples): its samples for a
 * classifier; for a token model its labelled positions, which every replica counts alike from
 * the batch's labels (the masking is keyed by the seed, the epoch and the sequence alone), with
 * no exchange before the backward pass. */
static dpt_status global_targets(const replica *r, replica_state *s, int64_t epoch, size_t bstart,
                                 size_t bcount, int64_t *targets) {
  if (s->labels == 1) {
    *targets = (int64_t)bcount;
    return DPT_OK;
  }
  DPT_TRY(dpt_dataset_gather_transformed(r->cfg->data.train, s->perm + bstart, bcount,
                                         &r->cfg->data.transform, (uint64_t)epoch, NULL,
                                         s->hbatch));
  *targets = dpt_train_count_targets(s->hbatch, bcount * s->labels);
  return DPT_OK;
}

/* One micro-batch of the slice (samples [ms, ms + mc) of the slice at `start` of the global batch
 * at `bstart`): loaded, then forward and backward with the loss gradient scaled by `scale`; its
 * loss and counts added to *mine. */
static dpt_status micro_batch(replica *r, replica_state *s, int64_t epoch, size_t bstart,
                              size_t start, size_t ms, size_t mc, float scale, step_stats *mine) {
  dpt_status st;
  const double tl = dpt_now();
  if (s->ltrain) {
    st = dpt_train_load_records(s, s->ltrain, s->idx + ms, mc);
    if (st == DPT_OK) s->slice = mc;
  } else {
    st = dpt_train_load_batch(s, r->cfg->data.train, s->perm + bstart + start + ms, mc,
                              &r->cfg->data.transform, epoch);
  }
  dpt_train_trace_since(s, DPT_TRACE_DATA, "load", tl);
  if (st == DPT_OK)
    mine->targets += s->labels == 1 ? (int64_t)mc : dpt_train_count_targets(s->hy, mc * s->labels);
  /* Dropout's mask is keyed by the sample's place in the global batch, not in the slice. */
  if (st == DPT_OK)
    st = dpt_model_set_step(s->model, r->cfg->schedule.seed, (uint64_t)s->t.step,
                            (uint32_t)(start + ms));
  double loss = 0;
  int64_t correct = 0;
  s->in_step = 1;
  s->trace_t = dpt_now();
  if (st == DPT_OK) st = dpt_model_train_step(s->model, s->x, s->y, mc, scale, &loss, &correct);
  s->in_step = 0;
  mine->loss_sum += loss;
  mine->correct += correct;
  return st;
}

/* deterministic: the slice as its groups, each run alone from the step's batch-norm buffers and
 * kept apart for the exact exchange (exchange_exact.c). */
static dpt_status by_groups(replica *r, replica_state *s, int64_t epoch, size_t bstart,
                            size_t start, size_t count, float scale, step_stats *mine) {
  const size_t G = dpt_train_exact_group(s);
  dpt_status st = DPT_OK;
  for (size_t ms = 0; ms < count && st == DPT_OK; ms += G) {
    const size_t mc = count - ms < G ? count - ms : G;
    step_stats one;
    memset(&one, 0, sizeof one);
    st = dpt_train_exact_rewind(s);
    if (st == DPT_OK) st = micro_batch(r, s, epoch, bstart, start, ms, mc, scale, &one);
    mine->targets += one.targets;
    mine->correct += one.correct;
    if (st == DPT_OK) st = dpt_train_exact_keep(s, one.loss_sum);
  }
  return st;
}

/* Loads this replica's slice of the global batch at `bstart` (bcount samples) and runs forward
 * and backward. Returns the local outcome, which the step's exchange announces. */
static dpt_status forward_backward(replica *r, replica_state *s, int64_t epoch, size_t k,
                                   size_t bstart, size_t bcount, step_stats *mine) {
  size_t start, count;
  /* deterministic: no group kept yet, whatever happens below */
  dpt_status st = s->exact ? dpt_train_exact_begin(s, bcount) : DPT_OK;
  if (st == DPT_OK) st = dpt_train_split_slice(r, s, bcount, &start, &count);
  if (st != DPT_OK) return st;
  mine->samples = (int64_t)count;
  s->slice = 0;
  if (s->pending != DPT_OK) return s->pending; /* failed since the last exchange */
  if (count == 0)                              /* contributes nothing to the sum */
    return dpt_buffer_fill_f32(dpt_model_grads(s->model), 0, dpt_model_num_params(s->model), 0.0f);
  int64_t targets = 0;
  st = global_targets(r, s, epoch, bstart, bcount, &targets);
  /* Per-replica records: the replica's slice of step k by the epoch rule, from its own shards
   * (its dpt_interactions_local_batch is this split's count). */
  if (st == DPT_OK && s->ltrain)
    st = dpt_interactions_step_indices(s->ltrain, r->cfg->schedule.seed, (uint64_t)epoch,
                                       r->cfg->schedule.global_batch, (uint64_t)k, s->idx);
  /* The loss gradient is scaled by 1/(targets in this global batch): the sum over replicas is
   * the batch's mean over its targets, whatever the split (and for a kept, smaller last batch
   * too). For a classifier that is 1/(samples), as before targets existed. A batch without a
   * target has no loss and gets a zero gradient. */
  const float scale = targets > 0 ? 1.0f / (float)targets : 0.0f;
  if (st == DPT_OK && s->sparse) st = dpt_train_sparse_prepare(s);
  if (s->exact)
    return st == DPT_OK ? by_groups(r, s, epoch, bstart, start, count, scale, mine) : st;
  /* The slice as micro-batches (one without accumulate), their gradients summed. */
  const size_t K = s->acc ? r->cfg->schedule.accumulate : 1;
  int summed = 0; /* micro-batches whose gradient acc holds */
  /* Buckets start during backward when its gradient is the step's (no micro-batches to add). */
  dpt_train_buckets_arm(s, K == 1 && !r->cfg->exchange.sync_bn); /* sync-bn sums in backward */
  for (size_t j = 0; j < K && st == DPT_OK; ++j) {
    size_t ms = 0, mc = count;
    if (K > 1) st = dpt_batch_split(count, (int)K, (int)j, &ms, &mc);
    if (st != DPT_OK || mc == 0) continue;
    st = micro_batch(r, s, epoch, bstart, start, ms, mc, scale, mine);
    if (st != DPT_OK || K == 1) continue;
    dpt_buffer *g = dpt_model_grads(s->model);
    const size_t np = dpt_model_num_params(s->model);
    const int last = ms + mc == count;
    st = last     ? (summed ? dpt_axpy(s->be, np, 1.0f, s->acc, 0, g, 0) : DPT_OK)
         : summed ? dpt_axpy(s->be, np, 1.0f, g, 0, s->acc, 0)
                  : dpt_buffer_copy(s->acc, 0, g, 0, np * sizeof(float));
    summed = 1;
  }
  return st;
}

/* Whether the step needs the gradient norm agreed by every replica: the sharded step clips by
 * the norm of the whole gradient, which no replica holds alone; with the full step each
 * replica computes it on its own backend, and a float sum can overflow where a double sum
 * does not, so when a non-finite step is skipped or rolled back they agree on its finiteness
 * before anyone steps. */
static int needs_norm(const replica *r, const replica_state *s) {
  const dpt_train_config *cfg = r->cfg;
  if (cfg->optim.clip_norm <= 0.0f) return 0;
  return s->mode == STEP_SHARDED ||
         (cfg->checks.on_nonfinite != DPT_NONFINITE_STOP && r->count > 1);
}

/* Sums the gradients over the replicas: the complete sum of this replica's shard (sharded
 * step) or of everything (full step). Every replica joins, whatever its local outcome. */
static dpt_status reduce_gradients(replica *r, replica_state *s, dpt_status local,
                                   step_stats *mine) {
  dpt_train_keep_failure(s, local);
  const train_exchange *x = s->exchange;
  s->unsettled = x->stepped && x->stepped(s); /* buckets updating in parts: the state moves */
  dpt_status st = DPT_OK;
  if (x->reduce) {
    const double t0 = dpt_now();
    exchange_times t;
    st = x->reduce(r, s, &t);
    s->t.comm += dpt_now() - t0 - t.optimizer;
    s->t.optimizer += t.optimizer;
    s->t.exchange += t.busy;
    s->t.exposed += t.exposed;
    if (dpt_train_out_of_step(st)) return dpt_train_stop_after(s, st);
  }
  /* A non-finite value in the reduced gradient is caught whatever the loss said, alike on every
   * replica. Where the step agrees on the gradient norm, it makes the norm non-finite: no
   * count. */
  if (st == DPT_OK && s->pending == DPT_OK && !needs_norm(r, s))
    st = x->count_nonfinite(s, &mine->bad_grads);
  return st;
}

/* The squared gradient norm over this replica's range (its shard, or everything), summed over
 * the replicas in replica order: the same on every replica. */
static dpt_status agree_grad_norm(replica *r, replica_state *s, double *sumsq) {
  step_stats mine, sum;
  memset(&mine, 0, sizeof mine);
  dpt_range whole;
  size_t n = 0;
  const dpt_range *rg = dpt_train_own_ranges(s, &whole, &n);
  dpt_status local = DPT_OK;
  if (s->pending == DPT_OK) local = dpt_optimizer_grad_sumsq(s->opt, rg, n, &mine.sumsq);
  DPT_TRY(dpt_train_exchange_stats(r, s, &mine, &sum, local, "the gradient norm"));
  *sumsq = sum.sumsq;
  return DPT_OK;
}

/* The step's decision, taken alike on every replica from the exchanged sums: step, give up on
 * it (*bad: a non-finite loss, reduced gradient or gradient norm, which the policy skips or
 * rolls back) or stop (the same under DPT_NONFINITE_STOP). */
static dpt_status agree_on_step(replica *r, replica_state *s, const step_stats *sum, int64_t epoch,
                                size_t k, int *bad, double *sumsq) {
  const dpt_train_config *cfg = r->cfg;
  *bad = 0;
  *sumsq = 0;
  const char *what = !isfinite(sum->loss_sum) ? "the loss is"
                     : sum->bad_grads > 0     ? "the reduced gradient has values that are"
                                              : NULL;
  if (!what && needs_norm(r, s)) {
    DPT_TRY(agree_grad_norm(r, s, sumsq));
    if (!isfinite(*sumsq)) what = "the gradient norm is";
  }
  if (!what) return DPT_OK;
  if (cfg->checks.on_nonfinite == DPT_NONFINITE_STOP)
    return dpt_set_error(DPT_ERR_NONFINITE,
                         "%s not finite at step %lld (epoch %lld, batch %zu); lower the "
                         "learning rate, or pass --on-nonfinite skip or rollback",
                         what, (long long)s->t.step, (long long)epoch + 1, k + 1);
  *bad = 1;
  return DPT_OK;
}

/* The optimizer step: the shard's update and the parameter all-gather (sharded), or the whole
 * update. A local failure is kept for the next exchange and the all-gather is joined
 * regardless, so that no replica waits for one that gave up. *skipped: the optimizer found a
 * non-finite gradient norm and the policy does not stop (the same on every replica). Where the
 * gradient buckets did both in parts (dpt_train_buckets_stepped), the step is only counted. */
static dpt_status optimizer_step(replica *r, replica_state *s, double sumsq, int *skipped) {
  const train_exchange *x = s->exchange;
  *skipped = 0;
  if (x->stepped && x->stepped(s)) { /* updated and gathered bucket by bucket: count the step */
    if (s->pending == DPT_OK) dpt_train_keep_failure(s, dpt_optimizer_end_step(s->opt));
    return DPT_OK;
  }
  const double t0 = dpt_now();
  dpt_status st = x->update(r, s, sumsq);
  if (dpt_train_out_of_step(st)) return st;
  *skipped = st == DPT_ERR_NONFINITE && r->cfg->checks.on_nonfinite != DPT_NONFINITE_STOP;
  if (!*skipped) dpt_train_keep_failure(s, st);
  /* With DPT_NONFINITE_SKIP an update that made parameters non-finite stops the run at the next
   * exchange: no later step can undo it, and skipping would hide it. */
  int64_t bad = 0;
  if (!*skipped && st == DPT_OK && r->cfg->checks.on_nonfinite == DPT_NONFINITE_SKIP &&
      s->pending == DPT_OK) {
    dpt_train_keep_failure(s, dpt_train_count_nonfinite_own(s, dpt_model_params(s->model), &bad));
    s->bad_params = bad > 0;
  }
  s->t.optimizer += dpt_now() - t0;
  dpt_train_trace_since(s, DPT_TRACE_OPTIMIZER, "optimizer", t0);
  return x->gather ? x->gather(r, s) : DPT_OK;
}

/* Skipping cannot hide a diverged run: past the limit (max_skipped) the run fails. The counts
 * are the same on every replica. */
static dpt_status check_skipped(const replica *r, const replica_state *s) {
  const int64_t limit = r->cfg->checks.max_skipped, share = s->t.planned_steps / 100;
  const int64_t total = share > limit ? share : limit;
  if (limit < 0) return DPT_OK;
  if (s->t.skipped_in_a_row > limit)
    return dpt_set_error(DPT_ERR_NONFINITE,
                         "%lld steps in a row were skipped for non-finite values, up to step "
                         "%lld: the run diverged; lower the learning rate, or raise the limit "
                         "(max_skipped, %lld)",
                         (long long)s->t.skipped_in_a_row, (long long)s->t.step, (long long)limit);
  if (s->t.skipped > total)
    return dpt_set_error(DPT_ERR_NONFINITE,
                         "%lld of the first %lld steps were skipped for non-finite values, more "
                         "than %lld (max_skipped, or 1 %% of the run's %lld steps if larger)",
                         (long long)s->t.skipped, (long long)s->t.step, (long long)total,
                         (long long)s->t.planned_steps);
  return DPT_OK;
}

/* With DPT_NONFINITE_SKIP: the buffers are kept before the step (restore 0) and put back when the
 * step is skipped (restore 1), so a diverging batch leaves no non-finite running statistic. */
static dpt_status keep_buffers(replica_state *s, int restore) {
  if (!s->kept_buffers || s->pending != DPT_OK) return DPT_OK;
  dpt_buffer *bufs = dpt_model_buffers(s->model);
  size_t bytes = dpt_model_num_buffer_floats(s->model) * sizeof(float);
  return restore ? dpt_buffer_copy(bufs, 0, s->kept_buffers, 0, bytes)
                 : dpt_buffer_copy(s->kept_buffers, 0, bufs, 0, bytes);
}

/* Each replica's batch norm running statistics come from its own slice: replica 0's are given
 * to every replica after each step, as PyTorch DDP broadcasts module buffers, so the replicas
 * stay identical. With sync-bn they are identical already. */
static dpt_status share_buffers(replica *r, replica_state *s) {
  const size_t nb = dpt_model_num_buffer_floats(s->model);
  if (nb == 0 || r->cfg->exchange.sync_bn || s->mode == STEP_LOCAL || r->count == 1 || s->exact)
    return DPT_OK; /* sync-bn and the exact exchange leave them identical */
  dpt_status st =
      dpt_broadcast_buffer(r->comm, dpt_model_buffers(s->model), 0, nb * sizeof(float), 0);
  if (dpt_train_out_of_step(st)) return st;
  dpt_train_keep_failure(s, st);
  return DPT_OK;
}

/* The step's contribution to the exchange besides its sums: a stop request, and on replica 0
 * whether checkpoint_minutes have passed since the last checkpoint. */
static void step_requests(const replica *r, const replica_state *s, step_stats *mine) {
  const dpt_train_config *cfg = r->cfg;
  if (cfg->checks.stop_request) mine->stop = *cfg->checks.stop_request;
  if (r->index == 0 && cfg->checkpoints.checkpoint_dir && cfg->checkpoints.checkpoint_minutes > 0)
    mine->ckpt_due = dpt_now() - s->t.last_ckpt >= cfg->checkpoints.checkpoint_minutes * 60.0;
}

/* A step that was not finite under a policy other than stop: skipped, its buffers put back, or
 * left for the caller to roll back. */
static dpt_status give_up_step(replica *r, replica_state *s, step_outcome *out) {
  if (r->cfg->checks.on_nonfinite == DPT_NONFINITE_ROLLBACK) {
    out->rollback = 1;
    return DPT_OK;
  }
  ++s->t.skipped;
  ++s->t.skipped_in_a_row;
  dpt_train_keep_failure(s, keep_buffers(s, 1));
  return check_skipped(r, s);
}

/* The periodic drift check after a step. Parameters or buffers that the update made
 * non-finite (an overflow in finite gradients or batch statistics) are, under the rollback
 * policy, rolled back like a non-finite step: every replica finds it in the exchanged sums. */
static dpt_status check_after_step(replica *r, replica_state *s, step_outcome *out) {
  const dpt_train_config *cfg = r->cfg;
  if (cfg->checks.check_every <= 0 || s->t.step % cfg->checks.check_every != 0) return DPT_OK;
  dpt_status st = dpt_train_check_drift(r, s, s->t.step);
  if (st == DPT_ERR_NONFINITE && cfg->checks.on_nonfinite == DPT_NONFINITE_ROLLBACK) {
    dpt_clear_error();
    out->rollback = 1;
    return DPT_OK;
  }
  return st;
}

/* The step's figures for the run's log, from the agreed sums. */
static void note_step(const replica *r, replica_state *s, const step_stats *sum, int bad,
                      double sumsq, step_outcome *out) {
  out->given_up = bad;
  out->loss = sum->targets ? sum->loss_sum / (double)sum->targets : NAN;
  out->grad_norm = bad ? NAN : needs_norm(r, s) ? sqrt(sumsq) : s->grad_norm;
  out->samples = sum->samples;
  s->grad_norm = NAN; /* until the next step's optimizer sets it */
}

/* One synchronized step on global batch k of the epoch (see train.h). Adds the batch's loss
 * and samples to *loss and *samples unless the step was given up. */
dpt_status dpt_train_step(replica *r, replica_state *s, int64_t epoch, size_t k, double *loss,
                          int64_t *samples, step_outcome *out) {
  const dpt_train_config *cfg = r->cfg;
  size_t bstart = 0,
         bcount = cfg->schedule.global_batch; /* per-replica records: every step whole */
  if (!s->ltrain)
    DPT_TRY(dpt_sampler_batch(dpt_dataset_count(cfg->data.train), cfg->schedule.global_batch,
                              cfg->schedule.keep_last, k, &bstart, &bcount));
  step_stats mine, sum;
  memset(&mine, 0, sizeof mine);
  memset(out, 0, sizeof *out);
  dpt_train_keep_failure(s, keep_buffers(s, 0));
  const double t0 = dpt_now();
  dpt_status st = forward_backward(r, s, epoch, k, bstart, bcount, &mine);
  /* The proportional split needs the device's work timed, not its submission: a GPU backend
   * returns from backward with kernels still queued. So does an exchange after backward, which
   * would wait for them anyway: its time is then the communication alone. */
  const int device_behind = dpt_backend_get_kind(s->be) != DPT_BACKEND_CPU;
  if (st == DPT_OK &&
      (dpt_train_split_measures(s) || (device_behind && s->mode != STEP_LOCAL && !s->buckets)))
    st = dpt_backend_synchronize(s->be);
  dpt_train_split_slow_down(s, dpt_now() - t0);
  out->compute = mine.compute = dpt_now() - t0;
  s->t.compute += mine.compute;
  st = reduce_gradients(r, s, st, &mine);
  if (dpt_train_out_of_step(st)) return st;
  /* The exact loss on replica 0 alone: adding the others' zeros leaves it exact. */
  if (s->exact) mine.loss_sum = r->index == 0 ? dpt_train_exact_loss(s) : 0.0;
  char what[64];
  snprintf(what, sizeof what, "step %lld", (long long)s->t.step + 1);
  step_requests(r, s, &mine); /* as late as can be: a request during this step ends it */
  DPT_TRY(dpt_train_exchange_stats(r, s, &mine, &sum, st, what));
  s->t.imbalance += train_imbalance(s->gather, r->count);
  dpt_train_split_after_step(r, s);
  out->stop = sum.stop;
  out->ckpt_due = sum.ckpt_due > 0;
  s->unsettled = 1; /* counters and state move until the step ends (train_epoch) */
  ++s->t.step;
  int bad = 0;
  double sumsq = 0;
  DPT_TRY(agree_on_step(r, s, &sum, epoch, k, &bad, &sumsq));
  if (!bad) DPT_TRY(optimizer_step(r, s, sumsq, &bad));
  note_step(r, s, &sum, bad, sumsq, out);
  if (bad) {
    DPT_TRY(give_up_step(r, s, out));
  } else {
    s->t.skipped_in_a_row = 0;
    *loss += sum.loss_sum;
    *samples += sum.targets; /* the epoch's loss is a mean over targets */
  }
  s->t.trained_samples += sum.samples;
  if (out->rollback) return DPT_OK; /* the checkpoint's state replaces everything */
  DPT_TRY(share_buffers(r, s));
  s->unsettled = 0, s->cursor_behind = 1; /* the step's state is whole: the drift check may fail */
  DPT_TRY(check_after_step(r, s, out));
  if (out->rollback) return DPT_OK;
  if (r->index == 0 && cfg->callbacks.on_progress)
    cfg->callbacks.on_progress(epoch + 1, k + 1, s->batches, out->loss, cfg->callbacks.user);
  return DPT_OK;
}
