/* Internal: the run's log directory (cfg->log_dir) as the trainer writes it (train_runlog.c):
 * the settings at the start, a record per optimizer step and per epoch's evaluation, on
 * replica 0 only (core/log/run_log.h writes the files). */
#ifndef DPTRAIN_CORE_TRAIN_TRAIN_RUNLOG_H
#define DPTRAIN_CORE_TRAIN_TRAIN_RUNLOG_H

#include "core/train/replica.h"
#include "core/train/step.h"

/* What a step's record needs from before the step: the totals and the learning rate it uses. */
typedef struct runlog_mark {
  run_totals t;
  double lr, start;
} runlog_mark;

/* Collective, after a resume is known: replica 0 opens the log (appending when the run
 * resumed at a step > 0) and every replica learns whether it could; a failure stops the run
 * before its first step. Nothing without cfg->log_dir. */
dpt_status dpt_train_runlog_start(replica *r, replica_state *s);
/* Before a step: what its record needs (replica 0 with a log; a no-op elsewhere). */
void dpt_train_runlog_mark(const replica_state *s, runlog_mark *m);
/* After a step (before a rollback replaces the totals): its line and event. A failed write is
 * logged and ends the log, not the run. */
void dpt_train_runlog_step(const replica *r, replica_state *s, int64_t epoch, const runlog_mark *m,
                           const step_outcome *o);
/* After an epoch's evaluation: its line and event (none without a test set). */
void dpt_train_runlog_eval(const replica *r, replica_state *s, const dpt_train_report *rep);
/* Closes the log; safe without one. */
void dpt_train_runlog_free(replica_state *s);

#endif
