/* The training tests' data: a small synthetic set of 8x8 one-channel images in 10 classes whose
 * class is decided by which pixel group is brightest, with noise, so that training makes
 * progress. Usable outside Check (the MPI modes): a failure exits. */
#ifndef DPT_TESTS_TRAIN_DATA_H
#define DPT_TESTS_TRAIN_DATA_H

#include <stdio.h>
#include <stdlib.h>

#include "dptrain/data.h"
#include "dptrain/status.h"

static inline dpt_dataset *make_data(size_t n, uint32_t seed) {
  uint8_t *px = malloc(n * 64);
  int32_t *lab = malloc(n * sizeof(int32_t));
  uint32_t s = seed;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    int cls = (int)((s >> 16) % 10);
    lab[i] = cls;
    for (int p = 0; p < 64; ++p) {
      s = s * 1664525u + 1013904223u;
      int bright = (p % 10) == cls;
      px[i * 64 + (size_t)p] = (uint8_t)((s >> 24) / 2 + (bright ? 120 : 0));
    }
  }
  dpt_dataset *ds = NULL;
  /* Also used outside Check (the MPI mode), so no ck_assert here. */
  if (dpt_dataset_from_memory(px, lab, n, 8, 8, 10, &ds) != DPT_OK) {
    fprintf(stderr, "make_data: %s\n", dpt_last_error());
    exit(1);
  }
  free(px);
  free(lab);
  return ds;
}

#endif
