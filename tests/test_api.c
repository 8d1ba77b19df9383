/* The error model and bad input through the public API: every rejected call returns
 * DPT_ERR_INVALID_ARG (or the documented status) with a message naming the rejected argument,
 * and leaves every buffer as it was. */
#include <check.h>
#include <ctype.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/backend.h"
#include "dptrain/model.h"
#include "dptrain/optim.h"
#include "test_util.h"

/* Under AddressSanitizer, an absurd allocation must come back as NULL (the library then
 * reports DPT_ERR_OUT_OF_MEMORY) instead of aborting the test: the sanitizer reads this hook. */
const char *__asan_default_options(void);
__attribute__((used, visibility("default"))) const char *__asan_default_options(void) {
  return "allocator_may_return_null=1";
}

/* 1 if `word` occurs in `msg` as a whole identifier (not inside a longer name). */
static int names_word(const char *msg, const char *word) {
  size_t n = strlen(word);
  for (const char *p = strstr(msg, word); p; p = strstr(p + 1, word)) {
    int before = p == msg || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
    int after = !(isalnum((unsigned char)p[n]) || p[n] == '_');
    if (before && after) return 1;
  }
  return 0;
}

static void expect_status(dpt_status st, dpt_status want, const char *call, const char *word,
                          int line) {
  ck_assert_msg(st == want, "line %d: %s returned %s, want %s (message: '%s')", line, call,
                dpt_status_name(st), dpt_status_name(want), dpt_last_error());
  ck_assert_msg(dpt_last_error()[0] != '\0', "line %d: %s failed without a message", line, call);
  if (word) {
    ck_assert_msg(names_word(dpt_last_error(), word),
                  "line %d: %s: message '%s' does not name '%s'", line, call, dpt_last_error(),
                  word);
  }
}

/* The call must fail with DPT_ERR_INVALID_ARG and a fresh message naming `word`. */
#define EXPECT_INVALID(call, word)                                                                 \
  do {                                                                                             \
    dpt_clear_error();                                                                             \
    expect_status((call), DPT_ERR_INVALID_ARG, #call, (word), __LINE__);                           \
  } while (0)

/* ---- status codes and messages ---------------------------------------------------------- */

START_TEST(status_strings) {
  static const dpt_status all[] = {
#define ST_(name, value, text) DPT_##name,
      DPT_STATUS_MAP(ST_)
#undef ST_
  };
  enum { N = sizeof all / sizeof all[0] };
  for (int i = 0; i < N; i++) {
    const char *s = dpt_status_str(all[i]), *name = dpt_status_name(all[i]);
    ck_assert_ptr_nonnull(s);
    ck_assert_ptr_nonnull(name);
    ck_assert_msg(s[0] != '\0', "status %d has an empty string", (int)all[i]);
    ck_assert_msg(strcmp(s, "unknown status") != 0, "status %d is named 'unknown status'",
                  (int)all[i]);
    ck_assert_msg(strncmp(name, "DPT_", 4) == 0, "status name '%s'", name);
    ck_assert_msg(all[i] == DPT_OK ? all[i] == 0 : all[i] < 0, "status %s = %d", name, (int)all[i]);
    for (int j = 0; j < i; j++) {
      ck_assert_msg(strcmp(s, dpt_status_str(all[j])) != 0, "'%s' names two statuses", s);
      ck_assert_msg(strcmp(name, dpt_status_name(all[j])) != 0, "'%s' used twice", name);
      ck_assert_msg(all[i] != all[j], "%s and %s share a value", name, dpt_status_name(all[j]));
    }
  }
  ck_assert_str_eq(dpt_status_str(DPT_OK), "ok");
  ck_assert_str_eq(dpt_status_name(DPT_ERR_OUT_OF_MEMORY), "DPT_ERR_OUT_OF_MEMORY");
  ck_assert_str_eq(dpt_status_name(DPT_ERR_PEER), "DPT_ERR_PEER");
  static const int unknown[] = {1, 42, -14, -999, INT_MIN, INT_MAX};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    ck_assert_str_eq(dpt_status_str((dpt_status)unknown[i]), "unknown status");
    ck_assert_str_eq(dpt_status_name((dpt_status)unknown[i]), "DPT_UNKNOWN");
  }
}
END_TEST

typedef struct thread_result {
  char before[256]; /* the thread's message before it failed anything */
  char after[256];  /* its message after its own failure */
  dpt_status st;
} thread_result;

static void *other_thread(void *arg) {
  thread_result *r = arg;
  dpt_backend_kind k;
  snprintf(r->before, sizeof r->before, "%s", dpt_last_error());
  r->st = dpt_backend_kind_parse("other-thread-name", &k);
  snprintf(r->after, sizeof r->after, "%s", dpt_last_error());
  return NULL;
}

START_TEST(last_error_is_per_thread) {
  dpt_backend_kind k;
  ck_assert_int_eq(dpt_backend_kind_parse("main-thread-name", &k), DPT_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(dpt_last_error(), "main-thread-name"));
  thread_result r;
  memset(&r, 0, sizeof r);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, other_thread, &r), 0);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  ck_assert_msg(r.before[0] == '\0', "a new thread starts with message '%s'", r.before);
  ck_assert_int_eq(r.st, DPT_ERR_INVALID_ARG);
  ck_assert_msg(strstr(r.after, "other-thread-name") != NULL, "other thread's message: '%s'",
                r.after);
  ck_assert_msg(strstr(r.after, "main-thread-name") == NULL, "other thread sees '%s'", r.after);
  /* this thread's message is unchanged by the other thread's failure */
  ck_assert_msg(strstr(dpt_last_error(), "main-thread-name") != NULL &&
                    strstr(dpt_last_error(), "other-thread-name") == NULL,
                "main thread's message became '%s'", dpt_last_error());
  /* successful calls keep it; clearing clears it */
  ck_assert_int_eq(dpt_backend_kind_parse("cpu", &k), DPT_OK);
  ck_assert_ptr_nonnull(strstr(dpt_last_error(), "main-thread-name"));
  dpt_clear_error();
  ck_assert_str_eq(dpt_last_error(), "");
}
END_TEST

/* ---- names, kinds, enumeration ---------------------------------------------------------- */

START_TEST(op_names) {
  for (int i = 0; i < DPT_OP_COUNT; i++) {
    const char *n = dpt_op_name((dpt_op)i);
    ck_assert_msg(n != NULL && n[0] != '\0', "op %d has no name", i);
    for (const char *p = n; *p; p++) {
      ck_assert_msg(islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '_',
                    "op name '%s' is not a lower-case identifier", n);
    }
    for (int j = 0; j < i; j++) {
      ck_assert_msg(strcmp(n, dpt_op_name((dpt_op)j)) != 0, "ops %d and %d are both '%s'", j, i, n);
    }
  }
  ck_assert_ptr_null(dpt_op_name(DPT_OP_COUNT));
  ck_assert_ptr_null(dpt_op_name((dpt_op)-1));
  ck_assert_str_eq(dpt_op_name(DPT_OP_GEMM), "gemm");
  ck_assert_str_eq(dpt_op_name(DPT_OP_F16_TO_F32), "f16_to_f32");
  ck_assert_str_eq(dpt_op_name(DPT_OP_BF16_TO_F32), "bf16_to_f32");
}
END_TEST

START_TEST(backend_kinds) {
  for (int i = 0; i < DPT_BACKEND_KIND_COUNT; i++) {
    const char *n = dpt_backend_kind_name((dpt_backend_kind)i);
    ck_assert_ptr_nonnull(n);
    dpt_backend_kind k = DPT_BACKEND_KIND_COUNT;
    TU_OK(dpt_backend_kind_parse(n, &k));
    ck_assert_int_eq(k, i);
    int count = -1;
    dpt_status st = dpt_device_count((dpt_backend_kind)i, &count);
    if (dpt_backend_compiled((dpt_backend_kind)i)) {
      ck_assert_msg(st == DPT_OK, "device_count(%s): %s", n, dpt_last_error());
      ck_assert_int_ge(count, 0);
    } else {
      ck_assert_int_eq(st, DPT_ERR_UNSUPPORTED);
      ck_assert_int_eq(count, 0);
    }
  }
  ck_assert_str_eq(dpt_backend_kind_name(DPT_BACKEND_CPU), "cpu");
  ck_assert_str_eq(dpt_backend_kind_name(DPT_BACKEND_OPENCL), "opencl");
  ck_assert_str_eq(dpt_backend_kind_name(DPT_BACKEND_VULKAN), "vulkan");
  ck_assert_ptr_null(dpt_backend_kind_name(DPT_BACKEND_KIND_COUNT));
  ck_assert_ptr_null(dpt_backend_kind_name((dpt_backend_kind)-1));

  dpt_backend_kind k = DPT_BACKEND_VULKAN;
  EXPECT_INVALID(dpt_backend_kind_parse("metal", &k), "metal");
  ck_assert_msg(strstr(dpt_last_error(), "cpu") && strstr(dpt_last_error(), "opencl") &&
                    strstr(dpt_last_error(), "vulkan"),
                "the message does not list the valid names: '%s'", dpt_last_error());
  ck_assert_int_eq(k, DPT_BACKEND_VULKAN); /* untouched on failure */
  EXPECT_INVALID(dpt_backend_kind_parse("", &k), NULL);
  EXPECT_INVALID(dpt_backend_kind_parse("cpu ", &k), NULL);
  EXPECT_INVALID(dpt_backend_kind_parse(NULL, &k), "name");
  EXPECT_INVALID(dpt_backend_kind_parse("cpu", NULL), "out");

  ck_assert_int_eq(dpt_backend_compiled(DPT_BACKEND_CPU), 1);
  ck_assert_int_eq(dpt_backend_compiled(DPT_BACKEND_KIND_COUNT), 0);
  ck_assert_int_eq(dpt_backend_compiled((dpt_backend_kind)-1), 0);

  for (int i = 0; i <= DPT_DEVICE_OTHER; i++) {
    const char *n = dpt_device_type_name((dpt_device_type)i);
    ck_assert_msg(n && n[0], "device type %d has no name", i);
    for (int j = 0; j < i; j++)
      ck_assert_str_ne(n, dpt_device_type_name((dpt_device_type)j));
  }
  ck_assert_ptr_nonnull(dpt_device_type_name((dpt_device_type)99));
}
END_TEST

/* The names of one X-macro list, [0, count): lower-case identifiers, distinct, NULL outside. */
static void check_kind_names(const char *what, const char *(*name)(int), int count) {
  for (int i = 0; i < count; i++) {
    const char *n = name(i);
    ck_assert_msg(n != NULL && n[0] != '\0', "%s %d has no name", what, i);
    for (const char *p = n; *p; p++)
      ck_assert_msg(islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '_',
                    "%s name '%s' is not a lower-case identifier", what, n);
    for (int j = 0; j < i; j++)
      ck_assert_msg(strcmp(n, name(j)) != 0, "%s %d and %d are both '%s'", what, j, i, n);
  }
  ck_assert_ptr_null(name(count));
  ck_assert_ptr_null(name(-1));
}

static const char *layer_name(int k) {
  return dpt_layer_kind_name((dpt_layer_kind)k);
}
static const char *optim_name(int k) {
  return dpt_optim_kind_name((dpt_optim_kind)k);
}
static const char *schedule_name(int k) {
  return dpt_schedule_kind_name((dpt_schedule_kind)k);
}

START_TEST(model_and_optim_kinds) {
  check_kind_names("layer kind", layer_name, DPT_LAYER_KIND_COUNT);
  ck_assert_int_eq(DPT_LAYER_KIND_COUNT, 20);
  ck_assert_str_eq(dpt_layer_kind_name(DPT_LAYER_ATTENTION), "attention");
  ck_assert_str_eq(dpt_layer_kind_name(DPT_LAYER_LINEAR), "linear");
  ck_assert_str_eq(dpt_layer_kind_name(DPT_LAYER_RELU), "relu");
  ck_assert_str_eq(dpt_layer_kind_name(DPT_LAYER_CONV2D), "conv2d");
  ck_assert_str_eq(dpt_layer_kind_name(DPT_LAYER_MAXPOOL), "maxpool");
  ck_assert_str_eq(dpt_layer_kind_name(DPT_LAYER_FLATTEN), "flatten");
  ck_assert_str_eq(dpt_layer_kind_name(DPT_LAYER_ADD), "add");
  ck_assert_str_eq(dpt_layer_kind_name(DPT_LAYER_BATCHNORM2D), "batchnorm2d");
  ck_assert_str_eq(dpt_layer_kind_name(DPT_LAYER_BATCHNORM1D), "batchnorm1d");
  ck_assert_str_eq(dpt_layer_kind_name(DPT_LAYER_AVGPOOL), "avgpool");
  ck_assert_str_eq(dpt_layer_kind_name(DPT_LAYER_GLOBAL_AVGPOOL), "global_avgpool");
  ck_assert_str_eq(dpt_layer_kind_name(DPT_LAYER_DROPOUT), "dropout");
  ck_assert_str_eq(dpt_layer_kind_name(DPT_LAYER_LAYERNORM), "layernorm");
  ck_assert_str_eq(dpt_layer_kind_name(DPT_LAYER_GELU), "gelu");
  ck_assert_str_eq(dpt_layer_kind_name(DPT_LAYER_SLICE), "slice");
  ck_assert_str_eq(dpt_layer_kind_name(DPT_LAYER_EMBEDDING_BAG), "embedding_bag");
  ck_assert_str_eq(dpt_layer_kind_name(DPT_LAYER_CONCAT), "concat");
  ck_assert_str_eq(dpt_layer_kind_name(DPT_LAYER_INTERACTION), "interaction");
  for (int k = 0; k < DPT_LAYER_KIND_COUNT; ++k) {
    dpt_layer_kind parsed;
    ck_assert_int_eq(dpt_layer_kind_parse(dpt_layer_kind_name((dpt_layer_kind)k), &parsed), DPT_OK);
    ck_assert_int_eq(parsed, k);
  }
  dpt_layer_kind bad;
  ck_assert_int_eq(dpt_layer_kind_parse("conv3d", &bad), DPT_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(dpt_last_error(), "conv3d"));

  check_kind_names("optimizer", optim_name, DPT_OPTIM_KIND_COUNT);
  ck_assert_int_eq(DPT_OPTIM_KIND_COUNT, 3);
  ck_assert_str_eq(dpt_optim_kind_name(DPT_OPTIM_SGD), "sgd");
  ck_assert_str_eq(dpt_optim_kind_name(DPT_OPTIM_ADAMW), "adamw");
  ck_assert_str_eq(dpt_optim_kind_name(DPT_OPTIM_LAMB), "lamb");

  check_kind_names("schedule", schedule_name, DPT_SCHEDULE_KIND_COUNT);
  ck_assert_int_eq(DPT_SCHEDULE_KIND_COUNT, 4);
  ck_assert_str_eq(dpt_schedule_kind_name(DPT_SCHEDULE_CONSTANT), "constant");
  ck_assert_str_eq(dpt_schedule_kind_name(DPT_SCHEDULE_STEP), "step");
  ck_assert_str_eq(dpt_schedule_kind_name(DPT_SCHEDULE_COSINE), "cosine");
  ck_assert_str_eq(dpt_schedule_kind_name(DPT_SCHEDULE_LINEAR), "linear");

  /* A configuration is checked against the same lists. */
  dpt_optim_config c;
  dpt_optim_config_default(&c, DPT_OPTIM_SGD);
  TU_OK(dpt_optim_config_check(&c));
  c.schedule = DPT_SCHEDULE_KIND_COUNT;
  EXPECT_INVALID(dpt_optim_config_check(&c), "schedule");
  dpt_optim_config_default(&c, DPT_OPTIM_ADAMW);
  TU_OK(dpt_optim_config_check(&c));
  c.kind = DPT_OPTIM_KIND_COUNT;
  EXPECT_INVALID(dpt_optim_config_check(&c), "kind");
}
END_TEST

START_TEST(devices_and_backends) {
  int count = -1;
  EXPECT_INVALID(dpt_device_count(DPT_BACKEND_CPU, NULL), "count");
  EXPECT_INVALID(dpt_device_count(DPT_BACKEND_KIND_COUNT, &count), "kind");
  EXPECT_INVALID(dpt_device_count((dpt_backend_kind)-1, &count), "kind");
  TU_OK(dpt_device_count(DPT_BACKEND_CPU, &count));
  ck_assert_int_ge(count, 1);

  dpt_device_info info;
  TU_OK(dpt_device_get_info(DPT_BACKEND_CPU, 0, &info));
  ck_assert_int_eq(info.backend, DPT_BACKEND_CPU);
  ck_assert_int_eq(info.index, 0);
  ck_assert_msg(info.name[0] != '\0', "the CPU device has no name");
  ck_assert_msg(memchr(info.name, '\0', sizeof info.name) != NULL, "name not terminated");
  EXPECT_INVALID(dpt_device_get_info(DPT_BACKEND_CPU, -1, &info), "device");
  EXPECT_INVALID(dpt_device_get_info(DPT_BACKEND_CPU, count, &info), "device");
  EXPECT_INVALID(dpt_device_get_info(DPT_BACKEND_CPU, 0, NULL), "out");
  EXPECT_INVALID(dpt_device_get_info(DPT_BACKEND_KIND_COUNT, 0, &info), "kind");

  dpt_backend *be = (dpt_backend *)&count; /* must be reset to NULL on failure */
  EXPECT_INVALID(dpt_backend_create(DPT_BACKEND_CPU, count, &be), "device");
  ck_assert_ptr_null(be);
  be = (dpt_backend *)&count;
  EXPECT_INVALID(dpt_backend_create(DPT_BACKEND_CPU, -1, &be), "device");
  ck_assert_ptr_null(be);
  EXPECT_INVALID(dpt_backend_create(DPT_BACKEND_KIND_COUNT, 0, &be), "kind");
  EXPECT_INVALID(dpt_backend_create(DPT_BACKEND_CPU, 0, NULL), "out");

  for (int k = 0; k < DPT_BACKEND_KIND_COUNT; k++) {
    if (dpt_backend_compiled((dpt_backend_kind)k)) continue;
    dpt_clear_error();
    expect_status(dpt_backend_create((dpt_backend_kind)k, 0, &be), DPT_ERR_UNSUPPORTED,
                  "dpt_backend_create(not compiled)", NULL, __LINE__);
  }

  TU_OK(dpt_backend_create(DPT_BACKEND_CPU, 0, &be));
  ck_assert_ptr_nonnull(be);
  ck_assert_int_eq(dpt_backend_get_kind(be), DPT_BACKEND_CPU);
  TU_OK(dpt_backend_get_info(be, &info));
  ck_assert_int_eq(info.backend, DPT_BACKEND_CPU);
  EXPECT_INVALID(dpt_backend_get_info(NULL, &info), "backend");
  EXPECT_INVALID(dpt_backend_get_info(be, NULL), "out");
  EXPECT_INVALID(dpt_backend_synchronize(NULL), "backend");
  TU_OK(dpt_backend_synchronize(be));
  for (int op = 0; op < DPT_OP_COUNT; op++) {
    ck_assert_msg(dpt_backend_supports(be, (dpt_op)op), "the CPU backend lacks op %s",
                  dpt_op_name((dpt_op)op));
    ck_assert_int_eq(dpt_backend_supports(NULL, (dpt_op)op), 0);
  }
  ck_assert_int_eq(dpt_backend_supports(be, DPT_OP_COUNT), 0);
  ck_assert_int_eq(dpt_backend_supports(be, (dpt_op)-1), 0);

  /* NULL does nothing */
  dpt_backend_destroy(NULL);
  dpt_buffer_free(NULL);
  ck_assert_uint_eq(dpt_buffer_size(NULL), 0);
  ck_assert_ptr_null(dpt_buffer_backend(NULL));

  /* destroying a backend with live buffers frees them (ASan/LSan would report a leak) */
  dpt_buffer *live = NULL;
  TU_OK(dpt_buffer_alloc(be, 64, &live));
  dpt_backend_destroy(be);
}
END_TEST

/* ---- memory ------------------------------------------------------------------------------ */

static dpt_backend *be, *be2;

static void setup(void) {
  be = tu_cpu();
  be2 = tu_cpu();
}

static void teardown(void) {
  dpt_backend_destroy(be);
  dpt_backend_destroy(be2);
  be = be2 = NULL;
}

/* Asserts that n floats of b all equal v. */
static void expect_all(const dpt_buffer *b, size_t n, float v, const char *what) {
  float got[256];
  ck_assert_uint_le(n, 256);
  tu_get(b, 0, got, n);
  for (size_t i = 0; i < n; i++) {
    ck_assert_msg(got[i] == v, "%s[%zu] = %g after rejected calls, want %g", what, i,
                  (double)got[i], (double)v);
  }
}

START_TEST(buffer_alloc_bad) {
  dpt_buffer *b = (dpt_buffer *)&b;
  EXPECT_INVALID(dpt_buffer_alloc(NULL, 16, &b), "backend");
  ck_assert_ptr_null(b);
  EXPECT_INVALID(dpt_buffer_alloc(be, 0, &b), "bytes");
  EXPECT_INVALID(dpt_buffer_alloc(be, 16, NULL), "out");

  static const size_t absurd[] = {SIZE_MAX / 2, SIZE_MAX, SIZE_MAX - 4095};
  for (size_t i = 0; i < sizeof absurd / sizeof absurd[0]; i++) {
    b = (dpt_buffer *)&b;
    dpt_clear_error();
    dpt_status st = dpt_buffer_alloc(be, absurd[i], &b);
    ck_assert_msg(st == DPT_ERR_OUT_OF_MEMORY || st == DPT_ERR_INVALID_ARG,
                  "alloc of %zu bytes returned %s", absurd[i], dpt_status_name(st));
    ck_assert_msg(dpt_last_error()[0] != '\0', "alloc of %zu bytes: no message", absurd[i]);
    ck_assert_ptr_null(b);
  }
  TU_OK(dpt_buffer_alloc(be, 24, &b));
  ck_assert_uint_eq(dpt_buffer_size(b), 24);
  ck_assert_ptr_eq(dpt_buffer_backend(b), be);
  dpt_buffer_free(b);
}
END_TEST

START_TEST(transfers_bad) {
  dpt_buffer *b = tu_f32_fill(be, 4, 3.0f); /* 16 bytes */
  float host[8] = {0};
  EXPECT_INVALID(dpt_buffer_upload(NULL, 0, host, 4), "dst");
  EXPECT_INVALID(dpt_buffer_upload(b, 0, NULL, 4), "src");
  EXPECT_INVALID(dpt_buffer_upload(b, 17, host, 0), "dst"); /* offset past the end */
  EXPECT_INVALID(dpt_buffer_upload(b, 12, host, 8), "dst"); /* offset + bytes past */
  EXPECT_INVALID(dpt_buffer_upload(b, 0, host, 20), "dst");
  EXPECT_INVALID(dpt_buffer_upload(b, 8, host, SIZE_MAX - 4), "dst"); /* wraps around */
  EXPECT_INVALID(dpt_buffer_upload(b, SIZE_MAX, host, 2), "dst");
  TU_OK(dpt_buffer_upload(b, 16, host, 0)); /* empty range at the end is fine */

  EXPECT_INVALID(dpt_buffer_download(NULL, 0, host, 4), "src");
  EXPECT_INVALID(dpt_buffer_download(b, 0, NULL, 4), "dst");
  EXPECT_INVALID(dpt_buffer_download(b, 17, host, 0), "src");
  EXPECT_INVALID(dpt_buffer_download(b, 4, host, 13), "src");
  EXPECT_INVALID(dpt_buffer_download(b, 4, host, SIZE_MAX), "src");
  for (int i = 0; i < 8; i++)
    ck_assert_msg(host[i] == 0.0f, "host[%d] written", i);

  dpt_buffer *c = tu_f32_fill(be, 4, 5.0f), *other = tu_f32_fill(be2, 4, 6.0f);
  EXPECT_INVALID(dpt_buffer_copy(NULL, 0, b, 0, 4), "dst");
  EXPECT_INVALID(dpt_buffer_copy(c, 0, NULL, 0, 4), "src");
  EXPECT_INVALID(dpt_buffer_copy(c, 0, b, 12, 8), "src");
  EXPECT_INVALID(dpt_buffer_copy(c, 12, b, 0, 8), "dst");
  EXPECT_INVALID(dpt_buffer_copy(c, 0, b, SIZE_MAX, 2), "src");
  EXPECT_INVALID(dpt_buffer_copy(other, 0, b, 0, 4), "backends");
  EXPECT_INVALID(dpt_buffer_copy(b, 0, b, 4, 8), "overlap");

  EXPECT_INVALID(dpt_buffer_fill_f32(NULL, 0, 1, 0.0f), "dst");
  EXPECT_INVALID(dpt_buffer_fill_f32(c, 3, 2, 0.0f), "dst");
  EXPECT_INVALID(dpt_buffer_fill_f32(c, 5, 0, 0.0f), "dst");
  EXPECT_INVALID(dpt_buffer_fill_f32(c, 0, SIZE_MAX / 2, 0.0f), NULL);

  expect_all(b, 4, 3.0f, "b");
  expect_all(c, 4, 5.0f, "c");
  expect_all(other, 4, 6.0f, "other");

  /* and the valid forms work */
  TU_OK(dpt_buffer_copy(b, 8, b, 0, 8)); /* same buffer, disjoint */
  TU_OK(dpt_buffer_copy(c, 0, b, 0, 0));
  TU_OK(dpt_buffer_fill_f32(c, 4, 0, 1.0f));
  TU_OK(dpt_buffer_fill_f32(c, 1, 2, 7.0f));
  const double want[4] = {5, 7, 7, 5};
  tu_expect_buf("c", c, 0, want, 4, 0);
  dpt_buffer_free(b);
  dpt_buffer_free(c);
  dpt_buffer_free(other);
}
END_TEST

/* ---- ops ------------------------------------------------------------------------------------ */

/* Every op with a NULL backend. */
START_TEST(ops_null_backend) {
  dpt_buffer *x = tu_f32_fill(be, 64, 1.0f), *y = tu_f32_fill(be, 64, 2.0f);
  dpt_buffer *idx = tu_buf(be, NULL, 64);
  TU_OK(dpt_buffer_upload(idx, 0, (int32_t[16]){0}, 64));
  const dpt_conv_geom cg = {1, 1, 3, 3, 2, 2, 1, 1, 0, 0};
  const dpt_pool_geom pg = {1, 4, 4, 2, 2, 2, 2};
  const dpt_sgd_params sp = {0.1f, 0.0f, 0.0f, 0};
  const dpt_adamw_params ap = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1};
  double d;
  uint64_t u;
  int64_t i64;
  EXPECT_INVALID(dpt_gemm(NULL, 0, 0, 2, 2, 2, 1, x, 0, 2, x, 4, 2, 0, y, 0, 2), "backend");
  EXPECT_INVALID(dpt_bias_add(NULL, 2, 2, y, 0, x, 0), "backend");
  EXPECT_INVALID(dpt_bias_grad(NULL, 2, 2, x, 0, 0, y, 0), "backend");
  EXPECT_INVALID(dpt_relu_fwd(NULL, 4, x, 0, y, 0), "backend");
  EXPECT_INVALID(dpt_relu_bwd(NULL, 4, x, 0, x, 8, y, 0), "backend");
  EXPECT_INVALID(dpt_add_relu(NULL, 4, x, 0, x, 8, y, 0), "backend");
  EXPECT_INVALID(dpt_softmax_xent(NULL, 2, 2, x, 0, idx, 0, 1, y, 0, &d, &i64), "backend");
  EXPECT_INVALID(dpt_im2col(NULL, &cg, x, 0, y, 0), "backend");
  EXPECT_INVALID(dpt_col2im(NULL, &cg, x, 0, y, 0), "backend");
  EXPECT_INVALID(dpt_maxpool_fwd(NULL, &pg, x, 0, y, 0, idx, 0), "backend");
  EXPECT_INVALID(dpt_maxpool_bwd(NULL, &pg, x, 0, idx, 0, y, 0), "backend");
  EXPECT_INVALID(dpt_embed_gather(NULL, 2, 2, 2, x, 0, idx, 0, y, 0), "backend");
  EXPECT_INVALID(dpt_embed_scatter_add(NULL, 2, 2, 2, x, 0, idx, 0, y, 0), "backend");
  EXPECT_INVALID(dpt_axpy(NULL, 4, 1, x, 0, y, 0), "backend");
  EXPECT_INVALID(dpt_scale(NULL, 4, 1, y, 0), "backend");
  EXPECT_INVALID(dpt_sum(NULL, 4, x, 0, &d), "backend");
  EXPECT_INVALID(dpt_sumsq(NULL, 4, x, 0, &d), "backend");
  EXPECT_INVALID(dpt_count_nonfinite(NULL, 4, x, 0, &u), "backend");
  EXPECT_INVALID(dpt_sgd_update(NULL, 4, &sp, y, 0, x, 0, NULL, 0), "backend");
  EXPECT_INVALID(dpt_adamw_update(NULL, 4, &ap, y, 0, x, 0, y, 8, y, 16), "backend");
  EXPECT_INVALID(dpt_f32_to_f16(NULL, 4, x, 0, y, 0), "backend");
  EXPECT_INVALID(dpt_f16_to_f32(NULL, 4, x, 0, y, 0), "backend");
  EXPECT_INVALID(dpt_f32_to_bf16(NULL, 4, x, 0, y, 0), "backend");
  EXPECT_INVALID(dpt_bf16_to_f32(NULL, 4, x, 0, y, 0), "backend");
  const dpt_gemm_batch gb = {2, 4, 4, 4};
  const dpt_bn_geom bg = {2, 2, 2, 1e-5f};
  const dpt_dropout_params dp = {0.5f, 1, 1, 0};
  EXPECT_INVALID(dpt_gemm_batched(NULL, &gb, 0, 0, 2, 2, 2, 1, x, 0, 2, x, 8, 2, 0, y, 0, 2),
                 "backend");
  EXPECT_INVALID(dpt_bn_stats(NULL, &bg, x, 0, y, 0, y, 2), "backend");
  EXPECT_INVALID(dpt_bn_fwd(NULL, &bg, x, 0, x, 8, x, 10, x, 12, x, 14, y, 0), "backend");
  EXPECT_INVALID(dpt_bn_bwd_reduce(NULL, &bg, x, 0, x, 8, x, 16, x, 18, y, 0, y, 2), "backend");
  EXPECT_INVALID(dpt_bn_bwd(NULL, &bg, 4, x, 0, x, 8, x, 16, x, 18, x, 20, x, 22, x, 24, y, 0),
                 "backend");
  EXPECT_INVALID(dpt_avgpool_fwd(NULL, &pg, x, 0, y, 0), "backend");
  EXPECT_INVALID(dpt_avgpool_bwd(NULL, &pg, x, 0, y, 0), "backend");
  EXPECT_INVALID(dpt_dropout(NULL, 2, 2, &dp, x, 0, y, 0), "backend");
  const dpt_ln_geom lg = {2, 4, 1e-5f};
  EXPECT_INVALID(dpt_layernorm_fwd(NULL, &lg, x, 0, x, 8, x, 12, y, 0, y, 8, y, 10), "backend");
  EXPECT_INVALID(dpt_layernorm_bwd(NULL, &lg, x, 0, x, 8, x, 16, x, 18, x, 20, y, 0), "backend");
  EXPECT_INVALID(dpt_layernorm_bwd_params(NULL, &lg, x, 0, x, 8, x, 16, x, 18, y, 0, y, 4),
                 "backend");
  EXPECT_INVALID(dpt_gelu_fwd(NULL, 4, DPT_GELU_ERF, x, 0, y, 0), "backend");
  EXPECT_INVALID(dpt_gelu_bwd(NULL, 4, DPT_GELU_TANH, x, 0, x, 8, y, 0), "backend");
  expect_all(y, 64, 2.0f, "y");
  dpt_buffer_free(x);
  dpt_buffer_free(y);
  dpt_buffer_free(idx);
}
END_TEST

START_TEST(gemm_bad) {
  dpt_buffer *a = tu_f32_fill(be, 6, 1.0f), *b = tu_f32_fill(be, 6, 1.0f);
  dpt_buffer *c = tu_f32_fill(be, 4, 7.0f), *a2 = tu_f32_fill(be2, 6, 1.0f);
  /* the valid call, for reference: C[2,2] = A[2,3] B[3,2] */
  EXPECT_INVALID(dpt_gemm(be, 0, 0, 2, 2, 3, 1, NULL, 0, 3, b, 0, 2, 0, c, 0, 2), "a");
  EXPECT_INVALID(dpt_gemm(be, 0, 0, 2, 2, 3, 1, a, 0, 3, NULL, 0, 2, 0, c, 0, 2), "b");
  EXPECT_INVALID(dpt_gemm(be, 0, 0, 2, 2, 3, 1, a, 0, 3, b, 0, 2, 0, NULL, 0, 2), "c");
  EXPECT_INVALID(dpt_gemm(be, 0, 0, 2, 2, 3, 1, a, 0, 2, b, 0, 2, 0, c, 0, 2), "lda");
  EXPECT_INVALID(dpt_gemm(be, 1, 0, 2, 2, 3, 1, a, 0, 1, b, 0, 2, 0, c, 0, 2), "lda");
  EXPECT_INVALID(dpt_gemm(be, 0, 0, 2, 2, 3, 1, a, 0, 3, b, 0, 1, 0, c, 0, 2), "ldb");
  EXPECT_INVALID(dpt_gemm(be, 0, 1, 2, 2, 3, 1, a, 0, 3, b, 0, 2, 0, c, 0, 2), "ldb");
  EXPECT_INVALID(dpt_gemm(be, 0, 0, 2, 2, 3, 1, a, 0, 3, b, 0, 2, 0, c, 0, 1), "ldc");
  EXPECT_INVALID(dpt_gemm(be, 0, 0, 2, 2, 3, 1, a, 0, 0, b, 0, 2, 0, c, 0, 2), "lda");
  /* ranges: offsets past the end, offset + extent past the end, padding that does not fit */
  EXPECT_INVALID(dpt_gemm(be, 0, 0, 2, 2, 3, 1, a, 7, 3, b, 0, 2, 0, c, 0, 2), "a");
  EXPECT_INVALID(dpt_gemm(be, 0, 0, 2, 2, 3, 1, a, 1, 3, b, 0, 2, 0, c, 0, 2), "a");
  EXPECT_INVALID(dpt_gemm(be, 0, 0, 2, 2, 3, 1, a, 0, 4, b, 0, 2, 0, c, 0, 2), "a");
  EXPECT_INVALID(dpt_gemm(be, 0, 0, 2, 2, 3, 1, a, 0, 3, b, 1, 2, 0, c, 0, 2), "b");
  EXPECT_INVALID(dpt_gemm(be, 0, 0, 2, 2, 3, 1, a, 0, 3, b, 0, 2, 0, c, 1, 2), "c");
  EXPECT_INVALID(dpt_gemm(be, 0, 0, 2, 3, 3, 1, a, 0, 3, b, 0, 3, 0, c, 0, 3), "b");
  EXPECT_INVALID(dpt_gemm(be, 0, 0, 2, 2, 3, 1, a, SIZE_MAX, 3, b, 0, 2, 0, c, 0, 2), "a");
  /* sizes whose products overflow */
  EXPECT_INVALID(dpt_gemm(be, 0, 0, SIZE_MAX / 2, 2, 4, 1, a, 0, 4, b, 0, 2, 0, c, 0, 2), "a");
  EXPECT_INVALID(dpt_gemm(be, 0, 0, 2, 2, SIZE_MAX, 1, a, 0, SIZE_MAX, b, 0, 2, 0, c, 0, 2), "a");
  EXPECT_INVALID(
      dpt_gemm(be, 0, 0, 2, SIZE_MAX / 4, 3, 1, a, 0, 3, b, 0, SIZE_MAX / 4, 0, c, 0, SIZE_MAX / 4),
      "b");
  /* a buffer of another backend */
  EXPECT_INVALID(dpt_gemm(be, 0, 0, 2, 2, 3, 1, a2, 0, 3, b, 0, 2, 0, c, 0, 2), "a");
  ck_assert_ptr_nonnull(strstr(dpt_last_error(), "backend"));
  /* C overlapping A */
  EXPECT_INVALID(dpt_gemm(be, 0, 0, 1, 1, 3, 1, a, 0, 3, b, 0, 1, 0, a, 2, 1), "c");
  expect_all(c, 4, 7.0f, "c");
  expect_all(a, 6, 1.0f, "a");
  /* the valid call succeeds */
  TU_OK(dpt_gemm(be, 0, 0, 2, 2, 3, 1, a, 0, 3, b, 0, 2, 0, c, 0, 2));
  expect_all(c, 4, 3.0f, "c");
  dpt_buffer_free(a);
  dpt_buffer_free(b);
  dpt_buffer_free(c);
  dpt_buffer_free(a2);
}
END_TEST

START_TEST(elementwise_bad) {
  dpt_buffer *x = tu_f32_fill(be, 8, 1.0f), *y = tu_f32_fill(be, 8, 2.0f);
  dpt_buffer *o = tu_f32_fill(be2, 8, 4.0f);
  EXPECT_INVALID(dpt_bias_add(be, 2, 4, NULL, 0, x, 0), "y");
  EXPECT_INVALID(dpt_bias_add(be, 2, 4, y, 0, NULL, 0), "bias");
  EXPECT_INVALID(dpt_bias_add(be, 3, 4, y, 0, x, 0), "y");
  EXPECT_INVALID(dpt_bias_add(be, 2, 4, y, 0, x, 5), "bias");
  EXPECT_INVALID(dpt_bias_add(be, SIZE_MAX, 2, y, 0, x, 0), "y");
  EXPECT_INVALID(dpt_bias_add(be, 2, 4, y, 0, o, 0), "bias");
  EXPECT_INVALID(dpt_bias_grad(be, 2, 4, NULL, 0, 0, y, 0), "dy");
  EXPECT_INVALID(dpt_bias_grad(be, 2, 4, x, 0, 0, y, 5), "db");
  EXPECT_INVALID(dpt_bias_grad(be, 2, 4, x, 1, 0, y, 0), "dy");
  EXPECT_INVALID(dpt_relu_fwd(be, 8, NULL, 0, y, 0), "x");
  EXPECT_INVALID(dpt_relu_fwd(be, 8, x, 0, y, 1), "y");
  EXPECT_INVALID(dpt_relu_fwd(be, 9, x, 0, y, 0), "x");
  EXPECT_INVALID(dpt_relu_fwd(be, 4, x, 0, x, 2), "y"); /* partial overlap */
  EXPECT_INVALID(dpt_relu_fwd(be, 4, x, 0, o, 0), "y");
  EXPECT_INVALID(dpt_relu_bwd(be, 4, x, 0, x, 4, y, 9), "dx");
  EXPECT_INVALID(dpt_relu_bwd(be, 4, x, 0, x, 4, x, 2), "dx"); /* dx overlaps x */
  EXPECT_INVALID(dpt_relu_bwd(be, 4, x, 0, NULL, 4, y, 0), "dy");
  EXPECT_INVALID(dpt_add_relu(be, 4, NULL, 0, x, 4, y, 0), "a");
  EXPECT_INVALID(dpt_add_relu(be, 4, x, 0, NULL, 4, y, 0), "b");
  EXPECT_INVALID(dpt_add_relu(be, 4, x, 0, x, 5, y, 0), "b");
  EXPECT_INVALID(dpt_add_relu(be, 4, x, 0, x, 4, y, 5), "y");
  EXPECT_INVALID(dpt_add_relu(be, 4, x, 0, x, 4, x, 2), "y"); /* partial overlap */
  EXPECT_INVALID(dpt_add_relu(be, 4, x, 0, o, 0, y, 0), "b");
  EXPECT_INVALID(dpt_axpy(be, 8, 1, NULL, 0, y, 0), "x");
  EXPECT_INVALID(dpt_axpy(be, 8, 1, x, 0, y, 4), "y");
  EXPECT_INVALID(dpt_axpy(be, 4, 1, y, 0, y, 2), "y");
  EXPECT_INVALID(dpt_axpy(be, SIZE_MAX, 1, x, 0, y, 0), "x");
  EXPECT_INVALID(dpt_axpy(be, 4, 1, o, 0, y, 0), "x");
  EXPECT_INVALID(dpt_scale(be, 8, 2, y, 1), "x");
  EXPECT_INVALID(dpt_scale(be, 1, 2, y, SIZE_MAX / 2), "x");
  EXPECT_INVALID(dpt_scale(be, 1, 2, NULL, 0), "x");
  double d = 123;
  uint64_t u = 123;
  EXPECT_INVALID(dpt_sum(be, 8, x, 0, NULL), "out");
  EXPECT_INVALID(dpt_sum(be, 9, x, 0, &d), "x");
  EXPECT_INVALID(dpt_sumsq(be, 8, x, 0, NULL), "out");
  EXPECT_INVALID(dpt_sumsq(be, 1, x, 8, &d), "x");
  EXPECT_INVALID(dpt_count_nonfinite(be, 8, x, 0, NULL), "out");
  EXPECT_INVALID(dpt_count_nonfinite(be, 8, NULL, 0, &u), "x");
  EXPECT_INVALID(dpt_count_nonfinite(be, 8, o, 0, &u), "x");
  expect_all(y, 8, 2.0f, "y");
  expect_all(x, 8, 1.0f, "x");
  expect_all(o, 8, 4.0f, "other");
  dpt_buffer_free(x);
  dpt_buffer_free(y);
  dpt_buffer_free(o);
}
END_TEST

START_TEST(softmax_embed_bad) {
  dpt_buffer *lg = tu_f32_fill(be, 6, 0.0f), *d = tu_f32_fill(be, 6, 9.0f);
  int32_t lab[3] = {0, 1, 2};
  dpt_buffer *lb = tu_buf(be, lab, 11); /* holds 2 labels, not 3 */
  double loss = 0;
  int64_t correct = 0;
  EXPECT_INVALID(dpt_softmax_xent(be, 2, 0, lg, 0, lb, 0, 1, d, 0, &loss, &correct), "cols");
  EXPECT_INVALID(dpt_softmax_xent(be, 2, 3, NULL, 0, lb, 0, 1, d, 0, &loss, &correct), "logits");
  EXPECT_INVALID(dpt_softmax_xent(be, 2, 3, lg, 1, lb, 0, 1, d, 0, &loss, &correct), "logits");
  EXPECT_INVALID(dpt_softmax_xent(be, 2, 3, lg, 0, NULL, 0, 1, d, 0, &loss, &correct), "labels");
  EXPECT_INVALID(dpt_softmax_xent(be, 3, 2, lg, 0, lb, 0, 1, d, 0, &loss, &correct), "labels");
  EXPECT_INVALID(dpt_softmax_xent(be, 2, 3, lg, 0, lb, 0, 1, d, 2, &loss, &correct), "dlogits");
  EXPECT_INVALID(dpt_softmax_xent(be, 2, 3, lg, 0, lb, 0, 1, lg, 0, &loss, &correct), "dlogits");
  EXPECT_INVALID(dpt_softmax_xent(be, SIZE_MAX / 2, 3, lg, 0, lb, 0, 1, d, 0, NULL, NULL),
                 "logits");
  expect_all(d, 6, 9.0f, "dlogits");

  dpt_buffer *t = tu_f32_fill(be, 6, 1.0f), *o = tu_f32_fill(be, 6, 5.0f);
  EXPECT_INVALID(dpt_embed_gather(be, 2, 0, 3, t, 0, lb, 0, o, 0), "vocab");
  EXPECT_INVALID(dpt_embed_gather(be, 2, 3, 3, t, 0, lb, 0, o, 0), "table");
  EXPECT_INVALID(dpt_embed_gather(be, 3, 2, 2, t, 0, lb, 0, o, 0), "idx");
  EXPECT_INVALID(dpt_embed_gather(be, 2, 2, 3, t, 0, lb, 0, o, 1), "out");
  EXPECT_INVALID(dpt_embed_gather(be, 2, 2, 3, t, 0, NULL, 0, o, 0), "idx");
  EXPECT_INVALID(dpt_embed_gather(be, 2, 2, SIZE_MAX / 2, t, 0, lb, 0, o, 0), "table");
  EXPECT_INVALID(dpt_embed_scatter_add(be, 2, 0, 3, t, 0, lb, 0, o, 0), "vocab");
  EXPECT_INVALID(dpt_embed_scatter_add(be, 2, 2, 3, t, 1, lb, 0, o, 0), "dout");
  EXPECT_INVALID(dpt_embed_scatter_add(be, 2, 2, 3, t, 0, lb, 1, o, 0), "idx");
  EXPECT_INVALID(dpt_embed_scatter_add(be, 2, 2, 3, t, 0, lb, 0, o, 4), "dtable");
  EXPECT_INVALID(dpt_embed_scatter_add(be, 2, 2, 3, t, 0, lb, 0, NULL, 0), "dtable");
  expect_all(o, 6, 5.0f, "out");
  /* int32 tensors count 4-byte elements: 2 labels fit in 11 bytes */
  TU_OK(dpt_softmax_xent(be, 2, 3, lg, 0, lb, 0, 1, d, 0, &loss, &correct));
  dpt_buffer_free(lg);
  dpt_buffer_free(d);
  dpt_buffer_free(lb);
  dpt_buffer_free(t);
  dpt_buffer_free(o);
}
END_TEST

START_TEST(geometry_bad) {
  dpt_buffer *x = tu_f32_fill(be, 16, 1.0f), *col = tu_f32_fill(be, 64, 8.0f);
  dpt_buffer *am = tu_buf(be, NULL, 15); /* 3 int32, not 4 */
  dpt_buffer *amok = tu_buf(be, (int32_t[4]){0, 2, 8, 10}, 16);
  size_t oh = 0, ow = 0;
  const dpt_conv_geom ok = {1, 1, 4, 4, 2, 2, 1, 1, 0, 0}; /* col [4, 9] */
  TU_OK(dpt_conv_out_size(&ok, &oh, &ow));
  ck_assert_uint_eq(oh, 3);
  ck_assert_uint_eq(ow, 3);
  dpt_conv_geom g = ok;
  g.stride_h = 0;
  EXPECT_INVALID(dpt_conv_out_size(&g, &oh, &ow), "stride");
  EXPECT_INVALID(dpt_im2col(be, &g, x, 0, col, 0), "stride");
  g = ok;
  g.kw = 0;
  EXPECT_INVALID(dpt_conv_out_size(&g, &oh, &ow), "kernel");
  g = ok;
  g.kh = 7; /* 4 + 2*1 = 6 < 7 */
  g.pad_h = 1;
  EXPECT_INVALID(dpt_conv_out_size(&g, &oh, &ow), "kernel");
  EXPECT_INVALID(dpt_col2im(be, &g, col, 0, x, 0), "kernel");
  g = ok;
  g.pad_w = SIZE_MAX / 2;
  EXPECT_INVALID(dpt_conv_out_size(&g, &oh, &ow), NULL);
  EXPECT_INVALID(dpt_conv_out_size(NULL, &oh, &ow), "geometry");
  g = ok;
  g.h = 0; /* with padding 1 the 2x2 kernel would still fit: refused all the same */
  g.pad_h = 1;
  EXPECT_INVALID(dpt_conv_out_size(&g, &oh, &ow), "input h x w");
  EXPECT_INVALID(dpt_im2col(be, &g, x, 0, col, 0), "input h x w");
  EXPECT_INVALID(dpt_conv_out_size(&ok, NULL, &ow), "out_h");
  EXPECT_INVALID(dpt_im2col(be, NULL, x, 0, col, 0), "geometry");
  EXPECT_INVALID(dpt_im2col(be, &ok, x, 1, col, 0), "x");
  EXPECT_INVALID(dpt_im2col(be, &ok, x, 0, col, 29), "col");
  EXPECT_INVALID(dpt_im2col(be, &ok, NULL, 0, col, 0), "x");
  EXPECT_INVALID(dpt_col2im(be, &ok, col, 29, x, 0), "col");
  EXPECT_INVALID(dpt_col2im(be, &ok, col, 0, x, 1), "dx");
  g = ok;
  g.n = SIZE_MAX / 8;
  EXPECT_INVALID(dpt_im2col(be, &g, x, 0, col, 0), NULL);

  const dpt_pool_geom pok = {1, 4, 4, 2, 2, 2, 2}; /* y [1, 2, 2] */
  TU_OK(dpt_pool_out_size(&pok, &oh, &ow));
  ck_assert_uint_eq(oh, 2);
  ck_assert_uint_eq(ow, 2);
  dpt_pool_geom p = pok;
  p.stride_w = 0;
  EXPECT_INVALID(dpt_pool_out_size(&p, &oh, &ow), "stride");
  EXPECT_INVALID(dpt_maxpool_fwd(be, &p, x, 0, col, 0, amok, 0), "stride");
  p = pok;
  p.kh = 5;
  EXPECT_INVALID(dpt_pool_out_size(&p, &oh, &ow), "kernel");
  EXPECT_INVALID(dpt_maxpool_bwd(be, &p, col, 0, amok, 0, x, 0), "kernel");
  EXPECT_INVALID(dpt_maxpool_fwd(be, NULL, x, 0, col, 0, amok, 0), "geometry");
  EXPECT_INVALID(dpt_maxpool_fwd(be, &pok, x, 0, col, 0, am, 0), "argmax");
  EXPECT_INVALID(dpt_maxpool_fwd(be, &pok, x, 1, col, 0, amok, 0), "x");
  EXPECT_INVALID(dpt_maxpool_fwd(be, &pok, x, 0, col, 61, amok, 0), "y");
  EXPECT_INVALID(dpt_maxpool_bwd(be, &pok, col, 0, am, 0, x, 0), "argmax");
  EXPECT_INVALID(dpt_maxpool_bwd(be, &pok, col, 0, NULL, 0, x, 0), "argmax");
  EXPECT_INVALID(dpt_maxpool_bwd(be, &pok, col, 61, amok, 0, x, 0), "dy");
  EXPECT_INVALID(dpt_maxpool_bwd(be, &pok, col, 0, amok, 0, x, 1), "dx");
  expect_all(x, 16, 1.0f, "x");
  expect_all(col, 64, 8.0f, "col");
  dpt_buffer_free(x);
  dpt_buffer_free(col);
  dpt_buffer_free(am);
  dpt_buffer_free(amok);
}
END_TEST

START_TEST(optimizers_and_f16_bad) {
  dpt_buffer *w = tu_f32_fill(be, 8, 1.0f), *g = tu_f32_fill(be, 8, 0.5f);
  dpt_buffer *m = tu_f32_fill(be, 8, 0.0f), *v = tu_f32_fill(be, 8, 0.0f);
  const dpt_sgd_params sp = {0.1f, 0.9f, 0.0f, 0}, nest0 = {0.1f, 0.0f, 0.0f, 1};
  EXPECT_INVALID(dpt_sgd_update(be, 8, NULL, w, 0, g, 0, v, 0), "params");
  EXPECT_INVALID(dpt_sgd_update(be, 8, &sp, w, 0, g, 0, NULL, 0), "velocity");
  EXPECT_INVALID(dpt_sgd_update(be, 8, &sp, w, 0, g, 0, v, 1), "velocity");
  EXPECT_INVALID(dpt_sgd_update(be, 8, &sp, NULL, 0, g, 0, v, 0), "w");
  EXPECT_INVALID(dpt_sgd_update(be, 8, &sp, w, 0, g, 4, v, 0), "grad");
  EXPECT_INVALID(dpt_sgd_update(be, 8, &sp, w, 0, w, 0, v, 0), "w");
  EXPECT_INVALID(dpt_sgd_update(be, 8, &nest0, w, 0, g, 0, NULL, 0), "nesterov");
  dpt_adamw_params ap = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1};
  EXPECT_INVALID(dpt_adamw_update(be, 8, NULL, w, 0, g, 0, m, 0, v, 0), "params");
  ap.step = 0;
  EXPECT_INVALID(dpt_adamw_update(be, 8, &ap, w, 0, g, 0, m, 0, v, 0), "step");
  ap.step = 1;
  ap.beta1 = 1.0f;
  EXPECT_INVALID(dpt_adamw_update(be, 8, &ap, w, 0, g, 0, m, 0, v, 0), "beta1");
  ap.beta1 = 0.9f;
  EXPECT_INVALID(dpt_adamw_update(be, 8, &ap, w, 0, g, 0, m, 1, v, 0), "m");
  EXPECT_INVALID(dpt_adamw_update(be, 8, &ap, w, 0, g, 0, m, 0, NULL, 0), "v");
  EXPECT_INVALID(dpt_adamw_update(be, 8, &ap, w, 0, g, 0, m, 0, m, 0), "v");
  expect_all(w, 8, 1.0f, "w");
  expect_all(m, 8, 0.0f, "m");
  expect_all(v, 8, 0.0f, "v");

  /* binary16 tensors count 2-byte elements: 5 fit in 10 bytes, 6 do not */
  dpt_buffer *h = tu_buf(be, NULL, 10);
  EXPECT_INVALID(dpt_f32_to_f16(be, 6, w, 0, h, 0), "dst");
  EXPECT_INVALID(dpt_f32_to_f16(be, 5, w, 0, h, 1), "dst");
  EXPECT_INVALID(dpt_f32_to_f16(be, 5, w, 4, h, 0), "src");
  EXPECT_INVALID(dpt_f32_to_f16(be, 5, NULL, 0, h, 0), "src");
  EXPECT_INVALID(dpt_f16_to_f32(be, 6, h, 0, m, 0), "src");
  EXPECT_INVALID(dpt_f16_to_f32(be, 5, h, 0, m, 4), "dst");
  EXPECT_INVALID(dpt_f32_to_bf16(be, 6, w, 0, h, 0), "dst");
  EXPECT_INVALID(dpt_f32_to_bf16(be, 5, w, 0, h, 1), "dst");
  EXPECT_INVALID(dpt_bf16_to_f32(be, 6, h, 0, m, 0), "src");
  EXPECT_INVALID(dpt_bf16_to_f32(be, 5, h, 0, m, 4), "dst");
  TU_OK(dpt_f32_to_bf16(be, 5, w, 0, h, 0));
  TU_OK(dpt_bf16_to_f32(be, 5, h, 0, m, 3));
  TU_OK(dpt_f32_to_f16(be, 5, w, 0, h, 0));
  TU_OK(dpt_f16_to_f32(be, 5, h, 0, m, 3));
  const double want[8] = {0, 0, 0, 1, 1, 1, 1, 1};
  tu_expect_buf("m", m, 0, want, 8, 0);
  dpt_buffer_free(w);
  dpt_buffer_free(g);
  dpt_buffer_free(m);
  dpt_buffer_free(v);
  dpt_buffer_free(h);
}
END_TEST

START_TEST(layer_ops_bad) {
  /* gemm_batched: 2 items of A [2,3] (stride 6), B [3,2] (stride 6), C [2,2] (stride 4) */
  dpt_buffer *a = tu_f32_fill(be, 12, 1.0f), *b = tu_f32_fill(be, 12, 1.0f);
  dpt_buffer *c = tu_f32_fill(be, 8, 7.0f), *big = tu_f32_fill(be, 32, 1.0f);
  dpt_buffer *o = tu_f32_fill(be2, 12, 1.0f);
  const dpt_gemm_batch bt = {2, 6, 6, 4}, summed = {2, 6, 6, 0};
  dpt_gemm_batch bad = bt;
  EXPECT_INVALID(dpt_gemm_batched(be, NULL, 0, 0, 2, 2, 3, 1, a, 0, 3, b, 0, 2, 0, c, 0, 2),
                 "batch");
  EXPECT_INVALID(dpt_gemm_batched(be, &bt, 0, 0, 2, 2, 3, 1, NULL, 0, 3, b, 0, 2, 0, c, 0, 2), "a");
  EXPECT_INVALID(dpt_gemm_batched(be, &bt, 0, 0, 2, 2, 3, 1, a, 0, 3, NULL, 0, 2, 0, c, 0, 2), "b");
  EXPECT_INVALID(dpt_gemm_batched(be, &bt, 0, 0, 2, 2, 3, 1, a, 0, 3, b, 0, 2, 0, NULL, 0, 2), "c");
  EXPECT_INVALID(dpt_gemm_batched(be, &bt, 0, 0, 2, 2, 3, 1, a, 0, 2, b, 0, 2, 0, c, 0, 2), "lda");
  EXPECT_INVALID(dpt_gemm_batched(be, &bt, 0, 1, 2, 2, 3, 1, a, 0, 3, b, 0, 2, 0, c, 0, 2), "ldb");
  EXPECT_INVALID(dpt_gemm_batched(be, &bt, 0, 0, 2, 2, 3, 1, a, 0, 3, b, 0, 2, 0, c, 0, 1), "ldc");
  /* the last item past the end: by offset, or by stride */
  EXPECT_INVALID(dpt_gemm_batched(be, &bt, 0, 0, 2, 2, 3, 1, a, 1, 3, b, 0, 2, 0, c, 0, 2), "a");
  EXPECT_INVALID(dpt_gemm_batched(be, &bt, 0, 0, 2, 2, 3, 1, a, 0, 3, b, 1, 2, 0, c, 0, 2), "b");
  EXPECT_INVALID(dpt_gemm_batched(be, &bt, 0, 0, 2, 2, 3, 1, a, 0, 3, b, 0, 2, 0, c, 1, 2), "c");
  bad.stride_a = 7;
  EXPECT_INVALID(dpt_gemm_batched(be, &bad, 0, 0, 2, 2, 3, 1, a, 0, 3, b, 0, 2, 0, c, 0, 2), "a");
  bad = bt;
  bad.stride_c = 3; /* C items would overlap (one C spans 4) */
  EXPECT_INVALID(dpt_gemm_batched(be, &bad, 0, 0, 2, 2, 3, 1, a, 0, 3, b, 0, 2, 0, c, 0, 2),
                 "stride_c");
  bad = bt;
  bad.batch = SIZE_MAX / 2; /* the span overflows */
  EXPECT_INVALID(dpt_gemm_batched(be, &bad, 0, 0, 2, 2, 3, 1, a, 0, 3, b, 0, 2, 0, c, 0, 2), "a");
  EXPECT_INVALID(dpt_gemm_batched(be, &bt, 0, 0, 2, 2, 3, 1, o, 0, 3, b, 0, 2, 0, c, 0, 2), "a");
  /* C's batch overlapping A's (both in one buffer), or B's second item */
  EXPECT_INVALID(dpt_gemm_batched(be, &bt, 0, 0, 2, 2, 3, 1, big, 0, 3, b, 0, 2, 0, big, 8, 2),
                 "c");
  EXPECT_INVALID(dpt_gemm_batched(be, &bt, 0, 0, 2, 2, 3, 1, a, 0, 3, big, 0, 2, 0, big, 9, 2),
                 "c");
  expect_all(c, 8, 7.0f, "c");
  expect_all(big, 32, 1.0f, "big");
  /* the valid calls: each C = A B = 3; summed: 6 */
  TU_OK(dpt_gemm_batched(be, &bt, 0, 0, 2, 2, 3, 1, a, 0, 3, b, 0, 2, 0, c, 0, 2));
  expect_all(c, 8, 3.0f, "c");
  TU_OK(dpt_gemm_batched(be, &summed, 0, 0, 2, 2, 3, 1, a, 0, 3, b, 0, 2, 0, c, 4, 2));
  TU_OK(dpt_gemm_batched(be, &summed, 0, 0, 2, 2, 3, 1, a, 0, 3, b, 0, 2, 0, big, 12, 2));
  expect_all(big, 12, 1.0f, "big");
  const double six[4] = {6, 6, 6, 6};
  tu_expect_buf("c (summed)", c, 4, six, 4, 0);
  dpt_buffer_free(a);
  dpt_buffer_free(b);
  dpt_buffer_free(c);
  dpt_buffer_free(big);
  dpt_buffer_free(o);
}
END_TEST

/* Batch norm over x [2, 3, 4]; the per-channel vectors [3] share one buffer: mean at 0, var 3,
 * gamma 6, beta 9, sum_dy_xhat 12, sum_dy 15. */
START_TEST(bn_bad) {
  dpt_buffer *x = tu_f32_fill(be, 24, 1.0f), *dy = tu_f32_fill(be, 24, 0.5f);
  dpt_buffer *v = tu_f32_fill(be, 18, 1.0f), *y = tu_f32_fill(be, 24, 9.0f);
  dpt_buffer *o = tu_f32_fill(be2, 24, 1.0f);
  const dpt_bn_geom g = {2, 3, 4, 1e-5f};
  dpt_bn_geom bad = g;
  EXPECT_INVALID(dpt_bn_stats(NULL, &g, x, 0, v, 0, v, 3), "backend");
  EXPECT_INVALID(dpt_bn_stats(be, NULL, x, 0, v, 0, v, 3), "geometry");
  bad.n = 0;
  EXPECT_INVALID(dpt_bn_stats(be, &bad, x, 0, v, 0, v, 3), "n");
  bad = g;
  bad.p = 0;
  EXPECT_INVALID(dpt_bn_fwd(be, &bad, x, 0, v, 0, v, 3, v, 6, v, 9, y, 0), "p");
  const float eps_bad[] = {0.0f, -1e-5f, NAN, INFINITY};
  for (size_t i = 0; i < sizeof eps_bad / sizeof eps_bad[0]; i++) {
    bad = g;
    bad.eps = eps_bad[i];
    EXPECT_INVALID(dpt_bn_stats(be, &bad, x, 0, v, 0, v, 3), "eps");
    EXPECT_INVALID(dpt_bn_fwd(be, &bad, x, 0, v, 0, v, 3, v, 6, v, 9, y, 0), "eps");
    EXPECT_INVALID(dpt_bn_bwd(be, &bad, 8, dy, 0, x, 0, v, 0, v, 3, v, 6, v, 12, v, 15, y, 0),
                   "eps");
  }
  bad = g;
  bad.n = SIZE_MAX / 2;
  EXPECT_INVALID(dpt_bn_stats(be, &bad, x, 0, v, 0, v, 3), "x");
  EXPECT_INVALID(dpt_bn_stats(be, &g, x, 1, v, 0, v, 3), "x");
  EXPECT_INVALID(dpt_bn_stats(be, &g, NULL, 0, v, 0, v, 3), "x");
  EXPECT_INVALID(dpt_bn_stats(be, &g, x, 0, NULL, 0, v, 3), "mean");
  EXPECT_INVALID(dpt_bn_stats(be, &g, x, 0, v, 0, v, 16), "var");
  EXPECT_INVALID(dpt_bn_stats(be, &g, x, 0, v, 0, v, 2), "var"); /* overlaps mean */
  EXPECT_INVALID(dpt_bn_stats(be, &g, x, 0, x, 20, v, 3), "mean");
  EXPECT_INVALID(dpt_bn_stats(be, &g, o, 0, v, 0, v, 3), "x");

  EXPECT_INVALID(dpt_bn_fwd(be, &g, x, 0, v, 0, v, 3, NULL, 6, v, 9, y, 0), "gamma");
  EXPECT_INVALID(dpt_bn_fwd(be, &g, x, 0, v, 0, v, 3, v, 6, v, 16, y, 0), "beta");
  EXPECT_INVALID(dpt_bn_fwd(be, &g, x, 0, v, 0, v, 3, v, 6, v, 9, y, 1), "y");
  EXPECT_INVALID(dpt_bn_fwd(be, &g, x, 0, v, 0, v, 3, v, 6, v, 9, x, 0), "y");
  EXPECT_INVALID(dpt_bn_fwd(be, &g, x, 0, y, 0, v, 3, v, 6, v, 9, y, 0), "y"); /* over mean */

  EXPECT_INVALID(dpt_bn_bwd_reduce(be, &g, dy, 1, x, 0, v, 0, v, 3, v, 12, v, 15), "dy");
  EXPECT_INVALID(dpt_bn_bwd_reduce(be, &g, dy, 0, x, 0, v, 0, v, 3, v, 12, v, 14), "sum_dy");
  EXPECT_INVALID(dpt_bn_bwd_reduce(be, &g, dy, 0, x, 0, v, 0, v, 3, v, 2, v, 15), "sum_dy_xhat");
  EXPECT_INVALID(dpt_bn_bwd_reduce(be, &g, dy, 0, x, 0, v, 0, v, 3, dy, 0, v, 15), "sum_dy_xhat");
  EXPECT_INVALID(dpt_bn_bwd_reduce(be, &g, dy, 0, x, 0, v, 0, NULL, 3, v, 12, v, 15), "var");

  EXPECT_INVALID(dpt_bn_bwd(be, &g, 0, dy, 0, x, 0, v, 0, v, 3, v, 6, v, 12, v, 15, y, 0), "count");
  EXPECT_INVALID(dpt_bn_bwd(be, &g, 8, dy, 0, x, 0, v, 0, v, 3, v, 6, v, 12, NULL, 15, y, 0),
                 "sum_dy");
  EXPECT_INVALID(dpt_bn_bwd(be, &g, 8, dy, 0, x, 0, v, 0, v, 3, v, 6, v, 12, v, 15, dy, 0), "dx");
  EXPECT_INVALID(dpt_bn_bwd(be, &g, 8, dy, 0, x, 0, v, 0, v, 3, v, 6, v, 12, v, 15, x, 0), "dx");
  EXPECT_INVALID(dpt_bn_bwd(be, &g, 8, dy, 0, x, 0, v, 0, v, 3, v, 6, v, 12, v, 15, y, 1), "dx");

  /* the bn_relu forms: the same checks, and y (the fused forward's output) beside dy */
  EXPECT_INVALID(dpt_bn_relu_fwd(be, &g, x, 0, v, 0, v, 3, v, 6, v, 9, x, 0), "y");
  EXPECT_INVALID(dpt_bn_relu_fwd(NULL, &g, x, 0, v, 0, v, 3, v, 6, v, 9, y, 0), "backend");
  EXPECT_INVALID(dpt_bn_relu_bwd_reduce(be, &g, dy, 0, NULL, 0, x, 0, v, 0, v, 3, v, 12, v, 15),
                 "y");
  EXPECT_INVALID(dpt_bn_relu_bwd_reduce(be, &g, dy, 0, y, 1, x, 0, v, 0, v, 3, v, 12, v, 15), "y");
  EXPECT_INVALID(dpt_bn_relu_bwd_reduce(be, &g, dy, 0, o, 0, x, 0, v, 0, v, 3, v, 12, v, 15), "y");
  EXPECT_INVALID(dpt_bn_relu_bwd_reduce(be, &g, dy, 0, y, 0, x, 0, v, 0, v, 3, y, 0, v, 15),
                 "sum_dy_xhat"); /* over y */
  EXPECT_INVALID(
      dpt_bn_relu_bwd(be, &g, 8, dy, 0, NULL, 0, x, 0, v, 0, v, 3, v, 6, v, 12, v, 15, y, 0), "y");
  EXPECT_INVALID(
      dpt_bn_relu_bwd(be, &g, 0, dy, 0, y, 0, x, 0, v, 0, v, 3, v, 6, v, 12, v, 15, dy, 0),
      "count");
  EXPECT_INVALID(
      dpt_bn_relu_bwd(be, &g, 8, dy, 0, y, 0, x, 0, v, 0, v, 3, v, 6, v, 12, v, 15, y, 0),
      "dx"); /* over y */
  expect_all(x, 24, 1.0f, "x");
  expect_all(v, 18, 1.0f, "vectors");
  expect_all(y, 24, 9.0f, "y");
  /* the valid calls */
  TU_OK(dpt_bn_stats(be, &g, x, 0, v, 0, v, 3));
  TU_OK(dpt_bn_fwd(be, &g, x, 0, v, 0, v, 3, v, 6, v, 9, y, 0));
  TU_OK(dpt_bn_bwd_reduce(be, &g, dy, 0, x, 0, v, 0, v, 3, v, 12, v, 15));
  TU_OK(dpt_bn_bwd(be, &g, 8, dy, 0, x, 0, v, 0, v, 3, v, 6, v, 12, v, 15, y, 0));
  TU_OK(dpt_bn_relu_fwd(be, &g, x, 0, v, 0, v, 3, v, 6, v, 9, y, 0));
  TU_OK(dpt_bn_relu_bwd_reduce(be, &g, dy, 0, y, 0, x, 0, v, 0, v, 3, v, 12, v, 15));
  dpt_buffer *dx = tu_f32_fill(be, 24, 0.0f);
  TU_OK(dpt_bn_relu_bwd(be, &g, 8, dy, 0, y, 0, x, 0, v, 0, v, 3, v, 6, v, 12, v, 15, dx, 0));
  dpt_buffer_free(dx);
  dpt_buffer_free(x);
  dpt_buffer_free(dy);
  dpt_buffer_free(v);
  dpt_buffer_free(y);
  dpt_buffer_free(o);
}
END_TEST

START_TEST(avgpool_dropout_bad) {
  dpt_buffer *x = tu_f32_fill(be, 16, 1.0f), *y = tu_f32_fill(be, 4, 8.0f);
  const dpt_pool_geom pok = {1, 4, 4, 2, 2, 2, 2}; /* y [1, 2, 2] */
  dpt_pool_geom p = pok;
  EXPECT_INVALID(dpt_avgpool_fwd(NULL, &pok, x, 0, y, 0), "backend");
  EXPECT_INVALID(dpt_avgpool_fwd(be, NULL, x, 0, y, 0), "geometry");
  p.stride_h = 0;
  EXPECT_INVALID(dpt_avgpool_fwd(be, &p, x, 0, y, 0), "stride");
  p = pok;
  p.kw = 5;
  EXPECT_INVALID(dpt_avgpool_bwd(be, &p, y, 0, x, 0), "kernel");
  EXPECT_INVALID(dpt_avgpool_fwd(be, &pok, x, 1, y, 0), "x");
  EXPECT_INVALID(dpt_avgpool_fwd(be, &pok, NULL, 0, y, 0), "x");
  EXPECT_INVALID(dpt_avgpool_fwd(be, &pok, x, 0, y, 1), "y");
  EXPECT_INVALID(dpt_avgpool_fwd(be, &pok, x, 0, x, 12), "y");
  EXPECT_INVALID(dpt_avgpool_bwd(be, &pok, y, 1, x, 0), "dy");
  EXPECT_INVALID(dpt_avgpool_bwd(be, &pok, y, 0, x, 1), "dx");
  EXPECT_INVALID(dpt_avgpool_bwd(be, &pok, x, 0, x, 0), "dx");
  EXPECT_INVALID(dpt_avgpool_bwd(be, &pok, y, 0, NULL, 0), "dx");
  expect_all(x, 16, 1.0f, "x");
  expect_all(y, 4, 8.0f, "y");
  TU_OK(dpt_avgpool_fwd(be, &pok, x, 0, y, 0));
  expect_all(y, 4, 1.0f, "y");

  dpt_buffer *d = tu_f32_fill(be, 16, 3.0f);
  const dpt_dropout_params dp = {0.5f, 1, 2, 0};
  dpt_dropout_params bad = dp;
  EXPECT_INVALID(dpt_dropout(NULL, 4, 4, &dp, x, 0, d, 0), "backend");
  EXPECT_INVALID(dpt_dropout(be, 4, 4, NULL, x, 0, d, 0), "params");
  const float p_bad[] = {1.0f, -0.1f, 1.5f, NAN};
  for (size_t i = 0; i < sizeof p_bad / sizeof p_bad[0]; i++) {
    bad.p = p_bad[i];
    EXPECT_INVALID(dpt_dropout(be, 4, 4, &bad, x, 0, d, 0), "p");
  }
  bad = dp;
  bad.first_row = UINT32_MAX - 2; /* rows 4 would pass 2^32 */
  EXPECT_INVALID(dpt_dropout(be, 4, 4, &bad, x, 0, d, 0), "rows");
  EXPECT_INVALID(dpt_dropout(be, 1, (size_t)UINT32_MAX + 1, &dp, x, 0, d, 0), "cols");
  EXPECT_INVALID(dpt_dropout(be, 4, 4, &dp, NULL, 0, d, 0), "x");
  EXPECT_INVALID(dpt_dropout(be, 4, 4, &dp, x, 1, d, 0), "x");
  EXPECT_INVALID(dpt_dropout(be, 4, 4, &dp, x, 0, d, 1), "y");
  EXPECT_INVALID(dpt_dropout(be, 2, 4, &dp, x, 0, x, 4), "y"); /* partial overlap */
  EXPECT_INVALID(dpt_dropout(be, 4, 4, &dp, x, 0, NULL, 0), "y");
  expect_all(x, 16, 1.0f, "x");
  expect_all(d, 16, 3.0f, "y");
  /* in place (the exact same range) is allowed, as is the last row 2^32 - 1 */
  TU_OK(dpt_dropout(be, 4, 4, &dp, d, 0, d, 0));
  bad.first_row = UINT32_MAX - 4;
  TU_OK(dpt_dropout(be, 4, 4, &bad, x, 0, d, 0));
  dpt_buffer_free(x);
  dpt_buffer_free(y);
  dpt_buffer_free(d);
}
END_TEST

/* a: x [4, 4] at 0, gamma and beta [4] at 16 and 20, mean and rstd [4] at 24 and 28; y: an
 * output [4, 4]; s: mean and rstd outputs; o: a buffer of another backend. */
START_TEST(layernorm_gelu_bad) {
  dpt_buffer *a = tu_f32_fill(be, 32, 1.0f), *y = tu_f32_fill(be, 16, 5.0f);
  dpt_buffer *o = tu_f32_fill(be2, 32, 1.0f), *s = tu_f32_fill(be, 8, 6.0f);
  const dpt_ln_geom g = {4, 4, 1e-5f};
  dpt_ln_geom bad = g;
  EXPECT_INVALID(dpt_layernorm_fwd(be, NULL, a, 0, a, 16, a, 20, y, 0, s, 0, s, 4), "geometry");
  bad.rows = 0;
  EXPECT_INVALID(dpt_layernorm_fwd(be, &bad, a, 0, a, 16, a, 20, y, 0, s, 0, s, 4), "rows");
  const float eps_bad[] = {0.0f, -1e-5f, NAN, INFINITY};
  for (size_t i = 0; i < sizeof eps_bad / sizeof eps_bad[0]; i++) {
    bad = g;
    bad.eps = eps_bad[i];
    EXPECT_INVALID(dpt_layernorm_fwd(be, &bad, a, 0, a, 16, a, 20, y, 0, s, 0, s, 4), "eps");
  }
  bad = g;
  bad.rows = SIZE_MAX / 2;
  EXPECT_INVALID(dpt_layernorm_fwd(be, &bad, a, 0, a, 16, a, 20, y, 0, s, 0, s, 4), "x");
  EXPECT_INVALID(dpt_layernorm_fwd(be, &g, a, 20, a, 16, a, 20, y, 0, s, 0, s, 4), "x");
  EXPECT_INVALID(dpt_layernorm_fwd(be, &g, a, 0, a, 30, a, 20, y, 0, s, 0, s, 4), "gamma");
  EXPECT_INVALID(dpt_layernorm_fwd(be, &g, a, 0, a, 16, NULL, 20, y, 0, s, 0, s, 4), "beta");
  EXPECT_INVALID(dpt_layernorm_fwd(be, &g, a, 0, a, 16, a, 20, y, 1, s, 0, s, 4), "y");
  EXPECT_INVALID(dpt_layernorm_fwd(be, &g, a, 0, a, 16, a, 20, a, 0, s, 0, s, 4), "y");
  EXPECT_INVALID(dpt_layernorm_fwd(be, &g, a, 0, a, 16, a, 20, y, 0, s, 0, s, 2), "rstd");
  EXPECT_INVALID(dpt_layernorm_fwd(be, &g, a, 0, a, 16, a, 20, y, 0, y, 12, s, 4), "mean");
  EXPECT_INVALID(dpt_layernorm_fwd(be, &g, a, 0, a, 16, a, 20, y, 0, s, 0, o, 0), "rstd");
  EXPECT_INVALID(dpt_layernorm_bwd(be, &g, a, 20, a, 0, a, 24, a, 28, a, 16, y, 0), "dy");
  EXPECT_INVALID(dpt_layernorm_bwd(be, &g, y, 0, a, 0, a, 24, a, 29, a, 16, o, 0), "rstd");
  EXPECT_INVALID(dpt_layernorm_bwd(be, &g, y, 0, a, 0, a, 24, a, 28, a, 16, a, 16), "dx");
  EXPECT_INVALID(dpt_layernorm_bwd(be, &g, y, 0, a, 0, a, 24, a, 28, a, 16, y, 0), "dx");
  EXPECT_INVALID(dpt_layernorm_bwd_params(be, &g, y, 0, a, 0, a, 24, a, 28, s, 0, s, 2), "dbeta");
  EXPECT_INVALID(dpt_layernorm_bwd_params(be, &g, y, 0, a, 0, a, 24, a, 28, a, 12, s, 4), "dgamma");
  EXPECT_INVALID(dpt_layernorm_bwd_params(be, &g, y, 0, a, 0, a, 24, a, 28, s, 0, s, 6), "dbeta");
  expect_all(y, 16, 5.0f, "y");
  expect_all(s, 8, 6.0f, "mean and rstd");
  TU_OK(dpt_layernorm_fwd(be, &g, a, 0, a, 16, a, 20, y, 0, s, 0, s, 4));
  expect_all(y, 16, 1.0f, "y"); /* constant rows: xhat 0, y = beta */

  EXPECT_INVALID(dpt_gelu_fwd(be, 4, (dpt_gelu_approx)2, a, 0, y, 0), "approx");
  EXPECT_INVALID(dpt_gelu_fwd(be, 4, DPT_GELU_ERF, a, 30, y, 0), "x");
  EXPECT_INVALID(dpt_gelu_fwd(be, 17, DPT_GELU_ERF, a, 0, y, 0), "y");
  EXPECT_INVALID(dpt_gelu_fwd(be, 4, DPT_GELU_ERF, a, 0, a, 2), "y"); /* partial overlap */
  EXPECT_INVALID(dpt_gelu_bwd(be, 4, (dpt_gelu_approx)-1, a, 0, a, 4, y, 0), "approx");
  EXPECT_INVALID(dpt_gelu_bwd(be, 4, DPT_GELU_TANH, a, 0, NULL, 4, y, 0), "dy");
  EXPECT_INVALID(dpt_gelu_bwd(be, 4, DPT_GELU_TANH, a, 0, a, 4, y, 13), "dx");
  EXPECT_INVALID(dpt_gelu_bwd(be, 4, DPT_GELU_TANH, a, 0, a, 4, a, 0), "dx"); /* dx is x */
  TU_OK(dpt_gelu_fwd(be, 4, DPT_GELU_ERF, y, 0, y, 0));                       /* in place */
  TU_OK(dpt_gelu_bwd(be, 4, DPT_GELU_TANH, a, 0, y, 0, y, 0));
  dpt_buffer_free(a);
  dpt_buffer_free(y);
  dpt_buffer_free(o);
  dpt_buffer_free(s);
}
END_TEST

static Suite *api_suite(void) {
  Suite *s = suite_create("api");
  TCase *st = tcase_create("status");
  tcase_add_test(st, status_strings);
  tcase_add_test(st, last_error_is_per_thread);
  suite_add_tcase(s, st);

  TCase *names = tcase_create("names");
  tcase_add_test(names, op_names);
  tcase_add_test(names, backend_kinds);
  tcase_add_test(names, model_and_optim_kinds);
  tcase_add_test(names, devices_and_backends);
  suite_add_tcase(s, names);

  TCase *mem = tcase_create("bad_input");
  tcase_add_checked_fixture(mem, setup, teardown);
  tcase_add_test(mem, buffer_alloc_bad);
  tcase_add_test(mem, transfers_bad);
  tcase_add_test(mem, ops_null_backend);
  tcase_add_test(mem, gemm_bad);
  tcase_add_test(mem, elementwise_bad);
  tcase_add_test(mem, softmax_embed_bad);
  tcase_add_test(mem, geometry_bad);
  tcase_add_test(mem, optimizers_and_f16_bad);
  tcase_add_test(mem, layer_ops_bad);
  tcase_add_test(mem, bn_bad);
  tcase_add_test(mem, avgpool_dropout_bad);
  tcase_add_test(mem, layernorm_gelu_bad);
  suite_add_tcase(s, mem);
  return s;
}

int main(void) {
  return tu_run(api_suite());
}
