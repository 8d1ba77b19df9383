/* Internal: how the transports wait for a message (backoff.c): spinning, then sleeping. */
#ifndef DPTRAIN_COLLECTIVES_TRANSPORTS_BACKOFF_H
#define DPTRAIN_COLLECTIVES_TRANSPORTS_BACKOFF_H

/* Inside a spin-wait loop: lets a sibling hardware thread run (x86 PAUSE). */
static inline void dpt_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* How a transport waits for a message (the MPI transport and its shared-memory channels).
 * During the first DPT_SPIN_SECONDS of a quiet spell it spins: the pieces of a collective
 * follow each other within microseconds, and the replicas of a training step reach a
 * collective within a millisecond or two of each other (docs/performance.md), so a wake-up
 * there would cost latency. After that it sleeps between looks, 1 us at first, doubling up to
 * DPT_NAP_MAX_SECONDS: a rank that waits seconds for a stalled peer then costs a few hundred
 * wake-ups a second instead of a core, and the deadline is still seen within that nap. */
#define DPT_SPIN_SECONDS    2e-3
#define DPT_NAP_MAX_SECONDS 1e-3
typedef struct dpt_backoff {
  double spin_until; /* spinning ends here (dpt_now()'s clock, seconds) */
  double nap;        /* the next sleep, seconds; 0 while spinning */
  unsigned pass;     /* passes that found nothing so far */
  int yield;         /* more ranks than cores here: give the core away while spinning */
} dpt_backoff;
/* A wait whose quiet spell began at `since` (dpt_now()'s clock). */
void dpt_backoff_start(dpt_backoff *b, double since, int yield);
/* After a pass that found nothing: spins (PAUSE, the clock read every 256 passes) inside the
 * spin window, then sleeps, never past `deadline`. 1 once the deadline has passed. */
int dpt_backoff_pause(dpt_backoff *b, double deadline);

/* The launcher is ending the job (dpt_comm_note_teardown, from a signal handler): a wait that
 * has been quiet for DPT_TEARDOWN_QUIET_SECONDS since then gives up, so that a rank waiting on
 * a peer that is gone across a network (no error comes) leaves before the launcher's SIGKILL;
 * a peer that is only late gets that long to arrive. */
#define DPT_TEARDOWN_QUIET_SECONDS 0.25
/* Async-signal-safe. */
void dpt_teardown_note(void);
/* 1 once noted and quiet since `since` (dpt_now()'s clock) and since the note for that long. */
int dpt_teardown_due(double since);

#endif
