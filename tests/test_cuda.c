// The CUDA backend against the CPU reference ops (like ggml's test-backend-ops): every op on random
// inputs, batch invariance (a row computed in a block is bit-identical to the row computed alone),
// graph record/replay, the whole forward of a random model, the shared fixtures on the GPU and
// lossless greedy speculative verification. Without a usable GPU (or in a build without CUDA) every
// test here is SKIPPED with the reason printed, never reported as passed.
//
// Tolerances (max |gpu - ref| / max(1, max |ref|)):
//   matmul with bf16 weights: 2e-5 (activations enter the tensor cores as bf16 hi + bf16 lo: ~16
//   mantissa bits; fp32 accumulate in another order than the CPU); all other ops: 1e-5 (fp32, other
//   summation order). The fixtures use the CPU tests' own tolerance (1e-3 abs on logits and hidden
//   states); the random model's whole forward 1e-3 relative (errors compound over layers).
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/stat.h>
#include "harness.h"
#include "util/tuning.h"
#include "blockspec.h"
#include "backend/affine.h"
#include "io/quantize_ckpt.h"
#include "fixture_util.h"
#include "test_util_models.h"
#include "engine/engine.h"
#include "io/random_ckpt.h"
#include "model/rope.h"
#include "io/json.h"
#include "util/rng.h"
#include "backend/cuda/tiled_layout.h"

// One backend shared by the op tests (opened once; kept until the process ends).
static bs_backend *cuda_be(void) {
    static bs_backend *be; static int tried; static const char *why;
    if (!tried) { tried = 1; be = tu_cuda_open(&why); }
    if (!be) bs_test_skip(why);
    return be;
}
#define NEED_CUDA(be) bs_backend *be = cuda_be(); if (!be) return

static uint64_t rs = 88172645463325252ull;
static float frand(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (float)((rs >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f; }
static float *rand_vec(size_t n, float scale) { float *v = malloc(sizeof(float) * n); for (size_t i = 0; i < n; i++) v[i] = frand() * scale; return v; }
static void *rand_mat(bs_dtype dt, size_t n) {
    void *p = malloc(n * bs_dtype_size(dt));
    for (size_t i = 0; i < n; i++) {
        float f = frand();
        if (dt == BS_F32) ((float *)p)[i] = f;
        else if (dt == BS_BF16) ((uint16_t *)p)[i] = bs_f32_to_bf16(f);
        else { _Float16 h = (_Float16)f; memcpy((uint16_t *)p + i, &h, 2); }
    }
    return p;
}
static float *up(bs_backend *be, const float *h, size_t n) {
    bs_err err; float *d = be->alloc(be, n * 4 + 64, &err);
    if (d && h) be->upload(be, d, h, n * 4);
    return d;
}
static float *down(bs_backend *be, const float *d, size_t n) { float *h = malloc(n * 4); be->download(be, h, d, n * 4); return h; }
// A RoPE table in backend memory (be->free it): default (s NULL) or scaled frequencies.
static float *rope_dev(bs_backend *be, float theta, const bs_rope_scaling *s, int hd) {
    float inv[512];
    bs_rope_inv_freqs(theta, s, hd, inv);
    return up(be, inv, (size_t)hd / 2);
}
// Llama 3.1's scaling (factor 8, original context 8192): long wavelengths slowed, the middle blended.
static const bs_rope_scaling llama31 = { BS_ROPE_LLAMA3, 8.0, 1.0, 4.0, 8192 };
// K/V in pages (backend.h, bs_kv_view): a cache of n_pages pages of P rows whose page table is out of order
// (logical page i lives in storage page perm[i]), so a kernel that ignored the table would read wrong rows.
typedef struct paged { int n_pages, P; int32_t perm[256]; int32_t *dev; } paged;
static void paged_init(paged *pg, bs_backend *be, int rows, int P) {
    pg->P = P; pg->n_pages = (rows + P - 1) / P;
    for (int i = 0; i < pg->n_pages; i++) pg->perm[i] = pg->n_pages - 1 - i;              // reversed,
    for (int i = 0; i + 1 < pg->n_pages; i += 2) { int t = pg->perm[i]; pg->perm[i] = pg->perm[i + 1]; pg->perm[i + 1] = t; }   // then pairs swapped
    bs_err err;
    pg->dev = be->alloc(be, sizeof(int32_t) * pg->n_pages, &err);
    be->upload(be, pg->dev, pg->perm, sizeof(int32_t) * pg->n_pages);
}
// Host rows [rows][w] scattered into paged storage [n_pages * P][w] (the other rows: fill).
static float *paged_scatter(const paged *pg, const float *rows, int n, int w, float fill) {
    float *st = malloc(sizeof(float) * (size_t)pg->n_pages * pg->P * w);
    for (size_t i = 0; i < (size_t)pg->n_pages * pg->P * w; i++) st[i] = fill;
    for (int j = 0; j < n; j++) memcpy(st + ((size_t)pg->perm[j / pg->P] * pg->P + j % pg->P) * w, rows + (size_t)j * w, sizeof(float) * w);
    return st;
}
static bs_kv_view paged_view(const paged *pg, float *k, float *v) { return (bs_kv_view){ k, v, pg->dev, pg->P }; }

static double rel_err(const float *a, const float *ref, size_t n) {
    double mx = 1, d = 0;
    for (size_t i = 0; i < n; i++) { if (fabs(ref[i]) > mx) mx = fabs(ref[i]); }
    for (size_t i = 0; i < n; i++) { double e = fabs((double)a[i] - ref[i]); if (!(e <= d)) d = e; }   // NaN -> NaN
    return d / mx;
}

TEST(cuda_op_matmul) {
    NEED_CUDA(be);
    bs_backend *ref = bs_backend_cpu(1);
    bs_err err = {0};
    struct { int M, K; bs_dtype dt; } shapes[] = {
        { 64, 64, BS_BF16 }, { 384, 64, BS_BF16 }, { 1000, 72, BS_BF16 }, { 1024, 4096, BS_BF16 }, { 4096, 1024, BS_BF16 },
        { 200, 1536, BS_BF16 }, { 96, 80, BS_F32 }, { 96, 80, BS_F16 }, { 33, 36, BS_BF16 }, { 2, 64, BS_BF16 },
        { 130, 192, BS_BF16 }, { 1, 128, BS_BF16 },
    };
    int ns[] = { 1, 2, 7, 8, 9, 16, 17, 33, 64, 70 };
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        int M = shapes[si].M, K = shapes[si].K;
        bs_mat hw = { rand_mat(shapes[si].dt, (size_t)M * K), shapes[si].dt, M, K }, dw;
        CHECK(be->weight(be, &dw, &hw, &err) == 0, "%s", err.msg);
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
            int n = ns[ni];
            if ((size_t)M * K * n > 40000000 && n > 17) continue;   // keep the scalar reference quick
            for (int acc = 0; acc < 2; acc++) {
                float *x = rand_vec((size_t)n * K, 1), *y0 = rand_vec((size_t)n * M, 1), *y = malloc(sizeof(float) * n * M);
                memcpy(y, y0, sizeof(float) * n * M);
                ref->matmul(ref, y, x, n, &hw, acc);
                float *dx = up(be, x, (size_t)n * K), *dy = up(be, y0, (size_t)n * M);
                be->matmul(be, dy, dx, n, &dw, acc);
                float *g = down(be, dy, (size_t)n * M);
                double e = rel_err(g, y, (size_t)n * M);
                CHECK(e < 2e-5, "matmul M=%d K=%d %s n=%d acc=%d: rel err %g", M, K, bs_dtype_name(hw.dtype), n, acc, e);
                free(x); free(y0); free(y); free(g); be->free(be, dx); be->free(be, dy);
            }
        }
        free((void *)hw.data);
    }
    // an unaligned activation pointer takes the generic path
    {
        int M = 64, K = 64, n = 3;
        bs_mat hw = { rand_mat(BS_BF16, M * K), BS_BF16, M, K }, dw;
        CHECK(be->weight(be, &dw, &hw, &err) == 0, "%s", err.msg);
        float *x = rand_vec(n * K + 1, 1), *y = malloc(sizeof(float) * n * M);
        ref->matmul(ref, y, x + 1, n, &hw, 0);
        float *dx = up(be, x, n * K + 1), *dy = up(be, NULL, n * M);
        be->matmul(be, dy, dx + 1, n, &dw, 0);
        float *g = down(be, dy, n * M);
        CHECK(rel_err(g, y, n * M) < 2e-5, "unaligned matmul: %g", rel_err(g, y, n * M));
        free(x); free(y); free(g); free((void *)hw.data); be->free(be, dx); be->free(be, dy);
    }
    ref->destroy(ref);
}

// A row's result must not depend on how many rows are in the call (exact equality).
TEST(cuda_matmul_batch_invariant) {
    NEED_CUDA(be);
    bs_err err = {0};
    int shapes[][2] = { { 1024, 4096 }, { 4096, 4096 }, { 12288, 4096 }, { 4096, 12288 }, { 384, 64 } };
    for (int si = 0; si < 5; si++) {
        int M = shapes[si][0], K = shapes[si][1], n = 40;
        bs_mat hw = { rand_mat(BS_BF16, (size_t)M * K), BS_BF16, M, K }, dw;
        CHECK(be->weight(be, &dw, &hw, &err) == 0, "%s", err.msg);
        float *x = rand_vec((size_t)n * K, 1);
        float *dx = up(be, x, (size_t)n * K), *dy = up(be, NULL, (size_t)n * M), *d1 = up(be, NULL, M);
        be->matmul(be, dy, dx, n, &dw, 0);
        float *all = down(be, dy, (size_t)n * M);
        int rows[] = { 0, 5, 15, 16, 39 };
        for (int k = 0; k < 5; k++) {
            be->matmul(be, d1, dx + (size_t)rows[k] * K, 1, &dw, 0);
            float *one = down(be, d1, M);
            CHECK(!memcmp(one, all + (size_t)rows[k] * M, 4 * M), "M=%d K=%d: row %d alone differs from the row in a 40-row call", M, K, rows[k]);
            free(one);
        }
        // and against a 16-row call
        be->matmul(be, dy, dx, 16, &dw, 0);
        float *sixteen = down(be, dy, (size_t)16 * M);
        CHECK(!memcmp(sixteen, all, sizeof(float) * 16 * M), "M=%d K=%d: 16-row call differs from the 40-row call", M, K);
        free(sixteen); free(all); free(x); free((void *)hw.data); be->free(be, dx); be->free(be, dy); be->free(be, d1);
    }
}

// matmul_multi (q/k/v and gate/up in one launch) agrees with separate matmul calls (the tiled GEMM
// cuts the launch's combined work into blocks, so the summation order may differ from a lone call:
// 2e-5), and each of its rows is bit-identical to the same row in a 1-row matmul_multi (batch
// invariance, which greedy speculative == plain relies on).
// matmul_multi of `count` weights == count matmuls (~1e-5: the launch partitions the units differently),
// and a row alone == the row in the call, bit for bit.
static void multi_case(int *failed_, bs_backend *be, int count, const int *Ms, int K, int lossy) {
    bs_err err = {0};
    bs_mat hw[20], dw[20];
    const bs_mat *wp[20];
    for (int i = 0; i < count; i++) {
        hw[i] = (bs_mat){ rand_mat(BS_BF16, (size_t)Ms[i] * K), BS_BF16, Ms[i], K };
        CHECK((lossy ? be->weight_lossy(be, &dw[i], &hw[i], &err) : be->weight(be, &dw[i], &hw[i], &err)) == 0, "%s", err.msg);
        wp[i] = &dw[i];
    }
    int ns[] = { 1, 16, 70 };
    for (int ni = 0; ni < 3; ni++) {
        int n = ns[ni];
        float *x = rand_vec((size_t)n * K, 1), *dx = up(be, x, (size_t)n * K);
        float *ya[20], *yb[20], *y1[20];
        for (int i = 0; i < count; i++) { ya[i] = up(be, NULL, (size_t)n * Ms[i]); yb[i] = up(be, NULL, (size_t)n * Ms[i]); y1[i] = up(be, NULL, Ms[i]); }
        be->matmul_multi(be, count, ya, dx, n, wp, 0);
        for (int i = 0; i < count; i++) be->matmul(be, yb[i], dx, n, wp[i], 0);
        int last = n - 1;
        be->matmul_multi(be, count, y1, dx + (size_t)last * K, 1, wp, 0);
        for (int i = 0; i < count; i++) {
            float *a = down(be, ya[i], (size_t)n * Ms[i]), *b = down(be, yb[i], (size_t)n * Ms[i]), *o = down(be, y1[i], Ms[i]);
            double e = rel_err(a, b, (size_t)n * Ms[i]);
            CHECK(e < 2e-5, "%d weights%s: output %d (n=%d) vs matmul: rel err %g", count, lossy ? " (8-bit)" : "", i, n, e);
            CHECK(!memcmp(o, a + (size_t)last * Ms[i], sizeof(float) * Ms[i]), "%d weights: output %d: row %d of %d differs from the row alone", count, i, last, n);
            free(a); free(b); free(o); be->free(be, ya[i]); be->free(be, yb[i]); be->free(be, y1[i]);
        }
        free(x); be->free(be, dx);
    }
    for (int i = 0; i < count; i++) free((void *)hw[i].data);   // the device copies live as long as the backend
}

TEST(cuda_matmul_multi) {
    NEED_CUDA(be);
    int qkv[3] = { 4096, 1024, 1024 }, kv10[10], many[17];
    for (int i = 0; i < 10; i++) kv10[i] = 1024;
    for (int i = 0; i < 17; i++) many[i] = 128 + 64 * (i % 3);
    multi_case(failed_, be, 3, qkv, 4096, 0);            // q/k/v
    if (!*failed_) multi_case(failed_, be, 10, kv10, 4096, 0);   // a 5-layer drafter's context K/V: one launch
    if (!*failed_) multi_case(failed_, be, 10, kv10, 4096, 1);   // the same in 8 bits
    if (!*failed_) multi_case(failed_, be, 17, many, 512, 0);    // more than one launch takes: one by one
}

// q/k/v with the attention inputs' step in the q/k/v fixup (backend op qkv_norm_rope_store) == matmul_multi
// + qk_norm_rope_store, bit for bit: q, k, v, and the K/V cache rows (others untouched), for 1, 3, 16 and 70
// rows (70: two launches, the second at pos0 + 64), BF16 and 8-bit weights. The shapes (128-wide heads,
// 8 tiles of 8 or 16 units) are ones the CUDA backend fuses on any GPU, so a declined call fails here.
TEST(cuda_qkv_norm_rope_store) {
    NEED_CUDA(be);
    CHECK(be->qkv_norm_rope_store, "the CUDA backend has no qkv_norm_rope_store");
    if (!be->qkv_norm_rope_store) return;
    bs_err err = {0};
    const int hd = 128, nh = 4, nkv = 2, ctx = 160, kd = nkv * hd;
    int calls = 0, compared = 0;
    for (int lossy = 0; lossy < 2; lossy++) {
        const int K = lossy ? 1024 : 512, Ms[3] = { nh * hd, kd, kd };
        bs_mat hw[3], dw[3];
        const bs_mat *wp[3];
        for (int i = 0; i < 3; i++) {
            hw[i] = (bs_mat){ rand_mat(BS_BF16, (size_t)Ms[i] * K), BS_BF16, Ms[i], K };
            CHECK((lossy ? be->weight_lossy(be, &dw[i], &hw[i], &err) : be->weight(be, &dw[i], &hw[i], &err)) == 0, "%s", err.msg);
            wp[i] = &dw[i];
        }
        bs_mat qn = { rand_mat(BS_BF16, hd), BS_BF16, 1, hd }, kn = { rand_mat(BS_BF16, hd), BS_BF16, 1, hd }, dqn, dkn;
        CHECK(be->weight(be, &dqn, &qn, &err) == 0 && be->weight(be, &dkn, &kn, &err) == 0, "%s", err.msg);
        const int ns[] = { 1, 3, 16, 70 };
        float *rope = rope_dev(be, 5e5f, &llama31, hd);
        for (int ni = 0; ni < 4 && !*failed_; ni++, calls++) {
            // odd calls: a Llama layer (no q/k norm)
            const bs_mat *qnp = ni % 2 ? NULL : &dqn, *knp = ni % 2 ? NULL : &dkn;
            const int n = ns[ni], pos0 = 5 + ni;
            float *x = rand_vec((size_t)n * K, 1), *c0 = rand_vec((size_t)ctx * kd, 1), *dx = up(be, x, (size_t)n * K);
            float *o[2][5];   // q, k, v, kcache, vcache: [0] separate ops, [1] fused
            const size_t sz[5] = { (size_t)n * Ms[0], (size_t)n * kd, (size_t)n * kd, (size_t)ctx * kd, (size_t)ctx * kd };
            for (int f = 0; f < 2; f++) {
                for (int i = 0; i < 3; i++) o[f][i] = up(be, NULL, sz[i]);
                o[f][3] = up(be, c0, sz[3]); o[f][4] = up(be, c0, sz[4]);
            }
            // the caches in 32-row pages out of order (ctx = 5 pages): both paths write through the page table
            paged pg;
            paged_init(&pg, be, ctx, 32);
            const bs_kv_view kv0 = paged_view(&pg, o[0][3], o[0][4]), kv1 = paged_view(&pg, o[1][3], o[1][4]);
            be->matmul_multi(be, 3, o[0], dx, n, wp, 0);
            be->qk_norm_rope_store(be, o[0][0], o[0][1], o[0][2], n, nh, nkv, hd, qnp, knp, 1e-6f, pos0, rope, &kv0);
            int r = be->qkv_norm_rope_store(be, dx, n, wp, o[1][0], o[1][1], o[1][2], nh, nkv, hd, qnp, knp, 1e-6f, pos0, rope, &kv1);
            // (row-major weights, BS_CUDA_MM=old: nothing to fuse, and the model runs the two ops)
            CHECK(r == 0 || !dw[0].layout, "qkv_norm_rope_store declined a shape it fuses (%d rows%s)", n, lossy ? ", 8-bit" : "");
            compared += r == 0;
            for (int i = 0; i < 5; i++) {
                float *a = down(be, o[0][i], sz[i]), *b = down(be, o[1][i], sz[i]);
                CHECK(r || !memcmp(a, b, sizeof(float) * sz[i]), "qkv_norm_rope_store (%d rows%s): output %d differs from matmul_multi + qk_norm_rope_store",
                      n, lossy ? ", 8-bit" : "", i);
                free(a); free(b);
                be->free(be, o[0][i]); be->free(be, o[1][i]);
            }
            free(x); free(c0); be->free(be, dx);
            be->free(be, pg.dev);
        }
        for (int i = 0; i < 3; i++) free((void *)hw[i].data);
        free((void *)qn.data); free((void *)kn.data);
        be->free(be, rope);
    }
    // Row-major weights (BS_CUDA_MM=old): the op declines every call and nothing was compared; say so
    // rather than pass (the unfused ops are held to the CPU by cuda_forward_random_model_vs_cpu).
    if (!*failed_ && compared == 0) SKIP("BS_CUDA_MM=old: row-major weights, qkv_norm_rope_store declined all calls, nothing to compare");
    printf("  %d of %d calls fused and compared\n", compared, calls);
}

// The down projection with SwiGLU fused in (bs_swiglu_matmul: the backend's fused op where it takes the
// case, else swiglu + matmul): bit-identical to swiglu + matmul on the same backend (the same fp32
// activation, the same GEMM order), close to the CPU reference, and batch invariant (a row computed
// alone, where the fused op runs, equals the row in a 16- or 40-row call, where it may decline).
// Rows the CUDA backend fuses into the down projection: 1, or BS_CUDA_SWIGLU_ROWS (its A/B switch;
// tests/gpu/run_device.sh runs the fused-SwiGLU tests once more with 8).
static int swiglu_fused_rows(void) { return bs_tuning_get()->cuda_swiglu_rows; }

TEST(cuda_swiglu_matmul) {
    NEED_CUDA(be);
    bs_backend *ref = bs_backend_cpu(1);
    bs_err err = {0};
    int shapes[][2] = { { 4096, 12288 }, { 130, 192 }, { 64, 64 } };
    for (int si = 0; si < 3; si++) {
        int M = shapes[si][0], K = shapes[si][1];
        bs_mat hw = { rand_mat(BS_BF16, (size_t)M * K), BS_BF16, M, K }, dw;
        CHECK(be->weight(be, &dw, &hw, &err) == 0, "%s", err.msg);
        int ns[] = { 1, 5, 16, 40 };
        for (int ni = 0; ni < 4; ni++) {
            int n = ns[ni];
            if ((size_t)M * K * n > 40000000 && n > 17) continue;   // keep the scalar reference quick
            float *g = rand_vec((size_t)n * K, 3), *u = rand_vec((size_t)n * K, 1), *y0 = rand_vec((size_t)n * M, 1);
            float *h = malloc(sizeof(float) * n * K), *yr = malloc(sizeof(float) * n * M);
            memcpy(yr, y0, sizeof(float) * n * M);
            ref->swiglu(ref, h, g, u, (size_t)n * K); ref->matmul(ref, yr, h, n, &hw, 1);
            float *dg = up(be, g, (size_t)n * K), *dg1 = up(be, g + (size_t)(n - 1) * K, K), *du = up(be, u, (size_t)n * K);
            float *dy = up(be, y0, (size_t)n * M), *dh = up(be, NULL, (size_t)n * K), *dy2 = up(be, y0, (size_t)n * M);
            float *d1 = up(be, y0 + (size_t)(n - 1) * M, M);
            if (n <= swiglu_fused_rows() && dw.layout)   // where the CUDA backend fuses (tiled weights)
                CHECK(be->swiglu_matmul && be->swiglu_matmul(be, dy, dg, du, n, &dw, 1) == 0, "no fused swiglu_matmul at n=%d", n);
            else
                bs_swiglu_matmul(be, dy, dg, du, n, &dw, 1);            // (dg may now hold the activation)
            be->upload(be, dg, g, sizeof(float) * n * K);
            be->swiglu(be, dh, dg, du, (size_t)n * K); be->matmul(be, dy2, dh, n, &dw, 1);
            bs_swiglu_matmul(be, d1, dg1, du + (size_t)(n - 1) * K, 1, &dw, 1);
            float *a = down(be, dy, (size_t)n * M), *b = down(be, dy2, (size_t)n * M), *o = down(be, d1, M);
            double e = rel_err(a, yr, (size_t)n * M);
            CHECK(e < 2e-5, "swiglu_matmul M=%d K=%d n=%d vs CPU: rel err %g", M, K, n, e);
            CHECK(!memcmp(a, b, sizeof(float) * n * M), "swiglu_matmul M=%d K=%d n=%d differs from swiglu + matmul", M, K, n);
            CHECK(!memcmp(o, a + (size_t)(n - 1) * M, sizeof(float) * M), "swiglu_matmul M=%d K=%d: the last of %d rows differs from the row alone", M, K, n);
            free(g); free(u); free(y0); free(h); free(yr); free(a); free(b); free(o);
            be->free(be, dg); be->free(be, dg1); be->free(be, du); be->free(be, dy); be->free(be, dh); be->free(be, dy2); be->free(be, d1);
        }
        free((void *)hw.data);
    }
    ref->destroy(ref);
}

// 8-bit weights (weight_lossy, tiled_layout.h): the quantizer keeps every weight within half a code step
// of its row-scaled value (and a row's largest exactly), and the GEMM computes exactly x (rounded to
// bf16) . the dequantized weights, to fp32 summation order (2e-5), for 1..70 rows, with accumulate;
// a row's result does not depend on the rows around it (bit for bit); q/k/v-style multi launches and
// the fused SwiGLU down projection agree with the plain ops.
static float *dequant_t8(bs_backend *be, const bs_mat *dw) {
    const int64_t M = dw->rows, K = dw->cols, Mp = (M + 127) / 128 * 128;
    unsigned char *raw = malloc((size_t)(Mp * K + Mp * 4));
    be->download(be, raw, dw->data, (size_t)(Mp * K + Mp * 4));
    const float *scale = (const float *)(raw + Mp * K);
    float *w = malloc(sizeof(float) * M * K);
    for (int64_t r = 0; r < M; r++)
        for (int64_t k = 0; k < K; k++) w[r * K + k] = scale[r] * t8_decode(raw[t8_index(r, k, K)]);
    free(raw);
    return w;
}

TEST(cuda_matmul_fp8) {
    NEED_CUDA(be);
    bs_backend *ref = bs_backend_cpu(1);
    bs_err err = {0};
    CHECK(be->weight_lossy, "the CUDA backend has no weight_lossy");
    int shapes[][2] = { { 4096, 4096 }, { 1024, 4096 }, { 130, 256 }, { 2, 128 }, { 4096, 12288 } };
    for (int si = 0; si < 5; si++) {
        int M = shapes[si][0], K = shapes[si][1];
        bs_mat hw = { rand_mat(BS_BF16, (size_t)M * K), BS_BF16, M, K }, dw;
        CHECK(be->weight_lossy(be, &dw, &hw, &err) == 0, "%s", err.msg);
        CHECK(dw.layout != 0, "%dx%d: not stored in 8 bits", M, K);
        float *wq = dequant_t8(be, &dw);
        double worst = 0;
        for (int64_t r = 0; r < M; r++) {
            double mx = 0, mq = 0;
            for (int64_t k = 0; k < K; k++) { double v = fabs(bs_bf16_to_f32(((uint16_t *)hw.data)[r * K + k])); if (v > mx) mx = v; }
            double sc = mx / 1.875;
            for (int64_t k = 0; k < K; k++) {
                double w = bs_bf16_to_f32(((uint16_t *)hw.data)[r * K + k]), e = fabs(wq[r * K + k] - w);
                double bound = sc * (fabs(w) / sc / 16 + 0x1p-15) * (1 + 1e-6) + 1e-30;
                if (e / bound > worst) worst = e / bound;
                if (fabs(wq[r * K + k]) > mq) mq = fabs(wq[r * K + k]);
            }
            CHECK(fabs(mq - mx) <= 1e-6 * mx, "%dx%d row %lld: largest |w| %g stored as %g", M, K, (long long)r, mx, mq);
        }
        CHECK(worst <= 1, "%dx%d: a weight is %.3g half-steps from its code", M, K, worst);
        bs_mat fw = { wq, BS_F32, M, K };
        int ns[] = { 1, 5, 16, 40, 70 };
        float *alone = NULL, *xa = rand_vec((size_t)70 * K, 2), *ya = rand_vec((size_t)70 * M, 1);
        for (int ni = 0; ni < 5; ni++) {
            int n = ns[ni];
            if ((size_t)M * K * n > 60000000 && n > 17) continue;   // keep the scalar reference quick
            float *x = xa, *xr = malloc(sizeof(float) * n * K), *y0 = ya;   // every call starts with the same rows
            for (size_t i = 0; i < (size_t)n * K; i++) xr[i] = bs_bf16_to_f32(bs_f32_to_bf16(x[i]));
            float *yr = malloc(sizeof(float) * n * M);
            memcpy(yr, y0, sizeof(float) * n * M);
            ref->matmul(ref, yr, xr, n, &fw, 1);
            float *dx = up(be, x, (size_t)n * K), *dy = up(be, y0, (size_t)n * M);
            be->matmul(be, dy, dx, n, &dw, 1);
            float *g = down(be, dy, (size_t)n * M);
            double e = rel_err(g, yr, (size_t)n * M);
            CHECK(e < 2e-5, "8-bit matmul %dx%d n=%d vs CPU on the dequantized weights: rel err %g", M, K, n, e);
            // the first row alone (from y0's first row) vs the first row of every call
            if (!alone) {
                float *d1 = up(be, y0, M), *x1 = up(be, x, K);
                be->matmul(be, d1, x1, 1, &dw, 1);
                alone = down(be, d1, M);
                be->free(be, d1); be->free(be, x1);
            }
            CHECK(!memcmp(alone, g, sizeof(float) * M), "8-bit matmul %dx%d: row 0 of a %d-row call differs from the row alone", M, K, n);
            free(xr); free(yr); free(g); be->free(be, dx); be->free(be, dy);
        }
        free(xa); free(ya);
        if (K == 12288) {   // the fused SwiGLU down projection == swiglu + matmul
            int n = swiglu_fused_rows() >= 5 ? 5 : 1;
            float *gt = rand_vec((size_t)n * K, 3), *u = rand_vec((size_t)n * K, 1);
            float *dg = up(be, gt, (size_t)n * K), *du = up(be, u, (size_t)n * K), *dh = up(be, NULL, (size_t)n * K);
            float *dy = up(be, NULL, (size_t)n * M), *dy2 = up(be, NULL, (size_t)n * M);
            CHECK(be->swiglu_matmul && be->swiglu_matmul(be, dy, dg, du, n, &dw, 0) == 0, "no fused swiglu_matmul on an 8-bit weight");
            be->swiglu(be, dh, dg, du, (size_t)n * K); be->matmul(be, dy2, dh, n, &dw, 0);
            float *a = down(be, dy, (size_t)n * M), *b = down(be, dy2, (size_t)n * M);
            CHECK(!memcmp(a, b, sizeof(float) * n * M), "8-bit swiglu_matmul differs from swiglu + matmul");
            free(gt); free(u); free(a); free(b);
            be->free(be, dg); be->free(be, du); be->free(be, dh); be->free(be, dy); be->free(be, dy2);
        }
        free(alone); free(wq); free((void *)hw.data);
    }
    // q/k/v-shaped multi launch of 8-bit weights vs one matmul each
    {
        int Ms[3] = { 4096, 1024, 1024 }, K = 4096, n = 16;
        bs_mat hw[3], dw[3];
        const bs_mat *pw[3];
        float *dys[3], *dsep[3];
        float *x = rand_vec((size_t)n * K, 2), *dx = up(be, x, (size_t)n * K);
        for (int i = 0; i < 3; i++) {
            hw[i] = (bs_mat){ rand_mat(BS_BF16, (size_t)Ms[i] * K), BS_BF16, Ms[i], K };
            CHECK(be->weight_lossy(be, &dw[i], &hw[i], &err) == 0, "%s", err.msg);
            pw[i] = &dw[i];
            dys[i] = up(be, NULL, (size_t)n * Ms[i]); dsep[i] = up(be, NULL, (size_t)n * Ms[i]);
            be->matmul(be, dsep[i], dx, n, &dw[i], 0);
        }
        be->matmul_multi(be, 3, dys, dx, n, pw, 0);
        for (int i = 0; i < 3; i++) {
            float *a = down(be, dys[i], (size_t)n * Ms[i]), *b = down(be, dsep[i], (size_t)n * Ms[i]);
            CHECK(rel_err(a, b, (size_t)n * Ms[i]) < 2e-5, "8-bit matmul_multi job %d: rel err %g", i, rel_err(a, b, (size_t)n * Ms[i]));
            free(a); free(b); free((void *)hw[i].data); be->free(be, dys[i]); be->free(be, dsep[i]);
        }
        free(x); be->free(be, dx);
    }
    ref->destroy(ref);
}

TEST(cuda_op_rmsnorm_rope_elementwise) {
    NEED_CUDA(be);
    bs_backend *ref = bs_backend_cpu(1);
    bs_err err = {0};
    // rmsnorm (aliased and not), with bf16 and f32 weights and without
    int dims[] = { 64, 4096, 1000, 1002, 9000 };   // 1002, 9000: the scalar path (dim % 4, dim > 8192)
    for (int di = 0; di < 5; di++) {
        int n = 5, dim = dims[di];
        for (int wk = 0; wk < 3; wk++) {
            bs_dtype dt = wk == 0 ? BS_BF16 : BS_F32;
            bs_mat hw = { rand_mat(dt, dim), dt, 1, dim }, dw;
            CHECK(be->weight(be, &dw, &hw, &err) == 0, "%s", err.msg);
            float *x = rand_vec((size_t)n * dim, 3), *y = malloc(sizeof(float) * n * dim);
            ref->rmsnorm(ref, y, x, n, dim, wk == 2 ? NULL : &hw, 1e-6f);
            float *dx = up(be, x, (size_t)n * dim);
            be->rmsnorm(be, dx, dx, n, dim, wk == 2 ? NULL : &dw, 1e-6f);
            float *g = down(be, dx, (size_t)n * dim);
            CHECK(rel_err(g, y, (size_t)n * dim) < 1e-5, "rmsnorm dim %d: %g", dim, rel_err(g, y, (size_t)n * dim));
            free(x); free(y); free(g); free((void *)hw.data); be->free(be, dx);
        }
    }
    // head norm + rope (two bases: a Qwen3 target's and a small drafter's; wn 3: Llama 3.1's scaled table)
    int hds[] = { 16, 64, 128 };
    for (int hi = 0; hi < 3; hi++)
        for (int wn = 0; wn < 4; wn++) {
            int hd = hds[hi], nh = 8, n = 7, pos0 = hi * 1000 + 3;
            float theta = wn >= 2 ? 1e4f : 1e6f, inv[64];
            bs_rope_inv_freqs(theta, wn == 3 ? &llama31 : NULL, hd, inv);
            float *dinv = up(be, inv, (size_t)hd / 2);
            bs_mat hw = { rand_mat(BS_BF16, hd), BS_BF16, 1, hd }, dw;
            CHECK(be->weight(be, &dw, &hw, &err) == 0, "%s", err.msg);
            float *x = rand_vec((size_t)n * nh * hd, 2), *dx = up(be, x, (size_t)n * nh * hd);
            ref->head_norm_rope(ref, x, n, nh, hd, wn & 1 ? &hw : NULL, 1e-6f, pos0, inv);
            be->head_norm_rope(be, dx, n, nh, hd, wn & 1 ? &dw : NULL, 1e-6f, pos0, dinv);
            float *g = down(be, dx, (size_t)n * nh * hd);
            CHECK(rel_err(g, x, (size_t)n * nh * hd) < 1e-5, "head_norm_rope hd %d norm %d theta %g: %g", hd, wn & 1, theta, rel_err(g, x, (size_t)n * nh * hd));
            free(x); free(g); free((void *)hw.data); be->free(be, dx); be->free(be, dinv);
        }
    // qk_norm_rope_store (where the backend has it) == head_norm_rope q, k + store_kv k, v, bit for bit, into a
    // cache in pages out of order; the rows land where the CPU reference's store_kv puts them
    if (be->qk_norm_rope_store) {
        int hd = 128, nh = 32, nkv = 8, n = 16, pos0 = 37, ctx = 64, kd = nkv * hd;
        paged pg;
        paged_init(&pg, be, ctx, 32);
        bs_mat qw = { rand_mat(BS_BF16, hd), BS_BF16, 1, hd }, kw = { rand_mat(BS_BF16, hd), BS_BF16, 1, hd }, dqw, dkw;
        CHECK(be->weight(be, &dqw, &qw, &err) == 0 && be->weight(be, &dkw, &kw, &err) == 0, "%s", err.msg);
        float *q = rand_vec((size_t)n * nh * hd, 2), *k = rand_vec((size_t)n * kd, 2), *v = rand_vec((size_t)n * kd, 2);
        float *c0 = rand_vec((size_t)ctx * kd, 1);
        float *q1 = up(be, q, (size_t)n * nh * hd), *k1 = up(be, k, (size_t)n * kd), *v1 = up(be, v, (size_t)n * kd);
        float *q2 = up(be, q, (size_t)n * nh * hd), *k2 = up(be, k, (size_t)n * kd), *v2 = up(be, v, (size_t)n * kd);
        float *kc1 = up(be, c0, (size_t)ctx * kd), *vc1 = up(be, c0, (size_t)ctx * kd), *kc2 = up(be, c0, (size_t)ctx * kd), *vc2 = up(be, c0, (size_t)ctx * kd);
        const bs_kv_view kv1 = paged_view(&pg, kc1, vc1), kv2 = paged_view(&pg, kc2, vc2);
        float *rope = rope_dev(be, 1e6f, NULL, hd);
        be->head_norm_rope(be, q1, n, nh, hd, &dqw, 1e-6f, pos0, rope);
        be->head_norm_rope(be, k1, n, nkv, hd, &dkw, 1e-6f, pos0, rope);
        be->store_kv(be, &kv1, pos0, k1, v1, n, kd);
        be->qk_norm_rope_store(be, q2, k2, v2, n, nh, nkv, hd, &dqw, &dkw, 1e-6f, pos0, rope, &kv2);
        be->free(be, rope);
        float *a[4] = { down(be, q1, (size_t)n * nh * hd), down(be, k1, (size_t)n * kd), down(be, kc1, (size_t)ctx * kd), down(be, vc1, (size_t)ctx * kd) };
        float *b[4] = { down(be, q2, (size_t)n * nh * hd), down(be, k2, (size_t)n * kd), down(be, kc2, (size_t)ctx * kd), down(be, vc2, (size_t)ctx * kd) };
        size_t sz[4] = { (size_t)n * nh * hd, (size_t)n * kd, (size_t)ctx * kd, (size_t)ctx * kd };
        // the CPU reference's store of the same rows through the same table (host copy of it)
        float *hk = malloc(4 * sz[2]), *hv = malloc(4 * sz[3]);
        memcpy(hk, c0, 4 * sz[2]); memcpy(hv, c0, 4 * sz[3]);
        const bs_kv_view hkv = { hk, hv, pg.perm, pg.P };
        ref->store_kv(ref, &hkv, pos0, a[1], v, n, kd);
        CHECK(!memcmp(hk, a[2], 4 * sz[2]) && !memcmp(hv, a[3], 4 * sz[3]), "store_kv through a page table differs from the CPU reference's");
        free(hk); free(hv);
        for (int i = 0; i < 4; i++) { CHECK(!memcmp(a[i], b[i], 4 * sz[i]), "qk_norm_rope_store differs from the separate ops (output %d)", i); free(a[i]); free(b[i]); }
        float *bufs[] = { q1, k1, v1, q2, k2, v2, kc1, vc1, kc2, vc2 };
        for (int i = 0; i < 10; i++) be->free(be, bufs[i]);
        be->free(be, pg.dev);
        free(q); free(k); free(v); free(c0); free((void *)qw.data); free((void *)kw.data);
    }
    // head_norm_rope_multi (where the backend has it) == one head_norm_rope per buffer, bit for bit
    // (11 buffers: more than one launch takes; some without a norm weight)
    if (be->head_norm_rope_multi) {
        int hd = 128, nkv = 8, n = 16, pos0 = 513, cnt = 11;
        size_t sz = (size_t)n * nkv * hd;
        bs_mat hw[11], dw[11];
        const bs_mat *wp[11];
        float *xa[11], *xb[11], *x = rand_vec(sz * cnt, 2), *rope = rope_dev(be, 1e6f, &llama31, hd);
        for (int i = 0; i < cnt; i++) {
            hw[i] = (bs_mat){ rand_mat(BS_BF16, hd), BS_BF16, 1, hd };
            CHECK(be->weight(be, &dw[i], &hw[i], &err) == 0, "%s", err.msg);
            wp[i] = i % 4 == 3 ? NULL : &dw[i];
            xa[i] = up(be, x + sz * i, sz); xb[i] = up(be, x + sz * i, sz);
            be->head_norm_rope(be, xa[i], n, nkv, hd, wp[i], 1e-6f, pos0, rope);
        }
        be->head_norm_rope_multi(be, cnt, xb, n, nkv, hd, wp, 1e-6f, pos0, rope);
        for (int i = 0; i < cnt; i++) {
            float *a = down(be, xa[i], sz), *b = down(be, xb[i], sz);
            CHECK(!memcmp(a, b, 4 * sz), "head_norm_rope_multi differs from head_norm_rope (buffer %d)", i);
            free(a); free(b); be->free(be, xa[i]); be->free(be, xb[i]); free((void *)hw[i].data);
        }
        free(x); be->free(be, rope);
    }
    // swiglu, add
    {
        size_t n = 100003;
        float *a = rand_vec(n, 6), *b = rand_vec(n, 2), *r = malloc(4 * n);
        float *da = up(be, a, n), *db = up(be, b, n);
        ref->swiglu(ref, r, a, b, n);
        be->swiglu(be, da, da, db, n);
        float *g = down(be, da, n);
        CHECK(rel_err(g, r, n) < 1e-5, "swiglu: %g", rel_err(g, r, n));
        ref->add(ref, r, b, n); be->add(be, da, db, n); free(g); g = down(be, da, n);
        CHECK(rel_err(g, r, n) < 1e-5, "add: %g", rel_err(g, r, n));
        free(a); free(b); free(r); free(g); be->free(be, da); be->free(be, db);
    }
    // embed (bf16 tables: 128 columns, which the backend stores tiled for its GEMM, then 72, row-major),
    // copy_rows, store_kv (contiguous)
    for (int H = 128; H >= 72; H -= 56) {
        int V = 300, n = 70;
        bs_mat ht = { rand_mat(BS_BF16, V * H), BS_BF16, V, H }, dt;
        CHECK(be->weight(be, &dt, &ht, &err) == 0, "%s", err.msg);
        int32_t ids[70]; for (int i = 0; i < n; i++) ids[i] = (i * 37 + 11) % V;
        float *r = malloc(sizeof(float) * n * H), *d = up(be, NULL, (size_t)n * H);
        ref->embed(ref, r, &ht, ids, n); be->embed(be, d, &dt, ids, n);
        float *g = down(be, d, (size_t)n * H);
        CHECK(!memcmp(g, r, sizeof(float) * n * H), "embed from a %dx%d table (layout %d) differs", V, H, dt.layout);
        if (H != 72) { free(r); free(g); be->free(be, d); free((void *)ht.data); continue; }
        float *dst = up(be, NULL, (size_t)200 * H), *hdst = calloc(200 * H, 4);
        be->copy_rows(be, dst + 3, 2 * H, d, H, 10, H - 5); ref->copy_rows(ref, hdst + 3, 2 * H, r, H, 10, H - 5);
        const bs_kv_view dkv = bs_kv_contig(dst, dst + 100 * H), hkv = bs_kv_contig(hdst, hdst + 100 * H);
        be->store_kv(be, &dkv, 50, d, d + 5 * H, 5, H); ref->store_kv(ref, &hkv, 50, r, r + 5 * H, 5, H);
        free(g); g = down(be, dst, (size_t)200 * H);
        CHECK(!memcmp(g, hdst, sizeof(float) * 200 * H), "copy_rows / store_kv differ");
        free(r); free(g); free(hdst); free((void *)ht.data); be->free(be, d); be->free(be, dst);
    }
    // argmax with ties (first index wins) and a large vocabulary
    {
        int V = 151936, n = 3;
        float *l = rand_vec((size_t)n * V, 5);
        l[100] = 9; l[2000] = 9; l[V + 7] = 9; l[V + 6] = 9; l[2 * V + V - 1] = 11;
        float *d = up(be, l, (size_t)n * V);
        int32_t a[3], b[3];
        be->argmax(be, a, d, n, V); ref->argmax(ref, b, l, n, V);
        CHECK(a[0] == b[0] && a[1] == b[1] && a[2] == b[2], "argmax %d %d %d vs %d %d %d", a[0], a[1], a[2], b[0], b[1], b[2]);
        free(l); be->free(be, d);
    }
    // ties across the GPU's row partition (32 parts of ceil(V / 32)), tiny vocabularies, > 64 rows
    {
        int Vs[] = { 151936, 5, 33, 1000 }, n = 70;
        for (int vi = 0; vi < 4; vi++) {
            int V = Vs[vi], part = (V + 31) / 32;
            float *l = rand_vec((size_t)n * V, 5);
            for (int r = 0; r < n; r++) {
                int i0 = (r * 7919) % V, i1 = (i0 + part) % V;   // two equal maxima, usually in different parts
                l[(size_t)r * V + i0] = 20; l[(size_t)r * V + i1] = 20;
            }
            float *d = up(be, l, (size_t)n * V);
            int32_t a[70], b[70];
            be->argmax(be, a, d, n, V); ref->argmax(ref, b, l, n, V);
            CHECK(!memcmp(a, b, sizeof a), "argmax V=%d: rows differ from the CPU (first index on ties)", V);
            free(l); be->free(be, d);
        }
    }
    ref->destroy(ref);
}

TEST(cuda_op_attention) {
    NEED_CUDA(be);
    bs_backend *ref = bs_backend_cpu(1);
    struct { int nq, nh, nkv, hd, nkeys, qpos0, causal, window; } cs[] = {
        { 1, 32, 8, 128, 600, 599, 1, 0 },     // decode
        { 16, 32, 8, 128, 528, 512, 1, 0 },    // verify block
        { 70, 8, 2, 128, 70, 0, 1, 0 },        // prefill (more than one launch of rows)
        { 16, 32, 8, 128, 1500, 1484, 1, 0 },  // several chunks per split
        { 8, 4, 2, 16, 20, 12, 0, 0 },         // drafter block: bidirectional over context + block
        { 16, 16, 4, 64, 300, 284, 0, 0 },
        { 12, 4, 2, 16, 40, 28, 1, 5 },        // sliding window
        { 5, 8, 8, 128, 3000, 2995, 1, 1000 },
        { 16, 12, 4, 128, 528, 512, 1, 0 },    // GQA 3: query vectors of a row straddle the 16-row mma tiles
        { 9, 40, 8, 64, 700, 691, 1, 0 },      // GQA 5, head_dim 64, causal
        { 3, 96, 1, 64, 200, 197, 1, 0 },      // one row's group (96) larger than a block's 64 query vectors
    };
    for (size_t ci = 0; ci < sizeof cs / sizeof *cs; ci++) {
        int nq = cs[ci].nq, nh = cs[ci].nh, nkv = cs[ci].nkv, hd = cs[ci].hd, nk = cs[ci].nkeys, kd = nkv * hd;
        float *q = rand_vec((size_t)nq * nh * hd, 1), *k = rand_vec((size_t)nk * kd, 1), *v = rand_vec((size_t)nk * kd, 1);
        float *o = malloc(sizeof(float) * nq * nh * hd);
        const bs_kv_view hkv = bs_kv_contig(k, v);
        ref->attention(ref, o, q, &hkv, nq, nh, nkv, hd, nk, cs[ci].qpos0, cs[ci].causal, cs[ci].window);
        float *dq = up(be, q, (size_t)nq * nh * hd), *dk = up(be, k, (size_t)nk * kd), *dv = up(be, v, (size_t)nk * kd);
        float *dout = up(be, NULL, (size_t)nq * nh * hd);
        const bs_kv_view dkv = bs_kv_contig(dk, dv);
        be->attention(be, dout, dq, &dkv, nq, nh, nkv, hd, nk, cs[ci].qpos0, cs[ci].causal, cs[ci].window);
        float *g = down(be, dout, (size_t)nq * nh * hd);
        double e = rel_err(g, o, (size_t)nq * nh * hd);
        CHECK(e < 1e-5, "attention case %zu (nq %d heads %d/%d hd %d keys %d causal %d window %d): %g", ci, nq, nh, nkv, hd, nk, cs[ci].causal, cs[ci].window, e);
        // batch invariance: causal row i alone (n_keys = its own range) is bit-identical
        if (cs[ci].causal && nq > 1) {
            int i = nq / 2 + 1;
            be->attention(be, dout, dq + (size_t)i * nh * hd, &dkv, 1, nh, nkv, hd, cs[ci].qpos0 + i + 1, cs[ci].qpos0 + i, 1, cs[ci].window);
            float *one = down(be, dout, (size_t)nh * hd);
            CHECK(!memcmp(one, g + (size_t)i * nh * hd, sizeof(float) * nh * hd), "attention case %zu: row %d alone differs from the block", ci, i);
            free(one);
        }
        // the same keys in pages out of order (32 and 128 rows, the other rows NaN): bit-identical
        for (int P = 32; P <= 128; P *= 4) {
            paged pg;
            paged_init(&pg, be, nk, P);
            float *pk = paged_scatter(&pg, k, nk, kd, NAN), *pv = paged_scatter(&pg, v, nk, kd, NAN);
            float *dpk = up(be, pk, (size_t)pg.n_pages * P * kd), *dpv = up(be, pv, (size_t)pg.n_pages * P * kd);
            const bs_kv_view pkv = paged_view(&pg, dpk, dpv);
            be->attention(be, dout, dq, &pkv, nq, nh, nkv, hd, nk, cs[ci].qpos0, cs[ci].causal, cs[ci].window);
            float *gp = down(be, dout, (size_t)nq * nh * hd);
            CHECK(!memcmp(gp, g, sizeof(float) * nq * nh * hd), "attention case %zu: keys in %d-row pages differ from the contiguous cache", ci, P);
            free(gp); free(pk); free(pv);
            be->free(be, dpk); be->free(be, dpv); be->free(be, pg.dev);
        }
        free(q); free(k); free(v); free(o); free(g);
        be->free(be, dq); be->free(be, dk); be->free(be, dv); be->free(be, dout);
    }
    ref->destroy(ref);
}

// The native span attention (attention_spans: one launch over every span of a ragged batch, each reading its
// own page table) == one attention call per span, bit for bit, and the CPU reference within 1e-5; spans of
// 1, 3, 16 rows at positions from 0 to past 2,000, GQA 4 and 3, head dims 128 and 64.
TEST(cuda_attention_spans) {
    NEED_CUDA(be);
    CHECK(be->attention_spans, "the CUDA backend has no attention_spans");
    bs_backend *ref = bs_backend_cpu(1);
    struct { int nh, nkv, hd; } shapes[] = { { 32, 8, 128 }, { 12, 4, 128 }, { 16, 4, 64 } };
    const int ns[] = { 1, 3, 16, 1, 5, 16, 2, 1 }, pos[] = { 0, 40, 511, 2047, 77, 700, 1, 130 }, S = 8;
    for (int si = 0; si < 3; si++) {
        int nh = shapes[si].nh, nkv = shapes[si].nkv, hd = shapes[si].hd, kd = nkv * hd, qw = nh * hd, rows = 0;
        bs_row_span sp[8], hsp[8];
        paged pg[8];
        float *k[8], *v[8], *dk[8], *dv[8];
        for (int i = 0; i < S; i++) {
            int nk = pos[i] + ns[i], P = i % 2 ? 32 : 128;
            k[i] = rand_vec((size_t)nk * kd, 1); v[i] = rand_vec((size_t)nk * kd, 1);
            paged_init(&pg[i], be, nk, P);
            float *pk = paged_scatter(&pg[i], k[i], nk, kd, NAN), *pv = paged_scatter(&pg[i], v[i], nk, kd, NAN);
            dk[i] = up(be, pk, (size_t)pg[i].n_pages * P * kd); dv[i] = up(be, pv, (size_t)pg[i].n_pages * P * kd);
            free(pk); free(pv);
            sp[i] = (bs_row_span){ rows, ns[i], pos[i], paged_view(&pg[i], dk[i], dv[i]) };
            hsp[i] = (bs_row_span){ rows, ns[i], pos[i], bs_kv_contig(k[i], v[i]) };
            rows += ns[i];
        }
        float *q = rand_vec((size_t)rows * qw, 1), *o = malloc(sizeof(float) * rows * qw);
        float *dq = up(be, q, (size_t)rows * qw), *da = up(be, NULL, (size_t)rows * qw), *db = up(be, NULL, (size_t)rows * qw);
        for (int i = 0; i < S; i++)
            ref->attention(ref, o + (size_t)hsp[i].row0 * qw, q + (size_t)hsp[i].row0 * qw, &hsp[i].kv, ns[i], nh, nkv, hd, pos[i] + ns[i], pos[i], 1, 0);
        be->attention_spans(be, da, dq, sp, S, nh, nkv, hd);
        for (int i = 0; i < S; i++)
            be->attention(be, db + (size_t)sp[i].row0 * qw, dq + (size_t)sp[i].row0 * qw, &sp[i].kv, ns[i], nh, nkv, hd, pos[i] + ns[i], pos[i], 1, 0);
        float *a = down(be, da, (size_t)rows * qw), *b = down(be, db, (size_t)rows * qw);
        CHECK(!memcmp(a, b, sizeof(float) * rows * qw), "shape %d: attention_spans differs from one attention call per span", si);
        CHECK(rel_err(a, o, (size_t)rows * qw) < 1e-5, "shape %d: attention_spans vs the CPU reference: %g", si, rel_err(a, o, (size_t)rows * qw));
        free(a); free(b); free(q); free(o);
        be->free(be, dq); be->free(be, da); be->free(be, db);
        for (int i = 0; i < S; i++) { free(k[i]); free(v[i]); be->free(be, dk[i]); be->free(be, dv[i]); be->free(be, pg[i].dev); }
    }
    ref->destroy(ref);
}

// The attention inputs' step of a batch's spans in one launch equals one qk_norm_rope_store per span bit for
// bit: q and k in place, and every span's K/V rows in its own paged cache (70 spans: two launches).
TEST(cuda_qk_norm_rope_store_spans) {
    NEED_CUDA(be);
    CHECK(be->qk_norm_rope_store_spans, "the CUDA backend has no qk_norm_rope_store_spans");
    enum { S = 70, NH = 8, NKV = 2, HD = 128, P = 32 };
    const int qw = NH * HD, kd = NKV * HD;
    bs_err err = {0};
    bs_mat qn_h = { rand_mat(BS_BF16, HD), BS_BF16, 1, HD }, kn_h = { rand_mat(BS_BF16, HD), BS_BF16, 1, HD }, qn, kn;
    CHECK(be->weight(be, &qn, &qn_h, &err) == 0 && be->weight(be, &kn, &kn_h, &err) == 0, "%s", err.msg);
    float *rope = rope_dev(be, 1e6f, NULL, HD);
    bs_row_span sa[S], sb[S];
    paged pg[S];
    float *ka[S], *va[S], *kb[S], *vb[S];
    int rows = 0, ns[S], pos[S];
    for (int i = 0; i < S; i++) {
        ns[i] = i % 9 == 0 ? 5 : 1; pos[i] = (i * 37) % 300;
        int nk = pos[i] + ns[i];
        paged_init(&pg[i], be, nk, P);
        size_t cells = (size_t)pg[i].n_pages * P * kd;
        float *zero = calloc(cells, sizeof(float));   // rows no span writes must match too
        ka[i] = up(be, zero, cells); va[i] = up(be, zero, cells); kb[i] = up(be, zero, cells); vb[i] = up(be, zero, cells);
        free(zero);
        sa[i] = (bs_row_span){ rows, ns[i], pos[i], paged_view(&pg[i], ka[i], va[i]) };
        sb[i] = (bs_row_span){ rows, ns[i], pos[i], paged_view(&pg[i], kb[i], vb[i]) };
        rows += ns[i];
    }
    float *q = rand_vec((size_t)rows * qw, 1), *k = rand_vec((size_t)rows * kd, 1), *v = rand_vec((size_t)rows * kd, 1);
    float *qa = up(be, q, (size_t)rows * qw), *qb = up(be, q, (size_t)rows * qw), *kxa = up(be, k, (size_t)rows * kd),
          *kxb = up(be, k, (size_t)rows * kd), *dv = up(be, v, (size_t)rows * kd);
    be->qk_norm_rope_store_spans(be, qa, kxa, dv, sa, S, NH, NKV, HD, &qn, &kn, 1e-6f, rope);
    for (int i = 0; i < S; i++)
        be->qk_norm_rope_store(be, qb + (size_t)sb[i].row0 * qw, kxb + (size_t)sb[i].row0 * kd, dv + (size_t)sb[i].row0 * kd, ns[i], NH, NKV,
                               HD, &qn, &kn, 1e-6f, pos[i], rope, &sb[i].kv);
    CHECK(bs_backend_check(be, &err) == 0, "%s", err.msg);
    float *a = down(be, qa, (size_t)rows * qw), *b = down(be, qb, (size_t)rows * qw);
    CHECK(!memcmp(a, b, sizeof(float) * rows * qw), "q differs from one call per span");
    free(a); free(b);
    a = down(be, kxa, (size_t)rows * kd); b = down(be, kxb, (size_t)rows * kd);
    CHECK(!memcmp(a, b, sizeof(float) * rows * kd), "k differs from one call per span");
    free(a); free(b);
    for (int i = 0; i < S; i++) {
        size_t cells = (size_t)pg[i].n_pages * P * kd;
        float *x = down(be, ka[i], cells), *y = down(be, kb[i], cells), *x2 = down(be, va[i], cells), *y2 = down(be, vb[i], cells);
        CHECK(!memcmp(x, y, sizeof(float) * cells) && !memcmp(x2, y2, sizeof(float) * cells), "span %d: its cache differs", i);
        free(x); free(y); free(x2); free(y2);
        be->free(be, ka[i]); be->free(be, va[i]); be->free(be, kb[i]); be->free(be, vb[i]); be->free(be, pg[i].dev);
    }
    free(q); free(k); free(v); free((void *)qn_h.data); free((void *)kn_h.data);
    be->free(be, qa); be->free(be, qb); be->free(be, kxa); be->free(be, kxb); be->free(be, dv); be->free(be, rope);
}

// A recorded sequence replayed at another position equals the same ops issued plainly there; its K/V rows
// live in pages, and the page table changes between the recording and the replay (the table's contents are
// read at replay: a forward recorded once stays valid as its sequence takes new pages).
TEST(cuda_record_replay) {
    NEED_CUDA(be);
    bs_err err = {0};
    int nh = 8, nkv = 2, hd = 128, n = 4, V = 50, ctx = 320, kd = nkv * hd;
    bs_mat ht = { rand_mat(BS_BF16, V * nh * hd), BS_BF16, V, nh * hd }, dt;
    CHECK(be->weight(be, &dt, &ht, &err) == 0, "%s", err.msg);
    paged pg;
    paged_init(&pg, be, ctx, 32);
    float *kc = rand_vec((size_t)ctx * kd, 1);
    float *dk = up(be, kc, (size_t)ctx * kd), *dv = up(be, kc, (size_t)ctx * kd), *dq = up(be, NULL, (size_t)n * nh * hd);
    float *dout = up(be, NULL, (size_t)n * nh * hd);
    const bs_kv_view kv = paged_view(&pg, dk, dv);
    int32_t ids[4] = { 3, 7, 49, 0 };
    float *rope = rope_dev(be, 1e4f, NULL, hd);
    #define SEQ(pos) do { be->embed(be, dq, &dt, ids, n); be->head_norm_rope(be, dq, n, nh, hd, NULL, 1e-6f, pos, rope); \
        be->store_kv(be, &kv, pos, dq, dq, n, kd); be->attention(be, dout, dq, &kv, n, nh, nkv, hd, (pos) + n, pos, 1, 0); } while (0)
    CHECK(be->record_begin(be, 10) == 0);
    SEQ(10);
    void *rec = be->record_end(be, &err);
    CHECK(rec, "%s", err.msg);
    // the table changes: the pages of rows 192..255 and 0..31 trade places
    int32_t t = pg.perm[6]; pg.perm[6] = pg.perm[0]; pg.perm[0] = t;
    be->upload(be, pg.dev, pg.perm, sizeof(int32_t) * pg.n_pages);
    ids[0] = 11; ids[2] = 1;
    SEQ(200);
    float *plain = down(be, dout, (size_t)n * nh * hd), *kplain = down(be, dk, (size_t)ctx * kd);
    be->upload(be, dk, kc, sizeof(float) * ctx * kd);
    be->replay(be, rec, 200, ids, n);
    float *rep = down(be, dout, (size_t)n * nh * hd), *krep = down(be, dk, (size_t)ctx * kd);
    CHECK(!memcmp(plain, rep, sizeof(float) * n * nh * hd), "replay at another position (the page table changed) differs from plain ops there");
    CHECK(!memcmp(kplain, krep, sizeof(float) * ctx * kd), "the replay stored its K rows elsewhere than the plain ops (stale page table?)");
    be->record_free(be, rec);
    free(plain); free(rep); free(kplain); free(krep); free(kc); free((void *)ht.data);
    be->free(be, dk); be->free(be, dv); be->free(be, dq); be->free(be, dout); be->free(be, rope); be->free(be, pg.dev);
}

// --- whole forward ---------------------------------------------------------------------------

// llama: a Llama-3.1-shaped layer (no q/k norm, llama3-scaled RoPE at base 5e5, tied embeddings) instead of Qwen3's.
static int write_random_model(const char *dir, int llama, bs_err *err) {
    bs_qwen3_config c = { .vocab_size = 2048, .hidden_size = 512, .n_layers = 3, .n_heads = 8, .n_kv_heads = 2, .head_dim = 128,
                          .intermediate_size = 1024, .max_position = 1024, .rms_eps = 1e-6f, .rope_theta = 1e6f, .bos_id = -1 };
    if (llama) { c.arch = BS_ARCH_LLAMA; c.rope = llama31; c.rope_theta = 5e5f; c.rms_eps = 1e-5f; c.tie_embeddings = 1; }
    cJSON *j = bs_qwen3_config_to_json(&c);
    char path[1200]; snprintf(path, sizeof path, "%s/config.json", dir);
    char *txt = cJSON_Print(j);
    FILE *f = fopen(path, "w");
    if (!f) { cJSON_Delete(j); free(txt); return bs_fail(err, "cannot write %s", path); }
    fputs(txt, f); fclose(f); free(txt); cJSON_Delete(j);
    bs_tensor_spec *specs; int n;
    if (bs_qwen3_tensor_specs(&c, &specs, &n, err)) return -1;
    int rc = bs_write_random_tensors(dir, specs, n, 1, 7, err);
    free(specs);
    return rc;
}

static void forward_vs_cpu(int *failed_, int llama) {
    const char *dir = bs_test_tmpdir(llama ? "cuda_rand_llama" : "cuda_rand");
    bs_err err = {0};
    CHECK(dir && write_random_model(dir, llama, &err) == 0, "%s", err.msg);
    bs_engine *ec, *eg;
    CHECK(bs_engine_open(&ec, dir, "cpu", &err) == 0, "%s", err.msg);
    CHECK(bs_engine_open(&eg, dir, "cuda", &err) == 0, "%s", err.msg);
    bs_backend *be = eg->be;
    int V = ec->cfg.vocab_size, H = ec->cfg.hidden_size, NT = ec->cfg.n_layers + 1, P = 90, B = 16;
    int32_t ids[128]; for (int i = 0; i < 128; i++) ids[i] = (i * 7919 + 13) % V;
    int taps[8]; for (int t = 0; t < NT; t++) taps[t] = t;
    bs_kv_cache kc, kg;
    CHECK(bs_kv_init(&kc, ec->kv_pool, 256, &err) == 0 && bs_kv_init(&kg, eg->kv_pool, 256, &err) == 0, "%s", err.msg);
    float *lc = malloc(sizeof(float) * P * V), *tc = malloc(sizeof(float) * P * NT * H);
    float *dl = up(be, NULL, (size_t)P * V), *dtp = up(be, NULL, (size_t)P * NT * H);
    bs_fwd_out fc = { .logits = lc, .logits_all = 1, .taps = taps, .n_taps = NT, .tap_out = tc };
    bs_fwd_out fg = { .logits = dl, .logits_all = 1, .taps = taps, .n_taps = NT, .tap_out = dtp };
    // prefill (two chunks), then decode steps (recorded from the second on), then a verify block
    CHECK(bs_qwen3_forward(&ec->target, &kc, ids, P, &fc, &err) == 0, "%s", err.msg);
    CHECK(bs_qwen3_forward(&eg->target, &kg, ids, P, &fg, &err) == 0, "%s", err.msg);
    float *g = down(be, dl, (size_t)P * V), *gt = down(be, dtp, (size_t)P * NT * H);
    CHECK(rel_err(g, lc, (size_t)P * V) < 1e-3, "prefill logits: %g", rel_err(g, lc, (size_t)P * V));
    CHECK(rel_err(gt, tc, (size_t)P * NT * H) < 1e-3, "prefill taps: %g", rel_err(gt, tc, (size_t)P * NT * H));
    free(g); free(gt);
    bs_fwd_out oc = { .logits = lc }, og = { .logits = dl };
    for (int s = 0; s < 5; s++) {
        CHECK(bs_qwen3_forward(&ec->target, &kc, ids + P + s, 1, &oc, &err) == 0, "%s", err.msg);
        CHECK(bs_qwen3_forward(&eg->target, &kg, ids + P + s, 1, &og, &err) == 0, "%s", err.msg);
        g = down(be, dl, V);
        CHECK(rel_err(g, lc, V) < 1e-3, "decode step %d logits: %g", s, rel_err(g, lc, V));
        free(g);
    }
    CHECK(bs_kv_rollback(&kc, P, &err) == 0 && bs_kv_rollback(&kg, P, &err) == 0, "%s", err.msg);
    for (int rep = 0; rep < 3; rep++) {   // the third one is a graph replay
        CHECK(bs_kv_rollback(&kc, P, &err) == 0 && bs_kv_rollback(&kg, P, &err) == 0, "%s", err.msg);
        CHECK(bs_qwen3_forward(&ec->target, &kc, ids + 20 + rep, B, &fc, &err) == 0, "%s", err.msg);
        CHECK(bs_qwen3_forward(&eg->target, &kg, ids + 20 + rep, B, &fg, &err) == 0, "%s", err.msg);
        g = down(be, dl, (size_t)B * V); gt = down(be, dtp, (size_t)B * NT * H);
        CHECK(rel_err(g, lc, (size_t)B * V) < 1e-3, "block %d logits: %g", rep, rel_err(g, lc, (size_t)B * V));
        CHECK(rel_err(gt, tc, (size_t)B * NT * H) < 1e-3, "block %d taps: %g", rep, rel_err(gt, tc, (size_t)B * NT * H));
        free(g); free(gt);
    }
    free(lc); free(tc); be->free(be, dl); be->free(be, dtp);
    bs_kv_free(&kc); bs_kv_free(&kg);
    bs_engine_close(ec); bs_engine_close(eg);
}

TEST(cuda_forward_random_model_vs_cpu) { NEED_CUDA(be0); (void)be0; forward_vs_cpu(failed_, 0); }
TEST(cuda_forward_random_llama_vs_cpu) { NEED_CUDA(be0); (void)be0; forward_vs_cpu(failed_, 1); }

// The shared fixtures (transformers' vectors) on the GPU, with the CPU tests' tolerance.
// shared/fixtures target (transformers' vectors) on the GPU: the CPU tests' own check, on "cuda".
TEST(cuda_target_fixture) {
    NEED_CUDA(be0);
    (void)be0;
    fx_check_target_fixture(failed_, "cuda");
}

// transformers' Llama vectors (tests/ref/llama: llama3 scaling untied, and tied with a transformers-4 config) on
// the GPU, with the CPU tests' check (test_llama.c runs them on cpu and cpu-ref).
static void cuda_llama_fixture(int *failed_, const char *name) {
    char dir[256], file[256];
    snprintf(dir, sizeof dir, "tests/ref/llama/%s", name);
    snprintf(file, sizeof file, "tests/ref/llama/%s.expect.safetensors", name);
    if (access(file, R_OK)) SKIP("tests/ref/llama has no reference vectors yet (made by tests/ref/make_llama_fixture.py)");
    fx_check_target_fixture_at(failed_, "cuda", dir, file);
}
TEST(cuda_llama_fixture_llama3) { NEED_CUDA(be0); (void)be0; cuda_llama_fixture(failed_, "llama3"); }
TEST(cuda_llama_fixture_tied) { NEED_CUDA(be0); (void)be0; cuda_llama_fixture(failed_, "llama_tied"); }

// Greedy speculative decoding == plain greedy decoding on the GPU. Plain greedy runs one row per
// forward (recorded graphs after the first steps); the speculative side verifies blocks of 16 rows
// whose drafts are the true continuation with one token corrupted at a varying place (so rounds
// accept 0..15 drafts), accepts the matching prefix plus the target's own token, rolls the cache
// back and continues. Outputs must be identical, and every verify row's logits bit-identical to the
// plain step's logits (batch invariance).
TEST(cuda_greedy_spec_equals_plain) {
    NEED_CUDA(be0);
    char dir[1024]; bs_err err = {0};
    snprintf(dir, sizeof dir, "%s/target", bs_fixtures_dir());
    bs_engine *e;
    CHECK(bs_engine_open(&e, dir, "cuda", &err) == 0, "%s", err.msg);
    bs_backend *be = e->be;
    int V = e->cfg.vocab_size, P = 12, N = 120, BL = 16;
    int32_t prompt[12]; for (int i = 0; i < P; i++) prompt[i] = (i * 31 + 5) % V;
    bs_kv_cache kv;
    CHECK(bs_kv_init(&kv, e->kv_pool, 0, &err) == 0, "%s", err.msg);
    float *dl = up(be, NULL, (size_t)64 * V);
    int32_t plain[200], spec[200];
    float *plain_logits = malloc(sizeof(float) * (N + 1) * V);
    bs_fwd_out fo = { .logits = dl };
    CHECK(bs_qwen3_forward(&e->target, &kv, prompt, P, &fo, &err) == 0, "%s", err.msg);
    be->argmax(be, &plain[0], dl, 1, V);
    be->download(be, plain_logits, dl, sizeof(float) * V);
    for (int i = 1; i < N; i++) {
        CHECK(bs_qwen3_forward(&e->target, &kv, &plain[i - 1], 1, &fo, &err) == 0, "%s", err.msg);
        be->argmax(be, &plain[i], dl, 1, V);
        be->download(be, plain_logits + (size_t)i * V, dl, sizeof(float) * V);
    }
    // speculative: the first token comes from the prompt's logits (already known: plain[0])
    CHECK(bs_kv_rollback(&kv, P, &err) == 0, "%s", err.msg);
    bs_fwd_out fb = { .logits = dl, .logits_all = 1 };
    int n = 1, round = 0;
    spec[0] = plain[0];
    float *vl = malloc(sizeof(float) * BL * V);
    while (n < N) {
        // block = [last accepted token, drafts...]; drafts = truth with position `bad` corrupted
        int32_t blk[16]; int bad = 1 + round % (BL + 2);
        blk[0] = spec[n - 1];
        for (int j = 1; j < BL; j++) { int idx = n - 1 + j; blk[j] = idx < N ? plain[idx] : 0; if (j == bad) blk[j] = (blk[j] + 1) % V; }
        int past = kv.n_past;
        CHECK(bs_qwen3_forward(&e->target, &kv, blk, BL, &fb, &err) == 0, "%s", err.msg);
        int32_t am[16];
        be->argmax(be, am, dl, BL, V);
        be->download(be, vl, dl, sizeof(float) * BL * V);
        int acc = 0;
        while (acc < BL - 1 && am[acc] == blk[acc + 1]) acc++;
        int n0 = n;
        for (int j = 0; j <= acc && n < N; j++) {
            // row j of the block predicts token n0 + j; plain step n0 + j produced the same logits
            CHECK(!memcmp(vl + (size_t)j * V, plain_logits + (size_t)(n0 + j) * V, sizeof(float) * V),
                  "round %d: verify row %d logits differ from plain step %d (batch invariance)", round, j, n0 + j);
            spec[n++] = am[j];
        }
        CHECK(bs_kv_rollback(&kv, past + acc + 1, &err) == 0, "%s", err.msg);
        round++;
    }
    for (int i = 0; i < N; i++) CHECK(spec[i] == plain[i], "token %d: speculative %d != plain %d", i, spec[i], plain[i]);
    free(vl); free(plain_logits); be->free(be, dl);
    bs_kv_free(&kv); bs_engine_close(e);
}

// A head_dim the CUDA kernels do not take (320 > 256) is the backend's fault, not the process's end: the
// forward returns an error naming it, the process goes on, and the next forward says the same; the same
// model runs on the CPU. Through the public API the request fails with the message.
TEST(cuda_unsupported_head_dim_is_an_error) {
    NEED_CUDA_DEVICE();
    const char *dir = tu_make_target(64, 128, 1, 2, 1, 320, 128, 1, 1, 7);
    CHECK(dir, "make-random failed");
    bs_engine *eg, *ec; bs_err err = {0};
    CHECK(bs_engine_open(&ec, dir, "cpu", &err) == 0, "%s", err.msg);
    CHECK(bs_engine_open(&eg, dir, "cuda", &err) == 0, "%s", err.msg);
    int32_t ids[4] = { 3, 5, 7, 9 };
    bs_kv_cache kc, kg;
    CHECK(bs_kv_init(&kc, ec->kv_pool, 16, &err) == 0 && bs_kv_init(&kg, eg->kv_pool, 16, &err) == 0, "%s", err.msg);
    float lc[64];
    float *lg = eg->be->alloc(eg->be, sizeof(float) * 64, &err);
    CHECK(lg, "%s", err.msg);
    bs_fwd_out fc = { .logits = lc }, fg = { .logits = lg };
    CHECK(bs_qwen3_forward(&ec->target, &kc, ids, 4, &fc, &err) == 0, "the CPU runs head_dim 320: %s", err.msg);
    for (int i = 0; i < 2; i++) {
        bs_err ferr = {0};
        CHECK(bs_kv_rollback(&kg, 0, &err) == 0, "%s", err.msg);
        CHECK(bs_qwen3_forward(&eg->target, &kg, ids, 4, &fg, &ferr) != 0, "forward %d on CUDA with head_dim 320 reported success", i);
        CHECK(strstr(ferr.msg, "head_dim 320") && strstr(ferr.msg, "cuda"), "forward %d: %s", i, ferr.msg);
    }
    eg->be->free(eg->be, lg);
    bs_kv_free(&kc); bs_kv_free(&kg);
    bs_engine_close(ec); bs_engine_close(eg);
    blockspec *bs; char msg[512];
    CHECK(blockspec_open(&bs, dir, NULL, "cuda", msg, sizeof msg) == 0, "%s", msg);
    blockspec_params p = blockspec_default_params();
    p.n_new = 4;
    int32_t out[4]; size_t n_out;
    CHECK(blockspec_generate(bs, ids, 4, &p, out, 4, &n_out, NULL, NULL, NULL, msg, sizeof msg) != 0 && strstr(msg, "head_dim 320"), "%s", msg);
    blockspec_close(bs);
}

// MLX affine weights (docs/quantization.md, src/backend/cuda/cuda_affine.cu): the GPU matmul against the
// CPU reference within the CPU kernels' bound ((K + 8) 2^-24 M, tests/test_quant.c), rows 1-32; each row's
// result equal bit for bit to the same row computed alone (batch invariance); embed equal to the
// dequantised rows; greedy speculative == plain greedy on the quantised built-in model on the GPU.
TEST(cuda_affine_matmul_and_embed) {
    NEED_CUDA(be);
    bs_backend *ref = bs_backend_cpu(1);
    const int O = 75, K = 512;
    for (int bits = 4; bits <= 8; bits += 4)
        for (int group = 32; group <= 128; group *= 2) {
            int words = K * bits / 32, G = K / group;
            uint32_t *codes = malloc(sizeof(uint32_t) * O * words);
            uint16_t *sc = malloc(2 * O * G), *bi = malloc(2 * O * G);
            for (int i = 0; i < O * words; i++) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; codes[i] = (uint32_t)rs; }
            for (int i = 0; i < O * G; i++) { sc[i] = bs_f32_to_bf16(frand() * 0.1f); bi[i] = bs_f32_to_bf16(frand()); }
            bs_mat h = { .data = codes, .dtype = BS_BF16, .rows = O, .cols = K, .format = BS_WFMT_AFFINE, .bits = bits, .group = group,
                         .scales = sc, .biases = bi }, d;
            bs_err err = {0};
            CHECK(be->weight(be, &d, &h, &err) == 0, "%s", err.msg);
            float *x = rand_vec(32 * K, 1.0f), *yr = malloc(sizeof(float) * 32 * O), *y1 = malloc(sizeof(float) * 32 * O), *yn = malloc(sizeof(float) * 32 * O);
            float *dx = be->alloc(be, sizeof(float) * 32 * K, &err), *dy = be->alloc(be, sizeof(float) * 32 * O, &err);
            CHECK(dx && dy, "%s", err.msg);
            be->upload(be, dx, x, sizeof(float) * 32 * K);
            ref->matmul(ref, yr, x, 32, &h, 0);
            for (int i = 0; i < 32; i++) be->matmul(be, dy + (size_t)i * O, dx + (size_t)i * K, 1, &d, 0);
            be->download(be, y1, dy, sizeof(float) * 32 * O);
            for (int i = 0; i < 32; i++)
                for (int o = 0; o < O; o++) {
                    double M = 0;   // the bound's M: sum over groups of |s| sum |q x| + |b| sum |x|
                    for (int g = 0; g < G; g++) {
                        double s = bs_bf16_to_f32(sc[o * G + g]), b = bs_bf16_to_f32(bi[o * G + g]), sq = 0, sx = 0;
                        for (int k = g * group; k < (g + 1) * group; k++) {
                            unsigned q = bs_affine_code(codes + (size_t)o * words, bits, k);
                            sq += fabs(q * (double)x[(size_t)i * K + k]); sx += fabs(x[(size_t)i * K + k]);
                        }
                        M += fabs(s) * sq + fabs(b) * sx;
                    }
                    double e = fabs(y1[(size_t)i * O + o] - yr[(size_t)i * O + o]);
                    CHECK(e <= 2 * (K + 8) * 0x1p-24 * M, "bits %d group %d row %d col %d: |%g - %g| (two paths' errors: bound 2x)", bits, group, i, o,
                          y1[(size_t)i * O + o], yr[(size_t)i * O + o]);
                }
            for (int n = 2; n <= 32; n++) {
                be->matmul(be, dy, dx, n, &d, 0);
                be->download(be, yn, dy, sizeof(float) * n * O);
                CHECK(!memcmp(y1, yn, sizeof(float) * n * O), "bits %d group %d: %d rows differ from one-row calls", bits, group, n);
            }
            int32_t ids[3] = { 0, 74, 31 };
            float *row = malloc(sizeof(float) * K), *emb = malloc(sizeof(float) * 3 * K);
            be->embed(be, dy, &d, ids, 3);
            be->download(be, emb, dy, sizeof(float) * 3 * K);
            for (int i = 0; i < 3; i++) {
                bs_mat_row_f32(&h, ids[i], row);
                CHECK(!memcmp(row, emb + (size_t)i * K, sizeof(float) * K), "embed row %d", ids[i]);
            }
            be->free(be, dx); be->free(be, dy);
            free(row); free(emb); free(x); free(yr); free(y1); free(yn); free(codes); free(sc); free(bi);
        }
    ref->destroy(ref);
}

TEST(cuda_affine_greedy_spec_equals_plain) {
    NEED_CUDA(be);
    if (access("models/blockspec-30m/config.json", F_OK)) SKIP("models/blockspec-30m is not here (run from the repository root)");
    bs_err err = {0};
    char t[600], d[600];
    snprintf(t, sizeof t, "%s/t", bs_test_tmpdir("cuda_affine"));
    snprintf(d, sizeof d, "%s/d", bs_test_tmpdir("cuda_affine"));
    CHECK(bs_quantize_checkpoint("models/blockspec-30m", t, 4, 64, NULL, &err) == 0, "%s", err.msg);
    CHECK(bs_quantize_checkpoint("models/blockspec-30m-dspark", d, 4, 64, NULL, &err) == 0, "%s", err.msg);
    tu_greedy_spec_equals_plain(failed_, "cuda", t, d, NULL, 4, 61);
}
