/* Interaction shards: the reader that loads one rank's shards, and the fixed-length epoch over
 * unequal shards (include/dptrain/interactions.h; the writer is tools/prep/shard_writer.c). */
#define _POSIX_C_SOURCE 200809L /* glob, fileno */
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc.h"
#include "base/error.h"
#include "base/rng.h"
#include "dptrain/comm.h"
#include "dptrain/fingerprint.h"
#include "dptrain/train.h"
#include "dptrain/data.h"
#include "dptrain/interactions.h"
#include "dptrain/train.h"

#define RNG_DOMAIN_EPOCH UINT64_C(0x5245434f52445331) /* "RECORDS1" */

/* ---- little-endian fields ------------------------------------------------------------------ */

static uint32_t get_u32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++)
    v |= (uint32_t)p[i] << (8 * i);
  return v;
}

static uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static float get_f32(const unsigned char *p) {
  const uint32_t v = get_u32(p);
  float f;
  memcpy(&f, &v, 4);
  return f;
}

static size_t header_bytes(uint32_t num_sparse) {
  return DPT_SHARD_HEADER_FIXED + 8 * (size_t)num_sparse;
}

/* ---- headers ------------------------------------------------------------------------------- */

/* Reads and checks the header from an open file of `size` bytes. */
static dpt_status read_header(FILE *f, const char *path, long long size, dpt_shard_header *out) {
  unsigned char h[DPT_SHARD_HEADER_FIXED + 8 * DPT_SHARD_MAX_SPARSE];
  if (size < DPT_SHARD_HEADER_FIXED ||
      fread(h, 1, DPT_SHARD_HEADER_FIXED, f) != DPT_SHARD_HEADER_FIXED)
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: truncated: %lld bytes, shorter than a shard header (%d)", path, size,
                         DPT_SHARD_HEADER_FIXED);
  if (memcmp(h, DPT_SHARD_MAGIC, 8) != 0)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: not an interaction shard (bad magic)", path);
  const uint32_t version = get_u32(h + 8);
  if (version != DPT_SHARD_VERSION)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: shard version %u, this build reads %d", path,
                         (unsigned)version, DPT_SHARD_VERSION);
  out->num_dense = get_u32(h + 12);
  out->num_sparse = get_u32(h + 16);
  out->num_records = get_u64(h + 24);
  out->payload_crc = get_u32(h + 32);
  if (out->num_sparse < 1 || out->num_sparse > DPT_SHARD_MAX_SPARSE ||
      out->num_dense > DPT_SHARD_MAX_DENSE)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: corrupt header: %u dense, %u sparse features",
                         path, (unsigned)out->num_dense, (unsigned)out->num_sparse);
  const size_t tb = 8 * (size_t)out->num_sparse;
  if ((long long)header_bytes(out->num_sparse) > size ||
      fread(h + DPT_SHARD_HEADER_FIXED, 1, tb, f) != tb)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: truncated inside its header (%lld bytes)", path,
                         size);
  uint32_t crc = dpt_crc32(dpt_crc32_start(), h, 36);
  crc = dpt_crc32(crc, h + DPT_SHARD_HEADER_FIXED, tb);
  if (crc != get_u32(h + 36))
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: corrupt header (CRC32 %08lx, computed %08lx)",
                         path, (unsigned long)get_u32(h + 36), (unsigned long)crc);
  for (uint32_t j = 0; j < out->num_sparse; j++) {
    out->table_sizes[j] = get_u64(h + DPT_SHARD_HEADER_FIXED + 8 * (size_t)j);
    if (out->table_sizes[j] < 1 || out->table_sizes[j] > DPT_SHARD_MAX_TABLE)
      return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: corrupt header: table %u of size %llu", path,
                           (unsigned)j, (unsigned long long)out->table_sizes[j]);
  }
  const size_t rb = DPT_SHARD_RECORD_BYTES(out->num_dense, out->num_sparse);
  const unsigned long long payload =
      (unsigned long long)(size - (long long)header_bytes(out->num_sparse));
  if (out->num_records > payload / rb)
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: truncated: the header says %llu records, the file holds %llu whole "
                         "ones (record %llu is incomplete or missing)",
                         path, (unsigned long long)out->num_records, payload / rb, payload / rb);
  if (payload != out->num_records * rb)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: %llu stray bytes after the %llu records", path,
                         payload - out->num_records * rb, (unsigned long long)out->num_records);
  return DPT_OK;
}

static dpt_status open_shard(const char *path, FILE **f, long long *size) {
  *f = fopen(path, "rb");
  if (!*f) return dpt_set_error(DPT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  if (fseek(*f, 0, SEEK_END) != 0 || (*size = ftell(*f)) < 0 || fseek(*f, 0, SEEK_SET) != 0) {
    fclose(*f);
    *f = NULL;
    return dpt_set_error(DPT_ERR_IO, "%s: cannot seek: %s", path, strerror(errno));
  }
  return DPT_OK;
}

dpt_status dpt_shard_read_header(const char *path, dpt_shard_header *out) {
  if (!path || !out) return dpt_set_error(DPT_ERR_INVALID_ARG, "shard header: NULL argument");
  FILE *f;
  long long size;
  DPT_TRY(open_shard(path, &f, &size));
  const dpt_status st = read_header(f, path, size, out);
  fclose(f);
  return st;
}

/* ---- the reader ---------------------------------------------------------------------------- */

struct dpt_interactions {
  int rank, world;
  uint32_t num_dense, num_sparse;
  uint64_t table_sizes[DPT_SHARD_MAX_SPARSE];
  size_t num_shards;
  char **paths;          /* [num_shards] */
  uint64_t *shard_count; /* [num_shards] records per shard */
  uint32_t *shard_crc;   /* [num_shards] payload CRC32 per shard */
  uint64_t total;
  uint64_t fingerprint;   /* of every shard's header (dpt_interactions_fingerprint) */
  uint64_t layout;        /* of the first header's layout fields */
  uint64_t *rank_records; /* [world]: records each rank holds */
  size_t part, parts;     /* this rank loads shards part, part + parts, ... of those it sees */
  int ranged;             /* fewer files than parts: a range of records instead */
  size_t first_shard;     /* ranged: the first file the range touches */
  size_t local_shards, n; /* this rank's shards and records */
  float *dense;           /* [n, num_dense] */
  int32_t *sparse;        /* [n, num_sparse] */
  uint8_t *labels;        /* [n] */
  /* the cached epoch order */
  uint64_t *order;
  int order_valid;
  uint64_t order_seed, order_epoch;
};

void dpt_interactions_destroy(dpt_interactions *d) {
  if (!d) return;
  for (size_t s = 0; s < d->num_shards && d->paths; s++)
    free(d->paths[s]);
  free(d->paths);
  free(d->shard_count);
  free(d->shard_crc);
  free(d->rank_records);
  free(d->dense);
  free(d->sparse);
  free(d->labels);
  free(d->order);
  free(d);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Reads shard s's payload (every record is checked, for the CRC) and keeps its records
 * [first, first + count) in the local arrays from record `at` on. */
static dpt_status load_shard(dpt_interactions *d, size_t s, size_t at, uint64_t first,
                             uint64_t count) {
  const char *path = d->paths[s];
  FILE *f;
  long long size;
  DPT_TRY(open_shard(path, &f, &size));
  dpt_shard_header h;
  dpt_status st = read_header(f, path, size, &h);
  if (st == DPT_OK && h.num_records != d->shard_count[s])
    st = dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: changed while being read", path);
  const size_t rb = DPT_SHARD_RECORD_BYTES(d->num_dense, d->num_sparse);
  const size_t chunk = 4096;
  unsigned char *buf = st == DPT_OK ? malloc(rb * chunk) : NULL;
  if (st == DPT_OK && !buf) st = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: read buffer", path);
  /* The whole payload's CRC first; the first bad record is named with it (or alone). */
  uint32_t crc = dpt_crc32_start();
  char bad[256] = "";
  for (uint64_t r = 0; st == DPT_OK && r < h.num_records;) {
    const size_t m = (size_t)(h.num_records - r < chunk ? h.num_records - r : chunk);
    if (fread(buf, rb, m, f) != m) {
      st = dpt_set_error(DPT_ERR_IO, "%s: read failed at record %llu", path, (unsigned long long)r);
      break;
    }
    crc = dpt_crc32(crc, buf, m * rb);
    for (size_t k = 0; k < m; k++, r++) {
      if (*bad) continue;
      const unsigned char *p = buf + k * rb;
      const int keep = r >= first && r - first < count;
      const size_t i = keep ? at + (size_t)(r - first) : 0;
      if (p[0] > 1) {
        snprintf(bad, sizeof bad, "record %llu: label byte %u is not 0 or 1", (unsigned long long)r,
                 (unsigned)p[0]);
        continue;
      }
      if (keep) d->labels[i] = p[0];
      p++;
      for (uint32_t j = 0; j < d->num_dense && keep; j++, p += 4)
        d->dense[i * d->num_dense + j] = get_f32(p);
      if (!keep) p += 4 * (size_t)d->num_dense;
      for (uint32_t j = 0; j < d->num_sparse && !*bad; j++, p += 4) {
        const uint32_t id = get_u32(p);
        if (id >= d->table_sizes[j])
          snprintf(bad, sizeof bad,
                   "record %llu: sparse feature %u has id %lu outside its table of %llu",
                   (unsigned long long)r, (unsigned)j, (unsigned long)id,
                   (unsigned long long)d->table_sizes[j]);
        if (keep) d->sparse[i * d->num_sparse + j] = (int32_t)id;
      }
    }
  }
  if (st == DPT_OK && crc != h.payload_crc)
    st = dpt_set_error(
        DPT_ERR_BAD_FORMAT, "%s: corrupt payload: CRC32 %08lx, the header says %08lx%s%s%s", path,
        (unsigned long)crc, (unsigned long)h.payload_crc, *bad ? " (" : "", bad, *bad ? ")" : "");
  else if (st == DPT_OK && *bad)
    st = dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: %s", path, bad);
  free(buf);
  fclose(f);
  return st;
}

/* Expands the pattern and reads every header: the paths (sorted), each shard's count, the
 * layout (all must agree), the fingerprint of what this rank sees. No record is loaded. */
static dpt_status scan_shards(const char *pattern, dpt_interactions *d) {
  glob_t g;
  memset(&g, 0, sizeof g);
  const int rc = glob(pattern, GLOB_ERR, NULL, &g);
  if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
    globfree(&g);
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: no shard file matches the pattern", pattern);
  }
  if (rc != 0) {
    globfree(&g);
    return dpt_set_error(DPT_ERR_IO, "%s: cannot expand the pattern (glob error %d)", pattern, rc);
  }
  d->paths = calloc(g.gl_pathc, sizeof *d->paths);
  d->shard_count = calloc(g.gl_pathc, sizeof *d->shard_count);
  d->shard_crc = calloc(g.gl_pathc, sizeof *d->shard_crc);
  if (!d->paths || !d->shard_count || !d->shard_crc) {
    globfree(&g);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: %zu shards", pattern, (size_t)g.gl_pathc);
  }
  for (size_t s = 0; s < g.gl_pathc; s++) {
    d->paths[s] = strdup(g.gl_pathv[s]);
    if (!d->paths[s]) {
      d->num_shards = s;
      globfree(&g);
      return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: shard paths", pattern);
    }
  }
  d->num_shards = g.gl_pathc;
  globfree(&g);
  qsort(d->paths, d->num_shards, sizeof *d->paths, cmp_str); /* bytewise, whatever the locale */
  /* Every header: the layout must agree, the counts give the epoch's length. */
  dpt_shard_header h;
  for (size_t s = 0; s < d->num_shards; s++) {
    DPT_TRY(dpt_shard_read_header(d->paths[s], &h));
    if (s == 0) { /* the layout, then each shard's count and payload CRC in shard order */
      uint64_t lay[2 + DPT_SHARD_MAX_SPARSE] = {h.num_dense, h.num_sparse};
      memcpy(lay + 2, h.table_sizes, h.num_sparse * sizeof h.table_sizes[0]);
      d->layout = dpt_fingerprint(lay, (2 + (size_t)h.num_sparse) * sizeof lay[0]);
      d->fingerprint = d->layout;
    }
    const uint64_t fw[3] = {d->fingerprint, h.num_records, h.payload_crc};
    d->fingerprint = dpt_fingerprint(fw, sizeof fw);
    if (s == 0) {
      d->num_dense = h.num_dense;
      d->num_sparse = h.num_sparse;
      memcpy(d->table_sizes, h.table_sizes, h.num_sparse * sizeof h.table_sizes[0]);
    } else if (h.num_dense != d->num_dense || h.num_sparse != d->num_sparse ||
               memcmp(d->table_sizes, h.table_sizes, h.num_sparse * sizeof h.table_sizes[0])) {
      return dpt_set_error(DPT_ERR_BAD_FORMAT,
                           "%s: its layout (%u dense, %u sparse, table sizes) differs from %s's",
                           d->paths[s], (unsigned)h.num_dense, (unsigned)h.num_sparse, d->paths[0]);
    }
    d->shard_count[s] = h.num_records;
    d->shard_crc[s] = h.payload_crc;
    d->total += h.num_records;
  }
  return DPT_OK;
}

/* Part `part` of `parts` of the records of every shard in shard order, when there are fewer
 * shards than parts: the first (total mod parts) parts hold one record more. */
static void record_range(uint64_t total, size_t part, size_t parts, uint64_t *lo, uint64_t *n) {
  const uint64_t q = total / parts, rem = total % parts;
  *lo = part * q + (part < rem ? part : rem);
  *n = q + (part < rem);
}

static dpt_status alloc_local(const char *pattern, dpt_interactions *d) {
  const size_t n1 = d->n ? d->n : 1;
  d->labels = malloc(n1);
  d->dense = malloc(n1 * (d->num_dense ? d->num_dense : 1) * sizeof *d->dense);
  d->sparse = malloc(n1 * d->num_sparse * sizeof *d->sparse);
  if (!d->labels || !d->dense || !d->sparse)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: %zu records for rank %d", pattern, d->n,
                         d->rank);
  return DPT_OK;
}

/* Loads this part's range of records (fewer shards than parts): the shards it touches are read
 * whole, for their CRCs, and only the range is kept. */
static dpt_status load_range(const char *pattern, dpt_interactions *d, size_t part, size_t parts) {
  uint64_t lo, n;
  record_range(d->total, part, parts, &lo, &n);
  if (n == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: %llu record%s for %zu ranks: every rank needs at least one record",
                         pattern, (unsigned long long)d->total, d->total == 1 ? "" : "s", parts);
  if (n > SIZE_MAX / 64)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: too many records", pattern);
  d->ranged = 1;
  d->n = (size_t)n;
  DPT_TRY(alloc_local(pattern, d));
  uint64_t start = 0;
  size_t at = 0;
  for (size_t s = 0; s < d->num_shards; start += d->shard_count[s], s++) {
    const uint64_t end = start + d->shard_count[s];
    if (end <= lo || start >= lo + n) continue;
    const uint64_t first = lo > start ? lo - start : 0;
    const uint64_t count = (end < lo + n ? end : lo + n) - start - first;
    if (d->local_shards++ == 0) d->first_shard = s;
    DPT_TRY(load_shard(d, s, at, first, count));
    at += (size_t)count;
  }
  return DPT_OK;
}

/* Loads shards part, part + parts, part + 2 parts, ... of those scanned; with fewer shards than
 * parts, a range of records instead (record_range). */
static dpt_status load_part(const char *pattern, dpt_interactions *d, size_t part, size_t parts) {
  d->part = part;
  d->parts = parts;
  if (d->num_shards < parts) return load_range(pattern, d, part, parts);
  for (size_t s = part; s < d->num_shards; s += parts) {
    d->local_shards++;
    if (d->shard_count[s] > SIZE_MAX / 64 - d->n)
      return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: too many records", pattern);
    d->n += (size_t)d->shard_count[s];
  }
  DPT_TRY(alloc_local(pattern, d));
  size_t at = 0;
  for (size_t s = part; s < d->num_shards; s += parts) {
    DPT_TRY(load_shard(d, s, at, 0, d->shard_count[s]));
    at += (size_t)d->shard_count[s];
  }
  return DPT_OK;
}

static dpt_status open_all(const char *pattern, int rank, int world, dpt_interactions *d) {
  DPT_TRY(scan_shards(pattern, d));
  d->rank_records = calloc((size_t)world, sizeof *d->rank_records);
  if (!d->rank_records) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: %d ranks", pattern, world);
  if (d->num_shards < (size_t)world) {
    uint64_t lo;
    for (int q = 0; q < world; q++)
      record_range(d->total, (size_t)q, (size_t)world, &lo, &d->rank_records[q]);
  } else {
    for (size_t s = 0; s < d->num_shards; s++)
      d->rank_records[s % (size_t)world] += d->shard_count[s];
  }
  return load_part(pattern, d, (size_t)rank, (size_t)world);
}

static dpt_interactions *reader_new(int rank, int world) {
  dpt_interactions *d = calloc(1, sizeof *d);
  if (d) {
    d->rank = rank;
    d->world = world;
  }
  return d;
}

dpt_status dpt_interactions_open(const char *pattern, int rank, int world, dpt_interactions **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "interactions: out is NULL");
  *out = NULL;
  if (!pattern || !*pattern)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "interactions: no shard pattern");
  if (world < 1 || rank < 0 || rank >= world)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "interactions: rank %d of %d ranks", rank, world);
  dpt_interactions *d = reader_new(rank, world);
  if (!d) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "interactions");
  const dpt_status st = open_all(pattern, rank, world, d);
  if (st != DPT_OK) {
    dpt_interactions_destroy(d);
    return st;
  }
  *out = d;
  return DPT_OK;
}

/* What one rank tells the others in dpt_interactions_open_node: first what it sees, then what
 * it loaded. status is a dpt_status (DPT_OK = 0). */
typedef struct node_seen {
  int32_t status, pad;
  uint64_t seen, layout, shards;
} node_seen;
typedef struct node_held {
  int32_t status, pad;
  uint64_t records, fingerprint;
} node_held;

/* The first rank whose status is not DPT_OK, or -1. */
static int first_failed(const void *v, size_t stride, int world) {
  for (int q = 0; q < world; ++q)
    if (*(const int32_t *)((const char *)v + (size_t)q * stride) != DPT_OK) return q;
  return -1;
}

/* This rank's own error, or one naming the rank that failed (every rank returns an error). */
static dpt_status peer_failed(dpt_status mine, int who, int32_t theirs, const char *pattern,
                              const char *what) {
  if (mine != DPT_OK) return mine;
  return dpt_set_error((dpt_status)theirs, "%s: rank %d could not %s its shards (see its message)",
                       pattern, who, what);
}

/* What every rank saw must agree before any loads: no rank failed to read its shards (st is this
 * rank's own status, also in seen) and every rank's layout is rank 0's. */
static dpt_status check_seen(const char *pattern, const node_seen *seen, int world, dpt_status st) {
  const int bad = first_failed(seen, sizeof *seen, world);
  if (bad >= 0) return peer_failed(st, bad, seen[bad].status, pattern, "read");
  for (int q = 1; q < world; ++q)
    if (seen[q].layout != seen[0].layout)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "%s: rank %d's shards have another layout (dense features, tables or "
                           "their sizes) than rank 0's",
                           pattern, q);
  return st;
}

/* Ranks that see the same shard files share them: each takes every parts-th of them from the
 * part-th, part being its place among those ranks. */
static void share_shards(const node_seen *seen, int world, int rank, size_t *part, size_t *parts) {
  *part = 0;
  *parts = 0;
  for (int q = 0; q < world; ++q)
    if (seen[q].seen == seen[rank].seen) {
      if (q < rank) ++*part;
      ++*parts;
    }
}

/* The fingerprint of the shards this rank loaded (when st says it did), chained from the layout's
 * over each shard's count and payload CRC: the data set's fingerprint chains these. */
static uint64_t part_fingerprint(const dpt_interactions *d, size_t part, size_t parts,
                                 dpt_status st) {
  uint64_t own = d->layout;
  const size_t step = d->ranged ? 1 : parts;
  for (size_t s = d->ranged ? 0 : part; st == DPT_OK && s < d->num_shards; s += step) {
    const uint64_t fw[3] = {own, d->shard_count[s], d->shard_crc[s]};
    own = dpt_fingerprint(fw, sizeof fw);
  }
  if (d->ranged) { /* the same files on every rank of the group: the range tells them apart */
    const uint64_t fw[3] = {own, part, parts};
    own = dpt_fingerprint(fw, sizeof fw);
  }
  return own;
}

/* The data set is what every rank holds, in rank order: its records per rank, their total, and
 * a fingerprint chained from the layout over each rank's. */
static void set_node_data_set(dpt_interactions *d, uint64_t layout, const node_held *held,
                              int world) {
  d->total = 0;
  d->fingerprint = layout;
  for (int q = 0; q < world; ++q) {
    d->rank_records[q] = held[q].records;
    d->total += held[q].records;
    const uint64_t fw[3] = {d->fingerprint, held[q].records, held[q].fingerprint};
    d->fingerprint = dpt_fingerprint(fw, sizeof fw);
  }
}

static dpt_status open_node(const char *pattern, dpt_comm *comm, dpt_interactions *d) {
  const int world = d->world, rank = d->rank;
  node_seen *seen = calloc((size_t)world, sizeof *seen);
  node_held *held = calloc((size_t)world, sizeof *held);
  d->rank_records = calloc((size_t)world, sizeof *d->rank_records);
  dpt_status st = seen && held && d->rank_records
                      ? DPT_OK
                      : dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: %d ranks", pattern, world);
  if (st == DPT_OK) st = scan_shards(pattern, d);
  /* Every rank joins both exchanges whatever happened locally, so none waits for a rank that
   * stopped; the verdicts come from the exchanged words, the same everywhere. */
  node_seen me = {(int32_t)st, 0, d->fingerprint, d->layout, d->num_shards};
  dpt_status cst = dpt_allgather_host(comm, &me, sizeof me, seen);
  if (cst != DPT_OK) goto done;
  if ((st = check_seen(pattern, seen, world, st)) != DPT_OK) goto done;
  size_t part = 0, parts = 0;
  share_shards(seen, world, rank, &part, &parts);
  st = load_part(pattern, d, part, parts);
  node_held hm = {(int32_t)st, 0, d->n, part_fingerprint(d, part, parts, st)};
  cst = dpt_allgather_host(comm, &hm, sizeof hm, held);
  if (cst != DPT_OK) goto done;
  const int bad = first_failed(held, sizeof *held, world);
  if (bad >= 0) {
    st = peer_failed(st, bad, held[bad].status, pattern, "load");
    goto done;
  }
  set_node_data_set(d, seen[0].layout, held, world);
done:
  free(seen);
  free(held);
  if (cst != DPT_OK) return cst;
  return st;
}

dpt_status dpt_interactions_open_node(const char *pattern, dpt_comm *comm, dpt_interactions **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "interactions: out is NULL");
  *out = NULL;
  if (!pattern || !*pattern)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "interactions: no shard pattern");
  if (!comm) return dpt_set_error(DPT_ERR_INVALID_ARG, "interactions: no communicator");
  dpt_interactions *d = reader_new(dpt_comm_rank(comm), dpt_comm_size(comm));
  if (!d) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "interactions");
  const dpt_status st = open_node(pattern, comm, d);
  if (st != DPT_OK) {
    dpt_interactions_destroy(d);
    return st;
  }
  *out = d;
  return DPT_OK;
}

uint32_t dpt_interactions_num_dense(const dpt_interactions *d) {
  return d ? d->num_dense : 0;
}

uint32_t dpt_interactions_num_sparse(const dpt_interactions *d) {
  return d ? d->num_sparse : 0;
}

const uint64_t *dpt_interactions_table_sizes(const dpt_interactions *d) {
  return d ? d->table_sizes : NULL;
}

size_t dpt_interactions_num_shards(const dpt_interactions *d) {
  return d ? d->num_shards : 0;
}

size_t dpt_interactions_local_shards(const dpt_interactions *d) {
  return d ? d->local_shards : 0;
}

const char *dpt_interactions_shard_path(const dpt_interactions *d, size_t s) {
  return d && s < d->num_shards ? d->paths[s] : NULL;
}

uint64_t dpt_interactions_shard_records(const dpt_interactions *d, size_t s) {
  return d && s < d->num_shards ? d->shard_count[s] : 0;
}

size_t dpt_interactions_local_shard(const dpt_interactions *d, size_t i) {
  if (!d) return 0;
  return d->ranged ? d->first_shard + i : d->part + i * d->parts;
}

uint64_t dpt_interactions_rank_records(const dpt_interactions *d, int rank) {
  return d && rank >= 0 && rank < d->world ? d->rank_records[rank] : 0;
}

int dpt_interactions_rank(const dpt_interactions *d) {
  return d ? d->rank : -1;
}

int dpt_interactions_world(const dpt_interactions *d) {
  return d ? d->world : 0;
}

uint64_t dpt_interactions_fingerprint(const dpt_interactions *d) {
  return d ? d->fingerprint : 0;
}

uint64_t dpt_interactions_total_records(const dpt_interactions *d) {
  return d ? d->total : 0;
}

size_t dpt_interactions_local_records(const dpt_interactions *d) {
  return d ? d->n : 0;
}

const float *dpt_interactions_dense(const dpt_interactions *d, size_t i) {
  return d && i < d->n ? d->dense + i * d->num_dense : NULL;
}

const int32_t *dpt_interactions_sparse(const dpt_interactions *d, size_t i) {
  return d && i < d->n ? d->sparse + i * d->num_sparse : NULL;
}

float dpt_interactions_label(const dpt_interactions *d, size_t i) {
  return d && i < d->n ? (float)d->labels[i] : 0.0f;
}

const uint8_t *dpt_interactions_labels(const dpt_interactions *d) {
  return d ? d->labels : NULL;
}

dpt_status dpt_interactions_gather(const dpt_interactions *d, const uint64_t *idx, size_t n,
                                   float *dense, int32_t *sparse, float *labels) {
  if (!d || (!idx && n)) return dpt_set_error(DPT_ERR_INVALID_ARG, "interactions gather: NULL");
  for (size_t k = 0; k < n; k++) {
    const uint64_t i = idx[k];
    if (i >= d->n)
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "interactions gather: index %llu (entry %zu) outside the %zu local "
                           "records",
                           (unsigned long long)i, k, d->n);
    if (dense)
      memcpy(dense + k * d->num_dense, d->dense + i * d->num_dense, d->num_dense * sizeof *dense);
    if (sparse)
      memcpy(sparse + k * d->num_sparse, d->sparse + i * d->num_sparse,
             d->num_sparse * sizeof *sparse);
    if (labels) labels[k] = (float)d->labels[i];
  }
  return DPT_OK;
}

/* ---- the fixed-length epoch ---------------------------------------------------------------- */

uint64_t dpt_interactions_steps(const dpt_interactions *d, size_t global_batch) {
  return d && global_batch ? d->total / global_batch : 0;
}

size_t dpt_interactions_local_batch(const dpt_interactions *d, size_t global_batch) {
  size_t start = 0, count = 0;
  if (!d || !global_batch || dpt_batch_split(global_batch, d->world, d->rank, &start, &count))
    return 0;
  return count;
}

dpt_status dpt_interactions_step_indices(dpt_interactions *d, uint64_t seed, uint64_t epoch,
                                         size_t global_batch, uint64_t step, uint64_t *idx) {
  if (!d || !idx) return dpt_set_error(DPT_ERR_INVALID_ARG, "interactions step: NULL argument");
  const uint64_t steps = dpt_interactions_steps(d, global_batch);
  if (step >= steps)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "interactions step: step %llu of an epoch of %llu steps (%llu records, "
                         "global batch %zu)",
                         (unsigned long long)step, (unsigned long long)steps,
                         (unsigned long long)d->total, global_batch);
  if (d->n == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "interactions step: rank %d holds no record",
                         d->rank);
  if (!d->order) {
    d->order = malloc(d->n * sizeof *d->order);
    if (!d->order) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "epoch order of %zu", d->n);
  }
  if (!d->order_valid || d->order_seed != seed || d->order_epoch != epoch) {
    dpt_rng rng;
    const uint64_t key[2] = {epoch, (uint64_t)d->rank};
    dpt_rng_seed_key(&rng, seed, RNG_DOMAIN_EPOCH, key, 2);
    for (size_t i = 0; i < d->n; i++)
      d->order[i] = i;
    for (size_t i = d->n; i > 1; i--) {
      const size_t j = (size_t)dpt_rng_below(&rng, i);
      const uint64_t t = d->order[i - 1];
      d->order[i - 1] = d->order[j];
      d->order[j] = t;
    }
    d->order_valid = 1;
    d->order_seed = seed;
    d->order_epoch = epoch;
  }
  const size_t b = dpt_interactions_local_batch(d, global_batch);
  const uint64_t base = (step * (uint64_t)b) % d->n;
  for (size_t j = 0; j < b; j++)
    idx[j] = d->order[(base + j) % d->n];
  return DPT_OK;
}
