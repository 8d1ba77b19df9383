/* Vocabularies made for `dptrain tokenize` and `dptrain train --model bert`: BPE training on a
 * corpus (bpe_train.c) and the vocabulary file it is saved as (bpe_save.c). The library only
 * reads them (dptrain/text.h). */
#ifndef DPTRAIN_TOOLS_PREP_VOCAB_H
#define DPTRAIN_TOOLS_PREP_VOCAB_H

#include <stddef.h>

#include "dptrain/text.h"

/* Learns a vocabulary of at most vocab_size tokens (>= DPT_TOKEN_FIRST_MERGE, at most
 * DPT_BPE_MAX_VOCAB) from every document of the corpus: the words are counted, then the most
 * frequent adjacent pair of tokens (counted over words times their frequency) becomes the next
 * merge, ties going to the lowest (left, right) ids, until the vocabulary is full or no pair
 * occurs twice. Errors: DPT_ERR_INVALID_ARG, DPT_ERR_OUT_OF_MEMORY. */
dpt_status dpt_bpe_train(const dpt_text_corpus *corpus, size_t vocab_size, dpt_bpe **out);

/* Writes the vocabulary as JSON (docs/text.md: format "dptrain-bpe", version 1, the special
 * tokens, the merges in order), through "<path>.tmp" renamed over path. DPT_ERR_IO naming the
 * file on failure. */
dpt_status dpt_bpe_save(const dpt_bpe *bpe, const char *path);

#endif
