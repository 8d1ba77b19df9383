/* The op set on OpenCL (gemm is in ocl_gemm.c): argument lists and launch sizes for the
 * kernels of backends/opencl/kernels. Arguments were validated by backends/backend.c; element
 * counts are > 0. Results needed on the host (reductions, loss, correct count) are partials
 * the host adds in double. */
#include <math.h>
#include <stdlib.h>

#include "backends/opencl/ocl_internal.h"
#include "base/error.h"
#include "base/size.h"

dpt_status dpt_ocl_launch_flat(dpt_backend *be, dpt_ocl_kernel k, size_t items, int nu,
                               const uint64_t *u, int nf, const float *f, int nr,
                               const dpt_ref *refs) {
  dpt_ocl_args l;
  DPT_TRY(dpt_ocl_begin(&l, dpt_ocl_ctx_of(be), k));
  dpt_ocl_arg_u64(&l, items);
  for (int i = 0; i < nu; ++i)
    dpt_ocl_arg_u64(&l, u[i]);
  for (int i = 0; i < nf; ++i)
    dpt_ocl_arg_f32(&l, f[i]);
  for (int i = 0; i < nr; ++i)
    dpt_ocl_arg_ref(&l, refs[i]);
  return dpt_ocl_launch(&l, items);
}

dpt_status dpt_ocl_relu_fwd(dpt_backend *be, const dpt_relu_fwd_args *a) {
  const dpt_ref refs[] = {a->x, a->y};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_relu_fwd, a->n, 0, NULL, 0, NULL, 2, refs);
}

dpt_status dpt_ocl_add_relu(dpt_backend *be, const dpt_add_relu_args *a) {
  const dpt_ref refs[] = {a->a, a->b, a->y};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_add_relu, a->n, 0, NULL, 0, NULL, 3, refs);
}

dpt_status dpt_ocl_relu_bwd(dpt_backend *be, const dpt_relu_bwd_args *a) {
  const dpt_ref refs[] = {a->x, a->dy, a->dx};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_relu_bwd, a->n, 0, NULL, 0, NULL, 3, refs);
}

dpt_status dpt_ocl_bias_add(dpt_backend *be, const dpt_bias_add_args *a) {
  const uint64_t u[] = {a->cols};
  const dpt_ref refs[] = {a->y, a->bias};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_bias_add, a->rows * a->cols, 1, u, 0, NULL, 2, refs);
}

dpt_status dpt_ocl_bias_grad(dpt_backend *be, const dpt_bias_grad_args *a) {
  /* rows == 0: dy may be an empty tensor; its buffer is still a valid argument. */
  const uint64_t u[] = {a->rows};
  const dpt_ref refs[] = {a->dy, a->db};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_bias_grad, a->cols, 1, u, 1, &a->beta, 2, refs);
}

dpt_status dpt_ocl_axpy(dpt_backend *be, const dpt_axpy_args *a) {
  const dpt_ref refs[] = {a->x, a->y};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_axpy, a->n, 0, NULL, 1, &a->alpha, 2, refs);
}

dpt_status dpt_ocl_scale(dpt_backend *be, const dpt_scale_args *a) {
  return dpt_ocl_launch_flat(be, DPT_OCL_K_scale, a->n, 0, NULL, 1, &a->alpha, 1, &a->x);
}

/* ---- reductions ---------------------------------------------------------------------------- */

/* Work-groups of a first-stage reduction over n elements: enough to fill every compute unit a
 * few times over, never more than the elements need, and few enough that reading the partials
 * back costs nothing. */
static size_t reduce_groups(const dpt_ocl_ctx *c, dpt_ocl_kernel k, size_t n) {
  size_t local = c->local_size[k];
  size_t want = (size_t)c->lim.compute_units * 4;
  if (want < 16) want = 16;
  if (want > 1024) want = 1024;
  size_t need = n / local + (n % local != 0);
  return need < want ? need : want;
}

/* Runs reduction kernel k over x[n] and returns the per-group partials in part (malloc'ed,
 * *groups entries of elem_bytes). `square` is reduce_sum's second argument. */
static dpt_status reduce_partials(dpt_backend *be, dpt_ocl_kernel k, int square, size_t n,
                                  dpt_ref x, size_t elem_bytes, void **part, size_t *groups,
                                  const char *what) {
  dpt_ocl_ctx *c = dpt_ocl_ctx_of(be);
  dpt_ocl_args l;
  *part = NULL;
  DPT_TRY(dpt_ocl_begin(&l, c, k));
  size_t g = reduce_groups(c, k, n);
  DPT_TRY(dpt_ocl_scratch(c, g * elem_bytes));
  dpt_ocl_arg_u64(&l, n);
  if (k == DPT_OCL_K_reduce_sum) dpt_ocl_arg_i32(&l, square);
  dpt_ocl_arg_ref(&l, x);
  dpt_ocl_arg_mem(&l, c->scratch);
  dpt_ocl_arg_local(&l, c->local_size[k] * elem_bytes);
  DPT_TRY(dpt_ocl_launch_groups(&l, g));
  void *host = malloc(g * elem_bytes);
  if (!host) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
  dpt_status st = dpt_ocl_read_scratch(c, host, g * elem_bytes, what);
  if (st != DPT_OK) {
    free(host);
    return st;
  }
  *part = host;
  *groups = g;
  return DPT_OK;
}

/* Sum in double of n accumulators of the device's acc_t. */
static double sum_acc(const dpt_ocl_ctx *c, const void *part, size_t n) {
  double s = 0.0;
  if (c->lim.fp64) {
    for (size_t i = 0; i < n; ++i)
      s += ((const cl_double *)part)[i];
  } else {
    for (size_t i = 0; i < n; ++i)
      s += ((const cl_float *)part)[i];
  }
  return s;
}

static dpt_status reduce_f64(dpt_backend *be, int square, const dpt_reduce_args *a,
                             const char *what) {
  void *part;
  size_t groups;
  DPT_TRY(reduce_partials(be, DPT_OCL_K_reduce_sum, square, a->n, a->x,
                          dpt_ocl_acc_bytes(&dpt_ocl_ctx_of(be)->lim), &part, &groups, what));
  *a->out = sum_acc(dpt_ocl_ctx_of(be), part, groups);
  free(part);
  return DPT_OK;
}

dpt_status dpt_ocl_sum(dpt_backend *be, const dpt_sum_args *a) {
  return reduce_f64(be, 0, a, "sum");
}

dpt_status dpt_ocl_sumsq(dpt_backend *be, const dpt_sumsq_args *a) {
  return reduce_f64(be, 1, a, "sumsq");
}

dpt_status dpt_ocl_count_nonfinite(dpt_backend *be, const dpt_count_nonfinite_args *a) {
  void *part;
  size_t groups;
  DPT_TRY(reduce_partials(be, DPT_OCL_K_count_nonfinite, 0, a->n, a->x, sizeof(cl_ulong), &part,
                          &groups, "count_nonfinite"));
  uint64_t total = 0;
  for (size_t i = 0; i < groups; ++i)
    total += ((const cl_ulong *)part)[i];
  free(part);
  *a->out = total;
  return DPT_OK;
}

/* ---- softmax cross-entropy ----------------------------------------------------------------- */

/* Adds up the per-row (loss, correct) pairs a loss kernel left in the scratch buffer (doubles
 * where the device has them, else floats), in row order, into the host's loss_sum and correct
 * (either may be NULL). */
dpt_status dpt_ocl_sum_stats(dpt_ocl_ctx *c, size_t rows, size_t stats_bytes, const char *what,
                             double *loss_sum, int64_t *correct) {
  void *stats = malloc(stats_bytes);
  if (!stats) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
  dpt_status st = dpt_ocl_read_scratch(c, stats, stats_bytes, what);
  if (st == DPT_OK) {
    double loss = 0.0;
    int64_t right = 0;
    for (size_t r = 0; r < rows; ++r) {
      double lr, cr;
      if (c->lim.fp64) {
        lr = ((const cl_double *)stats)[2 * r];
        cr = ((const cl_double *)stats)[2 * r + 1];
      } else {
        lr = ((const cl_float *)stats)[2 * r];
        cr = ((const cl_float *)stats)[2 * r + 1];
      }
      loss += lr;
      right += cr != 0.0;
    }
    if (loss_sum) *loss_sum = loss;
    if (correct) *correct = right;
  }
  free(stats);
  return st;
}

dpt_status dpt_ocl_softmax_xent(dpt_backend *be, const dpt_softmax_xent_args *a) {
  dpt_ocl_ctx *c = dpt_ocl_ctx_of(be);
  dpt_ocl_args l;
  int want_grad = a->dlogits.buf != NULL;
  int want_stats = a->loss_sum != NULL || a->correct != NULL;
  size_t acc = dpt_ocl_acc_bytes(&c->lim);
  size_t stats_bytes = 0;
  if (want_stats && (!dpt_mul_ok(a->rows, 2 * acc, &stats_bytes)))
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "softmax_xent: %zu rows of statistics overflow",
                         a->rows);
  DPT_TRY(dpt_ocl_begin(&l, c, DPT_OCL_K_softmax_xent));
  if (want_stats) DPT_TRY(dpt_ocl_scratch(c, stats_bytes));
  size_t local = c->local_size[DPT_OCL_K_softmax_xent];
  /* Unused outputs still need a valid cl_mem argument: the logits stand in, never written. */
  cl_mem unused = dpt_ocl_mem(a->logits.buf);
  dpt_ocl_arg_u64(&l, a->cols);
  dpt_ocl_arg_ref(&l, a->logits);
  dpt_ocl_arg_ref(&l, a->labels);
  dpt_ocl_arg_f32(&l, a->scale);
  dpt_ocl_arg_i32(&l, want_grad);
  dpt_ocl_arg_mem(&l, want_grad ? dpt_ocl_mem(a->dlogits.buf) : unused);
  dpt_ocl_arg_u64(&l, want_grad ? a->dlogits.off : 0);
  dpt_ocl_arg_i32(&l, want_stats);
  dpt_ocl_arg_mem(&l, want_stats ? c->scratch : unused);
  dpt_ocl_arg_local(&l, local * sizeof(cl_float));
  dpt_ocl_arg_local(&l, local * sizeof(cl_ulong));
  dpt_ocl_arg_local(&l, local * acc);
  DPT_TRY(dpt_ocl_launch_groups(&l, a->rows));
  if (!want_stats) return DPT_OK;

  return dpt_ocl_sum_stats(c, a->rows, stats_bytes, "softmax_xent", a->loss_sum, a->correct);
}

/* ---- convolution and pooling --------------------------------------------------------------- */

/* im2col / col2im: the kernel's geometry arguments (kernels/conv.cl). */
static dpt_status launch_conv(dpt_backend *be, dpt_ocl_kernel k, size_t items,
                              const dpt_conv_geom *g, size_t oh, size_t ow, dpt_ref in,
                              dpt_ref out) {
  const uint64_t u[] = {g->c,        g->h,     g->w,     g->kh, g->kw, g->stride_h,
                        g->stride_w, g->pad_h, g->pad_w, oh,    ow};
  const dpt_ref refs[] = {in, out};
  return dpt_ocl_launch_flat(be, k, items, 11, u, 0, NULL, 2, refs);
}

dpt_status dpt_ocl_im2col(dpt_backend *be, const dpt_im2col_args *a) {
  const dpt_conv_geom *g = &a->g;
  /* One work-item per col element; the product was checked by the wrapper. */
  size_t total = g->n * g->c * g->kh * g->kw * a->out_h * a->out_w;
  return launch_conv(be, DPT_OCL_K_im2col, total, g, a->out_h, a->out_w, a->x, a->col);
}

dpt_status dpt_ocl_col2im(dpt_backend *be, const dpt_col2im_args *a) {
  const dpt_conv_geom *g = &a->g;
  size_t total = g->n * g->c * g->h * g->w; /* one work-item per dx element */
  return launch_conv(be, DPT_OCL_K_col2im, total, g, a->out_h, a->out_w, a->col, a->dx);
}

/* maxpool_fwd / maxpool_bwd: the kernel's geometry arguments (kernels/conv.cl). */
static dpt_status launch_pool(dpt_backend *be, dpt_ocl_kernel k, size_t items,
                              const dpt_pool_geom *g, size_t oh, size_t ow, const dpt_ref *refs) {
  const uint64_t u[] = {g->h, g->w, g->kh, g->kw, g->stride_h, g->stride_w, oh, ow};
  return dpt_ocl_launch_flat(be, k, items, 8, u, 0, NULL, 3, refs);
}

dpt_status dpt_ocl_maxpool_fwd(dpt_backend *be, const dpt_maxpool_fwd_args *a) {
  const dpt_ref refs[] = {a->x, a->y, a->argmax};
  size_t total = a->g.planes * a->out_h * a->out_w; /* one work-item per output */
  return launch_pool(be, DPT_OCL_K_maxpool_fwd, total, &a->g, a->out_h, a->out_w, refs);
}

dpt_status dpt_ocl_maxpool_bwd(dpt_backend *be, const dpt_maxpool_bwd_args *a) {
  const dpt_ref refs[] = {a->dy, a->argmax, a->dx};
  size_t total = a->g.planes * a->g.h * a->g.w; /* one work-item per dx element */
  return launch_pool(be, DPT_OCL_K_maxpool_bwd, total, &a->g, a->out_h, a->out_w, refs);
}

/* ---- embeddings ---------------------------------------------------------------------------- */

dpt_status dpt_ocl_embed_gather(dpt_backend *be, const dpt_embed_gather_args *a) {
  const uint64_t u[] = {a->vocab, a->dim};
  const dpt_ref refs[] = {a->table, a->idx, a->out};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_embed_gather, a->n * a->dim, 2, u, 0, NULL, 3, refs);
}

/* Buckets of the embedding scatters (embed_scatter_add, embed_bag_bwd; kernels/embed.cl): work-item
 * (b, d) owns column d of the rows k with k % buckets == b. Enough work-items (buckets * dim,
 * into *items) to fill the device, but at most 64 buckets since every work-item reads all the
 * indices. */
dpt_status dpt_ocl_scatter_buckets(const dpt_ocl_ctx *c, dpt_ocl_kernel k, size_t vocab, size_t dim,
                                   const char *what, size_t *buckets, size_t *items) {
  size_t fill = (size_t)c->lim.compute_units * c->local_size[k];
  size_t b = fill / dim + (fill % dim != 0);
  if (b > 64) b = 64;
  if (b > vocab) b = vocab;
  if (b < 1) b = 1;
  *buckets = b;
  if (!dpt_mul_ok(b, dim, items))
    return dpt_set_error(DPT_ERR_UNSUPPORTED, "%s: dim %zu too large", what, dim);
  return DPT_OK;
}

dpt_status dpt_ocl_embed_scatter_add(dpt_backend *be, const dpt_embed_scatter_add_args *a) {
  dpt_ocl_ctx *c = dpt_ocl_ctx_of(be);
  dpt_ocl_args l;
  DPT_TRY(dpt_ocl_begin(&l, c, DPT_OCL_K_embed_scatter_add));
  size_t buckets = 1, items = 0;
  DPT_TRY(dpt_ocl_scatter_buckets(c, DPT_OCL_K_embed_scatter_add, a->vocab, a->dim,
                                  "embed_scatter_add", &buckets, &items));
  dpt_ocl_arg_u64(&l, a->n);
  dpt_ocl_arg_u64(&l, a->vocab);
  dpt_ocl_arg_u64(&l, a->dim);
  dpt_ocl_arg_u64(&l, buckets);
  dpt_ocl_arg_ref(&l, a->dout);
  dpt_ocl_arg_ref(&l, a->idx);
  dpt_ocl_arg_ref(&l, a->dtable);
  return dpt_ocl_launch(&l, items);
}

/* ---- optimizers ---------------------------------------------------------------------------- */

dpt_status dpt_ocl_sgd_update(dpt_backend *be, const dpt_sgd_update_args *a) {
  dpt_ocl_args l;
  int has_velocity = a->velocity.buf != NULL;
  DPT_TRY(dpt_ocl_begin(&l, dpt_ocl_ctx_of(be), DPT_OCL_K_sgd_update));
  dpt_ocl_arg_u64(&l, a->n);
  dpt_ocl_arg_f32(&l, a->p.lr);
  dpt_ocl_arg_f32(&l, a->p.momentum);
  dpt_ocl_arg_f32(&l, a->p.weight_decay);
  dpt_ocl_arg_i32(&l, a->p.nesterov != 0);
  dpt_ocl_arg_i32(&l, has_velocity);
  dpt_ocl_arg_ref(&l, a->w);
  dpt_ocl_arg_ref(&l, a->grad);
  /* Without velocity the kernel never touches it: w stands in as a valid argument. */
  dpt_ocl_arg_ref(&l, has_velocity ? a->velocity : a->w);
  return dpt_ocl_launch(&l, a->n);
}

dpt_status dpt_ocl_adamw_update(dpt_backend *be, const dpt_adamw_update_args *a) {
  const dpt_adamw_params *p = &a->p;
  const dpt_adamw_scalars k = dpt_adamw_scalars_of(p); /* order: kernels/optim.cl */
  const float scalars[] = {p->beta1,   p->beta2, p->eps,         k.step_size,
                           k.bc2_sqrt, k.decay,  k.one_minus_b1, k.one_minus_b2};
  const dpt_ref refs[] = {a->w, a->grad, a->m, a->v};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_adamw_update, a->n, 0, NULL, 8, scalars, 4, refs);
}

/* ---- float16, bfloat16 ---------------------------------------------------------------------- */

dpt_status dpt_ocl_f32_to_f16(dpt_backend *be, const dpt_f32_to_f16_args *a) {
  const dpt_ref refs[] = {a->src, a->dst};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_f32_to_f16, a->n, 0, NULL, 0, NULL, 2, refs);
}

dpt_status dpt_ocl_f16_to_f32(dpt_backend *be, const dpt_f16_to_f32_args *a) {
  const dpt_ref refs[] = {a->src, a->dst};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_f16_to_f32, a->n, 0, NULL, 0, NULL, 2, refs);
}

dpt_status dpt_ocl_f32_to_bf16(dpt_backend *be, const dpt_f32_to_bf16_args *a) {
  const dpt_ref refs[] = {a->src, a->dst};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_f32_to_bf16, a->n, 0, NULL, 0, NULL, 2, refs);
}

dpt_status dpt_ocl_bf16_to_f32(dpt_backend *be, const dpt_bf16_to_f32_args *a) {
  const dpt_ref refs[] = {a->src, a->dst};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_bf16_to_f32, a->n, 0, NULL, 0, NULL, 2, refs);
}
