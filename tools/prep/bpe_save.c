/* A BPE vocabulary written as the JSON file dpt_bpe_load reads (docs/text.md: format
 * "dptrain-bpe", version 1, the special tokens, the merges in order). */
#include <stdio.h>

#include "base/error.h"
#include "base/file.h"
#include "tools/prep/vocab.h"

#define FORMAT_NAME    "dptrain-bpe"
#define FORMAT_VERSION 1

static int write_vocab(FILE *f, const void *ctx) {
  const dpt_bpe *b = ctx;
  const size_t vocab = dpt_bpe_vocab_size(b), merges = vocab - DPT_TOKEN_FIRST_MERGE;
  int ok = fprintf(f,
                   "{\n  \"format\": \"" FORMAT_NAME "\",\n  \"version\": %d,\n"
                   "  \"vocab_size\": %zu,\n  \"special_tokens\": {",
                   FORMAT_VERSION, vocab) > 0;
  for (int i = 0; i < DPT_TOKEN_BYTE0; i++)
    ok = ok && fprintf(f, "%s\"%s\": %d", i ? ", " : "", dpt_text_special_name(i), i) > 0;
  ok = ok && fprintf(f,
                     "},\n  \"byte_offset\": %d,\n  \"max_word_bytes\": %d,\n"
                     "  \"merges\": [%s",
                     DPT_TOKEN_BYTE0, DPT_BPE_MAX_WORD, merges ? "\n" : "") > 0;
  for (size_t r = 0; ok && r < merges; r++) {
    int32_t left = 0, right = 0;
    ok = dpt_bpe_merge(b, r, &left, &right) == DPT_OK &&
         fprintf(f, "    [%d, %d]%s\n", (int)left, (int)right, r + 1 < merges ? "," : "") > 0;
  }
  return ok && fprintf(f, "%s]\n}\n", merges ? "  " : "") > 0;
}

dpt_status dpt_bpe_save(const dpt_bpe *bpe, const char *path) {
  if (!bpe || !path)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "bpe_save: %s is NULL", !bpe ? "bpe" : "path");
  /* Flushed to the disk, then renamed over path: never a half-written vocabulary. */
  return dpt_write_file_atomic(path, "", 1, write_vocab, bpe);
}
