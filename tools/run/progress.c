/* What dptrain run learns of an attempt from the checkpoint directory: the newest valid
 * checkpoint's step before and after it (through dpt_checkpoint_find_latest, as --resume finds
 * it), and the failure record the trainer wrote, read instead of its output. */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "dptrain/advanced.h"
#include "tools/run/progress.h"

const char *dpt_run_find_ckpt_dir(int argc, char **argv) {
  static const char opt[] = "--checkpoint-dir";
  const size_t n = sizeof opt - 1;
  const char *dir = NULL;
  for (int i = 0; i < argc; ++i) {
    if (!strcmp(argv[i], opt) && i + 1 < argc)
      dir = argv[++i];
    else if (!strncmp(argv[i], opt, n) && argv[i][n] == '=')
      dir = argv[i] + n + 1;
  }
  return dir;
}

int64_t dpt_run_newest_step(const char *dir) {
  char path[4096];
  int found = 0;
  dpt_checkpoint_progress p;
  if (dpt_checkpoint_find_latest(dir, NULL, NULL, path, sizeof path, &found, &p) != DPT_OK ||
      !found)
    return 0;
  return p.step;
}

static void record_path(const char *dir, char *out, size_t cap) {
  snprintf(out, cap, "%s/%s", dir, DPT_TRAIN_FAILURE_FILE);
}

void dpt_run_clear_failure(const char *dir) {
  char path[4096];
  record_path(dir, path, sizeof path);
  remove(path);
}

int dpt_run_read_failure(const char *dir, run_failure *f) {
  char path[4096];
  record_path(dir, path, sizeof path);
  json_t *o = json_load_file(path, 0, NULL);
  const char *status = json_string_value(json_object_get(o, "status"));
  const char *cause = json_string_value(json_object_get(o, "cause"));
  const int ok = status && cause && json_is_integer(json_object_get(o, "rank"));
  if (ok) {
    f->rank = (int)json_integer_value(json_object_get(o, "rank"));
    f->replica = (int)json_integer_value(json_object_get(o, "replica"));
    f->disk_full = json_is_true(json_object_get(o, "disk_full"));
    snprintf(f->text, sizeof f->text, "%s: %s", status, cause);
    for (char *c = f->text; *c; ++c)
      if (*c == '\n' || *c == '\r') *c = ' ';
  }
  json_decref(o);
  return ok;
}
