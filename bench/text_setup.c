/* Text for the tools' BERT runs (bench/text_setup.h). */
#define _POSIX_C_SOURCE 200809L
#include "bench/text_setup.h"
#include "tools/prep/vocab.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

void dpt_text_options_default(dpt_text_options *o) {
  memset(o, 0, sizeof *o);
  o->vocab_size = 4096;
  o->seq_len = 128;
  o->val_every = 20;
}

int dpt_text_options_add_path(dpt_text_options *o, const char *path) {
  if (o->num_paths == DPT_TEXT_MAX_PATHS) return -1;
  o->paths[o->num_paths++] = path;
  return 0;
}

void dpt_text_options_describe(const dpt_text_options *o, char *out, size_t cap) {
  size_t len = 0;
  out[0] = '\0';
  if (!o->num_paths) {
    snprintf(out, cap, "%s", DPT_TEXT_DEFAULT_DIR);
    return;
  }
  for (size_t i = 0; i < o->num_paths && len < cap; ++i)
    len += (size_t)snprintf(out + len, cap - len, "%s%s", i ? ", " : "", o->paths[i]);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static dpt_status load(const dpt_text_options *o, dpt_text_run *r, char *msg, size_t cap) {
  static const char *const fallback[] = {DPT_TEXT_DEFAULT_DIR};
  const char *const *paths = o->num_paths ? o->paths : fallback;
  const size_t n = o->num_paths ? o->num_paths : 1;
  char what[1024];
  dpt_text_options_describe(o, what, sizeof what);
  dpt_status st = dpt_text_corpus_load_field(paths, n, o->text_field, &r->corpus);
  if (st != DPT_OK) {
    snprintf(msg, cap, "%s", dpt_last_error());
    return st;
  }
  if (dpt_text_corpus_bytes(r->corpus) == 0) {
    snprintf(msg, cap, "%.900s: no text (the files are empty)", what);
    return DPT_ERR_INVALID_ARG;
  }
  if (o->for_training && (st = dpt_text_corpus_check_utf8(r->corpus)) != DPT_OK) {
    snprintf(msg, cap, "%s", dpt_last_error());
    return st;
  }
  if (o->vocab) {
    st = dpt_tokenizer_load(o->vocab, &r->tok);
  } else {
    const double t0 = now();
    dpt_bpe *bpe = NULL;
    st = dpt_bpe_train(r->corpus, o->vocab_size, &bpe);
    if (st == DPT_OK) st = dpt_tokenizer_from_bpe(bpe, &r->tok);
    r->learn_seconds = now() - t0;
  }
  if (st == DPT_OK)
    st = dpt_text_sequences_build_with(r->corpus, r->tok, o->seq_len, o->val_every, &r->seqs);
  if (st != DPT_OK) {
    snprintf(msg, cap, "%s", dpt_last_error());
    return st;
  }
  const size_t tokens = dpt_text_sequences_tokens(r->seqs, DPT_TEXT_TRAIN);
  if (o->for_training && tokens < o->seq_len - 2) {
    snprintf(msg, cap,
             "%.900s: the training text is %zu tokens, less than one sequence of %zu (%zu text "
             "tokens): give more text or a smaller --seq-len",
             what, tokens, o->seq_len, o->seq_len - 2);
    return DPT_ERR_INVALID_ARG;
  }
  st = dpt_dataset_from_text(r->seqs, DPT_TEXT_TRAIN, o->mask_seed, &r->train);
  if (st == DPT_OK && dpt_text_sequences_count(r->seqs, DPT_TEXT_VALIDATION) > 0)
    st = dpt_dataset_from_text(r->seqs, DPT_TEXT_VALIDATION, o->mask_seed, &r->valid);
  if (st != DPT_OK) snprintf(msg, cap, "%s", dpt_last_error());
  return st;
}

dpt_status dpt_text_run_load(const dpt_text_options *o, dpt_text_run *r, char *msg, size_t cap) {
  memset(r, 0, sizeof *r);
  const dpt_status st = load(o, r, msg, cap);
  if (st != DPT_OK) dpt_text_run_free(r);
  return st;
}

void dpt_text_run_free(dpt_text_run *r) {
  dpt_dataset_destroy(r->train);
  dpt_dataset_destroy(r->valid);
  dpt_text_sequences_destroy(r->seqs);
  dpt_tokenizer_destroy(r->tok);
  dpt_text_corpus_destroy(r->corpus);
  memset(r, 0, sizeof *r);
}

int dpt_text_vocab_path(const char *weights, int wordpiece, char *out, size_t cap) {
  static const char ext[] = ".safetensors";
  const size_t n = strlen(weights), e = sizeof ext - 1;
  const size_t stem = n >= e && strcmp(weights + n - e, ext) == 0 ? n - e : n;
  const int len =
      snprintf(out, cap, "%.*s.vocab.%s", (int)stem, weights, wordpiece ? "txt" : "json");
  return len < 0 || (size_t)len >= cap ? -1 : 0;
}

dpt_status dpt_text_vocab_save(const dpt_tokenizer *tok, const char *path) {
  const dpt_wordpiece *wp = dpt_tokenizer_wordpiece(tok);
  return wp ? dpt_wordpiece_save(wp, path) : dpt_bpe_save(dpt_tokenizer_bpe(tok), path);
}
