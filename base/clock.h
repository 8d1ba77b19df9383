/* Internal: the one clock of the library. */
#ifndef DPTRAIN_BASE_CLOCK_H
#define DPTRAIN_BASE_CLOCK_H

/* Seconds on the monotonic clock, from an arbitrary origin: for deadlines and durations. */
double dpt_now(void);

#endif
