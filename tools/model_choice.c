/* The tools' model and normalization options (tools/model_choice.h). */
#include "tools/model_choice.h"

#include <string.h>

#include "bench/bench.h"

void dpt_model_choice_default(dpt_model_choice *mc) {
  memset(mc, 0, sizeof *mc);
  mc->model = "mlp";
  mc->depth = 20;
  mc->hidden[0] = 512;
  mc->hidden[1] = 256;
  mc->num_hidden = 2;
  mc->channels[0] = 32;
  mc->channels[1] = 64;
}

int dpt_model_choice_parse_model(dpt_model_choice *mc, const char *v) {
  size_t n = strlen(v);
  int builtin = !strcmp(v, "mlp") || !strcmp(v, "cnn") || !strcmp(v, "resnet");
  int file = strchr(v, '/') || (n > 5 && !strcmp(v + n - 5, ".json"));
  if (!builtin && !file) return -1; /* a model file is named by a path or ends in .json */
  mc->model = v;
  return 0;
}

int dpt_model_choice_parse_hidden(dpt_model_choice *mc, const char *v) {
  return dpt_parse_size_list(v, mc->hidden, 14, 1000000, &mc->num_hidden) != 0 ? -1 : 0;
}

int dpt_model_choice_parse_channels(dpt_model_choice *mc, const char *v) {
  size_t n = 0;
  return dpt_parse_size_list(v, mc->channels, 2, 100000, &n) != 0 || n != 2 ? -1 : 0;
}

int dpt_norm_choice_parse_mean(dpt_norm_choice *nc, const char *v) {
  return dpt_parse_float_list(v, nc->mean, 64, &nc->num_mean);
}

int dpt_norm_choice_parse_std(dpt_norm_choice *nc, const char *v) {
  if (dpt_parse_float_list(v, nc->std, 64, &nc->num_std) != 0) return -1;
  for (size_t i = 0; i < nc->num_std; ++i)
    if (!(nc->std[i] > 0.0f)) return -1;
  return 0;
}

dpt_status dpt_model_choice_spec(const dpt_model_choice *mc, size_t c, size_t h, size_t w,
                                 size_t classes, dpt_model_spec *spec) {
  if (!strcmp(mc->model, "mlp"))
    return dpt_model_spec_mlp(spec, c, h, w, mc->hidden, mc->num_hidden, classes);
  if (!strcmp(mc->model, "cnn"))
    return dpt_model_spec_cnn(spec, c, h, w, mc->channels[0], mc->channels[1], classes);
  if (!strcmp(mc->model, "resnet")) return dpt_model_spec_resnet(spec, c, h, w, mc->depth, classes);
  return dpt_model_spec_load_json(mc->model, c, h, w, classes, spec);
}
