/* The OpenCL backend: device enumeration, backend lifetime, device memory, and the vtable.
 *
 * Devices: every device of every platform, GPUs first, then accelerators, then CPUs, then
 * anything else; within a type, platforms in the ICD loader's order and devices in the
 * platform's order. The order is recomputed on each call (no global state) and is stable as
 * long as the installed drivers do not change.
 *
 * One backend = one device, one context, one in-order queue: commands run in submission order,
 * so ops need no events between them. Buffers are whole cl_mem objects; tensor offsets are
 * passed to kernels and to CLBlast, never turned into sub-buffers (which need aligned
 * offsets). Uploads and downloads are blocking, so host memory is free as soon as they
 * return. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/opencl/ocl_internal.h"
#include "base/error.h"

#define NO_DRIVER_MESSAGE                                                                          \
  "no OpenCL driver installed (for a CPU driver: apt-get install pocl-opencl-icd)"

/* A device found by enumeration. */
typedef struct ocl_device {
  cl_platform_id platform;
  cl_device_id device;
} ocl_device;

/* Enumeration rank of a device type: GPUs, accelerators, CPUs, anything else. */
static int type_rank(cl_device_id dev) {
  cl_device_type type = 0;
  if (clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof type, &type, NULL) != CL_SUCCESS) return 3;
  if (type & CL_DEVICE_TYPE_GPU) return 0;
  if (type & CL_DEVICE_TYPE_ACCELERATOR) return 1;
  if (type & CL_DEVICE_TYPE_CPU) return 2;
  return 3;
}

/* Appends the devices of platform `plat` to list[*n] and their ranks to rank[*n], growing both
 * arrays. One query per platform (CL_DEVICE_TYPE_ALL), so no call fails merely because a
 * platform lacks a device type; a platform without devices, or a broken one, adds nothing and
 * must not hide the working ones. */
static dpt_status append_devices(cl_platform_id plat, ocl_device **list, int **rank, size_t *n) {
  cl_uint ndev = 0;
  cl_int err = clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 0, NULL, &ndev);
  if (err != CL_SUCCESS || ndev == 0) return DPT_OK;
  cl_device_id *ids = malloc(ndev * sizeof *ids);
  ocl_device *grown = realloc(*list, (*n + ndev) * sizeof **list);
  if (grown) *list = grown;
  int *grown_rank = realloc(*rank, (*n + ndev) * sizeof **rank);
  if (grown_rank) *rank = grown_rank;
  if (!ids || !grown || !grown_rank) {
    free(ids);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "OpenCL enumeration: out of memory");
  }
  if (clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, ndev, ids, NULL) == CL_SUCCESS) {
    for (cl_uint d = 0; d < ndev; ++d) {
      (*list)[*n].platform = plat;
      (*list)[*n].device = ids[d];
      (*rank)[*n] = type_rank(ids[d]);
      ++*n;
    }
  }
  free(ids);
  return DPT_OK;
}

/* Stable insertion sort of list[0, n) by rank (ranks move along). */
static void sort_by_rank(ocl_device *list, int *rank, size_t n) {
  for (size_t i = 1; i < n; ++i) {
    ocl_device d = list[i];
    int r = rank[i];
    size_t j = i;
    for (; j > 0 && rank[j - 1] > r; --j) {
      list[j] = list[j - 1];
      rank[j] = rank[j - 1];
    }
    list[j] = d;
    rank[j] = r;
  }
}

/* Lists every device in enumeration order into *out (malloc'ed, *count entries; NULL when
 * there are none). No platform: *count = 0, DPT_OK, the reason as the thread's message. */
static dpt_status enumerate(ocl_device **out, int *count) {
  *out = NULL;
  *count = 0;
  cl_uint nplat = 0;
  cl_int err = clGetPlatformIDs(0, NULL, &nplat);
  if (err == -1001 /* CL_PLATFORM_NOT_FOUND_KHR: the ICD loader found no driver */ ||
      (err == CL_SUCCESS && nplat == 0)) {
    dpt_set_error(DPT_OK, NO_DRIVER_MESSAGE);
    return DPT_OK;
  }
  if (err != CL_SUCCESS) return dpt_ocl_fail(err, "clGetPlatformIDs", "", 0);
  cl_platform_id *plats = malloc(nplat * sizeof *plats);
  if (!plats) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "OpenCL enumeration: out of memory");
  err = clGetPlatformIDs(nplat, plats, NULL);
  if (err != CL_SUCCESS) {
    free(plats);
    return dpt_ocl_fail(err, "clGetPlatformIDs", "", 0);
  }

  /* Every device of every platform in the loader's and platforms' order, each with its rank;
   * then a stable sort by rank. */
  dpt_status st = DPT_OK;
  ocl_device *list = NULL;
  int *rank = NULL;
  size_t n = 0;
  for (cl_uint p = 0; p < nplat && st == DPT_OK; ++p)
    st = append_devices(plats[p], &list, &rank, &n);
  free(plats);
  if (st != DPT_OK) {
    free(list);
    free(rank);
    return st;
  }
  sort_by_rank(list, rank, n);
  free(rank);
  if (n == 0) dpt_set_error(DPT_OK, "OpenCL platforms found, but none has a device");
  if (n > 1000) n = 1000; /* fits an int comfortably; no machine comes close */
  *out = list;
  *count = (int)n;
  return DPT_OK;
}

/* The device at `index` of the enumeration order. */
static dpt_status find_device(int index, ocl_device *out) {
  ocl_device *list;
  int count;
  dpt_status st = enumerate(&list, &count);
  if (st != DPT_OK) return st;
  if (count == 0) return DPT_ERR_UNSUPPORTED; /* message set by enumerate */
  if (index < 0 || index >= count) {
    free(list);
    return dpt_set_error(DPT_ERR_INVALID_ARG, "OpenCL device %d out of range (%d devices)", index,
                         count);
  }
  *out = list[index];
  free(list);
  return DPT_OK;
}

static dpt_status dpt_ocl_device_count(int *count) {
  ocl_device *list;
  dpt_status st = enumerate(&list, count);
  free(list);
  return st;
}

/* A string property of a platform (dev == NULL) or of a device, malloc'ed into *out. */
static dpt_status info_string(cl_platform_id plat, cl_device_id dev, cl_uint param, char **out) {
  size_t size = 0;
  *out = NULL;
  cl_int err = dev ? clGetDeviceInfo(dev, param, 0, NULL, &size)
                   : clGetPlatformInfo(plat, param, 0, NULL, &size);
  char *text = err == CL_SUCCESS ? malloc(size + 1) : NULL;
  if (err == CL_SUCCESS && !text) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "out of memory");
  if (err == CL_SUCCESS)
    err = dev ? clGetDeviceInfo(dev, param, size, text, NULL)
              : clGetPlatformInfo(plat, param, size, text, NULL);
  if (err != CL_SUCCESS) {
    free(text);
    return dpt_ocl_fail(err, dev ? "clGetDeviceInfo" : "clGetPlatformInfo", "", 0);
  }
  text[size] = '\0';
  *out = text;
  return DPT_OK;
}

/* The same into text[len], truncated, NUL-terminated. */
static dpt_status info_string_to(cl_platform_id plat, cl_device_id dev, cl_uint param, char *text,
                                 size_t len) {
  char *full;
  dpt_status st = info_string(plat, dev, param, &full);
  if (st != DPT_OK) return st;
  snprintf(text, len, "%s", full);
  free(full);
  return DPT_OK;
}

/* A fixed-size property of a device. */
static dpt_status device_value(cl_device_id dev, cl_device_info param, void *value, size_t size,
                               const char *name) {
  cl_int err = clGetDeviceInfo(dev, param, size, value, NULL);
  if (err != CL_SUCCESS) return dpt_ocl_fail(err, "clGetDeviceInfo", name, 0);
  return DPT_OK;
}

static dpt_status fill_info(const ocl_device *d, dpt_device_info *out) {
  char plat_name[128], plat_version[128], driver_version[64];
  cl_device_type type = 0;
  cl_bool unified = CL_FALSE;
  cl_ulong mem = 0;
  dpt_status st = info_string_to(NULL, d->device, CL_DEVICE_NAME, out->name, sizeof out->name);
  if (st == DPT_OK)
    st = info_string_to(NULL, d->device, CL_DEVICE_VENDOR, out->vendor, sizeof out->vendor);
  if (st == DPT_OK)
    st = info_string_to(NULL, d->device, CL_DRIVER_VERSION, driver_version, sizeof driver_version);
  if (st == DPT_OK)
    st = info_string_to(d->platform, NULL, CL_PLATFORM_NAME, plat_name, sizeof plat_name);
  if (st == DPT_OK)
    st = info_string_to(d->platform, NULL, CL_PLATFORM_VERSION, plat_version, sizeof plat_version);
  if (st == DPT_OK) st = device_value(d->device, CL_DEVICE_TYPE, &type, sizeof type, "type");
  if (st == DPT_OK)
    st = device_value(d->device, CL_DEVICE_GLOBAL_MEM_SIZE, &mem, sizeof mem, "global memory");
  if (st == DPT_OK && (type & CL_DEVICE_TYPE_GPU))
    st = device_value(d->device, CL_DEVICE_HOST_UNIFIED_MEMORY, &unified, sizeof unified,
                      "unified memory");
  if (st != DPT_OK) return st;
  /* Composed at full length, then cut to the field: the platform version goes last because
   * it can be long (PoCL lists its build options there). */
  char driver[sizeof plat_name + sizeof plat_version + sizeof driver_version + 16];
  snprintf(driver, sizeof driver, "%s, driver %s, %s", plat_name, driver_version, plat_version);
  size_t len = strlen(driver);
  if (len >= sizeof out->driver) len = sizeof out->driver - 1;
  memcpy(out->driver, driver, len);
  out->driver[len] = '\0';
  if (type & CL_DEVICE_TYPE_GPU)
    out->type = unified ? DPT_DEVICE_GPU_INTEGRATED : DPT_DEVICE_GPU_DISCRETE;
  else if (type & CL_DEVICE_TYPE_ACCELERATOR)
    out->type = DPT_DEVICE_ACCELERATOR;
  else if (type & CL_DEVICE_TYPE_CPU)
    out->type = DPT_DEVICE_CPU;
  else
    out->type = DPT_DEVICE_OTHER;
  out->memory_bytes = mem;
  return DPT_OK;
}

static dpt_status dpt_ocl_device_info(int index, dpt_device_info *out) {
  ocl_device d;
  dpt_status st = find_device(index, &d);
  if (st != DPT_OK) return st;
  return fill_info(&d, out);
}

/* 1 if the space-separated extension list names `ext`. */
static int has_extension(const char *list, const char *ext) {
  size_t len = strlen(ext);
  for (const char *p = list; (p = strstr(p, ext)) != NULL; p += len)
    if ((p == list || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\0')) return 1;
  return 0;
}

static dpt_status read_limits(dpt_ocl_ctx *c) {
  dpt_ocl_limits *lim = &c->lim;
  size_t items[3] = {0, 0, 0};
  cl_uint dims = 0;
  cl_device_fp_config fp = 0;
  cl_device_id d = c->device;
  dpt_status st = device_value(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, &lim->max_wg, sizeof lim->max_wg,
                               "max work-group size");
  if (st == DPT_OK)
    st = device_value(d, CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS, &dims, sizeof dims, "dimensions");
  if (st == DPT_OK && dims >= 1 && dims <= 3)
    st = device_value(d, CL_DEVICE_MAX_WORK_ITEM_SIZES, items, dims * sizeof items[0],
                      "max work-item sizes");
  if (st == DPT_OK)
    st = device_value(d, CL_DEVICE_LOCAL_MEM_SIZE, &lim->local_mem, sizeof lim->local_mem,
                      "local memory");
  if (st == DPT_OK)
    st = device_value(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE, &lim->max_alloc, sizeof lim->max_alloc,
                      "max allocation");
  if (st == DPT_OK)
    st = device_value(d, CL_DEVICE_MAX_COMPUTE_UNITS, &lim->compute_units,
                      sizeof lim->compute_units, "compute units");
  if (st == DPT_OK)
    st = device_value(d, CL_DEVICE_SINGLE_FP_CONFIG, &fp, sizeof fp, "single fp config");
  if (st != DPT_OK) return st;
  lim->max_item0 = items[0];
  lim->exact_div_sqrt = (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;

  char *ext;
  st = info_string(NULL, d, CL_DEVICE_EXTENSIONS, &ext);
  if (st != DPT_OK) return st;
  lim->fp64 = has_extension(ext, "cl_khr_fp64");
  free(ext);
  return DPT_OK;
}

static void ocl_reap(dpt_ocl_ctx *c, int all);

static void dpt_ocl_destroy(dpt_backend *be) {
  dpt_ocl_ctx *c = dpt_ocl_ctx_of(be);
  if (!c) return;
  if (c->queue) clFinish(c->queue);
  ocl_reap(c, 1);
  if (c->scratch) clReleaseMemObject(c->scratch);
  if (c->gemm_scratch) clReleaseMemObject(c->gemm_scratch);
  dpt_ocl_release_program(c);
  if (c->queue) clReleaseCommandQueue(c->queue);
  if (c->context) clReleaseContext(c->context);
  free(c);
  be->ctx = NULL;
}

static dpt_status dpt_ocl_create(dpt_backend *be, int device) {
  ocl_device d;
  dpt_status st = find_device(device, &d);
  if (st != DPT_OK) return st;
  dpt_ocl_ctx *c = calloc(1, sizeof *c);
  if (!c) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "OpenCL backend: out of host memory");
  be->ctx = c;
  c->platform = d.platform;
  c->device = d.device;
  snprintf(c->device_name, sizeof c->device_name, "%s", be->info.name);

  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)d.platform, 0};
  cl_int err;
  c->context = clCreateContext(props, 1, &d.device, NULL, NULL, &err);
  if (err != CL_SUCCESS) {
    c->context = NULL;
    st = dpt_ocl_fail(err, "clCreateContext", c->device_name, 0);
  }
  if (st == DPT_OK) {
    c->queue = clCreateCommandQueue(c->context, d.device, 0, &err);
    if (err != CL_SUCCESS) {
      c->queue = NULL;
      st = dpt_ocl_fail(err, "clCreateCommandQueue", c->device_name, 0);
    }
  }
  if (st == DPT_OK) st = read_limits(c);
  if (st != DPT_OK) dpt_ocl_destroy(be);
  return st;
}

/* Errors after which the queue's state is unknown: the backend is marked lost. */
static void check_lost(dpt_backend *be, cl_int err) {
  if (err == CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST || err == CL_INVALID_COMMAND_QUEUE)
    be->lost = 1;
}

static dpt_status dpt_ocl_synchronize(dpt_backend *be) {
  cl_int err = clFinish(dpt_ocl_ctx_of(be)->queue);
  if (err != CL_SUCCESS) {
    be->lost = 1;
    return dpt_ocl_fail(err, "clFinish", "", 0);
  }
  return DPT_OK;
}

/* ---- memory -------------------------------------------------------------------------------- */

static dpt_status dpt_ocl_buffer_alloc(dpt_backend *be, dpt_buffer *buf) {
  dpt_ocl_ctx *c = dpt_ocl_ctx_of(be);
  if (c->lim.max_alloc > 0 && buf->size > c->lim.max_alloc)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY,
                         "clCreateBuffer: %zu bytes asked, more than the largest allocation of "
                         "device '%s' (CL_DEVICE_MAX_MEM_ALLOC_SIZE %llu bytes)",
                         buf->size, c->device_name, (unsigned long long)c->lim.max_alloc);
  cl_int err;
  cl_mem m = clCreateBuffer(c->context, CL_MEM_READ_WRITE, buf->size, NULL, &err);
  if (err != CL_SUCCESS) return dpt_ocl_fail(err, "clCreateBuffer", c->device_name, buf->size);
  buf->handle = m;
  return DPT_OK;
}

static void dpt_ocl_buffer_free(dpt_backend *be, dpt_buffer *buf) {
  (void)be;
  clReleaseMemObject(dpt_ocl_mem(buf));
  buf->handle = NULL;
}

static dpt_status dpt_ocl_upload(dpt_backend *be, dpt_buffer *dst, size_t offset, const void *src,
                                 size_t bytes) {
  cl_int err = clEnqueueWriteBuffer(dpt_ocl_ctx_of(be)->queue, dpt_ocl_mem(dst), CL_TRUE, offset,
                                    bytes, src, 0, NULL, NULL);
  if (err != CL_SUCCESS) {
    check_lost(be, err);
    return dpt_ocl_fail(err, "clEnqueueWriteBuffer", "upload", bytes);
  }
  return DPT_OK;
}

static dpt_status dpt_ocl_download(dpt_backend *be, const dpt_buffer *src, size_t offset, void *dst,
                                   size_t bytes) {
  cl_int err = clEnqueueReadBuffer(dpt_ocl_ctx_of(be)->queue, dpt_ocl_mem(src), CL_TRUE, offset,
                                   bytes, dst, 0, NULL, NULL);
  if (err != CL_SUCCESS) {
    check_lost(be, err);
    return dpt_ocl_fail(err, "clEnqueueReadBuffer", "download", bytes);
  }
  return DPT_OK;
}

/* Fenced transfers, all on the one in-order queue (OpenCL leaves a memory object that two
 * queues use at once undefined): the fence enqueues a nonblocking read of its range into a host
 * copy (or a marker, without a range) and flushes, so the read runs right after the work before
 * it; download_after waits for that read and copies from the host copy; upload_after puts the
 * data into the host copy and enqueues a nonblocking write from it, which the work submitted
 * later sees. A copy is freed once its last write has run: at the fence's free, or later (the
 * retired list, looked at by the next fence and at destroy). */
typedef struct ocl_snapshot {
  unsigned char *host; /* the range's bytes, NULL for a marker */
  cl_event done;       /* the read or the marker */
  cl_event written;    /* the last write, or NULL */
  struct ocl_snapshot *next;
} ocl_snapshot;

static int ocl_event_pending(cl_event ev) {
  cl_int status = CL_COMPLETE;
  if (ev && clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL) !=
                CL_SUCCESS)
    return 0; /* an error status counts as finished: nothing will run any more */
  return status > CL_COMPLETE;
}

/* Whether the device may still read or write the host copy. */
static int ocl_snapshot_busy(const ocl_snapshot *s) {
  return ocl_event_pending(s->done) || ocl_event_pending(s->written);
}

static void ocl_snapshot_free(ocl_snapshot *s) {
  if (s->done) clReleaseEvent(s->done);
  if (s->written) clReleaseEvent(s->written);
  free(s->host);
  free(s);
}

/* Frees the retired copies whose writes have run (lock held); all of them with `all`. */
static void ocl_reap(dpt_ocl_ctx *c, int all) {
  for (ocl_snapshot **p = &c->retired; *p;) {
    ocl_snapshot *s = *p;
    if (!all && ocl_snapshot_busy(s)) {
      p = &s->next;
      continue;
    }
    *p = s->next;
    ocl_snapshot_free(s);
  }
}

static int dpt_ocl_fence(dpt_backend *be, dpt_fence *f) {
  dpt_ocl_ctx *c = dpt_ocl_ctx_of(be);
  ocl_reap(c, 0);
  ocl_snapshot *s = calloc(1, sizeof *s);
  if (!s) return 0;
  if (f->bytes > 0 && !(s->host = malloc(f->bytes))) {
    free(s);
    return 0;
  }
  cl_int err = f->bytes > 0 ? clEnqueueReadBuffer(c->queue, dpt_ocl_mem(f->buf), CL_FALSE,
                                                  f->offset, f->bytes, s->host, 0, NULL, &s->done)
                            : clEnqueueMarkerWithWaitList(c->queue, 0, NULL, &s->done);
  if (err != CL_SUCCESS) {
    s->done = NULL;
    ocl_snapshot_free(s);
    return 0;
  }
  (void)clFlush(c->queue);
  f->handle = s;
  return 1;
}

static void dpt_ocl_fence_free(dpt_backend *be, dpt_fence *f) {
  ocl_snapshot *s = f->handle;
  dpt_ocl_ctx *c = dpt_ocl_ctx_of(be);
  pthread_mutex_lock(&be->lock);
  ocl_reap(c, 0);
  if (ocl_snapshot_busy(s)) {
    s->next = c->retired;
    c->retired = s;
  } else {
    ocl_snapshot_free(s);
  }
  pthread_mutex_unlock(&be->lock);
}

static dpt_status dpt_ocl_fence_wait(dpt_backend *be, const dpt_fence *f) {
  const ocl_snapshot *s = f->handle;
  cl_int err = clWaitForEvents(1, &s->done);
  if (err != CL_SUCCESS) {
    check_lost(be, err);
    return dpt_ocl_fail(err, "clWaitForEvents", "fenced read", f->bytes);
  }
  return DPT_OK;
}

static dpt_status dpt_ocl_download_after(dpt_backend *be, const dpt_fence *f, size_t offset,
                                         void *dst, size_t bytes) {
  DPT_TRY(dpt_ocl_fence_wait(be, f));
  const ocl_snapshot *s = f->handle;
  memcpy(dst, s->host + (offset - f->offset), bytes);
  return DPT_OK;
}

static dpt_status dpt_ocl_upload_after(dpt_backend *be, const dpt_fence *f, size_t offset,
                                       const void *src, size_t bytes) {
  DPT_TRY(dpt_ocl_fence_wait(be, f)); /* the read has left the host copy */
  ocl_snapshot *s = f->handle;
  unsigned char *at = s->host + (offset - f->offset);
  memcpy(at, src, bytes);
  cl_event ev = NULL;
  pthread_mutex_lock(&be->lock);
  cl_int err = clEnqueueWriteBuffer(dpt_ocl_ctx_of(be)->queue, dpt_ocl_mem(f->buf), CL_FALSE,
                                    offset, bytes, at, 0, NULL, &ev);
  if (err == CL_SUCCESS) {
    (void)clFlush(dpt_ocl_ctx_of(be)->queue);
    if (s->written) clReleaseEvent(s->written);
    s->written = ev;
  }
  pthread_mutex_unlock(&be->lock);
  if (err != CL_SUCCESS) {
    check_lost(be, err);
    return dpt_ocl_fail(err, "clEnqueueWriteBuffer", "fenced write", bytes);
  }
  return DPT_OK;
}

/* Zero-copy host access where the device works in host memory (a CPU device, or a GPU that
 * shares it): a blocking map, which waits for the commands before it. A discrete GPU's map
 * would be a hidden copy, so it reports none and the caller stages. */
static dpt_status dpt_ocl_map(dpt_backend *be, dpt_buffer *buf, size_t offset, size_t bytes,
                              void **ptr) {
  *ptr = NULL;
  if (be->info.type != DPT_DEVICE_CPU && be->info.type != DPT_DEVICE_GPU_INTEGRATED) return DPT_OK;
  cl_int err;
  void *p = clEnqueueMapBuffer(dpt_ocl_ctx_of(be)->queue, dpt_ocl_mem(buf), CL_TRUE,
                               CL_MAP_READ | CL_MAP_WRITE, offset, bytes, 0, NULL, NULL, &err);
  if (err != CL_SUCCESS) {
    check_lost(be, err);
    return dpt_ocl_fail(err, "clEnqueueMapBuffer", "map", bytes);
  }
  *ptr = p;
  return DPT_OK;
}

static dpt_status dpt_ocl_unmap(dpt_backend *be, dpt_buffer *buf, void *ptr) {
  cl_int err =
      clEnqueueUnmapMemObject(dpt_ocl_ctx_of(be)->queue, dpt_ocl_mem(buf), ptr, 0, NULL, NULL);
  if (err != CL_SUCCESS) {
    check_lost(be, err);
    return dpt_ocl_fail(err, "clEnqueueUnmapMemObject", "unmap", 0);
  }
  return DPT_OK;
}

static dpt_status dpt_ocl_copy(dpt_backend *be, dpt_buffer *dst, size_t dst_offset,
                               const dpt_buffer *src, size_t src_offset, size_t bytes) {
  cl_int err = clEnqueueCopyBuffer(dpt_ocl_ctx_of(be)->queue, dpt_ocl_mem(src), dpt_ocl_mem(dst),
                                   src_offset, dst_offset, bytes, 0, NULL, NULL);
  if (err != CL_SUCCESS) return dpt_ocl_fail(err, "clEnqueueCopyBuffer", "copy", bytes);
  return DPT_OK;
}

static dpt_status dpt_ocl_fill_f32(dpt_backend *be, dpt_buffer *dst, size_t offset_elems,
                                   size_t count, float value) {
  cl_float pattern = value;
  cl_int err =
      clEnqueueFillBuffer(dpt_ocl_ctx_of(be)->queue, dpt_ocl_mem(dst), &pattern, sizeof pattern,
                          offset_elems * sizeof pattern, count * sizeof pattern, 0, NULL, NULL);
  if (err != CL_SUCCESS)
    return dpt_ocl_fail(err, "clEnqueueFillBuffer", "fill_f32", count * sizeof pattern);
  return DPT_OK;
}

const dpt_backend_vtable dpt_opencl_vtable = {.kind = DPT_BACKEND_OPENCL,
                                              .device_count = dpt_ocl_device_count,
                                              .device_info = dpt_ocl_device_info,
                                              .create = dpt_ocl_create,
                                              .destroy = dpt_ocl_destroy,
                                              .synchronize = dpt_ocl_synchronize,
                                              .buffer_alloc = dpt_ocl_buffer_alloc,
                                              .buffer_free = dpt_ocl_buffer_free,
                                              .upload = dpt_ocl_upload,
                                              .download = dpt_ocl_download,
                                              .copy = dpt_ocl_copy,
                                              .fill_f32 = dpt_ocl_fill_f32,
                                              .map = dpt_ocl_map,
                                              .unmap = dpt_ocl_unmap,
                                              .fence = dpt_ocl_fence,
                                              .fence_free = dpt_ocl_fence_free,
                                              .fence_wait = dpt_ocl_fence_wait,
                                              .download_after = dpt_ocl_download_after,
                                              .upload_after = dpt_ocl_upload_after,
                                              .op_enabled = dpt_backend_no_direct_conv,
#define DPT_OCL_OP_ENTRY_(NAME, name) .name = dpt_ocl_##name,
                                              DPT_OP_MAP(DPT_OCL_OP_ENTRY_)
#undef DPT_OCL_OP_ENTRY_
};
