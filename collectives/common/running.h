/* Internal: which request the calling thread is running (running.c). A communicator's progress
 * thread runs its nonblocking requests (api/request.c) through the blocking entry points; the
 * collective in progress (engine/) asks here whether it runs for a request, and with which
 * fence, so the engine needs nothing of the requests' queue. */
#ifndef DPTRAIN_COLLECTIVES_COMMON_RUNNING_H
#define DPTRAIN_COLLECTIVES_COMMON_RUNNING_H

#include "dptrain/comm.h"

typedef struct dpt_fence dpt_fence;

/* Marks the calling thread as c's progress thread (NULL: none). */
void dpt_running_set_thread(const dpt_comm *c);
/* The fence of the request the calling thread runs now (NULL between requests). */
void dpt_running_set_fence(const dpt_fence *fence);
/* 1 when the calling thread is c's progress thread (running one of its requests). */
int dpt_request_running(const dpt_comm *c);
/* 1 when the calling thread is any communicator's progress thread. */
int dpt_running_on_progress_thread(void);
/* The fence the running request took when it started (its transfers wait for the work before
 * it, not for the work the caller submitted since); NULL outside a request or without one. */
const dpt_fence *dpt_request_fence(const dpt_comm *c);

#endif
