/* Text for MLM pretraining: the pre-tokenizer's words, BPE training against known merges and
 * against a plain recount-every-step trainer, encode/decode round trips on any bytes, the
 * vocabulary file (round trip, every malformed file named), corpora from files and
 * directories, sequences and their split, and the masking's statistics and keys. */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw, symlink */

#include <check.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/text/bpe_impl.h"
#include "dptrain/advanced.h"
#include "test_util.h"
#include "tmp_dir.h"
#include "tools/prep/vocab.h"

#define FORTUNES_DIR "/usr/share/games/fortunes"
#define BYTE(c)      (DPT_TOKEN_BYTE0 + (int32_t)(unsigned char)(c))

static void setup(void) {
  tu_tmp_make("text");
}

static void teardown(void) {
  tu_tmp_remove();
}

static dpt_text_corpus *corpus_of(const char *text) {
  dpt_text_corpus *c = NULL;
  TU_OK(dpt_text_corpus_from_memory(text, strlen(text), &c));
  return c;
}

static dpt_bpe *train_on(const char *text, size_t vocab) {
  dpt_text_corpus *c = corpus_of(text);
  dpt_bpe *b = NULL;
  TU_OK(dpt_bpe_train(c, vocab, &b));
  dpt_text_corpus_destroy(c);
  return b;
}

static void expect_merges(const dpt_bpe *b, const int32_t (*want)[2], size_t n) {
  ck_assert_uint_eq(dpt_bpe_vocab_size(b), DPT_TOKEN_FIRST_MERGE + n);
  for (size_t r = 0; r < n; r++) {
    int32_t l, rt;
    TU_OK(dpt_bpe_merge(b, r, &l, &rt));
    ck_assert_msg(l == want[r][0] && rt == want[r][1], "merge %zu is [%d, %d], want [%d, %d]", r,
                  (int)l, (int)rt, (int)want[r][0], (int)want[r][1]);
  }
}

/* A vocabulary's merges as one array, for comparing two vocabularies. */
static int32_t *merges_of(const dpt_bpe *b) {
  const size_t n = dpt_bpe_vocab_size(b) - DPT_TOKEN_FIRST_MERGE;
  int32_t *m = malloc((2 * n + 1) * sizeof *m);
  for (size_t r = 0; r < n; r++)
    TU_OK(dpt_bpe_merge(b, r, &m[2 * r], &m[2 * r + 1]));
  return m;
}

/* ---- words ----------------------------------------------------------------------------------- */

/* The words of text joined with '|'. */
static void words_of(const char *text, char *out) {
  const size_t n = strlen(text);
  for (size_t i = 0; i < n;) {
    const size_t w = dpt_bpe_word_len((const uint8_t *)text + i, n - i);
    ck_assert_uint_gt(w, 0);
    if (i) *out++ = '|';
    memcpy(out, text + i, w);
    out += w;
    i += w;
  }
  *out = '\0';
}

START_TEST(pretokenizer_words) {
  char got[512];
  words_of("Hello,  world!\n-- A. N. Other 42x", got);
  ck_assert_str_eq(got, "Hello|,| | world|!|\n|-|-| A|.| N|.| Other| 42x");
  words_of("   indented\ttab  ", got);
  ck_assert_str_eq(got, "  | indented|\t|tab|  ");
  words_of("na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac \xff\xfe", got); /* UTF-8 and stray bytes */
  ck_assert_str_eq(got, "na\xc3\xafve| \xe6\x97\xa5\xe6\x9c\xac| \xff\xfe");
  char long_run[200];
  memset(long_run, 'a', 150);
  long_run[0] = ' ';
  long_run[150] = '\0';
  words_of(long_run, got); /* cut into pieces of DPT_BPE_MAX_WORD bytes */
  ck_assert_uint_eq(strcspn(got, "|"), DPT_BPE_MAX_WORD);
  ck_assert_uint_eq(strcspn(got + 65, "|"), DPT_BPE_MAX_WORD);
  ck_assert_uint_eq(strlen(got + 130), 150 - 2 * DPT_BPE_MAX_WORD);
}
END_TEST

/* ---- training -------------------------------------------------------------------------------- */

START_TEST(train_known_merges) {
  /* Words "ab" 1, " ab" 2, " abc" 1: (a, b) occurs 4 times, then (' ', ab) 3 times; what is
   * left occurs once, so training stops at 262 tokens although 300 were asked for. */
  dpt_bpe *b = train_on("ab ab ab abc", 300);
  const int32_t want[][2] = {{BYTE('a'), BYTE('b')}, {BYTE(' '), 260}};
  expect_merges(b, want, 2);
  int32_t ids[16];
  size_t n;
  TU_OK(dpt_bpe_encode(b, "ab abc", 6, ids, &n));
  ck_assert_uint_eq(n, 3);
  ck_assert(ids[0] == 260 && ids[1] == 261 && ids[2] == BYTE('c'));
  dpt_bpe_destroy(b);
  /* Ties go to the lowest (left, right): (' ', c), (a, b) and (c, d) all occur twice. */
  b = train_on("ab cd ab cd", 300);
  const int32_t tie[][2] = {{BYTE(' '), BYTE('c')}, {BYTE('a'), BYTE('b')}, {260, BYTE('d')}};
  expect_merges(b, tie, 3);
  dpt_bpe_destroy(b);
  /* A vocabulary size caps the merges: 261 tokens is one merge. */
  b = train_on("ab cd ab cd", 261);
  expect_merges(b, tie, 1);
  dpt_bpe_destroy(b);
}
END_TEST

/* Overlapping pairs merge left to right: "aaaaa" (once, and twice with a space) becomes
 * X X a after (a, a) -> X; then (X, a) wins its tie with (X, X) by the lower right id. */
START_TEST(train_overlapping_pairs) {
  dpt_bpe *b = train_on("aaaaa aaaaa aaaaa", 300);
  const int32_t want[][2] = {
      {BYTE('a'), BYTE('a')}, {260, BYTE('a')}, {260, 261}, {BYTE(' '), 262}};
  expect_merges(b, want, 4);
  int32_t ids[8];
  size_t n;
  TU_OK(dpt_bpe_encode(b, "aaaaa", 5, ids, &n));
  ck_assert_uint_eq(n, 1);
  ck_assert_int_eq(ids[0], 262);
  TU_OK(dpt_bpe_encode(b, "aaaa", 4, ids, &n)); /* (X, X) is no merge */
  ck_assert_uint_eq(n, 2);
  ck_assert(ids[0] == 260 && ids[1] == 260);
  dpt_bpe_destroy(b);
}
END_TEST

/* A corpus of random words over a small alphabet (many repeats and overlapping pairs), with
 * spaces, punctuation and line breaks. */
static char *random_text(uint64_t seed, size_t len) {
  static const char letters[] = "aaabbcdeA", others[] = " ., \n";
  tu_rng r = {seed};
  char *t = malloc(len + 1);
  for (size_t i = 0; i < len;) {
    const size_t w = 1 + (size_t)(tu_unit(&r) * 8);
    for (size_t k = 0; k < w && i < len; k++)
      t[i++] = letters[(size_t)(tu_unit(&r) * (sizeof letters - 1))];
    if (i < len) t[i++] = others[(size_t)(tu_unit(&r) * (sizeof others - 1))];
  }
  t[len] = '\0';
  return t;
}

#define NAIVE_VOCAB 700

typedef struct naive_word {
  int32_t sym[DPT_BPE_MAX_WORD];
  size_t len;
  long count;
} naive_word;

/* The distinct words of text, with their counts, as byte tokens. */
static naive_word *naive_words(const char *text, size_t *nw) {
  const size_t n = strlen(text);
  naive_word *w = calloc(n + 1, sizeof *w);
  *nw = 0;
  for (size_t i = 0; i < n;) {
    const size_t len = dpt_bpe_word_len((const uint8_t *)text + i, n - i);
    naive_word cur = {.len = len, .count = 1};
    for (size_t k = 0; k < len; k++)
      cur.sym[k] = BYTE(text[i + k]);
    size_t j = 0;
    while (j < *nw && !(w[j].len == len && !memcmp(w[j].sym, cur.sym, len * sizeof *cur.sym)))
      j++;
    if (j < *nw)
      w[j].count++;
    else
      w[(*nw)++] = cur;
    i += len;
  }
  return w;
}

/* BPE as its definition reads: every pair recounted before every merge. */
static size_t naive_train(const char *text, size_t vocab, int32_t *merges) {
  static long counts[NAIVE_VOCAB][NAIVE_VOCAB];
  size_t nw, made = 0;
  naive_word *w = naive_words(text, &nw);
  for (; DPT_TOKEN_FIRST_MERGE + made < vocab; made++) {
    memset(counts, 0, sizeof counts);
    for (size_t j = 0; j < nw; j++)
      for (size_t k = 0; k + 1 < w[j].len; k++)
        counts[w[j].sym[k]][w[j].sym[k + 1]] += w[j].count;
    long best = 1;
    int32_t bl = -1, br = -1;
    for (int32_t l = 0; l < NAIVE_VOCAB; l++)
      for (int32_t r = 0; r < NAIVE_VOCAB; r++)
        if (counts[l][r] > best) best = counts[l][r], bl = l, br = r;
    if (bl < 0) break;
    merges[2 * made] = bl;
    merges[2 * made + 1] = br;
    for (size_t j = 0; j < nw; j++) {
      size_t o = 0;
      for (size_t k = 0; k < w[j].len; k++) {
        const int joined = k + 1 < w[j].len && w[j].sym[k] == bl && w[j].sym[k + 1] == br;
        w[j].sym[o++] = joined ? (int32_t)(DPT_TOKEN_FIRST_MERGE + made) : w[j].sym[k];
        k += joined;
      }
      w[j].len = o;
    }
  }
  free(w);
  return made;
}

/* The incremental trainer learns exactly the merges of the plain one, through several
 * corpora, including one that runs out of pairs before the vocabulary is full. */
START_TEST(train_matches_naive) {
  const size_t sizes[][2] = {{20000, NAIVE_VOCAB}, {3000, NAIVE_VOCAB}, {40000, 300}};
  for (size_t c = 0; c < 3; c++) {
    char *text = random_text(11 + c, sizes[c][0]);
    int32_t want[2 * NAIVE_VOCAB];
    const size_t n = naive_train(text, sizes[c][1], want);
    ck_assert_uint_gt(n, 20);
    dpt_bpe *b = train_on(text, sizes[c][1]);
    ck_assert_uint_eq(dpt_bpe_vocab_size(b), DPT_TOKEN_FIRST_MERGE + n);
    int32_t *got = merges_of(b);
    for (size_t r = 0; r < n; r++)
      ck_assert_msg(got[2 * r] == want[2 * r] && got[2 * r + 1] == want[2 * r + 1],
                    "corpus %zu merge %zu: [%d, %d], the plain trainer [%d, %d]", c, r,
                    (int)got[2 * r], (int)got[2 * r + 1], (int)want[2 * r], (int)want[2 * r + 1]);
    free(got);
    dpt_bpe_destroy(b);
    free(text);
  }
}
END_TEST

START_TEST(train_bad_arguments) {
  dpt_text_corpus *c = corpus_of("some text");
  dpt_bpe *b = (dpt_bpe *)1;
  EXPECT_FAIL(dpt_bpe_train(c, 259, &b), DPT_ERR_INVALID_ARG, "259", "[260", NULL);
  ck_assert_ptr_null(b);
  EXPECT_FAIL(dpt_bpe_train(c, DPT_BPE_MAX_VOCAB + 1, &b), DPT_ERR_INVALID_ARG, "1048577", NULL,
              NULL);
  EXPECT_FAIL(dpt_bpe_train(NULL, 300, &b), DPT_ERR_INVALID_ARG, "corpus", NULL, NULL);
  /* An empty corpus gives the bytes alone. */
  dpt_text_corpus *empty = corpus_of("");
  TU_OK(dpt_bpe_train(empty, 4096, &b));
  ck_assert_uint_eq(dpt_bpe_vocab_size(b), DPT_TOKEN_FIRST_MERGE);
  dpt_bpe_destroy(b);
  dpt_text_corpus_destroy(empty);
  dpt_text_corpus_destroy(c);
}
END_TEST

/* ---- encode and decode ----------------------------------------------------------------------- */

/* Encodes n bytes, checks every id is a text token, decodes and compares; returns the ids. */
static size_t round_trip(dpt_bpe *b, const uint8_t *bytes, size_t n, int32_t *ids) {
  size_t count, len;
  TU_OK(dpt_bpe_encode(b, bytes, n, ids, &count));
  ck_assert_uint_le(count, n);
  for (size_t i = 0; i < count; i++)
    ck_assert(ids[i] >= DPT_TOKEN_BYTE0 && (size_t)ids[i] < dpt_bpe_vocab_size(b));
  uint8_t *back = malloc(n + 1);
  TU_OK(dpt_bpe_decode(b, ids, count, NULL, 0, &len));
  ck_assert_uint_eq(len, n);
  TU_OK(dpt_bpe_decode(b, ids, count, back, n, &len));
  ck_assert_uint_eq(len, n);
  ck_assert(n == 0 || memcmp(back, bytes, n) == 0);
  free(back);
  return count;
}

START_TEST(round_trip_any_bytes) {
  char *text = random_text(5, 30000);
  dpt_bpe *b = train_on(text, 600);
  /* The training text compresses; random bytes (invalid UTF-8, NULs, high bytes) survive. */
  int32_t *ids = malloc(30000 * sizeof *ids);
  ck_assert_uint_lt(round_trip(b, (const uint8_t *)text, 30000, ids), 30000 / 2);
  tu_rng r = {99};
  uint8_t bytes[4096];
  for (int trial = 0; trial < 50; trial++) {
    const size_t n = (size_t)(tu_unit(&r) * sizeof bytes);
    for (size_t i = 0; i < n; i++)
      bytes[i] = (uint8_t)(tu_unit(&r) * 256);
    const size_t count = round_trip(b, bytes, n, ids);
    /* Encoding the decoded ids gives the same ids: the encoding is canonical. */
    int32_t again[4096];
    size_t count2;
    TU_OK(dpt_bpe_encode(b, bytes, n, again, &count2));
    ck_assert_uint_eq(count2, count);
    ck_assert(count == 0 || memcmp(again, ids, count * sizeof *ids) == 0);
  }
  round_trip(b, (const uint8_t *)"\xc3\x28\xa0\xa1\xf0\x28\x8c\xbc\x00\xff", 10, ids);
  round_trip(b, (const uint8_t *)"", 0, ids);
  free(ids);
  free(text);
  dpt_bpe_destroy(b);
}
END_TEST

START_TEST(decode_specials_and_errors) {
  dpt_bpe *b = train_on("ab ab ab abc", 300);
  const int32_t ids[] = {DPT_TOKEN_CLS, 260, DPT_TOKEN_MASK, 261, DPT_TOKEN_SEP, DPT_TOKEN_PAD};
  uint8_t out[16];
  size_t len;
  TU_OK(dpt_bpe_decode(b, ids, 6, out, sizeof out, &len)); /* special tokens give no bytes */
  ck_assert_uint_eq(len, 5);
  ck_assert_mem_eq(out, "ab ab", 5);
  EXPECT_FAIL(dpt_bpe_decode(b, ids, 6, out, 4, &len), DPT_ERR_INVALID_ARG, "5 bytes", "in 4",
              NULL);
  const int32_t bad[] = {260, 262};
  EXPECT_FAIL(dpt_bpe_decode(b, bad, 2, out, sizeof out, &len), DPT_ERR_INVALID_ARG, "ids[1] = 262",
              "[0, 262)", NULL);
  const uint8_t *tb;
  size_t tl;
  TU_OK(dpt_bpe_token_bytes(b, 261, &tb, &tl));
  ck_assert_uint_eq(tl, 3);
  ck_assert_mem_eq(tb, " ab", 3);
  TU_OK(dpt_bpe_token_bytes(b, DPT_TOKEN_MASK, &tb, &tl));
  ck_assert_uint_eq(tl, 0);
  EXPECT_FAIL(dpt_bpe_token_bytes(b, -1, &tb, &tl), DPT_ERR_INVALID_ARG, "-1", NULL, NULL);
  ck_assert_str_eq(dpt_text_special_name(DPT_TOKEN_MASK), "[MASK]");
  ck_assert_ptr_null(dpt_text_special_name(DPT_TOKEN_BYTE0));
  dpt_bpe_destroy(b);
}
END_TEST

/* ---- the vocabulary file --------------------------------------------------------------------- */

START_TEST(save_load_round_trip) {
  char *text = random_text(8, 20000);
  dpt_bpe *b = train_on(text, 500);
  TU_OK(dpt_bpe_save(b, tpath("v.json")));
  ck_assert_int_ne(access(tpath("v.json.tmp"), F_OK), 0);
  dpt_bpe *l = NULL;
  TU_OK(dpt_bpe_load(tpath("v.json"), &l));
  ck_assert_uint_eq(dpt_bpe_vocab_size(l), dpt_bpe_vocab_size(b));
  int32_t *mb = merges_of(b), *ml = merges_of(l);
  ck_assert_mem_eq(mb, ml, 2 * (dpt_bpe_vocab_size(b) - DPT_TOKEN_FIRST_MERGE) * sizeof *mb);
  int32_t *i1 = malloc(20000 * sizeof *i1), *i2 = malloc(20000 * sizeof *i2);
  size_t n1, n2;
  TU_OK(dpt_bpe_encode(b, text, 20000, i1, &n1));
  TU_OK(dpt_bpe_encode(l, text, 20000, i2, &n2));
  ck_assert_uint_eq(n1, n2);
  ck_assert_mem_eq(i1, i2, n1 * sizeof *i1);
  /* A vocabulary without merges saves and loads too. */
  dpt_bpe *bytes_only = train_on("", 300);
  TU_OK(dpt_bpe_save(bytes_only, tpath("b.json")));
  dpt_bpe_destroy(l);
  TU_OK(dpt_bpe_load(tpath("b.json"), &l));
  ck_assert_uint_eq(dpt_bpe_vocab_size(l), DPT_TOKEN_FIRST_MERGE);
  dpt_bpe_destroy(l);
  dpt_bpe_destroy(bytes_only);
  free(i1), free(i2), free(mb), free(ml), free(text);
  dpt_bpe_destroy(b);
}
END_TEST

#define HEAD(vs)                                                                                   \
  "{\"format\": \"dptrain-bpe\", \"version\": 1, \"vocab_size\": " vs ", "                         \
  "\"special_tokens\": {\"[PAD]\": 0, \"[CLS]\": 1, \"[SEP]\": 2, \"[MASK]\": 3}, "                \
  "\"byte_offset\": 4, \"max_word_bytes\": 64, "

/* Each malformed file: its status and the words its message must hold (besides the path). */
START_TEST(load_bad_files) {
  static const struct {
    const char *text, *needle;
  } cases[] = {
      {"{\"format\": ", "not JSON"},
      {"[1, 2]", "not a JSON object"},
      {"{\"format\": \"other\"}", "\"format\" is \"other\""},
      {"{\"format\": \"dptrain-bpe\", \"version\": 2}", "\"version\" is 2"},
      {HEAD("262") "\"merges\": [[101, 102], [36, 260]], \"extra\": 1}", "unknown field \"extra\""},
      {"{\"format\": \"dptrain-bpe\", \"version\": 1, \"vocab_size\": 260, \"special_tokens\": "
       "{\"[PAD]\": 0, \"[CLS]\": 2, \"[SEP]\": 1, \"[MASK]\": 3}, \"byte_offset\": 4, "
       "\"max_word_bytes\": 64, \"merges\": []}",
       "special token [CLS] must have id 1"},
      {HEAD("262") "\"merges\": [[101, 102]]}", "\"vocab_size\" is 262; this build reads 261"},
      {HEAD("262") "\"merges\": [[101, 102], [36]]}", "merge 1 is not a pair"},
      {HEAD("262") "\"merges\": [[101, 102], [36, 261]]}", "merge 1: token 261 is not a byte"},
      {HEAD("261") "\"merges\": [[2, 102]]}", "merge 0: token 2 is not a byte"},
      {HEAD("262") "\"merges\": [[101, 102], [101, 102]]}", "merge 1: the pair [101, 102]"},
      {HEAD("267") "\"merges\": [[101, 101], [260, 260], [261, 261], [262, 262], [263, 263], "
                   "[264, 264], [265, 265]]}",
       "merge 6: a token of 128 bytes"},
      {HEAD("260") "\"merges\": [], \"merges\": []}", "not JSON: duplicate object key"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tu_write_text(tpath("bad.json"), cases[i].text);
    dpt_bpe *b = (dpt_bpe *)1;
    EXPECT_FAIL(dpt_bpe_load(tpath("bad.json"), &b), DPT_ERR_BAD_FORMAT, tpath("bad.json"),
                cases[i].needle, NULL);
    ck_assert_ptr_null(b);
  }
  dpt_bpe *b;
  EXPECT_FAIL(dpt_bpe_load(tpath("missing.json"), &b), DPT_ERR_IO, "missing.json", "No such file",
              NULL);
}
END_TEST

/* ---- corpora --------------------------------------------------------------------------------- */

static void expect_document(const dpt_text_corpus *c, size_t i, const char *want) {
  const uint8_t *bytes;
  size_t len;
  TU_OK(dpt_text_corpus_document(c, i, &bytes, &len));
  ck_assert_msg(len == strlen(want) && !memcmp(bytes, want, len),
                "document %zu is \"%.*s\", want \"%s\"", i, (int)len, (const char *)bytes, want);
}

START_TEST(corpus_documents) {
  /* "%" lines (also "%\r\n", and a last one without a newline) cut; other lines holding "%"
   * do not; empty documents are dropped. */
  dpt_text_corpus *c = corpus_of("one\n%\ntwo %\n%%\n%\r\n%\nthree\n%");
  ck_assert_uint_eq(dpt_text_corpus_documents(c), 3);
  expect_document(c, 0, "one\n");
  expect_document(c, 1, "two %\n%%\n");
  expect_document(c, 2, "three\n");
  ck_assert_uint_eq(dpt_text_corpus_bytes(c), 4 + 9 + 6);
  const uint8_t *bytes;
  size_t len;
  EXPECT_FAIL(dpt_text_corpus_document(c, 3, &bytes, &len), DPT_ERR_INVALID_ARG, "3", "3 documents",
              NULL);
  dpt_text_corpus_destroy(c);
}
END_TEST

START_TEST(corpus_files_and_dirs) {
  ck_assert_int_eq(mkdir(tpath("d"), 0700), 0);
  tu_write_text(tpath("d/b"), "bee\n%\nbuzz\n");
  tu_write_text(tpath("d/a"), "ant\n");
  tu_write_text(tpath("d/a.dat"), "\x01\x02index");
  tu_write_text(tpath("d/.hidden"), "no\n");
  ck_assert_int_eq(symlink("a", tpath("d/a.u8")), 0); /* the same file: read once */
  ck_assert_int_eq(mkdir(tpath("d/sub"), 0700), 0);
  tu_write_text(tpath("d/sub/c"), "not read\n");
  tu_write_text(tpath("file"), "last");
  const char *paths[] = {tpath("d"), tpath("file"), tpath("d/b")};
  dpt_text_corpus *c = NULL;
  TU_OK(dpt_text_corpus_load(paths, 3, &c));
  ck_assert_uint_eq(dpt_text_corpus_files(c), 3); /* d/a, d/b, file; d/b again is skipped */
  ck_assert_uint_eq(dpt_text_corpus_documents(c), 4);
  expect_document(c, 0, "ant\n");
  expect_document(c, 1, "bee\n");
  expect_document(c, 2, "buzz\n");
  expect_document(c, 3, "last");
  dpt_text_corpus_destroy(c);
  ck_assert_int_eq(mkdir(tpath("empty"), 0700), 0);
  const char *bad[] = {tpath("missing"), tpath("empty")};
  c = (dpt_text_corpus *)1;
  EXPECT_FAIL(dpt_text_corpus_load(bad, 1, &c), DPT_ERR_IO, tpath("missing"), "cannot open", NULL);
  ck_assert_ptr_null(c);
  EXPECT_FAIL(dpt_text_corpus_load(bad + 1, 1, &c), DPT_ERR_INVALID_ARG, tpath("empty"),
              "no text files", NULL);
  EXPECT_FAIL(dpt_text_corpus_load(paths, 0, &c), DPT_ERR_INVALID_ARG, "no files", NULL, NULL);
}
END_TEST

START_TEST(corpus_jsonl) {
  /* One document per line's "text" (escapes decoded), blank lines skipped, other members
   * ignored, no "%" cuts; a .jsonl file in a directory is read the same way. */
  ck_assert_int_eq(mkdir(tpath("j"), 0700), 0);
  tu_write_text(tpath("j/a.jsonl"), "{\"text\": \"caf\\u00e9\\n%\\nbar\", \"id\": 1}\n\n"
                                    "  \n{\"id\": 2, \"text\": \"two\"}\n{\"text\": \"\"}");
  tu_write_text(tpath("j/b.txt"), "plain\n%\nagain\n");
  const char *paths[] = {tpath("j")};
  dpt_text_corpus *c = NULL;
  TU_OK(dpt_text_corpus_load(paths, 1, &c));
  ck_assert_uint_eq(dpt_text_corpus_documents(c), 4);
  expect_document(c, 0, "caf\xc3\xa9\n%\nbar");
  expect_document(c, 1, "two");
  expect_document(c, 2, "plain\n");
  expect_document(c, 3, "again\n");
  TU_OK(dpt_text_corpus_check_utf8(c));
  dpt_text_corpus_destroy(c);
  /* Another field by name. */
  tu_write_text(tpath("f.jsonl"), "{\"body\": \"x y\", \"text\": 3}\n");
  const char *f[] = {tpath("f.jsonl")};
  TU_OK(dpt_text_corpus_load_field(f, 1, "body", &c));
  ck_assert_uint_eq(dpt_text_corpus_documents(c), 1);
  expect_document(c, 0, "x y");
  dpt_text_corpus_destroy(c);
  /* Bad lines: an error naming file:line. */
  static const struct {
    const char *text, *field, *line, *why;
  } bad[] = {
      {"{\"text\": \"ok\"}\n{\"text\": \"cut", "text", ":2:", "not JSON"},
      {"[1, 2]\n", "text", ":1:", "not a JSON object"},
      {"\n{\"txt\": \"a\"}\n", "text", ":2:", "no \"text\" field"},
      {"{\"text\": 7}\n", "text", ":1:", "not a string"},
      {"{\"text\": \"a\", \"text\": \"b\"}\n", "text", ":1:", "duplicate"},
      {"{\"text\": \"a\\u0000b\"}\n", "text", ":1:", "not JSON"},
      {"{\"text\": \"\xff\"}\n", "text", ":1:", "not JSON"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tu_write_text(tpath("bad.jsonl"), bad[i].text);
    const char *b[] = {tpath("bad.jsonl")};
    c = (dpt_text_corpus *)1;
    EXPECT_FAIL(dpt_text_corpus_load_field(b, 1, bad[i].field, &c), DPT_ERR_BAD_FORMAT,
                tpath("bad.jsonl"), bad[i].line, bad[i].why);
    ck_assert_ptr_null(c);
  }
  EXPECT_FAIL(dpt_text_corpus_load_field(f, 1, "", &c), DPT_ERR_INVALID_ARG, "field name", NULL,
              NULL);
}
END_TEST

/* ---- sequences ------------------------------------------------------------------------------- */

/* A corpus of n numbered documents "doc <i> ..." of varying length. */
static char *numbered_docs(size_t n) {
  char *t = malloc(n * 200 + 1), *p = t;
  for (size_t i = 0; i < n; i++) {
    p += sprintf(p, "doc %zu says", i);
    for (size_t k = 0; k < i % 7; k++)
      p += sprintf(p, " more and more");
    p += sprintf(p, ".\n%%\n");
  }
  return t;
}

/* A split's sequences, checked for their frame and taken apart again: returns the decoded
 * text of the split (documents joined, [SEP]s dropped) and counts its [SEP]s. */
static char *unframe(const dpt_text_sequences *s, dpt_bpe *b, dpt_text_split split, size_t *seps) {
  const size_t L = dpt_text_sequences_len(s), n = dpt_text_sequences_count(s, split);
  int32_t *stream = malloc((n * L + 1) * sizeof *stream);
  size_t len = 0, text = 0;
  *seps = 0;
  for (size_t q = 0; q < n; q++) {
    const int32_t *seq = dpt_text_sequence(s, split, q);
    ck_assert_int_eq(seq[0], DPT_TOKEN_CLS);
    size_t end = L; /* past the closing [SEP]: the last sequence alone is padded */
    while (q + 1 == n && end > 2 && seq[end - 1] == DPT_TOKEN_PAD)
      end--;
    ck_assert_msg(q + 1 == n || seq[L - 1] == DPT_TOKEN_SEP, "sequence %zu does not end in SEP", q);
    ck_assert_int_eq(seq[end - 1], DPT_TOKEN_SEP);
    for (size_t i = 1; i + 1 < end; i++) {
      ck_assert_int_ne(seq[i], DPT_TOKEN_PAD);
      *seps += seq[i] == DPT_TOKEN_SEP;
      text += seq[i] >= DPT_TOKEN_BYTE0;
      stream[len++] = seq[i];
    }
  }
  ck_assert_uint_eq(text, dpt_text_sequences_tokens(s, split));
  size_t bytes;
  TU_OK(dpt_bpe_decode(b, stream, len, NULL, 0, &bytes));
  char *out = malloc(bytes + 1);
  TU_OK(dpt_bpe_decode(b, stream, len, (uint8_t *)out, bytes, &bytes));
  out[bytes] = '\0';
  free(stream);
  return out;
}

START_TEST(sequences_frame_and_split) {
  char *text = numbered_docs(100);
  dpt_text_corpus *c = corpus_of(text);
  dpt_bpe *b = train_on(text, 400);
  dpt_text_sequences *s = NULL;
  TU_OK(dpt_text_sequences_build(c, b, 16, 10, &s));
  ck_assert_uint_eq(dpt_text_sequences_len(s), 16);
  ck_assert_uint_eq(dpt_text_sequences_vocab(s), dpt_bpe_vocab_size(b));
  /* Documents 9, 19, ..., 99 validate; the rest train. Each split decodes to its documents. */
  char *want[2] = {calloc(1, strlen(text) + 1), calloc(1, strlen(text) + 1)};
  size_t docs[2] = {0, 0}, tokens[2] = {0, 0};
  for (size_t d = 0; d < 100; d++) {
    const uint8_t *bytes;
    size_t len, n;
    TU_OK(dpt_text_corpus_document(c, d, &bytes, &len));
    const int v = d % 10 == 9;
    strncat(want[v], (const char *)bytes, len);
    docs[v]++;
    int32_t ids[400];
    TU_OK(dpt_bpe_encode(b, bytes, len, ids, &n));
    tokens[v] += n;
  }
  for (int v = 0; v < 2; v++) {
    size_t seps;
    char *got = unframe(s, b, (dpt_text_split)v, &seps);
    ck_assert_str_eq(got, want[v]);
    ck_assert_uint_eq(seps, docs[v]); /* one [SEP] after each document... */
    ck_assert_uint_eq(dpt_text_sequences_tokens(s, (dpt_text_split)v), tokens[v]);
    /* ...and ceil((tokens + documents) / (16 - 2)) sequences. */
    ck_assert_uint_eq(dpt_text_sequences_count(s, (dpt_text_split)v),
                      (tokens[v] + docs[v] + 13) / 14);
    free(got);
    free(want[v]);
  }
  ck_assert_ptr_null(dpt_text_sequence(s, DPT_TEXT_VALIDATION, 1000));
  /* The same inputs give the same sequences. */
  dpt_text_sequences *again = NULL;
  TU_OK(dpt_text_sequences_build(c, b, 16, 10, &again));
  for (int v = 0; v < 2; v++)
    for (size_t q = 0; q < dpt_text_sequences_count(s, (dpt_text_split)v); q++)
      ck_assert_mem_eq(dpt_text_sequence(s, (dpt_text_split)v, q),
                       dpt_text_sequence(again, (dpt_text_split)v, q), 16 * sizeof(int32_t));
  dpt_text_sequences_destroy(again);
  dpt_text_sequences_destroy(s);
  dpt_bpe_destroy(b);
  dpt_text_corpus_destroy(c);
  free(text);
}
END_TEST

START_TEST(sequences_edge_cases) {
  dpt_text_corpus *c = corpus_of("tiny");
  dpt_bpe *b = train_on("", 260);
  dpt_text_sequences *s = NULL;
  /* No validation: everything trains. One short document: one padded sequence. */
  TU_OK(dpt_text_sequences_build(c, b, 12, 0, &s));
  ck_assert_uint_eq(dpt_text_sequences_count(s, DPT_TEXT_TRAIN), 1);
  ck_assert_uint_eq(dpt_text_sequences_count(s, DPT_TEXT_VALIDATION), 0);
  const int32_t want[12] = {DPT_TOKEN_CLS, BYTE('t'),     BYTE('i'),     BYTE('n'),
                            BYTE('y'),     DPT_TOKEN_SEP, DPT_TOKEN_SEP, DPT_TOKEN_PAD,
                            DPT_TOKEN_PAD, DPT_TOKEN_PAD, DPT_TOKEN_PAD, DPT_TOKEN_PAD};
  ck_assert_mem_eq(dpt_text_sequence(s, DPT_TEXT_TRAIN, 0), want, sizeof want);
  dpt_text_sequences_destroy(s);
  /* seq_len 3 holds one token per sequence: "tiny" and its [SEP] make 5. */
  TU_OK(dpt_text_sequences_build(c, b, 3, 0, &s));
  ck_assert_uint_eq(dpt_text_sequences_count(s, DPT_TEXT_TRAIN), 5);
  dpt_text_sequences_destroy(s);
  s = (dpt_text_sequences *)1;
  EXPECT_FAIL(dpt_text_sequences_build(c, b, 2, 0, &s), DPT_ERR_INVALID_ARG, "length 2",
              "at least 3", NULL);
  ck_assert_ptr_null(s);
  dpt_bpe_destroy(b);
  dpt_text_corpus_destroy(c);
}
END_TEST

/* ---- masking --------------------------------------------------------------------------------- */

#define MASK_VOCAB 1000
#define MASK_LEN   128

/* Sequence q of the statistics test: [CLS], text ids, [SEP], a few [PAD]s. */
static void stat_sequence(size_t q, int32_t *ids) {
  tu_rng r = {q + 1};
  ids[0] = DPT_TOKEN_CLS;
  for (size_t i = 1; i < MASK_LEN; i++)
    ids[i] = DPT_TOKEN_BYTE0 + (int32_t)(tu_unit(&r) * (MASK_VOCAB - DPT_TOKEN_BYTE0));
  ids[MASK_LEN - 8] = DPT_TOKEN_SEP;
  for (size_t i = MASK_LEN - 7; i < MASK_LEN; i++)
    ids[i] = DPT_TOKEN_PAD;
}

START_TEST(mask_statistics) {
  size_t text = 0, chosen = 0, masked = 0, random = 0, kept = 0;
  int32_t ids[MASK_LEN], in[MASK_LEN], lab[MASK_LEN];
  for (size_t q = 0; q < 3000; q++) {
    stat_sequence(q, ids);
    TU_OK(dpt_mlm_mask(7, 2, q, ids, MASK_LEN, MASK_VOCAB, in, lab));
    for (size_t i = 0; i < MASK_LEN; i++) {
      if (ids[i] < DPT_TOKEN_BYTE0) { /* never chosen, never changed */
        ck_assert(lab[i] == DPT_MLM_IGNORE && in[i] == ids[i]);
        continue;
      }
      text++;
      if (lab[i] == DPT_MLM_IGNORE) {
        ck_assert_int_eq(in[i], ids[i]);
        continue;
      }
      ck_assert_int_eq(lab[i], ids[i]);
      chosen++;
      ck_assert(in[i] == DPT_TOKEN_MASK || (in[i] >= DPT_TOKEN_BYTE0 && in[i] < MASK_VOCAB));
      masked += in[i] == DPT_TOKEN_MASK;
      random += in[i] != DPT_TOKEN_MASK && in[i] != ids[i];
      kept += in[i] == ids[i];
    }
  }
  /* 360000 text positions: the standard error of 0.15 is 0.0006, of 0.8 among 54000 0.0017;
   * a random token equals the original 1 time in 996. */
  const double f = (double)chosen / (double)text;
  ck_assert_msg(f > 0.147 && f < 0.153, "chosen %.4f of text positions, want 0.15", f);
  const double m = (double)masked / chosen, rnd = (double)random / chosen,
               k = (double)kept / chosen;
  ck_assert_msg(m > 0.79 && m < 0.81, "[MASK] %.4f of chosen, want 0.8", m);
  ck_assert_msg(rnd > 0.09 && rnd < 0.11, "random %.4f of chosen, want 0.1", rnd);
  ck_assert_msg(k > 0.09 && k < 0.11, "unchanged %.4f of chosen, want 0.1", k);
}
END_TEST

START_TEST(mask_keys) {
  int32_t ids[MASK_LEN], a[MASK_LEN], la[MASK_LEN], b[MASK_LEN], lb[MASK_LEN];
  stat_sequence(0, ids);
  TU_OK(dpt_mlm_mask(7, 2, 5, ids, MASK_LEN, MASK_VOCAB, a, la));
  TU_OK(dpt_mlm_mask(7, 2, 5, ids, MASK_LEN, MASK_VOCAB, b, lb));
  ck_assert_mem_eq(a, b, sizeof a); /* the same key: the same masking */
  ck_assert_mem_eq(la, lb, sizeof la);
  const uint64_t other[][3] = {{7, 3, 5}, {7, 2, 6}, {8, 2, 5}}; /* epoch, sequence, seed */
  for (int k = 0; k < 3; k++) {
    TU_OK(dpt_mlm_mask(other[k][0], other[k][1], other[k][2], ids, MASK_LEN, MASK_VOCAB, b, lb));
    ck_assert_msg(memcmp(la, lb, sizeof la) != 0, "key %d masks as (7, 2, 5)", k);
  }
  /* A position's draws do not depend on the others: a prefix masks as the whole's prefix. */
  TU_OK(dpt_mlm_mask(7, 2, 5, ids, 40, MASK_VOCAB, b, lb));
  ck_assert_mem_eq(a, b, 40 * sizeof *a);
  ck_assert_mem_eq(la, lb, 40 * sizeof *la);
  EXPECT_FAIL(dpt_mlm_mask(7, 2, 5, ids, MASK_LEN, 4, b, lb), DPT_ERR_INVALID_ARG, "size 4", NULL,
              NULL);
  ids[9] = MASK_VOCAB;
  EXPECT_FAIL(dpt_mlm_mask(7, 2, 5, ids, MASK_LEN, MASK_VOCAB, b, lb), DPT_ERR_INVALID_ARG,
              "ids[9] = 1000", "[0, 1000)", NULL);
}
END_TEST

/* Gathering masks each sequence by its index in its split, whatever batch it is in. */
START_TEST(gather_by_index) {
  char *text = numbered_docs(60);
  dpt_text_corpus *c = corpus_of(text);
  dpt_bpe *b = train_on(text, 300);
  dpt_text_sequences *s = NULL;
  TU_OK(dpt_text_sequences_build(c, b, 16, 20, &s));
  const uint64_t idx[] = {3, 0, 5, 3};
  int32_t in[4 * 16], lab[4 * 16], one[16], one_lab[16];
  TU_OK(dpt_text_sequences_gather(s, DPT_TEXT_TRAIN, idx, 4, 11, 1, in, lab));
  for (size_t i = 0; i < 4; i++) {
    TU_OK(dpt_text_sequences_gather(s, DPT_TEXT_TRAIN, idx + i, 1, 11, 1, one, one_lab));
    ck_assert_mem_eq(in + 16 * i, one, sizeof one);
    ck_assert_mem_eq(lab + 16 * i, one_lab, sizeof one_lab);
    int32_t m[16], ml[16];
    TU_OK(dpt_mlm_mask(11, 1, idx[i], dpt_text_sequence(s, DPT_TEXT_TRAIN, idx[i]), 16,
                       dpt_bpe_vocab_size(b), m, ml));
    ck_assert_mem_eq(m, one, sizeof m);
  }
  const uint64_t bad[] = {1, 999};
  memset(in, 0x55, sizeof in);
  EXPECT_FAIL(dpt_text_sequences_gather(s, DPT_TEXT_VALIDATION, bad, 2, 11, 1, in, lab),
              DPT_ERR_INVALID_ARG, "indices[1] = 999", "validation", NULL);
  ck_assert_int_eq(in[0], 0x55555555); /* nothing written */
  dpt_text_sequences_destroy(s);
  dpt_bpe_destroy(b);
  dpt_text_corpus_destroy(c);
  free(text);
}
END_TEST

/* ---- the text dataset ------------------------------------------------------------------------ */

START_TEST(text_dataset_gather) {
  char *text = numbered_docs(80);
  dpt_text_corpus *c = corpus_of(text);
  dpt_bpe *b = train_on(text, 300);
  dpt_text_sequences *s = NULL;
  TU_OK(dpt_text_sequences_build(c, b, 16, 20, &s));
  const size_t L = 16, V = dpt_bpe_vocab_size(b), n = dpt_text_sequences_count(s, DPT_TEXT_TRAIN);
  ck_assert_uint_ge(n, 12);
  dpt_dataset *tr = NULL, *va = NULL, *tr2 = NULL;
  TU_OK(dpt_dataset_from_text(s, DPT_TEXT_TRAIN, 7, &tr));
  TU_OK(dpt_dataset_from_text(s, DPT_TEXT_VALIDATION, 7, &va));
  TU_OK(dpt_dataset_from_text(s, DPT_TEXT_TRAIN, 8, &tr2));
  ck_assert_uint_eq(dpt_dataset_count(tr), n);
  ck_assert_uint_eq(dpt_dataset_count(va), dpt_text_sequences_count(s, DPT_TEXT_VALIDATION));
  ck_assert_uint_eq(dpt_dataset_dim(tr), L);
  ck_assert_uint_eq(dpt_dataset_labels_per_sample(tr), L);
  ck_assert_int_eq(dpt_dataset_num_classes(tr), (int)V);
  ck_assert_ptr_eq(dpt_dataset_text_sequences(tr), s);
  /* The fingerprint tells the split and the masking seed apart. */
  ck_assert_uint_ne(dpt_dataset_fingerprint(tr), dpt_dataset_fingerprint(va));
  ck_assert_uint_ne(dpt_dataset_fingerprint(tr), dpt_dataset_fingerprint(tr2));

  /* A batch of 12 gathered whole, and split over 1, 2 and 3 replicas as the trainer does. */
  uint64_t *perm = malloc(n * sizeof *perm);
  TU_OK(dpt_sampler_permutation(5, 2, 1, n, perm));
  const size_t B = 12;
  float x[12 * 16], xs[12 * 16];
  int32_t lab[12 * 16], labs[12 * 16];
  dpt_data_transform none;
  memset(&none, 0, sizeof none);
  TU_OK(dpt_dataset_gather_transformed(tr, perm, B, &none, 2, x, lab));
  for (size_t i = 0; i < B; i++) {
    int32_t in[16], want_lab[16];
    TU_OK(dpt_mlm_mask(7, 2, perm[i], dpt_text_sequence(s, DPT_TEXT_TRAIN, perm[i]), L, V, in,
                       want_lab));
    ck_assert_mem_eq(x + i * L, in, sizeof in); /* int32 ids in the float slots, bit for bit */
    ck_assert_mem_eq(lab + i * L, want_lab, sizeof want_lab);
  }
  for (int R = 1; R <= 3; R++) {
    memset(xs, 0, sizeof xs);
    memset(labs, 0, sizeof labs);
    for (int r = 0; r < R; r++) {
      size_t start, count;
      TU_OK(dpt_batch_split(B, R, r, &start, &count));
      TU_OK(dpt_dataset_gather_transformed(tr, perm + start, count, &none, 2, xs + start * L,
                                           labs + start * L));
    }
    ck_assert_mem_eq(xs, x, sizeof x);
    ck_assert_mem_eq(labs, lab, sizeof lab);
  }
  /* Labels alone are the same labels; another epoch masks anew. */
  TU_OK(dpt_dataset_gather_transformed(tr, perm, B, &none, 2, NULL, labs));
  ck_assert_mem_eq(labs, lab, sizeof lab);
  TU_OK(dpt_dataset_gather_transformed(tr, perm, B, &none, 3, NULL, labs));
  ck_assert_int_ne(memcmp(labs, lab, sizeof lab), 0);
  /* dpt_dataset_gather is epoch 0. */
  TU_OK(dpt_dataset_gather(tr, perm, B, xs, labs));
  TU_OK(dpt_dataset_gather_transformed(tr, perm, B, &none, 0, x, lab));
  ck_assert_mem_eq(xs, x, sizeof x);
  ck_assert_mem_eq(labs, lab, sizeof lab);

  /* The validation split is masked as in epoch 0 whatever the epoch. */
  const size_t nv = dpt_dataset_count(va);
  ck_assert_uint_ge(nv, 1);
  uint64_t vi[4] = {0, nv - 1, 0, nv - 1};
  TU_OK(dpt_dataset_gather_transformed(va, vi, 2, &none, 0, x, lab));
  TU_OK(dpt_dataset_gather_transformed(va, vi, 2, &none, 9, xs, labs));
  ck_assert_mem_eq(xs, x, 2 * L * sizeof *x);
  ck_assert_mem_eq(labs, lab, 2 * L * sizeof *lab);

  /* Transforms are for images. */
  const float mean = 0.5f, sd = 0.25f;
  dpt_data_transform norm = {.channels = 1, .mean = &mean, .std = &sd};
  EXPECT_FAIL(dpt_data_transform_check(&norm, tr), DPT_ERR_INVALID_ARG, "text dataset",
              "normalization", NULL);
  dpt_data_transform flip = {.hflip = 1};
  EXPECT_FAIL(dpt_dataset_gather_transformed(tr, perm, 1, &flip, 0, x, lab), DPT_ERR_INVALID_ARG,
              "text dataset", NULL, NULL);
  const uint64_t bad = n;
  EXPECT_FAIL(dpt_dataset_gather(tr, &bad, 1, x, lab), DPT_ERR_INVALID_ARG, "out of range", NULL,
              NULL);
  dpt_dataset *refused = NULL;
  EXPECT_FAIL(dpt_dataset_from_text(NULL, DPT_TEXT_TRAIN, 0, &refused), DPT_ERR_INVALID_ARG,
              "sequences", NULL, NULL);
  dpt_dataset_destroy(tr);
  dpt_dataset_destroy(va);
  dpt_dataset_destroy(tr2);
  dpt_text_sequences_destroy(s);
  dpt_bpe_destroy(b);
  dpt_text_corpus_destroy(c);
  free(perm);
  free(text);
}
END_TEST

START_TEST(unigram_baseline) {
  char *text = numbered_docs(200);
  dpt_text_corpus *c = corpus_of(text);
  dpt_bpe *b = train_on(text, 300);
  dpt_text_sequences *s = NULL;
  TU_OK(dpt_text_sequences_build(c, b, 32, 10, &s));
  const size_t L = 32, V = dpt_bpe_vocab_size(b);
  /* By hand: the training frequencies, the validation targets of epoch 0. */
  double *freq = calloc(V, sizeof *freq), total = 0;
  for (size_t i = 0; i < dpt_text_sequences_count(s, DPT_TEXT_TRAIN); i++) {
    const int32_t *q = dpt_text_sequence(s, DPT_TEXT_TRAIN, i);
    for (size_t p = 0; p < L; p++)
      if (q[p] >= DPT_TOKEN_BYTE0) freq[q[p]]++, total++;
  }
  double nll = 0;
  size_t n = 0;
  for (size_t i = 0; i < dpt_text_sequences_count(s, DPT_TEXT_VALIDATION); i++) {
    int32_t in[32], lab[32];
    TU_OK(dpt_mlm_mask(3, 0, i, dpt_text_sequence(s, DPT_TEXT_VALIDATION, i), L, V, in, lab));
    for (size_t p = 0; p < L; p++)
      if (lab[p] != DPT_MLM_IGNORE) nll -= log((freq[lab[p]] + 1) / (total + (double)V - 4)), n++;
  }
  ck_assert_uint_gt(n, 10);
  double loss, ppl;
  size_t targets;
  TU_OK(dpt_text_unigram_baseline(s, 3, &loss, &ppl, &targets));
  ck_assert_uint_eq(targets, n);
  ck_assert_double_eq_tol(loss, nll / (double)n, 1e-9);
  ck_assert_double_eq_tol(ppl, exp(loss), 1e-9 * ppl);
  ck_assert_double_lt(ppl, (double)V - 4); /* better than uniform */
  free(freq);
  dpt_text_sequences_destroy(s);
  dpt_bpe_destroy(b);
  dpt_text_corpus_destroy(c);
  free(text);
}
END_TEST

START_TEST(bpe_fingerprint_and_utf8) {
  char *text = numbered_docs(40);
  dpt_bpe *a = train_on(text, 300), *b = train_on(text, 300), *c = train_on(text, 270);
  ck_assert_uint_eq(dpt_bpe_fingerprint(a), dpt_bpe_fingerprint(b));
  ck_assert_uint_ne(dpt_bpe_fingerprint(a), dpt_bpe_fingerprint(c));
  ck_assert_uint_ne(dpt_bpe_fingerprint(a), 0);
  TU_OK(dpt_bpe_save(a, tpath("v.json")));
  dpt_bpe *d = NULL;
  TU_OK(dpt_bpe_load(tpath("v.json"), &d));
  ck_assert_uint_eq(dpt_bpe_fingerprint(a), dpt_bpe_fingerprint(d));
  dpt_bpe_destroy(a);
  dpt_bpe_destroy(b);
  dpt_bpe_destroy(c);
  dpt_bpe_destroy(d);
  free(text);

  size_t off = 99;
  const char *ok = "plain \xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";
  ck_assert_int_eq(dpt_utf8_valid(ok, strlen(ok), &off), 1);
  ck_assert_int_eq(dpt_utf8_valid("ab\xff", 3, &off), 0);
  ck_assert_uint_eq(off, 2);
  ck_assert_int_eq(dpt_utf8_valid("ab\xc3", 3, &off), 0); /* truncated */
  ck_assert_uint_eq(off, 2);
  ck_assert_int_eq(dpt_utf8_valid("x\xc0\xaf", 3, &off), 0); /* overlong */
  ck_assert_uint_eq(off, 1);
  ck_assert_int_eq(dpt_utf8_valid("\xed\xa0\x80", 3, &off), 0); /* a surrogate */
  ck_assert_uint_eq(off, 0);
  tu_write_text(tpath("good.txt"), "caf\xc3\xa9\n%\nmore\n");
  tu_write_text(tpath("bad.txt"), "fine line\nthen \xe9t\xe9\n");
  const char *paths[] = {tpath("good.txt"), tpath("bad.txt")};
  dpt_text_corpus *k = NULL;
  TU_OK(dpt_text_corpus_load(paths, 1, &k));
  TU_OK(dpt_text_corpus_check_utf8(k));
  dpt_text_corpus_destroy(k);
  TU_OK(dpt_text_corpus_load(paths, 2, &k));
  EXPECT_FAIL(dpt_text_corpus_check_utf8(k), DPT_ERR_BAD_FORMAT, "bad.txt", "byte offset 15",
              "0xe9");
  dpt_text_corpus_destroy(k);
}
END_TEST

/* ---- the real corpus ------------------------------------------------------------------------- */

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

START_TEST(fortunes_corpus) {
  if (access(FORTUNES_DIR "/fortunes", R_OK) != 0) {
    printf("fortunes: %s not installed, skipped\n", FORTUNES_DIR);
    return;
  }
  const char *paths[] = {FORTUNES_DIR};
  dpt_text_corpus *c = NULL;
  TU_OK(dpt_text_corpus_load(paths, 1, &c));
  ck_assert_uint_gt(dpt_text_corpus_bytes(c), 2000000);
  ck_assert_uint_gt(dpt_text_corpus_documents(c), 10000);
  const double t0 = seconds();
  dpt_bpe *b = NULL;
  TU_OK(dpt_bpe_train(c, 4096, &b));
  const double t1 = seconds();
  ck_assert_uint_eq(dpt_bpe_vocab_size(b), 4096);
  dpt_text_sequences *s = NULL;
  TU_OK(dpt_text_sequences_build(c, b, 128, 20, &s));
  const size_t tokens = dpt_text_sequences_tokens(s, DPT_TEXT_TRAIN) +
                        dpt_text_sequences_tokens(s, DPT_TEXT_VALIDATION);
  const double bpt = (double)dpt_text_corpus_bytes(c) / (double)tokens;
  printf("fortunes: %zu bytes, %zu documents, vocabulary 4096 in %.2f s, %zu tokens, %.3f bytes "
         "per token, %zu + %zu sequences of 128\n",
         dpt_text_corpus_bytes(c), dpt_text_corpus_documents(c), t1 - t0, tokens, bpt,
         dpt_text_sequences_count(s, DPT_TEXT_TRAIN),
         dpt_text_sequences_count(s, DPT_TEXT_VALIDATION));
  ck_assert_msg(bpt > 2.5, "%.3f bytes per token", bpt);
  ck_assert_msg(t1 - t0 < 30.0, "training took %.1f s", t1 - t0);
  dpt_text_sequences_destroy(s);
  dpt_bpe_destroy(b);
  dpt_text_corpus_destroy(c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("text");
  TCase *tc = tcase_create("bpe");
  tcase_add_test(tc, pretokenizer_words);
  tcase_add_test(tc, train_known_merges);
  tcase_add_test(tc, train_overlapping_pairs);
  tcase_add_test(tc, train_matches_naive);
  tcase_add_test(tc, train_bad_arguments);
  tcase_add_test(tc, round_trip_any_bytes);
  tcase_add_test(tc, decode_specials_and_errors);
  suite_add_tcase(s, tc);
  tc = tcase_create("files");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, save_load_round_trip);
  tcase_add_test(tc, load_bad_files);
  tcase_add_test(tc, corpus_files_and_dirs);
  tcase_add_test(tc, corpus_jsonl);
  suite_add_tcase(s, tc);
  tc = tcase_create("sequences");
  tcase_add_test(tc, corpus_documents);
  tcase_add_test(tc, sequences_frame_and_split);
  tcase_add_test(tc, sequences_edge_cases);
  tcase_add_test(tc, mask_statistics);
  tcase_add_test(tc, mask_keys);
  tcase_add_test(tc, gather_by_index);
  suite_add_tcase(s, tc);
  tc = tcase_create("dataset");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, text_dataset_gather);
  tcase_add_test(tc, unigram_baseline);
  tcase_add_test(tc, bpe_fingerprint_and_utf8);
  suite_add_tcase(s, tc);
  tc = tcase_create("fortunes");
  tcase_add_test(tc, fortunes_corpus);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
