/* Training on per-replica shards (dpt_train_config.local_train): with R = 1, 2, 3 thread
 * replicas, each reading only its own shards, the run takes the header rule's steps per epoch
 * and its parameters equal a hand-built single model stepped on the same global batches (the
 * union of the replicas' slices in replica order, dpt_interactions_step_indices) within 1e-5;
 * the reported validation AUC, logloss, loss and accuracy equal a direct computation over the
 * validation records with the final parameters; bad readers and tables are refused; with
 * sparse_tables the run equals the dense one within 1e-5 per tensor. With `backend <kind>`:
 * tables beyond the Vulkan windows trained on the device as on the CPU. */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */

#include <check.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dptrain/advanced.h"
#include "test_util.h"
#include "tmp_dir.h"
#include "tools/prep/shards.h"

enum { DENSE = 2, TABLES = 3, ROWS = 50, BATCH = 24, EPOCHS = 2, SEED = 7, MAXR = 3 };
static const int train_sizes[5] = {37, 50, 23, 41, 29}; /* 180 records: 7 steps of 24 */
static const int val_sizes[3] = {40, 33, 30};

static void setup(void) {
  tu_tmp_make("shards");
}

static void teardown(void) {
  tu_tmp_remove();
}

/* Shards prefix-00000.bin ... of the synthetic set with tables of `rows` rows, records numbered
 * on from `first`. */
static void write_shards_rows(const char *prefix, const int *sizes, int n, uint64_t first,
                              size_t rows) {
  dpt_synth_config sc;
  dpt_synth_default(&sc);
  sc.rows = rows;
  sc.tables = TABLES;
  sc.num_dense = DENSE;
  sc.dim = 2;
  const uint64_t tables[TABLES] = {rows, rows, rows};
  uint64_t rec = first;
  for (int s = 0; s < n; ++s) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s-%05d.bin", tmp_dir, prefix, s);
    dpt_shard_writer *w = NULL;
    TU_OK(dpt_shard_writer_open(path, DENSE, TABLES, tables, &w));
    for (int r = 0; r < sizes[s]; ++r, ++rec) {
      float dense[DENSE], label, prob;
      int32_t sparse[TABLES];
      TU_OK(dpt_synth_record(&sc, rec, dense, sparse, &label, &prob));
      TU_OK(dpt_shard_writer_add(w, label, dense, sparse));
    }
    TU_OK(dpt_shard_writer_close(w));
  }
}

static void write_shards(const char *prefix, const int *sizes, int n, uint64_t first) {
  write_shards_rows(prefix, sizes, n, first, ROWS);
}

static const char *pattern(const char *prefix) {
  static char buf[2][512];
  static int next;
  char *p = buf[next++ % 2];
  snprintf(p, 512, "%s/%s-*.bin", tmp_dir, prefix);
  return p;
}

static const size_t table_rows[TABLES] = {ROWS, ROWS, ROWS};
static const size_t bottom[1] = {8}, top[1] = {8};

static void dlrm_spec(dpt_model_spec *spec, size_t rows) {
  static size_t rows_buf[TABLES];
  for (int t = 0; t < TABLES; ++t)
    rows_buf[t] = rows ? rows : table_rows[t];
  dpt_dlrm_options o;
  dpt_dlrm_options_default(&o);
  o.num_dense = DENSE;
  o.num_tables = TABLES;
  o.table_rows = rows_buf;
  o.dim = 4;
  o.bottom = bottom;
  o.num_bottom = 1;
  o.top = top;
  o.num_top = 1;
  TU_OK(dpt_model_spec_dlrm(spec, &o));
}

typedef struct seen {
  dpt_train_report last; /* the last epoch's report */
  int epochs;
} seen;

static void on_report(const dpt_train_report *r, void *user) {
  seen *s = user;
  if (r->final) return;
  s->last = *r;
  s->epochs++;
}

static void config(dpt_train_config *cfg, int R, dpt_interactions **tr, dpt_interactions **va) {
  dpt_train_config_default(cfg);
  dlrm_spec(&cfg->model, 0);
  cfg->optim.lr = 0.1f;
  cfg->optim.momentum = 0.0f;
  cfg->devices.replicas = R;
  cfg->data.local_train = tr;
  cfg->data.local_test = va;
  cfg->schedule.global_batch = BATCH;
  cfg->schedule.epochs = EPOCHS;
  cfg->schedule.seed = SEED;
  cfg->checks.check_every = 5;
}

static void open_readers(const char *prefix, int R, dpt_interactions **out) {
  for (int i = 0; i < R; ++i)
    TU_OK(dpt_interactions_open(pattern(prefix), i, R, &out[i]));
}

/* The record rows of reader d's local records idx[0..n) appended at x/y. */
static void put_records(const dpt_interactions *d, const uint64_t *idx, size_t n, float *x,
                        int32_t *y) {
  for (size_t i = 0; i < n; ++i) {
    memcpy(x + i * (DENSE + TABLES), dpt_interactions_dense(d, idx[i]), DENSE * sizeof(float));
    memcpy(x + i * (DENSE + TABLES) + DENSE, dpt_interactions_sparse(d, idx[i]),
           TABLES * sizeof(int32_t));
    y[i] = dpt_interactions_label(d, idx[i]) > 0.5f;
  }
}

/* Row-wise Adagrad (kind DPT_TABLE_ROWWISE_ADAGRAD) or Adam on the hand-built model's tables
 * (emb_l.*), in host memory: `before` holds the parameters before the step, `after` those the
 * optimizer (SGD) gave; the tables' ranges of `after` are replaced by the update of `before`
 * with the gradient g (rows with a zero gradient are not touched). acc: Adagrad's accumulator,
 * row-wise Adam's second moment or the catch-up's last step, one per row of every table, in
 * tensor order; mom, vel: Adam's first and (per element) second moments, laid out as the
 * parameters; step: the 1-based step. */
static void hand_tables(const dpt_model *m, const float *before, const float *g, float *after,
                        float *acc, float *mom, float *vel, float lr, int kind, int64_t step) {
  const dpt_sparse_adam_params ap = {lr, DPT_TABLE_ADAM_BETA1, DPT_TABLE_ADAM_BETA2,
                                     DPT_TABLE_ADAM_EPS, step};
  size_t at = 0;
  for (size_t t = 0; t < dpt_model_num_tensors(m); ++t) {
    dpt_tensor_info ti;
    TU_OK(dpt_model_tensor(m, t, &ti));
    if (strncmp(ti.name, "emb_l.", 6) != 0) continue;
    const size_t rows = (size_t)ti.shape[0], dim = (size_t)ti.shape[1];
    memcpy(after + ti.offset, before + ti.offset, ti.count * sizeof(float));
    for (size_t r = 0; r < rows; ++r) {
      const int32_t id = (int32_t)r;
      const float *gr = g + ti.offset + r * dim;
      size_t nz = 0;
      for (size_t j = 0; j < dim; ++j)
        nz += gr[j] != 0.0f;
      if (nz == 0) continue;
      if (kind == DPT_TABLE_ADAM)
        TU_OK(dpt_sparse_adam_catchup_rows(after + ti.offset, mom + ti.offset, vel + ti.offset,
                                           acc + at, rows, dim, &id, gr, 1, &ap));
      else if (kind == DPT_TABLE_ROWWISE_ADAGRAD)
        TU_OK(dpt_sparse_adagrad_rows(after + ti.offset, acc + at, rows, dim, &id, gr, 1, lr,
                                      DPT_TABLE_ADAGRAD_EPS));
      else
        TU_OK(dpt_sparse_adam_rows(after + ti.offset, mom + ti.offset, acc + at, rows, dim, &id, gr,
                                   1, &ap));
    }
    at += rows;
  }
}

/* One model on the CPU stepped on the global batches the R replicas' slices make together:
 * SGD, or with `tables` (a dpt_table_optimizer) row-wise Adagrad or Adam on the tables. */
static void hand_built_with(int R, dpt_interactions **tr, float *params, size_t *touched,
                            int tables) {
  dpt_backend *be = tu_cpu();
  dpt_model_spec spec;
  dlrm_spec(&spec, 0);
  dpt_model *m = NULL;
  TU_OK(dpt_model_create(be, &spec, BATCH, &m));
  TU_OK(dpt_model_init(m, SEED));
  dpt_optim_config oc;
  dpt_optim_config_default(&oc, DPT_OPTIM_SGD);
  oc.lr = 0.1f;
  oc.momentum = 0.0f;
  dpt_optimizer *opt = NULL;
  TU_OK(dpt_optimizer_create(m, &oc, &opt));
  float hx[BATCH * (DENSE + TABLES)];
  int32_t hy[BATCH];
  uint64_t idx[BATCH];
  dpt_buffer *x = tu_buf(be, NULL, sizeof hx), *y = tu_buf(be, NULL, sizeof hy);
  const size_t np = dpt_model_num_params(m);
  float *before = malloc(np * sizeof(float)), *after = malloc(np * sizeof(float));
  float *g = malloc(np * sizeof(float)), *acc = calloc(TABLES * ROWS, sizeof(float));
  float *mom = calloc(np, sizeof(float)), *vel = calloc(np, sizeof(float));
  const uint64_t steps = dpt_interactions_steps(tr[0], BATCH);
  for (uint64_t e = 0; e < EPOCHS; ++e)
    for (uint64_t k = 0; k < steps; ++k) {
      size_t at = 0;
      for (int i = 0; i < R; ++i) {
        size_t start, count;
        TU_OK(dpt_batch_split(BATCH, R, i, &start, &count));
        ck_assert_uint_eq(start, at);
        ck_assert_uint_eq(count, dpt_interactions_local_batch(tr[i], BATCH));
        TU_OK(dpt_interactions_step_indices(tr[i], SEED, e, BATCH, k, idx));
        for (size_t j = 0; j < count; ++j)
          ck_assert_uint_lt(idx[j], dpt_interactions_local_records(tr[i]));
        put_records(tr[i], idx, count, hx + at * (DENSE + TABLES), hy + at);
        touched[i] += count;
        at += count;
      }
      TU_OK(dpt_buffer_upload(x, 0, hx, sizeof hx));
      TU_OK(dpt_buffer_upload(y, 0, hy, sizeof hy));
      TU_OK(dpt_model_train_step(m, x, y, BATCH, 1.0f / BATCH, NULL, NULL));
      if (tables) {
        TU_OK(dpt_model_get_params(m, before));
        TU_OK(dpt_buffer_download(dpt_model_grads(m), 0, g, np * sizeof(float)));
      }
      TU_OK(dpt_optimizer_step(opt, NULL));
      if (tables) {
        TU_OK(dpt_model_get_params(m, after));
        hand_tables(m, before, g, after, acc, mom, vel, oc.lr, tables,
                    (int64_t)(e * steps + k + 1));
        TU_OK(dpt_model_set_params(m, after));
      }
    }
  TU_OK(dpt_model_get_state(m, params));
  free(before), free(after), free(g), free(acc), free(mom), free(vel);
  dpt_buffer_free(x);
  dpt_buffer_free(y);
  dpt_optimizer_destroy(opt);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
}

static void hand_built(int R, dpt_interactions **tr, float *params, size_t *touched) {
  hand_built_with(R, tr, params, touched, 0);
}

/* The validation metrics computed directly: every validation record (one reader of the whole
 * set) scored with the final parameters. */
static void direct_metrics(const float *params, double *auc, double *logloss, double *loss,
                           double *acc) {
  dpt_interactions *all = NULL;
  TU_OK(dpt_interactions_open(pattern("val"), 0, 1, &all));
  const size_t n = dpt_interactions_local_records(all);
  dpt_backend *be = tu_cpu();
  dpt_model_spec spec;
  dlrm_spec(&spec, 0);
  dpt_model *m = NULL;
  TU_OK(dpt_model_create(be, &spec, n, &m));
  TU_OK(dpt_model_set_state(m, params));
  float *hx = malloc(n * (DENSE + TABLES) * sizeof(float)), *z = malloc(n * sizeof(float));
  float *p = malloc(n * sizeof(float)), *lab = malloc(n * sizeof(float));
  int32_t *hy = malloc(n * sizeof(int32_t));
  uint64_t *idx = malloc(n * sizeof(uint64_t));
  for (size_t i = 0; i < n; ++i)
    idx[i] = i;
  put_records(all, idx, n, hx, hy);
  dpt_buffer *x = tu_f32(be, hx, n * (DENSE + TABLES));
  TU_OK(dpt_model_logits(m, x, n, z));
  double sum = 0;
  size_t correct = 0;
  for (size_t i = 0; i < n; ++i) {
    lab[i] = (float)hy[i];
    p[i] = 1.0f / (1.0f + expf(-z[i]));
    const double zi = z[i];
    sum += (zi > 0 ? zi : 0) - zi * hy[i] + log1p(exp(-fabs(zi)));
    correct += (zi > 0) == (hy[i] == 1);
  }
  TU_OK(dpt_auc(z, lab, n, auc));
  TU_OK(dpt_logloss(p, lab, n, logloss));
  *loss = sum / (double)n;
  *acc = (double)correct / (double)n;
  dpt_buffer_free(x);
  free(hx), free(z), free(p), free(lab), free(hy), free(idx);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
  dpt_interactions_destroy(all);
}

START_TEST(replicas_train_on_their_shards) {
  write_shards("train", train_sizes, 5, 0);
  write_shards("val", val_sizes, 3, 1000000);
  for (int R = 1; R <= MAXR; ++R) {
    dpt_interactions *tr[MAXR] = {NULL}, *va[MAXR] = {NULL};
    open_readers("train", R, tr);
    open_readers("val", R, va);
    /* Each replica holds exactly its shards (s mod R = its index), all of them together. */
    size_t held = 0;
    for (int i = 0; i < R; ++i) {
      for (size_t j = 0; j < dpt_interactions_local_shards(tr[i]); ++j)
        ck_assert_int_eq((int)(dpt_interactions_local_shard(tr[i], j) % (size_t)R), i);
      held += dpt_interactions_local_records(tr[i]);
    }
    ck_assert_uint_eq(held, 180);
    dpt_train_config cfg;
    config(&cfg, R, tr, va);
    seen rep = {0};
    cfg.callbacks.on_report = on_report;
    cfg.callbacks.user = &rep;
    dpt_model *probe = NULL;
    dpt_backend *be = tu_cpu();
    TU_OK(dpt_model_create(be, &cfg.model, 1, &probe));
    const size_t np = dpt_model_state_size(probe);
    dpt_model_destroy(probe);
    dpt_backend_destroy(be);
    float *got = malloc(np * sizeof(float)), *want = malloc(np * sizeof(float));
    cfg.final_params = got;
    dpt_train_report fin;
    TU_OK(dpt_train(&cfg, NULL, &fin));
    /* The epoch rule: floor(180 / 24) = 7 steps per epoch, on every replica. */
    ck_assert_int_eq(rep.epochs, EPOCHS);
    ck_assert_int_eq((int)fin.steps, EPOCHS * 7);
    size_t touched[MAXR] = {0};
    hand_built(R, tr, want, touched);
    double worst = 0;
    for (size_t i = 0; i < np; ++i) {
      const double d = fabs((double)got[i] - (double)want[i]);
      worst = d > worst ? d : worst;
    }
    ck_assert_msg(worst <= 1e-5, "R=%d: the parameters differ from the hand-built run by %g", R,
                  worst);
    for (int i = 0; i < R; ++i) { /* each replica's slices: its share of every global batch */
      size_t start, count;
      TU_OK(dpt_batch_split(BATCH, R, i, &start, &count));
      ck_assert_uint_eq(touched[i], (size_t)EPOCHS * 7 * count);
    }
    /* The validation metrics over every replica's records equal the direct computation. */
    double auc, ll, loss, acc;
    direct_metrics(got, &auc, &ll, &loss, &acc);
    ck_assert_msg(fabs(rep.last.test_auc - auc) < 1e-6, "AUC %g, direct %g", rep.last.test_auc,
                  auc);
    ck_assert_msg(fabs(rep.last.test_logloss - ll) < 1e-6, "logloss %g, direct %g",
                  rep.last.test_logloss, ll);
    ck_assert_msg(fabs(rep.last.test_loss - loss) < 1e-6, "loss %g, direct %g", rep.last.test_loss,
                  loss);
    ck_assert_msg(fabs(rep.last.test_accuracy - acc) < 1e-12, "accuracy %g, direct %g",
                  rep.last.test_accuracy, acc);
    ck_assert(isfinite(fin.test_auc) && fin.test_auc > 0.5);
    free(got);
    free(want);
    for (int i = 0; i < R; ++i) {
      dpt_interactions_destroy(tr[i]);
      dpt_interactions_destroy(va[i]);
    }
  }
}
END_TEST

/* The largest difference between two parameter vectors over the model's tensors whose names
 * start with `prefix` ("" for all). */
static double worst_diff(const dpt_model *probe, const float *a, const float *b,
                         const char *prefix) {
  double worst = 0;
  for (size_t t = 0; t < dpt_model_num_tensors(probe); ++t) {
    dpt_tensor_info ti;
    TU_OK(dpt_model_tensor(probe, t, &ti));
    if (strncmp(ti.name, prefix, strlen(prefix)) != 0) continue;
    for (size_t i = ti.offset; i < ti.offset + ti.count; ++i) {
      const double d = fabs((double)a[i] - (double)b[i]);
      worst = d > worst ? d : worst;
    }
  }
  return worst;
}

/* sparse_tables: the tables' rows exchanged as (id, row) and stepped by row-wise SGD equal the
 * dense exchange and SGD step (no momentum, no weight decay) within 1e-5 per tensor, with 1, 2
 * and 3 replicas; replicas stay identical (the drift checks) also with AdamW on the rest. */
START_TEST(sparse_tables_equal_dense) {
  write_shards("train", train_sizes, 5, 0);
  for (int R = 1; R <= MAXR; ++R) {
    dpt_interactions *tr[MAXR] = {NULL};
    open_readers("train", R, tr);
    dpt_train_config cfg;
    config(&cfg, R, tr, NULL);
    cfg.optim.weight_decay = 0.0f;
    cfg.checks.check_every = 1;
    dpt_model *probe = NULL;
    dpt_backend *be = tu_cpu();
    TU_OK(dpt_model_create(be, &cfg.model, 1, &probe));
    const size_t np = dpt_model_state_size(probe);
    float *dense = malloc(np * sizeof(float)), *sparse = malloc(np * sizeof(float));
    float *init = malloc(np * sizeof(float)); /* the run's initialization, which it moves */
    TU_OK(dpt_model_init(probe, SEED));
    TU_OK(dpt_model_get_state(probe, init));
    cfg.final_params = dense;
    TU_OK(dpt_train(&cfg, NULL, NULL));
    cfg.exchange.sparse_tables = 1;
    cfg.table_lr = cfg.optim.lr; /* the dense run's rate, to compare */
    cfg.final_params = sparse;
    dpt_train_report fin;
    /* the default choice (dense here: the rows are a third of the table), always dense,
     * always sparse: the same parameters */
    static const double above[3] = {0, 1e-12, 1e30};
    for (int a = 0; a < 3; ++a) { /* fin: the last, always sparse */
      cfg.exchange.sparse_dense_above = above[a];
      TU_OK(dpt_train(&cfg, NULL, &fin));
      ck_assert_int_eq((int)fin.steps, EPOCHS * 7);
      if (R > 1 && a == 1)
        ck_assert_uint_eq(fin.sparse_sent_bytes,
                          fin.sparse_dense_bytes + (uint64_t)(EPOCHS * 7 * TABLES * (R - 1) * 32));
      for (size_t t = 0; t < dpt_model_num_tensors(probe); ++t) {
        dpt_tensor_info ti;
        TU_OK(dpt_model_tensor(probe, t, &ti));
        double worst = 0;
        for (size_t i = ti.offset; i < ti.offset + ti.count; ++i) {
          const double d = fabs((double)dense[i] - (double)sparse[i]);
          worst = d > worst ? d : worst;
        }
        ck_assert_msg(worst <= 1e-5, "R=%d, dense above %g: %s differs from the dense run by %g", R,
                      above[a], ti.name, worst);
      }
      ck_assert_msg(worst_diff(probe, sparse, init, "emb_l.") > 1e-4,
                    "R=%d, dense above %g: the tables did not move", R, above[a]);
    }
    if (R > 1) {
      ck_assert(fin.sparse_sent_bytes > 0);
      ck_assert(fin.sparse_sent_bytes < fin.sparse_dense_bytes);
      printf("sparse tables, %d replicas, 3 tables of 50 x 4, batch 24: %.0f bytes sent per "
             "replica per step, the dense ring %.0f\n",
             R, (double)fin.sparse_sent_bytes / (double)fin.steps,
             (double)fin.sparse_dense_bytes / (double)fin.steps);
    } else {
      ck_assert(fin.sparse_sent_bytes == 0);
    }
    cfg.exchange.sparse_dense_above = -1;
    EXPECT_FAIL(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG, "sparse_dense_above", NULL, NULL);
    cfg.exchange.sparse_dense_above = 0;
    /* AdamW on the dense part: the replicas stay identical (every step's drift check). */
    dpt_optim_config_default(&cfg.optim, DPT_OPTIM_ADAMW);
    cfg.schedule.epochs = 1;
    cfg.final_params = NULL;
    TU_OK(dpt_train(&cfg, NULL, NULL));
    /* Refused: clipping, and data sets instead of per-replica records. */
    cfg.optim.clip_norm = 1.0f;
    EXPECT_FAIL(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG, "does not clip", NULL, NULL);
    cfg.optim.clip_norm = 0.0f;
    cfg.exchange.skip_allreduce = 1;
    EXPECT_FAIL(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG, "skip_allreduce", NULL, NULL);
    dpt_model_destroy(probe);
    dpt_backend_destroy(be);
    free(dense);
    free(sparse);
    free(init);
    for (int i = 0; i < R; ++i)
      dpt_interactions_destroy(tr[i]);
  }
}
END_TEST

/* cfg set for R replicas on tr with the table optimizer `kind` at the hand-built run's rate:
 * the sparse and the dense exchange each end within 1e-5 of want (the parameters into got). */
static void run_tables_like(dpt_train_config *cfg, const dpt_model *probe, int R,
                            dpt_interactions **tr, int kind, const float *want, float *got) {
  config(cfg, R, tr, NULL);
  cfg->exchange.sparse_tables = 1;
  cfg->table_lr = cfg->optim.lr;
  cfg->exchange.table_optimizer = kind;
  cfg->final_params = got;
  static const double above[2] = {1e30, 1e-12}; /* always sparse, always dense */
  for (int a = 0; a < 2; ++a) {
    cfg->exchange.sparse_dense_above = above[a];
    TU_OK(dpt_train(cfg, NULL, NULL));
    const double d = worst_diff(probe, want, got, "");
    ck_assert_msg(d <= 1e-5, "R=%d, table optimizer %d, dense above %g: %g from the hand-built run",
                  R, kind, above[a], d);
  }
}

/* cfg's run uninterrupted (into want), then stopped after step 5 (a checkpoint in "ckpt") and
 * resumed (into got): the same np floats, bit for bit. cfg keeps the checkpoint settings. */
static void stop_and_resume(dpt_train_config *cfg, float *want, float *got, size_t np) {
  cfg->exchange.sparse_dense_above = 0;
  cfg->final_params = want;
  TU_OK(dpt_train(cfg, NULL, NULL));
  cfg->checkpoints.checkpoint_dir = tpath("ckpt");
  cfg->checkpoints.checkpoint_every = 5;
  cfg->schedule.max_steps = 5;
  cfg->final_params = NULL;
  TU_OK(dpt_train(cfg, NULL, NULL));
  cfg->schedule.max_steps = 0;
  cfg->checkpoints.resume = 1;
  cfg->final_params = got;
  TU_OK(dpt_train(cfg, NULL, NULL));
  ck_assert_int_eq(memcmp(want, got, np * sizeof(float)), 0);
}

/* Row-wise Adagrad on the tables: with 1, 2 and 3 replicas, the dense or the sparse exchange,
 * the run equals the hand-built model stepped with Adagrad on the tables within 1e-5 (and not
 * the SGD run); a run stopped at a checkpoint and resumed ends bit for bit as the uninterrupted
 * one (the accumulators are saved and restored); another table optimizer on resume, or Adagrad
 * without sparse_tables, is refused. */
START_TEST(rowwise_adagrad_tables) {
  write_shards("train", train_sizes, 5, 0);
  dpt_train_config cfg;
  dpt_model *probe = NULL;
  dpt_backend *be = tu_cpu();
  config(&cfg, 1, NULL, NULL);
  TU_OK(dpt_model_create(be, &cfg.model, 1, &probe));
  const size_t np = dpt_model_state_size(probe);
  float *want = malloc(np * sizeof(float)), *got = malloc(np * sizeof(float));
  float *sgd = malloc(np * sizeof(float));
  for (int R = 1; R <= MAXR; ++R) {
    dpt_interactions *tr[MAXR] = {NULL};
    open_readers("train", R, tr);
    size_t touched[MAXR] = {0};
    hand_built_with(R, tr, want, touched, DPT_TABLE_ROWWISE_ADAGRAD);
    hand_built_with(R, tr, sgd, touched, 0);
    ck_assert(worst_diff(probe, want, sgd, "emb_l.") > 1e-3);
    run_tables_like(&cfg, probe, R, tr, DPT_TABLE_ROWWISE_ADAGRAD, want, got);
    if (R == 2) {
      stop_and_resume(&cfg, want, got, np);
      cfg.exchange.table_optimizer = DPT_TABLE_SGD;
      EXPECT_FAIL(dpt_train(&cfg, NULL, NULL), DPT_ERR_MISMATCH, "the tables' optimizer", NULL,
                  NULL);
      cfg.checkpoints.checkpoint_dir = NULL;
      cfg.checkpoints.resume = 0;
      cfg.exchange.table_optimizer = DPT_TABLE_ROWWISE_ADAGRAD;
      cfg.exchange.sparse_tables = 0;
      EXPECT_FAIL(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG, "needs sparse_tables", NULL,
                  NULL);
      cfg.exchange.table_optimizer = DPT_TABLE_SGD; /* table_lr is still set */
      EXPECT_FAIL(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG, "table_lr needs sparse_tables",
                  NULL, NULL);
      cfg.exchange.sparse_tables = 1;
      cfg.table_lr = -1;
      EXPECT_FAIL(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG, "table_lr -1 must be >= 0",
                  NULL, NULL);
      cfg.table_lr = cfg.optim.lr * 2; /* another rate: refused on resume, named */
      cfg.exchange.table_optimizer = DPT_TABLE_ROWWISE_ADAGRAD;
      cfg.checkpoints.checkpoint_dir = tpath("ckpt");
      cfg.checkpoints.resume = 1;
      EXPECT_FAIL(dpt_train(&cfg, NULL, NULL), DPT_ERR_MISMATCH, "the tables' learning rate", NULL,
                  NULL);
    }
    for (int i = 0; i < R; ++i)
      dpt_interactions_destroy(tr[i]);
  }
  dpt_model_destroy(probe);
  dpt_backend_destroy(be);
  free(want);
  free(got);
  free(sgd);
}
END_TEST

/* The row-wise Adam state of table emb_l.0 in the newest checkpoint of dir: row_m [rows, dim],
 * row_v [rows] with a row moved, no Adagrad accumulator. */
static void check_adam_state(const char *dir, size_t rows, size_t dim) {
  char path[4096];
  int found = 0;
  TU_OK(dpt_checkpoint_find_latest(dir, NULL, NULL, path, sizeof path, &found, NULL));
  ck_assert_int_eq(found, 1);
  dpt_safetensors *st = NULL;
  TU_OK(dpt_safetensors_open(path, &st));
  dpt_st_info m, v, a;
  TU_OK(dpt_safetensors_find(st, "optimizer.row_m.emb_l.0.weight", &m));
  TU_OK(dpt_safetensors_find(st, "optimizer.row_v.emb_l.0.weight", &v));
  ck_assert_int_eq(m.ndim, 2);
  ck_assert_int_eq((int)m.shape[0], (int)rows);
  ck_assert_int_eq((int)m.shape[1], (int)dim);
  ck_assert_int_eq(v.ndim, 1);
  ck_assert_int_eq((int)v.shape[0], (int)rows);
  ck_assert_int_ne(dpt_safetensors_find(st, "optimizer.row_sum.emb_l.0.weight", &a), DPT_OK);
  float *hv = malloc(rows * sizeof(float));
  TU_OK(dpt_safetensors_read_f32(st, v.name, hv, rows));
  size_t moved = 0;
  for (size_t r = 0; r < rows; ++r)
    moved += hv[r] > 0;
  ck_assert_uint_gt(moved, 0);
  free(hv);
  dpt_safetensors_close(st);
}

/* The checkpoint in "ckpt" resumed with 1 replica and table optimizer kind: it runs to the end. */
static void resume_on_one(dpt_train_config *cfg, int kind) {
  dpt_interactions *one[1] = {NULL};
  open_readers("train", 1, one);
  config(cfg, 1, one, NULL);
  cfg->exchange.sparse_tables = 1;
  cfg->table_lr = cfg->optim.lr;
  cfg->exchange.table_optimizer = kind;
  cfg->checkpoints.checkpoint_dir = tpath("ckpt");
  cfg->checkpoints.resume = 1;
  dpt_train_report fin;
  TU_OK(dpt_train(cfg, NULL, &fin));
  ck_assert_int_eq((int)fin.steps, EPOCHS * 7);
  dpt_interactions_destroy(one[0]);
}

/* Row-wise Adam on the tables: with 1, 2 and 3 replicas, the dense or the sparse exchange, the
 * run equals the hand-built model stepped with row-wise Adam on the tables within 1e-5 (and
 * neither Adagrad's nor SGD's run); with 2 replicas a run stopped at a checkpoint (its moments
 * saved as optimizer.row_m / row_v) and resumed ends bit for bit as the uninterrupted one, the
 * checkpoint resumes with 1 replica, and another table optimizer on resume is refused. */
START_TEST(rowwise_adam_tables) {
  write_shards("train", train_sizes, 5, 0);
  dpt_train_config cfg;
  dpt_model *probe = NULL;
  dpt_backend *be = tu_cpu();
  config(&cfg, 1, NULL, NULL);
  TU_OK(dpt_model_create(be, &cfg.model, 1, &probe));
  dpt_tensor_info t0 = {0};
  for (size_t t = 0; t < dpt_model_num_tensors(probe); ++t)
    if (dpt_model_tensor(probe, t, &t0) == DPT_OK && !strcmp(t0.name, "emb_l.0.weight")) break;
  ck_assert_str_eq(t0.name, "emb_l.0.weight");
  const size_t np = dpt_model_state_size(probe);
  float *want = malloc(np * sizeof(float)), *got = malloc(np * sizeof(float));
  float *other = malloc(np * sizeof(float));
  for (int R = 1; R <= MAXR; ++R) {
    dpt_interactions *tr[MAXR] = {NULL};
    open_readers("train", R, tr);
    size_t touched[MAXR] = {0};
    hand_built_with(R, tr, want, touched, DPT_TABLE_ROWWISE_ADAM);
    hand_built_with(R, tr, other, touched, DPT_TABLE_ROWWISE_ADAGRAD);
    ck_assert(worst_diff(probe, want, other, "emb_l.") > 1e-3);
    hand_built_with(R, tr, other, touched, 0);
    ck_assert(worst_diff(probe, want, other, "emb_l.") > 1e-3);
    run_tables_like(&cfg, probe, R, tr, DPT_TABLE_ROWWISE_ADAM, want, got);
    if (R == 2) {
      stop_and_resume(&cfg, want, got, np);
      check_adam_state(cfg.checkpoints.checkpoint_dir, ROWS, (size_t)t0.shape[1]);
      cfg.exchange.table_optimizer = DPT_TABLE_ROWWISE_ADAGRAD;
      EXPECT_FAIL(dpt_train(&cfg, NULL, NULL), DPT_ERR_MISMATCH, "the tables' optimizer", NULL,
                  NULL);
      resume_on_one(&cfg, DPT_TABLE_ROWWISE_ADAM);
      config(&cfg, R, tr, NULL);
    }
    for (int i = 0; i < R; ++i)
      dpt_interactions_destroy(tr[i]);
  }
  dpt_model_destroy(probe);
  dpt_backend_destroy(be);
  free(want);
  free(got);
  free(other);
}
END_TEST

/* Adam with catch-up on the tables (DPT_TABLE_ADAM): with 1, 2 and 3 replicas, the dense or the
 * sparse exchange, the run equals the hand-built model within 1e-5 (and not row-wise Adam's);
 * with 2 replicas a run stopped at a checkpoint (row_m, row_v [rows, dim], row_last [rows]
 * saved) and resumed ends bit for bit as the uninterrupted one, and the checkpoint resumes with
 * 1 replica. */
START_TEST(adam_catchup_tables) {
  write_shards("train", train_sizes, 5, 0);
  dpt_train_config cfg;
  dpt_model *probe = NULL;
  dpt_backend *be = tu_cpu();
  config(&cfg, 1, NULL, NULL);
  TU_OK(dpt_model_create(be, &cfg.model, 1, &probe));
  const size_t np = dpt_model_state_size(probe);
  float *want = malloc(np * sizeof(float)), *got = malloc(np * sizeof(float));
  float *other = malloc(np * sizeof(float));
  for (int R = 1; R <= MAXR; ++R) {
    dpt_interactions *tr[MAXR] = {NULL};
    open_readers("train", R, tr);
    size_t touched[MAXR] = {0};
    hand_built_with(R, tr, want, touched, DPT_TABLE_ADAM);
    hand_built_with(R, tr, other, touched, DPT_TABLE_ROWWISE_ADAM);
    ck_assert(worst_diff(probe, want, other, "emb_l.") > 1e-4);
    run_tables_like(&cfg, probe, R, tr, DPT_TABLE_ADAM, want, got);
    if (R == 2) {
      stop_and_resume(&cfg, want, got, np);
      char path[4096];
      int found = 0;
      TU_OK(dpt_checkpoint_find_latest(cfg.checkpoints.checkpoint_dir, NULL, NULL, path,
                                       sizeof path, &found, NULL));
      ck_assert_int_eq(found, 1);
      dpt_safetensors *st = NULL;
      TU_OK(dpt_safetensors_open(path, &st));
      dpt_st_info v, last;
      TU_OK(dpt_safetensors_find(st, "optimizer.row_v.emb_l.0.weight", &v));
      TU_OK(dpt_safetensors_find(st, "optimizer.row_last.emb_l.0.weight", &last));
      ck_assert_int_eq(v.ndim, 2);
      ck_assert_int_eq(last.ndim, 1);
      ck_assert_int_eq((int)last.shape[0], ROWS);
      float hl[ROWS];
      TU_OK(dpt_safetensors_read_f32(st, last.name, hl, ROWS));
      float newest = 0;
      for (int r = 0; r < ROWS; ++r)
        newest = hl[r] > newest ? hl[r] : newest;
      ck_assert_float_eq(newest, (float)(EPOCHS * 7)); /* the resumed run's, at its end */
      dpt_safetensors_close(st);
      resume_on_one(&cfg, DPT_TABLE_ADAM);
      config(&cfg, R, tr, NULL);
    }
    for (int i = 0; i < R; ++i)
      dpt_interactions_destroy(tr[i]);
  }
  dpt_model_destroy(probe);
  dpt_backend_destroy(be);
  free(want);
  free(got);
  free(other);
}
END_TEST

START_TEST(bad_readers_refused) {
  write_shards("train", train_sizes, 5, 0);
  dpt_interactions *tr[2] = {NULL}, *wrong[2] = {NULL};
  open_readers("train", 2, tr);
  dpt_train_config cfg;
  config(&cfg, 2, tr, NULL);
  cfg.schedule.epochs = 1;
  cfg.schedule.max_steps = 1;
  /* Readers opened for another world size, or swapped. */
  TU_OK(dpt_interactions_open(pattern("train"), 0, 1, &wrong[0]));
  wrong[1] = tr[1];
  cfg.data.local_train = wrong;
  EXPECT_FAIL(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG, "opened as rank 0 of 1", NULL,
              NULL);
  dpt_interactions *swapped[2] = {tr[1], tr[0]};
  cfg.data.local_train = swapped;
  EXPECT_FAIL(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG, "replica 0", NULL, NULL);
  cfg.data.local_train = tr;
  /* A global batch beyond the records, settings that do not apply. */
  cfg.schedule.global_batch = 181;
  EXPECT_FAIL(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG, "180 training records", NULL, NULL);
  cfg.schedule.global_batch = BATCH;
  cfg.schedule.shuffle = 0;
  EXPECT_FAIL(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG, "epoch rule", NULL, NULL);
  cfg.schedule.shuffle = 1;
  /* The model's tables smaller than the shards' (ids beyond a table). */
  dlrm_spec(&cfg.model, ROWS - 10);
  EXPECT_FAIL(dpt_train(&cfg, NULL, NULL), DPT_ERR_INVALID_ARG, "beyond the 40 rows", "emb_l.0",
              NULL);
  dlrm_spec(&cfg.model, 0);
  TU_OK(dpt_train(&cfg, NULL, NULL));
  dpt_interactions_destroy(wrong[0]);
  dpt_interactions_destroy(tr[0]);
  dpt_interactions_destroy(tr[1]);
}
END_TEST

/* ---- a device against the CPU --------------------------------------------------------------- */

static dpt_backend_kind device_kind = DPT_BACKEND_CPU;

/* Tables of BIG_ROWS x 4 floats (32000 bytes), beyond the Vulkan windows shrunk to 4 KiB by
 * test_train_shards_vulkan_big_table: 2 replicas train on the device as on the CPU, with AdamW
 * and clipping (the sharded step: reduce-scatter, the optimizer over each replica's ranges, the
 * fingerprint checks every step) and with sparse_tables (dense ranges all-reduced and stepped,
 * the tables' rows by row-wise SGD). The final parameters agree within 1e-5. */
enum { BIG_ROWS = 2000 };
START_TEST(device_big_tables) {
  if (!tu_device_present(device_kind)) {
    printf("%s: no device, nothing to compare\n", dpt_backend_kind_name(device_kind));
    return;
  }
  const char *range = getenv("DPT_VULKAN_TEST_MAX_RANGE");
  if (device_kind == DPT_BACKEND_VULKAN) {
    ck_assert_msg(range != NULL, "DPT_VULKAN_TEST_MAX_RANGE is not set");
    ck_assert_uint_gt(BIG_ROWS * 4 * sizeof(float), 3 * strtoul(range, NULL, 10));
  }
  write_shards_rows("train", train_sizes, 5, 0, BIG_ROWS);
  enum { R = 2 };
  for (int sparse = 0; sparse < 2; ++sparse) {
    float *got[2] = {NULL, NULL};
    size_t np = 0;
    for (int k = 0; k < 2; ++k) {
      dpt_interactions *tr[R] = {NULL};
      open_readers("train", R, tr);
      dpt_train_config cfg;
      config(&cfg, R, tr, NULL);
      dlrm_spec(&cfg.model, BIG_ROWS);
      cfg.devices.backend = k ? device_kind : DPT_BACKEND_CPU;
      cfg.checks.check_every = 1;
      cfg.exchange.sparse_tables = sparse;
      if (!sparse) {
        dpt_optim_config_default(&cfg.optim, DPT_OPTIM_ADAMW);
        cfg.optim.lr = 0.01f;
        cfg.optim.clip_norm = 0.5f;
      }
      dpt_model *probe = NULL;
      dpt_backend *be = tu_cpu();
      TU_OK(dpt_model_create(be, &cfg.model, 1, &probe));
      np = dpt_model_state_size(probe);
      dpt_model_destroy(probe);
      dpt_backend_destroy(be);
      got[k] = malloc(np * sizeof(float));
      cfg.final_params = got[k];
      dpt_train_report fin;
      TU_OK(dpt_train(&cfg, NULL, &fin));
      ck_assert_int_eq((int)fin.steps, EPOCHS * 7);
      for (int i = 0; i < R; ++i)
        dpt_interactions_destroy(tr[i]);
    }
    double worst = 0;
    for (size_t i = 0; i < np; ++i) {
      const double d = fabs((double)got[1][i] - (double)got[0][i]);
      worst = d > worst ? d : worst;
    }
    ck_assert_msg(worst <= 1e-5, "%s: the parameters differ from the CPU's by %g",
                  sparse ? "sparse_tables" : "AdamW", worst);
    printf("%s, tables of %d rows, %s: worst parameter difference %.3g\n",
           dpt_backend_kind_name(device_kind), BIG_ROWS, sparse ? "sparse_tables" : "AdamW", worst);
    free(got[0]);
    free(got[1]);
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("train_shards");
  TCase *tc = tcase_create("shards");
  tcase_set_timeout(tc, 240);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, replicas_train_on_their_shards);
  tcase_add_test(tc, bad_readers_refused);
  tcase_add_test(tc, sparse_tables_equal_dense);
  tcase_add_test(tc, rowwise_adagrad_tables);
  tcase_add_test(tc, rowwise_adam_tables);
  tcase_add_test(tc, adam_catchup_tables);
  suite_add_tcase(s, tc);
  return s;
}

/* Usage: test_train_shards                 the suite above (CPU)
 *        test_train_shards backend <kind>  the big-table run on the device against the CPU */
int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "backend") == 0) {
    if (dpt_backend_kind_parse(argv[2], &device_kind) != DPT_OK) return 2;
    Suite *s = suite_create("train_shards_device");
    TCase *tc = tcase_create("device");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, device_big_tables);
    suite_add_tcase(s, tc);
    return tu_run(s);
  }
  return tu_run(suite());
}
