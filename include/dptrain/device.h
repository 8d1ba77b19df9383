/* dptrain: backend kinds, the devices found, and creating a backend on one (the training tier:
 * what dpt_train_config.backend chooses, and what dpt_model_create runs on). Device memory and
 * the op set are the advanced tier: dptrain/backend.h.
 */
#ifndef DPTRAIN_DEVICE_H
#define DPTRAIN_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One device driven through one API (CPU, OpenCL, Vulkan), and device memory on it (opaque
 * here; dptrain/backend.h has the calls on them). */
typedef struct dpt_backend dpt_backend;
typedef struct dpt_buffer dpt_buffer;

/* Values that layer specs (dptrain/model.h) and the op set (dptrain/backend.h) share. */
#define DPT_IGNORE_INDEX (-100) /* a label that counts for nothing (PyTorch's ignore_index) */
/* GELU's two forms, as PyTorch's approximate='none' and 'tanh'. */
typedef enum dpt_gelu_approx { DPT_GELU_ERF = 0, DPT_GELU_TANH = 1 } dpt_gelu_approx;
/* An embedding bag's reduction: the sum or the mean of its rows. */
typedef enum dpt_bag_mode { DPT_BAG_SUM = 0, DPT_BAG_MEAN = 1 } dpt_bag_mode;

/* The one list of backend kinds: X(ENUM_SUFFIX, "name"). */
#define DPT_BACKEND_KIND_MAP(X)                                                                    \
  X(CPU, "cpu")                                                                                    \
  X(OPENCL, "opencl")                                                                              \
  X(VULKAN, "vulkan")

typedef enum dpt_backend_kind {
#define DPT_BACKEND_KIND_ENUM_(name, text) DPT_BACKEND_##name,
  DPT_BACKEND_KIND_MAP(DPT_BACKEND_KIND_ENUM_)
#undef DPT_BACKEND_KIND_ENUM_
      DPT_BACKEND_KIND_COUNT
} dpt_backend_kind;

typedef enum dpt_device_type {
  DPT_DEVICE_CPU = 0,
  DPT_DEVICE_GPU_DISCRETE = 1,
  DPT_DEVICE_GPU_INTEGRATED = 2,
  DPT_DEVICE_GPU_VIRTUAL = 3,
  DPT_DEVICE_ACCELERATOR = 4,
  DPT_DEVICE_OTHER = 5
} dpt_device_type;

typedef struct dpt_device_info {
  dpt_backend_kind backend; /* which backend drives it */
  int index;                /* device index within that backend, 0-based */
  dpt_device_type type;
  char name[128];        /* device name as the driver reports it, NUL-terminated */
  char vendor[64];       /* vendor name, NUL-terminated */
  char driver[128];      /* driver / platform / API version, NUL-terminated */
  uint64_t memory_bytes; /* global memory in bytes (0 if unknown) */
} dpt_device_info;

/* "cpu", "opencl", "vulkan"; NULL for values outside the list. */
DPT_API const char *dpt_backend_kind_name(dpt_backend_kind kind);
/* Parses a backend name; DPT_ERR_INVALID_ARG naming the valid names otherwise. */
DPT_API dpt_status dpt_backend_kind_parse(const char *name, dpt_backend_kind *out);
/* "cpu", "discrete gpu", "integrated gpu", ... */
DPT_API const char *dpt_device_type_name(dpt_device_type type);

/* 1 if support for the backend kind was compiled into this library, else 0. */
DPT_API int dpt_backend_compiled(dpt_backend_kind kind);

/* Number of devices of a backend present on this machine. A backend that is compiled in but
 * has no driver reports 0 devices and returns DPT_OK (the reason is in dpt_last_error()); a
 * backend that is not compiled in returns DPT_ERR_UNSUPPORTED. */
DPT_API dpt_status dpt_device_count(dpt_backend_kind kind, int *count);
/* What device `index` (0-based within the kind) is: its name, vendor, driver, memory. */
DPT_API dpt_status dpt_device_get_info(dpt_backend_kind kind, int index, dpt_device_info *out);

/* Creates a backend on device `device` (0-based within the kind). */
DPT_API dpt_status dpt_backend_create(dpt_backend_kind kind, int device, dpt_backend **out);
/* Waits for outstanding work, frees everything. NULL does nothing. Buffers still allocated
 * on the backend must be freed first; destroying a backend with live buffers frees them too
 * (their handles become invalid). */
DPT_API void dpt_backend_destroy(dpt_backend *backend);
/* The device a backend runs on, and its kind. */
DPT_API dpt_status dpt_backend_get_info(const dpt_backend *backend, dpt_device_info *out);
DPT_API dpt_backend_kind dpt_backend_get_kind(const dpt_backend *backend);

#ifdef __cplusplus
}
#endif

#endif
