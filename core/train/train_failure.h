/* Internal: the record a failed run leaves in its checkpoint directory, a survivor's checkpoint,
 * and the injected failure of the tests (train_failure.c). */
#ifndef DPTRAIN_CORE_TRAIN_TRAIN_FAILURE_H
#define DPTRAIN_CORE_TRAIN_TRAIN_FAILURE_H

#include "core/train/replica.h"

/* With cfg->checkpoints.checkpoint_dir: DPT_TRAIN_FAILURE_FILE there (dptrain/train.h) for the
 * failure st (message msg) that ended replica `replica` of rank `rank` after `step` steps. Only
 * where the failure happened: nothing for DPT_OK, a stop request or a failure seen on another
 * replica, and the failures every replica shares from rank 0 only. Best effort: a record that
 * cannot be written is left out. */
void dpt_train_failure_record(const dpt_train_config *cfg, int rank, int replica, int64_t step,
                              dpt_status st, const char *msg);

/* After the exchange failure st (DPT_ERR_TIMEOUT: a peer past the deadline; DPT_ERR_COMM: a
 * peer gone) ended this rank's run: with the full step under MPI the rank holds the whole state
 * of the last completed step and writes it as a checkpoint before it exits, with no collective,
 * unless the failure landed inside a step's update (the state is no step's) or the file exists
 * already. Otherwise one line says why not. Nothing for other failures. */
void dpt_train_survive(const replica *r, replica_state *s, dpt_status st);

/* DPT_FAULT_EXIT_AT_STEP (base/env.h): after that step, before its checkpoint, replica 0 waits
 * for the checkpoint being written and ends the process with status 137, as a killed rank
 * would; with DPT_FAULT_ONCE_FILE only while that file does not exist. */
void dpt_train_fault_point(const replica *r, replica_state *s);

#endif
