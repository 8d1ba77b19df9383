/* A replica's failure protocol, its news for the log, and the 16-bit conversions of its
 * gradient (core/train/replica.h): what the trainer and its parts (buckets, sparse tables,
 * checkpoints) all call. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "core/train/replica.h"

/* Keeps this replica's first local failure (with its message) for the next exchange. */
void dpt_train_keep_failure(replica_state *s, dpt_status st) {
  if (st == DPT_OK || s->pending != DPT_OK) return;
  s->pending = st;
  snprintf(s->pending_msg, sizeof s->pending_msg, "%s", dpt_last_error());
}

void dpt_train_log(const replica *r, const char *fmt, ...) {
  if (r->index != 0 || !r->cfg->on_log) return;
  char line[1536];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  r->cfg->on_log(line, r->cfg->user);
}

/* Whether a collective's failure means the replicas are out of step (one stalled or gone, or
 * calls that disagree): no further collective can succeed, and entering one would wait out
 * another deadline, so the replica stops at once. */
int dpt_train_out_of_step(dpt_status st) {
  return st == DPT_ERR_TIMEOUT || st == DPT_ERR_MISMATCH;
}

/* The failure to stop with when a collective failed: the collective's (so that a caller sees a
 * timeout as one and can end the job), quoting this replica's own earlier failure if any. */
dpt_status dpt_train_stop_after(replica_state *s, dpt_status st) {
  if (s->pending == DPT_OK || strcmp(dpt_last_error(), s->pending_msg) == 0) return st;
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", dpt_last_error());
  return dpt_set_error(st, "%s; before it, this replica failed: %.700s", msg, s->pending_msg);
}

typedef dpt_status (*convert_fn)(dpt_backend *, size_t, const dpt_buffer *, size_t, dpt_buffer *,
                                 size_t);

dpt_status dpt_train_narrow_16(replica_state *s, dpt_comm_dtype dt, size_t off, size_t n) {
  const convert_fn narrow = dt == DPT_COMM_BF16 ? dpt_f32_to_bf16 : dpt_f32_to_f16;
  const convert_fn widen = dt == DPT_COMM_BF16 ? dpt_bf16_to_f32 : dpt_f16_to_f32;
  dpt_buffer *g = dpt_model_grads(s->model);
  dpt_status st = DPT_OK;
  if (s->resid) st = dpt_axpy(s->be, n, 1.0f, s->resid, off, g, off);
  if (st == DPT_OK) st = narrow(s->be, n, g, off, s->gh, off);
  if (st == DPT_OK && s->resid) { /* resid = g - f32(narrow(g)) */
    st = widen(s->be, n, s->gh, off, s->resid, off);
    if (st == DPT_OK) st = dpt_axpy(s->be, n, -1.0f, g, off, s->resid, off);
    if (st == DPT_OK) st = dpt_scale(s->be, n, -1.0f, s->resid, off);
  }
  return st;
}

dpt_status dpt_train_widen_16(replica_state *s, dpt_comm_dtype dt, size_t off, size_t n) {
  const convert_fn widen = dt == DPT_COMM_BF16 ? dpt_bf16_to_f32 : dpt_f16_to_f32;
  return widen(s->be, n, s->gh, off, dpt_model_grads(s->model), off);
}
