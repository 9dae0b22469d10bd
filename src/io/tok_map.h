// String -> int32 hash map (open addressing, keys copied into one arena): the vocabularies of the
// tokenizer and the trainer hold ~150k short keys, so one allocation per key would dominate.
// Tables start small (64 slots, a 1 KB arena) and double: an encode keeps one map per call (its BPE
// cache), whose first allocations (84 KB) used to be most of what encoding a short text allocated.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct { uint32_t off, len, hash; int32_t val; } bs_tok_map_ent;
typedef struct {
    uint32_t *slots; size_t cap;          // entry index + 1, 0 = empty; cap is a power of two
    bs_tok_map_ent *ents; size_t n, ents_cap;
    char *arena; size_t arena_len, arena_cap;
} bs_tok_map;

uint64_t bs_hash_bytes(const void *p, size_t n);
void    bs_tok_map_free(bs_tok_map *m);
// Value of key, or -1.
int32_t bs_tok_map_get(const bs_tok_map *m, const char *key, size_t len);
// Inserts or overwrites. Returns 0, or -1 when out of memory.
int     bs_tok_map_put(bs_tok_map *m, const char *key, size_t len, int32_t val);
// The key of entry i (insertion order), NUL-terminated in the arena.
static inline const char *bs_tok_map_key(const bs_tok_map *m, size_t i) { return m->arena + m->ents[i].off; }
