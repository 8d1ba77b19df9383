/* Sparse table gradients (dptrain/sparse.h): the (id, row) exchange against the dense
 * all-reduce on the threads transport, the row-wise SGD and Adagrad updates by hand. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/comm.h"
#include "dptrain/sparse.h"
#include "test_util.h"

#define MAX_RANKS 4

/* One exchange case: every rank touches k_of(rank) random rows of a rows x dim table. */
typedef struct sp_case {
  int size;
  size_t rows, dim;
  size_t k[MAX_RANKS];
  unsigned seed;
  /* results, per rank */
  dpt_status st[MAX_RANKS];
  size_t n[MAX_RANKS];
  int32_t *ids[MAX_RANKS];
  float *sparse[MAX_RANKS]; /* [n * dim] */
  float *dense[MAX_RANKS];  /* [rows * dim], the all-reduced dense gradient */
  dpt_sparse_stats stats[MAX_RANKS];
  dpt_comm_group *group;
  int bad_rank;        /* >= 0: this rank passes unsorted ids */
  size_t dim_of_rank1; /* != 0: rank 1 uses this dim */
  double dense_above;  /* > 0: dpt_sparse_exchange_set_dense_above */
} sp_case;

typedef struct sp_arg {
  sp_case *c;
  int rank;
} sp_arg;

static uint32_t lcg(uint32_t *s) {
  *s = *s * 1664525u + 1013904223u;
  return *s >> 8;
}

/* k distinct ids in [0, rows), sorted. */
static void pick_ids(uint32_t *s, size_t rows, size_t k, int32_t *out) {
  unsigned char *taken = calloc(rows, 1);
  ck_assert_ptr_nonnull(taken);
  for (size_t i = 0; i < k;) {
    size_t id = lcg(s) % rows;
    if (taken[id]) continue;
    taken[id] = 1;
    ++i;
  }
  size_t n = 0;
  for (size_t r = 0; r < rows; ++r)
    if (taken[r]) out[n++] = (int32_t)r;
  free(taken);
}

static void *sp_rank(void *p) {
  sp_arg *a = p;
  sp_case *c = a->c;
  const int r = a->rank;
  dpt_comm *comm = NULL;
  TU_OK(dpt_comm_group_member(c->group, r, &comm));
  TU_OK(dpt_comm_set_timeout(comm, 20.0));
  uint32_t s = c->seed * 977u + (uint32_t)r * 131u + 7u;
  const size_t k = c->k[r], dim = (r == 1 && c->dim_of_rank1) ? c->dim_of_rank1 : c->dim;
  int32_t *ids = malloc((k + 1) * sizeof(*ids));
  float *g = malloc((k * dim + 1) * sizeof(*g));
  float *dense = calloc(c->rows * c->dim, sizeof(*dense));
  ck_assert(ids && g && dense);
  pick_ids(&s, c->rows, k, ids);
  for (size_t i = 0; i < k * dim; ++i)
    g[i] = (float)((int)(lcg(&s) % 2001) - 1000) / 997.0f;
  if (dim == c->dim)
    for (size_t i = 0; i < k; ++i)
      memcpy(dense + (size_t)ids[i] * dim, g + i * dim, dim * 4);
  if (r == c->bad_rank && k >= 2) {
    int32_t t = ids[0];
    ids[0] = ids[1];
    ids[1] = t;
  }
  dpt_sparse_exchange *x = NULL;
  TU_OK(dpt_sparse_exchange_create(&x));
  if (c->dense_above > 0) TU_OK(dpt_sparse_exchange_set_dense_above(x, c->dense_above));
  /* twice: the second call reuses the memory and must give the same */
  for (int rep = 0; rep < 2; ++rep) {
    c->st[r] = dpt_sparse_allreduce(x, comm, c->rows, dim, ids, g, k);
    if (c->st[r] != DPT_OK) break;
  }
  if (c->st[r] == DPT_OK) {
    const int32_t *rid;
    const float *rg;
    c->n[r] = dpt_sparse_exchange_result(x, &rid, &rg);
    c->ids[r] = malloc((c->n[r] + 1) * sizeof(int32_t));
    c->sparse[r] = malloc((c->n[r] * dim + 1) * sizeof(float));
    if (c->n[r]) {
      memcpy(c->ids[r], rid, c->n[r] * sizeof(int32_t));
      memcpy(c->sparse[r], rg, c->n[r] * dim * sizeof(float));
    }
    dpt_sparse_exchange_stats(x, &c->stats[r]);
    TU_OK(dpt_allreduce_host(comm, dense, c->rows * c->dim, DPT_COMM_F32));
    c->dense[r] = dense;
    dense = NULL;
  }
  dpt_sparse_exchange_destroy(x);
  free(dense);
  free(ids);
  free(g);
  dpt_comm_destroy(comm);
  return NULL;
}

static void run_case(sp_case *c) {
  TU_OK(dpt_comm_group_create(c->size, &c->group));
  pthread_t th[MAX_RANKS];
  sp_arg args[MAX_RANKS];
  for (int r = 0; r < c->size; ++r) {
    args[r] = (sp_arg){c, r};
    ck_assert_int_eq(pthread_create(&th[r], NULL, sp_rank, &args[r]), 0);
  }
  for (int r = 0; r < c->size; ++r)
    pthread_join(th[r], NULL);
  dpt_comm_group_destroy(c->group);
}

static void free_case(sp_case *c) {
  for (int r = 0; r < c->size; ++r) {
    free(c->ids[r]);
    free(c->sparse[r]);
    free(c->dense[r]);
  }
}

/* The result on every rank: bit-identical to rank 0's, the rows of the dense sum within
 * rounding, and the rows it lacks zero in the dense sum. */
static void check_case(sp_case *c) {
  for (int r = 0; r < c->size; ++r)
    ck_assert_msg(c->st[r] == DPT_OK, "rank %d: %s", r, dpt_status_name(c->st[r]));
  const size_t dim = c->dim, n = c->n[0];
  for (int r = 1; r < c->size; ++r) {
    ck_assert_uint_eq(c->n[r], n);
    ck_assert(memcmp(c->ids[r], c->ids[0], n * sizeof(int32_t)) == 0);
    ck_assert(memcmp(c->sparse[r], c->sparse[0], n * dim * sizeof(float)) == 0);
  }
  size_t total = 0;
  for (int r = 0; r < c->size; ++r)
    total += c->k[r];
  ck_assert_uint_le(n, total);
  const float *d = c->dense[0];
  size_t i = 0;
  for (size_t row = 0; row < c->rows; ++row) {
    const int in = i < n && (size_t)c->ids[0][i] == row;
    for (size_t j = 0; j < dim; ++j) {
      const float want = d[row * dim + j];
      if (!in) {
        ck_assert_msg(want == 0.0f, "row %zu absent, dense %g", row, (double)want);
        continue;
      }
      const float got = c->sparse[0][i * dim + j];
      ck_assert_msg(fabsf(got - want) <= 1e-5f * (1.0f + fabsf(want)), "row %zu[%zu]: %g vs %g",
                    row, j, (double)got, (double)want);
    }
    if (in) ++i;
  }
  ck_assert_uint_eq(i, n);
}

START_TEST(exchange_equals_dense) {
  for (int size = 2; size <= 4; ++size)
    for (unsigned seed = 1; seed <= 3; ++seed) {
      sp_case c = {.size = size, .rows = 40, .dim = 7, .seed = seed, .bad_rank = -1};
      for (int r = 0; r < size; ++r)
        c.k[r] = (seed + (unsigned)r * 5u) % 16u; /* overlaps */
      if (seed == 2) c.k[size - 1] = 0;           /* a rank idle */
      run_case(&c);
      check_case(&c);
      ck_assert_uint_eq(c.stats[0].dense_bytes, (size_t)(2.0 * (size - 1) / size * 40 * 7 * 4));
      free_case(&c);
    }
}
END_TEST

START_TEST(exchange_nobody_touches) {
  sp_case c = {.size = 3, .rows = 10, .dim = 2, .seed = 9, .bad_rank = -1};
  run_case(&c);
  check_case(&c);
  ck_assert_uint_eq(c.n[0], 0);
  free_case(&c);
}
END_TEST

/* The bytes moved on a larger table: 20000 rows of 16, 512 rows touched per replica. */
START_TEST(exchange_bytes) {
  sp_case c = {.size = 4, .rows = 20000, .dim = 16, .seed = 4, .bad_rank = -1};
  for (int r = 0; r < 4; ++r)
    c.k[r] = 512;
  run_case(&c);
  check_case(&c);
  const dpt_sparse_stats *s = &c.stats[0];
  ck_assert_uint_eq(s->max_count, 512);
  ck_assert_uint_eq(s->sent_bytes, 3 * (32 + 512 * (4 + 16 * 4)));
  printf("sparse exchange, 4 replicas, 20000 x 16 table, 512 rows each (union %zu): %zu bytes "
         "sent per replica, dense ring %zu (%.1fx less)\n",
         s->union_count, s->sent_bytes, s->dense_bytes,
         (double)s->dense_bytes / (double)s->sent_bytes);
  free_case(&c);
}
END_TEST

/* The choice: above the fraction of the dense ring's bytes every replica learns to exchange
 * the dense gradient (no rows), below it the rows come as before. */
START_TEST(exchange_dense_above) {
  sp_case c = {.size = 3, .rows = 100, .dim = 8, .seed = 6, .bad_rank = -1, .dense_above = 0.5};
  c.k[0] = 10, c.k[1] = 40, c.k[2] = 5; /* 2 x (32 + 40 x 36) = 2944 > 0.5 x 4266 */
  run_case(&c);
  for (int r = 0; r < 3; ++r) {
    ck_assert_int_eq(c.st[r], DPT_OK);
    ck_assert_int_eq(c.stats[r].dense, 1);
    ck_assert_uint_eq(c.n[r], 0);
    ck_assert_uint_eq(c.stats[r].sent_bytes, 2 * 32);
  }
  free_case(&c);
  sp_case s = {.size = 3, .rows = 100, .dim = 8, .seed = 6, .bad_rank = -1, .dense_above = 0.5};
  s.k[0] = 10, s.k[1] = 25, s.k[2] = 5; /* 2 x (32 + 25 x 36) = 1864 <= 2133 */
  run_case(&s);
  check_case(&s);
  ck_assert_int_eq(s.stats[0].dense, 0);
  free_case(&s);
  dpt_sparse_exchange *x = NULL;
  TU_OK(dpt_sparse_exchange_create(&x));
  EXPECT_FAIL(dpt_sparse_exchange_set_dense_above(x, -1), DPT_ERR_INVALID_ARG, ">= 0", NULL, NULL);
  dpt_sparse_exchange_destroy(x);
}
END_TEST

START_TEST(exchange_errors_agree) {
  sp_case c = {.size = 3, .rows = 30, .dim = 4, .seed = 5, .bad_rank = 1};
  for (int r = 0; r < 3; ++r)
    c.k[r] = 6;
  run_case(&c);
  ck_assert_int_eq(c.st[1], DPT_ERR_INVALID_ARG);
  ck_assert_int_eq(c.st[0], DPT_ERR_PEER);
  ck_assert_int_eq(c.st[2], DPT_ERR_PEER);
  free_case(&c);
  sp_case m = {.size = 2, .rows = 30, .dim = 4, .seed = 5, .bad_rank = -1, .dim_of_rank1 = 5};
  m.k[0] = m.k[1] = 3;
  run_case(&m);
  ck_assert_int_eq(m.st[0], DPT_ERR_MISMATCH);
  ck_assert_int_eq(m.st[1], DPT_ERR_MISMATCH);
  free_case(&m);
}
END_TEST

/* dpt_sparse_allreduce_tables: 3 ranks, 5 tables of other sizes (one nobody touches, one a
 * rank leaves alone, one that goes dense, dims 1-8) in one call give every table's result,
 * stats and choice bit for bit as one dpt_sparse_allreduce per table. */
enum { MT = 5 };
static const size_t mt_rows[MT] = {50, 1000, 7, 300, 64}, mt_dim[MT] = {4, 8, 1, 3, 2};
static const size_t mt_k[3][MT] = {{5, 0, 3, 40, 60}, {9, 0, 7, 0, 50}, {1, 0, 2, 17, 64}};

typedef struct mt_arg {
  dpt_comm_group *group;
  int rank;
  int same; /* every table equal to its own call */
  dpt_status st;
} mt_arg;

static void *mt_rank(void *p) {
  mt_arg *a = p;
  dpt_comm *comm = NULL;
  TU_OK(dpt_comm_group_member(a->group, a->rank, &comm));
  TU_OK(dpt_comm_set_timeout(comm, 20.0));
  uint32_t s = 1234u + 77u * (uint32_t)a->rank;
  int32_t *ids[MT];
  float *grad[MT];
  dpt_sparse_exchange *one[MT], *all[MT];
  for (int t = 0; t < MT; ++t) {
    const size_t k = mt_k[a->rank][t];
    ids[t] = malloc((k + 1) * sizeof(int32_t));
    grad[t] = malloc((k * mt_dim[t] + 1) * sizeof(float));
    ck_assert(ids[t] && grad[t]);
    pick_ids(&s, mt_rows[t], k, ids[t]);
    for (size_t i = 0; i < k * mt_dim[t]; ++i)
      grad[t][i] = (float)((int)(lcg(&s) % 2001) - 1000) / 997.0f;
    TU_OK(dpt_sparse_exchange_create(&one[t]));
    TU_OK(dpt_sparse_exchange_create(&all[t]));
    TU_OK(dpt_sparse_exchange_set_dense_above(one[t], t == 4 ? 0.5 : 2.0));
    TU_OK(dpt_sparse_exchange_set_dense_above(all[t], t == 4 ? 0.5 : 2.0));
  }
  for (int t = 0; t < MT; ++t)
    TU_OK(dpt_sparse_allreduce(one[t], comm, mt_rows[t], mt_dim[t], ids[t], grad[t],
                               mt_k[a->rank][t]));
  const int32_t *cids[MT];
  const float *cgrad[MT];
  for (int t = 0; t < MT; ++t)
    cids[t] = ids[t], cgrad[t] = grad[t];
  a->st = dpt_sparse_allreduce_tables(all, comm, MT, mt_rows, mt_dim, cids, cgrad, mt_k[a->rank]);
  a->same = a->st == DPT_OK;
  for (int t = 0; t < MT && a->same; ++t) {
    const int32_t *i1, *i2;
    const float *g1, *g2;
    const size_t n1 = dpt_sparse_exchange_result(one[t], &i1, &g1);
    const size_t n2 = dpt_sparse_exchange_result(all[t], &i2, &g2);
    dpt_sparse_stats s1, s2;
    dpt_sparse_exchange_stats(one[t], &s1);
    dpt_sparse_exchange_stats(all[t], &s2);
    a->same = n1 == n2 && memcmp(&s1, &s2, sizeof s1) == 0 &&
              (n1 == 0 || (memcmp(i1, i2, n1 * sizeof *i1) == 0 &&
                           memcmp(g1, g2, n1 * mt_dim[t] * sizeof *g1) == 0));
    if (t == 1) a->same = a->same && n2 == 0;       /* nobody touched it */
    if (t == 4) a->same = a->same && s2.dense == 1; /* 64 of 64 rows: dense */
    if (t == 0) a->same = a->same && s2.dense == 0 && n2 > 0;
  }
  for (int t = 0; t < MT; ++t) {
    free(ids[t]);
    free(grad[t]);
    dpt_sparse_exchange_destroy(one[t]);
    dpt_sparse_exchange_destroy(all[t]);
  }
  dpt_comm_destroy(comm);
  return NULL;
}

START_TEST(exchange_tables_at_once) {
  dpt_comm_group *group = NULL;
  TU_OK(dpt_comm_group_create(3, &group));
  mt_arg args[3];
  pthread_t th[3];
  for (int r = 0; r < 3; ++r) {
    args[r] = (mt_arg){.group = group, .rank = r};
    ck_assert_int_eq(pthread_create(&th[r], NULL, mt_rank, &args[r]), 0);
  }
  for (int r = 0; r < 3; ++r)
    pthread_join(th[r], NULL);
  dpt_comm_group_destroy(group);
  for (int r = 0; r < 3; ++r) {
    ck_assert_int_eq(args[r].st, DPT_OK);
    ck_assert_msg(args[r].same, "rank %d: a table differs from its own exchange", r);
  }
}
END_TEST

START_TEST(sgd_rows_by_hand) {
  float t[4 * 2] = {1, 2, 3, 4, 5, 6, 7, 8};
  const int32_t ids[2] = {3, 1};
  const float g[4] = {1, -1, 0.5f, 2};
  TU_OK(dpt_sparse_sgd_rows(t, 4, 2, ids, g, 2, 0.1f));
  const float want[8] = {1, 2, 3 - 0.05f, 4 - 0.2f, 5, 6, 7 - 0.1f, 8 + 0.1f};
  for (int i = 0; i < 8; ++i)
    ck_assert_float_eq_tol(t[i], want[i], 1e-6f);
  const int32_t out[1] = {4};
  EXPECT_FAIL(dpt_sparse_sgd_rows(t, 4, 2, out, g, 1, 0.1f), DPT_ERR_INVALID_ARG, "outside", NULL,
              NULL);
}
END_TEST

START_TEST(adagrad_rows_by_hand) {
  float t[3 * 2] = {1, 1, 1, 1, 1, 1};
  float acc[3] = {0, 0, 0};
  const int32_t ids[1] = {2};
  const float g[2] = {3, 4}; /* mean square 12.5 */
  TU_OK(dpt_sparse_adagrad_rows(t, acc, 3, 2, ids, g, 1, 0.5f, 1e-8f));
  ck_assert_float_eq_tol(acc[2], 12.5f, 1e-6f);
  ck_assert_float_eq(acc[0], 0.0f);
  const double s1 = 0.5 / (sqrt(12.5) + 1e-8);
  ck_assert_float_eq_tol(t[4], (float)(1 - s1 * 3), 1e-6f);
  ck_assert_float_eq_tol(t[5], (float)(1 - s1 * 4), 1e-6f);
  ck_assert_float_eq(t[0], 1.0f);
  /* a second step adds to the accumulator: 12.5 + (1 + 1) / 2 */
  const float g2[2] = {1, -1};
  TU_OK(dpt_sparse_adagrad_rows(t, acc, 3, 2, ids, g2, 1, 0.5f, 1e-8f));
  ck_assert_float_eq_tol(acc[2], 13.5f, 1e-6f);
  const double s2 = 0.5 / (sqrt(13.5) + 1e-8);
  ck_assert_float_eq_tol(t[4], (float)(1 - s1 * 3 - s2), 1e-6f);
  ck_assert_float_eq_tol(t[5], (float)(1 - s1 * 4 + s2), 1e-6f);
  EXPECT_FAIL(dpt_sparse_adagrad_rows(t, NULL, 3, 2, ids, g, 1, 0.5f, 1e-8f), DPT_ERR_INVALID_ARG,
              "acc", NULL, NULL);
}
END_TEST

/* Row-wise Adam on a table of 3 rows of 2, two steps, by hand: row 2 both steps, row 0 the
 * second; row 1 never (its values and moments stay). */
START_TEST(adam_rows_by_hand) {
  float t[3 * 2] = {1, 1, 1, 1, 1, 1};
  float m[3 * 2] = {0}, v[3] = {0};
  dpt_sparse_adam_params p = {0.5f, 0.9f, 0.999f, 1e-8f, 1};
  const double b1 = 0.9f, b2 = 0.999f; /* the float settings, widened as the update does */
  const int32_t ids[1] = {2};
  const float g[2] = {3, 4}; /* mean square 12.5 */
  TU_OK(dpt_sparse_adam_rows(t, m, v, 3, 2, ids, g, 1, &p));
  /* m = (1 - b1) g, v = (1 - b2) 12.5; corrected: g and 12.5, so w -= 0.5 g / sqrt(12.5) */
  ck_assert_float_eq_tol(m[4], (float)((1 - b1) * 3), 1e-7f);
  ck_assert_float_eq_tol(m[5], (float)((1 - b1) * 4), 1e-7f);
  ck_assert_float_eq_tol(v[2], (float)((1 - b2) * 12.5), 1e-9f);
  const double s1 = 0.5 / (sqrt(12.5) + 1e-8);
  ck_assert_float_eq_tol(t[4], (float)(1 - s1 * 3), 1e-6f);
  ck_assert_float_eq_tol(t[5], (float)(1 - s1 * 4), 1e-6f);
  ck_assert_float_eq_tol(t[4], 0.5757359f, 1e-6f);
  ck_assert_float_eq_tol(t[5], 0.4343146f, 1e-6f);
  /* step 2: rows 0 and 2; ids in any order */
  p.step = 2;
  const int32_t ids2[2] = {2, 0};
  const float g2[4] = {1, -1, 2, 0}; /* row 2: mean square 1; row 0: 2 */
  TU_OK(dpt_sparse_adam_rows(t, m, v, 3, 2, ids2, g2, 2, &p));
  const double c1 = 1 - b1 * b1, c2 = 1 - b2 * b2;
  const double m20 = b1 * (double)(float)((1 - b1) * 3) + (1 - b1) * 1;  /* 0.37 */
  const double m21 = b1 * (double)(float)((1 - b1) * 4) + (1 - b1) * -1; /* 0.26 */
  const double v2 = b2 * (double)(float)((1 - b2) * 12.5) + (1 - b2) * 1;
  ck_assert_float_eq_tol(m[4], (float)m20, 1e-7f);
  ck_assert_float_eq_tol(m[5], (float)m21, 1e-7f);
  ck_assert_float_eq_tol(m[4], 0.37f, 1e-6f);
  ck_assert_float_eq_tol(m[5], 0.26f, 1e-6f);
  ck_assert_float_eq_tol(v[2], (float)v2, 1e-9f);
  const double s2 = 0.5 / (sqrt((double)(float)v2 / c2) + 1e-8) / c1;
  ck_assert_float_eq_tol(t[4], (float)(1 - s1 * 3 - s2 * (double)(float)m20), 1e-6f);
  ck_assert_float_eq_tol(t[5], (float)(1 - s1 * 4 - s2 * (double)(float)m21), 1e-6f);
  /* row 0 on its first update, at step 2: m = ((1 - b1) 2, 0), v = (1 - b2) 2 */
  const double m00 = (1 - b1) * 2, v0 = (1 - b2) * 2;
  ck_assert_float_eq_tol(m[0], (float)m00, 1e-7f);
  ck_assert_float_eq(m[1], 0.0f);
  ck_assert_float_eq_tol(v[0], (float)v0, 1e-9f);
  const double s0 = 0.5 / (sqrt((double)(float)v0 / c2) + 1e-8) / c1;
  ck_assert_float_eq_tol(t[0], (float)(1 - s0 * (double)(float)m00), 1e-6f);
  ck_assert_float_eq(t[1], 1.0f);
  /* row 1: untouched */
  ck_assert_float_eq(t[2], 1.0f);
  ck_assert_float_eq(t[3], 1.0f);
  ck_assert_float_eq(m[2], 0.0f);
  ck_assert_float_eq(m[3], 0.0f);
  ck_assert_float_eq(v[1], 0.0f);
  EXPECT_FAIL(dpt_sparse_adam_rows(t, NULL, v, 3, 2, ids, g, 1, &p), DPT_ERR_INVALID_ARG,
              "m or v is NULL", NULL, NULL);
  p.step = 0;
  EXPECT_FAIL(dpt_sparse_adam_rows(t, m, v, 3, 2, ids, g, 1, &p), DPT_ERR_INVALID_ARG, "step >= 1",
              NULL, NULL);
  p.step = 1;
  p.beta2 = 1.0f;
  EXPECT_FAIL(dpt_sparse_adam_rows(t, m, v, 3, 2, ids, g, 1, &p), DPT_ERR_INVALID_ARG, "beta2 1",
              NULL, NULL);
}
END_TEST

/* Dense Adam, element by element, in double: the reference of the catch-up. */
static void dense_adam(double *w, double *m, double *v, size_t n, const double *g, int64_t step,
                       double lr, double b1, double b2, double eps) {
  const double c1 = 1 - pow(b1, (double)step), c2 = 1 - pow(b2, (double)step);
  for (size_t j = 0; j < n; ++j) {
    m[j] = b1 * m[j] + (1 - b1) * g[j];
    v[j] = b2 * v[j] + (1 - b2) * g[j] * g[j];
    w[j] -= lr * (m[j] / c1) / (sqrt(v[j] / c2) + eps);
  }
}

/* Adam with catch-up on 4 rows of 2 over 150 steps against dense Adam on the whole table with
 * zero gradients for the rows not given: row 0 given every step, row 1 at steps 1, 5, 6 and 150
 * (a gap of 3 and one of 143, past the exact terms), row 2 at step 1 only (its missed steps
 * still pending), row 3 never. */
START_TEST(adam_catchup_rows_match_dense) {
  enum { R = 4, D = 2, STEPS = 150 };
  float t[R * D], m[R * D] = {0}, v[R * D] = {0}, last[R] = {0};
  double wd[R * D], md[R * D] = {0}, vd[R * D] = {0};
  for (int j = 0; j < R * D; ++j)
    t[j] = (float)(wd[j] = 0.5 + 0.125 * j);
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, lr = 0.01f;
  for (int64_t step = 1; step <= STEPS; ++step) {
    int32_t ids[R];
    float g[R * D];
    double gd[R * D] = {0};
    size_t k = 0;
    for (int32_t r = 0; r < R; ++r) {
      const int given = r == 0 ||
                        (r == 1 && (step == 1 || step == 5 || step == 6 || step == STEPS)) ||
                        (r == 2 && step == 1);
      if (!given) continue;
      for (int j = 0; j < D; ++j)
        gd[r * D + j] = g[k * D + j] = (float)(0.3 * sin((double)(step * (r + 1) + j)) + 0.05 * j);
      ids[k++] = r;
    }
    const dpt_sparse_adam_params p = {lr, b1, b2, eps, step};
    TU_OK(dpt_sparse_adam_catchup_rows(t, m, v, last, R, D, ids, g, k, &p));
    dense_adam(wd, md, vd, R * D, gd, step, lr, b1, b2, eps);
  }
  for (int j = 0; j < 2 * D; ++j) { /* rows 0 and 1: brought up to the last step */
    ck_assert_msg(fabs(t[j] - wd[j]) < 1e-5 * fabs(wd[j]) + 1e-6, "w[%d] %.8g, dense %.8g", j,
                  (double)t[j], wd[j]);
    ck_assert_msg(fabs(m[j] - md[j]) <= 1e-6 * fabs(md[j]) + 1e-9, "m[%d]", j);
    ck_assert_msg(fabs(v[j] - vd[j]) <= 1e-6 * fabs(vd[j]) + 1e-12, "v[%d]", j);
  }
  ck_assert_float_eq(last[0], (float)STEPS);
  ck_assert_float_eq(last[1], (float)STEPS);
  ck_assert_float_eq(last[2], 1.0f);
  ck_assert_float_eq(last[3], 0.0f);
  /* row 2 moved at step 1 only, the dense one on every step after it; row 3 not at all */
  ck_assert(fabs(t[2 * D] - wd[2 * D]) > 1e-3);
  ck_assert_float_eq(t[3 * D], 0.5f + 0.125f * 3 * D);
  ck_assert_double_eq(wd[3 * D], 0.5 + 0.125 * 3 * D);
  const int32_t id = 1;
  const float g1[D] = {1, 1};
  dpt_sparse_adam_params p = {lr, b1, b2, eps, 2};
  EXPECT_FAIL(dpt_sparse_adam_catchup_rows(t, m, v, NULL, R, D, &id, g1, 1, &p),
              DPT_ERR_INVALID_ARG, "m, v or last is NULL", NULL, NULL);
  p.step = ((int64_t)1 << 24) + 1;
  EXPECT_FAIL(dpt_sparse_adam_catchup_rows(t, m, v, last, R, D, &id, g1, 1, &p),
              DPT_ERR_INVALID_ARG, "past 2^24", NULL, NULL);
  const int32_t bad = R;
  p.step = 2;
  EXPECT_FAIL(dpt_sparse_adam_catchup_rows(t, m, v, last, R, D, &bad, g1, 1, &p),
              DPT_ERR_INVALID_ARG, "outside [0, 4)", NULL, NULL);
}
END_TEST

static Suite *sparse_suite(void) {
  Suite *s = suite_create("sparse");
  TCase *tc = tcase_create("exchange");
  tcase_set_timeout(tc, 200);
  tcase_add_test(tc, exchange_equals_dense);
  tcase_add_test(tc, exchange_nobody_touches);
  tcase_add_test(tc, exchange_bytes);
  tcase_add_test(tc, exchange_errors_agree);
  tcase_add_test(tc, exchange_dense_above);
  tcase_add_test(tc, exchange_tables_at_once);
  suite_add_tcase(s, tc);
  TCase *up = tcase_create("updates");
  tcase_add_test(up, sgd_rows_by_hand);
  tcase_add_test(up, adagrad_rows_by_hand);
  tcase_add_test(up, adam_rows_by_hand);
  tcase_add_test(up, adam_catchup_rows_match_dense);
  suite_add_tcase(s, up);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(sparse_suite());
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
