/* dptrain report's chart pieces (tools/report_svg.h): decimation keeps the extremes and the
 * gaps within its bound, ticks are round and cover the range, labels read as the values, and a
 * chart with no finite point says "no data". */
#define _XOPEN_SOURCE 700
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/report_svg.h"

START_TEST(decimate_small_keeps_all) {
  double y[5] = {1, 2, NAN, 4, 5};
  size_t keep[5];
  ck_assert_uint_eq(dpt_report_decimate(y, 5, 2000, keep), 5);
  for (size_t i = 0; i < 5; ++i)
    ck_assert_uint_eq(keep[i], i);
}
END_TEST

START_TEST(decimate_million) {
  const size_t n = 1000000;
  double *y = malloc(n * sizeof *y);
  size_t *keep = malloc(n * sizeof *keep);
  ck_assert_ptr_nonnull(y);
  ck_assert_ptr_nonnull(keep);
  for (size_t i = 0; i < n; ++i)
    y[i] = sin((double)i * 1e-3);
  y[123457] = 50;  /* a spike */
  y[654321] = -50; /* a dip */
  y[777777] = NAN; /* a gap */
  const size_t k = dpt_report_decimate(y, n, 2000, keep);
  ck_assert_uint_le(k, 2000);
  ck_assert_uint_ge(k, 1000);
  int spike = 0, dip = 0, gap = 0;
  for (size_t i = 0; i < k; ++i) {
    if (i) ck_assert_uint_gt(keep[i], keep[i - 1]); /* in order, each once */
    spike |= keep[i] == 123457;
    dip |= keep[i] == 654321;
    gap |= keep[i] == 777777;
  }
  ck_assert(spike && dip && gap);
  ck_assert_uint_eq(keep[0], 0);
  free(y);
  free(keep);
}
END_TEST

/* The step is 1, 2 or 5 times a power of ten, and [first, last] covers [lo, hi]. */
static void check_axis(double lo, double hi, int target) {
  const dpt_report_axis a = dpt_report_ticks(lo, hi, target);
  const double mag = pow(10, floor(log10(a.step) + 1e-9)), norm = a.step / mag;
  ck_assert_msg(fabs(norm - 1) < 1e-9 || fabs(norm - 2) < 1e-9 || fabs(norm - 5) < 1e-9,
                "step %g for [%g, %g]", a.step, lo, hi);
  ck_assert(a.first <= lo && a.last >= hi);
  ck_assert_int_le(a.count, target + 3);
  ck_assert_int_ge(a.count, 2);
  ck_assert(fabs(a.first / a.step - round(a.first / a.step)) < 1e-6);
}

START_TEST(ticks_round) {
  check_axis(0, 1, 5);
  check_axis(2.2973, 2.3121, 5);
  check_axis(1, 8, 8);
  check_axis(-3.5, 1e6, 5);
  check_axis(1e-7, 3e-6, 5);
  check_axis(0.1, 0.1, 5); /* one point */
  check_axis(0, 0, 5);
  const dpt_report_axis a = dpt_report_ticks(0.13, 0.87, 5);
  ck_assert_double_eq_tol(a.step, 0.2, 1e-12);
  ck_assert_double_eq_tol(a.first, 0, 1e-12);
  ck_assert_double_eq_tol(a.last, 1, 1e-12);
  ck_assert_int_eq(a.count, 6);
  char label[32];
  dpt_report_tick_label(&a, 2, label, sizeof label);
  ck_assert_str_eq(label, "0.4");
  const dpt_report_axis b = dpt_report_ticks(1, 8, 8);
  dpt_report_tick_label(&b, 0, label, sizeof label);
  ck_assert_str_eq(label, "1");
  const dpt_report_axis c = dpt_report_ticks(-0.3, 0.3, 6);
  for (int i = 0; i < c.count; ++i) {
    dpt_report_tick_label(&c, i, label, sizeof label);
    ck_assert_msg(strcmp(label, "-0.0") != 0 && strcmp(label, "-0") != 0, "label %s", label);
  }
}
END_TEST

START_TEST(chart_no_data_and_escape) {
  char *buf = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&buf, &size);
  ck_assert_ptr_nonnull(f);
  double x[2] = {1, 2}, y[2] = {NAN, NAN};
  const dpt_report_series s = {"a<b", "#000", x, y, 2};
  dpt_report_chart(f, "T & \"q\"", "step", &s, 1, NULL, 0);
  fclose(f);
  ck_assert_ptr_nonnull(strstr(buf, "no data"));
  ck_assert_ptr_nonnull(strstr(buf, "T &amp; &quot;q&quot;"));
  ck_assert_ptr_null(strstr(buf, "<polyline"));
  free(buf);
}
END_TEST

int main(void) {
  Suite *s = suite_create("report_svg");
  TCase *t = tcase_create("report_svg");
  tcase_add_test(t, decimate_small_keeps_all);
  tcase_add_test(t, decimate_million);
  tcase_add_test(t, ticks_round);
  tcase_add_test(t, chart_no_data_and_escape);
  suite_add_tcase(s, t);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
