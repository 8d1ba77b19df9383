/* The option tables' reader (tools/options.h): the command line through getopt_long with exact
 * names, under it the JSON object of --config FILE, and the options set as that JSON again. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "tools/options.h"

/* dpt_opt_common's rows, in order. */
enum { COMMON_CONFIG, COMMON_PRINT, COMMON_HELP, COMMON_COUNT };

static const dpt_opt *common_row(int i) {
  size_t n;
  return &dpt_opt_common(&n)[i];
}

/* Texts made from --config's values: the rows keep pointers to them (STRING), so they live as
 * long as the process, reachable from here. */
static struct kept {
  char **texts;
  size_t count, cap;
} kept;

static const char *keep_text(const char *s) {
  if (kept.count == kept.cap) {
    const size_t cap = kept.cap ? 2 * kept.cap : 32;
    char **t = realloc(kept.texts, cap * sizeof *t);
    if (!t) return NULL;
    kept.texts = t;
    kept.cap = cap;
  }
  char *copy = strdup(s);
  if (copy) kept.texts[kept.count++] = copy;
  return copy;
}

/* One value set: its row, its text (NULL for a flag) and whether the command line gave it. */
typedef struct setting {
  const dpt_opt *o;
  const char *v;
  int from_cli;
} setting;

/* A parse in progress. */
typedef struct parse {
  const dpt_opt_cmd *cmd;
  const dpt_opt **rows; /* the rows getopt takes, NULL-terminated; 256 + i: rows[i] */
  struct option *longs; /* [cmd->count + COMMON_COUNT + 1] */
  setting *set;         /* in the order applied */
  size_t nset, cap;
  char spec[64];      /* getopt's optstring */
  const char *config; /* --config FILE, or NULL */
  int print_config, help;
} parse;

static int add_setting(parse *p, const dpt_opt *o, const char *v, int from_cli) {
  if (p->nset == p->cap) {
    const size_t cap = p->cap ? 2 * p->cap : 16;
    setting *s = realloc(p->set, cap * sizeof *s);
    if (!s) return -1;
    p->set = s;
    p->cap = cap;
  }
  p->set[p->nset++] = (setting){o, v, from_cli};
  return 0;
}

/* getopt_long's tables: the command's rows, then the common ones; a row named "-x" is the
 * short option x. */
static int make_longs(parse *p, int until) {
  const size_t cap = p->cmd->count + COMMON_COUNT;
  p->rows = calloc(cap + 1, sizeof *p->rows);
  p->longs = calloc(cap + 1, sizeof *p->longs);
  if (!p->rows || !p->longs) return -1;
  size_t n = 0, nlong = 0,
         nspec = (size_t)snprintf(p->spec, sizeof p->spec, "%s", until ? "+:h" : "-:h");
  for (size_t i = 0; i < cap; ++i) {
    const dpt_opt *o = i < p->cmd->count ? &p->cmd->opts[i] : common_row((int)(i - p->cmd->count));
    if (!o->name || !dpt_opt_in(p->cmd, o)) continue;
    p->rows[n] = o;
    if (o->name[1] != '-' && nspec + 2 < sizeof p->spec) {
      p->spec[nspec++] = o->name[1];
      if (o->value) p->spec[nspec++] = ':';
      p->spec[nspec] = '\0';
    } else if (o->name[1] == '-') {
      p->longs[nlong++] = (struct option){o->name + 2, o->value ? required_argument : no_argument,
                                          NULL, 256 + (int)n};
    }
    ++n;
  }
  return 0;
}

/* The row of short option c, or NULL. */
static const dpt_opt *short_row(const parse *p, int c) {
  for (size_t i = 0; p->rows[i]; ++i)
    if (p->rows[i]->name[1] == c && !p->rows[i]->name[2]) return p->rows[i];
  return NULL;
}

static void free_parse(parse *p) {
  free(p->rows);
  free(p->longs);
  free(p->set);
}

/* The row whose name is token's up to '=' exactly, or NULL. */
static const dpt_opt *exact_row(const parse *p, const char *token) {
  const size_t len = strcspn(token, "=");
  for (size_t i = 0; p->rows[i]; ++i)
    if (strlen(p->rows[i]->name) == len && !strncmp(p->rows[i]->name, token, len))
      return p->rows[i];
  return NULL;
}

/* getopt_long's '?' or ':' for token as one line: a value missing or given to a flag, or an
 * unknown name (a prefix named as such, with its option when only one starts with it). */
static int refuse(const parse *p, const char *token, int c) {
  const dpt_opt *o = exact_row(p, token);
  const int len = (int)strcspn(token, "=");
  if (o && c == ':') return dpt_opt_usage_error(p->cmd, "%s needs a value", o->name);
  if (o && !o->value && token[len] == '=')
    return dpt_opt_usage_error(p->cmd, "%s takes no value", o->name);
  const dpt_opt *first = NULL;
  int prefixes = 0;
  for (size_t i = 0; p->rows[i] && !strncmp(token, "--", 2) && len > 2; ++i)
    if (!strncmp(p->rows[i]->name, token, (size_t)len) && !prefixes++) first = p->rows[i];
  if (prefixes == 1)
    return dpt_opt_usage_error(p->cmd, "unknown option '%.*s' (names are not abbreviated: %s)", len,
                               token, first->name);
  if (prefixes > 1)
    return dpt_opt_usage_error(p->cmd, "unknown option '%.*s' (names are not abbreviated)", len,
                               token);
  return dpt_opt_usage_error(p->cmd, "unknown option '%.*s'", len, token);
}

/* Takes one option getopt_long returned (c, for the token at argv[at]): 0, or the exit code. */
static int take_option(parse *p, int c, const char *token) {
  if (c == 'h') {
    p->help = 1;
    return 0;
  }
  const dpt_opt *o = c < 256 && c != '?' && c != ':' ? short_row(p, c) : NULL;
  if (c < 256 && !o) return refuse(p, token, c);
  if (!o) o = p->rows[c - 256];
  const size_t len = strcspn(token, "=");
  if (o->name[1] == '-' && (strncmp(token, "--", 2) || strlen(o->name) != len))
    return refuse(p, token, '?');
  if (o == common_row(COMMON_HELP)) {
    p->help = 1;
  } else if (o == common_row(COMMON_PRINT)) {
    p->print_config = 1;
  } else if (o == common_row(COMMON_CONFIG)) {
    if (p->config) return dpt_opt_usage_error(p->cmd, "--config is given twice");
    p->config = optarg;
  } else if (add_setting(p, o, o->value ? optarg : NULL, 1) != 0) {
    return dpt_opt_usage_error(p->cmd, "out of memory");
  }
  return 0;
}

/* The command line's options into p->set, the other arguments to positional (all of them after
 * "--"). until: stop at the first argument that is not an option, *first its index. 0, or the
 * exit code of a usage error. */
static int read_argv(parse *p, void *target, int argc, char **argv, dpt_opt_positional positional,
                     int *until) {
  optind = 0; /* glibc: start afresh */
  opterr = 0;
  for (;;) {
    const int at = optind ? optind : 1;
    const int c = getopt_long(argc, argv, p->spec, p->longs, NULL);
    if (c == -1) break;
    if (c == 1) { /* an argument that is not an option, in order */
      if (!positional || positional(target, optarg) != 0)
        return dpt_opt_usage_error(p->cmd, "unknown argument '%s'", optarg);
      continue;
    }
    const int rc = take_option(p, c, argv[at]);
    if (rc || p->help) return rc;
  }
  if (until) {
    *until = optind;
    return 0;
  }
  for (int i = optind; i < argc; ++i)
    if (!positional || positional(target, argv[i]) != 0)
      return dpt_opt_usage_error(p->cmd, "unknown argument '%s'", argv[i]);
  return 0;
}

/* A JSON number as the text a row parses: integers as they are, reals in the fewest digits that
 * read back the same. */
static void number_text(const json_t *v, char *out, size_t cap) {
  if (json_is_integer(v)) {
    snprintf(out, cap, "%lld", (long long)json_integer_value(v));
    return;
  }
  for (int digits = 1; digits <= 17; ++digits) {
    snprintf(out, cap, "%.*g", digits, json_real_value(v));
    if (strtod(out, NULL) == json_real_value(v)) return;
  }
}

/* What a row takes in --config, for the messages. */
static const char *json_type_wanted(const dpt_opt *o) {
  switch (o->kind) {
  case DPT_OPT_FLAG:
    return "true or false";
  case DPT_OPT_INT:
  case DPT_OPT_I64:
  case DPT_OPT_SIZE:
  case DPT_OPT_U64:
    return "an integer";
  case DPT_OPT_FLOAT:
    return "a number";
  case DPT_OPT_STRING:
    return "a string";
  case DPT_OPT_CUSTOM:
    break;
  }
  return o->value ? (o->multi ? "a string, a number or an array of them" : "a string or a number")
                  : "true or false";
}

/* One JSON value of row o as its text into out[cap] (the string's own when v is a string):
 * 0, or -1 for a type the row does not take. */
static int value_text(const dpt_opt *o, const json_t *v, char *out, size_t cap, const char **text) {
  const int integer = o->kind == DPT_OPT_INT || o->kind == DPT_OPT_I64 || o->kind == DPT_OPT_SIZE ||
                      o->kind == DPT_OPT_U64;
  *text = out;
  if (!o->value) return json_is_boolean(v) ? 0 : -1;
  if (json_is_string(v) && (o->kind == DPT_OPT_STRING || o->kind == DPT_OPT_CUSTOM)) {
    *text = json_string_value(v);
    return 0;
  }
  if (integer ? !json_is_integer(v) : !json_is_number(v)) return -1;
  if (o->kind == DPT_OPT_STRING) return -1;
  number_text(v, out, cap);
  return 0;
}

/* Applies row o (not given on the command line) from config value v, or refuses it. */
static int config_value(parse *p, void *target, unsigned char *given, const dpt_opt *o,
                        const char *key, const json_t *v) {
  const int many = json_is_array(v) && o->multi;
  for (size_t i = 0; i < (many ? json_array_size(v) : 1); ++i) {
    const json_t *item = many ? json_array_get(v, i) : v;
    char num[64];
    const char *text;
    if (value_text(o, item, num, sizeof num, &text) != 0)
      return dpt_opt_usage_error(p->cmd, "--config %s: \"%s\" must be %s", p->config, key,
                                 json_type_wanted(o));
    if (!o->value && json_is_false(item)) continue; /* a flag not set */
    const char *kept_text = o->value ? keep_text(text) : NULL;
    if (o->value && !kept_text) return dpt_opt_usage_error(p->cmd, "out of memory");
    if (dpt_opt_set(o, target, kept_text) != 0)
      return dpt_opt_usage_error(p->cmd, "--config %s: bad value '%s' for \"%s\"", p->config, text,
                                 key);
    if (add_setting(p, o, kept_text, 0) != 0) return dpt_opt_usage_error(p->cmd, "out of memory");
    if (given) given[o - p->cmd->opts] = 1;
  }
  return 0;
}

static int on_cli(const parse *p, const dpt_opt *o) {
  for (size_t i = 0; i < p->nset; ++i)
    if (p->set[i].o == o && p->set[i].from_cli) return 1;
  return 0;
}

/* --config's object applied to target, key by key in the file's order, except the options the
 * command line gives (checked all the same). 0, or the exit code. */
static int apply_config(parse *p, void *target, unsigned char *given) {
  json_error_t err;
  json_t *root = json_load_file(p->config, JSON_REJECT_DUPLICATES, &err);
  if (!root && err.line < 1) /* not read at all: the text names the file and why */
    return dpt_opt_usage_error(p->cmd, "--config %s: %s", p->config, err.text);
  if (!root)
    return dpt_opt_usage_error(p->cmd, "--config %s: %s (line %d, column %d)", p->config, err.text,
                               err.line, err.column);
  int rc = json_is_object(root)
               ? 0
               : dpt_opt_usage_error(p->cmd, "--config %s: not a JSON object", p->config);
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (rc) break;
    char name[256];
    snprintf(name, sizeof name, "%s%s", strlen(key) == 1 ? "-" : "--", key);
    const dpt_opt *o = dpt_opt_find(p->cmd, name);
    size_t ncommon = 0;
    for (; ncommon < COMMON_COUNT && strcmp(common_row((int)ncommon)->name, name); ++ncommon) {
    }
    if (ncommon < COMMON_COUNT)
      rc = dpt_opt_usage_error(p->cmd, "--config %s: \"%s\" is for the command line only",
                               p->config, key);
    else if (!o)
      rc = dpt_opt_usage_error(p->cmd, "--config %s: unknown option \"%s\" (%s takes no %s)",
                               p->config, key, p->cmd->name, name);
    else if (!on_cli(p, o))
      rc = config_value(p, target, given, o, key, v);
    else if (json_is_array(v) && o->multi)
      rc = 0;
    else {
      char num[64];
      const char *text;
      if (value_text(o, v, num, sizeof num, &text) != 0)
        rc = dpt_opt_usage_error(p->cmd, "--config %s: \"%s\" must be %s", p->config, key,
                                 json_type_wanted(o));
    }
  }
  json_decref(root);
  return rc;
}

/* The command line's options applied in order. 0, or the exit code. */
static int apply_cli(parse *p, void *target, unsigned char *given) {
  for (size_t i = 0; i < p->nset; ++i) {
    const setting *s = &p->set[i];
    if (!s->from_cli) continue;
    if (dpt_opt_set(s->o, target, s->v) != 0)
      return dpt_opt_usage_error(p->cmd, "bad value '%s' for %s%s%s%s", s->v, s->o->name,
                                 s->o->choices ? " (" : "", s->o->choices ? s->o->choices : "",
                                 s->o->choices ? ")" : "");
    if (given) given[s->o - p->cmd->opts] = 1;
  }
  return 0;
}

/* A value's JSON as the settings hold it: flags true, numbers for the number kinds and for
 * texts that are JSON numbers, else the text. */
static json_t *setting_json(const setting *s) {
  if (!s->v) return json_true();
  const dpt_opt *o = s->o;
  if (o->kind == DPT_OPT_INT || o->kind == DPT_OPT_I64 || o->kind == DPT_OPT_SIZE ||
      o->kind == DPT_OPT_U64)
    return json_integer(strtoll(s->v, NULL, 10));
  if (o->kind == DPT_OPT_FLOAT) return json_real(strtod(s->v, NULL));
  if (o->kind == DPT_OPT_CUSTOM) {
    json_t *n = json_loads(s->v, JSON_DECODE_ANY, NULL);
    if (json_is_number(n)) return n;
    json_decref(n);
  }
  return json_string(s->v);
}

/* The options set, in the table's order: the command line's value of each (the last, or all of
 * a repeatable one), else --config's. */
static json_t *settings_of(const parse *p) {
  json_t *out = json_object();
  for (size_t r = 0; out && r < p->cmd->count; ++r) {
    const dpt_opt *o = &p->cmd->opts[r];
    const int cli = on_cli(p, o);
    json_t *all = json_array(), *last = NULL;
    for (size_t i = 0; i < p->nset; ++i) {
      if (p->set[i].o != o || p->set[i].from_cli != cli) continue;
      json_decref(last);
      last = setting_json(&p->set[i]);
      json_array_append(all, last);
    }
    if (last) json_object_set(out, o->name + strspn(o->name, "-"), o->multi ? all : last);
    json_decref(last);
    json_decref(all);
  }
  return out;
}

static int parse_all(const dpt_opt_cmd *cmd, void *target, int argc, char **argv,
                     unsigned char *given, dpt_opt_positional positional, json_t **settings,
                     int *print_config, int *until) {
  parse p = {.cmd = cmd};
  int rc = make_longs(&p, until != NULL) != 0 ? dpt_opt_usage_error(cmd, "out of memory") : 0;
  if (!rc) rc = read_argv(&p, target, argc, argv, positional, until);
  if (!rc && p.help) {
    dpt_opt_usage(cmd, stdout);
    free_parse(&p);
    return 0;
  }
  if (!rc && p.config) rc = apply_config(&p, target, given);
  if (!rc) rc = apply_cli(&p, target, given);
  if (!rc && settings) *settings = settings_of(&p);
  if (!rc && print_config) *print_config = p.print_config;
  if (!rc && p.print_config && !print_config) {
    json_t *s = settings_of(&p);
    char *text = s ? dpt_opt_settings_text(s) : NULL;
    if (text) fputs(text, stdout);
    free(text);
    json_decref(s);
    rc = text ? 0 : 1;
    free_parse(&p);
    return rc;
  }
  free_parse(&p);
  return rc ? rc : DPT_OPT_KEEP_GOING;
}

int dpt_opt_parse_settings(const dpt_opt_cmd *cmd, void *target, int argc, char **argv,
                           unsigned char *given, dpt_opt_positional positional, json_t **settings,
                           int *print_config) {
  *settings = NULL;
  *print_config = 0;
  return parse_all(cmd, target, argc, argv, given, positional, settings, print_config, NULL);
}

int dpt_opt_parse(const dpt_opt_cmd *cmd, void *target, int argc, char **argv, unsigned char *given,
                  dpt_opt_positional positional) {
  return parse_all(cmd, target, argc, argv, given, positional, NULL, NULL, NULL);
}

int dpt_opt_parse_until(const dpt_opt_cmd *cmd, void *target, int argc, char **argv, int *first) {
  *first = 0;
  return parse_all(cmd, target, argc, argv, NULL, NULL, NULL, NULL, first);
}

/* A JSON scalar on f: numbers as number_text writes them, strings escaped. */
static void put_scalar(FILE *f, const json_t *v) {
  if (json_is_number(v)) {
    char num[64];
    number_text(v, num, sizeof num);
    fputs(num, f);
    return;
  }
  char *s = json_dumps(v, JSON_ENCODE_ANY);
  fputs(s ? s : "null", f);
  free(s);
}

char *dpt_opt_settings_text(const json_t *settings) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return NULL;
  fputs("{", f);
  const char *key;
  json_t *v;
  size_t n = 0;
  json_object_foreach((json_t *)settings, key, v) {
    json_t *k = json_string(key);
    fputs(n++ ? ",\n  " : "\n  ", f);
    put_scalar(f, k);
    fputs(": ", f);
    json_decref(k);
    if (!json_is_array(v)) {
      put_scalar(f, v);
      continue;
    }
    for (size_t i = 0; i < json_array_size(v); ++i) {
      fputs(i ? ", " : "[", f);
      put_scalar(f, json_array_get(v, i));
    }
    fputs(json_array_size(v) ? "]" : "[]", f);
  }
  fputs(n ? "\n}\n" : "}\n", f);
  if (fclose(f) != 0) {
    free(buf);
    return NULL;
  }
  return buf;
}
