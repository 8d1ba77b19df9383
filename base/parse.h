/* Internal: parsing byte sizes written by people ("64", "512K", "256M", "1G"), for the
 * environment variables of the library and the command lines of the benchmarks. */
#ifndef DPTRAIN_CORE_PARSE_H
#define DPTRAIN_CORE_PARSE_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

/* Parses a decimal count with an optional K, M or G suffix (powers of 1024) at the start of `s`;
 * *end receives the first character after it. Returns 1 on success, 0 on no number, a sign,
 * or a value that overflows size_t. The caller decides what may follow (*end). */
static inline int dpt_parse_bytes(const char *s, const char **end, size_t *out) {
  char *e;
  errno = 0;
  unsigned long long v = strtoull(s, &e, 10);
  if (e == s || errno || *s == '-' || *s == '+') return 0;
  unsigned shift = 0;
  if (*e == 'K' || *e == 'k')
    shift = 10;
  else if (*e == 'M' || *e == 'm')
    shift = 20;
  else if (*e == 'G' || *e == 'g')
    shift = 30;
  if (shift) ++e;
  if (v > (SIZE_MAX >> shift)) return 0;
  *out = (size_t)v << shift;
  *end = e;
  return 1;
}

#endif
