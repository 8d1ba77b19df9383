/* dptrain: optimizers and learning-rate schedules.
 *
 * An optimizer updates a model's flat parameter buffer from its flat gradient buffer; its state
 * (momentum, or AdamW's moments) lives next to the parameters, on the same device, in the same
 * flat layout. Semantics are PyTorch's (torch.optim.SGD with dampening 0, torch.optim.AdamW).
 */
#ifndef DPTRAIN_OPTIM_H
#define DPTRAIN_OPTIM_H

#include <stdint.h>

#include "dptrain/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The one list of optimizers: X(ENUM_SUFFIX, value, "name"). */
#define DPT_OPTIM_KIND_MAP(X)                                                                      \
  X(SGD, 0, "sgd")                                                                                 \
  X(ADAMW, 1, "adamw")                                                                             \
  X(LAMB, 2, "lamb")

typedef enum dpt_optim_kind {
#define DPT_OPTIM_KIND_ENUM_(name, value, text) DPT_OPTIM_##name = value,
  DPT_OPTIM_KIND_MAP(DPT_OPTIM_KIND_ENUM_)
#undef DPT_OPTIM_KIND_ENUM_
      DPT_OPTIM_KIND_COUNT
} dpt_optim_kind;

/* "sgd", "adamw", "lamb"; NULL for values outside the list. */
DPT_API const char *dpt_optim_kind_name(dpt_optim_kind kind);

/* The one list of learning-rate schedules: X(ENUM_SUFFIX, value, "name"). The rate at step s
 * after warmup:
 *   constant: lr
 *   step:     lr * gamma^(floor(s / step_size))
 *   cosine:   min_lr + (lr - min_lr) * (1 + cos(pi * min(s, total_steps) / total_steps)) / 2
 *   linear:   min_lr + (lr - min_lr) * (1 - min(s, total_steps) / total_steps)  (BERT's) */
#define DPT_SCHEDULE_KIND_MAP(X)                                                                   \
  X(CONSTANT, 0, "constant")                                                                       \
  X(STEP, 1, "step")                                                                               \
  X(COSINE, 2, "cosine")                                                                           \
  X(LINEAR, 3, "linear")

typedef enum dpt_schedule_kind {
#define DPT_SCHEDULE_KIND_ENUM_(name, value, text) DPT_SCHEDULE_##name = value,
  DPT_SCHEDULE_KIND_MAP(DPT_SCHEDULE_KIND_ENUM_)
#undef DPT_SCHEDULE_KIND_ENUM_
      DPT_SCHEDULE_KIND_COUNT
} dpt_schedule_kind;

/* "constant", "step", "cosine", "linear"; NULL for values outside the list. */
DPT_API const char *dpt_schedule_kind_name(dpt_schedule_kind kind);

typedef struct dpt_optim_config {
  dpt_optim_kind kind;
  float lr;                /* base learning rate */
  float momentum;          /* SGD */
  int nesterov;            /* SGD */
  float weight_decay;      /* SGD: L2 added to the gradient; AdamW: decoupled */
  float beta1, beta2, eps; /* AdamW, LAMB */
  dpt_schedule_kind schedule;
  int64_t warmup_steps;   /* linear warmup from lr/warmup_steps to the schedule over these steps */
  int64_t step_size;      /* STEP: steps between decays */
  float gamma;            /* STEP: decay factor */
  int64_t total_steps;    /* COSINE, LINEAR: steps to reach min_lr (after warmup) */
  float min_lr;           /* COSINE, LINEAR */
  float clip_norm;        /* > 0: scale gradients so their global L2 norm is at most this */
  int decay_weights_only; /* 1: weight decay on the tensors named "*.weight" with two or more
                             dimensions only (linear and conv2d weights), none on biases and
                             batch norm parameters, as the ResNet recipe does; 0: on all */
  const char *no_decay;   /* NULL, or comma-separated shell patterns (fnmatch) of tensor names
                             that take no weight decay, e.g. "*.bias,*.norm*.weight" (borrowed:
                             must outlive the optimizer) */
} dpt_optim_config;

/* Defaults: SGD lr 0.01 momentum 0 / AdamW lr 1e-3 betas (0.9, 0.999) eps 1e-8 weight decay
 * 0.01; constant schedule, no warmup, no clipping. */
DPT_API void dpt_optim_config_default(dpt_optim_config *cfg, dpt_optim_kind kind);

/* Checks a configuration; DPT_ERR_INVALID_ARG naming the field otherwise. */
DPT_API dpt_status dpt_optim_config_check(const dpt_optim_config *cfg);

/* Learning rate for optimizer step `step` (0-based), warmup included. */
DPT_API double dpt_optim_lr_at(const dpt_optim_config *cfg, int64_t step);

typedef struct dpt_optimizer dpt_optimizer;

DPT_API dpt_status dpt_optimizer_create(dpt_model *model, const dpt_optim_config *cfg,
                                        dpt_optimizer **out);
DPT_API void dpt_optimizer_destroy(dpt_optimizer *opt);

/* One update from the model's gradients (which must already be the mean over the global batch,
 * identical on every replica). With clip_norm > 0 the gradients are scaled first. grad_norm (may
 * be NULL) receives the global gradient norm before clipping (computed only when clipping).
 * The step counter advances by one. */
DPT_API dpt_status dpt_optimizer_step(dpt_optimizer *opt, double *grad_norm);

/* An optimizer that keeps state (SGD momentum, AdamW moments) for `ranges` only, packed: 1/R
 * of the memory when the ranges are a replica's shard (dpt_comm_shard). Ranges in increasing
 * order, not overlapping. Only dpt_optimizer_step_ranges with exactly these ranges steps it;
 * dpt_optimizer_step returns DPT_ERR_INVALID_ARG. */
DPT_API dpt_status dpt_optimizer_create_sharded(dpt_model *model, const dpt_optim_config *cfg,
                                                const dpt_range *ranges, size_t n,
                                                dpt_optimizer **out);

/* The sharded step: the same update on the elements of `ranges` only (n ranges, element
 * offsets into the parameters, increasing; this replica's shard after a reduce-scatter of the
 * gradients, dpt_comm_shard), counted as one step. On an optimizer from dpt_optimizer_create,
 * state outside the ranges is left alone; on a sharded one the ranges must be its own.
 * Clipping needs the norm of the whole gradient: pass in grad_sumsq its sum of squares (every
 * replica's dpt_optimizer_grad_sumsq over its shard, summed over replicas in the same order
 * everywhere); it is ignored without clipping. grad_norm as for dpt_optimizer_step. */
DPT_API dpt_status dpt_optimizer_step_ranges(dpt_optimizer *opt, const dpt_range *ranges, size_t n,
                                             double grad_sumsq, double *grad_norm);
/* The step in parts, for an update that follows the gradient's exchange range by range (the
 * trainer's gradient buckets update each bucket's shard as soon as its reduce-scatter is done):
 * dpt_optimizer_step_part updates `parts` (n ranges, increasing; on a sharded optimizer each
 * inside one of its own ranges) at the step's learning rate and counts nothing;
 * dpt_optimizer_end_step then counts the step. An element updated once between two
 * dpt_optimizer_end_step calls gets the bits dpt_optimizer_step_ranges would give it. Clipping
 * (clip_norm > 0) and LAMB need sums over the whole gradient first: DPT_ERR_UNSUPPORTED. */
DPT_API dpt_status dpt_optimizer_step_part(dpt_optimizer *opt, const dpt_range *parts, size_t n);
DPT_API dpt_status dpt_optimizer_end_step(dpt_optimizer *opt);
/* Whether dpt_optimizer_step_part can step this optimizer (no clipping, not LAMB). */
DPT_API int dpt_optimizer_steps_in_parts(const dpt_optimizer *opt);
/* Sum of squares of the model's gradients over `ranges` (waits for the device). */
DPT_API dpt_status dpt_optimizer_grad_sumsq(dpt_optimizer *opt, const dpt_range *ranges, size_t n,
                                            double *out);

/* Steps taken so far. */
DPT_API int64_t dpt_optimizer_steps(const dpt_optimizer *opt);

/* LAMB (You et al., 2019): AdamW's direction r = m^ / (sqrt(v^) + eps) + wd * w, scaled per
 * tensor by the trust ratio ||w|| / ||r|| (1 when either is 0): w -= lr * ||w|| / ||r|| * r.
 * The norms are of whole tensors, which a sharded step holds in pieces on several replicas: such
 * a step runs in two phases around a sum over the replicas. dpt_optimizer_step and
 * dpt_optimizer_step_ranges do both phases with this replica's sums alone, right when the ranges
 * hold whole tensors (one replica, or the full step). */
/* Doubles of per-tensor sums the step needs summed over the replicas: 2 per parameter tensor
 * for LAMB, 0 for the other optimizers. */
DPT_API size_t dpt_optimizer_num_sums(const dpt_optimizer *opt);
/* Phase one on `ranges` (as dpt_optimizer_step_ranges, clipping with grad_sumsq): the moments
 * are updated and the direction kept; sums[dpt_optimizer_num_sums] receives this replica's sums
 * of squares over the ranges, per tensor: weights, then direction. */
DPT_API dpt_status dpt_optimizer_prepare_ranges(dpt_optimizer *opt, const dpt_range *ranges,
                                                size_t n, double grad_sumsq, double *sums);
/* Phase two: the update from the sums of every replica (added in the same order everywhere,
 * so identical on every replica); counts as one step. */
DPT_API dpt_status dpt_optimizer_finish_ranges(dpt_optimizer *opt, const dpt_range *ranges,
                                               size_t n, const double *sums);

/* The optimizer's state, for checkpoints: `slots` tensors of the parameters' layout, each
 * named as in PyTorch's optimizer state (SGD with momentum: "momentum_buffer"; AdamW: "exp_avg",
 * "exp_avg_sq"; SGD without momentum has none), and the step counter. */
DPT_API int dpt_optimizer_num_slots(const dpt_optimizer *opt);
/* The name of slot `slot`; NULL outside [0, dpt_optimizer_num_slots). */
DPT_API const char *dpt_optimizer_slot_name(const dpt_optimizer *opt, int slot);
/* Copies slot `slot` into host[num_params] at the parameters' offsets: everything, or for a
 * sharded optimizer its own ranges only (the rest of host is left as it is). Waits for the
 * device. */
DPT_API dpt_status dpt_optimizer_get_state(const dpt_optimizer *opt, int slot, float *host);
/* Sets slot `slot` from host[num_params] (a sharded optimizer takes its own ranges), so that a
 * state saved at any world size is re-cut into this replica's shard. */
DPT_API dpt_status dpt_optimizer_set_state(dpt_optimizer *opt, int slot, const float *host);
/* Sets the step counter (the schedule's position; AdamW's bias correction). */
DPT_API dpt_status dpt_optimizer_set_steps(dpt_optimizer *opt, int64_t steps);
/* A factor (> 0) on the schedule's learning rate from now on (1: none); rollbacks lower it. */
DPT_API dpt_status dpt_optimizer_set_lr_scale(dpt_optimizer *opt, double scale);
/* The learning rate the next step uses: the schedule's at the step counter, times the factor
 * (as a float, as the step computes it); 0 for NULL. */
DPT_API float dpt_optimizer_lr(const dpt_optimizer *opt);

#ifdef __cplusplus
}
#endif

#endif
