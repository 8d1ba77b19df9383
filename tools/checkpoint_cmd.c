/* `dptrain checkpoint info|export` (what a checkpoint file holds, checked; its weights for eval)
 * and `dptrain run` (a job restarted after failures, like torchrun's --max-restarts). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

/* ---- run: restart a job after failures ------------------------------------------------------ */

static volatile sig_atomic_t child_pid;  /* the job running now, 0 between runs */
static volatile sig_atomic_t got_signal; /* the last of SIGINT, SIGTERM, SIGUSR1 received */
static const int forwarded[] = {SIGINT, SIGTERM, SIGUSR1};

static void forward(int sig) {
  const int saved = errno; /* the interrupted code may read it */
  got_signal = sig;
  if (child_pid > 0) kill((pid_t)child_pid, sig);
  errno = saved;
}

static void set_handlers(void (*handler)(int)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; ++i)
    sigaction(forwarded[i], &sa, NULL);
}

static void block_forwarded(int how) {
  sigset_t set;
  sigemptyset(&set);
  for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; ++i)
    sigaddset(&set, forwarded[i]);
  sigprocmask(how, &set, NULL);
}

/* Starts argv in its own process group; -1 when it cannot be run (said on stderr). The signals
 * are blocked across fork so none is missed before child_pid is set. */
static pid_t start_job(char **argv) {
  int pipefd[2]; /* the child reports a failed exec through it; a successful one closes it */
  if (pipe(pipefd) != 0 || fcntl(pipefd[1], F_SETFD, FD_CLOEXEC) != 0) {
    fprintf(stderr, "dptrain run: pipe: %s\n", strerror(errno));
    return -1;
  }
  block_forwarded(SIG_BLOCK);
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    set_handlers(SIG_DFL);
    block_forwarded(SIG_UNBLOCK);
    close(pipefd[0]);
    execvp(argv[0], argv);
    const int err = errno;
    if (write(pipefd[1], &err, sizeof err) < 0) _exit(127);
    _exit(127);
  }
  if (pid > 0) child_pid = pid;
  block_forwarded(SIG_UNBLOCK);
  close(pipefd[1]);
  int err = 0;
  ssize_t n;
  while ((n = read(pipefd[0], &err, sizeof err)) < 0 && errno == EINTR) {
  }
  close(pipefd[0]);
  if (pid < 0 || n > 0) {
    fprintf(stderr, "dptrain run: cannot run '%s': %s\n", argv[0], strerror(pid < 0 ? errno : err));
    if (pid > 0) waitpid(pid, NULL, 0);
    child_pid = 0;
    return -1;
  }
  return pid;
}

/* Waits for the job; its wait status. */
static int wait_job(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  child_pid = 0;
  return status;
}

/* "exited with status S" or "was killed by signal K (name)", and the exit code it stands for. */
static int describe(int status, char *out, size_t cap) {
  if (WIFSIGNALED(status)) {
    snprintf(out, cap, "was killed by signal %d (%s)", WTERMSIG(status),
             strsignal(WTERMSIG(status)));
    return 128 + WTERMSIG(status);
  }
  snprintf(out, cap, "exited with status %d", WEXITSTATUS(status));
  return WEXITSTATUS(status);
}

/* Sleeps `seconds` unless a forwarded signal arrives. */
static void delay(double seconds) {
  struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  while (!got_signal && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

typedef struct run_opts {
  long max;       /* --max-restarts */
  double delay_s; /* --restart-delay */
} run_opts;

/* A number in [0, hi] from all of v; 0, or -1 for a bad value. */
static int parse_bounded(const char *v, int whole, double hi, double *out) {
  char *end = NULL;
  errno = 0;
  const double d = whole ? (double)strtol(v, &end, 10) : strtod(v, &end);
  if (errno || end == v || *end || d < 0 || d > hi || d != d) return -1;
  *out = d;
  return 0;
}

static int parse_max_restarts(void *p, const char *v) {
  double d;
  if (parse_bounded(v, 1, 1e6, &d)) return -1;
  ((run_opts *)p)->max = (long)d;
  return 0;
}

static int parse_restart_delay(void *p, const char *v) {
  return parse_bounded(v, 0, 86400, &((run_opts *)p)->delay_s);
}

static const dpt_opt run_options[] = {
    {"--max-restarts", "N", "restarts at most (default 3, at most 10^6)",
     CUSTOM(parse_max_restarts)},
    {"--restart-delay", "SECONDS", "wait before each restart (default 1, at most 86400)",
     CUSTOM(parse_restart_delay)},
};

static const dpt_opt_cmd run_cmd = {
    "dptrain run",
    "usage: dptrain run [--max-restarts N] [--restart-delay SECONDS] -- COMMAND ARGS...\n"
    "\n"
    "Runs COMMAND and starts it again when it fails. COMMAND should resume from its\n"
    "checkpoints (dptrain train --checkpoint-dir DIR --resume). SIGINT, SIGTERM and SIGUSR1\n"
    "are passed to it, and a job ended after one is not restarted; nor is one that exits 2\n"
    "(a usage error) or 75 (stopped on request). Exits with the job's last status (128 + K\n"
    "when signal K killed it).\n",
    run_options,
    sizeof run_options / sizeof run_options[0],
    0,
};

const dpt_opt_cmd *dpt_run_options(void) {
  return &run_cmd;
}

/* Options before the command (or before "--"); *cmd its index in argv, 0 when there is nothing
 * to run. 0, or the exit code (of a usage error, or 0 after --help). */
static int run_parse(int argc, char **argv, run_opts *o, int *cmd) {
  const int rc = dpt_opt_parse_until(&run_cmd, o, argc, argv, cmd);
  if (rc != DPT_OPT_KEEP_GOING) {
    *cmd = 0;
    return rc;
  }
  if (*cmd >= argc) return dpt_opt_usage_error(&run_cmd, "no command given");
  return 0;
}

int dpt_cmd_run(int argc, char **argv) {
  run_opts o = {.max = 3, .delay_s = 1.0};
  int cmd = 0;
  const int rc = run_parse(argc, argv, &o, &cmd);
  const long max = o.max;
  if (rc || !cmd) return rc;
  int resumes = 0;
  for (int i = cmd; i < argc; ++i)
    resumes |= !strcmp(argv[i], "--resume");
  if (!resumes)
    fprintf(stderr, "dptrain run: warning: the command has no --resume: every restart begins the "
                    "job from the start\n");
  set_handlers(forward);
  for (long restarts = 0;; ++restarts) {
    const pid_t pid = start_job(argv + cmd);
    if (pid < 0) return 127;
    char what[128];
    const int code = describe(wait_job(pid), what, sizeof what);
    if (code == 0) return 0;
    if (got_signal) {
      fprintf(stderr, "dptrain run: the job %s after signal %d; not restarting\n", what,
              (int)got_signal);
      return code;
    }
    if (code == 2 || code == 75) {
      fprintf(stderr, "dptrain run: the job %s (%s); not restarting\n", what,
              code == 2 ? "a usage error" : "stopped on request, e.g. preempted");
      return code;
    }
    if (restarts == max) {
      fprintf(stderr, "dptrain run: the job %s; giving up after %ld restart%s\n", what, max,
              max == 1 ? "" : "s");
      return code;
    }
    fprintf(stderr, "dptrain run: the job %s; restart %ld of %ld\n", what, restarts + 1, max);
    delay(o.delay_s);
    if (got_signal) return code;
  }
}
