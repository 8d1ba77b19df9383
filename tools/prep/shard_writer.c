/* The interaction shard writer: records appended to a temporary file, the header (count, CRCs)
 * written on close and the file renamed into place (the format: dptrain/interactions.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc.h"
#include "base/error.h"
#include "tools/prep/shards.h"

/* ---- little-endian fields ------------------------------------------------------------------ */

static void put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static void put_f32(unsigned char *p, float f) {
  uint32_t v;
  memcpy(&v, &f, 4);
  put_u32(p, v);
}

static size_t header_bytes(uint32_t num_sparse) {
  return DPT_SHARD_HEADER_FIXED + 8 * (size_t)num_sparse;
}

static dpt_status check_layout(const char *what, uint32_t num_dense, uint32_t num_sparse,
                               const uint64_t *table_sizes) {
  if (num_sparse < 1 || num_sparse > DPT_SHARD_MAX_SPARSE)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: num_sparse %u outside 1..%d", what,
                         (unsigned)num_sparse, DPT_SHARD_MAX_SPARSE);
  if (num_dense > DPT_SHARD_MAX_DENSE)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: num_dense %u above %d", what,
                         (unsigned)num_dense, DPT_SHARD_MAX_DENSE);
  for (uint32_t j = 0; j < num_sparse; j++)
    if (table_sizes[j] < 1 || table_sizes[j] > DPT_SHARD_MAX_TABLE)
      return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: table %u has size %llu (1..2^31)", what,
                           (unsigned)j, (unsigned long long)table_sizes[j]);
  return DPT_OK;
}

/* The header's bytes (header_bytes(num_sparse) of them) for the given fields. */
static void encode_header(unsigned char *h, uint32_t num_dense, uint32_t num_sparse,
                          const uint64_t *table_sizes, uint64_t num_records, uint32_t payload_crc) {
  memset(h, 0, DPT_SHARD_HEADER_FIXED);
  memcpy(h, DPT_SHARD_MAGIC, 8); /* with its terminating zero */
  put_u32(h + 8, DPT_SHARD_VERSION);
  put_u32(h + 12, num_dense);
  put_u32(h + 16, num_sparse);
  put_u64(h + 24, num_records);
  put_u32(h + 32, payload_crc);
  for (uint32_t j = 0; j < num_sparse; j++)
    put_u64(h + DPT_SHARD_HEADER_FIXED + 8 * (size_t)j, table_sizes[j]);
  uint32_t crc = dpt_crc32(dpt_crc32_start(), h, 36);
  crc = dpt_crc32(crc, h + DPT_SHARD_HEADER_FIXED, 8 * (size_t)num_sparse);
  put_u32(h + 36, crc);
}

/* ---- the writer ---------------------------------------------------------------------------- */

struct dpt_shard_writer {
  FILE *f;
  char *path, *tmp;
  uint32_t num_dense, num_sparse;
  uint64_t *table_sizes;
  uint64_t count;
  uint32_t crc;
  unsigned char *rec;
};

static void writer_free(dpt_shard_writer *w) {
  free(w->path);
  free(w->tmp);
  free(w->table_sizes);
  free(w->rec);
  free(w);
}

void dpt_shard_writer_abort(dpt_shard_writer *w) {
  if (!w) return;
  if (w->f) fclose(w->f);
  remove(w->tmp);
  writer_free(w);
}

dpt_status dpt_shard_writer_open(const char *path, uint32_t num_dense, uint32_t num_sparse,
                                 const uint64_t *table_sizes, dpt_shard_writer **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "shard writer: out is NULL");
  *out = NULL;
  if (!path || (!table_sizes && num_sparse))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "shard writer: NULL path or table sizes");
  DPT_TRY(check_layout(path, num_dense, num_sparse, table_sizes));
  dpt_shard_writer *w = calloc(1, sizeof *w);
  if (!w) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: shard writer", path);
  const size_t plen = strlen(path);
  w->path = malloc(plen + 1);
  w->tmp = malloc(plen + 5);
  w->table_sizes = malloc(num_sparse * sizeof *w->table_sizes);
  w->rec = malloc(DPT_SHARD_RECORD_BYTES(num_dense, num_sparse));
  if (!w->path || !w->tmp || !w->table_sizes || !w->rec) {
    writer_free(w);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: shard writer", path);
  }
  memcpy(w->path, path, plen + 1);
  memcpy(w->tmp, path, plen);
  memcpy(w->tmp + plen, ".tmp", 5);
  memcpy(w->table_sizes, table_sizes, num_sparse * sizeof *w->table_sizes);
  w->num_dense = num_dense;
  w->num_sparse = num_sparse;
  w->crc = dpt_crc32_start();
  w->f = fopen(w->tmp, "wb");
  if (!w->f) {
    const int e = errno;
    writer_free(w);
    return dpt_set_error(DPT_ERR_IO, "%s.tmp: cannot create: %s", path, strerror(e));
  }
  /* A placeholder header (count 0), rewritten on close. */
  unsigned char h[DPT_SHARD_HEADER_FIXED + 8 * DPT_SHARD_MAX_SPARSE];
  encode_header(h, num_dense, num_sparse, table_sizes, 0, 0);
  if (fwrite(h, 1, header_bytes(num_sparse), w->f) != header_bytes(num_sparse)) {
    const int e = errno;
    dpt_shard_writer_abort(w);
    return dpt_set_error(DPT_ERR_IO, "%s.tmp: write failed: %s", path, strerror(e));
  }
  *out = w;
  return DPT_OK;
}

dpt_status dpt_shard_writer_add(dpt_shard_writer *w, float label, const float *dense,
                                const int32_t *sparse) {
  if (!w || (!dense && w->num_dense) || !sparse)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "shard writer: NULL argument");
  if (label != 0.0f && label != 1.0f)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: record %llu: label %g is not 0 or 1", w->path,
                         (unsigned long long)w->count, (double)label);
  for (uint32_t j = 0; j < w->num_sparse; j++)
    if (sparse[j] < 0 || (uint64_t)sparse[j] >= w->table_sizes[j])
      return dpt_set_error(
          DPT_ERR_INVALID_ARG,
          "%s: record %llu: sparse feature %u has id %ld outside its table of %llu", w->path,
          (unsigned long long)w->count, (unsigned)j, (long)sparse[j],
          (unsigned long long)w->table_sizes[j]);
  unsigned char *p = w->rec;
  *p++ = (unsigned char)(label == 1.0f);
  for (uint32_t j = 0; j < w->num_dense; j++, p += 4)
    put_f32(p, dense[j]);
  for (uint32_t j = 0; j < w->num_sparse; j++, p += 4)
    put_u32(p, (uint32_t)sparse[j]);
  const size_t n = (size_t)(p - w->rec);
  if (fwrite(w->rec, 1, n, w->f) != n)
    return dpt_set_error(DPT_ERR_IO, "%s: write failed: %s", w->tmp, strerror(errno));
  w->crc = dpt_crc32(w->crc, w->rec, n);
  w->count++;
  return DPT_OK;
}

uint64_t dpt_shard_writer_count(const dpt_shard_writer *w) {
  return w ? w->count : 0;
}

dpt_status dpt_shard_writer_close(dpt_shard_writer *w) {
  if (!w) return DPT_OK;
  unsigned char h[DPT_SHARD_HEADER_FIXED + 8 * DPT_SHARD_MAX_SPARSE];
  encode_header(h, w->num_dense, w->num_sparse, w->table_sizes, w->count, w->crc);
  const size_t hb = header_bytes(w->num_sparse);
  int ok = fseek(w->f, 0, SEEK_SET) == 0 && fwrite(h, 1, hb, w->f) == hb;
  const int e1 = errno;
  ok = (fclose(w->f) == 0) && ok;
  w->f = NULL;
  if (!ok) {
    dpt_status st = dpt_set_error(DPT_ERR_IO, "%s: write failed: %s", w->tmp, strerror(e1));
    dpt_shard_writer_abort(w);
    return st;
  }
  if (rename(w->tmp, w->path) != 0) {
    dpt_status st =
        dpt_set_error(DPT_ERR_IO, "%s: cannot rename into place: %s", w->path, strerror(errno));
    dpt_shard_writer_abort(w);
    return st;
  }
  writer_free(w);
  return DPT_OK;
}
