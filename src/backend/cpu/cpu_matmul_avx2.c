// AVX2/FMA matmul kernels for BF16, F16 and F32 weights, fp32 activations and accumulation.
//
// Per 16 weights of one row the kernel produces two fp32 vectors (we, wo):
// - BF16: one 32-byte load; we = word << 16 (the even elements), wo = word & 0xffff0000 (the odd ones).
//   Two integer ops per 16 weights, no shuffles; x is permuted once per call (bs_mm_prep_evenodd) so
//   its evens and odds line up. This is the cheapest bf16 widening on AVX2.
// - F16: two vcvtph2ps (natural order); F32: two loads.
// Blocks: 4 weight rows x up to 3 activation rows = 12 accumulators (+2 weight registers, x as FMA memory
// operands). Every (weight row, activation row) pair has one accumulator chain in every block shape.
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_simd_avx2.h"

AI_AVX2 void loadw16(int dt, const void *W, size_t i, __m256 *we, __m256 *wo) {
    if (dt == BS_BF16) {
        __m256i v = _mm256_loadu_si256((const __m256i *)((const uint16_t *)W + i));
        *we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
        *wo = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000u)));
    } else if (dt == BS_F16) {
        const uint16_t *p = (const uint16_t *)W + i;
        *we = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
        *wo = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 8)));
    } else {
        const float *p = (const float *)W + i;
        *we = _mm256_loadu_ps(p);
        *wo = _mm256_loadu_ps(p + 8);
    }
}

// Tail of one (weight row, activation row) dot product past kf, plus the store.
AI_AVX2 void store1(int dt, float s, const void *W, size_t wrow, int64_t K, int64_t kf, const float *x, float *d, int acc) {
    for (int64_t k = kf; k < K; k++) s += x[k] * bs_load_elem(W, dt, wrow + k);
    *d = acc ? *d + s : s;
}

// y[r][o..o+4) for r in [0,RN), RN = 1, 2, 3 (y and x already offset to the tile). Accumulators are named
// variables (arrays of __m256 are not reliably kept in registers by GCC). kf = K rounded down to 16.
#define ZERO(v) __m256 v = _mm256_setzero_ps()
#define FMA2(acc, we, wo, xp) acc = _mm256_fmadd_ps(we, _mm256_loadu_ps(xp), acc); acc = _mm256_fmadd_ps(wo, _mm256_loadu_ps((xp) + 8), acc)
AI_AVX2 void block4x3(const int dt, const void *W, int64_t o, int64_t K, int64_t kf, const float *x, float *y, int64_t O, int acc) {
    ZERO(a00); ZERO(a01); ZERO(a02); ZERO(a10); ZERO(a11); ZERO(a12);
    ZERO(a20); ZERO(a21); ZERO(a22); ZERO(a30); ZERO(a31); ZERO(a32);
    size_t w0 = (size_t)o * K, w1 = w0 + K, w2 = w1 + K, w3 = w2 + K;
    const float *x0 = x, *x1 = x + K, *x2 = x + 2 * K;
    for (int64_t k = 0; k < kf; k += 16) {
        __m256 we, wo;
        loadw16(dt, W, w0 + k, &we, &wo); FMA2(a00, we, wo, x0 + k); FMA2(a01, we, wo, x1 + k); FMA2(a02, we, wo, x2 + k);
        loadw16(dt, W, w1 + k, &we, &wo); FMA2(a10, we, wo, x0 + k); FMA2(a11, we, wo, x1 + k); FMA2(a12, we, wo, x2 + k);
        loadw16(dt, W, w2 + k, &we, &wo); FMA2(a20, we, wo, x0 + k); FMA2(a21, we, wo, x1 + k); FMA2(a22, we, wo, x2 + k);
        loadw16(dt, W, w3 + k, &we, &wo); FMA2(a30, we, wo, x0 + k); FMA2(a31, we, wo, x1 + k); FMA2(a32, we, wo, x2 + k);
    }
#define ST(a, i, j) store1(dt, bs_hsum8(a), W, w##i, K, kf, x##j, y + (size_t)j * O + i, acc)
    ST(a00, 0, 0); ST(a01, 0, 1); ST(a02, 0, 2); ST(a10, 1, 0); ST(a11, 1, 1); ST(a12, 1, 2);
    ST(a20, 2, 0); ST(a21, 2, 1); ST(a22, 2, 2); ST(a30, 3, 0); ST(a31, 3, 1); ST(a32, 3, 2);
}
AI_AVX2 void block4x2(const int dt, const void *W, int64_t o, int64_t K, int64_t kf, const float *x, float *y, int64_t O, int acc) {
    ZERO(a00); ZERO(a01); ZERO(a10); ZERO(a11); ZERO(a20); ZERO(a21); ZERO(a30); ZERO(a31);
    size_t w0 = (size_t)o * K, w1 = w0 + K, w2 = w1 + K, w3 = w2 + K;
    const float *x0 = x, *x1 = x + K;
    for (int64_t k = 0; k < kf; k += 16) {
        __m256 we, wo;
        loadw16(dt, W, w0 + k, &we, &wo); FMA2(a00, we, wo, x0 + k); FMA2(a01, we, wo, x1 + k);
        loadw16(dt, W, w1 + k, &we, &wo); FMA2(a10, we, wo, x0 + k); FMA2(a11, we, wo, x1 + k);
        loadw16(dt, W, w2 + k, &we, &wo); FMA2(a20, we, wo, x0 + k); FMA2(a21, we, wo, x1 + k);
        loadw16(dt, W, w3 + k, &we, &wo); FMA2(a30, we, wo, x0 + k); FMA2(a31, we, wo, x1 + k);
    }
    ST(a00, 0, 0); ST(a01, 0, 1); ST(a10, 1, 0); ST(a11, 1, 1);
    ST(a20, 2, 0); ST(a21, 2, 1); ST(a30, 3, 0); ST(a31, 3, 1);
}
// One activation row. Each output keeps the same single FMA chain as in the multi-row blocks, so a row's
// result never depends on how many rows share the call (a verify block must reproduce a decode step
// bit for bit, or greedy speculative output could drift). Four chains still outrun memory at one row.
AI_AVX2 void block4x1(const int dt, const void *W, int64_t o, int64_t K, int64_t kf, const float *x, float *y, int64_t O, int acc) {
    ZERO(a00); ZERO(a10); ZERO(a20); ZERO(a30);
    size_t w0 = (size_t)o * K, w1 = w0 + K, w2 = w1 + K, w3 = w2 + K;
    const float *x0 = x;
    for (int64_t k = 0; k < kf; k += 16) {
        __m256 we, wo;
        loadw16(dt, W, w0 + k, &we, &wo); FMA2(a00, we, wo, x0 + k);
        loadw16(dt, W, w1 + k, &we, &wo); FMA2(a10, we, wo, x0 + k);
        loadw16(dt, W, w2 + k, &we, &wo); FMA2(a20, we, wo, x0 + k);
        loadw16(dt, W, w3 + k, &we, &wo); FMA2(a30, we, wo, x0 + k);
    }
    ST(a00, 0, 0); ST(a10, 1, 0); ST(a20, 2, 0); ST(a30, 3, 0);
}
// One weight row (the O % 4 tail) x RN activation rows.
AI_AVX2 void block1(const int dt, const int RN, const void *W, int64_t o, int64_t K, int64_t kf, const float *x, float *y, int64_t O, int acc) {
    ZERO(a0); ZERO(a1); ZERO(a2);
    size_t w0 = (size_t)o * K;
    const float *x0 = x, *x1 = x + K, *x2 = x + 2 * K;
    for (int64_t k = 0; k < kf; k += 16) {
        __m256 we, wo;
        loadw16(dt, W, w0 + k, &we, &wo);
        FMA2(a0, we, wo, x0 + k);
        if (RN > 1) { FMA2(a1, we, wo, x1 + k); }
        if (RN > 2) { FMA2(a2, we, wo, x2 + k); }
    }
    ST(a0, 0, 0);
    if (RN > 1) ST(a1, 0, 1);
    if (RN > 2) ST(a2, 0, 2);
#undef ST
}

AI_AVX2 void run_dt(const int dt, const bs_mat *W, int64_t o0, int64_t o1, const float *x, int r0, int r1,
                    float *y, int acc) {
    int64_t K = W->cols, O = W->rows, kf = K / 16 * 16;
    for (int64_t o = o0; o < o1;) {
        int ro = o1 - o >= 4 ? 4 : 1;
        for (int r = r0; r < r1;) {
            int rn = r1 - r >= 3 ? 3 : r1 - r;
            const float *xr = x + (size_t)r * K;
            float *yr = y + (size_t)r * O + o;
            if (ro == 4) {
                if (rn == 3) block4x3(dt, W->data, o, K, kf, xr, yr, O, acc);
                else if (rn == 2) block4x2(dt, W->data, o, K, kf, xr, yr, O, acc);
                else block4x1(dt, W->data, o, K, kf, xr, yr, O, acc);
            } else {
                if (rn == 3) block1(dt, 3, W->data, o, K, kf, xr, yr, O, acc);
                else if (rn == 2) block1(dt, 2, W->data, o, K, kf, xr, yr, O, acc);
                else block1(dt, 1, W->data, o, K, kf, xr, yr, O, acc);
            }
            r += rn;
        }
        o += ro;
    }
}

TGT_AVX2 static void run_bf16(const bs_mat *W, int64_t o0, int64_t o1, const void *x, int r0, int r1, float *y, int acc) {
    run_dt(BS_BF16, W, o0, o1, x, r0, r1, y, acc);
}
TGT_AVX2 static void run_f16(const bs_mat *W, int64_t o0, int64_t o1, const void *x, int r0, int r1, float *y, int acc) {
    run_dt(BS_F16, W, o0, o1, x, r0, r1, y, acc);
}
TGT_AVX2 static void run_f32(const bs_mat *W, int64_t o0, int64_t o1, const void *x, int r0, int r1, float *y, int acc) {
    run_dt(BS_F32, W, o0, o1, x, r0, r1, y, acc);
}
static void prep_bf16(void *xp, const float *x, int n, int K) { bs_mm_prep_evenodd(xp, x, n, K, 16); }

const bs_mm_kernel bs_mm_avx2[3] = {
    [BS_F32] = { NULL, 4, run_f32 }, [BS_BF16] = { prep_bf16, 4, run_bf16 }, [BS_F16] = { NULL, 4, run_f16 },
};
