/* Internal: a file written whole or not at all. */
#ifndef DPTRAIN_BASE_FILE_H
#define DPTRAIN_BASE_FILE_H

#include <stdio.h>

#include "dptrain/status.h"

/* Writes path through "<path>.tmp": `write` fills the open file (returns 1 on success), the
 * file is flushed (and with `durable` synced to the disk), then renamed over path; on any
 * failure the temporary is removed and path is left as it was. Messages start with `what`
 * ("" or e.g. "trace ") and the path. DPT_ERR_IO or DPT_ERR_OUT_OF_MEMORY. */
dpt_status dpt_write_file_atomic(const char *path, const char *what, int durable,
                                 int (*write)(FILE *f, const void *ctx), const void *ctx);

#endif
