/* The layer kinds' names (DPT_LAYER_KIND_MAP's text): dpt_layer_kind_name and
 * dpt_layer_kind_parse, for messages, model files and the command line. */
#include <string.h>

#include "base/error.h"
#include "dptrain/model.h"

const char *dpt_layer_kind_name(dpt_layer_kind kind) {
  switch (kind) {
#define DPT_LAYER_KIND_NAME_(name, value, text)                                                    \
  case DPT_LAYER_##name:                                                                           \
    return text;
    DPT_LAYER_KIND_MAP(DPT_LAYER_KIND_NAME_)
#undef DPT_LAYER_KIND_NAME_
  default:
    return NULL;
  }
}

/* ", linear, relu, ...": every kind's name, for the message about an unknown one. */
static const char kind_names[] =
#define DPT_LAYER_KIND_LIST_(name, value, text) ", " text
    DPT_LAYER_KIND_MAP(DPT_LAYER_KIND_LIST_)
#undef DPT_LAYER_KIND_LIST_
    ;

dpt_status dpt_layer_kind_parse(const char *name, dpt_layer_kind *out) {
  if (!name || !out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_layer_kind_parse: NULL");
  for (int k = 0; k < DPT_LAYER_KIND_COUNT; ++k)
    if (strcmp(name, dpt_layer_kind_name((dpt_layer_kind)k)) == 0) {
      *out = (dpt_layer_kind)k;
      return DPT_OK;
    }
  return dpt_set_error(DPT_ERR_INVALID_ARG, "unknown layer kind '%s' (%s)", name, kind_names + 2);
}
