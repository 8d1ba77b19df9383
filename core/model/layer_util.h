/* Helpers the layer families of core/model/layers/ share with planning, memory and the walk
 * over the graph: messages naming a layer, the tensor lists, device memory, gradient routing,
 * dropout's generator and parameter initialization (core/model/layer_util.c). */
#ifndef DPTRAIN_CORE_MODEL_LAYER_UTIL_H
#define DPTRAIN_CORE_MODEL_LAYER_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "core/model/model_impl.h"

/* DPT_ERR_INVALID_ARG "dpt_model_create: <label>: <message>", the label naming layer i. */
dpt_status dpt_layer_error(const dpt_model *m, size_t i, const char *fmt, ...);
#define LAYER_ERR(m, i, ...) dpt_layer_error((m), (i), __VA_ARGS__)

/* Appends tensor "<prefix>.<what>" of shape[ndim] to the parameters (buffer 0) or the buffers
 * (1), at the end of its flat buffer; *index_out (may be NULL) receives its index. */
dpt_status dpt_layer_add_tensor(dpt_model *m, size_t i, int buffer, const char *what, int ndim,
                                const int64_t *shape, size_t *index_out);
/* "weight" of shape w_shape[ndim] and, unless no_bias, "bias" [w_shape[0]]. */
dpt_status dpt_layer_add_weight_and_bias(dpt_model *m, size_t i, int ndim, const int64_t *w_shape);
/* The input checks of planning: a sequence, an image, a model of records (no token ids). */
dpt_status dpt_layer_need_seq(const dpt_model *m, size_t i, const dpt_sample_shape *x);
dpt_status dpt_layer_need_image(const dpt_model *m, size_t i, const dpt_sample_shape *x);
dpt_status dpt_layer_need_records(const dpt_model *m, size_t i);
/* The shape of layer i's input j (the model input for DPT_LAYER_INPUT_MODEL); a vector of n. */
dpt_sample_shape dpt_layer_input_shape(const dpt_model *m, size_t i, int j);
dpt_sample_shape dpt_layer_vector_shape(size_t n);

/* A device buffer of count elements of elem bytes, counted as activation memory. */
dpt_status dpt_layer_alloc_floats(dpt_model *m, size_t count, size_t elem, dpt_buffer **out);
/* An int32 device buffer holding host[n] (not activation memory: a constant of the model). */
dpt_status dpt_layer_upload_i32(dpt_model *m, const int32_t *host, size_t n, dpt_buffer **out);

/* The layer holding input src's output and its gradient (its store), -1 for the model input. */
int dpt_layer_store_of(const dpt_model *m, int src);
/* Where layer L's input j gradient goes: the input's dout for the first contribution, else the
 * scratch buffer (*add set: add it with dpt_layer_add_gradient); NULL for the model input. */
dpt_buffer *dpt_layer_grad_target(dpt_model *m, const dpt_node *L, int j, int *add);
dpt_status dpt_layer_add_gradient(dpt_model *m, const dpt_node *L, int j, size_t b);
/* The beta of a use of weight w's gradient: 0 for the step's first use, then 1. */
float dpt_layer_weight_beta(dpt_model *m, size_t w);
/* Dropout's generator for layer L this step (the layer's index mixed into the seed). */
dpt_dropout_params dpt_layer_dropout_params(const dpt_model *m, const dpt_node *L);

/* Tensor t uniform in +-bound, or normal(0, sd) when sd > 0, from its own generator stream;
 * tensor t zero (SIZE_MAX: none). */
void dpt_layer_init_tensor(const dpt_model *m, size_t t, uint64_t seed, double bound, double sd,
                           float *host);
void dpt_layer_zero_tensor(const dpt_model *m, size_t t, float *host);
/* linear's and conv2d's weight and bias as PyTorch initializes them. */
void dpt_layer_init_weight_bias(const dpt_model *m, const dpt_node *L, uint64_t seed, float *host);

#endif
