/* The option tables' values, usage printer and Markdown writer (tools/options.h); the reader is
 * options_parse.c. */
#include "tools/options.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int dpt_opt_parse_i64(const char *s, int64_t min, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end || errno || v < min) return -1;
  *out = v;
  return 0;
}

int dpt_opt_parse_float(const char *s, float *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  /* A value a float cannot hold (it would round to 0 or to infinity) is refused as given. */
  if (end == s || *end || errno || !isfinite(v) || fabs(v) > FLT_MAX || (v != 0 && (float)v == 0))
    return -1;
  *out = (float)v;
  return 0;
}

/* The options every command takes, read by options_parse.c; their order is its COMMON_*. */
static const dpt_opt common[] = {
    {"--config", "FILE",
     "options from a JSON object, keys without the dashes, e.g.\n"
     "{\"epochs\": 3, \"lr\": 0.1}; the command line overrides it",
     .kind = DPT_OPT_CUSTOM},
    {"--print-config", NULL,
     "print the options set (--config's and the command line's)\n"
     "as --config reads them, and exit",
     .kind = DPT_OPT_CUSTOM},
    {"--help", NULL, "this text, and exit (also -h)", .kind = DPT_OPT_CUSTOM},
};

const dpt_opt *dpt_opt_common(size_t *count) {
  *count = sizeof common / sizeof common[0];
  return common;
}

int dpt_opt_value_path(const dpt_opt *o) {
  static const char *const files[] = {"FILE", "PATH", "OUT", "PATTERN"};
  if (!o->value) return 0;
  if (!strcmp(o->value, "DIR")) return 'd';
  for (size_t i = 0; i < sizeof files / sizeof files[0]; ++i)
    if (!strcmp(o->value, files[i])) return 'f';
  return 0;
}

int dpt_opt_in(const dpt_opt_cmd *cmd, const dpt_opt *o) {
  return o->cmds == 0 || (o->cmds & cmd->mask) != 0;
}

const dpt_opt *dpt_opt_find(const dpt_opt_cmd *cmd, const char *name) {
  for (size_t i = 0; i < cmd->count; ++i) {
    const dpt_opt *o = &cmd->opts[i];
    if (o->name && dpt_opt_in(cmd, o) && !strcmp(o->name, name)) return o;
  }
  return NULL;
}

int dpt_opt_set(const dpt_opt *o, void *target, const char *v) {
  char *field = (char *)target + o->field;
  const int integer = o->kind == DPT_OPT_INT || o->kind == DPT_OPT_I64 || o->kind == DPT_OPT_SIZE ||
                      o->kind == DPT_OPT_U64;
  int64_t iv = 0;
  if (integer && (dpt_opt_parse_i64(v, o->lo, &iv) != 0 || iv > o->hi)) return -1;
  switch (o->kind) {
  case DPT_OPT_FLAG:
    *(int *)field = (int)o->lo;
    return 0;
  case DPT_OPT_STRING:
    *(const char **)field = v;
    return 0;
  case DPT_OPT_INT:
    *(int *)field = (int)iv;
    return 0;
  case DPT_OPT_I64:
    *(int64_t *)field = iv;
    return 0;
  case DPT_OPT_SIZE:
    *(size_t *)field = (size_t)iv;
    return 0;
  case DPT_OPT_U64:
    *(uint64_t *)field = (uint64_t)iv;
    return 0;
  case DPT_OPT_FLOAT:
    return dpt_opt_parse_float(v, (float *)field);
  case DPT_OPT_CUSTOM:
    return o->parse(target, v);
  }
  return -1;
}

/* Row o in the usage's column layout: "  --name VALUE", then each line of help from column
 * width + 4. */
static void usage_row(const dpt_opt *o, int width, FILE *f) {
  int used = fprintf(f, "  %s%s%s", o->name, o->value ? " " : "", o->value ? o->value : "");
  for (const char *line = o->help;; used = 0) {
    const char *nl = strchr(line, '\n');
    const int len = nl ? (int)(nl - line) : (int)strlen(line);
    fprintf(f, "%*s%.*s\n", width + 4 - used, "", len, line);
    if (!nl) break;
    line = nl + 1;
  }
}

static int row_width(const dpt_opt *o) {
  return o->name ? (int)(strlen(o->name) + (o->value ? 1 + strlen(o->value) : 0)) : 0;
}

void dpt_opt_usage(const dpt_opt_cmd *cmd, FILE *f) {
  fputs(cmd->synopsis, f);
  size_t ncommon;
  const dpt_opt *common = dpt_opt_common(&ncommon);
  int width = 0; /* of the widest "--name VALUE": the help texts start in one column */
  for (size_t i = 0; i < cmd->count; ++i) {
    const dpt_opt *o = &cmd->opts[i];
    if (dpt_opt_in(cmd, o) && row_width(o) > width) width = row_width(o);
  }
  for (size_t i = 0; i < ncommon; ++i)
    if (row_width(&common[i]) > width) width = row_width(&common[i]);
  fputc('\n', f);
  for (size_t i = 0; i < cmd->count; ++i) {
    const dpt_opt *o = &cmd->opts[i];
    if (!dpt_opt_in(cmd, o)) continue;
    if (o->name)
      usage_row(o, width, f);
    else
      fprintf(f, "%s\n", o->help);
  }
  fprintf(f, "%s", cmd->count ? "every command:\n" : "");
  for (size_t i = 0; i < ncommon; ++i)
    usage_row(&common[i], width, f);
}

int dpt_opt_usage_error(const dpt_opt_cmd *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", cmd->name);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  dpt_opt_usage(cmd, stderr);
  return 2;
}

/* s on one Markdown line: '\n' as a space, '*' escaped (no emphasis in "'*.bias,*norm*'"). */
static void md_text(FILE *f, const char *s) {
  for (; *s; ++s) {
    if (*s == '*') fputc('\\', f);
    fputc(*s == '\n' ? ' ' : *s, f);
  }
}

void dpt_opt_markdown(const dpt_opt_cmd *cmd, FILE *f) {
  fprintf(f, "## %s\n\n```\n%s```\n\n", cmd->name, cmd->synopsis);
  int rows = 0; /* written so far: a heading after a list needs a blank line */
  for (size_t i = 0; i < cmd->count; ++i) {
    const dpt_opt *o = &cmd->opts[i];
    if (!dpt_opt_in(cmd, o)) continue;
    if (!o->name) {
      fprintf(f, "%s", rows++ ? "\n" : "");
      md_text(f, o->help);
      fprintf(f, "\n\n");
      continue;
    }
    ++rows;
    fprintf(f, "- `%s%s%s`: ", o->name, o->value ? " " : "", o->value ? o->value : "");
    md_text(f, o->help);
    fputc('\n', f);
  }
}
