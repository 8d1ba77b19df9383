/* BERT in the Hugging Face layout (dptrain/hf.h): the options recovered from a spec, save ->
 * load -> save bit for bit, token-type row 0 folded into the positions, LayerNorm's old
 * gamma/beta names, and every refusal (another config, a missing tensor, an untied decoder, an
 * activation dptrain lacks) with a message naming the file and the tensor or key. */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */

#include <check.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/advanced.h"
#include "test_util.h"
#include "tmp_dir.h"

static void setup(void) {
  tu_tmp_make("hf_bert");
}

static void teardown(void) {
  tu_tmp_remove();
}

/* A tiny BERT: 2 layers, hidden 8, 2 heads, ffn 16, vocabulary 12, positions 6. */
typedef struct bert {
  dpt_bert_options o;
  dpt_model_spec *spec;
  dpt_backend *be;
  dpt_model *m;
  float *state;
  size_t n;
} bert;

static void make_bert(bert *b, size_t layers, uint64_t seed) {
  dpt_bert_options_default(&b->o);
  b->o.vocab = 12;
  b->o.seq_len = 6;
  b->o.layers = layers;
  b->o.hidden = 8;
  b->o.heads = 2;
  b->o.ffn = 16;
  b->spec = malloc(sizeof *b->spec);
  TU_OK(dpt_model_spec_bert(b->spec, &b->o));
  TU_OK(dpt_backend_create(DPT_BACKEND_CPU, 0, &b->be));
  TU_OK(dpt_model_create(b->be, b->spec, 1, &b->m));
  TU_OK(dpt_model_init(b->m, seed));
  b->n = dpt_model_state_size(b->m);
  b->state = malloc(b->n * sizeof *b->state);
  TU_OK(dpt_model_get_state(b->m, b->state));
}

static void free_bert(bert *b) {
  dpt_model_destroy(b->m);
  dpt_backend_destroy(b->be);
  free(b->spec);
  free(b->state);
}

static void *file_bytes(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  void *p = malloc(*len + 1);
  ck_assert_uint_eq(fread(p, 1, *len, f), *len);
  fclose(f);
  return p;
}

static void same_file(const char *a, const char *b) {
  size_t na, nb;
  void *pa = file_bytes(a, &na), *pb = file_bytes(b, &nb);
  ck_assert_msg(na == nb && memcmp(pa, pb, na) == 0, "%s and %s differ", a, b);
  free(pa);
  free(pb);
}

/* dir/model.safetensors rewritten: tensor `from` renamed `to` (NULL: dropped), and every
 * float of tensor `poke` (may be NULL) plus `add`. */
static void rewrite(const char *dir, const char *from, const char *to, const char *poke,
                    float add) {
  char path[512];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  dpt_safetensors *st = NULL;
  TU_OK(dpt_safetensors_open(path, &st));
  const size_t n = dpt_safetensors_count(st);
  dpt_st_tensor *ts = calloc(n, sizeof *ts);
  float **data = calloc(n, sizeof *data);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    dpt_st_info info;
    TU_OK(dpt_safetensors_info(st, i, &info));
    if (from && !strcmp(info.name, from) && !to) continue;
    data[k] = malloc(info.nbytes + sizeof(float));
    memcpy(data[k], info.data, info.nbytes);
    if (poke && !strcmp(info.name, poke))
      for (size_t j = 0; j < info.count; j++)
        data[k][j] += add;
    ts[k] = (dpt_st_tensor){.name = (from && !strcmp(info.name, from)) ? to : info.name,
                            .data = data[k],
                            .ndim = info.ndim};
    memcpy(ts[k].shape, info.shape, sizeof ts[k].shape);
    k++;
  }
  char tmp[512];
  snprintf(tmp, sizeof tmp, "%s/new.safetensors", dir);
  TU_OK(dpt_safetensors_write(tmp, ts, k, NULL));
  dpt_safetensors_close(st);
  ck_assert_int_eq(rename(tmp, path), 0);
  for (size_t i = 0; i < k; i++)
    free(data[i]);
  free(data);
  free(ts);
}

START_TEST(options_from_spec) {
  bert b;
  make_bert(&b, 2, 1);
  dpt_bert_options o;
  TU_OK(dpt_bert_options_from_spec(b.spec, &o));
  ck_assert_uint_eq(o.layers, 2);
  ck_assert_uint_eq(o.hidden, 8);
  ck_assert_uint_eq(o.heads, 2);
  ck_assert_uint_eq(o.ffn, 16);
  ck_assert_uint_eq(o.vocab, 12);
  ck_assert_uint_eq(o.max_positions, 6);
  dpt_model_spec *mlp = malloc(sizeof *mlp);
  const size_t hidden[] = {4};
  TU_OK(dpt_model_spec_mlp(mlp, 1, 1, 8, hidden, 1, 3));
  EXPECT_FAIL(dpt_bert_options_from_spec(mlp, &o), DPT_ERR_INVALID_ARG, "not dptrain's BERT", NULL,
              NULL);
  /* A BERT with one layer changed (blocks.0.drop1 given an eps) is not dptrain's BERT. */
  b.spec->layers[5].eps = 1e-5f;
  EXPECT_FAIL(dpt_bert_options_from_spec(b.spec, &o), DPT_ERR_INVALID_ARG, "layer", NULL, NULL);
  free(mlp);
  free_bert(&b);
}
END_TEST

START_TEST(round_trip_bits) {
  bert b;
  make_bert(&b, 2, 7);
  TU_OK(dpt_hf_bert_save(b.m, &b.o, b.state, tpath("a")));
  float *back = malloc(b.n * sizeof *back);
  for (size_t i = 0; i < b.n; i++)
    back[i] = NAN;
  TU_OK(dpt_hf_bert_load(b.m, &b.o, tpath("a"), back));
  ck_assert_msg(memcmp(back, b.state, b.n * sizeof *back) == 0, "load(save(x)) != x");
  TU_OK(dpt_hf_bert_save(b.m, &b.o, back, tpath("b")));
  char x[512], y[512];
  snprintf(x, sizeof x, "%s/model.safetensors", tpath("a"));
  snprintf(y, sizeof y, "%s/model.safetensors", tpath("b"));
  same_file(x, y);
  snprintf(x, sizeof x, "%s/config.json", tpath("a"));
  snprintf(y, sizeof y, "%s/config.json", tpath("b"));
  same_file(x, y);
  dpt_bert_options c;
  memset(&c, 0, sizeof c);
  TU_OK(dpt_hf_bert_read_config(tpath("a"), &c));
  ck_assert_uint_eq(c.layers, 2);
  ck_assert_uint_eq(c.max_positions, 6);
  ck_assert_float_eq(c.ln_eps, 1e-12f);
  /* Query, key and value are the thirds of in_proj: query's bias is in_proj_bias[0, 8). */
  dpt_safetensors *st = NULL;
  snprintf(x, sizeof x, "%s/model.safetensors", tpath("a"));
  TU_OK(dpt_safetensors_open(x, &st));
  float q[8], v[8];
  TU_OK(dpt_safetensors_read_f32(st, "bert.encoder.layer.1.attention.self.query.bias", q, 8));
  TU_OK(dpt_safetensors_read_f32(st, "bert.encoder.layer.1.attention.self.value.bias", v, 8));
  dpt_safetensors_close(st);
  for (size_t i = 0; i < dpt_model_num_tensors(b.m); i++) {
    dpt_tensor_info t;
    TU_OK(dpt_model_tensor(b.m, i, &t));
    if (strcmp(t.name, "blocks.1.attn.in_proj_bias")) continue;
    ck_assert_mem_eq(q, b.state + t.offset, sizeof q);
    ck_assert_mem_eq(v, b.state + t.offset + 16, sizeof v);
  }
  free(back);
  free_bert(&b);
}
END_TEST

START_TEST(token_types_and_old_names) {
  /* Token-type row 0 (here every element 0.25) lands on every position row; LayerNorm's
   * gamma/beta are read as weight/bias. */
  bert b;
  make_bert(&b, 1, 3);
  TU_OK(dpt_hf_bert_save(b.m, &b.o, b.state, tpath("d")));
  rewrite(tpath("d"), NULL, NULL, "bert.embeddings.token_type_embeddings.weight", 0.25f);
  rewrite(tpath("d"), "bert.embeddings.LayerNorm.weight", "bert.embeddings.LayerNorm.gamma", NULL,
          0);
  float *back = malloc(b.n * sizeof *back);
  TU_OK(dpt_hf_bert_load(b.m, &b.o, tpath("d"), back));
  for (size_t i = 0; i < dpt_model_num_tensors(b.m); i++) {
    dpt_tensor_info t;
    TU_OK(dpt_model_tensor(b.m, i, &t));
    for (size_t j = 0; j < t.count; j++) {
      const float want = b.state[t.offset + j] + (strcmp(t.name, "embed.pos.weight") ? 0 : 0.25f);
      ck_assert_msg(back[t.offset + j] == want, "%s[%zu] = %g, want %g", t.name, j,
                    (double)back[t.offset + j], (double)want);
    }
  }
  free(back);
  free_bert(&b);
}
END_TEST

START_TEST(refusals) {
  bert b, three;
  make_bert(&b, 2, 5);
  make_bert(&three, 3, 5);
  float *back = malloc(three.n * sizeof *back);
  TU_OK(dpt_hf_bert_save(b.m, &b.o, b.state, tpath("r")));
  EXPECT_FAIL(dpt_hf_bert_load(three.m, &three.o, tpath("r"), back), DPT_ERR_INVALID_ARG,
              "config.json", "layers 2", NULL);
  rewrite(tpath("r"), NULL, NULL, "cls.predictions.decoder.weight", 1.0f);
  EXPECT_FAIL(dpt_hf_bert_load(b.m, &b.o, tpath("r"), back), DPT_ERR_BAD_FORMAT,
              "cls.predictions.decoder.weight", "tied", NULL);
  rewrite(tpath("r"), "bert.encoder.layer.1.output.dense.bias", NULL, NULL, 0);
  EXPECT_FAIL(dpt_hf_bert_load(b.m, &b.o, tpath("r"), back), DPT_ERR_BAD_FORMAT,
              "model.safetensors", "no tensor bert.encoder.layer.1.output.dense.bias", NULL);
  FILE *f = fopen(tpath("r/config.json"), "w");
  fputs("{\"model_type\": \"bert\", \"hidden_act\": \"relu\"}", f);
  fclose(f);
  dpt_bert_options o;
  EXPECT_FAIL(dpt_hf_bert_read_config(tpath("r"), &o), DPT_ERR_BAD_FORMAT, "config.json",
              "hidden_act", NULL);
  f = fopen(tpath("r/config.json"), "w");
  fputs("{\"model_type\": \"bert\"}", f);
  fclose(f);
  EXPECT_FAIL(dpt_hf_bert_read_config(tpath("r"), &o), DPT_ERR_BAD_FORMAT, "vocab_size", NULL,
              NULL);
  EXPECT_FAIL(dpt_hf_bert_read_config(tpath("none"), &o), DPT_ERR_BAD_FORMAT, "config.json", NULL,
              NULL);
  free(back);
  free_bert(&three);
  free_bert(&b);
}
END_TEST

int main(void) {
  Suite *s = suite_create("hf_bert");
  TCase *tc = tcase_create("hf");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, options_from_spec);
  tcase_add_test(tc, round_trip_bits);
  tcase_add_test(tc, token_types_and_old_names);
  tcase_add_test(tc, refusals);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
