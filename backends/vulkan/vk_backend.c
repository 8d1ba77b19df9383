/* Vulkan backend: instance and device enumeration, backend creation/destruction,
 * validation-layer reporting and the vtable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/vulkan/vk_internal.h"
#include "backends/vulkan/vulkan_debug.h"
#include "base/error.h"
#include "base/env.h"

#define DPT_VK_NO_DRIVER                                                                           \
  "no Vulkan driver installed (for a CPU driver: apt-get install mesa-vulkan-drivers)"
#define DPT_VK_VALIDATION_LAYER "VK_LAYER_KHRONOS_validation"

/* Validation errors over the whole process, including those reported while a backend is
 * destroyed (when no op is left to return them). */
static atomic_uint_fast64_t vk_validation_total;

/* ---- validation ------------------------------------------------------------------------ */

static VKAPI_ATTR VkBool32 VKAPI_CALL vk_debug_callback(
    VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT types,
    const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
  (void)types;
  dpt_vk_ctx *ctx = user; /* may be NULL: messages outside any backend */
  const char *msg = data && data->pMessage ? data->pMessage : "(no message)";
  int error = (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) != 0;
  fprintf(stderr, "dptrain vulkan validation %s: %s\n", error ? "ERROR" : "warning", msg);
  if (error) {
    atomic_fetch_add(&vk_validation_total, 1);
    if (ctx) {
      atomic_fetch_add(&ctx->validation_errors, 1);
      if (!atomic_load(&ctx->validation_pending)) {
        snprintf(ctx->validation_msg, sizeof ctx->validation_msg, "%s", msg);
        atomic_store(&ctx->validation_pending, 1);
      }
    }
  }
  return VK_FALSE; /* never abort the call that triggered it */
}

uint64_t dpt_vulkan_validation_errors(const dpt_backend *be) {
  if (!be || !be->ctx || be->vt != &dpt_vulkan_vtable) return 0;
  dpt_vk_ctx *ctx = be->ctx;
  return (uint64_t)atomic_load(&ctx->validation_errors);
}

uint64_t dpt_vulkan_validation_errors_total(void) {
  return (uint64_t)atomic_load(&vk_validation_total);
}

int dpt_vulkan_validation_requested(void) {
  const char *v = dpt_env_get("DPT_VULKAN_VALIDATION");
  return v && strcmp(v, "1") == 0;
}

static void vk_messenger_info(dpt_vk_ctx *ctx, VkDebugUtilsMessengerCreateInfoEXT *info) {
  memset(info, 0, sizeof *info);
  info->sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
  info->messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                          VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  info->messageType =
      VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT;
  info->pfnUserCallback = vk_debug_callback;
  info->pUserData = ctx;
}

static int vk_has_layer(const char *name, dpt_status *st) {
  uint32_t n = 0;
  *st = dpt_vk_check(NULL, vkEnumerateInstanceLayerProperties(&n, NULL),
                     "vkEnumerateInstanceLayerProperties", 0);
  if (*st != DPT_OK || n == 0) return 0;
  VkLayerProperties *layers = calloc(n, sizeof *layers);
  if (!layers) {
    *st = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
    return 0;
  }
  VkResult r = vkEnumerateInstanceLayerProperties(&n, layers);
  int found = 0;
  if (r == VK_SUCCESS || r == VK_INCOMPLETE) {
    for (uint32_t i = 0; i < n; ++i)
      if (strcmp(layers[i].layerName, name) == 0) found = 1;
  } else {
    *st = dpt_vk_check(NULL, r, "vkEnumerateInstanceLayerProperties", 0);
  }
  free(layers);
  return found;
}

/* Whether the instance (phys == VK_NULL_HANDLE, extensions of `layer` or the implementation's
 * when NULL) or the physical device `phys` offers extension `name`. */
static int vk_has_extension(VkPhysicalDevice phys, const char *layer, const char *name) {
  uint32_t n = 0;
  VkResult r = phys ? vkEnumerateDeviceExtensionProperties(phys, NULL, &n, NULL)
                    : vkEnumerateInstanceExtensionProperties(layer, &n, NULL);
  if (r != VK_SUCCESS || n == 0) return 0;
  VkExtensionProperties *ext = calloc(n, sizeof *ext);
  if (!ext) return 0;
  int found = 0;
  r = phys ? vkEnumerateDeviceExtensionProperties(phys, NULL, &n, ext)
           : vkEnumerateInstanceExtensionProperties(layer, &n, ext);
  if (r == VK_SUCCESS || r == VK_INCOMPLETE)
    for (uint32_t i = 0; i < n; ++i)
      if (strcmp(ext[i].extensionName, name) == 0) found = 1;
  free(ext);
  return found;
}

/* ---- instance and physical devices ----------------------------------------------------- */

/* The Vulkan version of the loader; DPT_ERR_UNSUPPORTED below 1.1, which the backend needs. */
static dpt_status vk_loader_version(uint32_t *api) {
  *api = VK_API_VERSION_1_0;
  PFN_vkEnumerateInstanceVersion enum_version =
      (PFN_vkEnumerateInstanceVersion)vkGetInstanceProcAddr(NULL, "vkEnumerateInstanceVersion");
  if (enum_version && enum_version(api) != VK_SUCCESS) *api = VK_API_VERSION_1_0;
  if (*api < VK_API_VERSION_1_1)
    return dpt_set_error(DPT_ERR_UNSUPPORTED,
                         "vulkan: the Vulkan loader supports version %u.%u, 1.1 is needed",
                         VK_API_VERSION_MAJOR(*api), VK_API_VERSION_MINOR(*api));
  return DPT_OK;
}

/* What DPT_VULKAN_VALIDATION=1 needs: the validation layer, and debug utils from the
 * implementation or the layer. DPT_ERR_UNSUPPORTED naming what is missing. */
static dpt_status vk_validation_available(void) {
  dpt_status st = DPT_OK;
  if (!vk_has_layer(DPT_VK_VALIDATION_LAYER, &st)) {
    if (st != DPT_OK) return st;
    return dpt_set_error(DPT_ERR_UNSUPPORTED,
                         "vulkan: DPT_VULKAN_VALIDATION=1 but the layer %s is not installed "
                         "(apt-get install vulkan-validationlayers)",
                         DPT_VK_VALIDATION_LAYER);
  }
  if (!vk_has_extension(VK_NULL_HANDLE, NULL, VK_EXT_DEBUG_UTILS_EXTENSION_NAME) &&
      !vk_has_extension(VK_NULL_HANDLE, DPT_VK_VALIDATION_LAYER, VK_EXT_DEBUG_UTILS_EXTENSION_NAME))
    return dpt_set_error(DPT_ERR_UNSUPPORTED,
                         "vulkan: DPT_VULKAN_VALIDATION=1 but %s is not available",
                         VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  return DPT_OK;
}

/* Registers ctx's messenger (`dbg`) on instance `inst`; the caller destroys the instance when
 * this fails. */
static dpt_status vk_messenger_create(dpt_vk_ctx *ctx, VkInstance inst,
                                      const VkDebugUtilsMessengerCreateInfoEXT *dbg) {
  PFN_vkCreateDebugUtilsMessengerEXT create_messenger =
      (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(inst,
                                                                "vkCreateDebugUtilsMessengerEXT");
  ctx->destroy_messenger = (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(
      inst, "vkDestroyDebugUtilsMessengerEXT");
  if (!create_messenger || !ctx->destroy_messenger)
    return dpt_set_error(DPT_ERR_UNSUPPORTED,
                         "vulkan: vkCreateDebugUtilsMessengerEXT is not available");
  return dpt_vk_check(NULL, create_messenger(inst, dbg, NULL, &ctx->messenger),
                      "vkCreateDebugUtilsMessengerEXT", 0);
}

/* Creates an instance. With `ctx` and validation requested, enables the validation layer and
 * debug utils and registers the messenger. A missing driver is DPT_ERR_UNSUPPORTED with the
 * install hint. */
static dpt_status vk_instance_create(dpt_vk_ctx *ctx, VkInstance *out) {
  *out = VK_NULL_HANDLE;
  uint32_t api;
  DPT_TRY(vk_loader_version(&api));

  VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                           .pApplicationName = "dptrain",
                           .applicationVersion = 1,
                           .pEngineName = "dptrain",
                           .engineVersion = 1,
                           .apiVersion =
                               api >= VK_API_VERSION_1_2 ? VK_API_VERSION_1_2 : VK_API_VERSION_1_1};
  const char *layers[1];
  const char *exts[3];
  uint32_t nlayers = 0, nexts = 0;
  VkInstanceCreateInfo info = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                               .pApplicationInfo = &app};
  /* Drivers layered over Metal and the like are only listed with portability enumeration. */
  if (vk_has_extension(VK_NULL_HANDLE, NULL, "VK_KHR_portability_enumeration")) {
    exts[nexts++] = "VK_KHR_portability_enumeration";
    info.flags |= 0x00000001; /* VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR */
  }
  VkDebugUtilsMessengerCreateInfoEXT dbg;
  /* Synchronization validation checks the barriers between recorded commands as well. */
  VkValidationFeatureEnableEXT sync = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
  VkValidationFeaturesEXT features = {.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
                                      .enabledValidationFeatureCount = 1,
                                      .pEnabledValidationFeatures = &sync};
  int validation = ctx && ctx->validation;
  if (validation) {
    DPT_TRY(vk_validation_available());
    layers[nlayers++] = DPT_VK_VALIDATION_LAYER;
    exts[nexts++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    /* Also covers messages from vkCreateInstance/vkDestroyInstance themselves. */
    vk_messenger_info(ctx, &dbg);
    info.pNext = &dbg;
    if (vk_has_extension(VK_NULL_HANDLE, DPT_VK_VALIDATION_LAYER,
                         VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME)) {
      exts[nexts++] = VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME;
      features.pNext = &dbg;
      info.pNext = &features;
    }
  }
  info.enabledLayerCount = nlayers;
  info.ppEnabledLayerNames = nlayers ? layers : NULL;
  info.enabledExtensionCount = nexts;
  info.ppEnabledExtensionNames = nexts ? exts : NULL;

  VkResult r = vkCreateInstance(&info, NULL, out);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER) {
    *out = VK_NULL_HANDLE;
    return dpt_set_error(DPT_ERR_UNSUPPORTED, DPT_VK_NO_DRIVER);
  }
  if (r != VK_SUCCESS) {
    *out = VK_NULL_HANDLE;
    return dpt_vk_check(NULL, r, "vkCreateInstance", 0);
  }
  if (validation) {
    dpt_status st = vk_messenger_create(ctx, *out, &dbg);
    if (st != DPT_OK) {
      vkDestroyInstance(*out, NULL);
      *out = VK_NULL_HANDLE;
      return st;
    }
  }
  return DPT_OK;
}

static int vk_type_rank(VkPhysicalDeviceType t) {
  switch (t) {
  case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
    return 0;
  case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
    return 1;
  case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
    return 2;
  case VK_PHYSICAL_DEVICE_TYPE_OTHER:
    return 3;
  case VK_PHYSICAL_DEVICE_TYPE_CPU:
    return 4;
  default:
    return 3;
  }
}

/* A compute queue family of `pd`, or UINT32_MAX. */
static uint32_t vk_compute_family(VkPhysicalDevice pd) {
  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, NULL);
  if (n == 0) return UINT32_MAX;
  VkQueueFamilyProperties *fam = calloc(n, sizeof *fam);
  if (!fam) return UINT32_MAX;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, fam);
  uint32_t found = UINT32_MAX;
  for (uint32_t i = 0; i < n && found == UINT32_MAX; ++i)
    if ((fam[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && fam[i].queueCount > 0) found = i;
  free(fam);
  return found;
}

/* The usable physical devices (Vulkan >= 1.1 with a compute queue) in the backend's order:
 * discrete, integrated, virtual, other, CPU; enumeration order within a type. *out is owned
 * by the caller. */
static dpt_status vk_physical_devices(VkInstance inst, VkPhysicalDevice **out, uint32_t *count) {
  *out = NULL;
  *count = 0;
  uint32_t n = 0;
  dpt_status st = dpt_vk_check(NULL, vkEnumeratePhysicalDevices(inst, &n, NULL),
                               "vkEnumeratePhysicalDevices", 0);
  if (st != DPT_OK) return st;
  if (n == 0) {
    dpt_set_error(DPT_ERR_UNSUPPORTED, DPT_VK_NO_DRIVER);
    return DPT_OK;
  }
  VkPhysicalDevice *all = calloc(n, sizeof *all);
  VkPhysicalDevice *sorted = calloc(n, sizeof *sorted);
  if (!all || !sorted) {
    free(all);
    free(sorted);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
  }
  VkResult r = vkEnumeratePhysicalDevices(inst, &n, all);
  if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
    free(all);
    free(sorted);
    return dpt_vk_check(NULL, r, "vkEnumeratePhysicalDevices", 0);
  }
  uint32_t m = 0;
  for (int rank = 0; rank <= 4; ++rank) {
    for (uint32_t i = 0; i < n; ++i) {
      VkPhysicalDeviceProperties p;
      vkGetPhysicalDeviceProperties(all[i], &p);
      if (vk_type_rank(p.deviceType) != rank) continue;
      if (p.apiVersion < VK_API_VERSION_1_1) continue;
      if (vk_compute_family(all[i]) == UINT32_MAX) continue;
      sorted[m++] = all[i];
    }
  }
  free(all);
  *out = sorted;
  *count = m;
  if (m == 0)
    dpt_set_error(DPT_ERR_UNSUPPORTED,
                  "vulkan: %u device%s found, none with Vulkan 1.1 and a compute queue", n,
                  n == 1 ? "" : "s");
  return DPT_OK;
}

static const char *vk_vendor_name(uint32_t id) {
  switch (id) {
  case 0x10DE:
    return "NVIDIA";
  case 0x1002:
  case 0x1022:
    return "AMD";
  case 0x8086:
    return "Intel";
  case 0x13B5:
    return "ARM";
  case 0x5143:
    return "Qualcomm";
  case 0x1010:
    return "Imagination";
  case 0x106B:
    return "Apple";
  case 0x10005:
    return "Mesa";
  default:
    return NULL;
  }
}

static void vk_fill_info(VkPhysicalDevice pd, int index, dpt_device_info *out) {
  memset(out, 0, sizeof *out);
  VkPhysicalDeviceDriverProperties drv = {.sType =
                                              VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  VkPhysicalDeviceProperties basic;
  vkGetPhysicalDeviceProperties(pd, &basic);
  int has_driver_props = basic.apiVersion >= VK_API_VERSION_1_2;
  if (has_driver_props) p2.pNext = &drv;
  vkGetPhysicalDeviceProperties2(pd, &p2);
  const VkPhysicalDeviceProperties *p = &p2.properties;

  out->backend = DPT_BACKEND_VULKAN;
  out->index = index;
  switch (p->deviceType) {
  case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
    out->type = DPT_DEVICE_GPU_DISCRETE;
    break;
  case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
    out->type = DPT_DEVICE_GPU_INTEGRATED;
    break;
  case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
    out->type = DPT_DEVICE_GPU_VIRTUAL;
    break;
  case VK_PHYSICAL_DEVICE_TYPE_CPU:
    out->type = DPT_DEVICE_CPU;
    break;
  default:
    out->type = DPT_DEVICE_OTHER;
    break;
  }
  snprintf(out->name, sizeof out->name, "%.127s", p->deviceName);
  const char *vendor = vk_vendor_name(p->vendorID);
  if (vendor)
    snprintf(out->vendor, sizeof out->vendor, "%s", vendor);
  else
    snprintf(out->vendor, sizeof out->vendor, "0x%04x", (unsigned)p->vendorID);
  if (has_driver_props)
    snprintf(out->driver, sizeof out->driver, "%.40s %.60s (Vulkan %u.%u.%u)", drv.driverName,
             drv.driverInfo, VK_API_VERSION_MAJOR(p->apiVersion),
             VK_API_VERSION_MINOR(p->apiVersion), VK_API_VERSION_PATCH(p->apiVersion));
  else
    snprintf(out->driver, sizeof out->driver, "Vulkan %u.%u.%u, driver 0x%x",
             VK_API_VERSION_MAJOR(p->apiVersion), VK_API_VERSION_MINOR(p->apiVersion),
             VK_API_VERSION_PATCH(p->apiVersion), (unsigned)p->driverVersion);
  VkPhysicalDeviceMemoryProperties mp;
  vkGetPhysicalDeviceMemoryProperties(pd, &mp);
  for (uint32_t h = 0; h < mp.memoryHeapCount; ++h)
    if (mp.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      out->memory_bytes += mp.memoryHeaps[h].size;
}

static dpt_status dpt_vk_device_count(int *count) {
  *count = 0;
  VkInstance inst;
  dpt_status st = vk_instance_create(NULL, &inst);
  if (st == DPT_ERR_UNSUPPORTED) return DPT_OK; /* no driver: 0 devices, reason kept */
  if (st != DPT_OK) return st;
  VkPhysicalDevice *devs;
  uint32_t n;
  st = vk_physical_devices(inst, &devs, &n);
  free(devs);
  vkDestroyInstance(inst, NULL);
  if (st != DPT_OK) return st;
  *count = (int)n; /* 0: the reason is already set */
  return DPT_OK;
}

static dpt_status dpt_vk_device_info(int index, dpt_device_info *out) {
  VkInstance inst;
  dpt_status st = vk_instance_create(NULL, &inst);
  if (st != DPT_OK) return st;
  VkPhysicalDevice *devs;
  uint32_t n;
  st = vk_physical_devices(inst, &devs, &n);
  if (st == DPT_OK) {
    if (n == 0)
      st = DPT_ERR_UNSUPPORTED; /* message set by vk_physical_devices */
    else if (index < 0 || (uint32_t)index >= n)
      st = dpt_set_error(DPT_ERR_INVALID_ARG, "vulkan: device %d does not exist (%u devices)",
                         index, n);
    else
      vk_fill_info(devs[index], index, out);
  }
  free(devs);
  vkDestroyInstance(inst, NULL);
  return st;
}

/* ---- environment ----------------------------------------------------------------------- */

/* A 0/1 knob: unset, empty or "0" is off, "1" on; anything else is refused (a typo such as
 * "yes" must not silently mean off). */
static dpt_status vk_env_flag(const char *name, int *out) {
  const char *v = dpt_env_get(name);
  *out = 0;
  if (v == NULL || v[0] == '\0' || strcmp(v, "0") == 0) return DPT_OK;
  if (strcmp(v, "1") == 0) {
    *out = 1;
    return DPT_OK;
  }
  return dpt_set_error(DPT_ERR_INVALID_ARG, "vulkan: %s='%s' is not 0 or 1", name, v);
}

/* DPT_VULKAN_TEST_MAX_RANGE: decimal bytes, at least 1024 (the smallest range the split
 * dispatches are written for) and at most 2^32 - 1 (the limit's type); unset or empty: 0. */
static dpt_status vk_env_max_range(uint32_t *out) {
  const char *v = dpt_env_get("DPT_VULKAN_TEST_MAX_RANGE");
  *out = 0;
  if (v == NULL || v[0] == '\0') return DPT_OK;
  uint64_t n = 0;
  const char *p = v;
  for (; *p >= '0' && *p <= '9' && n <= UINT32_MAX; ++p)
    n = n * 10 + (uint64_t)(*p - '0');
  if (*p != '\0' || n < 1024 || n > UINT32_MAX)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "vulkan: DPT_VULKAN_TEST_MAX_RANGE='%s' is not a byte count from 1024 "
                         "to 4294967295 (decimal digits)",
                         v);
  *out = (uint32_t)n;
  return DPT_OK;
}

/* Every knob of vulkan_debug.h into ctx, so that a value the backend would not understand fails
 * the creation with DPT_ERR_INVALID_ARG naming the variable, instead of meaning the default. */
static dpt_status vk_read_env(dpt_vk_ctx *ctx) {
  DPT_TRY(vk_env_flag("DPT_VULKAN_VALIDATION", &ctx->validation));
  DPT_TRY(vk_env_flag("DPT_VULKAN_FORCE_STAGING", &ctx->force_staging));
  DPT_TRY(vk_env_flag("DPT_VULKAN_PORTABLE", &ctx->portable));
  DPT_TRY(vk_env_flag("DPT_VULKAN_NO_TEX", &ctx->no_tex));
  return vk_env_max_range(&ctx->test_max_range);
}

/* ---- backend lifetime ------------------------------------------------------------------ */

static void dpt_vk_destroy(dpt_backend *be);

/* ctx->phys = physical device `device` of the backend's order. */
static dpt_status vk_pick_device(dpt_vk_ctx *ctx, int device) {
  VkPhysicalDevice *devs;
  uint32_t n;
  dpt_status st = vk_physical_devices(ctx->instance, &devs, &n);
  if (st == DPT_OK && n == 0) st = DPT_ERR_UNSUPPORTED; /* message set by vk_physical_devices */
  if (st == DPT_OK && (device < 0 || (uint32_t)device >= n))
    st = dpt_set_error(DPT_ERR_INVALID_ARG, "vulkan: device %d does not exist (%u devices)", device,
                       n);
  if (st == DPT_OK) ctx->phys = devs[device];
  free(devs);
  return st;
}

/* Reads the properties, limits and memory types of ctx->phys into ctx, refusing a device whose
 * workgroups are too small for the shaders. */
static dpt_status vk_read_properties(dpt_vk_ctx *ctx) {
  VkPhysicalDeviceMaintenance3Properties m3 = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                    .pNext = &m3};
  vkGetPhysicalDeviceProperties2(ctx->phys, &p2);
  ctx->props = p2.properties;
  ctx->max_allocation = m3.maxMemoryAllocationSize;
  /* The shaders' workgroups: 256 x 1 (DPT_VK_WG) and 32 x 8; the spec guarantees only 128
   * invocations. A device below that is refused here, not at its first pipeline. */
  const VkPhysicalDeviceLimits *lim = &ctx->props.limits;
  if (lim->maxComputeWorkGroupInvocations < DPT_VK_WG ||
      lim->maxComputeWorkGroupSize[0] < DPT_VK_WG || lim->maxComputeWorkGroupSize[1] < 8)
    return dpt_set_error(DPT_ERR_UNSUPPORTED,
                         "vulkan: %s allows workgroups of %u invocations (%u x %u), the shaders "
                         "need 256 invocations and sizes of at least 256 x 8",
                         ctx->props.deviceName, (unsigned)lim->maxComputeWorkGroupInvocations,
                         (unsigned)lim->maxComputeWorkGroupSize[0],
                         (unsigned)lim->maxComputeWorkGroupSize[1]);
  /* Test knob: a smaller maxStorageBufferRange, so tests reach the split dispatches with small
   * tensors. */
  if (ctx->test_max_range && ctx->test_max_range < ctx->props.limits.maxStorageBufferRange)
    ctx->props.limits.maxStorageBufferRange = ctx->test_max_range;
  vkGetPhysicalDeviceMemoryProperties(ctx->phys, &ctx->memprops);
  return DPT_OK;
}

static dpt_status vk_device_create(dpt_vk_ctx *ctx) {
  ctx->queue_family = vk_compute_family(ctx->phys);
  float prio = 1.0f;
  VkDeviceQueueCreateInfo q = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                               .queueFamilyIndex = ctx->queue_family,
                               .queueCount = 1,
                               .pQueuePriorities = &prio};
  /* On a CPU driver the gemm variant built for SIMD lanes stages tiles as dvec4, which needs
   * shaderFloat64 (DPT_VULKAN_PORTABLE=1 keeps the portable kernels, to test them there). */
  VkPhysicalDeviceFeatures supported, enabled;
  memset(&enabled, 0, sizeof enabled);
  vkGetPhysicalDeviceFeatures(ctx->phys, &supported);
  if (ctx->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU && supported.shaderFloat64 &&
      !ctx->portable) {
    enabled.shaderFloat64 = VK_TRUE;
    ctx->gemm_cpu = 1;
    /* gemm_tex.spv reads A and B as R32F or RGBA32F uniform texel buffers (both formats are
     * required by the spec for that use; checked anyway) */
    VkFormatProperties f1, f4;
    vkGetPhysicalDeviceFormatProperties(ctx->phys, VK_FORMAT_R32_SFLOAT, &f1);
    vkGetPhysicalDeviceFormatProperties(ctx->phys, VK_FORMAT_R32G32B32A32_SFLOAT, &f4);
    ctx->gemm_tex = !ctx->no_tex && (f1.bufferFeatures & f4.bufferFeatures &
                                     VK_FORMAT_FEATURE_UNIFORM_TEXEL_BUFFER_BIT) != 0;
    VkFormatProperties fi;
    vkGetPhysicalDeviceFormatProperties(ctx->phys, VK_FORMAT_R32_SINT, &fi);
    ctx->tex_sint = (fi.bufferFeatures & VK_FORMAT_FEATURE_UNIFORM_TEXEL_BUFFER_BIT) != 0;
  }
  /* A driver layered over another API (MoltenVK over Metal) lists VK_KHR_portability_subset,
   * and the spec then requires it enabled. */
  const char *portability = "VK_KHR_portability_subset";
  const int subset = vk_has_extension(ctx->phys, NULL, portability);
  VkDeviceCreateInfo info = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                             .queueCreateInfoCount = 1,
                             .pQueueCreateInfos = &q,
                             .enabledExtensionCount = subset ? 1u : 0u,
                             .ppEnabledExtensionNames = subset ? &portability : NULL,
                             .pEnabledFeatures = &enabled};
  dpt_status st =
      dpt_vk_check(ctx, vkCreateDevice(ctx->phys, &info, NULL, &ctx->device), "vkCreateDevice", 0);
  if (st != DPT_OK) {
    ctx->device = VK_NULL_HANDLE;
    return st;
  }
  vkGetDeviceQueue(ctx->device, ctx->queue_family, 0, &ctx->queue);
  return DPT_OK;
}

static dpt_status dpt_vk_create(dpt_backend *be, int device) {
  dpt_vk_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
  ctx->be = be;
  ctx->recording = -1;
  ctx->last_frame = DPT_VK_FRAMES - 1;
  ctx->next_serial = 1;
  atomic_init(&ctx->validation_errors, 0);
  atomic_init(&ctx->validation_pending, 0);
  be->ctx = ctx;

  dpt_status st = vk_read_env(ctx);
  if (st == DPT_OK) st = vk_instance_create(ctx, &ctx->instance);
  if (st == DPT_OK) st = vk_pick_device(ctx, device);
  if (st == DPT_OK) st = vk_read_properties(ctx);
  if (st == DPT_OK) st = vk_device_create(ctx);
  if (st == DPT_OK) st = dpt_vk_memory_init(ctx);
  if (st == DPT_OK) st = dpt_vk_exec_init(ctx);
  if (st == DPT_OK) st = dpt_vk_validation_status(ctx);
  if (st != DPT_OK) dpt_vk_destroy(be);
  return st;
}

static void dpt_vk_destroy(dpt_backend *be) {
  dpt_vk_ctx *ctx = be->ctx;
  if (!ctx) return;
  if (ctx->device) {
    if (!be->lost) (void)dpt_vk_finish(ctx);
    (void)vkDeviceWaitIdle(ctx->device); /* after a loss this may fail; free anyway */
    dpt_vk_exec_destroy(ctx);
    dpt_vk_memory_destroy(ctx);
    vkDestroyDevice(ctx->device, NULL);
  }
  if (ctx->messenger && ctx->destroy_messenger)
    ctx->destroy_messenger(ctx->instance, ctx->messenger, NULL);
  if (ctx->instance) vkDestroyInstance(ctx->instance, NULL);
  free(ctx);
  be->ctx = NULL;
}

static dpt_status dpt_vk_synchronize(dpt_backend *be) {
  dpt_status st = dpt_vk_enter(be);
  if (st == DPT_OK) st = dpt_vk_finish(dpt_vk_ctx_of(be));
  return dpt_vk_leave(be, st);
}

/* Lifetime and synchronize are above; the memory entries are in vk_memory.c, the ops in vk_ops.c.
 */
const dpt_backend_vtable dpt_vulkan_vtable = {.kind = DPT_BACKEND_VULKAN,
                                              .device_count = dpt_vk_device_count,
                                              .device_info = dpt_vk_device_info,
                                              .create = dpt_vk_create,
                                              .destroy = dpt_vk_destroy,
                                              .synchronize = dpt_vk_synchronize,
                                              .buffer_alloc = dpt_vk_buffer_alloc,
                                              .buffer_free = dpt_vk_buffer_free,
                                              .upload = dpt_vk_upload,
                                              .download = dpt_vk_download,
                                              .copy = dpt_vk_copy,
                                              .fill_f32 = dpt_vk_fill_f32,
                                              .map = dpt_vk_map,
                                              .fence = dpt_vk_fence,
                                              .fence_free = dpt_vk_fence_free,
                                              .fence_wait = dpt_vk_fence_wait,
                                              .download_after = dpt_vk_download_after,
                                              .upload_after = dpt_vk_upload_after,
                                              .op_enabled = dpt_backend_no_direct_conv,
#define DPT_VK_OP_ENTRY_(NAME, name) .name = dpt_vk_##name,
                                              DPT_OP_MAP(DPT_VK_OP_ENTRY_)
#undef DPT_VK_OP_ENTRY_
};
