/* dptrain: training data in host memory, the distributed sampler and the batch split.
 *
 * A dpt_dataset holds labelled images as uint8 pixels (row-major, rows x cols per image) and
 * int32 class labels. It is immutable once built, so any number of threads may gather from one
 * dataset at the same time. Batches are converted to float32 only when gathered.
 *
 * How an epoch is cut, identically on every rank and replica (nothing is communicated):
 *
 *   perm = dpt_sampler_permutation(seed, epoch, shuffle, n)        the epoch's order
 *   global batch k (0 <= k < dpt_sampler_num_batches(n, B, keep_last)) takes the samples
 *     perm[k*B, min((k+1)*B, n))                                   (the last may be shorter)
 *   replica r of R takes the slice dpt_batch_split(size of batch k, R, r) of that batch.
 *
 * So every sample is seen exactly once per epoch by exactly one replica (keep_last on; with
 * it off, the n % B samples at the end of the permutation are skipped that epoch).
 */
#ifndef DPTRAIN_DATA_H
#define DPTRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dpt_dataset dpt_dataset;

/* ---- datasets ------------------------------------------------------------------------------ */

/* Loads a pair of IDX files in the (Fashion-)MNIST layout, each plain or gzip-compressed (told
 * apart by content, the gzip magic 1f 8b, not by name):
 *   images: big-endian u32 magic 0x00000803, u32 count, u32 rows, u32 cols, then
 *           count*rows*cols uint8 pixels;
 *   labels: big-endian u32 magic 0x00000801, u32 count, then count uint8 labels.
 * Every label must be below num_classes (10 for MNIST and Fashion-MNIST), num_classes >= 1.
 * Errors, each one message naming the file and the problem: DPT_ERR_IO (cannot open or read,
 * with the system's reason), DPT_ERR_BAD_FORMAT (wrong magic, shown; a zero or overflowing
 * dimension; file length not matching the header, expected and actual byte counts given; a
 * corrupt gzip stream; image and label counts that differ; the first label out of range, with
 * its index and value), DPT_ERR_INVALID_ARG (NULL argument, num_classes out of range),
 * DPT_ERR_OUT_OF_MEMORY.
 * On success *out is a new dataset the caller frees with dpt_dataset_destroy(); on failure
 * *out is NULL. */
DPT_API dpt_status dpt_dataset_load_idx(const char *images_path, const char *labels_path,
                                        int num_classes, dpt_dataset **out);

/* Loads split "train" (train-images-idx3-ubyte, train-labels-idx1-ubyte) or "test"
 * (t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte) from directory `dir`, each file as named or
 * with ".gz" appended (the plain file is preferred when both exist). When neither exists the
 * DPT_ERR_IO message lists the paths tried. Otherwise as dpt_dataset_load_idx(). */
DPT_API dpt_status dpt_dataset_load_dir(const char *dir, const char *split, int num_classes,
                                        dpt_dataset **out);

/* Builds a dataset from host arrays, which are copied (the caller keeps ownership of them).
 *   pixels: [count, rows, cols] uint8, row-major;
 *   labels: [count] int32, each in [0, num_classes).
 * count, rows, cols and num_classes must be positive. DPT_ERR_INVALID_ARG names the first
 * offending argument or label. */
DPT_API dpt_status dpt_dataset_from_memory(const uint8_t *pixels, const int32_t *labels,
                                           size_t count, size_t rows, size_t cols, int num_classes,
                                           dpt_dataset **out);

/* Frees a dataset; NULL does nothing. */
DPT_API void dpt_dataset_destroy(dpt_dataset *ds);

/* Number of samples (0 for NULL). */
DPT_API size_t dpt_dataset_count(const dpt_dataset *ds);
/* Pixels per sample, rows * cols (0 for NULL). */
DPT_API size_t dpt_dataset_dim(const dpt_dataset *ds);
/* Fingerprint of the samples (shape, pixels and labels, with dpt_fingerprint), taken once when
 * the data set was built: the replicas compare it at start-up. 0 for NULL. */
DPT_API uint64_t dpt_dataset_fingerprint(const dpt_dataset *ds);
/* Image height and width in pixels (0 for NULL). */
DPT_API size_t dpt_dataset_rows(const dpt_dataset *ds);
DPT_API size_t dpt_dataset_cols(const dpt_dataset *ds);
/* Number of classes the labels were checked against (0 for NULL). */
DPT_API int dpt_dataset_num_classes(const dpt_dataset *ds);

/* Copies samples out in the given order:
 *   indices: [count] sample indices, each < dpt_dataset_count(ds) (repeats allowed);
 *   x:       [count, dim] float32 written as pixel / 255.0f in [0, 1], or NULL to skip;
 *   labels:  [count] int32 written, or NULL to skip.
 * Every index is checked before anything is written: an index out of range gives
 * DPT_ERR_INVALID_ARG naming its position and value, and leaves x and labels untouched.
 * count 0 does nothing. */
DPT_API dpt_status dpt_dataset_gather(const dpt_dataset *ds, const uint64_t *indices, size_t count,
                                      float *x, int32_t *labels);

/* ---- the sampler and the batch split ------------------------------------------------------ */

/* Writes the epoch's sample order into perm ([n] uint64, caller-owned): with shuffle, a
 * Fisher-Yates shuffle driven by the library's deterministic generator seeded from
 * (seed, epoch), the same on every platform, rank and run; without, the identity 0..n-1.
 * DPT_ERR_INVALID_ARG when perm is NULL and n > 0. */
DPT_API dpt_status dpt_sampler_permutation(uint64_t seed, uint64_t epoch, int shuffle, size_t n,
                                           uint64_t *perm);

/* Global batches per epoch of n samples with global_batch samples each: ceil(n / B) when
 * keep_last (the last batch holds the n % B leftovers), floor(n / B) otherwise. 0 when
 * global_batch is 0. With keep_last, a last batch smaller than the number of replicas leaves
 * some replicas without a sample in that step (dpt_batch_split). */
DPT_API size_t dpt_sampler_num_batches(size_t n, size_t global_batch, int keep_last);

/* Position and size of global batch k in the epoch's permutation: *start = k * B, *count =
 * B, or the leftovers for the last batch with keep_last. DPT_ERR_INVALID_ARG when B is 0 or
 * k >= dpt_sampler_num_batches(n, B, keep_last). */
DPT_API dpt_status dpt_sampler_batch(size_t n, size_t global_batch, int keep_last, size_t k,
                                     size_t *start, size_t *count);

/* Size of the epoch's smallest batch: n % B when keep_last and B does not divide n, else B
 * (0 when no batch at all). A run with R replicas needs this >= R. */
DPT_API size_t dpt_sampler_last_batch(size_t n, size_t global_batch, int keep_last);

/* Replica `replica`'s slice of a batch of `batch` samples split over `replicas` replicas:
 * contiguous, in replica order, sizes differing by at most one (the first batch % replicas
 * replicas get one sample more). Replica r takes [*start, *start + *count) of the batch.
 * A batch smaller than the replica count (a kept last batch, a small test set) gives one
 * sample to each of the first `batch` replicas and none (*count 0, *start = batch) to the
 * others. DPT_ERR_INVALID_ARG with a message when batch is 0, replicas < 1, replica outside
 * [0, replicas), or start/count is NULL. */
DPT_API dpt_status dpt_batch_split(size_t batch, int replicas, int replica, size_t *start,
                                   size_t *count);

#ifdef __cplusplus
}
#endif

#endif
