/* The backend vtable: what a backend implements, behind the public wrappers of
 * backends/backend.c.
 *
 * The wrappers check every argument before calling in (handles non-NULL, buffers of this
 * backend, sizes without overflow, every tensor range inside its buffer, geometry valid), so a
 * backend entry may assume valid arguments and only report failures of its own (device
 * errors, out of memory), setting the message with dpt_set_error(). Element counts of zero are
 * filtered out by the wrappers as well: an op entry is never called with an empty tensor.
 *
 * Entries marked optional may be NULL: the wrapper supplies the default (through host memory
 * for copy/fill, nothing for synchronize); an op entry left NULL makes the op return
 * DPT_ERR_UNSUPPORTED.
 *
 * A backend fills its vtable with its own functions, named dpt_<backend>_<entry> (dpt_cpu_gemm,
 * dpt_ocl_upload, dpt_vk_relu_fwd) and typed exactly as the slot: an entry that works on a
 * backend takes the dpt_backend and finds its context in be->ctx itself, so nothing sits
 * between the vtable and the code.
 */
#ifndef DPTRAIN_BACKEND_IMPL_H
#define DPTRAIN_BACKEND_IMPL_H

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "dptrain/backend.h"

typedef struct dpt_fence dpt_fence;

/* A tensor argument: buffer + offset in elements of the tensor's type. */
typedef struct dpt_ref {
  dpt_buffer *buf;
  size_t off;
} dpt_ref;

struct dpt_buffer {
  dpt_backend *backend;    /* owner */
  size_t size;             /* bytes */
  void *handle;            /* backend-private (host pointer, cl_mem, suballocation, ...) */
  dpt_buffer *prev, *next; /* the backend's list of live buffers */
};

/* ---- op argument structs (one per op of DPT_OP_MAP, named dpt_<name>_args) --------------- */

typedef struct dpt_gemm_args {
  int trans_a, trans_b;
  size_t m, n, k; /* all > 0 and alpha != 0 when the backend is called (the wrapper handles
                     k == 0 and alpha == 0 as C = beta * C) */
  float alpha, beta;
  dpt_ref a, b, c;
  size_t lda, ldb, ldc;
} dpt_gemm_args;

typedef struct dpt_bias_add_args {
  size_t rows, cols;
  dpt_ref y, bias;
} dpt_bias_add_args;

typedef struct dpt_bias_grad_args {
  size_t rows, cols; /* rows may be 0 here: db = beta * db */
  float beta;
  dpt_ref dy, db;
} dpt_bias_grad_args;

typedef struct dpt_relu_fwd_args {
  size_t n;
  dpt_ref x, y;
} dpt_relu_fwd_args;

typedef struct dpt_relu_bwd_args {
  size_t n;
  dpt_ref x, dy, dx;
} dpt_relu_bwd_args;

typedef struct dpt_add_relu_args {
  size_t n;
  dpt_ref a, b, y;
} dpt_add_relu_args;

typedef struct dpt_softmax_xent_args {
  size_t rows, cols;
  dpt_ref logits, labels; /* labels: int32 */
  float scale;
  dpt_ref dlogits;  /* buf may be NULL: no gradient wanted */
  double *loss_sum; /* host, may be NULL */
  int64_t *correct; /* host, may be NULL */
} dpt_softmax_xent_args;

typedef struct dpt_im2col_args {
  dpt_conv_geom g;
  size_t out_h, out_w;
  dpt_ref x, col;
} dpt_im2col_args;

typedef struct dpt_col2im_args {
  dpt_conv_geom g;
  size_t out_h, out_w;
  dpt_ref col, dx;
} dpt_col2im_args;

/* Direct convolution: x [n,c,h,w], w [co,c,kh,kw], y/dy [n,co,out_h,out_w]. bias and db
 * have buf NULL when absent. */
typedef struct dpt_conv2d_fwd_args {
  dpt_conv_geom g;
  size_t co, out_h, out_w;
  dpt_ref x, w, bias, y;
} dpt_conv2d_fwd_args;

typedef struct dpt_conv2d_bwd_data_args {
  dpt_conv_geom g;
  size_t co, out_h, out_w;
  dpt_ref dy, w, dx;
} dpt_conv2d_bwd_data_args;

typedef struct dpt_conv2d_bwd_weights_args {
  dpt_conv_geom g;
  size_t co, out_h, out_w;
  dpt_ref x, dy, dw, db;
} dpt_conv2d_bwd_weights_args;

typedef struct dpt_maxpool_fwd_args {
  dpt_pool_geom g;
  size_t out_h, out_w;
  dpt_ref x, y, argmax; /* argmax: int32 */
} dpt_maxpool_fwd_args;

typedef struct dpt_maxpool_bwd_args {
  dpt_pool_geom g;
  size_t out_h, out_w;
  dpt_ref dy, argmax, dx;
} dpt_maxpool_bwd_args;

typedef struct dpt_embed_gather_args {
  size_t n, vocab, dim;
  dpt_ref table, idx, out; /* idx: int32 */
} dpt_embed_gather_args;

typedef struct dpt_embed_scatter_add_args {
  size_t n, vocab, dim;
  dpt_ref dout, idx, dtable;
} dpt_embed_scatter_add_args;

typedef struct dpt_axpy_args {
  size_t n;
  float alpha;
  dpt_ref x, y;
} dpt_axpy_args;

typedef struct dpt_scale_args {
  size_t n;
  float alpha;
  dpt_ref x;
} dpt_scale_args;

/* sum, sumsq */
typedef struct dpt_reduce_args {
  size_t n;
  dpt_ref x;
  double *out; /* host */
} dpt_reduce_args;
typedef dpt_reduce_args dpt_sum_args;
typedef dpt_reduce_args dpt_sumsq_args;

typedef struct dpt_count_nonfinite_args {
  size_t n;
  dpt_ref x;
  uint64_t *out; /* host */
} dpt_count_nonfinite_args;

typedef struct dpt_sgd_update_args {
  size_t n;
  dpt_sgd_params p;
  dpt_ref w, grad, velocity; /* velocity.buf NULL when p.momentum == 0 */
} dpt_sgd_update_args;

typedef struct dpt_adamw_update_args {
  size_t n;
  dpt_adamw_params p;
  dpt_ref w, grad, m, v;
} dpt_adamw_update_args;

/* AdamW's step-dependent scalars, computed in double and rounded to float once (as PyTorch
 * computes them in Python floats). Every backend takes them from here, so all round alike;
 * the element-wise update then runs in float in PyTorch's order:
 *   w *= decay;  m = b1*m + one_minus_b1*g;  v = b2*v + one_minus_b2*g*g;
 *   w -= step_size * (m / (sqrt(v) / bc2_sqrt + eps)). */
typedef struct dpt_adamw_scalars {
  float step_size;    /* lr / (1 - b1^step) */
  float bc2_sqrt;     /* sqrt(1 - b2^step) */
  float decay;        /* 1 - lr * weight_decay */
  float one_minus_b1; /* 1 - b1 */
  float one_minus_b2; /* 1 - b2 */
} dpt_adamw_scalars;

static inline dpt_adamw_scalars dpt_adamw_scalars_of(const dpt_adamw_params *p) {
  const double bc1 = 1.0 - pow((double)p->beta1, (double)p->step);
  const double bc2 = 1.0 - pow((double)p->beta2, (double)p->step);
  dpt_adamw_scalars s = {(float)((double)p->lr / bc1), (float)sqrt(bc2),
                         (float)(1.0 - (double)p->lr * (double)p->weight_decay),
                         (float)(1.0 - (double)p->beta1), (float)(1.0 - (double)p->beta2)};
  return s;
}

/* f32_to_f16, f16_to_f32, f32_to_bf16, bf16_to_f32 */
typedef struct dpt_convert_args {
  size_t n;
  dpt_ref src, dst;
} dpt_convert_args;
typedef dpt_convert_args dpt_f32_to_f16_args;
typedef dpt_convert_args dpt_f16_to_f32_args;
typedef dpt_convert_args dpt_f32_to_bf16_args;
typedef dpt_convert_args dpt_bf16_to_f32_args;

typedef struct dpt_gemm_batched_args {
  dpt_gemm_args g; /* the shape; a, b, c are the first matrices (m, n, k, batch > 0 and
                      alpha != 0 when the backend is called) */
  size_t batch, stride_a, stride_b, stride_c;
} dpt_gemm_batched_args;

/* bn_stats, bn_fwd, bn_bwd_reduce, bn_bwd and their bn_relu forms: one struct; each op reads
 * the tensors it names. relu is set for the bn_relu forms (a backend may give both slots one
 * function); act is then the fused forward's output y, otherwise dy again. */
typedef struct dpt_bn_args {
  dpt_bn_geom g;
  int relu;
  dpt_ref act;                     /* bn_relu_bwd_reduce, bn_relu_bwd */
  size_t count;                    /* bn_bwd */
  dpt_ref x, mean, var;            /* all */
  dpt_ref gamma, beta, y;          /* bn_fwd */
  dpt_ref dy, sum_dy_xhat, sum_dy; /* bn_bwd_reduce (outputs), bn_bwd (inputs) */
  dpt_ref dx;                      /* bn_bwd */
} dpt_bn_args;
typedef dpt_bn_args dpt_bn_stats_args;
typedef dpt_bn_args dpt_bn_fwd_args;
typedef dpt_bn_args dpt_bn_bwd_reduce_args;
typedef dpt_bn_args dpt_bn_bwd_args;
typedef dpt_bn_args dpt_bn_relu_fwd_args;
typedef dpt_bn_args dpt_bn_relu_bwd_reduce_args;
typedef dpt_bn_args dpt_bn_relu_bwd_args;

typedef struct dpt_avgpool_args {
  dpt_pool_geom g;
  size_t out_h, out_w;
  dpt_ref in, out; /* fwd: x -> y; bwd: dy -> dx */
} dpt_avgpool_args;
typedef dpt_avgpool_args dpt_avgpool_fwd_args;
typedef dpt_avgpool_args dpt_avgpool_bwd_args;

/* The 32-bit mixing function of dropout's generator ("lowbias32"). */
static inline uint32_t dpt_mix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x7feb352dU;
  h ^= h >> 15;
  h *= 0x846ca68bU;
  h ^= h >> 16;
  return h;
}

/* Dropout as the backends see it: element (r, c) is kept when
 * (dpt_mix32(dpt_mix32(key ^ (first_row + r)) ^ c) >> 8) >= threshold, and then scaled. */
typedef struct dpt_dropout_args {
  size_t rows, cols;
  uint32_t key, threshold, first_row;
  float scale; /* 1 / (1 - p) */
  dpt_ref x, y;
} dpt_dropout_args;

/* layernorm_fwd, layernorm_bwd, layernorm_bwd_params: one struct; each reads what it names. */
typedef struct dpt_layernorm_args {
  dpt_ln_geom g;
  dpt_ref x, mean, rstd, gamma; /* all but bwd_params read gamma */
  dpt_ref beta, y;              /* fwd */
  dpt_ref dy, dx;               /* bwd */
  dpt_ref dgamma, dbeta;        /* bwd_params */
} dpt_layernorm_args;
typedef dpt_layernorm_args dpt_layernorm_fwd_args;
typedef dpt_layernorm_args dpt_layernorm_bwd_args;
typedef dpt_layernorm_args dpt_layernorm_bwd_params_args;

/* gelu_fwd (x -> y, dy unused) and gelu_bwd (x, dy -> y = dx). */
typedef struct dpt_gelu_args {
  size_t n;
  dpt_gelu_approx approx;
  dpt_ref x, dy, y;
} dpt_gelu_args;
typedef dpt_gelu_args dpt_gelu_fwd_args;
typedef dpt_gelu_args dpt_gelu_bwd_args;

/* bias_gelu_fwd (x += bias in place, y = gelu(x)) and bias_gelu_bwd (x, dy -> dx, db). */
typedef struct dpt_bias_gelu_args {
  size_t rows, cols;
  dpt_gelu_approx approx;
  float beta;         /* bwd: db's factor */
  dpt_ref x, bias, y; /* fwd */
  dpt_ref dy, dx, db; /* bwd, with x */
} dpt_bias_gelu_args;
typedef dpt_bias_gelu_args dpt_bias_gelu_fwd_args;
typedef dpt_bias_gelu_args dpt_bias_gelu_bwd_args;

/* attn_softmax: scores -> probs with the key mask of ids (has_ids 0: no mask). */
typedef struct dpt_attn_softmax_args {
  dpt_attn_geom g;
  float scale;
  int has_ids;
  int32_t pad_id;
  dpt_ref ids, scores, probs;
} dpt_attn_softmax_args;

/* softmax_bwd: y, dy -> dx over [rows, cols]. */
typedef struct dpt_softmax_bwd_args {
  size_t rows, cols;
  dpt_ref y, dy, dx;
} dpt_softmax_bwd_args;

/* attn_probs_fwd, one head a call (g.heads == 1): probs in place as attn_softmax (scores and
 * probs the same ref) and, with has_drop, dropped as dropout of its rows [n, q * k] with the
 * head's key. */
typedef struct dpt_attn_probs_fwd_args {
  dpt_attn_softmax_args sm;
  int has_drop;
  uint32_t key, threshold, first_row;
  float drop_scale;
  dpt_ref dropped;
} dpt_attn_probs_fwd_args;

/* attn_probs_bwd: y, dropped (has_drop), dy -> dx over [rows, cols]. */
typedef struct dpt_attn_probs_bwd_args {
  size_t rows, cols;
  int has_drop;
  float drop_scale;
  dpt_ref y, dropped, dy, dx;
} dpt_attn_probs_bwd_args;

/* embed_bag (table, idx -> out) and embed_bag_bwd (dout, idx -> dtable). */
typedef struct dpt_embed_bag_args {
  size_t n, bag, vocab, dim, idx_stride;
  dpt_bag_mode mode;
  dpt_ref table, idx, out; /* fwd */
  dpt_ref dout, dtable;    /* bwd (with idx) */
} dpt_embed_bag_args;
typedef dpt_embed_bag_args dpt_embed_bag_bwd_args;

/* gather_cols (x -> y) and scatter_cols_add (y -> x, adding): one struct, x and y named as in
 * the forward direction. */
typedef struct dpt_gather_cols_args {
  size_t rows, cols, ldx, ldy;
  dpt_ref x, map, y;
} dpt_gather_cols_args;
typedef dpt_gather_cols_args dpt_scatter_cols_add_args;

typedef struct dpt_bce_logits_args {
  size_t n;
  dpt_ref logits, labels;
  float scale;
  dpt_ref dlogits;  /* buf may be NULL */
  double *loss_sum; /* host, may be NULL */
  int64_t *correct; /* host, may be NULL */
} dpt_bce_logits_args;

/* ---- the vtable --------------------------------------------------------------------------- */

/* A point in a backend's stream of submitted work, and the byte range [offset, offset + bytes)
 * of buf as that work leaves it (bytes 0: no range; backend_impl.h, the fenced transfers). */
struct dpt_fence {
  dpt_backend *backend;
  const dpt_buffer *buf;
  size_t offset, bytes;
  uint64_t serial; /* Vulkan: the batch */
  void *handle;    /* OpenCL: the range's host copy and its events */
};

typedef struct dpt_backend_vtable {
  dpt_backend_kind kind;

  /* Enumeration, without creating a backend. device_count sets *count = 0 and returns DPT_OK
   * (with the reason in the error message) when the driver is absent. */
  dpt_status (*device_count)(int *count);
  dpt_status (*device_info)(int index, dpt_device_info *out);

  /* create fills be->ctx (and may read be->info, already filled by the wrapper via
   * device_info). destroy is called after every buffer was freed. */
  dpt_status (*create)(dpt_backend *be, int device);
  void (*destroy)(dpt_backend *be);
  dpt_status (*synchronize)(dpt_backend *be); /* optional */
  /* Optional: results that do not depend on thread counts from now on (a backend without it
   * is deterministic per shape already). */
  dpt_status (*set_deterministic)(dpt_backend *be);

  /* buf->size is set; alloc sets buf->handle. free is never called with a NULL handle. */
  dpt_status (*buffer_alloc)(dpt_backend *be, dpt_buffer *buf);
  void (*buffer_free)(dpt_backend *be, dpt_buffer *buf);
  dpt_status (*upload)(dpt_backend *be, dpt_buffer *dst, size_t offset, const void *src,
                       size_t bytes);
  dpt_status (*download)(dpt_backend *be, const dpt_buffer *src, size_t offset, void *dst,
                         size_t bytes);
  dpt_status (*copy)(dpt_backend *be, dpt_buffer *dst, size_t dst_offset, const dpt_buffer *src,
                     size_t src_offset, size_t bytes); /* optional */
  dpt_status (*fill_f32)(dpt_backend *be, dpt_buffer *dst, size_t offset_elems, size_t count,
                         float value); /* optional */
  /* Zero-copy host access (optional): map sets *ptr to the buffer's bytes at `offset`, once
   * every submitted command that uses the buffer has finished, readable and writable by the
   * host without a copy; or sets *ptr = NULL and returns DPT_OK when this device's memory is
   * not host-addressable (a discrete GPU), so the caller stages through download/upload.
   * Until unmap the caller submits no work to the backend. */
  dpt_status (*map)(dpt_backend *be, dpt_buffer *buf, size_t offset, size_t bytes, void **ptr);
  dpt_status (*unmap)(dpt_backend *be, dpt_buffer *buf, void *ptr); /* optional */
  /* Transfers beside the stream of work (optional, all five or none), for a nonblocking
   * collective's progress thread while the caller's thread goes on submitting work that leaves
   * the fence's range alone. fence (under the lock) marks the work submitted so far in *f,
   * with f->buf, offset and bytes set, and starts it on the device; it returns 0 where it
   * cannot (then the transfers stay ordered behind all submitted work). fence_wait waits for
   * that work; download_after reads part of the range as that work left it, without waiting
   * for the work submitted after f; upload_after writes part of the range so that the work
   * submitted after the call sees it. These three run WITHOUT the backend's lock and take what
   * they need of it; fence_free may defer releasing what pending work still uses. */
  int (*fence)(dpt_backend *be, dpt_fence *f);
  void (*fence_free)(dpt_backend *be, dpt_fence *f);
  dpt_status (*fence_wait)(dpt_backend *be, const dpt_fence *f);
  dpt_status (*download_after)(dpt_backend *be, const dpt_fence *f, size_t offset, void *dst,
                               size_t bytes);
  dpt_status (*upload_after)(dpt_backend *be, const dpt_fence *f, size_t offset, const void *src,
                             size_t bytes);

  /* Optional: 0 where this backend instance runs without an op its vtable has (an op that
   * depends on a library or a setting chosen at create); dpt_backend_supports asks it. */
  int (*op_enabled)(const dpt_backend *be, dpt_op op);

  /* One entry per op of DPT_OP_MAP: dpt_status (*gemm)(dpt_backend *, const dpt_gemm_args *);
   * NULL = unsupported. */
#define DPT_OP_VT_ENTRY_(NAME, name)                                                               \
  dpt_status (*name)(dpt_backend * be, const dpt_##name##_args *a);
  DPT_OP_MAP(DPT_OP_VT_ENTRY_)
#undef DPT_OP_VT_ENTRY_
} dpt_backend_vtable;

/* The vtable's map/unmap for the library's own modules (the collectives): arguments checked,
 * *ptr = NULL with DPT_OK when the backend has no zero-copy host access. */
dpt_status dpt_buffer_map_host(dpt_buffer *buf, size_t offset, size_t bytes, void **ptr);
dpt_status dpt_buffer_unmap_host(dpt_buffer *buf, void *ptr);

/* The vtable's transfers beside the stream of work, for the library's own modules (a
 * nonblocking collective fences its range when it starts; its progress thread moves the range
 * with the fence while the caller's thread goes on submitting work that leaves the range alone).
 * dpt_buffer_fence returns NULL where the backend has no such transfers (CPU: its work is done
 * when submitted) or making one failed: a NULL fence makes the fenced
 * transfers dpt_buffer_download / dpt_buffer_upload, ordered after all submitted work. A fenced
 * transfer must lie in the fence's range. dpt_backend_fence: a fence without a range, to wait
 * for the work submitted so far with dpt_fence_wait, which holds no lock (NULL: returns). */
dpt_fence *dpt_buffer_fence(dpt_buffer *buf, size_t offset, size_t bytes);
dpt_fence *dpt_backend_fence(dpt_backend *be);
void dpt_fence_free(dpt_fence *f);
dpt_status dpt_fence_wait(const dpt_fence *f);
dpt_status dpt_buffer_download_fenced(const dpt_buffer *src, size_t offset, void *dst, size_t bytes,
                                      const dpt_fence *f);
dpt_status dpt_buffer_upload_fenced(dpt_buffer *dst, size_t offset, const void *src, size_t bytes,
                                    const dpt_fence *f);

struct dpt_backend {
  const dpt_backend_vtable *vt;
  dpt_device_info info;
  void *ctx;           /* backend-private */
  dpt_buffer *buffers; /* live buffers (freed on destroy) */
  int lost;            /* set by a backend after an unrecoverable device error */
  /* Held by the public wrappers around every vtable call (recursive: a wrapper may call
   * another), so that a nonblocking collective's staging (another thread) can download and
   * upload while the caller's thread runs ops: the backends themselves are not thread-safe. */
  pthread_mutex_t lock;
};

/* Runs a vtable call under the backend's lock; an expression: lock, call, unlock, result. */
static inline dpt_status dpt_backend_unlock_with(dpt_backend *be, dpt_status st) {
  pthread_mutex_unlock(&be->lock);
  return st;
}
#define DPT_BE_CALL(be, call)                                                                      \
  (pthread_mutex_lock(&(be)->lock), dpt_backend_unlock_with((be), (call)))

/* For a backend without direct convolution: its conv2d entries, which refuse, and its
 * op_enabled, which turns them off (layers then use im2col + gemm). */
static inline int dpt_backend_no_direct_conv(const dpt_backend *be, dpt_op op) {
  (void)be;
  return op != DPT_OP_CONV2D_FWD && op != DPT_OP_CONV2D_BWD_DATA && op != DPT_OP_CONV2D_BWD_WEIGHTS;
}
#define DPT_NO_DIRECT_CONV(prefix)                                                                 \
  dpt_status prefix##_conv2d_fwd(dpt_backend *be, const dpt_conv2d_fwd_args *a) {                  \
    (void)be, (void)a;                                                                             \
    return dpt_set_error(DPT_ERR_UNSUPPORTED, "dpt_conv2d_fwd: not on this backend");              \
  }                                                                                                \
  dpt_status prefix##_conv2d_bwd_data(dpt_backend *be, const dpt_conv2d_bwd_data_args *a) {        \
    (void)be, (void)a;                                                                             \
    return dpt_set_error(DPT_ERR_UNSUPPORTED, "dpt_conv2d_bwd_data: not on this backend");         \
  }                                                                                                \
  dpt_status prefix##_conv2d_bwd_weights(dpt_backend *be, const dpt_conv2d_bwd_weights_args *a) {  \
    (void)be, (void)a;                                                                             \
    return dpt_set_error(DPT_ERR_UNSUPPORTED, "dpt_conv2d_bwd_weights: not on this backend");      \
  }

/* The vtables of the compiled-in backends (NULL entry = not compiled). */
const dpt_backend_vtable *dpt_backend_vtable_for(dpt_backend_kind kind);
extern const dpt_backend_vtable dpt_cpu_vtable;
#ifdef DPT_HAVE_OPENCL
extern const dpt_backend_vtable dpt_opencl_vtable;
#endif
#ifdef DPT_HAVE_VULKAN
extern const dpt_backend_vtable dpt_vulkan_vtable;
#endif

#endif
