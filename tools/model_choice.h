/* What the tools' model and normalization options choose, shared by dptrain train, eval and
 * predict: the option parsers (each returns 0, or -1 for a bad value) and the model spec they
 * build for the data's sample shape and classes. */
#ifndef DPTRAIN_TOOLS_MODEL_CHOICE_H
#define DPTRAIN_TOOLS_MODEL_CHOICE_H

#include <stddef.h>

#include "dptrain/model.h"

typedef struct dpt_model_choice {
  const char *model;             /* "mlp", "cnn", "resnet" or a model file (a path or FILE.json) */
  size_t depth;                  /* resnet */
  size_t hidden[16], num_hidden; /* mlp */
  size_t channels[2];            /* cnn */
} dpt_model_choice;

/* --mean and --std: one value per channel, or one for all. */
typedef struct dpt_norm_choice {
  float mean[64], std[64];
  size_t num_mean, num_std; /* values given (0: none) */
} dpt_norm_choice;

/* mlp 512,256; cnn 32,64; resnet depth 20. */
void dpt_model_choice_default(dpt_model_choice *mc);
int dpt_model_choice_parse_model(dpt_model_choice *mc, const char *v);
int dpt_model_choice_parse_hidden(dpt_model_choice *mc, const char *v);
int dpt_model_choice_parse_channels(dpt_model_choice *mc, const char *v);
int dpt_norm_choice_parse_mean(dpt_norm_choice *nc, const char *v);
int dpt_norm_choice_parse_std(dpt_norm_choice *nc, const char *v);

/* The chosen model for samples c x h x w and `classes` classes. */
dpt_status dpt_model_choice_spec(const dpt_model_choice *mc, size_t c, size_t h, size_t w,
                                 size_t classes, dpt_model_spec *spec);

#endif
