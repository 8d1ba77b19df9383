/* Which request the calling thread is running (common/running.h): two thread-local words, set by
 * the progress thread (api/request.c), read by the collective in progress (engine/). */
#include "collectives/common/running.h"

static _Thread_local const dpt_comm *tl_progress; /* the comm whose progress thread this is */
static _Thread_local const dpt_fence *tl_fence;   /* the running request's */

void dpt_running_set_thread(const dpt_comm *c) {
  tl_progress = c;
}

void dpt_running_set_fence(const dpt_fence *fence) {
  tl_fence = fence;
}

int dpt_request_running(const dpt_comm *c) {
  return c && tl_progress == c;
}

int dpt_running_on_progress_thread(void) {
  return tl_progress != NULL;
}

const dpt_fence *dpt_request_fence(const dpt_comm *c) {
  return c && tl_progress == c ? tl_fence : NULL;
}
