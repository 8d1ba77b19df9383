/* Tensor datasets in safetensors files: x [N, C, H, W] or [N, F] (uint8 or float32) and y [N]
 * (int32 or int64), as numpy's or PyTorch's safetensors writes them (format in
 * include/dptrain/data.h). The samples stay in the file's read-only mapping where the host can
 * read them as they lie; the labels are narrowed to int32 (4 bytes a sample, copied). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/size.h"
#include "core/data/dataset_impl.h"
#include "dptrain/safetensors.h"

/* The shape of x: [N, C, H, W], or [N, F] read as [N, 1, 1, F]. */
static dpt_status st_x_shape(const char *path, const dpt_st_info *x, size_t dims[4]) {
  if (strcmp(x->dtype, "U8") != 0 && strcmp(x->dtype, "F32") != 0)
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: tensor 'x' has dtype %s; a dataset's x is U8 (uint8) or F32 "
                         "(float32)",
                         path, x->dtype);
  if (x->ndim != 4 && x->ndim != 2)
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: tensor 'x' has %d dimension%s; a dataset's x is [N, C, H, W] or "
                         "[N, F]",
                         path, x->ndim, x->ndim == 1 ? "" : "s");
  const int64_t *sh = x->shape;
  const int64_t four[4] = {sh[0], x->ndim == 4 ? sh[1] : 1, x->ndim == 4 ? sh[2] : 1,
                           x->ndim == 4 ? sh[3] : sh[1]};
  for (int k = 0; k < x->ndim; k++)
    if (sh[k] == 0)
      return dpt_set_error(DPT_ERR_BAD_FORMAT,
                           "%s: tensor 'x' has a zero dimension (dimension %d of %d)", path, k,
                           x->ndim);
  for (int k = 0; k < 4; k++)
    dims[k] = (size_t)four[k]; /* the reader checked the product fits in memory */
  return DPT_OK;
}

/* The labels of y ([n] int32 or int64) checked and narrowed into *out (malloc'd);
 * *num_classes is inferred when 0. */
static dpt_status st_labels(const dpt_safetensors *st, const char *path, size_t n, int *num_classes,
                            int32_t **out) {
  dpt_st_info y;
  DPT_TRY(dpt_safetensors_find(st, "y", &y));
  if (strcmp(y.dtype, "I64") != 0 && strcmp(y.dtype, "I32") != 0)
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: tensor 'y' has dtype %s; a dataset's labels y are I64 or I32", path,
                         y.dtype);
  if (y.ndim != 1)
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: tensor 'y' has %d dimensions; a dataset's labels y are [N]", path,
                         y.ndim);
  if (y.count != n)
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: tensor 'x' holds %zu samples but tensor 'y' %zu labels", path, n,
                         y.count);
  int64_t *wide = malloc(n * sizeof *wide);
  int32_t *labels = malloc(n * sizeof *labels);
  dpt_status s = wide && labels ? DPT_OK
                                : dpt_set_error(DPT_ERR_OUT_OF_MEMORY,
                                                "%s: out of memory for %zu labels", path, n);
  if (s == DPT_OK) s = dpt_safetensors_read_i64(st, "y", wide, n);
  int64_t limit = *num_classes > 0 ? *num_classes : INT32_MAX, max = -1;
  for (size_t i = 0; s == DPT_OK && i < n; i++) {
    if (wide[i] < 0 || wide[i] >= limit)
      s = dpt_set_error(DPT_ERR_BAD_FORMAT,
                        "%s: tensor 'y': label %" PRId64 " at index %zu is outside [0, %" PRId64
                        ")",
                        path, wide[i], i, limit);
    else if (wide[i] > max)
      max = wide[i];
    if (s == DPT_OK) labels[i] = (int32_t)wide[i];
  }
  free(wide);
  if (s != DPT_OK) {
    free(labels);
    return s;
  }
  if (*num_classes == 0) *num_classes = (int)(max + 1);
  *out = labels;
  return DPT_OK;
}

/* Whether float32 tensor bytes at p can be read in place as the host's floats. */
static int st_f32_in_place(const void *p) {
  const uint32_t one = 1;
  unsigned char first;
  memcpy(&first, &one, 1);
  return first == 1 && (uintptr_t)p % _Alignof(float) == 0;
}

/* Checks the float32 samples v[count] (dim values each) are finite. */
static dpt_status st_check_finite(const char *path, const float *v, size_t count, size_t dim) {
  for (size_t i = 0; i < count; i++)
    if (!isfinite(v[i]))
      return dpt_set_error(DPT_ERR_BAD_FORMAT,
                           "%s: tensor 'x': sample %zu holds a non-finite value (%g at element "
                           "%zu of the sample)",
                           path, i / dim, (double)v[i], i % dim);
  return DPT_OK;
}

/* x's samples: uint8, and float32 when the host reads the file's floats as they lie (little-
 * endian, aligned), stay in the file's read-only mapping (*samples points into it, *storage
 * NULL); other float32 is converted into *storage (malloc'd, also *samples). Floats are checked
 * finite. */
static dpt_status st_samples(const dpt_safetensors *st, const char *path, const dpt_st_info *x,
                             size_t dim, void **storage, const void **samples) {
  *storage = NULL;
  *samples = x->data;
  if (strcmp(x->dtype, "U8") == 0) return DPT_OK;
  if (st_f32_in_place(x->data)) return st_check_finite(path, x->data, x->count, dim);
  float *v = malloc(x->nbytes ? x->nbytes : 1);
  if (!v)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory for tensor 'x' (%zu bytes)",
                         path, x->nbytes);
  dpt_status s = dpt_safetensors_read_f32(st, "x", v, x->count);
  if (s == DPT_OK) s = st_check_finite(path, v, x->count, dim);
  if (s != DPT_OK) {
    free(v);
    return s;
  }
  *storage = v;
  *samples = v;
  return DPT_OK;
}

/* The data set of file st (its x and y checked), holding the file open while its samples lie
 * in the mapping; st is closed when it fails or is no longer needed. */
static dpt_status st_dataset(dpt_safetensors *st, const char *path, int num_classes,
                             dpt_dataset **out) {
  dpt_st_info x;
  size_t dims[4];
  int32_t *labels = NULL;
  void *storage = NULL;
  const void *samples = NULL;
  dpt_status s = dpt_safetensors_find(st, "x", &x);
  if (s == DPT_OK) s = st_x_shape(path, &x, dims);
  const size_t dim = s == DPT_OK ? dims[1] * dims[2] * dims[3] : 0;
  if (s == DPT_OK) s = st_labels(st, path, dims[0], &num_classes, &labels);
  if (s == DPT_OK) s = st_samples(st, path, &x, dim, &storage, &samples);
  if (s != DPT_OK) {
    free(labels);
    dpt_safetensors_close(st);
    return s;
  }
  const int u8 = strcmp(x.dtype, "U8") == 0;
  s = dpt_dataset_adopt_shaped(storage, u8 ? samples : NULL, u8 ? NULL : samples, labels, dims[0],
                               dims[1], dims[2], dims[3], num_classes, out);
  if (s != DPT_OK || storage) {
    dpt_safetensors_close(st);
    return s;
  }
  (*out)->file = st;
  return DPT_OK;
}

dpt_status dpt_dataset_load_safetensors(const char *path, int num_classes, dpt_dataset **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dataset_load_safetensors: out is NULL");
  *out = NULL;
  if (!path) return dpt_set_error(DPT_ERR_INVALID_ARG, "dataset_load_safetensors: path is NULL");
  if (num_classes < 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "dataset_load_safetensors: num_classes %d must be >= 0 (0: inferred)",
                         num_classes);
  dpt_safetensors *st = NULL;
  DPT_TRY(dpt_safetensors_open(path, &st));
  return st_dataset(st, path, num_classes, out);
}
