#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"

#ifdef DPT_HAVE_MPI
#include <mpi.h>
#endif

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double dpt_bench_median(double *v, int n) {
  if (n <= 0) return 0.0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int dpt_parse_size_list(const char *s, size_t *out, size_t max, size_t max_value, size_t *count) {
  *count = 0;
  while (*s) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno || v == 0 || v > max_value || *count == max) return -1;
    out[(*count)++] = (size_t)v;
    s = end;
    if (*s == ',')
      ++s;
    else if (*s)
      return -1;
  }
  return *count > 0 ? 0 : -1;
}

int dpt_parse_float_list(const char *s, float *out, size_t max, size_t *count) {
  *count = 0;
  while (*s) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || fabs(v) > FLT_MAX || (v != 0 && (float)v == 0) ||
        *count == max)
      return -1;
    out[(*count)++] = (float)v;
    s = end;
    if (*s == ',')
      ++s;
    else if (*s)
      return -1;
  }
  return *count > 0 ? 0 : -1;
}

void dpt_bench_sleeping_barrier(void) {
#ifdef DPT_HAVE_MPI
  MPI_Request q;
  MPI_Ibarrier(MPI_COMM_WORLD, &q);
  for (int done = 0; !done;) {
    MPI_Test(&q, &done, MPI_STATUS_IGNORE);
    if (!done) {
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
  }
#endif
}

void dpt_bench_remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[512];
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    remove(path);
  }
  if (d) closedir(d);
  rmdir(dir);
}
