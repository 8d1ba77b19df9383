/* Text for the tools' BERT runs, shared by dptrain train, dptrain eval and bench train: the
 * corpus, the vocabulary (read or learned), the sequences and their training and validation
 * datasets, with the checks a training run wants (UTF-8, enough text), each failure one line. */
#ifndef DPTRAIN_BENCH_TEXT_SETUP_H
#define DPTRAIN_BENCH_TEXT_SETUP_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/advanced.h"

#define DPT_TEXT_MAX_PATHS 64

typedef struct dpt_text_options {
  const char *paths[DPT_TEXT_MAX_PATHS]; /* --text, in order; none: DPT_TEXT_DEFAULT_DIR */
  size_t num_paths;
  const char *text_field; /* --text-field: the string member of .jsonl lines; NULL: "text" */
  const char *vocab;      /* --vocab: read this vocabulary (BPE JSON or WordPiece lines); NULL:
                           * learn a BPE one from the text */
  size_t vocab_size;      /* --vocab-size when learning (default 4096) */
  size_t seq_len;         /* --seq-len (default 128) */
  size_t val_every;       /* --val-every (default 20) */
  uint64_t mask_seed;     /* the masking's seed (the run's --seed) */
  int for_training;       /* 1: UTF-8 checked, at least one full training sequence required */
} dpt_text_options;

typedef struct dpt_text_run {
  dpt_text_corpus *corpus;
  dpt_tokenizer *tok; /* BPE (read or learned) or WordPiece (read) */
  dpt_text_sequences *seqs;
  dpt_dataset *train;   /* the training split */
  dpt_dataset *valid;   /* the validation split; NULL when it holds no sequence */
  double learn_seconds; /* learning the vocabulary (0 when read) */
} dpt_text_run;

void dpt_text_options_default(dpt_text_options *o);
/* Appends a --text path; -1 when there are too many. */
int dpt_text_options_add_path(dpt_text_options *o, const char *path);
/* The paths joined for messages ("a, b"). */
void dpt_text_options_describe(const dpt_text_options *o, char *out, size_t cap);

/* Reads the text, the vocabulary (o->vocab) or learns one, builds the sequences and datasets.
 * On failure returns the status with one line in msg[cap] (naming the file or the setting) and
 * leaves *r empty. */
dpt_status dpt_text_run_load(const dpt_text_options *o, dpt_text_run *r, char *msg, size_t cap);
void dpt_text_run_free(dpt_text_run *r);

/* The vocabulary file beside weights file W: W with ".safetensors" replaced by ".vocab.json"
 * (BPE) or ".vocab.txt" (wordpiece 1; appended when W does not end so). -1 when it does not
 * fit in cap. */
int dpt_text_vocab_path(const char *weights, int wordpiece, char *out, size_t cap);

/* Writes tok's vocabulary to path in its own format (BPE JSON, WordPiece lines). */
dpt_status dpt_text_vocab_save(const dpt_tokenizer *tok, const char *path);

/* Safetensors metadata keys a BERT weights file carries beside the model. */
#define DPT_META_VOCAB_SIZE "dptrain.vocab_size"
#define DPT_META_VOCAB_FP   "dptrain.vocab_fingerprint" /* dpt_bpe_fingerprint, 16 hex digits */
#define DPT_META_VAL_EVERY  "dptrain.val_every"
#define DPT_META_MASK_SEED  "dptrain.mask_seed"

#endif
