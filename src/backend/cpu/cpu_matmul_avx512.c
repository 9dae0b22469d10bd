// AVX-512 matmul kernels: the AVX2 path's arithmetic on zmm registers (so this path's results are the AVX2
// path's, bit for bit), and the opt-in AVX512-BF16 kernel.
//
// BS_CPU_AVX512 (BF16 weights): the block for 2+ activation rows (verify blocks, drafter blocks, prefill)
// holds two weight rows per zmm register, [16 weights of row a | the same 16 of row b], against x
// duplicated into both halves. Lane l < 8 then does exactly what lane l of row a's ymm accumulator does in
// cpu_matmul_avx2.c's 3 x C block (per 16-wide step: the even weights times x's even half, then the odd
// ones), and lane 8 + l the same for row b; each half is summed by the same bs_hsum8 tree and K tail
// (bs_mm_store1, shared with it). So every (weight row, activation row) result is the AVX2 kernel's:
// decode rows (which stay on the AVX2 8 x 1 block, memory-bound, where zmm did not stream faster) and rows in a
// verify block agree bit for bit, as row invariance requires, and switching between the avx2 and avx512
// paths changes no result. F16 and F32 weights use the AVX2 kernels unchanged.
// Why not AVX-512's own 16-lane chains (this file until session 14): their sums differ from AVX2's, so the
// path was a second arithmetic to test, and its 1-row kernel streamed ~8% slower than AVX2's on a Zen 5
// EPYC; the paired block computes the AVX2 sums at the zmm kernels' rate (docs/history/benchmarks-diary.md, session 14).
//
// BS_CPU_AVX512BF16 (BF16 weights only): x is rounded to bf16 (round-to-nearest-even) once per call and
// each 32-weight step is one vdpbf16ps (pairwise bf16 products accumulated in fp32). Error: bf16 keeps 8
// significant bits, so rounding moves each x_i by at most 2^-8 of itself (half an ulp), and
// |y - y_ref| <= 2^-8 * sum_i |x_i w_i| plus the fp32 accumulation's part (~K 2^-24 of the same sum); the
// test requires (2^-8 + 1e-5) * sum|x w| and prints the worst observed (~0.0037 of the sum: rounding errors
// of one sign do occur). This is NOT the exact path and is used only when BS_CPU_KERNELS=avx512bf16 asks for it.
#include <immintrin.h>
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_simd_avx2.h"

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define AI512 static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#ifndef PFD
#define PFD 2   // prefetch distance in blocks, as the AVX2 kernels
#endif

// ---- the compute-bound BF16 block, two weight rows per zmm ----
// 3 pairs of weight rows (6 rows) x C <= 4 activation rows: 12 zmm accumulators, each lane-for-lane the
// AVX2 3 x 4 block's accumulators of two rows.
#define PAIRS 3
AI512 __m512i load_pair(const uint16_t *a, const uint16_t *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}
AI512 __m512 dup8(const float *p) { return _mm512_broadcast_f32x8(_mm256_loadu_ps(p)); }   // [p[0..8) | p[0..8)]
AI512 __m256 half(__m512 v, int h) {
    return h ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)) : _mm512_castps512_ps256(v);
}
// The block's epilogue, vectorised. bs_hsum8 sums a 256-bit half as (1) its low 128 bits + its high 128
// bits, (2) elements 0 + 2 and 1 + 3, (3) element 0 + 1. Each step below does that step for many halves
// at once with shuffles that put the same two operands, in the same order, into the two sides of one add,
// so every result is bs_hsum8's bit for bit (test: cpu_avx512_matmul_equals_avx2). Lane bookkeeping:
// red1(A, B) holds the step-(1) sums of [A.h0, A.h1, B.h0, B.h1] in its four 128-bit blocks; red3(red2(S0,
// S1), red2(S2, S3)) holds in lane 4q + e the final sum of block q of S_e.
AI512 __m512 red1(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}
AI512 __m512 red2(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}
AI512 __m512 red3(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}
// a<p><c>: pair p (weight rows 2p, 2p + 1 of the block) x activation row c. With S_c = red1(a0c, a1c),
// R0 lane 4j + c is (row c, weight row j) for j < 4; with S4 = red1(a20, a21), S5 = red1(a22, a23),
// R1 = red3(red2(S4, S5), same) holds weight rows 4, 5: lane 4(2c + j - 4) for c < 2, 4(2(c - 2) + j - 4) + 1
// for c >= 2. One two-source permute then gathers activation row c's six sums into lanes 0-5.
AI512 void store_block(int C, __m512 a00, __m512 a01, __m512 a02, __m512 a03, __m512 a10, __m512 a11, __m512 a12,
                       __m512 a13, __m512 a20, __m512 a21, __m512 a22, __m512 a23, float *y, int64_t O, int acc) {
    const __m512 r0 = red3(red2(red1(a00, a10), red1(a01, a11)), red2(red1(a02, a12), red1(a03, a13)));
    const __m512 p45 = red2(red1(a20, a21), red1(a22, a23)), r1 = red3(p45, p45);
    static const int idx[4][16] = {
        { 0, 4, 8, 12, 16 + 0, 16 + 4 }, { 1, 5, 9, 13, 16 + 8, 16 + 12 },
        { 2, 6, 10, 14, 16 + 1, 16 + 5 }, { 3, 7, 11, 15, 16 + 9, 16 + 13 },
    };
    for (int c = 0; c < C; c++) {
        __m512 v = _mm512_permutex2var_ps(r0, _mm512_loadu_si512((const void *)idx[c]), r1);
        float *d = y + (size_t)c * O;
        if (acc) v = _mm512_add_ps(_mm512_maskz_loadu_ps(0x3f, d), v);
        _mm512_mask_storeu_ps(d, 0x3f, v);
    }
}

AI512 void pairs_block(const int C, const int PF, const uint16_t *W, int64_t o, int64_t K, int64_t kf, const float *x,
                       float *y, int64_t O, int acc) {
    __m512 a00 = _mm512_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00, a12 = a00, a13 = a00;
    __m512 a20 = a00, a21 = a00, a22 = a00, a23 = a00;
    const uint16_t *w = W + (size_t)o * K;
    const float *x0 = x, *x1 = x + K, *x2 = x + 2 * K, *x3 = x + 3 * K;
    const __m512i mask = _mm512_set1_epi32((int)0xffff0000u);
    const char *pf = (const char *)(w + (size_t)PFD * 2 * PAIRS * K);   // PFD blocks ahead
    for (int64_t k = 0; k < kf; k += 16) {
        if (PF && !(k & 31))
            for (int i = 0; i < 2 * PAIRS; i++) _mm_prefetch(pf + ((size_t)i * K + k) * 2, _MM_HINT_T0);
        __m512 e0 = dup8(x0 + k), o0 = dup8(x0 + k + 8), e1 = e0, o1 = o0, e2 = e0, o2 = o0, e3 = e0, o3 = o0;
        if (C > 1) { e1 = dup8(x1 + k); o1 = dup8(x1 + k + 8); }
        if (C > 2) { e2 = dup8(x2 + k); o2 = dup8(x2 + k + 8); }
        if (C > 3) { e3 = dup8(x3 + k); o3 = dup8(x3 + k + 8); }
#define F2(A, c) A = _mm512_fmadd_ps(we, e##c, A); A = _mm512_fmadd_ps(wo, o##c, A)
#define PAIR(p) { __m512i v = load_pair(w + (size_t)(2 * p) * K + k, w + (size_t)(2 * p + 1) * K + k); \
                  __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), wo = _mm512_castsi512_ps(_mm512_and_si512(v, mask)); \
                  F2(a##p##0, 0); if (C > 1) { F2(a##p##1, 1); } if (C > 2) { F2(a##p##2, 2); } if (C > 3) { F2(a##p##3, 3); } }
        PAIR(0) PAIR(1) PAIR(2)
#undef PAIR
#undef F2
    }
    if (kf == K) {   // no K tail: the 24 bs_hsum8 trees at once (store_block), same adds in the same order
        store_block(C, a00, a01, a02, a03, a10, a11, a12, a13, a20, a21, a22, a23, y + o, O, acc);
        return;
    }
    const __m512 accs[PAIRS][4] = { { a00, a01, a02, a03 }, { a10, a11, a12, a13 }, { a20, a21, a22, a23 } };
    const float *xs[4] = { x0, x1, x2, x3 };
    for (int p = 0; p < PAIRS; p++)
        for (int c = 0; c < C; c++)
            for (int h = 0; h < 2; h++) {
                const int64_t r = o + 2 * p + h;
                bs_mm_store1(BS_BF16, bs_hsum8(half(accs[p][c], h)), W, (size_t)r * K, K, kf, xs[c], y + (size_t)c * O + r, acc);
            }
}

// One pairs block with C and PF as compile-time constants.
AI512 void pairs_rc(int C, int pf, const uint16_t *W, int64_t o, int64_t K, int64_t kf, const float *x, float *y, int64_t O,
                    int acc) {
#define B(C_, PF_) pairs_block(C_, PF_, W, o, K, kf, x, y, O, acc)
    if (pf) { switch (C) { case 1: B(1, 1); break; case 2: B(2, 1); break; case 3: B(3, 1); break; default: B(4, 1); } }
    else { switch (C) { case 1: B(1, 0); break; case 2: B(2, 0); break; case 3: B(3, 0); break; default: B(4, 0); } }
#undef B
}

// 1 activation row, and the weight rows past the last whole block of 6: the AVX2 kernel itself. (2 and 3
// rows measured faster paired: 3-row forward 27.3-28.0 vs 38.4-41.4 ms, 2 rows 25.9-26.6 vs 26.7-27.6.)
T512 static void run_bf16(const bs_mat *W, int64_t o0, int64_t o1, const void *xv, int r0, int r1, float *y, int acc) {
    const int nr = r1 - r0;
    const int64_t K = W->cols, O = W->rows, kf = K / 16 * 16;
    int64_t o = o0;
    if (nr >= 2) {
        const float *x = (const float *)xv + (size_t)r0 * K;
        float *yt = y + (size_t)r0 * O;
        for (; o + 2 * PAIRS <= o1; o += 2 * PAIRS) {
            const int pf = o + 2 * PAIRS * (PFD + 1) <= o1;
            for (int r = 0; r < nr;) {
                const int rn = bs_mm_group_rows(nr - r);
                pairs_rc(rn, pf && r == 0, W->data, o, K, kf, x + (size_t)r * K, yt + (size_t)r * O, O, acc);
                r += rn;
            }
        }
    }
    if (o < o1) bs_mm_avx2[BS_BF16].run(W, o, o1, xv, r0, r1, y, acc);
}
static void run_f32(const bs_mat *W, int64_t o0, int64_t o1, const void *x, int r0, int r1, float *y, int acc) {
    bs_mm_avx2[BS_F32].run(W, o0, o1, x, r0, r1, y, acc);
}
static void run_f16(const bs_mat *W, int64_t o0, int64_t o1, const void *x, int r0, int r1, float *y, int acc) {
    bs_mm_avx2[BS_F16].run(W, o0, o1, x, r0, r1, y, acc);
}
static void prep_bf16(void *xp, const float *x, int n, int K) { bs_mm_prep_evenodd(xp, x, n, K, 16); }

const bs_mm_kernel bs_mm_avx512[BS_MM_KINDS] = {
    [BS_F32] = { NULL, 4, run_f32 }, [BS_BF16] = { prep_bf16, 4, run_bf16 }, [BS_F16] = { NULL, 4, run_f16 },
    [BS_MM_AFF4] = BS_MM_AFFINE_AVX512, [BS_MM_AFF8] = BS_MM_AFFINE_AVX512,
};

// ---- AVX512-BF16: activations rounded to bf16, vdpbf16ps ----
#define TBF __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))
static void prep_x_bf16(void *xp, const float *x, int n, int K) {
    uint16_t *d = xp;
    for (size_t i = 0; i < (size_t)n * K; i++) d[i] = bs_f32_to_bf16(x[i]);
}
// Blocks of R weight rows x C activation rows (R x C <= 16 accumulators): 8 x 1 and 8 x 2 for 1-2 rows
// (memory-bound: 8 weight rows streamed at once, prefetched), 4 x 4 for more (per 32-wide step 4 weight
// and 4 x loads for 16 vdpbf16ps). Every activation group of a block prefetches, so the weight stream does
// not pause while later groups compute (8-12-row matmuls streamed 5-20% faster than with group 0 alone).
// Each (weight row, activation row) pair has one accumulator whatever the block, summed by the same tree
// (red16) and the same scalar K tail, so a row's result does not depend on the rows beside it (row
// invariance, as on the exact paths).
#define AIBF static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))
// 16 accumulators -> their 16 horizontal sums in one vector (45 instructions instead of 16 reductions):
// halves, then quarters, then pairs of lanes are added across accumulators. Accumulator n ends in lane
// BF_ACC_LANE[n] (a permutation that is its own inverse); zero-padded to 32 so that a 16-lane index load
// from any c R stays inside the table.
static const int BF_ACC_LANE[32] = { 0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15 };
AIBF __m512 bf_red_a(__m512 a, __m512 b) { return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2))); }
AIBF __m512 bf_red_b(__m512 a, __m512 b) { return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1))); }
AIBF __m512 bf_red_c(__m512 a, __m512 b) { return _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2))); }
AIBF __m512 bf_red_d(__m512 a, __m512 b) { return _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))); }
AIBF __m512 red16(const __m512 *a) {
    __m512 b[8], c[4], d[2];
    for (int i = 0; i < 8; i++) b[i] = bf_red_a(a[i], a[i + 8]);
    for (int i = 0; i < 4; i++) c[i] = bf_red_b(b[i], b[i + 4]);
    for (int i = 0; i < 2; i++) d[i] = bf_red_c(c[i], c[i + 2]);
    return bf_red_d(d[0], d[1]);
}
// Accumulator n = c R + i is (activation row c, weight row i); y[c O + i] gets its sum (+ y with acc).
AIBF void dot_block(const int R, const int C, const int PF, const uint16_t *W, int64_t o, int64_t K, int64_t kf,
                    const uint16_t *x, float *y, int64_t O, int acc) {
    __m512 a[16];
    for (int n = 0; n < 16; n++) a[n] = _mm512_setzero_ps();
    const uint16_t *w = W + (size_t)o * K;
    const char *pf = (const char *)(w + (size_t)PFD * R * K);   // PFD blocks ahead
    for (int64_t k = 0; k < kf; k += 32) {
        __m512bh wv[8];
        for (int i = 0; i < R; i++) {
            if (PF) _mm_prefetch(pf + ((size_t)i * K + k) * 2, _MM_HINT_T0);
            wv[i] = (__m512bh)_mm512_loadu_si512((const void *)(w + (size_t)i * K + k));
        }
        for (int c = 0; c < C; c++) {
            const __m512bh xv = (__m512bh)_mm512_loadu_si512((const void *)(x + (size_t)c * K + k));
            for (int i = 0; i < R; i++) a[c * R + i] = _mm512_dpbf16_ps(a[c * R + i], wv[i], xv);
        }
    }
    const __m512 sums = red16(a);
    if (kf == K) {
        const __mmask16 m = (__mmask16)((1u << R) - 1);
        for (int c = 0; c < C; c++) {
            __m512 v = _mm512_permutexvar_ps(_mm512_loadu_si512((const void *)(BF_ACC_LANE + c * R)), sums);
            float *d = y + (size_t)c * O + o;
            if (acc) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, d), v);
            _mm512_mask_storeu_ps(d, m, v);
        }
        return;
    }
    float t[16];
    _mm512_storeu_ps(t, sums);
    for (int c = 0; c < C; c++)
        for (int i = 0; i < R; i++) {
            float s = t[BF_ACC_LANE[c * R + i]];
            const uint16_t *xr = x + (size_t)c * K, *wr = w + (size_t)i * K;
            for (int64_t k = kf; k < K; k++) s += bs_bf16_to_f32(xr[k]) * bs_bf16_to_f32(wr[k]);
            float *d = y + (size_t)c * O + o + i;
            *d = acc ? *d + s : s;
        }
}
// R weight rows (compile-time: 8, 4, or the tail's 1-3) x C in 1..4 activation rows, PF on or off.
#define DB(R_, C_, PF_) dot_block(R_, C_, PF_, W, o, K, kf, x, y, O, acc)
#define DB_C(R_, PF_) switch (C) { case 1: DB(R_, 1, PF_); break; case 2: DB(R_, 2, PF_); break; case 3: DB(R_, 3, PF_); break; default: DB(R_, 4, PF_); }
AIBF void dot_rc(int R, int C, int pf, const uint16_t *W, int64_t o, int64_t K, int64_t kf, const uint16_t *x, float *y,
                 int64_t O, int acc) {
    if (R == 8) { if (C == 1) { if (pf) DB(8, 1, 1); else DB(8, 1, 0); } else { if (pf) DB(8, 2, 1); else DB(8, 2, 0); } return; }
    if (pf) { DB_C(4, 1) return; }
    switch (R) { case 1: DB_C(1, 0) break; case 2: DB_C(2, 0) break; case 3: DB_C(3, 0) break; default: DB_C(4, 0) }
}
#undef DB_C
#undef DB
TBF static void run_dot_bf16(const bs_mat *Wm, int64_t o0, int64_t o1, const void *xpv, int r0, int r1, float *y, int acc) {
    const uint16_t *W = Wm->data, *xp = (const uint16_t *)xpv + (size_t)r0 * Wm->cols;
    const int64_t K = Wm->cols, O = Wm->rows, kf = K / 32 * 32;
    const int nr = r1 - r0;
    float *yt = y + (size_t)r0 * O;
    int64_t o = o0;
    if (nr <= 2)
        for (; o + 8 <= o1; o += 8) dot_rc(8, nr, o + 8 * (PFD + 1) <= o1, W, o, K, kf, xp, yt, O, acc);
    for (; o < o1; o += 4) {
        const int R = o1 - o < 4 ? (int)(o1 - o) : 4, pf = R == 4 && o + 4 * (PFD + 1) <= o1;
        for (int r = 0; r < nr; r += 4) {
            const int C = nr - r < 4 ? nr - r : 4;
            dot_rc(R, C, pf, W, o, K, kf, xp + (size_t)r * K, yt + (size_t)r * O, O, acc);
        }
    }
}
const bs_mm_kernel bs_mm_avx512bf16[BS_MM_KINDS] = {
    [BS_F32] = { NULL, 4, run_f32 }, [BS_BF16] = { prep_x_bf16, 2, run_dot_bf16 }, [BS_F16] = { NULL, 4, run_f16 },
    [BS_MM_AFF4] = BS_MM_AFFINE_AVX512, [BS_MM_AFF8] = BS_MM_AFFINE_AVX512,
};
