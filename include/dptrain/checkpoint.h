/* dptrain: training checkpoints.
 *
 * A checkpoint is one safetensors file holding everything a run needs to continue: the model's
 * state (its parameters and buffers, named as PyTorch's state_dict, so the file loads in PyTorch
 * as it is), the optimizer's state as full tensors ("optimizer.<slot>.<parameter name>", slot
 * "momentum_buffer", or "exp_avg" and "exp_avg_sq", whatever the world size at save), and in the
 * metadata: where training stands ("dptrain.checkpoint", a JSON object of the fields of
 * dpt_checkpoint_progress), the run's configuration ("dptrain.terms"), the model
 * ("dptrain.model") and the CRC32 (zlib's) of every tensor's bytes ("dptrain.crc32", a JSON
 * object: tensor name -> 8 lower-case hex digits).
 *
 * dpt_train writes them with dpt_train_config's checkpoint fields (see train.h): a file is
 * written under a temporary name, fsync'd, renamed to "ckpt-<step, 12 digits>.safetensors" and
 * its directory fsync'd, so a crash leaves either the previous checkpoints or the new one too,
 * never a partial file under a checkpoint's name.
 */
#ifndef DPTRAIN_CHECKPOINT_H
#define DPTRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/export.h"
#include "dptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where a run stands at a checkpoint: the step boundary it was taken at. */
typedef struct dpt_checkpoint_progress {
  int64_t step;             /* steps taken, skipped ones included: the dropout counter */
  int64_t optimizer_steps;  /* updates made (skipped steps excluded): the schedule's position
                               and AdamW's bias correction */
  int64_t epoch;            /* 0-based epoch of the next global batch: the data cursor */
  int64_t batch;            /* 0-based index of the next global batch in that epoch */
  int64_t skipped_steps;    /* steps skipped for non-finite values so far */
  int64_t skipped_in_a_row; /* consecutive skipped steps up to the last one */
  int64_t rollbacks;        /* rollbacks so far */
  int64_t trained_samples;  /* training samples of every step so far */
  double epoch_loss_sum;    /* the current epoch's summed loss over its trained samples */
  int64_t epoch_samples;    /* and those samples */
  double lr_scale;          /* factor on the learning rate after rollbacks (1: none) */
  int64_t world_size;       /* replicas of the run that saved it */
  uint64_t seed;            /* the run's seed (shuffling, dropout, augmentation) */
  uint64_t state_hash;      /* dpt_fingerprint of the model's state (parameters then buffers,
                               floats as the model holds them) */
} dpt_checkpoint_progress;

/* Opens PATH, checks every tensor's CRC32 against the metadata and parses the progress. On
 * failure DPT_ERR_BAD_FORMAT (or DPT_ERR_IO) naming the file and, for a CRC mismatch or a
 * missing CRC, the tensor. progress may be NULL. */
DPT_API dpt_status dpt_checkpoint_verify(const char *path, dpt_checkpoint_progress *progress);

/* Writes the model's state of checkpoint PATH to OUT as plain weights (what dpt_model_save
 * writes: no optimizer tensors; the model and normalization metadata kept), for dptrain eval,
 * predict and PyTorch. The checkpoint is verified first. */
DPT_API dpt_status dpt_checkpoint_export(const char *path, const char *out);

/* Called for each checkpoint that dpt_checkpoint_find_latest passes over, with why. */
typedef void (*dpt_checkpoint_log_fn)(const char *path, const char *why, void *user);

/* The newest checkpoint in DIR (by the step in its name) that verifies; corrupt or partial
 * newer ones are reported through log (may be NULL) and passed over. *found is 0 (and DPT_OK
 * returned) when DIR holds no checkpoint or does not exist; DPT_ERR_BAD_FORMAT when it holds
 * checkpoints and none verifies. path receives the file's path (cap bytes). */
DPT_API dpt_status dpt_checkpoint_find_latest(const char *dir, dpt_checkpoint_log_fn log,
                                              void *user, char *path, size_t cap, int *found,
                                              dpt_checkpoint_progress *progress);

#ifdef __cplusplus
}
#endif

#endif
