/* Internal: a replica and its state, shared by the trainer (run.c, setup.c, step.c, ...) and its
 * parts (train_split.c, train_sparse.c, train_buckets.c, train_checkpoint.c); the failure protocol
 * and the 16-bit gradient conversions that all of them use (replica.c). */
#ifndef DPTRAIN_CORE_TRAIN_REPLICA_H
#define DPTRAIN_CORE_TRAIN_REPLICA_H

#include <stdint.h>

#include "core/train/run_terms.h"
#include "core/train/trace.h"
#include "dptrain/comm.h"
#include "dptrain/fingerprint.h"
#include "dptrain/model_device.h"
#include "dptrain/optimizer.h"
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
  int64_t
      stop; /* the replica's stop request (cfg->checks.stop_request), 0: none; the largest wins */
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
  int64_t step;     /* the steps done when the replica's run ended */
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

typedef struct train_sparse train_sparse;     /* sparse_tables (train_sparse.c) */
typedef struct train_buckets train_buckets;   /* bucket_bytes (train_buckets.c) */
typedef struct train_split train_split;       /* the batch split's shares (train_split.c) */
typedef struct train_exchange train_exchange; /* the step's exchange kind (exchange.c) */
typedef struct train_exact train_exact;       /* deterministic: the groups (exchange_exact.c) */

typedef struct replica_state {
  dpt_backend *be;
  dpt_model *model;
  dpt_optimizer *opt;
  step_mode mode;
  const train_exchange *exchange; /* how the step exchanges and updates (exchange.c) */
  dpt_buffer *x, *y;              /* device batch: [slice, input] floats, [slice, labels] int32 */
  dpt_buffer *kept_buffers;       /* skip_nonfinite: the model's buffers before the step, put back
                                     when the step is skipped (batch norm updates them in forward) */
  float *hx;                      /* host batch [max_slice, input] */
  int32_t *hy;                    /* host labels [max_slice, labels] */
  size_t labels;                  /* labels per sample: 1, or a token model's seq_len */
  int32_t *hbatch;                /* token models: the whole global batch's labels [B, labels], for
                                     its target count; NULL otherwise */
  uint64_t *perm;                 /* epoch permutation [n_train] (NULL with per-replica data) */
  dpt_interactions *ltrain; /* this replica's training records (cfg->data.local_train), or NULL */
  dpt_interactions *ltest;  /* this replica's validation records (cfg->data.local_test), or NULL */
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
  train_sparse *sparse;       /* sparse_tables: the tables and their exchanges; NULL otherwise */
  train_buckets *buckets;     /* bucket_bytes: the gradient's buckets; NULL otherwise */
  train_split *split;         /* the shares of the batch split */
  char backend_names[64];     /* the reports' backend: this process's replicas' backends */
  struct dpt_trace *trace;    /* cfg->trace: this replica's timeline; NULL otherwise */
  double trace_t;             /* the timeline: when the layer being timed began */
  int in_step;                /* forward_backward is running (the layer hook times its layers) */
  size_t slice;               /* records of this step's slice loaded in hx (per-replica data) */
  struct train_ckpt *ck;      /* checkpoints (train_checkpoint.c); NULL without checkpoint_dir */
  train_cursor at;            /* where the next step starts */
  struct dpt_run_log *runlog; /* cfg->log_dir, on replica 0 (train_runlog.c); NULL otherwise */
  double grad_norm;   /* the full step's gradient norm when its optimizer clipped, else NaN */
  train_exact *exact; /* deterministic: the step's groups and their exact sum; NULL otherwise */
  /* The state is no completed step's: from a step's agreement (or its update in parts during
   * the exchange) to its end, and during a rollback (a failure then writes no checkpoint). */
  int unsettled;
  int cursor_behind; /* the step in flight is complete but for s->at, which its caller advances */
} replica_state;

/* Keeps this replica's first local failure (with its message) for the next exchange. */
void dpt_train_keep_failure(replica_state *s, dpt_status st);
/* Whether a collective's failure means the replicas are out of step (see replica.c). */
int dpt_train_out_of_step(dpt_status st);
/* The failure to stop with after a collective failed, quoting this replica's earlier one. */
dpt_status dpt_train_stop_after(replica_state *s, dpt_status st);
/* A line of news for cfg->callbacks.on_log, from replica 0 only. */
void dpt_train_log(const replica *r, const char *fmt, ...);

/* grad_dtype F16 / BF16 (dt), elements [off, off + n): the gradient, plus the kept rounding
 * error with grad_error_feedback, converted into s->gh at the same offsets, and the new rounding
 * error kept in s->resid. */
dpt_status dpt_train_narrow_16(replica_state *s, dpt_comm_dtype dt, size_t off, size_t n);
/* The summed s->gh's [off, off + n) back into the float32 gradient. */
dpt_status dpt_train_widen_16(replica_state *s, dpt_comm_dtype dt, size_t off, size_t n);

/* Every exchange that decides control flow: this replica's stats and its failure flag (from
 * `local`, its outcome since the last exchange, kept with its message) gathered from all
 * replicas into s->gather and summed in replica order into *sum; every replica stops at the
 * same exchange, the failed one with its own message, the others with DPT_ERR_PEER. */
dpt_status dpt_train_exchange_stats(replica *r, replica_state *s, step_stats *mine, step_stats *sum,
                                    dpt_status local, const char *what);
/* Fingerprints the parameters on every replica and compares them (DPT_ERR_MISMATCH naming the
 * replicas that drifted); keeps the fingerprint in s->t.hash for the reports. */
dpt_status dpt_train_check_drift(replica *r, replica_state *s, int64_t step);
/* Doubles summed over the replicas (ctx: the replica): gathered, then added in replica order,
 * the same bits everywhere (sync-bn, LAMB's sharded sums). */
dpt_status dpt_train_sum_over_replicas(void *ctx, double *data, size_t count);
/* The timeline's event [t0, now] on `track`, when there is a timeline. */
void dpt_train_trace_since(replica_state *s, dpt_trace_track track, const char *name, double t0);

#endif
