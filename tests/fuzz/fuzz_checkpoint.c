/* Fuzz target: checkpoint files (core/io/checkpoint.c): the input is verified as a checkpoint
 * file (a safetensors file with progress and CRC metadata, through a memfd) and parsed as the
 * progress JSON alone (from memory). Accepted when either accepts it. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/io/checkpoint.h"
#include "dptrain/checkpoint.h"
#include "tests/fuzz/fuzz.h"

int dpt_fuzz_one(const uint8_t *data, size_t size) {
  char path[64];
  const int fd = dpt_fuzz_memfd(data, size, path);
  dpt_checkpoint_progress p;
  const dpt_status s = dpt_checkpoint_verify(path, &p);
  close(fd);
  int accepted = s == DPT_OK;
  if (!accepted) dpt_fuzz_rejected(s);

  char *text = malloc(size + 1);
  dpt_fuzz_check(text != NULL, "out of memory");
  memcpy(text, data, size);
  text[size] = 0;
  const dpt_status j = dpt_ckpt_progress_from_json(text, &p);
  free(text);
  if (j != DPT_OK) {
    dpt_fuzz_rejected(j);
    return accepted;
  }
  /* What was read writes back and reads again to the same progress. */
  char *again = NULL;
  dpt_fuzz_check(dpt_ckpt_progress_to_json(&p, &again) == DPT_OK, "progress_to_json failed");
  dpt_checkpoint_progress q;
  dpt_fuzz_check(dpt_ckpt_progress_from_json(again, &q) == DPT_OK, "own progress JSON refused");
  dpt_fuzz_check(!memcmp(&p, &q, sizeof p), "progress changed through its JSON");
  free(again);
  return 1;
}
