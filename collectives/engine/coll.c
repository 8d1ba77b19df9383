/* One collective in progress: its number and description, the hello round that opens it,
 * the announcement of a local failure, and the one way every entry point reaches its data:
 *
 *   host data ---------------------------------------------> hello -> move (host)
 *   device range -- mapped (staging AUTO, host-addressable) -> hello -> move (host) -> unmap
 *                -- one host copy (small algorithms) ------> hello -> move (host) -> upload
 *                -- staged ----------------------------------> hello -> move (staged blocks)
 *
 * Mapping and copying happen before the hello round, so that a failure there is announced to
 * the other ranks (dpt_coll_fail) instead of leaving them waiting for this rank's data.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/engine/coll.h"
#include "backends/backend_impl.h"
#include "base/error.h"
#include "collectives/common/comm_struct.h"
#include "collectives/common/running.h"
#include "collectives/common/comm_util.h"
#include "collectives/engine/staging.h"

void dpt_coll_begin(dpt_comm *c, dpt_coll *k, uint32_t op, uint64_t count, dpt_comm_dtype dtype,
                    dpt_allreduce_algo algo, int root) {
  memset(&k->h, 0, sizeof k->h);
  k->h.magic = DPT_HELLO_MAGIC;
  k->h.op = op;
  k->h.seq = c->seq++;
  k->h.count = count;
  k->h.dtype = (uint32_t)dtype;
  k->h.algo = (uint32_t)algo;
  k->h.root = root;
  k->h.piece = c->opt.piece_bytes;
  k->h.block = c->opt.block_bytes;
  k->h.uid = c->uid;
  k->tag = dpt_comm_data_tag(c, k->h.seq);
  k->w = dpt_hello_what(&k->h);
}

dpt_status dpt_coll_hello(dpt_comm *c, dpt_coll *k, const void *data, size_t payload, size_t expect,
                          int expect_root) {
  k->h.payload = payload;
  return dpt_hello_round(c, &k->h, data, expect, expect_root, &k->w, c->payload);
}

dpt_status dpt_coll_fail(dpt_comm *c, dpt_coll *k, dpt_status st) {
  if (c->size == 1 || !c->opt.desync_check) return st;
  char own[1024];
  snprintf(own, sizeof own, "%s", dpt_last_error());
  k->h.flags = DPT_HELLO_FAILED;
  dpt_coll_hello(c, k, NULL, 0, 0, -1);
  return dpt_set_error(st, "%s", own);
}

/* A zero-copy host view of the device range when staging is AUTO and the backend's memory is
 * host-addressable (CPU backend, CPU drivers, integrated GPUs); *ptr = NULL otherwise. In a
 * nonblocking request only on the CPU backend: the caller's thread may launch kernels on the
 * buffer meanwhile, which OpenCL and Vulkan forbid while it is mapped (request.c). */
static dpt_status map_range(const dpt_comm *c, const dpt_coll_data *d, void **ptr) {
  *ptr = NULL;
  if (c->opt.staging != DPT_STAGING_AUTO) return DPT_OK;
  if (dpt_request_running(c) && dpt_backend_get_kind(dpt_buffer_backend(d->buf)) != DPT_BACKEND_CPU)
    return DPT_OK;
  return dpt_buffer_map_host(d->buf, d->offset, d->bytes, ptr);
}

/* One host copy of the device range, filled when this rank reads it. */
static dpt_status copy_range(const dpt_comm *c, const dpt_coll_data *d, dpt_coll *k, void **out) {
  void *tmp = malloc(d->bytes);
  dpt_status st = DPT_OK;
  if (!tmp)
    st = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu host bytes",
                       dpt_what_str(&k->w), d->bytes);
  else if (d->download)
    st = dpt_buffer_download_fenced(d->buf, d->offset, tmp, d->bytes, dpt_request_fence(c));
  if (st != DPT_OK) {
    free(tmp);
    tmp = NULL;
  }
  *out = tmp;
  return st;
}

/* The move over the staged device range: the stage's hooks drive the transfers. */
static dpt_status move_staged(dpt_comm *c, dpt_coll *k, const dpt_coll_data *d,
                              const dpt_ring_args *args) {
  dpt_stage *stage = NULL;
  const size_t block = dpt_block_elems(c, d->esize) * d->esize;
  dpt_status st =
      dpt_stage_create(c, d->buf, d->offset, d->bytes, block, d->download, d->upload, &stage);
  if (st != DPT_OK) return dpt_error_context(st, "%s", dpt_what_str(&k->w));
  dpt_sched hooks;
  dpt_stage_hooks(stage, &hooks);
  dpt_ring_args a = *args;
  a.data = NULL;
  a.block_ptr = dpt_stage_block_ptr;
  st = d->move(c, k, &a, &hooks);
  dpt_status st2 = dpt_stage_finish(stage, st == DPT_OK);
  if (st != DPT_OK) return st;
  return st2 != DPT_OK ? dpt_error_context(st2, "%s", dpt_what_str(&k->w)) : DPT_OK;
}

dpt_status dpt_coll_run(dpt_comm *c, dpt_coll *k, const dpt_coll_data *d) {
  void *mapped = NULL, *copy = NULL;
  dpt_status st = DPT_OK;
  const int device = d->buf && d->bytes > 0; /* an empty range needs no host memory */
  if (device && d->map && (st = map_range(c, d, &mapped)) != DPT_OK) return dpt_coll_fail(c, k, st);
  if (device && !mapped && d->copy && (st = copy_range(c, d, k, &copy)) != DPT_OK)
    return dpt_coll_fail(c, k, st);
  dpt_ring_args a = d->args;
  a.data = device ? (mapped ? mapped : copy) : d->data;
  a.block_ptr = NULL;
  int done = 0;
  st = d->hello(c, k, &a, &done);
  if (st == DPT_OK && !done)
    st = device && !a.data ? move_staged(c, k, d, &a) : d->move(c, k, &a, NULL);
  if (copy) {
    if (st == DPT_OK && d->upload)
      st = dpt_buffer_upload_fenced(d->buf, d->offset, copy, d->bytes, dpt_request_fence(c));
    free(copy);
  }
  if (mapped) {
    dpt_status st2 = dpt_buffer_unmap_host(d->buf, mapped);
    if (st == DPT_OK) st = st2;
  }
  return st;
}
