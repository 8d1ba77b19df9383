/* Internal: validation-layer reporting of the Vulkan backend, for tests.
 *
 * With DPT_VULKAN_VALIDATION=1 in the environment, every Vulkan backend enables
 * VK_LAYER_KHRONOS_validation (creation fails with DPT_ERR_UNSUPPORTED when the layer is not
 * installed) and registers a debug-utils messenger. Every message is printed to stderr; every
 * ERROR message is counted, and the first one not yet reported makes the next call on that
 * backend (op, transfer, synchronize) return DPT_ERR_DEVICE with the message. These symbols are
 * not exported from the shared library: link tests against dptrain_static.
 *
 * Other environment knobs of the backend, read when a backend is created, for tests:
 *   DPT_VULKAN_FORCE_STAGING=1   transfers through the staging buffer even where device memory
 *                                is host-visible (the path a discrete GPU takes);
 *   DPT_VULKAN_PORTABLE=1        the portable gemm kernel (gemm.comp, the one GPUs run) even on
 *                                a CPU driver, which otherwise gets gemm_cpu.comp;
 *   DPT_VULKAN_TEST_MAX_RANGE=n  pretends maxStorageBufferRange is n bytes (>= 1024), so small
 *                                tensors take the split-dispatch paths of large ones.
 * The flags accept 0 and 1, unset or empty meaning 0; any other value of any of the four makes
 * the backend's creation fail with DPT_ERR_INVALID_ARG and a message naming the variable.
 */
#ifndef DPTRAIN_VULKAN_DEBUG_H
#define DPTRAIN_VULKAN_DEBUG_H

#include <stdint.h>

#include "dptrain/backend.h"

/* Validation errors reported on `be` since it was created; 0 for NULL, for a backend of another
 * kind and when validation is off. */
uint64_t dpt_vulkan_validation_errors(const dpt_backend *be);

/* Validation errors reported in this process so far, by every Vulkan backend, including those
 * raised while backends were destroyed (which no call can return any more). */
uint64_t dpt_vulkan_validation_errors_total(void);

/* 1 when DPT_VULKAN_VALIDATION=1 is set in the environment (other values: 0). */
int dpt_vulkan_validation_requested(void);

#endif
