/* The layer kinds' operation tables by kind, gathered from DPT_LAYER_KIND_MAP: a kind's
 * table is dpt_layer_ops_<KIND>, defined in its family's file under core/model/layers/. */
#include "core/model/layer.h"

static const dpt_layer_ops *const table[DPT_LAYER_KIND_COUNT] = {
#define DPT_LAYER_OPS_ENTRY_(name, value, text) [DPT_LAYER_##name] = &dpt_layer_ops_##name,
    DPT_LAYER_KIND_MAP(DPT_LAYER_OPS_ENTRY_)
#undef DPT_LAYER_OPS_ENTRY_
};

const dpt_layer_ops *dpt_layer_ops_of(dpt_layer_kind kind) {
  return (int)kind >= 0 && (int)kind < DPT_LAYER_KIND_COUNT ? table[kind] : NULL;
}

int dpt_layer_has(dpt_layer_kind kind, unsigned flag) {
  const dpt_layer_ops *o = dpt_layer_ops_of(kind);
  return o && (o->flags & flag) != 0;
}
