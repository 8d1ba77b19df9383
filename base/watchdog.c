/* The watchdog (watchdog.h): one thread, started on the first arm, that sleeps until the
 * earliest armed deadline. A new watch wakes it only when its deadline is earlier than the one
 * the thread sleeps towards; a disarm never does (the thread wakes at the old deadline, finds
 * nothing due and sleeps on). */
#define _POSIX_C_SOURCE 200809L
#include "base/watchdog.h"

#include <math.h>
#include <pthread.h>
#include <sys/types.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_wake;
static dpt_watch *g_armed;        /* armed watches, unordered */
static double g_until = INFINITY; /* when the thread wakes next (dpt_now() seconds) */
static pid_t g_started;           /* the process whose thread runs (a fork's child has none) */

/* Prints w's line and ends the process (lock held: nobody disarms meanwhile). */
static void fire(const dpt_watch *w) {
  char line[512], who[32] = "";
  if (w->rank >= 0) snprintf(who, sizeof who, "rank %d: ", w->rank);
  int n = snprintf(line, sizeof line,
                   "dptrain: %s%s did not return within %g s (%s); exiting with "
                   "status %d\n",
                   who, w->what, w->seconds, w->why, w->status);
  if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
  if (n > 0 && write(STDERR_FILENO, line, (size_t)n) < 0) {
    /* nothing more to try: the exit status still tells */
  }
  _exit(w->status);
}

static void *watchdog_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_lock);
  for (;;) {
    const double now = dpt_now();
    double next = INFINITY;
    for (const dpt_watch *w = g_armed; w; w = w->next) {
      if (w->deadline <= now) fire(w);
      if (w->deadline < next) next = w->deadline;
    }
    g_until = next;
    if (isinf(next)) {
      pthread_cond_wait(&g_wake, &g_lock);
      continue;
    }
    /* dpt_now() is CLOCK_MONOTONIC, the clock the condition variable waits on. */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const double wait = next - now;
    const double sec = floor(wait);
    ts.tv_sec += (time_t)sec;
    ts.tv_nsec += (long)((wait - sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec += 1;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&g_wake, &g_lock, &ts);
  }
  return NULL;
}

/* Starts the thread once per process (lock held). */
static dpt_status start(void) {
  if (g_started == getpid()) return DPT_OK;
  g_armed = NULL; /* a fork's child inherits the parent's list, not its thread */
  g_until = INFINITY;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&g_wake, &ca);
  pthread_condattr_destroy(&ca);
  pthread_attr_t ta;
  pthread_attr_init(&ta);
  pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
  pthread_t t;
  const int rc = pthread_create(&t, &ta, watchdog_main, NULL);
  pthread_attr_destroy(&ta);
  if (rc != 0) {
    pthread_cond_destroy(&g_wake);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "watchdog: cannot start its thread (error %d)", rc);
  }
  g_started = getpid();
  return DPT_OK;
}

dpt_status dpt_watch_arm(dpt_watch *w, double seconds, int status, int rank, const char *what,
                         const char *why) {
  if (!w || !what || !why || !(seconds > 0) || !isfinite(seconds))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_watch_arm: bad argument");
  w->seconds = seconds;
  w->deadline = dpt_now() + seconds;
  w->status = status;
  w->rank = rank;
  w->what = what;
  w->why = why;
  pthread_mutex_lock(&g_lock);
  dpt_status st = start();
  if (st == DPT_OK) {
    w->next = g_armed;
    g_armed = w;
    if (w->deadline < g_until) pthread_cond_signal(&g_wake);
  }
  pthread_mutex_unlock(&g_lock);
  return st;
}

void dpt_watch_disarm(dpt_watch *w) {
  if (!w) return;
  pthread_mutex_lock(&g_lock);
  for (dpt_watch **p = &g_armed; *p; p = &(*p)->next)
    if (*p == w) {
      *p = w->next;
      break;
    }
  pthread_mutex_unlock(&g_lock);
}
