/* The CPU backend within what OpenBLAS can serve (backends/cpu/cpu_openblas.c).
 *
 *   test_cpu_openblas threads  more CPU backends than OpenBLAS's buffer pool serves, created
 *                              and used at once from as many threads: every gemm is right, as
 *                              many backends as the limit use OpenBLAS, the others the
 *                              portable gemm, and their driver strings say which.
 *   test_cpu_openblas rlimit   in forked children under an address-space limit (RLIMIT_AS):
 *                              with no room for OpenBLAS's buffer the backend uses the portable
 *                              gemm; with room at creation and none left afterwards, gemm still
 *                              finishes. An alarm turns a spin into a failure. Exit 77 where
 *                              this cannot be set up (sanitizers, no /proc). */
#define _DEFAULT_SOURCE /* pthread_barrier_t, setenv */

#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/cpu/cpu_internal.h"
#include "dptrain/backend.h"
#include "test_util.h"

/* Large enough that OpenBLAS takes a buffer for it (its small-matrix path takes none). */
enum { N = 128 };

/* C = A * B with A all ones and B all twos, N x N: every element is exactly 2 N. Returns the
 * number of wrong elements, or -1 when a call failed. */
static int gemm_ones_twos(dpt_backend *be) {
  static const size_t n = N;
  float *host = malloc(n * n * sizeof *host);
  dpt_buffer *a = NULL, *b = NULL, *c = NULL;
  int bad = -1;
  if (host == NULL || dpt_buffer_alloc(be, n * n * sizeof(float), &a) != DPT_OK ||
      dpt_buffer_alloc(be, n * n * sizeof(float), &b) != DPT_OK ||
      dpt_buffer_alloc(be, n * n * sizeof(float), &c) != DPT_OK ||
      dpt_buffer_fill_f32(a, 0, n * n, 1.0f) != DPT_OK ||
      dpt_buffer_fill_f32(b, 0, n * n, 2.0f) != DPT_OK ||
      dpt_gemm(be, 0, 0, n, n, n, 1.0f, a, 0, n, b, 0, n, 0.0f, c, 0, n) != DPT_OK ||
      dpt_buffer_download(c, 0, host, n * n * sizeof(float)) != DPT_OK)
    goto done;
  bad = 0;
  for (size_t i = 0; i < n * n; ++i)
    bad += host[i] != 2.0f * (float)n;
done:
  dpt_buffer_free(a);
  dpt_buffer_free(b);
  dpt_buffer_free(c);
  free(host);
  return bad;
}

/* ---- threads --------------------------------------------------------------------------------- */

typedef struct worker {
  pthread_barrier_t *all_created; /* every backend is alive before any gemm runs */
  dpt_status create;
  int bad; /* gemm_ones_twos */
  char driver[128];
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  dpt_backend *be = NULL;
  dpt_device_info info;
  w->create = dpt_backend_create(DPT_BACKEND_CPU, 0, &be);
  if (w->create == DPT_OK && dpt_backend_get_info(be, &info) == DPT_OK)
    snprintf(w->driver, sizeof w->driver, "%s", info.driver);
  pthread_barrier_wait(w->all_created);
  w->bad = w->create == DPT_OK ? gemm_ones_twos(be) : -1;
  pthread_barrier_wait(w->all_created); /* destroyed only once every gemm is done */
  dpt_backend_destroy(be);
  return NULL;
}

START_TEST(more_backends_than_openblas_serves) {
  const int limit = dpt_cpu_openblas_limit();
  const int n = limit > 0 ? limit + 4 : 8;
  struct rlimit as;
  const int limited = getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY;
  const int want_openblas = limit == 0 ? 0 : limited ? 1 : limit;
  worker *w = calloc((size_t)n, sizeof *w);
  pthread_t *t = calloc((size_t)n, sizeof *t);
  ck_assert(w && t);
  pthread_barrier_t barrier;
  ck_assert_int_eq(pthread_barrier_init(&barrier, NULL, (unsigned)n), 0);
  for (int i = 0; i < n; ++i) {
    w[i].all_created = &barrier;
    ck_assert_int_eq(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
  }
  int openblas = 0, portable = 0;
  for (int i = 0; i < n; ++i) {
    pthread_join(t[i], NULL);
    ck_assert_msg(w[i].create == DPT_OK, "backend %d: %s", i, dpt_status_str(w[i].create));
    ck_assert_msg(w[i].bad == 0, "backend %d (%s): %d wrong elements", i, w[i].driver, w[i].bad);
    if (strstr(w[i].driver, "(openblas ")) ++openblas;
    if (strstr(w[i].driver, "(portable gemm")) ++portable;
  }
  pthread_barrier_destroy(&barrier);
  ck_assert_int_eq(openblas, want_openblas);
  ck_assert_int_eq(portable, n - want_openblas);
  /* Every backend is gone: OpenBLAS serves the next one again. */
  if (limit > 0 && !limited) {
    dpt_backend *be = tu_cpu();
    dpt_device_info info;
    TU_OK(dpt_backend_get_info(be, &info));
    ck_assert_msg(strstr(info.driver, "(openblas "), "driver: %s", info.driver);
    dpt_backend_destroy(be);
  }
  free(w);
  free(t);
}
END_TEST

/* ---- rlimit ---------------------------------------------------------------------------------- */

/* The address space this process maps now, in bytes; 0 when /proc cannot tell. */
static size_t mapped_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long pages = 0;
  if (f == NULL) return 0;
  if (fscanf(f, "%lu", &pages) != 1) pages = 0;
  fclose(f);
  return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* In a child: limit the address space to what is mapped plus `room`, create a CPU backend,
 * then, when `squeeze`, take the rest of the address space with host allocations, and run a
 * gemm. Exit 0 when it is right and the driver string names `want` (NULL: either), 1 when not;
 * an alarm ends a spin. */
static void child(size_t room, int squeeze, const char *want) {
  alarm(20);
  /* OpenBLAS's buffers alone: oneDNN's context would take its share of the squeezed space. */
  setenv("DPT_CPU_CONV", "im2col", 1);
  const size_t base = mapped_bytes();
  struct rlimit r = {.rlim_cur = base + room, .rlim_max = base + room};
  if (base == 0 || setrlimit(RLIMIT_AS, &r) != 0) _exit(77);
  dpt_backend *be = NULL;
  dpt_status st = dpt_backend_create(DPT_BACKEND_CPU, 0, &be);
  if (st != DPT_OK) {
    fprintf(stderr, "create: %s: %s\n", dpt_status_str(st), dpt_last_error());
    _exit(1);
  }
  dpt_device_info info;
  if (dpt_backend_get_info(be, &info) != DPT_OK) _exit(1);
  fprintf(stderr, "room %zu MiB%s: %s\n", room >> 20, squeeze ? ", squeezed" : "", info.driver);
  if (want && !strstr(info.driver, want)) {
    fprintf(stderr, "the driver string lacks '%s'\n", want);
    _exit(1);
  }
  if (squeeze) { /* leave less than a MiB; never touched, never freed (the child exits) */
    for (size_t chunk = (size_t)64 << 20; chunk >= ((size_t)1 << 20); chunk /= 2)
      while (malloc(chunk) != NULL) {
      }
  }
  const int bad = gemm_ones_twos(be);
  if (bad != 0) fprintf(stderr, "gemm: %d wrong elements\n", bad);
  _exit(bad == 0 ? 0 : 1);
}

/* Runs child() in a child process and reports: 0 passed, 77 skipped, 1 failed. */
static int run_child(size_t room, int squeeze, const char *want) {
  fflush(NULL);
  const pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) child(room, squeeze, want);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return 1;
  if (WIFSIGNALED(status)) {
    fprintf(stderr, "child (room %zu MiB) killed by signal %d%s\n", room >> 20, WTERMSIG(status),
            WTERMSIG(status) == SIGALRM ? " (it did not finish in 20 s)" : "");
    return 1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DPT_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define DPT_TEST_SANITIZED 1
#endif
#endif

static int rlimit_main(void) {
#ifdef DPT_TEST_SANITIZED
  (void)run_child; /* compiled, so that sanitizer builds still check it */
  fprintf(stderr, "skipped: sanitizers reserve more address space than any limit allows\n");
  return 77;
#else
  const int openblas = dpt_cpu_openblas_limit() > 0;
  /* No room for OpenBLAS's 128 MiB buffer: the portable gemm. */
  int rc = run_child((size_t)96 << 20, 0, openblas ? "(portable gemm" : NULL);
  if (rc != 0) return rc;
  /* Room at creation, none at the gemm: OpenBLAS mapped its buffer at creation. */
  return run_child((size_t)512 << 20, 1, openblas ? "(openblas " : NULL);
#endif
}

static Suite *openblas_suite(void) {
  Suite *s = suite_create("cpu_openblas");
  TCase *tc = tcase_create("threads");
  tcase_add_test(tc, more_backends_than_openblas_serves);
  suite_add_tcase(s, tc);
  return s;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "rlimit") == 0) return rlimit_main();
  if (argc == 2 && strcmp(argv[1], "threads") == 0) return tu_run(openblas_suite());
  fprintf(stderr, "usage: test_cpu_openblas threads|rlimit\n");
  return 2;
}
