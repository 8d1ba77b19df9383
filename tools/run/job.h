/* The job dptrain run starts (job.c): a child in its own process group, the signals passed to
 * it, its end described. */
#ifndef DPTRAIN_TOOLS_RUN_JOB_H
#define DPTRAIN_TOOLS_RUN_JOB_H

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

/* SIGINT, SIGTERM and SIGUSR1 from now on go to the job running, and are remembered. */
void dpt_job_forward_signals(void);
/* The last of those signals received, 0 when none was. */
int dpt_job_signal(void);
/* Starts argv; -1 when it cannot be run (said on stderr). */
pid_t dpt_job_start(char **argv);
/* Waits for the job; its wait status. */
int dpt_job_wait(pid_t pid);
/* "exited with status S" or "was killed by signal K (name)" into out; the exit code it stands
 * for (128 + K for a signal). */
int dpt_job_describe(int status, char *out, size_t cap);
/* Sleeps `seconds` unless a forwarded signal arrives. */
void dpt_job_delay(double seconds);

#endif
