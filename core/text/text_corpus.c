/* Text corpora (files and directories read whole and checked as UTF-8, cut into documents at "%"
 * lines), token sequences with the train/validation split by document, and BERT's masking keyed
 * by (seed, epoch, sequence, position). The rules are at the top of include/dptrain/text.h. */
#if !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* opendir */
#endif
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/size.h"
#include "base/rng.h"
#include "core/text/text_jsonl.h"
#include "core/text/tokenizer_impl.h"
#include "dptrain/text.h"

struct dpt_text_corpus {
  uint8_t *text; /* every file's bytes, one after another */
  size_t len, cap;
  size_t *doc_off, *doc_len; /* document d is text[doc_off[d], + doc_len[d]) */
  size_t docs, doc_cap;
  size_t files, bytes;
  char **file_names;  /* [files] as read ("<memory>" for a text held in memory) */
  size_t *file_start; /* [files] each file's first byte in text */
};

/* The files to read, in order, each once (by device and inode). */
typedef struct file_list {
  char **paths;
  dev_t *dev;
  ino_t *ino;
  size_t n, cap;
} file_list;

static dpt_status oom(const char *what) {
  return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "text corpus: out of memory for %s", what);
}

static void file_list_free(file_list *fl) {
  for (size_t i = 0; i < fl->n; i++)
    free(fl->paths[i]);
  free(fl->paths);
  free(fl->dev);
  free(fl->ino);
}

/* Appends a copy of path unless the same file is listed already. */
static dpt_status file_list_add(file_list *fl, const char *path, const struct stat *sb) {
  for (size_t i = 0; i < fl->n; i++)
    if (fl->dev[i] == sb->st_dev && fl->ino[i] == sb->st_ino) return DPT_OK;
  if (fl->n == fl->cap) {
    const size_t cap = fl->cap ? 2 * fl->cap : 64;
    char **p = realloc(fl->paths, cap * sizeof *p);
    if (p) fl->paths = p;
    dev_t *d = realloc(fl->dev, cap * sizeof *d);
    if (d) fl->dev = d;
    ino_t *n = realloc(fl->ino, cap * sizeof *n);
    if (n) fl->ino = n;
    if (!p || !d || !n) return oom("the file list");
    fl->cap = cap;
  }
  fl->paths[fl->n] = strdup(path);
  if (!fl->paths[fl->n]) return oom("the file list");
  fl->dev[fl->n] = sb->st_dev;
  fl->ino[fl->n++] = sb->st_ino;
  return DPT_OK;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Whether a directory entry is text to read: not hidden, not a fortune index (".dat"). */
static int text_name(const char *name) {
  const size_t n = strlen(name);
  return name[0] != '.' && !(n >= 4 && strcmp(name + n - 4, ".dat") == 0);
}

/* The names of dir's text entries, sorted, into names[*n] (the caller frees them). */
static dpt_status list_dir(const char *dir, char ***names, size_t *n) {
  DIR *d = opendir(dir);
  if (!d) return dpt_set_error(DPT_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
  size_t cap = 0;
  dpt_status st = DPT_OK;
  for (struct dirent *e; st == DPT_OK && (e = readdir(d)) != NULL;) {
    if (!text_name(e->d_name)) continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 64;
      char **p = realloc(*names, cap * sizeof *p);
      if (!p)
        st = oom("a directory listing");
      else
        *names = p;
    }
    if (st == DPT_OK && !((*names)[*n] = strdup(e->d_name))) st = oom("a directory listing");
    if (st == DPT_OK) ++*n;
  }
  closedir(d);
  if (st == DPT_OK && *n > 1) qsort(*names, *n, sizeof **names, by_name);
  return st;
}

/* A directory's regular files (symbolic links followed), sorted by name. */
static dpt_status add_dir(file_list *fl, const char *dir) {
  char **names = NULL;
  size_t n = 0, files = 0;
  dpt_status st = list_dir(dir, &names, &n);
  for (size_t i = 0; st == DPT_OK && i < n; i++) {
    char *path = malloc(strlen(dir) + strlen(names[i]) + 2);
    if (!path) {
      st = oom("a path");
      break;
    }
    sprintf(path, "%s/%s", dir, names[i]);
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
      files++;
      st = file_list_add(fl, path, &sb);
    }
    free(path);
  }
  for (size_t i = 0; i < n; i++)
    free(names[i]);
  free(names);
  if (st == DPT_OK && files == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: no text files in the directory (hidden and .dat files are skipped)",
                         dir);
  return st;
}

static dpt_status add_path(file_list *fl, const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0)
    return dpt_set_error(DPT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  if (S_ISDIR(sb.st_mode)) return add_dir(fl, path);
  if (!S_ISREG(sb.st_mode))
    return dpt_set_error(DPT_ERR_IO, "%s: not a regular file or a directory", path);
  return file_list_add(fl, path, &sb);
}

/* Room for `more` bytes of text. */
static dpt_status reserve_text(dpt_text_corpus *c, size_t more) {
  size_t need;
  if (!dpt_add_ok(c->len, more, &need)) return oom("the text");
  if (need <= c->cap) return DPT_OK;
  size_t cap = c->cap ? c->cap : 65536;
  while (cap < need)
    cap = cap > ((size_t)-1) / 2 ? need : 2 * cap;
  uint8_t *p = realloc(c->text, cap);
  if (!p) return oom("the text");
  c->text = p;
  c->cap = cap;
  return DPT_OK;
}

static dpt_status read_file(dpt_text_corpus *c, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return dpt_set_error(DPT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  dpt_status st = DPT_OK;
  for (;;) {
    if ((st = reserve_text(c, 65536)) != DPT_OK) break;
    const size_t got = fread(c->text + c->len, 1, c->cap - c->len, f);
    c->len += got;
    if (got == 0) break;
  }
  if (st == DPT_OK && ferror(f))
    st = dpt_set_error(DPT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
  fclose(f);
  return st;
}

static dpt_status add_document(dpt_text_corpus *c, size_t start, size_t end) {
  if (end == start) return DPT_OK;
  if (c->docs == c->doc_cap) {
    const size_t cap = c->doc_cap ? 2 * c->doc_cap : 1024;
    size_t *o = realloc(c->doc_off, cap * sizeof *o);
    if (o) c->doc_off = o;
    size_t *l = realloc(c->doc_len, cap * sizeof *l);
    if (l) c->doc_len = l;
    if (!o || !l) return oom("the documents");
    c->doc_cap = cap;
  }
  c->doc_off[c->docs] = start;
  c->doc_len[c->docs++] = end - start;
  c->bytes += end - start;
  return DPT_OK;
}

/* Cuts text[start, end) (one file) into documents at lines holding only "%" ("\r\n" too). */
static dpt_status split_documents(dpt_text_corpus *c, size_t start, size_t end) {
  const uint8_t *t = c->text;
  size_t doc = start;
  for (size_t line = start; line < end;) {
    const uint8_t *nl = memchr(t + line, '\n', end - line);
    const size_t stop = nl ? (size_t)(nl - t) : end; /* the line is t[line, stop) */
    const size_t next = nl ? stop + 1 : end;
    const size_t n = stop - line - (stop > line && t[stop - 1] == '\r');
    if (n == 1 && t[line] == '%') {
      DPT_TRY(add_document(c, doc, line));
      doc = next;
    }
    line = next;
  }
  return add_document(c, doc, end);
}

/* A JSON-lines file: each line's string `field` one document, appended to the text. */
static dpt_status read_jsonl(dpt_text_corpus *c, const char *path, const char *field) {
  dpt_jsonl_docs d;
  DPT_TRY(dpt_jsonl_read(path, field, &d));
  dpt_status st = reserve_text(c, d.bytes);
  for (size_t i = 0; st == DPT_OK && i < d.count; i++) {
    const size_t start = c->len;
    if (d.len[i]) memcpy(c->text + start, d.text + d.off[i], d.len[i]);
    c->len += d.len[i];
    st = add_document(c, start, c->len);
  }
  dpt_jsonl_free(&d);
  return st;
}

static dpt_status load_files(dpt_text_corpus *c, const char *const *paths, size_t count,
                             const char *field) {
  file_list fl = {0};
  dpt_status st = DPT_OK;
  for (size_t i = 0; st == DPT_OK && i < count; i++)
    st = paths[i] ? add_path(&fl, paths[i])
                  : dpt_set_error(DPT_ERR_INVALID_ARG, "text corpus: paths[%zu] is NULL", i);
  if (st == DPT_OK && fl.n) {
    c->file_names = calloc(fl.n, sizeof *c->file_names);
    c->file_start = calloc(fl.n, sizeof *c->file_start);
    if (!c->file_names || !c->file_start) st = oom("the file list");
  }
  for (size_t i = 0; st == DPT_OK && i < fl.n; i++) {
    const size_t start = c->len;
    c->file_start[i] = start;
    c->file_names[i] = fl.paths[i]; /* taken over from the list */
    fl.paths[i] = NULL;
    c->files = i + 1;
    if (dpt_jsonl_name(c->file_names[i])) {
      st = read_jsonl(c, c->file_names[i], field);
      continue;
    }
    st = read_file(c, c->file_names[i]);
    if (st == DPT_OK) st = split_documents(c, start, c->len);
  }
  file_list_free(&fl);
  return st;
}

dpt_status dpt_text_corpus_load(const char *const *paths, size_t count, dpt_text_corpus **out) {
  return dpt_text_corpus_load_field(paths, count, NULL, out);
}

dpt_status dpt_text_corpus_load_field(const char *const *paths, size_t count,
                                      const char *text_field, dpt_text_corpus **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "text corpus: out is NULL");
  *out = NULL;
  if (!paths || count == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "text corpus: no files or directories given");
  if (text_field && !*text_field)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "text corpus: the JSON lines' field name is empty");
  dpt_text_corpus *c = calloc(1, sizeof *c);
  if (!c) return oom("the corpus");
  const dpt_status st = load_files(c, paths, count, text_field ? text_field : "text");
  if (st != DPT_OK) {
    dpt_text_corpus_destroy(c);
    return st;
  }
  *out = c;
  return DPT_OK;
}

dpt_status dpt_text_corpus_from_memory(const void *text, size_t len, dpt_text_corpus **out) {
  if (!out || (!text && len))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "text corpus: %s is NULL", !out ? "out" : "text");
  *out = NULL;
  dpt_text_corpus *c = calloc(1, sizeof *c);
  if (!c) return oom("the corpus");
  dpt_status st = reserve_text(c, len);
  if (st == DPT_OK && len) memcpy(c->text, text, len);
  c->len = len;
  c->files = 1;
  c->file_names = calloc(1, sizeof *c->file_names);
  c->file_start = calloc(1, sizeof *c->file_start);
  if (!c->file_names || !c->file_start || !(c->file_names[0] = strdup("<memory>")))
    st = oom("the corpus");
  if (st == DPT_OK) st = split_documents(c, 0, len);
  if (st != DPT_OK) {
    dpt_text_corpus_destroy(c);
    return st;
  }
  *out = c;
  return DPT_OK;
}

void dpt_text_corpus_destroy(dpt_text_corpus *c) {
  if (!c) return;
  for (size_t i = 0; c->file_names && i < c->files; i++)
    free(c->file_names[i]);
  free(c->file_names);
  free(c->file_start);
  free(c->text);
  free(c->doc_off);
  free(c->doc_len);
  free(c);
}

size_t dpt_text_corpus_files(const dpt_text_corpus *c) {
  return c ? c->files : 0;
}

size_t dpt_text_corpus_documents(const dpt_text_corpus *c) {
  return c ? c->docs : 0;
}

size_t dpt_text_corpus_bytes(const dpt_text_corpus *c) {
  return c ? c->bytes : 0;
}

dpt_status dpt_text_corpus_document(const dpt_text_corpus *c, size_t i, const uint8_t **bytes,
                                    size_t *len) {
  if (!c || !bytes || !len)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "text corpus document: %s is NULL",
                         !c       ? "corpus"
                         : !bytes ? "bytes"
                                  : "len");
  if (i >= c->docs)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "text corpus document: %zu is past the corpus's %zu documents", i,
                         c->docs);
  *bytes = c->text + c->doc_off[i];
  *len = c->doc_len[i];
  return DPT_OK;
}

dpt_status dpt_text_corpus_check_utf8(const dpt_text_corpus *c) {
  if (!c) return dpt_set_error(DPT_ERR_INVALID_ARG, "text corpus UTF-8 check: corpus is NULL");
  for (size_t f = 0; f < c->files && c->file_start; f++) {
    const size_t start = c->file_start[f];
    const size_t end = f + 1 < c->files ? c->file_start[f + 1] : c->len;
    size_t bad = 0;
    if (dpt_utf8_valid(c->text + start, end - start, &bad)) continue;
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: not UTF-8 text: invalid byte 0x%02x at byte offset %zu",
                         c->file_names[f] ? c->file_names[f] : "?", c->text[start + bad], bad);
  }
  return DPT_OK;
}

/* ---- sequences ------------------------------------------------------------------------------- */

struct dpt_text_sequences {
  size_t seq_len, vocab;
  dpt_text_specials sp; /* the tokenizer's special ids */
  int32_t *ids[2];      /* per split: [count, seq_len] */
  size_t count[2], tokens[2];
};

static dpt_text_split split_of(size_t doc, size_t val_every) {
  return val_every && doc % val_every == val_every - 1 ? DPT_TEXT_VALIDATION : DPT_TEXT_TRAIN;
}

/* Appends ids[0, n) and then `sep` to the stream s[*len] of capacity *cap. */
static dpt_status stream_append(int32_t **s, size_t *len, size_t *cap, const int32_t *ids, size_t n,
                                int32_t sep) {
  size_t need;
  if (!dpt_add_ok(*len, n + 1, &need)) return oom("a token stream");
  if (need > *cap) {
    size_t c = *cap ? *cap : 4096;
    while (c < need)
      c = c > ((size_t)-1) / 2 / sizeof **s ? need : 2 * c;
    int32_t *p = c <= ((size_t)-1) / sizeof *p ? realloc(*s, c * sizeof *p) : NULL;
    if (!p) return oom("a token stream");
    *s = p;
    *cap = c;
  }
  if (n) memcpy(*s + *len, ids, n * sizeof *ids);
  (*s)[*len + n] = sep;
  *len = need;
  return DPT_OK;
}

/* A split's token stream: each of its documents encoded, then [SEP]; *len tokens. */
static dpt_status split_stream(const dpt_text_corpus *c, dpt_tokenizer *tok, size_t val_every,
                               dpt_text_split split, int32_t **out, size_t *len) {
  dpt_text_specials sp;
  dpt_tokenizer_specials(tok, &sp);
  int32_t *s = NULL;
  size_t n = 0, cap = 0;
  dpt_status st = DPT_OK;
  for (size_t d = 0; st == DPT_OK && d < c->docs; d++) {
    if (split_of(d, val_every) != split) continue;
    const int32_t *ids;
    size_t got;
    st = dpt_tokenizer_encode(tok, c->text + c->doc_off[d], c->doc_len[d], &ids, &got);
    if (st == DPT_OK) st = stream_append(&s, &n, &cap, ids, got, sp.sep);
  }
  if (st != DPT_OK) {
    free(s);
    return st;
  }
  *out = s;
  *len = n;
  return DPT_OK;
}

/* Whether id is one of the four specials MLM never predicts. */
static int is_special(const dpt_text_specials *sp, int32_t id) {
  return id == sp->pad || id == sp->cls || id == sp->sep || id == sp->mask;
}

/* The stream cut into [CLS] piece [SEP] sequences, pieces of seq_len - 2, the last padded. */
static dpt_status cut_sequences(dpt_text_sequences *s, dpt_text_split split, const int32_t *stream,
                                size_t len) {
  const size_t piece = s->seq_len - 2;
  const size_t count = (len + piece - 1) / piece;
  size_t total;
  if (!dpt_mul_ok(count, s->seq_len, &total) || total > ((size_t)-1) / sizeof(int32_t))
    return oom("the sequences");
  int32_t *ids = malloc((total ? total : 1) * sizeof *ids);
  if (!ids) return oom("the sequences");
  for (size_t q = 0; q < count; q++) {
    int32_t *seq = ids + q * s->seq_len;
    const size_t n = len - q * piece < piece ? len - q * piece : piece;
    seq[0] = s->sp.cls;
    memcpy(seq + 1, stream + q * piece, n * sizeof *seq);
    seq[n + 1] = s->sp.sep;
    for (size_t i = n + 2; i < s->seq_len; i++)
      seq[i] = s->sp.pad;
  }
  size_t text = 0;
  for (size_t i = 0; i < len; i++)
    text += !is_special(&s->sp, stream[i]);
  s->ids[split] = ids;
  s->count[split] = count;
  s->tokens[split] = text;
  return DPT_OK;
}

static dpt_status build_splits(dpt_text_sequences *s, const dpt_text_corpus *c, dpt_tokenizer *tok,
                               size_t val_every) {
  for (int k = 0; k < 2; k++) {
    int32_t *stream = NULL;
    size_t len = 0;
    DPT_TRY(split_stream(c, tok, val_every, (dpt_text_split)k, &stream, &len));
    const dpt_status st = cut_sequences(s, (dpt_text_split)k, stream, len);
    free(stream);
    DPT_TRY(st);
  }
  return DPT_OK;
}

dpt_status dpt_text_sequences_build(const dpt_text_corpus *corpus, dpt_bpe *bpe, size_t seq_len,
                                    size_t val_every, dpt_text_sequences **out) {
  if (!bpe) {
    if (out) *out = NULL;
    return dpt_set_error(DPT_ERR_INVALID_ARG, "text sequences: bpe is NULL");
  }
  dpt_tokenizer tok = {.bpe = bpe};
  const dpt_status st = dpt_text_sequences_build_with(corpus, &tok, seq_len, val_every, out);
  free(tok.buf);
  return st;
}

dpt_status dpt_text_sequences_build_with(const dpt_text_corpus *corpus, dpt_tokenizer *tok,
                                         size_t seq_len, size_t val_every,
                                         dpt_text_sequences **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "text sequences: out is NULL");
  *out = NULL;
  if (!corpus || !tok)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "text sequences: %s is NULL",
                         !corpus ? "corpus" : "tokenizer");
  if (seq_len < 3 || seq_len > INT32_MAX)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "text sequences: sequence length %zu must be at least 3 ([CLS], a token, "
                         "[SEP])",
                         seq_len);
  dpt_text_sequences *s = calloc(1, sizeof *s);
  if (!s) return oom("the sequences");
  s->seq_len = seq_len;
  s->vocab = dpt_tokenizer_vocab_size(tok);
  dpt_tokenizer_specials(tok, &s->sp);
  const dpt_status st = build_splits(s, corpus, tok, val_every);
  if (st != DPT_OK) {
    dpt_text_sequences_destroy(s);
    return st;
  }
  *out = s;
  return DPT_OK;
}

void dpt_text_sequences_destroy(dpt_text_sequences *s) {
  if (!s) return;
  free(s->ids[0]);
  free(s->ids[1]);
  free(s);
}

static int split_ok(dpt_text_split split) {
  return split == DPT_TEXT_TRAIN || split == DPT_TEXT_VALIDATION;
}

size_t dpt_text_sequences_count(const dpt_text_sequences *s, dpt_text_split split) {
  return s && split_ok(split) ? s->count[split] : 0;
}

size_t dpt_text_sequences_len(const dpt_text_sequences *s) {
  return s ? s->seq_len : 0;
}

size_t dpt_text_sequences_tokens(const dpt_text_sequences *s, dpt_text_split split) {
  return s && split_ok(split) ? s->tokens[split] : 0;
}

size_t dpt_text_sequences_vocab(const dpt_text_sequences *s) {
  return s ? s->vocab : 0;
}

void dpt_text_sequences_specials(const dpt_text_sequences *s, dpt_text_specials *sp) {
  if (sp) *sp = s ? s->sp : dpt_bpe_specials();
}

const int32_t *dpt_text_sequence(const dpt_text_sequences *s, dpt_text_split split, size_t i) {
  if (!s || !split_ok(split) || i >= s->count[split]) return NULL;
  return s->ids[split] + i * s->seq_len;
}

/* ---- masking --------------------------------------------------------------------------------- */

#define MLM_DOMAIN 0x6d6c6d2d6d61736bull /* "mlm-mask": these streams apart from others */

static dpt_status check_specials(const dpt_text_specials *sp, size_t vocab) {
  const int32_t v[4] = {sp->pad, sp->cls, sp->sep, sp->mask};
  for (int i = 0; i < 4; i++) {
    if (v[i] < 0 || (size_t)v[i] >= vocab)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "mlm_mask: special id %" PRId32 " is outside the vocabulary [0, %zu)",
                           v[i], vocab);
    for (int k = 0; k < i; k++)
      if (v[k] == v[i])
        return dpt_set_error(DPT_ERR_INVALID_ARG, "mlm_mask: special id %" PRId32 " repeats", v[i]);
  }
  return DPT_OK;
}

static dpt_status check_mask(const int32_t *ids, size_t len, size_t vocab, const int32_t *inputs,
                             const int32_t *labels) {
  if (len && (!ids || !inputs || !labels))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "mlm_mask: %s is NULL",
                         !ids      ? "ids"
                         : !inputs ? "inputs"
                                   : "labels");
  if (vocab <= DPT_TOKEN_BYTE0 || vocab > DPT_BPE_MAX_VOCAB)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "mlm_mask: vocabulary size %zu must be in (%d, %d] (the special tokens "
                         "and at least one other)",
                         vocab, DPT_TOKEN_BYTE0, DPT_BPE_MAX_VOCAB);
  for (size_t i = 0; i < len; i++)
    if (ids[i] < 0 || (size_t)ids[i] >= vocab)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "mlm_mask: ids[%zu] = %" PRId32 " is outside the vocabulary [0, %zu)", i,
                           ids[i], vocab);
  return DPT_OK;
}

dpt_status dpt_mlm_mask(uint64_t seed, uint64_t epoch, uint64_t seq_index, const int32_t *ids,
                        size_t len, size_t vocab_size, int32_t *inputs, int32_t *labels) {
  const dpt_text_specials sp = dpt_bpe_specials();
  return dpt_mlm_mask_specials(seed, epoch, seq_index, ids, len, vocab_size, &sp, inputs, labels);
}

/* The r-th id (r < vocab - 4) of the vocabulary less its four specials. */
static int32_t nth_plain(const dpt_text_specials *sp, uint64_t r) {
  int32_t v[4] = {sp->pad, sp->cls, sp->sep, sp->mask};
  for (int i = 1; i < 4; i++) /* ascending */
    for (int k = i; k > 0 && v[k - 1] > v[k]; k--) {
      const int32_t t = v[k];
      v[k] = v[k - 1];
      v[k - 1] = t;
    }
  for (int i = 0; i < 4; i++)
    r += r >= (uint64_t)v[i];
  return (int32_t)r;
}

dpt_status dpt_mlm_mask_specials(uint64_t seed, uint64_t epoch, uint64_t seq_index,
                                 const int32_t *ids, size_t len, size_t vocab_size,
                                 const dpt_text_specials *sp, int32_t *inputs, int32_t *labels) {
  if (!sp) return dpt_set_error(DPT_ERR_INVALID_ARG, "mlm_mask: specials is NULL");
  DPT_TRY(check_mask(ids, len, vocab_size, inputs, labels));
  DPT_TRY(check_specials(sp, vocab_size));
  for (size_t p = 0; p < len; p++) {
    const int32_t id = ids[p];
    inputs[p] = id;
    labels[p] = DPT_MLM_IGNORE;
    if (is_special(sp, id)) continue; /* [PAD], [CLS], [SEP], [MASK] are never chosen */
    const uint64_t key[3] = {epoch, seq_index, (uint64_t)p};
    dpt_rng rng;
    dpt_rng_seed_key(&rng, seed, MLM_DOMAIN, key, 3);
    if (!(dpt_rng_uniform(&rng) < 0.15)) continue;
    labels[p] = id;
    const double u = dpt_rng_uniform(&rng);
    if (u < 0.8)
      inputs[p] = sp->mask;
    else if (u < 0.9)
      inputs[p] = nth_plain(sp, dpt_rng_below(&rng, vocab_size - DPT_TOKEN_BYTE0));
  }
  return DPT_OK;
}

dpt_status dpt_text_sequences_gather(const dpt_text_sequences *s, dpt_text_split split,
                                     const uint64_t *indices, size_t count, uint64_t seed,
                                     uint64_t epoch, int32_t *inputs, int32_t *labels) {
  if (!s || !split_ok(split))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "text sequences gather: %s",
                         !s ? "sequences is NULL" : "no such split");
  if (count == 0) return DPT_OK;
  if (!indices || !inputs || !labels)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "text sequences gather: %s is NULL",
                         !indices  ? "indices"
                         : !inputs ? "inputs"
                                   : "labels");
  for (size_t i = 0; i < count; i++)
    if (indices[i] >= s->count[split])
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "text sequences gather: indices[%zu] = %" PRIu64
                           " is out of range (the %s split has %zu sequences)",
                           i, indices[i], split ? "validation" : "training", s->count[split]);
  for (size_t i = 0; i < count; i++)
    DPT_TRY(dpt_mlm_mask_specials(seed, epoch, indices[i], s->ids[split] + indices[i] * s->seq_len,
                                  s->seq_len, s->vocab, &s->sp, inputs + i * s->seq_len,
                                  labels + i * s->seq_len));
  return DPT_OK;
}

/* ---- UTF-8 --------------------------------------------------------------------------------- */

int dpt_utf8_valid(const void *text, size_t len, size_t *bad_offset) {
  const uint8_t *s = text;
  size_t i = 0;
  while (i < len) {
    const uint8_t c = s[i];
    size_t n;
    uint32_t min, cp;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1, min = 0x80, cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2, min = 0x800, cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3, min = 0x10000, cp = c & 0x07;
    } else {
      break;
    }
    if (len - i <= n) break;
    size_t k = 1;
    for (; k <= n && (s[i + k] & 0xc0) == 0x80; k++)
      cp = (cp << 6) | (s[i + k] & 0x3f);
    /* Truncated, overlong, a surrogate or past U+10FFFF. */
    if (k <= n || cp < min || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) break;
    i += n + 1;
  }
  if (i == len) return 1;
  if (bad_offset) *bad_offset = i;
  return 0;
}
