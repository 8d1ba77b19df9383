/* Model weights to and from safetensors files, named and shaped like PyTorch's state_dict: the
 * parameters, then the buffers (batch norm's running statistics and counter). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/model/model_impl.h"
#include "dptrain/model.h"
#include "dptrain/safetensors.h"

static void shape_str(char *out, size_t cap, int ndim, const int64_t *shape) {
  size_t len = (size_t)snprintf(out, cap, "[");
  for (int d = 0; d < ndim && len < cap; ++d)
    len += (size_t)snprintf(out + len, cap - len, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (len < cap) snprintf(out + len, cap - len, "]");
}

/* Entry i of the state: the parameters' tensors, then the buffers; its offset is made relative
 * to the start of the state (parameters, then buffers). */
static void state_entry(const dpt_model *m, size_t i, dpt_tensor_info *t) {
  size_t np = dpt_model_num_tensors(m);
  if (i < np) {
    dpt_model_tensor(m, i, t);
    return;
  }
  dpt_model_buffer_info(m, i - np, t);
  t->offset += dpt_model_num_params(m);
}

static size_t state_entries(const dpt_model *m) {
  return dpt_model_num_tensors(m) + dpt_model_num_buffers(m);
}

/* Batch norm's counter: a float in the model, int64 in files as in PyTorch's state_dict. */
static int is_counter(const dpt_tensor_info *t) {
  static const char suffix[] = ".num_batches_tracked";
  size_t n = strlen(t->name), k = sizeof suffix - 1;
  return t->ndim == 0 && n >= k && strcmp(t->name + n - k, suffix) == 0;
}

/* The metadata: the format's, the model's description, then extra_kv's pairs (may be NULL).
 * *out is malloc'd, NULL-terminated; its strings are borrowed. */
static dpt_status metadata(const char *model_json, const char *const *extra_kv, const char ***out) {
  size_t extra = 0;
  while (extra_kv && extra_kv[extra])
    ++extra;
  const char **kv = malloc((7 + extra) * sizeof *kv);
  if (!kv) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_model_save_params: out of memory");
  const char *const base[] = {"format",  "pt", "producer", "dptrain", DPT_MODEL_METADATA_KEY,
                              model_json};
  memcpy(kv, base, sizeof base);
  for (size_t i = 0; i < extra; ++i)
    kv[6 + i] = extra_kv[i];
  kv[6 + extra] = NULL;
  *out = kv;
  return DPT_OK;
}

dpt_status dpt_model_save_params(const dpt_model *m, const float *host, const char *path) {
  return dpt_model_save_params_meta(m, host, path, NULL);
}

size_t dpt_model_state_tensors(const dpt_model *m, const float *host, dpt_st_tensor *ts,
                               int64_t *counters) {
  size_t n = state_entries(m);
  for (size_t i = 0; ts && i < n; ++i) {
    dpt_tensor_info t;
    state_entry(m, i, &t);
    memset(&ts[i], 0, sizeof ts[i]);
    ts[i].name = t.name;
    ts[i].data = host + t.offset;
    if (is_counter(&t)) {
      counters[i] = (int64_t)host[t.offset];
      ts[i].dtype = "I64";
      ts[i].bytes = &counters[i];
    }
    ts[i].ndim = t.ndim;
    for (int d = 0; d < t.ndim; ++d)
      ts[i].shape[d] = t.shape[d];
  }
  return n;
}

dpt_status dpt_model_save_params_meta(const dpt_model *m, const float *host, const char *path,
                                      const char *const *extra_kv) {
  if (!m || !host || !path)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_save_params: NULL argument");
  size_t n = state_entries(m);
  dpt_st_tensor *ts = calloc(n, sizeof *ts);
  int64_t *counters = calloc(n, sizeof *counters);
  if (!ts || !counters) {
    free(ts);
    free(counters);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_model_save_params: out of memory");
  }
  dpt_model_state_tensors(m, host, ts, counters);
  char *model_json = NULL;
  const char **meta = NULL;
  dpt_status st = dpt_model_spec_to_json(&m->spec, &model_json);
  if (st == DPT_OK) st = metadata(model_json, extra_kv, &meta);
  if (st == DPT_OK) st = dpt_safetensors_write(path, ts, n, meta);
  free(meta);
  free(model_json);
  free(ts);
  free(counters);
  return st;
}

/* Entry t from the file into host: present, with the model's shape. */
static dpt_status load_entry(const dpt_safetensors *st, const char *path, const dpt_tensor_info *t,
                             float *host) {
  dpt_st_info info;
  DPT_TRY(dpt_safetensors_find(st, t->name, &info));
  int same = info.ndim == t->ndim;
  for (int d = 0; same && d < t->ndim; ++d)
    same = info.shape[d] == t->shape[d];
  if (!same) {
    char want[96], got[96];
    shape_str(want, sizeof want, t->ndim, t->shape);
    shape_str(got, sizeof got, info.ndim, info.shape);
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: tensor '%s' has shape %s, the model needs %s",
                         path, t->name, got, want);
  }
  if (!is_counter(t)) return dpt_safetensors_read_f32(st, t->name, host + t->offset, t->count);
  int64_t v = 0;
  DPT_TRY(dpt_safetensors_read_i64(st, t->name, &v, 1));
  host[t->offset] = (float)v;
  return DPT_OK;
}

dpt_status dpt_model_read_state(const dpt_model *m, const dpt_safetensors *st, const char *path,
                                float *host) {
  dpt_status s = DPT_OK;
  size_t n = state_entries(m);
  for (size_t i = 0; i < n && s == DPT_OK; ++i) {
    dpt_tensor_info t;
    state_entry(m, i, &t);
    s = load_entry(st, path, &t, host);
  }
  return s;
}

dpt_status dpt_model_load_params(const dpt_model *m, const char *path, float *host) {
  if (!m || !host || !path)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_load_params: NULL argument");
  dpt_safetensors *st = NULL;
  dpt_status s = dpt_safetensors_open(path, &st);
  if (s != DPT_OK) return s;
  size_t n = state_entries(m);
  s = dpt_model_read_state(m, st, path, host);
  /* Like load_state_dict(strict=True): a tensor the model does not have is an error. */
  size_t count = dpt_safetensors_count(st);
  for (size_t j = 0; j < count && s == DPT_OK; ++j) {
    dpt_st_info info;
    s = dpt_safetensors_info(st, j, &info);
    int known = 0;
    for (size_t i = 0; i < n && s == DPT_OK && !known; ++i) {
      dpt_tensor_info t;
      state_entry(m, i, &t);
      known = strcmp(t.name, info.name) == 0;
    }
    if (s == DPT_OK && !known)
      s = dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: tensor '%s' does not belong to the model", path,
                        info.name);
  }
  dpt_safetensors_close(st);
  return s;
}

dpt_status dpt_model_save(const dpt_model *m, const char *path) {
  if (!m) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_save: model is NULL");
  float *host = malloc(dpt_model_state_size(m) * sizeof(float));
  if (!host) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_model_save: out of memory");
  dpt_status st = dpt_model_get_state(m, host);
  if (st == DPT_OK) st = dpt_model_save_params(m, host, path);
  free(host);
  return st;
}

dpt_status dpt_model_load(dpt_model *m, const char *path) {
  if (!m) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_load: model is NULL");
  float *host = malloc(dpt_model_state_size(m) * sizeof(float));
  if (!host) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_model_load: out of memory");
  dpt_status st = dpt_model_load_params(m, path, host);
  if (st == DPT_OK) st = dpt_model_set_state(m, host);
  free(host);
  return st;
}
