/* The op conformance suite: every op of DPT_OP_MAP runs on the backend under test and on the
 * CPU reference backend from identical inputs, and the outputs are compared.
 *
 * A case (conf_case) describes its tensors and a run() callback; the harness (conformance.c)
 * does everything else:
 *
 *   host array of one tensor (elements of its dtype):
 *   [ pre guard | row 0 (cols) | gap (ld-cols) | row 1 | ... | row rows-1 | post guard ]
 *     sentinel     init values    sentinel                                  sentinel
 *
 *   1. fills guards and row gaps with a NaN sentinel bit pattern, the elements with the
 *      tensor's init distribution (fixed seed per op, case and tensor);
 *   2. uploads the same bytes to one buffer per tensor on both backends, the tensor at element
 *      offset = pre guard (so every case also exercises offsets, some of them odd);
 *   3. calls run() on each backend, downloads every buffer;
 *   4. checks on BOTH backends that guards and gaps still hold the sentinel, that inputs are
 *      unchanged and that outputs flagged `finite` are finite; then compares every output and
 *      every host scalar of the tested backend against the reference.
 *
 * Adding an op = one generator function in conformance_cases.c that appends its cases, plus
 * one line in conf_generators[]. An op of DPT_OP_MAP without a generator fails the suite.
 */
#ifndef DPT_TESTS_CONFORMANCE_H
#define DPT_TESTS_CONFORMANCE_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/backend.h"

#define CONF_MAX_TENSORS 9
#define CONF_MAX_SCALARS 4
#define CONF_PARAM_BYTES 256

typedef enum conf_dtype {
  CONF_F32, /* float */
  CONF_I32, /* int32_t */
  CONF_F16, /* IEEE binary16 bits in uint16_t */
  CONF_BF16 /* bfloat16 bits in uint16_t */
} conf_dtype;

typedef enum conf_role {
  CONF_IN,   /* read only: must be unchanged after the op */
  CONF_OUT,  /* written only: compared */
  CONF_INOUT /* read and written: compared */
} conf_role;

typedef enum conf_init {
  CONF_INIT_UNIFORM,     /* F32: uniform in [lo, hi) */
  CONF_INIT_INT,         /* integers uniform in [lo, hi] (F32 holds them as floats); with
                            probability p_bad an out-of-range value instead (lo-1, hi+1,
                            INT32_MIN, INT32_MAX) */
  CONF_INIT_NAN,         /* F32 / F16 / BF16: quiet NaN (outputs, inputs that must not be read) */
  CONF_INIT_SPECIAL_F32, /* F32 values that stress float16 conversion: f16 ties, subnormals,
                            overflow edges, inf, NaN, -0, random bit patterns */
  CONF_INIT_F16_BITS,    /* F16, BF16: uniformly random 16-bit patterns (NaN and inf included) */
  CONF_INIT_CUSTOM       /* the case's init() callback fills the elements */
} conf_init;

typedef enum conf_cmp {
  CONF_CMP_NORM, /* max|test - ref| / max(1e-30, max|ref|) <= tol over finite ref values;
                    NaN and infinities of the reference must be matched exactly */
  CONF_CMP_EXACT /* identical values (F32: identical bits, any NaN matches any NaN; F16 and
                    BF16 bits: likewise for NaN patterns) */
} conf_cmp;

typedef struct conf_tensor {
  const char *name; /* static string, e.g. "C" */
  conf_dtype dtype;
  conf_role role;
  size_t rows, cols; /* logical shape; rows * cols may be 0 */
  size_t ld;         /* row stride in elements, >= cols (gaps are guarded) */
  conf_init init;
  double lo, hi; /* init range */
  double p_bad;  /* CONF_INIT_INT: probability of an out-of-range value */
  conf_cmp cmp;  /* outputs */
  double tol;    /* outputs, CONF_CMP_NORM */
  int finite;    /* outputs: every element must be finite (F32 only) */
} conf_tensor;

/* A value the op returns on the host (loss sum, count, reduction). Compared as
 * |test - ref| <= abs_tol + rel_tol * |ref|; NaN must match NaN. */
typedef struct conf_scalar {
  const char *name;
  double abs_tol, rel_tol;
} conf_scalar;

typedef struct conf_rng {
  uint64_t state;
} conf_rng;

typedef struct conf_case conf_case;

/* Runs the op on `be`: tensor i lives in buf[i] at element offset off[i]; host results go to
 * scalars[0 .. nscalars). */
typedef dpt_status (*conf_run_fn)(dpt_backend *be, const conf_case *c, dpt_buffer *const *buf,
                                  const size_t *off, double *scalars);
/* Fills the rows*cols logical elements of tensor `t` (packed, row-major, dtype elements). */
typedef void (*conf_init_fn)(const conf_case *c, int t, void *elems, conf_rng *rng);

struct conf_case {
  char label[192]; /* shape and parameters, printed in the report */
  int ntensors;
  conf_tensor t[CONF_MAX_TENSORS];
  int nscalars;
  conf_scalar s[CONF_MAX_SCALARS];
  union {
    max_align_t align_;
    unsigned char bytes[CONF_PARAM_BYTES];
  } params; /* the op's parameters, a struct of the generator's own type */
  conf_run_fn run;
  conf_init_fn init; /* for CONF_INIT_CUSTOM tensors */
};

/* A growing list of cases, filled by a generator. */
typedef struct conf_list {
  conf_case *cases; /* owned, count entries */
  int count, cap;
} conf_list;

typedef void (*conf_gen_fn)(conf_list *list);

typedef struct conf_generator {
  dpt_op op;
  conf_gen_fn gen;
} conf_generator;

/* An op a backend may leave out (the direct convolutions: layers fall back to im2col + gemm). */
static inline int conf_op_optional(dpt_op op) {
  return op == DPT_OP_CONV2D_FWD || op == DPT_OP_CONV2D_BWD_DATA || op == DPT_OP_CONV2D_BWD_WEIGHTS;
}

/* conformance_cases.c: one entry per op that has a generator. */
extern const conf_generator conf_generators[];
extern const size_t conf_generator_count;

/* ---- helpers for generators (conformance.c) -------------------------------------------- */

/* Appends a zeroed case with a printf-formatted label. Never returns NULL (aborts the test
 * program on allocation failure). */
conf_case *conf_new_case(conf_list *list, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Adds a tensor [rows, cols] with ld = cols. Defaults: inputs uniform in [-1, 1); F32 outputs
 * NaN-filled, must be finite, compared with CONF_CMP_NORM tol 1e-6; other outputs exact. */
conf_tensor *conf_add_tensor(conf_case *c, const char *name, conf_dtype dtype, conf_role role,
                             size_t rows, size_t cols);

conf_scalar *conf_add_scalar(conf_case *c, const char *name, double abs_tol, double rel_tol);

/* Copies the op's parameter struct into the case. */
#define CONF_SET_PARAMS(c, value)                                                                  \
  do {                                                                                             \
    _Static_assert(sizeof(value) <= CONF_PARAM_BYTES, "conf params too large");                    \
    memcpy((c)->params.bytes, &(value), sizeof(value));                                            \
  } while (0)
#define CONF_PARAMS(c, type) ((const type *)(const void *)(c)->params.bytes)

uint64_t conf_rng_next(conf_rng *rng);
/* Uniform in [0, 1). */
double conf_rng_unit(conf_rng *rng);
/* Uniform integer in [lo, hi]. */
int64_t conf_rng_int(conf_rng *rng, int64_t lo, int64_t hi);

/* Exact binary16 -> float (independent of the library, for generating inputs). */
float conf_f16_to_f32(uint16_t h);

#endif
