/* Closed-form collective cases shared by the threads and MPI suites (see comm_cases.h). */
#include "comm_cases.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 5 /* elements before and after the range in device buffers */
#define SENTINEL                                                                                   \
  1232.0f /* guard value (exact in binary16 and bfloat16): survives every collective */

int comm_case_counts(int ranks, size_t *out, int max) {
  const size_t counts[] = {0, 1, 2, 3, 5, 7, 64, 1000, 1003, 4099, 10007};
  int n = 0;
  for (size_t i = 0; i < sizeof counts / sizeof *counts && n < max; ++i)
    out[n++] = counts[i];
  if (n < max) out[n++] = (size_t)(ranks > 1 ? ranks - 1 : 1); /* fewer than ranks */
  if (n < max) out[n++] = (size_t)ranks * 3 + 1;               /* not divisible */
  return n;
}

void comm_case_tiny(dpt_comm_options *o) {
  o->piece_bytes = 64;
  o->block_bytes = 256;
}

float comm_case_input(int rank, size_t i) {
  return (float)((i * 7 + 3) % 13 + 1) * (float)((rank + 1) * (rank + 1));
}

float comm_case_expected(int ranks, size_t i) {
  const int w = ranks * (ranks + 1) * (2 * ranks + 1) / 6; /* sum of (r+1)^2 */
  return (float)((i * 7 + 3) % 13 + 1) * (float)w;
}

/* 1 when the list of rank runs at p ("3, 5-7, 9") holds m. */
static int runs_hold(const char *p, int m) {
  for (;;) {
    char *end;
    const long a = strtol(p, &end, 10);
    long b = a;
    if (end == p) return 0;
    if (*end == '-') b = strtol(end + 1, &end, 10);
    if (a <= m && m <= b) return 1;
    if (end[0] != ',' || end[1] != ' ') return 0;
    p = end + 2;
  }
}

int comm_case_names_rank(const char *msg, int m) {
  /* "rank 5 did not enter", "ranks 3-6, 9 did not enter ..." */
  const char *p = strstr(msg, "rank");
  const char *stop = strstr(msg, " did not enter");
  while (p && stop && p < stop) {
    const char *q = p + 4 + (p[4] == 's');
    if (*q == ' ' && runs_hold(q + 1, m)) return 1;
    p = strstr(p + 4, "rank");
  }
  /* "no header from 16 ranks (33-48)", "(no header from 16 ranks, 33-48: ..." */
  p = strstr(msg, "no header from ");
  if (p) p = strstr(p, " rank");
  if (p) p = strpbrk(p, "(,");
  return p && p[1] == ' ' ? runs_hold(p + 2, m) : p ? runs_hold(p + 1, m) : 0;
}

uint64_t comm_case_hash(const void *p, size_t bytes) {
  const unsigned char *b = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* bfloat16 holds integers exactly only up to 256: its inputs are weighted 1 or 2 by rank
 * parity, so every partial sum stays an integer <= 13 * 1.5 * ranks (exact up to 13 ranks). */
static float input_of(int rank, size_t i, dpt_comm_dtype dtype) {
  if (dtype != DPT_COMM_BF16) return comm_case_input(rank, i);
  return (float)((i * 7 + 3) % 13 + 1) * (float)(1 + rank % 2);
}

static float expected_of(int ranks, size_t i, dpt_comm_dtype dtype) {
  if (dtype != DPT_COMM_BF16) return comm_case_expected(ranks, i);
  return (float)((i * 7 + 3) % 13 + 1) * (float)(ranks + ranks / 2);
}

static void put(void *data, size_t i, float v, dpt_comm_dtype dtype) {
  if (dtype == DPT_COMM_F16)
    ((uint16_t *)data)[i] = dpt_f32_to_f16_scalar(v);
  else if (dtype == DPT_COMM_BF16)
    ((uint16_t *)data)[i] = dpt_f32_to_bf16_scalar(v);
  else
    ((float *)data)[i] = v;
}

static float get(const void *data, size_t i, dpt_comm_dtype dtype) {
  if (dtype == DPT_COMM_F16) return dpt_f16_to_f32_scalar(((const uint16_t *)data)[i]);
  if (dtype == DPT_COMM_BF16) return dpt_bf16_to_f32_scalar(((const uint16_t *)data)[i]);
  return ((const float *)data)[i];
}

static int fail(char *err, size_t errlen, const char *what, dpt_status st) {
  snprintf(err, errlen, "%s: %s: %s", what, dpt_status_name(st), dpt_last_error());
  return -1;
}

int comm_case_allreduce(dpt_comm *c, dpt_backend *be, size_t count, dpt_comm_dtype dtype,
                        uint64_t *hash, char *err, size_t errlen) {
  const int rank = dpt_comm_rank(c), size = dpt_comm_size(c);
  const size_t es = dtype == DPT_COMM_F32 ? 4 : 2;
  const size_t total = count + 2 * GUARD;
  unsigned char *host = malloc(total * es);
  if (!host) {
    snprintf(err, errlen, "no memory for %zu elements", total);
    return -1;
  }
  for (size_t i = 0; i < total; ++i) {
    int inside = i >= GUARD && i < GUARD + count;
    put(host, i, inside ? input_of(rank, i - GUARD, dtype) : SENTINEL, dtype);
  }
  dpt_status st;
  dpt_buffer *buf = NULL;
  int rc = 0;
  if (be) {
    st = dpt_buffer_alloc(be, total * es, &buf);
    if (st == DPT_OK) st = dpt_buffer_upload(buf, 0, host, total * es);
    if (st == DPT_OK) st = dpt_allreduce_buffer(c, buf, GUARD, count, dtype);
    if (st == DPT_OK) {
      memset(host, 0, total * es);
      st = dpt_buffer_download(buf, 0, host, total * es);
    }
  } else {
    st = dpt_allreduce_host(c, host + GUARD * es, count, dtype);
  }
  if (st != DPT_OK) {
    rc = fail(err, errlen, "all-reduce", st);
  } else {
    for (size_t i = 0; i < total && rc == 0; ++i) {
      int inside = i >= GUARD && i < GUARD + count;
      float want = inside ? expected_of(size, i - GUARD, dtype) : SENTINEL;
      float got = get(host, i, dtype);
      if (got != want) {
        snprintf(err, errlen, "rank %d: element %zd of %zu is %g, expected %g%s", rank,
                 (ptrdiff_t)i - GUARD, count, got, want, inside ? "" : " (guard)");
        rc = -1;
      }
    }
  }
  if (hash) *hash = comm_case_hash(host + GUARD * es, count * es);
  dpt_buffer_free(buf);
  free(host);
  return rc;
}

/* Checks that the shards of all ranks tile [0, count); *mine gets this rank's (malloc'ed). */
static int shard_cover(dpt_comm *c, size_t count, dpt_comm_dtype dtype, dpt_range **mine,
                       size_t *nmine, char *err, size_t errlen) {
  const int size = dpt_comm_size(c);
  unsigned char *seen = calloc(count ? count : 1, 1);
  int rc = seen ? 0 : -1;
  if (!seen) snprintf(err, errlen, "no memory");
  for (int r = 0; r < size && rc == 0; ++r) {
    size_t n = dpt_comm_shard(c, count, dtype, r, NULL, 0);
    dpt_range *rg = malloc((n ? n : 1) * sizeof *rg);
    if (!rg || dpt_comm_shard(c, count, dtype, r, rg, n) != n) {
      snprintf(err, errlen, "rank %d: shard listing failed", r);
      rc = -1;
    }
    for (size_t i = 0; i < n && rc == 0; ++i) {
      if (rg[i].count == 0 || rg[i].offset + rg[i].count > count ||
          (i > 0 && rg[i].offset < rg[i - 1].offset + rg[i - 1].count)) {
        snprintf(err, errlen, "rank %d: shard range %zu [%zu, +%zu) bad for count %zu", r, i,
                 rg[i].offset, rg[i].count, count);
        rc = -1;
      }
      for (size_t e = rg[i].offset; rc == 0 && e < rg[i].offset + rg[i].count; ++e)
        if (seen[e]++) {
          snprintf(err, errlen, "element %zu of %zu is in two shards", e, count);
          rc = -1;
        }
    }
    if (r == dpt_comm_rank(c) && rc == 0) {
      *mine = rg;
      *nmine = n;
    } else {
      free(rg);
    }
  }
  for (size_t e = 0; e < count && rc == 0; ++e)
    if (!seen[e]) {
      snprintf(err, errlen, "element %zu of %zu is in no shard", e, count);
      rc = -1;
    }
  free(seen);
  return rc;
}

int comm_case_sharded(dpt_comm *c, dpt_backend *be, size_t count, dpt_comm_dtype dtype,
                      uint64_t *hash, char *err, size_t errlen) {
  const int rank = dpt_comm_rank(c), size = dpt_comm_size(c);
  const size_t es = dtype == DPT_COMM_F32 ? 4 : 2, total = count + 2 * GUARD;
  dpt_range *shard = NULL;
  size_t nshard = 0;
  if (shard_cover(c, count, dtype, &shard, &nshard, err, errlen)) return -1;
  unsigned char *host = malloc(total * es);
  unsigned char *mine = calloc(total, 1); /* 1: element of this rank's shard */
  if (!host || !mine) {
    free(host);
    free(mine);
    free(shard);
    snprintf(err, errlen, "no memory for %zu elements", total);
    return -1;
  }
  for (size_t i = 0; i < nshard; ++i)
    memset(mine + GUARD + shard[i].offset, 1, shard[i].count);
  for (size_t i = 0; i < total; ++i) {
    int inside = i >= GUARD && i < GUARD + count;
    put(host, i, inside ? input_of(rank, i - GUARD, dtype) : SENTINEL, dtype);
  }
  dpt_buffer *buf = NULL;
  int rc = 0;
  for (int phase = 0; phase < 2 && rc == 0; ++phase) {
    dpt_status st = DPT_OK;
    if (be) {
      if (!buf) st = dpt_buffer_alloc(be, total * es, &buf);
      if (st == DPT_OK) st = dpt_buffer_upload(buf, 0, host, total * es);
      if (st == DPT_OK)
        st = phase ? dpt_allgather_shards_buffer(c, buf, GUARD, count, dtype)
                   : dpt_reduce_scatter_buffer(c, buf, GUARD, count, dtype);
      if (st == DPT_OK) st = dpt_buffer_download(buf, 0, host, total * es);
    } else {
      st = phase ? dpt_allgather_shards_host(c, host + GUARD * es, count, dtype)
                 : dpt_reduce_scatter_host(c, host + GUARD * es, count, dtype);
    }
    if (st != DPT_OK) {
      rc = fail(err, errlen, phase ? "all-gather of shards" : "reduce-scatter", st);
      break;
    }
    for (size_t i = 0; i < total && rc == 0; ++i) {
      int inside = i >= GUARD && i < GUARD + count;
      if (phase == 0 && inside && !mine[i]) continue; /* partial sums: unspecified */
      float want = inside ? expected_of(size, i - GUARD, dtype) : SENTINEL;
      float got = get(host, i, dtype);
      if (got != want) {
        snprintf(err, errlen, "rank %d: after the %s element %zd of %zu is %g, expected %g%s", rank,
                 phase ? "all-gather" : "reduce-scatter", (ptrdiff_t)i - GUARD, count, got, want,
                 inside ? "" : " (guard)");
        rc = -1;
      }
    }
    if (phase == 0) /* only the shards may feed the all-gather */
      for (size_t i = GUARD; i < GUARD + count; ++i)
        if (!mine[i]) put(host, i, -7.0f, dtype);
  }
  if (hash) *hash = comm_case_hash(host + GUARD * es, count * es);
  dpt_buffer_free(buf);
  free(host);
  free(mine);
  free(shard);
  return rc;
}

int comm_case_sharded_inexact(dpt_comm *c, size_t count, dpt_allreduce_algo algo, char *err,
                              size_t errlen) {
  const int rank = dpt_comm_rank(c);
  float *x = malloc((count ? count : 1) * sizeof *x), *y = malloc((count ? count : 1) * sizeof *y);
  dpt_comm_options keep;
  dpt_comm_get_options(c, &keep);
  int rc = 0;
  if (!x || !y) {
    snprintf(err, errlen, "no memory");
    rc = -1;
  }
  for (size_t i = 0; i < count && rc == 0; ++i)
    x[i] = y[i] = (float)sin((double)(i + 1) * 0.41 + rank * 0.7) * (float)(1 + rank) * 1e-3f +
                  (float)(i % 5) * 1e2f;
  dpt_status st = DPT_OK;
  if (rc == 0) st = dpt_comm_set_algo(c, algo);
  if (rc == 0 && st == DPT_OK) st = dpt_allreduce_host(c, x, count, DPT_COMM_F32);
  if (rc == 0 && st == DPT_OK) st = dpt_reduce_scatter_host(c, y, count, DPT_COMM_F32);
  if (rc == 0 && st == DPT_OK) st = dpt_allgather_shards_host(c, y, count, DPT_COMM_F32);
  if (rc == 0 && st != DPT_OK) rc = fail(err, errlen, "ring / sharded", st);
  if (rc == 0 && count > 0 && memcmp(x, y, count * sizeof *x) != 0) {
    snprintf(err, errlen,
             "rank %d: reduce-scatter + all-gather differ from the ring all-reduce "
             "(count %zu)",
             rank, count);
    rc = -1;
  }
  dpt_comm_set_options(c, &keep);
  free(x);
  free(y);
  return rc;
}

float comm_case_inexact_input(int rank, size_t i) {
  return (float)sin((double)(i + 1) * 0.37 + rank * 1.3) * (float)(1 + rank) * 1e-3f +
         (float)(i % 3) * 1e3f;
}

int comm_case_inexact(dpt_comm *c, size_t count, uint64_t *hash, char *err, size_t errlen) {
  const int rank = dpt_comm_rank(c);
  float *x = malloc((count ? count : 1) * sizeof *x);
  if (!x) {
    snprintf(err, errlen, "no memory");
    return -1;
  }
  for (size_t i = 0; i < count; ++i)
    x[i] = comm_case_inexact_input(rank, i);
  dpt_status st = dpt_allreduce_host(c, x, count, DPT_COMM_F32);
  int rc = st == DPT_OK ? 0 : fail(err, errlen, "all-reduce", st);
  *hash = comm_case_hash(x, count * sizeof *x);
  free(x);
  return rc;
}

static float inexact_bf16_input(int rank, size_t i) {
  return dpt_bf16_to_f32_scalar(dpt_f32_to_bf16_scalar(
      (float)sin((double)(i + 1) * 0.37 + rank * 1.3) * (float)(1 + rank) + (float)(i % 3) * 4.0f));
}

int comm_case_inexact_bf16(dpt_comm *c, size_t count, uint64_t *hash, char *err, size_t errlen) {
  const int rank = dpt_comm_rank(c), size = dpt_comm_size(c);
  dpt_comm_options o;
  dpt_status got_opt = dpt_comm_get_options(c, &o);
  if (got_opt != DPT_OK) return fail(err, errlen, "dpt_comm_get_options", got_opt);
  uint16_t *x = malloc((count ? count : 1) * sizeof *x);
  if (!x) {
    snprintf(err, errlen, "no memory");
    return -1;
  }
  for (size_t i = 0; i < count; ++i)
    x[i] = dpt_f32_to_bf16_scalar(inexact_bf16_input(rank, i));
  /* A forced `direct` runs `rd` beyond the inline limit (64 KiB up to 17 ranks). */
  const int in_order = o.algo == DPT_ALLREDUCE_DIRECT && size <= 17 && count * 2 <= 16384;
  dpt_status st = dpt_allreduce_host(c, x, count, DPT_COMM_BF16);
  int rc = st == DPT_OK ? 0 : fail(err, errlen, "all-reduce", st);
  for (size_t i = 0; i < count && rc == 0; ++i) {
    /* Each addition rounds by at most half an ulp (2^-8 relative) of a partial sum, which is
     * at most the sum of magnitudes; `direct` adds in rank order, so its bits are known. */
    double exact = 0, mag = 0;
    uint16_t seq = dpt_f32_to_bf16_scalar(inexact_bf16_input(0, i));
    for (int r = 0; r < size; ++r) {
      const float v = inexact_bf16_input(r, i);
      exact += v;
      mag += fabs(v);
      if (r > 0) seq = dpt_f32_to_bf16_scalar(dpt_bf16_to_f32_scalar(seq) + v);
    }
    const double got = dpt_bf16_to_f32_scalar(x[i]);
    if (fabs(got - exact) > (double)size * 0x1p-8 * mag || (in_order && x[i] != seq)) {
      snprintf(err, errlen, "rank %d: bfloat16 element %zu of %zu is %.9g, exact sum %.9g%s", rank,
               i, count, got, exact, in_order ? " (direct: rounded in rank order)" : "");
      rc = -1;
    }
  }
  *hash = comm_case_hash(x, count * sizeof *x);
  free(x);
  return rc;
}

static unsigned char bcast_byte(int root, size_t i) {
  return (unsigned char)((i * 31 + (size_t)root * 7 + 1) & 0xff);
}

int comm_case_broadcast(dpt_comm *c, dpt_backend *be, size_t bytes, int root, char *err,
                        size_t errlen) {
  const int rank = dpt_comm_rank(c);
  const size_t total = bytes + 2 * GUARD;
  unsigned char *host = malloc(total);
  if (!host) {
    snprintf(err, errlen, "no memory");
    return -1;
  }
  for (size_t i = 0; i < total; ++i) {
    int inside = i >= GUARD && i < GUARD + bytes;
    host[i] = inside ? (rank == root ? bcast_byte(root, i - GUARD) : 0xee) : 0x5a;
  }
  dpt_status st;
  dpt_buffer *buf = NULL;
  if (be) {
    st = dpt_buffer_alloc(be, total, &buf);
    if (st == DPT_OK) st = dpt_buffer_upload(buf, 0, host, total);
    if (st == DPT_OK) st = dpt_broadcast_buffer(c, buf, GUARD, bytes, root);
    if (st == DPT_OK) {
      memset(host, 0, total);
      st = dpt_buffer_download(buf, 0, host, total);
    }
  } else {
    st = dpt_broadcast_host(c, host + GUARD, bytes, root);
  }
  int rc = st == DPT_OK ? 0 : fail(err, errlen, "broadcast", st);
  for (size_t i = 0; i < total && rc == 0; ++i) {
    int inside = i >= GUARD && i < GUARD + bytes;
    unsigned char want = inside ? bcast_byte(root, i - GUARD) : 0x5a;
    if (host[i] != want) {
      snprintf(err, errlen, "rank %d: byte %zd of %zu is %u, expected %u", rank,
               (ptrdiff_t)i - GUARD, bytes, host[i], want);
      rc = -1;
    }
  }
  dpt_buffer_free(buf);
  free(host);
  return rc;
}

int comm_case_allgather(dpt_comm *c, size_t bytes, char *err, size_t errlen) {
  const int rank = dpt_comm_rank(c), size = dpt_comm_size(c);
  unsigned char *send = malloc(bytes + 1), *recv = malloc(bytes * (size_t)size + 1);
  if (!send || !recv) {
    free(send);
    free(recv);
    snprintf(err, errlen, "no memory");
    return -1;
  }
  for (size_t i = 0; i < bytes; ++i)
    send[i] = bcast_byte(rank, i);
  memset(recv, 0xee, bytes * (size_t)size);
  dpt_status st = dpt_allgather_host(c, send, bytes, recv);
  int rc = st == DPT_OK ? 0 : fail(err, errlen, "allgather", st);
  for (int r = 0; r < size && rc == 0; ++r) {
    for (size_t i = 0; i < bytes && rc == 0; ++i) {
      if (recv[(size_t)r * bytes + i] != bcast_byte(r, i)) {
        snprintf(err, errlen, "rank %d: byte %zu of rank %d's block is wrong", rank, i, r);
        rc = -1;
      }
    }
  }
  free(send);
  free(recv);
  return rc;
}

int comm_case_backends(dpt_backend_kind *out, int max) {
  int n = 0;
  for (int k = 0; k < DPT_BACKEND_KIND_COUNT && n < max; ++k) {
    int count = 0;
    if (!dpt_backend_compiled((dpt_backend_kind)k)) continue;
    if (dpt_device_count((dpt_backend_kind)k, &count) != DPT_OK || count < 1) continue;
    out[n++] = (dpt_backend_kind)k;
  }
  return n;
}
