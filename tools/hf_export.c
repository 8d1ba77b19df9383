/* dptrain's BERT as a Hugging Face directory: the weights through dpt_hf_bert_save, the
 * vocabulary as vocab.txt and tokenizer_config.json (WordPiece), or as dptrain's own BPE file
 * with a note (transformers has no reader for it). docs/hf.md. */
#define _POSIX_C_SOURCE 200809L
#include "tools/hf_export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/text_setup.h"
#include "dptrain/advanced.h"

#define TRY(call)                                                                                  \
  do {                                                                                             \
    dpt_status try_st_ = (call);                                                                   \
    if (try_st_ != DPT_OK) return try_st_;                                                         \
  } while (0)

static char own[600]; /* the tool's own message, when the failure is not the library's */

static dpt_status own_error(dpt_status st, const char *msg) {
  snprintf(own, sizeof own, "%s", msg);
  return st;
}

/* The vocabulary beside the weights: W.vocab.txt, else W.vocab.json. */
static const char *vocab_beside(const char *weights, char *out, size_t cap) {
  for (int wp = 1; wp >= 0; wp--)
    if (dpt_text_vocab_path(weights, wp, out, cap) == 0 && access(out, R_OK) == 0) return out;
  return NULL;
}

static dpt_status write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) == EOF) {
    if (f) fclose(f);
    return own_error(DPT_ERR_IO, "cannot write tokenizer_config.json");
  }
  return fclose(f) == 0 ? DPT_OK : own_error(DPT_ERR_IO, "cannot write tokenizer_config.json");
}

/* The vocabulary into dir, checked against the model's size and the weights' fingerprint. */
static dpt_status save_vocab(const dpt_tokenizer *tok, const dpt_bert_options *o,
                             const dpt_safetensors *wf, const char *vocab, const char *dir) {
  const char *fp = dpt_safetensors_metadata(wf, DPT_META_VOCAB_FP);
  char want[32], path[4200];
  snprintf(want, sizeof want, "%016llx", (unsigned long long)dpt_tokenizer_fingerprint(tok));
  if (dpt_tokenizer_vocab_size(tok) != o->vocab || (fp && strcmp(fp, want) != 0))
    return own_error(DPT_ERR_INVALID_ARG, "the vocabulary does not match the weights (size or "
                                          "fingerprint); give the training run's with --vocab");
  const dpt_wordpiece *wp = dpt_tokenizer_wordpiece(tok);
  if (!wp) {
    snprintf(path, sizeof path, "%s/dptrain_bpe.json", dir);
    TRY(dpt_text_vocab_save(tok, path));
    printf("wrote %s (dptrain's byte-level BPE from %s; transformers has no tokenizer for it: "
           "docs/text.md)\n",
           path, vocab);
    return DPT_OK;
  }
  snprintf(path, sizeof path, "%s/vocab.txt", dir);
  TRY(dpt_wordpiece_save(wp, path));
  char cfg[256];
  snprintf(cfg, sizeof cfg,
           "{\n  \"tokenizer_class\": \"BertTokenizer\",\n  \"do_lower_case\": %s,\n"
           "  \"model_max_length\": %zu\n}\n",
           dpt_wordpiece_lowercase(wp) ? "true" : "false",
           o->max_positions ? o->max_positions : o->seq_len);
  snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
  TRY(write_text(path, cfg));
  printf("wrote %s/vocab.txt and tokenizer_config.json (WordPiece, %s)\n", dir,
         dpt_wordpiece_lowercase(wp) ? "uncased" : "cased");
  return DPT_OK;
}

/* The model of the weights file, its options and its state. */
static dpt_status load_bert(const char *weights, dpt_bert_options *o, dpt_backend **be,
                            dpt_model **m, float **host) {
  dpt_model_spec *spec = malloc(sizeof *spec);
  if (!spec) return own_error(DPT_ERR_OUT_OF_MEMORY, "out of memory");
  dpt_status st = dpt_model_spec_from_weights(weights, spec);
  if (st == DPT_OK) st = dpt_bert_options_from_spec(spec, o);
  if (st == DPT_OK) st = dpt_backend_create(DPT_BACKEND_CPU, 0, be);
  if (st == DPT_OK) st = dpt_model_create(*be, spec, 1, m);
  free(spec);
  if (st == DPT_OK && !(*host = malloc(dpt_model_state_size(*m) * sizeof **host)))
    st = own_error(DPT_ERR_OUT_OF_MEMORY, "out of memory");
  if (st == DPT_OK) st = dpt_model_load_params(*m, weights, *host);
  return st;
}

static dpt_status export_dir(const char *weights, const char *vocab, const char *dir) {
  char beside[4200];
  if (!vocab && !(vocab = vocab_beside(weights, beside, sizeof beside)))
    return own_error(DPT_ERR_INVALID_ARG, "no vocabulary beside the weights (W.vocab.txt or "
                                          "W.vocab.json): give it with --vocab");
  dpt_bert_options o;
  dpt_backend *be = NULL;
  dpt_model *m = NULL;
  float *host = NULL;
  dpt_tokenizer *tok = NULL;
  dpt_safetensors *wf = NULL;
  dpt_status st = load_bert(weights, &o, &be, &m, &host);
  if (st == DPT_OK) st = dpt_tokenizer_load(vocab, &tok);
  if (st == DPT_OK) st = dpt_safetensors_open(weights, &wf);
  if (st == DPT_OK) st = dpt_hf_bert_save(m, &o, host, dir);
  if (st == DPT_OK)
    printf("wrote %s/%s and %s (BertForMaskedLM: %zu layers, hidden %zu, %zu heads, vocabulary "
           "%zu)\n",
           dir, DPT_HF_CONFIG, DPT_HF_WEIGHTS, o.layers, o.hidden, o.heads, o.vocab);
  if (st == DPT_OK) st = save_vocab(tok, &o, wf, vocab, dir);
  dpt_safetensors_close(wf);
  dpt_tokenizer_destroy(tok);
  free(host);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
  return st;
}

dpt_status dpt_hf_export(const char *weights, const char *vocab, const char *dir, char *msg,
                         size_t cap) {
  own[0] = '\0';
  const dpt_status st = export_dir(weights, vocab, dir);
  if (st != DPT_OK) snprintf(msg, cap, "%s", own[0] ? own : dpt_last_error());
  return st;
}
