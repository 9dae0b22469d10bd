// MLX's fast Hadamard transform (src/backend/hadamard.c) against its definition written out densely here:
// M = (1/sqrt(n)) (H_m^T (x) H_{2^k}) on row vectors, H_{2^k}[i][j] = (-1)^popcount(i & j); the base matrices'
// orthogonality and H_20 against the table in docs/dflash2.md 3.4; the backend op (CPU paths, CUDA) against
// the host transform; the R1 sign stream against values computed from the spec (docs/dflash2.md 3.5).
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "test_util_models.h"
#include "backend/hadamard.h"
#include "util/rng.h"

// Entry (i, j) of M for the decomposition t, in double: row i, column j of x -> x . M.
static double dense_entry(const bs_hadamard *t, int64_t i, int64_t j) {
    int64_t ai = i / t->p, bi = i % t->p, aj = j / t->p, bj = j % t->p;
    int sylvester = __builtin_popcountll((unsigned long long)(bi & bj)) & 1 ? -1 : 1;
    return t->h[aj * t->m + ai] * sylvester / sqrt((double)t->n);   // (H_m^T)[ai][aj] = H_m[aj][ai]
}

// y = x . M (transpose 0) or x . M^T in double, M from dense_entry.
static void dense_apply(const bs_hadamard *t, const float *x, double *y, int transpose) {
    for (int64_t j = 0; j < t->n; j++) {
        double s = 0;
        for (int64_t i = 0; i < t->n; i++) s += x[i] * (transpose ? dense_entry(t, j, i) : dense_entry(t, i, j));
        y[j] = s;
    }
}

static void random_row(bs_rng *r, float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(bs_rng_uniform(r) * 2 - 1);
}

TEST(hadamard_base_matrices_orthogonal) {
    static const int ms[3] = { 12, 20, 28 };
    int8_t h[BS_HADAMARD_MAX_M * BS_HADAMARD_MAX_M];
    for (int k = 0; k < 3; k++) {
        int m = ms[k];
        CHECK(bs_hadamard_base(m, h) == 0, "m = %d", m);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++) {
                int s = 0, st = 0;
                for (int c = 0; c < m; c++) { s += h[i * m + c] * h[j * m + c]; st += h[c * m + i] * h[c * m + j]; }
                CHECK(s == (i == j ? m : 0) && st == s, "H_%d: rows %d, %d dot %d (columns %d)", m, i, j, s, st);
            }
    }
    CHECK(bs_hadamard_base(16, h) == -1 && bs_hadamard_base(4, h) == -1);
}

// docs/dflash2.md 3.4, typed from the spec: the H_20 MLX hard-codes ('+' = +1, '-' = -1).
TEST(hadamard_h20_is_the_specs_table) {
    static const char *rows[20] = {
        "+----+----++--++-++-", "-+----+---+++---+-++", "--+----+---+++-+-+-+", "---+----+---+++++-+-", "----+----++--++-++-+",
        "-+++++-----+--+++--+", "+-+++-+---+-+--+++--", "++-++--+---+-+--+++-", "+++-+---+---+-+--+++", "++++-----++--+-+--++",
        "--++-+-++-+-----++++", "---++-+-++-+---+-+++", "+---++-+-+--+--++-++", "++---++-+----+-+++-+", "-++---++-+----+++++-",
        "-+--+--++-+----+----", "+-+-----++-+----+---", "-+-+-+---+--+----+--", "--+-+++------+----+-", "+--+--++------+----+",
    };
    int8_t h[400];
    CHECK(bs_hadamard_base(20, h) == 0);
    for (int r = 0; r < 20; r++)
        for (int c = 0; c < 20; c++) CHECK(h[r * 20 + c] == (rows[r][c] == '+' ? 1 : -1), "H_20[%d][%d]", r, c);
    int symmetric = 1;
    for (int r = 0; r < 20; r++) for (int c = 0; c < 20; c++) symmetric &= h[r * 20 + c] == h[c * 20 + r];
    CHECK(!symmetric, "H_20 is not symmetric (so M^T needs its own pass)");
}

TEST(hadamard_sizes) {
    static const struct { int64_t n; int m; int64_t p; } ok[] = {
        { 1, 1, 1 }, { 2, 1, 2 }, { 512, 1, 512 }, { 12, 12, 1 }, { 48, 12, 4 }, { 3072, 12, 256 },
        { 20, 20, 1 }, { 160, 20, 8 }, { 5120, 20, 256 }, { 28, 28, 1 }, { 56, 28, 2 }, { 3584, 28, 128 },
    };
    bs_hadamard t;
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        CHECK(bs_hadamard_init(&t, ok[i].n) == 0, "n = %lld", (long long)ok[i].n);
        CHECK(t.m == ok[i].m && t.p == ok[i].p, "n = %lld: m %d p %lld", (long long)ok[i].n, t.m, (long long)t.p);
    }
    static const int64_t bad[] = { 0, -4, 3, 6, 10, 36, 44, 60, 1000, 5000, 24 * 3 };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECK(bs_hadamard_init(&t, bad[i]) == -1, "n = %lld", (long long)bad[i]);
}

// The fast transform and its transpose equal the dense definition on small n of every kind; the transpose undoes it.
TEST(hadamard_matches_dense_small) {
    static const int64_t ns[] = { 1, 2, 16, 12, 48, 20, 160, 28, 56, 224 };
    bs_rng r; bs_rng_seed(&r, 11);
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        bs_hadamard t;
        int64_t n = ns[k];
        CHECK(bs_hadamard_init(&t, n) == 0);
        float x[256], y[256];
        double ref[256];
        for (int trial = 0; trial < 3; trial++) {
            random_row(&r, x, n);
            for (int tr = 0; tr < 2; tr++) {
                memcpy(y, x, sizeof(float) * n);
                bs_hadamard_row(&t, y, tr);
                dense_apply(&t, x, ref, tr);
                for (int64_t i = 0; i < n; i++) CHECK_NEAR(y[i], ref[i], 1e-5, "n %lld transpose %d element %lld", (long long)n, tr, (long long)i);
                bs_hadamard_row(&t, y, !tr);   // M M^T = M^T M = I
                for (int64_t i = 0; i < n; i++) CHECK_NEAR(y[i], x[i], 1e-5, "n %lld round trip %d element %lld", (long long)n, tr, (long long)i);
            }
        }
    }
}

// n = 5120 = 20 x 256 (Qwen3-14B/32B, Qwen3.8-27B): forward and transpose against the dense definition at random
// vectors, element by element (the dense matrix is never stored: entries are computed as the sums need them).
TEST(hadamard_5120_matches_dense) {
    bs_hadamard t;
    CHECK(bs_hadamard_init(&t, 5120) == 0 && t.m == 20 && t.p == 256);
    float *x = malloc(sizeof(float) * 5120), *y = malloc(sizeof(float) * 5120);
    double *ref = malloc(sizeof(double) * 5120);
    CHECK(x && y && ref);
    bs_rng r; bs_rng_seed(&r, 5120);
    double worst = 0;
    for (int trial = 0; trial < 2; trial++) {
        random_row(&r, x, 5120);
        for (int tr = 0; tr < 2; tr++) {
            memcpy(y, x, sizeof(float) * 5120);
            bs_hadamard_row(&t, y, tr);
            dense_apply(&t, x, ref, tr);
            for (int i = 0; i < 5120; i++) { double d = fabs(y[i] - ref[i]); if (d > worst) worst = d; }
        }
    }
    free(x); free(y); free(ref);
    printf("  n = 5120: worst |fast - dense| = %.3g\n", worst);
    CHECK(worst < 2e-5, "worst %g", worst);
}

// The backend op: rows with pre/post vectors, in place and out of place, on every CPU backend (cpu-ref, cpu) and
// CUDA where there is a GPU; each row equals post * T(pre * x) from the host transform.
static void op_against_host(int *failed_, bs_backend *be, int dim, int n) {
    bs_hadamard t;
    CHECK(bs_hadamard_init(&t, dim) == 0);
    size_t bytes = sizeof(float) * (size_t)n * dim;
    float *x = malloc(bytes), *want = malloc(bytes), *got = malloc(bytes), *pre = malloc(sizeof(float) * dim), *post = malloc(sizeof(float) * dim);
    CHECK(x && want && got && pre && post);
    bs_rng r; bs_rng_seed(&r, (uint64_t)dim * 31 + n);
    random_row(&r, x, (int64_t)n * dim);
    random_row(&r, pre, dim);
    random_row(&r, post, dim);
    bs_err err = {0};
    float *dx = be->alloc(be, bytes, &err), *dy = be->alloc(be, bytes, &err), *dpre = be->alloc(be, sizeof(float) * dim, &err),
          *dpost = be->alloc(be, sizeof(float) * dim, &err);
    CHECK(dx && dy && dpre && dpost, "%s", err.msg);
    be->upload(be, dpre, pre, sizeof(float) * dim);
    be->upload(be, dpost, post, sizeof(float) * dim);
    for (int variant = 0; variant < 4; variant++) {
        int tr = variant & 1, with_vecs = variant >> 1;
        for (int i = 0; i < n; i++) {
            float *w = want + (size_t)i * dim;
            memcpy(w, x + (size_t)i * dim, sizeof(float) * dim);
            if (with_vecs) for (int c = 0; c < dim; c++) w[c] *= pre[c];
            bs_hadamard_row(&t, w, tr);
            if (with_vecs) for (int c = 0; c < dim; c++) w[c] *= post[c];
        }
        be->upload(be, dx, x, bytes);
        be->hadamard_rows(be, dy, dx, n, dim, with_vecs ? dpre : NULL, with_vecs ? dpost : NULL, tr);   // out of place
        be->download(be, got, dy, bytes);
        CHECK(bs_backend_check(be, &err) == 0, "%s", err.msg);
        for (size_t i = 0; i < (size_t)n * dim; i++) CHECK(got[i] == want[i], "%s dim %d variant %d element %zu: %g vs %g", be->name, dim, variant, i, got[i], want[i]);
        be->hadamard_rows(be, dx, dx, n, dim, with_vecs ? dpre : NULL, with_vecs ? dpost : NULL, tr);   // in place
        be->download(be, got, dx, bytes);
        for (size_t i = 0; i < (size_t)n * dim; i++) CHECK(got[i] == want[i], "%s in place dim %d variant %d element %zu", be->name, dim, variant, i);
    }
    be->hadamard_rows(be, dy, dx, 1, 1000, NULL, NULL, 0);   // not m * 2^k: a fault, not a crash
    CHECK(bs_backend_check(be, &err) == -1 && strstr(err.msg, "1000"), "%s", err.msg);
    be->free(be, dx); be->free(be, dy); be->free(be, dpre); be->free(be, dpost);
    free(x); free(want); free(got); free(pre); free(post);
}

static void op_all_sizes(int *failed_, bs_backend *be) {
    static const int dims[] = { 16, 48, 160, 56, 512, 5120, 3072, 3584 };
    for (size_t i = 0; i < sizeof dims / sizeof *dims; i++)
        for (int n = 1; n <= 9; n += 8) { op_against_host(failed_, be, dims[i], n); if (*failed_) return; }
}

TEST(hadamard_rows_op_cpu) {
    for (int ref = 1; ref >= 0; ref--) {
        bs_backend *be = bs_backend_cpu(ref);
        op_all_sizes(failed_, be);
        be->destroy(be);
        if (*failed_) return;
    }
}

TEST(cuda_hadamard_rows_op) {
    const char *why;
    bs_backend *be = tu_cuda_open(&why);
    if (!be) SKIP(why);
    op_all_sizes(failed_, be);
    int big = 16384;   // a row past 48 KiB of shared memory
    if (!*failed_) op_against_host(failed_, be, big, 2);
    be->destroy(be);
}

// docs/dflash2.md 3.5: values computed from the spec's steps in 32-bit unsigned arithmetic (and equal to the
// seed's own JavaScript function run under node, checked when this test was written).
TEST(r1_signs_from_seed) {
    static const struct { uint32_t seed; const char *s; } want[] = {
        { 0, "+++-+--++-+-+--+-++-+++-+-+++-+-" },
        { 12345, "----+++-++++-+----++---+++-+++--" },
        { 0xdeadbeefu, "+---+++-----+--++-++--++++---+-+" },
    };
    float s[32];
    for (int k = 0; k < 3; k++) {
        bs_r1_signs_from_seed(want[k].seed, 32, s);
        for (int i = 0; i < 32; i++) CHECK(s[i] == (want[k].s[i] == '+' ? 1.0f : -1.0f), "seed %u sign %d", want[k].seed, i);
    }
}
