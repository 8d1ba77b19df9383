/* Internal: hash maps of the tokenizer and its trainer (open addressing, linear probing, no
 * deletion): byte strings to 32-bit values (words, the encoder's cache) and 64-bit keys to
 * 32-bit values (token pairs). */
#ifndef DPTRAIN_BASE_TEXT_MAP_H
#define DPTRAIN_BASE_TEXT_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/status.h"

#define DPT_MAP_NONE UINT32_MAX /* a lookup that found nothing */

/* Byte strings (copied into the map's own pool) to values. */
typedef struct dpt_str_map {
  struct dpt_str_slot *slots; /* [cap], cap a power of two */
  size_t cap, count;
  uint8_t *pool; /* the keys' bytes */
  size_t pool_len, pool_cap;
} dpt_str_map;

/* 64-bit keys to values. */
typedef struct dpt_u64_map {
  struct dpt_u64_slot *slots; /* [cap], cap a power of two */
  size_t cap, count;
} dpt_u64_map;

void dpt_str_map_free(dpt_str_map *m);
/* The value stored for the key, or DPT_MAP_NONE. */
uint32_t dpt_str_map_get(const dpt_str_map *m, const uint8_t *key, size_t len);
/* Stores value (< DPT_MAP_NONE) for a key not yet in the map. DPT_ERR_OUT_OF_MEMORY. */
dpt_status dpt_str_map_put(dpt_str_map *m, const uint8_t *key, size_t len, uint32_t value);

void dpt_u64_map_free(dpt_u64_map *m);
uint32_t dpt_u64_map_get(const dpt_u64_map *m, uint64_t key);
dpt_status dpt_u64_map_put(dpt_u64_map *m, uint64_t key, uint32_t value);

#endif
