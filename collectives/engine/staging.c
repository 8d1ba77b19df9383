/* Device buffers through host memory, block by block.
 *
 * The collective's schedule works on host blocks (block_bytes each, the ring's blocks); a
 * block lives in one of DPT_STAGE_SLOTS host slots:
 *
 *   device  [ b0 | b1 | b2 | b3 | b4 | ... ]
 *              \ download   ^ upload
 *   host     slot b%3:  b(k+1) downloading | b(k) communicating | b(k-1) uploading
 *
 * Block b may be downloaded once block b-3 is uploaded (its slot is free); the engine may use
 * block b once it is downloaded; a block the engine has finished is uploaded. Transfers run
 * in jobs of DPT_STAGE_JOB bytes (or one ring piece, when larger), in order, so the three
 * stages overlap:
 *   - THREAD mode: a helper thread runs the jobs while the calling thread communicates (a
 *     GPU's synchronous download then blocks only the helper);
 *   - INLINE mode: the calling thread runs a job whenever it would otherwise wait for a
 *     message. A download that is a memcpy (CPU backend, CPU OpenCL/Vulkan drivers) gains
 *     nothing from a second thread on the same cores, and a spinning communicator would
 *     compete with it.
 * Within one collective only one thread uses the backend at a time (the helper, or the
 * caller); in a nonblocking request the caller's own thread may run ops meanwhile, and the
 * transfers are the fenced ones of the request's start (backends/backend_impl.h), which wait
 * for the work before the start only.
 * Host memory: 3 slots of min(block_bytes, data size), whatever the buffer size.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/engine/staging.h"
#include "base/error.h"
#include "backends/backend_impl.h"
#include "collectives/common/comm_struct.h"
#include "collectives/common/running.h"

#define DPT_STAGE_SLOTS 3
/* Bytes per transfer job: small enough that the inline mode returns to the network often. */
#define DPT_STAGE_JOB ((size_t)256 << 10)

struct dpt_stage {
  dpt_buffer *buf; /* the device data (owner: the caller) */
  size_t offset;   /* byte offset of the data in buf */
  size_t bytes, block, nblocks, job;
  int download, upload, threaded;
  const dpt_fence *fence;               /* the running request's, or NULL (dpt_request_fence) */
  unsigned char *slot[DPT_STAGE_SLOTS]; /* host copies, `block` bytes each (owner: this) */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  pthread_t thread;
  int thread_started, stop, busy;
  /* In-order progress, in bytes from the start of the data (under lock). */
  size_t dl_bytes; /* downloaded prefix */
  size_t ul_bytes; /* uploaded prefix */
  size_t done_blocks;
  dpt_status err; /* first failure of a job */
  char errmsg[512];
};

typedef struct job {
  int kind; /* 0 none, 1 download, 2 upload */
  size_t from, len;
} job;

static size_t block_end(const dpt_stage *s, size_t b) {
  size_t e = (b + 1) * s->block;
  return e < s->bytes ? e : s->bytes;
}

/* Whether block b's slot no longer holds an earlier block that still needs it (lock held). */
static int slot_free(const dpt_stage *s, size_t b) {
  if (b < DPT_STAGE_SLOTS) return 1;
  size_t prev = b - DPT_STAGE_SLOTS;
  if (s->upload) return s->ul_bytes >= block_end(s, prev);
  return s->done_blocks > prev;
}

static job next_job(const dpt_stage *s) {
  job j = {0, 0, 0};
  if (s->err != DPT_OK || s->busy) return j;
  const int can_up =
      s->upload && s->ul_bytes < s->bytes &&
      s->ul_bytes < (s->done_blocks >= s->nblocks ? s->bytes : s->done_blocks * s->block);
  const size_t dl_block = s->dl_bytes / s->block;
  const int can_down = s->download && s->dl_bytes < s->bytes && slot_free(s, dl_block);
  /* The block the engine is blocked on comes first, then freeing slots, then prefetching. */
  if (can_down && (dl_block <= s->done_blocks || !can_up)) {
    j.kind = 1;
    j.from = s->dl_bytes;
  } else if (can_up) {
    j.kind = 2;
    j.from = s->ul_bytes;
  } else {
    return j;
  }
  size_t end = block_end(s, j.from / s->block);
  j.len = end - j.from < s->job ? end - j.from : s->job;
  return j;
}

static dpt_status run_job(dpt_stage *s, job j) {
  size_t b = j.from / s->block;
  unsigned char *host = s->slot[b % DPT_STAGE_SLOTS] + (j.from - b * s->block);
  if (j.kind == 1)
    return dpt_buffer_download_fenced(s->buf, s->offset + j.from, host, j.len, s->fence);
  return dpt_buffer_upload_fenced(s->buf, s->offset + j.from, host, j.len, s->fence);
}

/* Records the outcome of a job (lock held). */
static void finish_job(dpt_stage *s, job j, dpt_status st) {
  s->busy = 0;
  if (st != DPT_OK) {
    if (s->err == DPT_OK) {
      s->err = st;
      snprintf(s->errmsg, sizeof s->errmsg, "%s", dpt_last_error());
    }
  } else if (j.kind == 1) {
    s->dl_bytes += j.len;
  } else {
    s->ul_bytes += j.len;
  }
  pthread_cond_broadcast(&s->cond);
}

/* Takes and runs one job on this thread; 1 if it ran one. */
static int run_one(dpt_stage *s) {
  pthread_mutex_lock(&s->lock);
  job j = next_job(s);
  if (j.kind) s->busy = 1;
  pthread_mutex_unlock(&s->lock);
  if (!j.kind) return 0;
  dpt_status st = run_job(s, j);
  pthread_mutex_lock(&s->lock);
  finish_job(s, j, st);
  pthread_mutex_unlock(&s->lock);
  return 1;
}

static void *helper(void *arg) {
  dpt_stage *s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    job j = next_job(s);
    if (!j.kind) {
      if (s->stop) break;
      pthread_cond_wait(&s->cond, &s->lock);
      continue;
    }
    s->busy = 1;
    pthread_mutex_unlock(&s->lock);
    dpt_status st = run_job(s, j);
    pthread_mutex_lock(&s->lock);
    finish_job(s, j, st);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

/* Engine hooks. */
static int hook_ready(void *st, size_t b) {
  dpt_stage *s = st;
  pthread_mutex_lock(&s->lock);
  int r;
  if (s->err != DPT_OK) {
    dpt_set_error(s->err, "%s", s->errmsg);
    r = (int)s->err;
  } else if (s->download) {
    r = s->dl_bytes >= block_end(s, b);
  } else {
    r = slot_free(s, b);
  }
  pthread_mutex_unlock(&s->lock);
  return r;
}

static void hook_done(void *st, size_t b) {
  dpt_stage *s = st;
  pthread_mutex_lock(&s->lock);
  size_t nb = b > s->nblocks ? s->nblocks : b;
  if (nb > s->done_blocks) s->done_blocks = nb;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
}

static int hook_idle(void *st) {
  dpt_stage *s = st;
  return s->threaded ? 0 : run_one(s);
}

void *dpt_stage_block_ptr(void *st, size_t b) {
  dpt_stage *s = st;
  return s->slot[b % DPT_STAGE_SLOTS];
}

void dpt_stage_hooks(dpt_stage *s, dpt_sched *hooks) {
  memset(hooks, 0, sizeof *hooks);
  hooks->ready = hook_ready;
  hooks->done = hook_done;
  hooks->idle = hook_idle;
  hooks->st = s;
}

static int want_thread(const dpt_comm *c, const dpt_buffer *buf) {
  if (c->opt.staging != DPT_STAGING_AUTO) return c->opt.staging == DPT_STAGING_THREAD;
  dpt_device_info info;
  if (dpt_backend_get_info(dpt_buffer_backend(buf), &info) != DPT_OK) return 0;
  return info.type != DPT_DEVICE_CPU;
}

static void stage_free(dpt_stage *s) {
  for (int i = 0; i < DPT_STAGE_SLOTS; ++i)
    free(s->slot[i]);
  pthread_cond_destroy(&s->cond);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

dpt_status dpt_stage_create(dpt_comm *c, dpt_buffer *buf, size_t offset, size_t bytes,
                            size_t block_bytes, int download, int upload, dpt_stage **out) {
  *out = NULL;
  dpt_stage *s = calloc(1, sizeof *s);
  if (!s) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "staging: cannot allocate its state");
  s->buf = buf;
  s->offset = offset;
  s->bytes = bytes;
  s->block = block_bytes;
  s->nblocks = bytes / block_bytes + (bytes % block_bytes != 0);
  s->job = c->opt.piece_bytes > DPT_STAGE_JOB ? c->opt.piece_bytes : DPT_STAGE_JOB;
  s->download = download;
  s->upload = upload;
  s->threaded = want_thread(c, buf);
  s->fence = dpt_request_fence(c);
  s->err = DPT_OK;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  const size_t slot = bytes < block_bytes ? bytes : block_bytes;
  for (size_t i = 0; i < DPT_STAGE_SLOTS && i < s->nblocks; ++i) {
    s->slot[i] = malloc(slot);
    if (!s->slot[i]) {
      stage_free(s);
      return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "staging: cannot allocate %zu host bytes", slot);
    }
  }
  if (s->threaded) {
    int rc = pthread_create(&s->thread, NULL, helper, s);
    if (rc != 0) {
      stage_free(s);
      return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "staging: cannot start its thread (%s)",
                           strerror(rc));
    }
    s->thread_started = 1;
  }
  *out = s;
  return DPT_OK;
}

dpt_status dpt_stage_finish(dpt_stage *s, int ok) {
  if (!s) return DPT_OK;
  if (ok) {
    /* The engine has finished every block: drain the uploads. */
    if (s->threaded) {
      pthread_mutex_lock(&s->lock);
      while (s->err == DPT_OK && s->upload && s->ul_bytes < s->bytes)
        pthread_cond_wait(&s->cond, &s->lock);
      pthread_mutex_unlock(&s->lock);
    } else {
      while (run_one(s)) {
      }
    }
  }
  if (s->thread_started) {
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    s->err = s->err == DPT_OK && !ok ? DPT_ERR_COMM : s->err; /* no new jobs after a failure */
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
  }
  dpt_status st = DPT_OK;
  if (ok && s->err != DPT_OK) st = dpt_set_error(s->err, "staging: %s", s->errmsg);
  stage_free(s);
  return st;
}
