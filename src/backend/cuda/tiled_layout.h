// The tiled layout of BF16 weights on the CUDA backend, as plain index arithmetic shared by the
// kernels (cuda_gemm_tiled.cu, embed) and by a CPU test (tests/test_tiled_layout.c) that checks it
// without a GPU. Why this layout: cuda_gemm_tiled.cu.
//
// A [M][K] matrix (K % 64 == 0) becomes ceil(M/128) x K/64 tiles of 128 rows x 64 k (16 KiB each),
// tile-major, rows past M zero. Inside a tile, row rr holds 8 chunks of 8 bf16; the 64 k are four
// 16-k groups (one mma k-step each) of two chunks; chunk c is stored at position c ^ (rr & 7); and
// inside a group, mma k index kappa holds physical k tt_phys_k(kappa).
#pragma once
#include <stdint.h>
#include <stddef.h>
#ifdef __CUDACC__
#define TT_HD __host__ __device__ __forceinline__
#else
#define TT_HD static inline
#endif

#define TT_M 128
#define TT_K 64
#define TT_ELEMS (TT_M * TT_K)

// mma k index kappa (0..15) -> physical k in its 16-k group: a thread's B fragment (kappa 2t, 2t+1,
// 2t+8, 2t+9) becomes physical 4t .. 4t+3, one float4 of x.
TT_HD int tt_phys_k(int kappa) {
    return kappa < 8 ? 4 * (kappa >> 1) + (kappa & 1) : 4 * ((kappa - 8) >> 1) + 2 + (kappa & 1);
}

// Offset of element (r, k) in a tiled [M][K] weight.
TT_HD size_t tt_index(int64_t r, int64_t k, int64_t K) {
    int64_t T = r >> 7, s = k >> 6;
    int rr = (int)(r & 127), kk = (int)(k & 63);
    int p = kk & 15, t = p >> 2, j = p & 3;
    int kappa = j < 2 ? 2 * t + j : 2 * t + 8 + (j - 2);
    int c = ((kk >> 4) << 1) + (kappa >> 3);
    return ((size_t)(T * (K >> 6) + s) << 13) + (size_t)rr * TT_K + ((c ^ (rr & 7)) << 3) + (kappa & 7);
}

// The 8 elements of 16-byte chunk q of a tiled weight: row *r and physical k[0..7] (the relayout
// kernel fills chunk q from them).
TT_HD void tt_chunk_source(int64_t q, int64_t K, int64_t *r, int64_t k[8]) {
    int64_t kst = K / TT_K, tile = q / (kst * 1024), rem = q % (kst * 1024);
    int s = (int)(rem / 1024), w = (int)(rem % 1024), rr = w >> 3, pc = w & 7;
    int c = pc ^ (rr & 7), ksub = c >> 1, h = c & 1;
    *r = tile * TT_M + rr;
    for (int e = 0; e < 8; e++) k[e] = (int64_t)s * TT_K + ksub * 16 + tt_phys_k(h * 8 + e);
}
