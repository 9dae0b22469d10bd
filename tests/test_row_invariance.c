// Greedy losslessness needs more than "close": a verify forward of n rows must give each row exactly
// the logits a one-row decode step gives it, or a near-tie could flip the argmax and speculative
// output would drift from plain decoding. Checked bitwise for every CPU kernel path.
#include <stdlib.h>
#include <string.h>
#include "util/tuning.h"
#include "harness.h"
#include "test_util_models.h"
#include "engine/engine.h"
#include "backend/cpu/cpu.h"
#include "util/rng.h"

static void check_invariance(int *failed_, const char *dir, const char *device) {
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, dir, device, &err) == 0, "%s", err.msg);
    int V = e->cfg.vocab_size, P = 9, N = 17;
    int32_t ids[32];
    bs_rng r; bs_rng_seed(&r, 4);
    for (int i = 0; i < P + N; i++) ids[i] = (int32_t)(bs_rng_u64(&r) % V);
    bs_kv_cache kv;
    CHECK(bs_kv_init(&kv, e->kv_pool, 64, &err) == 0, "%s", err.msg);
    float *block = malloc(sizeof(float) * N * V), *one = malloc(sizeof(float) * V);
    bs_fwd_out fb = { .logits = block, .logits_all = 1 }, fo = { .logits = one };
    CHECK(bs_qwen3_forward(&e->target, &kv, ids, P, NULL, &err) == 0, "%s", err.msg);
    for (int n = 1; n <= N; n++) {
        CHECK(bs_kv_rollback(&kv, P, &err) == 0);
        CHECK(bs_qwen3_forward(&e->target, &kv, ids + P, n, &fb, &err) == 0, "%s", err.msg);
        CHECK(bs_kv_rollback(&kv, P, &err) == 0);
        for (int i = 0; i < n; i++) {
            CHECK(bs_qwen3_forward(&e->target, &kv, ids + P + i, 1, &fo, &err) == 0, "%s", err.msg);
            CHECK(memcmp(one, block + (size_t)i * V, sizeof(float) * V) == 0,
                  "%s: row %d of a %d-row forward differs from the same row decoded alone", device, i, n);
        }
    }
    free(block); free(one);
    bs_kv_free(&kv);
    bs_engine_close(e);
}

TEST(row_invariance_fixture_target) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/target", bs_fixtures_dir());
    check_invariance(failed_, dir, "cpu-ref");
    check_invariance(failed_, dir, "cpu");
}

TEST(row_invariance_wide_target) {
    // Wide enough that every matmul kernel shape (row blocks, tails, threads) is exercised.
    const char *dir = tu_make_target(1000, 192, 2, 6, 2, 32, 520, 0, 1, 8);
    CHECK(dir);
    check_invariance(failed_, dir, "cpu");
}

// Op level, every fast path: matmul rows computed in an n-row call (n = 1..33, tails of every block shape,
// O not a multiple of 3 or 4, K not a multiple of 16) equal the same rows computed alone, bit for bit, and
// matmul_multi equals separate matmul calls; attention rows of an n-row causal call equal the row alone.
// One test per kernel path, so a path this CPU cannot run is reported as SKIP with the reason (it used to
// be dropped silently inside one test that then said "ok" for all of them).
static void ops_every_n(int *failed_, bs_cpu_path p) {
    if (!bs_cpu_path_supported(p)) {
        char why[160];
        snprintf(why, sizeof why, "this CPU cannot run the %s kernel path (missing instruction set)", bs_cpu_path_name(p));
        SKIP(why);
    }
    bs_rng r; bs_rng_seed(&r, 21);
    const int K = 1000, O = 389, NMAX = 33;
    {
        bs_backend *be = bs_backend_cpu(1);
        bs_cpu_install_path(be, p);
        for (int dt = 0; dt < 3; dt++) {
            size_t esz = bs_dtype_size(dt);
            uint8_t *w = malloc((size_t)O * K * esz), *w2 = malloc((size_t)O * K * esz);
            for (size_t i = 0; i < (size_t)O * K; i++) {
                float f = (float)(bs_rng_uniform(&r) * 2 - 1);
                if (dt == BS_F32) { ((float *)w)[i] = f; ((float *)w2)[i] = -f * 0.5f; }
                else if (dt == BS_BF16) { ((uint16_t *)w)[i] = bs_f32_to_bf16(f); ((uint16_t *)w2)[i] = bs_f32_to_bf16(f * 0.25f); }
                else { ((uint16_t *)w)[i] = (uint16_t)(0x3000 + (bs_rng_u64(&r) & 0x7ff)); ((uint16_t *)w2)[i] = (uint16_t)(0xb000 + (bs_rng_u64(&r) & 0x7ff)); }
            }
            bs_mat W = { w, dt, O, K }, W2 = { w2, dt, O - 7, K };
            float *x = malloc(sizeof(float) * NMAX * K), *yb = malloc(sizeof(float) * NMAX * O), *y1 = malloc(sizeof(float) * O);
            float *ym0 = malloc(sizeof(float) * NMAX * O), *ym1 = malloc(sizeof(float) * NMAX * O);
            for (int i = 0; i < NMAX * K; i++) x[i] = (float)(bs_rng_uniform(&r) * 2 - 1);
            for (int n = 1; n <= NMAX; n++) {
                be->matmul(be, yb, x, n, &W, 0);
                for (int i = 0; i < n; i++) {
                    be->matmul(be, y1, x + (size_t)i * K, 1, &W, 0);
                    CHECK(memcmp(y1, yb + (size_t)i * O, sizeof(float) * O) == 0, "path %s dt %d: matmul row %d of %d differs from the row alone",
                          bs_cpu_path_name(p), dt, i, n);
                }
                float *ys[2] = { ym0, ym1 };
                const bs_mat *ws[2] = { &W, &W2 };
                bs_matmul_multi(be, 2, ys, x, n, ws, 0);
                CHECK(memcmp(ym0, yb, sizeof(float) * n * O) == 0, "path %s dt %d n %d: matmul_multi differs from matmul", bs_cpu_path_name(p), dt, n);
                be->matmul(be, yb, x, n, &W2, 0);
                CHECK(memcmp(ym1, yb, sizeof(float) * n * (O - 7)) == 0, "path %s dt %d n %d: matmul_multi (2nd) differs", bs_cpu_path_name(p), dt, n);
            }
            free(w); free(w2); free(x); free(yb); free(y1); free(ym0); free(ym1);
        }
        // attention: 4 kv heads x G = 1, 2, 3 query heads (the 2-query-vector blocks and the single ones),
        // hd 64, 72 (a 32-wide tail of 8) and 12 (scalar d tails), 150 cached keys (+ key blocks of 4 and
        // single keys), 20 new rows (two query blocks), with and without a window
        static const int hds[] = { 64, 72, 12 };
        for (int cfg = 0; cfg < 9; cfg++) {
        int hd = hds[cfg % 3], G = 1 + cfg / 3;
        int nh = 4 * G, nkv = 4, P = 150, N = 20, keys = P + N;
        size_t qd = (size_t)nh * hd, kd = (size_t)nkv * hd;
        float *q = malloc(sizeof(float) * N * qd), *k = malloc(sizeof(float) * keys * kd), *v = malloc(sizeof(float) * keys * kd);
        float *ob = malloc(sizeof(float) * N * qd), *o1 = malloc(sizeof(float) * qd);
        const bs_kv_view kvc = bs_kv_contig(k, v);
        for (size_t i = 0; i < N * qd; i++) q[i] = (float)(bs_rng_uniform(&r) * 6 - 3);
        for (size_t i = 0; i < keys * kd; i++) { k[i] = (float)(bs_rng_uniform(&r) * 2 - 1); v[i] = (float)(bs_rng_uniform(&r) * 2 - 1); }
        for (int win = 0; win <= 40; win += 40)
            for (int n = 1; n <= N; n++) {
                be->attention(be, ob, q, &kvc, n, nh, nkv, hd, P + n, P, 1, win);
                for (int i = 0; i < n; i++) {
                    be->attention(be, o1, q + i * qd, &kvc, 1, nh, nkv, hd, P + i + 1, P + i, 1, win);
                    CHECK(memcmp(o1, ob + i * qd, sizeof(float) * qd) == 0, "path %s hd %d G %d: attention row %d of %d (window %d) differs from the row alone", bs_cpu_path_name(p), hd, G,
                          i, n, win);
                }
                // kv heads grouped per task (1, 3 and all 4 per task): the same bits
                if (n == 1 || n == 3 || n == N) {
                    float *og = malloc(sizeof(float) * n * qd);
                    static const int hgs[] = { 1, 3, 4 };
                    for (int h = 0; h < 3; h++) {
                        bs_tuning_edit()->cpu_att_heads_per_task = hgs[h];
                        be->attention(be, og, q, &kvc, n, nh, nkv, hd, P + n, P, 1, win);
                        bs_tuning_edit()->cpu_att_heads_per_task = 0;
                        CHECK(memcmp(og, ob, sizeof(float) * n * qd) == 0, "path %s hd %d G %d n %d: attention with %d kv heads per task differs", bs_cpu_path_name(p), hd, G, n, hgs[h]);
                    }
                    free(og);
                }
            }
        free(q); free(k); free(v); free(ob); free(o1);
        }
        // Long caches: rows across the fast path's 256-key segments (per-segment partials merged per row)
        // give the bits of the row alone, with windows inside one segment and across two.
        {
            int hd = 64, nh = 8, nkv = 4, P = 490, N = 40, keys = P + N;
            size_t qd = (size_t)nh * hd, kd = (size_t)nkv * hd;
            float *q = malloc(sizeof(float) * N * qd), *k = malloc(sizeof(float) * keys * kd), *v = malloc(sizeof(float) * keys * kd);
            float *ob = malloc(sizeof(float) * N * qd), *o1 = malloc(sizeof(float) * qd);
            const bs_kv_view kvc = bs_kv_contig(k, v);
            for (size_t i = 0; i < N * qd; i++) q[i] = (float)(bs_rng_uniform(&r) * 6 - 3);
            for (size_t i = 0; i < keys * kd; i++) { k[i] = (float)(bs_rng_uniform(&r) * 2 - 1); v[i] = (float)(bs_rng_uniform(&r) * 2 - 1); }
            static const int wins[] = { 0, 30, 300 }, ns[] = { 1, 2, 5, 17, 22, 40 };
            for (int wi = 0; wi < 3; wi++)
                for (int ni = 0; ni < 6; ni++) {
                    int n = ns[ni];
                    be->attention(be, ob, q, &kvc, n, nh, nkv, hd, P + n, P, 1, wins[wi]);
                    for (int i = 0; i < n; i++) {
                        be->attention(be, o1, q + i * qd, &kvc, 1, nh, nkv, hd, P + i + 1, P + i, 1, wins[wi]);
                        CHECK(memcmp(o1, ob + i * qd, sizeof(float) * qd) == 0, "path %s: long-cache attention row %d of %d (window %d) differs from the row alone",
                              bs_cpu_path_name(p), i, n, wins[wi]);
                    }
                    for (int hg = 1; hg <= 4; hg += 3) {
                        float *og = malloc(sizeof(float) * n * qd);
                        bs_tuning_edit()->cpu_att_heads_per_task = hg;
                        be->attention(be, og, q, &kvc, n, nh, nkv, hd, P + n, P, 1, wins[wi]);
                        bs_tuning_edit()->cpu_att_heads_per_task = 0;
                        CHECK(memcmp(og, ob, sizeof(float) * n * qd) == 0, "path %s n %d: long-cache attention with %d kv heads per task differs", bs_cpu_path_name(p), n, hg);
                        free(og);
                    }
                }
            free(q); free(k); free(v); free(ob); free(o1);
        }
        be->destroy(be);
    }
}
_Static_assert(BS_CPU_N_PATHS == 4, "a new CPU kernel path needs its row_invariance_ops_every_n_* test");
TEST(row_invariance_ops_every_n_scalar) { ops_every_n(failed_, BS_CPU_SCALAR); }
TEST(row_invariance_ops_every_n_avx2) { ops_every_n(failed_, BS_CPU_AVX2); }
TEST(row_invariance_ops_every_n_avx512) { ops_every_n(failed_, BS_CPU_AVX512); }
TEST(row_invariance_ops_every_n_avx512bf16) { ops_every_n(failed_, BS_CPU_AVX512BF16); }

// The avx512 path computes the AVX2 path's sums (cpu_matmul_avx512.c: two weight rows per zmm, lane for lane
// the AVX2 accumulators), so the two paths agree bit for bit: every dtype, 1-24 rows (the AVX2 blocks at 1-3,
// the paired zmm blocks from 4, row groups of 3 and 4), O not a multiple of the 6-row pair block, K with and
// without a tail past the 16-wide steps (up to 3072, down_proj's), accumulate on and off (larger calls run split
// over the pool).
TEST(cpu_avx512_matmul_equals_avx2) {
    if (!bs_cpu_path_supported(BS_CPU_AVX512)) SKIP("this CPU has no AVX-512F/BW/VL/DQ: the avx512 path cannot run here");
    bs_rng r; bs_rng_seed(&r, 33);
    static const int Ks[] = { 16, 100, 1000, 2100, 3072 }, Os[] = { 1, 5, 6, 7, 389 };
    {
        bs_backend *a = bs_backend_cpu(0), *b = bs_backend_cpu(0);
        bs_cpu_install_path(a, BS_CPU_AVX2);
        bs_cpu_install_path(b, BS_CPU_AVX512);
        for (int dt = 0; dt < 3; dt++)
            for (int ki = 0; ki < 5; ki++)
                for (int oi = 0; oi < 5; oi++) {
                    const int K = Ks[ki], O = Os[oi], NMAX = 24;
                    size_t esz = bs_dtype_size(dt);
                    uint8_t *w = malloc((size_t)O * K * esz);
                    float *x = malloc(sizeof(float) * NMAX * K), *ya = malloc(sizeof(float) * NMAX * O), *yb = malloc(sizeof(float) * NMAX * O);
                    for (size_t i = 0; i < (size_t)O * K; i++) {
                        float f = (float)(bs_rng_uniform(&r) * 2 - 1);
                        if (dt == BS_F32) ((float *)w)[i] = f;
                        else if (dt == BS_BF16) ((uint16_t *)w)[i] = bs_f32_to_bf16(f);
                        else ((uint16_t *)w)[i] = (uint16_t)(0x3000 + (bs_rng_u64(&r) & 0x7ff));
                    }
                    for (int i = 0; i < NMAX * K; i++) x[i] = (float)(bs_rng_uniform(&r) * 2 - 1);
                    bs_mat W = { w, dt, O, K };
                    for (int n = 1; n <= NMAX; n++)
                        for (int acc = 0; acc < 2; acc++) {
                            for (int i = 0; i < n * O; i++) ya[i] = yb[i] = (float)i * 0.25f;
                            a->matmul(a, ya, x, n, &W, acc);
                            b->matmul(b, yb, x, n, &W, acc);
                            CHECK(memcmp(ya, yb, sizeof(float) * n * O) == 0, "dt %d K %d O %d n %d acc %d: avx512 differs from avx2",
                                  dt, K, O, n, acc);
                        }
                    free(w); free(x); free(ya); free(yb);
                }
        a->destroy(a); b->destroy(b);
    }
}

// The AVX-512 attention kernels (cpu_attention.c) compute the AVX2 kernels' results bit for bit: head dims
// with and without tails past 64 and 8, GQA groups of 1-4 (pairs of query vectors and single ones), key
// counts with and without a tail past the 8-key blocks, 1-20 query rows (in place and chunk-copied), causal,
// bidirectional and windowed.
TEST(cpu_avx512_attention_equals_avx2) {
    if (!bs_cpu_path_supported(BS_CPU_AVX512)) SKIP("this CPU has no AVX-512F/BW/VL/DQ: the avx512 path cannot run here");
    bs_rng r; bs_rng_seed(&r, 34);
    bs_backend *a = bs_backend_cpu(0), *b = bs_backend_cpu(0);
    bs_cpu_install_path(a, BS_CPU_AVX2);
    bs_cpu_install_path(b, BS_CPU_AVX512);
    static const int hds[] = { 128, 64, 72, 12 }, Gs[] = { 1, 2, 3, 4 }, Ps[] = { 0, 13, 150 }, Ns[] = { 1, 3, 16, 20 };
    for (int hi = 0; hi < 4; hi++)
        for (int gi = 0; gi < 4; gi++)
            for (int pi = 0; pi < 3; pi++)
                for (int ni = 0; ni < 4; ni++)
                    for (int mode = 0; mode < 3; mode++) {   // causal, bidirectional, causal with a window of 37
                        const int hd = hds[hi], G = Gs[gi], P = Ps[pi], N = Ns[ni], nkv = 2, nh = nkv * G, keys = P + N;
                        const size_t qd = (size_t)nh * hd, kd = (size_t)nkv * hd;
                        float *q = malloc(sizeof(float) * N * qd), *k = malloc(sizeof(float) * keys * kd), *v = malloc(sizeof(float) * keys * kd);
                        float *oa = malloc(sizeof(float) * N * qd), *ob = malloc(sizeof(float) * N * qd);
                        const bs_kv_view kvc = bs_kv_contig(k, v);
                        for (size_t i = 0; i < N * qd; i++) q[i] = (float)(bs_rng_uniform(&r) * 6 - 3);
                        for (size_t i = 0; i < keys * kd; i++) { k[i] = (float)(bs_rng_uniform(&r) * 2 - 1); v[i] = (float)(bs_rng_uniform(&r) * 2 - 1); }
                        const int causal = mode != 1, win = mode == 2 ? 37 : 0;
                        a->attention(a, oa, q, &kvc, N, nh, nkv, hd, keys, P, causal, win);
                        b->attention(b, ob, q, &kvc, N, nh, nkv, hd, keys, P, causal, win);
                        CHECK(memcmp(oa, ob, sizeof(float) * N * qd) == 0, "hd %d G %d P %d N %d mode %d: avx512 attention differs from avx2",
                              hd, G, P, N, mode);
                        free(q); free(k); free(v); free(oa); free(ob);
                    }
    a->destroy(a); b->destroy(b);
}

// A ragged batch's attention in one call (attention_spans) equals one attention call per span, bit for
// bit: spans of 1..9 rows at different positions against their own caches.
TEST(row_invariance_attention_spans) {
    bs_backend *be = bs_backend_cpu(0);
    CHECK(be->attention_spans, "the fast CPU backend has no attention_spans");
    bs_rng r; bs_rng_seed(&r, 5);
    const int nH = 8, nKV = 2, hd = 32, S = 7, CTX = 300;
    int rows = 0;
    bs_row_span sp[S];
    float *kc[S], *vc[S];
    for (int i = 0; i < S; i++) {
        kc[i] = malloc(sizeof(float) * CTX * nKV * hd); vc[i] = malloc(sizeof(float) * CTX * nKV * hd);
        for (int k = 0; k < CTX * nKV * hd; k++) { kc[i][k] = (float)(bs_rng_uniform(&r) * 2 - 1); vc[i][k] = (float)(bs_rng_uniform(&r) * 2 - 1); }
        int n = 1 + i * 4 % 9, pos0 = (int)(bs_rng_u64(&r) % (CTX - 10));
        sp[i] = (bs_row_span){ rows, n, pos0, bs_kv_contig(kc[i], vc[i]) };
        rows += n;
    }
    float *q = malloc(sizeof(float) * rows * nH * hd), *a = malloc(sizeof(float) * rows * nH * hd), *b = malloc(sizeof(float) * rows * nH * hd);
    for (int k = 0; k < rows * nH * hd; k++) q[k] = (float)(bs_rng_uniform(&r) * 2 - 1);
    be->attention_spans(be, a, q, sp, S, nH, nKV, hd);
    for (int i = 0; i < S; i++)
        be->attention(be, b + (size_t)sp[i].row0 * nH * hd, q + (size_t)sp[i].row0 * nH * hd, &sp[i].kv, sp[i].n, nH, nKV, hd,
                      sp[i].pos0 + sp[i].n, sp[i].pos0, 1, 0);
    CHECK(!memcmp(a, b, sizeof(float) * rows * nH * hd), "attention_spans differs from per-span attention");
    for (int i = 0; i < S; i++) { free(kc[i]); free(vc[i]); }
    free(q); free(a); free(b);
    be->destroy(be);
}
