/* dptrain: optimizer and learning-rate schedule settings (the training tier: what
 * dpt_train_config.optim holds). The optimizer object itself is in dptrain/optimizer.h.
 * Semantics are PyTorch's (torch.optim.SGD with dampening 0, torch.optim.AdamW).
 */
#ifndef DPTRAIN_OPTIM_H
#define DPTRAIN_OPTIM_H

#include <stdint.h>

#include "dptrain/status.h"

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

#ifdef __cplusplus
}
#endif

#endif
