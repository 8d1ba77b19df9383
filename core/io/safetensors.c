/* safetensors reader and writer (format in include/dptrain/safetensors.h).
 *
 * The reader maps the file read-only (read whole where it cannot be mapped), so processes that
 * open one file share its pages in the page cache; it checks the header bytes are UTF-8 (to name
 * the first bad byte), parses the JSON with jansson (duplicate keys refused), then checks the
 * schema (a top-level object of tensor entries and an optional "__metadata__" object of strings)
 * and validates everything a tensor claims before any pointer into the data is handed out. The
 * writer builds the header in memory, pads it with spaces to a multiple of 8 bytes, and writes
 * "<path>.tmp", flushed to the disk, then renames it over the destination.
 */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* fileno, fsync */
#endif

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if defined(_WIN32)
#include <io.h>
#include <windows.h>
#else
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "base/error.h"
#include "base/size.h"
#include "dptrain/backend.h" /* dpt_f16_to_f32_scalar */
#include "dptrain/safetensors.h"

/* ---- dtypes -------------------------------------------------------------------------------- */

typedef enum st_dtype {
  ST_F32,
  ST_F16,
  ST_BF16,
  ST_F64,
  ST_I64,
  ST_U64,
  ST_I32,
  ST_U32,
  ST_I16,
  ST_U16,
  ST_I8,
  ST_U8,
  ST_BOOL,
  ST_F8_E5M2,
  ST_F8_E4M3,
  ST_DTYPE_COUNT
} st_dtype;

static const struct {
  const char *name;
  size_t size;
} st_dtypes[ST_DTYPE_COUNT] = {
    [ST_F32] = {"F32", 4},   [ST_F16] = {"F16", 2},         [ST_BF16] = {"BF16", 2},
    [ST_F64] = {"F64", 8},   [ST_I64] = {"I64", 8},         [ST_U64] = {"U64", 8},
    [ST_I32] = {"I32", 4},   [ST_U32] = {"U32", 4},         [ST_I16] = {"I16", 2},
    [ST_U16] = {"U16", 2},   [ST_I8] = {"I8", 1},           [ST_U8] = {"U8", 1},
    [ST_BOOL] = {"BOOL", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1}, [ST_F8_E4M3] = {"F8_E4M3", 1},
};

static int st_dtype_lookup(const char *name) {
  for (int i = 0; i < ST_DTYPE_COUNT; i++)
    if (strcmp(st_dtypes[i].name, name) == 0) return i;
  return -1;
}

static int st_host_little_endian(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

/* Index of the first byte that is not part of valid UTF-8 (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), or n when all of s[0, n) is valid. */
static size_t st_utf8_check(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    const unsigned c = s[i];
    size_t len;
    unsigned lo = 0x80, hi = 0xbf; /* range of the first continuation byte */
    if (c < 0x80) {
      i++;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;
      if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;
    } else {
      return i;
    }
    if (n - i < len || s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k < len; k++)
      if (s[i + k] < 0x80 || s[i + k] > 0xbf) return i;
    i += len;
  }
  return n;
}

/* ---- the file handle ----------------------------------------------------------------------- */

typedef struct st_entry {
  char *name; /* owned, decoded UTF-8 */
  int dtype;  /* st_dtype */
  int ndim;
  int64_t shape[DPT_ST_MAX_DIMS];
  uint64_t begin, end; /* data_offsets, bytes from the start of the data section */
  size_t count;        /* elements */
  size_t nbytes;       /* count * element size */
} st_entry;

struct dpt_safetensors {
  char *path;                /* owned copy, for messages */
  unsigned char *file;       /* owned, [file_size] bytes: the whole file, read-only */
  size_t file_size;          /* bytes */
  int mapped;                /* file is a mapping (munmap), else malloc'd (free) */
  const unsigned char *data; /* the data section, inside file */
  size_t data_size;          /* bytes */
  st_entry *entries;         /* owned, [count] in header order */
  size_t count, cap;
  st_entry **by_name; /* owned, [count] pointers into entries sorted by name */
  char **meta;        /* owned, [2 * meta_count] key, value, key, value, ... */
  size_t meta_count, meta_cap;
};

/* ---- the header, parsed with jansson ------------------------------------------------------- */

#define ST_HEADER_START 8u /* the header follows the 8-byte length */

/* A problem with what tensor `name` claims (its entry parsed as JSON). */
static dpt_status st_entry_error(const dpt_safetensors *st, const char *name, const char *fmt, ...)
    DPT_PRINTF(3, 4);

static dpt_status st_entry_error(const dpt_safetensors *st, const char *name, const char *fmt,
                                 ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: tensor '%s': bad header entry: %s", st->path, name,
                       what);
}

static char *st_strdup(const char *s) {
  const size_t n = strlen(s) + 1;
  char *p = malloc(n);
  if (p) memcpy(p, s, n);
  return p;
}

/* A JSON type's name, for messages. */
static const char *st_json_type(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT:
    return "an object";
  case JSON_ARRAY:
    return "an array";
  case JSON_STRING:
    return "a string";
  case JSON_INTEGER:
    return "an integer";
  case JSON_REAL:
    return "a number with a fraction or exponent";
  case JSON_TRUE:
  case JSON_FALSE:
    return "a boolean";
  case JSON_NULL:
    return "null";
  }
  return "?";
}

/* `[u, u, ...]`: non-negative integers into vals (at most max; *count receives how many). */
static dpt_status st_uint_array(const dpt_safetensors *st, const char *name, const char *what,
                                const json_t *arr, uint64_t *vals, int max, int *count) {
  *count = 0;
  if (!json_is_array(arr))
    return st_entry_error(st, name, "\"%s\" must be an array, not %s", what, st_json_type(arr));
  const size_t n = json_array_size(arr);
  if (n > (size_t)max)
    return st_entry_error(st, name, "\"%s\" has %zu entries, more than %d", what, n, max);
  for (size_t k = 0; k < n; k++) {
    const json_t *v = json_array_get(arr, k);
    if (!json_is_integer(v))
      return st_entry_error(st, name, "\"%s\" entry %zu must be an integer, not %s", what, k,
                            st_json_type(v));
    if (json_integer_value(v) < 0)
      return st_entry_error(st, name, "\"%s\" entry %zu = %lld must not be negative", what, k,
                            (long long)json_integer_value(v));
    vals[k] = (uint64_t)json_integer_value(v);
  }
  *count = (int)n;
  return DPT_OK;
}

/* One tensor entry {"dtype": .., "shape": [..], "data_offsets": [b, e]} into e (named). Unknown
 * fields are ignored, as by the reference reader. */
static dpt_status st_parse_tensor(const dpt_safetensors *st, st_entry *e, const json_t *obj) {
  if (!json_is_object(obj))
    return st_entry_error(st, e->name, "the entry must be an object, not %s", st_json_type(obj));
  static const char *const fields[] = {"dtype", "shape", "data_offsets"};
  for (int k = 0; k < 3; k++)
    if (!json_object_get(obj, fields[k]))
      return st_entry_error(st, e->name, "the entry lacks \"%s\"", fields[k]);
  const json_t *dtype = json_object_get(obj, "dtype");
  if (!json_is_string(dtype))
    return st_entry_error(st, e->name, "\"dtype\" must be a string, not %s", st_json_type(dtype));
  e->dtype = st_dtype_lookup(json_string_value(dtype));
  if (e->dtype < 0)
    return st_entry_error(st, e->name, "unknown dtype \"%.32s\"", json_string_value(dtype));
  uint64_t dims[DPT_ST_MAX_DIMS];
  DPT_TRY(st_uint_array(st, e->name, "shape", json_object_get(obj, "shape"), dims, DPT_ST_MAX_DIMS,
                        &e->ndim));
  for (int k = 0; k < e->ndim; k++)
    e->shape[k] = (int64_t)dims[k]; /* jansson's integers are int64: they fit */
  uint64_t off[3];
  int n_off;
  DPT_TRY(st_uint_array(st, e->name, "data_offsets", json_object_get(obj, "data_offsets"), off, 3,
                        &n_off));
  if (n_off != 2)
    return st_entry_error(st, e->name, "\"data_offsets\" has %d entries, expected 2", n_off);
  e->begin = off[0];
  e->end = off[1];
  return DPT_OK;
}

/* "__metadata__": {"key": "value", ...} into st->meta, in header order. */
static dpt_status st_parse_metadata(dpt_safetensors *st, json_t *obj) {
  if (!json_is_object(obj))
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: \"__metadata__\" must be an object, not %s",
                         st->path, st_json_type(obj));
  const size_t n = json_object_size(obj);
  st->meta = calloc(n ? 2 * n : 1, sizeof *st->meta);
  if (!st->meta) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory", st->path);
  st->meta_cap = n;
  const char *key;
  json_t *value;
  json_object_foreach(obj, key, value) {
    if (!json_is_string(value))
      return dpt_set_error(DPT_ERR_BAD_FORMAT,
                           "%s: __metadata__ value of \"%.64s\" is not a string but %s", st->path,
                           key, st_json_type(value));
    char *k = st_strdup(key), *v = st_strdup(json_string_value(value));
    if (!k || !v) {
      free(k);
      free(v);
      return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory", st->path);
    }
    st->meta[2 * st->meta_count] = k;
    st->meta[2 * st->meta_count + 1] = v;
    st->meta_count++;
  }
  return DPT_OK;
}

/* The whole header: {"name": {...}, "__metadata__": {...}, ...}, then at most whitespace (the
 * reference writer pads with spaces). jansson checks the JSON itself (strict RFC 8259: UTF-8,
 * escapes, no NUL in strings, no duplicate keys at any level); the schema is checked here. */
static dpt_status st_parse_header(dpt_safetensors *st, const unsigned char *h, size_t n) {
  if (n == 0 || h[0] != '{')
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: the header must start with '{'", st->path);
  json_error_t err;
  json_t *root = json_loadb((const char *)h, n, JSON_REJECT_DUPLICATES, &err);
  if (!root)
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: bad header JSON at line %d, column %d (header byte %d, file offset "
                         "%zu): %s",
                         st->path, err.line, err.column, err.position,
                         (size_t)err.position + ST_HEADER_START, err.text);
  dpt_status s = DPT_OK;
  if (!json_is_object(root)) {
    s = dpt_set_error(DPT_ERR_BAD_FORMAT,
                      "%s: the header must be a JSON object (starting with '{'), not %s", st->path,
                      st_json_type(root));
    json_decref(root);
    return s;
  }
  const size_t total = json_object_size(root);
  st->entries = calloc(total ? total : 1, sizeof *st->entries);
  if (!st->entries) s = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory", st->path);
  st->cap = total;
  const char *key;
  json_t *value;
  json_object_foreach(root, key, value) {
    if (s != DPT_OK) break;
    if (strcmp(key, "__metadata__") == 0) {
      s = st_parse_metadata(st, value);
      continue;
    }
    st_entry *e = &st->entries[st->count];
    e->name = st_strdup(key);
    if (!e->name) {
      s = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory", st->path);
      break;
    }
    st->count++;
    s = st_parse_tensor(st, e, value);
  }
  json_decref(root);
  return s;
}

/* ---- validation of what the header claims ------------------------------------------------- */

static int st_cmp_name(const void *a, const void *b) {
  const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;
  return strcmp(x->name, y->name);
}

static int st_cmp_offsets(const void *a, const void *b) {
  const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

/* "[2, 3]" for messages. */
static void st_shape_str(const int64_t *shape, int ndim, char *buf, size_t size) {
  size_t len = (size_t)snprintf(buf, size, "[");
  for (int k = 0; k < ndim && len < size; k++)
    len += (size_t)snprintf(buf + len, size - len, "%s%lld", k ? ", " : "", (long long)shape[k]);
  if (len < size) snprintf(buf + len, size - len, "]");
}

/* One tensor on its own: its shape's byte size fits, and its data_offsets lie inside the data
 * section and hold exactly that many bytes. Fills e->count and e->nbytes. */
static dpt_status st_validate_entry(const dpt_safetensors *st, st_entry *e) {
  char shape[160];
  st_shape_str(e->shape, e->ndim, shape, sizeof shape);
  size_t count = 1, nbytes;
  int ok = 1;
  for (int k = 0; k < e->ndim && ok; k++)
    ok = (uint64_t)e->shape[k] <= (uint64_t)SIZE_MAX &&
         dpt_mul_ok(count, (size_t)e->shape[k], &count);
  if (!ok || !dpt_mul_ok(count, st_dtypes[e->dtype].size, &nbytes))
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: tensor '%s': shape %s overflows", st->path,
                         e->name, shape);
  e->count = count;
  e->nbytes = nbytes;
  if (e->begin > e->end)
    return dpt_set_error(
        DPT_ERR_BAD_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin",
        st->path, e->name, (unsigned long long)e->begin, (unsigned long long)e->end);
  if (e->end > st->data_size)
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: tensor '%s': data_offsets [%llu, %llu] lie outside the data "
                         "section of %zu bytes",
                         st->path, e->name, (unsigned long long)e->begin,
                         (unsigned long long)e->end, st->data_size);
  if (e->end - e->begin != nbytes)
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but shape "
                         "%s of %s needs %zu",
                         st->path, e->name, (unsigned long long)e->begin,
                         (unsigned long long)e->end, (unsigned long long)(e->end - e->begin), shape,
                         st_dtypes[e->dtype].name, nbytes);
  return DPT_OK;
}

/* Sorts st->by_name (filled with every entry) for lookups and refuses duplicate names. */
static dpt_status st_check_names(dpt_safetensors *st) {
  const size_t n = st->count;
  qsort(st->by_name, n, sizeof *st->by_name, st_cmp_name);
  for (size_t t = 1; t < n; t++)
    if (strcmp(st->by_name[t - 1]->name, st->by_name[t]->name) == 0)
      return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: duplicate tensor name '%s' in the header",
                           st->path, st->by_name[t]->name);
  return DPT_OK;
}

/* The tensors must tile the data section exactly, as the reference reader demands: sorted by
 * offset (by_offset, [count] entries, sorted here), each begins where the previous ended and
 * the last ends at the end of the data. */
static dpt_status st_check_tiling(const dpt_safetensors *st, st_entry **by_offset) {
  const size_t n = st->count;
  qsort(by_offset, n, sizeof *by_offset, st_cmp_offsets);
  uint64_t covered = 0;
  for (size_t t = 0; t < n; t++) {
    const st_entry *e = by_offset[t];
    if (e->begin < covered) {
      const st_entry *prev = by_offset[t - 1]; /* covered > 0 means t > 0 */
      return dpt_set_error(
          DPT_ERR_BAD_FORMAT, "%s: tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] overlap",
          st->path, prev->name, (unsigned long long)prev->begin, (unsigned long long)prev->end,
          e->name, (unsigned long long)e->begin, (unsigned long long)e->end);
    }
    if (e->begin > covered)
      return dpt_set_error(DPT_ERR_BAD_FORMAT,
                           "%s: data bytes [%llu, %llu) belong to no tensor (a hole before tensor "
                           "'%s')",
                           st->path, (unsigned long long)covered, (unsigned long long)e->begin,
                           e->name);
    covered = e->end;
  }
  if (covered != st->data_size)
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: the data section has %zu bytes but the tensors cover only %llu (the "
                         "last is '%s')",
                         st->path, st->data_size, (unsigned long long)covered,
                         by_offset[n - 1]->name);
  return DPT_OK;
}

/* Everything the header claims, before any pointer into the data is handed out: each tensor
 * on its own, then the names (unique) and the offsets (tiling the data) across tensors. */
static dpt_status st_validate(dpt_safetensors *st) {
  const size_t n = st->count;
  for (size_t t = 0; t < n; t++)
    DPT_TRY(st_validate_entry(st, &st->entries[t]));
  if (n == 0) {
    if (st->data_size != 0)
      return dpt_set_error(DPT_ERR_BAD_FORMAT,
                           "%s: no tensors, but %zu bytes of data follow the header", st->path,
                           st->data_size);
    return DPT_OK;
  }
  st->by_name = malloc(n * sizeof *st->by_name);
  st_entry **by_offset = malloc(n * sizeof *by_offset);
  if (!st->by_name || !by_offset) {
    free(by_offset);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory", st->path);
  }
  for (size_t t = 0; t < n; t++)
    st->by_name[t] = by_offset[t] = &st->entries[t];
  dpt_status s = st_check_names(st);
  if (s == DPT_OK) s = st_check_tiling(st, by_offset);
  free(by_offset);
  return s;
}

/* ---- opening, queries ---------------------------------------------------------------------- */

void dpt_safetensors_close(dpt_safetensors *st) {
  if (!st) return;
  for (size_t t = 0; t < st->count; t++)
    free(st->entries[t].name);
  for (size_t k = 0; k < 2 * st->meta_count; k++)
    free(st->meta[k]);
  free(st->entries);
  free(st->by_name);
  free(st->meta);
#if !defined(_WIN32)
  if (st->mapped)
    munmap(st->file, st->file_size);
  else
#endif
    free(st->file);
  free(st->path);
  free(st);
}

/* Reads the whole file into st->file (malloc'd) from the stream f, st->file_size bytes. */
static dpt_status st_read_stream(dpt_safetensors *st, FILE *f) {
  st->file = malloc(st->file_size ? st->file_size : 1);
  if (!st->file)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes", st->path,
                         st->file_size);
  if (fread(st->file, 1, st->file_size, f) != st->file_size)
    return dpt_set_error(DPT_ERR_IO, "%s: read failed: %s", st->path,
                         ferror(f) ? strerror(errno) : "file shrank while reading");
  return DPT_OK;
}

/* Maps the file read-only into st->file (shared with the page cache; nothing is copied until a
 * page is touched); 0 when it cannot be mapped (an empty file, a system without mmap), and the
 * caller reads it instead. */
static int st_map_file(dpt_safetensors *st, FILE *f) {
#if defined(_WIN32)
  (void)st;
  (void)f;
  return 0;
#else
  if (st->file_size == 0) return 0;
  void *p = mmap(NULL, st->file_size, PROT_READ, MAP_PRIVATE, fileno(f), 0);
  if (p == MAP_FAILED) return 0;
  st->file = p;
  st->mapped = 1;
  return 1;
#endif
}

/* The whole file as st->file: mapped where possible, else read. */
static dpt_status st_read_file(dpt_safetensors *st) {
  FILE *f = fopen(st->path, "rb");
  if (!f) return dpt_set_error(DPT_ERR_IO, "%s: cannot open: %s", st->path, strerror(errno));
  struct stat sb;
  if (fstat(fileno(f), &sb) == 0 && !S_ISREG(sb.st_mode)) {
    fclose(f);
    return dpt_set_error(DPT_ERR_IO, "%s: not a file (%s)", st->path,
                         S_ISDIR(sb.st_mode) ? "a directory" : "a device, pipe or socket");
  }
  dpt_status s = DPT_OK;
  long size = -1;
  if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
  if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
    s = dpt_set_error(DPT_ERR_IO, "%s: cannot seek: %s", st->path, strerror(errno));
  } else {
    st->file_size = (size_t)size;
    if (!st_map_file(st, f)) s = st_read_stream(st, f);
  }
  fclose(f);
  return s;
}

dpt_status dpt_safetensors_open(const char *path, dpt_safetensors **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "safetensors_open: out is NULL");
  *out = NULL;
  if (!path) return dpt_set_error(DPT_ERR_INVALID_ARG, "safetensors_open: path is NULL");
  dpt_safetensors *st = calloc(1, sizeof *st);
  if (st) st->path = malloc(strlen(path) + 1);
  if (!st || !st->path) {
    free(st);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
  }
  strcpy(st->path, path);
  dpt_status s = st_read_file(st);
  if (s == DPT_OK && st->file_size < ST_HEADER_START)
    s = dpt_set_error(DPT_ERR_BAD_FORMAT,
                      "%s: %zu bytes is too short for a safetensors file (8-byte header length)",
                      path, st->file_size);
  uint64_t header_len = 0;
  if (s == DPT_OK) {
    for (int k = 7; k >= 0; k--)
      header_len = (header_len << 8) | st->file[k];
    if (header_len > st->file_size - ST_HEADER_START)
      s = dpt_set_error(DPT_ERR_BAD_FORMAT,
                        "%s: header length %llu runs past the end of the file (%zu bytes after "
                        "the length field)",
                        path, (unsigned long long)header_len, st->file_size - ST_HEADER_START);
  }
  if (s == DPT_OK) {
    const unsigned char *h = st->file + ST_HEADER_START;
    const size_t bad = st_utf8_check(h, (size_t)header_len);
    if (bad < header_len)
      s = dpt_set_error(DPT_ERR_BAD_FORMAT,
                        "%s: bad header JSON at header byte %zu (file offset %zu): not UTF-8", path,
                        bad, bad + ST_HEADER_START);
  }
  if (s == DPT_OK) {
    s = st_parse_header(st, st->file + ST_HEADER_START, (size_t)header_len);
  }
  if (s == DPT_OK) {
    st->data = st->file + ST_HEADER_START + header_len;
    st->data_size = st->file_size - ST_HEADER_START - (size_t)header_len;
    s = st_validate(st);
  }
  if (s != DPT_OK) {
    dpt_safetensors_close(st);
    return s;
  }
  *out = st;
  return DPT_OK;
}

size_t dpt_safetensors_count(const dpt_safetensors *st) {
  return st ? st->count : 0;
}

static void st_fill_info(const dpt_safetensors *st, const st_entry *e, dpt_st_info *out) {
  memset(out, 0, sizeof *out);
  out->name = e->name;
  out->dtype = st_dtypes[e->dtype].name;
  out->elem_size = st_dtypes[e->dtype].size;
  out->ndim = e->ndim;
  memcpy(out->shape, e->shape, (size_t)e->ndim * sizeof e->shape[0]);
  out->count = e->count;
  out->data = st->data + e->begin;
  out->nbytes = e->nbytes;
}

dpt_status dpt_safetensors_info(const dpt_safetensors *st, size_t index, dpt_st_info *out) {
  if (!st || !out)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "safetensors_info: %s is NULL", !st ? "file" : "out");
  if (index >= st->count)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "safetensors_info: %s: index %zu >= %zu tensors",
                         st->path, index, st->count);
  st_fill_info(st, &st->entries[index], out);
  return DPT_OK;
}

static int st_cmp_key_entry(const void *key, const void *elem) {
  return strcmp((const char *)key, (*(st_entry *const *)elem)->name);
}

static const st_entry *st_lookup(const dpt_safetensors *st, const char *name) {
  if (st->count == 0) return NULL;
  st_entry *const *hit =
      bsearch(name, st->by_name, st->count, sizeof *st->by_name, st_cmp_key_entry);
  return hit ? *hit : NULL;
}

dpt_status dpt_safetensors_find(const dpt_safetensors *st, const char *name, dpt_st_info *out) {
  if (!st || !name || !out)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "safetensors_find: %s is NULL",
                         !st     ? "file"
                         : !name ? "name"
                                 : "out");
  const st_entry *e = st_lookup(st, name);
  if (!e) return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: no tensor named '%s'", st->path, name);
  st_fill_info(st, e, out);
  return DPT_OK;
}

/* What both typed reads check first: the arguments, then tensor `name` is there (*out). */
static dpt_status st_find_for_read(const dpt_safetensors *st, const char *fn, const char *name,
                                   const void *dst, size_t count, const st_entry **out) {
  if (!st || !name || (!dst && count > 0))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %s is NULL", fn,
                         !st     ? "file"
                         : !name ? "name"
                                 : "dst");
  *out = st_lookup(st, name);
  if (!*out) return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: no tensor named '%s'", st->path, name);
  return DPT_OK;
}

/* And after the dtype: it holds `count` elements. */
static dpt_status st_check_count(const dpt_safetensors *st, const st_entry *e, const char *name,
                                 size_t count) {
  if (e->count == count) return DPT_OK;
  char shape[160];
  st_shape_str(e->shape, e->ndim, shape, sizeof shape);
  return dpt_set_error(DPT_ERR_BAD_FORMAT,
                       "%s: tensor '%s' holds %zu elements (shape %s), expected %zu", st->path,
                       name, e->count, shape, count);
}

dpt_status dpt_safetensors_read_f32(const dpt_safetensors *st, const char *name, float *dst,
                                    size_t count) {
  const st_entry *e = NULL;
  DPT_TRY(st_find_for_read(st, "safetensors_read_f32", name, dst, count, &e));
  if (e->dtype != ST_F32 && e->dtype != ST_F16 && e->dtype != ST_BF16)
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: tensor '%s' has dtype %s; only F32, F16 and BF16 read as float32",
                         st->path, name, st_dtypes[e->dtype].name);
  DPT_TRY(st_check_count(st, e, name, count));
  if (count == 0) return DPT_OK; /* dst may be NULL */
  const unsigned char *src = st->data + e->begin;
  if (e->dtype == ST_F32) {
    if (st_host_little_endian()) {
      memcpy(dst, src, e->nbytes);
    } else {
      for (size_t k = 0; k < count; k++) {
        const unsigned char *b = src + 4 * k;
        const uint32_t u = (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) |
                           ((uint32_t)b[3] << 24);
        memcpy(&dst[k], &u, sizeof u);
      }
    }
  } else {
    for (size_t k = 0; k < count; k++) {
      const uint16_t h = (uint16_t)(src[2 * k] | (src[2 * k + 1] << 8));
      if (e->dtype == ST_F16) {
        dst[k] = dpt_f16_to_f32_scalar(h);
      } else {
        const uint32_t u = (uint32_t)h << 16; /* bfloat16 is the top half of a float32 */
        memcpy(&dst[k], &u, sizeof u);
      }
    }
  }
  return DPT_OK;
}

dpt_status dpt_safetensors_read_i64(const dpt_safetensors *st, const char *name, int64_t *dst,
                                    size_t count) {
  const st_entry *e = NULL;
  DPT_TRY(st_find_for_read(st, "safetensors_read_i64", name, dst, count, &e));
  if (e->dtype != ST_I64 && e->dtype != ST_I32)
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: tensor '%s' has dtype %s; only I64 and I32 read as int64", st->path,
                         name, st_dtypes[e->dtype].name);
  DPT_TRY(st_check_count(st, e, name, count));
  const unsigned char *src = st->data + e->begin;
  const size_t size = st_dtypes[e->dtype].size;
  for (size_t k = 0; k < count; k++) {
    const unsigned char *b = src + size * k;
    uint64_t u = 0;
    for (size_t j = size; j-- > 0;)
      u = (u << 8) | b[j];
    if (size == 4) u = (uint64_t)(int64_t)(int32_t)(uint32_t)u; /* sign-extend */
    dst[k] = (int64_t)u;
  }
  return DPT_OK;
}

const char *dpt_safetensors_metadata(const dpt_safetensors *st, const char *key) {
  if (!st || !key) return NULL;
  for (size_t k = 0; k < st->meta_count; k++)
    if (strcmp(st->meta[2 * k], key) == 0) return st->meta[2 * k + 1];
  return NULL;
}

size_t dpt_safetensors_metadata_count(const dpt_safetensors *st) {
  return st ? st->meta_count : 0;
}

dpt_status dpt_safetensors_metadata_at(const dpt_safetensors *st, size_t index, const char **key,
                                       const char **value) {
  if (!st || !key || !value)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "safetensors_metadata_at: %s is NULL",
                         !st    ? "file"
                         : !key ? "key"
                                : "value");
  if (index >= st->meta_count)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "safetensors_metadata_at: %s: index %zu >= %zu entries", st->path, index,
                         st->meta_count);
  *key = st->meta[2 * index];
  *value = st->meta[2 * index + 1];
  return DPT_OK;
}

/* ---- writing ------------------------------------------------------------------------------- */

/* A growing text buffer; `failed` sticks once an allocation fails. */
typedef struct st_text {
  char *p; /* owned, [cap] */
  size_t len, cap;
  int failed;
} st_text;

static void st_put(st_text *t, const char *s, size_t n) {
  if (t->failed) return;
  if (t->cap - t->len < n + 1) {
    size_t cap = t->cap ? t->cap : 256;
    while (cap - t->len < n + 1) {
      if (cap > (size_t)-1 / 2) {
        t->failed = 1;
        return;
      }
      cap *= 2;
    }
    char *p = realloc(t->p, cap);
    if (!p) {
      t->failed = 1;
      return;
    }
    t->p = p;
    t->cap = cap;
  }
  memcpy(t->p + t->len, s, n);
  t->len += n;
  t->p[t->len] = '\0';
}

static void st_puts(st_text *t, const char *s) {
  st_put(t, s, strlen(s));
}

static void st_put_u64(st_text *t, uint64_t v) {
  char buf[24];
  snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
  st_puts(t, buf);
}

/* A JSON string literal, escaped as serde_json (the reference writer) does. */
static void st_put_json_string(st_text *t, const char *s) {
  st_put(t, "\"", 1);
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    char esc[8];
    switch (*c) {
    case '"':
      st_put(t, "\\\"", 2);
      break;
    case '\\':
      st_put(t, "\\\\", 2);
      break;
    case '\b':
      st_put(t, "\\b", 2);
      break;
    case '\f':
      st_put(t, "\\f", 2);
      break;
    case '\n':
      st_put(t, "\\n", 2);
      break;
    case '\r':
      st_put(t, "\\r", 2);
      break;
    case '\t':
      st_put(t, "\\t", 2);
      break;
    default:
      if (*c < 0x20) {
        snprintf(esc, sizeof esc, "\\u%04x", *c);
        st_put(t, esc, 6);
      } else {
        st_put(t, (const char *)c, 1);
      }
    }
  }
  st_put(t, "\"", 1);
}

static int st_cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The dtype tensor x of a write is stored as: F32 unless x->dtype names another. -1 when
 * x->dtype is not a dtype of the format. */
static int st_write_dtype(const dpt_st_tensor *x) {
  return x->dtype ? st_dtype_lookup(x->dtype) : ST_F32;
}

/* Tensor t of a write: a valid, unreserved name, a known dtype, a shape within limits whose
 * byte size fits (*size receives it), data unless the tensor is empty (`data` for F32, `bytes`
 * for every other dtype). */
static dpt_status st_check_write_tensor(const dpt_st_tensor *x, size_t t, size_t *size) {
  if (!x->name)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "safetensors_write: tensor %zu has no name", t);
  const size_t nl = strlen(x->name);
  if (st_utf8_check((const unsigned char *)x->name, nl) != nl)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "safetensors_write: tensor %zu: name is not valid UTF-8", t);
  if (strcmp(x->name, "__metadata__") == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "safetensors_write: tensor %zu: the name __metadata__ is reserved", t);
  const int dtype = st_write_dtype(x);
  if (dtype < 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "safetensors_write: tensor '%s': unknown dtype '%.32s'", x->name,
                         x->dtype);
  if (x->ndim < 0 || x->ndim > DPT_ST_MAX_DIMS)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "safetensors_write: tensor '%s': ndim %d outside [0, %d]", x->name,
                         x->ndim, DPT_ST_MAX_DIMS);
  size_t n = 1;
  int ok = 1;
  for (int k = 0; k < x->ndim; k++) {
    if (x->shape[k] < 0)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "safetensors_write: tensor '%s': shape[%d] = %lld is negative", x->name,
                           k, (long long)x->shape[k]);
    ok &= (uint64_t)x->shape[k] <= (uint64_t)SIZE_MAX && dpt_mul_ok(n, (size_t)x->shape[k], &n);
  }
  if (!ok || !dpt_mul_ok(n, st_dtypes[dtype].size, size))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "safetensors_write: tensor '%s': size overflows",
                         x->name);
  if (dtype == ST_F32 && !x->data && n > 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "safetensors_write: tensor '%s': data is NULL",
                         x->name);
  if (dtype != ST_F32 && !x->bytes && n > 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "safetensors_write: tensor '%s': dtype %s needs its bytes (bytes is NULL)",
                         x->name, st_dtypes[dtype].name);
  return DPT_OK;
}

/* The metadata of a write (NULL, or key, value, ..., NULL): UTF-8, a value per key, keys
 * unique. */
static dpt_status st_check_write_metadata(const char *const *kv) {
  for (size_t k = 0; kv && kv[k]; k += 2) {
    const size_t kl = strlen(kv[k]);
    if (!kv[k + 1])
      return dpt_set_error(DPT_ERR_INVALID_ARG, "safetensors_write: metadata key '%s' has no value",
                           kv[k]);
    const size_t vl = strlen(kv[k + 1]);
    if (st_utf8_check((const unsigned char *)kv[k], kl) != kl ||
        st_utf8_check((const unsigned char *)kv[k + 1], vl) != vl)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "safetensors_write: metadata entry %zu is not valid UTF-8", k / 2);
    for (size_t j = 0; j < k; j += 2)
      if (strcmp(kv[j], kv[k]) == 0)
        return dpt_set_error(DPT_ERR_INVALID_ARG,
                             "safetensors_write: metadata key '%s' appears twice", kv[k]);
  }
  return DPT_OK;
}

/* No two tensors of a write share a name. */
static dpt_status st_check_write_unique(const dpt_st_tensor *tensors, size_t count) {
  if (count < 2) return DPT_OK;
  const char **names = malloc(count * sizeof *names);
  if (!names) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "safetensors_write: out of memory");
  for (size_t t = 0; t < count; t++)
    names[t] = tensors[t].name;
  qsort(names, count, sizeof *names, st_cmp_str);
  dpt_status s = DPT_OK;
  for (size_t t = 1; t < count && s == DPT_OK; t++)
    if (strcmp(names[t - 1], names[t]) == 0)
      s = dpt_set_error(DPT_ERR_INVALID_ARG, "safetensors_write: duplicate tensor name '%s'",
                        names[t]);
  free(names);
  return s;
}

/* Checks the arguments of a write; sizes[t] receives tensor t's byte size. */
static dpt_status st_check_write(const dpt_st_tensor *tensors, size_t count, const char *const *kv,
                                 size_t *sizes) {
  for (size_t t = 0; t < count; t++)
    DPT_TRY(st_check_write_tensor(&tensors[t], t, &sizes[t]));
  DPT_TRY(st_check_write_metadata(kv));
  return st_check_write_unique(tensors, count);
}

/* The header JSON, padded with spaces to a multiple of 8 bytes. */
static dpt_status st_build_header(const dpt_st_tensor *tensors, size_t count, const char *const *kv,
                                  const size_t *sizes, st_text *h) {
  st_puts(h, "{");
  int first = 1;
  if (kv && kv[0]) {
    st_puts(h, "\"__metadata__\":{");
    for (size_t k = 0; kv[k]; k += 2) {
      if (k) st_puts(h, ",");
      st_put_json_string(h, kv[k]);
      st_puts(h, ":");
      st_put_json_string(h, kv[k + 1]);
    }
    st_puts(h, "}");
    first = 0;
  }
  uint64_t offset = 0;
  for (size_t t = 0; t < count; t++) {
    const dpt_st_tensor *x = &tensors[t];
    if (!first) st_puts(h, ",");
    first = 0;
    st_put_json_string(h, x->name);
    st_puts(h, ":{\"dtype\":\"");
    st_puts(h, st_dtypes[st_write_dtype(x)].name);
    st_puts(h, "\",\"shape\":[");
    for (int k = 0; k < x->ndim; k++) {
      if (k) st_puts(h, ",");
      st_put_u64(h, (uint64_t)x->shape[k]);
    }
    st_puts(h, "],\"data_offsets\":[");
    st_put_u64(h, offset);
    st_puts(h, ",");
    if (sizes[t] > UINT64_MAX - offset) h->failed = 1;
    offset += sizes[t];
    st_put_u64(h, offset);
    st_puts(h, "]}");
  }
  st_puts(h, "}");
  while (!h->failed && h->len % 8 != 0)
    st_puts(h, " ");
  if (h->failed)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "safetensors_write: out of memory for the header");
  return DPT_OK;
}

/* Writes n floats little-endian. */
static int st_write_floats(FILE *f, const float *v, size_t n) {
  if (n == 0) return 1; /* v may be NULL */
  if (st_host_little_endian()) return fwrite(v, sizeof(float), n, f) == n;
  unsigned char chunk[4096];
  for (size_t done = 0; done < n;) {
    const size_t m = n - done < sizeof chunk / 4 ? n - done : sizeof chunk / 4;
    for (size_t k = 0; k < m; k++) {
      uint32_t u;
      memcpy(&u, &v[done + k], sizeof u);
      for (int b = 0; b < 4; b++)
        chunk[4 * k + (size_t)b] = (unsigned char)(u >> (8 * b));
    }
    if (fwrite(chunk, 4, m, f) != m) return 0;
    done += m;
  }
  return 1;
}

/* Flushes f to the disk, so the rename never exposes a file whose data is still in flight. */
static int st_sync(FILE *f) {
  if (fflush(f) != 0) return 0;
#if defined(_WIN32)
  return _commit(_fileno(f)) == 0;
#else
  return fsync(fileno(f)) == 0;
#endif
}

static int st_replace(const char *from, const char *to) {
#if defined(_WIN32)
  return MoveFileExA(from, to, MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH) != 0;
#else
  return rename(from, to) == 0;
#endif
}

dpt_status dpt_safetensors_write(const char *path, const dpt_st_tensor *tensors, size_t count,
                                 const char *const *metadata_kv) {
  if (!path || (!tensors && count > 0))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "safetensors_write: %s is NULL",
                         !path ? "path" : "tensors");
  size_t *sizes = calloc(count ? count : 1, sizeof *sizes);
  const size_t pl = strlen(path);
  char *tmp = malloc(pl + 5);
  st_text h = {NULL, 0, 0, 0};
  FILE *f = NULL;
  dpt_status s = DPT_OK;
  if (!sizes || !tmp) {
    s = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "safetensors_write: out of memory");
    goto done;
  }
  memcpy(tmp, path, pl);
  memcpy(tmp + pl, ".tmp", 5);
  if ((s = st_check_write(tensors, count, metadata_kv, sizes)) != DPT_OK) goto done;
  if ((s = st_build_header(tensors, count, metadata_kv, sizes, &h)) != DPT_OK) goto done;

  f = fopen(tmp, "wb");
  if (!f) {
    s = dpt_set_error(DPT_ERR_IO, "%s: cannot create %s: %s", path, tmp, strerror(errno));
    goto done;
  }
  unsigned char len8[8];
  for (int b = 0; b < 8; b++)
    len8[b] = (unsigned char)((uint64_t)h.len >> (8 * b));
  int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(h.p, 1, h.len, f) == h.len;
  for (size_t t = 0; ok && t < count; t++) {
    if (st_write_dtype(&tensors[t]) == ST_F32)
      ok = st_write_floats(f, tensors[t].data, sizes[t] / sizeof(float));
    else if (sizes[t] > 0) /* already little-endian, as the caller gives them */
      ok = fwrite(tensors[t].bytes, 1, sizes[t], f) == sizes[t];
  }
  ok = ok && st_sync(f);
  const int err = errno;
  const int closed = fclose(f) == 0;
  f = NULL;
  if (!ok || !closed) {
    s = dpt_set_error(DPT_ERR_IO, "%s: write failed: %s", tmp, strerror(ok ? errno : err));
    remove(tmp);
    goto done;
  }
  if (!st_replace(tmp, path)) {
    s = dpt_set_error(DPT_ERR_IO, "%s: cannot rename %s over it: %s", path, tmp, strerror(errno));
    remove(tmp);
  }
done:
  free(h.p);
  free(sizes);
  free(tmp);
  return s;
}
