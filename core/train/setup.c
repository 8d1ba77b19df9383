/* A replica's set-up (core/train/setup.h): the step mode, backend and model, buffers, the
 * trainer's parts, the optimizer, the timeline; the start-up agreements on the run and the
 * parameters; and the tear-down. */
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
#include "core/train/exchange_exact.h"
#include "core/train/optimizer.h"
#include "core/train/setup.h"
#include "core/train/train_buckets.h"
#include "core/train/train_checkpoint.h"
#include "core/train/train_runlog.h"
#include "core/train/train_sparse.h"
#include "core/train/train_split.h"
#include "dptrain/train.h"

static step_mode step_mode_of(const dpt_train_config *cfg, int replicas) {
  if (cfg->exchange.skip_allreduce) return STEP_LOCAL;
  if (cfg->deterministic) return STEP_FULL;          /* the exact sum is whole on every replica */
  if (cfg->exchange.sparse_tables) return STEP_FULL; /* the dense ranges all-reduced, see train.h */
  if (cfg->exchange.grad_dtype != DPT_COMM_F32) return STEP_FULL; /* shards are cut for float32 */
  /* Every element is updated by one replica from the same sum the ring all-reduce gives, so
   * the parameters are bit for bit those of the full step, with 1/R of the optimizer's work
   * and state per replica. */
  if (replicas > 1 && !cfg->exchange.full_optimizer_step) return STEP_SHARDED;
  return STEP_FULL;
}

void dpt_train_state_free(replica_state *s) {
  dpt_train_ckpt_free(s);    /* first: it waits for a checkpoint being written */
  dpt_train_buckets_free(s); /* waits for requests still running */
  dpt_trace_destroy(s->trace);
  dpt_train_runlog_free(s);
  dpt_train_sparse_free(s);
  dpt_train_split_free(s);
  dpt_train_exact_free(s);
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

/* The exchange arrays, first of all, so a replica that fails later still takes part in the
 * start-up agreement (up to GATHER_INLINE replicas they need no allocation, so cannot fail). */
dpt_status dpt_train_alloc_exchange(replica *r, replica_state *s) {
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

/* This replica's backend: its entry of replica_backends, else cfg->devices.backend. */
dpt_backend_kind dpt_train_backend_of(const replica *r) {
  const dpt_train_config *cfg = r->cfg;
  return cfg->devices.replica_backends && !r->over_mpi ? cfg->devices.replica_backends[r->index]
                                                       : cfg->devices.backend;
}

/* The reports' backend name: cfg->devices.backend's, or the replicas' list with replica_backends.
 */
static void name_backends(const replica *r, replica_state *s) {
  const dpt_train_config *cfg = r->cfg;
  snprintf(s->backend_names, sizeof s->backend_names, "%s",
           dpt_backend_kind_name(dpt_train_backend_of(r)));
  if (!cfg->devices.replica_backends || r->over_mpi) return;
  size_t len = 0;
  for (int i = 0; i < r->count && len < sizeof s->backend_names; ++i)
    len += (size_t)snprintf(s->backend_names + len, sizeof s->backend_names - len, "%s%s",
                            i ? "," : "", dpt_backend_kind_name(cfg->devices.replica_backends[i]));
}

/* This replica's backend on its device: cfg->devices.device, else its place among the replicas of
 * its node (or, with mixed backends, of its own backend) modulo the devices. */
static dpt_status create_backend(replica *r, replica_state *s) {
  const dpt_train_config *cfg = r->cfg;
  const dpt_backend_kind kind = dpt_train_backend_of(r);
  int devices = 0;
  DPT_TRY(dpt_device_count(kind, &devices));
  if (devices == 0)
    return dpt_error_context(DPT_ERR_UNSUPPORTED, "no %s device", dpt_backend_kind_name(kind));
  /* With mixed backends, the replica's place among those of its own backend. */
  int nth = r->local_index;
  if (cfg->devices.replica_backends && !r->over_mpi) {
    nth = 0;
    for (int i = 0; i < r->index; ++i)
      nth += cfg->devices.replica_backends[i] == kind;
  }
  int device = cfg->devices.device >= 0 ? cfg->devices.device : nth % devices;
  DPT_TRY(dpt_backend_create(kind, device, &s->be));
  name_backends(r, s);
  return DPT_OK;
}

/* The data sets against the model: inputs per sample, labels per sample (a token model takes
 * token sequences, a classifier one label a sample), a token model's vocabulary. */
static dpt_status check_data_model(const dpt_train_config *cfg, replica_state *s) {
  size_t input = dpt_model_input_size(s->model);
  if (input != dpt_dataset_dim(cfg->data.train))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "the model takes %zu inputs per sample but the data set has %zu", input,
                         dpt_dataset_dim(cfg->data.train));
  if (cfg->data.test && dpt_dataset_dim(cfg->data.test) != input)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "the test set has %zu values per sample, the model takes %zu",
                         dpt_dataset_dim(cfg->data.test), input);
  s->labels = dpt_model_labels_per_sample(s->model);
  for (int k = 0; k < 2; ++k) {
    const dpt_dataset *ds = k ? cfg->data.test : cfg->data.train;
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
    const dpt_dataset *ds = k ? cfg->data.test : cfg->data.train;
    if (ds && (size_t)dpt_dataset_num_classes(ds) > classes)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "the %s set's vocabulary has %d tokens, the model only %zu",
                           k ? "test" : "training", dpt_dataset_num_classes(ds), classes);
  }
  return DPT_OK;
}

static dpt_status create_backend_and_model(replica *r, replica_state *s) {
  const dpt_train_config *cfg = r->cfg;
  DPT_TRY(create_backend(r, s));
  /* No batch holds more samples than the training set. */
  const size_t n = s->ltrain ? cfg->schedule.global_batch : dpt_dataset_count(cfg->data.train);
  const size_t batch = cfg->schedule.global_batch < n ? cfg->schedule.global_batch : n;
  s->max_slice = dpt_train_split_cap(cfg, r->count, cfg->schedule.global_batch);
  if (s->max_slice > batch) s->max_slice = batch;
  const size_t K = cfg->schedule.accumulate > 1 ? cfg->schedule.accumulate : 1;
  s->max_micro = (s->max_slice + K - 1) / K;
  if (cfg->deterministic) { /* slices of whole groups (train_split.c), one group at a time */
    const size_t G = dpt_train_group_size(cfg);
    s->max_slice = s->max_slice + G < batch ? s->max_slice + G : batch;
    s->max_micro = G < s->max_slice ? G : s->max_slice;
  }
  DPT_TRY(dpt_model_create(s->be, &cfg->model, s->max_micro, &s->model));
  const size_t np = dpt_model_num_params(s->model);
  if (K > 1 && !cfg->deterministic) DPT_TRY(dpt_buffer_alloc(s->be, np * sizeof(float), &s->acc));
  if (cfg->exchange.grad_dtype != DPT_COMM_F32 && r->count > 1 && !cfg->exchange.skip_allreduce) {
    DPT_TRY(dpt_buffer_alloc(s->be, np * sizeof(uint16_t), &s->gh));
    if (cfg->exchange.grad_error_feedback) {
      DPT_TRY(dpt_buffer_alloc(s->be, np * sizeof(float), &s->resid));
      DPT_TRY(dpt_buffer_fill_f32(s->resid, 0, np, 0.0f));
    }
  }
  if (s->ltrain) return check_records_model(cfg, s);
  return check_data_model(cfg, s);
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
  const size_t n = s->ltrain ? 0 : dpt_dataset_count(r->cfg->data.train);
  DPT_TRY(dpt_buffer_alloc(s->be, max_slice * input * sizeof(float), &s->x));
  const size_t L = s->labels;
  DPT_TRY(dpt_buffer_alloc(s->be, max_slice * L * sizeof(int32_t), &s->y));
  const size_t nb = dpt_model_num_buffer_floats(s->model);
  if (nb && r->cfg->checks.on_nonfinite == DPT_NONFINITE_SKIP)
    DPT_TRY(dpt_buffer_alloc(s->be, nb * sizeof(float), &s->kept_buffers));
  s->hx = malloc(max_slice * input * sizeof(float));
  s->hy = malloc(max_slice * L * sizeof(int32_t));
  if (L > 1) {
    const size_t B = r->cfg->schedule.global_batch < n ? r->cfg->schedule.global_batch : n;
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

dpt_status dpt_train_replica_setup(replica *r, replica_state *s) {
  s->mode = step_mode_of(r->cfg, r->count);
  s->grad_norm = NAN;
  DPT_TRY(create_backend_and_model(r, s));
  DPT_TRY(dpt_train_split_setup(r, s));
  DPT_TRY(alloc_batch(r, s));
  DPT_TRY(dpt_train_sparse_setup(r, s));
  DPT_TRY(create_optimizer(r, s));
  DPT_TRY(dpt_train_exact_setup(r, s));
  if (r->cfg->exchange.bucket_bytes != DPT_BUCKET_AUTO && !s->exact)
    DPT_TRY(dpt_train_buckets_setup(r, s, r->cfg->exchange.bucket_bytes));
  if (r->cfg->trace && r->index == 0) DPT_TRY(check_trace_path(r->cfg->trace));
  if (r->cfg->trace) {
    char who[64];
    snprintf(who, sizeof who, "rank %d, %s", r->over_mpi ? r->index : 0,
             dpt_backend_kind_name(dpt_train_backend_of(r)));
    DPT_TRY(dpt_trace_create(r->index, who, &s->trace));
  }
  if (r->cfg->exchange.bucket_bytes || s->trace)
    DPT_TRY(dpt_model_set_layer_hook(s->model, on_layer, s));
  if (r->cfg->exchange.sync_bn && r->count > 1)
    DPT_TRY(dpt_model_set_sync_bn(s->model, dpt_train_sum_over_replicas, r));
  if (r->cfg->init_params)
    DPT_TRY(dpt_model_set_state(s->model, r->cfg->init_params));
  else
    DPT_TRY(dpt_model_init(s->model, r->cfg->schedule.seed));
  return dpt_train_ckpt_setup(r, s);
}

/* Every replica's terms of the run (settings and data, run_terms.c) against replica 0's:
 * replicas started differently (MPI ranks, each with its own flags and files) stop together
 * here, before the first step, instead of training something else than asked. */
dpt_status dpt_train_agree_on_run(replica *r, replica_state *s) {
  const dpt_train_config *cfg = r->cfg;
  uint64_t mine[DPT_RUN_TERM_COUNT];
  dpt_run_terms(cfg, mine);
  DPT_TRY(dpt_allgather_host(r->comm, mine, sizeof mine, s->terms));
  DPT_TRY(dpt_run_terms_compare(s->terms, r->count));
  /* At least one: check_config refused a run without a batch. */
  s->batches = s->ltrain
                   ? (size_t)dpt_interactions_steps(s->ltrain, cfg->schedule.global_batch)
                   : dpt_sampler_num_batches(dpt_dataset_count(cfg->data.train),
                                             cfg->schedule.global_batch, cfg->schedule.keep_last);
  const int64_t per_epoch = (int64_t)s->batches;
  s->t.planned_steps =
      cfg->schedule.epochs > INT64_MAX / per_epoch ? INT64_MAX : cfg->schedule.epochs * per_epoch;
  if (cfg->schedule.max_steps > 0 && cfg->schedule.max_steps < s->t.planned_steps)
    s->t.planned_steps = cfg->schedule.max_steps;
  return DPT_OK;
}

/* Replica 0's parameters to every replica, then the first drift check. Every replica meets at
 * the check's exchange after a failure here, which stops them all together: the replica that
 * failed locally (device, staging) announces it there, and the others come whether the
 * broadcast went through for them or told them that a replica failed before it (DPT_ERR_COMM,
 * no data moved). A timeout or a disagreement on the call means the replicas are not in step:
 * stop now. */
dpt_status dpt_train_broadcast_params(replica *r, replica_state *s) {
  const size_t np = dpt_model_num_params(s->model), nb = dpt_model_num_buffer_floats(s->model);
  dpt_status st =
      dpt_broadcast_buffer(r->comm, dpt_model_params(s->model), 0, np * sizeof(float), 0);
  if (dpt_train_out_of_step(st)) return st;
  if (nb && st == DPT_OK)
    st = dpt_broadcast_buffer(r->comm, dpt_model_buffers(s->model), 0, nb * sizeof(float), 0);
  if (dpt_train_out_of_step(st)) return st;
  dpt_train_keep_failure(s, st);
  return dpt_train_check_drift(r, s, 0);
}
