/* The training configuration: its defaults, and the checks that refuse a run before any
 * replica starts (core/train/config.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/error.h"
#include "core/train/config.h"
#include "core/train/run_terms.h"
#include "dptrain/train.h"

/* Each released layout's sizeof(dpt_train_config), oldest first: the sizes a caller may pass. */
static const size_t known_sizes[] = {
    offsetof(dpt_train_config, log_dir),       /* before log_dir */
    offsetof(dpt_train_config, table_lr),      /* before table_lr */
    offsetof(dpt_train_config, options_json),  /* before options_json */
    offsetof(dpt_train_config, deterministic), /* before deterministic */
    sizeof(dpt_train_config)};

static int known_size(size_t size) {
  for (size_t i = 0; i < sizeof known_sizes / sizeof known_sizes[0]; i++)
    if (size == known_sizes[i]) return 1;
  return 0;
}

static void defaults(dpt_train_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->size = sizeof *cfg;
  dpt_optim_config_default(&cfg->optim, DPT_OPTIM_SGD);
  cfg->optim.lr = 0.05f;
  cfg->optim.momentum = 0.9f;
  cfg->devices.backend = DPT_BACKEND_CPU;
  cfg->devices.device = -1;
  cfg->devices.replicas = 1;
  cfg->schedule.global_batch = 256;
  cfg->schedule.epochs = 10;
  cfg->schedule.shuffle = 1;
  cfg->checks.check_every = 100;
  cfg->checks.max_skipped = 10;
  cfg->checkpoints.keep_checkpoints = 3;
  cfg->checks.max_rollbacks = 3;
  cfg->checks.rollback_lr_scale = 1.0;
}

dpt_status dpt_train_config_init(dpt_train_config *cfg, size_t size) {
  if (!cfg) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_train_config_init: cfg is NULL");
  if (!known_size(size)) {
    if (size >= sizeof cfg->size) cfg->size = 0;
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "dpt_train_config_init: size %zu is not a configuration size this "
                         "library knows (its own is %zu)",
                         size, sizeof *cfg);
  }
  dpt_train_config full;
  defaults(&full);
  memcpy(cfg, &full, size);
  cfg->size = size;
  return DPT_OK;
}

dpt_status dpt_train_config_import(const dpt_train_config *in, dpt_train_config *out) {
  if (!in) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_train: config is NULL");
  if (!known_size(in->size))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "dpt_train: config size %zu is not one this library knows (its own is "
                         "%zu): fill the configuration with dpt_train_config_default",
                         in->size, sizeof *out);
  defaults(out);
  memcpy(out, in, in->size);
  out->size = sizeof *out;
  return DPT_OK;
}

/* The checkpoint and non-finite settings. */
static dpt_status check_checkpoints(const dpt_train_config *cfg) {
  const char *fn = "dpt_train";
  if ((unsigned)cfg->checks.on_nonfinite > DPT_NONFINITE_ROLLBACK)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: unknown on_nonfinite %d", fn,
                         (int)cfg->checks.on_nonfinite);
  if (!cfg->checkpoints.checkpoint_dir &&
      (cfg->checkpoints.resume || cfg->checks.on_nonfinite == DPT_NONFINITE_ROLLBACK))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %s needs a checkpoint directory", fn,
                         cfg->checkpoints.resume ? "resuming" : "rolling back");
  if (cfg->checkpoints.checkpoint_dir && !*cfg->checkpoints.checkpoint_dir)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: the checkpoint directory is empty", fn);
  if (cfg->checkpoints.checkpoint_every < 0 || !(cfg->checkpoints.checkpoint_minutes >= 0) ||
      cfg->checkpoints.keep_checkpoints < 1)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: checkpoint_every and checkpoint_minutes must be >= 0 and "
                         "keep_checkpoints >= 1",
                         fn);
  if (cfg->checks.max_rollbacks < 0 ||
      !(cfg->checks.rollback_lr_scale > 0 && cfg->checks.rollback_lr_scale <= 1))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: max_rollbacks must be >= 0 and rollback_lr_scale in (0, 1]", fn);
  return DPT_OK;
}

/* The per-replica readers (cfg->data.local_train, local_test): one per replica of this process,
 * each opened as its replica's rank of the `total` replicas, all over the same shards; and the
 * settings that do not apply to them. */
static dpt_status check_local_data(const dpt_train_config *cfg, dpt_comm *comm, int total) {
  const char *fn = "dpt_train";
  if (cfg->data.train || cfg->data.test)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: per-replica data (local_train) replaces the data sets: train and "
                         "test must be NULL",
                         fn);
  if (!cfg->schedule.shuffle || cfg->schedule.keep_last || cfg->data.transform.mean ||
      cfg->data.transform.crop_pad || cfg->data.transform.hflip)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: per-replica records are drawn by the shards' epoch rule: no "
                         "--no-shuffle, --keep-last, normalization or augmentation",
                         fn);
  const int mine = comm ? 1 : cfg->devices.replicas;
  for (int k = 0; k < 2; ++k) {
    dpt_interactions *const *set = k ? cfg->data.local_test : cfg->data.local_train;
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
  const dpt_interactions *d0 = cfg->data.local_train[0];
  for (int q = 0; q < total; ++q) {
    if (dpt_interactions_rank_records(d0, q) == 0)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "%s: replica %d's training shards hold no record (each of the %d "
                           "replicas needs a shard with records)",
                           fn, q, total);
  }
  if (dpt_interactions_steps(cfg->data.local_train[0], cfg->schedule.global_batch) == 0)
    return dpt_set_error(
        DPT_ERR_INVALID_ARG, "global batch %zu is larger than the %llu training records",
        cfg->schedule.global_batch,
        (unsigned long long)dpt_interactions_total_records(cfg->data.local_train[0]));
  return DPT_OK;
}

/* The replicas against the world and the global batch, the split, the backends. */
static dpt_status check_replicas(const dpt_train_config *cfg, dpt_comm *comm, int total) {
  const char *fn = "dpt_train";
  if (cfg->devices.replicas < 1)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: replicas %d must be >= 1", fn,
                         cfg->devices.replicas);
  if (comm && cfg->devices.replicas != 1)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: with MPI every rank is one replica (replicas must be 1, got %d)", fn,
                         cfg->devices.replicas);
  if (cfg->schedule.global_batch == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: global batch is 0", fn);
  if (cfg->schedule.global_batch < (size_t)total)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: global batch %zu is smaller than the %d replicas (each needs at "
                         "least one sample)",
                         fn, cfg->schedule.global_batch, total);
  if ((unsigned)cfg->devices.split > DPT_SPLIT_PROPORTIONAL || cfg->devices.split_every < 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: split %d is not 0 (even) or 1 (proportional), or split_every "
                         "%lld is negative",
                         fn, (int)cfg->devices.split, (long long)cfg->devices.split_every);
  if (cfg->devices.split == DPT_SPLIT_PROPORTIONAL && cfg->data.local_train)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: the proportional split needs a data set: with per-replica records "
                         "(local_train) each replica's slice is the shards' rule",
                         fn);
  if (cfg->devices.split == DPT_SPLIT_PROPORTIONAL && cfg->schedule.global_batch > UINT32_MAX)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: the proportional split takes a global batch below 2^32", fn);
  if (comm && cfg->devices.replica_backends)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: replica_backends is for replicas as threads; under MPI each rank "
                         "picks its own backend",
                         fn);
  return DPT_OK;
}

/* The sparse tables' optimizer and rate: known, and only with sparse_tables. */
static dpt_status check_tables(const dpt_train_config *cfg, const char *fn) {
  if (cfg->exchange.table_optimizer < DPT_TABLE_SGD ||
      cfg->exchange.table_optimizer > DPT_TABLE_ADAM)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: table_optimizer %d is not 0 (sgd), 1 (row-wise adagrad), 2 "
                         "(row-wise adam) or 3 (adam)",
                         fn, cfg->exchange.table_optimizer);
  if (!(cfg->table_lr >= 0 && cfg->table_lr < 1e30))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: table_lr %g must be >= 0 (0: the default)", fn,
                         cfg->table_lr);
  if (cfg->table_lr != 0 && !cfg->exchange.sparse_tables)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: table_lr needs sparse_tables", fn);
  if (cfg->exchange.table_optimizer != DPT_TABLE_SGD && !cfg->exchange.sparse_tables)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: table_optimizer %d (row-wise) needs sparse_tables", fn,
                         cfg->exchange.table_optimizer);
  return DPT_OK;
}

/* The gradient exchange's settings and what they combine with. */
static dpt_status check_exchange(const dpt_train_config *cfg) {
  const char *fn = "dpt_train";
  if (cfg->exchange.sparse_tables && !cfg->data.local_train)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: sparse_tables needs per-replica records (local_train)", fn);
  if (cfg->exchange.sparse_tables && !(cfg->exchange.sparse_dense_above >= 0))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: sparse_dense_above must be >= 0", fn);
  DPT_TRY(check_tables(cfg, fn));
  if (cfg->exchange.grad_dtype != DPT_COMM_F32 && cfg->exchange.grad_dtype != DPT_COMM_F16 &&
      cfg->exchange.grad_dtype != DPT_COMM_BF16)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: grad_dtype %d is not F32, F16 or BF16", fn,
                         (int)cfg->exchange.grad_dtype);
  if (cfg->exchange.grad_dtype != DPT_COMM_F32 && cfg->exchange.sparse_tables)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: the %s gradient exchange (grad_dtype %s) does not combine "
                         "with sparse_tables",
                         fn, cfg->exchange.grad_dtype == DPT_COMM_F16 ? "binary16" : "bfloat16",
                         cfg->exchange.grad_dtype == DPT_COMM_F16 ? "F16" : "BF16");
  if (cfg->exchange.grad_error_feedback && cfg->exchange.grad_dtype == DPT_COMM_F32)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: grad_error_feedback needs a 16-bit exchange (grad_dtype F16 or "
                         "BF16)",
                         fn);
  if (cfg->exchange.bucket_whole_update && !cfg->exchange.bucket_bytes)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: bucket_whole_update needs gradient buckets (bucket_bytes)", fn);
  if (cfg->schedule.accumulate > 1 && (cfg->exchange.sparse_tables || cfg->exchange.sync_bn))
    return dpt_set_error(
        DPT_ERR_INVALID_ARG, "%s: accumulate (%zu micro-batches) does not combine with %s", fn,
        cfg->schedule.accumulate, cfg->exchange.sparse_tables ? "sparse_tables" : "sync_bn");
  if (cfg->schedule.accumulate > 1 && cfg->schedule.accumulate > cfg->schedule.global_batch)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: accumulate %zu is more micro-batches than the global batch's %zu "
                         "samples",
                         fn, cfg->schedule.accumulate, cfg->schedule.global_batch);
  if (cfg->exchange.sparse_tables && cfg->exchange.skip_allreduce)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: sparse_tables exchanges the tables' rows; skip_allreduce exchanges "
                         "nothing",
                         fn);
  if (cfg->exchange.sparse_tables && cfg->optim.clip_norm > 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: sparse_tables does not clip (clip_norm %g): the norm would need "
                         "every table's rows",
                         fn, (double)cfg->optim.clip_norm);
  return DPT_OK;
}

/* The run's length and the drift check's period. */
static dpt_status check_length(const dpt_train_config *cfg) {
  const char *fn = "dpt_train";
  if (cfg->schedule.epochs < 1)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: epochs must be >= 1", fn);
  if (cfg->schedule.max_steps < 0 || cfg->checks.check_every < 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: max_steps/check_every must be >= 0", fn);
  return DPT_OK;
}

/* A data set's batches against the global batch, sync-bn's last batch, the transforms. */
static dpt_status check_data_set(const dpt_train_config *cfg, int total) {
  const char *fn = "dpt_train";
  if (dpt_sampler_num_batches(dpt_dataset_count(cfg->data.train), cfg->schedule.global_batch,
                              cfg->schedule.keep_last) == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "global batch %zu is larger than the %zu training samples (and the last "
                         "partial batch is dropped)",
                         cfg->schedule.global_batch, dpt_dataset_count(cfg->data.train));
  DPT_TRY(check_length(cfg));
  /* Sync-bn sums in the forward pass: a replica without a sample would not join. */
  size_t last = dpt_sampler_last_batch(dpt_dataset_count(cfg->data.train),
                                       cfg->schedule.global_batch, cfg->schedule.keep_last);
  if (cfg->exchange.sync_bn && total > 1 && last < (size_t)total)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: sync-bn needs a sample on every replica in every step, but the "
                         "kept last batch has %zu samples for %d replicas (drop it)",
                         fn, last, total);
  DPT_TRY(dpt_data_transform_check(&cfg->data.transform, cfg->data.train));
  if (cfg->data.test) DPT_TRY(dpt_data_transform_check(&cfg->data.transform, cfg->data.test));
  return DPT_OK;
}

/* The caller's settings, when given, are a JSON object. */
static dpt_status check_options_json(const dpt_train_config *cfg) {
  if (!cfg->options_json) return DPT_OK;
  json_error_t err;
  json_t *j = json_loads(cfg->options_json, 0, &err);
  const int object = json_is_object(j), parsed = j != NULL;
  json_decref(j);
  if (!object)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_train: options_json is not a JSON object%s%s",
                         parsed ? "" : ": ", parsed ? "" : err.text);
  return DPT_OK;
}

/* What a deterministic run needs: whole groups, and no setting whose sums it cannot make exact. */
static dpt_status check_deterministic(const dpt_train_config *cfg) {
  const char *fn = "dpt_train", *why = NULL;
  if (!cfg->deterministic) {
    if (cfg->group_size)
      return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: group_size needs deterministic", fn);
    return DPT_OK;
  }
  const size_t B = cfg->schedule.global_batch, G = dpt_train_group_size(cfg);
  if (B % G)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: deterministic: the group size %zu does not divide the global batch "
                         "%zu; every replica's slice must be whole groups",
                         fn, G, B);
  if (cfg->exchange.sync_bn)
    why = "sync_bn sums the batch statistics in float across replicas; under deterministic each "
          "group normalizes over its own samples (ghost batch norm)";
  else if (cfg->exchange.sparse_tables || cfg->data.local_train)
    why = "per-replica records make each world size train on different batches";
  else if (cfg->exchange.grad_dtype != DPT_COMM_F32)
    why = "a 16-bit exchange rounds the sums; the exact exchange sends 64-bit fixed point";
  else if (cfg->exchange.skip_allreduce)
    why = "skip_allreduce exchanges nothing";
  if (why) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: deterministic: %s", fn, why);
  return DPT_OK;
}

dpt_status dpt_train_check_config(const dpt_train_config *cfg, dpt_comm *comm) {
  const char *fn = "dpt_train";
  if (!cfg) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: config is NULL", fn);
  if (!cfg->data.train && !cfg->data.local_train)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: no training set", fn);
  const int total = comm ? dpt_comm_size(comm) : cfg->devices.replicas;
  DPT_TRY(check_replicas(cfg, comm, total));
  DPT_TRY(check_exchange(cfg));
  if (cfg->data.local_train) {
    DPT_TRY(check_local_data(cfg, comm, total));
    DPT_TRY(check_length(cfg));
  } else {
    DPT_TRY(check_data_set(cfg, total));
  }
  DPT_TRY(check_checkpoints(cfg));
  DPT_TRY(check_options_json(cfg));
  DPT_TRY(check_deterministic(cfg));
  return dpt_optim_config_check(&cfg->optim);
}
