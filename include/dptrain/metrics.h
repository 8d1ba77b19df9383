/* dptrain: evaluation metrics for click and link prediction: exact AUC, logloss, recall@k, and
 * their data-parallel forms (docs/recommendation.md, *Metrics*).
 *
 * Labels are 0 or 1 as floats (a label >= 0.5 counts as positive). Scores are any finite
 * floats where a higher score means "more likely positive"; logloss wants probabilities.
 *
 * AUC is exact: the probability that a random positive scores above a random negative, a tie
 * counting one half (the Mann-Whitney U statistic over P * N). The scores are sorted
 * (O(n log n)); tie groups give each positive the negatives below it plus half of the
 * negatives tied with it. It is undefined without both classes: then the call fails with
 * DPT_ERR_INVALID_ARG ("AUC needs both classes: ...") and *out is NaN.
 *
 * Data-parallel: AUC needs the global ranking, so dpt_auc_comm gathers every rank's (score,
 * label) pairs to every rank (an all-gather padded to the largest rank's count, 8 bytes per
 * pair) and computes the same exact AUC on each: memory 8 * R * max_n bytes per rank, so 10^8
 * evaluation records over 8 ranks take 800 MB each. Merging per-rank score histograms would be
 * cheaper but approximate (bucket ties); exact was chosen so the number does not depend on the
 * world size. Logloss is a sum and a count per rank, all-gathered and added in rank order.
 */
#ifndef DPTRAIN_METRICS_H
#define DPTRAIN_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/communicator.h"
#include "dptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Probabilities are clamped to [DPT_LOGLOSS_EPS, 1 - DPT_LOGLOSS_EPS] by dpt_logloss. */
#define DPT_LOGLOSS_EPS 1e-7

/* Exact AUC of n (score, label) pairs. DPT_ERR_INVALID_ARG (with *out NaN) for a non-finite
 * score, or when the pairs lack positives or negatives (n == 0 included). */
DPT_API dpt_status dpt_auc(const float *scores, const float *labels, size_t n, double *out);

/* Mean binary cross-entropy -[y log p + (1 - y) log(1 - p)] of n probabilities, each clamped
 * (DPT_LOGLOSS_EPS). DPT_ERR_INVALID_ARG (NaN) for n == 0 or a NaN probability. */
DPT_API dpt_status dpt_logloss(const float *probs, const float *labels, size_t n, double *out);

/* Recall@k over groups (e.g. one group per source package of a link-prediction ranking):
 * groups[i] names item i's group (items of a group need not be adjacent). Within a group the
 * items are ranked by score, highest first, a tie putting negatives first (so a constant
 * scorer earns nothing from ties); the group's recall is the number of positives among its
 * first k items over min(positives, k) (a perfect ranking scores 1), and the result is the
 * mean over groups holding at least one positive. DPT_ERR_INVALID_ARG (NaN) when k == 0, a
 * score is NaN, or no group holds a positive. */
DPT_API dpt_status dpt_recall_at_k(const float *scores, const float *labels, const int64_t *groups,
                                   size_t n, size_t k, double *out);

/* The AUC of every rank's pairs together (see the top of this header): a collective, every rank
 * calls it and gets the same *out. */
DPT_API dpt_status dpt_auc_comm(dpt_comm *comm, const float *scores, const float *labels, size_t n,
                                double *out);

/* The logloss of every rank's probabilities together: a collective, the same *out everywhere. */
DPT_API dpt_status dpt_logloss_comm(dpt_comm *comm, const float *probs, const float *labels,
                                    size_t n, double *out);

#ifdef __cplusplus
}
#endif

#endif
