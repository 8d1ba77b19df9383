/* Interaction shards made for `dptrain data`, the benchmarks and the tests: the shard writer
 * (shard_writer.c), Criteo's text layout converted to shards (criteo.c) and synthetic
 * interactions with planted factors (synth.c). The library only reads shards
 * (dptrain/interactions.h holds the format). */
#ifndef DPTRAIN_TOOLS_PREP_SHARDS_H
#define DPTRAIN_TOOLS_PREP_SHARDS_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/interactions.h"

/* ---- writing a shard ------------------------------------------------------------------------ */

typedef struct dpt_shard_writer dpt_shard_writer;

/* Starts a shard at path (written to "path.tmp", renamed on close). table_sizes has
 * num_sparse entries. DPT_ERR_INVALID_ARG for bad counts or sizes, DPT_ERR_IO. */
dpt_status dpt_shard_writer_open(const char *path, uint32_t num_dense, uint32_t num_sparse,
                                 const uint64_t *table_sizes, dpt_shard_writer **out);

/* Appends a record. label must be 0 or 1 and sparse[j] in [0, table_sizes[j]), else
 * DPT_ERR_INVALID_ARG (nothing written). dense may be NULL when num_dense is 0. */
dpt_status dpt_shard_writer_add(dpt_shard_writer *w, float label, const float *dense,
                                const int32_t *sparse);

/* Records appended so far. */
uint64_t dpt_shard_writer_count(const dpt_shard_writer *w);

/* Writes the header (count and CRC), closes, renames into place and frees. The writer is freed
 * even on failure (and the temporary file removed). NULL is DPT_OK. */
dpt_status dpt_shard_writer_close(dpt_shard_writer *w);

/* Drops the shard: removes the temporary file and frees. NULL does nothing. */
void dpt_shard_writer_abort(dpt_shard_writer *w);

/* ---- Criteo's text layout ------------------------------------------------------------------- */

/* The id of a categorical value (its bytes as written, e.g. "68fd1e64") in a table of
 * table_size >= 2 ids: an empty value is id 0 (reserved for "missing"), any other value
 * 1 + (FNV-1a 64 of its bytes) mod (table_size - 1). */
int32_t dpt_criteo_hash(const char *value, size_t len, uint64_t table_size);

/* A dense Criteo value x (an integer count, possibly negative) as DLRM feeds it:
 * log(1 + x) for x >= 0, 0 for x < 0 (and for an empty field). */
float dpt_criteo_dense(double x);

typedef struct dpt_criteo_options {
  uint32_t num_dense;          /* integer features per line (Criteo: 13) */
  uint32_t num_sparse;         /* categorical features per line (Criteo: 26) */
  const uint64_t *table_sizes; /* [num_sparse], each >= 2 */
  size_t num_shards;           /* output shard files (>= 1) */
  const char *out_dir;         /* created if missing (one level) */
  const char *prefix;          /* file names: out_dir/prefix-00000.bin, ... ("shard" if NULL) */
} dpt_criteo_options;

/* Converts Criteo-layout text files ("-" is stdin; gzip-compressed ones, such as day_0.gz, are
 * read as they are) to shards: each line is
 *   label \t dense_1 .. dense_num_dense \t sparse_1 .. sparse_num_sparse
 * (tab-separated, label 0 or 1, dense fields integers or empty, sparse fields any bytes or
 * empty). Lines go round-robin to the shards: the n-th line read (0-based, over all inputs in
 * order) is record n / num_shards of shard n mod num_shards. A malformed line (too few or too
 * many fields, a label other than 0/1, a non-numeric dense field) is DPT_ERR_BAD_FORMAT
 * "FILE:LINE: what" and no shard is left behind. *records (may be NULL) is the number of
 * lines converted. */
dpt_status dpt_criteo_convert(const char *const *inputs, size_t num_inputs,
                              const dpt_criteo_options *o, uint64_t *records);

/* ---- NumPy arrays --------------------------------------------------------------------------- */

typedef struct dpt_npy_options {
  const char *dense;           /* .npy [N, num_dense] float (or integer); NULL: no dense features */
  const char *sparse;          /* .npy [N, num_sparse] integer ids */
  const char *labels;          /* .npy [N] or [N, 1], each 0 or 1 */
  const uint64_t *table_sizes; /* [num_tables]: one size for every table, or one per column */
  size_t num_tables;
  size_t num_shards;   /* output shard files (1..512) */
  const char *out_dir; /* created if missing (one level) */
  const char *prefix;  /* file names: out_dir/prefix-00000.bin, ... ("shard" if NULL) */
} dpt_npy_options;

/* Converts NumPy arrays, as TorchRec's Criteo preprocessing writes them (day_N_dense.npy
 * float32, day_N_sparse.npy int32, day_N_labels.npy int32 [N, 1]), to shards: dense values as
 * they are (already transformed), id v of column j as v mod table_sizes[j] (Python's modulo:
 * never negative), row n to shard n mod num_shards. Little-endian C-order arrays of bool,
 * integers or floats, .npy versions 1 to 3. Arrays that disagree (rows, a float id, a label
 * other than 0/1, a size that does not match the header's shape) are DPT_ERR_BAD_FORMAT naming
 * the file (and row), and no shard is left behind. *records (may be NULL): rows converted. */
dpt_status dpt_npy_convert(const dpt_npy_options *o, uint64_t *records);

/* ---- synthetic interactions with planted factors -------------------------------------------- */

typedef struct dpt_synth_config {
  uint64_t rows;      /* ids per table (each table the same size) */
  uint32_t tables;    /* sparse features (>= 2) */
  uint32_t dim;       /* latent factors per id (>= 1) */
  uint32_t num_dense; /* dense features (may be 0) */
  double zipf;        /* popularity exponent s > 0: P(rank k) ~ k^-s */
  double signal;      /* standard deviation of the interaction term of the logit */
  double bias;        /* the logit's constant */
  uint64_t seed;
} dpt_synth_config;

/* The defaults: rows 100000, tables 8, dim 4, num_dense 4, zipf 1.05, signal 2, bias -1,
 * seed 0. */
void dpt_synth_default(dpt_synth_config *c);

/* Record i of the synthetic set (docs/recommendation.md has the model): dense [num_dense],
 * sparse [tables], its label (0/1) and its true click probability. Depends on (config, i)
 * alone; O(tables^2 * dim) time, no memory. DPT_ERR_INVALID_ARG for a bad config. */
dpt_status dpt_synth_record(const dpt_synth_config *c, uint64_t i, float *dense, int32_t *sparse,
                            float *label, float *prob);

#endif
