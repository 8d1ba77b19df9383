/* gemm on OpenCL through CLBlast's C API, on the backend's own queue.
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

dpt_status dpt_ocl_gemm(dpt_backend *be, const dpt_gemm_args *a) {
  dpt_ocl_ctx *c = dpt_ocl_ctx_of(be);
  cl_command_queue queue = c->queue;
  static pthread_mutex_t clblast_lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&clblast_lock);
  CLBlastStatusCode st = CLBlastSgemm(
      CLBlastLayoutRowMajor, a->trans_a ? CLBlastTransposeYes : CLBlastTransposeNo,
      a->trans_b ? CLBlastTransposeYes : CLBlastTransposeNo, a->m, a->n, a->k, a->alpha,
      dpt_ocl_mem(a->a.buf), a->a.off, a->lda, dpt_ocl_mem(a->b.buf), a->b.off, a->ldb, a->beta,
      dpt_ocl_mem(a->c.buf), a->c.off, a->ldc, &queue, NULL);
  pthread_mutex_unlock(&clblast_lock);
  if (st != CLBlastSuccess) {
    char what[192];
    snprintf(what, sizeof what, "m %zu, n %zu, k %zu on %s", a->m, a->n, a->k, c->device_name);
    return dpt_ocl_clblast_fail(st, "CLBlastSgemm", what);
  }
  return DPT_OK;
}
