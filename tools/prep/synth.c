/* Synthetic interactions with planted latent factors (tools/prep/shards.h,
 * docs/recommendation.md): every draw is keyed by (seed, what, index), so record i and the
 * factors of (table, row) are computed on the fly in O(1) memory. */
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "base/rng.h"
#include "tools/prep/shards.h"

#define DOMAIN_SAMPLE UINT64_C(0x53594e5453414d50) /* "SYNTSAMP" */
#define DOMAIN_FACTOR UINT64_C(0x53594e5446414354) /* "SYNTFACT" */
#define DOMAIN_WEIGHT UINT64_C(0x53594e5457454754) /* "SYNTWEGT" */
#define MAX_FACTORS   4096                         /* tables * dim */

void dpt_synth_default(dpt_synth_config *c) {
  if (!c) return;
  memset(c, 0, sizeof *c);
  c->rows = 100000;
  c->tables = 8;
  c->dim = 4;
  c->num_dense = 4;
  c->zipf = 1.05;
  c->signal = 2.0;
  c->bias = -1.0;
  c->seed = 0;
}

/* A row in [0, rows) with P(row k) roughly proportional to (k + 1)^-s: the continuous power law
 * on [1, rows + 1) inverted at u, floored. */
static uint64_t zipf_row(double u, uint64_t rows, double s) {
  const double n1 = (double)rows + 1.0;
  double x;
  if (fabs(s - 1.0) < 1e-9) {
    x = exp(u * log(n1));
  } else {
    const double a = 1.0 - s;
    x = pow(1.0 + u * (pow(n1, a) - 1.0), 1.0 / a);
  }
  uint64_t k = x < 1.0 ? 1 : (uint64_t)x;
  if (k > rows) k = rows;
  return k - 1;
}

dpt_status dpt_synth_record(const dpt_synth_config *c, uint64_t i, float *dense, int32_t *sparse,
                            float *label, float *prob) {
  if (!c || !sparse || (!dense && c->num_dense))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "synth: NULL argument");
  if (c->rows < 1 || c->rows > DPT_SHARD_MAX_TABLE || c->tables < 2 || c->dim < 1 ||
      (size_t)c->tables * c->dim > MAX_FACTORS || c->num_dense > DPT_SHARD_MAX_DENSE ||
      !(c->zipf > 0) || !(c->signal >= 0) || !isfinite(c->bias))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "synth: bad config (rows %llu of 1..2^31, tables %u >= 2, dim %u >= 1, "
                         "tables * dim <= %d, zipf %g > 0, signal %g >= 0)",
                         (unsigned long long)c->rows, (unsigned)c->tables, (unsigned)c->dim,
                         MAX_FACTORS, c->zipf, c->signal);
  dpt_rng rng;
  dpt_rng_seed_key(&rng, c->seed, DOMAIN_SAMPLE, &i, 1);
  double f[MAX_FACTORS];
  const double pairs = 0.5 * (double)c->tables * (double)(c->tables - 1);
  const double sigma = sqrt(c->signal / sqrt(pairs * (double)c->dim));
  for (uint32_t t = 0; t < c->tables; t++) {
    const uint64_t row = zipf_row(dpt_rng_uniform(&rng), c->rows, c->zipf);
    sparse[t] = (int32_t)row;
    dpt_rng fr;
    const uint64_t key[2] = {t, row};
    dpt_rng_seed_key(&fr, c->seed, DOMAIN_FACTOR, key, 2);
    for (uint32_t k = 0; k < c->dim; k++)
      f[(size_t)t * c->dim + k] = sigma * dpt_rng_normal(&fr);
  }
  double logit = c->bias;
  for (uint32_t j = 0; j < c->num_dense; j++) {
    const double x = dpt_rng_normal(&rng);
    dense[j] = (float)x;
    dpt_rng wr;
    const uint64_t key = j;
    dpt_rng_seed_key(&wr, c->seed, DOMAIN_WEIGHT, &key, 1);
    logit += 0.5 / sqrt((double)c->num_dense) * dpt_rng_normal(&wr) * x;
  }
  for (uint32_t a = 0; a < c->tables; a++)
    for (uint32_t b = a + 1; b < c->tables; b++) {
      double dot = 0;
      for (uint32_t k = 0; k < c->dim; k++)
        dot += f[(size_t)a * c->dim + k] * f[(size_t)b * c->dim + k];
      logit += dot;
    }
  const double p = 1.0 / (1.0 + exp(-logit));
  const double u = dpt_rng_uniform(&rng);
  if (label) *label = u < p ? 1.0f : 0.0f;
  if (prob) *prob = (float)p;
  return DPT_OK;
}
