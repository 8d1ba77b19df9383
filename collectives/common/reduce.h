/* Internal: the sums applied to received data (reduce.c), by the engine, the transports that
 * add a message as it arrives, and the direct all-reduce. */
#ifndef DPTRAIN_COLLECTIVES_COMMON_REDUCE_H
#define DPTRAIN_COLLECTIVES_COMMON_REDUCE_H

#include <stddef.h>

#include "dptrain/comm.h"

/* dst[i] += src[i] for n elements (dst and src do not overlap). */
void dpt_sum_into(void *dst, const void *src, size_t n, dpt_comm_dtype dtype);
/* dst[i] = a[i] + b[i]; dst may equal a or b (elementwise). */
void dpt_sum_to(void *dst, const void *a, const void *b, size_t n, dpt_comm_dtype dtype);
/* One-round reduction after the hello round delivered every rank's payload: data = sum in
 * rank order of payload[0..size) (payload[rank] is this rank's own copy) (reduce.c). */
void dpt_direct_sum(const dpt_comm *c, void *data, const void *const *payload, size_t count,
                    dpt_comm_dtype dtype);

#endif
