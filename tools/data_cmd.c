/* `dptrain data`: interaction data for recommendation models (docs/recommendation.md).
 *   convert  Criteo-layout text (plain or gzip) to shards
 *   npy      NumPy arrays (TorchRec's Criteo preprocessing) to shards
 *   synth    synthetic interactions with planted factors, and the planted model's AUC
 *   debian   the Debian package dependency graph as link prediction
 *   info     what shards hold (and a few records)
 *   images   an image folder to a tensor data set (tools/data_images.c)
 * Each failure is one line on stderr and exit 1; usage errors exit 2. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, getline, strdup */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "dptrain/advanced.h"
#include "tools/commands.h"
#include "tools/options.h"
#include "tools/prep/shards.h"

#define MAX_INPUTS 256

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *cmd_name = "dptrain data";

static char tool_msg[1024]; /* a failure of the tool itself (the library's: dpt_last_error) */

__attribute__((format(printf, 2, 3))) static dpt_status tool_err(dpt_status st, const char *fmt,
                                                                 ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tool_msg, sizeof tool_msg, fmt, ap);
  va_end(ap);
  return st;
}

/* The failure's one line; exit code 1. */
static int fail(dpt_status st) {
  fprintf(stderr, "%s: %s: %s\n", cmd_name, dpt_status_str(st),
          *tool_msg ? tool_msg : dpt_last_error());
  return 1;
}

/* A whole number in [lo, hi] into *out; 0 on success. Accepts 1e6-style values when whole. */
static int parse_u64(const char *v, uint64_t lo, uint64_t hi, uint64_t *out) {
  char *end;
  errno = 0;
  if (*v == '-' || *v == '+') return -1;
  unsigned long long n = strtoull(v, &end, 10);
  if (*end == 'e' || *end == 'E' || *end == '.') {
    const double d = strtod(v, &end);
    if (*end || !(d >= 0) || d > 1.8e19 || d != floor(d)) return -1;
    n = (unsigned long long)d;
  }
  if (end == v || *end || errno || n < lo || n > hi) return -1;
  *out = n;
  return 0;
}

static int parse_double(const char *v, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  const double d = strtod(v, &end);
  if (end == v || *end || errno || !(d >= lo && d <= hi)) return -1;
  *out = d;
  return 0;
}

static int make_dir(const char *dir) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "%s: %s: cannot create the directory: %s\n", cmd_name, dir, strerror(errno));
    return -1;
  }
  return 0;
}

/* A comma list of table sizes, each 2..2^31, at most max of them, into sizes: how many, or 0
 * for a bad list. */
static size_t parse_table_sizes(const char *tables, uint64_t *sizes, size_t max) {
  size_t count = 0;
  char *list = strdup(tables), *save = NULL;
  for (char *tok = list ? strtok_r(list, ",", &save) : NULL; tok;
       tok = strtok_r(NULL, ",", &save)) {
    uint64_t s;
    if (count == max || parse_u64(tok, 2, DPT_SHARD_MAX_TABLE, &s)) {
      count = 0;
      break;
    }
    sizes[count++] = s;
  }
  free(list);
  return count;
}

/* The output options of the converters (convert, npy), the first member of their option
 * structs so that one parser serves both. */
typedef struct shard_out {
  const char *out, *prefix, *tables;
  uint64_t shards;
} shard_out;

static int parse_prefix(void *p, const char *v) {
  ((shard_out *)p)->prefix = v;
  return !*v || strchr(v, '/') != NULL ? -1 : 0;
}

static int parse_out_shards(void *p, const char *v) {
  return parse_u64(v, 1, 512, &((shard_out *)p)->shards);
}

/* ---- convert ------------------------------------------------------------------------------- */

typedef struct convert_opts {
  shard_out so; /* first */
  const char *inputs[MAX_INPUTS];
  size_t num_inputs;
  uint64_t num_dense, num_sparse;
} convert_opts;

static int add_input(void *p, const char *v) {
  convert_opts *o = p;
  if (o->num_inputs == MAX_INPUTS) return -1;
  o->inputs[o->num_inputs++] = v;
  return 0;
}

static int parse_conv_dense(void *p, const char *v) {
  return parse_u64(v, 0, DPT_SHARD_MAX_DENSE, &((convert_opts *)p)->num_dense);
}

static int parse_conv_sparse(void *p, const char *v) {
  return parse_u64(v, 1, DPT_SHARD_MAX_SPARSE, &((convert_opts *)p)->num_sparse);
}

#define OPT_TARGET convert_opts

static const dpt_opt convert_options[] = {
    {"--input", "FILE",
     "a text file, plain or gzip-compressed (day_0.gz); '-' or none:\n"
     "stdin (repeatable, at most 256)",
     CUSTOM(add_input), .multi = 1},
    {"--out", "DIR", "the output directory (created if missing)", STRING(so.out)},
    {"--dense", "N", "dense features per line (default 13)", CUSTOM(parse_conv_dense)},
    {"--sparse", "N", "categorical features per line (default 26)", CUSTOM(parse_conv_sparse)},
    {"--table-size", "S",
     "ids per table: one size for all, or a comma list of --sparse sizes\n"
     "(default 1000000); a value's id is 1 + FNV-1a-64(bytes) mod (S-1),\n"
     "id 0 an empty field",
     STRING(so.tables)},
    {"--shards", "K", "shard files (default 1, at most 512)", CUSTOM(parse_out_shards)},
    {"--prefix", "NAME", "shard file names (default shard)", CUSTOM(parse_prefix)},
};

#undef OPT_TARGET

static const dpt_opt_cmd convert_cmd = {
    "dptrain data convert",
    "usage: dptrain data convert [--input FILE]... --out DIR [options]\n"
    "\n"
    "Converts Criteo-layout text (label, dense integers, categorical values; tab-separated)\n"
    "to interaction shards DIR/PREFIX-00000.bin ... (docs/recommendation.md). Line n (over\n"
    "all inputs) goes to shard n mod K (round-robin).\n",
    convert_options,
    sizeof convert_options / sizeof convert_options[0],
    0,
};

const dpt_opt_cmd *dpt_data_convert_options(void) {
  return &convert_cmd;
}

static int cmd_convert(int argc, char **argv) {
  cmd_name = "dptrain data convert";
  convert_opts co = {.so = {.prefix = "shard", .tables = "1000000", .shards = 1},
                     .num_dense = 13,
                     .num_sparse = 26};
  const int rc = dpt_opt_parse(&convert_cmd, &co, argc, argv, NULL, NULL);
  if (rc != DPT_OPT_KEEP_GOING) return rc;
  const char **inputs = co.inputs, *out = co.so.out, *prefix = co.so.prefix;
  const char *tables = co.so.tables;
  size_t num_inputs = co.num_inputs;
  const uint64_t num_dense = co.num_dense, num_sparse = co.num_sparse, shards = co.so.shards;
  if (!out) return dpt_opt_usage_error(&convert_cmd, "--out DIR is needed");
  if (num_inputs == 0) inputs[num_inputs++] = "-";
  /* The table sizes: one for all, or one per sparse feature. */
  uint64_t *sizes = malloc(num_sparse * sizeof *sizes);
  if (!sizes) return fail(DPT_ERR_OUT_OF_MEMORY);
  size_t count = parse_table_sizes(tables, sizes, (size_t)num_sparse);
  if (count == 1)
    for (; count < num_sparse; count++)
      sizes[count] = sizes[0];
  if (count != num_sparse) {
    free(sizes);
    return dpt_opt_usage_error(&convert_cmd,
                               "--table-size '%s': one size or %" PRIu64 " sizes, each 2..2^31",
                               tables, num_sparse);
  }
  const dpt_criteo_options o = {.num_dense = (uint32_t)num_dense,
                                .num_sparse = (uint32_t)num_sparse,
                                .table_sizes = sizes,
                                .num_shards = (size_t)shards,
                                .out_dir = out,
                                .prefix = prefix};
  uint64_t records = 0;
  const double t0 = now();
  const dpt_status st = dpt_criteo_convert(inputs, num_inputs, &o, &records);
  const double secs = now() - t0;
  free(sizes);
  if (st != DPT_OK) return fail(st);
  printf("converted %" PRIu64 " records (%" PRIu64 " dense, %" PRIu64 " sparse) from %zu input%s "
         "into %" PRIu64 " shard%s %s/%s-*.bin in %.2f s (%.0f records/s)\n",
         records, num_dense, num_sparse, num_inputs, num_inputs == 1 ? "" : "s", shards,
         shards == 1 ? "" : "s", out, prefix, secs, secs > 0 ? (double)records / secs : 0.0);
  return 0;
}

/* ---- npy ----------------------------------------------------------------------------------- */

typedef struct npy_opts {
  shard_out so; /* first */
  const char *dense, *sparse, *labels;
} npy_opts;

#define OPT_TARGET npy_opts

static const dpt_opt npy_options[] = {
    {"--dense", "FILE", "dense features, [N, D] float32 (TorchRec: day_N_dense.npy)",
     STRING(dense)},
    {"--sparse", "FILE", "categorical ids, [N, S] integers (day_N_sparse.npy)", STRING(sparse)},
    {"--labels", "FILE", "labels 0 or 1, [N] or [N, 1] (day_N_labels.npy)", STRING(labels)},
    {"--out", "DIR", "the output directory (created if missing)", STRING(so.out)},
    {"--table-size", "S",
     "ids per table: one size for all, or a comma list of S sizes\n"
     "(default 1000000); id v becomes v mod S (never negative)",
     STRING(so.tables)},
    {"--shards", "K", "shard files (default 1, at most 512)", CUSTOM(parse_out_shards)},
    {"--prefix", "NAME", "shard file names (default shard)", CUSTOM(parse_prefix)},
};

#undef OPT_TARGET

static const dpt_opt_cmd npy_cmd = {
    "dptrain data npy",
    "usage: dptrain data npy [--dense FILE] --sparse FILE --labels FILE --out DIR [options]\n"
    "\n"
    "Converts NumPy arrays, as TorchRec's Criteo preprocessing writes them, to interaction\n"
    "shards DIR/PREFIX-00000.bin ... (docs/recommendation.md). Dense values are taken as they\n"
    "are; row n goes to shard n mod K (round-robin).\n",
    npy_options,
    sizeof npy_options / sizeof npy_options[0],
    0,
};

const dpt_opt_cmd *dpt_data_npy_options(void) {
  return &npy_cmd;
}

static int cmd_npy(int argc, char **argv) {
  cmd_name = "dptrain data npy";
  npy_opts no = {.so = {.prefix = "shard", .tables = "1000000", .shards = 1}};
  const shard_out *so = &no.so;
  const int rc = dpt_opt_parse(&npy_cmd, &no, argc, argv, NULL, NULL);
  if (rc != DPT_OPT_KEEP_GOING) return rc;
  if (!no.sparse || !no.labels || !so->out)
    return dpt_opt_usage_error(&npy_cmd, "--sparse, --labels and --out are needed");
  uint64_t sizes[DPT_SHARD_MAX_SPARSE];
  const size_t count = parse_table_sizes(so->tables, sizes, DPT_SHARD_MAX_SPARSE);
  if (count == 0)
    return dpt_opt_usage_error(&npy_cmd, "--table-size '%s': sizes each 2..2^31", so->tables);
  const dpt_npy_options o = {.dense = no.dense,
                             .sparse = no.sparse,
                             .labels = no.labels,
                             .table_sizes = sizes,
                             .num_tables = count,
                             .num_shards = (size_t)so->shards,
                             .out_dir = so->out,
                             .prefix = so->prefix};
  uint64_t records = 0;
  const double t0 = now();
  const dpt_status st = dpt_npy_convert(&o, &records);
  const double secs = now() - t0;
  if (st != DPT_OK) return fail(st);
  printf("converted %" PRIu64 " rows into %" PRIu64 " shard%s %s/%s-*.bin in %.2f s "
         "(%.0f records/s)\n",
         records, so->shards, so->shards == 1 ? "" : "s", so->out, so->prefix, secs,
         secs > 0 ? (double)records / secs : 0.0);
  return 0;
}

/* ---- info ---------------------------------------------------------------------------------- */

typedef struct info_opts {
  const char *pattern;
  uint64_t rank, world, dump;
} info_opts;

static int parse_rank(void *p, const char *v) {
  return parse_u64(v, 0, 1 << 20, &((info_opts *)p)->rank);
}

static int parse_world(void *p, const char *v) {
  return parse_u64(v, 1, 1 << 20, &((info_opts *)p)->world);
}

static int parse_dump(void *p, const char *v) {
  return parse_u64(v, 0, 1 << 20, &((info_opts *)p)->dump);
}

static const dpt_opt info_options[] = {
    {"--rank", "R", "the rank whose share is reported (default 0)", CUSTOM(parse_rank)},
    {"--world", "W", "ranks reading the shards (default 1)", CUSTOM(parse_world)},
    {"--dump", "N", "print rank R's first N records (default 0)", CUSTOM(parse_dump)},
};

static const dpt_opt_cmd info_cmd = {
    "dptrain data info",
    "usage: dptrain data info PATTERN [--rank R --world W] [--dump N]\n"
    "\n"
    "Prints the shards a glob pattern matches (quote it), their layout and records, and\n"
    "which rank of W reads each; --dump prints rank R's first N records, one a line:\n"
    "label, then the dense features, '|', the sparse ids.\n",
    info_options,
    sizeof info_options / sizeof info_options[0],
    0,
};

const dpt_opt_cmd *dpt_data_info_options(void) {
  return &info_cmd;
}

static int take_pattern(void *p, const char *arg) {
  info_opts *o = p;
  if (o->pattern) return -1;
  o->pattern = arg;
  return 0;
}

/* Each shard and the ranks that read it: shard s is rank s mod world's, or with fewer shards
 * than ranks, the ranks whose record ranges it holds. */
static void print_shard_ranks(const dpt_interactions *d, uint64_t world) {
  const size_t shards = dpt_interactions_num_shards(d);
  uint64_t start = 0, rank_end = dpt_interactions_rank_records(d, 0);
  int q = 0;
  for (size_t s = 0; s < shards; s++) {
    const uint64_t n = dpt_interactions_shard_records(d, s);
    printf("shard %zu: %s, %" PRIu64 " records, ", s, dpt_interactions_shard_path(d, s), n);
    if (shards >= world) {
      printf("rank %zu\n", s % (size_t)world);
      continue;
    }
    while (rank_end <= start && q + 1 < (int)world) /* the rank holding record `start` */
      rank_end += dpt_interactions_rank_records(d, ++q);
    const int first = q;
    while (rank_end < start + n && q + 1 < (int)world)
      rank_end += dpt_interactions_rank_records(d, ++q);
    if (first == q)
      printf("rank %d\n", q);
    else
      printf("ranks %d-%d\n", first, q);
    start += n;
  }
}

static int cmd_info(int argc, char **argv) {
  cmd_name = "dptrain data info";
  info_opts io = {.world = 1};
  const int rc = dpt_opt_parse(&info_cmd, &io, argc, argv, NULL, take_pattern);
  if (rc != DPT_OPT_KEEP_GOING) return rc;
  const char *pattern = io.pattern;
  const uint64_t rank = io.rank, world = io.world, dump = io.dump;
  if (!pattern) return dpt_opt_usage_error(&info_cmd, "a shard pattern is needed");
  if (rank >= world)
    return dpt_opt_usage_error(&info_cmd, "--rank %" PRIu64 " of %" PRIu64, rank, world);
  dpt_interactions *d = NULL;
  const dpt_status st = dpt_interactions_open(pattern, (int)rank, (int)world, &d);
  if (st != DPT_OK) return fail(st);
  const uint32_t nd = dpt_interactions_num_dense(d), ns = dpt_interactions_num_sparse(d);
  printf("shards: %zu, records: %" PRIu64 ", %u dense, %u sparse, table sizes:",
         dpt_interactions_num_shards(d), dpt_interactions_total_records(d), (unsigned)nd,
         (unsigned)ns);
  for (uint32_t j = 0; j < ns; j++)
    printf("%s%" PRIu64, j ? "," : " ", dpt_interactions_table_sizes(d)[j]);
  printf("\n");
  print_shard_ranks(d, world);
  const size_t n = dpt_interactions_local_records(d);
  uint64_t pos = 0;
  for (size_t i = 0; i < n; i++)
    pos += dpt_interactions_labels(d)[i];
  printf("rank %" PRIu64 " of %" PRIu64 ": %zu shards, %zu records, %.4f positive\n", rank, world,
         dpt_interactions_local_shards(d), n, n ? (double)pos / (double)n : 0.0);
  for (size_t i = 0; i < n && i < dump; i++) {
    printf("%d", (int)dpt_interactions_label(d, i));
    for (uint32_t j = 0; j < nd; j++)
      printf(" %.9g", (double)dpt_interactions_dense(d, i)[j]);
    printf(" |");
    for (uint32_t j = 0; j < ns; j++)
      printf(" %d", (int)dpt_interactions_sparse(d, i)[j]);
    printf("\n");
  }
  dpt_interactions_destroy(d);
  return 0;
}

/* ---- synth --------------------------------------------------------------------------------- */

typedef struct synth_opts {
  dpt_synth_config c;
  const char *out;
  uint64_t samples, shards;
} synth_opts;

static int parse_samples(void *p, const char *v) {
  return parse_u64(v, 1, UINT64_C(1) << 40, &((synth_opts *)p)->samples);
}

static int parse_synth_shards(void *p, const char *v) {
  return parse_u64(v, 1, 512, &((synth_opts *)p)->shards);
}

static int parse_rows(void *p, const char *v) {
  return parse_u64(v, 1, DPT_SHARD_MAX_TABLE, &((synth_opts *)p)->c.rows);
}

/* A whole number in [lo, hi] into a uint32_t. */
static int parse_u32(const char *v, uint64_t lo, uint64_t hi, uint32_t *out) {
  uint64_t u = 0;
  const int bad = parse_u64(v, lo, hi, &u);
  *out = (uint32_t)u;
  return bad;
}

static int parse_tables(void *p, const char *v) {
  return parse_u32(v, 2, 1024, &((synth_opts *)p)->c.tables);
}

static int parse_dim(void *p, const char *v) {
  return parse_u32(v, 1, 1024, &((synth_opts *)p)->c.dim);
}

static int parse_synth_dense(void *p, const char *v) {
  return parse_u32(v, 0, DPT_SHARD_MAX_DENSE, &((synth_opts *)p)->c.num_dense);
}

static int parse_zipf(void *p, const char *v) {
  return parse_double(v, 1e-6, 100, &((synth_opts *)p)->c.zipf);
}

static int parse_signal(void *p, const char *v) {
  return parse_double(v, 0, 100, &((synth_opts *)p)->c.signal);
}

static int parse_bias(void *p, const char *v) {
  return parse_double(v, -100, 100, &((synth_opts *)p)->c.bias);
}

static int parse_seed(void *p, const char *v) {
  return parse_u64(v, 0, UINT64_MAX, &((synth_opts *)p)->c.seed);
}

#define OPT_TARGET synth_opts

static const dpt_opt synth_options[] = {
    {"--out", "DIR", "the output directory (created if missing)", STRING(out)},
    {"--samples", "N", "records (default 100000)", CUSTOM(parse_samples)},
    {"--shards", "K", "shard files (default 4, at most 512)", CUSTOM(parse_synth_shards)},
    {"--rows", "N", "ids per table (default 100000; 1 .. 2^31)", CUSTOM(parse_rows)},
    {"--tables", "T", "sparse features, each its own table (default 8, >= 2)",
     CUSTOM(parse_tables)},
    {"--dim", "d", "latent factors per id (default 4)", CUSTOM(parse_dim)},
    {"--dense", "N", "dense features (default 4)", CUSTOM(parse_synth_dense)},
    {"--zipf", "S", "popularity exponent: P(id k) ~ (k+1)^-S (default 1.05)", CUSTOM(parse_zipf)},
    {"--signal", "X", "standard deviation of the factors' part of the logit (default 2)",
     CUSTOM(parse_signal)},
    {"--bias", "B", "the logit's constant (default -1)", CUSTOM(parse_bias)},
    {"--seed", "S", "(default 0)", CUSTOM(parse_seed)},
};

#undef OPT_TARGET

static const dpt_opt_cmd synth_cmd = {
    "dptrain data synth",
    "usage: dptrain data synth --out DIR [options]\n"
    "\n"
    "Synthetic clicks from planted latent factors (docs/recommendation.md): shards\n"
    "DIR/synth-00000.bin ..., each with DIR/synth-00000.prob (every record's true click\n"
    "probability, float32 little-endian, in record order); record i goes to shard i mod K.\n"
    "Reports the planted model's AUC and logloss: the best any model can reach.\n",
    synth_options,
    sizeof synth_options / sizeof synth_options[0],
    0,
};

const dpt_opt_cmd *dpt_data_synth_options(void) {
  return &synth_cmd;
}

static int cmd_synth(int argc, char **argv) {
  cmd_name = "dptrain data synth";
  synth_opts so = {.samples = 100000, .shards = 4};
  dpt_synth_default(&so.c);
  const int rc = dpt_opt_parse(&synth_cmd, &so, argc, argv, NULL, NULL);
  if (rc != DPT_OPT_KEEP_GOING) return rc;
  const dpt_synth_config c = so.c;
  const char *out = so.out;
  const uint64_t samples = so.samples, shards = so.shards;
  if (!out) return dpt_opt_usage_error(&synth_cmd, "--out DIR is needed");
  if ((size_t)c.tables * c.dim > 4096)
    return dpt_opt_usage_error(&synth_cmd, "--tables x --dim is at most 4096");
  if (make_dir(out)) return 1;
  dpt_shard_writer **w = calloc(shards, sizeof *w);
  FILE **pf = calloc(shards, sizeof *pf);
  uint64_t *sizes = malloc(c.tables * sizeof *sizes);
  float *dense = malloc((c.num_dense + 1) * sizeof *dense);
  int32_t *sparse = malloc(c.tables * sizeof *sparse);
  float *probs = malloc(samples * sizeof *probs), *labels = malloc(samples * sizeof *labels);
  dpt_status st = DPT_OK;
  if (!w || !pf || !sizes || !dense || !sparse || !probs || !labels)
    st = tool_err(DPT_ERR_OUT_OF_MEMORY, "%" PRIu64 " samples", samples);
  for (uint32_t t = 0; st == DPT_OK && t < c.tables; t++)
    sizes[t] = c.rows;
  char path[4096];
  for (uint64_t s = 0; st == DPT_OK && s < shards; s++) {
    snprintf(path, sizeof path, "%s/synth-%05" PRIu64 ".bin", out, s);
    st = dpt_shard_writer_open(path, c.num_dense, c.tables, sizes, &w[s]);
    snprintf(path, sizeof path, "%s/synth-%05" PRIu64 ".prob", out, s);
    if (st == DPT_OK && !(pf[s] = fopen(path, "wb")))
      st = tool_err(DPT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
  }
  const double t0 = now();
  for (uint64_t i = 0; st == DPT_OK && i < samples; i++) {
    st = dpt_synth_record(&c, i, dense, sparse, &labels[i], &probs[i]);
    if (st == DPT_OK) st = dpt_shard_writer_add(w[i % shards], labels[i], dense, sparse);
    unsigned char le[4];
    uint32_t bits;
    memcpy(&bits, &probs[i], 4);
    for (int k = 0; k < 4; k++)
      le[k] = (unsigned char)(bits >> (8 * k));
    if (st == DPT_OK && fwrite(le, 1, 4, pf[i % shards]) != 4)
      st = tool_err(DPT_ERR_IO, "%s/synth-%05" PRIu64 ".prob: write failed", out, i % shards);
  }
  const double secs = now() - t0;
  for (uint64_t s = 0; w && s < shards; s++) {
    if (st == DPT_OK)
      st = dpt_shard_writer_close(w[s]);
    else
      dpt_shard_writer_abort(w[s]);
    if (pf[s] && fclose(pf[s]) != 0 && st == DPT_OK)
      st = tool_err(DPT_ERR_IO, "%s: a .prob file failed to close", out);
  }
  double auc = NAN, ll = NAN, base = NAN, rate = 0;
  if (st == DPT_OK) {
    for (uint64_t i = 0; i < samples; i++)
      rate += labels[i];
    rate /= (double)samples;
    st = dpt_logloss(probs, labels, samples, &ll);
  }
  if (st == DPT_OK) st = dpt_auc(probs, labels, samples, &auc);
  if (rate > 0 && rate < 1) base = -(rate * log(rate) + (1 - rate) * log1p(-rate));
  free(w);
  free(pf);
  free(sizes);
  free(dense);
  free(sparse);
  free(probs);
  free(labels);
  if (st != DPT_OK) return fail(st);
  printf("synth: %" PRIu64 " records, %u tables of %" PRIu64 " rows, dim %u, %u dense, zipf %g, "
         "seed %" PRIu64 " into %" PRIu64 " shards %s/synth-*.bin in %.2f s (%.0f records/s)\n",
         samples, (unsigned)c.tables, c.rows, (unsigned)c.dim, (unsigned)c.num_dense, c.zipf,
         c.seed, shards, out, secs, secs > 0 ? (double)samples / secs : 0.0);
  printf("positive rate: %.4f\n", rate);
  printf("planted model: AUC %.4f, logloss %.4f (constant predictor: logloss %.4f)\n", auc, ll,
         base);
  return 0;
}

/* ---- the command --------------------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f, "usage: dptrain data convert|npy|synth|debian|info|images [options]\n"
             "\n"
             "  convert   Criteo-layout text (plain or gzip) to interaction shards\n"
             "  npy       NumPy arrays (TorchRec's Criteo preprocessing) to interaction shards\n"
             "  synth     synthetic clicks from planted factors, with the planted model's AUC\n"
             "  debian    the Debian package dependency graph as link prediction shards\n"
             "  info      what shards hold, which rank reads which, a few records\n"
             "  images    an image folder (a class per subfolder) to a tensor data set\n"
             "(each takes --help; docs/recommendation.md)\n");
}

int dpt_cmd_data(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "convert")) return cmd_convert(argc - 1, argv + 1);
  if (!strcmp(argv[1], "npy")) return cmd_npy(argc - 1, argv + 1);
  if (!strcmp(argv[1], "synth")) return cmd_synth(argc - 1, argv + 1);
  if (!strcmp(argv[1], "debian")) return dpt_cmd_data_debian(argc - 1, argv + 1);
  if (!strcmp(argv[1], "images")) return dpt_cmd_data_images(argc - 1, argv + 1);
  if (!strcmp(argv[1], "info")) return cmd_info(argc - 1, argv + 1);
  fprintf(stderr, "dptrain data: unknown subcommand '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
