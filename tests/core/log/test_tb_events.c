/* TensorBoard event files (core/log/tb_events.h) and their checksum (base/crc.h): CRC-32C and its
 * masked form against known answers; one Event's bytes against a hand-encoded string; a
 * written file read back record by record, both CRCs of each frame checked; the run's log
 * directory (core/log/run_log.h) refusing another run's files. */
#define _XOPEN_SOURCE 700
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/crc.h"
#include "core/log/run_log.h"
#include "core/log/tb_events.h"
#include "test_util.h"
#include "tmp_dir.h"

static void setup(void) {
  tu_tmp_make("tb_events");
}

static void teardown(void) {
  tu_tmp_remove();
}

START_TEST(crc32c_known_answers) {
  ck_assert_uint_eq(dpt_crc32c(0, "123456789", 9), 0xE3069283u);
  static const uint8_t zeros[32];
  ck_assert_uint_eq(dpt_crc32c(0, zeros, sizeof zeros), 0x8A9136AAu);
  uint8_t ones[32];
  memset(ones, 0xff, sizeof ones);
  ck_assert_uint_eq(dpt_crc32c(0, ones, sizeof ones), 0x62A8AB43u); /* RFC 3720 B.4 */
  ck_assert_uint_eq(dpt_crc32c(0, NULL, 0), 0);
  /* Continued in pieces: the same as at once. */
  ck_assert_uint_eq(dpt_crc32c(dpt_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
  /* The mask: rotate right by 15, add 0xa282ead8 (modulo 2^32). */
  ck_assert_uint_eq(dpt_crc32c_mask(0xE3069283u), 0xC78AB0E5u);
  ck_assert_uint_eq(dpt_crc32c_mask(0), 0xa282ead8u);
  ck_assert_uint_eq(dpt_crc32c_mask(0xffffffffu), 0xa282ead7u);
}
END_TEST

START_TEST(event_bytes) {
  /* wall_time 1.5, step 3, Summary{Value{tag "a", simple_value 0.5}}; a NaN is left out. */
  static const uint8_t want[] = {0x09, 0,    0,   0, 0,   0, 0, 0xf8, 0x3f, /* wall_time, fixed64 */
                                 0x10, 0x03,                                /* step, varint */
                                 0x2a, 0x0a,                                /* summary, 10 bytes */
                                 0x0a, 0x08,                                /* value, 8 bytes */
                                 0x0a, 0x01, 'a',                           /* tag */
                                 0x15, 0,    0,   0, 0x3f};                 /* simple_value 0.5f */
  const dpt_tb_scalar v[] = {{"a", 0.5}, {"nan", NAN}};
  uint8_t buf[64];
  const size_t n = dpt_tb_encode_event(buf, sizeof buf, 1.5, 3, NULL, v, 2);
  ck_assert_uint_eq(n, sizeof want);
  ck_assert_mem_eq(buf, want, sizeof want);
  ck_assert_uint_eq(dpt_tb_encode_event(buf, sizeof want - 1, 1.5, 3, NULL, v, 2), 0);
  /* The first record's: file_version, and a step that needs two varint bytes. */
  static const uint8_t head[] = {0x09, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0xac, 0x02, 0x1a, 13};
  const size_t m = dpt_tb_encode_event(buf, sizeof buf, 0.0, 300, "brain.Event:2", NULL, 0);
  ck_assert_uint_eq(m, sizeof head + 13);
  ck_assert_mem_eq(buf, head, sizeof head);
  ck_assert_mem_eq(buf + sizeof head, "brain.Event:2", 13);
  /* A negative step: ten bytes of two's complement. */
  ck_assert_uint_eq(dpt_tb_encode_event(buf, sizeof buf, 0.0, -1, "", NULL, 0), 9 + 11 + 2);
  /* The frame: length, its masked CRC, the data, its masked CRC (little-endian). */
  uint8_t rec[64];
  ck_assert_uint_eq(dpt_tb_frame(rec, want, sizeof want), sizeof want + 16);
  ck_assert_uint_eq(rec[0], sizeof want);
  for (int i = 1; i < 8; ++i)
    ck_assert_uint_eq(rec[i], 0);
  ck_assert_mem_eq(rec + 12, want, sizeof want);
}
END_TEST

static uint64_t le(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i)
    v = v << 8 | p[i];
  return v;
}

/* The records of an event file: each frame's CRCs checked, each Event's data copied to
 * data[k] (up to max records of 256 bytes). Returns the count. */
static int read_records(const char *path, uint8_t data[][256], size_t *len, int max) {
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  int k = 0;
  uint8_t head[12], tail[4];
  while (fread(head, 1, 12, f) == 12) {
    ck_assert_int_lt(k, max);
    ck_assert_uint_eq(le(head + 8, 4), dpt_crc32c_mask(dpt_crc32c(0, head, 8)));
    len[k] = (size_t)le(head, 8);
    ck_assert_uint_le(len[k], 256);
    ck_assert_uint_eq(fread(data[k], 1, len[k], f), len[k]);
    ck_assert_uint_eq(fread(tail, 1, 4, f), 4);
    ck_assert_uint_eq(le(tail, 4), dpt_crc32c_mask(dpt_crc32c(0, data[k], len[k])));
    ++k;
  }
  ck_assert(feof(f));
  fclose(f);
  return k;
}

START_TEST(file_read_back) {
  const char *path = tpath("events.out.tfevents.1.test");
  dpt_tb_writer *w = NULL;
  TU_OK(dpt_tb_open(path, &w));
  const dpt_tb_scalar v[] = {{"train/loss", 2.25}, {"train/lr", 0.125}};
  for (int64_t step = 1; step <= 3; ++step)
    TU_OK(dpt_tb_write(w, 1000.0 + (double)step, step, v, 2));
  const dpt_tb_scalar a[] = {{"a", 0.5}};
  TU_OK(dpt_tb_write(w, 1.5, 3, a, 1));
  dpt_tb_close(w);
  uint8_t data[8][256];
  size_t len[8];
  ck_assert_int_eq(read_records(path, data, len, 8), 5);
  /* The first: file_version, stamped with a wall time of now. */
  ck_assert_uint_eq(len[0], 9 + 2 + 2 + 13);
  ck_assert_mem_eq(data[0] + 13, "brain.Event:2", 13);
  double wall;
  memcpy(&wall, data[0] + 1, sizeof wall);
  ck_assert(wall > 1.6e9);
  for (int k = 1; k <= 3; ++k) {
    uint8_t want[256];
    const size_t n = dpt_tb_encode_event(want, sizeof want, 1000.0 + k, k, NULL, v, 2);
    ck_assert_uint_eq(len[k], n);
    ck_assert_mem_eq(data[k], want, n);
  }
  static const uint8_t last[] = {0x09, 0,    0,    0,    0,    0,    0,    0xf8,
                                 0x3f, 0x10, 0x03, 0x2a, 0x0a, 0x0a, 0x08, 0x0a,
                                 0x01, 'a',  0x15, 0,    0,    0,    0x3f};
  ck_assert_uint_eq(len[4], sizeof last);
  ck_assert_mem_eq(data[4], last, sizeof last);
  /* An existing file is never overwritten. */
  EXPECT_FAIL(dpt_tb_open(path, &w), DPT_ERR_IO, "events.out.tfevents.1.test", "exists", NULL);
  ck_assert_ptr_null(w);
}
END_TEST

START_TEST(log_dir_fresh_or_append) {
  json_t *settings = json_pack("{s:s}", "model", "mlp");
  dpt_run_log *log = NULL;
  const char *dir = tpath("a/b/run"); /* made with its parents */
  TU_OK(dpt_run_log_open(dir, 0, settings, &log));
  json_t *line = json_pack("{s:i}", "step", 1);
  const dpt_tb_scalar v[] = {{"train/loss", 1.0}};
  TU_OK(dpt_run_log_write(log, DPT_RUN_LOG_STEPS, line, 1, v, 1));
  dpt_run_log_close(log);
  /* Another fresh run there is refused; a resumed one appends. */
  EXPECT_FAIL(dpt_run_log_open(dir, 0, settings, &log), DPT_ERR_IO, "another run", "a/b/run", NULL);
  TU_OK(dpt_run_log_open(dir, 1, settings, &log));
  TU_OK(dpt_run_log_write(log, DPT_RUN_LOG_STEPS, line, 2, v, 1));
  dpt_run_log_close(log);
  char path[600];
  snprintf(path, sizeof path, "%s/steps.jsonl", dir);
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  char text[128] = "";
  const size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  ck_assert_str_eq(text, "{\"step\":1}\n{\"step\":1}\n");
  ck_assert_uint_eq(n, 22);
  /* A regular file where the directory should be. */
  FILE *g = fopen(tpath("file"), "w");
  ck_assert_ptr_nonnull(g);
  fclose(g);
  EXPECT_FAIL(dpt_run_log_open(tpath("file"), 0, settings, &log), DPT_ERR_IO, "not a directory",
              NULL, NULL);
  EXPECT_FAIL(dpt_run_log_open(tpath("file/sub"), 0, settings, &log), DPT_ERR_IO, "file/sub", NULL,
              NULL);
  json_decref(line);
  json_decref(settings);
}
END_TEST

int main(void) {
  Suite *s = suite_create("tb_events");
  TCase *crc = tcase_create("crc32c");
  tcase_add_test(crc, crc32c_known_answers);
  tcase_add_test(crc, event_bytes);
  suite_add_tcase(s, crc);
  TCase *files = tcase_create("files");
  tcase_add_checked_fixture(files, setup, teardown);
  tcase_add_test(files, file_read_back);
  tcase_add_test(files, log_dir_fresh_or_append);
  suite_add_tcase(s, files);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
