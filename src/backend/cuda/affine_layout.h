// The device layout of MLX affine weights on the CUDA backend, as plain index arithmetic shared by the
// kernels (cuda_affine.cu: upload, GEMM, embed) and by a CPU test (tests/test_affine_layout.c) that
// checks it without a GPU. Why this layout: cuda_affine.cu.
//
// A [M][K] weight (bits 4 or 8, group 32/64/128 dividing K, scales and biases of dtype size ds) becomes
// ceil(M/32) warp tiles of 32 rows x ceil(K/128) units of 128 k, tile-major; rows past M and k past K are
// zero codes with zero scales and biases. One (tile, unit) block is UB bytes, in this order:
// - codes, CB = 512 * bits bytes: parts of 512 bytes, lane l (0..31) of the warp owning the tile reads
//   bytes [16 l, 16 l + 16) of each part with one 16-byte load. Lane l = 4 g + t reads rows g + 8 i
//   (i = 0..3: part i for 4 bits; part 4 v + i for 8 bits, v = which half of the unit's k-steps) and, of
//   each 16-k step st of the unit, the 4 codes k = 16 st + 4 t + e (e = 0..3): exactly the weights its
//   mma.m16n8k16 A fragments need (the k of a step are permuted so that mma k 2t, 2t+1, 2t+8, 2t+9 are
//   physical 4t .. 4t+3, which puts its slice of x in one float4, as in tiled_layout.h).
//   4 bits: word w of a lane's 16 bytes holds steps 2w and 2w+1; nibble p of the word (bits 4p .. 4p+3)
//   is step 2w + ((p & 3) >> 1), code e = 2 (p & 1) + (p >> 2), so that (word >> 4j) & 0x000F000F is
//   the bf16x2 pair of one A register (codes e, e+1 of one step) for j = 0..3.
//   8 bits: word w of part 4 v + i is step 4 v + w, byte e its code e.
// - the unit's (scale, bias) pairs, PB = (128 / group) * 32 * 2 ds bytes: for each group j of the unit
//   (j = 0 .. 128/group - 1), for each g, the pairs of rows g, g+8, g+16, g+24 (one 16-byte load for
//   2-byte dtypes, two for F32). A pair is the scale then the bias, in the checkpoint's dtype (exact).
#pragma once
#include <stdint.h>
#include <stddef.h>
#ifdef __CUDACC__
#define AF_HD __host__ __device__ __forceinline__
#else
#define AF_HD static inline
#endif

#define AF_TM 32    // rows per warp tile
#define AF_KU 128   // k per unit

typedef struct af_shape {
    int64_t M, K;
    int bits, group, ds;   // ds: bytes of one scale (2: BF16/F16, 4: F32)
    int64_t WT, UN;        // warp tiles, units per row
    int64_t CB, PB, UB;    // bytes of a unit's codes, of its pairs, of both
} af_shape;

AF_HD af_shape af_shape_of(int64_t M, int64_t K, int bits, int group, int ds) {
    af_shape s;
    s.M = M; s.K = K; s.bits = bits; s.group = group; s.ds = ds;
    s.WT = (M + AF_TM - 1) / AF_TM; s.UN = (K + AF_KU - 1) / AF_KU;
    s.CB = 512 * (int64_t)bits; s.PB = (int64_t)(AF_KU / group) * 32 * 2 * ds; s.UB = s.CB + s.PB;
    return s;
}
AF_HD size_t af_bytes(const af_shape *s) { return (size_t)(s->WT * s->UN * s->UB); }

// Byte offset of the 32-bit word holding code (r, k), and the code's bit offset in it.
AF_HD size_t af_code_at(const af_shape *s, int64_t r, int64_t k, int *shift) {
    const int64_t wt = r / AF_TM, u = k / AF_KU;
    const int rr = (int)(r % AF_TM), kk = (int)(k % AF_KU);
    const int g = rr & 7, i = rr >> 3, st = kk >> 4, t = (kk >> 2) & 3, e = kk & 3, lane = 4 * g + t;
    int part, word;
    if (s->bits == 4) { part = i; word = st >> 1; *shift = 4 * ((e >> 1) | ((st & 1) << 1) | ((e & 1) << 2)); }
    else { part = 4 * (st >> 2) + i; word = st & 3; *shift = 8 * e; }
    return (size_t)((wt * s->UN + u) * s->UB) + (size_t)(part * 32 + lane) * 16 + (size_t)word * 4;
}

// Byte offset of the (scale, bias) pair of row r, group gi.
AF_HD size_t af_pair_at(const af_shape *s, int64_t r, int64_t gi) {
    const int J = AF_KU / s->group;
    const int64_t wt = r / AF_TM, u = gi / J;
    const int j = (int)(gi % J), rr = (int)(r % AF_TM), g = rr & 7, i = rr >> 3;
    return (size_t)((wt * s->UN + u) * s->UB + s->CB) + (size_t)((j * 8 + g) * 4 + i) * 2 * s->ds;
}

// The inverse, for the relayout at upload: code word wi (0 .. CB/4 - 1) of block ui (= tile * UN + unit)
// holds codes of row *r at k[c] for its slots c = 0 .. 32/bits - 1 (slot c at bits [c * bits, ...)).
AF_HD void af_word_source(const af_shape *s, int64_t ui, int wi, int64_t *r, int64_t *k) {
    const int64_t wt = ui / s->UN, u = ui % s->UN;
    const int part = wi >> 7, lane = (wi >> 2) & 31, word = wi & 3, g = lane >> 2, t = lane & 3;
    if (s->bits == 4) {
        *r = wt * AF_TM + g + 8 * part;
        for (int p = 0; p < 8; p++) k[p] = u * AF_KU + 16 * (2 * word + ((p & 3) >> 1)) + 4 * t + 2 * (p & 1) + (p >> 2);
    } else {
        *r = wt * AF_TM + g + 8 * (part & 3);
        for (int e = 0; e < 4; e++) k[e] = u * AF_KU + 16 * (4 * (part >> 2) + word) + 4 * t + e;
    }
}
// Pair pi (0 .. PB / (2 ds) - 1) of block ui is that of row *r, group *gi.
AF_HD void af_pair_source(const af_shape *s, int64_t ui, int pi, int64_t *r, int64_t *gi) {
    const int64_t wt = ui / s->UN, u = ui % s->UN;
    const int j = pi >> 5, g = (pi >> 2) & 7, i = pi & 3;
    *r = wt * AF_TM + g + 8 * i;
    *gi = u * (AF_KU / s->group) + j;
}

// Word wi (0 .. UB/4 - 1) of block ui of the device layout, from the row-major source rows [r0, ...):
// codes [rows][K * bits / 32] words, scales and biases [rows][K / group] values of ds bytes (the upload's
// staging buffer; af_relayout_kernel writes every word of the weight with this, padding as zeros).
AF_HD uint32_t af_dst_word(const af_shape *S, int64_t ui, int wi, const uint32_t *codes, const unsigned char *sc,
                           const unsigned char *bi, int64_t r0) {
    const int64_t G = S->K / S->group, rw = S->K * S->bits / 32;
    uint32_t v = 0;
    int64_t r;
    if (wi < S->CB / 4) {
        int64_t k[8];
        const int per = 32 / S->bits;
        af_word_source(S, ui, wi, &r, k);
        if (r < S->M)
            for (int c = 0; c < per; c++)
                if (k[c] < S->K) {
                    const uint32_t w = codes[(r - r0) * rw + k[c] / per];
                    v |= ((w >> ((k[c] % per) * S->bits)) & ((1u << S->bits) - 1u)) << (c * S->bits);
                }
    } else {
        const int pw = wi - (int)(S->CB / 4), pi = S->ds == 4 ? pw >> 1 : pw;
        int64_t gi;
        af_pair_source(S, ui, pi, &r, &gi);
        if (r < S->M && gi < G) {
            const size_t e = (size_t)(r - r0) * G + gi;
            if (S->ds == 4) v = ((const uint32_t *)((pw & 1) ? bi : sc))[e];
            else v = (uint32_t)((const uint16_t *)sc)[e] | (uint32_t)((const uint16_t *)bi)[e] << 16;
        }
    }
    return v;
}

// The matmul's work split (cuda_affine.cu, "stream-K over units"): the U = row blocks x units pairs of a
// launch, numbered row block by row block, cut into G contiguous ranges; block b owns [af_range_lo(b),
// af_range_lo(b + 1)). A row block cut between blocks leaves one partial per block in the block's slot
// af_slot (0 for the first row block of its range, 1 for a later one: a block's range cuts at most its
// first and its last row block), and the last block to finish it sums the partials of blocks
// first .. last in order, the first one's from slot af_first_slot.
AF_HD int af_range_lo(int b, int U, int G) { return (int)((long long)b * U / G); }
AF_HD int af_range_of(int u, int U, int G) {
    int b = (int)((long long)u * G / U);
    while (b + 1 < G && af_range_lo(b + 1, U, G) <= u) b++;
    while (b > 0 && af_range_lo(b, U, G) > u) b--;
    return b;
}
AF_HD int af_slot(int run_lo, int range_lo) { return run_lo == range_lo ? 0 : 1; }
AF_HD int af_first_slot(int first_range_lo, int rb_lo) { return first_range_lo < rb_lo ? 1 : 0; }
