/* The layer ops of the opencl backend: batch normalization, average pooling, dropout,
 * layer normalization, GELU, attention's softmax and the softmax's backward
 * (include/dptrain/backend.h states what each computes; the kernels are in kernels/layers.cl, the
 * softmaxes' in kernels/softmax.cl). gemm_batched is in ocl_gemm.c with the other CLBlast calls. */
#include "backends/opencl/ocl_internal.h"
#include "base/error.h"

/* ---- batch normalization ------------------------------------------------------------------- */

/* bn_stats and bn_bwd_reduce: one work-group per channel, each reducing that channel's n*p
 * values in local memory (acc_t: double where the device has it). */
dpt_status dpt_ocl_bn_stats(dpt_backend *be, const dpt_bn_stats_args *a) {
  dpt_ocl_ctx *c = dpt_ocl_ctx_of(be);
  dpt_ocl_args l;
  DPT_TRY(dpt_ocl_begin(&l, c, DPT_OCL_K_bn_stats));
  dpt_ocl_arg_u64(&l, a->g.n);
  dpt_ocl_arg_u64(&l, a->g.c);
  dpt_ocl_arg_u64(&l, a->g.p);
  dpt_ocl_arg_ref(&l, a->x);
  dpt_ocl_arg_ref(&l, a->mean);
  dpt_ocl_arg_ref(&l, a->var);
  dpt_ocl_arg_local(&l, c->local_size[DPT_OCL_K_bn_stats] * dpt_ocl_acc_bytes(&c->lim));
  return dpt_ocl_launch_groups(&l, a->g.c);
}

dpt_status dpt_ocl_bn_fwd(dpt_backend *be, const dpt_bn_fwd_args *a) {
  const uint64_t u[] = {a->g.c, a->g.p};
  const dpt_ref refs[] = {a->x, a->mean, a->var, a->gamma, a->beta, a->y};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_bn_fwd, a->g.n * a->g.c * a->g.p, 2, u, 1, &a->g.eps, 6,
                             refs);
}

dpt_status dpt_ocl_bn_bwd_reduce(dpt_backend *be, const dpt_bn_bwd_reduce_args *a) {
  dpt_ocl_ctx *c = dpt_ocl_ctx_of(be);
  dpt_ocl_args l;
  DPT_TRY(dpt_ocl_begin(&l, c, DPT_OCL_K_bn_bwd_reduce));
  size_t local = c->local_size[DPT_OCL_K_bn_bwd_reduce] * dpt_ocl_acc_bytes(&c->lim);
  dpt_ocl_arg_u64(&l, a->g.n);
  dpt_ocl_arg_u64(&l, a->g.c);
  dpt_ocl_arg_u64(&l, a->g.p);
  dpt_ocl_arg_f32(&l, a->g.eps);
  dpt_ocl_arg_ref(&l, a->dy);
  dpt_ocl_arg_ref(&l, a->x);
  dpt_ocl_arg_ref(&l, a->mean);
  dpt_ocl_arg_ref(&l, a->var);
  dpt_ocl_arg_ref(&l, a->sum_dy_xhat);
  dpt_ocl_arg_ref(&l, a->sum_dy);
  dpt_ocl_arg_local(&l, local);
  dpt_ocl_arg_local(&l, local);
  return dpt_ocl_launch_groups(&l, a->g.c);
}

dpt_status dpt_ocl_bn_bwd(dpt_backend *be, const dpt_bn_bwd_args *a) {
  const uint64_t u[] = {a->g.c, a->g.p, a->count};
  const dpt_ref refs[] = {a->dy, a->x, a->mean, a->var, a->gamma, a->sum_dy_xhat, a->sum_dy, a->dx};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_bn_bwd, a->g.n * a->g.c * a->g.p, 3, u, 1, &a->g.eps, 8,
                             refs);
}

/* ---- average pooling ----------------------------------------------------------------------- */

static dpt_status launch_avgpool(dpt_backend *be, dpt_ocl_kernel k, size_t items,
                                 const dpt_avgpool_args *a) {
  const dpt_pool_geom *g = &a->g;
  const uint64_t u[] = {g->h, g->w, g->kh, g->kw, g->stride_h, g->stride_w, a->out_h, a->out_w};
  const dpt_ref refs[] = {a->in, a->out};
  return dpt_ocl_launch_flat(be, k, items, 8, u, 0, NULL, 2, refs);
}

dpt_status dpt_ocl_avgpool_fwd(dpt_backend *be, const dpt_avgpool_fwd_args *a) {
  /* one work-item per output */
  return launch_avgpool(be, DPT_OCL_K_avgpool_fwd, a->g.planes * a->out_h * a->out_w, a);
}

dpt_status dpt_ocl_avgpool_bwd(dpt_backend *be, const dpt_avgpool_bwd_args *a) {
  /* one work-item per dx element: a gather, no atomics */
  return launch_avgpool(be, DPT_OCL_K_avgpool_bwd, a->g.planes * a->g.h * a->g.w, a);
}

/* ---- dropout ------------------------------------------------------------------------------- */

dpt_status dpt_ocl_dropout(dpt_backend *be, const dpt_dropout_args *a) {
  dpt_ocl_args l;
  size_t n = a->rows * a->cols;
  DPT_TRY(dpt_ocl_begin(&l, dpt_ocl_ctx_of(be), DPT_OCL_K_dropout));
  dpt_ocl_arg_u64(&l, n);
  dpt_ocl_arg_u64(&l, a->cols);
  dpt_ocl_arg_u32(&l, a->key);
  dpt_ocl_arg_u32(&l, a->threshold);
  dpt_ocl_arg_u32(&l, a->first_row);
  dpt_ocl_arg_f32(&l, a->scale);
  dpt_ocl_arg_ref(&l, a->x);
  dpt_ocl_arg_ref(&l, a->y);
  return dpt_ocl_launch(&l, n);
}

/* ---- layer normalization ------------------------------------------------------------------- */

/* fwd and bwd: one work-item per row; bwd_params: one per column, summing rows in order. */
dpt_status dpt_ocl_layernorm_fwd(dpt_backend *be, const dpt_layernorm_fwd_args *a) {
  const uint64_t u[] = {a->g.cols};
  const dpt_ref refs[] = {a->x, a->gamma, a->beta, a->y, a->mean, a->rstd};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_layernorm_fwd, a->g.rows, 1, u, 1, &a->g.eps, 6, refs);
}

dpt_status dpt_ocl_layernorm_bwd(dpt_backend *be, const dpt_layernorm_bwd_args *a) {
  const uint64_t u[] = {a->g.cols};
  const dpt_ref refs[] = {a->dy, a->x, a->mean, a->rstd, a->gamma, a->dx};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_layernorm_bwd, a->g.rows, 1, u, 0, NULL, 6, refs);
}

dpt_status dpt_ocl_layernorm_bwd_params(dpt_backend *be, const dpt_layernorm_bwd_params_args *a) {
  const uint64_t u[] = {a->g.rows};
  const dpt_ref refs[] = {a->dy, a->x, a->mean, a->rstd, a->dgamma, a->dbeta};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_layernorm_bwd_params, a->g.cols, 1, u, 0, NULL, 6, refs);
}

/* ---- GELU ---------------------------------------------------------------------------------- */

dpt_status dpt_ocl_gelu_fwd(dpt_backend *be, const dpt_gelu_fwd_args *a) {
  const uint64_t u[] = {(uint64_t)a->approx};
  const dpt_ref refs[] = {a->x, a->y};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_gelu_fwd, a->n, 1, u, 0, NULL, 2, refs);
}

dpt_status dpt_ocl_gelu_bwd(dpt_backend *be, const dpt_gelu_bwd_args *a) {
  const uint64_t u[] = {(uint64_t)a->approx};
  const dpt_ref refs[] = {a->x, a->dy, a->y};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_gelu_bwd, a->n, 1, u, 0, NULL, 3, refs);
}

/* ---- attention's softmax ------------------------------------------------------------------- */

/* One work-group per row (kernels/softmax.cl), reducing in local memory. Without ids the
 * scores stand in for the unread ids argument (the wrapper passed them). */
dpt_status dpt_ocl_attn_softmax(dpt_backend *be, const dpt_attn_softmax_args *a) {
  dpt_ocl_ctx *c = dpt_ocl_ctx_of(be);
  dpt_ocl_args l;
  DPT_TRY(dpt_ocl_begin(&l, c, DPT_OCL_K_attn_softmax));
  dpt_ocl_arg_u64(&l, a->g.n);
  dpt_ocl_arg_u64(&l, a->g.q);
  dpt_ocl_arg_u64(&l, a->g.k);
  dpt_ocl_arg_f32(&l, a->scale);
  dpt_ocl_arg_i32(&l, a->has_ids);
  dpt_ocl_arg_i32(&l, a->pad_id);
  dpt_ocl_arg_ref(&l, a->ids);
  dpt_ocl_arg_ref(&l, a->scores);
  dpt_ocl_arg_ref(&l, a->probs);
  dpt_ocl_arg_local(&l, c->local_size[DPT_OCL_K_attn_softmax] * dpt_ocl_acc_bytes(&c->lim));
  return dpt_ocl_launch_groups(&l, a->g.heads * a->g.n * a->g.q);
}

dpt_status dpt_ocl_softmax_bwd(dpt_backend *be, const dpt_softmax_bwd_args *a) {
  dpt_ocl_ctx *c = dpt_ocl_ctx_of(be);
  dpt_ocl_args l;
  DPT_TRY(dpt_ocl_begin(&l, c, DPT_OCL_K_softmax_bwd));
  dpt_ocl_arg_u64(&l, a->cols);
  dpt_ocl_arg_ref(&l, a->y);
  dpt_ocl_arg_ref(&l, a->dy);
  dpt_ocl_arg_ref(&l, a->dx);
  dpt_ocl_arg_local(&l, c->local_size[DPT_OCL_K_softmax_bwd] * dpt_ocl_acc_bytes(&c->lim));
  return dpt_ocl_launch_groups(&l, a->rows);
}
