// Pre-tokenisers: Split (Oniguruma regex, as Hugging Face uses) and ByteLevel. Pieces are spans of
// ws->buf; ByteLevel's byte-to-character mapping is not materialised: the BPE model maps bytes itself.
#include <stdlib.h>
#include <string.h>
#include "io/tokenizer_internal.h"

void bs_pretok_ws_free(bs_pretok_ws *ws) {
    free(ws->a.v); free(ws->b.v); free(ws->buf);
    bs_regex_ws_free(&ws->rx);
    memset(ws, 0, sizeof *ws);
}

static int mpush(bs_mspans *a, size_t s, size_t e, int m) {
    if (a->n == a->cap) {
        size_t c = a->cap ? a->cap * 2 : 64;
        void *p = realloc(a->v, c * sizeof *a->v);
        if (!p) return -1;
        a->v = p; a->cap = c;
    }
    a->v[a->n++] = (bs_mspan){ s, e, m };
    return 0;
}

int bs_find_matches(regex_t *re, regex_t *run, bs_regex_ws *rx, const char *s, size_t n, bs_mspans *out, bs_err *err) {
    out->n = 0;
    size_t last_end = 0, prev = 0; long last_match_end = -1;
    int done = 0;
    while (!done && last_end <= n) {
        bs_span m[BS_REGEX_RUN];
        int k = bs_regex_search(re, run, rx, s, n, last_end, m, err);
        if (k < 0) return bs_wrap(err, "tokenizer");
        if (k == 0) break;
        // Each match as if its own search had found it (bs_regex_search: the ones after the first are what the
        // searches from the previous end would give).
        for (int i = 0; i < k && !done; i++) {
            size_t ms = m[i].off, me = ms + m[i].len;
            if (ms == me && last_match_end == (long)me) {
                if (last_end >= n) { done = 1; break; }
                uint32_t cp; int c = bs_utf8_decode((const unsigned char *)s + last_end, n - last_end, &cp);
                last_end += c ? c : 1;
                break;
            }
            last_end = me; last_match_end = (long)me;
            if (prev != ms && mpush(out, prev, ms, 0)) return bs_fail(err, "out of memory");
            if (mpush(out, ms, me, 1)) return bs_fail(err, "out of memory");
            prev = me;
            if (ms == me && me >= n) done = 1;
        }
    }
    if (prev != n && mpush(out, prev, n, 0)) return bs_fail(err, "out of memory");
    return 0;
}

// Applies the Split behaviour to the match list, in place; returns the new count.
static size_t apply_behavior(bs_mspans *a, int behavior, int invert) {
    size_t k = 0; int prevm = 0;
    if (invert) for (size_t i = 0; i < a->n; i++) a->v[i].m = !a->v[i].m;
    switch (behavior) {
    case BS_SPLIT_ISOLATED: return a->n;
    case BS_SPLIT_REMOVED:
        for (size_t i = 0; i < a->n; i++) if (!a->v[i].m) a->v[k++] = a->v[i];
        return k;
    case BS_SPLIT_MERGED_PREV:
        for (size_t i = 0; i < a->n; i++) {
            bs_mspan x = a->v[i];
            if (x.m && !prevm && k) a->v[k - 1].e = x.e; else a->v[k++] = x;
            prevm = x.m;
        }
        return k;
    case BS_SPLIT_MERGED_NEXT: {
        // Walk backwards, merging a match into the piece after it, then restore the order.
        size_t n = a->n;
        for (size_t j = n; j-- > 0;) {
            bs_mspan x = a->v[j];
            if (x.m && !prevm && k) a->v[n - k].s = x.s;   // last pushed sits at n-k
            else { k++; a->v[n - k] = x; }
            prevm = x.m;
        }
        memmove(a->v, a->v + (n - k), k * sizeof *a->v);
        return k;
    }
    case BS_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < a->n; i++) {
            bs_mspan x = a->v[i];
            if (k && x.m == prevm) a->v[k - 1].e = x.e; else a->v[k++] = x;
            prevm = x.m;
        }
        return k;
    }
    return a->n;
}

static int buf_reserve(bs_pretok_ws *ws, size_t n) {
    if (n <= ws->buf_cap) return 0;
    size_t c = ws->buf_cap ? ws->buf_cap : 256;
    while (c < n) c *= 2;
    char *p = malloc(c);
    if (!p) return -1;
    free(ws->buf); ws->buf = p; ws->buf_cap = c;
    return 0;
}

int bs_pretokenize(const bs_tokenizer *t, bs_pretok_ws *ws, const char *s, size_t n, bs_err *err) {
    if (buf_reserve(ws, n + 1)) return bs_fail(err, "out of memory");
    memcpy(ws->buf, s, n);
    ws->buf_len = n;
    ws->a.n = 0;
    if (n && bs_spans_push(&ws->a, 0, n)) return bs_fail(err, "out of memory");
    bs_mspans ms = { 0 };
    int rc = 0;
    for (int p = 0; p < t->n_pre && !rc; p++) {
        const bs_pretok *pt = &t->pre[p];
        if (pt->kind == BS_PRE_BYTELEVEL && pt->add_prefix_space) {
            // Each piece that does not start with a space gets one: lay the pieces out again.
            size_t extra = 0;
            for (size_t i = 0; i < ws->a.n; i++) extra += ws->buf[ws->a.v[i].off] != ' ';
            char *nb = malloc(ws->buf_len + extra + 1);
            if (!nb) { rc = bs_fail(err, "out of memory"); break; }
            size_t m = 0;
            for (size_t i = 0; i < ws->a.n; i++) {
                bs_span *x = &ws->a.v[i];
                size_t start = m;
                if (ws->buf[x->off] != ' ') nb[m++] = ' ';
                memcpy(nb + m, ws->buf + x->off, x->len); m += x->len;
                x->off = start; x->len = m - start;
            }
            // (the capacity is what was allocated: old length + extra + 1; m already counts the extra)
            size_t alloc = ws->buf_len + extra + 1;
            free(ws->buf); ws->buf = nb; ws->buf_len = m; ws->buf_cap = alloc;
        }
        if (!pt->re) continue;
        int behavior = pt->kind == BS_PRE_SPLIT ? pt->behavior : BS_SPLIT_ISOLATED;
        ws->b.n = 0;
        for (size_t i = 0; i < ws->a.n && !rc; i++) {
            bs_span x = ws->a.v[i];
            if (bs_find_matches(pt->re, pt->run, &ws->rx, ws->buf + x.off, x.len, &ms, err)) { rc = -1; break; }
            size_t k = apply_behavior(&ms, behavior, pt->kind == BS_PRE_SPLIT && pt->invert);
            for (size_t j = 0; j < k; j++)
                if (ms.v[j].e > ms.v[j].s && bs_spans_push(&ws->b, x.off + ms.v[j].s, ms.v[j].e - ms.v[j].s)) {
                    rc = bs_fail(err, "out of memory"); break;
                }
        }
        bs_spans tmp = ws->a; ws->a = ws->b; ws->b = tmp;
    }
    free(ms.v);
    return rc;
}
