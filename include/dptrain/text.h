/* dptrain: text for masked-language-model pretraining: a byte-level BPE tokenizer and BERT's
 * WordPiece tokenizer, text corpora (plain or JSON lines), fixed-length token sequences with a
 * train/validation split, and BERT's masking.
 *
 * BPE token ids (a fixed layout; docs/text.md; a WordPiece vocabulary names its own):
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

/* dpt_text_corpus_load, where a file whose name ends in ".jsonl" (given, or found in a
 * directory) holds JSON lines: each line that is not blank is a JSON object, and its member
 * text_field (NULL: "text"), a string, is one document (no "%" cuts). A line that is not JSON,
 * not an object, or lacks the field as a string is DPT_ERR_BAD_FORMAT naming file:line. */
DPT_API dpt_status dpt_text_corpus_load_field(const char *const *paths, size_t count,
                                              const char *text_field, dpt_text_corpus **out);

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

/* ---- WordPiece (BERT's tokenizer) --------------------------------------------------------- */

#define DPT_WORDPIECE_MAX_CHARS 100 /* a longer word (in code points) is [UNK] */

/* The ids of the special tokens of a vocabulary. BPE: [PAD] 0, [CLS] 1, [SEP] 2, [MASK] 3 and
 * no [UNK] (-1); WordPiece: found by name ([PAD] must be 0). */
typedef struct dpt_text_specials {
  int32_t pad, unk, cls, sep, mask;
} dpt_text_specials;

typedef struct dpt_wordpiece dpt_wordpiece;

/* Reads a WordPiece vocabulary: one token per line ("\n" or "\r\n"), token t on line t + 1,
 * as BERT's vocab.txt. It must hold [PAD] (at id 0: the model masks keys holding id 0),
 * [UNK], [CLS], [SEP] and [MASK]. The vocabulary is uncased (text lowercased and accents
 * stripped before the pieces) unless a token outside "[...]" holds an upper- or titlecase
 * letter. DPT_ERR_IO (cannot read) or DPT_ERR_BAD_FORMAT naming the file and the line (an
 * empty, repeated or non-UTF-8 token, a special token missing). */
DPT_API dpt_status dpt_wordpiece_load(const char *path, dpt_wordpiece **out);

/* The same from `count` tokens in memory (id = index); origin names them in messages. */
DPT_API dpt_status dpt_wordpiece_from_tokens(const char *const *tokens, size_t count,
                                             const char *origin, dpt_wordpiece **out);

/* Frees a tokenizer; NULL does nothing. */
DPT_API void dpt_wordpiece_destroy(dpt_wordpiece *wp);

/* Tokens; 1 for an uncased vocabulary; the special ids; a 64-bit fingerprint of the tokens in
 * order. 0 (nothing) for NULL. */
DPT_API size_t dpt_wordpiece_vocab_size(const dpt_wordpiece *wp);
DPT_API int dpt_wordpiece_lowercase(const dpt_wordpiece *wp);
DPT_API void dpt_wordpiece_specials(const dpt_wordpiece *wp, dpt_text_specials *sp);
DPT_API uint64_t dpt_wordpiece_fingerprint(const dpt_wordpiece *wp);

/* The id of a token, -1 when it is not in the vocabulary. */
DPT_API int32_t dpt_wordpiece_id(const dpt_wordpiece *wp, const char *token);

/* Token id's bytes (borrowed, not NUL-terminated). DPT_ERR_INVALID_ARG outside the vocabulary. */
DPT_API dpt_status dpt_wordpiece_token(const dpt_wordpiece *wp, int32_t id, const char **bytes,
                                       size_t *len);

/* Writes the vocabulary, one token per line (through "<path>.tmp", renamed). */
DPT_API dpt_status dpt_wordpiece_save(const dpt_wordpiece *wp, const char *path);

/* Encodes len bytes of text with BERT's rules (docs/text.md): the basic tokenizer (drop NUL,
 * U+FFFD, invalid UTF-8 and C* characters but whitespace; whitespace splits words; CJK
 * ideographs stand alone; uncased: lowercase, NFD, nonspacing marks dropped; punctuation
 * stands alone), then per word the longest vocabulary token from its start, then the longest
 * "##" token from where that ended, and so on; a word of more than DPT_WORDPIECE_MAX_CHARS
 * characters, or one a position of which no token matches, is [UNK]. *ids (borrowed from the
 * tokenizer, valid until its next encoding) gets *count ids. One thread at a time. */
DPT_API dpt_status dpt_wordpiece_encode(dpt_wordpiece *wp, const void *text, size_t len,
                                        const int32_t **ids, size_t *count);

/* ---- either tokenizer ----------------------------------------------------------------------- */

typedef struct dpt_tokenizer dpt_tokenizer;

/* Reads a vocabulary file and picks the tokenizer by its format: JSON (the first byte that is
 * not blank is "{") is dptrain's BPE (dpt_bpe_load), anything else a WordPiece vocabulary
 * (dpt_wordpiece_load). Errors as theirs. */
DPT_API dpt_status dpt_tokenizer_load(const char *path, dpt_tokenizer **out);

/* A tokenizer over bpe, which it takes over (freed with it, and on failure). */
DPT_API dpt_status dpt_tokenizer_from_bpe(dpt_bpe *bpe, dpt_tokenizer **out);

/* Frees a tokenizer and what it holds; NULL does nothing. */
DPT_API void dpt_tokenizer_destroy(dpt_tokenizer *tok);

/* The BPE or the WordPiece tokenizer inside (NULL when it is the other kind, or tok is NULL). */
DPT_API dpt_bpe *dpt_tokenizer_bpe(const dpt_tokenizer *tok);
DPT_API dpt_wordpiece *dpt_tokenizer_wordpiece(const dpt_tokenizer *tok);

/* Tokens; special ids; fingerprint (dpt_bpe_fingerprint or dpt_wordpiece_fingerprint). */
DPT_API size_t dpt_tokenizer_vocab_size(const dpt_tokenizer *tok);
DPT_API void dpt_tokenizer_specials(const dpt_tokenizer *tok, dpt_text_specials *sp);
DPT_API uint64_t dpt_tokenizer_fingerprint(const dpt_tokenizer *tok);

/* Encodes len bytes: *ids (borrowed, valid until the next encoding) gets *count ids. */
DPT_API dpt_status dpt_tokenizer_encode(dpt_tokenizer *tok, const void *text, size_t len,
                                        const int32_t **ids, size_t *count);

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

/* dpt_text_sequences_build with either tokenizer: [CLS], [SEP] and [PAD] are its special ids. */
DPT_API dpt_status dpt_text_sequences_build_with(const dpt_text_corpus *corpus, dpt_tokenizer *tok,
                                                 size_t seq_len, size_t val_every,
                                                 dpt_text_sequences **out);

/* The special ids the sequences were built with (BPE's when s is NULL). */
DPT_API void dpt_text_sequences_specials(const dpt_text_sequences *s, dpt_text_specials *sp);

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

/* dpt_mlm_mask for any vocabulary: the positions holding sp's [PAD], [CLS], [SEP] or [MASK]
 * are never chosen, a chosen position's input is sp->mask (0.8), a token drawn uniformly from
 * the vocabulary less those four (0.1), or its own id. With BPE's specials it is dpt_mlm_mask
 * draw for draw. Errors also for special ids outside the vocabulary or not distinct. */
DPT_API dpt_status dpt_mlm_mask_specials(uint64_t seed, uint64_t epoch, uint64_t seq_index,
                                         const int32_t *ids, size_t len, size_t vocab_size,
                                         const dpt_text_specials *sp, int32_t *inputs,
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
