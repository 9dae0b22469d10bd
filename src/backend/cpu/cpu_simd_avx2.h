// AVX2/FMA/F16C helpers shared by the AVX2 kernels (include only from files whose functions carry TGT_AVX2).
#pragma once
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include "util/dtype.h"

#define TGT_AVX2 __attribute__((target("avx2,fma,f16c")))
#define AI_AVX2 static inline __attribute__((always_inline, target("avx2,fma,f16c")))

AI_AVX2 float bs_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
AI_AVX2 float bs_hmax8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// expf for 8 lanes: Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial (Cephes
// coefficients), 2^n through the exponent field. Max relative error ~2 ulp over [-87, 88]; inputs are
// clamped to [-87.3, 88.7] so results stay finite and normal (expf(-100) gives ~1e-38 instead of
// ~4e-44: an absolute difference far below any fp32 sum it enters).
AI_AVX2 __m256 bs_exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    // n in [-126, 128]: split 2^n = 2^(n/2) * 2^(n - n/2) so n = 128 (x near 88.7) does not overflow the field.
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i h = _mm256_srai_epi32(ni, 1);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, h), _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

// 8 weights of any stored dtype widened to fp32, natural order.
AI_AVX2 __m256 bs_load8_w(const void *base, int dt, size_t i) {
    if (dt == 0) return _mm256_loadu_ps((const float *)base + i);
    const uint16_t *p = (const uint16_t *)base + i;
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (dt == 1) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

// Shared by the BF16/F16/F32 matmul kernels of the avx2 path and the avx512 path's paired block, which
// must produce the same bits (cpu_matmul_avx512.c), so both call these rather than copies:
// the tail of one (weight row, activation row) dot product past kf (K rounded down to 16), plus the store;
AI_AVX2 void bs_mm_store1(int dt, float s, const void *W, size_t wrow, int64_t K, int64_t kf, const float *x, float *d,
                          int acc) {
    for (int64_t k = kf; k < K; k++) s += x[k] * bs_load_elem(W, (bs_dtype)dt, wrow + k);
    *d = acc ? *d + s : s;
}
// and the activation-row groups of a compute-bound tile: 4 at a time, but 5..7 remaining rows as 3+2,
// 3+3, 4+3, so no group of one row (too few accumulator chains: latency-bound) is left.
static inline int bs_mm_group_rows(int rem) {
    if (rem <= 4) return rem;
    if (rem == 5 || rem == 6) return 3;
    return 4;
}
