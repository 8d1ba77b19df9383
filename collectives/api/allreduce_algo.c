/* The all-reduce algorithm choice: which algorithm AUTO (or a forced one) runs for a payload,
 * whether this communicator can run it, the call into it, and the shard layout that follows
 * from the choice (dpt_comm_shard: the ring's or the hierarchical one). Adding an algorithm: its
 * own file, its entry in DPT_ALLREDUCE_ALGO_MAP (comm.h), and the three functions below. */
#include "collectives/algorithms/algorithms.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/size.h"
#include "collectives/common/comm_struct.h"
#include "collectives/transports/transport.h"
#include "collectives/common/reduce.h"
#include "collectives/common/comm_util.h"

dpt_allreduce_algo dpt_comm_pick_algo(const dpt_comm *c, size_t count, dpt_comm_dtype dtype) {
  if (!c) return DPT_ALLREDUCE_RING;
  const size_t bytes = dpt_payload_bytes(count, dtype);
  const size_t cap = dpt_comm_inline_cap(c->size);
  dpt_allreduce_algo a = c->opt.algo;
  if (a == DPT_ALLREDUCE_AUTO) {
    /* direct sends (N-1) payloads per rank: the limit bounds their sum. */
    size_t sent;
    if (bytes <= cap && dpt_mul_ok(bytes, (size_t)(c->size > 1 ? c->size - 1 : 1), &sent) &&
        sent <= c->opt.direct_max_bytes)
      return DPT_ALLREDUCE_DIRECT;
    if (c->tp->native_allreduce && bytes <= c->opt.mpi_max_bytes) return DPT_ALLREDUCE_MPI;
    if (bytes <= c->opt.rd_max_bytes) return DPT_ALLREDUCE_RD;
    /* Across nodes MPI's own all-reduce next, and at every size where hier does not apply: it
     * was level with or faster than the flat ring over MPI point-to-point (docs/performance.md). */
    if (c->nnodes > 1 && c->tp->native_allreduce &&
        (bytes <= c->opt.mpi_nodes_max_bytes || !dpt_hier_applies(c)))
      return DPT_ALLREDUCE_MPI;
    return dpt_hier_applies(c) ? DPT_ALLREDUCE_HIER : DPT_ALLREDUCE_RING;
  }
  /* `hier` on one node, or on nodes of unequal sizes: the flat ring. */
  if (a == DPT_ALLREDUCE_HIER && !dpt_hier_applies(c)) return DPT_ALLREDUCE_RING;
  /* `direct` carries the vector in the hello message: larger ones use rd. */
  if (a == DPT_ALLREDUCE_DIRECT && bytes > cap) return DPT_ALLREDUCE_RD;
  return a;
}

dpt_status dpt_allreduce_algo_check(const dpt_comm *c, dpt_allreduce_algo algo, const char *fn) {
  if (algo == DPT_ALLREDUCE_MPI && (!c || !c->tp->native_allreduce))
    return dpt_set_error(DPT_ERR_UNSUPPORTED,
                         "%s: algorithm 'mpi' needs the MPI transport (this one is %s)", fn,
                         c ? c->tp->name : "?");
  return DPT_OK;
}

int dpt_comm_hier_sharded(const dpt_comm *c) {
  return (c->opt.algo == DPT_ALLREDUCE_AUTO || c->opt.algo == DPT_ALLREDUCE_HIER) &&
         dpt_hier_applies(c);
}

size_t dpt_comm_shard(const dpt_comm *c, size_t count, dpt_comm_dtype dtype, int rank,
                      dpt_range *out, size_t max) {
  if (!c || rank < 0 || rank >= c->size || !dpt_dtype_ok(dtype)) return 0;
  if (c->size == 1) {
    if (count > 0 && max > 0) out[0] = (dpt_range){0, count};
    return count > 0;
  }
  if (dpt_comm_hier_sharded(c)) return dpt_hier_shard(c, count, dtype, rank, out, max);
  return dpt_ring_shard(c, count, dtype, rank, out, max);
}

int dpt_allreduce_algo_inline(dpt_allreduce_algo algo) {
  return algo == DPT_ALLREDUCE_DIRECT;
}

dpt_status dpt_allreduce_algo_run(dpt_comm *c, dpt_allreduce_algo algo, void *data, size_t count,
                                  dpt_comm_dtype dtype, int tag, dpt_what *what) {
  switch (algo) {
  case DPT_ALLREDUCE_DIRECT:
    dpt_direct_sum(c, data, c->payload, count, dtype);
    return DPT_OK;
  case DPT_ALLREDUCE_RD:
    return dpt_rd_allreduce(c, data, count, dtype, tag, what);
  case DPT_ALLREDUCE_MPI: {
    if (count == 0) return DPT_OK;
    /* With the desync check the hello round has just seen every rank arrive, so the
     * transport may use its blocking call. */
    dpt_status st = c->tp->native_allreduce(c, data, count, dtype, c->opt.desync_check,
                                            dpt_now() + c->opt.timeout_s);
    if (st == DPT_ERR_TIMEOUT)
      return dpt_error_context(st,
                               "%s: waiting for ranks that did not enter MPI_Iallreduce (without "
                               "the desync check, which ones is not known)",
                               dpt_what_str(what));
    return st == DPT_OK ? st : dpt_error_context(st, "%s", dpt_what_str(what));
  }
  case DPT_ALLREDUCE_HIER: {
    dpt_ring_args a = {data, NULL, count, dtype, DPT_RING_BOTH};
    return dpt_hier_allreduce(c, &a, NULL, tag, what);
  }
  default: {
    dpt_ring_args a = {data, NULL, count, dtype, DPT_RING_BOTH};
    return dpt_ring_allreduce(c, &a, NULL, tag, what);
  }
  }
}
