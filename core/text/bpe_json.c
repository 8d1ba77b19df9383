/* The vocabulary file read: JSON (docs/text.md) through jansson (duplicate keys rejected, unknown
 * keys refused); tools/prep/bpe_save.c writes it. */
#if !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* fileno, fsync */
#endif
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/file.h"
#include "core/text/bpe_impl.h"

#define FORMAT_NAME    "dptrain-bpe"
#define FORMAT_VERSION 1

static dpt_status bad(const char *path, const char *fmt, ...) {
  char msg[320];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: %s", path, msg);
}

/* Integer field `key` must equal `want`. */
static dpt_status expect_int(const char *path, json_t *root, const char *key, json_int_t want) {
  const json_t *v = json_object_get(root, key);
  if (!json_is_integer(v))
    return bad(path, "\"%s\" is %s, expected the integer %lld", key,
               v ? "not an integer" : "missing", (long long)want);
  if (json_integer_value(v) != want)
    return bad(path, "\"%s\" is %lld; this build reads %lld", key, (long long)json_integer_value(v),
               (long long)want);
  return DPT_OK;
}

/* The header fields: known keys only, the format's name and version, the fixed layout. */
static dpt_status check_header(const char *path, json_t *root) {
  static const char *const known[] = {"format",         "version",     "vocab_size",
                                      "special_tokens", "byte_offset", "max_word_bytes",
                                      "merges"};
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    int ok = 0;
    for (size_t k = 0; k < sizeof known / sizeof known[0] && !ok; k++)
      ok = strcmp(key, known[k]) == 0;
    if (!ok) return bad(path, "unknown field \"%s\"", key);
  }
  const char *format = json_string_value(json_object_get(root, "format"));
  if (!format || strcmp(format, FORMAT_NAME) != 0)
    return bad(path, "\"format\" is %s%s%s, expected \"" FORMAT_NAME "\"", format ? "\"" : "",
               format ? format : "missing", format ? "\"" : "");
  DPT_TRY(expect_int(path, root, "version", FORMAT_VERSION));
  DPT_TRY(expect_int(path, root, "byte_offset", DPT_TOKEN_BYTE0));
  DPT_TRY(expect_int(path, root, "max_word_bytes", DPT_BPE_MAX_WORD));
  const json_t *sp = json_object_get(root, "special_tokens");
  if (!json_is_object(sp) || json_object_size(sp) != DPT_TOKEN_BYTE0)
    return bad(path, "\"special_tokens\" must be an object of the %d special tokens",
               DPT_TOKEN_BYTE0);
  for (int i = 0; i < DPT_TOKEN_BYTE0; i++) {
    const json_t *id = json_object_get(sp, dpt_text_special_name(i));
    if (!json_is_integer(id) || json_integer_value(id) != i)
      return bad(path, "special token %s must have id %d", dpt_text_special_name(i), i);
  }
  return DPT_OK;
}

/* The merges as id pairs, in order, into a new array of 2 * *count ids. */
static dpt_status read_merges(const char *path, json_t *root, int32_t **out, size_t *count) {
  const json_t *m = json_object_get(root, "merges");
  if (!json_is_array(m)) return bad(path, "\"merges\" is missing or not an array");
  *count = json_array_size(m);
  if (*count > DPT_BPE_MAX_VOCAB - DPT_TOKEN_FIRST_MERGE)
    return bad(path, "%zu merges, more than %d", *count, DPT_BPE_MAX_VOCAB - DPT_TOKEN_FIRST_MERGE);
  DPT_TRY(expect_int(path, root, "vocab_size", DPT_TOKEN_FIRST_MERGE + (json_int_t)*count));
  int32_t *ids = malloc((2 * *count + 1) * sizeof *ids);
  if (!ids) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
  for (size_t r = 0; r < *count; r++) {
    const json_t *e = json_array_get(m, r);
    const json_t *l = json_array_get(e, 0), *rt = json_array_get(e, 1);
    if (!json_is_array(e) || json_array_size(e) != 2 || !json_is_integer(l) ||
        !json_is_integer(rt) || json_integer_value(l) < 0 || json_integer_value(rt) < 0 ||
        json_integer_value(l) > INT32_MAX || json_integer_value(rt) > INT32_MAX) {
      free(ids);
      return bad(path, "merge %zu is not a pair of token ids [left, right]", r);
    }
    ids[2 * r] = (int32_t)json_integer_value(l);
    ids[2 * r + 1] = (int32_t)json_integer_value(rt);
  }
  *out = ids;
  return DPT_OK;
}

dpt_status dpt_bpe_load(const char *path, dpt_bpe **out) {
  if (!path || !out)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "bpe_load: %s is NULL", !path ? "path" : "out");
  *out = NULL;
  FILE *f = fopen(path, "r");
  if (!f) return dpt_set_error(DPT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  json_error_t err;
  json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &err);
  fclose(f);
  if (!root) return bad(path, "not JSON: %s (line %d, column %d)", err.text, err.line, err.column);
  int32_t *merges = NULL;
  size_t count = 0;
  dpt_status st = json_is_object(root) ? check_header(path, root) : bad(path, "not a JSON object");
  if (st == DPT_OK) st = read_merges(path, root, &merges, &count);
  json_decref(root);
  if (st != DPT_OK) return st;
  return dpt_bpe_adopt_merges(merges, count, path, out);
}
