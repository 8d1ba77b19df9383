/* Internal: the body of dpt_dataset, shared by the dataset object (core/dataset.c) and the
 * readers that build one (core/idx.c). */
#ifndef DPTRAIN_CORE_DATASET_IMPL_H
#define DPTRAIN_CORE_DATASET_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/data.h"

struct dpt_dataset {
  void *storage;         /* owned allocation that holds the samples (may hold more around them) */
  const uint8_t *pixels; /* [count, channels, rows, cols] uint8 row-major inside storage, or NULL
                            when the samples are floats */
  const float *values;   /* [count, channels, rows, cols] float32 inside storage, or NULL */
  int32_t *labels;       /* [count] owned, each in [0, num_classes) */
  size_t count;
  size_t channels;
  size_t rows;
  size_t cols;
  size_t dim; /* channels * rows * cols, checked not to overflow */
  int num_classes;
  uint64_t fingerprint; /* of the shape, pixels and labels, taken once when built */
};

/* Takes ownership of `storage` (holding `pixels`) and `labels` (malloc'd) and returns a new
 * dataset of one channel in *out. On failure (out of memory) frees both and sets *out to NULL.
 * The caller has validated the sizes and labels. */
dpt_status dpt_dataset_adopt(void *storage, const uint8_t *pixels, int32_t *labels, size_t count,
                             size_t rows, size_t cols, int num_classes, dpt_dataset **out);

/* The same for `channels` channels, with the samples either uint8 (`pixels`) or float32
 * (`values`, pixels NULL), both inside storage. */
dpt_status dpt_dataset_adopt_shaped(void *storage, const uint8_t *pixels, const float *values,
                                    int32_t *labels, size_t count, size_t channels, size_t rows,
                                    size_t cols, int num_classes, dpt_dataset **out);

#endif
