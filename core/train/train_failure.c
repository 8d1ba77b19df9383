/* The record a failed run leaves in its checkpoint directory (DPT_TRAIN_FAILURE_FILE), so that
 * a launcher restarting the job (dptrain run) can say which rank failed and why without reading
 * its output; the checkpoint a surviving rank writes of the last completed step; and the
 * injected failure the tests of that launcher use. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/error.h"
#include "base/file.h"
#include "core/train/train_checkpoint.h"
#include "core/train/train_failure.h"

static int write_json(FILE *f, const void *ctx) {
  return json_dumpf((const json_t *)ctx, f, JSON_COMPACT) == 0 && fputc('\n', f) != EOF;
}

/* Whether this replica is the one to record st: where it happened, or rank 0 for the failures
 * every replica shares. */
static int records(int rank, dpt_status st) {
  if (st == DPT_OK || st == DPT_ERR_INTERRUPTED || st == DPT_ERR_PEER) return 0;
  return rank == 0 || (st != DPT_ERR_NONFINITE && st != DPT_ERR_MISMATCH);
}

void dpt_train_failure_record(const dpt_train_config *cfg, int rank, int replica, int64_t step,
                              dpt_status st, const char *msg) {
  const char *dir = cfg->checkpoints.checkpoint_dir;
  if (!dir || !records(rank, st)) return;
  char when[32] = "";
  const time_t now = time(NULL);
  struct tm tm;
  if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  /* The checkpoint writer's message ends in strerror's text for the errno it met. */
  const int full = strstr(msg, strerror(ENOSPC)) != NULL;
  json_t *o =
      json_pack("{sssssisisIsssb}", "status", dpt_status_str(st), "cause", msg, "rank", rank,
                "replica", replica, "step", (json_int_t)step, "time", when, "disk_full", full);
  /* Every rank may record at once: each through a name of its own, then renamed. */
  char tmp[4096], path[4096];
  snprintf(tmp, sizeof tmp, "%s/.%s.%ld", dir, DPT_TRAIN_FAILURE_FILE, (long)getpid());
  snprintf(path, sizeof path, "%s/%s", dir, DPT_TRAIN_FAILURE_FILE);
  if (o && dpt_write_file_atomic(tmp, "", 1, write_json, o) == DPT_OK && rename(tmp, path) != 0)
    remove(tmp);
  json_decref(o);
}

/* A line of this rank's (dpt_train_log speaks for replica 0 only). */
static void survivor_log(const replica *r, const char *fmt, ...) {
  if (!r->cfg->callbacks.on_log) return;
  char line[1536];
  int n = snprintf(line, sizeof line, "rank %d: ", r->index);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  r->cfg->callbacks.on_log(line, r->cfg->callbacks.user);
}

/* Why this rank cannot write the last completed step's state; NULL when it can. */
static const char *cannot_write(const replica_state *s) {
  if (s->mode == STEP_SHARDED)
    return "the sharded step keeps 1/R of the optimizer state on each rank (--full-step keeps "
           "it whole)";
  if (s->mode != STEP_FULL) return "without an exchange the replicas differ";
  if (s->unsettled) return "the failure came inside a step's update: the state is no step's";
  /* A failed exchange is kept as pending too; any other failure is this rank's own. */
  if (s->pending != DPT_OK && s->pending != DPT_ERR_TIMEOUT && s->pending != DPT_ERR_COMM)
    return "this rank had failed itself";
  /* Batch norm's running statistics move in a step's forward pass, before its exchange. */
  if (dpt_model_num_buffer_floats(s->model) > 0)
    return "the model's running statistics may have moved with the step in flight";
  return NULL;
}

void dpt_train_survive(const replica *r, replica_state *s, dpt_status st) {
  if ((st != DPT_ERR_TIMEOUT && st != DPT_ERR_COMM) || !r->over_mpi || r->count < 2 || !s->ck ||
      s->t.step == 0)
    return;
  const double t0 = dpt_now();
  const char *why = cannot_write(s);
  if (why) {
    survivor_log(r, "no checkpoint of step %lld from this rank: %s", (long long)s->t.step, why);
    return;
  }
  char path[4096];
  int wrote = 0;
  const dpt_status e = dpt_train_ckpt_write_own(r, s, path, sizeof path, &wrote);
  if (e != DPT_OK)
    survivor_log(r, "no checkpoint of step %lld from this rank: %s", (long long)s->t.step,
                 dpt_last_error());
  else if (wrote)
    survivor_log(r, "checkpoint of the last completed step written: %s (step %lld, %.3f s)", path,
                 (long long)s->t.step, dpt_now() - t0);
  else
    survivor_log(r, "the checkpoint of the last completed step exists: %s (step %lld)", path,
                 (long long)s->t.step);
}

void dpt_train_fault_point(const replica *r, replica_state *s) {
  const char *at = dpt_env_get("DPT_FAULT_EXIT_AT_STEP");
  if (r->index != 0 || !at || !*at || strtoll(at, NULL, 10) != s->t.step) return;
  const char *once = dpt_env_get("DPT_FAULT_ONCE_FILE");
  if (once && *once) {
    const int fd = open(once, O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0) return; /* fired already */
    close(fd);
  }
  dpt_train_ckpt_settle(r, s);
  dpt_train_log(r, "DPT_FAULT_EXIT_AT_STEP: exiting with status 137 after step %lld",
                (long long)s->t.step);
  _exit(137);
}
