/* The training timeline (core/train/trace.h): the Chrome trace JSON of one replica (parsed back
 * with jansson: metadata names, events, microseconds, escaping), of 3 replicas on the threads
 * transport (clocks aligned, everyone's events in member 0's file), failures that end every
 * member's call alike (a path that cannot be created, a member without a trace), 30000
 * events, and the dropped-events count.
 *
 * `test_trace mpi` runs the multi-member cases over MPI_COMM_WORLD instead (under mpiexec). */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "core/train/trace.h"
#include "dptrain/comm.h"
#include "test_util.h"
#include "tmp_dir.h"

#define MAX_MEMBERS 4
/* Events per member of the many-events case: 1.6 MB each, gathered in 2 rounds of 1 MiB (kept
 * below 100000 so that jansson's parse stays quick in sanitizer builds). */
#define MANY_PER_MEMBER 20000

/* ---- reading a trace file back ------------------------------------------------------------- */

static json_t *load(const char *path) {
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  ck_assert_msg(root, "%s: line %d: %s", path, err.line, err.text);
  ck_assert(json_is_array(json_object_get(root, "traceEvents")));
  return root;
}

static json_t *events(json_t *root) {
  return json_object_get(root, "traceEvents");
}

/* The "X" events of pid (-1: any) named name (NULL: any). */
static size_t count_x(json_t *root, int pid, const char *name) {
  size_t n = 0, i;
  json_t *e;
  json_array_foreach(events(root), i, e) {
    if (strcmp(json_string_value(json_object_get(e, "ph")), "X") != 0) continue;
    if (pid >= 0 && json_integer_value(json_object_get(e, "pid")) != pid) continue;
    if (name && strcmp(json_string_value(json_object_get(e, "name")), name) != 0) continue;
    n++;
  }
  return n;
}

/* The first "X" event of pid named name, or NULL. */
static json_t *find_x(json_t *root, int pid, const char *name) {
  size_t i;
  json_t *e;
  json_array_foreach(events(root), i, e) {
    if (!strcmp(json_string_value(json_object_get(e, "ph")), "X") &&
        json_integer_value(json_object_get(e, "pid")) == pid &&
        !strcmp(json_string_value(json_object_get(e, "name")), name))
      return e;
  }
  return NULL;
}

/* The args.name of the metadata event `what` (process_name, thread_name) of pid/tid. */
static const char *meta_name(json_t *root, const char *what, int pid, int tid) {
  size_t i;
  json_t *e;
  json_array_foreach(events(root), i, e) {
    if (!strcmp(json_string_value(json_object_get(e, "ph")), "M") &&
        !strcmp(json_string_value(json_object_get(e, "name")), what) &&
        json_integer_value(json_object_get(e, "pid")) == pid &&
        json_integer_value(json_object_get(e, "tid")) == tid)
      return json_string_value(json_object_get(json_object_get(e, "args"), "name"));
  }
  return NULL;
}

static double num(json_t *e, const char *key) {
  json_t *v = json_object_get(e, key);
  ck_assert_msg(json_is_number(v), "event lacks a number '%s'", key);
  return json_number_value(v);
}

static int exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

/* ---- one replica ---------------------------------------------------------------------------- */

static void setup(void) {
  tu_tmp_make("trace");
}

static void teardown(void) {
  tu_tmp_remove();
}

START_TEST(one_replica) {
  dpt_trace *t = NULL;
  TU_OK(dpt_trace_create(0, "rank 0, cpu", &t));
  const double base = 1000.0;
  dpt_trace_event(t, DPT_TRACE_DATA, "batch", base + 0.0, base + 0.0015);
  dpt_trace_event(t, DPT_TRACE_FORWARD, "forward", base + 0.002, base + 0.0125);
  dpt_trace_event(t, DPT_TRACE_BACKWARD, "backward", base + 0.0125, base + 0.0305);
  dpt_trace_event(t, DPT_TRACE_EXCHANGE, "all-reduce \"grads\" C:\\x", base + 0.031, base + 0.035);
  dpt_trace_event(t, DPT_TRACE_OPTIMIZER, "adam\tstep\n\xc3\xbc", base + 0.035, base + 0.036);
  dpt_trace_event(t, DPT_TRACE_CHECKPOINT, "checkpoint", base + 0.5, base + 0.75);
  dpt_trace_event(t, DPT_TRACE_TRACKS, "ignored", base, base + 1); /* track out of range */
  char long_name[200];
  memset(long_name, 'n', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  dpt_trace_event(t, DPT_TRACE_FORWARD, long_name, base + 1.0, base + 1.0);
  /* A 2-byte character cut in half by the name limit: written as '?', still valid JSON. */
  long_name[DPT_TRACE_NAME_MAX - 2] = '\xc3';
  long_name[DPT_TRACE_NAME_MAX - 1] = '\xbc';
  dpt_trace_event(t, DPT_TRACE_FORWARD, long_name, base + 1.0, base + 1.0);
  ck_assert_uint_eq(dpt_trace_count(t), 8);
  ck_assert_uint_eq(dpt_trace_dropped(t), 0);
  TU_OK(dpt_trace_align(NULL, t));
  ck_assert(dpt_trace_offset(t) == 0.0);

  const char *path = tpath("one.json");
  TU_OK(dpt_trace_write(NULL, t, path));
  ck_assert(!exists(tpath("one.json.tmp")));
  json_t *root = load(path);
  ck_assert_str_eq(meta_name(root, "process_name", 0, 0), "replica 0 (rank 0, cpu)");
  const char *tracks[] = {"data loading", "forward",   "backward",
                          "exchange",     "optimizer", "checkpoints"};
  for (int k = 0; k < DPT_TRACE_TRACKS; ++k) {
    const char *got = meta_name(root, "thread_name", 0, k);
    ck_assert_msg(got && !strcmp(got, tracks[k]), "track %d named %s", k, got ? got : "(none)");
  }
  ck_assert_uint_eq(count_x(root, -1, NULL), 8);
  ck_assert_uint_eq(count_x(root, 0, NULL), 8);

  struct {
    const char *name;
    int tid;
    double ts, dur; /* microseconds */
  } want[] = {{"batch", 0, 0, 1500},
              {"forward", 1, 2000, 10500},
              {"backward", 2, 12500, 18000},
              {"all-reduce \"grads\" C:\\x", 3, 31000, 4000},
              {"adam\tstep\n\xc3\xbc", 4, 35000, 1000},
              {"checkpoint", 5, 500000, 250000}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; ++i) {
    json_t *e = find_x(root, 0, want[i].name);
    ck_assert_msg(e, "no event named '%s'", want[i].name);
    ck_assert_int_eq(json_integer_value(json_object_get(e, "tid")), want[i].tid);
    ck_assert_msg(fabs(num(e, "ts") - want[i].ts) <= 1.0, "%s: ts %.3f, want %.3f", want[i].name,
                  num(e, "ts"), want[i].ts);
    ck_assert_msg(fabs(num(e, "dur") - want[i].dur) <= 1.0, "%s: dur %.3f, want %.3f", want[i].name,
                  num(e, "dur"), want[i].dur);
  }
  char cut[DPT_TRACE_NAME_MAX];
  memset(cut, 'n', sizeof cut - 1);
  cut[sizeof cut - 1] = '\0';
  ck_assert_uint_eq(count_x(root, 0, cut), 1); /* cut to DPT_TRACE_NAME_MAX - 1 bytes */
  cut[DPT_TRACE_NAME_MAX - 2] = '?';
  ck_assert_uint_eq(count_x(root, 0, cut), 1);
  json_t *other = json_object_get(root, "otherData");
  ck_assert_int_eq(json_integer_value(json_object_get(other, "dropped_events")), 0);
  json_decref(root);

  /* No events: still a valid file with the names. */
  dpt_trace *empty = NULL;
  TU_OK(dpt_trace_create(3, NULL, &empty));
  TU_OK(dpt_trace_write(NULL, empty, tpath("empty.json")));
  root = load(tpath("empty.json"));
  ck_assert_str_eq(meta_name(root, "process_name", 3, 0), "replica 3");
  ck_assert_uint_eq(count_x(root, -1, NULL), 0);
  json_decref(root);
  dpt_trace_destroy(empty);

  EXPECT_FAIL(dpt_trace_write(NULL, t, tpath("missing/dir/one.json")), DPT_ERR_IO, "missing/dir",
              NULL, NULL);
  ck_assert(!exists(tpath("missing")));
  dpt_trace_destroy(t);
}
END_TEST

START_TEST(dropped_over_limit) {
  dpt_trace *t = NULL;
  TU_OK(dpt_trace_create(1, "rank 1, cpu", &t));
  dpt_trace_set_limit(t, 10);
  dpt_trace_event(t, DPT_TRACE_FORWARD, "nan", NAN, 1.0); /* not finite: dropped */
  dpt_trace_event(t, DPT_TRACE_FORWARD, "inf", 0.0, INFINITY);
  for (int i = 0; i < 15; ++i)
    dpt_trace_event(t, DPT_TRACE_FORWARD, "f", i, i + 0.5);
  ck_assert_uint_eq(dpt_trace_count(t), 10);
  ck_assert_uint_eq(dpt_trace_dropped(t), 7);
  TU_OK(dpt_trace_write(NULL, t, tpath("limit.json")));
  json_t *root = load(tpath("limit.json"));
  ck_assert_uint_eq(count_x(root, 1, "f"), 10);
  json_t *other = json_object_get(root, "otherData");
  ck_assert_int_eq(json_integer_value(json_object_get(other, "dropped_events")), 7);
  ck_assert_int_eq(
      json_integer_value(json_array_get(json_object_get(other, "dropped_by_replica"), 0)), 7);
  json_decref(root);
  dpt_trace_destroy(t);
}
END_TEST

START_TEST(many_events) {
  enum { N = 30000 };
  dpt_trace *t = NULL;
  TU_OK(dpt_trace_create(0, "rank 0, cpu", &t));
  double t0 = dpt_now();
  for (int i = 0; i < N; ++i)
    dpt_trace_event(t, (dpt_trace_track)(i % DPT_TRACE_TRACKS), "step", 1e-3 * i, 1e-3 * i + 5e-4);
  const double record_s = dpt_now() - t0;
  ck_assert_uint_eq(dpt_trace_count(t), N);
  ck_assert_msg(record_s < 0.25, "%d events took %.3f s to record", N, record_s);
  t0 = dpt_now();
  TU_OK(dpt_trace_write(NULL, t, tpath("many.json")));
  const double write_s = dpt_now() - t0;
  ck_assert_msg(write_s < 5.0, "%d events took %.3f s to write", N, write_s);
  json_t *root = load(tpath("many.json"));
  ck_assert_uint_eq(count_x(root, 0, "step"), N);
  json_t *last = json_array_get(events(root), json_array_size(events(root)) - 1);
  ck_assert(fabs(num(last, "ts") - 1e3 * (N - 1)) <= 1.0);
  ck_assert(fabs(num(last, "dur") - 500.0) <= 1.0);
  json_decref(root);
  dpt_trace_destroy(t);
  printf("many_events: %d events recorded in %.1f ms, written in %.1f ms\n", N, record_s * 1e3,
         write_s * 1e3);
}
END_TEST

/* ---- several members: the same member function on threads or MPI ranks -------------------- */

typedef enum member_mode { MODE_EVENTS, MODE_BAD_PATH, MODE_NO_TRACE, MODE_MANY } member_mode;

typedef struct member_out {
  int32_t status;
  int32_t rank;
  double offset, offset_err;     /* dpt_trace_align's, and its error bound */
  double measured, measured_err; /* dpt_trace_measure_offset's */
  char err[240];
} member_out;

/* A member's part: a trace, aligned, its events, written to path (member 0's; for
 * MODE_BAD_PATH one in a directory that does not exist). */
static void member_run(dpt_comm *c, member_mode mode, const char *path, member_out *out) {
  memset(out, 0, sizeof *out);
  const int rank = dpt_comm_rank(c);
  out->rank = rank;
  dpt_trace *t = NULL;
  char label[64];
  snprintf(label, sizeof label, "rank %d, cpu", rank);
  dpt_status st = dpt_trace_create(rank, label, &t);
  if (st == DPT_OK) st = dpt_trace_align(c, t);
  if (st == DPT_OK) st = dpt_trace_measure_offset(c, &out->measured, &out->measured_err);
  /* Member 0's clock reading, the same interval recorded by every member. */
  double common = dpt_now();
  if (st == DPT_OK) st = dpt_broadcast_host(c, &common, sizeof common, 0);
  if (st == DPT_OK) {
    out->offset = dpt_trace_offset(t);
    out->offset_err = dpt_trace_offset_error(t);
    dpt_trace_event(t, DPT_TRACE_EXCHANGE, "common", common, common + 0.001);
    for (int i = 0; i <= rank; ++i) {
      const double a = dpt_now();
      dpt_trace_event(t, DPT_TRACE_FORWARD, "forward", a, a + 1e-4);
      dpt_trace_event(t, DPT_TRACE_BACKWARD, "backward", a + 1e-4, a + 3e-4);
    }
    if (mode == MODE_MANY)
      for (int i = 0; i < MANY_PER_MEMBER; ++i)
        dpt_trace_event(t, DPT_TRACE_DATA, "batch", common + 1e-3 * i, common + 1e-3 * i + 1e-4);
    st = dpt_trace_write(c, mode == MODE_NO_TRACE && rank == 1 ? NULL : t, path);
  }
  out->status = st;
  if (st != DPT_OK) snprintf(out->err, sizeof out->err, "%s", dpt_last_error());
  dpt_trace_destroy(t);
}

/* Checks every member's outcome and member 0's file, for `size` members; tol_us: how far the
 * aligned clocks may be apart. */
static void check_members(const member_out *out, int size, member_mode mode, const char *path,
                          double tol_us) {
  for (int r = 0; r < size; ++r) {
    if (mode == MODE_EVENTS || mode == MODE_MANY) {
      ck_assert_msg(out[r].status == DPT_OK, "member %d: %s", r, out[r].err);
      /* Every member reads the same monotonic clock: the true offset is 0, so each estimate
       * lies within its own error bound of 0 (on a quiet host about 10 us; on a busy one up to
       * a scheduler's wake-up latency), and the bounds narrowed below 0.1 s. */
      printf("member %d: clock offset %.2f us (+- %.2f), measured %.2f us (+- %.2f)\n", r,
             out[r].offset * 1e6, out[r].offset_err * 1e6, out[r].measured * 1e6,
             out[r].measured_err * 1e6);
      ck_assert_msg(fabs(out[r].offset) <= tol_us * 1e-6 + out[r].offset_err &&
                        out[r].offset_err < 0.1,
                    "member %d: offset %.1f us, error bound %.1f us", r, out[r].offset * 1e6,
                    out[r].offset_err * 1e6);
      ck_assert_msg(fabs(out[r].measured) <= 1e-6 + out[r].measured_err &&
                        out[r].measured_err < 0.1,
                    "member %d: measured offset %.1f us, error bound %.1f us", r,
                    out[r].measured * 1e6, out[r].measured_err * 1e6);
      if (r == 0) ck_assert(out[r].offset == 0.0 && out[r].measured == 0.0);
    } else {
      const dpt_status want = mode == MODE_BAD_PATH ? DPT_ERR_IO : DPT_ERR_INVALID_ARG;
      ck_assert_msg(out[r].status == want, "member %d: %s (%s), want %s", r,
                    dpt_status_name((dpt_status)out[r].status), out[r].err, dpt_status_name(want));
      ck_assert_msg(strstr(out[r].err, mode == MODE_BAD_PATH ? "no/such/dir" : "trace is NULL"),
                    "member %d: message '%s'", r, out[r].err);
    }
  }
  if (mode == MODE_BAD_PATH || mode == MODE_NO_TRACE) {
    ck_assert(!exists(path));
    ck_assert(!exists(tpath("no")));
    return;
  }
  json_t *root = load(path);
  double common_ts[MAX_MEMBERS];
  for (int r = 0; r < size; ++r) {
    const size_t extra = mode == MODE_MANY ? MANY_PER_MEMBER : 0;
    ck_assert_uint_eq(count_x(root, r, NULL), 1 + 2 * (size_t)(r + 1) + extra);
    ck_assert_uint_eq(count_x(root, r, "forward"), (size_t)r + 1);
    char want[64];
    snprintf(want, sizeof want, "replica %d (rank %d, cpu)", r, r);
    const char *got = meta_name(root, "process_name", r, 0);
    ck_assert_msg(got && !strcmp(got, want), "process %d named %s", r, got ? got : "(none)");
    json_t *e = find_x(root, r, "common");
    ck_assert_msg(e, "member %d: no common event", r);
    ck_assert_int_eq(json_integer_value(json_object_get(e, "tid")), DPT_TRACE_EXCHANGE);
    ck_assert(fabs(num(e, "dur") - 1000.0) <= 1.0);
    common_ts[r] = num(e, "ts");
  }
  /* The same interval lands at the same place for every member (the alignment's error). */
  for (int r = 1; r < size; ++r)
    ck_assert_msg(fabs(common_ts[r] - common_ts[0]) <= tol_us + out[r].offset_err * 1e6,
                  "member %d's common event at %.3f us, member 0's at %.3f us", r, common_ts[r],
                  common_ts[0]);
  ck_assert_uint_eq(count_x(root, -1, NULL),
                    (size_t)size * (size + 2) +
                        (mode == MODE_MANY ? (size_t)MANY_PER_MEMBER * size : 0u));
  json_decref(root);
}

/* Threads transport: `size` members in threads of this process. */
typedef struct team {
  dpt_comm_group *group;
  member_mode mode;
  const char *path;
  member_out out[MAX_MEMBERS];
} team;

typedef struct thread_arg {
  team *tm;
  int rank;
} thread_arg;

static void *thread_main(void *p) {
  thread_arg *a = p;
  dpt_comm *c = NULL;
  dpt_status st = dpt_comm_group_member(a->tm->group, a->rank, &c);
  if (st == DPT_OK) st = dpt_comm_set_timeout(c, 30.0);
  if (st == DPT_OK) {
    member_run(c, a->tm->mode, a->tm->path, &a->tm->out[a->rank]);
  } else {
    a->tm->out[a->rank].status = st;
    snprintf(a->tm->out[a->rank].err, sizeof a->tm->out[a->rank].err, "%s", dpt_last_error());
  }
  dpt_comm_destroy(c);
  return NULL;
}

static void run_threads(int size, member_mode mode, const char *path) {
  team tm;
  memset(&tm, 0, sizeof tm);
  tm.mode = mode;
  tm.path = path;
  TU_OK(dpt_comm_group_create(size, &tm.group));
  pthread_t th[MAX_MEMBERS];
  thread_arg args[MAX_MEMBERS];
  for (int r = 0; r < size; ++r) {
    args[r] = (thread_arg){&tm, r};
    ck_assert_int_eq(pthread_create(&th[r], NULL, thread_main, &args[r]), 0);
  }
  for (int r = 0; r < size; ++r)
    pthread_join(th[r], NULL);
  dpt_comm_group_destroy(tm.group);
  /* One process, one clock: the offsets are 0, the same interval lands at the same place. */
  check_members(tm.out, size, mode, path, 1.0);
}

START_TEST(threads_three) {
  run_threads(3, MODE_EVENTS, tpath("three.json"));
}
END_TEST

START_TEST(threads_bad_path) {
  run_threads(3, MODE_BAD_PATH, tpath("no/such/dir/bad.json"));
  ck_assert_int_eq(rmdir(tmp_dir), 0); /* nothing was left in it */
  ck_assert_int_eq(mkdir(tmp_dir, 0700), 0);
}
END_TEST

START_TEST(threads_member_without_trace) {
  run_threads(3, MODE_NO_TRACE, tpath("none.json"));
}
END_TEST

START_TEST(threads_many_events) {
  const double t0 = dpt_now();
  run_threads(3, MODE_MANY, tpath("many3.json"));
  printf("threads_many_events: 3 x %d events gathered, written and parsed in %.2f s\n",
         MANY_PER_MEMBER, dpt_now() - t0);
}
END_TEST

/* ---- MPI: the same cases over MPI_COMM_WORLD ------------------------------------------------ */

static dpt_comm *world;

/* Runs the case on this rank, gathers every rank's outcome, checks them on rank 0. */
static void run_mpi(member_mode mode, const char *name) {
  const int size = dpt_comm_size(world), rank = dpt_comm_rank(world);
  ck_assert_int_le(size, MAX_MEMBERS);
  member_out mine, all[MAX_MEMBERS];
  member_run(world, mode, tpath(name), &mine);
  TU_OK(dpt_allgather_host(world, &mine, sizeof mine, all));
  /* Ranks on one machine share the clock: the estimate's error is its bound (timestamps in the
   * file are rounded to 1 us). */
  if (rank == 0) check_members(all, size, mode, tpath(name), 2.0);
}

START_TEST(mpi_events) {
  run_mpi(MODE_EVENTS, "mpi.json");
}
END_TEST

START_TEST(mpi_bad_path) {
  run_mpi(MODE_BAD_PATH, "no/such/dir/mpi_bad.json");
}
END_TEST

START_TEST(mpi_member_without_trace) {
  run_mpi(MODE_NO_TRACE, "mpi_none.json");
}
END_TEST

int main(int argc, char **argv) {
  const int mpi = argc > 1 && !strcmp(argv[1], "mpi");
  Suite *s = suite_create("trace");
  TCase *tc = tcase_create("trace");
  int rank = 0;
  if (mpi) {
    if (!dpt_comm_mpi_compiled()) return 77;
    if (dpt_comm_create_mpi(NULL, &world) != DPT_OK) {
      fprintf(stderr, "test_trace mpi: %s\n", dpt_last_error());
      return 1;
    }
    dpt_comm_set_timeout(world, 60.0);
    rank = dpt_comm_rank(world);
    /* One directory for every rank: rank 0 makes it, the others take its name. */
    if (rank == 0) { /* (tu_tmp_make asserts: only inside a test) */
      const char *base = getenv("TMPDIR");
      snprintf(tmp_dir, sizeof tmp_dir, "%s/dpt_test_trace_mpi_XXXXXX",
               base && *base ? base : "/tmp");
      if (!mkdtemp(tmp_dir)) return 1;
    }
    if (dpt_broadcast_host(world, tmp_dir, sizeof tmp_dir, 0) != DPT_OK) return 1;
    tcase_add_test(tc, mpi_events);
    tcase_add_test(tc, mpi_bad_path);
    tcase_add_test(tc, mpi_member_without_trace);
  } else {
    tcase_add_checked_fixture(tc, setup, teardown); /* a directory per test */
    tcase_add_test(tc, one_replica);
    tcase_add_test(tc, dropped_over_limit);
    tcase_add_test(tc, many_events);
    tcase_add_test(tc, threads_three);
    tcase_add_test(tc, threads_bad_path);
    tcase_add_test(tc, threads_member_without_trace);
    tcase_add_test(tc, threads_many_events);
  }
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  if (mpi) srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, rank == 0 ? CK_NORMAL : CK_SILENT);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  if (mpi) {
    if (rank == 0) nftw(tmp_dir, tu_tmp_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    dpt_comm_destroy(world);
  }
  return failed ? 1 : 0;
}
