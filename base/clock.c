/* The library's one clock (base/clock.h): CLOCK_MONOTONIC in seconds. */
#define _POSIX_C_SOURCE 200809L
#include "base/clock.h"

#include <time.h>

double dpt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
