/* Data-parallel evaluation (core/train/evaluate.h): each replica scores its share, the sums meet
 * at an exchange; for interaction records also the exact AUC and logloss over every replica's
 * records together. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "core/train/batch.h"
#include "core/train/evaluate.h"
#include "dptrain/metrics.h"
#include "dptrain/train.h"

/* Data-parallel evaluation: replica r takes a contiguous shard of the test set. */
dpt_status dpt_train_evaluate(replica *r, replica_state *s, double *loss, double *accuracy) {
  const dpt_dataset *ds = r->cfg->data.test;
  /* The test set is normalized like the training set, never augmented. */
  dpt_data_transform norm = r->cfg->data.transform;
  norm.crop_pad = 0;
  norm.hflip = 0;
  size_t start, count;
  DPT_TRY(dpt_batch_split(dpt_dataset_count(ds), r->count, r->index, &start, &count));
  step_stats mine, sum;
  memset(&mine, 0, sizeof mine);
  mine.samples = (int64_t)count;
  dpt_status st = s->pending;
  for (size_t done = 0; done < count && st == DPT_OK;) {
    size_t b = count - done < s->max_micro ? count - done : s->max_micro;
    for (size_t i = 0; i < b; ++i)
      s->idx[i] = start + done + i;
    double l = 0;
    int64_t c = 0;
    st = dpt_train_load_batch(s, ds, s->idx, b, &norm, 0);
    if (st == DPT_OK) mine.targets += dpt_train_count_targets(s->hy, b * s->labels);
    if (st == DPT_OK) st = dpt_model_evaluate(s->model, s->x, s->y, b, &l, &c);
    mine.loss_sum += l;
    mine.correct += c;
    done += b;
  }
  /* Every replica joins the exchange, even after a local failure, so nobody waits forever. */
  DPT_TRY(dpt_train_exchange_stats(r, s, &mine, &sum, st, "evaluation"));
  /* Per target: per sample for a classifier, per masked token for a token model. */
  *loss = sum.targets ? sum.loss_sum / (double)sum.targets : NAN;
  *accuracy = sum.targets ? (double)sum.correct / (double)sum.targets : NAN;
  return DPT_OK;
}

/* Scores this replica's validation records (s->ltest) in batches: logits[n], labels[n]; the
 * loss (binary cross-entropy of the logit, in double) and correct count into mine. */
static dpt_status score_records(replica_state *s, float *logits, float *labels, step_stats *mine) {
  const dpt_interactions *d = s->ltest;
  const size_t n = dpt_interactions_local_records(d);
  dpt_status st = s->pending;
  for (size_t done = 0; done < n && st == DPT_OK;) {
    const size_t b = n - done < s->max_micro ? n - done : s->max_micro;
    for (size_t i = 0; i < b; ++i)
      s->idx[i] = done + i;
    st = dpt_train_load_records(s, d, s->idx, b);
    if (st == DPT_OK) st = dpt_model_logits(s->model, s->x, b, logits + done);
    for (size_t i = 0; i < b && st == DPT_OK; ++i) {
      const double z = logits[done + i], y = s->hy[i];
      labels[done + i] = (float)y;
      mine->loss_sum += (z > 0 ? z : 0) - z * y + log1p(exp(-fabs(z)));
      mine->correct += (z > 0) == (y > 0.5);
    }
    done += b;
  }
  mine->samples = mine->targets = (int64_t)n;
  return st;
}

/* Data-parallel evaluation on per-replica validation records: each replica scores its own,
 * the loss and accuracy are summed at an exchange, and the exact AUC (of the logits) and the
 * logloss (of the probabilities) are computed over every replica's records together. */
dpt_status dpt_train_evaluate_records(replica *r, replica_state *s, dpt_train_report *rep) {
  const size_t n = dpt_interactions_local_records(s->ltest);
  float *logits = malloc((n ? n : 1) * sizeof(float)),
        *labels = malloc((n ? n : 1) * sizeof(float));
  step_stats mine, sum;
  memset(&mine, 0, sizeof mine);
  dpt_status st = logits && labels
                      ? score_records(s, logits, labels, &mine)
                      : dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "evaluation: %zu records", n);
  /* Every replica joins the exchange, even after a local failure, so nobody waits forever. */
  st = dpt_train_exchange_stats(r, s, &mine, &sum, st, "evaluation");
  if (st == DPT_OK) {
    rep->test_loss = sum.targets ? sum.loss_sum / (double)sum.targets : NAN;
    rep->test_accuracy = sum.targets ? (double)sum.correct / (double)sum.targets : NAN;
    /* Without both classes the AUC is undefined: NaN on every replica alike (it is decided
     * from the gathered pairs). */
    st = dpt_auc_comm(r->comm, logits, labels, n, &rep->test_auc);
    if (st == DPT_ERR_INVALID_ARG) st = DPT_OK;
  }
  for (size_t i = 0; st == DPT_OK && i < n; ++i) /* the probabilities, in place */
    logits[i] = 1.0f / (1.0f + expf(-logits[i]));
  if (st == DPT_OK) {
    /* A non-finite probability (a diverged model) makes the logloss NaN, as the loss is. */
    st = dpt_logloss_comm(r->comm, logits, labels, n, &rep->test_logloss);
    if (st == DPT_ERR_INVALID_ARG) {
      rep->test_logloss = NAN;
      st = DPT_OK;
    }
  }
  free(logits);
  free(labels);
  return st;
}
