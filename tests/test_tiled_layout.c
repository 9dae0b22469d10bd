// The CUDA backend's tiled weight layout (src/backend/cuda/tiled_layout.h), checked on the CPU:
// - the relayout (tt_chunk_source) and the element lookup (tt_index, used by embed) agree and cover
//   every element of the padded matrix exactly once;
// - an emulation of what the GEMM's warps read (ldmatrix from the swizzled tile, float4 of x in the
//   permuted k order, the m16n8k16 fragment layouts) reproduces the exact dot products. The data are
//   small integers, so every product and sum is exact and the comparison is bitwise.
// The GPU runs the same kernels in tests/test_cuda.c (skipped without a GPU); this test keeps the
// index arithmetic checked in CI.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "backend/cuda/tiled_layout.h"

TEST(cuda_tiled_layout_bijection) {
    int64_t shapes[][2] = { { 1, 64 }, { 130, 192 }, { 256, 4096 }, { 384, 64 } };
    for (int si = 0; si < 4; si++) {
        int64_t M = shapes[si][0], K = shapes[si][1], Mp = (M + TT_M - 1) / TT_M * TT_M;
        size_t total = (size_t)Mp * K;
        unsigned char *seen = calloc(total, 1);
        int bad = 0;
        for (int64_t q = 0; q < (int64_t)(total / 8); q++) {
            int64_t r, k[8];
            tt_chunk_source(q, K, &r, k);
            for (int e = 0; e < 8; e++) {
                if (r < 0 || r >= Mp || k[e] < 0 || k[e] >= K) { bad++; continue; }
                size_t at = tt_index(r, k[e], K);
                if (at != (size_t)q * 8 + e) bad++;
                if (at < total) seen[at]++;
            }
        }
        for (size_t i = 0; i < total; i++) if (seen[i] != 1) bad++;
        CHECK(bad == 0, "M=%lld K=%lld: %d inconsistent positions between the relayout and tt_index", (long long)M, (long long)K, bad);
        free(seen);
    }
}

// One 16-k step of one warp's two m-tiles (rows m0..m0+31 of a tile), as cuda_gemm_tiled.cu reads it.
TEST(cuda_tiled_layout_mma_fragments) {
    const int64_t M = 128, K = 128, N = 8;
    int16_t *w = malloc(sizeof(int16_t) * M * K), *tiled = calloc(M * K, sizeof(int16_t));
    float *x = malloc(sizeof(float) * N * K);
    for (int64_t i = 0; i < M * K; i++) w[i] = (int16_t)((i * 7919) % 17 - 8);
    for (int64_t i = 0; i < N * K; i++) x[i] = (float)((i * 104729) % 13 - 6);
    for (int64_t r = 0; r < M; r++)
        for (int64_t k = 0; k < K; k++) tiled[tt_index(r, k, K)] = w[r * K + k];
    int bad = 0;
    for (int s = 0; s < K / TT_K; s++)            // stage
        for (int warp = 0; warp < 4; warp++)
            for (int ks = 0; ks < TT_K / 16; ks++) {
                const int16_t *tile = tiled + (size_t)s * TT_ELEMS;   // the 16 KiB stage as it lands in shared memory
                for (int mt = 0; mt < 2; mt++) {
                    // ldmatrix.x4: lane l gives the address of row (l & 7) of matrix l >> 3
                    int16_t mat[4][8][8];
                    for (int l = 0; l < 32; l++) {
                        int rr = warp * 32 + mt * 16 + (l & 7) + ((l >> 3) & 1) * 8, c = ks * 2 + (l >> 4);
                        memcpy(mat[l >> 3][l & 7], tile + rr * TT_K + ((c ^ (rr & 7)) << 3), 16);
                    }
                    float A[16][16] = { { 0 } }, B[16][8] = { { 0 } };
                    for (int lane = 0; lane < 32; lane++) {
                        int g = lane >> 2, t = lane & 3;
                        // thread (g, t) receives elements (row g, cols 2t, 2t+1) of each matrix = a0..a3
                        for (int e = 0; e < 2; e++) {
                            A[g][2 * t + e] = mat[0][g][2 * t + e];
                            A[g + 8][2 * t + e] = mat[1][g][2 * t + e];
                            A[g][2 * t + 8 + e] = mat[2][g][2 * t + e];
                            A[g + 8][2 * t + 8 + e] = mat[3][g][2 * t + e];
                        }
                        // B fragment from one float4 of x at physical k 4t .. 4t+3 of the 16-k group
                        const float *xv = x + (size_t)g * K + s * TT_K + ks * 16 + 4 * t;
                        B[2 * t][g] = xv[0]; B[2 * t + 1][g] = xv[1]; B[2 * t + 8][g] = xv[2]; B[2 * t + 9][g] = xv[3];
                    }
                    for (int i = 0; i < 16; i++)
                        for (int j = 0; j < 8; j++) {
                            float d = 0, want = 0;
                            for (int kk = 0; kk < 16; kk++) d += A[i][kk] * B[kk][j];
                            int64_t row = warp * 32 + mt * 16 + i;
                            for (int kk = 0; kk < 16; kk++) want += w[row * K + s * TT_K + ks * 16 + kk] * x[(size_t)j * K + s * TT_K + ks * 16 + kk];
                            if (d != want) bad++;
                        }
                }
            }
    CHECK(bad == 0, "%d emulated mma outputs differ from the exact dot products", bad);
    free(w); free(tiled); free(x);
}

// ---- 8-bit tiles ---------------------------------------------------------------------------------

// PTX prmt.b32 (default mode): output byte i = byte (sel_i & 7) of {b, a}; sel_i & 8 replicates its sign bit.
static uint32_t emu_prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint64_t src = (uint64_t)b << 32 | a;
    uint32_t out = 0;
    for (int i = 0; i < 4; i++) {
        int s = (sel >> (4 * i)) & 15;
        uint32_t byte = (uint32_t)(src >> (8 * (s & 7))) & 0xff;
        if (s & 8) byte = byte & 0x80 ? 0xff : 0;
        out |= byte << (8 * i);
    }
    return out;
}
// The GEMM's conversion (cuda_gemm_tiled.cu t8_pair): 2 bytes of r -> bf16x2.
static uint32_t emu_t8_pair(uint32_t r, uint32_t sel) { return ((emu_prmt(r, 0, sel) << 4) & 0x8FF08FF0u) | 0x38003800u; }
static float bf16_lo(uint32_t v) { return tt_bits_f32(v << 16); }
static float bf16_hi(uint32_t v) { return tt_bits_f32(v & 0xffff0000u); }

TEST(cuda_tiled_layout_fp8_codes) {
    // every code: the format's value, its encoding round trip, and the GEMM's bit conversion of it
    for (int b = 0; b < 256; b++) {
        double want = (b & 0x80 ? -1.0 : 1.0) * ldexp(1.0 + (b & 7) / 8.0, ((b >> 3) & 15) - 15);
        CHECK(t8_decode((uint8_t)b) == (float)want, "code 0x%02x decodes to %g, not %g", b, t8_decode((uint8_t)b), want);
        CHECK(t8_encode(t8_decode((uint8_t)b)) == b, "code 0x%02x does not round-trip", b);
        for (int b2 = 0; b2 < 256; b2 += 37) {
            uint32_t r = (uint32_t)b | (uint32_t)b2 << 8 | (uint32_t)(255 - b) << 16 | (uint32_t)b2 << 24;
            uint32_t lo = emu_t8_pair(r, 0x9180u), hi = emu_t8_pair(r, 0xB3A2u);
            CHECK(bf16_lo(lo) == t8_decode((uint8_t)b) && bf16_hi(lo) == t8_decode((uint8_t)b2), "bytes 0,1 = %02x %02x convert wrong", b, b2);
            CHECK(bf16_lo(hi) == t8_decode((uint8_t)(255 - b)) && bf16_hi(hi) == t8_decode((uint8_t)b2), "bytes 2,3 convert wrong");
        }
    }
    CHECK(t8_decode(0x7f) == T8_MAX && t8_decode(0) == 0x1p-15f);
    // nearest code for values across the range (and past it: saturation, below 2^-15: the smallest)
    uint64_t s = 12345;
    for (int i = 0; i < 200000; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        float q = (float)ldexp((double)(s >> 11) / 9007199254740992.0 * 2 - 1, -(int)(s % 20));
        float got = t8_decode(t8_encode(q));
        double best = 1e30;
        for (int b = 0; b < 256; b++) { double d = fabs((double)t8_decode((uint8_t)b) - q); if (d < best) best = d; }
        CHECK(fabs((double)got - q) <= best, "t8_encode(%g) -> %g is not a nearest code (%g away, best %g)", q, got, fabs((double)got - q), best);
        if (*failed_) return;
    }
    CHECK(t8_encode(5.0f) == 0x7f && t8_encode(-5.0f) == 0xff && t8_encode(0.0f) == 0 && t8_encode(-1e-9f) == 0x80);
}

TEST(cuda_tiled_layout_fp8_bijection_and_fragments) {
    int64_t shapes[][2] = { { 2, 128 }, { 130, 256 }, { 256, 512 } };
    for (int si = 0; si < 3; si++) {
        int64_t M = shapes[si][0], K = shapes[si][1], Mp = (M + TT_M - 1) / TT_M * TT_M;
        size_t total = (size_t)Mp * K;
        unsigned char *seen = calloc(total, 1), *tiles = calloc(total, 1);
        int bad = 0;
        for (int64_t q = 0; q < (int64_t)(total / 16); q++) {
            int64_t r, k0;
            t8_chunk_source(q, K, &r, &k0);
            for (int e = 0; e < 16; e++) {
                if (r < 0 || r >= Mp || k0 + e >= K) { bad++; continue; }
                size_t at = t8_index(r, k0 + e, K);
                if (at != (size_t)q * 16 + e) bad++;
                if (at < total) seen[at]++;
            }
        }
        for (size_t i = 0; i < total; i++) bad += seen[i] != 1;
        CHECK(bad == 0, "%lldx%lld: chunk sources and t8_index disagree or miss elements (%d)", (long long)M, (long long)K, bad);
        // fill with codes, then emulate one warp's reads of tile (0, s) for k-step ks and compare its
        // fragment dot products (x = small integers: exact in double) with the direct sums
        uint64_t st = 99;
        for (int64_t r = 0; r < M; r++)
            for (int64_t k = 0; k < K; k++) { st ^= st << 13; st ^= st >> 7; st ^= st << 17; tiles[t8_index(r, k, K)] = (unsigned char)(st >> 24); }
        double x[512];
        for (int k = 0; k < K; k++) x[k] = (double)((k * 7) % 11) - 5;
        for (int warp = 0; warp < 4 && !bad; warp++)
            for (int s = 0; s < K / T8_K; s++)
                for (int ks = 0; ks < T8_K / 16; ks++) {
                    double A[32][16], Bk[16];   // the warp's 32 rows x 16 mma k, and x at those k
                    for (int lane = 0; lane < 32; lane++) {
                        int g = lane >> 2, t = lane & 3;
                        uint32_t r4[4];
                        for (int i = 0; i < 4; i++) {   // ldmatrix: matrix i = rows 8i..8i+7 of the warp's 32
                            int rr = warp * 32 + 8 * i + g;
                            const unsigned char *p = tiles + ((size_t)s << 14) + (size_t)rr * T8_K + ((size_t)(ks ^ (rr & 7)) << 4) + 4 * t;
                            r4[i] = p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
                        }
                        for (int mt = 0; mt < 2; mt++) {
                            uint32_t a0 = emu_t8_pair(r4[2 * mt], 0x9180u), a1 = emu_t8_pair(r4[2 * mt + 1], 0x9180u);
                            uint32_t a2 = emu_t8_pair(r4[2 * mt], 0xB3A2u), a3 = emu_t8_pair(r4[2 * mt + 1], 0xB3A2u);
                            int rg = mt * 16 + g;   // m16n8k16 A fragment: a0 (g, 2t..), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
                            A[rg][2 * t] = bf16_lo(a0); A[rg][2 * t + 1] = bf16_hi(a0);
                            A[rg + 8][2 * t] = bf16_lo(a1); A[rg + 8][2 * t + 1] = bf16_hi(a1);
                            A[rg][2 * t + 8] = bf16_lo(a2); A[rg][2 * t + 9] = bf16_hi(a2);
                            A[rg + 8][2 * t + 8] = bf16_lo(a3); A[rg + 8][2 * t + 9] = bf16_hi(a3);
                        }
                        // B fragment of column g: b0 = x[16ks + 4t .. +1] at mma k 2t, 2t+1; b1 = x[+2, +3] at 2t+8, 2t+9
                        int kb = s * T8_K + ks * 16 + 4 * t;
                        Bk[2 * t] = x[kb]; Bk[2 * t + 1] = x[kb + 1]; Bk[2 * t + 8] = x[kb + 2]; Bk[2 * t + 9] = x[kb + 3];
                    }
                    for (int rw = 0; rw < 32; rw++) {
                        int64_t r = warp * 32 + rw;
                        if (r >= M) continue;
                        double mma = 0, direct = 0;
                        for (int kap = 0; kap < 16; kap++) mma += A[rw][kap] * Bk[kap];
                        for (int e = 0; e < 16; e++) direct += t8_decode(tiles[t8_index(r, s * T8_K + ks * 16 + e, K)]) * x[s * T8_K + ks * 16 + e];
                        if (mma != direct) bad++;
                    }
                }
        CHECK(bad == 0, "%lldx%lld: emulated 8-bit fragments give other dot products (%d)", (long long)M, (long long)K, bad);
        free(seen); free(tiles);
    }
}
