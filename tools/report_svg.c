/* SVG line charts for dptrain report (tools/report_svg.h). */
#include "tools/report_svg.h"

#include <math.h>
#include <string.h>

size_t dpt_report_decimate(const double *y, size_t n, size_t max, size_t *keep) {
  if (max < 4) max = 4;
  if (n <= max) {
    for (size_t i = 0; i < n; ++i)
      keep[i] = i;
    return n;
  }
  const size_t buckets = max / 4;
  size_t out = 0;
  for (size_t b = 0; b < buckets; ++b) {
    const size_t lo = n * b / buckets, hi = n * (b + 1) / buckets;
    size_t pick[4], np = 0, lowest = hi, highest = hi, nan_at = hi;
    for (size_t i = lo; i < hi; ++i) {
      if (isnan(y[i])) {
        if (nan_at == hi) nan_at = i;
        continue;
      }
      if (lowest == hi || y[i] < y[lowest]) lowest = i;
      if (highest == hi || y[i] > y[highest]) highest = i;
    }
    pick[np++] = lo;
    if (lowest != hi) pick[np++] = lowest;
    if (highest != hi) pick[np++] = highest;
    if (nan_at != hi) pick[np++] = nan_at;
    for (size_t i = 1; i < np; ++i) /* in order, each once */
      for (size_t j = i; j > 0 && pick[j - 1] > pick[j]; --j) {
        const size_t t = pick[j];
        pick[j] = pick[j - 1];
        pick[j - 1] = t;
      }
    for (size_t i = 0; i < np; ++i)
      if (i == 0 || pick[i] != pick[i - 1]) keep[out++] = pick[i];
  }
  return out;
}

dpt_report_axis dpt_report_ticks(double lo, double hi, int target) {
  if (!isfinite(lo) || !isfinite(hi)) lo = 0, hi = 1;
  if (lo > hi) {
    const double t = lo;
    lo = hi, hi = t;
  }
  if (hi - lo <= 1e-12 * fmax(fabs(lo), fabs(hi))) {
    const double d = lo != 0 ? fabs(lo) * 0.1 : 1;
    lo -= d, hi += d;
  }
  if (target < 1) target = 1;
  const double raw = (hi - lo) / target, mag = pow(10, floor(log10(raw))), norm = raw / mag;
  const double step = (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * mag;
  dpt_report_axis a;
  a.step = step;
  a.first = floor(lo / step * (1 + 1e-12)) * step;
  if (a.first > lo) a.first -= step;
  a.last = ceil(hi / step * (1 - 1e-12)) * step;
  if (a.last < hi) a.last += step;
  a.count = (int)lround((a.last - a.first) / step) + 1;
  return a;
}

void dpt_report_tick_label(const dpt_report_axis *a, int i, char *buf, size_t size) {
  double v = a->first + a->step * i;
  if (fabs(v) < a->step * 1e-9) v = 0; /* no "-0" */
  const double big = fmax(fabs(a->first), fabs(a->last));
  if (big >= 1e6 || a->step < 1e-4) {
    snprintf(buf, size, "%.4g", v);
    return;
  }
  int decimals = a->step >= 1 ? 0 : (int)ceil(-log10(a->step) - 1e-9);
  snprintf(buf, size, "%.*f", decimals, v);
}

void dpt_report_escape(FILE *f, const char *s) {
  for (; *s; ++s) {
    switch (*s) {
    case '&':
      fputs("&amp;", f);
      break;
    case '<':
      fputs("&lt;", f);
      break;
    case '>':
      fputs("&gt;", f);
      break;
    case '"':
      fputs("&quot;", f);
      break;
    case '\'':
      fputs("&#39;", f);
      break;
    default:
      fputc(*s, f);
    }
  }
}

/* The chart's geometry, in viewBox units. */
enum { W = 800, H = 300, LEFT = 70, RIGHT = 780, TOP = 50, BOTTOM = 250 };

typedef struct frame {
  dpt_report_axis x, y;
} frame;

static double px(const frame *fr, double x) {
  return LEFT + (x - fr->x.first) / (fr->x.last - fr->x.first) * (RIGHT - LEFT);
}

static double py(const frame *fr, double y) {
  return BOTTOM - (y - fr->y.first) / (fr->y.last - fr->y.first) * (BOTTOM - TOP);
}

/* The finite range of the series' points (x of finite y only) and of the marks' x. */
static int range(const dpt_report_series *s, int ns, const dpt_report_marks *m, int nm, double *x0,
                 double *x1, double *y0, double *y1) {
  int any = 0;
  *x0 = *y0 = INFINITY, *x1 = *y1 = -INFINITY;
  for (int k = 0; k < ns; ++k)
    for (size_t i = 0; i < s[k].n; ++i) {
      if (!isfinite(s[k].y[i]) || !isfinite(s[k].x[i])) continue;
      any = 1;
      *x0 = fmin(*x0, s[k].x[i]), *x1 = fmax(*x1, s[k].x[i]);
      *y0 = fmin(*y0, s[k].y[i]), *y1 = fmax(*y1, s[k].y[i]);
    }
  for (int k = 0; any && k < nm; ++k)
    for (size_t i = 0; i < m[k].n; ++i)
      if (isfinite(m[k].x[i])) *x0 = fmin(*x0, m[k].x[i]), *x1 = fmax(*x1, m[k].x[i]);
  return any;
}

static void axes(FILE *f, const frame *fr, const char *xlabel) {
  char label[64];
  for (int i = 0; i < fr->y.count; ++i) {
    const double y = py(fr, fr->y.first + fr->y.step * i);
    dpt_report_tick_label(&fr->y, i, label, sizeof label);
    fprintf(f, "<line class=\"grid\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>", LEFT, y, RIGHT,
            y);
    fprintf(f, "<text class=\"tick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", LEFT - 6,
            y + 4, label);
  }
  for (int i = 0; i < fr->x.count; ++i) {
    const double x = px(fr, fr->x.first + fr->x.step * i);
    dpt_report_tick_label(&fr->x, i, label, sizeof label);
    fprintf(f, "<line class=\"grid\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>", x, TOP, x,
            BOTTOM);
    fprintf(f, "<text class=\"tick\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", x,
            BOTTOM + 16, label);
  }
  fprintf(f, "<text class=\"axis\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">", (LEFT + RIGHT) / 2,
          H - 14);
  dpt_report_escape(f, xlabel);
  fputs("</text>\n", f);
}

/* A series as polylines between gaps; a point alone is a dot. */
static void line(FILE *f, const frame *fr, const dpt_report_series *s) {
  static size_t keep[DPT_REPORT_MAX_POINTS];
  const size_t n = dpt_report_decimate(s->y, s->n, DPT_REPORT_MAX_POINTS, keep);
  size_t start = 0;
  while (start < n) {
    while (start < n && (!isfinite(s->y[keep[start]]) || !isfinite(s->x[keep[start]])))
      ++start;
    if (start == n) break;
    size_t end = start + 1; /* [start, end): one run without a gap */
    while (end < n && isfinite(s->y[keep[end]]) && isfinite(s->x[keep[end]]) &&
           s->x[keep[end]] >= s->x[keep[end - 1]])
      ++end;
    if (end - start == 1) {
      fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
              px(fr, s->x[keep[start]]), py(fr, s->y[keep[start]]), s->color);
    } else {
      fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", s->color);
      for (size_t i = start; i < end; ++i)
        fprintf(f, "%s%.1f,%.1f", i > start ? " " : "", px(fr, s->x[keep[i]]),
                py(fr, s->y[keep[i]]));
      fputs("\"/>\n", f);
    }
    start = end;
  }
}

static void marks(FILE *f, const frame *fr, const dpt_report_marks *m) {
  const size_t stride = m->n > DPT_REPORT_MAX_POINTS ? m->n / DPT_REPORT_MAX_POINTS + 1 : 1;
  for (size_t i = 0; i < m->n; i += stride) {
    if (!isfinite(m->x[i])) continue;
    const double x = px(fr, m->x[i]);
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\" "
            "stroke-dasharray=\"4 3\"/>\n",
            x, TOP, x, BOTTOM, m->color);
  }
}

static void legend(FILE *f, const char *name, const char *color, int dashed, int *at) {
  fprintf(f, "<line x1=\"%d\" y1=\"36\" x2=\"%d\" y2=\"36\" stroke=\"%s\" stroke-width=\"2\"%s/>",
          *at, *at + 18, color, dashed ? " stroke-dasharray=\"4 3\"" : "");
  fprintf(f, "<text class=\"tick\" x=\"%d\" y=\"40\">", *at + 22);
  dpt_report_escape(f, name);
  fputs("</text>\n", f);
  *at += 40 + 7 * (int)strlen(name);
}

void dpt_report_chart(FILE *f, const char *title, const char *xlabel, const dpt_report_series *s,
                      int ns, const dpt_report_marks *m, int nm) {
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" width=\"%d\" "
          "height=\"%d\" role=\"img\">\n<title>",
          W, H, W, H);
  dpt_report_escape(f, title);
  fprintf(f, "</title>\n<text class=\"title\" x=\"%d\" y=\"20\">", LEFT);
  dpt_report_escape(f, title);
  fputs("</text>\n", f);
  fprintf(f, "<rect class=\"frame\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/>\n", LEFT, TOP,
          RIGHT - LEFT, BOTTOM - TOP);
  double x0, x1, y0, y1;
  if (!range(s, ns, m, nm, &x0, &x1, &y0, &y1)) {
    fprintf(f, "<text class=\"nodata\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">no data</text>\n",
            (LEFT + RIGHT) / 2, (TOP + BOTTOM) / 2);
    fputs("</svg>\n", f);
    return;
  }
  if (x1 - x0 < 8) { /* the x axis counts steps: whole numbers */
    x0 = fmax(0, floor((x0 + x1) / 2 - 4));
    x1 = x0 + 8;
  }
  frame fr = {dpt_report_ticks(x0, x1, 8), dpt_report_ticks(y0, y1, 5)};
  axes(f, &fr, xlabel);
  int at = LEFT + 4;
  for (int k = 0; k < nm; ++k)
    if (m[k].n) {
      marks(f, &fr, &m[k]);
      legend(f, m[k].name, m[k].color, 1, &at);
    }
  for (int k = 0; k < ns; ++k) {
    line(f, &fr, &s[k]);
    legend(f, s[k].name, s[k].color, 0, &at);
  }
  fputs("</svg>\n", f);
}
