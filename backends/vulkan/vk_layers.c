/* The layer ops of the vulkan backend: batch normalization, average pooling, dropout, layer
 * normalization, GELU (alone and with a linear layer's bias), attention's softmax and the softmax's
 * backward (alone and fused with dropout), embedding bags, column gathers and binary cross-entropy
 * (include/dptrain/backend.h states what each computes; gemm_batched lives with gemm in vk_ops.c).
 * Each binds its tensors as windows and records its dispatches like the ops of vk_ops.c; a tensor
 * larger than one window or a size beyond 32 bits is DPT_ERR_UNSUPPORTED, except where an op splits
 * its work over several dispatches (dropout, GELU, the softmaxes, column gathers, binary
 * cross-entropy, embedding bags: their samples and the rows of their table). */
#include <string.h>

#include "backends/vulkan/vk_internal.h"
#include "base/error.h"
#include "base/size.h"

static dpt_vk_alloc *vk_al(const dpt_ref *r) {
  return r->buf->handle;
}

static uint64_t vk_div_up(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}

static uint32_t vk_f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static dpt_status vk_too_large(const char *op) {
  return dpt_set_error(DPT_ERR_UNSUPPORTED,
                       "vulkan: %s: a size exceeds the 32-bit range of the shaders", op);
}

/* ---- batch normalization ------------------------------------------------------------------- */

/* Windows for nt tensors: t[i] spans counts[i] elements. */
static dpt_status vk_windows(dpt_vk_ctx *ctx, const dpt_ref *t, const size_t *counts, uint32_t nt,
                             dpt_vk_win *w, uint32_t *elems) {
  for (uint32_t i = 0; i < nt; ++i) {
    DPT_TRY(dpt_vk_window(ctx, vk_al(&t[i]), t[i].off, counts[i], 4, &w[i]));
    elems[i] = w[i].elem;
  }
  return DPT_OK;
}

/* n*c*p (checked by the wrapper not to overflow) must fit the shaders' 32-bit indices. */
static dpt_status vk_bn_total(const dpt_bn_geom *g, const char *op, size_t *total) {
  *total = g->n * g->c * g->p;
  if (*total > UINT32_MAX) return vk_too_large(op);
  return DPT_OK;
}

/* The per-channel reductions run one workgroup per channel, each invocation over n*p / 256
 * values: lavapipe's loop budget (DPT_VK_LOOP_LIMIT) bounds n*p. */
static dpt_status vk_bn_channel_len(const dpt_bn_geom *g, const char *op) {
  if (vk_div_up((uint64_t)g->n * g->p, 256) * 2 + 16 > DPT_VK_LOOP_LIMIT)
    return dpt_set_error(DPT_ERR_UNSUPPORTED,
                         "vulkan: %s: %zu values per channel exceed what one workgroup reduces", op,
                         g->n * g->p);
  return DPT_OK;
}

dpt_status dpt_vk_bn_stats(dpt_backend *be, const dpt_bn_stats_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  size_t total;
  DPT_TRY(vk_bn_total(&a->g, "bn_stats", &total));
  DPT_TRY(vk_bn_channel_len(&a->g, "bn_stats"));
  dpt_ref t[3] = {a->x, a->mean, a->var};
  size_t counts[3] = {total, a->g.c, a->g.c};
  dpt_vk_win w[3];
  uint32_t e[3];
  DPT_TRY(vk_windows(ctx, t, counts, 3, w, e));
  uint32_t push[6] = {(uint32_t)a->g.n, (uint32_t)a->g.c, (uint32_t)a->g.p, e[0], e[1], e[2]};
  return dpt_vk_leave(be,
                      dpt_vk_dispatch(ctx, DPT_VK_PIPE_BN_STATS, w, 3, push, sizeof push, a->g.c));
}

dpt_status dpt_vk_bn_fwd(dpt_backend *be, const dpt_bn_fwd_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  size_t total, c = a->g.c;
  DPT_TRY(vk_bn_total(&a->g, "bn_fwd", &total));
  dpt_ref t[6] = {a->x, a->mean, a->var, a->gamma, a->beta, a->y};
  size_t counts[6] = {total, c, c, c, c, total};
  dpt_vk_win w[6];
  uint32_t e[6];
  DPT_TRY(vk_windows(ctx, t, counts, 6, w, e));
  uint32_t push[11] = {
      (uint32_t)total,   (uint32_t)c,     (uint32_t)a->g.p, e[0], e[1], e[2], e[3], e[4], e[5],
      (uint32_t)a->relu, vk_f2u(a->g.eps)};
  return dpt_vk_leave(be, dpt_vk_dispatch(ctx, DPT_VK_PIPE_BN_FWD, w, 6, push, sizeof push,
                                          vk_div_up(total, DPT_VK_WG)));
}

dpt_status dpt_vk_bn_relu_fwd(dpt_backend *be, const dpt_bn_relu_fwd_args *a) {
  return dpt_vk_bn_fwd(be, a);
}

dpt_status dpt_vk_bn_bwd_reduce(dpt_backend *be, const dpt_bn_bwd_reduce_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  size_t total, c = a->g.c;
  DPT_TRY(vk_bn_total(&a->g, "bn_bwd_reduce", &total));
  DPT_TRY(vk_bn_channel_len(&a->g, "bn_bwd_reduce"));
  dpt_ref t[7] = {a->dy, a->x, a->mean, a->var, a->sum_dy_xhat, a->sum_dy, a->act};
  size_t counts[7] = {total, total, c, c, c, c, total};
  dpt_vk_win w[7];
  uint32_t e[7];
  DPT_TRY(vk_windows(ctx, t, counts, 7, w, e));
  uint32_t push[12] = {(uint32_t)a->g.n,
                       (uint32_t)c,
                       (uint32_t)a->g.p,
                       e[0],
                       e[1],
                       e[2],
                       e[3],
                       e[4],
                       e[5],
                       e[6],
                       (uint32_t)a->relu,
                       vk_f2u(a->g.eps)};
  return dpt_vk_leave(be,
                      dpt_vk_dispatch(ctx, DPT_VK_PIPE_BN_BWD_REDUCE, w, 7, push, sizeof push, c));
}

dpt_status dpt_vk_bn_relu_bwd_reduce(dpt_backend *be, const dpt_bn_relu_bwd_reduce_args *a) {
  return dpt_vk_bn_bwd_reduce(be, a);
}

dpt_status dpt_vk_bn_bwd(dpt_backend *be, const dpt_bn_bwd_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  size_t total, c = a->g.c;
  DPT_TRY(vk_bn_total(&a->g, "bn_bwd", &total));
  dpt_ref t[8] = {a->dy, a->x, a->mean, a->var, a->gamma, a->sum_dy_xhat, a->sum_dy, a->dx};
  size_t counts[8] = {total, total, c, c, c, c, c, total};
  dpt_vk_win w[8];
  uint32_t e[8];
  DPT_TRY(vk_windows(ctx, t, counts, 8, w, e));
  uint32_t push[13] = {(uint32_t)total,
                       (uint32_t)c,
                       (uint32_t)a->g.p,
                       e[0],
                       e[1],
                       e[2],
                       e[3],
                       e[4],
                       e[5],
                       e[6],
                       e[7],
                       vk_f2u(a->g.eps),
                       vk_f2u((float)a->count)};
  return dpt_vk_leave(be, dpt_vk_dispatch(ctx, DPT_VK_PIPE_BN_BWD, w, 8, push, sizeof push,
                                          vk_div_up(total, DPT_VK_WG)));
}

/* Two dispatches: dx = dy masked by y (relu_bwd), then bn_bwd over dx in place. One shader
 * would bind nine buffers, more than some devices give a shader (lavapipe: eight). */
dpt_status dpt_vk_bn_relu_bwd(dpt_backend *be, const dpt_bn_relu_bwd_args *a) {
  const dpt_relu_bwd_args r = {a->g.n * a->g.c * a->g.p, a->act, a->dy, a->dx};
  DPT_TRY(dpt_vk_relu_bwd(be, &r));
  dpt_bn_bwd_args b = *a;
  b.dy = a->dx;
  return dpt_vk_bn_bwd(be, &b);
}

/* ---- average pooling ----------------------------------------------------------------------- */

/* fwd: one invocation per output (in = x, out = y); bwd: one per dx element (in = dy). */
static dpt_status vk_avgpool(dpt_vk_ctx *ctx, const dpt_avgpool_args *a, int bwd) {
  const dpt_pool_geom *g = &a->g;
  size_t xn = g->planes * g->h * g->w, yn = g->planes * a->out_h * a->out_w;
  const size_t geo[] = {g->h, g->w, g->kh, g->kw, g->stride_h, g->stride_w, a->out_h, a->out_w};
  for (size_t i = 0; i < sizeof geo / sizeof geo[0]; ++i)
    if (geo[i] > INT32_MAX) return vk_too_large(bwd ? "avgpool_bwd" : "avgpool_fwd");
  if (xn > UINT32_MAX || g->kh * g->kw > (1u << 24))
    return vk_too_large(bwd ? "avgpool_bwd" : "avgpool_fwd");
  dpt_vk_win w[2];
  DPT_TRY(dpt_vk_window(ctx, vk_al(&a->in), a->in.off, bwd ? yn : xn, 4, &w[0]));
  DPT_TRY(dpt_vk_window(ctx, vk_al(&a->out), a->out.off, bwd ? xn : yn, 4, &w[1]));
  size_t n = bwd ? xn : yn;
  uint32_t push[11] = {
      (uint32_t)n,           w[0].elem,          w[1].elem,         (uint32_t)g->h,
      (uint32_t)g->w,        (uint32_t)g->kh,    (uint32_t)g->kw,   (uint32_t)g->stride_h,
      (uint32_t)g->stride_w, (uint32_t)a->out_h, (uint32_t)a->out_w};
  return dpt_vk_dispatch(ctx, bwd ? DPT_VK_PIPE_AVGPOOL_BWD : DPT_VK_PIPE_AVGPOOL_FWD, w, 2, push,
                         sizeof push, vk_div_up(n, DPT_VK_WG));
}

dpt_status dpt_vk_avgpool_fwd(dpt_backend *be, const dpt_avgpool_fwd_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  return dpt_vk_leave(be, vk_avgpool(dpt_vk_ctx_of(be), a, 0));
}

dpt_status dpt_vk_avgpool_bwd(dpt_backend *be, const dpt_avgpool_bwd_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  return dpt_vk_leave(be, vk_avgpool(dpt_vk_ctx_of(be), a, 1));
}

/* ---- dropout ------------------------------------------------------------------------------- */

/* Whole rows per dispatch, as many as a window holds; each dispatch's first row is its global
 * row, so the mask does not depend on the split. */
dpt_status dpt_vk_dropout(dpt_backend *be, const dpt_dropout_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  size_t chunk = dpt_vk_chunk_elems(ctx, 4) / a->cols;
  if (chunk == 0) return dpt_vk_leave(be, vk_too_large("dropout"));
  for (size_t r = 0; r < a->rows;) {
    size_t rows = a->rows - r < chunk ? a->rows - r : chunk;
    size_t n = rows * a->cols;
    dpt_vk_win w[2];
    DPT_TRY(dpt_vk_window(ctx, vk_al(&a->x), a->x.off + r * a->cols, n, 4, &w[0]));
    DPT_TRY(dpt_vk_window(ctx, vk_al(&a->y), a->y.off + r * a->cols, n, 4, &w[1]));
    uint32_t push[8] = {(uint32_t)n,
                        w[0].elem,
                        w[1].elem,
                        (uint32_t)a->cols,
                        a->key,
                        a->threshold,
                        a->first_row + (uint32_t)r,
                        vk_f2u(a->scale)};
    DPT_TRY(dpt_vk_dispatch(ctx, DPT_VK_PIPE_DROPOUT, w, 2, push, sizeof push,
                            vk_div_up(n, DPT_VK_WG)));
    r += rows;
  }
  return dpt_vk_leave(be, DPT_OK);
}

/* ---- layer normalization ------------------------------------------------------------------- */

/* fwd and bwd run one invocation per row, `passes` loops over its cols: lavapipe's loop budget
 * (DPT_VK_LOOP_LIMIT) bounds cols; rows * cols must fit the 32-bit indices. */
static dpt_status vk_ln_size(const dpt_ln_geom *g, uint64_t passes, const char *op) {
  if (g->rows * g->cols > UINT32_MAX) return vk_too_large(op);
  if ((uint64_t)g->cols * passes + 16 > DPT_VK_LOOP_LIMIT)
    return dpt_set_error(DPT_ERR_UNSUPPORTED,
                         "vulkan: %s: %zu columns exceed what one invocation walks", op, g->cols);
  return DPT_OK;
}

dpt_status dpt_vk_layernorm_fwd(dpt_backend *be, const dpt_layernorm_fwd_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  const size_t rows = a->g.rows, cols = a->g.cols;
  DPT_TRY(vk_ln_size(&a->g, 3, "layernorm_fwd"));
  dpt_ref t[6] = {a->x, a->gamma, a->beta, a->y, a->mean, a->rstd};
  size_t counts[6] = {rows * cols, cols, cols, rows * cols, rows, rows};
  dpt_vk_win w[6];
  uint32_t e[6];
  DPT_TRY(vk_windows(ctx, t, counts, 6, w, e));
  uint32_t push[9] = {(uint32_t)rows, (uint32_t)cols,  e[0], e[1], e[2], e[3], e[4],
                      e[5],           vk_f2u(a->g.eps)};
  return dpt_vk_leave(be, dpt_vk_dispatch(ctx, DPT_VK_PIPE_LAYERNORM_FWD, w, 6, push, sizeof push,
                                          vk_div_up(rows, DPT_VK_WG)));
}

dpt_status dpt_vk_layernorm_bwd(dpt_backend *be, const dpt_layernorm_bwd_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  const size_t rows = a->g.rows, cols = a->g.cols;
  DPT_TRY(vk_ln_size(&a->g, 2, "layernorm_bwd"));
  dpt_ref t[6] = {a->dy, a->x, a->mean, a->rstd, a->gamma, a->dx};
  size_t counts[6] = {rows * cols, rows * cols, rows, rows, cols, rows * cols};
  dpt_vk_win w[6];
  uint32_t e[6];
  DPT_TRY(vk_windows(ctx, t, counts, 6, w, e));
  uint32_t push[8] = {(uint32_t)rows, (uint32_t)cols, e[0], e[1], e[2], e[3], e[4], e[5]};
  return dpt_vk_leave(be, dpt_vk_dispatch(ctx, DPT_VK_PIPE_LAYERNORM_BWD, w, 6, push, sizeof push,
                                          vk_div_up(rows, DPT_VK_WG)));
}

/* One invocation per column, over chunks of rows in order (each within the loop budget): the
 * first chunk overwrites dgamma and dbeta, the next add to them. */
static dpt_status vk_ln_params_chunk(dpt_vk_ctx *ctx, const dpt_layernorm_bwd_params_args *a,
                                     size_t r0, size_t nr) {
  const size_t cols = a->g.cols;
  dpt_ref t[6] = {a->dy, a->x, a->mean, a->rstd, a->dgamma, a->dbeta};
  t[0].off += r0 * cols;
  t[1].off += r0 * cols;
  t[2].off += r0;
  t[3].off += r0;
  size_t counts[6] = {nr * cols, nr * cols, nr, nr, cols, cols};
  dpt_vk_win w[6];
  uint32_t e[6];
  DPT_TRY(vk_windows(ctx, t, counts, 6, w, e));
  uint32_t push[9] = {(uint32_t)nr, (uint32_t)cols, e[0], e[1], e[2], e[3], e[4], e[5], r0 == 0};
  return dpt_vk_dispatch(ctx, DPT_VK_PIPE_LAYERNORM_BWD_PARAMS, w, 6, push, sizeof push,
                         vk_div_up(cols, DPT_VK_WG));
}

dpt_status dpt_vk_layernorm_bwd_params(dpt_backend *be, const dpt_layernorm_bwd_params_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  if (a->g.rows * a->g.cols > UINT32_MAX)
    return dpt_vk_leave(be, vk_too_large("layernorm_bwd_params"));
  const size_t chunk = DPT_VK_LOOP_LIMIT - 16;
  for (size_t r0 = 0; r0 < a->g.rows; r0 += chunk) {
    size_t nr = a->g.rows - r0 < chunk ? a->g.rows - r0 : chunk;
    DPT_TRY(vk_ln_params_chunk(ctx, a, r0, nr));
  }
  return dpt_vk_leave(be, DPT_OK);
}

/* ---- GELU ---------------------------------------------------------------------------------- */

/* Element-wise, in chunks of what a window holds: fwd binds x, y; bwd binds x, dy, dx. */
static dpt_status vk_gelu(dpt_vk_ctx *ctx, const dpt_gelu_args *a, int bwd) {
  const size_t chunk = dpt_vk_chunk_elems(ctx, 4);
  const dpt_ref t[3] = {a->x, bwd ? a->dy : a->y, a->y};
  const uint32_t nt = bwd ? 3 : 2;
  for (size_t i = 0; i < a->n; i += chunk) {
    size_t n = a->n - i < chunk ? a->n - i : chunk;
    dpt_vk_win w[3];
    uint32_t push[5] = {(uint32_t)n, 0, 0, 0, 0};
    for (uint32_t k = 0; k < nt; ++k) {
      DPT_TRY(dpt_vk_window(ctx, vk_al(&t[k]), t[k].off + i, n, 4, &w[k]));
      push[1 + k] = w[k].elem;
    }
    push[1 + nt] = (uint32_t)a->approx;
    DPT_TRY(dpt_vk_dispatch(ctx, bwd ? DPT_VK_PIPE_GELU_BWD : DPT_VK_PIPE_GELU_FWD, w, nt, push,
                            (2 + nt) * sizeof(uint32_t), vk_div_up(n, DPT_VK_WG)));
  }
  return DPT_OK;
}

dpt_status dpt_vk_gelu_fwd(dpt_backend *be, const dpt_gelu_fwd_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  return dpt_vk_leave(be, vk_gelu(dpt_vk_ctx_of(be), a, 0));
}

dpt_status dpt_vk_gelu_bwd(dpt_backend *be, const dpt_gelu_bwd_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  return dpt_vk_leave(be, vk_gelu(dpt_vk_ctx_of(be), a, 1));
}

/* ---- bias and GELU, fused ------------------------------------------------------------------ */

/* fwd: element-wise in chunks of whole rows (each chunk starts at column 0); binds x, bias, y. */
static dpt_status vk_bias_gelu_fwd(dpt_vk_ctx *ctx, const dpt_bias_gelu_args *a) {
  size_t n;
  if (!dpt_mul_ok(a->rows, a->cols, &n) || a->cols > UINT32_MAX) return vk_too_large("bias_gelu");
  const size_t chunk_rows = dpt_vk_chunk_elems(ctx, 4) / a->cols;
  if (chunk_rows == 0) return vk_too_large("bias_gelu");
  dpt_vk_win w[3];
  DPT_TRY(dpt_vk_window(ctx, vk_al(&a->bias), a->bias.off, a->cols, 4, &w[1]));
  for (size_t r = 0; r < a->rows; r += chunk_rows) {
    const size_t rows = a->rows - r < chunk_rows ? a->rows - r : chunk_rows, m = rows * a->cols;
    DPT_TRY(dpt_vk_window(ctx, vk_al(&a->x), a->x.off + r * a->cols, m, 4, &w[0]));
    DPT_TRY(dpt_vk_window(ctx, vk_al(&a->y), a->y.off + r * a->cols, m, 4, &w[2]));
    uint32_t push[6] = {(uint32_t)m, w[0].elem,         w[1].elem,
                        w[2].elem,   (uint32_t)a->cols, (uint32_t)a->approx};
    DPT_TRY(dpt_vk_dispatch(ctx, DPT_VK_PIPE_BIAS_GELU_FWD, w, 3, push, sizeof push,
                            vk_div_up(m, DPT_VK_WG)));
  }
  return DPT_OK;
}

/* bwd: one dispatch, a workgroup per 32 columns summing the rows in a fixed order (as
 * bias_grad); binds x, dy, dx, db (with no rows, db stands in for the empty matrices). */
static dpt_status vk_bias_gelu_bwd(dpt_vk_ctx *ctx, const dpt_bias_gelu_args *a) {
  size_t n;
  if (!dpt_mul_ok(a->rows, a->cols, &n) || n > UINT32_MAX) return vk_too_large("bias_gelu");
  const dpt_ref t[4] = {a->rows ? a->x : a->db, a->rows ? a->dy : a->db, a->rows ? a->dx : a->db,
                        a->db};
  dpt_vk_win w[4];
  for (int k = 0; k < 4; ++k)
    DPT_TRY(dpt_vk_window(ctx, vk_al(&t[k]), t[k].off, k < 3 && a->rows ? n : a->cols, 4, &w[k]));
  uint32_t push[8] = {(uint32_t)a->rows, (uint32_t)a->cols, w[0].elem,       w[1].elem,
                      w[2].elem,         w[3].elem,         vk_f2u(a->beta), (uint32_t)a->approx};
  return dpt_vk_dispatch(ctx, DPT_VK_PIPE_BIAS_GELU_BWD, w, 4, push, sizeof push,
                         vk_div_up(a->cols, 32));
}

dpt_status dpt_vk_bias_gelu_fwd(dpt_backend *be, const dpt_bias_gelu_fwd_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  return dpt_vk_leave(be, vk_bias_gelu_fwd(dpt_vk_ctx_of(be), a));
}

dpt_status dpt_vk_bias_gelu_bwd(dpt_backend *be, const dpt_bias_gelu_bwd_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  return dpt_vk_leave(be, vk_bias_gelu_bwd(dpt_vk_ctx_of(be), a));
}

/* ---- attention's softmax ------------------------------------------------------------------- */

/* Both run one workgroup of 128 invocations per row (shaders attn_softmax.comp, softmax_bwd.comp),
 * each invocation over its cols / 128 columns in three (two) passes: lavapipe's loop budget bounds
 * the row length; the rows go in chunks of what a window holds. */
enum { VK_ROW_WG = 128 };

static dpt_status vk_row_len(size_t cols, uint64_t passes, const char *op) {
  if (cols > UINT32_MAX) return vk_too_large(op);
  if (vk_div_up(cols, VK_ROW_WG) * passes + 16 > DPT_VK_LOOP_LIMIT)
    return dpt_set_error(DPT_ERR_UNSUPPORTED,
                         "vulkan: %s: rows of %zu elements exceed what one workgroup walks", op,
                         cols);
  return DPT_OK;
}

/* Rows per dispatch: the window of a chunk of rows of `cols` elements. */
static size_t vk_row_chunk(const dpt_vk_ctx *ctx, size_t cols) {
  size_t chunk = dpt_vk_chunk_elems(ctx, 4) / cols;
  return chunk ? chunk : 1;
}

static dpt_status vk_attn_softmax(dpt_vk_ctx *ctx, const dpt_attn_softmax_args *a) {
  const dpt_attn_geom *g = &a->g;
  const size_t rows = g->heads * g->n * g->q, cycle = g->n * g->q;
  DPT_TRY(vk_row_len(g->k, 3, "attn_softmax"));
  const size_t chunk = vk_row_chunk(ctx, g->k);
  /* the sample of a row comes from (base + row) / q, base < n * q, in 32 bits */
  if (g->n * g->k > UINT32_MAX || cycle > UINT32_MAX - chunk) return vk_too_large("attn_softmax");
  if (chunk * g->k > dpt_vk_chunk_elems(ctx, 4)) return vk_too_large("attn_softmax");
  for (size_t r = 0; r < rows;) {
    size_t nr = rows - r < chunk ? rows - r : chunk;
    dpt_vk_win w[3];
    /* Without ids, one element of the scores stands in for the unread binding. */
    DPT_TRY(a->has_ids ? dpt_vk_window(ctx, vk_al(&a->ids), a->ids.off, g->n * g->k, 4, &w[0])
                       : dpt_vk_window(ctx, vk_al(&a->scores), a->scores.off, 1, 4, &w[0]));
    DPT_TRY(dpt_vk_window(ctx, vk_al(&a->scores), a->scores.off + r * g->k, nr * g->k, 4, &w[1]));
    DPT_TRY(dpt_vk_window(ctx, vk_al(&a->probs), a->probs.off + r * g->k, nr * g->k, 4, &w[2]));
    uint32_t push[11] = {
        (uint32_t)nr,          (uint32_t)g->n,      (uint32_t)g->q,  (uint32_t)g->k,
        (uint32_t)(r % cycle), w[0].elem,           w[1].elem,       w[2].elem,
        a->has_ids ? 1u : 0u,  (uint32_t)a->pad_id, vk_f2u(a->scale)};
    DPT_TRY(dpt_vk_dispatch(ctx, DPT_VK_PIPE_ATTN_SOFTMAX, w, 3, push, sizeof push, nr));
    r += nr;
  }
  return DPT_OK;
}

dpt_status dpt_vk_attn_softmax(dpt_backend *be, const dpt_attn_softmax_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  return dpt_vk_leave(be, vk_attn_softmax(dpt_vk_ctx_of(be), a));
}

static dpt_status vk_softmax_bwd(dpt_vk_ctx *ctx, const dpt_softmax_bwd_args *a) {
  const size_t cols = a->cols;
  DPT_TRY(vk_row_len(cols, 2, "softmax_bwd"));
  const size_t chunk = vk_row_chunk(ctx, cols);
  if (chunk * cols > dpt_vk_chunk_elems(ctx, 4)) return vk_too_large("softmax_bwd");
  for (size_t r = 0; r < a->rows;) {
    size_t nr = a->rows - r < chunk ? a->rows - r : chunk;
    const dpt_ref t[3] = {a->y, a->dy, a->dx};
    dpt_vk_win w[3];
    for (int i = 0; i < 3; ++i)
      DPT_TRY(dpt_vk_window(ctx, vk_al(&t[i]), t[i].off + r * cols, nr * cols, 4, &w[i]));
    uint32_t push[5] = {(uint32_t)nr, (uint32_t)cols, w[0].elem, w[1].elem, w[2].elem};
    DPT_TRY(dpt_vk_dispatch(ctx, DPT_VK_PIPE_SOFTMAX_BWD, w, 3, push, sizeof push, nr));
    r += nr;
  }
  return DPT_OK;
}

dpt_status dpt_vk_softmax_bwd(dpt_backend *be, const dpt_softmax_bwd_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  return dpt_vk_leave(be, vk_softmax_bwd(dpt_vk_ctx_of(be), a));
}

/* ---- attention's probabilities, fused: as the softmaxes, a workgroup per row --------------- */

static dpt_status vk_attn_probs_fwd(dpt_vk_ctx *ctx, const dpt_attn_probs_fwd_args *a) {
  const dpt_attn_geom *g = &a->sm.g;
  const size_t rows = g->n * g->q; /* one head */
  DPT_TRY(vk_row_len(g->k, 3, "attn_probs_fwd"));
  const size_t chunk = vk_row_chunk(ctx, g->k);
  if (g->n * g->k > UINT32_MAX || rows > UINT32_MAX - chunk || g->q * g->k > UINT32_MAX)
    return vk_too_large("attn_probs_fwd");
  for (size_t r = 0; r < rows;) {
    size_t nr = rows - r < chunk ? rows - r : chunk;
    dpt_vk_win w[3];
    /* Without ids (or dropout), one element of probs stands in for the unread binding. */
    DPT_TRY(a->sm.has_ids
                ? dpt_vk_window(ctx, vk_al(&a->sm.ids), a->sm.ids.off, g->n * g->k, 4, &w[0])
                : dpt_vk_window(ctx, vk_al(&a->sm.probs), a->sm.probs.off, 1, 4, &w[0]));
    DPT_TRY(
        dpt_vk_window(ctx, vk_al(&a->sm.probs), a->sm.probs.off + r * g->k, nr * g->k, 4, &w[1]));
    DPT_TRY(a->has_drop ? dpt_vk_window(ctx, vk_al(&a->dropped), a->dropped.off + r * g->k,
                                        nr * g->k, 4, &w[2])
                        : dpt_vk_window(ctx, vk_al(&a->sm.probs), a->sm.probs.off, 1, 4, &w[2]));
    uint32_t push[15] = {(uint32_t)nr,
                         (uint32_t)g->q,
                         (uint32_t)g->k,
                         (uint32_t)r,
                         w[0].elem,
                         w[1].elem,
                         w[2].elem,
                         a->sm.has_ids ? 1u : 0u,
                         (uint32_t)a->sm.pad_id,
                         vk_f2u(a->sm.scale),
                         a->has_drop ? 1u : 0u,
                         a->key,
                         a->threshold,
                         a->first_row,
                         vk_f2u(a->drop_scale)};
    DPT_TRY(dpt_vk_dispatch(ctx, DPT_VK_PIPE_ATTN_PROBS_FWD, w, 3, push, sizeof push, nr));
    r += nr;
  }
  return DPT_OK;
}

dpt_status dpt_vk_attn_probs_fwd(dpt_backend *be, const dpt_attn_probs_fwd_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  return dpt_vk_leave(be, vk_attn_probs_fwd(dpt_vk_ctx_of(be), a));
}

static dpt_status vk_attn_probs_bwd(dpt_vk_ctx *ctx, const dpt_attn_probs_bwd_args *a) {
  const size_t cols = a->cols;
  DPT_TRY(vk_row_len(cols, 2, "attn_probs_bwd"));
  const size_t chunk = vk_row_chunk(ctx, cols);
  if (chunk * cols > dpt_vk_chunk_elems(ctx, 4)) return vk_too_large("attn_probs_bwd");
  for (size_t r = 0; r < a->rows;) {
    size_t nr = a->rows - r < chunk ? a->rows - r : chunk;
    const dpt_ref t[4] = {a->y, a->dropped, a->dy, a->dx};
    dpt_vk_win w[4];
    for (int i = 0; i < 4; ++i)
      DPT_TRY(dpt_vk_window(ctx, vk_al(&t[i]), t[i].off + r * cols, nr * cols, 4, &w[i]));
    uint32_t push[8] = {
        (uint32_t)nr,          (uint32_t)cols,       w[0].elem, w[1].elem, w[2].elem, w[3].elem,
        a->has_drop ? 1u : 0u, vk_f2u(a->drop_scale)};
    DPT_TRY(dpt_vk_dispatch(ctx, DPT_VK_PIPE_ATTN_PROBS_BWD, w, 4, push, sizeof push, nr));
    r += nr;
  }
  return DPT_OK;
}

dpt_status dpt_vk_attn_probs_bwd(dpt_backend *be, const dpt_attn_probs_bwd_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  return dpt_vk_leave(be, vk_attn_probs_bwd(dpt_vk_ctx_of(be), a));
}

/* ---- embedding bags ------------------------------------------------------------------------ */

/* The sizes the shaders index in 32 bits (the table through windows of at most 2^31 elements;
 * the wrapper guarantees n, dim >= 1 and 1 <= vocab <= INT32_MAX). */
static int vk_bag_fits(const dpt_embed_bag_args *a) {
  return a->n * a->dim <= UINT32_MAX && a->idx_stride <= UINT32_MAX &&
         (a->n - 1) * a->idx_stride + a->bag <= UINT32_MAX;
}

/* Table rows per window: a table of more rows is split into chunks of this many rows, one
 * window (and one dispatch) each. 0 when one row exceeds a window. */
static size_t vk_bag_chunk_rows(const dpt_vk_ctx *ctx, const dpt_embed_bag_args *a) {
  size_t rows = dpt_vk_chunk_elems(ctx, 4) / a->dim;
  return rows < a->vocab ? rows : a->vocab;
}

static dpt_status vk_bag_row_too_large(const char *op, size_t dim) {
  return dpt_set_error(DPT_ERR_UNSUPPORTED,
                       "vulkan: %s: a table row of %zu floats exceeds maxStorageBufferRange", op,
                       dim);
}

/* Samples per dispatch, at most `per`: their ids and rows of out / dout each within a window.
 * 0 when one sample's do not fit. */
static size_t vk_bag_samples(const dpt_vk_ctx *ctx, const dpt_embed_bag_args *a, size_t per) {
  const size_t win = dpt_vk_chunk_elems(ctx, 4);
  if (a->bag > win) return 0;
  size_t by_ids = (win - a->bag) / a->idx_stride + 1, by_rows = win / a->dim;
  if (per > a->n) per = a->n;
  if (per > by_ids) per = by_ids;
  return per < by_rows ? per : by_rows;
}

static dpt_status vk_bag_sample_too_large(const char *op, const dpt_embed_bag_args *a) {
  return dpt_set_error(DPT_ERR_UNSUPPORTED,
                       "vulkan: %s: one sample's %zu ids (stride %zu) or %zu floats exceed "
                       "maxStorageBufferRange",
                       op, a->bag, a->idx_stride, a->dim);
}

/* Elements of the forward's gathered rows per group of samples (scratch memory). */
enum { VK_BAG_GATHER_MAX = 1 << 22 };

/* One invocation per output element (embed_bag.comp), walking its bag's slots, over groups of
 * samples that fit windows. A table beyond one window (chunks of trows rows): per group, one
 * embed_bag_gather dispatch per chunk first copies the rows of the slots whose id lies in it to
 * scratch memory, and embed_bag sums the copies in slot order, which keeps every float addition
 * of the one-window path in its order: the result is the same bit for bit. */
static dpt_status vk_embed_bag(dpt_vk_ctx *ctx, const dpt_embed_bag_args *a) {
  if (!vk_bag_fits(a)) return vk_too_large("embed_bag");
  if (a->bag + 16 > DPT_VK_LOOP_LIMIT)
    return dpt_set_error(DPT_ERR_UNSUPPORTED, "vulkan: embed_bag: bags of %zu slots are too long",
                         a->bag);
  const size_t trows = vk_bag_chunk_rows(ctx, a);
  if (trows == 0) return vk_bag_row_too_large("embed_bag", a->dim);
  const int split = trows < a->vocab;
  const size_t win = dpt_vk_chunk_elems(ctx, 4);
  const size_t cap = win < VK_BAG_GATHER_MAX ? win : VK_BAG_GATHER_MAX;
  const size_t slot = a->bag * a->dim; /* gathered elements per sample */
  size_t per = vk_bag_samples(ctx, a, split && slot ? cap / slot : a->n);
  if (per == 0)
    return split && slot > cap ? dpt_set_error(DPT_ERR_UNSUPPORTED,
                                               "vulkan: embed_bag: a bag of %zu rows of %zu floats "
                                               "exceeds what one window holds",
                                               a->bag, a->dim)
                               : vk_bag_sample_too_large("embed_bag", a);
  dpt_vk_alloc *rows = NULL;
  if (split) DPT_TRY(dpt_vk_scratch(ctx, (VkDeviceSize)(slot ? per * slot : 1) * 4, &rows));
  for (size_t i0 = 0; i0 < a->n; i0 += per) {
    const size_t n = a->n - i0 < per ? a->n - i0 : per, ne = n * slot;
    dpt_vk_win w[3];
    DPT_TRY(dpt_vk_window(ctx, vk_al(&a->idx), a->idx.off + i0 * a->idx_stride,
                          (n - 1) * a->idx_stride + a->bag, 4, &w[1]));
    if (split) {
      DPT_TRY(dpt_vk_window(ctx, rows, 0, ne ? ne : 1, 4, &w[2]));
      for (size_t first = 0; ne && first < a->vocab; first += trows) {
        const size_t tr = a->vocab - first < trows ? a->vocab - first : trows;
        DPT_TRY(dpt_vk_window(ctx, vk_al(&a->table), a->table.off + first * a->dim, tr * a->dim, 4,
                              &w[0]));
        uint32_t push[9] = {(uint32_t)ne,
                            w[0].elem,
                            w[1].elem,
                            w[2].elem,
                            (uint32_t)a->dim,
                            (uint32_t)a->bag,
                            (uint32_t)a->idx_stride,
                            (uint32_t)first,
                            (uint32_t)tr};
        DPT_TRY(dpt_vk_dispatch(ctx, DPT_VK_PIPE_EMBED_BAG_GATHER, w, 3, push, sizeof push,
                                vk_div_up(ne, DPT_VK_WG)));
      }
      w[0] = w[2];
    } else {
      DPT_TRY(dpt_vk_window(ctx, vk_al(&a->table), a->table.off, a->vocab * a->dim, 4, &w[0]));
    }
    DPT_TRY(dpt_vk_window(ctx, vk_al(&a->out), a->out.off + i0 * a->dim, n * a->dim, 4, &w[2]));
    uint32_t push[10] = {
        (uint32_t)(n * a->dim),  w[0].elem,          w[1].elem,        w[2].elem,
        (uint32_t)a->dim,        (uint32_t)a->vocab, (uint32_t)a->bag, (uint32_t)a->idx_stride,
        a->mode == DPT_BAG_MEAN, (uint32_t)split};
    DPT_TRY(dpt_vk_dispatch(ctx, DPT_VK_PIPE_EMBED_BAG, w, 3, push, sizeof push,
                            vk_div_up(n * a->dim, DPT_VK_WG)));
  }
  return DPT_OK;
}

dpt_status dpt_vk_embed_bag(dpt_backend *be, const dpt_embed_bag_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  return dpt_vk_leave(be, vk_embed_bag(dpt_vk_ctx_of(be), a));
}

/* Work-items of embed_bag_bwd.comp: buckets * dim, buckets at most VK_BAG_BUCKETS (each
 * invocation reads all ids) and aiming at about VK_BAG_ITEMS invocations. */
enum { VK_BAG_BUCKETS = 64, VK_BAG_ITEMS = 2048 };

/* A dispatch per chunk of table rows (one window each) and group of samples (the loop budget,
 * windows): a row lies in one chunk, whose dispatches take the samples in order, so each row's
 * sum keeps its order. */
static dpt_status vk_embed_bag_bwd(dpt_vk_ctx *ctx, const dpt_embed_bag_bwd_args *a) {
  if (!vk_bag_fits(a)) return vk_too_large("embed_bag_bwd");
  /* samples per dispatch: rows * (1 + 2 * bag) loop iterations per invocation */
  size_t per = (size_t)(DPT_VK_LOOP_LIMIT - 16) / (1 + 2 * a->bag);
  if (per == 0)
    return dpt_set_error(DPT_ERR_UNSUPPORTED,
                         "vulkan: embed_bag_bwd: bags of %zu slots are too long", a->bag);
  per = vk_bag_samples(ctx, a, per);
  if (per == 0) return vk_bag_sample_too_large("embed_bag_bwd", a);
  const size_t trows = vk_bag_chunk_rows(ctx, a);
  if (trows == 0) return vk_bag_row_too_large("embed_bag_bwd", a->dim);
  for (size_t first = 0; first < a->vocab; first += trows) {
    const size_t tr = a->vocab - first < trows ? a->vocab - first : trows;
    size_t buckets = vk_div_up(VK_BAG_ITEMS, a->dim);
    if (buckets > VK_BAG_BUCKETS) buckets = VK_BAG_BUCKETS;
    if (buckets > tr) buckets = tr;
    const size_t items = buckets * a->dim; /* <= tr * dim, one window */
    for (size_t i0 = 0; i0 < a->n;) {
      size_t rows = a->n - i0 < per ? a->n - i0 : per;
      dpt_vk_win w[3];
      DPT_TRY(
          dpt_vk_window(ctx, vk_al(&a->dout), a->dout.off + i0 * a->dim, rows * a->dim, 4, &w[0]));
      DPT_TRY(dpt_vk_window(ctx, vk_al(&a->idx), a->idx.off + i0 * a->idx_stride,
                            (rows - 1) * a->idx_stride + a->bag, 4, &w[1]));
      DPT_TRY(dpt_vk_window(ctx, vk_al(&a->dtable), a->dtable.off + first * a->dim, tr * a->dim, 4,
                            &w[2]));
      uint32_t push[12] = {(uint32_t)items,
                           w[0].elem,
                           w[1].elem,
                           w[2].elem,
                           (uint32_t)a->dim,
                           (uint32_t)first,
                           (uint32_t)tr,
                           (uint32_t)a->bag,
                           (uint32_t)a->idx_stride,
                           a->mode == DPT_BAG_MEAN,
                           (uint32_t)rows,
                           (uint32_t)buckets};
      DPT_TRY(dpt_vk_dispatch(ctx, DPT_VK_PIPE_EMBED_BAG_BWD, w, 3, push, sizeof push,
                              vk_div_up(items, DPT_VK_WG)));
      i0 += rows;
    }
  }
  return DPT_OK;
}

dpt_status dpt_vk_embed_bag_bwd(dpt_backend *be, const dpt_embed_bag_bwd_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  return dpt_vk_leave(be, vk_embed_bag_bwd(dpt_vk_ctx_of(be), a));
}

/* ---- column gathers ------------------------------------------------------------------------ */

/* gather_cols.comp (both directions): one invocation per (row, map entry), the rows in chunks of
 * what a window of x and of y holds. */
static dpt_status vk_cols(dpt_vk_ctx *ctx, dpt_vk_pipe pipe, const char *op,
                          const dpt_gather_cols_args *a) {
  const size_t win = dpt_vk_chunk_elems(ctx, 4);
  const size_t ld = a->ldx > a->ldy ? a->ldx : a->ldy;
  if (ld > win || a->ldx > UINT32_MAX || a->ldy > UINT32_MAX) return vk_too_large(op);
  const size_t chunk = win / ld; /* >= 1; chunk * ld fits the window, so 32 bits */
  for (size_t r = 0; r < a->rows;) {
    size_t nr = a->rows - r < chunk ? a->rows - r : chunk;
    dpt_vk_win w[3];
    DPT_TRY(dpt_vk_window(ctx, vk_al(&a->x), a->x.off + r * a->ldx, nr * a->ldx, 4, &w[0]));
    DPT_TRY(dpt_vk_window(ctx, vk_al(&a->map), a->map.off, a->cols, 4, &w[1]));
    DPT_TRY(dpt_vk_window(ctx, vk_al(&a->y), a->y.off + r * a->ldy, (nr - 1) * a->ldy + a->cols, 4,
                          &w[2]));
    size_t total = nr * a->cols;
    uint32_t push[7] = {(uint32_t)total,   w[0].elem,        w[1].elem,       w[2].elem,
                        (uint32_t)a->cols, (uint32_t)a->ldx, (uint32_t)a->ldy};
    DPT_TRY(dpt_vk_dispatch(ctx, pipe, w, 3, push, sizeof push, vk_div_up(total, DPT_VK_WG)));
    r += nr;
  }
  return DPT_OK;
}

dpt_status dpt_vk_gather_cols(dpt_backend *be, const dpt_gather_cols_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  return dpt_vk_leave(be, vk_cols(dpt_vk_ctx_of(be), DPT_VK_PIPE_GATHER_COLS, "gather_cols", a));
}

dpt_status dpt_vk_scatter_cols_add(dpt_backend *be, const dpt_scatter_cols_add_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  return dpt_vk_leave(
      be, vk_cols(dpt_vk_ctx_of(be), DPT_VK_PIPE_SCATTER_COLS_ADD, "scatter_cols_add", a));
}

/* ---- binary cross-entropy ------------------------------------------------------------------ */

/* One invocation per logit (bce_logits.comp), as softmax_xent: in chunks of a window, each
 * chunk's per-logit losses and correctness in host-visible partials that the host adds in
 * double once the chunk ran. */
static dpt_status vk_bce_logits(dpt_vk_ctx *ctx, const dpt_bce_logits_args *a) {
  int grad = a->dlogits.buf != NULL;
  int host = a->loss_sum != NULL || a->correct != NULL;
  size_t chunk = dpt_vk_chunk_elems(ctx, 4);
  if (host && chunk > ((size_t)1 << 20)) chunk = (size_t)1 << 20;
  double loss = 0.0;
  int64_t correct = 0;
  for (size_t i = 0; i < a->n;) {
    size_t c = a->n - i < chunk ? a->n - i : chunk;
    dpt_vk_alloc *part = NULL;
    dpt_vk_win w[4];
    if (host) DPT_TRY(dpt_vk_partials(ctx, (VkDeviceSize)c * 8, &part));
    DPT_TRY(dpt_vk_window(ctx, vk_al(&a->logits), a->logits.off + i, c, 4, &w[0]));
    DPT_TRY(dpt_vk_window(ctx, vk_al(&a->labels), a->labels.off + i, c, 4, &w[1]));
    /* An unused binding still needs a buffer: the logits stand in. */
    DPT_TRY(grad ? dpt_vk_window(ctx, vk_al(&a->dlogits), a->dlogits.off + i, c, 4, &w[2])
                 : dpt_vk_window(ctx, vk_al(&a->logits), a->logits.off, 1, 4, &w[2]));
    DPT_TRY(host ? dpt_vk_window(ctx, part, 0, 2 * c, 4, &w[3])
                 : dpt_vk_window(ctx, vk_al(&a->logits), a->logits.off, 1, 4, &w[3]));
    uint32_t push[7] = {(uint32_t)c,     w[0].elem, w[1].elem,
                        w[2].elem,       w[3].elem, (grad ? 1u : 0u) | (host ? 2u : 0u),
                        vk_f2u(a->scale)};
    DPT_TRY(dpt_vk_dispatch(ctx, DPT_VK_PIPE_BCE_LOGITS, w, 4, push, sizeof push,
                            vk_div_up(c, DPT_VK_WG)));
    if (host) {
      DPT_TRY(dpt_vk_wait(ctx, part->last_use));
      const uint32_t *p = (const uint32_t *)(part->block->map + part->offset);
      for (size_t k = 0; k < c; ++k) {
        float f;
        memcpy(&f, &p[w[3].elem + k], sizeof f);
        loss += (double)f;
        correct += p[w[3].elem + c + k] != 0;
      }
    }
    i += c;
  }
  if (a->loss_sum) *a->loss_sum = loss;
  if (a->correct) *a->correct = correct;
  return DPT_OK;
}

dpt_status dpt_vk_bce_logits(dpt_backend *be, const dpt_bce_logits_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  return dpt_vk_leave(be, vk_bce_logits(dpt_vk_ctx_of(be), a));
}

DPT_NO_DIRECT_CONV(dpt_vk)
