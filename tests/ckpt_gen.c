/* Writes a checkpoint for the CLI test from a weights file (dptrain train --save-weights), until
 * dptrain train writes its own: the weights' tensors and metadata, an SGD momentum buffer per
 * tensor, made-up terms and progress at STEP, through the library's checkpoint writer:
 *   ckpt_gen WEIGHTS DIR STEP KEEP */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/io/checkpoint.h"

static int fail(const char *what) {
  fprintf(stderr, "ckpt_gen: %s: %s\n", what, dpt_last_error());
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: ckpt_gen WEIGHTS DIR STEP KEEP\n");
    return 2;
  }
  dpt_safetensors *w = NULL;
  if (dpt_safetensors_open(argv[1], &w) != DPT_OK) return fail("open");
  const size_t n = dpt_safetensors_count(w), nm = dpt_safetensors_metadata_count(w);
  dpt_st_tensor *ts = calloc(2 * n + 1, sizeof *ts);
  const char **kv = calloc(2 * nm + 3, sizeof *kv);
  char(*names)[160] = calloc(n + 1, sizeof *names);
  if (!ts || !kv || !names) return 1;
  for (size_t i = 0; i < n; ++i) {
    dpt_st_info info;
    if (dpt_safetensors_info(w, i, &info) != DPT_OK) return fail("info");
    const int f32 = !strcmp(info.dtype, "F32");
    ts[i].name = info.name;
    ts[i].data = f32 ? (const float *)info.data : NULL; /* our writer aligns the data */
    ts[i].dtype = info.dtype;
    ts[i].bytes = f32 ? NULL : info.data;
    ts[i].ndim = info.ndim;
    memcpy(ts[i].shape, info.shape, sizeof ts[i].shape);
    snprintf(names[i], sizeof names[i], "optimizer.momentum_buffer.%s", info.name);
    ts[n + i] = ts[i];
    ts[n + i].name = names[i];
  }
  for (size_t i = 0; i < nm; ++i)
    if (dpt_safetensors_metadata_at(w, i, &kv[2 * i], &kv[2 * i + 1]) != DPT_OK)
      return fail("metadata");
  kv[2 * nm] = DPT_CKPT_TERMS_KEY;
  kv[2 * nm + 1] = "{\"optimizer\":\"sgd\",\"lr\":0.05,\"global_batch\":50}";
  const dpt_checkpoint_progress p = {.step = atoll(argv[3]),
                                     .epoch = 1,
                                     .batch = 2,
                                     .trained_samples = 350,
                                     .epoch_loss_sum = 0.1 + 0.2,
                                     .epoch_samples = 100,
                                     .lr_scale = 0.5,
                                     .world_size = 2,
                                     .seed = 3,
                                     .state_hash = 0xfedcba9876543210ull};
  char path[4096];
  if (dpt_ckpt_write(argv[2], &p, ts, 2 * n, kv, atoi(argv[4]), path, sizeof path) != DPT_OK)
    return fail("write");
  printf("%s\n", path);
  free(names);
  free(kv);
  free(ts);
  dpt_safetensors_close(w);
  return 0;
}
