/* dptrain: text for masked-language-model pretraining: a byte-level BPE tokenizer, text corpora,
 * fixed-length token sequences with a train/validation split, and BERT's masking.
 *
 * Token ids (a fixed layout; docs/text.md):
 *   0 [PAD], 1 [CLS], 2 [SEP], 3 [MASK]           the special tokens
 *   4 + b for each byte b in 0..255                 byte fallback: every input encodes
 *   260 + r for merge r (r = 0, 1, ...)             in the order training learned them
 * so a vocabulary of V tokens holds V - 260 merges.
 *
 * Words (the pre-tokenizer): the text is cut into words and merges never cross a word's edge.
 * A word is a run of word bytes (ASCII letters and digits, and every byte >= 0x80, so UTF-8
 * letters stay in their word) with the one space before it, if any; or a run of spaces (less
 * the one a following word takes); or any other single byte. A word longer than
 * DPT_BPE_MAX_WORD bytes is cut into pieces of that many bytes.
 *
 * Sequences: documents are a corpus's files, cut further at every line that holds only "%"
 * (the fortune format; the line itself is dropped). Document d goes to validation when
 * val_every > 0 and d % val_every == val_every - 1, to training otherwise. Each split's
 * documents, in order, make one token stream with [SEP] after every document; the stream is cut
 * into pieces of seq_len - 2 tokens and each piece becomes [CLS] piece [SEP], the last one
 * filled up with [PAD].
 */
#ifndef DPTRAIN_TEXT_H
#define DPTRAIN_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/data.h"
#include "dptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DPT_TOKEN_PAD         0
#define DPT_TOKEN_CLS         1
#define DPT_TOKEN_SEP         2
#define DPT_TOKEN_MASK        3
#define DPT_TOKEN_BYTE0       4   /* byte b is token DPT_TOKEN_BYTE0 + b */
#define DPT_TOKEN_FIRST_MERGE 260 /* merge r makes token DPT_TOKEN_FIRST_MERGE + r */
#define DPT_BPE_MAX_WORD      64  /* longest word in bytes; longer runs are cut */
#define DPT_BPE_MAX_VOCAB     (1 << 20)
#define DPT_MLM_IGNORE        (-100) /* label of a position the loss ignores (PyTorch's default) */
#define DPT_TEXT_DEFAULT_DIR  "/usr/share/games/fortunes"

/* ---- corpora --------------------------------------------------------------------------------- */

typedef struct dpt_text_corpus dpt_text_corpus;

/* Reads `count` paths, each a file or a directory. A directory stands for its regular files
 * (not its subdirectories), sorted by name bytewise, except names that start with '.' or end
 * in ".dat" (fortune's binary indexes); a file reached twice (fortune's ".u8" links) is read
 * once. Each file is split into documents at lines holding only "%" (see the top of this
 * header); empty documents are dropped. Errors: DPT_ERR_IO naming the path (missing,
 * unreadable, not a file or directory), DPT_ERR_INVALID_ARG (no paths, a directory without
 * files), DPT_ERR_OUT_OF_MEMORY. *out is NULL on failure; free with dpt_text_corpus_destroy. */
DPT_API dpt_status dpt_text_corpus_load(const char *const *paths, size_t count,
                                        dpt_text_corpus **out);

/* A corpus of one text held in memory (copied), split into documents as a file is. */
DPT_API dpt_status dpt_text_corpus_from_memory(const void *text, size_t len, dpt_text_corpus **out);

/* Frees a corpus; NULL does nothing. */
DPT_API void dpt_text_corpus_destroy(dpt_text_corpus *c);

/* Files read, documents, and bytes of text in the documents (0 for NULL). */
DPT_API size_t dpt_text_corpus_files(const dpt_text_corpus *c);
DPT_API size_t dpt_text_corpus_documents(const dpt_text_corpus *c);
DPT_API size_t dpt_text_corpus_bytes(const dpt_text_corpus *c);

/* Document i's bytes (borrowed from the corpus). DPT_ERR_INVALID_ARG when i is out of range. */
DPT_API dpt_status dpt_text_corpus_document(const dpt_text_corpus *c, size_t i,
                                            const uint8_t **bytes, size_t *len);

/* Whether every file of the corpus is valid UTF-8 (no overlong forms, surrogates or code points
 * past U+10FFFF): DPT_ERR_BAD_FORMAT naming the first file that is not, the byte and its
 * offset in that file. dptrain train checks the text it trains on; the tokenizer itself takes
 * any bytes. */
DPT_API dpt_status dpt_text_corpus_check_utf8(const dpt_text_corpus *c);

/* 1 when len bytes are valid UTF-8; else 0 with the offset of the first byte that starts no
 * valid character in *bad_offset (may be NULL). */
DPT_API int dpt_utf8_valid(const void *text, size_t len, size_t *bad_offset);

/* ---- the tokenizer --------------------------------------------------------------------------- */

typedef struct dpt_bpe dpt_bpe;

/* A tokenizer from `count` merges in the order they were learned: merges[2r] and merges[2r + 1]
 * make token DPT_TOKEN_FIRST_MERGE + r (the list is copied). Each merge must join two
 * non-special tokens below its own id into a token of at most DPT_BPE_MAX_WORD bytes, and no
 * pair may repeat: DPT_ERR_BAD_FORMAT "<origin>: merge r: ..." otherwise. */
DPT_API dpt_status dpt_bpe_from_merges(const int32_t *merges, size_t count, const char *origin,
                                       dpt_bpe **out);

/* The length in bytes of the word that starts text[0..n), n > 0 (the pre-tokenizer at the top
 * of this header); 0 for n == 0. */
DPT_API size_t dpt_bpe_word_len(const uint8_t *text, size_t n);

/* Frees a tokenizer; NULL does nothing. */
DPT_API void dpt_bpe_destroy(dpt_bpe *bpe);

/* Tokens in the vocabulary (DPT_TOKEN_FIRST_MERGE + merges); 0 for NULL. */
DPT_API size_t dpt_bpe_vocab_size(const dpt_bpe *bpe);

/* Merge r's two tokens. DPT_ERR_INVALID_ARG when r is out of range. */
DPT_API dpt_status dpt_bpe_merge(const dpt_bpe *bpe, size_t r, int32_t *left, int32_t *right);

/* The bytes token `id` stands for (borrowed; none for a special token). DPT_ERR_INVALID_ARG
 * when id is outside the vocabulary. */
DPT_API dpt_status dpt_bpe_token_bytes(const dpt_bpe *bpe, int32_t id, const uint8_t **bytes,
                                       size_t *len);

/* "[PAD]", "[CLS]", "[SEP]" or "[MASK]" for a special id, NULL for any other. */
DPT_API const char *dpt_text_special_name(int32_t id);

/* Encodes len bytes (any bytes, not only UTF-8) into ids, which has room for len entries (an
 * encoding never has more tokens than bytes); *count is the number of tokens. Each word is
 * encoded by applying merges in the order they were learned, lowest rank first. Words already
 * seen are cached in the tokenizer: one thread at a time encodes with one dpt_bpe. */
DPT_API dpt_status dpt_bpe_encode(dpt_bpe *bpe, const void *text, size_t len, int32_t *ids,
                                  size_t *count);

/* The bytes of `count` ids; special tokens give none. out NULL only sets *len (the size
 * needed); otherwise out has room for cap bytes, and a decoding that needs more is
 * DPT_ERR_INVALID_ARG. An id outside the vocabulary is DPT_ERR_INVALID_ARG naming its
 * position. */
DPT_API dpt_status dpt_bpe_decode(const dpt_bpe *bpe, const int32_t *ids, size_t count,
                                  uint8_t *out, size_t cap, size_t *len);

/* 64-bit fingerprint of the vocabulary: its size and its merges in order (dpt_fingerprint of
 * little-endian int32 words). Two vocabularies that encode alike have the same value. 0 for
 * NULL. */
DPT_API uint64_t dpt_bpe_fingerprint(const dpt_bpe *bpe);

/* Reads a vocabulary file (docs/text.md: format "dptrain-bpe", version 1, the special tokens,
 * the merges in order), as `dptrain tokenize` writes it. DPT_ERR_IO (cannot read) or
 * DPT_ERR_BAD_FORMAT, each naming the file and the problem (not JSON, another format or version,
 * special tokens other than the layout above, a merge that is not two earlier non-special tokens, a
 * merge repeated, a vocab_size that does not match the merges). */
DPT_API dpt_status dpt_bpe_load(const char *path, dpt_bpe **out);

/* ---- sequences and masking ------------------------------------------------------------------- */

typedef enum dpt_text_split { DPT_TEXT_TRAIN = 0, DPT_TEXT_VALIDATION = 1 } dpt_text_split;

typedef struct dpt_text_sequences dpt_text_sequences;

/* Tokenizes the corpus and cuts it into sequences of seq_len tokens (>= 3), split into
 * training and validation by document (val_every 0: no validation; see the top of this
 * header). Deterministic: the same corpus, vocabulary and settings give the same sequences.
 * Errors: DPT_ERR_INVALID_ARG, DPT_ERR_OUT_OF_MEMORY. */
DPT_API dpt_status dpt_text_sequences_build(const dpt_text_corpus *corpus, dpt_bpe *bpe,
                                            size_t seq_len, size_t val_every,
                                            dpt_text_sequences **out);

/* Frees sequences; NULL does nothing. */
DPT_API void dpt_text_sequences_destroy(dpt_text_sequences *s);

/* Sequences in a split; tokens per sequence; the split's text tokens (no CLS/SEP/PAD);
 * the vocabulary size the ids come from. 0 for NULL. */
DPT_API size_t dpt_text_sequences_count(const dpt_text_sequences *s, dpt_text_split split);
DPT_API size_t dpt_text_sequences_len(const dpt_text_sequences *s);
DPT_API size_t dpt_text_sequences_tokens(const dpt_text_sequences *s, dpt_text_split split);
DPT_API size_t dpt_text_sequences_vocab(const dpt_text_sequences *s);

/* Sequence i of a split: seq_len ids (borrowed). NULL when i or split is out of range. */
DPT_API const int32_t *dpt_text_sequence(const dpt_text_sequences *s, dpt_text_split split,
                                         size_t i);

/* BERT's masking of one sequence of len ids below vocab_size (> DPT_TOKEN_FIRST_MERGE - 1).
 * Each position not holding a special token is chosen with probability 0.15; a chosen position
 * gets label = its id and input [MASK] (probability 0.8), a token drawn uniformly from the
 * non-special ones (0.1), or its own id (0.1). Every other position gets label DPT_MLM_IGNORE
 * and input = its id. Position p's draws come from the library's deterministic generator keyed
 * by (seed, epoch, seq_index, p) alone: the same wherever and in whatever batch the sequence
 * is masked. Errors: DPT_ERR_INVALID_ARG (NULL, vocab_size too small, an id outside the
 * vocabulary, named with its position), before anything is written. */
DPT_API dpt_status dpt_mlm_mask(uint64_t seed, uint64_t epoch, uint64_t seq_index,
                                const int32_t *ids, size_t len, size_t vocab_size, int32_t *inputs,
                                int32_t *labels);

/* The sequences indices[0..count) of a split, masked with dpt_mlm_mask keyed by (seed, epoch,
 * the sequence's index in its split), into inputs and labels ([count, seq_len] each). Every
 * index is checked before anything is written (DPT_ERR_INVALID_ARG naming the first bad one). */
DPT_API dpt_status dpt_text_sequences_gather(const dpt_text_sequences *s, dpt_text_split split,
                                             const uint64_t *indices, size_t count, uint64_t seed,
                                             uint64_t epoch, int32_t *inputs, int32_t *labels);

/* ---- training on text -------------------------------------------------------------------- */

/* A dataset (include/dptrain/data.h) of one split's sequences for masked-language-model
 * training. `seqs` is borrowed: it must outlive the dataset. Its samples are the sequences
 * (count: the split's sequences; dim, cols and labels per sample: seq_len; channels and rows 1;
 * num_classes: the vocabulary size). Gathering sequence i writes the masked input ids
 * (dpt_mlm_mask keyed by (mask_seed, epoch, i)) into its seq_len float slots as int32 bit
 * patterns (4 bytes each, the layout a token model reads) and its seq_len labels
 * (DPT_MLM_IGNORE = DPT_IGNORE_INDEX where nothing is predicted) into labels[i * seq_len, ...).
 * The training split is masked anew every epoch (dpt_dataset_gather: epoch 0;
 * dpt_dataset_gather_transformed: its epoch); the validation split always as in epoch 0, one
 * fixed validation set. Data transforms (normalization, augmentation) are refused with
 * DPT_ERR_INVALID_ARG. Its fingerprint covers the split's ids, seq_len, the vocabulary size,
 * the split and mask_seed. Errors: DPT_ERR_INVALID_ARG, DPT_ERR_OUT_OF_MEMORY. */
DPT_API dpt_status dpt_dataset_from_text(const dpt_text_sequences *seqs, dpt_text_split split,
                                         uint64_t mask_seed, dpt_dataset **out);

/* The sequences of a text dataset; NULL for any other dataset. */
DPT_API const dpt_text_sequences *dpt_dataset_text_sequences(const dpt_dataset *ds);

/* The unigram baseline a masked-language model should beat: each target predicted by the
 * frequency of its token in the training split's text (special tokens left out), with add-one
 * smoothing over the vocabulary's non-special tokens, p(t) = (n_t + 1) / (N + V - 4), scored
 * on the validation split's targets masked with mask_seed as in epoch 0 (the validation set
 * dpt_dataset_from_text gives). *loss: the mean negative log-likelihood per target, in nats;
 * *perplexity: exp(*loss); *targets: the validation targets (each may be NULL). NaN loss and
 * perplexity and 0 targets when the validation split has none. */
DPT_API dpt_status dpt_text_unigram_baseline(const dpt_text_sequences *seqs, uint64_t mask_seed,
                                             double *loss, double *perplexity, size_t *targets);

#ifdef __cplusplus
}
#endif

#endif
