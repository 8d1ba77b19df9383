/* dptrain report's part of a Chrome trace written by dptrain train --trace
 * (core/train/trace.c): the seconds each replica spent on each track, as an HTML table. */
#ifndef DPTRAIN_TOOLS_REPORT_TRACE_H
#define DPTRAIN_TOOLS_REPORT_TRACE_H

#include <jansson.h>
#include <stdio.h>

/* Whether j is a trace dptrain wrote (otherData.generator "dptrain" and a traceEvents array). */
int dpt_report_is_trace(const json_t *j);

/* A table of trace: a row per replica (its process name), the events' count and the summed
 * seconds of each track (data loading, forward, ...), the span from its first event's start
 * to its last one's end, and the events dropped. */
void dpt_report_trace_table(FILE *f, const json_t *trace);

#endif
