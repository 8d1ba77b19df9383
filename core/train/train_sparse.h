/* Internal: the trainer's sparse table gradients, cfg->exchange.sparse_tables (train_sparse.c). */
#ifndef DPTRAIN_CORE_TRAIN_TRAIN_SPARSE_H
#define DPTRAIN_CORE_TRAIN_TRAIN_SPARSE_H

#include "core/train/replica.h"

/* The tables (embedding_bag weights) and the dense ranges around them; a no-op without
 * sparse_tables. */
dpt_status dpt_train_sparse_setup(replica *r, replica_state *s);
void dpt_train_sparse_free(replica_state *s);
/* The flat buffer's ranges around the tables, increasing (the dense optimizer's). */
const dpt_range *dpt_train_sparse_dense_ranges(const replica_state *s, size_t *n);
/* Before backward: zeroes the gradient of every table whose range may hold more than zeros
 * (the model adds the tables' gradients into ranges kept zero, see
 * dpt_model_set_sparse_table_grads; the exchange clears the rows it read). */
dpt_status dpt_train_sparse_prepare(replica_state *s);
/* The step's exchange: the dense ranges all-reduced, each table's touched rows (from the
 * slice's records in hx) summed over the replicas. Every replica joins; a local failure is
 * kept (joining with no rows); a collective's failure is returned. */
dpt_status dpt_train_sparse_reduce(replica *r, replica_state *s);
/* Non-finite values in the reduced gradient: the dense ranges, and each table's summed rows
 * (or its range, when the step chose the dense exchange). */
dpt_status dpt_train_sparse_count_nonfinite(replica_state *s, int64_t *out);
/* The update: the optimizer on the dense ranges, the table optimizer (SGD or row-wise Adagrad
 * at the optimizer's rate) on the tables' exchanged rows. */
dpt_status dpt_train_sparse_step(replica_state *s);
/* A block of the table optimizer's state: kind "row_sum" (row-wise Adagrad's accumulators),
 * "row_m" or "row_v" (row-wise Adam's moments), of the table whose weight tensor is `table`,
 * [rows, cols] floats (cols 1: one per row). Saved as "optimizer.<kind>.<table>". */
typedef struct dpt_train_row_state {
  const char *kind, *table;
  size_t rows, cols;
} dpt_train_row_state;
/* For checkpoints: how many blocks the tables hold, and the i-th one's floats and description
 * (NULL past the end). Alike on every replica. */
size_t dpt_train_sparse_num_state(const replica_state *s);
float *dpt_train_sparse_state(const replica_state *s, size_t i, dpt_train_row_state *out);

/* The exchange kind of sparse tables (exchange.h). */
extern const train_exchange dpt_train_exchange_sparse;

#endif
