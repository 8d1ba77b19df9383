/* Model files: a JSON description of the layer graph (dpt_model_spec_load_json), decoded by
 * jansson (strict: duplicate keys rejected, errors with line and column). Layers may name inputs
 * that come later in the file; they are put in an order where each follows its inputs, the
 * file's order wherever it allows, and a cycle is reported naming a layer on it. */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "dptrain/model.h"
#include "dptrain/safetensors.h"

/* One layer as the file gives it, before ordering. */
typedef struct file_layer {
  dpt_layer_spec spec;
  const char *input_names[DPT_LAYER_MAX_INPUTS]; /* borrowed from the JSON tree */
  int num_inputs;
  int src[DPT_LAYER_MAX_INPUTS]; /* file indices, -1 for "input" */
  const char *tie_name;          /* "tie": the embedding layer a linear shares (borrowed) */
  int tie_src;                   /* its file index, -1 for none */
  int placed;                    /* its index in the spec once ordered, else -1 */
} file_layer;

typedef struct loader {
  const char *path;
  size_t classes;
  file_layer *layers;
  size_t count;
} loader;

static dpt_status bad(const loader *ld, const char *fmt, ...) {
  char msg[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: %s", ld->path, msg);
}

/* A non-negative integer field that fits size_t; absent leaves *out as it is. */
static dpt_status get_size(const loader *ld, size_t i, json_t *obj, const char *key, size_t *out) {
  json_t *v = json_object_get(obj, key);
  if (!v) return DPT_OK;
  if (!json_is_integer(v) || json_integer_value(v) < 0)
    return bad(ld, "layer %zu: \"%s\" must be a non-negative integer", i, key);
  *out = (size_t)json_integer_value(v);
  return DPT_OK;
}

/* "out": an integer, or "classes". */
static dpt_status get_out(const loader *ld, size_t i, json_t *obj, size_t *out) {
  json_t *v = json_object_get(obj, "out");
  if (json_is_string(v) && strcmp(json_string_value(v), "classes") == 0) {
    *out = ld->classes;
    return DPT_OK;
  }
  if (v && !json_is_integer(v))
    return bad(ld, "layer %zu: \"out\" must be an integer or \"classes\"", i);
  return get_size(ld, i, obj, "out", out);
}

static dpt_status check_keys(const loader *ld, size_t i, json_t *obj) {
  static const char *const known[] = {
      "name", "kind",        "inputs", "out",   "kernel", "stride",   "padding", "bias", "p",
      "eps",  "approximate", "vocab",  "heads", "tie",    "init_std", "offset",  "bag",  "mode"};
  const char *key;
  json_t *v;
  json_object_foreach(obj, key, v) {
    int ok = 0;
    for (size_t k = 0; k < sizeof known / sizeof known[0] && !ok; ++k)
      ok = strcmp(key, known[k]) == 0;
    if (!ok) return bad(ld, "layer %zu: unknown field \"%s\"", i, key);
  }
  return DPT_OK;
}

static dpt_status read_inputs(const loader *ld, size_t i, json_t *obj, file_layer *fl) {
  json_t *in = json_object_get(obj, "inputs");
  if (!in) return DPT_OK;
  if (json_is_string(in)) {
    fl->input_names[fl->num_inputs++] = json_string_value(in);
    return DPT_OK;
  }
  if (!json_is_array(in) || json_array_size(in) < 1 || json_array_size(in) > DPT_LAYER_MAX_INPUTS)
    return bad(ld, "layer %zu: \"inputs\" must be a name or a list of 1 or 2 names", i);
  for (size_t j = 0; j < json_array_size(in); ++j) {
    json_t *v = json_array_get(in, j);
    if (!json_is_string(v)) return bad(ld, "layer %zu: \"inputs\" holds a non-string", i);
    fl->input_names[fl->num_inputs++] = json_string_value(v);
  }
  return DPT_OK;
}

/* layernorm's "eps" (a positive number) and gelu's "approximate" ("none" or "tanh", as
 * PyTorch spells them); messages name the layer. */
static dpt_status read_norm_options(const loader *ld, size_t i, json_t *obj, dpt_layer_spec *l) {
  json_t *eps = json_object_get(obj, "eps"), *ap = json_object_get(obj, "approximate");
  const char *nm = l->name[0] ? l->name : "?";
  if (eps && (!json_is_number(eps) || !(json_number_value(eps) > 0.0) ||
              !((float)json_number_value(eps) > 0.0f)))
    return bad(ld, "layer %zu '%s': \"eps\" must be a positive number", i, nm);
  if (eps) l->eps = (float)json_number_value(eps);
  if (!ap) return DPT_OK;
  const char *v = json_is_string(ap) ? json_string_value(ap) : "";
  if (strcmp(v, "none") != 0 && strcmp(v, "tanh") != 0)
    return bad(ld, "layer %zu '%s': \"approximate\" must be \"none\" or \"tanh\"", i, nm);
  l->approximate = strcmp(v, "tanh") == 0 ? DPT_GELU_TANH : DPT_GELU_ERF;
  return DPT_OK;
}

static dpt_status read_layer(const loader *ld, size_t i, json_t *obj, file_layer *fl) {
  if (!json_is_object(obj)) return bad(ld, "layer %zu is not an object", i);
  DPT_TRY(check_keys(ld, i, obj));
  json_t *name = json_object_get(obj, "name"), *kind = json_object_get(obj, "kind");
  if (name && (!json_is_string(name) || json_string_length(name) == 0 ||
               json_string_length(name) >= DPT_LAYER_NAME_MAX))
    return bad(ld, "layer %zu: \"name\" must be a string of 1 to %d bytes", i,
               DPT_LAYER_NAME_MAX - 1);
  if (name) strcpy(fl->spec.name, json_string_value(name));
  if (!json_is_string(kind)) return bad(ld, "layer %zu: \"kind\" is missing or not a string", i);
  if (dpt_layer_kind_parse(json_string_value(kind), &fl->spec.kind) != DPT_OK)
    return bad(ld, "layer %zu: %s", i, dpt_last_error());
  DPT_TRY(get_out(ld, i, obj, &fl->spec.size));
  DPT_TRY(get_size(ld, i, obj, "kernel", &fl->spec.kernel));
  DPT_TRY(get_size(ld, i, obj, "stride", &fl->spec.stride));
  DPT_TRY(get_size(ld, i, obj, "padding", &fl->spec.padding));
  json_t *bias = json_object_get(obj, "bias"), *p = json_object_get(obj, "p");
  if (bias && !json_is_boolean(bias))
    return bad(ld, "layer %zu: \"bias\" must be true or false", i);
  fl->spec.no_bias = bias && json_is_false(bias);
  if (p && !json_is_number(p)) return bad(ld, "layer %zu: \"p\" must be a number", i);
  if (p) fl->spec.p = (float)json_number_value(p);
  DPT_TRY(read_norm_options(ld, i, obj, &fl->spec));
  DPT_TRY(get_size(ld, i, obj, "vocab", &fl->spec.vocab));
  DPT_TRY(get_size(ld, i, obj, "heads", &fl->spec.heads));
  json_t *tie = json_object_get(obj, "tie"), *sd = json_object_get(obj, "init_std");
  if (tie && !json_is_string(tie))
    return bad(ld, "layer %zu: \"tie\" must name an embedding layer", i);
  fl->tie_name = tie ? json_string_value(tie) : NULL;
  if (sd && (!json_is_number(sd) || !(json_number_value(sd) >= 0.0)))
    return bad(ld, "layer %zu: \"init_std\" must be a non-negative number", i);
  if (sd) fl->spec.init_std = (float)json_number_value(sd);
  DPT_TRY(get_size(ld, i, obj, "offset", &fl->spec.offset));
  DPT_TRY(get_size(ld, i, obj, "bag", &fl->spec.bag));
  json_t *mode = json_object_get(obj, "mode");
  if (mode) {
    const char *v = json_is_string(mode) ? json_string_value(mode) : "";
    if (strcmp(v, "sum") != 0 && strcmp(v, "mean") != 0)
      return bad(ld, "layer %zu '%s': \"mode\" must be \"sum\" or \"mean\"", i,
                 fl->spec.name[0] ? fl->spec.name : "?");
    fl->spec.mode = strcmp(v, "mean") == 0 ? DPT_BAG_MEAN : DPT_BAG_SUM;
  }
  return read_inputs(ld, i, obj, fl);
}

/* The file index of the layer called `name` ("input": -1), or -2 when there is none. */
static int find_layer(const loader *ld, const char *name) {
  if (strcmp(name, "input") == 0) return -1;
  for (size_t i = 0; i < ld->count; ++i)
    if (strcmp(ld->layers[i].spec.name, name) == 0) return (int)i;
  return -2;
}

/* Names to file indices; a layer without "inputs" takes the one before it in the file. */
static dpt_status resolve(loader *ld) {
  for (size_t i = 0; i < ld->count; ++i) {
    file_layer *fl = &ld->layers[i];
    for (size_t j = 0; j < i && fl->spec.name[0]; ++j)
      if (strcmp(ld->layers[j].spec.name, fl->spec.name) == 0)
        return bad(ld, "layers %zu and %zu are both called '%s'", j, i, fl->spec.name);
    if (strcmp(fl->spec.name, "input") == 0)
      return bad(ld, "layer %zu: the name 'input' stands for the model input", i);
    fl->tie_src = -1;
    if (fl->tie_name) {
      fl->tie_src = find_layer(ld, fl->tie_name);
      if (fl->tie_src < 0)
        return bad(ld, "layer %zu ('%s'): tie '%s' names no layer", i, fl->spec.name, fl->tie_name);
    }
    if (fl->num_inputs == 0) {
      fl->src[0] = (int)i - 1;
      continue;
    }
    for (int j = 0; j < fl->num_inputs; ++j) {
      fl->src[j] = find_layer(ld, fl->input_names[j]);
      if (fl->src[j] == -2)
        return bad(ld, "layer %zu ('%s'): input '%s' names no layer", i, fl->spec.name,
                   fl->input_names[j]);
    }
  }
  return DPT_OK;
}

/* Kahn's order, stable: repeatedly place the first unplaced layer whose inputs are placed. */
static dpt_status order(loader *ld, dpt_model_spec *spec) {
  for (size_t n = 0; n < ld->count; ++n) {
    size_t pick = ld->count;
    for (size_t i = 0; i < ld->count && pick == ld->count; ++i) {
      file_layer *fl = &ld->layers[i];
      int ready = fl->placed < 0;
      for (int j = 0; j < (fl->num_inputs ? fl->num_inputs : 1) && ready; ++j)
        ready = fl->src[j] < 0 || ld->layers[fl->src[j]].placed >= 0;
      if (ready && fl->tie_src >= 0) ready = ld->layers[fl->tie_src].placed >= 0;
      if (ready) pick = i;
    }
    if (pick == ld->count) {
      for (size_t i = 0; i < ld->count; ++i)
        if (ld->layers[i].placed < 0)
          return bad(ld, "layer %zu ('%s') is on a cycle (or depends on one)", i,
                     ld->layers[i].spec.name);
    }
    file_layer *fl = &ld->layers[pick];
    fl->placed = (int)n;
    fl->spec.num_inputs = fl->num_inputs;
    for (int j = 0; j < fl->num_inputs; ++j)
      fl->spec.inputs[j] = fl->src[j] < 0 ? DPT_LAYER_INPUT_MODEL : ld->layers[fl->src[j]].placed;
    if (fl->num_inputs == 0 && fl->src[0] >= 0 && ld->layers[fl->src[0]].placed != (int)n - 1) {
      fl->spec.num_inputs = 1; /* the layer before it in the file is elsewhere now */
      fl->spec.inputs[0] = ld->layers[fl->src[0]].placed;
    }
    if (fl->num_inputs == 0 && fl->src[0] < 0 && n > 0) {
      fl->spec.num_inputs = 1;
      fl->spec.inputs[0] = DPT_LAYER_INPUT_MODEL;
    }
    if (fl->tie_src >= 0) fl->spec.tie = ld->layers[fl->tie_src].placed + 1;
    spec->layers[n] = fl->spec;
    /* A name that is the layer's own index says what "" says (dpt_model_spec_to_json names
     * an unnamed layer so only where another refers to it): "" keeps the spec as written. */
    char index[24];
    snprintf(index, sizeof index, "%zu", n);
    if (strcmp(spec->layers[n].name, index) == 0) spec->layers[n].name[0] = '\0';
  }
  spec->num_layers = ld->count;
  return DPT_OK;
}

/* "input": [c, h, w] and "classes": n, when present, must agree with the data. */
static dpt_status check_model_fields(const loader *ld, json_t *root, const size_t shape[3]) {
  json_t *in = json_object_get(root, "input"), *cls = json_object_get(root, "classes");
  json_t *tok = json_object_get(root, "tokens");
  if (tok && (!json_is_integer(tok) || json_integer_value(tok) < 1 || shape[0] != 1 ||
              shape[1] != 1 || json_integer_value(tok) != (json_int_t)shape[2]))
    return bad(ld, "\"tokens\" must be a positive integer, the sequence length of the input "
                   "[1, 1, tokens]");
  if (in) {
    if (!json_is_array(in) || json_array_size(in) != 3)
      return bad(ld, "\"input\" must be [channels, height, width]");
    for (size_t d = 0; d < 3; ++d) {
      json_t *v = json_array_get(in, d);
      if (!json_is_integer(v) || json_integer_value(v) != (json_int_t)shape[d])
        return bad(ld, "\"input\" is not the data's sample shape [%zu, %zu, %zu]", shape[0],
                   shape[1], shape[2]);
    }
  }
  if (cls && (!json_is_integer(cls) || json_integer_value(cls) != (json_int_t)ld->classes))
    return bad(ld, "\"classes\" is not the data's %zu classes", ld->classes);
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (strcmp(key, "input") && strcmp(key, "classes") && strcmp(key, "layers") &&
        strcmp(key, "tokens"))
      return bad(ld, "unknown field \"%s\" (input, tokens, classes, layers)", key);
  }
  return DPT_OK;
}

/* shape NULL: the sample shape and the classes come from the file's "input" and "classes",
 * which must then be there. */
static dpt_status load_tree(loader *ld, json_t *root, const size_t *shape, dpt_model_spec *spec) {
  if (!json_is_object(root)) return bad(ld, "the model is not a JSON object");
  size_t own[3];
  json_t *tok = json_object_get(root, "tokens");
  if (!shape) {
    json_t *in = json_object_get(root, "input"), *cls = json_object_get(root, "classes");
    for (size_t d = 0; d < 3; ++d) {
      json_t *v = json_is_array(in) ? json_array_get(in, d) : NULL;
      if (!json_is_integer(v) || json_integer_value(v) < 1 || json_array_size(in) != 3)
        return bad(ld, "\"input\" is missing or not [channels, height, width]");
      own[d] = (size_t)json_integer_value(v);
    }
    if (!json_is_integer(cls) || json_integer_value(cls) < 1)
      return bad(ld, "\"classes\" is missing or not a positive integer");
    ld->classes = (size_t)json_integer_value(cls);
    shape = own;
  }
  DPT_TRY(check_model_fields(ld, root, shape));
  json_t *layers = json_object_get(root, "layers");
  if (!json_is_array(layers) || json_array_size(layers) == 0)
    return bad(ld, "\"layers\" is missing or not a non-empty list");
  if (json_array_size(layers) > DPT_MODEL_MAX_LAYERS)
    return bad(ld, "%zu layers, at most %d", json_array_size(layers), DPT_MODEL_MAX_LAYERS);
  ld->count = json_array_size(layers);
  ld->layers = calloc(ld->count, sizeof *ld->layers);
  if (!ld->layers) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory", ld->path);
  for (size_t i = 0; i < ld->count; ++i) {
    ld->layers[i].placed = -1;
    DPT_TRY(read_layer(ld, i, json_array_get(layers, i), &ld->layers[i]));
  }
  DPT_TRY(resolve(ld));
  DPT_TRY(dpt_model_spec_init(spec, shape[0], shape[1], shape[2], ld->classes));
  if (tok) spec->seq_len = (size_t)json_integer_value(tok);
  return order(ld, spec);
}

dpt_status dpt_model_spec_load_json(const char *path, size_t c, size_t h, size_t w,
                                    size_t num_classes, dpt_model_spec *spec) {
  if (!path || !spec)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_spec_load_json: path/spec is NULL");
  json_error_t err;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
  if (!root) {
    if (err.line < 0) return dpt_set_error(DPT_ERR_IO, "%s: %s", path, err.text);
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: line %d, column %d: %s", path, err.line,
                         err.column, err.text);
  }
  loader ld = {path, num_classes, NULL, 0};
  const size_t shape[3] = {c, h, w};
  dpt_status st = load_tree(&ld, root, shape, spec);
  free(ld.layers);
  json_decref(root);
  return st;
}

dpt_status dpt_model_spec_parse_json(const char *text, const char *origin, dpt_model_spec *spec) {
  if (!text || !origin || !spec)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "dpt_model_spec_parse_json: text/origin/spec is NULL");
  json_error_t err;
  json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &err);
  if (!root)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: line %d, column %d: %s", origin, err.line,
                         err.column, err.text);
  loader ld = {origin, 0, NULL, 0};
  dpt_status st = load_tree(&ld, root, NULL, spec);
  free(ld.layers);
  json_decref(root);
  return st;
}

dpt_status dpt_model_spec_from_weights(const char *path, dpt_model_spec *spec) {
  if (!path || !spec)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_spec_from_weights: path/spec is NULL");
  dpt_safetensors *st = NULL;
  DPT_TRY(dpt_safetensors_open(path, &st));
  const char *text = dpt_safetensors_metadata(st, DPT_MODEL_METADATA_KEY);
  dpt_status s;
  if (!text) {
    s = dpt_set_error(DPT_ERR_BAD_FORMAT,
                      "%s: no model description in the file (metadata \"%s\"): the model must be "
                      "given",
                      path, DPT_MODEL_METADATA_KEY);
  } else {
    size_t cap = strlen(path) + 64;
    char *origin = malloc(cap);
    if (origin) {
      snprintf(origin, cap, "%s: metadata \"%s\"", path, DPT_MODEL_METADATA_KEY);
      s = dpt_model_spec_parse_json(text, origin, spec);
      free(origin);
    } else {
      s = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
  }
  dpt_safetensors_close(st);
  return s;
}

/* ---- writing -------------------------------------------------------------------------------- */

/* Sets obj[key] = v, taking v; 0, or -1 when out of memory. */
static int put(json_t *obj, const char *key, json_t *v) {
  return v ? json_object_set_new(obj, key, v) : -1;
}

/* Layer i as an object: its name (or, where another layer refers to it and it has none, its
 * index), kind, inputs by name, and every field that is not zero. */
static json_t *layer_json(const dpt_model_spec *spec, size_t i, char (*names)[DPT_LAYER_NAME_MAX]) {
  const dpt_layer_spec *l = &spec->layers[i];
  json_t *o = json_object();
  if (!o) return NULL;
  int fail = 0;
  if (names[i][0]) fail |= put(o, "name", json_string(names[i]));
  fail |= put(o, "kind", json_string(dpt_layer_kind_name(l->kind)));
  if (l->num_inputs > 0) {
    json_t *in = json_array();
    for (int j = 0; j < l->num_inputs && in; ++j)
      if (json_array_append_new(in, json_string(l->inputs[j] == DPT_LAYER_INPUT_MODEL
                                                    ? "input"
                                                    : names[l->inputs[j]])) != 0)
        fail = -1;
    fail |= put(o, "inputs", in);
  }
  if (l->size) fail |= put(o, "out", json_integer((json_int_t)l->size));
  if (l->kernel) fail |= put(o, "kernel", json_integer((json_int_t)l->kernel));
  if (l->stride) fail |= put(o, "stride", json_integer((json_int_t)l->stride));
  if (l->padding) fail |= put(o, "padding", json_integer((json_int_t)l->padding));
  if (l->no_bias) fail |= put(o, "bias", json_false());
  if (l->p != 0.0f) fail |= put(o, "p", json_real((double)l->p));
  if (l->eps != 0.0f) fail |= put(o, "eps", json_real((double)l->eps));
  if (l->approximate == DPT_GELU_TANH) fail |= put(o, "approximate", json_string("tanh"));
  if (l->vocab) fail |= put(o, "vocab", json_integer((json_int_t)l->vocab));
  if (l->heads) fail |= put(o, "heads", json_integer((json_int_t)l->heads));
  if (l->tie) fail |= put(o, "tie", json_string(names[l->tie - 1]));
  if (l->init_std != 0.0f) fail |= put(o, "init_std", json_real((double)l->init_std));
  if (l->offset) fail |= put(o, "offset", json_integer((json_int_t)l->offset));
  if (l->bag) fail |= put(o, "bag", json_integer((json_int_t)l->bag));
  if (l->mode == DPT_BAG_MEAN) fail |= put(o, "mode", json_string("mean"));
  if (fail) {
    json_decref(o);
    return NULL;
  }
  return o;
}

/* The names the file gives: each layer's own, or its index for an unnamed layer that another
 * layer names as an input. Such an index must not be another layer's name. */
static dpt_status file_names(const dpt_model_spec *spec, char (*names)[DPT_LAYER_NAME_MAX]) {
  const char *fn = "dpt_model_spec_to_json";
  for (size_t i = 0; i < spec->num_layers; ++i) {
    const dpt_layer_spec *l = &spec->layers[i];
    if (!dpt_layer_kind_name(l->kind))
      return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: layer %zu has unknown kind %d", fn, i,
                           (int)l->kind);
    if (memchr(l->name, '\0', sizeof l->name) == NULL)
      return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: layer %zu's name is not NUL-terminated", fn,
                           i);
    if (l->num_inputs < 0 || l->num_inputs > DPT_LAYER_MAX_INPUTS)
      return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: layer %zu has %d inputs", fn, i,
                           l->num_inputs);
    if (l->mode != DPT_BAG_SUM && l->mode != DPT_BAG_MEAN)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "%s: layer %zu has mode %d, not sum (0) or mean (1)", fn, i, l->mode);
    strcpy(names[i], l->name);
    for (int j = 0; j < l->num_inputs; ++j) {
      int in = l->inputs[j];
      if (in < DPT_LAYER_INPUT_MODEL || in >= (int)i)
        return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: layer %zu input %d is not an earlier layer",
                             fn, i, in);
      if (in >= 0 && !names[in][0]) snprintf(names[in], DPT_LAYER_NAME_MAX, "%d", in);
    }
    if (l->tie < 0 || l->tie > (int)i)
      return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: layer %zu ties to %d, not an earlier layer",
                           fn, i, l->tie - 1);
    if (l->tie && !names[l->tie - 1][0])
      snprintf(names[l->tie - 1], DPT_LAYER_NAME_MAX, "%d", l->tie - 1);
  }
  for (size_t i = 0; i < spec->num_layers; ++i)
    for (size_t j = 0; j < spec->num_layers && names[i][0]; ++j)
      if (j != i && strcmp(names[i], names[j]) == 0)
        return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: layers %zu and %zu are both called '%s'", fn,
                             j < i ? j : i, j < i ? i : j, names[i]);
  return DPT_OK;
}

dpt_status dpt_model_spec_to_json(const dpt_model_spec *spec, char **out) {
  const char *fn = "dpt_model_spec_to_json";
  if (!spec || !out) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: spec/out is NULL", fn);
  *out = NULL;
  if (spec->num_layers == 0 || spec->num_layers > DPT_MODEL_MAX_LAYERS)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %zu layers (1 to %d)", fn, spec->num_layers,
                         DPT_MODEL_MAX_LAYERS);
  char(*names)[DPT_LAYER_NAME_MAX] = calloc(spec->num_layers, sizeof *names);
  if (!names) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  dpt_status st = file_names(spec, names);
  json_t *root = st == DPT_OK ? json_object() : NULL, *layers = root ? json_array() : NULL;
  if (st == DPT_OK) {
    int fail = !root || put(root, "input",
                            json_pack("[III]", (json_int_t)spec->in_c, (json_int_t)spec->in_h,
                                      (json_int_t)spec->in_w));
    fail |= !root || put(root, "classes", json_integer((json_int_t)spec->num_classes));
    if (spec->seq_len)
      fail |= !root || put(root, "tokens", json_integer((json_int_t)spec->seq_len));
    for (size_t i = 0; i < spec->num_layers && layers && !fail; ++i)
      fail = json_array_append_new(layers, layer_json(spec, i, names)) != 0;
    fail |= !root || put(root, "layers", layers);
    if (!fail) *out = json_dumps(root, JSON_COMPACT);
    if (!*out) st = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  }
  json_decref(root);
  free(names);
  return st;
}
