/* IDX reader for (Fashion-)MNIST files, plain or gzip-compressed.
 *
 * IDX layout (big-endian): u32 magic 0x000008NN (0x08 = unsigned byte elements, NN = number of
 * dimensions), NN u32 dimension sizes, then the elements in row-major order. Images are
 * 0x00000803 [count, rows, cols], labels 0x00000801 [count]. A file must hold exactly header +
 * product(dims) bytes (after decompression): anything else is reported with both numbers.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/data/dataset_impl.h"
#include "base/error.h"
#include "base/size.h"

/* One open IDX file, read sequentially whether compressed or not. */
typedef struct idx_file {
  const char *path; /* borrowed, for messages */
  FILE *fp;         /* plain file, or NULL */
  gzFile gz;        /* gzip file, or NULL */
} idx_file;

static dpt_status idx_open(idx_file *f, const char *path) {
  f->path = path;
  f->fp = NULL;
  f->gz = NULL;
  FILE *fp = fopen(path, "rb");
  if (!fp) return dpt_set_error(DPT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  unsigned char magic[2] = {0, 0};
  const size_t got = fread(magic, 1, 2, fp);
  if (ferror(fp)) {
    const int err = errno;
    fclose(fp);
    return dpt_set_error(DPT_ERR_IO, "%s: read failed: %s", path, strerror(err));
  }
  if (got == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
    fclose(fp);
    gzFile gz = gzopen(path, "rb");
    if (!gz)
      return dpt_set_error(DPT_ERR_IO, "%s: cannot open as gzip: %s", path,
                           errno ? strerror(errno) : "out of memory");
    /* Larger than the 8 KiB default: the training set is 26 MB compressed. */
    (void)gzbuffer(gz, 1u << 17);
    f->gz = gz;
    return DPT_OK;
  }
  if (fseek(fp, 0, SEEK_SET) != 0) {
    const int err = errno;
    fclose(fp);
    return dpt_set_error(DPT_ERR_IO, "%s: seek failed: %s", path, strerror(err));
  }
  f->fp = fp;
  return DPT_OK;
}

static void idx_close(idx_file *f) {
  if (f->fp) fclose(f->fp);
  if (f->gz) gzclose(f->gz);
  f->fp = NULL;
  f->gz = NULL;
}

/* First buffer for a gzip payload, doubled as the data comes. */
#define IDX_GZ_CHUNK ((size_t)16 << 20)

/* Reads up to n bytes into buf; *got < n means the end of the (decompressed) data. */
static dpt_status idx_read(idx_file *f, void *buf, size_t n, size_t *got) {
  *got = 0;
  if (f->fp) {
    *got = fread(buf, 1, n, f->fp);
    if (*got < n && ferror(f->fp))
      return dpt_set_error(DPT_ERR_IO, "%s: read failed: %s", f->path, strerror(errno));
    return DPT_OK;
  }
  unsigned char *p = buf;
  while (*got < n) {
    /* gzread counts in unsigned int and returns int: read in chunks well below INT_MAX. */
    size_t want = n - *got;
    if (want > (1u << 30)) want = 1u << 30;
    const int r = gzread(f->gz, p + *got, (unsigned)want);
    int errnum = Z_OK;
    const char *msg = gzerror(f->gz, &errnum);
    if (r < 0 || (errnum != Z_OK && errnum != Z_STREAM_END)) {
      if (errnum == Z_ERRNO)
        return dpt_set_error(DPT_ERR_IO, "%s: read failed: %s", f->path, strerror(errno));
      if (errnum == Z_MEM_ERROR)
        return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory decompressing", f->path);
      return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: corrupt gzip data: %s", f->path, msg);
    }
    if (r == 0) break;
    *got += (size_t)r;
  }
  return DPT_OK;
}

/* Counts the bytes left to read (trailing data after what the header announced). */
static dpt_status idx_count_rest(idx_file *f, size_t *rest) {
  unsigned char scratch[1u << 14];
  *rest = 0;
  for (;;) {
    size_t got;
    dpt_status st = idx_read(f, scratch, sizeof scratch, &got);
    if (st != DPT_OK) return st;
    *rest += got;
    if (got < sizeof scratch) return DPT_OK;
  }
}

static uint32_t idx_be32(const unsigned char *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

#define DPT_IDX_IMAGES_MAGIC 0x00000803u
#define DPT_IDX_LABELS_MAGIC 0x00000801u

/* What an IDX header announces, and the strings its messages use. */
typedef struct idx_layout {
  const char *what;    /* "images" or "labels", for messages */
  int ndims;           /* 1 or 3 */
  size_t header_bytes; /* 4 + 4 * ndims */
  uint32_t *dims;      /* [ndims], the caller's */
  char shape[64];      /* the dims as "60000, 28, 28", for messages */
  size_t payload;      /* product(dims): element bytes after the header */
  size_t expected;     /* header_bytes + payload: the whole (decompressed) file */
} idx_layout;

/* How lengths of f are counted, for messages. */
static const char *idx_unit(const idx_file *f) {
  return f->gz ? "bytes decompressed" : "bytes";
}

/* The magic and the dimension sizes; fills l->dims, shape, payload, expected. */
static dpt_status idx_read_header(idx_file *f, idx_layout *l) {
  const uint32_t want_magic = 0x00000800u | (uint32_t)l->ndims;
  unsigned char header[16];
  size_t got;
  DPT_TRY(idx_read(f, header, l->header_bytes, &got));
  /* The magic alone can tell a swapped file apart, so it is checked before the length. */
  if (got >= 4 && idx_be32(header) != want_magic) {
    const uint32_t found = idx_be32(header);
    const char *hint = found == DPT_IDX_IMAGES_MAGIC   ? " (an IDX images file)"
                       : found == DPT_IDX_LABELS_MAGIC ? " (an IDX labels file)"
                                                       : "";
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: not an IDX %s file: magic 0x%08x%s, expected 0x%08x", f->path,
                         l->what, (unsigned)found, hint, (unsigned)want_magic);
  }
  if (got < l->header_bytes)
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: truncated IDX %s header: expected %zu bytes, file has %zu %s",
                         f->path, l->what, l->header_bytes, got, idx_unit(f));
  l->payload = 1;
  int overflow = 0;
  l->shape[0] = '\0';
  for (int i = 0; i < l->ndims; i++) {
    l->dims[i] = idx_be32(header + 4 + 4 * i);
    overflow |= !dpt_mul_ok(l->payload, l->dims[i], &l->payload);
    const size_t len = strlen(l->shape);
    snprintf(l->shape + len, sizeof l->shape - len, "%s%u", i ? ", " : "", (unsigned)l->dims[i]);
  }
  for (int i = 0; i < l->ndims; i++)
    if (l->dims[i] == 0)
      return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: IDX %s header has a zero dimension: [%s]",
                           f->path, l->what, l->shape);
  if (overflow || !dpt_add_ok(l->payload, l->header_bytes, &l->expected))
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: IDX %s header dimensions [%s] overflow the address space", f->path,
                         l->what, l->shape);
  return DPT_OK;
}

/* A plain file's length is known up front: it must be what the header announces, checked
 * before anything is allocated on the header's word. Leaves f at the first element. */
static dpt_status idx_check_plain_length(idx_file *f, const idx_layout *l) {
  long end = -1;
  if (fseek(f->fp, 0, SEEK_END) == 0) end = ftell(f->fp);
  if (end < 0 || fseek(f->fp, (long)l->header_bytes, SEEK_SET) != 0)
    return dpt_set_error(DPT_ERR_IO, "%s: seek failed: %s", f->path, strerror(errno));
  if ((unsigned long)end != l->expected)
    return dpt_set_error(
        DPT_ERR_BAD_FORMAT, "%s: %s: header [%s] means %zu bytes, file has %ld bytes", f->path,
        (size_t)end < l->expected ? "truncated" : "trailing bytes", l->shape, l->expected, end);
  return DPT_OK;
}

/* The payload into a new malloc'd [payload] byte array, refusing a short or a long file. A
 * compressed file's length says nothing of what it holds: its buffer grows as data comes (a
 * truncated file claiming terabytes is reported truncated, not out of memory). */
static dpt_status idx_read_payload(idx_file *f, const idx_layout *l, unsigned char **data) {
  size_t cap = f->fp || l->payload < IDX_GZ_CHUNK ? l->payload : IDX_GZ_CHUNK;
  unsigned char *buf = malloc(cap);
  size_t got = 0;
  dpt_status st = DPT_OK;
  for (;;) {
    if (!buf)
      return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes of %s", f->path,
                           cap, l->what);
    size_t n = 0;
    st = idx_read(f, buf + got, cap - got, &n);
    got += n;
    if (st != DPT_OK || got < cap || cap == l->payload) break;
    cap = l->payload - cap < cap ? l->payload : 2 * cap;
    unsigned char *grown = realloc(buf, cap);
    if (!grown) free(buf);
    buf = grown;
  }
  if (st == DPT_OK && got < l->payload)
    st = dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: truncated: header [%s] means %zu %s, file has %zu",
                       f->path, l->shape, l->expected, idx_unit(f), l->header_bytes + got);
  if (st == DPT_OK) {
    size_t rest = 0;
    st = idx_count_rest(f, &rest);
    if (st == DPT_OK && rest > 0)
      st = dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: trailing bytes: header [%s] means %zu %s, file has %zu", f->path,
                         l->shape, l->expected, idx_unit(f), l->expected + rest);
  }
  if (st == DPT_OK)
    *data = buf;
  else
    free(buf);
  return st;
}

/* Reads an IDX file of unsigned bytes with `ndims` (1 or 3) dimensions. On success *data is a
 * malloc'd [product(dims)] byte array the caller frees. `what` names the content ("images"). */
static dpt_status idx_load(const char *path, int ndims, const char *what, uint32_t dims[3],
                           unsigned char **data) {
  *data = NULL;
  idx_layout l = {what, ndims, 4u + 4u * (size_t)ndims, dims, "", 0, 0};
  idx_file f;
  DPT_TRY(idx_open(&f, path));
  dpt_status st = idx_read_header(&f, &l);
  if (st == DPT_OK && f.fp) st = idx_check_plain_length(&f, &l);
  if (st == DPT_OK) st = idx_read_payload(&f, &l, data);
  idx_close(&f);
  return st;
}

dpt_status dpt_dataset_load_idx(const char *images_path, const char *labels_path, int num_classes,
                                dpt_dataset **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dataset_load_idx: out is NULL");
  *out = NULL;
  if (!images_path || !labels_path)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dataset_load_idx: %s path is NULL",
                         !images_path ? "images" : "labels");
  if (num_classes < 1)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dataset_load_idx: num_classes %d must be >= 1",
                         num_classes);

  uint32_t idims[3] = {0, 0, 0}, ldims[3] = {0, 0, 0};
  unsigned char *pixels = NULL, *bytes = NULL;
  int32_t *labels = NULL;
  dpt_status st = idx_load(images_path, 3, "images", idims, &pixels);
  if (st == DPT_OK) st = idx_load(labels_path, 1, "labels", ldims, &bytes);
  if (st == DPT_OK && idims[0] != ldims[0])
    st = dpt_set_error(DPT_ERR_BAD_FORMAT, "%s has %u images but %s has %u labels", images_path,
                       (unsigned)idims[0], labels_path, (unsigned)ldims[0]);
  const size_t count = idims[0];
  if (st == DPT_OK) {
    for (size_t i = 0; i < count; i++) {
      if (bytes[i] >= (unsigned)num_classes) {
        st = dpt_set_error(DPT_ERR_BAD_FORMAT,
                           "%s: label %u at index %zu is not below the class count %d", labels_path,
                           (unsigned)bytes[i], i, num_classes);
        break;
      }
    }
  }
  if (st == DPT_OK) {
    /* count single bytes fitted in memory, count int32 may not (32-bit size_t). */
    if (count <= (size_t)-1 / sizeof *labels) labels = malloc(count * sizeof *labels);
    if (!labels)
      st = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu labels", labels_path,
                         count);
  }
  if (st != DPT_OK) {
    free(pixels);
    free(bytes);
    free(labels);
    return st;
  }
  for (size_t i = 0; i < count; i++)
    labels[i] = bytes[i];
  free(bytes);
  return dpt_dataset_adopt(pixels, pixels, labels, count, idims[1], idims[2], num_classes, out);
}

/* dir + "/" + name + suffix, malloc'd; NULL when out of memory. */
static char *idx_join(const char *dir, const char *name, const char *suffix) {
  const size_t dl = strlen(dir), nl = strlen(name), sl = strlen(suffix);
  const int sep = dl > 0 && dir[dl - 1] != '/';
  char *p = malloc(dl + (size_t)sep + nl + sl + 1);
  if (!p) return NULL;
  memcpy(p, dir, dl);
  if (sep) p[dl] = '/';
  memcpy(p + dl + sep, name, nl);
  memcpy(p + dl + sep + nl, suffix, sl + 1);
  return p;
}

/* Picks `dir/name` or `dir/name.gz`, whichever exists (the plain one first). A file that exists
 * but cannot be opened (permissions) is picked too, so its own error is the one reported. */
static dpt_status idx_pick(const char *dir, const char *split, const char *name, char **path) {
  *path = NULL;
  char *plain = idx_join(dir, name, "");
  char *gz = idx_join(dir, name, ".gz");
  if (!plain || !gz) {
    free(plain);
    free(gz);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dataset_load_dir: out of memory");
  }
  char *tries[2] = {plain, gz};
  for (int i = 0; i < 2; i++) {
    errno = 0;
    FILE *fp = fopen(tries[i], "rb");
    if (fp) fclose(fp);
    if (fp || errno != ENOENT) {
      *path = tries[i];
      free(tries[1 - i]);
      return DPT_OK;
    }
  }
  dpt_status st = dpt_set_error(DPT_ERR_IO, "%s: no %s split file %s: tried %s and %s", dir, split,
                                name, plain, gz);
  free(plain);
  free(gz);
  return st;
}

dpt_status dpt_dataset_load_dir(const char *dir, const char *split, int num_classes,
                                dpt_dataset **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dataset_load_dir: out is NULL");
  *out = NULL;
  if (!dir || !split)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dataset_load_dir: %s is NULL",
                         !dir ? "dir" : "split");
  const char *prefix;
  if (strcmp(split, "train") == 0)
    prefix = "train";
  else if (strcmp(split, "test") == 0)
    prefix = "t10k";
  else
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "dataset_load_dir: unknown split '%s' (expected 'train' or 'test')",
                         split);
  char images_name[64], labels_name[64];
  snprintf(images_name, sizeof images_name, "%s-images-idx3-ubyte", prefix);
  snprintf(labels_name, sizeof labels_name, "%s-labels-idx1-ubyte", prefix);
  char *images = NULL, *labels = NULL;
  dpt_status st = idx_pick(dir, split, images_name, &images);
  if (st == DPT_OK) st = idx_pick(dir, split, labels_name, &labels);
  if (st == DPT_OK) st = dpt_dataset_load_idx(images, labels, num_classes, out);
  free(images);
  free(labels);
  return st;
}
