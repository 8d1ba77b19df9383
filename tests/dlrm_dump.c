/* Writes a tiny DLRM and a batch for tests/pytorch_dlrm_test.sh: the model built by
 * dpt_model_spec_dlrm and initialized from a seed, its weights (dpt_model_save), and a fixed
 * batch of records with dptrain's logits (dpt_model_logits) and loss (dpt_model_evaluate).
 *
 * Usage: dlrm_dump dot|cat sum|mean BAG WEIGHTS BATCH
 * BATCH (safetensors): "dense" F32 [B, num_dense], "ids" I32 [B, num_tables * bag] (the records'
 * two parts, an id < 0 an empty slot), "labels" I32 [B], "logits" F32 [B], "loss" F64 [1] (the
 * sum over the batch); metadata "dlrm": the options as JSON, for the PyTorch module. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/dptrain.h"

enum { DENSE = 4, TABLES = 3, BATCH = 16, MAX_BAG = 8 };
static const size_t rows[TABLES] = {10, 7, 5};
static const size_t bottom[1] = {8};
static const size_t top[2] = {6, 4};

static int fail(const char *what) {
  fprintf(stderr, "dlrm_dump: %s: %s\n", what, dpt_last_error());
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 6 || (strcmp(argv[1], "dot") && strcmp(argv[1], "cat")) ||
      (strcmp(argv[2], "sum") && strcmp(argv[2], "mean")) || atoi(argv[3]) < 1 ||
      atoi(argv[3]) > MAX_BAG) {
    fprintf(stderr, "usage: dlrm_dump dot|cat sum|mean BAG(1..%d) WEIGHTS BATCH\n", MAX_BAG);
    return 2;
  }
  dpt_dlrm_options o;
  dpt_dlrm_options_default(&o);
  o.num_dense = DENSE;
  o.num_tables = TABLES;
  o.table_rows = rows;
  o.dim = 4;
  o.bag = (size_t)atoi(argv[3]);
  o.mode = strcmp(argv[2], "mean") == 0 ? DPT_BAG_MEAN : DPT_BAG_SUM;
  o.bottom = bottom;
  o.num_bottom = 1;
  o.top = top;
  o.num_top = 2;
  o.interaction = strcmp(argv[1], "cat") == 0 ? DPT_DLRM_CAT : DPT_DLRM_DOT;
  dpt_model_spec spec;
  if (dpt_model_spec_dlrm(&spec, &o) != DPT_OK) return fail("dpt_model_spec_dlrm");
  dpt_backend *be = NULL;
  dpt_model *m = NULL;
  if (dpt_backend_create(DPT_BACKEND_CPU, 0, &be) != DPT_OK) return fail("backend");
  if (dpt_model_create(be, &spec, BATCH, &m) != DPT_OK) return fail("dpt_model_create");
  if (dpt_model_init(m, 2024) != DPT_OK) return fail("dpt_model_init");
  if (dpt_model_save(m, argv[4]) != DPT_OK) return fail("dpt_model_save");

  /* The records: dense in [-2, 2), ids over each table's rows, some slots empty. */
  const size_t nid = TABLES * o.bag, width = DENSE + nid;
  float dense[BATCH * DENSE], rec[BATCH * (DENSE + TABLES * MAX_BAG)], logits[BATCH];
  int32_t ids[BATCH * TABLES * MAX_BAG], labels[BATCH];
  uint32_t s = 77;
  for (size_t i = 0; i < BATCH; ++i) {
    for (size_t f = 0; f < DENSE; ++f) {
      s = s * 1664525u + 1013904223u;
      dense[i * DENSE + f] = (float)(s >> 8) / 4194304.0f - 2.0f;
      rec[i * width + f] = dense[i * DENSE + f];
    }
    for (size_t t = 0; t < TABLES; ++t)
      for (size_t k = 0; k < o.bag; ++k) {
        s = s * 1664525u + 1013904223u;
        int32_t id = (int32_t)((s >> 8) % rows[t]);
        if (k > 0 && (s >> 4) % 3 == 0) id = -1;    /* an empty slot */
        if (o.bag > 1 && i == 5 && t == 1) id = -1; /* a bag with no id at all */
        ids[i * nid + t * o.bag + k] = id;
        memcpy(&rec[i * width + DENSE + t * o.bag + k], &id, sizeof id);
      }
    labels[i] = (int32_t)(i % 3 == 0);
  }
  dpt_buffer *bx = NULL, *by = NULL;
  double loss = 0;
  if (dpt_buffer_alloc(be, BATCH * width * sizeof(float), &bx) != DPT_OK ||
      dpt_buffer_alloc(be, sizeof labels, &by) != DPT_OK ||
      dpt_buffer_upload(bx, 0, rec, BATCH * width * sizeof(float)) != DPT_OK ||
      dpt_buffer_upload(by, 0, labels, sizeof labels) != DPT_OK)
    return fail("buffers");
  if (dpt_model_logits(m, bx, BATCH, logits) != DPT_OK) return fail("dpt_model_logits");
  if (dpt_model_evaluate(m, bx, by, BATCH, &loss, NULL) != DPT_OK)
    return fail("dpt_model_evaluate");

  char meta[512];
  snprintf(meta, sizeof meta,
           "{\"num_dense\": %d, \"table_rows\": [%zu, %zu, %zu], \"dim\": %zu, \"bag\": %zu, "
           "\"mode\": \"%s\", \"bottom\": [%zu], \"top\": [%zu, %zu], \"interaction\": \"%s\"}",
           DENSE, rows[0], rows[1], rows[2], o.dim, o.bag, argv[2], bottom[0], top[0], top[1],
           argv[1]);
  const char *kv[] = {"dlrm", meta, NULL};
  dpt_st_tensor ts[5] = {
      {.name = "dense", .data = dense, .ndim = 2, .shape = {BATCH, DENSE}},
      {.name = "ids", .ndim = 2, .shape = {BATCH, (int64_t)nid}, .dtype = "I32", .bytes = ids},
      {.name = "labels", .ndim = 1, .shape = {BATCH}, .dtype = "I32", .bytes = labels},
      {.name = "logits", .data = logits, .ndim = 1, .shape = {BATCH}},
      {.name = "loss", .ndim = 1, .shape = {1}, .dtype = "F64", .bytes = &loss}};
  if (dpt_safetensors_write(argv[5], ts, 5, kv) != DPT_OK) return fail("dpt_safetensors_write");
  printf("dlrm_dump %s %s bag %zu: %zu parameters, loss %.6f over %d records\n", argv[1], argv[2],
         o.bag, dpt_model_num_params(m), loss, BATCH);
  dpt_buffer_free(bx);
  dpt_buffer_free(by);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
  return 0;
}
