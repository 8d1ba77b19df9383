/* dptrain: the optimizer object (advanced tier): an update of a model's flat parameter buffer
 * from its flat gradient buffer, and its state for checkpoints. dpt_train makes its own.
 *
 * The state (momentum, or AdamW's moments) lives next to the parameters, on the same device, in
 * the same flat layout. Settings and schedules: dptrain/optim.h.
 */
#ifndef DPTRAIN_OPTIMIZER_H
#define DPTRAIN_OPTIMIZER_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/model.h"
#include "dptrain/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dpt_optimizer dpt_optimizer;

/* An optimizer with state for every parameter of `model`, on the model's backend. */
DPT_API dpt_status dpt_optimizer_create(dpt_model *model, const dpt_optim_config *cfg,
                                        dpt_optimizer **out);
/* Frees the optimizer and its state; NULL does nothing. */
DPT_API void dpt_optimizer_destroy(dpt_optimizer *opt);

/* One update from the model's gradients (which must already be the mean over the global batch,
 * identical on every replica). With clip_norm > 0 the gradients are scaled first. grad_norm (may
 * be NULL) receives the global gradient norm before clipping (computed only when clipping).
 * The step counter advances by one. */
DPT_API dpt_status dpt_optimizer_step(dpt_optimizer *opt, double *grad_norm);

/* Steps taken so far. */
DPT_API int64_t dpt_optimizer_steps(const dpt_optimizer *opt);

/* The optimizer's state, for checkpoints: `slots` tensors of the parameters' layout, each
 * named as in PyTorch's optimizer state (SGD with momentum: "momentum_buffer"; AdamW: "exp_avg",
 * "exp_avg_sq"; SGD without momentum has none), and the step counter. */
DPT_API int dpt_optimizer_num_slots(const dpt_optimizer *opt);
/* The name of slot `slot`; NULL outside [0, dpt_optimizer_num_slots). */
DPT_API const char *dpt_optimizer_slot_name(const dpt_optimizer *opt, int slot);
/* Copies slot `slot` into host[num_params] at the parameters' offsets: everything, or for a
 * sharded optimizer (the trainer's) its own ranges only (the rest of host is left as it is).
 * Waits for the device. */
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
