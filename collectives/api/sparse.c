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

/* The merge of one table's payloads in recv (member r's at r * stride, per bytes each: max_k
 * ids, then max_k rows): the smallest id under the members' cursors; its rows summed in member
 * order (the first member's row copied, the others' added). hdr: every member's header of this
 * table (k at HDR_K, `step` words apart). */
static void merge_rows(dpt_sparse_exchange *x, int size, const unsigned char *recv, size_t stride,
                       size_t max_k, size_t dim, const uint64_t *hdr, size_t step) {
  const size_t row_bytes = dim * sizeof(float);
  size_t n = 0;
  for (int r = 0; r < size; ++r)
    x->cursor[r] = 0;
  for (;;) {
    int32_t next = -1;
    for (int r = 0; r < size; ++r) {
      const size_t c = x->cursor[r];
      if (c >= (size_t)hdr[(size_t)r * step + HDR_K]) continue;
      int32_t id;
      memcpy(&id, recv + (size_t)r * stride + c * sizeof(int32_t), sizeof(id));
      if (next < 0 || id < next) next = id;
    }
    if (next < 0) break;
    float *out = x->rows + n * dim;
    int first = 1;
    for (int r = 0; r < size; ++r) {
      const size_t c = x->cursor[r];
      if (c >= (size_t)hdr[(size_t)r * step + HDR_K]) continue;
      const unsigned char *base = recv + (size_t)r * stride;
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
}

dpt_status dpt_sparse_allreduce_tables(dpt_sparse_exchange *const *x, dpt_comm *comm, size_t n,
                                       const size_t *rows, const size_t *dim,
                                       const int32_t *const *ids, const float *const *grad,
                                       const size_t *k) {
  const char *fn = "dpt_sparse_allreduce";
  if (!x || !comm || (n && (!rows || !dim || !ids || !grad || !k)))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: NULL argument", fn);
  for (size_t t = 0; t < n; ++t)
    if (!x[t]) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: exchange %zu is NULL", fn, t);
  const int size = dpt_comm_size(comm);
  if (size < 1) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: bad communicator", fn);
  if (n == 0) return DPT_OK;
  for (size_t t = 0; t < n; ++t) {
    x[t]->count = 0;
    memset(&x[t]->stats, 0, sizeof(x[t]->stats));
  }
  /* x[0] holds the shared buffers: the headers, the payloads, the cursors. */
  dpt_sparse_exchange *h = x[0];
  const size_t words = n * HDR_WORDS;

  /* Round one: every table's (k, dim, rows, bad) from every member, so that every member takes
   * the same decisions (fail alike, the same padded sizes, dense or not). */
  dpt_status local = DPT_OK;
  uint64_t *mine = malloc(words * sizeof *mine);
  if (!mine || !grow((void **)&h->hdr, &h->hdr_cap, (size_t)size * words, sizeof(uint64_t))) {
    free(mine);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: %d x %zu headers", fn, size, n);
  }
  for (size_t t = 0; t < n; ++t) {
    const dpt_status st = check_ids(rows[t], dim[t], ids[t], grad[t], k[t]);
    if (st != DPT_OK && local == DPT_OK) local = st;
    const uint64_t hw[HDR_WORDS] = {k[t], dim[t], rows[t], st != DPT_OK};
    memcpy(mine + t * HDR_WORDS, hw, sizeof hw);
  }
  dpt_status st = dpt_allgather_host(comm, mine, words * sizeof *mine, h->hdr);
  free(mine);
  if (st != DPT_OK) return st;
  if (local != DPT_OK) return local;
  const size_t hdr_bytes = HDR_WORDS * sizeof(uint64_t);
  size_t *max_k = calloc(n, sizeof *max_k), *per = calloc(n, sizeof *per);
  if (!max_k || !per) {
    free(max_k);
    free(per);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: %zu tables", fn, n);
  }
  size_t stride = 0; /* one member's payload of every table that goes as rows */
  for (size_t t = 0; t < n && st == DPT_OK; ++t) {
    size_t total = 0;
    for (int r = 0; r < size; ++r) {
      const uint64_t *hr = h->hdr + (size_t)r * words + t * HDR_WORDS;
      if (hr[HDR_BAD]) {
        st = dpt_set_error(DPT_ERR_PEER, "%s: replica %d passed bad ids or sizes", fn, r);
        break;
      }
      if (hr[HDR_DIM] != dim[t] || hr[HDR_ROWS] != rows[t]) {
        st = dpt_set_error(DPT_ERR_MISMATCH,
                           "%s: a table of %zu rows of %zu here, of %llu rows of %llu on "
                           "replica %d",
                           fn, rows[t], dim[t], (unsigned long long)hr[HDR_ROWS],
                           (unsigned long long)hr[HDR_DIM], r);
        break;
      }
      if (hr[HDR_K] > max_k[t]) max_k[t] = (size_t)hr[HDR_K];
      total += (size_t)hr[HDR_K]; /* each k <= rows <= 2^31 */
    }
    if (st != DPT_OK) break;
    dpt_sparse_exchange *xt = x[t];
    const size_t row_bytes = dim[t] * sizeof(float);
    size_t union_max = total < rows[t] ? total : rows[t], rows_n = 0, all = 0, next = 0;
    if (!dpt_mul_ok(max_k[t], sizeof(int32_t) + row_bytes, &per[t]) ||
        !dpt_mul_ok(union_max, dim[t], &rows_n) || !dpt_mul_ok(per[t], (size_t)size, &all)) {
      st = dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %zu rows of %zu x %d overflow", fn, max_k[t],
                         dim[t], size);
      break;
    }
    xt->stats.max_count = max_k[t];
    xt->stats.sent_bytes = (size_t)(size - 1) * (hdr_bytes + per[t]);
    xt->stats.dense_bytes =
        (size_t)((2.0 * (size - 1) / size) * (double)rows[t] * (double)dim[t] * sizeof(float));
    if (max_k[t] > 0 &&
        (double)(per[t] * (size_t)(size - 1)) > xt->dense_above * (double)xt->stats.dense_bytes) {
      xt->stats.dense = 1;
      xt->stats.sent_bytes = (size_t)(size - 1) * hdr_bytes;
    }
    if (max_k[t] == 0 || xt->stats.dense) {
      per[t] = 0; /* nothing of this table in round two */
      continue;
    }
    if (!grow((void **)&xt->ids, &xt->ids_cap, union_max, sizeof(int32_t)) ||
        !grow((void **)&xt->rows, &xt->rows_cap, rows_n, sizeof(float)) ||
        !grow((void **)&xt->cursor, &xt->cursor_cap, (size_t)size, sizeof(size_t)) ||
        !dpt_add_ok(stride, per[t], &next)) {
      st = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: %zu rows of table %zu", fn, union_max, t);
      break;
    }
    stride = next;
  }
  /* Round two: every member's ids and rows of every such table, each padded to its max_k. */
  size_t recv_bytes = 0;
  if (st == DPT_OK && stride > 0) {
    if (!dpt_mul_ok(stride, (size_t)size, &recv_bytes) ||
        !grow((void **)&h->send, &h->send_cap, stride, 1) ||
        !grow((void **)&h->recv, &h->recv_cap, recv_bytes, 1))
      st = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: %zu bytes", fn, recv_bytes);
  }
  if (st == DPT_OK && stride > 0) {
    memset(h->send, 0, stride);
    size_t at = 0;
    for (size_t t = 0; t < n; ++t) {
      if (!per[t]) continue;
      if (k[t] > 0) {
        memcpy(h->send + at, ids[t], k[t] * sizeof(int32_t));
        memcpy(h->send + at + max_k[t] * sizeof(int32_t), grad[t], k[t] * dim[t] * sizeof(float));
      }
      at += per[t];
    }
    st = dpt_allgather_host(comm, h->send, stride, h->recv);
    at = 0;
    for (size_t t = 0; st == DPT_OK && t < n; ++t) {
      if (!per[t]) continue;
      merge_rows(x[t], size, h->recv + at, stride, max_k[t], dim[t], h->hdr + t * HDR_WORDS, words);
      at += per[t];
    }
  }
  free(max_k);
  free(per);
  return st;
}

dpt_status dpt_sparse_allreduce(dpt_sparse_exchange *x, dpt_comm *comm, size_t rows, size_t dim,
                                const int32_t *ids, const float *grad, size_t k) {
  return dpt_sparse_allreduce_tables(&x, comm, 1, &rows, &dim, &ids, &grad, &k);
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

/* p's settings are those of a step: a rate >= 0, decays in [0, 1), eps > 0, step >= 1. */
static dpt_status check_adam(const char *fn, const dpt_sparse_adam_params *p) {
  if (!p) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: params is NULL", fn);
  if (!(p->lr >= 0) || !(p->beta1 >= 0 && p->beta1 < 1) || !(p->beta2 >= 0 && p->beta2 < 1) ||
      !(p->eps > 0) || p->step < 1)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: lr %g, beta1 %g, beta2 %g, eps %g, step %lld: want lr >= 0, betas "
                         "in [0, 1), eps > 0, step >= 1",
                         fn, (double)p->lr, (double)p->beta1, (double)p->beta2, (double)p->eps,
                         (long long)p->step);
  return DPT_OK;
}

dpt_status dpt_sparse_adam_rows(float *table, float *m, float *v, size_t rows, size_t dim,
                                const int32_t *ids, const float *grad, size_t k,
                                const dpt_sparse_adam_params *p) {
  const char *fn = "dpt_sparse_adam_rows";
  dpt_status st = check_rows(fn, table, rows, dim, ids, grad, k);
  if (st == DPT_OK) st = check_adam(fn, p);
  if (st != DPT_OK) return st;
  if (!m || !v) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: m or v is NULL", fn);
  const double b1 = p->beta1, b2 = p->beta2;
  const double c1 = 1.0 - pow(b1, (double)p->step), c2 = 1.0 - pow(b2, (double)p->step);
  for (size_t i = 0; i < k; ++i) {
    float *w = table + (size_t)ids[i] * dim, *mi = m + (size_t)ids[i] * dim;
    const float *g = grad + i * dim;
    double sq = 0.0;
    for (size_t j = 0; j < dim; ++j)
      sq += (double)g[j] * g[j];
    float *vi = v + ids[i];
    *vi = (float)(b2 * (double)*vi + (1.0 - b2) * sq / (double)dim);
    const double scale = (double)p->lr / (sqrt((double)*vi / c2) + (double)p->eps);
    for (size_t j = 0; j < dim; ++j) {
      mi[j] = (float)(b1 * (double)mi[j] + (1.0 - b1) * (double)g[j]);
      w[j] = (float)((double)w[j] - scale * (double)mi[j] / c1);
    }
  }
  return DPT_OK;
}

/* The missed steps' factor T of dpt_sparse_adam_catchup_rows for steps s+1 .. s+n: the first
 * terms one by one, the rest as a geometric tail at the last one's bias correction. */
static double catchup_factor(double b1, double b2, int64_t s, int64_t n) {
  const double r = b1 / sqrt(b2);
  double p1 = pow(b1, (double)(s + 1)), p2 = pow(b2, (double)(s + 1)), ri = r, t = 0.0, u = 0.0;
  const int64_t exact = n < DPT_SPARSE_ADAM_EXACT_TERMS ? n : DPT_SPARSE_ADAM_EXACT_TERMS;
  for (int64_t i = 1; i <= exact; ++i) {
    u = sqrt(1.0 - p2) / (1.0 - p1);
    t += u * ri;
    p1 *= b1, p2 *= b2, ri *= r;
  }
  if (n > exact) /* ri = r^(exact + 1) */
    t +=
        u * ri * (r == 1.0 ? (double)(n - exact) : (1.0 - pow(r, (double)(n - exact))) / (1.0 - r));
  return t;
}

dpt_status dpt_sparse_adam_catchup_rows(float *table, float *m, float *v, float *last, size_t rows,
                                        size_t dim, const int32_t *ids, const float *grad, size_t k,
                                        const dpt_sparse_adam_params *p) {
  const char *fn = "dpt_sparse_adam_catchup_rows";
  dpt_status st = check_rows(fn, table, rows, dim, ids, grad, k);
  if (st == DPT_OK) st = check_adam(fn, p);
  if (st != DPT_OK) return st;
  if (!m || !v || !last) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: m, v or last is NULL", fn);
  if (p->step > (int64_t)1 << 24)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: step %lld is past 2^24, which last[] holds", fn,
                         (long long)p->step);
  const double b1 = p->beta1, b2 = p->beta2, lr = p->lr, eps = p->eps;
  const double c1 = 1.0 - pow(b1, (double)p->step), c2 = 1.0 - pow(b2, (double)p->step);
  for (size_t i = 0; i < k; ++i) {
    const size_t at = (size_t)ids[i] * dim;
    float *w = table + at, *mi = m + at, *vi = v + at;
    const float *g = grad + i * dim;
    const int64_t s = (int64_t)last[ids[i]], n = p->step - 1 - s;
    if (s > 0 && n > 0) { /* before its first step a row's moments are zero: nothing missed */
      const double t = lr * catchup_factor(b1, b2, s, n);
      const double d1 = pow(b1, (double)n), d2 = pow(b2, (double)n);
      for (size_t j = 0; j < dim; ++j) {
        w[j] = (float)((double)w[j] - t * (double)mi[j] / (sqrt((double)vi[j]) + eps));
        mi[j] = (float)(d1 * (double)mi[j]);
        vi[j] = (float)(d2 * (double)vi[j]);
      }
    }
    for (size_t j = 0; j < dim; ++j) {
      mi[j] = (float)(b1 * (double)mi[j] + (1.0 - b1) * (double)g[j]);
      vi[j] = (float)(b2 * (double)vi[j] + (1.0 - b2) * (double)g[j] * (double)g[j]);
      w[j] = (float)((double)w[j] - lr * ((double)mi[j] / c1) / (sqrt((double)vi[j] / c2) + eps));
    }
    last[ids[i]] = (float)p->step;
  }
  return DPT_OK;
}
