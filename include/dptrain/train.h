/* dptrain: data-parallel training.
 *
 * dpt_train() runs the whole job on the calling process: R replicas in all, each holding the
 * whole model on its own device and processing its own slice of every global batch of B
 * samples. Replicas are either the ranks of an MPI communicator (one replica per rank) or
 * threads of this process (`devices.replicas` > 1 with no MPI communicator, one device each).
 *
 * One step, on every replica alike:
 *   1. take the replica's slice of global batch k (sizes differ by at most one);
 *   2. forward and backward with the loss gradient scaled by 1/T, T the targets of the whole
 *      global batch (not of the slice): its B samples for a classifier (for a kept last batch,
 *      its size), the labelled (masked) positions of its sequences for a token model, which
 *      every replica counts alike from the batch's deterministic masking, with no exchange; so
 *      that the SUM over replicas is exactly the mean gradient over the batch's targets;
 *   3. reduce-scatter (sum) the flat gradient buffer: each replica gets the complete sum of its
 *      shard (dpt_comm_shard); gather the loss and correct count of every replica;
 *   4. a non-finite loss (or gradient norm, when clipping) stops training (or skips the step
 *      everywhere with DPT_NONFINITE_SKIP, or roll back to the last checkpoint);
 *   5. the sharded optimizer step: each replica updates its shard of the parameters (clipping,
 *      when asked, by the norm of the whole reduced gradient: identical everywhere), then the
 *      shards are all-gathered. Every parameter comes out bit for bit as a full step after a
 *      ring all-reduce would give it (with clipping, the norm is summed shard by shard: equal
 *      to rounding), with 1/R of the optimizer's work and state per replica.
 *      full_optimizer_step = 1: all-reduce the gradients and update everything everywhere.
 * At start the parameters are broadcast from replica 0 and a 64-bit fingerprint of their bytes
 * is compared across replicas; it is compared again every check_every steps, and a difference
 * stops training with DPT_ERR_MISMATCH naming the step and the replicas that differ.
 */
#ifndef DPTRAIN_TRAIN_H
#define DPTRAIN_TRAIN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "dptrain/communicator.h"
#include "dptrain/data.h"
#include "dptrain/device.h"
#include "dptrain/interactions.h"
#include "dptrain/model.h"
#include "dptrain/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What dpt_train reports after each epoch (and once at the end with final = 1). */
typedef struct dpt_train_report {
  int final;             /* 1 for the closing report */
  int64_t epoch;         /* 1-based epoch just finished */
  int64_t steps;         /* optimizer steps so far */
  int64_t skipped_steps; /* steps skipped for non-finite values */
  /* Losses and accuracies are per target: per sample for a classifier, per labelled (masked)
   * token for a token model (its test accuracy: the masked-token accuracy). */
  double train_loss;      /* mean loss over the epoch's targets */
  double test_loss;       /* mean loss over the test set's targets (NaN when there is none) */
  double test_accuracy;   /* fraction correct over the test set (NaN when there is none) */
  double test_perplexity; /* token models: exp(test_loss); NaN otherwise or without a test set */
  /* Per-replica validation records (local_test): the exact AUC of the logits and the logloss
   * of the probabilities over every replica's records (dptrain/metrics.h); NaN otherwise (the
   * AUC also when the records lack a class). test_loss is then the mean binary cross-entropy
   * of the logits, test_accuracy the fraction with (logit > 0) == label. */
  double test_auc, test_logloss;
  size_t labels_per_sample; /* 1, or a token model's sequence length (tokens per sample) */
  double samples_per_sec;   /* training samples (all replicas) per second of training time */
  double seconds;           /* wall time of the epoch (of the whole run when final) */
  int ranks;                /* MPI ranks (1 without MPI) */
  int replicas;             /* replicas in all */
  uint64_t param_hash;      /* fingerprint of the parameters, the same on every replica */
  const char *backend;      /* backend of this process's first replica; in the callbacks with
                               replica_backends, the comma-separated list of every replica's */
  /* [replicas]: each replica's samples of a full global batch under the split in force
   * (split proportional: the measured one; otherwise dpt_batch_split's). Valid during the
   * callback; NULL in the report dpt_train returns. */
  const size_t *shares;
  /* Where the training time went so far, seconds, on the reporting replica: batch loading,
   * forward and backward; the step's communication (the gradient all-reduce, or the
   * reduce-scatter and the parameter all-gather; waiting for the slowest replica included);
   * the optimizer step. The rest of the training time is the per-step exchange, the gradient
   * norm's agreement when clipping needs it, and the checks. */
  double compute_seconds, allreduce_seconds, optimizer_seconds;
  /* The gradient exchange alone (the all-reduce, or the reduce-scatter of the sharded step):
   * how long it ran, and how much of that the step waited for it after backward (exposed). With
   * buckets (bucket_bytes) it runs during backward and exposed_seconds is the part that
   * backward and the update of the buckets done before did not hide (the update's own time is
   * optimizer_seconds'); without, the two are equal. */
  double exchange_seconds, exposed_seconds;
  /* Uneven replicas, seconds so far, the same on every replica: the sum over steps of how much
   * longer the slowest replica's batch loading, forward and backward took than the replicas'
   * mean. Every step runs at the slowest replica's pace, so this is time the average replica
   * spent waiting (inside the communication) for a slower one: a slower device or core, or a
   * busy host. 0 with one replica. */
  double imbalance_seconds;
  int64_t rollbacks;         /* rollbacks to a checkpoint so far */
  int64_t checkpoints;       /* checkpoints taken by this run so far */
  double checkpoint_seconds; /* training time spent on them on the reporting replica: the
                                optimizer state's gathering and the copy to host memory (the
                                file is written by a thread of its own), and waiting for a
                                previous file still being written */
  const char *checkpoint;    /* the newest checkpoint written or resumed from (NULL: none);
                                valid during the call */
  size_t num_params;         /* parameters of the model */
  size_t activation_bytes;   /* per replica: dpt_model_activation_bytes for its slice */
  /* sparse_tables: bytes the reporting replica sent in the tables' sparse exchanges so far
   * (dpt_sparse_stats.sent_bytes summed over tables and steps), and what the ring all-reduce
   * of the tables' dense gradients would have sent (dense_bytes); 0 otherwise. */
  uint64_t sparse_sent_bytes, sparse_dense_bytes;
} dpt_train_report;

/* Called on replica 0 of rank 0 only. */
typedef void (*dpt_train_report_fn)(const dpt_train_report *report, void *user);
/* Called on replica 0 of rank 0 after each step (for progress bars); may be NULL. */
typedef void (*dpt_train_progress_fn)(int64_t epoch, size_t batch, size_t batches, double loss,
                                      void *user);

/* What a step with non-finite values does (dpt_train_config.checks.on_nonfinite). */
typedef enum dpt_nonfinite_policy {
  DPT_NONFINITE_STOP = 0,    /* stop the run with DPT_ERR_NONFINITE */
  DPT_NONFINITE_SKIP = 1,    /* skip the step on every replica (max_skipped bounds it) */
  DPT_NONFINITE_ROLLBACK = 2 /* reload the newest checkpoint on every replica, go on with the
                                batch after the one that diverged (max_rollbacks bounds it) */
} dpt_nonfinite_policy;

/* Called on replica 0 of rank 0 with a line of news: a checkpoint written, a resume, a
 * rollback, a checkpoint passed over, a setting changed since the checkpoint. */
typedef void (*dpt_train_log_fn)(const char *line, void *user);

/* How a global batch is cut into the replicas' slices (dpt_train_config.devices.split). */
typedef enum dpt_split_mode {
  DPT_SPLIT_EVEN = 0,        /* dpt_batch_split: slices differ by at most one sample */
  DPT_SPLIT_PROPORTIONAL = 1 /* slices in proportion to each replica's measured speed */
} dpt_split_mode;
#define DPT_SPLIT_EVERY_DEFAULT 50 /* dpt_train_config.devices.split_every when 0 */

/* Called on replica 0 of rank 0 when the proportional split changes, after step `step`:
 * shares[replicas] are the samples each replica takes of a full global batch from the next
 * step on, seconds_per_sample[replicas] the measurement they come from. */
typedef void (*dpt_train_split_fn)(int64_t step, const size_t *shares,
                                   const double *seconds_per_sample, int replicas, void *user);

/* The update of the embedding tables under sparse_tables
 * (dpt_train_config.exchange.table_optimizer). */
typedef enum dpt_table_optimizer {
  DPT_TABLE_SGD = 0,
  DPT_TABLE_ROWWISE_ADAGRAD = 1,
  DPT_TABLE_ROWWISE_ADAM = 2,
  DPT_TABLE_ADAM = 3
} dpt_table_optimizer;
#define DPT_TABLE_ADAGRAD_EPS 1e-8f
#define DPT_TABLE_ADAM_BETA1  0.9f
#define DPT_TABLE_ADAM_BETA2  0.999f
#define DPT_TABLE_ADAM_EPS    1e-8f
/* The tables' default learning rates (dpt_train_config.table_lr 0), measured in
 * docs/recommendation.md, "Sparse table gradients". */
#define DPT_TABLE_SGD_LR               10.0
#define DPT_TABLE_SGD_LR_TEXT          "10"
#define DPT_TABLE_ADAGRAD_LR           0.1
#define DPT_TABLE_ADAGRAD_LR_TEXT      "0.1"
#define DPT_TABLE_ADAM_LR              0.003
#define DPT_TABLE_ADAM_LR_TEXT         "0.003"
#define DPT_TABLE_ADAM_CATCHUP_LR      0.001
#define DPT_TABLE_ADAM_CATCHUP_LR_TEXT "0.001"

/* Where the replicas run, and how a global batch is cut among them. */
typedef struct dpt_train_devices {
  dpt_backend_kind backend; /* backend of every replica (but see replica_backends) */
  /* Threads transport: [replicas] replica i's backend (mixed vendors in one process; the
   * exchange stages every replica's data through host memory), or NULL: backend for all. The
   * device of a replica is its index among the replicas of its backend, modulo the devices
   * (device -1). */
  const dpt_backend_kind *replica_backends;
  int device;   /* device index; -1: replica/local-rank index modulo devices */
  int replicas; /* threads transport: replicas in this process (>= 1); must be
                   1 with an MPI communicator */
  /* The split of every global batch into slices. DPT_SPLIT_EVEN (default): dpt_batch_split.
   * DPT_SPLIT_PROPORTIONAL: each replica's forward+backward time (batch loading included, the
   * exchange not; the backend synchronized, so a GPU's queued kernels count) is gathered with
   * every step's stats; after 3 warm-up steps, then every
   * split_every steps (the first measurement after min(split_every, 5) steps), the shares are
   * recomputed from those gathered times, alike on every replica (unless every replica's time
   * is within 10 % of the slowest's: nothing to gain): each replica's samples per
   * second over the window, the global batch cut in proportion, halfway from the old shares to
   * that (one noisy window moves the split only half as far), in whole samples, each >= 1 and
   * at most twice the even slice (the model's activations are sized for that), summing to the
   * batch; a change smaller than max(1, B/50) samples is not made. The gradient stays the
   * batch's mean (the loss is scaled by 1/targets of the whole batch) and dropout is keyed by
   * each sample's place in the batch, so the parameters equal the even split's within float
   * rounding; without sync_bn, batch norm's statistics are per slice and follow the split. A
   * kept last partial batch is cut in proportion to the shares. Refused with per-replica
   * records (local_train: each replica's slice is the shards' rule). A term of the run
   * (replicas must agree on it) that a resume may change; a resume starts from the even split
   * and measures again. */
  dpt_split_mode split;
  int64_t split_every; /* >= 0; 0: DPT_SPLIT_EVERY_DEFAULT */
} dpt_train_devices;

/* What the replicas train and test on. */
typedef struct dpt_train_data {
  const dpt_dataset *train; /* training set (required) */
  const dpt_dataset *test;  /* test set, may be NULL */
  /* Per-replica data instead of train/test (recommendation shards, dptrain/interactions.h):
   * each replica draws its slice of global step k from records only it holds. Element i is
   * replica i's reader: with threads, cfg->devices.replicas readers, reader i opened as rank i of
   * cfg->devices.replicas (dpt_interactions_open(pattern, i, replicas)); with MPI one reader, this
   * rank's (rank, world of the communicator). Each replica uses only its own reader (the
   * epoch order is cached in it). Set train = test = NULL with it. The epoch has
   * dpt_interactions_steps(global_batch) steps (from the shard headers, the same everywhere);
   * replica r's slice of step k is its dpt_interactions_step_indices (dpt_batch_split's count
   * of the global batch: the epoch rule keyed by seed, epoch, replica), written as the record
   * [num_dense floats][num_sparse ids as int32 bits] with label 0/1; the loss gradient is
   * scaled by 1/global_batch and dropout is keyed by the slice's start as for a data set.
   * shuffle must be 1 (the rule always permutes), keep_last 0, no transform. The model takes
   * num_dense + num_sparse inputs (bag 1), one label; every embedding_bag table must hold the
   * shards' tables. local_test (may be NULL; readers as local_train's, of the validation
   * shards): each replica scores its own records, and the reports carry the exact AUC and
   * logloss over all of them (test_auc, test_logloss). The run terms hold the total records
   * and dpt_interactions_fingerprint, so replicas or a resume on other shards are refused. */
  dpt_interactions *const *local_train;
  dpt_interactions *const *local_test;
  /* Applied to samples as they are gathered (all zero: none): the training set gets all of it,
   * keyed by the epoch (see dpt_data_transform), the test set the normalization only. */
  dpt_data_transform transform;
} dpt_train_data;

/* The run's length, batches and order. */
typedef struct dpt_train_schedule {
  size_t global_batch; /* B, >= replicas */
  int64_t epochs;      /* >= 1 */
  int64_t max_steps;   /* > 0: stop after this many steps (0: no limit) */
  uint64_t seed;       /* initialization and shuffling */
  int shuffle;         /* 1: a new permutation every epoch */
  int keep_last;       /* 1: keep the final partial batch */
  /* Gradient accumulation: each replica runs its slice of a global batch as this many
   * micro-batches (dpt_batch_split of the slice), summing their gradients, and exchanges once
   * (DDP's no_sync): the model holds activations for one micro-batch, the step is the global
   * batch's within float rounding. 0 or 1: none (the step as without). Refused with
   * sparse_tables and sync_bn. */
  size_t accumulate;
} dpt_train_schedule;

/* How the replicas exchange gradients (and batch norm statistics), and how the step uses them. */
typedef struct dpt_train_exchange {
  int skip_allreduce; /* benchmarking only: no gradient all-reduce (replicas drift) */
  /* Gradient buckets: > 0 cuts the flat gradient into ranges of about this many bytes (whole
   * blocks of the ring, comm block_bytes; the first one, the gradient backward completes first,
   * is a single block) exchanged by nonblocking collectives as soon as backward has completed
   * them, while it goes on (dptrain/comm.h, nonblocking collectives). The sharded step's
   * parameters are bit for bit the unbucketed step's; the full step's within float rounding
   * (each bucket's all-reduce picks its algorithm by its size). 0: one exchange after
   * backward. DPT_BUCKET_AUTO: the smallest size (1 to 64 blocks) at which a short
   * measurement at start-up finds the communicator's all-reduce within 80 % of its peak bus
   * bandwidth. Not with one replica or sparse_tables; with micro-batches (accumulate > 1) or
   * sync_bn the buckets start after backward. With grad_dtype F16 / BF16 each bucket is
   * converted and all-reduced in 16 bits (the full step; the size counts 16-bit bytes, the
   * measurement runs in that type); bit for bit the unbucketed 16-bit exchange's when both
   * pick the ring. */
  size_t bucket_bytes;
#define DPT_BUCKET_AUTO ((size_t)-1) /* bucket_bytes: measured at start-up (see above) */
  /* With bucket_bytes the step updates each bucket's part of the parameters (its shard, and
   * starts its all-gather, with the sharded step) as soon as the bucket's exchange is done,
   * where the update allows it: no clip_norm, not LAMB, on_nonfinite STOP or ROLLBACK (a step
   * found not finite afterwards ends the run or is rolled back). 1: the update waits for the
   * last bucket all the same (where the device is the host's CPU, its kernels compete with the
   * exchange). The parameters are the same bits either way. */
  int bucket_whole_update;
  /* The gradient exchange's element type: DPT_COMM_F32 (default), DPT_COMM_F16 or
   * DPT_COMM_BF16: each replica converts its gradient to binary16 (bfloat16) on the device,
   * the all-reduce sums in float32 and rounds to the 16-bit type after every addition
   * (dptrain/comm.h), and the sum is converted back: half the bytes. With it the step is the full
   * step (the sharded step's shards are cut for float32); with bucket_bytes the buckets are
   * exchanged this way during backward. Not with sparse_tables.
   * grad_error_feedback 1: each replica keeps the rounding error of its conversion and adds it to
   * the next step's gradient. */
  dpt_comm_dtype grad_dtype;
  int grad_error_feedback;
  int full_optimizer_step; /* 1: all-reduce the gradients and run the whole optimizer step on
                              every replica; 0 (default): the sharded step (see above) */
  /* 1: sparse table gradients (dptrain/sparse.h), with local_train only. Each embedding_bag
   * table's gradient is left out of the dense exchange: every replica collects the rows its
   * slice touched (the ids of its records), and dpt_sparse_allreduce sums them over the
   * replicas; every replica then applies the table optimizer (table_optimizer: plain SGD by
   * default) at the tables' rate (table_lr, scaled by the optimizer's schedule and factor; no
   * momentum, no weight decay) to those rows of its own full copy of the tables, so replicas stay
   * identical. The model adds the tables' gradients into ranges kept zero
   * (dpt_model_set_sparse_table_grads): a step costs the rows it touches, not the tables. The rest
   * of the parameters are all-reduced range by range and stepped by the configured optimizer
   * (dpt_optimizer_step_ranges): the full optimizer step, whatever full_optimizer_step says.
   * With SGD without momentum and weight decay, and table_lr equal to optim.lr, the run equals
   * the dense one within float rounding. Refused with clipping (clip_norm > 0: the norm would need
   * the tables' rows) and with skip_allreduce. Per step and table, when the rows would send more
   * than sparse_dense_above x the bytes of the table's dense ring all-reduce
   * (dpt_sparse_exchange_set_dense_above), the table's gradient is all-reduced whole instead and
   * the whole table takes the same SGD step. */
  int sparse_tables;
  double sparse_dense_above; /* >= 0; 0 means DPT_SPARSE_DENSE_ABOVE (dptrain/sparse.h) */
  /* With sparse_tables: the tables' update. DPT_TABLE_SGD (default): plain SGD as above.
   * DPT_TABLE_ROWWISE_ADAGRAD: DLRM's row-wise Adagrad (dpt_sparse_adagrad_rows, eps
   * DPT_TABLE_ADAGRAD_EPS) at the tables' rate, one accumulator per row kept alike on
   * every replica and saved in checkpoints ("optimizer.row_sum.<table>"); a row no replica
   * touched is left as it is. DPT_TABLE_ROWWISE_ADAM: row-wise Adam (dpt_sparse_adam_rows,
   * DPT_TABLE_ADAM_BETA1, _BETA2, _EPS), a first moment per element and a second moment per row,
   * bias-corrected by the optimizer's step count, kept alike on every replica and saved in
   * checkpoints ("optimizer.row_m.<table>", "optimizer.row_v.<table>"); a row no replica touched
   * keeps its values and moments. DPT_TABLE_ADAM: Adam per element with the steps a row sat
   * out made up when it is next touched (dpt_sparse_adam_catchup_rows, the same constants):
   * the dense exchange's Adam on the tables, lazily; its moments [rows x dim] and each row's
   * last step saved as "optimizer.row_m/row_v/row_last.<table>". No weight decay on the tables
   * under any of them. */
  int table_optimizer;
  int sync_bn; /* 1: batch norm statistics over the whole global batch (every
                  replica must then hold a sample in every step); 0: each replica
                  normalizes over its slice, and replica 0's running statistics
                  are given to all after every step, as PyTorch DDP does */
} dpt_train_exchange;

/* Checkpoints (dptrain/checkpoint.h), written by replica 0 of rank 0 into its checkpoint_dir
 * from a copy in host memory, on a thread of their own. A run that ends in a failure also
 * writes DPT_TRAIN_FAILURE_FILE there, atomically: one JSON object {"status", "cause" (the
 * message), "rank", "replica", "step" (the last one done), "time" (UTC, ISO 8601),
 * "disk_full" (the failure was ENOSPC)}, from the rank where it happened (rank 0 for the
 * failures every rank shares); `dptrain run` reads it. */
#define DPT_TRAIN_FAILURE_FILE "failure.json"
typedef struct dpt_train_checkpoints {
  const char *checkpoint_dir; /* NULL: no checkpoints */
  int64_t checkpoint_every;   /* > 0: a checkpoint after every this many steps */
  double checkpoint_minutes;  /* > 0: a checkpoint at the first step boundary this many
                                 minutes (replica 0's clock) after the last */
  int keep_checkpoints;       /* the newest this many are kept (>= 1, default 3) */
  int resume;                 /* 1: continue from the newest valid checkpoint in checkpoint_dir
                                 (none there: start afresh); the parameters end bit for bit as
                                 an uninterrupted run's at the same world size */
} dpt_train_checkpoints;

/* The checks of a run: replica drift, non-finite steps, rollbacks, stop requests. */
typedef struct dpt_train_checks {
  int64_t check_every;               /* fingerprint comparison period in steps (0: only at start and
                                        at the end of every epoch) */
  dpt_nonfinite_policy on_nonfinite; /* a step whose loss, reduced gradient or (when
                               clipping) gradient norm is not finite: stop (default), skip it,
                               or roll back (every replica alike) */
  int64_t max_skipped;      /* with DPT_NONFINITE_SKIP: the run fails once more than this many
                               steps in a row were skipped, or more than this many or 1 % of
                               the run's steps, whichever is larger (default 10; < 0: no
                               limit) */
  int max_rollbacks;        /* DPT_NONFINITE_ROLLBACK: the run fails at the rollback after
                               this many (default 3) */
  double rollback_lr_scale; /* DPT_NONFINITE_ROLLBACK: factor on the learning rate at each
                               rollback, in (0, 1] (default 1) */
  /* Non-zero (a signal number, say): every replica finishes its step, a checkpoint is written
   * (with checkpoint_dir) and dpt_train returns DPT_ERR_INTERRUPTED. Read at every step's
   * exchange; set it from a signal handler. May be NULL. */
  const volatile sig_atomic_t *stop_request;
} dpt_train_checks;

/* Called on replica 0 of rank 0 (each may be NULL), with `user`. */
typedef struct dpt_train_callbacks {
  dpt_train_split_fn on_split; /* may be NULL */
  dpt_train_report_fn on_report;
  dpt_train_progress_fn on_progress;
  dpt_train_log_fn on_log; /* may be NULL */
  void *user;
} dpt_train_callbacks;

/* How dpt_train_config grows without breaking programs built against an older dptrain: its
 * first field, `size`, is sizeof(dpt_train_config) as the caller compiled it, set by
 * dpt_train_config_default. New settings are only ever added at the end of dpt_train_config
 * (the groups above are never changed once released: a new group is added instead), so an
 * older caller's configuration is a prefix of the library's: the library reads the first
 * `size` bytes, gives the fields past them their defaults, and refuses a size it does not
 * know (a caller built against a newer dptrain, or a configuration not from
 * dpt_train_config_default). A size field rather than setters keeps the configuration a plain
 * struct that programs fill and copy field by field, as they do now. */
typedef struct dpt_train_config {
  size_t size; /* sizeof(dpt_train_config) as the caller compiled it (dpt_train_config_default) */
  dpt_model_spec model;
  const float *init_params; /* [dpt_model_state_size] initial parameters, then buffers, instead
                               of the seed, or NULL */
  float *final_params;      /* [dpt_model_state_size] receives the final parameters, then
                               buffers, or NULL */
  dpt_optim_config optim;
  dpt_train_devices devices;
  dpt_train_data data;
  dpt_train_schedule schedule;
  dpt_train_exchange exchange;
  dpt_train_checkpoints checkpoints;
  dpt_train_checks checks;
  dpt_train_callbacks callbacks;
  /* A timeline of the run: a Chrome trace-event JSON file (Perfetto, chrome://tracing) that
   * replica 0 of rank 0 writes at the end with every replica's events (batch loading, each
   * layer's forward and backward, each gradient exchange or bucket, the optimizer step,
   * checkpoints), the replicas' clocks aligned at start-up; NULL: none. A GPU backend's layer
   * events time their submission, not the device's work. */
  const char *trace;
  /* A log directory (created when missing; NULL: none) that replica 0 of rank 0 writes as the
   * run goes: settings.json (the run's settings), steps.jsonl (a JSON line per optimizer step:
   * loss, learning rate, gradient norm, speed, times), evals.jsonl (a line per epoch's
   * evaluation) and a TensorBoard event file events.out.tfevents.<time>.<host> of the same
   * scalars, each flushed after every record. A directory holding another run's log is refused,
   * unless this run resumes from a checkpoint: its lines are then appended and a new event file
   * started. See docs/training.md, "Logs". */
  const char *log_dir;
  /* With exchange.sparse_tables: the tables' learning rate, scaled by the schedule as optim.lr
   * is (warm-up, decay, rollbacks); 0: the table optimizer's default, DPT_TABLE_SGD_LR,
   * DPT_TABLE_ADAGRAD_LR, DPT_TABLE_ADAM_LR or DPT_TABLE_ADAM_CATCHUP_LR. Under SGD embedding rows
   * want a far larger rate than the dense layers' AdamW (docs/recommendation.md, "Sparse table
   * gradients"). */
  double table_lr;
  /* The caller's own settings as the text of a JSON object (dptrain train's options, as its
   * --print-config prints them), or NULL: settings.json keeps the object as "options", and
   * every checkpoint the text as its metadata "dptrain.options". */
  const char *options_json;
  /* 1: the parameters after every step are the same bits whatever the number of replicas and
   * however they are made (docs/training.md, "The same bits on any number of replicas"): each
   * replica's slice is a whole number of groups of group_size samples, each group's gradient
   * computed alone (its batch norm over the group), and the groups' gradients and losses summed
   * exactly in 64-bit fixed point. Refused with sync_bn, sparse_tables, a 16-bit grad_dtype,
   * per-replica records and skip_allreduce. */
  int deterministic;
  /* With deterministic: samples per group; it must divide global_batch. 0: the largest divisor
   * of global_batch not above 32 that leaves at least 8 groups (1 below 8 samples). */
  size_t group_size;
} dpt_train_config;

/* Fills the first `size` bytes of *cfg with the defaults and sets cfg->size = size: CPU backend,
 * device -1, 1 replica, B = 256, 10 epochs, seed 0, shuffle, drop last, check_every 100, SGD lr
 * 0.05 momentum 0.9, no model (fill cfg->model). DPT_ERR_INVALID_ARG (and cfg->size 0, which
 * dpt_train refuses) for a size this library does not know. Call it through
 * dpt_train_config_default, which passes the caller's sizeof. */
DPT_API dpt_status dpt_train_config_init(dpt_train_config *cfg, size_t size);

/* The defaults, for the dpt_train_config this program was compiled with (see above). */
static inline dpt_status dpt_train_config_default(dpt_train_config *cfg) {
  return dpt_train_config_init(cfg, sizeof *cfg);
}

/* Runs training with the configuration's first cfg->size bytes (see dpt_train_config). comm: an MPI
 * communicator made with dpt_comm_create_mpi (one replica per rank), or NULL to run
 * cfg->devices.replicas replicas as threads of this process. `final` (may be NULL) receives the
 * closing report. Every rank returns the same status. */
DPT_API dpt_status dpt_train(const dpt_train_config *cfg, dpt_comm *comm, dpt_train_report *final);

#ifdef __cplusplus
}
#endif

#endif
