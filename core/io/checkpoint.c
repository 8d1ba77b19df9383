/* Checkpoint files (include/dptrain/checkpoint.h, core/io/checkpoint.h): a safetensors file whose
 * metadata carries the progress as JSON and the CRC32 of every tensor's bytes. A write goes to a
 * temporary name in the directory (dpt_safetensors_write flushes it to the disk), is renamed to
 * "ckpt-<step>.safetensors" and the directory is fsync'd; then older checkpoints beyond `keep`
 * and temporary files a killed writer left are removed. One writer per directory at a time. */
#if !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* fsync, opendir */
#define _DEFAULT_SOURCE         /* flock, gethostname */
#endif

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/crc.h"
#include "base/error.h"
#include "base/size.h"
#include "core/io/checkpoint.h"

#define CKPT_PREFIX     "ckpt-"
#define CKPT_SUFFIX     ".safetensors"
#define CKPT_TMP_PREFIX ".ckpt-"
#define CKPT_TMP_MARK   ".tmp."
#define OPT_PREFIX      "optimizer."

/* ---- the progress as JSON ------------------------------------------------------------------ */

typedef enum field_kind { F_I64, F_F64, F_HEX } field_kind;

#define FIELD(name, kind)                                                                          \
  { #name, kind, offsetof(dpt_checkpoint_progress, name) }
static const struct {
  const char *name;
  field_kind kind;
  size_t offset;
} fields[] = {
    FIELD(step, F_I64),          FIELD(optimizer_steps, F_I64), FIELD(epoch, F_I64),
    FIELD(batch, F_I64),         FIELD(skipped_steps, F_I64),   FIELD(skipped_in_a_row, F_I64),
    FIELD(rollbacks, F_I64),     FIELD(trained_samples, F_I64), FIELD(epoch_loss_sum, F_F64),
    FIELD(epoch_samples, F_I64), FIELD(lr_scale, F_F64),        FIELD(world_size, F_I64),
    FIELD(seed, F_HEX),          FIELD(state_hash, F_HEX),
};
#undef FIELD
#define NUM_FIELDS (sizeof fields / sizeof fields[0])

/* A double as JSON: a number (jansson prints 17 significant digits, so it reads back bit for
 * bit), or "nan", "inf", "-inf", which JSON has no number for. */
static json_t *real_to_json(double v) {
  if (isnan(v)) return json_string("nan");
  if (isinf(v)) return json_string(v > 0 ? "inf" : "-inf");
  return json_real(v);
}

static json_t *field_to_json(const dpt_checkpoint_progress *p, size_t i) {
  const char *at = (const char *)p + fields[i].offset;
  if (fields[i].kind == F_I64) return json_integer(*(const int64_t *)(const void *)at);
  if (fields[i].kind == F_F64) return real_to_json(*(const double *)(const void *)at);
  char hex[17];
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)*(const uint64_t *)(const void *)at);
  return json_string(hex);
}

dpt_status dpt_ckpt_progress_to_json(const dpt_checkpoint_progress *p, char **out) {
  if (!p || !out) return dpt_set_error(DPT_ERR_INVALID_ARG, "checkpoint progress: NULL argument");
  *out = NULL;
  json_t *obj = json_object();
  int ok = obj != NULL;
  for (size_t i = 0; i < NUM_FIELDS && ok; ++i)
    ok = json_object_set_new(obj, fields[i].name, field_to_json(p, i)) == 0;
  if (ok) *out = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
  json_decref(obj);
  if (!*out) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "checkpoint progress: out of memory");
  return DPT_OK;
}

/* Exactly `digits` hex digits (either case) into *v; 0 when s is not that. */
static int parse_hex(const char *s, size_t digits, uint64_t *v) {
  if (strlen(s) != digits) return 0;
  uint64_t r = 0;
  for (size_t k = 0; k < digits; ++k) {
    const char c = s[k];
    const int d = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : -1;
    if (d < 0) return 0;
    r = r << 4 | (uint64_t)d;
  }
  *v = r;
  return 1;
}

static int parse_real(const json_t *v, double *out) {
  if (json_is_number(v)) {
    *out = json_number_value(v);
    return 1;
  }
  const char *s = json_string_value(v);
  if (!s) return 0;
  if (!strcmp(s, "nan"))
    *out = NAN;
  else if (!strcmp(s, "inf"))
    *out = INFINITY;
  else if (!strcmp(s, "-inf"))
    *out = -INFINITY;
  else
    return 0;
  return 1;
}

static dpt_status field_from_json(const json_t *obj, size_t i, dpt_checkpoint_progress *p) {
  const json_t *v = json_object_get(obj, fields[i].name);
  if (!v)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "checkpoint progress: missing field \"%s\"",
                         fields[i].name);
  void *at = (char *)p + fields[i].offset;
  int ok = 0;
  if (fields[i].kind == F_I64) {
    ok = json_is_integer(v);
    if (ok) *(int64_t *)at = (int64_t)json_integer_value(v);
  } else if (fields[i].kind == F_F64) {
    ok = parse_real(v, (double *)at);
  } else {
    ok = json_is_string(v) && parse_hex(json_string_value(v), 16, (uint64_t *)at);
  }
  if (ok) return DPT_OK;
  static const char *const want[] = {"an integer", "a number", "a string of 16 hex digits"};
  return dpt_set_error(DPT_ERR_BAD_FORMAT, "checkpoint progress: field \"%s\" must be %s",
                       fields[i].name, want[fields[i].kind]);
}

dpt_status dpt_ckpt_progress_from_json(const char *json, dpt_checkpoint_progress *p) {
  if (!json || !p) return dpt_set_error(DPT_ERR_INVALID_ARG, "checkpoint progress: NULL argument");
  json_error_t err;
  json_t *obj = json_loads(json, JSON_REJECT_DUPLICATES, &err);
  if (!obj)
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "checkpoint progress: bad JSON: line %d, column %d: %s", err.line,
                         err.column, err.text);
  dpt_status s = DPT_OK;
  dpt_checkpoint_progress tmp;
  memset(&tmp, 0, sizeof tmp);
  if (!json_is_object(obj))
    s = dpt_set_error(DPT_ERR_BAD_FORMAT, "checkpoint progress: not a JSON object");
  for (size_t i = 0; i < NUM_FIELDS && s == DPT_OK; ++i)
    s = field_from_json(obj, i, &tmp);
  json_decref(obj);
  if (s == DPT_OK) *p = tmp;
  return s;
}

/* ---- CRC32 --------------------------------------------------------------------------------- */

static int host_little_endian(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

/* The CRC32 of tensor t's bytes as the file holds them (floats little-endian). */
static uint32_t crc_tensor(const dpt_st_tensor *t, size_t nbytes) {
  const uint32_t crc = dpt_crc32_start();
  if (nbytes == 0) return crc;
  if (t->dtype && strcmp(t->dtype, "F32")) return dpt_crc32(crc, t->bytes, nbytes);
  if (host_little_endian()) return dpt_crc32(crc, t->data, nbytes);
  uint32_t c = crc;
  unsigned char chunk[4096];
  for (size_t done = 0, n = nbytes / 4; done < n;) {
    const size_t m = n - done < sizeof chunk / 4 ? n - done : sizeof chunk / 4;
    for (size_t k = 0; k < m; ++k) {
      uint32_t u;
      memcpy(&u, &t->data[done + k], sizeof u);
      for (int b = 0; b < 4; ++b)
        chunk[4 * k + (size_t)b] = (unsigned char)(u >> (8 * b));
    }
    c = dpt_crc32(c, chunk, 4 * m);
    done += m;
  }
  return c;
}

/* Bytes of tensor t to write: its elements times its dtype's size. Unknown dtypes, overflowing
 * shapes and missing data are refused here, before the CRC reads them. */
static dpt_status tensor_bytes(const dpt_st_tensor *t, size_t i, size_t *out) {
  static const struct {
    const char *name;
    size_t size;
  } dtypes[] = {{"F64", 8}, {"I64", 8}, {"U64", 8},  {"F32", 4},     {"I32", 4},
                {"U32", 4}, {"F16", 2}, {"BF16", 2}, {"I16", 2},     {"U16", 2},
                {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}};
  const char *dtype = t->dtype ? t->dtype : "F32";
  size_t n = 0;
  for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0] && !n; ++k)
    if (!strcmp(dtype, dtypes[k].name)) n = dtypes[k].size;
  int ok = n > 0 && t->ndim >= 0 && t->ndim <= DPT_ST_MAX_DIMS;
  for (int d = 0; ok && d < t->ndim; ++d)
    ok = t->shape[d] >= 0 && (uint64_t)t->shape[d] <= SIZE_MAX &&
         dpt_mul_ok(n, (size_t)t->shape[d], &n);
  const void *p = strcmp(dtype, "F32") ? t->bytes : (const void *)t->data;
  if (!ok || (n > 0 && !p))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "dpt_ckpt_write: tensor %zu ('%s'): bad dtype, shape or NULL data", i,
                         t->name);
  *out = n;
  return DPT_OK;
}

/* The JSON object of every tensor's CRC32 (malloc'd). */
static dpt_status crc_json(const dpt_st_tensor *tensors, size_t count, char **out) {
  *out = NULL;
  for (size_t i = 0; i < count; ++i) {
    size_t nbytes;
    if (!tensors[i].name)
      return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_ckpt_write: tensor %zu has no name", i);
    DPT_TRY(tensor_bytes(&tensors[i], i, &nbytes));
  }
  json_t *obj = json_object();
  int ok = obj != NULL;
  for (size_t i = 0; i < count && ok; ++i) {
    size_t nbytes = 0;
    tensor_bytes(&tensors[i], i, &nbytes);
    char hex[9];
    snprintf(hex, sizeof hex, "%08lx", (unsigned long)crc_tensor(&tensors[i], nbytes));
    ok = json_object_set_new(obj, tensors[i].name, json_string(hex)) == 0;
  }
  if (ok) *out = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(obj);
  if (!*out) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_ckpt_write: out of memory");
  return DPT_OK;
}

/* ---- the directory ------------------------------------------------------------------------- */

void dpt_ckpt_path(const char *dir, int64_t step, char *out, size_t cap) {
  snprintf(out, cap, "%s/" CKPT_PREFIX "%012lld" CKPT_SUFFIX, dir, (long long)step);
}

/* The step of a checkpoint's file name ("ckpt-<12 or more digits>.safetensors", exactly as
 * dpt_ckpt_path writes it); 0 when name is not one. */
static int parse_name(const char *name, int64_t *step) {
  const size_t pl = strlen(CKPT_PREFIX), sl = strlen(CKPT_SUFFIX), n = strlen(name);
  if (n < pl + 12 + sl || strncmp(name, CKPT_PREFIX, pl) || strcmp(name + n - sl, CKPT_SUFFIX))
    return 0;
  int64_t v = 0;
  for (size_t k = pl; k < n - sl; ++k) {
    if (name[k] < '0' || name[k] > '9' || v > (INT64_MAX - 9) / 10) return 0;
    v = v * 10 + (name[k] - '0');
  }
  char canonical[64];
  snprintf(canonical, sizeof canonical, CKPT_PREFIX "%012lld" CKPT_SUFFIX, (long long)v);
  if (strcmp(canonical, name)) return 0; /* e.g. a 13-digit name with a leading zero */
  *step = v;
  return 1;
}

static int is_temporary(const char *name) {
  return !strncmp(name, CKPT_TMP_PREFIX, strlen(CKPT_TMP_PREFIX)) && strstr(name, CKPT_TMP_MARK);
}

static int cmp_desc(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* The steps of dir's checkpoints, newest first (*steps malloc'd, may be NULL when *n is 0).
 * *missing is set when dir does not exist. */
static dpt_status list_steps(const char *dir, int64_t **steps, size_t *n, int *missing) {
  *steps = NULL;
  *n = 0;
  *missing = 0;
  DIR *d = opendir(dir);
  if (!d && (errno == ENOENT || errno == ENOTDIR)) {
    *missing = 1;
    return DPT_OK;
  }
  if (!d) return dpt_set_error(DPT_ERR_IO, "%s: cannot list: %s", dir, strerror(errno));
  size_t cap = 0;
  dpt_status s = DPT_OK;
  for (struct dirent *e; s == DPT_OK && (e = readdir(d)) != NULL;) {
    int64_t step;
    if (!parse_name(e->d_name, &step)) continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 16;
      int64_t *grown = realloc(*steps, cap * sizeof *grown);
      if (!grown)
        s = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory", dir);
      else
        *steps = grown;
    }
    if (s == DPT_OK) (*steps)[(*n)++] = step;
  }
  closedir(d);
  if (s != DPT_OK) {
    free(*steps);
    *steps = NULL;
    *n = 0;
    return s;
  }
  if (*n > 1) qsort(*steps, *n, sizeof **steps, cmp_desc);
  return DPT_OK;
}

static dpt_status ensure_dir(const char *dir);

dpt_status dpt_ckpt_prepare_dir(const char *dir, int64_t *newest) {
  *newest = -1;
  DPT_TRY(ensure_dir(dir));
  if (access(dir, W_OK | X_OK) != 0)
    return dpt_set_error(DPT_ERR_IO, "checkpoint directory %s: cannot write there: %s", dir,
                         strerror(errno));
  int64_t *steps = NULL;
  size_t n = 0;
  int missing = 0;
  DPT_TRY(list_steps(dir, &steps, &n, &missing));
  if (n > 0) *newest = steps[0];
  free(steps);
  return DPT_OK;
}

dpt_status dpt_ckpt_lock_dir(const char *dir, int *fd) {
  *fd = -1;
  char path[4096], holder[256] = "";
  snprintf(path, sizeof path, "%s/lock", dir);
  const int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (f < 0)
    return dpt_set_error(DPT_ERR_IO, "checkpoint directory %s: cannot open %s: %s", dir, path,
                         strerror(errno));
  if (flock(f, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const ssize_t n = pread(f, holder, sizeof holder - 1, 0);
    holder[n > 0 ? n : 0] = '\0';
    holder[strcspn(holder, "\n")] = '\0';
    close(f);
    if (err != EWOULDBLOCK)
      return dpt_set_error(DPT_ERR_IO, "checkpoint directory %s: cannot lock %s: %s", dir, path,
                           strerror(err));
    return dpt_set_error(DPT_ERR_IO,
                         "checkpoint directory %s is in use by another run (%s holds %s): give "
                         "each run its own directory",
                         dir, holder[0] ? holder : "a process", path);
  }
  char host[200] = "?";
  gethostname(host, sizeof host - 1);
  const int len = snprintf(holder, sizeof holder, "host %s pid %ld\n", host, (long)getpid());
  if (ftruncate(f, 0) != 0 || pwrite(f, holder, (size_t)len, 0) != len) {
    const int err = errno;
    close(f);
    return dpt_set_error(DPT_ERR_IO, "checkpoint directory %s: cannot write %s: %s", dir, path,
                         strerror(err));
  }
  *fd = f;
  return DPT_OK;
}

void dpt_ckpt_unlock_dir(int fd) {
  if (fd >= 0) close(fd); /* the lock goes with the file; the file stays for the next run */
}

/* dir exists as a directory, created (one level) when missing. */
static dpt_status ensure_dir(const char *dir) {
  struct stat sb;
  if (stat(dir, &sb) == 0) {
    if (S_ISDIR(sb.st_mode)) return DPT_OK;
    return dpt_set_error(DPT_ERR_IO, "checkpoint directory %s: not a directory", dir);
  }
  if (mkdir(dir, 0777) == 0 || errno == EEXIST) return DPT_OK;
  return dpt_set_error(DPT_ERR_IO, "checkpoint directory %s: cannot create it: %s", dir,
                       strerror(errno));
}

/* Flushes dir's entries (the rename) to the disk. */
static dpt_status sync_dir(const char *dir) {
  const int fd = open(dir, O_RDONLY);
  if (fd < 0) return dpt_set_error(DPT_ERR_IO, "%s: cannot open to sync: %s", dir, strerror(errno));
  const int ok = fsync(fd) == 0 || errno == EINVAL; /* some file systems cannot sync a dir */
  const int err = errno;
  close(fd);
  if (!ok) return dpt_set_error(DPT_ERR_IO, "%s: fsync failed: %s", dir, strerror(err));
  return DPT_OK;
}

/* Whether the temporary file `name` belongs to a live writer of this machine: the process its
 * name carries still runs (another rank of the job writing the same step at the same time). */
static int writer_alive(const char *name) {
  const char *at = strstr(name, CKPT_TMP_MARK);
  char *end = NULL;
  const long pid = at ? strtol(at + strlen(CKPT_TMP_MARK), &end, 10) : 0;
  if (pid <= 0 || !end || *end != '.' || pid == (long)getpid()) return 0;
  return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

/* Removes the temporary files a killed writer left in dir (before writing, so they give their
 * space back to the new file); a live writer's stays. */
static void remove_temporaries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return; /* listing fails again, with its reason, in prune */
  char path[4096];
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (!is_temporary(e->d_name) || writer_alive(e->d_name)) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    remove(path); /* best effort: a file that stays costs only space */
  }
  closedir(d);
}

/* Removes dir's checkpoints beyond the newest `keep`, never the one at `written`. */
static dpt_status prune(const char *dir, int keep, int64_t written) {
  int64_t *steps;
  size_t n;
  int missing;
  DPT_TRY(list_steps(dir, &steps, &n, &missing));
  char path[4096];
  for (size_t i = (size_t)keep; i < n; ++i) {
    if (steps[i] == written) continue;
    dpt_ckpt_path(dir, steps[i], path, sizeof path);
    if (remove(path) != 0 && errno != ENOENT) {
      const int err = errno;
      free(steps);
      return dpt_set_error(DPT_ERR_IO, "%s: cannot remove an old checkpoint: %s", path,
                           strerror(err));
    }
  }
  free(steps);
  return DPT_OK;
}

/* ---- writing ------------------------------------------------------------------------------- */

/* The caller's metadata with the progress and the CRC32s appended (*out malloc'd, strings
 * borrowed). */
static dpt_status write_metadata(const char *const *kv, const char *progress, const char *crcs,
                                 const char ***out) {
  size_t n = 0;
  for (; kv && kv[n]; n += 2) {
    if (!kv[n + 1])
      return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_ckpt_write: metadata key '%s' has no value",
                           kv[n]);
    if (!strcmp(kv[n], DPT_CKPT_PROGRESS_KEY) || !strcmp(kv[n], DPT_CKPT_CRC_KEY))
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "dpt_ckpt_write: metadata key '%s' is set by the checkpoint writer",
                           kv[n]);
  }
  const char **all = malloc((n + 5) * sizeof *all);
  if (!all) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_ckpt_write: out of memory");
  if (n) memcpy(all, kv, n * sizeof *all);
  all[n] = DPT_CKPT_PROGRESS_KEY;
  all[n + 1] = progress;
  all[n + 2] = DPT_CKPT_CRC_KEY;
  all[n + 3] = crcs;
  all[n + 4] = NULL;
  *out = all;
  return DPT_OK;
}

/* Writes the file to a temporary name in dir, then renames it to `path` and syncs dir. */
static dpt_status write_renamed(const char *dir, int64_t step, const char *path,
                                const dpt_st_tensor *tensors, size_t count, const char **meta) {
  static atomic_ulong counter; /* temporary names unique across the process's threads */
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s/" CKPT_TMP_PREFIX "%012lld" CKPT_TMP_MARK "%ld.%lu", dir,
           (long long)step, (long)getpid(), (unsigned long)atomic_fetch_add(&counter, 1));
  /* The writer flushes the file to the disk (fsync) before its own rename to tmp. */
  DPT_TRY(dpt_safetensors_write(tmp, tensors, count, meta));
  if (rename(tmp, path) != 0) {
    const int err = errno;
    remove(tmp);
    return dpt_set_error(DPT_ERR_IO, "%s: cannot rename %s to it: %s", path, tmp, strerror(err));
  }
  return sync_dir(dir);
}

dpt_status dpt_ckpt_write(const char *dir, const dpt_checkpoint_progress *progress,
                          const dpt_st_tensor *tensors, size_t count,
                          const char *const *metadata_kv, int keep, char *path, size_t cap) {
  if (!dir || !progress || (!tensors && count) || !path || cap == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_ckpt_write: NULL argument");
  if (keep < 1)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_ckpt_write: keep %d must be at least 1", keep);
  if (progress->step < 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_ckpt_write: step %lld is negative",
                         (long long)progress->step);
  dpt_ckpt_path(dir, progress->step, path, cap);
  if (strlen(dir) + 64 > cap || strlen(dir) + 64 > 4096)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_ckpt_write: directory name too long: %s", dir);
  DPT_TRY(ensure_dir(dir));
  char *progress_json = NULL, *crcs = NULL;
  const char **meta = NULL;
  remove_temporaries(dir);
  dpt_status s = dpt_ckpt_progress_to_json(progress, &progress_json);
  if (s == DPT_OK) s = crc_json(tensors, count, &crcs);
  if (s == DPT_OK) s = write_metadata(metadata_kv, progress_json, crcs, &meta);
  if (s == DPT_OK) s = write_renamed(dir, progress->step, path, tensors, count, meta);
  if (s == DPT_OK) s = prune(dir, keep, progress->step);
  free(meta);
  free(crcs);
  free(progress_json);
  return s;
}

/* ---- reading ------------------------------------------------------------------------------- */

static dpt_status crc_mismatch(const char *path, const char *name, const char *stored,
                               uint32_t computed) {
  return dpt_set_error(DPT_ERR_BAD_FORMAT,
                       "%s: tensor '%s' fails its CRC32 check (stored %s, computed %08lx)", path,
                       name, stored, (unsigned long)computed);
}

/* Tensor i's bytes against its entry in crcs. */
static dpt_status check_tensor(const dpt_safetensors *st, const char *path, const json_t *crcs,
                               size_t i) {
  dpt_st_info info;
  DPT_TRY(dpt_safetensors_info(st, i, &info));
  const json_t *v = json_object_get(crcs, info.name);
  if (!v)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: tensor '%s' has no CRC32 entry in \"%s\"", path,
                         info.name, DPT_CKPT_CRC_KEY);
  const char *stored = json_string_value(v);
  const uint32_t got = dpt_crc32(dpt_crc32_start(), info.data, info.nbytes);
  uint64_t want = 0;
  if (!stored || !parse_hex(stored, 8, &want))
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: tensor '%s': its CRC32 entry is not 8 hex digits",
                         path, info.name);
  if (want != got) return crc_mismatch(path, info.name, stored, got);
  return DPT_OK;
}

/* Every tensor against "dptrain.crc32", and no entry without its tensor. */
static dpt_status check_crcs(const dpt_safetensors *st, const char *path) {
  const char *text = dpt_safetensors_metadata(st, DPT_CKPT_CRC_KEY);
  if (!text)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: not a checkpoint: no \"%s\" metadata", path,
                         DPT_CKPT_CRC_KEY);
  json_error_t err;
  json_t *crcs = json_loads(text, JSON_REJECT_DUPLICATES, &err);
  if (!json_is_object(crcs)) {
    json_decref(crcs);
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: \"%s\" is not a JSON object", path,
                         DPT_CKPT_CRC_KEY);
  }
  dpt_status s = DPT_OK;
  const size_t count = dpt_safetensors_count(st);
  for (size_t i = 0; i < count && s == DPT_OK; ++i)
    s = check_tensor(st, path, crcs, i);
  const char *name;
  json_t *v;
  dpt_st_info info;
  json_object_foreach(crcs, name, v) {
    if (s != DPT_OK) break;
    if (dpt_safetensors_find(st, name, &info) != DPT_OK)
      s = dpt_set_error(DPT_ERR_BAD_FORMAT,
                        "%s: \"%s\" has an entry for tensor '%s', which the file lacks", path,
                        DPT_CKPT_CRC_KEY, name);
  }
  json_decref(crcs);
  return s;
}

dpt_status dpt_ckpt_open(const char *path, dpt_safetensors **st,
                         dpt_checkpoint_progress *progress) {
  if (!st) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_ckpt_open: st is NULL");
  *st = NULL;
  dpt_safetensors *f = NULL;
  DPT_TRY(dpt_safetensors_open(path, &f));
  dpt_checkpoint_progress p;
  const char *json = dpt_safetensors_metadata(f, DPT_CKPT_PROGRESS_KEY);
  dpt_status s = DPT_OK;
  if (!json)
    s = dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: not a checkpoint: no \"%s\" metadata", path,
                      DPT_CKPT_PROGRESS_KEY);
  else if ((s = dpt_ckpt_progress_from_json(json, &p)) != DPT_OK)
    dpt_error_context(s, "%s", path);
  if (s == DPT_OK) s = check_crcs(f, path);
  if (s != DPT_OK) {
    dpt_safetensors_close(f);
    return s;
  }
  if (progress) *progress = p;
  *st = f;
  return DPT_OK;
}

dpt_status dpt_checkpoint_verify(const char *path, dpt_checkpoint_progress *progress) {
  dpt_safetensors *st = NULL;
  DPT_TRY(dpt_ckpt_open(path, &st, progress));
  dpt_safetensors_close(st);
  return DPT_OK;
}

/* ---- the newest valid one, export ----------------------------------------------------------- */

dpt_status dpt_checkpoint_find_latest(const char *dir, dpt_checkpoint_log_fn log, void *user,
                                      char *path, size_t cap, int *found,
                                      dpt_checkpoint_progress *progress) {
  if (!dir || !path || cap == 0 || !found)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_checkpoint_find_latest: NULL argument");
  *found = 0;
  int64_t *steps;
  size_t n;
  int missing;
  DPT_TRY(list_steps(dir, &steps, &n, &missing));
  char first_why[1024];
  first_why[0] = '\0';
  for (size_t i = 0; i < n && !*found; ++i) {
    dpt_ckpt_path(dir, steps[i], path, cap);
    if (dpt_checkpoint_verify(path, progress) == DPT_OK) {
      *found = 1;
      break;
    }
    if (!first_why[0]) snprintf(first_why, sizeof first_why, "%s", dpt_last_error());
    if (log) log(path, dpt_last_error(), user);
  }
  free(steps);
  if (*found || n == 0) return DPT_OK;
  path[0] = '\0';
  return dpt_set_error(DPT_ERR_BAD_FORMAT,
                       "%s: none of its %zu checkpoint(s) verifies (newest: %s)", dir, n,
                       first_why);
}

/* Tensor info as a tensor to write: its bytes as they are (floats from an aligned copy when the
 * file's are not 4-byte aligned; *copy receives it, to free). */
static dpt_status as_write_tensor(const dpt_st_info *info, dpt_st_tensor *t, float **copy) {
  memset(t, 0, sizeof *t);
  t->name = info->name;
  t->ndim = info->ndim;
  memcpy(t->shape, info->shape, sizeof t->shape);
  *copy = NULL;
  if (strcmp(info->dtype, "F32")) {
    t->dtype = info->dtype;
    t->bytes = info->data;
    return DPT_OK;
  }
  if ((uintptr_t)info->data % _Alignof(float) == 0) {
    t->data = (const float *)info->data;
    return DPT_OK;
  }
  *copy = malloc(info->nbytes ? info->nbytes : 1);
  if (!*copy) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "checkpoint export: out of memory");
  memcpy(*copy, info->data, info->nbytes);
  t->data = *copy;
  return DPT_OK;
}

static int checkpoint_only_key(const char *key) {
  return !strcmp(key, DPT_CKPT_PROGRESS_KEY) || !strcmp(key, DPT_CKPT_TERMS_KEY) ||
         !strcmp(key, DPT_CKPT_CRC_KEY);
}

/* The model's tensors and metadata of an open checkpoint, written to out. */
static dpt_status export_open(const dpt_safetensors *st, const char *out) {
  const size_t count = dpt_safetensors_count(st), nmeta = dpt_safetensors_metadata_count(st);
  dpt_st_tensor *ts = calloc(count ? count : 1, sizeof *ts);
  float **copies = calloc(count ? count : 1, sizeof *copies);
  const char **kv = malloc((2 * nmeta + 1) * sizeof *kv);
  dpt_status s =
      ts && copies && kv ? DPT_OK : dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of memory", out);
  size_t n = 0, k = 0;
  for (size_t i = 0; i < count && s == DPT_OK; ++i) {
    dpt_st_info info;
    s = dpt_safetensors_info(st, i, &info);
    if (s != DPT_OK || !strncmp(info.name, OPT_PREFIX, strlen(OPT_PREFIX))) continue;
    s = as_write_tensor(&info, &ts[n], &copies[n]);
    ++n;
  }
  for (size_t i = 0; i < nmeta && s == DPT_OK; ++i) {
    s = dpt_safetensors_metadata_at(st, i, &kv[k], &kv[k + 1]);
    if (s == DPT_OK && !checkpoint_only_key(kv[k])) k += 2;
  }
  if (kv) kv[k] = NULL;
  if (s == DPT_OK) s = dpt_safetensors_write(out, ts, n, kv);
  for (size_t i = 0; copies && i < n; ++i)
    free(copies[i]);
  free(copies);
  free(kv);
  free(ts);
  return s;
}

dpt_status dpt_checkpoint_export(const char *path, const char *out) {
  if (!path || !out)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_checkpoint_export: NULL argument");
  dpt_safetensors *st = NULL;
  DPT_TRY(dpt_ckpt_open(path, &st, NULL));
  const dpt_status s = export_open(st, out);
  dpt_safetensors_close(st);
  return s;
}
