/* The option tables' reader, usage printer and Markdown writer (tools/options.h). */
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

void dpt_opt_usage(const dpt_opt_cmd *cmd, FILE *f) {
  fputs(cmd->synopsis, f);
  int width = 0; /* of the widest "--name VALUE": the help texts start in one column */
  for (size_t i = 0; i < cmd->count; ++i) {
    const dpt_opt *o = &cmd->opts[i];
    int w = o->name ? (int)(strlen(o->name) + (o->value ? 1 + strlen(o->value) : 0)) : 0;
    if (dpt_opt_in(cmd, o) && w > width) width = w;
  }
  if (cmd->count) fputc('\n', f);
  for (size_t i = 0; i < cmd->count; ++i) {
    const dpt_opt *o = &cmd->opts[i];
    if (!dpt_opt_in(cmd, o)) continue;
    if (!o->name) {
      fprintf(f, "%s\n", o->help);
      continue;
    }
    /* "  --name VALUE", then each line of help from column width + 4 */
    int used = fprintf(f, "  %s%s%s", o->name, o->value ? " " : "", o->value ? o->value : "");
    for (const char *line = o->help;; used = 0) {
      const char *nl = strchr(line, '\n');
      const int len = nl ? (int)(nl - line) : (int)strlen(line);
      fprintf(f, "%*s%.*s\n", width + 4 - used, "", len, line);
      if (!nl) break;
      line = nl + 1;
    }
  }
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

int dpt_opt_parse(const dpt_opt_cmd *cmd, void *target, int argc, char **argv, unsigned char *given,
                  dpt_opt_positional positional) {
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      dpt_opt_usage(cmd, stdout);
      return 0;
    }
    if (a[0] != '-' && positional) {
      if (positional(target, a) != 0) return dpt_opt_usage_error(cmd, "unknown argument '%s'", a);
      continue;
    }
    const dpt_opt *o = dpt_opt_find(cmd, a);
    if (!o) return dpt_opt_usage_error(cmd, "unknown option '%s'", a);
    if (o->value && i + 1 == argc) return dpt_opt_usage_error(cmd, "%s needs a value", a);
    const char *v = o->value ? argv[++i] : NULL;
    if (dpt_opt_set(o, target, v) != 0)
      return dpt_opt_usage_error(cmd, "bad value '%s' for %s", v, a);
    if (given) given[o - cmd->opts] = 1;
  }
  return DPT_OPT_KEEP_GOING;
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
