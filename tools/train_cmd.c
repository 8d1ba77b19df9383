/* `dptrain train`: data-parallel training of an MLP or CNN on an IDX data set (Fashion-MNIST by
 * default) or a tensor data set in a safetensors file, alone or under mpirun. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/bench.h"
#include "bench/text_setup.h"
#include "tools/model_choice.h"
#include "dptrain/advanced.h"
#include "tools/commands.h"
#include "tools/options.h"
#include "tools/prep/vocab.h"

#define DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"
/* BERT's recipe leaves biases and layer norm weights undecayed ("embed.norm.weight",
 * "blocks.0.norm1.weight", "mlm.norm.weight"). */
#define BERT_NO_DECAY "*bias,*norm*.weight"
/* The exit status of a run stopped on request (EX_TEMPFAIL: resume it to go on). */
#define EXIT_STOPPED 75

/* What the options set, and what the report callbacks read. */
typedef struct cli {
  dpt_train_config cfg;
  const char *data_dir, *init_weights, *save_weights, *backend; /* argv strings or literals */
  const char *optimizer;                                        /* "sgd" or "adamw" */
  int lr_set, wd_set; /* --lr, --weight-decay given: kept over AdamW's defaults */
  int json, quiet, tty, rank;
  dpt_model_choice mc;   /* --model, --depth, --hidden, --channels */
  const char *test_data; /* --test-data, or NULL */
  int has_test;          /* a test set was loaded */
  dpt_norm_choice norm;  /* --mean, --std */
  float ckpt_minutes;    /* --checkpoint-minutes; NaN: not given */
  float rollback_scale;  /* --rollback-lr-scale */
  float sparse_above;    /* --sparse-dense-above; 0: not given */
  /* --model bert: the text, its vocabulary and the encoder's sizes */
  int bert;
  dpt_text_options text; /* --text, --vocab, --vocab-size, --seq-len, --val-every */
  dpt_bert_options bo;   /* --layers, --hidden-size, --heads, --ffn, --dropout, ... */
  dpt_text_run tr;       /* the loaded text (bert) */
  double unigram_ppl;    /* the unigram baseline's validation perplexity (bert) */
  /* --model dlrm: per-rank interaction shards (docs/recommendation.md) */
  int dlrm;
  dpt_dlrm_options dlo;       /* --embedding-dim, --bottom, --top, --interaction */
  size_t bottom[16], top[16]; /* the hidden sizes dlo points at */
  size_t table_rows[DPT_SHARD_MAX_SPARSE];
  const char *val_data;      /* --val-data pattern, or NULL */
  int node_shards;           /* --node-shards: each node's ranks see their own shard files */
  int nreaders;              /* readers in this process: --replicas, or 1 per rank */
  dpt_interactions **rtrain; /* [nreaders] this process's training readers */
  dpt_interactions **rval;   /* [nreaders] validation readers, or NULL */
  unsigned char given[128];  /* given[i]: options[i] was on the command line */
  dpt_backend_kind replica_kinds[256]; /* --replicas with a --backend list: replica i's */
} cli;

/* The first stop request (signal) received, for cfg.stop_request. */
static volatile sig_atomic_t stop_signal;

/* Open MPI's launcher when it is this process's parent (mpirun, or orted on another node), else
 * 0: its SIGTERM ends the job, and SIGKILL follows odls_base_sigkill_timeout (1 s) later. */
static pid_t launcher_pid;

static pid_t open_mpi_parent(void) {
  char path[64], name[32] = "";
  const pid_t parent = getppid();
  snprintf(path, sizeof path, "/proc/%ld/comm", (long)parent);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  const int ok = fgets(name, sizeof name, f) != NULL;
  fclose(f);
  name[strcspn(name, "\n")] = '\0';
  const char *launchers[] = {"mpirun", "mpiexec", "orterun", "orted", "prterun", "prted"};
  for (size_t i = 0; ok && i < sizeof launchers / sizeof launchers[0]; ++i)
    if (!strcmp(name, launchers[i])) return parent;
  return 0;
}

/* SIGINT, SIGTERM, SIGUSR1: every replica finishes its step, a checkpoint is written, and the
 * run ends; a second SIGINT ends the process at once. SIGTERM from Open MPI's launcher ends the
 * job: a collective quiet since then is left, so that a survivor can write its checkpoint. */
static void on_stop_signal(int sig, siginfo_t *info, void *ctx) {
  (void)ctx;
  if (sig == SIGINT && stop_signal) _exit(130);
  if (!stop_signal) stop_signal = sig;
  if (sig == SIGTERM && info && launcher_pid > 0 && info->si_pid == launcher_pid)
    dpt_comm_note_teardown();
}

static void install_stop_handlers(void) {
  launcher_pid = open_mpi_parent();
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_stop_signal;
  sa.sa_flags = SA_RESTART | SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);
}

/* Options that need more than storing one number or string. Each returns 0, or -1 for a bad
 * value. */
static int parse_model(void *p, const char *v) {
  cli *c = p;
  c->dlrm = !strcmp(v, "dlrm");
  if (c->dlrm) {
    c->mc.model = "dlrm";
    return 0;
  }
  c->bert = !strcmp(v, "bert");
  if (c->bert) {
    c->mc.model = "bert";
    return 0;
  }
  return dpt_model_choice_parse_model(&c->mc, v);
}

static int parse_bottom(void *p, const char *v) {
  cli *c = p;
  return dpt_parse_size_list(v, c->bottom, 16, 1000000, &c->dlo.num_bottom) != 0 ? -1 : 0;
}

static int parse_top(void *p, const char *v) {
  cli *c = p;
  return dpt_parse_size_list(v, c->top, 16, 1000000, &c->dlo.num_top) != 0 ? -1 : 0;
}

static int parse_interaction(void *p, const char *v) {
  cli *c = p;
  if (!strcmp(v, "dot"))
    c->dlo.interaction = DPT_DLRM_DOT;
  else if (!strcmp(v, "cat"))
    c->dlo.interaction = DPT_DLRM_CAT;
  else
    return -1;
  return 0;
}

static int parse_table_lr(void *p, const char *v) {
  char *end;
  errno = 0;
  const double lr = strtod(v, &end);
  if (end == v || *end || errno || !(lr > 0 && lr < 1e30)) return -1;
  ((cli *)p)->cfg.table_lr = lr;
  return 0;
}

static int parse_table_optimizer(void *p, const char *v) {
  cli *c = p;
  if (!strcmp(v, "sgd"))
    c->cfg.exchange.table_optimizer = DPT_TABLE_SGD;
  else if (!strcmp(v, "rowwise-adagrad"))
    c->cfg.exchange.table_optimizer = DPT_TABLE_ROWWISE_ADAGRAD;
  else if (!strcmp(v, "rowwise-adam"))
    c->cfg.exchange.table_optimizer = DPT_TABLE_ROWWISE_ADAM;
  else if (!strcmp(v, "adam"))
    c->cfg.exchange.table_optimizer = DPT_TABLE_ADAM;
  else
    return -1;
  return 0;
}

static int parse_grad_dtype(void *p, const char *v) {
  cli *c = p;
  if (!strcmp(v, "f32"))
    c->cfg.exchange.grad_dtype = DPT_COMM_F32;
  else if (!strcmp(v, "f16"))
    c->cfg.exchange.grad_dtype = DPT_COMM_F16;
  else if (!strcmp(v, "bf16"))
    c->cfg.exchange.grad_dtype = DPT_COMM_BF16;
  else
    return -1;
  return 0;
}

static int parse_split(void *p, const char *v) {
  cli *c = p;
  if (!strcmp(v, "even"))
    c->cfg.devices.split = DPT_SPLIT_EVEN;
  else if (!strcmp(v, "proportional"))
    c->cfg.devices.split = DPT_SPLIT_PROPORTIONAL;
  else
    return -1;
  return 0;
}

static int parse_bucket_mb(void *p, const char *v) {
  cli *c = p;
  if (!strcmp(v, "auto")) {
    c->cfg.exchange.bucket_bytes = DPT_BUCKET_AUTO;
    return 0;
  }
  char *end = NULL;
  const double mb = strtod(v, &end);
  if (!end || *end || !(mb >= 0 && mb <= 1024)) return -1;
  c->cfg.exchange.bucket_bytes = (size_t)(mb * 1048576.0);
  return 0;
}

static int parse_text(void *p, const char *v) {
  cli *c = p;
  return dpt_text_options_add_path(&c->text, v);
}

static int set_skip(void *p, const char *v) {
  cli *c = p;
  (void)v;
  c->cfg.checks.on_nonfinite = DPT_NONFINITE_SKIP;
  return 0;
}

static int parse_nonfinite(void *p, const char *v) {
  cli *c = p;
  static const char *const names[] = {"stop", "skip", "rollback"};
  for (int i = 0; i < 3; ++i)
    if (!strcmp(v, names[i])) {
      c->cfg.checks.on_nonfinite = (dpt_nonfinite_policy)i;
      return 0;
    }
  return -1;
}

static int parse_hidden(void *p, const char *v) {
  cli *c = p;
  return dpt_model_choice_parse_hidden(&c->mc, v);
}

static int parse_channels(void *p, const char *v) {
  cli *c = p;
  return dpt_model_choice_parse_channels(&c->mc, v);
}

static int parse_mean(void *p, const char *v) {
  cli *c = p;
  return dpt_norm_choice_parse_mean(&c->norm, v);
}

static int parse_std(void *p, const char *v) {
  cli *c = p;
  return dpt_norm_choice_parse_std(&c->norm, v);
}

static int parse_optimizer(void *p, const char *v) {
  cli *c = p;
  c->optimizer = v;
  for (int k = 0; k < DPT_OPTIM_KIND_COUNT; ++k)
    if (!strcmp(v, dpt_optim_kind_name((dpt_optim_kind)k))) {
      c->cfg.optim.kind = (dpt_optim_kind)k;
      return 0;
    }
  return -1;
}

static int parse_lr(void *p, const char *v) {
  cli *c = p;
  c->lr_set = 1;
  return dpt_opt_parse_float(v, &c->cfg.optim.lr);
}

static int parse_weight_decay(void *p, const char *v) {
  cli *c = p;
  c->wd_set = 1;
  return dpt_opt_parse_float(v, &c->cfg.optim.weight_decay);
}

static int parse_schedule(void *p, const char *v) {
  cli *c = p;
  for (int k = 0; k < DPT_SCHEDULE_KIND_COUNT; ++k) {
    if (strcmp(v, dpt_schedule_kind_name((dpt_schedule_kind)k))) continue;
    c->cfg.optim.schedule = (dpt_schedule_kind)k;
    return 0;
  }
  return -1;
}

#define OPT_TARGET cli

static const dpt_opt options[] = {
    {.help = "model and data:"},
    {"--model", "M",
     "mlp|cnn|resnet|bert|dlrm, or a model file (FILE.json or a\n"
     "path; see docs/layers.md; bert: masked-language-model\n"
     "pretraining on --text, docs/text.md; dlrm: click prediction\n"
     "on interaction shards, docs/recommendation.md) (default mlp)",
     CUSTOM(parse_model)},
    {"--depth", "N", "resnet depth, 6n+2: 20, 32, 44, 56, 110 (default 20)", SIZE(mc.depth, 8)},
    {"--sync-bn", NULL,
     "batch norm statistics over the whole global batch (default:\n"
     "each replica's slice, replica 0's running statistics kept)",
     FLAG(cfg.exchange.sync_bn, 1)},
    {"--hidden", "LIST", "mlp hidden sizes, comma-separated (default 512,256)",
     CUSTOM(parse_hidden)},
    {"--channels", "C1,C2", "cnn channels of its two conv blocks (default 32,64)",
     CUSTOM(parse_channels)},
    {"--data", "PATH",
     "a directory of IDX files (train-*, t10k-*, plain or .gz;\n"
     "default " DEFAULT_DATA_DIR "), or a\n"
     "safetensors file of x [N,C,H,W] or [N,F] and labels y [N]",
     STRING(data_dir)},
    {"--test-data", "PATH",
     "the test set (safetensors file or IDX directory; default:\n"
     "the IDX directory's t10k-* files; none: no test evaluation)",
     STRING(test_data)},
    {"--mean", "LIST",
     "normalize: subtract these per-channel means (one value per\nchannel, or one for all; after "
     "/255 for uint8 data)",
     CUSTOM(parse_mean)},
    {"--std", "LIST", "normalize: then divide by these per-channel deviations", CUSTOM(parse_std)},
    {"--random-crop", "PAD",
     "augment: pad by PAD zeros, crop back at a random offset\n"
     "(training set only, drawn from the seed, epoch and sample)",
     .kind = DPT_OPT_SIZE, .field = FIELD(cfg.data.transform.crop_pad, size_t),
     .hi = DPT_DATA_MAX_CROP_PAD},
    {"--hflip", NULL, "augment: flip horizontally with probability 1/2",
     FLAG(cfg.data.transform.hflip, 1)},
    {.help = "dlrm (--model dlrm; --data 'DIR/train-*.bin', quoted: a shard pattern):"},
    {"--val-data", "PATTERN",
     "validation shards: each rank scores its own; AUC, logloss\n"
     "and accuracy over all of them every epoch (default: none)",
     STRING(val_data)},
    {"--node-shards", NULL,
     "each node holds its own shard files (the patterns expanded\n"
     "on every node); ranks that see the same files share them\n"
     "(docs/recommendation.md, \"Shards on each node\")",
     FLAG(node_shards, 1)},
    {"--embedding-dim", "N", "embedding dimension (default 16)", SIZE(dlo.dim, 1)},
    {"--bottom", "LIST", "bottom MLP hidden sizes, then the dimension (default 64,32)",
     CUSTOM(parse_bottom)},
    {"--top", "LIST", "top MLP hidden sizes, then one logit (default 64,32)", CUSTOM(parse_top)},
    {"--interaction", "dot|cat", "feature interaction (default dot)", CUSTOM(parse_interaction)},
    {"--sparse-tables", NULL,
     "the tables' gradients as (row id, row) pairs, their touched\n"
     "rows updated by --table-optimizer; the rest by --optimizer\n"
     "(docs/recommendation.md, \"Sparse table gradients\")",
     FLAG(cfg.exchange.sparse_tables, 1)},
    {"--table-optimizer", "NAME",
     "with --sparse-tables: the tables' update, at --table-lr:\n"
     "adam (the default; per element, a row's missed steps made\n"
     "up when it is next touched: the dense exchange's Adam),\n"
     "rowwise-adam (a first moment per element, a second per row),\n"
     "rowwise-adagrad (DLRM's) or sgd",
     CUSTOM(parse_table_optimizer), .choices = "adam, rowwise-adam, rowwise-adagrad or sgd"},
    {"--table-lr", "LR",
     "with --sparse-tables: the tables' learning rate, scaled by\n"
     "--lr's schedule (default: adam " DPT_TABLE_ADAM_CATCHUP_LR_TEXT
     ", rowwise-adam " DPT_TABLE_ADAM_LR_TEXT ",\nrowwise-adagrad " DPT_TABLE_ADAGRAD_LR_TEXT
     ", sgd " DPT_TABLE_SGD_LR_TEXT ")",
     CUSTOM(parse_table_lr)},
    {"--sparse-dense-above", "F",
     "with --sparse-tables: a table's step all-reduces its dense\n"
     "gradient when the rows would send more than F x its bytes\n"
     "(default " DPT_SPARSE_DENSE_ABOVE_TEXT ")",
     FLOAT(sparse_above)},
    {.help = "bert (--model bert):"},
    {"--text", "PATH",
     "a text file or a directory's files; repeatable\n"
     "(default " DPT_TEXT_DEFAULT_DIR "); FILE.jsonl: JSON lines",
     CUSTOM(parse_text), .multi = 1},
    {"--text-field", "NAME", "the string field of .jsonl lines (default text)",
     STRING(text.text_field)},
    {"--vocab", "FILE",
     "use this vocabulary: dptrain tokenize --out's BPE (JSON) or\n"
     "a WordPiece vocab.txt (one token per line, as BERT's)",
     STRING(text.vocab)},
    {"--vocab-size", "N", "learn a vocabulary of N tokens from the text (default 4096)",
     SIZE(text.vocab_size, DPT_TOKEN_FIRST_MERGE)},
    {"--seq-len", "N", "tokens per sequence, [CLS] and [SEP] included (default 128)",
     SIZE(text.seq_len, 3)},
    {"--max-positions", "N", "rows of the position table (default: --seq-len)",
     SIZE(bo.max_positions, 1)},
    {"--val-every", "N", "every Nth document validates; 0: none (default 20)",
     SIZE(text.val_every, 0)},
    {"--layers", "N", "encoder blocks (default 4)", SIZE(bo.layers, 1)},
    {"--hidden-size", "N", "hidden size (default 256)", SIZE(bo.hidden, 1)},
    {"--heads", "N", "attention heads, dividing --hidden-size (default 4)", SIZE(bo.heads, 1)},
    {"--ffn", "N", "feed-forward size (default 1024)", SIZE(bo.ffn, 1)},
    {"--dropout", "X", "hidden dropout (default 0.1)", FLOAT(bo.dropout)},
    {"--attn-dropout", "X", "attention-probability dropout (default 0.1)", FLOAT(bo.attn_dropout)},
    {.help = "weights:"},
    {"--init-weights", "PATH",
     "start from these weights (safetensors, PyTorch names), or\n"
     "a Hugging Face BERT directory (config.json, model.safetensors;\n"
     "docs/hf.md)",
     STRING(init_weights)},
    {"--save-weights", "FILE",
     "write the final weights (safetensors); bert: the vocabulary\n"
     "beside it, FILE with .safetensors replaced by .vocab.json",
     STRING(save_weights)},
    {.help = "devices:"},
    {"--backend", "B",
     "auto|cpu|opencl|vulkan (default auto: a GPU if one\n"
     "exists, else cpu); a comma-separated list gives one\n"
     "backend per rank, or per replica with --replicas\n"
     "(rank or replica i takes entry i mod length)",
     STRING(backend)},
    {"--device", "N", "device index (default: the local rank / replica index)",
     INT(cfg.devices.device, 0, 1024)},
    {"--replicas", "K", "replicas as threads of this process (no MPI; default 1)",
     INT(cfg.devices.replicas, 1, 256)},
    {"--split", "even|proportional",
     "how a global batch is cut among the replicas: even\n"
     "(default), or in proportion to each replica's measured\n"
     "forward+backward speed (at most twice the even slice)",
     CUSTOM(parse_split)},
    {"--split-every", "N",
     "proportional: recompute the shares every N steps\n"
     "(default 50; the first after 3 + min(N, 5) steps)",
     I64(cfg.devices.split_every, 1)},
    {.help = "schedule:"},
    {"--global-batch", "B",
     "samples per step over all replicas (default 256; bert 32;\n"
     "dlrm 2048)",
     SIZE(cfg.schedule.global_batch, 1)},
    {"--accumulate", "K",
     "run each replica's slice as K micro-batches, their\n"
     "gradients summed before the exchange: the memory of\n"
     "B/(R K) samples, the step of B (default 1)",
     SIZE(cfg.schedule.accumulate, 1)},
    {"--bucket-mb", "F|auto",
     "exchange the gradient in buckets of about F MiB while\n"
     "backward goes on; auto: sized by a measurement at start-up\n"
     "(default 0: one exchange after backward)",
     CUSTOM(parse_bucket_mb)},
    {"--bucket-whole-update", NULL,
     "with --bucket-mb: update the parameters after the last\n"
     "bucket (default: each bucket's part once its exchange is done)",
     FLAG(cfg.exchange.bucket_whole_update, 1)},
    {"--grad-dtype", "f32|f16|bf16",
     "the gradient exchange's type: f16 or bf16 halves its bytes\n"
     "(summed in float32, rounded after every addition; the full\n"
     "step)",
     CUSTOM(parse_grad_dtype)},
    {"--error-feedback", NULL,
     "with --grad-dtype f16 or bf16: each replica adds its last\n"
     "rounding error to the next step's gradient",
     FLAG(cfg.exchange.grad_error_feedback, 1)},
    {"--trace", "FILE",
     "write a timeline of the run (Chrome trace JSON: Perfetto,\n"
     "chrome://tracing): each replica's loading, layers, exchanges",
     STRING(cfg.trace)},
    {"--log-dir", "DIR",
     "write the run's log into DIR (made if missing): settings.json,\n"
     "steps.jsonl, evals.jsonl and a TensorBoard event file\n"
     "(tensorboard --logdir DIR)",
     STRING(cfg.log_dir)},
    {"--epochs", "E", "(default 10)", I64(cfg.schedule.epochs, 1)},
    {"--max-steps", "S", "stop after S steps (default: no limit)", I64(cfg.schedule.max_steps, 1)},
    {"--keep-last", NULL, "keep each epoch's final partial batch (default: drop it)",
     FLAG(cfg.schedule.keep_last, 1)},
    {"--no-shuffle", NULL, "fixed sample order", FLAG(cfg.schedule.shuffle, 0)},
    {"--seed", "S", "initialization and shuffling seed (default 0)", U64(cfg.schedule.seed, 0)},
    {.help = "optimizer:"},
    {"--optimizer", "sgd|adamw|lamb", "(default sgd; bert and dlrm adamw)",
     CUSTOM(parse_optimizer)},
    {"--lr", "X",
     "learning rate (default 0.05 sgd, 0.001 adamw and lamb, 0.1\n"
     "resnet and dlrm with sgd, 5e-4 bert)",
     CUSTOM(parse_lr)},
    {"--momentum", "X", "sgd momentum (default 0.9; dlrm 0)", FLOAT(cfg.optim.momentum)},
    {"--nesterov", NULL, "sgd Nesterov momentum", FLAG(cfg.optim.nesterov, 1)},
    {"--weight-decay", "X", "(default 0 sgd and dlrm, 0.01 adamw and bert, 5e-4 resnet)",
     CUSTOM(parse_weight_decay)},
    {"--no-decay", "PATTERNS",
     "no weight decay on the tensors these comma-separated shell\n"
     "patterns name, e.g. '*.bias,*norm*' (see --model's names;\n"
     "bert default '" BERT_NO_DECAY "')",
     STRING(cfg.optim.no_decay)},
    {"--schedule", "S",
     "constant|step|cosine|linear (default cosine: from --lr to 0\n"
     "over the run, after the warmup; linear: the same, straight;\n"
     "bert: linear; dlrm: constant)",
     CUSTOM(parse_schedule)},
    {"--step-size", "N",
     "step schedule: lr *= gamma every N steps\n"
     "(required by --schedule step)",
     I64(cfg.optim.step_size, 1)},
    {"--gamma", "X", "step schedule's gamma (default 0.1)", FLOAT(cfg.optim.gamma)},
    {"--warmup", "N",
     "linear warmup over N steps (default 0; resnet, with any\n"
     "optimizer: one epoch, at most a fifth of the run; bert: a\n"
     "tenth of the run)",
     I64(cfg.optim.warmup_steps, 0)},
    {"--decay-weights-only", NULL,
     "weight decay on linear and conv2d weights only, not on\n"
     "biases and batch norm (always with resnet and sgd)",
     FLAG(cfg.optim.decay_weights_only, 1)},
    {"--clip-norm", "X", "clip the global gradient norm to X (bert default 1)",
     FLOAT(cfg.optim.clip_norm)},
    {"--full-step", NULL,
     "every replica runs the whole optimizer step after an\n"
     "all-reduce (default: the sharded step: reduce-scatter,\n"
     "each replica updates 1/R of the parameters, all-gather;\n"
     "the same update with less work)",
     FLAG(cfg.exchange.full_optimizer_step, 1)},
    {"--deterministic", NULL,
     "the same parameters, bit for bit, on any number of\n"
     "replicas: slices of whole groups, each group's gradient\n"
     "alone (batch norm over the group), summed exactly in\n"
     "64-bit fixed point (docs/training.md)",
     FLAG(cfg.deterministic, 1)},
    {"--group-size", "G",
     "with --deterministic: samples per group, dividing the\n"
     "global batch (default: the largest divisor up to 32\n"
     "that leaves 8 groups or more)",
     SIZE(cfg.group_size, 1)},
    {.help = "checkpoints:"},
    {"--checkpoint-dir", "DIR", "write checkpoints into DIR (rank 0's file system)",
     STRING(cfg.checkpoints.checkpoint_dir)},
    {"--checkpoint-every", "N", "a checkpoint every N steps (default: every epoch)",
     I64(cfg.checkpoints.checkpoint_every, 1)},
    {"--checkpoint-minutes", "M", "also one when M minutes passed since the last (default 10)",
     FLOAT(ckpt_minutes)},
    {"--keep-checkpoints", "K", "keep the newest K (default 3)",
     INT(cfg.checkpoints.keep_checkpoints, 1, 1000000)},
    {"--resume", NULL,
     "continue from the newest valid checkpoint in --checkpoint-dir\n"
     "(none there: start from the beginning)",
     FLAG(cfg.checkpoints.resume, 1)},
    {.help = "checks and output:"},
    {"--check-every", "N", "compare replica fingerprints every N steps (default 100)",
     I64(cfg.checks.check_every, 0)},
    {"--on-nonfinite", "P",
     "a step with a non-finite loss, reduced gradient or, with\n"
     "--clip-norm, gradient norm: stop, skip it, or rollback to the\n"
     "newest checkpoint and go on after it (default stop)",
     CUSTOM(parse_nonfinite)},
    {"--skip-nonfinite", NULL, "the same as --on-nonfinite skip", CUSTOM(set_skip)},
    {"--max-skipped", "N",
     "with skip: fail after N skipped steps in a row, or more than\n"
     "N or 1% of the run (default 10; -1: no limit)",
     I64(cfg.checks.max_skipped, -1)},
    {"--max-rollbacks", "N", "with rollback: fail at the rollback after N (default 3)",
     INT(cfg.checks.max_rollbacks, 0, 1000000)},
    {"--rollback-lr-scale", "F",
     "with rollback: multiply the learning rate by F (0 < F <= 1)\n"
     "at each rollback (default 1)",
     FLOAT(rollback_scale)},
    {"--json", NULL, "one JSON object per epoch, then a final one", FLAG(json, 1)},
    {"--quiet", NULL, "no progress bar", FLAG(quiet, 1)},
};
#define NUM_OPTIONS (sizeof options / sizeof options[0])

static const dpt_opt_cmd train_cmd = {
    "dptrain train",
    "usage: dptrain train [options]            (one process)\n"
    "       mpirun -np N dptrain train [options] (N ranks, one replica each)\n"
    "\n"
    "Trains a classifier data-parallel: every replica holds the whole model, takes its\n"
    "slice of each global batch, gradients are summed with a ring all-reduce, and one\n"
    "synchronized optimizer step keeps the replicas identical. SIGINT, SIGTERM or\n"
    "SIGUSR1 stop it after the current step, with a checkpoint when --checkpoint-dir\n"
    "is given (exit status 75); a second SIGINT stops it at once.\n",
    options,
    NUM_OPTIONS,
    0,
};

const dpt_opt_cmd *dpt_train_options(void) {
  return &train_cmd;
}

_Static_assert(NUM_OPTIONS <= sizeof(((cli *)0)->given), "cli.given has a flag per option");

/* Whether option `name` was on the command line. */
static int given(const cli *c, const char *name) {
  const dpt_opt *o = dpt_opt_find(&train_cmd, name);
  return o && c->given[o - options];
}

/* What parse_options and the other start-up steps return to mean "no exit yet". */
#define KEEP_GOING DPT_OPT_KEEP_GOING

/* A usage error: its line, then the usage text, on stderr; returns the exit code 2. */
__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("dptrain train: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  dpt_opt_usage(&train_cmd, stderr);
  return 2;
}

/* Entry `i` of a comma-separated --backend list into tok (NUL-terminated); the number of
 * entries, empty ones included. */
static int backend_entry(const char *spec, int i, char *tok, size_t cap) {
  int n = 0;
  tok[0] = '\0';
  for (const char *p = spec;; ++n) {
    const char *e = strchr(p, ',');
    const size_t len = e ? (size_t)(e - p) : strlen(p);
    if (n == i) snprintf(tok, cap, "%.*s", (int)(len < cap ? len : cap - 1), p);
    if (!e) return n + 1;
    p = e + 1;
  }
}

/* Every entry of the list is auto or a backend name: checked the same on every rank before
 * any rank starts, so a bad entry stops them all instead of only the rank that draws it. */
static int check_backend_list(const char *spec) {
  char tok[32];
  const int n = backend_entry(spec, 0, tok, sizeof tok);
  for (int i = 0; i < n; ++i) {
    backend_entry(spec, i, tok, sizeof tok);
    dpt_backend_kind k;
    if (strcmp(tok, "auto") != 0 && dpt_backend_kind_parse(tok, &k) != DPT_OK) return -1;
  }
  return 0;
}

/* The backend of `rank`: entry rank mod (entries) of a list check_backend_list accepted;
 * "auto" = the first GPU found (OpenCL, then Vulkan), else the CPU. */
static void pick_backend(const char *spec, int rank, dpt_backend_kind *out) {
  char tok[32];
  const int n = backend_entry(spec, 0, tok, sizeof tok);
  backend_entry(spec, rank % n, tok, sizeof tok);
  if (strcmp(tok, "auto") == 0) {
    const dpt_backend_kind order[] = {DPT_BACKEND_OPENCL, DPT_BACKEND_VULKAN};
    for (size_t k = 0; k < 2; ++k) {
      int count = 0;
      if (!dpt_backend_compiled(order[k]) || dpt_device_count(order[k], &count) != DPT_OK) continue;
      for (int d = 0; d < count; ++d) {
        dpt_device_info info;
        if (dpt_device_get_info(order[k], d, &info) == DPT_OK && info.type != DPT_DEVICE_CPU &&
            info.type != DPT_DEVICE_OTHER) {
          *out = order[k];
          return;
        }
      }
    }
    *out = DPT_BACKEND_CPU;
    return;
  }
  (void)dpt_backend_kind_parse(tok, out); /* checked by check_backend_list */
}

/* JSON has no NaN: a value that is not finite is null. */
static void json_number(const char *key, double v, const char *fmt) {
  printf("\"%s\": ", key);
  if (isfinite(v))
    printf(fmt, v);
  else
    printf("null");
  printf(", ");
}

static void json_report(const dpt_train_report *r, int dlrm, int split) {
  printf("{");
  if (r->final)
    printf("\"final\": true, ");
  else
    printf("\"epoch\": %lld, ", (long long)r->epoch);
  printf("\"steps\": %lld, \"skipped_steps\": %lld, ", (long long)r->steps,
         (long long)r->skipped_steps);
  if (!r->final) json_number("train_loss", r->train_loss, "%.6f");
  json_number("test_loss", r->test_loss, "%.6f");
  json_number("test_accuracy", r->test_accuracy, "%.4f");
  if (dlrm) {
    json_number("test_auc", r->test_auc, "%.6f");
    json_number("test_logloss", r->test_logloss, "%.6f");
  }
  if (r->labels_per_sample > 1) {
    json_number("test_perplexity", r->test_perplexity, "%.4f");
    json_number("tokens_per_sec", r->samples_per_sec * (double)r->labels_per_sample, "%.1f");
  }
  json_number("samples_per_sec", r->samples_per_sec, "%.1f");
  json_number("seconds", r->seconds, "%.3f");
  if (r->final) {
    json_number("compute_seconds", r->compute_seconds, "%.3f");
    json_number("allreduce_seconds", r->allreduce_seconds, "%.3f");
    json_number("exchange_seconds", r->exchange_seconds, "%.3f");
    json_number("exposed_seconds", r->exposed_seconds, "%.3f");
    json_number("optimizer_seconds", r->optimizer_seconds, "%.3f");
    json_number("imbalance_seconds", r->imbalance_seconds, "%.3f");
    printf("\"num_params\": %zu, \"activation_bytes\": %zu, ", r->num_params, r->activation_bytes);
    if (r->sparse_dense_bytes > 0)
      printf("\"sparse_sent_bytes\": %llu, \"sparse_dense_bytes\": %llu, ",
             (unsigned long long)r->sparse_sent_bytes, (unsigned long long)r->sparse_dense_bytes);
  }
  if (r->shares && split) {
    printf("\"shares\": [");
    for (int i = 0; i < r->replicas; ++i)
      printf("%s%zu", i ? ", " : "", r->shares[i]);
    printf("], ");
  }
  printf("\"ranks\": %d, \"replicas\": %d, \"backend\": \"%s\", \"param_hash\": \"%016llx\"}\n",
         r->ranks, r->replicas, r->backend, (unsigned long long)r->param_hash);
  fflush(stdout);
}

static void on_report(const dpt_train_report *r, void *user) {
  cli *c = user;
  if (c->tty && !c->quiet && !c->json) fprintf(stderr, "\r\033[K");
  if (c->json) {
    json_report(r, c->dlrm, c->cfg.devices.split == DPT_SPLIT_PROPORTIONAL);
    return;
  }
  if (r->final) {
    char acc[80] = "no test set";
    if (c->has_test && c->dlrm)
      snprintf(acc, sizeof acc, "validation AUC %.4f, logloss %.4f, accuracy %.4f", r->test_auc,
               r->test_logloss, r->test_accuracy);
    else if (c->has_test && c->bert)
      snprintf(acc, sizeof acc, "masked accuracy %.4f, perplexity %.2f", r->test_accuracy,
               r->test_perplexity);
    else if (c->has_test)
      snprintf(acc, sizeof acc, "test accuracy %.4f", r->test_accuracy);
    printf("done: %lld steps in %.1f s, %.0f samples/s, %d replica%s (%d rank%s, %s), %s, "
           "parameters %016llx\n",
           (long long)r->steps, r->seconds, r->samples_per_sec, r->replicas,
           r->replicas == 1 ? "" : "s", r->ranks, r->ranks == 1 ? "" : "s", r->backend, acc,
           (unsigned long long)r->param_hash);
    if (r->compute_seconds + r->allreduce_seconds + r->optimizer_seconds > 0)
      printf("time on replica 0: forward+backward %.2f s, communication %.2f s, "
             "optimizer %.2f s\n",
             r->compute_seconds, r->allreduce_seconds, r->optimizer_seconds);
    if (r->exchange_seconds > 0)
      printf("gradient exchange: %.2f s, of which the steps waited %.2f s (%.0f %% exposed)\n",
             r->exchange_seconds, r->exposed_seconds,
             100.0 * r->exposed_seconds / r->exchange_seconds);
    printf("model: %zu parameters, %.1f MiB of activations per replica\n", r->num_params,
           (double)r->activation_bytes / 1048576.0);
    if (c->cfg.exchange.sparse_tables && r->steps > 0)
      printf("sparse tables: %.0f bytes sent per replica per step (the tables' dense all-reduce: "
             "%.0f)\n",
             (double)r->sparse_sent_bytes / (double)r->steps,
             (double)r->sparse_dense_bytes / (double)r->steps);
    if (r->replicas > 1)
      printf("uneven replicas: %.2f s (the slowest replica's forward+backward over the mean, "
             "summed over the steps)\n",
             r->imbalance_seconds);
  } else if (c->bert) {
    printf("epoch %3lld  loss %.4f  ", (long long)r->epoch, r->train_loss);
    if (c->has_test)
      printf("val loss %.4f  masked accuracy %.4f  perplexity %.2f (unigram %.2f)", r->test_loss,
             r->test_accuracy, r->test_perplexity, c->unigram_ppl);
    else
      printf("(no validation set)");
    printf("  %6.0f samples/s  %8.0f tokens/s  %6.1f s", r->samples_per_sec,
           r->samples_per_sec * (double)r->labels_per_sample, r->seconds);
    if (r->skipped_steps) printf("  (%lld steps skipped)", (long long)r->skipped_steps);
    printf("\n");
  } else if (c->dlrm && c->has_test) {
    printf("epoch %3lld  loss %.4f  val auc %.4f  logloss %.4f  accuracy %.4f  %8.0f samples/s  "
           "%6.1f s",
           (long long)r->epoch, r->train_loss, r->test_auc, r->test_logloss, r->test_accuracy,
           r->samples_per_sec, r->seconds);
    if (r->skipped_steps) printf("  (%lld steps skipped)", (long long)r->skipped_steps);
    printf("\n");
  } else if (!c->has_test) {
    printf("epoch %3lld  loss %.4f  (no test set)  %8.0f samples/s  %6.1f s", (long long)r->epoch,
           r->train_loss, r->samples_per_sec, r->seconds);
    if (r->skipped_steps) printf("  (%lld steps skipped)", (long long)r->skipped_steps);
    printf("\n");
  } else {
    printf("epoch %3lld  loss %.4f  test loss %.4f  test accuracy %.4f  %8.0f samples/s  %6.1f s",
           (long long)r->epoch, r->train_loss, r->test_loss, r->test_accuracy, r->samples_per_sec,
           r->seconds);
    if (r->skipped_steps) printf("  (%lld steps skipped)", (long long)r->skipped_steps);
    printf("\n");
  }
  fflush(stdout);
}

static void on_progress(int64_t epoch, size_t batch, size_t batches, double loss, void *user) {
  cli *c = user;
  if (!c->tty || c->quiet || c->json) return;
  if (batch != batches && batch % 10 != 0) return;
  int width = 30, filled = (int)((double)width * (double)batch / (double)batches);
  fprintf(stderr, "\repoch %lld [%.*s%*s] %zu/%zu loss %.4f", (long long)epoch, filled,
          "##############################", width - filled, "", batch, batches, loss);
  fflush(stderr);
}

/* Prints a failure: one line, from the rank where it happened. Decisions every rank takes
 * together (non-finite values, disagreement) and failures seen on another replica are printed
 * by rank 0 only; a timeout by every rank that saw it, since the rank that stalled may be
 * rank 0. */
static int fail(const cli *c, dpt_status st, const char *msg) {
  if (!msg) msg = dpt_last_error();
  int global = st == DPT_ERR_NONFINITE || st == DPT_ERR_MISMATCH || st == DPT_ERR_PEER ||
               st == DPT_ERR_INTERRUPTED;
  if (c->rank == 0 || !global) {
    if (c->rank > 0)
      fprintf(stderr, "dptrain: rank %d: %s: %s\n", c->rank, dpt_status_str(st), msg);
    else
      fprintf(stderr, "dptrain: %s: %s\n", dpt_status_str(st), msg);
  }
  return st == DPT_ERR_INTERRUPTED ? EXIT_STOPPED : 1;
}

/* The proportional split's new shares, with the per-sample times they come from. */
static void on_split(int64_t step, const size_t *shares, const double *per, int replicas,
                     void *user) {
  cli *c = user;
  if (c->quiet) return;
  if (c->tty && !c->json) fprintf(stderr, "\r\033[K");
  char line[1024];
  size_t len =
      (size_t)snprintf(line, sizeof line, "split after step %lld: shares", (long long)step);
  for (int i = 0; i < replicas && len < sizeof line; ++i)
    len += (size_t)snprintf(line + len, sizeof line - len, " %zu", shares[i]);
  for (int i = 0; i < replicas && len < sizeof line; ++i)
    len += (size_t)snprintf(line + len, sizeof line - len, "%s%.3g",
                            i ? " " : " (ms/sample: ", per[i] * 1e3);
  fprintf(stderr, "dptrain: %s)\n", line);
}

static void on_log(const char *line, void *user) {
  cli *c = user;
  if (c->tty && !c->quiet && !c->json) fprintf(stderr, "\r\033[K");
  fprintf(stderr, "dptrain: %s\n", line);
}

/* The tool's defaults where they differ from dpt_train_config_default's. */
static void set_defaults(cli *c) {
  memset(c, 0, sizeof *c);
  dpt_train_config_default(&c->cfg);
  /* A fixed-length run ends better annealed: cosine is the tool's default (the library's
   * default stays constant); docs/performance.md has the measurements. */
  c->cfg.optim.schedule = DPT_SCHEDULE_COSINE;
  c->data_dir = DEFAULT_DATA_DIR;
  c->backend = "auto";
  c->optimizer = "sgd";
  dpt_model_choice_default(&c->mc);
  c->cfg.optim.warmup_steps = -1; /* not given: plan_schedule picks the model's default */
  c->ckpt_minutes = NAN;          /* not given */
  c->rollback_scale = 1.0f;
  dpt_text_options_default(&c->text);
  dpt_bert_options_default(&c->bo);
  c->unigram_ppl = NAN;
  dpt_dlrm_options_default(&c->dlo);
  c->bottom[0] = c->top[0] = 64;
  c->bottom[1] = c->top[1] = 32;
  c->dlo.num_bottom = c->dlo.num_top = 2;
}

/* --model dlrm: the recipe for whatever was not given (AdamW lr 1e-3 without weight decay, or
 * SGD lr 0.1 without momentum when --optimizer sgd; constant, global batch 2048; with
 * --sparse-tables, row-wise Adagrad for the tables), and the options that do not apply to shards
 * refused. KEEP_GOING or 2. */
static int dlrm_options(cli *c) {
  static const char *const dlrm_only[] = {"--val-data",
                                          "--embedding-dim",
                                          "--bottom",
                                          "--top",
                                          "--interaction",
                                          "--sparse-tables",
                                          "--sparse-dense-above",
                                          "--table-optimizer",
                                          "--table-lr",
                                          "--node-shards"};
  if (c->dlrm && c->cfg.devices.split == DPT_SPLIT_PROPORTIONAL)
    return usage_error("--split proportional does not apply to --model dlrm: each rank's slice "
                       "comes from its own interaction shards");
  if (!c->dlrm) {
    for (size_t i = 0; i < sizeof dlrm_only / sizeof dlrm_only[0]; ++i)
      if (given(c, dlrm_only[i])) return usage_error("%s is for --model dlrm", dlrm_only[i]);
    return KEEP_GOING;
  }
  static const char *const not_dlrm[] = {
      "--test-data",  "--mean",    "--std",   "--random-crop", "--hflip",   "--keep-last",
      "--no-shuffle", "--sync-bn", "--depth", "--hidden",      "--channels"};
  for (size_t i = 0; i < sizeof not_dlrm / sizeof not_dlrm[0]; ++i)
    if (given(c, not_dlrm[i]))
      return usage_error("%s does not apply to --model dlrm (validation: --val-data)", not_dlrm[i]);
  if (given(c, "--sparse-dense-above") &&
      (!c->cfg.exchange.sparse_tables || !(c->sparse_above > 0)))
    return usage_error("--sparse-dense-above needs --sparse-tables and a value > 0");
  c->cfg.exchange.sparse_dense_above = c->sparse_above;
  if (given(c, "--table-optimizer") && !c->cfg.exchange.sparse_tables)
    return usage_error("--table-optimizer needs --sparse-tables");
  if (given(c, "--table-lr") && !c->cfg.exchange.sparse_tables)
    return usage_error("--table-lr needs --sparse-tables");
  if (c->cfg.exchange.sparse_tables && !given(c, "--table-optimizer"))
    c->cfg.exchange.table_optimizer = DPT_TABLE_ADAM;
  if (!given(c, "--data"))
    return usage_error("--model dlrm needs --data 'DIR/train-*.bin' (interaction shards)");
  if (!given(c, "--optimizer")) {
    c->optimizer = "adamw";
    c->cfg.optim.kind = DPT_OPTIM_ADAMW;
  }
  if (!given(c, "--schedule")) c->cfg.optim.schedule = DPT_SCHEDULE_CONSTANT;
  if (!given(c, "--global-batch")) c->cfg.schedule.global_batch = 2048;
  if (!given(c, "--momentum")) c->cfg.optim.momentum = 0.0f;
  if (!c->lr_set) {
    c->lr_set = 1;
    c->cfg.optim.lr = c->cfg.optim.kind == DPT_OPTIM_SGD ? 0.1f : 1e-3f;
  }
  if (!c->wd_set) { /* decay would shrink every row of a table, seen or not */
    c->wd_set = 1;
    c->cfg.optim.weight_decay = 0.0f;
  }
  c->dlo.bottom = c->bottom;
  c->dlo.top = c->top;
  return KEEP_GOING;
}

static int is_dir(const char *path) {
  struct stat sb;
  return path && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* --init-weights DIR (a Hugging Face BERT directory): the encoder's sizes from its config.json
 * where not given (given ones must agree), its vocab.txt unless --vocab says otherwise. */
static int hf_options(cli *c) {
  dpt_bert_options h = c->bo;
  if (dpt_hf_bert_read_config(c->init_weights, &h) != DPT_OK)
    return usage_error("--init-weights: %s", dpt_last_error());
  static const struct {
    const char *opt;
    size_t offset;
  } sizes[] = {{"--layers", offsetof(dpt_bert_options, layers)},
               {"--hidden-size", offsetof(dpt_bert_options, hidden)},
               {"--heads", offsetof(dpt_bert_options, heads)},
               {"--ffn", offsetof(dpt_bert_options, ffn)},
               {"--max-positions", offsetof(dpt_bert_options, max_positions)}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    size_t *mine = (size_t *)((char *)&c->bo + sizes[i].offset);
    const size_t theirs = *(const size_t *)((const char *)&h + sizes[i].offset);
    if (given(c, sizes[i].opt) && *mine != theirs)
      return usage_error("%s %zu, but %s/config.json says %zu", sizes[i].opt, *mine,
                         c->init_weights, theirs);
    *mine = theirs;
  }
  c->bo.ln_eps = h.ln_eps;
  static char vocab[4200];
  static const char *const names[] = {"vocab.txt", "dptrain_bpe.json"};
  for (size_t i = 0; !c->text.vocab && !given(c, "--vocab-size") && i < 2; ++i) {
    snprintf(vocab, sizeof vocab, "%s/%s", c->init_weights, names[i]);
    if (access(vocab, R_OK) == 0) c->text.vocab = vocab;
  }
  return KEEP_GOING;
}

/* --model bert: BERT's recipe for whatever was not given (docs/training.md), and the option
 * checks that need no text. KEEP_GOING or the exit code 2. */
static int bert_options(cli *c) {
  if (!c->bert) {
    static const char *const text_only[] = {
        "--text",          "--text-field", "--vocab",       "--vocab-size",  "--seq-len",
        "--max-positions", "--val-every",  "--layers",      "--hidden-size", "--heads",
        "--ffn",           "--dropout",    "--attn-dropout"};
    for (size_t i = 0; i < sizeof text_only / sizeof text_only[0]; ++i)
      if (given(c, text_only[i])) return usage_error("%s is for --model bert", text_only[i]);
    return KEEP_GOING;
  }
  if (given(c, "--data") || given(c, "--test-data"))
    return usage_error("--model bert trains on --text, not --data or --test-data");
  static const char *const not_bert[] = {"--hidden", "--depth", "--channels", "--sync-bn"};
  for (size_t i = 0; i < sizeof not_bert / sizeof not_bert[0]; ++i)
    if (given(c, not_bert[i]))
      return usage_error("%s does not apply to --model bert (the encoder's width: --hidden-size)",
                         not_bert[i]);
  if (given(c, "--vocab") && given(c, "--vocab-size"))
    return usage_error("--vocab and --vocab-size exclude each other (a vocabulary is read or "
                       "learned)");
  if (is_dir(c->init_weights)) {
    const int rc = hf_options(c);
    if (rc != KEEP_GOING) return rc;
  }
  c->bo.seq_len = c->text.seq_len;
  if (c->bo.max_positions && c->text.seq_len > c->bo.max_positions)
    return usage_error("--seq-len %zu is beyond the position table (--max-positions %zu)",
                       c->text.seq_len, c->bo.max_positions);
  if (c->bo.hidden % c->bo.heads != 0)
    return usage_error("--heads %zu does not divide --hidden-size %zu", c->bo.heads, c->bo.hidden);
  if (!(c->bo.dropout >= 0 && c->bo.dropout < 1) ||
      !(c->bo.attn_dropout >= 0 && c->bo.attn_dropout < 1))
    return usage_error("--dropout and --attn-dropout must be in [0, 1)");
  if (!given(c, "--optimizer")) {
    c->optimizer = "adamw";
    c->cfg.optim.kind = DPT_OPTIM_ADAMW;
  }
  if (!given(c, "--schedule")) c->cfg.optim.schedule = DPT_SCHEDULE_LINEAR;
  if (!given(c, "--global-batch")) c->cfg.schedule.global_batch = 32;
  if (!given(c, "--clip-norm")) c->cfg.optim.clip_norm = 1.0f;
  if (!given(c, "--no-decay")) c->cfg.optim.no_decay = BERT_NO_DECAY;
  if (!c->lr_set) {
    c->lr_set = 1;
    c->cfg.optim.lr = 5e-4f;
  }
  if (!c->wd_set) {
    c->wd_set = 1;
    c->cfg.optim.weight_decay = 0.01f;
  }
  c->text.mask_seed = c->cfg.schedule.seed;
  c->text.for_training = 1;
  return KEEP_GOING;
}

/* What depends on several options: AdamW's own defaults for the settings not given, SGD
 * without weight decay unless asked, and a --backend list every rank accepts. KEEP_GOING or
 * the exit code 2. */
static int check_options(cli *c) {
  const int b = bert_options(c);
  if (b != KEEP_GOING) return b;
  const int d = dlrm_options(c);
  if (d != KEEP_GOING) return d;
  if (c->cfg.optim.kind != DPT_OPTIM_SGD) {
    dpt_optim_config o = c->cfg.optim;
    dpt_optim_config_default(&c->cfg.optim, o.kind);
    c->cfg.optim.schedule = o.schedule;
    c->cfg.optim.step_size = o.step_size;
    c->cfg.optim.gamma = o.gamma;
    c->cfg.optim.warmup_steps = o.warmup_steps;
    c->cfg.optim.clip_norm = o.clip_norm;
    c->cfg.optim.no_decay = o.no_decay;
    if (c->lr_set) c->cfg.optim.lr = o.lr;
    if (c->wd_set) c->cfg.optim.weight_decay = o.weight_decay;
  } else if (!strcmp(c->mc.model, "resnet")) {
    /* The ResNet recipe (docs/training.md): lr 0.1, weight decay 5e-4 on conv and linear
     * weights only, a warmup (plan_schedule), cosine decay. */
    if (!c->lr_set) c->cfg.optim.lr = 0.1f;
    if (!c->wd_set) c->cfg.optim.weight_decay = 5e-4f;
    c->cfg.optim.decay_weights_only = 1;
  } else if (!c->wd_set) {
    c->cfg.optim.weight_decay = 0.0f;
  }
  if (!c->norm.num_mean != !c->norm.num_std || c->norm.num_mean != c->norm.num_std) {
    fprintf(stderr,
            "dptrain train: --mean and --std go together, with as many values (%zu and "
            "%zu given)\n",
            c->norm.num_mean, c->norm.num_std);
    return 2;
  }
  if (c->norm.num_mean) {
    c->cfg.data.transform.channels = c->norm.num_mean;
    c->cfg.data.transform.mean = c->norm.mean;
    c->cfg.data.transform.std = c->norm.std;
  }
  c->cfg.data.transform.seed = c->cfg.schedule.seed;
  c->cfg.checks.rollback_lr_scale = c->rollback_scale;
  if (c->ckpt_minutes < 0 || c->rollback_scale <= 0 || c->rollback_scale > 1) {
    fprintf(stderr, "dptrain train: --checkpoint-minutes must be >= 0 and --rollback-lr-scale "
                    "in (0, 1]\n");
    return 2;
  }
  if (c->cfg.checkpoints.checkpoint_dir)
    c->cfg.checkpoints.checkpoint_minutes = isnan(c->ckpt_minutes) ? 10 : c->ckpt_minutes;
  if (given(c, "--split-every") && c->cfg.devices.split != DPT_SPLIT_PROPORTIONAL)
    return usage_error("--split-every needs --split proportional");
  if (check_backend_list(c->backend) != 0) {
    fprintf(stderr,
            "dptrain train: bad --backend '%s' (auto, cpu, opencl, vulkan or a "
            "comma-separated list of them)\n",
            c->backend);
    return 2;
  }
  return KEEP_GOING;
}

/* Communicator first: the rank decides the backend, the device and who prints. KEEP_GOING or
 * the exit code. */
static int open_comm(cli *c, dpt_comm **comm) {
  if (dpt_comm_mpi_launched()) {
    if (c->cfg.devices.replicas != 1) {
      fprintf(stderr, "dptrain train: --replicas is for one process; under mpirun every rank is "
                      "one replica\n");
      return 2;
    }
    dpt_status st = dpt_comm_create_mpi(NULL, comm);
    if (st != DPT_OK) return fail(c, st, NULL);
    c->rank = dpt_comm_rank(*comm);
  }
  if (dpt_comm_check_launch(*comm) != DPT_OK) {
    if (c->rank == 0) fprintf(stderr, "dptrain train: %s\n", dpt_last_error());
    dpt_comm_destroy(*comm); /* every rank refuses alike */
    *comm = NULL;
    return 2;
  }
  pick_backend(c->backend, c->rank, &c->cfg.devices.backend);
  /* Replicas as threads with a backend list: one backend per replica, in one process. */
  int mixed = 0;
  for (int i = 0; !*comm && i < c->cfg.devices.replicas && i < 256; ++i) {
    pick_backend(c->backend, i, &c->replica_kinds[i]);
    mixed |= c->replica_kinds[i] != c->cfg.devices.backend;
  }
  if (mixed) c->cfg.devices.replica_backends = c->replica_kinds;
  return KEEP_GOING;
}

/* A data set at path: a directory of IDX files (split "train" or "test"), or else a safetensors
 * file. With `optional` (the test set the --data path may hold): *out stays NULL, with no
 * error, unless path is an IDX directory with a test split. */
static dpt_status load_one(const char *path, const char *split, int num_classes, int optional,
                           dpt_dataset **out) {
  struct stat sb;
  const size_t len = strlen(path);
  const int st_file = stat(path, &sb) == 0
                          ? !S_ISDIR(sb.st_mode)
                          : len >= 12 && strcmp(path + len - 12, ".safetensors") == 0;
  if (st_file && optional) return DPT_OK;
  if (st_file) return dpt_dataset_load_safetensors(path, num_classes, out);
  if (optional) {
    char img[4096], gz[4100];
    snprintf(img, sizeof img, "%s/t10k-images-idx3-ubyte", path);
    snprintf(gz, sizeof gz, "%s.gz", img);
    if (access(img, F_OK) != 0 && access(gz, F_OK) != 0) return DPT_OK;
  }
  return dpt_dataset_load_dir(path, split, num_classes ? num_classes : 10, out);
}

/* The training set, and the test set: --test-data, else an IDX directory's test split, else
 * none. Classes: 10 for IDX; a safetensors training set's own (max label + 1), which a
 * safetensors test set is checked against. */
static dpt_status load_data(cli *c, dpt_dataset **train, dpt_dataset **test, char *other,
                            size_t cap) {
  if (c->bert) {
    dpt_status st = dpt_text_run_load(&c->text, &c->tr, other, cap);
    if (st != DPT_OK) return st;
    *train = c->tr.train;
    *test = c->tr.valid;
    c->has_test = *test != NULL;
    double loss;
    if (c->has_test)
      (void)dpt_text_unigram_baseline(c->tr.seqs, c->text.mask_seed, &loss, &c->unigram_ppl, NULL);
    return DPT_OK;
  }
  dpt_status st = load_one(c->data_dir, "train", 0, 0, train);
  const int classes = st == DPT_OK ? dpt_dataset_num_classes(*train) : 0;
  if (st == DPT_OK && c->test_data && strcmp(c->test_data, "none") == 0)
    *test = NULL; /* no test evaluation, even where the directory has a test split */
  else if (st == DPT_OK && c->test_data)
    st = load_one(c->test_data, "test", classes, 0, test);
  else if (st == DPT_OK)
    st = load_one(c->data_dir, "test", classes, 1, test);
  c->has_test = *test != NULL;
  return st;
}

/* --model dlrm: this process's readers of the training (and validation) shards, one per
 * replica with --replicas, this rank's under MPI; each loads only its own shards' records. The
 * library's messages name the pattern or the file (no match, fewer shards than ranks, a
 * truncated or corrupt shard, an id outside its table). */
static dpt_status open_shards(cli *c, dpt_comm *comm) {
  const int world = comm ? dpt_comm_size(comm) : c->cfg.devices.replicas;
  c->nreaders = comm ? 1 : c->cfg.devices.replicas;
  c->rtrain = calloc((size_t)c->nreaders, sizeof *c->rtrain);
  c->rval = c->val_data ? calloc((size_t)c->nreaders, sizeof *c->rval) : NULL;
  if (!c->rtrain || (c->val_data && !c->rval)) {
    fprintf(stderr, "dptrain: out of memory for the shard readers\n");
    return DPT_ERR_OUT_OF_MEMORY;
  }
  dpt_status st = DPT_OK;
  /* Node-local files under MPI; the replicas of one process see the same files anyway. */
  if (comm && c->node_shards) {
    st = dpt_interactions_open_node(c->data_dir, comm, &c->rtrain[0]);
    if (st == DPT_OK && c->val_data)
      st = dpt_interactions_open_node(c->val_data, comm, &c->rval[0]);
  }
  for (int i = 0; i < c->nreaders && st == DPT_OK && !(comm && c->node_shards); ++i) {
    const int rank = comm ? c->rank : i;
    st = dpt_interactions_open(c->data_dir, rank, world, &c->rtrain[i]);
    if (st == DPT_OK && c->val_data)
      st = dpt_interactions_open(c->val_data, rank, world, &c->rval[i]);
  }
  c->has_test = c->val_data != NULL;
  return st;
}

static void close_shards(cli *c) {
  for (int i = 0; i < c->nreaders; ++i) {
    if (c->rtrain) dpt_interactions_destroy(c->rtrain[i]);
    if (c->rval) dpt_interactions_destroy(c->rval[i]);
  }
  free(c->rtrain);
  free(c->rval);
}

/* DLRM for the shards' layout: their dense features, one table per sparse feature of the
 * headers' size. */
static dpt_status build_dlrm(cli *c) {
  const dpt_interactions *d = c->rtrain[0];
  const uint32_t ns = dpt_interactions_num_sparse(d);
  for (uint32_t t = 0; t < ns; ++t)
    c->table_rows[t] = (size_t)dpt_interactions_table_sizes(d)[t];
  c->dlo.num_dense = dpt_interactions_num_dense(d);
  c->dlo.num_tables = ns;
  c->dlo.table_rows = c->table_rows;
  return dpt_model_spec_dlrm(&c->cfg.model, &c->dlo);
}

/* The model's shape, from the options and the data: its channels, size and classes. */
static dpt_status build_model(cli *c, const dpt_dataset *train) {
  if (c->bert) {
    c->bo.vocab = dpt_tokenizer_vocab_size(c->tr.tok);
    return dpt_model_spec_bert(&c->cfg.model, &c->bo);
  }
  return dpt_model_choice_spec(&c->mc, dpt_dataset_channels(train), dpt_dataset_rows(train),
                               dpt_dataset_cols(train), (size_t)dpt_dataset_num_classes(train),
                               &c->cfg.model);
}

/* A cosine schedule anneals over the whole run after the warmup (at least one step); the
 * run's length depends on the data set's size. */
/* The schedule against the run's length: the cosine's length, and a warmup or a step period
 * longer than the whole run refused (the rate would never reach --lr, or never decay). The
 * tool's own message goes to other[cap]. */
static dpt_status plan_schedule(cli *c, const dpt_dataset *train, char *other, size_t cap) {
  size_t per_epoch =
      c->dlrm ? (size_t)dpt_interactions_steps(c->rtrain[0], c->cfg.schedule.global_batch)
              : dpt_sampler_num_batches(dpt_dataset_count(train), c->cfg.schedule.global_batch,
                                        c->cfg.schedule.keep_last);
  int64_t total = per_epoch > 0 && c->cfg.schedule.epochs > INT64_MAX / (int64_t)per_epoch
                      ? INT64_MAX
                      : (int64_t)per_epoch * c->cfg.schedule.epochs;
  if (c->cfg.schedule.max_steps > 0 && c->cfg.schedule.max_steps < total)
    total = c->cfg.schedule.max_steps;
  if (c->cfg.checkpoints.checkpoint_dir && c->cfg.checkpoints.checkpoint_every == 0)
    c->cfg.checkpoints.checkpoint_every = (int64_t)per_epoch;
  if (c->cfg.optim.warmup_steps < 0 && c->bert) { /* BERT's recipe: a tenth of the run */
    c->cfg.optim.warmup_steps = total / 10;
  } else if (c->cfg.optim.warmup_steps < 0) { /* the ResNet recipe warms up one epoch */
    int64_t w = strcmp(c->mc.model, "resnet") ? 0 : (int64_t)per_epoch;
    c->cfg.optim.warmup_steps = w < total / 5 ? w : total / 5;
  }
  const dpt_optim_config *o = &c->cfg.optim;
  if (total > 0 && o->warmup_steps > total) {
    snprintf(other, cap, "--warmup %lld is longer than the run's %lld steps",
             (long long)o->warmup_steps, (long long)total);
    return DPT_ERR_INVALID_ARG;
  }
  if (total > 0 && o->schedule == DPT_SCHEDULE_STEP && o->step_size > total) {
    snprintf(other, cap, "--step-size %lld is longer than the run's %lld steps",
             (long long)o->step_size, (long long)total);
    return DPT_ERR_INVALID_ARG;
  }
  if (o->schedule != DPT_SCHEDULE_COSINE && o->schedule != DPT_SCHEDULE_LINEAR) return DPT_OK;
  total -= o->warmup_steps;
  c->cfg.optim.total_steps = total > 0 ? total : 1;
  return DPT_OK;
}

/* What --init-weights and --save-weights need: weights files go through a host-side model
 * description on the CPU backend. */
typedef struct weights {
  dpt_backend *host_be;  /* CPU backend of host_model, or NULL */
  dpt_model *host_model; /* reads and writes the files, or NULL */
  float *init;           /* [state size] read from --init-weights, or NULL */
  float *final_params;   /* [state size] written to --save-weights, or NULL */
} weights;

/* Before the run: --save-weights must be writable (its directory takes a file of the weights'
 * size: a probe, removed at once), and a "<file>.tmp" that an interrupted save left is
 * removed, with a note. The tool's own message goes to other[cap]. */
static dpt_status check_output(const char *path, size_t bytes, char *other, size_t cap) {
  char tmp[4096], probe[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp ||
      snprintf(probe, sizeof probe, "%s.probe-%ld", path, (long)getpid()) >= (int)sizeof probe) {
    snprintf(other, cap, "--save-weights: the path is too long");
    return DPT_ERR_INVALID_ARG;
  }
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    snprintf(other, cap, "--save-weights %.300s is a directory", path);
    return DPT_ERR_INVALID_ARG;
  }
  if (access(tmp, F_OK) == 0) {
    if (remove(tmp) != 0) {
      snprintf(other, cap, "%.300s: cannot remove what an interrupted save left: %s", tmp,
               strerror(errno));
      return DPT_ERR_IO;
    }
    fprintf(stderr, "dptrain: removed %s, left by an interrupted save\n", tmp);
  }
  int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0644);
  int err = fd < 0 ? errno : posix_fallocate(fd, 0, (off_t)bytes);
  if (err == EOPNOTSUPP || err == EINVAL) err = 0; /* the file system cannot reserve: skip */
  if (fd >= 0) {
    close(fd);
    remove(probe);
  }
  if (err) {
    snprintf(other, cap, "--save-weights %.300s: cannot write there: %s", path, strerror(err));
    return DPT_ERR_IO;
  }
  return DPT_OK;
}

/* Reads --init-weights and makes room for --save-weights, pointing c->cfg at both. Messages
 * of the tool's own go to other[cap]. */
static dpt_status prepare_weights(cli *c, weights *w, char *other, size_t cap) {
  if (!c->init_weights && !c->save_weights) return DPT_OK;
  dpt_status st = dpt_backend_create(DPT_BACKEND_CPU, 0, &w->host_be);
  if (st == DPT_OK) st = dpt_model_create(w->host_be, &c->cfg.model, 1, &w->host_model);
  size_t np = w->host_model ? dpt_model_state_size(w->host_model) : 0;
  if (st == DPT_OK && c->init_weights) {
    w->init = malloc(np * sizeof(float));
    if (w->init && c->bert && is_dir(c->init_weights)) { /* a Hugging Face directory */
      dpt_bert_options o;
      st = dpt_bert_options_from_spec(&c->cfg.model, &o);
      if (st == DPT_OK) st = dpt_hf_bert_load(w->host_model, &o, c->init_weights, w->init);
    } else if (w->init) {
      st = dpt_model_load_params(w->host_model, c->init_weights, w->init);
    } else {
      snprintf(other, cap, "cannot allocate %zu parameters", np);
      st = DPT_ERR_OUT_OF_MEMORY;
    }
    c->cfg.init_params = w->init;
  }
  if (st == DPT_OK && c->save_weights && c->rank == 0)
    st = check_output(c->save_weights, np * sizeof(float) + 65536, other, cap);
  if (st == DPT_OK && c->save_weights) {
    w->final_params = malloc(np * sizeof(float));
    if (!w->final_params) {
      snprintf(other, cap, "cannot allocate %zu parameters", np);
      st = DPT_ERR_OUT_OF_MEMORY;
    }
    c->cfg.final_params = w->final_params;
  }
  return st;
}

static void release_weights(weights *w) {
  dpt_model_destroy(w->host_model);
  dpt_backend_destroy(w->host_be);
  free(w->init);
  free(w->final_params);
}

/* "v0,v1,..." of n floats into out[cap], exactly (%.9g round-trips a float). */
static void float_list(char *out, size_t cap, const float *v, size_t n) {
  size_t len = 0;
  out[0] = '\0';
  for (size_t i = 0; i < n && len < cap; ++i)
    len += (size_t)snprintf(out + len, cap - len, "%s%.9g", i ? "," : "", (double)v[i]);
}

/* The final weights, with the normalization they were trained with in the metadata, so that
 * eval and predict normalize alike. */
static dpt_status save_weights(const cli *c, const weights *w, char *other, size_t cap) {
  if (c->bert) {
    /* The vocabulary beside the weights, and what identifies it in their metadata. */
    char vocab[4200], size[32], fp[32], val[32], seed[32];
    const int wordpiece = dpt_tokenizer_wordpiece(c->tr.tok) != NULL;
    if (dpt_text_vocab_path(c->save_weights, wordpiece, vocab, sizeof vocab) != 0) {
      snprintf(other, cap, "--save-weights: the path is too long");
      return DPT_ERR_INVALID_ARG;
    }
    snprintf(size, sizeof size, "%zu", dpt_tokenizer_vocab_size(c->tr.tok));
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)dpt_tokenizer_fingerprint(c->tr.tok));
    snprintf(val, sizeof val, "%zu", c->text.val_every);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)c->text.mask_seed);
    const char *const extra[] = {DPT_META_VOCAB_SIZE,
                                 size,
                                 DPT_META_VOCAB_FP,
                                 fp,
                                 DPT_META_VAL_EVERY,
                                 val,
                                 DPT_META_MASK_SEED,
                                 seed,
                                 NULL};
    const dpt_status st = dpt_text_vocab_save(c->tr.tok, vocab);
    if (st != DPT_OK) return st;
    return dpt_model_save_params_meta(w->host_model, w->final_params, c->save_weights, extra);
  }
  char mean[64 * 18], std[64 * 18];
  float_list(mean, sizeof mean, c->norm.mean, c->norm.num_mean);
  float_list(std, sizeof std, c->norm.std, c->norm.num_std);
  const char *const extra[] = {"dptrain.mean", mean, "dptrain.std", std, NULL};
  return dpt_model_save_params_meta(w->host_model, w->final_params, c->save_weights,
                                    c->norm.num_mean ? extra : NULL);
}

static size_t total_rows(const cli *c) {
  size_t n = 0;
  for (size_t t = 0; t < c->dlo.num_tables; ++t)
    n += c->table_rows[t];
  return n;
}

/* The run's opening line, from rank 0. */
static void announce(const cli *c, dpt_comm *comm) {
  const char *schedule = dpt_schedule_kind_name(c->cfg.optim.schedule);
  const int nrep = comm ? dpt_comm_size(comm) : c->cfg.devices.replicas;
  char text[1024];
  dpt_text_options_describe(&c->text, text, sizeof text);
  if (c->rank == 0 && !c->json && c->bert) {
    const dpt_text_run *t = &c->tr;
    printf("text: %s: %zu files, %zu documents, %zu bytes; vocabulary %zu tokens (%s)\n", text,
           dpt_text_corpus_files(t->corpus), dpt_text_corpus_documents(t->corpus),
           dpt_text_corpus_bytes(t->corpus), dpt_tokenizer_vocab_size(t->tok),
           c->text.vocab ? c->text.vocab : "learned from the text");
    printf("sequences of %zu tokens: %zu training, %zu validation (document d validates when "
           "d %% %zu = %zu)\n",
           c->text.seq_len, dpt_text_sequences_count(t->seqs, DPT_TEXT_TRAIN),
           dpt_text_sequences_count(t->seqs, DPT_TEXT_VALIDATION), c->text.val_every,
           c->text.val_every ? c->text.val_every - 1 : 0);
    printf("bert: %zu layers, hidden %zu, %zu heads, ffn %zu, dropout %g/%g\n", c->bo.layers,
           c->bo.hidden, c->bo.heads, c->bo.ffn, (double)c->bo.dropout, (double)c->bo.attn_dropout);
    if (c->has_test) printf("unigram baseline: validation perplexity %.2f\n", c->unigram_ppl);
  }
  if (c->rank == 0 && !c->json && c->dlrm) {
    const dpt_interactions *d = c->rtrain[0];
    printf("shards: %zu training%s, %llu records, %llu steps per epoch (floor(records / global "
           "batch))",
           dpt_interactions_num_shards(d), c->node_shards ? " on rank 0's node" : "",
           (unsigned long long)dpt_interactions_total_records(d),
           (unsigned long long)dpt_interactions_steps(d, c->cfg.schedule.global_batch));
    if (c->rval)
      printf("; %zu validation (%s), %llu records", dpt_interactions_num_shards(c->rval[0]),
             c->val_data, (unsigned long long)dpt_interactions_total_records(c->rval[0]));
    printf("\ndlrm: %zu dense, %zu tables (%zu rows in all), dim %zu, %s interaction\n",
           c->dlo.num_dense, c->dlo.num_tables, total_rows(c), c->dlo.dim,
           c->dlo.interaction == DPT_DLRM_CAT ? "cat" : "dot");
  }
  if (c->rank == 0 && !c->json)
    printf("training %s on %s: %d %s%s, global batch %zu, %lld epochs, %s lr %g (%s)%s\n",
           c->mc.model, c->bert ? text : c->data_dir, nrep, comm ? "rank" : "replica",
           nrep == 1 ? "" : "s", c->cfg.schedule.global_batch, (long long)c->cfg.schedule.epochs,
           c->optimizer, (double)c->cfg.optim.lr, schedule ? schedule : "?",
           c->has_test ? "" : "; no test set: no test evaluation");
}

/* Options, communicator, data, model, weights; then every rank agrees to start, trains, and
 * rank 0 saves the weights. */
/* The options (--config's and the command line's) as the library keeps them (settings.json,
 * checkpoints), with the model's name where --model was not given; --print-config prints
 * them. KEEP_GOING, or the exit code. */
static int parse_options(cli *c, int argc, char **argv, char **options_json) {
  json_t *settings = NULL;
  int print = 0;
  int rc = dpt_opt_parse_settings(&train_cmd, c, argc, argv, c->given, NULL, &settings, &print);
  if (rc == KEEP_GOING) rc = check_options(c);
  if (rc == KEEP_GOING && !json_object_get(settings, "model"))
    json_object_set_new(settings, "model", json_string(c->mc.model));
  *options_json = rc == KEEP_GOING ? dpt_opt_settings_text(settings) : NULL;
  json_decref(settings);
  if (rc == KEEP_GOING && !*options_json) {
    fprintf(stderr, "dptrain train: out of memory\n");
    return 1;
  }
  if (rc == KEEP_GOING && print) {
    fputs(*options_json, stdout);
    free(*options_json);
    *options_json = NULL;
    return fflush(stdout) == 0 ? 0 : 1;
  }
  return rc;
}

int dpt_cmd_train(int argc, char **argv) {
  cli c;
  set_defaults(&c);
  char *options_json = NULL;
  int rc = parse_options(&c, argc, argv, &options_json);
  c.cfg.options_json = options_json;
  dpt_comm *comm = NULL;
  if (rc == KEEP_GOING) rc = open_comm(&c, &comm);
  if (rc != KEEP_GOING) {
    free(options_json);
    return rc;
  }
  c.tty = isatty(STDERR_FILENO);
  install_stop_handlers(); /* after MPI's start-up, so these are the handlers in place */
  c.cfg.checks.stop_request = &stop_signal;

  char other[512] = ""; /* a message of the tool's own, replacing dpt_last_error() */
  dpt_dataset *train = NULL, *test = NULL;
  weights w = {NULL, NULL, NULL, NULL};
  dpt_status st =
      c.dlrm ? open_shards(&c, comm) : load_data(&c, &train, &test, other, sizeof other);
  if (st == DPT_OK) st = c.dlrm ? build_dlrm(&c) : build_model(&c, train);
  if (st == DPT_OK) st = plan_schedule(&c, train, other, sizeof other);
  if (st == DPT_OK) st = prepare_weights(&c, &w, other, sizeof other);
  /* Under MPI the ranks agree that all of them are ready, so a rank that failed to read its
   * input stops the others at once instead of leaving them at the first collective. A rank
   * stays quiet when rank 0 reports the very same failure (the same file, the same problem). */
  int quiet_failure = 0;
  if (comm) {
    st =
        dpt_comm_agree_ready(comm, st, other[0] ? other : dpt_last_error(), "rank", &quiet_failure);
    other[0] = '\0'; /* the outcome's message is the thread's last error */
  }
  if (st == DPT_OK) {
    c.cfg.data.train = train;
    c.cfg.data.test = test;
    if (c.dlrm) {
      c.cfg.data.local_train = c.rtrain;
      c.cfg.data.local_test = c.rval;
    }
    c.cfg.callbacks.on_report = on_report;
    c.cfg.callbacks.on_progress = on_progress;
    c.cfg.callbacks.on_log = on_log;
    c.cfg.callbacks.on_split = on_split;
    c.cfg.callbacks.user = &c;
    announce(&c, comm);
    st = dpt_train(&c.cfg, comm, NULL);
  }
  if (st == DPT_OK && c.save_weights && c.rank == 0) st = save_weights(&c, &w, other, sizeof other);
  rc = st == DPT_OK ? 0 : quiet_failure ? 1 : fail(&c, st, other[0] ? other : NULL);
  /* A stalled or vanished rank would keep MPI_Finalize (in dpt_comm_destroy) waiting forever:
   * end the whole job now, after the line above. */
  if (comm && dpt_comm_size(comm) > 1 && (st == DPT_ERR_TIMEOUT || st == DPT_ERR_COMM)) {
    fflush(stdout);
    fflush(stderr);
    dpt_comm_abort(comm, rc);
  }
  release_weights(&w);
  close_shards(&c);
  if (c.bert) {
    dpt_text_run_free(&c.tr); /* the datasets are the text's */
  } else {
    dpt_dataset_destroy(train);
    dpt_dataset_destroy(test);
  }
  dpt_comm_destroy(comm);
  free(options_json);
  return rc;
}
