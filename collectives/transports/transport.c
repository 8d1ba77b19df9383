/* What the transports share: delivering a message into a receive (transport.h). */
#include <string.h>

#include "collectives/transports/transport.h"
#include "collectives/common/comm_util.h"
#include "collectives/common/reduce.h"

void dpt_req_deliver(dpt_req *r, size_t at, const void *src, size_t bytes) {
  if (bytes == 0) return;
  unsigned char *dst = (unsigned char *)r->buf + at;
  if (r->reduce)
    dpt_sum_into(dst, src, bytes / dpt_dtype_size(r->dtype), r->dtype);
  else
    memcpy(dst, src, bytes);
}
