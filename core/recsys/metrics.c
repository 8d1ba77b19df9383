/* Evaluation metrics: exact AUC, logloss, recall@k, and their data-parallel forms
 * (include/dptrain/metrics.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "dptrain/metrics.h"
#include "dptrain/comm.h"

typedef struct pair {
  float score, label;
} pair;

static int cmp_score(const void *a, const void *b) {
  const float x = ((const pair *)a)->score, y = ((const pair *)b)->score;
  return (x > y) - (x < y);
}

/* AUC of pairs (sorted here in place); labels < 0 are padding and skipped. */
static dpt_status auc_pairs(pair *p, size_t n, double *out) {
  *out = NAN;
  for (size_t i = 0; i < n; i++)
    if (!isfinite(p[i].score))
      return dpt_set_error(DPT_ERR_INVALID_ARG, "AUC: score %zu is %g", i, (double)p[i].score);
  qsort(p, n, sizeof *p, cmp_score);
  long double pos_total = 0, neg_total = 0, sum = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    long double pos = 0, neg = 0;
    for (; j < n && p[j].score == p[i].score; j++) {
      if (p[j].label < 0) continue;
      if (p[j].label >= 0.5f)
        pos += 1;
      else
        neg += 1;
    }
    sum += pos * neg_total + 0.5L * pos * neg; /* the negatives below, half of those tied */
    pos_total += pos;
    neg_total += neg;
    i = j;
  }
  if (pos_total == 0 || neg_total == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "AUC needs both classes: %.0Lf positives, %.0Lf negatives", pos_total,
                         neg_total);
  *out = (double)(sum / (pos_total * neg_total));
  return DPT_OK;
}

dpt_status dpt_auc(const float *scores, const float *labels, size_t n, double *out) {
  if (!out || (n && (!scores || !labels)))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "AUC: NULL argument");
  pair *p = malloc((n ? n : 1) * sizeof *p);
  if (!p) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "AUC: %zu pairs", n);
  for (size_t i = 0; i < n; i++)
    p[i] = (pair){scores[i], labels[i] >= 0.5f ? 1.0f : 0.0f};
  const dpt_status st = auc_pairs(p, n, out);
  free(p);
  return st;
}

/* Sum of the clamped cross-entropies, or NaN for a NaN probability (*bad its index). */
static double logloss_sum(const float *probs, const float *labels, size_t n, size_t *bad) {
  double sum = 0;
  for (size_t i = 0; i < n; i++) {
    double q = probs[i];
    if (isnan(q)) {
      *bad = i;
      return NAN;
    }
    q = q < DPT_LOGLOSS_EPS ? DPT_LOGLOSS_EPS : q > 1 - DPT_LOGLOSS_EPS ? 1 - DPT_LOGLOSS_EPS : q;
    sum -= labels[i] >= 0.5f ? log(q) : log1p(-q);
  }
  return sum;
}

dpt_status dpt_logloss(const float *probs, const float *labels, size_t n, double *out) {
  if (!out || (n && (!probs || !labels)))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "logloss: NULL argument");
  *out = NAN;
  if (n == 0) return dpt_set_error(DPT_ERR_INVALID_ARG, "logloss: no probabilities");
  size_t bad = 0;
  const double sum = logloss_sum(probs, labels, n, &bad);
  if (isnan(sum)) return dpt_set_error(DPT_ERR_INVALID_ARG, "logloss: probability %zu is NaN", bad);
  *out = sum / (double)n;
  return DPT_OK;
}

typedef struct item {
  int64_t group;
  float score, label;
} item;

/* By group, then score descending, then negatives first. */
static int cmp_item(const void *a, const void *b) {
  const item *x = a, *y = b;
  if (x->group != y->group) return x->group < y->group ? -1 : 1;
  if (x->score != y->score) return x->score > y->score ? -1 : 1;
  return (x->label > y->label) - (x->label < y->label);
}

dpt_status dpt_recall_at_k(const float *scores, const float *labels, const int64_t *groups,
                           size_t n, size_t k, double *out) {
  if (!out || (n && (!scores || !labels || !groups)))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "recall@k: NULL argument");
  *out = NAN;
  if (k == 0) return dpt_set_error(DPT_ERR_INVALID_ARG, "recall@k: k is 0");
  for (size_t i = 0; i < n; i++)
    if (isnan(scores[i]))
      return dpt_set_error(DPT_ERR_INVALID_ARG, "recall@k: score %zu is NaN", i);
  item *it = malloc((n ? n : 1) * sizeof *it);
  if (!it) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "recall@k: %zu items", n);
  for (size_t i = 0; i < n; i++)
    it[i] = (item){groups[i], scores[i], labels[i] >= 0.5f ? 1.0f : 0.0f};
  qsort(it, n, sizeof *it, cmp_item);
  double total = 0;
  size_t counted = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i, pos = 0, hits = 0;
    for (; j < n && it[j].group == it[i].group; j++)
      if (it[j].label > 0) {
        pos++;
        if (j - i < k) hits++;
      }
    if (pos) {
      total += (double)hits / (double)(pos < k ? pos : k);
      counted++;
    }
    i = j;
  }
  free(it);
  if (!counted) return dpt_set_error(DPT_ERR_INVALID_ARG, "recall@k: no group holds a positive");
  *out = total / (double)counted;
  return DPT_OK;
}

dpt_status dpt_auc_comm(dpt_comm *comm, const float *scores, const float *labels, size_t n,
                        double *out) {
  if (!comm || !out || (n && (!scores || !labels)))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "AUC: NULL argument");
  *out = NAN;
  const int world = dpt_comm_size(comm);
  /* Every rank joins every collective: a rank short of memory says so in the agreement before
   * the pairs' allgather instead of leaving the others waiting in it. */
  uint64_t mine = n, inline_counts[64];
  uint64_t *counts = world <= 64 ? inline_counts : malloc((size_t)world * sizeof *counts);
  dpt_status st = counts ? dpt_allgather_host(comm, &mine, sizeof mine, counts)
                         : dpt_comm_agree_ready(comm, DPT_ERR_OUT_OF_MEMORY,
                                                "AUC: out of host "
                                                "memory for the counts",
                                                "rank", NULL);
  uint64_t max = 0;
  for (int r = 0; counts && r < world; r++)
    max = counts[r] > max ? counts[r] : max;
  if (counts != inline_counts) free(counts);
  if (st != DPT_OK) return st; /* also when counts could not be had */
  const size_t m = max ? (size_t)max : 1;
  const int fits = m <= SIZE_MAX / sizeof(pair) / (size_t)world;
  pair *send = fits ? malloc(m * sizeof *send) : NULL;
  pair *all = fits ? malloc((size_t)world * m * sizeof *all) : NULL;
  char why[96] = "";
  if (!send || !all)
    snprintf(why, sizeof why, "AUC: out of host memory for %d x %zu pairs", world, m);
  st = dpt_comm_agree_ready(comm, why[0] ? DPT_ERR_OUT_OF_MEMORY : DPT_OK, why, "rank", NULL);
  if (st != DPT_OK) {
    free(send);
    free(all);
    return st;
  }
  for (size_t i = 0; i < m; i++)
    send[i] = i < n ? (pair){scores[i], labels[i] >= 0.5f ? 1.0f : 0.0f} : (pair){0, -1.0f};
  st = dpt_allgather_host(comm, send, m * sizeof *send, all);
  if (st == DPT_OK) st = auc_pairs(all, (size_t)world * m, out);
  free(send);
  free(all);
  return st;
}

dpt_status dpt_logloss_comm(dpt_comm *comm, const float *probs, const float *labels, size_t n,
                            double *out) {
  if (!comm || !out || (n && (!probs || !labels)))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "logloss: NULL argument");
  *out = NAN;
  const int world = dpt_comm_size(comm);
  size_t bad = 0;
  double mine[2] = {logloss_sum(probs, labels, n, &bad), (double)n};
  double *all = malloc((size_t)world * sizeof mine);
  if (!all) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "logloss");
  dpt_status st = dpt_allgather_host(comm, mine, sizeof mine, all);
  double sum = 0, count = 0;
  for (int r = 0; st == DPT_OK && r < world; r++) {
    sum += all[2 * r];
    count += all[2 * r + 1];
  }
  free(all);
  if (st != DPT_OK) return st;
  if (isnan(sum)) return dpt_set_error(DPT_ERR_INVALID_ARG, "logloss: a NaN probability");
  if (count == 0) return dpt_set_error(DPT_ERR_INVALID_ARG, "logloss: no probabilities");
  *out = sum / count;
  return DPT_OK;
}
