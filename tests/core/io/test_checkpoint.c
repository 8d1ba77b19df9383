/* Checkpoint files: the progress as JSON bit for bit, write / verify / open round trips, every
 * corruption named (the tensor whose CRC fails, the truncated file), the newest valid checkpoint
 * of a directory, keeping the newest K, stale temporary files, export to plain weights. */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw, truncate */

#include <check.h>
#include <float.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/io/checkpoint.h"
#include "core/train/run_terms.h"
#include "dptrain/advanced.h"
#include "test_util.h"
#include "tmp_dir.h"

static void setup(void) {
  tu_tmp_make("ckpt");
}

static void teardown(void) {
  tu_tmp_remove();
}

static int exists(const char *path) {
  return access(path, F_OK) == 0;
}

static int same_bits(double a, double b) {
  return memcmp(&a, &b, sizeof a) == 0;
}

static dpt_checkpoint_progress odd_progress(int64_t step) {
  dpt_checkpoint_progress p = {
      .step = step,
      .optimizer_steps = step - 2,
      .epoch = 3,
      .batch = 17,
      .skipped_steps = 2,
      .skipped_in_a_row = 1,
      .rollbacks = 1,
      .trained_samples = INT64_MAX,
      .epoch_loss_sum = 0.1 + 0.2, /* 0.30000000000000004 */
      .epoch_samples = 4096,
      .lr_scale = nextafter(0.5, 1.0),
      .world_size = 4,
      .seed = UINT64_MAX,
      .state_hash = 0x0123456789abcdefull,
  };
  return p;
}

static void expect_progress(const dpt_checkpoint_progress *got,
                            const dpt_checkpoint_progress *want) {
  ck_assert_int_eq(got->step, want->step);
  ck_assert_int_eq(got->optimizer_steps, want->optimizer_steps);
  ck_assert_int_eq(got->epoch, want->epoch);
  ck_assert_int_eq(got->batch, want->batch);
  ck_assert_int_eq(got->skipped_steps, want->skipped_steps);
  ck_assert_int_eq(got->skipped_in_a_row, want->skipped_in_a_row);
  ck_assert_int_eq(got->rollbacks, want->rollbacks);
  ck_assert_int_eq(got->trained_samples, want->trained_samples);
  ck_assert_msg(same_bits(got->epoch_loss_sum, want->epoch_loss_sum),
                "epoch_loss_sum %.17g vs %.17g", got->epoch_loss_sum, want->epoch_loss_sum);
  ck_assert_int_eq(got->epoch_samples, want->epoch_samples);
  ck_assert_msg(same_bits(got->lr_scale, want->lr_scale), "lr_scale %.17g vs %.17g", got->lr_scale,
                want->lr_scale);
  ck_assert_int_eq(got->world_size, want->world_size);
  ck_assert_uint_eq(got->seed, want->seed);
  ck_assert_uint_eq(got->state_hash, want->state_hash);
}

/* The run terms in a checkpoint: a round trip is accepted; a changed field that may not change
 * is refused by name; the fields from sparse_tables on may be absent (checkpoints written before
 * them), read as 0, and then a run that sets one is refused. */
START_TEST(run_terms_resume_check) {
  dpt_train_config cfg;
  dpt_train_config_default(&cfg);
  uint64_t now[DPT_RUN_TERM_COUNT];
  dpt_run_terms(&cfg, now);
  char *json = NULL;
  TU_OK(dpt_run_terms_to_json(now, &json));
  TU_OK(dpt_run_terms_check_resume(json, "ck", now, NULL, NULL));
  ck_assert_ptr_nonnull(strstr(json, "\"table_optimizer\":0"));
  /* an older checkpoint: the three keys cut out */
  char *old = strdup(json);
  static const char *const cut[] = {"\"sparse_tables\"", "\"sparse_dense_above\"",
                                    "\"table_optimizer\""};
  for (size_t i = 0; i < 3; ++i) {
    char *k = strstr(old, cut[i]);
    ck_assert_ptr_nonnull(k);
    char *end = strpbrk(k, ",}");
    if (*end == ',')
      ++end;
    else if (k[-1] == ',') /* the last member: its comma goes */
      --k;
    while (*end == ' ' || *end == '\n')
      ++end;
    memmove(k, end, strlen(end) + 1);
  }
  ck_assert_ptr_null(strstr(old, "sparse"));
  TU_OK(dpt_run_terms_check_resume(old, "old", now, NULL, NULL));
  cfg.exchange.table_optimizer = DPT_TABLE_ROWWISE_ADAGRAD;
  dpt_run_terms(&cfg, now);
  EXPECT_FAIL(dpt_run_terms_check_resume(old, "old", now, NULL, NULL), DPT_ERR_MISMATCH,
              "the tables' optimizer", "0", NULL);
  /* an older field still has to be there */
  char *no_lr = strstr(json, "\"lr\"");
  ck_assert_ptr_nonnull(no_lr);
  no_lr[1] = 'X';
  EXPECT_FAIL(dpt_run_terms_check_resume(json, "ck", now, NULL, NULL), DPT_ERR_BAD_FORMAT,
              "no valid 'lr'", NULL, NULL);
  free(old);
  free(json);
}
END_TEST

START_TEST(progress_json_round_trip) {
  const double odd[] = {0.1 + 0.2,      -0.0,  5e-324,   DBL_MAX,  1.0 / 3.0,
                        -123456789.125, 1e300, INFINITY, -INFINITY};
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; ++i) {
    dpt_checkpoint_progress p = odd_progress((int64_t)i), q;
    p.epoch_loss_sum = odd[i];
    p.lr_scale = -odd[i];
    char *json = NULL;
    TU_OK(dpt_ckpt_progress_to_json(&p, &json));
    ck_assert_ptr_nonnull(strstr(json, "\"seed\":\"ffffffffffffffff\""));
    ck_assert_ptr_nonnull(strstr(json, "\"state_hash\":\"0123456789abcdef\""));
    ck_assert_ptr_nonnull(strstr(json, "\"trained_samples\":9223372036854775807"));
    memset(&q, 0xa5, sizeof q);
    TU_OK(dpt_ckpt_progress_from_json(json, &q));
    expect_progress(&q, &p);
    free(json);
  }
  dpt_checkpoint_progress p = odd_progress(1), q;
  p.epoch_loss_sum = NAN;
  char *json = NULL;
  TU_OK(dpt_ckpt_progress_to_json(&p, &json));
  TU_OK(dpt_ckpt_progress_from_json(json, &q));
  ck_assert(isnan(q.epoch_loss_sum));
  free(json);
}
END_TEST

/* The progress's fields as JSON, all but field `skip` (-1: none), into buf. */
static const char *progress_without(int skip, char *buf, size_t cap) {
  static const char *const parts[] = {"\"step\":1",
                                      "\"optimizer_steps\":1",
                                      "\"epoch\":0",
                                      "\"batch\":0",
                                      "\"skipped_steps\":0",
                                      "\"skipped_in_a_row\":0",
                                      "\"rollbacks\":0",
                                      "\"trained_samples\":0",
                                      "\"epoch_loss_sum\":0.5",
                                      "\"epoch_samples\":0",
                                      "\"lr_scale\":1",
                                      "\"world_size\":2",
                                      "\"seed\":\"0000000000000003\"",
                                      "\"state_hash\":\"00000000000000ff\""};
  size_t len = (size_t)snprintf(buf, cap, "{");
  for (int i = 0; i < (int)(sizeof parts / sizeof parts[0]); ++i)
    if (i != skip)
      len += (size_t)snprintf(buf + len, cap - len, "%s%s", len > 1 ? "," : "", parts[i]);
  snprintf(buf + len, cap - len, "}");
  return buf;
}

START_TEST(progress_json_errors) {
  char full[1024], buf[1024];
  progress_without(-1, full, sizeof full);
  dpt_checkpoint_progress p;
  TU_OK(dpt_ckpt_progress_from_json(full, &p));
  ck_assert_int_eq(p.step, 1);
  ck_assert_int_eq(p.world_size, 2);
  ck_assert(p.epoch_loss_sum == 0.5 && p.lr_scale == 1.0);
  ck_assert_uint_eq(p.seed, 3);
  ck_assert_uint_eq(p.state_hash, 255);
  /* Each field left out in turn is named. */
  const char *names[] = {"step",           "optimizer_steps",  "epoch",     "batch",
                         "skipped_steps",  "skipped_in_a_row", "rollbacks", "trained_samples",
                         "epoch_loss_sum", "epoch_samples",    "lr_scale",  "world_size",
                         "seed",           "state_hash"};
  for (int i = 0; i < (int)(sizeof names / sizeof names[0]); ++i) {
    char want[96];
    snprintf(want, sizeof want, "missing field \"%s\"", names[i]);
    EXPECT_FAIL(dpt_ckpt_progress_from_json(progress_without(i, buf, sizeof buf), &p),
                DPT_ERR_BAD_FORMAT, want, NULL, NULL);
  }
  snprintf(buf, sizeof buf, "%s", full);
  memcpy(strstr(buf, "\"0000000000000003\""), "3                 ", 18);
  EXPECT_FAIL(dpt_ckpt_progress_from_json(buf, &p), DPT_ERR_BAD_FORMAT, "\"seed\"", "16 hex", NULL);
  char rest[1024];
  snprintf(buf, sizeof buf, "{\"step\":\"1\",%s", progress_without(0, rest, sizeof rest) + 1);
  EXPECT_FAIL(dpt_ckpt_progress_from_json(buf, &p), DPT_ERR_BAD_FORMAT, "\"step\"", "integer",
              NULL);
  EXPECT_FAIL(dpt_ckpt_progress_from_json("[1]", &p), DPT_ERR_BAD_FORMAT, "not a JSON object", NULL,
              NULL);
  EXPECT_FAIL(dpt_ckpt_progress_from_json("{", &p), DPT_ERR_BAD_FORMAT, "bad JSON", NULL, NULL);
}
END_TEST

/* ---- a small checkpoint ------------------------------------------------------------------- */

static const float weight[6] = {1.5f, -2.0f, 0.25f, 1e-30f, -0.0f, 3.0f};
static const int64_t counter = 1234567890123ll;
static const float momentum[6] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};

/* Writes the checkpoint at `step` into dir: "0.weight" F32 [2, 3] (data bytes 0..23), the
 * counter I64 scalar (24..31), "optimizer.momentum_buffer.0.weight" F32 [2, 3] (32..55). */
static void write_small(const char *dir, int64_t step, int keep, char *path, size_t cap) {
  const dpt_st_tensor ts[3] = {
      {"0.weight", weight, 2, {2, 3}, NULL, NULL},
      {"1.num_batches_tracked", NULL, 0, {0}, "I64", &counter},
      {"optimizer.momentum_buffer.0.weight", momentum, 2, {2, 3}, NULL, NULL},
  };
  const char *meta[] = {"format", "pt", DPT_CKPT_TERMS_KEY, "{\"lr\":0.1}", NULL};
  const dpt_checkpoint_progress p = odd_progress(step);
  TU_OK(dpt_ckpt_write(dir, &p, ts, 3, meta, keep, path, cap));
}

/* Flips a bit of the byte `offset` bytes into the data section of the file at path. */
static void flip_data_byte(const char *path, long offset) {
  FILE *f = fopen(path, "r+b");
  ck_assert_ptr_nonnull(f);
  unsigned char len8[8];
  ck_assert_uint_eq(fread(len8, 1, 8, f), 8);
  long header = 0;
  for (int b = 7; b >= 0; --b)
    header = header << 8 | len8[b];
  ck_assert_int_eq(fseek(f, 8 + header + offset, SEEK_SET), 0);
  const int c = fgetc(f);
  ck_assert_int_ne(c, EOF);
  ck_assert_int_eq(fseek(f, 8 + header + offset, SEEK_SET), 0);
  ck_assert_int_ne(fputc(c ^ 0x10, f), EOF);
  ck_assert_int_eq(fclose(f), 0);
}

START_TEST(write_verify_open) {
  char path[512];
  const char *dir = tpath("ck");
  write_small(dir, 7, 3, path, sizeof path);
  char want[512];
  snprintf(want, sizeof want, "%s/ckpt-000000000007.safetensors", dir);
  ck_assert_str_eq(path, want);
  dpt_checkpoint_progress p, expected = odd_progress(7);
  TU_OK(dpt_checkpoint_verify(path, &p));
  expect_progress(&p, &expected);
  TU_OK(dpt_checkpoint_verify(path, NULL));

  dpt_safetensors *st = NULL;
  TU_OK(dpt_ckpt_open(path, &st, &p));
  ck_assert_int_eq(p.step, 7);
  ck_assert_uint_eq(dpt_safetensors_count(st), 3);
  float w[6], m[6];
  int64_t c = 0;
  TU_OK(dpt_safetensors_read_f32(st, "0.weight", w, 6));
  TU_OK(dpt_safetensors_read_f32(st, "optimizer.momentum_buffer.0.weight", m, 6));
  TU_OK(dpt_safetensors_read_i64(st, "1.num_batches_tracked", &c, 1));
  ck_assert_mem_eq(w, weight, sizeof w);
  ck_assert_mem_eq(m, momentum, sizeof m);
  ck_assert_int_eq(c, counter);
  dpt_st_info info;
  TU_OK(dpt_safetensors_find(st, "1.num_batches_tracked", &info));
  ck_assert_str_eq(info.dtype, "I64");
  ck_assert_str_eq(dpt_safetensors_metadata(st, "format"), "pt");
  ck_assert_str_eq(dpt_safetensors_metadata(st, DPT_CKPT_TERMS_KEY), "{\"lr\":0.1}");
  const char *crcs = dpt_safetensors_metadata(st, DPT_CKPT_CRC_KEY);
  ck_assert_ptr_nonnull(crcs);
  /* zlib's crc32 of the 8 little-endian bytes of the counter, computed independently. */
  unsigned char le[8];
  for (int b = 0; b < 8; ++b)
    le[b] = (unsigned char)((uint64_t)counter >> (8 * b));
  uint32_t crc = 0xffffffffu;
  for (int b = 0; b < 8; ++b) {
    crc ^= le[b];
    for (int k = 0; k < 8; ++k)
      crc = crc & 1 ? (crc >> 1) ^ 0xedb88320u : crc >> 1;
  }
  char entry[64];
  snprintf(entry, sizeof entry, "\"1.num_batches_tracked\":\"%08lx\"",
           (unsigned long)(crc ^ 0xffffffffu));
  ck_assert_msg(strstr(crcs, entry), "%s lacks %s", crcs, entry);
  ck_assert_ptr_nonnull(strstr(dpt_safetensors_metadata(st, DPT_CKPT_PROGRESS_KEY), "\"step\":7"));
  dpt_safetensors_close(st);
}
END_TEST

START_TEST(corruption_named) {
  char path[512];
  write_small(tpath("ck"), 5, 3, path, sizeof path);
  flip_data_byte(path, 24 + 3); /* the counter */
  EXPECT_FAIL(dpt_checkpoint_verify(path, NULL), DPT_ERR_BAD_FORMAT, path,
              "tensor '1.num_batches_tracked' fails its CRC32 check (stored ", ", computed ");
  dpt_safetensors *st = (dpt_safetensors *)1;
  EXPECT_FAIL(dpt_ckpt_open(path, &st, NULL), DPT_ERR_BAD_FORMAT, "1.num_batches_tracked", NULL,
              NULL);
  ck_assert_ptr_null(st);
  flip_data_byte(path, 24 + 3);
  TU_OK(dpt_checkpoint_verify(path, NULL));
  flip_data_byte(path, 40); /* the optimizer's tensor */
  EXPECT_FAIL(dpt_checkpoint_verify(path, NULL), DPT_ERR_BAD_FORMAT,
              "'optimizer.momentum_buffer.0.weight' fails its CRC32", NULL, NULL);

  /* Truncated: the file is named. */
  write_small(tpath("ck"), 6, 3, path, sizeof path);
  struct stat sb;
  ck_assert_int_eq(stat(path, &sb), 0);
  ck_assert_int_eq(truncate(path, sb.st_size - 10), 0);
  EXPECT_FAIL(dpt_checkpoint_verify(path, NULL), DPT_ERR_BAD_FORMAT, path, NULL, NULL);

  /* A safetensors file that is not a checkpoint, and one whose CRC list lacks a tensor. */
  const dpt_st_tensor t = {"a", weight, 1, {6}, NULL, NULL};
  TU_OK(dpt_safetensors_write(tpath("plain.st"), &t, 1, NULL));
  EXPECT_FAIL(dpt_checkpoint_verify(tpath("plain.st"), NULL), DPT_ERR_BAD_FORMAT, "plain.st",
              "not a checkpoint", NULL);
  const char *meta[] = {
      DPT_CKPT_PROGRESS_KEY,
      "{\"step\":1,\"optimizer_steps\":1,\"epoch\":0,\"batch\":0,\"skipped_steps\":0,"
      "\"skipped_in_a_row\":0,\"rollbacks\":0,\"trained_samples\":0,"
      "\"epoch_loss_sum\":0,\"epoch_samples\":0,\"lr_scale\":1,"
      "\"world_size\":1,\"seed\":\"0000000000000003\","
      "\"state_hash\":\"00000000000000ff\"}",
      DPT_CKPT_CRC_KEY, "{\"b\":\"00000000\"}", NULL};
  TU_OK(dpt_safetensors_write(tpath("nocrc.st"), &t, 1, meta));
  EXPECT_FAIL(dpt_checkpoint_verify(tpath("nocrc.st"), NULL), DPT_ERR_BAD_FORMAT,
              "tensor 'a' has no CRC32 entry", NULL, NULL);
  EXPECT_FAIL(dpt_checkpoint_verify(tpath("missing.st"), NULL), DPT_ERR_IO, "missing.st", NULL,
              NULL);
}
END_TEST

/* ---- directories ---------------------------------------------------------------------------- */

static char logged[4][1024];
static int n_logged;

static void log_skip(const char *path, const char *why, void *user) {
  ck_assert_ptr_eq(user, &n_logged);
  if (n_logged < 4) snprintf(logged[n_logged], sizeof logged[0], "%s | %s", path, why);
  ++n_logged;
}

START_TEST(find_latest_falls_back) {
  char path[512], found_path[512], p10[512], p20[512], p30[512];
  const char *dir = tpath("ck");
  int found = -1;
  dpt_checkpoint_progress p;
  TU_OK(dpt_checkpoint_find_latest(dir, NULL, NULL, found_path, sizeof found_path, &found, &p));
  ck_assert_int_eq(found, 0); /* missing dir */
  ck_assert_int_eq(mkdir(dir, 0700), 0);
  found = -1;
  TU_OK(dpt_checkpoint_find_latest(dir, NULL, NULL, found_path, sizeof found_path, &found, &p));
  ck_assert_int_eq(found, 0); /* empty dir */

  write_small(dir, 10, 5, p10, sizeof p10);
  write_small(dir, 20, 5, p20, sizeof p20);
  write_small(dir, 30, 5, p30, sizeof p30);
  n_logged = 0;
  TU_OK(dpt_checkpoint_find_latest(dir, log_skip, &n_logged, found_path, sizeof found_path, &found,
                                   &p));
  ck_assert_int_eq(found, 1);
  ck_assert_str_eq(found_path, p30);
  ck_assert_int_eq(p.step, 30);
  ck_assert_int_eq(n_logged, 0);

  flip_data_byte(p30, 2);
  TU_OK(dpt_checkpoint_find_latest(dir, log_skip, &n_logged, found_path, sizeof found_path, &found,
                                   &p));
  ck_assert_int_eq(found, 1);
  ck_assert_str_eq(found_path, p20);
  ck_assert_int_eq(p.step, 20);
  ck_assert_int_eq(n_logged, 1);
  ck_assert_msg(strstr(logged[0], p30) == logged[0] && strstr(logged[0], "'0.weight' fails"),
                "logged: %s", logged[0]);

  ck_assert_int_eq(truncate(p20, 100), 0);
  n_logged = 0;
  TU_OK(dpt_checkpoint_find_latest(dir, log_skip, &n_logged, found_path, sizeof found_path, &found,
                                   &p));
  ck_assert_str_eq(found_path, p10);
  ck_assert_int_eq(p.step, 10);
  ck_assert_int_eq(n_logged, 2);
  ck_assert_ptr_nonnull(strstr(logged[1], p20));

  flip_data_byte(p10, 0);
  n_logged = 0;
  EXPECT_FAIL(dpt_checkpoint_find_latest(dir, log_skip, &n_logged, path, sizeof path, &found, &p),
              DPT_ERR_BAD_FORMAT, "none of its 3 checkpoint(s) verifies", dir, NULL);
  ck_assert_int_eq(found, 0);
  ck_assert_int_eq(n_logged, 3);
}
END_TEST

START_TEST(keep_and_temporaries) {
  char path[512], name[512];
  const char *dir = tpath("ck");
  write_small(dir, 1, 2, path, sizeof path);
  /* What a killed writer leaves (its temporary name and the safetensors writer's own), and
   * files that are no checkpoint's. */
  const char *stale[] = {".ckpt-000000000002.tmp.99999.0", ".ckpt-000000000002.tmp.99999.0.tmp"};
  const char *others[] = {"notes.txt", "ckpt-1.safetensors", "ckpt-0000000000001.safetensors"};
  for (size_t i = 0; i < 5; ++i) {
    snprintf(name, sizeof name, "%s/%s", dir, i < 2 ? stale[i] : others[i - 2]);
    FILE *f = fopen(name, "wb");
    ck_assert_ptr_nonnull(f);
    fputs("partial", f);
    ck_assert_int_eq(fclose(f), 0);
  }
  write_small(dir, 2, 2, path, sizeof path);
  write_small(dir, 3, 2, path, sizeof path);
  char p1[512], p2[512], p3[512];
  dpt_ckpt_path(dir, 1, p1, sizeof p1);
  dpt_ckpt_path(dir, 2, p2, sizeof p2);
  dpt_ckpt_path(dir, 3, p3, sizeof p3);
  ck_assert_msg(!exists(p1), "%s should be pruned", p1);
  ck_assert(exists(p2) && exists(p3));
  for (size_t i = 0; i < 5; ++i) {
    snprintf(name, sizeof name, "%s/%s", dir, i < 2 ? stale[i] : others[i - 2]);
    ck_assert_msg(exists(name) == (i >= 2), "%s: %s", name, i < 2 ? "stale, kept" : "removed");
  }
  /* An older step written after newer ones stays (the one just written is never pruned). */
  write_small(dir, 1, 2, path, sizeof path);
  ck_assert(exists(p1) && exists(p2) && exists(p3));
  write_small(dir, 4, 1, path, sizeof path);
  ck_assert(!exists(p1) && !exists(p2) && !exists(p3));
  TU_OK(dpt_checkpoint_verify(path, NULL));
}
END_TEST

START_TEST(write_errors) {
  char path[512];
  FILE *f = fopen(tpath("file"), "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fclose(f), 0);
  const dpt_checkpoint_progress p = odd_progress(1);
  const dpt_st_tensor t = {"a", weight, 1, {6}, NULL, NULL};
  EXPECT_FAIL(dpt_ckpt_write(tpath("file/sub"), &p, &t, 1, NULL, 1, path, sizeof path), DPT_ERR_IO,
              "file/sub", "cannot create it", "Not a directory");
  EXPECT_FAIL(dpt_ckpt_write(tpath("file"), &p, &t, 1, NULL, 1, path, sizeof path), DPT_ERR_IO,
              "file", "not a directory", NULL);
  EXPECT_FAIL(dpt_ckpt_write(tpath("ck"), &p, &t, 1, NULL, 0, path, sizeof path),
              DPT_ERR_INVALID_ARG, "keep 0", NULL, NULL);
  const char *meta[] = {DPT_CKPT_CRC_KEY, "{}", NULL};
  EXPECT_FAIL(dpt_ckpt_write(tpath("ck"), &p, &t, 1, meta, 1, path, sizeof path),
              DPT_ERR_INVALID_ARG, DPT_CKPT_CRC_KEY, NULL, NULL);
  const dpt_st_tensor bad = {"b", NULL, 1, {6}, "I64", NULL};
  EXPECT_FAIL(dpt_ckpt_write(tpath("ck"), &p, &bad, 1, NULL, 1, path, sizeof path),
              DPT_ERR_INVALID_ARG, "'b'", NULL, NULL);
  /* A failed write leaves no checkpoint and no temporary file behind. */
  ck_assert_int_eq(rmdir(tpath("ck")), 0);
}
END_TEST

/* ---- export -----------------------------------------------------------------------------------
 */

/* A ResNet-8 (batch norm: running statistics and I64 counters) saved as weights; its state in
 * *state (malloc'd). */
static dpt_model *small_resnet(dpt_backend *be, float **state) {
  dpt_model_spec spec;
  TU_OK(dpt_model_spec_resnet(&spec, 1, 8, 8, 8, 10));
  dpt_model *m = NULL;
  TU_OK(dpt_model_create(be, &spec, 4, &m));
  TU_OK(dpt_model_init(m, 11));
  *state = malloc(dpt_model_state_size(m) * sizeof(float));
  ck_assert_ptr_nonnull(*state);
  TU_OK(dpt_model_get_state(m, *state));
  for (size_t i = 0; i < dpt_model_num_buffers(m); ++i) { /* counters other than 0 */
    dpt_tensor_info t;
    TU_OK(dpt_model_buffer_info(m, i, &t));
    if (t.ndim == 0) (*state)[dpt_model_num_params(m) + t.offset] = 42.0f + (float)i;
  }
  TU_OK(dpt_model_save_params(m, *state, tpath("w.st")));
  return m;
}

/* The weights file's tensors and metadata plus optimizer tensors, as a checkpoint. */
static void checkpoint_of(const char *weights, char *path, size_t cap) {
  dpt_safetensors *w = NULL;
  TU_OK(dpt_safetensors_open(weights, &w));
  const size_t n = dpt_safetensors_count(w), nm = dpt_safetensors_metadata_count(w);
  dpt_st_tensor *ts = calloc(2 * n, sizeof *ts);
  const char **kv = calloc(2 * nm + 3, sizeof *kv);
  char(*names)[128] = calloc(n, sizeof *names);
  ck_assert(ts && kv && names);
  for (size_t i = 0; i < n; ++i) {
    dpt_st_info info;
    TU_OK(dpt_safetensors_info(w, i, &info));
    const int f32 = !strcmp(info.dtype, "F32");
    ts[i] = (dpt_st_tensor){info.name,  f32 ? (const float *)info.data : NULL,
                            info.ndim,  {0},
                            info.dtype, f32 ? NULL : info.data};
    memcpy(ts[i].shape, info.shape, sizeof ts[i].shape);
    snprintf(names[i], sizeof names[i], "optimizer.momentum_buffer.%s", info.name);
    ts[n + i] = ts[i];
    ts[n + i].name = names[i];
  }
  for (size_t i = 0; i < nm; ++i)
    TU_OK(dpt_safetensors_metadata_at(w, i, &kv[2 * i], &kv[2 * i + 1]));
  kv[2 * nm] = DPT_CKPT_TERMS_KEY;
  kv[2 * nm + 1] = "{\"optimizer\":\"sgd\"}";
  const dpt_checkpoint_progress p = odd_progress(9);
  TU_OK(dpt_ckpt_write(tpath("ck"), &p, ts, 2 * n, kv, 2, path, cap));
  free(names);
  free(kv);
  free(ts);
  dpt_safetensors_close(w);
}

START_TEST(export_weights) {
  dpt_backend *be = tu_cpu();
  float *state = NULL;
  dpt_model *m = small_resnet(be, &state);
  char path[512];
  checkpoint_of(tpath("w.st"), path, sizeof path);
  TU_OK(dpt_checkpoint_export(path, tpath("out.st")));

  dpt_safetensors *st = NULL;
  TU_OK(dpt_safetensors_open(tpath("out.st"), &st));
  size_t counters = 0;
  for (size_t i = 0; i < dpt_safetensors_count(st); ++i) {
    dpt_st_info info;
    TU_OK(dpt_safetensors_info(st, i, &info));
    ck_assert_msg(strncmp(info.name, "optimizer.", 10), "%s exported", info.name);
    if (strstr(info.name, "num_batches_tracked")) {
      ck_assert_str_eq(info.dtype, "I64");
      ++counters;
    }
  }
  ck_assert_uint_gt(counters, 0);
  ck_assert_uint_eq(dpt_safetensors_count(st), dpt_model_num_tensors(m) + dpt_model_num_buffers(m));
  ck_assert_ptr_null(dpt_safetensors_metadata(st, DPT_CKPT_PROGRESS_KEY));
  ck_assert_ptr_null(dpt_safetensors_metadata(st, DPT_CKPT_TERMS_KEY));
  ck_assert_ptr_null(dpt_safetensors_metadata(st, DPT_CKPT_CRC_KEY));
  ck_assert_ptr_nonnull(dpt_safetensors_metadata(st, "dptrain.model"));
  ck_assert_str_eq(dpt_safetensors_metadata(st, "format"), "pt");
  dpt_safetensors_close(st);

  const size_t n = dpt_model_state_size(m);
  float *back = calloc(n, sizeof *back);
  ck_assert_ptr_nonnull(back);
  TU_OK(dpt_model_load_params(m, tpath("out.st"), back));
  ck_assert_mem_eq(back, state, n * sizeof *back);
  dpt_model_spec spec;
  TU_OK(dpt_model_spec_from_weights(tpath("out.st"), &spec));

  /* A corrupt checkpoint is not exported. */
  flip_data_byte(path, 0);
  EXPECT_FAIL(dpt_checkpoint_export(path, tpath("out2.st")), DPT_ERR_BAD_FORMAT, "CRC32", NULL,
              NULL);
  ck_assert(!exists(tpath("out2.st")));
  free(back);
  free(state);
  dpt_model_destroy(m);
  dpt_backend_destroy(be);
}
END_TEST

int main(void) {
  Suite *s = suite_create("checkpoint");
  TCase *tc = tcase_create("checkpoint");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, progress_json_round_trip);
  tcase_add_test(tc, run_terms_resume_check);
  tcase_add_test(tc, progress_json_errors);
  tcase_add_test(tc, write_verify_open);
  tcase_add_test(tc, corruption_named);
  tcase_add_test(tc, find_latest_falls_back);
  tcase_add_test(tc, keep_and_temporaries);
  tcase_add_test(tc, write_errors);
  tcase_add_test(tc, export_weights);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
