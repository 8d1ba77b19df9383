/* A run's log directory (core/log/run_log.h): the directory made or checked, the record files
 * opened for writing or appending, one JSON line and one event per record. */
#define _POSIX_C_SOURCE 200809L
#include "core/log/run_log.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/file.h"

enum { PATH_MAX_LOG = 4096 };

struct dpt_run_log {
  FILE *files[2]; /* steps.jsonl, evals.jsonl */
  dpt_tb_writer *events;
  char dir[PATH_MAX_LOG];
  char events_path[PATH_MAX_LOG];
};

static const char *const file_names[2] = {"steps.jsonl", "evals.jsonl"};

/* dir and its missing parents made; dir must end up a writable directory. */
static dpt_status make_dir(const char *dir) {
  char p[PATH_MAX_LOG];
  if (!*dir) return dpt_set_error(DPT_ERR_INVALID_ARG, "log directory: the name is empty");
  if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "log directory: the name is too long");
  for (char *c = p + 1; *c; ++c) {
    if (*c != '/') continue;
    *c = '\0';
    if (mkdir(p, 0777) != 0 && errno != EEXIST)
      return dpt_set_error(DPT_ERR_IO, "log directory %s: cannot create %s: %s", dir, p,
                           strerror(errno));
    *c = '/';
  }
  if (mkdir(p, 0777) != 0 && errno != EEXIST)
    return dpt_set_error(DPT_ERR_IO, "log directory %s: cannot create it: %s", dir,
                         strerror(errno));
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return dpt_set_error(DPT_ERR_IO, "log directory %s: not a directory", dir);
  if (access(dir, W_OK | X_OK) != 0)
    return dpt_set_error(DPT_ERR_IO, "log directory %s: cannot write there: %s", dir,
                         strerror(errno));
  return DPT_OK;
}

/* Whether name is one of the files a log leaves in its directory. */
static int is_log_file(const char *name) {
  return !strcmp(name, "settings.json") || !strcmp(name, file_names[0]) ||
         !strcmp(name, file_names[1]) || !strncmp(name, "events.out.tfevents.", 20);
}

/* A fresh log: refused when dir holds another run's log files. */
static dpt_status check_empty(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return dpt_set_error(DPT_ERR_IO, "log directory %s: %s", dir, strerror(errno));
  char found[256] = "";
  for (struct dirent *e = readdir(d); e && !*found; e = readdir(d))
    if (is_log_file(e->d_name)) snprintf(found, sizeof found, "%s", e->d_name);
  closedir(d);
  if (*found)
    return dpt_set_error(DPT_ERR_IO,
                         "log directory %s holds another run's log (%s): choose another "
                         "directory, remove its files, or resume that run from its checkpoint",
                         dir, found);
  return DPT_OK;
}

static int write_json(FILE *f, const void *ctx) {
  return json_dumpf((const json_t *)ctx, f, JSON_INDENT(2) | JSON_SORT_KEYS) == 0 &&
         fputc('\n', f) != EOF;
}

/* A new event file, named by the time and host (a suffix when that name is taken). */
static dpt_status open_events(dpt_run_log *log) {
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
  const long long now = (long long)time(NULL);
  dpt_status st = DPT_OK;
  for (int k = 0; k < 100; ++k) {
    char suffix[16] = "";
    if (k) snprintf(suffix, sizeof suffix, ".%d", k);
    if (snprintf(log->events_path, sizeof log->events_path, "%s/events.out.tfevents.%lld.%s%s",
                 log->dir, now, host, suffix) >= (int)sizeof log->events_path)
      return dpt_set_error(DPT_ERR_INVALID_ARG, "log directory %s: the name is too long", log->dir);
    st = dpt_tb_open(log->events_path, &log->events);
    if (st == DPT_OK || access(log->events_path, F_OK) != 0) return st;
  }
  return st;
}

/* steps.jsonl and evals.jsonl, created or (append) continued. */
static dpt_status open_files(dpt_run_log *log, int append) {
  for (int i = 0; i < 2; ++i) {
    char path[PATH_MAX_LOG + 32];
    snprintf(path, sizeof path, "%s/%s", log->dir, file_names[i]);
    log->files[i] = fopen(path, append ? "a" : "wx");
    if (!log->files[i])
      return dpt_set_error(DPT_ERR_IO, "cannot create %s: %s", path, strerror(errno));
  }
  return DPT_OK;
}

dpt_status dpt_run_log_open(const char *dir, int append, const json_t *settings,
                            dpt_run_log **out) {
  *out = NULL;
  DPT_TRY(make_dir(dir));
  if (!append) DPT_TRY(check_empty(dir));
  dpt_run_log *log = calloc(1, sizeof *log);
  if (!log) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "log: out of host memory");
  snprintf(log->dir, sizeof log->dir, "%s", dir);
  char path[PATH_MAX_LOG + 32];
  snprintf(path, sizeof path, "%s/settings.json", dir);
  dpt_status st = dpt_write_file_atomic(path, "log ", 0, write_json, settings);
  if (st == DPT_OK) st = open_files(log, append);
  if (st == DPT_OK) st = open_events(log);
  if (st != DPT_OK) {
    dpt_run_log_close(log);
    return st;
  }
  *out = log;
  return DPT_OK;
}

dpt_status dpt_run_log_write(dpt_run_log *log, dpt_run_log_file file, const json_t *line,
                             int64_t step, const dpt_tb_scalar *v, size_t n) {
  FILE *f = log->files[file == DPT_RUN_LOG_EVALS];
  if (json_dumpf(line, f, JSON_COMPACT) != 0 || fputc('\n', f) == EOF || fflush(f) != 0)
    return dpt_set_error(DPT_ERR_IO, "cannot write %s/%s: %s", log->dir,
                         file_names[file == DPT_RUN_LOG_EVALS], strerror(errno));
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return dpt_tb_write(log->events, (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec, step, v, n);
}

const char *dpt_run_log_events_path(const dpt_run_log *log) {
  return log ? log->events_path : NULL;
}

void dpt_run_log_close(dpt_run_log *log) {
  if (!log) return;
  for (int i = 0; i < 2; ++i)
    if (log->files[i]) fclose(log->files[i]);
  dpt_tb_close(log->events);
  free(log);
}
