/* A private temporary directory per test, for the suites that write files: tu_tmp_make in the
 * fixture's setup, tu_tmp_remove (the directory and everything in it) in its teardown. Header-
 * only, as test_util.h; the including file defines _XOPEN_SOURCE 700 (mkdtemp, nftw). */
#ifndef DPT_TESTS_TMP_DIR_H
#define DPT_TESTS_TMP_DIR_H

#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char tmp_dir[256];

/* $TMPDIR (or /tmp)/dpt_test_<tag>_XXXXXX, made. */
static inline void tu_tmp_make(const char *tag) {
  const char *base = getenv("TMPDIR");
  snprintf(tmp_dir, sizeof tmp_dir, "%s/dpt_test_%s_XXXXXX", base && *base ? base : "/tmp", tag);
  ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
}

static inline int tu_tmp_rm_entry(const char *path, const struct stat *sb, int flag,
                                  struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

static inline void tu_tmp_remove(void) {
  ck_assert_int_eq(nftw(tmp_dir, tu_tmp_rm_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
}

/* tmp_dir/name, in one of 4 rotating buffers. */
static inline const char *tpath(const char *name) {
  static char buf[4][512];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, 512, "%s/%s", tmp_dir, name);
  return p;
}

/* Writes text (no terminating NUL) to path, replacing it. */
static inline void tu_write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(text, 1, strlen(text), f), strlen(text));
  ck_assert_int_eq(fclose(f), 0);
}

#endif
