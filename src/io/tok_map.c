#include <stdlib.h>
#include <string.h>
#include "io/tok_map.h"

// 8 bytes at a time with a multiply-xorshift mix: keys are short, so this beats byte-wise FNV.
uint64_t bs_hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t k; memcpy(&k, s, 8);
        h = (h ^ k) * 0xbf58476d1ce4e5b9ull; h ^= h >> 29;
        s += 8; n -= 8;
    }
    uint64_t k = 0;
    for (size_t i = 0; i < n; i++) k |= (uint64_t)s[i] << (8 * i);
    h = (h ^ k) * 0x94d049bb133111ebull;
    h ^= h >> 31; h *= 0xbf58476d1ce4e5b9ull; h ^= h >> 29;
    return h;
}

void bs_tok_map_free(bs_tok_map *m) {
    free(m->slots); free(m->ents); free(m->arena);
    memset(m, 0, sizeof *m);
}

static size_t find_slot(const bs_tok_map *m, const char *key, size_t len, uint32_t h) {
    size_t mask = m->cap - 1, i = h & mask;
    for (;;) {
        uint32_t e = m->slots[i];
        if (!e) return i;
        const bs_tok_map_ent *x = &m->ents[e - 1];
        if (x->hash == h && x->len == len && !memcmp(m->arena + x->off, key, len)) return i;
        i = (i + 1) & mask;
    }
}

int32_t bs_tok_map_get(const bs_tok_map *m, const char *key, size_t len) {
    if (!m->cap) return -1;
    uint32_t e = m->slots[find_slot(m, key, len, (uint32_t)bs_hash_bytes(key, len))];
    return e ? m->ents[e - 1].val : -1;
}

static int grow(bs_tok_map *m) {
    size_t cap = m->cap ? m->cap * 2 : 64;
    uint32_t *s = calloc(cap, sizeof *s);
    if (!s) return -1;
    for (size_t i = 0; i < m->n; i++) {
        size_t j = m->ents[i].hash & (cap - 1);
        while (s[j]) j = (j + 1) & (cap - 1);
        s[j] = (uint32_t)i + 1;
    }
    free(m->slots); m->slots = s; m->cap = cap;
    return 0;
}

int bs_tok_map_put(bs_tok_map *m, const char *key, size_t len, int32_t val) {
    if ((m->n + 1) * 2 > m->cap && grow(m)) return -1;
    uint32_t h = (uint32_t)bs_hash_bytes(key, len);
    size_t i = find_slot(m, key, len, h);
    if (m->slots[i]) { m->ents[m->slots[i] - 1].val = val; return 0; }
    if (m->n == m->ents_cap) {
        size_t c = m->ents_cap ? m->ents_cap * 2 : 32;
        void *p = realloc(m->ents, c * sizeof *m->ents);
        if (!p) return -1;
        m->ents = p; m->ents_cap = c;
    }
    if (m->arena_len + len + 1 > m->arena_cap) {
        size_t c = m->arena_cap ? m->arena_cap * 2 : 1024;
        while (c < m->arena_len + len + 1) c *= 2;
        void *p = realloc(m->arena, c);
        if (!p) return -1;
        m->arena = p; m->arena_cap = c;
    }
    memcpy(m->arena + m->arena_len, key, len);
    m->arena[m->arena_len + len] = 0;
    m->ents[m->n] = (bs_tok_map_ent){ (uint32_t)m->arena_len, (uint32_t)len, h, val };
    m->arena_len += len + 1;
    m->slots[i] = (uint32_t)++m->n;
    return 0;
}
