/* The job of dptrain run: started in its own process group (so a terminal's ^C reaches it only
 * through us, once), SIGINT, SIGTERM and SIGUSR1 passed on to it, its end described. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/run/job.h"

static volatile sig_atomic_t child_pid;  /* the job running now, 0 between runs */
static volatile sig_atomic_t got_signal; /* the last of SIGINT, SIGTERM, SIGUSR1 received */
static const int forwarded[] = {SIGINT, SIGTERM, SIGUSR1};

static void forward(int sig) {
  const int saved = errno; /* the interrupted code may read it */
  got_signal = sig;
  if (child_pid > 0) kill((pid_t)child_pid, sig);
  errno = saved;
}

static void set_handlers(void (*handler)(int)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; ++i)
    sigaction(forwarded[i], &sa, NULL);
}

static void block_forwarded(int how) {
  sigset_t set;
  sigemptyset(&set);
  for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; ++i)
    sigaddset(&set, forwarded[i]);
  sigprocmask(how, &set, NULL);
}

void dpt_job_forward_signals(void) {
  set_handlers(forward);
}

int dpt_job_signal(void) {
  return (int)got_signal;
}

/* The signals are blocked across fork so none is missed before child_pid is set. */
pid_t dpt_job_start(char **argv) {
  int pipefd[2]; /* the child reports a failed exec through it; a successful one closes it */
  if (pipe(pipefd) != 0 || fcntl(pipefd[1], F_SETFD, FD_CLOEXEC) != 0) {
    fprintf(stderr, "dptrain run: pipe: %s\n", strerror(errno));
    return -1;
  }
  block_forwarded(SIG_BLOCK);
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    set_handlers(SIG_DFL);
    block_forwarded(SIG_UNBLOCK);
    close(pipefd[0]);
    execvp(argv[0], argv);
    const int err = errno;
    if (write(pipefd[1], &err, sizeof err) < 0) _exit(127);
    _exit(127);
  }
  if (pid > 0) child_pid = pid;
  block_forwarded(SIG_UNBLOCK);
  close(pipefd[1]);
  int err = 0;
  ssize_t n;
  while ((n = read(pipefd[0], &err, sizeof err)) < 0 && errno == EINTR) {
  }
  close(pipefd[0]);
  if (pid < 0 || n > 0) {
    fprintf(stderr, "dptrain run: cannot run '%s': %s\n", argv[0], strerror(pid < 0 ? errno : err));
    if (pid > 0) waitpid(pid, NULL, 0);
    child_pid = 0;
    return -1;
  }
  return pid;
}

int dpt_job_wait(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  child_pid = 0;
  return status;
}

int dpt_job_describe(int status, char *out, size_t cap) {
  if (WIFSIGNALED(status)) {
    snprintf(out, cap, "was killed by signal %d (%s)", WTERMSIG(status),
             strsignal(WTERMSIG(status)));
    return 128 + WTERMSIG(status);
  }
  snprintf(out, cap, "exited with status %d", WEXITSTATUS(status));
  return WEXITSTATUS(status);
}

void dpt_job_delay(double seconds) {
  struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  while (!got_signal && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}
