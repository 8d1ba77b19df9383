/* The planner's fusions: layer pairs of a model that the backend runs as one op when it has
 * that op (a model file says nothing about them). Today a linear layer with a bias followed by
 * GELU, its only consumer: the bias and GELU in one pass forward, and backward GELU's slope
 * and the bias gradient in one. DPT_FUSE=0 turns them off, for comparison. */
#include <stdint.h>
#include <string.h>

#include "base/env.h"
#include "core/model/layer.h"

/* How many layers read layer s's output. */
static int readers_of(const dpt_model *m, int s) {
  int n = 0;
  for (size_t j = 0; j < m->num_layers; ++j)
    for (int k = 0; k < m->layers[j].num_src; ++k)
      n += m->layers[j].src[k] == s;
  return n;
}

/* Layer i is a linear with a bias whose output only GELU layer i + 1 reads. */
static int linear_then_gelu(const dpt_model *m, size_t i) {
  const dpt_node *L = &m->layers[i], *G = &m->layers[i + 1];
  return L->spec.kind == DPT_LAYER_LINEAR && L->b_index != SIZE_MAX &&
         G->spec.kind == DPT_LAYER_GELU && G->num_src == 1 && G->src[0] == (int)i &&
         readers_of(m, (int)i) == 1;
}

void dpt_model_plan_fusions(dpt_model *m) {
  const char *env = dpt_env_get("DPT_FUSE");
  if (env && !strcmp(env, "0")) return;
  if (!dpt_backend_supports(m->be, DPT_OP_BIAS_GELU_FWD) ||
      !dpt_backend_supports(m->be, DPT_OP_BIAS_GELU_BWD))
    return;
  for (size_t i = 0; i + 1 < m->num_layers; ++i)
    if (linear_then_gelu(m, i)) {
      m->layers[i].fuse = DPT_FUSE_BIAS_TO_NEXT;
      m->layers[i + 1].fuse = DPT_FUSE_BIAS_GELU;
    }
}
