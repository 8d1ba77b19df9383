/* dptrain: models as graphs of layers on one backend.
 *
 * A model is a directed acyclic graph of layers, listed in an order where every layer comes
 * after its inputs; the last layer gives the logits (one per class), trained with softmax
 * cross-entropy. Each layer names its inputs (by default the layer before it, or the model input
 * for the first), and shapes are inferred and checked when the model is created: every error
 * names the layer. A sequential model (an MLP, the reference CNN) is the special case where each
 * layer takes the one before it.
 *
 * Parameters live in ONE contiguous device buffer and their gradients in another of the same
 * layout, with a named view per tensor; buffers (batch norm's running statistics) in a third.
 * Names and layouts follow PyTorch's state_dict: a layer called N (by default its index, as
 * nn.Sequential names it) has "N.weight" ([out, in] for linear, [out, in, kh, kw] for conv2d,
 * [C] for batch norm) and "N.bias" ([out]), in layer order, weight before bias; a batch norm
 * layer also has the buffers "N.running_mean", "N.running_var" ([C]) and
 * "N.num_batches_tracked" (a scalar, int64 in files). Initialization follows PyTorch's defaults:
 * linear and conv2d weights and biases uniform in +-1/sqrt(fan_in) (Kaiming-uniform with
 * a = sqrt(5)), drawn from a seed with one stream per tensor index, so the same seed gives the
 * same model on every replica and every backend; batch norm weight 1, bias 0, running mean 0,
 * running variance 1.
 */
#ifndef DPTRAIN_MODEL_H
#define DPTRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The one list of layer kinds: X(ENUM_SUFFIX, value, "name"). The spec fields each uses:
 *   linear: size (out features), no_bias;  conv2d: size (out channels), kernel, stride,
 *   padding, no_bias;  relu, flatten: none;  maxpool, avgpool: kernel, stride (0 = kernel);
 *   add: two inputs of one shape;  batchnorm2d: an image input [C, H, W];  batchnorm1d: a
 *   feature vector [C] (after flatten or linear);  global_avgpool: an image input, giving
 *   [C, 1, 1];  dropout: p;  layernorm: eps (0 = 1e-5);  gelu: approximate.
 * batchnorm: momentum 0.1, eps 1e-5, batch statistics in training (running variance updated
 * with the unbiased batch variance), running statistics in evaluation, as PyTorch's. dropout:
 * zeroes each element with probability p in training and scales the rest by 1/(1-p), with the
 * mask of dpt_dropout keyed by (seed, step, the sample's place in the global batch, element);
 * the identity in evaluation. layernorm: PyTorch's LayerNorm over the last dimension (the
 * features of a vector, the width of an image), biased variance, weight 1 and bias 0 at init.
 * gelu: PyTorch's GELU, the erf form or (approximate) the tanh form.
 *
 * Token models (dpt_model_spec.seq_len > 0) add sequences: a sample of S positions with F
 * features each, on which linear acts position by position (nn.Linear on [S, F]) and layernorm,
 * gelu, dropout and add act as on any shape.
 *   embedding: the first layer, on the model input's token ids: weight [vocab, size] (PyTorch's
 *     nn.Embedding), giving a sequence [S, size]; an id outside [0, vocab) gives NaN.
 *   position_embedding: adds learned position vectors: weight [vocab, F] (vocab = the most
 *     positions, >= S), row s added at position s (nn.Embedding on arange(S)).
 *   attention: PyTorch's nn.MultiheadAttention(F, heads, dropout=p, batch_first=True) as
 *     self-attention on a sequence [S, F], keys holding [PAD] (token id 0 in the model input)
 *     masked (key_padding_mask): tensors in_proj_weight [3F, F], in_proj_bias [3F],
 *     out_proj.weight [F, F], out_proj.bias [F]; heads divides F; dropout on the attention
 *     probabilities in training.
 *   linear with tie: uses the weight of the embedding layer tie - 1 (its [vocab, in] table, so
 *     out = vocab) instead of a weight of its own, and has only "N.bias": BERT's decoder tied to
 *     the token embedding. The shared weight has one gradient, the sum of both uses.
 *
 * Records (the recommendation model): a sample is a record of dense float features and int32
 * categorical ids side by side in the model input (DLRM: [num_dense floats][ids]).
 *   slice: the input's floats [offset, offset + size) as a vector [size] (the model input or a
 *     vector): the dense features.
 *   embedding_bag: on the model input: weight [vocab, size] (nn.EmbeddingBag); the bag's `bag`
 *     ids (0 means 1) start at int32 slot `offset` of the record, an id < 0 is an empty slot;
 *     mode sum (0) or mean (1) (a dpt_bag_mode). A vector [size].
 *   concat: two vector inputs, the first's values then the second's.
 *   interaction: DLRM's dot interaction on a vector of K vectors of `size` features (K * size
 *     values, the first one the bottom MLP's output): the output is that first vector, then the
 *     dot products of every pair (i, j), i > j, in the order of torch.tril_indices(K, K, -1):
 *     size + K (K - 1) / 2 values.
 * A model whose num_classes is 1 gives one logit per sample, trained with binary cross-entropy
 * with logits (labels 0 or 1, DPT_IGNORE_INDEX ignored); correct means logit > 0 for label 1.
 * init_std > 0 draws the layer's weights (tables, in_proj_weight, out_proj.weight) from a
 * normal distribution of that deviation and sets its biases to 0, as BERT initializes. */
#define DPT_LAYER_KIND_MAP(X)                                                                      \
  X(LINEAR, 0, "linear")                                                                           \
  X(RELU, 1, "relu")                                                                               \
  X(CONV2D, 2, "conv2d")                                                                           \
  X(MAXPOOL, 3, "maxpool")                                                                         \
  X(FLATTEN, 4, "flatten")                                                                         \
  X(ADD, 5, "add")                                                                                 \
  X(BATCHNORM2D, 6, "batchnorm2d")                                                                 \
  X(BATCHNORM1D, 7, "batchnorm1d")                                                                 \
  X(AVGPOOL, 8, "avgpool")                                                                         \
  X(GLOBAL_AVGPOOL, 9, "global_avgpool")                                                           \
  X(DROPOUT, 10, "dropout")                                                                        \
  X(LAYERNORM, 11, "layernorm")                                                                    \
  X(GELU, 12, "gelu")                                                                              \
  X(EMBEDDING, 13, "embedding")                                                                    \
  X(POSITION_EMBEDDING, 14, "position_embedding")                                                  \
  X(ATTENTION, 15, "attention")                                                                    \
  X(SLICE, 16, "slice")                                                                            \
  X(EMBEDDING_BAG, 17, "embedding_bag")                                                            \
  X(CONCAT, 18, "concat")                                                                          \
  X(INTERACTION, 19, "interaction")

typedef enum dpt_layer_kind {
#define DPT_LAYER_KIND_ENUM_(name, value, text) DPT_LAYER_##name = value,
  DPT_LAYER_KIND_MAP(DPT_LAYER_KIND_ENUM_)
#undef DPT_LAYER_KIND_ENUM_
      DPT_LAYER_KIND_COUNT
} dpt_layer_kind;

/* "linear", "relu", ...; NULL for values outside the list. */
DPT_API const char *dpt_layer_kind_name(dpt_layer_kind kind);
/* Parses a kind name; DPT_ERR_INVALID_ARG naming the valid names otherwise. */
DPT_API dpt_status dpt_layer_kind_parse(const char *name, dpt_layer_kind *out);

#define DPT_LAYER_NAME_MAX    48 /* bytes of a layer name, NUL included */
#define DPT_LAYER_MAX_INPUTS  2
#define DPT_LAYER_INPUT_MODEL (-1) /* inputs[] value: the model input */

typedef struct dpt_layer_spec {
  dpt_layer_kind kind;
  size_t size;    /* linear: out features; conv2d: out channels */
  size_t kernel;  /* conv2d / maxpool / avgpool: square kernel side */
  size_t stride;  /* conv2d: stride (0 means 1); maxpool / avgpool: stride (0 means kernel) */
  size_t padding; /* conv2d: zero padding on each side */
  int no_bias;    /* linear / conv2d: 1 for no bias tensor (PyTorch's bias=False) */
  float p;        /* dropout: the probability of zeroing an element, in [0, 1) */
  int num_inputs; /* 0: the layer before (the model input for layer 0); else inputs[] */
  int inputs[DPT_LAYER_MAX_INPUTS]; /* earlier layer indices, or DPT_LAYER_INPUT_MODEL */
  char name[DPT_LAYER_NAME_MAX];    /* the state_dict prefix; "" means the layer's index */
  float eps;       /* layernorm: added to the variance, > 0; 0 means PyTorch's 1e-5 */
  int approximate; /* gelu: a dpt_gelu_approx (0: erf, PyTorch's default; 1: tanh) */
  size_t vocab;    /* embedding: rows of the table; position_embedding: the most positions */
  size_t heads;    /* attention: heads (dividing the features) */
  int tie;         /* linear: 1 + the index of an embedding layer whose weight it shares; 0 none */
  float init_std;  /* > 0: weights normal(0, init_std), biases 0 (BERT); 0: PyTorch's default */
  size_t offset;   /* slice: first float; embedding_bag: first int32 slot of the record */
  size_t bag;      /* embedding_bag: id slots (0 means 1) */
  int mode;        /* embedding_bag: a dpt_bag_mode (0 sum, 1 mean) */
} dpt_layer_spec;

#define DPT_MODEL_MAX_LAYERS 512

typedef struct dpt_model_spec {
  size_t in_c, in_h, in_w; /* one sample's shape (channels, height, width); an MLP on 784
                              features can say 1, 1, 784 or 1, 28, 28 */
  size_t num_classes;      /* the last layer's output size must equal it (per position for a
                              token model) */
  size_t seq_len;          /* 0: samples are images or vectors. > 0: a token model: a sample is
                              seq_len int32 token ids (in_c = in_h = 1, in_w = seq_len; x holds
                              int32 values), it has seq_len labels, DPT_IGNORE_INDEX ignored, and
                              the last layer gives num_classes logits per position */
  size_t num_layers;
  dpt_layer_spec layers[DPT_MODEL_MAX_LAYERS];
} dpt_model_spec;

/* The builder: starts an empty spec for samples c x h x w and `num_classes` classes, then
 * appends layers; dpt_model_spec_add copies `layer` (its name may be "") and sets *index (may
 * be NULL) to its index, which later layers name in inputs[]. Checks only what it can see
 * (room, a known kind, inputs naming earlier layers); shapes are checked by dpt_model_create. */
DPT_API dpt_status dpt_model_spec_init(dpt_model_spec *spec, size_t c, size_t h, size_t w,
                                       size_t num_classes);
DPT_API dpt_status dpt_model_spec_add(dpt_model_spec *spec, const dpt_layer_spec *layer,
                                      int *index);

/* Fills `spec` with an MLP: flatten, then linear+relu per hidden size, then linear to classes.
 * hidden: [num_hidden] sizes. Sample shape c x h x w. */
DPT_API dpt_status dpt_model_spec_mlp(dpt_model_spec *spec, size_t c, size_t h, size_t w,
                                      const size_t *hidden, size_t num_hidden, size_t num_classes);
/* Fills `spec` with the reference CNN: two blocks conv3x3(pad 1)-relu-maxpool2, with `c1` and
 * `c2` channels, then flatten and a linear layer to the classes. */
DPT_API dpt_status dpt_model_spec_cnn(dpt_model_spec *spec, size_t c, size_t h, size_t w, size_t c1,
                                      size_t c2, size_t num_classes);
/* Fills `spec` with a CIFAR-style ResNet of depth 6n+2 (20, 32, 44, 56, 110; depth 20 has three
 * basic blocks per stage): conv3x3(16)-bn-relu, three stages of n basic blocks with 16, 32 and
 * 64 channels (the first block of stages 2 and 3 has stride 2 and a 1x1 strided conv + bn
 * projection shortcut), global average pool, flatten, linear to the classes. Convolutions have
 * no bias. Names as PyTorch's module would give them: "conv1", "bn1", "layer1.0.conv1",
 * "layer1.0.bn1", "layer1.0.conv2", "layer1.0.bn2", "layer2.0.shortcut.0" (conv),
 * "layer2.0.shortcut.1" (bn), ..., "fc". */
DPT_API dpt_status dpt_model_spec_resnet(dpt_model_spec *spec, size_t c, size_t h, size_t w,
                                         size_t depth, size_t num_classes);

/* BERT's masked-language-model encoder (post-LN), as tools/pytorch_reference.py's BertMLM:
 *   embed.tok (embedding), embed.pos (position_embedding), embed.norm (layernorm), dropout;
 *   per block i: blocks.i.attn (attention), dropout, add, blocks.i.norm1, blocks.i.ffn1 (linear
 *   ffn), gelu, blocks.i.ffn2 (linear hidden), dropout, add, blocks.i.norm2;
 *   mlm.dense (linear hidden), gelu, mlm.norm, mlm.decoder (linear tied to embed.tok: its bias
 *   only). Every weight is initialized normal(0, 0.02), biases 0; layer norms use ln_eps. */
#define DPT_BERT_MIN_VOCAB 4 /* the special tokens [PAD], [CLS], [SEP], [MASK] */
typedef struct dpt_bert_options {
  size_t vocab;         /* tokens, >= DPT_BERT_MIN_VOCAB */
  size_t seq_len;       /* tokens per sequence */
  size_t max_positions; /* rows of the position table; 0: seq_len */
  size_t layers, hidden, heads, ffn;
  float dropout;      /* hidden dropout (BERT: 0.1) */
  float attn_dropout; /* on the attention probabilities (BERT: 0.1) */
  float ln_eps;       /* 0: 1e-12, BERT's */
} dpt_bert_options;
/* The defaults: 4 layers, hidden 256, 4 heads, ffn 1024, sequence 128, dropout 0.1 (vocab 0:
 * the caller sets it). */
DPT_API void dpt_bert_options_default(dpt_bert_options *o);
/* Fills `spec`; DPT_ERR_INVALID_ARG naming the option for sizes that cannot work (heads not
 * dividing hidden, a sequence beyond max_positions, a zero size, too many layers). */
DPT_API dpt_status dpt_model_spec_bert(dpt_model_spec *spec, const dpt_bert_options *o);

/* DLRM (Naumov et al.), as facebookresearch/dlrm's DLRM_Net and tools/pytorch_reference.py's
 * DLRM, for click prediction: one logit per sample (num_classes 1, binary cross-entropy).
 * A sample is a record [num_dense floats][num_tables * bag int32 ids] (an interactions shard
 * record without its label; table t's ids in slots num_dense + t * bag ..., an id < 0 an empty
 * slot); the input shape is 1 x 1 x (num_dense + num_tables * bag). Layers, in this order:
 *   emb_l.<t> (embedding_bag [table_rows[t], dim] on the record, per table t);
 *   dense (slice of the num_dense floats);
 *   bot_l.<i>: linear at even i, relu at odd i, per bottom size then a last linear to dim (and
 *     its relu, as DLRM's bottom MLP);
 *   cat.<t> (concat of the bottom output and the tables' vectors, one table at a time);
 *   interact (interaction, size dim) with DPT_DLRM_DOT; none with DPT_DLRM_CAT (the top MLP
 *     takes the concatenation);
 *   top_l.<i>: linear/relu per top size, then a last linear to 1 without relu (the loss takes
 *     the logit).
 * Initialization: the linear layers' defaults (PyTorch's nn.Linear); each table normal(0, s) with
 * s = sqrt(1 / (3 rows)), the variance of DLRM_Net's uniform(+-sqrt(1/rows)). */
typedef enum dpt_dlrm_interaction { DPT_DLRM_DOT = 0, DPT_DLRM_CAT = 1 } dpt_dlrm_interaction;
typedef struct dpt_dlrm_options {
  size_t num_dense;         /* dense features, >= 1 */
  size_t num_tables;        /* embedding tables (categorical features), >= 1 */
  const size_t *table_rows; /* [num_tables] rows of each table, 1 .. 2^31 - 1 */
  size_t dim;               /* embedding dimension = the bottom MLP's output */
  size_t bag;               /* id slots per table (0 means 1) */
  int mode;                 /* a dpt_bag_mode: DPT_BAG_SUM (default) or DPT_BAG_MEAN */
  const size_t *bottom;     /* [num_bottom] hidden sizes of the bottom MLP (then dim) */
  size_t num_bottom;
  const size_t *top; /* [num_top] hidden sizes of the top MLP (then 1) */
  size_t num_top;
  int interaction; /* a dpt_dlrm_interaction */
} dpt_dlrm_options;
/* The defaults: dim 16, bag 1, sum, dot; no bottom or top hidden layers; num_dense, num_tables
 * and table_rows 0 (the caller sets them). */
DPT_API void dpt_dlrm_options_default(dpt_dlrm_options *o);
/* Fills `spec`; DPT_ERR_INVALID_ARG naming the option for values that cannot work (a zero size,
 * missing table rows, a table beyond 2^31 - 1 rows, an unknown mode or interaction, too many
 * layers). */
DPT_API dpt_status dpt_model_spec_dlrm(dpt_model_spec *spec, const dpt_dlrm_options *o);

/* Reads a model file: a JSON object a person can write by hand, e.g.
 *   {"input": [1, 28, 28], "classes": 10,
 *    "layers": [{"name": "conv1", "kind": "conv2d", "out": 16, "kernel": 3, "padding": 1,
 *                "bias": false},
 *               {"name": "bn1", "kind": "batchnorm2d"},
 *               {"kind": "relu"},
 *               {"name": "sum", "kind": "add", "inputs": ["bn1", "input"]},
 *               ...]}
 * "input" and "classes" are optional: c, h, w and num_classes (from the data) are used, and when
 * the file states them they must agree. A layer's "inputs" name earlier or later layers or
 * "input" (the model input); without it, the layer before. Layers are put in an order where each
 * follows its inputs (the file's order where it allows). "out": "classes" stands for the number
 * of classes. Fields: name, kind, inputs, out, kernel, stride, padding, bias, p, eps, approximate,
 * vocab, heads, tie, init_std, offset, bag, mode ("sum" or "mean"); an unknown field,
 * a cycle, an unknown kind or input name, a duplicate name or invalid JSON is DPT_ERR_BAD_FORMAT
 * naming the file, the layer and (for JSON errors) the line and column. */
DPT_API dpt_status dpt_model_spec_load_json(const char *path, size_t c, size_t h, size_t w,
                                            size_t num_classes, dpt_model_spec *spec);

/* The same format from a string: "input" and "classes" must be present and give the shape.
 * `origin` names the text in messages (a file, "<file>: metadata ..."). */
DPT_API dpt_status dpt_model_spec_parse_json(const char *text, const char *origin,
                                             dpt_model_spec *spec);

/* Writes `spec` in the format above, as one line: "input", "classes" and each layer's name,
 * kind, inputs (by name, as given: a layer without inputs takes the one before) and every field
 * that is not zero. An unnamed layer that another layer takes as input is named by its index
 * (what "" stands for; reading a layer named by its own index gives "" back), so reading the
 * text gives back `spec` field by field. *out is malloc'd (the caller frees it), NULL on
 * failure: DPT_ERR_INVALID_ARG for a spec dpt_model_spec_add would refuse or where an index
 * given as a name is another layer's name. */
DPT_API dpt_status dpt_model_spec_to_json(const dpt_model_spec *spec, char **out);

/* The safetensors metadata key under which dpt_model_save_params stores the model's JSON. */
#define DPT_MODEL_METADATA_KEY "dptrain.model"

/* Rebuilds the spec of the model whose weights `path` holds, from that metadata.
 * DPT_ERR_BAD_FORMAT naming the file when the file has none (written elsewhere, or by an older
 * dptrain) or it does not parse; the file's own errors as dpt_safetensors_open's. */
DPT_API dpt_status dpt_model_spec_from_weights(const char *path, dpt_model_spec *spec);

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
/* The backend the model was created on. */
DPT_API dpt_backend *dpt_model_backend(const dpt_model *model);
/* Floats per input sample (c*h*w). */
DPT_API size_t dpt_model_input_size(const dpt_model *model);
/* Number of classes (the logits per sample, or per position of a token model). */
DPT_API size_t dpt_model_num_classes(const dpt_model *model);
/* Labels per sample: 1, or the sequence length of a token model. */
DPT_API size_t dpt_model_labels_per_sample(const dpt_model *model);

/* Buffers: state that is not trained by gradients (batch norm's running_mean, running_var and
 * num_batches_tracked, the last stored as a float counter: exact below 2^24 steps), in
 * state_dict order, in one flat device buffer of [num_buffer_floats] floats; offsets in floats.
 * A model without batch norm has none. */
DPT_API size_t dpt_model_num_buffers(const dpt_model *model);
DPT_API dpt_status dpt_model_buffer_info(const dpt_model *model, size_t index,
                                         dpt_tensor_info *out);
DPT_API size_t dpt_model_num_buffer_floats(const dpt_model *model);
/* Activation memory, planned once at creation for max_batch samples: bytes of device memory
 * for layer outputs, their gradients and what layers keep between forward and backward (the
 * im2col columns are one buffer shared by every convolution). */
DPT_API size_t dpt_model_activation_bytes(const dpt_model *model);

/* Host copies of the flat parameters: [num_params] floats. */
DPT_API dpt_status dpt_model_get_params(const dpt_model *model, float *host);
DPT_API dpt_status dpt_model_set_params(dpt_model *model, const float *host);
/* The whole state, parameters then buffers: [num_params + num_buffer_floats] floats (the same
 * as the parameters for a model without buffers). */
DPT_API size_t dpt_model_state_size(const dpt_model *model);
DPT_API dpt_status dpt_model_get_state(const dpt_model *model, float *host);
DPT_API dpt_status dpt_model_set_state(dpt_model *model, const float *host);

/* Weights as safetensors, with the state_dict names and shapes above (float32; the batch norm
 * counters int64), so PyTorch's
 * `model.load_state_dict(safetensors.torch.load_file(path))` reads what dpt_model_save writes.
 * Host-side helpers over the state ([dpt_model_state_size] floats: parameters, then buffers),
 * then the model-level calls:
 * dpt_model_save_params also stores the model's description (dpt_model_spec_to_json) in the
 * metadata under DPT_MODEL_METADATA_KEY (PyTorch ignores it): dpt_model_spec_from_weights
 * rebuilds the model from the file alone.
 * dpt_model_load checks the file like load_state_dict(strict=True): every model tensor present
 * with the model's shape, no tensor the model lacks; each message names the tensor.
 * Saving writes a temporary file and renames it, so a failure never leaves a partial file. */
DPT_API dpt_status dpt_model_save_params(const dpt_model *model, const float *host,
                                         const char *path);
/* The same, with more metadata: extra_kv is NULL or {key0, value0, ..., NULL} (dptrain train
 * stores the normalization there, "dptrain.mean" and "dptrain.std", for eval and predict). */
DPT_API dpt_status dpt_model_save_params_meta(const dpt_model *model, const float *host,
                                              const char *path, const char *const *extra_kv);
DPT_API dpt_status dpt_model_load_params(const dpt_model *model, const char *path, float *host);
DPT_API dpt_status dpt_model_save(const dpt_model *model, const char *path);
DPT_API dpt_status dpt_model_load(dpt_model *model, const char *path);

/* Forward in evaluation mode (batch norm's running statistics, no dropout) on host samples:
 * x [batch, dpt_model_input_size] floats as dpt_dataset_gather writes them (a token model's ids
 * as int32 bit patterns), batch >= 1 (in pieces of at most the model's max_batch); the logits
 * [batch, num_classes] (per position for a token model: [batch, seq_len, num_classes]) into
 * host memory. */
DPT_API dpt_status dpt_model_predict(dpt_model *model, const float *x, size_t batch, float *logits);

#ifdef __cplusplus
}
#endif

#endif
