/* The CPU backend's ops other than gemm: plain loops that spell out the contract of
 * include/dptrain/backend.h, since every other backend is tested against them. Sums are
 * accumulated in double. The wrappers have validated every argument and filtered out empty
 * tensors before these are called. */
#include <math.h>
#include <string.h>

#include "base/half.h"
#include "backends/cpu/cpu_internal.h"

dpt_status dpt_cpu_bias_add(dpt_backend *be, const dpt_bias_add_args *a) {
  (void)be;
  float *y = dpt_cpu_f32(a->y);
  const float *bias = dpt_cpu_f32(a->bias);
  for (size_t r = 0; r < a->rows; ++r) {
    float *yr = y + r * a->cols;
    for (size_t c = 0; c < a->cols; ++c)
      yr[c] += bias[c];
  }
  return DPT_OK;
}

dpt_status dpt_cpu_bias_grad(dpt_backend *be, const dpt_bias_grad_args *a) {
  (void)be;
  enum { CHUNK = 256 }; /* columns summed at once: row-major reads, double accumulators */
  const float *dy = dpt_cpu_f32(a->dy);
  float *db = dpt_cpu_f32(a->db);
  for (size_t c0 = 0; c0 < a->cols; c0 += CHUNK) {
    const size_t width = a->cols - c0 < CHUNK ? a->cols - c0 : CHUNK;
    double acc[CHUNK];
    for (size_t j = 0; j < width; ++j)
      acc[j] = 0.0;
    for (size_t r = 0; r < a->rows; ++r) {
      const float *row = dy + r * a->cols + c0;
      for (size_t j = 0; j < width; ++j)
        acc[j] += row[j];
    }
    for (size_t j = 0; j < width; ++j) {
      /* beta == 0: db is not read (it may hold NaN). */
      const double old = a->beta == 0.0f ? 0.0 : (double)a->beta * db[c0 + j];
      db[c0 + j] = (float)(old + acc[j]);
    }
  }
  return DPT_OK;
}

dpt_status dpt_cpu_relu_fwd(dpt_backend *be, const dpt_relu_fwd_args *a) {
  (void)be;
  const float *x = dpt_cpu_f32(a->x);
  float *y = dpt_cpu_f32(a->y); /* may equal x */
  for (size_t i = 0; i < a->n; ++i) {
    const float v = x[i];
    /* NaN propagates (as in PyTorch) so that a non-finite check downstream still sees it. */
    y[i] = v > 0.0f || isnan(v) ? v : 0.0f;
  }
  return DPT_OK;
}

dpt_status dpt_cpu_add_relu(dpt_backend *be, const dpt_add_relu_args *a) {
  (void)be;
  const float *x = dpt_cpu_f32(a->a), *z = dpt_cpu_f32(a->b);
  float *y = dpt_cpu_f32(a->y); /* may equal x or z */
  for (size_t i = 0; i < a->n; ++i) {
    const float v = x[i] + z[i];
    y[i] = v > 0.0f || isnan(v) ? v : 0.0f;
  }
  return DPT_OK;
}

dpt_status dpt_cpu_relu_bwd(dpt_backend *be, const dpt_relu_bwd_args *a) {
  (void)be;
  const float *x = dpt_cpu_f32(a->x);
  const float *dy = dpt_cpu_f32(a->dy);
  float *dx = dpt_cpu_f32(a->dx); /* may equal dy */
  for (size_t i = 0; i < a->n; ++i) {
    const float g = dy[i]; /* read unconditionally: a select, no branch (vectorizes) */
    dx[i] = x[i] > 0.0f ? g : 0.0f;
  }
  return DPT_OK;
}

/* Row r of softmax cross-entropy, computed in double from the max-shifted logits:
 * loss = log(sum_j exp(x_j - max)) - (x_label - max). */
dpt_status dpt_cpu_softmax_xent(dpt_backend *be, const dpt_softmax_xent_args *a) {
  (void)be;
  const size_t cols = a->cols;
  const float *logits = dpt_cpu_f32(a->logits);
  const int32_t *labels = dpt_cpu_i32(a->labels);
  float *dlogits = a->dlogits.buf != NULL ? dpt_cpu_f32(a->dlogits) : NULL;
  double loss_sum = 0.0;
  int64_t correct = 0;
  for (size_t r = 0; r < a->rows; ++r) {
    const float *x = logits + r * cols;
    /* First maximal logit: strict > keeps the earliest of equal maxima. */
    size_t arg = 0;
    float max = x[0];
    for (size_t j = 1; j < cols; ++j) {
      if (x[j] > max) {
        max = x[j];
        arg = j;
      }
    }
    double denom = 0.0;
    for (size_t j = 0; j < cols; ++j)
      denom += exp((double)x[j] - max);

    const int32_t label = labels[r];
    const int valid = label >= 0 && (size_t)label < cols;
    if (label == DPT_IGNORE_INDEX) {
      /* no loss, not correct; the gradient row is zeroed below */
    } else if (valid) {
      loss_sum += log(denom) - ((double)x[label] - max);
      if (arg == (size_t)label) ++correct;
    } else {
      loss_sum += NAN;
    }
    if (dlogits != NULL) {
      float *d = dlogits + r * cols;
      for (size_t j = 0; j < cols; ++j) {
        if (!valid) {
          d[j] = 0.0f;
          continue;
        }
        const double p = exp((double)x[j] - max) / denom;
        const double target = j == (size_t)label ? 1.0 : 0.0;
        d[j] = (float)((double)a->scale * (p - target));
      }
    }
  }
  if (a->loss_sum != NULL) *a->loss_sum = loss_sum;
  if (a->correct != NULL) *a->correct = correct;
  return DPT_OK;
}

/* im2col and col2im walk the same index map; `scatter` selects the direction:
 *   0: col[i, row, oy*out_w + ox] = x[i, ch, iy, ix]   (0 where (iy, ix) is in the padding)
 *   1: x[i, ch, iy, ix] += col[i, row, oy*out_w + ox]  (padding entries dropped)
 * with row = (ch*kh + ki)*kw + kj, iy = oy*stride_h - pad_h + ki, ix = ox*stride_w - pad_w + kj.
 * Coordinates are kept shifted by the padding (iy + pad_h) so that they stay unsigned.
 * For each (row, oy) the output positions ox whose ix falls inside the image form one range
 * [lo, hi), computed once: the loops run without a test per element (and, at stride 1, over
 * contiguous memory, so they vectorize). */
static void dpt_cpu_im2col_map(const dpt_conv_geom *g, size_t out_h, size_t out_w, float *x,
                               float *col, int scatter) {
  const size_t plane = g->h * g->w;
  const size_t out_plane = out_h * out_w;
  const size_t sw = g->stride_w;
  for (size_t i = 0; i < g->n; ++i) {
    for (size_t ch = 0; ch < g->c; ++ch) {
      float *xp = x + (i * g->c + ch) * plane;
      for (size_t ki = 0; ki < g->kh; ++ki) {
        for (size_t kj = 0; kj < g->kw; ++kj) {
          /* ox is inside when pad_w <= ox*sw + kj < pad_w + w. */
          size_t lo = 0, hi = 0;
          if (kj < g->pad_w) lo = (g->pad_w - kj + sw - 1) / sw;
          if (g->pad_w + g->w > kj) hi = (g->pad_w + g->w - kj + sw - 1) / sw;
          if (hi > out_w) hi = out_w;
          if (lo > hi) lo = hi;
          const size_t row = (ch * g->kh + ki) * g->kw + kj;
          float *cp = col + (i * g->c * g->kh * g->kw + row) * out_plane;
          for (size_t oy = 0; oy < out_h; ++oy) {
            const size_t iy_pad = oy * g->stride_h + ki;
            float *cv = cp + oy * out_w;
            if (iy_pad < g->pad_h || iy_pad - g->pad_h >= g->h) {
              if (!scatter)
                for (size_t ox = 0; ox < out_w; ++ox)
                  cv[ox] = 0.0f;
              continue;
            }
            /* x at ox = lo: column lo*sw + kj - pad_w of row iy (only formed when the range
             * is not empty: the address would lie outside the plane otherwise). */
            float *xr = lo < hi ? xp + (iy_pad - g->pad_h) * g->w + (lo * sw + kj - g->pad_w) : xp;
            if (scatter) {
              if (sw == 1)
                for (size_t ox = lo; ox < hi; ++ox)
                  xr[ox - lo] += cv[ox];
              else
                for (size_t ox = lo; ox < hi; ++ox)
                  xr[(ox - lo) * sw] += cv[ox];
            } else {
              for (size_t ox = 0; ox < lo; ++ox)
                cv[ox] = 0.0f;
              if (sw == 1)
                for (size_t ox = lo; ox < hi; ++ox)
                  cv[ox] = xr[ox - lo];
              else
                for (size_t ox = lo; ox < hi; ++ox)
                  cv[ox] = xr[(ox - lo) * sw];
              for (size_t ox = hi; ox < out_w; ++ox)
                cv[ox] = 0.0f;
            }
          }
        }
      }
    }
  }
}

dpt_status dpt_cpu_im2col(dpt_backend *be, const dpt_im2col_args *a) {
  (void)be;
  /* x is only read on this path (scatter == 0). */
  dpt_cpu_im2col_map(&a->g, a->out_h, a->out_w, dpt_cpu_f32(a->x), dpt_cpu_f32(a->col), 0);
  return DPT_OK;
}

dpt_status dpt_cpu_col2im(dpt_backend *be, const dpt_col2im_args *a) {
  (void)be;
  float *dx = dpt_cpu_f32(a->dx);
  const size_t count = a->g.n * a->g.c * a->g.h * a->g.w;
  for (size_t i = 0; i < count; ++i)
    dx[i] = 0.0f;
  /* col is only read on this path (scatter == 1). */
  dpt_cpu_im2col_map(&a->g, a->out_h, a->out_w, dx, dpt_cpu_f32(a->col), 1);
  return DPT_OK;
}

/* Output pixels are taken CHUNK at a time along a row, the window scanned in its row-major
 * order for all of them at once: each output keeps the same comparisons in the same order as
 * a pixel-by-pixel scan, but the loop over the chunk has independent iterations and selects
 * instead of branches, so it vectorizes (a branch here is a coin flip on ReLU output). */
static inline void pool_scan(const float *xr, size_t sw, int32_t row, size_t n, float *best,
                             int32_t *at) {
  for (size_t j = 0; j < n; ++j) {
    const float v = xr[j * sw];
    const float b = best[j];
    /* Strict > keeps the first maximum; the first NaN wins and propagates. */
    const int take = (v > b) | ((v != v) & (b == b));
    best[j] = take ? v : b;
    at[j] = take ? row + (int32_t)(j * sw) : at[j];
  }
}

dpt_status dpt_cpu_maxpool_fwd(dpt_backend *be, const dpt_maxpool_fwd_args *a) {
  (void)be;
  enum { CHUNK = 64 };
  const dpt_pool_geom *g = &a->g;
  const float *x = dpt_cpu_f32(a->x);
  float *y = dpt_cpu_f32(a->y);
  int32_t *argmax = dpt_cpu_i32(a->argmax);
  const size_t sw = g->stride_w;
  for (size_t p = 0; p < g->planes; ++p) {
    const float *xp = x + p * g->h * g->w;
    for (size_t oy = 0; oy < a->out_h; ++oy) {
      const size_t y0 = oy * g->stride_h;
      for (size_t ox0 = 0; ox0 < a->out_w; ox0 += CHUNK) {
        const size_t n = a->out_w - ox0 < CHUNK ? a->out_w - ox0 : CHUNK;
        float best[CHUNK];
        int32_t at[CHUNK];
        for (size_t j = 0; j < n; ++j) {
          const size_t i0 = y0 * g->w + (ox0 + j) * sw;
          best[j] = xp[i0];
          at[j] = (int32_t)i0;
        }
        for (size_t ki = 0; ki < g->kh; ++ki) {
          for (size_t kj = 0; kj < g->kw; ++kj) {
            const size_t row = (y0 + ki) * g->w + ox0 * sw + kj;
            /* The usual strides as constants, which the vectorizer needs. */
            if (sw == 2)
              pool_scan(xp + row, 2, (int32_t)row, n, best, at);
            else if (sw == 1)
              pool_scan(xp + row, 1, (int32_t)row, n, best, at);
            else
              pool_scan(xp + row, sw, (int32_t)row, n, best, at);
          }
        }
        const size_t o = (p * a->out_h + oy) * a->out_w + ox0;
        memcpy(y + o, best, n * sizeof *best);
        memcpy(argmax + o, at, n * sizeof *at);
      }
    }
  }
  return DPT_OK;
}

dpt_status dpt_cpu_maxpool_bwd(dpt_backend *be, const dpt_maxpool_bwd_args *a) {
  (void)be;
  const dpt_pool_geom *g = &a->g;
  const size_t plane = g->h * g->w;
  const size_t out_plane = a->out_h * a->out_w;
  const float *dy = dpt_cpu_f32(a->dy);
  const int32_t *argmax = dpt_cpu_i32(a->argmax);
  float *dx = dpt_cpu_f32(a->dx);
  for (size_t i = 0; i < g->planes * plane; ++i)
    dx[i] = 0.0f;
  for (size_t p = 0; p < g->planes; ++p) {
    for (size_t o = 0; o < out_plane; ++o) {
      const int32_t at = argmax[p * out_plane + o];
      /* An index that maxpool_fwd cannot have produced is dropped rather than written out of
       * the plane. */
      if (at < 0 || (size_t)at >= plane) continue;
      dx[p * plane + (size_t)at] += dy[p * out_plane + o];
    }
  }
  return DPT_OK;
}

dpt_status dpt_cpu_embed_gather(dpt_backend *be, const dpt_embed_gather_args *a) {
  (void)be;
  const float *table = dpt_cpu_f32(a->table);
  const int32_t *idx = dpt_cpu_i32(a->idx);
  float *out = dpt_cpu_f32(a->out);
  for (size_t i = 0; i < a->n; ++i) {
    float *row = out + i * a->dim;
    const int32_t t = idx[i];
    if (t < 0 || (size_t)t >= a->vocab) {
      for (size_t d = 0; d < a->dim; ++d)
        row[d] = NAN;
      continue;
    }
    memcpy(row, table + (size_t)t * a->dim, a->dim * sizeof(float));
  }
  return DPT_OK;
}

dpt_status dpt_cpu_embed_scatter_add(dpt_backend *be, const dpt_embed_scatter_add_args *a) {
  (void)be;
  const float *dout = dpt_cpu_f32(a->dout);
  const int32_t *idx = dpt_cpu_i32(a->idx);
  float *dtable = dpt_cpu_f32(a->dtable);
  for (size_t i = 0; i < a->n; ++i) {
    const int32_t t = idx[i];
    if (t < 0 || (size_t)t >= a->vocab) continue;
    float *row = dtable + (size_t)t * a->dim;
    const float *src = dout + i * a->dim;
    for (size_t d = 0; d < a->dim; ++d)
      row[d] += src[d];
  }
  return DPT_OK;
}

dpt_status dpt_cpu_axpy(dpt_backend *be, const dpt_axpy_args *a) {
  (void)be;
  const float *x = dpt_cpu_f32(a->x);
  float *y = dpt_cpu_f32(a->y);
  for (size_t i = 0; i < a->n; ++i)
    y[i] += a->alpha * x[i];
  return DPT_OK;
}

dpt_status dpt_cpu_scale(dpt_backend *be, const dpt_scale_args *a) {
  (void)be;
  float *x = dpt_cpu_f32(a->x);
  for (size_t i = 0; i < a->n; ++i)
    x[i] *= a->alpha;
  return DPT_OK;
}

dpt_status dpt_cpu_sum(dpt_backend *be, const dpt_sum_args *a) {
  (void)be;
  const float *x = dpt_cpu_f32(a->x);
  double s = 0.0;
  for (size_t i = 0; i < a->n; ++i)
    s += x[i];
  *a->out = s;
  return DPT_OK;
}

dpt_status dpt_cpu_sumsq(dpt_backend *be, const dpt_sumsq_args *a) {
  (void)be;
  const float *x = dpt_cpu_f32(a->x);
  double s = 0.0;
  for (size_t i = 0; i < a->n; ++i)
    s += (double)x[i] * x[i];
  *a->out = s;
  return DPT_OK;
}

dpt_status dpt_cpu_count_nonfinite(dpt_backend *be, const dpt_count_nonfinite_args *a) {
  (void)be;
  const float *x = dpt_cpu_f32(a->x);
  uint64_t count = 0;
  for (size_t i = 0; i < a->n; ++i)
    count += !isfinite(x[i]);
  *a->out = count;
  return DPT_OK;
}

/* PyTorch's SGD (dampening 0) in float: the weight-decay term is skipped when weight_decay ==
 * 0 (as PyTorch does, so an infinite weight does not turn into NaN through 0 * inf). One loop
 * per combination of options, each option constant inside: no branch in the loop, so it
 * vectorizes (the arithmetic, and so the result, is the same in each). */
static inline void sgd_loop(size_t n, float *restrict w, const float *restrict grad,
                            float *restrict vel, float lr, float mu, float wd, int has_wd,
                            int has_vel, int nesterov) {
  for (size_t i = 0; i < n; ++i) {
    float g = grad[i];
    if (has_wd) g += wd * w[i];
    float step = g;
    if (has_vel) {
      const float v = mu * vel[i] + g;
      vel[i] = v;
      step = nesterov ? g + mu * v : v;
    }
    w[i] -= lr * step;
  }
}

dpt_status dpt_cpu_sgd_update(dpt_backend *be, const dpt_sgd_update_args *a) {
  (void)be;
  const dpt_sgd_params *p = &a->p;
  float *w = dpt_cpu_f32(a->w);
  const float *grad = dpt_cpu_f32(a->grad);
  float *vel = a->velocity.buf != NULL ? dpt_cpu_f32(a->velocity) : NULL;
  const float lr = p->lr, mu = p->momentum, wd = p->weight_decay;
  const int has_wd = wd != 0.0f;
  if (vel == NULL) {
    if (has_wd)
      sgd_loop(a->n, w, grad, NULL, lr, mu, wd, 1, 0, 0);
    else
      sgd_loop(a->n, w, grad, NULL, lr, mu, wd, 0, 0, 0);
  } else if (p->nesterov) {
    if (has_wd)
      sgd_loop(a->n, w, grad, vel, lr, mu, wd, 1, 1, 1);
    else
      sgd_loop(a->n, w, grad, vel, lr, mu, wd, 0, 1, 1);
  } else {
    if (has_wd)
      sgd_loop(a->n, w, grad, vel, lr, mu, wd, 1, 1, 0);
    else
      sgd_loop(a->n, w, grad, vel, lr, mu, wd, 0, 1, 0);
  }
  return DPT_OK;
}

/* PyTorch's AdamW (single-tensor path), with the scalars of dpt_adamw_scalars_of(). */
dpt_status dpt_cpu_adamw_update(dpt_backend *be, const dpt_adamw_update_args *a) {
  (void)be;
  const dpt_adamw_params *p = &a->p;
  const dpt_adamw_scalars k = dpt_adamw_scalars_of(p);
  float *w = dpt_cpu_f32(a->w);
  const float *grad = dpt_cpu_f32(a->grad);
  float *m = dpt_cpu_f32(a->m);
  float *v = dpt_cpu_f32(a->v);
  for (size_t i = 0; i < a->n; ++i) {
    const float g = grad[i];
    w[i] *= k.decay;
    m[i] = p->beta1 * m[i] + k.one_minus_b1 * g;
    v[i] = p->beta2 * v[i] + k.one_minus_b2 * g * g;
    const float denom = sqrtf(v[i]) / k.bc2_sqrt + p->eps;
    w[i] -= k.step_size * (m[i] / denom);
  }
  return DPT_OK;
}

dpt_status dpt_cpu_f32_to_f16(dpt_backend *be, const dpt_f32_to_f16_args *a) {
  (void)be;
  const float *src = dpt_cpu_f32(a->src);
  uint16_t *dst = dpt_cpu_u16(a->dst);
  dpt_half_from_f32_n(dst, src, a->n);
  return DPT_OK;
}

dpt_status dpt_cpu_f16_to_f32(dpt_backend *be, const dpt_f16_to_f32_args *a) {
  (void)be;
  const uint16_t *src = dpt_cpu_u16(a->src);
  float *dst = dpt_cpu_f32(a->dst);
  dpt_half_to_f32_n(dst, src, a->n);
  return DPT_OK;
}

dpt_status dpt_cpu_f32_to_bf16(dpt_backend *be, const dpt_f32_to_bf16_args *a) {
  (void)be;
  const float *src = dpt_cpu_f32(a->src);
  uint16_t *dst = dpt_cpu_u16(a->dst);
  for (size_t i = 0; i < a->n; ++i)
    dst[i] = dpt_bfloat_from_f32(src[i]);
  return DPT_OK;
}

dpt_status dpt_cpu_bf16_to_f32(dpt_backend *be, const dpt_bf16_to_f32_args *a) {
  (void)be;
  const uint16_t *src = dpt_cpu_u16(a->src);
  float *dst = dpt_cpu_f32(a->dst);
  for (size_t i = 0; i < a->n; ++i)
    dst[i] = dpt_bfloat_to_f32(src[i]);
  return DPT_OK;
}
