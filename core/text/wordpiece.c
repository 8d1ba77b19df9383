/* The WordPiece tokenizer of BERT: a vocabulary file of one token per line (as
 * bert-base-uncased's vocab.txt), BERT's basic tokenizer (clean, CJK split, lowercase and strip
 * accents, punctuation split; google-research/bert tokenization.py) through utf8proc's Unicode
 * tables, then greedy longest-match-first pieces with "##" continuations. Rules: docs/text.md. */
#if !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* getline */
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/error.h"
#include "base/file.h"
#include "base/size.h"
#include "base/text_map.h"
#include "dptrain/fingerprint.h"
#include "dptrain/text.h"

#define WP_TAG 0x776f72642d706365ull /* "word-pce": apart from the BPE fingerprints */

struct dpt_wordpiece {
  size_t vocab;         /* tokens */
  uint8_t *pool;        /* every token's UTF-8, one after another */
  size_t *off;          /* [vocab + 1]: token t is pool[off[t], off[t + 1]) */
  size_t off_cap;       /* room in off */
  dpt_str_map ids;      /* token bytes -> id */
  int lowercase;        /* 1: lowercase and strip accents (an uncased vocabulary) */
  dpt_text_specials sp; /* the special tokens' ids */
  uint64_t fingerprint; /* of the tokens in order and lowercase */
  int32_t *cps, *word;  /* scratch: the cleaned text's code points; one word's */
  size_t cps_cap, word_cap;
  uint8_t *piece; /* scratch: "##" + a candidate piece's UTF-8 */
  size_t piece_cap;
  int32_t *out; /* the last encoding's ids */
  size_t out_len, out_cap;
};

static dpt_status oom(void) {
  return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "wordpiece: out of memory");
}

/* Room for n elements of size es in *p (capacity *cap, grown by doubling). */
static dpt_status grow(void **p, size_t *cap, size_t n, size_t es) {
  if (n <= *cap) return DPT_OK;
  size_t c = *cap ? *cap : 256, bytes;
  while (c < n)
    c *= 2;
  if (!dpt_mul_ok(c, es, &bytes)) return oom();
  void *q = realloc(*p, bytes);
  if (!q) return oom();
  *p = q;
  *cap = c;
  return DPT_OK;
}

/* ---- the basic tokenizer's character classes -------------------------------------------- */

static int is_whitespace(int32_t c) {
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return 1;
  const utf8proc_category_t k = utf8proc_category(c);
  /* Zl and Zp survive BERT's cleaning and then split words (Python's str.split). */
  return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

/* Dropped by the cleaning: NUL, U+FFFD and the C* categories other than tab and line breaks. */
static int is_dropped(int32_t c) {
  if (c == 0 || c == 0xfffd) return 1;
  if (c == '\t' || c == '\n' || c == '\r') return 0;
  const utf8proc_category_t k = utf8proc_category(c);
  return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CN ||
         k == UTF8PROC_CATEGORY_CO || k == UTF8PROC_CATEGORY_CS;
}

/* The CJK Unified Ideographs blocks BERT splits into single characters. */
static int is_cjk(int32_t c) {
  return (c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3400 && c <= 0x4dbf) ||
         (c >= 0x20000 && c <= 0x2a6df) || (c >= 0x2a700 && c <= 0x2b73f) ||
         (c >= 0x2b740 && c <= 0x2b81f) || (c >= 0x2b820 && c <= 0x2ceaf) ||
         (c >= 0xf900 && c <= 0xfaff) || (c >= 0x2f800 && c <= 0x2fa1f);
}

/* ASCII non-alphanumerics (33-47, 58-64, 91-96, 123-126) and the P* categories. */
static int is_punct(int32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
      (c >= 123 && c <= 126))
    return 1;
  const utf8proc_category_t k = utf8proc_category(c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

/* ---- the vocabulary ---------------------------------------------------------------------- */

int32_t dpt_wordpiece_id(const dpt_wordpiece *wp, const char *token) {
  if (!wp || !token) return -1;
  const uint32_t v = dpt_str_map_get(&wp->ids, (const uint8_t *)token, strlen(token));
  return v == DPT_MAP_NONE ? -1 : (int32_t)v;
}

/* An uncased vocabulary: no token outside "[...]" holds an upper- or titlecase letter. */
static int uncased(const dpt_wordpiece *wp) {
  for (size_t t = 0; t < wp->vocab; t++) {
    const uint8_t *s = wp->pool + wp->off[t];
    const size_t n = wp->off[t + 1] - wp->off[t];
    if (n >= 2 && s[0] == '[' && s[n - 1] == ']') continue;
    for (size_t i = 0; i < n;) {
      int32_t c;
      const utf8proc_ssize_t k = utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), &c);
      if (k <= 0) break;
      const utf8proc_category_t cat = utf8proc_category(c);
      if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) return 0;
      i += (size_t)k;
    }
  }
  return 1;
}

/* The special tokens by name; [PAD] must be id 0 (the model masks keys holding id 0). */
static dpt_status find_specials(dpt_wordpiece *wp, const char *origin) {
  static const char *const names[5] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  int32_t id[5];
  for (int i = 0; i < 5; i++)
    if ((id[i] = dpt_wordpiece_id(wp, names[i])) < 0)
      return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: no %s token in the vocabulary", origin,
                           names[i]);
  if (id[0] != DPT_TOKEN_PAD)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: [PAD] is token %d; dptrain needs it at %d",
                         origin, (int)id[0], DPT_TOKEN_PAD);
  wp->sp =
      (dpt_text_specials){.pad = id[0], .unk = id[1], .cls = id[2], .sep = id[3], .mask = id[4]};
  return DPT_OK;
}

/* Whether s[0, n) is UTF-8 (utf8proc's rules: no overlong forms, surrogates or code points past
 * U+10FFFF). */
static int valid_utf8(const char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    int32_t c;
    const utf8proc_ssize_t k =
        utf8proc_iterate((const uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
    if (k <= 0) return 0;
    i += (size_t)k;
  }
  return 1;
}

/* Token t = the next n bytes of s; t is the vocabulary's size so far. */
static dpt_status add_token(dpt_wordpiece *wp, size_t *pool_cap, const char *s, size_t n,
                            const char *origin) {
  const size_t t = wp->vocab;
  if (n == 0) return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: line %zu: empty token", origin, t + 1);
  if (!valid_utf8(s, n))
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: line %zu: not UTF-8", origin, t + 1);
  if (dpt_str_map_get(&wp->ids, (const uint8_t *)s, n) != DPT_MAP_NONE)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: line %zu: token \"%.*s\" repeats", origin, t + 1,
                         (int)(n < 64 ? n : 64), s);
  if (t + 1 >= DPT_BPE_MAX_VOCAB)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: more than %d tokens", origin, DPT_BPE_MAX_VOCAB);
  DPT_TRY(grow((void **)&wp->off, &wp->off_cap, t + 2, sizeof *wp->off));
  DPT_TRY(grow((void **)&wp->pool, pool_cap, wp->off[t] + n, 1));
  memcpy(wp->pool + wp->off[t], s, n);
  wp->off[t + 1] = wp->off[t] + n;
  DPT_TRY(dpt_str_map_put(&wp->ids, (const uint8_t *)s, n, (uint32_t)t));
  wp->vocab = t + 1;
  return DPT_OK;
}

/* The fingerprint, the case rule and the specials, once every token is in. */
static dpt_status finish(dpt_wordpiece *wp, const char *origin) {
  if (wp->vocab == 0) return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: no tokens", origin);
  DPT_TRY(find_specials(wp, origin));
  wp->lowercase = uncased(wp);
  const uint64_t parts[4] = {dpt_fingerprint(wp->pool, wp->off[wp->vocab]), (uint64_t)wp->vocab,
                             (uint64_t)wp->lowercase, WP_TAG};
  wp->fingerprint = dpt_fingerprint(parts, sizeof parts);
  return DPT_OK;
}

static dpt_wordpiece *wp_new(void) {
  dpt_wordpiece *wp = calloc(1, sizeof *wp);
  if (wp && !(wp->off = calloc(1, sizeof *wp->off))) {
    free(wp);
    return NULL;
  }
  if (wp) wp->off_cap = 1;
  return wp;
}

dpt_status dpt_wordpiece_from_tokens(const char *const *tokens, size_t count, const char *origin,
                                     dpt_wordpiece **out) {
  if (!out || (!tokens && count))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "wordpiece: %s is NULL", !out ? "out" : "tokens");
  *out = NULL;
  const char *o = origin ? origin : "wordpiece";
  dpt_wordpiece *wp = wp_new();
  if (!wp) return oom();
  size_t pool_cap = 0;
  dpt_status st = DPT_OK;
  for (size_t i = 0; st == DPT_OK && i < count; i++)
    st = tokens[i] ? add_token(wp, &pool_cap, tokens[i], strlen(tokens[i]), o)
                   : dpt_set_error(DPT_ERR_INVALID_ARG, "%s: tokens[%zu] is NULL", o, i);
  if (st == DPT_OK) st = finish(wp, o);
  if (st != DPT_OK) {
    dpt_wordpiece_destroy(wp);
    return st;
  }
  *out = wp;
  return DPT_OK;
}

dpt_status dpt_wordpiece_load(const char *path, dpt_wordpiece **out) {
  if (!out || !path)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "wordpiece: %s is NULL", !out ? "out" : "path");
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return dpt_set_error(DPT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  dpt_wordpiece *wp = wp_new();
  char *line = NULL;
  size_t cap = 0, pool_cap = 0;
  dpt_status st = wp ? DPT_OK : oom();
  for (ssize_t n; st == DPT_OK && (n = getline(&line, &cap, f)) >= 0;) {
    size_t len = (size_t)n; /* the line without "\n" (or "\r\n") */
    if (len && line[len - 1] == '\n') len--;
    if (len && line[len - 1] == '\r') len--;
    st = add_token(wp, &pool_cap, line, len, path);
  }
  if (st == DPT_OK && ferror(f))
    st = dpt_set_error(DPT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
  free(line);
  fclose(f);
  if (st == DPT_OK) st = finish(wp, path);
  if (st != DPT_OK) {
    dpt_wordpiece_destroy(wp);
    return st;
  }
  *out = wp;
  return DPT_OK;
}

void dpt_wordpiece_destroy(dpt_wordpiece *wp) {
  if (!wp) return;
  dpt_str_map_free(&wp->ids);
  free(wp->pool);
  free(wp->off);
  free(wp->cps);
  free(wp->word);
  free(wp->piece);
  free(wp->out);
  free(wp);
}

size_t dpt_wordpiece_vocab_size(const dpt_wordpiece *wp) {
  return wp ? wp->vocab : 0;
}

int dpt_wordpiece_lowercase(const dpt_wordpiece *wp) {
  return wp ? wp->lowercase : 0;
}

void dpt_wordpiece_specials(const dpt_wordpiece *wp, dpt_text_specials *sp) {
  if (wp && sp) *sp = wp->sp;
}

uint64_t dpt_wordpiece_fingerprint(const dpt_wordpiece *wp) {
  return wp ? wp->fingerprint : 0;
}

dpt_status dpt_wordpiece_token(const dpt_wordpiece *wp, int32_t id, const char **bytes,
                               size_t *len) {
  if (!wp || !bytes || !len)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "wordpiece token: an argument is NULL");
  if (id < 0 || (size_t)id >= wp->vocab)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "wordpiece token: id %d is outside [0, %zu)", (int)id,
                         wp->vocab);
  *bytes = (const char *)wp->pool + wp->off[id];
  *len = wp->off[id + 1] - wp->off[id];
  return DPT_OK;
}

static int write_vocab(FILE *f, const void *ctx) {
  const dpt_wordpiece *wp = ctx;
  for (size_t t = 0; t < wp->vocab; t++) {
    const size_t n = wp->off[t + 1] - wp->off[t];
    if (fwrite(wp->pool + wp->off[t], 1, n, f) != n || fputc('\n', f) == EOF) return 0;
  }
  return 1;
}

dpt_status dpt_wordpiece_save(const dpt_wordpiece *wp, const char *path) {
  if (!wp || !path)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "wordpiece save: %s is NULL", !wp ? "wp" : "path");
  return dpt_write_file_atomic(path, "vocabulary ", 1, write_vocab, wp);
}

/* ---- encoding ------------------------------------------------------------------------------ */

static dpt_status emit(dpt_wordpiece *wp, int32_t id) {
  DPT_TRY(grow((void **)&wp->out, &wp->out_cap, wp->out_len + 1, sizeof *wp->out));
  wp->out[wp->out_len++] = id;
  return DPT_OK;
}

/* Cleaning and the CJK split: the text's code points, whitespace as ' ', dropped characters
 * gone (bytes that are not UTF-8 count as U+FFFD), each CJK character between spaces. */
static dpt_status clean(dpt_wordpiece *wp, const uint8_t *s, size_t len, size_t *n) {
  size_t need;
  if (!dpt_mul_ok(len, 3, &need)) return oom();
  DPT_TRY(grow((void **)&wp->cps, &wp->cps_cap, need + 1, sizeof *wp->cps));
  size_t k = 0;
  for (size_t i = 0; i < len;) {
    int32_t c;
    const utf8proc_ssize_t got = utf8proc_iterate(s + i, (utf8proc_ssize_t)(len - i), &c);
    i += got > 0 ? (size_t)got : 1;
    if (got <= 0 || is_dropped(c)) continue;
    if (is_whitespace(c)) {
      wp->cps[k++] = ' ';
    } else if (is_cjk(c)) {
      wp->cps[k++] = ' ';
      wp->cps[k++] = c;
      wp->cps[k++] = ' ';
    } else {
      wp->cps[k++] = c;
    }
  }
  *n = k;
  return DPT_OK;
}

/* Lowercase, then NFD with the nonspacing marks (Mn) dropped: word[0, *n) in place. */
static dpt_status strip_accents(dpt_wordpiece *wp, size_t *n) {
  uint8_t *u = NULL;
  size_t bytes = 0, cap = 0;
  dpt_status st = grow((void **)&u, &cap, 4 * *n + 1, 1);
  for (size_t i = 0; st == DPT_OK && i < *n; i++)
    bytes += (size_t)utf8proc_encode_char(utf8proc_tolower(wp->word[i]), u + bytes);
  utf8proc_ssize_t m = 0;
  for (int pass = 0; st == DPT_OK && pass < 2; pass++) {
    m = utf8proc_decompose(u, (utf8proc_ssize_t)bytes, wp->word, (utf8proc_ssize_t)wp->word_cap,
                           UTF8PROC_DECOMPOSE);
    if (m < 0)
      st = dpt_set_error(DPT_ERR_INVALID_ARG, "wordpiece: %s", utf8proc_errmsg(m));
    else if ((size_t)m <= wp->word_cap)
      break;
    else
      st = grow((void **)&wp->word, &wp->word_cap, (size_t)m, sizeof *wp->word);
  }
  free(u);
  DPT_TRY(st);
  size_t k = 0;
  for (size_t i = 0; i < (size_t)m; i++)
    if (utf8proc_category(wp->word[i]) != UTF8PROC_CATEGORY_MN) wp->word[k++] = wp->word[i];
  *n = k;
  return DPT_OK;
}

/* The id of "##"-prefixed (cont) UTF-8 of code points w[a, b), or -1. */
static int32_t lookup(dpt_wordpiece *wp, const int32_t *w, size_t a, size_t b, int cont) {
  size_t n = 0;
  if (cont) wp->piece[n++] = '#', wp->piece[n++] = '#';
  for (size_t i = a; i < b; i++)
    n += (size_t)utf8proc_encode_char(w[i], wp->piece + n);
  const uint32_t v = dpt_str_map_get(&wp->ids, wp->piece, n);
  return v == DPT_MAP_NONE ? -1 : (int32_t)v;
}

/* Greedy longest-match-first pieces of one token w[0, n): its ids, or [UNK] alone when it has
 * more than DPT_WORDPIECE_MAX_CHARS characters or some position matches no piece. */
static dpt_status pieces(dpt_wordpiece *wp, const int32_t *w, size_t n) {
  if (n > DPT_WORDPIECE_MAX_CHARS) return emit(wp, wp->sp.unk);
  DPT_TRY(grow((void **)&wp->piece, &wp->piece_cap, 4 * n + 2, 1));
  const size_t first = wp->out_len;
  for (size_t a = 0; a < n;) {
    size_t b = n;
    int32_t id = -1;
    for (; b > a && (id = lookup(wp, w, a, b, a > 0)) < 0; b--)
      ;
    if (id < 0) {
      wp->out_len = first;
      return emit(wp, wp->sp.unk);
    }
    DPT_TRY(emit(wp, id));
    a = b;
  }
  return DPT_OK;
}

/* One whitespace-separated word: normalized, split at punctuation, each part in pieces. */
static dpt_status encode_word(dpt_wordpiece *wp, const int32_t *w, size_t n) {
  DPT_TRY(grow((void **)&wp->word, &wp->word_cap, n, sizeof *wp->word));
  memcpy(wp->word, w, n * sizeof *w);
  if (wp->lowercase) DPT_TRY(strip_accents(wp, &n));
  size_t start = 0;
  for (size_t i = 0; i < n; i++) {
    if (!is_punct(wp->word[i])) continue;
    if (i > start) DPT_TRY(pieces(wp, wp->word + start, i - start));
    DPT_TRY(pieces(wp, wp->word + i, 1));
    start = i + 1;
  }
  return n > start ? pieces(wp, wp->word + start, n - start) : DPT_OK;
}

dpt_status dpt_wordpiece_encode(dpt_wordpiece *wp, const void *text, size_t len,
                                const int32_t **ids, size_t *count) {
  if (!wp || !ids || !count || (!text && len))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "wordpiece encode: an argument is NULL");
  wp->out_len = 0;
  size_t n = 0;
  DPT_TRY(clean(wp, text, len, &n));
  for (size_t i = 0; i < n;) {
    if (wp->cps[i] == ' ') {
      i++;
      continue;
    }
    size_t j = i;
    while (j < n && wp->cps[j] != ' ')
      j++;
    DPT_TRY(encode_word(wp, wp->cps + i, j - i));
    i = j;
  }
  *ids = wp->out;
  *count = wp->out_len;
  return DPT_OK;
}
