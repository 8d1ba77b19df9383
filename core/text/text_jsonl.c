/* JSON lines as text documents: each line a JSON object parsed by jansson (duplicate keys
 * rejected), its string field one document; the first bad line is an error naming file:line. */
#if !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* getline */
#endif
#include "core/text/text_jsonl.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/size.h"

int dpt_jsonl_name(const char *path) {
  const size_t n = strlen(path);
  return n >= 6 && strcmp(path + n - 6, ".jsonl") == 0;
}

void dpt_jsonl_free(dpt_jsonl_docs *d) {
  free(d->text);
  free(d->off);
  free(d->len);
  memset(d, 0, sizeof *d);
}

static dpt_status oom(const char *path) {
  return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory for the documents", path);
}

/* Appends one document of n bytes. */
static dpt_status add_doc(dpt_jsonl_docs *d, const char *path, const char *s, size_t n) {
  if (d->count == d->cap) {
    const size_t cap = d->cap ? 2 * d->cap : 256;
    size_t *o = realloc(d->off, cap * sizeof *o);
    if (o) d->off = o;
    size_t *l = realloc(d->len, cap * sizeof *l);
    if (l) d->len = l;
    if (!o || !l) return oom(path);
    d->cap = cap;
  }
  size_t bytes;
  if (!dpt_add_ok(d->bytes, n, &bytes)) return oom(path);
  if (bytes > d->text_cap) {
    size_t cap = d->text_cap ? d->text_cap : 65536;
    while (cap < bytes)
      cap = cap > ((size_t)-1) / 2 ? bytes : 2 * cap;
    uint8_t *t = realloc(d->text, cap);
    if (!t) return oom(path);
    d->text = t;
    d->text_cap = cap;
  }
  if (n) memcpy(d->text + d->bytes, s, n);
  d->off[d->count] = d->bytes;
  d->len[d->count++] = n;
  d->bytes = bytes;
  return DPT_OK;
}

static int blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') return 0;
  return 1;
}

/* One line: the object's string `field` appended as a document. */
static dpt_status parse_line(dpt_jsonl_docs *d, const char *path, size_t line, const char *s,
                             size_t n, const char *field) {
  json_error_t err;
  json_t *root = json_loadb(s, n, JSON_REJECT_DUPLICATES, &err);
  if (!root)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s:%zu: not JSON: %s (column %d)", path, line,
                         err.text, err.column);
  const json_t *v = json_is_object(root) ? json_object_get(root, field) : NULL;
  dpt_status st = DPT_OK;
  if (!json_is_object(root))
    st = dpt_set_error(DPT_ERR_BAD_FORMAT, "%s:%zu: not a JSON object", path, line);
  else if (!v)
    st = dpt_set_error(DPT_ERR_BAD_FORMAT, "%s:%zu: no \"%s\" field", path, line, field);
  else if (!json_is_string(v))
    st = dpt_set_error(DPT_ERR_BAD_FORMAT, "%s:%zu: \"%s\" is not a string", path, line, field);
  else
    st = add_doc(d, path, json_string_value(v), json_string_length(v));
  json_decref(root);
  return st;
}

dpt_status dpt_jsonl_read(const char *path, const char *field, dpt_jsonl_docs *out) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(path, "rb");
  if (!f) return dpt_set_error(DPT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  char *buf = NULL;
  size_t cap = 0, line = 0;
  dpt_status st = DPT_OK;
  for (ssize_t got; st == DPT_OK && (got = getline(&buf, &cap, f)) >= 0;) {
    line++;
    if (!blank(buf, (size_t)got)) st = parse_line(out, path, line, buf, (size_t)got, field);
  }
  if (st == DPT_OK && ferror(f))
    st = dpt_set_error(DPT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
  free(buf);
  fclose(f);
  if (st != DPT_OK) dpt_jsonl_free(out);
  return st;
}
