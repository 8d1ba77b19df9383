/* The in-memory dataset: uint8 images and int32 labels, converted to float per gather. */
#include "core/dataset_impl.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/size.h"
#include "dptrain/train.h"

dpt_status dpt_dataset_adopt(void *storage, const uint8_t *pixels, int32_t *labels, size_t count,
                             size_t rows, size_t cols, int num_classes, dpt_dataset **out) {
  *out = NULL;
  dpt_dataset *ds = calloc(1, sizeof *ds);
  if (!ds) {
    free(storage);
    free(labels);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dataset: out of memory");
  }
  ds->storage = storage;
  ds->pixels = pixels;
  ds->labels = labels;
  ds->count = count;
  ds->rows = rows;
  ds->cols = cols;
  ds->dim = rows * cols;
  ds->num_classes = num_classes;
  /* The pixels' and labels' fingerprints, folded with the shape into one. */
  const uint64_t parts[6] = {dpt_fingerprint(pixels, count * ds->dim),
                             dpt_fingerprint(labels, count * sizeof *labels),
                             (uint64_t)count,
                             (uint64_t)rows,
                             (uint64_t)cols,
                             (uint64_t)num_classes};
  ds->fingerprint = dpt_fingerprint(parts, sizeof parts);
  *out = ds;
  return DPT_OK;
}

uint64_t dpt_dataset_fingerprint(const dpt_dataset *ds) {
  return ds ? ds->fingerprint : 0;
}

dpt_status dpt_dataset_from_memory(const uint8_t *pixels, const int32_t *labels, size_t count,
                                   size_t rows, size_t cols, int num_classes, dpt_dataset **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dataset_from_memory: out is NULL");
  *out = NULL;
  if (!pixels || !labels)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dataset_from_memory: %s is NULL",
                         !pixels ? "pixels" : "labels");
  if (count == 0 || rows == 0 || cols == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "dataset_from_memory: count %zu, rows %zu, cols %zu: each must be > 0",
                         count, rows, cols);
  if (num_classes < 1)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dataset_from_memory: num_classes %d must be >= 1",
                         num_classes);
  size_t dim, pixel_bytes, label_bytes;
  if (!dpt_mul_ok(rows, cols, &dim) || !dpt_mul_ok(dim, count, &pixel_bytes) ||
      !dpt_mul_ok(count, sizeof(int32_t), &label_bytes))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "dataset_from_memory: %zu images of %zux%zu overflow the address space",
                         count, rows, cols);
  for (size_t i = 0; i < count; i++) {
    if (labels[i] < 0 || labels[i] >= num_classes)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "dataset_from_memory: label %" PRId32 " at index %zu is outside [0, %d)",
                           labels[i], i, num_classes);
  }
  uint8_t *px = malloc(pixel_bytes);
  int32_t *lb = malloc(label_bytes);
  if (!px || !lb) {
    free(px);
    free(lb);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY,
                         "dataset_from_memory: out of memory for %zu images of %zux%zu", count,
                         rows, cols);
  }
  memcpy(px, pixels, pixel_bytes);
  memcpy(lb, labels, label_bytes);
  return dpt_dataset_adopt(px, px, lb, count, rows, cols, num_classes, out);
}

void dpt_dataset_destroy(dpt_dataset *ds) {
  if (!ds) return;
  free(ds->storage);
  free(ds->labels);
  free(ds);
}

size_t dpt_dataset_count(const dpt_dataset *ds) {
  return ds ? ds->count : 0;
}

size_t dpt_dataset_dim(const dpt_dataset *ds) {
  return ds ? ds->dim : 0;
}

size_t dpt_dataset_rows(const dpt_dataset *ds) {
  return ds ? ds->rows : 0;
}

size_t dpt_dataset_cols(const dpt_dataset *ds) {
  return ds ? ds->cols : 0;
}

int dpt_dataset_num_classes(const dpt_dataset *ds) {
  return ds ? ds->num_classes : 0;
}

dpt_status dpt_dataset_gather(const dpt_dataset *ds, const uint64_t *indices, size_t count,
                              float *x, int32_t *labels) {
  if (!ds) return dpt_set_error(DPT_ERR_INVALID_ARG, "dataset_gather: dataset is NULL");
  if (count == 0) return DPT_OK;
  if (!indices) return dpt_set_error(DPT_ERR_INVALID_ARG, "dataset_gather: indices is NULL");
  size_t total;
  if (x && !dpt_mul_ok(count, ds->dim, &total))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "dataset_gather: %zu samples of %zu values overflow the address space",
                         count, ds->dim);
  /* All indices first, so a bad one leaves the outputs untouched. */
  for (size_t i = 0; i < count; i++) {
    if (indices[i] >= ds->count)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "dataset_gather: indices[%zu] = %" PRIu64
                           " is out of range (dataset has %zu samples)",
                           i, indices[i], ds->count);
  }
  /* The 256 possible values, divided once (a division per pixel costs more than the rest). */
  float scaled[256];
  for (int v = 0; v < 256; v++)
    scaled[v] = (float)v / 255.0f;
  for (size_t i = 0; i < count; i++) {
    const size_t s = (size_t)indices[i];
    if (x) {
      const uint8_t *src = ds->pixels + s * ds->dim;
      float *dst = x + i * ds->dim;
      for (size_t j = 0; j < ds->dim; j++)
        dst[j] = scaled[src[j]];
    }
    if (labels) labels[i] = ds->labels[s];
  }
  return DPT_OK;
}
