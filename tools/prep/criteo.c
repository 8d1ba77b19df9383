/* Criteo's text layout to interaction shards: the categorical hash, DLRM's dense transform, and
 * the converter (tools/prep/shards.h). */
#define _POSIX_C_SOURCE 200809L /* dup */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "base/error.h"
#include "tools/prep/shards.h"

#define MAX_SHARDS 512 /* open files at once */

int32_t dpt_criteo_hash(const char *value, size_t len, uint64_t table_size) {
  if (len == 0 || table_size < 2) return 0;
  uint64_t h = UINT64_C(0xcbf29ce484222325);
  for (size_t i = 0; i < len; i++) {
    h ^= (unsigned char)value[i];
    h *= UINT64_C(0x100000001b3);
  }
  return (int32_t)(1 + h % (table_size - 1));
}

float dpt_criteo_dense(double x) {
  return x >= 0 ? (float)log1p(x) : 0.0f;
}

typedef struct conv {
  const dpt_criteo_options *o;
  dpt_shard_writer **w;
  char **paths;
  float *dense;
  int32_t *sparse;
  uint64_t n;
} conv;

/* Parses one line (no newline) of file `name`, line `lineno`, into a record and writes it. */
static dpt_status convert_line(conv *c, char *line, const char *name, unsigned long long lineno) {
  const dpt_criteo_options *o = c->o;
  const size_t want = 1 + (size_t)o->num_dense + o->num_sparse;
  size_t fields = 1;
  for (const char *q = line; (q = strchr(q, '\t')) != NULL; q++)
    fields++;
  if (fields != want)
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s:%llu: %zu tab-separated fields, want %zu (label, %u dense, %u sparse)",
                         name, lineno, fields, want, (unsigned)o->num_dense,
                         (unsigned)o->num_sparse);
  size_t field = 0;
  float label = 0;
  char *p = line;
  for (;;) {
    char *tab = strchr(p, '\t');
    const size_t len = tab ? (size_t)(tab - p) : strlen(p);
    if (field == 0) {
      if (len != 1 || (p[0] != '0' && p[0] != '1'))
        return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s:%llu: label '%.*s' is not 0 or 1", name,
                             lineno, (int)(len > 32 ? 32 : len), p);
      label = (float)(p[0] - '0');
    } else if (field <= o->num_dense) {
      double x = 0;
      size_t k = p[0] == '-';
      long long v = 0;
      for (; k < len && k < 18 && p[k] >= '0' && p[k] <= '9'; k++)
        v = 10 * v + (p[k] - '0');
      if (len && k == len && len > (size_t)(p[0] == '-')) { /* a plain integer, the usual case */
        x = p[0] == '-' ? -(double)v : (double)v;
      } else if (len) {
        char save = p[len], *end;
        p[len] = 0;
        errno = 0;
        x = strtod(p, &end);
        const int bad = end != p + len || errno == ERANGE || !isfinite(x);
        p[len] = save;
        if (bad)
          return dpt_set_error(DPT_ERR_BAD_FORMAT,
                               "%s:%llu: dense feature %zu: '%.*s' is not a number", name, lineno,
                               field, (int)(len > 32 ? 32 : len), p);
      }
      c->dense[field - 1] = dpt_criteo_dense(x);
    } else {
      const size_t j = field - 1 - o->num_dense;
      c->sparse[j] = dpt_criteo_hash(p, len, o->table_sizes[j]);
    }
    field++;
    if (!tab) break;
    p = tab + 1;
  }
  const dpt_status st =
      dpt_shard_writer_add(c->w[c->n % o->num_shards], label, c->dense, c->sparse);
  if (st != DPT_OK) return dpt_error_context(st, "%s:%llu", name, lineno);
  c->n++;
  return DPT_OK;
}

/* Reads the next line of f into *line (grown as needed, newline kept): its length, 0 at the
 * end, -1 on a read error. */
static long long read_line(gzFile f, char **line, size_t *cap) {
  size_t len = 0;
  for (;;) {
    if (*cap - len < 2) {
      const size_t ncap = *cap ? 2 * *cap : 4096;
      char *p = realloc(*line, ncap);
      if (!p) return -1;
      *line = p;
      *cap = ncap;
    }
    /* gzgets stops after a newline or when the buffer is full; NULs inside are kept, so the
     * length comes from the bytes read, not strlen, where a line holds one. */
    const z_off_t before = gztell(f);
    if (!gzgets(f, *line + len, (int)(*cap - len > INT32_MAX ? INT32_MAX : *cap - len))) {
      int err = Z_OK;
      gzerror(f, &err);
      return err == Z_OK ? (long long)len : -1; /* Z_BUF_ERROR: a truncated gzip stream */
    }
    len += (size_t)(gztell(f) - before);
    if ((*line)[len - 1] == '\n' || gzeof(f)) return (long long)len;
  }
}

static dpt_status convert_file(conv *c, const char *path) {
  const int is_stdin = !strcmp(path, "-");
  const char *name = is_stdin ? "<stdin>" : path;
  /* zlib reads gzip (Criteo's day_N.gz) and, transparently, plain text. */
  errno = 0;
  gzFile f = is_stdin ? gzdopen(dup(STDIN_FILENO), "rb") : gzopen(path, "rb");
  if (!f)
    return dpt_set_error(DPT_ERR_IO, "%s: cannot open: %s", path,
                         errno ? strerror(errno) : "out of memory");
  gzbuffer(f, 1 << 17);
  char *line = NULL;
  size_t cap = 0;
  long long len;
  unsigned long long lineno = 0;
  dpt_status st = DPT_OK;
  while ((len = read_line(f, &line, &cap)) > 0) {
    lineno++;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
      line[--len] = 0;
    if ((size_t)len != strlen(line)) {
      st = dpt_set_error(DPT_ERR_BAD_FORMAT, "%s:%llu: a NUL byte inside the line", name, lineno);
      break;
    }
    st = convert_line(c, line, name, lineno);
    if (st != DPT_OK) break;
  }
  if (st == DPT_OK && len < 0) {
    int err = Z_OK;
    const char *msg = gzerror(f, &err);
    st = dpt_set_error(DPT_ERR_IO, "%s: read failed after line %llu: %s", name, lineno,
                       err == Z_ERRNO ? strerror(errno) : msg);
  }
  free(line);
  gzclose(f);
  return st;
}

static dpt_status check_options(const dpt_criteo_options *o) {
  if (!o || !o->out_dir || !o->table_sizes)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "criteo convert: NULL options");
  if (o->num_shards < 1 || o->num_shards > MAX_SHARDS)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "criteo convert: %zu shards (1..%d)", o->num_shards,
                         MAX_SHARDS);
  if (o->num_sparse < 1 || o->num_sparse > DPT_SHARD_MAX_SPARSE ||
      o->num_dense > DPT_SHARD_MAX_DENSE)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "criteo convert: %u dense, %u sparse features",
                         (unsigned)o->num_dense, (unsigned)o->num_sparse);
  for (uint32_t j = 0; j < o->num_sparse; j++)
    if (o->table_sizes[j] < 2 || o->table_sizes[j] > DPT_SHARD_MAX_TABLE)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "criteo convert: table %u of size %llu (2..2^31: id 0 is reserved for "
                           "an empty field)",
                           (unsigned)j, (unsigned long long)o->table_sizes[j]);
  return DPT_OK;
}

dpt_status dpt_criteo_convert(const char *const *inputs, size_t num_inputs,
                              const dpt_criteo_options *o, uint64_t *records) {
  if (records) *records = 0;
  DPT_TRY(check_options(o));
  if (!inputs || num_inputs == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "criteo convert: no input");
  if (mkdir(o->out_dir, 0777) != 0 && errno != EEXIST)
    return dpt_set_error(DPT_ERR_IO, "%s: cannot create the directory: %s", o->out_dir,
                         strerror(errno));
  conv c = {.o = o};
  c.w = calloc(o->num_shards, sizeof *c.w);
  c.paths = calloc(o->num_shards, sizeof *c.paths);
  c.dense = malloc((o->num_dense + 1) * sizeof *c.dense);
  c.sparse = malloc(o->num_sparse * sizeof *c.sparse);
  dpt_status st = DPT_OK;
  if (!c.w || !c.paths || !c.dense || !c.sparse)
    st = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "criteo convert");
  const char *prefix = o->prefix ? o->prefix : "shard";
  for (size_t s = 0; st == DPT_OK && s < o->num_shards; s++) {
    const size_t len = strlen(o->out_dir) + strlen(prefix) + 32;
    c.paths[s] = malloc(len);
    if (!c.paths[s]) {
      st = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "criteo convert");
      break;
    }
    snprintf(c.paths[s], len, "%s/%s-%05zu.bin", o->out_dir, prefix, s);
    st = dpt_shard_writer_open(c.paths[s], o->num_dense, o->num_sparse, o->table_sizes, &c.w[s]);
  }
  for (size_t i = 0; st == DPT_OK && i < num_inputs; i++)
    st = convert_file(&c, inputs[i]);
  size_t closed = 0;
  for (size_t s = 0; c.w && s < o->num_shards; s++) {
    if (st == DPT_OK) {
      st = dpt_shard_writer_close(c.w[s]);
      if (st == DPT_OK) closed = s + 1;
    } else {
      dpt_shard_writer_abort(c.w[s]);
    }
    c.w[s] = NULL;
  }
  if (st != DPT_OK)
    for (size_t s = 0; s < closed; s++)
      remove(c.paths[s]);
  for (size_t s = 0; c.paths && s < o->num_shards; s++)
    free(c.paths[s]);
  if (st == DPT_OK && records) *records = c.n;
  free(c.paths);
  free(c.w);
  free(c.dense);
  free(c.sparse);
  return st;
}
