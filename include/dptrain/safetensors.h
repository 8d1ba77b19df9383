/* dptrain: reading and writing safetensors files (https://github.com/huggingface/safetensors).
 *
 * The format, followed exactly so that files round-trip with PyTorch's safetensors:
 *
 *   [8 bytes]  N, unsigned 64-bit little-endian: the header length in bytes
 *   [N bytes]  JSON object, UTF-8, starting with '{', possibly padded at the end with spaces:
 *                {"__metadata__": {"key": "value", ...},                      (optional)
 *                 "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
 *                 ...}
 *   [rest]     the data: tensor bytes little-endian, row-major (C order); offsets count bytes
 *              from the start of this section, the tensors tile it with no hole and no overlap.
 *
 * Writing produces the tensors in the order given (F32 from floats, any other dtype from raw
 * little-endian bytes), with the header padded with spaces so the data starts at a multiple of
 * 8 bytes (as the reference writer does). Reading accepts every
 * dtype of the format and converts F32, F16 and BF16 to float32 on request.
 */
#ifndef DPTRAIN_SAFETENSORS_H
#define DPTRAIN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most dimensions a tensor may have here (the format itself has no limit). */
#define DPT_ST_MAX_DIMS 8

/* One tensor to write: float32 from `data` by default, or another dtype from `bytes`. */
typedef struct dpt_st_tensor {
  const char *name;               /* borrowed, NUL-terminated UTF-8, unique, not "__metadata__" */
  const float *data;              /* F32: borrowed, [product(shape)] host floats, row-major; may
                                     be NULL only when the product is 0 */
  int ndim;                       /* 0 (a scalar) .. DPT_ST_MAX_DIMS */
  int64_t shape[DPT_ST_MAX_DIMS]; /* first ndim entries used, each >= 0 */
  const char *dtype;              /* NULL or "F32": the floats in `data`; any other dtype of the
                                     format ("F64", "I64", "I32", "U8", "BOOL", ...): `bytes` */
  const void *bytes;              /* other dtypes: borrowed, [product(shape) * dtype size] bytes,
                                     little-endian, row-major, written as they are; may be NULL
                                     only when the product is 0 */
} dpt_st_tensor;

/* Writes `count` tensors (tensors: [count], borrowed) to `path`, after the optional metadata:
 * metadata_kv is NULL or a NULL-terminated array {key0, value0, key1, value1, ..., NULL} of
 * UTF-8 strings stored in "__metadata__". The file is written to "<path>.tmp" and renamed over
 * `path` only once complete, so a failure never leaves a partial file nor destroys an existing
 * one. DPT_ERR_INVALID_ARG names the offending tensor (NULL or duplicate name, bad ndim or
 * shape, NULL data, size overflow); DPT_ERR_IO gives the path and the system's reason. */
DPT_API dpt_status dpt_safetensors_write(const char *path, const dpt_st_tensor *tensors,
                                         size_t count, const char *const *metadata_kv);

typedef struct dpt_safetensors dpt_safetensors;

/* What a file holds about one tensor. Pointers stay valid until dpt_safetensors_close(). */
typedef struct dpt_st_info {
  const char *name;               /* owned by the file handle */
  const char *dtype;              /* "F32", "F16", "BF16", "F64", "I64", ...: static string */
  size_t elem_size;               /* bytes per element (1 for BOOL, U8, I8, F8_*) */
  int ndim;                       /* 0 .. DPT_ST_MAX_DIMS */
  int64_t shape[DPT_ST_MAX_DIMS]; /* first ndim entries valid; the rest 0 */
  size_t count;                   /* elements, the product of shape (1 for a scalar) */
  const void *data;               /* the tensor's raw little-endian bytes in the file's memory;
                                     not necessarily aligned to the element size */
  size_t nbytes;                  /* count * elem_size */
} dpt_st_info;

/* Maps the file at `path` read-only (on POSIX systems; read into memory elsewhere or where it
 * cannot be mapped), so processes that open the same file share its pages, and validates it:
 * the header length against the file size, the JSON (parsed with jansson, strict RFC 8259,
 * duplicate keys refused; the message gives the line, column and byte of the first error), every
 * tensor's dtype, shape and offsets (inside the data, matching shape * dtype size, no overlap, no
 * hole, covering the whole data section), duplicate names, "__metadata__" holding strings only.
 * Unknown fields inside a tensor's entry are ignored, as the reference reader does. Errors:
 * DPT_ERR_IO (cannot open or read), DPT_ERR_BAD_FORMAT (each message names the file and, where
 * there is one, the tensor), DPT_ERR_OUT_OF_MEMORY, DPT_ERR_INVALID_ARG (NULL argument). On success
 * *out is a handle the caller frees with dpt_safetensors_close(); else NULL. */
DPT_API dpt_status dpt_safetensors_open(const char *path, dpt_safetensors **out);

/* Frees the handle and unmaps (or frees) the file's memory; NULL does nothing. A mapped file
 * must not be truncated while it is open (its pages past the new end would fault): dptrain's
 * writers replace files by renaming a new one over them, which leaves open mappings intact. */
DPT_API void dpt_safetensors_close(dpt_safetensors *st);

/* Number of tensors in the file (0 for NULL). */
DPT_API size_t dpt_safetensors_count(const dpt_safetensors *st);

/* Tensor `index` in header order (0 <= index < count); DPT_ERR_INVALID_ARG past the end. */
DPT_API dpt_status dpt_safetensors_info(const dpt_safetensors *st, size_t index, dpt_st_info *out);

/* The tensor called `name`. DPT_ERR_BAD_FORMAT naming the file and the tensor when the file
 * has none by that name (a checkpoint that does not fit the model). */
DPT_API dpt_status dpt_safetensors_find(const dpt_safetensors *st, const char *name,
                                        dpt_st_info *out);

/* Copies tensor `name` into dst ([count] float32, caller-owned), converting F32, F16 and BF16
 * (exact widening). DPT_ERR_BAD_FORMAT naming the tensor when it is missing, has another
 * dtype, or holds a different number of elements than `count` (both numbers given). */
DPT_API dpt_status dpt_safetensors_read_f32(const dpt_safetensors *st, const char *name, float *dst,
                                            size_t count);

/* Copies tensor `name` into dst ([count] int64, caller-owned), converting I64 and I32
 * (sign-extended). DPT_ERR_BAD_FORMAT naming the tensor when it is missing, has another dtype,
 * or holds a different number of elements than `count` (both numbers given). */
DPT_API dpt_status dpt_safetensors_read_i64(const dpt_safetensors *st, const char *name,
                                            int64_t *dst, size_t count);

/* The "__metadata__" value for `key`, or NULL when absent. Owned by the handle. */
DPT_API const char *dpt_safetensors_metadata(const dpt_safetensors *st, const char *key);

/* Number of "__metadata__" entries, and entry `index` of them (in header order). */
DPT_API size_t dpt_safetensors_metadata_count(const dpt_safetensors *st);
DPT_API dpt_status dpt_safetensors_metadata_at(const dpt_safetensors *st, size_t index,
                                               const char **key, const char **value);

#ifdef __cplusplus
}
#endif

#endif
