/* The deterministic generator, the epoch permutation, global batches and the replica split:
 * golden values pin the sequences (they must be the same on every platform), and exhaustive
 * bookkeeping proves each sample is used exactly once per epoch across batches and replicas. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "dptrain/data.h"
#include "test_util.h"

#define EXPECT_STATUS(call, want, needle)                                                          \
  do {                                                                                             \
    dpt_status st_ = (call);                                                                       \
    ck_assert_msg(st_ == (want), "%s returned %s, want %s (%s)", #call, dpt_status_name(st_),      \
                  dpt_status_name(want), dpt_last_error());                                        \
    ck_assert_msg(strstr(dpt_last_error(), (needle)) != NULL, "message '%s' lacks '%s'",           \
                  dpt_last_error(), (needle));                                                     \
  } while (0)

/* ---- the generator ------------------------------------------------------------------------- */

START_TEST(rng_xoshiro_reference) {
  /* xoshiro256** from the state {1, 2, 3, 4}: the reference implementation's first outputs. */
  dpt_rng r = {{1, 2, 3, 4}};
  const uint64_t want[] = {11520u, 0u, 1509978240u, 1215971899390074240u};
  for (int i = 0; i < 4; i++)
    ck_assert_uint_eq(dpt_rng_next(&r), want[i]);
}
END_TEST

START_TEST(rng_seeded_golden) {
  /* Pinned outputs of the seeding: a change here changes every shuffled run ever recorded. */
  dpt_rng r;
  dpt_rng_seed(&r, 0, 0);
  ck_assert_uint_eq(dpt_rng_next(&r), 0x82a5d40c1ff22307u);
  ck_assert_uint_eq(dpt_rng_next(&r), 0x96d482970b5901dau);
  ck_assert_uint_eq(dpt_rng_next(&r), 0xf000d7039eea2c24u);
  dpt_rng_seed(&r, 42, 7);
  ck_assert_uint_eq(dpt_rng_next(&r), 0xcb4be0387c7289e1u);
  ck_assert_uint_eq(dpt_rng_next(&r), 0x1fdf3aa5abe03926u);
  ck_assert_uint_eq(dpt_rng_next(&r), 0x7c36ff87e2a2a3c0u);
}
END_TEST

START_TEST(rng_streams_differ) {
  /* Same seed, other stream (and swapped seed/stream) give other first outputs. */
  dpt_rng a, b, c;
  dpt_rng_seed(&a, 5, 0);
  dpt_rng_seed(&b, 5, 1);
  dpt_rng_seed(&c, 0, 5);
  const uint64_t xa = dpt_rng_next(&a), xb = dpt_rng_next(&b), xc = dpt_rng_next(&c);
  ck_assert_uint_ne(xa, xb);
  ck_assert_uint_ne(xa, xc);
  ck_assert_uint_ne(xb, xc);
  /* Same (seed, stream): same sequence. */
  dpt_rng d;
  dpt_rng_seed(&d, 5, 0);
  dpt_rng_seed(&a, 5, 0);
  for (int i = 0; i < 100; i++)
    ck_assert_uint_eq(dpt_rng_next(&a), dpt_rng_next(&d));
}
END_TEST

START_TEST(rng_uniform_and_below) {
  dpt_rng r;
  dpt_rng_seed(&r, 123, 0);
  double sum = 0;
  const int n = 200000;
  for (int i = 0; i < n; i++) {
    const double u = dpt_rng_uniform(&r);
    ck_assert(u >= 0.0 && u < 1.0);
    sum += u;
  }
  ck_assert_double_eq_tol(sum / n, 0.5, 0.005);

  ck_assert_uint_eq(dpt_rng_below(&r, 0), 0);
  for (int i = 0; i < 100; i++)
    ck_assert_uint_eq(dpt_rng_below(&r, 1), 0);
  /* Counts of below(7) within 5 sigma of n/7; a modulo bias this test could see would need a
   * bound near 2^64, covered by the next check. */
  int hist[7] = {0};
  for (int i = 0; i < n; i++) {
    const uint64_t v = dpt_rng_below(&r, 7);
    ck_assert_uint_lt(v, 7);
    hist[v]++;
  }
  for (int k = 0; k < 7; k++)
    ck_assert_int_lt(abs(hist[k] - n / 7), 5 * 155);
  /* n = 2^63 + 1: half of all 64-bit values are rejected; results stay in range and both
   * halves of the range appear. */
  const uint64_t big = (UINT64_C(1) << 63) + 1u;
  int high = 0;
  for (int i = 0; i < 1000; i++) {
    const uint64_t v = dpt_rng_below(&r, big);
    ck_assert(v < big);
    high += v >= big / 2;
  }
  ck_assert_int_gt(high, 400);
  ck_assert_int_lt(high, 600);

  /* Normal samples: mean ~0, variance ~1. */
  double s1 = 0, s2 = 0;
  for (int i = 0; i < n; i++) {
    const double z = dpt_rng_normal(&r);
    s1 += z;
    s2 += z * z;
  }
  ck_assert_double_eq_tol(s1 / n, 0.0, 0.01);
  ck_assert_double_eq_tol(s2 / n, 1.0, 0.02);
}
END_TEST

/* ---- the permutation ---------------------------------------------------------------------- */

static int is_permutation(const uint64_t *p, size_t n) {
  unsigned char *seen = calloc(n ? n : 1, 1);
  int ok = seen != NULL;
  for (size_t i = 0; ok && i < n; i++) {
    ok = p[i] < n && !seen[p[i]];
    if (ok) seen[p[i]] = 1;
  }
  free(seen);
  return ok;
}

START_TEST(permutation_properties) {
  const size_t n = 1003;
  uint64_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
  ck_assert(a && b && c);
  TU_OK(dpt_sampler_permutation(7, 0, 1, n, a));
  ck_assert(is_permutation(a, n));
  TU_OK(dpt_sampler_permutation(7, 0, 1, n, b));
  ck_assert_mem_eq(a, b, n * sizeof *a); /* same (seed, epoch): same order */
  TU_OK(dpt_sampler_permutation(7, 1, 1, n, c));
  ck_assert(is_permutation(c, n));
  ck_assert(memcmp(a, c, n * sizeof *a) != 0); /* next epoch: another order */
  TU_OK(dpt_sampler_permutation(8, 0, 1, n, c));
  ck_assert(memcmp(a, c, n * sizeof *a) != 0); /* other seed: another order */
  /* Really shuffled: few fixed points (about 1 expected). */
  size_t fixed = 0;
  for (size_t i = 0; i < n; i++)
    fixed += a[i] == i;
  ck_assert_uint_lt(fixed, 10);
  /* No shuffle: the identity, whatever the seed and epoch. */
  TU_OK(dpt_sampler_permutation(7, 5, 0, n, c));
  for (size_t i = 0; i < n; i++)
    ck_assert_uint_eq(c[i], i);
  free(a);
  free(b);
  free(c);
}
END_TEST

START_TEST(permutation_golden_and_edges) {
  /* Pinned: the order every platform must produce for seed 42, epoch 3. */
  uint64_t p[10];
  const uint64_t want[10] = {0, 7, 1, 9, 8, 4, 2, 3, 5, 6};
  TU_OK(dpt_sampler_permutation(42, 3, 1, 10, p));
  for (int i = 0; i < 10; i++)
    ck_assert_uint_eq(p[i], want[i]);
  TU_OK(dpt_sampler_permutation(1, 1, 1, 1, p));
  ck_assert_uint_eq(p[0], 0);
  TU_OK(dpt_sampler_permutation(1, 1, 1, 0, NULL));
  EXPECT_STATUS(dpt_sampler_permutation(1, 1, 1, 4, NULL), DPT_ERR_INVALID_ARG, "perm is NULL");
}
END_TEST

START_TEST(permutation_uniform_positions) {
  /* Each of the 6 orders of 3 elements appears about equally often over 6000 epochs: catches
   * an off-by-one in the Fisher-Yates bound (which makes some orders impossible). */
  int hist[3][3][3] = {{{0}}};
  for (uint64_t epoch = 0; epoch < 6000; epoch++) {
    uint64_t p[3];
    TU_OK(dpt_sampler_permutation(99, epoch, 1, 3, p));
    hist[p[0]][p[1]][p[2]]++;
  }
  int orders = 0;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 3; k++) {
        if (i == j || j == k || i == k) {
          ck_assert_int_eq(hist[i][j][k], 0);
          continue;
        }
        orders++;
        ck_assert_msg(abs(hist[i][j][k] - 1000) < 150, "order %d%d%d seen %d times of 6000", i, j,
                      k, hist[i][j][k]);
      }
  ck_assert_int_eq(orders, 6);
}
END_TEST

/* ---- batches and the split ----------------------------------------------------------------- */

START_TEST(num_batches_and_batch) {
  ck_assert_uint_eq(dpt_sampler_num_batches(1003, 250, 0), 4);
  ck_assert_uint_eq(dpt_sampler_num_batches(1003, 250, 1), 5);
  ck_assert_uint_eq(dpt_sampler_num_batches(1000, 250, 1), 4);
  ck_assert_uint_eq(dpt_sampler_num_batches(1000, 250, 0), 4);
  ck_assert_uint_eq(dpt_sampler_num_batches(100, 250, 0), 0);
  ck_assert_uint_eq(dpt_sampler_num_batches(100, 250, 1), 1);
  ck_assert_uint_eq(dpt_sampler_num_batches(0, 250, 1), 0);
  ck_assert_uint_eq(dpt_sampler_num_batches(100, 0, 1), 0);
  ck_assert_uint_eq(dpt_sampler_last_batch(1003, 250, 1), 3);
  ck_assert_uint_eq(dpt_sampler_last_batch(1003, 250, 0), 250);
  ck_assert_uint_eq(dpt_sampler_last_batch(1000, 250, 1), 250);
  ck_assert_uint_eq(dpt_sampler_last_batch(100, 250, 0), 0);

  size_t start, count;
  TU_OK(dpt_sampler_batch(1003, 250, 1, 4, &start, &count));
  ck_assert_uint_eq(start, 1000);
  ck_assert_uint_eq(count, 3);
  TU_OK(dpt_sampler_batch(1003, 250, 0, 3, &start, &count));
  ck_assert_uint_eq(start, 750);
  ck_assert_uint_eq(count, 250);
  EXPECT_STATUS(dpt_sampler_batch(1003, 250, 0, 4, &start, &count), DPT_ERR_INVALID_ARG,
                "batch 4 is past the epoch's 4 batches");
  EXPECT_STATUS(dpt_sampler_batch(1003, 0, 0, 0, &start, &count), DPT_ERR_INVALID_ARG,
                "global batch size is 0");
}
END_TEST

START_TEST(split_sizes) {
  for (size_t batch = 1; batch <= 40; batch++) {
    for (int replicas = 1; replicas <= (int)batch && replicas <= 9; replicas++) {
      size_t next = 0;
      for (int r = 0; r < replicas; r++) {
        size_t start, count;
        TU_OK(dpt_batch_split(batch, replicas, r, &start, &count));
        ck_assert_uint_eq(start, next); /* contiguous, in replica order */
        const size_t base = batch / (size_t)replicas;
        /* The first batch % replicas replicas hold one more. */
        ck_assert_uint_eq(count, base + ((size_t)r < batch % (size_t)replicas ? 1 : 0));
        next += count;
      }
      ck_assert_uint_eq(next, batch);
    }
  }
  size_t start, count;
  TU_OK(dpt_batch_split(250, 4, 1, &start, &count));
  ck_assert_uint_eq(start, 63);
  ck_assert_uint_eq(count, 63);
  TU_OK(dpt_batch_split(250, 4, 3, &start, &count));
  ck_assert_uint_eq(start, 188);
  ck_assert_uint_eq(count, 62);
}
END_TEST

/* Fewer samples than replicas: one each for the first, none (start at the end) for the rest. */
START_TEST(split_small_batch) {
  for (size_t batch = 1; batch < 6; batch++) {
    size_t next = 0;
    for (int r = 0; r < 6; r++) {
      size_t start = 99, count = 99;
      TU_OK(dpt_batch_split(batch, 6, r, &start, &count));
      ck_assert_uint_eq(count, (size_t)r < batch ? 1u : 0u);
      ck_assert_uint_eq(start, (size_t)r < batch ? (size_t)r : batch);
      ck_assert_uint_eq(start, next); /* contiguous, in replica order */
      next += count;
    }
    ck_assert_uint_eq(next, batch);
  }
}
END_TEST

START_TEST(split_errors) {
  size_t start, count;
  EXPECT_STATUS(dpt_batch_split(0, 1, 0, &start, &count), DPT_ERR_INVALID_ARG, "batch size is 0");
  EXPECT_STATUS(dpt_batch_split(8, 0, 0, &start, &count), DPT_ERR_INVALID_ARG,
                "replica count 0 must be >= 1");
  EXPECT_STATUS(dpt_batch_split(8, 2, 2, &start, &count), DPT_ERR_INVALID_ARG,
                "replica 2 is outside [0, 2)");
  EXPECT_STATUS(dpt_batch_split(8, 2, -1, &start, &count), DPT_ERR_INVALID_ARG,
                "replica -1 is outside [0, 2)");
  EXPECT_STATUS(dpt_batch_split(8, 2, 0, NULL, &count), DPT_ERR_INVALID_ARG, "start is NULL");
}
END_TEST

/* Walks one epoch the documented way and counts how often each sample is taken. */
static void check_epoch(size_t n, size_t B, int replicas, int keep_last, uint64_t epoch) {
  uint64_t *perm = malloc(n * sizeof *perm);
  unsigned *seen = calloc(n, sizeof *seen);
  ck_assert(perm && seen);
  TU_OK(dpt_sampler_permutation(2024, epoch, 1, n, perm));
  const size_t batches = dpt_sampler_num_batches(n, B, keep_last);
  size_t taken = 0;
  for (size_t k = 0; k < batches; k++) {
    size_t bstart, bcount;
    TU_OK(dpt_sampler_batch(n, B, keep_last, k, &bstart, &bcount));
    for (int r = 0; r < replicas; r++) {
      size_t start, count;
      TU_OK(dpt_batch_split(bcount, replicas, r, &start, &count));
      for (size_t i = 0; i < count; i++)
        seen[perm[bstart + start + i]]++;
      taken += count;
    }
  }
  const size_t dropped = keep_last ? 0 : n % B;
  ck_assert_uint_eq(taken, n - dropped);
  for (size_t i = 0; i < n; i++) {
    /* Samples past the last full batch of the permutation are the ones skipped. */
    const unsigned want = i < n - dropped ? 1u : 0u;
    ck_assert_msg(seen[perm[i]] == want, "n=%zu B=%zu R=%d keep_last=%d: sample %llu seen %u times",
                  n, B, replicas, keep_last, (unsigned long long)perm[i], seen[perm[i]]);
  }
  free(perm);
  free(seen);
}

START_TEST(epoch_coverage) {
  check_epoch(1003, 250, 4, 0, 0);
  check_epoch(1003, 250, 4, 0, 1);
  check_epoch(1003, 250, 3, 1, 0); /* last batch of 3 over 3 replicas */
  check_epoch(1006, 250, 4, 1, 0); /* last batch of 6 over 4 replicas */
  check_epoch(1000, 250, 4, 1, 2);
  check_epoch(1000, 250, 4, 0, 2);
  check_epoch(60000, 256, 8, 1, 0);
  check_epoch(17, 5, 1, 1, 0);
  check_epoch(17, 5, 5, 0, 0);
  /* With keep_last, a last batch smaller than the replica count leaves replicas without a
   * sample; every sample is still taken once. */
  ck_assert_uint_lt(dpt_sampler_last_batch(1003, 250, 1), 4);
  check_epoch(1003, 250, 4, 1, 0);
  check_epoch(17, 5, 4, 1, 3);
}
END_TEST

int main(void) {
  Suite *s = suite_create("sampler");
  TCase *tc = tcase_create("rng");
  tcase_add_test(tc, rng_xoshiro_reference);
  tcase_add_test(tc, rng_seeded_golden);
  tcase_add_test(tc, rng_streams_differ);
  tcase_add_test(tc, rng_uniform_and_below);
  suite_add_tcase(s, tc);
  tc = tcase_create("permutation");
  tcase_add_test(tc, permutation_properties);
  tcase_add_test(tc, permutation_golden_and_edges);
  tcase_add_test(tc, permutation_uniform_positions);
  suite_add_tcase(s, tc);
  tc = tcase_create("batches");
  tcase_add_test(tc, num_batches_and_batch);
  tcase_add_test(tc, split_sizes);
  tcase_add_test(tc, split_small_batch);
  tcase_add_test(tc, split_errors);
  tcase_add_test(tc, epoch_coverage);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
