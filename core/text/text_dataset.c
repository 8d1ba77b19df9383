/* Text as a dataset for masked-language-model training: a split of token sequences, masked as
 * it is gathered; the unigram baseline. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/data/dataset_impl.h"
#include "dptrain/fingerprint.h"
#include "dptrain/text.h"
#include "dptrain/train.h"

#define TEXT_DATASET_TAG 0x746578742d647374ull /* "text-dst": apart from the image sets */

dpt_status dpt_dataset_from_text(const dpt_text_sequences *seqs, dpt_text_split split,
                                 uint64_t mask_seed, dpt_dataset **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dataset_from_text: out is NULL");
  *out = NULL;
  if (!seqs) return dpt_set_error(DPT_ERR_INVALID_ARG, "dataset_from_text: sequences is NULL");
  if (split != DPT_TEXT_TRAIN && split != DPT_TEXT_VALIDATION)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dataset_from_text: unknown split %d", (int)split);
  const size_t seq_len = dpt_text_sequences_len(seqs);
  const size_t count = dpt_text_sequences_count(seqs, split);
  const size_t vocab = dpt_text_sequences_vocab(seqs);
  if (vocab > (size_t)INT32_MAX)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dataset_from_text: vocabulary of %zu tokens", vocab);
  dpt_dataset *ds = calloc(1, sizeof *ds);
  if (!ds) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dataset_from_text: out of memory");
  ds->text = seqs;
  ds->split = split;
  ds->mask_seed = mask_seed;
  ds->count = count;
  ds->channels = 1;
  ds->rows = 1;
  ds->cols = seq_len;
  ds->dim = seq_len;
  ds->labels_per_sample = seq_len;
  ds->num_classes = (int)vocab;
  /* The ids of the split (sequence after sequence, contiguous), the shape, the split and the
   * masking's seed: two replicas that would mask differently differ here. */
  const int32_t *ids = count ? dpt_text_sequence(seqs, split, 0) : NULL;
  const uint64_t parts[7] = {ids ? dpt_fingerprint(ids, count * seq_len * sizeof *ids) : 0,
                             (uint64_t)count,
                             (uint64_t)seq_len,
                             (uint64_t)vocab,
                             (uint64_t)split,
                             mask_seed,
                             TEXT_DATASET_TAG};
  ds->fingerprint = dpt_fingerprint(parts, sizeof parts);
  *out = ds;
  return DPT_OK;
}

const dpt_text_sequences *dpt_dataset_text_sequences(const dpt_dataset *ds) {
  return ds ? ds->text : NULL;
}

dpt_status dpt_dataset_text_gather(const dpt_dataset *ds, const uint64_t *indices, size_t count,
                                   uint64_t epoch, float *x, int32_t *labels) {
  if (count == 0) return DPT_OK;
  if (!indices) return dpt_set_error(DPT_ERR_INVALID_ARG, "dataset_gather: indices is NULL");
  for (size_t i = 0; i < count; i++)
    if (indices[i] >= ds->count)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "dataset_gather: indices[%zu] = %" PRIu64
                           " is out of range (dataset has %zu samples)",
                           i, indices[i], ds->count);
  const size_t len = ds->dim;
  /* The validation split is one fixed set: masked as in epoch 0 whatever the epoch. */
  const uint64_t e = ds->split == DPT_TEXT_VALIDATION ? 0 : epoch;
  int32_t *buf = malloc(2 * len * sizeof *buf);
  if (!buf) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dataset_gather: out of memory");
  dpt_text_specials sp;
  dpt_text_sequences_specials(ds->text, &sp);
  dpt_status st = DPT_OK;
  for (size_t i = 0; i < count && st == DPT_OK; i++) {
    const int32_t *seq = dpt_text_sequence(ds->text, ds->split, (size_t)indices[i]);
    st = dpt_mlm_mask_specials(ds->mask_seed, e, indices[i], seq, len, (size_t)ds->num_classes, &sp,
                               buf, buf + len);
    if (st != DPT_OK) break;
    /* The ids go into the float slots bit for bit (4 bytes each), as a token model reads x. */
    if (x) memcpy(x + i * len, buf, len * sizeof *buf);
    if (labels) memcpy(labels + i * len, buf + len, len * sizeof *buf);
  }
  free(buf);
  return st;
}

/* ---- the unigram baseline ------------------------------------------------------------------ */

dpt_status dpt_text_unigram_baseline(const dpt_text_sequences *seqs, uint64_t mask_seed,
                                     double *loss, double *perplexity, size_t *targets) {
  if (!seqs) return dpt_set_error(DPT_ERR_INVALID_ARG, "unigram baseline: sequences is NULL");
  const size_t vocab = dpt_text_sequences_vocab(seqs), len = dpt_text_sequences_len(seqs);
  if (vocab <= DPT_TOKEN_BYTE0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "unigram baseline: vocabulary of %zu tokens", vocab);
  uint64_t *freq = calloc(vocab, sizeof *freq);
  int32_t *buf = malloc(2 * (len ? len : 1) * sizeof *buf);
  if (!freq || !buf) {
    free(freq);
    free(buf);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "unigram baseline: out of memory");
  }
  /* Frequencies of the training text's tokens (no [PAD], [CLS], [SEP], [MASK]). */
  dpt_text_specials sp;
  dpt_text_sequences_specials(seqs, &sp);
  uint64_t total = 0;
  const size_t ntrain = dpt_text_sequences_count(seqs, DPT_TEXT_TRAIN);
  for (size_t i = 0; i < ntrain; i++) {
    const int32_t *seq = dpt_text_sequence(seqs, DPT_TEXT_TRAIN, i);
    for (size_t p = 0; p < len; p++)
      if (seq[p] != sp.pad && seq[p] != sp.cls && seq[p] != sp.sep && seq[p] != sp.mask &&
          seq[p] >= 0 && (size_t)seq[p] < vocab) {
        freq[seq[p]]++;
        total++;
      }
  }
  /* Add-one smoothing over the vocabulary's non-special tokens. */
  const double denom = (double)total + (double)(vocab - DPT_TOKEN_BYTE0);
  double nll = 0;
  size_t n = 0;
  dpt_status st = DPT_OK;
  const size_t nval = dpt_text_sequences_count(seqs, DPT_TEXT_VALIDATION);
  for (size_t i = 0; i < nval && st == DPT_OK; i++) {
    const int32_t *seq = dpt_text_sequence(seqs, DPT_TEXT_VALIDATION, i);
    st = dpt_mlm_mask_specials(mask_seed, 0, i, seq, len, vocab, &sp, buf, buf + len);
    for (size_t p = 0; st == DPT_OK && p < len; p++) {
      const int32_t t = buf[len + p];
      if (t == DPT_MLM_IGNORE) continue;
      nll -= log(((double)freq[t] + 1.0) / denom);
      n++;
    }
  }
  free(freq);
  free(buf);
  DPT_TRY(st);
  const double l = n ? nll / (double)n : NAN;
  if (loss) *loss = l;
  if (perplexity) *perplexity = exp(l);
  if (targets) *targets = n;
  return DPT_OK;
}
