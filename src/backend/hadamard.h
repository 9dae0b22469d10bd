// The orthonormal Hadamard-type transform of MLX's hadamard_transform (docs/rotation.md), in fp32: the
// rotation an R1-folded target is stored in (R1 = diag(s) . M) and the one a drafter crosses to read it.
//
// For n = m * 2^k (m = 1, 12, 20 or 28) and a row vector x of length n viewed as X[a][b] = x[a * 2^k + b]
// (a < m, b < 2^k), the forward transform is
//   1. every contiguous chunk X[a][.] through the natural-order Sylvester FWHT (butterflies (u, v) -> (u + v,
//      u - v) on index pairs (j, j + h) for h = 1, 2, 4, ..., 2^(k-1)), unscaled;
//   2. the chunks mixed by the m x m matrix H_m: Y[a'][b] = sum_a H_m[a'][a] X[a][b] (m = 1: nothing);
//   3. every element times scale = 1/sqrt(n).
// As a matrix on row vectors this is x -> x . M with M = scale (H_m^T (x) H_{2^k}): orthogonal, but for m = 20
// and 28 not symmetric, so x . M^T (the transpose, `transpose` below) is the same algorithm with H_m^T in
// step 2, never a second forward transform. Cost O(n log n + n m) a row; no n x n matrix is ever formed.
#pragma once
#include <stdint.h>

#define BS_HADAMARD_MAX_M 28

typedef struct bs_hadamard {
    int64_t n;            // the length transformed
    int m;                // 1, 12, 20 or 28
    int64_t p;            // n / m: a power of two (the FWHT length)
    float scale;          // 1 / sqrt(n) in fp32
    int8_t h[BS_HADAMARD_MAX_M * BS_HADAMARD_MAX_M];   // H_m row-major, entries +1 / -1 (m = 1: [1])
} bs_hadamard;

// The transform of length n; 0, or -1 when n is not m * 2^k for m in {1, 12, 20, 28} (n < 1 included).
// m is the odd part of n times a power of two: 1, 3, 5, 7 give m = 1, 12, 20, 28 (MLX tries 12, 20, 28 in
// that order and takes the first that divides n, which picks the same m).
int bs_hadamard_init(bs_hadamard *t, int64_t n);

// The m x m base matrix MLX hard-codes, built here from its construction (entries +1 / -1, row-major into
// out[m * m]); -1 for any other m. 12: Paley II over GF(5); 20 and 28: Williamson arrays of symmetric
// circulants of order 5 and 7 (hadamard.c gives the parameters; docs/rotation.md how they were checked).
int bs_hadamard_base(int m, int8_t *out);

// One row in place: x <- x . M (transpose 0) or x . M^T (transpose 1).
void bs_hadamard_row(const bs_hadamard *t, float *x, int transpose);

// The R1 sign vector of a seed, as the seed's engine and mlx-bun derive it (lane 0; docs/dflash2.md 3.5):
// a SplitMix32 stream, s_i = +1 where the mixed word's low bit is 0, else -1. out[n].
void bs_r1_signs_from_seed(uint32_t seed, int64_t n, float *out);
