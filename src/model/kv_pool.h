// Paged KV memory (docs/kv-paging.md). One pool per loaded model and backend holds every sequence's K/V
// rows in fixed-size pages: page p of layer l is page_rows rows of row_floats floats at k[l] + p * page_rows *
// row_floats (v alike), the same page id in every layer. A sequence's page table (bs_page_table) lists the
// pages of its rows in order; it takes pages as the sequence grows and gives back those past a rollback
// point, or all of them when the sequence ends, so short and long requests share one allocation instead of
// each reserving its longest context.
//
// Promises (reservations) let a caller make sure a sequence can grow to its longest length before it starts:
// the pool never promises more pages than it has, and a table holding a promise can always grow within it.
// The runtime admits a request only once its promise is made (src/runtime/step.c); docs/kv-paging.md says why.
#pragma once
#include "backend/backend.h"

#define BS_KV_PAGE_ROWS 128   // rows per page by default (docs/kv-paging.md: why 128)

typedef struct bs_kv_pool {
    bs_backend *be;
    int n_layers, row_floats, page_rows, n_pages;
    int max_rows;             // the longest table it serves (the model's context; set by its maker, 0: any)
    float **k, **v;           // [n_layers] -> [n_pages * page_rows][row_floats], backend memory
    int32_t *free_ids;        // host stack of free page ids, the next one handed out on top
    int n_free;
    int n_promised;           // pages held or promised: the sum over tables of max(held, reserved)
} bs_kv_pool;

// n_pages pages of page_rows rows (a positive multiple of BS_KV_PAGE_ALIGN) for n_layers layers.
int bs_kv_pool_init(bs_kv_pool *p, bs_backend *be, int n_layers, int row_floats, int page_rows, int n_pages, bs_err *err);
void bs_kv_pool_free(bs_kv_pool *p);
static inline int bs_kv_pool_pages_for(const bs_kv_pool *p, long rows) { return (int)((rows + p->page_rows - 1) / p->page_rows); }
static inline int bs_kv_pool_in_use(const bs_kv_pool *p) { return p->n_pages - p->n_free; }

// The pages of one timeline in a pool: a sequence's KV cache, a drafter's context.
typedef struct bs_page_table {
    bs_kv_pool *pool;
    int cap;                  // most pages it may hold (its longest length)
    int n_held, n_reserved;   // pages held (rows [0, n_held * page_rows)), pages promised
    int32_t *ids;             // host [cap]: the page of rows [i * page_rows, (i + 1) * page_rows)
    int32_t *ids_be;          // backend [cap]: the copy the ops read (bs_page_table_sync)
    int32_t *ids_sent;        // host [cap]: what ids_be holds (-1: not sent yet)
} bs_page_table;

// An empty table for up to max_rows rows (no pages yet, nothing promised).
int  bs_page_table_init(bs_page_table *t, bs_kv_pool *pool, int max_rows, bs_err *err);
// Every page and promise back to the pool.
void bs_page_table_free(bs_page_table *t);
// Promises the pages of rows [0, rows) (never fewer than already promised): growing to `rows` cannot fail
// afterwards. 0: done; 1: not now, the pool's other promises leave too few pages (a later try may succeed);
// -1: never, the pool is smaller than that. err says which. A promise may go past the table's own capacity:
// the extra pages stand for another table in a pool of the same geometry (a drafter's context: docs/kv-paging.md).
int  bs_page_table_reserve(bs_page_table *t, int rows, bs_err *err);
// Holds the pages of rows [0, rows): pages beyond those held come from the table's promise, else from pages
// nobody was promised; -1 (err: the pool's size and use) when there are none.
int  bs_page_table_grow(bs_page_table *t, int rows, bs_err *err);
// Gives back the pages past those rows [0, rows) need (a rollback); the promise stays.
void bs_page_table_shrink(bs_page_table *t, int rows);
// Uploads the entries that changed since the last sync to the backend copy (before ops read the table).
void bs_page_table_sync(bs_page_table *t);
// The view of layer l's K/V through this table (backend.h).
static inline bs_kv_view bs_page_table_view(const bs_page_table *t, int l) {
    return (bs_kv_view){ t->pool->k[l], t->pool->v[l], t->ids_be, t->pool->page_rows };
}
// Backend pointers to row `row` (held) of layer l's K and V, for writes that do not go through an op's view.
static inline float *bs_page_table_k_row(const bs_page_table *t, int l, int row) {
    const bs_kv_pool *p = t->pool;
    return p->k[l] + ((size_t)t->ids[row / p->page_rows] * p->page_rows + row % p->page_rows) * p->row_floats;
}
static inline float *bs_page_table_v_row(const bs_page_table *t, int l, int row) {
    const bs_kv_pool *p = t->pool;
    return p->v[l] + ((size_t)t->ids[row / p->page_rows] * p->page_rows + row % p->page_rows) * p->row_floats;
}
