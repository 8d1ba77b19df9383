/* The hello round in large groups: 64 and 256 members of the threads transport, where it runs
 * by dissemination (collectives/engine/hello.c). Every case asserts what every member returned:
 * barrier, a `direct` all-reduce (closed form, and bit for bit the rank-order sum), inline
 * broadcast and allgather, a mismatch, a member that announces failure, a member that never
 * arrives (a short timeout: every other member names it), and the messages each member sent
 * in the round (at most 2 ceil(log2 N)). One case cuts messages into 256-byte pieces as the
 * MPI transport does with its eager size. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives/common/comm_struct.h"
#include "comm_cases.h"
#include "dptrain/comm.h"

#define MAX_MEMBERS 256
#define COUNT       16 /* elements of the direct all-reduce: 255 x 64 B is within its limit */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ceil(log2 n) */
static int log2_ceil(int n) {
  int k = 0;
  while ((1 << k) < n)
    ++k;
  return k;
}

typedef struct out {
  int rc;         /* 0: the member's checks passed */
  dpt_status st;  /* the failure cases: what the member got */
  char err[1024]; /* the first failed check, or the message of st */
  uint64_t msgs;  /* messages sent in the member's last hello round */
  float sum[COUNT];
} out;

typedef struct team team;
typedef void (*member_fn)(dpt_comm *c, const team *t, out *o);

struct team {
  int size;
  double timeout_s;
  size_t eager; /* 0: the transport's */
  int arg;      /* the case's member (the one that differs) */
  member_fn fn;
  dpt_comm_group *group;
  out o[MAX_MEMBERS];
};

typedef struct targ {
  team *t;
  int rank;
} targ;

#define CHECK(o, cond, ...)                                                                        \
  do {                                                                                             \
    if (!(cond) && (o)->rc == 0) {                                                                 \
      (o)->rc = -1;                                                                                \
      snprintf((o)->err, sizeof(o)->err, __VA_ARGS__);                                             \
    }                                                                                              \
  } while (0)

static void *member_main(void *p) {
  targ *a = p;
  team *t = a->t;
  out *o = &t->o[a->rank];
  dpt_comm *c = NULL;
  dpt_status st = dpt_comm_group_member(t->group, a->rank, &c);
  if (st == DPT_OK) st = dpt_comm_set_timeout(c, t->timeout_s);
  if (st == DPT_OK) st = dpt_comm_set_algo(c, DPT_ALLREDUCE_DIRECT);
  if (st != DPT_OK) {
    o->rc = -1;
    snprintf(o->err, sizeof o->err, "member %d: %s", a->rank, dpt_last_error());
  } else {
    if (t->eager) c->eager_bytes = t->eager;
    t->fn(c, t, o);
  }
  dpt_comm_destroy(c);
  return NULL;
}

/* Runs fn on every member; returns the seconds it took. */
static double run(team *t) {
  static pthread_t th[MAX_MEMBERS];
  static targ args[MAX_MEMBERS];
  memset(t->o, 0, sizeof t->o);
  ck_assert_int_eq(dpt_comm_group_create(t->size, &t->group), DPT_OK);
  const double t0 = now_s();
  for (int r = 0; r < t->size; ++r) {
    args[r].t = t;
    args[r].rank = r;
    ck_assert_int_eq(pthread_create(&th[r], NULL, member_main, &args[r]), 0);
  }
  for (int r = 0; r < t->size; ++r)
    pthread_join(th[r], NULL);
  const double took = now_s() - t0;
  dpt_comm_group_destroy(t->group);
  return took;
}

static void team_init(team *t, int size, member_fn fn, int arg) {
  memset(t, 0, sizeof *t);
  t->size = size;
  t->fn = fn;
  t->arg = arg;
  t->timeout_s = 60.0; /* only the missing-member case waits for its deadline */
}

static void assert_passed(const team *t) {
  for (int r = 0; r < t->size; ++r)
    ck_assert_msg(t->o[r].rc == 0, "N=%d member %d: %s", t->size, r, t->o[r].err);
}

/* ---- what succeeds -------------------------------------------------------------------------- */

/* Member r's vector: integers (the closed form is exact) or fractions (the sum's rounding
 * depends on the order of the additions). */
static float value(int r, int i, int fractions) {
  return fractions ? 1.0f / (float)(r + 1 + i) : (float)(3 * r + i);
}

static void collectives_member(dpt_comm *c, const team *t, out *o) {
  const int rank = dpt_comm_rank(c), n = t->size, k = log2_ceil(n);
  dpt_status st = dpt_barrier(c);
  CHECK(o, st == DPT_OK, "barrier: %s", dpt_last_error());
  CHECK(o, c->hello_msgs <= (uint64_t)k, "barrier: %llu messages sent, more than %d",
        (unsigned long long)c->hello_msgs, k);

  for (int fractions = 0; fractions < 2 && o->rc == 0; ++fractions) {
    float x[COUNT];
    for (int i = 0; i < COUNT; ++i)
      x[i] = value(rank, i, fractions);
    st = dpt_allreduce_host(c, x, COUNT, DPT_COMM_F32);
    CHECK(o, st == DPT_OK, "direct: %s", dpt_last_error());
    CHECK(o, c->hello_msgs <= (uint64_t)(2 * k), "direct: %llu messages sent, more than 2 x %d",
          (unsigned long long)c->hello_msgs, k);
    for (int i = 0; i < COUNT && o->rc == 0; ++i) {
      /* ((x0 + x1) + x2) + ...: the order every member sums in. */
      float want = value(0, i, fractions);
      for (int r = 1; r < n; ++r)
        want += value(r, i, fractions);
      if (!fractions) CHECK(o, want == (float)(3 * n * (n - 1) / 2 + n * i), "closed form");
      CHECK(o, memcmp(&x[i], &want, sizeof want) == 0, "direct[%d] = %.9g, want %.9g bit for bit",
            i, (double)x[i], (double)want);
    }
    memcpy(o->sum, x, sizeof x);
  }

  /* Inline broadcast from the case's member: only its payload travels. */
  unsigned char b[100];
  for (int i = 0; i < (int)sizeof b; ++i)
    b[i] = rank == t->arg ? (unsigned char)(i * 7 + 1) : 0;
  st = dpt_broadcast_host(c, b, sizeof b, t->arg);
  CHECK(o, st == DPT_OK, "broadcast: %s", dpt_last_error());
  for (int i = 0; i < (int)sizeof b && o->rc == 0; ++i)
    CHECK(o, b[i] == (unsigned char)(i * 7 + 1), "broadcast byte %d is %d", i, b[i]);
  CHECK(o, c->hello_msgs <= (uint64_t)(2 * k), "broadcast: %llu messages",
        (unsigned long long)c->hello_msgs);

  /* Inline allgather of 12 bytes per member. */
  int mine[3] = {rank, -rank, rank * rank};
  int *all = malloc((size_t)n * sizeof mine);
  st = all ? dpt_allgather_host(c, mine, sizeof mine, all) : DPT_ERR_OUT_OF_MEMORY;
  CHECK(o, st == DPT_OK, "allgather: %s", dpt_last_error());
  for (int r = 0; r < n && all && o->rc == 0; ++r)
    CHECK(o, all[3 * r] == r && all[3 * r + 1] == -r && all[3 * r + 2] == r * r,
          "allgather: member %d's entry is wrong", r);
  free(all);
  o->msgs = c->hello_msgs;
}

static void check_collectives(int size, size_t eager) {
  static team t;
  team_init(&t, size, collectives_member, size / 3);
  t.eager = eager;
  const double took = run(&t);
  assert_passed(&t);
  for (int r = 1; r < size; ++r)
    ck_assert_msg(memcmp(t.o[r].sum, t.o[0].sum, sizeof t.o[0].sum) == 0,
                  "N=%d: member %d's sum differs from member 0's", size, r);
  printf("N=%d eager %zu: collectives in %.2f s, %llu messages per member in the last hello\n",
         size, eager, took, (unsigned long long)t.o[0].msgs);
}

START_TEST(collectives_64) {
  check_collectives(64, 0);
}
END_TEST

START_TEST(collectives_256) {
  check_collectives(256, 0);
}
END_TEST

/* Messages cut into 256-byte pieces (headers and payloads span several). */
START_TEST(collectives_64_in_pieces) {
  check_collectives(64, 256);
}
END_TEST

/* ---- what fails, the same way on every member ---------------------------------------------- */

static void mismatch_member(dpt_comm *c, const team *t, out *o) {
  float x[COUNT + 1] = {0};
  o->st = dpt_allreduce_host(c, x, dpt_comm_rank(c) == t->arg ? COUNT + 1 : COUNT, DPT_COMM_F32);
  snprintf(o->err, sizeof o->err, "%s", dpt_last_error());
}

static void failure_member(dpt_comm *c, const team *t, out *o) {
  float x[COUNT] = {0};
  o->st = dpt_allreduce_host(c, dpt_comm_rank(c) == t->arg ? NULL : x, COUNT, DPT_COMM_F32);
  snprintf(o->err, sizeof o->err, "%s", dpt_last_error());
}

static void missing_member(dpt_comm *c, const team *t, out *o) {
  if (dpt_comm_rank(c) == t->arg) return; /* never arrives */
  o->st = dpt_barrier(c);
  snprintf(o->err, sizeof o->err, "%s", dpt_last_error());
}

static void check_failures(int size) {
  static team t;
  const int m = size / 2 + 1;

  team_init(&t, size, mismatch_member, m);
  run(&t);
  for (int r = 0; r < size; ++r) {
    ck_assert_msg(t.o[r].st == DPT_ERR_MISMATCH, "N=%d mismatch: member %d: %s: %s", size, r,
                  dpt_status_name(t.o[r].st), t.o[r].err);
    ck_assert_msg(strstr(t.o[r].err, "disagree"), "N=%d: '%s'", size, t.o[r].err);
  }

  team_init(&t, size, failure_member, m);
  run(&t);
  char want[64];
  snprintf(want, sizeof want, "rank %d failed", m);
  for (int r = 0; r < size; ++r) {
    const dpt_status expect = r == m ? DPT_ERR_INVALID_ARG : DPT_ERR_COMM;
    ck_assert_msg(t.o[r].st == expect, "N=%d failure: member %d: %s: %s", size, r,
                  dpt_status_name(t.o[r].st), t.o[r].err);
    if (r != m) ck_assert_msg(strstr(t.o[r].err, want), "N=%d: '%s'", size, t.o[r].err);
  }

  team_init(&t, size, missing_member, m);
  t.timeout_s = 1.0;
  const double took = run(&t);
  ck_assert_msg(took < 20.0, "N=%d: the missing member's case took %.1f s", size, took);
  for (int r = 0; r < size; ++r) {
    if (r == m) continue;
    ck_assert_msg(t.o[r].st == DPT_ERR_TIMEOUT, "N=%d missing: member %d: %s: %s", size, r,
                  dpt_status_name(t.o[r].st), t.o[r].err);
    ck_assert_msg(comm_case_names_rank(t.o[r].err, m), "N=%d member %d does not name %d: '%s'",
                  size, r, m, t.o[r].err);
  }
  /* How many name it alone: the others' notes arrived within the grace period (not
   * asserted: on a loaded machine notes may come late, and then more ranks are named). */
  char alone[64];
  snprintf(alone, sizeof alone, "rank %d did not enter", m);
  int exact = 0;
  for (int r = 0; r < size; ++r)
    exact += r != m && strstr(t.o[r].err, alone) != NULL;
  printf("N=%d missing member %d: %d of %d name it alone; member 0 says: %s\n", size, m, exact,
         size - 1, t.o[0].err);
}

START_TEST(failures_64) {
  check_failures(64);
}
END_TEST

START_TEST(failures_256) {
  check_failures(256);
}
END_TEST

int main(void) {
  Suite *s = suite_create("comm_hello");
  TCase *tc = tcase_create("large_groups");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, collectives_64);
  tcase_add_test(tc, collectives_64_in_pieces);
  tcase_add_test(tc, collectives_256);
  tcase_add_test(tc, failures_64);
  tcase_add_test(tc, failures_256);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
