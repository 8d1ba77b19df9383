/* Interaction data: shard round trips, the assignment of shards to 2, 3 and 4 ranks (every
 * shard exactly once), the fixed-length epoch, truncated and corrupt shards refused naming the
 * file, a pattern matching nothing, fewer files than ranks split by record ranges, Criteo text
 * converted and read back (the hash and the dense transform by hand), the synthetic set's
 * determinism and planted AUC, and the metrics against closed-form cases (alone and gathered over
 * thread ranks). */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw, truncate */

#include <check.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dptrain/advanced.h"
#include "test_util.h"
#include "tmp_dir.h"
#include "tools/prep/shards.h"

static void setup(void) {
  tu_tmp_make("inter");
}

static void teardown(void) {
  tu_tmp_remove();
}

static const uint64_t sizes3[3] = {10, 1000, 7};

/* Shard `name` with n records: record r of shard s has label (r + s) % 2, dense {s, r}, sparse
 * {s, r % 1000, r % 7}. */
static void write_shard(const char *name, int s, int n) {
  dpt_shard_writer *w = NULL;
  TU_OK(dpt_shard_writer_open(tpath(name), 2, 3, sizes3, &w));
  for (int r = 0; r < n; r++) {
    const float dense[2] = {(float)s, (float)r};
    const int32_t sparse[3] = {s, r % 1000, r % 7};
    TU_OK(dpt_shard_writer_add(w, (float)((r + s) % 2), dense, sparse));
  }
  ck_assert_uint_eq(dpt_shard_writer_count(w), (uint64_t)n);
  TU_OK(dpt_shard_writer_close(w));
}

static long file_size(const char *path) {
  struct stat sb;
  ck_assert_int_eq(stat(path, &sb), 0);
  return (long)sb.st_size;
}

/* Flips bits of the byte at offset `at`. */
static void flip_byte(const char *path, long at) {
  FILE *f = fopen(path, "r+b");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fseek(f, at, SEEK_SET), 0);
  const int c = fgetc(f);
  ck_assert_int_ne(c, EOF);
  ck_assert_int_eq(fseek(f, at, SEEK_SET), 0);
  ck_assert_int_ne(fputc(c ^ 0x5a, f), EOF);
  ck_assert_int_eq(fclose(f), 0);
}

/* ---- shards -------------------------------------------------------------------------------- */

START_TEST(shard_round_trip) {
  write_shard("s-0.bin", 0, 5);
  write_shard("s-1.bin", 1, 3);
  ck_assert_int_ne(access(tpath("s-0.bin.tmp"), F_OK), 0);
  ck_assert_int_eq(file_size(tpath("s-0.bin")),
                   DPT_SHARD_HEADER_FIXED + 3 * 8 + 5 * (long)DPT_SHARD_RECORD_BYTES(2, 3));
  dpt_shard_header h;
  TU_OK(dpt_shard_read_header(tpath("s-1.bin"), &h));
  ck_assert_uint_eq(h.num_records, 3);
  ck_assert_uint_eq(h.num_dense, 2);
  ck_assert_uint_eq(h.num_sparse, 3);
  ck_assert_uint_eq(h.table_sizes[1], 1000);
  dpt_interactions *d = NULL;
  TU_OK(dpt_interactions_open(tpath("s-*.bin"), 0, 1, &d));
  ck_assert_uint_eq(dpt_interactions_num_shards(d), 2);
  ck_assert_uint_eq(dpt_interactions_local_records(d), 8);
  ck_assert_uint_eq(dpt_interactions_total_records(d), 8);
  ck_assert_uint_eq(dpt_interactions_table_sizes(d)[2], 7);
  for (size_t i = 0; i < 8; i++) {
    const int s = i < 5 ? 0 : 1, r = i < 5 ? (int)i : (int)i - 5;
    ck_assert_float_eq(dpt_interactions_label(d, i), (float)((r + s) % 2));
    ck_assert_float_eq(dpt_interactions_dense(d, i)[0], (float)s);
    ck_assert_float_eq(dpt_interactions_dense(d, i)[1], (float)r);
    ck_assert_int_eq(dpt_interactions_sparse(d, i)[0], s);
    ck_assert_int_eq(dpt_interactions_sparse(d, i)[2], r % 7);
  }
  const uint64_t idx[2] = {6, 1};
  float dense[4], labels[2];
  int32_t sparse[6];
  TU_OK(dpt_interactions_gather(d, idx, 2, dense, sparse, labels));
  ck_assert_float_eq(dense[0], 1.0f);
  ck_assert_float_eq(dense[1], 1.0f);
  ck_assert_int_eq(sparse[3], 0);
  ck_assert_int_eq(sparse[4], 1);
  ck_assert_float_eq(labels[0], 0.0f);
  ck_assert_float_eq(labels[1], 1.0f);
  const uint64_t bad[1] = {8};
  EXPECT_FAIL(dpt_interactions_gather(d, bad, 1, dense, NULL, NULL), DPT_ERR_INVALID_ARG, "8", NULL,
              NULL);
  dpt_interactions_destroy(d);
}
END_TEST

START_TEST(writer_refuses_bad_records) {
  dpt_shard_writer *w = NULL;
  TU_OK(dpt_shard_writer_open(tpath("w.bin"), 2, 3, sizes3, &w));
  const float dense[2] = {0, 0};
  const int32_t ok[3] = {9, 999, 6}, big[3] = {10, 0, 0}, neg[3] = {0, -1, 0};
  EXPECT_FAIL(dpt_shard_writer_add(w, 0.5f, dense, ok), DPT_ERR_INVALID_ARG, "label", NULL, NULL);
  EXPECT_FAIL(dpt_shard_writer_add(w, 1, dense, big), DPT_ERR_INVALID_ARG, "id 10", "of 10", NULL);
  EXPECT_FAIL(dpt_shard_writer_add(w, 1, dense, neg), DPT_ERR_INVALID_ARG, "id -1", NULL, NULL);
  TU_OK(dpt_shard_writer_add(w, 1, dense, ok));
  dpt_shard_writer_abort(w);
  ck_assert_int_ne(access(tpath("w.bin.tmp"), F_OK), 0);
  ck_assert_int_ne(access(tpath("w.bin"), F_OK), 0);
  const uint64_t zero[3] = {10, 0, 7};
  EXPECT_FAIL(dpt_shard_writer_open(tpath("w.bin"), 2, 3, zero, &w), DPT_ERR_INVALID_ARG, "table 1",
              NULL, NULL);
  ck_assert_ptr_null(w);
}
END_TEST

/* 7 shards of 1..7 records (shard s holds s + 1): each of R = 2, 3, 4 ranks reads shards
 * r, r + R, ...; together every shard exactly once and every record once. */
START_TEST(shard_assignment) {
  char name[64];
  for (int s = 0; s < 7; s++) {
    snprintf(name, sizeof name, "part-%02d.bin", s);
    write_shard(name, s, s + 1);
  }
  for (int world = 2; world <= 4; world++) {
    int seen[7] = {0};
    size_t records = 0;
    for (int rank = 0; rank < world; rank++) {
      dpt_interactions *d = NULL;
      TU_OK(dpt_interactions_open(tpath("part-*.bin"), rank, world, &d));
      ck_assert_uint_eq(dpt_interactions_num_shards(d), 7);
      ck_assert_uint_eq(dpt_interactions_total_records(d), 28);
      ck_assert_uint_eq(dpt_interactions_steps(d, 5), 5); /* floor(28 / 5), on every rank */
      size_t at = 0;
      for (size_t i = 0; i < dpt_interactions_local_shards(d); i++) {
        const size_t s = dpt_interactions_local_shard(d, i);
        ck_assert_uint_eq(s % (size_t)world, (size_t)rank);
        seen[s]++;
        snprintf(name, sizeof name, "part-%02zu.bin", s);
        ck_assert_str_eq(dpt_interactions_shard_path(d, s), tpath(name));
        /* the shard's records are next, in order */
        for (size_t r = 0; r <= s; r++, at++)
          ck_assert_int_eq(dpt_interactions_sparse(d, at)[0], (int)s);
      }
      ck_assert_uint_eq(at, dpt_interactions_local_records(d));
      records += at;
      dpt_interactions_destroy(d);
    }
    for (int s = 0; s < 7; s++)
      ck_assert_msg(seen[s] == 1, "world %d: shard %d read %d times", world, s, seen[s]);
    ck_assert_uint_eq(records, 28);
  }
}
END_TEST

/* Fewer files than ranks: contiguous record ranges over the files in order, every record read
 * by exactly one rank, the first (total mod world) ranks one record more. */
START_TEST(record_ranges) {
  write_shard("g-0.bin", 0, 5);
  write_shard("g-1.bin", 1, 3);
  for (int world = 3; world <= 8; world++) {
    int seen[8] = {0};
    uint64_t sum = 0;
    for (int rank = 0; rank < world; rank++) {
      dpt_interactions *d = NULL;
      TU_OK(dpt_interactions_open(tpath("g-*.bin"), rank, world, &d));
      const size_t n = dpt_interactions_local_records(d);
      ck_assert_uint_eq(n, 8 / world + (rank < 8 % world));
      ck_assert_uint_eq(dpt_interactions_rank_records(d, rank), n);
      ck_assert_uint_eq(dpt_interactions_total_records(d), 8);
      for (size_t i = 0; i < n; i++) { /* global record g: file g / 5, record dense[1] */
        const float *x = dpt_interactions_dense(d, i);
        const int g = (int)x[0] * 5 + (int)x[1];
        ck_assert_int_eq(g, (int)(sum + i));
        seen[g]++;
        ck_assert_float_eq(dpt_interactions_label(d, i), (float)(((int)x[1] + (int)x[0]) % 2));
      }
      const size_t s0 = dpt_interactions_local_shard(d, 0);
      ck_assert_uint_eq(s0, sum >= 5 ? 1 : 0);
      ck_assert_uint_eq(dpt_interactions_local_shards(d), sum < 5 && sum + n > 5 ? 2 : 1);
      sum += n;
      dpt_interactions_destroy(d);
    }
    for (int g = 0; g < 8; g++)
      ck_assert_msg(seen[g] == 1, "world %d: record %d read %d times", world, g, seen[g]);
  }
  /* a corrupt record outside a rank's range still fails that rank: the whole file is checked */
  flip_byte(tpath("g-1.bin"), file_size(tpath("g-1.bin")) - 1);
  dpt_interactions *d = NULL;
  EXPECT_FAIL(dpt_interactions_open(tpath("g-*.bin"), 2, 4, &d), DPT_ERR_BAD_FORMAT,
              tpath("g-1.bin"), "CRC32", NULL);
}
END_TEST

/* The epoch: every rank runs floor(total / B) steps of its dpt_batch_split share, indices into
 * its own records, the same for the same (seed, epoch), another order for another epoch; a rank
 * with few records wraps around. */
START_TEST(fixed_length_epoch) {
  write_shard("e-0.bin", 0, 40); /* rank 0: 40 records */
  write_shard("e-1.bin", 1, 3);  /* rank 1: 3 records */
  const size_t B = 8;
  for (int rank = 0; rank < 2; rank++) {
    dpt_interactions *d = NULL;
    TU_OK(dpt_interactions_open(tpath("e-*.bin"), rank, 2, &d));
    ck_assert_uint_eq(dpt_interactions_steps(d, B), 43 / 8);
    ck_assert_uint_eq(dpt_interactions_local_batch(d, B), 4);
    const size_t n = dpt_interactions_local_records(d);
    uint64_t a[4], b[4], c[4];
    int differs = 0;
    size_t hits[40] = {0};
    for (uint64_t k = 0; k < 5; k++) {
      TU_OK(dpt_interactions_step_indices(d, 7, 0, B, k, a));
      TU_OK(dpt_interactions_step_indices(d, 7, 1, B, k, c));
      TU_OK(dpt_interactions_step_indices(d, 7, 0, B, k, b));
      for (int j = 0; j < 4; j++) {
        ck_assert_uint_lt(a[j], n);
        ck_assert_uint_eq(a[j], b[j]);
        differs |= a[j] != c[j];
        hits[a[j]]++;
      }
    }
    ck_assert(differs);
    size_t most = 0;
    for (size_t i = 0; i < n; i++)
      most = hits[i] > most ? hits[i] : most;
    if (rank == 0) ck_assert_uint_eq(most, 1);      /* 20 of 40, none twice */
    if (rank == 1) ck_assert_uint_ge(most, 20 / 3); /* 20 draws of 3 records wrap */
    EXPECT_FAIL(dpt_interactions_step_indices(d, 7, 0, B, 5, a), DPT_ERR_INVALID_ARG, "step 5",
                NULL, NULL);
    dpt_interactions_destroy(d);
  }
}
END_TEST

START_TEST(truncated_and_corrupt_refused) {
  write_shard("t-0.bin", 0, 10);
  const char *p = tpath("t-0.bin");
  const long size = file_size(p);
  dpt_interactions *d = NULL;
  /* a record cut short */
  ck_assert_int_eq(truncate(p, size - 3), 0);
  EXPECT_FAIL(dpt_interactions_open(p, 0, 1, &d), DPT_ERR_BAD_FORMAT, p, "truncated", "record 9");
  ck_assert_ptr_null(d);
  /* cut inside the header */
  ck_assert_int_eq(truncate(p, 30), 0);
  EXPECT_FAIL(dpt_interactions_open(p, 0, 1, &d), DPT_ERR_BAD_FORMAT, p, "truncated", NULL);
  /* a payload byte changed: the CRC */
  write_shard("t-0.bin", 0, 10);
  flip_byte(p, size - 2);
  EXPECT_FAIL(dpt_interactions_open(p, 0, 1, &d), DPT_ERR_BAD_FORMAT, p, "CRC32", NULL);
  /* a label byte changed: named with its record */
  write_shard("t-0.bin", 0, 10);
  flip_byte(p, DPT_SHARD_HEADER_FIXED + 24 + 4 * (long)DPT_SHARD_RECORD_BYTES(2, 3));
  EXPECT_FAIL(dpt_interactions_open(p, 0, 1, &d), DPT_ERR_BAD_FORMAT, p, "record 4", "label");
  /* a table size changed: the header's CRC */
  write_shard("t-0.bin", 0, 10);
  flip_byte(p, DPT_SHARD_HEADER_FIXED + 9);
  EXPECT_FAIL(dpt_interactions_open(p, 0, 1, &d), DPT_ERR_BAD_FORMAT, p, "corrupt header", NULL);
  /* bytes after the last record */
  write_shard("t-0.bin", 0, 10);
  FILE *f = fopen(p, "ab");
  ck_assert_ptr_nonnull(f);
  fputs("xy", f);
  fclose(f);
  EXPECT_FAIL(dpt_interactions_open(p, 0, 1, &d), DPT_ERR_BAD_FORMAT, p, "2 stray bytes", NULL);
  /* not a shard */
  tu_write_text(p, "label\tI1\n1\t2\n and some more text to fill a header");
  EXPECT_FAIL(dpt_interactions_open(p, 0, 1, &d), DPT_ERR_BAD_FORMAT, p, "magic", NULL);
  /* shards that disagree on the layout */
  write_shard("t-0.bin", 0, 10);
  dpt_shard_writer *w = NULL;
  const uint64_t other[3] = {10, 1000, 8};
  TU_OK(dpt_shard_writer_open(tpath("t-1.bin"), 2, 3, other, &w));
  TU_OK(dpt_shard_writer_close(w));
  EXPECT_FAIL(dpt_interactions_open(tpath("t-*.bin"), 0, 1, &d), DPT_ERR_BAD_FORMAT,
              tpath("t-1.bin"), "differs", NULL);
}
END_TEST

START_TEST(patterns_refused) {
  dpt_interactions *d = NULL;
  EXPECT_FAIL(dpt_interactions_open(tpath("none-*.bin"), 0, 1, &d), DPT_ERR_INVALID_ARG,
              tpath("none-*.bin"), "no shard file matches", NULL);
  ck_assert_ptr_null(d);
  write_shard("f-0.bin", 0, 2);
  write_shard("f-1.bin", 1, 2);
  EXPECT_FAIL(dpt_interactions_open(tpath("f-*.bin"), 4, 5, &d), DPT_ERR_INVALID_ARG,
              tpath("f-*.bin"), "4 records for 5 ranks", NULL);
  EXPECT_FAIL(dpt_interactions_open(tpath("f-*.bin"), 3, 3, &d), DPT_ERR_INVALID_ARG, "rank 3",
              NULL, NULL);
  TU_OK(dpt_interactions_open(tpath("f-*.bin"), 1, 2, &d));
  ck_assert_uint_eq(dpt_interactions_local_records(d), 2);
  dpt_interactions_destroy(d);
}
END_TEST

/* ---- Criteo text --------------------------------------------------------------------------- */

START_TEST(criteo_hash_by_hand) {
  /* FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c, of "" the offset basis (empty: id 0 instead). */
  ck_assert_int_eq(dpt_criteo_hash("a", 1, 1000), (int32_t)(1 + 0xaf63dc4c8601ec8cULL % 999));
  ck_assert_int_eq(dpt_criteo_hash("", 0, 1000), 0);
  ck_assert_int_eq(dpt_criteo_hash("foobar", 6, 2), 1);
  /* 0x85944171f73967e8 is FNV-1a 64 of "foobar" */
  ck_assert_int_eq(dpt_criteo_hash("foobar", 6, 1u << 20),
                   (int32_t)(1 + 0x85944171f73967e8ULL % ((1u << 20) - 1)));
  ck_assert_float_eq(dpt_criteo_dense(0), 0.0f);
  ck_assert_float_eq(dpt_criteo_dense(-2), 0.0f);
  ck_assert_float_eq_tol(dpt_criteo_dense(M_E - 1), 1.0f, 1e-6f);
}
END_TEST

/* Three lines, two shards (round-robin): lines 0 and 2 in shard 0, line 1 in shard 1. */
START_TEST(criteo_round_trip) {
  tu_write_text(tpath("day.tsv"), "1\t3\t\t-1\t68fd1e64\t\t05db9164\n"
                                  "0\t0\t10\t2\t\tc1\t\r\n"
                                  "1\t\t\t1e3\tff\tff\tff\n");
  const uint64_t sizes[3] = {100, 2, 1u << 20};
  const dpt_criteo_options o = {.num_dense = 3,
                                .num_sparse = 3,
                                .table_sizes = sizes,
                                .num_shards = 2,
                                .out_dir = tpath("out"),
                                .prefix = "day"};
  const char *in[1] = {tpath("day.tsv")};
  uint64_t n = 0;
  TU_OK(dpt_criteo_convert(in, 1, &o, &n));
  ck_assert_uint_eq(n, 3);
  dpt_interactions *d = NULL;
  TU_OK(dpt_interactions_open(tpath("out/day-*.bin"), 0, 1, &d));
  ck_assert_uint_eq(dpt_interactions_num_shards(d), 2);
  ck_assert_uint_eq(dpt_interactions_shard_records(d, 0), 2);
  const int line_of[3] = {0, 2, 1}; /* local record -> line */
  const float labels[3] = {1, 0, 1};
  const double dense[3][3] = {{3, 0, -1}, {0, 10, 2}, {0, 0, 1e3}};
  const char *sparse[3][3] = {{"68fd1e64", "", "05db9164"}, {"", "c1", ""}, {"ff", "ff", "ff"}};
  for (size_t i = 0; i < 3; i++) {
    const int l = line_of[i];
    ck_assert_float_eq(dpt_interactions_label(d, i), labels[l]);
    for (int j = 0; j < 3; j++) {
      ck_assert_float_eq_tol(dpt_interactions_dense(d, i)[j],
                             dense[l][j] > 0 ? (float)log1p(dense[l][j]) : 0.0f, 1e-6f);
      ck_assert_int_eq(dpt_interactions_sparse(d, i)[j],
                       dpt_criteo_hash(sparse[l][j], strlen(sparse[l][j]), sizes[j]));
    }
  }
  ck_assert_int_eq(dpt_interactions_sparse(d, 1)[1], 1); /* any value in a table of 2 is 1 */
  ck_assert_int_eq(dpt_interactions_sparse(d, 2)[0], 0); /* empty */
  dpt_interactions_destroy(d);
}
END_TEST

START_TEST(criteo_bad_lines) {
  const uint64_t sizes[2] = {10, 10};
  char dir[512], input[512]; /* tpath's buffers rotate */
  snprintf(dir, sizeof dir, "%s", tpath("bad"));
  snprintf(input, sizeof input, "%s", tpath("in.tsv"));
  const dpt_criteo_options o = {
      .num_dense = 2, .num_sparse = 2, .table_sizes = sizes, .num_shards = 1, .out_dir = dir};
  const char *in[1] = {input};
  static const struct {
    const char *text, *want;
  } cases[] = {
      {"1\t1\t2\ta\tb\n0\t1\t2\ta\n", ":2: 4 tab-separated fields, want 5"},
      {"1\t1\t2\ta\tb\tc\n", ":1: 6 tab-separated fields"},
      {"1\t1\t2\ta\tb\n2\t1\t2\ta\tb\n", ":2: label '2' is not 0 or 1"},
      {"\t1\t2\ta\tb\n", ":1: label '' is not 0 or 1"},
      {"1\t1\t2\ta\tb\n1\t1\t2\ta\tb\n0\t1x\t2\ta\tb\n",
       ":3: dense feature 1: '1x' is not a number"},
      {"0\t1\tnan\ta\tb\n", ":1: dense feature 2: 'nan' is not a number"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    tu_write_text(in[0], cases[k].text);
    char want[600];
    snprintf(want, sizeof want, "%s%s", in[0], cases[k].want);
    EXPECT_FAIL(dpt_criteo_convert(in, 1, &o, NULL), DPT_ERR_BAD_FORMAT, want, NULL, NULL);
    ck_assert_int_ne(access(tpath("bad/shard-00000.bin"), F_OK), 0);
    ck_assert_int_ne(access(tpath("bad/shard-00000.bin.tmp"), F_OK), 0);
  }
  const char *missing[1] = {tpath("missing.tsv")};
  EXPECT_FAIL(dpt_criteo_convert(missing, 1, &o, NULL), DPT_ERR_IO, "missing.tsv", NULL, NULL);
}
END_TEST

/* ---- synthetic interactions ---------------------------------------------------------------- */

START_TEST(synth_deterministic_and_learnable) {
  dpt_synth_config c;
  dpt_synth_default(&c);
  c.rows = 10000;
  const size_t n = 20000;
  float *prob = malloc(n * sizeof *prob), *label = malloc(n * sizeof *label);
  ck_assert_ptr_nonnull(prob);
  ck_assert_ptr_nonnull(label);
  float dense[4], dense2[4], l2, p2;
  int32_t sparse[8], sparse2[8];
  double rate = 0;
  int seed_differs = 0;
  for (size_t i = 0; i < n; i++) {
    TU_OK(dpt_synth_record(&c, i, dense, sparse, &label[i], &prob[i]));
    TU_OK(dpt_synth_record(&c, i, dense2, sparse2, &l2, &p2));
    ck_assert(!memcmp(dense, dense2, sizeof dense) && !memcmp(sparse, sparse2, sizeof sparse));
    ck_assert(l2 == label[i] && p2 == prob[i]);
    for (int t = 0; t < 8; t++)
      ck_assert(sparse[t] >= 0 && (uint64_t)sparse[t] < c.rows);
    rate += label[i];
    if (i < 50) {
      dpt_synth_config c2 = c;
      c2.seed = 1;
      TU_OK(dpt_synth_record(&c2, i, dense2, sparse2, &l2, &p2));
      seed_differs |= p2 != prob[i];
    }
  }
  ck_assert(seed_differs);
  rate /= (double)n;
  ck_assert(rate > 0.1 && rate < 0.6);
  double auc;
  TU_OK(dpt_auc(prob, label, n, &auc));
  ck_assert_msg(auc > 0.6, "planted AUC %.4f", auc);
  /* popularity: row 0 is the most frequent id of table 0 */
  size_t zero = 0;
  for (size_t i = 0; i < 2000; i++) {
    TU_OK(dpt_synth_record(&c, i, dense, sparse, NULL, NULL));
    zero += sparse[0] == 0;
  }
  ck_assert_uint_gt(zero, 2000 / 20);
  c.tables = 1;
  EXPECT_FAIL(dpt_synth_record(&c, 0, dense, sparse, NULL, NULL), DPT_ERR_INVALID_ARG, "tables",
              NULL, NULL);
  free(prob);
  free(label);
}
END_TEST

/* ---- metrics ------------------------------------------------------------------------------- */

START_TEST(auc_closed_forms) {
  const float s[4] = {0.1f, 0.2f, 0.3f, 0.4f};
  const float up[4] = {0, 0, 1, 1}, down[4] = {1, 1, 0, 0};
  double a;
  TU_OK(dpt_auc(s, up, 4, &a));
  ck_assert_double_eq(a, 1.0);
  TU_OK(dpt_auc(s, down, 4, &a));
  ck_assert_double_eq(a, 0.0);
  const float same[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  TU_OK(dpt_auc(same, up, 4, &a));
  ck_assert_double_eq(a, 0.5);
  /* scikit-learn's example: 0.75 */
  const float s2[4] = {0.1f, 0.4f, 0.35f, 0.8f};
  TU_OK(dpt_auc(s2, up, 4, &a));
  ck_assert_double_eq_tol(a, 0.75, 1e-12);
  /* ties by hand: positives 0.5, 0.9; negatives 0.5, 0.2: (0.5 + 1 + 1 + 1) / 4 */
  const float s3[4] = {0.5f, 0.5f, 0.2f, 0.9f}, l3[4] = {1, 0, 0, 1};
  TU_OK(dpt_auc(s3, l3, 4, &a));
  ck_assert_double_eq_tol(a, 0.875, 1e-12);
  /* 3 positives, 3 negatives, a tie of two positives and a negative at 0.5:
   * p 0.9 beats all 3 (3); p 0.5 x2: beat n 0.1 (1) + half of n 0.5 (0.5) = 1.5 each; n 0.7 sits
   * above them: total 3 + 1.5 + 1.5 = 6 of 9 */
  const float s4[6] = {0.9f, 0.5f, 0.5f, 0.5f, 0.1f, 0.7f}, l4[6] = {1, 1, 1, 0, 0, 0};
  TU_OK(dpt_auc(s4, l4, 6, &a));
  ck_assert_double_eq_tol(a, 6.0 / 9.0, 1e-12);
  const float ones[4] = {1, 1, 1, 1};
  EXPECT_FAIL(dpt_auc(s, ones, 4, &a), DPT_ERR_INVALID_ARG, "both classes", "0 negatives", NULL);
  ck_assert(isnan(a));
  EXPECT_FAIL(dpt_auc(s, up, 0, &a), DPT_ERR_INVALID_ARG, "both classes", NULL, NULL);
  const float bad[2] = {NAN, 0};
  EXPECT_FAIL(dpt_auc(bad, up, 2, &a), DPT_ERR_INVALID_ARG, "score 0", NULL, NULL);
}
END_TEST

START_TEST(logloss_and_recall) {
  const float half[2] = {0.5f, 0.5f}, l[2] = {0, 1};
  double v;
  TU_OK(dpt_logloss(half, l, 2, &v));
  ck_assert_double_eq_tol(v, log(2.0), 1e-12);
  const float p[2] = {0.0f, 0.8f}; /* 0 clamps to 1e-7 for the negative: -log(1 - 1e-7) */
  TU_OK(dpt_logloss(p, l, 2, &v));
  ck_assert_double_eq_tol(v, (-log1p(-1e-7) - log(0.8f)) / 2, 1e-9);
  EXPECT_FAIL(dpt_logloss(p, l, 0, &v), DPT_ERR_INVALID_ARG, NULL, NULL, NULL);
  /* group 7: positives at ranks 1 and 3 of 4; group 3: its positive ranked 2nd of 3, tied with
   * a negative (negatives first on a tie: 3rd); group 9 has no positive (skipped).
   * recall@1: group 7 1/1, group 3 0/1 -> 0.5; recall@2: 7: 1/2, 3: 0/1 -> 0.25;
   * recall@3: 7: 2/2, 3: 1/1 -> 1. */
  const float s[9] = {0.9f, 0.8f, 0.7f, 0.1f, 0.5f, 0.9f, 0.5f, 0.2f, 0.3f};
  const float lab[9] = {1, 0, 1, 0, 1, 0, 0, 0, 0};
  const int64_t g[9] = {7, 7, 7, 7, 3, 3, 3, 9, 9};
  TU_OK(dpt_recall_at_k(s, lab, g, 9, 1, &v));
  ck_assert_double_eq_tol(v, 0.5, 1e-12);
  TU_OK(dpt_recall_at_k(s, lab, g, 9, 2, &v));
  ck_assert_double_eq_tol(v, 0.25, 1e-12);
  TU_OK(dpt_recall_at_k(s, lab, g, 9, 3, &v));
  ck_assert_double_eq_tol(v, 1.0, 1e-12);
  EXPECT_FAIL(dpt_recall_at_k(s, lab, g, 9, 0, &v), DPT_ERR_INVALID_ARG, "k is 0", NULL, NULL);
  const float none[2] = {0, 0};
  EXPECT_FAIL(dpt_recall_at_k(s, none, g, 2, 1, &v), DPT_ERR_INVALID_ARG, "no group", NULL, NULL);
}
END_TEST

/* The gathered AUC and logloss over R thread ranks equal the single-process ones. */
#define GN 1001
static float g_scores[GN], g_labels[GN];

typedef struct rank_arg {
  dpt_comm_group *group;
  int rank, world;
  double auc, ll;
  dpt_status st;
} rank_arg;

static void *rank_main(void *p) {
  rank_arg *a = p;
  dpt_comm *c = NULL;
  a->st = dpt_comm_group_member(a->group, a->rank, &c);
  if (a->st != DPT_OK) return NULL;
  /* uneven slices: rank r takes [r * GN / R, (r + 1) * GN / R), the last one nothing extra */
  const size_t lo = (size_t)a->rank * GN / (size_t)a->world;
  size_t hi = (size_t)(a->rank + 1) * GN / (size_t)a->world;
  if (a->rank == 1) hi = lo; /* one rank with no pair at all */
  if (a->rank == 0 && a->world > 1) hi = (size_t)2 * GN / (size_t)a->world;
  a->st = dpt_auc_comm(c, g_scores + lo, g_labels + lo, hi - lo, &a->auc);
  if (a->st == DPT_OK) a->st = dpt_logloss_comm(c, g_scores + lo, g_labels + lo, hi - lo, &a->ll);
  dpt_comm_destroy(c);
  return NULL;
}

START_TEST(metrics_gathered_over_ranks) {
  tu_rng r = {42};
  for (int i = 0; i < GN; i++) {
    g_labels[i] = tu_unit(&r) < 0.3 ? 1.0f : 0.0f;
    /* quantized scores: many ties */
    g_scores[i] = (float)(0.05 + 0.9 * floor(10 * (0.3 * g_labels[i] + 0.7 * tu_unit(&r))) / 10);
  }
  double want_auc, want_ll;
  TU_OK(dpt_auc(g_scores, g_labels, GN, &want_auc));
  TU_OK(dpt_logloss(g_scores, g_labels, GN, &want_ll));
  for (int world = 2; world <= 3; world++) {
    dpt_comm_group *group = NULL;
    TU_OK(dpt_comm_group_create(world, &group));
    rank_arg args[3];
    pthread_t th[3];
    for (int k = 0; k < world; k++) {
      args[k] = (rank_arg){.group = group, .rank = k, .world = world};
      ck_assert_int_eq(pthread_create(&th[k], NULL, rank_main, &args[k]), 0);
    }
    for (int k = 0; k < world; k++)
      pthread_join(th[k], NULL);
    dpt_comm_group_destroy(group);
    /* rank 0 took its own and rank 1's slice, so the union is everything */
    for (int k = 0; k < world; k++) {
      ck_assert_msg(args[k].st == DPT_OK, "rank %d: %s", k, dpt_status_str(args[k].st));
      ck_assert_double_eq(args[k].auc, want_auc);
      ck_assert_double_eq_tol(args[k].ll, want_ll, 1e-12);
    }
  }
}
END_TEST

/* A rank whose pairs do not fit in memory: every rank returns an error (none waits for it). */
static void *huge_rank_main(void *p) {
  rank_arg *a = p;
  dpt_comm *c = NULL;
  a->st = dpt_comm_group_member(a->group, a->rank, &c);
  if (a->st != DPT_OK) return NULL;
  const size_t n = a->rank == 2 ? SIZE_MAX / 4 : 10; /* never read: the gather fails first */
  a->st = dpt_auc_comm(c, g_scores, g_labels, n, &a->auc);
  dpt_comm_destroy(c);
  return NULL;
}

START_TEST(auc_out_of_memory_ends_every_rank) {
  dpt_comm_group *group = NULL;
  TU_OK(dpt_comm_group_create(3, &group));
  rank_arg args[3];
  pthread_t th[3];
  for (int k = 0; k < 3; k++) {
    args[k] = (rank_arg){.group = group, .rank = k, .world = 3};
    ck_assert_int_eq(pthread_create(&th[k], NULL, huge_rank_main, &args[k]), 0);
  }
  for (int k = 0; k < 3; k++)
    pthread_join(th[k], NULL);
  dpt_comm_group_destroy(group);
  for (int k = 0; k < 3; k++) {
    ck_assert_int_eq(args[k].st, DPT_ERR_OUT_OF_MEMORY);
    ck_assert(isnan(args[k].auc));
  }
}
END_TEST

/* dpt_interactions_open_node: 4 thread ranks, ranks 0-1 seeing directory a (3 shards), ranks 2-3
 * directory b (4 shards); then rank 3 seeing nothing. */
typedef struct node_arg {
  dpt_comm_group *group;
  int rank;
  const char *pattern;
  dpt_status st;
  char msg[256];
  uint64_t total, fingerprint, rank_records[4];
  size_t local, shards, first_id[2];
} node_arg;

static void *node_main(void *p) {
  node_arg *a = p;
  dpt_comm *c = NULL;
  a->st = dpt_comm_group_member(a->group, a->rank, &c);
  if (a->st != DPT_OK) return NULL;
  dpt_interactions *d = NULL;
  a->st = dpt_interactions_open_node(a->pattern, c, &d);
  if (a->st != DPT_OK) snprintf(a->msg, sizeof a->msg, "%s", dpt_last_error());
  if (d) {
    a->total = dpt_interactions_total_records(d);
    a->fingerprint = dpt_interactions_fingerprint(d);
    for (int q = 0; q < 4; q++)
      a->rank_records[q] = dpt_interactions_rank_records(d, q);
    a->local = dpt_interactions_local_records(d);
    a->shards = dpt_interactions_local_shards(d);
    for (size_t i = 0; i < 2 && a->local; i++) /* the first and last records' shard ids */
      a->first_id[i] = (size_t)dpt_interactions_sparse(d, i ? a->local - 1 : 0)[0];
  }
  dpt_interactions_destroy(d);
  dpt_comm_destroy(c);
  return NULL;
}

static void run_node_ranks(node_arg *args, const char *const *patterns) {
  dpt_comm_group *group = NULL;
  TU_OK(dpt_comm_group_create(4, &group));
  pthread_t th[4];
  for (int k = 0; k < 4; k++) {
    args[k] = (node_arg){.group = group, .rank = k, .pattern = patterns[k]};
    ck_assert_int_eq(pthread_create(&th[k], NULL, node_main, &args[k]), 0);
  }
  for (int k = 0; k < 4; k++)
    pthread_join(th[k], NULL);
  dpt_comm_group_destroy(group);
}

START_TEST(node_shards) {
  char name[64];
  ck_assert_int_eq(mkdir(tpath("a"), 0755), 0);
  ck_assert_int_eq(mkdir(tpath("b"), 0755), 0);
  for (int s = 0; s < 7; s++) { /* shard s: s + 1 records whose sparse[0] is s */
    snprintf(name, sizeof name, "%s/part-%02d.bin", s < 3 ? "a" : "b", s);
    write_shard(name, s, s + 1);
  }
  char pa[512], pb[512];
  snprintf(pa, sizeof pa, "%s", tpath("a/part-*.bin"));
  snprintf(pb, sizeof pb, "%s", tpath("b/part-*.bin"));
  node_arg args[4];
  const char *const seen[4] = {pa, pa, pb, pb};
  run_node_ranks(args, seen);
  /* rank 0: a/0 and a/2; rank 1: a/1; rank 2: b/3 and b/5; rank 3: b/4 and b/6 */
  const uint64_t want[4] = {1 + 3, 2, 4 + 6, 5 + 7};
  const size_t first[4] = {0, 1, 3, 4}, last[4] = {2, 1, 5, 6};
  for (int k = 0; k < 4; k++) {
    ck_assert_msg(args[k].st == DPT_OK, "rank %d: %s", k, args[k].msg);
    ck_assert_uint_eq(args[k].total, 28);
    ck_assert_uint_eq(args[k].fingerprint, args[0].fingerprint);
    ck_assert_uint_eq(args[k].local, want[k]);
    ck_assert_uint_eq(args[k].shards, k == 1 ? 1 : 2);
    ck_assert_uint_eq(args[k].first_id[0], first[k]);
    ck_assert_uint_eq(args[k].first_id[1], last[k]);
    for (int q = 0; q < 4; q++)
      ck_assert_uint_eq(args[k].rank_records[q], want[q]);
  }
  /* other files on one node: another fingerprint */
  const char *const swapped[4] = {pb, pb, pa, pa};
  run_node_ranks(args, swapped);
  ck_assert_int_eq(args[0].st, DPT_OK);
  const uint64_t fp = args[0].fingerprint;
  run_node_ranks(args, seen);
  ck_assert_uint_ne(fp, args[0].fingerprint);
  /* rank 3 sees no file: it says why, the others name it, nobody waits */
  char pn[512];
  snprintf(pn, sizeof pn, "%s", tpath("none-*.bin"));
  const char *const missing[4] = {pa, pa, pb, pn};
  run_node_ranks(args, missing);
  ck_assert_int_eq(args[3].st, DPT_ERR_INVALID_ARG);
  ck_assert_msg(strstr(args[3].msg, "no shard file matches"), "%s", args[3].msg);
  for (int k = 0; k < 3; k++) {
    ck_assert_int_eq(args[k].st, DPT_ERR_INVALID_ARG);
    ck_assert_msg(strstr(args[k].msg, "rank 3 could not read its shards"), "%s", args[k].msg);
  }
  /* three ranks seeing directory a's 3 files is fine; four seeing b's 4 too; five would not */
  const char *const crowd[4] = {pa, pa, pa, pb};
  run_node_ranks(args, crowd);
  for (int k = 0; k < 4; k++)
    ck_assert_msg(args[k].st == DPT_OK, "rank %d: %s", k, args[k].msg);
  ck_assert_uint_eq(args[3].local, 4 + 5 + 6 + 7);
  const char *const two_files[4] = {pb, pb, pb, tpath("a/part-0[01].bin")};
  run_node_ranks(args, two_files);
  ck_assert_int_eq(args[3].st, DPT_OK);
  write_shard("a/part-09.bin", 9, 3); /* a's 4th file; now ranks 0-3 all see 4 files of a... */
  const char *const all_a[4] = {pa, pa, pa, pa};
  run_node_ranks(args, all_a);
  for (int k = 0; k < 4; k++)
    ck_assert_msg(args[k].st == DPT_OK, "rank %d: %s", k, args[k].msg);
  ck_assert_uint_eq(args[0].total, 1 + 2 + 3 + 3);
  remove(tpath("a/part-09.bin"));
  run_node_ranks(args, all_a); /* ...and with 3 files (6 records), 4 record ranges of them */
  const uint64_t range[4] = {2, 2, 1, 1};
  const size_t lo_id[4] = {0, 1, 2, 2}, hi_id[4] = {1, 2, 2, 2};
  for (int k = 0; k < 4; k++) {
    ck_assert_msg(args[k].st == DPT_OK, "rank %d: %s", k, args[k].msg);
    ck_assert_uint_eq(args[k].total, 6);
    ck_assert_uint_eq(args[k].local, range[k]);
    ck_assert_uint_eq(args[k].first_id[0], lo_id[k]);
    ck_assert_uint_eq(args[k].first_id[1], hi_id[k]);
    ck_assert_uint_eq(args[k].fingerprint, args[0].fingerprint);
  }
  /* one record for four ranks: every rank stops, the empty ones saying why */
  char p0[512];
  snprintf(p0, sizeof p0, "%s", tpath("a/part-00.bin"));
  const char *const one[4] = {p0, p0, p0, p0};
  run_node_ranks(args, one);
  for (int k = 0; k < 4; k++)
    ck_assert_int_eq(args[k].st, DPT_ERR_INVALID_ARG);
  ck_assert_msg(strstr(args[1].msg, "1 record for 4 ranks"), "%s", args[1].msg);
  ck_assert_msg(strstr(args[0].msg, "rank 1 could not load its shards"), "%s", args[0].msg);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("interactions");
  TCase *shards = tcase_create("shards");
  tcase_add_checked_fixture(shards, setup, teardown);
  tcase_add_test(shards, shard_round_trip);
  tcase_add_test(shards, writer_refuses_bad_records);
  tcase_add_test(shards, shard_assignment);
  tcase_add_test(shards, fixed_length_epoch);
  tcase_add_test(shards, truncated_and_corrupt_refused);
  tcase_add_test(shards, patterns_refused);
  tcase_add_test(shards, record_ranges);
  tcase_add_test(shards, node_shards);
  suite_add_tcase(s, shards);
  TCase *criteo = tcase_create("criteo");
  tcase_add_checked_fixture(criteo, setup, teardown);
  tcase_add_test(criteo, criteo_hash_by_hand);
  tcase_add_test(criteo, criteo_round_trip);
  tcase_add_test(criteo, criteo_bad_lines);
  suite_add_tcase(s, criteo);
  TCase *synth = tcase_create("synth");
  tcase_add_test(synth, synth_deterministic_and_learnable);
  suite_add_tcase(s, synth);
  TCase *metrics = tcase_create("metrics");
  tcase_add_test(metrics, auc_closed_forms);
  tcase_add_test(metrics, logloss_and_recall);
  tcase_add_test(metrics, auc_out_of_memory_ends_every_rank);
  tcase_add_test(metrics, metrics_gathered_over_ranks);
  suite_add_tcase(s, metrics);
  return s;
}

int main(void) {
  return tu_run(suite());
}
