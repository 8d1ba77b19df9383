/* Internal: size arithmetic that reports overflow, for sizes that come from files, flags or
 * peers. */
#ifndef DPTRAIN_BASE_SIZE_H
#define DPTRAIN_BASE_SIZE_H

#include <stddef.h>

/* a * b into *out; returns 0 on overflow. */
static inline int dpt_mul_ok(size_t a, size_t b, size_t *out) {
  if (a != 0 && b > (size_t)-1 / a) return 0;
  *out = a * b;
  return 1;
}

/* a + b into *out; returns 0 on overflow. */
static inline int dpt_add_ok(size_t a, size_t b, size_t *out) {
  if (b > (size_t)-1 - a) return 0;
  *out = a + b;
  return 1;
}

#endif
