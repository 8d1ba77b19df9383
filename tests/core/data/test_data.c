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
#include "dptrain/safetensors.h"
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
                                      "t10k-labels-idx1-ubyte",
                                      "ds.st",
                                      "ds.st.tmp"};
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

/* ---- tensor datasets in safetensors files ------------------------------------------------- */

/* Writes tmp/ds.st with x (dtype xt, ndim xn, shape xs, bytes xb) and y (dtype yt, [ny], bytes
 * yb); a NULL name leaves that tensor out. Returns the path. */
static const char *write_ds(const char *xname, const char *xt, int xn, const int64_t *xs,
                            const void *xb, const char *yname, const char *yt, int64_t ny,
                            const void *yb) {
  dpt_st_tensor t[2];
  memset(t, 0, sizeof t);
  size_t n = 0;
  if (xname) {
    t[n].name = xname;
    t[n].dtype = xt;
    t[n].ndim = xn;
    memcpy(t[n].shape, xs, (size_t)xn * sizeof *xs);
    if (!strcmp(xt, "F32"))
      t[n].data = xb;
    else
      t[n].bytes = xb;
    n++;
  }
  if (yname) {
    t[n].name = yname;
    t[n].dtype = yt;
    t[n].ndim = 1;
    t[n].shape[0] = ny;
    if (!strcmp(yt, "F32"))
      t[n].data = yb;
    else
      t[n].bytes = yb;
    n++;
  }
  const char *path = tpath("ds.st");
  TU_OK(dpt_safetensors_write(path, t, n, NULL));
  return path;
}

/* 5 samples of 3 x 2 x 4 uint8, labels int64 with 4 classes. */
enum { SN = 5, SC = 3, SH = 2, SW = 4, SD = SC * SH * SW };
static uint8_t st_px[SN * SD];
static const int64_t st_y64[SN] = {3, 0, 2, 1, 3};

static void make_st_px(void) {
  for (int i = 0; i < SN * SD; i++)
    st_px[i] = (uint8_t)(i * 37 + 11);
}

START_TEST(st_uint8_nchw) {
  make_st_px();
  const int64_t xs[4] = {SN, SC, SH, SW};
  const char *path = write_ds("x", "U8", 4, xs, st_px, "y", "I64", SN, st_y64);
  dpt_dataset *ds = NULL;
  TU_OK(dpt_dataset_load_safetensors(path, 0, &ds));
  ck_assert_uint_eq(dpt_dataset_count(ds), SN);
  ck_assert_uint_eq(dpt_dataset_channels(ds), SC);
  ck_assert_uint_eq(dpt_dataset_rows(ds), SH);
  ck_assert_uint_eq(dpt_dataset_cols(ds), SW);
  ck_assert_uint_eq(dpt_dataset_dim(ds), SD);
  ck_assert_int_eq(dpt_dataset_num_classes(ds), 4); /* inferred: max label + 1 */
  const uint64_t idx[2] = {4, 1};
  float x[2 * SD];
  int32_t y[2];
  TU_OK(dpt_dataset_gather(ds, idx, 2, x, y));
  ck_assert_int_eq(y[0], 3);
  ck_assert_int_eq(y[1], 0);
  for (int j = 0; j < SD; j++) {
    ck_assert_float_eq(x[j], (float)st_px[4 * SD + j] / 255.0f);
    ck_assert_float_eq(x[SD + j], (float)st_px[SD + j] / 255.0f);
  }
  const uint64_t fp = dpt_dataset_fingerprint(ds);
  dpt_dataset_destroy(ds);
  /* An explicit class count above the labels' is kept; one pixel more changes the print. */
  TU_OK(dpt_dataset_load_safetensors(path, 10, &ds));
  ck_assert_int_eq(dpt_dataset_num_classes(ds), 10);
  ck_assert(dpt_dataset_fingerprint(ds) != fp);
  dpt_dataset_destroy(ds);
  st_px[7] ^= 1;
  write_ds("x", "U8", 4, xs, st_px, "y", "I64", SN, st_y64);
  TU_OK(dpt_dataset_load_safetensors(path, 0, &ds));
  ck_assert(dpt_dataset_fingerprint(ds) != fp);
  dpt_dataset_destroy(ds);
  /* The same bytes as one channel of 6 x 4: another shape, another print. */
  const int64_t xs1[4] = {SN, 1, SC * SH, SW};
  st_px[7] ^= 1;
  write_ds("x", "U8", 4, xs1, st_px, "y", "I64", SN, st_y64);
  TU_OK(dpt_dataset_load_safetensors(path, 0, &ds));
  ck_assert_uint_eq(dpt_dataset_channels(ds), 1);
  ck_assert(dpt_dataset_fingerprint(ds) != fp);
  dpt_dataset_destroy(ds);
}
END_TEST

START_TEST(st_float_features) {
  /* [N, F] float32 with int32 labels: one channel, one row, F columns; values as stored. */
  float v[4 * 6];
  for (int i = 0; i < 24; i++)
    v[i] = (float)i * 0.37f - 3.0f;
  v[5] = -0.0f;
  const int32_t lab[4] = {1, 1, 0, 2};
  const int64_t xs[2] = {4, 6};
  const char *path = write_ds("x", "F32", 2, xs, v, "y", "I32", 4, lab);
  dpt_dataset *ds = NULL;
  TU_OK(dpt_dataset_load_safetensors(path, 3, &ds));
  ck_assert_uint_eq(dpt_dataset_channels(ds), 1);
  ck_assert_uint_eq(dpt_dataset_rows(ds), 1);
  ck_assert_uint_eq(dpt_dataset_cols(ds), 6);
  ck_assert_uint_eq(dpt_dataset_dim(ds), 6);
  ck_assert_int_eq(dpt_dataset_num_classes(ds), 3);
  const uint64_t idx[4] = {0, 1, 2, 3};
  float x[24];
  int32_t y[4];
  TU_OK(dpt_dataset_gather(ds, idx, 4, x, y));
  ck_assert_mem_eq(x, v, sizeof v);
  ck_assert_mem_eq(y, lab, sizeof lab);
  dpt_dataset_destroy(ds);
  /* Float data in [N, C, H, W] with int64 labels loads too. */
  const int64_t xs4[4] = {4, 2, 1, 3};
  const int64_t lab64[4] = {0, 1, 0, 1};
  write_ds("x", "F32", 4, xs4, v, "y", "I64", 4, lab64);
  TU_OK(dpt_dataset_load_safetensors(path, 0, &ds));
  ck_assert_uint_eq(dpt_dataset_channels(ds), 2);
  ck_assert_uint_eq(dpt_dataset_cols(ds), 3);
  ck_assert_int_eq(dpt_dataset_num_classes(ds), 2);
  dpt_dataset_destroy(ds);
}
END_TEST

/* The samples are read from the file's mapping: a dataset keeps the bytes it was loaded with
 * when the file is replaced (renamed over), and float32 that lies unaligned in the file
 * (converted into memory instead) gathers and fingerprints as aligned float32 does. */
START_TEST(st_mapped) {
  make_st_px();
  const int64_t xs[4] = {SN, SC, SH, SW};
  const char *path = write_ds("x", "U8", 4, xs, st_px, "y", "I64", SN, st_y64);
  dpt_dataset *ds = NULL;
  TU_OK(dpt_dataset_load_safetensors(path, 0, &ds));
  uint8_t other[SN * SD];
  memset(other, 0, sizeof other);
  write_ds("x", "U8", 4, xs, other, "y", "I64", SN, st_y64);
  const uint64_t idx[SN] = {0, 1, 2, 3, 4};
  float x[SN * SD];
  TU_OK(dpt_dataset_gather(ds, idx, SN, x, NULL));
  for (int j = 0; j < SN * SD; j++)
    ck_assert_float_eq(x[j], (float)st_px[j] / 255.0f);
  dpt_dataset_destroy(ds);

  float v[4 * 6];
  for (int i = 0; i < 24; i++)
    v[i] = (float)i * 0.25f - 2.0f;
  const int32_t lab[4] = {1, 0, 1, 0};
  const int64_t fs[2] = {4, 6};
  write_ds("x", "F32", 2, fs, v, "y", "I32", 4, lab);
  TU_OK(dpt_dataset_load_safetensors(path, 0, &ds));
  const uint64_t aligned_fp = dpt_dataset_fingerprint(ds);
  dpt_dataset_destroy(ds);
  const uint8_t pad[3] = {1, 2, 3}; /* 3 bytes first: x starts 3 bytes past an 8-byte boundary */
  const dpt_st_tensor t[3] = {{.name = "a", .ndim = 1, .shape = {3}, .dtype = "U8", .bytes = pad},
                              {.name = "x", .data = v, .ndim = 2, .shape = {4, 6}},
                              {.name = "y", .ndim = 1, .shape = {4}, .dtype = "I32", .bytes = lab}};
  TU_OK(dpt_safetensors_write(path, t, 3, NULL));
  TU_OK(dpt_dataset_load_safetensors(path, 0, &ds));
  float got[24];
  TU_OK(dpt_dataset_gather(ds, idx, 4, got, NULL));
  ck_assert_mem_eq(got, v, sizeof v);
  ck_assert_uint_eq(dpt_dataset_fingerprint(ds), aligned_fp);
  dpt_dataset_destroy(ds);
}
END_TEST

/* Loading path fails with BAD_FORMAT naming the file and the needles; *out comes back NULL. */
static void expect_bad_ds(const char *path, int num_classes, const char *n1, const char *n2) {
  dpt_dataset *ds = (dpt_dataset *)&ds;
  EXPECT_FAIL(dpt_dataset_load_safetensors(path, num_classes, &ds), DPT_ERR_BAD_FORMAT, path, n1,
              n2);
  ck_assert_ptr_null(ds);
}

START_TEST(st_bad_inputs) {
  make_st_px();
  const int64_t xs[4] = {SN, SC, SH, SW};
  const int32_t lab32[SN] = {0, 1, 2, 3, 0};
  const char *p;
  p = write_ds(NULL, NULL, 0, NULL, NULL, "y", "I64", SN, st_y64);
  expect_bad_ds(p, 0, "no tensor named 'x'", NULL);
  p = write_ds("x", "U8", 4, xs, st_px, NULL, NULL, 0, NULL);
  expect_bad_ds(p, 0, "no tensor named 'y'", NULL);
  p = write_ds("x", "I32", 2, (const int64_t[2]){SN, SD / 4}, st_px, "y", "I64", SN, st_y64);
  expect_bad_ds(p, 0, "tensor 'x' has dtype I32", "U8");
  p = write_ds("x", "U8", 3, (const int64_t[3]){SN, SC, SH * SW}, st_px, "y", "I64", SN, st_y64);
  expect_bad_ds(p, 0, "tensor 'x' has 3 dimensions", "[N, C, H, W] or [N, F]");
  p = write_ds("x", "U8", 4, (const int64_t[4]){SN, SC, 0, SW}, st_px, "y", "I64", SN, st_y64);
  expect_bad_ds(p, 0, "tensor 'x' has a zero dimension", "dimension 2");
  p = write_ds("x", "U8", 2, (const int64_t[2]){0, SD}, st_px, "y", "I64", 0, st_y64);
  expect_bad_ds(p, 0, "tensor 'x' has a zero dimension", "dimension 0");
  p = write_ds("x", "U8", 4, xs, st_px, "y", "F32", SN, lab32);
  expect_bad_ds(p, 0, "tensor 'y' has dtype F32", NULL);
  p = write_ds("x", "U8", 4, xs, st_px, "y", "I64", SN - 1, st_y64);
  expect_bad_ds(p, 0, "'x' holds 5 samples but tensor 'y' 4 labels", NULL);
  const int64_t neg[SN] = {0, 1, -2, 1, 0};
  p = write_ds("x", "U8", 4, xs, st_px, "y", "I64", SN, neg);
  expect_bad_ds(p, 0, "tensor 'y': label -2 at index 2", NULL);
  p = write_ds("x", "U8", 4, xs, st_px, "y", "I32", SN, lab32);
  expect_bad_ds(p, 3, "tensor 'y': label 3 at index 3 is outside [0, 3)", NULL);
  const int64_t huge[SN] = {0, 1, 2, (int64_t)1 << 40, 0};
  p = write_ds("x", "U8", 4, xs, st_px, "y", "I64", SN, huge);
  expect_bad_ds(p, 0, "label 1099511627776 at index 3", NULL);
  float v[2 * 3] = {0, 1, 2, 3, NAN, 5};
  p = write_ds("x", "F32", 2, (const int64_t[2]){2, 3}, v, "y", "I32", 2, lab32);
  expect_bad_ds(p, 0, "sample 1 holds a non-finite value", NULL);
  /* Not a safetensors file at all, a missing file, bad arguments. */
  write_file(tpath("ds.st"), "garbage!garbage!", 16, 0);
  expect_bad_ds(tpath("ds.st"), 0, "header length", NULL);
  dpt_dataset *ds = NULL;
  EXPECT_FAIL(dpt_dataset_load_safetensors(tpath("none.st"), 0, &ds), DPT_ERR_IO, "none.st", NULL,
              NULL);
  EXPECT_FAIL(dpt_dataset_load_safetensors(tpath("ds.st"), -1, &ds), DPT_ERR_INVALID_ARG,
              "num_classes -1", NULL, NULL);
  EXPECT_FAIL(dpt_dataset_load_safetensors(NULL, 0, &ds), DPT_ERR_INVALID_ARG, "path is NULL", NULL,
              NULL);
}
END_TEST

/* ---- transforms ---------------------------------------------------------------------------- */

static dpt_dataset *st_dataset(void) {
  make_st_px();
  const int64_t xs[4] = {SN, SC, SH, SW};
  dpt_dataset *ds = NULL;
  TU_OK(dpt_dataset_load_safetensors(write_ds("x", "U8", 4, xs, st_px, "y", "I64", SN, st_y64), 0,
                                     &ds));
  return ds;
}

START_TEST(transform_identity) {
  dpt_dataset *ds = st_dataset();
  const uint64_t idx[4] = {2, 0, 4, 2};
  float a[4 * SD], b[4 * SD];
  int32_t ya[4], yb[4];
  TU_OK(dpt_dataset_gather(ds, idx, 4, a, ya));
  TU_OK(dpt_dataset_gather_transformed(ds, idx, 4, NULL, 3, b, yb));
  ck_assert_mem_eq(a, b, sizeof a);
  ck_assert_mem_eq(ya, yb, sizeof ya);
  const dpt_data_transform zero = {0, NULL, NULL, 0, 0, 99};
  memset(b, 0xff, sizeof b);
  TU_OK(dpt_dataset_gather_transformed(ds, idx, 4, &zero, 3, b, yb));
  ck_assert_mem_eq(a, b, sizeof a);
  ck_assert_mem_eq(ya, yb, sizeof ya);
  /* A bad index leaves the outputs alone, as plain gather does. */
  const uint64_t bad[2] = {0, 5};
  EXPECT_FAIL(dpt_dataset_gather_transformed(ds, bad, 2, &zero, 0, b, yb), DPT_ERR_INVALID_ARG,
              "indices[1] = 5", NULL, NULL);
  ck_assert_mem_eq(a, b, sizeof a);
  dpt_dataset_destroy(ds);
}
END_TEST

START_TEST(transform_normalize) {
  dpt_dataset *ds = st_dataset();
  const float mean[SC] = {0.5f, 0.25f, 0.0f}, std[SC] = {0.5f, 2.0f, 0.1f};
  const dpt_data_transform t = {SC, mean, std, 0, 0, 0};
  const uint64_t idx[2] = {3, 1};
  float x[2 * SD];
  TU_OK(dpt_dataset_gather_transformed(ds, idx, 2, &t, 0, x, NULL));
  for (int i = 0; i < 2; i++)
    for (int c = 0; c < SC; c++)
      for (int j = 0; j < SH * SW; j++) {
        const float raw = (float)st_px[idx[i] * SD + (uint64_t)(c * SH * SW + j)] / 255.0f;
        ck_assert_float_eq(x[i * SD + c * SH * SW + j], (raw - mean[c]) / std[c]);
      }
  /* One value for every channel. */
  const dpt_data_transform one = {1, mean, std, 0, 0, 0};
  TU_OK(dpt_dataset_gather_transformed(ds, idx, 1, &one, 0, x, NULL));
  for (int j = 0; j < SD; j++)
    ck_assert_float_eq(x[j], ((float)st_px[3 * SD + j] / 255.0f - 0.5f) / 0.5f);
  /* Refused settings, each named. */
  dpt_data_transform bad = {2, mean, std, 0, 0, 0};
  EXPECT_FAIL(dpt_dataset_gather_transformed(ds, idx, 1, &bad, 0, x, NULL), DPT_ERR_INVALID_ARG,
              "2 mean/std values for data of 3 channels", NULL, NULL);
  const float zero_std[SC] = {1, 0, 1};
  bad = (dpt_data_transform){SC, mean, zero_std, 0, 0, 0};
  EXPECT_FAIL(dpt_data_transform_check(&bad, ds), DPT_ERR_INVALID_ARG, "std[1] = 0", "positive",
              NULL);
  bad = (dpt_data_transform){SC, mean, NULL, 0, 0, 0};
  EXPECT_FAIL(dpt_data_transform_check(&bad, ds), DPT_ERR_INVALID_ARG, "std is NULL", NULL, NULL);
  bad = (dpt_data_transform){0, NULL, NULL, DPT_DATA_MAX_CROP_PAD + 1, 0, 0};
  EXPECT_FAIL(dpt_data_transform_check(&bad, ds), DPT_ERR_INVALID_ARG, "crop padding", NULL, NULL);
  TU_OK(dpt_data_transform_check(NULL, ds));
  dpt_dataset_destroy(ds);
}
END_TEST

/* Whether out[SD] is sample s of st_px cropped at (dy, dx) with padding P and flipped or not:
 * the offsets and flip that explain it, or 0 when none does. */
static int explain_crop(const float *out, uint64_t s, int P, int *fdy, int *fdx, int *fflip) {
  for (int flip = 0; flip < 2; flip++)
    for (int dy = 0; dy <= 2 * P; dy++)
      for (int dx = 0; dx <= 2 * P; dx++) {
        int ok = 1;
        for (int c = 0; c < SC && ok; c++)
          for (int y = 0; y < SH && ok; y++)
            for (int x = 0; x < SW && ok; x++) {
              const int sy = y + dy - P, sx = (flip ? SW - 1 - x : x) + dx - P;
              const float want =
                  sy >= 0 && sy < SH && sx >= 0 && sx < SW
                      ? (float)st_px[s * SD + (uint64_t)((c * SH + sy) * SW + sx)] / 255.0f
                      : 0.0f;
              ok = out[(c * SH + y) * SW + x] == want;
            }
        if (ok) {
          *fdy = dy;
          *fdx = dx;
          *fflip = flip;
          return 1;
        }
      }
  return 0;
}

START_TEST(transform_augment_keyed) {
  dpt_dataset *ds = st_dataset();
  const int P = 2;
  const dpt_data_transform t = {0, NULL, NULL, (size_t)P, 1, 1234};
  /* Every sample, in order, gathered at once. */
  const uint64_t all[SN] = {0, 1, 2, 3, 4};
  float ref[SN * SD];
  TU_OK(dpt_dataset_gather_transformed(ds, all, SN, &t, 7, ref, NULL));
  /* Another order, in groups of 2 and 1 (as replicas split a batch), with a repeat: each sample
   * comes out the same wherever it stands. */
  const uint64_t order[6] = {4, 2, 0, 3, 1, 4};
  float got[6 * SD];
  TU_OK(dpt_dataset_gather_transformed(ds, order, 2, &t, 7, got, NULL));
  TU_OK(dpt_dataset_gather_transformed(ds, order + 2, 1, &t, 7, got + 2 * SD, NULL));
  TU_OK(dpt_dataset_gather_transformed(ds, order + 3, 3, &t, 7, got + 3 * SD, NULL));
  for (int i = 0; i < 6; i++)
    ck_assert_mem_eq(got + i * SD, ref + order[i] * SD, SD * sizeof(float));
  /* Each output is a padded crop (offsets in [0, 2P]) of its sample, flipped or not; over
   * epochs the offsets and flips vary, and the same (seed, epoch) repeats them exactly. */
  int seen_flip[2] = {0, 0}, distinct = 0, first_dy = -1, first_dx = -1;
  for (uint64_t e = 0; e < 40; e++) {
    float a[SN * SD], b[SN * SD];
    TU_OK(dpt_dataset_gather_transformed(ds, all, SN, &t, e, a, NULL));
    TU_OK(dpt_dataset_gather_transformed(ds, all, SN, &t, e, b, NULL));
    ck_assert_mem_eq(a, b, sizeof a);
    for (uint64_t s = 0; s < SN; s++) {
      int dy, dx, flip;
      ck_assert_msg(explain_crop(a + s * SD, s, P, &dy, &dx, &flip),
                    "epoch %d sample %d is no crop of its sample", (int)e, (int)s);
      if (s != 0) continue;
      seen_flip[flip] = 1;
      if (first_dy < 0) {
        first_dy = dy;
        first_dx = dx;
      } else if (dy != first_dy || dx != first_dx) {
        distinct = 1;
      }
    }
  }
  ck_assert(seen_flip[0] && seen_flip[1]);
  ck_assert(distinct);
  /* Another seed gives other draws. */
  const dpt_data_transform t2 = {0, NULL, NULL, (size_t)P, 1, 1235};
  TU_OK(dpt_dataset_gather_transformed(ds, all, SN, &t2, 7, got, NULL));
  ck_assert(memcmp(got, ref, sizeof ref) != 0);
  /* Normalization applies after the crop: padding becomes (0 - mean) / std. */
  const float mean[1] = {0.5f}, std[1] = {0.25f};
  const dpt_data_transform tn = {1, mean, std, (size_t)P, 1, 1234};
  TU_OK(dpt_dataset_gather_transformed(ds, all, SN, &tn, 7, got, NULL));
  for (int j = 0; j < SN * SD; j++)
    ck_assert_float_eq(got[j], (ref[j] - 0.5f) / 0.25f);
  dpt_dataset_destroy(ds);
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
  tc = tcase_create("safetensors");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, st_uint8_nchw);
  tcase_add_test(tc, st_float_features);
  tcase_add_test(tc, st_mapped);
  tcase_add_test(tc, st_bad_inputs);
  tcase_add_test(tc, transform_identity);
  tcase_add_test(tc, transform_normalize);
  tcase_add_test(tc, transform_augment_keyed);
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
