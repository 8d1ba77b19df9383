/* Internal: deadlines for calls that cannot be bounded any other way (blocking MPI calls:
 * MPI_Init_thread, the collectives of a communicator's set-up, MPI_Abort, MPI_Finalize).
 *
 * A watch is armed before such a call and disarmed after it. When its deadline (on the
 * monotonic clock) passes first, one process-wide thread prints the watch's line to stderr and
 * ends the process with _exit(status): the thread stuck in the call can neither return an
 * error nor be interrupted, and waiting would hang the job for good. Arming and disarming take
 * a mutex and wake the thread only when the new deadline is the earliest (a blocking MPI call
 * on the hot path pays two lock round trips). */
#ifndef DPTRAIN_BASE_WATCHDOG_H
#define DPTRAIN_BASE_WATCHDOG_H

#include "base/error.h"

/* The exit status of a process ended by a watch on a stalled call (EX_UNAVAILABLE of
 * sysexits.h: a peer could not be reached; apart from timeout(1)'s 124, which a launcher's
 * own time limit gives). */
#define DPT_EXIT_STALLED 69

typedef struct dpt_watch {
  double deadline;        /* dpt_now() seconds */
  double seconds;         /* the limit, for the line */
  int status;             /* _exit status */
  int rank;               /* the rank named in the line, or -1 */
  const char *what;       /* the call, e.g. "MPI_Init_thread" (static storage) */
  const char *why;        /* the likely cause, ending the line (static storage) */
  struct dpt_watch *next; /* armed watches (the watchdog's list) */
} dpt_watch;

/* Arms w (caller-owned, armed until disarmed) for `seconds` (> 0) from now. The line reads
 * "dptrain: rank R: WHAT did not return within S s (WHY); exiting with status N" (without
 * "rank R: " when rank < 0). DPT_ERR_INVALID_ARG for a bad argument, DPT_ERR_OUT_OF_MEMORY when the
 * watchdog thread cannot start (nothing is armed then). */
dpt_status dpt_watch_arm(dpt_watch *w, double seconds, int status, int rank, const char *what,
                         const char *why);
/* Disarms w; a w that is not armed is left alone. */
void dpt_watch_disarm(dpt_watch *w);

#endif
