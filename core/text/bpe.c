/* The byte-level BPE tokenizer: the pre-tokenizer, the vocabulary built from merges, encoding
 * (merges by rank, per word, with a cache of words seen) and decoding. Training is in
 * bpe_train.c, the vocabulary file in bpe_json.c; the vocabulary's fingerprint. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/text/bpe_impl.h"
#include "dptrain/fingerprint.h"

/* ASCII letters and digits, and every byte of a multibyte UTF-8 sequence (or stray high byte). */
static int word_byte(uint8_t b) {
  return (b >= '0' && b <= '9') || (b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z') || b >= 0x80;
}

size_t dpt_bpe_word_len(const uint8_t *t, size_t n) {
  if (!t || n == 0) return 0;
  const size_t max = n < DPT_BPE_MAX_WORD ? n : DPT_BPE_MAX_WORD;
  size_t i = 0;
  if (word_byte(t[0]) || (t[0] == ' ' && n > 1 && word_byte(t[1]))) {
    i = 1; /* the word's first byte, or the space before it */
    while (i < max && word_byte(t[i]))
      i++;
    return i;
  }
  if (t[0] != ' ') return 1;
  while (i < n && t[i] == ' ')
    i++;
  /* A word after the run takes the run's last space. */
  if (i < n && i > 1 && word_byte(t[i])) i--;
  return i < max ? i : max;
}

const char *dpt_text_special_name(int32_t id) {
  static const char *const names[] = {"[PAD]", "[CLS]", "[SEP]", "[MASK]"};
  return id >= 0 && id < DPT_TOKEN_BYTE0 ? names[id] : NULL;
}

void dpt_bpe_destroy(dpt_bpe *bpe) {
  if (!bpe) return;
  free(bpe->merges);
  free(bpe->tok_off);
  free(bpe->tok_len);
  free(bpe->tok_bytes);
  dpt_u64_map_free(&bpe->ranks);
  dpt_str_map_free(&bpe->cache);
  free(bpe->cache_ids);
  free(bpe);
}

/* Merge r's problem, if any: its tokens must be earlier non-special ones, the pair new, the
 * joined token no longer than a word. */
static dpt_status check_merge(const dpt_bpe *b, size_t r, const char *origin) {
  const int32_t l = b->merges[2 * r], rt = b->merges[2 * r + 1];
  const int64_t id = DPT_TOKEN_FIRST_MERGE + (int64_t)r;
  for (int k = 0; k < 2; k++) {
    const int32_t t = k ? rt : l;
    if (t < DPT_TOKEN_BYTE0 || t >= id)
      return dpt_set_error(DPT_ERR_BAD_FORMAT,
                           "%s: merge %zu: token %d is not a byte or an earlier merge (ids %d to "
                           "%lld)",
                           origin, r, (int)t, DPT_TOKEN_BYTE0, (long long)id - 1);
  }
  if (dpt_u64_map_get(&b->ranks, dpt_bpe_pair_key(l, rt)) != DPT_MAP_NONE)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: merge %zu: the pair [%d, %d] is merged earlier",
                         origin, r, (int)l, (int)rt);
  if ((size_t)b->tok_len[l] + b->tok_len[rt] > DPT_BPE_MAX_WORD)
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: merge %zu: a token of %d bytes, longer than a word (%d bytes)",
                         origin, r, b->tok_len[l] + b->tok_len[rt], DPT_BPE_MAX_WORD);
  return DPT_OK;
}

/* The tokens' bytes: the 256 bytes, then each merge its two tokens' bytes joined. */
static dpt_status build_tokens(dpt_bpe *b, const char *origin) {
  b->tok_off = calloc(b->vocab, sizeof *b->tok_off);
  b->tok_len = calloc(b->vocab, 1);
  b->tok_bytes = malloc(256 + (b->vocab - DPT_TOKEN_FIRST_MERGE) * DPT_BPE_MAX_WORD);
  if (!b->tok_off || !b->tok_len || !b->tok_bytes)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu tokens", origin,
                         b->vocab);
  for (int v = 0; v < 256; v++) {
    b->tok_off[DPT_TOKEN_BYTE0 + v] = (size_t)v;
    b->tok_len[DPT_TOKEN_BYTE0 + v] = 1;
    b->tok_bytes[v] = (uint8_t)v;
  }
  size_t used = 256;
  for (size_t r = 0; r + DPT_TOKEN_FIRST_MERGE < b->vocab; r++) {
    DPT_TRY(check_merge(b, r, origin));
    const int32_t l = b->merges[2 * r], rt = b->merges[2 * r + 1];
    const size_t id = DPT_TOKEN_FIRST_MERGE + r;
    b->tok_off[id] = used;
    b->tok_len[id] = (uint8_t)(b->tok_len[l] + b->tok_len[rt]);
    memcpy(b->tok_bytes + used, b->tok_bytes + b->tok_off[l], b->tok_len[l]);
    memcpy(b->tok_bytes + used + b->tok_len[l], b->tok_bytes + b->tok_off[rt], b->tok_len[rt]);
    used += b->tok_len[id];
    DPT_TRY(dpt_u64_map_put(&b->ranks, dpt_bpe_pair_key(l, rt), (uint32_t)r));
  }
  return DPT_OK;
}

dpt_status dpt_bpe_adopt_merges(int32_t *merges, size_t count, const char *origin, dpt_bpe **out) {
  *out = NULL;
  dpt_bpe *b = calloc(1, sizeof *b);
  if (!b) {
    free(merges);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory", origin);
  }
  b->merges = merges;
  b->vocab = DPT_TOKEN_FIRST_MERGE + count;
  const dpt_status st = build_tokens(b, origin);
  if (st != DPT_OK) {
    dpt_bpe_destroy(b);
    return st;
  }
  *out = b;
  return DPT_OK;
}

dpt_status dpt_bpe_from_merges(const int32_t *merges, size_t count, const char *origin,
                               dpt_bpe **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "bpe_from_merges: out is NULL");
  *out = NULL;
  if (!merges && count)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "bpe_from_merges: merges is NULL");
  if (count > DPT_BPE_MAX_VOCAB - DPT_TOKEN_FIRST_MERGE)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "bpe_from_merges: %zu merges, at most %d", count,
                         DPT_BPE_MAX_VOCAB - DPT_TOKEN_FIRST_MERGE);
  int32_t *own = malloc((2 * count + 1) * sizeof *own);
  if (!own) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "bpe_from_merges: out of memory");
  if (count) memcpy(own, merges, 2 * count * sizeof *own);
  return dpt_bpe_adopt_merges(own, count, origin ? origin : "merges", out);
}

size_t dpt_bpe_vocab_size(const dpt_bpe *bpe) {
  return bpe ? bpe->vocab : 0;
}

dpt_status dpt_bpe_merge(const dpt_bpe *bpe, size_t r, int32_t *left, int32_t *right) {
  if (!bpe || !left || !right)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "bpe_merge: %s is NULL",
                         !bpe    ? "bpe"
                         : !left ? "left"
                                 : "right");
  if (r >= bpe->vocab - DPT_TOKEN_FIRST_MERGE)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "bpe_merge: merge %zu is past the %zu merges", r,
                         bpe->vocab - DPT_TOKEN_FIRST_MERGE);
  *left = bpe->merges[2 * r];
  *right = bpe->merges[2 * r + 1];
  return DPT_OK;
}

dpt_status dpt_bpe_token_bytes(const dpt_bpe *bpe, int32_t id, const uint8_t **bytes, size_t *len) {
  if (!bpe || !bytes || !len)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "bpe_token_bytes: %s is NULL",
                         !bpe     ? "bpe"
                         : !bytes ? "bytes"
                                  : "len");
  if (id < 0 || (size_t)id >= bpe->vocab)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "bpe_token_bytes: id %d is outside [0, %zu)", (int)id,
                         bpe->vocab);
  *bytes = bpe->tok_bytes + bpe->tok_off[id];
  *len = bpe->tok_len[id];
  return DPT_OK;
}

/* One word's tokens into out[n]: its bytes, then, while any adjacent pair is a merge, every
 * occurrence (left to right) of the pair of lowest rank joined. Returns the token count. */
static size_t encode_word(const dpt_bpe *b, const uint8_t *w, size_t n, int32_t *out) {
  for (size_t i = 0; i < n; i++)
    out[i] = DPT_TOKEN_BYTE0 + w[i];
  for (;;) {
    uint32_t best = DPT_MAP_NONE;
    for (size_t i = 0; i + 1 < n; i++) {
      const uint32_t r = dpt_u64_map_get(&b->ranks, dpt_bpe_pair_key(out[i], out[i + 1]));
      if (r < best) best = r;
    }
    if (best == DPT_MAP_NONE) return n;
    const int32_t l = b->merges[2 * best], rt = b->merges[2 * best + 1];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
      if (i + 1 < n && out[i] == l && out[i + 1] == rt) {
        out[k++] = (int32_t)(DPT_TOKEN_FIRST_MERGE + best);
        i++;
      } else {
        out[k++] = out[i];
      }
    }
    n = k;
  }
}

/* Keeps a word's tokens in the cache (best effort: a full cache or no memory skips it). */
static void cache_word(dpt_bpe *b, const uint8_t *w, size_t n, const int32_t *ids, size_t count) {
  if (b->cache.count >= DPT_BPE_CACHE_WORDS) return;
  if (b->cache_len + count + 1 > b->cache_cap) {
    const size_t cap = b->cache_cap ? 2 * b->cache_cap : 65536;
    int32_t *p = realloc(b->cache_ids, cap * sizeof *p);
    if (!p) return;
    b->cache_ids = p;
    b->cache_cap = cap;
  }
  if (dpt_str_map_put(&b->cache, w, n, (uint32_t)b->cache_len) != DPT_OK) return;
  b->cache_ids[b->cache_len] = (int32_t)count;
  memcpy(b->cache_ids + b->cache_len + 1, ids, count * sizeof *ids);
  b->cache_len += count + 1;
}

dpt_status dpt_bpe_encode(dpt_bpe *bpe, const void *text, size_t len, int32_t *ids, size_t *count) {
  if (!bpe || !count || (len && (!text || !ids)))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "bpe_encode: %s is NULL",
                         !bpe     ? "bpe"
                         : !count ? "count"
                         : !text  ? "text"
                                  : "ids");
  const uint8_t *t = text;
  size_t k = 0;
  for (size_t i = 0; i < len;) {
    const size_t n = dpt_bpe_word_len(t + i, len - i);
    const uint32_t at = dpt_str_map_get(&bpe->cache, t + i, n);
    if (at != DPT_MAP_NONE) {
      const size_t c = (size_t)bpe->cache_ids[at];
      memcpy(ids + k, bpe->cache_ids + at + 1, c * sizeof *ids);
      k += c;
    } else {
      const size_t c = encode_word(bpe, t + i, n, ids + k);
      cache_word(bpe, t + i, n, ids + k, c);
      k += c;
    }
    i += n;
  }
  *count = k;
  return DPT_OK;
}

dpt_status dpt_bpe_decode(const dpt_bpe *bpe, const int32_t *ids, size_t count, uint8_t *out,
                          size_t cap, size_t *len) {
  if (!bpe || !len || (count && !ids))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "bpe_decode: %s is NULL",
                         !bpe   ? "bpe"
                         : !len ? "len"
                                : "ids");
  size_t need = 0;
  for (size_t i = 0; i < count; i++) {
    if (ids[i] < 0 || (size_t)ids[i] >= bpe->vocab)
      return dpt_set_error(DPT_ERR_INVALID_ARG, "bpe_decode: ids[%zu] = %d is outside [0, %zu)", i,
                           (int)ids[i], bpe->vocab);
    need += bpe->tok_len[ids[i]];
  }
  *len = need;
  if (!out) return DPT_OK;
  if (need > cap)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "bpe_decode: %zu bytes do not fit in %zu", need, cap);
  size_t k = 0;
  for (size_t i = 0; i < count; i++) {
    memcpy(out + k, bpe->tok_bytes + bpe->tok_off[ids[i]], bpe->tok_len[ids[i]]);
    k += bpe->tok_len[ids[i]];
  }
  return DPT_OK;
}

/* ---- the vocabulary's fingerprint ---------------------------------------------------------- */

uint64_t dpt_bpe_fingerprint(const dpt_bpe *bpe) {
  if (!bpe) return 0;
  const size_t vocab = dpt_bpe_vocab_size(bpe);
  const size_t merges = vocab > DPT_TOKEN_FIRST_MERGE ? vocab - DPT_TOKEN_FIRST_MERGE : 0;
  int32_t *m = malloc((2 * merges + 1) * sizeof *m);
  if (!m) return 0;
  m[0] = (int32_t)vocab;
  for (size_t r = 0; r < merges; r++)
    (void)dpt_bpe_merge(bpe, r, &m[1 + 2 * r], &m[2 + 2 * r]);
  /* Little-endian bytes of the words, so the value is the same on every host. */
  uint8_t *bytes = (uint8_t *)m;
  for (size_t i = 0; i < 2 * merges + 1; i++) {
    const uint32_t v = (uint32_t)m[i];
    bytes[4 * i] = (uint8_t)v;
    bytes[4 * i + 1] = (uint8_t)(v >> 8);
    bytes[4 * i + 2] = (uint8_t)(v >> 16);
    bytes[4 * i + 3] = (uint8_t)(v >> 24);
  }
  const uint64_t fp = dpt_fingerprint(m, (2 * merges + 1) * sizeof *m);
  free(m);
  return fp;
}
