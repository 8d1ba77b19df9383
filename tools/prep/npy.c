/* NumPy .npy arrays (TorchRec's Criteo preprocessing: dense float32 [N, 13], sparse int32
 * [N, 26], labels int32 [N, 1]) converted to interaction shards (tools/prep/shards.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "tools/prep/shards.h"

#define CHUNK_ROWS 4096

/* One input array: its file, element type and shape [rows, cols]. */
typedef struct npy_in {
  const char *path;
  FILE *f;
  char kind;      /* 'f' float, 'i' signed, 'u' unsigned, 'b' bool */
  unsigned width; /* bytes per element */
  uint64_t rows, cols;
  unsigned char *buf; /* CHUNK_ROWS rows */
} npy_in;

static dpt_status bad(const char *path, const char *what) {
  return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: %s", path, what);
}

/* The value of `key` in the header's Python dict literal: a pointer just past "'key':". */
static const char *dict_value(const char *h, const char *key) {
  char pat[32];
  snprintf(pat, sizeof pat, "'%s':", key);
  const char *p = strstr(h, pat);
  if (!p) return NULL;
  p += strlen(pat);
  while (*p == ' ')
    p++;
  return p;
}

/* Parses descr ('<f4', '|u1', ...), fortran_order and a 1-D or 2-D shape. */
static dpt_status parse_dict(npy_in *a, const char *h) {
  const char *d = dict_value(h, "descr"), *fo = dict_value(h, "fortran_order");
  const char *sh = dict_value(h, "shape");
  if (!d || !fo || !sh || *d != '\'') return bad(a->path, "not a NumPy array header");
  if (strncmp(fo, "False", 5) != 0)
    return bad(a->path, "a Fortran-order array (save it with np.ascontiguousarray)");
  const char order = d[1];
  a->kind = d[2];
  a->width = (unsigned)strtoul(d + 3, NULL, 10);
  const int little = order == '<' || order == '|' || (order == '=' && a->width == 1);
  if (!little || !strchr("fiub", a->kind) ||
      !(a->width == 1 || a->width == 2 || a->width == 4 || a->width == 8))
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: element type %.6s is not a little-endian "
                         "bool, integer or float",
                         a->path, d);
  char *end;
  if (*sh != '(') return bad(a->path, "no shape in the header");
  errno = 0;
  a->rows = strtoull(sh + 1, &end, 10);
  a->cols = 1;
  if (end == sh + 1 || errno) return bad(a->path, "a 0-dimensional array (want [N] or [N, C])");
  while (*end == ' ')
    end++;
  if (*end == ',') {
    const char *c = end + 1;
    while (*c == ' ')
      c++;
    if (*c != ')') {
      a->cols = strtoull(c, &end, 10);
      if (end == c) return bad(a->path, "a bad shape");
      while (*end == ' ' || *end == ',')
        end++;
      if (*end != ')') return bad(a->path, "more than 2 dimensions (want [N] or [N, C])");
    }
  }
  return DPT_OK;
}

/* Opens an array: magic, version 1 to 3, the header dict; the file's size must match. */
static dpt_status npy_open(npy_in *a) {
  a->f = fopen(a->path, "rb");
  if (!a->f) return dpt_set_error(DPT_ERR_IO, "%s: cannot open: %s", a->path, strerror(errno));
  unsigned char pre[12];
  if (fread(pre, 1, 10, a->f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0)
    return bad(a->path, "not a NumPy .npy file (bad magic)");
  size_t hlen = pre[8] | (size_t)pre[9] << 8, start = 10;
  if (pre[6] >= 2) {
    if (fread(pre + 10, 1, 2, a->f) != 2) return bad(a->path, "truncated header");
    hlen |= (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    start = 12;
  }
  if (pre[6] < 1 || pre[6] > 3 || hlen > 1 << 20) return bad(a->path, "unknown .npy version");
  char *h = malloc(hlen + 1);
  if (!h) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: header", a->path);
  dpt_status st = fread(h, 1, hlen, a->f) == hlen ? DPT_OK : bad(a->path, "truncated header");
  h[hlen] = 0;
  if (st == DPT_OK) st = parse_dict(a, h);
  free(h);
  if (st != DPT_OK) return st;
  struct stat sb;
  if (fstat(fileno(a->f), &sb) != 0)
    return dpt_set_error(DPT_ERR_IO, "%s: %s", a->path, strerror(errno));
  const unsigned long long want = start + hlen + a->rows * a->cols * a->width;
  if ((unsigned long long)sb.st_size != want)
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: %lld bytes, the header's shape [%llu, %llu] "
                         "needs %llu",
                         a->path, (long long)sb.st_size, (unsigned long long)a->rows,
                         (unsigned long long)a->cols, want);
  a->buf = malloc(CHUNK_ROWS * a->cols * a->width);
  if (!a->buf) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: read buffer", a->path);
  return DPT_OK;
}

/* Element (row r of the chunk, column c) as a signed 64-bit integer / as a float. */
static int64_t get_i(const npy_in *a, size_t r, size_t c) {
  const unsigned char *p = a->buf + (r * a->cols + c) * a->width;
  uint64_t u = 0;
  for (unsigned i = 0; i < a->width; i++)
    u |= (uint64_t)p[i] << (8 * i);
  if (a->kind == 'i' && a->width < 8 && (u >> (8 * a->width - 1)) & 1)
    u |= ~UINT64_C(0) << (8 * a->width); /* sign extension */
  return (int64_t)u;
}

static float get_f(const npy_in *a, size_t r, size_t c) {
  const unsigned char *p = a->buf + (r * a->cols + c) * a->width;
  if (a->kind == 'f' && a->width == 4) {
    float v;
    memcpy(&v, p, 4);
    return v;
  }
  if (a->kind == 'f' && a->width == 8) {
    double v;
    memcpy(&v, p, 8);
    return (float)v;
  }
  const int64_t v = get_i(a, r, c);
  return a->kind == 'i' ? (float)v : (float)(uint64_t)v;
}

/* The three arrays agree: rows equal, labels one column, integer ids, the option counts. */
static dpt_status check_arrays(npy_in *in, const dpt_npy_options *o) {
  npy_in *dense = &in[0], *sparse = &in[1], *labels = &in[2];
  if (sparse->kind == 'f' || labels->kind == 'f')
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: ids and labels must be integers (%s is float)",
                         sparse->kind == 'f' ? sparse->path : labels->path,
                         sparse->kind == 'f' ? "sparse" : "labels");
  if (labels->cols != 1)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: labels of shape [%llu, %llu], want [N] or [N, 1]",
                         labels->path, (unsigned long long)labels->rows,
                         (unsigned long long)labels->cols);
  for (int k = 0; k < 2; k++)
    if (in[k].rows != labels->rows)
      return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: %llu rows, %s has %llu", in[k].path,
                           (unsigned long long)in[k].rows, labels->path,
                           (unsigned long long)labels->rows);
  if (dense->cols > DPT_SHARD_MAX_DENSE || sparse->cols < 1 || sparse->cols > DPT_SHARD_MAX_SPARSE)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s, %s: %llu dense and %llu sparse columns",
                         dense->path, sparse->path, (unsigned long long)dense->cols,
                         (unsigned long long)sparse->cols);
  if (o->num_tables != 1 && o->num_tables != sparse->cols)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %llu sparse columns, %zu table sizes given",
                         sparse->path, (unsigned long long)sparse->cols, o->num_tables);
  return DPT_OK;
}

/* Converts rows [0, rows) in chunks: row n goes to shard n mod num_shards. */
static dpt_status convert_rows(npy_in *in, const dpt_npy_options *o, dpt_shard_writer **w,
                               const uint64_t *sizes) {
  npy_in *dense = &in[0], *sparse = &in[1], *labels = &in[2];
  float x[DPT_SHARD_MAX_DENSE + 1];
  int32_t ids[DPT_SHARD_MAX_SPARSE];
  for (uint64_t n = 0; n < labels->rows;) {
    const size_t m = (size_t)(labels->rows - n < CHUNK_ROWS ? labels->rows - n : CHUNK_ROWS);
    for (int k = 0; k < 3; k++)
      if (in[k].cols && fread(in[k].buf, in[k].cols * in[k].width, m, in[k].f) != m)
        return dpt_set_error(DPT_ERR_IO, "%s: read failed at row %llu", in[k].path,
                             (unsigned long long)n);
    for (size_t r = 0; r < m; r++, n++) {
      const int64_t y = get_i(labels, r, 0);
      if (y != 0 && y != 1)
        return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: row %llu: label %lld is not 0 or 1",
                             labels->path, (unsigned long long)n, (long long)y);
      for (size_t j = 0; j < dense->cols; j++)
        x[j] = get_f(dense, r, j);
      for (size_t j = 0; j < sparse->cols; j++) { /* v mod S as Python's %, as TorchRec hashes */
        const int64_t t = (int64_t)sizes[o->num_tables == 1 ? 0 : j];
        const int64_t v = get_i(sparse, r, j) % t;
        ids[j] = (int32_t)(v < 0 ? v + t : v);
      }
      const dpt_status st = dpt_shard_writer_add(w[n % o->num_shards], (float)y, x, ids);
      if (st != DPT_OK) return dpt_error_context(st, "row %llu", (unsigned long long)n);
    }
  }
  return DPT_OK;
}

static dpt_status open_all(npy_in *in, const dpt_npy_options *o) {
  in[0].path = o->dense;
  in[1].path = o->sparse;
  in[2].path = o->labels;
  for (int k = 0; k < 3; k++)
    if (in[k].path) DPT_TRY(npy_open(&in[k]));
  if (!o->dense) {
    in[0].rows = in[2].rows;
    in[0].kind = 'f';
    in[0].path = "(no dense)";
  }
  return check_arrays(in, o);
}

dpt_status dpt_npy_convert(const dpt_npy_options *o, uint64_t *records) {
  if (records) *records = 0;
  if (!o || !o->sparse || !o->labels || !o->out_dir || !o->table_sizes || o->num_tables == 0 ||
      o->num_shards < 1 || o->num_shards > 512)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "npy convert: sparse, labels, table sizes, output "
                                              "directory and 1..512 shards are needed");
  npy_in in[3];
  memset(in, 0, sizeof in);
  dpt_shard_writer **w = calloc(o->num_shards, sizeof *w);
  uint64_t *sizes = malloc(DPT_SHARD_MAX_SPARSE * sizeof *sizes);
  char path[4096];
  dpt_status st = w && sizes ? open_all(in, o) : dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "npy");
  for (size_t j = 0; st == DPT_OK && j < in[1].cols; j++)
    sizes[j] = o->table_sizes[o->num_tables == 1 ? 0 : j];
  if (st == DPT_OK && mkdir(o->out_dir, 0777) != 0 && errno != EEXIST)
    st = dpt_set_error(DPT_ERR_IO, "%s: cannot create the directory: %s", o->out_dir,
                       strerror(errno));
  const char *prefix = o->prefix ? o->prefix : "shard";
  for (size_t s = 0; st == DPT_OK && s < o->num_shards; s++) {
    snprintf(path, sizeof path, "%s/%s-%05zu.bin", o->out_dir, prefix, s);
    st = dpt_shard_writer_open(path, (uint32_t)in[0].cols, (uint32_t)in[1].cols, sizes, &w[s]);
  }
  if (st == DPT_OK) st = convert_rows(in, o, w, sizes);
  size_t closed = 0;
  for (size_t s = 0; w && s < o->num_shards; s++) {
    if (st == DPT_OK) { /* close frees the writer even when it fails */
      if ((st = dpt_shard_writer_close(w[s])) == DPT_OK) closed = s + 1;
    } else {
      dpt_shard_writer_abort(w[s]);
    }
  }
  for (size_t s = 0; st != DPT_OK && s < closed; s++) {
    snprintf(path, sizeof path, "%s/%s-%05zu.bin", o->out_dir, prefix, s);
    remove(path);
  }
  if (st == DPT_OK && records) *records = in[2].rows;
  for (int k = 0; k < 3; k++) {
    if (in[k].f) fclose(in[k].f);
    free(in[k].buf);
  }
  free(w);
  free(sizes);
  return st;
}
