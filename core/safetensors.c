/* safetensors reader and writer (format in include/dptrain/safetensors.h).
 *
 * The reader loads the whole file, checks the header bytes are UTF-8, then parses the JSON with
 * a small recursive-descent parser that knows the expected schema (a top-level object of tensor
 * entries and an optional "__metadata__" object of strings) and validates everything a tensor
 * claims before any pointer into the data is handed out. The writer builds the header in
 * memory, pads it with spaces to a multiple of 8 bytes, and writes "<path>.tmp", flushed to the
 * disk, then renames it over the destination.
 */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* fileno, fsync */
#endif

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if defined(_WIN32)
#include <io.h>
#include <windows.h>
#else
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
  unsigned char *file;       /* owned, [file_size] bytes: the whole file */
  size_t file_size;          /* bytes */
  const unsigned char *data; /* the data section, inside file */
  size_t data_size;          /* bytes */
  st_entry *entries;         /* owned, [count] in header order */
  size_t count, cap;
  st_entry **by_name; /* owned, [count] pointers into entries sorted by name */
  char **meta;        /* owned, [2 * meta_count] key, value, key, value, ... */
  size_t meta_count, meta_cap;
};

/* ---- strict JSON parsing of the header ----------------------------------------------------- */

typedef struct st_parser {
  dpt_safetensors *st;
  const unsigned char *s; /* header bytes, [n] */
  size_t n;
  size_t i;          /* current byte within the header */
  const char *scope; /* tensor being parsed, for messages, or NULL */
} st_parser;

#define ST_HEADER_START 8u /* the header follows the 8-byte length */

static dpt_status st_parse_error(const st_parser *p, const char *fmt, ...) DPT_PRINTF(2, 3);

static dpt_status st_parse_error(const st_parser *p, const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (p->scope)
    return dpt_set_error(
        DPT_ERR_BAD_FORMAT,
        "%s: tensor '%s': bad header JSON at header byte %zu (file offset %zu): %s", p->st->path,
        p->scope, p->i, p->i + ST_HEADER_START, what);
  return dpt_set_error(DPT_ERR_BAD_FORMAT,
                       "%s: bad header JSON at header byte %zu (file offset %zu): %s", p->st->path,
                       p->i, p->i + ST_HEADER_START, what);
}

static void st_skip_ws(st_parser *p) {
  while (p->i < p->n &&
         (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
    p->i++;
}

/* What stands at the current position, for messages. */
static const char *st_found(const st_parser *p, char buf[16]) {
  if (p->i >= p->n) return "the end of the header";
  const unsigned c = p->s[p->i];
  if (c >= 0x20 && c < 0x7f)
    snprintf(buf, 16, "'%c'", (char)c);
  else
    snprintf(buf, 16, "byte 0x%02x", c);
  return buf;
}

/* Skips whitespace and consumes `c`. */
static dpt_status st_expect(st_parser *p, char c) {
  st_skip_ws(p);
  if (p->i < p->n && p->s[p->i] == (unsigned char)c) {
    p->i++;
    return DPT_OK;
  }
  char buf[16];
  return st_parse_error(p, "expected '%c', found %s", c, st_found(p, buf));
}

/* After a member or element: consumes ',' (returns 1) or `close` (returns 0); -1 on error. */
static int st_next_or_close(st_parser *p, char close, dpt_status *st) {
  st_skip_ws(p);
  if (p->i < p->n && p->s[p->i] == ',') {
    p->i++;
    return 1;
  }
  if (p->i < p->n && p->s[p->i] == (unsigned char)close) {
    p->i++;
    return 0;
  }
  char buf[16];
  *st = st_parse_error(p, "expected ',' or '%c', found %s", close, st_found(p, buf));
  return -1;
}

static int st_hex4(const unsigned char *s, unsigned *out) {
  unsigned v = 0;
  for (int k = 0; k < 4; k++) {
    const unsigned c = s[k];
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= c - '0';
    else if (c >= 'a' && c <= 'f')
      v |= c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      v |= c - 'A' + 10;
    else
      return 0;
  }
  *out = v;
  return 1;
}

/* Index of the quote closing the string opened at `open`, stepping over escapes, so the decoded
 * string (never longer than its source) can be sized before decoding. */
static dpt_status st_string_end(st_parser *p, size_t open, size_t *end) {
  size_t j = open + 1;
  while (j < p->n && p->s[j] != '"')
    j += p->s[j] == '\\' ? 2 : 1;
  if (j >= p->n) {
    p->i = open;
    return st_parse_error(p, "unterminated string");
  }
  *end = j;
  return DPT_OK;
}

/* Appends code point cp as UTF-8 (1 to 4 bytes). */
static void st_put_utf8(char *dst, size_t *len, unsigned cp) {
  if (cp < 0x80) {
    dst[(*len)++] = (char)cp;
  } else if (cp < 0x800) {
    dst[(*len)++] = (char)(0xc0 | (cp >> 6));
    dst[(*len)++] = (char)(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    dst[(*len)++] = (char)(0xe0 | (cp >> 12));
    dst[(*len)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
    dst[(*len)++] = (char)(0x80 | (cp & 0x3f));
  } else {
    dst[(*len)++] = (char)(0xf0 | (cp >> 18));
    dst[(*len)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
    dst[(*len)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
    dst[(*len)++] = (char)(0x80 | (cp & 0x3f));
  }
}

/* The \uXXXX escape at the current position (before `end`, the closing quote): one code point,
 * or a surrogate pair \uD8xx\uDCxx joined into one. *used receives the escape's length (6 or
 * 12). Lone surrogates and U+0000 are refused. */
static dpt_status st_parse_unicode_escape(st_parser *p, size_t end, unsigned *cp, size_t *used) {
  if (end - p->i < 6 || !st_hex4(p->s + p->i + 2, cp))
    return st_parse_error(p, "\\u needs four hex digits");
  *used = 6;
  if (*cp >= 0xdc00 && *cp <= 0xdfff) return st_parse_error(p, "lone low surrogate \\u%04x", *cp);
  if (*cp >= 0xd800 && *cp <= 0xdbff) {
    unsigned lo;
    if (end - p->i < 12 || p->s[p->i + 6] != '\\' || p->s[p->i + 7] != 'u' ||
        !st_hex4(p->s + p->i + 8, &lo) || lo < 0xdc00 || lo > 0xdfff)
      return st_parse_error(p, "high surrogate \\u%04x without its low surrogate", *cp);
    *cp = 0x10000u + ((*cp - 0xd800u) << 10) + (lo - 0xdc00u);
    *used = 12;
  }
  if (*cp == 0) return st_parse_error(p, "\\u0000 in a string is not supported");
  return DPT_OK;
}

/* The escape sequence at the current position (a backslash before `end`) decoded onto dst;
 * the position moves past it. The UTF-8 written is never longer than the escape. */
static dpt_status st_parse_escape(st_parser *p, size_t end, char *dst, size_t *len) {
  const unsigned e = p->s[p->i + 1]; /* exists: the closing quote comes after it */
  const char *simple = strchr("\"\\/bfnrt", (int)e);
  if (e != 0 && simple) {
    static const char map[] = "\"\\/\b\f\n\r\t";
    dst[(*len)++] = map[simple - "\"\\/bfnrt"];
    p->i += 2;
    return DPT_OK;
  }
  if (e != 'u')
    return st_parse_error(p, "invalid escape '\\%c'", e >= 0x20 && e < 0x7f ? (char)e : '?');
  unsigned cp;
  size_t used;
  DPT_TRY(st_parse_unicode_escape(p, end, &cp, &used));
  st_put_utf8(dst, len, cp);
  p->i += used;
  return DPT_OK;
}

/* Parses a JSON string at the current position (after whitespace) into a new malloc'd,
 * NUL-terminated UTF-8 string. The raw bytes were checked to be UTF-8 beforehand. */
static dpt_status st_parse_string(st_parser *p, char **out) {
  *out = NULL;
  st_skip_ws(p);
  if (p->i >= p->n || p->s[p->i] != '"') {
    char buf[16];
    return st_parse_error(p, "expected a string, found %s", st_found(p, buf));
  }
  size_t end = 0;
  DPT_TRY(st_string_end(p, p->i, &end));
  p->i++; /* the opening quote */
  char *dst = malloc(end - p->i + 1);
  if (!dst) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory", p->st->path);
  size_t len = 0;
  dpt_status st = DPT_OK;
  while (st == DPT_OK && p->s[p->i] != '"') {
    const unsigned c = p->s[p->i];
    if (c < 0x20) {
      st = st_parse_error(p, "control character 0x%02x in a string (must be escaped)", c);
    } else if (c == '\\') {
      st = st_parse_escape(p, end, dst, &len);
    } else {
      dst[len++] = (char)c;
      p->i++;
    }
  }
  if (st != DPT_OK) {
    free(dst);
    return st;
  }
  p->i++; /* the closing quote */
  dst[len] = '\0';
  *out = dst;
  return DPT_OK;
}

/* Parses a JSON number that must be a non-negative integer fitting in uint64 ("what" names it
 * in messages). Fractions, exponents, signs and leading zeros are rejected. */
static dpt_status st_parse_uint(st_parser *p, const char *what, uint64_t *out) {
  st_skip_ws(p);
  if (p->i < p->n && p->s[p->i] == '-') return st_parse_error(p, "%s must not be negative", what);
  if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') {
    char buf[16];
    return st_parse_error(p, "expected an integer for %s, found %s", what, st_found(p, buf));
  }
  const size_t start = p->i;
  uint64_t v = 0;
  while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
    const unsigned d = p->s[p->i] - '0';
    if (v > (UINT64_MAX - d) / 10) {
      p->i = start;
      return st_parse_error(p, "%s does not fit in 64 bits", what);
    }
    v = v * 10 + d;
    p->i++;
  }
  if (p->i - start > 1 && p->s[start] == '0') {
    p->i = start;
    return st_parse_error(p, "%s has a leading zero", what);
  }
  if (p->i < p->n && (p->s[p->i] == '.' || p->s[p->i] == 'e' || p->s[p->i] == 'E'))
    return st_parse_error(p, "%s must be an integer", what);
  *out = v;
  return DPT_OK;
}

/* Skips any JSON value this parser understands (for unknown fields of a tensor entry). */
static dpt_status st_skip_value(st_parser *p, int depth) {
  if (depth > 32) return st_parse_error(p, "nesting deeper than 32 levels");
  st_skip_ws(p);
  if (p->i >= p->n) return st_parse_error(p, "expected a value, found the end of the header");
  const unsigned c = p->s[p->i];
  dpt_status st = DPT_OK;
  if (c == '"') {
    char *s;
    st = st_parse_string(p, &s);
    free(s);
    return st;
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    uint64_t v;
    if (c == '-') p->i++;
    return st_parse_uint(p, "a number", &v);
  }
  if (c == '[' || c == '{') {
    const char close = c == '[' ? ']' : '}';
    p->i++;
    st_skip_ws(p);
    if (p->i < p->n && p->s[p->i] == (unsigned char)close) {
      p->i++;
      return DPT_OK;
    }
    for (;;) {
      if (c == '{') {
        char *key;
        if ((st = st_parse_string(p, &key)) != DPT_OK) return st;
        free(key);
        if ((st = st_expect(p, ':')) != DPT_OK) return st;
      }
      if ((st = st_skip_value(p, depth + 1)) != DPT_OK) return st;
      const int more = st_next_or_close(p, close, &st);
      if (more < 0) return st;
      if (!more) return DPT_OK;
    }
  }
  static const char *const words[] = {"true", "false", "null"};
  for (int k = 0; k < 3; k++) {
    const size_t wl = strlen(words[k]);
    if (p->n - p->i >= wl && memcmp(p->s + p->i, words[k], wl) == 0) {
      p->i += wl;
      return DPT_OK;
    }
  }
  char buf[16];
  return st_parse_error(p, "expected a JSON value, found %s", st_found(p, buf));
}

/* Parses `[u, u, ...]` into vals (at most max entries; *count receives how many). */
static dpt_status st_parse_uint_array(st_parser *p, const char *what, uint64_t *vals, int max,
                                      int *count) {
  *count = 0;
  dpt_status st = st_expect(p, '[');
  if (st != DPT_OK) return st;
  st_skip_ws(p);
  if (p->i < p->n && p->s[p->i] == ']') {
    p->i++;
    return DPT_OK;
  }
  for (;;) {
    if (*count == max) return st_parse_error(p, "%s has more than %d entries", what, max);
    if ((st = st_parse_uint(p, what, &vals[*count])) != DPT_OK) return st;
    (*count)++;
    const int more = st_next_or_close(p, ']', &st);
    if (more < 0) return st;
    if (!more) return DPT_OK;
  }
}

/* The fields a tensor entry must have, each once; seen[] in st_parse_tensor follows this order. */
static const char *const st_tensor_fields[] = {"dtype", "shape", "data_offsets"};
enum { ST_FIELD_DTYPE, ST_FIELD_SHAPE, ST_FIELD_OFFSETS, ST_FIELD_COUNT };

static int st_tensor_field(const char *key) {
  for (int k = 0; k < ST_FIELD_COUNT; k++)
    if (strcmp(key, st_tensor_fields[k]) == 0) return k;
  return -1;
}

/* "dtype": one of st_dtypes' names. */
static dpt_status st_parse_dtype(st_parser *p, st_entry *e) {
  char *dtype;
  st_skip_ws(p);
  const size_t at = p->i;
  dpt_status st = st_parse_string(p, &dtype);
  if (st != DPT_OK) return st;
  e->dtype = st_dtype_lookup(dtype);
  if (e->dtype < 0) {
    p->i = at;
    st = st_parse_error(p, "unknown dtype \"%.32s\"", dtype);
  }
  free(dtype);
  return st;
}

/* "shape": up to DPT_ST_MAX_DIMS sizes, each fitting int64. */
static dpt_status st_parse_shape(st_parser *p, st_entry *e) {
  uint64_t dims[DPT_ST_MAX_DIMS];
  DPT_TRY(st_parse_uint_array(p, "shape", dims, DPT_ST_MAX_DIMS, &e->ndim));
  for (int k = 0; k < e->ndim; k++) {
    if (dims[k] > (uint64_t)INT64_MAX)
      return st_parse_error(p, "shape entry %llu is too large", (unsigned long long)dims[k]);
    e->shape[k] = (int64_t)dims[k];
  }
  return DPT_OK;
}

/* "data_offsets": [begin, end], checked against the data section later (st_validate). */
static dpt_status st_parse_offsets(st_parser *p, st_entry *e) {
  uint64_t off[3];
  int n_off;
  DPT_TRY(st_parse_uint_array(p, "data_offsets", off, 3, &n_off));
  if (n_off != 2) return st_parse_error(p, "data_offsets has %d entries, expected 2", n_off);
  e->begin = off[0];
  e->end = off[1];
  return DPT_OK;
}

/* One "key": value member of a tensor entry; seen[] marks the known fields already read. */
static dpt_status st_parse_tensor_member(st_parser *p, st_entry *e, int seen[ST_FIELD_COUNT]) {
  st_skip_ws(p);
  const size_t key_at = p->i;
  char *key;
  dpt_status st = st_parse_string(p, &key);
  if (st == DPT_OK) st = st_expect(p, ':');
  if (st != DPT_OK) {
    free(key);
    return st;
  }
  const int field = st_tensor_field(key);
  if (field >= 0 && seen[field]) {
    p->i = key_at;
    st = st_parse_error(p, "field \"%s\" appears twice", key);
  } else if (field == ST_FIELD_DTYPE) {
    st = st_parse_dtype(p, e);
  } else if (field == ST_FIELD_SHAPE) {
    st = st_parse_shape(p, e);
  } else if (field == ST_FIELD_OFFSETS) {
    st = st_parse_offsets(p, e);
  } else {
    st = st_skip_value(p, 1); /* unknown fields are ignored, as by the reference reader */
  }
  if (field >= 0) seen[field] = 1;
  free(key);
  return st;
}

/* One tensor entry {"dtype": .., "shape": [..], "data_offsets": [b, e]} into e (named). */
static dpt_status st_parse_tensor(st_parser *p, st_entry *e) {
  DPT_TRY(st_expect(p, '{'));
  int seen[ST_FIELD_COUNT] = {0, 0, 0};
  st_skip_ws(p);
  int more = 1;
  if (p->i < p->n && p->s[p->i] == '}') {
    p->i++;
    more = 0;
  }
  dpt_status st = DPT_OK;
  while (more) {
    DPT_TRY(st_parse_tensor_member(p, e, seen));
    more = st_next_or_close(p, '}', &st);
    if (more < 0) return st;
  }
  for (int k = 0; k < ST_FIELD_COUNT; k++)
    if (!seen[k]) return st_parse_error(p, "entry lacks \"%s\"", st_tensor_fields[k]);
  return DPT_OK;
}

/* "__metadata__": {"key": "value", ...} appended to st->meta. */
static dpt_status st_parse_metadata(st_parser *p) {
  dpt_safetensors *st = p->st;
  dpt_status s = st_expect(p, '{');
  if (s != DPT_OK) return s;
  st_skip_ws(p);
  if (p->i < p->n && p->s[p->i] == '}') {
    p->i++;
    return DPT_OK;
  }
  for (;;) {
    if (st->meta_count == st->meta_cap) {
      const size_t cap = st->meta_cap ? 2 * st->meta_cap : 8;
      char **m = realloc(st->meta, 2 * cap * sizeof *m);
      if (!m) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory", st->path);
      st->meta = m;
      st->meta_cap = cap;
    }
    char *key = NULL, *value = NULL;
    st_skip_ws(p);
    const size_t key_at = p->i;
    if ((s = st_parse_string(p, &key)) != DPT_OK) return s;
    for (size_t k = 0; k < st->meta_count; k++) {
      if (strcmp(st->meta[2 * k], key) == 0) {
        p->i = key_at;
        s = st_parse_error(p, "__metadata__ key \"%.64s\" appears twice", key);
        free(key);
        return s;
      }
    }
    if ((s = st_expect(p, ':')) == DPT_OK) {
      st_skip_ws(p);
      if (p->i < p->n && p->s[p->i] != '"')
        s = st_parse_error(p, "__metadata__ value of \"%.64s\" is not a string", key);
      else
        s = st_parse_string(p, &value);
    }
    if (s != DPT_OK) {
      free(key);
      return s;
    }
    st->meta[2 * st->meta_count] = key;
    st->meta[2 * st->meta_count + 1] = value;
    st->meta_count++;
    const int more = st_next_or_close(p, '}', &s);
    if (more < 0) return s;
    if (!more) return DPT_OK;
  }
}

/* The whole header: {"name": {...}, "__metadata__": {...}, ...} then only padding. */
static dpt_status st_parse_header(st_parser *p) {
  dpt_safetensors *st = p->st;
  if (p->n == 0 || p->s[0] != '{') return st_parse_error(p, "the header must start with '{'");
  p->i = 1;
  st_skip_ws(p);
  int more = 1, have_meta = 0;
  if (p->i < p->n && p->s[p->i] == '}') {
    p->i++;
    more = 0;
  }
  dpt_status s = DPT_OK;
  while (more) {
    st_skip_ws(p);
    const size_t key_at = p->i;
    char *name;
    if ((s = st_parse_string(p, &name)) != DPT_OK) return s;
    if ((s = st_expect(p, ':')) != DPT_OK) {
      free(name);
      return s;
    }
    if (strcmp(name, "__metadata__") == 0) {
      free(name);
      if (have_meta) {
        p->i = key_at;
        return st_parse_error(p, "\"__metadata__\" appears twice");
      }
      have_meta = 1;
      if ((s = st_parse_metadata(p)) != DPT_OK) return s;
    } else {
      if (st->count == st->cap) {
        const size_t cap = st->cap ? 2 * st->cap : 16;
        st_entry *grown = realloc(st->entries, cap * sizeof *grown);
        if (!grown) {
          free(name);
          return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory", st->path);
        }
        st->entries = grown;
        st->cap = cap;
      }
      st_entry *e = &st->entries[st->count++];
      memset(e, 0, sizeof *e);
      e->name = name;
      p->scope = name;
      s = st_parse_tensor(p, e);
      p->scope = NULL;
      if (s != DPT_OK) return s;
    }
    more = st_next_or_close(p, '}', &s);
    if (more < 0) return s;
  }
  /* The reference writer pads with spaces; any JSON whitespace is accepted. */
  st_skip_ws(p);
  if (p->i < p->n) {
    char buf[16];
    return st_parse_error(p, "unexpected %s after the header object", st_found(p, buf));
  }
  return DPT_OK;
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
  free(st->file);
  free(st->path);
  free(st);
}

/* Reads the whole file into st->file. */
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
    st->file = malloc(st->file_size ? st->file_size : 1);
    if (!st->file)
      s = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes", st->path,
                        st->file_size);
    else if (fread(st->file, 1, st->file_size, f) != st->file_size)
      s = dpt_set_error(DPT_ERR_IO, "%s: read failed: %s", st->path,
                        ferror(f) ? strerror(errno) : "file shrank while reading");
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
    st_parser p = {st, st->file + ST_HEADER_START, (size_t)header_len, 0, NULL};
    s = st_parse_header(&p);
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

dpt_status dpt_safetensors_read_f32(const dpt_safetensors *st, const char *name, float *dst,
                                    size_t count) {
  if (!st || !name || (!dst && count > 0))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "safetensors_read_f32: %s is NULL",
                         !st     ? "file"
                         : !name ? "name"
                                 : "dst");
  const st_entry *e = st_lookup(st, name);
  if (!e) return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: no tensor named '%s'", st->path, name);
  if (e->dtype != ST_F32 && e->dtype != ST_F16 && e->dtype != ST_BF16)
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: tensor '%s' has dtype %s; only F32, F16 and BF16 read as float32",
                         st->path, name, st_dtypes[e->dtype].name);
  if (e->count != count) {
    char shape[160];
    st_shape_str(e->shape, e->ndim, shape, sizeof shape);
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: tensor '%s' holds %zu elements (shape %s), expected %zu", st->path,
                         name, e->count, shape, count);
  }
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

/* Tensor t of a write: a valid, unreserved name, a shape within limits whose byte size fits
 * (*size receives it), data unless the tensor is empty. */
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
  if (!ok || !dpt_mul_ok(n, sizeof(float), size))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "safetensors_write: tensor '%s': size overflows",
                         x->name);
  if (!x->data && n > 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "safetensors_write: tensor '%s': data is NULL",
                         x->name);
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
    st_puts(h, ":{\"dtype\":\"F32\",\"shape\":[");
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
  for (size_t t = 0; ok && t < count; t++)
    ok = st_write_floats(f, tensors[t].data, sizes[t] / sizeof(float));
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
