// The BPE model on one pre-tokenised piece: lowest-rank merge first, leftmost on ties, exactly as
// Hugging Face's BPE does. Short pieces use a linear scan, long ones a binary heap; pieces seen
// before in the same call come from a cache, since text repeats its words.
#include <stdlib.h>
#include <string.h>
#include "io/tokenizer_internal.h"

typedef struct { int32_t id, prev, next; } sym;
// Heap entry: key = rank << 32 | position (lowest rank first, leftmost on ties: one comparison), the pair
// it merges (to spot stale entries) and the id it merges into (so that a pop needs no second lookup).
typedef struct { uint64_t key; int32_t a, b, id; } hent;

struct bs_bpe_ws {
    sym *s; size_t s_cap;
    int32_t *rank; size_t r_cap;
    int32_t *mid; size_t mid_cap;   // short pieces: the id each pair merges into
    hent *h; size_t h_cap;
    bs_tok_map cache;            // piece bytes -> index into cspan
    bs_span *cspan; size_t n_cspan, cspan_cap;
    bs_ids cids;
    char *tmp; size_t tmp_cap;
};

bs_bpe_ws *bs_bpe_ws_new(void) { return calloc(1, sizeof(bs_bpe_ws)); }
void bs_bpe_ws_free(bs_bpe_ws *w) {
    if (!w) return;
    free(w->s); free(w->rank); free(w->mid); free(w->h); free(w->cspan); free(w->cids.v); free(w->tmp);
    bs_tok_map_free(&w->cache);
    free(w);
}

static inline uint64_t mkey(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }
static inline uint64_t mhash(uint64_t k) { k ^= k >> 33; k *= 0xff51afd7ed558ccdull; k ^= k >> 33; return k; }

int bs_merge_lookup(const bs_tokenizer *t, int32_t a, int32_t b, int32_t *rank, int32_t *id) {
    if (!t->merge_cap || a < 0 || b < 0) return 0;
    uint64_t k = mkey(a, b);
    size_t mask = t->merge_cap - 1, i = mhash(k) & mask;
    for (;;) {
        const bs_merge_slot *x = &t->merges[i];
        if (x->rank < 0) return 0;
        if (x->key == k) { *rank = x->rank; *id = x->id; return 1; }
        i = (i + 1) & mask;
    }
}

int bs_merge_insert(bs_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t id, bs_err *err) {
    if ((t->n_merges + 1) * 2 > t->merge_cap) {
        // Starts small and doubles: a trained test tokenizer has a few dozen merges, and a first table of 4096
        // slots (64 KB, every slot written) was a tenth of loading one under ASan.
        size_t cap = t->merge_cap ? t->merge_cap * 2 : 64;
        bs_merge_slot *m = malloc(cap * sizeof *m);
        if (!m) return bs_fail(err, "out of memory for the merges table");
        for (size_t i = 0; i < cap; i++) m[i].rank = -1;
        for (size_t i = 0; i < t->merge_cap; i++) if (t->merges[i].rank >= 0) {
            size_t j = mhash(t->merges[i].key) & (cap - 1);
            while (m[j].rank >= 0) j = (j + 1) & (cap - 1);
            m[j] = t->merges[i];
        }
        free(t->merges); t->merges = m; t->merge_cap = cap;
    }
    uint64_t k = mkey(a, b);
    size_t mask = t->merge_cap - 1, i = mhash(k) & mask;
    while (t->merges[i].rank >= 0) {
        if (t->merges[i].key == k) return 0;   // a repeated merge keeps its first (lowest) rank
        i = (i + 1) & mask;
    }
    t->merges[i] = (bs_merge_slot){ k, rank, id };
    t->n_merges++;
    return 0;
}

static inline uint64_t hkey(int32_t rank, int32_t pos) { return (uint64_t)(uint32_t)rank << 32 | (uint32_t)pos; }
static inline int hless(const hent *x, const hent *y) { return x->key < y->key; }
static void hpush(hent *h, size_t *n, hent e) {
    size_t i = (*n)++;
    while (i) { size_t p = (i - 1) / 2; if (!hless(&e, &h[p])) break; h[i] = h[p]; i = p; }
    h[i] = e;
}
static hent hpop(hent *h, size_t *n) {
    hent top = h[0], e = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && hless(&h[c + 1], &h[c])) c++;
        if (!hless(&h[c], &e)) break;
        h[i] = h[c]; i = c;
    }
    if (m) h[i] = e;
    return top;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q; *cap = c;
    return 0;
}

// A character the vocabulary lacks: its bytes as <0xXX> tokens (byte_fallback, when every one exists), else the
// unknown token. As in tokenizers' BPE, an unknown token is held back (*unk_n: bytes it covers, 0 = none) until a
// known character or the end of the piece adds it; with fuse_unk a run of unknown characters makes one. Byte
// tokens do not release a held unknown token (tokenizers adds them first). Returns 0, or -1 with a message.
static int unknown_char(const bs_tokenizer *t, bs_bpe_ws *w, int32_t *m, const unsigned char *c, size_t k,
                        size_t *unk_n, bs_err *err) {
    if (t->byte_fallback) {
        size_t j = 0;
        while (j < k && t->byte_fallback_id[c[j]] >= 0) j++;
        if (j == k) {
            for (j = 0; j < k; j++) w->s[(*m)++].id = t->byte_fallback_id[c[j]];
            return 0;
        }
    }
    if (t->unk_id < 0) {
        if (t->unk_name) return bs_fail(err, "tokenizer: a character needs the unknown token \"%s\", which the vocabulary does not have", t->unk_name);
        return 0;   // no unk token: the character is dropped, as Hugging Face does
    }
    if (*unk_n && !t->fuse_unk) w->s[(*m)++].id = t->unk_id;
    *unk_n += k;
    return 0;
}

// Initial symbols of a piece; returns the count, or -1 on error.
static int32_t init_symbols(const bs_tokenizer *t, bs_bpe_ws *w, const char *s, size_t n, bs_err *err) {
    if (grow((void **)&w->s, &w->s_cap, n + 1, sizeof *w->s)) return bs_fail(err, "out of memory");
    int32_t m = 0;
    size_t unk_n = 0;
    const unsigned char *u = (const unsigned char *)s;
    size_t pl = t->cont_prefix ? strlen(t->cont_prefix) : 0, sl = t->eow_suffix ? strlen(t->eow_suffix) : 0;
    int plain_bytes = t->byte_level && !pl && !sl;
    size_t i = 0;
    char cbuf[8];
    while (i < n) {
        size_t k; const char *c; int clen;
        int32_t id;
        if (plain_bytes) { k = 1; id = t->byte_id[u[i]]; c = NULL; clen = 0; }
        else {
            // One symbol per character, with the continuing-subword prefix / end-of-word suffix.
            if (t->byte_level) { int l; bs_bytelevel_char(u[i], cbuf, &l); c = cbuf; clen = l; k = 1; }
            else { uint32_t cp; k = bs_utf8_decode(u + i, n - i, &cp); if (!k) k = 1; c = s + i; clen = (int)k; }
            size_t need = pl + clen + sl;
            if (grow((void **)&w->tmp, &w->tmp_cap, need + 1, 1)) return bs_fail(err, "out of memory");
            size_t q = 0;
            if (i > 0 && pl) { memcpy(w->tmp, t->cont_prefix, pl); q = pl; }
            memcpy(w->tmp + q, c, clen); q += clen;
            if (i + k == n && sl) { memcpy(w->tmp + q, t->eow_suffix, sl); q += sl; }
            id = bs_tok_map_get(&t->vocab, w->tmp, q);
        }
        // At most 5 symbols per character: a held unknown token and the character, or up to 4 byte tokens.
        if (grow((void **)&w->s, &w->s_cap, (size_t)m + 8, sizeof *w->s)) return bs_fail(err, "out of memory");
        if (id >= 0) {
            if (unk_n) { w->s[m++].id = t->unk_id; unk_n = 0; }
            w->s[m++].id = id;
            i += k;
            continue;
        }
        // The bytes tokenizers falls back to are those of the character it looked up (ByteLevel's mapped one).
        if (plain_bytes) { int l; bs_bytelevel_char(u[i], cbuf, &l); c = cbuf; clen = l; }
        if (unknown_char(t, w, &m, (const unsigned char *)(t->byte_level ? c : s + i), t->byte_level ? (size_t)clen : k, &unk_n, err))
            return -1;
        i += k;
    }
    if (unk_n) w->s[m++].id = t->unk_id;
    return m;
}

static int merge_all(const bs_tokenizer *t, bs_bpe_ws *w, int32_t m, bs_ids *out, bs_err *err) {
    sym *S = w->s;
    if (m == 0) return 0;
    for (int32_t i = 0; i < m; i++) { S[i].prev = i - 1; S[i].next = i + 1 < m ? i + 1 : -1; }
    if (m <= 24) {
        // Short pieces: rescanning the pairs is cheaper than a heap.
        if (grow((void **)&w->rank, &w->r_cap, m + 1, sizeof *w->rank) ||
            grow((void **)&w->mid, &w->mid_cap, m + 1, sizeof *w->mid)) return bs_fail(err, "out of memory");
        int32_t *R = w->rank, *N = w->mid;
        for (int32_t i = 0; i + 1 < m; i++) if (!bs_merge_lookup(t, S[i].id, S[i + 1].id, &R[i], &N[i])) R[i] = INT32_MAX;
        if (m) R[m - 1] = INT32_MAX;
        for (;;) {
            int32_t best = -1, br = INT32_MAX;
            for (int32_t i = 0; i >= 0; i = S[i].next) if (R[i] < br) { br = R[i]; best = i; }
            if (best < 0) break;
            int32_t j = S[best].next;
            S[best].id = N[best];
            S[best].next = S[j].next;
            if (S[j].next >= 0) S[S[j].next].prev = best;
            if (S[best].next < 0 || !bs_merge_lookup(t, S[best].id, S[S[best].next].id, &R[best], &N[best])) R[best] = INT32_MAX;
            int32_t p = S[best].prev;
            if (p >= 0 && !bs_merge_lookup(t, S[p].id, S[best].id, &R[p], &N[p])) R[p] = INT32_MAX;
        }
    } else {
        if (grow((void **)&w->h, &w->h_cap, 2 * (size_t)m + 2, sizeof *w->h)) return bs_fail(err, "out of memory");
        size_t hn = 0;
        int32_t r, nid;
        for (int32_t i = 0; i + 1 < m; i++)
            if (bs_merge_lookup(t, S[i].id, S[i + 1].id, &r, &nid)) hpush(w->h, &hn, (hent){ hkey(r, i), S[i].id, S[i + 1].id, nid });
        while (hn) {
            hent e = hpop(w->h, &hn);
            int32_t i = (int32_t)(uint32_t)e.key, j = S[i].next;
            if (S[i].id != e.a || j < 0 || S[j].id != e.b || S[i].prev == -2) continue;   // stale entry
            S[i].id = e.id;
            S[i].next = S[j].next;
            S[j].prev = -2;   // dead
            if (S[i].next >= 0) S[S[i].next].prev = i;
            if (S[i].next >= 0 && bs_merge_lookup(t, S[i].id, S[S[i].next].id, &r, &nid))
                hpush(w->h, &hn, (hent){ hkey(r, i), S[i].id, S[S[i].next].id, nid });
            int32_t p = S[i].prev;
            if (p >= 0 && bs_merge_lookup(t, S[p].id, S[i].id, &r, &nid)) hpush(w->h, &hn, (hent){ hkey(r, p), S[p].id, S[i].id, nid });
        }
    }
    for (int32_t i = 0; i >= 0; i = S[i].next)
        if (bs_ids_push(out, S[i].id)) return bs_fail(err, "out of memory");
    return 0;
}

int bs_bpe_piece(const bs_tokenizer *t, bs_bpe_ws *w, const char *s, size_t n, bs_ids *out, bs_err *err) {
    if (!n) return 0;
    int cacheable = n <= 128;
    if (cacheable) {
        int32_t c = bs_tok_map_get(&w->cache, s, n);
        // A piece may have encoded to nothing (every character dropped: no unk token): then cids.v may still
        // be NULL, and NULL + 0 is undefined in C, so no pointer is formed for an empty span.
        if (c >= 0) return w->cspan[c].len && bs_ids_append(out, w->cids.v + w->cspan[c].off, w->cspan[c].len) ? bs_fail(err, "out of memory") : 0;
    }
    size_t before = out->n;
    int32_t whole = -1;
    if (t->ignore_merges) {
        // The whole piece is a token: take it without merging (Llama-3 files set this).
        if (t->byte_level) {
            if (grow((void **)&w->tmp, &w->tmp_cap, 2 * n + 1, 1)) return bs_fail(err, "out of memory");
            size_t q = 0;
            for (size_t i = 0; i < n; i++) { int l; bs_bytelevel_char((unsigned char)s[i], w->tmp + q, &l); q += l; }
            whole = bs_tok_map_get(&t->vocab, w->tmp, q);
        } else whole = bs_tok_map_get(&t->vocab, s, n);
    }
    if (whole >= 0) { if (bs_ids_push(out, whole)) return bs_fail(err, "out of memory"); }
    else {
        int32_t m = init_symbols(t, w, s, n, err);
        if (m < 0 || merge_all(t, w, m, out, err)) return -1;
    }
    if (cacheable) {
        size_t k = out->n - before;
        if (grow((void **)&w->cspan, &w->cspan_cap, w->n_cspan + 1, sizeof *w->cspan) ||
            (k && bs_ids_append(&w->cids, out->v + before, k)) ||
            bs_tok_map_put(&w->cache, s, n, (int32_t)w->n_cspan)) return bs_fail(err, "out of memory");
        w->cspan[w->n_cspan++] = (bs_span){ w->cids.n - k, k };
    }
    return 0;
}
