// DFlash 2's backend ops (backend.h dyn_conv and topk) against independent loops written here from the
// definitions in docs/dflash2.md (double sums; sorting the whole row), on the CPU backends, and the CUDA
// backend against the CPU one (SKIPPED without a GPU). Also the host selector walk against a brute-force one.
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "test_util_models.h"
#include "backend/backend.h"
#include "model/selector.h"
#include "util/rng.h"

static float urand(bs_rng *r) { return (float)(bs_rng_uniform(r) * 2 - 1); }
static void fill(bs_rng *r, float *x, size_t n) { for (size_t i = 0; i < n; i++) x[i] = urand(r); }

// The convolution as the spec writes it: out[t][c] = sum_tau (base[tau][c] + D[t][tau][c / group]) * x[t - tau][c],
// x of a row before its block's first row = 0.
static void conv_naive(double *y, const float *x, int n, int dim, int block, int taps, const float *base, const float *dyn, int stride,
                       int group) {
    for (int t = 0; t < n; t++)
        for (int c = 0; c < dim; c++) {
            double s = 0;
            for (int tau = 0; tau < taps; tau++) {
                int src = t - tau;
                if (src < 0 || src / block != t / block) continue;   // across the block boundary: zero
                s += ((double)base[tau * dim + c] + dyn[(size_t)t * stride + tau * (dim / group) + c / group]) * x[(size_t)src * dim + c];
            }
            y[(size_t)t * dim + c] = s;
        }
}

// One conv case on a backend: y = conv, then y += conv again (accumulate); returns max |diff| vs the naive sums.
static double conv_case(bs_backend *be, int n, int dim, int block, int taps, int group, int stride_pad, uint64_t seed, float *out_host) {
    bs_rng r; bs_rng_seed(&r, seed);
    int stride = taps * (dim / group) + stride_pad;
    float *x = malloc(sizeof(float) * n * dim), *base = malloc(sizeof(float) * taps * dim), *dyn = malloc(sizeof(float) * n * stride);
    double *want = malloc(sizeof(double) * n * dim);
    fill(&r, x, (size_t)n * dim); fill(&r, base, (size_t)taps * dim); fill(&r, dyn, (size_t)n * stride);
    conv_naive(want, x, n, dim, block, taps, base, dyn, stride, group);
    bs_err err;
    float *dx = be->alloc(be, sizeof(float) * n * dim, &err), *db = be->alloc(be, sizeof(float) * taps * dim, &err);
    float *dd = be->alloc(be, sizeof(float) * n * stride, &err), *dy = be->alloc(be, sizeof(float) * n * dim, &err);
    be->upload(be, dx, x, sizeof(float) * n * dim); be->upload(be, db, base, sizeof(float) * taps * dim);
    be->upload(be, dd, dyn, sizeof(float) * n * stride);
    be->dyn_conv(be, dy, dx, n, dim, block, taps, db, dd, stride, group, 0);
    be->dyn_conv(be, dy, dx, n, dim, block, taps, db, dd, stride, group, 1);   // y = 2 conv
    be->download(be, out_host, dy, sizeof(float) * n * dim);
    double mx = 0;
    for (size_t i = 0; i < (size_t)n * dim; i++) { double e = fabs(out_host[i] - 2 * want[i]); if (!(e <= mx)) mx = e; }
    be->free(be, dx); be->free(be, db); be->free(be, dd); be->free(be, dy);
    free(x); free(base); free(dyn); free(want);
    return mx;
}

static const struct { int n, dim, block, taps, group, pad; } conv_cases[] = {
    { 8, 64, 8, 2, 16, 0 }, { 16, 64, 8, 2, 16, 3 },   // one block; two blocks, a padded coefficient row
    { 12, 48, 4, 3, 8, 0 }, { 5, 32, 5, 1, 32, 0 },    // three taps over blocks of 4; one tap, one group
    { 21, 96, 7, 2, 1, 1 },                            // group 1: a coefficient per channel
};

TEST(dflash2_op_dyn_conv_cpu) {
    const char *devs[] = { "cpu-ref", "cpu" };
    for (int d = 0; d < 2; d++) {
        bs_err err;
        bs_backend *be = bs_backend_by_name(devs[d], &err);
        CHECK(be, "%s", err.msg);
        for (size_t k = 0; k < sizeof conv_cases / sizeof *conv_cases; k++) {
            float *got = malloc(sizeof(float) * conv_cases[k].n * conv_cases[k].dim);
            double e = conv_case(be, conv_cases[k].n, conv_cases[k].dim, conv_cases[k].block, conv_cases[k].taps, conv_cases[k].group,
                                 conv_cases[k].pad, 100 + k, got);
            free(got);
            // fp32 products of O(1) values summed over <= 3 taps, twice: a few ulp of O(1)
            CHECK(e < 1e-5, "%s case %zu: |conv - naive| = %g", devs[d], k, e);
        }
        be->destroy(be);
    }
}

// The whole row sorted by (value desc, column asc), NaN as -infinity: the first k.
typedef struct { float v; int c; } vc;
static int vc_cmp(const void *a, const void *b) {
    const vc *x = a, *y = b;
    float xv = x->v != x->v ? -INFINITY : x->v, yv = y->v != y->v ? -INFINITY : y->v;
    return xv > yv ? -1 : xv < yv ? 1 : (x->c > y->c) - (x->c < y->c);
}
static void topk_naive(int32_t *ids, float *vals, const float *l, int vocab, int k, const int32_t *map) {
    vc *a = malloc(sizeof(vc) * vocab);
    for (int i = 0; i < vocab; i++) a[i] = (vc){ l[i], i };
    qsort(a, vocab, sizeof *a, vc_cmp);
    for (int j = 0; j < k; j++) { ids[j] = map ? map[a[j].c] : a[j].c; vals[j] = a[j].v; }
    free(a);
}

// Rows with ties (values on a coarse grid), a NaN, -inf; k up to the whole row.
static void topk_rows(bs_rng *r, float *l, int n, int vocab) {
    for (int i = 0; i < n * vocab; i++) l[i] = (float)((int)(bs_rng_uniform(r) * 40) - 20) * 0.25f;
    l[3] = NAN;
    if (n > 1) l[vocab + 1] = -INFINITY;
}

static int topk_case(bs_backend *be, int n, int vocab, int k, int with_map, uint64_t seed, int32_t *ids, float *vals, char *why, size_t cap) {
    bs_rng r; bs_rng_seed(&r, seed);
    float *l = malloc(sizeof(float) * n * vocab);
    int32_t *map = malloc(sizeof(int32_t) * vocab), *wi = malloc(sizeof(int32_t) * k);
    float *wv = malloc(sizeof(float) * k);
    topk_rows(&r, l, n, vocab);
    for (int i = 0; i < vocab; i++) map[i] = 3 * i + 1;
    bs_err err;
    float *dl = be->alloc(be, sizeof(float) * n * vocab, &err), *dv = be->alloc(be, sizeof(float) * n * k, &err);
    int32_t *di = be->alloc(be, sizeof(int32_t) * n * k, &err), *dm = be->alloc(be, sizeof(int32_t) * vocab, &err);
    be->upload(be, dl, l, sizeof(float) * n * vocab); be->upload(be, dm, map, sizeof(int32_t) * vocab);
    be->topk(be, di, dv, dl, n, vocab, k, with_map ? dm : NULL);
    be->download(be, ids, di, sizeof(int32_t) * n * k); be->download(be, vals, dv, sizeof(float) * n * k);
    int bad = 0;
    for (int i = 0; i < n && !bad; i++) {
        topk_naive(wi, wv, l + (size_t)i * vocab, vocab, k, with_map ? map : NULL);
        for (int j = 0; j < k && !bad; j++)
            if (ids[i * k + j] != wi[j] || memcmp(&vals[i * k + j], &wv[j], 4)) {
                snprintf(why, cap, "row %d entry %d: (%d, %g) vs naive (%d, %g)", i, j, ids[i * k + j], vals[i * k + j], wi[j], wv[j]);
                bad = 1;
            }
    }
    be->free(be, dl); be->free(be, dv); be->free(be, di); be->free(be, dm);
    free(l); free(map); free(wi); free(wv);
    return bad;
}

static const struct { int n, vocab, k, map; } topk_cases[] = { { 3, 384, 16, 0 }, { 7, 1000, 4, 1 }, { 2, 50, 50, 0 }, { 1, 5000, 1, 0 } };

TEST(dflash2_op_topk_cpu) {
    const char *devs[] = { "cpu-ref", "cpu" };
    for (int d = 0; d < 2; d++) {
        bs_err err;
        bs_backend *be = bs_backend_by_name(devs[d], &err);
        CHECK(be, "%s", err.msg);
        for (size_t k = 0; k < sizeof topk_cases / sizeof *topk_cases; k++) {
            int n = topk_cases[k].n, K = topk_cases[k].k;
            int32_t *ids = malloc(sizeof(int32_t) * n * K);
            float *vals = malloc(sizeof(float) * n * K);
            char why[256];
            int bad = topk_case(be, n, topk_cases[k].vocab, K, topk_cases[k].map, 7 + k, ids, vals, why, sizeof why);
            free(ids); free(vals);
            CHECK(!bad, "%s case %zu: %s", devs[d], k, why);
        }
        be->destroy(be);
    }
}

// The GPU's ops against the naive loops (as the CPU ones), and the conv bit for bit against the CPU reference
// (both compute each element as the same fp32 sum in the same order).
TEST(dflash2_op_cuda) {
    const char *why_not;
    bs_backend *gpu = tu_cuda_open(&why_not);
    if (!gpu) SKIP(why_not);
    bs_err err;
    bs_backend *cpu = bs_backend_by_name("cpu-ref", &err);
    for (size_t k = 0; k < sizeof conv_cases / sizeof *conv_cases; k++) {
        size_t sz = (size_t)conv_cases[k].n * conv_cases[k].dim;
        float *g = malloc(sizeof(float) * sz), *c = malloc(sizeof(float) * sz);
        double eg = conv_case(gpu, conv_cases[k].n, conv_cases[k].dim, conv_cases[k].block, conv_cases[k].taps, conv_cases[k].group,
                              conv_cases[k].pad, 100 + k, g);
        conv_case(cpu, conv_cases[k].n, conv_cases[k].dim, conv_cases[k].block, conv_cases[k].taps, conv_cases[k].group, conv_cases[k].pad, 100 + k, c);
        int same = memcmp(g, c, sizeof(float) * sz) == 0;
        free(g); free(c);
        CHECK(eg < 1e-5, "cuda conv case %zu: |conv - naive| = %g", k, eg);
        CHECK(same, "cuda conv case %zu differs from the CPU reference", k);
    }
    for (size_t k = 0; k < sizeof topk_cases / sizeof *topk_cases; k++) {
        int n = topk_cases[k].n, K = topk_cases[k].k;
        int32_t *ids = malloc(sizeof(int32_t) * n * K);
        float *vals = malloc(sizeof(float) * n * K);
        char why[256];
        int bad = topk_case(gpu, n, topk_cases[k].vocab, K, topk_cases[k].map, 7 + k, ids, vals, why, sizeof why);
        free(ids); free(vals);
        CHECK(!bad, "cuda topk case %zu: %s", k, why);
    }
    CHECK(bs_backend_check(gpu, &err) == 0, "%s", err.msg);
    cpu->destroy(cpu);
    gpu->destroy(gpu);
}

// The walk against a brute force written from the definition: scores in double, greedy = first maximum,
// sampled = the inverse CDF of softmax(s / T) at u; q sums to 1, one-hot when greedy.
TEST(dflash2_selector_walk) {
    enum { V = 40, R = 6, K = 5, N = 4 };
    bs_rng r; bs_rng_seed(&r, 3);
    float A[V * R], Bm[V * R], z[N * R], unary[N * K], work[2 * R], scores[N * K], q[N * K];
    int32_t cand[N * K], picks[N];
    fill(&r, A, V * R); fill(&r, Bm, V * R); fill(&r, z, N * R); fill(&r, unary, N * K);
    for (int p = 0; p < N; p++)
        for (int k = 0; k < K; k++) cand[p * K + k] = (p * 7 + k * 3) % V;
    bs_mat ma = { A, BS_F32, V, R }, mb = { Bm, BS_F32, V, R };
    bs_selector s = { K, R, &ma, &mb, V };
    double u[N] = { 0.1, 0.5, 0.93, 0.7 };
    for (int sampled = 0; sampled < 2; sampled++) {
        float T = sampled ? 0.7f : 0.0f;
        bs_selector_walk(&s, N, cand, unary, z, 11, T, u, work, picks, scores, q);
        int prev = 11;
        for (int p = 0; p < N; p++) {
            double sc[K], mx = -INFINITY, sum = 0, qs = 0;
            int best = 0;
            for (int k = 0; k < K; k++) {
                double e = 0;
                for (int j = 0; j < R; j++) e += (double)A[prev * R + j] * z[p * R + j] * Bm[cand[p * K + k] * R + j];
                sc[k] = unary[p * K + k] + e;
                CHECK_NEAR(scores[p * K + k], sc[k], 1e-5, "slot %d candidate %d", p, k);
                if (sc[k] > sc[best]) best = k;
                if (sc[k] > mx) mx = sc[k];
            }
            if (sampled) {
                for (int k = 0; k < K; k++) sum += exp((sc[k] - mx) / T);
                double acc = 0;
                best = K - 1;
                for (int k = 0; k < K; k++) {
                    double qk = exp((sc[k] - mx) / T) / sum;
                    CHECK_NEAR(q[p * K + k], qk, 1e-6, "slot %d q[%d]", p, k);
                    acc += qk;
                    if (u[p] < acc) { best = k; break; }
                }
            }
            for (int k = 0; k < K; k++) qs += q[p * K + k];
            CHECK_NEAR(qs, 1.0, 1e-6);
            if (!sampled) CHECK(q[p * K + best] == 1.0f, "greedy q is not one-hot at the pick");
            CHECK(picks[p] == cand[p * K + best], "%s slot %d: pick %d, brute force %d", sampled ? "sampled" : "greedy", p, picks[p], cand[p * K + best]);
            prev = picks[p];
        }
    }
}
