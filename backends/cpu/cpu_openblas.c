/* Which CPU backends may call OpenBLAS: its buffer pool has a size fixed when OpenBLAS was built,
 * and a buffer it cannot map makes it spin forever.
 *
 * What OpenBLAS (0.3.x, pthread and serial builds without USE_TLS, as Debian 12 ships it) does
 * on every level-3 call, read from its driver/others/memory.c and blas_server.c:
 *   - the calling thread takes one slot of a static table of NUM_BUFFERS buffers for the
 *     duration of the call, NUM_BUFFERS = max(50, 2 * MAX_THREADS) (MAX_THREADS is the build's
 *     NUM_THREADS; openblas_get_config() reports it as "MAX_THREADS=64" on Debian 12, so 128
 *     slots); each worker of its thread pool holds one slot for good (the pool has
 *     openblas_get_num_threads() - 1 workers);
 *   - past the table it prints "precompiled NUM_THREADS exceeded" and switches to an overflow
 *     table whose handling crashes under concurrent callers (dptrain train --replicas 160
 *     segfaults in sgemm);
 *   - a slot's buffer is mapped on its first use (BUFFER_SIZE, 128 MiB on x86-64 and arm64,
 *     up to twice that while it places it) and kept until exit; when the mapping
 *     fails it retries in a loop without end, so an address-space limit (RLIMIT_AS, ulimit -v)
 *     that leaves less than a buffer turns the next gemm into a spin.
 * Nothing of this is exported except the config string and the thread count, so the figures
 * come from there and the constants below.
 *
 * What the CPU backend does about it, at creation (under one lock):
 *   - concurrency: at most NUM_BUFFERS - workers - 1 live backends use OpenBLAS (one slot is
 *     left to the rest of the process); a backend created past that uses the portable gemm;
 *   - memory: without an address-space limit nothing more. Under one, only one live backend
 *     uses OpenBLAS, and only when the address space has room for a buffer (checked by
 *     reserving twice its size without touching it); that backend then runs one gemm large
 *     enough to take a slot, which maps the buffer there and then. Later calls of that
 *     backend find a mapped slot: the slots below it are the workers' (held for good), and it
 *     is the only caller of ours. Memory allocated afterwards (tensors) then fails cleanly
 *     with out of memory instead of starving OpenBLAS. Pre-mapping works for one caller only
 *     (a probe takes the first free slot, already mapped after the first), so a second
 *     concurrent backend under a limit gets the portable gemm.
 * A backend refused OpenBLAS says why in its driver string (dpt_backend_get_info); with
 * DPT_CPU_GEMM=openblas set explicitly the creation fails instead. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"

#ifdef DPT_HAVE_OPENBLAS
#include <cblas.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>

/* OpenBLAS's BUFFER_SIZE on x86-64 and arm64; the mapping can briefly be twice this. */
#define DPT_OPENBLAS_BUFFER_BYTES ((size_t)128 << 20)
/* Address space asked for before the first call: two buffers plus room for the call's rest. */
#define DPT_OPENBLAS_HEADROOM_BYTES (2 * DPT_OPENBLAS_BUFFER_BYTES + ((size_t)16 << 20))
/* The probe gemm: large enough that OpenBLAS takes a buffer (its small-matrix path, which
 * takes none, stops well below 100^3). */
enum { DPT_OPENBLAS_PROBE_N = 128 };

static pthread_mutex_t openblas_lock = PTHREAD_MUTEX_INITIALIZER;
static int openblas_live; /* live CPU backends that use OpenBLAS; under openblas_lock */

/* NUM_BUFFERS of the loaded OpenBLAS: max(50, 2 * MAX_THREADS) from its config string; 50
 * (the floor of the formula) when the string names no MAX_THREADS (single-threaded builds). */
static int openblas_slots(void) {
  const char *config = openblas_get_config();
  const char *p = config ? strstr(config, "MAX_THREADS=") : NULL;
  int max_threads = 0;
  if (p == NULL || sscanf(p, "MAX_THREADS=%d", &max_threads) != 1 || max_threads < 0)
    max_threads = 0;
  return max_threads > 25 ? 2 * max_threads : 50;
}

int dpt_cpu_openblas_limit(void) {
  int workers = openblas_get_num_threads() - 1;
  if (workers < 0) workers = 0;
  const int limit = openblas_slots() - workers - 1;
  return limit > 0 ? limit : 0;
}

/* Whether the address space is limited (RLIMIT_AS below infinity). */
static int address_space_limited(void) {
  struct rlimit r;
  return getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY;
}

/* Whether `bytes` of address space can be had now: reserved without being touched (no memory
 * is committed) and given back. */
static int address_space_room(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 0;
  munmap(p, bytes);
  return 1;
}

/* One gemm that takes a buffer slot, so that OpenBLAS maps it now. 0 when the operands cannot
 * be allocated (then the caller does not use OpenBLAS either). */
static int map_buffer_now(void) {
  const size_t n = DPT_OPENBLAS_PROBE_N;
  float *a = calloc(3 * n * n, sizeof *a);
  if (a == NULL) return 0;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)n, (blasint)n, (blasint)n, 1.0f,
              a, (blasint)n, a + n * n, (blasint)n, 0.0f, a + 2 * n * n, (blasint)n);
  free(a);
  return 1;
}

int dpt_cpu_openblas_admit(char *why, size_t why_len) {
  pthread_mutex_lock(&openblas_lock);
  const int limit = dpt_cpu_openblas_limit();
  int granted = 1;
  if (openblas_live >= limit) {
    snprintf(why, why_len, "%d backends use OpenBLAS, the most its buffer pool serves", limit);
    granted = 0;
  } else if (address_space_limited()) {
    if (openblas_live > 0) {
      snprintf(why, why_len, "under an address-space limit OpenBLAS serves one backend");
      granted = 0;
    } else if (!address_space_room(DPT_OPENBLAS_HEADROOM_BYTES) || !map_buffer_now()) {
      snprintf(why, why_len, "the address-space limit leaves no %zu MiB for OpenBLAS's buffer",
               DPT_OPENBLAS_HEADROOM_BYTES >> 20);
      granted = 0;
    }
  }
  if (granted) ++openblas_live;
  pthread_mutex_unlock(&openblas_lock);
  return granted;
}

void dpt_cpu_openblas_leave(void) {
  pthread_mutex_lock(&openblas_lock);
  --openblas_live;
  pthread_mutex_unlock(&openblas_lock);
}

void dpt_cpu_openblas_one_thread(void) {
  pthread_mutex_lock(&openblas_lock);
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
  pthread_mutex_unlock(&openblas_lock);
}

#else

int dpt_cpu_openblas_limit(void) {
  return 0;
}

int dpt_cpu_openblas_admit(char *why, size_t why_len) {
  snprintf(why, why_len, "built without OpenBLAS");
  return 0;
}

void dpt_cpu_openblas_leave(void) {}

void dpt_cpu_openblas_one_thread(void) {}

#endif
