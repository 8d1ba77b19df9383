/* Hash maps of byte strings and 64-bit keys (the tokenizer's, its trainer's); see base/text_map.h.
 */
#include "base/text_map.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

struct dpt_str_slot {
  uint64_t hash;
  size_t off, len; /* the key in the pool */
  uint32_t value;  /* DPT_MAP_NONE: empty */
};

struct dpt_u64_slot {
  uint64_t key;
  uint32_t value; /* DPT_MAP_NONE: empty */
};

/* FNV-1a, then splitmix64's finalizer so the low bits (the slot) depend on every byte. */
static uint64_t hash_bytes(const uint8_t *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 0x100000001b3ull;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

static uint64_t hash_u64(uint64_t h) {
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

void dpt_str_map_free(dpt_str_map *m) {
  free(m->slots);
  free(m->pool);
  memset(m, 0, sizeof *m);
}

static size_t str_find(const dpt_str_map *m, uint64_t h, const uint8_t *key, size_t len) {
  size_t i = (size_t)h & (m->cap - 1);
  for (;; i = (i + 1) & (m->cap - 1)) {
    const struct dpt_str_slot *s = &m->slots[i];
    if (s->value == DPT_MAP_NONE) return i;
    if (s->hash == h && s->len == len && memcmp(m->pool + s->off, key, len) == 0) return i;
  }
}

uint32_t dpt_str_map_get(const dpt_str_map *m, const uint8_t *key, size_t len) {
  if (m->cap == 0) return DPT_MAP_NONE;
  return m->slots[str_find(m, hash_bytes(key, len), key, len)].value;
}

/* Doubles the slots (or makes the first 1024), keeping the load at most one half. */
static dpt_status str_grow(dpt_str_map *m) {
  const size_t cap = m->cap ? 2 * m->cap : 1024;
  struct dpt_str_slot *slots =
      cap <= ((size_t)-1) / 2 / sizeof *slots ? malloc(cap * sizeof *slots) : NULL;
  if (!slots) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
  for (size_t i = 0; i < cap; i++)
    slots[i].value = DPT_MAP_NONE;
  dpt_str_map old = *m;
  m->slots = slots;
  m->cap = cap;
  for (size_t i = 0; i < old.cap; i++) {
    if (old.slots[i].value == DPT_MAP_NONE) continue;
    size_t j = (size_t)old.slots[i].hash & (cap - 1);
    while (slots[j].value != DPT_MAP_NONE)
      j = (j + 1) & (cap - 1);
    slots[j] = old.slots[i];
  }
  free(old.slots);
  return DPT_OK;
}

static dpt_status pool_append(dpt_str_map *m, const uint8_t *key, size_t len) {
  if (m->pool_len + len > m->pool_cap) {
    size_t cap = m->pool_cap ? m->pool_cap : 4096;
    while (cap < m->pool_len + len)
      cap *= 2;
    uint8_t *p = realloc(m->pool, cap);
    if (!p) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    m->pool = p;
    m->pool_cap = cap;
  }
  if (len) memcpy(m->pool + m->pool_len, key, len);
  m->pool_len += len;
  return DPT_OK;
}

dpt_status dpt_str_map_put(dpt_str_map *m, const uint8_t *key, size_t len, uint32_t value) {
  if (2 * (m->count + 1) > m->cap) DPT_TRY(str_grow(m));
  const uint64_t h = hash_bytes(key, len);
  const size_t i = str_find(m, h, key, len);
  const size_t off = m->pool_len;
  DPT_TRY(pool_append(m, key, len));
  m->slots[i] = (struct dpt_str_slot){h, off, len, value};
  m->count++;
  return DPT_OK;
}

void dpt_u64_map_free(dpt_u64_map *m) {
  free(m->slots);
  memset(m, 0, sizeof *m);
}

static size_t u64_find(const dpt_u64_map *m, uint64_t key) {
  size_t i = (size_t)hash_u64(key) & (m->cap - 1);
  while (m->slots[i].value != DPT_MAP_NONE && m->slots[i].key != key)
    i = (i + 1) & (m->cap - 1);
  return i;
}

uint32_t dpt_u64_map_get(const dpt_u64_map *m, uint64_t key) {
  if (m->cap == 0) return DPT_MAP_NONE;
  return m->slots[u64_find(m, key)].value;
}

static dpt_status u64_grow(dpt_u64_map *m) {
  const size_t cap = m->cap ? 2 * m->cap : 1024;
  struct dpt_u64_slot *slots =
      cap <= ((size_t)-1) / 2 / sizeof *slots ? malloc(cap * sizeof *slots) : NULL;
  if (!slots) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
  for (size_t i = 0; i < cap; i++)
    slots[i].value = DPT_MAP_NONE;
  dpt_u64_map old = *m;
  m->slots = slots;
  m->cap = cap;
  for (size_t i = 0; i < old.cap; i++)
    if (old.slots[i].value != DPT_MAP_NONE) m->slots[u64_find(m, old.slots[i].key)] = old.slots[i];
  free(old.slots);
  return DPT_OK;
}

dpt_status dpt_u64_map_put(dpt_u64_map *m, uint64_t key, uint32_t value) {
  if (2 * (m->count + 1) > m->cap) DPT_TRY(u64_grow(m));
  const size_t i = u64_find(m, key);
  if (m->slots[i].value == DPT_MAP_NONE) m->count++;
  m->slots[i] = (struct dpt_u64_slot){key, value};
  return DPT_OK;
}
