/* Internal: a timeline of training (what each replica did when), written as one Chrome
 * trace-event JSON file that Perfetto and chrome://tracing open (docs/performance.md).
 *
 * Each replica records complete events [t0, t1] on dpt_now()'s clock into its own dpt_trace
 * (in memory); dpt_trace_align at start-up makes the replicas' clocks comparable and
 * dpt_trace_write gathers every replica's events to member 0, which writes the file. A trace
 * is used by one thread at a time (one trace per replica). */
#ifndef DPTRAIN_CORE_TRACE_H
#define DPTRAIN_CORE_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/comm.h"
#include "dptrain/status.h"

/* The rows of a replica in the viewer (tid = track). */
typedef enum dpt_trace_track {
  DPT_TRACE_DATA,
  DPT_TRACE_FORWARD,
  DPT_TRACE_BACKWARD,
  DPT_TRACE_EXCHANGE,
  DPT_TRACE_OPTIMIZER,
  DPT_TRACE_CHECKPOINT,
  DPT_TRACE_TRACKS
} dpt_trace_track;

/* Bytes of an event's name kept, the terminating NUL included (longer names are cut). */
#define DPT_TRACE_NAME_MAX 60

typedef struct dpt_trace dpt_trace;

/* An empty trace of `replica` (the pid in the file). The file names the process
 * "replica R (process_name)", or "replica R" when process_name is NULL or empty; the trainer
 * passes e.g. "rank 0, cpu". */
dpt_status dpt_trace_create(int replica, const char *process_name, dpt_trace **out);
/* NULL does nothing. */
void dpt_trace_destroy(dpt_trace *t);

/* One complete event [t0, t1] in seconds on dpt_now()'s clock (base/clock.h); the name is
 * copied (cut to DPT_TRACE_NAME_MAX - 1 bytes). Never fails: when memory runs out, the limit
 * is reached or a time is not finite, the event is dropped and counted (the file says how
 * many). Appends to a
 * growing array. A NULL trace or a track out of range does nothing. */
void dpt_trace_event(dpt_trace *t, dpt_trace_track track, const char *name, double t0, double t1);

/* At most max_events events are kept (later ones are dropped and counted); 0: no limit (the
 * default). Bounds the memory of a long run. */
void dpt_trace_set_limit(dpt_trace *t, size_t max_events);
/* Events kept, and events dropped (out of memory or over the limit). */
size_t dpt_trace_count(const dpt_trace *t);
uint64_t dpt_trace_dropped(const dpt_trace *t);

/* Collective over comm (every member calls it, each with its own trace): aligns the members'
 * clocks on member 0's. Member r's timestamps are written shifted by offset = member 0's
 * clock - r's, as dpt_trace_measure_offset finds it; on the threads transport (one process,
 * one clock) and for comm NULL (one replica) the offset is 0. Call once at start-up. */
dpt_status dpt_trace_align(dpt_comm *comm, dpt_trace *t);
/* Collective: this member's offset (member 0's dpt_now() - ours, seconds; 0 on member 0),
 * estimated over barriers: every member enters a barrier before any leaves it, which bounds
 * the offset by when member 0 and this member entered and left; the midpoint of the bounds of
 * all rounds is the estimate. Batches of 8 barriers run (at most 8) until every member's
 * bounds are 20 us apart, so the error is at most 10 us on a quiet host and about a
 * scheduler's wake-up latency on a busy one. dpt_trace_align uses it for MPI ranks. *error
 * (may be NULL): half the width of the final bounds, which hold the true offset (0 on member 0;
 * infinite when the bounds do not meet, a clock that jumped, and the estimate is the median
 * of the rounds' exit differences). */
dpt_status dpt_trace_measure_offset(dpt_comm *comm, double *offset, double *error);
/* The offset dpt_trace_align found (seconds added to this trace's timestamps), 0 before, and
 * its error bound (as dpt_trace_measure_offset's; 0 where the offset is exact). */
double dpt_trace_offset(const dpt_trace *t);
double dpt_trace_offset_error(const dpt_trace *t);

/* Collective: gathers every member's events to member 0, which writes one Chrome trace JSON
 * file at path: "X" complete events (ts and dur in microseconds, relative to the earliest
 * event; pid = replica, tid = track), "M" metadata events naming each process and track, and
 * under "otherData" the number of dropped events. Written to path.tmp then renamed over path
 * (no half-written file). Every member returns the same status: a member that cannot take
 * part, or member 0 failing to write, fails every member's call. comm NULL: this trace alone.
 * The trace keeps its events (a later write writes them again). */
dpt_status dpt_trace_write(dpt_comm *comm, dpt_trace *t, const char *path);

#endif
