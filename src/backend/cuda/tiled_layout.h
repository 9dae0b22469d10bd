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

// ---- 8-bit tiles (lossy weights for drafters: bs_backend.weight_lossy) ------------------------------
// A [M][K] BF16 matrix (K % 128 == 0) quantized per row: w[r][k] ~= scale[r] * t8_decode(byte). The
// bytes form ceil(M/128) x K/128 tiles of 128 rows x 128 k (16 KiB, the same size as a BF16 tile),
// tile-major, rows past M zero bytes; inside a tile row rr holds 8 chunks of 16 consecutive k, chunk c
// stored at position c ^ (rr & 7). The fp32 scales of all ceil(M/128)*128 rows follow the tiles.
//
// The byte format is e4m3 with exponent bias 15 and no zero or subnormals: (-1)^s 2^(e - 15) (1 + m/8),
// magnitudes 2^-15 .. 1.875. Its BF16 bit pattern is s<<15 | 0x3800 | (byte & 0x7f) << 4, which the
// GEMM forms with three integer instructions per pair (cuda_gemm_tiled.cu). A row scale is max|w| / 1.875,
// so the largest weight of a row is exact and a zero weight becomes 2^-15 * scale (a zero row has
// scale 0 and stays zero).
#define T8_K 128
#define T8_MAX 1.875f

TT_HD uint32_t tt_f32_bits(float f) { union { float f; uint32_t u; } v; v.f = f; return v.u; }
TT_HD float tt_bits_f32(uint32_t u) { union { float f; uint32_t u; } v; v.u = u; return v.f; }

TT_HD float t8_decode(uint8_t b) { return tt_bits_f32((((uint32_t)(b & 0x80) << 8) | 0x3800u | ((uint32_t)(b & 0x7f) << 4)) << 16); }

// Nearest code to q (ties away from zero); |q| past 1.875 saturates, below 2^-15 gives +-2^-15.
TT_HD uint8_t t8_encode(float q) {
    uint32_t u = tt_f32_bits(q), s = (u >> 24) & 0x80, a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) return a == 0x7f800000u ? (uint8_t)(s | 0x7f) : 0;   // inf saturates, NaN -> +2^-15
    int E = (int)(a >> 23) - 127;
    uint32_t m = ((a & 0x7fffffu) + (1u << 19)) >> 20;
    if (m == 8) { m = 0; E++; }
    int e = E + 15;
    if (e < 0) return (uint8_t)s;
    if (e > 15) return (uint8_t)(s | 0x7f);
    return (uint8_t)(s | (uint32_t)e << 3 | m);
}

// Byte offset of element (r, k) in the tiles of a [M][K] 8-bit weight.
TT_HD size_t t8_index(int64_t r, int64_t k, int64_t K) {
    int64_t T = r >> 7, s = k >> 7;
    int rr = (int)(r & 127), kk = (int)(k & 127), c = kk >> 4;
    return ((size_t)(T * (K >> 7) + s) << 14) + (size_t)rr * T8_K + ((size_t)(c ^ (rr & 7)) << 4) + (kk & 15);
}

// The 16 elements of 16-byte chunk q of the tiles: row *r, k = *k0 .. *k0 + 15.
TT_HD void t8_chunk_source(int64_t q, int64_t K, int64_t *r, int64_t *k0) {
    int64_t kst = K / T8_K, tile = q / (kst * 1024), rem = q % (kst * 1024);
    int s = (int)(rem / 1024), w = (int)(rem % 1024), rr = w >> 3, pc = w & 7;
    *r = tile * TT_M + rr;
    *k0 = (int64_t)s * T8_K + (int64_t)((pc ^ (rr & 7)) << 4);
}
