/* The split of a global batch into the replicas' slices (dpt_train_config.split): even, or in
 * proportion to each replica's measured speed.
 *
 *   global batch of B           [ r0: s0 samples | r1: s1 | r2: s2 ]    s0 + s1 + s2 = B
 *   each step's gathered stats  compute seconds c_i and samples n_i of every replica
 *   every `every` steps         v_i = sum n_i / sum c_i over the window   (samples per second)
 *                               unless every sum c_i is within 10 % of the largest:
 *                               t_i = B v_i / sum v, clamped to [1, cap], the rest re-cut
 *                               s_i <- round((s_i + t_i) / 2), the sum kept at B
 *
 * Every replica sees the same gathered stats and does the same double arithmetic in replica
 * order, so every replica (thread or MPI rank) computes the same shares without another
 * exchange. Cost: O(R) per step, O(R^2) at a recomputation. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "core/train/exchange_exact.h"
#include "core/train/replica.h"
#include "core/train/train_split.h"
#include "dptrain/data.h"
#include "base/env.h"

enum {
  SPLIT_WARMUP = 3, /* steps not measured: first-use costs (allocation, kernel compilation) */
  SPLIT_FIRST = 5   /* the first window's steps, when split_every is larger */
};
/* Replicas whose step times are within this fraction of the slowest one's keep their shares:
 * little to gain, and where a step's fixed costs (launches, the exchange's set-up) dominate,
 * samples per second would follow the shares themselves and the split would drift with the
 * noise of a shared host. */
#define SPLIT_TOLERANCE 0.10

struct train_split {
  int count;        /* replicas */
  int proportional; /* cfg->devices.split == DPT_SPLIT_PROPORTIONAL with more than one replica */
  size_t batch;     /* B: the global batch the shares cut */
  size_t cap;       /* most samples a replica takes (the activations are sized for it) */
  int64_t every;    /* steps per window after the first */
  int64_t seen;     /* steps since the run (re)started: the warm-up */
  int64_t window;   /* steps in the current window */
  int first;        /* the first window is still running */
  size_t *shares;   /* [count] samples of a full global batch */
  size_t *next;     /* [count] scratch: the new shares */
  double *time;     /* [count] compute seconds in the window */
  double *samples;  /* [count] samples in the window */
  double *want;     /* [count] scratch: the shares the speeds ask for, then the smoothed ones */
  double *per;      /* [count] seconds per sample over the last window */
  int *fixed;       /* [count] scratch: clamped in the water-filling */
  double slow;      /* DPT_TEST_SLOW_REPLICA: this replica's compute time factor (1: none) */
};

size_t dpt_train_split_cap(const dpt_train_config *cfg, int count, size_t batch) {
  const size_t even = (batch + (size_t)count - 1) / (size_t)count;
  if (cfg->devices.split != DPT_SPLIT_PROPORTIONAL || count == 1) return even;
  const size_t most = batch - (size_t)(count - 1); /* the others keep one sample each */
  return 2 * even < most ? 2 * even : most;
}

/* The testing knob DPT_TEST_SLOW_REPLICA=I:F: replica I's forward and backward take F times as
 * long (it sleeps F - 1 times their measured time), a slower device without one. */
static double slow_factor(int index) {
  const char *v = dpt_env_get("DPT_TEST_SLOW_REPLICA");
  if (!v || !*v) return 1.0;
  char *end = NULL;
  const long who = strtol(v, &end, 10);
  if (end == v || *end != ':' || who != index) return 1.0;
  const double f = strtod(end + 1, NULL);
  return f > 1.0 && f < 1000.0 ? f : 1.0;
}

dpt_status dpt_train_split_setup(replica *r, replica_state *s) {
  const dpt_train_config *cfg = r->cfg;
  train_split *p = calloc(1, sizeof *p);
  if (!p) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "split: out of host memory");
  s->split = p;
  const size_t n = (size_t)r->count;
  p->count = r->count;
  p->proportional = cfg->devices.split == DPT_SPLIT_PROPORTIONAL && r->count > 1;
  p->batch = cfg->schedule.global_batch;
  p->cap = dpt_train_split_cap(cfg, r->count, cfg->schedule.global_batch);
  p->every = cfg->devices.split_every > 0 ? cfg->devices.split_every : DPT_SPLIT_EVERY_DEFAULT;
  p->first = 1;
  p->shares = calloc(n, sizeof *p->shares);
  p->next = calloc(n, sizeof *p->next);
  p->time = calloc(n, sizeof *p->time);
  p->samples = calloc(n, sizeof *p->samples);
  p->want = calloc(n, sizeof *p->want);
  p->per = calloc(n, sizeof *p->per);
  p->fixed = calloc(n, sizeof *p->fixed);
  if (!p->shares || !p->next || !p->time || !p->samples || !p->want || !p->per || !p->fixed)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "split: out of host memory");
  for (int i = 0; i < r->count; ++i) {
    size_t start = 0;
    DPT_TRY(dpt_batch_split(p->batch, r->count, i, &start, &p->shares[i]));
  }
  p->slow = slow_factor(r->index);
  return DPT_OK;
}

void dpt_train_split_free(replica_state *s) {
  train_split *p = s->split;
  if (!p) return;
  free(p->shares);
  free(p->next);
  free(p->time);
  free(p->samples);
  free(p->want);
  free(p->per);
  free(p->fixed);
  free(p);
  s->split = NULL;
}

int dpt_train_split_measures(const replica_state *s) {
  return s->split && s->split->proportional;
}

const size_t *dpt_train_split_shares(const replica_state *s) {
  return s->split ? s->split->shares : NULL;
}

/* The slice of a batch of bcount samples: the shares themselves for a full batch; for a kept
 * last, shorter one, one sample each and the rest in proportion to (share - 1), whole samples
 * by largest remainder (lower replica first on ties), so no slice exceeds its share. */
/* The replicas' slices by samples (even, or proportional to the shares). */
static dpt_status split_samples(const replica *r, const replica_state *s, size_t bcount,
                                size_t *start, size_t *count) {
  const train_split *p = s->split;
  const int R = r->count;
  if (!p || !p->proportional || bcount < (size_t)R)
    return dpt_batch_split(bcount, R, r->index, start, count);
  if (bcount > p->batch)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "split: batch %zu is larger than the global %zu",
                         bcount, p->batch);
  const uint64_t rest = bcount - (size_t)R, whole = p->batch - (size_t)R;
  size_t *n = p->next, left = (size_t)rest;
  for (int i = 0; i < R; ++i) {
    n[i] = 1 + (whole ? (size_t)(rest * (p->shares[i] - 1) / whole) : 0);
    left -= n[i] - 1;
  }
  for (; left > 0; --left) { /* at most R - 1 passes */
    int best = -1;
    uint64_t best_rem = 0;
    for (int i = 0; i < R; ++i) {
      const uint64_t rem = rest * (p->shares[i] - 1) % whole;
      if (n[i] - 1 == rest * (p->shares[i] - 1) / whole && (best < 0 || rem > best_rem)) {
        best = i;
        best_rem = rem;
      }
    }
    ++n[best];
  }
  *start = 0;
  for (int i = 0; i < r->index; ++i)
    *start += n[i];
  *count = n[r->index];
  return DPT_OK;
}

/* x to the nearest multiple of G (halves up), at most bcount. */
static size_t to_group(size_t x, size_t G, size_t bcount) {
  const size_t g = (x + G / 2) / G * G;
  return g < bcount ? g : bcount;
}

dpt_status dpt_train_split_slice(const replica *r, const replica_state *s, size_t bcount,
                                 size_t *start, size_t *count) {
  DPT_TRY(split_samples(r, s, bcount, start, count));
  const size_t G = dpt_train_exact_group(s);
  if (G <= 1) return DPT_OK;
  /* deterministic: each boundary moved to a group's, the same on both replicas beside it */
  const size_t a = to_group(*start, G, bcount);
  const size_t b = r->index == r->count - 1 ? bcount : to_group(*start + *count, G, bcount);
  *start = a;
  *count = b - a;
  return DPT_OK;
}

void dpt_train_split_slow_down(const replica_state *s, double seconds) {
  if (!s->split || s->split->slow <= 1.0 || !(seconds > 0)) return;
  const double d = (s->split->slow - 1.0) * seconds;
  struct timespec ts = {(time_t)d, (long)((d - floor(d)) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* The shares the speeds v[i] ask for, real-valued, each in [1, cap], summing to B: cut in
 * proportion, those beyond a bound set to it, the rest cut again among the others. */
static void water_fill(train_split *p, const double *v) {
  const int R = p->count;
  memset(p->fixed, 0, (size_t)R * sizeof *p->fixed);
  for (int pass = 0; pass < R; ++pass) {
    double rest = (double)p->batch, total = 0;
    for (int i = 0; i < R; ++i) {
      if (p->fixed[i])
        rest -= p->want[i];
      else
        total += v[i];
    }
    int clamped = 0;
    for (int i = 0; i < R; ++i) {
      if (p->fixed[i]) continue;
      p->want[i] = total > 0 ? rest * v[i] / total : rest / R;
      if (p->want[i] > (double)p->cap || p->want[i] < 1.0) {
        p->want[i] = p->want[i] < 1.0 ? 1.0 : (double)p->cap;
        p->fixed[i] = clamped = 1;
      }
    }
    if (!clamped) return;
  }
}

/* want[] (real) to whole samples in next[]: floors within [1, cap], then single samples added
 * where the most is missing, or taken where the most is in excess, until they sum to B. */
static void round_shares(train_split *p) {
  const int R = p->count;
  size_t sum = 0;
  for (int i = 0; i < R; ++i) {
    double f = floor(p->want[i]);
    f = f < 1.0 ? 1.0 : f > (double)p->cap ? (double)p->cap : f;
    p->next[i] = (size_t)f;
    sum += p->next[i];
  }
  while (sum != p->batch) {
    const int up = sum < p->batch;
    int best = -1;
    double best_d = 0;
    for (int i = 0; i < R; ++i) {
      if (up ? p->next[i] >= p->cap : p->next[i] <= 1) continue;
      const double d = up ? p->want[i] - (double)p->next[i] : (double)p->next[i] - p->want[i];
      if (best < 0 || d > best_d) {
        best = i;
        best_d = d;
      }
    }
    if (best < 0) return; /* cannot happen: R <= B <= R cap */
    p->next[best] = up ? p->next[best] + 1 : p->next[best] - 1;
    sum = up ? sum + 1 : sum - 1;
  }
}

void dpt_train_split_after_step(replica *r, replica_state *s) {
  train_split *p = s->split;
  if (!p || !p->proportional || ++p->seen <= SPLIT_WARMUP) return;
  const int R = p->count;
  for (int i = 0; i < R; ++i) {
    p->time[i] += s->gather[i].compute;
    p->samples[i] += (double)s->gather[i].samples;
  }
  const int64_t need = p->first && p->every > SPLIT_FIRST ? SPLIT_FIRST : p->every;
  if (++p->window < need) return;
  p->first = 0;
  p->window = 0;
  int ok = 1;
  double slowest = 0, fastest = INFINITY;
  for (int i = 0; i < R; ++i) {
    slowest = p->time[i] > slowest ? p->time[i] : slowest;
    fastest = p->time[i] < fastest ? p->time[i] : fastest;
  }
  for (int i = 0; i < R; ++i) {
    ok = ok && p->time[i] > 0 && p->samples[i] > 0;
    p->per[i] = p->samples[i] > 0 ? p->time[i] / p->samples[i] : 0;
    p->time[i] = p->samples[i] = 0;
  }
  if (!ok || fastest >= (1.0 - SPLIT_TOLERANCE) * slowest) return;
  for (int i = 0; i < R; ++i) /* speeds, into samples[] (zeroed above) */
    p->samples[i] = 1.0 / p->per[i];
  water_fill(p, p->samples);
  for (int i = 0; i < R; ++i) {
    p->want[i] = 0.5 * ((double)p->shares[i] + p->want[i]);
    p->samples[i] = 0;
  }
  round_shares(p);
  /* Below the threshold, timing noise would move the split back and forth every window. */
  const size_t least = p->batch / 50 > 1 ? p->batch / 50 : 1;
  size_t moved = 0;
  for (int i = 0; i < R; ++i) {
    const size_t d =
        p->next[i] > p->shares[i] ? p->next[i] - p->shares[i] : p->shares[i] - p->next[i];
    moved = d > moved ? d : moved;
  }
  if (moved < least) return;
  memcpy(p->shares, p->next, (size_t)R * sizeof *p->shares);
  if (r->index == 0 && r->cfg->callbacks.on_split)
    r->cfg->callbacks.on_split(s->t.step, p->shares, p->per, R, r->cfg->callbacks.user);
}
