/* `dptrain eval` and `dptrain predict`: a trained model from its weights file (the model's
 * description travels in the file's metadata) on a data set: the test loss, accuracy, per-class
 * accuracy and confusion matrix, or the class probabilities of each input. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <glob.h>
#include <math.h>
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

#define DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"
#define KEEP_GOING       DPT_OPT_KEEP_GOING

enum { EVAL = 1, PREDICT = 2 };

/* A message of the tool's own, shown in place of dpt_last_error() when set. */
static char own_msg[4400];

__attribute__((format(printf, 2, 3))) static dpt_status own_error(dpt_status st, const char *fmt,
                                                                  ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(own_msg, sizeof own_msg, fmt, ap);
  va_end(ap);
  return st;
}

#define TRY(call)                                                                                  \
  do {                                                                                             \
    dpt_status try_st_ = (call);                                                                   \
    if (try_st_ != DPT_OK) return try_st_;                                                         \
  } while (0)

typedef struct opts {
  int cmd; /* EVAL or PREDICT */
  const char *name;
  const char *weights, *data, *backend, *output;
  size_t batch, limit, top;
  int json, logits;
  dpt_model_choice mc;   /* for weights files without a description */
  int model_set;         /* --model given */
  dpt_norm_choice norm;  /* --mean, --std: the training run's normalization */
  dpt_text_options text; /* bert weights: --text, --vocab, --seq-len, --val-every */
  int val_every_set;
  int groups;      /* dlrm: recall@k over groups (sparse feature 0) */
  size_t recall_k; /* dlrm: k of recall@k (default 10) */
} opts;

static int parse_text(void *p, const char *v) {
  opts *o = p;
  return dpt_text_options_add_path(&o->text, v);
}

static int parse_val_every(void *p, const char *v) {
  opts *o = p;
  char *end;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (end == v || *end || errno || n < 0) return -1;
  o->text.val_every = (size_t)n;
  o->val_every_set = 1;
  return 0;
}

static int parse_mean(void *p, const char *v) {
  opts *o = p;
  return dpt_norm_choice_parse_mean(&o->norm, v);
}

static int parse_std(void *p, const char *v) {
  opts *o = p;
  return dpt_norm_choice_parse_std(&o->norm, v);
}

static int parse_hidden(void *p, const char *v) {
  opts *o = p;
  return dpt_model_choice_parse_hidden(&o->mc, v);
}

static int parse_channels(void *p, const char *v) {
  opts *o = p;
  return dpt_model_choice_parse_channels(&o->mc, v);
}

static int parse_model(void *p, const char *v) {
  opts *o = p;
  o->model_set = 1;
  return dpt_model_choice_parse_model(&o->mc, v);
}

#define OPT_TARGET opts

static const dpt_opt options[] = {
    {.help = "weights and data:", .cmds = EVAL | PREDICT},
    {"--weights", "FILE", "safetensors weights (dptrain train --save-weights); required",
     .cmds = EVAL | PREDICT, STRING(weights)},
    {"--data", "PATH",
     "an IDX directory (its test split, t10k-*) or a safetensors\n"
     "tensor data set (default " DEFAULT_DATA_DIR ")",
     .cmds = EVAL, STRING(data)},
    {"--data", "PATH",
     "the inputs: an IDX directory's test split or a safetensors\n"
     "tensor data set; required",
     .cmds = PREDICT, STRING(data)},
    {"--mean", "LIST", "per-channel mean, as the training run's --mean", .cmds = EVAL | PREDICT,
     CUSTOM(parse_mean)},
    {"--std", "LIST", "per-channel std, as the training run's --std", .cmds = EVAL | PREDICT,
     CUSTOM(parse_std)},
    {"--limit", "N", "only the first N samples", .cmds = EVAL | PREDICT, SIZE(limit, 1)},
    {.help = "bert weights (masked-language model; docs/text.md):", .cmds = EVAL},
    {"--text", "PATH",
     "the text whose validation sequences are scored; repeatable\n"
     "(default " DPT_TEXT_DEFAULT_DIR "); FILE.jsonl: JSON lines",
     .cmds = EVAL, CUSTOM(parse_text), .multi = 1},
    {"--text-field", "NAME", "the string field of .jsonl lines (default text)", .cmds = EVAL,
     STRING(text.text_field)},
    {"--vocab", "FILE",
     "the vocabulary (default: beside the weights, W.vocab.json\n"
     "or W.vocab.txt for W.safetensors); checked against the\n"
     "weights' metadata",
     .cmds = EVAL, STRING(text.vocab)},
    {"--seq-len", "N", "tokens per sequence (default: the model's)", .cmds = EVAL,
     SIZE(text.seq_len, 3)},
    {"--val-every", "N", "every Nth document validates (default: the training run's)", .cmds = EVAL,
     CUSTOM(parse_val_every)},
    {.help = "dlrm weights (--data 'DIR/val-*.bin', quoted: a shard pattern; "
             "docs/recommendation.md):",
     .cmds = EVAL},
    {"--groups", NULL,
     "also recall@k over ranking groups, a record's group its\n"
     "sparse feature 0 (the source package of data debian's rank-*)",
     .cmds = EVAL, FLAG(groups, 1)},
    {"--recall-at", "K", "k of recall@k (default 10; implies --groups)", .cmds = EVAL,
     SIZE(recall_k, 1)},
    {.help = "output:", .cmds = EVAL | PREDICT},
    {"--json", NULL,
     "one JSON object: samples, correct, loss, accuracy,\n"
     "per_class, confusion (rows: true class, columns: predicted);\n"
     "bert: sequences, targets, correct, loss, accuracy, perplexity,\n"
     "unigram_perplexity; dlrm: records, positives, auc, logloss, loss,\n"
     "accuracy (and with --groups: groups, k, recall_at_k)",
     .cmds = EVAL, FLAG(json, 1)},
    {"--top", "K", "the K likeliest classes with their probabilities", .cmds = PREDICT,
     SIZE(top, 1)},
    {"--logits", NULL, "the raw logits instead of probabilities (not with --top)", .cmds = PREDICT,
     FLAG(logits, 1)},
    {"--output", "FILE",
     "out.csv, or out.safetensors (\"probs\" or \"logits\" [N, classes], or\n"
     "\"topk_index\" and \"topk_prob\" [N, K]); default: CSV on stdout",
     .cmds = PREDICT, STRING(output)},
    {.help = "devices:", .cmds = EVAL | PREDICT},
    {"--backend", "B", "auto|cpu|opencl|vulkan (default auto: a GPU if one exists)",
     .cmds = EVAL | PREDICT, STRING(backend)},
    {"--batch", "N", "samples per forward pass (default 256)", .cmds = EVAL | PREDICT,
     SIZE(batch, 1)},
    {.help = "the model, for weights files without its description (as train takes it):",
     .cmds = EVAL | PREDICT},
    {"--model", "M", "mlp|cnn|resnet or a model file (default mlp)", .cmds = EVAL | PREDICT,
     CUSTOM(parse_model)},
    {"--depth", "N", "resnet depth (default 20)", .cmds = EVAL | PREDICT, SIZE(mc.depth, 8)},
    {"--hidden", "LIST", "mlp hidden sizes (default 512,256)", .cmds = EVAL | PREDICT,
     CUSTOM(parse_hidden)},
    {"--channels", "C1,C2", "cnn channels (default 32,64)", .cmds = EVAL | PREDICT,
     CUSTOM(parse_channels)},
};
#define NUM_OPTIONS (sizeof options / sizeof options[0])

static const dpt_opt_cmd eval_cmd = {
    "dptrain eval",
    "usage: dptrain eval --weights FILE [--data DIR] [options]\n"
    "       dptrain eval --weights BERT.safetensors [--text PATH]... [--vocab FILE]\n"
    "       dptrain eval --weights DLRM.safetensors --data 'DIR/val-*.bin' [--groups]\n\n"
    "Evaluates trained weights on the test split: loss, accuracy, per-class accuracy\n"
    "and the confusion matrix. The model comes from the weights file. For a BERT\n"
    "(masked-language model): the masked-token accuracy, loss and perplexity on the\n"
    "text's validation sequences, next to the unigram baseline's perplexity. For a\n"
    "DLRM: the AUC, logloss and accuracy on interaction shards, and with --groups\n"
    "recall@k over ranking groups (data debian's rank-* shards).\n",
    options,
    NUM_OPTIONS,
    EVAL,
};

static const dpt_opt_cmd predict_cmd = {
    "dptrain predict",
    "usage: dptrain predict --weights FILE --data DIR [--top K] [--output FILE]\n"
    "       dptrain predict --weights BERT.safetensors --data IDS.safetensors --output "
    "OUT.safetensors\n\n"
    "Class probabilities (softmax of the logits) for each input, or the K likeliest\n"
    "classes; one row per input, in the data's order. For a BERT: the logits [N, seq_len,\n"
    "vocab] of the int32 ids \"inputs\" (or \"val_inputs\") [N, seq_len] of IDS.\n",
    options,
    NUM_OPTIONS,
    PREDICT,
};

const dpt_opt_cmd *dpt_eval_options(void) {
  return &eval_cmd;
}

const dpt_opt_cmd *dpt_predict_options(void) {
  return &predict_cmd;
}

static int parse_options(opts *o, int argc, char **argv) {
  const dpt_opt_cmd *cmd = o->cmd == EVAL ? &eval_cmd : &predict_cmd;
  const int rc = dpt_opt_parse(cmd, o, argc, argv, NULL, NULL);
  if (rc != DPT_OPT_KEEP_GOING) return rc;
  if (!o->weights) return dpt_opt_usage_error(cmd, "--weights is required");
  if (!o->data) return dpt_opt_usage_error(cmd, "--data is required");
  if (o->logits && o->top) return dpt_opt_usage_error(cmd, "--logits and --top do not go together");
  dpt_backend_kind k;
  if (strcmp(o->backend, "auto") != 0 && dpt_backend_kind_parse(o->backend, &k) != DPT_OK)
    return dpt_opt_usage_error(cmd, "bad value '%s' for --backend", o->backend);
  return KEEP_GOING;
}

/* "auto": the first GPU found (OpenCL, then Vulkan), else the CPU, as train picks it. */
static dpt_backend_kind pick_backend(const char *name) {
  dpt_backend_kind kind = DPT_BACKEND_CPU;
  if (strcmp(name, "auto") != 0) {
    (void)dpt_backend_kind_parse(name, &kind); /* checked by parse_options */
    return kind;
  }
  const dpt_backend_kind order[] = {DPT_BACKEND_OPENCL, DPT_BACKEND_VULKAN};
  for (size_t k = 0; k < 2; ++k) {
    int count = 0;
    if (!dpt_backend_compiled(order[k]) || dpt_device_count(order[k], &count) != DPT_OK) continue;
    for (int d = 0; d < count; ++d) {
      dpt_device_info info;
      if (dpt_device_get_info(order[k], d, &info) == DPT_OK && info.type != DPT_DEVICE_CPU &&
          info.type != DPT_DEVICE_OTHER)
        return order[k];
    }
  }
  dpt_clear_error();
  return DPT_BACKEND_CPU;
}

/* The samples to evaluate or predict: an IDX directory's test split. The one place that reads
 * data, so a data file (a safetensors data set) is one more branch here. */
static dpt_status load_samples(const char *path, size_t classes, dpt_dataset **out) {
  struct stat sb;
  if (stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode))
    return dpt_dataset_load_safetensors(path, (int)classes, out);
  if (classes > 255)
    return own_error(DPT_ERR_INVALID_ARG, "the model has %zu classes; IDX labels are single bytes",
                     classes);
  return dpt_dataset_load_dir(path, "test", (int)classes, out);
}

/* The normalization the weights were trained with (metadata "dptrain.mean"/"dptrain.std"),
 * unless --mean/--std say otherwise. */
static dpt_status stored_normalization(opts *o, const dpt_safetensors *wf) {
  const char *mean = dpt_safetensors_metadata(wf, "dptrain.mean");
  const char *std = dpt_safetensors_metadata(wf, "dptrain.std");
  if (o->norm.num_mean || !mean || !std) return DPT_OK;
  if (dpt_parse_float_list(mean, o->norm.mean, 64, &o->norm.num_mean) != 0 ||
      dpt_parse_float_list(std, o->norm.std, 64, &o->norm.num_std) != 0 ||
      o->norm.num_mean != o->norm.num_std)
    return own_error(DPT_ERR_BAD_FORMAT,
                     "%s: metadata dptrain.mean/std \"%.60s\"/\"%.60s\" is "
                     "not a normalization",
                     o->weights, mean, std);
  return DPT_OK;
}

/* The model: from the weights file's description, or (a file without one) from the options
 * and the data's image size, as train builds it. */
static dpt_status model_spec(const opts *o, const dpt_safetensors *wf, const dpt_dataset *data,
                             dpt_model_spec *spec) {
  const char *text = dpt_safetensors_metadata(wf, DPT_MODEL_METADATA_KEY);
  if (text) {
    char origin[4200];
    snprintf(origin, sizeof origin, "%s: metadata \"%s\"", o->weights, DPT_MODEL_METADATA_KEY);
    return dpt_model_spec_parse_json(text, origin, spec);
  }
  size_t ch = dpt_dataset_channels(data), rows = dpt_dataset_rows(data),
         cols = dpt_dataset_cols(data), classes = (size_t)dpt_dataset_num_classes(data);
  return dpt_model_choice_spec(&o->mc, ch, rows, cols, classes, spec);
}

/* What a run holds; released by release(). */
typedef struct run {
  dpt_safetensors *wf;
  dpt_dataset *data;
  dpt_model_spec *spec;
  dpt_backend *be;
  dpt_model *model;
  dpt_buffer *x;
  float *hx, *logits;
  dpt_data_transform transform; /* --mean/--std, or none */
  uint64_t *idx;
  size_t n, batch, classes;
} run;

static void release(run *r) {
  dpt_buffer_free(r->x);
  dpt_model_destroy(r->model);
  dpt_backend_destroy(r->be);
  dpt_dataset_destroy(r->data);
  dpt_safetensors_close(r->wf);
  free(r->spec);
  free(r->hx);
  free(r->logits);
  free(r->idx);
}

/* Weights file, model description, data, backend, model with the weights loaded strictly. */
static dpt_status prepare(opts *o, run *r) {
  TRY(dpt_safetensors_open(o->weights, &r->wf));
  const int described = dpt_safetensors_metadata(r->wf, DPT_MODEL_METADATA_KEY) != NULL;
  if (described && o->model_set)
    return own_error(DPT_ERR_INVALID_ARG,
                     "%s describes its model: --model is for weights files without a "
                     "description",
                     o->weights);
  r->spec = malloc(sizeof *r->spec);
  if (!r->spec) return own_error(DPT_ERR_OUT_OF_MEMORY, "out of memory");
  if (described) TRY(model_spec(o, r->wf, NULL, r->spec));
  TRY(load_samples(o->data, described ? r->spec->num_classes : 10, &r->data));
  if (!described) TRY(model_spec(o, r->wf, r->data, r->spec));
  const dpt_model_spec *s = r->spec;
  size_t ch = dpt_dataset_channels(r->data), rows = dpt_dataset_rows(r->data),
         cols = dpt_dataset_cols(r->data);
  if (s->in_c * s->in_h * s->in_w != ch * rows * cols ||
      !((s->in_c == ch && s->in_h == rows && s->in_w == cols) || s->in_c * s->in_h == 1))
    return own_error(DPT_ERR_INVALID_ARG,
                     "the data in %s has samples of %zux%zux%zu, the model takes %zux%zux%zu",
                     o->data, ch, rows, cols, s->in_c, s->in_h, s->in_w);
  if (o->norm.num_mean != o->norm.num_std)
    return own_error(DPT_ERR_INVALID_ARG,
                     "--mean and --std go together, with as many values "
                     "(%zu and %zu given)",
                     o->norm.num_mean, o->norm.num_std);
  TRY(stored_normalization(o, r->wf));
  r->transform =
      (dpt_data_transform){.channels = o->norm.num_mean, .mean = o->norm.mean, .std = o->norm.std};
  if (o->norm.num_mean) TRY(dpt_data_transform_check(&r->transform, r->data));
  r->n = dpt_dataset_count(r->data);
  if (o->limit && o->limit < r->n) r->n = o->limit;
  r->batch = o->batch < r->n ? o->batch : r->n;
  r->classes = s->num_classes;
  TRY(dpt_backend_create(pick_backend(o->backend), 0, &r->be));
  TRY(dpt_model_create(r->be, s, r->batch, &r->model));
  TRY(dpt_model_load(r->model, o->weights));
  const size_t dim = dpt_model_input_size(r->model);
  r->hx = malloc(r->batch * dim * sizeof(float));
  r->logits = malloc(r->batch * r->classes * sizeof(float));
  r->idx = malloc(r->batch * sizeof(uint64_t));
  if (!r->hx || !r->logits || !r->idx)
    return own_error(DPT_ERR_OUT_OF_MEMORY, "cannot allocate a batch of %zu", r->batch);
  return dpt_buffer_alloc(r->be, r->batch * dim * sizeof(float), &r->x);
}

/* The logits of samples [first, first + b) into r->logits; their labels into labels (may be
 * NULL). */
static dpt_status forward(run *r, size_t first, size_t b, int32_t *labels) {
  for (size_t i = 0; i < b; ++i)
    r->idx[i] = first + i;
  const size_t dim = dpt_model_input_size(r->model);
  TRY(dpt_dataset_gather_transformed(
      r->data, r->idx, b, r->transform.channels ? &r->transform : NULL, 0, r->hx, labels));
  TRY(dpt_buffer_upload(r->x, 0, r->hx, b * dim * sizeof(float)));
  return dpt_model_logits(r->model, r->x, b, r->logits);
}

/* Row x of logits: the first maximal logit (as the loss op takes it), and the log of the sum
 * of exp(x_j - max), in double, as the op computes the loss. */
static size_t argmax_logsum(const float *x, size_t cols, double *logsum) {
  size_t arg = 0;
  float max = x[0];
  for (size_t j = 1; j < cols; ++j)
    if (x[j] > max) {
      max = x[j];
      arg = j;
    }
  double denom = 0.0;
  for (size_t j = 0; j < cols; ++j)
    denom += exp((double)x[j] - max);
  *logsum = log(denom) + max;
  return arg;
}

/* ---- eval ------------------------------------------------------------------------------------ */

static void print_eval(const opts *o, const run *r, double loss, int64_t correct,
                       const int64_t *confusion) {
  const size_t k = r->classes;
  const double acc = r->n ? (double)correct / (double)r->n : NAN;
  if (o->json) {
    printf("{\"samples\": %zu, \"correct\": %lld, \"loss\": %.6f, \"accuracy\": %.6f, "
           "\"per_class\": [",
           r->n, (long long)correct, loss, acc);
    for (size_t c = 0; c < k; ++c) {
      int64_t total = 0;
      for (size_t p = 0; p < k; ++p)
        total += confusion[c * k + p];
      if (total)
        printf("%s%.6f", c ? ", " : "", (double)confusion[c * k + c] / (double)total);
      else
        printf("%snull", c ? ", " : "");
    }
    printf("], \"confusion\": [");
    for (size_t c = 0; c < k; ++c) {
      printf("%s[", c ? ", " : "");
      for (size_t p = 0; p < k; ++p)
        printf("%s%lld", p ? ", " : "", (long long)confusion[c * k + p]);
      printf("]");
    }
    printf("]}\n");
    return;
  }
  printf("%s on %s: %zu samples, loss %.4f, accuracy %.4f (%lld correct)\n", o->weights, o->data,
         r->n, loss, acc, (long long)correct);
  printf("class  accuracy  samples  most often taken for\n");
  for (size_t c = 0; c < k; ++c) {
    int64_t total = 0, worst = 0;
    size_t other = c;
    for (size_t p = 0; p < k; ++p) {
      total += confusion[c * k + p];
      if (p != c && confusion[c * k + p] > worst) worst = confusion[c * k + (other = p)];
    }
    if (!total) continue;
    printf("%5zu  %8.4f  %7lld", c, (double)confusion[c * k + c] / (double)total, (long long)total);
    if (other != c) printf("  %zu (%lld)", other, (long long)worst);
    printf("\n");
  }
}

static dpt_status do_eval(const opts *o, run *r) {
  const size_t k = r->classes;
  int64_t *confusion = calloc(k * k, sizeof *confusion);
  int32_t *labels = malloc(r->batch * sizeof *labels);
  dpt_status st = confusion && labels ? DPT_OK : own_error(DPT_ERR_OUT_OF_MEMORY, "out of memory");
  double loss_sum = 0.0;
  int64_t correct = 0;
  for (size_t first = 0; first < r->n && st == DPT_OK; first += r->batch) {
    const size_t b = r->n - first < r->batch ? r->n - first : r->batch;
    st = forward(r, first, b, labels);
    for (size_t i = 0; i < b && st == DPT_OK; ++i) {
      const float *x = r->logits + i * k;
      double logsum;
      const size_t pred = argmax_logsum(x, k, &logsum);
      const size_t label = (size_t)labels[i];
      loss_sum += logsum - (double)x[label];
      correct += pred == label;
      confusion[label * k + pred]++;
    }
  }
  if (st == DPT_OK) print_eval(o, r, r->n ? loss_sum / (double)r->n : NAN, correct, confusion);
  free(confusion);
  free(labels);
  return st;
}

/* ---- eval of a masked-language model ---------------------------------------------------- */

/* A metadata value of the weights file as an unsigned number; -1 when missing or not one. */
static int meta_u64(const dpt_safetensors *wf, const char *key, int base, uint64_t *out) {
  const char *v = dpt_safetensors_metadata(wf, key);
  if (!v || !*v) return -1;
  char *end;
  errno = 0;
  unsigned long long n = strtoull(v, &end, base);
  if (*end || errno) return -1;
  *out = n;
  return 0;
}

/* The vocabulary against the weights: the size the model predicts and, when the file names
 * them, the training run's vocabulary size and fingerprint. */
static dpt_status check_vocab(const opts *o, const dpt_safetensors *wf, const dpt_model_spec *s,
                              const dpt_tokenizer *tok) {
  const size_t v = dpt_tokenizer_vocab_size(tok);
  const uint64_t fp = dpt_tokenizer_fingerprint(tok);
  uint64_t want_v = 0, want_fp = 0;
  const int has_v = meta_u64(wf, DPT_META_VOCAB_SIZE, 10, &want_v) == 0;
  const int has_fp = meta_u64(wf, DPT_META_VOCAB_FP, 16, &want_fp) == 0;
  if ((has_v && want_v != v) || (has_fp && want_fp != fp) || v != s->num_classes)
    return own_error(DPT_ERR_INVALID_ARG,
                     "%s does not match the weights %s: a vocabulary of %zu tokens "
                     "(fingerprint %016llx), the model was trained with %llu (fingerprint "
                     "%016llx); give the training run's vocabulary with --vocab",
                     o->text.vocab, o->weights, v, (unsigned long long)fp,
                     (unsigned long long)(has_v ? want_v : s->num_classes),
                     (unsigned long long)want_fp);
  return DPT_OK;
}

static void print_text_eval(const opts *o, size_t seqs, int64_t targets, int64_t correct,
                            double loss, double uni_ppl) {
  const double acc = targets ? (double)correct / (double)targets : NAN;
  if (o->json) {
    printf("{\"sequences\": %zu, \"targets\": %lld, \"correct\": %lld, \"loss\": %.6f, "
           "\"accuracy\": %.6f, \"perplexity\": %.4f, \"unigram_perplexity\": %.4f}\n",
           seqs, (long long)targets, (long long)correct, loss, acc, exp(loss), uni_ppl);
    return;
  }
  char text[1024];
  dpt_text_options_describe(&o->text, text, sizeof text);
  printf("%s on %s: %zu validation sequences, %lld masked tokens\n", o->weights, text, seqs,
         (long long)targets);
  printf("masked accuracy %.4f (%lld correct), loss %.4f, perplexity %.2f; unigram baseline "
         "perplexity %.2f\n",
         acc, (long long)correct, loss, exp(loss), uni_ppl);
}

/* Scores the validation sequences of the text with a BERT weights file. */
static dpt_status eval_text(opts *o, const dpt_model_spec *spec) {
  char vocab[4200];
  dpt_safetensors *wf = NULL;
  dpt_text_run tr;
  memset(&tr, 0, sizeof tr);
  dpt_backend *be = NULL;
  dpt_model *model = NULL;
  dpt_buffer *x = NULL, *y = NULL;
  float *hx = NULL;
  int32_t *hy = NULL;
  TRY(dpt_safetensors_open(o->weights, &wf));
  uint64_t v = 0;
  if (!o->val_every_set && meta_u64(wf, DPT_META_VAL_EVERY, 10, &v) == 0) o->text.val_every = v;
  if (meta_u64(wf, DPT_META_MASK_SEED, 10, &v) == 0) o->text.mask_seed = v;
  dpt_model_spec s = *spec;
  if (o->text.seq_len && o->text.seq_len != s.seq_len) {
    s.seq_len = o->text.seq_len; /* the position table bounds it: dpt_model_create checks */
    s.in_w = o->text.seq_len;
  }
  o->text.seq_len = s.seq_len;
  if (!o->text.vocab) {
    /* W.vocab.json (BPE), else W.vocab.txt (WordPiece) when only that one exists. */
    const int too_long = dpt_text_vocab_path(o->weights, 0, vocab, sizeof vocab) != 0;
    char txt[4200];
    if (!too_long && access(vocab, F_OK) != 0 &&
        dpt_text_vocab_path(o->weights, 1, txt, sizeof txt) == 0 && access(txt, F_OK) == 0)
      snprintf(vocab, sizeof vocab, "%s", txt);
    if (too_long) {
      dpt_safetensors_close(wf);
      return own_error(DPT_ERR_INVALID_ARG, "--weights: the path is too long");
    }
    o->text.vocab = vocab;
  }
  char msg[2048];
  dpt_status st = dpt_text_run_load(&o->text, &tr, msg, sizeof msg);
  if (st != DPT_OK) own_error(st, "%s", msg);
  if (st == DPT_OK) st = check_vocab(o, wf, spec, tr.tok);
  if (st == DPT_OK && !tr.valid) {
    char text[1024];
    dpt_text_options_describe(&o->text, text, sizeof text);
    st = own_error(DPT_ERR_INVALID_ARG, "%s has no validation sequence (--val-every %zu)", text,
                   o->text.val_every);
  }
  size_t n = tr.valid ? dpt_dataset_count(tr.valid) : 0;
  if (o->limit && o->limit < n) n = o->limit;
  const size_t batch = o->batch < n ? o->batch : n, L = s.seq_len;
  if (st == DPT_OK) st = dpt_backend_create(pick_backend(o->backend), 0, &be);
  if (st == DPT_OK) st = dpt_model_create(be, &s, batch, &model);
  if (st == DPT_OK) st = dpt_model_load(model, o->weights);
  if (st == DPT_OK) st = dpt_buffer_alloc(be, batch * L * sizeof(float), &x);
  if (st == DPT_OK) st = dpt_buffer_alloc(be, batch * L * sizeof(int32_t), &y);
  hx = malloc(batch * L * sizeof *hx);
  hy = malloc(batch * L * sizeof *hy);
  uint64_t *idx = malloc(batch * sizeof *idx);
  if (st == DPT_OK && (!hx || !hy || !idx)) st = own_error(DPT_ERR_OUT_OF_MEMORY, "out of memory");
  double loss_sum = 0;
  int64_t correct = 0, targets = 0;
  for (size_t first = 0; first < n && st == DPT_OK; first += batch) {
    const size_t b = n - first < batch ? n - first : batch;
    for (size_t i = 0; i < b; ++i)
      idx[i] = first + i;
    double l = 0;
    int64_t c = 0;
    st = dpt_dataset_gather(tr.valid, idx, b, hx, hy); /* validation: always epoch 0's mask */
    for (size_t i = 0; st == DPT_OK && i < b * L; ++i)
      targets += hy[i] != DPT_IGNORE_INDEX;
    if (st == DPT_OK) st = dpt_buffer_upload(x, 0, hx, b * L * sizeof *hx);
    if (st == DPT_OK) st = dpt_buffer_upload(y, 0, hy, b * L * sizeof *hy);
    if (st == DPT_OK) st = dpt_model_evaluate(model, x, y, b, &l, &c);
    loss_sum += l;
    correct += c;
  }
  double uni = NAN;
  if (st == DPT_OK) st = dpt_text_unigram_baseline(tr.seqs, o->text.mask_seed, NULL, &uni, NULL);
  if (st == DPT_OK)
    print_text_eval(o, n, targets, correct, targets ? loss_sum / (double)targets : NAN, uni);
  free(idx);
  free(hx);
  free(hy);
  dpt_buffer_free(x);
  dpt_buffer_free(y);
  dpt_model_destroy(model);
  dpt_backend_destroy(be);
  dpt_text_run_free(&tr);
  dpt_safetensors_close(wf);
  return st;
}

/* ---- predict with a BERT: logits of given token ids ------------------------------------ */

/* The token ids to predict on: int32 tensor "inputs" (or "val_inputs", as dptrain tokenize
 * --export writes) [N, seq_len] of o->data, into *ids (malloc'd) and *n. */
static dpt_status read_token_ids(const opts *o, size_t L, int32_t **ids, size_t *n) {
  dpt_safetensors *f = NULL;
  TRY(dpt_safetensors_open(o->data, &f));
  dpt_st_info info;
  const char *name = dpt_safetensors_find(f, "inputs", &info) == DPT_OK ? "inputs" : "val_inputs";
  dpt_status st = dpt_safetensors_find(f, name, &info);
  if (st != DPT_OK || strcmp(info.dtype, "I32") != 0 || info.ndim != 2 ||
      info.shape[1] != (int64_t)L)
    st = own_error(DPT_ERR_BAD_FORMAT,
                   "%s: a token model predicts on an int32 tensor \"inputs\" (or \"val_inputs\") "
                   "of [N, %zu]",
                   o->data, L);
  *n = st == DPT_OK ? info.count / L : 0;
  *ids = st == DPT_OK ? malloc((info.count ? info.count : 1) * sizeof **ids) : NULL;
  if (st == DPT_OK && !*ids) st = own_error(DPT_ERR_OUT_OF_MEMORY, "out of memory");
  if (st == DPT_OK && info.count) memcpy(*ids, info.data, info.count * sizeof **ids);
  dpt_safetensors_close(f);
  return st;
}

/* The logits [N, seq_len, vocab] of a BERT on given ids, to --output (safetensors). */
static dpt_status predict_text(const opts *o, const dpt_model_spec *spec) {
  if (!o->output || !o->data || o->top)
    return own_error(DPT_ERR_INVALID_ARG,
                     "%s is a masked-language model: predict takes --data IDS.safetensors "
                     "and --output LOGITS.safetensors (no --top)",
                     o->weights);
  const size_t L = spec->seq_len, V = spec->num_classes;
  int32_t *ids = NULL;
  size_t n = 0;
  TRY(read_token_ids(o, L, &ids, &n));
  dpt_backend *be = NULL;
  dpt_model *model = NULL;
  const size_t count = n * L * V; /* n * L ids are in memory; V is checked below */
  const int fits = V == 0 || n * L <= ((size_t)-1) / sizeof(float) / V;
  float *logits = fits ? malloc((count > 0 ? count : 1) * sizeof *logits) : NULL;
  dpt_status st = logits ? DPT_OK : own_error(DPT_ERR_OUT_OF_MEMORY, "out of memory for logits");
  const size_t batch = o->batch < n ? o->batch : (n ? n : 1);
  if (st == DPT_OK) st = dpt_backend_create(pick_backend(o->backend), 0, &be);
  if (st == DPT_OK) st = dpt_model_create(be, spec, batch, &model);
  if (st == DPT_OK) st = dpt_model_load(model, o->weights);
  /* The ids go into the float slots bit for bit, as dpt_model_predict reads a token model. */
  if (st == DPT_OK && n) st = dpt_model_predict(model, (const float *)ids, n, logits);
  const dpt_st_tensor t = {
      .name = "logits", .data = logits, .ndim = 3, .shape = {(int64_t)n, (int64_t)L, (int64_t)V}};
  static const char *const meta[] = {"producer", "dptrain predict", NULL};
  if (st == DPT_OK) st = dpt_safetensors_write(o->output, &t, 1, meta);
  if (st == DPT_OK) printf("wrote %s: logits [%zu, %zu, %zu]\n", o->output, n, L, V);
  free(ids);
  free(logits);
  dpt_model_destroy(model);
  dpt_backend_destroy(be);
  return st;
}

/* ---- eval of a DLRM on interaction shards ------------------------------------------------- */

/* A DLRM (a click model on records): one logit per sample, embedding tables on the record. */
static int is_dlrm(const dpt_model_spec *s) {
  if (s->seq_len || s->num_classes != 1) return 0;
  for (size_t i = 0; i < s->num_layers; ++i)
    if (s->layers[i].kind == DPT_LAYER_EMBEDDING_BAG) return 1;
  return 0;
}

/* Whether the first file the pattern matches is an interactions shard (its magic). */
static int is_shard_pattern(const char *pattern) {
  glob_t g;
  int shard = 0;
  if (glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc > 0) {
    FILE *f = fopen(g.gl_pathv[0], "rb");
    char magic[8];
    if (f && fread(magic, 1, sizeof magic, f) == sizeof magic)
      shard = memcmp(magic, DPT_SHARD_MAGIC, sizeof magic) == 0;
    if (f) fclose(f);
  }
  globfree(&g);
  return shard;
}

/* The records of the shards against the model: the same dense and sparse split of a record,
 * and no table of the shards larger than the model's. */
static dpt_status check_records(const opts *o, const dpt_model_spec *s, const dpt_interactions *d) {
  const size_t nd = dpt_interactions_num_dense(d), ns = dpt_interactions_num_sparse(d);
  size_t md = 0;
  for (size_t i = 0; i < s->num_layers; ++i)
    if (s->layers[i].kind == DPT_LAYER_SLICE) md = s->layers[i].size;
  const size_t input = s->in_c * s->in_h * s->in_w;
  if (nd != md || nd + ns != input)
    return own_error(DPT_ERR_INVALID_ARG,
                     "the shards %s hold records of %zu dense and %zu sparse features; the "
                     "model in %s takes %zu dense and %zu sparse",
                     o->data, nd, ns, o->weights, md, input - md);
  for (size_t i = 0; i < s->num_layers; ++i) {
    const dpt_layer_spec *l = &s->layers[i];
    if (l->kind != DPT_LAYER_EMBEDDING_BAG) continue;
    const size_t bag = l->bag ? l->bag : 1;
    for (size_t slot = l->offset; slot < l->offset + bag && slot < input; ++slot) {
      if (slot < nd) continue;
      const uint64_t rows = dpt_interactions_table_sizes(d)[slot - nd];
      if (rows > l->vocab)
        return own_error(DPT_ERR_INVALID_ARG,
                         "the shards %s have sparse feature %zu of %llu ids, beyond the %zu "
                         "rows of the model's table %s in %s",
                         o->data, slot - nd, (unsigned long long)rows, l->vocab, l->name,
                         o->weights);
    }
  }
  return DPT_OK;
}

/* The logits of every record, in batches of o->batch; labels and groups (sparse feature 0)
 * alongside. */
static dpt_status score_shards(const opts *o, const dpt_model_spec *s, const dpt_interactions *d,
                               size_t n, float *logits, float *labels, int64_t *groups) {
  const size_t nd = dpt_interactions_num_dense(d), ns = dpt_interactions_num_sparse(d);
  const size_t batch = o->batch < n ? o->batch : n, input = nd + ns;
  dpt_backend *be = NULL;
  dpt_model *model = NULL;
  dpt_buffer *x = NULL;
  float *hx = malloc(batch * input * sizeof *hx);
  dpt_status st = hx ? DPT_OK : own_error(DPT_ERR_OUT_OF_MEMORY, "out of memory");
  if (st == DPT_OK) st = dpt_backend_create(pick_backend(o->backend), 0, &be);
  if (st == DPT_OK) st = dpt_model_create(be, s, batch, &model);
  if (st == DPT_OK) st = dpt_model_load(model, o->weights);
  if (st == DPT_OK) st = dpt_buffer_alloc(be, batch * input * sizeof(float), &x);
  for (size_t done = 0; done < n && st == DPT_OK;) {
    const size_t b = n - done < batch ? n - done : batch;
    for (size_t i = 0; i < b; ++i) { /* [dense floats][ids as int32 bits], as training */
      float *row = hx + i * input;
      memcpy(row, dpt_interactions_dense(d, done + i), nd * sizeof(float));
      memcpy(row + nd, dpt_interactions_sparse(d, done + i), ns * sizeof(int32_t));
      labels[done + i] = dpt_interactions_label(d, done + i) >= 0.5f ? 1.0f : 0.0f;
      groups[done + i] = dpt_interactions_sparse(d, done + i)[0];
    }
    st = dpt_buffer_upload(x, 0, hx, b * input * sizeof(float));
    if (st == DPT_OK) st = dpt_model_logits(model, x, b, logits + done);
    done += b;
  }
  free(hx);
  dpt_buffer_free(x);
  dpt_model_destroy(model);
  dpt_backend_destroy(be);
  return st;
}

static int cmp_i64(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Groups holding a positive (what recall@k averages over); reorders tmp. */
static size_t positive_groups(const float *labels, const int64_t *groups, size_t n, int64_t *tmp) {
  size_t m = 0, count = 0;
  for (size_t i = 0; i < n; ++i)
    if (labels[i] >= 0.5f) tmp[m++] = groups[i];
  qsort(tmp, m, sizeof *tmp, cmp_i64);
  for (size_t i = 0; i < m; ++i)
    count += !i || tmp[i] != tmp[i - 1];
  return count;
}

static void json_double(const char *key, double v, const char *sep) {
  if (isfinite(v))
    printf("\"%s\": %.6f%s", key, v, sep);
  else
    printf("\"%s\": null%s", key, sep);
}

/* Scores interaction shards with DLRM weights: the AUC of the logits, the logloss of the
 * probabilities, the mean binary cross-entropy and the accuracy (logit > 0 against the label),
 * as training's validation computes them; with --groups, recall@k over sparse feature 0. */
static dpt_status eval_records(const opts *o, const dpt_model_spec *s) {
  dpt_interactions *d = NULL;
  TRY(dpt_interactions_open(o->data, 0, 1, &d));
  dpt_status st = check_records(o, s, d);
  size_t n = dpt_interactions_local_records(d);
  if (o->limit && o->limit < n) n = o->limit;
  if (st == DPT_OK && n == 0)
    st = own_error(DPT_ERR_INVALID_ARG, "the shards %s hold no record", o->data);
  float *logits = malloc((n ? n : 1) * sizeof *logits),
        *labels = malloc((n ? n : 1) * sizeof *labels);
  int64_t *groups = malloc((n ? n : 1) * sizeof *groups);
  if (st == DPT_OK && (!logits || !labels || !groups))
    st = own_error(DPT_ERR_OUT_OF_MEMORY, "out of memory for %zu records", n);
  if (st == DPT_OK) st = score_shards(o, s, d, n, logits, labels, groups);
  double loss_sum = 0, auc = NAN, logloss = NAN, recall = NAN;
  size_t correct = 0, positives = 0, num_groups = 0;
  for (size_t i = 0; st == DPT_OK && i < n; ++i) {
    const double z = logits[i], y = labels[i];
    loss_sum += (z > 0 ? z : 0) - z * y + log1p(exp(-fabs(z)));
    correct += (z > 0) == (y > 0.5);
    positives += y > 0.5;
  }
  /* Without both classes the AUC is undefined: reported as such, not a failure. */
  if (st == DPT_OK && dpt_auc(logits, labels, n, &auc) != DPT_OK) dpt_clear_error();
  if (st == DPT_OK && o->groups) {
    if (dpt_recall_at_k(logits, labels, groups, n, o->recall_k, &recall) != DPT_OK)
      dpt_clear_error(); /* no group holds a positive */
    num_groups = positive_groups(labels, groups, n, groups);
  }
  for (size_t i = 0; st == DPT_OK && i < n; ++i) /* the probabilities, as training's */
    logits[i] = 1.0f / (1.0f + expf(-logits[i]));
  if (st == DPT_OK && dpt_logloss(logits, labels, n, &logloss) != DPT_OK) dpt_clear_error();
  const double loss = n ? loss_sum / (double)n : NAN, acc = n ? (double)correct / (double)n : NAN;
  if (st == DPT_OK && o->json) {
    printf("{\"records\": %zu, \"positives\": %zu, ", n, positives);
    json_double("auc", auc, ", ");
    json_double("logloss", logloss, ", ");
    json_double("loss", loss, ", ");
    json_double("accuracy", acc, o->groups ? ", " : "}\n");
    if (o->groups) {
      printf("\"groups\": %zu, \"k\": %zu, ", num_groups, o->recall_k);
      json_double("recall_at_k", recall, "}\n");
    }
  } else if (st == DPT_OK) {
    printf("%s on %s: %zu records (%zu positive)\n", o->weights, o->data, n, positives);
    printf("auc %.6f  logloss %.6f  loss %.6f  accuracy %.6f\n", auc, logloss, loss, acc);
    if (o->groups)
      printf("recall@%zu %.6f over %zu groups (sparse feature 0) with a positive\n", o->recall_k,
             recall, num_groups);
  }
  free(logits);
  free(labels);
  free(groups);
  dpt_interactions_destroy(d);
  return st;
}

/* ---- predict --------------------------------------------------------------------------------- */

/* The top-k classes of a probability row, likeliest first (the lower class first on ties). */
static void top_k(const float *p, size_t cols, size_t k, size_t *out) {
  for (size_t t = 0; t < k; ++t) {
    size_t best = cols;
    for (size_t j = 0; j < cols; ++j) {
      int taken = 0;
      for (size_t u = 0; u < t && !taken; ++u)
        taken = out[u] == j;
      if (!taken && (best == cols || p[j] > p[best])) best = j;
    }
    out[t] = best;
  }
}

static int ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), m = strlen(tail);
  return n >= m && strcmp(s + n - m, tail) == 0;
}

/* What predict writes: CSV rows as they come, or tensors written at the end. */
typedef struct predictions {
  FILE *csv;      /* NULL: safetensors */
  size_t top;     /* K, or 0 for every class */
  size_t per_row; /* values per input */
  float *probs;   /* [batch or n, classes] */
  float *tprob;   /* safetensors with --top: [n, K] */
  int64_t *tidx;  /* safetensors with --top: [n, K] */
  size_t *order;  /* [K] */
} predictions;

static void csv_header(const opts *o, const predictions *pr) {
  fprintf(pr->csv, "index");
  for (size_t j = 0; j < pr->per_row; ++j)
    pr->top ? fprintf(pr->csv, ",class%zu,prob%zu", j + 1, j + 1)
            : fprintf(pr->csv, o->logits ? ",logit%zu" : ",p%zu", j);
  fprintf(pr->csv, "\n");
}

/* Input `index`'s probabilities (or logits) p[k]: its CSV row, or its top K kept. */
static void emit(const opts *o, predictions *pr, size_t index, const float *p, size_t k) {
  if (pr->top) top_k(p, k, pr->top, pr->order);
  if (pr->csv) {
    fprintf(pr->csv, "%zu", index);
    for (size_t j = 0; j < pr->per_row; ++j)
      pr->top ? fprintf(pr->csv, ",%zu,%.6g", pr->order[j], (double)p[pr->order[j]])
              : fprintf(pr->csv, o->logits ? ",%.9g" : ",%.6g", (double)p[j]);
    fprintf(pr->csv, "\n");
    return;
  }
  for (size_t j = 0; j < pr->top; ++j) {
    pr->tidx[index * pr->top + j] = (int64_t)pr->order[j];
    pr->tprob[index * pr->top + j] = p[pr->order[j]];
  }
}

/* The safetensors output: "probs" or "logits" [N, classes], or "topk_index" (int64,
 * little-endian as the host stores it on the platforms we build) and "topk_prob" [N, K]. */
static dpt_status write_tensors(const opts *o, const run *r, const predictions *pr) {
  dpt_st_tensor t[2] = {
      {.name = pr->top     ? "topk_index"
               : o->logits ? "logits"
                           : "probs",
       .data = pr->top ? NULL : pr->probs,
       .ndim = 2,
       .shape = {(int64_t)r->n, (int64_t)pr->per_row},
       .dtype = pr->top ? "I64" : NULL,
       .bytes = pr->top ? pr->tidx : NULL},
      {.name = "topk_prob",
       .data = pr->tprob,
       .ndim = 2,
       .shape = {(int64_t)r->n, (int64_t)pr->top}},
  };
  static const char *const meta[] = {"producer", "dptrain predict", NULL};
  return dpt_safetensors_write(o->output, t, pr->top ? 2 : 1, meta);
}

/* Every input's forward pass, its probabilities (softmax of the logits) or logits emitted. */
static dpt_status predict_all(const opts *o, run *r, predictions *pr) {
  const size_t k = r->classes;
  dpt_status st = DPT_OK;
  for (size_t first = 0; first < r->n && st == DPT_OK; first += r->batch) {
    const size_t b = r->n - first < r->batch ? r->n - first : r->batch;
    st = forward(r, first, b, NULL);
    for (size_t i = 0; i < b && st == DPT_OK; ++i) {
      const float *x = r->logits + i * k;
      float *p = pr->probs + ((pr->csv ? 0 : first) + i) * k;
      double logsum;
      argmax_logsum(x, k, &logsum);
      for (size_t j = 0; j < k; ++j)
        p[j] = o->logits ? x[j] : (float)exp((double)x[j] - logsum);
      emit(o, pr, first + i, p, k);
    }
  }
  return st;
}

static dpt_status do_predict(const opts *o, run *r) {
  const size_t k = r->classes;
  predictions pr = {NULL, o->top ? (o->top < k ? o->top : k) : 0, 0, NULL, NULL, NULL, NULL};
  pr.per_row = pr.top ? pr.top : k;
  const int st_out = o->output && ends_with(o->output, ".safetensors");
  if (!st_out) {
    pr.csv = o->output ? fopen(o->output, "w") : stdout;
    if (!pr.csv) return own_error(DPT_ERR_IO, "%s: %s", o->output, strerror(errno));
  }
  pr.probs = malloc((st_out ? r->n : r->batch) * k * sizeof(float));
  pr.tprob = st_out && pr.top ? malloc(r->n * pr.top * sizeof(float)) : NULL;
  pr.tidx = st_out && pr.top ? malloc(r->n * pr.top * sizeof(int64_t)) : NULL;
  pr.order = malloc((pr.top ? pr.top : 1) * sizeof(size_t));
  dpt_status st = pr.probs && pr.order && (!st_out || !pr.top || (pr.tprob && pr.tidx))
                      ? DPT_OK
                      : own_error(DPT_ERR_OUT_OF_MEMORY, "out of memory");
  if (st == DPT_OK && pr.csv) csv_header(o, &pr);
  if (st == DPT_OK) st = predict_all(o, r, &pr);
  if (st == DPT_OK && st_out) st = write_tensors(o, r, &pr);
  const int to_file = pr.csv && pr.csv != stdout;
  if (to_file && fclose(pr.csv) != 0 && st == DPT_OK)
    st = own_error(DPT_ERR_IO, "%s: %s", o->output, strerror(errno));
  if (!to_file && pr.csv) fflush(stdout);
  if (st != DPT_OK && to_file) remove(o->output); /* no partial file left */
  free(pr.probs);
  free(pr.tprob);
  free(pr.tidx);
  free(pr.order);
  return st;
}

/* ---- the commands ---------------------------------------------------------------------------- */

static int command(int cmd, int argc, char **argv) {
  opts o;
  memset(&o, 0, sizeof o);
  o.cmd = cmd;
  o.name = cmd == EVAL ? "eval" : "predict";
  o.data = cmd == EVAL ? DEFAULT_DATA_DIR : NULL;
  o.backend = "auto";
  o.batch = 256;
  dpt_model_choice_default(&o.mc);
  dpt_text_options_default(&o.text);
  o.text.seq_len = 0; /* not given: the model's */
  int rc = parse_options(&o, argc, argv);
  if (rc != KEEP_GOING) return rc;
  if (o.recall_k) o.groups = 1; /* --recall-at K implies --groups */
  o.recall_k = o.recall_k ? o.recall_k : 10;
  run r;
  memset(&r, 0, sizeof r);
  /* A token model (BERT) is scored on text; its spec comes from the file. */
  dpt_model_spec *spec = malloc(sizeof *spec);
  int token_model = 0, dlrm = 0;
  if (spec && dpt_model_spec_from_weights(o.weights, spec) == DPT_OK) {
    token_model = spec->seq_len > 0;
    dlrm = is_dlrm(spec);
  }
  dpt_clear_error();
  dpt_status st = DPT_OK;
  if (dlrm && cmd == PREDICT)
    st = own_error(DPT_ERR_INVALID_ARG,
                   "%s is a DLRM: dptrain eval scores it on interaction shards", o.weights);
  else if (dlrm)
    st = eval_records(&o, spec);
  else if (o.groups || is_shard_pattern(o.data))
    st = own_error(DPT_ERR_INVALID_ARG,
                   "%s holds no DLRM (no \"%s\" metadata describing embedding tables): "
                   "interaction shards are scored with dptrain train --model dlrm's weights",
                   o.weights, DPT_MODEL_METADATA_KEY);
  else if (token_model && cmd == PREDICT)
    st = predict_text(&o, spec);
  else if (token_model)
    st = eval_text(&o, spec);
  else if (o.text.num_paths || o.text.text_field || o.text.vocab || o.text.seq_len ||
           o.val_every_set)
    st = own_error(DPT_ERR_INVALID_ARG,
                   "--text, --text-field, --vocab, --seq-len and --val-every are for bert "
                   "weights; %s holds "
                   "a classifier",
                   o.weights);
  free(spec);
  const int classifier = !token_model && !dlrm;
  if (st == DPT_OK && classifier) st = prepare(&o, &r);
  if (st == DPT_OK && classifier) st = cmd == EVAL ? do_eval(&o, &r) : do_predict(&o, &r);
  if (st != DPT_OK)
    fprintf(stderr, "dptrain %s: %s: %s\n", o.name, dpt_status_str(st),
            own_msg[0] ? own_msg : dpt_last_error());
  release(&r);
  return st == DPT_OK ? 0 : 1;
}

int dpt_cmd_eval(int argc, char **argv) {
  return command(EVAL, argc, argv);
}

int dpt_cmd_predict(int argc, char **argv) {
  return command(PREDICT, argc, argv);
}
