/* The layer ops of the vulkan backend: batched gemm, batch normalization, average pooling,
 * dropout (include/dptrain/backend.h states what each computes). */
#include "backends/vulkan/vk_internal.h"
#include "base/error.h"

#define DPT_VK_STUB_(name)                                                                         \
  dpt_status dpt_vk_##name(dpt_backend *be, const dpt_##name##_args *a) {                          \
    (void)be;                                                                                      \
    (void)a;                                                                                       \
    return dpt_set_error(DPT_ERR_UNSUPPORTED, "dpt_" #name ": not implemented by this backend");   \
  }
DPT_VK_STUB_(bn_stats)
DPT_VK_STUB_(bn_fwd)
DPT_VK_STUB_(bn_bwd_reduce)
DPT_VK_STUB_(bn_bwd)
DPT_VK_STUB_(avgpool_fwd)
DPT_VK_STUB_(avgpool_bwd)
DPT_VK_STUB_(dropout)
