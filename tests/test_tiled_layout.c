// The CUDA backend's tiled weight layout (src/backend/cuda/tiled_layout.h), checked on the CPU:
// - the relayout (tt_chunk_source) and the element lookup (tt_index, used by embed) agree and cover
//   every element of the padded matrix exactly once;
// - an emulation of what the GEMM's warps read (ldmatrix from the swizzled tile, float4 of x in the
//   permuted k order, the m16n8k16 fragment layouts) reproduces the exact dot products. The data are
//   small integers, so every product and sum is exact and the comparison is bitwise.
// The GPU runs the same kernels in tests/test_cuda.c (skipped without a GPU); this test keeps the
// index arithmetic checked in CI.
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
