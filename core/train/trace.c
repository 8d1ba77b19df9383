/* The training timeline (core/train/trace.h): events kept in memory per replica, gathered to member
 * 0 in fixed-size chunks (an allgather per chunk, so no member needs room for everyone's events
 * except member 0), written as Chrome trace-event JSON. */
#define _POSIX_C_SOURCE 200809L
#include "core/train/trace.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/file.h"

/* One event as kept and as sent (no padding: the bytes on the wire are the struct's). */
typedef struct trace_rec {
  double t0, t1; /* own clock, seconds */
  int32_t track;
  char name[DPT_TRACE_NAME_MAX];
} trace_rec;
_Static_assert(sizeof(trace_rec) == 16 + 4 + DPT_TRACE_NAME_MAX, "trace_rec has padding");

/* What a member sends ahead of its events. */
typedef struct trace_head {
  int32_t replica;
  int32_t reserved;
  uint64_t count;
  uint64_t dropped;
  double offset;
  char process[96];
} trace_head;
_Static_assert(sizeof(trace_head) == 128, "trace_head has padding");

/* Each member's say before the data moves, and member 0's result after writing. */
enum { WORD_MESSAGE_MAX = 240 };
typedef struct trace_word {
  int32_t status;
  int32_t reserved;
  uint64_t bytes;
  char message[WORD_MESSAGE_MAX];
} trace_word;

struct dpt_trace {
  int replica;
  char process[96];
  double offset, offset_error; /* dpt_trace_align's */
  trace_rec *ev;
  size_t count, cap, limit;
  uint64_t dropped;
};

/* Members whose words fit on the stack: the agreement then needs no allocation. */
enum { WORDS_INLINE = 64 };
/* The clock alignment: barrier rounds per batch, at most this many batches, and the width
 * (seconds) of the offset's bounds at which it stops. */
enum { ALIGN_BATCH = 8, ALIGN_BATCHES = 8 };
#define ALIGN_WIDTH 20e-6

static const char *const track_names[DPT_TRACE_TRACKS] = {
    "data loading", "forward", "backward", "exchange", "optimizer", "checkpoints"};

dpt_status dpt_trace_create(int replica, const char *process_name, dpt_trace **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_trace_create: out is NULL");
  *out = NULL;
  if (replica < 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_trace_create: replica %d < 0", replica);
  dpt_trace *t = calloc(1, sizeof *t);
  if (!t) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_trace_create: out of host memory");
  t->replica = replica;
  snprintf(t->process, sizeof t->process, "%s", process_name ? process_name : "");
  *out = t;
  return DPT_OK;
}

void dpt_trace_destroy(dpt_trace *t) {
  if (!t) return;
  free(t->ev);
  free(t);
}

void dpt_trace_event(dpt_trace *t, dpt_trace_track track, const char *name, double t0, double t1) {
  if (!t || (int)track < 0 || track >= DPT_TRACE_TRACKS) return;
  /* JSON has no NaN or infinity: such an event could not be written. */
  if (!isfinite(t0) || !isfinite(t1) || (t->limit && t->count >= t->limit)) {
    t->dropped++;
    return;
  }
  if (t->count == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 1024;
    trace_rec *ev = cap <= SIZE_MAX / sizeof *ev ? realloc(t->ev, cap * sizeof *ev) : NULL;
    if (!ev) {
      t->dropped++;
      return;
    }
    t->ev = ev;
    t->cap = cap;
  }
  trace_rec *r = &t->ev[t->count++];
  r->t0 = t0;
  r->t1 = t1;
  r->track = (int32_t)track;
  /* strncpy zero-fills the rest: no stale bytes go over the wire. */
  strncpy(r->name, name ? name : "", sizeof r->name - 1);
  r->name[sizeof r->name - 1] = '\0';
}

void dpt_trace_set_limit(dpt_trace *t, size_t max_events) {
  if (t) t->limit = max_events;
}

size_t dpt_trace_count(const dpt_trace *t) {
  return t ? t->count : 0;
}

uint64_t dpt_trace_dropped(const dpt_trace *t) {
  return t ? t->dropped : 0;
}

double dpt_trace_offset_error(const dpt_trace *t) {
  return t ? t->offset_error : 0.0;
}

double dpt_trace_offset(const dpt_trace *t) {
  return t ? t->offset : 0.0;
}

/* ---- clock alignment ------------------------------------------------------------------------ */

static void sleep_us(long us) {
  struct timespec ts = {0, us * 1000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* One batch of barrier rounds: own[2k] and own[2k + 1] are when this member entered and left
 * round k. One member sleeps before each round so that its (or member 0's) ends come out tight. */
static dpt_status time_barriers(dpt_comm *comm, int rank, int size, int batch, double *own) {
  for (int k = 0; k < ALIGN_BATCH; ++k) {
    const int j = batch * ALIGN_BATCH + k;
    const int late = j % 2 == 0 ? 0 : 1 + (j / 2) % (size - 1);
    if (rank == late) sleep_us(300);
    own[2 * k] = dpt_now();
    const dpt_status st = dpt_barrier(comm);
    own[2 * k + 1] = dpt_now();
    if (st != DPT_OK) return st;
  }
  return DPT_OK;
}

/* The estimate when the rounds' intervals do not intersect (a clock that jumped): the median of
 * the exit differences, sorted in place. */
static double median_diff(double *diff, int rounds) {
  for (int i = 1; i < rounds; ++i)
    for (int j = i; j > 0 && diff[j - 1] > diff[j]; --j) {
      const double x = diff[j];
      diff[j] = diff[j - 1];
      diff[j - 1] = x;
    }
  return 0.5 * (diff[(rounds - 1) / 2] + diff[rounds / 2]);
}

dpt_status dpt_trace_measure_offset(dpt_comm *comm, double *offset, double *error) {
  if (!offset) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_trace_measure_offset: NULL");
  *offset = 0.0;
  if (error) *error = 0.0;
  if (!comm || dpt_comm_size(comm) == 1) return DPT_OK;
  const int rank = dpt_comm_rank(comm), size = dpt_comm_size(comm);
  /* Per round: when this member entered the barrier and when it left it. Every member enters
   * before any member leaves, so member 0's clock minus ours lies in (b0 - a, a0 - b) in every
   * round; the intersection over the rounds holds the true offset, its midpoint is the
   * estimate. The ends are tight in the rounds where member 0, or we, came last and woke at
   * once: one member sleeps a little before each round (member 0 every other round, the others
   * in turn), and on a busy host more batches of rounds run until every member's interval is
   * narrow (or the batches run out). */
  double *widths = calloc((size_t)size, sizeof *widths);
  if (!widths) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "clock alignment: out of host memory");
  double lo = -1e300, hi = 1e300, diff[ALIGN_BATCH * ALIGN_BATCHES];
  int rounds = 0;
  dpt_status st = DPT_OK;
  for (int batch = 0; st == DPT_OK && batch < ALIGN_BATCHES; ++batch) {
    double own[2 * ALIGN_BATCH], first[2 * ALIGN_BATCH];
    st = time_barriers(comm, rank, size, batch, own);
    memcpy(first, own, sizeof first);
    if (st == DPT_OK) st = dpt_broadcast_host(comm, first, sizeof first, 0);
    for (int k = 0; st == DPT_OK && rank != 0 && k < ALIGN_BATCH; ++k) {
      const double b0 = first[2 * k], a0 = first[2 * k + 1], b = own[2 * k], a = own[2 * k + 1];
      if (b0 - a > lo) lo = b0 - a;
      if (a0 - b < hi) hi = a0 - b;
      diff[rounds++] = a0 - a;
    }
    const double width = rank == 0 ? 0.0 : hi - lo;
    if (st == DPT_OK) st = dpt_allgather_host(comm, &width, sizeof width, widths);
    int narrow = 1;
    for (int r = 0; st == DPT_OK && r < size; ++r)
      narrow = narrow && widths[r] <= ALIGN_WIDTH;
    if (st == DPT_OK && narrow) break;
  }
  free(widths);
  if (st != DPT_OK) return dpt_error_context(st, "clock alignment");
  if (rank == 0) return DPT_OK;
  if (lo <= hi) {
    *offset = 0.5 * (lo + hi);
    if (error) *error = 0.5 * (hi - lo);
    return DPT_OK;
  }
  if (error) *error = INFINITY;
  *offset = median_diff(diff, rounds);
  return DPT_OK;
}

dpt_status dpt_trace_align(dpt_comm *comm, dpt_trace *t) {
  if (!t) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_trace_align: trace is NULL");
  t->offset = t->offset_error = 0.0;
  /* Threads of one process read the same clock: the offset is exactly 0, no estimate needed. */
  if (!comm || !strcmp(dpt_comm_transport(comm), "threads")) return DPT_OK;
  double offset = 0.0, error = 0.0;
  const dpt_status st = dpt_trace_measure_offset(comm, &offset, &error);
  if (st != DPT_OK) return dpt_error_context(st, "dpt_trace_align");
  t->offset = offset;
  t->offset_error = error;
  return DPT_OK;
}

/* ---- the JSON file -------------------------------------------------------------------------- */

/* One member's events as member 0 sees them. */
typedef struct member_view {
  trace_head head;
  const trace_rec *ev;
} member_view;

/* Writes s as the inside of a JSON string: quotes, backslashes and control characters escaped,
 * bytes that are not valid UTF-8 (a name cut inside a character) written as '?'. */
static void put_escaped(FILE *f, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    const unsigned c = *p;
    if (c < 0x80) {
      if (c == '"' || c == '\\')
        fprintf(f, "\\%c", (int)c);
      else if (c < 0x20)
        fprintf(f, "\\u%04x", c);
      else
        fputc((int)c, f);
      p++;
      continue;
    }
    int n = c >= 0xC2 && c <= 0xDF   ? 2
            : c >= 0xE0 && c <= 0xEF ? 3
            : c >= 0xF0 && c <= 0xF4 ? 4
                                     : 0;
    int ok = n > 0;
    for (int i = 1; ok && i < n; ++i)
      ok = (p[i] & 0xC0) == 0x80;
    if (ok && n >= 3) { /* no overlong forms, surrogates or code points above U+10FFFF */
      const unsigned c1 = p[1];
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 > 0x9F) && !(c == 0xF0 && c1 < 0x90) &&
           !(c == 0xF4 && c1 > 0x8F);
    }
    if (ok) {
      fwrite(p, 1, (size_t)n, f);
      p += n;
    } else {
      fputc('?', f);
      p++;
    }
  }
}

static void put_meta(FILE *f, const char *what, int pid, int tid, const char *arg_name,
                     const char *text, long sort) {
  fprintf(f, "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"%s\":", what, pid,
          tid, arg_name);
  if (text) {
    fputc('"', f);
    put_escaped(f, text);
    fputc('"', f);
  } else {
    fprintf(f, "%ld", sort);
  }
  fputs("}},\n", f);
}

static void write_events(FILE *f, const member_view *m, int n) {
  double origin = 0.0;
  int any = 0;
  uint64_t dropped = 0;
  for (int r = 0; r < n; ++r) {
    dropped += m[r].head.dropped;
    for (uint64_t i = 0; i < m[r].head.count; ++i) {
      const double ts = m[r].ev[i].t0 + m[r].head.offset;
      if (!any || ts < origin) origin = ts;
      any = 1;
    }
  }
  fprintf(f,
          "{\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"generator\":\"dptrain\","
          "\"replicas\":%d,\"dropped_events\":%llu,\"dropped_by_replica\":[",
          n, (unsigned long long)dropped);
  for (int r = 0; r < n; ++r)
    fprintf(f, "%s%llu", r ? "," : "", (unsigned long long)m[r].head.dropped);
  fputs("]},\n\"traceEvents\":[\n", f);
  char label[160];
  for (int r = 0; r < n; ++r) {
    const int pid = m[r].head.replica;
    if (m[r].head.process[0])
      snprintf(label, sizeof label, "replica %d (%s)", pid, m[r].head.process);
    else
      snprintf(label, sizeof label, "replica %d", pid);
    put_meta(f, "process_name", pid, 0, "name", label, 0);
    put_meta(f, "process_sort_index", pid, 0, "sort_index", NULL, pid);
    for (int k = 0; k < DPT_TRACE_TRACKS; ++k) {
      put_meta(f, "thread_name", pid, k, "name", track_names[k], 0);
      put_meta(f, "thread_sort_index", pid, k, "sort_index", NULL, k);
    }
  }
  int first = 1;
  for (int r = 0; r < n; ++r)
    for (uint64_t i = 0; i < m[r].head.count; ++i) {
      const trace_rec *e = &m[r].ev[i];
      const int track = e->track >= 0 && e->track < DPT_TRACE_TRACKS ? e->track : 0;
      const double ts = (e->t0 + m[r].head.offset - origin) * 1e6;
      const double dur = e->t1 > e->t0 ? (e->t1 - e->t0) * 1e6 : 0.0;
      fputs(first ? "{\"name\":\"" : ",\n{\"name\":\"", f);
      first = 0;
      put_escaped(f, e->name);
      fprintf(f, "\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}",
              track_names[track], m[r].head.replica, track, ts, dur);
    }
  /* The metadata lines end with a comma: an empty event list still needs an element after. */
  if (first) fputs("{\"name\":\"trace_end\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{}}", f);
  fputs("\n]}\n", f);
}

typedef struct events_view {
  const member_view *m;
  int n;
} events_view;

static int write_events_file(FILE *f, const void *ctx) {
  const events_view *v = ctx;
  write_events(f, v->m, v->n);
  return 1; /* errors show in ferror */
}

/* ---- gathering ------------------------------------------------------------------------------ */

static void fill_head(const dpt_trace *t, trace_head *h) {
  memset(h, 0, sizeof *h);
  if (!t) return;
  h->replica = t->replica;
  h->count = t->count;
  h->dropped = t->dropped;
  h->offset = t->offset;
  memcpy(h->process, t->process, sizeof h->process);
}

/* Bytes [off, off + len) of this member's message (head, then events) into dst, zero-padded. */
static void copy_range(const trace_head *h, const dpt_trace *t, size_t off, size_t len,
                       unsigned char *dst) {
  memset(dst, 0, len);
  const size_t hb = sizeof *h, total = hb + (size_t)h->count * sizeof(trace_rec);
  const size_t end = off + len < total ? off + len : total;
  for (size_t p = off; p < end;) {
    if (p < hb) {
      const size_t k = (end < hb ? end : hb) - p;
      memcpy(dst + (p - off), (const unsigned char *)h + p, k);
      p += k;
    } else {
      memcpy(dst + (p - off), (const unsigned char *)t->ev + (p - hb), end - p);
      p = end;
    }
  }
}

/* Bytes per member per allgather round: 1 MiB, less for large groups (at most ~64 MiB in all). */
static size_t chunk_bytes(int size) {
  size_t c = ((size_t)64 << 20) / (size_t)size;
  if (c > ((size_t)1 << 20)) c = (size_t)1 << 20;
  if (c < ((size_t)64 << 10)) c = (size_t)64 << 10;
  return c;
}

static void set_word(trace_word *w, dpt_status st, uint64_t bytes) {
  memset(w, 0, sizeof *w);
  w->status = (int32_t)st;
  w->bytes = bytes;
  if (st != DPT_OK) snprintf(w->message, sizeof w->message, "%s", dpt_last_error());
}

/* Member 0: the others' messages put together (store[r] = member r's bytes; its own is t). */
static dpt_status write_gathered(const char *path, const dpt_trace *t, unsigned char *const *store,
                                 int size) {
  member_view inline_views[WORDS_INLINE];
  member_view *m = size <= WORDS_INLINE ? inline_views : calloc((size_t)size, sizeof *m);
  if (!m) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "trace %s: out of host memory", path);
  for (int r = 0; r < size; ++r) {
    if (r == 0) {
      fill_head(t, &m[r].head);
      m[r].ev = t->ev;
    } else {
      memcpy(&m[r].head, store[r], sizeof m[r].head);
      m[r].ev = (const trace_rec *)(store[r] + sizeof m[r].head);
    }
  }
  /* No fsync: a trace is a diagnostic; the rename alone keeps a failed write from leaving a
   * half-written file under path. */
  const events_view v = {m, size};
  dpt_status st = dpt_write_file_atomic(path, "trace ", 0, write_events_file, &v);
  if (m != inline_views) free(m);
  return st;
}

/* One member's state in a dpt_trace_write over several members: its own message, the round
 * buffer, every member's word and, on member 0, the others' messages and its own result. */
typedef struct write_state {
  dpt_comm *comm;
  const dpt_trace *t;
  const char *path;
  int rank, size;
  trace_head head;
  size_t chunk;
  unsigned char *buf;    /* what every member receives per round, then what it sends */
  trace_word *words;     /* every member's word */
  unsigned char **store; /* member 0: store[r] = member r's bytes, in one block at store[1] */
  dpt_status root_st;    /* member 0: no room for the store, or the file not written */
  char root_msg[WORD_MESSAGE_MAX];
} write_state;

/* This member's word for the agreement: its status (bad arguments, no round buffer) and the size
 * of its message. Returns the status; the round buffer lands in s->buf. */
static dpt_status prepare_word(write_state *s, trace_word *word) {
  dpt_status mine = DPT_OK;
  if (!s->t)
    mine = dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_trace_write: trace is NULL");
  else if (s->rank == 0 && !s->path)
    mine = dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_trace_write: path is NULL on member 0");
  s->buf = mine == DPT_OK ? malloc((size_t)(s->size + 1) * s->chunk) : NULL;
  if (mine == DPT_OK && !s->buf)
    mine = dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_trace_write: out of host memory");
  set_word(word, mine, sizeof s->head + s->head.count * sizeof(trace_rec));
  return mine;
}

/* Shares every member's word: every member ends with the first failed member's status, so all
 * go on to the rounds or none does. *max_bytes is the largest message, which sets the rounds. */
static dpt_status agree_on_words(write_state *s, dpt_status mine, const trace_word *word,
                                 uint64_t *max_bytes) {
  dpt_status st = dpt_allgather_host(s->comm, word, sizeof *word, s->words);
  int failed = -1;
  *max_bytes = 0;
  for (int r = 0; st == DPT_OK && r < s->size; ++r) {
    if (failed < 0 && s->words[r].status != DPT_OK) failed = r;
    if (s->words[r].bytes > *max_bytes) *max_bytes = s->words[r].bytes;
  }
  if (st != DPT_OK) {
    st = dpt_error_context(st, "dpt_trace_write");
  } else if (failed >= 0) {
    st = failed == s->rank
             ? dpt_set_error(mine, "%s", word->message)
             : dpt_set_error((dpt_status)s->words[failed].status, "dpt_trace_write: member %d: %s",
                             failed, s->words[failed].message);
  }
  return st;
}

/* Member 0: room for every other member's message, in one block. If it has no room it still
 * takes part in the rounds (the others wait on them) and reports the failure at the end. */
static void alloc_store(write_state *s) {
  uint64_t total = 0;
  for (int r = 1; r < s->size; ++r)
    total += s->words[r].bytes;
  s->store = calloc((size_t)s->size, sizeof *s->store);
  unsigned char *all = s->store && total <= SIZE_MAX ? malloc(total ? (size_t)total : 1) : NULL;
  if (!all) {
    s->root_st = dpt_set_error(DPT_ERR_OUT_OF_MEMORY,
                               "trace %s: no room for %llu bytes of events on member 0", s->path,
                               (unsigned long long)total);
    snprintf(s->root_msg, sizeof s->root_msg, "%s", dpt_last_error()); /* the rounds come first */
  } else {
    for (int r = 1; r < s->size; ++r) {
      s->store[r] = all;
      all += s->words[r].bytes;
    }
  }
}

/* The messages move in rounds of one chunk per member (an allgather each, so only member 0 needs
 * room for them all); member 0 files each member's chunk into its store. */
static dpt_status run_rounds(write_state *s, uint64_t max_bytes) {
  const size_t chunk = s->chunk;
  const uint64_t rounds = (max_bytes + chunk - 1) / chunk;
  unsigned char *send = s->buf ? s->buf + (size_t)s->size * chunk : NULL;
  for (uint64_t k = 0; k < rounds; ++k) {
    const size_t off = (size_t)k * chunk;
    if (s->rank != 0)
      copy_range(&s->head, s->t, off, chunk, send);
    else
      memset(send, 0, chunk); /* member 0's own events never leave it */
    const dpt_status st = dpt_allgather_host(s->comm, send, chunk, s->buf);
    if (st != DPT_OK) return dpt_error_context(st, "dpt_trace_write");
    for (int r = 1; s->rank == 0 && s->root_st == DPT_OK && r < s->size; ++r)
      if (off < s->words[r].bytes) {
        const size_t left = (size_t)s->words[r].bytes - off;
        memcpy(s->store[r] + off, s->buf + (size_t)r * chunk, left < chunk ? left : chunk);
      }
  }
  return DPT_OK;
}

/* Member 0's result (no room, or the file not written), broadcast so that every member returns
 * the same status. */
static dpt_status share_root_result(const write_state *s) {
  trace_word result;
  memset(&result, 0, sizeof result);
  result.status = (int32_t)s->root_st;
  memcpy(result.message, s->root_msg, sizeof result.message);
  const dpt_status st = dpt_broadcast_host(s->comm, &result, sizeof result, 0);
  if (st != DPT_OK) return dpt_error_context(st, "dpt_trace_write: member 0's result");
  if (s->rank == 0)
    return s->root_st == DPT_OK ? DPT_OK : dpt_set_error(s->root_st, "%s", s->root_msg);
  if (result.status != DPT_OK)
    return dpt_set_error((dpt_status)result.status, "dpt_trace_write: member 0: %s",
                         result.message);
  return DPT_OK;
}

dpt_status dpt_trace_write(dpt_comm *comm, dpt_trace *t, const char *path) {
  const int size = comm ? dpt_comm_size(comm) : 1, rank = comm ? dpt_comm_rank(comm) : 0;
  if (size <= 1) {
    if (!t || !path)
      return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_trace_write: %s is NULL",
                           !t ? "trace" : "path");
    return write_gathered(path, t, NULL, 1);
  }
  write_state s = {.comm = comm, .t = t, .path = path, .rank = rank, .size = size};
  fill_head(t, &s.head);
  s.chunk = chunk_bytes(size);
  trace_word word, inline_words[WORDS_INLINE];
  const dpt_status mine = prepare_word(&s, &word);
  s.words = size <= WORDS_INLINE ? inline_words : calloc((size_t)size, sizeof *s.words);
  if (!s.words) { /* cannot take part: the others' agreement ends at the communicator's deadline */
    free(s.buf);
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_trace_write: out of host memory");
  }
  uint64_t max_bytes = 0;
  dpt_status st = agree_on_words(&s, mine, &word, &max_bytes);
  if (st == DPT_OK && rank == 0) alloc_store(&s);
  if (st == DPT_OK) st = run_rounds(&s, max_bytes);
  if (st == DPT_OK && rank == 0 && s.root_st == DPT_OK)
    if ((s.root_st = write_gathered(path, t, s.store, size)) != DPT_OK)
      snprintf(s.root_msg, sizeof s.root_msg, "%s", dpt_last_error());
  if (s.store) free(s.store[1]);
  free(s.store);
  if (s.words != inline_words) free(s.words);
  free(s.buf);
  if (st != DPT_OK) return st;
  return share_root_result(&s);
}
