/* Shared-memory channels: the MPI transport's data path between the ranks of one node (all of
 * them when every rank runs there; the node's own ranks when the communicator spans nodes).
 *
 * Why not MPI's own shared-memory path: for large messages Open MPI copies with CMA
 * (process_vm_readv), which pins the pages of the other process on every call and runs far
 * below memcpy speed on data that is not in cache. Copying through a small shared ring keeps
 * every copy a plain memcpy on cache-resident slots.
 *
 * One POSIX shared-memory segment per node (created by the node's first rank, mapped by the
 * node's ranks, unlinked once mapped) holds a channel per ordered pair (src, dst) of the node's
 * ranks, numbered 0 .. size-1 inside the node (dpt_shm_map_ranks: the communicator's ranks): a ring
 * of `slots` slots of `slot` bytes with a header each, a head counter (slots published, written
 * only by src) and a tail counter (slots consumed, written only by dst): single producer, single
 * consumer, acquire/release.
 *
 *   src: isend queues the request; progress copies it slot by slot while head - tail < slots
 *        and publishes each slot (head + 1); the send completes when its last slot is in.
 *   dst: irecv queues the request; progress looks at the oldest unconsumed slot: a message's
 *        first slot is matched with the first posted receive of the same tag (MPI's rule,
 *        applied at the head of the channel: receives for one peer are posted in the order
 *        that peer sends, which every schedule here does), copied, and consumed (tail + 1).
 *
 * How a slot is written. Both ranks of a pair copy every byte once (sender: buffer -> slot,
 * receiver: slot -> buffer, or slot + buffer -> buffer), and what that costs depends on where
 * the two cores sit. When they share a cache the receiver reads the slot from it and a plain
 * memcpy is best. When they do not (cores on different chiplets or sockets, or vCPUs the
 * hypervisor placed apart), every line the receiver reads comes from the other core's cache and
 * every line the sender rewrites must first be taken back from the receiver's. There,
 * streaming (non-temporal) stores win: the slot goes to memory, the receiver reads it from
 * there at full speed and no line moves between the caches. Streaming loses where the cores
 * share a cache, and the placement can change while a job runs (a VM's vCPUs move). So, per
 * channel (copy "auto"):
 *
 *   sender:   writes slots of SHM_MEASURE_MIN bytes or more in the mode the receiver prefers,
 *             and now and then one in the other mode (about one in 32 to one in 256 slots,
 *             fewer the dearer that mode was, jittered); it times its copy and puts the mode
 *             and the time in the slot header (not in the ring's first round: cold caches);
 *   receiver: times its own copy of such a slot, and keeps an average cost per KiB for each
 *             (mode, copy or float32 / float16 sum); it switches its preference when the
 *             other mode costs 10 % less (dpt_copy_choice_add) and publishes it, with the
 *             exploration spacing, in the channel for the sender.
 *
 * A change of placement is followed within a few slots (the preferred mode is measured on
 * every slot) or a few explorations (the other one). DPT_COMM_SHM_COPY=cached|streaming fixes
 * the mode; streaming needs x86-64 (elsewhere every slot is a memcpy). Slots under
 * SHM_MEASURE_MIN are always memcpy'd: with 12 or more ranks on a node every slot is (the
 * segment's budget is shared by N(N-1) channels), and the modes make no difference.
 *
 * A data message of a collective older than the one in progress is dropped (left over from a
 * failed collective); a message that starts while the previous one is unfinished means its
 * sender abandoned it (cancel after a failure) and fails the receive. Progress happens only
 * inside poll, on the calling thread; unmapping is local, so destroying never waits.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collectives/transports/shm.h"
#include "collectives/common/comm_struct.h"
#include "collectives/transports/transport.h"
#include "collectives/transports/backoff.h"
#include "collectives/common/comm_util.h"
#include "base/clock.h"
#include "base/error.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#define SHM_HAVE_STREAM 1
#else
#define SHM_HAVE_STREAM 0
#endif

/* Budget of the whole segment: the per-channel ring shrinks as ranks grow. */
#define SHM_BUDGET   ((size_t)32 << 20)
#define SHM_SLOTS    8
#define SHM_SLOT_MAX ((size_t)256 << 10)
#define SHM_SLOT_MIN ((size_t)16 << 10)
/* Slots this large are candidates for streaming and measured; smaller ones are memcpy'd. */
#define SHM_MEASURE_MIN ((size_t)32 << 10)
/* A sender writes about one measured slot in SHM_EXPLORE * g in the mode its receiver does not
 * prefer, g = how many times dearer that mode was (1 to 8): exploring then costs about 3 % as
 * long as that mode is at most 8x dearer. */
#define SHM_EXPLORE 32

enum { MODE_CACHED = 0, MODE_STREAM = 1 };

typedef struct slot_hdr {
  int32_t tag;
  uint32_t last;    /* the message's last slot */
  uint64_t seq;     /* the sender's collective */
  uint64_t total;   /* message bytes */
  uint64_t offset;  /* of this slot's bytes in the message */
  uint64_t bytes;   /* in this slot */
  uint32_t mode;    /* MODE_CACHED or MODE_STREAM */
  uint32_t send_ns; /* the sender's copy + 1 when timed (copy auto), else 0 */
  uint64_t pad[2];
} slot_hdr;
_Static_assert(sizeof(slot_hdr) == 64, "a slot header is one cache line");

typedef struct chan {
  _Alignas(64) _Atomic uint64_t head; /* slots published (written by the sender) */
  _Alignas(64) _Atomic uint64_t tail; /* slots consumed (written by the receiver) */
  _Atomic uint32_t advice; /* the receiver's word for large slots (copy auto): mode | every << 1,
                              one slot in about `every` in the other mode (0: SHM_EXPLORE) */
  _Alignas(64) slot_hdr hdr[SHM_SLOTS];
  /* then SHM_SLOTS * slot bytes of data */
} chan;

/* This process's side of one peer. */
typedef struct peer {
  dpt_req *sq_head, *sq_tail; /* sends waiting for slots, in order */
  dpt_req *rq_head, *rq_tail; /* receives posted, in order */
  dpt_req *cur;               /* receive whose message is arriving */
  int discard;                /* dropping the rest of a message */
  int explore_in;             /* sender: measured slots until one in the other mode */
  uint32_t jitter;            /* sender: state of the spacing's jitter */
  dpt_copy_choice choice;     /* receiver: what each mode cost */
} peer;

struct dpt_shm {
  unsigned char *base; /* the mapped segment (owner: this) */
  size_t bytes, chan_bytes, slot;
  int rank, size; /* this process and the ranks in the segment, numbered inside the node */
  int grank;      /* this process's rank in the communicator */
  int *local;     /* [world]: the segment's number of each rank of the communicator, -1 for
                     ranks on other nodes; NULL: the same numbers (owner: this) */
  uint64_t sent;  /* bytes of the sends posted here */
  dpt_shm_copy copy;
  uint64_t large[2]; /* slots of SHM_MEASURE_MIN bytes or more written: cached, streaming */
  peer *peers;       /* [size] */
  int watch;         /* the peers' processes can be seen from here (dpt_shm_watch_peers) */
  double watched;    /* when a wait last looked at them */
};

/* How often a sleeping wait looks whether the peers it waits for still exist. */
#define SHM_WATCH_SECONDS 0.25

static chan *chan_of(const dpt_shm *s, int src, int dst) {
  return (chan *)(void *)(s->base + ((size_t)src * (size_t)s->size + (size_t)dst) * s->chan_bytes);
}

static unsigned char *slot_data(const dpt_shm *s, chan *c, uint64_t i) {
  return (unsigned char *)c + sizeof(chan) + (size_t)(i % SHM_SLOTS) * s->slot;
}

size_t dpt_shm_slot_bytes(const dpt_shm *s) {
  return s->slot;
}

void dpt_shm_large_slots(const dpt_shm *s, uint64_t out[2]) {
  out[0] = s->large[0];
  out[1] = s->large[1];
}

static void geometry(int size, size_t *slot, size_t *chan_bytes, size_t *total) {
  const size_t pairs = (size_t)size * (size_t)(size - 1);
  size_t per = pairs ? SHM_BUDGET / pairs / SHM_SLOTS : SHM_SLOT_MAX;
  per = per > SHM_SLOT_MAX ? SHM_SLOT_MAX : per < SHM_SLOT_MIN ? SHM_SLOT_MIN : per;
  *slot = per & ~(size_t)63;
  *chan_bytes = (sizeof(chan) + SHM_SLOTS * *slot + 4095) & ~(size_t)4095;
  *total = (size_t)size * (size_t)size * *chan_bytes;
}

dpt_status dpt_shm_open(const char *name, int create, int rank, int size, dpt_shm_copy copy,
                        dpt_shm **out) {
  *out = NULL;
  dpt_shm *s = calloc(1, sizeof *s);
  if (!s) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "shared memory: no memory");
  s->rank = rank;
  s->grank = rank;
  s->size = size;
  s->copy = SHM_HAVE_STREAM ? copy : DPT_SHM_COPY_CACHED;
  geometry(size, &s->slot, &s->chan_bytes, &s->bytes);
  s->peers = calloc((size_t)size, sizeof *s->peers);
  int fd = s->peers ? shm_open(name, create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600) : -1;
  dpt_status st = DPT_OK;
  if (fd < 0) {
    st = dpt_set_error(DPT_ERR_COMM, "shm_open(%s): %s", name, strerror(errno));
  } else {
    /* Reserve the pages now: a tmpfs that runs out later would kill us with SIGBUS. */
    int rc = create ? posix_fallocate(fd, 0, (off_t)s->bytes) : 0;
    if (rc != 0) {
      st = dpt_set_error(DPT_ERR_COMM, "shared memory: cannot reserve %zu bytes: %s", s->bytes,
                         strerror(rc));
    } else {
      /* Populated: a first touch inside a timed slot copy would pass for a slow mode. */
      int flags = MAP_SHARED;
#if defined(MAP_POPULATE)
      flags |= MAP_POPULATE;
#endif
      void *p = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, flags, fd, 0);
      if (p == MAP_FAILED)
        st = dpt_set_error(DPT_ERR_COMM, "mmap: %s", strerror(errno));
      else
        s->base = p;
      /* This process's id in its own (unused) channel to itself, for dpt_shm_watch_peers. */
      if (s->base) atomic_store(&chan_of(s, rank, rank)->head, (uint64_t)getpid());
    }
    close(fd);
  }
  if (st != DPT_OK) {
    if (create && fd >= 0) shm_unlink(name);
    free(s->peers);
    free(s);
    return st;
  }
  *out = s;
  return DPT_OK;
}

/* The process id rank p wrote when it mapped the segment; 0 before. */
static pid_t pid_of(const dpt_shm *s, int p) {
  return (pid_t)atomic_load(&chan_of(s, p, p)->head);
}

static int gone(pid_t pid) {
  return kill(pid, 0) != 0 && errno == ESRCH;
}

dpt_status dpt_shm_map_ranks(dpt_shm *s, const int *global, int world) {
  int *local = malloc((size_t)world * sizeof *local);
  if (!local) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "shared memory: %d rank numbers", world);
  for (int r = 0; r < world; ++r)
    local[r] = -1;
  for (int i = 0; i < s->size; ++i)
    local[global[i]] = i;
  free(s->local);
  s->local = local;
  s->grank = global[s->rank];
  return DPT_OK;
}

/* The segment's number of the communicator's rank `peer`; -1 when it is on another node. */
static int local_of(const dpt_shm *s, int peer) {
  return s->local ? s->local[peer] : peer;
}

int dpt_shm_reaches(const dpt_shm *s, int peer) {
  return local_of(s, peer) >= 0;
}

uint64_t dpt_shm_sent_bytes(const dpt_shm *s) {
  return s->sent;
}

void dpt_shm_watch_peers(dpt_shm *s) {
  s->watch = 1;
  for (int p = 0; p < s->size; ++p)
    if (p != s->rank && (pid_of(s, p) <= 0 || gone(pid_of(s, p)))) s->watch = 0;
}

/* A peer of this node that one of reqs waits for and whose process is gone: a failure naming
 * it (its rank in the communicator). */
static dpt_status check_peers(dpt_shm *s, dpt_req **reqs, int n) {
  for (int i = 0; i < n; ++i) {
    const int p = reqs[i]->active ? local_of(s, reqs[i]->peer) : -1;
    if (p < 0) continue;
    const pid_t pid = pid_of(s, p);
    if (gone(pid))
      return dpt_set_error(DPT_ERR_COMM,
                           "rank %d (process %ld) is gone: it exited or was killed while rank %d "
                           "waited for it",
                           reqs[i]->peer, (long)pid, s->grank);
  }
  return DPT_OK;
}

dpt_status dpt_shm_watch_check(dpt_shm *s, dpt_req **reqs, int n) {
  if (!s->watch) return DPT_OK;
  const double now = dpt_now();
  if (now - s->watched < SHM_WATCH_SECONDS) return DPT_OK;
  s->watched = now;
  return check_peers(s, reqs, n);
}

void dpt_shm_unlink(const char *name) {
  shm_unlink(name);
}

void dpt_shm_close(dpt_shm *s) {
  if (!s) return;
  munmap(s->base, s->bytes);
  free(s->peers);
  free(s->local);
  free(s);
}

dpt_status dpt_shm_copy_parse(const char *v, dpt_shm_copy *out) {
  if (!strcmp(v, "auto"))
    *out = DPT_SHM_COPY_AUTO;
  else if (!strcmp(v, "cached"))
    *out = DPT_SHM_COPY_CACHED;
  else if (!strcmp(v, "streaming"))
    *out = DPT_SHM_COPY_STREAM;
  else
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "DPT_COMM_SHM_COPY='%s' is not auto, cached or streaming", v);
  return DPT_OK;
}

int dpt_copy_choice_add(dpt_copy_choice *c, int kind, int mode, double ns_per_kib) {
  float *e = &c->est[kind < 0 || kind >= DPT_COPY_KINDS ? 0 : kind][mode != 0];
  double x = ns_per_kib;
  if (*e > 0) {
    /* Quick to follow a mode that got cheaper (the first copies into fresh pages are slow),
     * slower to believe it got dearer: one preempted copy must not flip the choice, so a
     * sample counts at most twice the mean. */
    if (x > 2.0 * *e) x = 2.0 * *e;
    *e += (float)((x - *e) * (x < *e ? 0.5 : 0.25));
  } else {
    *e = (float)x;
  }
  double cost[2] = {0, 0};
  for (int k = 0; k < DPT_COPY_KINDS; ++k)
    if (c->est[k][0] > 0 && c->est[k][1] > 0) {
      cost[0] += c->est[k][0];
      cost[1] += c->est[k][1];
    }
  const int other = !c->prefer;
  if (cost[other] > 0 && cost[other] < 0.9 * cost[c->prefer]) c->prefer = other;
  c->gap = cost[0] > 0 ? (float)(cost[!c->prefer] / cost[c->prefer]) : 0.0f;
  return c->prefer;
}

/* Copies with streaming stores: the data goes to memory, no cache keeps it. dst is a slot's
 * data, 64-byte aligned. */
static void copy_stream(unsigned char *dst, const unsigned char *src, size_t n) {
#if SHM_HAVE_STREAM
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
    __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(src + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(src + i + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(const void *)(src + i + 48));
    _mm_stream_si128((__m128i *)(void *)(dst + i), a);
    _mm_stream_si128((__m128i *)(void *)(dst + i + 16), b);
    _mm_stream_si128((__m128i *)(void *)(dst + i + 32), c);
    _mm_stream_si128((__m128i *)(void *)(dst + i + 48), d);
  }
  if (i < n) memcpy(dst + i, src + i, n - i);
  _mm_sfence(); /* streaming stores are not ordered by the release that publishes the slot */
#else
  memcpy(dst, src, n);
#endif
}

/* Writes the next n bytes of send r into slot `head`, in the mode the channel calls for, and
 * sets the slot header's mode and time. */
static void fill_slot(dpt_shm *s, peer *pe, chan *c, uint64_t head, const dpt_req *r, size_t n) {
  slot_hdr *h = &c->hdr[head % SHM_SLOTS];
  h->mode = MODE_CACHED;
  h->send_ns = 0;
  if (n == 0) return;
  unsigned char *dst = slot_data(s, c, head);
  const unsigned char *src = (const unsigned char *)r->buf + r->off;
  /* The first round of the ring is not measured: it finds every cache cold. */
  if (n < SHM_MEASURE_MIN || s->copy == DPT_SHM_COPY_CACHED ||
      (s->copy == DPT_SHM_COPY_AUTO && head < SHM_SLOTS)) {
    s->large[0] += n >= SHM_MEASURE_MIN;
    memcpy(dst, src, n);
    return;
  }
  if (s->copy == DPT_SHM_COPY_STREAM) {
    s->large[1]++;
    h->mode = MODE_STREAM;
    copy_stream(dst, src, n);
    return;
  }
  const double t0 = dpt_now();
  const uint32_t advice = atomic_load_explicit(&c->advice, memory_order_relaxed);
  uint32_t mode = advice & 1;
  if (pe->explore_in-- <= 0) {
    mode = !mode;
    /* every/2 .. every*3/2 - 1 slots to the next: a fixed period could keep landing on one
     * kind of slot (copy or sum) of a periodic schedule and leave the other's cost stale. */
    const uint32_t every = advice >> 1 ? advice >> 1 : SHM_EXPLORE;
    pe->jitter = pe->jitter * 1664525u + 1013904223u;
    pe->explore_in = (int)(every / 2 + (pe->jitter >> 16) % every) - 1;
  }
  s->large[mode]++;
  if (mode == MODE_STREAM)
    copy_stream(dst, src, n);
  else
    memcpy(dst, src, n);
  const double ns = (dpt_now() - t0) * 1e9;
  h->mode = mode;
  h->send_ns = ns < 4e9 ? (uint32_t)ns + 1 : UINT32_MAX;
}

static void complete(dpt_req *r, dpt_status err) {
  r->err = err;
  r->active = 0;
  r->done = 1;
}

/* Copies queued sends to `p` into free slots. */
static void progress_send(dpt_shm *s, int p) {
  peer *pe = &s->peers[p];
  chan *c = chan_of(s, s->rank, p);
  while (pe->sq_head) {
    dpt_req *r = pe->sq_head;
    const uint64_t head = atomic_load_explicit(&c->head, memory_order_relaxed);
    if (head - atomic_load_explicit(&c->tail, memory_order_acquire) >= SHM_SLOTS) return;
    const size_t left = r->bytes - r->off;
    const size_t n = left < s->slot ? left : s->slot;
    slot_hdr *h = &c->hdr[head % SHM_SLOTS];
    h->tag = r->tag;
    h->seq = r->seq;
    h->total = r->bytes;
    h->offset = r->off;
    h->bytes = n;
    h->last = r->off + n == r->bytes;
    fill_slot(s, pe, c, head, r, n);
    atomic_store_explicit(&c->head, head + 1, memory_order_release);
    r->off += n;
    if (h->last) {
      dpt_req_unlink(&pe->sq_head, &pe->sq_tail, r);
      complete(r, DPT_OK);
    }
  }
}

/* Consumes what has arrived from `p`, as far as posted receives take it. */
static void progress_recv(dpt_shm *s, int p, uint64_t current) {
  peer *pe = &s->peers[p];
  chan *c = chan_of(s, p, s->rank);
  for (;;) {
    const uint64_t tail = atomic_load_explicit(&c->tail, memory_order_relaxed);
    if (tail == atomic_load_explicit(&c->head, memory_order_acquire)) return;
    const slot_hdr h = c->hdr[tail % SHM_SLOTS];
    if (h.offset == 0) {
      if (pe->cur) { /* the previous message stopped half way: its sender gave up */
        complete(pe->cur, DPT_ERR_COMM);
        pe->cur = NULL;
      }
      pe->discard = 0;
      dpt_req *r = pe->rq_head;
      while (r && r->tag != h.tag)
        r = r->next;
      if (!r) {
        /* Nobody waits for it: drop it if it is left over from an older collective, else
         * leave it until its receive is posted. */
        if (h.tag == DPT_TAG_HELLO || h.seq >= current) return;
        pe->discard = !h.last;
      } else {
        dpt_req_unlink(&pe->rq_head, &pe->rq_tail, r);
        if (h.total > r->bytes) { /* larger than expected: reported, never truncated */
          r->got = 0;
          complete(r, DPT_ERR_MISMATCH);
          pe->discard = !h.last;
        } else {
          pe->cur = r;
        }
      }
    }
    if (pe->cur && !pe->discard) {
      dpt_req *r = pe->cur;
      const double t0 = h.send_ns ? dpt_now() : 0.0;
      dpt_req_deliver(r, h.offset, slot_data(s, c, tail), h.bytes);
      if (h.send_ns) { /* a timed slot: add both copies' cost to the choice */
        const double ns = (dpt_now() - t0) * 1e9 + h.send_ns;
        const int kind = !r->reduce                  ? 0
                         : r->dtype == DPT_COMM_F16  ? 2
                         : r->dtype == DPT_COMM_BF16 ? 3
                                                     : 1;
        const int mode =
            dpt_copy_choice_add(&pe->choice, kind, (int)h.mode, ns * 1024.0 / (double)h.bytes);
        const float g = pe->choice.gap < 1 ? 1 : pe->choice.gap > 8 ? 8 : pe->choice.gap;
        const uint32_t advice = (uint32_t)mode | (uint32_t)(SHM_EXPLORE * (int)g) << 1;
        if (advice != atomic_load_explicit(&c->advice, memory_order_relaxed))
          atomic_store_explicit(&c->advice, advice, memory_order_relaxed);
      }
      if (h.last) {
        r->got = h.total;
        complete(r, DPT_OK);
        pe->cur = NULL;
      }
    } else if (h.last) {
      pe->discard = 0;
    }
    atomic_store_explicit(&c->tail, tail + 1, memory_order_release);
  }
}

dpt_status dpt_shm_isend(dpt_shm *s, dpt_req *r) {
  r->active = 1;
  r->done = 0;
  r->off = 0;
  r->err = DPT_OK;
  const int p = local_of(s, r->peer);
  peer *pe = &s->peers[p];
  dpt_req_push(&pe->sq_head, &pe->sq_tail, r);
  s->sent += r->bytes;
  progress_send(s, p); /* most sends are done right here */
  return DPT_OK;
}

dpt_status dpt_shm_irecv(dpt_shm *s, dpt_req *r) {
  r->active = 1;
  r->done = 0;
  r->off = 0;
  r->got = 0;
  r->err = DPT_OK;
  peer *pe = &s->peers[local_of(s, r->peer)];
  dpt_req_push(&pe->rq_head, &pe->rq_tail, r);
  return DPT_OK;
}

void dpt_shm_progress(dpt_shm *s, uint64_t current) {
  for (int p = 0; p < s->size; ++p) {
    if (p == s->rank) continue;
    if (s->peers[p].sq_head) progress_send(s, p);
    progress_recv(s, p, current);
  }
}

dpt_status dpt_shm_poll(dpt_shm *s, dpt_req **reqs, int n, int block, double deadline, double since,
                        int *ndone, uint64_t current, int yield) {
  unsigned char was[DPT_POLL_MAX];
  for (int i = 0; i < n; ++i)
    was[i] = (unsigned char)reqs[i]->active;
  *ndone = 0;
  dpt_backoff b;
  dpt_backoff_start(&b, since, yield);
  for (;;) {
    dpt_shm_progress(s, current);
    for (int i = 0; i < n; ++i)
      if (was[i] && !reqs[i]->active) {
        was[i] = 0;
        ++*ndone;
      }
    if (*ndone > 0 || !block) return DPT_OK;
    /* Sleeping (the peer is late by more than the spin): a peer that died would otherwise be
     * waited for until the deadline. */
    if (b.nap > 0) DPT_TRY(dpt_shm_watch_check(s, reqs, n));
    if (b.nap > 0) DPT_TRY(dpt_req_teardown_check(reqs, n, since));
    if (dpt_backoff_pause(&b, deadline)) return DPT_OK;
  }
}

void dpt_shm_cancel(dpt_shm *s, dpt_req *r) {
  if (!r->active) return;
  peer *pe = &s->peers[local_of(s, r->peer)];
  if (r->is_recv) {
    if (pe->cur == r) {
      pe->cur = NULL;
      pe->discard = 1;
    } else {
      dpt_req_unlink(&pe->rq_head, &pe->rq_tail, r);
    }
  } else {
    /* Slots already published stay: the receiver sees the message stop half way. */
    dpt_req_unlink(&pe->sq_head, &pe->sq_tail, r);
  }
  r->active = 0;
}
