/* `dptrain checkpoint export --format hf` (hf_export.c): dptrain's BERT as a Hugging Face
 * directory. */
#ifndef DPTRAIN_TOOLS_HF_EXPORT_H
#define DPTRAIN_TOOLS_HF_EXPORT_H

#include <stddef.h>

#include "dptrain/status.h"

/* Writes dir (config.json, model.safetensors, the vocabulary) from `weights`, a BERT weights
 * file (dptrain train --save-weights, or a checkpoint exported to plain weights), and its
 * vocabulary `vocab` (NULL: beside the weights, W.vocab.txt or W.vocab.json). Prints what it
 * wrote; on failure the status, with one line in msg[cap]. */
dpt_status dpt_hf_export(const char *weights, const char *vocab, const char *dir, char *msg,
                         size_t cap);

#endif
