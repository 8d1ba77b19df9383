/* The terms of a run: everything that decides its numerics, one 64-bit word per field, which
 * every replica contributes at start-up so that replicas started with different settings or
 * data stop before the first step, naming the field and the replicas that differ. */
#include "core/train/run_terms.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "dptrain/fingerprint.h"

typedef enum term_kind { TERM_INT, TERM_FLOAT, TERM_HASH } term_kind;

/* The fields: X(ENUM, "name in messages", kind), settings before what derives from them (a
 * different step limit is named as that, not as the cosine length it gives). */
#define DPT_RUN_TERMS(X)                                                                           \
  X(TRAIN_SAMPLES, "training samples", TERM_INT)                                                   \
  X(TEST_SAMPLES, "test samples (-1: no test set)", TERM_INT)                                      \
  X(TRAIN_DATA, "the training set's contents (dpt_dataset_fingerprint)", TERM_HASH)                \
  X(TEST_DATA, "the test set's contents (dpt_dataset_fingerprint)", TERM_HASH)                     \
  X(MODEL, "the model (model spec)", TERM_HASH)                                                    \
  X(OPTIMIZER, "the optimizer (optim.kind: 0 sgd, 1 adamw)", TERM_INT)                             \
  X(LR, "the learning rate (optim.lr)", TERM_FLOAT)                                                \
  X(MOMENTUM, "the momentum (optim.momentum)", TERM_FLOAT)                                         \
  X(NESTEROV, "Nesterov momentum (optim.nesterov)", TERM_INT)                                      \
  X(WEIGHT_DECAY, "the weight decay (optim.weight_decay)", TERM_FLOAT)                             \
  X(BETA1, "AdamW's beta1 (optim.beta1)", TERM_FLOAT)                                              \
  X(BETA2, "AdamW's beta2 (optim.beta2)", TERM_FLOAT)                                              \
  X(EPS, "AdamW's eps (optim.eps)", TERM_FLOAT)                                                    \
  X(SCHEDULE, "the schedule (optim.schedule: 0 constant, 1 step, 2 cosine)", TERM_INT)             \
  X(WARMUP, "the warmup steps (optim.warmup_steps)", TERM_INT)                                     \
  X(STEP_SIZE, "the step schedule's period (optim.step_size)", TERM_INT)                           \
  X(GAMMA, "the step schedule's factor (optim.gamma)", TERM_FLOAT)                                 \
  X(MIN_LR, "the cosine schedule's floor (optim.min_lr)", TERM_FLOAT)                              \
  X(CLIP_NORM, "the gradient clipping norm (optim.clip_norm)", TERM_FLOAT)                         \
  X(GLOBAL_BATCH, "the global batch (global_batch)", TERM_INT)                                     \
  X(EPOCHS, "the epochs (epochs)", TERM_INT)                                                       \
  X(MAX_STEPS, "the step limit (max_steps)", TERM_INT)                                             \
  X(SEED, "the seed (seed)", TERM_INT)                                                             \
  X(SHUFFLE, "shuffling (shuffle)", TERM_INT)                                                      \
  X(KEEP_LAST, "keeping the last partial batch (keep_last)", TERM_INT)                             \
  X(CHECK_EVERY, "the drift check period (check_every)", TERM_INT)                                 \
  X(NONFINITE, "the non-finite step policy (on_nonfinite: 0 stop, 1 skip, 2 rollback)", TERM_INT)  \
  X(MAX_SKIPPED, "the skipped-step limit (max_skipped)", TERM_INT)                                 \
  X(SKIP_ALLREDUCE, "skipping the gradient exchange (skip_allreduce)", TERM_INT)                   \
  X(FULL_STEP, "the full optimizer step (full_optimizer_step)", TERM_INT)                          \
  X(TOTAL_STEPS, "the cosine schedule's length (optim.total_steps)", TERM_INT)                     \
  X(SYNC_BN, "synchronized batch norm (sync_bn)", TERM_INT)                                        \
  X(DECAY_SCOPE, "weight decay on weights only (optim.decay_weights_only)", TERM_INT)              \
  X(NO_DECAY, "the tensors without weight decay (optim.no_decay)", TERM_HASH)                      \
  X(NORMALIZE, "the normalization (transform.channels, mean, std)", TERM_HASH)                     \
  X(AUGMENT, "the augmentation (transform.crop_pad, hflip, seed)", TERM_HASH)                      \
  X(SPARSE_TABLES, "sparse table gradients (sparse_tables)", TERM_INT)                             \
  X(SPARSE_DENSE_ABOVE, "the sparse exchange's threshold (sparse_dense_above)", TERM_FLOAT)        \
  X(TABLE_OPTIMIZER,                                                                               \
    "the tables' optimizer (table_optimizer: 0 sgd, 1 row-wise adagrad, 2 row-wise adam)",         \
    TERM_INT)                                                                                      \
  X(TABLE_LR, "the tables' learning rate (table_lr)", TERM_FLOAT)                                  \
  X(ACCUMULATE, "the micro-batches per slice (accumulate)", TERM_INT)                              \
  X(BUCKET_BYTES, "the gradient buckets' size (bucket_bytes)", TERM_INT)                           \
  X(GRAD_DTYPE,                                                                                    \
    "the gradient exchange's type (grad_dtype: 0 f32, 1 f16, 2 f16 with error feedback, 3 bf16, "  \
    "4 bf16 with error feedback)",                                                                 \
    TERM_INT)                                                                                      \
  X(SPLIT, "the batch split (split, split_every: 0 even, else the proportional split's period)",   \
    TERM_INT)                                                                                      \
  X(BUCKET_WHOLE_UPDATE, "the update after the last gradient bucket (bucket_whole_update)",        \
    TERM_INT)                                                                                      \
  X(GROUPS, "the deterministic groups' size (deterministic, group_size; 0: off)", TERM_INT)

enum {
#define DPT_TERM_ENUM_(e, name, kind) TERM_##e,
  DPT_RUN_TERMS(DPT_TERM_ENUM_)
#undef DPT_TERM_ENUM_
      TERM_COUNT_
};
_Static_assert(TERM_COUNT_ == DPT_RUN_TERM_COUNT, "DPT_RUN_TERM_COUNT matches the list");

static const struct {
  const char *key; /* the field's key in checkpoints: its enum name */
  const char *name;
  term_kind kind;
} terms[] = {
#define DPT_TERM_ROW_(e, name, kind) {#e, name, kind},
    DPT_RUN_TERMS(DPT_TERM_ROW_)
#undef DPT_TERM_ROW_
};

static uint64_t int_word(int64_t v) {
  return (uint64_t)v;
}

static uint64_t float_word(double v) {
  uint64_t w;
  memcpy(&w, &v, sizeof w);
  return w;
}

/* A fixed-size name up to its NUL. */
static uint64_t name_word(const char *name, size_t cap) {
  const char *end = memchr(name, '\0', cap);
  return dpt_fingerprint(name, end ? (size_t)(end - name) : cap);
}

/* The model spec field by field (its padding bytes are not part of it), one word per layer. */
static uint64_t model_word(const dpt_model_spec *m) {
  uint64_t w[6 + DPT_MODEL_MAX_LAYERS];
  size_t n = 0;
  if (m->seq_len) w[n++] = m->seq_len; /* only for token models, as the fields below */
  w[n++] = m->in_c;
  w[n++] = m->in_h;
  w[n++] = m->in_w;
  w[n++] = m->num_classes;
  w[n++] = m->num_layers;
  for (size_t i = 0; i < m->num_layers && i < DPT_MODEL_MAX_LAYERS; ++i) {
    const dpt_layer_spec *l = &m->layers[i];
    uint64_t f[20] = {(uint64_t)l->kind,
                      l->size,
                      l->kernel,
                      l->stride,
                      l->padding,
                      int_word(l->no_bias),
                      float_word(l->p),
                      int_word(l->num_inputs),
                      int_word(l->inputs[0]),
                      int_word(l->inputs[1]),
                      name_word(l->name, sizeof l->name),
                      float_word(l->eps),
                      int_word(l->approximate),
                      l->vocab,
                      l->heads,
                      int_word(l->tie),
                      float_word(l->init_std),
                      l->offset,
                      l->bag,
                      int_word(l->mode)};
    /* the later fields only when set, so models without them keep their fingerprint */
    int record = l->offset || l->bag || l->mode;
    int token = record || l->vocab || l->heads || l->tie || l->init_std != 0.0f;
    int later = token || l->eps != 0.0f || l->approximate != 0;
    w[n++] = dpt_fingerprint(f, (record ? 20 : token ? 17 : later ? 13 : 11) * sizeof f[0]);
  }
  return dpt_fingerprint(w, n * sizeof w[0]);
}

/* The transform's normalization and augmentation, value by value. */
static void transform_words(const dpt_data_transform *t, uint64_t *w) {
  uint64_t v[1 + 2 * 64];
  size_t n = 0;
  v[n++] = t->mean ? t->channels : 0;
  for (size_t c = 0; t->mean && c < t->channels; ++c) {
    if (n + 2 > sizeof v / sizeof v[0]) { /* many channels: fold what is there, go on */
      v[0] = dpt_fingerprint(v, n * sizeof v[0]);
      n = 1;
    }
    v[n++] = float_word(t->mean[c]);
    v[n++] = float_word(t->std[c]);
  }
  w[TERM_NORMALIZE] = dpt_fingerprint(v, n * sizeof v[0]);
  const uint64_t a[3] = {t->crop_pad, (uint64_t)t->hflip, t->crop_pad || t->hflip ? t->seed : 0};
  w[TERM_AUGMENT] = dpt_fingerprint(a, sizeof a);
}

static void optim_words(const dpt_optim_config *o, uint64_t *w) {
  w[TERM_OPTIMIZER] = int_word(o->kind);
  w[TERM_LR] = float_word(o->lr);
  w[TERM_MOMENTUM] = float_word(o->momentum);
  w[TERM_NESTEROV] = int_word(o->nesterov);
  w[TERM_WEIGHT_DECAY] = float_word(o->weight_decay);
  w[TERM_BETA1] = float_word(o->beta1);
  w[TERM_BETA2] = float_word(o->beta2);
  w[TERM_EPS] = float_word(o->eps);
  w[TERM_SCHEDULE] = int_word(o->schedule);
  w[TERM_WARMUP] = int_word(o->warmup_steps);
  w[TERM_STEP_SIZE] = int_word(o->step_size);
  w[TERM_GAMMA] = float_word(o->gamma);
  w[TERM_TOTAL_STEPS] = int_word(o->total_steps);
  w[TERM_MIN_LR] = float_word(o->min_lr);
  w[TERM_CLIP_NORM] = float_word(o->clip_norm);
  w[TERM_DECAY_SCOPE] = int_word(o->decay_weights_only);
  w[TERM_NO_DECAY] = o->no_decay ? dpt_fingerprint(o->no_decay, strlen(o->no_decay)) : 0;
}

void dpt_run_terms(const dpt_train_config *cfg, uint64_t *w) {
  w[TERM_TRAIN_SAMPLES] = int_word((int64_t)dpt_dataset_count(cfg->data.train));
  w[TERM_TEST_SAMPLES] = int_word(cfg->data.test ? (int64_t)dpt_dataset_count(cfg->data.test) : -1);
  w[TERM_TRAIN_DATA] = dpt_dataset_fingerprint(cfg->data.train);
  w[TERM_TEST_DATA] = dpt_dataset_fingerprint(cfg->data.test);
  if (cfg->data.local_train) { /* per-replica shards: every reader has the headers of all of them */
    const dpt_interactions *tr = cfg->data.local_train[0];
    const dpt_interactions *te = cfg->data.local_test ? cfg->data.local_test[0] : NULL;
    w[TERM_TRAIN_SAMPLES] = int_word((int64_t)dpt_interactions_total_records(tr));
    w[TERM_TEST_SAMPLES] = int_word(te ? (int64_t)dpt_interactions_total_records(te) : -1);
    w[TERM_TRAIN_DATA] = dpt_interactions_fingerprint(tr);
    w[TERM_TEST_DATA] = dpt_interactions_fingerprint(te);
  }
  w[TERM_MODEL] = model_word(&cfg->model);
  optim_words(&cfg->optim, w);
  w[TERM_GLOBAL_BATCH] = int_word((int64_t)cfg->schedule.global_batch);
  w[TERM_EPOCHS] = int_word(cfg->schedule.epochs);
  w[TERM_MAX_STEPS] = int_word(cfg->schedule.max_steps);
  w[TERM_SEED] = cfg->schedule.seed;
  w[TERM_SHUFFLE] = int_word(cfg->schedule.shuffle);
  w[TERM_KEEP_LAST] = int_word(cfg->schedule.keep_last);
  w[TERM_CHECK_EVERY] = int_word(cfg->checks.check_every);
  w[TERM_NONFINITE] = int_word(cfg->checks.on_nonfinite);
  w[TERM_MAX_SKIPPED] = int_word(cfg->checks.max_skipped);
  w[TERM_SKIP_ALLREDUCE] = int_word(cfg->exchange.skip_allreduce);
  w[TERM_FULL_STEP] = int_word(cfg->exchange.full_optimizer_step);
  w[TERM_SYNC_BN] = int_word(cfg->exchange.sync_bn);
  w[TERM_SPARSE_TABLES] = int_word(cfg->exchange.sparse_tables);
  w[TERM_SPARSE_DENSE_ABOVE] = float_word(cfg->exchange.sparse_dense_above);
  w[TERM_TABLE_OPTIMIZER] = int_word(cfg->exchange.table_optimizer);
  w[TERM_TABLE_LR] = float_word(dpt_train_table_lr(cfg));
  w[TERM_BUCKET_BYTES] = int_word((int64_t)cfg->exchange.bucket_bytes);
  /* f32 0, f16 1 (2 with error feedback), bf16 3 (4): the f16 words predate bf16. */
  const int64_t dtype_word =
      cfg->exchange.grad_dtype == DPT_COMM_BF16 ? 3 : (int64_t)cfg->exchange.grad_dtype;
  w[TERM_GRAD_DTYPE] = int_word(dtype_word + (cfg->exchange.grad_error_feedback ? 1 : 0));
  w[TERM_SPLIT] = int_word(cfg->devices.split != DPT_SPLIT_PROPORTIONAL ? 0
                           : cfg->devices.split_every > 0               ? cfg->devices.split_every
                                                                        : DPT_SPLIT_EVERY_DEFAULT);
  w[TERM_ACCUMULATE] =
      int_word(cfg->schedule.accumulate > 1 ? (int64_t)cfg->schedule.accumulate : 0);
  w[TERM_BUCKET_WHOLE_UPDATE] = int_word(cfg->exchange.bucket_whole_update);
  w[TERM_GROUPS] = int_word(cfg->deterministic ? (int64_t)dpt_train_group_size(cfg) : 0);
  transform_words(&cfg->data.transform, w);
}

static void word_str(int term, uint64_t w, char *out, size_t cap) {
  double d;
  switch (terms[term].kind) {
  case TERM_INT:
    snprintf(out, cap, "%lld", (long long)(int64_t)w);
    break;
  case TERM_FLOAT:
    memcpy(&d, &w, sizeof d);
    snprintf(out, cap, "%g", d);
    break;
  case TERM_HASH:
    snprintf(out, cap, "%016llx", (unsigned long long)w);
    break;
  }
}

dpt_status dpt_run_terms_compare(const uint64_t *all, int count) {
  for (int t = 0; t < DPT_RUN_TERM_COUNT; ++t) {
    char list[640] = "", v0[32], vi[32];
    size_t len = 0;
    int differ = 0;
    word_str(t, all[t], v0, sizeof v0);
    for (int i = 1; i < count; ++i) {
      const uint64_t wi = all[(size_t)i * DPT_RUN_TERM_COUNT + (size_t)t];
      if (wi == all[t]) continue;
      word_str(t, wi, vi, sizeof vi);
      if (len < sizeof list - 64)
        len += (size_t)snprintf(list + len, sizeof list - len, "%sreplica %d has %s",
                                differ ? ", " : "", i, vi);
      ++differ;
    }
    if (differ)
      return dpt_set_error(DPT_ERR_MISMATCH,
                           "the replicas disagree on %s: replica 0 has %s, %s; every replica "
                           "needs the same settings and data",
                           terms[t].name, v0, list);
  }
  return DPT_OK;
}

/* The field's key in lower case ("GLOBAL_BATCH" -> "global_batch"). */
static void term_key(int t, char *out, size_t cap) {
  size_t i = 0;
  for (; terms[t].key[i] && i + 1 < cap; ++i)
    out[i] = (char)tolower((unsigned char)terms[t].key[i]);
  out[i] = '\0';
}

/* Word w of field t as a JSON value: integers and floats as numbers, hashes as hex strings. */
static json_t *word_json(int t, uint64_t w) {
  double d;
  char hex[24];
  switch (terms[t].kind) {
  case TERM_INT:
    return json_integer((json_int_t)(int64_t)w);
  case TERM_FLOAT: /* a float: its shortest decimal, which reads back to the same float */
    memcpy(&d, &w, sizeof d);
    for (int p = 6; p <= 9; ++p) {
      snprintf(hex, sizeof hex, "%.*g", p, d);
      if ((float)strtod(hex, NULL) == (float)d) break;
    }
    return json_real(strtod(hex, NULL));
  default:
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)w);
    return json_string(hex);
  }
}

dpt_status dpt_run_terms_to_json(const uint64_t *words, char **out) {
  json_t *obj = json_object();
  for (int t = 0; obj && t < DPT_RUN_TERM_COUNT; ++t) {
    char key[40];
    term_key(t, key, sizeof key);
    if (json_object_set_new(obj, key, word_json(t, words[t])) != 0) {
      json_decref(obj);
      obj = NULL;
    }
  }
  /* The float fields are floats: 9 digits give them back exactly (json_word rounds to float). */
  *out = obj ? json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
  json_decref(obj);
  if (!*out) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "run terms: out of memory");
  return DPT_OK;
}

/* The word of field t from its JSON value; 0 when the value has the wrong type. */
static int json_word(int t, const json_t *v, uint64_t *w) {
  if (terms[t].kind == TERM_INT && json_is_integer(v)) {
    *w = (uint64_t)(int64_t)json_integer_value(v);
    return 1;
  }
  if (terms[t].kind == TERM_FLOAT && json_is_number(v)) {
    double d = (double)(float)json_number_value(v);
    memcpy(w, &d, sizeof d);
    return 1;
  }
  if (terms[t].kind == TERM_HASH && json_is_string(v)) {
    char *end = NULL;
    *w = strtoull(json_string_value(v), &end, 16);
    return end && *end == '\0';
  }
  return 0;
}

/* Fields a resumed run may change: the rate, the batch split, the micro-batches, the gradient
 * buckets (size and update order), the run's length (and the cosine length that follows it),
 * the checks, the non-finite policy, the test set, the deterministic groups. */
static int may_change(int t) {
  return t == TERM_LR || t == TERM_SPARSE_DENSE_ABOVE || t == TERM_ACCUMULATE || t == TERM_SPLIT ||
         t == TERM_BUCKET_BYTES || t == TERM_BUCKET_WHOLE_UPDATE || t == TERM_EPOCHS ||
         t == TERM_MAX_STEPS || t == TERM_TOTAL_STEPS || t == TERM_CHECK_EVERY ||
         t == TERM_MAX_SKIPPED || t == TERM_NONFINITE || t == TERM_TEST_SAMPLES ||
         t == TERM_TEST_DATA || t == TERM_GROUPS;
}

/* One field of the resume check: equal, changed and allowed (logged), or refused. */
static dpt_status check_field(int t, const json_t *obj, const char *origin, uint64_t now,
                              dpt_run_terms_log_fn log, void *user) {
  char key[40], was[32], is[32];
  term_key(t, key, sizeof key);
  uint64_t saved = 0;
  const json_t *v = json_object_get(obj, key);
  /* The fields from sparse_tables on are absent from older checkpoints, where they were 0. */
  const int absent_zero = !v && t >= TERM_SPARSE_TABLES;
  if (!absent_zero && (!v || !json_word(t, v, &saved)))
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: the saved configuration has no valid '%s'",
                         origin, key);
  if (saved == now) return DPT_OK;
  word_str(t, saved, was, sizeof was);
  word_str(t, now, is, sizeof is);
  if (!may_change(t))
    return dpt_set_error(DPT_ERR_MISMATCH,
                         "%s was saved with %s %s; this run has %s: resume with the same "
                         "setting, or start afresh in another checkpoint directory",
                         origin, terms[t].name, was, is);
  if (log) {
    char line[512];
    snprintf(line, sizeof line, "%s changed since the checkpoint: %s then, %s now", terms[t].name,
             was, is);
    log(line, user);
  }
  return DPT_OK;
}

dpt_status dpt_run_terms_check_resume(const char *saved_json, const char *origin,
                                      const uint64_t *now, dpt_run_terms_log_fn log, void *user) {
  json_error_t err;
  json_t *obj = saved_json ? json_loads(saved_json, JSON_REJECT_DUPLICATES, &err) : NULL;
  if (!json_is_object(obj)) {
    json_decref(obj);
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: no readable saved configuration", origin);
  }
  dpt_status st = DPT_OK;
  for (int t = 0; t < DPT_RUN_TERM_COUNT && st == DPT_OK; ++t)
    st = check_field(t, obj, origin, now[t], log, user);
  json_decref(obj);
  return st;
}

double dpt_train_table_lr(const dpt_train_config *cfg) {
  if (!cfg->exchange.sparse_tables) return 0;
  if (cfg->table_lr > 0) return cfg->table_lr;
  switch (cfg->exchange.table_optimizer) {
  case DPT_TABLE_ROWWISE_ADAGRAD:
    return DPT_TABLE_ADAGRAD_LR;
  case DPT_TABLE_ROWWISE_ADAM:
    return DPT_TABLE_ADAM_LR;
  case DPT_TABLE_ADAM:
    return DPT_TABLE_ADAM_CATCHUP_LR;
  default:
    return DPT_TABLE_SGD_LR;
  }
}

size_t dpt_train_group_size(const dpt_train_config *cfg) {
  if (cfg->group_size) return cfg->group_size;
  const size_t B = cfg->schedule.global_batch;
  size_t g = 1;
  for (size_t d = 1; d <= 32 && d * 8 <= B; ++d)
    if (B % d == 0) g = d;
  return g;
}
