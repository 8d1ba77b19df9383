/* What dptrain run learns of an attempt from the checkpoint directory (progress.c): the newest
 * checkpoint's step, and the failure record the trainer leaves there. */
#ifndef DPTRAIN_TOOLS_RUN_PROGRESS_H
#define DPTRAIN_TOOLS_RUN_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

/* The DIR of "--checkpoint-dir DIR" or "--checkpoint-dir=DIR" among argv[0..argc), the last
 * one given; NULL when none is. */
const char *dpt_run_find_ckpt_dir(int argc, char **argv);

/* The step of the newest valid checkpoint in dir (the one --resume takes), 0 when there is
 * none. */
int64_t dpt_run_newest_step(const char *dir);

/* The trainer's failure record (DPT_TRAIN_FAILURE_FILE, dptrain/train.h). */
typedef struct run_failure {
  int rank, replica; /* where it happened */
  int disk_full;     /* a write failed with ENOSPC */
  char text[640];    /* "<status>: <message>", on one line */
} run_failure;

/* Removes the record, so that the next attempt's is its own. */
void dpt_run_clear_failure(const char *dir);
/* Reads the record: 1, or 0 when there is none (or it does not parse). */
int dpt_run_read_failure(const char *dir, run_failure *f);

#endif
