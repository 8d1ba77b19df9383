/* dptrain: sequential models on one backend.
 *
 * A model is a sequence of layers (linear, relu, conv2d, max-pool, flatten) ending in softmax
 * cross-entropy. Its parameters live in ONE contiguous device buffer and its gradients in
 * another of the same layout, with a named view per tensor. Names and layouts follow PyTorch's
 * nn.Sequential state_dict: layer i's tensors are "i.weight" ([out, in] for linear,
 * [out, in, kh, kw] for conv2d) and "i.bias" ([out]), in layer order, weight before bias; the
 * flat buffers hold them in that order, back to back. Initialization follows PyTorch's defaults
 * for these layers (weights and biases uniform in +-1/sqrt(fan_in), i.e. Kaiming-uniform with
 * a = sqrt(5)), drawn from a seed, so the same seed gives the same model on every replica and
 * every backend.
 */
#ifndef DPTRAIN_MODEL_H
#define DPTRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The one list of layer kinds: X(ENUM_SUFFIX, value, "name"). The spec fields each uses:
 * linear: size (out features); relu: none; conv2d: size (out channels), kernel, stride,
 * padding; maxpool: kernel, stride (0 = kernel); flatten: none. */
#define DPT_LAYER_KIND_MAP(X)                                                                      \
  X(LINEAR, 0, "linear")                                                                           \
  X(RELU, 1, "relu")                                                                               \
  X(CONV2D, 2, "conv2d")                                                                           \
  X(MAXPOOL, 3, "maxpool")                                                                         \
  X(FLATTEN, 4, "flatten")

typedef enum dpt_layer_kind {
#define DPT_LAYER_KIND_ENUM_(name, value, text) DPT_LAYER_##name = value,
  DPT_LAYER_KIND_MAP(DPT_LAYER_KIND_ENUM_)
#undef DPT_LAYER_KIND_ENUM_
      DPT_LAYER_KIND_COUNT
} dpt_layer_kind;

/* "linear", "relu", "conv2d", "maxpool", "flatten"; NULL for values outside the list. */
DPT_API const char *dpt_layer_kind_name(dpt_layer_kind kind);

typedef struct dpt_layer_spec {
  dpt_layer_kind kind;
  size_t size;    /* linear: out features; conv2d: out channels */
  size_t kernel;  /* conv2d / maxpool: square kernel side */
  size_t stride;  /* conv2d / maxpool: stride (0 means 1 for conv2d, kernel for maxpool) */
  size_t padding; /* conv2d: zero padding on each side */
} dpt_layer_spec;

#define DPT_MODEL_MAX_LAYERS 32

typedef struct dpt_model_spec {
  size_t in_c, in_h, in_w; /* one sample's shape (channels, height, width); an MLP on 784
                              features can say 1, 1, 784 or 1, 28, 28 */
  size_t num_classes;      /* the last layer's output size must equal it */
  size_t num_layers;
  dpt_layer_spec layers[DPT_MODEL_MAX_LAYERS];
} dpt_model_spec;

/* Fills `spec` with an MLP: flatten, then linear+relu per hidden size, then linear to classes.
 * hidden: [num_hidden] sizes. Sample shape c x h x w. */
DPT_API dpt_status dpt_model_spec_mlp(dpt_model_spec *spec, size_t c, size_t h, size_t w,
                                      const size_t *hidden, size_t num_hidden, size_t num_classes);
/* Fills `spec` with the reference CNN: two blocks conv3x3(pad 1)-relu-maxpool2, with `c1` and
 * `c2` channels, then flatten and a linear layer to the classes. */
DPT_API dpt_status dpt_model_spec_cnn(dpt_model_spec *spec, size_t c, size_t h, size_t w, size_t c1,
                                      size_t c2, size_t num_classes);

typedef struct dpt_model dpt_model;

/* Builds the model on `backend` for batches of up to `max_batch` samples: allocates parameters,
 * gradients and activations. Parameters are uninitialized until dpt_model_init or
 * dpt_model_set_params. */
DPT_API dpt_status dpt_model_create(dpt_backend *backend, const dpt_model_spec *spec,
                                    size_t max_batch, dpt_model **out);
DPT_API void dpt_model_destroy(dpt_model *model);

/* PyTorch-default initialization from `seed` (identical on every backend). */
DPT_API dpt_status dpt_model_init(dpt_model *model, uint64_t seed);

/* The named tensors, in state_dict order. */
typedef struct dpt_tensor_info {
  const char *name; /* "0.weight"; owned by the model */
  int ndim;
  int64_t shape[4];
  size_t offset; /* in floats, within the flat parameter (and gradient) buffer */
  size_t count;  /* elements */
} dpt_tensor_info;

DPT_API size_t dpt_model_num_tensors(const dpt_model *model);
DPT_API dpt_status dpt_model_tensor(const dpt_model *model, size_t index, dpt_tensor_info *out);
/* Total parameters (floats) in the flat buffer. */
DPT_API size_t dpt_model_num_params(const dpt_model *model);
/* The flat parameter and gradient buffers, [num_params] floats each; owned by the model. */
DPT_API dpt_buffer *dpt_model_params(const dpt_model *model);
DPT_API dpt_buffer *dpt_model_grads(const dpt_model *model);
DPT_API dpt_backend *dpt_model_backend(const dpt_model *model);
/* Floats per input sample (c*h*w). */
DPT_API size_t dpt_model_input_size(const dpt_model *model);

/* Host copies of the flat parameters: [num_params] floats. */
DPT_API dpt_status dpt_model_get_params(const dpt_model *model, float *host);
DPT_API dpt_status dpt_model_set_params(dpt_model *model, const float *host);

/* Weights as safetensors, with the state_dict names and shapes above (float32), so PyTorch's
 * `model.load_state_dict(safetensors.torch.load_file(path))` reads what dpt_model_save writes.
 * Host-side helpers over [num_params] floats, then the model-level calls:
 * dpt_model_load checks the file like load_state_dict(strict=True): every model tensor present
 * with the model's shape, no tensor the model lacks; each message names the tensor.
 * Saving writes a temporary file and renames it, so a failure never leaves a partial file. */
DPT_API dpt_status dpt_model_save_params(const dpt_model *model, const float *host,
                                         const char *path);
DPT_API dpt_status dpt_model_load_params(const dpt_model *model, const char *path, float *host);
DPT_API dpt_status dpt_model_save(const dpt_model *model, const char *path);
DPT_API dpt_status dpt_model_load(dpt_model *model, const char *path);

/* Forward and backward over `batch` samples (1 <= batch <= max_batch):
 * x: device buffer holding [batch, input_size] floats at element offset 0;
 * labels: device buffer holding [batch] int32 class indices.
 * The gradients are OVERWRITTEN with grad_scale * d(sum of per-sample losses)/d(params), so a
 * replica holding b of a global batch B passes grad_scale = 1/B and the sum over replicas is the
 * mean over B. loss_sum (sum of per-sample losses, unscaled) and correct may be NULL. */
DPT_API dpt_status dpt_model_train_step(dpt_model *model, const dpt_buffer *x,
                                        const dpt_buffer *labels, size_t batch, float grad_scale,
                                        double *loss_sum, int64_t *correct);

/* Forward only: loss sum and correct count over the batch. */
DPT_API dpt_status dpt_model_evaluate(dpt_model *model, const dpt_buffer *x,
                                      const dpt_buffer *labels, size_t batch, double *loss_sum,
                                      int64_t *correct);

#ifdef __cplusplus
}
#endif

#endif
