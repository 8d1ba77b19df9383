/* The layer ops of the opencl backend: batch normalization (with a fused ReLU), average pooling,
 * dropout, layer normalization, GELU (alone and with a linear layer's bias), attention's softmax
 * and the softmax's backward (alone and fused with dropout), embedding bags, column gathers and
 * binary cross-entropy (include/dptrain/backend.h states what each computes; the kernels are in
 * kernels/layers.cl (the fused attention probabilities' too), the softmaxes' and bce_logits in
 * kernels/softmax.cl, embedding bags and column gathers in kernels/embed.cl). gemm_batched is in
 * ocl_gemm.c with the other CLBlast calls. */
#include <stdlib.h>

#include "backends/opencl/ocl_internal.h"
#include "base/error.h"
#include "base/size.h"

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
  const uint64_t u[] = {a->g.c, a->g.p, (uint64_t)a->relu};
  const dpt_ref refs[] = {a->x, a->mean, a->var, a->gamma, a->beta, a->y};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_bn_fwd, a->g.n * a->g.c * a->g.p, 3, u, 1, &a->g.eps, 6,
                             refs);
}

dpt_status dpt_ocl_bn_relu_fwd(dpt_backend *be, const dpt_bn_relu_fwd_args *a) {
  return dpt_ocl_bn_fwd(be, a);
}

dpt_status dpt_ocl_bn_bwd_reduce(dpt_backend *be, const dpt_bn_bwd_reduce_args *a) {
  dpt_ocl_ctx *c = dpt_ocl_ctx_of(be);
  dpt_ocl_args l;
  DPT_TRY(dpt_ocl_begin(&l, c, DPT_OCL_K_bn_bwd_reduce));
  size_t local = c->local_size[DPT_OCL_K_bn_bwd_reduce] * dpt_ocl_acc_bytes(&c->lim);
  dpt_ocl_arg_u64(&l, a->g.n);
  dpt_ocl_arg_u64(&l, a->g.c);
  dpt_ocl_arg_u64(&l, a->g.p);
  dpt_ocl_arg_u64(&l, (uint64_t)a->relu);
  dpt_ocl_arg_f32(&l, a->g.eps);
  dpt_ocl_arg_ref(&l, a->dy);
  dpt_ocl_arg_ref(&l, a->act);
  dpt_ocl_arg_ref(&l, a->x);
  dpt_ocl_arg_ref(&l, a->mean);
  dpt_ocl_arg_ref(&l, a->var);
  dpt_ocl_arg_ref(&l, a->sum_dy_xhat);
  dpt_ocl_arg_ref(&l, a->sum_dy);
  dpt_ocl_arg_local(&l, local);
  dpt_ocl_arg_local(&l, local);
  return dpt_ocl_launch_groups(&l, a->g.c);
}

dpt_status dpt_ocl_bn_relu_bwd_reduce(dpt_backend *be, const dpt_bn_relu_bwd_reduce_args *a) {
  return dpt_ocl_bn_bwd_reduce(be, a);
}

dpt_status dpt_ocl_bn_bwd(dpt_backend *be, const dpt_bn_bwd_args *a) {
  const uint64_t u[] = {a->g.c, a->g.p, a->count, (uint64_t)a->relu};
  const dpt_ref refs[] = {a->dy,    a->act,         a->x,      a->mean, a->var,
                          a->gamma, a->sum_dy_xhat, a->sum_dy, a->dx};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_bn_bwd, a->g.n * a->g.c * a->g.p, 4, u, 1, &a->g.eps, 9,
                             refs);
}

dpt_status dpt_ocl_bn_relu_bwd(dpt_backend *be, const dpt_bn_relu_bwd_args *a) {
  return dpt_ocl_bn_bwd(be, a);
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

/* ---- bias and GELU, fused ------------------------------------------------------------------ */

/* fwd: one work-item per element; bwd: one per column, summing its rows in order. */
dpt_status dpt_ocl_bias_gelu_fwd(dpt_backend *be, const dpt_bias_gelu_fwd_args *a) {
  const uint64_t u[] = {a->cols, (uint64_t)a->approx};
  const dpt_ref refs[] = {a->x, a->bias, a->y};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_bias_gelu_fwd, a->rows * a->cols, 2, u, 0, NULL, 3,
                             refs);
}

dpt_status dpt_ocl_bias_gelu_bwd(dpt_backend *be, const dpt_bias_gelu_bwd_args *a) {
  const uint64_t u[] = {a->rows, (uint64_t)a->approx};
  const dpt_ref refs[] = {a->x, a->dy, a->dx, a->db};
  return dpt_ocl_launch_flat(be, DPT_OCL_K_bias_gelu_bwd, a->cols, 2, u, 1, &a->beta, 4, refs);
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

/* ---- embedding bags, column gathers, binary cross-entropy ---------------------------------- */

/* ---- attention's probabilities, fused: one work-group per row (kernels/layers.cl) ----------- */

dpt_status dpt_ocl_attn_probs_fwd(dpt_backend *be, const dpt_attn_probs_fwd_args *a) {
  dpt_ocl_ctx *c = dpt_ocl_ctx_of(be);
  dpt_ocl_args l;
  DPT_TRY(dpt_ocl_begin(&l, c, DPT_OCL_K_attn_probs_fwd));
  dpt_ocl_arg_u64(&l, a->sm.g.q);
  dpt_ocl_arg_u64(&l, a->sm.g.k);
  dpt_ocl_arg_f32(&l, a->sm.scale);
  dpt_ocl_arg_i32(&l, a->sm.has_ids);
  dpt_ocl_arg_i32(&l, a->sm.pad_id);
  dpt_ocl_arg_ref(&l, a->sm.ids);
  dpt_ocl_arg_ref(&l, a->sm.probs);
  dpt_ocl_arg_i32(&l, a->has_drop);
  dpt_ocl_arg_u32(&l, a->key);
  dpt_ocl_arg_u32(&l, a->threshold);
  dpt_ocl_arg_u32(&l, a->first_row);
  dpt_ocl_arg_f32(&l, a->drop_scale);
  dpt_ocl_arg_ref(&l, a->dropped);
  dpt_ocl_arg_local(&l, c->local_size[DPT_OCL_K_attn_probs_fwd] * dpt_ocl_acc_bytes(&c->lim));
  return dpt_ocl_launch_groups(&l, a->sm.g.n * a->sm.g.q);
}

dpt_status dpt_ocl_attn_probs_bwd(dpt_backend *be, const dpt_attn_probs_bwd_args *a) {
  dpt_ocl_ctx *c = dpt_ocl_ctx_of(be);
  dpt_ocl_args l;
  DPT_TRY(dpt_ocl_begin(&l, c, DPT_OCL_K_attn_probs_bwd));
  dpt_ocl_arg_u64(&l, a->cols);
  dpt_ocl_arg_i32(&l, a->has_drop);
  dpt_ocl_arg_f32(&l, a->drop_scale);
  dpt_ocl_arg_ref(&l, a->y);
  dpt_ocl_arg_ref(&l, a->dropped);
  dpt_ocl_arg_ref(&l, a->dy);
  dpt_ocl_arg_ref(&l, a->dx);
  dpt_ocl_arg_local(&l, c->local_size[DPT_OCL_K_attn_probs_bwd] * dpt_ocl_acc_bytes(&c->lim));
  return dpt_ocl_launch_groups(&l, a->rows);
}

/* kernels/embed.cl: one work-item per output element. */
dpt_status dpt_ocl_embed_bag(dpt_backend *be, const dpt_embed_bag_args *a) {
  dpt_ocl_args l;
  DPT_TRY(dpt_ocl_begin(&l, dpt_ocl_ctx_of(be), DPT_OCL_K_embed_bag));
  dpt_ocl_arg_u64(&l, a->n * a->dim); /* out's size, checked by the wrapper */
  dpt_ocl_arg_u64(&l, a->bag);
  dpt_ocl_arg_u64(&l, a->vocab);
  dpt_ocl_arg_u64(&l, a->dim);
  dpt_ocl_arg_u64(&l, a->idx_stride);
  dpt_ocl_arg_i32(&l, a->mode == DPT_BAG_MEAN);
  dpt_ocl_arg_ref(&l, a->table);
  dpt_ocl_arg_ref(&l, a->idx);
  dpt_ocl_arg_ref(&l, a->out);
  return dpt_ocl_launch(&l, a->n * a->dim);
}

dpt_status dpt_ocl_embed_bag_bwd(dpt_backend *be, const dpt_embed_bag_bwd_args *a) {
  dpt_ocl_ctx *c = dpt_ocl_ctx_of(be);
  dpt_ocl_args l;
  DPT_TRY(dpt_ocl_begin(&l, c, DPT_OCL_K_embed_bag_bwd));
  size_t buckets = 1, items = 0;
  DPT_TRY(dpt_ocl_scatter_buckets(c, DPT_OCL_K_embed_bag_bwd, a->vocab, a->dim, "embed_bag_bwd",
                                  &buckets, &items));
  dpt_ocl_arg_u64(&l, a->n);
  dpt_ocl_arg_u64(&l, a->bag);
  dpt_ocl_arg_u64(&l, a->vocab);
  dpt_ocl_arg_u64(&l, a->dim);
  dpt_ocl_arg_u64(&l, a->idx_stride);
  dpt_ocl_arg_i32(&l, a->mode == DPT_BAG_MEAN);
  dpt_ocl_arg_u64(&l, buckets);
  dpt_ocl_arg_ref(&l, a->dout);
  dpt_ocl_arg_ref(&l, a->idx);
  dpt_ocl_arg_ref(&l, a->dtable);
  return dpt_ocl_launch(&l, items);
}

/* gather_cols and scatter_cols_add: one work-item per (row, map entry). */
static dpt_status launch_cols(dpt_backend *be, dpt_ocl_kernel k, const dpt_gather_cols_args *a) {
  const uint64_t u[] = {a->cols, a->ldx, a->ldy};
  const dpt_ref refs[] = {a->x, a->map, a->y};
  return dpt_ocl_launch_flat(be, k, a->rows * a->cols, 3, u, 0, NULL, 3, refs);
}

dpt_status dpt_ocl_gather_cols(dpt_backend *be, const dpt_gather_cols_args *a) {
  return launch_cols(be, DPT_OCL_K_gather_cols, a);
}

dpt_status dpt_ocl_scatter_cols_add(dpt_backend *be, const dpt_scatter_cols_add_args *a) {
  return launch_cols(be, DPT_OCL_K_scatter_cols_add, a);
}

/* kernels/softmax.cl: one work-item per logit; as softmax_xent, the per-logit loss and
 * correctness go to the scratch buffer (acc_t) and the host adds them in double, in order. */
dpt_status dpt_ocl_bce_logits(dpt_backend *be, const dpt_bce_logits_args *a) {
  dpt_ocl_ctx *c = dpt_ocl_ctx_of(be);
  dpt_ocl_args l;
  int want_grad = a->dlogits.buf != NULL;
  int want_stats = a->loss_sum != NULL || a->correct != NULL;
  size_t acc = dpt_ocl_acc_bytes(&c->lim);
  size_t stats_bytes = 0;
  if (want_stats && !dpt_mul_ok(a->n, 2 * acc, &stats_bytes))
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "bce_logits: %zu logits of statistics overflow",
                         a->n);
  DPT_TRY(dpt_ocl_begin(&l, c, DPT_OCL_K_bce_logits));
  if (want_stats) DPT_TRY(dpt_ocl_scratch(c, stats_bytes));
  /* Unused outputs still need a valid cl_mem argument: the logits stand in, never written. */
  cl_mem unused = dpt_ocl_mem(a->logits.buf);
  dpt_ocl_arg_u64(&l, a->n);
  dpt_ocl_arg_ref(&l, a->logits);
  dpt_ocl_arg_ref(&l, a->labels);
  dpt_ocl_arg_f32(&l, a->scale);
  dpt_ocl_arg_i32(&l, want_grad);
  dpt_ocl_arg_mem(&l, want_grad ? dpt_ocl_mem(a->dlogits.buf) : unused);
  dpt_ocl_arg_u64(&l, want_grad ? a->dlogits.off : 0);
  dpt_ocl_arg_i32(&l, want_stats);
  dpt_ocl_arg_mem(&l, want_stats ? c->scratch : unused);
  DPT_TRY(dpt_ocl_launch(&l, a->n));
  if (!want_stats) return DPT_OK;

  return dpt_ocl_sum_stats(c, a->n, stats_bytes, "bce_logits", a->loss_sum, a->correct);
}

DPT_NO_DIRECT_CONV(dpt_ocl)
