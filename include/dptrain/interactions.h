/* dptrain: user-interaction data for recommendation models (DLRM-style): binary shard files,
 * the reader that gives each rank its own shards, and the fixed-length epoch over unequal
 * shards. docs/recommendation.md is the guide; shards are written by `dptrain data`.
 *
 * A record: a label (0 or 1), num_dense float32 dense features, num_sparse int32 categorical
 * ids, id j of a record below table_sizes[j] (already hashed into its table).
 *
 * A shard file (all integers and floats little-endian):
 *   offset 0   8 bytes   magic "DPTRECS\0"
 *   offset 8   u32       version (1)
 *   offset 12  u32       num_dense
 *   offset 16  u32       num_sparse (1 .. DPT_SHARD_MAX_SPARSE)
 *   offset 20  u32       reserved, 0
 *   offset 24  u64       num_records
 *   offset 32  u32       CRC32 (zlib) of the payload
 *   offset 36  u32       CRC32 of bytes 0..35 and the table sizes (the header's own check)
 *   offset 40  u64[num_sparse]  table sizes (each >= 1, at most 2^31)
 *   then the payload: num_records records of DPT_SHARD_RECORD_BYTES(num_dense, num_sparse)
 *   bytes each, packed: u8 label, f32 dense[num_dense], i32 sparse[num_sparse].
 * The file's size must be exactly the header's plus the payload's; anything else (a truncated
 * copy, a bad CRC, a label other than 0/1, an id outside its table) is DPT_ERR_BAD_FORMAT
 * naming the file (and the record where one is to blame).
 *
 * Shards and ranks: a pattern (a glob(3) pattern such as "DIR/shard-*.bin") names the shard
 * files; they are sorted bytewise by path and numbered 0 .. S-1. Rank r of R takes shards
 * r, r + R, r + 2R, ... (shard s belongs to rank s mod R), so every shard is read by exactly
 * one rank. With fewer files than ranks (S < R, e.g. one validation file) the files are split
 * by records instead: the records of every shard in shard order, T of them, are cut into R
 * contiguous ranges, rank r taking floor(T / R) records, one more when r < T mod R, so every
 * record is read (and scored) by exactly one rank; each rank reads the files its range touches
 * whole, to check their CRCs, and keeps its range. T < R (a rank without a record) and a
 * pattern matching nothing are errors naming the pattern. Every rank reads every shard's
 * header (cheap: 40 + 8 * num_sparse bytes) but only its own shards' records.
 *
 * The epoch over unequal shards (no communication, every rank agrees):
 *   total   = the sum of every shard's num_records (from the headers)
 *   steps   = floor(total / global_batch)                 global steps per epoch
 *   b_r     = dpt_batch_split(global_batch, R, r)'s count  rank r's local batch
 *   order_r = a Fisher-Yates permutation of rank r's n_r local records, from the library's
 *             generator keyed by (seed, epoch, r)
 *   step k, slot j (0 <= j < b_r): local record order_r[(k * b_r + j) mod n_r]
 * A rank with fewer records than its share wraps around its order (some of its records appear
 * twice in the epoch); a rank with more sees only the first steps * b_r of its order (the
 * rest wait for a later epoch's permutation). Every rank runs the same number of steps.
 */
#ifndef DPTRAIN_INTERACTIONS_H
#define DPTRAIN_INTERACTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DPT_SHARD_MAGIC        "DPTRECS"
#define DPT_SHARD_VERSION      1
#define DPT_SHARD_MAX_SPARSE   1024
#define DPT_SHARD_MAX_DENSE    1024
#define DPT_SHARD_MAX_TABLE    (UINT64_C(1) << 31)
#define DPT_SHARD_HEADER_FIXED 40
#define DPT_SHARD_RECORD_BYTES(num_dense, num_sparse)                                              \
  (1 + 4 * (size_t)(num_dense) + 4 * (size_t)(num_sparse))

/* A shard's header. */
typedef struct dpt_shard_header {
  uint32_t num_dense, num_sparse;
  uint64_t num_records;
  uint32_t payload_crc;
  uint64_t table_sizes[DPT_SHARD_MAX_SPARSE];
} dpt_shard_header;

/* Reads and checks a shard's header (magic, version, counts, the header's CRC, the file's size
 * against the counts) without reading the payload. DPT_ERR_IO (missing, unreadable) or
 * DPT_ERR_BAD_FORMAT naming the path. */
DPT_API dpt_status dpt_shard_read_header(const char *path, dpt_shard_header *out);

/* ---- reading this rank's shards ------------------------------------------------------------- */

typedef struct dpt_interactions dpt_interactions;
struct dpt_comm; /* dptrain/comm.h */

/* Expands the pattern, reads every shard's header (all must agree on num_dense, num_sparse and
 * the table sizes), and loads the records of rank `rank`'s shards (of `world` ranks, see the
 * top of this header) into memory, each CRC and record checked. Local record i counts through
 * the rank's shards (or its record range) in shard order. Errors: DPT_ERR_INVALID_ARG (no match
 * or fewer records than ranks, naming the pattern; bad rank/world), DPT_ERR_IO, DPT_ERR_BAD_FORMAT
 * (naming the file), DPT_ERR_OUT_OF_MEMORY. *out is NULL on failure. */
DPT_API dpt_status dpt_interactions_open(const char *pattern, int rank, int world,
                                         dpt_interactions **out);

/* Node-local shards: each rank sees only its own node's shard files (the pattern is expanded
 * on each rank; docs/recommendation.md, "Shards on each node"). Collective over comm: ranks
 * that see the same files (the same headers: counts and CRCs) share them, the k-th such rank
 * taking the k-th, (k + n)-th, ... of them (n ranks share; with fewer files than sharing
 * ranks, the k-th of n record ranges as above); the epoch's total is the sum over ranks, and
 * the fingerprint covers every rank's shards in rank order. The rank and world are comm's. A
 * rank that cannot read or load its shards makes every rank fail (its own message there, the
 * others naming it); so do layouts that differ. dpt_interactions_num_shards, _shard_path and
 * _shard_records then describe the files this rank sees, and dpt_interactions_local_shard indexes
 * among them. */
DPT_API dpt_status dpt_interactions_open_node(const char *pattern, struct dpt_comm *comm,
                                              dpt_interactions **out);

/* Frees; NULL does nothing. */
DPT_API void dpt_interactions_destroy(dpt_interactions *d);

DPT_API uint32_t dpt_interactions_num_dense(const dpt_interactions *d);
DPT_API uint32_t dpt_interactions_num_sparse(const dpt_interactions *d);
/* [num_sparse] table sizes (borrowed). */
DPT_API const uint64_t *dpt_interactions_table_sizes(const dpt_interactions *d);

/* Shards matched by the pattern (all ranks), and this rank's. */
DPT_API size_t dpt_interactions_num_shards(const dpt_interactions *d);
DPT_API size_t dpt_interactions_local_shards(const dpt_interactions *d);
/* The path of shard s (0 <= s < num_shards; NULL otherwise) and its record count. */
DPT_API const char *dpt_interactions_shard_path(const dpt_interactions *d, size_t s);
DPT_API uint64_t dpt_interactions_shard_records(const dpt_interactions *d, size_t s);
/* The index of this rank's local shard i (rank + i * world; with fewer files than ranks, the
 * i-th file its record range touches; dpt_interactions_open_node: among the files this rank
 * sees). */
DPT_API size_t dpt_interactions_local_shard(const dpt_interactions *d, size_t i);

/* The rank and world the reader was opened with (-1 and 0 for NULL). */
DPT_API int dpt_interactions_rank(const dpt_interactions *d);
DPT_API int dpt_interactions_world(const dpt_interactions *d);

/* A 64-bit fingerprint of every shard's header (the layout, then each shard's record count and
 * payload CRC32 in shard order): the same on every rank, without reading a payload, and
 * different for other data (dpt_train's run terms: a resume on other shards is refused). */
DPT_API uint64_t dpt_interactions_fingerprint(const dpt_interactions *d);

/* Records rank `rank` holds (its shards'); 0 out of range. */
DPT_API uint64_t dpt_interactions_rank_records(const dpt_interactions *d, int rank);

/* Records of every shard (from the headers) and of this rank's shards. */
DPT_API uint64_t dpt_interactions_total_records(const dpt_interactions *d);
DPT_API size_t dpt_interactions_local_records(const dpt_interactions *d);

/* Local record i's fields (borrowed; i < local_records): its num_dense floats, its
 * num_sparse ids, its label (0 or 1); all local labels as one array. */
DPT_API const float *dpt_interactions_dense(const dpt_interactions *d, size_t i);
DPT_API const int32_t *dpt_interactions_sparse(const dpt_interactions *d, size_t i);
DPT_API float dpt_interactions_label(const dpt_interactions *d, size_t i);
DPT_API const uint8_t *dpt_interactions_labels(const dpt_interactions *d);

/* Copies n local records by index into caller arrays: dense [n, num_dense], sparse
 * [n, num_sparse], labels [n] (any may be NULL to skip). DPT_ERR_INVALID_ARG naming an index
 * out of range. */
DPT_API dpt_status dpt_interactions_gather(const dpt_interactions *d, const uint64_t *idx, size_t n,
                                           float *dense, int32_t *sparse, float *labels);

/* ---- the fixed-length epoch (see the top of this header) ------------------------------------ */

/* floor(total_records / global_batch): the same on every rank. 0 when global_batch is 0. */
DPT_API uint64_t dpt_interactions_steps(const dpt_interactions *d, size_t global_batch);

/* This rank's local batch at global_batch (dpt_batch_split over the world). */
DPT_API size_t dpt_interactions_local_batch(const dpt_interactions *d, size_t global_batch);

/* The local record indices of step `step` of `epoch`: local_batch entries into idx.
 * DPT_ERR_INVALID_ARG when step >= steps or the rank holds no record. The epoch's order is
 * computed once and cached (one thread at a time per dpt_interactions). */
DPT_API dpt_status dpt_interactions_step_indices(dpt_interactions *d, uint64_t seed, uint64_t epoch,
                                                 size_t global_batch, uint64_t step, uint64_t *idx);

#ifdef __cplusplus
}
#endif

#endif
