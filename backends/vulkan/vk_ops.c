/* Vulkan backend: the op set. Each op binds its tensors as windows (vk_internal.h), packs its
 * push constants (the layouts match the `P` blocks of backends/vulkan/shaders/<op>.comp word
 * for word) and records one or more dispatches. Element-wise ops and reductions split tensors
 * larger than one window into several dispatches, gemm into smaller gemms, the embedding ops
 * their table into chunks of rows; structured ops return DPT_ERR_UNSUPPORTED when another
 * tensor does not fit one window (maxStorageBufferRange) or a size needs more than 32 bits. Results
 * needed on the host (reductions, loss) come from per-workgroup partials in host memory, added here
 * in double.
 *
 * Each op is its vtable entry: it opens with dpt_vk_enter and returns success through
 * dpt_vk_leave (vk_error.c), so a validation error is reported by the op that raised it. */
#include <math.h>
#include <string.h>

#include "backends/vulkan/vk_internal.h"
#include "base/error.h"
#include "base/size.h"

/* Workgroups of the reductions: enough to fill a GPU, few enough partials to add on the host. */
#define DPT_VK_REDUCE_GROUPS 512u

static dpt_vk_alloc *vk_al(const dpt_ref *r) {
  return r->buf->handle;
}

static uint64_t vk_div_up(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}

/* Sizes a shader receives as 32-bit (partly signed) integers; tensor sizes are bounded by the
 * windows already, this guards geometry parameters (strides, padding) that are not. */
static int vk_fits_int(const size_t *v, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (v[i] > INT32_MAX) return 0;
  return 1;
}

static dpt_status vk_too_large(const char *op) {
  return dpt_set_error(DPT_ERR_UNSUPPORTED,
                       "vulkan: %s: a size exceeds the 32-bit range of the shaders", op);
}

static uint32_t vk_f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* ---- element-wise ops ---------------------------------------------------------------------- */

typedef struct vk_tensor {
  dpt_vk_alloc *al;
  size_t off;   /* elements */
  size_t esize; /* bytes per element */
} vk_tensor;

/* Runs `pipe` over n elements of the tensors t[0..nt) in chunks that fit a window. Push word 0
 * is the chunk's element count, words 1..nt the tensors' window offsets, the rest of `push`
 * (push_words in all) is passed unchanged. */
static dpt_status vk_elementwise(dpt_vk_ctx *ctx, dpt_vk_pipe pipe, size_t n, const vk_tensor *t,
                                 uint32_t nt, uint32_t *push, uint32_t push_words) {
  size_t chunk = dpt_vk_chunk_elems(ctx, 4);
  for (size_t done = 0; done < n;) {
    size_t c = n - done < chunk ? n - done : chunk;
    dpt_vk_win w[DPT_VK_MAX_BINDINGS];
    for (uint32_t i = 0; i < nt; ++i) {
      dpt_status st = dpt_vk_window(ctx, t[i].al, t[i].off + done, c, t[i].esize, &w[i]);
      if (st != DPT_OK) return st;
      push[1 + i] = w[i].elem;
    }
    push[0] = (uint32_t)c;
    dpt_status st =
        dpt_vk_dispatch(ctx, pipe, w, nt, push, push_words * 4, vk_div_up(c, DPT_VK_WG));
    if (st != DPT_OK) return st;
    done += c;
  }
  return DPT_OK;
}

dpt_status dpt_vk_relu_fwd(dpt_backend *be, const dpt_relu_fwd_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  vk_tensor t[2] = {{vk_al(&a->x), a->x.off, 4}, {vk_al(&a->y), a->y.off, 4}};
  uint32_t push[3];
  return dpt_vk_leave(be, vk_elementwise(ctx, DPT_VK_PIPE_RELU_FWD, a->n, t, 2, push, 3));
}

dpt_status dpt_vk_add_relu(dpt_backend *be, const dpt_add_relu_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  vk_tensor t[3] = {
      {vk_al(&a->a), a->a.off, 4}, {vk_al(&a->b), a->b.off, 4}, {vk_al(&a->y), a->y.off, 4}};
  uint32_t push[4];
  return dpt_vk_leave(be, vk_elementwise(ctx, DPT_VK_PIPE_ADD_RELU, a->n, t, 3, push, 4));
}

dpt_status dpt_vk_relu_bwd(dpt_backend *be, const dpt_relu_bwd_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  vk_tensor t[3] = {
      {vk_al(&a->x), a->x.off, 4}, {vk_al(&a->dy), a->dy.off, 4}, {vk_al(&a->dx), a->dx.off, 4}};
  uint32_t push[4];
  return dpt_vk_leave(be, vk_elementwise(ctx, DPT_VK_PIPE_RELU_BWD, a->n, t, 3, push, 4));
}

dpt_status dpt_vk_axpy(dpt_backend *be, const dpt_axpy_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  vk_tensor t[2] = {{vk_al(&a->x), a->x.off, 4}, {vk_al(&a->y), a->y.off, 4}};
  uint32_t push[4] = {0, 0, 0, vk_f2u(a->alpha)};
  return dpt_vk_leave(be, vk_elementwise(ctx, DPT_VK_PIPE_AXPY, a->n, t, 2, push, 4));
}

dpt_status dpt_vk_scale(dpt_backend *be, const dpt_scale_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  vk_tensor t[1] = {{vk_al(&a->x), a->x.off, 4}};
  uint32_t push[3] = {0, 0, vk_f2u(a->alpha)};
  return dpt_vk_leave(be, vk_elementwise(ctx, DPT_VK_PIPE_SCALE, a->n, t, 1, push, 3));
}

dpt_status dpt_vk_sgd_update(dpt_backend *be, const dpt_sgd_update_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  int has_v = a->velocity.buf != NULL;
  /* Without velocity the binding still needs a buffer: the weights stand in, unused. */
  vk_tensor t[3] = {
      {vk_al(&a->w), a->w.off, 4},
      {vk_al(&a->grad), a->grad.off, 4},
      {has_v ? vk_al(&a->velocity) : vk_al(&a->w), has_v ? a->velocity.off : a->w.off, 4}};
  uint32_t push[9] = {0,
                      0,
                      0,
                      0,
                      vk_f2u(a->p.lr),
                      vk_f2u(a->p.momentum),
                      vk_f2u(a->p.weight_decay),
                      a->p.nesterov ? 1u : 0u,
                      has_v ? 1u : 0u};
  return dpt_vk_leave(be, vk_elementwise(ctx, DPT_VK_PIPE_SGD_UPDATE, a->n, t, 3, push, 9));
}

dpt_status dpt_vk_adamw_update(dpt_backend *be, const dpt_adamw_update_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  const dpt_adamw_params *p = &a->p;
  const dpt_adamw_scalars k = dpt_adamw_scalars_of(p); /* rounded like every backend */
  vk_tensor t[4] = {{vk_al(&a->w), a->w.off, 4},
                    {vk_al(&a->grad), a->grad.off, 4},
                    {vk_al(&a->m), a->m.off, 4},
                    {vk_al(&a->v), a->v.off, 4}};
  uint32_t push[13] = {0,
                       0,
                       0,
                       0,
                       0,
                       vk_f2u(p->beta1),
                       vk_f2u(p->beta2),
                       vk_f2u(p->eps),
                       vk_f2u(k.decay),
                       vk_f2u(k.step_size),
                       vk_f2u(k.bc2_sqrt),
                       vk_f2u(k.one_minus_b1),
                       vk_f2u(k.one_minus_b2)};
  return dpt_vk_leave(be, vk_elementwise(ctx, DPT_VK_PIPE_ADAMW_UPDATE, a->n, t, 4, push, 13));
}

dpt_status dpt_vk_f32_to_f16(dpt_backend *be, const dpt_f32_to_f16_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  vk_tensor t[2] = {{vk_al(&a->src), a->src.off, 4}, {vk_al(&a->dst), a->dst.off, 2}};
  uint32_t push[3];
  return dpt_vk_leave(be, vk_elementwise(ctx, DPT_VK_PIPE_F32_TO_F16, a->n, t, 2, push, 3));
}

dpt_status dpt_vk_f16_to_f32(dpt_backend *be, const dpt_f16_to_f32_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  vk_tensor t[2] = {{vk_al(&a->src), a->src.off, 2}, {vk_al(&a->dst), a->dst.off, 4}};
  uint32_t push[3];
  return dpt_vk_leave(be, vk_elementwise(ctx, DPT_VK_PIPE_F16_TO_F32, a->n, t, 2, push, 3));
}

dpt_status dpt_vk_f32_to_bf16(dpt_backend *be, const dpt_f32_to_bf16_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  vk_tensor t[2] = {{vk_al(&a->src), a->src.off, 4}, {vk_al(&a->dst), a->dst.off, 2}};
  uint32_t push[3];
  return dpt_vk_leave(be, vk_elementwise(ctx, DPT_VK_PIPE_F32_TO_BF16, a->n, t, 2, push, 3));
}

dpt_status dpt_vk_bf16_to_f32(dpt_backend *be, const dpt_bf16_to_f32_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  vk_tensor t[2] = {{vk_al(&a->src), a->src.off, 2}, {vk_al(&a->dst), a->dst.off, 4}};
  uint32_t push[3];
  return dpt_vk_leave(be, vk_elementwise(ctx, DPT_VK_PIPE_BF16_TO_F32, a->n, t, 2, push, 3));
}

dpt_status dpt_vk_bias_add(dpt_backend *be, const dpt_bias_add_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  size_t n;
  if (!dpt_mul_ok(a->rows, a->cols, &n) || a->cols > UINT32_MAX) return vk_too_large("bias_add");
  /* Whole rows per chunk so every chunk starts at column 0. */
  size_t chunk_rows = dpt_vk_chunk_elems(ctx, 4) / a->cols;
  if (chunk_rows == 0) return vk_too_large("bias_add");
  dpt_vk_win w[2];
  dpt_status st = dpt_vk_window(ctx, vk_al(&a->bias), a->bias.off, a->cols, 4, &w[1]);
  for (size_t r = 0; st == DPT_OK && r < a->rows; r += chunk_rows) {
    size_t rows = a->rows - r < chunk_rows ? a->rows - r : chunk_rows;
    st = dpt_vk_window(ctx, vk_al(&a->y), a->y.off + r * a->cols, rows * a->cols, 4, &w[0]);
    if (st != DPT_OK) break;
    uint32_t push[4] = {(uint32_t)(rows * a->cols), w[0].elem, w[1].elem, (uint32_t)a->cols};
    st = dpt_vk_dispatch(ctx, DPT_VK_PIPE_BIAS_ADD, w, 2, push, sizeof push,
                         vk_div_up(rows * a->cols, DPT_VK_WG));
  }
  return dpt_vk_leave(be, st);
}

dpt_status dpt_vk_bias_grad(dpt_backend *be, const dpt_bias_grad_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  size_t n;
  if (!dpt_mul_ok(a->rows, a->cols, &n) || n > UINT32_MAX) return vk_too_large("bias_grad");
  dpt_vk_win w[2];
  dpt_vk_alloc *dy = a->rows ? vk_al(&a->dy) : vk_al(&a->db);
  dpt_status st =
      dpt_vk_window(ctx, dy, a->rows ? a->dy.off : a->db.off, a->rows ? n : a->cols, 4, &w[0]);
  if (st == DPT_OK) st = dpt_vk_window(ctx, vk_al(&a->db), a->db.off, a->cols, 4, &w[1]);
  if (st != DPT_OK) return st;
  uint32_t push[5] = {(uint32_t)a->rows, (uint32_t)a->cols, w[0].elem, w[1].elem, vk_f2u(a->beta)};
  return dpt_vk_leave(be, dpt_vk_dispatch(ctx, DPT_VK_PIPE_BIAS_GRAD, w, 2, push, sizeof push,
                                          vk_div_up(a->cols, 32)));
}

/* ---- reductions ----------------------------------------------------------------------------- */

/* Partials of `pipe` over x[0, n): one dispatch per window-sized chunk, each writing up to
 * DPT_VK_REDUCE_GROUPS 32-bit partials; waits, then hands the partials to the caller. */
static dpt_status vk_reduce(dpt_vk_ctx *ctx, dpt_vk_pipe pipe, size_t n, const dpt_ref *x,
                            const uint32_t **parts, size_t *nparts) {
  size_t chunk = dpt_vk_chunk_elems(ctx, 4);
  size_t nchunks = (size_t)vk_div_up(n, chunk);
  dpt_vk_alloc *part;
  dpt_status st = dpt_vk_partials(ctx, (VkDeviceSize)nchunks * DPT_VK_REDUCE_GROUPS * 4, &part);
  if (st != DPT_OK) return st;
  uint32_t total = 0;
  for (size_t done = 0; done < n;) {
    size_t c = n - done < chunk ? n - done : chunk;
    uint32_t groups = (uint32_t)vk_div_up(c, DPT_VK_WG);
    if (groups > DPT_VK_REDUCE_GROUPS) groups = DPT_VK_REDUCE_GROUPS;
    dpt_vk_win w[2];
    st = dpt_vk_window(ctx, vk_al(x), x->off + done, c, 4, &w[0]);
    if (st == DPT_OK) st = dpt_vk_window(ctx, part, total, groups, 4, &w[1]);
    if (st != DPT_OK) return st;
    uint32_t push[4] = {(uint32_t)c, w[0].elem, w[1].elem, groups};
    st = dpt_vk_dispatch(ctx, pipe, w, 2, push, sizeof push, groups);
    if (st != DPT_OK) return st;
    total += groups;
    done += c;
  }
  st = dpt_vk_wait(ctx, part->last_use);
  if (st != DPT_OK) return st;
  *parts = (const uint32_t *)(part->block->map + part->offset);
  *nparts = total;
  return DPT_OK;
}

static dpt_status vk_sum_common(dpt_vk_ctx *ctx, dpt_vk_pipe pipe, const dpt_reduce_args *a) {
  const uint32_t *parts;
  size_t np;
  dpt_status st = vk_reduce(ctx, pipe, a->n, &a->x, &parts, &np);
  if (st != DPT_OK) return st;
  double s = 0.0;
  for (size_t i = 0; i < np; ++i) {
    float f;
    memcpy(&f, &parts[i], sizeof f);
    s += (double)f;
  }
  *a->out = s;
  return DPT_OK;
}

dpt_status dpt_vk_sum(dpt_backend *be, const dpt_sum_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  return dpt_vk_leave(be, vk_sum_common(ctx, DPT_VK_PIPE_SUM, a));
}

dpt_status dpt_vk_sumsq(dpt_backend *be, const dpt_sumsq_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  return dpt_vk_leave(be, vk_sum_common(ctx, DPT_VK_PIPE_SUMSQ, a));
}

dpt_status dpt_vk_count_nonfinite(dpt_backend *be, const dpt_count_nonfinite_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  const uint32_t *parts;
  size_t np;
  dpt_status st = vk_reduce(ctx, DPT_VK_PIPE_COUNT_NONFINITE, a->n, &a->x, &parts, &np);
  if (st != DPT_OK) return st;
  uint64_t s = 0;
  for (size_t i = 0; i < np; ++i)
    s += parts[i];
  *a->out = s;
  return dpt_vk_leave(be, DPT_OK);
}

/* ---- softmax cross-entropy ------------------------------------------------------------------ */

dpt_status dpt_vk_softmax_xent(dpt_backend *be, const dpt_softmax_xent_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  int grad = a->dlogits.buf != NULL;
  int host = a->loss_sum != NULL || a->correct != NULL;
  if (!grad && !host) return dpt_vk_leave(be, DPT_OK);
  if (a->cols > UINT32_MAX) return vk_too_large("softmax_xent");
  /* Rows per dispatch: the logits window, and a bounded partials buffer when the host waits
   * for results (the loop then waits once per chunk). */
  size_t chunk = dpt_vk_chunk_elems(ctx, 4) / a->cols;
  if (host && chunk > ((size_t)1 << 20)) chunk = (size_t)1 << 20;
  if (chunk == 0) return vk_too_large("softmax_xent");
  double loss = 0.0;
  int64_t correct = 0;
  for (size_t r = 0; r < a->rows;) {
    size_t rows = a->rows - r < chunk ? a->rows - r : chunk;
    dpt_vk_alloc *part = NULL;
    dpt_vk_win w[4];
    dpt_status st = DPT_OK;
    if (host) st = dpt_vk_partials(ctx, (VkDeviceSize)rows * 8, &part);
    if (st == DPT_OK)
      st = dpt_vk_window(ctx, vk_al(&a->logits), a->logits.off + r * a->cols, rows * a->cols, 4,
                         &w[0]);
    if (st == DPT_OK) st = dpt_vk_window(ctx, vk_al(&a->labels), a->labels.off + r, rows, 4, &w[1]);
    /* An unused binding still needs a buffer: the logits stand in. */
    if (st == DPT_OK)
      st = grad ? dpt_vk_window(ctx, vk_al(&a->dlogits), a->dlogits.off + r * a->cols,
                                rows * a->cols, 4, &w[2])
                : dpt_vk_window(ctx, vk_al(&a->logits), a->logits.off, 1, 4, &w[2]);
    if (st == DPT_OK)
      st = host ? dpt_vk_window(ctx, part, 0, 2 * rows, 4, &w[3])
                : dpt_vk_window(ctx, vk_al(&a->logits), a->logits.off, 1, 4, &w[3]);
    if (st != DPT_OK) return st;
    uint32_t push[8] = {(uint32_t)rows,
                        (uint32_t)a->cols,
                        w[0].elem,
                        w[1].elem,
                        w[2].elem,
                        w[3].elem,
                        (grad ? 1u : 0u) | (host ? 2u : 0u),
                        vk_f2u(a->scale)};
    st = dpt_vk_dispatch(ctx, DPT_VK_PIPE_SOFTMAX_XENT, w, 4, push, sizeof push, rows);
    if (st != DPT_OK) return st;
    if (host) {
      st = dpt_vk_wait(ctx, part->last_use);
      if (st != DPT_OK) return st;
      const uint32_t *p = (const uint32_t *)(part->block->map + part->offset);
      for (size_t i = 0; i < rows; ++i) {
        float f;
        memcpy(&f, &p[i], sizeof f);
        loss += (double)f;
        correct += p[rows + i] != 0;
      }
    }
    r += rows;
  }
  if (a->loss_sum) *a->loss_sum = loss;
  if (a->correct) *a->correct = correct;
  return dpt_vk_leave(be, DPT_OK);
}

/* ---- convolution and pooling ---------------------------------------------------------------- */

/* im2col and col2im over the whole batch in one dispatch: one invocation per line of `out`
 * (im2col: a col row's output row, ow elements; col2im: a segment of up to 32 elements of an
 * image row); both shaders take the same geometry words. */
static dpt_status vk_conv(dpt_vk_ctx *ctx, dpt_vk_pipe pipe, const char *op, const dpt_conv_geom *g,
                          size_t out_h, size_t out_w, const dpt_ref *x, const dpt_ref *col,
                          int x_is_out) {
  size_t geo[] = {g->c,        g->h,     g->w,     g->kh, g->kw, g->stride_h,
                  g->stride_w, g->pad_h, g->pad_w, out_h, out_w};
  size_t xn = g->n * g->c * g->h * g->w; /* the wrapper checked these products */
  size_t cn = g->n * g->c * g->kh * g->kw * out_h * out_w;
  /* y + pad stays below 2^31 in the shaders' signed arithmetic */
  if (!vk_fits_int(geo, sizeof geo / sizeof geo[0]) || cn > UINT32_MAX ||
      g->h + g->pad_h > INT32_MAX || g->w + g->pad_w > INT32_MAX)
    return vk_too_large(op);
  /* binding 0 is the input, 1 the output */
  dpt_vk_win w[2];
  dpt_status st = dpt_vk_window(ctx, vk_al(x), x->off, xn, 4, &w[x_is_out ? 1 : 0]);
  if (st == DPT_OK) st = dpt_vk_window(ctx, vk_al(col), col->off, cn, 4, &w[x_is_out ? 0 : 1]);
  if (st != DPT_OK) return st;
  /* lines: im2col batch*c*kh*kw*oh of ow elements, col2im batch*c*h*ceil(w / 32) */
  size_t n = x_is_out ? g->n * g->c * g->h * vk_div_up(g->w, 32) : cn / out_w;
  if (!x_is_out && out_w > DPT_VK_LOOP_LIMIT) return vk_too_large(op);
  if (x_is_out && 32 * (g->kh + g->kh * g->kw + 1) > DPT_VK_LOOP_LIMIT) return vk_too_large(op);
  uint32_t push[14] = {(uint32_t)n,           w[0].elem,          w[1].elem,
                       (uint32_t)g->c,        (uint32_t)g->h,     (uint32_t)g->w,
                       (uint32_t)g->kh,       (uint32_t)g->kw,    (uint32_t)g->stride_h,
                       (uint32_t)g->stride_w, (uint32_t)g->pad_h, (uint32_t)g->pad_w,
                       (uint32_t)out_h,       (uint32_t)out_w};
  return dpt_vk_dispatch(ctx, pipe, w, 2, push, sizeof push, vk_div_up(n, DPT_VK_WG));
}

dpt_status dpt_vk_im2col(dpt_backend *be, const dpt_im2col_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  return dpt_vk_leave(
      be, vk_conv(ctx, DPT_VK_PIPE_IM2COL, "im2col", &a->g, a->out_h, a->out_w, &a->x, &a->col, 0));
}

dpt_status dpt_vk_col2im(dpt_backend *be, const dpt_col2im_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  return dpt_vk_leave(be, vk_conv(ctx, DPT_VK_PIPE_COL2IM, "col2im", &a->g, a->out_h, a->out_w,
                                  &a->dx, &a->col, 1));
}

/* maxpool_fwd (x, y, argmax; one invocation per output) and maxpool_bwd (dy, argmax, dx; one
 * per dx element, or per output where windows do not overlap): t[] are the three bound tensors,
 * `planar` says which of them has the input plane size (the others have the pooled size). */
static dpt_status vk_pool(dpt_vk_ctx *ctx, dpt_vk_pipe pipe, const char *op, const dpt_pool_geom *g,
                          size_t out_h, size_t out_w, const dpt_ref *t, const int *planar,
                          size_t threads_planar) {
  size_t geo[] = {g->h, g->w, g->kh, g->kw, g->stride_h, g->stride_w, out_h, out_w};
  size_t xn = g->planes * g->h * g->w;
  size_t yn = g->planes * out_h * out_w;
  if (!vk_fits_int(geo, sizeof geo / sizeof geo[0]) || xn > UINT32_MAX) return vk_too_large(op);
  dpt_vk_win w[3];
  for (int i = 0; i < 3; ++i) {
    dpt_status st = dpt_vk_window(ctx, vk_al(&t[i]), t[i].off, planar[i] ? xn : yn, 4, &w[i]);
    if (st != DPT_OK) return st;
  }
  /* maxpool_bwd over windows that do not overlap: one invocation per output writes its block */
  const int blocks = threads_planar && g->kh <= g->stride_h && g->kw <= g->stride_w;
  size_t n = threads_planar && !blocks ? xn : yn;
  uint32_t push[13] = {(uint32_t)n,
                       w[0].elem,
                       w[1].elem,
                       w[2].elem,
                       (uint32_t)g->h,
                       (uint32_t)g->w,
                       (uint32_t)g->kh,
                       (uint32_t)g->kw,
                       (uint32_t)g->stride_h,
                       (uint32_t)g->stride_w,
                       (uint32_t)out_h,
                       (uint32_t)out_w,
                       (uint32_t)blocks};
  return dpt_vk_dispatch(ctx, pipe, w, 3, push, sizeof push, vk_div_up(n, DPT_VK_WG));
}

dpt_status dpt_vk_maxpool_fwd(dpt_backend *be, const dpt_maxpool_fwd_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  dpt_ref t[3] = {a->x, a->y, a->argmax};
  static const int planar[3] = {1, 0, 0};
  return dpt_vk_leave(be, vk_pool(ctx, DPT_VK_PIPE_MAXPOOL_FWD, "maxpool_fwd", &a->g, a->out_h,
                                  a->out_w, t, planar, 0));
}

dpt_status dpt_vk_maxpool_bwd(dpt_backend *be, const dpt_maxpool_bwd_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  dpt_ref t[3] = {a->dy, a->argmax, a->dx};
  static const int planar[3] = {0, 0, 1};
  return dpt_vk_leave(be, vk_pool(ctx, DPT_VK_PIPE_MAXPOOL_BWD, "maxpool_bwd", &a->g, a->out_h,
                                  a->out_w, t, planar, 1));
}

/* ---- embeddings ------------------------------------------------------------------------------ */

/* Table rows per window: a larger table takes a dispatch per chunk of this many rows (the
 * wrapper guarantees dim >= 1 and 1 <= vocab <= INT32_MAX). 0 when one row exceeds a window. */
static size_t vk_table_chunk_rows(const dpt_vk_ctx *ctx, size_t vocab, size_t dim) {
  size_t rows = dpt_vk_chunk_elems(ctx, 4) / dim;
  return rows < vocab ? rows : vocab;
}

static dpt_status vk_row_too_large(const char *op, size_t dim) {
  return dpt_set_error(DPT_ERR_UNSUPPORTED,
                       "vulkan: %s: a table row of %zu floats exceeds maxStorageBufferRange", op,
                       dim);
}

/* One dispatch per chunk of table rows, each writing the rows of the indices in its chunk (the
 * first also the NaN rows of indices outside the table). */
dpt_status dpt_vk_embed_gather(dpt_backend *be, const dpt_embed_gather_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  size_t on = a->n * a->dim;
  if (on > UINT32_MAX) return vk_too_large("embed_gather");
  const size_t trows = vk_table_chunk_rows(ctx, a->vocab, a->dim);
  if (trows == 0) return vk_row_too_large("embed_gather", a->dim);
  dpt_vk_win w[3];
  dpt_status st = dpt_vk_window(ctx, vk_al(&a->idx), a->idx.off, a->n, 4, &w[1]);
  if (st == DPT_OK) st = dpt_vk_window(ctx, vk_al(&a->out), a->out.off, on, 4, &w[2]);
  for (size_t first = 0; st == DPT_OK && first < a->vocab; first += trows) {
    const size_t tr = a->vocab - first < trows ? a->vocab - first : trows;
    st = dpt_vk_window(ctx, vk_al(&a->table), a->table.off + first * a->dim, tr * a->dim, 4, &w[0]);
    uint32_t push[8] = {(uint32_t)on,     w[0].elem,          w[1].elem,       w[2].elem,
                        (uint32_t)a->dim, (uint32_t)a->vocab, (uint32_t)first, (uint32_t)tr};
    if (st == DPT_OK)
      st = dpt_vk_dispatch(ctx, DPT_VK_PIPE_EMBED_GATHER, w, 3, push, sizeof push,
                           vk_div_up(on, DPT_VK_WG));
  }
  return dpt_vk_leave(be, st);
}

/* The links pass, then the owners' sums in a dispatch per chunk of table rows: each row lies in
 * one chunk, so its sum keeps the order of the one-window path. */
dpt_status dpt_vk_embed_scatter_add(dpt_backend *be, const dpt_embed_scatter_add_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  size_t gn = a->n * a->dim;
  if (gn > UINT32_MAX || a->n >= UINT32_MAX / 2) return vk_too_large("embed_scatter_add");
  const size_t trows = vk_table_chunk_rows(ctx, a->vocab, a->dim);
  if (trows == 0) return vk_row_too_large("embed_scatter_add", a->dim);
  dpt_vk_alloc *links;
  dpt_status st = dpt_vk_scratch(ctx, (VkDeviceSize)a->n * 8, &links);
  if (st != DPT_OK) return st;
  dpt_vk_win w[4];
  st = dpt_vk_window(ctx, vk_al(&a->idx), a->idx.off, a->n, 4, &w[0]);
  if (st == DPT_OK) st = dpt_vk_window(ctx, links, 0, 2 * a->n, 4, &w[1]);
  if (st != DPT_OK) return st;
  uint32_t lpush[3] = {(uint32_t)a->n, w[0].elem, (uint32_t)a->vocab};
  st = dpt_vk_dispatch(ctx, DPT_VK_PIPE_EMBED_LINKS, w, 2, lpush, sizeof lpush,
                       vk_div_up(a->n, DPT_VK_WG));
  if (st != DPT_OK) return st;

  st = dpt_vk_window(ctx, vk_al(&a->dout), a->dout.off, gn, 4, &w[0]);
  if (st == DPT_OK) st = dpt_vk_window(ctx, vk_al(&a->idx), a->idx.off, a->n, 4, &w[1]);
  if (st == DPT_OK) st = dpt_vk_window(ctx, links, 0, 2 * a->n, 4, &w[2]);
  for (size_t first = 0; st == DPT_OK && first < a->vocab; first += trows) {
    const size_t tr = a->vocab - first < trows ? a->vocab - first : trows;
    st = dpt_vk_window(ctx, vk_al(&a->dtable), a->dtable.off + first * a->dim, tr * a->dim, 4,
                       &w[3]);
    uint32_t push[8] = {(uint32_t)gn,     w[0].elem,      w[1].elem,       w[3].elem,
                        (uint32_t)a->dim, (uint32_t)a->n, (uint32_t)first, (uint32_t)tr};
    if (st == DPT_OK)
      st = dpt_vk_dispatch(ctx, DPT_VK_PIPE_EMBED_SCATTER_ADD, w, 4, push, sizeof push,
                           vk_div_up(gn, DPT_VK_WG));
  }
  return dpt_vk_leave(be, st);
}

/* ---- gemm ------------------------------------------------------------------------------------ */

/* Which vec loads an operand allows: its window offset, leading dimension and the extent it is
 * contiguous along all multiples of 4 (1), or of 8 (2), else 0. */
static int vk_vec_level(uint32_t elem, uint32_t ld, size_t contiguous) {
  if (elem % 8 == 0 && ld % 8 == 0 && contiguous % 8 == 0) return 2;
  if (elem % 4 == 0 && ld % 4 == 0 && contiguous % 4 == 0) return 1;
  return 0;
}

/* A batch as the gemm kernels see it: `items` matrices per operand, stride_x elements apart
 * (0: shared); with `sum` set, one C receives the sum of the items (stride_c is then 0). */
typedef struct vk_gemm_batch {
  size_t items, stride_a, stride_b, stride_c;
  int sum;
} vk_gemm_batch;

/* The tiled kernels (gemm.comp, gemm_cpu.comp) compute whole tiles of C and whole BK = 16 steps
 * of k; gemm_small.comp computes exactly the m n k multiply-adds but pays several times more
 * per multiply-add (a load of each operand per step). The cheaper by this estimate runs; the
 * choice depends on the shape only. */
/* Rows of C per tiled workgroup: 64 (gemm.spv), 128 (gemm_cpu.spv) or 64 (gemm_cpu64.spv, for m
 * of 64 or less: half the work per tile). With m > 64 the 128-row tiles stay, even where 64-row
 * ones would pad less: on lavapipe a tile costs much besides its multiply-adds (m = 288: 5 tiles
 * of 64 rows took 20% longer than 3 of 128). */
static uint64_t vk_gemm_tile_m(const dpt_vk_ctx *ctx, const dpt_gemm_args *a) {
  if (!ctx->gemm_cpu) return 64;
  return a->m <= 64 ? 64 : 128;
}

static int vk_gemm_small(const dpt_vk_ctx *ctx, const dpt_gemm_args *a) {
  /* gemm_tex.spv pads each dimension to a few texels at most, and its loads cost far less
   * than gemm_small's: it runs every shape (the CNN's bias gemms, k = 1: 4x faster) */
  if (ctx->gemm_tex) return 0;
  const uint64_t tile_n = ctx->gemm_cpu ? 128 : 64, tile_m = vk_gemm_tile_m(ctx, a), small_cost = 6;
  uint64_t tiled = vk_div_up(a->m, tile_m) * vk_div_up(a->n, tile_n) * tile_m * tile_n *
                   (vk_div_up(a->k, 16) * 16);
  return (uint64_t)a->m * a->n * a->k * small_cost < tiled && a->k / 4 + 4 <= DPT_VK_LOOP_LIMIT;
}

/* Loop iterations one invocation runs for one item: the k loop of gemm_small.comp (4 k per
 * iteration, up to 3 more for the rest) or of the tiled kernels (16 k per iteration). */
static uint64_t vk_gemm_item_iters(const dpt_vk_ctx *ctx, const dpt_gemm_args *a) {
  if (ctx->gemm_tex) return vk_div_up(a->k, 4) + 1; /* gemm_tex.spv: 4 k per iteration */
  return vk_gemm_small(ctx, a) ? a->k / 4 + 4 : vk_div_up(a->k, 16) + 1;
}

/* One dispatch: every operand's batch fits a window, all sizes fit 32 bits, items <=
 * maxComputeWorkGroupCount[2] unless summed. */
static dpt_status vk_gemm_dispatch(dpt_vk_ctx *ctx, const dpt_gemm_args *a, const vk_gemm_batch *bt,
                                   const size_t span[3]) {
  size_t ac = a->trans_a ? a->m : a->k, bc = a->trans_b ? a->k : a->n;
  dpt_vk_win w[3];
  dpt_status st = dpt_vk_window(ctx, vk_al(&a->a), a->a.off, span[0], 4, &w[0]);
  if (st == DPT_OK) st = dpt_vk_window(ctx, vk_al(&a->b), a->b.off, span[1], 4, &w[1]);
  if (st == DPT_OK) st = dpt_vk_window(ctx, vk_al(&a->c), a->c.off, span[2], 4, &w[2]);
  if (st != DPT_OK) return st;
  /* A leading dimension only multiplies row indices > 0, so one-row operands may carry any. */
  uint32_t lda = a->lda > UINT32_MAX ? UINT32_MAX : (uint32_t)a->lda;
  uint32_t ldb = a->ldb > UINT32_MAX ? UINT32_MAX : (uint32_t)a->ldb;
  uint32_t ldc = a->ldc > UINT32_MAX ? UINT32_MAX : (uint32_t)a->ldc;
  int trans = (a->trans_a ? 1 : 0) + (a->trans_b ? 2 : 0);
  uint32_t layers = bt->sum ? 1u : (uint32_t)bt->items;
  uint32_t push[17] = {(uint32_t)a->m,
                       (uint32_t)a->n,
                       (uint32_t)a->k,
                       lda,
                       ldb,
                       ldc,
                       w[0].elem,
                       w[1].elem,
                       w[2].elem,
                       vk_f2u(a->alpha),
                       vk_f2u(a->beta),
                       0,
                       (uint32_t)bt->stride_a,
                       (uint32_t)bt->stride_b,
                       (uint32_t)bt->stride_c,
                       bt->sum ? (uint32_t)bt->items : 1u,
                       0};
  if (vk_gemm_small(ctx, a))
    return dpt_vk_dispatch_z(ctx, (dpt_vk_pipe)(DPT_VK_PIPE_GEMM_SMALL_0 + trans), w, 3, push,
                             sizeof push, vk_div_up((uint64_t)a->m * a->n, 64), layers);
  /* vec loads need every item's offset aligned as well: the strides join the window offsets */
  int va = vk_vec_level(w[0].elem | (uint32_t)(bt->stride_a & 7), lda, ac);
  int vb = vk_vec_level(w[1].elem | (uint32_t)(bt->stride_b & 7), ldb, bc);
  /* Tiles of C per workgroup: 128 x 128 (gemm_cpu.spv), 64 x 128 (gemm_cpu64.spv) or 64 x 64
   * (gemm.spv). */
  uint64_t tile_m = vk_gemm_tile_m(ctx, a), tile_n = ctx->gemm_cpu ? 128 : 64;
  dpt_vk_pipe cpu0 = tile_m == 64 ? DPT_VK_PIPE_GEMM_CPU64_0 : DPT_VK_PIPE_GEMM_CPU_0;
  dpt_vk_pipe pipe = ctx->gemm_cpu
                         ? (dpt_vk_pipe)(cpu0 + trans + 4 * va + 12 * vb)
                         : (dpt_vk_pipe)(DPT_VK_PIPE_GEMM_0 + trans + 4 * (va > 0) + 8 * (vb > 0));
  /* gemm_tex.spv (16 x 64 tiles) wherever both operands can be texel views (vec4 texels
   * where vec loads are allowed, else single floats) and its k loop stays within lavapipe's
   * loop budget */
  if (ctx->gemm_tex && dpt_vk_tex_ok(ctx, &w[0]) && dpt_vk_tex_ok(ctx, &w[1]) &&
      vk_div_up(a->k, 4) + 1 <= DPT_VK_LOOP_LIMIT) {
    int ta = va > 0 && w[0].range % 16 == 0, tb = vb > 0 && w[1].range % 16 == 0;
    pipe = (dpt_vk_pipe)(DPT_VK_PIPE_GEMM_TEX_0 + trans + 4 * ta + 8 * tb);
    tile_m = 16;
    tile_n = 64;
    push[16] = (uint32_t)vk_vec_level(w[2].elem | (uint32_t)(bt->stride_c & 7), ldc, a->n);
  }
  uint64_t tiles_m = vk_div_up(a->m, tile_m), tiles_n = vk_div_up(a->n, tile_n);
  push[11] = (uint32_t)tiles_n;
  return dpt_vk_dispatch_z(ctx, pipe, w, 3, push, sizeof push, tiles_m * tiles_n, layers);
}

/* Elements each operand spans: (rows - 1) * ld + cols of its stored layout (A, B, C). */
static void vk_gemm_spans(const dpt_gemm_args *a, size_t span[3]) {
  size_t ar = a->trans_a ? a->k : a->m, ac = a->trans_a ? a->m : a->k;
  size_t br = a->trans_b ? a->n : a->k, bc = a->trans_b ? a->k : a->n;
  span[0] = (ar - 1) * a->lda + ac;
  span[1] = (br - 1) * a->ldb + bc;
  span[2] = (a->m - 1) * a->ldc + a->n;
}

/* The spans of `items` matrices per operand (the wrapper checked they do not overflow). */
static void vk_gemm_batch_spans(const dpt_gemm_args *a, const vk_gemm_batch *bt, size_t span[3]) {
  vk_gemm_spans(a, span);
  span[0] += (bt->items - 1) * bt->stride_a;
  span[1] += (bt->items - 1) * bt->stride_b;
  span[2] += (bt->items - 1) * bt->stride_c;
}

static int vk_gemm_fits(const dpt_vk_ctx *ctx, const dpt_gemm_args *a, const vk_gemm_batch *bt) {
  size_t span[3];
  vk_gemm_batch_spans(a, bt, span);
  const size_t fit = dpt_vk_chunk_elems(ctx, 4);
  if (!bt->sum && bt->items > ctx->props.limits.maxComputeWorkGroupCount[2]) return 0;
  if (bt->sum && bt->items > 1 && bt->items * vk_gemm_item_iters(ctx, a) > DPT_VK_LOOP_LIMIT)
    return 0;
  return span[0] <= fit && span[1] <= fit && span[2] <= fit && span[0] <= UINT32_MAX &&
         span[1] <= UINT32_MAX && span[2] <= UINT32_MAX;
}

static dpt_status vk_gemm_one(dpt_vk_ctx *ctx, const dpt_gemm_args *a) {
  if (a->m > UINT32_MAX || a->n > UINT32_MAX || a->k > UINT32_MAX ||
      (uint64_t)a->m * a->n > UINT32_MAX)
    return vk_too_large("gemm");
  vk_gemm_batch one = {1, 0, 0, 0, 0};
  size_t span[3];
  vk_gemm_batch_spans(a, &one, span);
  if (span[0] > UINT32_MAX || span[1] > UINT32_MAX || span[2] > UINT32_MAX)
    return vk_too_large("gemm");
  return vk_gemm_dispatch(ctx, a, &one, span);
}

/* A gemm whose operand spans more than one shader binding can address (maxStorageBufferRange:
 * 128 MiB on lavapipe and many mobile GPUs) runs as smaller gemms, halving the dimension that
 * shrinks the operand too large: rows of C (M) for C and an untransposed A, columns (N) for a
 * transposed B or a single row of C, the inner dimension (K) otherwise; the K halves add up
 * (the second with beta = 1), so only such a split changes the order of the sums. */
static dpt_status vk_gemm_split(dpt_vk_ctx *ctx, const dpt_gemm_args *a) {
  size_t spans[3];
  vk_gemm_spans(a, spans);
  const size_t fit = dpt_vk_chunk_elems(ctx, 4);
  int big = spans[2] > fit ? 2 : spans[0] > fit ? 0 : spans[1] > fit ? 1 : -1;
  if (big < 0) return vk_gemm_one(ctx, a);
  enum { SPLIT_M, SPLIT_N, SPLIT_K } dim;
  if (big == 2)
    dim = a->m > 1 ? SPLIT_M : SPLIT_N;
  else if (big == 0)
    dim = !a->trans_a ? (a->m > 1 ? SPLIT_M : SPLIT_K) : (a->k > 1 ? SPLIT_K : SPLIT_M);
  else
    dim = !a->trans_b ? (a->k > 1 ? SPLIT_K : SPLIT_N) : (a->n > 1 ? SPLIT_N : SPLIT_K);
  const size_t len = dim == SPLIT_M ? a->m : dim == SPLIT_N ? a->n : a->k;
  if (len < 2) return vk_gemm_one(ctx, a); /* one row or column too long: reports it */
  dpt_gemm_args lo = *a, hi = *a;
  const size_t h = len / 2;
  switch (dim) {
  case SPLIT_M:
    lo.m = h;
    hi.m = a->m - h;
    hi.c.off += h * a->ldc;
    hi.a.off += a->trans_a ? h : h * a->lda;
    break;
  case SPLIT_N:
    lo.n = h;
    hi.n = a->n - h;
    hi.c.off += h;
    hi.b.off += a->trans_b ? h * a->ldb : h;
    break;
  case SPLIT_K:
    lo.k = h;
    hi.k = a->k - h;
    hi.a.off += a->trans_a ? h * a->lda : h;
    hi.b.off += a->trans_b ? h : h * a->ldb;
    hi.beta = 1.0f; /* adds to the first half's result */
    break;
  }
  dpt_status st = vk_gemm_split(ctx, &lo);
  return st == DPT_OK ? vk_gemm_split(ctx, &hi) : st;
}

dpt_status dpt_vk_gemm(dpt_backend *be, const dpt_gemm_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  return dpt_vk_leave(be, vk_gemm_split(ctx, a));
}

/* gemm_batched: the batch in as few dispatches as windows, maxComputeWorkGroupCount[2] and,
 * for a summed batch, DPT_VK_LOOP_LIMIT allow (halving the item count until a chunk fits); a summed
 * batch's later chunks add to C (beta 1), so the items are still added in order. A single item too
 * large for a window goes through vk_gemm_split, item by item. */
static dpt_status vk_gemm_batch_run(dpt_vk_ctx *ctx, const dpt_gemm_args *a, vk_gemm_batch bt) {
  if (a->m > UINT32_MAX || a->n > UINT32_MAX || a->k > UINT32_MAX ||
      (uint64_t)a->m * a->n > UINT32_MAX || bt.stride_a > UINT32_MAX || bt.stride_b > UINT32_MAX ||
      bt.stride_c > UINT32_MAX)
    return vk_too_large("gemm_batched");
  dpt_gemm_args cur = *a;
  for (size_t done = 0; done < bt.items;) {
    vk_gemm_batch ch = bt;
    ch.items = bt.items - done;
    while (ch.items > 1 && !vk_gemm_fits(ctx, &cur, &ch))
      ch.items = (ch.items + 1) / 2;
    dpt_status st;
    if (vk_gemm_fits(ctx, &cur, &ch)) {
      size_t span[3];
      vk_gemm_batch_spans(&cur, &ch, span);
      st = vk_gemm_dispatch(ctx, &cur, &ch, span);
    } else {
      st = vk_gemm_split(ctx, &cur);
    }
    if (st != DPT_OK) return st;
    done += ch.items;
    cur.a.off += ch.items * bt.stride_a;
    cur.b.off += ch.items * bt.stride_b;
    cur.c.off += ch.items * bt.stride_c;
    if (bt.sum) cur.beta = 1.0f;
  }
  return DPT_OK;
}

dpt_status dpt_vk_gemm_batched(dpt_backend *be, const dpt_gemm_batched_args *a) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  vk_gemm_batch bt = {a->batch, a->stride_a, a->stride_b, a->stride_c, a->stride_c == 0};
  if (bt.sum) bt.stride_c = 0;
  if (bt.items == 1) bt.stride_a = bt.stride_b = bt.stride_c = 0; /* any stride is valid then */
  return dpt_vk_leave(be, vk_gemm_batch_run(ctx, &a->g, bt));
}
