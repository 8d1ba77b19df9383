/* The CPU backend: one device (this machine), buffers in ordinary host memory, every op run
 * synchronously on the calling thread. It is the reference the other backends are tested
 * against, so its ops favour clarity and accuracy (double accumulators) over speed, except
 * gemm (cpu_gemm.c). */
#define _POSIX_C_SOURCE 200809L /* sysconf */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/cpu/cpu_internal.h"
#include "base/error.h"

/* Buffers are aligned for the widest vector loads (AVX-512) and a cache line. */
enum { DPT_CPU_ALIGN = 64 };

static dpt_status dpt_cpu_device_count(int *count) {
  *count = 1;
  return DPT_OK;
}

/* Copies the value of the first "key : value" line of /proc/cpuinfo whose key is `key` into
 * out[len]; leaves out untouched when the file or the key is missing. */
static void dpt_cpuinfo_field(const char *key, char *out, size_t len) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f == NULL) return;
  const size_t key_len = strlen(key);
  char line[512];
  while (fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, key, key_len) != 0) continue;
    const char *p = line + key_len;
    while (*p == ' ' || *p == '\t')
      ++p;
    if (*p != ':') continue; /* a longer key with the same prefix */
    ++p;
    while (*p == ' ' || *p == '\t')
      ++p;
    size_t n = strcspn(p, "\r\n");
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
      --n;
    if (n == 0) continue;
    snprintf(out, len, "%.*s", (int)n, p);
    break;
  }
  fclose(f);
}

static dpt_status dpt_cpu_device_info(int index, dpt_device_info *out) {
  if (index != 0) {
    return dpt_set_error(DPT_ERR_INVALID_ARG, "cpu: device %d does not exist (1 device)", index);
  }
  dpt_cpu_gemm_impl gemm;
  dpt_status st = dpt_cpu_gemm_select(&gemm, NULL);
  if (st != DPT_OK) return st;

  memset(out, 0, sizeof *out);
  out->backend = DPT_BACKEND_CPU;
  out->index = 0;
  out->type = DPT_DEVICE_CPU;
  snprintf(out->name, sizeof out->name, "CPU");
  dpt_cpuinfo_field("model name", out->name, sizeof out->name);
  snprintf(out->vendor, sizeof out->vendor, "unknown");
  dpt_cpuinfo_field("vendor_id", out->vendor, sizeof out->vendor);
  int conv = 0;
  st = dpt_cpu_conv_select(&conv);
  if (st != DPT_OK) return st;
  char gemm_text[96], conv_text[32] = "";
  dpt_cpu_gemm_describe(gemm, gemm_text, sizeof gemm_text);
  if (conv == DPT_CPU_CONV_ONEDNN) dpt_cpu_conv_describe(conv_text, sizeof conv_text);
  snprintf(out->driver, sizeof out->driver, "dptrain cpu (%s%s%s)", gemm_text,
           conv_text[0] ? ", " : "", conv_text);
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  out->memory_bytes = pages > 0 && page_size > 0 ? (uint64_t)pages * (uint64_t)page_size : 0;
  return DPT_OK;
}

/* A backend that would use OpenBLAS past what it can serve (cpu_openblas.c) gets the portable
 * gemm, and its driver string (be->info, filled from device_info) says so and why; with
 * DPT_CPU_GEMM=openblas (`requested`) it is refused instead. */
static dpt_status dpt_cpu_admit_openblas(dpt_backend *be, dpt_cpu_ctx *ctx, int requested) {
  char why[72]; /* with gemm_text, fits the 128 bytes of the driver string */
  if (dpt_cpu_openblas_admit(why, sizeof why)) return DPT_OK;
  if (requested) {
    return dpt_set_error(DPT_ERR_UNSUPPORTED,
                         "cpu: DPT_CPU_GEMM=openblas but %s (unset DPT_CPU_GEMM to let such "
                         "backends use the portable gemm)",
                         why);
  }
  ctx->gemm = DPT_CPU_GEMM_PORTABLE;
  char gemm_text[32];
  dpt_cpu_gemm_describe(ctx->gemm, gemm_text, sizeof gemm_text);
  snprintf(be->info.driver, sizeof be->info.driver, "dptrain cpu (%s; %s)", gemm_text, why);
  return DPT_OK;
}

static dpt_status dpt_cpu_create(dpt_backend *be, int device) {
  (void)device; /* the wrapper checked it against device_count */
  dpt_cpu_ctx *ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL) {
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY,
                         "cpu: cannot allocate the backend context (%zu "
                         "bytes)",
                         sizeof *ctx);
  }
  int requested = 0;
  dpt_status st = dpt_cpu_gemm_select(&ctx->gemm, &requested);
  if (st == DPT_OK) st = dpt_cpu_conv_select(&ctx->conv_mode);
  if (st == DPT_OK && ctx->gemm == DPT_CPU_GEMM_OPENBLAS)
    st = dpt_cpu_admit_openblas(be, ctx, requested);
  if (st == DPT_OK && ctx->conv_mode == DPT_CPU_CONV_ONEDNN) st = dpt_cpu_conv_create(&ctx->conv);
  if (st != DPT_OK) {
    dpt_cpu_conv_destroy(ctx->conv);
    free(ctx);
    return st;
  }
  be->ctx = ctx;
  return DPT_OK;
}

static void dpt_cpu_destroy(dpt_backend *be) {
  dpt_cpu_ctx *ctx = be->ctx;
  if (ctx == NULL) return;
  if (ctx->gemm == DPT_CPU_GEMM_OPENBLAS) dpt_cpu_openblas_leave();
  dpt_cpu_gemm_ws_free(&ctx->ws);
  dpt_cpu_conv_destroy(ctx->conv);
  free(ctx);
  be->ctx = NULL;
}

static dpt_status dpt_cpu_synchronize(dpt_backend *be) {
  (void)be; /* every op has finished when it returns */
  return DPT_OK;
}

/* The CPU backend's own ops run on the caller's thread, and oneDNN's on one thread
 * (cpu_conv.c): only OpenBLAS's threaded gemm sums in an order that depends on its threads. */
static dpt_status dpt_cpu_set_deterministic(dpt_backend *be) {
  if (((dpt_cpu_ctx *)be->ctx)->gemm == DPT_CPU_GEMM_OPENBLAS) dpt_cpu_openblas_one_thread();
  return DPT_OK;
}

static dpt_status dpt_cpu_buffer_alloc(dpt_backend *be, dpt_buffer *buf) {
  (void)be;
  /* aligned_alloc wants a multiple of the alignment. */
  if (buf->size > (size_t)-1 - (DPT_CPU_ALIGN - 1)) {
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "cpu: cannot allocate %zu bytes", buf->size);
  }
  const size_t rounded = (buf->size + DPT_CPU_ALIGN - 1) & ~(size_t)(DPT_CPU_ALIGN - 1);
  void *p = aligned_alloc(DPT_CPU_ALIGN, rounded);
  if (p == NULL) {
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "cpu: cannot allocate %zu bytes", buf->size);
  }
  buf->handle = p;
  return DPT_OK;
}

static void dpt_cpu_buffer_free(dpt_backend *be, dpt_buffer *buf) {
  (void)be;
  free(buf->handle);
  buf->handle = NULL;
}

static dpt_status dpt_cpu_upload(dpt_backend *be, dpt_buffer *dst, size_t offset, const void *src,
                                 size_t bytes) {
  (void)be;
  memcpy((char *)dst->handle + offset, src, bytes);
  return DPT_OK;
}

static dpt_status dpt_cpu_download(dpt_backend *be, const dpt_buffer *src, size_t offset, void *dst,
                                   size_t bytes) {
  (void)be;
  memcpy(dst, (const char *)src->handle + offset, bytes);
  return DPT_OK;
}

static dpt_status dpt_cpu_map(dpt_backend *be, dpt_buffer *buf, size_t offset, size_t bytes,
                              void **ptr) {
  (void)be;
  (void)bytes; /* every op has finished when it returns: the memory is the host's already */
  *ptr = (char *)buf->handle + offset;
  return DPT_OK;
}

static dpt_status dpt_cpu_copy(dpt_backend *be, dpt_buffer *dst, size_t dst_offset,
                               const dpt_buffer *src, size_t src_offset, size_t bytes) {
  (void)be;
  /* memmove: the contract forbids overlap, but tolerating it costs nothing here. */
  memmove((char *)dst->handle + dst_offset, (const char *)src->handle + src_offset, bytes);
  return DPT_OK;
}

static dpt_status dpt_cpu_fill_f32(dpt_backend *be, dpt_buffer *dst, size_t offset_elems,
                                   size_t count, float value) {
  (void)be;
  float *p = (float *)dst->handle + offset_elems;
  for (size_t i = 0; i < count; ++i)
    p[i] = value;
  return DPT_OK;
}

const dpt_backend_vtable dpt_cpu_vtable = {.kind = DPT_BACKEND_CPU,
                                           .device_count = dpt_cpu_device_count,
                                           .device_info = dpt_cpu_device_info,
                                           .create = dpt_cpu_create,
                                           .destroy = dpt_cpu_destroy,
                                           .synchronize = dpt_cpu_synchronize,
                                           .set_deterministic = dpt_cpu_set_deterministic,
                                           .buffer_alloc = dpt_cpu_buffer_alloc,
                                           .buffer_free = dpt_cpu_buffer_free,
                                           .upload = dpt_cpu_upload,
                                           .download = dpt_cpu_download,
                                           .copy = dpt_cpu_copy,
                                           .fill_f32 = dpt_cpu_fill_f32,
                                           .map = dpt_cpu_map,
                                           .op_enabled = dpt_cpu_op_enabled,
#define DPT_CPU_OP_ENTRY_(NAME, name) .name = dpt_cpu_##name,
                                           DPT_OP_MAP(DPT_CPU_OP_ENTRY_)
#undef DPT_CPU_OP_ENTRY_
};
