/* gemm and gemm_batched on OpenCL through CLBlast's C API, on the backend's own queue.
 *
 * Our row-major contract maps directly onto CLBlastSgemm with CLBlastLayoutRowMajor; offsets
 * and leading dimensions are passed as they are (both count elements). CLBlast compiles its
 * kernels on the first call per device and shape class and caches them for the process. With
 * beta == 0 CLBlast does not read C, so NaN in C does not propagate (the contract); the
 * conformance suite checks this with NaN-filled C.
 *
 * CLBlast is not safe to call from several threads at once, even on different contexts: its
 * per-call routine set-up (the tuning database lookup) races and can crash (CLBlast issue
 * #486), and replicas run as threads of one process. Every call takes one process-wide lock. It
 * covers the enqueue (CLBlast does not wait for the kernel, so replicas still compute concurrently)
 * and, on the first call per device and shape class, the kernel compilation: other replicas' first
 * gemms wait for it. */
#include <pthread.h>
#include <stdio.h>

#include <clblast_c.h>

#include "backends/opencl/ocl_internal.h"
#include "base/error.h"

static pthread_mutex_t clblast_lock = PTHREAD_MUTEX_INITIALIZER;

static CLBlastTranspose trans_of(int t) {
  return t ? CLBlastTransposeYes : CLBlastTransposeNo;
}

static dpt_status clblast_failed(dpt_ocl_ctx *c, CLBlastStatusCode st, const char *call,
                                 const dpt_gemm_args *g, size_t batch) {
  char what[192];
  snprintf(what, sizeof what, "m %zu, n %zu, k %zu, batch %zu on %s", g->m, g->n, g->k, batch,
           c->device_name);
  return dpt_ocl_clblast_fail(st, call, what);
}

/* One CLBlastSgemm: C = alpha op(A) op(B) + beta C with the matrices at the given offsets. */
static dpt_status sgemm(dpt_ocl_ctx *c, const dpt_gemm_args *g, size_t a_off, size_t b_off,
                        cl_mem cm, size_t c_off, size_t ldc, float beta) {
  cl_command_queue queue = c->queue;
  pthread_mutex_lock(&clblast_lock);
  CLBlastStatusCode st =
      CLBlastSgemm(CLBlastLayoutRowMajor, trans_of(g->trans_a), trans_of(g->trans_b), g->m, g->n,
                   g->k, g->alpha, dpt_ocl_mem(g->a.buf), a_off, g->lda, dpt_ocl_mem(g->b.buf),
                   b_off, g->ldb, beta, cm, c_off, ldc, &queue, NULL);
  pthread_mutex_unlock(&clblast_lock);
  return st == CLBlastSuccess ? DPT_OK : clblast_failed(c, st, "CLBlastSgemm", g, 1);
}

/* CLBlastSgemmStridedBatched over `batch` items from item `first` of a, b into C_i at cm +
 * c_off + i * stride_c. CLBlast takes a zero stride for A or B (it checks and indexes each
 * item as offset + i * stride; its indirect path copies the shared operand once per item);
 * a zero stride_c never reaches it. */
static dpt_status sgemm_strided(dpt_ocl_ctx *c, const dpt_gemm_batched_args *a, size_t first,
                                size_t batch, cl_mem cm, size_t c_off, size_t ldc, size_t stride_c,
                                float beta) {
  const dpt_gemm_args *g = &a->g;
  cl_command_queue queue = c->queue;
  pthread_mutex_lock(&clblast_lock);
  CLBlastStatusCode st = CLBlastSgemmStridedBatched(
      CLBlastLayoutRowMajor, trans_of(g->trans_a), trans_of(g->trans_b), g->m, g->n, g->k, g->alpha,
      dpt_ocl_mem(g->a.buf), g->a.off + first * a->stride_a, g->lda, a->stride_a,
      dpt_ocl_mem(g->b.buf), g->b.off + first * a->stride_b, g->ldb, a->stride_b, beta, cm, c_off,
      ldc, stride_c, batch, &queue, NULL);
  pthread_mutex_unlock(&clblast_lock);
  return st == CLBlastSuccess ? DPT_OK
                              : clblast_failed(c, st, "CLBlastSgemmStridedBatched", g, batch);
}

dpt_status dpt_ocl_gemm(dpt_backend *be, const dpt_gemm_args *a) {
  return sgemm(dpt_ocl_ctx_of(be), a, a->a.off, a->b.off, dpt_ocl_mem(a->c.buf), a->c.off, a->ldc,
               a->beta);
}

/* The most bytes of products a summed batch keeps in the scratch at once; a larger batch runs
 * in chunks (each added into C in order). */
#define DPT_OCL_GEMM_SCRATCH_MAX ((size_t)64 << 20)

/* gemm_batched.
 *
 * stride_c > 0: one CLBlastSgemmStridedBatched over the whole batch.
 *
 * stride_c == 0 (the batch summed into one C, as the weight and bias gradients of a batched
 * convolution): folding the batch into k (one gemm with k' = batch * k) needs the items to lie
 * side by side along k (stride_a == k for a plain A, ...), which a [batch, channels, pixels]
 * activation never does, so instead: a CLBlastSgemmStridedBatched writes the scaled products
 * alpha op(A_i) op(B_i) of a chunk of the batch into the context's gemm scratch [chunk, m,
 * n], and the gemm_batch_sum kernel adds them into C in item order, i = 0 .. batch-1, in float
 * (C = beta C + P_0, then C += P_i, the CPU reference's loop; with beta == 0, C is not read).
 * Deterministic: no atomics, one work-item per element of C. Chunks of at most
 * DPT_OCL_GEMM_SCRATCH_MAX bytes follow in order; when a single item's product exceeds that
 * (or the device's largest allocation), the items run as a loop of gemms accumulating into C,
 * which is the CPU reference's order exactly. */
dpt_status dpt_ocl_gemm_batched(dpt_backend *be, const dpt_gemm_batched_args *a) {
  dpt_ocl_ctx *c = dpt_ocl_ctx_of(be);
  const dpt_gemm_args *g = &a->g;
  cl_mem cm = dpt_ocl_mem(g->c.buf);
  if (a->batch == 1) return sgemm(c, g, g->a.off, g->b.off, cm, g->c.off, g->ldc, g->beta);
  if (a->stride_c != 0)
    return sgemm_strided(c, a, 0, a->batch, cm, g->c.off, g->ldc, a->stride_c, g->beta);

  size_t item = g->m * g->n; /* elements of one product (m * n <= C's extent: no overflow) */
  size_t cap = DPT_OCL_GEMM_SCRATCH_MAX;
  if (c->lim.max_alloc > 0 && c->lim.max_alloc < cap) cap = (size_t)c->lim.max_alloc;
  size_t chunk = cap / sizeof(cl_float) / item;
  if (chunk == 0) { /* one product does not fit: accumulate gemm by gemm */
    for (size_t i = 0; i < a->batch; ++i)
      DPT_TRY(sgemm(c, g, g->a.off + i * a->stride_a, g->b.off + i * a->stride_b, cm, g->c.off,
                    g->ldc, i == 0 ? g->beta : 1.0f));
    return DPT_OK;
  }
  if (chunk > a->batch) chunk = a->batch;
  DPT_TRY(dpt_ocl_grow(c, &c->gemm_scratch, &c->gemm_scratch_bytes, chunk * item * sizeof(cl_float),
                       "gemm_batched scratch"));
  for (size_t first = 0; first < a->batch; first += chunk) {
    size_t count = a->batch - first < chunk ? a->batch - first : chunk;
    DPT_TRY(sgemm_strided(c, a, first, count, c->gemm_scratch, 0, g->n, item, 0.0f));
    dpt_ocl_args l;
    DPT_TRY(dpt_ocl_begin(&l, c, DPT_OCL_K_gemm_batch_sum));
    dpt_ocl_arg_u64(&l, item);
    dpt_ocl_arg_u64(&l, g->n);
    dpt_ocl_arg_u64(&l, g->ldc);
    dpt_ocl_arg_u64(&l, count);
    dpt_ocl_arg_i32(&l, first == 0);
    dpt_ocl_arg_f32(&l, g->beta);
    dpt_ocl_arg_mem(&l, c->gemm_scratch);
    dpt_ocl_arg_u64(&l, 0);
    dpt_ocl_arg_ref(&l, g->c);
    DPT_TRY(dpt_ocl_launch(&l, item));
  }
  return DPT_OK;
}
