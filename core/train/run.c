/* Data-parallel training (dpt_train): the replicas as MPI ranks or threads, each running its
 * set-up, the start-up agreements, epochs of synchronized steps with their reports, rollbacks,
 * checkpoints and stops on request.
 *
 * Each replica runs replica_run() on its own thread (threads transport) or process (MPI),
 * with its own backend, model and optimizer. Everything that decides control flow (loss
 * finiteness, gradient norms, fingerprints, evaluation counts) is exchanged with an allgather
 * and combined in replica order, so every replica takes the same branch: no replica can leave
 * a collective that another one enters. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "core/train/config.h"
#include "core/train/evaluate.h"
#include "core/train/exchange.h"
#include "core/train/replica.h"
#include "core/train/setup.h"
#include "core/train/step.h"
#include "core/train/train_buckets.h"
#include "core/train/train_checkpoint.h"
#include "core/train/train_failure.h"
#include "core/train/train_runlog.h"
#include "core/train/train_split.h"
#include "dptrain/train.h"

/* The report of an epoch, after its closing drift check and evaluation. */
static dpt_status report_epoch(replica *r, replica_state *s, int64_t epoch, double epoch_start,
                               double loss, int64_t samples) {
  const dpt_train_config *cfg = r->cfg;
  dpt_train_report rep;
  memset(&rep, 0, sizeof rep);
  rep.epoch = epoch + 1;
  rep.steps = s->t.step;
  rep.skipped_steps = s->t.skipped;
  rep.rollbacks = s->t.rollbacks;
  rep.checkpoints = s->t.checkpoints;
  rep.checkpoint_seconds = s->t.ckpt_time;
  rep.checkpoint = dpt_train_ckpt_path(s);
  rep.train_loss = samples ? loss / (double)samples : NAN;
  rep.test_loss = rep.test_accuracy = rep.test_perplexity = NAN;
  rep.test_auc = rep.test_logloss = NAN;
  /* The epoch's closing fingerprint: the report's param_hash is the current one. */
  DPT_TRY(dpt_train_check_drift(r, s, s->t.step));
  if (cfg->data.test && dpt_dataset_count(cfg->data.test) > 0)
    DPT_TRY(dpt_train_evaluate(r, s, &rep.test_loss, &rep.test_accuracy));
  else if (s->ltest)
    DPT_TRY(dpt_train_evaluate_records(r, s, &rep));
  if (s->labels > 1) rep.test_perplexity = exp(rep.test_loss);
  rep.labels_per_sample = s->labels;
  rep.samples_per_sec = s->t.train_time > 0 ? (double)s->t.trained_samples / s->t.train_time : 0;
  rep.seconds = dpt_now() - epoch_start;
  rep.ranks = r->ranks;
  rep.replicas = r->count;
  rep.param_hash = s->t.hash;
  rep.num_params = dpt_model_num_params(s->model);
  rep.activation_bytes = dpt_model_activation_bytes(s->model);
  rep.sparse_sent_bytes = s->t.sparse_sent;
  rep.sparse_dense_bytes = s->t.sparse_dense;
  rep.backend = s->backend_names;
  rep.shares = dpt_train_split_shares(s);
  rep.compute_seconds = s->t.compute;
  rep.allreduce_seconds = s->t.comm;
  rep.exchange_seconds = s->t.exchange;
  rep.exposed_seconds = s->t.exposed;
  rep.optimizer_seconds = s->t.optimizer;
  rep.imbalance_seconds = s->t.imbalance;
  dpt_train_runlog_eval(r, s, &rep);
  if (r->index == 0 && cfg->callbacks.on_report)
    cfg->callbacks.on_report(&rep, cfg->callbacks.user);
  r->final = rep;
  return DPT_OK;
}

/* How the run stops on request: every replica finished the step and the checkpoint, if any, is
 * written. */
static dpt_status interrupted(const replica_state *s, int64_t request) {
  const char *path = dpt_train_ckpt_path(s);
  return dpt_set_error(DPT_ERR_INTERRUPTED, "after step %lld (request %lld); %s%s",
                       (long long)s->t.step, (long long)request,
                       path ? "resume from checkpoint " : "no checkpoint",
                       path    ? path
                       : s->ck ? " (written on replica 0)"
                               : " (no checkpoint directory)");
}

/* After a step: the rollback, the checkpoint or the stop the replicas agreed on. */
static dpt_status after_step(replica *r, replica_state *s, const step_outcome *o) {
  const dpt_train_config *cfg = r->cfg;
  if (o->rollback) {
    DPT_TRY(dpt_train_ckpt_rollback(r, s));
    return o->stop ? interrupted(s, o->stop) : DPT_OK;
  }
  dpt_train_ckpt_poll(r, s);
  const int every =
      cfg->checkpoints.checkpoint_every > 0 && s->t.step % cfg->checkpoints.checkpoint_every == 0;
  if (cfg->checkpoints.checkpoint_dir && (every || o->ckpt_due || o->stop)) {
    const double tc = dpt_now();
    DPT_TRY(dpt_train_ckpt_save(r, s, o->stop != 0));
    dpt_train_trace_since(s, DPT_TRACE_CHECKPOINT, "checkpoint", tc);
  }
  return o->stop ? interrupted(s, o->stop) : DPT_OK;
}

/* One epoch from the cursor: its permutation, its steps, its report. *stop: max_steps
 * reached. */
static dpt_status train_epoch(replica *r, replica_state *s, int *stop) {
  const dpt_train_config *cfg = r->cfg;
  const int64_t epoch = s->at.epoch;
  const double t0 = dpt_now();
  if (!s->ltrain)
    DPT_TRY(dpt_sampler_permutation(cfg->schedule.seed, (uint64_t)epoch, cfg->schedule.shuffle,
                                    dpt_dataset_count(cfg->data.train), s->perm));
  while (s->at.batch < s->batches && !*stop) {
    step_outcome o;
    runlog_mark m;
    dpt_train_runlog_mark(s, &m);
    DPT_TRY(dpt_train_step(r, s, epoch, s->at.batch, &s->at.loss, &s->at.samples, &o));
    dpt_train_fault_point(r, s);
    dpt_train_runlog_step(r, s, epoch, &m, &o);
    ++s->at.batch;
    s->unsettled = s->cursor_behind = 0; /* step s->t.step is complete */
    DPT_TRY(after_step(r, s, &o));
    *stop = cfg->schedule.max_steps > 0 && s->t.step >= cfg->schedule.max_steps;
  }
  s->t.train_time += dpt_now() - t0;
  DPT_TRY(report_epoch(r, s, epoch, t0, s->at.loss, s->at.samples));
  if (s->at.batch == s->batches) s->at = (train_cursor){epoch + 1, 0, 0, 0};
  return DPT_OK;
}

/* From nothing to the first step: the exchange arrays, the configuration and set-up agreed by
 * every replica, the run's terms, the parameters, a resumed run's progress, the timeline's
 * clocks, the gradient buckets, the log directory. */
static dpt_status start_run(replica *r, replica_state *s) {
  const dpt_train_config *cfg = r->cfg;
  /* Out of memory before anything else: the others time out. */
  DPT_TRY(dpt_train_alloc_exchange(r, s));
  const int mine = r->over_mpi ? 0 : r->index; /* this replica's reader */
  s->ltrain = cfg->data.local_train ? cfg->data.local_train[mine] : NULL;
  s->ltest = cfg->data.local_train && cfg->data.local_test ? cfg->data.local_test[mine] : NULL;
  /* A configuration this replica refuses is announced like any failure to start. */
  dpt_status st = dpt_train_check_config(cfg, r->over_mpi ? r->comm : NULL);
  if (st == DPT_OK) st = dpt_train_replica_setup(r, s);
  if (st == DPT_OK) st = dpt_train_exchange_pick(s, &s->exchange); /* again if buckets change */
  DPT_TRY(dpt_comm_agree_ready(r->comm, st, dpt_last_error(), "replica", NULL));
  DPT_TRY(dpt_train_agree_on_run(r, s));
  DPT_TRY(dpt_train_broadcast_params(r, s));
  DPT_TRY(dpt_train_ckpt_share_resumed(r, s));
  if (s->trace) DPT_TRY(dpt_trace_align(r->comm, s->trace));
  if (cfg->exchange.bucket_bytes == DPT_BUCKET_AUTO && s->mode != STEP_LOCAL && !s->sparse &&
      !s->exact) {
    size_t bytes = 0;
    char table[512] = "";
    DPT_TRY(dpt_train_buckets_measure(r, s->gh ? cfg->exchange.grad_dtype : DPT_COMM_F32, &bytes,
                                      table, sizeof table));
    dpt_train_log(r, "gradient buckets of %zu KiB (all-reduce bus bandwidth: %s)", bytes >> 10,
                  table);
    dpt_status bs = dpt_train_buckets_setup(r, s, bytes);
    if (bs == DPT_OK) bs = dpt_train_exchange_pick(s, &s->exchange);
    DPT_TRY(dpt_comm_agree_ready(r->comm, bs, dpt_last_error(), "replica", NULL));
  }
  if (s->buckets) {
    char line[256];
    dpt_train_buckets_describe(s, line, sizeof line);
    dpt_train_log(r, "%s", line);
  }
  if (dpt_train_exchange_forced())
    dpt_train_log(r, "exchange kind '%s' (DPT_EXCHANGE)", s->exchange->name);
  return dpt_train_runlog_start(r, s); /* the settings are all known now */
}

/* After the last epoch: the report (even of a run resumed at its end), the last checkpoint, the
 * timeline, the final report and parameters. */
static dpt_status finish_run(replica *r, replica_state *s) {
  const dpt_train_config *cfg = r->cfg;
  if (r->final.epoch == 0) { /* resumed at the end: nothing left, the report still made */
    dpt_train_log(r, "nothing left to train: the run is complete at step %lld",
                  (long long)s->t.step);
    DPT_TRY(report_epoch(r, s, s->at.epoch > 0 ? s->at.epoch - 1 : 0, dpt_now(), s->at.loss,
                         s->at.samples));
  }
  if (cfg->checkpoints.checkpoint_dir) DPT_TRY(dpt_train_ckpt_save(r, s, 1));
  if (s->trace) {
    DPT_TRY(dpt_trace_write(r->comm, s->trace, cfg->trace));
    dpt_train_log(r, "timeline written: %s (%zu events of replica 0)", cfg->trace,
                  dpt_trace_count(s->trace));
  }
  if (s->t.step > 0 && s->t.skipped == s->t.step)
    return dpt_set_error(DPT_ERR_NONFINITE,
                         "every one of the %lld steps was skipped for non-finite values: "
                         "nothing was trained",
                         (long long)s->t.step);
  r->final.final = 1;
  r->final.seconds = dpt_now() - s->t.run_start;
  r->final.steps = s->t.step;
  r->final.rollbacks = s->t.rollbacks;
  r->final.checkpoints = s->t.checkpoints;
  r->final.checkpoint_seconds = s->t.ckpt_time;
  r->final.checkpoint = dpt_train_ckpt_path(s);
  dpt_status st = DPT_OK;
  if (cfg->final_params && r->index == 0) st = dpt_model_get_state(s->model, cfg->final_params);
  if (r->index == 0 && cfg->callbacks.on_report)
    cfg->callbacks.on_report(&r->final, cfg->callbacks.user);
  r->final.checkpoint = NULL; /* the path and the shares live as long as the replica's state */
  r->final.backend = dpt_backend_kind_name(dpt_train_backend_of(r));
  r->final.shares = NULL;
  return st;
}

static dpt_status replica_run(replica *r, replica_state *s) {
  const dpt_train_config *cfg = r->cfg;
  DPT_TRY(start_run(r, s));
  s->t.run_start = s->t.last_ckpt = dpt_now();
  /* A rollback needs a checkpoint to go back to. */
  if (cfg->checks.on_nonfinite == DPT_NONFINITE_ROLLBACK && !dpt_train_ckpt_taken(s))
    DPT_TRY(dpt_train_ckpt_save(r, s, 0));
  int stop = cfg->schedule.max_steps > 0 && s->t.step >= cfg->schedule.max_steps;
  while (s->at.epoch < cfg->schedule.epochs && !stop)
    DPT_TRY(train_epoch(r, s, &stop));
  return finish_run(r, s);
}

static void *replica_thread(void *arg) {
  replica *r = arg;
  replica_state s;
  memset(&s, 0, sizeof s);
  r->status = replica_run(r, &s);
  if (r->status != DPT_OK) snprintf(r->error, sizeof r->error, "%s", dpt_last_error());
  r->step = s.t.step;
  dpt_train_state_free(&s);
  return NULL;
}

/* This rank as one replica of an MPI job. */
static dpt_status train_as_rank(const dpt_train_config *cfg, dpt_comm *comm,
                                dpt_train_report *final) {
  replica r;
  memset(&r, 0, sizeof r);
  r.cfg = cfg;
  r.comm = comm;
  r.index = dpt_comm_rank(comm);
  r.count = dpt_comm_size(comm);
  r.ranks = r.count;
  r.local_index = dpt_comm_local_rank(comm); /* MPI_COMM_TYPE_SHARED: the device */
  r.over_mpi = 1;
  replica_state s;
  memset(&s, 0, sizeof s);
  dpt_status st = replica_run(&r, &s);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", dpt_last_error());
  dpt_train_failure_record(cfg, r.index, 0, s.t.step, st, msg);
  dpt_train_survive(&r, &s, st);
  dpt_train_state_free(&s);
  if (st != DPT_OK) return dpt_set_error(st, "%s", msg);
  if (final) *final = r.final;
  return DPT_OK;
}

/* The failure to report from the replica threads: the first one where it happened, else the
 * first replica that saw it on another; -1 when all succeeded. */
static int worst_replica(const replica *reps, int started) {
  int worst = -1;
  for (int i = 0; i < started; ++i) {
    if (reps[i].status == DPT_OK) continue;
    if (worst < 0 || (reps[worst].status == DPT_ERR_PEER && reps[i].status != DPT_ERR_PEER))
      worst = i;
  }
  return worst;
}

/* cfg->devices.replicas replicas as threads of this process, joined by the threads transport. */
static dpt_status train_as_threads(const dpt_train_config *cfg, dpt_train_report *final) {
  const int R = cfg->devices.replicas;
  dpt_comm_group *group = NULL;
  replica *reps = calloc((size_t)R, sizeof *reps);
  pthread_t *threads = calloc((size_t)R, sizeof *threads);
  dpt_status st = reps && threads
                      ? DPT_OK
                      : dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_train: out of host memory");
  if (st == DPT_OK) st = dpt_comm_group_create(R, &group);
  for (int i = 0; i < R && st == DPT_OK; ++i) {
    reps[i] = (replica){.cfg = cfg, .index = i, .count = R, .ranks = 1, .local_index = i};
    st = dpt_comm_group_member(group, i, &reps[i].comm);
  }
  int started = 0;
  while (started < R && st == DPT_OK) {
    if (pthread_create(&threads[started], NULL, replica_thread, &reps[started]) != 0)
      /* The replicas already running stop at their first collective's deadline. */
      st = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_train: cannot start replica thread %d",
                         started);
    else
      ++started;
  }
  for (int i = 0; i < started; ++i)
    pthread_join(threads[i], NULL);
  const int worst = st == DPT_OK ? worst_replica(reps, started) : -1;
  if (worst >= 0) {
    dpt_train_failure_record(cfg, 0, worst, reps[worst].step, reps[worst].status,
                             reps[worst].error);
    st = dpt_set_error(reps[worst].status, "replica %d: %s", worst, reps[worst].error);
  }
  if (st == DPT_OK && final) *final = reps[0].final;
  for (int i = 0; reps && i < R; ++i)
    dpt_comm_destroy(reps[i].comm);
  dpt_comm_group_destroy(group);
  free(reps);
  free(threads);
  return st;
}

dpt_status dpt_train(const dpt_train_config *cfg, dpt_comm *comm, dpt_train_report *final) {
  dpt_train_config full; /* the caller's layout read into this library's */
  const dpt_status st = dpt_train_config_import(cfg, &full);
  if (st != DPT_OK)
    return comm ? dpt_comm_agree_ready(comm, st, dpt_last_error(), "rank", NULL) : st;
  /* Under MPI every rank checks its configuration inside the start-up agreement, so that one
   * rank's refusal stops the others at once. */
  if (comm) return train_as_rank(&full, comm, final);
  DPT_TRY(dpt_train_check_config(&full, NULL));
  return train_as_threads(&full, final);
}
