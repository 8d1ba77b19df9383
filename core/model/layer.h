/* The operations of a layer kind, one table per kind in core/model/layers/ named
 * dpt_layer_ops_<KIND>, and their lookup by kind (core/model/layer_table.c). */
#ifndef DPTRAIN_CORE_MODEL_LAYER_H
#define DPTRAIN_CORE_MODEL_LAYER_H

#include <stddef.h>
#include <stdint.h>

#include "core/model/model_impl.h"

/* What the model needs once, sized by its largest user: the im2col columns and their gradient
 * (shared by every convolution, recomputed in backward), the ones vector of the conv bias, and
 * the scratch gradient of a layer feeding several others. */
typedef struct shared_sizes {
  size_t col, plane, scratch;
  size_t qkv, probs, ctx; /* attention's gradients */
  size_t iota, z;         /* the column maps' 0, 1, 2, ...; interaction's Z */
} shared_sizes;

/* What the graph code asks of a kind beyond its operations (dpt_layer_ops.flags). */
enum {
  DPT_LAYER_ALIAS = 1,        /* its output is its input, reshaped: no memory, no work */
  DPT_LAYER_TAKES_TOKENS = 2, /* may read a token model's input ids */
  DPT_LAYER_CAN_TIE = 4,      /* may share an embedding's weight (spec.tie) */
  DPT_LAYER_SYNC_STATS = 8,   /* sums its batch statistics over the replicas under sync-bn */
  DPT_LAYER_SPARSE_ROWS = 16  /* a table whose gradient can travel as touched rows */
};

/* A NULL entry does nothing (DPT_OK). */
typedef struct dpt_layer_ops {
  int num_inputs; /* inputs the kind takes: 2 (named in the spec), else 1 */
  unsigned flags; /* DPT_LAYER_ALIAS, ... */
  /* Checks layer i's spec, normalizes its defaults, registers its parameters and buffers and
   * turns x (the input shape) into the output shape; errors through LAYER_ERR. */
  dpt_status (*plan)(dpt_model *m, size_t i, dpt_sample_shape *x);
  /* What the kind keeps between forward and backward (n: max_batch * out_size floats), and the
   * shared buffers it needs in sh; out and dout are already there. */
  dpt_status (*alloc)(dpt_model *m, size_t i, size_t n, shared_sizes *sh);
  /* Its parameters into host (the flat layout); called when it has any. */
  void (*init)(const dpt_model *m, const dpt_node *L, uint64_t seed, float *host);
  /* L->out from its first input `in` (the model input x for other inputs) over b samples. */
  dpt_status (*forward)(dpt_model *m, const dpt_node *L, const dpt_buffer *in, const dpt_buffer *x,
                        size_t b);
  /* One-input kinds: parameter gradients, and the input gradient into din (NULL: none wanted). */
  dpt_status (*backward)(dpt_model *m, const dpt_node *L, const dpt_buffer *in, dpt_buffer *din,
                         size_t b);
  /* Kinds routing their own input gradients (dpt_layer_grad_target): used instead of backward. */
  dpt_status (*backward_all)(dpt_model *m, const dpt_node *L, const dpt_buffer *x, size_t b);
} dpt_layer_ops;

#define DPT_LAYER_OPS_DECLARE_(name, value, text) extern const dpt_layer_ops dpt_layer_ops_##name;
DPT_LAYER_KIND_MAP(DPT_LAYER_OPS_DECLARE_)
#undef DPT_LAYER_OPS_DECLARE_

/* The table of kind, NULL for a value outside DPT_LAYER_KIND_MAP. */
const dpt_layer_ops *dpt_layer_ops_of(dpt_layer_kind kind);
/* Whether kind's table has `flag` (0 for a value outside DPT_LAYER_KIND_MAP). */
int dpt_layer_has(dpt_layer_kind kind, unsigned flag);

#endif
