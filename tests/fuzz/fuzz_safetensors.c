/* Fuzz target: safetensors files (core/io/safetensors.c), given through a memfd. An accepted
 * file must answer every query: each tensor's bytes inside the file, found by its name, read
 * into floats or integers where its dtype allows. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dptrain/safetensors.h"
#include "tests/fuzz/fuzz.h"

/* Reads tensor i through every call that takes it. */
static void walk_tensor(const dpt_safetensors *st, size_t i) {
  dpt_st_info info, found;
  dpt_fuzz_check(dpt_safetensors_info(st, i, &info) == DPT_OK, "info failed on an index < count");
  dpt_fuzz_check(info.nbytes == info.count * info.elem_size, "nbytes != count * elem_size");
  dpt_fuzz_check(dpt_safetensors_find(st, info.name, &found) == DPT_OK, "find failed");
  dpt_fuzz_check(found.data == info.data && found.nbytes == info.nbytes, "find disagrees");
  const size_t n = info.count ? info.count : 1;
  if (!strcmp(info.dtype, "F32") || !strcmp(info.dtype, "F16") || !strcmp(info.dtype, "BF16")) {
    float *f = malloc(n * sizeof *f);
    dpt_fuzz_check(f != NULL, "out of memory");
    dpt_fuzz_check(dpt_safetensors_read_f32(st, info.name, f, info.count) == DPT_OK,
                   "read_f32 failed on a float tensor");
    free(f);
  } else if (!strcmp(info.dtype, "I64") || !strcmp(info.dtype, "I32")) {
    int64_t *v = malloc(n * sizeof *v);
    dpt_fuzz_check(v != NULL, "out of memory");
    dpt_fuzz_check(dpt_safetensors_read_i64(st, info.name, v, info.count) == DPT_OK,
                   "read_i64 failed on an integer tensor");
    free(v);
  }
  /* A wrong element count is refused, never read. */
  float one;
  if (info.count != 1) dpt_fuzz_rejected(dpt_safetensors_read_f32(st, info.name, &one, 1));
}

int dpt_fuzz_one(const uint8_t *data, size_t size) {
  char path[64];
  const int fd = dpt_fuzz_memfd(data, size, path);
  dpt_safetensors *st = NULL;
  const dpt_status s = dpt_safetensors_open(path, &st);
  close(fd);
  if (s != DPT_OK) return dpt_fuzz_rejected(s);
  for (size_t i = 0; i < dpt_safetensors_count(st); i++)
    walk_tensor(st, i);
  dpt_fuzz_rejected(dpt_safetensors_read_f32(st, "\x01no such tensor", NULL, 0));
  for (size_t k = 0; k < dpt_safetensors_metadata_count(st); k++) {
    const char *key = NULL, *value = NULL;
    dpt_fuzz_check(dpt_safetensors_metadata_at(st, k, &key, &value) == DPT_OK && key && value,
                   "metadata_at failed on an index < count");
    dpt_fuzz_check(dpt_safetensors_metadata(st, key) == value, "metadata lookup disagrees");
  }
  dpt_safetensors_close(st);
  return 1;
}
