// AVX2/FMA matmul kernels for MLX affine weights (4 and 8 bits, docs/quantization.md), fp32 activations and
// accumulation. Decode is memory-bound: the point is streaming 4.5 (or 8.5) bits a weight instead of 16.
//
// The product is split per group g of a row: sum_k (s_g q_k + b_g) x_k = s_g * sum_k q_k x_k + b_g * sum_k x_k.
// The inner sum over codes is the only per-weight work; sum_k x_k (X_g) depends on x alone and is computed
// once per call (prep), so a group costs one vector FMA for its scale and one scalar FMA for its bias.
//
// Codes come out of the packed words without a shift: a 256-bit load holds 8 words, i.e. code j of 8 words
// (lanes w = 0..7: elements P*w + j of the chunk, P = 32/bits codes a word). `word & (mask << bits*j)` is
// code * 2^(bits*j) as an exact integer, and converted to float it is still exact (at most 8 significant
// bits); prep multiplies x's element for that lane by 2^-(bits*j) (a power of two: exact unless x is within
// 2^-24 of the smallest normal float), so the product is the code's. The last code of a word (its top bits,
// which would read as a negative int32) is shifted down instead. Per 8 weights: an AND, a convert and one FMA
// per activation row.
//
// Every (weight row, activation row) pair has one sequence of operations whatever the block shape or the
// thread split: per group, two fresh vector sums (codes j even, j odd: two FMA chains, so a block of few
// pairs still keeps 6-8 chains in flight against the FMA latency) over the group's chunks in order, then
// acc += s_g * (even + odd); the result is hsum8(acc) + sum_g b_g X_g (bs_mm_affine_bias_dot, once per
// pair at the end rather than a scalar step per group). So a row's result never depends on how many rows
// share the call (a verify block reproduces a decode step bit for bit).
// Blocks: 3 weight rows x 1 activation row (decode), 2 x 2, or 1 weight row x groups of 3-4 activation rows.
// (Converting a group's codes once into an L1 buffer shared by all activation rows measured slower at 4-16
// rows here than re-extracting them per group of 3-4 rows: its stores and per-group overhead cost more.)
// Group sizes whose chunk the layout does not divide (4-bit codes in groups of 32) take the scalar kernel.
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>
#include "backend/affine.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_simd_avx2.h"

#ifndef PFD
#define PFD 2   // prefetch distance in blocks, as the dense kernels
#endif

// Elements per 256-bit load of codes: 8 words x (32 / bits).
static int chunk_of(int bits) { return 8 * (32 / bits); }
static int vec_ok(const bs_mat *W) { return W->group % chunk_of(W->bits) == 0; }

// Floats per prepared row: the laid-out x (K), then the group sums X_g, padded to 8.
int64_t bs_mm_affine_xp_floats(const bs_mat *W) { return (W->cols + W->cols / W->group + 7) / 8 * 8; }

void bs_mm_affine_prep(void *xpv, const float *x, int n, const bs_mat *W) {
    const int bits = W->bits, P = 32 / bits, C8 = chunk_of(bits), vec = vec_ok(W);
    const int64_t K = W->cols, group = W->group, G = K / group, xs = bs_mm_affine_xp_floats(W);
    float *xp = xpv;
    for (int r = 0; r < n; r++) {
        const float *s = x + (size_t)r * K;
        float *d = xp + (size_t)r * xs;
        if (!vec) memcpy(d, s, sizeof(float) * K);   // the scalar fallback reads x as is
        else
            for (int64_t c = 0; c < K; c += C8)
                for (int j = 0; j < P; j++) {
                    float sc = j < P - 1 ? 1.0f / (float)(1u << (bits * j)) : 1.0f;
                    for (int w = 0; w < 8; w++) d[c + 8 * j + w] = s[c + P * w + j] * sc;
                }
        for (int64_t g = 0; g < G; g++) {
            float t = 0;
            for (int64_t i = 0; i < group; i++) t += s[g * group + i];
            d[K + g] = t;
        }
    }
}

// The bias part of one (weight row, activation row) result: sum_g b_g X_g over the row's G groups, eight
// groups a step then a scalar tail, one fixed order (the AVX-512 kernel calls this too: same bits).
TGT_AVX2 float bs_mm_affine_bias_dot(const bs_mat *W, int64_t o, const float *X) {
    const int64_t G = W->cols / W->group;
    const size_t off = (size_t)o * G;
    __m256 a = _mm256_setzero_ps();
    int64_t g = 0;
    for (; g + 8 <= G; g += 8) a = _mm256_fmadd_ps(bs_load8_w(W->biases, W->dtype, off + g), _mm256_loadu_ps(X + g), a);
    float s = bs_hsum8(a);
    for (; g < G; g++) s = __builtin_fmaf(bs_load_elem(W->biases, W->dtype, off + g), X[g], s);
    return s;
}

// R weight rows from o x C activation rows (x: prepared rows xs floats apart; y: rows O apart, at column o).
// One loop over the row's chunks of codes; where a group ends, its two sums are scaled into A (a branch
// the predictor learns, keeping every accumulator in a register across groups).
AI_AVX2 void aff_block(const int bits, const int R, const int C, const int PF, const bs_mat *W, int64_t o, const float *x, int64_t xs,
                       float *y, int64_t O, int acc) {
    const int P = 32 / bits, C8 = 8 * P;
    const int64_t K = W->cols, G = K / W->group, wpr = K * bits / 32;
    const int cpg = W->group / C8;   // chunks per group
    const uint32_t *codes = (const uint32_t *)W->data + o * wpr;
    const bs_dtype dt = W->dtype;
    const void *scales = W->scales;
    __m256 A[4][4], D[4][4][2];
    for (int i = 0; i < R; i++)
        for (int c = 0; c < C; c++) A[i][c] = D[i][c][0] = D[i][c][1] = _mm256_setzero_ps();
    int left = cpg;
    int64_t g = 0;
    for (int64_t k = 0; k < K; k += C8) {
        __m256i v[4];
        for (int i = 0; i < R; i++) v[i] = _mm256_loadu_si256((const __m256i *)(codes + i * wpr + k / P));
        if (PF && !((k / P) & 15))   // one 64-byte line per row, PFD blocks ahead
            for (int i = 0; i < R; i++) _mm_prefetch((const char *)(codes + (PFD * R + i) * wpr + k / P), _MM_HINT_T0);
#pragma GCC unroll 8
        for (int j = 0; j < P; j++) {
            const __m256i m = _mm256_set1_epi32((int)(((1u << bits) - 1u) << (bits * j)));
            for (int i = 0; i < R; i++) {
                __m256i q = j < P - 1 ? _mm256_and_si256(v[i], m) : _mm256_srli_epi32(v[i], bits * (P - 1));
                __m256 qf = _mm256_cvtepi32_ps(q);
                for (int c = 0; c < C; c++) D[i][c][j & 1] = _mm256_fmadd_ps(qf, _mm256_loadu_ps(x + c * xs + k + 8 * j), D[i][c][j & 1]);
            }
        }
        if (--left == 0) {   // the group ends: A += s_g * (even + odd), fresh sums for the next group
            for (int i = 0; i < R; i++) {
                const size_t gi = (size_t)(o + i) * G + g;
                const __m256 sv = _mm256_set1_ps(dt == BS_BF16 ? bs_bf16_to_f32(((const uint16_t *)scales)[gi]) : bs_load_elem(scales, dt, gi));
                for (int c = 0; c < C; c++) {
                    A[i][c] = _mm256_fmadd_ps(sv, _mm256_add_ps(D[i][c][0], D[i][c][1]), A[i][c]);
                    D[i][c][0] = D[i][c][1] = _mm256_setzero_ps();
                }
            }
            left = cpg;
            g++;
        }
    }
    for (int i = 0; i < R; i++)
        for (int c = 0; c < C; c++) {
            float v = bs_hsum8(A[i][c]) + bs_mm_affine_bias_dot(W, o + i, x + c * xs + K), *d = y + (size_t)c * O + i;
            *d = acc ? *d + v : v;
        }
}

#define AFF_BITS(R_, C_, PF_) (bits == 4 ? aff_block(4, R_, C_, PF_, W, o, x, xs, y, O, acc) : aff_block(8, R_, C_, PF_, W, o, x, xs, y, O, acc))
AI_AVX2 void aff_rc(int bits, int R, int C, int pf, const bs_mat *W, int64_t o, const float *x, int64_t xs, float *y, int64_t O, int acc) {
    if (R == 3) { if (pf) AFF_BITS(3, 1, 1); else AFF_BITS(3, 1, 0); }
    else if (R == 2) { if (pf) AFF_BITS(2, 2, 1); else AFF_BITS(2, 2, 0); }
    else if (C == 1) AFF_BITS(1, 1, 0);
    else if (C == 2) AFF_BITS(1, 2, 0);
    else if (C == 3) AFF_BITS(1, 3, 0);
    else AFF_BITS(1, 4, 0);
}
#undef AFF_BITS

TGT_AVX2 void bs_mm_affine_run_avx2(const bs_mat *W, int64_t o0, int64_t o1, const void *xpv, int r0, int r1, float *y, int acc) {
    const int64_t xs = bs_mm_affine_xp_floats(W), O = W->rows;
    const float *xt = (const float *)xpv + (size_t)r0 * xs;
    float *yt = y + (size_t)r0 * O;
    if (!vec_ok(W)) { bs_mm_scalar_strided(W, o0, o1, xpv, xs, r0, r1, y, acc); return; }
    const int bits = W->bits, nr = r1 - r0;
    if (nr <= 2) {   // memory-bound: 3 x 1 (decode) or 2 x 2 blocks stream several weight rows at once
        const int R = nr == 1 ? 3 : 2;
        int64_t o = o0;
        for (; o + R <= o1; o += R) aff_rc(bits, R, nr, o + R * (PFD + 1) <= o1, W, o, xt, xs, yt + o, O, acc);
        for (; o < o1; o++) aff_rc(bits, 1, nr, 0, W, o, xt, xs, yt + o, O, acc);
        return;
    }
    for (int64_t o = o0; o < o1; o++)   // compute-bound: each weight row against groups of 3-4 activation rows
        for (int r = 0; r < nr;) {
            int rn = bs_mm_group_rows(nr - r);
            aff_rc(bits, 1, rn, 0, W, o, xt + (size_t)r * xs, xs, yt + (size_t)r * O + o, O, acc);
            r += rn;
        }
}
