/* dptrain: sparse gradients of embedding tables, exchanged and applied row by row.
 *
 * A step of a recommendation model touches few rows of each embedding table; its gradient is
 * zero elsewhere. Instead of all-reducing the whole [rows, dim] gradient, each replica sends
 * the rows it touched, as (row id, row values), and every replica sums the union:
 *
 *   dpt_sparse_allreduce   this replica's touched ids (sorted, unique) and their gradient rows
 *                          in, on every replica the sorted union of the ids and the summed
 *                          rows out; two dpt_allgather_host calls: (count, dim) from every
 *                          replica, then every replica's ids and rows padded to the largest
 *                          count. The sum of a row runs in replica order (replica 0's row,
 *                          then + replica 1's, ...), from the same gathered bytes everywhere:
 *                          the result is bit-identical on every replica and equals the dense
 *                          all-reduce's rows within float rounding (the dense ring may add in
 *                          another order); a row nobody touched is absent (its sum is zero).
 *   dpt_sparse_sgd_rows,   the update of only the given rows of a table in host memory:
 *   dpt_sparse_adagrad_rows,  SGD (w -= lr g), DLRM's row-wise Adagrad (one accumulator
 *   dpt_sparse_adam_rows   per row: acc += mean over the row of g^2; w -= lr g / (sqrt(acc) +
 *                          eps)) or row-wise Adam (a first moment per element, a second
 *                          moment per row), the rows the exchange produced.
 *   dpt_sparse_adam_catchup_rows  Adam per element, a row's missed steps made up when it is
 *                          next touched: the dense exchange's Adam, lazily.
 *
 * Ids are int32 (as the records hold them), in [0, rows). Bytes: each replica sends
 * 32 + max_k (4 + 4 dim) bytes to each other replica (max_k: the largest count of any
 * replica this step), against 2 (R - 1) / R x rows x dim x 4 for the ring all-reduce of the
 * dense gradient; dpt_sparse_exchange_stats reports both for the last call.
 */
#ifndef DPTRAIN_SPARSE_H
#define DPTRAIN_SPARSE_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/comm.h"
#include "dptrain/export.h"
#include "dptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The working memory and the result of the exchange, reused from call to call (it grows to the
 * largest exchange seen). One per table and member, used by one thread at a time. */
typedef struct dpt_sparse_exchange dpt_sparse_exchange;

typedef struct dpt_sparse_stats {
  size_t max_count;   /* the largest count of touched rows of any replica, last call */
  size_t union_count; /* rows in the union (the result) */
  size_t sent_bytes;  /* bytes this replica sent to the others, last call: (R - 1) x (32 +
                         max_count (4 + 4 dim)) */
  size_t dense_bytes; /* what the ring all-reduce of the dense [rows, dim] float gradient
                         sends per replica: 2 (R - 1) / R x rows x dim x 4 (rounded down) */
  int dense;          /* 1: the last call chose the dense exchange (see
                         dpt_sparse_exchange_set_dense_above); sent_bytes is then the header's */
} dpt_sparse_stats;

DPT_API dpt_status dpt_sparse_exchange_create(dpt_sparse_exchange **out);
DPT_API void dpt_sparse_exchange_destroy(dpt_sparse_exchange *x);

/* The choice between the sparse and the dense exchange, per call: once the headers are
 * gathered, if the rows would send more than `fraction` x dense_bytes (the ring all-reduce of
 * the whole table), the call ends there on every member alike (the counts decide it, the same
 * everywhere): dpt_sparse_exchange_result gives no rows and stats.dense is 1, and the caller
 * all-reduces the dense gradient instead. fraction >= 0; the default, INFINITY, never chooses
 * the dense one. Every member must set the same. */
/* The trainer's default fraction (dpt_train_config.sparse_dense_above), measured in
 * docs/performance.md, "Recommendation data". */
#define DPT_SPARSE_DENSE_ABOVE      0.05
#define DPT_SPARSE_DENSE_ABOVE_TEXT "0.05"

DPT_API dpt_status dpt_sparse_exchange_set_dense_above(dpt_sparse_exchange *x, double fraction);

/* Collective over `comm` (every member calls it, with the same rows and dim): ids[k] sorted
 * strictly increasing in [0, rows), grad[k * dim] their gradient rows (k may be 0, then ids
 * and grad may be NULL). Afterwards dpt_sparse_exchange_result gives, on every member, the
 * union of every member's ids (sorted) and for each the sum of the members' rows. A member
 * whose rows or dim differ from another's: DPT_ERR_MISMATCH on every member; bad ids or
 * sizes: DPT_ERR_INVALID_ARG on that member, DPT_ERR_PEER naming it on the others (the
 * members agree on it in the first round, nothing hangs). */
DPT_API dpt_status dpt_sparse_allreduce(dpt_sparse_exchange *x, dpt_comm *comm, size_t rows,
                                        size_t dim, const int32_t *ids, const float *grad,
                                        size_t k);

/* dpt_sparse_allreduce for n tables at once, in two dpt_allgather_host calls in all (every
 * table's header, then every table's padded ids and rows in one payload) instead of two per
 * table: x[t] (distinct exchanges) receives table t's result and stats, bit for bit what
 * dpt_sparse_allreduce gives for it alone (each table's choice of the dense exchange included).
 * Table t: rows[t], dim[t], this member's k[t] ids[t] and grad[t]. A member with bad ids in any
 * table makes the whole call fail, as for one table. */
DPT_API dpt_status dpt_sparse_allreduce_tables(dpt_sparse_exchange *const *x, dpt_comm *comm,
                                               size_t n, const size_t *rows, const size_t *dim,
                                               const int32_t *const *ids, const float *const *grad,
                                               const size_t *k);

/* The last call's result: returns the number of rows n; *ids receives [n] sorted ids, *grad
 * [n * dim] summed rows (both owned by x, valid until the next call; NULL when n is 0). */
DPT_API size_t dpt_sparse_exchange_result(const dpt_sparse_exchange *x, const int32_t **ids,
                                          const float **grad);
DPT_API void dpt_sparse_exchange_stats(const dpt_sparse_exchange *x, dpt_sparse_stats *out);

/* table[rows * dim] (host): table[id] -= lr * grad[i] for ids[i], i < k (ids unique, in
 * [0, rows); any order). */
DPT_API dpt_status dpt_sparse_sgd_rows(float *table, size_t rows, size_t dim, const int32_t *ids,
                                       const float *grad, size_t k, float lr);
/* Row-wise Adagrad (DLRM / FBGEMM's EXACT_ROWWISE_ADAGRAD), acc[rows] one accumulator per row
 * (start at 0): for ids[i], acc[id] += sum_j grad[i][j]^2 / dim, then table[id][j] -= lr *
 * grad[i][j] / (sqrt(acc[id]) + eps). Computed in double, stored as float. */
DPT_API dpt_status dpt_sparse_adagrad_rows(float *table, float *acc, size_t rows, size_t dim,
                                           const int32_t *ids, const float *grad, size_t k,
                                           float lr, float eps);

/* dpt_sparse_adam_rows' settings: the rate, the moments' decays (each in [0, 1)), eps, and
 * step, the 1-based count of steps taken, one for every row (FBGEMM's `iter`). */
typedef struct dpt_sparse_adam_params {
  float lr, beta1, beta2, eps;
  int64_t step;
} dpt_sparse_adam_params;

/* Row-wise Adam (FBGEMM's PARTIAL_ROWWISE_ADAM): m[rows * dim] one first moment per element,
 * v[rows] one second moment per row (both start at 0). For ids[i]:
 *   v[id]    = beta2 v[id] + (1 - beta2) sum_j grad[i][j]^2 / dim
 *   m[id][j] = beta1 m[id][j] + (1 - beta1) grad[i][j]
 *   table[id][j] -= lr (m[id][j] / (1 - beta1^step)) / (sqrt(v[id] / (1 - beta2^step)) + eps)
 * Rows not named keep their values and moments. Computed in double, stored as float. */
DPT_API dpt_status dpt_sparse_adam_rows(float *table, float *m, float *v, size_t rows, size_t dim,
                                        const int32_t *ids, const float *grad, size_t k,
                                        const dpt_sparse_adam_params *p);

/* Adam per element on the rows given, with the steps a row sat out made up when it is next given:
 * the dense Adam's update of a whole table whose other rows have a zero gradient, applied lazily.
 * m[rows * dim] and v[rows * dim] the moments, last[rows] the step each row was brought up to
 * (all 0 at the start; floats, exact to 2^24 steps, beyond which a step is refused). For
 * ids[i] (s = last[id], n = step - 1 - s > 0 steps missed): the moments decay by beta1^n and
 * beta2^n, and the missed steps' updates, at p's rate, in closed form:
 *   table[id][j] -= lr T m[id][j] / (sqrt(v[id][j]) + eps)   (the moments of step s)
 *   T = sum_{q=s+1}^{s+n} sqrt(1 - beta2^q) / (1 - beta1^q) (beta1 / sqrt(beta2))^(q-s)
 * (T's terms past DPT_SPARSE_ADAM_EXACT_TERMS take the bias correction of the last exact one;
 * with eps small against sqrt(v) the sum equals the steps one by one); then Adam's step on
 * grad[i] as dpt_sparse_adam_rows takes it per element, and last[id] = step. A row never given
 * again keeps its pending updates. Computed in double, stored as float. */
#define DPT_SPARSE_ADAM_EXACT_TERMS 64
DPT_API dpt_status dpt_sparse_adam_catchup_rows(float *table, float *m, float *v, float *last,
                                                size_t rows, size_t dim, const int32_t *ids,
                                                const float *grad, size_t k,
                                                const dpt_sparse_adam_params *p);

#ifdef __cplusplus
}
#endif

#endif
