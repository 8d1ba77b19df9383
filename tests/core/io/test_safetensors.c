/* safetensors: round trips through our writer and reader, files built byte by byte the way
 * PyTorch's safetensors lays them out, and every malformed file rejected with
 * DPT_ERR_BAD_FORMAT and a message naming the file, the tensor and the problem. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, mkdir */

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dptrain/safetensors.h"
#include "test_util.h"

/* ---- a private directory per test, and the files made in it -------------------------------- */

static char tmp_dir[256];
static char made[16][64]; /* names handed out by tpath, removed by teardown */
static int n_made;

static void setup(void) {
  const char *base = getenv("TMPDIR");
  snprintf(tmp_dir, sizeof tmp_dir, "%s/dpt_test_st_XXXXXX", base && *base ? base : "/tmp");
  ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
  n_made = 0;
}

static void teardown(void) {
  char path[sizeof tmp_dir + sizeof made + 8]; /* gcc -O2 bounds made[i] by the whole array */
  for (int i = 0; i < n_made; i++) {
    snprintf(path, sizeof path, "%s/%s", tmp_dir, made[i]);
    remove(path); /* a file, or an empty directory */
    snprintf(path, sizeof path, "%s/%s.tmp", tmp_dir, made[i]);
    remove(path);
  }
  ck_assert_int_eq(rmdir(tmp_dir), 0);
}

/* tmp_dir/name, in one of 4 rotating buffers. */
static const char *tpath(const char *name) {
  static char buf[4][512];
  static int next;
  int known = 0;
  for (int i = 0; i < n_made && !known; i++)
    known = strcmp(made[i], name) == 0;
  if (!known && n_made < 16) snprintf(made[n_made++], sizeof made[0], "%s", name);
  char *p = buf[next++ % 4];
  snprintf(p, 512, "%s/%s", tmp_dir, name);
  return p;
}

static int exists(const char *path) {
  return access(path, F_OK) == 0;
}

/* Writes [8-byte length][header padded with spaces to `pad`][data]. */
static void write_raw(const char *path, uint64_t len_field, const char *header, size_t header_len,
                      const void *data, size_t data_len) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  unsigned char len8[8];
  for (int b = 0; b < 8; b++)
    len8[b] = (unsigned char)(len_field >> (8 * b));
  ck_assert_uint_eq(fwrite(len8, 1, 8, f), 8);
  ck_assert_uint_eq(fwrite(header, 1, header_len, f), header_len);
  if (data_len) ck_assert_uint_eq(fwrite(data, 1, data_len, f), data_len);
  ck_assert_int_eq(fclose(f), 0);
}

/* A file as the reference writer makes it: header padded with spaces to a multiple of 8. */
static void write_st(const char *path, const char *header, const void *data, size_t data_len) {
  char padded[4096];
  size_t n = strlen(header);
  ck_assert_uint_lt(n + 8, sizeof padded);
  memcpy(padded, header, n);
  while (n % 8)
    padded[n++] = ' ';
  write_raw(path, n, padded, n, data, data_len);
}

static unsigned char *read_all(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
  const long n = ftell(f);
  ck_assert_int_ge(n, 0);
  rewind(f);
  unsigned char *p = malloc((size_t)n + 1);
  ck_assert_ptr_nonnull(p);
  ck_assert_uint_eq(fread(p, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *size = (size_t)n;
  return p;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* ---- writing ------------------------------------------------------------------------------- */

START_TEST(write_exact_bytes) {
  /* One small tensor: the exact bytes the reference writer produces. */
  const float a[2] = {1.5f, -2.0f};
  const dpt_st_tensor t = {"a", a, 1, {2}, NULL, NULL};
  TU_OK(dpt_safetensors_write(tpath("a.st"), &t, 1, NULL));
  size_t size;
  unsigned char *f = read_all(tpath("a.st"), &size);
  const char *want = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  const size_t n = strlen(want), padded = (n + 7) / 8 * 8;
  ck_assert_uint_eq(size, 8 + padded + 8);
  uint64_t len = 0;
  for (int b = 7; b >= 0; b--)
    len = (len << 8) | f[b];
  ck_assert_uint_eq(len, padded);
  ck_assert_mem_eq(f + 8, want, n);
  for (size_t i = n; i < padded; i++)
    ck_assert_int_eq(f[8 + i], ' ');
  /* Little-endian float32: 1.5 = 0x3fc00000. */
  const unsigned char le[8] = {0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x00, 0xc0};
  ck_assert_mem_eq(f + 8 + padded, le, 8);
  free(f);
  ck_assert(!exists(tpath("a.st.tmp")));
}
END_TEST

START_TEST(round_trip) {
  const float w[6] = {1.0f,     -0.0f,     bits_f32(0x7fc01234u),
                      INFINITY, -INFINITY, bits_f32(0x00000001u)}; /* NaN payload, denormal */
  const float b[3] = {0.25f, -1e30f, 3.0f};
  const float s = 42.0f;
  const char *odd = "we\"ird\\name\n\t\x01 \xc3\xa9"; /* escapes, a control byte, UTF-8 */
  const dpt_st_tensor ts[5] = {
      {"layer.weight", w, 2, {2, 3}, NULL, NULL}, {"layer.bias", b, 1, {3}, NULL, NULL},
      {"scalar", &s, 0, {0}, NULL, NULL},         {"empty", NULL, 2, {0, 4}, NULL, NULL},
      {odd, b, 3, {1, 1, 2}, NULL, NULL},
  };
  const char *const meta[] = {"format", "pt", "note", "a \"quoted\" value", NULL};
  TU_OK(dpt_safetensors_write(tpath("rt.st"), ts, 5, meta));

  dpt_safetensors *st = NULL;
  TU_OK(dpt_safetensors_open(tpath("rt.st"), &st));
  ck_assert_uint_eq(dpt_safetensors_count(st), 5);
  for (size_t i = 0; i < 5; i++) {
    dpt_st_info info;
    TU_OK(dpt_safetensors_info(st, i, &info));
    ck_assert_str_eq(info.name, ts[i].name); /* header order = order given */
    ck_assert_str_eq(info.dtype, "F32");
    ck_assert_uint_eq(info.elem_size, 4);
    ck_assert_int_eq(info.ndim, ts[i].ndim);
    size_t count = 1;
    for (int k = 0; k < info.ndim; k++) {
      ck_assert_int_eq(info.shape[k], ts[i].shape[k]);
      count *= (size_t)ts[i].shape[k];
    }
    ck_assert_uint_eq(info.count, count);
    ck_assert_uint_eq(info.nbytes, 4 * count);
    if (count) ck_assert_mem_eq(info.data, ts[i].data, 4 * count); /* bit exact */
  }
  float got[6];
  TU_OK(dpt_safetensors_read_f32(st, "layer.weight", got, 6));
  ck_assert_mem_eq(got, w, sizeof w);
  TU_OK(dpt_safetensors_read_f32(st, odd, got, 2));
  ck_assert_mem_eq(got, b, 2 * sizeof(float));
  TU_OK(dpt_safetensors_read_f32(st, "scalar", got, 1));
  ck_assert_float_eq(got[0], 42.0f);
  TU_OK(dpt_safetensors_read_f32(st, "empty", NULL, 0));
  dpt_st_info info;
  TU_OK(dpt_safetensors_find(st, "layer.bias", &info));
  ck_assert_int_eq(info.shape[0], 3);
  ck_assert_str_eq(dpt_safetensors_metadata(st, "format"), "pt");
  ck_assert_str_eq(dpt_safetensors_metadata(st, "note"), "a \"quoted\" value");
  ck_assert_ptr_null(dpt_safetensors_metadata(st, "nope"));
  ck_assert_uint_eq(dpt_safetensors_metadata_count(st), 2);
  const char *k, *v;
  TU_OK(dpt_safetensors_metadata_at(st, 1, &k, &v));
  ck_assert_str_eq(k, "note");
  EXPECT_FAIL(dpt_safetensors_metadata_at(st, 2, &k, &v), DPT_ERR_INVALID_ARG, "index 2", NULL,
              NULL);
  EXPECT_FAIL(dpt_safetensors_info(st, 5, &info), DPT_ERR_INVALID_ARG, "index 5", NULL, NULL);
  dpt_safetensors_close(st);
  dpt_safetensors_close(NULL);

  /* The data section starts at a multiple of 8 bytes. */
  size_t size;
  unsigned char *f = read_all(tpath("rt.st"), &size);
  ck_assert_uint_eq(f[0] % 8, 0);
  ck_assert_int_eq(f[8], '{');
  ck_assert(memcmp(f + 8, "{\"__metadata__\":{\"format\":\"pt\",", 31) == 0);
  free(f);

  /* Writing again replaces the file. */
  TU_OK(dpt_safetensors_write(tpath("rt.st"), ts + 1, 1, NULL));
  TU_OK(dpt_safetensors_open(tpath("rt.st"), &st));
  ck_assert_uint_eq(dpt_safetensors_count(st), 1);
  ck_assert_uint_eq(dpt_safetensors_metadata_count(st), 0);
  dpt_safetensors_close(st);
  /* No tensors at all is a valid file. */
  TU_OK(dpt_safetensors_write(tpath("none.st"), NULL, 0, NULL));
  TU_OK(dpt_safetensors_open(tpath("none.st"), &st));
  ck_assert_uint_eq(dpt_safetensors_count(st), 0);
  EXPECT_FAIL(dpt_safetensors_find(st, "x", &info), DPT_ERR_BAD_FORMAT, "no tensor named 'x'",
              tpath("none.st"), NULL);
  dpt_safetensors_close(st);
}
END_TEST

START_TEST(write_failures) {
  const float a[2] = {1, 2};
  dpt_st_tensor t[2] = {{"a", a, 1, {2}, NULL, NULL}, {"b", a, 1, {2}, NULL, NULL}};
  /* A directory that does not exist: I/O error, nothing left behind. */
  char path[600];
  snprintf(path, sizeof path, "%s/missing/x.safetensors", tmp_dir);
  EXPECT_FAIL(dpt_safetensors_write(path, t, 2, NULL), DPT_ERR_IO, path, "No such file", NULL);
  ck_assert(!exists(path));
  snprintf(path, sizeof path, "%s/missing/x.safetensors.tmp", tmp_dir);
  ck_assert(!exists(path));

  /* The rename fails (a directory is in the way): the temporary file is removed. */
  ck_assert_int_eq(mkdir(tpath("dir"), 0700), 0);
  EXPECT_FAIL(dpt_safetensors_write(tpath("dir"), t, 2, NULL), DPT_ERR_IO, tpath("dir"), "rename",
              NULL);
  ck_assert(!exists(tpath("dir.tmp")));

  /* Bad arguments leave an existing file as it was. */
  TU_OK(dpt_safetensors_write(tpath("keep.st"), t, 2, NULL));
  size_t before_size, after_size;
  unsigned char *before = read_all(tpath("keep.st"), &before_size);
  t[1].name = "a";
  EXPECT_FAIL(dpt_safetensors_write(tpath("keep.st"), t, 2, NULL), DPT_ERR_INVALID_ARG,
              "duplicate tensor name 'a'", NULL, NULL);
  unsigned char *after = read_all(tpath("keep.st"), &after_size);
  ck_assert_uint_eq(before_size, after_size);
  ck_assert_mem_eq(before, after, before_size);
  free(before);
  free(after);
  t[1].name = "__metadata__";
  EXPECT_FAIL(dpt_safetensors_write(tpath("x.st"), t, 2, NULL), DPT_ERR_INVALID_ARG, "reserved",
              NULL, NULL);
  t[1].name = "b";
  t[1].shape[0] = -1;
  EXPECT_FAIL(dpt_safetensors_write(tpath("x.st"), t, 2, NULL), DPT_ERR_INVALID_ARG, "tensor 'b'",
              "negative", NULL);
  t[1].shape[0] = 2;
  t[1].ndim = 9;
  EXPECT_FAIL(dpt_safetensors_write(tpath("x.st"), t, 2, NULL), DPT_ERR_INVALID_ARG, "tensor 'b'",
              "ndim 9", NULL);
  t[1].ndim = 1;
  t[1].data = NULL;
  EXPECT_FAIL(dpt_safetensors_write(tpath("x.st"), t, 2, NULL), DPT_ERR_INVALID_ARG, "tensor 'b'",
              "data is NULL", NULL);
  t[1].data = a;
  t[1].name = "\xff";
  EXPECT_FAIL(dpt_safetensors_write(tpath("x.st"), t, 2, NULL), DPT_ERR_INVALID_ARG, "UTF-8", NULL,
              NULL);
  t[1].name = "b";
  const char *const odd_meta[] = {"k", NULL};
  const char *const dup_meta[] = {"k", "1", "k", "2", NULL};
  EXPECT_FAIL(dpt_safetensors_write(tpath("x.st"), t, 2, odd_meta), DPT_ERR_INVALID_ARG,
              "metadata key 'k' has no value", NULL, NULL);
  EXPECT_FAIL(dpt_safetensors_write(tpath("x.st"), t, 2, dup_meta), DPT_ERR_INVALID_ARG,
              "metadata key 'k' appears twice", NULL, NULL);
  ck_assert(!exists(tpath("x.st")));
}
END_TEST

START_TEST(write_other_dtypes) {
  /* BatchNorm's num_batches_tracked (I64 scalar) beside float and integer tensors; the raw
   * bytes are written as given, and read_i64 takes I64 and I32. */
  const float w[2] = {0.5f, -1.0f};
  const unsigned char steps[8] = {0x2a, 0, 0, 0, 0, 0, 0, 0};                    /* 42 */
  const unsigned char i32[8] = {0xff, 0xff, 0xff, 0xff, 0x07, 0x00, 0x00, 0x00}; /* -1, 7 */
  const unsigned char u8[3] = {0, 128, 255};
  const unsigned char f64[8] = {0, 0, 0, 0, 0, 0, 0xf0, 0x3f}; /* 1.0 */
  const dpt_st_tensor ts[5] = {
      {"w", w, 1, {2}, "F32", NULL},   {"bn.num_batches_tracked", NULL, 0, {0}, "I64", steps},
      {"i", NULL, 1, {2}, "I32", i32}, {"u", NULL, 1, {3}, "U8", u8},
      {"d", NULL, 1, {1}, "F64", f64},
  };
  TU_OK(dpt_safetensors_write(tpath("dt.st"), ts, 5, NULL));
  dpt_safetensors *st = NULL;
  TU_OK(dpt_safetensors_open(tpath("dt.st"), &st));
  dpt_st_info info;
  TU_OK(dpt_safetensors_find(st, "bn.num_batches_tracked", &info));
  ck_assert_str_eq(info.dtype, "I64");
  ck_assert_int_eq(info.ndim, 0);
  ck_assert_mem_eq(info.data, steps, 8);
  TU_OK(dpt_safetensors_find(st, "u", &info));
  ck_assert_str_eq(info.dtype, "U8");
  ck_assert_mem_eq(info.data, u8, 3);
  TU_OK(dpt_safetensors_find(st, "d", &info));
  ck_assert_str_eq(info.dtype, "F64");
  ck_assert_mem_eq(info.data, f64, 8);
  int64_t v[2];
  TU_OK(dpt_safetensors_read_i64(st, "bn.num_batches_tracked", v, 1));
  ck_assert_int_eq(v[0], 42);
  TU_OK(dpt_safetensors_read_i64(st, "i", v, 2));
  ck_assert_int_eq(v[0], -1);
  ck_assert_int_eq(v[1], 7);
  float f[2];
  TU_OK(dpt_safetensors_read_f32(st, "w", f, 2));
  ck_assert_float_eq(f[1], -1.0f);
  EXPECT_FAIL(dpt_safetensors_read_i64(st, "u", v, 3), DPT_ERR_BAD_FORMAT, "tensor 'u'", "dtype U8",
              NULL);
  EXPECT_FAIL(dpt_safetensors_read_i64(st, "i", v, 1), DPT_ERR_BAD_FORMAT, "holds 2 elements",
              "expected 1", NULL);
  EXPECT_FAIL(dpt_safetensors_read_i64(st, "zz", v, 1), DPT_ERR_BAD_FORMAT, "no tensor named 'zz'",
              NULL, NULL);
  dpt_safetensors_close(st);
  /* An unknown dtype, and another dtype without its bytes. */
  dpt_st_tensor bad = {"x", NULL, 1, {2}, "F99", u8};
  EXPECT_FAIL(dpt_safetensors_write(tpath("x.st"), &bad, 1, NULL), DPT_ERR_INVALID_ARG,
              "tensor 'x'", "unknown dtype 'F99'", NULL);
  bad.dtype = "I32";
  bad.bytes = NULL;
  EXPECT_FAIL(dpt_safetensors_write(tpath("x.st"), &bad, 1, NULL), DPT_ERR_INVALID_ARG,
              "tensor 'x'", "bytes is NULL", NULL);
  ck_assert(!exists(tpath("x.st")));
}
END_TEST

/* ---- reading files made by hand ------------------------------------------------------------ */

START_TEST(read_pytorch_layout) {
  /* What torch's save_file writes for nn.Linear(3, 2) plus some half-precision and integer
   * tensors: metadata first, compact JSON, padding, tensors tiling the data. */
  const char *header = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                       "\"0.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
                       "\"h\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[32,38]},"
                       "\"bf\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[38,42]},"
                       "\"step\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[42,50]},"
                       "\"mask\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[50,53]},"
                       "\"d\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[53,61]}}";
  unsigned char data[61];
  const float w[8] = {1, 2, 3, 4, 5, 6, 0.5f, -0.5f};
  for (int i = 0; i < 8; i++) {
    uint32_t u;
    memcpy(&u, &w[i], 4);
    for (int b = 0; b < 4; b++)
      data[4 * i + b] = (unsigned char)(u >> (8 * b));
  }
  const unsigned char half[6] = {0x00, 0x3c, 0x00, 0xc0, 0x00, 0x38}; /* 1, -2, 0.5 */
  const unsigned char bf16[4] = {0x80, 0x3f, 0x40, 0xc0};             /* 1, -3 */
  const unsigned char step[8] = {7, 0, 0, 0, 0, 0, 0, 0};
  const unsigned char mask[3] = {1, 0, 1};
  const unsigned char dbl[8] = {0, 0, 0, 0, 0, 0, 0xf0, 0x3f}; /* 1.0 */
  memcpy(data + 32, half, 6);
  memcpy(data + 38, bf16, 4);
  memcpy(data + 42, step, 8);
  memcpy(data + 50, mask, 3);
  memcpy(data + 53, dbl, 8);
  write_st(tpath("pt.st"), header, data, sizeof data);

  dpt_safetensors *st = NULL;
  TU_OK(dpt_safetensors_open(tpath("pt.st"), &st));
  ck_assert_uint_eq(dpt_safetensors_count(st), 7);
  ck_assert_str_eq(dpt_safetensors_metadata(st, "format"), "pt");
  float got[6];
  TU_OK(dpt_safetensors_read_f32(st, "0.weight", got, 6));
  for (int i = 0; i < 6; i++)
    ck_assert_float_eq(got[i], (float)(i + 1));
  TU_OK(dpt_safetensors_read_f32(st, "0.bias", got, 2));
  ck_assert_float_eq(got[0], 0.5f);
  ck_assert_float_eq(got[1], -0.5f);
  TU_OK(dpt_safetensors_read_f32(st, "h", got, 3));
  ck_assert_float_eq(got[0], 1.0f);
  ck_assert_float_eq(got[1], -2.0f);
  ck_assert_float_eq(got[2], 0.5f);
  TU_OK(dpt_safetensors_read_f32(st, "bf", got, 2));
  ck_assert_float_eq(got[0], 1.0f);
  ck_assert_float_eq(got[1], -3.0f);
  dpt_st_info info;
  TU_OK(dpt_safetensors_find(st, "step", &info));
  ck_assert_str_eq(info.dtype, "I64");
  ck_assert_int_eq(info.ndim, 0);
  ck_assert_uint_eq(info.count, 1);
  ck_assert_uint_eq(info.nbytes, 8);
  ck_assert_mem_eq(info.data, step, 8);
  TU_OK(dpt_safetensors_find(st, "mask", &info));
  ck_assert_str_eq(info.dtype, "BOOL");
  ck_assert_uint_eq(info.nbytes, 3);
  TU_OK(dpt_safetensors_find(st, "d", &info));
  ck_assert_uint_eq(info.elem_size, 8);
  /* read_f32's checks, each naming the tensor. */
  EXPECT_FAIL(dpt_safetensors_read_f32(st, "0.weight", got, 5), DPT_ERR_BAD_FORMAT,
              "tensor '0.weight' holds 6 elements", "expected 5", tpath("pt.st"));
  EXPECT_FAIL(dpt_safetensors_read_f32(st, "step", got, 1), DPT_ERR_BAD_FORMAT, "tensor 'step'",
              "dtype I64", NULL);
  EXPECT_FAIL(dpt_safetensors_read_f32(st, "zz", got, 1), DPT_ERR_BAD_FORMAT,
              "no tensor named 'zz'", NULL, NULL);
  EXPECT_FAIL(dpt_safetensors_find(st, "0.weigh", &info), DPT_ERR_BAD_FORMAT,
              "no tensor named '0.weigh'", tpath("pt.st"), NULL);
  dpt_safetensors_close(st);
}
END_TEST

START_TEST(read_lenient_where_the_format_is) {
  /* Pretty-printed JSON, metadata last, unknown fields ignored, escapes in names, tensors not
   * in offset order, a zero-size tensor, no padding at all. */
  const char *header = "{\n  \"b\" : { \"shape\" : [ 1 ], \"dtype\" : \"F32\", "
                       "\"data_offsets\" : [ 4 , 8 ], \"extra\": [1, -2, {\"x\": null}, true] },\n"
                       "  \"\\u00e9\\ud83d\\ude00\\/\": {\"dtype\":\"F32\",\"shape\":[1],"
                       "\"data_offsets\":[0,4]},\n"
                       "  \"z\": {\"dtype\":\"U8\",\"shape\":[0, 5],\"data_offsets\":[8,8]},\n"
                       "  \"__metadata__\": {\"k\\n\": \"v\\u0041\"}\n}";
  const float data[2] = {7.0f, 8.0f};
  write_raw(tpath("pretty.st"), strlen(header), header, strlen(header), data, sizeof data);
  dpt_safetensors *st = NULL;
  TU_OK(dpt_safetensors_open(tpath("pretty.st"), &st));
  ck_assert_uint_eq(dpt_safetensors_count(st), 3);
  float got;
  TU_OK(dpt_safetensors_read_f32(st, "\xc3\xa9\xf0\x9f\x98\x80/", &got, 1));
  ck_assert_float_eq(got, 7.0f);
  TU_OK(dpt_safetensors_read_f32(st, "b", &got, 1));
  ck_assert_float_eq(got, 8.0f);
  dpt_st_info info;
  TU_OK(dpt_safetensors_find(st, "z", &info));
  ck_assert_uint_eq(info.count, 0);
  ck_assert_str_eq(dpt_safetensors_metadata(st, "k\n"), "vA");
  dpt_safetensors_close(st);

  write_st(tpath("empty.st"), "{}", NULL, 0);
  TU_OK(dpt_safetensors_open(tpath("empty.st"), &st));
  ck_assert_uint_eq(dpt_safetensors_count(st), 0);
  dpt_safetensors_close(st);
}
END_TEST

/* One malformed file: header text (padded like the reference writer) and data bytes. */
static void expect_bad(const char *header, size_t data_len, const char *n1, const char *n2) {
  static const unsigned char zeros[64];
  ck_assert_uint_le(data_len, sizeof zeros);
  const char *path = tpath("bad.st");
  write_st(path, header, zeros, data_len);
  dpt_safetensors *st = (dpt_safetensors *)&st; /* must come back NULL */
  EXPECT_FAIL(dpt_safetensors_open(path, &st), DPT_ERR_BAD_FORMAT, path, n1, n2);
  ck_assert_ptr_null(st);
}

#define T_A "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"

START_TEST(malformed_structure) {
  /* Header length past the end of the file, and a file too short for the length. */
  write_raw(tpath("bad.st"), 1000, "{}      ", 8, NULL, 0);
  dpt_safetensors *st = NULL;
  EXPECT_FAIL(dpt_safetensors_open(tpath("bad.st"), &st), DPT_ERR_BAD_FORMAT, tpath("bad.st"),
              "header length 1000 runs past the end", NULL);
  write_raw(tpath("bad.st"), UINT64_MAX, "{}      ", 8, NULL, 0);
  EXPECT_FAIL(dpt_safetensors_open(tpath("bad.st"), &st), DPT_ERR_BAD_FORMAT, tpath("bad.st"),
              "runs past the end", NULL);
  FILE *f = fopen(tpath("bad.st"), "wb");
  ck_assert_ptr_nonnull(f);
  fputs("\x05\0\0", f);
  fclose(f);
  EXPECT_FAIL(dpt_safetensors_open(tpath("bad.st"), &st), DPT_ERR_BAD_FORMAT, tpath("bad.st"),
              "too short", NULL);
  EXPECT_FAIL(dpt_safetensors_open(tpath("missing.st"), &st), DPT_ERR_IO, tpath("missing.st"),
              "No such file", NULL);
  ck_assert_ptr_null(st);
}
END_TEST

START_TEST(malformed_json) {
  /* Syntax errors come from jansson, with the line, the column and the header byte. */
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]", 8, "line 1, column 32",
             "'}' expected near end of file");
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2", 8, "header byte 32", "']' expected");
  expect_bad("{\"a\":{\"dtype\":\"F3", 8, "premature end of input", NULL);
  expect_bad("{\"a\" {\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
             "line 1, column 6", "':' expected");
  expect_bad("{" T_A ",}", 8, "header byte", "string or '}' expected");
  expect_bad("{'a':{}}", 8, "column 2", "string or '}' expected");
  expect_bad("{\n  \"a\":\n  {\"dtype\":\"F32\",, }}", 8, "line 3, column", "near ','");
  expect_bad("[" T_A "]", 8, "must start with '{'", NULL);
  expect_bad("{" T_A "} x", 8, "end of file expected near 'x'", NULL);
  expect_bad("{" T_A "}}", 8, "end of file expected", NULL);
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", 8,
             "invalid token", NULL);
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,99999999999999999999]}}",
             8, "too big integer", NULL);
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
             8, "duplicate object key near '\"dtype\"'", NULL);
  expect_bad("{\"a\\q\":{}}", 8, "invalid escape", NULL);
  expect_bad("{\"a\\ud800\":{}}", 8, "invalid Unicode '\\uD800'", NULL);
  expect_bad("{\"a\\udc00\":{}}", 8, "invalid Unicode '\\uDC00'", NULL);
  expect_bad("{\"a\\u0000\":{}}", 8, "NUL byte", NULL);
  expect_bad("{\"a\\u12\":{}}", 8, "invalid escape", NULL);
  expect_bad("{\"a\x01\":{}}", 8, "control character", NULL);
  expect_bad("{\"a\xff\":{}}", 8, "not UTF-8", "header byte 3");
  expect_bad("{\"a\xc0\x80\":{}}", 8, "not UTF-8", NULL); /* overlong NUL */
  expect_bad("{\"__metadata__\":{}," T_A ",\"__metadata__\":{}}", 8,
             "duplicate object key near '\"__metadata__\"'", NULL);
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":nul}}", 8,
             "invalid token near 'nul'", NULL);
  /* Valid JSON that is not a safetensors header: named by tensor, or the metadata key. */
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "tensor 'a'",
             "must be an integer");
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-1,8]}}", 8, "tensor 'a'",
             "must not be negative");
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}}", 8, "tensor 'a'",
             "expected 2");
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", 8,
             "tensor 'a'", "more than 8");
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "tensor 'a'",
             "lacks \"data_offsets\"");
  expect_bad("{\"a\":{\"dtype\":3,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "tensor 'a'",
             "\"dtype\" must be a string");
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, "tensor 'a'",
             "\"shape\" must be an array");
  expect_bad("{\"a\":[1]}", 8, "tensor 'a'", "must be an object");
  expect_bad("{\"__metadata__\":{\"epoch\":3}," T_A "}", 8, "\"epoch\" is not a string", NULL);
  expect_bad("{\"__metadata__\":[]," T_A "}", 8, "\"__metadata__\" must be an object", NULL);
}
END_TEST

START_TEST(malformed_tensors) {
  /* Unknown dtype. */
  expect_bad("{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "tensor 'a'",
             "unknown dtype \"F33\"");
  /* Offsets outside the data. */
  expect_bad("{" T_A "}", 4, "tensor 'a'", "outside the data section of 4 bytes");
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "tensor 'a'",
             "end before they begin");
  /* Shape and byte size disagree. */
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 20,
             "tensor 'w'", "hold 20 bytes but shape [2, 3] of F32 needs 24");
  expect_bad("{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 24,
             "tensor 'w'", "needs 12");
  expect_bad("{\"w\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],"
             "\"data_offsets\":[0,8]}}",
             8, "tensor 'w'", "overflows");
  /* Overlapping tensors, both named. */
  expect_bad("{" T_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
             "tensors 'a' [0, 8] and 'b' [4, 12] overlap", NULL);
  /* A hole, and data no tensor covers. */
  expect_bad("{" T_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}", 16,
             "hole before tensor 'b'", "[8, 12)");
  expect_bad("{" T_A "}", 12, "cover only 8", "'a'");
  expect_bad("{}", 8, "no tensors, but 8 bytes", NULL);
  /* Duplicate names. */
  expect_bad("{" T_A "," T_A "}", 8, "duplicate object key near '\"a\"'", NULL);
  /* A name with control characters is quoted escaped: the message stays one line. */
  expect_bad("{\"a\\nb\\u001b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
             "tensor 'a\\nb\\x1b'", "needs 12");
  ck_assert_ptr_null(strchr(dpt_last_error(), '\n'));
}
END_TEST

int main(void) {
  Suite *s = suite_create("safetensors");
  TCase *tc = tcase_create("safetensors");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, write_exact_bytes);
  tcase_add_test(tc, round_trip);
  tcase_add_test(tc, write_failures);
  tcase_add_test(tc, write_other_dtypes);
  tcase_add_test(tc, read_pytorch_layout);
  tcase_add_test(tc, read_lenient_where_the_format_is);
  tcase_add_test(tc, malformed_structure);
  tcase_add_test(tc, malformed_json);
  tcase_add_test(tc, malformed_tensors);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
