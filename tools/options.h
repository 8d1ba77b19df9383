/* Option tables of the dptrain commands: one row per option gives the --help text, the
 * takes-a-value check, the parser (getopt_long, exact names only; --config's JSON keys), the
 * docs/reference.md entry (dptrain help --reference), the bash completion and the man page. */
#ifndef DPTRAIN_TOOLS_OPTIONS_H
#define DPTRAIN_TOOLS_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

/* How an option's value is read and where it goes. */
typedef enum dpt_opt_kind {
  DPT_OPT_FLAG,   /* no value: stores `lo` into an int */
  DPT_OPT_STRING, /* the argument itself (argv outlives the run) */
  DPT_OPT_INT,    /* an integer in [lo, hi], stored as int */
  DPT_OPT_I64,    /* an integer in [lo, hi], stored as int64_t */
  DPT_OPT_SIZE,   /* an integer in [lo, hi], stored as size_t */
  DPT_OPT_U64,    /* an integer in [lo, hi], stored as uint64_t */
  DPT_OPT_FLOAT,  /* a finite number a float holds, stored as float */
  DPT_OPT_CUSTOM, /* parse(target, value) */
} dpt_opt_kind;

/* One row of a table. */
typedef struct dpt_opt {
  const char *name;  /* "--lr"; NULL: a section heading, `help` is its title */
  const char *value; /* placeholder in the help; NULL: a flag, which takes no value */
  const char *help;  /* '\n' starts a continuation line, indented under the first */
  dpt_opt_kind kind;
  size_t field;   /* offset in the target struct of what the option sets; unused by CUSTOM */
  int64_t lo, hi; /* integers: the accepted range; FLAG: lo is the value stored */
  int (*parse)(void *target, const char *v); /* CUSTOM: 0, or -1 for a bad value */
  unsigned cmds; /* the commands of a shared table that take it (their `mask`); 0: all */
  int multi;     /* repeatable: each use adds a value (a JSON array in --config, one per item) */
  const char *choices; /* the accepted values ("a, b or c"), named when a value is bad; or NULL */
} dpt_opt;

/* A command: its name, its text before the options, and its rows of a table. */
typedef struct dpt_opt_cmd {
  const char *name;     /* "dptrain train": the prefix of its usage errors */
  const char *synopsis; /* usage lines, a blank line, what it does (ends in '\n') */
  const dpt_opt *opts;
  size_t count;
  unsigned mask; /* rows whose cmds has a bit of it (or is 0) are this command's */
} dpt_opt_cmd;

/* The row macros of a command file: define OPT_TARGET to the struct the table writes, then
 * `{"--epochs", "E", "help", I64(cfg.epochs, 1)}`, and `.cmds = ...` in a row of a shared
 * table. FIELD checks the field's type, so a kind that does not fit the field it writes does
 * not compile. */
#define FIELD(f, T)      _Generic(((OPT_TARGET *)0)->f, T : offsetof(OPT_TARGET, f))
#define FLAG(f, v)       .kind = DPT_OPT_FLAG, .field = FIELD(f, int), .lo = v
#define STRING(f)        .kind = DPT_OPT_STRING, .field = FIELD(f, const char *)
#define INT(f, l, h)     .kind = DPT_OPT_INT, .field = FIELD(f, int), .lo = l, .hi = h
#define I64(f, l)        .kind = DPT_OPT_I64, .field = FIELD(f, int64_t), .lo = l, .hi = INT64_MAX
#define SIZE(f, l)       .kind = DPT_OPT_SIZE, .field = FIELD(f, size_t), .lo = l, .hi = INT64_MAX
#define SIZE_IN(f, l, h) .kind = DPT_OPT_SIZE, .field = FIELD(f, size_t), .lo = l, .hi = h
#define U64(f, l)        .kind = DPT_OPT_U64, .field = FIELD(f, uint64_t), .lo = l, .hi = INT64_MAX
#define FLOAT(f)         .kind = DPT_OPT_FLOAT, .field = FIELD(f, float)
#define CUSTOM(fn)       .kind = DPT_OPT_CUSTOM, .parse = fn

/* What dpt_opt_parse returns when the command goes on (no exit code yet). */
#define DPT_OPT_KEEP_GOING (-1)

/* Whether row o belongs to cmd. */
int dpt_opt_in(const dpt_opt_cmd *cmd, const dpt_opt *o);
/* cmd's row named `name`, or NULL. */
const dpt_opt *dpt_opt_find(const dpt_opt_cmd *cmd, const char *name);
/* Applies row o with value v (NULL for a flag) to target; 0, or -1 for a bad value. */
int dpt_opt_set(const dpt_opt *o, void *target, const char *v);
/* The synopsis, then every row of cmd, help texts in one column. */
void dpt_opt_usage(const dpt_opt_cmd *cmd, FILE *f);
/* "<name>: <message>", then the usage, on stderr; returns the exit code 2. */
int dpt_opt_usage_error(const dpt_opt_cmd *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* An argument that is not an option: 0 taken, -1 refused (a usage error). */
typedef int (*dpt_opt_positional)(void *target, const char *arg);

/* Reads argv[1..argc) into target through getopt_long: "--opt value", "--opt=value", "--" ends
 * the options; names are matched exactly (a prefix is refused). --help or -h prints the usage on
 * stdout (exit 0). --config FILE applies a JSON object's keys (option names without the dashes)
 * first, except those the command line gives; then the command line's options, in order.
 * --print-config prints the resulting options as --config reads them (exit 0). given
 * (cmd->count entries, or NULL) marks the rows set. positional takes the arguments that are not
 * options (NULL: each is a usage error). DPT_OPT_KEEP_GOING, or the exit code. */
int dpt_opt_parse(const dpt_opt_cmd *cmd, void *target, int argc, char **argv, unsigned char *given,
                  dpt_opt_positional positional);

/* dpt_opt_parse that hands the options set (by --config and the command line) to the caller:
 * *settings (a new JSON object, or NULL on an exit) and *print_config (--print-config given:
 * the caller prints dpt_opt_settings_text(*settings) when it is ready, and exits 0). */
int dpt_opt_parse_settings(const dpt_opt_cmd *cmd, void *target, int argc, char **argv,
                           unsigned char *given, dpt_opt_positional positional, json_t **settings,
                           int *print_config);
/* settings as --config reads it: one key a line, numbers in the fewest digits that read back the
 * same (malloc'd; NULL when out of memory). */
char *dpt_opt_settings_text(const json_t *settings);

/* Where the first argument that is not an option stands, for a command that runs the rest
 * (dptrain run): options before it (or before "--") only; *first receives its index. */
int dpt_opt_parse_until(const dpt_opt_cmd *cmd, void *target, int argc, char **argv, int *first);

/* The options every command takes besides its table's (--config, --print-config, --help). */
const dpt_opt *dpt_opt_common(size_t *count);
/* Whether row o's value names a file (FILE, PATH, OUT, PATTERN) or a directory (DIR): 'f',
 * 'd', or 0. */
int dpt_opt_value_path(const dpt_opt *o);

/* cmd as Markdown: a heading, the synopsis, a list of its options by section. */
void dpt_opt_markdown(const dpt_opt_cmd *cmd, FILE *f);

/* Integers and floats as the tables read them: 0, or -1 for a bad value. */
int dpt_opt_parse_i64(const char *s, int64_t min, int64_t *out);
int dpt_opt_parse_float(const char *s, float *out);

#endif
