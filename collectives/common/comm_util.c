/* Helpers every file of collectives/ shares: element types, scratch, tags, the inline limit,
 * block geometry, the names of collectives and algorithms in messages. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sched.h>

#include "collectives/common/comm_util.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/size.h"
#include "collectives/common/comm_struct.h"

dpt_status dpt_comm_scratch(unsigned char **buf, size_t *have, size_t bytes, dpt_what *what) {
  if (*have >= bytes) return DPT_OK;
  unsigned char *p = calloc(1, bytes); /* zeroed: request slots start inactive */
  if (!p)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes of scratch",
                         dpt_what_str(what), bytes);
  free(*buf);
  *buf = p;
  *have = bytes;
  return DPT_OK;
}

int dpt_comm_data_tag(const dpt_comm *c, uint64_t seq) {
  return 1 + (int)((seq + c->uid) % (uint64_t)(c->tag_ub - 1));
}

int dpt_dtype_ok(dpt_comm_dtype dtype) {
  return dtype == DPT_COMM_F32 || dtype == DPT_COMM_F16 || dtype == DPT_COMM_BF16 ||
         dtype == DPT_COMM_I64;
}

size_t dpt_dtype_size(dpt_comm_dtype dtype) {
  return dtype == DPT_COMM_F16 || dtype == DPT_COMM_BF16 ? 2 : dtype == DPT_COMM_I64 ? 8 : 4;
}

const char *dpt_dtype_name(dpt_comm_dtype dtype) {
  switch (dtype) {
  case DPT_COMM_F32:
    return "float32";
  case DPT_COMM_F16:
    return "float16";
  case DPT_COMM_BF16:
    return "bfloat16";
  case DPT_COMM_I64:
    return "int64";
  }
  return "?";
}

size_t dpt_comm_inline_cap(int size) {
  if (size < 2) return 0;
  size_t cap = ((size_t)1 << 20) / (size_t)(size - 1);
  if (cap > ((size_t)64 << 10)) cap = (size_t)64 << 10;
  if (cap < 1024) cap = 1024;
  return cap;
}

size_t dpt_payload_bytes(size_t count, dpt_comm_dtype dtype) {
  size_t b;
  return dpt_mul_ok(count, dpt_dtype_size(dtype), &b) ? b : SIZE_MAX;
}

size_t dpt_block_elems(const dpt_comm *c, size_t esize) {
  size_t b = c->opt.block_bytes / esize;
  return b ? b : 1;
}

void dpt_split(size_t len, size_t n, size_t i, size_t *off, size_t *part) {
  const size_t base = len / n, extra = len % n;
  *off = i * base + (i < extra ? i : extra);
  *part = base + (i < extra);
}

const char *const dpt_allreduce_algo_names[] = {
#define DPT_ALGO_NAME_(name, value, text) [DPT_ALLREDUCE_##name] = text,
    DPT_ALLREDUCE_ALGO_MAP(DPT_ALGO_NAME_)
#undef DPT_ALGO_NAME_
};
const int dpt_allreduce_algo_count =
    (int)(sizeof dpt_allreduce_algo_names / sizeof *dpt_allreduce_algo_names);

const char *dpt_allreduce_algo_name(dpt_allreduce_algo algo) {
  if ((unsigned)algo >= (unsigned)dpt_allreduce_algo_count) return NULL;
  return dpt_allreduce_algo_names[algo];
}

void dpt_what_describe(char *out, size_t n, const dpt_what *h) {
  if (h->op == DPT_COLL_ALLREDUCE) {
    const char *algo = dpt_allreduce_algo_name((dpt_allreduce_algo)h->algo);
    snprintf(out, n, "allreduce #%llu (%llu x %s, %s)", (unsigned long long)h->seq,
             (unsigned long long)h->count, dpt_dtype_name((dpt_comm_dtype)h->dtype),
             algo ? algo : "?");
  } else if (h->op == DPT_COLL_BROADCAST) {
    snprintf(out, n, "broadcast #%llu (%llu bytes from rank %d)", (unsigned long long)h->seq,
             (unsigned long long)h->count, (int)h->root);
  } else if (h->op == DPT_COLL_ALLGATHER) {
    snprintf(out, n, "allgather #%llu (%llu bytes per rank)", (unsigned long long)h->seq,
             (unsigned long long)h->count);
  } else if (h->op == DPT_COLL_REDUCE_SCATTER || h->op == DPT_COLL_ALLGATHER_SHARDS) {
    snprintf(out, n, "%s #%llu (%llu x %s)",
             h->op == DPT_COLL_REDUCE_SCATTER ? "reduce-scatter" : "allgather of shards",
             (unsigned long long)h->seq, (unsigned long long)h->count,
             dpt_dtype_name((dpt_comm_dtype)h->dtype));
  } else if (h->op == DPT_COLL_BARRIER) {
    snprintf(out, n, "barrier #%llu", (unsigned long long)h->seq);
  } else {
    snprintf(out, n, "unknown operation %u #%llu", (unsigned)h->op, (unsigned long long)h->seq);
  }
}

const char *dpt_what_str(dpt_what *w) {
  if (!w) return "collective";
  if (!w->text[0]) dpt_what_describe(w->text, sizeof w->text, w);
  return w->text;
}
