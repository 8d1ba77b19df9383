/* The host file of dptrain run: Open MPI's format read, the hosts that no longer resolve
 * dropped, the slots counted and the lines kept written for the attempt's {hostfile}. A line is
 * "HOST [slots=N] [max_slots=N] ..."; '#' starts a comment; only slots= is read. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/file.h"
#include "tools/run/hosts.h"

enum { MAX_SLOTS = 1 << 20 };

/* The slots one line gives (words after the host), or -1 for a bad slots= value. */
static int line_slots(char *rest) {
  int slots = 1;
  for (char *save = NULL, *w = strtok_r(rest, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
    if (strncmp(w, "slots=", 6)) continue;
    char *end = NULL;
    errno = 0;
    const long n = strtol(w + 6, &end, 10);
    if (errno || end == w + 6 || *end || n < 1 || n > MAX_SLOTS) return -1;
    slots = (int)n;
  }
  return slots;
}

/* 1 when host resolves; else 0, with why in `why`. */
static int resolves(const char *host, char *why, size_t cap) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const int rc = getaddrinfo(host, NULL, &hints, &res);
  if (res) freeaddrinfo(res);
  if (rc != 0) snprintf(why, cap, "%s", gai_strerror(rc));
  return rc == 0;
}

typedef struct kept {
  char *text; /* the lines kept, '\n' after each */
  size_t len, cap;
} kept;

static int keep_line(kept *k, const char *line) {
  const size_t n = strlen(line);
  if (k->len + n + 2 > k->cap) {
    const size_t cap = (k->len + n + 2) * 2;
    char *t = realloc(k->text, cap);
    if (!t) return -1;
    k->text = t;
    k->cap = cap;
  }
  memcpy(k->text + k->len, line, n);
  k->len += n;
  k->text[k->len++] = '\n';
  k->text[k->len] = '\0';
  return 0;
}

static int write_kept(FILE *f, const void *ctx) {
  const kept *k = ctx;
  return fwrite(k->text ? k->text : "", 1, k->len, f) == k->len;
}

/* One line of the file: kept (its slots added) or dropped; -1 for a malformed line. */
static int read_line(const char *path, int no, char *line, kept *k, int *slots) {
  char *hash = strchr(line, '#');
  if (hash) *hash = '\0';
  line[strcspn(line, "\r\n")] = '\0';
  char copy[1024];
  snprintf(copy, sizeof copy, "%s", line);
  char *save = NULL, *host = strtok_r(line, " \t", &save);
  if (!host) return 0;
  const int n = line_slots(save ? save : (char *)"");
  char why[256];
  if (n < 0) {
    fprintf(stderr, "dptrain run: %s:%d: slots= is not a whole number in [1, %d]\n", path, no,
            MAX_SLOTS);
    return -1;
  }
  if (!resolves(host, why, sizeof why)) {
    fprintf(stderr, "dptrain run: %s:%d: dropped host '%s': it does not resolve (%s)\n", path, no,
            host, why);
    return 0;
  }
  if (*slots > INT_MAX - n) {
    fprintf(stderr, "dptrain run: %s:%d: more than %d slots in all\n", path, no, INT_MAX);
    return -1;
  }
  *slots += n;
  if (keep_line(k, copy) == 0) return 0;
  fprintf(stderr, "dptrain run: out of memory\n");
  return -1;
}

int dpt_hosts_refresh(const char *path, const char *out, int *slots) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "dptrain run: cannot read the host file %s: %s\n", path, strerror(errno));
    return -1;
  }
  kept k = {NULL, 0, 0};
  char line[1024];
  int rc = 0, no = 0;
  *slots = 0;
  while (rc == 0 && fgets(line, sizeof line, f))
    rc = read_line(path, ++no, line, &k, slots);
  fclose(f);
  if (rc == 0 && dpt_write_file_atomic(out, "host file ", 0, write_kept, &k) != DPT_OK) {
    fprintf(stderr, "dptrain run: cannot write %s: %s\n", out, dpt_last_error());
    rc = -1;
  }
  free(k.text);
  return rc;
}
