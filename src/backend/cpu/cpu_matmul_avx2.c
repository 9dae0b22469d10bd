// AVX2/FMA matmul kernels for BF16, F16 and F32 weights, fp32 activations and accumulation.
//
// Per 16 weights of one row the kernel produces two fp32 vectors (we, wo):
// - BF16: one 32-byte load; we = word << 16 (the even elements), wo = word & 0xffff0000 (the odd ones).
//   Two integer ops per 16 weights, no shuffles; x is permuted once per call (bs_mm_prep_evenodd) so
//   its evens and odds line up. This is the cheapest bf16 widening on AVX2.
// - F16: two vcvtph2ps (natural order); F32: two loads.
// Blocks: 4 weight rows x up to 3 activation rows = 12 accumulators (+2 weight registers, x as FMA memory
// operands); 1 activation row uses separate even/odd accumulators (8 chains) to cover FMA latency.
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

// y[r][o..o+RO) for r in [0,RN) (y, x already offset); K total, kf = K rounded down to 16.
AI_AVX2 void block(const int dt, const int RO, const int RN, const void *W, int64_t o, int64_t K, int64_t kf,
                   const float *x, float *y, int64_t O, int acc) {
    __m256 a[4][3], b[4];
    for (int i = 0; i < RO; i++) { b[i] = _mm256_setzero_ps(); for (int j = 0; j < RN; j++) a[i][j] = _mm256_setzero_ps(); }
    size_t wrow = (size_t)o * K;
    for (int64_t k = 0; k < kf; k += 16) {
        for (int i = 0; i < RO; i++) {
            __m256 we, wo;
            loadw16(dt, W, wrow + (size_t)i * K + k, &we, &wo);
            if (RN == 1) {
                a[i][0] = _mm256_fmadd_ps(we, _mm256_loadu_ps(x + k), a[i][0]);
                b[i] = _mm256_fmadd_ps(wo, _mm256_loadu_ps(x + k + 8), b[i]);
            } else {
                for (int j = 0; j < RN; j++) {
                    a[i][j] = _mm256_fmadd_ps(we, _mm256_loadu_ps(x + j * K + k), a[i][j]);
                    a[i][j] = _mm256_fmadd_ps(wo, _mm256_loadu_ps(x + j * K + k + 8), a[i][j]);
                }
            }
        }
    }
    for (int i = 0; i < RO; i++)
        for (int j = 0; j < RN; j++) {
            float s = bs_hsum8(RN == 1 ? _mm256_add_ps(a[i][0], b[i]) : a[i][j]);
            for (int64_t k = kf; k < K; k++) s += x[j * K + k] * bs_load_elem(W, dt, wrow + (size_t)i * K + k);
            float *d = y + (size_t)j * O + i;
            *d = acc ? *d + s : s;
        }
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
                if (rn == 3) block(dt, 4, 3, W->data, o, K, kf, xr, yr, O, acc);
                else if (rn == 2) block(dt, 4, 2, W->data, o, K, kf, xr, yr, O, acc);
                else block(dt, 4, 1, W->data, o, K, kf, xr, yr, O, acc);
            } else {
                if (rn == 3) block(dt, 1, 3, W->data, o, K, kf, xr, yr, O, acc);
                else if (rn == 2) block(dt, 1, 2, W->data, o, K, kf, xr, yr, O, acc);
                else block(dt, 1, 1, W->data, o, K, kf, xr, yr, O, acc);
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
