/* The communicator's public calls: its handle (created by a transport, handed the common
 * set-up: transport.h, dpt_comm_setup), and the collectives' entry points. Each entry
 * point checks its arguments, numbers and describes the collective (an argument this rank
 * rejects is announced to the others, dpt_coll_fail), picks the algorithm, and hands the data
 * to dpt_coll_run with the hello round and the algorithm to run on it. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "collectives/algorithms/algorithms.h"
#include "base/error.h"
#include "base/size.h"
#include "collectives/engine/coll.h"
#include "collectives/common/comm_struct.h"
#include "collectives/transports/backoff.h"
#include "collectives/transports/transport.h"
#include "collectives/api/request.h"
#include "collectives/common/comm_util.h"
#include "collectives/api/comm_options.h"
#include "base/env.h"

/* ---- the handle ------------------------------------------------------------------------------ */

/* The communicator's common part, which a transport's create call sets up through
 * dpt_comm_setup.init: impl is the transport's state, tag_ub the largest usable tag. */
static dpt_status comm_init(dpt_comm *c, const dpt_transport *tp, void *impl, int rank, int size,
                            int tag_ub) {
  c->tp = tp;
  c->impl = impl;
  c->rank = rank;
  c->size = size;
  c->local_rank = rank; /* the MPI transport sets its node's */
  c->tag_ub = tag_ub;
  c->seq = 0;
  c->uid = 0;
  c->eager_bytes = SIZE_MAX; /* the transport lowers it */
  c->recv_reduce = 0;        /* the transport raises it */
  c->hello_flat_max = DPT_HELLO_FLAT_MAX;
  c->hello_msgs = 0;
  c->progress = NULL;
  atomic_init(&c->pending, 0);
  c->nnodes = 1;
  c->node = NULL;
  atomic_init(&c->node_ranks, 0);
  c->stranded = 0;
  c->payload = calloc((size_t)size, sizeof *c->payload);
  if (!c->payload)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "communicator: %d payload pointers", size);
  dpt_status st = dpt_comm_options_init(c, &c->opt);
  if (st == DPT_OK) st = dpt_comm_hello_flat_env(&c->hello_flat_max);
  if (st != DPT_OK) {
    free(c->payload);
    c->payload = NULL;
  }
  return st;
}

/* The transports build the communicator; what they need from this layer is handed down. */
dpt_status dpt_comm_group_member(dpt_comm_group *group, int rank, dpt_comm **out) {
  const dpt_comm_setup up = {comm_init, 0.0};
  return dpt_transport_threads_member(group, rank, &up, out);
}

#ifdef DPT_HAVE_MPI
dpt_status dpt_comm_create_mpi(const void *mpi_comm, dpt_comm **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_comm_create_mpi: out is NULL");
  *out = NULL;
  /* No MPI call while a progress thread may be making one. */
  DPT_TRY(dpt_comm_check_idle_slow(NULL, 1, "dpt_comm_create_mpi"));
  const dpt_comm_setup up = {comm_init, dpt_comm_env_timeout()};
  return dpt_transport_mpi_create(mpi_comm, &up, out);
}
#endif

void dpt_comm_destroy(dpt_comm *c) {
  if (!c) return;
  dpt_progress_destroy(c); /* runs what is queued first */
  /* A serialized transport (MPI) may be in use by another communicator's progress thread. */
  const int serialized = c->tp->serialized;
  if (serialized) dpt_serial_lock();
  dpt_hello_unpost(c);
  if (!c->stranded) { /* else MPI may still write them */
    free(c->hello_buf);
    free(c->slot_buf);
  }
  free(c->payload);
  free(c->node);
  c->tp->destroy(c);
  if (serialized) dpt_serial_unlock();
  free(c);
}

dpt_status dpt_comm_abort(dpt_comm *c, int code) {
  if (!c) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_comm_abort: comm is NULL");
  if (!c->tp->abort)
    return dpt_set_error(DPT_ERR_UNSUPPORTED,
                         "dpt_comm_abort: the %s transport has no job to end (its members are "
                         "threads of this process: return from them)",
                         c->tp->name);
  return c->tp->abort(c, code);
}

void dpt_comm_note_teardown(void) {
  dpt_teardown_note();
}

int dpt_comm_rank(const dpt_comm *c) {
  return c ? c->rank : -1;
}

int dpt_comm_size(const dpt_comm *c) {
  return c ? c->size : 0;
}

int dpt_comm_local_rank(const dpt_comm *c) {
  return c ? c->local_rank : -1;
}

const char *dpt_comm_transport(const dpt_comm *c) {
  return c ? c->tp->name : "";
}

int dpt_comm_nodes(const dpt_comm *c) {
  return c ? c->nnodes : 0;
}

dpt_status dpt_comm_get_paths(const dpt_comm *c, dpt_comm_paths *out) {
  if (!c || !out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_comm_get_paths: NULL argument");
  memset(out, 0, sizeof *out);
  out->nodes = c->nnodes;
  if (c->tp->paths) c->tp->paths(c, out);
  return DPT_OK;
}

int dpt_comm_mpi_launched(void) {
  return dpt_env_get("OMPI_COMM_WORLD_SIZE") || dpt_env_get("PMI_SIZE") || dpt_env_get("PMIX_RANK");
}

dpt_status dpt_comm_check_launch(const dpt_comm *comm) {
  const char *v = dpt_env_get("SLURM_STEP_NUM_TASKS");
  char *end = NULL;
  const long tasks = v ? strtol(v, &end, 10) : 0;
  if (!v || end == v || *end || tasks < 2) return DPT_OK;
  if (comm && dpt_env_get("OMPI_COMM_WORLD_SIZE")) return DPT_OK; /* mpirun's ranks */
  const int world = comm ? comm->size : 1;
  if (tasks == world) return DPT_OK;
  return dpt_set_error(DPT_ERR_MISMATCH,
                       "Slurm started %ld tasks in this step (SLURM_STEP_NUM_TASKS) but MPI "
                       "sees %d rank%s: %s. Start the tasks with MPI's process information "
                       "(srun --mpi=pmix with Open MPI; srun --mpi=list shows what this Slurm "
                       "offers) or with mpirun inside the allocation",
                       tasks, world, world == 1 ? "" : "s",
                       world == 1 ? "every task would train alone and write the same files"
                                  : "the ranks do not match the tasks");
}

#ifndef DPT_HAVE_MPI
int dpt_comm_mpi_compiled(void) {
  return 0;
}

dpt_status dpt_comm_create_mpi(const void *mpi_comm, dpt_comm **out) {
  (void)mpi_comm;
  if (out) *out = NULL;
  return dpt_set_error(DPT_ERR_UNSUPPORTED,
                       "dpt_comm_create_mpi: this dptrain was built without MPI "
                       "(install libopenmpi-dev and configure with -DDPT_WITH_MPI=ON)");
}
#endif

/* ---- argument checks ------------------------------------------------------------------------- */

/* Every collective's first check: also refuses to run while nonblocking requests are pending
 * (request.c; two atomic loads when none are). */
static dpt_status check_comm(const dpt_comm *c, const char *fn) {
  if (!c) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: comm is NULL", fn);
  if (c->stranded)
    return dpt_set_error(DPT_ERR_COMM,
                         "%s: the communicator is unusable: a message of an earlier collective "
                         "could not be taken back from an unreachable rank (end the job: "
                         "dpt_comm_abort)",
                         fn);
  return dpt_comm_check_idle(c, fn);
}

static dpt_status check_dtype(dpt_comm_dtype dtype, const char *fn) {
  if (!dpt_dtype_ok(dtype))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: dtype %d is not a dpt_comm_dtype", fn,
                         (int)dtype);
  return DPT_OK;
}

/* Checks a (buffer, byte offset, bytes) range. */
static dpt_status check_range(const dpt_buffer *buf, size_t offset, size_t bytes, const char *fn) {
  if (!buf) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: buf is NULL", fn);
  size_t end;
  if (!dpt_add_ok(offset, bytes, &end) || end > dpt_buffer_size(buf))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s: bytes [%zu, %zu + %zu) outside the buffer of %zu bytes", fn, offset,
                         offset, bytes, dpt_buffer_size(buf));
  return DPT_OK;
}

/* Checks a (buffer, element offset, count) range; the byte offset and size in *off, *bytes. */
static dpt_status check_elems(const dpt_buffer *buf, size_t offset, size_t count,
                              dpt_comm_dtype dtype, size_t *off, size_t *bytes, const char *fn) {
  *off = *bytes = 0;
  if ((*bytes = dpt_payload_bytes(count, dtype)) == SIZE_MAX)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: count %zu overflows", fn, count);
  if (!dpt_mul_ok(offset, dpt_dtype_size(dtype), off))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: offset %zu overflows", fn, offset);
  return check_range(buf, *off, *bytes, fn);
}

/* ---- all-reduce ------------------------------------------------------------------------------ */

/* The block-wise algorithms, the one the collective picked (its hello header's). */
static dpt_status ring_or_hier(dpt_comm *c, dpt_coll *k, const dpt_ring_args *a,
                               const dpt_sched *hooks) {
  if (k->h.algo == DPT_ALLREDUCE_HIER) return dpt_hier_allreduce(c, a, hooks, k->tag, &k->w);
  return dpt_ring_allreduce(c, a, hooks, k->tag, &k->w);
}

/* The hello round opens the collective when the desync check is on, and carries the vector
 * for an algorithm that reduces the inline payloads. */
static dpt_status allreduce_hello(dpt_comm *c, dpt_coll *k, const dpt_ring_args *a, int *done) {
  const dpt_allreduce_algo algo = (dpt_allreduce_algo)k->h.algo;
  *done = 0;
  if (!c->opt.desync_check && !dpt_allreduce_algo_inline(algo)) return DPT_OK;
  const size_t inl = dpt_allreduce_algo_inline(algo) ? a->count * dpt_dtype_size(a->dtype) : 0;
  return dpt_coll_hello(c, k, a->data, inl, inl, -1);
}

/* Staged blocks: only the block-wise algorithms run on them (dpt_allreduce_buffer's `copy`). */
static dpt_status allreduce_move(dpt_comm *c, dpt_coll *k, const dpt_ring_args *a,
                                 const dpt_sched *hooks) {
  if (hooks) return ring_or_hier(c, k, a, hooks);
  return dpt_allreduce_algo_run(c, (dpt_allreduce_algo)k->h.algo, a->data, a->count, a->dtype,
                                k->tag, &k->w);
}

/* Numbers an all-reduce, picks its algorithm and checks the arguments both entry points
 * share. */
static dpt_status allreduce_begin(dpt_comm *c, dpt_coll *k, size_t count, dpt_comm_dtype dtype,
                                  const char *fn) {
  dpt_coll_begin(c, k, DPT_COLL_ALLREDUCE, count, dtype, dpt_comm_pick_algo(c, count, dtype), 0);
  dpt_status st = check_dtype(dtype, fn);
  if (st == DPT_OK && dpt_payload_bytes(count, dtype) == SIZE_MAX)
    st = dpt_set_error(DPT_ERR_INVALID_ARG, "%s: count %zu overflows", fn, count);
  return st;
}

dpt_status dpt_allreduce_host(dpt_comm *c, void *data, size_t count, dpt_comm_dtype dtype) {
  const char *fn = "dpt_allreduce_host";
  dpt_status st = check_comm(c, fn);
  if (st != DPT_OK) return st;
  dpt_coll k;
  st = allreduce_begin(c, &k, count, dtype, fn);
  if (st == DPT_OK && !data && count > 0)
    st = dpt_set_error(DPT_ERR_INVALID_ARG, "%s: data is NULL with count %zu", fn, count);
  if (st != DPT_OK) return dpt_coll_fail(c, &k, st);
  if (c->size == 1) return DPT_OK;
  const dpt_coll_data d = {.data = data,
                           .args = {NULL, NULL, count, dtype, DPT_RING_BOTH},
                           .hello = allreduce_hello,
                           .move = allreduce_move};
  return dpt_coll_run(c, &k, &d);
}

dpt_status dpt_allreduce_buffer(dpt_comm *c, dpt_buffer *buf, size_t offset, size_t count,
                                dpt_comm_dtype dtype) {
  const char *fn = "dpt_allreduce_buffer";
  dpt_status st = check_comm(c, fn);
  if (st != DPT_OK) return st;
  dpt_coll k;
  st = allreduce_begin(c, &k, count, dtype, fn);
  size_t off_bytes = 0, bytes = 0;
  if (st == DPT_OK) st = check_elems(buf, offset, count, dtype, &off_bytes, &bytes, fn);
  if (st != DPT_OK) return dpt_coll_fail(c, &k, st);
  if (c->size == 1) return DPT_OK;
  /* The small-message algorithms work on one host copy (small by choice; forced on a large
   * buffer, this is the "one host copy of the data" of the bound). */
  const dpt_coll_data d = {.buf = buf,
                           .offset = off_bytes,
                           .bytes = bytes,
                           .esize = dpt_dtype_size(dtype),
                           .download = 1,
                           .upload = 1,
                           .map = 1,
                           .copy = k.h.algo != DPT_ALLREDUCE_RING && k.h.algo != DPT_ALLREDUCE_HIER,
                           .args = {NULL, NULL, count, dtype, DPT_RING_BOTH},
                           .hello = allreduce_hello,
                           .move = allreduce_move};
  return dpt_coll_run(c, &k, &d);
}

/* ---- reduce-scatter, all-gather of shards: the ring's (or the hierarchical) halves ---------- */

static dpt_status ring_phase_hello(dpt_comm *c, dpt_coll *k, const dpt_ring_args *a, int *done) {
  *done = c->size == 1 || a->count == 0;
  if (c->size > 1 && c->opt.desync_check) return dpt_coll_hello(c, k, NULL, 0, 0, -1);
  return DPT_OK;
}

static dpt_status ring_phase_move(dpt_comm *c, dpt_coll *k, const dpt_ring_args *a,
                                  const dpt_sched *hooks) {
  return ring_or_hier(c, k, a, hooks);
}

/* One phase of the ring on host data, or on a buffer range when on_buf. */
static dpt_status ring_phase(dpt_comm *c, void *data, int on_buf, dpt_buffer *buf, size_t offset,
                             size_t count, dpt_comm_dtype dtype, dpt_ring_phase phase,
                             const char *fn) {
  dpt_status st = check_comm(c, fn);
  if (st != DPT_OK) return st;
  dpt_coll k;
  dpt_coll_begin(
      c, &k, phase == DPT_RING_REDUCE_SCATTER ? DPT_COLL_REDUCE_SCATTER : DPT_COLL_ALLGATHER_SHARDS,
      count, dtype, dpt_comm_hier_sharded(c) ? DPT_ALLREDUCE_HIER : DPT_ALLREDUCE_RING, 0);
  st = check_dtype(dtype, fn);
  size_t bytes = 0, off_bytes = 0;
  if (st == DPT_OK && on_buf)
    st = check_elems(buf, offset, count, dtype, &off_bytes, &bytes, fn);
  else if (st == DPT_OK && (bytes = dpt_payload_bytes(count, dtype)) == SIZE_MAX)
    st = dpt_set_error(DPT_ERR_INVALID_ARG, "%s: count %zu overflows", fn, count);
  else if (st == DPT_OK && !data && count > 0)
    st = dpt_set_error(DPT_ERR_INVALID_ARG, "%s: data is NULL with count %zu", fn, count);
  if (st != DPT_OK) return dpt_coll_fail(c, &k, st);
  const dpt_coll_data d = {.data = data,
                           .buf = on_buf ? buf : NULL,
                           .offset = off_bytes,
                           .bytes = bytes,
                           .esize = dpt_dtype_size(dtype),
                           .download = 1,
                           .upload = 1,
                           .map = 1,
                           .args = {NULL, NULL, count, dtype, phase},
                           .hello = ring_phase_hello,
                           .move = ring_phase_move};
  return dpt_coll_run(c, &k, &d);
}

dpt_status dpt_reduce_scatter_host(dpt_comm *c, void *data, size_t count, dpt_comm_dtype dtype) {
  return ring_phase(c, data, 0, NULL, 0, count, dtype, DPT_RING_REDUCE_SCATTER,
                    "dpt_reduce_scatter_host");
}

dpt_status dpt_reduce_scatter_buffer(dpt_comm *c, dpt_buffer *buf, size_t offset, size_t count,
                                     dpt_comm_dtype dtype) {
  return ring_phase(c, NULL, 1, buf, offset, count, dtype, DPT_RING_REDUCE_SCATTER,
                    "dpt_reduce_scatter_buffer");
}

dpt_status dpt_allgather_shards_host(dpt_comm *c, void *data, size_t count, dpt_comm_dtype dtype) {
  return ring_phase(c, data, 0, NULL, 0, count, dtype, DPT_RING_ALLGATHER,
                    "dpt_allgather_shards_host");
}

dpt_status dpt_allgather_shards_buffer(dpt_comm *c, dpt_buffer *buf, size_t offset, size_t count,
                                       dpt_comm_dtype dtype) {
  return ring_phase(c, NULL, 1, buf, offset, count, dtype, DPT_RING_ALLGATHER,
                    "dpt_allgather_shards_buffer");
}

/* ---- nonblocking forms: the progress thread runs the entry points above (request.c) -------- */

dpt_status dpt_allreduce_buffer_start(dpt_comm *c, dpt_buffer *buf, size_t offset, size_t count,
                                      dpt_comm_dtype dtype, dpt_request **out) {
  return dpt_request_start(c, "dpt_allreduce_buffer_start", dpt_allreduce_buffer, buf, offset,
                           count, dtype, out);
}

dpt_status dpt_reduce_scatter_buffer_start(dpt_comm *c, dpt_buffer *buf, size_t offset,
                                           size_t count, dpt_comm_dtype dtype, dpt_request **out) {
  return dpt_request_start(c, "dpt_reduce_scatter_buffer_start", dpt_reduce_scatter_buffer, buf,
                           offset, count, dtype, out);
}

dpt_status dpt_allgather_shards_buffer_start(dpt_comm *c, dpt_buffer *buf, size_t offset,
                                             size_t count, dpt_comm_dtype dtype,
                                             dpt_request **out) {
  return dpt_request_start(c, "dpt_allgather_shards_buffer_start", dpt_allgather_shards_buffer, buf,
                           offset, count, dtype, out);
}

/* ---- broadcast ------------------------------------------------------------------------------- */

static int broadcast_inline(const dpt_comm *c, size_t bytes) {
  return bytes > 0 && bytes <= dpt_comm_inline_cap(c->size);
}

/* Small: the root's data rides in its hello message, and the broadcast is complete. */
static dpt_status broadcast_hello(dpt_comm *c, dpt_coll *k, const dpt_ring_args *a, int *done) {
  const int root = k->h.root, is_root = c->rank == root;
  const size_t bytes = a->count;
  const int inline_ok = broadcast_inline(c, bytes);
  *done = inline_ok;
  if (!c->opt.desync_check && !inline_ok) return DPT_OK;
  dpt_status st =
      dpt_coll_hello(c, k, a->data, is_root && inline_ok ? bytes : 0, inline_ok ? bytes : 0, root);
  if (st == DPT_OK && inline_ok && !is_root) memcpy(a->data, c->payload[root], bytes);
  return st;
}

static dpt_status broadcast_move(dpt_comm *c, dpt_coll *k, const dpt_ring_args *a,
                                 const dpt_sched *hooks) {
  return dpt_chain_broadcast(c, a, hooks, k->h.root, k->tag, &k->w);
}

/* Broadcast of host data, or of a buffer range when buf is set. */
static dpt_status broadcast(dpt_comm *c, void *data, dpt_buffer *buf, size_t offset, size_t bytes,
                            int root, const char *fn) {
  dpt_status st = check_comm(c, fn);
  if (st != DPT_OK) return st;
  dpt_coll k;
  dpt_coll_begin(c, &k, DPT_COLL_BROADCAST, bytes, DPT_COMM_F32, DPT_ALLREDUCE_AUTO, root);
  if (root < 0 || root >= c->size)
    st = dpt_set_error(DPT_ERR_INVALID_ARG, "%s: root %d outside [0, %d)", fn, root, c->size);
  else if (buf)
    st = check_range(buf, offset, bytes, fn);
  else if (!data && bytes > 0)
    st = dpt_set_error(DPT_ERR_INVALID_ARG, "%s: data is NULL with %zu bytes", fn, bytes);
  if (st != DPT_OK) return dpt_coll_fail(c, &k, st);
  if (c->size == 1) return DPT_OK;
  const int inline_ok = broadcast_inline(c, bytes);
  /* Inline: one host copy (the root's data for its hello message, the others' destination);
   * above, blocks read at the root and written elsewhere. */
  const dpt_coll_data d = {.data = data,
                           .buf = buf,
                           .offset = offset,
                           .bytes = bytes,
                           .esize = 1,
                           .download = c->rank == root,
                           .upload = c->rank != root,
                           .map = !inline_ok,
                           .copy = inline_ok,
                           .args = {NULL, NULL, bytes, DPT_COMM_F32, DPT_RING_BOTH},
                           .hello = broadcast_hello,
                           .move = broadcast_move};
  return dpt_coll_run(c, &k, &d);
}

dpt_status dpt_broadcast_host(dpt_comm *c, void *data, size_t bytes, int root) {
  return broadcast(c, data, NULL, 0, bytes, root, "dpt_broadcast_host");
}

dpt_status dpt_broadcast_buffer(dpt_comm *c, dpt_buffer *buf, size_t offset, size_t bytes,
                                int root) {
  return broadcast(c, NULL, buf, offset, bytes, root, "dpt_broadcast_buffer");
}

/* ---- allgather, barrier: host data only ------------------------------------------------------ */

dpt_status dpt_allgather_host(dpt_comm *c, const void *send, size_t bytes, void *recv) {
  const char *fn = "dpt_allgather_host";
  dpt_status st = check_comm(c, fn);
  if (st != DPT_OK) return st;
  dpt_coll k;
  dpt_coll_begin(c, &k, DPT_COLL_ALLGATHER, bytes, DPT_COMM_F32, DPT_ALLREDUCE_AUTO, 0);
  size_t total = 0;
  if (!dpt_mul_ok(bytes, (size_t)c->size, &total))
    st = dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %zu bytes x %d ranks overflows", fn, bytes,
                       c->size);
  else if (bytes > 0 && (!send || !recv))
    st = dpt_set_error(DPT_ERR_INVALID_ARG, "%s: send or recv is NULL", fn);
  else if (bytes > 0 && (const unsigned char *)send < (unsigned char *)recv + total &&
           (unsigned char *)recv < (const unsigned char *)send + bytes)
    st = dpt_set_error(DPT_ERR_INVALID_ARG, "%s: send and recv overlap", fn);
  if (st != DPT_OK) return dpt_coll_fail(c, &k, st);
  if (bytes > 0) memcpy((unsigned char *)recv + (size_t)c->rank * bytes, send, bytes);
  if (c->size == 1) return DPT_OK;
  const int inline_ok = bytes <= dpt_comm_inline_cap(c->size);
  if (c->opt.desync_check || inline_ok) {
    st = dpt_coll_hello(c, &k, send, inline_ok ? bytes : 0, inline_ok ? bytes : 0, -1);
    if (st == DPT_OK && inline_ok && bytes > 0)
      for (int r = 0; r < c->size; ++r)
        if (r != c->rank) memcpy((unsigned char *)recv + (size_t)r * bytes, c->payload[r], bytes);
    if (st != DPT_OK || inline_ok) return st;
  }
  return dpt_ring_allgather(c, recv, bytes, k.tag, &k.w);
}

dpt_status dpt_barrier(dpt_comm *c) {
  dpt_status st = check_comm(c, "dpt_barrier");
  if (st != DPT_OK) return st;
  dpt_coll k;
  dpt_coll_begin(c, &k, DPT_COLL_BARRIER, 0, DPT_COMM_F32, DPT_ALLREDUCE_AUTO, 0);
  if (c->size == 1) return DPT_OK;
  return dpt_coll_hello(c, &k, NULL, 0, 0, -1);
}
