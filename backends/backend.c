/* Public backend API: argument checking, defaults for optional vtable entries, enumeration.
 *
 * Every check lives here, once, so a backend entry receives only valid, non-empty arguments:
 * handles non-NULL and of this backend, sizes without overflow, every tensor range inside its
 * buffer, geometries valid. Messages name the call and the argument that was rejected. */
#define _XOPEN_SOURCE 700 /* PTHREAD_MUTEX_RECURSIVE */
#include <stdlib.h>
#include <string.h>

#include "backends/backend_impl.h"
#include "backends/op_check.h"
#include "base/error.h"
#include "base/size.h"

/* ---- kinds, names, enumeration ----------------------------------------------------------- */

const dpt_backend_vtable *dpt_backend_vtable_for(dpt_backend_kind kind) {
  switch (kind) {
  case DPT_BACKEND_CPU:
    return &dpt_cpu_vtable;
  case DPT_BACKEND_OPENCL:
#ifdef DPT_HAVE_OPENCL
    return &dpt_opencl_vtable;
#else
    return NULL;
#endif
  case DPT_BACKEND_VULKAN:
#ifdef DPT_HAVE_VULKAN
    return &dpt_vulkan_vtable;
#else
    return NULL;
#endif
  default:
    return NULL;
  }
}

const char *dpt_backend_kind_name(dpt_backend_kind kind) {
  switch (kind) {
#define DPT_KIND_NAME_(name, text)                                                                 \
  case DPT_BACKEND_##name:                                                                         \
    return text;
    DPT_BACKEND_KIND_MAP(DPT_KIND_NAME_)
#undef DPT_KIND_NAME_
  default:
    return NULL;
  }
}

dpt_status dpt_backend_kind_parse(const char *name, dpt_backend_kind *out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_backend_kind_parse: out is NULL");
  if (!name) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_backend_kind_parse: name is NULL");
  for (int k = 0; k < DPT_BACKEND_KIND_COUNT; ++k) {
    if (strcmp(name, dpt_backend_kind_name((dpt_backend_kind)k)) == 0) {
      *out = (dpt_backend_kind)k;
      return DPT_OK;
    }
  }
  return dpt_set_error(DPT_ERR_INVALID_ARG,
                       "dpt_backend_kind_parse: unknown backend name '%s' (expected cpu, opencl "
                       "or vulkan)",
                       name);
}

const char *dpt_device_type_name(dpt_device_type type) {
  switch (type) {
  case DPT_DEVICE_CPU:
    return "cpu";
  case DPT_DEVICE_GPU_DISCRETE:
    return "discrete gpu";
  case DPT_DEVICE_GPU_INTEGRATED:
    return "integrated gpu";
  case DPT_DEVICE_GPU_VIRTUAL:
    return "virtual gpu";
  case DPT_DEVICE_ACCELERATOR:
    return "accelerator";
  default:
    return "other";
  }
}

int dpt_backend_compiled(dpt_backend_kind kind) {
  return dpt_backend_vtable_for(kind) != NULL;
}

static dpt_status get_vtable(const char *fn, dpt_backend_kind kind,
                             const dpt_backend_vtable **out) {
  if ((int)kind < 0 || kind >= DPT_BACKEND_KIND_COUNT)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: kind %d is not a backend kind", fn, (int)kind);
  *out = dpt_backend_vtable_for(kind);
  if (!*out)
    return dpt_set_error(DPT_ERR_UNSUPPORTED,
                         "%s: the %s backend is not compiled into this build of dptrain", fn,
                         dpt_backend_kind_name(kind));
  return DPT_OK;
}

/* Replicas in one process create their backends at once, and a driver's first enumeration is
 * not always safe from two threads (PoCL reads a device's strings while another thread is still
 * detecting the topology): enumeration and creation are serialized. */
static pthread_mutex_t enumerate_lock = PTHREAD_MUTEX_INITIALIZER;

dpt_status dpt_device_count(dpt_backend_kind kind, int *count) {
  const dpt_backend_vtable *vt = NULL;
  if (!count) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_device_count: count is NULL");
  *count = 0;
  dpt_status st = get_vtable("dpt_device_count", kind, &vt);
  if (st != DPT_OK) return st;
  pthread_mutex_lock(&enumerate_lock);
  st = vt->device_count(count);
  pthread_mutex_unlock(&enumerate_lock);
  return st;
}

static dpt_status check_device_index(const char *fn, const dpt_backend_vtable *vt, int index) {
  int count = 0;
  dpt_status st = vt->device_count(&count);
  if (st != DPT_OK) return st;
  if (count == 0)
    return dpt_error_context(DPT_ERR_UNSUPPORTED, "%s: no %s device", fn,
                             dpt_backend_kind_name(vt->kind));
  if (index < 0 || index >= count)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: device %d out of range (%s has %d device%s)", fn,
                         index, dpt_backend_kind_name(vt->kind), count, count == 1 ? "" : "s");
  return DPT_OK;
}

dpt_status dpt_device_get_info(dpt_backend_kind kind, int index, dpt_device_info *out) {
  const dpt_backend_vtable *vt = NULL;
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_device_get_info: out is NULL");
  dpt_status st = get_vtable("dpt_device_get_info", kind, &vt);
  if (st != DPT_OK) return st;
  pthread_mutex_lock(&enumerate_lock);
  st = check_device_index("dpt_device_get_info", vt, index);
  memset(out, 0, sizeof *out);
  if (st == DPT_OK) st = vt->device_info(index, out);
  pthread_mutex_unlock(&enumerate_lock);
  out->backend = kind;
  out->index = index;
  return st;
}

/* ---- backend lifetime -------------------------------------------------------------------- */

static dpt_status create_locked(dpt_backend_kind kind, int device, dpt_backend **out);

dpt_status dpt_backend_create(dpt_backend_kind kind, int device, dpt_backend **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_backend_create: out is NULL");
  *out = NULL;
  pthread_mutex_lock(&enumerate_lock);
  const dpt_status st = create_locked(kind, device, out);
  pthread_mutex_unlock(&enumerate_lock);
  return st;
}

static dpt_status create_locked(dpt_backend_kind kind, int device, dpt_backend **out) {
  const dpt_backend_vtable *vt = NULL;
  dpt_status st = get_vtable("dpt_backend_create", kind, &vt);
  if (st == DPT_OK) st = check_device_index("dpt_backend_create", vt, device);
  if (st != DPT_OK) return st;
  dpt_backend *be = calloc(1, sizeof *be);
  if (!be) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_backend_create: out of host memory");
  be->vt = vt;
  st = vt->device_info(device, &be->info);
  be->info.backend = kind;
  be->info.index = device;
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&be->lock, &attr);
  pthread_mutexattr_destroy(&attr);
  if (st == DPT_OK) st = vt->create(be, device);
  if (st != DPT_OK) {
    pthread_mutex_destroy(&be->lock);
    free(be);
    return st;
  }
  *out = be;
  return DPT_OK;
}

void dpt_backend_destroy(dpt_backend *be) {
  if (!be) return;
  if (be->vt->synchronize && !be->lost) (void)be->vt->synchronize(be);
  while (be->buffers)
    dpt_buffer_free(be->buffers);
  be->vt->destroy(be);
  pthread_mutex_destroy(&be->lock);
  free(be);
}

dpt_status dpt_backend_get_info(const dpt_backend *be, dpt_device_info *out) {
  if (!be) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_backend_get_info: backend is NULL");
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_backend_get_info: out is NULL");
  *out = be->info;
  return DPT_OK;
}

dpt_backend_kind dpt_backend_get_kind(const dpt_backend *be) {
  return be ? be->vt->kind : DPT_BACKEND_KIND_COUNT;
}

static dpt_status check_backend(const char *fn, const dpt_backend *be) {
  if (!be) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: backend is NULL", fn);
  if (be->lost)
    return dpt_set_error(DPT_ERR_DEVICE,
                         "%s: device '%s' was lost after an earlier error; destroy the backend", fn,
                         be->info.name);
  return DPT_OK;
}

dpt_status dpt_backend_synchronize(dpt_backend *be) {
  dpt_status st = check_backend("dpt_backend_synchronize", be);
  if (st != DPT_OK) return st;
  return be->vt->synchronize ? DPT_BE_CALL(be, be->vt->synchronize(be)) : DPT_OK;
}

dpt_status dpt_backend_set_deterministic(dpt_backend *be) {
  dpt_status st = check_backend("dpt_backend_set_deterministic", be);
  if (st != DPT_OK || !be->vt->set_deterministic) return st;
  pthread_mutex_lock(&enumerate_lock); /* no other backend is being created meanwhile */
  st = DPT_BE_CALL(be, be->vt->set_deterministic(be));
  pthread_mutex_unlock(&enumerate_lock);
  return st;
}

/* ---- memory ------------------------------------------------------------------------------ */

dpt_status dpt_buffer_alloc(dpt_backend *be, size_t bytes, dpt_buffer **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_buffer_alloc: out is NULL");
  *out = NULL;
  dpt_status st = check_backend("dpt_buffer_alloc", be);
  if (st != DPT_OK) return st;
  if (bytes == 0) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_buffer_alloc: bytes is 0");
  dpt_buffer *buf = calloc(1, sizeof *buf);
  if (!buf) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_buffer_alloc: out of host memory");
  buf->backend = be;
  buf->size = bytes;
  pthread_mutex_lock(&be->lock);
  st = be->vt->buffer_alloc(be, buf);
  if (st == DPT_OK) {
    buf->next = be->buffers;
    if (be->buffers) be->buffers->prev = buf;
    be->buffers = buf;
  }
  pthread_mutex_unlock(&be->lock);
  if (st != DPT_OK) {
    free(buf);
    return st;
  }
  *out = buf;
  return DPT_OK;
}

void dpt_buffer_free(dpt_buffer *buf) {
  if (!buf) return;
  dpt_backend *be = buf->backend;
  pthread_mutex_lock(&be->lock);
  if (buf->handle) be->vt->buffer_free(be, buf);
  if (buf->prev)
    buf->prev->next = buf->next;
  else
    be->buffers = buf->next;
  if (buf->next) buf->next->prev = buf->prev;
  pthread_mutex_unlock(&be->lock);
  free(buf);
}

size_t dpt_buffer_size(const dpt_buffer *buf) {
  return buf ? buf->size : 0;
}

dpt_backend *dpt_buffer_backend(const dpt_buffer *buf) {
  return buf ? buf->backend : NULL;
}

/* The byte range [offset, offset + bytes) must lie inside the buffer. */
static dpt_status check_bytes(const char *fn, const char *name, const dpt_buffer *buf,
                              size_t offset, size_t bytes) {
  if (!buf) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %s is NULL", fn, name);
  if (offset > buf->size || bytes > buf->size - offset)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: %s range [%zu, +%zu bytes) is past the end of the buffer (%zu bytes)",
                         fn, name, offset, bytes, buf->size);
  return DPT_OK;
}

dpt_status dpt_buffer_upload(dpt_buffer *dst, size_t offset, const void *src, size_t bytes) {
  const char *fn = "dpt_buffer_upload";
  dpt_status st = check_bytes(fn, "dst", dst, offset, bytes);
  if (st == DPT_OK) st = check_backend(fn, dst->backend);
  if (st != DPT_OK) return st;
  if (bytes == 0) return DPT_OK;
  if (!src) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: src is NULL", fn);
  dpt_backend *be = dst->backend;
  return DPT_BE_CALL(be, be->vt->upload(be, dst, offset, src, bytes));
}

dpt_status dpt_buffer_download(const dpt_buffer *src, size_t offset, void *dst, size_t bytes) {
  const char *fn = "dpt_buffer_download";
  dpt_status st = check_bytes(fn, "src", src, offset, bytes);
  if (st == DPT_OK) st = check_backend(fn, src->backend);
  if (st != DPT_OK) return st;
  if (bytes == 0) return DPT_OK;
  if (!dst) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: dst is NULL", fn);
  dpt_backend *be = src->backend;
  return DPT_BE_CALL(be, be->vt->download(be, src, offset, dst, bytes));
}

dpt_status dpt_buffer_map_host(dpt_buffer *buf, size_t offset, size_t bytes, void **ptr) {
  const char *fn = "dpt_buffer_map_host";
  if (!ptr) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: ptr is NULL", fn);
  *ptr = NULL;
  dpt_status st = check_bytes(fn, "buf", buf, offset, bytes);
  if (st == DPT_OK) st = check_backend(fn, buf->backend);
  if (st != DPT_OK || !buf->backend->vt->map) return st;
  dpt_backend *be = buf->backend;
  return DPT_BE_CALL(be, be->vt->map(be, buf, offset, bytes, ptr));
}

dpt_status dpt_buffer_unmap_host(dpt_buffer *buf, void *ptr) {
  if (!buf || !ptr || !buf->backend->vt->unmap) return DPT_OK;
  dpt_backend *be = buf->backend;
  return DPT_BE_CALL(be, be->vt->unmap(be, buf, ptr));
}

static dpt_fence *make_fence(dpt_backend *be, const dpt_buffer *buf, size_t offset, size_t bytes) {
  if (!be || be->lost || !be->vt->fence) return NULL;
  dpt_fence *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  f->backend = be;
  f->buf = buf;
  f->offset = offset;
  f->bytes = bytes;
  pthread_mutex_lock(&be->lock);
  const int made = be->vt->fence(be, f);
  pthread_mutex_unlock(&be->lock);
  if (made) return f;
  free(f);
  return NULL;
}

dpt_fence *dpt_buffer_fence(dpt_buffer *buf, size_t offset, size_t bytes) {
  if (!buf || bytes == 0 || offset > buf->size || bytes > buf->size - offset) return NULL;
  return make_fence(buf->backend, buf, offset, bytes);
}

dpt_fence *dpt_backend_fence(dpt_backend *be) {
  return make_fence(be, NULL, 0, 0);
}

void dpt_fence_free(dpt_fence *f) {
  if (!f) return;
  f->backend->vt->fence_free(f->backend, f);
  free(f);
}

dpt_status dpt_fence_wait(const dpt_fence *f) {
  if (!f) return DPT_OK;
  dpt_status st = check_backend("dpt_fence_wait", f->backend);
  return st == DPT_OK ? f->backend->vt->fence_wait(f->backend, f) : st;
}

/* The checks of the fenced transfers; 1 when the transfer goes beside the stream. */
static int check_fenced(const char *fn, const dpt_buffer *buf, size_t offset, size_t bytes,
                        const void *host, const dpt_fence *f, dpt_status *st) {
  *st = check_bytes(fn, "buffer", buf, offset, bytes);
  if (*st == DPT_OK) *st = check_backend(fn, buf->backend);
  if (*st == DPT_OK && bytes > 0 && !host)
    *st = dpt_set_error(DPT_ERR_INVALID_ARG, "%s: host pointer is NULL", fn);
  if (*st == DPT_OK && f && f->buf != buf)
    *st = dpt_set_error(DPT_ERR_INVALID_ARG, "%s: the fence is of another buffer", fn);
  if (*st == DPT_OK && f && (offset < f->offset || offset + bytes > f->offset + f->bytes))
    *st = dpt_set_error(DPT_ERR_INVALID_ARG,
                        "%s: range [%zu, +%zu bytes) is outside the fence's [%zu, +%zu bytes)", fn,
                        offset, bytes, f->offset, f->bytes);
  return *st == DPT_OK && bytes > 0 && f;
}

dpt_status dpt_buffer_download_fenced(const dpt_buffer *src, size_t offset, void *dst, size_t bytes,
                                      const dpt_fence *f) {
  dpt_status st;
  if (!check_fenced("dpt_buffer_download_fenced", src, offset, bytes, dst, f, &st))
    return st == DPT_OK ? dpt_buffer_download(src, offset, dst, bytes) : st;
  return src->backend->vt->download_after(src->backend, f, offset, dst, bytes);
}

dpt_status dpt_buffer_upload_fenced(dpt_buffer *dst, size_t offset, const void *src, size_t bytes,
                                    const dpt_fence *f) {
  dpt_status st;
  if (!check_fenced("dpt_buffer_upload_fenced", dst, offset, bytes, src, f, &st))
    return st == DPT_OK ? dpt_buffer_upload(dst, offset, src, bytes) : st;
  return dst->backend->vt->upload_after(dst->backend, f, offset, src, bytes);
}

/* Copies through a bounded host bounce buffer for backends without a device copy. */
static dpt_status copy_via_host(dpt_backend *be, dpt_buffer *dst, size_t dst_off,
                                const dpt_buffer *src, size_t src_off, size_t bytes) {
  size_t chunk = bytes < ((size_t)4 << 20) ? bytes : ((size_t)4 << 20);
  unsigned char *tmp = malloc(chunk);
  if (!tmp)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_buffer_copy: cannot allocate %zu bytes",
                         chunk);
  dpt_status st = DPT_OK;
  for (size_t done = 0; done < bytes && st == DPT_OK; done += chunk) {
    size_t n = bytes - done < chunk ? bytes - done : chunk;
    st = be->vt->download(be, src, src_off + done, tmp, n);
    if (st == DPT_OK) st = be->vt->upload(be, dst, dst_off + done, tmp, n);
  }
  free(tmp);
  return st;
}

dpt_status dpt_buffer_copy(dpt_buffer *dst, size_t dst_offset, const dpt_buffer *src,
                           size_t src_offset, size_t bytes) {
  const char *fn = "dpt_buffer_copy";
  dpt_status st = check_bytes(fn, "dst", dst, dst_offset, bytes);
  if (st == DPT_OK) st = check_bytes(fn, "src", src, src_offset, bytes);
  if (st == DPT_OK) st = check_backend(fn, dst->backend);
  if (st != DPT_OK) return st;
  if (src->backend != dst->backend)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: src and dst belong to different backends", fn);
  if (src == dst && src_offset < dst_offset + bytes && dst_offset < src_offset + bytes && bytes > 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: src and dst ranges overlap", fn);
  if (bytes == 0) return DPT_OK;
  dpt_backend *be = dst->backend;
  if (be->vt->copy)
    return DPT_BE_CALL(be, be->vt->copy(be, dst, dst_offset, src, src_offset, bytes));
  return DPT_BE_CALL(be, copy_via_host(be, dst, dst_offset, src, src_offset, bytes));
}

dpt_status dpt_buffer_fill_f32(dpt_buffer *dst, size_t offset, size_t count, float value) {
  const char *fn = "dpt_buffer_fill_f32";
  size_t off_bytes, bytes;
  if (!dpt_mul_ok(offset, sizeof(float), &off_bytes) || !dpt_mul_ok(count, sizeof(float), &bytes))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: offset or count overflows", fn);
  dpt_status st = check_bytes(fn, "dst", dst, off_bytes, bytes);
  if (st == DPT_OK) st = check_backend(fn, dst->backend);
  if (st != DPT_OK || count == 0) return st;
  dpt_backend *be = dst->backend;
  if (be->vt->fill_f32) return DPT_BE_CALL(be, be->vt->fill_f32(be, dst, offset, count, value));
  size_t chunk = count < 65536 ? count : 65536;
  float *tmp = malloc(chunk * sizeof(float));
  if (!tmp) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  for (size_t i = 0; i < chunk; ++i)
    tmp[i] = value;
  for (size_t done = 0; done < count && st == DPT_OK; done += chunk) {
    size_t n = count - done < chunk ? count - done : chunk;
    st = DPT_BE_CALL(
        be, be->vt->upload(be, dst, (offset + done) * sizeof(float), tmp, n * sizeof(float)));
  }
  free(tmp);
  return st;
}

/* ---- op argument checks ------------------------------------------------------------------ */

const char *dpt_op_name(dpt_op op) {
  switch (op) {
#define DPT_OP_NAME_(NAME, name)                                                                   \
  case DPT_OP_##NAME:                                                                              \
    return #name;
    DPT_OP_MAP(DPT_OP_NAME_)
#undef DPT_OP_NAME_
  default:
    return NULL;
  }
}

int dpt_backend_supports(const dpt_backend *be, dpt_op op) {
  if (!be) return 0;
  switch (op) {
#define DPT_OP_SUPPORTS_(NAME, name)                                                               \
  case DPT_OP_##NAME:                                                                              \
    return be->vt->name != NULL && (!be->vt->op_enabled || be->vt->op_enabled(be, op));
    DPT_OP_MAP(DPT_OP_SUPPORTS_)
#undef DPT_OP_SUPPORTS_
  default:
    return 0;
  }
}

dpt_status dpt_op_begin(dpt_op_check *c, const char *fn, dpt_backend *be, int supported) {
  c->fn = fn;
  c->be = be;
  dpt_status st = check_backend(fn, be);
  if (st != DPT_OK) return st;
  if (!supported)
    return dpt_set_error(DPT_ERR_UNSUPPORTED, "%s: not implemented by the %s backend (%s)", fn,
                         dpt_backend_kind_name(be->vt->kind), be->info.name);
  return DPT_OK;
}

/* rows * cols elements, overflow-checked. */
dpt_status dpt_op_elems2(dpt_op_check *c, const char *what, size_t a, size_t b, size_t *out) {
  if (!dpt_mul_ok(a, b, out))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %s size %zu x %zu overflows", c->fn, what, a, b);
  return DPT_OK;
}

/* A tensor of `count` elements of `elem` bytes at element offset `off` must fit its buffer,
 * which must belong to the call's backend. An empty tensor still needs a valid buffer. */
dpt_status dpt_op_tensor(dpt_op_check *c, const char *name, const dpt_buffer *buf, size_t off,
                         size_t count, size_t elem) {
  size_t off_bytes, bytes;
  if (!buf) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %s is NULL", c->fn, name);
  if (buf->backend != c->be)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %s belongs to another backend", c->fn, name);
  if (!dpt_mul_ok(off, elem, &off_bytes) || !dpt_mul_ok(count, elem, &bytes) ||
      off_bytes > buf->size || bytes > buf->size - off_bytes)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: %s (offset %zu, %zu elements of %zu bytes) is past the end of its "
                         "buffer (%zu bytes)",
                         c->fn, name, off, count, elem, buf->size);
  return DPT_OK;
}

/* Output `o` must not overlap input `i` unless `allow_same` and they are exactly the same
 * range (documented in-place use). */
dpt_status dpt_op_alias(dpt_op_check *c, const char *oname, const dpt_buffer *ob, size_t ooff,
                        size_t ocount, size_t oelem, const char *iname, const dpt_buffer *ib,
                        size_t ioff, size_t icount, size_t ielem, int allow_same) {
  if (ob != ib || ocount == 0 || icount == 0) return DPT_OK;
  size_t o0 = ooff * oelem, o1 = o0 + ocount * oelem; /* no overflow: ranges already checked */
  size_t i0 = ioff * ielem, i1 = i0 + icount * ielem;
  if (o0 >= i1 || i0 >= o1) return DPT_OK;
  if (allow_same && o0 == i0 && o1 == i1) return DPT_OK;
  return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %s overlaps %s%s", c->fn, oname, iname,
                       allow_same ? " (only exact in-place use is allowed)" : "");
}

/* ---- ops --------------------------------------------------------------------------------- */

/* Matrix operand with `rows` x `cols` logical storage and leading dimension ld: the last row
 * ends at (rows-1)*ld + cols. */
dpt_status dpt_op_matrix(dpt_op_check *c, const char *name, const char *ldname,
                         const dpt_buffer *buf, size_t off, size_t rows, size_t cols, size_t ld,
                         size_t *extent) {
  if (ld < cols || ld == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %s %zu is smaller than the row length %zu",
                         c->fn, ldname, ld, cols ? cols : 1);
  size_t count = 0;
  if (rows > 0 && cols > 0) {
    if (!dpt_mul_ok(rows - 1, ld, &count) || !dpt_add_ok(count, cols, &count))
      return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %s extent overflows", c->fn, name);
  }
  *extent = count;
  return dpt_op_tensor(c, name, buf, off, count, F32);
}

dpt_status dpt_gemm(dpt_backend *be, int trans_a, int trans_b, size_t m, size_t n, size_t k,
                    float alpha, const dpt_buffer *a, size_t a_off, size_t lda, const dpt_buffer *b,
                    size_t b_off, size_t ldb, float beta, dpt_buffer *c, size_t c_off, size_t ldc) {
  dpt_op_check ck;
  DPT_TRY(dpt_op_begin(&ck, "dpt_gemm", be, be && be->vt->gemm));
  size_t ea = 0, eb = 0, ec = 0;
  DPT_TRY(dpt_op_matrix(&ck, "a", "lda", a, a_off, trans_a ? k : m, trans_a ? m : k, lda, &ea));
  DPT_TRY(dpt_op_matrix(&ck, "b", "ldb", b, b_off, trans_b ? n : k, trans_b ? k : n, ldb, &eb));
  DPT_TRY(dpt_op_matrix(&ck, "c", "ldc", c, c_off, m, n, ldc, &ec));
  DPT_TRY(dpt_op_alias(&ck, "c", c, c_off, ec, F32, "a", a, a_off, ea, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "c", c, c_off, ec, F32, "b", b, b_off, eb, F32, 0));
  if (m == 0 || n == 0) return DPT_OK;
  if (k == 0 || alpha == 0.0f) {
    /* C = beta * C row by row (C is not read when beta == 0; A and B are never read). */
    for (size_t r = 0; r < m; ++r) {
      if (beta == 0.0f) {
        DPT_TRY(dpt_buffer_fill_f32(c, c_off + r * ldc, n, 0.0f));
      } else if (be->vt->scale) {
        dpt_scale_args sa = {n, beta, dpt_op_ref(c, c_off + r * ldc)};
        DPT_TRY(DPT_BE_CALL(be, be->vt->scale(be, &sa)));
      } else {
        return dpt_set_error(DPT_ERR_UNSUPPORTED, "dpt_gemm: k == 0 or alpha == 0 needs the "
                                                  "scale op");
      }
    }
    return DPT_OK;
  }
  dpt_gemm_args args = {
      trans_a != 0,         trans_b != 0,         m,   n,   k,  alpha, beta, dpt_op_ref(a, a_off),
      dpt_op_ref(b, b_off), dpt_op_ref(c, c_off), lda, ldb, ldc};
  return DPT_BE_CALL(be, be->vt->gemm(be, &args));
}

dpt_status dpt_bias_add(dpt_backend *be, size_t rows, size_t cols, dpt_buffer *y, size_t y_off,
                        const dpt_buffer *bias, size_t bias_off) {
  dpt_op_check ck;
  size_t ny = 0;
  DPT_TRY(dpt_op_begin(&ck, "dpt_bias_add", be, be && be->vt->bias_add));
  DPT_TRY(dpt_op_elems2(&ck, "y", rows, cols, &ny));
  DPT_TRY(dpt_op_tensor(&ck, "y", y, y_off, ny, F32));
  DPT_TRY(dpt_op_tensor(&ck, "bias", bias, bias_off, cols, F32));
  DPT_TRY(dpt_op_alias(&ck, "y", y, y_off, ny, F32, "bias", bias, bias_off, cols, F32, 0));
  if (ny == 0) return DPT_OK;
  dpt_bias_add_args args = {rows, cols, dpt_op_ref(y, y_off), dpt_op_ref(bias, bias_off)};
  return DPT_BE_CALL(be, be->vt->bias_add(be, &args));
}

dpt_status dpt_bias_grad(dpt_backend *be, size_t rows, size_t cols, const dpt_buffer *dy,
                         size_t dy_off, float beta, dpt_buffer *db, size_t db_off) {
  dpt_op_check ck;
  size_t ny = 0;
  DPT_TRY(dpt_op_begin(&ck, "dpt_bias_grad", be, be && be->vt->bias_grad));
  DPT_TRY(dpt_op_elems2(&ck, "dy", rows, cols, &ny));
  DPT_TRY(dpt_op_tensor(&ck, "dy", dy, dy_off, ny, F32));
  DPT_TRY(dpt_op_tensor(&ck, "db", db, db_off, cols, F32));
  DPT_TRY(dpt_op_alias(&ck, "db", db, db_off, cols, F32, "dy", dy, dy_off, ny, F32, 0));
  if (cols == 0) return DPT_OK;
  dpt_bias_grad_args args = {rows, cols, beta, dpt_op_ref(dy, dy_off), dpt_op_ref(db, db_off)};
  return DPT_BE_CALL(be, be->vt->bias_grad(be, &args));
}

dpt_status dpt_relu_fwd(dpt_backend *be, size_t n, const dpt_buffer *x, size_t x_off, dpt_buffer *y,
                        size_t y_off) {
  dpt_op_check ck;
  DPT_TRY(dpt_op_begin(&ck, "dpt_relu_fwd", be, be && be->vt->relu_fwd));
  DPT_TRY(dpt_op_tensor(&ck, "x", x, x_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "y", y, y_off, n, F32));
  DPT_TRY(dpt_op_alias(&ck, "y", y, y_off, n, F32, "x", x, x_off, n, F32, 1));
  if (n == 0) return DPT_OK;
  dpt_relu_fwd_args args = {n, dpt_op_ref(x, x_off), dpt_op_ref(y, y_off)};
  return DPT_BE_CALL(be, be->vt->relu_fwd(be, &args));
}

dpt_status dpt_relu_bwd(dpt_backend *be, size_t n, const dpt_buffer *x, size_t x_off,
                        const dpt_buffer *dy, size_t dy_off, dpt_buffer *dx, size_t dx_off) {
  dpt_op_check ck;
  DPT_TRY(dpt_op_begin(&ck, "dpt_relu_bwd", be, be && be->vt->relu_bwd));
  DPT_TRY(dpt_op_tensor(&ck, "x", x, x_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "dy", dy, dy_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "dx", dx, dx_off, n, F32));
  DPT_TRY(dpt_op_alias(&ck, "dx", dx, dx_off, n, F32, "x", x, x_off, n, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "dx", dx, dx_off, n, F32, "dy", dy, dy_off, n, F32, 1));
  if (n == 0) return DPT_OK;
  dpt_relu_bwd_args args = {n, dpt_op_ref(x, x_off), dpt_op_ref(dy, dy_off),
                            dpt_op_ref(dx, dx_off)};
  return DPT_BE_CALL(be, be->vt->relu_bwd(be, &args));
}

dpt_status dpt_add_relu(dpt_backend *be, size_t n, const dpt_buffer *a, size_t a_off,
                        const dpt_buffer *b, size_t b_off, dpt_buffer *y, size_t y_off) {
  dpt_op_check ck;
  DPT_TRY(dpt_op_begin(&ck, "dpt_add_relu", be, be && be->vt->add_relu));
  DPT_TRY(dpt_op_tensor(&ck, "a", a, a_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "b", b, b_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "y", y, y_off, n, F32));
  DPT_TRY(dpt_op_alias(&ck, "y", y, y_off, n, F32, "a", a, a_off, n, F32, 1));
  DPT_TRY(dpt_op_alias(&ck, "y", y, y_off, n, F32, "b", b, b_off, n, F32, 1));
  if (n == 0) return DPT_OK;
  dpt_add_relu_args args = {n, dpt_op_ref(a, a_off), dpt_op_ref(b, b_off), dpt_op_ref(y, y_off)};
  return DPT_BE_CALL(be, be->vt->add_relu(be, &args));
}

dpt_status dpt_softmax_xent(dpt_backend *be, size_t rows, size_t cols, const dpt_buffer *logits,
                            size_t logits_off, const dpt_buffer *labels, size_t labels_off,
                            float scale, dpt_buffer *dlogits, size_t dlogits_off, double *loss_sum,
                            int64_t *correct) {
  dpt_op_check ck;
  size_t nl = 0;
  DPT_TRY(dpt_op_begin(&ck, "dpt_softmax_xent", be, be && be->vt->softmax_xent));
  if (cols == 0) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_softmax_xent: cols is 0");
  DPT_TRY(dpt_op_elems2(&ck, "logits", rows, cols, &nl));
  DPT_TRY(dpt_op_tensor(&ck, "logits", logits, logits_off, nl, F32));
  DPT_TRY(dpt_op_tensor(&ck, "labels", labels, labels_off, rows, I32));
  if (dlogits) {
    DPT_TRY(dpt_op_tensor(&ck, "dlogits", dlogits, dlogits_off, nl, F32));
    DPT_TRY(dpt_op_alias(&ck, "dlogits", dlogits, dlogits_off, nl, F32, "logits", logits,
                         logits_off, nl, F32, 0));
    DPT_TRY(dpt_op_alias(&ck, "dlogits", dlogits, dlogits_off, nl, F32, "labels", labels,
                         labels_off, rows, I32, 0));
  }
  if (loss_sum) *loss_sum = 0.0;
  if (correct) *correct = 0;
  if (rows == 0 || (!dlogits && !loss_sum && !correct)) return DPT_OK;
  dpt_softmax_xent_args args = {rows,
                                cols,
                                dpt_op_ref(logits, logits_off),
                                dpt_op_ref(labels, labels_off),
                                scale,
                                dpt_op_ref(dlogits, dlogits_off),
                                loss_sum,
                                correct};
  return DPT_BE_CALL(be, be->vt->softmax_xent(be, &args));
}

dpt_status dpt_conv_out_size(const dpt_conv_geom *g, size_t *out_h, size_t *out_w) {
  const char *fn = "dpt_conv_out_size";
  if (!g) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: geometry is NULL", fn);
  if (!out_h || !out_w) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: out_h/out_w is NULL", fn);
  if (g->kh == 0 || g->kw == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: kernel size kh x kw = %zu x %zu must be >= 1",
                         fn, g->kh, g->kw);
  if (g->stride_h == 0 || g->stride_w == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: stride %zu x %zu must be >= 1", fn, g->stride_h,
                         g->stride_w);
  /* An empty image with enough padding would still give outputs (all padding): refused, the
   * ops never see an empty input beside a non-empty output. */
  if (g->h == 0 || g->w == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: input h x w = %zu x %zu must be >= 1", fn, g->h,
                         g->w);
  size_t ph, pw;
  if (!dpt_mul_ok(g->pad_h, 2, &ph) || !dpt_add_ok(ph, g->h, &ph) ||
      !dpt_mul_ok(g->pad_w, 2, &pw) || !dpt_add_ok(pw, g->w, &pw))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: padded size overflows", fn);
  if (ph < g->kh || pw < g->kw)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: kernel %zu x %zu is larger than the padded input %zu x %zu", fn,
                         g->kh, g->kw, ph, pw);
  *out_h = (ph - g->kh) / g->stride_h + 1;
  *out_w = (pw - g->kw) / g->stride_w + 1;
  return DPT_OK;
}

/* Element counts of x [n,c,h,w] and col [n, c*kh*kw, oh*ow]. */
static dpt_status conv_sizes(dpt_op_check *c, const dpt_conv_geom *g, size_t *oh, size_t *ow,
                             size_t *nx, size_t *ncol) {
  if (!g) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: geometry is NULL", c->fn);
  dpt_status st = dpt_conv_out_size(g, oh, ow);
  if (st != DPT_OK) return dpt_error_context(st, "%s", c->fn);
  size_t t;
  if (!dpt_mul_ok(g->n, g->c, nx) || !dpt_mul_ok(*nx, g->h, nx) || !dpt_mul_ok(*nx, g->w, nx) ||
      !dpt_mul_ok(g->n, g->c, &t) || !dpt_mul_ok(t, g->kh, &t) || !dpt_mul_ok(t, g->kw, &t) ||
      !dpt_mul_ok(t, *oh, &t) || !dpt_mul_ok(t, *ow, ncol))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: tensor sizes overflow", c->fn);
  return DPT_OK;
}

dpt_status dpt_im2col(dpt_backend *be, const dpt_conv_geom *g, const dpt_buffer *x, size_t x_off,
                      dpt_buffer *col, size_t col_off) {
  dpt_op_check ck;
  size_t oh = 0, ow = 0, nx = 0, ncol = 0;
  DPT_TRY(dpt_op_begin(&ck, "dpt_im2col", be, be && be->vt->im2col));
  DPT_TRY(conv_sizes(&ck, g, &oh, &ow, &nx, &ncol));
  DPT_TRY(dpt_op_tensor(&ck, "x", x, x_off, nx, F32));
  DPT_TRY(dpt_op_tensor(&ck, "col", col, col_off, ncol, F32));
  DPT_TRY(dpt_op_alias(&ck, "col", col, col_off, ncol, F32, "x", x, x_off, nx, F32, 0));
  if (ncol == 0) return DPT_OK;
  dpt_im2col_args args = {*g, oh, ow, dpt_op_ref(x, x_off), dpt_op_ref(col, col_off)};
  return DPT_BE_CALL(be, be->vt->im2col(be, &args));
}

dpt_status dpt_col2im(dpt_backend *be, const dpt_conv_geom *g, const dpt_buffer *col,
                      size_t col_off, dpt_buffer *dx, size_t dx_off) {
  dpt_op_check ck;
  size_t oh = 0, ow = 0, nx = 0, ncol = 0;
  DPT_TRY(dpt_op_begin(&ck, "dpt_col2im", be, be && be->vt->col2im));
  DPT_TRY(conv_sizes(&ck, g, &oh, &ow, &nx, &ncol));
  DPT_TRY(dpt_op_tensor(&ck, "col", col, col_off, ncol, F32));
  DPT_TRY(dpt_op_tensor(&ck, "dx", dx, dx_off, nx, F32));
  DPT_TRY(dpt_op_alias(&ck, "dx", dx, dx_off, nx, F32, "col", col, col_off, ncol, F32, 0));
  if (nx == 0) return DPT_OK;
  dpt_col2im_args args = {*g, oh, ow, dpt_op_ref(col, col_off), dpt_op_ref(dx, dx_off)};
  return DPT_BE_CALL(be, be->vt->col2im(be, &args));
}

dpt_status dpt_pool_out_size(const dpt_pool_geom *g, size_t *out_h, size_t *out_w) {
  const char *fn = "dpt_pool_out_size";
  if (!g) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: geometry is NULL", fn);
  if (!out_h || !out_w) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: out_h/out_w is NULL", fn);
  if (g->kh == 0 || g->kw == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: kernel size kh x kw = %zu x %zu must be >= 1",
                         fn, g->kh, g->kw);
  if (g->stride_h == 0 || g->stride_w == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: stride %zu x %zu must be >= 1", fn, g->stride_h,
                         g->stride_w);
  if (g->h < g->kh || g->w < g->kw)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: kernel %zu x %zu is larger than the input %zu x %zu", fn, g->kh,
                         g->kw, g->h, g->w);
  size_t plane;
  if (!dpt_mul_ok(g->h, g->w, &plane) || plane > (size_t)INT32_MAX)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: plane %zu x %zu too large for int32 argmax", fn,
                         g->h, g->w);
  *out_h = (g->h - g->kh) / g->stride_h + 1;
  *out_w = (g->w - g->kw) / g->stride_w + 1;
  return DPT_OK;
}

/* Element counts of x [planes, h, w] and y [planes, oh, ow]. */
dpt_status dpt_op_pool_sizes(dpt_op_check *c, const dpt_pool_geom *g, size_t *oh, size_t *ow,
                             size_t *nx, size_t *ny) {
  if (!g) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: geometry is NULL", c->fn);
  dpt_status st = dpt_pool_out_size(g, oh, ow);
  if (st != DPT_OK) return dpt_error_context(st, "%s", c->fn);
  /* h*w <= INT32_MAX was checked, and oh*ow <= h*w. */
  if (!dpt_mul_ok(g->planes, g->h * g->w, nx) || !dpt_mul_ok(g->planes, *oh * *ow, ny))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: tensor sizes overflow", c->fn);
  return DPT_OK;
}

dpt_status dpt_maxpool_fwd(dpt_backend *be, const dpt_pool_geom *g, const dpt_buffer *x,
                           size_t x_off, dpt_buffer *y, size_t y_off, dpt_buffer *argmax,
                           size_t argmax_off) {
  dpt_op_check ck;
  size_t oh = 0, ow = 0, nx = 0, ny = 0;
  DPT_TRY(dpt_op_begin(&ck, "dpt_maxpool_fwd", be, be && be->vt->maxpool_fwd));
  DPT_TRY(dpt_op_pool_sizes(&ck, g, &oh, &ow, &nx, &ny));
  DPT_TRY(dpt_op_tensor(&ck, "x", x, x_off, nx, F32));
  DPT_TRY(dpt_op_tensor(&ck, "y", y, y_off, ny, F32));
  DPT_TRY(dpt_op_tensor(&ck, "argmax", argmax, argmax_off, ny, I32));
  DPT_TRY(dpt_op_alias(&ck, "y", y, y_off, ny, F32, "x", x, x_off, nx, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "argmax", argmax, argmax_off, ny, I32, "x", x, x_off, nx, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "argmax", argmax, argmax_off, ny, I32, "y", y, y_off, ny, F32, 0));
  if (ny == 0) return DPT_OK;
  dpt_maxpool_fwd_args args = {
      *g, oh, ow, dpt_op_ref(x, x_off), dpt_op_ref(y, y_off), dpt_op_ref(argmax, argmax_off)};
  return DPT_BE_CALL(be, be->vt->maxpool_fwd(be, &args));
}

dpt_status dpt_maxpool_bwd(dpt_backend *be, const dpt_pool_geom *g, const dpt_buffer *dy,
                           size_t dy_off, const dpt_buffer *argmax, size_t argmax_off,
                           dpt_buffer *dx, size_t dx_off) {
  dpt_op_check ck;
  size_t oh = 0, ow = 0, nx = 0, ny = 0;
  DPT_TRY(dpt_op_begin(&ck, "dpt_maxpool_bwd", be, be && be->vt->maxpool_bwd));
  DPT_TRY(dpt_op_pool_sizes(&ck, g, &oh, &ow, &nx, &ny));
  DPT_TRY(dpt_op_tensor(&ck, "dy", dy, dy_off, ny, F32));
  DPT_TRY(dpt_op_tensor(&ck, "argmax", argmax, argmax_off, ny, I32));
  DPT_TRY(dpt_op_tensor(&ck, "dx", dx, dx_off, nx, F32));
  DPT_TRY(dpt_op_alias(&ck, "dx", dx, dx_off, nx, F32, "dy", dy, dy_off, ny, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "dx", dx, dx_off, nx, F32, "argmax", argmax, argmax_off, ny, I32, 0));
  if (nx == 0) return DPT_OK;
  dpt_maxpool_bwd_args args = {
      *g, oh, ow, dpt_op_ref(dy, dy_off), dpt_op_ref(argmax, argmax_off), dpt_op_ref(dx, dx_off)};
  return DPT_BE_CALL(be, be->vt->maxpool_bwd(be, &args));
}

static dpt_status check_vocab(dpt_op_check *c, size_t vocab) {
  if (vocab == 0) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: vocab is 0", c->fn);
  if (vocab > (size_t)INT32_MAX)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: vocab %zu exceeds int32 indices", c->fn, vocab);
  return DPT_OK;
}

dpt_status dpt_embed_gather(dpt_backend *be, size_t n, size_t vocab, size_t dim,
                            const dpt_buffer *table, size_t table_off, const dpt_buffer *idx,
                            size_t idx_off, dpt_buffer *out, size_t out_off) {
  dpt_op_check ck;
  size_t nt = 0, no = 0;
  DPT_TRY(dpt_op_begin(&ck, "dpt_embed_gather", be, be && be->vt->embed_gather));
  DPT_TRY(check_vocab(&ck, vocab));
  DPT_TRY(dpt_op_elems2(&ck, "table", vocab, dim, &nt));
  DPT_TRY(dpt_op_elems2(&ck, "out", n, dim, &no));
  DPT_TRY(dpt_op_tensor(&ck, "table", table, table_off, nt, F32));
  DPT_TRY(dpt_op_tensor(&ck, "idx", idx, idx_off, n, I32));
  DPT_TRY(dpt_op_tensor(&ck, "out", out, out_off, no, F32));
  DPT_TRY(dpt_op_alias(&ck, "out", out, out_off, no, F32, "table", table, table_off, nt, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "out", out, out_off, no, F32, "idx", idx, idx_off, n, I32, 0));
  if (no == 0) return DPT_OK;
  dpt_embed_gather_args args = {n,
                                vocab,
                                dim,
                                dpt_op_ref(table, table_off),
                                dpt_op_ref(idx, idx_off),
                                dpt_op_ref(out, out_off)};
  return DPT_BE_CALL(be, be->vt->embed_gather(be, &args));
}

dpt_status dpt_embed_scatter_add(dpt_backend *be, size_t n, size_t vocab, size_t dim,
                                 const dpt_buffer *dout, size_t dout_off, const dpt_buffer *idx,
                                 size_t idx_off, dpt_buffer *dtable, size_t dtable_off) {
  dpt_op_check ck;
  size_t nt = 0, no = 0;
  DPT_TRY(dpt_op_begin(&ck, "dpt_embed_scatter_add", be, be && be->vt->embed_scatter_add));
  DPT_TRY(check_vocab(&ck, vocab));
  DPT_TRY(dpt_op_elems2(&ck, "dtable", vocab, dim, &nt));
  DPT_TRY(dpt_op_elems2(&ck, "dout", n, dim, &no));
  DPT_TRY(dpt_op_tensor(&ck, "dout", dout, dout_off, no, F32));
  DPT_TRY(dpt_op_tensor(&ck, "idx", idx, idx_off, n, I32));
  DPT_TRY(dpt_op_tensor(&ck, "dtable", dtable, dtable_off, nt, F32));
  DPT_TRY(
      dpt_op_alias(&ck, "dtable", dtable, dtable_off, nt, F32, "dout", dout, dout_off, no, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "dtable", dtable, dtable_off, nt, F32, "idx", idx, idx_off, n, I32, 0));
  if (no == 0) return DPT_OK;
  dpt_embed_scatter_add_args args = {n,
                                     vocab,
                                     dim,
                                     dpt_op_ref(dout, dout_off),
                                     dpt_op_ref(idx, idx_off),
                                     dpt_op_ref(dtable, dtable_off)};
  return DPT_BE_CALL(be, be->vt->embed_scatter_add(be, &args));
}

dpt_status dpt_axpy(dpt_backend *be, size_t n, float alpha, const dpt_buffer *x, size_t x_off,
                    dpt_buffer *y, size_t y_off) {
  dpt_op_check ck;
  DPT_TRY(dpt_op_begin(&ck, "dpt_axpy", be, be && be->vt->axpy));
  DPT_TRY(dpt_op_tensor(&ck, "x", x, x_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "y", y, y_off, n, F32));
  DPT_TRY(dpt_op_alias(&ck, "y", y, y_off, n, F32, "x", x, x_off, n, F32, 0));
  if (n == 0) return DPT_OK;
  dpt_axpy_args args = {n, alpha, dpt_op_ref(x, x_off), dpt_op_ref(y, y_off)};
  return DPT_BE_CALL(be, be->vt->axpy(be, &args));
}

dpt_status dpt_scale(dpt_backend *be, size_t n, float alpha, dpt_buffer *x, size_t x_off) {
  dpt_op_check ck;
  DPT_TRY(dpt_op_begin(&ck, "dpt_scale", be, be && be->vt->scale));
  DPT_TRY(dpt_op_tensor(&ck, "x", x, x_off, n, F32));
  if (n == 0) return DPT_OK;
  dpt_scale_args args = {n, alpha, dpt_op_ref(x, x_off)};
  return DPT_BE_CALL(be, be->vt->scale(be, &args));
}

dpt_status dpt_sum(dpt_backend *be, size_t n, const dpt_buffer *x, size_t x_off, double *out) {
  dpt_op_check ck;
  DPT_TRY(dpt_op_begin(&ck, "dpt_sum", be, be && be->vt->sum));
  DPT_TRY(dpt_op_tensor(&ck, "x", x, x_off, n, F32));
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_sum: out is NULL");
  *out = 0.0;
  if (n == 0) return DPT_OK;
  dpt_sum_args args = {n, dpt_op_ref(x, x_off), out};
  return DPT_BE_CALL(be, be->vt->sum(be, &args));
}

dpt_status dpt_sumsq(dpt_backend *be, size_t n, const dpt_buffer *x, size_t x_off, double *out) {
  dpt_op_check ck;
  DPT_TRY(dpt_op_begin(&ck, "dpt_sumsq", be, be && be->vt->sumsq));
  DPT_TRY(dpt_op_tensor(&ck, "x", x, x_off, n, F32));
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_sumsq: out is NULL");
  *out = 0.0;
  if (n == 0) return DPT_OK;
  dpt_sumsq_args args = {n, dpt_op_ref(x, x_off), out};
  return DPT_BE_CALL(be, be->vt->sumsq(be, &args));
}

dpt_status dpt_count_nonfinite(dpt_backend *be, size_t n, const dpt_buffer *x, size_t x_off,
                               uint64_t *out) {
  dpt_op_check ck;
  DPT_TRY(dpt_op_begin(&ck, "dpt_count_nonfinite", be, be && be->vt->count_nonfinite));
  DPT_TRY(dpt_op_tensor(&ck, "x", x, x_off, n, F32));
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_count_nonfinite: out is NULL");
  *out = 0;
  if (n == 0) return DPT_OK;
  dpt_count_nonfinite_args args = {n, dpt_op_ref(x, x_off), out};
  return DPT_BE_CALL(be, be->vt->count_nonfinite(be, &args));
}

dpt_status dpt_sgd_update(dpt_backend *be, size_t n, const dpt_sgd_params *p, dpt_buffer *w,
                          size_t w_off, const dpt_buffer *grad, size_t grad_off,
                          dpt_buffer *velocity, size_t velocity_off) {
  dpt_op_check ck;
  DPT_TRY(dpt_op_begin(&ck, "dpt_sgd_update", be, be && be->vt->sgd_update));
  if (!p) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_sgd_update: params is NULL");
  DPT_TRY(dpt_op_tensor(&ck, "w", w, w_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "grad", grad, grad_off, n, F32));
  DPT_TRY(dpt_op_alias(&ck, "w", w, w_off, n, F32, "grad", grad, grad_off, n, F32, 0));
  if (p->momentum != 0.0f || velocity) {
    DPT_TRY(dpt_op_tensor(&ck, "velocity", velocity, velocity_off, n, F32));
    DPT_TRY(
        dpt_op_alias(&ck, "velocity", velocity, velocity_off, n, F32, "w", w, w_off, n, F32, 0));
    DPT_TRY(dpt_op_alias(&ck, "velocity", velocity, velocity_off, n, F32, "grad", grad, grad_off, n,
                         F32, 0));
  }
  if (p->nesterov && p->momentum == 0.0f)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_sgd_update: nesterov needs momentum > 0");
  if (n == 0) return DPT_OK;
  dpt_sgd_update_args args = {n, *p, dpt_op_ref(w, w_off), dpt_op_ref(grad, grad_off),
                              dpt_op_ref(velocity, velocity_off)};
  return DPT_BE_CALL(be, be->vt->sgd_update(be, &args));
}

dpt_status dpt_adamw_update(dpt_backend *be, size_t n, const dpt_adamw_params *p, dpt_buffer *w,
                            size_t w_off, const dpt_buffer *grad, size_t grad_off, dpt_buffer *m,
                            size_t m_off, dpt_buffer *v, size_t v_off) {
  dpt_op_check ck;
  DPT_TRY(dpt_op_begin(&ck, "dpt_adamw_update", be, be && be->vt->adamw_update));
  if (!p) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_adamw_update: params is NULL");
  if (p->step < 1)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_adamw_update: step %lld must be >= 1",
                         (long long)p->step);
  if (!(p->beta1 >= 0.0f && p->beta1 < 1.0f) || !(p->beta2 >= 0.0f && p->beta2 < 1.0f))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_adamw_update: beta1 %g / beta2 %g not in [0,1)",
                         (double)p->beta1, (double)p->beta2);
  DPT_TRY(dpt_op_tensor(&ck, "w", w, w_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "grad", grad, grad_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "m", m, m_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "v", v, v_off, n, F32));
  DPT_TRY(dpt_op_alias(&ck, "w", w, w_off, n, F32, "grad", grad, grad_off, n, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "m", m, m_off, n, F32, "w", w, w_off, n, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "m", m, m_off, n, F32, "grad", grad, grad_off, n, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "v", v, v_off, n, F32, "w", w, w_off, n, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "v", v, v_off, n, F32, "grad", grad, grad_off, n, F32, 0));
  DPT_TRY(dpt_op_alias(&ck, "v", v, v_off, n, F32, "m", m, m_off, n, F32, 0));
  if (n == 0) return DPT_OK;
  dpt_adamw_update_args args = {n,
                                *p,
                                dpt_op_ref(w, w_off),
                                dpt_op_ref(grad, grad_off),
                                dpt_op_ref(m, m_off),
                                dpt_op_ref(v, v_off)};
  return DPT_BE_CALL(be, be->vt->adamw_update(be, &args));
}

dpt_status dpt_f32_to_f16(dpt_backend *be, size_t n, const dpt_buffer *src, size_t src_off,
                          dpt_buffer *dst, size_t dst_off) {
  dpt_op_check ck;
  DPT_TRY(dpt_op_begin(&ck, "dpt_f32_to_f16", be, be && be->vt->f32_to_f16));
  DPT_TRY(dpt_op_tensor(&ck, "src", src, src_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "dst", dst, dst_off, n, F16));
  DPT_TRY(dpt_op_alias(&ck, "dst", dst, dst_off, n, F16, "src", src, src_off, n, F32, 0));
  if (n == 0) return DPT_OK;
  dpt_f32_to_f16_args args = {n, dpt_op_ref(src, src_off), dpt_op_ref(dst, dst_off)};
  return DPT_BE_CALL(be, be->vt->f32_to_f16(be, &args));
}

dpt_status dpt_f16_to_f32(dpt_backend *be, size_t n, const dpt_buffer *src, size_t src_off,
                          dpt_buffer *dst, size_t dst_off) {
  dpt_op_check ck;
  DPT_TRY(dpt_op_begin(&ck, "dpt_f16_to_f32", be, be && be->vt->f16_to_f32));
  DPT_TRY(dpt_op_tensor(&ck, "src", src, src_off, n, F16));
  DPT_TRY(dpt_op_tensor(&ck, "dst", dst, dst_off, n, F32));
  DPT_TRY(dpt_op_alias(&ck, "dst", dst, dst_off, n, F32, "src", src, src_off, n, F16, 0));
  if (n == 0) return DPT_OK;
  dpt_f16_to_f32_args args = {n, dpt_op_ref(src, src_off), dpt_op_ref(dst, dst_off)};
  return DPT_BE_CALL(be, be->vt->f16_to_f32(be, &args));
}

dpt_status dpt_f32_to_bf16(dpt_backend *be, size_t n, const dpt_buffer *src, size_t src_off,
                           dpt_buffer *dst, size_t dst_off) {
  dpt_op_check ck;
  DPT_TRY(dpt_op_begin(&ck, "dpt_f32_to_bf16", be, be && be->vt->f32_to_bf16));
  DPT_TRY(dpt_op_tensor(&ck, "src", src, src_off, n, F32));
  DPT_TRY(dpt_op_tensor(&ck, "dst", dst, dst_off, n, F16));
  DPT_TRY(dpt_op_alias(&ck, "dst", dst, dst_off, n, F16, "src", src, src_off, n, F32, 0));
  if (n == 0) return DPT_OK;
  dpt_f32_to_bf16_args args = {n, dpt_op_ref(src, src_off), dpt_op_ref(dst, dst_off)};
  return DPT_BE_CALL(be, be->vt->f32_to_bf16(be, &args));
}

dpt_status dpt_bf16_to_f32(dpt_backend *be, size_t n, const dpt_buffer *src, size_t src_off,
                           dpt_buffer *dst, size_t dst_off) {
  dpt_op_check ck;
  DPT_TRY(dpt_op_begin(&ck, "dpt_bf16_to_f32", be, be && be->vt->bf16_to_f32));
  DPT_TRY(dpt_op_tensor(&ck, "src", src, src_off, n, F16));
  DPT_TRY(dpt_op_tensor(&ck, "dst", dst, dst_off, n, F32));
  DPT_TRY(dpt_op_alias(&ck, "dst", dst, dst_off, n, F32, "src", src, src_off, n, F16, 0));
  if (n == 0) return DPT_OK;
  dpt_bf16_to_f32_args args = {n, dpt_op_ref(src, src_off), dpt_op_ref(dst, dst_off)};
  return DPT_BE_CALL(be, be->vt->bf16_to_f32(be, &args));
}
