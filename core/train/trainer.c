/* Data-parallel training: replicas, the synchronized step, drift checks and data-parallel
 * evaluation. The step follows the contract in include/dptrain/train.h, one named function per
 * stage (train_step).
 *
 * Each replica runs replica_run() on its own thread (threads transport) or process (MPI),
 * with its own backend, model and optimizer. Everything that decides control flow (loss
 * finiteness, gradient norms, fingerprints, evaluation counts) is exchanged with an allgather
 * and combined in replica order, so every replica takes the same branch: no replica can leave
 * a collective that another one enters. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "core/train/run_terms.h"
#include "core/train/trace.h"
#include "core/train/replica.h"
#include "core/train/train_split.h"
#include "core/train/train_sparse.h"
#include "core/train/train_buckets.h"
#include "core/train/train_checkpoint.h"
#include "dptrain/metrics.h"
#include "dptrain/train.h"

void dpt_train_config_default(dpt_train_config *cfg) {
  if (!cfg) return;
  memset(cfg, 0, sizeof *cfg);
  dpt_optim_config_default(&cfg->optim, DPT_OPTIM_SGD);
  cfg->optim.lr = 0.05f;
  cfg->optim.momentum = 0.9f;
  cfg->backend = DPT_BACKEND_CPU;
  cfg->device = -1;
  cfg->replicas = 1;
  cfg->global_batch = 256;
  cfg->epochs = 10;
  cfg->shuffle = 1;
  cfg->check_every = 100;
  cfg->max_skipped = 10;
  cfg->keep_checkpoints = 3;
  cfg->max_rollbacks = 3;
  cfg->rollback_lr_scale = 1.0;
}

static step_mode step_mode_of(const dpt_train_config *cfg, int replicas) {
  if (cfg->skip_allreduce) return STEP_LOCAL;
  if (cfg->sparse_tables) return STEP_FULL; /* the dense ranges all-reduced, see train.h */
  if (cfg->grad_dtype != DPT_COMM_F32) return STEP_FULL; /* shards are cut for float32 */
  /* Every element is updated by one replica from the same sum the ring all-reduce gives, so
   * the parameters are bit for bit those of the full step, with 1/R of the optimizer's work
   * and state per replica. */
  if (replicas > 1 && !cfg->full_optimizer_step) return STEP_SHARDED;
  return STEP_FULL;
}

static void state_free(replica_state *s) {
  dpt_train_ckpt_free(s);    /* first: it waits for a checkpoint being written */
  dpt_train_buckets_free(s); /* waits for requests still running */
  dpt_trace_destroy(s->trace);
  dpt_train_sparse_free(s);
  dpt_train_split_free(s);
  dpt_buffer_free(s->x);
  dpt_buffer_free(s->acc);
  dpt_buffer_free(s->gh);
  dpt_buffer_free(s->resid);
  dpt_buffer_free(s->kept_buffers);
  dpt_buffer_free(s->y);
  dpt_optimizer_destroy(s->opt);
  dpt_model_destroy(s->model);
  dpt_backend_destroy(s->be);
  free(s->hx);
  free(s->hy);
  free(s->hbatch);
  free(s->perm);
  free(s->idx);
  free(s->hparams);
  free(s->shard);
  if (s->gather != s->gather_small) free(s->gather);
  if (s->terms != s->terms_small) free(s->terms);
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
static dpt_status exchange(replica *r, replica_state *s, step_stats *mine, step_stats *sum,
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

/* Fingerprints the parameters on every replica and compares them; keeps the fingerprint in
 * s->t.hash for the reports. */
static dpt_status check_drift(replica *r, replica_state *s, int64_t step) {
  size_t n = dpt_model_state_size(s->model);
  step_stats mine, sum;
  memset(&mine, 0, sizeof mine);
  dpt_status st = s->pending == DPT_OK ? dpt_model_get_state(s->model, s->hparams) : DPT_OK;
  if (st == DPT_OK && s->pending == DPT_OK) {
    mine.hash = dpt_fingerprint(s->hparams, n * sizeof(float));
    for (size_t i = 0; i < n && !mine.bad_params; ++i)
      mine.bad_params = !isfinite(s->hparams[i]);
  }
  DPT_TRY(exchange(r, s, &mine, &sum, st, "the parameter fingerprint"));
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

/* Uploads the given samples, transformed by t for `epoch` (t NULL: as stored), as the device
 * batch. */
static dpt_status load_batch(replica_state *s, const dpt_dataset *ds, const uint64_t *idx,
                             size_t count, const dpt_data_transform *t, int64_t epoch) {
  const size_t input = dpt_model_input_size(s->model);
  dpt_status st = dpt_dataset_gather_transformed(ds, idx, count, t, (uint64_t)epoch, s->hx, s->hy);
  if (st == DPT_OK) st = dpt_buffer_upload(s->x, 0, s->hx, count * input * sizeof(float));
  if (st == DPT_OK) st = dpt_buffer_upload(s->y, 0, s->hy, count * s->labels * sizeof(int32_t));
  return st;
}

/* The targets among n labels: those not DPT_IGNORE_INDEX. */
static int64_t count_targets(const int32_t *labels, size_t n) {
  int64_t t = 0;
  for (size_t i = 0; i < n; ++i)
    t += labels[i] != DPT_IGNORE_INDEX;
  return t;
}

/* Data-parallel evaluation: replica r takes a contiguous shard of the test set. */
static dpt_status evaluate(replica *r, replica_state *s, double *loss, double *accuracy) {
  const dpt_dataset *ds = r->cfg->test;
  /* The test set is normalized like the training set, never augmented. */
  dpt_data_transform norm = r->cfg->transform;
  norm.crop_pad = 0;
  norm.hflip = 0;
  size_t start, count;
  DPT_TRY(dpt_batch_split(dpt_dataset_count(ds), r->count, r->index, &start, &count));
  step_stats mine, sum;
  memset(&mine, 0, sizeof mine);
  mine.samples = (int64_t)count;
  dpt_status st = s->pending;
  for (size_t done = 0; done < count && st == DPT_OK;) {
    size_t b = count - done < s->max_micro ? count - done : s->max_micro;
    for (size_t i = 0; i < b; ++i)
      s->idx[i] = start + done + i;
    double l = 0;
    int64_t c = 0;
    st = load_batch(s, ds, s->idx, b, &norm, 0);
    if (st == DPT_OK) mine.targets += count_targets(s->hy, b * s->labels);
    if (st == DPT_OK) st = dpt_model_evaluate(s->model, s->x, s->y, b, &l, &c);
    mine.loss_sum += l;
    mine.correct += c;
    done += b;
  }
  /* Every replica joins the exchange, even after a local failure, so nobody waits forever. */
  DPT_TRY(exchange(r, s, &mine, &sum, st, "evaluation"));
  /* Per target: per sample for a classifier, per masked token for a token model. */
  *loss = sum.targets ? sum.loss_sum / (double)sum.targets : NAN;
  *accuracy = sum.targets ? (double)sum.correct / (double)sum.targets : NAN;
  return DPT_OK;
}

/* Uploads count records of d (local indices idx) as the device batch: each sample the record
 * [num_dense floats][num_sparse ids as int32 bits], its label 0 or 1. */
static dpt_status load_records(replica_state *s, const dpt_interactions *d, const uint64_t *idx,
                               size_t count) {
  const size_t nd = dpt_interactions_num_dense(d), ns = dpt_interactions_num_sparse(d);
  const size_t input = nd + ns;
  for (size_t i = 0; i < count; ++i) {
    float *row = s->hx + i * input;
    memcpy(row, dpt_interactions_dense(d, idx[i]), nd * sizeof(float));
    memcpy(row + nd, dpt_interactions_sparse(d, idx[i]), ns * sizeof(int32_t));
    s->hy[i] = dpt_interactions_label(d, idx[i]) >= 0.5f ? 1 : 0;
  }
  dpt_status st = dpt_buffer_upload(s->x, 0, s->hx, count * input * sizeof(float));
  if (st == DPT_OK) st = dpt_buffer_upload(s->y, 0, s->hy, count * sizeof(int32_t));
  return st;
}

/* Scores this replica's validation records (s->ltest) in batches: logits[n], labels[n]; the
 * loss (binary cross-entropy of the logit, in double) and correct count into mine. */
static dpt_status score_records(replica_state *s, float *logits, float *labels, step_stats *mine) {
  const dpt_interactions *d = s->ltest;
  const size_t n = dpt_interactions_local_records(d);
  dpt_status st = s->pending;
  for (size_t done = 0; done < n && st == DPT_OK;) {
    const size_t b = n - done < s->max_micro ? n - done : s->max_micro;
    for (size_t i = 0; i < b; ++i)
      s->idx[i] = done + i;
    st = load_records(s, d, s->idx, b);
    if (st == DPT_OK) st = dpt_model_logits(s->model, s->x, b, logits + done);
    for (size_t i = 0; i < b && st == DPT_OK; ++i) {
      const double z = logits[done + i], y = s->hy[i];
      labels[done + i] = (float)y;
      mine->loss_sum += (z > 0 ? z : 0) - z * y + log1p(exp(-fabs(z)));
      mine->correct += (z > 0) == (y > 0.5);
    }
    done += b;
  }
  mine->samples = mine->targets = (int64_t)n;
  return st;
}

/* Data-parallel evaluation on per-replica validation records: each replica scores its own,
 * the loss and accuracy are summed at an exchange, and the exact AUC (of the logits) and the
 * logloss (of the probabilities) are computed over every replica's records together. */
static dpt_status evaluate_records(replica *r, replica_state *s, dpt_train_report *rep) {
  const size_t n = dpt_interactions_local_records(s->ltest);
  float *logits = malloc((n ? n : 1) * sizeof(float)),
        *labels = malloc((n ? n : 1) * sizeof(float));
  step_stats mine, sum;
  memset(&mine, 0, sizeof mine);
  dpt_status st = logits && labels
                      ? score_records(s, logits, labels, &mine)
                      : dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "evaluation: %zu records", n);
  /* Every replica joins the exchange, even after a local failure, so nobody waits forever. */
  st = exchange(r, s, &mine, &sum, st, "evaluation");
  if (st == DPT_OK) {
    rep->test_loss = sum.targets ? sum.loss_sum / (double)sum.targets : NAN;
    rep->test_accuracy = sum.targets ? (double)sum.correct / (double)sum.targets : NAN;
    /* Without both classes the AUC is undefined: NaN on every replica alike (it is decided
     * from the gathered pairs). */
    st = dpt_auc_comm(r->comm, logits, labels, n, &rep->test_auc);
    if (st == DPT_ERR_INVALID_ARG) st = DPT_OK;
  }
  for (size_t i = 0; st == DPT_OK && i < n; ++i) /* the probabilities, in place */
    logits[i] = 1.0f / (1.0f + expf(-logits[i]));
  if (st == DPT_OK) {
    /* A non-finite probability (a diverged model) makes the logloss NaN, as the loss is. */
    st = dpt_logloss_comm(r->comm, logits, labels, n, &rep->test_logloss);
    if (st == DPT_ERR_INVALID_ARG) {
      rep->test_logloss = NAN;
      st = DPT_OK;
    }
  }
  free(logits);
  free(labels);
  return st;
}

/* ---- set-up ------------------------------------------------------------------------------- */

/* The exchange arrays, first of all, so a replica that fails later still takes part in the
 * start-up agreement (up to GATHER_INLINE replicas they need no allocation, so cannot fail). */
static dpt_status alloc_exchange(replica *r, replica_state *s) {
  const size_t n = (size_t)r->count;
  s->gather = r->count <= GATHER_INLINE ? s->gather_small : malloc(n * sizeof *s->gather);
  s->terms = r->count <= GATHER_INLINE ? s->terms_small
                                       : malloc(n * DPT_RUN_TERM_COUNT * sizeof *s->terms);
  if (!s->gather || !s->terms)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "training: out of host memory");
  return DPT_OK;
}

/* Per-replica records against the model: their width, one label, and every embedding_bag table
 * large enough for the ids its slots can hold (a larger shard table would feed ids beyond it). */
static dpt_status check_records_model(const dpt_train_config *cfg, replica_state *s) {
  const size_t input = dpt_model_input_size(s->model);
  for (int k = 0; k < 2; ++k) {
    const dpt_interactions *d = k ? s->ltest : s->ltrain;
    if (!d) continue;
    const char *which = k ? "validation" : "training";
    const size_t nd = dpt_interactions_num_dense(d), ns = dpt_interactions_num_sparse(d);
    if (k && s->ltrain &&
        (nd != dpt_interactions_num_dense(s->ltrain) ||
         ns != dpt_interactions_num_sparse(s->ltrain)))
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "the validation shards' records have %zu dense and %zu sparse "
                           "features, the training shards' %u and %u",
                           nd, ns, dpt_interactions_num_dense(s->ltrain),
                           dpt_interactions_num_sparse(s->ltrain));
    if (nd + ns != input)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "the model takes %zu inputs per sample but the %s shards' records "
                           "have %zu (%zu dense, %zu sparse)",
                           input, which, nd + ns, nd, ns);
    const dpt_model_spec *spec = &cfg->model;
    for (size_t i = 0; i < spec->num_layers; ++i) {
      const dpt_layer_spec *l = &spec->layers[i];
      if (l->kind != DPT_LAYER_EMBEDDING_BAG) continue;
      const size_t bag = l->bag ? l->bag : 1;
      for (size_t slot = l->offset; slot < l->offset + bag; ++slot) {
        if (slot < nd || slot >= nd + ns) continue;
        const uint64_t rows = dpt_interactions_table_sizes(d)[slot - nd];
        if (rows > l->vocab)
          return dpt_set_error(DPT_ERR_INVALID_ARG,
                               "the %s shards' sparse feature %zu has ids up to %llu, beyond the "
                               "%zu rows of the model's table %s",
                               which, slot - nd, (unsigned long long)rows - 1, l->vocab, l->name);
      }
    }
  }
  s->labels = dpt_model_labels_per_sample(s->model);
  if (s->labels != 1)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "per-replica records have one label each; the model takes %zu", s->labels);
  return DPT_OK;
}

/* This replica's backend: its entry of replica_backends, else cfg->backend. */
static dpt_backend_kind backend_of(const replica *r) {
  const dpt_train_config *cfg = r->cfg;
  return cfg->replica_backends && !r->over_mpi ? cfg->replica_backends[r->index] : cfg->backend;
}

/* The reports' backend name: cfg->backend's, or the replicas' list with replica_backends. */
static void name_backends(const replica *r, replica_state *s) {
  const dpt_train_config *cfg = r->cfg;
  snprintf(s->backend_names, sizeof s->backend_names, "%s", dpt_backend_kind_name(backend_of(r)));
  if (!cfg->replica_backends || r->over_mpi) return;
  size_t len = 0;
  for (int i = 0; i < r->count && len < sizeof s->backend_names; ++i)
    len += (size_t)snprintf(s->backend_names + len, sizeof s->backend_names - len, "%s%s",
                            i ? "," : "", dpt_backend_kind_name(cfg->replica_backends[i]));
}

static dpt_status create_backend_and_model(replica *r, replica_state *s) {
  const dpt_train_config *cfg = r->cfg;
  const dpt_backend_kind kind = backend_of(r);
  int devices = 0;
  DPT_TRY(dpt_device_count(kind, &devices));
  if (devices == 0)
    return dpt_error_context(DPT_ERR_UNSUPPORTED, "no %s device", dpt_backend_kind_name(kind));
  /* With mixed backends, the replica's place among those of its own backend. */
  int nth = r->local_index;
  if (cfg->replica_backends && !r->over_mpi) {
    nth = 0;
    for (int i = 0; i < r->index; ++i)
      nth += cfg->replica_backends[i] == kind;
  }
  int device = cfg->device >= 0 ? cfg->device : nth % devices;
  DPT_TRY(dpt_backend_create(kind, device, &s->be));
  name_backends(r, s);
  /* No batch holds more samples than the training set. */
  const size_t n = s->ltrain ? cfg->global_batch : dpt_dataset_count(cfg->train);
  const size_t batch = cfg->global_batch < n ? cfg->global_batch : n;
  s->max_slice = dpt_train_split_cap(cfg, r->count, cfg->global_batch);
  if (s->max_slice > batch) s->max_slice = batch;
  const size_t K = cfg->accumulate > 1 ? cfg->accumulate : 1;
  s->max_micro = (s->max_slice + K - 1) / K;
  DPT_TRY(dpt_model_create(s->be, &cfg->model, s->max_micro, &s->model));
  const size_t np = dpt_model_num_params(s->model);
  if (K > 1) DPT_TRY(dpt_buffer_alloc(s->be, np * sizeof(float), &s->acc));
  if (cfg->grad_dtype != DPT_COMM_F32 && r->count > 1 && !cfg->skip_allreduce) {
    DPT_TRY(dpt_buffer_alloc(s->be, np * sizeof(uint16_t), &s->gh));
    if (cfg->grad_error_feedback) {
      DPT_TRY(dpt_buffer_alloc(s->be, np * sizeof(float), &s->resid));
      DPT_TRY(dpt_buffer_fill_f32(s->resid, 0, np, 0.0f));
    }
  }
  if (s->ltrain) return check_records_model(cfg, s);
  size_t input = dpt_model_input_size(s->model);
  if (input != dpt_dataset_dim(cfg->train))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "the model takes %zu inputs per sample but the data set has %zu", input,
                         dpt_dataset_dim(cfg->train));
  if (cfg->test && dpt_dataset_dim(cfg->test) != input)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "the test set has %zu values per sample, the model takes %zu",
                         dpt_dataset_dim(cfg->test), input);
  /* A token model takes token sequences (a text dataset), a classifier one label a sample. */
  s->labels = dpt_model_labels_per_sample(s->model);
  for (int k = 0; k < 2; ++k) {
    const dpt_dataset *ds = k ? cfg->test : cfg->train;
    if (!ds || dpt_dataset_labels_per_sample(ds) == s->labels) continue;
    const char *which = k ? "test" : "training";
    if (s->labels > 1)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "the model is a token model (sequences of %zu tokens) but the %s set "
                           "has %zu label(s) per sample: give it text of that sequence length",
                           s->labels, which, dpt_dataset_labels_per_sample(ds));
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "the model is a classifier (one label per sample) but the %s set has "
                         "%zu labels per sample (token sequences)",
                         which, dpt_dataset_labels_per_sample(ds));
  }
  const size_t classes = dpt_model_num_classes(s->model);
  for (int k = 0; s->labels > 1 && k < 2; ++k) {
    const dpt_dataset *ds = k ? cfg->test : cfg->train;
    if (ds && (size_t)dpt_dataset_num_classes(ds) > classes)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "the %s set's vocabulary has %d tokens, the model only %zu",
                           k ? "test" : "training", dpt_dataset_num_classes(ds), classes);
  }
  return DPT_OK;
}

/* The optimizer: for the sharded step it keeps state for this replica's shard only, with
 * sparse tables for the ranges around the tables only. */
static dpt_status create_optimizer(replica *r, replica_state *s) {
  if (s->sparse) {
    size_t n = 0;
    const dpt_range *dense = dpt_train_sparse_dense_ranges(s, &n);
    return dpt_optimizer_create_sharded(s->model, &r->cfg->optim, dense, n, &s->opt);
  }
  if (s->mode != STEP_SHARDED) return dpt_optimizer_create(s->model, &r->cfg->optim, &s->opt);
  const size_t np = dpt_model_num_params(s->model);
  s->nshard = dpt_comm_shard(r->comm, np, DPT_COMM_F32, r->index, NULL, 0);
  s->shard = malloc((s->nshard ? s->nshard : 1) * sizeof *s->shard);
  if (!s->shard) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "training: out of host memory");
  dpt_comm_shard(r->comm, np, DPT_COMM_F32, r->index, s->shard, s->nshard);
  return dpt_optimizer_create_sharded(s->model, &r->cfg->optim, s->shard, s->nshard, &s->opt);
}

static dpt_status alloc_batch(replica *r, replica_state *s) {
  const size_t input = dpt_model_input_size(s->model);
  const size_t max_slice = s->max_slice;
  const size_t n = s->ltrain ? 0 : dpt_dataset_count(r->cfg->train);
  DPT_TRY(dpt_buffer_alloc(s->be, max_slice * input * sizeof(float), &s->x));
  const size_t L = s->labels;
  DPT_TRY(dpt_buffer_alloc(s->be, max_slice * L * sizeof(int32_t), &s->y));
  const size_t nb = dpt_model_num_buffer_floats(s->model);
  if (nb && r->cfg->on_nonfinite == DPT_NONFINITE_SKIP)
    DPT_TRY(dpt_buffer_alloc(s->be, nb * sizeof(float), &s->kept_buffers));
  s->hx = malloc(max_slice * input * sizeof(float));
  s->hy = malloc(max_slice * L * sizeof(int32_t));
  if (L > 1) {
    const size_t B = r->cfg->global_batch < n ? r->cfg->global_batch : n;
    s->hbatch = malloc(B * L * sizeof(int32_t));
    if (!s->hbatch) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "training: out of host memory");
  }
  s->perm = n ? malloc(n * sizeof(uint64_t)) : NULL;
  s->idx = malloc(max_slice * sizeof(uint64_t));
  s->hparams = malloc(dpt_model_state_size(s->model) * sizeof(float));
  if (!s->hx || !s->hy || (n && !s->perm) || !s->idx || !s->hparams)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "training: out of host memory");
  return DPT_OK;
}

/* Sync-bn's sum of doubles over the replicas: gathered, then added in replica order, so every
 * replica gets the same bits. */
static dpt_status sum_over_replicas(void *ctx, double *data, size_t count) {
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

/* Replica 0, before training: the timeline's file can be made where it is asked for, so that
 * a mistyped path stops the run now rather than after it. */
static dpt_status check_trace_path(const char *path) {
  char dir[4096];
  const char *slash = strrchr(path, '/');
  if (!*path) return dpt_set_error(DPT_ERR_INVALID_ARG, "trace: the file name is empty");
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else
    snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
  if (access(dir, W_OK | X_OK) != 0)
    return dpt_set_error(DPT_ERR_IO, "trace: cannot write %s: the directory %s: %s", path, dir,
                         strerror(errno));
  return DPT_OK;
}

/* The model's layer hook: the layer's event on the timeline, and the gradient buckets backward
 * has completed. */
static void on_layer(void *ctx, size_t layer, int backward, size_t ready_from) {
  replica_state *s = ctx;
  if (s->trace && s->in_step) {
    const double now = dpt_now();
    const char *name = dpt_model_layer_name(s->model, layer);
    char label[64];
    snprintf(label, sizeof label, "%zu %s%s%s", layer, dpt_model_layer_kind_name(s->model, layer),
             name && *name ? " " : "", name ? name : "");
    dpt_trace_event(s->trace, backward ? DPT_TRACE_BACKWARD : DPT_TRACE_FORWARD, label, s->trace_t,
                    now);
    s->trace_t = now;
  }
  dpt_train_buckets_on_layer(s, backward, ready_from);
}

/* The timeline's event [t0, now] on `track`, when there is a timeline. */
static void trace_since(replica_state *s, dpt_trace_track track, const char *name, double t0) {
  if (s->trace) dpt_trace_event(s->trace, track, name, t0, dpt_now());
}

static dpt_status replica_setup(replica *r, replica_state *s) {
  s->mode = step_mode_of(r->cfg, r->count);
  DPT_TRY(create_backend_and_model(r, s));
  DPT_TRY(dpt_train_split_setup(r, s));
  DPT_TRY(alloc_batch(r, s));
  DPT_TRY(dpt_train_sparse_setup(r, s));
  DPT_TRY(create_optimizer(r, s));
  if (r->cfg->bucket_bytes != DPT_BUCKET_AUTO)
    DPT_TRY(dpt_train_buckets_setup(r, s, r->cfg->bucket_bytes));
  if (r->cfg->trace && r->index == 0) DPT_TRY(check_trace_path(r->cfg->trace));
  if (r->cfg->trace) {
    char who[64];
    snprintf(who, sizeof who, "rank %d, %s", r->over_mpi ? r->index : 0,
             dpt_backend_kind_name(backend_of(r)));
    DPT_TRY(dpt_trace_create(r->index, who, &s->trace));
  }
  if (r->cfg->bucket_bytes || s->trace) DPT_TRY(dpt_model_set_layer_hook(s->model, on_layer, s));
  if (r->cfg->sync_bn && r->count > 1)
    DPT_TRY(dpt_model_set_sync_bn(s->model, sum_over_replicas, r));
  if (r->cfg->init_params)
    DPT_TRY(dpt_model_set_state(s->model, r->cfg->init_params));
  else
    DPT_TRY(dpt_model_init(s->model, r->cfg->seed));
  return dpt_train_ckpt_setup(r, s);
}

/* Every replica's terms of the run (settings and data, run_terms.c) against replica 0's:
 * replicas started differently (MPI ranks, each with its own flags and files) stop together
 * here, before the first step, instead of training something else than asked. */
static dpt_status agree_on_run(replica *r, replica_state *s) {
  const dpt_train_config *cfg = r->cfg;
  uint64_t mine[DPT_RUN_TERM_COUNT];
  dpt_run_terms(cfg, mine);
  DPT_TRY(dpt_allgather_host(r->comm, mine, sizeof mine, s->terms));
  DPT_TRY(dpt_run_terms_compare(s->terms, r->count));
  /* At least one: check_config refused a run without a batch. */
  s->batches = s->ltrain ? (size_t)dpt_interactions_steps(s->ltrain, cfg->global_batch)
                         : dpt_sampler_num_batches(dpt_dataset_count(cfg->train), cfg->global_batch,
                                                   cfg->keep_last);
  const int64_t per_epoch = (int64_t)s->batches;
  s->t.planned_steps = cfg->epochs > INT64_MAX / per_epoch ? INT64_MAX : cfg->epochs * per_epoch;
  if (cfg->max_steps > 0 && cfg->max_steps < s->t.planned_steps)
    s->t.planned_steps = cfg->max_steps;
  return DPT_OK;
}

/* Replica 0's parameters to every replica, then the first drift check. Every replica meets at
 * the check's exchange after a failure here, which stops them all together: the replica that
 * failed locally (device, staging) announces it there, and the others come whether the
 * broadcast went through for them or told them that a replica failed before it (DPT_ERR_COMM,
 * no data moved). A timeout or a disagreement on the call means the replicas are not in step:
 * stop now. */
static dpt_status broadcast_params(replica *r, replica_state *s) {
  const size_t np = dpt_model_num_params(s->model), nb = dpt_model_num_buffer_floats(s->model);
  dpt_status st =
      dpt_broadcast_buffer(r->comm, dpt_model_params(s->model), 0, np * sizeof(float), 0);
  if (dpt_train_out_of_step(st)) return st;
  if (nb && st == DPT_OK)
    st = dpt_broadcast_buffer(r->comm, dpt_model_buffers(s->model), 0, nb * sizeof(float), 0);
  if (dpt_train_out_of_step(st)) return st;
  dpt_train_keep_failure(s, st);
  return check_drift(r, s, 0);
}

/* ---- the step ----------------------------------------------------------------------------- */

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
  DPT_TRY(dpt_dataset_gather_transformed(r->cfg->train, s->perm + bstart, bcount,
                                         &r->cfg->transform, (uint64_t)epoch, NULL, s->hbatch));
  *targets = count_targets(s->hbatch, bcount * s->labels);
  return DPT_OK;
}

/* Loads this replica's slice of the global batch at `bstart` (bcount samples) and runs forward
 * and backward. Returns the local outcome, which the step's exchange announces. */
static dpt_status forward_backward(replica *r, replica_state *s, int64_t epoch, size_t k,
                                   size_t bstart, size_t bcount, step_stats *mine) {
  size_t start, count;
  dpt_status st = dpt_train_split_slice(r, s, bcount, &start, &count);
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
    st = dpt_interactions_step_indices(s->ltrain, r->cfg->seed, (uint64_t)epoch,
                                       r->cfg->global_batch, (uint64_t)k, s->idx);
  /* The loss gradient is scaled by 1/(targets in this global batch): the sum over replicas is
   * the batch's mean over its targets, whatever the split (and for a kept, smaller last batch
   * too). For a classifier that is 1/(samples), as before targets existed. A batch without a
   * target has no loss and gets a zero gradient. */
  const float scale = targets > 0 ? 1.0f / (float)targets : 0.0f;
  if (st == DPT_OK && s->sparse) st = dpt_train_sparse_prepare(s);
  /* The slice as micro-batches (one without accumulate), their gradients summed. */
  const size_t K = s->acc ? r->cfg->accumulate : 1;
  int summed = 0; /* micro-batches whose gradient acc holds */
  /* Buckets start during backward when its gradient is the step's (no micro-batches to add). */
  dpt_train_buckets_arm(s, K == 1 && !r->cfg->sync_bn); /* sync-bn sums in backward */
  for (size_t j = 0; j < K && st == DPT_OK; ++j) {
    size_t ms = 0, mc = count;
    if (K > 1) st = dpt_batch_split(count, (int)K, (int)j, &ms, &mc);
    if (st != DPT_OK || mc == 0) continue;
    const double tl = dpt_now();
    if (s->ltrain) {
      st = load_records(s, s->ltrain, s->idx + ms, mc);
      if (st == DPT_OK) s->slice = mc;
    } else {
      st = load_batch(s, r->cfg->train, s->perm + bstart + start + ms, mc, &r->cfg->transform,
                      epoch);
    }
    trace_since(s, DPT_TRACE_DATA, "load", tl);
    if (st == DPT_OK)
      mine->targets += s->labels == 1 ? (int64_t)mc : count_targets(s->hy, mc * s->labels);
    /* Dropout's mask is keyed by the sample's place in the global batch, not in the slice. */
    if (st == DPT_OK)
      st = dpt_model_set_step(s->model, r->cfg->seed, (uint64_t)s->t.step, (uint32_t)(start + ms));
    double loss = 0;
    int64_t correct = 0;
    s->in_step = 1;
    s->trace_t = dpt_now();
    if (st == DPT_OK) st = dpt_model_train_step(s->model, s->x, s->y, mc, scale, &loss, &correct);
    s->in_step = 0;
    mine->loss_sum += loss;
    mine->correct += correct;
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

/* The parameter ranges this replica owns in the step: its shard (sharded step) or all of them.
 * `whole` is storage for the latter. */
static const dpt_range *own_ranges(const replica_state *s, dpt_range *whole, size_t *n) {
  if (s->mode == STEP_SHARDED) {
    *n = s->nshard;
    return s->shard;
  }
  *whole = (dpt_range){0, dpt_model_num_params(s->model)};
  *n = 1;
  return whole;
}

/* Non-finite values in this replica's ranges of `buf` (gradients or parameters). */
static dpt_status count_nonfinite_own(replica_state *s, const dpt_buffer *buf, int64_t *out) {
  dpt_range whole;
  size_t n = 0;
  const dpt_range *rg = own_ranges(s, &whole, &n);
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    uint64_t c = 0;
    DPT_TRY(dpt_count_nonfinite(s->be, rg[i].count, buf, rg[i].offset, &c));
    total += c;
  }
  *out = (int64_t)total;
  return DPT_OK;
}

/* Whether the step needs the gradient norm agreed by every replica: the sharded step clips by
 * the norm of the whole gradient, which no replica holds alone; with the full step each
 * replica computes it on its own backend, and a float sum can overflow where a double sum
 * does not, so when a non-finite step is skipped or rolled back they agree on its finiteness
 * before anyone steps. */
static int needs_norm(const replica *r, const replica_state *s) {
  const dpt_train_config *cfg = r->cfg;
  if (cfg->optim.clip_norm <= 0.0f) return 0;
  return s->mode == STEP_SHARDED || (cfg->on_nonfinite != DPT_NONFINITE_STOP && r->count > 1);
}

/* The 16-bit exchange (grad_dtype F16 or BF16) of the whole gradient after backward: narrowed
 * (dpt_train_narrow_16), all-reduced, widened back. A local failure is kept and the all-reduce
 * joined regardless. */
static dpt_status exchange_16(replica *r, replica_state *s) {
  const dpt_comm_dtype dt = r->cfg->grad_dtype;
  const size_t np = dpt_model_num_params(s->model);
  dpt_status st = s->pending;
  if (st == DPT_OK) st = dpt_train_narrow_16(s, dt, 0, np);
  dpt_train_keep_failure(s, st);
  st = dpt_allreduce_buffer(r->comm, s->gh, 0, np, dt);
  if (st != DPT_OK) return st;
  if (s->pending == DPT_OK) dpt_train_keep_failure(s, dpt_train_widen_16(s, dt, 0, np));
  return DPT_OK;
}

/* Sums the gradients over the replicas: the complete sum of this replica's shard (sharded
 * step) or of everything (full step). Every replica joins, whatever its local outcome. */
static dpt_status reduce_gradients(replica *r, replica_state *s, dpt_status local,
                                   step_stats *mine) {
  dpt_train_keep_failure(s, local);
  dpt_buffer *grads = dpt_model_grads(s->model);
  dpt_status st = DPT_OK;
  if (s->mode != STEP_LOCAL) {
    const double t0 = dpt_now();
    const size_t np = dpt_model_num_params(s->model);
    double exposed = 0, busy = 0, parts = 0;
    if (s->buckets) {
      bucket_times bt;
      st = dpt_train_buckets_finish(s, &bt);
      exposed = bt.exposed;
      busy = bt.busy;
      parts = bt.optimizer; /* the update in parts, counted as the optimizer's */
    } else if (s->gh) {
      st = exchange_16(r, s);
      exposed = busy = dpt_now() - t0;
      trace_since(s, DPT_TRACE_EXCHANGE,
                  r->cfg->grad_dtype == DPT_COMM_BF16 ? "all-reduce (bfloat16)"
                                                      : "all-reduce (binary16)",
                  t0);
    } else {
      st = s->sparse ? dpt_train_sparse_reduce(r, s)
           : s->mode == STEP_SHARDED
               ? dpt_reduce_scatter_buffer(r->comm, grads, 0, np, DPT_COMM_F32)
               : dpt_allreduce_buffer(r->comm, grads, 0, np, DPT_COMM_F32);
      exposed = busy = dpt_now() - t0;
      trace_since(s, DPT_TRACE_EXCHANGE,
                  s->sparse                 ? "exchange (sparse tables)"
                  : s->mode == STEP_SHARDED ? "reduce-scatter"
                                            : "all-reduce",
                  t0);
    }
    if (s->buckets && s->trace) {
      size_t nb = 0;
      const dpt_request_info *in = dpt_train_buckets_info(s, &nb);
      for (size_t j = 0; j < nb; ++j) {
        char name[32];
        snprintf(name, sizeof name, "bucket %zu", j);
        dpt_trace_event(s->trace, DPT_TRACE_EXCHANGE, name, in[j].queued, in[j].finished);
      }
    }
    s->t.comm += dpt_now() - t0 - parts;
    s->t.optimizer += parts;
    s->t.exchange += busy;
    s->t.exposed += exposed;
    if (dpt_train_out_of_step(st)) return dpt_train_stop_after(s, st);
  }
  /* A non-finite value in the reduced gradient is caught whatever the loss said, alike on every
   * replica. Where the step agrees on the gradient norm, it makes the norm non-finite: no
   * count. */
  if (st == DPT_OK && s->pending == DPT_OK && !needs_norm(r, s))
    st = s->sparse ? dpt_train_sparse_count_nonfinite(s, &mine->bad_grads)
                   : count_nonfinite_own(s, grads, &mine->bad_grads);
  return st;
}

/* The squared gradient norm over this replica's range (its shard, or everything), summed over
 * the replicas in replica order: the same on every replica. */
static dpt_status agree_grad_norm(replica *r, replica_state *s, double *sumsq) {
  step_stats mine, sum;
  memset(&mine, 0, sizeof mine);
  dpt_range whole;
  size_t n = 0;
  const dpt_range *rg = own_ranges(s, &whole, &n);
  dpt_status local = DPT_OK;
  if (s->pending == DPT_OK) local = dpt_optimizer_grad_sumsq(s->opt, rg, n, &mine.sumsq);
  DPT_TRY(exchange(r, s, &mine, &sum, local, "the gradient norm"));
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
  if (cfg->on_nonfinite == DPT_NONFINITE_STOP)
    return dpt_set_error(DPT_ERR_NONFINITE,
                         "%s not finite at step %lld (epoch %lld, batch %zu); lower the "
                         "learning rate, or pass --on-nonfinite skip or rollback",
                         what, (long long)s->t.step, (long long)epoch + 1, k + 1);
  *bad = 1;
  return DPT_OK;
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
  st = sums ? sum_over_replicas(r, sums, count) : DPT_OK;
  if (dpt_train_out_of_step(st)) {
    free(sums);
    return dpt_train_stop_after(s, st);
  }
  dpt_train_keep_failure(s, st);
  if (s->pending == DPT_OK) st = dpt_optimizer_finish_ranges(s->opt, s->shard, s->nshard, sums);
  free(sums);
  return st;
}

/* The optimizer step: the shard's update and the parameter all-gather (sharded), or the whole
 * update. A local failure is kept for the next exchange and the all-gather is joined
 * regardless, so that no replica waits for one that gave up. *skipped: the optimizer found a
 * non-finite gradient norm and the policy does not stop (the same on every replica). Where the
 * gradient buckets did both in parts (dpt_train_buckets_stepped), the step is only counted. */
static dpt_status optimizer_step(replica *r, replica_state *s, double sumsq, int *skipped) {
  *skipped = 0;
  if (dpt_train_buckets_stepped(s)) { /* updated and gathered bucket by bucket: count the step */
    if (s->pending == DPT_OK) dpt_train_keep_failure(s, dpt_optimizer_end_step(s->opt));
    return DPT_OK;
  }
  const double t0 = dpt_now();
  dpt_status st = DPT_OK;
  if (s->mode == STEP_SHARDED && dpt_optimizer_num_sums(s->opt) > 0) {
    st = two_phase_step(r, s, sumsq);
    if (dpt_train_out_of_step(st)) return st;
  } else if (s->pending == DPT_OK)
    st = s->mode == STEP_SHARDED
             ? dpt_optimizer_step_ranges(s->opt, s->shard, s->nshard, sumsq, NULL)
         : s->sparse ? dpt_train_sparse_step(s)
                     : dpt_optimizer_step(s->opt, NULL);
  *skipped = st == DPT_ERR_NONFINITE && r->cfg->on_nonfinite != DPT_NONFINITE_STOP;
  if (!*skipped) dpt_train_keep_failure(s, st);
  /* With DPT_NONFINITE_SKIP an update that made parameters non-finite stops the run at the next
   * exchange: no later step can undo it, and skipping would hide it. */
  int64_t bad = 0;
  if (!*skipped && st == DPT_OK && r->cfg->on_nonfinite == DPT_NONFINITE_SKIP &&
      s->pending == DPT_OK) {
    dpt_train_keep_failure(s, count_nonfinite_own(s, dpt_model_params(s->model), &bad));
    s->bad_params = bad > 0;
  }
  const double t1 = dpt_now();
  s->t.optimizer += t1 - t0;
  trace_since(s, DPT_TRACE_OPTIMIZER, "optimizer", t0);
  if (s->mode != STEP_SHARDED) return DPT_OK;
  st = dpt_allgather_shards_buffer(r->comm, dpt_model_params(s->model), 0,
                                   dpt_model_num_params(s->model), DPT_COMM_F32);
  s->t.comm += dpt_now() - t1;
  trace_since(s, DPT_TRACE_EXCHANGE, "all-gather (parameters)", t1);
  /* Out of step: stop now. Any other failure (DPT_ERR_COMM included) meets the others at the
   * next exchange, where the replica that failed first reports why. */
  if (dpt_train_out_of_step(st)) return dpt_train_stop_after(s, st);
  dpt_train_keep_failure(s, st); /* local (staging, device): announced at the next exchange */
  return DPT_OK;
}

/* Skipping cannot hide a diverged run: past the limit (max_skipped) the run fails. The counts
 * are the same on every replica. */
static dpt_status check_skipped(const replica *r, const replica_state *s) {
  const int64_t limit = r->cfg->max_skipped, share = s->t.planned_steps / 100;
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
  if (nb == 0 || r->cfg->sync_bn || s->mode == STEP_LOCAL || r->count == 1) return DPT_OK;
  dpt_status st =
      dpt_broadcast_buffer(r->comm, dpt_model_buffers(s->model), 0, nb * sizeof(float), 0);
  if (dpt_train_out_of_step(st)) return st;
  dpt_train_keep_failure(s, st);
  return DPT_OK;
}

/* What the replicas decided together at a step's exchange, beyond the step itself. */
typedef struct step_outcome {
  int rollback; /* the step was not finite and the policy rolls back */
  int ckpt_due; /* replica 0's clock says a checkpoint is due */
  int64_t stop; /* a replica was asked to stop (its request, e.g. a signal number) */
} step_outcome;

/* The step's contribution to the exchange besides its sums: a stop request, and on replica 0
 * whether checkpoint_minutes have passed since the last checkpoint. */
static void step_requests(const replica *r, const replica_state *s, step_stats *mine) {
  const dpt_train_config *cfg = r->cfg;
  if (cfg->stop_request) mine->stop = *cfg->stop_request;
  if (r->index == 0 && cfg->checkpoint_dir && cfg->checkpoint_minutes > 0)
    mine->ckpt_due = dpt_now() - s->t.last_ckpt >= cfg->checkpoint_minutes * 60.0;
}

/* A step that was not finite under a policy other than stop: skipped, its buffers put back, or
 * left for the caller to roll back. */
static dpt_status give_up_step(replica *r, replica_state *s, step_outcome *out) {
  if (r->cfg->on_nonfinite == DPT_NONFINITE_ROLLBACK) {
    out->rollback = 1;
    return DPT_OK;
  }
  ++s->t.skipped;
  ++s->t.skipped_in_a_row;
  dpt_train_keep_failure(s, keep_buffers(s, 1));
  return check_skipped(r, s);
}

/* One synchronized step on global batch k of the epoch (see train.h). Adds the batch's loss
 * and samples to *loss and *samples unless the step was given up. */
static dpt_status train_step(replica *r, replica_state *s, int64_t epoch, size_t k, double *loss,
                             int64_t *samples, step_outcome *out) {
  const dpt_train_config *cfg = r->cfg;
  size_t bstart = 0, bcount = cfg->global_batch; /* per-replica records: every step whole */
  if (!s->ltrain)
    DPT_TRY(dpt_sampler_batch(dpt_dataset_count(cfg->train), cfg->global_batch, cfg->keep_last, k,
                              &bstart, &bcount));
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
  mine.compute = dpt_now() - t0;
  s->t.compute += mine.compute;
  st = reduce_gradients(r, s, st, &mine);
  if (dpt_train_out_of_step(st)) return st;
  char what[64];
  snprintf(what, sizeof what, "step %lld", (long long)s->t.step + 1);
  step_requests(r, s, &mine); /* as late as can be: a request during this step ends it */
  DPT_TRY(exchange(r, s, &mine, &sum, st, what));
  s->t.imbalance += train_imbalance(s->gather, r->count);
  dpt_train_split_after_step(r, s);
  out->stop = sum.stop;
  out->ckpt_due = sum.ckpt_due > 0;
  ++s->t.step;
  int bad = 0;
  double sumsq = 0;
  DPT_TRY(agree_on_step(r, s, &sum, epoch, k, &bad, &sumsq));
  if (!bad) DPT_TRY(optimizer_step(r, s, sumsq, &bad));
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
  if (cfg->check_every > 0 && s->t.step % cfg->check_every == 0)
    DPT_TRY(check_drift(r, s, s->t.step));
  if (r->index == 0 && cfg->on_progress)
    cfg->on_progress(epoch + 1, k + 1, s->batches,
                     sum.targets ? sum.loss_sum / (double)sum.targets : NAN, cfg->user);
  return DPT_OK;
}

/* ---- epochs and reports ------------------------------------------------------------------- */

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
  DPT_TRY(check_drift(r, s, s->t.step));
  if (cfg->test && dpt_dataset_count(cfg->test) > 0)
    DPT_TRY(evaluate(r, s, &rep.test_loss, &rep.test_accuracy));
  else if (s->ltest)
    DPT_TRY(evaluate_records(r, s, &rep));
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
  if (r->index == 0 && cfg->on_report) cfg->on_report(&rep, cfg->user);
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
  const int every = cfg->checkpoint_every > 0 && s->t.step % cfg->checkpoint_every == 0;
  if (cfg->checkpoint_dir && (every || o->ckpt_due || o->stop)) {
    const double tc = dpt_now();
    DPT_TRY(dpt_train_ckpt_save(r, s, o->stop != 0));
    trace_since(s, DPT_TRACE_CHECKPOINT, "checkpoint", tc);
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
    DPT_TRY(dpt_sampler_permutation(cfg->seed, (uint64_t)epoch, cfg->shuffle,
                                    dpt_dataset_count(cfg->train), s->perm));
  while (s->at.batch < s->batches && !*stop) {
    step_outcome o;
    DPT_TRY(train_step(r, s, epoch, s->at.batch, &s->at.loss, &s->at.samples, &o));
    ++s->at.batch;
    DPT_TRY(after_step(r, s, &o));
    *stop = cfg->max_steps > 0 && s->t.step >= cfg->max_steps;
  }
  s->t.train_time += dpt_now() - t0;
  DPT_TRY(report_epoch(r, s, epoch, t0, s->at.loss, s->at.samples));
  if (s->at.batch == s->batches) s->at = (train_cursor){epoch + 1, 0, 0, 0};
  return DPT_OK;
}

/* The checkpoint and non-finite settings. */
static dpt_status check_checkpoints(const dpt_train_config *cfg) {
  const char *fn = "dpt_train";
  if ((unsigned)cfg->on_nonfinite > DPT_NONFINITE_ROLLBACK)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: unknown on_nonfinite %d", fn,
                         (int)cfg->on_nonfinite);
  if (!cfg->checkpoint_dir && (cfg->resume || cfg->on_nonfinite == DPT_NONFINITE_ROLLBACK))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %s needs a checkpoint directory", fn,
                         cfg->resume ? "resuming" : "rolling back");
  if (cfg->checkpoint_dir && !*cfg->checkpoint_dir)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: the checkpoint directory is empty", fn);
  if (cfg->checkpoint_every < 0 || !(cfg->checkpoint_minutes >= 0) || cfg->keep_checkpoints < 1)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: checkpoint_every and checkpoint_minutes must be >= 0 and "
                         "keep_checkpoints >= 1",
                         fn);
  if (cfg->max_rollbacks < 0 || !(cfg->rollback_lr_scale > 0 && cfg->rollback_lr_scale <= 1))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: max_rollbacks must be >= 0 and rollback_lr_scale in (0, 1]", fn);
  return DPT_OK;
}

/* The per-replica readers (cfg->local_train, local_test): one per replica of this process,
 * each opened as its replica's rank of the `total` replicas, all over the same shards; and the
 * settings that do not apply to them. */
static dpt_status check_local_data(const dpt_train_config *cfg, dpt_comm *comm, int total) {
  const char *fn = "dpt_train";
  if (cfg->train || cfg->test)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: per-replica data (local_train) replaces the data sets: train and "
                         "test must be NULL",
                         fn);
  if (!cfg->shuffle || cfg->keep_last || cfg->transform.mean || cfg->transform.crop_pad ||
      cfg->transform.hflip)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: per-replica records are drawn by the shards' epoch rule: no "
                         "--no-shuffle, --keep-last, normalization or augmentation",
                         fn);
  const int mine = comm ? 1 : cfg->replicas;
  for (int k = 0; k < 2; ++k) {
    dpt_interactions *const *set = k ? cfg->local_test : cfg->local_train;
    const char *which = k ? "validation" : "training";
    for (int i = 0; set && i < mine; ++i) {
      const int rank = comm ? dpt_comm_rank(comm) : i;
      if (!set[i])
        return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: replica %d has no %s reader", fn, rank,
                             which);
      if (dpt_interactions_rank(set[i]) != rank || dpt_interactions_world(set[i]) != total)
        return dpt_set_error(DPT_ERR_INVALID_ARG,
                             "%s: replica %d's %s reader was opened as rank %d of %d, not %d of "
                             "%d",
                             fn, rank, which, dpt_interactions_rank(set[i]),
                             dpt_interactions_world(set[i]), rank, total);
      if (dpt_interactions_fingerprint(set[i]) != dpt_interactions_fingerprint(set[0]))
        return dpt_set_error(DPT_ERR_INVALID_ARG,
                             "%s: replica %d's %s shards differ from replica 0's", fn, rank, which);
    }
  }
  /* Every replica's training records, which every reader knows: the same verdict on every
   * rank, so a replica of empty shards stops all of them here, not one at its first step. */
  const dpt_interactions *d0 = cfg->local_train[0];
  for (int q = 0; q < total; ++q) {
    if (dpt_interactions_rank_records(d0, q) == 0)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "%s: replica %d's training shards hold no record (each of the %d "
                           "replicas needs a shard with records)",
                           fn, q, total);
  }
  if (dpt_interactions_steps(cfg->local_train[0], cfg->global_batch) == 0)
    return dpt_set_error(
        DPT_ERR_INVALID_ARG, "global batch %zu is larger than the %llu training records",
        cfg->global_batch, (unsigned long long)dpt_interactions_total_records(cfg->local_train[0]));
  return DPT_OK;
}

static dpt_status check_config(const dpt_train_config *cfg, dpt_comm *comm) {
  const char *fn = "dpt_train";
  if (!cfg) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: config is NULL", fn);
  if (!cfg->train && !cfg->local_train)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: no training set", fn);
  if (cfg->replicas < 1)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: replicas %d must be >= 1", fn, cfg->replicas);
  if (comm && cfg->replicas != 1)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: with MPI every rank is one replica (replicas must be 1, got %d)", fn,
                         cfg->replicas);
  int total = comm ? dpt_comm_size(comm) : cfg->replicas;
  if (cfg->global_batch == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: global batch is 0", fn);
  if (cfg->global_batch < (size_t)total)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: global batch %zu is smaller than the %d replicas (each needs at "
                         "least one sample)",
                         fn, cfg->global_batch, total);
  if ((unsigned)cfg->split > DPT_SPLIT_PROPORTIONAL || cfg->split_every < 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: split %d is not 0 (even) or 1 (proportional), or split_every "
                         "%lld is negative",
                         fn, (int)cfg->split, (long long)cfg->split_every);
  if (cfg->split == DPT_SPLIT_PROPORTIONAL && cfg->local_train)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: the proportional split needs a data set: with per-replica records "
                         "(local_train) each replica's slice is the shards' rule",
                         fn);
  if (cfg->split == DPT_SPLIT_PROPORTIONAL && cfg->global_batch > UINT32_MAX)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: the proportional split takes a global batch below 2^32", fn);
  if (comm && cfg->replica_backends)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: replica_backends is for replicas as threads; under MPI each rank "
                         "picks its own backend",
                         fn);
  if (cfg->sparse_tables && !cfg->local_train)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: sparse_tables needs per-replica records (local_train)", fn);
  if (cfg->sparse_tables && !(cfg->sparse_dense_above >= 0))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: sparse_dense_above must be >= 0", fn);
  if (cfg->table_optimizer != DPT_TABLE_SGD && cfg->table_optimizer != DPT_TABLE_ROWWISE_ADAGRAD)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: table_optimizer %d is not 0 (sgd) or 1 "
                         "(row-wise adagrad)",
                         fn, cfg->table_optimizer);
  if (cfg->table_optimizer != DPT_TABLE_SGD && !cfg->sparse_tables)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: table_optimizer (row-wise adagrad) needs sparse_tables", fn);
  if (cfg->grad_dtype != DPT_COMM_F32 && cfg->grad_dtype != DPT_COMM_F16 &&
      cfg->grad_dtype != DPT_COMM_BF16)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: grad_dtype %d is not F32, F16 or BF16", fn,
                         (int)cfg->grad_dtype);
  if (cfg->grad_dtype != DPT_COMM_F32 && cfg->sparse_tables)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: the %s gradient exchange (grad_dtype %s) does not combine "
                         "with sparse_tables",
                         fn, cfg->grad_dtype == DPT_COMM_F16 ? "binary16" : "bfloat16",
                         cfg->grad_dtype == DPT_COMM_F16 ? "F16" : "BF16");
  if (cfg->grad_error_feedback && cfg->grad_dtype == DPT_COMM_F32)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: grad_error_feedback needs a 16-bit exchange (grad_dtype F16 or "
                         "BF16)",
                         fn);
  if (cfg->bucket_whole_update && !cfg->bucket_bytes)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: bucket_whole_update needs gradient buckets (bucket_bytes)", fn);
  if (cfg->accumulate > 1 && (cfg->sparse_tables || cfg->sync_bn))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: accumulate (%zu micro-batches) does not combine with %s", fn,
                         cfg->accumulate, cfg->sparse_tables ? "sparse_tables" : "sync_bn");
  if (cfg->accumulate > 1 && cfg->accumulate > cfg->global_batch)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: accumulate %zu is more micro-batches than the global batch's %zu "
                         "samples",
                         fn, cfg->accumulate, cfg->global_batch);
  if (cfg->sparse_tables && cfg->skip_allreduce)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: sparse_tables exchanges the tables' rows; skip_allreduce exchanges "
                         "nothing",
                         fn);
  if (cfg->sparse_tables && cfg->optim.clip_norm > 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: sparse_tables does not clip (clip_norm %g): the norm would need "
                         "every table's rows",
                         fn, (double)cfg->optim.clip_norm);
  if (cfg->local_train) {
    DPT_TRY(check_local_data(cfg, comm, total));
    if (cfg->epochs < 1) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: epochs must be >= 1", fn);
    if (cfg->max_steps < 0 || cfg->check_every < 0)
      return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: max_steps/check_every must be >= 0", fn);
    DPT_TRY(check_checkpoints(cfg));
    return dpt_optim_config_check(&cfg->optim);
  }
  if (dpt_sampler_num_batches(dpt_dataset_count(cfg->train), cfg->global_batch, cfg->keep_last) ==
      0)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "global batch %zu is larger than the %zu training samples (and the last "
                         "partial batch is dropped)",
                         cfg->global_batch, dpt_dataset_count(cfg->train));
  if (cfg->epochs < 1) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: epochs must be >= 1", fn);
  if (cfg->max_steps < 0 || cfg->check_every < 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: max_steps/check_every must be >= 0", fn);
  /* Sync-bn sums in the forward pass: a replica without a sample would not join. */
  size_t last =
      dpt_sampler_last_batch(dpt_dataset_count(cfg->train), cfg->global_batch, cfg->keep_last);
  if (cfg->sync_bn && total > 1 && last < (size_t)total)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: sync-bn needs a sample on every replica in every step, but the "
                         "kept last batch has %zu samples for %d replicas (drop it)",
                         fn, last, total);
  DPT_TRY(dpt_data_transform_check(&cfg->transform, cfg->train));
  if (cfg->test) DPT_TRY(dpt_data_transform_check(&cfg->transform, cfg->test));
  DPT_TRY(check_checkpoints(cfg));
  return dpt_optim_config_check(&cfg->optim);
}

static dpt_status replica_run(replica *r, replica_state *s) {
  const dpt_train_config *cfg = r->cfg;
  DPT_TRY(alloc_exchange(r, s)); /* out of memory before anything else: the others time out */
  const int mine = r->over_mpi ? 0 : r->index; /* this replica's reader */
  s->ltrain = cfg->local_train ? cfg->local_train[mine] : NULL;
  s->ltest = cfg->local_train && cfg->local_test ? cfg->local_test[mine] : NULL;
  /* A configuration this replica refuses is announced like any failure to start. */
  dpt_status st = check_config(cfg, r->over_mpi ? r->comm : NULL);
  if (st == DPT_OK) st = replica_setup(r, s);
  DPT_TRY(dpt_train_agree_ready(r->comm, st, dpt_last_error(), "replica", NULL));
  DPT_TRY(agree_on_run(r, s));
  DPT_TRY(broadcast_params(r, s));
  DPT_TRY(dpt_train_ckpt_share_resumed(r, s));
  if (s->trace) DPT_TRY(dpt_trace_align(r->comm, s->trace));
  if (cfg->bucket_bytes == DPT_BUCKET_AUTO && s->mode != STEP_LOCAL && !s->sparse) {
    size_t bytes = 0;
    char table[512] = "";
    DPT_TRY(dpt_train_buckets_measure(r, s->gh ? cfg->grad_dtype : DPT_COMM_F32, &bytes, table,
                                      sizeof table));
    dpt_train_log(r, "gradient buckets of %zu KiB (all-reduce bus bandwidth: %s)", bytes >> 10,
                  table);
    const dpt_status bs = dpt_train_buckets_setup(r, s, bytes);
    DPT_TRY(dpt_train_agree_ready(r->comm, bs, dpt_last_error(), "replica", NULL));
  }
  if (s->buckets) {
    char line[256];
    dpt_train_buckets_describe(s, line, sizeof line);
    dpt_train_log(r, "%s", line);
  }
  s->t.run_start = s->t.last_ckpt = dpt_now();
  /* A rollback needs a checkpoint to go back to. */
  if (cfg->on_nonfinite == DPT_NONFINITE_ROLLBACK && !dpt_train_ckpt_taken(s))
    DPT_TRY(dpt_train_ckpt_save(r, s, 0));
  int stop = cfg->max_steps > 0 && s->t.step >= cfg->max_steps;
  while (s->at.epoch < cfg->epochs && !stop)
    DPT_TRY(train_epoch(r, s, &stop));
  if (r->final.epoch == 0) { /* resumed at the end: nothing left, the report still made */
    dpt_train_log(r, "nothing left to train: the run is complete at step %lld",
                  (long long)s->t.step);
    DPT_TRY(report_epoch(r, s, s->at.epoch > 0 ? s->at.epoch - 1 : 0, dpt_now(), s->at.loss,
                         s->at.samples));
  }
  if (cfg->checkpoint_dir) DPT_TRY(dpt_train_ckpt_save(r, s, 1));
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
  st = DPT_OK;
  if (cfg->final_params && r->index == 0) st = dpt_model_get_state(s->model, cfg->final_params);
  if (r->index == 0 && cfg->on_report) cfg->on_report(&r->final, cfg->user);
  r->final.checkpoint = NULL; /* the path and the shares live as long as the replica's state */
  r->final.backend = dpt_backend_kind_name(backend_of(r));
  r->final.shares = NULL;
  return st;
}

/* ---- replicas as MPI ranks or threads ----------------------------------------------------- */

static void *replica_thread(void *arg) {
  replica *r = arg;
  replica_state s;
  memset(&s, 0, sizeof s);
  r->status = replica_run(r, &s);
  if (r->status != DPT_OK) snprintf(r->error, sizeof r->error, "%s", dpt_last_error());
  state_free(&s);
  return NULL;
}

/* This process's index among the ranks of its node, from the launcher's environment (Open MPI,
 * MPICH, Slurm), else the global rank: picks the device when cfg->device is -1. */
static int local_rank(int rank) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                     "SLURM_LOCALID"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; ++i) {
    const char *v = getenv(vars[i]);
    if (v && *v) return atoi(v);
  }
  return rank;
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
  r.local_index = local_rank(r.index);
  r.over_mpi = 1;
  replica_state s;
  memset(&s, 0, sizeof s);
  dpt_status st = replica_run(&r, &s);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", dpt_last_error());
  state_free(&s);
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

/* cfg->replicas replicas as threads of this process, joined by the threads transport. */
static dpt_status train_as_threads(const dpt_train_config *cfg, dpt_train_report *final) {
  const int R = cfg->replicas;
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
  if (worst >= 0)
    st = dpt_set_error(reps[worst].status, "replica %d: %s", worst, reps[worst].error);
  if (st == DPT_OK && final) *final = reps[0].final;
  for (int i = 0; reps && i < R; ++i)
    dpt_comm_destroy(reps[i].comm);
  dpt_comm_group_destroy(group);
  free(reps);
  free(threads);
  return st;
}

dpt_status dpt_train(const dpt_train_config *cfg, dpt_comm *comm, dpt_train_report *final) {
  if (!cfg) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_train: config is NULL");
  /* Under MPI every rank checks its configuration inside the start-up agreement, so that one
   * rank's refusal stops the others at once. */
  if (comm) return train_as_rank(cfg, comm, final);
  DPT_TRY(check_config(cfg, NULL));
  return train_as_threads(cfg, final);
}
