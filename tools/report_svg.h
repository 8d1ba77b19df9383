/* SVG line charts for dptrain report: decimation of long series, round axis ticks, HTML
 * escaping, and a chart of a few lines drawn as inline SVG (no script, fixed viewBox). */
#ifndef DPTRAIN_TOOLS_REPORT_SVG_H
#define DPTRAIN_TOOLS_REPORT_SVG_H

#include <stddef.h>
#include <stdio.h>

/* Points kept of a line (what a million-step run draws at most). */
#define DPT_REPORT_MAX_POINTS 2000

/* Picks at most `max` (>= 4) of y[0..n) to draw, in order, into keep (n entries): n <= max
 * keeps all; else each of max/4 equal runs of indices keeps its first, its lowest and its
 * highest finite point, and one NaN point when it has one (so a gap stays a gap). Returns the
 * count kept. */
size_t dpt_report_decimate(const double *y, size_t n, size_t max, size_t *keep);

/* A round axis over [lo, hi]: a step of 1, 2 or 5 times a power of ten giving at most
 * `target` + 1 ticks, first = lo rounded down to it, last = hi rounded up. An empty or
 * non-finite range is widened first. */
typedef struct dpt_report_axis {
  double first, last, step;
  int count; /* ticks from first to last */
} dpt_report_axis;
dpt_report_axis dpt_report_ticks(double lo, double hi, int target);

/* Tick i's label: as few decimals as the step needs, or %g for very large or small values. */
void dpt_report_tick_label(const dpt_report_axis *a, int i, char *buf, size_t size);

/* s with & < > " ' escaped. */
void dpt_report_escape(FILE *f, const char *s);

/* One line of a chart: NaN values are gaps, as is a step back in x (a rollback or a resume). */
typedef struct dpt_report_series {
  const char *name, *color;
  const double *x, *y;
  size_t n;
} dpt_report_series;

/* Vertical marks at some x values (skipped steps, rollbacks). */
typedef struct dpt_report_marks {
  const char *name, *color;
  const double *x;
  size_t n;
} dpt_report_marks;

/* An <svg> chart: the title, a frame, round ticks on both axes (x counts steps: at least 8
 * wide, so its ticks are whole numbers), the lines (decimated), the
 * marks, a legend; "no data" when no series has a finite point. */
void dpt_report_chart(FILE *f, const char *title, const char *xlabel, const dpt_report_series *s,
                      int ns, const dpt_report_marks *m, int nm);

#endif
