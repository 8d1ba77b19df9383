/* The parser fuzz targets. Each target file defines dpt_fuzz_one for one parser; fuzz_common.c
 * wraps it as libFuzzer's LLVMFuzzerTestOneInput, replay.c runs it over corpus files without
 * libFuzzer (ctest). A target aborts when the parser breaks its contract, so both report it. */
#ifndef DPTRAIN_TESTS_FUZZ_FUZZ_H
#define DPTRAIN_TESTS_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/status.h"

/* Feeds data[size] to the parser: 1 when it accepted the input, 0 when it rejected it with a
 * status and a one-line message (dpt_fuzz_rejected); aborts on anything else. */
int dpt_fuzz_one(const uint8_t *data, size_t size);

/* The parsers that read a path get the input through a memfd (memfd_create: memory, no disk).
 * Writes data[size] to a new one and its path "/proc/self/fd/N" to path[64]; returns the fd
 * (close it when done), aborts when the memfd cannot be made. */
int dpt_fuzz_memfd(const uint8_t *data, size_t size, char path[64]);

/* A parser's failure: st must not be DPT_OK and the thread's message must be one non-empty line.
 * Returns 0, aborts (with the message) otherwise. */
int dpt_fuzz_rejected(dpt_status st);

/* Aborts with "what" when cond is false: the fuzz targets' own checks, kept in release builds. */
void dpt_fuzz_check(int cond, const char *what);

#endif
