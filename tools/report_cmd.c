/* `dptrain report DIR`: one self-contained HTML file of a run's log directory (settings.json,
 * steps.jsonl, evals.jsonl of --log-dir): SVG charts drawn here, a settings table, no script. */
#define _POSIX_C_SOURCE 200809L /* getline, scandir, alphasort */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "dptrain/advanced.h"
#include "tools/commands.h"
#include "tools/options.h"
#include "tools/report_svg.h"
#include "tools/report_trace.h"

typedef struct opts {
  const char *dir, *out;
} opts;

#define OPT_TARGET opts

static const dpt_opt options[] = {
    {"-o", "FILE", "the HTML file to write (default DIR/report.html)", STRING(out)},
};

static const dpt_opt_cmd report_cmd = {
    "dptrain report",
    "usage: dptrain report DIR [-o FILE]\n"
    "\n"
    "Writes one self-contained HTML file (no script, no network) of the run that\n"
    "`dptrain train --log-dir DIR` logged: charts of the loss, the evaluation, the learning\n"
    "rate, the throughput and the compute and exposed communication seconds per step,\n"
    "skipped and rolled back steps marked, the run's settings, and a table per replica of a\n"
    "--trace file saved in DIR. Exits 1, writing nothing, when DIR or its steps.jsonl cannot\n"
    "be read, a line is not JSON or FILE cannot be written.\n",
    options,
    sizeof options / sizeof options[0],
    0,
};

const dpt_opt_cmd *dpt_report_options(void) {
  return &report_cmd;
}

/* A .jsonl file read as columns: for each key one double per line (a number, true as 1 and
 * false as 0, else NaN), so a long run costs a few doubles a step, not its JSON. */
typedef struct table {
  const char *const *keys;
  int nkeys;
  size_t n, cap;
  double **col; /* nkeys arrays of n */
} table;

/* One line's object into the columns, grown as needed; -1 when out of memory. */
static int add_row(table *t, const json_t *j) {
  if (t->n == t->cap) {
    const size_t cap = t->cap ? 2 * t->cap : 256;
    for (int k = 0; k < t->nkeys; ++k) {
      double *v = realloc(t->col[k], cap * sizeof *v);
      if (!v) return -1;
      t->col[k] = v;
    }
    t->cap = cap;
  }
  for (int k = 0; k < t->nkeys; ++k) {
    const json_t *v = json_object_get(j, t->keys[k]);
    t->col[k][t->n] = json_is_number(v)    ? json_number_value(v)
                      : json_is_boolean(v) ? json_is_true(v)
                                           : NAN;
  }
  ++t->n;
  return 0;
}

/* Every line of path (a JSON object each; blank lines skipped) into t's columns, which start
 * with room for a line; a missing file is an empty table unless required. */
static int read_jsonl(const char *path, int required, table *t) {
  if (add_row(t, NULL) != 0) goto oom;
  t->n = 0;
  FILE *f = fopen(path, "r");
  if (!f) {
    if (!required && errno == ENOENT) return 0;
    fprintf(stderr, "dptrain report: %s: %s\n", path, strerror(errno));
    return -1;
  }
  char *line = NULL;
  size_t cap = 0;
  int rc = 0;
  for (long number = 1; !rc && getline(&line, &cap, f) > 0; ++number) {
    if (strspn(line, " \t\r\n") == strlen(line)) continue;
    json_error_t err;
    json_t *j = json_loads(line, JSON_DECODE_ANY, &err);
    if (!j || !json_is_object(j)) {
      fprintf(stderr, "dptrain report: %s:%ld: malformed line: %s\n", path, number,
              j ? "not a JSON object" : err.text);
      rc = -1;
    } else if (add_row(t, j) != 0) {
      fprintf(stderr, "dptrain report: %s: out of memory\n", path);
      rc = -1;
    }
    json_decref(j);
  }
  if (!rc && ferror(f)) {
    fprintf(stderr, "dptrain report: %s: read error\n", path);
    rc = -1;
  }
  free(line);
  fclose(f);
  return rc;
oom:
  fprintf(stderr, "dptrain report: out of memory\n");
  return -1;
}

static int any_finite(const double *v, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (isfinite(v[i])) return 1;
  return 0;
}

/* The x of the lines whose flag is set (the marks of skipped or rolled back steps). */
static size_t flagged(const double *flag, const double *x, size_t n, double *out) {
  size_t k = 0;
  for (size_t i = 0; i < n; ++i)
    if (flag[i] == 1) out[k++] = x[i];
  return k;
}

enum {
  STEP,
  LOSS,
  LR,
  SPS,
  COMPUTE,
  EXPOSED,
  SKIPPED,
  ROLLED,
  E_STEP,
  E_LOSS,
  E_ACC,
  E_PPL,
  E_AUC,
  COLUMNS
};

typedef struct report {
  const char *dir;
  json_t *settings; /* NULL when absent */
  json_t *trace;    /* a --trace file found in the directory, or NULL */
  char trace_name[256];
  table steps, evals;
  double *col[COLUMNS];
  double *skipped_x, *rolled_x;
  size_t num_skipped, num_rolled;
} report;

/* settings' nested objects as "a.b.c = value" rows (arrays index as a.b[0]). */
static void settings_rows(FILE *f, const char *prefix, const json_t *j) {
  char key[512];
  if (json_is_object(j) || json_is_array(j)) {
    const size_t n = json_is_object(j) ? json_object_size(j) : json_array_size(j);
    if (n == 0) goto leaf;
    if (json_is_object(j)) {
      const char *k;
      const json_t *v;
      json_object_foreach((json_t *)j, k, v) {
        snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "", k);
        settings_rows(f, key, v);
      }
    } else {
      for (size_t i = 0; i < n; ++i) {
        snprintf(key, sizeof key, "%s[%zu]", prefix, i);
        settings_rows(f, key, json_array_get(j, i));
      }
    }
    return;
  }
leaf:
  fputs("<tr><td>", f);
  dpt_report_escape(f, prefix);
  fputs("</td><td>", f);
  if (json_is_string(j)) {
    dpt_report_escape(f, json_string_value(j));
  } else {
    char *s = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
    dpt_report_escape(f, s ? s : "?");
    free(s);
  }
  fputs("</td></tr>\n", f);
}

static const char style[] =
    "<style>\n"
    "body{font-family:sans-serif;margin:24px;color:#222;max-width:860px}\n"
    "h1{font-size:22px}h2{font-size:17px;margin-top:28px}\n"
    "svg{display:block;margin:12px 0;background:#fff;border:1px solid #ddd}\n"
    "svg .title{font-size:15px;font-weight:bold}svg .tick{font-size:11px;fill:#444}\n"
    "svg .axis{font-size:12px;fill:#222}svg .nodata{font-size:16px;fill:#888}\n"
    "svg .grid{stroke:#eee}svg .frame{fill:none;stroke:#999}\n"
    "table{border-collapse:collapse;font-size:13px}"
    "td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}\n"
    "td:first-child{font-family:monospace}\n"
    "</style>\n";

static void summary(FILE *f, const report *r) {
  const size_t n = r->steps.n;
  fprintf(f, "<table>\n<tr><td>steps logged</td><td>%zu</td></tr>\n", n);
  if (n) {
    fprintf(f, "<tr><td>last step</td><td>%.0f</td></tr>\n", r->col[STEP][n - 1]);
    if (isfinite(r->col[LOSS][n - 1]))
      fprintf(f, "<tr><td>last loss</td><td>%.6g</td></tr>\n", r->col[LOSS][n - 1]);
  }
  fprintf(f, "<tr><td>skipped steps</td><td>%zu</td></tr>\n", r->num_skipped);
  fprintf(f, "<tr><td>rolled back steps</td><td>%zu</td></tr>\n", r->num_rolled);
  fprintf(f, "<tr><td>evaluations</td><td>%zu</td></tr>\n", r->evals.n);
  if (r->evals.n && isfinite(r->col[E_ACC][r->evals.n - 1]))
    fprintf(f, "<tr><td>last accuracy</td><td>%.4f</td></tr>\n", r->col[E_ACC][r->evals.n - 1]);
  fputs("</table>\n", f);
}

static int write_html(FILE *f, const void *ctx) {
  const report *r = ctx;
  double *const *c = r->col;
  const size_t n = r->steps.n, ne = r->evals.n;
  const dpt_report_marks marks[] = {{"skipped", "#d62728", r->skipped_x, r->num_skipped},
                                    {"rolled back", "#ff7f0e", r->rolled_x, r->num_rolled}};
  fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>dptrain "
        "report: ",
        f);
  dpt_report_escape(f, r->dir);
  fprintf(f, "</title>\n%s</head>\n<body>\n<h1>dptrain run: ", style);
  dpt_report_escape(f, r->dir);
  fputs("</h1>\n", f);
  summary(f, r);
  fputs("<h2>Charts</h2>\n", f);
  const dpt_report_series loss[] = {{"training loss", "#1f77b4", c[STEP], c[LOSS], n},
                                    {"evaluation loss", "#2ca02c", c[E_STEP], c[E_LOSS], ne}};
  dpt_report_chart(f, "Loss", "step", loss, 2, marks, 2);
  const dpt_report_series eval[] = {{"accuracy", "#9467bd", c[E_STEP], c[E_ACC], ne},
                                    {"AUC", "#8c564b", c[E_STEP], c[E_AUC], ne}};
  dpt_report_chart(f, "Evaluation accuracy", "step", eval, any_finite(c[E_AUC], ne) ? 2 : 1, NULL,
                   0);
  if (any_finite(c[E_PPL], ne)) {
    const dpt_report_series ppl = {"perplexity", "#e377c2", c[E_STEP], c[E_PPL], ne};
    dpt_report_chart(f, "Evaluation perplexity", "step", &ppl, 1, NULL, 0);
  }
  const dpt_report_series lr = {"learning rate", "#17becf", c[STEP], c[LR], n};
  dpt_report_chart(f, "Learning rate", "step", &lr, 1, marks, 2);
  const dpt_report_series sps = {"samples/s", "#bcbd22", c[STEP], c[SPS], n};
  dpt_report_chart(f, "Throughput (samples/s)", "step", &sps, 1, marks, 2);
  const dpt_report_series time[] = {{"compute", "#1f77b4", c[STEP], c[COMPUTE], n},
                                    {"exposed communication", "#d62728", c[STEP], c[EXPOSED], n}};
  dpt_report_chart(f, "Compute vs exposed communication (seconds per step)", "step", time, 2, marks,
                   2);
  fputs("<h2>Settings</h2>\n", f);
  if (r->settings) {
    fputs("<table>\n<tr><th>setting</th><th>value</th></tr>\n", f);
    settings_rows(f, "", r->settings);
    fputs("</table>\n", f);
  } else {
    fputs("<p>no settings.json</p>\n", f);
  }
  if (r->trace) {
    fputs("<h2>Trace: ", f);
    dpt_report_escape(f, r->trace_name);
    fputs("</h2>\n", f);
    dpt_report_trace_table(f, r->trace);
  }
  fputs("</body>\n</html>\n", f);
  return !ferror(f);
}

static const char *const step_keys[] = {
    "step",    "loss",       "lr", "samples_per_sec", "compute_seconds", "exposed_seconds",
    "skipped", "rolled_back"};
static const char *const eval_keys[] = {"step", "loss", "accuracy", "perplexity", "auc"};

/* The first .json file of dir (by name) that is a dptrain trace; files that are not are passed
 * over. */
static void find_trace(report *r) {
  struct dirent **names = NULL;
  const int n = scandir(r->dir, &names, NULL, alphasort);
  char path[4096];
  for (int i = 0; i < n; ++i) {
    const char *name = names[i]->d_name;
    const size_t len = strlen(name);
    if (!r->trace && len > 5 && !strcmp(name + len - 5, ".json") &&
        strcmp(name, "settings.json") != 0 && len < sizeof r->trace_name) {
      snprintf(path, sizeof path, "%s/%s", r->dir, name);
      json_t *j = json_load_file(path, 0, NULL);
      if (dpt_report_is_trace(j)) {
        r->trace = j;
        snprintf(r->trace_name, sizeof r->trace_name, "%s", name);
      } else {
        json_decref(j);
      }
    }
    free(names[i]);
  }
  free(names);
}

/* Reads DIR's files into r; prints the message and returns -1 on failure. */
static int load(report *r, char *path, size_t size) {
  r->steps = (table){step_keys, E_STEP, 0, 0, r->col};
  r->evals = (table){eval_keys, COLUMNS - E_STEP, 0, 0, r->col + E_STEP};
  snprintf(path, size, "%s/steps.jsonl", r->dir);
  if (read_jsonl(path, 1, &r->steps) != 0) return -1;
  snprintf(path, size, "%s/evals.jsonl", r->dir);
  if (read_jsonl(path, 0, &r->evals) != 0) return -1;
  snprintf(path, size, "%s/settings.json", r->dir);
  json_error_t err;
  r->settings = json_load_file(path, 0, &err);
  if (!r->settings && access(path, F_OK) == 0) {
    fprintf(stderr, "dptrain report: %s:%d: malformed JSON: %s\n", path, err.line, err.text);
    return -1;
  }
  r->skipped_x = malloc((r->steps.n + 1) * sizeof(double));
  r->rolled_x = malloc((r->steps.n + 1) * sizeof(double));
  if (!r->skipped_x || !r->rolled_x) {
    fprintf(stderr, "dptrain report: out of memory\n");
    return -1;
  }
  r->num_skipped = flagged(r->col[SKIPPED], r->col[STEP], r->steps.n, r->skipped_x);
  r->num_rolled = flagged(r->col[ROLLED], r->col[STEP], r->steps.n, r->rolled_x);
  find_trace(r);
  return 0;
}

static void release(report *r) {
  json_decref(r->settings);
  json_decref(r->trace);
  for (int k = 0; k < COLUMNS; ++k)
    free(r->col[k]);
  free(r->skipped_x);
  free(r->rolled_x);
}

static int take_dir(void *p, const char *arg) {
  opts *o = p;
  if (o->dir) return -1;
  o->dir = arg;
  return 0;
}

int dpt_cmd_report(int argc, char **argv) {
  opts o = {0};
  const int rc = dpt_opt_parse(&report_cmd, &o, argc, argv, NULL, take_dir);
  if (rc != DPT_OPT_KEEP_GOING) return rc;
  if (!o.dir) return dpt_opt_usage_error(&report_cmd, "DIR is required");
  struct stat sb;
  if (stat(o.dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    const int missing = stat(o.dir, &sb) != 0 ? errno == ENOENT : 1;
    fprintf(stderr, "dptrain report: %s: %s\n", o.dir,
            missing ? "no such directory" : strerror(errno));
    return 1;
  }
  char path[4096], out[4096];
  if (!o.out) {
    snprintf(out, sizeof out, "%s/report.html", o.dir);
    o.out = out;
  }
  report r = {.dir = o.dir};
  int code = load(&r, path, sizeof path) == 0 ? 0 : 1;
  if (!code) {
    dpt_clear_error();
    if (dpt_write_file_atomic(o.out, "", 0, write_html, &r) != DPT_OK) {
      fprintf(stderr, "dptrain report: %s\n", dpt_last_error());
      code = 1;
    }
  }
  release(&r);
  return code;
}
