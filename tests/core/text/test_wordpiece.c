/* BERT's WordPiece tokenizer against the rules of google-research/bert tokenization.py: known
 * strings (punctuation split, lowercase and accents, CJK, control characters, the 100-character
 * limit, greedy longest-match-first pieces), the vocabulary file (special tokens by name, bad
 * files named by line), the tokenizer chosen by the file's format, and sequences and masking
 * with WordPiece's special ids. */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */

#include <check.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/advanced.h"
#include "test_util.h"
#include "tmp_dir.h"

/* A small uncased vocabulary laid out as bert-base-uncased's: [PAD] 0, [unused0] 1, [UNK],
 * [CLS], [SEP], [MASK] after it, then the words and pieces. */
static const char *const uncased_tokens[] = {
    "[PAD]", "[unused0]", "[UNK]",  "[CLS]", "[SEP]", "[MASK]", "hello", "world", ",",     "!",
    "un",    "##aff",     "##able", "a",     "##b",   "##c",    "abc",   "ab",    "the",   "cafe",
    "中",    "国",        "人",     "-",     "'",     "s",      "x",     "##x",   "naive", "."};

static dpt_wordpiece *uncased(void) {
  dpt_wordpiece *wp = NULL;
  TU_OK(dpt_wordpiece_from_tokens(uncased_tokens, sizeof uncased_tokens / sizeof *uncased_tokens,
                                  "test", &wp));
  ck_assert_int_eq(dpt_wordpiece_lowercase(wp), 1);
  return wp;
}

/* The pieces of text, joined by spaces. */
static void expect_pieces(dpt_wordpiece *wp, const char *text, const char *want) {
  const int32_t *ids;
  size_t n;
  TU_OK(dpt_wordpiece_encode(wp, text, strlen(text), &ids, &n));
  char got[1024] = "";
  size_t len = 0;
  for (size_t i = 0; i < n; i++) {
    const char *b;
    size_t bl;
    TU_OK(dpt_wordpiece_token(wp, ids[i], &b, &bl));
    len += (size_t)snprintf(got + len, sizeof got - len, "%s%.*s", i ? " " : "", (int)bl, b);
  }
  ck_assert_msg(strcmp(got, want) == 0, "\"%s\" -> \"%s\", want \"%s\"", text, got, want);
}

START_TEST(basic_rules) {
  dpt_wordpiece *wp = uncased();
  expect_pieces(wp, "Hello, World!", "hello , world !");
  expect_pieces(wp, "H\xc3\xa9llo", "hello");                  /* é: NFD, the accent dropped */
  expect_pieces(wp, "CAF\xc3\x89 na\xc3\xafve", "cafe naive"); /* É, ï */
  expect_pieces(wp, "unaffable", "un ##aff ##able");
  expect_pieces(wp, "\xe4\xb8\xad\xe5\x9b\xbd\xe4\xba\xba", "中 国 人"); /* CJK split */
  expect_pieces(wp,
                "a\xe4\xb8\xad"
                "b",
                "a 中 [UNK]"); /* "b" alone is no token */
  /* Control characters, NUL and U+FFFD dropped (joining what was around them); tab, line
   * breaks and U+00A0 / U+3000 split words. */
  expect_pieces(wp, "he\x01llo\x7f wor\xef\xbf\xbdld", "hello world");
  const char nul[] = "a\0bc";
  const int32_t *ids;
  size_t n;
  TU_OK(dpt_wordpiece_encode(wp, nul, sizeof nul - 1, &ids, &n));
  ck_assert_uint_eq(n, 1);
  ck_assert_int_eq(ids[0], dpt_wordpiece_id(wp, "abc"));
  expect_pieces(wp, "hello\tworld\n\r\xc2\xa0the\xe3\x80\x80!", "hello world the !");
  expect_pieces(wp, "he\xe2\x80\x8bllo", "hello"); /* U+200B (Cf) dropped */
  /* Punctuation: ASCII non-alphanumerics and Unicode P*, each alone. */
  expect_pieces(wp, "the-world's", "the - world ' s");
  expect_pieces(wp, "x\xe2\x80\x94x", "x [UNK] x"); /* U+2014 (Pd) alone, not in the vocab */
  expect_pieces(wp, "$", "[UNK]");                  /* 36: punctuation by the ASCII rule */
  /* Greedy longest match first: "abc" whole; "abcb" -> abc ##b; "abx" -> ab ##x. */
  expect_pieces(wp, "abc abcb abx", "abc abc ##b ab ##x");
  expect_pieces(wp, "abz", "[UNK]"); /* a position without a piece: the whole word */
  /* 100 characters are pieces, 101 are [UNK]. */
  char w[102];
  memset(w, 'x', sizeof w);
  w[100] = '\0';
  const int32_t *ids100;
  TU_OK(dpt_wordpiece_encode(wp, w, 100, &ids100, &n));
  ck_assert_uint_eq(n, 100);
  w[100] = 'x';
  w[101] = '\0';
  expect_pieces(wp, w, "[UNK]");
  expect_pieces(wp, "", "");
  expect_pieces(wp, " \t\n", "");
  dpt_wordpiece_destroy(wp);
}
END_TEST

START_TEST(cased_vocabulary) {
  /* A token with an uppercase letter makes the vocabulary cased: no lowercasing, accents kept. */
  static const char *const tokens[] = {"[PAD]", "[UNK]", "[CLS]",     "[SEP]", "[MASK]",
                                       "Hello", "hello", "H\xc3\xa9", "##llo"};
  dpt_wordpiece *wp = NULL;
  TU_OK(dpt_wordpiece_from_tokens(tokens, 9, "cased", &wp));
  ck_assert_int_eq(dpt_wordpiece_lowercase(wp), 0);
  expect_pieces(wp, "Hello hello H\xc3\xa9llo HELLO", "Hello hello H\xc3\xa9 ##llo [UNK]");
  dpt_text_specials sp;
  dpt_wordpiece_specials(wp, &sp);
  ck_assert_int_eq(sp.pad, 0);
  ck_assert_int_eq(sp.unk, 1);
  ck_assert_int_eq(sp.cls, 2);
  ck_assert_int_eq(sp.sep, 3);
  ck_assert_int_eq(sp.mask, 4);
  dpt_wordpiece_destroy(wp);
}
END_TEST

static void setup(void) {
  tu_tmp_make("wordpiece");
}

static void teardown(void) {
  tu_tmp_remove();
}

START_TEST(vocabulary_file) {
  /* Read, with "\r\n" too; the specials by name; saved and read back to the same fingerprint;
   * chosen by format. */
  tu_write_text(tpath("vocab.txt"),
                "[PAD]\r\n[unused0]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n##s\n");
  dpt_wordpiece *wp = NULL;
  TU_OK(dpt_wordpiece_load(tpath("vocab.txt"), &wp));
  ck_assert_uint_eq(dpt_wordpiece_vocab_size(wp), 8);
  ck_assert_int_eq(dpt_wordpiece_id(wp, "##s"), 7);
  ck_assert_int_eq(dpt_wordpiece_id(wp, "nope"), -1);
  dpt_text_specials sp;
  dpt_wordpiece_specials(wp, &sp);
  ck_assert_int_eq(sp.unk, 2);
  ck_assert_int_eq(sp.mask, 5);
  TU_OK(dpt_wordpiece_save(wp, tpath("copy.txt")));
  dpt_tokenizer *tok = NULL;
  TU_OK(dpt_tokenizer_load(tpath("copy.txt"), &tok));
  ck_assert_ptr_nonnull(dpt_tokenizer_wordpiece(tok));
  ck_assert_ptr_null(dpt_tokenizer_bpe(tok));
  ck_assert_uint_eq(dpt_tokenizer_fingerprint(tok), dpt_wordpiece_fingerprint(wp));
  const int32_t *ids;
  size_t n;
  TU_OK(dpt_tokenizer_encode(tok, "Hellos", 6, &ids, &n));
  ck_assert_uint_eq(n, 2);
  ck_assert_int_eq(ids[0], 6);
  ck_assert_int_eq(ids[1], 7);
  dpt_tokenizer_destroy(tok);
  dpt_wordpiece_destroy(wp);
  /* Bad files: named with the line. */
  static const struct {
    const char *text, *n1, *n2;
  } bad[] = {
      {"[PAD]\n[UNK]\n\n[CLS]\n", "line 3", "empty token"},
      {"[PAD]\n[UNK]\n[PAD]\n", "line 3", "repeats"},
      {"[PAD]\n[UNK]\n\xff\n", "line 3", "not UTF-8"},
      {"[PAD]\n[UNK]\n[CLS]\n[SEP]\n", "no [MASK]", NULL},
      {"[UNK]\n[PAD]\n[CLS]\n[SEP]\n[MASK]\n", "[PAD] is token 1", NULL},
      {"", "no tokens", NULL},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tu_write_text(tpath("bad.txt"), bad[i].text);
    wp = (dpt_wordpiece *)1;
    EXPECT_FAIL(dpt_wordpiece_load(tpath("bad.txt"), &wp), DPT_ERR_BAD_FORMAT, tpath("bad.txt"),
                bad[i].n1, bad[i].n2);
    ck_assert_ptr_null(wp);
  }
  EXPECT_FAIL(dpt_tokenizer_load(tpath("missing.txt"), &tok), DPT_ERR_IO, "missing.txt",
              "cannot open", NULL);
  /* A JSON file goes to the BPE reader (and fails there as BPE). */
  tu_write_text(tpath("v.json"), "  {\"format\": \"other\"}");
  EXPECT_FAIL(dpt_tokenizer_load(tpath("v.json"), &tok), DPT_ERR_BAD_FORMAT, "v.json", NULL, NULL);
}
END_TEST

START_TEST(sequences_and_masking) {
  /* Sequences framed with WordPiece's [CLS] 3, [SEP] 4, [PAD] 0; masking never chooses them and
   * draws replacements outside them. */
  dpt_wordpiece *wp = uncased();
  TU_OK(dpt_wordpiece_save(wp, tpath("v.txt")));
  dpt_wordpiece_destroy(wp);
  dpt_tokenizer *tok = NULL;
  TU_OK(dpt_tokenizer_load(tpath("v.txt"), &tok));
  static const char text[] = "Hello, world! the cafe\n%\nunaffable abc\n%\nhello world\n";
  dpt_text_corpus *c = NULL;
  TU_OK(dpt_text_corpus_from_memory(text, sizeof text - 1, &c));
  dpt_text_sequences *s = NULL;
  TU_OK(dpt_text_sequences_build_with(c, tok, 8, 0, &s));
  /* hello , world ! the cafe [SEP] un ##aff ##able abc [SEP] hello world [SEP]: 15 tokens,
   * pieces of 6. */
  ck_assert_uint_eq(dpt_text_sequences_count(s, DPT_TEXT_TRAIN), 3);
  ck_assert_uint_eq(dpt_text_sequences_tokens(s, DPT_TEXT_TRAIN), 12);
  const int32_t want0[8] = {3, 6, 8, 7, 9, 18, 19, 4};
  const int32_t want2[8] = {3, 6, 7, 4, 4, 0, 0, 0};
  ck_assert_mem_eq(dpt_text_sequence(s, DPT_TEXT_TRAIN, 0), want0, sizeof want0);
  ck_assert_mem_eq(dpt_text_sequence(s, DPT_TEXT_TRAIN, 2), want2, sizeof want2);
  dpt_text_specials sp;
  dpt_text_sequences_specials(s, &sp);
  ck_assert_int_eq(sp.cls, 3);
  const size_t V = dpt_tokenizer_vocab_size(tok), L = 512;
  int32_t ids[512], in[512], lab[512];
  size_t chosen = 0, random = 0;
  for (size_t i = 0; i < L; i++)
    ids[i] = (int32_t)(i % V);
  for (uint64_t seq = 0; seq < 20; seq++) {
    TU_OK(dpt_mlm_mask_specials(7, 0, seq, ids, L, V, &sp, in, lab));
    for (size_t i = 0; i < L; i++) {
      const int special = ids[i] == 0 || ids[i] == 3 || ids[i] == 4 || ids[i] == 5;
      if (special) {
        ck_assert_int_eq(lab[i], DPT_MLM_IGNORE);
        ck_assert_int_eq(in[i], ids[i]);
      }
      if (lab[i] == DPT_MLM_IGNORE) continue;
      chosen++;
      ck_assert_int_eq(lab[i], ids[i]);
      if (in[i] != 5 && in[i] != ids[i]) {
        random++;
        ck_assert_msg(in[i] != 0 && in[i] != 3 && in[i] != 4 && in[i] >= 0 && (size_t)in[i] < V,
                      "random replacement %d is special or outside", in[i]);
      }
    }
  }
  ck_assert_msg(chosen > 1000 && random > 50, "chosen %zu, random %zu", chosen, random);
  const dpt_text_specials dup = {0, 2, 3, 3, 5};
  EXPECT_FAIL(dpt_mlm_mask_specials(7, 0, 0, ids, L, V, &dup, in, lab), DPT_ERR_INVALID_ARG,
              "repeats", NULL, NULL);
  /* BPE's specials give dpt_mlm_mask's draws exactly. */
  const dpt_text_specials bpe = {0, -1, 1, 2, 3};
  int32_t in2[512], lab2[512];
  TU_OK(dpt_mlm_mask(9, 1, 2, ids, L, V, in, lab));
  TU_OK(dpt_mlm_mask_specials(9, 1, 2, ids, L, V, &bpe, in2, lab2));
  ck_assert_mem_eq(in, in2, sizeof in);
  ck_assert_mem_eq(lab, lab2, sizeof lab);
  dpt_text_sequences_destroy(s);
  dpt_text_corpus_destroy(c);
  dpt_tokenizer_destroy(tok);
}
END_TEST

int main(void) {
  Suite *s = suite_create("wordpiece");
  TCase *tc = tcase_create("rules");
  tcase_add_test(tc, basic_rules);
  tcase_add_test(tc, cased_vocabulary);
  suite_add_tcase(s, tc);
  tc = tcase_create("files");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, vocabulary_file);
  tcase_add_test(tc, sequences_and_masking);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
