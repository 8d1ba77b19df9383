/* Sparse gradients of embedding tables: the (id, row) exchange and the row-wise updates
 * (include/dptrain/sparse.h). */
#include "dptrain/sparse.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/size.h"

struct dpt_sparse_exchange {
  unsigned char *send, *recv; /* the padded payloads: this member's, every member's */
  size_t send_cap, recv_cap;  /* bytes */
  int32_t *ids;               /* the result: [count] */
  float *rows;                /* [count * dim] */
  size_t ids_cap, rows_cap;   /* elements */
  size_t *cursor;             /* merge position per member */
  size_t cursor_cap;
  uint64_t *hdr; /* every member's header */
  size_t hdr_cap;
  size_t count;
  dpt_sparse_stats stats;
  double dense_above; /* the dense exchange above this fraction of its bytes */
};

/* The header every member gathers first. */
enum { HDR_K, HDR_DIM, HDR_ROWS, HDR_BAD, HDR_WORDS };

dpt_status dpt_sparse_exchange_create(dpt_sparse_exchange **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_sparse_exchange_create: out is NULL");
  *out = calloc(1, sizeof(**out));
  if (!*out) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_sparse_exchange_create");
  (*out)->dense_above = INFINITY;
  return DPT_OK;
}

dpt_status dpt_sparse_exchange_set_dense_above(dpt_sparse_exchange *x, double fraction) {
  if (!x || !(fraction >= 0))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_sparse_exchange_set_dense_above: %s",
                         x ? "the fraction must be >= 0" : "x is NULL");
  x->dense_above = fraction;
  return DPT_OK;
}

void dpt_sparse_exchange_destroy(dpt_sparse_exchange *x) {
  if (!x) return;
  free(x->send);
  free(x->recv);
  free(x->ids);
  free(x->rows);
  free(x->cursor);
  free(x->hdr);
  free(x);
}

/* Grows *p to hold `n` elements of `size` bytes (cap in elements). */
static int grow(void **p, size_t *cap, size_t n, size_t size) {
  if (n <= *cap) return 1;
  size_t bytes;
  if (!dpt_mul_ok(n, size, &bytes)) return 0;
  void *q = realloc(*p, bytes);
  if (!q) return 0;
  *p = q;
  *cap = n;
  return 1;
}

/* Local checks; the message is set, the caller tells the others through the header. */
static dpt_status check_ids(size_t rows, size_t dim, const int32_t *ids, const float *grad,
                            size_t k) {
  const char *fn = "dpt_sparse_allreduce";
  if (dim == 0 || rows == 0 || rows > (size_t)INT32_MAX + 1)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: a table of %zu rows of %zu", fn, rows, dim);
  if (k > 0 && (!ids || !grad))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: ids or grad is NULL", fn);
  if (k > rows) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %zu ids for %zu rows", fn, k, rows);
  for (size_t i = 0; i < k; ++i) {
    if (ids[i] < 0 || (size_t)ids[i] >= rows)
      return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: id %zu is %d, outside [0, %zu)", fn, i,
                           (int)ids[i], rows);
    if (i > 0 && ids[i] <= ids[i - 1])
      return dpt_set_error(DPT_ERR_INVALID_ARG,
                           "%s: ids must be sorted and unique (id %zu is %d after %d)", fn, i,
                           (int)ids[i], (int)ids[i - 1]);
  }
  size_t bytes;
  if (!dpt_mul_ok(k, dim, &bytes) || !dpt_mul_ok(bytes, sizeof(float), &bytes))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %zu rows of %zu overflow", fn, k, dim);
  return DPT_OK;
}

dpt_status dpt_sparse_allreduce(dpt_sparse_exchange *x, dpt_comm *comm, size_t rows, size_t dim,
                                const int32_t *ids, const float *grad, size_t k) {
  const char *fn = "dpt_sparse_allreduce";
  if (!x || !comm) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: x or comm is NULL", fn);
  const int size = dpt_comm_size(comm);
  if (size < 1) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: bad communicator", fn);
  x->count = 0;
  memset(&x->stats, 0, sizeof(x->stats));

  /* Round one: (k, dim, rows, bad) of every member, so that every member takes the same
   * decision (fail alike, or the same padded size). */
  dpt_status local = check_ids(rows, dim, ids, grad, k);
  uint64_t hdr[HDR_WORDS] = {k, dim, rows, local != DPT_OK};
  if (!grow((void **)&x->hdr, &x->hdr_cap, (size_t)size * HDR_WORDS, sizeof(uint64_t)))
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: %d headers", fn, size);
  dpt_status st = dpt_allgather_host(comm, hdr, sizeof(hdr), x->hdr);
  if (st != DPT_OK) return st;
  if (local != DPT_OK) return local;
  size_t max_k = 0, total = 0;
  for (int r = 0; r < size; ++r) {
    const uint64_t *h = x->hdr + (size_t)r * HDR_WORDS;
    if (h[HDR_BAD])
      return dpt_set_error(DPT_ERR_PEER, "%s: replica %d passed bad ids or sizes", fn, r);
    if (h[HDR_DIM] != dim || h[HDR_ROWS] != rows)
      return dpt_set_error(DPT_ERR_MISMATCH,
                           "%s: a table of %zu rows of %zu here, of %llu rows of %llu on "
                           "replica %d",
                           fn, rows, dim, (unsigned long long)h[HDR_ROWS],
                           (unsigned long long)h[HDR_DIM], r);
    if (h[HDR_K] > max_k) max_k = (size_t)h[HDR_K];
    total += (size_t)h[HDR_K]; /* each k <= rows <= 2^31 */
  }

  /* Round two: every member's ids and rows, padded to max_k. */
  const size_t row_bytes = dim * sizeof(float);
  size_t per = 0, union_max = total < rows ? total : rows, rows_n = 0, recv_bytes = 0;
  if (!dpt_mul_ok(max_k, sizeof(int32_t) + row_bytes, &per) ||
      !dpt_mul_ok(union_max, dim, &rows_n) || !dpt_mul_ok(per, (size_t)size, &recv_bytes))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %zu rows of %zu x %d overflow", fn, max_k, dim,
                         size);
  x->stats.max_count = max_k;
  x->stats.sent_bytes = (size_t)(size - 1) * (sizeof(hdr) + per);
  x->stats.dense_bytes =
      (size_t)((2.0 * (size - 1) / size) * (double)rows * (double)dim * sizeof(float));
  if (max_k == 0) return DPT_OK;
  if ((double)(per * (size_t)(size - 1)) > x->dense_above * (double)x->stats.dense_bytes) {
    x->stats.dense = 1;
    x->stats.sent_bytes = (size_t)(size - 1) * sizeof(hdr);
    return DPT_OK;
  }
  if (!grow((void **)&x->send, &x->send_cap, per, 1) ||
      !grow((void **)&x->recv, &x->recv_cap, recv_bytes, 1) ||
      !grow((void **)&x->ids, &x->ids_cap, union_max, sizeof(int32_t)) ||
      !grow((void **)&x->rows, &x->rows_cap, rows_n, sizeof(float)) ||
      !grow((void **)&x->cursor, &x->cursor_cap, (size_t)size, sizeof(size_t)))
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: %zu bytes", fn, recv_bytes);
  memset(x->send, 0, per);
  if (k > 0) {
    memcpy(x->send, ids, k * sizeof(int32_t));
    memcpy(x->send + max_k * sizeof(int32_t), grad, k * row_bytes);
  }
  st = dpt_allgather_host(comm, x->send, per, x->recv);
  if (st != DPT_OK) return st;

  /* The merge: the smallest id under the members' cursors; its rows summed in member order
   * (the first member's row copied, the others' added). */
  size_t n = 0;
  for (int r = 0; r < size; ++r)
    x->cursor[r] = 0;
  for (;;) {
    int32_t next = -1;
    for (int r = 0; r < size; ++r) {
      const size_t c = x->cursor[r];
      if (c >= (size_t)x->hdr[(size_t)r * HDR_WORDS + HDR_K]) continue;
      int32_t id;
      memcpy(&id, x->recv + (size_t)r * per + c * sizeof(int32_t), sizeof(id));
      if (next < 0 || id < next) next = id;
    }
    if (next < 0) break;
    float *out = x->rows + n * dim;
    int first = 1;
    for (int r = 0; r < size; ++r) {
      const size_t c = x->cursor[r];
      if (c >= (size_t)x->hdr[(size_t)r * HDR_WORDS + HDR_K]) continue;
      const unsigned char *base = x->recv + (size_t)r * per;
      int32_t id;
      memcpy(&id, base + c * sizeof(int32_t), sizeof(id));
      if (id != next) continue;
      const unsigned char *src = base + max_k * sizeof(int32_t) + c * row_bytes;
      if (first) {
        memcpy(out, src, row_bytes);
        first = 0;
      } else {
        for (size_t j = 0; j < dim; ++j) {
          float v;
          memcpy(&v, src + j * sizeof(float), sizeof(v));
          out[j] += v;
        }
      }
      x->cursor[r] = c + 1;
    }
    x->ids[n++] = next;
  }
  x->count = n;
  x->stats.union_count = n;
  return DPT_OK;
}

size_t dpt_sparse_exchange_result(const dpt_sparse_exchange *x, const int32_t **ids,
                                  const float **grad) {
  const size_t n = x ? x->count : 0;
  if (ids) *ids = n ? x->ids : NULL;
  if (grad) *grad = n ? x->rows : NULL;
  return n;
}

void dpt_sparse_exchange_stats(const dpt_sparse_exchange *x, dpt_sparse_stats *out) {
  if (!out) return;
  if (x)
    *out = x->stats;
  else
    memset(out, 0, sizeof(*out));
}

/* ---- row-wise updates ------------------------------------------------------------------ */

static dpt_status check_rows(const char *fn, const float *table, size_t rows, size_t dim,
                             const int32_t *ids, const float *grad, size_t k) {
  if (!table || dim == 0 || (k > 0 && (!ids || !grad)))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: NULL table, ids or grad, or dim 0", fn);
  for (size_t i = 0; i < k; ++i)
    if (ids[i] < 0 || (size_t)ids[i] >= rows)
      return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: id %zu is %d, outside [0, %zu)", fn, i,
                           (int)ids[i], rows);
  return DPT_OK;
}

dpt_status dpt_sparse_sgd_rows(float *table, size_t rows, size_t dim, const int32_t *ids,
                               const float *grad, size_t k, float lr) {
  dpt_status st = check_rows("dpt_sparse_sgd_rows", table, rows, dim, ids, grad, k);
  if (st != DPT_OK) return st;
  for (size_t i = 0; i < k; ++i) {
    float *w = table + (size_t)ids[i] * dim;
    const float *g = grad + i * dim;
    for (size_t j = 0; j < dim; ++j)
      w[j] -= lr * g[j];
  }
  return DPT_OK;
}

dpt_status dpt_sparse_adagrad_rows(float *table, float *acc, size_t rows, size_t dim,
                                   const int32_t *ids, const float *grad, size_t k, float lr,
                                   float eps) {
  const char *fn = "dpt_sparse_adagrad_rows";
  dpt_status st = check_rows(fn, table, rows, dim, ids, grad, k);
  if (st != DPT_OK) return st;
  if (!acc) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: acc is NULL", fn);
  for (size_t i = 0; i < k; ++i) {
    float *w = table + (size_t)ids[i] * dim;
    const float *g = grad + i * dim;
    double sq = 0.0;
    for (size_t j = 0; j < dim; ++j)
      sq += (double)g[j] * g[j];
    float *a = acc + ids[i];
    *a = (float)((double)*a + sq / (double)dim);
    const double scale = (double)lr / (sqrt((double)*a) + (double)eps);
    for (size_t j = 0; j < dim; ++j)
      w[j] = (float)((double)w[j] - scale * g[j]);
  }
  return DPT_OK;
}
