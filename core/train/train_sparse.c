/* The trainer's sparse table gradients (dpt_train_config.sparse_tables): the embedding_bag
 * tables' gradients travel as (row id, row) through dpt_sparse_allreduce_tables (one exchange
 * for every table), the rest of the
 * flat gradient through the all-reduce range by range; the tables' touched rows take the table
 * optimizer at the tables' rate on every replica, the rest the configured optimizer. The model adds
 * the tables' gradients into ranges kept zero (dpt_model_set_sparse_table_grads): a step reads and
 * clears the rows it touched, so no step costs a whole table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend_impl.h"
#include "base/clock.h"
#include "base/error.h"
#include "core/train/exchange.h"
#include "core/train/optimizer.h"
#include "core/train/replica.h"
#include "core/train/run_terms.h"
#include "core/train/train_sparse.h"
#include "dptrain/sparse.h"

struct train_sparse {
  size_t num_tables;
  struct sparse_table {
    size_t offset, rows, dim; /* the weight in the flat parameter (and gradient) buffer */
    size_t slot, bag;         /* the record's id slots */
    dpt_sparse_exchange *x;
    int dense;    /* this step: the dense all-reduce was chosen */
    int dirty;    /* the gradient range may hold more than zeros: cleared whole before backward */
    float *acc;   /* row-wise Adagrad: one accumulator per row [rows], alike on every replica */
    float *m, *v; /* Adam: first moments [rows * dim], second [rows] (row-wise) or [rows * dim] */
    float *last;  /* Adam with catch-up: the step each row was brought up to [rows]; alike */
    char name[DPT_LAYER_NAME_MAX + 16]; /* the weight tensor's */
  } * tables;
  double lr0, base_lr; /* the tables' rate (dpt_train_table_lr) and optim.lr, at the start */
  dpt_range *dense;    /* the flat buffer minus the tables, increasing */
  size_t num_dense;
  int32_t *ids;   /* this step's touched ids, table t's from t * ids_cap [num_tables * ids_cap] */
  uint64_t *seen; /* a bit per row of the largest table, zero between calls (touched_ids) */
  float *rows;    /* their gradient rows (table after table), then a table's updated rows */
  size_t ids_cap, rows_cap;
  /* One exchange for every table [num_tables]: each table's count, first row in `rows`, and
   * the arguments of dpt_sparse_allreduce_tables. */
  size_t *k, *row_at, *rows_of, *dim_of;
  const int32_t **ids_of;
  const float **grad_of;
  dpt_sparse_exchange **x_of;
};

static int cmp_range(const void *a, const void *b) {
  const dpt_range *x = a, *y = b;
  return (x->offset > y->offset) - (x->offset < y->offset);
}

static int cmp_i32(const void *a, const void *b) {
  const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

void dpt_train_sparse_free(replica_state *s) {
  train_sparse *p = s->sparse;
  if (!p) return;
  for (size_t t = 0; t < p->num_tables; ++t) {
    dpt_sparse_exchange_destroy(p->tables[t].x);
    free(p->tables[t].acc);
    free(p->tables[t].m);
    free(p->tables[t].v);
    free(p->tables[t].last);
  }
  free(p->tables);
  free(p->dense);
  free(p->ids);
  free(p->seen);
  free(p->rows);
  free(p->k);
  free(p->row_at);
  free(p->rows_of);
  free(p->dim_of);
  free(p->ids_of);
  free(p->grad_of);
  free(p->x_of);
  free(p);
  s->sparse = NULL;
}

/* The weight tensor of embedding_bag layer i, named as the model names it: "<name>.weight", or
 * "<i>.weight" for an unnamed layer. want (want_size bytes) gets the name. */
static dpt_status find_table_tensor(const dpt_model *model, const dpt_layer_spec *l, size_t i,
                                    char *want, size_t want_size, dpt_tensor_info *ti) {
  if (l->name[0])
    snprintf(want, want_size, "%s.weight", l->name);
  else
    snprintf(want, want_size, "%zu.weight", i);
  const size_t nt = dpt_model_num_tensors(model);
  for (size_t k = 0; k < nt; ++k) {
    DPT_TRY(dpt_model_tensor(model, k, ti));
    if (strcmp(ti->name, want) == 0) return DPT_OK;
  }
  return dpt_set_error(DPT_ERR_INVALID_ARG,
                       "sparse tables: no tensor %s for the embedding_bag layer", want);
}

/* Appends the table of embedding_bag layer l, whose weight tensor ti is named want: its range of
 * the flat buffer, its id slots, its table optimizer's state and its exchange. */
static dpt_status add_table(train_sparse *p, const dpt_train_config *cfg, const dpt_layer_spec *l,
                            const dpt_tensor_info *ti, const char *want) {
  struct sparse_table *t = &p->tables[p->num_tables++];
  t->offset = ti->offset;
  t->rows = l->vocab;
  t->dim = l->size;
  t->slot = l->offset;
  t->bag = l->bag ? l->bag : 1;
  if (ti->count != t->rows * t->dim)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "sparse tables: %s holds %zu floats, not %zu x %zu",
                         want, ti->count, t->rows, t->dim);
  snprintf(t->name, sizeof t->name, "%s", want);
  const int opt = cfg->exchange.table_optimizer;
  const size_t n = t->rows ? t->rows : 1;
  const size_t nv = opt == DPT_TABLE_ADAM ? n * t->dim : n;
  const int adam = opt == DPT_TABLE_ROWWISE_ADAM || opt == DPT_TABLE_ADAM;
  if ((opt == DPT_TABLE_ROWWISE_ADAGRAD && !(t->acc = calloc(n, sizeof *t->acc))) ||
      (adam &&
       (!(t->m = calloc(n * t->dim, sizeof *t->m)) || !(t->v = calloc(nv, sizeof *t->v)))) ||
      (opt == DPT_TABLE_ADAM && !(t->last = calloc(n, sizeof *t->last))))
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "sparse tables: out of host memory");
  DPT_TRY(dpt_sparse_exchange_create(&t->x));
  DPT_TRY(dpt_sparse_exchange_set_dense_above(t->x, cfg->exchange.sparse_dense_above > 0
                                                        ? cfg->exchange.sparse_dense_above
                                                        : DPT_SPARSE_DENSE_ABOVE));
  return DPT_OK;
}

/* The dense ranges: the complement of the tables in the np-float flat buffer, in increasing
 * order (the all-reduce walks them range by range). */
static dpt_status set_dense_ranges(train_sparse *p, size_t np) {
  dpt_range *tab = malloc(p->num_tables * sizeof *tab);
  p->dense = malloc((p->num_tables + 1) * sizeof *p->dense);
  if (!tab || !p->dense) {
    free(tab);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "sparse tables: out of host memory");
  }
  for (size_t t = 0; t < p->num_tables; ++t)
    tab[t] = (dpt_range){p->tables[t].offset, p->tables[t].rows * p->tables[t].dim};
  qsort(tab, p->num_tables, sizeof *tab, cmp_range);
  size_t at = 0;
  for (size_t t = 0; t < p->num_tables; ++t) {
    if (tab[t].offset > at) p->dense[p->num_dense++] = (dpt_range){at, tab[t].offset - at};
    at = tab[t].offset + tab[t].count;
  }
  if (np > at) p->dense[p->num_dense++] = (dpt_range){at, np - at};
  free(tab);
  return DPT_OK;
}

/* The per-step scratch, sized once for a full slice: touched ids (max_bag per sample), the
 * seen-row bits of the largest table (max_rows), and the per-table exchange arguments. */
static dpt_status alloc_scratch(train_sparse *p, size_t max_slice, size_t max_bag,
                                size_t max_rows) {
  p->ids_cap = max_slice * max_bag;
  const size_t ntab = p->num_tables ? p->num_tables : 1;
  p->ids = malloc(ntab * (p->ids_cap ? p->ids_cap : 1) * sizeof *p->ids);
  p->seen = calloc((max_rows + 63) / 64, sizeof *p->seen);
  p->k = calloc(ntab, sizeof *p->k);
  p->row_at = calloc(ntab, sizeof *p->row_at);
  p->rows_of = calloc(ntab, sizeof *p->rows_of);
  p->dim_of = calloc(ntab, sizeof *p->dim_of);
  p->ids_of = calloc(ntab, sizeof *p->ids_of);
  p->grad_of = calloc(ntab, sizeof *p->grad_of);
  p->x_of = calloc(ntab, sizeof *p->x_of);
  if (!p->ids || !p->seen || !p->k || !p->row_at || !p->rows_of || !p->dim_of || !p->ids_of ||
      !p->grad_of || !p->x_of)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "sparse tables: out of host memory");
  for (size_t t = 0; t < p->num_tables; ++t) {
    p->rows_of[t] = p->tables[t].rows;
    p->dim_of[t] = p->tables[t].dim;
    p->x_of[t] = p->tables[t].x;
  }
  return DPT_OK;
}

/* The tables: every embedding_bag layer's weight tensor "<name>.weight". */
dpt_status dpt_train_sparse_setup(replica *r, replica_state *s) {
  const dpt_train_config *cfg = r->cfg;
  if (!cfg->exchange.sparse_tables) return DPT_OK;
  const char *fn = "sparse tables";
  train_sparse *p = calloc(1, sizeof *p);
  if (!p) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  s->sparse = p;
  p->lr0 = dpt_train_table_lr(cfg);
  p->base_lr = cfg->optim.lr;
  const dpt_model_spec *spec = &cfg->model;
  p->tables = calloc(spec->num_layers ? spec->num_layers : 1, sizeof *p->tables);
  if (!p->tables) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  size_t max_bag = 1, max_rows = 1;
  for (size_t i = 0; i < spec->num_layers; ++i) {
    const dpt_layer_spec *l = &spec->layers[i];
    if (l->kind != DPT_LAYER_EMBEDDING_BAG) continue;
    char want[DPT_LAYER_NAME_MAX + 16];
    dpt_tensor_info ti = {0};
    DPT_TRY(find_table_tensor(s->model, l, i, want, sizeof want, &ti));
    DPT_TRY(add_table(p, cfg, l, &ti, want));
    const struct sparse_table *t = &p->tables[p->num_tables - 1];
    if (t->bag > max_bag) max_bag = t->bag;
    if (t->rows > max_rows) max_rows = t->rows;
  }
  if (p->num_tables == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "sparse_tables: the model has no embedding_bag table (--model dlrm)");
  DPT_TRY(set_dense_ranges(p, dpt_model_num_params(s->model)));
  DPT_TRY(dpt_model_set_sparse_table_grads(s->model, 1));
  return alloc_scratch(p, s->max_slice, max_bag, max_rows);
}

/* Grows the row scratch to n floats. */
static dpt_status rows_room(train_sparse *p, size_t n) {
  if (n <= p->rows_cap) return DPT_OK;
  float *q = realloc(p->rows, n * sizeof *q);
  if (!q) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "sparse tables: out of host memory");
  p->rows = q;
  p->rows_cap = n;
  return DPT_OK;
}

/* The index of the lowest set bit of x (x != 0). */
static unsigned lowest_bit(uint64_t x) {
#if defined(__GNUC__) || defined(__clang__)
  return (unsigned)__builtin_ctzll(x);
#else
  unsigned i = 0;
  while (!(x & 1))
    x >>= 1, ++i;
  return i;
#endif
}

/* The sorted, unique ids of table t in this step's slice (s->slice records in s->hx): each id
 * once through the bit per row, then the bits read in order where the table is small next to
 * the ids (cleared as they are read), else the unique ids sorted (their bits cleared). */
static size_t touched_ids(const replica_state *s, const struct sparse_table *t, int32_t *out) {
  uint64_t *seen = s->sparse->seen;
  const size_t input = dpt_model_input_size(s->model);
  size_t n = 0;
  for (size_t i = 0; i < s->slice; ++i)
    for (size_t b = 0; b < t->bag; ++b) {
      int32_t id;
      memcpy(&id, s->hx + i * input + t->slot + b, sizeof id);
      if (id < 0 || (size_t)id >= t->rows) continue;
      const uint64_t bit = (uint64_t)1 << (id & 63);
      if (seen[id >> 6] & bit) continue;
      seen[id >> 6] |= bit;
      out[n++] = id;
    }
  const size_t words = (t->rows + 63) / 64;
  if (words <= 4 * n) {
    n = 0;
    for (size_t w = 0; w < words; ++w)
      for (uint64_t bits = seen[w]; bits; bits &= bits - 1)
        out[n++] = (int32_t)(w * 64 + lowest_bit(bits));
    memset(seen, 0, words * sizeof *seen);
    return n;
  }
  for (size_t i = 0; i < n; ++i)
    seen[out[i] >> 6] = 0;
  qsort(out, n, sizeof *out, cmp_i32);
  return n;
}

/* The length of the run of consecutive ids starting at ids[i] (sorted, unique). */
static size_t id_run(const int32_t *ids, size_t i, size_t k) {
  size_t n = 1;
  while (i + n < k && ids[i + n] == ids[i] + (int32_t)n)
    ++n;
  return n;
}

/* Table t's rows of buf (its parameters or gradients) in host memory without a copy, or NULL
 * where the backend's memory is not host-addressable: then rows move by download / upload. */
static dpt_status map_table(dpt_buffer *buf, const struct sparse_table *t, float **table) {
  void *p = NULL;
  DPT_TRY(
      dpt_buffer_map_host(buf, t->offset * sizeof(float), t->rows * t->dim * sizeof(float), &p));
  *table = p;
  return DPT_OK;
}

/* This replica's touched rows of table t: ids into `ids`, their gradient rows into p->rows
 * from float `at` on (copied from the mapped table, else one download per run of ids). */
static dpt_status local_rows(replica_state *s, const struct sparse_table *t, int32_t *ids,
                             size_t at, size_t *k) {
  train_sparse *p = s->sparse;
  *k = touched_ids(s, t, ids);
  DPT_TRY(rows_room(p, at + *k * t->dim));
  dpt_buffer *g = dpt_model_grads(s->model);
  float *table = NULL;
  DPT_TRY(map_table(g, t, &table));
  for (size_t i = 0, n; i < *k; i += n) {
    n = id_run(ids, i, *k);
    float *to = p->rows + at + i * t->dim;
    if (table)
      memcpy(to, table + (size_t)ids[i] * t->dim, n * t->dim * sizeof(float));
    else
      DPT_TRY(dpt_buffer_download(g, (t->offset + (size_t)ids[i] * t->dim) * sizeof(float), to,
                                  n * t->dim * sizeof(float)));
  }
  return dpt_buffer_unmap_host(g, table);
}

/* Zeroes the gradient rows ids[0..k) of table t, one fill per run of consecutive rows. */
static dpt_status clear_rows(replica_state *s, const struct sparse_table *t, const int32_t *ids,
                             size_t k) {
  dpt_buffer *g = dpt_model_grads(s->model);
  float *table = NULL;
  DPT_TRY(map_table(g, t, &table));
  for (size_t i = 0, n; i < k; i += n) {
    n = id_run(ids, i, k);
    if (table)
      memset(table + (size_t)ids[i] * t->dim, 0, n * t->dim * sizeof(float));
    else
      DPT_TRY(dpt_buffer_fill_f32(g, t->offset + (size_t)ids[i] * t->dim, n * t->dim, 0.0f));
  }
  return dpt_buffer_unmap_host(g, table);
}

const dpt_range *dpt_train_sparse_dense_ranges(const replica_state *s, size_t *n) {
  *n = s->sparse->num_dense;
  return s->sparse->dense;
}

dpt_status dpt_train_sparse_prepare(replica_state *s) {
  train_sparse *p = s->sparse;
  for (size_t i = 0; i < p->num_tables; ++i) {
    struct sparse_table *t = &p->tables[i];
    if (!t->dirty) continue;
    DPT_TRY(dpt_buffer_fill_f32(dpt_model_grads(s->model), t->offset, t->rows * t->dim, 0.0f));
    t->dirty = 0;
  }
  return DPT_OK;
}

dpt_status dpt_train_sparse_reduce(replica *r, replica_state *s) {
  train_sparse *p = s->sparse;
  dpt_buffer *grads = dpt_model_grads(s->model);
  for (size_t i = 0; i < p->num_dense; ++i) {
    dpt_status st =
        dpt_allreduce_buffer(r->comm, grads, p->dense[i].offset, p->dense[i].count, DPT_COMM_F32);
    if (st != DPT_OK) return st;
  }
  /* Every table's touched rows, table after table, then one exchange for all of them. */
  size_t at = 0;
  for (size_t i = 0; i < p->num_tables; ++i) {
    struct sparse_table *t = &p->tables[i];
    int32_t *ids = p->ids + i * p->ids_cap;
    p->k[i] = 0;
    p->row_at[i] = at;
    /* A replica that failed joins with nothing (the step's exchange then stops everyone). */
    if (s->pending == DPT_OK) dpt_train_keep_failure(s, local_rows(s, t, ids, at, &p->k[i]));
    if (s->pending != DPT_OK) p->k[i] = 0;
    p->ids_of[i] = ids;
    at += p->k[i] * t->dim;
    t->dirty = 1; /* until the rows read are cleared below */
  }
  for (size_t i = 0; i < p->num_tables; ++i) /* p->rows is final now */
    p->grad_of[i] = p->rows + p->row_at[i];
  const dpt_status st = dpt_sparse_allreduce_tables(p->x_of, r->comm, p->num_tables, p->rows_of,
                                                    p->dim_of, p->ids_of, p->grad_of, p->k);
  if (dpt_train_out_of_step(st) || st == DPT_ERR_COMM) return st;
  dpt_train_keep_failure(s, st);
  for (size_t i = 0; i < p->num_tables; ++i) {
    struct sparse_table *t = &p->tables[i];
    dpt_sparse_stats ss;
    dpt_sparse_exchange_stats(t->x, &ss);
    t->dense = st == DPT_OK && ss.dense;
    if (st == DPT_OK && s->pending == DPT_OK && !t->dense) {
      dpt_train_keep_failure(s, clear_rows(s, t, p->ids_of[i], p->k[i]));
      t->dirty = s->pending != DPT_OK;
    }
    if (t->dense) { /* the same choice on every replica */
      const dpt_status dst =
          dpt_allreduce_buffer(r->comm, grads, t->offset, t->rows * t->dim, DPT_COMM_F32);
      if (dst != DPT_OK) return dst;
      ss.sent_bytes += ss.dense_bytes;
    }
    s->t.sparse_sent += ss.sent_bytes;
    s->t.sparse_dense += ss.dense_bytes;
  }
  return DPT_OK;
}

dpt_status dpt_train_sparse_count_nonfinite(replica_state *s, int64_t *out) {
  train_sparse *p = s->sparse;
  const dpt_buffer *grads = dpt_model_grads(s->model);
  uint64_t total = 0;
  for (size_t i = 0; i < p->num_dense; ++i) {
    uint64_t c = 0;
    DPT_TRY(dpt_count_nonfinite(s->be, p->dense[i].count, grads, p->dense[i].offset, &c));
    total += c;
  }
  for (size_t i = 0; i < p->num_tables; ++i) {
    const struct sparse_table *t = &p->tables[i];
    if (t->dense) {
      uint64_t c = 0;
      DPT_TRY(dpt_count_nonfinite(s->be, t->rows * t->dim, grads, t->offset, &c));
      total += c;
      continue;
    }
    const int32_t *ids = NULL;
    const float *g = NULL;
    const size_t n = dpt_sparse_exchange_result(t->x, &ids, &g) * t->dim;
    for (size_t j = 0; j < n; ++j)
      total += !isfinite(g[j]);
  }
  *out = (int64_t)total;
  return DPT_OK;
}

/* The table optimizer on k rows of table t: w holds `rows` rows of it from row `first` on (the
 * whole table, or one row), ids index w, g their summed gradients; ap the step's rate and count. */
static dpt_status apply_rows(const struct sparse_table *t, float *w, size_t first, size_t rows,
                             const int32_t *ids, const float *g, size_t k,
                             const dpt_sparse_adam_params *ap) {
  if (t->acc)
    return dpt_sparse_adagrad_rows(w, t->acc + first, rows, t->dim, ids, g, k, ap->lr,
                                   DPT_TABLE_ADAGRAD_EPS);
  if (t->last)
    return dpt_sparse_adam_catchup_rows(w, t->m + first * t->dim, t->v + first * t->dim,
                                        t->last + first, rows, t->dim, ids, g, k, ap);
  if (t->m)
    return dpt_sparse_adam_rows(w, t->m + first * t->dim, t->v + first, rows, t->dim, ids, g, k,
                                ap);
  return dpt_sparse_sgd_rows(w, rows, t->dim, ids, g, k, ap->lr);
}

/* The table optimizer on n rows of table t in host memory (w: the rows, ids: theirs, g: their
 * summed gradients). */
static dpt_status update_rows(const struct sparse_table *t, float *w, const int32_t *ids,
                              const float *g, size_t n, const dpt_sparse_adam_params *ap) {
  const int32_t zero = 0;
  for (size_t j = 0; j < n; ++j)
    DPT_TRY(apply_rows(t, w + j * t->dim, (size_t)ids[j], 1, &zero, g + j * t->dim, 1, ap));
  return DPT_OK;
}

/* The exchanged rows of table t: one download and upload per run of consecutive ids. */
static dpt_status step_rows(replica_state *s, const struct sparse_table *t,
                            const dpt_sparse_adam_params *ap) {
  train_sparse *p = s->sparse;
  const int32_t *ids = NULL;
  const float *g = NULL;
  const size_t n = dpt_sparse_exchange_result(t->x, &ids, &g);
  dpt_buffer *params = dpt_model_params(s->model);
  float *table = NULL;
  DPT_TRY(map_table(params, t, &table));
  if (table) { /* every row in place, in one call */
    const dpt_status st = apply_rows(t, table, 0, t->rows, ids, g, n, ap);
    const dpt_status su = dpt_buffer_unmap_host(params, table);
    return st != DPT_OK ? st : su;
  }
  for (size_t i = 0, m; i < n; i += m) {
    m = id_run(ids, i, n);
    const size_t at = (t->offset + (size_t)ids[i] * t->dim) * sizeof(float);
    const size_t bytes = m * t->dim * sizeof(float);
    DPT_TRY(rows_room(p, m * t->dim));
    DPT_TRY(dpt_buffer_download(params, at, p->rows, bytes));
    DPT_TRY(update_rows(t, p->rows, ids + i, g + i * t->dim, m, ap));
    DPT_TRY(dpt_buffer_upload(params, at, p->rows, bytes));
  }
  return DPT_OK;
}

/* Row-wise Adagrad or Adam after the dense exchange of table t: the rows whose summed gradient is
 * not all zero (the rows some replica touched, or fewer: a row whose gradients cancel exactly
 * keeps its values and moments), read in blocks of rows. */
static dpt_status step_dense_rowwise(replica_state *s, const struct sparse_table *t,
                                     const dpt_sparse_adam_params *ap) {
  train_sparse *p = s->sparse;
  enum { BLOCK = 1024 };
  DPT_TRY(rows_room(p, 2 * BLOCK * t->dim));
  float *g = p->rows, *w = p->rows + BLOCK * t->dim;
  int32_t ids[BLOCK];
  dpt_buffer *params = dpt_model_params(s->model);
  for (size_t r0 = 0; r0 < t->rows; r0 += BLOCK) {
    const size_t m = t->rows - r0 < BLOCK ? t->rows - r0 : BLOCK;
    const size_t at = (t->offset + r0 * t->dim) * sizeof(float);
    DPT_TRY(dpt_buffer_download(dpt_model_grads(s->model), at, g, m * t->dim * sizeof(float)));
    size_t k = 0;
    for (size_t j = 0; j < m; ++j) {
      size_t c = 0;
      while (c < t->dim && g[j * t->dim + c] == 0.0f)
        ++c;
      if (c == t->dim) continue;
      ids[k] = (int32_t)(r0 + j);
      if (k != j) memmove(g + k * t->dim, g + j * t->dim, t->dim * sizeof(float));
      ++k;
    }
    for (size_t i = 0; i < k; ++i) {
      const size_t row = (t->offset + (size_t)ids[i] * t->dim) * sizeof(float);
      DPT_TRY(dpt_buffer_download(params, row, w, t->dim * sizeof(float)));
      DPT_TRY(update_rows(t, w, ids + i, g + i * t->dim, 1, ap));
      DPT_TRY(dpt_buffer_upload(params, row, w, t->dim * sizeof(float)));
    }
  }
  return DPT_OK;
}

dpt_status dpt_train_sparse_step(replica_state *s) {
  train_sparse *p = s->sparse;
  /* The tables' rate follows the schedule (and any rollback factor) of the dense one. */
  const double now = dpt_optimizer_lr(s->opt);
  const float lr = (float)(p->base_lr > 0 ? p->lr0 * (now / p->base_lr) : p->lr0);
  DPT_TRY(dpt_optimizer_step_ranges(s->opt, p->dense, p->num_dense, 0.0, NULL));
  /* Adam's bias correction counts the steps taken, this one included, as the dense one does. */
  const dpt_sparse_adam_params ap = {lr, DPT_TABLE_ADAM_BETA1, DPT_TABLE_ADAM_BETA2,
                                     DPT_TABLE_ADAM_EPS, dpt_optimizer_steps(s->opt)};
  for (size_t i = 0; i < p->num_tables; ++i) {
    const struct sparse_table *t = &p->tables[i];
    if (t->dense && (t->acc || t->m)) {
      DPT_TRY(step_dense_rowwise(s, t, &ap));
    } else if (t->dense) { /* the whole table: rows nobody touched have a zero gradient */
      DPT_TRY(dpt_axpy(s->be, t->rows * t->dim, -lr, dpt_model_grads(s->model), t->offset,
                       dpt_model_params(s->model), t->offset));
    } else {
      DPT_TRY(step_rows(s, t, &ap));
    }
  }
  return DPT_OK;
}

/* Table t's blocks of optimizer state: Adagrad's accumulators, or Adam's two moments (and with
 * catch-up each row's last step). */
static size_t table_state(const struct sparse_table *t, float **data, const char **kind,
                          size_t *cols) {
  size_t n = 0;
  if (t->acc) data[n] = t->acc, kind[n] = "row_sum", cols[n++] = 1;
  if (t->m) data[n] = t->m, kind[n] = "row_m", cols[n++] = t->dim;
  if (t->v) data[n] = t->v, kind[n] = "row_v", cols[n++] = t->last ? t->dim : 1;
  if (t->last) data[n] = t->last, kind[n] = "row_last", cols[n++] = 1;
  return n;
}

size_t dpt_train_sparse_num_state(const replica_state *s) {
  const train_sparse *p = s->sparse;
  size_t n = 0;
  for (size_t i = 0; p && i < p->num_tables; ++i) {
    float *data[4];
    const char *kind[4];
    size_t cols[4];
    n += table_state(&p->tables[i], data, kind, cols);
  }
  return n;
}

float *dpt_train_sparse_state(const replica_state *s, size_t i, dpt_train_row_state *out) {
  const train_sparse *p = s->sparse;
  for (size_t t = 0; p && t < p->num_tables; ++t) {
    float *data[4];
    const char *kind[4];
    size_t cols[4];
    const size_t n = table_state(&p->tables[t], data, kind, cols);
    if (i >= n) {
      i -= n;
      continue;
    }
    *out = (dpt_train_row_state){kind[i], p->tables[t].name, p->tables[t].rows, cols[i]};
    return data[i];
  }
  return NULL;
}

/* ---- the exchange kind: sparse tables (exchange.h) ---- */

static dpt_status sparse_reduce(replica *r, replica_state *s, exchange_times *t) {
  const double t0 = dpt_now();
  dpt_status st = dpt_train_sparse_reduce(r, s);
  dpt_train_exchange_one_piece(s, t, t0, "exchange (sparse tables)");
  return st;
}

static dpt_status sparse_update(replica *r, replica_state *s, double sumsq) {
  (void)r;
  (void)sumsq;
  return s->pending == DPT_OK ? dpt_train_sparse_step(s) : DPT_OK;
}

static int sparse_applies(const replica_state *s) {
  return s->sparse != NULL;
}

const train_exchange dpt_train_exchange_sparse = {.name = "sparse tables",
                                                  .applies = sparse_applies,
                                                  .reduce = sparse_reduce,
                                                  .count_nonfinite =
                                                      dpt_train_sparse_count_nonfinite,
                                                  .update = sparse_update};
