/* `dptrain data debian`: the Debian package dependency graph as link prediction shards
 * (docs/recommendation.md, *Data tools*). Reads apt's package stanzas (`apt-cache dumpavail`),
 * takes each Depends and Recommends clause's first alternative as an edge package -> target,
 * splits the edges into training and validation by a seeded hash of their names, samples
 * uniform negatives, and writes the ranking set recall@10 is computed on. */
#define _POSIX_C_SOURCE 200809L /* getline, strdup */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dptrain/advanced.h"
#include "tools/commands.h"
#include "tools/options.h"
#include "tools/prep/shards.h"

/* ---- a small keyed generator (splitmix64) --------------------------------------------------- */

static uint64_t mix64(uint64_t x) {
  x += UINT64_C(0x9e3779b97f4a7c15);
  x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
  return x ^ (x >> 31);
}

typedef struct gen {
  uint64_t s;
} gen;

static gen gen_key(uint64_t seed, uint64_t domain, uint64_t a) {
  return (gen){mix64(mix64(seed ^ domain) ^ a)};
}

static uint64_t gen_below(gen *g, uint64_t n) {
  g->s += UINT64_C(0x9e3779b97f4a7c15);
  uint64_t z = g->s;
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  z ^= z >> 31;
  return (uint64_t)(((double)(z >> 11) * 0x1.0p-53) * (double)n); /* n < 2^31: bias < 2^-22 */
}

static uint64_t fnv1a(uint64_t h, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= UINT64_C(0x100000001b3);
  }
  return h;
}

#define FNV_OFFSET UINT64_C(0xcbf29ce484222325)
#define DOM_SPLIT  UINT64_C(0x53504c4954)     /* "SPLIT" */
#define DOM_NEG    UINT64_C(0x4e45475452)     /* "NEGTR" */
#define DOM_NEGV   UINT64_C(0x4e45475641)     /* "NEGVA" */
#define DOM_RANK   UINT64_C(0x52414e4b494e47) /* "RANKING" */

/* ---- names: interned strings ---------------------------------------------------------------- */

typedef struct names {
  char **s;
  uint8_t *defined; /* a stanza's Package: names it */
  size_t n, cap;
  uint32_t *slot; /* open addressing: index + 1, 0 empty */
  size_t slots;
} names;

static int names_grow(names *t) {
  const size_t slots = t->slots ? 2 * t->slots : 1024;
  uint32_t *slot = calloc(slots, sizeof *slot);
  if (!slot) return -1;
  for (size_t i = 0; i < t->n; i++) {
    size_t h = (size_t)fnv1a(FNV_OFFSET, t->s[i], strlen(t->s[i])) & (slots - 1);
    while (slot[h])
      h = (h + 1) & (slots - 1);
    slot[h] = (uint32_t)i + 1;
  }
  free(t->slot);
  t->slot = slot;
  t->slots = slots;
  return 0;
}

/* The index of name[0..len), added when new; -1 when out of memory. */
static long names_intern(names *t, const char *name, size_t len) {
  if (2 * (t->n + 1) > t->slots && names_grow(t)) return -1;
  size_t h = (size_t)fnv1a(FNV_OFFSET, name, len) & (t->slots - 1);
  for (; t->slot[h]; h = (h + 1) & (t->slots - 1)) {
    const char *s = t->s[t->slot[h] - 1];
    if (strlen(s) == len && !memcmp(s, name, len)) return (long)t->slot[h] - 1;
  }
  if (t->n == t->cap) {
    const size_t cap = t->cap ? 2 * t->cap : 1024;
    char **s = realloc(t->s, cap * sizeof *s);
    if (!s) return -1;
    t->s = s;
    uint8_t *d = realloc(t->defined, cap);
    if (!d) return -1;
    t->defined = d;
    t->cap = cap;
  }
  char *copy = malloc(len + 1);
  if (!copy) return -1;
  memcpy(copy, name, len);
  copy[len] = 0;
  t->s[t->n] = copy;
  t->defined[t->n] = 0;
  t->slot[h] = (uint32_t)t->n + 1;
  return (long)t->n++;
}

static void names_free(names *t) {
  for (size_t i = 0; i < t->n; i++)
    free(t->s[i]);
  free(t->s);
  free(t->defined);
  free(t->slot);
}

/* ---- parsing the stanzas -------------------------------------------------------------------- */

typedef struct graph {
  names nm;
  uint64_t *raw; /* (source name << 32 | target name) */
  size_t nraw, capraw;
  uint64_t stanzas, clauses;
} graph;

static int add_raw(graph *g, long src, long dst) {
  if (g->nraw == g->capraw) {
    const size_t cap = g->capraw ? 2 * g->capraw : 4096;
    uint64_t *r = realloc(g->raw, cap * sizeof *r);
    if (!r) return -1;
    g->raw = r;
    g->capraw = cap;
  }
  g->raw[g->nraw++] = (uint64_t)src << 32 | (uint64_t)dst;
  return 0;
}

/* Each clause of a Depends/Recommends value: its first alternative's name, without version,
 * architecture qualifier or restriction lists. */
static int add_clauses(graph *g, long src, const char *v) {
  while (*v) {
    const char *end = strchr(v, ',');
    if (!end) end = v + strlen(v);
    const char *p = v;
    while (p < end && (*p == ' ' || *p == '\t'))
      p++;
    const char *q = p;
    while (q < end && !strchr(" \t(|[<:", *q))
      q++;
    if (q > p) {
      const long dst = names_intern(&g->nm, p, (size_t)(q - p));
      if (dst < 0 || add_raw(g, src, dst)) return -1;
      g->clauses++;
    }
    v = *end ? end + 1 : end;
  }
  return 0;
}

/* Reads stanzas: "Package:" names one, "Depends:"/"Recommends:" (with continuation lines)
 * give its edges. -1 on out of memory or a read error (message printed). */
static int parse_stanzas(graph *g, FILE *f, const char *name) {
  char *line = NULL, *deps = NULL;
  size_t cap = 0, dlen = 0;
  ssize_t len;
  long pkg = -1;
  int in_deps = 0, rc = 0;
  for (;;) {
    len = getline(&line, &cap, f);
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
      line[--len] = 0;
    if (len <= 0) { /* the stanza ends: a blank line or the end of input */
      if (pkg >= 0 && deps && add_clauses(g, pkg, deps)) {
        rc = -1;
        break;
      }
      if (pkg >= 0) g->stanzas++;
      pkg = -1;
      dlen = 0;
      if (deps) deps[0] = 0;
      in_deps = 0;
      if (len < 0) break;
      continue;
    }
    const int cont = line[0] == ' ' || line[0] == '\t';
    const char *v = NULL;
    if (cont) {
      if (in_deps) v = line;
    } else {
      in_deps = 0;
      if (!strncmp(line, "Package:", 8)) {
        const char *p = line + 8;
        while (*p == ' ')
          p++;
        size_t n = strcspn(p, " \t");
        if (n && (pkg = names_intern(&g->nm, p, n)) < 0) {
          rc = -1;
          break;
        }
        if (n) g->nm.defined[pkg] = 1;
      } else if (!strncmp(line, "Depends:", 8) || !strncmp(line, "Recommends:", 11)) {
        in_deps = 1;
        v = strchr(line, ':') + 1;
      }
    }
    if (v) { /* a new field starts a new clause; a continuation line goes on the last one */
      const size_t add = strlen(v) + 1;
      char *d = realloc(deps, dlen + add + 1);
      if (!d) {
        rc = -1;
        break;
      }
      deps = d;
      dlen += (size_t)snprintf(deps + dlen, add + 1, "%s%s", dlen ? (cont ? " " : ",") : "", v);
    }
  }
  if (rc == 0 && ferror(f)) {
    fprintf(stderr, "dptrain data debian: %s: read failed\n", name);
    rc = -2;
  } else if (rc == -1) {
    fprintf(stderr, "dptrain data debian: out of memory reading %s\n", name);
  }
  free(line);
  free(deps);
  return rc;
}

/* ---- the graph ------------------------------------------------------------------------------ */

static int reported; /* the failure's line is printed already */

static int cmp_u64(const void *a, const void *b) {
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static const char **sort_names; /* for cmp_by_name */
static int cmp_by_name(const void *a, const void *b) {
  return strcmp(sort_names[*(const uint32_t *)a], sort_names[*(const uint32_t *)b]);
}

static int is_edge(const uint64_t *edges, size_t n, uint32_t u, uint32_t v) {
  const uint64_t key = (uint64_t)u << 32 | v;
  return bsearch(&key, edges, n, sizeof key, cmp_u64) != NULL;
}

typedef struct opts {
  const char *packages, *out;
  uint64_t negatives, rank_negatives, shards, seed;
  double val_fraction;
  int dense_one; /* --dense-one: one dense feature, 1.0 in every record */
} opts;

typedef struct writers {
  dpt_shard_writer **w;
  size_t k;
  uint64_t records;
  int dense_one;
} writers;

static dpt_status writers_open(writers *ws, const opts *o, const char *prefix, uint64_t n) {
  ws->k = (size_t)o->shards;
  ws->dense_one = o->dense_one;
  ws->w = calloc(ws->k, sizeof *ws->w);
  if (!ws->w) return DPT_ERR_OUT_OF_MEMORY;
  const uint64_t sizes[2] = {n, n};
  char path[4096];
  for (size_t s = 0; s < ws->k; s++) {
    snprintf(path, sizeof path, "%s/%s-%05zu.bin", o->out, prefix, s);
    const dpt_status st = dpt_shard_writer_open(path, o->dense_one ? 1 : 0, 2, sizes, &ws->w[s]);
    if (st != DPT_OK) return st;
  }
  return DPT_OK;
}

static dpt_status writers_add(writers *ws, size_t shard, uint32_t u, uint32_t v, int label) {
  const int32_t sp[2] = {(int32_t)u, (int32_t)v};
  const float one = 1.0f;
  ws->records++;
  return dpt_shard_writer_add(ws->w[shard % ws->k], (float)label, ws->dense_one ? &one : NULL, sp);
}

static dpt_status writers_close(writers *ws, dpt_status st) {
  for (size_t s = 0; ws->w && s < ws->k; s++) {
    if (st == DPT_OK)
      st = dpt_shard_writer_close(ws->w[s]);
    else
      dpt_shard_writer_abort(ws->w[s]);
  }
  free(ws->w);
  ws->w = NULL;
  return st;
}

/* Up to `want` negatives for source u: uniform over the n packages, never u, never a real
 * edge of u, and (distinct) never one already in picked[0..have). Returns the count. */
static size_t draw_negatives(gen *r, const uint64_t *edges, size_t ne, uint32_t n, uint32_t u,
                             uint32_t *picked, size_t have, size_t want, int distinct) {
  size_t got = have;
  for (size_t tries = 0; got < have + want && tries < 20 * want + 64; tries++) {
    const uint32_t c = (uint32_t)gen_below(r, n);
    if (c == u || is_edge(edges, ne, u, c)) continue;
    int dup = 0;
    for (size_t k = have; distinct && k < got && !dup; k++)
      dup = picked[k] == c;
    if (!dup) picked[got++] = c;
  }
  return got - have;
}

static int parse_opt_u64(const char *v, uint64_t lo, uint64_t hi, uint64_t *out) {
  char *end;
  errno = 0;
  if (*v == '-' || *v == '+') return -1;
  const unsigned long long n = strtoull(v, &end, 10);
  if (end == v || *end || errno || n < lo || n > hi) return -1;
  *out = n;
  return 0;
}

static int parse_negatives(void *p, const char *v) {
  return parse_opt_u64(v, 0, 1000, &((opts *)p)->negatives);
}

static int parse_rank_negatives(void *p, const char *v) {
  return parse_opt_u64(v, 1, 100000, &((opts *)p)->rank_negatives);
}

static int parse_shards(void *p, const char *v) {
  return parse_opt_u64(v, 1, 512, &((opts *)p)->shards);
}

static int parse_seed(void *p, const char *v) {
  return parse_opt_u64(v, 0, UINT64_MAX, &((opts *)p)->seed);
}

static int parse_val_fraction(void *p, const char *v) {
  opts *o = p;
  char *end;
  o->val_fraction = strtod(v, &end);
  return end == v || *end || !(o->val_fraction >= 0 && o->val_fraction < 1) ? -1 : 0;
}

#define OPT_TARGET opts

static const dpt_opt options[] = {
    {"--packages", "FILE", "apt's package stanzas ('-' or none: stdin)", STRING(packages)},
    {"--out", "DIR", "the output directory (created if missing)", STRING(out)},
    {"--negatives", "K", "negatives per positive in train and val (default 4)",
     CUSTOM(parse_negatives)},
    {"--val-fraction", "F", "share of the edges held out, by a seeded hash (default 0.1)",
     CUSTOM(parse_val_fraction)},
    {"--rank-negatives", "N", "negatives per validation source in rank-* (default 100)",
     CUSTOM(parse_rank_negatives)},
    {"--shards", "K", "files per split (default 1, at most 512)", CUSTOM(parse_shards)},
    {"--seed", "S", "(default 0)", CUSTOM(parse_seed)},
    {"--dense-one", NULL,
     "one dense feature, 1.0 in every record: DLRM's bottom MLP\n"
     "needs a dense input (dptrain train --model dlrm)",
     FLAG(dense_one, 1)},
};

static const dpt_opt_cmd debian_cmd = {
    "dptrain data debian",
    "usage: apt-cache dumpavail | dptrain data debian --out DIR [options]\n"
    "\n"
    "The Debian package dependency graph as link prediction (docs/recommendation.md):\n"
    "package p -> q for the first alternative q of each Depends and Recommends clause\n"
    "(versions, architecture qualifiers dropped; q must have a stanza of its own).\n"
    "Records: sparse (p, candidate), no dense feature (--dense-one: one, 1.0), label 1\n"
    "for an edge, 0 for a uniformly drawn non-edge. Writes DIR/train-*.bin, DIR/val-*.bin,\n"
    "DIR/rank-*.bin (per validation source: its held-out targets and --rank-negatives\n"
    "non-edges, for recall@10) and DIR/packages.txt (line i: package id i).\n",
    options,
    sizeof options / sizeof options[0],
    0,
};

const dpt_opt_cmd *dpt_data_debian_options(void) {
  return &debian_cmd;
}

static int parse_options(opts *o, int argc, char **argv) {
  const int rc = dpt_opt_parse(&debian_cmd, o, argc, argv, NULL, NULL);
  if (rc != DPT_OPT_KEEP_GOING) return rc;
  if (!o->out) return dpt_opt_usage_error(&debian_cmd, "--out DIR is needed");
  return -1;
}

/* Everything after parsing: ids, edges, split, shards, the ranking set, the baseline. */
static dpt_status build(const opts *o, graph *g) {
  /* Package ids: the defined names sorted bytewise. */
  uint32_t *order = malloc((g->nm.n + 1) * sizeof *order);
  int64_t *id_of = malloc((g->nm.n + 1) * sizeof *id_of);
  uint64_t *edges = NULL, *val = NULL, *train = NULL;
  uint32_t *indeg = NULL, *picked = NULL;
  float *scores = NULL, *labels = NULL, *vscores = NULL, *vlabels = NULL;
  size_t nv = 0; /* validation records scored by the baseline */
  int64_t *groups = NULL;
  dpt_status st = DPT_OK;
  writers tw = {0}, vw = {0}, rw = {0};
  if (!order || !id_of) {
    st = DPT_ERR_OUT_OF_MEMORY;
    goto done;
  }
  uint32_t n = 0;
  for (size_t i = 0; i < g->nm.n; i++)
    if (g->nm.defined[i]) order[n++] = (uint32_t)i;
  if (n < 2) {
    fprintf(stderr, "dptrain data debian: %s: %u package stanzas, need at least 2\n",
            o->packages ? o->packages : "<stdin>", (unsigned)n);
    st = DPT_ERR_BAD_FORMAT;
    reported = 1;
    goto done;
  }
  sort_names = (const char **)g->nm.s;
  qsort(order, n, sizeof *order, cmp_by_name);
  for (size_t i = 0; i < g->nm.n; i++)
    id_of[i] = -1;
  for (uint32_t k = 0; k < n; k++)
    id_of[order[k]] = k;
  /* Edges in ids, unique, no self edge, both ends defined. */
  size_t ne = 0, undefined = 0, self = 0;
  edges = malloc((g->nraw + 1) * sizeof *edges);
  if (!edges) {
    st = DPT_ERR_OUT_OF_MEMORY;
    goto done;
  }
  for (size_t i = 0; i < g->nraw; i++) {
    const int64_t u = id_of[g->raw[i] >> 32], v = id_of[g->raw[i] & 0xffffffffu];
    if (v < 0)
      undefined++;
    else if (u == v)
      self++;
    else
      edges[ne++] = (uint64_t)u << 32 | (uint64_t)v;
  }
  qsort(edges, ne, sizeof *edges, cmp_u64);
  size_t w = 0;
  for (size_t i = 0; i < ne; i++)
    if (!w || edges[i] != edges[w - 1]) edges[w++] = edges[i];
  const size_t dups = ne - w;
  ne = w;
  /* The split: a seeded hash of "source\0target". */
  train = malloc((ne + 1) * sizeof *train);
  val = malloc((ne + 1) * sizeof *val);
  indeg = calloc(n, sizeof *indeg);
  if (!train || !val || !indeg) {
    st = DPT_ERR_OUT_OF_MEMORY;
    goto done;
  }
  size_t ntrain = 0, nval = 0;
  for (size_t i = 0; i < ne; i++) {
    const char *su = g->nm.s[order[edges[i] >> 32]], *sv = g->nm.s[order[edges[i] & 0xffffffffu]];
    uint64_t h = fnv1a(FNV_OFFSET, su, strlen(su) + 1); /* with the NUL between */
    h = fnv1a(h, sv, strlen(sv));
    const double x = (double)(mix64(h ^ mix64(o->seed ^ DOM_SPLIT)) >> 11) * 0x1.0p-53;
    if (x < o->val_fraction)
      val[nval++] = edges[i];
    else {
      train[ntrain++] = edges[i];
      indeg[edges[i] & 0xffffffffu]++;
    }
  }
  /* packages.txt */
  char path[4096];
  snprintf(path, sizeof path, "%s/packages.txt", o->out);
  FILE *pf = fopen(path, "w");
  if (!pf) {
    fprintf(stderr, "dptrain data debian: %s: cannot create: %s\n", path, strerror(errno));
    st = DPT_ERR_IO;
    reported = 1;
    goto done;
  }
  for (uint32_t k = 0; k < n; k++)
    fprintf(pf, "%s\n", g->nm.s[order[k]]);
  if (fclose(pf) != 0) {
    fprintf(stderr, "dptrain data debian: %s: write failed\n", path);
    st = DPT_ERR_IO;
    reported = 1;
    goto done;
  }
  /* train and val: each positive, then its negatives; the e-th positive's records go to shard
   * e mod K. */
  picked = malloc((o->negatives + o->rank_negatives + 1) * sizeof *picked);
  vscores = malloc((nval * (o->negatives + 1) + 1) * sizeof *vscores);
  vlabels = malloc((nval * (o->negatives + 1) + 1) * sizeof *vlabels);
  if (!picked || !vscores || !vlabels) {
    st = DPT_ERR_OUT_OF_MEMORY;
    goto done;
  }
  uint64_t short_neg = 0;
  if ((st = writers_open(&tw, o, "train", n)) != DPT_OK) goto done;
  if ((st = writers_open(&vw, o, "val", n)) != DPT_OK) goto done;
  for (int split = 0; split < 2 && st == DPT_OK; split++) {
    const uint64_t *pos = split ? val : train;
    const size_t np = split ? nval : ntrain;
    writers *ws = split ? &vw : &tw;
    for (size_t e = 0; e < np && st == DPT_OK; e++) {
      const uint32_t u = (uint32_t)(pos[e] >> 32), v = (uint32_t)(pos[e] & 0xffffffffu);
      st = writers_add(ws, e, u, v, 1);
      if (split) {
        vscores[nv] = (float)indeg[v];
        vlabels[nv++] = 1;
      }
      gen r = gen_key(o->seed, split ? DOM_NEGV : DOM_NEG, e);
      const size_t got = draw_negatives(&r, edges, ne, n, u, picked, 0, o->negatives, 0);
      short_neg += o->negatives - got;
      for (size_t k = 0; k < got && st == DPT_OK; k++) {
        st = writers_add(ws, e, u, picked[k], 0);
        if (split) {
          vscores[nv] = (float)indeg[picked[k]];
          vlabels[nv++] = 0;
        }
      }
    }
  }
  st = writers_close(&tw, st);
  st = writers_close(&vw, st);
  if (st != DPT_OK) goto done;
  /* The ranking set: per validation source (in id order), its held-out targets, then
   * --rank-negatives distinct non-edges; the g-th source's records go to rank shard g mod K. */
  const size_t cap = nval + (nval + 1) * (size_t)o->rank_negatives;
  scores = malloc(cap * sizeof *scores);
  labels = malloc(cap * sizeof *labels);
  groups = malloc(cap * sizeof *groups);
  if (!scores || !labels || !groups) {
    st = DPT_ERR_OUT_OF_MEMORY;
    goto done;
  }
  if ((st = writers_open(&rw, o, "rank", n)) != DPT_OK) goto done;
  size_t nr = 0, sources = 0, short_rank = 0;
  for (size_t i = 0; i < nval && st == DPT_OK;) {
    const uint32_t u = (uint32_t)(val[i] >> 32);
    size_t j = i;
    for (; j < nval && (uint32_t)(val[j] >> 32) == u && st == DPT_OK; j++) {
      const uint32_t v = (uint32_t)(val[j] & 0xffffffffu);
      st = writers_add(&rw, sources, u, v, 1);
      scores[nr] = (float)indeg[v];
      labels[nr] = 1;
      groups[nr++] = u;
    }
    gen r = gen_key(o->seed, DOM_RANK, u);
    const size_t got = draw_negatives(&r, edges, ne, n, u, picked, 0, o->rank_negatives, 1);
    short_rank += o->rank_negatives - got;
    for (size_t k = 0; k < got && st == DPT_OK; k++) {
      st = writers_add(&rw, sources, u, picked[k], 0);
      scores[nr] = (float)indeg[picked[k]];
      labels[nr] = 0;
      groups[nr++] = u;
    }
    sources++;
    i = j;
  }
  st = writers_close(&rw, st);
  if (st != DPT_OK) goto done;
  printf("packages: %u (stanzas %" PRIu64 "), dependency clauses: %" PRIu64 "\n", (unsigned)n,
         g->stanzas, g->clauses);
  printf("edges: %zu (dropped: %zu to names without a stanza, %zu self, %zu repeated)\n", ne,
         undefined, self, dups);
  printf("split: %zu train, %zu validation edges (val fraction %g, seed %" PRIu64 ")\n", ntrain,
         nval, o->val_fraction, o->seed);
  printf("records: %" PRIu64 " train, %" PRIu64 " val (%" PRIu64 " negatives per positive%s), "
         "%" PRIu64 " ranking for %zu validation sources (%" PRIu64 " negatives each%s) "
         "in %" PRIu64 " shard%s per split, %s\n",
         tw.records, vw.records, o->negatives, short_neg ? ", some short" : "", rw.records, sources,
         o->rank_negatives, short_rank ? ", some short" : "", o->shards, o->shards == 1 ? "" : "s",
         o->out);
  double recall = NAN, auc = NAN;
  if (nr && dpt_recall_at_k(scores, labels, groups, nr, 10, &recall) == DPT_OK) {
    /* the validation AUC only where val-* holds both classes */
    if (dpt_auc(vscores, vlabels, nv, &auc) != DPT_OK) dpt_clear_error();
    printf("popularity baseline (score: the candidate's training in-degree): recall@10 %.4f, "
           "validation AUC %.4f\n",
           recall, auc);
  }
done:
  writers_close(&tw, DPT_ERR_IO);
  writers_close(&vw, DPT_ERR_IO);
  writers_close(&rw, DPT_ERR_IO);
  free(order);
  free(id_of);
  free(edges);
  free(train);
  free(val);
  free(indeg);
  free(picked);
  free(scores);
  free(labels);
  free(vscores);
  free(vlabels);
  free(groups);
  return st;
}

int dpt_cmd_data_debian(int argc, char **argv) {
  opts o = {.negatives = 4, .rank_negatives = 100, .shards = 1, .val_fraction = 0.1};
  const int rc = parse_options(&o, argc, argv);
  if (rc >= 0) return rc;
  const int is_stdin = !o.packages || !strcmp(o.packages, "-");
  FILE *f = is_stdin ? stdin : fopen(o.packages, "r");
  if (!f) {
    fprintf(stderr, "dptrain data debian: %s: cannot open: %s\n", o.packages, strerror(errno));
    return 1;
  }
  if (mkdir(o.out, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "dptrain data debian: %s: cannot create the directory: %s\n", o.out,
            strerror(errno));
    if (!is_stdin) fclose(f);
    return 1;
  }
  graph g = {0};
  const int prc = parse_stanzas(&g, f, is_stdin ? "<stdin>" : o.packages);
  if (!is_stdin) fclose(f);
  dpt_clear_error();
  const dpt_status st = prc ? DPT_ERR_IO : build(&o, &g);
  if (st != DPT_OK && !prc && !reported)
    fprintf(stderr, "dptrain data debian: %s: %s\n", dpt_status_str(st),
            *dpt_last_error() ? dpt_last_error() : "while building the graph");
  names_free(&g.nm);
  free(g.raw);
  return st == DPT_OK ? 0 : 1;
}
