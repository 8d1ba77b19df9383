/* What every fuzz target shares: the memfd for parsers that read a path, the check of a
 * rejection's message, and libFuzzer's entry point. */
#define _GNU_SOURCE /* memfd_create */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dptrain/status.h"
#include "tests/fuzz/fuzz.h"

void dpt_fuzz_check(int cond, const char *what) {
  if (cond) return;
  fprintf(stderr, "fuzz target: %s\n", what);
  abort();
}

int dpt_fuzz_memfd(const uint8_t *data, size_t size, char path[64]) {
  const int fd = memfd_create("dpt-fuzz", MFD_CLOEXEC);
  dpt_fuzz_check(fd >= 0, "memfd_create failed");
  size_t done = 0;
  while (done < size) {
    const ssize_t n = write(fd, data + done, size - done);
    dpt_fuzz_check(n > 0, "write to the memfd failed");
    done += (size_t)n;
  }
  snprintf(path, 64, "/proc/self/fd/%d", fd);
  return fd;
}

int dpt_fuzz_rejected(dpt_status st) {
  const char *msg = dpt_last_error();
  if (st == DPT_OK || !msg || !*msg || strchr(msg, '\n')) {
    fprintf(stderr, "fuzz target: a rejection must be a status and one line: %s, \"%s\"\n",
            dpt_status_name(st), msg ? msg : "(null)");
    abort();
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  (void)dpt_fuzz_one(data, size);
  return 0;
}
