// AVX2/FMA matmul kernels for BF16, F16 and F32 weights, fp32 activations and accumulation.
//
// Per 16 weights of one row the kernel produces two fp32 vectors (we, wo):
// - BF16: one 32-byte load; we = word << 16 (the even elements), wo = word & 0xffff0000 (the odd ones).
//   Two integer ops per 16 weights, no shuffles; x is permuted once per call (bs_mm_prep_evenodd) so
//   its evens and odds line up. This is the cheapest bf16 widening on AVX2.
// - F16: two vcvtph2ps (natural order); F32: two loads.
// Blocks: 8 / 6 weight rows x 1 / 2 activation rows, or 3 weight rows x groups of up to 4 (see below).
#include <stdlib.h>
#include "backend/cpu/cpu.h"
#include "util/tuning.h"
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

// Blocks. Every (weight row, activation row) pair has exactly one accumulator chain, updated in the same
// order (even half, then odd half, step by step), with the same horizontal sum and the same scalar K tail,
// in every block shape: a row's result never depends on how many rows share the call or how rows and
// weight rows are grouped or split over threads (a verify block must reproduce a decode step bit for bit).
// Only the grouping differs between shapes, and that is free to choose:
// - 1-2 activation rows (memory-bound: decode, the smallest verify blocks): 8 x 1 or 6 x 2 (mm_small_rows),
//   so each thread streams 8 or 6 weight rows at a time.
// - 3+ activation rows: 3 weight rows x groups of up to 4 activation rows = up to 12 accumulators (+2
//   weight registers + the mask), x as FMA memory operands. Measured on Zen 3 (one thread, L1-resident):
//   3x4 ~ 4x3 (12 chains, x memory operands) > 4x2 with x held in registers (8 chains: too few to hide the
//   4-cycle FMA latency, though it issues fewer loads) > 5x2 / 6x2 variants. 3 rows ran as 4 weight rows x
//   3 with the small-row blocks until session 14; on a Zen 5 EPYC the 3 x 3 group here is faster (streamed
//   6144 x 1024 matmul 243-258 vs 339-345 us, cached 217-223 vs 322-332 us).
// PF: prefetch the next block's weight rows (one line per row per 32 weights), issued by the first
// activation group of a block only (later groups find the block in L1/L2): the stream then does not stall
// on the hardware prefetcher at every 4 KiB page. Measured: 1-row forwards ~1.25x faster with it.
// Accumulators are named variables (arrays of __m256 are not reliably kept in registers by GCC); R, C and
// PF are compile-time constants after inlining, so unused accumulators and branches disappear.
// kf = K rounded down to 16.
#ifndef PFD
#define PFD 2
#endif
#define ZERO4(i) __m256 a##i##0 = _mm256_setzero_ps(), a##i##1 = a##i##0, a##i##2 = a##i##0, a##i##3 = a##i##0
#define FMA2(acc, xp) acc = _mm256_fmadd_ps(we, _mm256_loadu_ps(xp), acc); acc = _mm256_fmadd_ps(wo, _mm256_loadu_ps((xp) + 8), acc)
#define ST(a, i, j) bs_mm_store1(dt, bs_hsum8(a), W, w##i, K, kf, x##j, y + (size_t)j * O + i, acc)
AI_AVX2 void block(const int dt, const int R, const int C, const int PF, const void *W, int64_t o, int64_t K,
                   int64_t kf, const float *x, float *y, int64_t O, int acc) {
    ZERO4(0); ZERO4(1); ZERO4(2); ZERO4(3); ZERO4(4); ZERO4(5); ZERO4(6); ZERO4(7);
    const size_t esz = dt == BS_F32 ? 4 : 2;
    size_t w0 = (size_t)o * K, w1 = w0 + K, w2 = w1 + K, w3 = w2 + K, w4 = w3 + K, w5 = w4 + K, w6 = w5 + K, w7 = w6 + K;
    const float *x0 = x, *x1 = x + K, *x2 = x + 2 * K, *x3 = x + 3 * K;
    const char *pf = (const char *)W + (w0 + (size_t)PFD * R * K) * esz;   // PFD blocks ahead
    for (int64_t k = 0; k < kf; k += 16) {
        __m256 we, wo;
        if (PF && !(k & 31))
            for (int i = 0; i < R; i++) _mm_prefetch(pf + ((size_t)i * K + k) * esz, _MM_HINT_T0);
#define ROW(i) if (R > i) { loadw16(dt, W, w##i + k, &we, &wo); FMA2(a##i##0, x0 + k); \
               if (C > 1) { FMA2(a##i##1, x1 + k); } if (C > 2) { FMA2(a##i##2, x2 + k); } if (C > 3) { FMA2(a##i##3, x3 + k); } }
        ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5) ROW(6) ROW(7)
#undef ROW
    }
#define STROW(i) if (R > i) { ST(a##i##0, i, 0); if (C > 1) ST(a##i##1, i, 1); if (C > 2) ST(a##i##2, i, 2); if (C > 3) ST(a##i##3, i, 3); }
    STROW(0) STROW(1) STROW(2) STROW(3) STROW(4) STROW(5) STROW(6) STROW(7)
#undef STROW
}
#undef ST

// One (R, C) block with C and PF dispatched to compile-time constants.
#define BLK(R_, C_, PF_) block(dt, R_, C_, PF_, W, o, K, kf, x, y, O, acc)
AI_AVX2 void block_rc(const int dt, const int R, int C, int pf, const void *W, int64_t o, int64_t K, int64_t kf,
                      const float *x, float *y, int64_t O, int acc) {
    if (pf) {
        switch (C) { case 1: BLK(R, 1, 1); break; case 2: BLK(R, 2, 1); break; case 3: BLK(R, 3, 1); break; default: BLK(R, 4, 1); }
    } else {
        switch (C) { case 1: BLK(R, 1, 0); break; case 2: BLK(R, 2, 0); break; case 3: BLK(R, 3, 0); break; default: BLK(R, 4, 0); }
    }
}
#undef BLK

// Weight rows per block of a 1- or 2-row matmul (BS_CPU_MM1_ROWS=4 for the previous 4 x n blocks): 8 x 1
// and 6 x 2 keep 8 and 12 independent accumulator chains and stream 8 / 6 weight rows at once.
static int mm_small_rows(int nr) {
    static int v = 0;
    if (!v) v = bs_tuning_get()->cpu_mm1_rows == 4 ? 4 : 8;
    return v == 4 ? 4 : nr == 1 ? 8 : 6;
}

AI_AVX2 void run_dt(const int dt, const bs_mat *W, int64_t o0, int64_t o1, const float *x, int r0, int r1,
                    float *y, int acc) {
    int64_t K = W->cols, O = W->rows, kf = K / 16 * 16;
    int nr = r1 - r0;
    const float *xt = x + (size_t)r0 * K;
    float *yt = y + (size_t)r0 * O;
    if (nr <= 2) {   // memory-bound: 8 or 6 weight rows x all rows (mm_small_rows)
        int64_t o = o0;
        const int R = mm_small_rows(nr);
        if (R == 8)
            for (; o + 8 <= o1; o += 8) {
                int pf = o + 8 * (PFD + 1) <= o1;
                block_rc(dt, 8, nr, pf, W->data, o, K, kf, xt, yt + o, O, acc);
            }
        if (R == 6)
            for (; o + 6 <= o1; o += 6) {
                int pf = o + 6 * (PFD + 1) <= o1;
                block_rc(dt, 6, nr, pf, W->data, o, K, kf, xt, yt + o, O, acc);
            }
        for (; o + 4 <= o1; o += 4) {
            int pf = o + 4 * (PFD + 1) <= o1;
            block_rc(dt, 4, nr, pf, W->data, o, K, kf, xt, yt + o, O, acc);
        }
        for (; o < o1; o++) block_rc(dt, 1, nr, 0, W->data, o, K, kf, xt, yt + o, O, acc);
        return;
    }
    for (int64_t o = o0; o < o1;) {
        int R = o1 - o >= 3 ? 3 : 1, pf = o + (PFD + 1) * R <= o1;
        for (int r = 0; r < nr;) {
            int rn = bs_mm_group_rows(nr - r);
            if (R == 3) block_rc(dt, 3, rn, pf && r == 0, W->data, o, K, kf, xt + (size_t)r * K, yt + (size_t)r * O + o, O, acc);
            else block_rc(dt, 1, rn, 0, W->data, o, K, kf, xt + (size_t)r * K, yt + (size_t)r * O + o, O, acc);
            r += rn;
        }
        o += R;
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

const bs_mm_kernel bs_mm_avx2[BS_MM_KINDS] = {
    [BS_F32] = { NULL, 4, run_f32 }, [BS_BF16] = { prep_bf16, 4, run_bf16 }, [BS_F16] = { NULL, 4, run_f16 },
    [BS_MM_AFF4] = BS_MM_AFFINE_AVX2, [BS_MM_AFF8] = BS_MM_AFFINE_AVX2,
};
