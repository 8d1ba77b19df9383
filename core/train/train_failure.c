/* The record a failed run leaves in its checkpoint directory (DPT_TRAIN_FAILURE_FILE), so that
 * a launcher restarting the job (dptrain run) can say which rank failed and why without reading
 * its output; and the injected failure the tests of that launcher use. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/env.h"
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
