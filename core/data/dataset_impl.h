/* Internal: the body of dpt_dataset, shared by the dataset object (core/data/dataset.c) and the
 * readers that build one (core/data/idx.c). */
#ifndef DPTRAIN_CORE_DATASET_IMPL_H
#define DPTRAIN_CORE_DATASET_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/data.h"
#include "dptrain/safetensors.h"
#include "dptrain/text.h"

struct dpt_dataset {
  void *storage;         /* owned allocation that holds the samples (may hold more around them) */
  dpt_safetensors *file; /* or the open file whose read-only mapping holds them (storage NULL);
                            closed with the dataset */
  const uint8_t *pixels; /* [count, channels, rows, cols] uint8 row-major inside storage or file,
                            or NULL when the samples are floats */
  const float *values;   /* [count, channels, rows, cols] float32 inside storage or file, or NULL */
  int32_t *labels;       /* [count] owned, each in [0, num_classes) */
  size_t count;
  size_t channels;
  size_t rows;
  size_t cols;
  size_t dim; /* channels * rows * cols, checked not to overflow */
  int num_classes;
  uint64_t fingerprint; /* of the shape, pixels and labels, taken once when built */
  /* A text dataset (dpt_dataset_from_text; storage, pixels, values and labels NULL): the
   * sequences of one split (borrowed), masked as they are gathered. */
  const dpt_text_sequences *text;
  dpt_text_split split;
  uint64_t mask_seed;
  size_t labels_per_sample; /* 1, or seq_len for a text dataset */
};

/* The text dataset's gather (core/text/text_dataset.c): sequences indices[0..count), masked for
 * `epoch` (the validation split always for epoch 0), their ids as int32 bit patterns in x
 * ([count, seq_len] slots, or NULL) and their labels ([count, seq_len], or NULL). */
dpt_status dpt_dataset_text_gather(const dpt_dataset *ds, const uint64_t *indices, size_t count,
                                   uint64_t epoch, float *x, int32_t *labels);

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
