/* The watchdog (base/watchdog.h): a watch whose deadline passes ends the process with its
 * status and one line naming the call, the rank and the limit; disarmed watches never fire,
 * however many come and go; a watch armed after a later one fires at its own, earlier
 * deadline; a fork's child gets a watchdog of its own. Each firing case runs in a child
 * process. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/watchdog.h"

static void nap(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

typedef struct child {
  int status;     /* exit status, or -1 when it did not exit normally */
  double seconds; /* from fork to exit */
  char err[512];  /* its stderr */
} child;

/* Runs fn in a child with stderr to a pipe; the child exits 0 if fn returns. */
static void run_child(void (*fn)(void), child *out) {
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  const double t0 = dpt_now();
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(p[0]);
    dup2(p[1], STDERR_FILENO);
    fn();
    _exit(0);
  }
  close(p[1]);
  size_t n = 0;
  ssize_t k;
  while ((k = read(p[0], out->err + n, sizeof out->err - 1 - n)) > 0)
    n += (size_t)k;
  out->err[n] = '\0';
  close(p[0]);
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  out->seconds = dpt_now() - t0;
  out->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void stall_in_call(void) {
  dpt_watch w;
  if (dpt_watch_arm(&w, 0.3, DPT_EXIT_STALLED, 3, "MPI_Fake", "a test stalls") != DPT_OK) _exit(9);
  nap(10);
  _exit(8); /* the watch did not fire */
}

START_TEST(fires_with_status_and_line) {
  child c;
  run_child(stall_in_call, &c);
  ck_assert_int_eq(c.status, DPT_EXIT_STALLED);
  ck_assert_msg(c.seconds >= 0.3 && c.seconds < 3, "fired after %.3f s", c.seconds);
  ck_assert_str_eq(c.err, "dptrain: rank 3: MPI_Fake did not return within 0.3 s (a test "
                          "stalls); exiting with status 69\n");
}
END_TEST

/* Many short calls, each well within its deadline, then a long sleep with nothing armed. */
static void calls_in_time(void) {
  for (int i = 0; i < 20000; ++i) {
    dpt_watch w;
    if (dpt_watch_arm(&w, 0.2, 7, -1, "call", "why") != DPT_OK) _exit(9);
    dpt_watch_disarm(&w);
  }
  dpt_watch slow;
  if (dpt_watch_arm(&slow, 0.2, 7, -1, "call", "why") != DPT_OK) _exit(9);
  nap(0.1);
  dpt_watch_disarm(&slow);
  nap(0.5);
}

START_TEST(disarmed_never_fire) {
  child c;
  run_child(calls_in_time, &c);
  ck_assert_msg(c.status == 0 && c.err[0] == '\0', "status %d: %s", c.status, c.err);
}
END_TEST

/* A long watch first (the thread sleeps towards it), then a short one: the short one fires. */
static void earlier_after_later(void) {
  dpt_watch a, b;
  if (dpt_watch_arm(&a, 30, 5, -1, "long call", "why") != DPT_OK) _exit(9);
  nap(0.05);
  if (dpt_watch_arm(&b, 0.2, 6, -1, "short call", "why") != DPT_OK) _exit(9);
  nap(5);
  _exit(8);
}

START_TEST(earlier_deadline_wakes) {
  child c;
  run_child(earlier_after_later, &c);
  ck_assert_int_eq(c.status, 6);
  ck_assert_msg(c.seconds < 3, "fired after %.3f s", c.seconds);
  ck_assert_msg(strstr(c.err, "dptrain: short call did not return within 0.2 s (why)"), "%s",
                c.err);
}
END_TEST

/* The parent has a running watchdog; its child arms a watch of its own, which must fire. */
static void fork_then_stall(void) {
  dpt_watch w;
  if (dpt_watch_arm(&w, 60, 5, -1, "parent call", "why") != DPT_OK) _exit(9);
  dpt_watch_disarm(&w);
  child c;
  run_child(stall_in_call, &c);
  _exit(c.status == DPT_EXIT_STALLED ? 0 : 10);
}

START_TEST(fork_child_has_its_own) {
  child c;
  run_child(fork_then_stall, &c);
  ck_assert_msg(c.status == 0, "status %d: %s", c.status, c.err);
}
END_TEST

START_TEST(bad_arguments) {
  dpt_watch w;
  ck_assert_int_eq(dpt_watch_arm(NULL, 1, 1, 0, "a", "b"), DPT_ERR_INVALID_ARG);
  ck_assert_int_eq(dpt_watch_arm(&w, 0, 1, 0, "a", "b"), DPT_ERR_INVALID_ARG);
  ck_assert_int_eq(dpt_watch_arm(&w, -1, 1, 0, "a", "b"), DPT_ERR_INVALID_ARG);
  ck_assert_int_eq(dpt_watch_arm(&w, INFINITY, 1, 0, "a", "b"), DPT_ERR_INVALID_ARG);
  ck_assert_int_eq(dpt_watch_arm(&w, 1, 1, 0, NULL, "b"), DPT_ERR_INVALID_ARG);
  dpt_watch_disarm(NULL);
  dpt_watch_disarm(&w); /* never armed: nothing happens */
}
END_TEST

int main(void) {
  Suite *s = suite_create("watchdog");
  TCase *tc = tcase_create("watchdog");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, fires_with_status_and_line);
  tcase_add_test(tc, disarmed_never_fire);
  tcase_add_test(tc, earlier_deadline_wakes);
  tcase_add_test(tc, fork_child_has_its_own);
  tcase_add_test(tc, bad_arguments);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
