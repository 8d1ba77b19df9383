/* `dptrain checkpoint info|export`: what a checkpoint file holds, checked; its weights for
 * eval. */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dptrain/advanced.h"
#include "tools/commands.h"
#include "tools/hf_export.h"
#include "tools/options.h"

/* ---- checkpoint info / export ------------------------------------------------------------- */

/* The checkpoints a directory lookup passed over, with why. */
typedef struct skipped {
  json_t *list; /* array of {"path", "why"} */
} skipped;

static void note_skipped(const char *path, const char *why, void *user) {
  json_array_append_new(((skipped *)user)->list, json_pack("{ssss}", "path", path, "why", why));
}

#define NO_CHECKPOINT 1 /* resolve's status for a directory without checkpoints */

/* PATH itself, or the newest valid checkpoint of directory PATH, verified: its path in `file`,
 * its progress in *p (may be NULL); the ones passed over in sk. */
static dpt_status resolve(const char *path, char *file, size_t cap, skipped *sk,
                          dpt_checkpoint_progress *p) {
  struct stat sb;
  if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    snprintf(file, cap, "%s", path);
    return dpt_checkpoint_verify(path, p);
  }
  int found = 0;
  dpt_status st = dpt_checkpoint_find_latest(path, note_skipped, sk, file, cap, &found, p);
  if (st != DPT_OK || found) return st;
  snprintf(file, cap, "%s", path);
  return (dpt_status)NO_CHECKPOINT;
}

/* Metadata `key` as parsed JSON (NULL when absent), or as a string when it does not parse. */
static json_t *metadata_json(const dpt_safetensors *st, const char *key) {
  const char *text = dpt_safetensors_metadata(st, key);
  json_t *v = text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
  if (text && !v) v = json_string(text);
  return v ? v : json_null();
}

/* Everything info reports about the open checkpoint `file`, as one JSON object: the tensors'
 * count and bytes, the optimizer's slots ("optimizer.<slot>.<name>") with how many tensors each
 * has, the progress as stored, the run's terms, the model and the options it was started with
 * (null where the checkpoint has none). */
static json_t *info_json(const dpt_safetensors *st, const char *file, const skipped *sk) {
  const size_t count = dpt_safetensors_count(st);
  size_t bytes = 0;
  json_t *slots = json_object();
  for (size_t i = 0; i < count; ++i) {
    dpt_st_info info;
    if (dpt_safetensors_info(st, i, &info) != DPT_OK) continue;
    bytes += info.nbytes;
    const char *dot = strncmp(info.name, "optimizer.", 10) ? NULL : strchr(info.name + 10, '.');
    if (!dot) continue;
    char slot[128];
    snprintf(slot, sizeof slot, "%.*s", (int)(dot - info.name - 10), info.name + 10);
    json_t *n = json_object_get(slots, slot);
    json_object_set_new(slots, slot, json_integer(n ? json_integer_value(n) + 1 : 1));
  }
  return json_pack("{sssbsIsIsOsososososo}", "file", file, "valid", 1, "tensors", (json_int_t)count,
                   "bytes", (json_int_t)bytes, "skipped", sk->list, "progress",
                   metadata_json(st, "dptrain.checkpoint"), "optimizer", slots, "terms",
                   metadata_json(st, "dptrain.terms"), "model", metadata_json(st, "dptrain.model"),
                   "options", metadata_json(st, "dptrain.options"));
}

/* A JSON value on one line: strings as they are, numbers with the fewest digits that read back
 * the same, the rest compact JSON. */
static void print_value(const char *key, const json_t *v) {
  if (json_is_string(v)) {
    printf("  %s: %s\n", key, json_string_value(v));
    return;
  }
  if (json_is_real(v)) {
    char num[32];
    for (int digits = 1; digits <= 17; ++digits) {
      snprintf(num, sizeof num, "%.*g", digits, json_real_value(v));
      if (strtod(num, NULL) == json_real_value(v)) break;
    }
    printf("  %s: %s\n", key, num);
    return;
  }
  char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
  printf("  %s: %s\n", key, s ? s : "?");
  free(s);
}

static void print_model(const json_t *model) {
  const json_t *layers = json_object_get(model, "layers"), *in = json_object_get(model, "input");
  if (!json_is_array(layers)) {
    printf("model:            %s\n", model ? "(not a model description)" : "(not described)");
    return;
  }
  printf("model:            %zu layers", json_array_size(layers));
  if (json_array_size(in) == 3)
    printf(", input %lldx%lldx%lld", (long long)json_integer_value(json_array_get(in, 0)),
           (long long)json_integer_value(json_array_get(in, 1)),
           (long long)json_integer_value(json_array_get(in, 2)));
  if (json_is_integer(json_object_get(model, "classes")))
    printf(", %lld classes", (long long)json_integer_value(json_object_get(model, "classes")));
  printf("\n");
}

static void print_info(const json_t *info, const dpt_checkpoint_progress *p) {
  const char *key;
  json_t *v;
  size_t i;
  json_array_foreach(json_object_get(info, "skipped"), i, v) {
    printf("skipped:          %s\n", json_string_value(json_object_get(v, "why")));
  }
  printf("file:             %s\n", json_string_value(json_object_get(info, "file")));
  printf("valid:            yes (CRC32 of %lld tensors checked, %lld bytes)\n",
         (long long)json_integer_value(json_object_get(info, "tensors")),
         (long long)json_integer_value(json_object_get(info, "bytes")));
  printf("step:             %lld (%lld updates)\n", (long long)p->step,
         (long long)p->optimizer_steps);
  printf("epoch:            %lld (1-based; %lld batches of it done)\n", (long long)p->epoch + 1,
         (long long)p->batch);
  printf("world size:       %lld\n", (long long)p->world_size);
  printf("trained samples:  %lld\n", (long long)p->trained_samples);
  printf("skipped steps:    %lld (%lld in a row at the end)\n", (long long)p->skipped_steps,
         (long long)p->skipped_in_a_row);
  printf("rollbacks:        %lld\n", (long long)p->rollbacks);
  printf("lr scale:         %.17g\n", p->lr_scale);
  printf("seed:             %llu\n", (unsigned long long)p->seed);
  printf("state hash:       %016llx\n", (unsigned long long)p->state_hash);
  printf("optimizer:       ");
  json_object_foreach(json_object_get(info, "optimizer"), key, v) {
    printf(" %s (%lld tensors)", key, (long long)json_integer_value(v));
  }
  printf("%s\n", json_object_size(json_object_get(info, "optimizer")) ? "" : " no state");
  print_model(json_object_get(info, "model"));
  const json_t *terms = json_object_get(info, "terms");
  printf("terms:%s\n", json_is_object(terms) ? "" : json_is_null(terms) ? " (none)" : "");
  if (json_is_object(terms)) {
    json_object_foreach((json_t *)terms, key, v) {
      print_value(key, v);
    }
  } else if (!json_is_null(terms)) {
    print_value("raw", terms);
  }
  const json_t *options = json_object_get(info, "options");
  if (json_is_object(options)) {
    printf("options:\n");
    json_object_foreach((json_t *)options, key, v) {
      print_value(key, v);
    }
  }
}

static int checkpoint_usage(FILE *f, int rc) {
  fprintf(f, "usage: dptrain checkpoint info PATH [--json]\n"
             "       dptrain checkpoint export PATH --weights OUT [--format hf]\n"
             "PATH is a checkpoint file, or a directory of them: then its newest valid one.\n"
             "info checks every tensor's CRC32 and prints the run's position and configuration;\n"
             "it exits 0 for a valid checkpoint, 1 otherwise. export writes the model's weights\n"
             "(no optimizer state) for dptrain eval, predict and PyTorch. (Each takes --help.)\n");
  return rc;
}

/* The failure of `what` on file: one line (and with --json, an object on stdout); exit 1. */
static int fail_line(const char *what, const char *file, dpt_status st, int json) {
  const int none = st == (dpt_status)NO_CHECKPOINT;
  const char *msg = none ? "holds no checkpoint" : dpt_last_error();
  if (none)
    fprintf(stderr, "dptrain checkpoint %s: %s: %s\n", what, file, msg);
  else
    fprintf(stderr, "dptrain checkpoint %s: %s: %s\n", what, dpt_status_str(st), msg);
  if (json) {
    json_t *o = json_pack("{sssbss}", "file", file, "valid", 0, "error", msg);
    json_dumpf(o, stdout, JSON_COMPACT);
    printf("\n");
    json_decref(o);
  }
  return 1;
}

static int cmd_info(const char *path, int json) {
  char file[4096];
  skipped sk = {json_array()};
  dpt_checkpoint_progress p;
  dpt_safetensors *st = NULL;
  dpt_status s = resolve(path, file, sizeof file, &sk, &p);
  if (s == DPT_OK) s = dpt_safetensors_open(file, &st);
  json_t *info = s == DPT_OK ? info_json(st, file, &sk) : NULL;
  dpt_safetensors_close(st);
  if (s != DPT_OK) {
    json_t *v;
    size_t i;
    json_array_foreach(sk.list, i, v) {
      fprintf(stderr, "dptrain checkpoint info: skipped %s\n",
              json_string_value(json_object_get(v, "why")));
    }
  }
  json_decref(sk.list);
  if (s != DPT_OK) return fail_line("info", file, s, json);
  if (!info) return fail_line("info", file, DPT_ERR_OUT_OF_MEMORY, json);
  if (json) {
    json_dumpf(info, stdout, JSON_COMPACT | JSON_REAL_PRECISION(17));
    printf("\n");
  } else {
    print_info(info, &p);
  }
  json_decref(info);
  return 0;
}

/* --format hf: PATH a checkpoint (its weights exported beside OUT first) or a weights file. */
static int cmd_export_hf(const char *path, const char *out, const char *vocab) {
  char file[4096], tmp[4200], msg[1024];
  skipped sk = {json_array()};
  dpt_status st = resolve(path, file, sizeof file, &sk, NULL);
  json_decref(sk.list);
  const int checkpoint = st == DPT_OK;
  snprintf(tmp, sizeof tmp, "%s.weights.tmp", out);
  if (checkpoint && !vocab) {
    fprintf(stderr,
            "dptrain checkpoint export: %s is a checkpoint: give its vocabulary with "
            "--vocab\n",
            file);
    return 1;
  }
  if (checkpoint) st = dpt_checkpoint_export(file, tmp);
  if (checkpoint && st != DPT_OK) return fail_line("export", file, st, 0);
  st = dpt_hf_export(checkpoint ? tmp : path, vocab, out, msg, sizeof msg);
  if (checkpoint) remove(tmp);
  if (st != DPT_OK) {
    fprintf(stderr, "dptrain checkpoint export: %s: %s\n", dpt_status_str(st), msg);
    return 1;
  }
  return 0;
}

static int cmd_export(const char *path, const char *out) {
  char file[4096];
  skipped sk = {json_array()};
  dpt_status st = resolve(path, file, sizeof file, &sk, NULL);
  json_decref(sk.list);
  if (st == DPT_OK) st = dpt_checkpoint_export(file, out);
  if (st != DPT_OK) return fail_line("export", file, st, 0);
  printf("wrote %s from %s\n", out, file);
  return 0;
}

enum { INFO = 1, EXPORT = 2 };

typedef struct ckpt_opts {
  const char *path, *out; /* PATH, --weights */
  const char *format;     /* --format: NULL or "safetensors", or "hf" */
  const char *vocab;      /* --vocab (--format hf) */
  int json;
} ckpt_opts;

#define OPT_TARGET ckpt_opts

static const dpt_opt ckpt_options[] = {
    {"--json", NULL, "the checkpoint's metadata as one JSON object", .cmds = INFO, FLAG(json, 1)},
    {"--weights", "OUT",
     "the safetensors file to write (--format hf: the directory);\n"
     "required",
     .cmds = EXPORT, STRING(out)},
    {"--format", "F",
     "safetensors (default: dptrain's names) or hf: a Hugging Face\n"
     "BertForMaskedLM directory of a BERT (docs/hf.md); PATH may\n"
     "then also be a weights file (train --save-weights)",
     .cmds = EXPORT, STRING(format)},
    {"--vocab", "FILE",
     "--format hf: the vocabulary (default: beside a weights file,\n"
     "W.vocab.txt or W.vocab.json)",
     .cmds = EXPORT, STRING(vocab)},
};

static const dpt_opt_cmd info_cmd = {
    "dptrain checkpoint info",
    "usage: dptrain checkpoint info PATH [--json]\n"
    "\n"
    "PATH is a checkpoint file, or a directory of them: then its newest valid one. Checks\n"
    "every tensor's CRC32 and prints the run's position and configuration; exits 0 for a\n"
    "valid checkpoint, 1 otherwise.\n",
    ckpt_options,
    sizeof ckpt_options / sizeof ckpt_options[0],
    INFO,
};

static const dpt_opt_cmd export_cmd = {
    "dptrain checkpoint export",
    "usage: dptrain checkpoint export PATH --weights OUT\n"
    "       dptrain checkpoint export PATH --format hf --weights DIR [--vocab FILE]\n"
    "\n"
    "Writes the model's weights of a checkpoint (PATH as for info; no optimizer state) for\n"
    "dptrain eval, predict and PyTorch; with --format hf, a BERT as a Hugging Face directory.\n",
    ckpt_options,
    sizeof ckpt_options / sizeof ckpt_options[0],
    EXPORT,
};

const dpt_opt_cmd *dpt_checkpoint_info_options(void) {
  return &info_cmd;
}

const dpt_opt_cmd *dpt_checkpoint_export_options(void) {
  return &export_cmd;
}

static int take_path(void *p, const char *arg) {
  ckpt_opts *o = p;
  if (o->path) return -1;
  o->path = arg;
  return 0;
}

int dpt_cmd_checkpoint(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
    return checkpoint_usage(argc < 2 ? stderr : stdout, argc < 2 ? 2 : 0);
  const char *sub = argv[1];
  const dpt_opt_cmd *cmd = !strcmp(sub, "info")     ? &info_cmd
                           : !strcmp(sub, "export") ? &export_cmd
                                                    : NULL;
  if (!cmd) {
    fprintf(stderr, "dptrain checkpoint: unknown subcommand '%s'\n", sub);
    return checkpoint_usage(stderr, 2);
  }
  ckpt_opts o = {0};
  const int rc = dpt_opt_parse(cmd, &o, argc - 1, argv + 1, NULL, take_path);
  if (rc != DPT_OPT_KEEP_GOING) return rc;
  if (!o.path || (cmd == &export_cmd && !o.out))
    return dpt_opt_usage_error(cmd, "%s is required", o.path ? "--weights" : "PATH");
  const int hf = o.format && !strcmp(o.format, "hf");
  if (o.format && !hf && strcmp(o.format, "safetensors"))
    return dpt_opt_usage_error(cmd, "--format %s: safetensors or hf", o.format);
  if (o.vocab && !hf) return dpt_opt_usage_error(cmd, "--vocab is for --format hf");
  if (cmd == &info_cmd) return cmd_info(o.path, o.json);
  return hf ? cmd_export_hf(o.path, o.out, o.vocab) : cmd_export(o.path, o.out);
}
