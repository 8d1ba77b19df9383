/* Either tokenizer behind one handle: dptrain's byte-level BPE or BERT's WordPiece, chosen by
 * the vocabulary file's format. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/text/tokenizer_impl.h"

/* 1 when the file's first byte that is not blank is '{' (a JSON vocabulary). */
static dpt_status is_json(const char *path, int *json) {
  FILE *f = fopen(path, "rb");
  if (!f) return dpt_set_error(DPT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  int c;
  while ((c = fgetc(f)) == ' ' || c == '\t' || c == '\n' || c == '\r')
    ;
  fclose(f);
  *json = c == '{';
  return DPT_OK;
}

static dpt_status wrap(dpt_bpe *bpe, dpt_wordpiece *wp, dpt_tokenizer **out) {
  dpt_tokenizer *t = calloc(1, sizeof *t);
  if (!t) {
    dpt_bpe_destroy(bpe);
    dpt_wordpiece_destroy(wp);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
  }
  t->bpe = bpe;
  t->wp = wp;
  t->owned = 1;
  *out = t;
  return DPT_OK;
}

dpt_status dpt_tokenizer_load(const char *path, dpt_tokenizer **out) {
  if (!out || !path)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "tokenizer: %s is NULL", !out ? "out" : "path");
  *out = NULL;
  int json = 0;
  DPT_TRY(is_json(path, &json));
  dpt_bpe *bpe = NULL;
  dpt_wordpiece *wp = NULL;
  DPT_TRY(json ? dpt_bpe_load(path, &bpe) : dpt_wordpiece_load(path, &wp));
  return wrap(bpe, wp, out);
}

dpt_status dpt_tokenizer_from_bpe(dpt_bpe *bpe, dpt_tokenizer **out) {
  if (!out || !bpe) {
    dpt_bpe_destroy(bpe);
    return dpt_set_error(DPT_ERR_INVALID_ARG, "tokenizer: %s is NULL", !out ? "out" : "bpe");
  }
  *out = NULL;
  return wrap(bpe, NULL, out);
}

void dpt_tokenizer_destroy(dpt_tokenizer *tok) {
  if (!tok) return;
  if (tok->owned) {
    dpt_bpe_destroy(tok->bpe);
    dpt_wordpiece_destroy(tok->wp);
  }
  free(tok->buf);
  free(tok);
}

dpt_bpe *dpt_tokenizer_bpe(const dpt_tokenizer *tok) {
  return tok ? tok->bpe : NULL;
}

dpt_wordpiece *dpt_tokenizer_wordpiece(const dpt_tokenizer *tok) {
  return tok ? tok->wp : NULL;
}

size_t dpt_tokenizer_vocab_size(const dpt_tokenizer *tok) {
  if (!tok) return 0;
  return tok->wp ? dpt_wordpiece_vocab_size(tok->wp) : dpt_bpe_vocab_size(tok->bpe);
}

void dpt_tokenizer_specials(const dpt_tokenizer *tok, dpt_text_specials *sp) {
  if (!sp) return;
  *sp = dpt_bpe_specials();
  if (tok && tok->wp) dpt_wordpiece_specials(tok->wp, sp);
}

uint64_t dpt_tokenizer_fingerprint(const dpt_tokenizer *tok) {
  if (!tok) return 0;
  return tok->wp ? dpt_wordpiece_fingerprint(tok->wp) : dpt_bpe_fingerprint(tok->bpe);
}

dpt_status dpt_tokenizer_encode(dpt_tokenizer *tok, const void *text, size_t len,
                                const int32_t **ids, size_t *count) {
  if (!tok || !ids || !count)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "tokenizer encode: an argument is NULL");
  if (tok->wp) return dpt_wordpiece_encode(tok->wp, text, len, ids, count);
  if (len > tok->cap) { /* BPE never makes more tokens than bytes */
    if (len > ((size_t)-1) / sizeof *tok->buf)
      return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "tokenizer encode: %zu bytes", len);
    int32_t *b = realloc(tok->buf, len * sizeof *b);
    if (!b) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "tokenizer encode: out of memory");
    tok->buf = b;
    tok->cap = len;
  }
  DPT_TRY(dpt_bpe_encode(tok->bpe, text, len, tok->buf, count));
  *ids = tok->buf;
  return DPT_OK;
}
