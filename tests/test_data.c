/* The IDX reader and the in-memory dataset: small files written here (plain and gzip) load
 * with exact values; every malformed file gives its status and a message naming the file and
 * the problem; the installed Fashion-MNIST loads. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "dptrain/data.h"
#include "test_util.h"

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

static char tmp_dir[256];

/* A fresh private directory per test (Check forks each test). */
static void setup(void) {
  const char *base = getenv("TMPDIR");
  snprintf(tmp_dir, sizeof tmp_dir, "%s/dpt_test_data_XXXXXX", base && *base ? base : "/tmp");
  ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
}

static void teardown(void) {
  /* The file names the tests use; whatever exists is removed. */
  static const char *const names[] = {"img",
                                      "lbl",
                                      "img.gz",
                                      "lbl.gz",
                                      "train-images-idx3-ubyte.gz",
                                      "train-labels-idx1-ubyte.gz",
                                      "t10k-images-idx3-ubyte",
                                      "t10k-labels-idx1-ubyte"};
  char path[512];
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", tmp_dir, names[i]);
    remove(path);
  }
  ck_assert_int_eq(rmdir(tmp_dir), 0);
}

static const char *tpath(const char *name) {
  static char buf[4][512];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, 512, "%s/%s", tmp_dir, name);
  return p;
}

/* Writes bytes to path, gzip-compressed when gz. */
static void write_file(const char *path, const void *bytes, size_t n, int gz) {
  if (gz) {
    gzFile f = gzopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(gzwrite(f, bytes, (unsigned)n), (int)n);
    ck_assert_int_eq(gzclose(f), Z_OK);
  } else {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(bytes, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
  }
}

static void put_be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

/* An IDX file: magic, dims, then `payload` bytes of data taken from `data` (which may be
 * shorter or longer than the dims say, to make bad files). */
static void write_idx(const char *path, uint32_t magic, const uint32_t *dims, int ndims,
                      const unsigned char *data, size_t payload, int gz) {
  unsigned char *buf = malloc(4 + 4 * (size_t)ndims + payload);
  ck_assert_ptr_nonnull(buf);
  put_be32(buf, magic);
  for (int i = 0; i < ndims; i++)
    put_be32(buf + 4 + 4 * i, dims[i]);
  if (payload) memcpy(buf + 4 + 4 * ndims, data, payload);
  write_file(path, buf, 4 + 4 * (size_t)ndims + payload, gz);
  free(buf);
}

enum { N = 5, ROWS = 3, COLS = 4, DIM = ROWS * COLS };
static unsigned char pixels[N * DIM];
static unsigned char labels[N] = {3, 0, 9, 1, 7};

static void make_pixels(void) {
  for (int i = 0; i < N * DIM; i++)
    pixels[i] = (unsigned char)((i * 37 + 11) & 0xff);
  pixels[0] = 0;
  pixels[1] = 255;
}

/* A good pair of files: images at `img`, labels at `lbl`. */
static void write_good(const char *img, const char *lbl, int gz) {
  make_pixels();
  const uint32_t idims[3] = {N, ROWS, COLS}, ldims[1] = {N};
  write_idx(img, 0x803, idims, 3, pixels, sizeof pixels, gz);
  write_idx(lbl, 0x801, ldims, 1, labels, sizeof labels, gz);
}

static void check_good(const dpt_dataset *ds) {
  ck_assert_uint_eq(dpt_dataset_count(ds), N);
  ck_assert_uint_eq(dpt_dataset_rows(ds), ROWS);
  ck_assert_uint_eq(dpt_dataset_cols(ds), COLS);
  ck_assert_uint_eq(dpt_dataset_dim(ds), DIM);
  ck_assert_int_eq(dpt_dataset_num_classes(ds), 10);
  const uint64_t idx[4] = {4, 0, 2, 0};
  float x[4 * DIM];
  int32_t y[4];
  TU_OK(dpt_dataset_gather(ds, idx, 4, x, y));
  for (int b = 0; b < 4; b++) {
    ck_assert_int_eq(y[b], labels[idx[b]]);
    for (int j = 0; j < DIM; j++)
      ck_assert_float_eq(x[b * DIM + j], (float)pixels[idx[b] * DIM + j] / 255.0f);
  }
  ck_assert_float_eq(x[DIM + 0], 0.0f);
  ck_assert_float_eq(x[DIM + 1], 1.0f);
}

START_TEST(load_plain) {
  write_good(tpath("img"), tpath("lbl"), 0);
  dpt_dataset *ds = NULL;
  TU_OK(dpt_dataset_load_idx(tpath("img"), tpath("lbl"), 10, &ds));
  check_good(ds);
  dpt_dataset_destroy(ds);
}
END_TEST

START_TEST(load_gzip_by_content) {
  /* gzip under names without .gz, and a plain file named .gz: told apart by content. */
  write_good(tpath("img"), tpath("lbl.gz"), 1);
  write_good(tpath("img.gz"), tpath("lbl"), 0);
  dpt_dataset *ds = NULL;
  TU_OK(dpt_dataset_load_idx(tpath("img"), tpath("lbl"), 10, &ds));
  check_good(ds);
  dpt_dataset_destroy(ds);
  TU_OK(dpt_dataset_load_idx(tpath("img.gz"), tpath("lbl.gz"), 10, &ds));
  check_good(ds);
  dpt_dataset_destroy(ds);
  dpt_dataset_destroy(NULL);
}
END_TEST

START_TEST(gather_partial_and_errors) {
  write_good(tpath("img"), tpath("lbl"), 0);
  dpt_dataset *ds = NULL;
  TU_OK(dpt_dataset_load_idx(tpath("img"), tpath("lbl"), 10, &ds));
  const uint64_t idx[3] = {1, 5, 2};
  float x[3 * DIM];
  int32_t y[3] = {-7, -7, -7};
  for (int j = 0; j < 3 * DIM; j++)
    x[j] = -1.0f;
  EXPECT_FAIL(dpt_dataset_gather(ds, idx, 3, x, y), DPT_ERR_INVALID_ARG, "indices[1] = 5",
              "out of range", "5 samples");
  for (int j = 0; j < 3 * DIM; j++)
    ck_assert_float_eq(x[j], -1.0f); /* untouched */
  ck_assert_int_eq(y[0], -7);
  /* Labels only, x only, nothing. */
  TU_OK(dpt_dataset_gather(ds, idx, 1, NULL, y));
  ck_assert_int_eq(y[0], labels[1]);
  TU_OK(dpt_dataset_gather(ds, idx + 2, 1, x, NULL));
  ck_assert_float_eq(x[5], (float)pixels[2 * DIM + 5] / 255.0f);
  TU_OK(dpt_dataset_gather(ds, NULL, 0, NULL, NULL));
  EXPECT_FAIL(dpt_dataset_gather(NULL, idx, 1, x, y), DPT_ERR_INVALID_ARG, "dataset is NULL", NULL,
              NULL);
  dpt_dataset_destroy(ds);
}
END_TEST

START_TEST(from_memory) {
  make_pixels();
  const int32_t lab[N] = {3, 0, 9, 1, 7};
  dpt_dataset *ds = NULL;
  TU_OK(dpt_dataset_from_memory(pixels, lab, N, ROWS, COLS, 10, &ds));
  pixels[DIM * 4] ^= 0xff; /* the dataset holds a copy */
  pixels[DIM * 4] ^= 0xff;
  check_good(ds);
  dpt_dataset_destroy(ds);
  const int32_t bad[N] = {3, 0, 10, 1, 7};
  EXPECT_FAIL(dpt_dataset_from_memory(pixels, bad, N, ROWS, COLS, 10, &ds), DPT_ERR_INVALID_ARG,
              "label 10 at index 2", NULL, NULL);
  ck_assert_ptr_null(ds);
  EXPECT_FAIL(dpt_dataset_from_memory(pixels, lab, 0, ROWS, COLS, 10, &ds), DPT_ERR_INVALID_ARG,
              "count 0", NULL, NULL);
  EXPECT_FAIL(dpt_dataset_from_memory(pixels, lab, N, ROWS, COLS, 0, &ds), DPT_ERR_INVALID_ARG,
              "num_classes 0", NULL, NULL);
}
END_TEST

START_TEST(missing_file) {
  write_good(tpath("img"), tpath("lbl"), 0);
  dpt_dataset *ds = (dpt_dataset *)&ds; /* must be reset to NULL */
  EXPECT_FAIL(dpt_dataset_load_idx(tpath("nope"), tpath("lbl"), 10, &ds), DPT_ERR_IO, tpath("nope"),
              "No such file", NULL);
  ck_assert_ptr_null(ds);
  EXPECT_FAIL(dpt_dataset_load_idx(tpath("img"), tpath("nope"), 10, &ds), DPT_ERR_IO, tpath("nope"),
              "No such file", NULL);
}
END_TEST

START_TEST(wrong_magic) {
  write_good(tpath("img"), tpath("lbl"), 0);
  dpt_dataset *ds = NULL;
  /* Swapped arguments: each file is named and its magic shown. */
  EXPECT_FAIL(dpt_dataset_load_idx(tpath("lbl"), tpath("img"), 10, &ds), DPT_ERR_BAD_FORMAT,
              tpath("lbl"), "magic 0x00000801", "expected 0x00000803");
  const uint32_t dims[3] = {N, ROWS, COLS};
  write_idx(tpath("img.gz"), 0x12345678, dims, 3, pixels, sizeof pixels, 1);
  EXPECT_FAIL(dpt_dataset_load_idx(tpath("img.gz"), tpath("lbl"), 10, &ds), DPT_ERR_BAD_FORMAT,
              tpath("img.gz"), "magic 0x12345678", NULL);
  write_idx(tpath("lbl.gz"), 0x803, dims, 3, pixels, sizeof pixels, 0);
  EXPECT_FAIL(dpt_dataset_load_idx(tpath("img"), tpath("lbl.gz"), 10, &ds), DPT_ERR_BAD_FORMAT,
              tpath("lbl.gz"), "magic 0x00000803", "expected 0x00000801");
}
END_TEST

START_TEST(length_mismatch) {
  make_pixels();
  const uint32_t dims[3] = {N, ROWS, COLS};
  unsigned char big[N * DIM + 7];
  memcpy(big, pixels, sizeof pixels);
  memset(big + sizeof pixels, 0, 7);
  const uint32_t ldims[1] = {N};
  write_idx(tpath("lbl"), 0x801, ldims, 1, labels, N, 0);
  dpt_dataset *ds = NULL;
  for (int gz = 0; gz < 2; gz++) {
    char img[512]; /* tpath's buffers rotate: keep a copy */
    snprintf(img, sizeof img, "%s", gz ? tpath("img.gz") : tpath("img"));
    /* 16-byte header + 60 pixels = 76 bytes expected. */
    write_idx(img, 0x803, dims, 3, pixels, sizeof pixels - 1, gz);
    EXPECT_FAIL(dpt_dataset_load_idx(img, tpath("lbl"), 10, &ds), DPT_ERR_BAD_FORMAT, img,
                "truncated", "76");
    ck_assert_msg(strstr(dpt_last_error(), "75"), "no actual size in '%s'", dpt_last_error());
    write_idx(img, 0x803, dims, 3, big, sizeof big, gz);
    EXPECT_FAIL(dpt_dataset_load_idx(img, tpath("lbl"), 10, &ds), DPT_ERR_BAD_FORMAT, img,
                "trailing bytes", "76");
    ck_assert_msg(strstr(dpt_last_error(), "83"), "no actual size in '%s'", dpt_last_error());
    /* A header cut short. */
    write_file(img, "\0\0\x08\x03\0\0\0\x05\0\0", 10, gz);
    EXPECT_FAIL(dpt_dataset_load_idx(img, tpath("lbl"), 10, &ds), DPT_ERR_BAD_FORMAT, img,
                "truncated IDX images header", "10");
  }
  /* Labels with trailing bytes. */
  const unsigned char more[N + 1] = {1, 2, 3, 4, 5, 6};
  write_idx(tpath("img"), 0x803, dims, 3, pixels, sizeof pixels, 0);
  write_idx(tpath("lbl"), 0x801, ldims, 1, more, sizeof more, 0);
  EXPECT_FAIL(dpt_dataset_load_idx(tpath("img"), tpath("lbl"), 10, &ds), DPT_ERR_BAD_FORMAT,
              tpath("lbl"), "trailing bytes", "13");
  /* A gzip file cut in the middle of the compressed stream. */
  {
    const uint32_t d[3] = {N, ROWS, COLS};
    write_idx(tpath("img.gz"), 0x803, d, 3, pixels, sizeof pixels, 1);
    FILE *f = fopen(tpath("img.gz"), "rb");
    ck_assert_ptr_nonnull(f);
    unsigned char whole[512];
    const size_t n = fread(whole, 1, sizeof whole, f);
    fclose(f);
    ck_assert_uint_gt(n, 20);
    write_file(tpath("img.gz"), whole, n / 2, 0);
    EXPECT_FAIL(dpt_dataset_load_idx(tpath("img.gz"), tpath("lbl"), 10, &ds), DPT_ERR_BAD_FORMAT,
                tpath("img.gz"), "gzip", NULL);
  }
  /* A corrupt gzip stream (magic right, deflate data garbage). */
  unsigned char junk[64];
  memset(junk, 0xa5, sizeof junk);
  junk[0] = 0x1f;
  junk[1] = 0x8b;
  junk[2] = 8;
  junk[3] = 0;
  write_file(tpath("img.gz"), junk, sizeof junk, 0);
  EXPECT_FAIL(dpt_dataset_load_idx(tpath("img.gz"), tpath("lbl"), 10, &ds), DPT_ERR_BAD_FORMAT,
              tpath("img.gz"), "gzip", NULL);
}
END_TEST

START_TEST(bad_dimensions) {
  make_pixels();
  const uint32_t ldims[1] = {N};
  write_idx(tpath("lbl"), 0x801, ldims, 1, labels, N, 0);
  dpt_dataset *ds = NULL;
  const uint32_t zero[3] = {N, 0, COLS};
  write_idx(tpath("img"), 0x803, zero, 3, pixels, 0, 0);
  EXPECT_FAIL(dpt_dataset_load_idx(tpath("img"), tpath("lbl"), 10, &ds), DPT_ERR_BAD_FORMAT,
              tpath("img"), "zero dimension", "[5, 0, 4]");
  const uint32_t huge[3] = {0xffffffffu, 0xffffffffu, 0xffffffffu};
  write_idx(tpath("img"), 0x803, huge, 3, pixels, 16, 0);
  EXPECT_FAIL(dpt_dataset_load_idx(tpath("img"), tpath("lbl"), 10, &ds), DPT_ERR_BAD_FORMAT,
              tpath("img"), "overflow", "4294967295");
  /* Dimensions that fit the address space, in a gzip file holding 16 bytes of them:
   * truncated, and nothing near the 2.8e14 bytes claimed is allocated on the header's word. */
  const uint32_t vast[3] = {65535, 65535, 65535};
  write_idx(tpath("img.gz"), 0x803, vast, 3, pixels, 16, 1);
  EXPECT_FAIL(dpt_dataset_load_idx(tpath("img.gz"), tpath("lbl"), 10, &ds), DPT_ERR_BAD_FORMAT,
              tpath("img.gz"), "truncated", "65535");
  const uint32_t zero_labels[1] = {0};
  write_idx(tpath("lbl"), 0x801, zero_labels, 1, labels, 0, 0);
  EXPECT_FAIL(dpt_dataset_load_idx(tpath("lbl"), tpath("lbl"), 10, &ds), DPT_ERR_BAD_FORMAT,
              tpath("lbl"), "magic", NULL);
  const uint32_t idims[3] = {N, ROWS, COLS};
  write_idx(tpath("img"), 0x803, idims, 3, pixels, sizeof pixels, 0);
  EXPECT_FAIL(dpt_dataset_load_idx(tpath("img"), tpath("lbl"), 10, &ds), DPT_ERR_BAD_FORMAT,
              tpath("lbl"), "zero dimension", NULL);
}
END_TEST

START_TEST(counts_and_labels) {
  make_pixels();
  const uint32_t idims[3] = {N, ROWS, COLS}, ldims[1] = {N - 1};
  write_idx(tpath("img"), 0x803, idims, 3, pixels, sizeof pixels, 0);
  write_idx(tpath("lbl"), 0x801, ldims, 1, labels, N - 1, 0);
  dpt_dataset *ds = NULL;
  EXPECT_FAIL(dpt_dataset_load_idx(tpath("img"), tpath("lbl"), 10, &ds), DPT_ERR_BAD_FORMAT,
              "has 5 images", "has 4 labels", tpath("lbl"));
  const unsigned char bad[N] = {3, 0, 9, 10, 200};
  const uint32_t n5[1] = {N};
  write_idx(tpath("lbl.gz"), 0x801, n5, 1, bad, N, 1);
  EXPECT_FAIL(dpt_dataset_load_idx(tpath("img"), tpath("lbl.gz"), 10, &ds), DPT_ERR_BAD_FORMAT,
              tpath("lbl.gz"), "label 10 at index 3", "class count 10");
  /* The same labels are fine with more classes. */
  TU_OK(dpt_dataset_load_idx(tpath("img"), tpath("lbl.gz"), 201, &ds));
  int32_t y;
  const uint64_t i4 = 4;
  TU_OK(dpt_dataset_gather(ds, &i4, 1, NULL, &y));
  ck_assert_int_eq(y, 200);
  dpt_dataset_destroy(ds);
  EXPECT_FAIL(dpt_dataset_load_idx(tpath("img"), tpath("lbl.gz"), 0, &ds), DPT_ERR_INVALID_ARG,
              "num_classes 0", NULL, NULL);
}
END_TEST

START_TEST(load_dir) {
  /* Train compressed, test plain, as the two layouts found in the wild. */
  write_good(tpath("train-images-idx3-ubyte.gz"), tpath("train-labels-idx1-ubyte.gz"), 1);
  write_good(tpath("t10k-images-idx3-ubyte"), tpath("t10k-labels-idx1-ubyte"), 0);
  dpt_dataset *ds = NULL;
  TU_OK(dpt_dataset_load_dir(tmp_dir, "train", 10, &ds));
  check_good(ds);
  dpt_dataset_destroy(ds);
  TU_OK(dpt_dataset_load_dir(tmp_dir, "test", 10, &ds));
  check_good(ds);
  dpt_dataset_destroy(ds);
  EXPECT_FAIL(dpt_dataset_load_dir(tmp_dir, "valid", 10, &ds), DPT_ERR_INVALID_ARG,
              "unknown split 'valid'", NULL, NULL);
  remove(tpath("t10k-labels-idx1-ubyte"));
  EXPECT_FAIL(dpt_dataset_load_dir(tmp_dir, "test", 10, &ds), DPT_ERR_IO,
              tpath("t10k-labels-idx1-ubyte"), tpath("t10k-labels-idx1-ubyte.gz"), "tried");
  ck_assert_ptr_null(ds);
}
END_TEST

START_TEST(fashion_mnist) {
  if (access(FASHION_DIR, R_OK) != 0) {
    printf("fashion_mnist: skipped, %s is not installed\n", FASHION_DIR);
    return;
  }
  static const struct {
    const char *split;
    size_t count;
  } splits[2] = {{"train", 60000}, {"test", 10000}};
  for (int s = 0; s < 2; s++) {
    dpt_dataset *ds = NULL;
    TU_OK(dpt_dataset_load_dir(FASHION_DIR, splits[s].split, 10, &ds));
    ck_assert_uint_eq(dpt_dataset_count(ds), splits[s].count);
    ck_assert_uint_eq(dpt_dataset_rows(ds), 28);
    ck_assert_uint_eq(dpt_dataset_cols(ds), 28);
    ck_assert_uint_eq(dpt_dataset_dim(ds), 784);
    const size_t n = splits[s].count;
    uint64_t *idx = malloc(n * sizeof *idx);
    int32_t *y = malloc(n * sizeof *y);
    ck_assert(idx && y);
    for (size_t i = 0; i < n; i++)
      idx[i] = i;
    TU_OK(dpt_dataset_gather(ds, idx, n, NULL, y));
    /* Fashion-MNIST is balanced: exactly n / 10 of each class. */
    size_t hist[10] = {0};
    for (size_t i = 0; i < n; i++) {
      ck_assert(y[i] >= 0 && y[i] < 10);
      hist[y[i]]++;
    }
    for (int c = 0; c < 10; c++)
      ck_assert_uint_eq(hist[c], n / 10);
    float x[2 * 784];
    TU_OK(dpt_dataset_gather(ds, idx, 2, x, NULL));
    double sum = 0;
    for (int j = 0; j < 2 * 784; j++) {
      ck_assert(x[j] >= 0.0f && x[j] <= 1.0f);
      sum += x[j];
    }
    ck_assert(sum > 10.0); /* real images, not zeros */
    free(idx);
    free(y);
    dpt_dataset_destroy(ds);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("data");
  TCase *tc = tcase_create("idx");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, load_plain);
  tcase_add_test(tc, load_gzip_by_content);
  tcase_add_test(tc, gather_partial_and_errors);
  tcase_add_test(tc, missing_file);
  tcase_add_test(tc, wrong_magic);
  tcase_add_test(tc, length_mismatch);
  tcase_add_test(tc, bad_dimensions);
  tcase_add_test(tc, counts_and_labels);
  tcase_add_test(tc, load_dir);
  suite_add_tcase(s, tc);
  tc = tcase_create("memory");
  tcase_add_test(tc, from_memory);
  suite_add_tcase(s, tc);
  tc = tcase_create("fashion");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, fashion_mnist);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
