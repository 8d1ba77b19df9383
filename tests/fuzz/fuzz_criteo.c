/* Fuzz target: Criteo's text layout (tools/prep/criteo.c), converted from a memfd into two
 * shards (2 dense, 3 sparse features) in a directory under /dev/shm (or TMPDIR) made once per
 * process. An accepted text gives shards that the reader loads with one record per line. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "dptrain/interactions.h"
#include "tests/fuzz/fuzz.h"
#include "tools/prep/shards.h"

#define SHARDS 2

static char work_dir[256]; /* the output directory, "" until made */

static void remove_dir(void) {
  rmdir(work_dir);
}

/* The output directory, made on the first call and removed at exit. */
static const char *out_dir(void) {
  if (!work_dir[0]) {
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    snprintf(work_dir, sizeof work_dir, "%s/dpt-fuzz-criteo-XXXXXX", base ? base : "/tmp");
    dpt_fuzz_check(mkdtemp(work_dir) != NULL, "cannot make the output directory");
    atexit(remove_dir);
  }
  return work_dir;
}

static void remove_shards(const char *dir) {
  char path[320];
  for (int s = 0; s < SHARDS; s++) {
    snprintf(path, sizeof path, "%s/shard-%05d.bin", dir, s);
    remove(path);
  }
}

int dpt_fuzz_one(const uint8_t *data, size_t size) {
  static const uint64_t tables[3] = {2, 10, 1000};
  const char *dir = out_dir();
  const dpt_criteo_options o = {2, 3, tables, SHARDS, dir, NULL};
  char path[64];
  const int fd = dpt_fuzz_memfd(data, size, path);
  const char *inputs[1] = {path};
  uint64_t records = 0;
  const dpt_status s = dpt_criteo_convert(inputs, 1, &o, &records);
  close(fd);
  if (s != DPT_OK) {
    remove_shards(dir);
    return dpt_fuzz_rejected(s);
  }
  char pattern[320];
  snprintf(pattern, sizeof pattern, "%s/shard-*.bin", dir);
  dpt_interactions *d = NULL;
  dpt_fuzz_check(dpt_interactions_open(pattern, 0, 1, &d) == DPT_OK, "its shards do not load");
  dpt_fuzz_check(dpt_interactions_total_records(d) == records, "records lost or gained");
  dpt_interactions_destroy(d);
  remove_shards(dir);
  return 1;
}
