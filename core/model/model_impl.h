/* Internal: the body of dpt_model, shared by planning and memory (core/model/model.c), forward and
 * backward (core/model/model_exec.c) and weight files (core/model/model_io.c). */
#ifndef DPTRAIN_CORE_MODEL_IMPL_H
#define DPTRAIN_CORE_MODEL_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/model_device.h"
#include "dptrain/safetensors.h"

/* The shape of one sample between two layers. After a flatten or linear layer the sample is a
 * vector of c features (h = w = 1) and `flat` is set: image layers refuse it. A token model's
 * sequence is c = 1, h positions of w features, with `seq` set: linear acts per position. */
typedef struct dpt_sample_shape {
  size_t c, h, w;
  int flat;
  int seq;
} dpt_sample_shape;

/* dpt_node.fuse (core/model/fuse.c): a linear whose bias the GELU after it adds
 * (dpt_bias_gelu_fwd, and the bias gradient in dpt_bias_gelu_bwd), and that GELU; an attention
 * whose softmax and dropout run as one op (dpt_attn_probs_fwd, dpt_attn_probs_bwd). */
enum {
  DPT_FUSE_NONE = 0,
  DPT_FUSE_BIAS_TO_NEXT = 1,
  DPT_FUSE_BIAS_GELU = 2,
  DPT_FUSE_ATTN_PROBS = 3
};

typedef struct dpt_node {
  dpt_layer_spec spec;
  int src[DPT_LAYER_MAX_INPUTS]; /* input layers (DPT_LAYER_INPUT_MODEL: the model input) */
  int num_src;
  dpt_sample_shape ishape, oshape; /* shape of one sample entering (the first input) and leaving */
  size_t in_size, out_size;        /* floats per sample */
  size_t w_index, b_index;         /* tensor indices (SIZE_MAX when absent); a tied linear's
                                      w_index is its embedding's */
  size_t w2_index, b2_index;       /* attention: out_proj.weight and out_proj.bias */
  size_t buf_offset;               /* batch norm: running_mean's float offset in the buffers */
  int store;                       /* the layer whose out/dout hold this one's (itself; a flatten's
                                      or an absorbed layer's input's store, or
                                      DPT_LAYER_INPUT_MODEL) */
  int fuse_relu;          /* batch norm, add: runs the ReLU reading it (core/model/fuse.c) */
  int absorbed;           /* run inside its input's fused op: no memory, no work */
  int fuse;               /* DPT_FUSE_*: how this layer shares an op with a neighbour */
  dpt_buffer *out;        /* [max_batch, out_size]; NULL for flatten (aliases its input) */
  dpt_buffer *dout;       /* gradient wrt out, same size; NULL for flatten */
  dpt_buffer *aux;        /* maxpool: int32 argmax [max_batch, out_size]; batch norm: the
                             step's mean and var [2C], then the combined sums [2C];
                             layernorm: each row's mean, then each row's rstd;
                             attention: q, k, v [max_batch, S, 3F] */
  dpt_buffer *probs;      /* attention: probabilities [heads, batch, S, S] */
  dpt_buffer *probs_drop; /* attention: the same after dropout (NULL when p is 0) */
  dpt_buffer *ctx;        /* attention: the heads' outputs [max_batch, S, F] */
  dpt_buffer *map;        /* interaction: int32 [K (K - 1) / 2], the flat indices i K + j
                             (i > j, torch.tril_indices order) of the pairs in Z [K, K] */
} dpt_node;

struct dpt_model {
  dpt_backend *be;
  dpt_model_spec spec;
  size_t max_batch;
  size_t num_layers;
  dpt_node *layers; /* [num_layers] */
  size_t num_tensors, num_buffers;
  dpt_tensor_info *tensors;               /* [num_tensors]: parameters, state_dict order */
  dpt_tensor_info *buffers;               /* [num_buffers]: buffers, state_dict order */
  char (*names)[DPT_LAYER_NAME_MAX + 24]; /* backing store of the names, tensors then buffers */
  size_t num_params, num_buffer_floats;
  dpt_buffer *params; /* [num_params] */
  dpt_buffer *grads;  /* [num_params] */
  dpt_buffer *bufs;   /* [num_buffer_floats], NULL when none */
  dpt_buffer *ones;   /* [max(conv output plane, 1)] of 1.0f, for conv bias; [0] counts BN */
  dpt_buffer *col;    /* im2col columns [chunk, cin*k*k, oh*ow] of the largest pass */
  dpt_buffer *dcol;   /* their gradient, same size */
  /* What col holds: the columns of conv layer col_layer's input `col_in` for images [col_n0,
   * col_n0 + col_nb) of the current forward (col_layer NULL: nothing known). The last
   * convolution of the forward finds its columns there in backward. */
  const dpt_node *col_layer;
  const dpt_buffer *col_in;
  size_t col_n0, col_nb;
  dpt_buffer *scratch; /* [max_batch, largest out_size]: a second consumer's input gradient */
  dpt_buffer *dqkv, *dprobs, *dctx; /* attention's gradients, shared by every attention layer */
  dpt_buffer *iota; /* int32 0, 1, 2, ...: the column maps of slice (from its offset), concat and
                       interaction's first vector */
  dpt_buffer *zbuf; /* interaction: Z = X X^T [max_batch, K, K] in forward, dZ in backward,
                       shared by every interaction layer */
  size_t activation_bytes;
  /* step context */
  int training;
  uint64_t seed, step;
  uint32_t first_sample;
  dpt_model_allreduce_fn sync_sum;
  void *sync_ctx;
  float *sync_host;            /* sync-bn's host copies: [2 * widest batch norm] floats */
  double *sync_acc;            /* and their sums: [2 * widest batch norm + 1] doubles */
  unsigned char *grad_written; /* [num_layers]: dout already holds a contribution this step */
  unsigned char *w_written;    /* [num_tensors]: a shared weight's gradient holds a use's part */
  int sparse_table_grads;      /* embedding_bag backward adds into a range kept zero */
  dpt_model_layer_fn hook;     /* dpt_model_set_layer_hook */
  void *hook_ctx;
  size_t *ready_from; /* [num_layers]: the lowest tensor offset of layers >= i (num_params: none) */
};

/* Forward over b samples (training or evaluation mode as m->training says), then the loss
 * gradient's backward (core/model/model_exec.c). */
dpt_status dpt_model_forward(dpt_model *m, const dpt_buffer *x, size_t b);
dpt_status dpt_model_backward(dpt_model *m, const dpt_buffer *x, size_t b);
/* The CPU backend's im2col pass covers about this many column floats (1 MiB), so the
 * columns are still in cache when the gemm reads them; devices take the whole batch. */
#define DPT_MODEL_CPU_COL_FLOATS ((size_t)1 << 18)
/* Images per im2col pass of convolution L over a batch of b. */
size_t dpt_model_conv_chunk(const dpt_model *m, const dpt_node *L, size_t b);

/* The output buffer of layer i (its store's), the model input for DPT_LAYER_INPUT_MODEL. */
const dpt_buffer *dpt_model_out_of(const dpt_model *m, int i, const dpt_buffer *x);

/* The model's state as safetensors tensors named as PyTorch's state_dict: the parameters, then
 * the buffers, pointing into host[state size] (batch norm's counters as I64, converted into
 * counters[entries]). Returns the entries; with ts NULL only counts them. */
size_t dpt_model_state_tensors(const dpt_model *m, const float *host, dpt_st_tensor *ts,
                               int64_t *counters);
/* Reads the model's state entries from an open file into host[state size] (the file may hold
 * other tensors too); path names the file in errors. */
dpt_status dpt_model_read_state(const dpt_model *m, const dpt_safetensors *st, const char *path,
                                float *host);

#endif
