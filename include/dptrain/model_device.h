/* dptrain: a model on its device (the advanced tier): the flat parameter, gradient and buffer
 * device buffers, the hooks the trainer sets (synchronized batch norm, the layer walk, sparse
 * table gradients, dropout's step), and forward and backward on device batches. dpt_train does
 * all of this itself; the model's description, files and host-level calls: dptrain/model.h.
 */
#ifndef DPTRAIN_MODEL_DEVICE_H
#define DPTRAIN_MODEL_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/backend.h"
#include "dptrain/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The flat parameter and gradient buffers, [num_params] floats each; owned by the model. */
DPT_API dpt_buffer *dpt_model_params(const dpt_model *model);
DPT_API dpt_buffer *dpt_model_grads(const dpt_model *model);

/* The flat buffer of the buffers (NULL for a model without any), owned by the model. */
DPT_API dpt_buffer *dpt_model_buffers(const dpt_model *model);

/* Batch norm under data parallelism. Without a hook each replica normalizes over its own
 * slice. With one, the per-channel statistics are combined over all replicas in the forward
 * pass and the matching sums in the backward pass, so R replicas compute what one replica would
 * on the combined batch: `sum` adds `count` doubles in place across the replicas (every replica
 * calls it the same number of times, in the same order) and returns DPT_OK or the failure. */
typedef dpt_status (*dpt_model_allreduce_fn)(void *ctx, double *data, size_t count);
DPT_API dpt_status dpt_model_set_sync_bn(dpt_model *model, dpt_model_allreduce_fn sum, void *ctx);

/* A hook on the layer walk, for timelines and for exchanging gradients while backward goes on:
 * called on the calling thread after each layer's forward (backward 0) and after each layer's
 * backward (backward 1; layers from the last to the first), once the layer's work is submitted
 * (a GPU backend may still be running it). In backward, `ready_from` says that the gradients
 * in [ready_from, num_params) of the flat buffer are complete: every layer that writes them
 * has submitted its backward (tensors are laid out in layer order; a tied weight is complete
 * only after its first user). In forward it is num_params. fn NULL: no hook. */
typedef void (*dpt_model_layer_fn)(void *ctx, size_t layer, int backward, size_t ready_from);
DPT_API dpt_status dpt_model_set_layer_hook(dpt_model *model, dpt_model_layer_fn fn, void *ctx);
/* The name of layer i ("" when unnamed) and its kind's ("linear"), for timelines; NULL past
 * the end. */
DPT_API const char *dpt_model_layer_name(const dpt_model *model, size_t layer);
DPT_API const char *dpt_model_layer_kind_name(const dpt_model *model, size_t layer);

/* Sparse table gradients: with `on`, backward adds each embedding_bag table's gradient into
 * the table's range of the gradient buffer instead of overwriting the range, so a step costs
 * the rows its ids touch, not the whole table. The caller keeps those ranges zero between steps
 * (clearing the rows it read; dpt_train does with sparse_tables). Turning it on zeroes them. */
DPT_API dpt_status dpt_model_set_sparse_table_grads(dpt_model *model, int on);

/* Where the next training step's samples sit, for dropout's mask: the run's seed, the step
 * number, and the index of this replica's first sample in the global batch. It does not
 * advance by itself: a program calling dpt_model_train_step directly sets it before each step
 * (dpt_train does), or every step draws the same mask. Each dropout layer mixes its index into
 * the seed, so two layers draw different masks. */
DPT_API dpt_status dpt_model_set_step(dpt_model *model, uint64_t seed, uint64_t step,
                                      uint32_t first_sample);

/* Forward and backward over `batch` samples (1 <= batch <= max_batch):
 * x: device buffer holding [batch, input_size] floats at element offset 0;
 * labels: device buffer holding [batch] int32 class indices ([batch, seq_len] for a token
 * model, where DPT_IGNORE_INDEX marks a position without a target; 0 or 1 for a model of one
 * class, trained with binary cross-entropy with logits).
 * The gradients are OVERWRITTEN with grad_scale * d(sum of per-target losses)/d(params), so a
 * replica holding b of a global batch of T targets (B samples, or the labelled positions of a
 * token model) passes grad_scale = 1/T and the sum over replicas is the mean over T. loss_sum
 * (sum of per-target losses, unscaled) and correct (targets predicted right) may be NULL. */
DPT_API dpt_status dpt_model_train_step(dpt_model *model, const dpt_buffer *x,
                                        const dpt_buffer *labels, size_t batch, float grad_scale,
                                        double *loss_sum, int64_t *correct);

/* Forward only, in evaluation mode (batch norm uses its running statistics, dropout is the
 * identity): loss sum and correct count over the batch. */
DPT_API dpt_status dpt_model_evaluate(dpt_model *model, const dpt_buffer *x,
                                      const dpt_buffer *labels, size_t batch, double *loss_sum,
                                      int64_t *correct);

/* Forward in evaluation mode, the logits [batch, num_classes] copied into host memory. */
DPT_API dpt_status dpt_model_logits(dpt_model *model, const dpt_buffer *x, size_t batch,
                                    float *logits);

#ifdef __cplusplus
}
#endif

#endif
