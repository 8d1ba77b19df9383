/* What the transports share: delivering a message into a receive (transport.h). */
#include <string.h>

#include "collectives/transports/transport.h"
#include "collectives/transports/backoff.h"
#include "base/error.h"
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

dpt_status dpt_req_teardown_check(dpt_req **reqs, int n, double since) {
  if (!dpt_teardown_due(since)) return DPT_OK;
  int peer = -1;
  for (int i = 0; i < n && peer < 0; ++i)
    if (reqs[i]->active) peer = reqs[i]->peer;
  return dpt_set_error(DPT_ERR_COMM,
                       "the launcher is ending the job (SIGTERM) and rank %d sent nothing for "
                       "%.2g s: this rank leaves the collective",
                       peer, DPT_TEARDOWN_QUIET_SECONDS);
}
