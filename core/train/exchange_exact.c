/* The exact exchange (cfg->deterministic; core/train/exchange_exact.h): every group's gradient,
 * batch-norm buffers and loss are summed in 64-bit fixed point, which is associative, so the sum
 * is the same bits whichever replica ran which group and in whatever order the all-reduce adds.
 *
 * The values are cut into slots: each parameter tensor, chunks of the buffers, the loss. A
 * slot's scale is agreed by every replica: the largest binary exponent E of its values over
 * all groups of the batch (an all-gather of each replica's; the maximum is exact), so that
 * |v| < 2^E. With the batch's groups at most 2^H, each value becomes round(v * 2^(50-H-E)), at
 * most 2^(50-H) in magnitude, so any sum of the batch's groups stays below 2^50: exact in a
 * double as well as an int64, which lets the rounding and the local sums run as double
 * arithmetic that vectorizes (the 1.5 * 2^52 trick below). The exchange is in int64. The sum
 * goes back to float once (buffers: divided by the groups, the running statistics' mean). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend_impl.h" /* dpt_buffer_map_host */
#include "base/clock.h"
#include "base/env.h"
#include "base/error.h"
#include "core/train/exchange.h"
#include "core/train/exchange_exact.h"

enum {
  EXP_ZERO = -32768,     /* the slot is all zeros */
  EXP_BAD = 32767,       /* the slot holds an infinity or a NaN */
  BLOCK = 16384,         /* values summed over every group while their sums stay in cache */
  BUFFER_CHUNK = 64,     /* buffer floats per slot (running statistics have no tensor list here) */
  FALLBACK_CHUNK = 1024, /* parameter floats per slot when the tensors do not tile the buffer */
};

struct train_exact {
  size_t G;            /* samples per group */
  size_t np, nb, W;    /* parameters, buffer floats, np + nb: one group's values */
  size_t nslots;       /* value slots; the loss is slot nslots */
  size_t *off;         /* [nslots + 1]: the slots' starts in a group's values */
  size_t cap, groups;  /* groups the host has room for; kept this step */
  size_t batch_groups; /* groups in this step's global batch */
  int top;             /* 50 - H: 2^H >= batch_groups, so a batch's sum stays below 2^50 */
  float *vals;         /* [cap, W] */
  double *loss;        /* [cap] */
  uint32_t *maxbits;   /* [nslots]: the largest |value|'s bits so far (ordered as the values) */
  double loss_max;     /* the largest |group loss| so far (NaN: not finite) */
  int16_t *mine,
      *exps;         /* [nslots + 1], [replicas, nslots + 1]: exponents, this replica's and all */
  int64_t *sum;      /* [W + 1] */
  double *acc;       /* [BLOCK]: sum_groups' running sums */
  float *out;        /* [W] */
  dpt_buffer *start; /* the buffers at the step's start; NULL without buffers */
  double loss_total;
  int mutate; /* DPT_TEST_EXACT_MUTATE: 1 order, 2 exponent; 0 */
};

/* Slots from the model's tensors when they tile [0, np) in order, else fixed chunks; then the
 * buffers in chunks. */
static dpt_status build_slots(train_exact *e, const dpt_model *m) {
  const size_t nt = dpt_model_num_tensors(m);
  size_t at = 0, ok = 1;
  for (size_t i = 0; i < nt && ok; ++i) {
    dpt_tensor_info ti;
    DPT_TRY(dpt_model_tensor(m, i, &ti));
    ok = ti.offset == at && ti.count > 0;
    at += ti.count;
  }
  ok = ok && at == e->np;
  const size_t pslots = ok ? nt : (e->np + FALLBACK_CHUNK - 1) / FALLBACK_CHUNK;
  e->nslots = pslots + (e->nb + BUFFER_CHUNK - 1) / BUFFER_CHUNK;
  e->off = malloc((e->nslots + 1) * sizeof *e->off);
  if (!e->off) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "deterministic: out of host memory");
  for (size_t i = 0; i < pslots; ++i) {
    dpt_tensor_info ti = {.offset = i * FALLBACK_CHUNK};
    if (ok) DPT_TRY(dpt_model_tensor(m, i, &ti));
    e->off[i] = ti.offset;
  }
  for (size_t i = pslots; i < e->nslots; ++i)
    e->off[i] = e->np + (i - pslots) * BUFFER_CHUNK;
  e->off[e->nslots] = e->W;
  return DPT_OK;
}

static dpt_status alloc_exact(train_exact *e, int replicas, int buffers, dpt_backend *be) {
  const size_t n = e->nslots + 1;
  e->vals = malloc(e->cap * e->W * sizeof *e->vals);
  e->loss = malloc(e->cap * sizeof *e->loss);
  e->maxbits = malloc(e->nslots * sizeof *e->maxbits);
  e->mine = malloc(n * sizeof *e->mine);
  e->exps = malloc((size_t)replicas * n * sizeof *e->exps);
  e->sum = malloc((e->W + 1) * sizeof *e->sum);
  e->out = malloc(e->W * sizeof *e->out);
  e->acc = malloc(BLOCK * sizeof *e->acc);
  if (!e->vals || !e->loss || !e->maxbits || !e->mine || !e->exps || !e->sum || !e->out || !e->acc)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY,
                         "deterministic: out of host memory for %zu groups of %zu values", e->cap,
                         e->W);
  if (buffers) DPT_TRY(dpt_buffer_alloc(be, e->nb * sizeof(float), &e->start));
  return DPT_OK;
}

dpt_status dpt_train_exact_setup(const replica *r, replica_state *s) {
  if (!r->cfg->deterministic) return DPT_OK;
  DPT_TRY(dpt_backend_set_deterministic(s->be));
  train_exact *e = calloc(1, sizeof *e);
  if (!e) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "deterministic: out of host memory");
  s->exact = e;
  e->G = dpt_train_group_size(r->cfg);
  e->np = dpt_model_num_params(s->model);
  e->nb = dpt_model_num_buffer_floats(s->model);
  e->W = e->np + e->nb;
  e->cap = (s->max_slice + e->G - 1) / e->G;
  const char *m = dpt_env_get("DPT_TEST_EXACT_MUTATE");
  e->mutate = !m ? 0 : !strcmp(m, "order") ? 1 : !strcmp(m, "exponent") ? 2 : 0;
  DPT_TRY(build_slots(e, s->model));
  return alloc_exact(e, r->count, e->nb > 0, s->be);
}

void dpt_train_exact_free(replica_state *s) {
  train_exact *e = s->exact;
  if (!e) return;
  dpt_buffer_free(e->start);
  free(e->off);
  free(e->vals);
  free(e->loss);
  free(e->maxbits);
  free(e->mine);
  free(e->exps);
  free(e->sum);
  free(e->out);
  free(e->acc);
  free(e);
  s->exact = NULL;
}

size_t dpt_train_exact_group(const replica_state *s) {
  return s->exact ? s->exact->G : 0;
}

dpt_status dpt_train_exact_begin(replica_state *s, size_t bcount) {
  train_exact *e = s->exact;
  e->groups = 0;
  e->batch_groups = (bcount + e->G - 1) / e->G;
  int H = 0;
  while (((size_t)1 << H) < e->batch_groups)
    ++H;
  e->top = 50 - H;
  e->loss_max = 0;
  memset(e->maxbits, 0, e->nslots * sizeof *e->maxbits);
  if (!e->start) return DPT_OK;
  return dpt_buffer_copy(e->start, 0, dpt_model_buffers(s->model), 0, e->nb * sizeof(float));
}

dpt_status dpt_train_exact_rewind(replica_state *s) {
  train_exact *e = s->exact;
  if (!e->start || e->groups == 0) return DPT_OK;
  return dpt_buffer_copy(dpt_model_buffers(s->model), 0, e->start, 0, e->nb * sizeof(float));
}

/* x + 1.5 * 2^52 holds round(x) (to nearest, ties to even) in its low mantissa bits for
 * |x| < 2^51: subtracting it again gives round(x) as a double, subtracting its bits gives it as
 * an integer. Plain double and integer arithmetic, which vectorizes where llrint does not. */
#define ROUNDER 6755399441055744.0

static inline double round_exact(double x) {
  return (x + ROUNDER) - ROUNDER;
}

static inline int64_t to_i64(double x) { /* x integer-valued, |x| < 2^51 */
  uint64_t u, r;
  const double y = x + ROUNDER, m = ROUNDER;
  memcpy(&u, &y, sizeof u);
  memcpy(&r, &m, sizeof r);
  return (int64_t)(u - r);
}

static inline double from_i64(int64_t q) { /* |q| < 2^51 */
  const double m = ROUNDER;
  uint64_t r;
  memcpy(&r, &m, sizeof r);
  r += (uint64_t)q;
  double y;
  memcpy(&y, &r, sizeof y);
  return y - ROUNDER;
}

#if defined(__GNUC__)
/* 8 lanes at a time through the compiler's vector extensions: gcc -O2 keeps these loops scalar.
 * Each lane does the scalar code's operations, so the results are the same bits. */
typedef uint32_t vu __attribute__((vector_size(32)));
typedef int32_t vi __attribute__((vector_size(32)));
typedef float vf __attribute__((vector_size(32)));
typedef double vd __attribute__((vector_size(64)));
typedef int64_t vl __attribute__((vector_size(64)));
#define EXACT_LANES 8
#endif
/* x86-64: AVX-512 and AVX2 copies of the loops besides the baseline one, picked at load time;
 * the lanes' operations are the same, so are the bits. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define EXACT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define EXACT_CLONES
#endif

/* The largest |v[i]| of n values as bits, from m. */
EXACT_CLONES static uint32_t max_bits(const float *v, size_t n, uint32_t m) {
  size_t i = 0;
#if defined(EXACT_LANES)
  vu vm = (vu){0} + m;
  for (; i + EXACT_LANES <= n; i += EXACT_LANES) {
    vu u;
    memcpy(&u, v + i, sizeof u);
    u &= 0x7fffffffu;
    const vu more = (vu)((vi)u > (vi)vm); /* both below 2^31: a signed compare is exact */
    vm = (u & more) | (vm & ~more);
  }
  for (int k = 0; k < EXACT_LANES; ++k)
    m = vm[k] > m ? vm[k] : m;
#endif
  for (; i < n; ++i) {
    uint32_t u;
    memcpy(&u, v + i, sizeof u);
    u &= 0x7fffffffu;
    m = u > m ? u : m;
  }
  return m;
}

/* d[i] = v[i], and the largest |v[i]| as bits, from m: the copy and the scan in one pass. */
EXACT_CLONES static uint32_t copy_max(float *restrict d, const float *restrict v, size_t n,
                                      uint32_t m) {
  size_t i = 0;
#if defined(EXACT_LANES)
  vu vm = (vu){0} + m;
  for (; i + EXACT_LANES <= n; i += EXACT_LANES) {
    vu u;
    memcpy(&u, v + i, sizeof u);
    memcpy(d + i, &u, sizeof u);
    u &= 0x7fffffffu;
    const vu more = (vu)((vi)u > (vi)vm);
    vm = (u & more) | (vm & ~more);
  }
  for (int k = 0; k < EXACT_LANES; ++k)
    m = vm[k] > m ? vm[k] : m;
#endif
  for (; i < n; ++i) {
    uint32_t u;
    memcpy(&u, v + i, sizeof u);
    memcpy(d + i, &u, sizeof u);
    u &= 0x7fffffffu;
    m = u > m ? u : m;
  }
  return m;
}

/* a[i] += round(v[i] * scale), exactly (see ROUNDER). */
EXACT_CLONES static void add_rounded(double *a, const float *v, size_t n, double scale) {
  size_t i = 0;
#if defined(EXACT_LANES)
  const vd r = (vd){0} + ROUNDER, sc = (vd){0} + scale;
  for (; i + EXACT_LANES <= n; i += EXACT_LANES) {
    vf f;
    vd acc;
    if (i + 1024 < n) __builtin_prefetch(v + i + 1024); /* 4 KiB ahead: the blocks are in memory */
    memcpy(&f, v + i, sizeof f);
    memcpy(&acc, a + i, sizeof acc);
    const vd x = __builtin_convertvector(f, vd) * sc;
    acc += (x + r) - r;
    memcpy(a + i, &acc, sizeof acc);
  }
#endif
  for (; i < n; ++i)
    a[i] += round_exact((double)v[i] * scale);
}

/* q[i] = a[i] as int64 (integer-valued, below 2^51). */
EXACT_CLONES static void to_i64_n(int64_t *q, const double *a, size_t n) {
  size_t i = 0;
#if defined(EXACT_LANES)
  const vd r = (vd){0} + ROUNDER;
  vl rb;
  memcpy(&rb, &r, sizeof rb);
  for (; i + EXACT_LANES <= n; i += EXACT_LANES) {
    vd x;
    memcpy(&x, a + i, sizeof x);
    x += r;
    vl b;
    memcpy(&b, &x, sizeof b);
    b -= rb;
    memcpy(q + i, &b, sizeof b);
  }
#endif
  for (; i < n; ++i)
    q[i] = to_i64(a[i]);
}

/* Values [at, at + n) of a group from the floats [0, n) of buf into v + at, and the largest |v| of
 * each slot so far as bits (for non-negative floats the integer order is the float order, an
 * infinity or NaN above every finite value): copied and scanned in one pass where the backend
 * maps its memory, else downloaded and then scanned. */
static dpt_status keep_part(train_exact *e, dpt_buffer *buf, size_t at, size_t n, float *v) {
  void *p = NULL;
  DPT_TRY(dpt_buffer_map_host(buf, 0, n * sizeof(float), &p));
  if (!p) DPT_TRY(dpt_buffer_download(buf, 0, v + at, n * sizeof(float)));
  const float *src = p;
  for (size_t k = 0; k < e->nslots; ++k) {
    const size_t lo = e->off[k] > at ? e->off[k] : at;
    const size_t hi = e->off[k + 1] < at + n ? e->off[k + 1] : at + n;
    if (lo >= hi) continue;
    e->maxbits[k] = p ? copy_max(v + lo, src + (lo - at), hi - lo, e->maxbits[k])
                      : max_bits(v + lo, hi - lo, e->maxbits[k]);
  }
  return dpt_buffer_unmap_host(buf, p);
}

dpt_status dpt_train_exact_keep(replica_state *s, double loss) {
  train_exact *e = s->exact;
  if (e->groups == e->cap)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "deterministic: more than %zu groups in a slice",
                         e->cap);
  float *v = e->vals + e->groups * e->W;
  DPT_TRY(keep_part(e, dpt_model_grads(s->model), 0, e->np, v));
  if (e->nb) DPT_TRY(keep_part(e, dpt_model_buffers(s->model), e->np, e->nb, v));
  e->loss[e->groups++] = loss;
  const double a = fabs(loss);
  if (!(a <= e->loss_max) && !isnan(e->loss_max)) e->loss_max = a; /* a NaN stays */
  return DPT_OK;
}

static int16_t exponent_of(double m) {
  if (!isfinite(m)) return EXP_BAD;
  if (m == 0) return EXP_ZERO;
  int x = 0;
  frexp(m, &x); /* m < 2^x */
  return (int16_t)x;
}

/* This replica's exponents, then everyone's maximum per slot into e->mine. */
static dpt_status agree_exponents(replica *r, train_exact *e) {
  const size_t n = e->nslots + 1;
  for (size_t k = 0; k < e->nslots; ++k) {
    float m;
    memcpy(&m, &e->maxbits[k], sizeof m);
    e->mine[k] = exponent_of(e->maxbits[k] >= 0x7f800000u ? INFINITY : (double)m);
  }
  e->mine[e->nslots] = exponent_of(e->loss_max);
  if (e->mutate == 2) return DPT_OK;
  DPT_TRY(dpt_allgather_host(r->comm, e->mine, n * sizeof *e->mine, e->exps));
  for (size_t k = 0; k < n; ++k)
    for (int i = 0; i < r->count; ++i)
      if (e->exps[(size_t)i * n + k] > e->mine[k]) e->mine[k] = e->exps[(size_t)i * n + k];
  return DPT_OK;
}

/* 2^(50 - H - E): a value of the slot times it is below 2^(50-H); 0 for an all-zero or
 * non-finite slot (the latter's result is made NaN). */
static double slot_scale(const train_exact *e, int16_t E) {
  if (E == EXP_ZERO || E == EXP_BAD) return 0;
  const int sh = e->top - E < 1000 ? e->top - E : 1000;
  return ldexp(1.0, sh);
}

/* DPT_TEST_EXACT_MUTATE=order: the groups added in float, in this replica's order, into the
 * first. */
static void float_sum_first(train_exact *e) {
  for (size_t j = 1; j < e->groups; ++j)
    for (size_t i = 0; i < e->W; ++i)
      e->vals[i] += e->vals[j * e->W + i];
  e->groups = e->groups > 0;
}

/* This replica's groups, each value rounded to the slot's fixed point and summed (exactly, in
 * doubles: every partial sum is an integer below 2^50), into e->sum as int64; block by block,
 * so the sums stay in cache while every group's block is added. */
static void sum_groups(train_exact *e) {
  if (e->mutate == 1) float_sum_first(e);
  double *acc = e->acc;
  for (size_t k = 0; k < e->nslots; ++k) {
    const double scale = slot_scale(e, e->mine[k]);
    for (size_t b = e->off[k]; b < e->off[k + 1]; b += BLOCK) {
      const size_t n = e->off[k + 1] - b < BLOCK ? e->off[k + 1] - b : BLOCK;
      memset(acc, 0, n * sizeof *acc);
      for (size_t j = 0; j < e->groups && scale != 0; ++j)
        add_rounded(acc, e->vals + j * e->W + b, n, scale);
      to_i64_n(e->sum + b, acc, n);
    }
  }
  const double scale = slot_scale(e, e->mine[e->nslots]);
  double loss = 0;
  for (size_t j = 0; j < e->groups; ++j)
    loss += round_exact(e->loss[j] * scale);
  e->sum[e->W] = to_i64(loss);
}

/* d[i] = (float)(q[i] as a double * inv / div) (div 1: no division), lane by lane as the scalar
 * code does it, so the same bits. */
EXACT_CLONES static void from_i64_n(float *d, const int64_t *q, size_t n, double inv, double div) {
  size_t i = 0;
#if defined(EXACT_LANES)
  const vd r = (vd){0} + ROUNDER, vinv = (vd){0} + inv, vdiv = (vd){0} + div;
  vl rb;
  memcpy(&rb, &r, sizeof rb);
  for (; i + EXACT_LANES <= n; i += EXACT_LANES) {
    vl b;
    memcpy(&b, q + i, sizeof b);
    b += rb;
    vd x;
    memcpy(&x, &b, sizeof x);
    x = (x - r) * vinv;
    if (div != 1) x /= vdiv;
    const vf f = __builtin_convertvector(x, vf);
    memcpy(d + i, &f, sizeof f);
  }
#endif
  for (; i < n; ++i) {
    const double v = from_i64(q[i]) * inv;
    d[i] = (float)(div != 1 ? v / div : v);
  }
}

/* The sums of values [at, at + n) back to float into d: gradients as they are, buffers as the
 * groups' mean. */
static void unscale(const train_exact *e, size_t at, size_t n, float *d) {
  for (size_t k = 0; k < e->nslots; ++k) {
    const size_t lo = e->off[k] > at ? e->off[k] : at;
    const size_t hi = e->off[k + 1] < at + n ? e->off[k + 1] : at + n;
    if (lo >= hi) continue;
    const double scale = slot_scale(e, e->mine[k]);
    const double inv = scale != 0 ? 1.0 / scale : 0;
    const double div = e->off[k] >= e->np ? (double)e->batch_groups : 1;
    if (e->mine[k] == EXP_BAD)
      for (size_t i = lo; i < hi; ++i)
        d[i - at] = NAN;
    else
      from_i64_n(d + (lo - at), e->sum + lo, hi - lo, inv, div);
  }
}

/* The sums of values [at, at + n) into the floats [0, n) of buf: written in place where the
 * backend maps its memory, else through e->out and an upload. */
static dpt_status put_part(train_exact *e, dpt_buffer *buf, size_t at, size_t n) {
  void *p = NULL;
  DPT_TRY(dpt_buffer_map_host(buf, 0, n * sizeof(float), &p));
  unscale(e, at, n, p ? (float *)p : e->out + at);
  if (p) return dpt_buffer_unmap_host(buf, p);
  return dpt_buffer_upload(buf, 0, e->out + at, n * sizeof(float));
}

static dpt_status exact_reduce(replica *r, replica_state *s, exchange_times *t) {
  const double t0 = dpt_now();
  train_exact *e = s->exact;
  dpt_status st = agree_exponents(r, e);
  if (st == DPT_OK) {
    sum_groups(e);
    st = dpt_allreduce_host(r->comm, e->sum, e->W + 1, DPT_COMM_I64);
  }
  if (st == DPT_OK) {
    const double scale = slot_scale(e, e->mine[e->nslots]);
    e->loss_total = e->mine[e->nslots] == EXP_BAD ? NAN
                    : scale != 0                  ? from_i64(e->sum[e->W]) / scale
                                                  : 0;
    st = put_part(e, dpt_model_grads(s->model), 0, e->np);
  }
  if (st == DPT_OK && e->nb) st = put_part(e, dpt_model_buffers(s->model), e->np, e->nb);
  dpt_train_exchange_one_piece(s, t, t0, "exact all-reduce");
  return st;
}

double dpt_train_exact_loss(const replica_state *s) {
  return s->exact->loss_total;
}

static int exact_applies(const replica_state *s) {
  return s->exact != NULL;
}

const train_exchange dpt_train_exchange_exact = {.name = "exact",
                                                 .applies = exact_applies,
                                                 .reduce = exact_reduce,
                                                 .count_nonfinite = dpt_train_exchange_count_grads,
                                                 .update = dpt_train_exchange_full_update};
