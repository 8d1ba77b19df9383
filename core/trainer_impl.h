/* Internal: the trainer's replicas and their state, shared by trainer.c (the step) and
 * train_checkpoint.c (checkpoints, resume, rollback). */
#ifndef DPTRAIN_CORE_TRAINER_IMPL_H
#define DPTRAIN_CORE_TRAINER_IMPL_H

#include <stdint.h>

#include "core/run_terms.h"
#include "dptrain/train.h"

/* What every replica contributes to a step's decision. */
typedef struct step_stats {
  double loss_sum;    /* sum of per-target losses of the replica's slice */
  int64_t correct;    /* targets predicted right in the slice */
  int64_t samples;    /* slice size */
  int64_t targets;    /* targets in the slice: its samples, or a token model's labelled
                         positions */
  int64_t failed;     /* FAILED_HERE or FAILED_ELSEWHERE when this replica failed, else 0 */
  uint64_t hash;      /* parameter fingerprint (drift checks only) */
  double sumsq;       /* squared gradient norm over the replica's range (norm agreement only) */
  double compute;     /* seconds of the step's batch loading, forward and backward (steps only) */
  int64_t bad_grads;  /* non-finite values in the replica's range of the reduced gradient */
  int64_t bad_params; /* 1 when the replica found non-finite parameters (see check_params) */
  int64_t stop;     /* the replica's stop request (cfg->stop_request), 0: none; the largest wins */
  int64_t ckpt_due; /* replica 0: checkpoint_minutes have passed since the last checkpoint */
} step_stats;

/* How the replicas combine their gradients, decided once per run by step_mode_of. */
typedef enum step_mode {
  STEP_LOCAL,   /* no exchange: each replica steps on its own gradients (benchmarking) */
  STEP_FULL,    /* all-reduce the gradients; every replica updates every parameter */
  STEP_SHARDED, /* reduce-scatter; each replica updates its shard; all-gather the parameters */
} step_mode;

typedef struct replica {
  const dpt_train_config *cfg;
  dpt_comm *comm;  /* this replica's member */
  int index;       /* replica index = rank in comm */
  int count;       /* replicas in all */
  int ranks;       /* MPI ranks */
  int local_index; /* index among the replicas of this process / node (device choice) */
  int over_mpi;    /* 1: comm is an MPI communicator (one replica per rank) */
  dpt_status status;
  char error[1024]; /* message of a failure on this replica's thread */
  dpt_train_report final;
} replica;

/* The run's running figures, from which every report is made. */
typedef struct run_totals {
  int64_t step, skipped, trained_samples;
  int64_t skipped_in_a_row;     /* consecutive skipped steps up to the last one */
  int64_t rollbacks;            /* rollbacks to a checkpoint so far */
  int64_t trained_before;       /* training samples of the run's steps before its resume */
  int64_t planned_steps;        /* steps the run will take if nothing stops it */
  double run_start, train_time; /* seconds: start of the run; spent in training epochs */
  double last_ckpt;             /* when the last checkpoint was taken (replica 0's clock) */
  double lr_scale;              /* the factor on the learning rate after rollbacks */
  int64_t checkpoints;          /* checkpoints taken by this run */
  double ckpt_time;             /* seconds the steps paused for them */
  double compute, comm, optimizer, imbalance; /* the report's time split, seconds */
  double exchange, exposed; /* the gradient exchange: running, and waited for after backward */
  uint64_t hash;            /* the latest parameter fingerprint */
  uint64_t sparse_sent, sparse_dense; /* sparse_tables: bytes sent, their dense equivalent */
} run_totals;

/* The data cursor: the next step takes global batch `batch` of `epoch` (0-based; batch may
 * equal the epoch's batches: the epoch's steps are done, its report is not); the epoch's summed
 * loss and the targets it was summed over (samples, or a token model's labelled positions) in
 * its steps so far. */
typedef struct train_cursor {
  int64_t epoch;
  size_t batch;
  double loss;
  int64_t samples;
} train_cursor;

/* Replicas whose exchanges need no allocation. */
enum { GATHER_INLINE = 64 };

typedef struct train_sparse train_sparse;   /* sparse_tables (train_sparse.c) */
typedef struct train_buckets train_buckets; /* bucket_bytes (train_buckets.c) */
typedef struct train_split train_split;     /* the batch split's shares (train_split.c) */

typedef struct replica_state {
  dpt_backend *be;
  dpt_model *model;
  dpt_optimizer *opt;
  step_mode mode;
  dpt_buffer *x, *y;        /* device batch: [slice, input] floats, [slice, labels] int32 */
  dpt_buffer *kept_buffers; /* skip_nonfinite: the model's buffers before the step, put back
                               when the step is skipped (batch norm updates them in forward) */
  float *hx;                /* host batch [max_slice, input] */
  int32_t *hy;              /* host labels [max_slice, labels] */
  size_t labels;            /* labels per sample: 1, or a token model's seq_len */
  int32_t *hbatch;          /* token models: the whole global batch's labels [B, labels], for
                               its target count; NULL otherwise */
  uint64_t *perm;           /* epoch permutation [n_train] (NULL with per-replica data) */
  dpt_interactions *ltrain; /* this replica's training records (cfg->local_train), or NULL */
  dpt_interactions *ltest;  /* this replica's validation records (cfg->local_test), or NULL */
  uint64_t *idx;            /* the slice's sample indices [max_slice] */
  float *hparams;           /* [state size] host copy of parameters and buffers for fingerprints */
  dpt_range *shard;         /* this replica's shard of the parameters (sharded step), [nshard] */
  size_t nshard;
  size_t max_slice;   /* largest slice of a global batch; evaluation reuses the batch buffers */
  size_t max_micro;   /* the model's batch: the largest of a slice's accumulate micro-batches */
  dpt_buffer *acc;    /* accumulate > 1: the micro-batches' gradient sum so far [num params] */
  dpt_buffer *gh;     /* grad_dtype F16 / BF16: the gradient in 16 bits [num params] */
  dpt_buffer *resid;  /* grad_error_feedback: this replica's rounding error [num params] */
  size_t batches;     /* global batches per epoch */
  step_stats *gather; /* [count]: gather_small, or allocated for more replicas */
  step_stats gather_small[GATHER_INLINE];
  uint64_t *terms; /* [count, DPT_RUN_TERM_COUNT]: terms_small, or allocated for more replicas */
  uint64_t terms_small[GATHER_INLINE * DPT_RUN_TERM_COUNT];
  int bad_params;     /* this replica's update made parameters non-finite (skip_nonfinite) */
  dpt_status pending; /* a local failure the other replicas have not been told of yet */
  char pending_msg[1024];
  run_totals t;
  train_sparse *sparse;    /* sparse_tables: the tables and their exchanges; NULL otherwise */
  train_buckets *buckets;  /* bucket_bytes: the gradient's buckets; NULL otherwise */
  train_split *split;      /* the shares of the batch split */
  char backend_names[64];  /* the reports' backend: this process's replicas' backends */
  struct dpt_trace *trace; /* cfg->trace: this replica's timeline; NULL otherwise */
  double trace_t;          /* the timeline: when the layer being timed began */
  int in_step;             /* forward_backward is running (the layer hook times its layers) */
  size_t slice;            /* records of this step's slice loaded in hx (per-replica data) */
  struct train_ckpt *ck;   /* checkpoints (train_checkpoint.c); NULL without checkpoint_dir */
  train_cursor at;         /* where the next step starts */
} replica_state;

/* Keeps this replica's first local failure (with its message) for the next exchange. */
void dpt_train_keep_failure(replica_state *s, dpt_status st);
/* Whether a collective's failure means the replicas are out of step (see trainer.c). */
int dpt_train_out_of_step(dpt_status st);
/* The failure to stop with after a collective failed, quoting this replica's earlier one. */
dpt_status dpt_train_stop_after(replica_state *s, dpt_status st);
/* A line of news for cfg->on_log, from replica 0 only. */
void dpt_train_log(const replica *r, const char *fmt, ...);

/* grad_dtype F16 / BF16 (dt), elements [off, off + n): the gradient, plus the kept rounding
 * error with grad_error_feedback, converted into s->gh at the same offsets, and the new rounding
 * error kept in s->resid. */
dpt_status dpt_train_narrow_16(replica_state *s, dpt_comm_dtype dt, size_t off, size_t n);
/* The summed s->gh's [off, off + n) back into the float32 gradient. */
dpt_status dpt_train_widen_16(replica_state *s, dpt_comm_dtype dt, size_t off, size_t n);

/* ---- the batch split (train_split.c), cfg->split ---- */

/* The largest slice of a batch of `batch` samples over `count` replicas: the even slice, or
 * with the proportional split twice that (at most batch - count + 1). */
size_t dpt_train_split_cap(const dpt_train_config *cfg, int count, size_t batch);
/* The shares, even at first; reads the DPT_TEST_SLOW_REPLICA testing knob. */
dpt_status dpt_train_split_setup(replica *r, replica_state *s);
void dpt_train_split_free(replica_state *s);
/* This replica's slice of a batch of bcount samples (<= the global batch). */
dpt_status dpt_train_split_slice(const replica *r, const replica_state *s, size_t bcount,
                                 size_t *start, size_t *count);
/* After a step's exchange (s->gather holds every replica's stats): the window's times, and at
 * its end new shares, the same on every replica; cfg->on_split when they change. */
void dpt_train_split_after_step(replica *r, replica_state *s);
/* Whether the split measures the replicas' compute times (proportional, several replicas). */
int dpt_train_split_measures(const replica_state *s);
/* [count] samples per replica of a full global batch; NULL before the set-up. */
const size_t *dpt_train_split_shares(const replica_state *s);
/* The testing knob: sleeps (factor - 1) x seconds on the replica it names. */
void dpt_train_split_slow_down(const replica_state *s, double seconds);

/* ---- sparse table gradients (train_sparse.c), cfg->sparse_tables ---- */

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
/* Row-wise Adagrad's accumulators, for checkpoints: how many tables have them, and the i-th
 * one's [rows] floats with its weight tensor's name (NULL past the end). */
size_t dpt_train_sparse_num_acc(const replica_state *s);
float *dpt_train_sparse_acc(const replica_state *s, size_t i, const char **name, size_t *rows);

/* ---- gradient buckets (train_buckets.c), cfg->bucket_bytes ---- */

/* The buckets over the flat gradient, exchanged in float32 or, with s->gh, in grad_dtype; a
 * no-op without bucket_bytes, with one replica or with sparse_tables. */
dpt_status dpt_train_buckets_setup(replica *r, replica_state *s, size_t bucket_bytes);
void dpt_train_buckets_free(replica_state *s);
/* Whether the layer hook starts buckets during the next backward (the step's last one). */
void dpt_train_buckets_arm(replica_state *s, int armed);
/* The layer hook's part: starts the buckets that [ready_from, num params) now covers. */
void dpt_train_buckets_on_layer(replica_state *s, int backward, size_t ready_from);
/* Seconds of a bucketed step's exchange (dpt_train_buckets_finish). */
typedef struct bucket_times {
  double exposed;   /* waiting for the gradient's exchanges after backward */
  double busy;      /* the exchanges ran (each from when its range was ready) */
  double optimizer; /* the update in parts, between the waits */
} bucket_times;
/* After backward: starts the buckets not started yet, waits for all (in order, every one, as
 * every replica does), with the update in parts after each where the run allows it (then with
 * the sharded step the all-gathers too). Returns the first failure. */
dpt_status dpt_train_buckets_finish(replica_state *s, bucket_times *t);
/* Whether dpt_train_buckets_finish does the step's update (and all-gather) in parts: the
 * optimizer then only counts the step. */
int dpt_train_buckets_stepped(const replica_state *s);
/* Collective: the bucket size for bucket_bytes DPT_BUCKET_AUTO, the smallest all-reduce (1 to
 * 64 ring blocks) of the exchange's dtype whose bus bandwidth is within 80 % of the largest
 * measured, replica 0's choice for all; table (may be NULL) receives the measurements as text. */
dpt_status dpt_train_buckets_measure(replica *r, dpt_comm_dtype dtype, size_t *bytes, char *table,
                                     size_t cap);
/* One line for the log: how many buckets, their sizes, and whether the update runs bucket by
 * bucket (or why it waits for the last one). */
void dpt_train_buckets_describe(const replica_state *s, char *out, size_t cap);
/* The last step's request times, [*n] (for the timeline). */
const dpt_request_info *dpt_train_buckets_info(const replica_state *s, size_t *n);

/* ---- checkpoints (train_checkpoint.c) ---- */

/* Set-up, before the start-up agreement: the host copies and, on replica 0 with cfg->resume,
 * the newest valid checkpoint read into the model (the others get it from the broadcast of
 * the parameters). A no-op without checkpoint_dir. */
dpt_status dpt_train_ckpt_setup(replica *r, replica_state *s);
/* After the parameters' broadcast: replica 0's resumed progress and optimizer state to every
 * replica (s->first_*, s->t, the optimizer's steps, state and rate factor). */
dpt_status dpt_train_ckpt_share_resumed(replica *r, replica_state *s);
/* A checkpoint at the step boundary, of the state, counters and s->at; none when this step's
 * is taken already. Every replica joins (the sharded optimizer state is gathered); replica 0
 * copies to host memory and a thread writes the file. wait: 1 to wait for the file. */
dpt_status dpt_train_ckpt_save(replica *r, replica_state *s, int wait);
/* Reloads the newest checkpoint on every replica after a non-finite step (see
 * DPT_NONFINITE_ROLLBACK); the data cursor s->at goes on past the step that diverged. */
dpt_status dpt_train_ckpt_rollback(replica *r, replica_state *s);
/* Replica 0: a writer that is done is joined (its line logged; a failure kept for the next
 * exchange). No collective: called after every step. */
void dpt_train_ckpt_poll(const replica *r, replica_state *s);
/* The newest checkpoint's path, on replica 0 (NULL: none, or another replica). */
const char *dpt_train_ckpt_path(const replica_state *s);
/* 1 when the run has a checkpoint to roll back to (the same on every replica). */
int dpt_train_ckpt_taken(const replica_state *s);
void dpt_train_ckpt_free(replica_state *s);

#endif
