/* JSON lines as text documents (text_jsonl.c): one JSON object per line, one string field of
 * each is a document. */
#ifndef DPTRAIN_CORE_TEXT_JSONL_H
#define DPTRAIN_CORE_TEXT_JSONL_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/status.h"

/* The documents of one JSON-lines file: document d is text[off[d], + len[d]). */
typedef struct dpt_jsonl_docs {
  uint8_t *text;          /* [bytes] every document's UTF-8, one after another */
  size_t bytes, text_cap; /* bytes of text; room in text */
  size_t *off, *len;      /* [count] */
  size_t count, cap;      /* documents; room in off and len */
} dpt_jsonl_docs;

/* Whether path names a JSON-lines file (it ends in ".jsonl"). */
int dpt_jsonl_name(const char *path);

/* Reads path: each line holding anything but blanks must be a JSON object whose member `field`
 * is a string; that string (decoded, UTF-8) is a document. Blank lines are skipped. Errors:
 * DPT_ERR_IO (cannot read), DPT_ERR_BAD_FORMAT "path:line: ..." for the first bad line (not
 * JSON, not an object, the field missing or not a string, a NUL in the string),
 * DPT_ERR_OUT_OF_MEMORY. On failure *out is empty. */
dpt_status dpt_jsonl_read(const char *path, const char *field, dpt_jsonl_docs *out);

/* Frees what dpt_jsonl_read filled in; the struct is zeroed. */
void dpt_jsonl_free(dpt_jsonl_docs *d);

#endif
