/* A replica's protocol with the others (core/train/replica.h): its failure kept and announced at
 * the next exchange, the exchange itself, the drift check, sums over the replicas in replica
 * order; its news for the log and the timeline; the 16-bit conversions of its gradient. What the
 * trainer's files (set-up, step, evaluation, run) and its parts (buckets, sparse tables,
 * checkpoints) all call. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "core/train/replica.h"

/* Keeps this replica's first local failure (with its message) for the next exchange. */
void dpt_train_keep_failure(replica_state *s, dpt_status st) {
  if (st == DPT_OK || s->pending != DPT_OK) return;
  s->pending = st;
  snprintf(s->pending_msg, sizeof s->pending_msg, "%s", dpt_last_error());
}

void dpt_train_log(const replica *r, const char *fmt, ...) {
  if (r->index != 0 || !r->cfg->callbacks.on_log) return;
  char line[1536];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  r->cfg->callbacks.on_log(line, r->cfg->callbacks.user);
}

/* Whether a collective's failure means the replicas are out of step (one stalled or gone, or
 * calls that disagree): no further collective can succeed, and entering one would wait out
 * another deadline, so the replica stops at once. */
int dpt_train_out_of_step(dpt_status st) {
  return st == DPT_ERR_TIMEOUT || st == DPT_ERR_MISMATCH;
}

/* The failure to stop with when a collective failed: the collective's (so that a caller sees a
 * timeout as one and can end the job), quoting this replica's own earlier failure if any. */
dpt_status dpt_train_stop_after(replica_state *s, dpt_status st) {
  if (s->pending == DPT_OK || strcmp(dpt_last_error(), s->pending_msg) == 0) return st;
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", dpt_last_error());
  return dpt_set_error(st, "%s; before it, this replica failed: %.700s", msg, s->pending_msg);
}

typedef dpt_status (*convert_fn)(dpt_backend *, size_t, const dpt_buffer *, size_t, dpt_buffer *,
                                 size_t);

dpt_status dpt_train_narrow_16(replica_state *s, dpt_comm_dtype dt, size_t off, size_t n) {
  const convert_fn narrow = dt == DPT_COMM_BF16 ? dpt_f32_to_bf16 : dpt_f32_to_f16;
  const convert_fn widen = dt == DPT_COMM_BF16 ? dpt_bf16_to_f32 : dpt_f16_to_f32;
  dpt_buffer *g = dpt_model_grads(s->model);
  dpt_status st = DPT_OK;
  if (s->resid) st = dpt_axpy(s->be, n, 1.0f, s->resid, off, g, off);
  if (st == DPT_OK) st = narrow(s->be, n, g, off, s->gh, off);
  if (st == DPT_OK && s->resid) { /* resid = g - f32(narrow(g)) */
    st = widen(s->be, n, s->gh, off, s->resid, off);
    if (st == DPT_OK) st = dpt_axpy(s->be, n, -1.0f, g, off, s->resid, off);
    if (st == DPT_OK) st = dpt_scale(s->be, n, -1.0f, s->resid, off);
  }
  return st;
}

dpt_status dpt_train_widen_16(replica_state *s, dpt_comm_dtype dt, size_t off, size_t n) {
  const convert_fn widen = dt == DPT_COMM_BF16 ? dpt_bf16_to_f32 : dpt_f16_to_f32;
  return widen(s->be, n, s->gh, off, dpt_model_grads(s->model), off);
}

/* What a replica says of its failure at an exchange: its own, or DPT_ERR_COMM from a
 * collective, which is how a collective reports that another replica announced a failure
 * before it (no data moved) or that the transport broke. */
enum { FAILED_HERE = 1, FAILED_ELSEWHERE = 2 };

/* After an exchange, the failure this replica stops with: a collective's DPT_ERR_COMM becomes
 * DPT_ERR_PEER when another replica announced a failure of its own, which that replica
 * reports; otherwise this replica's own. */
static dpt_status pending_outcome(const replica *r, const replica_state *s, const char *what) {
  if (s->pending == DPT_ERR_COMM)
    for (int i = 0; i < r->count; ++i)
      if (s->gather[i].failed == FAILED_HERE)
        return dpt_set_error(DPT_ERR_PEER, "%s failed on another replica", what);
  return dpt_set_error(s->pending, "%s", s->pending_msg);
}

/* Every exchange that decides control flow goes through here: the replica's stats and its
 * failure flag are gathered from all replicas and summed in replica order (identical
 * everywhere). `local` is this replica's outcome since the last exchange: a failure is kept
 * (with its message) and announced, so every replica stops at the same exchange, the failed
 * one with its own message, the others with DPT_ERR_PEER saying where it happened. */
dpt_status dpt_train_exchange_stats(replica *r, replica_state *s, step_stats *mine, step_stats *sum,
                                    dpt_status local, const char *what) {
  dpt_train_keep_failure(s, local);
  mine->failed = s->pending == DPT_OK         ? 0
                 : s->pending == DPT_ERR_COMM ? FAILED_ELSEWHERE
                                              : FAILED_HERE;
  mine->bad_params |= s->bad_params;
  dpt_status st = dpt_allgather_host(r->comm, mine, sizeof *mine, s->gather);
  if (st != DPT_OK) return dpt_train_stop_after(s, st);
  if (s->pending != DPT_OK) return pending_outcome(r, s, what);
  memset(sum, 0, sizeof *sum);
  for (int i = 0; i < r->count; ++i) {
    sum->loss_sum += s->gather[i].loss_sum;
    sum->correct += s->gather[i].correct;
    sum->samples += s->gather[i].samples;
    sum->targets += s->gather[i].targets;
    sum->failed += s->gather[i].failed;
    sum->sumsq += s->gather[i].sumsq;
    sum->bad_grads += s->gather[i].bad_grads;
    sum->bad_params += s->gather[i].bad_params;
    sum->stop = s->gather[i].stop > sum->stop ? s->gather[i].stop : sum->stop;
    sum->ckpt_due += s->gather[i].ckpt_due;
  }
  if (sum->failed) return dpt_set_error(DPT_ERR_PEER, "%s failed on another replica", what);
  if (sum->bad_params)
    return dpt_set_error(DPT_ERR_NONFINITE,
                         "the parameters are not finite after step %lld (found at %s); lower "
                         "the learning rate or clip the gradients (--clip-norm)",
                         (long long)s->t.step, what);
  return DPT_OK;
}

/* Fingerprints the parameters on every replica and compares them; keeps the fingerprint in
 * s->t.hash for the reports. */
dpt_status dpt_train_check_drift(replica *r, replica_state *s, int64_t step) {
  size_t n = dpt_model_state_size(s->model);
  step_stats mine, sum;
  memset(&mine, 0, sizeof mine);
  dpt_status st = s->pending == DPT_OK ? dpt_model_get_state(s->model, s->hparams) : DPT_OK;
  if (st == DPT_OK && s->pending == DPT_OK) {
    mine.hash = dpt_fingerprint(s->hparams, n * sizeof(float));
    for (size_t i = 0; i < n && !mine.bad_params; ++i)
      mine.bad_params = !isfinite(s->hparams[i]);
  }
  DPT_TRY(dpt_train_exchange_stats(r, s, &mine, &sum, st, "the parameter fingerprint"));
  s->t.hash = mine.hash;
  char list[512] = "";
  size_t len = 0;
  int differ = 0;
  for (int i = 1; i < r->count; ++i) {
    if (s->gather[i].hash == s->gather[0].hash) continue;
    ++differ;
    if (len < sizeof list - 16)
      len += (size_t)snprintf(list + len, sizeof list - len, "%s%d", differ > 1 ? ", " : "", i);
  }
  if (differ && s->mode != STEP_LOCAL) /* without the exchange, drift is the point */
    return dpt_set_error(DPT_ERR_MISMATCH,
                         "replica drift at step %lld: replicas %s differ from replica 0 "
                         "(parameter fingerprint %016llx)",
                         (long long)step, list, (unsigned long long)s->gather[0].hash);
  return DPT_OK;
}

/* Sync-bn's sum of doubles over the replicas: gathered, then added in replica order, so every
 * replica gets the same bits. */
dpt_status dpt_train_sum_over_replicas(void *ctx, double *data, size_t count) {
  replica *r = ctx;
  double *all = malloc((size_t)r->count * count * sizeof(double));
  if (!all) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "sync-bn: out of host memory");
  dpt_status st = dpt_allgather_host(r->comm, data, count * sizeof(double), all);
  for (size_t j = 0; st == DPT_OK && j < count; ++j) {
    double sum = 0;
    for (int i = 0; i < r->count; ++i)
      sum += all[(size_t)i * count + j];
    data[j] = sum;
  }
  free(all);
  return st;
}

/* The timeline's event [t0, now] on `track`, when there is a timeline. */
void dpt_train_trace_since(replica_state *s, dpt_trace_track track, const char *name, double t0) {
  if (s->trace) dpt_trace_event(s->trace, track, name, t0, dpt_now());
}
