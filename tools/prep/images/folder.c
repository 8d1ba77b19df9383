/* An image folder (one subfolder per class) walked, decoded and fit into one safetensors data
 * set, in the order torchvision's ImageFolder lists it (images.h). */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/size.h"
#include "dptrain/safetensors.h"
#include "tools/prep/images/images.h"

#define MAX_DEPTH 64 /* folders below a class followed at most this deep (symbolic link loops) */

/* One image file: its path, where its folder's part ends, its class. */
typedef struct entry {
  char *path;
  size_t root_len; /* path[0, root_len) is its folder */
  int64_t label;
} entry;

typedef struct list {
  entry *e;
  size_t n, cap;
  char **classes;
  size_t num_classes, class_cap;
  size_t ignored;
} list;

static void list_free(list *l) {
  for (size_t i = 0; i < l->n; i++)
    free(l->e[i].path);
  for (size_t i = 0; i < l->num_classes; i++)
    free(l->classes[i]);
  free(l->e);
  free(l->classes);
}

static dpt_status oom(void) {
  return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "out of memory listing the images");
}

/* "dir/name" (one '/' between them when dir ends in '/' already), malloc'd. */
static char *join(const char *dir, const char *name) {
  size_t a = strlen(dir);
  const size_t b = strlen(name);
  while (a > 1 && dir[a - 1] == '/')
    a--;
  char *p = malloc(a + b + 2);
  if (!p) return NULL;
  memcpy(p, dir, a);
  p[a] = '/';
  memcpy(p + a + 1, name, b + 1);
  return p;
}

static int image_name(const char *name) {
  const char *dot = strrchr(name, '.');
  return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") || !strcasecmp(dot, ".png"));
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Python's sorted(os.walk()) order within a class: by folder path, then by file name. */
static int cmp_entry(const void *a, const void *b) {
  const entry *x = a, *y = b;
  const size_t n = x->root_len < y->root_len ? x->root_len : y->root_len;
  int c = memcmp(x->path, y->path, n);
  if (c == 0 && x->root_len != y->root_len) c = x->root_len < y->root_len ? -1 : 1;
  return c ? c : strcmp(x->path + x->root_len + 1, y->path + y->root_len + 1);
}

static dpt_status add_entry(list *l, char *path, size_t root_len, int64_t label) {
  if (l->n == l->cap) {
    const size_t cap = l->cap ? 2 * l->cap : 256;
    entry *e = realloc(l->e, cap * sizeof *e);
    if (!e) {
      free(path);
      return oom();
    }
    l->e = e;
    l->cap = cap;
  }
  l->e[l->n++] = (entry){path, root_len, label};
  return DPT_OK;
}

/* The image files below folder `root` (depth levels down from the class folder), as class
 * `label`; other files counted as ignored. */
static dpt_status walk(list *l, const char *root, int64_t label, int depth) {
  DIR *d = opendir(root);
  if (!d) return dpt_set_error(DPT_ERR_IO, "%s: cannot open the folder: %s", root, strerror(errno));
  dpt_status s = DPT_OK;
  const struct dirent *de;
  while (s == DPT_OK && (de = readdir(d)) != NULL) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    char *path = join(root, de->d_name);
    struct stat sb;
    if (!path) {
      s = oom();
    } else if (stat(path, &sb) != 0) {
      l->ignored++; /* a dangling link: os.walk lists it, ImageFolder's loader would fail on it */
      free(path);
    } else if (S_ISDIR(sb.st_mode)) {
      if (depth < MAX_DEPTH) s = walk(l, path, label, depth + 1);
      free(path);
    } else if (S_ISREG(sb.st_mode) && image_name(de->d_name)) {
      s = add_entry(l, path, strlen(root), label);
    } else {
      l->ignored++;
      free(path);
    }
  }
  closedir(d);
  return s;
}

/* The class folders of dir, sorted by name. */
static dpt_status find_classes(list *l, const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return dpt_set_error(DPT_ERR_IO, "%s: cannot open the folder: %s", dir, strerror(errno));
  dpt_status s = DPT_OK;
  const struct dirent *de;
  while (s == DPT_OK && (de = readdir(d)) != NULL) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    char *path = join(dir, de->d_name);
    struct stat sb;
    if (!path) {
      s = oom();
    } else if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
      if (l->num_classes == l->class_cap) {
        const size_t cap = l->class_cap ? 2 * l->class_cap : 16;
        char **c = realloc(l->classes, cap * sizeof *c);
        if (c) {
          l->classes = c;
          l->class_cap = cap;
        }
      }
      char *name = l->num_classes < l->class_cap ? strdup(de->d_name) : NULL;
      if (name)
        l->classes[l->num_classes++] = name;
      else
        s = oom();
    }
    free(path);
  }
  closedir(d);
  if (s == DPT_OK && l->num_classes == 0)
    s = dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: no class folder (one subfolder of images per class)",
                      dir);
  if (s == DPT_OK) qsort(l->classes, l->num_classes, sizeof *l->classes, cmp_str);
  return s;
}

/* Every class's images, class by class, each class in os.walk's sorted order. */
static dpt_status list_images(list *l, const char *dir) {
  DPT_TRY(find_classes(l, dir));
  for (size_t c = 0; c < l->num_classes; c++) {
    char *root = join(dir, l->classes[c]);
    if (!root) return oom();
    const size_t first = l->n;
    dpt_status s = walk(l, root, (int64_t)c, 0);
    if (s == DPT_OK && l->n == first)
      s = dpt_set_error(DPT_ERR_BAD_FORMAT,
                        "%s: no .jpg, .jpeg or .png file in this class folder (torchvision's "
                        "ImageFolder refuses an empty class too)",
                        root);
    free(root);
    DPT_TRY(s);
    qsort(l->e + first, l->n - first, sizeof *l->e, cmp_entry);
  }
  return DPT_OK;
}

/* The whole file at path, malloc'd, in *bytes and *size. */
static dpt_status read_whole(const char *path, uint8_t **bytes, size_t *size) {
  *bytes = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return dpt_set_error(DPT_ERR_IO, "cannot open: %s", strerror(errno));
  struct stat sb;
  dpt_status s = DPT_OK;
  if (fstat(fileno(f), &sb) != 0 || sb.st_size < 0) {
    s = dpt_set_error(DPT_ERR_IO, "cannot stat: %s", strerror(errno));
  } else {
    *size = (size_t)sb.st_size;
    *bytes = malloc(*size ? *size : 1);
    if (!*bytes)
      s = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "out of memory for %zu bytes", *size);
    else if (fread(*bytes, 1, *size, f) != *size)
      s = dpt_set_error(DPT_ERR_IO, "read failed: %s",
                        ferror(f) ? strerror(errno) : "file shrank while reading");
  }
  fclose(f);
  if (s != DPT_OK) {
    free(*bytes);
    *bytes = NULL;
  }
  return s;
}

/* One image read, decoded and fit into dst. */
static dpt_status convert_one(const dpt_image_folder_options *o, const char *path, uint8_t *dst,
                              int *warned) {
  uint8_t *bytes = NULL;
  size_t size = 0;
  dpt_image img = {0};
  dpt_status s = read_whole(path, &bytes, &size);
  if (s == DPT_OK) s = dpt_image_decode(bytes, size, &img);
  free(bytes);
  if (s == DPT_OK) s = dpt_image_fit(&img, o->channels, o->rows, o->cols, dst);
  *warned = img.warned;
  dpt_image_free(&img);
  return s;
}

/* "[\"name\", ...]": the class names as a JSON array, malloc'd. */
static char *classes_json(const list *l) {
  size_t cap = 3;
  for (size_t c = 0; c < l->num_classes; c++)
    cap += 6 * strlen(l->classes[c]) + 3;
  char *j = malloc(cap), *p = j;
  if (!j) return NULL;
  *p++ = '[';
  for (size_t c = 0; c < l->num_classes; c++) {
    if (c) *p++ = ',';
    *p++ = '"';
    for (const unsigned char *s = (const unsigned char *)l->classes[c]; *s; s++) {
      if (*s == '"' || *s == '\\')
        p += sprintf(p, "\\%c", *s);
      else if (*s < 0x20)
        p += sprintf(p, "\\u%04x", *s);
      else
        *p++ = (char)*s;
    }
    *p++ = '"';
  }
  *p++ = ']';
  *p = '\0';
  return j;
}

static dpt_status write_out(const dpt_image_folder_options *o, const list *l, const uint8_t *x,
                            const int64_t *y, size_t n) {
  static const char *const channel_names[] = {"", "L", "", "RGB", "RGBA"};
  char size[64];
  snprintf(size, sizeof size, "%zux%zu", o->rows, o->cols);
  char *classes = classes_json(l);
  if (!classes) return oom();
  const char *const kv[] = {"classes", classes, "channels", channel_names[o->channels],
                            "size",    size,    NULL};
  const dpt_st_tensor t[2] = {
      {"x", NULL, 4, {(int64_t)n, o->channels, (int64_t)o->rows, (int64_t)o->cols}, "U8", x},
      {"y", NULL, 1, {(int64_t)n}, "I64", y}};
  const dpt_status s = dpt_safetensors_write(o->out, t, 2, kv);
  free(classes);
  return s;
}

/* Converts the listed images into x and y; bad ones logged and skipped (or the first fails). */
static dpt_status convert_all(const dpt_image_folder_options *o, const list *l, size_t dim,
                              uint8_t *x, int64_t *y, dpt_image_folder_result *r) {
  double last = dpt_now();
  for (size_t i = 0; i < l->n; i++) {
    const char *path = l->e[i].path;
    int warned = 0;
    const dpt_status s = convert_one(o, path, x + r->converted * dim, &warned);
    char why[512];
    snprintf(why, sizeof why, "%s", s != DPT_OK ? dpt_last_error() : "");
    if (s != DPT_OK && (s == DPT_ERR_OUT_OF_MEMORY || s == DPT_ERR_UNSUPPORTED || o->stop_on_bad))
      return dpt_set_error(s, "%s: %s", path, why);
    if (s != DPT_OK) {
      if (o->log) fprintf(o->log, "%s: %s: %s (skipped)\n", o->prefix, path, why);
      r->skipped++;
      continue;
    }
    if (warned && o->log)
      fprintf(o->log, "%s: %s: the JPEG decoder warned about its data (kept)\n", o->prefix, path);
    y[r->converted++] = l->e[i].label;
    if (o->log && dpt_now() - last >= 1.0) {
      last = dpt_now();
      fprintf(o->log, "%s: %zu of %zu files, %zu converted, %zu skipped\n", o->prefix, i + 1, l->n,
              r->converted, r->skipped);
    }
  }
  return DPT_OK;
}

dpt_status dpt_image_folder_convert(const dpt_image_folder_options *o, dpt_image_folder_result *r) {
  memset(r, 0, sizeof *r);
  if (!o || !o->dir || !o->out || o->rows == 0 || o->cols == 0 ||
      (o->channels != 1 && o->channels != 3 && o->channels != 4))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "image_folder_convert: bad options");
  if (!dpt_images_supported()) {
    dpt_image none;
    return dpt_image_decode(NULL, 0, &none);
  }
  list l = {0};
  dpt_status s = list_images(&l, o->dir);
  r->classes = l.num_classes;
  r->ignored = l.ignored;
  size_t dim = 0, bytes = 0;
  if (s == DPT_OK && (!dpt_mul_ok(o->rows, o->cols, &dim) ||
                      !dpt_mul_ok(dim, (size_t)o->channels, &dim) || !dpt_mul_ok(dim, l.n, &bytes)))
    s = dpt_set_error(DPT_ERR_INVALID_ARG, "%zu images of %zux%zu overflow the address space", l.n,
                      o->rows, o->cols);
  uint8_t *x = s == DPT_OK ? malloc(bytes) : NULL;
  int64_t *y = s == DPT_OK ? malloc(l.n * sizeof *y) : NULL;
  if (s == DPT_OK && (!x || !y))
    s = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "out of memory for %zu images of %zu bytes", l.n, dim);
  if (s == DPT_OK) s = convert_all(o, &l, dim, x, y, r);
  if (s == DPT_OK && r->converted == 0)
    s = dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: none of its %zu images could be read", o->dir, l.n);
  if (s == DPT_OK) s = write_out(o, &l, x, y, r->converted);
  free(x);
  free(y);
  list_free(&l);
  return s;
}
