/* Internal: what every file of collectives/ shares: element types, scratch, tags, the
 * inline limit, block geometry, the names of collectives and algorithms in messages.
 * Depends on nothing inside collectives/ (the communicator's body is in comm_struct.h). */
#ifndef DPTRAIN_COLLECTIVES_COMM_UTIL_H
#define DPTRAIN_COLLECTIVES_COMM_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/comm.h"

/* The operation a hello header announces (the values travel in it: never renumber). */
enum {
  DPT_COLL_ALLREDUCE = 1,
  DPT_COLL_BROADCAST = 2,
  DPT_COLL_ALLGATHER = 3,
  DPT_COLL_BARRIER = 4,
  DPT_COLL_REDUCE_SCATTER = 5,
  DPT_COLL_ALLGATHER_SHARDS = 6
};

/* Tag of the hello round (fixed, so that a rank a collective ahead or behind is matched and
 * seen as a mismatch); data messages use 1 + (seq + uid) % (tag_ub - 1) so that messages left
 * over from a failed collective never match a later one; tag_ub itself carries the notes a
 * rank sends after its hello round timed out (hello.c). */
#define DPT_TAG_HELLO 0

/* The all-reduce algorithms' names by value, from DPT_ALLREDUCE_ALGO_MAP (NULL where a value
 * has none): dpt_allreduce_algo_name reads them, and the option parser (comm_options.c). */
extern const char *const dpt_allreduce_algo_names[];
extern const int dpt_allreduce_algo_count;

/* Names a collective in error messages ("allreduce #12 (1000 x float32, ring)"); the text
 * is formatted only when a message needs it (formatting costs as much as a small
 * all-reduce). */
typedef struct dpt_what {
  uint32_t op; /* DPT_COLL_* */
  int32_t root;
  uint64_t seq, count;
  uint32_t dtype, algo;
  char text[160]; /* "" until dpt_what_str */
} dpt_what;
/* The name of w, formatted on first use; "collective" for NULL. */
const char *dpt_what_str(dpt_what *w);
/* Formats the name of w into out[0..n) (w->text untouched). */
void dpt_what_describe(char *out, size_t n, const dpt_what *w);

/* Grows *buf to at least `bytes`, zeroed (contents not kept). */
dpt_status dpt_comm_scratch(unsigned char **buf, size_t *have, size_t bytes, dpt_what *what);
/* The tag of data messages of collective `seq`. */
int dpt_comm_data_tag(const dpt_comm *c, uint64_t seq);
/* 1 for a member of dpt_comm_dtype, else 0. */
int dpt_dtype_ok(dpt_comm_dtype dtype);
size_t dpt_dtype_size(dpt_comm_dtype dtype);
const char *dpt_dtype_name(dpt_comm_dtype dtype);
/* count elements of dtype in bytes; SIZE_MAX when that overflows. */
size_t dpt_payload_bytes(size_t count, dpt_comm_dtype dtype);

/* Largest inline payload of the hello round: 64 KiB up to 17 ranks, then 1 MiB / (size - 1)
 * (at least 1 KiB), so the receive buffers of one round stay around 1 MiB. */
size_t dpt_comm_inline_cap(int size);

/* Block geometry shared by the ring, the broadcast chain and staging: the data is cut into
 * blocks of this many elements of `esize` bytes (the last one shorter). */
size_t dpt_block_elems(const dpt_comm *c, size_t esize);
/* Balanced split of `len` elements into n parts (lengths differ by at most one, the leftover
 * len % n one element each to the first parts): part i starts at *off and has *part elements. */
void dpt_split(size_t len, size_t n, size_t i, size_t *off, size_t *part);

#endif
