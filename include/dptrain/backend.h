/* dptrain: compute backends, device memory and the op set (advanced tier; backend kinds, devices
 * and creating a backend: dptrain/device.h).
 *
 * A dpt_backend is one device driven through one API (CPU, OpenCL, Vulkan). It owns device
 * memory (dpt_buffer), host<->device transfers and every op of the op set below. Work
 * submitted to a backend may run asynchronously; dpt_buffer_download() and
 * dpt_backend_synchronize() wait for it. Every call on a backend takes the backend's lock
 * (a recursive mutex, ~20 ns when uncontended) around the backend's own code, so calls from
 * several threads are serialized, not concurrent: what a nonblocking collective needs (its
 * progress thread downloads and uploads while the caller runs ops, comm.h). How much then
 * truly overlaps: CPU ops run on the calling thread, and a collective works on the other
 * ranges in place; on OpenCL and Vulkan a nonblocking collective's transfers wait only for the
 * work submitted before it started (OpenCL: a nonblocking read enqueued by the start call;
 * Vulkan: for that batch, then a copy), so the device goes on with the work
 * submitted after it (docs/collectives.md). A thread still must not free a buffer another
 * thread uses. Different backends never wait for each other.
 *
 * Conventions of the op set:
 *   - tensors are float32, row-major, unless said (labels and indices are int32, half
 *     precision is IEEE binary16 stored as uint16);
 *   - every tensor argument is a (buffer, offset) pair; offsets count ELEMENTS of the
 *     tensor's own type from the start of the buffer; memory calls (upload, download, copy,
 *     fill) count BYTES;
 *   - every buffer of one call belongs to the same backend;
 *   - an element count of zero is legal and does nothing (unless said otherwise);
 *   - outputs never alias inputs unless said;
 *   - a backend that lacks an op returns DPT_ERR_UNSUPPORTED, never wrong results.
 * Every call checks its arguments (NULL handles, overflowing sizes, ranges past the end of a
 * buffer) and returns DPT_ERR_INVALID_ARG with a message naming the argument.
 */
#ifndef DPTRAIN_BACKEND_H
#define DPTRAIN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/device.h"
#include "dptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A range of elements: [offset, offset + count). */
typedef struct dpt_range {
  size_t offset, count;
} dpt_range;

/* Waits until all work submitted to the backend has finished. */
DPT_API dpt_status dpt_backend_synchronize(dpt_backend *backend);
/* From now on, results that depend only on the shapes and values, not on thread counts: the CPU
 * backend runs OpenBLAS on one thread (process-wide: every CPU backend of the process); the
 * OpenCL and Vulkan backends reduce without atomics already. dptrain's deterministic training
 * calls it. */
DPT_API dpt_status dpt_backend_set_deterministic(dpt_backend *backend);

/* ---- memory ------------------------------------------------------------------------------ */

/* Allocates `bytes` (> 0) of device memory; contents are undefined. */
DPT_API dpt_status dpt_buffer_alloc(dpt_backend *backend, size_t bytes, dpt_buffer **out);
/* NULL does nothing. */
DPT_API void dpt_buffer_free(dpt_buffer *buffer);
DPT_API size_t dpt_buffer_size(const dpt_buffer *buffer);
DPT_API dpt_backend *dpt_buffer_backend(const dpt_buffer *buffer);
/* Host -> device: copies `bytes` from `src` to the buffer at byte `offset`. The host memory
 * may be reused as soon as the call returns. */
DPT_API dpt_status dpt_buffer_upload(dpt_buffer *dst, size_t offset, const void *src, size_t bytes);
/* Device -> host: waits for pending work writing the buffer, then copies. */
DPT_API dpt_status dpt_buffer_download(const dpt_buffer *src, size_t offset, void *dst,
                                       size_t bytes);
/* Device -> device within one backend. Ranges must not overlap when src == dst. */
DPT_API dpt_status dpt_buffer_copy(dpt_buffer *dst, size_t dst_offset, const dpt_buffer *src,
                                   size_t src_offset, size_t bytes);
/* Fills `count` float32 elements starting at ELEMENT offset `offset` with `value`. */
DPT_API dpt_status dpt_buffer_fill_f32(dpt_buffer *dst, size_t offset, size_t count, float value);

/* ---- the op set ---------------------------------------------------------------------------
 * The one list of ops: X(ENUM_SUFFIX, lower_name). Adding an op: add it here, add its
 * argument struct and entry point (backends/backend_impl.h, backends/backend.c), implement
 * it in each backend, add its case to tests/backends/conformance_cases.c. */
#define DPT_OP_MAP(X)                                                                              \
  X(GEMM, gemm)                                                                                    \
  X(BIAS_ADD, bias_add)                                                                            \
  X(BIAS_GRAD, bias_grad)                                                                          \
  X(RELU_FWD, relu_fwd)                                                                            \
  X(RELU_BWD, relu_bwd)                                                                            \
  X(ADD_RELU, add_relu)                                                                            \
  X(SOFTMAX_XENT, softmax_xent)                                                                    \
  X(IM2COL, im2col)                                                                                \
  X(COL2IM, col2im)                                                                                \
  X(MAXPOOL_FWD, maxpool_fwd)                                                                      \
  X(MAXPOOL_BWD, maxpool_bwd)                                                                      \
  X(EMBED_GATHER, embed_gather)                                                                    \
  X(EMBED_SCATTER_ADD, embed_scatter_add)                                                          \
  X(AXPY, axpy)                                                                                    \
  X(SCALE, scale)                                                                                  \
  X(SUM, sum)                                                                                      \
  X(SUMSQ, sumsq)                                                                                  \
  X(COUNT_NONFINITE, count_nonfinite)                                                              \
  X(SGD_UPDATE, sgd_update)                                                                        \
  X(ADAMW_UPDATE, adamw_update)                                                                    \
  X(F32_TO_F16, f32_to_f16)                                                                        \
  X(F16_TO_F32, f16_to_f32)                                                                        \
  X(F32_TO_BF16, f32_to_bf16)                                                                      \
  X(BF16_TO_F32, bf16_to_f32)                                                                      \
  X(GEMM_BATCHED, gemm_batched)                                                                    \
  X(BN_STATS, bn_stats)                                                                            \
  X(BN_FWD, bn_fwd)                                                                                \
  X(BN_BWD_REDUCE, bn_bwd_reduce)                                                                  \
  X(BN_BWD, bn_bwd)                                                                                \
  X(BN_RELU_FWD, bn_relu_fwd)                                                                      \
  X(BN_RELU_BWD_REDUCE, bn_relu_bwd_reduce)                                                        \
  X(BN_RELU_BWD, bn_relu_bwd)                                                                      \
  X(AVGPOOL_FWD, avgpool_fwd)                                                                      \
  X(AVGPOOL_BWD, avgpool_bwd)                                                                      \
  X(DROPOUT, dropout)                                                                              \
  X(LAYERNORM_FWD, layernorm_fwd)                                                                  \
  X(LAYERNORM_BWD, layernorm_bwd)                                                                  \
  X(LAYERNORM_BWD_PARAMS, layernorm_bwd_params)                                                    \
  X(GELU_FWD, gelu_fwd)                                                                            \
  X(GELU_BWD, gelu_bwd)                                                                            \
  X(ATTN_SOFTMAX, attn_softmax)                                                                    \
  X(SOFTMAX_BWD, softmax_bwd)                                                                      \
  X(EMBED_BAG, embed_bag)                                                                          \
  X(EMBED_BAG_BWD, embed_bag_bwd)                                                                  \
  X(GATHER_COLS, gather_cols)                                                                      \
  X(SCATTER_COLS_ADD, scatter_cols_add)                                                            \
  X(BCE_LOGITS, bce_logits)                                                                        \
  X(CONV2D_FWD, conv2d_fwd)                                                                        \
  X(CONV2D_BWD_DATA, conv2d_bwd_data)                                                              \
  X(CONV2D_BWD_WEIGHTS, conv2d_bwd_weights)                                                        \
  X(BIAS_GELU_FWD, bias_gelu_fwd)                                                                  \
  X(BIAS_GELU_BWD, bias_gelu_bwd)                                                                  \
  X(ATTN_PROBS_FWD, attn_probs_fwd)                                                                \
  X(ATTN_PROBS_BWD, attn_probs_bwd)

typedef enum dpt_op {
#define DPT_OP_ENUM_(NAME, name) DPT_OP_##NAME,
  DPT_OP_MAP(DPT_OP_ENUM_)
#undef DPT_OP_ENUM_
      DPT_OP_COUNT
} dpt_op;

/* "gemm", "bias_add", ...; NULL outside the list. */
DPT_API const char *dpt_op_name(dpt_op op);
/* 1 if the backend implements the op, else 0. */
DPT_API int dpt_backend_supports(const dpt_backend *backend, dpt_op op);

/* C[m,n] = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T.
 * A: rows-major [m,k] with leading dimension lda >= k when !trans_a, else [k,m] with lda >= m.
 * B: [k,n] with ldb >= n when !trans_b, else [n,k] with ldb >= k.
 * C: [m,n] with ldc >= n. With beta == 0, C is not read (NaN in C does not propagate); with
 * alpha == 0, A and B are not read (C = beta * C), as in BLAS.
 * m, n == 0 do nothing; k == 0 scales C by beta. */
DPT_API dpt_status dpt_gemm(dpt_backend *be, int trans_a, int trans_b, size_t m, size_t n, size_t k,
                            float alpha, const dpt_buffer *a, size_t a_off, size_t lda,
                            const dpt_buffer *b, size_t b_off, size_t ldb, float beta,
                            dpt_buffer *c, size_t c_off, size_t ldc);

/* y[r,c] += bias[c] for y [rows, cols]. */
DPT_API dpt_status dpt_bias_add(dpt_backend *be, size_t rows, size_t cols, dpt_buffer *y,
                                size_t y_off, const dpt_buffer *bias, size_t bias_off);

/* db[c] = beta * db[c] + sum_r dy[r,c] for dy [rows, cols], db [cols]. With beta == 0, db is
 * not read. rows == 0 gives db = beta * db. */
DPT_API dpt_status dpt_bias_grad(dpt_backend *be, size_t rows, size_t cols, const dpt_buffer *dy,
                                 size_t dy_off, float beta, dpt_buffer *db, size_t db_off);

/* y = max(x, 0) over n elements; NaN in x gives NaN in y (as PyTorch's relu). y may equal x
 * (same buffer and offset: in place). */
DPT_API dpt_status dpt_relu_fwd(dpt_backend *be, size_t n, const dpt_buffer *x, size_t x_off,
                                dpt_buffer *y, size_t y_off);

/* dx = dy where x > 0, else 0, over n elements (x is the forward input or output). dx may
 * equal dy (in place). */
DPT_API dpt_status dpt_relu_bwd(dpt_backend *be, size_t n, const dpt_buffer *x, size_t x_off,
                                const dpt_buffer *dy, size_t dy_off, dpt_buffer *dx, size_t dx_off);

/* y = max(a + b, 0) over n elements (the sum in float; NaN kept as dpt_relu_fwd): a residual
 * sum with the ReLU after it in one pass. y may equal a or b (in place). Its gradient is
 * dpt_relu_bwd's over y, for both inputs. */
DPT_API dpt_status dpt_add_relu(dpt_backend *be, size_t n, const dpt_buffer *a, size_t a_off,
                                const dpt_buffer *b, size_t b_off, dpt_buffer *y, size_t y_off);

/* Softmax cross-entropy over logits [rows, cols] with int32 labels [rows]:
 *   p = softmax(logits[r]);  loss_r = -log p[label_r];
 *   dlogits[r] = scale * (p - onehot(label_r))      (dlogits may be NULL: no gradient)
 *   *loss_sum = sum_r loss_r (unscaled, accumulated in double)   (may be NULL)
 *   *correct = number of rows whose first maximal logit is at label_r (may be NULL)
 * A label equal to DPT_IGNORE_INDEX makes the row count for nothing: no loss, a zero gradient
 * row, never correct (PyTorch's ignore_index). Any other label outside [0, cols) makes that
 * row's loss NaN, its gradient row zero, and it is never correct. Requesting loss_sum or
 * correct waits for the result. cols >= 1. */
DPT_API dpt_status dpt_softmax_xent(dpt_backend *be, size_t rows, size_t cols,
                                    const dpt_buffer *logits, size_t logits_off,
                                    const dpt_buffer *labels, size_t labels_off, float scale,
                                    dpt_buffer *dlogits, size_t dlogits_off, double *loss_sum,
                                    int64_t *correct);

/* Convolution geometry shared by im2col / col2im. out_h = (h + 2*pad_h - kh) / stride_h + 1,
 * likewise out_w; both must be >= 1, and so must h and w. */
typedef struct dpt_conv_geom {
  size_t n, c, h, w;         /* input batch, channels, height, width: x is [n, c, h, w] */
  size_t kh, kw;             /* kernel size, >= 1 */
  size_t stride_h, stride_w; /* >= 1 */
  size_t pad_h, pad_w;       /* zero padding on each side */
} dpt_conv_geom;

/* Output height/width for a geometry; DPT_ERR_INVALID_ARG if it is not valid. */
DPT_API dpt_status dpt_conv_out_size(const dpt_conv_geom *g, size_t *out_h, size_t *out_w);

/* col[i, c*kh*kw + ki*kw + kj, oy*out_w + ox] = x[i, c, oy*sh - ph + ki, ox*sw - pw + kj]
 * (0 outside the image): col is [n, c*kh*kw, out_h*out_w], one gemm operand per image. */
DPT_API dpt_status dpt_im2col(dpt_backend *be, const dpt_conv_geom *g, const dpt_buffer *x,
                              size_t x_off, dpt_buffer *col, size_t col_off);

/* The adjoint of im2col: dx = sum of col entries over every position that maps to it
 * (dx [n,c,h,w] is overwritten). */
DPT_API dpt_status dpt_col2im(dpt_backend *be, const dpt_conv_geom *g, const dpt_buffer *col,
                              size_t col_off, dpt_buffer *dx, size_t dx_off);

/* Direct convolution, the alternative to im2col + gemm where a backend has it (CPU with
 * oneDNN; dpt_backend_supports says). x [n, c, h, w], w [co, c, kh, kw], y [n, co, oh, ow].
 * fwd: y = conv(x, w) + bias[co] (bias may be NULL: none). */
DPT_API dpt_status dpt_conv2d_fwd(dpt_backend *be, const dpt_conv_geom *g, size_t co,
                                  const dpt_buffer *x, size_t x_off, const dpt_buffer *w,
                                  size_t w_off, const dpt_buffer *bias, size_t bias_off,
                                  dpt_buffer *y, size_t y_off);
/* dx = the gradient of conv(x, w) with respect to x, given dy (dx is overwritten). */
DPT_API dpt_status dpt_conv2d_bwd_data(dpt_backend *be, const dpt_conv_geom *g, size_t co,
                                       const dpt_buffer *dy, size_t dy_off, const dpt_buffer *w,
                                       size_t w_off, dpt_buffer *dx, size_t dx_off);
/* dw [co, c, kh, kw] = sum over the batch of dy (x) x; db[co] (may be NULL) = sum of dy over
 * the batch and the plane. Both overwritten. */
DPT_API dpt_status dpt_conv2d_bwd_weights(dpt_backend *be, const dpt_conv_geom *g, size_t co,
                                          const dpt_buffer *x, size_t x_off, const dpt_buffer *dy,
                                          size_t dy_off, dpt_buffer *dw, size_t dw_off,
                                          dpt_buffer *db, size_t db_off);

/* Max-pool geometry: x is [planes, h, w] (planes = batch * channels), no padding,
 * out_h = (h - kh) / stride_h + 1 >= 1, likewise out_w. */
typedef struct dpt_pool_geom {
  size_t planes, h, w;
  size_t kh, kw;
  size_t stride_h, stride_w;
} dpt_pool_geom;

DPT_API dpt_status dpt_pool_out_size(const dpt_pool_geom *g, size_t *out_h, size_t *out_w);

/* y[p, oy, ox] = max over the window; argmax[p, oy, ox] (int32) = index iy*w + ix within the
 * plane of the first maximal element (row-major scan order). A window holding NaN gives NaN,
 * with argmax at its first NaN. */
DPT_API dpt_status dpt_maxpool_fwd(dpt_backend *be, const dpt_pool_geom *g, const dpt_buffer *x,
                                   size_t x_off, dpt_buffer *y, size_t y_off, dpt_buffer *argmax,
                                   size_t argmax_off);

/* dx [planes, h, w] is overwritten: each dy element is added to dx at its argmax, which must
 * come from dpt_maxpool_fwd with the same geometry (an index inside the element's window). */
DPT_API dpt_status dpt_maxpool_bwd(dpt_backend *be, const dpt_pool_geom *g, const dpt_buffer *dy,
                                   size_t dy_off, const dpt_buffer *argmax, size_t argmax_off,
                                   dpt_buffer *dx, size_t dx_off);

/* out[i, :] = table[idx[i], :] for table [vocab, dim], idx int32 [n], out [n, dim]. An index
 * outside [0, vocab) gives a row of NaN (so the non-finite check catches it). */
DPT_API dpt_status dpt_embed_gather(dpt_backend *be, size_t n, size_t vocab, size_t dim,
                                    const dpt_buffer *table, size_t table_off,
                                    const dpt_buffer *idx, size_t idx_off, dpt_buffer *out,
                                    size_t out_off);

/* dtable[idx[i], :] += dout[i, :] (accumulates; repeated indices add up). Indices outside
 * [0, vocab) are ignored. */
DPT_API dpt_status dpt_embed_scatter_add(dpt_backend *be, size_t n, size_t vocab, size_t dim,
                                         const dpt_buffer *dout, size_t dout_off,
                                         const dpt_buffer *idx, size_t idx_off, dpt_buffer *dtable,
                                         size_t dtable_off);

/* y += alpha * x over n elements. */
DPT_API dpt_status dpt_axpy(dpt_backend *be, size_t n, float alpha, const dpt_buffer *x,
                            size_t x_off, dpt_buffer *y, size_t y_off);

/* x *= alpha over n elements. */
DPT_API dpt_status dpt_scale(dpt_backend *be, size_t n, float alpha, dpt_buffer *x, size_t x_off);

/* Reductions over n elements, result on the host (waits). Sums are accumulated at least in
 * double precision on the CPU backend; other backends may use float partial sums. */
DPT_API dpt_status dpt_sum(dpt_backend *be, size_t n, const dpt_buffer *x, size_t x_off,
                           double *out);
DPT_API dpt_status dpt_sumsq(dpt_backend *be, size_t n, const dpt_buffer *x, size_t x_off,
                             double *out);
/* Number of NaN and infinite elements. */
DPT_API dpt_status dpt_count_nonfinite(dpt_backend *be, size_t n, const dpt_buffer *x, size_t x_off,
                                       uint64_t *out);

/* SGD with momentum, PyTorch semantics (dampening 0):
 *   g = grad + weight_decay * w;  v = momentum * v + g;
 *   step = nesterov ? g + momentum * v : v;  w -= lr * step.
 * velocity may be NULL when momentum == 0. All tensors have n elements. */
typedef struct dpt_sgd_params {
  float lr, momentum, weight_decay;
  int nesterov;
} dpt_sgd_params;
DPT_API dpt_status dpt_sgd_update(dpt_backend *be, size_t n, const dpt_sgd_params *p, dpt_buffer *w,
                                  size_t w_off, const dpt_buffer *grad, size_t grad_off,
                                  dpt_buffer *velocity, size_t velocity_off);

/* AdamW, PyTorch semantics, `step` counts from 1:
 *   w *= 1 - lr * weight_decay;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g;
 *   w -= lr * (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps). */
typedef struct dpt_adamw_params {
  float lr, beta1, beta2, eps, weight_decay;
  int64_t step;
} dpt_adamw_params;
DPT_API dpt_status dpt_adamw_update(dpt_backend *be, size_t n, const dpt_adamw_params *p,
                                    dpt_buffer *w, size_t w_off, const dpt_buffer *grad,
                                    size_t grad_off, dpt_buffer *m, size_t m_off, dpt_buffer *v,
                                    size_t v_off);

/* float32 -> IEEE binary16 (round to nearest even; overflow to infinity; NaN stays NaN) over n
 * elements; dst offsets count uint16 elements. */
DPT_API dpt_status dpt_f32_to_f16(dpt_backend *be, size_t n, const dpt_buffer *src, size_t src_off,
                                  dpt_buffer *dst, size_t dst_off);
/* IEEE binary16 -> float32 (exact). src offsets count uint16 elements. */
DPT_API dpt_status dpt_f16_to_f32(dpt_backend *be, size_t n, const dpt_buffer *src, size_t src_off,
                                  dpt_buffer *dst, size_t dst_off);
/* float32 -> bfloat16 (the top 16 bits, rounded to nearest even; overflow to infinity; NaN
 * stays NaN, quiet) over n elements; dst offsets count uint16 elements. */
DPT_API dpt_status dpt_f32_to_bf16(dpt_backend *be, size_t n, const dpt_buffer *src, size_t src_off,
                                   dpt_buffer *dst, size_t dst_off);
/* bfloat16 -> float32 (exact; NaN gets the quiet bit). src offsets count uint16 elements. */
DPT_API dpt_status dpt_bf16_to_f32(dpt_backend *be, size_t n, const dpt_buffer *src, size_t src_off,
                                   dpt_buffer *dst, size_t dst_off);

/* Strided-batched gemm: for i in [0, batch), C_i = alpha * op(A_i) * op(B_i) + beta * C_i, where
 * X_i is the matrix at element offset x_off + i * stride_x, each shaped as in dpt_gemm.
 * stride_a or stride_b 0 shares one operand across the batch. stride_c 0 sums the batch into
 * one C: C = alpha * sum_i op(A_i) * op(B_i) + beta * C; the CPU backend adds the items in
 * order (C = alpha A_0 B_0 + beta C, then C = alpha A_i B_i + C), exactly a loop of dpt_gemm;
 * other backends may round differently. With stride_c > 0 the C_i must not overlap (stride_c
 * at least one C's extent, (m-1)*ldc + n). batch 0 does nothing. */
typedef struct dpt_gemm_batch {
  size_t batch;
  size_t stride_a, stride_b, stride_c; /* elements between consecutive matrices */
} dpt_gemm_batch;
DPT_API dpt_status dpt_gemm_batched(dpt_backend *be, const dpt_gemm_batch *batch, int trans_a,
                                    int trans_b, size_t m, size_t n, size_t k, float alpha,
                                    const dpt_buffer *a, size_t a_off, size_t lda,
                                    const dpt_buffer *b, size_t b_off, size_t ldb, float beta,
                                    dpt_buffer *c, size_t c_off, size_t ldc);

/* Batch normalization over x [n, c, p] (p = h*w for batchnorm2d, 1 for batchnorm1d), per
 * channel over the n*p values of that channel; n*p >= 1 and eps > 0. invstd = 1 / sqrt(var +
 * eps) and xhat = (x - mean) * invstd, computed in float. */
typedef struct dpt_bn_geom {
  size_t n, c, p;
  float eps;
} dpt_bn_geom;

/* mean[c] and biased var[c] of each channel (two passes: the mean, then the mean of squared
 * deviations). The CPU backend accumulates in double. eps is not used. */
DPT_API dpt_status dpt_bn_stats(dpt_backend *be, const dpt_bn_geom *g, const dpt_buffer *x,
                                size_t x_off, dpt_buffer *mean, size_t mean_off, dpt_buffer *var,
                                size_t var_off);

/* y = xhat * gamma[c] + beta[c] with the given mean and var (batch or running statistics). */
DPT_API dpt_status dpt_bn_fwd(dpt_backend *be, const dpt_bn_geom *g, const dpt_buffer *x,
                              size_t x_off, const dpt_buffer *mean, size_t mean_off,
                              const dpt_buffer *var, size_t var_off, const dpt_buffer *gamma,
                              size_t gamma_off, const dpt_buffer *beta, size_t beta_off,
                              dpt_buffer *y, size_t y_off);

/* Per channel: sum_dy[c] = sum of dy and sum_dy_xhat[c] = sum of dy * xhat (overwritten): the
 * gradients of beta and gamma. */
DPT_API dpt_status dpt_bn_bwd_reduce(dpt_backend *be, const dpt_bn_geom *g, const dpt_buffer *dy,
                                     size_t dy_off, const dpt_buffer *x, size_t x_off,
                                     const dpt_buffer *mean, size_t mean_off, const dpt_buffer *var,
                                     size_t var_off, dpt_buffer *sum_dy_xhat,
                                     size_t sum_dy_xhat_off, dpt_buffer *sum_dy, size_t sum_dy_off);

/* The input gradient of training-mode batch normalization (overwritten):
 *   dx = gamma[c] * invstd[c] * (dy - sum_dy[c] / count - xhat * sum_dy_xhat[c] / count)
 * where count is the number of values the statistics were taken over (n*p, or the sum over
 * all replicas when the statistics and the sums were combined across them). count >= 1. */
DPT_API dpt_status dpt_bn_bwd(dpt_backend *be, const dpt_bn_geom *g, size_t count,
                              const dpt_buffer *dy, size_t dy_off, const dpt_buffer *x,
                              size_t x_off, const dpt_buffer *mean, size_t mean_off,
                              const dpt_buffer *var, size_t var_off, const dpt_buffer *gamma,
                              size_t gamma_off, const dpt_buffer *sum_dy_xhat,
                              size_t sum_dy_xhat_off, const dpt_buffer *sum_dy, size_t sum_dy_off,
                              dpt_buffer *dx, size_t dx_off);

/* Batch normalization with the ReLU after it, in one pass: y = max(bn(x), 0) with bn as
 * dpt_bn_fwd's (NaN kept, as dpt_relu_fwd). */
DPT_API dpt_status dpt_bn_relu_fwd(dpt_backend *be, const dpt_bn_geom *g, const dpt_buffer *x,
                                   size_t x_off, const dpt_buffer *mean, size_t mean_off,
                                   const dpt_buffer *var, size_t var_off, const dpt_buffer *gamma,
                                   size_t gamma_off, const dpt_buffer *beta, size_t beta_off,
                                   dpt_buffer *y, size_t y_off);
/* The gradient of dpt_bn_relu_fwd: dpt_bn_bwd_reduce and dpt_bn_bwd of dy taken as 0 wherever
 * y, the fused forward's output, is not > 0 (dpt_relu_bwd's rule). */
DPT_API dpt_status dpt_bn_relu_bwd_reduce(dpt_backend *be, const dpt_bn_geom *g,
                                          const dpt_buffer *dy, size_t dy_off, const dpt_buffer *y,
                                          size_t y_off, const dpt_buffer *x, size_t x_off,
                                          const dpt_buffer *mean, size_t mean_off,
                                          const dpt_buffer *var, size_t var_off,
                                          dpt_buffer *sum_dy_xhat, size_t sum_dy_xhat_off,
                                          dpt_buffer *sum_dy, size_t sum_dy_off);
DPT_API dpt_status dpt_bn_relu_bwd(dpt_backend *be, const dpt_bn_geom *g, size_t count,
                                   const dpt_buffer *dy, size_t dy_off, const dpt_buffer *y,
                                   size_t y_off, const dpt_buffer *x, size_t x_off,
                                   const dpt_buffer *mean, size_t mean_off, const dpt_buffer *var,
                                   size_t var_off, const dpt_buffer *gamma, size_t gamma_off,
                                   const dpt_buffer *sum_dy_xhat, size_t sum_dy_xhat_off,
                                   const dpt_buffer *sum_dy, size_t sum_dy_off, dpt_buffer *dx,
                                   size_t dx_off);

/* Average pooling without padding (PyTorch's AvgPool2d, padding 0), geometry as max-pool:
 * y[p, oy, ox] = mean of the kh*kw window. A global average pool is the window h x w. */
DPT_API dpt_status dpt_avgpool_fwd(dpt_backend *be, const dpt_pool_geom *g, const dpt_buffer *x,
                                   size_t x_off, dpt_buffer *y, size_t y_off);
/* dx [planes, h, w] is overwritten: dx = sum over the windows holding it of dy / (kh*kw). */
DPT_API dpt_status dpt_avgpool_bwd(dpt_backend *be, const dpt_pool_geom *g, const dpt_buffer *dy,
                                   size_t dy_off, dpt_buffer *dx, size_t dx_off);

/* Dropout with a counter-based generator: y[r, c] = keep ? x[r, c] / (1 - p) : 0 over x
 * [rows, cols], where keep = dpt_dropout_keep(params, first_row + r, c). The mask depends only
 * on (seed, step, global row, column), never on how a batch is split or on the device, and
 * applying the same call to dy gives dx. y may equal x (in place). 0 <= p < 1; first_row + rows
 * and cols must fit in 32 bits. */
typedef struct dpt_dropout_params {
  float p;
  uint64_t seed, step;
  uint32_t first_row; /* the global index of row 0 (the sample's place in the global batch) */
} dpt_dropout_params;
DPT_API dpt_status dpt_dropout(dpt_backend *be, size_t rows, size_t cols,
                               const dpt_dropout_params *params, const dpt_buffer *x, size_t x_off,
                               dpt_buffer *y, size_t y_off);
/* The mask as the ops compute it: with key = mix(mix(mix(mix(seed_lo ^ 0x9e3779b9) ^ seed_hi)
 * ^ step_lo) ^ step_hi) and h = mix(mix(key ^ row) ^ col), where mix is the 32-bit
 * "lowbias32" integer hash, the element is kept when (h >> 8) >= round(p * 2^24). */
DPT_API int dpt_dropout_keep(const dpt_dropout_params *params, uint32_t row, uint32_t col);

/* Layer normalization over the last dimension (PyTorch's LayerNorm): x [rows, cols], each row
 * normalized over its cols values; rows, cols >= 1 and eps > 0. */
typedef struct dpt_ln_geom {
  size_t rows, cols;
  float eps;
} dpt_ln_geom;

/* Per row: mean [rows] and rstd = 1 / sqrt(var + eps) [rows] (biased variance, two passes;
 * the CPU backend sums in double and rounds mean and var to float once), then
 * y = (x - mean) * rstd * gamma[col] + beta[col] in float. mean and rstd are kept for the
 * backward ops. */
DPT_API dpt_status dpt_layernorm_fwd(dpt_backend *be, const dpt_ln_geom *g, const dpt_buffer *x,
                                     size_t x_off, const dpt_buffer *gamma, size_t gamma_off,
                                     const dpt_buffer *beta, size_t beta_off, dpt_buffer *y,
                                     size_t y_off, dpt_buffer *mean, size_t mean_off,
                                     dpt_buffer *rstd, size_t rstd_off);

/* The input gradient (overwritten), per row with xhat = (x - mean) * rstd and gd = dy * gamma:
 *   dx = rstd * (gd - mean(gd) - xhat * mean(gd * xhat))
 * (the CPU backend sums in double). eps is not used. */
DPT_API dpt_status dpt_layernorm_bwd(dpt_backend *be, const dpt_ln_geom *g, const dpt_buffer *dy,
                                     size_t dy_off, const dpt_buffer *x, size_t x_off,
                                     const dpt_buffer *mean, size_t mean_off,
                                     const dpt_buffer *rstd, size_t rstd_off,
                                     const dpt_buffer *gamma, size_t gamma_off, dpt_buffer *dx,
                                     size_t dx_off);

/* The parameter gradients (overwritten): dgamma[col] = sum over rows of dy * xhat, dbeta[col]
 * = sum over rows of dy, each column summed in row order (deterministic on every backend; the
 * CPU backend in double). eps is not used. */
DPT_API dpt_status dpt_layernorm_bwd_params(
    dpt_backend *be, const dpt_ln_geom *g, const dpt_buffer *dy, size_t dy_off, const dpt_buffer *x,
    size_t x_off, const dpt_buffer *mean, size_t mean_off, const dpt_buffer *rstd, size_t rstd_off,
    dpt_buffer *dgamma, size_t dgamma_off, dpt_buffer *dbeta, size_t dbeta_off);

/* y = x * Phi(x) over n elements: erf form 0.5 x (1 + erf(x / sqrt 2)); tanh form
 * 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))). y may equal x. The CPU backend evaluates in
 * double and rounds once. */
DPT_API dpt_status dpt_gelu_fwd(dpt_backend *be, size_t n, dpt_gelu_approx approx,
                                const dpt_buffer *x, size_t x_off, dpt_buffer *y, size_t y_off);
/* dx = dy * gelu'(x) over n elements (overwritten); dx may equal dy, not x. */
DPT_API dpt_status dpt_gelu_bwd(dpt_backend *be, size_t n, dpt_gelu_approx approx,
                                const dpt_buffer *x, size_t x_off, const dpt_buffer *dy,
                                size_t dy_off, dpt_buffer *dx, size_t dx_off);

/* A linear layer's bias and GELU in one pass over x [rows, cols]: x[r,c] += bias[c] (x then
 * holds the pre-activation that dpt_bias_gelu_bwd reads) and y[r,c] = gelu(x[r,c]); y must not
 * overlap x or bias. Agrees with dpt_bias_add then dpt_gelu_fwd within float rounding. */
DPT_API dpt_status dpt_bias_gelu_fwd(dpt_backend *be, size_t rows, size_t cols,
                                     dpt_gelu_approx approx, dpt_buffer *x, size_t x_off,
                                     const dpt_buffer *bias, size_t bias_off, dpt_buffer *y,
                                     size_t y_off);
/* Its backward in one pass: dx = dy * gelu'(x) (x: the pre-activation, [rows, cols]) and the
 * bias gradient db[c] = beta * db[c] + sum_r dx[r,c], rows summed in order (beta == 0: db is
 * not read). dx may equal dy, not x; db overlaps none of them. */
DPT_API dpt_status dpt_bias_gelu_bwd(dpt_backend *be, size_t rows, size_t cols,
                                     dpt_gelu_approx approx, const dpt_buffer *x, size_t x_off,
                                     const dpt_buffer *dy, size_t dy_off, dpt_buffer *dx,
                                     size_t dx_off, float beta, dpt_buffer *db, size_t db_off);

/* Host-side reference conversions, the same rounding as the ops above. */
/* Attention's softmax over the keys, with a key padding mask. Scores and probabilities are
 * [heads, n, q, k]: for sample i of n, head h, query j, the row r = (h * n + i) * q + j holds
 * k keys. Key t of sample i is masked when ids is not NULL and ids[i * k + t] (int32) equals
 * pad_id. probs[r, t] = exp(scale * s[r, t] - max) / sum over the unmasked keys, 0 for a
 * masked key; a row whose keys are all masked is all 0. probs may equal scores (in place). */
typedef struct dpt_attn_geom {
  size_t n, heads, q, k;
} dpt_attn_geom;
DPT_API dpt_status dpt_attn_softmax(dpt_backend *be, const dpt_attn_geom *g, float scale,
                                    const dpt_buffer *ids, size_t ids_off, int32_t pad_id,
                                    const dpt_buffer *scores, size_t scores_off, dpt_buffer *probs,
                                    size_t probs_off);
/* The softmax's backward over rows [rows, cols] of probabilities y (the forward's output):
 * dx[r, c] = y[r, c] * (dy[r, c] - sum_c' y[r, c'] * dy[r, c']). dx may equal dy (in place). A
 * scale applied before the softmax is the caller's (e.g. in the next gemm's alpha). */
DPT_API dpt_status dpt_softmax_bwd(dpt_backend *be, size_t rows, size_t cols, const dpt_buffer *y,
                                   size_t y_off, const dpt_buffer *dy, size_t dy_off,
                                   dpt_buffer *dx, size_t dx_off);

/* Attention's probabilities in one pass per row: the masked softmax of dpt_attn_softmax over
 * probs [heads, n, q, k] in place (scores in, probabilities out) and, with drop not NULL and
 * drop->p > 0, dropped = their dropout: head h's mask is dpt_dropout_keep of drop with seed ^
 * (h + 1) * DPT_ATTN_HEAD_SEED_MIX, row first_row + i (sample i) and column j * k + t (query j,
 * key t); otherwise dropped is not written (may be NULL). dropped overlaps no other tensor.
 * Agrees with dpt_attn_softmax then dpt_dropout per head within float rounding (the CPU backend
 * in float); the mask is exactly dropout's. q * k must fit in 32 bits. */
#define DPT_ATTN_HEAD_SEED_MIX 0xbf58476d1ce4e5b9ULL
DPT_API dpt_status dpt_attn_probs_fwd(dpt_backend *be, const dpt_attn_geom *g, float scale,
                                      const dpt_buffer *ids, size_t ids_off, int32_t pad_id,
                                      const dpt_dropout_params *drop, dpt_buffer *probs,
                                      size_t probs_off, dpt_buffer *dropped, size_t dropped_off);
/* Its backward over rows [rows, cols] of the forward's probs y and dropped (NULL: no dropout):
 * g = dropped != 0 ? dy * scale : 0 with scale = 1 / (1 - p) (g = dy without dropped), then
 * dx = y * (g - sum_c y * g) as dpt_softmax_bwd. A kept probability is never 0 after scaling,
 * so this is dropout's backward then dpt_softmax_bwd, except that where y is 0 the sign of a
 * zero may differ. dx may equal dy; neither overlaps y or dropped. */
DPT_API dpt_status dpt_attn_probs_bwd(dpt_backend *be, size_t rows, size_t cols,
                                      const dpt_buffer *y, size_t y_off, const dpt_buffer *dropped,
                                      size_t dropped_off, float p, const dpt_buffer *dy,
                                      size_t dy_off, dpt_buffer *dx, size_t dx_off);

/* Embedding bags (PyTorch's nn.EmbeddingBag): sample i's ids are the int32 values
 * idx[i * idx_stride + s] for s < bag, read from an arbitrary record layout (a model input
 * holding dense floats and ids side by side); an id < 0 is an empty slot. out[i, :] is the sum
 * of table[id, :] over the sample's ids (DPT_BAG_SUM) or their mean (DPT_BAG_MEAN; 0 for a bag
 * with no id); an id >= vocab gives a row of NaN. idx_stride >= bag. */
DPT_API dpt_status dpt_embed_bag(dpt_backend *be, size_t n, size_t bag, size_t vocab, size_t dim,
                                 dpt_bag_mode mode, const dpt_buffer *table, size_t table_off,
                                 const dpt_buffer *idx, size_t idx_off, size_t idx_stride,
                                 dpt_buffer *out, size_t out_off);
/* Its backward: dtable[id, :] += dout[i, :] for each id of sample i (times 1 / the bag's ids
 * for DPT_BAG_MEAN); accumulates, ids outside [0, vocab) are skipped. Each row's sum takes the
 * samples and slots in order on every backend, so the result does not depend on scheduling. */
DPT_API dpt_status dpt_embed_bag_bwd(dpt_backend *be, size_t n, size_t bag, size_t vocab,
                                     size_t dim, dpt_bag_mode mode, const dpt_buffer *dout,
                                     size_t dout_off, const dpt_buffer *idx, size_t idx_off,
                                     size_t idx_stride, dpt_buffer *dtable, size_t dtable_off);

/* Column gather between row-major matrices: y[r * ldy + j] = x[r * ldx + map[j]] for r < rows,
 * j < cols (map: int32 [cols]; an entry outside [0, ldx) writes 0). x holds rows x ldx
 * floats, y (rows - 1) * ldy + cols. Only y's first cols
 * columns of each row are written, so two calls can fill two column ranges (a concatenation).
 * scatter_cols_add is its adjoint: dx[r * ldx + map[j]] += dy[r * ldy + j], entries outside
 * [0, ldx) skipped; the entries inside must be distinct. */
DPT_API dpt_status dpt_gather_cols(dpt_backend *be, size_t rows, size_t cols, const dpt_buffer *x,
                                   size_t x_off, size_t ldx, const dpt_buffer *map, size_t map_off,
                                   dpt_buffer *y, size_t y_off, size_t ldy);
DPT_API dpt_status dpt_scatter_cols_add(dpt_backend *be, size_t rows, size_t cols,
                                        const dpt_buffer *dy, size_t dy_off, size_t ldy,
                                        const dpt_buffer *map, size_t map_off, dpt_buffer *dx,
                                        size_t dx_off, size_t ldx);

/* Binary cross-entropy with logits (PyTorch's BCEWithLogitsLoss) over n logits x with int32
 * labels y in {0, 1}: loss = max(x, 0) - x * y + log(1 + exp(-|x|));
 * dlogits = scale * (sigmoid(x) - y) (may be NULL); correct: (x > 0) == y. A label of
 * DPT_IGNORE_INDEX counts for nothing (loss 0, gradient 0); any other label outside {0, 1}
 * gives a NaN loss and a zero gradient. loss_sum and correct as dpt_softmax_xent's. */
DPT_API dpt_status dpt_bce_logits(dpt_backend *be, size_t n, const dpt_buffer *logits,
                                  size_t logits_off, const dpt_buffer *labels, size_t labels_off,
                                  float scale, dpt_buffer *dlogits, size_t dlogits_off,
                                  double *loss_sum, int64_t *correct);

DPT_API uint16_t dpt_f32_to_f16_scalar(float x);
DPT_API float dpt_f16_to_f32_scalar(uint16_t h);
DPT_API uint16_t dpt_f32_to_bf16_scalar(float x);
DPT_API float dpt_bf16_to_f32_scalar(uint16_t h);

#ifdef __cplusplus
}
#endif

#endif
