/* The run's log directory (core/train/train_runlog.h): the settings as JSON, each step's and
 * each evaluation's record as a JSON line and a TensorBoard event (core/log/run_log.h). */
#define _POSIX_C_SOURCE 200809L
#include "core/train/train_runlog.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/error.h"
#include "core/log/run_log.h"
#include "core/train/exchange.h"
#include "dptrain/version.h"

/* A number, or null where it is not finite (JSON has no NaN). */
static json_t *num(double x) {
  return isfinite(x) ? json_real(x) : json_null();
}

static const char *dtype_name(dpt_comm_dtype t) {
  return t == DPT_COMM_F16 ? "f16" : t == DPT_COMM_BF16 ? "bf16" : "f32";
}

static json_t *optim_json(const dpt_optim_config *o) {
  return json_pack(
      "{s:s, s:f, s:f, s:b, s:f, s:f, s:f, s:f, s:s, s:I, s:I, s:f, s:I, s:f, s:f}", "kind",
      dpt_optim_kind_name(o->kind), "lr", (double)o->lr, "momentum", (double)o->momentum,
      "nesterov", o->nesterov, "weight_decay", (double)o->weight_decay, "beta1", (double)o->beta1,
      "beta2", (double)o->beta2, "eps", (double)o->eps, "schedule",
      dpt_schedule_kind_name(o->schedule), "warmup_steps", (json_int_t)o->warmup_steps, "step_size",
      (json_int_t)o->step_size, "gamma", (double)o->gamma, "total_steps",
      (json_int_t)o->total_steps, "min_lr", (double)o->min_lr, "clip_norm", (double)o->clip_norm);
}

static json_t *exchange_json(const replica_state *s, const dpt_train_exchange *x) {
  static const char *const modes[] = {"local", "full", "sharded"};
  return json_pack("{s:s, s:s, s:I, s:s, s:b, s:b, s:b, s:b}", "step", modes[s->mode], "kind",
                   s->exchange ? s->exchange->name : "", "bucket_bytes",
                   (json_int_t)x->bucket_bytes, "grad_dtype", dtype_name(x->grad_dtype),
                   "error_feedback", x->grad_error_feedback, "sparse_tables", x->sparse_tables,
                   "sync_bn", x->sync_bn, "skip_allreduce", x->skip_allreduce);
}

static json_t *schedule_json(const replica_state *s, const dpt_train_schedule *c) {
  return json_pack("{s:I, s:I, s:I, s:I, s:b, s:b, s:I, s:I}", "global_batch",
                   (json_int_t)c->global_batch, "epochs", (json_int_t)c->epochs, "max_steps",
                   (json_int_t)c->max_steps, "seed", (json_int_t)c->seed, "shuffle", c->shuffle,
                   "keep_last", c->keep_last, "accumulate", (json_int_t)c->accumulate,
                   "batches_per_epoch", (json_int_t)s->batches);
}

/* The model as its JSON description (null where it has none). */
static json_t *model_json(const dpt_model_spec *spec) {
  char *text = NULL;
  if (dpt_model_spec_to_json(spec, &text) != DPT_OK) {
    dpt_clear_error();
    return json_null();
  }
  json_t *m = json_loads(text, 0, NULL);
  free(text);
  return m ? m : json_null();
}

/* settings.json: what the trainer knows of the run. */
static json_t *settings_json(const replica *r, const replica_state *s) {
  const dpt_train_config *cfg = r->cfg;
  char started[64];
  const time_t now = time(NULL);
  struct tm tm;
  strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
  json_t *j = json_pack(
      "{s:s, s:s, s:s, s:i, s:i, s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:{s:s?, s:I, s:f, s:b}}",
      "dptrain", dpt_version(), "started", started, "backend", s->backend_names, "ranks", r->ranks,
      "replicas", r->count, "num_params", (json_int_t)dpt_model_num_params(s->model),
      "train_samples", (json_int_t)(cfg->data.train ? dpt_dataset_count(cfg->data.train) : 0),
      "resumed_at_step", (json_int_t)s->t.step, "schedule", schedule_json(s, &cfg->schedule),
      "optimizer", optim_json(&cfg->optim), "exchange", exchange_json(s, &cfg->exchange), "model",
      model_json(&cfg->model), "checkpoints", "dir", cfg->checkpoints.checkpoint_dir, "every",
      (json_int_t)cfg->checkpoints.checkpoint_every, "minutes", cfg->checkpoints.checkpoint_minutes,
      "resume", cfg->checkpoints.resume);
  if (j) json_object_set_new(j, "world_size", json_integer(r->count));
  if (j && cfg->options_json) /* a JSON object: checked by dpt_train_check_config */
    json_object_set_new(j, "options", json_loads(cfg->options_json, 0, NULL));
  return j;
}

dpt_status dpt_train_runlog_start(replica *r, replica_state *s) {
  const dpt_train_config *cfg = r->cfg;
  if (!cfg->log_dir) return DPT_OK;
  dpt_status st = DPT_OK;
  if (r->index == 0) {
    json_t *settings = settings_json(r, s);
    st = settings ? dpt_run_log_open(cfg->log_dir, s->t.step > 0, settings, &s->runlog)
                  : dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "log: out of host memory");
    json_decref(settings);
  }
  DPT_TRY(dpt_comm_agree_ready(r->comm, st, dpt_last_error(), "replica", NULL));
  if (s->runlog)
    dpt_train_log(r, "log: %s (TensorBoard: %s)", cfg->log_dir, dpt_run_log_events_path(s->runlog));
  return DPT_OK;
}

void dpt_train_runlog_mark(const replica_state *s, runlog_mark *m) {
  if (!s->runlog) return;
  m->t = s->t;
  m->lr = (double)dpt_optimizer_lr(s->opt);
  m->start = dpt_now();
}

/* A failed write ends the log (the run goes on): said once. */
static void write_failed(const replica *r, replica_state *s) {
  dpt_train_log(r, "log: %s; no more records are written", dpt_last_error());
  dpt_clear_error();
  dpt_run_log_close(s->runlog);
  s->runlog = NULL;
}

void dpt_train_runlog_step(const replica *r, replica_state *s, int64_t epoch, const runlog_mark *m,
                           const step_outcome *o) {
  if (!s->runlog) return;
  const double secs = dpt_now() - m->start;
  const double sps = secs > 0 ? (double)o->samples / secs : NAN;
  const double exch = s->t.exchange - m->t.exchange, exposed = s->t.exposed - m->t.exposed;
  const int skipped = o->given_up && !o->rollback;
  json_t *line =
      json_pack("{s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:b, s:b}", "step",
                (json_int_t)s->t.step, "epoch", (json_int_t)epoch + 1, "loss", num(o->loss), "lr",
                num(m->lr), "grad_norm", num(o->grad_norm), "samples_per_sec", num(sps), "seconds",
                num(secs), "compute_seconds", num(o->compute), "exchange_seconds", num(exch),
                "exposed_seconds", num(exposed), "skipped", skipped, "rolled_back", o->rollback);
  const dpt_tb_scalar v[] = {
      {"train/loss", o->loss},           {"train/lr", m->lr},
      {"train/grad_norm", o->grad_norm}, {"perf/samples_per_sec", sps},
      {"perf/step_seconds", secs},       {"perf/compute_seconds", o->compute},
      {"perf/exchange_seconds", exch},   {"perf/exposed_seconds", exposed}};
  const dpt_status st = line ? dpt_run_log_write(s->runlog, DPT_RUN_LOG_STEPS, line, s->t.step, v,
                                                 sizeof v / sizeof v[0])
                             : dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "out of host memory");
  json_decref(line);
  if (st != DPT_OK) write_failed(r, s);
}

void dpt_train_runlog_eval(const replica *r, replica_state *s, const dpt_train_report *rep) {
  if (!s->runlog || !(r->cfg->data.test || s->ltest)) return;
  json_t *line = json_pack("{s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:o}", "epoch",
                           (json_int_t)rep->epoch, "step", (json_int_t)rep->steps, "train_loss",
                           num(rep->train_loss), "loss", num(rep->test_loss), "accuracy",
                           num(rep->test_accuracy), "perplexity", num(rep->test_perplexity), "auc",
                           num(rep->test_auc), "logloss", num(rep->test_logloss));
  const dpt_tb_scalar v[] = {{"eval/loss", rep->test_loss},
                             {"eval/accuracy", rep->test_accuracy},
                             {"eval/perplexity", rep->test_perplexity},
                             {"eval/auc", rep->test_auc},
                             {"eval/logloss", rep->test_logloss},
                             {"train/epoch_loss", rep->train_loss}};
  const dpt_status st = line ? dpt_run_log_write(s->runlog, DPT_RUN_LOG_EVALS, line, rep->steps, v,
                                                 sizeof v / sizeof v[0])
                             : dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "out of host memory");
  json_decref(line);
  if (st != DPT_OK) write_failed(r, s);
}

void dpt_train_runlog_free(replica_state *s) {
  dpt_run_log_close(s->runlog);
  s->runlog = NULL;
}
