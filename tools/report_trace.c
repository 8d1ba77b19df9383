/* A per-replica table of a dptrain Chrome trace (tools/report_trace.h). */
#include "tools/report_trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/report_svg.h"

/* The tracks of core/train/trace.c, in its order (the events' "cat"). */
static const char *const tracks[] = {"data loading", "forward",   "backward",
                                     "exchange",     "optimizer", "checkpoints"};
enum { TRACKS = sizeof tracks / sizeof tracks[0], MAX_REPLICAS = 4096 };

typedef struct row {
  int used;
  long long events;
  double seconds[TRACKS];
  double start, end; /* microseconds */
  const char *name;
  long long dropped;
} row;

int dpt_report_is_trace(const json_t *j) {
  const json_t *gen = json_object_get(json_object_get(j, "otherData"), "generator");
  return json_is_string(gen) && !strcmp(json_string_value(gen), "dptrain") &&
         json_is_array(json_object_get(j, "traceEvents"));
}

static int track_of(const char *cat) {
  for (int k = 0; k < TRACKS; ++k)
    if (!strcmp(cat, tracks[k])) return k;
  return -1;
}

/* Each complete event's duration into its replica's row; process names from the metadata. */
static void gather(const json_t *events, row *rows) {
  size_t i;
  const json_t *e;
  json_array_foreach(events, i, e) {
    const json_t *pid = json_object_get(e, "pid"), *ph = json_object_get(e, "ph");
    if (!json_is_integer(pid) || !json_is_string(ph)) continue;
    const json_int_t p = json_integer_value(pid);
    if (p < 0 || p >= MAX_REPLICAS) continue;
    row *r = &rows[p];
    const char *kind = json_string_value(ph);
    const json_t *name = json_object_get(e, "name");
    if (!strcmp(kind, "M") && json_is_string(name) &&
        !strcmp(json_string_value(name), "process_name")) {
      const json_t *label = json_object_get(json_object_get(e, "args"), "name");
      if (json_is_string(label)) r->name = json_string_value(label), r->used = 1;
      continue;
    }
    if (strcmp(kind, "X") != 0) continue;
    const json_t *cat = json_object_get(e, "cat");
    const double ts = json_number_value(json_object_get(e, "ts"));
    const double dur = json_number_value(json_object_get(e, "dur"));
    const int k = json_is_string(cat) ? track_of(json_string_value(cat)) : -1;
    if (!r->events || ts < r->start) r->start = ts;
    if (!r->events || ts + dur > r->end) r->end = ts + dur;
    r->used = 1;
    ++r->events;
    if (k >= 0) r->seconds[k] += dur * 1e-6;
  }
}

void dpt_report_trace_table(FILE *f, const json_t *trace) {
  row *rows = calloc(MAX_REPLICAS, sizeof *rows);
  if (!rows) {
    fputs("<p>the trace: out of memory</p>\n", f);
    return;
  }
  gather(json_object_get(trace, "traceEvents"), rows);
  const json_t *dropped =
      json_object_get(json_object_get(trace, "otherData"), "dropped_by_replica");
  for (size_t p = 0; p < json_array_size(dropped) && p < MAX_REPLICAS; ++p)
    rows[p].dropped = json_integer_value(json_array_get(dropped, p));
  fputs("<table>\n<tr><th>replica</th><th>events</th>", f);
  for (int k = 0; k < TRACKS; ++k)
    fprintf(f, "<th>%s (s)</th>", tracks[k]);
  fputs("<th>span (s)</th><th>dropped</th></tr>\n", f);
  for (int p = 0; p < MAX_REPLICAS; ++p) {
    const row *r = &rows[p];
    if (!r->used) continue;
    fputs("<tr><td>", f);
    if (r->name) {
      dpt_report_escape(f, r->name);
    } else {
      fprintf(f, "replica %d", p);
    }
    fprintf(f, "</td><td>%lld</td>", r->events);
    for (int k = 0; k < TRACKS; ++k)
      fprintf(f, "<td>%.4f</td>", r->seconds[k]);
    fprintf(f, "<td>%.4f</td><td>%lld</td></tr>\n", r->events ? (r->end - r->start) * 1e-6 : 0.0,
            r->dropped);
  }
  fputs("</table>\n", f);
  free(rows);
}
