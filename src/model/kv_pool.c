// Paged KV memory: the pool's pages, promises and the tables that hold them (kv_pool.h).
#include <stdlib.h>
#include <string.h>
#include "model/kv_pool.h"

int bs_kv_pool_init(bs_kv_pool *p, bs_backend *be, int n_layers, int row_floats, int page_rows, int n_pages, bs_err *err) {
    memset(p, 0, sizeof *p);
    if (page_rows <= 0 || page_rows % BS_KV_PAGE_ALIGN)
        return bs_fail(err, "KV page size %d rows: it must be a positive multiple of %d", page_rows, BS_KV_PAGE_ALIGN);
    if (n_pages <= 0) return bs_fail(err, "a KV pool needs at least one page (asked for %d)", n_pages);
    p->be = be; p->n_layers = n_layers; p->row_floats = row_floats; p->page_rows = page_rows; p->n_pages = n_pages;
    if (!(p->k = bs_calloc(n_layers, sizeof *p->k, err)) || !(p->v = bs_calloc(n_layers, sizeof *p->v, err)) ||
        !(p->free_ids = bs_malloc(sizeof(int32_t) * (size_t)n_pages, err))) goto fail;
    size_t bytes = (size_t)n_pages * page_rows * row_floats * sizeof(float);
    for (int l = 0; l < n_layers; l++)
        if (!(p->k[l] = be->alloc(be, bytes, err)) || !(p->v[l] = be->alloc(be, bytes, err))) {
            bs_wrap(err, "KV pool of %d pages x %d rows (%.1f MiB per layer for K and V each)", n_pages, page_rows, bytes / 1048576.0);
            goto fail;
        }
    // Page 0 on top: a pool used by few sequences touches only its first pages (a CPU backend's memory is
    // committed as it is first written), and a page given back is the next handed out (still in cache).
    for (int i = 0; i < n_pages; i++) p->free_ids[i] = n_pages - 1 - i;
    p->n_free = n_pages;
    return 0;
fail:
    bs_kv_pool_free(p);
    return -1;
}

void bs_kv_pool_free(bs_kv_pool *p) {
    for (int l = 0; p->be && l < p->n_layers; l++) {
        if (p->k && p->k[l]) p->be->free(p->be, p->k[l]);
        if (p->v && p->v[l]) p->be->free(p->be, p->v[l]);
    }
    free(p->k); free(p->v); free(p->free_ids);
    memset(p, 0, sizeof *p);
}

static int promised(const bs_page_table *t) { return t->n_held > t->n_reserved ? t->n_held : t->n_reserved; }

int bs_page_table_init(bs_page_table *t, bs_kv_pool *pool, int max_rows, bs_err *err) {
    memset(t, 0, sizeof *t);
    t->pool = pool;
    t->cap = bs_kv_pool_pages_for(pool, max_rows > 0 ? max_rows : 1);
    if (!(t->ids = bs_malloc(sizeof(int32_t) * (size_t)t->cap, err)) || !(t->ids_sent = bs_malloc(sizeof(int32_t) * (size_t)t->cap, err)) ||
        !(t->ids_be = pool->be->alloc(pool->be, sizeof(int32_t) * (size_t)t->cap, err))) {
        bs_page_table_free(t);
        return bs_wrap(err, "KV page table for %d rows", max_rows);
    }
    for (int i = 0; i < t->cap; i++) t->ids_sent[i] = -1;
    return 0;
}

void bs_page_table_free(bs_page_table *t) {
    bs_kv_pool *p = t->pool;
    if (!p) return;
    if (t->ids) {
        p->n_promised -= promised(t);
        while (t->n_held > 0) p->free_ids[p->n_free++] = t->ids[--t->n_held];
    }
    if (t->ids_be) p->be->free(p->be, t->ids_be);
    free(t->ids); free(t->ids_sent);
    memset(t, 0, sizeof *t);
}

int bs_page_table_reserve(bs_page_table *t, int rows, bs_err *err) {
    bs_kv_pool *p = t->pool;
    int want = bs_kv_pool_pages_for(p, rows);
    if (want > p->n_pages)
        return bs_fail(err, "KV pool too small: %d rows need %d pages of %d rows, the pool has %d pages (%ld rows) in all", rows, want,
                       p->page_rows, p->n_pages, (long)p->n_pages * p->page_rows);
    if (want <= t->n_reserved) return 0;
    int extra = (want > t->n_held ? want : t->n_held) - promised(t);
    if (p->n_promised + extra > p->n_pages) {
        bs_fail(err, "KV pool busy: %d rows need %d more pages of %d rows; %d of the pool's %d pages are held or promised", rows, extra,
                p->page_rows, p->n_promised, p->n_pages);
        return 1;
    }
    p->n_promised += extra;
    t->n_reserved = want;
    return 0;
}

int bs_page_table_grow(bs_page_table *t, int rows, bs_err *err) {
    bs_kv_pool *p = t->pool;
    int want = bs_kv_pool_pages_for(p, rows);
    if (want > t->cap) return bs_fail(err, "KV page table: %d rows are more than the %d it was made for", rows, t->cap * p->page_rows);
    while (t->n_held < want) {
        if (t->n_held >= t->n_reserved) {   // past its promise: only a page nobody was promised will do
            if (p->n_promised >= p->n_pages)
                return bs_fail(err, "KV pool exhausted: %d rows need %d pages of %d rows; all %d pages of the pool are held or promised "
                               "(%d held by this sequence)", rows, want, p->page_rows, p->n_pages, t->n_held);
            p->n_promised++;
        }
        if (p->n_free == 0) return bs_fail(err, "internal error: the KV pool promised more pages than it has free");
        t->ids[t->n_held++] = p->free_ids[--p->n_free];
    }
    return 0;
}

void bs_page_table_shrink(bs_page_table *t, int rows) {
    bs_kv_pool *p = t->pool;
    int keep = bs_kv_pool_pages_for(p, rows < 0 ? 0 : rows), before = promised(t);
    while (t->n_held > keep) p->free_ids[p->n_free++] = t->ids[--t->n_held];
    p->n_promised -= before - promised(t);
}

void bs_page_table_sync(bs_page_table *t) {
    int lo = -1, hi = -1;
    for (int i = 0; i < t->n_held; i++)
        if (t->ids[i] != t->ids_sent[i]) { if (lo < 0) lo = i; hi = i; }
    if (lo < 0) return;
    bs_backend *be = t->pool->be;
    be->upload(be, t->ids_be + lo, t->ids + lo, sizeof(int32_t) * (size_t)(hi - lo + 1));
    memcpy(t->ids_sent + lo, t->ids + lo, sizeof(int32_t) * (size_t)(hi - lo + 1));
}
