// Every fast CPU op against the scalar reference op, under every kernel path (scalar, avx2, avx512,
// avx512bf16), one test per path and op family (PER_PATH, at the end): paths the CPU lacks are SKIPPED.
//
// Tolerances (why these numbers):
// - matmul, exact paths: both sides accumulate in fp32 and differ only in summation order, so the
//   difference is bounded by ~K * 2^-24 * S where S = sum_i |x_i w_i| (the standard dot-product bound);
//   we require |fast - ref| <= 1e-5 * S + 1e-30, i.e. the brief's ~1e-5 relative, measured against S
//   (relative to the result itself is meaningless when it cancels to ~0). K <= 4096 in these tests and
//   observed errors are ~1e-7 * S.
// - matmul, avx512bf16: activations are rounded to bf16 (8 significant bits: relative error <= 2^-8 each),
//   so the bound is 2^-8 * S plus the fp32 part; we require <= (2^-8 + 1e-5) * S. Its worst observed error
//   is printed (~0.0037 S: with few terms the roundings can all fall one way).
// - rmsnorm / head_norm_rope: sum-of-squares order differs (relative ~dim * 2^-24 on the scale factor);
//   RoPE angles and cos/sin are computed exactly like the reference; tolerance 1e-5 * max|ref| + 1e-6.
// - swiglu / attention softmax: the AVX2 expf is within ~2 ulp of libm's; attention additionally sums
//   scores and p*v in another order: tolerance 2e-5 * max|v| (attention output is a convex combination of v).
// - add, embed, argmax, copy: exact.
#include <stdlib.h>
#include <string.h>
#include "util/tuning.h"
#include "model/rope.h"
#include "harness.h"
#include "backend/cpu/cpu.h"
#include "util/rng.h"

static float urand(bs_rng *r) { return (float)(bs_rng_uniform(r) * 2 - 1); }
static void fill(bs_rng *r, float *x, size_t n) { for (size_t i = 0; i < n; i++) x[i] = urand(r); }

static void *make_weight(bs_rng *r, bs_dtype dt, size_t n) {
    void *p = malloc(n * bs_dtype_size(dt) + 1);
    for (size_t i = 0; i < n; i++) {
        if (dt == BS_F32) ((float *)p)[i] = urand(r);
        else if (dt == BS_BF16) ((uint16_t *)p)[i] = bs_f32_to_bf16(urand(r));
        else {   // random normal f16: sign, exponent 8..16 (values 2^-7 .. 2^2), mantissa
            uint64_t u = bs_rng_u64(r);
            ((uint16_t *)p)[i] = (uint16_t)(((u & 1) << 15) | ((8 + (u >> 1) % 9) << 10) | ((u >> 8) & 0x3ff));
        }
    }
    return p;
}

// The backends under test: one per supported path (NULL where unsupported).
static bs_backend *path_backend(bs_cpu_path p) {
    if (!bs_cpu_path_supported(p)) {
        printf("  path %s: not supported by this CPU, skipped\n", bs_cpu_path_name(p));
        return NULL;
    }
    bs_backend *be = bs_backend_cpu(1);
    bs_cpu_install_path(be, p);
    return be;
}

static int check_matmul(bs_backend *ref, bs_backend *be, int exact, bs_rng *rng, int n, int K, int O,
                        bs_dtype dt, int acc, double *worst) {
    float *x = malloc(sizeof(float) * n * K + 4), *y0 = malloc(sizeof(float) * n * O + 4), *y1 = malloc(sizeof(float) * n * O + 4);
    void *w = make_weight(rng, dt, (size_t)O * K);
    fill(rng, x, (size_t)n * K);
    fill(rng, y0, (size_t)n * O);
    memcpy(y1, y0, sizeof(float) * n * O);
    bs_mat W = { w, dt, O, K };
    ref->matmul(ref, y0, x, n, &W, acc);
    be->matmul(be, y1, x, n, &W, acc);
    int ok = 1;
    for (int r = 0; r < n && ok; r++)
        for (int o = 0; o < O; o++) {
            double S = acc ? fabs(y1[r * O + o]) : 0;
            for (int k = 0; k < K; k++) S += fabs(x[r * K + k] * bs_load_elem(w, dt, (size_t)o * K + k));
            double d = fabs(y0[r * O + o] - y1[r * O + o]);
            double tol = (exact ? 1e-5 : 1.0 / 256 + 1e-5) * S + 1e-30;
            if (S > 0 && d / S > *worst) *worst = d / S;
            if (!(d <= tol)) {
                fprintf(stderr, "  matmul %s n=%d K=%d O=%d dt=%s acc=%d: y[%d][%d] ref %g fast %g (S %g)\n", be->name,
                        n, K, O, bs_dtype_name(dt), acc, r, o, y0[r * O + o], y1[r * O + o], S);
                ok = 0;
                break;
            }
        }
    free(x); free(y0); free(y1); free(w);
    return ok;
}

static void cpu_matmul_on(int *failed_, int only) {
    bs_backend *ref = bs_backend_cpu(1);
    bs_rng rng; bs_rng_seed(&rng, 7);
    int tested = 0;
    for (int p = 0; p < BS_CPU_N_PATHS; p++) {
        if (p != only) continue;
        bs_backend *be = path_backend(p);
        if (!be) continue;
        int exact = p != BS_CPU_AVX512BF16;
        double worst[3] = { 0, 0, 0 };
        for (int dt = 0; dt < 3; dt++) {
            // every n from 1 to 33 (decode, verify and drafter blocks, the 3-row grouping and its remainders)
            for (int n = 1; n <= 33; n++)
                CHECK(check_matmul(ref, be, exact, &rng, n, 97, 23, dt, n & 1, &worst[dt]));
            // odd and round shapes, vector tails (K % 16, K % 32), weight-row tails (O % 4), threaded splits
            static const int Ks[] = { 1, 15, 16, 31, 32, 64, 100, 257, 1024 };
            static const int Os[] = { 1, 3, 4, 5, 33, 130 };
            static const int Ns[] = { 1, 2, 3, 4, 8, 16 };
            for (int a = 0; a < 9; a++)
                for (int b = 0; b < 6; b++)
                    for (int c = 0; c < 6; c++)
                        if ((a + b + c) % 3 == 0 || Ns[c] <= 2)
                            CHECK(check_matmul(ref, be, exact, &rng, Ns[c], Ks[a], Os[b], dt, (a + c) & 1, &worst[dt]));
            // prefill: n > 32 rows in several L2 row tiles (K = 4096 gives 24-row tiles), threaded
            CHECK(check_matmul(ref, be, exact, &rng, 70, 4096, 37, dt, 0, &worst[dt]));
            CHECK(check_matmul(ref, be, exact, &rng, 45, 200, 9, dt, 1, &worst[dt]));
        }
        printf("  path %s: worst |fast-ref|/sum|x*w|: F32 %.2g BF16 %.2g F16 %.2g\n", be->name ? bs_cpu_path_name(p) : "",
               worst[0], worst[1], worst[2]);
        tested++;
        be->destroy(be);
    }
    ref->destroy(ref);
    CHECK(tested >= 1);
}

static double maxabs(const float *x, size_t n) { double m = 0; for (size_t i = 0; i < n; i++) if (fabs(x[i]) > m) m = fabs(x[i]); return m; }

#define NEAR_ARRAYS(a, b, n, tol) do { double tol_ = (tol); for (size_t i_ = 0; i_ < (size_t)(n); i_++) \
    CHECK_NEAR((a)[i_], (b)[i_], tol_, "at %zu (path %s)", i_, bs_cpu_path_name(p)); } while (0)

static void cpu_attention_on(int *failed_, int only) {
    bs_backend *ref = bs_backend_cpu(1);
    bs_rng rng; bs_rng_seed(&rng, 11);
    for (int p = 0; p < BS_CPU_N_PATHS; p++) {
        if (p != only) continue;
        bs_backend *be = path_backend(p);
        if (!be) continue;
        static const int groups[] = { 1, 2, 4, 8 };
        static const int hds[] = { 8, 12, 64, 128 };
        static const int nqs[] = { 1, 3, 17, 32 };
        for (int gi = 0; gi < 4; gi++)
            for (int hi = 0; hi < 4; hi++)
                for (int qi = 0; qi < 4; qi++)
                    for (int mode = 0; mode < 3; mode++) {   // 0 causal, 1 non-causal, 2 causal + window
                        int G = groups[gi], hd = hds[hi], n_q = nqs[qi];
                        int n_kv = (gi + hi) % 2 ? 2 : 1, n_heads = n_kv * G;
                        int q_pos0 = (qi * 37 + hi * 11) % 90, n_keys = q_pos0 + n_q;
                        if (mode == 1) n_keys += 5;
                        int window = mode == 2 ? 1 + (qi * 7 + gi) % 20 : 0;
                        size_t qn = (size_t)n_q * n_heads * hd, kn = (size_t)n_keys * n_kv * hd;
                        float *q = malloc(4 * qn), *k = malloc(4 * kn), *v = malloc(4 * kn);
                        float *o0 = malloc(4 * qn), *o1 = malloc(4 * qn);
                        fill(&rng, q, qn); fill(&rng, k, kn); fill(&rng, v, kn);
                        for (size_t i = 0; i < qn; i++) q[i] *= 3;   // peakier softmax
                        const bs_kv_view kv = bs_kv_contig(k, v);
                        ref->attention(ref, o0, q, &kv, n_q, n_heads, n_kv, hd, n_keys, q_pos0, mode != 1, window);
                        be->attention(be, o1, q, &kv, n_q, n_heads, n_kv, hd, n_keys, q_pos0, mode != 1, window);
                        double tol = 2e-5 * maxabs(v, kn);
                        int bad = -1;
                        for (size_t i = 0; i < qn && bad < 0; i++) if (!(fabs(o0[i] - o1[i]) <= tol)) bad = (int)i;
                        if (bad >= 0) fprintf(stderr, "  G=%d hd=%d n_q=%d n_kv=%d keys=%d pos0=%d mode=%d window=%d\n",
                                              G, hd, n_q, n_kv, n_keys, q_pos0, mode, window);
                        NEAR_ARRAYS(o0, o1, qn, tol);
                        free(q); free(k); free(v); free(o0); free(o1);
                    }
        // Long caches: key ranges across the fast path's 256-key segments (partials merged per row),
        // rows that start a segment, windows inside one segment and across two.
        static const int pos0s[] = { 250, 511, 700 }, nq2[] = { 1, 6, 20 }, wins[] = { 0, 20, 300 };
        for (int pi = 0; pi < 3; pi++)
            for (int qi = 0; qi < 3; qi++)
                for (int wi = 0; wi < 3; wi++) {
                    int G = 2, hd = 64, n_kv = 2, n_heads = 4, n_q = nq2[qi], q_pos0 = pos0s[pi], n_keys = q_pos0 + n_q;
                    size_t qn = (size_t)n_q * n_heads * hd, kn = (size_t)n_keys * n_kv * hd;
                    float *q = malloc(4 * qn), *k = malloc(4 * kn), *v = malloc(4 * kn), *o0 = malloc(4 * qn), *o1 = malloc(4 * qn);
                    fill(&rng, q, qn); fill(&rng, k, kn); fill(&rng, v, kn);
                    for (size_t i = 0; i < qn; i++) q[i] *= 3;
                    const bs_kv_view kv = bs_kv_contig(k, v);
                    ref->attention(ref, o0, q, &kv, n_q, n_heads, n_kv, hd, n_keys, q_pos0, 1, wins[wi]);
                    be->attention(be, o1, q, &kv, n_q, n_heads, n_kv, hd, n_keys, q_pos0, 1, wins[wi]);
                    double tol = 2e-5 * maxabs(v, kn);
                    int bad = -1;
                    for (size_t i = 0; i < qn && bad < 0; i++) if (!(fabs(o0[i] - o1[i]) <= tol)) bad = (int)i;
                    if (bad >= 0) fprintf(stderr, "  G=%d n_q=%d keys=%d pos0=%d window=%d\n", G, n_q, n_keys, q_pos0, wins[wi]);
                    NEAR_ARRAYS(o0, o1, qn, tol);
                    free(q); free(k); free(v); free(o0); free(o1);
                }
        be->destroy(be);
    }
    ref->destroy(ref);
}

static void cpu_small_ops_on(int *failed_, int only) {
    bs_backend *ref = bs_backend_cpu(1);
    bs_rng rng; bs_rng_seed(&rng, 5);
    for (int p = 0; p < BS_CPU_N_PATHS; p++) {
        if (p != only) continue;
        bs_backend *be = path_backend(p);
        if (!be) continue;
        for (int dt = 0; dt < 3; dt++) {
            // rmsnorm: odd and real dims, small and large n (threaded above 64K elements), with and without weight
            static const int dims[] = { 1, 7, 64, 129, 1024 };
            static const int ns[] = { 1, 5, 80 };
            for (int a = 0; a < 5; a++)
                for (int b = 0; b < 3; b++) {
                    int dim = dims[a], n = ns[b];
                    size_t m = (size_t)n * dim;
                    float *x = malloc(4 * m), *y0 = malloc(4 * m), *y1 = malloc(4 * m);
                    void *w = make_weight(&rng, dt, dim);
                    bs_mat W = { w, dt, 1, dim };
                    fill(&rng, x, m);
                    const bs_mat *wp = (a + b) % 4 ? &W : NULL;
                    ref->rmsnorm(ref, y0, x, n, dim, wp, 1e-6f);
                    be->rmsnorm(be, y1, x, n, dim, wp, 1e-6f);
                    NEAR_ARRAYS(y0, y1, m, 1e-5 * maxabs(y0, m) + 1e-6);
                    memcpy(y1, x, 4 * m);
                    be->rmsnorm(be, y1, y1, n, dim, wp, 1e-6f);   // in place (y aliases x)
                    NEAR_ARRAYS(y0, y1, m, 1e-5 * maxabs(y0, m) + 1e-6);
                    free(x); free(y0); free(y1); free(w);
                }
            // head_norm_rope: hd 8..256, positions near 0 and large, with and without the per-head norm
            static const int hds[] = { 8, 12, 64, 128, 256 };
            for (int a = 0; a < 5; a++)
                for (int b = 0; b < 3; b++) {
                    int hd = hds[a], n = ns[b], nh = 1 + (a + b) % 5, pos0 = b == 2 ? 0 : 1000 * a + 3;
                    size_t m = (size_t)n * nh * hd;
                    float *x0 = malloc(4 * m), *x1 = malloc(4 * m);
                    void *w = make_weight(&rng, dt, hd);
                    bs_mat W = { w, dt, 1, hd };
                    fill(&rng, x0, m);
                    memcpy(x1, x0, 4 * m);
                    const bs_mat *wp = (a + b) % 3 ? &W : NULL;
                    float theta = (a + b) % 2 ? 1000000.0f : 10000.0f, inv[128];
                    bs_rope_inv_freqs(theta, NULL, hd, inv);   // CPU backends: host memory is backend memory
                    ref->head_norm_rope(ref, x0, n, nh, hd, wp, 1e-6f, pos0, inv);
                    be->head_norm_rope(be, x1, n, nh, hd, wp, 1e-6f, pos0, inv);
                    NEAR_ARRAYS(x0, x1, m, 1e-5 * maxabs(x0, m) + 1e-6);
                    free(x0); free(x1); free(w);
                }
            // embed: exact widening
            {
                int rows = 50, D = 1 + dt * 67 + 8;
                void *t = make_weight(&rng, dt, (size_t)rows * D);
                bs_mat T = { t, dt, rows, D };
                int32_t ids[7] = { 0, 49, 3, 3, 17, 25, 1 };
                float *o0 = malloc(4 * 7 * D), *o1 = malloc(4 * 7 * D);
                ref->embed(ref, o0, &T, ids, 7);
                be->embed(be, o1, &T, ids, 7);
                CHECK(!memcmp(o0, o1, 4 * 7 * D), "embed %s", bs_dtype_name(dt));
                free(t); free(o0); free(o1);
            }
        }
        // swiglu (also in place, h aliasing gate) and add: sizes around the vector width and the threading threshold
        static const size_t sizes[] = { 1, 7, 8, 9, 3072, 3072 * 33 + 5, 600000 };
        for (int a = 0; a < 7; a++) {
            size_t n = sizes[a];
            float *g = malloc(4 * n), *u = malloc(4 * n), *h0 = malloc(4 * n), *h1 = malloc(4 * n);
            fill(&rng, g, n); fill(&rng, u, n);
            for (size_t i = 0; i < n; i++) g[i] *= 12;   // covers the saturated tails of silu
            if (n > 3) { g[0] = 95; g[1] = -95; g[2] = 0; }
            ref->swiglu(ref, h0, g, u, n);
            be->swiglu(be, h1, g, u, n);
            for (size_t i = 0; i < n; i++) CHECK_NEAR(h0[i], h1[i], 1e-5 * fabs(h0[i]) + 1e-30, "swiglu n=%zu i=%zu", n, i);
            be->swiglu(be, g, g, u, n);
            for (size_t i = 0; i < n; i++) CHECK_NEAR(h0[i], g[i], 1e-5 * fabs(h0[i]) + 1e-30, "swiglu in place");
            fill(&rng, h0, n);
            memcpy(h1, h0, 4 * n);
            ref->add(ref, h0, u, n);
            be->add(be, h1, u, n);
            CHECK(!memcmp(h0, h1, 4 * n), "add n=%zu", n);
            free(g); free(u); free(h0); free(h1);
        }
        // argmax: ties pick the first index; max in the vector part, in the tail, and at index 0
        static const int vocabs[] = { 1, 5, 8, 23, 1000, 151936 };
        for (int a = 0; a < 6; a++) {
            int V = vocabs[a], n = a == 5 ? 3 : 4;
            float *l = malloc(4 * (size_t)n * V);
            fill(&rng, l, (size_t)n * V);
            if (V > 10) { l[7] = 5; l[V - 2] = 5; }           // tie: first (7) wins
            if (n > 1) l[V + V - 1] = 9;                        // row 1: max in the tail
            if (n > 2) l[2 * V] = 9, l[2 * V + V / 2] = 9;      // row 2: max at index 0, tied later
            int32_t a0[4], a1[4];
            ref->argmax(ref, a0, l, n, V);
            be->argmax(be, a1, l, n, V);
            for (int r = 0; r < n; r++) CHECK(a0[r] == a1[r], "argmax V=%d row %d: %d vs %d", V, r, a0[r], a1[r]);
            free(l);
        }
        be->destroy(be);
    }
    ref->destroy(ref);
}

// The fast backend's weight copies (cpu_mem.c): same bytes at a new address in huge-page memory, the same
// matmul results bit for bit as the mmap view, the view itself with hugepages off (BS_CPU_HUGEPAGES=0); and its buffers of
// 2 MiB or more on a 2 MiB boundary, zeroed. The AnonHugePages check is informative only (the kernel may
// decline huge pages under memory fragmentation), printed but not asserted.
TEST(cpu_weight_copy_hugepages) {
    bs_rng rng; bs_rng_seed(&rng, 11);
    bs_tuning *t = bs_tuning_edit();
    int saved = t->cpu_hugepages;
    t->cpu_hugepages = 1;
    int want = bs_cpu_hugepages_wanted();
    bs_backend *be = bs_backend_cpu(0);
    t->cpu_hugepages = 0;   // BS_CPU_HUGEPAGES=0
    bs_backend *view = bs_backend_cpu(0);
    t->cpu_hugepages = saved;
    static const struct { int O, K; bs_dtype dt; } S[] = { { 3072, 1024, BS_BF16 }, { 37, 19, BS_F16 }, { 1, 1024, BS_F32 }, { 5, 3, BS_BF16 } };
    long long huge0 = bs_cpu_anon_huge_bytes();
    for (int s = 0; s < 4; s++) {
        size_t n = (size_t)S[s].O * S[s].K, bytes = n * bs_dtype_size(S[s].dt);
        void *w = make_weight(&rng, S[s].dt, n);
        bs_mat host = { w, S[s].dt, S[s].O, S[s].K }, a, b;
        CHECK(be->weight(be, &a, &host, NULL) == 0 && view->weight(view, &b, &host, NULL) == 0, "weight op");
        CHECK(b.data == w, "BS_CPU_HUGEPAGES=0 keeps the view");
        CHECK(a.rows == host.rows && a.cols == host.cols && a.dtype == host.dtype, "shape kept");
        CHECK(!memcmp(a.data, w, bytes), "copy has the same bytes");
        if (want) CHECK(a.data != w && ((uintptr_t)a.data & 63) == 0, "copied to 64-byte aligned arena memory");
        int rows = 7;
        float *x = malloc(sizeof(float) * rows * S[s].K), *y0 = malloc(sizeof(float) * rows * S[s].O), *y1 = malloc(sizeof(float) * rows * S[s].O);
        fill(&rng, x, (size_t)rows * S[s].K);
        be->matmul(be, y0, x, rows, &a, 0);
        view->matmul(view, y1, x, rows, &b, 0);
        CHECK(!memcmp(y0, y1, sizeof(float) * rows * S[s].O), "matmul on the copy == on the view");
        free(x); free(y0); free(y1);
        unsigned char first = ((const unsigned char *)w)[0];
        ((unsigned char *)w)[0] = first ^ 0xff;   // the copy must not alias the source
        if (want) CHECK(((const unsigned char *)a.data)[0] == first, "copy independent of the source");
        free(w);
    }
    if (want) CHECK(bs_cpu_weight_bytes_copied(be) == (3072 * 1024 + 37 * 19 + 1024 * 2 + 15) * 2, "bytes copied %zu",
                    bs_cpu_weight_bytes_copied(be));
    CHECK(bs_cpu_weight_bytes_copied(view) == 0, "view backend copied nothing");
    printf("  hugepages wanted %d, AnonHugePages %lld -> %lld bytes\n", want, huge0, bs_cpu_anon_huge_bytes());
    // Buffers: large ones 2 MiB-aligned when huge pages are on, all zeroed, any size freeable.
    static const size_t sz[] = { 1, 4096, (size_t)2 << 20, ((size_t)5 << 20) + 123 };
    for (int i = 0; i < 4; i++) {
        unsigned char *p = be->alloc(be, sz[i], NULL), *q = view->alloc(view, sz[i], NULL);
        CHECK(p && q, "alloc %zu", sz[i]);
        if (want && sz[i] >= ((size_t)2 << 20)) CHECK(((uintptr_t)p & (((size_t)2 << 20) - 1)) == 0, "2 MiB aligned");
        CHECK(((uintptr_t)q & 4095) == 0, "page aligned");
        for (size_t k = 0; k < sz[i]; k += 997) CHECK(!p[k] && !q[k], "zeroed");
        CHECK(!p[sz[i] - 1] && !q[sz[i] - 1], "zeroed end");
        memset(p, 1, sz[i]); memset(q, 1, sz[i]);
        be->free(be, p); view->free(view, q);
    }
    be->destroy(be);
    view->destroy(view);
}

// The most drafts a round verifies by default (backend.h, default_draft_max) follows the CPU path: 7 where
// the avx512 path's multi-row forwards make longer blocks pay (bench --round, session 14), 4 elsewhere.
static void cpu_default_draft_max_on(int *failed_, int only) {
    for (int p = 0; p < BS_CPU_N_PATHS; p++) {
        if (p != only) continue;
        bs_backend *be = bs_backend_cpu(0);
        bs_cpu_install_path(be, p);
        const int want = p == BS_CPU_AVX512 || p == BS_CPU_AVX512BF16 ? 7 : 4;
        CHECK(be->default_draft_max == want, "path %s: default_draft_max %d, expected %d", bs_cpu_path_name(p), be->default_draft_max, want);
        be->destroy(be);
    }
    bs_backend *ref = bs_backend_cpu(1);
    CHECK(ref->default_draft_max == 4, "cpu-ref: default_draft_max %d, expected 4", ref->default_draft_max);
    ref->destroy(ref);
}

// RoPE against an independent double-precision rotation whose inverse frequencies are transformers' fp32
// ones (float(1 / theta^(2i/hd))), at positions where a bf16-rounded inv_freq (relative error up to 2^-9)
// would turn the angle by up to ~pos * 2^-9 rad: every path, for the target's base and a drafter's alike.
static void cpu_rope_fp32_inv_freq_on(int *failed_, int only) {
    const int hd = 128, nh = 2, n = 3, pos0 = 4000;
    const float thetas[] = { 1e6f, 1e4f };
    for (int p = -1; p < BS_CPU_N_PATHS; p++) {
        if (p != only && !(p < 0 && only == BS_CPU_SCALAR)) continue;   // cpu-ref with the scalar path
        bs_backend *be = p < 0 ? bs_backend_cpu(1) : path_backend(p);
        if (!be) continue;
        for (int t = 0; t < 2; t++) {
            float x[n * nh * hd], x0[n * nh * hd];
            bs_rng rng; bs_rng_seed(&rng, 7);
            fill(&rng, x0, n * nh * hd);
            memcpy(x, x0, sizeof x);
            float table[hd / 2];
            bs_rope_inv_freqs(thetas[t], NULL, hd, table);
            be->head_norm_rope(be, x, n, nh, hd, NULL, 1e-6f, pos0, table);
            double worst = 0;
            for (int r = 0; r < n; r++)
                for (int h = 0; h < nh; h++)
                    for (int i = 0; i < hd / 2; i++) {
                        float inv = (float)(1.0 / pow((double)thetas[t], 2.0 * i / hd));
                        double ang = (double)(float)(pos0 + r) * (double)inv;
                        const float *a = x0 + (r * nh + h) * hd;
                        double e0 = a[i] * cos(ang) - a[i + hd / 2] * sin(ang), e1 = a[i + hd / 2] * cos(ang) + a[i] * sin(ang);
                        double d0 = fabs(e0 - x[(r * nh + h) * hd + i]), d1 = fabs(e1 - x[(r * nh + h) * hd + i + hd / 2]);
                        if (d0 > worst) worst = d0;
                        if (d1 > worst) worst = d1;
                    }
            // fp32 angle products (~pos * 2^-24 rad) and libm cos/sin: ~1e-4 at pos 4000; bf16 inv_freq: ~0.5
            CHECK(worst < 2e-3, "%s theta %g: RoPE off by %g from the fp32-inv_freq rotation", be->name, thetas[t], worst);
        }
        be->destroy(be);
    }
}

// One test per kernel path and op family: a path this CPU lacks is reported as SKIP with the reason,
// never folded into a passing test.
static void on_path(int *failed_, void (*fn)(int *, int), int p) {
    if (!bs_cpu_path_supported(p)) {
        char why[160];
        snprintf(why, sizeof why, "kernel path %s: not supported by this CPU", bs_cpu_path_name(p));
        SKIP(why);
    }
    fn(failed_, p);
}
#define PER_PATH(fn)                                                                   \
    TEST(fn##_scalar) { on_path(failed_, fn##_on, BS_CPU_SCALAR); }                    \
    TEST(fn##_avx2) { on_path(failed_, fn##_on, BS_CPU_AVX2); }                        \
    TEST(fn##_avx512) { on_path(failed_, fn##_on, BS_CPU_AVX512); }                    \
    TEST(fn##_avx512bf16) { on_path(failed_, fn##_on, BS_CPU_AVX512BF16); }
PER_PATH(cpu_matmul)
PER_PATH(cpu_attention)
PER_PATH(cpu_small_ops)
PER_PATH(cpu_default_draft_max)
PER_PATH(cpu_rope_fp32_inv_freq)
