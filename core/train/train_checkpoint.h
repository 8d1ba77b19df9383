/* Internal: the trainer's checkpoints, resume and rollback (train_checkpoint.c). */
#ifndef DPTRAIN_CORE_TRAIN_TRAIN_CHECKPOINT_H
#define DPTRAIN_CORE_TRAIN_TRAIN_CHECKPOINT_H

#include "core/train/replica.h"

/* Set-up, before the start-up agreement: the host copies and, on replica 0 with
 * cfg->checkpoints.resume, the newest valid checkpoint read into the model (the others get it from
 * the broadcast of the parameters). A no-op without checkpoint_dir. */
dpt_status dpt_train_ckpt_setup(replica *r, replica_state *s);
/* After the parameters' broadcast: replica 0's resumed progress and optimizer state to every
 * replica (s->first_*, s->t, the optimizer's steps, state and rate factor). */
dpt_status dpt_train_ckpt_share_resumed(replica *r, replica_state *s);
/* A checkpoint at the step boundary, of the state, counters and s->at; none when this step's
 * is taken already. Every replica joins (the sharded optimizer state is gathered); replica 0
 * copies to host memory and a thread writes the file. wait: 1 to wait for the file. */
dpt_status dpt_train_ckpt_save(replica *r, replica_state *s, int wait);
/* This replica's own state, as it stands, written as the checkpoint of step s->t.step with no
 * collective and no thread (a rank whose job failed; the full step under MPI only: every other
 * replica has no copy). Nothing when that step's file exists (*wrote 0); else *wrote 1 and
 * path receives the file. */
dpt_status dpt_train_ckpt_write_own(const replica *r, replica_state *s, char *path, size_t cap,
                                    int *wrote);
/* Reloads the newest checkpoint on every replica after a non-finite step (see
 * DPT_NONFINITE_ROLLBACK); the data cursor s->at goes on past the step that diverged. */
dpt_status dpt_train_ckpt_rollback(replica *r, replica_state *s);
/* Replica 0: a writer that is done is joined (its line logged; a failure kept for the next
 * exchange). No collective: called after every step. */
void dpt_train_ckpt_poll(const replica *r, replica_state *s);
/* Replica 0: waits for a writer in flight (its outcome kept for the next exchange). */
void dpt_train_ckpt_settle(const replica *r, replica_state *s);
/* The newest checkpoint's path, on replica 0 (NULL: none, or another replica). */
const char *dpt_train_ckpt_path(const replica_state *s);
/* 1 when the run has a checkpoint to roll back to (the same on every replica). */
int dpt_train_ckpt_taken(const replica_state *s);
void dpt_train_ckpt_free(replica_state *s);

#endif
