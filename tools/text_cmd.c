/* `dptrain tokenize`: learns a byte-level BPE vocabulary from text files (or reads one) and
 * reports what it makes of the corpus: tokens, bytes per token, sequences per split; --export
 * writes the sequences (training unmasked, validation masked as dptrain's eval masks it) to a
 * safetensors file for tools/pytorch_reference.py. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dptrain/advanced.h"
#include "tools/commands.h"
#include "tools/options.h"
#include "tools/prep/vocab.h"

#define MAX_DATA 256

typedef struct opts {
  const char *data[MAX_DATA];
  size_t num_data;
  size_t vocab_size, seq_len, val_every;
  uint64_t seed;
  const char *out, *vocab, *encode, *export, *text_field;
} opts;

#define TRY(call)                                                                                  \
  do {                                                                                             \
    dpt_status try_st_ = (call);                                                                   \
    if (try_st_ != DPT_OK) return try_st_;                                                         \
  } while (0)

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int add_data(void *p, const char *v) {
  opts *o = p;
  if (o->num_data == MAX_DATA) return -1;
  o->data[o->num_data++] = v;
  return 0;
}

#define OPT_TARGET opts

static const dpt_opt options[] = {
    {"--data", "PATH",
     "a text file, or a directory's files (repeatable, at most 256;\n"
     "default " DPT_TEXT_DEFAULT_DIR "); FILE.jsonl: JSON lines",
     CUSTOM(add_data), .multi = 1},
    {"--text-field", "NAME", "the string field of .jsonl lines (default text)", STRING(text_field)},
    {"--vocab-size", "N", "tokens in the vocabulary, 260 to 2^20 (default 4096)",
     SIZE_IN(vocab_size, DPT_TOKEN_FIRST_MERGE, DPT_BPE_MAX_VOCAB)},
    {"--out", "FILE", "write the learned vocabulary here (JSON)", STRING(out)},
    {"--vocab", "FILE",
     "use this vocabulary instead of learning one: BPE (JSON)\n"
     "or WordPiece (one token per line, as BERT's vocab.txt)",
     STRING(vocab)},
    {"--encode", "TEXT", "also print TEXT's token ids and pieces", STRING(encode)},
    {"--seq-len", "N", "tokens per sequence, with [CLS] and [SEP] (default 128)", SIZE(seq_len, 3)},
    {"--val-every", "N", "every Nth document validates; 0: none (default 20)", SIZE(val_every, 0)},
    {"--export", "FILE",
     "write the sequences as int32 tensors to a safetensors file:\n"
     "train [N, seq_len] (unmasked), val_inputs and val_labels\n"
     "[M, seq_len] (masked with --seed at epoch 0, as dptrain's\n"
     "evaluation masks them), metadata vocab_size, seq_len, seed",
     STRING(export)},
    {"--seed", "S", "the masking seed of --export (default 0)", U64(seed, 0)},
};

_Static_assert(DPT_TOKEN_FIRST_MERGE == 260 && DPT_BPE_MAX_VOCAB == 1 << 20,
               "--vocab-size's help says the range");

static const dpt_opt_cmd tokenize_cmd = {
    "dptrain tokenize",
    "usage: dptrain tokenize [--data PATH]... [--vocab-size N] --out VOCAB.json\n"
    "       dptrain tokenize [--data PATH]... --vocab VOCAB.json [--encode TEXT]\n"
    "\n"
    "Learns a byte-level BPE vocabulary from text (or reads one with --vocab) and reports\n"
    "the corpus, its tokens, bytes per token and the MLM sequences (docs/text.md).\n",
    options,
    sizeof options / sizeof options[0],
    0,
};

const dpt_opt_cmd *dpt_tokenize_options(void) {
  return &tokenize_cmd;
}

/* -1: go on; otherwise the exit code. */
static int parse_options(opts *o, int argc, char **argv) {
  const int rc = dpt_opt_parse(&tokenize_cmd, o, argc, argv, NULL, NULL);
  if (rc != DPT_OPT_KEEP_GOING) return rc;
  if (!o->out && !o->vocab)
    return dpt_opt_usage_error(&tokenize_cmd, "--out (learn a vocabulary) or --vocab is needed");
  if (o->out && o->vocab)
    return dpt_opt_usage_error(&tokenize_cmd, "--out and --vocab do not go together");
  return -1;
}

/* Token id's bytes, from either tokenizer (ids from an encoding are in the vocabulary). */
static void token_bytes(const dpt_tokenizer *tok, int32_t id, const uint8_t **b, size_t *n) {
  const dpt_wordpiece *wp = dpt_tokenizer_wordpiece(tok);
  if (wp)
    (void)dpt_wordpiece_token(wp, id, (const char **)b, n);
  else
    (void)dpt_bpe_token_bytes(dpt_tokenizer_bpe(tok), id, b, n);
}

/* TEXT's ids on one line, then its pieces, each quoted with C escapes. */
static dpt_status show_encoding(dpt_tokenizer *tok, const char *text) {
  const int32_t *ids;
  size_t n = 0;
  TRY(dpt_tokenizer_encode(tok, text, strlen(text), &ids, &n));
  printf("ids:");
  for (size_t i = 0; i < n; i++)
    printf(" %d", (int)ids[i]);
  printf("\npieces:");
  for (size_t i = 0; i < n; i++) {
    const uint8_t *b;
    size_t bl;
    token_bytes(tok, ids[i], &b, &bl);
    printf(" \"");
    for (size_t k = 0; k < bl; k++)
      printf(b[k] == '"' || b[k] == '\\' ? "\\%c" : isprint(b[k]) ? "%c" : "\\x%02x", b[k]);
    printf("\"");
  }
  printf("\n");
  return DPT_OK;
}

static int reported; /* the failure's line is printed already */

/* --export: the training sequences as they are, the validation sequences masked with the seed
 * at epoch 0 (the fixed masking of dptrain's validation loss), all int32 [count, seq_len]. */
static dpt_status export_sequences(const opts *o, const dpt_text_sequences *s) {
  const size_t len = dpt_text_sequences_len(s);
  const size_t n = dpt_text_sequences_count(s, DPT_TEXT_TRAIN);
  const size_t m = dpt_text_sequences_count(s, DPT_TEXT_VALIDATION);
  int32_t *train = malloc((n * len + 1) * sizeof *train); /* + 1: never malloc(0) */
  int32_t *inputs = malloc((m * len + 1) * sizeof *inputs);
  int32_t *labels = malloc((m * len + 1) * sizeof *labels);
  uint64_t *indices = malloc((m + 1) * sizeof *indices);
  dpt_status st = DPT_OK;
  if (!train || !inputs || !labels || !indices) {
    fprintf(stderr, "dptrain tokenize: out of memory: %zu sequences for %s\n", n + m, o->export);
    reported = 1;
    st = DPT_ERR_OUT_OF_MEMORY;
    goto done;
  }
  for (size_t i = 0; i < n; i++)
    memcpy(train + i * len, dpt_text_sequence(s, DPT_TEXT_TRAIN, i), len * sizeof *train);
  for (size_t i = 0; i < m; i++)
    indices[i] = i;
  if (m) {
    st = dpt_text_sequences_gather(s, DPT_TEXT_VALIDATION, indices, m, o->seed, 0, inputs, labels);
    if (st != DPT_OK) goto done;
  }
  char vocab[32], seq_len[32], seed[32], val_every[32];
  snprintf(vocab, sizeof vocab, "%zu", dpt_text_sequences_vocab(s));
  snprintf(seq_len, sizeof seq_len, "%zu", len);
  snprintf(seed, sizeof seed, "%" PRIu64, o->seed);
  snprintf(val_every, sizeof val_every, "%zu", o->val_every);
  const char *const meta[] = {"format",     "dptrain-mlm-sequences",
                              "vocab_size", vocab,
                              "seq_len",    seq_len,
                              "seed",       seed,
                              "val_every",  val_every,
                              "val_epoch",  "0",
                              NULL};
  const dpt_st_tensor t[3] = {
      {.name = "train",
       .ndim = 2,
       .shape = {(int64_t)n, (int64_t)len},
       .dtype = "I32",
       .bytes = train},
      {.name = "val_inputs",
       .ndim = 2,
       .shape = {(int64_t)m, (int64_t)len},
       .dtype = "I32",
       .bytes = inputs},
      {.name = "val_labels",
       .ndim = 2,
       .shape = {(int64_t)m, (int64_t)len},
       .dtype = "I32",
       .bytes = labels},
  };
  st = dpt_safetensors_write(o->export, t, 3, meta);
  if (st == DPT_OK)
    printf("exported: %zu training and %zu validation sequences (masked with seed %" PRIu64
           ", epoch 0) to %s\n",
           n, m, o->seed, o->export);
done:
  free(indices);
  free(labels);
  free(inputs);
  free(train);
  return st;
}

/* The vocabulary learned from the corpus and saved (--out). */
static dpt_status learn_vocabulary(const opts *o, const dpt_text_corpus *c, dpt_tokenizer **tok) {
  const double t0 = now();
  dpt_bpe *bpe = NULL;
  TRY(dpt_bpe_train(c, o->vocab_size, &bpe));
  TRY(dpt_tokenizer_from_bpe(bpe, tok));
  const double secs = now() - t0;
  TRY(dpt_bpe_save(bpe, o->out));
  printf("vocabulary: %zu tokens (%zu merges) learned in %.2f s, saved to %s\n",
         dpt_bpe_vocab_size(bpe), dpt_bpe_vocab_size(bpe) - DPT_TOKEN_FIRST_MERGE, secs, o->out);
  if (dpt_bpe_vocab_size(bpe) < o->vocab_size)
    printf("note: no pair occurs twice past %zu tokens; the vocabulary is smaller than asked\n",
           dpt_bpe_vocab_size(bpe));
  return DPT_OK;
}

/* What a vocabulary read with --vocab is. */
static void describe_vocabulary(const opts *o, const dpt_tokenizer *tok) {
  const size_t v = dpt_tokenizer_vocab_size(tok);
  const dpt_wordpiece *wp = dpt_tokenizer_wordpiece(tok);
  if (wp)
    printf("vocabulary: %zu tokens (WordPiece, %s) from %s\n", v,
           dpt_wordpiece_lowercase(wp) ? "uncased" : "cased", o->vocab);
  else
    printf("vocabulary: %zu tokens (%zu merges) from %s\n", v, v - DPT_TOKEN_FIRST_MERGE, o->vocab);
}

static dpt_status run(const opts *o, dpt_text_corpus **c, dpt_tokenizer **tok,
                      dpt_text_sequences **s) {
  if (o->vocab) TRY(dpt_tokenizer_load(o->vocab, tok)); /* a bad file fails before the corpus */
  TRY(dpt_text_corpus_load_field(o->data, o->num_data, o->text_field, c));
  printf("corpus: %zu files, %zu documents, %zu bytes\n", dpt_text_corpus_files(*c),
         dpt_text_corpus_documents(*c), dpt_text_corpus_bytes(*c));
  if (o->vocab)
    describe_vocabulary(o, *tok);
  else
    TRY(learn_vocabulary(o, *c, tok));
  const double t0 = now();
  TRY(dpt_text_sequences_build_with(*c, *tok, o->seq_len, o->val_every, s));
  const double secs = now() - t0;
  const size_t tokens = dpt_text_sequences_tokens(*s, DPT_TEXT_TRAIN) +
                        dpt_text_sequences_tokens(*s, DPT_TEXT_VALIDATION);
  printf("tokens: %zu, %.3f bytes per token (encoded in %.2f s)\n", tokens,
         tokens ? (double)dpt_text_corpus_bytes(*c) / (double)tokens : 0.0, secs);
  printf("sequences of %zu tokens: %zu training, %zu validation (", o->seq_len,
         dpt_text_sequences_count(*s, DPT_TEXT_TRAIN),
         dpt_text_sequences_count(*s, DPT_TEXT_VALIDATION));
  if (o->val_every)
    printf("document d validates when d %% %zu = %zu)\n", o->val_every, o->val_every - 1);
  else
    printf("no validation)\n");
  if (o->encode) TRY(show_encoding(*tok, o->encode));
  if (o->export) TRY(export_sequences(o, *s));
  return DPT_OK;
}

int dpt_cmd_tokenize(int argc, char **argv) {
  opts o = {.vocab_size = 4096, .seq_len = 128, .val_every = 20};
  const int rc = parse_options(&o, argc, argv);
  if (rc >= 0) return rc;
  if (o.num_data == 0) o.data[o.num_data++] = DPT_TEXT_DEFAULT_DIR;
  dpt_text_corpus *c = NULL;
  dpt_tokenizer *tok = NULL;
  dpt_text_sequences *s = NULL;
  const dpt_status st = run(&o, &c, &tok, &s);
  if (st != DPT_OK && !reported)
    fprintf(stderr, "dptrain tokenize: %s: %s\n", dpt_status_str(st), dpt_last_error());
  dpt_text_sequences_destroy(s);
  dpt_tokenizer_destroy(tok);
  dpt_text_corpus_destroy(c);
  return st == DPT_OK ? 0 : 1;
}
