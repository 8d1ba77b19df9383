/* Internal: checkpoint files (core/io/checkpoint.c). The public side is dptrain/checkpoint.h. */
#ifndef DPTRAIN_CORE_CHECKPOINT_H
#define DPTRAIN_CORE_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/checkpoint.h"
#include "dptrain/safetensors.h"

/* Metadata keys of a checkpoint (besides the model file's "format", "producer", "dptrain.model",
 * "dptrain.mean", "dptrain.std"). */
#define DPT_CKPT_PROGRESS_KEY "dptrain.checkpoint"
#define DPT_CKPT_TERMS_KEY    "dptrain.terms"
#define DPT_CKPT_CRC_KEY      "dptrain.crc32"
#define DPT_CKPT_OPTIONS_KEY  "dptrain.options" /* cfg->options_json, when given */

/* The progress as the JSON object stored under DPT_CKPT_PROGRESS_KEY (malloc'd), and back.
 * 64-bit integers are written as decimal strings where they may exceed 2^53 (seed,
 * state_hash: 16 hex digits); doubles with 17 significant digits, so they come back bit for
 * bit. Parsing rejects a missing field, naming it. */
dpt_status dpt_ckpt_progress_to_json(const dpt_checkpoint_progress *p, char **out);
dpt_status dpt_ckpt_progress_from_json(const char *json, dpt_checkpoint_progress *p);

/* The file name of the checkpoint at `step` in dir: "<dir>/ckpt-<step, 12 digits>.safetensors". */
void dpt_ckpt_path(const char *dir, int64_t step, char *out, size_t cap);

/* Writes a checkpoint: the tensors (borrowed), the metadata pairs (NULL-terminated key, value
 * list, borrowed; the progress is added under DPT_CKPT_PROGRESS_KEY and the CRC32s under
 * DPT_CKPT_CRC_KEY by this call) to dpt_ckpt_path(dir, progress->step) through a temporary file
 * in dir that is fsync'd and renamed, then dir is fsync'd; then removes the oldest checkpoints
 * of dir beyond the newest `keep` (keep >= 1), and any temporary file a killed writer left.
 * Creates dir (one level) when missing. path receives the file's path. Safe to call from a
 * thread other than the one training (no global state). */
dpt_status dpt_ckpt_write(const char *dir, const dpt_checkpoint_progress *progress,
                          const dpt_st_tensor *tensors, size_t count,
                          const char *const *metadata_kv, int keep, char *path, size_t cap);

/* One run per directory: takes an exclusive lock (flock) on "<dir>/lock", which the kernel
 * drops when the process ends, and writes "host pid" into it; *fd receives the lock's file.
 * DPT_ERR_IO naming the holder (host, pid) when another process holds it. Unlock with
 * dpt_ckpt_unlock_dir (fd < 0: nothing). */
dpt_status dpt_ckpt_lock_dir(const char *dir, int *fd);
void dpt_ckpt_unlock_dir(int fd);

/* Before a run writes into dir: makes it (one level) when missing and checks that it is a
 * writable directory; *newest receives the step of its newest checkpoint (by name), -1 when it
 * holds none. */
dpt_status dpt_ckpt_prepare_dir(const char *dir, int64_t *newest);

/* Opens a checkpoint for reading after dpt_checkpoint_verify's checks; *st is the open file
 * (dpt_safetensors_close it). */
dpt_status dpt_ckpt_open(const char *path, dpt_safetensors **st, dpt_checkpoint_progress *progress);

#endif
