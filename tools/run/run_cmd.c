/* `dptrain run`: a job restarted after failures, like torchrun's --max-restarts, that says per
 * attempt why it ended and how far it got, stops when attempts make no progress, and follows a
 * host file that shrinks and grows between attempts. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/env.h"
#include "tools/commands.h"
#include "tools/options.h"
#include "tools/run/hosts.h"
#include "tools/run/job.h"
#include "tools/run/progress.h"

typedef struct run_opts {
  long max;             /* --max-restarts */
  double delay_s;       /* --restart-delay */
  const char *ckpt_dir; /* --checkpoint-dir (NULL: the command's) */
  const char *hostfile; /* --hostfile */
  long min_ranks;       /* --min-ranks; 0: not given (1) */
} run_opts;

/* A number in [lo, hi] from all of v; 0, or -1 for a bad value. */
static int parse_bounded(const char *v, int whole, double lo, double hi, double *out) {
  char *end = NULL;
  errno = 0;
  const double d = whole ? (double)strtol(v, &end, 10) : strtod(v, &end);
  if (errno || end == v || *end || d < lo || d > hi || d != d) return -1;
  *out = d;
  return 0;
}

static int parse_max_restarts(void *p, const char *v) {
  double d;
  if (parse_bounded(v, 1, 0, 1e6, &d)) return -1;
  ((run_opts *)p)->max = (long)d;
  return 0;
}

static int parse_restart_delay(void *p, const char *v) {
  return parse_bounded(v, 0, 0, 86400, &((run_opts *)p)->delay_s);
}

static int parse_min_ranks(void *p, const char *v) {
  double d;
  if (parse_bounded(v, 1, 1, 1e6, &d)) return -1;
  ((run_opts *)p)->min_ranks = (long)d;
  return 0;
}

#define OPT_TARGET run_opts

static const dpt_opt run_options[] = {
    {"--max-restarts", "N", "restarts at most (default 3, at most 10^6)",
     CUSTOM(parse_max_restarts)},
    {"--restart-delay", "SECONDS", "wait before each restart (default 1, at most 86400)",
     CUSTOM(parse_restart_delay)},
    {"--checkpoint-dir", "DIR",
     "the job's checkpoint directory (default: the --checkpoint-dir\n"
     "of COMMAND), read for the progress and the failure record",
     STRING(ckpt_dir)},
    {"--hostfile", "FILE",
     "an Open MPI host file, read before every attempt: its hosts that\n"
     "resolve and their slots give {hostfile} and {ranks}",
     STRING(hostfile)},
    {"--min-ranks", "N", "stop when the host file has fewer slots (default 1)",
     CUSTOM(parse_min_ranks)},
};

static const dpt_opt_cmd run_cmd = {
    "dptrain run",
    "usage: dptrain run [OPTIONS] -- COMMAND ARGS...\n"
    "\n"
    "Runs COMMAND and starts it again when it fails. COMMAND should resume from its\n"
    "checkpoints (dptrain train --checkpoint-dir DIR --resume). Each failed attempt gets a\n"
    "line: how it ended, the rank that failed and why (from DIR/failure.json, which the\n"
    "trainer writes), the step it resumed at and the steps it gained (the newest valid\n"
    "checkpoint's step before and after it). Two attempts in a row that end without a newer\n"
    "checkpoint than the one they resumed from stop the restarts. With --hostfile, {ranks}\n"
    "and {hostfile} in COMMAND become, per attempt, the slots of the hosts that resolve and\n"
    "a host file of those lines (mpirun -np {ranks} --hostfile {hostfile} ...); fewer slots\n"
    "than --min-ranks stop the restarts. SIGINT, SIGTERM and SIGUSR1 are passed to the job,\n"
    "and a job ended after one is not restarted; nor is one that exits 2 (a usage error) or\n"
    "75 (stopped on request). Exits with the job's last status (128 + K when signal K killed\n"
    "it).\n",
    run_options,
    sizeof run_options / sizeof run_options[0],
    0,
};

const dpt_opt_cmd *dpt_run_options(void) {
  return &run_cmd;
}

/* The run: its options, the command, what the attempts so far left. */
typedef struct run_state {
  const run_opts *o;
  char **cmd; /* COMMAND ARGS..., NULL-terminated */
  int ncmd;
  const char *dir;  /* the checkpoint directory, NULL: unknown (no progress is followed) */
  char hosts[4096]; /* the attempt's {hostfile}; "" without --hostfile */
  int ranks;        /* the attempt's {ranks} */
  int idle;         /* attempts in a row without progress */
  int code;         /* the last attempt's exit code */
} run_state;

/* arg with every {ranks} and {hostfile} replaced (malloc'd; NULL when out of memory). */
static char *substitute(const char *arg, const run_state *rs) {
  char ranks[16];
  snprintf(ranks, sizeof ranks, "%d", rs->ranks);
  size_t len = strlen(arg) + 1;
  for (const char *p = strchr(arg, '{'); p; p = strchr(p + 1, '{'))
    len += strlen(rs->hosts) + sizeof ranks;
  char *out = malloc(len), *w = out;
  for (const char *p = arg; out && *p;) {
    const char *with = !strncmp(p, "{ranks}", 7)       ? ranks
                       : !strncmp(p, "{hostfile}", 10) ? rs->hosts
                                                       : NULL;
    if (!with) {
      *w++ = *p++;
      continue;
    }
    w += sprintf(w, "%s", with);
    p += with == ranks ? 7 : 10;
  }
  if (out) *w = '\0';
  return out;
}

static int has_placeholder(const run_state *rs) {
  for (int i = 0; i < rs->ncmd; ++i)
    if (strstr(rs->cmd[i], "{ranks}") || strstr(rs->cmd[i], "{hostfile}")) return 1;
  return 0;
}

/* Starts and waits for one attempt of the command; its wait status, or -1 when it could not be
 * started (said). */
static int run_attempt(const run_state *rs) {
  char **argv = calloc((size_t)rs->ncmd + 1, sizeof *argv);
  int ok = argv != NULL;
  for (int i = 0; ok && i < rs->ncmd; ++i)
    ok = (argv[i] = substitute(rs->cmd[i], rs)) != NULL;
  int status = -1;
  if (!ok) {
    fprintf(stderr, "dptrain run: out of memory\n");
  } else {
    const pid_t pid = dpt_job_start(argv);
    if (pid > 0) status = dpt_job_wait(pid);
  }
  for (int i = 0; argv && i < rs->ncmd; ++i)
    free(argv[i]);
  free(argv);
  return status;
}

/* The host file re-read: rs->ranks its slots. 0, or -1 (said). */
static int refresh_hosts(run_state *rs) {
  return rs->o->hostfile ? dpt_hosts_refresh(rs->o->hostfile, rs->hosts, &rs->ranks) : 0;
}

/* The line of a failed attempt up to its next action: "attempt K (R ranks): <how it ended>,
 * rank R: <status>: <message>, resumed at step S, +N steps". */
static void describe_attempt(const run_state *rs, long k, const char *how, int64_t from, int64_t to,
                             char *line, size_t cap) {
  size_t n = (size_t)snprintf(line, cap, "attempt %ld", k);
  if (rs->o->hostfile)
    n += (size_t)snprintf(line + n, cap - n, " (%d rank%s)", rs->ranks, rs->ranks == 1 ? "" : "s");
  n += (size_t)snprintf(line + n, cap - n, ": %s", how);
  run_failure f;
  if (n < cap && rs->dir && dpt_run_read_failure(rs->dir, &f)) {
    n += (size_t)snprintf(line + n, cap - n, ", rank %d", f.rank);
    if (f.replica > 0) n += (size_t)snprintf(line + n, cap - n, " replica %d", f.replica);
    if (n < cap)
      n += (size_t)snprintf(line + n, cap - n, ": %s%s", f.text,
                            f.disk_full ? " (the checkpoint disk is full)" : "");
  }
  if (n < cap && rs->dir)
    snprintf(line + n, cap - n, ", resumed at step %lld, +%lld steps", (long long)from,
             (long long)(to > from ? to - from : 0));
}

enum { GO_ON = -1 };

/* After attempt k (of restart k-1) ended with wait status `status`: GO_ON to restart, else the
 * exit code of dptrain run; the attempt's line said. */
static int after_attempt(run_state *rs, long k, int status, int64_t from) {
  char how[128], line[1400];
  rs->code = dpt_job_describe(status, how, sizeof how);
  const int64_t to = rs->dir ? dpt_run_newest_step(rs->dir) : 0;
  if (rs->code == 0) {
    if (k > 1) fprintf(stderr, "dptrain run: attempt %ld: finished\n", k);
    return 0;
  }
  describe_attempt(rs, k, how, from, to, line, sizeof line);
  const int sig = dpt_job_signal();
  if (sig) {
    fprintf(stderr, "dptrain run: %s; after signal %d; not restarting\n", line, sig);
    return rs->code;
  }
  if (rs->code == 2 || rs->code == 75) {
    fprintf(stderr, "dptrain run: %s (%s); not restarting\n", line,
            rs->code == 2 ? "a usage error" : "stopped on request, e.g. preempted");
    return rs->code;
  }
  rs->idle = rs->dir && to <= from ? rs->idle + 1 : 0;
  if (rs->idle >= 2) {
    fprintf(stderr, "dptrain run: %s\n", line);
    fprintf(stderr,
            "dptrain run: giving up: attempts %ld and %ld ended without a checkpoint newer than "
            "step %lld (no progress twice in a row)\n",
            k - 1, k, (long long)from);
    return rs->code;
  }
  const long max = rs->o->max;
  if (k - 1 == max) {
    fprintf(stderr, "dptrain run: %s; giving up after %ld restart%s\n", line, max,
            max == 1 ? "" : "s");
    return rs->code;
  }
  fprintf(stderr, "dptrain run: %s; restart %ld of %ld\n", line, k, max);
  return GO_ON;
}

/* Whether the host file has fewer slots than --min-ranks (default 1); then the line said. */
static int too_few_slots(const run_state *rs, int at_start) {
  const run_opts *o = rs->o;
  const long min = o->min_ranks > 0 ? o->min_ranks : 1;
  if (!o->hostfile || rs->ranks >= min) return 0;
  const char *s = rs->ranks == 1 ? "" : "s";
  if (at_start && o->min_ranks)
    fprintf(stderr, "dptrain run: --min-ranks %ld is above the %d slot%s of %s\n", min, rs->ranks,
            s, o->hostfile);
  else if (at_start)
    fprintf(stderr, "dptrain run: the host file %s lists no host that resolves\n", o->hostfile);
  else
    fprintf(stderr,
            "dptrain run: giving up: the host file %s lists %d slot%s, fewer than --min-ranks "
            "%ld\n",
            o->hostfile, rs->ranks, s, min);
  return 1;
}

static int run_loop(run_state *rs) {
  for (long k = 1;; ++k) {
    if (k > 1) {
      dpt_job_delay(rs->o->delay_s);
      if (dpt_job_signal()) return rs->code;
      if (refresh_hosts(rs)) return rs->code;
      if (too_few_slots(rs, 0)) return rs->code;
    }
    const int64_t from = rs->dir ? dpt_run_newest_step(rs->dir) : 0;
    if (rs->dir) dpt_run_clear_failure(rs->dir);
    const int status = run_attempt(rs);
    if (status < 0) return 127;
    const int rc = after_attempt(rs, k, status, from);
    if (rc != GO_ON) return rc;
  }
}

/* The checks before the first attempt: placeholders and the host file, --min-ranks, the
 * command's --resume and checkpoint directory. 0, or the exit code. */
static int check_start(run_state *rs) {
  const run_opts *o = rs->o;
  if (has_placeholder(rs) && !o->hostfile)
    return dpt_opt_usage_error(&run_cmd, "{ranks} and {hostfile} need --hostfile");
  if (o->min_ranks && !o->hostfile)
    return dpt_opt_usage_error(&run_cmd, "--min-ranks needs --hostfile");
  if (o->hostfile) {
    const char *tmp = dpt_env_get("TMPDIR");
    snprintf(rs->hosts, sizeof rs->hosts, "%s/dptrain-run-%ld.hosts", tmp && *tmp ? tmp : "/tmp",
             (long)getpid());
    if (refresh_hosts(rs)) return 1;
    if (too_few_slots(rs, 1)) return 2;
  }
  int resumes = 0;
  for (int i = 0; i < rs->ncmd; ++i)
    resumes |= !strcmp(rs->cmd[i], "--resume");
  if (!resumes)
    fprintf(stderr, "dptrain run: warning: the command has no --resume: every restart begins the "
                    "job from the start\n");
  rs->dir = o->ckpt_dir ? o->ckpt_dir : dpt_run_find_ckpt_dir(rs->ncmd, rs->cmd);
  if (rs->dir && (strstr(rs->dir, "{ranks}") || strstr(rs->dir, "{hostfile}"))) rs->dir = NULL;
  return 0;
}

int dpt_cmd_run(int argc, char **argv) {
  run_opts o = {.max = 3, .delay_s = 1.0};
  int cmd = 0;
  const int rc = dpt_opt_parse_until(&run_cmd, &o, argc, argv, &cmd);
  if (rc != DPT_OPT_KEEP_GOING) return rc;
  if (cmd >= argc) return dpt_opt_usage_error(&run_cmd, "no command given");
  run_state rs = {.o = &o, .cmd = argv + cmd, .ncmd = argc - cmd};
  int code = check_start(&rs);
  if (code == 0) {
    dpt_job_forward_signals();
    code = run_loop(&rs);
  }
  if (rs.hosts[0]) remove(rs.hosts);
  return code;
}
