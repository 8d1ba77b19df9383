/* A communicator's options: the built-in defaults, the environment variables of comm.h over
 * them, their validation, and the public get/set calls. The names of the staging modes come
 * from the list in comm.h, those of the all-reduce algorithms from comm_util.c's table. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/api/comm_options.h"
#include "base/error.h"
#include "base/parse.h"
#include "collectives/algorithms/algorithms.h"
#include "collectives/common/comm_struct.h"
#include "collectives/api/request.h"
#include "collectives/common/comm_util.h"
#include "base/env.h"

static const char *const staging_names[] = {
#define DPT_STAGING_NAME_(name, value, text) [DPT_STAGING_##name] = text,
    DPT_STAGING_MODE_MAP(DPT_STAGING_NAME_)
#undef DPT_STAGING_NAME_
};
enum { N_STAGING = sizeof staging_names / sizeof *staging_names };

/* The index of `s` in names[0..n), or -1. */
static int name_index(const char *const *names, int n, const char *s) {
  for (int i = 0; i < n; ++i)
    if (names[i] && !strcmp(s, names[i])) return i;
  return -1;
}

/* "a, b, c" (last_sep ", ") or "a, b or c" (last_sep " or ") into out[0..n). */
static const char *name_list(char *out, size_t n, const char *const *names, int count,
                             const char *last_sep) {
  size_t len = 0;
  out[0] = '\0';
  for (int i = 0; i < count && len < n; ++i)
    len += (size_t)snprintf(out + len, n - len, "%s%s",
                            i == 0           ? ""
                            : i == count - 1 ? last_sep
                                             : ", ",
                            names[i]);
  return out;
}

dpt_status dpt_allreduce_algo_parse(const char *name, dpt_allreduce_algo *out) {
  if (!name || !out)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_allreduce_algo_parse: NULL argument");
  const int i = name_index(dpt_allreduce_algo_names, dpt_allreduce_algo_count, name);
  if (i >= 0) {
    *out = (dpt_allreduce_algo)i;
    return DPT_OK;
  }
  char list[128];
  return dpt_set_error(
      DPT_ERR_INVALID_ARG, "unknown all-reduce algorithm '%s' (%s)", name,
      name_list(list, sizeof list, dpt_allreduce_algo_names, dpt_allreduce_algo_count, ", "));
}

void dpt_comm_options_default(dpt_comm_options *o) {
  memset(o, 0, sizeof *o);
  o->timeout_s = 300.0;
  o->desync_check = 1;
  o->algo = DPT_ALLREDUCE_AUTO;
  /* AUTO: `direct` while its (N-1) n bytes per rank stay small, recursive doubling while
   * latency dominates, the ring (half the bytes, summed as they arrive) above; MPI_Allreduce
   * never by default. The figures behind these limits: docs/performance.md. */
  o->direct_max_bytes = (size_t)16 << 10;
  o->mpi_max_bytes = 0;
  /* Across nodes, after rd: MPI_Allreduce beat the hierarchical all-reduce up to this size on
   * the namespace cluster (TCP between nodes): docs/performance.md, "Across nodes". */
  o->mpi_nodes_max_bytes = (size_t)1 << 20;
  o->rd_max_bytes = (size_t)16 << 10;
  /* Blocks small enough that the all-gather re-reads a block, and the staging slots of device
   * buffers, from cache; pieces a quarter of a block, so transfers overlap sums. */
  o->piece_bytes = (size_t)128 << 10;
  o->block_bytes = (size_t)512 << 10;
  o->staging = DPT_STAGING_AUTO;
}

/* How a message names a size option: with `env` (the options came from the environment), the
 * variable and its text ("DPT_COMM_PIECE='16'", or "DPT_COMM_BLOCK (unset: 524288)" for a
 * default), else the field and its value ("piece_bytes 16"). */
static const char *size_text(char *out, size_t n, int env, const char *field, const char *var,
                             size_t value) {
  const char *v = env ? dpt_env_get(var) : NULL;
  if (v)
    snprintf(out, n, "%s='%s'", var, v);
  else if (env)
    snprintf(out, n, "%s (unset: %zu)", var, value);
  else
    snprintf(out, n, "%s %zu", field, value);
  return out;
}

/* Validates o for c; `fn` names the caller, `env`: the values came from the environment (the
 * messages then name the variables; the parsers already rejected what is not a value). */
static dpt_status check_options(const dpt_comm *c, const dpt_comm_options *o, const char *fn,
                                int env) {
  if (!(o->timeout_s > 0) || !isfinite(o->timeout_s))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: timeout_s %g is not a positive number", fn,
                         o->timeout_s);
  if (o->desync_check != 0 && o->desync_check != 1)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: desync_check %d is not 0 or 1", fn,
                         o->desync_check);
  if (!dpt_allreduce_algo_name(o->algo))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: algo %d is not a dpt_allreduce_algo", fn,
                         (int)o->algo);
  char who[128], a[128], b[128];
  if (env) snprintf(who, sizeof who, "DPT_ALLREDUCE_ALGO='%s'", dpt_allreduce_algo_name(o->algo));
  dpt_status st = dpt_allreduce_algo_check(c, o->algo, env ? who : fn);
  if (st != DPT_OK) return st;
  const char *pre = env ? "" : fn, *sep = env ? "" : ": ";
  if (o->piece_bytes < 64 || o->piece_bytes > ((size_t)1 << 30))
    return dpt_set_error(
        DPT_ERR_INVALID_ARG, "%s%s%s is outside [64, 1 GiB]", pre, sep,
        size_text(a, sizeof a, env, "piece_bytes", "DPT_COMM_PIECE", o->piece_bytes));
  if (o->block_bytes < o->piece_bytes)
    return dpt_set_error(
        DPT_ERR_INVALID_ARG, "%s%s%s is less than %s", pre, sep,
        size_text(a, sizeof a, env, "block_bytes", "DPT_COMM_BLOCK", o->block_bytes),
        size_text(b, sizeof b, env, "piece_bytes", "DPT_COMM_PIECE", o->piece_bytes));
  if ((unsigned)o->staging >= N_STAGING)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: staging %d is not a dpt_staging_mode", fn,
                         (int)o->staging);
  return DPT_OK;
}

/* A whole string of bytes (dpt_parse_bytes with nothing after it). */
static int parse_bytes(const char *s, size_t *out) {
  const char *end;
  size_t v;
  if (!dpt_parse_bytes(s, &end, &v) || *end != '\0') return 0;
  *out = v;
  return 1;
}

static dpt_status env_bytes(const char *name, size_t *field) {
  const char *v = dpt_env_get(name);
  if (!v) return DPT_OK;
  if (!parse_bytes(v, field))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "%s='%s' is not a byte count (digits, optional K, M or G)", name, v);
  return DPT_OK;
}

static dpt_status env_timeout(dpt_comm_options *o) {
  const char *v = dpt_env_get("DPT_COMM_TIMEOUT");
  if (!v) return DPT_OK;
  char *end;
  errno = 0;
  double t = strtod(v, &end);
  if (end == v || *end || errno || !(t > 0) || !isfinite(t))
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "DPT_COMM_TIMEOUT='%s' is not a positive number of seconds", v);
  o->timeout_s = t;
  return DPT_OK;
}

static dpt_status env_staging(dpt_comm_options *o) {
  const char *v = dpt_env_get("DPT_COMM_STAGING");
  if (!v) return DPT_OK;
  const int i = name_index(staging_names, N_STAGING, v);
  if (i < 0) {
    char list[64];
    return dpt_set_error(DPT_ERR_INVALID_ARG, "DPT_COMM_STAGING='%s' is not %s", v,
                         name_list(list, sizeof list, staging_names, N_STAGING, " or "));
  }
  o->staging = (dpt_staging_mode)i;
  return DPT_OK;
}

/* The environment variables of comm.h over the defaults. */
static dpt_status options_from_env(dpt_comm_options *o) {
  const char *v;
  dpt_status st;
  if ((v = dpt_env_get("DPT_ALLREDUCE_ALGO")) != NULL) {
    st = dpt_allreduce_algo_parse(v, &o->algo);
    if (st != DPT_OK) return dpt_error_context(st, "DPT_ALLREDUCE_ALGO");
  }
  if ((st = env_bytes("DPT_ALLREDUCE_DIRECT_MAX", &o->direct_max_bytes)) != DPT_OK ||
      (st = env_bytes("DPT_ALLREDUCE_MPI_MAX", &o->mpi_max_bytes)) != DPT_OK ||
      (st = env_bytes("DPT_ALLREDUCE_MPI_NODES_MAX", &o->mpi_nodes_max_bytes)) != DPT_OK ||
      (st = env_bytes("DPT_ALLREDUCE_RD_MAX", &o->rd_max_bytes)) != DPT_OK ||
      (st = env_bytes("DPT_COMM_PIECE", &o->piece_bytes)) != DPT_OK ||
      (st = env_bytes("DPT_COMM_BLOCK", &o->block_bytes)) != DPT_OK ||
      (st = env_timeout(o)) != DPT_OK)
    return st;
  if ((v = dpt_env_get("DPT_COMM_DESYNC_CHECK")) != NULL) {
    if (strcmp(v, "0") && strcmp(v, "1"))
      return dpt_set_error(DPT_ERR_INVALID_ARG, "DPT_COMM_DESYNC_CHECK='%s' is not 0 or 1", v);
    o->desync_check = v[0] == '1';
  }
  return env_staging(o);
}

double dpt_comm_env_timeout(void) {
  dpt_comm_options o;
  dpt_comm_options_default(&o);
  const double fallback = o.timeout_s;
  return env_timeout(&o) == DPT_OK ? o.timeout_s : fallback;
}

dpt_status dpt_comm_hello_flat_env(int *flat_max) {
  const char *v = dpt_env_get("DPT_COMM_HELLO_FLAT_MAX");
  size_t n = 0;
  if (!v) return DPT_OK;
  if (!parse_bytes(v, &n) || n > 1u << 20)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "DPT_COMM_HELLO_FLAT_MAX='%s' is not a group size (0 .. 1048576)", v);
  *flat_max = (int)n;
  return DPT_OK;
}

dpt_status dpt_comm_options_init(const dpt_comm *c, dpt_comm_options *o) {
  dpt_comm_options_default(o);
  dpt_status st = options_from_env(o);
  return st == DPT_OK ? check_options(c, o, "environment", 1) : st;
}

dpt_status dpt_comm_get_options(const dpt_comm *c, dpt_comm_options *out) {
  if (!c || !out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_comm_get_options: NULL argument");
  *out = c->opt;
  return DPT_OK;
}

dpt_status dpt_comm_set_options(dpt_comm *c, const dpt_comm_options *o) {
  if (!c || !o) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_comm_set_options: NULL argument");
  /* The progress thread reads the options while it runs requests. */
  dpt_status st = dpt_comm_check_idle(c, "dpt_comm_set_options");
  if (st == DPT_OK) st = check_options(c, o, "dpt_comm_set_options", 0);
  if (st == DPT_OK) c->opt = *o;
  return st;
}

dpt_status dpt_comm_set_timeout(dpt_comm *c, double seconds) {
  if (!c) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_comm_set_timeout: comm is NULL");
  dpt_comm_options o = c->opt;
  o.timeout_s = seconds;
  return dpt_comm_set_options(c, &o);
}

dpt_status dpt_comm_set_desync_check(dpt_comm *c, int on) {
  if (!c) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_comm_set_desync_check: comm is NULL");
  dpt_comm_options o = c->opt;
  o.desync_check = on ? 1 : 0;
  return dpt_comm_set_options(c, &o);
}

dpt_status dpt_comm_set_algo(dpt_comm *c, dpt_allreduce_algo algo) {
  if (!c) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_comm_set_algo: comm is NULL");
  dpt_comm_options o = c->opt;
  o.algo = algo;
  return dpt_comm_set_options(c, &o);
}
