/* A file written whole or not at all (base/file.h). */
#define _POSIX_C_SOURCE 200809L /* fileno, fsync */
#include "base/file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"

dpt_status dpt_write_file_atomic(const char *path, const char *what, int durable,
                                 int (*write)(FILE *f, const void *ctx), const void *ctx) {
  const size_t pl = strlen(path);
  char *tmp = malloc(pl + 5);
  if (!tmp) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s%s: out of host memory", what, path);
  memcpy(tmp, path, pl);
  memcpy(tmp + pl, ".tmp", 5);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    const dpt_status st =
        dpt_set_error(DPT_ERR_IO, "%s%s: cannot create %s: %s", what, path, tmp, strerror(errno));
    free(tmp);
    return st;
  }
  int ok = write(f, ctx) && !ferror(f) && fflush(f) == 0 && (!durable || fsync(fileno(f)) == 0);
  const int err = errno;
  ok = fclose(f) == 0 && ok;
  dpt_status st = DPT_OK;
  if (!ok)
    st =
        dpt_set_error(DPT_ERR_IO, "%s%s: write failed: %s", what, tmp, strerror(err ? err : errno));
  else if (rename(tmp, path) != 0)
    st = dpt_set_error(DPT_ERR_IO, "%s%s: cannot rename %s over it: %s", what, path, tmp,
                       strerror(errno));
  if (st != DPT_OK) remove(tmp);
  free(tmp);
  return st;
}
