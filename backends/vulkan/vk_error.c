/* Vulkan errors -> dpt_status and a message naming the code and the call: failed VkResults, a
 * lost device, and errors the validation layer reported through the messenger of vk_backend.c.
 *
 * Every file of the backend reports through here and this file calls none of them, so error
 * translation sits below the rest of the backend. */
#include "backends/vulkan/vk_internal.h"
#include "base/error.h"

const char *dpt_vk_result_name(VkResult r) {
  switch (r) {
#define DPT_VK_RESULT_(name)                                                                       \
  case name:                                                                                       \
    return #name;
    DPT_VK_RESULT_(VK_SUCCESS)
    DPT_VK_RESULT_(VK_NOT_READY)
    DPT_VK_RESULT_(VK_TIMEOUT)
    DPT_VK_RESULT_(VK_EVENT_SET)
    DPT_VK_RESULT_(VK_EVENT_RESET)
    DPT_VK_RESULT_(VK_INCOMPLETE)
    DPT_VK_RESULT_(VK_ERROR_OUT_OF_HOST_MEMORY)
    DPT_VK_RESULT_(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    DPT_VK_RESULT_(VK_ERROR_INITIALIZATION_FAILED)
    DPT_VK_RESULT_(VK_ERROR_DEVICE_LOST)
    DPT_VK_RESULT_(VK_ERROR_MEMORY_MAP_FAILED)
    DPT_VK_RESULT_(VK_ERROR_LAYER_NOT_PRESENT)
    DPT_VK_RESULT_(VK_ERROR_EXTENSION_NOT_PRESENT)
    DPT_VK_RESULT_(VK_ERROR_FEATURE_NOT_PRESENT)
    DPT_VK_RESULT_(VK_ERROR_INCOMPATIBLE_DRIVER)
    DPT_VK_RESULT_(VK_ERROR_TOO_MANY_OBJECTS)
    DPT_VK_RESULT_(VK_ERROR_FORMAT_NOT_SUPPORTED)
    DPT_VK_RESULT_(VK_ERROR_FRAGMENTED_POOL)
    DPT_VK_RESULT_(VK_ERROR_UNKNOWN)
    DPT_VK_RESULT_(VK_ERROR_OUT_OF_POOL_MEMORY)
    DPT_VK_RESULT_(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    DPT_VK_RESULT_(VK_ERROR_FRAGMENTATION)
    DPT_VK_RESULT_(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
    DPT_VK_RESULT_(VK_PIPELINE_COMPILE_REQUIRED)
    DPT_VK_RESULT_(VK_ERROR_VALIDATION_FAILED_EXT)
    DPT_VK_RESULT_(VK_ERROR_INVALID_SHADER_NV)
    DPT_VK_RESULT_(VK_ERROR_NOT_PERMITTED_KHR)
    DPT_VK_RESULT_(VK_ERROR_COMPRESSION_EXHAUSTED_EXT)
#undef DPT_VK_RESULT_
  default:
    break;
  }
  return "VK_RESULT_UNKNOWN";
}

dpt_status dpt_vk_check(dpt_vk_ctx *ctx, VkResult r, const char *call, size_t bytes) {
  if (r == VK_SUCCESS) return DPT_OK;
  const char *name = dpt_vk_result_name(r);
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY) {
    if (bytes)
      return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s (%zu bytes): %s (%d)", call, bytes, name,
                           (int)r);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: %s (%d)", call, name, (int)r);
  }
  if (r == VK_ERROR_DEVICE_LOST) {
    if (ctx && ctx->be) ctx->be->lost = 1;
    return dpt_set_error(DPT_ERR_DEVICE, "%s: %s (%d)", call, name, (int)r);
  }
  return dpt_set_error(DPT_ERR_DEVICE, "%s: %s (%d)", call, name, (int)r);
}

dpt_status dpt_vk_validation_status(dpt_vk_ctx *ctx) {
  if (ctx && atomic_exchange(&ctx->validation_pending, 0))
    return dpt_set_error(DPT_ERR_DEVICE, "Vulkan validation error: %s", ctx->validation_msg);
  return DPT_OK;
}

dpt_status dpt_vk_enter(dpt_backend *be) {
  if (be->lost)
    return dpt_set_error(DPT_ERR_DEVICE, "vulkan: the device was lost; destroy the backend");
  return dpt_vk_validation_status(be->ctx);
}

dpt_status dpt_vk_leave(dpt_backend *be, dpt_status st) {
  if (st != DPT_OK) return st;
  return dpt_vk_validation_status(be->ctx);
}
