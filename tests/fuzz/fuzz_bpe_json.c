/* Fuzz target: BPE vocabulary files (core/text/bpe_json.c), through a memfd. An accepted
 * vocabulary encodes a fixed text and decodes it back to the same bytes. */
#include <string.h>
#include <unistd.h>

#include "dptrain/text.h"
#include "tests/fuzz/fuzz.h"

static void round_trip(dpt_bpe *bpe) {
  static const char text[] = "the quick brown fox, the lazy dog\n\xff\x00 end";
  const size_t len = sizeof text - 1;
  int32_t ids[sizeof text];
  uint8_t back[sizeof text];
  size_t count = 0, got = 0;
  dpt_fuzz_check(dpt_bpe_encode(bpe, text, len, ids, &count) == DPT_OK && count <= len,
                 "encode failed");
  dpt_fuzz_check(dpt_bpe_decode(bpe, ids, count, back, sizeof back, &got) == DPT_OK,
                 "decode of its own encoding failed");
  dpt_fuzz_check(got == len && !memcmp(back, text, len), "decode(encode(text)) != text");
  const int32_t past = (int32_t)dpt_bpe_vocab_size(bpe);
  dpt_fuzz_rejected(dpt_bpe_decode(bpe, &past, 1, back, sizeof back, &got));
}

int dpt_fuzz_one(const uint8_t *data, size_t size) {
  char path[64];
  const int fd = dpt_fuzz_memfd(data, size, path);
  dpt_bpe *bpe = NULL;
  const dpt_status s = dpt_bpe_load(path, &bpe);
  close(fd);
  if (s != DPT_OK) return dpt_fuzz_rejected(s);
  round_trip(bpe);
  dpt_bpe_destroy(bpe);
  return 1;
}
