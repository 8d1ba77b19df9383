/* dptrain: training data in host memory, the distributed sampler and the batch split.
 *
 * A dpt_dataset holds labelled samples of shape [channels, rows, cols] (row-major), as uint8
 * pixels (IDX files, uint8 safetensors) or float32 values (float32 safetensors), and int32
 * class labels. It is immutable once built, so any number of threads may gather from one
 * dataset at the same time. Batches are converted to float32 (and transformed: normalized,
 * augmented) only when gathered.
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

/* Loads a tensor dataset from a safetensors file (see include/dptrain/safetensors.h), as
 * `safetensors.numpy.save_file({"x": x, "y": y}, path)` writes it:
 *   x: uint8 or float32, shape [N, C, H, W] or [N, F] (F features: read as C = 1, H = 1, W = F);
 *      uint8 samples gather as pixel / 255.0f like IDX images, float32 ones as they are (each
 *      must be finite);
 *   y: int32 or int64, shape [N], each label in [0, num_classes).
 * num_classes 0 infers it as the largest label + 1; otherwise every label must be below it.
 * Other tensors in the file are ignored. The file is mapped read-only, not copied: the samples
 * (uint8, and float32 on a little-endian host when x starts 4-byte aligned in the file, as
 * writers that pad the header to 8 bytes place a first tensor) are read from the mapping, so
 * ranks on one node share one copy in the page cache; other float32 is converted into memory of
 * its own, and the labels always are (int32).
 * The file must not be truncated while the dataset lives.
 * Errors, one message naming the file and the tensor: DPT_ERR_BAD_FORMAT (anything the
 * safetensors reader refuses; x or y missing, of another dtype or rank; a zero dimension; x and
 * y of different lengths; a non-finite x value, with its sample; the first label that is
 * negative or out of range, with its index and value), DPT_ERR_IO, DPT_ERR_OUT_OF_MEMORY,
 * DPT_ERR_INVALID_ARG (NULL argument, num_classes < 0). *out as for dpt_dataset_load_idx(). */
DPT_API dpt_status dpt_dataset_load_safetensors(const char *path, int num_classes,
                                                dpt_dataset **out);

/* Frees a dataset; NULL does nothing. */
DPT_API void dpt_dataset_destroy(dpt_dataset *ds);

/* Number of samples (0 for NULL). */
DPT_API size_t dpt_dataset_count(const dpt_dataset *ds);
/* Values per sample, channels * rows * cols (0 for NULL). */
DPT_API size_t dpt_dataset_dim(const dpt_dataset *ds);
/* Labels per sample: 1, or the sequence length of a text dataset (dptrain/text.h), whose gather
 * writes that many labels per sample (0 for NULL). */
DPT_API size_t dpt_dataset_labels_per_sample(const dpt_dataset *ds);
/* Channels per sample: 1 for IDX images (0 for NULL). */
DPT_API size_t dpt_dataset_channels(const dpt_dataset *ds);
/* Fingerprint of the samples (shape, pixels and labels, with dpt_fingerprint), taken once when
 * the data set was built: the replicas compare it at start-up. 0 for NULL. */
DPT_API uint64_t dpt_dataset_fingerprint(const dpt_dataset *ds);
/* Sample height and width (0 for NULL); [N, F] data has height 1 and width F. */
DPT_API size_t dpt_dataset_rows(const dpt_dataset *ds);
DPT_API size_t dpt_dataset_cols(const dpt_dataset *ds);
/* Number of classes the labels were checked against (0 for NULL). */
DPT_API int dpt_dataset_num_classes(const dpt_dataset *ds);

/* Copies samples out in the given order:
 *   indices: [count] sample indices, each < dpt_dataset_count(ds) (repeats allowed);
 *   x:       [count, dim] float32 written as pixel / 255.0f in [0, 1] (uint8 samples) or as
 *            stored (float32 samples), or NULL to skip;
 *   labels:  [count] int32 written, or NULL to skip.
 * Every index is checked before anything is written: an index out of range gives
 * DPT_ERR_INVALID_ARG naming its position and value, and leaves x and labels untouched.
 * count 0 does nothing. A text dataset (dpt_dataset_from_text in dptrain/text.h) writes each
 * sample's masked token ids as int32 bit patterns into its dim float slots, and
 * dpt_dataset_labels_per_sample labels per sample. */
DPT_API dpt_status dpt_dataset_gather(const dpt_dataset *ds, const uint64_t *indices, size_t count,
                                      float *x, int32_t *labels);

/* ---- transforms when gathering ------------------------------------------------------------ */

/* The largest crop padding a transform takes. */
#define DPT_DATA_MAX_CROP_PAD 4096

/* What happens to each sample as it is gathered (all zero: nothing), in this order:
 *   1. random crop (crop_pad P > 0): the sample, padded with P zeros on every side (zero before
 *      normalization: a black pixel, as torchvision's RandomCrop(padding=P) on the raw image),
 *      is cropped back to rows x cols at offsets (dy, dx), each uniform in [0, 2P];
 *   2. horizontal flip (hflip): with probability 1/2 the columns are reversed;
 *   3. normalization (mean and std non-NULL): value = (value - mean[c]) / std[c] per channel c,
 *      after the / 255 of uint8 samples (as torchvision's Normalize after ToTensor).
 * dy, dx and the flip of sample index s in epoch e are drawn from the library's deterministic
 * generator seeded from (seed, e, s) alone: a sample is augmented alike whichever replica,
 * thread, batch or position gathers it, on every platform. */
typedef struct dpt_data_transform {
  size_t channels;   /* entries of mean and std: the dataset's channels, or 1 for all */
  const float *mean; /* [channels], borrowed; NULL (with std NULL): no normalization */
  const float *std;  /* [channels], each > 0 */
  size_t crop_pad;   /* P: random crop with this padding; 0: none */
  int hflip;         /* 1: random horizontal flip */
  uint64_t seed;     /* the augmentation's seed */
} dpt_data_transform;

/* Whether transform t suits dataset ds: mean and std both or neither, one value per channel or
 * one for all, finite, std > 0, crop_pad <= DPT_DATA_MAX_CROP_PAD. DPT_ERR_INVALID_ARG with a
 * message naming the setting; t NULL is fine. */
DPT_API dpt_status dpt_data_transform_check(const dpt_data_transform *t, const dpt_dataset *ds);

/* dpt_dataset_gather() with transform t applied to x for epoch `epoch` (see
 * dpt_data_transform); labels are unchanged. t NULL gives dpt_dataset_gather() bit for bit, and
 * so does a transform of all zeros. Errors: those of dpt_dataset_gather() and
 * dpt_data_transform_check(), before anything is written. */
DPT_API dpt_status dpt_dataset_gather_transformed(const dpt_dataset *ds, const uint64_t *indices,
                                                  size_t count, const dpt_data_transform *t,
                                                  uint64_t epoch, float *x, int32_t *labels);

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
