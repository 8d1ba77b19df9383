/* Vulkan backend: device memory. Blocks with a first-fit free list, dedicated blocks for large
 * buffers, deferred release while the device still uses a range, and host <-> device transfers
 * (memcpy into mapped memory when the buffer is idle, copies through a staging buffer recorded
 * into the command stream otherwise). See vk_internal.h for the model.
 *
 * DPT_VULKAN_FORCE_STAGING=1 in the environment disables direct mode, so the staging paths a
 * discrete GPU takes can be tested on a driver with host-visible device memory. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/vulkan/vk_internal.h"
#include "base/error.h"

#define DPT_VK_BLOCK_BYTES   ((VkDeviceSize)64 << 20)
#define DPT_VK_STAGING_BYTES ((VkDeviceSize)16 << 20)

static VkBufferUsageFlags vk_usage(const dpt_vk_ctx *ctx) {
  /* texel views for gemm_tex.spv where it runs */
  return VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
         VK_BUFFER_USAGE_TRANSFER_DST_BIT |
         (ctx->gemm_tex ? VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT : 0);
}

static VkDeviceSize vk_round_up(VkDeviceSize x, VkDeviceSize a) {
  return (x + a - 1) / a * a;
}

/* Index of a memory type among `bits` having all of `need` (and preferably `want`), or -1. */
static int vk_find_type(const VkPhysicalDeviceMemoryProperties *mp, uint32_t bits,
                        VkMemoryPropertyFlags need, VkMemoryPropertyFlags want) {
  int found = -1;
  for (uint32_t i = 0; i < mp->memoryTypeCount; ++i) {
    if (!(bits & (1u << i))) continue;
    VkMemoryPropertyFlags f = mp->memoryTypes[i].propertyFlags;
    if ((f & need) != need) continue;
    if ((f & want) == want) return (int)i;
    if (found < 0) found = (int)i;
  }
  return found;
}

dpt_status dpt_vk_memory_init(dpt_vk_ctx *ctx) {
  /* Which memory types can hold our buffers: ask with a throwaway buffer. */
  VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                           .size = 4096,
                           .usage = vk_usage(ctx),
                           .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  VkBuffer probe;
  dpt_status st =
      dpt_vk_check(ctx, vkCreateBuffer(ctx->device, &bi, NULL, &probe), "vkCreateBuffer", 4096);
  if (st != DPT_OK) return st;
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(ctx->device, probe, &req);
  vkDestroyBuffer(ctx->device, probe, NULL);

  const VkPhysicalDeviceMemoryProperties *mp = &ctx->memprops;
  const VkMemoryPropertyFlags host =
      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  int dev = -1;
  /* Mapped device memory of a discrete GPU sits behind the PCIe bar (uncached reads): use it
   * only where device memory is host memory anyway. */
  if (ctx->props.deviceType != VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU && !ctx->force_staging) {
    dev = vk_find_type(mp, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | host,
                       VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    ctx->direct = dev >= 0;
  }
  if (dev < 0) dev = vk_find_type(mp, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
  if (dev < 0) dev = vk_find_type(mp, req.memoryTypeBits, 0, 0);
  int hst = vk_find_type(mp, req.memoryTypeBits, host, VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
  if (dev < 0 || hst < 0)
    return dpt_set_error(DPT_ERR_UNSUPPORTED,
                         "vulkan: %s offers no %s memory type for storage buffers",
                         ctx->props.deviceName, dev < 0 ? "device" : "host-visible coherent");
  ctx->memtype[DPT_VK_MEM_DEVICE] = (uint32_t)dev;
  ctx->memtype[DPT_VK_MEM_HOST] = (uint32_t)hst;

  VkDeviceSize align = ctx->props.limits.minStorageBufferOffsetAlignment;
  if (align < 16) align = 16;
  ctx->align = align;
  VkDeviceSize heap = mp->memoryHeaps[mp->memoryTypes[dev].heapIndex].size;
  VkDeviceSize block = DPT_VK_BLOCK_BYTES;
  if (heap / 8 < block) block = vk_round_up(heap / 8 > align ? heap / 8 : align, align);
  if (ctx->max_allocation && ctx->max_allocation < block)
    block = ctx->max_allocation / align * align;
  ctx->block_size = block;
  ctx->dedicated_min = block / 4;
  return DPT_OK;
}

static void vk_block_destroy(dpt_vk_ctx *ctx, dpt_vk_block *b) {
  if (b->budgeted) ctx->device_bytes -= b->size;
  if (b->buffer) vkDestroyBuffer(ctx->device, b->buffer, NULL);
  if (b->memory) vkFreeMemory(ctx->device, b->memory, NULL); /* also unmaps */
  free(b->free);
  free(b);
}

static dpt_status vk_block_create(dpt_vk_ctx *ctx, VkDeviceSize size, dpt_vk_memkind kind,
                                  int dedicated, dpt_vk_block **out) {
  *out = NULL;
  if (ctx->max_allocation && size > ctx->max_allocation)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY,
                         "vulkan: %llu bytes exceed maxMemoryAllocationSize (%llu bytes) of %s",
                         (unsigned long long)size, (unsigned long long)ctx->max_allocation,
                         ctx->props.deviceName);
  if (kind == DPT_VK_MEM_DEVICE && ctx->test_budget && ctx->device_bytes + size > ctx->test_budget)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY,
                         "vulkan: %llu more bytes exceed the test budget (%llu in use)",
                         (unsigned long long)size, (unsigned long long)ctx->device_bytes);
  dpt_vk_block *b = calloc(1, sizeof *b);
  if (b) b->free = malloc(4 * sizeof *b->free);
  if (!b || !b->free) {
    free(b);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
  }
  b->capfree = 4;
  b->size = size;
  b->kind = kind;
  b->dedicated = dedicated;
  VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                           .size = size,
                           .usage = vk_usage(ctx),
                           .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  dpt_status st = dpt_vk_check(ctx, vkCreateBuffer(ctx->device, &bi, NULL, &b->buffer),
                               "vkCreateBuffer", (size_t)size);
  if (st != DPT_OK) {
    b->buffer = VK_NULL_HANDLE;
    vk_block_destroy(ctx, b);
    return st;
  }
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(ctx->device, b->buffer, &req);
  uint32_t type = ctx->memtype[kind];
  if (!(req.memoryTypeBits & (1u << type))) {
    vk_block_destroy(ctx, b);
    return dpt_set_error(DPT_ERR_UNSUPPORTED,
                         "vulkan: memory type %u cannot hold a buffer of %llu bytes", type,
                         (unsigned long long)size);
  }
  VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                             .allocationSize = req.size,
                             .memoryTypeIndex = type};
  st = dpt_vk_check(ctx, vkAllocateMemory(ctx->device, &ai, NULL, &b->memory), "vkAllocateMemory",
                    (size_t)req.size);
  if (st == DPT_OK)
    st = dpt_vk_check(ctx, vkBindBufferMemory(ctx->device, b->buffer, b->memory, 0),
                      "vkBindBufferMemory", 0);
  else
    b->memory = VK_NULL_HANDLE;
  if (st == DPT_OK &&
      (ctx->memprops.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) {
    void *p = NULL;
    st = dpt_vk_check(ctx, vkMapMemory(ctx->device, b->memory, 0, VK_WHOLE_SIZE, 0, &p),
                      "vkMapMemory", (size_t)req.size);
    b->map = p;
  }
  if (st != DPT_OK) {
    vk_block_destroy(ctx, b);
    return st;
  }
  b->free[0].offset = 0;
  b->free[0].size = size;
  b->nfree = 1;
  if (kind == DPT_VK_MEM_DEVICE) {
    b->budgeted = 1;
    ctx->device_bytes += size;
  }
  b->next = ctx->blocks;
  ctx->blocks = b;
  *out = b;
  return DPT_OK;
}

static void vk_block_unlink(dpt_vk_ctx *ctx, dpt_vk_block *b) {
  for (dpt_vk_block **p = &ctx->blocks; *p; p = &(*p)->next) {
    if (*p == b) {
      *p = b->next;
      return;
    }
  }
}

/* First fit in `b`; 0 when no free range is large enough. */
static int vk_block_take(dpt_vk_block *b, VkDeviceSize size, VkDeviceSize *offset) {
  for (size_t i = 0; i < b->nfree; ++i) {
    if (b->free[i].size < size) continue;
    *offset = b->free[i].offset;
    b->free[i].offset += size;
    b->free[i].size -= size;
    if (b->free[i].size == 0) {
      memmove(&b->free[i], &b->free[i + 1], (b->nfree - i - 1) * sizeof *b->free);
      --b->nfree;
    }
    return 1;
  }
  return 0;
}

/* Returns a range to the free list, merging neighbours. 0 when the list could not grow (the
 * range is then lost until the block is destroyed, which is harmless). */
static int vk_block_give(dpt_vk_block *b, VkDeviceSize offset, VkDeviceSize size) {
  size_t i = 0;
  while (i < b->nfree && b->free[i].offset < offset)
    ++i;
  int merge_prev = i > 0 && b->free[i - 1].offset + b->free[i - 1].size == offset;
  int merge_next = i < b->nfree && offset + size == b->free[i].offset;
  if (merge_prev && merge_next) {
    b->free[i - 1].size += size + b->free[i].size;
    memmove(&b->free[i], &b->free[i + 1], (b->nfree - i - 1) * sizeof *b->free);
    --b->nfree;
  } else if (merge_prev) {
    b->free[i - 1].size += size;
  } else if (merge_next) {
    b->free[i].offset = offset;
    b->free[i].size += size;
  } else {
    if (b->nfree == b->capfree) {
      dpt_vk_range *grown = realloc(b->free, 2 * b->capfree * sizeof *grown);
      if (!grown) return 0;
      b->free = grown;
      b->capfree *= 2;
    }
    memmove(&b->free[i + 1], &b->free[i], (b->nfree - i) * sizeof *b->free);
    b->free[i].offset = offset;
    b->free[i].size = size;
    ++b->nfree;
  }
  return 1;
}

dpt_status dpt_vk_alloc_create(dpt_vk_ctx *ctx, VkDeviceSize bytes, dpt_vk_memkind kind,
                               dpt_vk_alloc **out) {
  *out = NULL;
  if (bytes > ((VkDeviceSize)-1) / 2)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "vulkan: %llu bytes cannot be allocated",
                         (unsigned long long)bytes);
  /* Whole 32-bit words, so shaders may access 16-bit data by word. */
  VkDeviceSize size = vk_round_up(bytes ? bytes : 4, 4);
  VkDeviceSize reserved = vk_round_up(size, ctx->align);
  dpt_vk_alloc *al = calloc(1, sizeof *al);
  if (!al) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "vulkan: out of host memory");
  al->size = size;
  dpt_vk_block *b = NULL;
  if (kind == DPT_VK_MEM_DEVICE && reserved < ctx->dedicated_min) {
    for (dpt_vk_block *it = ctx->blocks; it && !b; it = it->next)
      if (it->kind == kind && !it->dedicated && vk_block_take(it, reserved, &al->offset)) b = it;
    if (!b) {
      dpt_status st = vk_block_create(ctx, ctx->block_size, kind, 0, &b);
      if (st != DPT_OK) {
        free(al);
        return st;
      }
      (void)vk_block_take(b, reserved, &al->offset);
    }
  } else {
    dpt_status st = vk_block_create(ctx, reserved, kind, 1, &b);
    if (st != DPT_OK) {
      free(al);
      return st;
    }
    (void)vk_block_take(b, reserved, &al->offset);
  }
  ++b->nlive;
  al->block = b;
  *out = al;
  return DPT_OK;
}

static void vk_alloc_release_now(dpt_vk_ctx *ctx, dpt_vk_alloc *al) {
  dpt_vk_block *b = al->block;
  --b->nlive;
  int kept = vk_block_give(b, al->offset, vk_round_up(al->size, ctx->align));
  free(al);
  if (b->nlive > 0) return;
  /* Keep one empty shared block per kind, so a loop allocating and freeing one small tensor
   * does not allocate device memory each time. */
  int other_empty = 0;
  for (dpt_vk_block *it = ctx->blocks; it; it = it->next)
    if (it != b && it->kind == b->kind && !it->dedicated && it->nlive == 0) other_empty = 1;
  if (b->dedicated || other_empty || !kept) {
    vk_block_unlink(ctx, b);
    vk_block_destroy(ctx, b);
  }
}

void dpt_vk_alloc_release(dpt_vk_ctx *ctx, dpt_vk_alloc *al) {
  if (!al) return;
  if (al->last_use > ctx->completed) {
    if (ctx->ndeferred == ctx->capdeferred) {
      size_t cap = ctx->capdeferred ? 2 * ctx->capdeferred : 16;
      dpt_vk_deferred *grown = realloc(ctx->deferred, cap * sizeof *grown);
      if (grown) {
        ctx->deferred = grown;
        ctx->capdeferred = cap;
      }
    }
    if (ctx->ndeferred < ctx->capdeferred) {
      ctx->deferred[ctx->ndeferred].alloc = al;
      ctx->deferred[ctx->ndeferred].serial = al->last_use;
      ++ctx->ndeferred;
      return;
    }
    /* No host memory to remember it: wait for the device instead. */
    (void)dpt_vk_wait(ctx, al->last_use);
  }
  vk_alloc_release_now(ctx, al);
}

void dpt_vk_memory_reclaim(dpt_vk_ctx *ctx) {
  size_t kept = 0;
  for (size_t i = 0; i < ctx->ndeferred; ++i) {
    if (ctx->deferred[i].serial <= ctx->completed)
      vk_alloc_release_now(ctx, ctx->deferred[i].alloc);
    else
      ctx->deferred[kept++] = ctx->deferred[i];
  }
  ctx->ndeferred = kept;
}

void dpt_vk_memory_destroy(dpt_vk_ctx *ctx) {
  ctx->completed = UINT64_MAX; /* the device is idle (or lost): everything may go */
  dpt_vk_memory_reclaim(ctx);
  free(ctx->deferred);
  ctx->deferred = NULL;
  ctx->ndeferred = ctx->capdeferred = 0;
  while (ctx->nsnapshots > 0)
    dpt_vk_alloc_release(ctx, ctx->snapshots[--ctx->nsnapshots]);
  dpt_vk_alloc_release(ctx, ctx->staging);
  dpt_vk_alloc_release(ctx, ctx->partials);
  dpt_vk_alloc_release(ctx, ctx->scratch);
  ctx->staging = ctx->partials = ctx->scratch = NULL;
  while (ctx->blocks) {
    dpt_vk_block *b = ctx->blocks;
    ctx->blocks = b->next;
    vk_block_destroy(ctx, b);
  }
}

static dpt_status vk_internal_buffer(dpt_vk_ctx *ctx, dpt_vk_alloc **slot, VkDeviceSize bytes,
                                     dpt_vk_memkind kind) {
  if (*slot && (*slot)->size >= bytes) return DPT_OK;
  VkDeviceSize want = bytes;
  if (*slot && want < 2 * (*slot)->size) want = 2 * (*slot)->size;
  dpt_vk_alloc_release(ctx, *slot);
  *slot = NULL;
  return dpt_vk_alloc_create(ctx, want, kind, slot);
}

dpt_status dpt_vk_scratch(dpt_vk_ctx *ctx, VkDeviceSize bytes, dpt_vk_alloc **out) {
  dpt_status st = vk_internal_buffer(ctx, &ctx->scratch, bytes, DPT_VK_MEM_DEVICE);
  *out = ctx->scratch;
  return st;
}

dpt_status dpt_vk_partials(dpt_vk_ctx *ctx, VkDeviceSize bytes, dpt_vk_alloc **out) {
  dpt_status st =
      vk_internal_buffer(ctx, &ctx->partials, bytes < 4096 ? 4096 : bytes, DPT_VK_MEM_HOST);
  *out = ctx->partials;
  return st;
}

/* ---- buffers and transfers: the vtable's memory entries ---------------------------------- */

/* Each entry that touches the device opens with dpt_vk_enter and returns success through
 * dpt_vk_leave (vk_error.c), so a validation error is reported by the call that raised it. */

dpt_status dpt_vk_buffer_alloc(dpt_backend *be, dpt_buffer *buf) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  dpt_vk_alloc *al;
  dpt_status st = dpt_vk_alloc_create(ctx, buf->size, DPT_VK_MEM_DEVICE, &al);
  if (st == DPT_ERR_OUT_OF_MEMORY && ctx->ndeferred > 0) {
    /* Buffers freed while queued work still used them are held until it completes: finish
     * the work (between ops, so the batch may be submitted here), which releases them, and
     * try once more. */
    char msg[512];
    snprintf(msg, sizeof msg, "%s", dpt_last_error());
    st = dpt_vk_finish(ctx);
    if (st != DPT_OK) return st;
    st = dpt_vk_alloc_create(ctx, buf->size, DPT_VK_MEM_DEVICE, &al);
    if (st == DPT_ERR_OUT_OF_MEMORY) return dpt_set_error(st, "%s", msg);
  }
  if (st != DPT_OK) return st;
  buf->handle = al;
  return dpt_vk_leave(be, DPT_OK);
}

void dpt_vk_buffer_free(dpt_backend *be, dpt_buffer *buf) {
  dpt_vk_alloc_release(be->ctx, buf->handle);
  buf->handle = NULL;
}

/* `bytes` (<= staging size) of staging memory free for the batch being recorded; returns its
 * offset in the staging buffer. Waits for earlier batches when the staging buffer is full. */
static dpt_status vk_stage_reserve(dpt_vk_ctx *ctx, VkDeviceSize bytes, VkDeviceSize *at) {
  if (!ctx->staging) {
    dpt_status st = dpt_vk_alloc_create(ctx, DPT_VK_STAGING_BYTES, DPT_VK_MEM_HOST, &ctx->staging);
    if (st != DPT_OK) return st;
    ctx->staging_cursor = 0;
  }
  if (ctx->staging_serial <= ctx->completed) ctx->staging_cursor = 0;
  if (ctx->staging_cursor + bytes > ctx->staging->size) {
    dpt_status st = dpt_vk_wait(ctx, ctx->staging_serial);
    if (st != DPT_OK) return st;
    ctx->staging_cursor = 0;
  }
  *at = ctx->staging_cursor;
  ctx->staging_cursor += vk_round_up(bytes, 16);
  return DPT_OK;
}

static dpt_status vk_record_copy(dpt_vk_ctx *ctx, dpt_vk_alloc *src, VkDeviceSize src_off,
                                 dpt_vk_alloc *dst, VkDeviceSize dst_off, VkDeviceSize bytes) {
  VkCommandBuffer cmd;
  dpt_status st = dpt_vk_cmd(ctx, &cmd);
  if (st != DPT_OK) return st;
  VkBufferCopy region = {
      .srcOffset = src->offset + src_off, .dstOffset = dst->offset + dst_off, .size = bytes};
  vkCmdCopyBuffer(cmd, src->block->buffer, dst->block->buffer, 1, &region);
  dpt_vk_touch(ctx, src);
  dpt_vk_touch(ctx, dst);
  return DPT_OK;
}

dpt_status dpt_vk_upload(dpt_backend *be, dpt_buffer *dst, size_t offset, const void *src,
                         size_t bytes) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  dpt_vk_alloc *al = dst->handle;
  if (ctx->direct) {
    dpt_status st = dpt_vk_poll(ctx);
    if (st != DPT_OK) return st;
    if (al->last_use <= ctx->completed) {
      memcpy(al->block->map + al->offset + offset, src, bytes);
      return dpt_vk_leave(be, DPT_OK);
    }
  }
  /* The device may still read or write the buffer: order the write in the command stream. */
  const uint8_t *p = src;
  while (bytes > 0) {
    VkDeviceSize chunk = bytes < DPT_VK_STAGING_BYTES ? bytes : DPT_VK_STAGING_BYTES;
    VkDeviceSize at;
    dpt_status st = vk_stage_reserve(ctx, chunk, &at);
    if (st != DPT_OK) return st;
    memcpy(ctx->staging->block->map + ctx->staging->offset + at, p, (size_t)chunk);
    st = vk_record_copy(ctx, ctx->staging, at, al, offset, chunk);
    if (st != DPT_OK) return st;
    ctx->staging_serial = dpt_vk_current_serial(ctx);
    p += chunk;
    offset += (size_t)chunk;
    bytes -= (size_t)chunk;
  }
  return dpt_vk_leave(be, DPT_OK);
}

dpt_status dpt_vk_download(dpt_backend *be, const dpt_buffer *src, size_t offset, void *dst,
                           size_t bytes) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  dpt_vk_alloc *al = src->handle;
  if (ctx->direct) {
    dpt_status st = dpt_vk_wait(ctx, al->last_use);
    if (st != DPT_OK) return st;
    memcpy(dst, al->block->map + al->offset + offset, bytes);
    return dpt_vk_leave(be, DPT_OK);
  }
  uint8_t *p = dst;
  while (bytes > 0) {
    VkDeviceSize chunk = bytes < DPT_VK_STAGING_BYTES ? bytes : DPT_VK_STAGING_BYTES;
    VkDeviceSize at;
    dpt_status st = vk_stage_reserve(ctx, chunk, &at);
    if (st == DPT_OK) st = vk_record_copy(ctx, al, offset, ctx->staging, at, chunk);
    if (st != DPT_OK) return st;
    uint64_t serial = dpt_vk_current_serial(ctx);
    ctx->staging_serial = serial;
    st = dpt_vk_wait(ctx, serial);
    if (st != DPT_OK) return st;
    memcpy(p, ctx->staging->block->map + ctx->staging->offset + at, (size_t)chunk);
    p += chunk;
    offset += (size_t)chunk;
    bytes -= (size_t)chunk;
  }
  return dpt_vk_leave(be, DPT_OK);
}

/* Fenced transfers. The fence is the batch being recorded, submitted now so that it runs, and
 * the transfers poll for that batch under the lock, then copy without it. In direct mode they
 * copy the mapped range itself (the device works on other ranges meanwhile). Otherwise the
 * fence records a copy of the range into a host-visible snapshot first; download_after reads
 * the snapshot, upload_after writes it and records its copy back into the command stream,
 * which the work recorded later sees. A freed fence's snapshot is kept for the next one: work
 * still reading it is ordered before the next fence's copy into it by the one queue, and the
 * host writes it only after that copy. */
int dpt_vk_fence(dpt_backend *be, dpt_fence *f) {
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  if (!ctx->direct && f->bytes > 0) {
    dpt_vk_alloc *snap = NULL;
    for (int i = 0; i < ctx->nsnapshots && !snap; ++i)
      if (ctx->snapshots[i]->size >= f->bytes) {
        snap = ctx->snapshots[i];
        ctx->snapshots[i] = ctx->snapshots[--ctx->nsnapshots];
      }
    if (!snap && dpt_vk_alloc_create(ctx, f->bytes, DPT_VK_MEM_HOST, &snap) != DPT_OK) return 0;
    if (vk_record_copy(ctx, f->buf->handle, f->offset, snap, 0, f->bytes) != DPT_OK) {
      dpt_vk_alloc_release(ctx, snap);
      return 0;
    }
    f->handle = snap;
  }
  f->serial = ctx->recording >= 0 ? ctx->frames[ctx->recording].serial : ctx->next_serial - 1;
  if (dpt_vk_submit(ctx) == DPT_OK) return 1;
  dpt_vk_fence_free(be, f);
  return 0;
}

void dpt_vk_fence_free(dpt_backend *be, dpt_fence *f) {
  dpt_vk_alloc *snap = f->handle;
  if (!snap) return;
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  pthread_mutex_lock(&be->lock);
  if (ctx->nsnapshots < (int)(sizeof ctx->snapshots / sizeof *ctx->snapshots))
    ctx->snapshots[ctx->nsnapshots++] = snap;
  else
    dpt_vk_alloc_release(ctx, snap);
  pthread_mutex_unlock(&be->lock);
  f->handle = NULL;
}

/* The fenced transfers run on another thread than the caller's ops: they refuse a lost device
 * but leave a validation error to the caller's next call (dpt_vk_enter), whose ops raised it. */
static dpt_status vk_fenced_lost(const dpt_backend *be) {
  return be->lost
             ? dpt_set_error(DPT_ERR_DEVICE, "vulkan: the device was lost; destroy the backend")
             : DPT_OK;
}

dpt_status dpt_vk_fence_wait(dpt_backend *be, const dpt_fence *f) {
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  for (long pause_ns = 10000;; pause_ns = pause_ns < 200000 ? 2 * pause_ns : pause_ns) {
    pthread_mutex_lock(&be->lock);
    dpt_status st = vk_fenced_lost(be);
    if (st == DPT_OK && f->serial > ctx->completed) st = dpt_vk_poll(ctx);
    const int done = f->serial <= ctx->completed;
    pthread_mutex_unlock(&be->lock);
    if (st != DPT_OK) return st;
    if (done) break;
    struct timespec ts = {0, pause_ns};
    nanosleep(&ts, NULL);
  }
  return DPT_OK;
}

/* The host address of the buffer's byte `offset` in a fenced range: the mapped buffer in
 * direct mode, else the snapshot. */
static uint8_t *vk_fenced_at(const dpt_fence *f, size_t offset) {
  const dpt_vk_alloc *snap = f->handle;
  if (snap) return snap->block->map + snap->offset + (offset - f->offset);
  const dpt_vk_alloc *al = f->buf->handle;
  return al->block->map + al->offset + offset;
}

dpt_status dpt_vk_download_after(dpt_backend *be, const dpt_fence *f, size_t offset, void *dst,
                                 size_t bytes) {
  DPT_TRY(dpt_vk_fence_wait(be, f));
  memcpy(dst, vk_fenced_at(f, offset), bytes);
  return DPT_OK;
}

dpt_status dpt_vk_upload_after(dpt_backend *be, const dpt_fence *f, size_t offset, const void *src,
                               size_t bytes) {
  DPT_TRY(dpt_vk_fence_wait(be, f));
  memcpy(vk_fenced_at(f, offset), src, bytes);
  dpt_vk_alloc *snap = f->handle;
  if (!snap) return DPT_OK;
  pthread_mutex_lock(&be->lock);
  dpt_status st = vk_fenced_lost(be);
  if (st == DPT_OK)
    st = vk_record_copy(dpt_vk_ctx_of(be), snap, offset - f->offset, f->buf->handle, offset, bytes);
  pthread_mutex_unlock(&be->lock);
  return st;
}

dpt_status dpt_vk_map(dpt_backend *be, dpt_buffer *buf, size_t offset, size_t bytes, void **ptr) {
  (void)bytes; /* the whole block is mapped already */
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  dpt_vk_alloc *al = buf->handle;
  *ptr = NULL;
  if (!ctx->direct) return dpt_vk_leave(be, DPT_OK); /* device-local only: the caller stages */
  /* Coherent memory: once the last batch using the buffer has finished, host reads see the
   * device's writes, and later submissions see the host's. */
  dpt_status st = dpt_vk_wait(ctx, al->last_use);
  if (st == DPT_OK) *ptr = al->block->map + al->offset + offset;
  return dpt_vk_leave(be, st);
}

dpt_status dpt_vk_copy(dpt_backend *be, dpt_buffer *dst, size_t dst_offset, const dpt_buffer *src,
                       size_t src_offset, size_t bytes) {
  DPT_TRY(dpt_vk_enter(be));
  return dpt_vk_leave(be, vk_record_copy(dpt_vk_ctx_of(be), src->handle, src_offset, dst->handle,
                                         dst_offset, bytes));
}

dpt_status dpt_vk_fill_f32(dpt_backend *be, dpt_buffer *dst, size_t offset_elems, size_t count,
                           float value) {
  DPT_TRY(dpt_vk_enter(be));
  dpt_vk_ctx *ctx = dpt_vk_ctx_of(be);
  dpt_vk_alloc *al = dst->handle;
  VkCommandBuffer cmd;
  dpt_status st = dpt_vk_cmd(ctx, &cmd);
  if (st != DPT_OK) return st;
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  /* Offsets and sizes are whole floats, so vkCmdFillBuffer's multiple-of-4 rule holds. */
  vkCmdFillBuffer(cmd, al->block->buffer, al->offset + (VkDeviceSize)offset_elems * 4,
                  (VkDeviceSize)count * 4, bits);
  dpt_vk_touch(ctx, al);
  return dpt_vk_leave(be, DPT_OK);
}
