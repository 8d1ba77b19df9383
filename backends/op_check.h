/* The argument checks every op wrapper runs before calling a backend (backends/backend.c and
 * backends/backend_layers.c): one call's context, then tensors, overlaps and matrices, each
 * failure a DPT_ERR_INVALID_ARG message naming the op and the argument. */
#ifndef DPT_BACKENDS_OP_CHECK_H
#define DPT_BACKENDS_OP_CHECK_H

#include "backends/backend_impl.h"

/* One call's checking context: the op name for messages and its backend. */
typedef struct dpt_op_check {
  const char *fn;
  dpt_backend *be;
} dpt_op_check;

#define F32 sizeof(float)
#define I32 sizeof(int32_t)
#define F16 sizeof(uint16_t)

/* Starts a call: the backend is valid and implements the op (`supported`). */
dpt_status dpt_op_begin(dpt_op_check *c, const char *fn, dpt_backend *be, int supported);
/* a * b elements, overflow-checked. */
dpt_status dpt_op_elems2(dpt_op_check *c, const char *what, size_t a, size_t b, size_t *out);
/* A tensor of `count` elements of `elem` bytes at element offset `off` fits its buffer, which
 * belongs to the call's backend. */
dpt_status dpt_op_tensor(dpt_op_check *c, const char *name, const dpt_buffer *buf, size_t off,
                         size_t count, size_t elem);
/* Output `o` does not overlap input `i`, unless `allow_same` and the ranges are identical. */
dpt_status dpt_op_alias(dpt_op_check *c, const char *oname, const dpt_buffer *ob, size_t ooff,
                        size_t ocount, size_t oelem, const char *iname, const dpt_buffer *ib,
                        size_t ioff, size_t icount, size_t ielem, int allow_same);
/* A rows x cols matrix with leading dimension ld; *extent receives its element span. */
dpt_status dpt_op_matrix(dpt_op_check *c, const char *name, const char *ldname,
                         const dpt_buffer *buf, size_t off, size_t rows, size_t cols, size_t ld,
                         size_t *extent);
/* A pooling geometry's output size and the element counts of x and y. */
dpt_status dpt_op_pool_sizes(dpt_op_check *c, const dpt_pool_geom *g, size_t *oh, size_t *ow,
                             size_t *nx, size_t *ny);

static inline dpt_ref dpt_op_ref(const dpt_buffer *buf, size_t off) {
  dpt_ref r = {(dpt_buffer *)buf, off};
  return r;
}

#endif
