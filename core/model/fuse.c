/* The planner's fusions: layers the model runs as one fused op where the backend has it, which
 * a model file never mentions. A batch norm or a residual add whose output only a ReLU reads
 * runs the ReLU itself (the bn_relu ops, add_relu); the ReLU then owns no memory and does no
 * work (its output is its input's). A linear with a bias whose output only a GELU reads leaves
 * its bias to the GELU, which runs both in one pass (bias_gelu_fwd, bias_gelu_bwd). An attention
 * runs its softmax, key mask and dropout as one op (attn_probs_fwd, attn_probs_bwd). DPT_FUSE=0
 * runs every layer alone. */
#include <stdint.h>
#include <string.h>

#include "base/env.h"
#include "core/model/fuse.h"
#include "core/model/layer.h"

/* How many layers read layer i's output (directly: an alias of it counts as a reader). */
static int readers_of(const dpt_model *m, size_t i) {
  int n = 0;
  for (size_t j = i + 1; j < m->num_layers; ++j)
    for (int k = 0; k < m->layers[j].num_src; ++k)
      n += m->layers[j].src[k] == (int)i;
  return n;
}

static int is_batchnorm(dpt_layer_kind k) {
  return k == DPT_LAYER_BATCHNORM2D || k == DPT_LAYER_BATCHNORM1D;
}

/* Whether layer B can run the ReLU after it on this backend. */
static int takes_relu(const dpt_backend *be, const dpt_node *B) {
  if (is_batchnorm(B->spec.kind))
    return dpt_backend_supports(be, DPT_OP_BN_RELU_FWD) &&
           dpt_backend_supports(be, DPT_OP_BN_RELU_BWD_REDUCE) &&
           dpt_backend_supports(be, DPT_OP_BN_RELU_BWD);
  return B->spec.kind == DPT_LAYER_ADD && dpt_backend_supports(be, DPT_OP_ADD_RELU) &&
         dpt_backend_supports(be, DPT_OP_RELU_BWD);
}

/* Layer i is a linear with a bias whose output only GELU layer i + 1 reads. */
static int linear_then_gelu(const dpt_model *m, size_t i) {
  const dpt_node *L = &m->layers[i], *G = &m->layers[i + 1];
  return L->spec.kind == DPT_LAYER_LINEAR && L->b_index != SIZE_MAX &&
         G->spec.kind == DPT_LAYER_GELU && G->num_src == 1 && G->src[0] == (int)i &&
         readers_of(m, i) == 1 && dpt_backend_supports(m->be, DPT_OP_BIAS_GELU_FWD) &&
         dpt_backend_supports(m->be, DPT_OP_BIAS_GELU_BWD);
}

int dpt_node_is_alias(const dpt_node *L) {
  return L->absorbed || dpt_layer_has(L->spec.kind, DPT_LAYER_ALIAS);
}

void dpt_model_plan_fusions(dpt_model *m) {
  const char *env = dpt_env_get("DPT_FUSE");
  if (env && strcmp(env, "0") == 0) return;
  for (size_t i = 0; i + 1 < m->num_layers; ++i) { /* the last layer keeps its logits */
    dpt_node *R = &m->layers[i];
    const int a = R->src[0];
    if (R->spec.kind != DPT_LAYER_RELU || a < 0) continue;
    dpt_node *B = &m->layers[a];
    if (takes_relu(m->be, B) && readers_of(m, (size_t)a) == 1) {
      B->fuse_relu = 1;
      R->absorbed = 1;
    }
  }
  for (size_t i = 0; i < m->num_layers; ++i)
    if (m->layers[i].spec.kind == DPT_LAYER_ATTENTION &&
        dpt_backend_supports(m->be, DPT_OP_ATTN_PROBS_FWD) &&
        dpt_backend_supports(m->be, DPT_OP_ATTN_PROBS_BWD))
      m->layers[i].fuse = DPT_FUSE_ATTN_PROBS;
  for (size_t i = 0; i + 1 < m->num_layers; ++i)
    if (linear_then_gelu(m, i)) {
      m->layers[i].fuse = DPT_FUSE_BIAS_TO_NEXT;
      m->layers[i + 1].fuse = DPT_FUSE_BIAS_GELU;
    }
}
