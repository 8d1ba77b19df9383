/* Runs a fuzz target over corpus files without libFuzzer: `replay DIR|FILE...`. A file named
 * ok-* must be accepted, bad-* rejected (any other name, as libFuzzer writes them, may go either
 * way); a crash, a sanitizer report or a malformed rejection aborts inside the target. Exits 1
 * on a wrong verdict or when no input was found. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz.h"

typedef struct tally {
  size_t inputs, accepted, wrong;
} tally;

static uint8_t *read_all(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      uint8_t *grown = realloc(buf, cap *= 2);
      if (!grown) free(buf);
      buf = grown;
    }
  }
  fclose(f);
  *size = n;
  return buf;
}

static int replay_file(const char *path, const char *name, tally *t) {
  size_t size = 0;
  uint8_t *data = read_all(path, &size);
  if (!data) {
    fprintf(stderr, "replay: %s: cannot read\n", path);
    return 1;
  }
  const int accepted = dpt_fuzz_one(data, size);
  free(data);
  t->inputs++;
  t->accepted += (size_t)accepted;
  const int want = !strncmp(name, "ok-", 3) ? 1 : !strncmp(name, "bad-", 4) ? 0 : -1;
  if (want >= 0 && want != accepted) {
    fprintf(stderr, "replay: %s: %s, expected %s\n", path, accepted ? "accepted" : "rejected",
            want ? "accepted" : "rejected");
    t->wrong++;
  }
  return 0;
}

static int replay_dir(const char *dir, tally *t) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "replay: %s: cannot open the directory\n", dir);
    return 1;
  }
  int rc = 0;
  struct dirent *e;
  while (rc == 0 && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    rc = replay_file(path, e->d_name, t);
  }
  closedir(d);
  return rc;
}

int main(int argc, char **argv) {
  tally t = {0, 0, 0};
  for (int i = 1; i < argc; i++) {
    struct stat sb;
    if (stat(argv[i], &sb) != 0) {
      fprintf(stderr, "replay: %s: no such file or directory\n", argv[i]);
      return 1;
    }
    const char *base = strrchr(argv[i], '/');
    if (S_ISDIR(sb.st_mode) ? replay_dir(argv[i], &t)
                            : replay_file(argv[i], base ? base + 1 : argv[i], &t))
      return 1;
  }
  printf("replay: %zu inputs, %zu accepted, %zu rejected, %zu with the wrong verdict\n", t.inputs,
         t.accepted, t.inputs - t.accepted, t.wrong);
  if (t.inputs == 0) fprintf(stderr, "replay: no input found\n");
  return t.inputs == 0 || t.wrong ? 1 : 0;
}
