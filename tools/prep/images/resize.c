/* An image fit to a fixed size as torchvision's Resize + CenterCrop (images.h): the channels
 * converted first (as PIL's convert), then a separable resampling computed only for the output
 * window, area averaging to shrink and bilinear to enlarge, per axis. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tools/prep/images/images.h"

/* One output position's taps: source indices first .. first + count - 1 and their weights. */
typedef struct taps {
  size_t first, count;
  size_t at; /* index of the first weight in the axis' weight array */
} taps;

typedef struct axis {
  taps *t;   /* [out] */
  float *w;  /* the weights of every tap */
  size_t nw; /* used */
} axis;

static void axis_free(axis *a) {
  free(a->t);
  free(a->w);
}

/* Python's round(x / 2.0) for a whole x >= 0: halves go to the even neighbour. */
static size_t half_to_even(size_t x) {
  const size_t q = x / 2;
  return (x % 2 == 0 || q % 2 == 0) ? q : q + 1;
}

/* The taps of outputs off .. off + out - 1 of an axis of n inputs scaled to m (a->t and a->w
 * the caller frees with axis_free, also on failure). */
static dpt_status axis_make(size_t n, size_t m, size_t off, size_t out, axis *a) {
  const double scale = (double)n / (double)m; /* inputs per output */
  const size_t per = m < n ? (size_t)ceil(scale) + 1 : 2;
  a->t = malloc(out * sizeof *a->t);
  a->w = malloc(out * per * sizeof *a->w);
  a->nw = 0;
  if (!a->t || !a->w)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "out of memory resizing an image");
  for (size_t j = 0; j < out; j++) {
    taps *t = &a->t[j];
    t->at = a->nw;
    if (m < n) { /* area: the input span [lo, hi) of output j, each input by its overlap */
      const double lo = (double)(off + j) * scale, hi = lo + scale;
      t->first = (size_t)floor(lo);
      t->count = 0;
      for (size_t i = t->first; i < n && (double)i < hi && t->count < per; i++) {
        const double a0 = fmax(lo, (double)i), a1 = fmin(hi, (double)i + 1);
        a->w[a->nw++] = (float)(a1 > a0 ? (a1 - a0) / scale : 0.0);
        t->count++;
      }
    } else { /* bilinear, centers aligned, edges clamped */
      double c = ((double)(off + j) + 0.5) * scale - 0.5;
      c = fmin(fmax(c, 0.0), (double)(n - 1));
      t->first = (size_t)floor(c);
      const double f = c - (double)t->first;
      t->count = t->first + 1 < n && f > 0 ? 2 : 1;
      a->w[a->nw++] = t->count == 2 ? (float)(1.0 - f) : 1.0f;
      if (t->count == 2) a->w[a->nw++] = (float)f;
    }
  }
  return DPT_OK;
}

/* img's pixels as `channels` interleaved channels: luma as PIL's convert("L") (integer
 * weights 19595, 38470, 7471 over 2^16), RGB without alpha, or RGBA as it is. */
static uint8_t *convert_channels(const dpt_image *img, int channels) {
  const size_t n = img->width * img->height;
  uint8_t *px = malloc(n * (size_t)channels);
  if (!px) return NULL;
  const uint8_t *s = img->rgba;
  for (size_t i = 0; i < n; i++, s += 4) {
    uint8_t *d = px + i * (size_t)channels;
    if (channels == 1)
      d[0] = (uint8_t)((s[0] * 19595u + s[1] * 38470u + s[2] * 7471u + 0x8000u) >> 16);
    else
      memcpy(d, s, (size_t)channels);
  }
  return px;
}

/* dst[c][y][x] from px through the taps of both axes: each source row the output rows reach
 * resampled along x into floats, then those rows combined along y, rounded to the nearest byte. */
static dpt_status resample(const uint8_t *px, size_t width, int channels, const axis *ay,
                           const axis *ax, size_t rows, size_t cols, uint8_t *dst) {
  const size_t C = (size_t)channels, y0 = ay->t[0].first;
  const size_t y1 = ay->t[rows - 1].first + ay->t[rows - 1].count; /* source rows [y0, y1) */
  float *tmp = malloc((y1 - y0) * cols * C * sizeof *tmp);
  if (!tmp) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "out of memory resizing an image");
  for (size_t y = y0; y < y1; y++)
    for (size_t x = 0; x < cols; x++) {
      const taps *t = &ax->t[x];
      float *o = tmp + ((y - y0) * cols + x) * C;
      for (size_t c = 0; c < C; c++)
        o[c] = 0;
      for (size_t b = 0; b < t->count; b++) {
        const uint8_t *p = px + (y * width + t->first + b) * C;
        for (size_t c = 0; c < C; c++)
          o[c] += ax->w[t->at + b] * (float)p[c];
      }
    }
  for (size_t y = 0; y < rows; y++) {
    const taps *t = &ay->t[y];
    for (size_t x = 0; x < cols; x++)
      for (size_t c = 0; c < C; c++) {
        float v = 0.5f;
        for (size_t a = 0; a < t->count; a++)
          v += ay->w[t->at + a] * tmp[((t->first + a - y0) * cols + x) * C + c];
        dst[(c * rows + y) * cols + x] = (uint8_t)(v <= 0 ? 0 : v >= 255 ? 255 : v);
      }
  }
  free(tmp);
  return DPT_OK;
}

dpt_status dpt_image_fit(const dpt_image *img, int channels, size_t rows, size_t cols,
                         uint8_t *dst) {
  if (!img || !img->rgba || !dst || rows == 0 || cols == 0 ||
      (channels != 1 && channels != 3 && channels != 4))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "image_fit: bad arguments");
  const size_t w = img->width, h = img->height;
  /* The scale that covers rows x cols: the side it is set by keeps its exact length, the other
   * is truncated as torchvision truncates the longer side (but never below the window). */
  size_t rh, rw;
  if ((double)rows / (double)h >= (double)cols / (double)w) {
    rh = rows;
    rw = (size_t)((double)rows * (double)w / (double)h);
  } else {
    rw = cols;
    rh = (size_t)((double)cols * (double)h / (double)w);
  }
  if (rw < cols) rw = cols;
  if (rh < rows) rh = rows;
  axis ay = {0}, ax = {0};
  uint8_t *px = convert_channels(img, channels);
  dpt_status s = px ? DPT_OK : dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "out of memory for an image");
  if (s == DPT_OK) s = axis_make(h, rh, half_to_even(rh - rows), rows, &ay);
  if (s == DPT_OK) s = axis_make(w, rw, half_to_even(rw - cols), cols, &ax);
  if (s == DPT_OK) s = resample(px, w, channels, &ay, &ax, rows, cols, dst);
  axis_free(&ay);
  axis_free(&ax);
  free(px);
  return s;
}
