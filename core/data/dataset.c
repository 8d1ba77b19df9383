/* The in-memory dataset: uint8 or float32 samples and int32 labels, converted to float (and
 * transformed: normalized, cropped, flipped) per gather. */
#include "core/data/dataset_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/size.h"
#include "base/rng.h"
#include "dptrain/fingerprint.h"
#include "dptrain/train.h"

dpt_status dpt_dataset_adopt_shaped(void *storage, const uint8_t *pixels, const float *values,
                                    int32_t *labels, size_t count, size_t channels, size_t rows,
                                    size_t cols, int num_classes, dpt_dataset **out) {
  *out = NULL;
  dpt_dataset *ds = calloc(1, sizeof *ds);
  if (!ds) {
    free(storage);
    free(labels);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dataset: out of memory");
  }
  ds->storage = storage;
  ds->pixels = pixels;
  ds->values = pixels ? NULL : values;
  ds->labels = labels;
  ds->count = count;
  ds->channels = channels;
  ds->rows = rows;
  ds->cols = cols;
  ds->dim = channels * rows * cols;
  ds->num_classes = num_classes;
  ds->labels_per_sample = 1;
  const uint64_t data = pixels ? dpt_fingerprint(pixels, count * ds->dim)
                               : dpt_fingerprint(values, count * ds->dim * sizeof *values);
  const uint64_t label_fp = dpt_fingerprint(labels, count * sizeof *labels);
  if (pixels && channels == 1) {
    /* One channel of uint8 (every IDX set): the pixels' and labels' fingerprints folded with
     * the shape, as before channels existed. */
    const uint64_t parts[6] = {data,           label_fp,       (uint64_t)count,
                               (uint64_t)rows, (uint64_t)cols, (uint64_t)num_classes};
    ds->fingerprint = dpt_fingerprint(parts, sizeof parts);
  } else {
    /* The channels and the storage (uint8 or float32) too. */
    const uint64_t parts[8] = {data,
                               label_fp,
                               (uint64_t)count,
                               (uint64_t)rows,
                               (uint64_t)cols,
                               (uint64_t)num_classes,
                               (uint64_t)channels,
                               pixels ? 1u : 4u};
    ds->fingerprint = dpt_fingerprint(parts, sizeof parts);
  }
  *out = ds;
  return DPT_OK;
}

dpt_status dpt_dataset_adopt(void *storage, const uint8_t *pixels, int32_t *labels, size_t count,
                             size_t rows, size_t cols, int num_classes, dpt_dataset **out) {
  return dpt_dataset_adopt_shaped(storage, pixels, NULL, labels, count, 1, rows, cols, num_classes,
                                  out);
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
  dpt_safetensors_close(ds->file);
  free(ds->labels);
  free(ds);
}

size_t dpt_dataset_count(const dpt_dataset *ds) {
  return ds ? ds->count : 0;
}

size_t dpt_dataset_dim(const dpt_dataset *ds) {
  return ds ? ds->dim : 0;
}

size_t dpt_dataset_labels_per_sample(const dpt_dataset *ds) {
  return ds ? ds->labels_per_sample : 0;
}

size_t dpt_dataset_channels(const dpt_dataset *ds) {
  return ds ? ds->channels : 0;
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

/* Checks a gather's arguments: every index before anything is written. */
static dpt_status check_gather(const dpt_dataset *ds, const uint64_t *indices, size_t count,
                               const float *x) {
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
  return DPT_OK;
}

/* The 256 possible pixel values, divided once (a division per pixel costs more than the rest). */
static void scale_table(float scaled[256]) {
  for (int v = 0; v < 256; v++)
    scaled[v] = (float)v / 255.0f;
}

dpt_status dpt_dataset_gather(const dpt_dataset *ds, const uint64_t *indices, size_t count,
                              float *x, int32_t *labels) {
  if (!ds) return dpt_set_error(DPT_ERR_INVALID_ARG, "dataset_gather: dataset is NULL");
  if (ds->text) return dpt_dataset_text_gather(ds, indices, count, 0, x, labels);
  if (count == 0) return DPT_OK;
  DPT_TRY(check_gather(ds, indices, count, x));
  float scaled[256];
  scale_table(scaled);
  for (size_t i = 0; i < count; i++) {
    const size_t s = (size_t)indices[i];
    if (x && ds->pixels) {
      const uint8_t *src = ds->pixels + s * ds->dim;
      float *dst = x + i * ds->dim;
      for (size_t j = 0; j < ds->dim; j++)
        dst[j] = scaled[src[j]];
    } else if (x) {
      memcpy(x + i * ds->dim, ds->values + s * ds->dim, ds->dim * sizeof *x);
    }
    if (labels) labels[i] = ds->labels[s];
  }
  return DPT_OK;
}

/* ---- transforms ---------------------------------------------------------------------------- */

dpt_status dpt_data_transform_check(const dpt_data_transform *t, const dpt_dataset *ds) {
  if (!t) return DPT_OK;
  if (!ds) return dpt_set_error(DPT_ERR_INVALID_ARG, "data transform: dataset is NULL");
  if (ds->text && (t->mean || t->std || t->crop_pad || t->hflip))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "data transform: a text dataset takes no normalization or augmentation "
                         "(--mean, --std, --random-crop, --hflip are for images)");
  if (!t->mean != !t->std)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "data transform: the normalization needs both mean and std (%s is NULL)",
                         t->mean ? "std" : "mean");
  if (t->mean) {
    if (t->channels != 1 && t->channels != ds->channels)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "data transform: %zu mean/std values for data of %zu channel%s (give "
                           "one per channel, or one for all)",
                           t->channels, ds->channels, ds->channels == 1 ? "" : "s");
    for (size_t c = 0; c < t->channels; c++) {
      if (!isfinite(t->mean[c]))
        return dpt_set_error(DPT_ERR_INVALID_ARG, "data transform: mean[%zu] = %g is not finite", c,
                             (double)t->mean[c]);
      if (!isfinite(t->std[c]) || !(t->std[c] > 0.0f))
        return dpt_set_error(DPT_ERR_INVALID_ARG,
                             "data transform: std[%zu] = %g must be positive and finite", c,
                             (double)t->std[c]);
    }
  }
  if (t->crop_pad > DPT_DATA_MAX_CROP_PAD)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "data transform: crop padding %zu is above %d",
                         t->crop_pad, DPT_DATA_MAX_CROP_PAD);
  return DPT_OK;
}

/* A 64-bit mix (splitmix64's finalizer): distinct inputs give distinct outputs. */
static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Sample s's augmentation in epoch `epoch`: its crop offsets in [0, 2P] and its flip, drawn
 * from (seed, epoch, s) alone, in this order (dy, dx when cropping, then the flip). */
static void draw_augmentation(const dpt_data_transform *t, uint64_t epoch, uint64_t s, size_t *dy,
                              size_t *dx, int *flip) {
  *dy = *dx = t->crop_pad;
  *flip = 0;
  if (t->crop_pad == 0 && !t->hflip) return;
  dpt_rng rng;
  dpt_rng_seed(&rng, t->seed, mix64(mix64(epoch + 0x61756720ull) + s));
  if (t->crop_pad > 0) {
    *dy = (size_t)dpt_rng_below(&rng, 2 * (uint64_t)t->crop_pad + 1);
    *dx = (size_t)dpt_rng_below(&rng, 2 * (uint64_t)t->crop_pad + 1);
  }
  if (t->hflip) *flip = (int)(dpt_rng_next(&rng) >> 63);
}

/* Sample s transformed into dst[dim]: crop (offsets dy, dx into the image padded with P zeros
 * on every side), flip, then normalize. */
static void transform_sample(const dpt_dataset *ds, const dpt_data_transform *t,
                             const float scaled[256], size_t s, size_t dy, size_t dx, int flip,
                             float *dst) {
  const size_t H = ds->rows, W = ds->cols, P = t->crop_pad;
  for (size_t c = 0; c < ds->channels; c++) {
    const size_t base = s * ds->dim + c * H * W;
    for (size_t y = 0; y < H; y++) {
      const size_t sy = y + dy; /* row in the padded image; the source row is sy - P */
      for (size_t x = 0; x < W; x++) {
        const size_t sx = (flip ? W - 1 - x : x) + dx;
        float v = 0.0f;
        if (sy >= P && sy - P < H && sx >= P && sx - P < W) {
          const size_t at = base + (sy - P) * W + (sx - P);
          v = ds->pixels ? scaled[ds->pixels[at]] : ds->values[at];
        }
        dst[(c * H + y) * W + x] = v;
      }
    }
    if (t->mean) {
      const size_t k = t->channels == 1 ? 0 : c;
      const float m = t->mean[k], sd = t->std[k];
      float *p = dst + c * H * W;
      for (size_t j = 0; j < H * W; j++)
        p[j] = (p[j] - m) / sd;
    }
  }
}

dpt_status dpt_dataset_gather_transformed(const dpt_dataset *ds, const uint64_t *indices,
                                          size_t count, const dpt_data_transform *t, uint64_t epoch,
                                          float *x, int32_t *labels) {
  if (!t) return dpt_dataset_gather(ds, indices, count, x, labels);
  if (!ds) return dpt_set_error(DPT_ERR_INVALID_ARG, "dataset_gather: dataset is NULL");
  DPT_TRY(dpt_data_transform_check(t, ds));
  if (ds->text) return dpt_dataset_text_gather(ds, indices, count, epoch, x, labels);
  if (count == 0) return DPT_OK;
  DPT_TRY(check_gather(ds, indices, count, x));
  if (labels)
    for (size_t i = 0; i < count; i++)
      labels[i] = ds->labels[indices[i]];
  if (!x) return DPT_OK;
  float scaled[256];
  scale_table(scaled);
  for (size_t i = 0; i < count; i++) {
    size_t dy, dx;
    int flip;
    draw_augmentation(t, epoch, indices[i], &dy, &dx, &flip);
    transform_sample(ds, t, scaled, (size_t)indices[i], dy, dx, flip, x + i * ds->dim);
  }
  return DPT_OK;
}
