/* Shared-memory channels: a wait for a peer whose process is gone fails within a second,
 * naming the peer, instead of waiting for its deadline. The peer is a forked child that maps
 * the segment as rank 1, then exits (and is reaped) while rank 0 waits for a message from it.
 * Again with the segment's ranks 0 and 1 being ranks 3 and 5 of a communicator of 6 (a node of
 * a communicator that spans nodes): the peer is named as rank 5, and a request to rank 4 (on
 * another node) is not the channels' to watch. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <stdio.h>
#include <time.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "collectives/transports/transport.h"
#include "collectives/transports/shm.h"

START_TEST(vanished_peer_is_named) {
  const int spans = _i; /* the segment is one node of a larger communicator */
  const int global[2] = {3, 5};
  char name[64];
  snprintf(name, sizeof name, "/dptrain-watch-test-%ld", (long)getpid());
  dpt_shm *s = NULL;
  ck_assert_int_eq(dpt_shm_open(name, 1, 0, 2, DPT_SHM_COPY_AUTO, &s), DPT_OK);
  int up[2], go[2];
  ck_assert_int_eq(pipe(up), 0);
  ck_assert_int_eq(pipe(go), 0);
  const pid_t child = fork();
  ck_assert_int_ge(child, 0);
  if (child == 0) { /* rank 1: map, say so, wait for the word, exit */
    dpt_shm *t = NULL;
    char c = dpt_shm_open(name, 0, 1, 2, DPT_SHM_COPY_AUTO, &t) == DPT_OK ? 'o' : 'x';
    if (write(up[1], &c, 1) != 1 || read(go[0], &c, 1) != 1) _exit(2);
    _exit(0);
  }
  char c = 0;
  ck_assert_int_eq(read(up[0], &c, 1), 1);
  ck_assert_int_eq(c, 'o');
  dpt_shm_unlink(name);
  if (spans) {
    ck_assert_int_eq(dpt_shm_map_ranks(s, global, 6), DPT_OK);
    ck_assert(dpt_shm_reaches(s, 3) && dpt_shm_reaches(s, 5) && !dpt_shm_reaches(s, 4));
  }
  dpt_shm_watch_peers(s); /* rank 1's process is there: watched */
  ck_assert_int_eq(write(go[1], "g", 1), 1);
  int status = 0;
  ck_assert_int_eq(waitpid(child, &status, 0), child);
  float buf[4];
  dpt_req r;
  memset(&r, 0, sizeof r);
  r.is_recv = 1;
  r.peer = spans ? 5 : 1;
  r.buf = buf;
  r.bytes = sizeof buf;
  ck_assert_int_eq(dpt_shm_irecv(s, &r), DPT_OK);
  dpt_req *reqs[1] = {&r};
  int ndone = 0;
  const double t0 = dpt_now();
  dpt_status st = dpt_shm_poll(s, reqs, 1, 1, t0 + 30, t0, &ndone, 0, 0);
  const double waited = dpt_now() - t0;
  ck_assert_int_eq(st, DPT_ERR_COMM);
  char want[64];
  snprintf(want, sizeof want, "rank %d (process", spans ? 5 : 1);
  ck_assert_msg(strstr(dpt_last_error(), want) && strstr(dpt_last_error(), "is gone") &&
                    strstr(dpt_last_error(), spans ? "while rank 3 waited" : "while rank 0 waited"),
                "%s", dpt_last_error());
  ck_assert_msg(waited < 2.0, "took %.2f s", waited);
  ck_assert_int_eq(ndone, 0);
  if (spans) { /* a pending request to another node's rank: not looked at */
    dpt_req off;
    memset(&off, 0, sizeof off);
    off.active = 1;
    off.is_recv = 1;
    off.peer = 4;
    dpt_req *offs[1] = {&off};
    nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL); /* past the 0.25 s spacing */
    ck_assert_int_eq(dpt_shm_watch_check(s, offs, 1), DPT_OK);
    ck_assert_int_eq(dpt_shm_watch_check(s, reqs, 1), DPT_OK); /* within 0.25 s: no look */
  }
  dpt_shm_cancel(s, &r);
  dpt_shm_close(s);
}
END_TEST

int main(void) {
  Suite *suite = suite_create("shm_watch");
  TCase *tc = tcase_create("watch");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, vanished_peer_is_named, 0, 2);
  suite_add_tcase(suite, tc);
  SRunner *sr = srunner_create(suite);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
