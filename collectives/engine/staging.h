/* Internal: device buffers through host memory, block by block (staging.c). A stage supplies
 * the engine's staging hooks (engine.h) for one device range. */
#ifndef DPTRAIN_COLLECTIVES_STAGING_H
#define DPTRAIN_COLLECTIVES_STAGING_H

#include <stddef.h>

#include "collectives/engine/engine.h"
#include "dptrain/comm.h"

typedef struct dpt_stage dpt_stage;
/* Stages bytes [offset, offset + bytes) of buf in blocks of block_bytes: `download` fills
 * host blocks before the engine uses them, `upload` writes finished blocks back. */
dpt_status dpt_stage_create(dpt_comm *c, dpt_buffer *buf, size_t offset, size_t bytes,
                            size_t block_bytes, int download, int upload, dpt_stage **out);
/* Sets the hooks of a schedule to this stage. */
void dpt_stage_hooks(dpt_stage *s, dpt_sched *hooks);
void *dpt_stage_block_ptr(void *s, size_t b);
/* Finishes every upload (when ok) and frees everything; returns the first staging failure. */
dpt_status dpt_stage_finish(dpt_stage *s, int ok);

#endif
