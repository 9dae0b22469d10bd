// Paged KV memory (src/model/kv_pool.h, docs/kv-paging.md): pages taken as a sequence grows and given back
// on rollback and at its end; exhaustion is an error naming the pool, or a wait (the runtime starts a request
// only once its whole context is promised); no page is lost over 10,000 requests; and a request's tokens do
// not depend on where its pages are (fragmented, out-of-order pools; other page sizes), greedy and sampled,
// with and without drafters. The ops themselves: attention through a page table equals the contiguous cache
// bit for bit on every CPU kernel path.
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "harness.h"
#include "blockspec.h"
#include "test_util_models.h"
#include "backend/cpu/cpu.h"
#include "runtime/runtime.h"

static const char *fixture(const char *name, char *buf, size_t cap) { snprintf(buf, cap, "%s/%s", bs_fixtures_dir(), name); return buf; }

static bs_engine *open_on(const char *dir, const char *device, long kv_rows, int page_rows, bs_err *err) {
    bs_engine *e = NULL;
    bs_engine_opts eo = { .kv_rows = kv_rows, .kv_page_rows = page_rows };
    return bs_engine_open_opts(&e, dir, device, &eo, err) ? NULL : e;
}
static bs_engine *open_paged(const char *dir, long kv_rows, int page_rows, bs_err *err) { return open_on(dir, "cpu", kv_rows, page_rows, err); }

// A forward of n ids from the cache's end; logits of its last row into host `last` (V floats).
static int forward(bs_engine *e, bs_kv_cache *kv, const int32_t *ids, int n, float *dl, float *last, bs_err *err) {
    bs_fwd_out fo = { .logits = dl };
    if (bs_qwen3_forward(&e->target, kv, ids, n, &fo, err)) return -1;
    e->be->download(e->be, last, dl, sizeof(float) * e->cfg.vocab_size);
    return 0;
}

// Growth across page boundaries, rollback across one (the pages past it go back), a regrown cache computing
// exactly what it computed before, and every page back when the cache is freed.
TEST(kv_paging_growth_rollback_and_release) {
    char t[1024]; bs_err err = {0};
    bs_engine *e = open_paged(fixture("target", t, sizeof t), 8 * 32, 32, &err);
    CHECK(e, "%s", err.msg);
    bs_kv_pool *pool = e->kv_pool;
    CHECK(pool->n_pages == 8 && pool->page_rows == 32, "pool of %d pages of %d rows", pool->n_pages, pool->page_rows);
    const int V = e->cfg.vocab_size;
    int32_t ids[100];
    for (int i = 0; i < 100; i++) ids[i] = (i * 37 + 11) % V;
    float *dl = e->be->alloc(e->be, sizeof(float) * V, &err), *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V);
    bs_kv_cache kv, fresh;
    CHECK(dl && bs_kv_init(&kv, pool, 200, &err) == 0, "%s", err.msg);
    CHECK(kv.pages.n_held == 0 && bs_kv_pool_in_use(pool) == 0 && pool->n_promised == 0, "an empty cache holds pages");
    CHECK(forward(e, &kv, ids, 40, dl, a, &err) == 0, "%s", err.msg);
    CHECK(kv.pages.n_held == 2 && bs_kv_pool_in_use(pool) == 2, "40 rows in %d pages (want 2)", kv.pages.n_held);
    CHECK(forward(e, &kv, ids + 40, 30, dl, a, &err) == 0, "%s", err.msg);
    CHECK(kv.pages.n_held == 3, "70 rows in %d pages (want 3)", kv.pages.n_held);
    int32_t first = kv.pages.ids[0];
    // back across two page boundaries: 31 rows keep one page, the two others return to the pool
    CHECK(bs_kv_rollback(&kv, 31, &err) == 0 && kv.pages.n_held == 1 && kv.pages.ids[0] == first && bs_kv_pool_in_use(pool) == 1 &&
          pool->n_free == 7, "after rolling back to 31 rows: %d pages held, %d in use", kv.pages.n_held, bs_kv_pool_in_use(pool));
    CHECK(bs_kv_rollback(&kv, 32, &err) != 0 && strstr(err.msg, "cannot roll"), "rolled forward: %s", err.msg);
    // a rollback inside a page keeps it
    CHECK(bs_kv_rollback(&kv, 20, &err) == 0 && kv.pages.n_held == 1, "%d pages after a rollback inside the first", kv.pages.n_held);
    // regrown over new pages: the same logits as the first time, and as one fresh forward of all 70 rows
    CHECK(forward(e, &kv, ids + 20, 50, dl, b, &err) == 0 && kv.pages.n_held == 3, "%s", err.msg);
    CHECK(!memcmp(a, b, sizeof(float) * V), "row 69's logits differ after a rollback and regrowth");
    CHECK(bs_kv_init(&fresh, pool, 100, &err) == 0 && forward(e, &fresh, ids, 70, dl, b, &err) == 0, "%s", err.msg);
    CHECK(!memcmp(a, b, sizeof(float) * V), "row 69's logits differ between a grown cache and one forward of 70 rows");
    bs_kv_free(&fresh);
    bs_kv_free(&kv);
    CHECK(bs_kv_pool_in_use(pool) == 0 && pool->n_free == 8 && pool->n_promised == 0, "pages lost: %d in use, %d promised",
          bs_kv_pool_in_use(pool), pool->n_promised);
    e->be->free(e->be, dl); free(a); free(b);
    bs_engine_close(e);
}

// A cache growing past the pool fails with an error naming the pool (never a crash, and the cache stays
// usable); promises: a table cannot be promised more than the pool holds (never) or than others leave (not now).
TEST(kv_paging_exhaustion_is_a_clear_error) {
    char t[1024]; bs_err err = {0};
    bs_engine *e = open_paged(fixture("target", t, sizeof t), 4 * 32, 32, &err);
    CHECK(e, "%s", err.msg);
    bs_kv_pool *pool = e->kv_pool;
    const int V = e->cfg.vocab_size;
    int32_t ids[160];
    for (int i = 0; i < 160; i++) ids[i] = (i * 13 + 5) % V;
    float *dl = e->be->alloc(e->be, sizeof(float) * V, &err), *h = malloc(sizeof(float) * V);
    bs_kv_cache a, b, c;
    CHECK(bs_kv_init(&a, pool, 200, &err) == 0 && bs_kv_init(&b, pool, 64, &err) == 0 && bs_kv_init(&c, pool, 96, &err) == 0, "%s", err.msg);
    CHECK(bs_kv_reserve(&a, 0, &err) == -1 && strstr(err.msg, "4 pages") && strstr(err.msg, "128 rows"), "a 200-row promise from a 128-row pool: %s", err.msg);
    CHECK(forward(e, &a, ids, 100, dl, h, &err) == 0 && a.pages.n_held == 4, "%s", err.msg);
    CHECK(forward(e, &a, ids + 100, 40, dl, h, &err) != 0 && strstr(err.msg, "KV pool exhausted") && strstr(err.msg, "4 pages"),
          "growing past the pool: %s", err.msg);
    CHECK(a.n_past == 100 && bs_kv_rollback(&a, 50, &err) == 0 && a.pages.n_held == 2, "the cache after the failed forward");
    CHECK(forward(e, &a, ids + 50, 10, dl, h, &err) == 0, "the cache is unusable after running out: %s", err.msg);
    CHECK(bs_kv_reserve(&b, 0, &err) == 0 && pool->n_promised == 4, "%s", err.msg);   // a holds 2, b is promised 2
    CHECK(bs_kv_reserve(&c, 0, &err) == 1 && strstr(err.msg, "KV pool busy"), "a promise the others leave no room for: %s", err.msg);
    CHECK(forward(e, &c, ids, 1, dl, h, &err) != 0 && strstr(err.msg, "exhausted"), "a cache took a page promised to another: %s", err.msg);
    CHECK(forward(e, &b, ids, 64, dl, h, &err) == 0 && b.pages.n_held == 2, "a promised cache could not grow: %s", err.msg);
    bs_kv_free(&b);
    CHECK(bs_kv_reserve(&c, 0, &err) == 1, "c (3 pages) fits beside a's 2 of 4: %s", err.msg);
    CHECK(bs_kv_rollback(&a, 32, &err) == 0 && bs_kv_reserve(&c, 0, &err) == 0 && forward(e, &c, ids, 96, dl, h, &err) == 0, "%s", err.msg);
    bs_kv_free(&a); bs_kv_free(&c);
    CHECK(bs_kv_pool_in_use(pool) == 0 && pool->n_promised == 0, "pages lost");
    e->be->free(e->be, dl); free(h);
    bs_engine_close(e);
}

// Through the public API, a pool of 4 pages of 128 rows: requests whose contexts do not all fit wait and then
// run (each with exactly blockspec_generate's tokens); one larger than the pool is refused at submit, naming
// it; a waiting request can be cancelled or freed; blockspec_generate meets a busy pool with an error.
TEST(kv_paging_requests_wait_for_pages) {
    char t[1024], d[1024], err[512];
    blockspec *bs;
    blockspec_open_options oo = { .kv_rows = 4 * 128 };
    CHECK(blockspec_open_ex(&bs, fixture("target", t, sizeof t), fixture("dspark", d, sizeof d), "cpu", &oo, err, sizeof err) == 0, "%s", err);
    blockspec_kv_pages u;
    blockspec_kv_usage(bs, &u);
    CHECK(u.pages_total == 4 && u.page_rows == 128 && u.pages_in_use == 0, "pool: %d pages of %d rows", u.pages_total, u.page_rows);
    enum { N = 6 };
    int32_t prompts[N][4];
    blockspec_params p[N];
    blockspec_request *r[N];
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < 4; k++) prompts[i][k] = (int32_t)(3 + (i * 41 + k * 7) % 300);
        p[i] = blockspec_default_params();
        p[i].n_new = 90 + 3 * i;        // promised 4 + 90 + 72 (+ a drafter block) rows: 2 pages each, so 2 run at once;
                                        // they hold one page each (under 128 rows)
        p[i].stop_at_eos = 0;
        p[i].use_drafter = i % 3 != 2;
        if (i % 2) { p[i].temperature = 0.8f; p[i].seed = 50 + i; }
        CHECK(blockspec_submit(bs, prompts[i], 4, &p[i], NULL, NULL, &r[i], err, sizeof err) == 0, "%s", err);
    }
    blockspec_kv_usage(bs, &u);
    CHECK(u.pages_promised == 4, "%d pages promised (want 4: two requests started)", u.pages_promised);
    blockspec_cancel(bs, r[5]);        // waiting: it leaves without ever taking a page
    blockspec_request_free(bs, r[4]);  // waiting, freed
    r[4] = NULL;
    int left, steps = 0, most = 0;
    while ((left = blockspec_step(bs, err, sizeof err)) > 0) {
        blockspec_kv_usage(bs, &u);
        if (u.pages_in_use > most) most = u.pages_in_use;
        CHECK(u.pages_promised <= u.pages_total && u.pages_in_use <= u.pages_promised, "pages: %d in use, %d promised of %d", u.pages_in_use,
              u.pages_promised, u.pages_total);
        steps++;
    }
    CHECK(left == 0, "%s", err);
    CHECK(most == 2, "at most %d pages were in use at once (two requests of one page each run together)", most);
    blockspec_kv_usage(bs, &u);
    CHECK(u.pages_in_use == 0 && u.pages_promised == 0, "pages left after every request ended: %d in use, %d promised", u.pages_in_use, u.pages_promised);
    blockspec_stats st;
    size_t n, m;
    blockspec_request_stats(r[5], &st);
    blockspec_request_tokens(r[5], &n);
    CHECK(!strcmp(st.finish_reason, "cancelled") && n == 0, "the waiting request cancelled: %s, %zu tokens", st.finish_reason, n);
    for (int i = 0; i < 4; i++) {
        const int32_t *got = blockspec_request_tokens(r[i], &n);
        int32_t alone[128];
        CHECK(blockspec_generate(bs, prompts[i], 4, &p[i], alone, 128, &m, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
        CHECK(n == m && n == (size_t)p[i].n_new && !memcmp(got, alone, sizeof(int32_t) * n), "request %d: %zu tokens after waiting, %zu alone, or they differ", i, n, m);
    }
    // A request its pool could never hold is refused at submit, naming the pool.
    blockspec_params big = blockspec_default_params();
    big.n_new = -1;                    // the whole context (512 rows) + a drafter block: 5 pages
    blockspec_request *x = NULL;
    CHECK(blockspec_submit(bs, prompts[0], 4, &big, NULL, NULL, &x, err, sizeof err) != 0 && !x && strstr(err, "KV pool has 4 pages"), "%s", err);
    // blockspec_generate while submitted requests hold the pool: an error, not a hang.
    CHECK(blockspec_submit(bs, prompts[0], 4, &p[0], NULL, NULL, &r[0 + 4], err, sizeof err) == 0, "%s", err);
    CHECK(blockspec_submit(bs, prompts[1], 4, &p[1], NULL, NULL, &x, err, sizeof err) == 0, "%s", err);
    int32_t out[128];
    CHECK(blockspec_generate(bs, prompts[2], 4, &p[2], out, 128, &m, NULL, NULL, NULL, err, sizeof err) != 0 && strstr(err, "KV pool busy"), "%s", err);
    blockspec_request_free(bs, x);
    blockspec_request_free(bs, r[4]);
    for (int i = 0; i < 4; i++) blockspec_request_free(bs, r[i]);
    blockspec_request_free(bs, r[5]);
    blockspec_kv_usage(bs, &u);
    CHECK(u.pages_in_use == 0 && u.pages_promised == 0, "pages left after the requests were freed");
    CHECK(blockspec_generate(bs, prompts[2], 4, &p[2], out, 128, &m, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
    blockspec_close(bs);
    printf("  %d steps, at most %d of 4 pages in use\n", steps, most);
}

// A pool whose free pages are out of order: pages 0..9 taken by ten one-page caches, then five of them given
// back in the order 3, 7, 1, 9, 5 (the other five stay held); the next sequence gets pages 5, 9, 1, 7, 3, 10...
static void fragment(bs_kv_pool *pool, bs_kv_cache *held, int *failed_) {
    bs_err err = {0};
    for (int i = 0; i < 10; i++) {
        CHECK(bs_kv_init(&held[i], pool, 1, &err) == 0 && bs_page_table_grow(&held[i].pages, 1, &err) == 0, "%s", err.msg);
        CHECK(held[i].pages.ids[0] == i, "a fresh pool handed out page %d as its %dth", held[i].pages.ids[0], i);
    }
    static const int order[5] = { 3, 7, 1, 9, 5 };
    for (int i = 0; i < 5; i++) bs_kv_free(&held[order[i]]);
}

// Whether a table's pages are out of order or not adjacent (so the run used a fragmented layout).
static int scattered(const bs_page_table *t) {
    for (int i = 1; i < t->n_held; i++) if (t->ids[i] != t->ids[i - 1] + 1) return 1;
    return 0;
}

// Requests run alone on a fresh engine (128-row pages handed out in order) and together, joining at different
// steps, on an engine with 32-row pages whose pool was fragmented first: the same tokens, greedy and seeded.
static void fragmented_invariance(int *failed_, const char *device, const char *target, const char *drafter, uint64_t seed, int N, int max_new) {
    bs_err err = {0};
    bs_engine *fresh = open_on(target, device, 0, 0, &err), *frag = open_on(target, device, 64 * 1024, 32, &err);
    CHECK(fresh && frag, "%s", err.msg);
    bs_drafter *df = NULL, *dg = NULL;
    if (drafter) CHECK(bs_drafter_open(&df, drafter, fresh, 0, &err) == 0 && bs_drafter_open(&dg, drafter, frag, 0, &err) == 0, "%s", err.msg);
    bs_kv_cache held[10];
    fragment(frag->kv_pool, held, failed_);
    if (*failed_) return;
    bs_rng g; bs_rng_seed(&g, seed);
    int32_t prompts[8][80]; int n_prompt[8];
    bs_seq_params sp[8];
    int32_t alone[8][96]; int n_alone[8];
    for (int i = 0; i < N; i++) {
        n_prompt[i] = 1 + (int)(bs_rng_u64(&g) % (i % 2 ? 75 : 20));
        for (int k = 0; k < n_prompt[i]; k++) prompts[i][k] = 4 + (int32_t)(bs_rng_u64(&g) % (fresh->cfg.vocab_size - 4));
        sp[i] = (bs_seq_params){ .n_new = max_new / 3 + (int)(bs_rng_u64(&g) % (max_new - max_new / 3)), .use_drafter = drafter && i % 4 != 3, .draft_max = i % 3 ? 0 : 2 + i % 5 };
        if (i % 3 == 1) sp[i].sampling = (bs_sampling){ .temperature = 0.9f, .top_p = i % 2 ? 0.9f : 1.0f, .seed = 300 + i };
        // alone, on the fresh engine
        bs_runtime rt; bs_seq s;
        CHECK(bs_runtime_init(&rt, fresh, df, &err) == 0 && bs_seq_init(&s, fresh, df, prompts[i], n_prompt[i], &sp[i], &err) == 0 &&
              bs_runtime_add(&rt, &s, &err) == 0, "%s", err.msg);
        while (!bs_seq_done(&s)) CHECK(bs_runtime_step(&rt, &err) >= 0, "request %d alone: %s", i, err.msg);
        n_alone[i] = s.n_out;
        memcpy(alone[i], s.out, sizeof(int32_t) * s.n_out);
        bs_seq_free(&s); bs_runtime_free(&rt);
    }
    // together on the fragmented engine, joining at steps 0, 0, 2, 4, ...; small prefill chunks
    bs_runtime rt;
    bs_seq *s = calloc(N, sizeof *s);
    CHECK(bs_runtime_init(&rt, frag, dg, &err) == 0, "%s", err.msg);
    rt.prefill_rows = 24;
    int joined = 0, saw_scattered = 0;
    for (int step = 0; step < 5000; step++) {
        while (joined < N && joined / 2 * 2 <= step) {
            CHECK(bs_seq_init(&s[joined], frag, dg, prompts[joined], n_prompt[joined], &sp[joined], &err) == 0 && bs_runtime_add(&rt, &s[joined], &err) == 0,
                  "%s", err.msg);
            joined++;
        }
        CHECK(bs_runtime_step(&rt, &err) >= 0, "%s", err.msg);
        for (int i = 0; i < joined; i++) saw_scattered |= !bs_seq_done(&s[i]) && scattered(&s[i].kv->pages);
        int pending = joined < N;
        for (int i = 0; i < joined; i++) pending |= !bs_seq_done(&s[i]);
        if (!pending) break;
    }
    CHECK(saw_scattered, "no sequence ran on scattered pages: the test did not fragment anything");
    for (int i = 0; i < N; i++) {
        CHECK(s[i].n_out == n_alone[i] && !memcmp(s[i].out, alone[i], sizeof(int32_t) * n_alone[i]),
              "request %d (temp %g, drafter %d): %d tokens on fragmented 32-row pages, %d alone on a fresh pool, or they differ", i,
              sp[i].sampling.temperature, sp[i].use_drafter, s[i].n_out, n_alone[i]);
        bs_seq_free(&s[i]);
    }
    free(s);
    bs_runtime_free(&rt);
    for (int i = 0; i < 10; i++) bs_kv_free(&held[i]);
    CHECK(bs_kv_pool_in_use(frag->kv_pool) == 0 && frag->kv_pool->n_promised == 0, "pages lost");
    if (df) { df->free(df); dg->free(dg); }
    bs_engine_close(fresh); bs_engine_close(frag);
}

TEST(kv_paging_fragmented_pool_same_tokens_plain) { char t[1024]; fragmented_invariance(failed_, "cpu", fixture("target", t, sizeof t), NULL, 1, 8, 90); }
TEST(kv_paging_fragmented_pool_same_tokens_dspark) {
    char t[1024], d[1024];
    fragmented_invariance(failed_, "cpu", fixture("target", t, sizeof t), fixture("dspark", d, sizeof d), 2, 8, 90);
}
TEST(kv_paging_fragmented_pool_same_tokens_dflash) {
    char t[1024], d[1024];
    fragmented_invariance(failed_, "cpu", fixture("target", t, sizeof t), fixture("dflash", d, sizeof d), 3, 8, 90);
}
TEST(kv_paging_fragmented_pool_same_tokens_builtin_dspark) {
    struct stat st;
    if (stat("models/blockspec-30m/config.json", &st) || stat("models/blockspec-30m-dspark/config.json", &st)) SKIP("no built-in model in models/");
    fragmented_invariance(failed_, "cpu", "models/blockspec-30m", "models/blockspec-30m-dspark", 4, 4, 40);   // 4 requests: a 30M model on a CPU
}
// On the GPU (SKIPs without one): the target's pages and the drafter's through the CUDA kernels, the lone
// requests' recorded forwards and drafter passes (CUDA graphs reading page tables that change), and the batch's
// native span attention.
TEST(cuda_kv_paging_fragmented_pool_same_tokens) {
    NEED_CUDA_DEVICE();
    char t[1024], d[1024];
    fragmented_invariance(failed_, "cuda", fixture("target", t, sizeof t), fixture("dspark", d, sizeof d), 5, 8, 90);
    if (*failed_) return;
    struct stat st;
    if (stat("models/blockspec-30m/config.json", &st) || stat("models/blockspec-30m-dflash/config.json", &st)) return;
    fragmented_invariance(failed_, "cuda", "models/blockspec-30m", "models/blockspec-30m-dflash", 6, 8, 90);
}

// The CPU kernels read keys and values through a page table exactly as from a contiguous cache: attention
// (causal, bidirectional, windowed; keys from position 0 and from unaligned window starts) and the span op,
// on every kernel path this CPU runs, with pages of 32, 64 and 128 rows out of order and NaN in the rows no
// key maps to.
TEST(kv_paging_cpu_attention_through_pages) {
    bs_rng r; bs_rng_seed(&r, 9);
    int paths = 0;
    for (int p = -1; p < BS_CPU_N_PATHS; p++) {
        bs_backend *be = p < 0 ? bs_backend_cpu(1) : bs_backend_cpu(0);
        if (p >= 0 && bs_cpu_install_path(be, (bs_cpu_path)p)) { be->destroy(be); continue; }
        paths++;
        const int nh = 8, nkv = 2, hd = 64, kd = nkv * hd, qd = nh * hd;
        for (int P = 32; P <= 128; P *= 2)
            for (int mode = 0; mode < 3; mode++)     // causal, bidirectional, causal with a window of 45
                for (int ci = 0; ci < 3; ci++) {
                    const int pos0 = (int[]){ 0, 97, 300 }[ci], n = (int[]){ 20, 1, 7 }[ci], keys = pos0 + n + (mode == 1 ? 3 : 0);
                    const int n_pages = (keys + P - 1) / P;
                    int32_t perm[64];
                    for (int i = 0; i < n_pages; i++) perm[i] = n_pages - 1 - i;
                    for (int i = 0; i + 2 < n_pages; i += 3) { int32_t x = perm[i]; perm[i] = perm[i + 2]; perm[i + 2] = x; }
                    float *k = malloc(sizeof(float) * keys * kd), *v = malloc(sizeof(float) * keys * kd), *q = malloc(sizeof(float) * n * qd);
                    float *pk = malloc(sizeof(float) * n_pages * P * kd), *pv = malloc(sizeof(float) * n_pages * P * kd);
                    float *oc = malloc(sizeof(float) * n * qd), *op = malloc(sizeof(float) * n * qd);
                    for (int i = 0; i < keys * kd; i++) { k[i] = (float)(bs_rng_uniform(&r) * 2 - 1); v[i] = (float)(bs_rng_uniform(&r) * 2 - 1); }
                    for (int i = 0; i < n * qd; i++) q[i] = (float)(bs_rng_uniform(&r) * 6 - 3);
                    for (int i = 0; i < n_pages * P * kd; i++) pk[i] = pv[i] = NAN;
                    const bs_kv_view contig = bs_kv_contig(k, v), paged = { pk, pv, perm, P };
                    for (int j = 0; j < keys; j++) {
                        memcpy(pk + bs_kv_row(&paged, j) * kd, k + (size_t)j * kd, sizeof(float) * kd);
                        memcpy(pv + bs_kv_row(&paged, j) * kd, v + (size_t)j * kd, sizeof(float) * kd);
                    }
                    const int causal = mode != 1, win = mode == 2 ? 45 : 0;
                    be->attention(be, oc, q, &contig, n, nh, nkv, hd, keys, pos0, causal, win);
                    be->attention(be, op, q, &paged, n, nh, nkv, hd, keys, pos0, causal, win);
                    CHECK(!memcmp(oc, op, sizeof(float) * n * qd), "path %d, %d-row pages, mode %d, %d rows at %d: paged attention differs", p, P, mode, n, pos0);
                    if (causal && !win) {   // the span op: two spans over the same cache, paged vs contiguous
                        bs_row_span sc[2] = { { 0, n, pos0, contig }, { n, 1, pos0 / 2, contig } }, sp[2] = { { 0, n, pos0, paged }, { n, 1, pos0 / 2, paged } };
                        float *q2 = malloc(sizeof(float) * (n + 1) * qd), *a = malloc(sizeof(float) * (n + 1) * qd), *b = malloc(sizeof(float) * (n + 1) * qd);
                        memcpy(q2, q, sizeof(float) * n * qd); memcpy(q2 + (size_t)n * qd, q, sizeof(float) * qd);
                        bs_attention_spans(be, a, q2, sc, 2, nh, nkv, hd);
                        bs_attention_spans(be, b, q2, sp, 2, nh, nkv, hd);
                        CHECK(!memcmp(a, b, sizeof(float) * (n + 1) * qd), "path %d, %d-row pages: paged span attention differs", p, P);
                        free(q2); free(a); free(b);
                    }
                    free(k); free(v); free(q); free(pk); free(pv); free(oc); free(op);
                }
        be->destroy(be);
    }
    CHECK(paths >= 2, "only %d kernel paths ran", paths);
}

// 10,000 short requests through a handle whose pool (16 pages) holds 16 of them at once, 48 submitted at a
// time, every 8th speculative, every 97th cancelled at once: the queue turns over thousands of times, and at
// the end every page is back and nothing is promised (under `make asan`, LeakSanitizer checks the rest).
TEST(kv_paging_ten_thousand_requests_no_leak) {
    char t[1024], d[1024], err[512];
    blockspec *bs;
    blockspec_open_options oo = { .kv_rows = 16 * 128 };
    CHECK(blockspec_open_ex(&bs, fixture("target", t, sizeof t), fixture("dspark", d, sizeof d), "cpu", &oo, err, sizeof err) == 0, "%s", err);
    enum { TOTAL = 10000, AT_ONCE = 48 };
    blockspec_request *live[AT_ONCE] = { 0 };
    int submitted = 0, finished = 0, most_waiting = 0;
    blockspec_params p = blockspec_default_params();
    p.n_new = 2;
    while (finished < TOTAL) {
        for (int k = 0; k < AT_ONCE && submitted < TOTAL; k++) {
            if (live[k]) continue;
            int32_t prompt[3] = { submitted % 300 + 1, 7, submitted % 11 + 2 };
            p.use_drafter = submitted % 8 == 0;
            CHECK(blockspec_submit(bs, prompt, 3, &p, NULL, NULL, &live[k], err, sizeof err) == 0, "request %d: %s", submitted, err);
            if (submitted % 97 == 0) blockspec_cancel(bs, live[k]);
            submitted++;
        }
        int left = blockspec_step(bs, err, sizeof err);
        CHECK(left >= 0, "%s", err);
        blockspec_kv_pages u;
        blockspec_kv_usage(bs, &u);
        CHECK(u.pages_in_use <= u.pages_promised && u.pages_promised <= 16, "pages: %d in use, %d promised", u.pages_in_use, u.pages_promised);
        int waiting = left - u.pages_promised;   // one page per started request
        if (waiting > most_waiting) most_waiting = waiting;
        for (int k = 0; k < AT_ONCE; k++) {
            if (!live[k] || !blockspec_request_done(live[k])) continue;
            blockspec_request_free(bs, live[k]);
            live[k] = NULL;
            finished++;
        }
    }
    blockspec_kv_pages u;
    blockspec_kv_usage(bs, &u);
    CHECK(u.pages_in_use == 0 && u.pages_promised == 0 && u.pages_total == 16, "after 10,000 requests: %d pages in use, %d promised", u.pages_in_use,
          u.pages_promised);
    CHECK(most_waiting > 0, "no request ever waited for pages: the pool was not the limit");
    blockspec_close(bs);
    printf("  %d requests, up to %d waiting for pages at once\n", TOTAL, most_waiting);
}
