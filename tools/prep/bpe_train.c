/* BPE training on the table of distinct words: each word is counted once with its frequency,
 * pair counts are kept up to date as merges rewrite the words that hold the pair (found through
 * a list of words per pair), and the next merge comes from a max-heap whose stale entries are
 * skipped when popped. The raw text is read only once, to count the words. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/text_map.h"
#include "tools/prep/vocab.h"

/* The key of the pair (left, right) in pair_ids. */
static uint64_t pair_key(int32_t left, int32_t right) {
  return (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
}

typedef struct word {
  size_t off;     /* its tokens: syms[off, + len) */
  uint32_t len;   /* shrinks as merges apply */
  uint32_t stamp; /* the last merge that visited it, plus one */
  uint64_t count; /* occurrences in the corpus */
} word;

typedef struct pair {
  int32_t left, right;
  int64_t count;    /* occurrences over all words */
  int64_t before;   /* the count when the current merge first touched it */
  uint32_t touched; /* the merge that last touched it, plus one */
  uint32_t *words;  /* words that hold (or once held) the pair, no adjacent repeats */
  size_t nwords, capwords;
} pair;

typedef struct heap_item {
  int64_t count;
  uint32_t pair;
} heap_item;

typedef struct trainer {
  word *words;
  size_t nwords, capw;
  int32_t *syms;
  size_t nsyms, caps;
  dpt_str_map word_ids; /* word bytes -> index into words */
  pair *pairs;
  size_t npairs, capp;
  dpt_u64_map pair_ids; /* pair key -> index into pairs */
  heap_item *heap;
  size_t nheap, caph;
  uint32_t *touched; /* the pairs the current merge touched */
  size_t ntouched, capt;
} trainer;

static dpt_status oom(void) {
  return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "bpe_train: out of memory");
}

/* Makes room for one more element in an array of `size`-byte elements. */
static dpt_status reserve(void **arr, size_t *cap, size_t n, size_t size) {
  if (n < *cap) return DPT_OK;
  const size_t c = *cap ? 2 * *cap : 256;
  if (c > ((size_t)-1) / size) return oom();
  void *p = realloc(*arr, c * size);
  if (!p) return oom();
  *arr = p;
  *cap = c;
  return DPT_OK;
}

static void trainer_free(trainer *t) {
  for (size_t i = 0; i < t->npairs; i++)
    free(t->pairs[i].words);
  free(t->words);
  free(t->syms);
  free(t->pairs);
  free(t->heap);
  free(t->touched);
  dpt_str_map_free(&t->word_ids);
  dpt_u64_map_free(&t->pair_ids);
}

/* One occurrence of the word w[0..n): counted, or added as its bytes' tokens. */
static dpt_status add_word(trainer *t, const uint8_t *w, size_t n) {
  const uint32_t id = dpt_str_map_get(&t->word_ids, w, n);
  if (id != DPT_MAP_NONE) {
    t->words[id].count++;
    return DPT_OK;
  }
  DPT_TRY(reserve((void **)&t->words, &t->capw, t->nwords, sizeof *t->words));
  while (t->nsyms + n > t->caps)
    DPT_TRY(reserve((void **)&t->syms, &t->caps, t->caps, sizeof *t->syms));
  for (size_t i = 0; i < n; i++)
    t->syms[t->nsyms + i] = DPT_TOKEN_BYTE0 + w[i];
  t->words[t->nwords] = (word){t->nsyms, (uint32_t)n, 0, 1};
  t->nsyms += n;
  DPT_TRY(dpt_str_map_put(&t->word_ids, w, n, (uint32_t)t->nwords));
  t->nwords++;
  return DPT_OK;
}

static dpt_status count_words(trainer *t, const dpt_text_corpus *c) {
  for (size_t d = 0; d < dpt_text_corpus_documents(c); d++) {
    const uint8_t *text;
    size_t len;
    DPT_TRY(dpt_text_corpus_document(c, d, &text, &len));
    for (size_t i = 0; i < len;) {
      const size_t n = dpt_bpe_word_len(text + i, len - i);
      DPT_TRY(add_word(t, text + i, n));
      i += n;
    }
  }
  return DPT_OK;
}

/* Heap order: the larger count first, then the lower (left, right). */
static int heap_before(const trainer *t, heap_item a, heap_item b) {
  if (a.count != b.count) return a.count > b.count;
  const pair *p = &t->pairs[a.pair], *q = &t->pairs[b.pair];
  return p->left != q->left ? p->left < q->left : p->right < q->right;
}

static dpt_status heap_push(trainer *t, heap_item it) {
  DPT_TRY(reserve((void **)&t->heap, &t->caph, t->nheap, sizeof *t->heap));
  size_t i = t->nheap++;
  while (i > 0 && heap_before(t, it, t->heap[(i - 1) / 2])) {
    t->heap[i] = t->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  t->heap[i] = it;
  return DPT_OK;
}

static heap_item heap_pop(trainer *t) {
  const heap_item top = t->heap[0], last = t->heap[--t->nheap];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= t->nheap) break;
    if (c + 1 < t->nheap && heap_before(t, t->heap[c + 1], t->heap[c])) c++;
    if (!heap_before(t, t->heap[c], last)) break;
    t->heap[i] = t->heap[c];
    i = c;
  }
  if (t->nheap > 0) t->heap[i] = last;
  return top;
}

/* The index of pair (l, r), created with count 0 when new. */
static dpt_status pair_of(trainer *t, int32_t l, int32_t r, uint32_t *out) {
  const uint64_t key = pair_key(l, r);
  *out = dpt_u64_map_get(&t->pair_ids, key);
  if (*out != DPT_MAP_NONE) return DPT_OK;
  DPT_TRY(reserve((void **)&t->pairs, &t->capp, t->npairs, sizeof *t->pairs));
  t->pairs[t->npairs] = (pair){.left = l, .right = r};
  DPT_TRY(dpt_u64_map_put(&t->pair_ids, key, (uint32_t)t->npairs));
  *out = (uint32_t)t->npairs++;
  return DPT_OK;
}

/* Adds delta to pair (l, r)'s count, remembering its count before the merge `stamp`; with
 * `w` not NONE, also lists word w under the pair. */
static dpt_status adjust(trainer *t, int32_t l, int32_t r, int64_t delta, uint32_t stamp,
                         uint32_t w) {
  uint32_t id;
  DPT_TRY(pair_of(t, l, r, &id));
  pair *p = &t->pairs[id];
  if (p->touched != stamp) {
    p->touched = stamp;
    p->before = p->count;
    DPT_TRY(reserve((void **)&t->touched, &t->capt, t->ntouched, sizeof *t->touched));
    t->touched[t->ntouched++] = id;
  }
  p->count += delta;
  if (w != DPT_MAP_NONE && (p->nwords == 0 || p->words[p->nwords - 1] != w)) {
    DPT_TRY(reserve((void **)&p->words, &p->capwords, p->nwords, sizeof *p->words));
    p->words[p->nwords++] = w;
  }
  return DPT_OK;
}

/* Every pair of every word counted and listed, then all of them on the heap. */
static dpt_status count_pairs(trainer *t) {
  for (size_t w = 0; w < t->nwords; w++) {
    const int32_t *s = t->syms + t->words[w].off;
    for (uint32_t i = 0; i + 1 < t->words[w].len; i++)
      DPT_TRY(adjust(t, s[i], s[i + 1], (int64_t)t->words[w].count, 0, (uint32_t)w));
  }
  t->ntouched = 0;
  for (size_t p = 0; p < t->npairs; p++)
    DPT_TRY(heap_push(t, (heap_item){t->pairs[p].count, (uint32_t)p}));
  return DPT_OK;
}

/* Rewrites word w with every (l, r), left to right, joined into token id; the pair counts move
 * from the old tokens to the new, and the pairs holding id list the word. */
static dpt_status merge_word(trainer *t, uint32_t w, int32_t l, int32_t r, int32_t id,
                             uint32_t stamp) {
  word *wd = &t->words[w];
  int32_t *s = t->syms + wd->off;
  uint32_t i = 0;
  while (i + 1 < wd->len && !(s[i] == l && s[i + 1] == r))
    i++;
  if (i + 1 >= wd->len) return DPT_OK; /* a stale entry of the pair's word list */
  const int64_t c = (int64_t)wd->count;
  for (i = 0; i + 1 < wd->len; i++)
    DPT_TRY(adjust(t, s[i], s[i + 1], -c, stamp, DPT_MAP_NONE));
  uint32_t k = 0;
  for (i = 0; i < wd->len; i++) {
    const int joined = i + 1 < wd->len && s[i] == l && s[i + 1] == r;
    s[k++] = joined ? id : s[i];
    i += joined;
  }
  wd->len = k;
  for (i = 0; i + 1 < wd->len; i++) {
    const int holds = s[i] == id || s[i + 1] == id;
    DPT_TRY(adjust(t, s[i], s[i + 1], c, stamp, holds ? w : DPT_MAP_NONE));
  }
  return DPT_OK;
}

/* Merge `rank` of pair index pi into every word that holds it; the pairs whose counts moved go
 * on the heap with their new counts. */
static dpt_status apply_merge(trainer *t, uint32_t pi, size_t rank) {
  const uint32_t stamp = (uint32_t)rank + 1;
  const int32_t l = t->pairs[pi].left, r = t->pairs[pi].right;
  const int32_t id = (int32_t)(DPT_TOKEN_FIRST_MERGE + rank);
  for (size_t i = 0; i < t->pairs[pi].nwords; i++) {
    const uint32_t w = t->pairs[pi].words[i];
    if (t->words[w].stamp == stamp) continue;
    t->words[w].stamp = stamp;
    DPT_TRY(merge_word(t, w, l, r, id, stamp));
  }
  free(t->pairs[pi].words);
  t->pairs[pi].words = NULL;
  t->pairs[pi].nwords = t->pairs[pi].capwords = 0;
  for (size_t i = 0; i < t->ntouched; i++) {
    const pair *p = &t->pairs[t->touched[i]];
    if (p->count != p->before && p->count > 0)
      DPT_TRY(heap_push(t, (heap_item){p->count, t->touched[i]}));
  }
  t->ntouched = 0;
  return DPT_OK;
}

/* Up to `target` merges into merges[2 * target]; *made is how many were learned. */
static dpt_status learn(trainer *t, const dpt_text_corpus *c, size_t target, int32_t *merges,
                        size_t *made) {
  *made = 0;
  DPT_TRY(count_words(t, c));
  DPT_TRY(count_pairs(t));
  while (*made < target && t->nheap > 0) {
    const heap_item top = heap_pop(t);
    const pair *p = &t->pairs[top.pair];
    if (top.count != p->count) continue; /* stale: the count moved since it was pushed */
    if (top.count < 2) break;
    merges[2 * *made] = p->left;
    merges[2 * *made + 1] = p->right;
    DPT_TRY(apply_merge(t, top.pair, *made));
    ++*made;
  }
  return DPT_OK;
}

dpt_status dpt_bpe_train(const dpt_text_corpus *corpus, size_t vocab_size, dpt_bpe **out) {
  if (!out) return dpt_set_error(DPT_ERR_INVALID_ARG, "bpe_train: out is NULL");
  *out = NULL;
  if (!corpus) return dpt_set_error(DPT_ERR_INVALID_ARG, "bpe_train: corpus is NULL");
  if (vocab_size < DPT_TOKEN_FIRST_MERGE || vocab_size > DPT_BPE_MAX_VOCAB)
    return dpt_set_error(DPT_ERR_INVALID_ARG,
                         "bpe_train: vocabulary size %zu is outside [%d, %d] (4 special tokens, "
                         "256 bytes, then merges)",
                         vocab_size, DPT_TOKEN_FIRST_MERGE, DPT_BPE_MAX_VOCAB);
  const size_t target = vocab_size - DPT_TOKEN_FIRST_MERGE;
  int32_t *merges = malloc((2 * target + 1) * sizeof *merges);
  if (!merges) return oom();
  trainer t = {0};
  size_t made = 0;
  const dpt_status st = learn(&t, corpus, target, merges, &made);
  trainer_free(&t);
  if (st != DPT_OK) {
    free(merges);
    return st;
  }
  const dpt_status built = dpt_bpe_from_merges(merges, made, "bpe_train", out);
  free(merges);
  return built;
}
