/* Internal: the optimizer's sharded and in-parts steps, which only the trainer's sharded and
 * bucketed steps use (optimizer.c; the object itself is public in dptrain/optimizer.h). */
#ifndef DPTRAIN_CORE_TRAIN_OPTIMIZER_H
#define DPTRAIN_CORE_TRAIN_OPTIMIZER_H

#include <stddef.h>

#include "dptrain/backend.h"
#include "dptrain/model_device.h"
#include "dptrain/optimizer.h"

/* An optimizer that keeps state (SGD momentum, AdamW moments) for `ranges` only, packed: 1/R
 * of the memory when the ranges are a replica's shard (dpt_comm_shard). Ranges in increasing
 * order, not overlapping. Only dpt_optimizer_step_ranges with exactly these ranges steps it;
 * dpt_optimizer_step returns DPT_ERR_INVALID_ARG. */
dpt_status dpt_optimizer_create_sharded(dpt_model *model, const dpt_optim_config *cfg,
                                        const dpt_range *ranges, size_t n, dpt_optimizer **out);

/* The sharded step: the same update on the elements of `ranges` only (n ranges, element
 * offsets into the parameters, increasing; this replica's shard after a reduce-scatter of the
 * gradients, dpt_comm_shard), counted as one step. On an optimizer from dpt_optimizer_create,
 * state outside the ranges is left alone; on a sharded one the ranges must be its own.
 * Clipping needs the norm of the whole gradient: pass in grad_sumsq its sum of squares (every
 * replica's dpt_optimizer_grad_sumsq over its shard, summed over replicas in the same order
 * everywhere); it is ignored without clipping. grad_norm as for dpt_optimizer_step. */
dpt_status dpt_optimizer_step_ranges(dpt_optimizer *opt, const dpt_range *ranges, size_t n,
                                     double grad_sumsq, double *grad_norm);
/* The step in parts, for an update that follows the gradient's exchange range by range (the
 * trainer's gradient buckets update each bucket's shard as soon as its reduce-scatter is done):
 * dpt_optimizer_step_part updates `parts` (n ranges, increasing; on a sharded optimizer each
 * inside one of its own ranges) at the step's learning rate and counts nothing;
 * dpt_optimizer_end_step then counts the step. An element updated once between two
 * dpt_optimizer_end_step calls gets the bits dpt_optimizer_step_ranges would give it. Clipping
 * (clip_norm > 0) and LAMB need sums over the whole gradient first: DPT_ERR_UNSUPPORTED. */
dpt_status dpt_optimizer_step_part(dpt_optimizer *opt, const dpt_range *parts, size_t n);
dpt_status dpt_optimizer_end_step(dpt_optimizer *opt);
/* Whether dpt_optimizer_step_part can step this optimizer (no clipping, not LAMB). */
int dpt_optimizer_steps_in_parts(const dpt_optimizer *opt);
/* Sum of squares of the model's gradients over `ranges` (waits for the device). */
dpt_status dpt_optimizer_grad_sumsq(dpt_optimizer *opt, const dpt_range *ranges, size_t n,
                                    double *out);

/* LAMB (You et al., 2019): AdamW's direction r = m^ / (sqrt(v^) + eps) + wd * w, scaled per
 * tensor by the trust ratio ||w|| / ||r|| (1 when either is 0): w -= lr * ||w|| / ||r|| * r.
 * The norms are of whole tensors, which a sharded step holds in pieces on several replicas: such
 * a step runs in two phases around a sum over the replicas. dpt_optimizer_step and
 * dpt_optimizer_step_ranges do both phases with this replica's sums alone, right when the ranges
 * hold whole tensors (one replica, or the full step). */
/* Doubles of per-tensor sums the step needs summed over the replicas: 2 per parameter tensor
 * for LAMB, 0 for the other optimizers. */
size_t dpt_optimizer_num_sums(const dpt_optimizer *opt);
/* Phase one on `ranges` (as dpt_optimizer_step_ranges, clipping with grad_sumsq): the moments
 * are updated and the direction kept; sums[dpt_optimizer_num_sums] receives this replica's sums
 * of squares over the ranges, per tensor: weights, then direction. */
dpt_status dpt_optimizer_prepare_ranges(dpt_optimizer *opt, const dpt_range *ranges, size_t n,
                                        double grad_sumsq, double *sums);
/* Phase two: the update from the sums of every replica (added in the same order everywhere,
 * so identical on every replica); counts as one step. */
dpt_status dpt_optimizer_finish_ranges(dpt_optimizer *opt, const dpt_range *ranges, size_t n,
                                       const double *sums);

#endif
