/* Shared by every kernel of the OpenCL backend: this file is compiled first, in the one
 * program built from all .cl files of backends/opencl/kernels (see ocl_program.c).
 *
 * Conventions of every kernel:
 *   - each tensor is a (buffer, ulong element offset) pair: buffers are whole cl_mem objects
 *     and offsets need no alignment, so sub-buffers are not used;
 *   - sizes are ulong; global sizes are rounded up to whole work-groups, so every kernel
 *     checks its index against the element count;
 *   - OpenCL 1.2 only, no extension is required (cl_khr_fp64 is used when the host found it,
 *     through DPT_FP64). */

/* No fused multiply-add contraction: results then round like the CPU reference, which is
 * compiled in ISO C mode (no contraction either). */
#pragma OPENCL FP_CONTRACT OFF

#ifdef DPT_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
/* Accumulator of sums: double where the device has it, float otherwise (the host then adds
 * the per-group partials in double). */
typedef double acc_t;
#else
typedef float acc_t;
#endif

/* A label that counts for nothing (softmax_xent), as DPT_IGNORE_INDEX of dptrain/backend.h. */
#define DPT_IGNORE_INDEX (-100)

/* Bit test: infinities and NaNs have an all-ones exponent. Unaffected by any fast-math
 * setting a compiler might apply to isfinite(). */
inline int dpt_nonfinite(float v) {
  return (as_uint(v) & 0x7f800000u) == 0x7f800000u;
}
