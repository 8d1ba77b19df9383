/* Internal: either tokenizer behind one handle (tokenizer.c), shared with the sequence builder
 * (text_corpus.c), which wraps a borrowed dpt_bpe in one on the stack. */
#ifndef DPTRAIN_CORE_TEXT_TOKENIZER_IMPL_H
#define DPTRAIN_CORE_TEXT_TOKENIZER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/text.h"

struct dpt_tokenizer {
  dpt_bpe *bpe; /* one of the two, the other NULL */
  dpt_wordpiece *wp;
  int owned;    /* 1: destroyed with the handle */
  int32_t *buf; /* [cap] BPE's encoding */
  size_t cap;
};

/* BPE's special ids (the fixed layout of include/dptrain/text.h). */
static inline dpt_text_specials dpt_bpe_specials(void) {
  return (dpt_text_specials){.pad = DPT_TOKEN_PAD,
                             .unk = -1,
                             .cls = DPT_TOKEN_CLS,
                             .sep = DPT_TOKEN_SEP,
                             .mask = DPT_TOKEN_MASK};
}

#endif
