/* The trainer's checkpoints: what a run needs to continue (model state, optimizer state as full
 * tensors, counters, the data cursor) copied to host memory at a step boundary and written by a
 * thread of replica 0; resume at any world size; rollback after a non-finite step.
 *
 * Every decision here is taken alike on every replica: the moments to save come from the
 * step's exchange, the outcome of a read on replica 0 is agreed (dpt_comm_agree_ready) before
 * anyone uses it, and the optimizer state of a sharded step is gathered whole, so a checkpoint
 * does not depend on the world size that wrote it. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* syscall() for the writer thread's id */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif

#include "base/clock.h"
#include "base/error.h"
#include "core/io/checkpoint.h"
#include "core/model/model_impl.h"
#include "core/train/replica.h"
#include "core/train/train_sparse.h"
#include "core/train/train_checkpoint.h"

enum { MAX_SLOTS = 2, MAX_META = 16 };

struct train_ckpt {
  /* every replica */
  int taken;             /* a checkpoint exists to go back to (written or resumed) */
  int64_t saved_step;    /* the step of the newest */
  int slots;             /* optimizer state tensors per parameter tensor */
  float *opt[MAX_SLOTS]; /* [num params] full layout: gathered for a save, read for a resume */
  /* replica 0 */
  float *state;                     /* [state size]: the copy a writer writes, or one read */
  dpt_checkpoint_progress progress; /* of that copy */
  int loaded;                       /* state, opt and progress hold a checkpoint just read */
  dpt_st_tensor *tensors;           /* the state's entries, then the optimizer's */
  int64_t *counters;
  char **opt_names; /* "optimizer.<slot>.<tensor>", [slots * tensors] */
  /* every replica: the sparse tables' optimizer state (dpt_train_sparse_state), block after block
   */
  float *row_state;  /* [sum of the blocks' floats]: copied for a save, read for a resume */
  size_t row_floats; /* that sum */
  char **row_names;  /* "optimizer.<kind>.<table>", [dpt_train_sparse_num_state] */
  size_t ntensors;
  char *model_json, *terms_json, *mean, *std;
  const char *meta[MAX_META];
  const char *dir; /* cfg->checkpoints.checkpoint_dir */
  int lock_fd;     /* replica 0: the directory's lock (dpt_ckpt_lock_dir), else -1 */
  int keep;        /* cfg->checkpoints.keep_checkpoints */
  pthread_t writer;
  int writing;
  atomic_int written; /* set by the writer when it is done */
  dpt_status write_status;
  char write_error[1024];
  char path[4096];    /* the newest checkpoint written or read */
  char pending[4096]; /* the one being written */
};

/* ---- set-up -------------------------------------------------------------------------------- */

/* "v0,v1,..." of n floats, exactly (%.9g round-trips a float), as the weights files have it. */
static char *float_list(const float *v, size_t n) {
  char *out = malloc(n * 18 + 1);
  size_t len = 0;
  if (out) out[0] = '\0';
  for (size_t i = 0; out && i < n; ++i)
    len += (size_t)snprintf(out + len, 19, "%s%.9g", i ? "," : "", (double)v[i]);
  return out;
}

/* The metadata every checkpoint of the run carries: the model file's, the normalization, the
 * configuration, the caller's settings. */
static dpt_status make_metadata(const replica *r, struct train_ckpt *ck) {
  const dpt_train_config *cfg = r->cfg;
  uint64_t words[DPT_RUN_TERM_COUNT];
  dpt_run_terms(cfg, words);
  DPT_TRY(dpt_model_spec_to_json(&cfg->model, &ck->model_json));
  DPT_TRY(dpt_run_terms_to_json(words, &ck->terms_json));
  size_t n = 0;
  const char *base[] = {"format",        "pt",           "producer",         "dptrain",
                        "dptrain.model", ck->model_json, DPT_CKPT_TERMS_KEY, ck->terms_json};
  for (; n < sizeof base / sizeof base[0]; ++n)
    ck->meta[n] = base[n];
  if (cfg->data.transform.mean) {
    ck->mean = float_list(cfg->data.transform.mean, cfg->data.transform.channels);
    ck->std = float_list(cfg->data.transform.std, cfg->data.transform.channels);
    if (!ck->mean || !ck->std)
      return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "checkpoints: out of host memory");
    const char *norm[] = {"dptrain.mean", ck->mean, "dptrain.std", ck->std};
    for (size_t i = 0; i < 4; ++i)
      ck->meta[n++] = norm[i];
  }
  if (cfg->options_json) {
    ck->meta[n++] = DPT_CKPT_OPTIONS_KEY;
    ck->meta[n++] = cfg->options_json;
  }
  ck->meta[n] = NULL;
  return DPT_OK;
}

/* Replica 0's tensor list: the state's entries, then one per parameter tensor and slot. */
static dpt_status make_tensors(const replica_state *s, struct train_ckpt *ck) {
  const size_t entries = dpt_model_state_tensors(s->model, NULL, NULL, NULL);
  const size_t nt = dpt_model_num_tensors(s->model), nopt = (size_t)ck->slots * nt;
  const size_t nrow = dpt_train_sparse_num_state(s);
  ck->ntensors = entries + nopt + nrow;
  ck->tensors = calloc(ck->ntensors, sizeof *ck->tensors);
  ck->counters = calloc(entries, sizeof *ck->counters);
  ck->opt_names = calloc(nopt ? nopt : 1, sizeof *ck->opt_names);
  ck->row_names = calloc(nrow ? nrow : 1, sizeof *ck->row_names);
  if (!ck->tensors || !ck->counters || !ck->opt_names || !ck->row_names)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "checkpoints: out of host memory");
  size_t at = 0;
  for (size_t i = 0; i < nrow; ++i) {
    dpt_train_row_state rs;
    dpt_train_sparse_state(s, i, &rs);
    const size_t len = strlen(rs.kind) + strlen(rs.table) + 32;
    char *name = ck->row_names[i] = malloc(len);
    if (!name) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "checkpoints: out of host memory");
    snprintf(name, len, "optimizer.%s.%s", rs.kind, rs.table);
    dpt_st_tensor *x = &ck->tensors[entries + nopt + i];
    x->name = name;
    x->data = ck->row_state + at;
    x->ndim = rs.cols > 1 ? 2 : 1;
    x->shape[0] = (int64_t)rs.rows;
    x->shape[1] = (int64_t)rs.cols;
    at += rs.rows * rs.cols;
  }
  for (int k = 0; k < ck->slots; ++k)
    for (size_t t = 0; t < nt; ++t) {
      dpt_tensor_info ti;
      DPT_TRY(dpt_model_tensor(s->model, t, &ti));
      const char *slot = dpt_optimizer_slot_name(s->opt, k);
      size_t len = strlen(ti.name) + strlen(slot) + 16;
      dpt_st_tensor *x = &ck->tensors[entries + (size_t)k * nt + t];
      char *name = ck->opt_names[(size_t)k * nt + t] = malloc(len);
      if (!name) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "checkpoints: out of host memory");
      snprintf(name, len, "optimizer.%s.%s", slot, ti.name);
      x->name = name;
      x->data = ck->opt[k] + ti.offset;
      x->ndim = ti.ndim;
      for (int d = 0; d < ti.ndim; ++d)
        x->shape[d] = ti.shape[d];
    }
  return DPT_OK;
}

static void log_skipped(const char *path, const char *why, void *user) {
  dpt_train_log(user, "passing over checkpoint %s: %s", path, why);
}

static void log_change(const char *line, void *user) {
  dpt_train_log(user, "resuming: %s", line);
}

/* Replica 0: the newest valid checkpoint of the directory read into ck (state, optimizer,
 * progress); *found 0 when there is none. `check_terms`: compare its configuration. */
static dpt_status read_newest(replica *r, replica_state *s, int check_terms, int *found) {
  struct train_ckpt *ck = s->ck;
  DPT_TRY(dpt_checkpoint_find_latest(r->cfg->checkpoints.checkpoint_dir, log_skipped, r, ck->path,
                                     sizeof ck->path, found, NULL));
  if (!*found) return DPT_OK;
  dpt_safetensors *st = NULL;
  DPT_TRY(dpt_ckpt_open(ck->path, &st, &ck->progress));
  dpt_status e = DPT_OK;
  if (check_terms) {
    uint64_t now[DPT_RUN_TERM_COUNT];
    dpt_run_terms(r->cfg, now);
    e = dpt_run_terms_check_resume(dpt_safetensors_metadata(st, DPT_CKPT_TERMS_KEY), ck->path, now,
                                   log_change, r);
  }
  if (e == DPT_OK) e = dpt_model_read_state(s->model, st, ck->path, ck->state);
  const size_t entries = dpt_model_state_tensors(s->model, NULL, NULL, NULL);
  for (size_t i = entries; i < ck->ntensors && e == DPT_OK; ++i) {
    const dpt_st_tensor *x = &ck->tensors[i];
    size_t count = 1;
    for (int d = 0; d < x->ndim; ++d)
      count *= (size_t)x->shape[d];
    e = dpt_safetensors_read_f32(st, x->name, (float *)x->data, count);
  }
  dpt_safetensors_close(st);
  DPT_TRY(e);
  const size_t n = dpt_model_state_size(s->model);
  if (dpt_fingerprint(ck->state, n * sizeof(float)) != ck->progress.state_hash)
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "%s: the model state does not match its recorded "
                         "fingerprint",
                         ck->path);
  ck->loaded = 1;
  return dpt_model_set_state(s->model, ck->state);
}

/* Replica 0, before the first step: the directory exists (made when missing), is writable and
 * locked for this run (*lock_fd), and a run that does not resume finds no checkpoint there, which
 * it would otherwise prune and roll back to, and a later resume would take for its own. */
static dpt_status check_dir(const dpt_train_config *cfg, int *lock_fd) {
  int64_t newest = -1;
  DPT_TRY(dpt_ckpt_prepare_dir(cfg->checkpoints.checkpoint_dir, &newest));
  DPT_TRY(dpt_ckpt_lock_dir(cfg->checkpoints.checkpoint_dir, lock_fd));
  if (cfg->checkpoints.resume || newest < 0) return DPT_OK;
  char path[4096];
  dpt_ckpt_path(cfg->checkpoints.checkpoint_dir, newest, path, sizeof path);
  return dpt_set_error(DPT_ERR_INVALID_ARG,
                       "checkpoint directory %s holds checkpoints of another run (%s): resume "
                       "from them (--resume), or name an empty or new directory",
                       cfg->checkpoints.checkpoint_dir, path);
}

dpt_status dpt_train_ckpt_setup(replica *r, replica_state *s) {
  if (!r->cfg->checkpoints.checkpoint_dir) return DPT_OK;
  struct train_ckpt *ck = s->ck = calloc(1, sizeof *ck);
  if (!ck) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "checkpoints: out of host memory");
  ck->saved_step = -1;
  ck->lock_fd = -1;
  ck->dir = r->cfg->checkpoints.checkpoint_dir;
  ck->keep = r->cfg->checkpoints.keep_checkpoints;
  ck->slots = dpt_optimizer_num_slots(s->opt);
  const size_t np = dpt_model_num_params(s->model);
  for (int k = 0; k < ck->slots; ++k)
    if (!(ck->opt[k] = calloc(np ? np : 1, sizeof(float))))
      return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "checkpoints: out of host memory");
  for (size_t i = 0; i < dpt_train_sparse_num_state(s); ++i) {
    dpt_train_row_state rs;
    dpt_train_sparse_state(s, i, &rs);
    ck->row_floats += rs.rows * rs.cols;
  }
  if (ck->row_floats && !(ck->row_state = calloc(ck->row_floats, sizeof(float))))
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "checkpoints: out of host memory");
  /* Under MPI with the full step every rank holds the whole state and may write it when the
   * job fails (dpt_train_ckpt_write_own): it gets the writer's copy and list too. */
  if (r->index != 0 && !(r->over_mpi && s->mode == STEP_FULL)) return DPT_OK;
  if (r->index == 0) DPT_TRY(check_dir(r->cfg, &ck->lock_fd));
  ck->state = malloc(dpt_model_state_size(s->model) * sizeof(float));
  if (!ck->state) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "checkpoints: out of host memory");
  DPT_TRY(make_metadata(r, ck));
  DPT_TRY(make_tensors(s, ck));
  if (r->index != 0) return DPT_OK;
  int found = 0;
  if (r->cfg->checkpoints.resume) DPT_TRY(read_newest(r, s, 1, &found));
  if (r->cfg->checkpoints.resume && !found)
    dpt_train_log(r, "no checkpoint in %s: starting from the beginning",
                  r->cfg->checkpoints.checkpoint_dir);
  return DPT_OK;
}

/* ---- sharing what replica 0 read ---------------------------------------------------------- */

/* The sparse tables' optimizer state between the trainer's tables and ck->row_state: to_ck 1
 * copies the tables' into ck (for a save), 0 the other way (a resume or a rollback). */
static void copy_row_state(const replica_state *s, struct train_ckpt *ck, int to_ck) {
  size_t at = 0;
  for (size_t i = 0; i < dpt_train_sparse_num_state(s); ++i) {
    dpt_train_row_state rs;
    float *data = dpt_train_sparse_state(s, i, &rs);
    const size_t n = rs.rows * rs.cols;
    if (to_ck)
      memcpy(ck->row_state + at, data, n * sizeof(float));
    else
      memcpy(data, ck->row_state + at, n * sizeof(float));
    at += n;
  }
}

/* Replica 0's loaded progress and optimizer state to every replica, into its optimizer. Every
 * replica joins; *loaded says whether there was anything. */
static dpt_status share_loaded(replica *r, replica_state *s, dpt_checkpoint_progress *p,
                               int *loaded) {
  struct train_ckpt *ck = s->ck;
  struct {
    int64_t loaded;
    dpt_checkpoint_progress p;
  } head;
  memset(&head, 0, sizeof head);
  if (r->index == 0) {
    head.loaded = ck->loaded;
    head.p = ck->progress;
  }
  DPT_TRY(dpt_broadcast_host(r->comm, &head, sizeof head, 0));
  *loaded = (int)head.loaded;
  *p = head.p;
  if (!head.loaded) return DPT_OK;
  /* A local failure (a device upload) is kept for the next exchange: every replica joins every
   * broadcast. */
  const size_t np = dpt_model_num_params(s->model);
  for (int k = 0; k < ck->slots; ++k) {
    dpt_status st = dpt_broadcast_host(r->comm, ck->opt[k], np * sizeof(float), 0);
    if (dpt_train_out_of_step(st)) return dpt_train_stop_after(s, st);
    dpt_train_keep_failure(s, st);
    if (s->pending == DPT_OK)
      dpt_train_keep_failure(s, dpt_optimizer_set_state(s->opt, k, ck->opt[k]));
  }
  if (ck->row_floats) {
    dpt_status st = dpt_broadcast_host(r->comm, ck->row_state, ck->row_floats * sizeof(float), 0);
    if (dpt_train_out_of_step(st)) return dpt_train_stop_after(s, st);
    dpt_train_keep_failure(s, st);
    copy_row_state(s, ck, 0);
  }
  dpt_train_keep_failure(s, dpt_optimizer_set_steps(s->opt, p->optimizer_steps));
  ck->taken = 1;
  ck->saved_step = p->step;
  ck->loaded = 0;
  return DPT_OK;
}

dpt_status dpt_train_ckpt_share_resumed(replica *r, replica_state *s) {
  s->t.lr_scale = 1.0;
  if (!s->ck) return DPT_OK;
  dpt_checkpoint_progress p;
  int loaded = 0;
  DPT_TRY(share_loaded(r, s, &p, &loaded));
  if (!loaded) return DPT_OK;
  DPT_TRY(dpt_optimizer_set_lr_scale(s->opt, p.lr_scale));
  s->t.lr_scale = p.lr_scale;
  s->t.step = p.step;
  s->t.skipped = p.skipped_steps;
  s->t.skipped_in_a_row = p.skipped_in_a_row;
  s->t.rollbacks = p.rollbacks;
  s->t.trained_before = p.trained_samples;
  s->at = (train_cursor){p.epoch, (size_t)p.batch, p.epoch_loss_sum, p.epoch_samples};
  if (p.epoch < 0 || p.batch < 0 || (size_t)p.batch > s->batches)
    return dpt_set_error(DPT_ERR_BAD_FORMAT,
                         "checkpoint: batch %lld of epoch %lld is outside the %zu batches of an "
                         "epoch",
                         (long long)p.batch, (long long)p.epoch, s->batches);
  dpt_train_log(r,
                "resumed from %s: step %lld, epoch %lld with %lld batches done; saved by %lld "
                "replica%s%s",
                s->ck->path, (long long)p.step, (long long)p.epoch + 1, (long long)p.batch,
                (long long)p.world_size, p.world_size == 1 ? "" : "s",
                p.world_size == r->count ? "" : " (the optimizer state is re-cut)");
  return DPT_OK;
}

/* ---- writing ------------------------------------------------------------------------------ */

static void *write_thread(void *arg) {
  struct train_ckpt *ck = arg;
#if defined(__linux__)
  /* Behind the training threads on a busy host: the file is not in a hurry, the steps are. */
  setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
#endif
  ck->write_status = dpt_ckpt_write(ck->dir, &ck->progress, ck->tensors, ck->ntensors, ck->meta,
                                    ck->keep, ck->pending, sizeof ck->pending);
  if (ck->write_status != DPT_OK)
    snprintf(ck->write_error, sizeof ck->write_error, "%s", dpt_last_error());
  atomic_store(&ck->written, 1);
  return NULL;
}

/* Replica 0: waits for the writer, if one runs; its outcome (the newest path on success). */
static dpt_status join_writer(const replica *r, struct train_ckpt *ck) {
  if (!ck->writing) return DPT_OK;
  pthread_join(ck->writer, NULL);
  ck->writing = 0;
  if (ck->write_status != DPT_OK)
    return dpt_set_error(ck->write_status, "checkpoint at step %lld: %s",
                         (long long)ck->progress.step, ck->write_error);
  memcpy(ck->path, ck->pending, sizeof ck->path);
  dpt_train_log(r, "checkpoint written: %s (step %lld)", ck->path, (long long)ck->progress.step);
  return DPT_OK;
}

/* The optimizer state, whole, into ck->opt on replica 0 (gathered from the shards under the
 * sharded step: every replica joins, whatever its local outcome, which is kept for later). */
static dpt_status gather_optimizer(replica *r, replica_state *s) {
  struct train_ckpt *ck = s->ck;
  const size_t np = dpt_model_num_params(s->model);
  for (int k = 0; k < ck->slots; ++k) {
    if (s->mode == STEP_SHARDED) {
      if (s->pending == DPT_OK)
        dpt_train_keep_failure(s, dpt_optimizer_get_state(s->opt, k, ck->opt[k]));
      DPT_TRY(dpt_allgather_shards_host(r->comm, ck->opt[k], np, DPT_COMM_F32));
    } else if (r->index == 0 && s->pending == DPT_OK) {
      dpt_train_keep_failure(s, dpt_optimizer_get_state(s->opt, k, ck->opt[k]));
    }
  }
  if (r->index == 0) copy_row_state(s, ck, 1); /* alike on every replica */
  return DPT_OK;
}

/* Replica 0: the progress of the copy just made. */
static void fill_progress(const replica *r, const replica_state *s) {
  dpt_checkpoint_progress *p = &s->ck->progress;
  memset(p, 0, sizeof *p);
  p->step = s->t.step;
  p->optimizer_steps = dpt_optimizer_steps(s->opt);
  p->epoch = s->at.epoch;
  p->batch = (int64_t)s->at.batch + s->cursor_behind; /* a survivor's write after a step */
  p->skipped_steps = s->t.skipped;
  p->skipped_in_a_row = s->t.skipped_in_a_row;
  p->rollbacks = s->t.rollbacks;
  p->trained_samples = s->t.trained_before + s->t.trained_samples;
  p->epoch_loss_sum = s->at.loss;
  p->epoch_samples = s->at.samples;
  p->lr_scale = s->t.lr_scale;
  p->world_size = r->count;
  p->seed = r->cfg->schedule.seed;
  p->state_hash = dpt_fingerprint(s->ck->state, dpt_model_state_size(s->model) * sizeof(float));
}

/* Replica 0: the copy to host memory and the writer's start. */
static dpt_status start_writer(const replica *r, replica_state *s) {
  struct train_ckpt *ck = s->ck;
  DPT_TRY(dpt_model_get_state(s->model, ck->state));
  const size_t n = dpt_model_state_size(s->model);
  for (size_t i = 0; i < n; ++i)
    if (!isfinite(ck->state[i])) { /* nothing to go back to: the older checkpoints stay */
      dpt_train_log(r, "no checkpoint at step %lld: the model state is not finite",
                    (long long)s->t.step);
      return DPT_OK;
    }
  dpt_model_state_tensors(s->model, ck->state, ck->tensors, ck->counters);
  fill_progress(r, s);
  atomic_store(&ck->written, 0);
  if (pthread_create(&ck->writer, NULL, write_thread, ck) != 0)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "checkpoint: cannot start the writer thread");
  ck->writing = 1;
  return DPT_OK;
}

dpt_status dpt_train_ckpt_save(replica *r, replica_state *s, int wait) {
  struct train_ckpt *ck = s->ck;
  if (!ck) return DPT_OK;
  const double t0 = dpt_now();
  if (!(ck->taken && ck->saved_step == s->t.step)) {
    ++s->t.checkpoints;
    /* The previous file is done before its host copy is overwritten. */
    if (r->index == 0) dpt_train_keep_failure(s, join_writer(r, ck));
    dpt_status st = gather_optimizer(r, s);
    if (dpt_train_out_of_step(st)) return dpt_train_stop_after(s, st);
    dpt_train_keep_failure(s, st);
    if (r->index == 0 && s->pending == DPT_OK) dpt_train_keep_failure(s, start_writer(r, s));
    ck->taken = 1;
    ck->saved_step = s->t.step;
    s->t.last_ckpt = dpt_now();
  }
  if (wait && r->index == 0 && s->pending == DPT_OK) dpt_train_keep_failure(s, join_writer(r, ck));
  s->t.ckpt_time += dpt_now() - t0;
  if (!wait) return DPT_OK; /* a failure is announced at the next step's exchange */
  /* No exchange follows: the replicas agree on the outcome here. */
  return dpt_comm_agree_ready(r->comm, s->pending, s->pending_msg, "replica", NULL);
}

/* ---- a rank's own write, when the job fails ------------------------------------------------ */

dpt_status dpt_train_ckpt_write_own(const replica *r, replica_state *s, char *path, size_t cap,
                                    int *wrote) {
  struct train_ckpt *ck = s->ck;
  *wrote = 0;
  if (!ck || !ck->state) return dpt_set_error(DPT_ERR_UNSUPPORTED, "no checkpoint copy here");
  if (r->index == 0) (void)join_writer(r, ck); /* its outcome is its own line */
  dpt_ckpt_path(ck->dir, s->t.step, path, cap);
  if (access(path, F_OK) == 0) return DPT_OK; /* written already (by the run, or another rank) */
  for (int k = 0; k < ck->slots; ++k)
    DPT_TRY(dpt_optimizer_get_state(s->opt, k, ck->opt[k]));
  copy_row_state(s, ck, 1);
  DPT_TRY(dpt_model_get_state(s->model, ck->state));
  const size_t n = dpt_model_state_size(s->model);
  for (size_t i = 0; i < n; ++i)
    if (!isfinite(ck->state[i]))
      return dpt_set_error(DPT_ERR_NONFINITE, "the model state is not finite");
  dpt_model_state_tensors(s->model, ck->state, ck->tensors, ck->counters);
  fill_progress(r, s);
  DPT_TRY(dpt_ckpt_write(ck->dir, &ck->progress, ck->tensors, ck->ntensors, ck->meta, ck->keep,
                         path, cap));
  *wrote = 1;
  return DPT_OK;
}

/* ---- rollback ----------------------------------------------------------------------------- */

/* Replica 0's state (read from the checkpoint) to every replica's parameters and buffers. */
static dpt_status share_state(replica *r, replica_state *s) {
  const size_t np = dpt_model_num_params(s->model), nb = dpt_model_num_buffer_floats(s->model);
  dpt_status st =
      dpt_broadcast_buffer(r->comm, dpt_model_params(s->model), 0, np * sizeof(float), 0);
  if (dpt_train_out_of_step(st)) return dpt_train_stop_after(s, st);
  dpt_train_keep_failure(s, st); /* local: announced at the next exchange */
  st = nb ? dpt_broadcast_buffer(r->comm, dpt_model_buffers(s->model), 0, nb * sizeof(float), 0)
          : DPT_OK;
  if (dpt_train_out_of_step(st)) return dpt_train_stop_after(s, st);
  dpt_train_keep_failure(s, st);
  return DPT_OK;
}

dpt_status dpt_train_ckpt_rollback(replica *r, replica_state *s) {
  const dpt_train_config *cfg = r->cfg;
  const int64_t diverged = s->t.step;
  s->unsettled = 1; /* the checkpoint's state replaces this one, in several collectives */
  if (s->t.rollbacks >= cfg->checks.max_rollbacks)
    return dpt_set_error(DPT_ERR_NONFINITE,
                         "non-finite values at step %lld after %lld rollbacks (max_rollbacks): "
                         "the run keeps diverging; lower the learning rate",
                         (long long)diverged, (long long)s->t.rollbacks);
  dpt_status st = DPT_OK;
  int found = 0;
  if (r->index == 0) {
    st = join_writer(r, s->ck);
    if (st == DPT_OK) st = read_newest(r, s, 0, &found);
    if (st == DPT_OK && !found)
      st = dpt_set_error(DPT_ERR_IO, "rollback: no checkpoint left in %s",
                         cfg->checkpoints.checkpoint_dir);
  }
  DPT_TRY(dpt_comm_agree_ready(r->comm, st, dpt_last_error(), "replica", NULL));
  DPT_TRY(share_state(r, s));
  dpt_checkpoint_progress p;
  int loaded = 0;
  DPT_TRY(share_loaded(r, s, &p, &loaded));
  s->t.lr_scale *= cfg->checks.rollback_lr_scale;
  DPT_TRY(dpt_optimizer_set_lr_scale(s->opt, s->t.lr_scale));
  s->t.step = p.step;
  s->t.skipped_in_a_row = 0;
  ++s->t.rollbacks;
  s->unsettled = 0;
  dpt_train_log(r,
                "non-finite values at step %lld: rolled back to %s (step %lld), going on with "
                "batch %zu of epoch %lld; learning rate factor %g (rollback %lld of at most %d)",
                (long long)diverged, s->ck->path, (long long)p.step, s->at.batch + 1,
                (long long)s->at.epoch + 1, s->t.lr_scale, (long long)s->t.rollbacks,
                cfg->checks.max_rollbacks);
  return DPT_OK;
}

/* ---- the rest ----------------------------------------------------------------------------- */

void dpt_train_ckpt_poll(const replica *r, replica_state *s) {
  if (r->index == 0 && s->ck && s->ck->writing && atomic_load(&s->ck->written))
    dpt_train_keep_failure(s, join_writer(r, s->ck));
}

void dpt_train_ckpt_settle(const replica *r, replica_state *s) {
  if (r->index == 0 && s->ck) dpt_train_keep_failure(s, join_writer(r, s->ck));
}

const char *dpt_train_ckpt_path(const replica_state *s) {
  return s->ck && s->ck->path[0] ? s->ck->path : NULL;
}

int dpt_train_ckpt_taken(const replica_state *s) {
  return s->ck && s->ck->taken;
}

void dpt_train_ckpt_free(replica_state *s) {
  struct train_ckpt *ck = s->ck;
  if (!ck) return;
  if (ck->writing) pthread_join(ck->writer, NULL);
  dpt_ckpt_unlock_dir(ck->lock_fd); /* after the last write */
  for (int k = 0; k < MAX_SLOTS; ++k)
    free(ck->opt[k]);
  for (size_t i = 0; ck->opt_names && i < (size_t)ck->slots * dpt_model_num_tensors(s->model); ++i)
    free(ck->opt_names[i]);
  free(ck->opt_names);
  for (size_t i = 0; ck->row_names && i < dpt_train_sparse_num_state(s); ++i)
    free(ck->row_names[i]);
  free(ck->row_names);
  free(ck->row_state);
  free(ck->state);
  free(ck->tensors);
  free(ck->counters);
  free(ck->model_json);
  free(ck->terms_json);
  free(ck->mean);
  free(ck->std);
  free(ck);
  s->ck = NULL;
}
