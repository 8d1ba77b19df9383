/* Conformance cases: one generator per op of DPT_OP_MAP (see conformance.h). Each generator
 * appends cases over several shapes: one element, odd sizes, sizes that are not multiples of
 * the usual tiles (16/32/64), a few hundred, and empty ones where the op allows it. Only the
 * public API is used. */
#include "conformance.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static size_t max1(size_t v) {
  return v ? v : 1;
}

/* ---- gemm --------------------------------------------------------------------------------- */

typedef struct gemm_p {
  int ta, tb;
  size_t m, n, k;
  float alpha, beta;
} gemm_p;

static dpt_status run_gemm(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                           const size_t *off, double *scalars) {
  const gemm_p *p = CONF_PARAMS(c, gemm_p);
  (void)scalars;
  return dpt_gemm(be, p->ta, p->tb, p->m, p->n, p->k, p->alpha, buf[0], off[0], c->t[0].ld, buf[1],
                  off[1], c->t[1].ld, p->beta, buf[2], off[2], c->t[2].ld);
}

static void add_gemm(conf_list *l, int ta, int tb, size_t m, size_t n, size_t k, size_t pad,
                     float alpha, float beta) {
  conf_case *c = conf_new_case(l, "m=%zu n=%zu k=%zu ta=%d tb=%d pad=%zu alpha=%g beta=%g", m, n, k,
                               ta, tb, pad, alpha, beta);
  gemm_p p = {ta, tb, m, n, k, alpha, beta};
  CONF_SET_PARAMS(c, p);
  conf_tensor *a = conf_add_tensor(c, "A", CONF_F32, CONF_IN, ta ? k : m, ta ? m : k);
  a->ld = max1(a->cols) + pad;
  conf_tensor *b = conf_add_tensor(c, "B", CONF_F32, CONF_IN, tb ? n : k, tb ? k : n);
  b->ld = max1(b->cols) + 2 * pad;
  /* beta == 0: C is not read, so it starts as NaN and must come out finite. */
  conf_tensor *cc = conf_add_tensor(c, "C", CONF_F32, beta == 0.0f ? CONF_OUT : CONF_INOUT, m, n);
  cc->ld = max1(n) + pad;
  cc->tol = 1e-6 + 2e-7 * (double)k; /* rounding grows with the length of the dot products */
  c->run = run_gemm;
}

static void gen_gemm(conf_list *l) {
  for (int t = 0; t < 4; t++) {
    int ta = t & 1, tb = t >> 1;
    add_gemm(l, ta, tb, 1, 1, 1, 0, 1.0f, 0.0f);
    add_gemm(l, ta, tb, 3, 5, 7, (size_t)t, 1.5f, -0.5f);
    add_gemm(l, ta, tb, 17, 33, 65, 1, 1.0f, 0.0f);
    add_gemm(l, ta, tb, 31, 1, 13, 0, -1.0f, 1.0f);
    add_gemm(l, ta, tb, 1, 47, 29, 2, 2.0f, 0.0f);
  }
  add_gemm(l, 0, 0, 64, 64, 64, 0, 1.0f, 1.0f);
  add_gemm(l, 1, 1, 65, 63, 129, 3, 0.5f, 0.25f);
  add_gemm(l, 0, 0, 300, 65, 129, 0, 1.0f, 0.0f);
  add_gemm(l, 0, 1, 129, 300, 31, 1, 1.0f, 1.0f);
  add_gemm(l, 1, 0, 40, 50, 300, 0, 1.0f, 0.0f);
  add_gemm(l, 0, 0, 7, 9, 5, 0, 0.0f, 2.0f); /* alpha == 0: C = beta * C */
  /* k == 0: C = beta * C; with beta == 0, C = 0 without reading the NaN in C */
  add_gemm(l, 0, 0, 5, 7, 0, 1, 1.0f, 2.0f);
  add_gemm(l, 1, 1, 5, 7, 0, 0, 1.0f, 0.0f);
  /* empty results: nothing is touched */
  add_gemm(l, 0, 0, 0, 7, 5, 0, 1.0f, 1.0f);
  add_gemm(l, 1, 0, 5, 0, 5, 0, 1.0f, 0.0f);
  add_gemm(l, 0, 1, 0, 0, 0, 0, 1.0f, 1.0f);
}

/* ---- bias_add / bias_grad ---------------------------------------------------------------- */

typedef struct bias_p {
  size_t rows, cols;
  float beta;
} bias_p;

static dpt_status run_bias_add(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                               const size_t *off, double *scalars) {
  const bias_p *p = CONF_PARAMS(c, bias_p);
  (void)scalars;
  return dpt_bias_add(be, p->rows, p->cols, buf[0], off[0], buf[1], off[1]);
}

static void gen_bias_add(conf_list *l) {
  static const size_t shapes[][2] = {{1, 1}, {3, 7}, {17, 33}, {128, 65}, {5, 300}, {0, 5}, {5, 0}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    bias_p p = {shapes[i][0], shapes[i][1], 0.0f};
    conf_case *c = conf_new_case(l, "rows=%zu cols=%zu", p.rows, p.cols);
    CONF_SET_PARAMS(c, p);
    conf_add_tensor(c, "y", CONF_F32, CONF_INOUT, p.rows, p.cols)->tol = 0.0;
    conf_add_tensor(c, "bias", CONF_F32, CONF_IN, 1, p.cols);
    c->run = run_bias_add;
  }
}

static dpt_status run_bias_grad(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                const size_t *off, double *scalars) {
  const bias_p *p = CONF_PARAMS(c, bias_p);
  (void)scalars;
  return dpt_bias_grad(be, p->rows, p->cols, buf[0], off[0], p->beta, buf[1], off[1]);
}

static void gen_bias_grad(conf_list *l) {
  static const struct {
    size_t rows, cols;
    float beta;
  } cases[] = {{1, 1, 0.0f},    {7, 3, 0.5f}, {33, 17, 0.0f}, {300, 65, 1.0f}, {64, 1, 0.0f},
               {1, 100, 0.25f}, {0, 7, 0.5f}, {0, 7, 0.0f},   {5, 0, 1.0f}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    bias_p p = {cases[i].rows, cases[i].cols, cases[i].beta};
    conf_case *c = conf_new_case(l, "rows=%zu cols=%zu beta=%g", p.rows, p.cols, p.beta);
    CONF_SET_PARAMS(c, p);
    conf_add_tensor(c, "dy", CONF_F32, CONF_IN, p.rows, p.cols);
    /* beta == 0: db is not read (NaN in, finite out) */
    conf_tensor *db =
        conf_add_tensor(c, "db", CONF_F32, p.beta == 0.0f ? CONF_OUT : CONF_INOUT, 1, p.cols);
    db->tol = 1e-6 + 2e-7 * (double)p.rows;
    c->run = run_bias_grad;
  }
}

/* ---- relu --------------------------------------------------------------------------------- */

typedef struct n_p {
  size_t n;
  float alpha;
} n_p;

static const size_t elementwise_sizes[] = {1, 7, 33, 1000, 4099, 0};
#define N_SIZES (sizeof elementwise_sizes / sizeof elementwise_sizes[0])

static dpt_status run_relu_fwd(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                               const size_t *off, double *scalars) {
  (void)scalars;
  return dpt_relu_fwd(be, CONF_PARAMS(c, n_p)->n, buf[0], off[0], buf[1], off[1]);
}

static dpt_status run_relu_fwd_inplace(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                       const size_t *off, double *scalars) {
  (void)scalars;
  return dpt_relu_fwd(be, CONF_PARAMS(c, n_p)->n, buf[0], off[0], buf[0], off[0]);
}

static void gen_relu_fwd(conf_list *l) {
  for (size_t i = 0; i < N_SIZES; i++) {
    for (int inplace = 0; inplace < 2; inplace++) {
      n_p p = {elementwise_sizes[i], 0.0f};
      conf_case *c = conf_new_case(l, "n=%zu%s", p.n, inplace ? " in-place" : "");
      CONF_SET_PARAMS(c, p);
      conf_tensor *x = conf_add_tensor(c, "x", CONF_F32, inplace ? CONF_INOUT : CONF_IN, 1, p.n);
      x->tol = 0.0;
      if (i == 2) { /* exact zeros */
        x->init = CONF_INIT_INT;
        x->lo = -2;
        x->hi = 2;
      }
      if (!inplace) conf_add_tensor(c, "y", CONF_F32, CONF_OUT, 1, p.n)->tol = 0.0;
      c->run = inplace ? run_relu_fwd_inplace : run_relu_fwd;
    }
  }
  /* NaN propagates (so a later non-finite check sees it), +inf stays, -inf gives 0 */
  for (int inplace = 0; inplace < 2; inplace++) {
    n_p p = {1000, 0.0f};
    conf_case *c = conf_new_case(l, "n=%zu NaN/inf inputs%s", p.n, inplace ? " in-place" : "");
    CONF_SET_PARAMS(c, p);
    conf_tensor *x = conf_add_tensor(c, "x", CONF_F32, inplace ? CONF_INOUT : CONF_IN, 1, p.n);
    x->init = CONF_INIT_SPECIAL_F32;
    x->tol = 0.0;
    x->finite = 0;
    if (!inplace) {
      conf_tensor *y = conf_add_tensor(c, "y", CONF_F32, CONF_OUT, 1, p.n);
      y->tol = 0.0;
      y->finite = 0;
    }
    c->run = inplace ? run_relu_fwd_inplace : run_relu_fwd;
  }
}

static dpt_status run_add_relu(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                               const size_t *off, double *scalars) {
  (void)scalars;
  return dpt_add_relu(be, CONF_PARAMS(c, n_p)->n, buf[0], off[0], buf[1], off[1], buf[2], off[2]);
}

/* In place: y is a. */
static dpt_status run_add_relu_inplace(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                       const size_t *off, double *scalars) {
  (void)scalars;
  return dpt_add_relu(be, CONF_PARAMS(c, n_p)->n, buf[0], off[0], buf[1], off[1], buf[0], off[0]);
}

/* A float sum, then the ReLU: exact on every device (NaN and infinities included). */
static void gen_add_relu(conf_list *l) {
  for (size_t i = 0; i <= N_SIZES; i++) {
    for (int inplace = 0; inplace < 2; inplace++) {
      const int special = i == N_SIZES;
      n_p p = {special ? 1000 : elementwise_sizes[i], 0.0f};
      conf_case *c = conf_new_case(l, "n=%zu%s%s", p.n, special ? " NaN/inf inputs" : "",
                                   inplace ? " in-place" : "");
      CONF_SET_PARAMS(c, p);
      conf_tensor *a = conf_add_tensor(c, "a", CONF_F32, inplace ? CONF_INOUT : CONF_IN, 1, p.n);
      conf_tensor *b = conf_add_tensor(c, "b", CONF_F32, CONF_IN, 1, p.n);
      a->tol = 0.0;
      if (special) {
        a->init = CONF_INIT_SPECIAL_F32;
        a->finite = 0;
      }
      if (i == 2) { /* sums of exactly 0 */
        a->init = b->init = CONF_INIT_INT;
        a->lo = b->lo = -2;
        a->hi = b->hi = 2;
      }
      if (!inplace) {
        conf_tensor *y = conf_add_tensor(c, "y", CONF_F32, CONF_OUT, 1, p.n);
        y->tol = 0.0;
        y->finite = !special;
      }
      c->run = inplace ? run_add_relu_inplace : run_add_relu;
    }
  }
}

static dpt_status run_relu_bwd(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                               const size_t *off, double *scalars) {
  (void)scalars;
  return dpt_relu_bwd(be, CONF_PARAMS(c, n_p)->n, buf[0], off[0], buf[1], off[1], buf[2], off[2]);
}

static dpt_status run_relu_bwd_inplace(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                       const size_t *off, double *scalars) {
  (void)scalars;
  return dpt_relu_bwd(be, CONF_PARAMS(c, n_p)->n, buf[0], off[0], buf[1], off[1], buf[1], off[1]);
}

static void gen_relu_bwd(conf_list *l) {
  for (size_t i = 0; i < N_SIZES; i++) {
    for (int inplace = 0; inplace < 2; inplace++) {
      n_p p = {elementwise_sizes[i], 0.0f};
      conf_case *c = conf_new_case(l, "n=%zu%s", p.n, inplace ? " in-place (dx == dy)" : "");
      CONF_SET_PARAMS(c, p);
      conf_tensor *x = conf_add_tensor(c, "x", CONF_F32, CONF_IN, 1, p.n);
      x->init = CONF_INIT_INT; /* many exact zeros: x > 0 is strict */
      x->lo = -2;
      x->hi = 2;
      conf_add_tensor(c, "dy", CONF_F32, inplace ? CONF_INOUT : CONF_IN, 1, p.n)->tol = 0.0;
      if (!inplace) conf_add_tensor(c, "dx", CONF_F32, CONF_OUT, 1, p.n)->tol = 0.0;
      c->run = inplace ? run_relu_bwd_inplace : run_relu_bwd;
    }
  }
}

/* ---- softmax_xent ------------------------------------------------------------------------- */

enum { SX_GRAD = 1, SX_LOSS = 2, SX_CORRECT = 4, SX_ALL = 7 };

typedef struct sx_p {
  size_t rows, cols;
  float scale;
  int want;
  int ignore; /* labels DPT_IGNORE_INDEX: 0 none, else see init_sx_labels */
} sx_p;

static dpt_status run_softmax_xent(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                   const size_t *off, double *scalars) {
  const sx_p *p = CONF_PARAMS(c, sx_p);
  double loss = NAN;
  int64_t correct = -1;
  dpt_status st = dpt_softmax_xent(
      be, p->rows, p->cols, buf[0], off[0], buf[1], off[1], p->scale,
      (p->want & SX_GRAD) ? buf[2] : NULL, (p->want & SX_GRAD) ? off[2] : 0,
      (p->want & SX_LOSS) ? &loss : NULL, (p->want & SX_CORRECT) ? &correct : NULL);
  int s = 0;
  if (p->want & SX_LOSS) scalars[s++] = loss;
  if (p->want & SX_CORRECT) scalars[s++] = (double)correct;
  return st;
}

static void add_softmax(conf_list *l, size_t rows, size_t cols, float scale, int want, double lo,
                        double hi, int int_logits, double p_bad) {
  conf_case *c =
      conf_new_case(l, "rows=%zu cols=%zu scale=%g logits in [%g,%g]%s%s%s%s%s", rows, cols, scale,
                    lo, hi, int_logits ? " integer (ties)" : "", p_bad > 0 ? " bad labels" : "",
                    (want & SX_GRAD) ? " +grad" : "", (want & SX_LOSS) ? " +loss" : "",
                    (want & SX_CORRECT) ? " +correct" : "");
  sx_p p = {rows, cols, scale, want, 0};
  CONF_SET_PARAMS(c, p);
  conf_tensor *lg = conf_add_tensor(c, "logits", CONF_F32, CONF_IN, rows, cols);
  lg->lo = lo;
  lg->hi = hi;
  if (int_logits) lg->init = CONF_INIT_INT;
  conf_tensor *lb = conf_add_tensor(c, "labels", CONF_I32, CONF_IN, rows, 1);
  lb->init = CONF_INIT_INT;
  lb->lo = 0;
  lb->hi = (double)cols - 1;
  lb->p_bad = p_bad;
  if (want & SX_GRAD) {
    conf_tensor *d = conf_add_tensor(c, "dlogits", CONF_F32, CONF_OUT, rows, cols);
    d->tol = 1e-5;
  }
  if (want & SX_LOSS) conf_add_scalar(c, "loss_sum", 1e-5 * (double)(rows + 1), 1e-5);
  if (want & SX_CORRECT) conf_add_scalar(c, "correct", 0.0, 0.0);
  c->run = run_softmax_xent;
}

enum { SX_IGNORE_SOME = 1, SX_IGNORE_ALL = 2, SX_IGNORE_AND_BAD = 3 };

/* Labels with DPT_IGNORE_INDEX: SX_IGNORE_SOME about a third of the rows, the others valid;
 * SX_IGNORE_ALL every row; SX_IGNORE_AND_BAD a third ignored, a sixth out of range (-1, cols,
 * -101: NaN loss), the rest valid. */
static void init_sx_labels(const conf_case *c, int t, void *elems, conf_rng *rng) {
  const sx_p *p = CONF_PARAMS(c, sx_p);
  int32_t *lab = elems;
  (void)t;
  for (size_t r = 0; r < p->rows; r++) {
    double u = conf_rng_unit(rng);
    int32_t v = (int32_t)conf_rng_int(rng, 0, (int64_t)p->cols - 1);
    if (p->ignore == SX_IGNORE_ALL || u < 1.0 / 3.0) {
      v = DPT_IGNORE_INDEX;
    } else if (p->ignore == SX_IGNORE_AND_BAD && u < 0.5) {
      static const int32_t bad[] = {-1, 0, DPT_IGNORE_INDEX - 1};
      int k = (int)conf_rng_int(rng, 0, 2);
      v = k == 1 ? (int32_t)p->cols : bad[k];
    }
    lab[r] = v;
  }
}

static void add_softmax_ignore(conf_list *l, size_t rows, size_t cols, float scale, int want,
                               int ignore) {
  static const char *const what[] = {"", "some", "all", "some, some bad"};
  add_softmax(l, rows, cols, scale, want, -3, 3, 0, 0);
  conf_case *c = &l->cases[l->count - 1];
  size_t len = strlen(c->label);
  snprintf(c->label + len, sizeof c->label - len, " ignore_index (%s)", what[ignore]);
  sx_p *p = (sx_p *)(void *)c->params.bytes;
  p->ignore = ignore;
  c->t[1].init = CONF_INIT_CUSTOM;
  c->init = init_sx_labels;
}

static void gen_softmax_xent(conf_list *l) {
  add_softmax(l, 1, 1, 1.0f, SX_ALL, -1, 1, 0, 0);
  add_softmax(l, 1, 10, 1.0f, SX_ALL, -1, 1, 0, 0);
  add_softmax(l, 7, 3, 1.0f, SX_ALL, -3, 3, 0, 0);
  add_softmax(l, 33, 10, 1.0f / 33.0f, SX_ALL, -3, 3, 0, 0);
  add_softmax(l, 64, 1000, 1.0f / 64.0f, SX_ALL, -5, 5, 0, 0);
  add_softmax(l, 200, 17, 0.5f, SX_ALL, -60, 60, 0, 0); /* needs the max subtracted */
  add_softmax(l, 16, 7, 1.0f, SX_ALL, 0, 2, 1, 0);      /* first maximal logit wins */
  add_softmax(l, 50, 11, 1.0f, SX_ALL, -2, 2, 0, 0.2);  /* NaN loss, zero gradient rows */
  add_softmax(l, 5, 4, 1.0f, SX_GRAD, -2, 2, 0, 0);
  add_softmax(l, 5, 4, 1.0f, SX_LOSS, -2, 2, 0, 0);
  add_softmax(l, 9, 6, 1.0f, SX_CORRECT, -2, 2, 0, 0);
  add_softmax(l, 0, 5, 1.0f, SX_ALL, -1, 1, 0, 0);
  /* DPT_IGNORE_INDEX: no loss, a zero gradient row, never correct */
  add_softmax_ignore(l, 1, 5, 1.0f, SX_ALL, SX_IGNORE_ALL);
  add_softmax_ignore(l, 37, 13, 0.5f, SX_ALL, SX_IGNORE_SOME);
  add_softmax_ignore(l, 40, 300, 1.0f / 40.0f, SX_ALL, SX_IGNORE_ALL);
  add_softmax_ignore(l, 64, 129, 1.0f, SX_ALL, SX_IGNORE_SOME);
  add_softmax_ignore(l, 50, 11, 1.0f, SX_ALL, SX_IGNORE_AND_BAD);
  add_softmax_ignore(l, 9, 6, 1.0f, SX_LOSS, SX_IGNORE_SOME);
  add_softmax_ignore(l, 9, 6, 1.0f, SX_CORRECT, SX_IGNORE_SOME);
}

/* ---- im2col / col2im ----------------------------------------------------------------------- */

static const dpt_conv_geom conv_geoms[] = {
    /* n, c, h, w, kh, kw, sh, sw, ph, pw */
    {1, 1, 1, 1, 1, 1, 1, 1, 0, 0},   {1, 1, 3, 3, 2, 2, 1, 1, 1, 1},
    {2, 3, 7, 5, 3, 3, 1, 1, 1, 1},   {2, 3, 9, 11, 3, 2, 2, 3, 1, 0},
    {1, 4, 28, 28, 5, 5, 1, 1, 2, 2}, {3, 2, 6, 6, 6, 6, 1, 1, 0, 0},
    {1, 2, 5, 4, 1, 1, 1, 1, 2, 2},   {2, 1, 8, 8, 3, 3, 3, 3, 0, 0},
    {1, 3, 4, 6, 2, 3, 2, 1, 0, 1},   {0, 3, 5, 5, 3, 3, 1, 1, 1, 1},
    {2, 0, 5, 5, 3, 3, 1, 1, 1, 1},
};

static void conv_out(const dpt_conv_geom *g, size_t *oh, size_t *ow) {
  *oh = (g->h + 2 * g->pad_h - g->kh) / g->stride_h + 1;
  *ow = (g->w + 2 * g->pad_w - g->kw) / g->stride_w + 1;
}

static dpt_status run_im2col(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                             const size_t *off, double *scalars) {
  (void)scalars;
  return dpt_im2col(be, CONF_PARAMS(c, dpt_conv_geom), buf[0], off[0], buf[1], off[1]);
}

static dpt_status run_col2im(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                             const size_t *off, double *scalars) {
  (void)scalars;
  return dpt_col2im(be, CONF_PARAMS(c, dpt_conv_geom), buf[0], off[0], buf[1], off[1]);
}

static void gen_conv(conf_list *l, int col2im) {
  for (size_t i = 0; i < sizeof conv_geoms / sizeof conv_geoms[0]; i++) {
    const dpt_conv_geom *g = &conv_geoms[i];
    size_t oh, ow;
    conv_out(g, &oh, &ow);
    conf_case *c = conf_new_case(l, "x=[%zu,%zu,%zu,%zu] k=%zux%zu s=%zu,%zu p=%zu,%zu out=%zux%zu",
                                 g->n, g->c, g->h, g->w, g->kh, g->kw, g->stride_h, g->stride_w,
                                 g->pad_h, g->pad_w, oh, ow);
    CONF_SET_PARAMS(c, *g);
    size_t img = g->n * g->c * g->h * g->w;
    size_t col_rows = g->n * g->c * g->kh * g->kw;
    if (!col2im) {
      conf_add_tensor(c, "x", CONF_F32, CONF_IN, 1, img);
      conf_add_tensor(c, "col", CONF_F32, CONF_OUT, col_rows, oh * ow)->cmp = CONF_CMP_EXACT;
      c->run = run_im2col;
    } else {
      conf_add_tensor(c, "col", CONF_F32, CONF_IN, col_rows, oh * ow);
      conf_add_tensor(c, "dx", CONF_F32, CONF_OUT, 1, img)->tol = 2e-6;
      c->run = run_col2im;
    }
  }
}

static void gen_im2col(conf_list *l) {
  gen_conv(l, 0);
}

static void gen_col2im(conf_list *l) {
  gen_conv(l, 1);
}

/* ---- direct convolution ------------------------------------------------------------------ */

typedef struct conv2d_p {
  dpt_conv_geom g;
  size_t co;
  int bias;
} conv2d_p;

static dpt_status run_conv2d_fwd(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                 const size_t *off, double *scalars) {
  const conv2d_p *p = CONF_PARAMS(c, conv2d_p);
  (void)scalars;
  return dpt_conv2d_fwd(be, &p->g, p->co, buf[0], off[0], buf[1], off[1], p->bias ? buf[3] : NULL,
                        p->bias ? off[3] : 0, buf[2], off[2]);
}

static dpt_status run_conv2d_bwd_data(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                      const size_t *off, double *scalars) {
  const conv2d_p *p = CONF_PARAMS(c, conv2d_p);
  (void)scalars;
  return dpt_conv2d_bwd_data(be, &p->g, p->co, buf[0], off[0], buf[1], off[1], buf[2], off[2]);
}

static dpt_status run_conv2d_bwd_weights(dpt_backend *be, const conf_case *c,
                                         dpt_buffer *const *buf, const size_t *off,
                                         double *scalars) {
  const conv2d_p *p = CONF_PARAMS(c, conv2d_p);
  (void)scalars;
  return dpt_conv2d_bwd_weights(be, &p->g, p->co, buf[0], off[0], buf[1], off[1], buf[2], off[2],
                                p->bias ? buf[3] : NULL, p->bias ? off[3] : 0);
}

/* op 0: fwd, 1: bwd_data, 2: bwd_weights; over the im2col geometries with a few output
 * channel counts, and ResNet's 3x3 shapes. Sums run over c*kh*kw (fwd), co*kh*kw (data) or
 * n*oh*ow (weights) products: the tolerance grows with that length. */
static void gen_conv2d(conf_list *l, int op) {
  static const dpt_conv_geom resnet[] = {
      {4, 16, 28, 28, 3, 3, 1, 1, 1, 1},
      {4, 16, 28, 28, 3, 3, 2, 2, 1, 1},
      {3, 64, 7, 7, 3, 3, 1, 1, 1, 1},
  };
  size_t ng = sizeof conv_geoms / sizeof conv_geoms[0], nr = sizeof resnet / sizeof resnet[0];
  for (size_t i = 0; i < ng + nr; i++) {
    const dpt_conv_geom *g = i < ng ? &conv_geoms[i] : &resnet[i - ng];
    size_t oh, ow, co = i < ng ? 1 + i % 5 : g->c * g->stride_h;
    conv_out(g, &oh, &ow);
    conv2d_p p = {*g, co, op != 1 && i % 2 == 0};
    conf_case *c = conf_new_case(l, "x=[%zu,%zu,%zu,%zu] co=%zu k=%zux%zu s=%zu,%zu p=%zu,%zu%s",
                                 g->n, g->c, g->h, g->w, co, g->kh, g->kw, g->stride_h, g->stride_w,
                                 g->pad_h, g->pad_w, p.bias ? " bias" : "");
    CONF_SET_PARAMS(c, p);
    size_t nx = g->n * g->c * g->h * g->w, nw = co * g->c * g->kh * g->kw, ny = g->n * co * oh * ow;
    size_t len = op == 0 ? g->c * g->kh * g->kw : op == 1 ? co * g->kh * g->kw : g->n * oh * ow;
    double tol = 1e-6 + 4e-7 * (double)len;
    conf_add_tensor(c, op == 1 ? "dy" : "x", CONF_F32, CONF_IN, 1, op == 1 ? ny : nx);
    if (op == 0) {
      conf_add_tensor(c, "w", CONF_F32, CONF_IN, 1, nw);
      conf_add_tensor(c, "y", CONF_F32, CONF_OUT, 1, ny)->tol = tol;
      if (p.bias) conf_add_tensor(c, "bias", CONF_F32, CONF_IN, 1, co);
      c->run = run_conv2d_fwd;
    } else if (op == 1) {
      conf_add_tensor(c, "w", CONF_F32, CONF_IN, 1, nw);
      conf_add_tensor(c, "dx", CONF_F32, CONF_OUT, 1, nx)->tol = tol;
      c->run = run_conv2d_bwd_data;
    } else {
      conf_add_tensor(c, "dy", CONF_F32, CONF_IN, 1, ny);
      conf_add_tensor(c, "dw", CONF_F32, CONF_OUT, 1, nw)->tol = tol;
      if (p.bias) conf_add_tensor(c, "db", CONF_F32, CONF_OUT, 1, co)->tol = tol;
      c->run = run_conv2d_bwd_weights;
    }
  }
}

static void gen_conv2d_fwd(conf_list *l) {
  gen_conv2d(l, 0);
}

static void gen_conv2d_bwd_data(conf_list *l) {
  gen_conv2d(l, 1);
}

static void gen_conv2d_bwd_weights(conf_list *l) {
  gen_conv2d(l, 2);
}

/* ---- maxpool ------------------------------------------------------------------------------ */

static const dpt_pool_geom pool_geoms[] = {
    /* planes, h, w, kh, kw, sh, sw */
    {1, 1, 1, 1, 1, 1, 1},
    {1, 4, 4, 2, 2, 2, 2},
    {3, 7, 9, 3, 2, 2, 3},
    {8, 28, 28, 2, 2, 2, 2},
    {2, 10, 10, 3, 3, 1, 1},
    {5, 6, 7, 4, 4, 3, 3},
    {4, 5, 5, 5, 5, 1, 1},
    {0, 4, 4, 2, 2, 2, 2},
    /* windows that do not overlap, with gaps and rows and columns past the last window */
    {2, 9, 11, 2, 2, 3, 3},
    {3, 7, 5, 1, 2, 2, 3},
};

static void pool_out(const dpt_pool_geom *g, size_t *oh, size_t *ow) {
  *oh = (g->h - g->kh) / g->stride_h + 1;
  *ow = (g->w - g->kw) / g->stride_w + 1;
}

static dpt_status run_maxpool_fwd(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                  const size_t *off, double *scalars) {
  (void)scalars;
  return dpt_maxpool_fwd(be, CONF_PARAMS(c, dpt_pool_geom), buf[0], off[0], buf[1], off[1], buf[2],
                         off[2]);
}

static void gen_maxpool_fwd(conf_list *l) {
  for (size_t i = 0; i < sizeof pool_geoms / sizeof pool_geoms[0]; i++) {
    for (int ties = 0; ties < 2; ties++) {
      const dpt_pool_geom *g = &pool_geoms[i];
      size_t oh, ow;
      pool_out(g, &oh, &ow);
      conf_case *c = conf_new_case(l, "x=[%zu,%zu,%zu] k=%zux%zu s=%zu,%zu out=%zux%zu%s",
                                   g->planes, g->h, g->w, g->kh, g->kw, g->stride_h, g->stride_w,
                                   oh, ow, ties ? " integer values (ties)" : "");
      CONF_SET_PARAMS(c, *g);
      conf_tensor *x = conf_add_tensor(c, "x", CONF_F32, CONF_IN, g->planes, g->h * g->w);
      if (ties) {
        x->init = CONF_INIT_INT;
        x->lo = -3;
        x->hi = 3;
      }
      conf_add_tensor(c, "y", CONF_F32, CONF_OUT, g->planes, oh * ow)->cmp = CONF_CMP_EXACT;
      conf_add_tensor(c, "argmax", CONF_I32, CONF_OUT, g->planes, oh * ow);
      c->run = run_maxpool_fwd;
    }
  }
}

static dpt_status run_maxpool_bwd(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                  const size_t *off, double *scalars) {
  (void)scalars;
  return dpt_maxpool_bwd(be, CONF_PARAMS(c, dpt_pool_geom), buf[0], off[0], buf[1], off[1], buf[2],
                         off[2]);
}

/* argmax as maxpool_fwd produces it: an index inside each output's window. */
static void init_pool_argmax(const conf_case *c, int t, void *elems, conf_rng *rng) {
  const dpt_pool_geom *g = CONF_PARAMS(c, dpt_pool_geom);
  int32_t *am = elems;
  size_t oh, ow;
  (void)t;
  pool_out(g, &oh, &ow);
  for (size_t p = 0; p < g->planes; p++) {
    for (size_t oy = 0; oy < oh; oy++) {
      for (size_t ox = 0; ox < ow; ox++) {
        size_t iy = oy * g->stride_h + (size_t)conf_rng_int(rng, 0, (int64_t)g->kh - 1);
        size_t ix = ox * g->stride_w + (size_t)conf_rng_int(rng, 0, (int64_t)g->kw - 1);
        am[(p * oh + oy) * ow + ox] = (int32_t)(iy * g->w + ix);
      }
    }
  }
}

static void gen_maxpool_bwd(conf_list *l) {
  for (size_t i = 0; i < sizeof pool_geoms / sizeof pool_geoms[0]; i++) {
    const dpt_pool_geom *g = &pool_geoms[i];
    size_t oh, ow;
    pool_out(g, &oh, &ow);
    conf_case *c = conf_new_case(l, "x=[%zu,%zu,%zu] k=%zux%zu s=%zu,%zu out=%zux%zu", g->planes,
                                 g->h, g->w, g->kh, g->kw, g->stride_h, g->stride_w, oh, ow);
    CONF_SET_PARAMS(c, *g);
    conf_add_tensor(c, "dy", CONF_F32, CONF_IN, g->planes, oh * ow);
    conf_add_tensor(c, "argmax", CONF_I32, CONF_IN, g->planes, oh * ow)->init = CONF_INIT_CUSTOM;
    /* without overlap each dx element is 0 or one dy: exact */
    const int overlap = g->kh > g->stride_h || g->kw > g->stride_w;
    conf_add_tensor(c, "dx", CONF_F32, CONF_OUT, g->planes, g->h * g->w)->tol =
        overlap ? 2e-6 : 0.0;
    c->init = init_pool_argmax;
    c->run = run_maxpool_bwd;
  }
}

/* ---- embedding ----------------------------------------------------------------------------- */

typedef struct embed_p {
  size_t n, vocab, dim;
} embed_p;

static const struct {
  size_t n, vocab, dim;
  double p_bad;
} embed_shapes[] = {{1, 1, 1, 0},    {7, 5, 3, 0},     {100, 50, 33, 0}, {300, 1000, 17, 0},
                    {64, 3, 128, 0}, {40, 9, 5, 0.15}, {0, 5, 3, 0},     {5, 5, 0, 0}};

static dpt_status run_embed_gather(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                   const size_t *off, double *scalars) {
  const embed_p *p = CONF_PARAMS(c, embed_p);
  (void)scalars;
  return dpt_embed_gather(be, p->n, p->vocab, p->dim, buf[0], off[0], buf[1], off[1], buf[2],
                          off[2]);
}

static dpt_status run_embed_scatter_add(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                        const size_t *off, double *scalars) {
  const embed_p *p = CONF_PARAMS(c, embed_p);
  (void)scalars;
  return dpt_embed_scatter_add(be, p->n, p->vocab, p->dim, buf[0], off[0], buf[1], off[1], buf[2],
                               off[2]);
}

static void gen_embed(conf_list *l, int scatter) {
  for (size_t i = 0; i < sizeof embed_shapes / sizeof embed_shapes[0]; i++) {
    embed_p p = {embed_shapes[i].n, embed_shapes[i].vocab, embed_shapes[i].dim};
    double p_bad = embed_shapes[i].p_bad;
    conf_case *c = conf_new_case(l, "n=%zu vocab=%zu dim=%zu%s", p.n, p.vocab, p.dim,
                                 p_bad > 0 ? " out-of-range indices" : "");
    CONF_SET_PARAMS(c, p);
    if (!scatter) conf_add_tensor(c, "table", CONF_F32, CONF_IN, p.vocab, p.dim);
    if (scatter) conf_add_tensor(c, "dout", CONF_F32, CONF_IN, p.n, p.dim);
    conf_tensor *idx = conf_add_tensor(c, "idx", CONF_I32, CONF_IN, p.n, 1);
    idx->init = CONF_INIT_INT;
    idx->lo = 0;
    idx->hi = (double)p.vocab - 1;
    idx->p_bad = p_bad;
    if (!scatter) {
      conf_tensor *out = conf_add_tensor(c, "out", CONF_F32, CONF_OUT, p.n, p.dim);
      out->cmp = CONF_CMP_EXACT;
      out->finite = p_bad == 0; /* rows of out-of-range indices are NaN */
      c->run = run_embed_gather;
    } else {
      conf_tensor *dt = conf_add_tensor(c, "dtable", CONF_F32, CONF_INOUT, p.vocab, p.dim);
      dt->tol = 1e-6 * (1.0 + (double)p.n / (double)max1(p.vocab));
      c->run = run_embed_scatter_add;
    }
  }
}

static void gen_embed_gather(conf_list *l) {
  gen_embed(l, 0);
}

static void gen_embed_scatter_add(conf_list *l) {
  gen_embed(l, 1);
}

/* ---- axpy, scale ------------------------------------------------------------------------ */

static const float elementwise_alphas[] = {2.0f, -0.5f, 1.0f, 0.25f, -3.0f, 1.0f};

static dpt_status run_axpy(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                           const size_t *off, double *scalars) {
  const n_p *p = CONF_PARAMS(c, n_p);
  (void)scalars;
  return dpt_axpy(be, p->n, p->alpha, buf[0], off[0], buf[1], off[1]);
}

static void gen_axpy(conf_list *l) {
  for (size_t i = 0; i < N_SIZES; i++) {
    n_p p = {elementwise_sizes[i], elementwise_alphas[i]};
    conf_case *c = conf_new_case(l, "n=%zu alpha=%g", p.n, p.alpha);
    CONF_SET_PARAMS(c, p);
    conf_add_tensor(c, "x", CONF_F32, CONF_IN, 1, p.n);
    conf_add_tensor(c, "y", CONF_F32, CONF_INOUT, 1, p.n);
    c->run = run_axpy;
  }
}

static dpt_status run_scale(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                            const size_t *off, double *scalars) {
  const n_p *p = CONF_PARAMS(c, n_p);
  (void)scalars;
  return dpt_scale(be, p->n, p->alpha, buf[0], off[0]);
}

static void gen_scale(conf_list *l) {
  for (size_t i = 0; i < N_SIZES; i++) {
    n_p p = {elementwise_sizes[i], i == 2 ? 0.0f : elementwise_alphas[i]};
    conf_case *c = conf_new_case(l, "n=%zu alpha=%g", p.n, p.alpha);
    CONF_SET_PARAMS(c, p);
    conf_add_tensor(c, "x", CONF_F32, CONF_INOUT, 1, p.n)->tol = 0.0;
    c->run = run_scale;
  }
}

/* ---- reductions --------------------------------------------------------------------------- */

static const size_t reduce_sizes[] = {1, 7, 33, 1000, 4099, 65537, 0};
#define N_REDUCE (sizeof reduce_sizes / sizeof reduce_sizes[0])

static dpt_status run_sum(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                          const size_t *off, double *scalars) {
  scalars[0] = NAN;
  return dpt_sum(be, CONF_PARAMS(c, n_p)->n, buf[0], off[0], &scalars[0]);
}

static dpt_status run_sumsq(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                            const size_t *off, double *scalars) {
  scalars[0] = NAN;
  return dpt_sumsq(be, CONF_PARAMS(c, n_p)->n, buf[0], off[0], &scalars[0]);
}

static void gen_reduce(conf_list *l, int sq) {
  for (size_t i = 0; i < N_REDUCE; i++) {
    n_p p = {reduce_sizes[i], 0.0f};
    int positive = i == 3; /* no cancellation */
    conf_case *c = conf_new_case(l, "n=%zu x in [%d,1)", p.n, positive ? 0 : -1);
    CONF_SET_PARAMS(c, p);
    conf_tensor *x = conf_add_tensor(c, "x", CONF_F32, CONF_IN, 1, p.n);
    if (positive) x->lo = 0.0;
    /* float partial sums are allowed: bound by the sum of magnitudes (<= n) */
    conf_add_scalar(c, sq ? "sumsq" : "sum", 1e-6 * (double)p.n + 1e-9, 1e-6);
    c->run = sq ? run_sumsq : run_sum;
  }
}

static void gen_sum(conf_list *l) {
  gen_reduce(l, 0);
}

static void gen_sumsq(conf_list *l) {
  gen_reduce(l, 1);
}

static dpt_status run_count_nonfinite(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                      const size_t *off, double *scalars) {
  uint64_t count = UINT64_MAX;
  dpt_status st = dpt_count_nonfinite(be, CONF_PARAMS(c, n_p)->n, buf[0], off[0], &count);
  scalars[0] = (double)count;
  return st;
}

static void gen_count_nonfinite(conf_list *l) {
  for (size_t i = 0; i < N_REDUCE; i++) {
    n_p p = {reduce_sizes[i], 0.0f};
    int finite_only = i == 2;
    conf_case *c = conf_new_case(l, "n=%zu %s", p.n, finite_only ? "finite" : "with NaN/inf");
    CONF_SET_PARAMS(c, p);
    conf_tensor *x = conf_add_tensor(c, "x", CONF_F32, CONF_IN, 1, p.n);
    if (!finite_only) x->init = CONF_INIT_SPECIAL_F32;
    conf_add_scalar(c, "count", 0.0, 0.0);
    c->run = run_count_nonfinite;
  }
}

/* ---- optimizers: two consecutive steps per case ------------------------------------------ */

typedef struct sgd_p {
  size_t n;
  dpt_sgd_params p;
} sgd_p;

static dpt_status run_sgd(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                          const size_t *off, double *scalars) {
  const sgd_p *p = CONF_PARAMS(c, sgd_p);
  int vel = c->ntensors == 3;
  (void)scalars;
  dpt_status st = DPT_OK;
  for (int step = 0; step < 2 && st == DPT_OK; step++) {
    st = dpt_sgd_update(be, p->n, &p->p, buf[0], off[0], buf[1], off[1], vel ? buf[2] : NULL,
                        vel ? off[2] : 0);
  }
  return st;
}

static void gen_sgd_update(conf_list *l) {
  static const dpt_sgd_params params[] = {
      {0.1f, 0.0f, 0.0f, 0},   {0.1f, 0.0f, 1e-2f, 0}, {0.05f, 0.9f, 1e-4f, 0},
      {0.05f, 0.9f, 1e-4f, 1}, {0.01f, 0.5f, 0.0f, 1}, {0.2f, 0.99f, 5e-4f, 0},
  };
  for (size_t i = 0; i < sizeof params / sizeof params[0]; i++) {
    sgd_p p = {elementwise_sizes[i], params[i]};
    conf_case *c = conf_new_case(l, "n=%zu lr=%g momentum=%g wd=%g nesterov=%d (2 steps)", p.n,
                                 p.p.lr, p.p.momentum, p.p.weight_decay, p.p.nesterov);
    CONF_SET_PARAMS(c, p);
    conf_add_tensor(c, "w", CONF_F32, CONF_INOUT, 1, p.n);
    conf_add_tensor(c, "grad", CONF_F32, CONF_IN, 1, p.n);
    if (p.p.momentum != 0.0f) conf_add_tensor(c, "velocity", CONF_F32, CONF_INOUT, 1, p.n);
    c->run = run_sgd;
  }
}

typedef struct adamw_p {
  size_t n;
  dpt_adamw_params p;
} adamw_p;

static dpt_status run_adamw(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                            const size_t *off, double *scalars) {
  const adamw_p *p = CONF_PARAMS(c, adamw_p);
  dpt_adamw_params q = p->p;
  (void)scalars;
  dpt_status st = DPT_OK;
  for (int step = 0; step < 2 && st == DPT_OK; step++, q.step++) {
    st = dpt_adamw_update(be, p->n, &q, buf[0], off[0], buf[1], off[1], buf[2], off[2], buf[3],
                          off[3]);
  }
  return st;
}

static void gen_adamw_update(conf_list *l) {
  static const dpt_adamw_params params[] = {
      {1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, 1}, {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 10},
      {1e-2f, 0.5f, 0.9f, 1e-6f, 0.1f, 3},    {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1000},
      {1e-3f, 0.0f, 0.0f, 1e-3f, 0.0f, 1},    {1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, 2},
  };
  for (size_t i = 0; i < sizeof params / sizeof params[0]; i++) {
    adamw_p p = {elementwise_sizes[i], params[i]};
    conf_case *c =
        conf_new_case(l, "n=%zu lr=%g beta1=%g beta2=%g eps=%g wd=%g step=%lld (2 steps)", p.n,
                      p.p.lr, p.p.beta1, p.p.beta2, p.p.eps, p.p.weight_decay, (long long)p.p.step);
    CONF_SET_PARAMS(c, p);
    conf_add_tensor(c, "w", CONF_F32, CONF_INOUT, 1, p.n)->tol = 1e-5;
    conf_add_tensor(c, "grad", CONF_F32, CONF_IN, 1, p.n);
    conf_add_tensor(c, "m", CONF_F32, CONF_INOUT, 1, p.n)->tol = 1e-5;
    conf_tensor *v = conf_add_tensor(c, "v", CONF_F32, CONF_INOUT, 1, p.n);
    v->lo = 0.0; /* a second moment is never negative */
    v->tol = 1e-5;
    c->run = run_adamw;
  }
}

/* ---- float16 conversion: exact on every backend ----------------------------------------- */

static dpt_status run_f32_to_f16(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                 const size_t *off, double *scalars) {
  (void)scalars;
  return dpt_f32_to_f16(be, CONF_PARAMS(c, n_p)->n, buf[0], off[0], buf[1], off[1]);
}

static void gen_f32_to_f16(conf_list *l) {
  static const size_t sizes[] = {1, 7, 1000, 4099, 20000, 0};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    n_p p = {sizes[i], 0.0f};
    conf_case *c = conf_new_case(l, "n=%zu (ties, subnormals, overflow, NaN, inf, -0)", p.n);
    CONF_SET_PARAMS(c, p);
    conf_add_tensor(c, "src", CONF_F32, CONF_IN, 1, p.n)->init = CONF_INIT_SPECIAL_F32;
    conf_add_tensor(c, "dst", CONF_F16, CONF_OUT, 1, p.n);
    c->run = run_f32_to_f16;
  }
}

static dpt_status run_f16_to_f32(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                 const size_t *off, double *scalars) {
  (void)scalars;
  return dpt_f16_to_f32(be, CONF_PARAMS(c, n_p)->n, buf[0], off[0], buf[1], off[1]);
}

static void init_all_f16(const conf_case *c, int t, void *elems, conf_rng *rng) {
  uint16_t *h = elems;
  (void)t;
  (void)rng;
  for (size_t i = 0; i < c->t[0].cols; i++)
    h[i] = (uint16_t)i;
}

/* 16-bit patterns (src_dtype) to float32 by `run`: random ones and every one. */
static void gen_16_to_f32(conf_list *l, conf_dtype src_dtype, conf_run_fn run) {
  static const size_t sizes[] = {1, 7, 1000, 4099, 65536, 0};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    n_p p = {sizes[i], 0.0f};
    int all = p.n == 65536;
    conf_case *c = conf_new_case(l, "n=%zu %s", p.n, all ? "every bit pattern" : "random bits");
    CONF_SET_PARAMS(c, p);
    conf_tensor *src = conf_add_tensor(c, "src", src_dtype, CONF_IN, 1, p.n);
    if (all) src->init = CONF_INIT_CUSTOM;
    conf_tensor *dst = conf_add_tensor(c, "dst", CONF_F32, CONF_OUT, 1, p.n);
    dst->cmp = CONF_CMP_EXACT;
    dst->finite = 0; /* inf and NaN patterns convert to inf and NaN */
    c->init = init_all_f16;
    c->run = run;
  }
}

static void gen_f16_to_f32(conf_list *l) {
  gen_16_to_f32(l, CONF_F16, run_f16_to_f32);
}

/* ---- bfloat16 conversion: exact on every backend ---------------------------------------- */

static dpt_status run_f32_to_bf16(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                  const size_t *off, double *scalars) {
  (void)scalars;
  return dpt_f32_to_bf16(be, CONF_PARAMS(c, n_p)->n, buf[0], off[0], buf[1], off[1]);
}

/* float32 bit patterns that stress the rounding to bfloat16: exact ties (low half 0x8000)
 * over odd and even kept halves, one off a tie, float32 subnormals, the overflow edge, NaNs
 * whose payload lies only in the dropped bits, infinities, large values, random bits. */
static void init_special_bf16(const conf_case *c, int t, void *elems, conf_rng *rng) {
  static const uint32_t edges[] = {0x7f7f7fffu, 0x7f7f8000u, 0x7f7f8001u, 0x7f7fffffu, 0xff7f8000u,
                                   0x7f800000u, 0xff800000u, 0x7f800001u, 0xff800001u, 0x7fc00000u,
                                   0x7f810000u, 0x00000000u, 0x80000000u, 0x00008000u, 0x00018000u,
                                   0x007fffffu, 0x007f8000u, 0x00800000u};
  uint32_t *u = elems;
  (void)t;
  for (size_t i = 0; i < c->t[0].cols; i++) {
    const uint32_t r = (uint32_t)conf_rng_next(rng), hi = r & 0xffff0000u;
    switch (conf_rng_int(rng, 0, 7)) {
    case 0: /* a tie */
      u[i] = hi | 0x8000u;
      break;
    case 1: /* just below or above a tie */
      u[i] = hi | (r & 1u ? 0x7fffu : 0x8001u);
      break;
    case 2: /* float32 subnormal */
      u[i] = (r & 0x807fffffu);
      break;
    case 3:
      u[i] = edges[conf_rng_int(rng, 0, (int64_t)(sizeof edges / sizeof *edges) - 1)];
      break;
    case 4: { /* large: 2^100 .. 2^128 */
      const float f = (float)ldexp(1.0 + conf_rng_unit(rng), (int)conf_rng_int(rng, 100, 127));
      memcpy(&u[i], &f, 4);
      u[i] |= r & 0x80000000u;
      break;
    }
    case 5: { /* ordinary values */
      const float f = (float)(4.0 * conf_rng_unit(rng) - 2.0);
      memcpy(&u[i], &f, 4);
      break;
    }
    case 6: /* exactly representable */
      u[i] = hi;
      break;
    default: /* any bit pattern */
      u[i] = r ^ (uint32_t)(conf_rng_next(rng) >> 17);
      break;
    }
  }
}

static void gen_f32_to_bf16(conf_list *l) {
  static const size_t sizes[] = {1, 7, 1000, 4099, 20000, 0};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    n_p p = {sizes[i], 0.0f};
    conf_case *c = conf_new_case(l, "n=%zu (ties, subnormals, overflow, NaN, inf, large, -0)", p.n);
    CONF_SET_PARAMS(c, p);
    conf_add_tensor(c, "src", CONF_F32, CONF_IN, 1, p.n)->init = CONF_INIT_CUSTOM;
    conf_add_tensor(c, "dst", CONF_BF16, CONF_OUT, 1, p.n);
    c->init = init_special_bf16;
    c->run = run_f32_to_bf16;
  }
}

static dpt_status run_bf16_to_f32(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                  const size_t *off, double *scalars) {
  (void)scalars;
  return dpt_bf16_to_f32(be, CONF_PARAMS(c, n_p)->n, buf[0], off[0], buf[1], off[1]);
}

static void gen_bf16_to_f32(conf_list *l) {
  gen_16_to_f32(l, CONF_BF16, run_bf16_to_f32);
}

/* ---- gemm_batched --------------------------------------------------------------------------
 * A and B hold their items stacked (item i at rows i*rows..: stride = rows * ld, row gaps
 * guarded) or one shared matrix (stride 0). C is one matrix (stride_c 0: the batch summed),
 * stacked like A, or one item per row of a [batch, m*n] tensor with ldc = n whose row gaps
 * put guarded space between items (stride_c > the extent of one C). */
enum { GB_C_SUM, GB_C_STACKED, GB_C_GAPPED };

typedef struct gemm_batched_p {
  int ta, tb;
  size_t m, n, k, batch;
  float alpha, beta;
  int share_a, share_b, c_mode;
} gemm_batched_p;

static dpt_status run_gemm_batched(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                   const size_t *off, double *scalars) {
  const gemm_batched_p *p = CONF_PARAMS(c, gemm_batched_p);
  (void)scalars;
  size_t ra = p->ta ? p->k : p->m, rb = p->tb ? p->n : p->k;
  size_t lda = c->t[0].ld, ldb = c->t[1].ld, ldc = p->c_mode == GB_C_GAPPED ? p->n : c->t[2].ld;
  dpt_gemm_batch bt = {p->batch, p->share_a ? 0 : ra * lda, p->share_b ? 0 : rb * ldb, 0};
  if (p->c_mode == GB_C_STACKED) bt.stride_c = p->m * ldc;
  if (p->c_mode == GB_C_GAPPED) bt.stride_c = c->t[2].ld;
  return dpt_gemm_batched(be, &bt, p->ta, p->tb, p->m, p->n, p->k, p->alpha, buf[0], off[0], lda,
                          buf[1], off[1], ldb, p->beta, buf[2], off[2], ldc);
}

static void add_gemm_batched(conf_list *l, gemm_batched_p p, size_t pad) {
  static const char *const modes[] = {"summed", "stacked", "gapped"};
  conf_case *c = conf_new_case(l,
                               "batch=%zu m=%zu n=%zu k=%zu ta=%d tb=%d pad=%zu alpha=%g beta=%g "
                               "A %s B %s C %s",
                               p.batch, p.m, p.n, p.k, p.ta, p.tb, pad, p.alpha, p.beta,
                               p.share_a ? "shared" : "stacked", p.share_b ? "shared" : "stacked",
                               modes[p.c_mode]);
  CONF_SET_PARAMS(c, p);
  size_t ra = p.ta ? p.k : p.m, rb = p.tb ? p.n : p.k;
  conf_tensor *a =
      conf_add_tensor(c, "A", CONF_F32, CONF_IN, (p.share_a ? 1 : p.batch) * ra, p.ta ? p.m : p.k);
  a->ld = max1(a->cols) + pad;
  conf_tensor *b =
      conf_add_tensor(c, "B", CONF_F32, CONF_IN, (p.share_b ? 1 : p.batch) * rb, p.tb ? p.k : p.n);
  b->ld = max1(b->cols) + 2 * pad;
  conf_role rc = p.beta == 0.0f ? CONF_OUT : CONF_INOUT; /* beta 0: C is not read */
  conf_tensor *cc;
  if (p.c_mode == GB_C_GAPPED) {
    cc = conf_add_tensor(c, "C", CONF_F32, rc, p.batch, p.m * p.n);
    cc->ld = max1(cc->cols) + 3;
  } else {
    cc = conf_add_tensor(c, "C", CONF_F32, rc, (p.c_mode == GB_C_SUM ? 1 : p.batch) * p.m, p.n);
    cc->ld = max1(p.n) + pad;
  }
  /* a summed batch is one dot product of length k * batch */
  cc->tol = 1e-6 + 2e-7 * (double)p.k * (double)(p.c_mode == GB_C_SUM ? max1(p.batch) : 1);
  c->run = run_gemm_batched;
}

static void gen_gemm_batched(conf_list *l) {
  for (int t = 0; t < 4; t++) {
    int ta = t & 1, tb = t >> 1;
    add_gemm_batched(l, (gemm_batched_p){ta, tb, 1, 1, 1, 1, 1.0f, 0.0f, 0, 0, GB_C_STACKED}, 0);
    add_gemm_batched(l, (gemm_batched_p){ta, tb, 3, 5, 7, 4, 1.5f, -0.5f, 0, 0, GB_C_STACKED},
                     (size_t)t);
    add_gemm_batched(l, (gemm_batched_p){ta, tb, 17, 33, 65, 3, 1.0f, 0.0f, 1, 0, GB_C_GAPPED}, 1);
    add_gemm_batched(l, (gemm_batched_p){ta, tb, 5, 7, 9, 5, 1.0f, 0.0f, 0, 1, GB_C_SUM}, 2);
    add_gemm_batched(l, (gemm_batched_p){ta, tb, 31, 1, 13, 2, -1.0f, 1.0f, 0, 0, GB_C_SUM}, 0);
  }
  /* convolution shapes: weights shared (forward), the weight gradient summed over images */
  add_gemm_batched(l, (gemm_batched_p){0, 0, 16, 196, 27, 8, 1.0f, 0.0f, 1, 0, GB_C_STACKED}, 0);
  add_gemm_batched(l, (gemm_batched_p){0, 1, 16, 27, 196, 8, 1.0f, 0.0f, 0, 0, GB_C_SUM}, 0);
  add_gemm_batched(l, (gemm_batched_p){1, 0, 27, 196, 16, 6, 1.0f, 0.0f, 1, 0, GB_C_GAPPED}, 0);
  add_gemm_batched(l, (gemm_batched_p){1, 1, 65, 63, 129, 3, 0.5f, 0.25f, 0, 0, GB_C_SUM}, 3);
  add_gemm_batched(l, (gemm_batched_p){0, 0, 7, 9, 5, 3, 1.0f, 1.0f, 1, 1, GB_C_SUM}, 1);
  add_gemm_batched(l, (gemm_batched_p){0, 0, 7, 9, 5, 1, 2.0f, 0.0f, 0, 0, GB_C_SUM}, 0);
  /* alpha == 0 and k == 0: C = beta * C per item (once when summed), A and B not read */
  add_gemm_batched(l, (gemm_batched_p){0, 0, 7, 9, 5, 3, 0.0f, 2.0f, 0, 0, GB_C_STACKED}, 0);
  add_gemm_batched(l, (gemm_batched_p){0, 0, 5, 7, 0, 3, 1.0f, 0.0f, 0, 0, GB_C_SUM}, 1);
  add_gemm_batched(l, (gemm_batched_p){1, 1, 5, 7, 0, 2, 1.0f, 2.0f, 0, 0, GB_C_GAPPED}, 0);
  /* empty: nothing is touched */
  add_gemm_batched(l, (gemm_batched_p){0, 0, 3, 4, 5, 0, 1.0f, 1.0f, 0, 0, GB_C_STACKED}, 0);
  add_gemm_batched(l, (gemm_batched_p){0, 0, 0, 4, 5, 3, 1.0f, 0.0f, 0, 0, GB_C_SUM}, 0);
}

/* ---- batch normalization -------------------------------------------------------------------
 * x [n, c, p] as [n, c*p]; the per-channel vectors as [1, c]. Statistics near what the data
 * gives (mean small, var away from 0) keep xhat of order 1. Sums may be float partial sums on a
 * GPU: the reductions get 1e-4 (1e-3 past 4096 values per channel). */
typedef struct bn_p {
  dpt_bn_geom g;
  size_t count; /* bn_bwd */
  int relu;     /* the bn_relu form */
} bn_p;

static const struct {
  size_t n, c, p;
  float eps;
} bn_shapes[] = {{1, 1, 1, 1e-5f},   {2, 3, 1, 1e-5f},    {7, 5, 9, 1e-5f},
                 {32, 16, 1, 1e-5f}, {4, 8, 49, 1e-3f},   {3, 17, 33, 1e-5f},
                 {1, 2, 100, 0.1f},  {64, 3, 196, 1e-5f}, {33, 70, 1, 1e-5f}};
#define N_BN (sizeof bn_shapes / sizeof bn_shapes[0])

static bn_p bn_case(conf_list *l, size_t i, const char *what, conf_case **out) {
  bn_p p = {{bn_shapes[i].n, bn_shapes[i].c, bn_shapes[i].p, bn_shapes[i].eps}, 0, 0};
  p.count = p.g.n * p.g.p;
  *out = conf_new_case(l, "x=[%zu,%zu,%zu] eps=%g%s", p.g.n, p.g.c, p.g.p, p.g.eps, what);
  return p;
}

static double bn_sum_tol(const bn_p *p) {
  return p->g.n * p->g.p > 4096 ? 1e-3 : 1e-4;
}

/* x [n, c*p], then mean and var [1, c] as statistics of data in [-1, 1). */
static void bn_add_inputs(conf_case *c, const bn_p *p, int with_dy) {
  if (with_dy) conf_add_tensor(c, "dy", CONF_F32, CONF_IN, p->g.n, p->g.c * p->g.p);
  conf_add_tensor(c, "x", CONF_F32, CONF_IN, p->g.n, p->g.c * p->g.p);
  conf_tensor *mean = conf_add_tensor(c, "mean", CONF_F32, CONF_IN, 1, p->g.c);
  mean->lo = -0.2;
  mean->hi = 0.2;
  conf_tensor *var = conf_add_tensor(c, "var", CONF_F32, CONF_IN, 1, p->g.c);
  var->lo = 0.05;
  var->hi = 0.6;
}

static dpt_status run_bn_stats(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                               const size_t *off, double *scalars) {
  (void)scalars;
  return dpt_bn_stats(be, &CONF_PARAMS(c, bn_p)->g, buf[0], off[0], buf[1], off[1], buf[2], off[2]);
}

static void gen_bn_stats(conf_list *l) {
  for (size_t i = 0; i < N_BN; i++) {
    conf_case *c;
    bn_p p = bn_case(l, i, " x in [-1,3)", &c);
    CONF_SET_PARAMS(c, p);
    conf_tensor *x = conf_add_tensor(c, "x", CONF_F32, CONF_IN, p.g.n, p.g.c * p.g.p);
    x->hi = 3.0; /* a mean away from 0: the variance is a difference of large terms */
    conf_add_tensor(c, "mean", CONF_F32, CONF_OUT, 1, p.g.c)->tol = bn_sum_tol(&p);
    conf_add_tensor(c, "var", CONF_F32, CONF_OUT, 1, p.g.c)->tol = bn_sum_tol(&p);
    c->run = run_bn_stats;
  }
}

/* bn_fwd, bn_bwd_reduce, bn_bwd and (relu set) their bn_relu forms, on the same cases: the
 * ReLU's output y, an input of the backward forms (about half of it <= 0) masking dy, is their
 * last tensor. */
static dpt_status run_bn_fwd(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                             const size_t *off, double *scalars) {
  const bn_p *p = CONF_PARAMS(c, bn_p);
  (void)scalars;
  return (p->relu ? dpt_bn_relu_fwd : dpt_bn_fwd)(be, &p->g, buf[0], off[0], buf[1], off[1], buf[2],
                                                  off[2], buf[3], off[3], buf[4], off[4], buf[5],
                                                  off[5]);
}

static void bn_fwd_cases(conf_list *l, int relu) {
  for (size_t i = 0; i < N_BN; i++) {
    conf_case *c;
    bn_p p = bn_case(l, i, "", &c);
    p.relu = relu;
    CONF_SET_PARAMS(c, p);
    bn_add_inputs(c, &p, 0);
    conf_tensor *gamma = conf_add_tensor(c, "gamma", CONF_F32, CONF_IN, 1, p.g.c);
    gamma->lo = 0.5;
    gamma->hi = 1.5;
    conf_add_tensor(c, "beta", CONF_F32, CONF_IN, 1, p.g.c);
    conf_add_tensor(c, "y", CONF_F32, CONF_OUT, p.g.n, p.g.c * p.g.p)->tol = 1e-5;
    c->run = run_bn_fwd;
  }
}

static void gen_bn_fwd(conf_list *l) {
  bn_fwd_cases(l, 0);
}

static void gen_bn_relu_fwd(conf_list *l) {
  bn_fwd_cases(l, 1);
}

static dpt_status run_bn_bwd_reduce(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                    const size_t *off, double *scalars) {
  const bn_p *p = CONF_PARAMS(c, bn_p);
  (void)scalars;
  if (p->relu)
    return dpt_bn_relu_bwd_reduce(be, &p->g, buf[0], off[0], buf[6], off[6], buf[1], off[1], buf[2],
                                  off[2], buf[3], off[3], buf[4], off[4], buf[5], off[5]);
  return dpt_bn_bwd_reduce(be, &p->g, buf[0], off[0], buf[1], off[1], buf[2], off[2], buf[3],
                           off[3], buf[4], off[4], buf[5], off[5]);
}

static void bn_bwd_reduce_cases(conf_list *l, int relu) {
  for (size_t i = 0; i < N_BN; i++) {
    conf_case *c;
    bn_p p = bn_case(l, i, "", &c);
    p.relu = relu;
    CONF_SET_PARAMS(c, p);
    bn_add_inputs(c, &p, 1);
    conf_add_tensor(c, "sum_dy_xhat", CONF_F32, CONF_OUT, 1, p.g.c)->tol = bn_sum_tol(&p);
    conf_add_tensor(c, "sum_dy", CONF_F32, CONF_OUT, 1, p.g.c)->tol = bn_sum_tol(&p);
    if (relu) conf_add_tensor(c, "y", CONF_F32, CONF_IN, p.g.n, p.g.c * p.g.p);
    c->run = run_bn_bwd_reduce;
  }
}

static void gen_bn_bwd_reduce(conf_list *l) {
  bn_bwd_reduce_cases(l, 0);
}

static void gen_bn_relu_bwd_reduce(conf_list *l) {
  bn_bwd_reduce_cases(l, 1);
}

static dpt_status run_bn_bwd(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                             const size_t *off, double *scalars) {
  const bn_p *p = CONF_PARAMS(c, bn_p);
  (void)scalars;
  if (p->relu)
    return dpt_bn_relu_bwd(be, &p->g, p->count, buf[0], off[0], buf[8], off[8], buf[1], off[1],
                           buf[2], off[2], buf[3], off[3], buf[4], off[4], buf[5], off[5], buf[6],
                           off[6], buf[7], off[7]);
  return dpt_bn_bwd(be, &p->g, p->count, buf[0], off[0], buf[1], off[1], buf[2], off[2], buf[3],
                    off[3], buf[4], off[4], buf[5], off[5], buf[6], off[6], buf[7], off[7]);
}

static void bn_bwd_cases(conf_list *l, int relu) {
  for (size_t i = 0; i < N_BN; i++) {
    for (int replicas = 1; replicas <= 4; replicas *= 4) {
      if (replicas > 1 && i % 3 != 2) continue; /* a few cases with statistics of 4 replicas */
      conf_case *c;
      bn_p p = bn_case(l, i, replicas > 1 ? " count of 4 replicas" : "", &c);
      p.count *= (size_t)replicas;
      p.relu = relu;
      CONF_SET_PARAMS(c, p);
      bn_add_inputs(c, &p, 1);
      conf_add_tensor(c, "gamma", CONF_F32, CONF_IN, 1, p.g.c);
      /* sums of count terms of order 1 */
      double s = sqrt((double)p.count);
      conf_tensor *sdx = conf_add_tensor(c, "sum_dy_xhat", CONF_F32, CONF_IN, 1, p.g.c);
      conf_tensor *sdy = conf_add_tensor(c, "sum_dy", CONF_F32, CONF_IN, 1, p.g.c);
      sdx->lo = sdy->lo = -s;
      sdx->hi = sdy->hi = s;
      conf_add_tensor(c, "dx", CONF_F32, CONF_OUT, p.g.n, p.g.c * p.g.p)->tol = 1e-5;
      if (relu) conf_add_tensor(c, "y", CONF_F32, CONF_IN, p.g.n, p.g.c * p.g.p);
      c->run = run_bn_bwd;
    }
  }
}

static void gen_bn_bwd(conf_list *l) {
  bn_bwd_cases(l, 0);
}

static void gen_bn_relu_bwd(conf_list *l) {
  bn_bwd_cases(l, 1);
}

/* ---- avgpool ------------------------------------------------------------------------------- */

static const dpt_pool_geom avgpool_geoms[] = {
    /* planes, h, w, kh, kw, sh, sw */
    {1, 1, 1, 1, 1, 1, 1},   {1, 4, 4, 2, 2, 2, 2},   {3, 7, 9, 3, 2, 2, 3},
    {8, 28, 28, 2, 2, 2, 2}, {2, 10, 10, 3, 3, 1, 1}, {5, 6, 7, 4, 4, 3, 3},
    {6, 7, 7, 7, 7, 1, 1},   {4, 5, 9, 5, 1, 2, 4},   {0, 4, 4, 2, 2, 2, 2},
};

static dpt_status run_avgpool_fwd(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                  const size_t *off, double *scalars) {
  (void)scalars;
  return dpt_avgpool_fwd(be, CONF_PARAMS(c, dpt_pool_geom), buf[0], off[0], buf[1], off[1]);
}

static dpt_status run_avgpool_bwd(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                  const size_t *off, double *scalars) {
  (void)scalars;
  return dpt_avgpool_bwd(be, CONF_PARAMS(c, dpt_pool_geom), buf[0], off[0], buf[1], off[1]);
}

static void gen_avgpool(conf_list *l, int bwd) {
  for (size_t i = 0; i < sizeof avgpool_geoms / sizeof avgpool_geoms[0]; i++) {
    const dpt_pool_geom *g = &avgpool_geoms[i];
    size_t oh, ow;
    pool_out(g, &oh, &ow);
    conf_case *c = conf_new_case(l, "x=[%zu,%zu,%zu] k=%zux%zu s=%zu,%zu out=%zux%zu", g->planes,
                                 g->h, g->w, g->kh, g->kw, g->stride_h, g->stride_w, oh, ow);
    CONF_SET_PARAMS(c, *g);
    if (!bwd) {
      conf_add_tensor(c, "x", CONF_F32, CONF_IN, g->planes, g->h * g->w);
      conf_add_tensor(c, "y", CONF_F32, CONF_OUT, g->planes, oh * ow)->tol = 1e-5;
      c->run = run_avgpool_fwd;
    } else {
      conf_add_tensor(c, "dy", CONF_F32, CONF_IN, g->planes, oh * ow);
      conf_add_tensor(c, "dx", CONF_F32, CONF_OUT, g->planes, g->h * g->w)->tol = 1e-5;
      c->run = run_avgpool_bwd;
    }
  }
}

static void gen_avgpool_fwd(conf_list *l) {
  gen_avgpool(l, 0);
}

static void gen_avgpool_bwd(conf_list *l) {
  gen_avgpool(l, 1);
}

/* ---- dropout: the mask is exact, and so is x * scale ---------------------------------------- */

typedef struct dropout_p {
  size_t rows, cols;
  dpt_dropout_params d;
} dropout_p;

static dpt_status run_dropout(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                              const size_t *off, double *scalars) {
  const dropout_p *p = CONF_PARAMS(c, dropout_p);
  (void)scalars;
  int inplace = c->ntensors == 1;
  return dpt_dropout(be, p->rows, p->cols, &p->d, buf[0], off[0], inplace ? buf[0] : buf[1],
                     inplace ? off[0] : off[1]);
}

static void gen_dropout(conf_list *l) {
  static const struct {
    size_t rows, cols;
    float p;
    uint64_t seed, step;
    uint32_t first_row;
  } cases[] = {
      {1, 1, 0.5f, 1, 1, 0},
      {7, 33, 0.0f, 42, 3, 0},
      {7, 33, 0.5f, 42, 3, 5},
      {128, 100, 0.9f, 0x123456789abcdefULL, 1000, 0},
      {300, 513, 0.5f, 7, 0x100000001ULL, 123456},
      {64, 1, 0.1f, 9, 2, 4000000000U},
      {1, 4099, 0.25f, UINT64_MAX, UINT64_MAX, 77},
      {0, 5, 0.5f, 1, 1, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    for (int inplace = 0; inplace < 2; inplace++) {
      dropout_p p = {cases[i].rows,
                     cases[i].cols,
                     {cases[i].p, cases[i].seed, cases[i].step, cases[i].first_row}};
      conf_case *c =
          conf_new_case(l, "x=[%zu,%zu] p=%g seed=%llu step=%llu first_row=%u%s", p.rows, p.cols,
                        p.d.p, (unsigned long long)p.d.seed, (unsigned long long)p.d.step,
                        (unsigned)p.d.first_row, inplace ? " in-place" : "");
      CONF_SET_PARAMS(c, p);
      conf_tensor *x =
          conf_add_tensor(c, "x", CONF_F32, inplace ? CONF_INOUT : CONF_IN, p.rows, p.cols);
      x->cmp = CONF_CMP_EXACT;
      if (!inplace)
        conf_add_tensor(c, "y", CONF_F32, CONF_OUT, p.rows, p.cols)->cmp = CONF_CMP_EXACT;
      c->run = run_dropout;
    }
  }
}

/* ---- layer normalization -------------------------------------------------------------------
 * x [rows, cols]; mean and rstd [1, rows]. A GPU may sum a row (or a column, for the parameter
 * gradients) in float: 1e-4, 1e-3 past 4096 terms. */
typedef struct ln_p {
  dpt_ln_geom g;
} ln_p;

static const dpt_ln_geom ln_shapes[] = {{1, 1, 1e-5f},    {1, 7, 1e-5f},     {5, 33, 1e-12f},
                                        {17, 64, 1e-5f},  {64, 768, 1e-12f}, {300, 65, 1e-3f},
                                        {3, 1000, 1e-5f}, {4100, 3, 1e-5f}};
#define N_LN (sizeof ln_shapes / sizeof ln_shapes[0])

static conf_case *ln_case(conf_list *l, size_t i) {
  conf_case *c = conf_new_case(l, "x=[%zu,%zu] eps=%g", ln_shapes[i].rows, ln_shapes[i].cols,
                               (double)ln_shapes[i].eps);
  ln_p p = {ln_shapes[i]};
  CONF_SET_PARAMS(c, p);
  return c;
}

static double ln_tol(size_t terms) {
  return terms > 4096 ? 1e-3 : 1e-4;
}

static dpt_status run_layernorm_fwd(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                    const size_t *off, double *scalars) {
  (void)scalars;
  return dpt_layernorm_fwd(be, &CONF_PARAMS(c, ln_p)->g, buf[0], off[0], buf[1], off[1], buf[2],
                           off[2], buf[3], off[3], buf[4], off[4], buf[5], off[5]);
}

static void gen_layernorm_fwd(conf_list *l) {
  for (size_t i = 0; i < N_LN; i++) {
    const dpt_ln_geom *g = &ln_shapes[i];
    conf_case *c = ln_case(l, i);
    conf_add_tensor(c, "x", CONF_F32, CONF_IN, g->rows, g->cols)->hi = 3.0; /* mean away from 0 */
    conf_tensor *gamma = conf_add_tensor(c, "gamma", CONF_F32, CONF_IN, 1, g->cols);
    gamma->lo = 0.5;
    gamma->hi = 1.5;
    conf_add_tensor(c, "beta", CONF_F32, CONF_IN, 1, g->cols);
    conf_add_tensor(c, "y", CONF_F32, CONF_OUT, g->rows, g->cols)->tol = ln_tol(g->cols);
    conf_add_tensor(c, "mean", CONF_F32, CONF_OUT, 1, g->rows)->tol = ln_tol(g->cols);
    conf_add_tensor(c, "rstd", CONF_F32, CONF_OUT, 1, g->rows)->tol = ln_tol(g->cols);
    c->run = run_layernorm_fwd;
  }
}

/* dy and x [rows, cols], then mean and rstd [1, rows] of the size data in [-1, 1) gives. */
static void ln_add_inputs(conf_case *c, const dpt_ln_geom *g) {
  conf_add_tensor(c, "dy", CONF_F32, CONF_IN, g->rows, g->cols);
  conf_add_tensor(c, "x", CONF_F32, CONF_IN, g->rows, g->cols);
  conf_tensor *mean = conf_add_tensor(c, "mean", CONF_F32, CONF_IN, 1, g->rows);
  mean->lo = -0.2;
  mean->hi = 0.2;
  conf_tensor *rstd = conf_add_tensor(c, "rstd", CONF_F32, CONF_IN, 1, g->rows);
  rstd->lo = 0.5;
  rstd->hi = 3.0;
}

static dpt_status run_layernorm_bwd(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                    const size_t *off, double *scalars) {
  (void)scalars;
  return dpt_layernorm_bwd(be, &CONF_PARAMS(c, ln_p)->g, buf[0], off[0], buf[1], off[1], buf[2],
                           off[2], buf[3], off[3], buf[4], off[4], buf[5], off[5]);
}

static void gen_layernorm_bwd(conf_list *l) {
  for (size_t i = 0; i < N_LN; i++) {
    const dpt_ln_geom *g = &ln_shapes[i];
    conf_case *c = ln_case(l, i);
    ln_add_inputs(c, g);
    conf_add_tensor(c, "gamma", CONF_F32, CONF_IN, 1, g->cols);
    conf_add_tensor(c, "dx", CONF_F32, CONF_OUT, g->rows, g->cols)->tol = ln_tol(g->cols);
    c->run = run_layernorm_bwd;
  }
}

static dpt_status run_layernorm_bwd_params(dpt_backend *be, const conf_case *c,
                                           dpt_buffer *const *buf, const size_t *off,
                                           double *scalars) {
  (void)scalars;
  return dpt_layernorm_bwd_params(be, &CONF_PARAMS(c, ln_p)->g, buf[0], off[0], buf[1], off[1],
                                  buf[2], off[2], buf[3], off[3], buf[4], off[4], buf[5], off[5]);
}

static void gen_layernorm_bwd_params(conf_list *l) {
  for (size_t i = 0; i < N_LN; i++) {
    const dpt_ln_geom *g = &ln_shapes[i];
    conf_case *c = ln_case(l, i);
    ln_add_inputs(c, g);
    conf_add_tensor(c, "dgamma", CONF_F32, CONF_OUT, 1, g->cols)->tol = ln_tol(g->rows);
    conf_add_tensor(c, "dbeta", CONF_F32, CONF_OUT, 1, g->cols)->tol = ln_tol(g->rows);
    c->run = run_layernorm_bwd_params;
  }
}

/* ---- GELU: both forms, x in [-6, 6) (both tails and the curved middle) -------------------- */

typedef struct gelu_p {
  size_t n;
  dpt_gelu_approx approx;
} gelu_p;

static dpt_status run_gelu_fwd(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                               const size_t *off, double *scalars) {
  const gelu_p *p = CONF_PARAMS(c, gelu_p);
  (void)scalars;
  int inplace = c->ntensors == 1;
  return dpt_gelu_fwd(be, p->n, p->approx, buf[0], off[0], inplace ? buf[0] : buf[1],
                      inplace ? off[0] : off[1]);
}

static dpt_status run_gelu_bwd(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                               const size_t *off, double *scalars) {
  const gelu_p *p = CONF_PARAMS(c, gelu_p);
  (void)scalars;
  int inplace = c->ntensors == 2;
  return dpt_gelu_bwd(be, p->n, p->approx, buf[0], off[0], buf[1], off[1],
                      inplace ? buf[1] : buf[2], inplace ? off[1] : off[2]);
}

static void gen_gelu(conf_list *l, int bwd) {
  for (size_t i = 0; i < N_SIZES; i++)
    for (int a = 0; a < 2; a++)
      for (int inplace = 0; inplace < 2; inplace++) {
        gelu_p p = {elementwise_sizes[i], a ? DPT_GELU_TANH : DPT_GELU_ERF};
        conf_case *c =
            conf_new_case(l, "n=%zu %s%s", p.n, a ? "tanh" : "erf", inplace ? " in-place" : "");
        CONF_SET_PARAMS(c, p);
        conf_tensor *x =
            conf_add_tensor(c, "x", CONF_F32, inplace && !bwd ? CONF_INOUT : CONF_IN, 1, p.n);
        x->lo = -6.0;
        x->hi = 6.0;
        conf_tensor *out;
        if (!bwd) {
          out = inplace ? x : conf_add_tensor(c, "y", CONF_F32, CONF_OUT, 1, p.n);
        } else {
          conf_tensor *dy =
              conf_add_tensor(c, "dy", CONF_F32, inplace ? CONF_INOUT : CONF_IN, 1, p.n);
          out = inplace ? dy : conf_add_tensor(c, "dx", CONF_F32, CONF_OUT, 1, p.n);
        }
        out->tol = 1e-5;
        c->run = bwd ? run_gelu_bwd : run_gelu_fwd;
      }
}

static void gen_gelu_fwd(conf_list *l) {
  gen_gelu(l, 0);
}

static void gen_gelu_bwd(conf_list *l) {
  gen_gelu(l, 1);
}

/* ---- bias + GELU, fused: x in [-6, 6), both forms, rows x cols ------------------------------ */

typedef struct bias_gelu_p {
  size_t rows, cols;
  dpt_gelu_approx approx;
  float beta;
} bias_gelu_p;

static const size_t bias_gelu_shapes[][2] = {{1, 1}, {3, 7}, {17, 33}, {40, 257}, {0, 5}, {5, 0}};
#define N_BIAS_GELU (sizeof bias_gelu_shapes / sizeof bias_gelu_shapes[0])

static dpt_status run_bias_gelu_fwd(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                    const size_t *off, double *scalars) {
  const bias_gelu_p *p = CONF_PARAMS(c, bias_gelu_p);
  (void)scalars;
  return dpt_bias_gelu_fwd(be, p->rows, p->cols, p->approx, buf[0], off[0], buf[1], off[1], buf[2],
                           off[2]);
}

static void gen_bias_gelu_fwd(conf_list *l) {
  for (size_t i = 0; i < N_BIAS_GELU; i++)
    for (int a = 0; a < 2; a++) {
      bias_gelu_p p = {bias_gelu_shapes[i][0], bias_gelu_shapes[i][1],
                       a ? DPT_GELU_TANH : DPT_GELU_ERF, 0.0f};
      conf_case *c = conf_new_case(l, "rows=%zu cols=%zu %s", p.rows, p.cols, a ? "tanh" : "erf");
      CONF_SET_PARAMS(c, p);
      conf_tensor *x = conf_add_tensor(c, "x", CONF_F32, CONF_INOUT, p.rows, p.cols);
      x->lo = -5.0;
      x->hi = 5.0;
      x->tol = 1e-6; /* one float addition */
      conf_add_tensor(c, "bias", CONF_F32, CONF_IN, 1, p.cols);
      conf_add_tensor(c, "y", CONF_F32, CONF_OUT, p.rows, p.cols)->tol = 1e-5;
      c->run = run_bias_gelu_fwd;
    }
}

static dpt_status run_bias_gelu_bwd(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                    const size_t *off, double *scalars) {
  const bias_gelu_p *p = CONF_PARAMS(c, bias_gelu_p);
  (void)scalars;
  const int inplace = c->ntensors == 3, d = inplace ? 1 : 2;
  return dpt_bias_gelu_bwd(be, p->rows, p->cols, p->approx, buf[0], off[0], buf[1], off[1], buf[d],
                           off[d], p->beta, buf[d + 1], off[d + 1]);
}

static void gen_bias_gelu_bwd(conf_list *l) {
  for (size_t i = 0; i < N_BIAS_GELU; i++)
    for (int v = 0; v < 4; v++) {
      const int a = v & 1, inplace = v >> 1;
      bias_gelu_p p = {bias_gelu_shapes[i][0], bias_gelu_shapes[i][1],
                       a ? DPT_GELU_TANH : DPT_GELU_ERF, inplace ? 0.5f : 0.0f};
      conf_case *c = conf_new_case(l, "rows=%zu cols=%zu %s beta=%g%s", p.rows, p.cols,
                                   a ? "tanh" : "erf", p.beta, inplace ? " in-place" : "");
      CONF_SET_PARAMS(c, p);
      conf_tensor *x = conf_add_tensor(c, "x", CONF_F32, CONF_IN, p.rows, p.cols);
      x->lo = -6.0;
      x->hi = 6.0;
      conf_tensor *dy =
          conf_add_tensor(c, "dy", CONF_F32, inplace ? CONF_INOUT : CONF_IN, p.rows, p.cols);
      if (inplace)
        dy->tol = 1e-5;
      else
        conf_add_tensor(c, "dx", CONF_F32, CONF_OUT, p.rows, p.cols)->tol = 1e-5;
      /* beta == 0: db is not read (NaN in, finite out) */
      conf_tensor *db =
          conf_add_tensor(c, "db", CONF_F32, p.beta == 0.0f ? CONF_OUT : CONF_INOUT, 1, p.cols);
      db->tol = 1e-5 + 2e-7 * (double)p.rows;
      c->run = run_bias_gelu_bwd;
    }
}

/* ---- attention's softmax and the softmax's backward -----------------------------------------
 * Rows of probabilities sum in float on a GPU: 1e-5. */

typedef struct attn_p {
  dpt_attn_geom g;
  float scale;
  int ids;     /* 0: no mask; else ids [n, k] (init_attn_ids) */
  int32_t pad; /* pad_id */
  int full;    /* with ids: sample full - 1 has every key masked (0: none) */
  int inplace; /* probs over scores */
} attn_p;

/* ids in [pad - 3, pad + 3]: each sample pad_id from a random length >= 1 on (as a tokenizer
 * pads) and at a tenth of its other keys; sample full - 1 all padding. */
static void init_attn_ids(const conf_case *c, int t, void *elems, conf_rng *rng) {
  const attn_p *p = CONF_PARAMS(c, attn_p);
  int32_t *ids = elems;
  (void)t;
  for (size_t i = 0; i < p->g.n; i++) {
    size_t len = (size_t)conf_rng_int(rng, 1, (int64_t)p->g.k); /* keys before the padding */
    for (size_t j = 0; j < p->g.k; j++) {
      int32_t v = (int32_t)conf_rng_int(rng, (int64_t)p->pad + 1, (int64_t)p->pad + 3);
      if (conf_rng_unit(rng) < 0.5) v = (int32_t)conf_rng_int(rng, (int64_t)p->pad - 3, p->pad - 1);
      if (j >= len || conf_rng_unit(rng) < 0.1) v = p->pad;
      if ((int)i == p->full - 1) v = p->pad;
      ids[i * p->g.k + j] = v;
    }
  }
}

static dpt_status run_attn_softmax(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                   const size_t *off, double *scalars) {
  const attn_p *p = CONF_PARAMS(c, attn_p);
  (void)scalars;
  int s = p->ids ? 1 : 0; /* the scores' tensor */
  int o = p->inplace ? s : s + 1;
  return dpt_attn_softmax(be, &p->g, p->scale, p->ids ? buf[0] : NULL, p->ids ? off[0] : 0, p->pad,
                          buf[s], off[s], buf[o], off[o]);
}

static void add_attn(conf_list *l, size_t n, size_t heads, size_t q, size_t k, float scale,
                     double range, int ids, int32_t pad, int full, int inplace) {
  conf_case *c = conf_new_case(l, "n=%zu heads=%zu q=%zu k=%zu scale=%g scores in [%g,%g]%s%s%s", n,
                               heads, q, k, (double)scale, -range, range, ids ? " ids" : " no mask",
                               full ? " (a sample all padding)" : "", inplace ? " in-place" : "");
  attn_p p = {{n, heads, q, k}, scale, ids, pad, full, inplace};
  CONF_SET_PARAMS(c, p);
  if (ids) {
    conf_add_tensor(c, "ids", CONF_I32, CONF_IN, n, k)->init = CONF_INIT_CUSTOM;
    c->init = init_attn_ids;
  }
  size_t rows = heads * n * q;
  conf_tensor *sc = conf_add_tensor(c, "scores", CONF_F32, inplace ? CONF_INOUT : CONF_IN, rows, k);
  sc->lo = -range;
  sc->hi = range;
  conf_tensor *pr = inplace ? sc : conf_add_tensor(c, "probs", CONF_F32, CONF_OUT, rows, k);
  pr->tol = 1e-5;
  c->run = run_attn_softmax;
}

static void gen_attn_softmax(conf_list *l) {
  for (int inplace = 0; inplace < 2; inplace++) {
    add_attn(l, 1, 1, 1, 1, 1.0f, 1, 0, 0, 0, inplace);
    add_attn(l, 1, 1, 1, 1, 1.0f, 1, 1, 0, 1, inplace); /* the one key masked: 0 */
    add_attn(l, 3, 2, 5, 1, 0.5f, 2, 1, 0, 0, inplace);
    add_attn(l, 3, 2, 5, 37, 0.125f, 8, 0, 0, 0, inplace);
    add_attn(l, 3, 2, 5, 37, 0.125f, 8, 1, 0, 2, inplace);
  }
  add_attn(l, 2, 4, 32, 128, 0.125f, 8, 1, 0, 0, 0); /* a BERT layer's shape, smaller */
  add_attn(l, 4, 1, 3, 128, 0.25f, 4, 1, 1, 3, 0);
  add_attn(l, 1, 2, 3, 512, 0.0625f, 16, 1, -1, 0, 0);
  add_attn(l, 2, 3, 1, 300, 1.0f, 60, 1, 7, 0, 1); /* needs the max subtracted */
  add_attn(l, 5, 1, 7, 33, 1.0f, 60, 0, 0, 0, 0);
  add_attn(l, 0, 2, 5, 7, 1.0f, 1, 1, 0, 0, 0); /* empty */
  add_attn(l, 3, 2, 0, 7, 1.0f, 1, 1, 0, 0, 0);
}

typedef struct sbwd_p {
  size_t rows, cols;
  int softmax; /* y: rows of a softmax (positive, summing to 1); else uniform in [0, 1) */
  int inplace; /* dx over dy */
} sbwd_p;

static void init_softmax_rows(const conf_case *c, int t, void *elems, conf_rng *rng) {
  const sbwd_p *p = CONF_PARAMS(c, sbwd_p);
  float *y = elems;
  (void)t;
  ck_assert_msg(p->cols <= 1024, "%s: softmax rows of at most 1024", c->label);
  for (size_t r = 0; r < p->rows; r++) {
    double e[1024], sum = 0.0;
    for (size_t j = 0; j < p->cols; j++)
      sum += e[j] = exp(6.0 * conf_rng_unit(rng) - 3.0);
    for (size_t j = 0; j < p->cols; j++)
      y[r * p->cols + j] = (float)(e[j] / sum);
  }
}

static dpt_status run_softmax_bwd(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                  const size_t *off, double *scalars) {
  const sbwd_p *p = CONF_PARAMS(c, sbwd_p);
  (void)scalars;
  int o = p->inplace ? 1 : 2;
  return dpt_softmax_bwd(be, p->rows, p->cols, buf[0], off[0], buf[1], off[1], buf[o], off[o]);
}

static void gen_softmax_bwd(conf_list *l) {
  static const struct {
    size_t rows, cols;
    int softmax;
  } shapes[] = {{1, 1, 1},    {7, 3, 1},   {30, 37, 1}, {256, 128, 1}, {3, 512, 1},
                {5, 1000, 1}, {17, 65, 0}, {2, 300, 0}, {0, 5, 1}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int inplace = 0; inplace < 2; inplace++) {
      sbwd_p p = {shapes[i].rows, shapes[i].cols, shapes[i].softmax, inplace};
      conf_case *c = conf_new_case(l, "rows=%zu cols=%zu y %s%s", p.rows, p.cols,
                                   p.softmax ? "softmax rows" : "uniform in [0,1)",
                                   inplace ? " in-place (dx == dy)" : "");
      CONF_SET_PARAMS(c, p);
      conf_tensor *y = conf_add_tensor(c, "y", CONF_F32, CONF_IN, p.rows, p.cols);
      y->lo = 0.0;
      if (p.softmax) {
        y->init = CONF_INIT_CUSTOM;
        c->init = init_softmax_rows;
      }
      conf_tensor *dy =
          conf_add_tensor(c, "dy", CONF_F32, inplace ? CONF_INOUT : CONF_IN, p.rows, p.cols);
      conf_tensor *dx = inplace ? dy : conf_add_tensor(c, "dx", CONF_F32, CONF_OUT, p.rows, p.cols);
      /* a float sum of cols products: uniform y makes the sum large next to dx */
      dx->tol = p.softmax ? 1e-5 : 1e-6 + 2e-7 * (double)p.cols;
      c->run = run_softmax_bwd;
    }
}

/* ---- attention's probabilities, fused: the mask exact, the values as the softmax's ----------- */

typedef struct attn_probs_p {
  attn_p a; /* first: init_attn_ids reads it */
  dpt_dropout_params d;
  int drop; /* 0: no dropout (dropped not passed) */
} attn_probs_p;

static dpt_status run_attn_probs_fwd(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                     const size_t *off, double *scalars) {
  const attn_probs_p *p = CONF_PARAMS(c, attn_probs_p);
  (void)scalars;
  int s = p->a.ids ? 1 : 0; /* probs, then dropped */
  return dpt_attn_probs_fwd(be, &p->a.g, p->a.scale, p->a.ids ? buf[0] : NULL,
                            p->a.ids ? off[0] : 0, p->a.pad, p->drop ? &p->d : NULL, buf[s], off[s],
                            p->drop ? buf[s + 1] : NULL, p->drop ? off[s + 1] : 0);
}

static void add_attn_probs(conf_list *l, size_t n, size_t heads, size_t q, size_t k, float scale,
                           int ids, int full, float drop, uint32_t first_row) {
  conf_case *c =
      conf_new_case(l, "n=%zu heads=%zu q=%zu k=%zu scale=%g%s%s p=%g first_row=%u", n, heads, q, k,
                    (double)scale, ids ? " ids" : " no mask", full ? " (a sample all padding)" : "",
                    (double)drop, (unsigned)first_row);
  attn_probs_p p = {
      {{n, heads, q, k}, scale, ids, 0, full, 1}, {drop, 0x5eedULL + n, 3, first_row}, drop > 0.0f};
  CONF_SET_PARAMS(c, p);
  if (ids) {
    conf_add_tensor(c, "ids", CONF_I32, CONF_IN, n, k)->init = CONF_INIT_CUSTOM;
    c->init = init_attn_ids;
  }
  size_t rows = heads * n * q;
  conf_tensor *sc = conf_add_tensor(c, "probs", CONF_F32, CONF_INOUT, rows, k);
  sc->lo = -8.0;
  sc->hi = 8.0;
  sc->tol = 1e-5;
  if (p.drop) conf_add_tensor(c, "dropped", CONF_F32, CONF_OUT, rows, k)->tol = 1e-5;
  c->run = run_attn_probs_fwd;
}

static void gen_attn_probs_fwd(conf_list *l) {
  add_attn_probs(l, 1, 1, 1, 1, 1.0f, 1, 1, 0.5f, 0); /* the one key masked: 0 */
  add_attn_probs(l, 3, 2, 5, 37, 0.125f, 1, 2, 0.1f, 7);
  add_attn_probs(l, 3, 2, 5, 37, 0.125f, 0, 0, 0.0f, 0);
  add_attn_probs(l, 2, 4, 32, 128, 0.125f, 1, 0, 0.1f, 1000); /* a BERT layer's shape, smaller */
  add_attn_probs(l, 2, 3, 1, 300, 1.0f, 1, 0, 0.9f, 0);
  add_attn_probs(l, 5, 1, 7, 33, 1.0f, 0, 0, 0.5f, 4000000000U);
  add_attn_probs(l, 0, 2, 5, 7, 1.0f, 1, 0, 0.5f, 0); /* empty */
}

typedef struct attn_probs_bwd_p {
  size_t rows, cols;
  float p;     /* 0: no dropout (dropped not passed) */
  int inplace; /* dx over dy */
} attn_probs_bwd_p;

/* y: rows of a softmax; dropped: 0 at a fraction p of the places, else y / (1 - p) (only its
 * zeros matter). */
static void init_attn_probs_bwd(const conf_case *c, int t, void *elems, conf_rng *rng) {
  const attn_probs_bwd_p *p = CONF_PARAMS(c, attn_probs_bwd_p);
  float *v = elems;
  for (size_t r = 0; r < p->rows; r++) {
    double e[512], sum = 0.0;
    for (size_t j = 0; j < p->cols; j++)
      sum += e[j] = exp(6.0 * conf_rng_unit(rng) - 3.0);
    for (size_t j = 0; j < p->cols; j++) {
      const float y = (float)(e[j] / sum);
      v[r * p->cols + j] = t == 0 ? y : conf_rng_unit(rng) < p->p ? 0.0f : y / (1.0f - p->p);
    }
  }
}

static dpt_status run_attn_probs_bwd(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                     const size_t *off, double *scalars) {
  const attn_probs_bwd_p *p = CONF_PARAMS(c, attn_probs_bwd_p);
  (void)scalars;
  const int d = p->p > 0.0f ? 1 : 0, g = 1 + d, o = p->inplace ? g : g + 1;
  return dpt_attn_probs_bwd(be, p->rows, p->cols, buf[0], off[0], d ? buf[1] : NULL, d ? off[1] : 0,
                            p->p, buf[g], off[g], buf[o], off[o]);
}

static void gen_attn_probs_bwd(conf_list *l) {
  static const struct {
    size_t rows, cols;
    float p;
  } shapes[] = {{1, 1, 0.5f},     {7, 3, 0.1f},   {30, 37, 0.0f},
                {256, 128, 0.1f}, {3, 512, 0.9f}, {0, 5, 0.5f}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int inplace = 0; inplace < 2; inplace++) {
      attn_probs_bwd_p p = {shapes[i].rows, shapes[i].cols, shapes[i].p, inplace};
      conf_case *c = conf_new_case(l, "rows=%zu cols=%zu p=%g%s", p.rows, p.cols, (double)p.p,
                                   inplace ? " in-place (dx == dy)" : "");
      CONF_SET_PARAMS(c, p);
      conf_add_tensor(c, "y", CONF_F32, CONF_IN, p.rows, p.cols)->init = CONF_INIT_CUSTOM;
      if (p.p > 0.0f)
        conf_add_tensor(c, "dropped", CONF_F32, CONF_IN, p.rows, p.cols)->init = CONF_INIT_CUSTOM;
      c->init = init_attn_probs_bwd;
      conf_tensor *dy =
          conf_add_tensor(c, "dy", CONF_F32, inplace ? CONF_INOUT : CONF_IN, p.rows, p.cols);
      conf_tensor *dx = inplace ? dy : conf_add_tensor(c, "dx", CONF_F32, CONF_OUT, p.rows, p.cols);
      dx->tol = 1e-5;
      c->run = run_attn_probs_bwd;
    }
}

/* ---- embedding bags ------------------------------------------------------------------------ */

typedef struct bag_p {
  size_t n, bag, vocab, dim, stride;
  dpt_bag_mode mode;
  double p_bad;   /* per slot: an id >= vocab (a NaN row forward, skipped backward) */
  double p_empty; /* per sample: every slot empty */
} bag_p;

/* Sample i's bag of ids: about a quarter of the slots empty (-1, sometimes another negative
 * id), half of the others drawn from the first 3 ids (repeats within and across bags), the rest
 * uniform over the vocabulary; with p_bad an id >= vocab; with p_empty no id at all (a mean of
 * 0). The stride's gap after the bag stays the harness's sentinel, which must not be read. */
static void init_bag_ids(const conf_case *c, int t, void *elems, conf_rng *rng) {
  const bag_p *p = CONF_PARAMS(c, bag_p);
  int32_t *ids = elems;
  (void)t;
  const int64_t hot = p->vocab < 3 ? (int64_t)p->vocab : 3;
  for (size_t i = 0; i < p->n; i++) {
    int empty = conf_rng_unit(rng) < p->p_empty;
    for (size_t s = 0; s < p->bag; s++) {
      int32_t v;
      double u = conf_rng_unit(rng);
      if (empty || u < 0.25) {
        static const int32_t neg[] = {-1, -1, -1, -7, INT32_MIN};
        v = neg[conf_rng_int(rng, 0, 4)];
      } else if (conf_rng_unit(rng) < p->p_bad) {
        int k = (int)conf_rng_int(rng, 0, 2); /* vocab, vocab + 7 or INT32_MAX */
        v = k == 2 ? INT32_MAX : (int32_t)p->vocab + 7 * k;
      } else if (u < 0.6) {
        v = (int32_t)conf_rng_int(rng, 0, hot - 1);
      } else {
        v = (int32_t)conf_rng_int(rng, 0, (int64_t)p->vocab - 1);
      }
      ids[i * p->bag + s] = v;
    }
  }
}

static dpt_status run_embed_bag(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                const size_t *off, double *scalars) {
  const bag_p *p = CONF_PARAMS(c, bag_p);
  (void)scalars;
  return dpt_embed_bag(be, p->n, p->bag, p->vocab, p->dim, p->mode, buf[0], off[0], buf[1], off[1],
                       p->stride, buf[2], off[2]);
}

static dpt_status run_embed_bag_bwd(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                    const size_t *off, double *scalars) {
  const bag_p *p = CONF_PARAMS(c, bag_p);
  (void)scalars;
  return dpt_embed_bag_bwd(be, p->n, p->bag, p->vocab, p->dim, p->mode, buf[0], off[0], buf[1],
                           off[1], p->stride, buf[2], off[2]);
}

/* n, bag, vocab, dim, stride, p_bad, p_empty. Sizes stay small: under Oclgrind the backward
 * costs about buckets * dim * n * bag simulated id reads. */
static const struct {
  size_t n, bag, vocab, dim, stride;
  double p_bad, p_empty;
} bag_shapes[] = {
    {1, 1, 1, 1, 1, 0, 0},
    {3, 4, 5, 3, 4, 0, 0},
    {7, 3, 10, 5, 9, 0.1, 0},
    {40, 5, 3, 33, 5, 0, 0.1},
    {33, 6, 20, 8, 13, 0, 0.3},
    {48, 8, 1000, 17, 8, 0, 0},
    {100, 2, 50, 64, 11, 0.1, 0},
    {50, 1, 7, 130, 3, 0, 0.2},
    {16, 20, 40, 16, 27, 0.05, 0.1},
    /* tables of 4 and 7 windows where conformance_vulkan_embed_bag*_split shrink the Vulkan
     * windows to 4 KiB: a bag's ids fall in different chunks of the table */
    {64, 6, 300, 8, 7, 0.05, 0.1},
    {9, 3, 130, 40, 3, 0.1, 0},
    /* long bags: several of the Vulkan backward's dispatches (its loop budget) */
    {110, 300, 2, 1, 301, 0.01, 0.05},
    {0, 3, 5, 4, 3, 0, 0},
    {4, 2, 5, 0, 2, 0, 0},
};

static void gen_bag(conf_list *l, int bwd) {
  for (size_t i = 0; i < sizeof bag_shapes / sizeof bag_shapes[0]; i++)
    for (int mean = 0; mean < 2; mean++) {
      bag_p p = {bag_shapes[i].n,     bag_shapes[i].bag,    bag_shapes[i].vocab,
                 bag_shapes[i].dim,   bag_shapes[i].stride, mean ? DPT_BAG_MEAN : DPT_BAG_SUM,
                 bag_shapes[i].p_bad, bag_shapes[i].p_empty};
      conf_case *c =
          conf_new_case(l, "n=%zu bag=%zu vocab=%zu dim=%zu stride=%zu %s%s%s", p.n, p.bag, p.vocab,
                        p.dim, p.stride, mean ? "mean" : "sum", p.p_bad > 0 ? " ids >= vocab" : "",
                        p.p_empty > 0 ? " empty bags" : "");
      CONF_SET_PARAMS(c, p);
      conf_add_tensor(c, bwd ? "dout" : "table", CONF_F32, CONF_IN, bwd ? p.n : p.vocab, p.dim);
      conf_tensor *idx = conf_add_tensor(c, "idx", CONF_I32, CONF_IN, p.n, p.bag);
      idx->ld = p.stride;
      idx->init = CONF_INIT_CUSTOM;
      c->init = init_bag_ids;
      if (!bwd) {
        conf_tensor *out = conf_add_tensor(c, "out", CONF_F32, CONF_OUT, p.n, p.dim);
        out->tol = 1e-6 * (double)p.bag;
        out->finite = p.p_bad == 0; /* a bag with an id >= vocab gives a NaN row */
        c->run = run_embed_bag;
      } else {
        conf_tensor *dt = conf_add_tensor(c, "dtable", CONF_F32, CONF_INOUT, p.vocab, p.dim);
        dt->tol = 1e-6 * (1.0 + (double)(p.n * p.bag) / (double)max1(p.vocab));
        c->run = run_embed_bag_bwd;
      }
    }
}

static void gen_embed_bag(conf_list *l) {
  gen_bag(l, 0);
}

static void gen_embed_bag_bwd(conf_list *l) {
  gen_bag(l, 1);
}

/* ---- column gathers ------------------------------------------------------------------------ */

typedef struct cols_p {
  size_t rows, cols, ldx, ldy;
  int scatter;
  double p_bad; /* per map entry: outside [0, ldx) (-1, ldx, INT32_MIN, INT32_MAX) */
  int contig;   /* 1: the map is first, first + 1, ... (a slice or a concatenation's part) */
  size_t first;
} cols_p;

/* The map: for scatter_cols_add distinct in-range entries (a shuffled prefix of 0 .. ldx-1),
 * for gather_cols any, repeats included; with p_bad an entry outside [0, ldx). */
static void init_cols_map(const conf_case *c, int t, void *elems, conf_rng *rng) {
  const cols_p *p = CONF_PARAMS(c, cols_p);
  int32_t *map = elems;
  (void)t;
  size_t next = 0; /* scatter: the next unused column of the shuffled order */
  int32_t perm[1024];
  ck_assert_msg(p->ldx <= 1024, "%s: ldx of at most 1024", c->label);
  for (size_t k = 0; k < p->ldx; k++)
    perm[k] = (int32_t)k;
  for (size_t k = p->ldx; k > 1; k--) {
    size_t r = (size_t)conf_rng_int(rng, 0, (int64_t)k - 1);
    int32_t tmp = perm[k - 1];
    perm[k - 1] = perm[r];
    perm[r] = tmp;
  }
  for (size_t j = 0; p->contig && j < p->cols; j++)
    map[j] = (int32_t)(p->first + j);
  for (size_t j = 0; !p->contig && j < p->cols; j++) {
    int bad = conf_rng_unit(rng) < p->p_bad || (p->scatter && next == p->ldx);
    if (bad) {
      static const int32_t out[] = {-1, 0, INT32_MIN, INT32_MAX};
      int k = (int)conf_rng_int(rng, 0, 3);
      map[j] = k == 1 ? (int32_t)p->ldx : out[k];
    } else {
      map[j] = p->scatter ? perm[next++] : (int32_t)conf_rng_int(rng, 0, (int64_t)p->ldx - 1);
    }
  }
}

static dpt_status run_cols(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                           const size_t *off, double *scalars) {
  const cols_p *p = CONF_PARAMS(c, cols_p);
  (void)scalars;
  /* tensors: x (dx), map, y (dy) */
  if (p->scatter)
    return dpt_scatter_cols_add(be, p->rows, p->cols, buf[2], off[2], p->ldy, buf[1], off[1],
                                buf[0], off[0], p->ldx);
  return dpt_gather_cols(be, p->rows, p->cols, buf[0], off[0], p->ldx, buf[1], off[1], buf[2],
                         off[2], p->ldy);
}

/* rows, cols, ldx, ldy, p_bad. ldy > cols: y is a column range of a wider matrix (a
 * concatenation), whose other columns (the harness's guarded gap) must stay untouched. */
static const struct {
  size_t rows, cols, ldx, ldy;
  double p_bad;
  int contig; /* 1: columns [first, first + cols) of x, as slices and concatenations have it */
  size_t first;
} cols_shapes[] = {
    {1, 1, 1, 1, 0, 0, 0},       {5, 3, 7, 3, 0, 0, 0},           {5, 3, 7, 10, 0.2, 0, 0},
    {33, 17, 40, 50, 0.1, 0, 0}, {64, 128, 200, 300, 0.05, 0, 0}, {200, 13, 39, 26, 0, 0, 0},
    {3, 8, 5, 8, 0.3, 0, 0},     {7, 26, 26, 40, 0, 0, 0},        {0, 4, 5, 4, 0, 0, 0},
    {4, 0, 5, 1, 0, 0, 0},       {9, 16, 48, 16, 0, 1, 16},       {5, 7, 7, 12, 0, 1, 0},
    {31, 10, 10, 10, 0, 1, 0},
};

static void gen_cols(conf_list *l, int scatter) {
  for (size_t i = 0; i < sizeof cols_shapes / sizeof cols_shapes[0]; i++) {
    cols_p p = {cols_shapes[i].rows,
                cols_shapes[i].cols,
                cols_shapes[i].ldx,
                cols_shapes[i].ldy,
                scatter,
                cols_shapes[i].p_bad,
                cols_shapes[i].contig,
                cols_shapes[i].first};
    conf_case *c = conf_new_case(l, "rows=%zu cols=%zu ldx=%zu ldy=%zu%s%s", p.rows, p.cols, p.ldx,
                                 p.ldy, p.p_bad > 0 ? " map entries out of range" : "",
                                 p.contig ? " contiguous map" : "");
    CONF_SET_PARAMS(c, p);
    /* scatter: dx accumulates onto its non-zero values */
    conf_add_tensor(c, scatter ? "dx" : "x", CONF_F32, scatter ? CONF_INOUT : CONF_IN, p.rows,
                    p.ldx);
    conf_tensor *map = conf_add_tensor(c, "map", CONF_I32, CONF_IN, 1, p.cols);
    map->init = CONF_INIT_CUSTOM;
    c->init = init_cols_map;
    conf_tensor *y = conf_add_tensor(c, scatter ? "dy" : "y", CONF_F32,
                                     scatter ? CONF_IN : CONF_OUT, p.rows, p.cols);
    y->ld = max1(p.ldy);
    if (!scatter) y->cmp = CONF_CMP_EXACT;
    if (scatter) c->t[0].tol = 1e-6;
    c->run = run_cols;
  }
}

static void gen_gather_cols(conf_list *l) {
  gen_cols(l, 0);
}

static void gen_scatter_cols_add(conf_list *l) {
  gen_cols(l, 1);
}

/* ---- binary cross-entropy with logits -------------------------------------------------------- */

typedef struct bce_p {
  size_t n;
  float scale;
  int want;    /* SX_GRAD | SX_LOSS | SX_CORRECT */
  int inplace; /* dlogits over the logits */
  double p_ignore, p_bad;
} bce_p;

/* Logits: uniform in [-8, 8) with exact 0, +-60 and +-80 mixed in; labels 0 / 1 with
 * DPT_IGNORE_INDEX (p_ignore) and other labels (2, -1, -101: NaN loss; p_bad). */
static void init_bce(const conf_case *c, int t, void *elems, conf_rng *rng) {
  const bce_p *p = CONF_PARAMS(c, bce_p);
  if (t == 0) {
    float *x = elems;
    static const float extreme[] = {0.0f, 60.0f, -60.0f, 80.0f, -80.0f};
    for (size_t i = 0; i < p->n; i++)
      x[i] = conf_rng_unit(rng) < 0.2 ? extreme[conf_rng_int(rng, 0, 4)]
                                      : (float)(16.0 * conf_rng_unit(rng) - 8.0);
    return;
  }
  int32_t *y = elems;
  for (size_t i = 0; i < p->n; i++) {
    double u = conf_rng_unit(rng);
    static const int32_t bad[] = {2, -1, DPT_IGNORE_INDEX - 1};
    y[i] = u < p->p_ignore              ? DPT_IGNORE_INDEX
           : u < p->p_ignore + p->p_bad ? bad[conf_rng_int(rng, 0, 2)]
                                        : (int32_t)conf_rng_int(rng, 0, 1);
  }
}

static dpt_status run_bce(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                          const size_t *off, double *scalars) {
  const bce_p *p = CONF_PARAMS(c, bce_p);
  double loss = NAN;
  int64_t correct = -1;
  int d = p->inplace ? 0 : 2;
  dpt_status st =
      dpt_bce_logits(be, p->n, buf[0], off[0], buf[1], off[1], p->scale,
                     (p->want & SX_GRAD) ? buf[d] : NULL, (p->want & SX_GRAD) ? off[d] : 0,
                     (p->want & SX_LOSS) ? &loss : NULL, (p->want & SX_CORRECT) ? &correct : NULL);
  int s = 0;
  if (p->want & SX_LOSS) scalars[s++] = loss;
  if (p->want & SX_CORRECT) scalars[s++] = (double)correct;
  return st;
}

static void add_bce(conf_list *l, size_t n, float scale, int want, int inplace, double p_ignore,
                    double p_bad) {
  conf_case *c =
      conf_new_case(l, "n=%zu scale=%g ignore=%g bad=%g%s%s%s%s", n, (double)scale, p_ignore, p_bad,
                    (want & SX_GRAD) ? " +grad" : "", (want & SX_LOSS) ? " +loss" : "",
                    (want & SX_CORRECT) ? " +correct" : "", inplace ? " in-place" : "");
  bce_p p = {n, scale, want, inplace, p_ignore, p_bad};
  CONF_SET_PARAMS(c, p);
  conf_tensor *x = conf_add_tensor(c, "logits", CONF_F32, inplace ? CONF_INOUT : CONF_IN, 1, n);
  x->init = CONF_INIT_CUSTOM;
  conf_add_tensor(c, "labels", CONF_I32, CONF_IN, 1, n)->init = CONF_INIT_CUSTOM;
  c->init = init_bce;
  if (inplace) x->tol = 2e-6;
  if ((want & SX_GRAD) && !inplace)
    conf_add_tensor(c, "dlogits", CONF_F32, CONF_OUT, 1, n)->tol = 2e-6;
  if (want & SX_LOSS) conf_add_scalar(c, "loss_sum", 1e-5 * (double)(n + 1), 1e-5);
  if (want & SX_CORRECT) conf_add_scalar(c, "correct", 0.0, 0.0);
  c->run = run_bce;
}

static void gen_bce_logits(conf_list *l) {
  add_bce(l, 1, 1.0f, SX_ALL, 0, 0, 0);
  add_bce(l, 7, 0.5f, SX_ALL, 0, 0, 0);
  add_bce(l, 300, 1.0f / 300.0f, SX_ALL, 0, 0, 0);
  add_bce(l, 257, 1.0f, SX_ALL, 0, 0.3, 0);   /* ignored labels */
  add_bce(l, 100, 1.0f, SX_ALL, 0, 0.2, 0.1); /* NaN loss, zero gradients */
  add_bce(l, 64, 1.0f, SX_ALL, 0, 1.0, 0);    /* every label ignored */
  add_bce(l, 1000, 1.0f / 1000.0f, SX_ALL, 1, 0.1, 0);
  add_bce(l, 33, 2.0f, SX_GRAD | SX_LOSS, 1, 0.1, 0.05);
  add_bce(l, 9, 1.0f, SX_GRAD, 0, 0.2, 0);
  add_bce(l, 9, 1.0f, SX_LOSS, 0, 0.2, 0);
  add_bce(l, 9, 1.0f, SX_CORRECT, 0, 0.2, 0.1);
  add_bce(l, 0, 1.0f, SX_ALL, 0, 0, 0);
}

/* ---- the registry -------------------------------------------------------------------------- */

const conf_generator conf_generators[] = {
    {DPT_OP_GEMM, gen_gemm},
    {DPT_OP_BIAS_ADD, gen_bias_add},
    {DPT_OP_BIAS_GRAD, gen_bias_grad},
    {DPT_OP_RELU_FWD, gen_relu_fwd},
    {DPT_OP_RELU_BWD, gen_relu_bwd},
    {DPT_OP_SOFTMAX_XENT, gen_softmax_xent},
    {DPT_OP_IM2COL, gen_im2col},
    {DPT_OP_COL2IM, gen_col2im},
    {DPT_OP_MAXPOOL_FWD, gen_maxpool_fwd},
    {DPT_OP_MAXPOOL_BWD, gen_maxpool_bwd},
    {DPT_OP_EMBED_GATHER, gen_embed_gather},
    {DPT_OP_EMBED_SCATTER_ADD, gen_embed_scatter_add},
    {DPT_OP_AXPY, gen_axpy},
    {DPT_OP_SCALE, gen_scale},
    {DPT_OP_SUM, gen_sum},
    {DPT_OP_SUMSQ, gen_sumsq},
    {DPT_OP_COUNT_NONFINITE, gen_count_nonfinite},
    {DPT_OP_SGD_UPDATE, gen_sgd_update},
    {DPT_OP_ADAMW_UPDATE, gen_adamw_update},
    {DPT_OP_F32_TO_F16, gen_f32_to_f16},
    {DPT_OP_F16_TO_F32, gen_f16_to_f32},
    {DPT_OP_F32_TO_BF16, gen_f32_to_bf16},
    {DPT_OP_BF16_TO_F32, gen_bf16_to_f32},
    {DPT_OP_GEMM_BATCHED, gen_gemm_batched},
    {DPT_OP_BN_STATS, gen_bn_stats},
    {DPT_OP_BN_FWD, gen_bn_fwd},
    {DPT_OP_BN_BWD_REDUCE, gen_bn_bwd_reduce},
    {DPT_OP_BN_BWD, gen_bn_bwd},
    {DPT_OP_ADD_RELU, gen_add_relu},
    {DPT_OP_BN_RELU_FWD, gen_bn_relu_fwd},
    {DPT_OP_BN_RELU_BWD_REDUCE, gen_bn_relu_bwd_reduce},
    {DPT_OP_BN_RELU_BWD, gen_bn_relu_bwd},
    {DPT_OP_AVGPOOL_FWD, gen_avgpool_fwd},
    {DPT_OP_AVGPOOL_BWD, gen_avgpool_bwd},
    {DPT_OP_DROPOUT, gen_dropout},
    {DPT_OP_LAYERNORM_FWD, gen_layernorm_fwd},
    {DPT_OP_LAYERNORM_BWD, gen_layernorm_bwd},
    {DPT_OP_LAYERNORM_BWD_PARAMS, gen_layernorm_bwd_params},
    {DPT_OP_GELU_FWD, gen_gelu_fwd},
    {DPT_OP_GELU_BWD, gen_gelu_bwd},
    {DPT_OP_ATTN_SOFTMAX, gen_attn_softmax},
    {DPT_OP_SOFTMAX_BWD, gen_softmax_bwd},
    {DPT_OP_EMBED_BAG, gen_embed_bag},
    {DPT_OP_EMBED_BAG_BWD, gen_embed_bag_bwd},
    {DPT_OP_GATHER_COLS, gen_gather_cols},
    {DPT_OP_CONV2D_FWD, gen_conv2d_fwd},
    {DPT_OP_CONV2D_BWD_DATA, gen_conv2d_bwd_data},
    {DPT_OP_CONV2D_BWD_WEIGHTS, gen_conv2d_bwd_weights},
    {DPT_OP_SCATTER_COLS_ADD, gen_scatter_cols_add},
    {DPT_OP_BCE_LOGITS, gen_bce_logits},
    {DPT_OP_BIAS_GELU_FWD, gen_bias_gelu_fwd},
    {DPT_OP_BIAS_GELU_BWD, gen_bias_gelu_bwd},
    {DPT_OP_ATTN_PROBS_FWD, gen_attn_probs_fwd},
    {DPT_OP_ATTN_PROBS_BWD, gen_attn_probs_bwd},
};
const size_t conf_generator_count = sizeof conf_generators / sizeof conf_generators[0];
