/* Data-parallel training: replicas, the batch split, the synchronized step, drift checks and
 * data-parallel evaluation. See include/dptrain/train.h for the step's contract.
 *
 * Each replica runs replica_main() on its own thread (threads transport) or process (MPI),
 * with its own backend, model and optimizer. Everything that decides control flow (loss
 * finiteness, fingerprints, evaluation counts) is exchanged with an allgather and combined in
 * replica order, so every replica takes the same branch: no replica can leave a collective
 * that another one enters. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "dptrain/train.h"

/* What every replica contributes to a step's decision. */
typedef struct step_stats {
  double loss_sum; /* sum of per-sample losses of the replica's slice */
  int64_t correct; /* correct predictions in the slice */
  int64_t samples; /* slice size */
  int64_t failed;  /* 1 when this replica failed locally (its message says why) */
  uint64_t hash;   /* parameter fingerprint (drift checks only) */
  double sumsq;    /* squared gradient norm over the replica's shard (sharded clipping only) */
  double compute;  /* seconds of the step's batch loading, forward and backward (steps only) */
} step_stats;

typedef struct replica {
  const dpt_train_config *cfg;
  dpt_comm *comm;  /* this replica's member */
  int index;       /* replica index = rank in comm */
  int count;       /* replicas in all */
  int ranks;       /* MPI ranks */
  int local_index; /* index among the replicas of this process / node (device choice) */
  dpt_status status;
  char error[1024]; /* message of a failure on this replica's thread */
  dpt_train_report final;
} replica;

/* The fingerprint: four independent lanes over 64-bit little-endian words (multiply, rotate,
 * multiply: every input bit reaches every bit of its lane within two words), folded together
 * with the tail bytes and the length, then avalanched. Four lanes keep the multiplier busy:
 * about 7x faster than the byte-at-a-time FNV-1a it replaced (2 MB of parameters: 0.3 against
 * 2.4 ms on one core of the EPYC VM of docs/performance.md), which the drift check pays every
 * --check-every steps. Same bytes, same value, on any host and at any alignment. */
#define FP_K1 0x9E3779B185EBCA87ull
#define FP_K2 0xC2B2AE3D27D4EB4Full
#define FP_K3 0x165667B19E3779F9ull

static uint64_t fp_rotl(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}

static uint64_t fp_load(const unsigned char *p) { /* little-endian, any alignment */
  return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
         (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

static uint64_t fp_round(uint64_t lane, uint64_t w) {
  return fp_rotl(lane + w * FP_K2, 31) * FP_K1;
}

uint64_t dpt_fingerprint(const void *data, size_t bytes) {
  const unsigned char *p = data;
  uint64_t h0 = FP_K1 + FP_K2, h1 = FP_K2, h2 = 0, h3 = (uint64_t)0 - FP_K1;
  size_t i = 0;
  if (bytes > 0 && !p) return 0;
  for (; i + 32 <= bytes; i += 32) {
    h0 = fp_round(h0, fp_load(p + i));
    h1 = fp_round(h1, fp_load(p + i + 8));
    h2 = fp_round(h2, fp_load(p + i + 16));
    h3 = fp_round(h3, fp_load(p + i + 24));
  }
  const uint64_t h[4] = {h0, h1, h2, h3};
  uint64_t x = FP_K3 + (uint64_t)bytes;
  for (int l = 0; l < 4; ++l)
    x = fp_rotl(x ^ fp_round(0, h[l]), 27) * FP_K1 + FP_K3;
  for (; i + 8 <= bytes; i += 8)
    x = fp_rotl(x ^ fp_round(0, fp_load(p + i)), 27) * FP_K1 + FP_K3;
  for (; i < bytes; ++i)
    x = fp_rotl(x ^ (p[i] * FP_K3), 11) * FP_K1;
  x ^= x >> 33;
  x *= FP_K2;
  x ^= x >> 29;
  x *= FP_K3;
  return x ^ (x >> 32);
}

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
}

/* Replica r's slice of a batch (dpt_batch_split); a kept last batch with fewer samples than
 * replicas gives one sample to each of the first replicas and none to the others. */
static void slice_of(size_t batch, int replicas, int r, size_t *start, size_t *count) {
  if (batch >= (size_t)replicas && dpt_batch_split(batch, replicas, r, start, count) == DPT_OK)
    return;
  *count = (size_t)r < batch ? 1 : 0;
  *start = (size_t)r < batch ? (size_t)r : batch;
}

/* Replicas whose per-step exchange needs no allocation. */
enum { GATHER_INLINE = 64 };

typedef struct replica_state {
  dpt_backend *be;
  dpt_model *model;
  dpt_optimizer *opt;
  dpt_buffer *x, *y; /* device batch: [slice, input] floats, [slice] int32 */
  float *hx;         /* host batch [max_slice, input] */
  int32_t *hy;       /* host labels [max_slice] */
  uint64_t *perm;    /* epoch permutation [n_train] */
  uint64_t *idx;     /* the slice's sample indices [max_slice] */
  float *hparams;    /* [num_params] host copy for fingerprints */
  dpt_range *shard;  /* this replica's shard of the parameters (sharded step), [nshard] */
  size_t nshard;
  step_stats *gather; /* [count]: gather_small, or allocated for more replicas */
  step_stats gather_small[GATHER_INLINE];
  dpt_status pending; /* a local failure the other replicas have not been told of yet */
  char pending_msg[1024];
} replica_state;

static void state_free(replica_state *s) {
  dpt_buffer_free(s->x);
  dpt_buffer_free(s->y);
  dpt_optimizer_destroy(s->opt);
  dpt_model_destroy(s->model);
  dpt_backend_destroy(s->be);
  free(s->hx);
  free(s->hy);
  free(s->perm);
  free(s->idx);
  free(s->hparams);
  free(s->shard);
  if (s->gather != s->gather_small) free(s->gather);
}

/* Keeps this replica's first local failure (with its message) for the next exchange. */
static void keep_failure(replica_state *s, dpt_status st) {
  if (st == DPT_OK || s->pending != DPT_OK) return;
  s->pending = st;
  snprintf(s->pending_msg, sizeof s->pending_msg, "%s", dpt_last_error());
}

/* Every exchange that decides control flow goes through here: the replica's stats and its
 * failure flag are gathered from all replicas and summed in replica order (identical
 * everywhere). `local` is this replica's outcome since the last exchange: a failure is kept
 * (with its message) and announced, so every replica stops at the same exchange, the failed
 * one with its own message, the others saying where it happened. */
static dpt_status exchange(replica *r, replica_state *s, step_stats *mine, step_stats *sum,
                           dpt_status local, const char *what) {
  keep_failure(s, local);
  mine->failed = s->pending != DPT_OK;
  dpt_status st = dpt_allgather_host(r->comm, mine, sizeof *mine, s->gather);
  if (s->pending != DPT_OK) return dpt_set_error(s->pending, "%s", s->pending_msg);
  if (st != DPT_OK) return st;
  memset(sum, 0, sizeof *sum);
  for (int i = 0; i < r->count; ++i) {
    sum->loss_sum += s->gather[i].loss_sum;
    sum->correct += s->gather[i].correct;
    sum->samples += s->gather[i].samples;
    sum->failed += s->gather[i].failed;
    sum->sumsq += s->gather[i].sumsq;
  }
  if (sum->failed) return dpt_set_error(DPT_ERR_DEVICE, "%s failed on another replica", what);
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

/* Fingerprints the parameters on every replica and compares them. */
static dpt_status check_drift(replica *r, replica_state *s, int64_t step, uint64_t *hash_out) {
  size_t n = dpt_model_num_params(s->model);
  step_stats mine, sum;
  memset(&mine, 0, sizeof mine);
  dpt_status st = s->pending == DPT_OK ? dpt_model_get_params(s->model, s->hparams) : DPT_OK;
  if (st == DPT_OK && s->pending == DPT_OK)
    mine.hash = dpt_fingerprint(s->hparams, n * sizeof(float));
  st = exchange(r, s, &mine, &sum, st, "the parameter fingerprint");
  if (st != DPT_OK) return st;
  if (hash_out) *hash_out = mine.hash;
  char list[512] = "";
  size_t len = 0;
  int differ = 0;
  for (int i = 1; i < r->count; ++i) {
    if (s->gather[i].hash == s->gather[0].hash) continue;
    ++differ;
    if (len < sizeof list - 16)
      len += (size_t)snprintf(list + len, sizeof list - len, "%s%d", differ > 1 ? ", " : "", i);
  }
  if (differ && !r->cfg->skip_allreduce) /* without the all-reduce, drift is the point */
    return dpt_set_error(DPT_ERR_MISMATCH,
                         "replica drift at step %lld: replicas %s differ from replica 0 "
                         "(parameter fingerprint %016llx)",
                         (long long)step, list, (unsigned long long)s->gather[0].hash);
  return DPT_OK;
}

/* The sharded step (the default with several replicas): the gradients are reduce-scattered,
 * each replica updates only its shard of the parameters (1/R of the optimizer's work and
 * state), and
 * the parameters are all-gathered. Every element is updated by one replica from the same sum
 * the ring all-reduce gives, so the parameters are bit for bit those of the full step when
 * its all-reduce runs the ring. */
static int sharded_step(const replica *r) {
  return r->count > 1 && !r->cfg->skip_allreduce && !r->cfg->full_optimizer_step;
}

/* The optimizer's outcome on this replica: a non-finite gradient norm (clipping) skips the step
 * with skip_nonfinite, else it is a failure like any other, kept for the next exchange.
 * Returns 1 when skipped. Every replica decides alike: the sharded step clips by the norm
 * summed over the replicas' exchange; the full step agrees on it first (see the step). */
static int optimizer_outcome(const replica *r, replica_state *s, dpt_status st) {
  if (st == DPT_ERR_NONFINITE && r->cfg->skip_nonfinite) return 1;
  keep_failure(s, st);
  return 0;
}

/* The optimizer half of the sharded step, after the reduce-scatter and the step's exchange.
 * A local failure is kept for the next exchange; the collectives are joined regardless, so
 * that no replica waits for one that gave up. *skipped: see optimizer_outcome. */
static dpt_status shard_step(replica *r, replica_state *s, double *t_opt, double *t_comm,
                             int *skipped) {
  double sumsq = 0;
  if (r->cfg->optim.clip_norm > 0.0f) {
    step_stats mine, sum;
    memset(&mine, 0, sizeof mine);
    dpt_status local = DPT_OK;
    if (s->pending == DPT_OK)
      local = dpt_optimizer_grad_sumsq(s->opt, s->shard, s->nshard, &mine.sumsq);
    dpt_status st = exchange(r, s, &mine, &sum, local, "the gradient norm");
    if (st != DPT_OK) return st;
    sumsq = sum.sumsq; /* summed in replica order: the same on every replica */
  }
  double t0 = dpt_now();
  *skipped = 0;
  if (s->pending == DPT_OK) /* a failure is announced at the next exchange */
    *skipped = optimizer_outcome(
        r, s, dpt_optimizer_step_ranges(s->opt, s->shard, s->nshard, sumsq, NULL));
  double t1 = dpt_now();
  *t_opt += t1 - t0;
  dpt_status st = dpt_allgather_shards_buffer(r->comm, dpt_model_params(s->model), 0,
                                              dpt_model_num_params(s->model), DPT_COMM_F32);
  *t_comm += dpt_now() - t1;
  if (st == DPT_ERR_TIMEOUT || st == DPT_ERR_COMM || st == DPT_ERR_MISMATCH) {
    /* The collective itself failed (every replica sees it, or the communicator is broken):
     * stop now, with this replica's own earlier failure if it had one. */
    if (s->pending != DPT_OK) return dpt_set_error(s->pending, "%s", s->pending_msg);
    return st;
  }
  keep_failure(s, st); /* local (staging, device): announced at the next exchange */
  return DPT_OK;
}

/* Uploads the given samples as the device batch. */
static dpt_status load_batch(replica_state *s, const dpt_dataset *ds, const uint64_t *idx,
                             size_t count, size_t input) {
  dpt_status st = dpt_dataset_gather(ds, idx, count, s->hx, s->hy);
  if (st == DPT_OK) st = dpt_buffer_upload(s->x, 0, s->hx, count * input * sizeof(float));
  if (st == DPT_OK) st = dpt_buffer_upload(s->y, 0, s->hy, count * sizeof(int32_t));
  return st;
}

/* Data-parallel evaluation: replica r takes a contiguous shard of the test set. */
static dpt_status evaluate(replica *r, replica_state *s, size_t max_slice, double *loss,
                           double *accuracy) {
  const dpt_dataset *ds = r->cfg->test;
  size_t n = dpt_dataset_count(ds), input = dpt_model_input_size(s->model);
  size_t start, count;
  slice_of(n, r->count, r->index, &start, &count);
  step_stats mine = {0, 0, (int64_t)count, 0, 0, 0, 0}, sum;
  dpt_status st = s->pending;
  for (size_t done = 0; done < count && st == DPT_OK;) {
    size_t b = count - done < max_slice ? count - done : max_slice;
    for (size_t i = 0; i < b; ++i)
      s->idx[i] = start + done + i;
    double l = 0;
    int64_t c = 0;
    st = load_batch(s, ds, s->idx, b, input);
    if (st == DPT_OK) st = dpt_model_evaluate(s->model, s->x, s->y, b, &l, &c);
    mine.loss_sum += l;
    mine.correct += c;
    done += b;
  }
  /* Every replica joins the exchange, even after a local failure, so nobody waits forever. */
  st = exchange(r, s, &mine, &sum, st, "evaluation");
  if (st != DPT_OK) return st;
  *loss = sum.samples ? sum.loss_sum / (double)sum.samples : NAN;
  *accuracy = sum.samples ? (double)sum.correct / (double)sum.samples : NAN;
  return DPT_OK;
}

static dpt_status replica_setup(replica *r, replica_state *s, size_t *max_slice_out) {
  const dpt_train_config *cfg = r->cfg;
  /* First what the start-up agreement needs, so a replica that fails below still takes part
   * (up to GATHER_INLINE replicas that needs no allocation, so it cannot fail). */
  s->gather =
      r->count <= GATHER_INLINE ? s->gather_small : malloc((size_t)r->count * sizeof(step_stats));
  if (!s->gather) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "training: out of host memory");
  int devices = 0;
  dpt_status st = dpt_device_count(cfg->backend, &devices);
  if (st != DPT_OK) return st;
  if (devices == 0)
    return dpt_error_context(DPT_ERR_UNSUPPORTED, "no %s device",
                             dpt_backend_kind_name(cfg->backend));
  int device = cfg->device >= 0 ? cfg->device : r->local_index % devices;
  st = dpt_backend_create(cfg->backend, device, &s->be);
  if (st != DPT_OK) return st;

  size_t max_slice = (cfg->global_batch + (size_t)r->count - 1) / (size_t)r->count;
  /* Evaluation reuses the training batch buffers, max_slice samples at a time. */
  *max_slice_out = max_slice;
  st = dpt_model_create(s->be, &cfg->model, max_slice, &s->model);
  if (st != DPT_OK) return st;
  size_t input = dpt_model_input_size(s->model), np = dpt_model_num_params(s->model);
  if (input != dpt_dataset_dim(cfg->train))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "the model takes %zu inputs per sample but the data set has %zu", input,
                         dpt_dataset_dim(cfg->train));
  if (cfg->test && dpt_dataset_dim(cfg->test) != input)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "the test set has %zu values per sample, the model takes %zu",
                         dpt_dataset_dim(cfg->test), input);
  if (sharded_step(r)) { /* the optimizer keeps state for this replica's shard only */
    s->nshard = dpt_comm_shard(r->comm, np, DPT_COMM_F32, r->index, NULL, 0);
    s->shard = malloc((s->nshard ? s->nshard : 1) * sizeof *s->shard);
    if (!s->shard) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "training: out of host memory");
    dpt_comm_shard(r->comm, np, DPT_COMM_F32, r->index, s->shard, s->nshard);
    st = dpt_optimizer_create_sharded(s->model, &cfg->optim, s->shard, s->nshard, &s->opt);
  } else {
    st = dpt_optimizer_create(s->model, &cfg->optim, &s->opt);
  }
  if (st == DPT_OK) st = dpt_buffer_alloc(s->be, max_slice * input * sizeof(float), &s->x);
  if (st == DPT_OK) st = dpt_buffer_alloc(s->be, max_slice * sizeof(int32_t), &s->y);
  if (st != DPT_OK) return st;
  size_t n = dpt_dataset_count(cfg->train);
  s->hx = malloc(max_slice * input * sizeof(float));
  s->hy = malloc(max_slice * sizeof(int32_t));
  s->perm = malloc(n * sizeof(uint64_t));
  s->idx = malloc(max_slice * sizeof(uint64_t));
  s->hparams = malloc(np * sizeof(float));
  if (!s->hx || !s->hy || !s->perm || !s->idx || !s->hparams)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "training: out of host memory");
  if (cfg->init_params)
    st = dpt_model_set_params(s->model, cfg->init_params);
  else
    st = dpt_model_init(s->model, cfg->seed);
  return st;
}

static dpt_status replica_run(replica *r, replica_state *s) {
  const dpt_train_config *cfg = r->cfg;
  size_t max_slice = 0;
  dpt_status st = replica_setup(r, s, &max_slice);
  if (!s->gather) return st; /* out of memory before anything else: the others time out */
  /* Agree that every replica is ready before the first collective on device data: a replica
   * that failed to set up reports it and all stop together. */
  step_stats ready, all;
  memset(&ready, 0, sizeof ready);
  /* The data sets' sizes ride along: every replica draws the same permutation of them, so
   * replicas (MPI ranks, each with its own files) that loaded different data sets stop
   * together here instead of training on unrelated samples or parting ways later. */
  ready.samples = (int64_t)dpt_dataset_count(cfg->train);
  ready.correct = cfg->test ? (int64_t)dpt_dataset_count(cfg->test) : -1;
  st = exchange(r, s, &ready, &all, st, "start-up");
  if (st != DPT_OK) return st;
  for (int i = 1; i < r->count; ++i) {
    const step_stats *a = &s->gather[0], *b = &s->gather[i];
    if (b->samples != a->samples || b->correct != a->correct)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "replica %d has %lld training and %lld test samples, replica 0 has "
                           "%lld and %lld (-1: no test set): every replica needs the same data "
                           "sets",
                           i, (long long)b->samples, (long long)b->correct, (long long)a->samples,
                           (long long)a->correct);
  }
  size_t n = dpt_dataset_count(cfg->train), B = cfg->global_batch;
  size_t batches = dpt_sampler_num_batches(n, B, cfg->keep_last);
  if (batches == 0) /* the same on every replica: the sizes agree */
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "global batch %zu is larger than the %zu training "
                         "samples (and the last partial batch is dropped)",
                         B, n);

  size_t np = dpt_model_num_params(s->model), input = dpt_model_input_size(s->model);
  dpt_buffer *params = dpt_model_params(s->model), *grads = dpt_model_grads(s->model);
  st = dpt_broadcast_buffer(r->comm, params, 0, np * sizeof(float), 0);
  /* Every replica meets at the fingerprint's exchange after a failure here, which stops them
   * all together: the replica that failed locally (device, staging) and announces it there,
   * and the others, whether the broadcast went through for them or told them that a replica
   * failed before it (DPT_ERR_COMM, no data moved). A timeout or a disagreement on the call
   * means the replicas are not in step: stop now. */
  if (st == DPT_ERR_TIMEOUT || st == DPT_ERR_MISMATCH) return st;
  keep_failure(s, st);
  uint64_t hash = 0;
  st = check_drift(r, s, 0, &hash);
  if (st != DPT_OK) return st;

  int64_t step = 0, skipped = 0;
  double run_start = dpt_now(), train_time = 0;
  int64_t trained_samples = 0;
  double t_compute = 0, t_allreduce = 0, t_optimizer = 0; /* the report's time split */
  double t_imbalance = 0;
  int stop = 0;
  for (int64_t epoch = 0; epoch < cfg->epochs && !stop; ++epoch) {
    double t0 = dpt_now();
    st = dpt_sampler_permutation(cfg->seed, (uint64_t)epoch, cfg->shuffle, n, s->perm);
    if (st != DPT_OK) return st;
    double epoch_loss = 0;
    int64_t epoch_samples = 0;
    for (size_t k = 0; k < batches; ++k) {
      size_t bstart, bcount, start, count;
      st = dpt_sampler_batch(n, B, cfg->keep_last, k, &bstart, &bcount);
      if (st != DPT_OK) return st;
      slice_of(bcount, r->count, r->index, &start, &count);
      step_stats mine = {0, 0, (int64_t)count, 0, 0, 0, 0}, sum;
      /* The loss gradient is scaled by 1/(samples in this global batch): the sum over replicas
       * is the batch mean, whatever the split (and for a kept, smaller last batch too). */
      const float scale = 1.0f / (float)bcount;
      double ta = dpt_now();
      if (s->pending != DPT_OK) {
        st = s->pending; /* failed after the last exchange: only join the collectives */
      } else if (count > 0) {
        st = load_batch(s, cfg->train, s->perm + bstart + start, count, input);
        if (st == DPT_OK)
          st = dpt_model_train_step(s->model, s->x, s->y, count, scale, &mine.loss_sum,
                                    &mine.correct);
      } else {
        st = dpt_buffer_fill_f32(grads, 0, np, 0.0f); /* contributes nothing to the sum */
      }
      double tb = dpt_now();
      t_compute += tb - ta;
      mine.compute = tb - ta;
      if (!cfg->skip_allreduce) {
        dpt_status sa = sharded_step(r)
                            ? dpt_reduce_scatter_buffer(r->comm, grads, 0, np, DPT_COMM_F32)
                            : dpt_allreduce_buffer(r->comm, grads, 0, np, DPT_COMM_F32);
        if (st == DPT_OK) st = sa;
        t_allreduce += dpt_now() - tb;
      }
      char what[64];
      snprintf(what, sizeof what, "step %lld", (long long)step + 1);
      st = exchange(r, s, &mine, &sum, st, what);
      if (st != DPT_OK) return st;
      t_imbalance += train_imbalance(s->gather, r->count);
      ++step;
      if (!isfinite(sum.loss_sum)) {
        if (!cfg->skip_nonfinite)
          return dpt_set_error(DPT_ERR_NONFINITE,
                               "the loss is not finite at step %lld (epoch %lld, batch %zu); "
                               "lower the learning rate or pass --skip-nonfinite",
                               (long long)step, (long long)epoch + 1, k + 1);
        ++skipped;
      } else {
        int skip = 0;
        if (sharded_step(r)) {
          st = shard_step(r, s, &t_optimizer, &t_allreduce, &skip);
          if (st != DPT_OK) return st;
        } else {
          double tc = dpt_now();
          if (cfg->skip_nonfinite && cfg->optim.clip_norm > 0.0f && r->count > 1) {
            /* Each replica computes the norm on its own backend, and a float sum (Vulkan) can
             * overflow where a double sum (CPU) does not: they agree before anyone steps. */
            step_stats mine_n, sum_n;
            memset(&mine_n, 0, sizeof mine_n);
            const dpt_range whole = {0, np};
            dpt_status ls = s->pending == DPT_OK
                                ? dpt_optimizer_grad_sumsq(s->opt, &whole, 1, &mine_n.sumsq)
                                : DPT_OK;
            st = exchange(r, s, &mine_n, &sum_n, ls, "the gradient norm");
            if (st != DPT_OK) return st;
            skip = !isfinite(sum_n.sumsq);
          }
          /* A failure is announced at the next exchange, which every replica reaches. */
          if (!skip) skip = optimizer_outcome(r, s, dpt_optimizer_step(s->opt, NULL));
          t_optimizer += dpt_now() - tc;
        }
        if (skip) {
          ++skipped;
        } else {
          epoch_loss += sum.loss_sum;
          epoch_samples += sum.samples;
        }
      }
      trained_samples += sum.samples;
      if (cfg->check_every > 0 && step % cfg->check_every == 0) {
        st = check_drift(r, s, step, &hash);
        if (st != DPT_OK) return st;
      }
      if (r->index == 0 && cfg->on_progress)
        cfg->on_progress(epoch + 1, k + 1, batches,
                         sum.samples ? sum.loss_sum / (double)sum.samples : NAN, cfg->user);
      if (cfg->max_steps > 0 && step >= cfg->max_steps) {
        stop = 1;
        break;
      }
    }
    double t1 = dpt_now();
    train_time += t1 - t0;
    dpt_train_report rep;
    memset(&rep, 0, sizeof rep);
    rep.epoch = epoch + 1;
    rep.steps = step;
    rep.skipped_steps = skipped;
    rep.train_loss = epoch_samples ? epoch_loss / (double)epoch_samples : NAN;
    rep.test_loss = rep.test_accuracy = NAN;
    /* The epoch's closing fingerprint: the report's param_hash is the current one. */
    st = check_drift(r, s, step, &hash);
    if (st != DPT_OK) return st;
    if (cfg->test && dpt_dataset_count(cfg->test) > 0) {
      st = evaluate(r, s, max_slice, &rep.test_loss, &rep.test_accuracy);
      if (st != DPT_OK) return st;
    }
    rep.samples_per_sec = train_time > 0 ? (double)trained_samples / train_time : 0;
    rep.seconds = dpt_now() - t0;
    rep.ranks = r->ranks;
    rep.replicas = r->count;
    rep.param_hash = hash;
    rep.backend = dpt_backend_kind_name(cfg->backend);
    rep.compute_seconds = t_compute;
    rep.allreduce_seconds = t_allreduce;
    rep.optimizer_seconds = t_optimizer;
    rep.imbalance_seconds = t_imbalance;
    if (r->index == 0 && cfg->on_report) cfg->on_report(&rep, cfg->user);
    r->final = rep;
  }
  r->final.final = 1;
  r->final.seconds = dpt_now() - run_start;
  r->final.steps = step;
  if (cfg->final_params && r->index == 0) st = dpt_model_get_params(s->model, cfg->final_params);
  if (r->index == 0 && cfg->on_report) cfg->on_report(&r->final, cfg->user);
  return st;
}

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

static dpt_status check_config(const dpt_train_config *cfg, dpt_comm *comm) {
  const char *fn = "dpt_train";
  if (!cfg) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: config is NULL", fn);
  if (!cfg->train) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: no training set", fn);
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
  if (cfg->epochs < 1) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: epochs must be >= 1", fn);
  if (cfg->max_steps < 0 || cfg->check_every < 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: max_steps/check_every must be >= 0", fn);
  return dpt_optim_config_check(&cfg->optim);
}

dpt_status dpt_train(const dpt_train_config *cfg, dpt_comm *comm, dpt_train_report *final) {
  dpt_status st = check_config(cfg, comm);
  if (st != DPT_OK) return st;
  if (comm) {
    replica r;
    memset(&r, 0, sizeof r);
    r.cfg = cfg;
    r.comm = comm;
    r.index = dpt_comm_rank(comm);
    r.count = dpt_comm_size(comm);
    r.ranks = r.count;
    r.local_index = local_rank(r.index);
    replica_state s;
    memset(&s, 0, sizeof s);
    st = replica_run(&r, &s);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dpt_last_error());
    state_free(&s);
    if (st != DPT_OK) return dpt_set_error(st, "%s", msg);
    if (final) *final = r.final;
    return DPT_OK;
  }

  int R = cfg->replicas;
  dpt_comm_group *group = NULL;
  replica *reps = calloc((size_t)R, sizeof *reps);
  pthread_t *threads = calloc((size_t)R, sizeof *threads);
  st = reps && threads ? DPT_OK
                       : dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_train: out of host memory");
  if (st == DPT_OK) st = dpt_comm_group_create(R, &group);
  for (int i = 0; i < R && st == DPT_OK; ++i) {
    reps[i].cfg = cfg;
    reps[i].index = i;
    reps[i].count = R;
    reps[i].ranks = 1;
    reps[i].local_index = i;
    st = dpt_comm_group_member(group, i, &reps[i].comm);
  }
  int started = 0;
  for (int i = 0; i < R && st == DPT_OK; ++i) {
    if (pthread_create(&threads[i], NULL, replica_thread, &reps[i]) != 0) {
      /* The replicas already running stop at their first collective's deadline. */
      st = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_train: cannot start replica thread %d", i);
      break;
    }
    ++started;
  }
  for (int i = 0; i < started; ++i)
    pthread_join(threads[i], NULL);
  /* Report the first failure, preferring the replica where it happened over those that only
   * saw it. */
  int worst = -1;
  for (int i = 0; i < started && st == DPT_OK; ++i) {
    if (reps[i].status == DPT_OK) continue;
    if (worst < 0 ||
        (strstr(reps[worst].error, "another replica") && !strstr(reps[i].error, "another replica")))
      worst = i;
  }
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
