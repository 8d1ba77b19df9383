/* The layer ops of the cpu backend: batched gemm, batch normalization, average pooling,
 * dropout (include/dptrain/backend.h states what each computes). */
#include "backends/cpu/cpu_internal.h"
#include "base/error.h"

#define DPT_CPU_STUB_(name)                                                                        \
  dpt_status dpt_cpu_##name(dpt_backend *be, const dpt_##name##_args *a) {                         \
    (void)be;                                                                                      \
    (void)a;                                                                                       \
    return dpt_set_error(DPT_ERR_UNSUPPORTED, "dpt_" #name ": not implemented by this backend");   \
  }
DPT_CPU_STUB_(gemm_batched)
DPT_CPU_STUB_(bn_stats)
DPT_CPU_STUB_(bn_fwd)
DPT_CPU_STUB_(bn_bwd_reduce)
DPT_CPU_STUB_(bn_bwd)
DPT_CPU_STUB_(avgpool_fwd)
DPT_CPU_STUB_(avgpool_bwd)
DPT_CPU_STUB_(dropout)
