// AVX-512 matmul kernel for MLX affine weights: cpu_matmul_affine.c's arithmetic on zmm registers, two
// weight rows per register (lanes 0-7: row a, 8-15: row b, each the 8 words of one 256-bit load), against
// x's prepared chunk broadcast into both halves. Lane l of a half does exactly what lane l of the AVX2
// kernel's accumulator does for that row (the same FMAs on the same operands in the same order, the same
// per-group scale FMA, the same bs_hsum8 of the half and scalar bias sum), so this path's results are the
// AVX2 path's bit for bit: rows in a verify block equal decode rows, and switching paths changes nothing.
// Half the instructions per weight; a single weight row left over takes the AVX2 kernel.
#include <immintrin.h>
#include "backend/affine.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_simd_avx2.h"

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define AI512 static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#ifndef PFD
#define PFD 2
#endif

AI512 __m256 half512(__m512 v, int h) {
    return h ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)) : _mm512_castps512_ps256(v);
}

// NP pairs of weight rows from o (rows o .. o + 2 NP - 1) x C activation rows (the AVX2 block's loop).
AI512 void aff512_block(const int bits, const int NP, const int C, const int PF, const bs_mat *W, int64_t o, const float *x, int64_t xs,
                        float *y, int64_t O, int acc) {
    const int P = 32 / bits, C8 = 8 * P;
    const int64_t K = W->cols, G = K / W->group, wpr = K * bits / 32;
    const int cpg = W->group / C8;
    const uint32_t *codes = (const uint32_t *)W->data + o * wpr;
    const bs_dtype dt = W->dtype;
    const void *scales = W->scales;
    __m512 A[4][4], D[4][4][2];
    for (int p = 0; p < NP; p++)
        for (int c = 0; c < C; c++) A[p][c] = D[p][c][0] = D[p][c][1] = _mm512_setzero_ps();
    int left = cpg;
    int64_t g = 0;
    for (int64_t k = 0; k < K; k += C8) {
        __m512i v[4];
        for (int p = 0; p < NP; p++)
            v[p] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(codes + 2 * p * wpr + k / P))),
                                      _mm256_loadu_si256((const __m256i *)(codes + (2 * p + 1) * wpr + k / P)), 1);
        if (PF && !((k / P) & 15))
            for (int i = 0; i < 2 * NP; i++) _mm_prefetch((const char *)(codes + (PFD * 2 * NP + i) * wpr + k / P), _MM_HINT_T0);
#pragma GCC unroll 8
        for (int j = 0; j < P; j++) {
            const __m512i m = _mm512_set1_epi32((int)(((1u << bits) - 1u) << (bits * j)));
            __m512 xv[4];
            for (int c = 0; c < C; c++) xv[c] = _mm512_broadcast_f32x8(_mm256_loadu_ps(x + c * xs + k + 8 * j));
            for (int p = 0; p < NP; p++) {
                __m512i q = j < P - 1 ? _mm512_and_si512(v[p], m) : _mm512_srli_epi32(v[p], bits * (P - 1));
                __m512 qf = _mm512_cvtepi32_ps(q);
                for (int c = 0; c < C; c++) D[p][c][j & 1] = _mm512_fmadd_ps(qf, xv[c], D[p][c][j & 1]);
            }
        }
        if (--left == 0) {
            for (int p = 0; p < NP; p++) {
                const size_t ga = (size_t)(o + 2 * p) * G + g, gb = ga + G;
                const float sa = dt == BS_BF16 ? bs_bf16_to_f32(((const uint16_t *)scales)[ga]) : bs_load_elem(scales, dt, ga);
                const float sb = dt == BS_BF16 ? bs_bf16_to_f32(((const uint16_t *)scales)[gb]) : bs_load_elem(scales, dt, gb);
                const __m512 sv = _mm512_insertf32x8(_mm512_set1_ps(sa), _mm256_set1_ps(sb), 1);
                for (int c = 0; c < C; c++) {
                    A[p][c] = _mm512_fmadd_ps(sv, _mm512_add_ps(D[p][c][0], D[p][c][1]), A[p][c]);
                    D[p][c][0] = D[p][c][1] = _mm512_setzero_ps();
                }
            }
            left = cpg;
            g++;
        }
    }
    for (int p = 0; p < NP; p++)
        for (int c = 0; c < C; c++)
            for (int h = 0; h < 2; h++) {
                float v = bs_hsum8(half512(A[p][c], h)) + bs_mm_affine_bias_dot(W, o + 2 * p + h, x + c * xs + K), *d = y + (size_t)c * O + 2 * p + h;
                *d = acc ? *d + v : v;
            }
}

#define B512(NP_, C_, PF_) (bits == 4 ? aff512_block(4, NP_, C_, PF_, W, o, x, xs, y, O, acc) : aff512_block(8, NP_, C_, PF_, W, o, x, xs, y, O, acc))
AI512 void aff512_rc(int bits, int NP, int C, int pf, const bs_mat *W, int64_t o, const float *x, int64_t xs, float *y, int64_t O, int acc) {
    if (NP == 4) { if (pf) B512(4, 1, 1); else B512(4, 1, 0); }
    else if (NP == 3) { if (pf) B512(3, 2, 1); else B512(3, 2, 0); }
    else if (NP == 2) { if (C == 1) B512(2, 1, 0); else if (C == 2) B512(2, 2, 0); else if (C == 3) B512(2, 3, 0); else B512(2, 4, 0); }
    else if (C == 1) B512(1, 1, 0);
    else if (C == 2) B512(1, 2, 0);
    else if (C == 3) B512(1, 3, 0);
    else B512(1, 4, 0);
}
#undef B512

T512 void bs_mm_affine_run_avx512(const bs_mat *W, int64_t o0, int64_t o1, const void *xpv, int r0, int r1, float *y, int acc) {
    const int64_t xs = bs_mm_affine_xp_floats(W), O = W->rows;
    if (W->group % (8 * (32 / W->bits))) { bs_mm_affine_run_avx2(W, o0, o1, xpv, r0, r1, y, acc); return; }   // (its scalar fallback)
    const float *xt = (const float *)xpv + (size_t)r0 * xs;
    float *yt = y + (size_t)r0 * O;
    const int bits = W->bits, nr = r1 - r0;
    int64_t o = o0;
    if (nr <= 2) {   // decode and 2-row blocks: 8 or 6 weight rows streamed at once
        const int NP = nr == 1 ? 4 : 3;
        for (; o + 2 * NP <= o1; o += 2 * NP) aff512_rc(bits, NP, nr, o + 2 * NP * (PFD + 1) <= o1, W, o, xt, xs, yt + o, O, acc);
        for (; o + 2 <= o1; o += 2) aff512_rc(bits, 1, nr, 0, W, o, xt, xs, yt + o, O, acc);
    } else {         // 3+ rows: the AVX2 kernel converts codes once per group (faster here than zmm blocks that
                     // convert them per activation-row group; same results either way)
        bs_mm_affine_run_avx2(W, o0, o1, xpv, r0, r1, y, acc);
        return;
    }
    if (o < o1) bs_mm_affine_run_avx2(W, o, o1, xpv, r0, r1, y, acc);   // a last single weight row
}
