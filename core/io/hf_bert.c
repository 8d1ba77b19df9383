/* BERT in the Hugging Face layout (include/dptrain/hf.h): dptrain's BERT written as a
 * BertForMaskedLM directory (config.json through jansson, model.safetensors) and read back,
 * through one table that maps each Hugging Face tensor to rows of a dptrain tensor. */
#if !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* mkdir */
#endif
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/file.h"
#include "dptrain/hf.h"
#include "dptrain/safetensors.h"

/* One Hugging Face tensor: rows [row0, row0 + rows) of dptrain tensor `dpt` (rows 0: all). */
typedef struct hf_entry {
  char hf[96], dpt[64];
  size_t row0, rows;
} hf_entry;

typedef struct hf_table {
  hf_entry *e;
  size_t n;
} hf_table;

static void put(hf_table *t, const char *hf, const char *dpt, size_t row0, size_t rows) {
  hf_entry *e = &t->e[t->n++];
  snprintf(e->hf, sizeof e->hf, "%s", hf);
  snprintf(e->dpt, sizeof e->dpt, "%s", dpt);
  e->row0 = row0;
  e->rows = rows;
}

/* A linear or layer norm: its weight and bias under both prefixes. */
static void pair(hf_table *t, const char *hf, const char *dpt) {
  char a[96], b[64];
  snprintf(a, sizeof a, "%s.weight", hf);
  snprintf(b, sizeof b, "%s.weight", dpt);
  put(t, a, b, 0, 0);
  snprintf(a, sizeof a, "%s.bias", hf);
  snprintf(b, sizeof b, "%s.bias", dpt);
  put(t, a, b, 0, 0);
}

/* Encoder layer i's entries: q, k, v split from the fused projection, then the rest. */
static void layer_entries(hf_table *t, size_t i, size_t H) {
  static const char *const qkv[3] = {"query", "key", "value"};
  char a[96], b[64], p[48], q[32];
  snprintf(p, sizeof p, "bert.encoder.layer.%zu", i);
  snprintf(q, sizeof q, "blocks.%zu", i);
  for (size_t k = 0; k < 3; k++) {
    snprintf(a, sizeof a, "%s.attention.self.%s.weight", p, qkv[k]);
    snprintf(b, sizeof b, "%s.attn.in_proj_weight", q);
    put(t, a, b, k * H, H);
    snprintf(a, sizeof a, "%s.attention.self.%s.bias", p, qkv[k]);
    snprintf(b, sizeof b, "%s.attn.in_proj_bias", q);
    put(t, a, b, k * H, H);
  }
  static const char *const rest[5][2] = {{"attention.output.dense", "attn.out_proj"},
                                         {"attention.output.LayerNorm", "norm1"},
                                         {"intermediate.dense", "ffn1"},
                                         {"output.dense", "ffn2"},
                                         {"output.LayerNorm", "norm2"}};
  for (size_t k = 0; k < 5; k++) {
    snprintf(a, sizeof a, "%s.%s", p, rest[k][0]);
    snprintf(b, sizeof b, "%s.%s", q, rest[k][1]);
    pair(t, a, b);
  }
}

/* The whole table for o (freed by the caller: t->e). */
static dpt_status make_table(const dpt_bert_options *o, hf_table *t) {
  t->n = 0;
  t->e = calloc(9 + 16 * o->layers, sizeof *t->e); /* 4 embedding, 16 a layer, 5 head */
  if (!t->e) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "hf bert: out of memory");
  put(t, "bert.embeddings.word_embeddings.weight", "embed.tok.weight", 0, 0);
  put(t, "bert.embeddings.position_embeddings.weight", "embed.pos.weight", 0, 0);
  pair(t, "bert.embeddings.LayerNorm", "embed.norm");
  for (size_t i = 0; i < o->layers; i++)
    layer_entries(t, i, o->hidden);
  pair(t, "cls.predictions.transform.dense", "mlm.dense");
  pair(t, "cls.predictions.transform.LayerNorm", "mlm.norm");
  put(t, "cls.predictions.bias", "mlm.decoder.bias", 0, 0);
  return DPT_OK;
}

/* The model's tensor `name`, with e's rows: its offset in the state and its shape. */
static dpt_status find_dpt(const dpt_model *m, const hf_entry *e, size_t *off, int *ndim,
                           int64_t *shape) {
  dpt_tensor_info ti;
  for (size_t i = 0; i < dpt_model_num_tensors(m); i++) {
    if (dpt_model_tensor(m, i, &ti) != DPT_OK || strcmp(ti.name, e->dpt) != 0) continue;
    const size_t cols = ti.count / (size_t)ti.shape[0];
    *off = ti.offset + e->row0 * cols;
    *ndim = ti.ndim;
    for (int d = 0; d < ti.ndim; d++)
      shape[d] = ti.shape[d];
    if (e->rows) shape[0] = (int64_t)e->rows;
    return DPT_OK;
  }
  return dpt_set_error(DPT_ERR_INVALID_ARG, "hf bert: the model has no tensor %s (not BERT?)",
                       e->dpt);
}

/* ---- the options of a spec -------------------------------------------------------------- */

static const dpt_layer_spec *named(const dpt_model_spec *s, const char *name) {
  for (size_t i = 0; i < s->num_layers; i++)
    if (strcmp(s->layers[i].name, name) == 0) return &s->layers[i];
  return NULL;
}

/* Whether two layer specs agree in everything BERT sets. */
static int same_layer(const dpt_layer_spec *a, const dpt_layer_spec *b) {
  return a->kind == b->kind && a->size == b->size && a->vocab == b->vocab && a->heads == b->heads &&
         a->tie == b->tie && a->eps == b->eps && a->approximate == b->approximate && a->p == b->p &&
         a->num_inputs == b->num_inputs && memcmp(a->inputs, b->inputs, sizeof a->inputs) == 0 &&
         strcmp(a->name, b->name) == 0;
}

static dpt_status sizes_from_spec(const dpt_model_spec *spec, dpt_bert_options *o) {
  const dpt_layer_spec *tok = named(spec, "embed.tok"), *pos = named(spec, "embed.pos");
  const dpt_layer_spec *norm = named(spec, "embed.norm"), *drop = named(spec, "embed.drop");
  const dpt_layer_spec *attn = named(spec, "blocks.0.attn"), *ffn = named(spec, "blocks.0.ffn1");
  if (!tok || !pos || !norm || !drop || !attn || !ffn || !spec->seq_len)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "hf bert: the model is not dptrain's BERT (no embed.tok, embed.pos, "
                         "blocks.0.attn, ...)");
  dpt_bert_options_default(o);
  o->vocab = tok->vocab;
  o->seq_len = spec->seq_len;
  o->max_positions = pos->vocab;
  o->hidden = tok->size;
  o->heads = attn->heads;
  o->ffn = ffn->size;
  o->dropout = drop->p;
  o->attn_dropout = attn->p;
  o->ln_eps = norm->eps;
  o->layers = 0;
  for (char name[48];; o->layers++) {
    snprintf(name, sizeof name, "blocks.%zu.attn", o->layers);
    if (!named(spec, name)) break;
  }
  return DPT_OK;
}

dpt_status dpt_bert_options_from_spec(const dpt_model_spec *spec, dpt_bert_options *o) {
  if (!spec || !o) return dpt_set_error(DPT_ERR_INVALID_ARG, "hf bert: spec or options is NULL");
  DPT_TRY(sizes_from_spec(spec, o));
  dpt_model_spec *b = malloc(sizeof *b);
  if (!b) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "hf bert: out of memory");
  dpt_status st = dpt_model_spec_bert(b, o);
  if (st == DPT_OK && b->num_layers != spec->num_layers)
    st = dpt_set_error(DPT_ERR_INVALID_ARG, "hf bert: %zu layers, dptrain's BERT has %zu",
                       spec->num_layers, b->num_layers);
  for (size_t i = 0; st == DPT_OK && i < b->num_layers; i++)
    if (!same_layer(&b->layers[i], &spec->layers[i]))
      st =
          dpt_set_error(DPT_ERR_INVALID_ARG, "hf bert: layer %zu (%s) is not dptrain's BERT's (%s)",
                        i, spec->layers[i].name, b->layers[i].name);
  free(b);
  return st;
}

/* ---- writing ----------------------------------------------------------------------------- */

/* The float f as the double of its shortest decimal ("1e-12", not 9.99999996e-13). */
static double shortest(float f) {
  char buf[32];
  for (int digits = 1; digits <= 9; digits++) {
    snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
    if ((float)strtod(buf, NULL) == f) break;
  }
  return strtod(buf, NULL);
}

static int write_json(FILE *f, const void *ctx) {
  return json_dumpf((const json_t *)ctx, f,
                    JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(15)) == 0 &&
         fputc('\n', f) != EOF;
}

static dpt_status save_config(const dpt_bert_options *o, const char *path) {
  const size_t pos = o->max_positions ? o->max_positions : o->seq_len;
  json_t *c = json_pack(
      "{s[s]sssIsIsIsIsIsIsssssfsfsfsIsIsfsb}", "architectures", "BertForMaskedLM", "model_type",
      "bert", "vocab_size", (json_int_t)o->vocab, "hidden_size", (json_int_t)o->hidden,
      "num_hidden_layers", (json_int_t)o->layers, "num_attention_heads", (json_int_t)o->heads,
      "intermediate_size", (json_int_t)o->ffn, "max_position_embeddings", (json_int_t)pos,
      "hidden_act", "gelu", "position_embedding_type", "absolute", "layer_norm_eps",
      shortest(o->ln_eps > 0.0f ? o->ln_eps : 1e-12f), "hidden_dropout_prob", shortest(o->dropout),
      "attention_probs_dropout_prob", shortest(o->attn_dropout), "type_vocab_size", (json_int_t)2,
      "pad_token_id", (json_int_t)0, "initializer_range", 0.02, "tie_word_embeddings", 1);
  if (!c) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "hf bert: out of memory");
  const dpt_status st = dpt_write_file_atomic(path, "", 1, write_json, c);
  json_decref(c);
  return st;
}

/* The tensors to write: the table's, the zero token types, the tied decoder. */
static dpt_status fill_tensors(const dpt_model *m, const hf_table *t, const float *host,
                               const float *zeros, const dpt_bert_options *o, dpt_st_tensor *ts) {
  for (size_t i = 0; i < t->n; i++) {
    size_t off;
    ts[i] = (dpt_st_tensor){.name = t->e[i].hf};
    DPT_TRY(find_dpt(m, &t->e[i], &off, &ts[i].ndim, ts[i].shape));
    ts[i].data = host + off;
  }
  ts[t->n] = (dpt_st_tensor){.name = "bert.embeddings.token_type_embeddings.weight",
                             .data = zeros,
                             .ndim = 2,
                             .shape = {2, (int64_t)o->hidden}};
  ts[t->n + 1] = ts[0];
  ts[t->n + 1].name = "cls.predictions.decoder.weight";
  return DPT_OK;
}

static dpt_status make_dir(const char *dir) {
  if (mkdir(dir, 0755) != 0 && errno != EEXIST)
    return dpt_set_error(DPT_ERR_IO, "%s: cannot create the directory: %s", dir, strerror(errno));
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return dpt_set_error(DPT_ERR_IO, "%s: not a directory", dir);
  return DPT_OK;
}

dpt_status dpt_hf_bert_save(const dpt_model *model, const dpt_bert_options *o, const float *host,
                            const char *dir) {
  if (!model || !o || !host || !dir)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "hf bert save: an argument is NULL");
  DPT_TRY(make_dir(dir));
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, DPT_HF_CONFIG);
  DPT_TRY(save_config(o, path));
  hf_table t;
  DPT_TRY(make_table(o, &t));
  float *zeros = calloc(2 * o->hidden, sizeof *zeros);
  dpt_st_tensor *ts = calloc(t.n + 2, sizeof *ts);
  dpt_status st = zeros && ts ? DPT_OK : dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "hf bert: memory");
  if (st == DPT_OK) st = fill_tensors(model, &t, host, zeros, o, ts);
  static const char *const meta[] = {"format", "pt", "producer", "dptrain", NULL};
  snprintf(path, sizeof path, "%s/%s", dir, DPT_HF_WEIGHTS);
  if (st == DPT_OK) st = dpt_safetensors_write(path, ts, t.n + 2, meta);
  free(ts);
  free(zeros);
  free(t.e);
  return st;
}

/* ---- reading ----------------------------------------------------------------------------- */

static dpt_status bad(const char *path, const char *what) {
  return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: %s", path, what);
}

/* Integer `key` of config c into *v. */
static dpt_status get_size(const json_t *c, const char *path, const char *key, size_t *v) {
  const json_t *j = json_object_get(c, key);
  if (!json_is_integer(j) || json_integer_value(j) <= 0)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: \"%s\" is missing or not a positive integer",
                         path, key);
  *v = (size_t)json_integer_value(j);
  return DPT_OK;
}

/* String `key` must be absent (when dflt_ok) or `want`. */
static dpt_status expect_str(const json_t *c, const char *path, const char *key, const char *want,
                             int absent_ok) {
  const json_t *j = json_object_get(c, key);
  if (!j && absent_ok) return DPT_OK;
  if (json_is_string(j) && strcmp(json_string_value(j), want) == 0) return DPT_OK;
  return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: \"%s\" must be \"%s\" for dptrain's BERT", path,
                       key, want);
}

static dpt_status parse_config(const json_t *c, const char *path, dpt_bert_options *o) {
  if (!json_is_object(c)) return bad(path, "not a JSON object");
  DPT_TRY(expect_str(c, path, "model_type", "bert", 0));
  DPT_TRY(expect_str(c, path, "hidden_act", "gelu", 1));
  DPT_TRY(expect_str(c, path, "position_embedding_type", "absolute", 1));
  DPT_TRY(get_size(c, path, "vocab_size", &o->vocab));
  DPT_TRY(get_size(c, path, "hidden_size", &o->hidden));
  DPT_TRY(get_size(c, path, "num_hidden_layers", &o->layers));
  DPT_TRY(get_size(c, path, "num_attention_heads", &o->heads));
  DPT_TRY(get_size(c, path, "intermediate_size", &o->ffn));
  DPT_TRY(get_size(c, path, "max_position_embeddings", &o->max_positions));
  const json_t *eps = json_object_get(c, "layer_norm_eps");
  if (eps && !json_is_number(eps)) return bad(path, "\"layer_norm_eps\" is not a number");
  o->ln_eps = eps ? (float)json_number_value(eps) : 1e-12f;
  return DPT_OK;
}

dpt_status dpt_hf_bert_read_config(const char *dir, dpt_bert_options *o) {
  if (!dir || !o) return dpt_set_error(DPT_ERR_INVALID_ARG, "hf bert: dir or options is NULL");
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, DPT_HF_CONFIG);
  json_error_t err;
  json_t *c = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
  if (!c)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: %s (line %d, column %d)", path, err.text,
                         err.line, err.column);
  const dpt_status st = parse_config(c, path, o);
  json_decref(c);
  return st;
}

/* The config's sizes against the model's options. */
static dpt_status check_config(const char *dir, const dpt_bert_options *o) {
  dpt_bert_options c = *o;
  DPT_TRY(dpt_hf_bert_read_config(dir, &c));
  const size_t pos = o->max_positions ? o->max_positions : o->seq_len;
  const float eps = o->ln_eps > 0.0f ? o->ln_eps : 1e-12f;
  if (c.vocab != o->vocab || c.hidden != o->hidden || c.layers != o->layers ||
      c.heads != o->heads || c.ffn != o->ffn || c.max_positions != pos || c.ln_eps != eps)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s/%s: vocab %zu, hidden %zu, layers %zu, heads %zu, ffn %zu, "
                         "positions %zu, eps %g; the model has %zu, %zu, %zu, %zu, %zu, %zu, %g",
                         dir, DPT_HF_CONFIG, c.vocab, c.hidden, c.layers, c.heads, c.ffn,
                         c.max_positions, (double)c.ln_eps, o->vocab, o->hidden, o->layers,
                         o->heads, o->ffn, pos, (double)eps);
  return DPT_OK;
}

/* The file's tensor for e (LayerNorm's gamma/beta for weight/bias too); NULL when absent. */
static const char *file_name(const dpt_safetensors *st, const char *hf, char *alt, size_t cap) {
  dpt_st_info info;
  if (dpt_safetensors_find(st, hf, &info) == DPT_OK) return hf;
  const char *dot = strrchr(hf, '.');
  if (!strstr(hf, "LayerNorm") || !dot) return NULL;
  snprintf(alt, cap, "%.*s.%s", (int)(dot - hf), hf, strcmp(dot, ".weight") ? "beta" : "gamma");
  return dpt_safetensors_find(st, alt, &info) == DPT_OK ? alt : NULL;
}

static dpt_status read_entry(const dpt_model *m, const dpt_safetensors *st, const char *path,
                             const hf_entry *e, float *host) {
  size_t off;
  int ndim;
  int64_t shape[4];
  DPT_TRY(find_dpt(m, e, &off, &ndim, shape));
  char alt[128];
  const char *name = file_name(st, e->hf, alt, sizeof alt);
  dpt_st_info info;
  if (!name || dpt_safetensors_find(st, name, &info) != DPT_OK)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: no tensor %s", path, e->hf);
  int same = info.ndim == ndim;
  for (int d = 0; same && d < ndim; d++)
    same = info.shape[d] == shape[d];
  if (!same)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: tensor %s has another shape than the model's",
                         path, name);
  return dpt_safetensors_read_f32(st, name, host + off, info.count);
}

/* Token-type row 0 added to every position row; the decoder checked to be the embeddings. */
static dpt_status fold_extras(const dpt_model *m, const dpt_safetensors *st, const char *path,
                              const hf_table *t, float *host) {
  size_t tok, pos;
  int nd;
  int64_t tshape[4], pshape[4];
  DPT_TRY(find_dpt(m, &t->e[0], &tok, &nd, tshape));
  DPT_TRY(find_dpt(m, &t->e[1], &pos, &nd, pshape));
  const size_t H = (size_t)tshape[1], V = (size_t)tshape[0], P = (size_t)pshape[0];
  dpt_st_info info;
  float *buf = malloc(V * H * sizeof *buf);
  if (!buf) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "hf bert: out of memory");
  dpt_status st2 = DPT_OK;
  const char *tt = "bert.embeddings.token_type_embeddings.weight";
  if (dpt_safetensors_find(st, tt, &info) == DPT_OK) {
    if (info.ndim != 2 || info.shape[1] != (int64_t)H || info.shape[0] < 1 ||
        (size_t)info.shape[0] > V)
      st2 = dpt_set_error(DPT_ERR_BAD_FORMAT, "%s: %s is not [types, %zu]", path, tt, H);
    if (st2 == DPT_OK) st2 = dpt_safetensors_read_f32(st, tt, buf, info.count);
    for (size_t p = 0; st2 == DPT_OK && p < P; p++)
      for (size_t h = 0; h < H; h++)
        if (buf[h] != 0.0f) host[pos + p * H + h] += buf[h]; /* keeps -0.0f's bits */
  }
  const char *dec = "cls.predictions.decoder.weight";
  if (st2 == DPT_OK && dpt_safetensors_find(st, dec, &info) == DPT_OK) {
    st2 = dpt_safetensors_read_f32(st, dec, buf, V * H);
    if (st2 == DPT_OK && memcmp(buf, host + tok, V * H * sizeof *buf) != 0)
      st2 = dpt_set_error(DPT_ERR_BAD_FORMAT,
                          "%s: %s differs from the word embeddings; dptrain's decoder is tied",
                          path, dec);
  }
  free(buf);
  return st2;
}

dpt_status dpt_hf_bert_load(const dpt_model *model, const dpt_bert_options *o, const char *dir,
                            float *host) {
  if (!model || !o || !dir || !host)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "hf bert load: an argument is NULL");
  DPT_TRY(check_config(dir, o));
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, DPT_HF_WEIGHTS);
  dpt_safetensors *st = NULL;
  DPT_TRY(dpt_safetensors_open(path, &st));
  hf_table t = {0};
  dpt_status s = make_table(o, &t);
  for (size_t i = 0; s == DPT_OK && i < t.n; i++)
    s = read_entry(model, st, path, &t.e[i], host);
  if (s == DPT_OK) s = fold_extras(model, st, path, &t, host);
  free(t.e);
  dpt_safetensors_close(st);
  return s;
}
