/* The start-up agreement: every member of a communicator says whether it is ready, so that one
 * that failed to start (a bad file, no device) stops the others at once instead of leaving
 * them waiting at their first collective. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "dptrain/comm.h"

/* One member's word, the same size on every member (allgather of fixed-size records). */
typedef struct ready_word {
  int32_t status;
  char message[252];
} ready_word;

/* Members whose words fit on the stack (no allocation, so the agreement itself cannot fail). */
enum { READY_INLINE = 64 };

dpt_status dpt_comm_agree_ready(dpt_comm *comm, dpt_status mine, const char *message,
                                const char *member, int *same_as_first) {
  if (same_as_first) *same_as_first = 0;
  if (!comm) return mine;
  char own[1024]; /* kept whole: the word carries the start of it */
  snprintf(own, sizeof own, "%s", mine != DPT_OK && message ? message : "");
  const int size = dpt_comm_size(comm);
  ready_word word, inline_words[READY_INLINE];
  memset(&word, 0, sizeof word);
  word.status = (int32_t)mine;
  size_t len = strlen(own); /* the word carries the start of the message */
  memcpy(word.message, own, len < sizeof word.message ? len : sizeof word.message - 1);
  ready_word *all = size <= READY_INLINE ? inline_words : calloc((size_t)size, sizeof *all);
  if (!all)
    return mine != DPT_OK ? dpt_set_error(mine, "%s", own)
                          : dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "start-up: out of host memory");
  dpt_status st = dpt_allgather_host(comm, &word, sizeof word, all);
  int first = -1;
  for (int i = 0; st == DPT_OK && i < size && first < 0; ++i)
    if (all[i].status != DPT_OK) first = i;
  if (same_as_first && first == 0 && dpt_comm_rank(comm) > 0 && all[0].status == word.status &&
      strcmp(all[0].message, word.message) == 0)
    *same_as_first = 1;
  if (all != inline_words) free(all);
  /* A failed agreement is reported as such (a timeout stays a timeout), quoting our own. */
  if (st != DPT_OK && mine != DPT_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dpt_last_error());
    return dpt_set_error(st, "%s; before it, this member failed: %.700s", msg, own);
  }
  if (st != DPT_OK) return st;
  if (mine != DPT_OK) return dpt_set_error(mine, "%s", own);
  if (first >= 0)
    return dpt_set_error(DPT_ERR_PEER, "%s %d could not start (see its message)",
                         member ? member : "member", first);
  return DPT_OK;
}
