/* How the transports wait for a message: spinning through the first moments of a quiet
 * spell, then sleeping, longer each time up to a limit (backoff.h). */
#define _POSIX_C_SOURCE 200809L
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "collectives/transports/backoff.h"
#include "base/clock.h"

void dpt_backoff_start(dpt_backoff *b, double since, int yield) {
  b->spin_until = since + DPT_SPIN_SECONDS;
  b->nap = 0.0;
  b->pass = 0;
  b->yield = yield;
}

int dpt_backoff_pause(dpt_backoff *b, double deadline) {
  if (b->nap == 0.0) {
    /* Spinning: the loop the transports always ran (PAUSE past the first passes, the clock
     * every 256, the core given away now and then). */
    const unsigned k = ++b->pass;
    if (k > 256) dpt_cpu_relax();
    if (k & 255) return 0;
    const double now = dpt_now();
    if (now >= deadline) return 1;
    if (now < b->spin_until) {
      if (b->yield || (k & 4095) == 0) sched_yield();
      return 0;
    }
    b->nap = 1e-6;
  }
  const double now = dpt_now();
  if (now >= deadline) return 1;
  const double nap = b->nap < deadline - now ? b->nap : deadline - now;
  struct timespec ts;
  ts.tv_sec = (time_t)nap;
  ts.tv_nsec = (long)((nap - (double)ts.tv_sec) * 1e9);
  nanosleep(&ts, NULL);
  b->nap = 2 * b->nap < DPT_NAP_MAX_SECONDS ? 2 * b->nap : DPT_NAP_MAX_SECONDS;
  return 0;
}

static atomic_llong g_teardown_ns; /* when the launcher's note came, ns of dpt_now(); 0: none */

void dpt_teardown_note(void) {
  const long long ns = (long long)(dpt_now() * 1e9); /* clock_gettime: async-signal-safe */
  long long none = 0;
  atomic_compare_exchange_strong(&g_teardown_ns, &none, ns > 0 ? ns : 1); /* the first note */
}

int dpt_teardown_due(double since) {
  const long long ns = atomic_load(&g_teardown_ns);
  if (ns == 0) return 0;
  const double noted = (double)ns * 1e-9, from = noted > since ? noted : since;
  return dpt_now() - from >= DPT_TEARDOWN_QUIET_SECONDS;
}
