/* The op wrappers for layers beyond the first five kinds: batched gemm, batch normalization,
 * average pooling, dropout, layer normalization, GELU and GELU with a linear layer's bias. Each
 * checks its arguments (backends/op_check.h) and calls the backend's entry with valid, non-empty
 * arguments. */
#include <math.h>

#include "backends/backend_impl.h"
#include "backends/op_check.h"
#include "base/error.h"
#include "base/size.h"

/* The span of a batch of matrices: the first's extent plus (batch - 1) strides. */
static dpt_status batch_span(dpt_op_check *c, const char *name, size_t extent, size_t batch,
                             size_t stride, size_t *span) {
  size_t t;
  if (extent == 0 || batch == 0) {
    *span = 0;
    return DPT_OK;
  }
  if (!dpt_mul_ok(batch - 1, stride, &t) || !dpt_add_ok(t, extent, span))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %s batch span overflows", c->fn, name);
  return DPT_OK;
}

/* Checks operand `name` over the whole batch. A batch of 0 holds no matrix: only the leading
 * dimension is checked (an empty tensor is legal anywhere). */
static dpt_status batch_operand(dpt_op_check *c, const char *name, const char *ldname,
                                const dpt_buffer *buf, size_t off, size_t rows, size_t cols,
                                size_t ld, size_t batch, size_t stride, size_t *extent,
                                size_t *span) {
  DPT_TRY(dpt_op_matrix(c, name, ldname, buf, off, batch ? rows : 0, cols, ld, extent));
  DPT_TRY(batch_span(c, name, *extent, batch, stride, span));
  return dpt_op_tensor(c, name, buf, off, *span, F32);
}

/* k == 0 or alpha == 0: C = beta * C per item (once for a summed batch). */
static dpt_status gemm_batched_degenerate(const dpt_gemm_batch *bt, dpt_backend *be, size_t m,
                                          size_t n, float beta, dpt_buffer *c, size_t c_off,
                                          size_t ldc) {
  size_t items = bt->stride_c == 0 ? 1 : bt->batch;
  for (size_t i = 0; i < items; ++i)
    DPT_TRY(dpt_gemm(be, 0, 0, m, n, 0, 0.0f, c, 0, 1, c, 0, n, beta, c, c_off + i * bt->stride_c,
                     ldc));
  return DPT_OK;
}

dpt_status dpt_gemm_batched(dpt_backend *be, const dpt_gemm_batch *bt, int trans_a, int trans_b,
                            size_t m, size_t n, size_t k, float alpha, const dpt_buffer *a,
                            size_t a_off, size_t lda, const dpt_buffer *b, size_t b_off, size_t ldb,
                            float beta, dpt_buffer *c, size_t c_off, size_t ldc) {
  dpt_op_check ck;
  DPT_TRY(dpt_op_begin(&ck, "dpt_gemm_batched", be, be && be->vt->gemm_batched));
  if (!bt) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_gemm_batched: batch is NULL");
  size_t ea, eb, ec, sa, sb, sc;
  DPT_TRY(batch_operand(&ck, "a", "lda", a, a_off, trans_a ? k : m, trans_a ? m : k, lda, bt->batch,
                        bt->stride_a, &ea, &sa));
  DPT_TRY(batch_operand(&ck, "b", "ldb", b, b_off, trans_b ? n : k, trans_b ? k : n, ldb, bt->batch,
                        bt->stride_b, &eb, &sb));
  DPT_TRY(batch_operand(&ck, "c", "ldc", c, c_off, m, n, ldc, bt->batch, bt->stride_c, &ec, &sc));
  if (bt->stride_c != 0 && bt->batch > 1 && bt->stride_c < ec)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "dpt_gemm_batched: stride_c %zu is smaller than one C's extent %zu",
                         bt->stride_c, ec);
  DPT_TRY(dpt_op_alias(&ck, "c", c, c_off, sc, F32, "a", a, a_off, sa, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "c", c, c_off, sc, F32, "b", b, b_off, sb, F32, 0));
  if (m == 0 || n == 0 || bt->batch == 0) return DPT_OK;
  if (k == 0 || alpha == 0.0f) return gemm_batched_degenerate(bt, be, m, n, beta, c, c_off, ldc);
  dpt_gemm_batched_args args = {{trans_a != 0, trans_b != 0, m, n, k, alpha, beta,
                                 dpt_op_ref(a, a_off), dpt_op_ref(b, b_off), dpt_op_ref(c, c_off),
                                 lda, ldb, ldc},
                                bt->batch,
                                bt->stride_a,
                                bt->stride_b,
                                bt->stride_c};
  return DPT_BE_CALL(be, be->vt->gemm_batched(be, &args));
}

/* ---- batch normalization ------------------------------------------------------------------ */

/* The geometry: *nx receives n*c*p. */
static dpt_status bn_geom(dpt_op_check *c, const dpt_bn_geom *g, size_t *nx) {
  if (!g) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: geometry is NULL", c->fn);
  if (g->n == 0 || g->c == 0 || g->p == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: n x c x p = %zu x %zu x %zu has a zero", c->fn,
                         g->n, g->c, g->p);
  if (!(g->eps > 0.0f) || !isfinite(g->eps))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: eps %g must be positive", c->fn, (double)g->eps);
  size_t t;
  DPT_TRY(dpt_op_elems2(c, "x", g->n, g->c, &t));
  return dpt_op_elems2(c, "x", t, g->p, nx);
}

/* Per-channel vectors [c]. */
static dpt_status bn_vec(dpt_op_check *c, const char *name, const dpt_buffer *buf, size_t off,
                         size_t count) {
  return dpt_op_tensor(c, name, buf, off, count, F32);
}

dpt_status dpt_bn_stats(dpt_backend *be, const dpt_bn_geom *g, const dpt_buffer *x, size_t x_off,
                        dpt_buffer *mean, size_t mean_off, dpt_buffer *var, size_t var_off) {
  dpt_op_check ck;
  size_t nx;
  DPT_TRY(dpt_op_begin(&ck, "dpt_bn_stats", be, be && be->vt->bn_stats));
  DPT_TRY(bn_geom(&ck, g, &nx));
  DPT_TRY(dpt_op_tensor(&ck, "x", x, x_off, nx, F32));
  DPT_TRY(bn_vec(&ck, "mean", mean, mean_off, g->c));
  DPT_TRY(bn_vec(&ck, "var", var, var_off, g->c));
  DPT_TRY(dpt_op_alias(&ck, "mean", mean, mean_off, g->c, F32, "x", x, x_off, nx, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "var", var, var_off, g->c, F32, "x", x, x_off, nx, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "var", var, var_off, g->c, F32, "mean", mean, mean_off, g->c, F32, 0));
  dpt_bn_args args = {.g = *g,
                      .x = dpt_op_ref(x, x_off),
                      .mean = dpt_op_ref(mean, mean_off),
                      .var = dpt_op_ref(var, var_off)};
  return DPT_BE_CALL(be, be->vt->bn_stats(be, &args));
}

/* bn_fwd and bn_relu_fwd (relu set). */
static dpt_status bn_forward(dpt_backend *be, int relu, const dpt_bn_geom *g, const dpt_buffer *x,
                             size_t x_off, const dpt_buffer *mean, size_t mean_off,
                             const dpt_buffer *var, size_t var_off, const dpt_buffer *gamma,
                             size_t gamma_off, const dpt_buffer *beta, size_t beta_off,
                             dpt_buffer *y, size_t y_off) {
  dpt_op_check ck;
  size_t nx;
  const char *fn = relu ? "dpt_bn_relu_fwd" : "dpt_bn_fwd";
  DPT_TRY(dpt_op_begin(&ck, fn, be, be && (relu ? be->vt->bn_relu_fwd : be->vt->bn_fwd)));
  DPT_TRY(bn_geom(&ck, g, &nx));
  DPT_TRY(dpt_op_tensor(&ck, "x", x, x_off, nx, F32));
  DPT_TRY(bn_vec(&ck, "mean", mean, mean_off, g->c));
  DPT_TRY(bn_vec(&ck, "var", var, var_off, g->c));
  DPT_TRY(bn_vec(&ck, "gamma", gamma, gamma_off, g->c));
  DPT_TRY(bn_vec(&ck, "beta", beta, beta_off, g->c));
  DPT_TRY(dpt_op_tensor(&ck, "y", y, y_off, nx, F32));
  DPT_TRY(dpt_op_alias(&ck, "y", y, y_off, nx, F32, "x", x, x_off, nx, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "y", y, y_off, nx, F32, "mean", mean, mean_off, g->c, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "y", y, y_off, nx, F32, "var", var, var_off, g->c, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "y", y, y_off, nx, F32, "gamma", gamma, gamma_off, g->c, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "y", y, y_off, nx, F32, "beta", beta, beta_off, g->c, F32, 0));
  dpt_bn_args args = {.g = *g,
                      .relu = relu,
                      .x = dpt_op_ref(x, x_off),
                      .mean = dpt_op_ref(mean, mean_off),
                      .var = dpt_op_ref(var, var_off),
                      .gamma = dpt_op_ref(gamma, gamma_off),
                      .beta = dpt_op_ref(beta, beta_off),
                      .y = dpt_op_ref(y, y_off)};
  return DPT_BE_CALL(be, (relu ? be->vt->bn_relu_fwd : be->vt->bn_fwd)(be, &args));
}

dpt_status dpt_bn_fwd(dpt_backend *be, const dpt_bn_geom *g, const dpt_buffer *x, size_t x_off,
                      const dpt_buffer *mean, size_t mean_off, const dpt_buffer *var,
                      size_t var_off, const dpt_buffer *gamma, size_t gamma_off,
                      const dpt_buffer *beta, size_t beta_off, dpt_buffer *y, size_t y_off) {
  return bn_forward(be, 0, g, x, x_off, mean, mean_off, var, var_off, gamma, gamma_off, beta,
                    beta_off, y, y_off);
}

dpt_status dpt_bn_relu_fwd(dpt_backend *be, const dpt_bn_geom *g, const dpt_buffer *x, size_t x_off,
                           const dpt_buffer *mean, size_t mean_off, const dpt_buffer *var,
                           size_t var_off, const dpt_buffer *gamma, size_t gamma_off,
                           const dpt_buffer *beta, size_t beta_off, dpt_buffer *y, size_t y_off) {
  return bn_forward(be, 1, g, x, x_off, mean, mean_off, var, var_off, gamma, gamma_off, beta,
                    beta_off, y, y_off);
}

/* A named tensor argument, for the alias checks of the backward ops. */
typedef struct bn_operand {
  const char *name;
  const dpt_buffer *buf;
  size_t off, count;
} bn_operand;

/* dy, x [n, c, p] and mean, var [c]: the inputs of both backward ops; with `act` (the fused
 * ReLU's output, [n, c, p]) for their bn_relu forms. */
static dpt_status bn_bwd_inputs(dpt_op_check *ck, const dpt_bn_geom *g, size_t *nx,
                                const bn_operand *in) {
  DPT_TRY(bn_geom(ck, g, nx));
  DPT_TRY(dpt_op_tensor(ck, "dy", in[0].buf, in[0].off, *nx, F32));
  DPT_TRY(dpt_op_tensor(ck, "x", in[1].buf, in[1].off, *nx, F32));
  DPT_TRY(bn_vec(ck, "mean", in[2].buf, in[2].off, g->c));
  DPT_TRY(bn_vec(ck, "var", in[3].buf, in[3].off, g->c));
  return in[4].name ? dpt_op_tensor(ck, "y", in[4].buf, in[4].off, *nx, F32) : DPT_OK;
}

/* Output `name` overlaps none of the k inputs (those named: a NULL name is an absent one). */
static dpt_status bn_apart(dpt_op_check *ck, const char *name, const dpt_buffer *buf, size_t off,
                           size_t count, const bn_operand *in, int k) {
  for (int i = 0; i < k; ++i)
    if (in[i].name)
      DPT_TRY(dpt_op_alias(ck, name, buf, off, count, F32, in[i].name, in[i].buf, in[i].off,
                           in[i].count, F32, 0));
  return DPT_OK;
}

/* bn_bwd_reduce and bn_relu_bwd_reduce (act non-NULL). */
static dpt_status bn_bwd_reduce_call(dpt_backend *be, const dpt_bn_geom *g, const dpt_buffer *dy,
                                     size_t dy_off, const dpt_buffer *act, size_t act_off,
                                     const dpt_buffer *x, size_t x_off, const dpt_buffer *mean,
                                     size_t mean_off, const dpt_buffer *var, size_t var_off,
                                     dpt_buffer *sum_dy_xhat, size_t sum_dy_xhat_off,
                                     dpt_buffer *sum_dy, size_t sum_dy_off) {
  dpt_op_check ck;
  size_t nx = 0;
  const int relu = act != NULL;
  const char *fn = relu ? "dpt_bn_relu_bwd_reduce" : "dpt_bn_bwd_reduce";
  DPT_TRY(
      dpt_op_begin(&ck, fn, be, be && (relu ? be->vt->bn_relu_bwd_reduce : be->vt->bn_bwd_reduce)));
  bn_operand in[5] = {{"dy", dy, dy_off, 0},
                      {"x", x, x_off, 0},
                      {"mean", mean, mean_off, 0},
                      {"var", var, var_off, 0},
                      {relu ? "y" : NULL, act, act_off, 0}};
  DPT_TRY(bn_bwd_inputs(&ck, g, &nx, in));
  in[0].count = in[1].count = in[4].count = nx;
  in[2].count = in[3].count = g->c;
  DPT_TRY(bn_vec(&ck, "sum_dy_xhat", sum_dy_xhat, sum_dy_xhat_off, g->c));
  DPT_TRY(bn_vec(&ck, "sum_dy", sum_dy, sum_dy_off, g->c));
  DPT_TRY(bn_apart(&ck, "sum_dy_xhat", sum_dy_xhat, sum_dy_xhat_off, g->c, in, 5));
  DPT_TRY(bn_apart(&ck, "sum_dy", sum_dy, sum_dy_off, g->c, in, 5));
  DPT_TRY(dpt_op_alias(&ck, "sum_dy", sum_dy, sum_dy_off, g->c, F32, "sum_dy_xhat", sum_dy_xhat,
                       sum_dy_xhat_off, g->c, F32, 0));
  dpt_bn_args args = {.g = *g,
                      .relu = relu,
                      .x = dpt_op_ref(x, x_off),
                      .mean = dpt_op_ref(mean, mean_off),
                      .var = dpt_op_ref(var, var_off),
                      .dy = dpt_op_ref(dy, dy_off),
                      .act = relu ? dpt_op_ref(act, act_off) : dpt_op_ref(dy, dy_off),
                      .sum_dy_xhat = dpt_op_ref(sum_dy_xhat, sum_dy_xhat_off),
                      .sum_dy = dpt_op_ref(sum_dy, sum_dy_off)};
  return DPT_BE_CALL(be, (relu ? be->vt->bn_relu_bwd_reduce : be->vt->bn_bwd_reduce)(be, &args));
}

dpt_status dpt_bn_bwd_reduce(dpt_backend *be, const dpt_bn_geom *g, const dpt_buffer *dy,
                             size_t dy_off, const dpt_buffer *x, size_t x_off,
                             const dpt_buffer *mean, size_t mean_off, const dpt_buffer *var,
                             size_t var_off, dpt_buffer *sum_dy_xhat, size_t sum_dy_xhat_off,
                             dpt_buffer *sum_dy, size_t sum_dy_off) {
  return bn_bwd_reduce_call(be, g, dy, dy_off, NULL, 0, x, x_off, mean, mean_off, var, var_off,
                            sum_dy_xhat, sum_dy_xhat_off, sum_dy, sum_dy_off);
}

dpt_status dpt_bn_relu_bwd_reduce(dpt_backend *be, const dpt_bn_geom *g, const dpt_buffer *dy,
                                  size_t dy_off, const dpt_buffer *y, size_t y_off,
                                  const dpt_buffer *x, size_t x_off, const dpt_buffer *mean,
                                  size_t mean_off, const dpt_buffer *var, size_t var_off,
                                  dpt_buffer *sum_dy_xhat, size_t sum_dy_xhat_off,
                                  dpt_buffer *sum_dy, size_t sum_dy_off) {
  if (!y) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_bn_relu_bwd_reduce: y is NULL");
  return bn_bwd_reduce_call(be, g, dy, dy_off, y, y_off, x, x_off, mean, mean_off, var, var_off,
                            sum_dy_xhat, sum_dy_xhat_off, sum_dy, sum_dy_off);
}

/* The per-channel operands of bn_bwd. */
typedef struct bn_bwd_vecs {
  const dpt_buffer *mean, *var, *gamma, *sum_dy_xhat, *sum_dy;
  size_t mean_off, var_off, gamma_off, sum_dy_xhat_off, sum_dy_off;
} bn_bwd_vecs;

/* bn_bwd and bn_relu_bwd (act non-NULL). */
static dpt_status bn_bwd_call(dpt_backend *be, const dpt_bn_geom *g, size_t count,
                              const dpt_buffer *dy, size_t dy_off, const dpt_buffer *act,
                              size_t act_off, const dpt_buffer *x, size_t x_off,
                              const bn_bwd_vecs *v, dpt_buffer *dx, size_t dx_off) {
  dpt_op_check ck;
  size_t nx = 0;
  const int relu = act != NULL;
  DPT_TRY(dpt_op_begin(&ck, relu ? "dpt_bn_relu_bwd" : "dpt_bn_bwd", be,
                       be && (relu ? be->vt->bn_relu_bwd : be->vt->bn_bwd)));
  bn_operand in[8] = {{"dy", dy, dy_off, 0},
                      {"x", x, x_off, 0},
                      {"mean", v->mean, v->mean_off, 0},
                      {"var", v->var, v->var_off, 0},
                      {relu ? "y" : NULL, act, act_off, 0},
                      {"gamma", v->gamma, v->gamma_off, 0},
                      {"sum_dy_xhat", v->sum_dy_xhat, v->sum_dy_xhat_off, 0},
                      {"sum_dy", v->sum_dy, v->sum_dy_off, 0}};
  DPT_TRY(bn_bwd_inputs(&ck, g, &nx, in));
  if (count == 0) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: count is 0", ck.fn);
  in[0].count = in[1].count = in[4].count = nx;
  in[2].count = in[3].count = in[5].count = in[6].count = in[7].count = g->c;
  DPT_TRY(bn_vec(&ck, "gamma", v->gamma, v->gamma_off, g->c));
  DPT_TRY(bn_vec(&ck, "sum_dy_xhat", v->sum_dy_xhat, v->sum_dy_xhat_off, g->c));
  DPT_TRY(bn_vec(&ck, "sum_dy", v->sum_dy, v->sum_dy_off, g->c));
  DPT_TRY(dpt_op_tensor(&ck, "dx", dx, dx_off, nx, F32));
  DPT_TRY(bn_apart(&ck, "dx", dx, dx_off, nx, in, 8));
  dpt_bn_args args = {.g = *g,
                      .count = count,
                      .relu = relu,
                      .x = dpt_op_ref(x, x_off),
                      .mean = dpt_op_ref(v->mean, v->mean_off),
                      .var = dpt_op_ref(v->var, v->var_off),
                      .gamma = dpt_op_ref(v->gamma, v->gamma_off),
                      .dy = dpt_op_ref(dy, dy_off),
                      .act = relu ? dpt_op_ref(act, act_off) : dpt_op_ref(dy, dy_off),
                      .sum_dy_xhat = dpt_op_ref(v->sum_dy_xhat, v->sum_dy_xhat_off),
                      .sum_dy = dpt_op_ref(v->sum_dy, v->sum_dy_off),
                      .dx = dpt_op_ref(dx, dx_off)};
  return DPT_BE_CALL(be, (relu ? be->vt->bn_relu_bwd : be->vt->bn_bwd)(be, &args));
}

dpt_status dpt_bn_bwd(dpt_backend *be, const dpt_bn_geom *g, size_t count, const dpt_buffer *dy,
                      size_t dy_off, const dpt_buffer *x, size_t x_off, const dpt_buffer *mean,
                      size_t mean_off, const dpt_buffer *var, size_t var_off,
                      const dpt_buffer *gamma, size_t gamma_off, const dpt_buffer *sum_dy_xhat,
                      size_t sum_dy_xhat_off, const dpt_buffer *sum_dy, size_t sum_dy_off,
                      dpt_buffer *dx, size_t dx_off) {
  const bn_bwd_vecs v = {mean,     var,     gamma,     sum_dy_xhat,     sum_dy,
                         mean_off, var_off, gamma_off, sum_dy_xhat_off, sum_dy_off};
  return bn_bwd_call(be, g, count, dy, dy_off, NULL, 0, x, x_off, &v, dx, dx_off);
}

dpt_status dpt_bn_relu_bwd(dpt_backend *be, const dpt_bn_geom *g, size_t count,
                           const dpt_buffer *dy, size_t dy_off, const dpt_buffer *y, size_t y_off,
                           const dpt_buffer *x, size_t x_off, const dpt_buffer *mean,
                           size_t mean_off, const dpt_buffer *var, size_t var_off,
                           const dpt_buffer *gamma, size_t gamma_off, const dpt_buffer *sum_dy_xhat,
                           size_t sum_dy_xhat_off, const dpt_buffer *sum_dy, size_t sum_dy_off,
                           dpt_buffer *dx, size_t dx_off) {
  if (!y) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_bn_relu_bwd: y is NULL");
  const bn_bwd_vecs v = {mean,     var,     gamma,     sum_dy_xhat,     sum_dy,
                         mean_off, var_off, gamma_off, sum_dy_xhat_off, sum_dy_off};
  return bn_bwd_call(be, g, count, dy, dy_off, y, y_off, x, x_off, &v, dx, dx_off);
}

/* ---- average pooling ---------------------------------------------------------------------- */

dpt_status dpt_avgpool_fwd(dpt_backend *be, const dpt_pool_geom *g, const dpt_buffer *x,
                           size_t x_off, dpt_buffer *y, size_t y_off) {
  dpt_op_check ck;
  size_t oh = 0, ow = 0, nx = 0, ny = 0;
  DPT_TRY(dpt_op_begin(&ck, "dpt_avgpool_fwd", be, be && be->vt->avgpool_fwd));
  DPT_TRY(dpt_op_pool_sizes(&ck, g, &oh, &ow, &nx, &ny));
  DPT_TRY(dpt_op_tensor(&ck, "x", x, x_off, nx, F32));
  DPT_TRY(dpt_op_tensor(&ck, "y", y, y_off, ny, F32));
  DPT_TRY(dpt_op_alias(&ck, "y", y, y_off, ny, F32, "x", x, x_off, nx, F32, 0));
  if (ny == 0) return DPT_OK;
  dpt_avgpool_args args = {*g, oh, ow, dpt_op_ref(x, x_off), dpt_op_ref(y, y_off)};
  return DPT_BE_CALL(be, be->vt->avgpool_fwd(be, &args));
}

dpt_status dpt_avgpool_bwd(dpt_backend *be, const dpt_pool_geom *g, const dpt_buffer *dy,
                           size_t dy_off, dpt_buffer *dx, size_t dx_off) {
  dpt_op_check ck;
  size_t oh = 0, ow = 0, nx = 0, ny = 0;
  DPT_TRY(dpt_op_begin(&ck, "dpt_avgpool_bwd", be, be && be->vt->avgpool_bwd));
  DPT_TRY(dpt_op_pool_sizes(&ck, g, &oh, &ow, &nx, &ny));
  DPT_TRY(dpt_op_tensor(&ck, "dy", dy, dy_off, ny, F32));
  DPT_TRY(dpt_op_tensor(&ck, "dx", dx, dx_off, nx, F32));
  DPT_TRY(dpt_op_alias(&ck, "dx", dx, dx_off, nx, F32, "dy", dy, dy_off, ny, F32, 0));
  if (nx == 0) return DPT_OK;
  dpt_avgpool_args args = {*g, oh, ow, dpt_op_ref(dy, dy_off), dpt_op_ref(dx, dx_off)};
  return DPT_BE_CALL(be, be->vt->avgpool_bwd(be, &args));
}

/* ---- dropout ------------------------------------------------------------------------------- */

static uint32_t dropout_key(const dpt_dropout_params *p) {
  uint32_t h = dpt_mix32((uint32_t)p->seed ^ 0x9e3779b9U);
  h = dpt_mix32(h ^ (uint32_t)(p->seed >> 32));
  h = dpt_mix32(h ^ (uint32_t)p->step);
  return dpt_mix32(h ^ (uint32_t)(p->step >> 32));
}

static uint32_t dropout_threshold(float p) {
  return (uint32_t)llround((double)p * 16777216.0);
}

int dpt_dropout_keep(const dpt_dropout_params *p, uint32_t row, uint32_t col) {
  if (!p) return 0;
  uint32_t h = dpt_mix32(dpt_mix32(dropout_key(p) ^ row) ^ col);
  return (h >> 8) >= dropout_threshold(p->p);
}

dpt_status dpt_dropout(dpt_backend *be, size_t rows, size_t cols, const dpt_dropout_params *p,
                       const dpt_buffer *x, size_t x_off, dpt_buffer *y, size_t y_off) {
  dpt_op_check ck;
  size_t n;
  DPT_TRY(dpt_op_begin(&ck, "dpt_dropout", be, be && be->vt->dropout));
  if (!p) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_dropout: params is NULL");
  if (!(p->p >= 0.0f && p->p < 1.0f))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_dropout: p %g is not in [0, 1)", (double)p->p);
  if (cols > UINT32_MAX || rows > (size_t)UINT32_MAX - p->first_row)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "dpt_dropout: rows %zu from row %u or cols %zu exceed 32-bit indices",
                         rows, (unsigned)p->first_row, cols);
  DPT_TRY(dpt_op_elems2(&ck, "x", rows, cols, &n));
  DPT_TRY(dpt_op_tensor(&ck, "x", x, x_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "y", y, y_off, n, F32));
  DPT_TRY(dpt_op_alias(&ck, "y", y, y_off, n, F32, "x", x, x_off, n, F32, 1));
  if (n == 0) return DPT_OK;
  dpt_dropout_args args = {rows,
                           cols,
                           dropout_key(p),
                           dropout_threshold(p->p),
                           p->first_row,
                           (float)(1.0 / (1.0 - (double)p->p)),
                           dpt_op_ref(x, x_off),
                           dpt_op_ref(y, y_off)};
  return DPT_BE_CALL(be, be->vt->dropout(be, &args));
}

/* ---- layer normalization ------------------------------------------------------------------- */

typedef struct ln_tensor {
  const char *name;
  const dpt_buffer *buf;
  size_t off, count;
} ln_tensor;

/* Every tensor of t[nt] fits its buffer; the outputs t[first_out..] overlap no input and no
 * other output. */
static dpt_status ln_check(dpt_op_check *c, const ln_tensor *t, int nt, int first_out) {
  for (int i = 0; i < nt; ++i)
    DPT_TRY(dpt_op_tensor(c, t[i].name, t[i].buf, t[i].off, t[i].count, F32));
  for (int o = first_out; o < nt; ++o)
    for (int i = 0; i < nt; ++i)
      if (i != o && (i < first_out || i < o))
        DPT_TRY(dpt_op_alias(c, t[o].name, t[o].buf, t[o].off, t[o].count, F32, t[i].name, t[i].buf,
                             t[i].off, t[i].count, F32, 0));
  return DPT_OK;
}

/* The geometry: *nx receives rows*cols. */
static dpt_status ln_geom(dpt_op_check *c, const dpt_ln_geom *g, size_t *nx) {
  if (!g) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: geometry is NULL", c->fn);
  if (g->rows == 0 || g->cols == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: rows x cols = %zu x %zu has a zero", c->fn,
                         g->rows, g->cols);
  if (!(g->eps > 0.0f) || !isfinite(g->eps))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: eps %g must be positive", c->fn, (double)g->eps);
  return dpt_op_elems2(c, "x", g->rows, g->cols, nx);
}

dpt_status dpt_layernorm_fwd(dpt_backend *be, const dpt_ln_geom *g, const dpt_buffer *x,
                             size_t x_off, const dpt_buffer *gamma, size_t gamma_off,
                             const dpt_buffer *beta, size_t beta_off, dpt_buffer *y, size_t y_off,
                             dpt_buffer *mean, size_t mean_off, dpt_buffer *rstd, size_t rstd_off) {
  dpt_op_check ck;
  size_t nx;
  DPT_TRY(dpt_op_begin(&ck, "dpt_layernorm_fwd", be, be && be->vt->layernorm_fwd));
  DPT_TRY(ln_geom(&ck, g, &nx));
  const ln_tensor t[6] = {
      {"x", x, x_off, nx}, {"gamma", gamma, gamma_off, g->cols}, {"beta", beta, beta_off, g->cols},
      {"y", y, y_off, nx}, {"mean", mean, mean_off, g->rows},    {"rstd", rstd, rstd_off, g->rows}};
  DPT_TRY(ln_check(&ck, t, 6, 3));
  dpt_layernorm_args args = {.g = *g,
                             .x = dpt_op_ref(x, x_off),
                             .gamma = dpt_op_ref(gamma, gamma_off),
                             .beta = dpt_op_ref(beta, beta_off),
                             .y = dpt_op_ref(y, y_off),
                             .mean = dpt_op_ref(mean, mean_off),
                             .rstd = dpt_op_ref(rstd, rstd_off)};
  return DPT_BE_CALL(be, be->vt->layernorm_fwd(be, &args));
}

dpt_status dpt_layernorm_bwd(dpt_backend *be, const dpt_ln_geom *g, const dpt_buffer *dy,
                             size_t dy_off, const dpt_buffer *x, size_t x_off,
                             const dpt_buffer *mean, size_t mean_off, const dpt_buffer *rstd,
                             size_t rstd_off, const dpt_buffer *gamma, size_t gamma_off,
                             dpt_buffer *dx, size_t dx_off) {
  dpt_op_check ck;
  size_t nx;
  DPT_TRY(dpt_op_begin(&ck, "dpt_layernorm_bwd", be, be && be->vt->layernorm_bwd));
  DPT_TRY(ln_geom(&ck, g, &nx));
  const ln_tensor t[6] = {{"dy", dy, dy_off, nx},
                          {"x", x, x_off, nx},
                          {"mean", mean, mean_off, g->rows},
                          {"rstd", rstd, rstd_off, g->rows},
                          {"gamma", gamma, gamma_off, g->cols},
                          {"dx", dx, dx_off, nx}};
  DPT_TRY(ln_check(&ck, t, 6, 5));
  dpt_layernorm_args args = {.g = *g,
                             .dy = dpt_op_ref(dy, dy_off),
                             .x = dpt_op_ref(x, x_off),
                             .mean = dpt_op_ref(mean, mean_off),
                             .rstd = dpt_op_ref(rstd, rstd_off),
                             .gamma = dpt_op_ref(gamma, gamma_off),
                             .dx = dpt_op_ref(dx, dx_off)};
  return DPT_BE_CALL(be, be->vt->layernorm_bwd(be, &args));
}

dpt_status dpt_layernorm_bwd_params(dpt_backend *be, const dpt_ln_geom *g, const dpt_buffer *dy,
                                    size_t dy_off, const dpt_buffer *x, size_t x_off,
                                    const dpt_buffer *mean, size_t mean_off, const dpt_buffer *rstd,
                                    size_t rstd_off, dpt_buffer *dgamma, size_t dgamma_off,
                                    dpt_buffer *dbeta, size_t dbeta_off) {
  dpt_op_check ck;
  size_t nx;
  DPT_TRY(dpt_op_begin(&ck, "dpt_layernorm_bwd_params", be, be && be->vt->layernorm_bwd_params));
  DPT_TRY(ln_geom(&ck, g, &nx));
  const ln_tensor t[6] = {{"dy", dy, dy_off, nx},
                          {"x", x, x_off, nx},
                          {"mean", mean, mean_off, g->rows},
                          {"rstd", rstd, rstd_off, g->rows},
                          {"dgamma", dgamma, dgamma_off, g->cols},
                          {"dbeta", dbeta, dbeta_off, g->cols}};
  DPT_TRY(ln_check(&ck, t, 6, 4));
  dpt_layernorm_args args = {.g = *g,
                             .dy = dpt_op_ref(dy, dy_off),
                             .x = dpt_op_ref(x, x_off),
                             .mean = dpt_op_ref(mean, mean_off),
                             .rstd = dpt_op_ref(rstd, rstd_off),
                             .dgamma = dpt_op_ref(dgamma, dgamma_off),
                             .dbeta = dpt_op_ref(dbeta, dbeta_off)};
  return DPT_BE_CALL(be, be->vt->layernorm_bwd_params(be, &args));
}

/* ---- GELU ---------------------------------------------------------------------------------- */

static dpt_status gelu_approx(dpt_op_check *c, dpt_gelu_approx a) {
  if (a != DPT_GELU_ERF && a != DPT_GELU_TANH)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: approx %d is neither erf (0) nor tanh (1)",
                         c->fn, (int)a);
  return DPT_OK;
}

dpt_status dpt_gelu_fwd(dpt_backend *be, size_t n, dpt_gelu_approx approx, const dpt_buffer *x,
                        size_t x_off, dpt_buffer *y, size_t y_off) {
  dpt_op_check ck;
  DPT_TRY(dpt_op_begin(&ck, "dpt_gelu_fwd", be, be && be->vt->gelu_fwd));
  DPT_TRY(gelu_approx(&ck, approx));
  DPT_TRY(dpt_op_tensor(&ck, "x", x, x_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "y", y, y_off, n, F32));
  DPT_TRY(dpt_op_alias(&ck, "y", y, y_off, n, F32, "x", x, x_off, n, F32, 1));
  if (n == 0) return DPT_OK;
  dpt_gelu_args args = {
      .n = n, .approx = approx, .x = dpt_op_ref(x, x_off), .y = dpt_op_ref(y, y_off)};
  return DPT_BE_CALL(be, be->vt->gelu_fwd(be, &args));
}

dpt_status dpt_gelu_bwd(dpt_backend *be, size_t n, dpt_gelu_approx approx, const dpt_buffer *x,
                        size_t x_off, const dpt_buffer *dy, size_t dy_off, dpt_buffer *dx,
                        size_t dx_off) {
  dpt_op_check ck;
  DPT_TRY(dpt_op_begin(&ck, "dpt_gelu_bwd", be, be && be->vt->gelu_bwd));
  DPT_TRY(gelu_approx(&ck, approx));
  DPT_TRY(dpt_op_tensor(&ck, "x", x, x_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "dy", dy, dy_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "dx", dx, dx_off, n, F32));
  DPT_TRY(dpt_op_alias(&ck, "dx", dx, dx_off, n, F32, "x", x, x_off, n, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "dx", dx, dx_off, n, F32, "dy", dy, dy_off, n, F32, 1));
  if (n == 0) return DPT_OK;
  dpt_gelu_args args = {.n = n,
                        .approx = approx,
                        .x = dpt_op_ref(x, x_off),
                        .dy = dpt_op_ref(dy, dy_off),
                        .y = dpt_op_ref(dx, dx_off)};
  return DPT_BE_CALL(be, be->vt->gelu_bwd(be, &args));
}

/* ---- bias and GELU, fused ------------------------------------------------------------------ */

dpt_status dpt_bias_gelu_fwd(dpt_backend *be, size_t rows, size_t cols, dpt_gelu_approx approx,
                             dpt_buffer *x, size_t x_off, const dpt_buffer *bias, size_t bias_off,
                             dpt_buffer *y, size_t y_off) {
  dpt_op_check ck;
  size_t n = 0;
  DPT_TRY(dpt_op_begin(&ck, "dpt_bias_gelu_fwd", be, be && be->vt->bias_gelu_fwd));
  DPT_TRY(gelu_approx(&ck, approx));
  DPT_TRY(dpt_op_elems2(&ck, "x", rows, cols, &n));
  DPT_TRY(dpt_op_tensor(&ck, "x", x, x_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "bias", bias, bias_off, cols, F32));
  DPT_TRY(dpt_op_tensor(&ck, "y", y, y_off, n, F32));
  DPT_TRY(dpt_op_alias(&ck, "x", x, x_off, n, F32, "bias", bias, bias_off, cols, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "y", y, y_off, n, F32, "x", x, x_off, n, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "y", y, y_off, n, F32, "bias", bias, bias_off, cols, F32, 0));
  if (n == 0) return DPT_OK;
  dpt_bias_gelu_args args = {.rows = rows,
                             .cols = cols,
                             .approx = approx,
                             .x = dpt_op_ref(x, x_off),
                             .bias = dpt_op_ref(bias, bias_off),
                             .y = dpt_op_ref(y, y_off)};
  return DPT_BE_CALL(be, be->vt->bias_gelu_fwd(be, &args));
}

/* Checks bias_gelu_bwd's tensors: x, dy, dx [rows, cols] (dx may be dy), db [cols]. */
static dpt_status bias_gelu_bwd_check(dpt_op_check *ck, size_t n, size_t cols,
                                      const dpt_bias_gelu_args *a) {
  DPT_TRY(dpt_op_tensor(ck, "x", a->x.buf, a->x.off, n, F32));
  DPT_TRY(dpt_op_tensor(ck, "dy", a->dy.buf, a->dy.off, n, F32));
  DPT_TRY(dpt_op_tensor(ck, "dx", a->dx.buf, a->dx.off, n, F32));
  DPT_TRY(dpt_op_tensor(ck, "db", a->db.buf, a->db.off, cols, F32));
  DPT_TRY(dpt_op_alias(ck, "dx", a->dx.buf, a->dx.off, n, F32, "x", a->x.buf, a->x.off, n, F32, 0));
  DPT_TRY(
      dpt_op_alias(ck, "dx", a->dx.buf, a->dx.off, n, F32, "dy", a->dy.buf, a->dy.off, n, F32, 1));
  DPT_TRY(
      dpt_op_alias(ck, "db", a->db.buf, a->db.off, cols, F32, "x", a->x.buf, a->x.off, n, F32, 0));
  DPT_TRY(dpt_op_alias(ck, "db", a->db.buf, a->db.off, cols, F32, "dy", a->dy.buf, a->dy.off, n,
                       F32, 0));
  return dpt_op_alias(ck, "db", a->db.buf, a->db.off, cols, F32, "dx", a->dx.buf, a->dx.off, n, F32,
                      0);
}

dpt_status dpt_bias_gelu_bwd(dpt_backend *be, size_t rows, size_t cols, dpt_gelu_approx approx,
                             const dpt_buffer *x, size_t x_off, const dpt_buffer *dy, size_t dy_off,
                             dpt_buffer *dx, size_t dx_off, float beta, dpt_buffer *db,
                             size_t db_off) {
  dpt_op_check ck;
  size_t n = 0;
  DPT_TRY(dpt_op_begin(&ck, "dpt_bias_gelu_bwd", be, be && be->vt->bias_gelu_bwd));
  DPT_TRY(gelu_approx(&ck, approx));
  DPT_TRY(dpt_op_elems2(&ck, "x", rows, cols, &n));
  dpt_bias_gelu_args args = {.rows = rows,
                             .cols = cols,
                             .approx = approx,
                             .beta = beta,
                             .x = dpt_op_ref(x, x_off),
                             .dy = dpt_op_ref(dy, dy_off),
                             .dx = dpt_op_ref(dx, dx_off),
                             .db = dpt_op_ref(db, db_off)};
  DPT_TRY(bias_gelu_bwd_check(&ck, n, cols, &args));
  if (cols == 0) return DPT_OK;
  return DPT_BE_CALL(be, be->vt->bias_gelu_bwd(be, &args));
}

/* ---- attention's softmax ------------------------------------------------------------------- */

dpt_status dpt_attn_softmax(dpt_backend *be, const dpt_attn_geom *g, float scale,
                            const dpt_buffer *ids, size_t ids_off, int32_t pad_id,
                            const dpt_buffer *scores, size_t scores_off, dpt_buffer *probs,
                            size_t probs_off) {
  dpt_op_check ck;
  DPT_TRY(dpt_op_begin(&ck, "dpt_attn_softmax", be, be && be->vt->attn_softmax));
  if (!g) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: geometry is NULL", ck.fn);
  if (!isfinite(scale))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: scale %g is not finite", ck.fn, (double)scale);
  size_t rows = 0, n = 0, nid = 0;
  DPT_TRY(dpt_op_elems2(&ck, "scores", g->heads, g->n, &rows));
  DPT_TRY(dpt_op_elems2(&ck, "scores", rows, g->q, &rows));
  DPT_TRY(dpt_op_elems2(&ck, "scores", rows, g->k, &n));
  DPT_TRY(dpt_op_elems2(&ck, "ids", g->n, g->k, &nid));
  if (n > 0 && g->k == 0) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: rows of 0 keys", ck.fn);
  DPT_TRY(dpt_op_tensor(&ck, "scores", scores, scores_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "probs", probs, probs_off, n, F32));
  DPT_TRY(dpt_op_alias(&ck, "probs", probs, probs_off, n, F32, "scores", scores, scores_off, n, F32,
                       1));
  if (ids) {
    DPT_TRY(dpt_op_tensor(&ck, "ids", ids, ids_off, nid, I32));
    DPT_TRY(dpt_op_alias(&ck, "probs", probs, probs_off, n, F32, "ids", ids, ids_off, nid, I32, 0));
  }
  if (n == 0) return DPT_OK;
  dpt_attn_softmax_args args = {.g = *g,
                                .scale = scale,
                                .has_ids = ids != NULL,
                                .pad_id = pad_id,
                                .ids = ids ? dpt_op_ref(ids, ids_off) : dpt_op_ref(scores, 0),
                                .scores = dpt_op_ref(scores, scores_off),
                                .probs = dpt_op_ref(probs, probs_off)};
  return DPT_BE_CALL(be, be->vt->attn_softmax(be, &args));
}

dpt_status dpt_softmax_bwd(dpt_backend *be, size_t rows, size_t cols, const dpt_buffer *y,
                           size_t y_off, const dpt_buffer *dy, size_t dy_off, dpt_buffer *dx,
                           size_t dx_off) {
  dpt_op_check ck;
  size_t n = 0;
  DPT_TRY(dpt_op_begin(&ck, "dpt_softmax_bwd", be, be && be->vt->softmax_bwd));
  DPT_TRY(dpt_op_elems2(&ck, "y", rows, cols, &n));
  DPT_TRY(dpt_op_tensor(&ck, "y", y, y_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "dy", dy, dy_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "dx", dx, dx_off, n, F32));
  DPT_TRY(dpt_op_alias(&ck, "dx", dx, dx_off, n, F32, "y", y, y_off, n, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "dx", dx, dx_off, n, F32, "dy", dy, dy_off, n, F32, 1));
  if (n == 0) return DPT_OK;
  dpt_softmax_bwd_args args = {rows, cols, dpt_op_ref(y, y_off), dpt_op_ref(dy, dy_off),
                               dpt_op_ref(dx, dx_off)};
  return DPT_BE_CALL(be, be->vt->softmax_bwd(be, &args));
}

/* ---- attention's probabilities, fused ------------------------------------------------------ */

/* The fused forward's checks: geometry, scale, dropout, tensors and their overlaps. */
static dpt_status attn_probs_check(dpt_op_check *c, const dpt_attn_geom *g, float scale,
                                   const dpt_buffer *ids, size_t ids_off,
                                   const dpt_dropout_params *drop, const dpt_buffer *probs,
                                   size_t probs_off, const dpt_buffer *dropped, size_t dropped_off,
                                   size_t *n) {
  if (!g) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: geometry is NULL", c->fn);
  if (!isfinite(scale))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: scale %g is not finite", c->fn, (double)scale);
  if (drop && !(drop->p >= 0.0f && drop->p < 1.0f))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: p %g is not in [0, 1)", c->fn, (double)drop->p);
  size_t rows = 0, qk = 0, nid = 0;
  DPT_TRY(dpt_op_elems2(c, "probs", g->heads, g->n, &rows));
  DPT_TRY(dpt_op_elems2(c, "probs", rows, g->q, &rows));
  DPT_TRY(dpt_op_elems2(c, "probs", rows, g->k, n));
  DPT_TRY(dpt_op_elems2(c, "ids", g->n, g->k, &nid));
  DPT_TRY(dpt_op_elems2(c, "probs", g->q, g->k, &qk));
  if (*n > 0 && g->k == 0) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: rows of 0 keys", c->fn);
  if (drop && (qk > UINT32_MAX || g->n > (size_t)UINT32_MAX - drop->first_row))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: %zu samples from row %u or %zu columns exceed "
                         "32-bit indices",
                         c->fn, g->n, (unsigned)drop->first_row, qk);
  DPT_TRY(dpt_op_tensor(c, "probs", probs, probs_off, *n, F32));
  if (ids) {
    DPT_TRY(dpt_op_tensor(c, "ids", ids, ids_off, nid, I32));
    DPT_TRY(dpt_op_alias(c, "probs", probs, probs_off, *n, F32, "ids", ids, ids_off, nid, I32, 0));
  }
  if (!drop || drop->p == 0.0f) return DPT_OK;
  DPT_TRY(dpt_op_tensor(c, "dropped", dropped, dropped_off, *n, F32));
  DPT_TRY(dpt_op_alias(c, "dropped", dropped, dropped_off, *n, F32, "probs", probs, probs_off, *n,
                       F32, 0));
  if (ids)
    DPT_TRY(dpt_op_alias(c, "dropped", dropped, dropped_off, *n, F32, "ids", ids, ids_off, nid, I32,
                         0));
  return DPT_OK;
}

dpt_status dpt_attn_probs_fwd(dpt_backend *be, const dpt_attn_geom *g, float scale,
                              const dpt_buffer *ids, size_t ids_off, int32_t pad_id,
                              const dpt_dropout_params *drop, dpt_buffer *probs, size_t probs_off,
                              dpt_buffer *dropped, size_t dropped_off) {
  dpt_op_check ck;
  size_t n = 0;
  DPT_TRY(dpt_op_begin(&ck, "dpt_attn_probs_fwd", be, be && be->vt->attn_probs_fwd));
  DPT_TRY(attn_probs_check(&ck, g, scale, ids, ids_off, drop, probs, probs_off, dropped,
                           dropped_off, &n));
  if (n == 0) return DPT_OK;
  const int has_drop = drop && drop->p > 0.0f;
  const size_t per_head = g->n * g->q * g->k;
  dpt_attn_probs_fwd_args a = {.sm = {.g = {g->n, 1, g->q, g->k},
                                      .scale = scale,
                                      .has_ids = ids != NULL,
                                      .pad_id = pad_id,
                                      .ids = ids ? dpt_op_ref(ids, ids_off) : dpt_op_ref(probs, 0)},
                               .has_drop = has_drop};
  if (has_drop) {
    a.threshold = dropout_threshold(drop->p);
    a.first_row = drop->first_row;
    a.drop_scale = (float)(1.0 / (1.0 - (double)drop->p));
  }
  for (size_t h = 0; h < g->heads; ++h) { /* one call per head: each head has its own key */
    a.sm.scores = a.sm.probs = dpt_op_ref(probs, probs_off + h * per_head);
    a.dropped = has_drop ? dpt_op_ref(dropped, dropped_off + h * per_head) : a.sm.probs;
    if (has_drop) {
      dpt_dropout_params hp = *drop;
      hp.seed ^= (uint64_t)(h + 1) * DPT_ATTN_HEAD_SEED_MIX;
      a.key = dropout_key(&hp);
    }
    DPT_TRY(DPT_BE_CALL(be, be->vt->attn_probs_fwd(be, &a)));
  }
  return DPT_OK;
}

dpt_status dpt_attn_probs_bwd(dpt_backend *be, size_t rows, size_t cols, const dpt_buffer *y,
                              size_t y_off, const dpt_buffer *dropped, size_t dropped_off, float p,
                              const dpt_buffer *dy, size_t dy_off, dpt_buffer *dx, size_t dx_off) {
  dpt_op_check ck;
  size_t n = 0;
  DPT_TRY(dpt_op_begin(&ck, "dpt_attn_probs_bwd", be, be && be->vt->attn_probs_bwd));
  if (dropped && !(p >= 0.0f && p < 1.0f))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: p %g is not in [0, 1)", ck.fn, (double)p);
  DPT_TRY(dpt_op_elems2(&ck, "y", rows, cols, &n));
  DPT_TRY(dpt_op_tensor(&ck, "y", y, y_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "dy", dy, dy_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "dx", dx, dx_off, n, F32));
  DPT_TRY(dpt_op_alias(&ck, "dx", dx, dx_off, n, F32, "y", y, y_off, n, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "dx", dx, dx_off, n, F32, "dy", dy, dy_off, n, F32, 1));
  if (dropped) {
    DPT_TRY(dpt_op_tensor(&ck, "dropped", dropped, dropped_off, n, F32));
    DPT_TRY(
        dpt_op_alias(&ck, "dx", dx, dx_off, n, F32, "dropped", dropped, dropped_off, n, F32, 0));
  }
  if (n == 0) return DPT_OK;
  dpt_attn_probs_bwd_args a = {rows,
                               cols,
                               dropped != NULL,
                               dropped ? (float)(1.0 / (1.0 - (double)p)) : 1.0f,
                               dpt_op_ref(y, y_off),
                               dropped ? dpt_op_ref(dropped, dropped_off) : dpt_op_ref(y, y_off),
                               dpt_op_ref(dy, dy_off),
                               dpt_op_ref(dx, dx_off)};
  return DPT_BE_CALL(be, be->vt->attn_probs_bwd(be, &a));
}

/* ---- embedding bags, column gathers, binary cross-entropy ---------------------------------- */

/* The ids of n bags of `bag` slots, `stride` apart: (n - 1) * stride + bag int32 values. */
static dpt_status bag_ids(dpt_op_check *c, size_t n, size_t bag, size_t stride, size_t *count) {
  if (bag == 0) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: bag is 0", c->fn);
  if (stride < bag)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: idx_stride %zu is less than bag %zu", c->fn,
                         stride, bag);
  if (n == 0) {
    *count = 0;
    return DPT_OK;
  }
  DPT_TRY(dpt_op_elems2(c, "idx", n - 1, stride, count));
  if (*count > SIZE_MAX - bag)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: idx size overflows", c->fn);
  *count += bag;
  return DPT_OK;
}

static dpt_status bag_check(dpt_op_check *c, size_t n, size_t bag, size_t vocab, size_t dim,
                            dpt_bag_mode mode, size_t stride, size_t *nid, size_t *nt, size_t *no) {
  if (mode != DPT_BAG_SUM && mode != DPT_BAG_MEAN)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: mode %d is neither sum (0) nor mean (1)", c->fn,
                         (int)mode);
  if (vocab == 0 || vocab > (size_t)INT32_MAX)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: vocab %zu not in 1..2^31-1", c->fn, vocab);
  DPT_TRY(bag_ids(c, n, bag, stride, nid));
  DPT_TRY(dpt_op_elems2(c, "table", vocab, dim, nt));
  return dpt_op_elems2(c, "out", n, dim, no);
}

/* embed_bag (bwd 0: table, idx -> out) and its backward (bwd 1: dout, idx -> dtable): `dense` is
 * the table or dtable, `rows` the out or dout. */
static dpt_status bag_op(const char *fn, int bwd, dpt_backend *be, size_t n, size_t bag,
                         size_t vocab, size_t dim, dpt_bag_mode mode, const dpt_buffer *dense,
                         size_t dense_off, const dpt_buffer *idx, size_t idx_off, size_t idx_stride,
                         const dpt_buffer *rows, size_t rows_off) {
  dpt_op_check ck;
  size_t nid = 0, nt = 0, no = 0;
  DPT_TRY(dpt_op_begin(&ck, fn, be,
                       be && (bwd ? be->vt->embed_bag_bwd != NULL : be->vt->embed_bag != NULL)));
  DPT_TRY(bag_check(&ck, n, bag, vocab, dim, mode, idx_stride, &nid, &nt, &no));
  const char *tn = bwd ? "dtable" : "table", *rn = bwd ? "dout" : "out";
  DPT_TRY(dpt_op_tensor(&ck, tn, dense, dense_off, nt, F32));
  DPT_TRY(dpt_op_tensor(&ck, "idx", idx, idx_off, nid, I32));
  DPT_TRY(dpt_op_tensor(&ck, rn, rows, rows_off, no, F32));
  /* the written tensor against the two read ones */
  const char *wn = bwd ? tn : rn;
  const dpt_buffer *w = bwd ? dense : rows;
  size_t w_off = bwd ? dense_off : rows_off, w_n = bwd ? nt : no;
  DPT_TRY(dpt_op_alias(&ck, wn, w, w_off, w_n, F32, bwd ? rn : tn, bwd ? rows : dense,
                       bwd ? rows_off : dense_off, bwd ? no : nt, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, wn, w, w_off, w_n, F32, "idx", idx, idx_off, nid, I32, 0));
  if (no == 0) return DPT_OK;
  dpt_embed_bag_args args = {.n = n,
                             .bag = bag,
                             .vocab = vocab,
                             .dim = dim,
                             .idx_stride = idx_stride,
                             .mode = mode,
                             .idx = dpt_op_ref(idx, idx_off)};
  if (bwd) {
    args.dout = dpt_op_ref(rows, rows_off);
    args.dtable = dpt_op_ref(dense, dense_off);
    return DPT_BE_CALL(be, be->vt->embed_bag_bwd(be, &args));
  }
  args.table = dpt_op_ref(dense, dense_off);
  args.out = dpt_op_ref(rows, rows_off);
  return DPT_BE_CALL(be, be->vt->embed_bag(be, &args));
}

dpt_status dpt_embed_bag(dpt_backend *be, size_t n, size_t bag, size_t vocab, size_t dim,
                         dpt_bag_mode mode, const dpt_buffer *table, size_t table_off,
                         const dpt_buffer *idx, size_t idx_off, size_t idx_stride, dpt_buffer *out,
                         size_t out_off) {
  return bag_op("dpt_embed_bag", 0, be, n, bag, vocab, dim, mode, table, table_off, idx, idx_off,
                idx_stride, out, out_off);
}

dpt_status dpt_embed_bag_bwd(dpt_backend *be, size_t n, size_t bag, size_t vocab, size_t dim,
                             dpt_bag_mode mode, const dpt_buffer *dout, size_t dout_off,
                             const dpt_buffer *idx, size_t idx_off, size_t idx_stride,
                             dpt_buffer *dtable, size_t dtable_off) {
  return bag_op("dpt_embed_bag_bwd", 1, be, n, bag, vocab, dim, mode, dtable, dtable_off, idx,
                idx_off, idx_stride, dout, dout_off);
}

/* x: rows x ldx; y: (rows - 1) x ldy + cols; map: cols int32. */
static dpt_status cols_check(dpt_op_check *c, size_t rows, size_t cols, size_t ldx, size_t ldy,
                             size_t *nx, size_t *ny) {
  if (ldy < cols)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: ldy %zu is less than cols %zu", c->fn, ldy,
                         cols);
  if (ldx == 0) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: ldx is 0", c->fn);
  DPT_TRY(dpt_op_elems2(c, "x", rows, ldx, nx));
  *ny = 0;
  if (rows == 0 || cols == 0) return DPT_OK;
  DPT_TRY(dpt_op_elems2(c, "y", rows - 1, ldy, ny));
  *ny += cols;
  return DPT_OK;
}

static dpt_status cols_op(const char *fn, int scatter, dpt_backend *be, size_t rows, size_t cols,
                          const dpt_buffer *x, size_t x_off, size_t ldx, const dpt_buffer *map,
                          size_t map_off, const dpt_buffer *y, size_t y_off, size_t ldy) {
  dpt_op_check ck;
  size_t nx = 0, ny = 0;
  DPT_TRY(dpt_op_begin(
      &ck, fn, be,
      be && (scatter ? be->vt->scatter_cols_add != NULL : be->vt->gather_cols != NULL)));
  DPT_TRY(cols_check(&ck, rows, cols, ldx, ldy, &nx, &ny));
  const char *xn = scatter ? "dx" : "x", *yn = scatter ? "dy" : "y";
  DPT_TRY(dpt_op_tensor(&ck, xn, x, x_off, nx, F32));
  DPT_TRY(dpt_op_tensor(&ck, "map", map, map_off, cols, I32));
  DPT_TRY(dpt_op_tensor(&ck, yn, y, y_off, ny, F32));
  DPT_TRY(dpt_op_alias(&ck, xn, x, x_off, nx, F32, yn, y, y_off, ny, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, scatter ? xn : yn, scatter ? x : y, scatter ? x_off : y_off,
                       scatter ? nx : ny, F32, "map", map, map_off, cols, I32, 0));
  if (rows == 0 || cols == 0) return DPT_OK;
  dpt_gather_cols_args args = {
      rows, cols, ldx, ldy, dpt_op_ref(x, x_off), dpt_op_ref(map, map_off), dpt_op_ref(y, y_off)};
  return DPT_BE_CALL(be, scatter ? be->vt->scatter_cols_add(be, &args)
                                 : be->vt->gather_cols(be, &args));
}

dpt_status dpt_gather_cols(dpt_backend *be, size_t rows, size_t cols, const dpt_buffer *x,
                           size_t x_off, size_t ldx, const dpt_buffer *map, size_t map_off,
                           dpt_buffer *y, size_t y_off, size_t ldy) {
  return cols_op("dpt_gather_cols", 0, be, rows, cols, x, x_off, ldx, map, map_off, y, y_off, ldy);
}

dpt_status dpt_scatter_cols_add(dpt_backend *be, size_t rows, size_t cols, const dpt_buffer *dy,
                                size_t dy_off, size_t ldy, const dpt_buffer *map, size_t map_off,
                                dpt_buffer *dx, size_t dx_off, size_t ldx) {
  return cols_op("dpt_scatter_cols_add", 1, be, rows, cols, dx, dx_off, ldx, map, map_off, dy,
                 dy_off, ldy);
}

dpt_status dpt_bce_logits(dpt_backend *be, size_t n, const dpt_buffer *logits, size_t logits_off,
                          const dpt_buffer *labels, size_t labels_off, float scale,
                          dpt_buffer *dlogits, size_t dlogits_off, double *loss_sum,
                          int64_t *correct) {
  dpt_op_check ck;
  DPT_TRY(dpt_op_begin(&ck, "dpt_bce_logits", be, be && be->vt->bce_logits));
  DPT_TRY(dpt_op_tensor(&ck, "logits", logits, logits_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "labels", labels, labels_off, n, I32));
  if (dlogits) {
    DPT_TRY(dpt_op_tensor(&ck, "dlogits", dlogits, dlogits_off, n, F32));
    DPT_TRY(dpt_op_alias(&ck, "dlogits", dlogits, dlogits_off, n, F32, "logits", logits, logits_off,
                         n, F32, 1));
    DPT_TRY(dpt_op_alias(&ck, "dlogits", dlogits, dlogits_off, n, F32, "labels", labels, labels_off,
                         n, I32, 0));
  }
  if (loss_sum) *loss_sum = 0.0;
  if (correct) *correct = 0;
  if (n == 0 || (!dlogits && !loss_sum && !correct)) return DPT_OK;
  dpt_bce_logits_args args = {
      n,      dpt_op_ref(logits, logits_off),   dpt_op_ref(labels, labels_off),
      scale,  dpt_op_ref(dlogits, dlogits_off), loss_sum,
      correct};
  return DPT_BE_CALL(be, be->vt->bce_logits(be, &args));
}
