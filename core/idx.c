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

#include "core/dataset_impl.h"
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

/* Reads an IDX file of unsigned bytes with `ndims` (1 or 3) dimensions. On success *data is a
 * malloc'd [product(dims)] byte array the caller frees. `what` names the content ("images"). */
static dpt_status idx_load(const char *path, int ndims, const char *what, uint32_t dims[3],
                           unsigned char **data) {
  *data = NULL;
  const uint32_t want_magic = 0x00000800u | (uint32_t)ndims;
  const size_t header_bytes = 4u + 4u * (size_t)ndims;
  idx_file f;
  dpt_status st = idx_open(&f, path);
  if (st != DPT_OK) return st;
  const char *unit = f.gz ? "bytes decompressed" : "bytes";

  unsigned char header[16];
  size_t got;
  st = idx_read(&f, header, header_bytes, &got);
  if (st != DPT_OK) goto done;
  /* The magic alone can tell a swapped file apart, so it is checked before the length. */
  if (got >= 4 && idx_be32(header) != want_magic) {
    const uint32_t found = idx_be32(header);
    const char *hint = found == DPT_IDX_IMAGES_MAGIC   ? " (an IDX images file)"
                       : found == DPT_IDX_LABELS_MAGIC ? " (an IDX labels file)"
                                                       : "";
    st =
        dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: not an IDX %s file: magic 0x%08x%s, expected 0x%08x",
                      path, what, (unsigned)found, hint, (unsigned)want_magic);
    goto done;
  }
  if (got < header_bytes) {
    st = dpt_set_error(DPT_ERR_BAD_FORMAT,
                       "%s: truncated IDX %s header: expected %zu bytes, file has %zu %s", path,
                       what, header_bytes, got, unit);
    goto done;
  }

  size_t payload = 1;
  int overflow = 0;
  char shape[64] = "";
  for (int i = 0; i < ndims; i++) {
    dims[i] = idx_be32(header + 4 + 4 * i);
    overflow |= !dpt_mul_ok(payload, dims[i], &payload);
    const size_t len = strlen(shape);
    snprintf(shape + len, sizeof shape - len, "%s%u", i ? ", " : "", (unsigned)dims[i]);
  }
  for (int i = 0; i < ndims; i++) {
    if (dims[i] == 0) {
      st = dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: IDX %s header has a zero dimension: [%s]", path,
                         what, shape);
      goto done;
    }
  }
  size_t expected = 0;
  if (overflow || !dpt_add_ok(payload, header_bytes, &expected)) {
    st = dpt_set_error(DPT_ERR_BAD_FORMAT,
                       "%s: IDX %s header dimensions [%s] overflow the address space", path, what,
                       shape);
    goto done;
  }

  /* For a plain file the length is known up front: no allocation on the header's word. */
  if (f.fp) {
    long end = -1;
    if (fseek(f.fp, 0, SEEK_END) == 0) end = ftell(f.fp);
    if (end < 0 || fseek(f.fp, (long)header_bytes, SEEK_SET) != 0) {
      st = dpt_set_error(DPT_ERR_IO, "%s: seek failed: %s", path, strerror(errno));
      goto done;
    }
    if ((unsigned long)end != expected) {
      st = dpt_set_error(
          DPT_ERR_BAD_FORMAT, "%s: %s: header [%s] means %zu bytes, file has %ld bytes", path,
          (size_t)end < expected ? "truncated" : "trailing bytes", shape, expected, end);
      goto done;
    }
  }

  /* A compressed file's length says nothing of what it holds: its buffer grows as data comes
   * (a truncated file claiming terabytes is reported truncated, not out of memory). */
  size_t cap = f.fp || payload < IDX_GZ_CHUNK ? payload : IDX_GZ_CHUNK;
  unsigned char *buf = malloc(cap);
  got = 0;
  for (;;) {
    if (!buf) {
      st = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes of %s", path, cap,
                         what);
      goto done;
    }
    size_t n = 0;
    st = idx_read(&f, buf + got, cap - got, &n);
    got += n;
    if (st != DPT_OK || got < cap || cap == payload) break;
    cap = payload - cap < cap ? payload : 2 * cap;
    unsigned char *grown = realloc(buf, cap);
    if (!grown) free(buf);
    buf = grown;
  }
  if (st == DPT_OK && got < payload) {
    st = dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: truncated: header [%s] means %zu %s, file has %zu",
                       path, shape, expected, unit, header_bytes + got);
  }
  if (st == DPT_OK) {
    size_t rest = 0;
    st = idx_count_rest(&f, &rest);
    if (st == DPT_OK && rest > 0)
      st = dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: trailing bytes: header [%s] means %zu %s, file has %zu", path, shape,
                         expected, unit, expected + rest);
  }
  if (st == DPT_OK)
    *data = buf;
  else
    free(buf);
done:
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
