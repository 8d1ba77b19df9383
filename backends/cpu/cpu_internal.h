/* Internal to the CPU backend: its context, the gemm entry used by the op and by benchmarks,
 * typed views of buffers, and the op entry points gathered into dpt_cpu_vtable. */
#ifndef DPTRAIN_CPU_INTERNAL_H
#define DPTRAIN_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "backends/backend_impl.h"

/* Which gemm the backend calls; chosen once per backend from DPT_CPU_GEMM. */
typedef enum dpt_cpu_gemm_impl {
  DPT_CPU_GEMM_PORTABLE = 0,          /* the blocked kernel of cpu_gemm.c, always built */
  DPT_CPU_GEMM_PORTABLE_BASELINE = 1, /* the same with its baseline (SSE2) micro-kernel, to
                                         test that path on machines with AVX2 */
  DPT_CPU_GEMM_OPENBLAS = 2           /* cblas_sgemm, only when built with DPT_HAVE_OPENBLAS */
} dpt_cpu_gemm_impl;

/* Packing buffers of the portable gemm. Kept per backend (a backend is used by one thread at a
 * time) and grown on demand, so steady-state gemm calls do not allocate. */
typedef struct dpt_cpu_gemm_ws {
  float *pack_a;   /* owned, 64-byte aligned: packed MC x KC block of op(A) */
  size_t pack_a_n; /* capacity of pack_a in floats */
  float *pack_b;   /* owned, 64-byte aligned: packed KC x NC block of op(B) */
  size_t pack_b_n; /* capacity of pack_b in floats */
} dpt_cpu_gemm_ws;

/* Direct convolution through oneDNN (cpu_conv.c): its engine, primitives and scratch. */
typedef struct dpt_cpu_conv dpt_cpu_conv;

/* be->ctx of a CPU backend. */
typedef struct dpt_cpu_ctx {
  dpt_cpu_gemm_impl gemm; /* DPT_CPU_GEMM_OPENBLAS: admitted by dpt_cpu_openblas_admit */
  dpt_cpu_gemm_ws ws;
  int conv_mode;      /* DPT_CPU_CONV_*: how the conv2d ops run */
  dpt_cpu_conv *conv; /* oneDNN's context with DPT_CPU_CONV_ONEDNN */
} dpt_cpu_ctx;

/* How the conv2d ops run: off (layers use im2col + gemm), oneDNN, or the reference loops that
 * the op tests compare oneDNN with. */
enum { DPT_CPU_CONV_OFF = 0, DPT_CPU_CONV_ONEDNN = 1, DPT_CPU_CONV_REFERENCE = 2 };
/* Reads DPT_CPU_CONV ("onednn", "im2col" or "reference"; unset or empty = onednn where built
 * with it, else im2col). DPT_ERR_INVALID_ARG for other values, DPT_ERR_UNSUPPORTED for
 * "onednn" in a build without it. */
dpt_status dpt_cpu_conv_select(int *mode);
/* Creates the oneDNN context (*out NULL in a build without oneDNN); destroy accepts NULL. */
dpt_status dpt_cpu_conv_create(dpt_cpu_conv **out);
void dpt_cpu_conv_destroy(dpt_cpu_conv *cv);
/* "oneDNN 2.6.3 conv" into text[len] ("" without oneDNN). */
void dpt_cpu_conv_describe(char *text, size_t len);
/* The vtable's op_enabled: the conv2d ops unless their mode is off. */
int dpt_cpu_op_enabled(const dpt_backend *be, dpt_op op);

/* Reads DPT_CPU_GEMM ("portable", "portable-baseline" or "openblas"; unset or empty =
 * openblas when compiled in, else portable). DPT_ERR_INVALID_ARG for other values,
 * DPT_ERR_UNSUPPORTED for "openblas" in a build without it. *requested (may be NULL) is 1 when
 * the variable named the choice, 0 for the default. */
dpt_status dpt_cpu_gemm_select(dpt_cpu_gemm_impl *out, int *requested);

/* Admission to OpenBLAS (cpu_openblas.c: its limits and why). admit returns 1 when one more
 * backend may use it, counting it until dpt_cpu_openblas_leave; else 0 with the reason in
 * why[why_len] (NUL-terminated, for the driver string). Thread-safe. */
int dpt_cpu_openblas_admit(char *why, size_t why_len);
void dpt_cpu_openblas_leave(void);
/* OpenBLAS on one thread, process-wide: its threaded gemm's sums depend on the thread count. */
void dpt_cpu_openblas_one_thread(void);

/* How many CPU backends may use OpenBLAS at once: its buffer slots less those of its worker
 * threads and one for the rest of the process; 0 in a build without OpenBLAS. */
int dpt_cpu_openblas_limit(void);

/* Writes a short description of the gemm `impl` runs on this machine ("openblas 0.3.21",
 * "portable gemm, avx2+fma") into text[len], NUL-terminated. */
void dpt_cpu_gemm_describe(dpt_cpu_gemm_impl impl, char *text, size_t len);

/* C = alpha * op(A) * op(B) + beta * C on host memory, row-major, the contract of dpt_gemm.
 * a, b, c: host arrays laid out as documented for dpt_gemm (not owned). Any m, n, k (zero
 * included). With beta == 0 C is not read; with alpha == 0 or k == 0 A and B are not read
 * (C = beta * C, as in BLAS). DPT_ERR_OUT_OF_MEMORY if the packing buffers cannot grow. */
dpt_status dpt_cpu_sgemm(dpt_cpu_gemm_ws *ws, dpt_cpu_gemm_impl impl, int trans_a, int trans_b,
                         size_t m, size_t n, size_t k, float alpha, const float *a, size_t lda,
                         const float *b, size_t ldb, float beta, float *c, size_t ldc);

/* Frees the packing buffers (the struct itself is the caller's). */
void dpt_cpu_gemm_ws_free(dpt_cpu_gemm_ws *ws);

/* Typed views of a tensor argument: the buffer's host memory plus the element offset. Buffers
 * are 64-byte aligned and offsets count elements of the type, so the pointers are aligned. */
static inline float *dpt_cpu_f32(dpt_ref r) {
  return (float *)r.buf->handle + r.off;
}
static inline int32_t *dpt_cpu_i32(dpt_ref r) {
  return (int32_t *)r.buf->handle + r.off;
}
static inline uint16_t *dpt_cpu_u16(dpt_ref r) {
  return (uint16_t *)r.buf->handle + r.off;
}

/* One entry per op of DPT_OP_MAP: dpt_cpu_gemm (cpu_gemm.c), the others in cpu_ops.c. */
#define DPT_CPU_OP_DECL_(NAME, name)                                                               \
  dpt_status dpt_cpu_##name(dpt_backend *be, const dpt_##name##_args *a);
DPT_OP_MAP(DPT_CPU_OP_DECL_)
#undef DPT_CPU_OP_DECL_

#endif
