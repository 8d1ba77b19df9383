/* Internal: one synchronized step (step.c). */
#ifndef DPTRAIN_CORE_TRAIN_STEP_H
#define DPTRAIN_CORE_TRAIN_STEP_H

#include "core/train/replica.h"

/* What the replicas decided together at a step's exchange, beyond the step itself. */
typedef struct step_outcome {
  int rollback; /* the step was not finite and the policy rolls back */
  int ckpt_due; /* replica 0's clock says a checkpoint is due */
  int64_t stop; /* a replica was asked to stop (its request, e.g. a signal number) */
  /* The step's figures for the run's log (the same on every replica but compute): */
  int given_up;     /* the step was not finite: skipped, or rolled back with rollback */
  double loss;      /* the global batch's mean loss over its targets (NaN: no targets) */
  double grad_norm; /* the reduced gradient's norm where clipping computed it, else NaN */
  double compute;   /* this replica's batch loading, forward and backward, seconds */
  int64_t samples;  /* samples of the global batch */
} step_outcome;

/* One synchronized step on global batch k of the epoch (see train.h). Adds the batch's loss
 * and targets to *loss and *samples unless the step was given up. */
dpt_status dpt_train_step(replica *r, replica_state *s, int64_t epoch, size_t k, double *loss,
                          int64_t *samples, step_outcome *out);

#endif
