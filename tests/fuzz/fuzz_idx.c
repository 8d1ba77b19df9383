/* Fuzz target: IDX files (core/data/idx.c), plain or gzip, through two memfds. The input's
 * first two bytes (big-endian) are the length of the images file, which follows; the labels
 * file is the rest. An accepted pair holds as many labels as images, each below 10 classes. */
#include <unistd.h>

#include "dptrain/data.h"
#include "tests/fuzz/fuzz.h"

#define CLASSES 10

int dpt_fuzz_one(const uint8_t *data, size_t size) {
  size_t split = size < 2 ? 0 : ((size_t)data[0] << 8 | data[1]);
  const uint8_t *images = data + (size < 2 ? size : 2);
  const size_t rest = size < 2 ? 0 : size - 2;
  if (split > rest) split = rest;
  char ipath[64], lpath[64];
  const int ifd = dpt_fuzz_memfd(images, split, ipath);
  const int lfd = dpt_fuzz_memfd(images + split, rest - split, lpath);
  dpt_dataset *ds = NULL;
  const dpt_status s = dpt_dataset_load_idx(ipath, lpath, CLASSES, &ds);
  close(ifd);
  close(lfd);
  if (s != DPT_OK) return dpt_fuzz_rejected(s);
  dpt_fuzz_check(dpt_dataset_count(ds) * dpt_dataset_dim(ds) <= split * 1032u + 1032u,
                 "more pixels than the images file can hold (gzip at most 1032:1)");
  dpt_dataset_destroy(ds);
  return 1;
}
