/* Internal: the tokenizer's state, shared by bpe.c (encode, decode) and bpe_json.c
 * (load). */
#ifndef DPTRAIN_CORE_BPE_IMPL_H
#define DPTRAIN_CORE_BPE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "base/text_map.h"
#include "dptrain/text.h"

/* Words the encoder caches at most; past that, words are encoded every time. */
#define DPT_BPE_CACHE_WORDS (1u << 20)

struct dpt_bpe {
  size_t vocab;       /* DPT_TOKEN_FIRST_MERGE + merges */
  int32_t *merges;    /* [2 * merges]: merge r joins merges[2r] and merges[2r + 1] */
  size_t *tok_off;    /* [vocab]: token t's bytes are tok_bytes[tok_off[t], + tok_len[t]) */
  uint8_t *tok_len;   /* [vocab]: at most DPT_BPE_MAX_WORD */
  uint8_t *tok_bytes; /* every token's bytes */
  dpt_u64_map ranks;  /* pair key (left << 32 | right) -> merge rank */
  dpt_str_map cache;  /* word -> offset into cache_ids: the count, then the ids */
  int32_t *cache_ids;
  size_t cache_len, cache_cap;
};

/* The key of the pair (left, right) in the maps. */
static inline uint64_t dpt_bpe_pair_key(int32_t left, int32_t right) {
  return (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
}

/* A tokenizer from `count` merges (taken over: freed on failure too). Each merge must join two
 * non-special tokens below its own id into a token of at most DPT_BPE_MAX_WORD bytes, and no
 * pair may repeat: DPT_ERR_BAD_FORMAT "<origin>: merge r: ..." otherwise. */
dpt_status dpt_bpe_adopt_merges(int32_t *merges, size_t count, const char *origin, dpt_bpe **out);

#endif
