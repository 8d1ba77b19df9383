/* Internal to the OpenCL backend: its context, the kernel table, error translation and the
 * launch helpers shared by ocl_backend.c (devices, memory), ocl_program.c (the one program),
 * ocl_ops.c (the op set) and ocl_gemm.c (CLBlast).
 *
 * Threading: a backend is driven by one thread at a time (backend.h), so the cl_kernel objects
 * of its context (whose arguments are state) and its scratch buffer need no lock. */
#ifndef DPTRAIN_OCL_INTERNAL_H
#define DPTRAIN_OCL_INTERNAL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include <stddef.h>
#include <stdint.h>

#include "backends/backend_impl.h"

/* Every kernel of the .cl files in backends/opencl/kernels: X(name), the kernel function's
 * name. */
#define DPT_OCL_KERNEL_MAP(X)                                                                      \
  X(relu_fwd)                                                                                      \
  X(add_relu)                                                                                      \
  X(relu_bwd)                                                                                      \
  X(bias_add)                                                                                      \
  X(bias_grad)                                                                                     \
  X(axpy)                                                                                          \
  X(scale)                                                                                         \
  X(reduce_sum)                                                                                    \
  X(count_nonfinite)                                                                               \
  X(softmax_xent)                                                                                  \
  X(im2col)                                                                                        \
  X(col2im)                                                                                        \
  X(maxpool_fwd)                                                                                   \
  X(maxpool_bwd)                                                                                   \
  X(embed_gather)                                                                                  \
  X(embed_scatter_add)                                                                             \
  X(sgd_update)                                                                                    \
  X(adamw_update)                                                                                  \
  X(f32_to_f16)                                                                                    \
  X(f16_to_f32)                                                                                    \
  X(f32_to_bf16)                                                                                   \
  X(bf16_to_f32)                                                                                   \
  X(gemm_batch_sum)                                                                                \
  X(bn_stats)                                                                                      \
  X(bn_fwd)                                                                                        \
  X(bn_bwd_reduce)                                                                                 \
  X(bn_bwd)                                                                                        \
  X(avgpool_fwd)                                                                                   \
  X(avgpool_bwd)                                                                                   \
  X(dropout)                                                                                       \
  X(layernorm_fwd)                                                                                 \
  X(layernorm_bwd)                                                                                 \
  X(layernorm_bwd_params)                                                                          \
  X(gelu_fwd)                                                                                      \
  X(gelu_bwd)                                                                                      \
  X(bias_gelu_fwd)                                                                                 \
  X(bias_gelu_bwd)                                                                                 \
  X(attn_softmax)                                                                                  \
  X(softmax_bwd)                                                                                   \
  X(embed_bag)                                                                                     \
  X(embed_bag_bwd)                                                                                 \
  X(gather_cols)                                                                                   \
  X(scatter_cols_add)                                                                              \
  X(bce_logits)                                                                                    \
  X(attn_probs_fwd)                                                                                \
  X(attn_probs_bwd)

typedef enum dpt_ocl_kernel {
#define DPT_OCL_KERNEL_ENUM_(name) DPT_OCL_K_##name,
  DPT_OCL_KERNEL_MAP(DPT_OCL_KERNEL_ENUM_)
#undef DPT_OCL_KERNEL_ENUM_
      DPT_OCL_K_COUNT
} dpt_ocl_kernel;

/* Kernels that reduce in local memory need a power-of-two work-group size. */
#define DPT_OCL_KERNEL_NEEDS_POW2(k)                                                               \
  ((k) == DPT_OCL_K_reduce_sum || (k) == DPT_OCL_K_count_nonfinite ||                              \
   (k) == DPT_OCL_K_softmax_xent || (k) == DPT_OCL_K_bn_stats || (k) == DPT_OCL_K_bn_bwd_reduce || \
   (k) == DPT_OCL_K_attn_softmax || (k) == DPT_OCL_K_softmax_bwd ||                                \
   (k) == DPT_OCL_K_attn_probs_fwd || (k) == DPT_OCL_K_attn_probs_bwd)

/* The device limits the launch code sizes work from, read once at create. */
typedef struct dpt_ocl_limits {
  size_t max_wg;         /* CL_DEVICE_MAX_WORK_GROUP_SIZE */
  size_t max_item0;      /* CL_DEVICE_MAX_WORK_ITEM_SIZES[0] */
  cl_ulong local_mem;    /* CL_DEVICE_LOCAL_MEM_SIZE, bytes */
  cl_ulong max_alloc;    /* CL_DEVICE_MAX_MEM_ALLOC_SIZE, bytes */
  cl_uint compute_units; /* CL_DEVICE_MAX_COMPUTE_UNITS */
  int fp64;              /* cl_khr_fp64 present: accumulators are double on the device */
  int exact_div_sqrt;    /* CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT: build with it, so / and
                            sqrt round like the CPU reference */
} dpt_ocl_limits;

/* Bytes of one device accumulator (acc_t of kernels/common.cl). */
static inline size_t dpt_ocl_acc_bytes(const dpt_ocl_limits *lim) {
  return lim->fp64 ? sizeof(cl_double) : sizeof(cl_float);
}

/* be->ctx of an OpenCL backend. */
typedef struct dpt_ocl_ctx {
  cl_platform_id platform;
  cl_device_id device;
  cl_context context;           /* owned */
  cl_command_queue queue;       /* owned, in-order: every command runs after the previous one */
  struct ocl_snapshot *retired; /* fenced copies whose writes were still pending at their
                                   fence's free (backend_impl.h, the fenced transfers) */
  dpt_ocl_limits lim;
  char device_name[128]; /* for messages */

  /* The one program built from every .cl file, built on the first op that needs a kernel
   * (so enumeration, memory-only use and gemm never pay the compile). NULL until then. */
  cl_program program;                 /* owned */
  cl_kernel kernels[DPT_OCL_K_COUNT]; /* owned, created with the program */
  size_t local_size[DPT_OCL_K_COUNT]; /* 1-D work-group size chosen per kernel */

  /* Device scratch for per-group / per-row partial results read back by the host. Grown on
   * demand, never shrunk; reused across calls because every reader waits for its results. */
  cl_mem scratch;       /* owned, may be NULL */
  size_t scratch_bytes; /* capacity of scratch */

  /* Device scratch of gemm_batched with a summed batch (stride_c 0): the scaled products of
   * a chunk of the batch, [chunk, m, n], before they are added into C. Grown on demand,
   * never shrunk; reuse is safe because the queue is in order (the next gemm writing it runs
   * after the kernel that read it). */
  cl_mem gemm_scratch;       /* owned, may be NULL */
  size_t gemm_scratch_bytes; /* capacity of gemm_scratch */
} dpt_ocl_ctx;

static inline dpt_ocl_ctx *dpt_ocl_ctx_of(dpt_backend *be) {
  return (dpt_ocl_ctx *)be->ctx;
}

static inline cl_mem dpt_ocl_mem(const dpt_buffer *buf) {
  return (cl_mem)buf->handle;
}

/* ---- errors (ocl_error.c) ------------------------------------------------------------------ */

/* "CL_INVALID_KERNEL_ARGS" for an OpenCL error code, "CL_UNKNOWN_ERROR" otherwise. */
const char *dpt_ocl_error_name(cl_int err);

/* Status of a failed OpenCL call: DPT_ERR_OUT_OF_MEMORY for the allocation failures
 * (CL_OUT_OF_RESOURCES, CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_HOST_MEMORY), else
 * DPT_ERR_DEVICE. */
dpt_status dpt_ocl_status_of(cl_int err);

/* Records "call(what): CL_NAME (code)" as the thread's error and returns the status of `err`;
 * `bytes` > 0 adds the size asked for to out-of-memory messages. */
dpt_status dpt_ocl_fail(cl_int err, const char *call, const char *what, size_t bytes);

/* Same for a CLBlast status code (which extends the OpenCL codes). */
dpt_status dpt_ocl_clblast_fail(int status, const char *call, const char *what);

/* ---- program and launches (ocl_program.c) -------------------------------------------------- */

/* Builds the program and creates every kernel if not done yet. DPT_ERR_KERNEL_BUILD with the
 * device name and the build log when the compiler rejects the sources. */
dpt_status dpt_ocl_ensure_program(dpt_ocl_ctx *c);

/* Compiles `count` sources (texts[i] of lengths[i] bytes) into *out for the context's device,
 * with the backend's build options. The one place that reports DPT_ERR_KERNEL_BUILD (device
 * name + build log). */
dpt_status dpt_ocl_compile(dpt_ocl_ctx *c, cl_uint count, const char *const *texts,
                           const size_t *lengths, cl_program *out);

/* Releases the program and kernels. */
void dpt_ocl_release_program(dpt_ocl_ctx *c);

/* Makes the scratch buffer at least `bytes` large. */
dpt_status dpt_ocl_scratch(dpt_ocl_ctx *c, size_t bytes);

/* Makes *mem (capacity *cap bytes) at least `bytes` large: the grow-only scratch buffers of the
 * context; `what` names it in messages. */
dpt_status dpt_ocl_grow(dpt_ocl_ctx *c, cl_mem *mem, size_t *cap, size_t bytes, const char *what);

/* Argument list of one launch. Arguments are set in order; the first failure is kept and
 * reported by dpt_ocl_launch, so op code reads as a flat list of arg calls. */
typedef struct dpt_ocl_args {
  dpt_ocl_ctx *c;
  dpt_ocl_kernel k;
  cl_uint next;    /* index of the next argument */
  cl_int err;      /* first clSetKernelArg failure, CL_SUCCESS if none */
  cl_uint bad_arg; /* index of that failure */
} dpt_ocl_args;

/* Starts an argument list (builds the program on first use). */
dpt_status dpt_ocl_begin(dpt_ocl_args *l, dpt_ocl_ctx *c, dpt_ocl_kernel k);
void dpt_ocl_arg_mem(dpt_ocl_args *l, cl_mem m);
void dpt_ocl_arg_u64(dpt_ocl_args *l, uint64_t v);
void dpt_ocl_arg_i32(dpt_ocl_args *l, int32_t v);
void dpt_ocl_arg_u32(dpt_ocl_args *l, uint32_t v);
void dpt_ocl_arg_f32(dpt_ocl_args *l, float v);
void dpt_ocl_arg_local(dpt_ocl_args *l, size_t bytes);
/* A tensor argument: the cl_mem followed by its element offset as ulong. */
void dpt_ocl_arg_ref(dpt_ocl_args *l, dpt_ref r);

/* Enqueues the kernel over `groups` work-groups of the kernel's local size (global size =
 * groups * local size). Kernels check their own bounds. */
dpt_status dpt_ocl_launch_groups(dpt_ocl_args *l, size_t groups);
/* Enqueues one work-item per element of `items` (rounded up to whole work-groups). */
dpt_status dpt_ocl_launch(dpt_ocl_args *l, size_t items);

/* Launches kernel k over `items` work-items, with the argument shape most element-wise kernels
 * share:
 *   (ulong items, ulong u[0..nu), float f[0..nf), then a (buffer, ulong offset) pair per tensor)
 * and each work-item checking its index against `items`. */
dpt_status dpt_ocl_launch_flat(dpt_backend *be, dpt_ocl_kernel k, size_t items, int nu,
                               const uint64_t *u, int nf, const float *f, int nr,
                               const dpt_ref *refs);

/* Blocking read of `bytes` from the scratch buffer into host memory. */
dpt_status dpt_ocl_read_scratch(dpt_ocl_ctx *c, void *dst, size_t bytes, const char *what);
/* The buckets of an embedding scatter kernel and its work-items (ocl_ops.c). */
dpt_status dpt_ocl_scatter_buckets(const dpt_ocl_ctx *c, dpt_ocl_kernel k, size_t vocab, size_t dim,
                                   const char *what, size_t *buckets, size_t *items);

/* The per-row (loss, correct) pairs of a loss kernel in the scratch buffer, summed on the host
 * (ocl_ops.c). */
dpt_status dpt_ocl_sum_stats(dpt_ocl_ctx *c, size_t rows, size_t stats_bytes, const char *what,
                             double *loss_sum, int64_t *correct);

/* ---- ops (ocl_ops.c, ocl_gemm.c, ocl_layers.c)
 * ------------------------------------------------------------ */

#define DPT_OCL_OP_DECL_(NAME, name)                                                               \
  dpt_status dpt_ocl_##name(dpt_backend *be, const dpt_##name##_args *a);
DPT_OP_MAP(DPT_OCL_OP_DECL_)
#undef DPT_OCL_OP_DECL_

#endif
