/* The CPU reference backend against values computed by hand, and every backward op against
 * its forward op (finite differences, or the adjoint identity <F(x), y> == <x, F^T(y)>).
 * The conformance suite compares the other backends with this one, so this is where the
 * reference itself is pinned down. */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/backend.h"
#include "test_util.h"

static dpt_backend *be;

static void setup(void) {
  be = tu_cpu();
}

static void teardown(void) {
  dpt_backend_destroy(be);
  be = NULL;
}

/* ---- gemm ----------------------------------------------------------------------------------
 * A = [1 2 3; 4 5 6], B = [7 8; 9 10; 11 12]: A*B = [58 64; 139 154]. */
static const float gA[6] = {1, 2, 3, 4, 5, 6};     /* [2,3] */
static const float gAt[6] = {1, 4, 2, 5, 3, 6};    /* A^T stored [3,2] */
static const float gB[6] = {7, 8, 9, 10, 11, 12};  /* [3,2] */
static const float gBt[6] = {7, 9, 11, 8, 10, 12}; /* B^T stored [2,3] */

START_TEST(gemm_each_transpose) {
  for (int t = 0; t < 4; t++) {
    int ta = t & 1, tb = t >> 1;
    dpt_buffer *a = tu_f32(be, ta ? gAt : gA, 6);
    dpt_buffer *b = tu_f32(be, tb ? gBt : gB, 6);
    float c0[4] = {1, 2, 3, 4};
    dpt_buffer *c = tu_f32(be, c0, 4);
    /* C = 2*A*B + 0.5*C0 */
    TU_OK(dpt_gemm(be, ta, tb, 2, 2, 3, 2.0f, a, 0, ta ? 2 : 3, b, 0, tb ? 3 : 2, 0.5f, c, 0, 2));
    const double want[4] = {116.5, 129, 279.5, 310};
    char what[32];
    snprintf(what, sizeof what, "C (ta=%d tb=%d)", ta, tb);
    tu_expect_buf(what, c, 0, want, 4, 1e-6);
    dpt_buffer_free(a);
    dpt_buffer_free(b);
    dpt_buffer_free(c);
  }
}
END_TEST

START_TEST(gemm_strides_offsets_beta0) {
  /* A [2,3] with lda 4 at offset 1, B [3,2] with ldb 3 at offset 2, C [2,2] with ldc 3 at
   * offset 1; the padding holds 99 (must not be read) and C holds NaN (beta 0: not read). */
  const float a[9] = {99, 1, 2, 3, 99, 4, 5, 6, 99};
  const float b[11] = {99, 99, 7, 8, 99, 9, 10, 99, 11, 12, 99};
  float c0[7];
  for (int i = 0; i < 7; i++)
    c0[i] = NAN;
  c0[3] = 77; /* the gap between C's rows must stay as it is */
  dpt_buffer *ba = tu_f32(be, a, 9), *bb = tu_f32(be, b, 11), *bc = tu_f32(be, c0, 7);
  TU_OK(dpt_gemm(be, 0, 0, 2, 2, 3, 1.0f, ba, 1, 4, bb, 2, 3, 0.0f, bc, 1, 3));
  float got[7];
  tu_get(bc, 0, got, 7);
  ck_assert_msg(isnan(got[0]) && isnan(got[6]), "C outside the tensor was written");
  ck_assert_msg(got[3] == 77.0f, "the gap of C was written: %g", (double)got[3]);
  const double want[4] = {58, 64, 139, 154};
  const float sel[4] = {got[1], got[2], got[4], got[5]};
  tu_expect_f32("C", sel, want, 4, 1e-6);
  dpt_buffer_free(ba);
  dpt_buffer_free(bb);
  dpt_buffer_free(bc);
}
END_TEST

START_TEST(gemm_k0_and_empty) {
  float c0[6] = {1, 2, 3, 4, 5, 6};
  dpt_buffer *a = tu_f32_fill(be, 8, 1.0f), *b = tu_f32_fill(be, 8, 1.0f), *c = tu_f32(be, c0, 6);
  /* k == 0: C = beta * C */
  TU_OK(dpt_gemm(be, 0, 0, 2, 3, 0, 1.0f, a, 0, 1, b, 0, 3, 3.0f, c, 0, 3));
  const double want[6] = {3, 6, 9, 12, 15, 18};
  tu_expect_buf("C (k=0, beta=3)", c, 0, want, 6, 0);
  /* k == 0, beta == 0: C = 0 even if it held NaN */
  TU_OK(dpt_buffer_fill_f32(c, 0, 6, NAN));
  TU_OK(dpt_gemm(be, 0, 0, 2, 3, 0, 1.0f, a, 0, 1, b, 0, 3, 0.0f, c, 0, 3));
  const double zeros[6] = {0};
  tu_expect_buf("C (k=0, beta=0)", c, 0, zeros, 6, 0);
  /* m == 0: nothing touched */
  TU_OK(dpt_buffer_fill_f32(c, 0, 6, 5.0f));
  TU_OK(dpt_gemm(be, 0, 0, 0, 3, 2, 1.0f, a, 0, 2, b, 0, 3, 0.0f, c, 0, 3));
  const double fives[6] = {5, 5, 5, 5, 5, 5};
  tu_expect_buf("C (m=0)", c, 0, fives, 6, 0);
  dpt_buffer_free(a);
  dpt_buffer_free(b);
  dpt_buffer_free(c);
}
END_TEST

/* ---- bias, relu ------------------------------------------------------------------------- */

START_TEST(bias_add_and_grad) {
  const float y0[6] = {1, 2, 3, 4, 5, 6}, bias[3] = {10, 20, 30};
  dpt_buffer *y = tu_f32(be, y0, 6), *b = tu_f32(be, bias, 3);
  TU_OK(dpt_bias_add(be, 2, 3, y, 0, b, 0));
  const double want_y[6] = {11, 22, 33, 14, 25, 36};
  tu_expect_buf("y", y, 0, want_y, 6, 0);

  dpt_buffer *dy = tu_f32(be, y0, 6), *db = tu_f32_fill(be, 3, NAN);
  TU_OK(dpt_bias_grad(be, 2, 3, dy, 0, 0.0f, db, 0)); /* beta 0: NaN not read */
  const double sums[3] = {5, 7, 9};
  tu_expect_buf("db (beta 0)", db, 0, sums, 3, 0);
  TU_OK(dpt_buffer_fill_f32(db, 0, 3, 2.0f));
  TU_OK(dpt_bias_grad(be, 2, 3, dy, 0, 0.5f, db, 0));
  const double acc[3] = {6, 8, 10};
  tu_expect_buf("db (beta 0.5)", db, 0, acc, 3, 0);
  TU_OK(dpt_bias_grad(be, 0, 3, dy, 0, 2.0f, db, 0)); /* rows 0: db = beta * db */
  const double twice[3] = {12, 16, 20};
  tu_expect_buf("db (rows 0)", db, 0, twice, 3, 0);
  dpt_buffer_free(y);
  dpt_buffer_free(b);
  dpt_buffer_free(dy);
  dpt_buffer_free(db);
}
END_TEST

START_TEST(relu_values_and_in_place) {
  const float x0[5] = {-2, -0.5f, 0, 0.5f, 3};
  const float g0[5] = {1, 2, 3, 4, 5};
  dpt_buffer *x = tu_f32(be, x0, 5), *y = tu_f32_fill(be, 5, NAN);
  TU_OK(dpt_relu_fwd(be, 5, x, 0, y, 0));
  const double want_y[5] = {0, 0, 0, 0.5, 3};
  tu_expect_buf("y", y, 0, want_y, 5, 0);

  dpt_buffer *dy = tu_f32(be, g0, 5), *dx = tu_f32_fill(be, 5, NAN);
  TU_OK(dpt_relu_bwd(be, 5, x, 0, dy, 0, dx, 0));
  const double want_dx[5] = {0, 0, 0, 4, 5}; /* x == 0 gives 0: the test is x > 0 */
  tu_expect_buf("dx", dx, 0, want_dx, 5, 0);
  TU_OK(dpt_relu_bwd(be, 5, x, 0, dy, 0, dy, 0)); /* in place */
  tu_expect_buf("dx (in place)", dy, 0, want_dx, 5, 0);
  TU_OK(dpt_relu_fwd(be, 5, x, 0, x, 0)); /* in place */
  tu_expect_buf("y (in place)", x, 0, want_y, 5, 0);
  /* NaN propagates (a later non-finite check must see it); infinities behave as numbers */
  const float special[3] = {NAN, INFINITY, -INFINITY};
  dpt_buffer *sx = tu_f32(be, special, 3);
  TU_OK(dpt_relu_fwd(be, 3, sx, 0, y, 0));
  const double want_special[3] = {NAN, INFINITY, 0};
  float got_special[3];
  tu_get(y, 0, got_special, 3);
  ck_assert_msg(isnan(got_special[0]), "relu(NaN) = %g, want NaN", (double)got_special[0]);
  ck_assert_msg(got_special[1] == (float)want_special[1] && got_special[2] == 0.0f,
                "relu(inf, -inf) = %g, %g", (double)got_special[1], (double)got_special[2]);
  dpt_buffer_free(sx);
  dpt_buffer_free(x);
  dpt_buffer_free(y);
  dpt_buffer_free(dy);
  dpt_buffer_free(dx);
}
END_TEST

/* ---- softmax cross-entropy ---------------------------------------------------------------
 * row 0: logits [1 2 3], label 2: loss = log(e^1+e^2+e^3) - 3 = 0.40760596444438;
 *        p = [0.0900305731703804, 0.244728471054798, 0.665240955774822]; first max at 2.
 * row 1: logits [1 1 1], label 1: loss = log 3 = 1.09861228866811; p = 1/3 each; the first
 *        maximal logit is column 0, so the row is not correct.
 * row 2: label 7 is outside [0, 3): loss NaN, gradient row 0, not correct. */
START_TEST(softmax_xent_values) {
  const float logits[9] = {1, 2, 3, 1, 1, 1, 0, 5, 1};
  const int32_t labels[3] = {2, 1, 7};
  dpt_buffer *lg = tu_f32(be, logits, 9), *lb = tu_i32(be, labels, 3);
  dpt_buffer *d = tu_f32_fill(be, 9, NAN);
  double loss = 0;
  int64_t correct = -1;
  TU_OK(dpt_softmax_xent(be, 2, 3, lg, 0, lb, 0, 0.5f, d, 0, &loss, &correct));
  ck_assert_msg(fabs(loss - (0.40760596444438 + 1.09861228866811)) < 1e-6, "loss %.12g", loss);
  ck_assert_int_eq(correct, 1);
  const double want[6] = {0.5 * 0.0900305731703804,      0.5 * 0.244728471054798,
                          0.5 * (0.665240955774822 - 1), 0.5 / 3,
                          0.5 * (1.0 / 3 - 1),           0.5 / 3};
  tu_expect_buf("dlogits", d, 0, want, 6, 1e-6);

  /* with the bad row: NaN loss, zero gradient row, still one correct */
  TU_OK(dpt_softmax_xent(be, 3, 3, lg, 0, lb, 0, 1.0f, d, 0, &loss, &correct));
  ck_assert_msg(isnan(loss), "loss with a bad label: %g, want NaN", loss);
  ck_assert_int_eq(correct, 1);
  const double zero_row[3] = {0, 0, 0};
  tu_expect_buf("dlogits (bad label row)", d, 6, zero_row, 3, 0);

  /* every output optional; a label-only row 1 at offset 1 */
  TU_OK(dpt_softmax_xent(be, 1, 3, lg, 3, lb, 1, 1.0f, NULL, 0, &loss, NULL));
  ck_assert_msg(fabs(loss - 1.09861228866811) < 1e-6, "loss row 1: %.12g", loss);
  TU_OK(dpt_softmax_xent(be, 1, 3, lg, 0, lb, 0, 1.0f, NULL, 0, NULL, &correct));
  ck_assert_int_eq(correct, 1);
  /* large logits: the max must be subtracted (e^1000 overflows) */
  const float big[2] = {1000, 0};
  const int32_t lab0[1] = {0};
  dpt_buffer *bg = tu_f32(be, big, 2), *bl = tu_i32(be, lab0, 1);
  TU_OK(dpt_softmax_xent(be, 1, 2, bg, 0, bl, 0, 1.0f, d, 0, &loss, &correct));
  ck_assert_msg(loss >= 0 && loss < 1e-30, "loss of a certain prediction: %g", loss);
  const double certain[2] = {0, 0};
  tu_expect_buf("dlogits (certain)", d, 0, certain, 2, 1e-30);
  dpt_buffer_free(lg);
  dpt_buffer_free(lb);
  dpt_buffer_free(d);
  dpt_buffer_free(bg);
  dpt_buffer_free(bl);
}
END_TEST

/* DPT_IGNORE_INDEX: row 0 as above (logits [1 2 3], label 2), row 1 ignored: the loss is row
 * 0's alone, row 1's gradient is 0 and it is not correct even where its first max is column 0
 * (logits [5 1 1]); all rows ignored: loss exactly 0, nothing correct. */
START_TEST(softmax_xent_ignore_index) {
  const float logits[6] = {1, 2, 3, 5, 1, 1};
  const int32_t labels[2] = {2, DPT_IGNORE_INDEX}, ignored[2] = {DPT_IGNORE_INDEX, -100};
  dpt_buffer *lg = tu_f32(be, logits, 6), *lb = tu_i32(be, labels, 2), *li = tu_i32(be, ignored, 2);
  dpt_buffer *d = tu_f32_fill(be, 6, NAN);
  double loss = NAN;
  int64_t correct = -1;
  TU_OK(dpt_softmax_xent(be, 2, 3, lg, 0, lb, 0, 0.5f, d, 0, &loss, &correct));
  ck_assert_msg(fabs(loss - 0.40760596444438) < 1e-6, "loss %.12g", loss);
  ck_assert_int_eq(correct, 1);
  const double want[6] = {
      0.5 * 0.0900305731703804, 0.5 * 0.244728471054798, 0.5 * (0.665240955774822 - 1), 0, 0, 0};
  tu_expect_buf("dlogits", d, 0, want, 6, 1e-6);

  TU_OK(dpt_softmax_xent(be, 2, 3, lg, 0, li, 0, 1.0f, d, 0, &loss, &correct));
  ck_assert_msg(loss == 0.0, "loss of ignored rows: %g, want 0", loss);
  ck_assert_int_eq(correct, 0);
  const double zeros[6] = {0, 0, 0, 0, 0, 0};
  tu_expect_buf("dlogits (all ignored)", d, 0, zeros, 6, 0);
  dpt_buffer_free(lg);
  dpt_buffer_free(lb);
  dpt_buffer_free(li);
  dpt_buffer_free(d);
}
END_TEST

/* ---- attention's softmax -----------------------------------------------------------------
 * Two samples of 3 keys, scale 0.5. Sample 0: scores [1 2 3], ids [5 6 0] with pad_id 0: key 2
 * masked, softmax of [0.5 1] = [0.377540668798145, 0.622459331201855], then 0. Sample 1: scores
 * [2 0 4], ids [0 7 8]: key 0 masked, softmax of [0 2] = [0.119202922022118,
 * 0.880797077977882]. Without ids, sample 0 is softmax of [0.5 1 1.5] = [0.186323723225848,
 * 0.307195885718498, 0.506480391055654] and sample 1 of [1 0 2] = [0.244728471054798,
 * 0.0900305731703805, 0.665240955774822]. With heads 2 and q 2 the rows are (h * n + i) * q + j:
 * sample i = (r / q) % n, so rows 0 1 4 5 are sample 0, rows 2 3 6 7 sample 1. */
static const double attn_masked[2][3] = {{0.377540668798145, 0.622459331201855, 0},
                                         {0, 0.119202922022118, 0.880797077977882}};
static const double attn_plain[2][3] = {{0.186323723225848, 0.307195885718498, 0.506480391055654},
                                        {0.244728471054798, 0.0900305731703805, 0.665240955774822}};

static void expect_attn(const char *what, dpt_buffer *b, const dpt_attn_geom *g,
                        const double (*rows)[3]) {
  size_t nr = g->heads * g->n * g->q;
  for (size_t r = 0; r < nr; r++)
    tu_expect_buf(what, b, r * 3, rows[(r / g->q) % g->n], 3, 1e-6);
}

START_TEST(attn_softmax_values) {
  const int32_t ids[6] = {5, 6, 0, 0, 7, 8}, pads[6] = {3, 3, 3, 3, 3, 3};
  const float two[6] = {1, 2, 3, 2, 0, 4};
  float sc[24]; /* heads 2, n 2, q 2: row r holds sample (r / 2) % 2's scores */
  for (int r = 0; r < 8; r++)
    memcpy(sc + 3 * r, two + 3 * ((r / 2) % 2), 3 * sizeof(float));
  dpt_buffer *bi = tu_i32(be, ids, 6), *bp = tu_i32(be, pads, 6);
  dpt_buffer *bs = tu_f32(be, sc, 24), *bo = tu_f32_fill(be, 24, NAN), *b2 = tu_f32(be, two, 6);

  const dpt_attn_geom g1 = {2, 1, 1, 3}; /* n, heads, q, k */
  TU_OK(dpt_attn_softmax(be, &g1, 0.5f, bi, 0, 0, b2, 0, bo, 0));
  expect_attn("probs (2x3, masked)", bo, &g1, attn_masked);
  TU_OK(dpt_attn_softmax(be, &g1, 0.5f, NULL, 0, 0, b2, 0, bo, 0));
  expect_attn("probs (2x3, no mask)", bo, &g1, attn_plain);

  const dpt_attn_geom g2 = {2, 2, 2, 3};
  TU_OK(dpt_attn_softmax(be, &g2, 0.5f, bi, 0, 0, bs, 0, bo, 0));
  expect_attn("probs (heads 2, q 2, masked)", bo, &g2, attn_masked);

  /* every key padding: rows of 0 (not NaN) */
  const double zero_rows[2][3] = {{0, 0, 0}, {0, 0, 0}};
  TU_OK(dpt_attn_softmax(be, &g2, 0.5f, bp, 0, 3, bs, 0, bo, 0));
  expect_attn("probs (all masked)", bo, &g2, zero_rows);

  /* in place */
  TU_OK(dpt_attn_softmax(be, &g2, 0.5f, bi, 0, 0, bs, 0, bs, 0));
  expect_attn("probs (in place)", bs, &g2, attn_masked);
  dpt_buffer_free(bi);
  dpt_buffer_free(bp);
  dpt_buffer_free(bs);
  dpt_buffer_free(bo);
  dpt_buffer_free(b2);
}
END_TEST

/* y = [0.2 0.3 0.5], dy = [1 2 3]: sum y * dy = 2.3, dx = [0.2 * -1.3, 0.3 * -0.3, 0.5 * 0.7]. */
START_TEST(softmax_bwd_values) {
  const float y[3] = {0.2f, 0.3f, 0.5f}, dy[3] = {1, 2, 3};
  dpt_buffer *by = tu_f32(be, y, 3), *bd = tu_f32(be, dy, 3), *bx = tu_f32_fill(be, 3, NAN);
  const double want[3] = {0.2 * -1.3, 0.3 * -0.3, 0.5 * 0.7};
  TU_OK(dpt_softmax_bwd(be, 1, 3, by, 0, bd, 0, bx, 0));
  tu_expect_buf("dx", bx, 0, want, 3, 1e-6);
  TU_OK(dpt_softmax_bwd(be, 1, 3, by, 0, bd, 0, bd, 0)); /* dx over dy */
  tu_expect_buf("dx (in place)", bd, 0, want, 3, 1e-6);
  dpt_buffer_free(by);
  dpt_buffer_free(bd);
  dpt_buffer_free(bx);
}
END_TEST

/* ---- im2col / col2im ----------------------------------------------------------------------
 * x = [1 2 3; 4 5 6; 7 8 9] (1x1x3x3), kernel 2x2, stride 1, pad 1: 4x4 outputs; col row
 * ki*2+kj holds x[oy-1+ki][ox-1+kj] (0 in the padding). */
START_TEST(im2col_col2im_values) {
  const dpt_conv_geom g = {1, 1, 3, 3, 2, 2, 1, 1, 1, 1};
  size_t oh = 0, ow = 0;
  TU_OK(dpt_conv_out_size(&g, &oh, &ow));
  ck_assert_uint_eq(oh, 4);
  ck_assert_uint_eq(ow, 4);
  const float x0[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const double want[64] = {
      0, 0, 0, 0, 0, 1, 2, 3, 0, 4, 5, 6, 0, 7, 8, 9, /* ki 0 kj 0 */
      0, 0, 0, 0, 1, 2, 3, 0, 4, 5, 6, 0, 7, 8, 9, 0, /* ki 0 kj 1 */
      0, 1, 2, 3, 0, 4, 5, 6, 0, 7, 8, 9, 0, 0, 0, 0, /* ki 1 kj 0 */
      1, 2, 3, 0, 4, 5, 6, 0, 7, 8, 9, 0, 0, 0, 0, 0, /* ki 1 kj 1 */
  };
  dpt_buffer *x = tu_f32(be, x0, 9), *col = tu_f32_fill(be, 64, NAN);
  TU_OK(dpt_im2col(be, &g, x, 0, col, 0));
  tu_expect_buf("col", col, 0, want, 64, 0);
  /* every pixel lies in 4 windows: col2im(im2col(x)) = 4x */
  dpt_buffer *dx = tu_f32_fill(be, 9, NAN);
  TU_OK(dpt_col2im(be, &g, col, 0, dx, 0));
  double four_x[9];
  for (int i = 0; i < 9; i++)
    four_x[i] = 4.0 * x0[i];
  tu_expect_buf("dx", dx, 0, four_x, 9, 0);

  /* 1x1x4x4, kernel 2, stride 2, no padding: windows tile the image, col2im(im2col(x)) = x */
  const dpt_conv_geom g2 = {1, 1, 4, 4, 2, 2, 2, 2, 0, 0};
  float x16[16];
  double w16[16];
  for (int i = 0; i < 16; i++)
    w16[i] = x16[i] = (float)(i + 1);
  dpt_buffer *x2 = tu_f32(be, x16, 16), *c2 = tu_f32_fill(be, 16, NAN);
  dpt_buffer *d2 = tu_f32_fill(be, 16, NAN);
  TU_OK(dpt_im2col(be, &g2, x2, 0, c2, 0));
  /* row ki*2+kj, column oy*2+ox = x[2*oy+ki][2*ox+kj] */
  const double want2[16] = {1, 3, 9, 11, 2, 4, 10, 12, 5, 7, 13, 15, 6, 8, 14, 16};
  tu_expect_buf("col (stride 2)", c2, 0, want2, 16, 0);
  TU_OK(dpt_col2im(be, &g2, c2, 0, d2, 0));
  tu_expect_buf("dx (stride 2)", d2, 0, w16, 16, 0);
  dpt_buffer_free(x);
  dpt_buffer_free(col);
  dpt_buffer_free(dx);
  dpt_buffer_free(x2);
  dpt_buffer_free(c2);
  dpt_buffer_free(d2);
}
END_TEST

/* ---- direct convolution ------------------------------------------------------------------
 * x = [1 2 3; 4 5 6; 7 8 9], w = [1 0; 0 1], bias 0.5, stride 1, no padding: y = x[i][j] +
 * x[i+1][j+1] + 0.5. With dy = 1 everywhere: dx counts the windows whose diagonal taps cover
 * each pixel, dw sums each tap's 2x2 block of x, db = 4. Run by every DPT_CPU_CONV mode that
 * has the ops: the reference loops and oneDNN. */
static void conv_values(const char *mode) {
  setenv("DPT_CPU_CONV", mode, 1);
  dpt_backend *cb = tu_cpu();
  unsetenv("DPT_CPU_CONV");
  ck_assert_msg(dpt_backend_supports(cb, DPT_OP_CONV2D_FWD), "mode %s: no conv2d_fwd", mode);
  const dpt_conv_geom g = {1, 1, 3, 3, 2, 2, 1, 1, 0, 0};
  const float x0[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w0[4] = {1, 0, 0, 1}, b0 = 0.5f;
  const float ones[4] = {1, 1, 1, 1};
  dpt_buffer *x = tu_f32(cb, x0, 9), *w = tu_f32(cb, w0, 4), *b = tu_f32(cb, &b0, 1);
  dpt_buffer *y = tu_f32_fill(cb, 4, NAN), *dy = tu_f32(cb, ones, 4);
  dpt_buffer *dx = tu_f32_fill(cb, 9, NAN), *dw = tu_f32_fill(cb, 4, NAN);
  dpt_buffer *db = tu_f32_fill(cb, 1, NAN);
  TU_OK(dpt_conv2d_fwd(cb, &g, 1, x, 0, w, 0, b, 0, y, 0));
  const double want_y[4] = {6.5, 8.5, 12.5, 14.5};
  tu_expect_buf("y", y, 0, want_y, 4, 0);
  TU_OK(dpt_conv2d_bwd_data(cb, &g, 1, dy, 0, w, 0, dx, 0));
  const double want_dx[9] = {1, 1, 0, 1, 2, 1, 0, 1, 1};
  tu_expect_buf("dx", dx, 0, want_dx, 9, 0);
  TU_OK(dpt_conv2d_bwd_weights(cb, &g, 1, x, 0, dy, 0, dw, 0, db, 0));
  const double want_dw[4] = {12, 16, 24, 28}, want_db[1] = {4};
  tu_expect_buf("dw", dw, 0, want_dw, 4, 0);
  tu_expect_buf("db", db, 0, want_db, 1, 0);
  /* an empty batch: the weight gradient is the sum over no sample */
  const dpt_conv_geom g0 = {0, 1, 3, 3, 2, 2, 1, 1, 0, 0};
  const double zero[4] = {0, 0, 0, 0};
  TU_OK(dpt_conv2d_bwd_weights(cb, &g0, 1, x, 0, dy, 0, dw, 0, db, 0));
  tu_expect_buf("dw (n = 0)", dw, 0, zero, 4, 0);
  tu_expect_buf("db (n = 0)", db, 0, zero, 1, 0);
  /* y overlapping x is refused */
  ck_assert_int_eq(dpt_conv2d_fwd(cb, &g, 1, x, 0, w, 0, NULL, 0, x, 0), DPT_ERR_INVALID_ARG);
  dpt_backend_destroy(cb);
}

START_TEST(conv2d_values_reference) {
  conv_values("reference");
}
END_TEST

START_TEST(conv2d_values_default) {
  dpt_backend *cb = tu_cpu();
  int has = dpt_backend_supports(cb, DPT_OP_CONV2D_FWD);
  dpt_backend_destroy(cb);
  if (has) conv_values("");
}
END_TEST

/* DPT_CPU_CONV=im2col turns the ops off; an unknown mode is refused with the variable named. */
START_TEST(conv2d_modes) {
  setenv("DPT_CPU_CONV", "im2col", 1);
  dpt_backend *cb = tu_cpu();
  ck_assert(!dpt_backend_supports(cb, DPT_OP_CONV2D_FWD));
  const dpt_conv_geom g = {1, 1, 3, 3, 2, 2, 1, 1, 0, 0};
  dpt_buffer *x = tu_f32_fill(cb, 9, 1), *w = tu_f32_fill(cb, 4, 1), *y = tu_f32_fill(cb, 4, 0);
  ck_assert_int_eq(dpt_conv2d_fwd(cb, &g, 1, x, 0, w, 0, NULL, 0, y, 0), DPT_ERR_UNSUPPORTED);
  dpt_backend_destroy(cb);
  setenv("DPT_CPU_CONV", "winograd", 1);
  dpt_backend *bad = NULL;
  ck_assert_int_eq(dpt_backend_create(DPT_BACKEND_CPU, 0, &bad), DPT_ERR_INVALID_ARG);
  ck_assert_ptr_null(bad);
  ck_assert_ptr_nonnull(strstr(dpt_last_error(), "DPT_CPU_CONV"));
  unsetenv("DPT_CPU_CONV");
}
END_TEST

/* ---- maxpool ------------------------------------------------------------------------------
 * x (4x4) = [1 3 2 4; 5 6 7 8; 9 2 1 0; 3 4 5 5], 2x2 windows, stride 2:
 * maxima 6 (index 5), 8 (7), 9 (8), 5 at 14 (tie with 15: the first in row-major order). */
START_TEST(maxpool_values) {
  const dpt_pool_geom g = {1, 4, 4, 2, 2, 2, 2};
  const float x0[16] = {1, 3, 2, 4, 5, 6, 7, 8, 9, 2, 1, 0, 3, 4, 5, 5};
  dpt_buffer *x = tu_f32(be, x0, 16), *y = tu_f32_fill(be, 4, NAN), *am = tu_buf(be, NULL, 16);
  TU_OK(dpt_maxpool_fwd(be, &g, x, 0, y, 0, am, 0));
  const double want_y[4] = {6, 8, 9, 5};
  tu_expect_buf("y", y, 0, want_y, 4, 0);
  int32_t amax[4];
  TU_OK(dpt_buffer_download(am, 0, amax, sizeof amax));
  const int32_t want_am[4] = {5, 7, 8, 14};
  for (int i = 0; i < 4; i++)
    ck_assert_int_eq(amax[i], want_am[i]);

  const float dy0[4] = {1, 2, 3, 4};
  dpt_buffer *dy = tu_f32(be, dy0, 4), *dx = tu_f32_fill(be, 16, NAN);
  TU_OK(dpt_maxpool_bwd(be, &g, dy, 0, am, 0, dx, 0));
  double want_dx[16] = {0};
  want_dx[5] = 1;
  want_dx[7] = 2;
  want_dx[8] = 3;
  want_dx[14] = 4;
  tu_expect_buf("dx", dx, 0, want_dx, 16, 0);

  /* overlapping windows (3x3, kernel 2, stride 1): the centre 9 is every window's max and
   * receives the sum of all four gradients */
  const dpt_pool_geom g2 = {1, 3, 3, 2, 2, 1, 1};
  const float x9[9] = {1, 2, 3, 4, 9, 5, 6, 7, 8};
  dpt_buffer *xo = tu_f32(be, x9, 9), *dxo = tu_f32_fill(be, 9, NAN);
  TU_OK(dpt_maxpool_fwd(be, &g2, xo, 0, y, 0, am, 0));
  const double nines[4] = {9, 9, 9, 9};
  tu_expect_buf("y (overlapping)", y, 0, nines, 4, 0);
  TU_OK(dpt_maxpool_bwd(be, &g2, dy, 0, am, 0, dxo, 0));
  const double want_o[9] = {0, 0, 0, 0, 10, 0, 0, 0, 0};
  tu_expect_buf("dx (overlapping)", dxo, 0, want_o, 9, 0);
  dpt_buffer_free(x);
  dpt_buffer_free(y);
  dpt_buffer_free(am);
  dpt_buffer_free(dy);
  dpt_buffer_free(dx);
  dpt_buffer_free(xo);
  dpt_buffer_free(dxo);
}
END_TEST

/* ---- embedding ---------------------------------------------------------------------------- */

START_TEST(embed_values) {
  const float table0[8] = {0, 1, 10, 11, 20, 21, 30, 31}; /* [4,2] */
  const int32_t idx0[5] = {2, 0, 2, 3, -1};
  dpt_buffer *t = tu_f32(be, table0, 8), *idx = tu_i32(be, idx0, 5);
  dpt_buffer *out = tu_f32_fill(be, 10, 0.0f);
  TU_OK(dpt_embed_gather(be, 5, 4, 2, t, 0, idx, 0, out, 0));
  const double want[10] = {20, 21, 0, 1, 20, 21, 30, 31, NAN, NAN}; /* -1: a NaN row */
  tu_expect_buf("out", out, 0, want, 10, 0);

  const float dout0[10] = {1, 2, 3, 4, 5, 6, 7, 8, 100, 100};
  const int32_t idx1[5] = {2, 0, 2, 9, -3}; /* 9 and -3 are ignored */
  dpt_buffer *dout = tu_f32(be, dout0, 10), *idx2 = tu_i32(be, idx1, 5);
  dpt_buffer *dt = tu_f32_fill(be, 8, 0.5f);
  TU_OK(dpt_embed_scatter_add(be, 5, 4, 2, dout, 0, idx2, 0, dt, 0));
  const double want_dt[8] = {3.5, 4.5, 0.5, 0.5, 6.5, 8.5, 0.5, 0.5};
  tu_expect_buf("dtable", dt, 0, want_dt, 8, 0);
  dpt_buffer_free(t);
  dpt_buffer_free(idx);
  dpt_buffer_free(out);
  dpt_buffer_free(dout);
  dpt_buffer_free(idx2);
  dpt_buffer_free(dt);
}
END_TEST

/* ---- axpy, scale, reductions ------------------------------------------------------------ */

START_TEST(axpy_scale_reductions) {
  const float x0[4] = {1, 2, 3, 4.5f}, y0[4] = {10, 20, 30, 40};
  dpt_buffer *x = tu_f32(be, x0, 4), *y = tu_f32(be, y0, 4);
  TU_OK(dpt_axpy(be, 4, -2.0f, x, 0, y, 0));
  const double want_y[4] = {8, 16, 24, 31};
  tu_expect_buf("y", y, 0, want_y, 4, 0);
  TU_OK(dpt_scale(be, 3, 0.5f, y, 1)); /* offset 1 */
  const double want_s[4] = {8, 8, 12, 15.5};
  tu_expect_buf("scaled y", y, 0, want_s, 4, 0);

  double s = 0;
  TU_OK(dpt_sum(be, 4, x, 0, &s));
  ck_assert_msg(s == 10.5, "sum %g", s);
  TU_OK(dpt_sumsq(be, 4, x, 0, &s));
  ck_assert_msg(s == 34.25, "sumsq %g", s);
  TU_OK(dpt_sum(be, 0, x, 0, &s));
  ck_assert_msg(s == 0.0, "empty sum %g", s);
  /* the CPU reference accumulates in double: float would lose the ones */
  const float big[4] = {1e8f, 1, -1e8f, 1};
  dpt_buffer *b = tu_f32(be, big, 4);
  TU_OK(dpt_sum(be, 4, b, 0, &s));
  ck_assert_msg(s == 2.0, "sum of {1e8, 1, -1e8, 1} = %g, want 2 (double accumulation)", s);

  const float nf[6] = {1, NAN, INFINITY, -INFINITY, 0, FLT_MAX};
  dpt_buffer *n = tu_f32(be, nf, 6);
  uint64_t count = 99;
  TU_OK(dpt_count_nonfinite(be, 6, n, 0, &count));
  ck_assert_uint_eq(count, 3);
  TU_OK(dpt_count_nonfinite(be, 2, n, 4, &count));
  ck_assert_uint_eq(count, 0);
  dpt_buffer_free(x);
  dpt_buffer_free(y);
  dpt_buffer_free(b);
  dpt_buffer_free(n);
}
END_TEST

/* ---- optimizers: two steps by hand ---------------------------------------------------------
 * w = [1, -2], grad = [0.5, 0.25] both steps, lr 0.1, momentum 0.9, weight decay 0.01.
 * plain:    g1 = [0.51, 0.23], v1 = g1, w1 = [0.949, -2.023];
 *           g2 = [0.50949, 0.22977], v2 = 0.9 v1 + g2 = [0.96849, 0.43677],
 *           w2 = [0.852151, -2.066677].
 * Nesterov: step1 = g1 + 0.9 v1 = [0.969, 0.437], w1 = [0.9031, -2.0437];
 *           g2 = [0.509031, 0.229563], v2 = [0.968031, 0.436563],
 *           step2 = g2 + 0.9 v2 = [1.3802589, 0.6224697], w2 = [0.76507411, -2.10594697].
 * no momentum, no decay: w1 = [0.95, -2.025], w2 = [0.9, -2.05]. */
START_TEST(sgd_two_steps) {
  const float w0[2] = {1, -2}, g0[2] = {0.5f, 0.25f};
  dpt_buffer *g = tu_f32(be, g0, 2);
  for (int nesterov = 0; nesterov < 2; nesterov++) {
    dpt_buffer *w = tu_f32(be, w0, 2), *v = tu_f32_fill(be, 2, 0.0f);
    const dpt_sgd_params p = {0.1f, 0.9f, 0.01f, nesterov};
    TU_OK(dpt_sgd_update(be, 2, &p, w, 0, g, 0, v, 0));
    const double w1[2][2] = {{0.949, -2.023}, {0.9031, -2.0437}};
    tu_expect_buf(nesterov ? "w1 (nesterov)" : "w1", w, 0, w1[nesterov], 2, 1e-6);
    TU_OK(dpt_sgd_update(be, 2, &p, w, 0, g, 0, v, 0));
    const double w2[2][2] = {{0.852151, -2.066677}, {0.76507411, -2.10594697}};
    const double v2[2][2] = {{0.96849, 0.43677}, {0.968031, 0.436563}};
    tu_expect_buf(nesterov ? "w2 (nesterov)" : "w2", w, 0, w2[nesterov], 2, 1e-6);
    tu_expect_buf(nesterov ? "v2 (nesterov)" : "v2", v, 0, v2[nesterov], 2, 1e-6);
    dpt_buffer_free(w);
    dpt_buffer_free(v);
  }
  dpt_buffer *w = tu_f32(be, w0, 2);
  const dpt_sgd_params plain = {0.1f, 0.0f, 0.0f, 0};
  TU_OK(dpt_sgd_update(be, 2, &plain, w, 0, g, 0, NULL, 0)); /* no velocity needed */
  TU_OK(dpt_sgd_update(be, 2, &plain, w, 0, g, 0, NULL, 0));
  const double want[2] = {0.9, -2.05};
  tu_expect_buf("w (no momentum)", w, 0, want, 2, 1e-6);
  dpt_buffer_free(w);
  dpt_buffer_free(g);
}
END_TEST

/* AdamW, w = [1, -2], lr 0.01, betas 0.9/0.999, eps 1e-8, weight decay 0.1;
 * step 1, g = [0.5, -0.25]: w *= 0.999; m = [0.05, -0.025]; v = [2.5e-4, 6.25e-5];
 *   m^ = [0.5, -0.25], v^ = [0.25, 0.0625]: w = [0.999 - 0.01, -1.998 + 0.01]
 *   = [0.9890000002, -1.9880000004] (eps);
 * step 2, g = [0.1, 0.3]: m = [0.055, 0.0075], v = [2.5975e-4, 1.524375e-4],
 *   w = [0.979980590638265, -1.98744144765437]. */
START_TEST(adamw_two_steps) {
  const float w0[2] = {1, -2}, g1[2] = {0.5f, -0.25f}, g2[2] = {0.1f, 0.3f};
  dpt_buffer *w = tu_f32(be, w0, 2), *m = tu_f32_fill(be, 2, 0.0f), *v = tu_f32_fill(be, 2, 0.0f);
  dpt_buffer *ga = tu_f32(be, g1, 2), *gb = tu_f32(be, g2, 2);
  dpt_adamw_params p = {0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, 1};
  TU_OK(dpt_adamw_update(be, 2, &p, w, 0, ga, 0, m, 0, v, 0));
  const double w1[2] = {0.9890000002, -1.9880000004};
  tu_expect_buf("w1", w, 0, w1, 2, 1e-6);
  const double m1[2] = {0.05, -0.025}, v1[2] = {2.5e-4, 6.25e-5};
  tu_expect_buf("m1", m, 0, m1, 2, 1e-7);
  tu_expect_buf("v1", v, 0, v1, 2, 2e-8); /* 1 - 0.999f is 0.00099998713 */
  p.step = 2;
  TU_OK(dpt_adamw_update(be, 2, &p, w, 0, gb, 0, m, 0, v, 0));
  const double w2[2] = {0.979980590638265, -1.98744144765437};
  tu_expect_buf("w2", w, 0, w2, 2, 1e-6);
  const double m2[2] = {0.055, 0.0075}, v2[2] = {2.5975e-4, 1.524375e-4};
  tu_expect_buf("m2", m, 0, m2, 2, 1e-7);
  tu_expect_buf("v2", v, 0, v2, 2, 2e-8);
  dpt_buffer_free(w);
  dpt_buffer_free(m);
  dpt_buffer_free(v);
  dpt_buffer_free(ga);
  dpt_buffer_free(gb);
}
END_TEST

/* ---- float16 ---------------------------------------------------------------------------- */

static int f16_nan(uint16_t h) {
  return (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0;
}

START_TEST(f16_values) {
  static const struct {
    float f;
    uint16_t h;
    const char *why;
  } cases[] = {
      {1.0f, 0x3C00, "one"},
      {-2.0f, 0xC000, "minus two"},
      {65504.0f, 0x7BFF, "largest finite"},
      {65519.0f, 0x7BFF, "below the overflow midpoint"},
      {65520.0f, 0x7C00, "the midpoint to 65536 rounds to even: infinity"},
      {1e6f, 0x7C00, "overflow"},
      {-1e6f, 0xFC00, "negative overflow"},
      {5.96e-8f, 0x0001, "smallest subnormal"},
      {0x1p-25f, 0x0000, "half the smallest subnormal: tie to even (0)"},
      {0x1.8p-24f, 0x0002, "1.5 x smallest subnormal: tie to even (2)"},
      {0x1.2p-24f, 0x0001, "1.125 x smallest subnormal: nearest"},
      {0x1.ff8p-15f, 0x03FF, "largest subnormal"},
      {0x1p-14f, 0x0400, "smallest normal"},
      {-0.0f, 0x8000, "negative zero"},
      {0.0f, 0x0000, "zero"},
      {1e-30f, 0x0000, "underflow"},
      {1.0f + 0x1p-11f, 0x3C00, "tie between 1 and 1+2^-10: even (1)"},
      {1.0f + 0x1.8p-10f, 0x3C02, "tie between 1+2^-10 and 1+2^-9: even"},
      {2049.0f, 0x6800, "2049 ties to 2048"},
      {2051.0f, 0x6802, "2051 ties to 2052"},
      {INFINITY, 0x7C00, "infinity"},
      {-INFINITY, 0xFC00, "-infinity"},
  };
  enum { N = sizeof cases / sizeof cases[0] };
  float src[N + 1];
  for (int i = 0; i < N; i++)
    src[i] = cases[i].f;
  src[N] = NAN;
  dpt_buffer *s = tu_f32(be, src, N + 1), *d = tu_buf(be, NULL, (N + 1) * 2);
  TU_OK(dpt_f32_to_f16(be, N + 1, s, 0, d, 0));
  uint16_t h[N + 1];
  TU_OK(dpt_buffer_download(d, 0, h, sizeof h));
  for (int i = 0; i < N; i++) {
    ck_assert_msg(h[i] == cases[i].h, "f32_to_f16(%a) = 0x%04x, want 0x%04x (%s)",
                  (double)cases[i].f, h[i], cases[i].h, cases[i].why);
    ck_assert_msg(dpt_f32_to_f16_scalar(cases[i].f) == cases[i].h,
                  "dpt_f32_to_f16_scalar(%a) = 0x%04x, want 0x%04x (%s)", (double)cases[i].f,
                  dpt_f32_to_f16_scalar(cases[i].f), cases[i].h, cases[i].why);
  }
  ck_assert_msg(f16_nan(h[N]), "f32_to_f16(NaN) = 0x%04x, not a NaN", h[N]);
  ck_assert_msg(f16_nan(dpt_f32_to_f16_scalar(NAN)), "scalar NaN conversion lost the NaN");

  /* back: exact */
  const uint16_t hb[7] = {0x0001, 0x03FF, 0x3C00, 0x7BFF, 0x8000, 0x7C00, 0x7E00};
  const double fb[7] = {0x1p-24, 0x1.ff8p-15, 1.0, 65504.0, -0.0, INFINITY, NAN};
  dpt_buffer *hs = tu_buf(be, hb, sizeof hb), *fd = tu_f32_fill(be, 7, 0.0f);
  TU_OK(dpt_f16_to_f32(be, 7, hs, 0, fd, 0));
  float got[7];
  tu_get(fd, 0, got, 7);
  for (int i = 0; i < 7; i++) {
    if (isnan(fb[i])) {
      ck_assert_msg(isnan(got[i]), "f16_to_f32(0x%04x) = %g, want NaN", hb[i], (double)got[i]);
    } else {
      ck_assert_msg((double)got[i] == fb[i] && !signbit(got[i]) == !signbit(fb[i]),
                    "f16_to_f32(0x%04x) = %a, want %a", hb[i], (double)got[i], fb[i]);
    }
  }
  dpt_buffer_free(s);
  dpt_buffer_free(d);
  dpt_buffer_free(hs);
  dpt_buffer_free(fd);
}
END_TEST

/* The CPU ops convert whole arrays (8 at a time through F16C where the CPU has it): every
 * binary16 pattern back to float32, and float32 patterns (random, plus each binary16 value and
 * the midpoints above it: ties, subnormals, overflow, NaN payloads) to binary16, give the
 * scalar conversions' bits, at a length that is not a multiple of 8. */
START_TEST(f16_arrays_match_scalar) {
  enum { H = 65536, F = 3 * 65536 + 5 };
  uint16_t *h = malloc(H * 2), *hd = malloc(F * 2);
  float *f = malloc(F * 4), *fd = malloc(H * 4);
  ck_assert(h && hd && f && fd);
  for (int i = 0; i < H; i++)
    h[i] = (uint16_t)i;
  dpt_buffer *hs = tu_buf(be, h, H * 2), *fo = tu_f32_fill(be, H, 0.0f);
  TU_OK(dpt_f16_to_f32(be, H, hs, 0, fo, 0));
  tu_get(fo, 0, fd, H);
  for (int i = 0; i < H; i++) {
    const float want = dpt_f16_to_f32_scalar(h[i]);
    ck_assert_msg(memcmp(&fd[i], &want, 4) == 0, "f16_to_f32(0x%04x) = %a, want %a", h[i],
                  (double)fd[i], (double)want);
  }
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < F; i++) {
    uint32_t u;
    if (i < 2 * H) { /* a binary16 value, then the midpoint to the next one up */
      const float v = dpt_f16_to_f32_scalar((uint16_t)(i / 2));
      memcpy(&u, &v, 4);
      if (i % 2) u += 1u << 12;
    } else {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      u = (uint32_t)x;
    }
    memcpy(&f[i], &u, 4);
  }
  dpt_buffer *fs = tu_f32(be, f, F), *ho = tu_buf(be, NULL, F * 2);
  TU_OK(dpt_f32_to_f16(be, F, fs, 0, ho, 0));
  TU_OK(dpt_buffer_download(ho, 0, hd, F * 2));
  for (int i = 0; i < F; i++)
    ck_assert_msg(hd[i] == dpt_f32_to_f16_scalar(f[i]), "f32_to_f16(%a) = 0x%04x, want 0x%04x",
                  (double)f[i], hd[i], dpt_f32_to_f16_scalar(f[i]));
  dpt_buffer_free(hs);
  dpt_buffer_free(fo);
  dpt_buffer_free(fs);
  dpt_buffer_free(ho);
  free(h);
  free(hd);
  free(f);
  free(fd);
}
END_TEST

/* ---- bfloat16 --------------------------------------------------------------------------- */

static float f32_of_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint32_t bits_of_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* float32 bit patterns and their bfloat16, by hand: ties to even, the overflow edge, float32
 * subnormals, NaNs (quiet, top payload kept, never infinity), with the op and the scalar. */
START_TEST(bf16_values) {
  static const struct {
    uint32_t f;
    uint16_t h;
    const char *why;
  } cases[] = {
      {0x3f800000u, 0x3f80, "one"},
      {0xc0000000u, 0xc000, "minus two"},
      {0x3f808000u, 0x3f80, "tie above 1: even (1)"},
      {0x3f818000u, 0x3f82, "tie above 1+2^-7: even (1+2^-6)"},
      {0x3f807fffu, 0x3f80, "just below a tie"},
      {0x3f808001u, 0x3f81, "just above a tie"},
      {0x7f7f0000u, 0x7f7f, "largest finite"},
      {0x7f7f7fffu, 0x7f7f, "below the overflow midpoint"},
      {0x7f7f8000u, 0x7f80, "the overflow midpoint rounds to even: infinity"},
      {0x7f7fffffu, 0x7f80, "FLT_MAX overflows"},
      {0xff7fffffu, 0xff80, "-FLT_MAX overflows"},
      {0x7f800000u, 0x7f80, "infinity"},
      {0xff800000u, 0xff80, "-infinity"},
      {0x00000001u, 0x0000, "smallest float32 subnormal: zero"},
      {0x00008000u, 0x0000, "half the smallest bfloat16 subnormal: tie to even (0)"},
      {0x00018000u, 0x0002, "1.5 x smallest subnormal: tie to even (2)"},
      {0x00010000u, 0x0001, "smallest subnormal 2^-133"},
      {0x007f7fffu, 0x007f, "largest subnormal, rounded down"},
      {0x007fffffu, 0x0080, "largest float32 subnormal rounds up to the smallest normal"},
      {0x80000000u, 0x8000, "negative zero"},
      {0x00000000u, 0x0000, "zero"},
      {0x7fc00000u, 0x7fc0, "quiet NaN"},
      {0x7f800001u, 0x7fc0, "NaN with its payload in the dropped bits: stays NaN"},
      {0xff800001u, 0xffc0, "negative such NaN"},
      {0x7f810000u, 0x7fc1, "signaling NaN: quieted, payload kept"},
  };
  enum { N = sizeof cases / sizeof cases[0] };
  float src[N];
  for (int i = 0; i < N; i++)
    src[i] = f32_of_bits(cases[i].f);
  dpt_buffer *s = tu_f32(be, src, N), *d = tu_buf(be, NULL, N * 2);
  TU_OK(dpt_f32_to_bf16(be, N, s, 0, d, 0));
  uint16_t h[N];
  TU_OK(dpt_buffer_download(d, 0, h, sizeof h));
  for (int i = 0; i < N; i++) {
    ck_assert_msg(h[i] == cases[i].h, "f32_to_bf16(0x%08x) = 0x%04x, want 0x%04x (%s)", cases[i].f,
                  h[i], cases[i].h, cases[i].why);
    ck_assert_msg(dpt_f32_to_bf16_scalar(src[i]) == cases[i].h,
                  "dpt_f32_to_bf16_scalar(0x%08x) = 0x%04x, want 0x%04x (%s)", cases[i].f,
                  dpt_f32_to_bf16_scalar(src[i]), cases[i].h, cases[i].why);
  }

  /* back: exact, a NaN quieted */
  const uint16_t hb[8] = {0x0001, 0x007f, 0x3f80, 0x7f7f, 0x8000, 0x7f80, 0x7f81, 0xffc0};
  const uint32_t fb[8] = {0x00010000u, 0x007f0000u, 0x3f800000u, 0x7f7f0000u,
                          0x80000000u, 0x7f800000u, 0x7fc10000u, 0xffc00000u};
  dpt_buffer *hs = tu_buf(be, hb, sizeof hb), *fd = tu_f32_fill(be, 8, 0.0f);
  TU_OK(dpt_bf16_to_f32(be, 8, hs, 0, fd, 0));
  float got[8];
  tu_get(fd, 0, got, 8);
  for (int i = 0; i < 8; i++) {
    ck_assert_msg(bits_of_f32(got[i]) == fb[i], "bf16_to_f32(0x%04x) = 0x%08x, want 0x%08x", hb[i],
                  bits_of_f32(got[i]), fb[i]);
    ck_assert_msg(bits_of_f32(dpt_bf16_to_f32_scalar(hb[i])) == fb[i],
                  "dpt_bf16_to_f32_scalar(0x%04x) = 0x%08x, want 0x%08x", hb[i],
                  bits_of_f32(dpt_bf16_to_f32_scalar(hb[i])), fb[i]);
  }
  dpt_buffer_free(s);
  dpt_buffer_free(d);
  dpt_buffer_free(hs);
  dpt_buffer_free(fd);
}
END_TEST

typedef dpt_status (*convert_op)(dpt_backend *, size_t, const dpt_buffer *, size_t, dpt_buffer *,
                                 size_t);

/* Every 16-bit pattern through widen then narrow, at odd element offsets of the uint16
 * buffers: back[i] is what pattern i came back as (65536 entries, the caller frees). */
static uint16_t *round_trip_all(convert_op widen, convert_op narrow) {
  enum { N = 65536 };
  uint16_t *h = malloc(N * 2 + 2), *back = malloc(N * 2 + 2);
  ck_assert_ptr_nonnull(h);
  ck_assert_ptr_nonnull(back);
  h[0] = 0;
  for (uint32_t i = 0; i < N; i++)
    h[i + 1] = (uint16_t)i;
  dpt_buffer *hs = tu_buf(be, h, N * 2 + 2), *f = tu_buf(be, NULL, N * 4);
  dpt_buffer *hd = tu_buf(be, NULL, N * 2 + 2);
  TU_OK(widen(be, N, hs, 1, f, 0));
  TU_OK(narrow(be, N, f, 0, hd, 1));
  TU_OK(dpt_buffer_download(hd, 2, back, N * 2));
  free(h);
  dpt_buffer_free(hs);
  dpt_buffer_free(f);
  dpt_buffer_free(hd);
  return back;
}

/* Every bfloat16 pattern converts to float and back to itself (a signaling NaN comes back
 * quieted), with the ops and with the host scalars. */
START_TEST(bf16_round_trip_all) {
  uint16_t *back = round_trip_all(dpt_bf16_to_f32, dpt_f32_to_bf16);
  for (uint32_t i = 0; i < 65536; i++) {
    const uint16_t x = (uint16_t)i;
    const uint16_t want = (x & 0x7fffu) > 0x7f80u ? (uint16_t)(x | 0x0040u) : x;
    ck_assert_msg(back[i] == want, "0x%04x came back as 0x%04x", x, back[i]);
    ck_assert_msg(dpt_f32_to_bf16_scalar(dpt_bf16_to_f32_scalar(x)) == want,
                  "scalar round trip of 0x%04x", x);
  }
  free(back);
}
END_TEST

/* Every binary16 pattern converts to float and back to itself (NaN stays NaN), with the ops
 * and with the host scalars. */
START_TEST(f16_round_trip_all) {
  uint16_t *back = round_trip_all(dpt_f16_to_f32, dpt_f32_to_f16);
  for (uint32_t i = 0; i < 65536; i++) {
    uint16_t x = (uint16_t)i;
    if (f16_nan(x)) {
      ck_assert_msg(f16_nan(back[i]), "0x%04x came back as 0x%04x", x, back[i]);
      ck_assert_msg(isnan(dpt_f16_to_f32_scalar(x)), "scalar 0x%04x is not NaN", x);
    } else {
      ck_assert_msg(back[i] == x, "0x%04x came back as 0x%04x", x, back[i]);
      ck_assert_msg(dpt_f32_to_f16_scalar(dpt_f16_to_f32_scalar(x)) == x,
                    "scalar round trip of 0x%04x", x);
    }
  }
  free(back);
}
END_TEST

/* ---- layer ops -----------------------------------------------------------------------------
 * x [n=2, c=2, p=2] = channel 0: {1, 2 | 5, 6}, channel 1: {0, 0 | 3, -3}:
 * mean = {3.5, 0}, biased var = {(6.25+2.25+2.25+6.25)/4 = 4.25, 18/4 = 4.5}. */
START_TEST(bn_values) {
  const dpt_bn_geom g = {2, 2, 2, 0.25f};
  const float x0[8] = {1, 2, 0, 0, 5, 6, 3, -3}, gamma[2] = {2, -1}, beta[2] = {0.5f, 1};
  dpt_buffer *x = tu_f32(be, x0, 8), *st = tu_f32_fill(be, 4, NAN);
  dpt_buffer *gb = tu_f32(be, gamma, 2), *bb = tu_f32(be, beta, 2), *y = tu_f32_fill(be, 8, NAN);
  TU_OK(dpt_bn_stats(be, &g, x, 0, st, 0, st, 2));
  const double want_st[4] = {3.5, 0, 4.25, 4.5};
  tu_expect_buf("mean, var", st, 0, want_st, 4, 0);
  /* invstd = 1/sqrt(var + 0.25) = {1/sqrt(4.5), 1/sqrt(4.75)} */
  TU_OK(dpt_bn_fwd(be, &g, x, 0, st, 0, st, 2, gb, 0, bb, 0, y, 0));
  const double i0 = 1 / sqrt(4.5), i1 = 1 / sqrt(4.75);
  const double want_y[8] = {-2.5 * i0 * 2 + 0.5, -1.5 * i0 * 2 + 0.5, 1,           1,
                            1.5 * i0 * 2 + 0.5,  2.5 * i0 * 2 + 0.5,  -3 * i1 + 1, 3 * i1 + 1};
  tu_expect_buf("y", y, 0, want_y, 8, 1e-6);
  /* dy = 1 everywhere: sum_dy = 4 per channel, sum_dy_xhat = sum of xhat = 0, dx = 0 */
  dpt_buffer *dy = tu_f32_fill(be, 8, 1.0f), *sums = tu_f32_fill(be, 4, NAN);
  dpt_buffer *dx = tu_f32_fill(be, 8, NAN);
  TU_OK(dpt_bn_bwd_reduce(be, &g, dy, 0, x, 0, st, 0, st, 2, sums, 0, sums, 2));
  const double want_sums[4] = {0, 0, 4, 4};
  tu_expect_buf("sum_dy_xhat, sum_dy", sums, 0, want_sums, 4, 1e-6);
  TU_OK(dpt_bn_bwd(be, &g, 4, dy, 0, x, 0, st, 0, st, 2, gb, 0, sums, 0, sums, 2, dx, 0));
  const double zeros[8] = {0};
  tu_expect_buf("dx", dx, 0, zeros, 8, 1e-6);
  dpt_buffer_free(x);
  dpt_buffer_free(st);
  dpt_buffer_free(gb);
  dpt_buffer_free(bb);
  dpt_buffer_free(y);
  dpt_buffer_free(dy);
  dpt_buffer_free(sums);
  dpt_buffer_free(dx);
}
END_TEST

START_TEST(avgpool_values) {
  /* 4x5, kernel 2x2, stride 2: the last column is in no window */
  const dpt_pool_geom g = {1, 4, 5, 2, 2, 2, 2};
  const float x0[20] = {1, 3, 2, 4, 9, 5, 7, 6, 8, 9, 9, 2, 1, 0, 9, 3, 2, 5, 6, 9};
  dpt_buffer *x = tu_f32(be, x0, 20), *y = tu_f32_fill(be, 4, NAN);
  TU_OK(dpt_avgpool_fwd(be, &g, x, 0, y, 0));
  const double want_y[4] = {4, 5, 4, 3};
  tu_expect_buf("y", y, 0, want_y, 4, 0);
  const float dy0[4] = {4, 8, 12, 16};
  dpt_buffer *dy = tu_f32(be, dy0, 4), *dx = tu_f32_fill(be, 20, NAN);
  TU_OK(dpt_avgpool_bwd(be, &g, dy, 0, dx, 0));
  const double want_dx[20] = {1, 1, 2, 2, 0, 1, 1, 2, 2, 0, 3, 3, 4, 4, 0, 3, 3, 4, 4, 0};
  tu_expect_buf("dx", dx, 0, want_dx, 20, 0);
  dpt_buffer_free(x);
  dpt_buffer_free(y);
  dpt_buffer_free(dy);
  dpt_buffer_free(dx);
}
END_TEST

/* gemm_batched with stride_c 0 is, bit for bit, dpt_gemm with beta 0 and then beta 1 per item
 * (pinned training hashes depend on it); with stride_c > 0 each item is one dpt_gemm. Checked
 * with the default gemm and with the portable one. */
static void expect_batched_is_gemm_loop(dpt_backend *b, int ta, int tb) {
  enum { M = 37, N = 29, K = 70, BATCH = 5 };
  static float a[BATCH * M * K], bm[BATCH * K * N], c1[BATCH * M * N], c2[BATCH * M * N];
  tu_rng r = {11};
  tu_fill(&r, a, BATCH * M * K, -1, 1);
  tu_fill(&r, bm, BATCH * K * N, -1, 1);
  dpt_buffer *ba = tu_f32(b, a, BATCH * M * K), *bb = tu_f32(b, bm, BATCH * K * N);
  dpt_buffer *bc = tu_f32_fill(b, BATCH * M * N, NAN), *bl = tu_f32_fill(b, BATCH * M * N, NAN);
  const size_t lda = ta ? M : K, ldb = tb ? K : N;
  for (int summed = 1; summed >= 0; summed--) {
    dpt_gemm_batch bt = {BATCH, M * K, K * N, summed ? 0 : M * N};
    TU_OK(dpt_gemm_batched(b, &bt, ta, tb, M, N, K, 0.75f, ba, 0, lda, bb, 0, ldb, 0.0f, bc, 0, N));
    for (size_t i = 0; i < BATCH; i++)
      TU_OK(dpt_gemm(b, ta, tb, M, N, K, 0.75f, ba, i * M * K, lda, bb, i * K * N, ldb,
                     summed && i > 0 ? 1.0f : 0.0f, bl, summed ? 0 : i * M * N, N));
    size_t n = summed ? M * N : BATCH * M * N;
    tu_get(bc, 0, c1, n);
    tu_get(bl, 0, c2, n);
    ck_assert_msg(memcmp(c1, c2, n * sizeof(float)) == 0,
                  "gemm_batched (ta=%d tb=%d stride_c %zu) differs from the loop of dpt_gemm", ta,
                  tb, bt.stride_c);
  }
  dpt_buffer_free(ba);
  dpt_buffer_free(bb);
  dpt_buffer_free(bc);
  dpt_buffer_free(bl);
}

START_TEST(gemm_batched_is_gemm_loop) {
  for (int t = 0; t < 4; t++)
    expect_batched_is_gemm_loop(be, t & 1, t >> 1);
  setenv("DPT_CPU_GEMM", "portable", 1);
  dpt_backend *portable = NULL;
  dpt_status st = dpt_backend_create(DPT_BACKEND_CPU, 0, &portable);
  unsetenv("DPT_CPU_GEMM");
  TU_OK(st);
  for (int t = 0; t < 4; t++)
    expect_batched_is_gemm_loop(portable, t & 1, t >> 1);
  dpt_backend_destroy(portable);
}
END_TEST

/* ---- backward ops against their forward ops ---------------------------------------------- */

static double dot(const float *a, const float *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++)
    s += (double)a[i] * (double)b[i];
  return s;
}

/* A scalar loss of the current device state. */
typedef double (*loss_fn)(void *ctx);

/* Central difference (L(x + h e_i) - L(x - h e_i)) / 2h of loss(ctx) in element i of the
 * float tensor whose host copy is x and device copy is bx (offset 0); restores x[i]. */
static double central_diff(dpt_buffer *bx, const float *x, int i, float h, loss_fn loss,
                           void *ctx) {
  double l[2];
  for (int s = 0; s < 2; s++) {
    float v = x[i] + (s ? -h : h);
    TU_OK(dpt_buffer_upload(bx, (size_t)i * 4, &v, 4));
    l[s] = loss(ctx);
  }
  TU_OK(dpt_buffer_upload(bx, (size_t)i * 4, &x[i], 4));
  return (l[0] - l[1]) / (2.0 * (double)h);
}

/* Compares grad[0..n) with central differences in every element of x. */
static void expect_fd(const char *what, dpt_buffer *bx, const float *x, const float *grad, int n,
                      float h, double tol, loss_fn loss, void *ctx) {
  for (int i = 0; i < n; i++) {
    double fd = central_diff(bx, x, i, h, loss, ctx);
    ck_assert_msg(fabs(fd - grad[i]) < tol, "%s[%d] = %.9g, finite difference %.9g", what, i,
                  (double)grad[i], fd);
  }
}

/* sum(out * g) with out downloaded from `out` (n floats) after `run` wrote it. */
typedef struct weighted {
  dpt_buffer *out; /* the forward output */
  const float *g;  /* host weights, n */
  size_t n;
  float *tmp; /* host scratch, n */
} weighted;

static double weighted_sum(weighted *w) {
  tu_get(w->out, 0, w->tmp, w->n);
  return dot(w->tmp, w->g, w->n);
}

/* L(x) = sum(relu(x) * G); dL/dx = relu_bwd(x, G). x stays >= 0.05 away from 0. */
enum { RELU_N = 37 };
typedef struct relu_ctx {
  dpt_buffer *x;
  weighted w;
} relu_ctx;

static double relu_loss(void *p) {
  relu_ctx *c = p;
  TU_OK(dpt_relu_fwd(be, RELU_N, c->x, 0, c->w.out, 0));
  return weighted_sum(&c->w);
}

START_TEST(relu_bwd_vs_fd) {
  float x[RELU_N], g[RELU_N], y[RELU_N], dx[RELU_N];
  tu_rng r = {1};
  tu_fill(&r, x, RELU_N, -1, 1);
  tu_fill(&r, g, RELU_N, -1, 1);
  for (int i = 0; i < RELU_N; i++) {
    if (fabsf(x[i]) < 0.05f) x[i] = 0.5f;
  }
  dpt_buffer *bx = tu_f32(be, x, RELU_N), *bg = tu_f32(be, g, RELU_N);
  dpt_buffer *bd = tu_f32_fill(be, RELU_N, NAN);
  TU_OK(dpt_relu_bwd(be, RELU_N, bx, 0, bg, 0, bd, 0));
  tu_get(bd, 0, dx, RELU_N);
  relu_ctx c = {bx, {tu_f32_fill(be, RELU_N, NAN), g, RELU_N, y}};
  expect_fd("relu dx", bx, x, dx, RELU_N, 0.01f, 1e-4, relu_loss, &c);
  dpt_buffer_free(bx);
  dpt_buffer_free(bg);
  dpt_buffer_free(bd);
  dpt_buffer_free(c.w.out);
}
END_TEST

/* L(b) = sum((y + b) * G) over y [R, C]; dL/db = bias_grad(G). */
enum { BIAS_R = 5, BIAS_C = 7 };
typedef struct bias_ctx {
  dpt_buffer *b;
  const float *y0; /* y before the bias, host */
  weighted w;
} bias_ctx;

static double bias_loss(void *p) {
  bias_ctx *c = p;
  TU_OK(dpt_buffer_upload(c->w.out, 0, c->y0, BIAS_R * BIAS_C * 4));
  TU_OK(dpt_bias_add(be, BIAS_R, BIAS_C, c->w.out, 0, c->b, 0));
  return weighted_sum(&c->w);
}

START_TEST(bias_grad_vs_fd) {
  float y[BIAS_R * BIAS_C], g[BIAS_R * BIAS_C], b[BIAS_C], db[BIAS_C], out[BIAS_R * BIAS_C];
  tu_rng r = {2};
  tu_fill(&r, y, BIAS_R * BIAS_C, -1, 1);
  tu_fill(&r, g, BIAS_R * BIAS_C, -1, 1);
  tu_fill(&r, b, BIAS_C, -1, 1);
  dpt_buffer *bg = tu_f32(be, g, BIAS_R * BIAS_C), *bdb = tu_f32_fill(be, BIAS_C, NAN);
  dpt_buffer *bb = tu_f32(be, b, BIAS_C);
  TU_OK(dpt_bias_grad(be, BIAS_R, BIAS_C, bg, 0, 0.0f, bdb, 0));
  tu_get(bdb, 0, db, BIAS_C);
  bias_ctx c = {bb, y, {tu_buf(be, NULL, sizeof y), g, BIAS_R * BIAS_C, out}};
  expect_fd("db", bb, b, db, BIAS_C, 0.25f, 1e-4, bias_loss, &c); /* L is linear in b */
  dpt_buffer_free(bg);
  dpt_buffer_free(bdb);
  dpt_buffer_free(bb);
  dpt_buffer_free(c.w.out);
}
END_TEST

/* <im2col(x), c> == <x, col2im(c)> on geometries with padding, strides and overlaps. */
START_TEST(col2im_is_adjoint_of_im2col) {
  static const dpt_conv_geom geoms[] = {
      {1, 1, 3, 3, 2, 2, 1, 1, 1, 1},  {2, 3, 7, 5, 3, 3, 1, 1, 1, 1},
      {1, 2, 9, 11, 3, 2, 2, 3, 1, 0}, {2, 1, 6, 6, 6, 6, 1, 1, 0, 0},
      {1, 2, 5, 4, 1, 1, 1, 1, 2, 2},  {1, 3, 8, 8, 3, 3, 3, 3, 0, 0},
  };
  tu_rng r = {3};
  for (size_t gi = 0; gi < sizeof geoms / sizeof geoms[0]; gi++) {
    const dpt_conv_geom *g = &geoms[gi];
    size_t oh, ow;
    TU_OK(dpt_conv_out_size(g, &oh, &ow));
    size_t nx = g->n * g->c * g->h * g->w, nc = g->n * g->c * g->kh * g->kw * oh * ow;
    float *x = malloc(nx * 4), *c = malloc(nc * 4), *ax = malloc(nc * 4), *atc = malloc(nx * 4);
    ck_assert(x && c && ax && atc);
    tu_fill(&r, x, nx, -1, 1);
    tu_fill(&r, c, nc, -1, 1);
    dpt_buffer *bx = tu_f32(be, x, nx), *bc = tu_f32(be, c, nc);
    dpt_buffer *bax = tu_f32_fill(be, nc, NAN), *batc = tu_f32_fill(be, nx, NAN);
    TU_OK(dpt_im2col(be, g, bx, 0, bax, 0));
    TU_OK(dpt_col2im(be, g, bc, 0, batc, 0));
    tu_get(bax, 0, ax, nc);
    tu_get(batc, 0, atc, nx);
    double lhs = dot(ax, c, nc), rhs = dot(x, atc, nx);
    ck_assert_msg(fabs(lhs - rhs) <= 1e-5 * (1.0 + fabs(lhs)),
                  "geometry %zu: <im2col(x), c> = %.9g but <x, col2im(c)> = %.9g", gi, lhs, rhs);
    free(x);
    free(c);
    free(ax);
    free(atc);
    dpt_buffer_free(bx);
    dpt_buffer_free(bc);
    dpt_buffer_free(bax);
    dpt_buffer_free(batc);
  }
}
END_TEST

/* L(x) = sum(maxpool(x) * G) with distinct inputs (no ties within 2h); overlapping windows. */
static const dpt_pool_geom fd_pool = {2, 6, 7, 3, 2, 2, 1}; /* y [2, 2, 6] */
enum { POOL_NX = 2 * 6 * 7, POOL_NY = 2 * 2 * 6 };
typedef struct pool_ctx {
  dpt_buffer *x, *argmax;
  weighted w;
} pool_ctx;

static double pool_loss(void *p) {
  pool_ctx *c = p;
  TU_OK(dpt_maxpool_fwd(be, &fd_pool, c->x, 0, c->w.out, 0, c->argmax, 0));
  return weighted_sum(&c->w);
}

START_TEST(maxpool_bwd_vs_fd) {
  size_t oh, ow;
  TU_OK(dpt_pool_out_size(&fd_pool, &oh, &ow));
  ck_assert_uint_eq(fd_pool.planes * oh * ow, POOL_NY);
  float x[POOL_NX], gy[POOL_NY], y[POOL_NY], dx[POOL_NX];
  /* a permutation of 0.1 * k: every pair differs by >= 0.1 */
  for (int i = 0; i < POOL_NX; i++)
    x[i] = 0.1f * (float)((i * 37) % POOL_NX);
  tu_rng r = {4};
  tu_fill(&r, gy, POOL_NY, -1, 1);
  dpt_buffer *bx = tu_f32(be, x, POOL_NX), *by = tu_f32_fill(be, POOL_NY, NAN);
  dpt_buffer *am = tu_buf(be, NULL, POOL_NY * 4), *bgy = tu_f32(be, gy, POOL_NY);
  dpt_buffer *bdx = tu_f32_fill(be, POOL_NX, NAN);
  TU_OK(dpt_maxpool_fwd(be, &fd_pool, bx, 0, by, 0, am, 0));
  TU_OK(dpt_maxpool_bwd(be, &fd_pool, bgy, 0, am, 0, bdx, 0));
  tu_get(bdx, 0, dx, POOL_NX);
  pool_ctx c = {bx, tu_buf(be, NULL, POOL_NY * 4), {by, gy, POOL_NY, y}};
  expect_fd("maxpool dx", bx, x, dx, POOL_NX, 0.01f, 1e-3, pool_loss, &c);
  dpt_buffer_free(bx);
  dpt_buffer_free(by);
  dpt_buffer_free(am);
  dpt_buffer_free(c.argmax);
  dpt_buffer_free(bgy);
  dpt_buffer_free(bdx);
}
END_TEST

/* <gather(T, idx), D> == <T, scatter_add(D, idx)> with repeated indices. */
START_TEST(embed_scatter_add_is_adjoint_of_gather) {
  enum { N = 23, V = 6, D = 5 };
  float t[V * D], d[N * D], gt[N * D], sd[V * D];
  int32_t idx[N];
  tu_rng r = {5};
  tu_fill(&r, t, V * D, -1, 1);
  tu_fill(&r, d, N * D, -1, 1);
  for (int i = 0; i < N; i++)
    idx[i] = (int32_t)(tu_unit(&r) * V);
  dpt_buffer *bt = tu_f32(be, t, V * D), *bd = tu_f32(be, d, N * D), *bi = tu_i32(be, idx, N);
  dpt_buffer *bg = tu_f32_fill(be, N * D, NAN), *bs = tu_f32_fill(be, V * D, 0.0f);
  TU_OK(dpt_embed_gather(be, N, V, D, bt, 0, bi, 0, bg, 0));
  TU_OK(dpt_embed_scatter_add(be, N, V, D, bd, 0, bi, 0, bs, 0));
  tu_get(bg, 0, gt, N * D);
  tu_get(bs, 0, sd, V * D);
  double lhs = dot(gt, d, N * D), rhs = dot(t, sd, V * D);
  ck_assert_msg(fabs(lhs - rhs) <= 1e-5 * (1.0 + fabs(lhs)),
                "<gather, D> %.9g != <T, scatter> %.9g", lhs, rhs);
  dpt_buffer_free(bt);
  dpt_buffer_free(bd);
  dpt_buffer_free(bi);
  dpt_buffer_free(bg);
  dpt_buffer_free(bs);
}
END_TEST

/* dlogits (scale 1) against central differences of the summed loss. */
enum { SX_R = 4, SX_C = 5 };
typedef struct sx_ctx {
  dpt_buffer *logits, *labels;
} sx_ctx;

static double sx_loss(void *p) {
  sx_ctx *c = p;
  double loss = NAN;
  TU_OK(dpt_softmax_xent(be, SX_R, SX_C, c->logits, 0, c->labels, 0, 1.0f, NULL, 0, &loss, NULL));
  return loss;
}

START_TEST(softmax_xent_grad_vs_fd) {
  float lg[SX_R * SX_C], d[SX_R * SX_C];
  const int32_t lab[SX_R] = {0, 4, 2, 2};
  tu_rng r = {6};
  tu_fill(&r, lg, SX_R * SX_C, -2, 2);
  dpt_buffer *bl = tu_f32(be, lg, SX_R * SX_C), *bb = tu_i32(be, lab, SX_R);
  dpt_buffer *bd = tu_f32_fill(be, SX_R * SX_C, NAN);
  TU_OK(dpt_softmax_xent(be, SX_R, SX_C, bl, 0, bb, 0, 1.0f, bd, 0, NULL, NULL));
  tu_get(bd, 0, d, SX_R * SX_C);
  sx_ctx c = {bl, bb};
  expect_fd("dlogits", bl, lg, d, SX_R * SX_C, 0.01f, 1e-3, sx_loss, &c);
  dpt_buffer_free(bl);
  dpt_buffer_free(bb);
  dpt_buffer_free(bd);
}
END_TEST

/* C = A B, L = sum(C * G): dA = G B^T (gemm, tb) and dB = A^T G (gemm, ta) against finite
 * differences of L (linear, so a large step is exact up to rounding). */
enum { GM = 3, GK = 4, GN = 5 };
typedef struct gemm_ctx {
  dpt_buffer *a, *b;
  weighted w;
} gemm_ctx;

static double gemm_loss(void *p) {
  gemm_ctx *c = p;
  TU_OK(dpt_gemm(be, 0, 0, GM, GN, GK, 1.0f, c->a, 0, GK, c->b, 0, GN, 0.0f, c->w.out, 0, GN));
  return weighted_sum(&c->w);
}

START_TEST(gemm_grad_vs_fd) {
  float a[GM * GK], b[GK * GN], g[GM * GN], c[GM * GN], da[GM * GK], db[GK * GN];
  tu_rng r = {7};
  tu_fill(&r, a, GM * GK, -1, 1);
  tu_fill(&r, b, GK * GN, -1, 1);
  tu_fill(&r, g, GM * GN, -1, 1);
  dpt_buffer *ba = tu_f32(be, a, GM * GK), *bb = tu_f32(be, b, GK * GN);
  dpt_buffer *bg = tu_f32(be, g, GM * GN), *bda = tu_f32_fill(be, GM * GK, NAN);
  dpt_buffer *bdb = tu_f32_fill(be, GK * GN, NAN);
  TU_OK(dpt_gemm(be, 0, 1, GM, GK, GN, 1.0f, bg, 0, GN, bb, 0, GN, 0.0f, bda, 0, GK));
  TU_OK(dpt_gemm(be, 1, 0, GK, GN, GM, 1.0f, ba, 0, GK, bg, 0, GN, 0.0f, bdb, 0, GN));
  tu_get(bda, 0, da, GM * GK);
  tu_get(bdb, 0, db, GK * GN);
  gemm_ctx ctx = {ba, bb, {tu_f32_fill(be, GM * GN, NAN), g, GM * GN, c}};
  expect_fd("dA", ba, a, da, GM * GK, 0.25f, 1e-4, gemm_loss, &ctx);
  expect_fd("dB", bb, b, db, GK * GN, 0.25f, 1e-4, gemm_loss, &ctx);
  dpt_buffer_free(ba);
  dpt_buffer_free(bb);
  dpt_buffer_free(bg);
  dpt_buffer_free(bda);
  dpt_buffer_free(bdb);
  dpt_buffer_free(ctx.w.out);
}
END_TEST

/* Training-mode batch norm as one function of x, gamma and beta: y = bn_fwd(x, bn_stats(x)),
 * L = sum(y * W). Its gradients: dgamma = sum_dy_xhat and dbeta = sum_dy (bn_bwd_reduce with
 * dy = W), dx = bn_bwd with count n*p (the terms through the batch mean and variance). */
enum { BN_MAX = 64 };
typedef struct bn_ctx {
  dpt_bn_geom g;
  dpt_buffer *x, *stats, *gamma, *beta; /* stats: mean [c] then var [c] */
  weighted w;
  int relu; /* the bn_relu ops: y = max(bn(x), 0) */
} bn_ctx;

static double bn_loss(void *p) {
  bn_ctx *c = p;
  TU_OK(dpt_bn_stats(be, &c->g, c->x, 0, c->stats, 0, c->stats, c->g.c));
  TU_OK((c->relu ? dpt_bn_relu_fwd : dpt_bn_fwd)(be, &c->g, c->x, 0, c->stats, 0, c->stats, c->g.c,
                                                 c->gamma, 0, c->beta, 0, c->w.out, 0));
  return weighted_sum(&c->w);
}

/* The bn_relu ops against their unfused composition (bn_fwd, relu_fwd; relu_bwd, then the bn
 * backward ops), bit for bit: y, the sums and dx. */
static void expect_bn_relu_composed(bn_ctx *c, dpt_buffer *bw, const float *sums, const float *dx) {
  const dpt_bn_geom *g = &c->g;
  const size_t nx = g->n * g->c * g->p;
  float y[BN_MAX], y2[BN_MAX], sums2[16], dx2[BN_MAX];
  dpt_buffer *t = tu_f32_fill(be, nx, NAN), *d = tu_f32_fill(be, nx, NAN);
  dpt_buffer *s2 = tu_f32_fill(be, 2 * g->c, NAN), *dx2b = tu_f32_fill(be, nx, NAN);
  TU_OK(dpt_bn_fwd(be, g, c->x, 0, c->stats, 0, c->stats, g->c, c->gamma, 0, c->beta, 0, t, 0));
  TU_OK(dpt_relu_fwd(be, nx, t, 0, t, 0));
  TU_OK(dpt_relu_bwd(be, nx, t, 0, bw, 0, d, 0));
  TU_OK(dpt_bn_bwd_reduce(be, g, d, 0, c->x, 0, c->stats, 0, c->stats, g->c, s2, 0, s2, g->c));
  TU_OK(dpt_bn_bwd(be, g, g->n * g->p, d, 0, c->x, 0, c->stats, 0, c->stats, g->c, c->gamma, 0, s2,
                   0, s2, g->c, dx2b, 0));
  tu_get(c->w.out, 0, y, nx);
  tu_get(t, 0, y2, nx);
  tu_get(s2, 0, sums2, 2 * g->c);
  tu_get(dx2b, 0, dx2, nx);
  ck_assert(memcmp(y, y2, nx * sizeof(float)) == 0);
  ck_assert(memcmp(sums, sums2, 2 * g->c * sizeof(float)) == 0);
  ck_assert(memcmp(dx, dx2, nx * sizeof(float)) == 0);
  dpt_buffer_free(t);
  dpt_buffer_free(d);
  dpt_buffer_free(s2);
  dpt_buffer_free(dx2b);
}

static void expect_bn_grads(const dpt_bn_geom *g, uint64_t seed, int relu) {
  const size_t nx = g->n * g->c * g->p;
  ck_assert(nx <= BN_MAX && g->c <= 8);
  float x[BN_MAX], w[BN_MAX], y[BN_MAX], dx[BN_MAX], gamma[8], beta[8], sums[16];
  tu_rng r = {seed};
  tu_fill(&r, x, nx, -1, 2);
  tu_fill(&r, w, nx, -1, 1);
  tu_fill(&r, gamma, g->c, 0.5, 1.5);
  tu_fill(&r, beta, g->c, -1, 1);
  bn_ctx c = {*g,
              tu_f32(be, x, nx),
              tu_f32_fill(be, 2 * g->c, NAN),
              tu_f32(be, gamma, g->c),
              tu_f32(be, beta, g->c),
              {tu_f32_fill(be, nx, NAN), w, nx, y},
              relu};
  dpt_buffer *bw = tu_f32(be, w, nx), *bsums = tu_f32_fill(be, 2 * g->c, NAN);
  dpt_buffer *bdx = tu_f32_fill(be, nx, NAN);
  bn_loss(&c); /* the batch statistics into c.stats */
  if (relu) {
    TU_OK(dpt_bn_relu_bwd_reduce(be, g, bw, 0, c.w.out, 0, c.x, 0, c.stats, 0, c.stats, g->c, bsums,
                                 0, bsums, g->c));
    TU_OK(dpt_bn_relu_bwd(be, g, g->n * g->p, bw, 0, c.w.out, 0, c.x, 0, c.stats, 0, c.stats, g->c,
                          c.gamma, 0, bsums, 0, bsums, g->c, bdx, 0));
  } else {
    TU_OK(
        dpt_bn_bwd_reduce(be, g, bw, 0, c.x, 0, c.stats, 0, c.stats, g->c, bsums, 0, bsums, g->c));
    TU_OK(dpt_bn_bwd(be, g, g->n * g->p, bw, 0, c.x, 0, c.stats, 0, c.stats, g->c, c.gamma, 0,
                     bsums, 0, bsums, g->c, bdx, 0));
  }
  tu_get(bsums, 0, sums, 2 * g->c);
  tu_get(bdx, 0, dx, nx);
  float pre[BN_MAX]; /* the normalized values, before the ReLU */
  dpt_buffer *bpre = tu_f32_fill(be, nx, NAN);
  TU_OK(dpt_bn_fwd(be, g, c.x, 0, c.stats, 0, c.stats, g->c, c.gamma, 0, c.beta, 0, bpre, 0));
  tu_get(bpre, 0, pre, nx);
  dpt_buffer_free(bpre);
  if (relu) expect_bn_relu_composed(&c, bw, sums, dx);
  /* nonlinear in x: a small step, float rounding of L over 2h bounds the tolerance; with the
   * ReLU, an output within reach of its kink has no difference to compare with */
  int checked = 0;
  for (size_t i = 0; i < nx; i++) {
    if (relu && fabsf(pre[i]) < 0.1f) continue;
    double fd = central_diff(c.x, x, (int)i, 1e-2f, bn_loss, &c);
    ck_assert_msg(fabs(fd - dx[i]) < 2e-3, "bn dx[%zu] = %.9g, finite difference %.9g", i,
                  (double)dx[i], fd);
    checked++;
  }
  ck_assert_int_ge(checked, (int)nx / 2);
  /* linear in gamma and beta but for the ReLU's kinks */
  const float hp = relu ? 1e-3f : 0.25f;
  const double tp = relu ? 2e-3 : 1e-4;
  expect_fd("bn dgamma", c.gamma, gamma, sums, (int)g->c, hp, tp, bn_loss, &c);
  expect_fd("bn dbeta", c.beta, beta, sums + g->c, (int)g->c, hp, tp, bn_loss, &c);
  /* the input gradient of a normalization sums to 0 per channel */
  for (size_t ch = 0; ch < g->c && !relu; ch++) {
    double s = 0;
    for (size_t i = 0; i < g->n; i++)
      for (size_t j = 0; j < g->p; j++)
        s += dx[(i * g->c + ch) * g->p + j];
    ck_assert_msg(fabs(s) < 1e-5, "channel %zu: dx sums to %g", ch, s);
  }
  dpt_buffer_free(c.x);
  dpt_buffer_free(c.stats);
  dpt_buffer_free(c.gamma);
  dpt_buffer_free(c.beta);
  dpt_buffer_free(c.w.out);
  dpt_buffer_free(bw);
  dpt_buffer_free(bsums);
  dpt_buffer_free(bdx);
}

START_TEST(bn_train_grads_vs_fd) {
  const dpt_bn_geom g2d = {3, 2, 5, 1e-5f}, g1d = {8, 3, 1, 1e-5f}, wide = {2, 4, 7, 1e-2f};
  expect_bn_grads(&g2d, 21, 0);
  expect_bn_grads(&g1d, 22, 0);
  expect_bn_grads(&wide, 23, 0);
}
END_TEST

START_TEST(bn_relu_grads_vs_fd) {
  const dpt_bn_geom g2d = {3, 2, 5, 1e-5f}, g1d = {8, 3, 1, 1e-5f}, wide = {2, 4, 7, 1e-2f};
  expect_bn_grads(&g2d, 31, 1);
  expect_bn_grads(&g1d, 32, 1);
  expect_bn_grads(&wide, 33, 1);
}
END_TEST

/* Layer normalization as one function of x, gamma and beta: y = layernorm_fwd(x), L = sum(y * W).
 * Its gradients: dgamma and dbeta from layernorm_bwd_params, dx from layernorm_bwd (both with
 * dy = W and the mean and rstd of the forward). */
enum { LN_MAX = 64 };
typedef struct ln_ctx {
  dpt_ln_geom g;
  dpt_buffer *x, *gamma, *beta, *stats; /* stats: mean [rows] then rstd [rows] */
  weighted w;
} ln_ctx;

static double ln_loss(void *p) {
  ln_ctx *c = p;
  TU_OK(dpt_layernorm_fwd(be, &c->g, c->x, 0, c->gamma, 0, c->beta, 0, c->w.out, 0, c->stats, 0,
                          c->stats, c->g.rows));
  return weighted_sum(&c->w);
}

static void expect_ln_grads(const dpt_ln_geom *g, uint64_t seed) {
  const size_t nx = g->rows * g->cols;
  ck_assert(nx <= LN_MAX && g->cols <= 16 && g->rows <= 16);
  float x[LN_MAX], w[LN_MAX], y[LN_MAX], dx[LN_MAX], gamma[16], beta[16], dgb[32];
  tu_rng r = {seed};
  tu_fill(&r, x, nx, -1, 2);
  tu_fill(&r, w, nx, -1, 1);
  tu_fill(&r, gamma, g->cols, 0.5, 1.5);
  tu_fill(&r, beta, g->cols, -1, 1);
  ln_ctx c = {*g,
              tu_f32(be, x, nx),
              tu_f32(be, gamma, g->cols),
              tu_f32(be, beta, g->cols),
              tu_f32_fill(be, 2 * g->rows, NAN),
              {tu_f32_fill(be, nx, NAN), w, nx, y}};
  dpt_buffer *bw = tu_f32(be, w, nx), *bgb = tu_f32_fill(be, 2 * g->cols, NAN);
  dpt_buffer *bdx = tu_f32_fill(be, nx, NAN);
  ln_loss(&c); /* mean and rstd into c.stats */
  TU_OK(dpt_layernorm_bwd_params(be, g, bw, 0, c.x, 0, c.stats, 0, c.stats, g->rows, bgb, 0, bgb,
                                 g->cols));
  TU_OK(dpt_layernorm_bwd(be, g, bw, 0, c.x, 0, c.stats, 0, c.stats, g->rows, c.gamma, 0, bdx, 0));
  tu_get(bgb, 0, dgb, 2 * g->cols);
  tu_get(bdx, 0, dx, nx);
  /* y by hand for row 0, in double */
  double m = 0, v = 0;
  for (size_t j = 0; j < g->cols; j++)
    m += x[j] / (double)g->cols;
  for (size_t j = 0; j < g->cols; j++)
    v += (x[j] - m) * (x[j] - m) / (double)g->cols;
  for (size_t j = 0; j < g->cols; j++) {
    double want = (x[j] - m) / sqrt(v + g->eps) * gamma[j] + beta[j];
    ck_assert_msg(fabs(y[j] - want) < 1e-5, "y[%zu] = %g, want %g", j, (double)y[j], want);
  }
  expect_fd("ln dx", c.x, x, dx, (int)nx, 1e-2f, 2e-3, ln_loss, &c);
  expect_fd("ln dgamma", c.gamma, gamma, dgb, (int)g->cols, 0.25f, 1e-4, ln_loss, &c); /* linear */
  expect_fd("ln dbeta", c.beta, beta, dgb + g->cols, (int)g->cols, 0.25f, 1e-4, ln_loss, &c);
  /* the input gradient of a normalization sums to 0 per row */
  for (size_t i = 0; i < g->rows; i++) {
    double s = 0;
    for (size_t j = 0; j < g->cols; j++)
      s += dx[i * g->cols + j];
    ck_assert_msg(fabs(s) < 1e-5, "row %zu: dx sums to %g", i, s);
  }
  dpt_buffer_free(c.x);
  dpt_buffer_free(c.gamma);
  dpt_buffer_free(c.beta);
  dpt_buffer_free(c.stats);
  dpt_buffer_free(c.w.out);
  dpt_buffer_free(bw);
  dpt_buffer_free(bgb);
  dpt_buffer_free(bdx);
}

START_TEST(layernorm_grads_vs_fd) {
  const dpt_ln_geom a = {4, 8, 1e-5f}, one_row = {1, 16, 1e-12f}, wide_eps = {6, 5, 0.5f},
                    single = {16, 1, 1e-5f};
  expect_ln_grads(&a, 31);
  expect_ln_grads(&one_row, 32);
  expect_ln_grads(&wide_eps, 33);
  expect_ln_grads(&single, 34); /* one feature: y = beta, dx = 0 */
}
END_TEST

/* GELU: values of both forms from their formulas in double (erfc for the erf form; the tanh
 * form's -10 is about -1e-37, 0 within the tolerance), deep in the left tail too; then
 * gelu_bwd against finite differences of L = sum(gelu(x) * W), and in place. */
enum { GELU_N = 41 };
typedef struct gelu_ctx {
  dpt_gelu_approx a;
  dpt_buffer *x;
  weighted w;
} gelu_ctx;

static double gelu_loss(void *p) {
  gelu_ctx *c = p;
  TU_OK(dpt_gelu_fwd(be, GELU_N, c->a, c->x, 0, c->w.out, 0));
  return weighted_sum(&c->w);
}

START_TEST(gelu_values_and_grads_vs_fd) {
  static const float xs[4] = {1.0f, -3.0f, -10.0f, 0.5f};
  static const double erf_y[4] = {0.8413447460685429, -0.004049694094890287, -7.619853024160593e-23,
                                  0.34573123063700656};
  static const double tanh_y[4] = {0.8411919906082768, -0.0036373920817729943, -0.0,
                                   0.34571400982514394};
  dpt_buffer *bx = tu_f32(be, xs, 4), *by = tu_f32_fill(be, 4, NAN);
  float y[4];
  for (int a = 0; a < 2; a++) {
    TU_OK(dpt_gelu_fwd(be, 4, a ? DPT_GELU_TANH : DPT_GELU_ERF, bx, 0, by, 0));
    tu_get(by, 0, y, 4);
    for (int i = 0; i < 4; i++) {
      double want = a ? tanh_y[i] : erf_y[i];
      ck_assert_msg(fabs(y[i] - want) <= 1e-6 * fabs(want) + 1e-30, "%s gelu(%g) = %.9g, want %.9g",
                    a ? "tanh" : "erf", (double)xs[i], (double)y[i], want);
    }
  }
  float x[GELU_N], g[GELU_N], out[GELU_N], dx[GELU_N], dx2[GELU_N];
  tu_rng r = {41};
  tu_fill(&r, x, GELU_N, -5, 5);
  tu_fill(&r, g, GELU_N, -1, 1);
  for (int a = 0; a < 2; a++) {
    gelu_ctx c = {a ? DPT_GELU_TANH : DPT_GELU_ERF,
                  tu_f32(be, x, GELU_N),
                  {tu_f32_fill(be, GELU_N, NAN), g, GELU_N, out}};
    dpt_buffer *bg = tu_f32(be, g, GELU_N), *bdx = tu_f32_fill(be, GELU_N, NAN);
    TU_OK(dpt_gelu_bwd(be, GELU_N, c.a, c.x, 0, bg, 0, bdx, 0));
    tu_get(bdx, 0, dx, GELU_N);
    expect_fd(a ? "gelu tanh dx" : "gelu erf dx", c.x, x, dx, GELU_N, 1e-2f, 2e-3, gelu_loss, &c);
    TU_OK(dpt_gelu_bwd(be, GELU_N, c.a, c.x, 0, bg, 0, bg, 0)); /* dx over dy */
    tu_get(bg, 0, dx2, GELU_N);
    ck_assert_mem_eq(dx, dx2, sizeof dx);
    dpt_buffer_free(c.x);
    dpt_buffer_free(c.w.out);
    dpt_buffer_free(bg);
    dpt_buffer_free(bdx);
  }
  dpt_buffer_free(bx);
  dpt_buffer_free(by);
}
END_TEST

/* bias_gelu_fwd / bias_gelu_bwd: the same as bias_add then gelu_fwd, and gelu_bwd then
 * bias_grad (the fused ops' float exp and erfc within 1e-5 of the double reference); the bias
 * gradient against finite differences of L = sum(gelu(x + bias) * W). */
enum { BG_R = 5, BG_C = 37 };
typedef struct bias_gelu_ctx {
  dpt_gelu_approx a;
  const float *x;      /* the pre-activation before the bias */
  dpt_buffer *bx, *bb; /* x (overwritten by each forward), bias */
  weighted w;
} bias_gelu_ctx;

static double bias_gelu_loss(void *p) {
  bias_gelu_ctx *c = p;
  TU_OK(dpt_buffer_upload(c->bx, 0, c->x, BG_R * BG_C * 4));
  TU_OK(dpt_bias_gelu_fwd(be, BG_R, BG_C, c->a, c->bx, 0, c->bb, 0, c->w.out, 0));
  return weighted_sum(&c->w);
}

static void expect_close(const char *what, const float *got, const float *want, int n, double tol) {
  double top = 0.0;
  for (int i = 0; i < n; i++)
    top = fmax(top, fabs(want[i]));
  for (int i = 0; i < n; i++)
    ck_assert_msg(fabs(got[i] - want[i]) <= tol * fmax(top, 1e-30), "%s[%d] = %.9g, want %.9g",
                  what, i, (double)got[i], (double)want[i]);
}

/* The unfused composition of one form into y (forward) and dx, db (backward). */
static void bias_gelu_unfused(dpt_gelu_approx a, const float *x, const float *bias, const float *g,
                              float *pre, float *y, float *dx, float *db) {
  enum { N = BG_R * BG_C };
  dpt_buffer *bx = tu_f32(be, x, N), *bb = tu_f32(be, bias, BG_C), *by = tu_f32_fill(be, N, NAN);
  dpt_buffer *bg = tu_f32(be, g, N), *bdx = tu_f32_fill(be, N, NAN);
  dpt_buffer *bdb = tu_f32_fill(be, BG_C, NAN);
  TU_OK(dpt_bias_add(be, BG_R, BG_C, bx, 0, bb, 0));
  TU_OK(dpt_gelu_fwd(be, N, a, bx, 0, by, 0));
  TU_OK(dpt_gelu_bwd(be, N, a, bx, 0, bg, 0, bdx, 0));
  TU_OK(dpt_bias_grad(be, BG_R, BG_C, bdx, 0, 0.0f, bdb, 0));
  tu_get(bx, 0, pre, N);
  tu_get(by, 0, y, N);
  tu_get(bdx, 0, dx, N);
  tu_get(bdb, 0, db, BG_C);
  dpt_buffer *all[] = {bx, bb, by, bg, bdx, bdb};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    dpt_buffer_free(all[i]);
}

START_TEST(bias_gelu_vs_unfused_and_fd) {
  enum { N = BG_R * BG_C };
  float x[N], bias[BG_C], g[N], pre[N], y[N], dx[N], db[BG_C], out[N];
  float fpre[N], fy[N], fdx[N], fdb[BG_C];
  tu_rng r = {53};
  tu_fill(&r, x, N, -6, 6);
  tu_fill(&r, bias, BG_C, -1, 1);
  tu_fill(&r, g, N, -1, 1);
  for (int a = 0; a < 2; a++) {
    const dpt_gelu_approx ap = a ? DPT_GELU_TANH : DPT_GELU_ERF;
    bias_gelu_unfused(ap, x, bias, g, pre, y, dx, db);
    bias_gelu_ctx c = {
        ap, x, tu_f32(be, x, N), tu_f32(be, bias, BG_C), {tu_f32_fill(be, N, NAN), g, N, out}};
    bias_gelu_loss(&c);
    tu_get(c.bx, 0, fpre, N);
    tu_get(c.w.out, 0, fy, N);
    ck_assert_mem_eq(fpre, pre, sizeof pre); /* the same float additions */
    expect_close(a ? "tanh y" : "erf y", fy, y, N, 1e-5);
    dpt_buffer *bg = tu_f32(be, g, N), *bdb = tu_f32_fill(be, BG_C, NAN);
    TU_OK(
        dpt_bias_gelu_bwd(be, BG_R, BG_C, ap, c.bx, 0, bg, 0, bg, 0, 0.0f, bdb, 0)); /* in place */
    tu_get(bg, 0, fdx, N);
    tu_get(bdb, 0, fdb, BG_C);
    expect_close(a ? "tanh dx" : "erf dx", fdx, dx, N, 1e-5);
    expect_close(a ? "tanh db" : "erf db", fdb, db, BG_C, 1e-5);
    expect_fd(a ? "bias_gelu tanh db" : "bias_gelu erf db", c.bb, bias, fdb, BG_C, 1e-2f, 5e-3,
              bias_gelu_loss, &c);
    dpt_buffer_free(c.bx);
    dpt_buffer_free(c.bb);
    dpt_buffer_free(c.w.out);
    dpt_buffer_free(bg);
    dpt_buffer_free(bdb);
  }
}
END_TEST

/* softmax_bwd against finite differences of L = sum(attn_softmax(x) * W) over rows of 7 keys
 * (scale 1): without a mask, and with padding keys, whose probabilities are 0 whatever their
 * scores (a zero gradient there, and the kept keys' softmax alone elsewhere). */
enum { SB_R = 3, SB_C = 7 };
typedef struct sbwd_ctx {
  dpt_buffer *x, *ids; /* ids may be NULL */
  weighted w;
} sbwd_ctx;

static double sbwd_loss(void *p) {
  sbwd_ctx *c = p;
  const dpt_attn_geom g = {1, 1, SB_R, SB_C};
  TU_OK(dpt_attn_softmax(be, &g, 1.0f, c->ids, 0, -1, c->x, 0, c->w.out, 0));
  return weighted_sum(&c->w);
}

START_TEST(softmax_bwd_vs_fd) {
  const int32_t ids[SB_C] = {4, -1, 9, 9, -1, 2, -1};
  float x[SB_R * SB_C], g[SB_R * SB_C], y[SB_R * SB_C], dx[SB_R * SB_C], dx2[SB_R * SB_C];
  tu_rng r = {77};
  tu_fill(&r, x, SB_R * SB_C, -2, 2);
  tu_fill(&r, g, SB_R * SB_C, -1, 1);
  for (int masked = 0; masked < 2; masked++) {
    sbwd_ctx c = {tu_f32(be, x, SB_R * SB_C),
                  masked ? tu_i32(be, ids, SB_C) : NULL,
                  {tu_f32_fill(be, SB_R * SB_C, NAN), g, SB_R * SB_C, y}};
    sbwd_loss(&c); /* y = the forward output */
    dpt_buffer *by = tu_f32(be, y, SB_R * SB_C), *bg = tu_f32(be, g, SB_R * SB_C);
    dpt_buffer *bdx = tu_f32_fill(be, SB_R * SB_C, NAN);
    TU_OK(dpt_softmax_bwd(be, SB_R, SB_C, by, 0, bg, 0, bdx, 0));
    tu_get(bdx, 0, dx, SB_R * SB_C);
    expect_fd(masked ? "softmax dx (masked)" : "softmax dx", c.x, x, dx, SB_R * SB_C, 1e-2f, 1e-4,
              sbwd_loss, &c);
    for (int i = 0; masked && i < SB_R * SB_C; i++)
      if (ids[i % SB_C] == -1)
        ck_assert_msg(dx[i] == 0.0f, "dx[%d] = %g at a padding key", i, (double)dx[i]);
    TU_OK(dpt_softmax_bwd(be, SB_R, SB_C, by, 0, bg, 0, bg, 0)); /* dx over dy */
    tu_get(bg, 0, dx2, SB_R * SB_C);
    ck_assert_mem_eq(dx, dx2, sizeof dx);
    dpt_buffer_free(c.x);
    dpt_buffer_free(c.ids);
    dpt_buffer_free(c.w.out);
    dpt_buffer_free(by);
    dpt_buffer_free(bg);
    dpt_buffer_free(bdx);
  }
}
END_TEST

/* attn_probs_fwd / attn_probs_bwd against attn_softmax, dropout per head (seed ^ (h + 1) *
 * DPT_ATTN_HEAD_SEED_MIX) and softmax_bwd: the same mask, the probabilities within 1e-5 (float
 * exp), the backward the same values; and the scores' gradient (scale * dx) against finite
 * differences of L = sum(dropped(scores) * W), with padding keys. */
enum { AP_N = 2, AP_H = 2, AP_Q = 3, AP_K = 7, AP_E = AP_N * AP_H * AP_Q * AP_K };
typedef struct attn_probs_ctx {
  dpt_buffer *src, *x, *ids; /* scores (perturbed by the differences), their working copy, ids */
  dpt_dropout_params d;
  weighted w; /* over dropped */
} attn_probs_ctx;

static const dpt_attn_geom ap_geom = {AP_N, AP_H, AP_Q, AP_K};

static double attn_probs_loss(void *p) {
  attn_probs_ctx *c = p;
  TU_OK(dpt_buffer_copy(c->x, 0, c->src, 0, AP_E * 4));
  TU_OK(dpt_attn_probs_fwd(be, &ap_geom, 0.5f, c->ids, 0, -1, &c->d, c->x, 0, c->w.out, 0));
  return weighted_sum(&c->w);
}

/* The unfused composition: probs y, dropped yd and the backward dx of dy. */
static void attn_probs_unfused(attn_probs_ctx *c, const float *x, const float *dy, float *y,
                               float *yd, float *dx) {
  dpt_buffer *bx = tu_f32(be, x, AP_E), *bd = tu_f32_fill(be, AP_E, NAN),
             *bg = tu_f32(be, dy, AP_E);
  TU_OK(dpt_attn_softmax(be, &ap_geom, 0.5f, c->ids, 0, -1, bx, 0, bx, 0));
  for (size_t h = 0; h < AP_H; h++) {
    dpt_dropout_params hp = c->d;
    hp.seed ^= (uint64_t)(h + 1) * DPT_ATTN_HEAD_SEED_MIX;
    const size_t o = h * AP_N * AP_Q * AP_K;
    TU_OK(dpt_dropout(be, AP_N, AP_Q * AP_K, &hp, bx, o, bd, o));
    TU_OK(dpt_dropout(be, AP_N, AP_Q * AP_K, &hp, bg, o, bg, o));
  }
  TU_OK(dpt_softmax_bwd(be, AP_H * AP_N * AP_Q, AP_K, bx, 0, bg, 0, bg, 0));
  tu_get(bx, 0, y, AP_E);
  tu_get(bd, 0, yd, AP_E);
  tu_get(bg, 0, dx, AP_E);
  dpt_buffer_free(bx);
  dpt_buffer_free(bd);
  dpt_buffer_free(bg);
}

START_TEST(attn_probs_vs_unfused_and_fd) {
  const int32_t ids[AP_N * AP_K] = {4, -1, 9, 9, 3, 2, -1, 1, 2, 3, 4, 5, -1, -1};
  float x[AP_E], w[AP_E], y[AP_E], yd[AP_E], dx[AP_E], out[AP_E];
  float fy[AP_E], fyd[AP_E], fdx[AP_E];
  tu_rng r = {91};
  tu_fill(&r, x, AP_E, -3, 3);
  tu_fill(&r, w, AP_E, -1, 1);
  attn_probs_ctx c = {tu_f32(be, x, AP_E),
                      tu_f32_fill(be, AP_E, NAN),
                      tu_i32(be, ids, AP_N * AP_K),
                      {0.3f, 17, 4, 5},
                      {tu_f32_fill(be, AP_E, NAN), w, AP_E, out}};
  attn_probs_unfused(&c, x, w, y, yd, dx);
  attn_probs_loss(&c);
  tu_get(c.x, 0, fy, AP_E);
  tu_get(c.w.out, 0, fyd, AP_E);
  expect_close("probs", fy, y, AP_E, 1e-5);
  expect_close("dropped", fyd, yd, AP_E, 1e-5);
  int kept = 0;
  for (int i = 0; i < AP_E; i++) {
    ck_assert_msg((fyd[i] == 0.0f) == (yd[i] == 0.0f), "dropped[%d]: %g, unfused %g", i,
                  (double)fyd[i], (double)yd[i]);
    kept += fyd[i] != 0.0f;
  }
  ck_assert_int_gt(kept, AP_E / 4); /* some kept, some dropped or masked */
  ck_assert_int_lt(kept, AP_E);
  /* backward on the unfused probabilities: the same values as dropout then softmax_bwd */
  dpt_buffer *by = tu_f32(be, y, AP_E), *byd = tu_f32(be, yd, AP_E), *bg = tu_f32(be, w, AP_E);
  TU_OK(dpt_attn_probs_bwd(be, AP_H * AP_N * AP_Q, AP_K, by, 0, byd, 0, 0.3f, bg, 0, bg, 0));
  tu_get(bg, 0, fdx, AP_E);
  for (int i = 0; i < AP_E; i++)
    ck_assert_msg(fdx[i] == dx[i], "dx[%d] = %.9g, unfused %.9g", i, (double)fdx[i], (double)dx[i]);
  /* the scores' gradient: the forward's scale times dx of the fused probabilities */
  TU_OK(dpt_buffer_upload(by, 0, fy, AP_E * 4));
  TU_OK(dpt_buffer_upload(byd, 0, fyd, AP_E * 4));
  TU_OK(dpt_buffer_upload(bg, 0, w, AP_E * 4));
  TU_OK(dpt_attn_probs_bwd(be, AP_H * AP_N * AP_Q, AP_K, by, 0, byd, 0, 0.3f, bg, 0, bg, 0));
  tu_get(bg, 0, fdx, AP_E);
  for (int i = 0; i < AP_E; i++)
    fdx[i] *= 0.5f;
  expect_fd("attn_probs dscores", c.src, x, fdx, AP_E, 1e-2f, 2e-3, attn_probs_loss, &c);
  /* without dropout: dropped is not written and the backward is softmax_bwd's */
  TU_OK(dpt_buffer_fill_f32(c.w.out, 0, AP_E, 7.0f));
  TU_OK(dpt_buffer_copy(c.x, 0, c.src, 0, AP_E * 4));
  TU_OK(dpt_attn_probs_fwd(be, &ap_geom, 0.5f, c.ids, 0, -1, NULL, c.x, 0, c.w.out, 0));
  tu_get(c.w.out, 0, fyd, AP_E);
  tu_get(c.x, 0, y, AP_E);
  ck_assert_mem_eq(y, fy, sizeof y);
  for (int i = 0; i < AP_E; i++)
    ck_assert(fyd[i] == 7.0f);
  dpt_buffer *all[] = {c.src, c.x, c.ids, c.w.out, by, byd, bg};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    dpt_buffer_free(all[i]);
}
END_TEST

/* avgpool_bwd is the adjoint of avgpool_fwd (<fwd(x), dy> == <x, bwd(dy)>) on overlapping,
 * strided (with uncovered edges) and global windows; and the gradient of sum(fwd(x) * W)
 * against finite differences (linear: a large step). */
static const dpt_pool_geom fd_avgpool = {2, 6, 7, 3, 2, 2, 1}; /* y [2, 2, 6] */
typedef struct avgpool_ctx {
  dpt_buffer *x;
  weighted w;
} avgpool_ctx;

static double avgpool_loss(void *p) {
  avgpool_ctx *c = p;
  TU_OK(dpt_avgpool_fwd(be, &fd_avgpool, c->x, 0, c->w.out, 0));
  return weighted_sum(&c->w);
}

START_TEST(avgpool_bwd_is_adjoint_and_fd) {
  static const dpt_pool_geom geoms[] = {
      {2, 6, 7, 3, 2, 2, 1}, {3, 5, 5, 5, 5, 1, 1}, {1, 7, 9, 2, 3, 2, 3}, {2, 4, 4, 1, 1, 1, 1}};
  tu_rng r = {8};
  for (size_t gi = 0; gi < sizeof geoms / sizeof geoms[0]; gi++) {
    const dpt_pool_geom *g = &geoms[gi];
    size_t oh, ow;
    TU_OK(dpt_pool_out_size(g, &oh, &ow));
    size_t nx = g->planes * g->h * g->w, ny = g->planes * oh * ow;
    float x[128], dy[128], y[128], dx[128];
    ck_assert(nx <= 128 && ny <= 128);
    tu_fill(&r, x, nx, -1, 1);
    tu_fill(&r, dy, ny, -1, 1);
    dpt_buffer *bx = tu_f32(be, x, nx), *bdy = tu_f32(be, dy, ny);
    dpt_buffer *by = tu_f32_fill(be, ny, NAN), *bdx = tu_f32_fill(be, nx, NAN);
    TU_OK(dpt_avgpool_fwd(be, g, bx, 0, by, 0));
    TU_OK(dpt_avgpool_bwd(be, g, bdy, 0, bdx, 0));
    tu_get(by, 0, y, ny);
    tu_get(bdx, 0, dx, nx);
    double lhs = dot(y, dy, ny), rhs = dot(x, dx, nx);
    ck_assert_msg(fabs(lhs - rhs) <= 1e-5 * (1.0 + fabs(lhs)),
                  "geometry %zu: <fwd(x), dy> = %.9g but <x, bwd(dy)> = %.9g", gi, lhs, rhs);
    if (memcmp(g, &fd_avgpool, sizeof *g) == 0) {
      avgpool_ctx c = {bx, {by, dy, ny, y}};
      expect_fd("avgpool dx", bx, x, dx, (int)nx, 0.25f, 1e-4, avgpool_loss, &c);
    }
    dpt_buffer_free(bx);
    dpt_buffer_free(bdy);
    dpt_buffer_free(by);
    dpt_buffer_free(bdx);
  }
}
END_TEST

/* Dropout: the mask applied to dy is the gradient (the op is its own adjoint for the same
 * parameters); the dropped fraction is near p; dpt_dropout_keep names exactly the kept
 * elements, which are scaled by 1 / (1 - p); the mask depends on the global row, not on how the
 * rows are split into calls; p == 0 is the identity; in place equals out of place. */
enum { DR_R = 256, DR_C = 1000 };

START_TEST(dropout_adjoint_and_fraction) {
  static float x[DR_R * DR_C], dy[DR_R * DR_C], y[DR_R * DR_C], dx[DR_R * DR_C];
  const float ps[] = {0.1f, 0.5f, 0.9f};
  tu_rng r = {9};
  tu_fill(&r, x, DR_R * DR_C, -1, 1);
  tu_fill(&r, dy, DR_R * DR_C, -1, 1);
  dpt_buffer *bx = tu_f32(be, x, DR_R * DR_C), *bdy = tu_f32(be, dy, DR_R * DR_C);
  dpt_buffer *by = tu_f32_fill(be, DR_R * DR_C, NAN), *bdx = tu_f32_fill(be, DR_R * DR_C, NAN);
  for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
    const dpt_dropout_params p = {ps[k], 1234 + k, 7 * k + 1, (uint32_t)(100 * k)};
    TU_OK(dpt_dropout(be, DR_R, DR_C, &p, bx, 0, by, 0));
    TU_OK(dpt_dropout(be, DR_R, DR_C, &p, bdy, 0, bdx, 0));
    tu_get(by, 0, y, DR_R * DR_C);
    tu_get(bdx, 0, dx, DR_R * DR_C);
    double lhs = dot(y, dy, DR_R * DR_C), rhs = dot(x, dx, DR_R * DR_C);
    ck_assert_msg(fabs(lhs - rhs) <= 1e-6 * (1.0 + fabs(lhs)), "p %g: <y, dy> %.9g != <x, dx> %.9g",
                  (double)p.p, lhs, rhs);
    const float scale = (float)(1.0 / (1.0 - (double)p.p));
    size_t dropped = 0;
    for (size_t i = 0; i < DR_R * DR_C; i++) {
      int keep = dpt_dropout_keep(&p, p.first_row + (uint32_t)(i / DR_C), (uint32_t)(i % DR_C));
      float want = keep ? x[i] * scale : 0.0f;
      if (memcmp(&y[i], &want, 4) != 0) /* not ck_assert: each one logs a mark point */
        ck_abort_msg("p %g: y[%zu] = %.9g, want %.9g (keep %d)", (double)p.p, i, (double)y[i],
                     (double)want, keep);
      dropped += !keep;
    }
    /* 6 standard deviations of a binomial fraction */
    double frac = (double)dropped / (DR_R * DR_C), n = DR_R * DR_C;
    double sd = sqrt((double)p.p * (1.0 - (double)p.p) / n);
    ck_assert_msg(fabs(frac - (double)p.p) < 6 * sd, "p %g: dropped fraction %.5f", (double)p.p,
                  frac);
  }
  dpt_buffer_free(bx);
  dpt_buffer_free(bdy);
  dpt_buffer_free(by);
  dpt_buffer_free(bdx);
}
END_TEST

START_TEST(dropout_split_and_in_place) {
  enum { R = 8, C = 37 };
  float x[R * C], whole[R * C], split[R * C];
  tu_rng r = {10};
  tu_fill(&r, x, R * C, -1, 1);
  dpt_buffer *bx = tu_f32(be, x, R * C), *bw = tu_f32_fill(be, R * C, NAN);
  dpt_buffer *bs = tu_f32_fill(be, R * C, NAN);
  const dpt_dropout_params p = {0.5f, 99, 5, 40};
  const dpt_dropout_params tail = {0.5f, 99, 5, 43};
  TU_OK(dpt_dropout(be, R, C, &p, bx, 0, bw, 0));
  TU_OK(dpt_dropout(be, 3, C, &p, bx, 0, bs, 0));
  TU_OK(dpt_dropout(be, R - 3, C, &tail, bx, 3 * C, bs, 3 * C));
  tu_get(bw, 0, whole, R * C);
  tu_get(bs, 0, split, R * C);
  ck_assert_msg(memcmp(whole, split, sizeof whole) == 0, "rows [0,3) + [3,8) != rows [0,8)");
  /* another step or seed gives another mask */
  const dpt_dropout_params next = {0.5f, 99, 6, 40};
  TU_OK(dpt_dropout(be, R, C, &next, bx, 0, bs, 0));
  tu_get(bs, 0, split, R * C);
  ck_assert_msg(memcmp(whole, split, sizeof whole) != 0, "step 6 has the mask of step 5");
  /* in place */
  TU_OK(dpt_dropout(be, R, C, &p, bx, 0, bx, 0));
  tu_get(bx, 0, split, R * C);
  ck_assert_msg(memcmp(whole, split, sizeof whole) == 0, "in place differs");
  /* p == 0: the identity */
  const dpt_dropout_params none = {0.0f, 99, 5, 40};
  TU_OK(dpt_buffer_upload(bx, 0, x, sizeof x));
  TU_OK(dpt_dropout(be, R, C, &none, bx, 0, bs, 0));
  tu_get(bs, 0, split, R * C);
  ck_assert_msg(memcmp(x, split, sizeof x) == 0, "p 0 is not the identity");
  int kept = 0;
  for (uint32_t i = 0; i < 1000; i++)
    kept += dpt_dropout_keep(&none, i, i * 7);
  ck_assert_int_eq(kept, 1000);
  ck_assert(!dpt_dropout_keep(NULL, 0, 0));
  dpt_buffer_free(bx);
  dpt_buffer_free(bw);
  dpt_buffer_free(bs);
}
END_TEST

/* DPT_CPU_GEMM takes portable, portable-baseline or openblas; anything else fails the creation
 * naming the variable, the value and the accepted ones. */
START_TEST(cpu_gemm_env_values) {
  static const char *const bad[] = {"OpenBLAS", "blas", "portable ", "1"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; ++i) {
    setenv("DPT_CPU_GEMM", bad[i], 1);
    dpt_backend *other = NULL;
    dpt_status st = dpt_backend_create(DPT_BACKEND_CPU, 0, &other);
    unsetenv("DPT_CPU_GEMM");
    EXPECT_FAIL(st, DPT_ERR_INVALID_ARG, "DPT_CPU_GEMM", bad[i], "portable-baseline");
    ck_assert_ptr_null(other);
  }
  static const char *const good[] = {"portable", "portable-baseline", ""};
  for (size_t i = 0; i < sizeof good / sizeof *good; ++i) {
    setenv("DPT_CPU_GEMM", good[i], 1);
    dpt_backend *other = NULL;
    dpt_status st = dpt_backend_create(DPT_BACKEND_CPU, 0, &other);
    unsetenv("DPT_CPU_GEMM");
    TU_OK(st);
    dpt_backend_destroy(other);
  }
}
END_TEST

/* ---- embedding bags, column gathers, binary cross-entropy ---------------------------------- */

/* Three samples of bag 3 read from records of 4 int32 (the 4th field, 99, is no id: read, it
 * would give a NaN row): {1, 3, 1} (a repeated id), {-1, 4, -1} (empty slots), {-1, -1, -1}
 * (an empty bag). table [5,2]: row k = {10k, 10k + 1}. */
START_TEST(embed_bag_values) {
  const float table0[10] = {0, 1, 10, 11, 20, 21, 30, 31, 40, 41};
  const int32_t rec[12] = {1, 3, 1, 99, -1, 4, -1, 99, -1, -1, -1, 99};
  dpt_buffer *t = tu_f32(be, table0, 10), *idx = tu_i32(be, rec, 12);
  dpt_buffer *out = tu_f32_fill(be, 6, NAN);
  TU_OK(dpt_embed_bag(be, 3, 3, 5, 2, DPT_BAG_SUM, t, 0, idx, 0, 4, out, 0));
  const double sum[6] = {50, 53, 40, 41, 0, 0};
  tu_expect_buf("out (sum)", out, 0, sum, 6, 0);
  TU_OK(dpt_embed_bag(be, 3, 3, 5, 2, DPT_BAG_MEAN, t, 0, idx, 0, 4, out, 0));
  const double mean[6] = {50.0 / 3.0, 53.0 / 3.0, 40, 41, 0, 0}; /* an empty bag's mean: 0 */
  tu_expect_buf("out (mean)", out, 0, mean, 6, 1e-6);
  /* an id >= vocab: a NaN row */
  TU_OK(dpt_embed_bag(be, 1, 4, 5, 2, DPT_BAG_SUM, t, 0, idx, 0, 4, out, 0));
  const double bad[2] = {NAN, NAN};
  tu_expect_buf("out (id 99 >= vocab)", out, 0, bad, 2, 0);

  /* backward: dout rows {1,2}, {3,4}, {5,6} onto dtable of 0.5 */
  const float dout0[6] = {1, 2, 3, 4, 5, 6};
  dpt_buffer *dout = tu_f32(be, dout0, 6), *dt = tu_f32_fill(be, 10, 0.5f);
  TU_OK(dpt_embed_bag_bwd(be, 3, 3, 5, 2, DPT_BAG_SUM, dout, 0, idx, 0, 4, dt, 0));
  const double dsum[10] = {0.5, 0.5, 2.5, 4.5, 0.5, 0.5, 1.5, 2.5, 3.5, 4.5};
  tu_expect_buf("dtable (sum)", dt, 0, dsum, 10, 0);
  TU_OK(dpt_buffer_fill_f32(dt, 0, 10, 0.5f));
  TU_OK(dpt_embed_bag_bwd(be, 3, 3, 5, 2, DPT_BAG_MEAN, dout, 0, idx, 0, 4, dt, 0));
  const double dmean[10] = {0.5, 0.5, 0.5 + 2.0 / 3.0, 0.5 + 4.0 / 3.0,
                            0.5, 0.5, 0.5 + 1.0 / 3.0, 0.5 + 2.0 / 3.0,
                            3.5, 4.5};
  tu_expect_buf("dtable (mean)", dt, 0, dmean, 10, 1e-6);
  /* ids >= vocab are skipped: bag 4 takes the 99 */
  TU_OK(dpt_buffer_fill_f32(dt, 0, 10, 0.0f));
  TU_OK(dpt_embed_bag_bwd(be, 1, 4, 5, 2, DPT_BAG_MEAN, dout, 0, idx, 0, 4, dt, 0));
  const double dbad[10] = {0, 0, 0.5, 1, 0, 0, 0.25, 0.5, 0, 0}; /* 1 / 4 ids each */
  tu_expect_buf("dtable (id 99 skipped)", dt, 0, dbad, 10, 1e-7);
  dpt_buffer_free(t);
  dpt_buffer_free(idx);
  dpt_buffer_free(out);
  dpt_buffer_free(dout);
  dpt_buffer_free(dt);
}
END_TEST

START_TEST(gather_cols_values) {
  /* x [2,4]; map {2, -1, 0, 4}: column 2, 0 (out of range), column 0, 0 (ldx 4 is out) into
   * the first 4 columns of y [2,6] whose last 2 columns keep their 7 */
  const float x0[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const int32_t map0[4] = {2, -1, 0, 4};
  dpt_buffer *x = tu_f32(be, x0, 8), *map = tu_i32(be, map0, 4), *y = tu_f32_fill(be, 12, 7.0f);
  TU_OK(dpt_gather_cols(be, 2, 4, x, 0, 4, map, 0, y, 0, 6));
  const double want[12] = {3, 0, 1, 0, 7, 7, 7, 0, 5, 0, 7, 7};
  tu_expect_buf("y", y, 0, want, 12, 0);
  /* scatter back onto x: columns 2 and 0 get y's columns 0 and 2 added */
  TU_OK(dpt_scatter_cols_add(be, 2, 4, y, 0, 6, map, 0, x, 0, 4));
  const double wx[8] = {2, 2, 6, 4, 10, 6, 14, 8};
  tu_expect_buf("x", x, 0, wx, 8, 0);
  dpt_buffer_free(x);
  dpt_buffer_free(map);
  dpt_buffer_free(y);
}
END_TEST

/* x = 80 (no overflow), -80, 0, 2.5, -1, 60, -60 against the formula
 * max(x, 0) - x y + log1p(exp(-|x|)), then an ignored and an invalid label. */
START_TEST(bce_logits_values) {
  const float x0[8] = {80, -80, 0, 2.5f, -1, 60, -60, 3};
  const int32_t y0[8] = {1, 1, 0, 0, 1, 0, 0, DPT_IGNORE_INDEX};
  dpt_buffer *x = tu_f32(be, x0, 8), *y = tu_i32(be, y0, 8), *d = tu_f32_fill(be, 8, NAN);
  double loss = NAN;
  int64_t correct = -1;
  TU_OK(dpt_bce_logits(be, 8, x, 0, y, 0, 0.5f, d, 0, &loss, &correct));
  double want_loss = 0.0;
  for (int i = 0; i < 7; i++) {
    const double v = x0[i];
    want_loss += fmax(v, 0.0) - v * y0[i] + log1p(exp(-fabs(v)));
  }
  /* 1.8e-35 + 80 + log 2 + 2.5789 + 1.3133 + 60 + 8.8e-27 */
  ck_assert_msg(fabs(want_loss - 144.5852986023707) < 1e-9, "formula %.15g", want_loss);
  ck_assert_msg(fabs(loss - want_loss) < 1e-9, "loss %.15g, want %.15g", loss, want_loss);
  ck_assert_int_eq(correct, 3); /* 80 with 1, 0 with 0, -60 with 0 */
  const double want[8] = {0,
                          -0.5,
                          0.25,
                          0.5 * 0.9241418199787566,
                          0.5 * -0.7310585786300049,
                          0.5,
                          0.5 * 8.75651076269652e-27,
                          0};
  tu_expect_buf("dlogits", d, 0, want, 8, 1e-7);
  float got[8];
  tu_get(d, 0, got, 8);
  ck_assert_msg(got[6] > 0.0f, "dlogits[6] = %g: sigmoid(-60) is not 0", (double)got[6]);

  /* in place, and a label outside {0, 1}: NaN loss, zero gradient, not correct */
  const int32_t y1[8] = {1, 1, 2, 0, 1, 0, 0, DPT_IGNORE_INDEX};
  dpt_buffer *yb = tu_i32(be, y1, 8);
  TU_OK(dpt_bce_logits(be, 8, x, 0, yb, 0, 1.0f, x, 0, &loss, &correct));
  ck_assert_msg(isnan(loss), "loss with label 2: %g, want NaN", loss);
  ck_assert_int_eq(correct, 2);
  const double want1[8] = {
      0, -1, 0, 0.9241418199787566, -0.7310585786300049, 1, 8.75651076269652e-27, 0};
  tu_expect_buf("dlogits (in place)", x, 0, want1, 8, 1e-7);
  dpt_buffer_free(x);
  dpt_buffer_free(y);
  dpt_buffer_free(yb);
  dpt_buffer_free(d);
}
END_TEST

/* <gather(x), y> == <x, scatter(y)> over y's first cols columns, with a map holding distinct
 * in-range entries and entries outside [0, ldx) (which gather writes as 0 and scatter skips). */
START_TEST(scatter_cols_add_is_adjoint_of_gather) {
  enum { R = 7, LDX = 9, COLS = 6, LDY = 10 };
  const int32_t map0[COLS] = {4, -1, 8, 9, 0, 5};
  float x[R * LDX], y[R * LDY], gx[R * LDY], sy[R * LDX];
  tu_rng r = {11};
  tu_fill(&r, x, R * LDX, -1, 1);
  tu_fill(&r, y, R * LDY, -1, 1);
  dpt_buffer *bx = tu_f32(be, x, R * LDX), *by = tu_f32(be, y, R * LDY);
  dpt_buffer *bm = tu_i32(be, map0, COLS);
  dpt_buffer *bg = tu_f32_fill(be, R * LDY, 0.0f), *bs = tu_f32_fill(be, R * LDX, 0.0f);
  TU_OK(dpt_gather_cols(be, R, COLS, bx, 0, LDX, bm, 0, bg, 0, LDY));
  TU_OK(dpt_scatter_cols_add(be, R, COLS, by, 0, LDY, bm, 0, bs, 0, LDX));
  tu_get(bg, 0, gx, R * LDY);
  tu_get(bs, 0, sy, R * LDX);
  double lhs = 0.0;
  for (int i = 0; i < R; i++)
    lhs += dot(gx + i * LDY, y + i * LDY, COLS);
  double rhs = dot(x, sy, R * LDX);
  ck_assert_msg(fabs(lhs - rhs) <= 1e-6 * (1.0 + fabs(lhs)),
                "<gather, y> %.9g != <x, scatter> %.9g", lhs, rhs);
  dpt_buffer_free(bx);
  dpt_buffer_free(by);
  dpt_buffer_free(bm);
  dpt_buffer_free(bg);
  dpt_buffer_free(bs);
}
END_TEST

static Suite *cpu_ops_suite(void) {
  Suite *s = suite_create("cpu_ops");
  TCase *hand = tcase_create("hand_computed");
  tcase_add_checked_fixture(hand, setup, teardown);
  tcase_add_test(hand, gemm_each_transpose);
  tcase_add_test(hand, gemm_strides_offsets_beta0);
  tcase_add_test(hand, gemm_k0_and_empty);
  tcase_add_test(hand, cpu_gemm_env_values);
  tcase_add_test(hand, bias_add_and_grad);
  tcase_add_test(hand, relu_values_and_in_place);
  tcase_add_test(hand, softmax_xent_values);
  tcase_add_test(hand, softmax_xent_ignore_index);
  tcase_add_test(hand, attn_softmax_values);
  tcase_add_test(hand, softmax_bwd_values);
  tcase_add_test(hand, im2col_col2im_values);
  tcase_add_test(hand, conv2d_values_reference);
  tcase_add_test(hand, conv2d_values_default);
  tcase_add_test(hand, conv2d_modes);
  tcase_add_test(hand, maxpool_values);
  tcase_add_test(hand, embed_values);
  tcase_add_test(hand, axpy_scale_reductions);
  tcase_add_test(hand, sgd_two_steps);
  tcase_add_test(hand, adamw_two_steps);
  tcase_add_test(hand, f16_values);
  tcase_add_test(hand, f16_arrays_match_scalar);
  tcase_add_test(hand, f16_round_trip_all);
  tcase_add_test(hand, bf16_values);
  tcase_add_test(hand, bf16_round_trip_all);
  tcase_add_test(hand, bn_values);
  tcase_add_test(hand, avgpool_values);
  tcase_add_test(hand, gemm_batched_is_gemm_loop);
  tcase_add_test(hand, embed_bag_values);
  tcase_add_test(hand, gather_cols_values);
  tcase_add_test(hand, bce_logits_values);
  suite_add_tcase(s, hand);

  TCase *grad = tcase_create("gradients");
  tcase_add_checked_fixture(grad, setup, teardown);
  tcase_add_test(grad, relu_bwd_vs_fd);
  tcase_add_test(grad, bias_grad_vs_fd);
  tcase_add_test(grad, col2im_is_adjoint_of_im2col);
  tcase_add_test(grad, maxpool_bwd_vs_fd);
  tcase_add_test(grad, embed_scatter_add_is_adjoint_of_gather);
  tcase_add_test(grad, softmax_xent_grad_vs_fd);
  tcase_add_test(grad, gemm_grad_vs_fd);
  tcase_add_test(grad, bn_train_grads_vs_fd);
  tcase_add_test(grad, bn_relu_grads_vs_fd);
  tcase_add_test(grad, layernorm_grads_vs_fd);
  tcase_add_test(grad, gelu_values_and_grads_vs_fd);
  tcase_add_test(grad, bias_gelu_vs_unfused_and_fd);
  tcase_add_test(grad, softmax_bwd_vs_fd);
  tcase_add_test(grad, attn_probs_vs_unfused_and_fd);
  tcase_add_test(grad, avgpool_bwd_is_adjoint_and_fd);
  tcase_add_test(grad, dropout_adjoint_and_fraction);
  tcase_add_test(grad, dropout_split_and_in_place);
  tcase_add_test(grad, scatter_cols_add_is_adjoint_of_gather);
  suite_add_tcase(s, grad);
  return s;
}

int main(void) {
  return tu_run(cpu_ops_suite());
}
