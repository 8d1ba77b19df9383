/* The op conformance harness and main(): see conformance.h for what a case is and what is
 * checked. Usage: conformance <backend> [device-index]. Exit status: 0 all ops conform,
 * 1 a failure, 2 usage, 77 the backend is not compiled in or has no device (ctest SKIP).
 * CK_RUN_CASE=<op name> runs one op only. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "conformance.h"

#include "backends/backend_impl.h" /* dpt_buffer_map_host */

#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONF_GUARD 16 /* guard elements after a tensor; before it: 16..20 */

static const uint32_t sentinel32 = 0x7FA5A5A5u; /* a signalling-NaN pattern nobody writes */
static const uint16_t sentinel16 = 0x7DA5u;     /* a binary16 NaN pattern */

static dpt_backend *g_test; /* backend under test */
static dpt_backend *g_ref;  /* CPU reference (a second instance when testing the CPU) */

/* ---- helpers for generators --------------------------------------------------------------- */

uint64_t conf_rng_next(conf_rng *rng) {
  /* splitmix64: tiny, good enough, identical everywhere */
  uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double conf_rng_unit(conf_rng *rng) {
  return (double)(conf_rng_next(rng) >> 11) * 0x1.0p-53;
}

int64_t conf_rng_int(conf_rng *rng, int64_t lo, int64_t hi) {
  uint64_t span = (uint64_t)(hi - lo) + 1u;
  return lo + (int64_t)(span == 0 ? conf_rng_next(rng) : conf_rng_next(rng) % span);
}

float conf_f16_to_f32(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 0x1F;
  unsigned mant = h & 0x3FFu;
  float v;
  if (exp == 0x1F) {
    v = mant ? NAN : INFINITY;
  } else if (exp == 0) {
    v = ldexpf((float)mant, -24);
  } else {
    v = ldexpf((float)(mant | 0x400u), exp - 25);
  }
  return sign ? -v : v;
}

conf_case *conf_new_case(conf_list *list, const char *fmt, ...) {
  if (list->count == list->cap) {
    int cap = list->cap ? 2 * list->cap : 16;
    conf_case *grown = realloc(list->cases, (size_t)cap * sizeof *grown);
    if (!grown) {
      fprintf(stderr, "conformance: out of host memory\n");
      abort();
    }
    list->cases = grown;
    list->cap = cap;
  }
  conf_case *c = &list->cases[list->count++];
  memset(c, 0, sizeof *c);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->label, sizeof c->label, fmt, ap);
  va_end(ap);
  return c;
}

conf_tensor *conf_add_tensor(conf_case *c, const char *name, conf_dtype dtype, conf_role role,
                             size_t rows, size_t cols) {
  ck_assert_msg(c->ntensors < CONF_MAX_TENSORS, "%s: too many tensors", c->label);
  conf_tensor *t = &c->t[c->ntensors++];
  memset(t, 0, sizeof *t);
  t->name = name;
  t->dtype = dtype;
  t->role = role;
  t->rows = rows;
  t->cols = cols;
  t->ld = cols;
  t->lo = -1.0;
  t->hi = 1.0;
  if (role == CONF_OUT && dtype != CONF_I32) {
    t->init = CONF_INIT_NAN;
  } else if (dtype == CONF_F16 || dtype == CONF_BF16) {
    t->init = CONF_INIT_F16_BITS;
  } else if (dtype == CONF_I32) {
    t->init = CONF_INIT_INT;
    t->lo = -777;
    t->hi = -777;
  } else {
    t->init = CONF_INIT_UNIFORM;
  }
  t->cmp = dtype == CONF_F32 ? CONF_CMP_NORM : CONF_CMP_EXACT;
  t->tol = 1e-6;
  t->finite = dtype == CONF_F32 && role != CONF_IN;
  return t;
}

conf_scalar *conf_add_scalar(conf_case *c, const char *name, double abs_tol, double rel_tol) {
  ck_assert_msg(c->nscalars < CONF_MAX_SCALARS, "%s: too many scalars", c->label);
  conf_scalar *s = &c->s[c->nscalars++];
  s->name = name;
  s->abs_tol = abs_tol;
  s->rel_tol = rel_tol;
  return s;
}

/* ---- tensor layout ------------------------------------------------------------------------ */

static size_t esize(conf_dtype d) {
  return d == CONF_F16 || d == CONF_BF16 ? 2 : 4;
}

static size_t extent(const conf_tensor *t) {
  return t->rows == 0 || t->cols == 0 ? 0 : (t->rows - 1) * t->ld + t->cols;
}

typedef struct layout {
  size_t pre[CONF_MAX_TENSORS];   /* elements before the tensor = its offset */
  size_t total[CONF_MAX_TENSORS]; /* elements in the buffer */
} layout;

static int is_elem(const conf_tensor *t, size_t pre, size_t p) {
  if (p < pre || p >= pre + extent(t)) return 0;
  return (p - pre) % t->ld < t->cols;
}

static size_t elem_pos(const conf_tensor *t, size_t pre, size_t i) {
  return pre + (i / t->cols) * t->ld + i % t->cols;
}

static void put_sentinel(unsigned char *buf, conf_dtype d, size_t p) {
  if (esize(d) == 2) {
    memcpy(buf + 2 * p, &sentinel16, 2);
  } else {
    memcpy(buf + 4 * p, &sentinel32, 4);
  }
}

static int is_sentinel(const unsigned char *buf, conf_dtype d, size_t p) {
  if (esize(d) == 2) return memcmp(buf + 2 * p, &sentinel16, 2) == 0;
  return memcmp(buf + 4 * p, &sentinel32, 4) == 0;
}

/* ---- initial values ----------------------------------------------------------------------- */

static float special_f32(conf_rng *r) {
  static const float table[] = {0.0f,       -0.0f,         INFINITY,        -INFINITY,
                                NAN,        65504.0f,      65519.996f,      65520.0f,
                                65536.0f,   0x1p-24f,      0x1p-25f,        0x1.00002p-25f,
                                0x1.8p-24f, 0x1p-14f,      0x1.ff8p-15f,    1e-30f,
                                1e30f,      3.4028235e38f, 1.17549435e-38f, 1e-45f};
  double sign = conf_rng_next(r) & 1 ? -1.0 : 1.0;
  switch (conf_rng_int(r, 0, 7)) {
  case 0:
    return (float)(sign * 4.0 * conf_rng_unit(r));
  case 1: { /* exactly halfway between two adjacent finite binary16 values: ties to even */
    uint16_t h = (uint16_t)conf_rng_int(r, 0, 0x7BFF);
    double a = conf_f16_to_f32(h);
    double b = h == 0x7BFF ? 65536.0 : conf_f16_to_f32((uint16_t)(h + 1));
    return (float)(sign * 0.5 * (a + b));
  }
  case 2: /* exactly representable */
    return (float)(sign * conf_f16_to_f32((uint16_t)conf_rng_int(r, 0, 0x7BFF)));
  case 3: /* binary16 subnormal range */
    return (float)(sign * conf_rng_unit(r) * 0x1p-14);
  case 4: /* around the overflow threshold */
    return (float)(sign * (65000.0 + 1000.0 * conf_rng_unit(r)));
  case 5:
    return table[conf_rng_int(r, 0, (int64_t)(sizeof table / sizeof table[0]) - 1)];
  case 6: { /* any bit pattern */
    uint32_t bits = (uint32_t)conf_rng_next(r);
    float f;
    memcpy(&f, &bits, 4);
    return f;
  }
  default:
    return (float)(sign * ldexp(1.0 + conf_rng_unit(r), (int)conf_rng_int(r, -30, 20)));
  }
}

/* Fills the packed logical elements of tensor ti. */
static void init_values(const conf_case *c, int ti, void *vals, conf_rng *r) {
  const conf_tensor *t = &c->t[ti];
  size_t n = t->rows * t->cols;
  float *f = vals;
  int32_t *s = vals;
  uint16_t *h = vals;
  if (t->init == CONF_INIT_CUSTOM) {
    ck_assert_msg(c->init != NULL, "%s: tensor %s has custom init but no init()", c->label,
                  t->name);
    c->init(c, ti, vals, r);
    return;
  }
  for (size_t i = 0; i < n; i++) {
    switch (t->init) {
    case CONF_INIT_UNIFORM:
      if (t->dtype == CONF_F32) {
        f[i] = (float)(t->lo + (t->hi - t->lo) * conf_rng_unit(r));
      } else if (t->dtype == CONF_I32) {
        s[i] = (int32_t)conf_rng_int(r, (int64_t)t->lo, (int64_t)t->hi);
      } else {
        h[i] = (uint16_t)conf_rng_next(r);
      }
      break;
    case CONF_INIT_INT: {
      int64_t v = conf_rng_int(r, (int64_t)t->lo, (int64_t)t->hi);
      if (t->p_bad > 0 && conf_rng_unit(r) < t->p_bad) {
        static const int64_t bad[] = {0, 0, INT32_MIN, INT32_MAX};
        int k = (int)conf_rng_int(r, 0, 3);
        v = k == 0 ? (int64_t)t->lo - 1 : k == 1 ? (int64_t)t->hi + 1 : bad[k];
      }
      if (t->dtype == CONF_F32) {
        f[i] = (float)v;
      } else if (t->dtype == CONF_I32) {
        s[i] = (int32_t)v;
      } else {
        h[i] = (uint16_t)v;
      }
      break;
    }
    case CONF_INIT_NAN:
      if (t->dtype == CONF_F32) {
        f[i] = NAN;
      } else if (t->dtype == CONF_I32) {
        s[i] = -777;
      } else {
        h[i] = t->dtype == CONF_BF16 ? 0x7FC0u : 0x7E00u;
      }
      break;
    case CONF_INIT_SPECIAL_F32:
      ck_assert_msg(t->dtype == CONF_F32, "%s: special init needs F32", c->label);
      f[i] = special_f32(r);
      break;
    case CONF_INIT_F16_BITS:
      ck_assert_msg(esize(t->dtype) == 2, "%s: f16 bits init needs F16 or BF16", c->label);
      h[i] = (uint16_t)conf_rng_next(r);
      break;
    case CONF_INIT_CUSTOM:
      break;
    }
  }
}

/* ---- running and checking ---------------------------------------------------------------- */

typedef struct msgbuf {
  char text[1024];
  size_t len;
  int failures;
} msgbuf;

/* Counts a failure and appends its printf-formatted description to m->text. */
static void record(msgbuf *m, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void record(msgbuf *m, const char *fmt, ...) {
  m->failures++;
  if (m->len + 4 >= sizeof m->text) return;
  if (m->len) m->len += (size_t)snprintf(m->text + m->len, sizeof m->text - m->len, "; ");
  if (m->len >= sizeof m->text) return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(m->text + m->len, sizeof m->text - m->len, fmt, ap);
  va_end(ap);
  if (w > 0) m->len += (size_t)w;
  if (m->len >= sizeof m->text) m->len = sizeof m->text - 1;
}

/* Runs case c on `be` from the host images `init`; the buffers' final contents go to `out`.
 * Returns 0 on success, else records why in m. */
static int run_case(dpt_backend *be, const char *who, const conf_case *c, const layout *lay,
                    unsigned char *const *init, unsigned char **out, double *scalars, msgbuf *m) {
  dpt_buffer *buf[CONF_MAX_TENSORS] = {0};
  size_t off[CONF_MAX_TENSORS];
  int ok = 1;
  dpt_status st = DPT_OK;
  for (int i = 0; i < c->ntensors && ok; i++) {
    size_t bytes = lay->total[i] * esize(c->t[i].dtype);
    off[i] = lay->pre[i];
    st = dpt_buffer_alloc(be, bytes, &buf[i]);
    if (st == DPT_OK) st = dpt_buffer_upload(buf[i], 0, init[i], bytes);
    if (st != DPT_OK) {
      record(m, "%s: setting up %s: %s: %s", who, c->t[i].name, dpt_status_str(st),
             dpt_last_error());
      ok = 0;
    }
  }
  if (ok) {
    st = c->run(be, c, buf, off, scalars);
    if (st != DPT_OK) {
      record(m, "%s: op returned %s: %s", who, dpt_status_str(st), dpt_last_error());
      ok = 0;
    }
  }
  for (int i = 0; i < c->ntensors && ok; i++) {
    st = dpt_buffer_download(buf[i], 0, out[i], lay->total[i] * esize(c->t[i].dtype));
    if (st != DPT_OK) {
      record(m, "%s: downloading %s: %s: %s", who, c->t[i].name, dpt_status_str(st),
             dpt_last_error());
      ok = 0;
    }
  }
  for (int i = 0; i < c->ntensors; i++)
    dpt_buffer_free(buf[i]);
  return ok ? 0 : -1;
}

static double get_f(const unsigned char *b, size_t p) {
  float f;
  memcpy(&f, b + 4 * p, 4);
  return f;
}

/* Guards, gaps, unchanged inputs, finite outputs: the checks that hold on every backend. */
static void check_layout(const char *who, const conf_case *c, const layout *lay,
                         unsigned char *const *init, unsigned char *const *res, msgbuf *m) {
  for (int i = 0; i < c->ntensors; i++) {
    const conf_tensor *t = &c->t[i];
    size_t es = esize(t->dtype), bad = 0, first = 0;
    for (size_t p = 0; p < lay->total[i]; p++) {
      if (!is_elem(t, lay->pre[i], p) && !is_sentinel(res[i], t->dtype, p)) {
        if (!bad++) first = p;
      }
    }
    if (bad) {
      const char *where = first < lay->pre[i]                ? "before"
                          : first >= lay->pre[i] + extent(t) ? "after"
                                                             : "in a row gap of";
      record(m,
             "%s: %zu guard element(s) overwritten, first %s %s at element %lld of it (%zu "
             "elements)",
             who, bad, where, t->name, (long long)first - (long long)lay->pre[i], extent(t));
    }
    if (t->role == CONF_IN) {
      size_t changed = 0;
      for (size_t j = 0; j < t->rows * t->cols; j++) {
        size_t p = elem_pos(t, lay->pre[i], j);
        if (memcmp(res[i] + p * es, init[i] + p * es, es) != 0) changed++;
      }
      if (changed) record(m, "%s: input %s modified (%zu elements)", who, t->name, changed);
    } else if (t->finite && t->dtype == CONF_F32) {
      size_t nonfinite = 0, firstj = 0;
      for (size_t j = 0; j < t->rows * t->cols; j++) {
        if (!isfinite(get_f(res[i], elem_pos(t, lay->pre[i], j))) && !nonfinite++) firstj = j;
      }
      if (nonfinite) {
        record(m, "%s: %zu non-finite value(s) in %s, first at [%zu,%zu]", who, nonfinite, t->name,
               firstj / t->cols, firstj % t->cols);
      }
    }
  }
}

static int f16_is_nan(uint16_t h) {
  return (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0;
}

static int bf16_is_nan(uint16_t h) {
  return (h & 0x7FFFu) > 0x7F80u;
}

/* Compares the outputs of the tested backend with the reference. Returns the worst
 * normalized error over CONF_CMP_NORM outputs (for the report). */
static double compare(const conf_case *c, const layout *lay, unsigned char *const *ref,
                      unsigned char *const *res, msgbuf *m) {
  double worst = 0.0;
  for (int i = 0; i < c->ntensors; i++) {
    const conf_tensor *t = &c->t[i];
    size_t n = t->rows * t->cols;
    if (t->role == CONF_IN || n == 0) continue;
    if (t->dtype == CONF_F32 && t->cmp == CONF_CMP_NORM) {
      double maxref = 0.0, maxerr = 0.0;
      size_t worst_j = 0, special_bad = 0, special_j = 0;
      for (size_t j = 0; j < n; j++) {
        double r = get_f(ref[i], elem_pos(t, lay->pre[i], j));
        if (isfinite(r) && fabs(r) > maxref) maxref = fabs(r);
      }
      for (size_t j = 0; j < n; j++) {
        size_t p = elem_pos(t, lay->pre[i], j);
        double r = get_f(ref[i], p), v = get_f(res[i], p);
        if (!isfinite(r) || !isfinite(v)) {
          int same = (isnan(r) && isnan(v)) || r == v;
          if (!same && !special_bad++) special_j = j;
          continue;
        }
        double e = fabs(r - v);
        if (e > maxerr) {
          maxerr = e;
          worst_j = j;
        }
      }
      double norm = maxerr / (maxref > 1e-30 ? maxref : 1e-30);
      if (norm > worst) worst = norm;
      if (special_bad) {
        size_t p = elem_pos(t, lay->pre[i], special_j);
        record(m, "%s: %zu non-finite mismatch(es), first [%zu,%zu] ref %g got %g", t->name,
               special_bad, special_j / t->cols, special_j % t->cols, get_f(ref[i], p),
               get_f(res[i], p));
      }
      if (norm > t->tol) {
        size_t p = elem_pos(t, lay->pre[i], worst_j);
        record(m, "%s: normalized error %.3g > tol %.3g, worst [%zu,%zu] ref %.9g got %.9g",
               t->name, norm, t->tol, worst_j / t->cols, worst_j % t->cols, get_f(ref[i], p),
               get_f(res[i], p));
      }
      continue;
    }
    size_t es = esize(t->dtype), bad = 0, first = 0;
    for (size_t j = 0; j < n; j++) {
      size_t p = elem_pos(t, lay->pre[i], j);
      int same = memcmp(ref[i] + p * es, res[i] + p * es, es) == 0;
      if (!same && t->dtype == CONF_F32) {
        same = isnan(get_f(ref[i], p)) && isnan(get_f(res[i], p));
      } else if (!same && es == 2) {
        uint16_t a, b;
        memcpy(&a, ref[i] + p * es, 2);
        memcpy(&b, res[i] + p * es, 2);
        same = t->dtype == CONF_F16 ? f16_is_nan(a) && f16_is_nan(b)
                                    : bf16_is_nan(a) && bf16_is_nan(b);
      }
      if (!same && !bad++) first = j;
    }
    if (bad) {
      size_t p = elem_pos(t, lay->pre[i], first);
      uint32_t a = 0, b = 0;
      memcpy(&a, ref[i] + p * es, es);
      memcpy(&b, res[i] + p * es, es);
      if (t->dtype == CONF_I32) {
        record(m, "%s: %zu of %zu values differ, first [%zu,%zu] ref %d got %d", t->name, bad, n,
               first / t->cols, first % t->cols, (int32_t)a, (int32_t)b);
      } else {
        record(m, "%s: %zu of %zu values differ, first [%zu,%zu] ref bits 0x%0*x got 0x%0*x",
               t->name, bad, n, first / t->cols, first % t->cols, (int)(2 * es), (unsigned)a,
               (int)(2 * es), (unsigned)b);
      }
    }
  }
  return worst;
}

static void compare_scalars(const conf_case *c, const double *ref, const double *res, msgbuf *m) {
  for (int i = 0; i < c->nscalars; i++) {
    const conf_scalar *s = &c->s[i];
    double r = ref[i], v = res[i];
    int ok;
    if (isnan(r) || isnan(v) || isinf(r) || isinf(v)) {
      ok = (isnan(r) && isnan(v)) || r == v;
    } else {
      ok = fabs(r - v) <= s->abs_tol + s->rel_tol * fabs(r);
    }
    if (!ok) {
      record(m, "%s: ref %.17g got %.17g (tol %.3g + %.3g*|ref|)", s->name, r, v, s->abs_tol,
             s->rel_tol);
    }
  }
}

static uint64_t case_seed(dpt_op op, int ci, int ti) {
  return 0x5EED0000ull + (uint64_t)op * 1000003ull + (uint64_t)ci * 1009ull + (uint64_t)ti;
}

/* The host images of one case: initial contents, and the final contents on each backend. */
typedef struct images {
  layout lay;
  unsigned char *init[CONF_MAX_TENSORS]; /* uploaded to both backends */
  unsigned char *ref[CONF_MAX_TENSORS];  /* downloaded from the reference */
  unsigned char *res[CONF_MAX_TENSORS];  /* downloaded from the tested backend */
} images;

static void images_prepare(images *im, dpt_op op, int ci, const conf_case *c) {
  memset(im, 0, sizeof *im);
  for (int i = 0; i < c->ntensors; i++) {
    const conf_tensor *t = &c->t[i];
    ck_assert_msg(t->ld >= t->cols, "%s: %s ld < cols", c->label, t->name);
    size_t es = esize(t->dtype), n = t->rows * t->cols;
    im->lay.pre[i] = CONF_GUARD + (size_t)(ci * 3 + i) % 5;
    im->lay.total[i] = im->lay.pre[i] + extent(t) + CONF_GUARD;
    im->init[i] = malloc(im->lay.total[i] * es);
    im->ref[i] = malloc(im->lay.total[i] * es);
    im->res[i] = malloc(im->lay.total[i] * es);
    void *vals = malloc(n ? n * es : 1);
    ck_assert_msg(im->init[i] && im->ref[i] && im->res[i] && vals, "out of host memory");
    for (size_t p = 0; p < im->lay.total[i]; p++)
      put_sentinel(im->init[i], t->dtype, p);
    conf_rng rng = {case_seed(op, ci, i)};
    init_values(c, i, vals, &rng);
    for (size_t j = 0; j < n; j++) {
      memcpy(im->init[i] + elem_pos(t, im->lay.pre[i], j) * es, (unsigned char *)vals + j * es, es);
    }
    free(vals);
  }
}

static void images_free(images *im, const conf_case *c) {
  for (int i = 0; i < c->ntensors; i++) {
    free(im->init[i]);
    free(im->ref[i]);
    free(im->res[i]);
  }
}

/* All checks of one case after both runs; returns the worst normalized error. */
static double verify(const conf_case *c, const images *im, int ok_ref, int ok_res,
                     const double *sref, const double *sres, msgbuf *m) {
  double worst = 0.0;
  if (ok_ref) check_layout("reference", c, &im->lay, im->init, im->ref, m);
  if (ok_res) check_layout("tested", c, &im->lay, im->init, im->res, m);
  if (ok_ref && ok_res) {
    worst = compare(c, &im->lay, im->ref, im->res, m);
    compare_scalars(c, sref, sres, m);
  }
  return worst;
}

/* Runs one case; returns 1 when it passed. */
static int run_one(dpt_op op, int ci, const conf_case *c) {
  images im;
  double sref[CONF_MAX_SCALARS], sres[CONF_MAX_SCALARS];
  msgbuf m = {.len = 0, .failures = 0};

  for (int i = 0; i < CONF_MAX_SCALARS; i++)
    sref[i] = sres[i] = NAN;
  images_prepare(&im, op, ci, c);
  int ok_ref = run_case(g_ref, "reference", c, &im.lay, im.init, im.ref, sref, &m) == 0;
  int ok_res = run_case(g_test, "tested", c, &im.lay, im.init, im.res, sres, &m) == 0;
  double worst = verify(c, &im, ok_ref, ok_res, sref, sres, &m);
  if (m.failures) {
    printf("  FAIL %-17s %s: %s\n", dpt_op_name(op), c->label, m.text);
  } else {
    printf("  ok   %-17s %s (err %.2g)\n", dpt_op_name(op), c->label, worst);
  }
  images_free(&im, c);
  return m.failures == 0;
}

static conf_gen_fn find_generator(dpt_op op) {
  for (size_t i = 0; i < conf_generator_count; i++) {
    if (conf_generators[i].op == op) return conf_generators[i].gen;
  }
  return NULL;
}

START_TEST(test_op) {
  dpt_op op = (dpt_op)_i;
  const char *name = dpt_op_name(op);
  conf_gen_fn gen = find_generator(op);
  ck_assert_msg(name != NULL, "dpt_op_name(%d) is NULL", _i);
  ck_assert_msg(
      gen != NULL,
      "op '%s' has no conformance case generator: add one to tests/backends/conformance_cases.c",
      name);
  ck_assert_msg(dpt_backend_supports(g_ref, op), "the CPU reference does not support op '%s'",
                name);
  if (conf_op_optional(op) && !dpt_backend_supports(g_test, op)) {
    printf("%s: not on the tested backend (optional: layers use another path)\n", name);
    return;
  }
  ck_assert_msg(dpt_backend_supports(g_test, op), "the tested backend does not support op '%s'",
                name);

  conf_list list = {0};
  gen(&list);
  ck_assert_msg(list.count > 0, "the generator of op '%s' produced no case", name);
  int passed = 0;
  char first_failed[192] = "";
  for (int ci = 0; ci < list.count; ci++) {
    if (run_one(op, ci, &list.cases[ci])) {
      passed++;
    } else if (!first_failed[0]) {
      snprintf(first_failed, sizeof first_failed, "%s", list.cases[ci].label);
    }
  }
  int count = list.count;
  free(list.cases);
  printf("%s: %d/%d cases passed\n", name, passed, count);
  fflush(stdout);
  ck_assert_msg(passed == count, "op '%s': %d of %d cases failed (first: %s)", name, count - passed,
                count, first_failed);
}
END_TEST

/* Every generator names a distinct op of the list. */
START_TEST(test_registry) {
  for (size_t i = 0; i < conf_generator_count; i++) {
    ck_assert_msg((int)conf_generators[i].op >= 0 && conf_generators[i].op < DPT_OP_COUNT,
                  "generator %zu names op %d outside DPT_OP_MAP", i, (int)conf_generators[i].op);
    ck_assert_msg(conf_generators[i].gen != NULL, "generator %zu is NULL", i);
    for (size_t j = 0; j < i; j++) {
      ck_assert_msg(conf_generators[j].op != conf_generators[i].op, "op '%s' has two generators",
                    dpt_op_name(conf_generators[i].op));
    }
  }
}
END_TEST

/* The harness must be able to fail: each corruption below, applied to the tested backend's
 * image of an otherwise clean result, must be reported (and the clean result must not). */
enum {
  MUT_NONE,
  MUT_GUARD_BEFORE,
  MUT_GUARD_AFTER,
  MUT_ROW_GAP,
  MUT_INPUT_CHANGED,
  MUT_OUTPUT_NAN,
  MUT_F32_OFF,
  MUT_F32_WITHIN_TOL,
  MUT_I32_OFF,
  MUT_F16_OFF,
  MUT_F16_OTHER_NAN,
  MUT_REF_NAN,
  MUT_SCALAR_OFF,
  MUT_SCALAR_BOTH_NAN,
  MUT_COUNT
};

START_TEST(test_harness_detects) {
  static const int must_fail[MUT_COUNT] = {
      [MUT_GUARD_BEFORE] = 1, [MUT_GUARD_AFTER] = 1, [MUT_ROW_GAP] = 1, [MUT_INPUT_CHANGED] = 1,
      [MUT_OUTPUT_NAN] = 1,   [MUT_F32_OFF] = 1,     [MUT_I32_OFF] = 1, [MUT_F16_OFF] = 1,
      [MUT_REF_NAN] = 1,      [MUT_SCALAR_OFF] = 1,
  };
  int mut = _i;
  conf_list list = {0};
  conf_case *c = conf_new_case(&list, "harness self-test");
  conf_tensor *a = conf_add_tensor(c, "A", CONF_F32, CONF_IN, 2, 3);
  a->ld = 5;
  conf_tensor *o = conf_add_tensor(c, "O", CONF_F32, CONF_OUT, 3, 2);
  o->ld = 4;
  o->tol = 1e-3;
  conf_add_tensor(c, "I", CONF_I32, CONF_OUT, 1, 3);
  conf_add_tensor(c, "H", CONF_F16, CONF_OUT, 1, 3);
  conf_add_scalar(c, "s", 1e-6, 0.0);

  images im;
  images_prepare(&im, DPT_OP_GEMM, 7, c);
  /* a clean result: outputs hold 1, 2, 3, ... (f16: 0x3C00 + j) on both backends */
  for (int i = 0; i < c->ntensors; i++) {
    const conf_tensor *t = &c->t[i];
    size_t es = esize(t->dtype);
    memcpy(im.ref[i], im.init[i], im.lay.total[i] * es);
    for (size_t j = 0; t->role != CONF_IN && j < t->rows * t->cols; j++) {
      unsigned char *p = im.ref[i] + elem_pos(t, im.lay.pre[i], j) * es;
      float f = (float)(j + 1);
      int32_t v = (int32_t)j;
      uint16_t h = (uint16_t)(0x3C00u + j);
      memcpy(p,
             t->dtype == CONF_F32   ? (void *)&f
             : t->dtype == CONF_I32 ? (void *)&v
                                    : (void *)&h,
             es);
    }
    memcpy(im.res[i], im.ref[i], im.lay.total[i] * es);
  }
  double sref[1] = {0.5}, sres[1] = {0.5};
  float f;
  switch (mut) {
  case MUT_GUARD_BEFORE:
    im.res[1][4 * (im.lay.pre[1] - 1)] ^= 1;
    break;
  case MUT_GUARD_AFTER:
    im.res[2][4 * (im.lay.pre[2] + 3 + CONF_GUARD - 1)] ^= 1;
    break;
  case MUT_ROW_GAP:
    im.res[0][4 * (im.lay.pre[0] + 3)] ^= 1;
    break;
  case MUT_INPUT_CHANGED:
    im.res[0][4 * (im.lay.pre[0] + 5)] ^= 1;
    break;
  case MUT_OUTPUT_NAN:
  case MUT_REF_NAN:
    f = NAN;
    memcpy((mut == MUT_REF_NAN ? im.ref : im.res)[1] + 4 * elem_pos(o, im.lay.pre[1], 3), &f, 4);
    break;
  case MUT_F32_OFF:
  case MUT_F32_WITHIN_TOL:
    f = mut == MUT_F32_OFF ? 4.01f : 4.001f; /* element 3 holds 4; max |ref| is 6 */
    memcpy(im.res[1] + 4 * elem_pos(o, im.lay.pre[1], 3), &f, 4);
    break;
  case MUT_I32_OFF:
    im.res[2][4 * (im.lay.pre[2] + 2)] ^= 1;
    break;
  case MUT_F16_OFF:
    im.res[3][2 * (im.lay.pre[3] + 1)] ^= 1;
    break;
  case MUT_F16_OTHER_NAN: {
    uint16_t n1 = 0x7E00, n2 = 0xFE01;
    memcpy(im.ref[3] + 2 * (im.lay.pre[3] + 1), &n1, 2);
    memcpy(im.res[3] + 2 * (im.lay.pre[3] + 1), &n2, 2);
    break;
  }
  case MUT_SCALAR_OFF:
    sres[0] = 0.5 + 1e-5;
    break;
  case MUT_SCALAR_BOTH_NAN:
    sref[0] = sres[0] = NAN;
    break;
  default:
    break;
  }
  msgbuf m = {.len = 0, .failures = 0};
  verify(c, &im, 1, 1, sref, sres, &m);
  images_free(&im, c);
  free(list.cases);
  if (must_fail[mut]) {
    ck_assert_msg(m.failures > 0, "corruption %d was not detected", mut);
  } else {
    ck_assert_msg(m.failures == 0, "corruption %d should pass, got: %s", mut, m.text);
  }
}
END_TEST

static void print_device(const char *what, const dpt_backend *be) {
  dpt_device_info info;
  dpt_status st = dpt_backend_get_info(be, &info);
  if (st == DPT_OK) {
    printf("%s: %s device %d: %s (%s, %s; %s)\n", what, dpt_backend_kind_name(info.backend),
           info.index, info.name, info.vendor, dpt_device_type_name(info.type), info.driver);
  } else {
    printf("%s: device info unavailable: %s\n", what, dpt_last_error());
  }
}

/* Zero-copy host access, which the collectives use instead of staging: a CPU device offers
 * it (unless DPT_VULKAN_FORCE_STAGING asks for the discrete-GPU path), a discrete GPU must not
 * (its map would be a hidden copy). Where offered, the pointer sees the work submitted before
 * the map, and the work submitted after the unmap sees what was written through it. */
START_TEST(test_host_map) {
  enum { N = 1000, SKIP = 8 };
  static float host[N + SKIP];
  dpt_buffer *b = NULL;
  ck_assert_int_eq(dpt_buffer_alloc(g_test, sizeof host, &b), DPT_OK);
  for (int i = 0; i < N + SKIP; ++i)
    host[i] = (float)i;
  ck_assert_int_eq(dpt_buffer_upload(b, 0, host, sizeof host), DPT_OK);
  ck_assert_int_eq(dpt_scale(g_test, N + SKIP, 2.0f, b, 0), DPT_OK); /* pending work */
  void *p = (void *)1;
  ck_assert_int_eq(dpt_buffer_map_host(b, SKIP * sizeof(float), N * sizeof(float), &p), DPT_OK);

  dpt_device_info info;
  ck_assert_int_eq(dpt_backend_get_info(g_test, &info), DPT_OK);
  const char *force = getenv("DPT_VULKAN_FORCE_STAGING");
  const int forced =
      dpt_backend_get_kind(g_test) == DPT_BACKEND_VULKAN && force && strcmp(force, "1") == 0;
  if (info.type == DPT_DEVICE_CPU && !forced)
    ck_assert_msg(p != NULL, "a CPU device offers no zero-copy host access");
  if (info.type == DPT_DEVICE_GPU_DISCRETE || forced)
    ck_assert_msg(p == NULL, "a discrete GPU's memory mapped as if host memory");
  printf("host map: %s\n", p ? "zero-copy" : "none (staged)");
  if (p) {
    float *f = p;
    for (int i = 0; i < N; ++i) {
      ck_assert_msg(f[i] == 2.0f * (float)(i + SKIP), "mapped element %d is %g, expected %g", i,
                    (double)f[i], 2.0 * (i + SKIP));
      f[i] = -(float)i;
    }
  }
  ck_assert_int_eq(dpt_buffer_unmap_host(b, p), DPT_OK);
  if (p) {
    ck_assert_int_eq(dpt_scale(g_test, N + SKIP, 3.0f, b, 0), DPT_OK);
    ck_assert_int_eq(dpt_buffer_download(b, 0, host, sizeof host), DPT_OK);
    for (int i = 0; i < N + SKIP; ++i) {
      const float want = i < SKIP ? 6.0f * (float)i : -3.0f * (float)(i - SKIP);
      ck_assert_msg(host[i] == want, "element %d is %g after the unmap, expected %g", i,
                    (double)host[i], (double)want);
    }
  }
  /* Bad arguments: a range past the end, no out pointer. */
  ck_assert_int_eq(dpt_buffer_map_host(b, sizeof host - 4, 8, &p), DPT_ERR_INVALID_ARG);
  ck_assert_ptr_null(p);
  ck_assert_int_eq(dpt_buffer_map_host(b, 0, 4, NULL), DPT_ERR_INVALID_ARG);
  dpt_buffer_free(b);
}
END_TEST

/* Transfers beside the stream of work (a nonblocking collective's): a fence marks the work
 * submitted so far and a range; a fenced download of the range sees that work's results
 * although work submitted after the fence (on another range) may still be pending, a fenced
 * upload is seen by the work submitted after it. OpenCL and Vulkan make a fence (a forced-staging
 * Vulkan through a snapshot of the range), the CPU none (NULL: the ordinary transfers). */
START_TEST(test_fenced_transfers) {
  enum { N = 4096 };
  static float host[2 * N], got[N];
  dpt_buffer *b = NULL;
  ck_assert_int_eq(dpt_buffer_alloc(g_test, sizeof host, &b), DPT_OK);
  for (int i = 0; i < 2 * N; ++i)
    host[i] = (float)(i % 1000);
  ck_assert_int_eq(dpt_buffer_upload(b, 0, host, sizeof host), DPT_OK);
  ck_assert_int_eq(dpt_scale(g_test, N, 2.0f, b, 0), DPT_OK); /* before the fence: range X */
  dpt_fence *f = dpt_buffer_fence(b, 0, N * sizeof(float));
  const dpt_backend_kind kind = dpt_backend_get_kind(g_test);
  if (kind == DPT_BACKEND_CPU)
    ck_assert_msg(f == NULL, "a fence where none is needed");
  else
    ck_assert_msg(f != NULL, "%s made no fence", dpt_backend_kind_name(kind));
  printf("fence: %s\n", f ? "fenced transfers" : "none (ordered transfers)");
  for (int k = 0; k < 20; ++k) /* after the fence: range Y only */
    ck_assert_int_eq(dpt_scale(g_test, N, k % 2 ? 0.5f : 4.0f, b, N), DPT_OK);
  ck_assert_int_eq(dpt_buffer_download_fenced(b, 0, got, N / 2 * sizeof(float), f), DPT_OK);
  ck_assert_int_eq(
      dpt_buffer_download_fenced(b, N / 2 * sizeof(float), got + N / 2, N / 2 * sizeof(float), f),
      DPT_OK);
  for (int i = 0; i < N; ++i)
    ck_assert_msg(got[i] == 2.0f * host[i], "fenced download: element %d is %g, expected %g", i,
                  (double)got[i], 2.0 * host[i]);
  for (int i = 0; i < N; ++i)
    got[i] = -(float)i;
  ck_assert_int_eq(dpt_buffer_upload_fenced(b, 0, got, sizeof got, f), DPT_OK);
  ck_assert_int_eq(dpt_scale(g_test, N, 3.0f, b, 0), DPT_OK); /* sees the upload */
  /* Bad arguments: a range past the end, no host pointer, outside the fence's range, a fence
   * of another buffer; a fence of a range past the end is none. */
  ck_assert_int_eq(dpt_buffer_download_fenced(b, sizeof host - 4, got, 8, f), DPT_ERR_INVALID_ARG);
  ck_assert_int_eq(dpt_buffer_upload_fenced(b, 0, NULL, 8, f), DPT_ERR_INVALID_ARG);
  ck_assert_ptr_null(dpt_buffer_fence(b, sizeof host - 4, 8));
  if (f) {
    ck_assert_int_eq(dpt_buffer_download_fenced(b, N * sizeof(float) - 4, got, 8, f),
                     DPT_ERR_INVALID_ARG);
    ck_assert_msg(strstr(dpt_last_error(), "outside the fence"), "message: %s", dpt_last_error());
    dpt_buffer *other = NULL;
    ck_assert_int_eq(dpt_buffer_alloc(g_ref, 16, &other), DPT_OK);
    ck_assert_int_eq(dpt_buffer_download_fenced(other, 0, got, 16, f), DPT_ERR_INVALID_ARG);
    ck_assert_msg(strstr(dpt_last_error(), "another buffer"), "message: %s", dpt_last_error());
    dpt_buffer_free(other);
  }
  dpt_fence_free(f);
  /* The same range fenced again at once (a Vulkan snapshot reused while the copy back of the
   * upload above may still be pending): the work before it, the upload and the scale by 3. */
  dpt_fence *again = dpt_buffer_fence(b, 0, N * sizeof(float));
  ck_assert_int_eq(dpt_buffer_download_fenced(b, 0, got, sizeof got, again), DPT_OK);
  for (int i = 0; i < N; ++i)
    ck_assert_msg(got[i] == -3.0f * (float)i, "fenced again: element %d is %g, expected %g", i,
                  (double)got[i], -3.0 * i);
  dpt_fence_free(again);
  /* A fence without a range: dpt_fence_wait returns once the work before it has run. */
  dpt_fence *all = dpt_backend_fence(g_test);
  ck_assert_int_eq(dpt_fence_wait(all), DPT_OK);
  dpt_fence_free(all);
  ck_assert_int_eq(dpt_buffer_download(b, 0, host, sizeof host), DPT_OK);
  for (int i = 0; i < 2 * N; ++i) {
    const float want = i < N ? -3.0f * (float)i : (float)(i % 1000) * 1024.0f;
    ck_assert_msg(host[i] == want, "element %d is %g, expected %g", i, (double)host[i],
                  (double)want);
  }
  dpt_buffer_free(b);
}
END_TEST

int main(int argc, char **argv) {
  dpt_backend_kind kind;
  int count = 0, device = 0;
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: %s <cpu|opencl|vulkan> [device-index]\n", argv[0]);
    return 2;
  }
  if (dpt_backend_kind_parse(argv[1], &kind) != DPT_OK) {
    fprintf(stderr, "conformance: %s\n", dpt_last_error());
    return 2;
  }
  if (argc == 3) device = atoi(argv[2]);
  if (!dpt_backend_compiled(kind)) {
    printf("SKIP: the %s backend is not compiled in\n", argv[1]);
    return 77;
  }
  dpt_status st = dpt_device_count(kind, &count);
  if (st != DPT_OK) {
    fprintf(stderr, "conformance: counting %s devices: %s: %s\n", argv[1], dpt_status_str(st),
            dpt_last_error());
    return 1;
  }
  if (count == 0) {
    printf("SKIP: no %s device: %s\n", argv[1], dpt_last_error());
    return 77;
  }
  if (device < 0 || device >= count) {
    fprintf(stderr, "conformance: device %d out of range (%d devices)\n", device, count);
    return 2;
  }
  st = dpt_backend_create(kind, device, &g_test);
  if (st != DPT_OK) {
    fprintf(stderr, "conformance: creating the %s backend: %s: %s\n", argv[1], dpt_status_str(st),
            dpt_last_error());
    return 1;
  }
  /* The reference runs the direct convolutions as loops: the tested CPU backend, oneDNN. */
  setenv("DPT_CPU_CONV", "reference", 1);
  st = dpt_backend_create(DPT_BACKEND_CPU, 0, &g_ref);
  unsetenv("DPT_CPU_CONV");
  if (st != DPT_OK) {
    fprintf(stderr, "conformance: creating the CPU reference: %s: %s\n", dpt_status_str(st),
            dpt_last_error());
    dpt_backend_destroy(g_test);
    return 1;
  }
  print_device("tested", g_test);
  print_device("reference", g_ref);
  fflush(stdout);

  Suite *s = suite_create("conformance");
  TCase *reg = tcase_create("registry");
  tcase_add_test(reg, test_registry);
  tcase_add_loop_test(reg, test_harness_detects, MUT_NONE, MUT_COUNT);
  suite_add_tcase(s, reg);
  TCase *mem = tcase_create("memory");
  tcase_add_test(mem, test_host_map);
  tcase_add_test(mem, test_fenced_transfers);
  suite_add_tcase(s, mem);
  for (int op = 0; op < DPT_OP_COUNT; op++) {
    const char *name = dpt_op_name((dpt_op)op);
    TCase *tc = tcase_create(name ? name : "unnamed-op");
    /* The gemms run CLBlast's kernels on OpenCL, not ours: CK_EXCLUDE_TAGS=clblast leaves
     * them out (the Oclgrind run, where they take minutes). */
    if (op == DPT_OP_GEMM || op == DPT_OP_GEMM_BATCHED) tcase_set_tags(tc, "clblast");
    tcase_add_loop_test(tc, test_op, op, op + 1);
    suite_add_tcase(s, tc);
  }
  SRunner *sr = srunner_create(s);
  /* One process: the backends (driver threads, device contexts) do not survive fork(). */
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  int run = srunner_ntests_run(sr);
  srunner_free(sr);
  dpt_backend_destroy(g_ref);
  dpt_backend_destroy(g_test);
  if (run == 0) {
    fprintf(stderr, "conformance: no test ran (check CK_RUN_CASE / CK_RUN_SUITE)\n");
    return 1;
  }
  return failed == 0 ? 0 : 1;
}
