/* Writes a small tensor data set for the CLI test, through the library's safetensors writer:
 *   st_dataset_gen OUT N C H W CLASSES SEED
 * x: uint8 [N, C, H, W], sample i of class i % CLASSES, each channel's pixels scattered around
 * a level that depends on the class and the channel (learnable); y: int64 [N]. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dptrain/safetensors.h"

int main(int argc, char **argv) {
  if (argc != 8) {
    fprintf(stderr, "usage: st_dataset_gen OUT N C H W CLASSES SEED\n");
    return 2;
  }
  const long n = atol(argv[2]), c = atol(argv[3]), h = atol(argv[4]), w = atol(argv[5]),
             k = atol(argv[6]);
  uint64_t state = (uint64_t)atoll(argv[7]) * 2654435761u + 1;
  if (n < 1 || c < 1 || h < 1 || w < 1 || k < 1) return 2;
  const size_t dim = (size_t)(c * h * w);
  uint8_t *x = malloc((size_t)n * dim);
  int64_t *y = malloc((size_t)n * sizeof *y);
  if (!x || !y) return 1;
  for (long i = 0; i < n; ++i) {
    y[i] = i % k;
    for (long ch = 0; ch < c; ++ch) {
      const long level = 40 + 170 * ((y[i] + ch) % k) / (k > 1 ? k - 1 : 1);
      for (long p = 0; p < h * w; ++p) {
        state = state * 6364136223846793005u + 1442695040888963407u;
        const long v = level + (long)(state >> 59) - 16; /* +-16 of noise */
        x[(size_t)i * dim + (size_t)(ch * h * w + p)] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
      }
    }
  }
  dpt_st_tensor t[2] = {{"x", NULL, 4, {n, c, h, w}, "U8", x}, {"y", NULL, 1, {n}, "I64", y}};
  const dpt_status st = dpt_safetensors_write(argv[1], t, 2, NULL);
  if (st != DPT_OK) fprintf(stderr, "st_dataset_gen: %s\n", dpt_last_error());
  free(x);
  free(y);
  return st == DPT_OK ? 0 : 1;
}
