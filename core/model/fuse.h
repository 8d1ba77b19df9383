/* the planner's fusions (fuse.c). */
#ifndef DPTRAIN_CORE_MODEL_FUSE_H
#define DPTRAIN_CORE_MODEL_FUSE_H

#include "core/model/model_impl.h"

/* Marks the layers that run fused (after planning, before the stores and memory):
 * dpt_node.fuse_relu on the layer running the fused op, dpt_node.absorbed on the layer it takes
 * in, dpt_node.fuse on a linear and the GELU adding its bias. */
void dpt_model_plan_fusions(dpt_model *m);
/* Whether layer L owns no output of its own (a flatten, or a layer absorbed by a fusion). */
int dpt_node_is_alias(const dpt_node *L);

#endif
