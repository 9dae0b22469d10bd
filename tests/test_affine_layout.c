// The CUDA backend's layout of MLX affine weights (src/backend/cuda/affine_layout.h), checked on the CPU:
// - the relayout (af_word_source / af_pair_source, used by af_dst_word at upload) and the lookups
//   (af_code_at / af_pair_at, used by embed) agree and place every code and pair exactly once;
// - an emulation of what the matmul kernel's warps do (cuda_affine.cu: each lane's 16-byte chunks, the
//   nibble / byte extraction into bf16 pairs, the m16n8k16 A and B fragments, the x order of the staged
//   window, the per-group scale and bias from the lane that loaded them) reproduces the exact product
//   sum_k (s q_k + b) x_k. The data are small integers (and halves), so every product and sum is exact
//   and the comparison is bitwise.
// The GPU runs the kernels themselves in tests/test_cuda.c (skipped without a GPU); this test keeps the
// index arithmetic checked in CI.
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "util/dtype.h"
#include "backend/cuda/affine_layout.h"

TEST(cuda_affine_layout_bijection) {
    struct { int64_t M, K; int bits, group, ds; } cs[] = {
        { 75, 384, 4, 64, 2 }, { 32, 128, 8, 128, 2 }, { 40, 160, 4, 32, 4 }, { 33, 192, 8, 64, 4 }, { 1, 96, 8, 32, 2 }, { 96, 256, 4, 128, 2 },
    };
    for (int ci = 0; ci < (int)(sizeof cs / sizeof cs[0]); ci++) {
        af_shape S = af_shape_of(cs[ci].M, cs[ci].K, cs[ci].bits, cs[ci].group, cs[ci].ds);
        const size_t total = af_bytes(&S);
        unsigned char *seen = calloc(total * 8, 1);   // per bit
        int bad = 0;
        for (int64_t ui = 0; ui < S.WT * S.UN; ui++) {
            for (int wi = 0; wi < S.CB / 4; wi++) {
                int64_t r, k[8];
                af_word_source(&S, ui, wi, &r, k);
                for (int c = 0; c < 32 / S.bits; c++) {
                    int shift;
                    size_t at = af_code_at(&S, r, k[c], &shift);
                    if (at != (size_t)(ui * S.UB) + (size_t)wi * 4 || shift != c * S.bits) bad++;
                    for (int b = 0; b < S.bits; b++) seen[(at + shift / 8) * 8 + shift % 8 + b]++;
                }
            }
            for (int pi = 0; pi < S.PB / (2 * S.ds); pi++) {
                int64_t r, gi;
                af_pair_source(&S, ui, pi, &r, &gi);
                size_t at = af_pair_at(&S, r, gi);
                if (at != (size_t)(ui * S.UB + S.CB) + (size_t)pi * 2 * S.ds) bad++;
                for (int b = 0; b < 16 * S.ds; b++) seen[at * 8 + b]++;
            }
        }
        for (size_t i = 0; i < total * 8; i++) if (seen[i] != 1) bad++;
        CHECK(bad == 0, "case %d (M %lld K %lld bits %d group %d): %d inconsistent positions", ci, (long long)S.M, (long long)S.K, S.bits, S.group, bad);
        free(seen);
    }
}

static uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float float_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static float bf16_lo(uint32_t w) { return float_of(w << 16); }
static float bf16_hi(uint32_t w) { return float_of(w & 0xFFFF0000u); }

// The kernel's code extraction, on the CPU: af_q4's (128 + q) bf16 bits minus 128, af_q8's fp32 2^23 + q
// minus 2^23 packed as the upper halves (cuda_affine.cu).
static uint32_t emu_q4(uint32_t w, int j) {
    uint32_t v = ((w >> (4 * j)) & 0x000F000Fu) | 0x43004300u;
    uint32_t lo = bits_of(bf16_lo(v) - 128.f) >> 16, hi = bits_of(bf16_hi(v) - 128.f) >> 16;
    return lo | hi << 16;
}
static uint32_t emu_q8(uint32_t w, int b) {
    float f0 = float_of(0x4B000000u | ((w >> (8 * b)) & 0xFF)) - 8388608.f, f1 = float_of(0x4B000000u | ((w >> (8 * (b + 1))) & 0xFF)) - 8388608.f;
    return (bits_of(f0) >> 16) | (bits_of(f1) & 0xFFFF0000u);
}

TEST(cuda_affine_layout_kernel_emulation) {
    struct { int64_t M, K; int bits, group; bs_dtype dt; } cs[] = {
        { 40, 256, 4, 64, BS_BF16 }, { 40, 256, 4, 32, BS_F32 }, { 33, 384, 4, 128, BS_F16 }, { 40, 256, 8, 64, BS_BF16 },
        { 33, 160, 8, 32, BS_F32 }, { 64, 256, 8, 128, BS_BF16 }, { 70, 192, 4, 64, BS_F16 },
    };
    const int N = 8;   // activation rows (one n-tile)
    for (int ci = 0; ci < (int)(sizeof cs / sizeof cs[0]); ci++) {
        const int64_t M = cs[ci].M, K = cs[ci].K, G = K / cs[ci].group;
        const int bits = cs[ci].bits, group = cs[ci].group, ds = (int)bs_dtype_size(cs[ci].dt);
        af_shape S = af_shape_of(M, K, bits, group, ds);
        const int64_t rw = K * bits / 32;
        uint32_t *codes = malloc(sizeof(uint32_t) * M * rw);
        unsigned char *sc = malloc((size_t)M * G * ds), *bi = malloc((size_t)M * G * ds);
        float *s = malloc(sizeof(float) * M * G), *b = malloc(sizeof(float) * M * G), *x = calloc((size_t)N * S.UN * 128, sizeof(float));
        uint64_t rs = 0x9E3779B97F4A7C15ull + ci;
        for (int64_t i = 0; i < M * rw; i++) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; codes[i] = (uint32_t)rs; }
        for (int64_t i = 0; i < M * G; i++) {
            rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
            s[i] = (float)((int)(rs % 7) - 3) * 0.5f; b[i] = (float)((int)((rs >> 8) % 9) - 4);
            for (int h = 0; h < 2; h++) {
                float v = h ? b[i] : s[i];
                unsigned char *dst = (h ? bi : sc) + (size_t)i * ds;
                if (cs[ci].dt == BS_F32) memcpy(dst, &v, 4);
                else if (cs[ci].dt == BS_BF16) { uint16_t u = bs_f32_to_bf16(v); memcpy(dst, &u, 2); }
                else { _Float16 hv = (_Float16)v; memcpy(dst, &hv, 2); }
            }
        }
        for (int c = 0; c < N; c++)
            for (int64_t k = 0; k < K; k++) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; x[c * S.UN * 128 + k] = (float)((int)(rs % 9) - 4); }
        // the upload: every word of the layout from the row-major source
        const size_t total = af_bytes(&S);
        uint32_t *dev = malloc(total);
        for (int64_t ui = 0; ui < S.WT * S.UN; ui++)
            for (int wi = 0; wi < S.UB / 4; wi++) dev[(ui * S.UB) / 4 + wi] = af_dst_word(&S, ui, wi, codes, sc, bi, 0);
        // the kernel's warps: tile wt, unit u; lane (g, t) reads its 16-byte chunks of part h * 4 + i
        double *y = calloc((size_t)S.WT * 32 * N, sizeof(double));
        const int SPU = bits / 4, KPS = 8 / SPU, J = 128 / group, spg = group / 16;
        int bad = 0;
        for (int64_t wt = 0; wt < S.WT; wt++)
            for (int64_t u = 0; u < S.UN; u++) {
                const unsigned char *blk = (const unsigned char *)dev + (size_t)(wt * S.UN + u) * S.UB;
                double D[32][N];
                memset(D, 0, sizeof D);
                for (int h = 0; h < SPU; h++)
                    for (int ks = 0; ks < KPS; ks++) {
                        const int st = h * KPS + ks;
                        for (int m = 0; m < 2; m++) {
                            float A[16][16], B[16][N];
                            for (int lane = 0; lane < 32; lane++) {
                                const int g = lane >> 2, t = lane & 3;
                                uint32_t cw[4][4];
                                for (int i = 0; i < 4; i++) memcpy(cw[i], blk + (h * 4 + i) * 512 + lane * 16, 16);
                                uint32_t a[4];
                                if (bits == 4) {
                                    const uint32_t w0 = cw[2 * m][ks >> 1], w1 = cw[2 * m + 1][ks >> 1];
                                    const int j0 = 2 * (ks & 1);
                                    a[0] = emu_q4(w0, j0); a[1] = emu_q4(w1, j0); a[2] = emu_q4(w0, j0 + 1); a[3] = emu_q4(w1, j0 + 1);
                                } else {
                                    const uint32_t w0 = cw[2 * m][ks], w1 = cw[2 * m + 1][ks];
                                    a[0] = emu_q8(w0, 0); a[1] = emu_q8(w1, 0); a[2] = emu_q8(w0, 2); a[3] = emu_q8(w1, 2);
                                }
                                // m16n8k16 A fragment: a0 (row g, k 2t, 2t+1), a1 (row g+8), a2 (row g, k 2t+8, 2t+9), a3 (row g+8, ...)
                                A[g][2 * t] = bf16_lo(a[0]); A[g][2 * t + 1] = bf16_hi(a[0]);
                                A[g + 8][2 * t] = bf16_lo(a[1]); A[g + 8][2 * t + 1] = bf16_hi(a[1]);
                                A[g][2 * t + 8] = bf16_lo(a[2]); A[g][2 * t + 9] = bf16_hi(a[2]);
                                A[g + 8][2 * t + 8] = bf16_lo(a[3]); A[g + 8][2 * t + 9] = bf16_hi(a[3]);
                                // B fragment (column g) from the staged quad of x at k 16 st + 4t .. + 3
                                const float *xv = x + (size_t)g * S.UN * 128 + u * 128 + 16 * st + 4 * t;
                                B[2 * t][g] = xv[0]; B[2 * t + 1][g] = xv[1]; B[2 * t + 8][g] = xv[2]; B[2 * t + 9][g] = xv[3];
                            }
                            for (int i = 0; i < 16; i++)
                                for (int j = 0; j < N; j++)
                                    for (int kk = 0; kk < 16; kk++) D[16 * m + i][j] += (double)A[i][kk] * B[kk][j];
                        }
                        if ((st + 1) % spg) continue;
                        // the group's epilogue: lane (g, t) takes rows g + 8i's pairs from lane 4g + jg
                        const int jg = st / spg;
                        for (int lane = 0; lane < 32; lane++) {
                            const int g = lane >> 2, t = lane & 3;
                            if (t != jg) continue;   // the lane that loaded group jg (jp = t % J)
                            const unsigned char *pr = blk + S.CB + (jg * 8 + g) * 4 * 2 * ds;
                            for (int i = 0; i < 4; i++) {
                                float sv, bv;
                                if (ds == 4) { memcpy(&sv, pr + i * 8, 4); memcpy(&bv, pr + i * 8 + 4, 4); }
                                else {
                                    uint32_t w; memcpy(&w, pr + i * 4, 4);
                                    if (cs[ci].dt == BS_BF16) { sv = bf16_lo(w); bv = bf16_hi(w); }
                                    else { _Float16 h2[2]; memcpy(h2, &w, 4); sv = (float)h2[0]; bv = (float)h2[1]; }
                                }
                                const int row = g + 8 * i;
                                for (int j = 0; j < N; j++) {
                                    double xs = 0;
                                    for (int kk = 0; kk < group; kk++) xs += x[(size_t)j * S.UN * 128 + u * 128 + jg * group + kk];
                                    y[((size_t)wt * 32 + row) * N + j] += sv * D[row][j] + bv * xs;
                                    D[row][j] = 0;
                                }
                            }
                        }
                        (void)J;
                    }
            }
        for (int64_t r = 0; r < M; r++)
            for (int j = 0; j < N; j++) {
                double want = 0;
                for (int64_t k = 0; k < K; k++) {
                    const uint32_t q = (codes[r * rw + k / (32 / bits)] >> ((k % (32 / bits)) * bits)) & ((1u << bits) - 1u);
                    want += ((double)s[r * G + k / group] * q + b[r * G + k / group]) * x[(size_t)j * S.UN * 128 + k];
                }
                if (y[r * N + j] != want) bad++;
            }
        CHECK(bad == 0, "case %d (M %lld K %lld bits %d group %d %s): %d outputs differ from sum (s q + b) x", ci, (long long)M, (long long)K, bits, group,
              bs_dtype_name(cs[ci].dt), bad);
        free(codes); free(sc); free(bi); free(s); free(b); free(x); free(dev); free(y);
    }
}

// The matmul's stream-K bookkeeping (affine_layout.h: af_range_lo / af_range_of / af_slot /
// af_first_slot), replayed as the kernel's loop runs it: every block walks its range, a row block it
// completes is written directly, a cut one leaves a partial in (block, slot), and the last block sums the
// partials of blocks first .. last from the slots af_first_slot and 0 say. Every unit must be covered once,
// no (block, slot) written twice, and each cut row block's sum must read exactly the partials written for it.
TEST(cuda_affine_stream_k_bookkeeping) {
    const int cases[][2] = { { 24, 32 }, { 16, 32 }, { 96, 32 }, { 16, 96 }, { 594, 32 }, { 391, 2 }, { 2, 32 }, { 1, 1 }, { 17, 3 }, { 3, 7 } };
    const int Gs[] = { 264, 132, 7, 1 };
    for (int ci = 0; ci < (int)(sizeof cases / sizeof cases[0]); ci++)
        for (int gi = 0; gi < 4; gi++) {
            const int RBT = cases[ci][0], UN = cases[ci][1], U = RBT * UN, G = Gs[gi] < U ? Gs[gi] : U;
            int *owner = calloc((size_t)G * 2, sizeof(int)), *covered = calloc((size_t)U, sizeof(int)), *whole = calloc((size_t)RBT, sizeof(int));
            int bad = 0;
            for (int i = 0; i < G * 2; i++) owner[i] = -1;
            for (int b = 0; b < G; b++) {
                const int lo = af_range_lo(b, U, G), hi = af_range_lo(b + 1, U, G);
                if (hi <= lo) bad++;   // every block has a unit
                for (int u = lo; u < hi; u++) covered[u]++;
                for (int a = lo; a < hi;) {   // the runs of row blocks in [lo, hi)
                    const int rb = a / UN, e = (rb + 1) * UN < hi ? (rb + 1) * UN : hi;
                    if (a == rb * UN && e == (rb + 1) * UN) whole[rb]++;
                    else {
                        const int slot = af_slot(a, lo);
                        if (owner[b * 2 + slot] != -1) bad++;
                        owner[b * 2 + slot] = rb;
                    }
                    a = e;
                }
            }
            for (int u = 0; u < U; u++) if (covered[u] != 1) bad++;
            for (int rb = 0; rb < RBT; rb++) {
                const int first = af_range_of(rb * UN, U, G), last = af_range_of((rb + 1) * UN - 1, U, G);
                if (first == last) { if (whole[rb] != 1) bad++; continue; }
                if (whole[rb]) bad++;
                int written = 0;
                for (int i = 0; i < G * 2; i++) written += owner[i] == rb;
                if (written != last - first + 1) bad++;   // the arrival count the kernel waits for
                for (int b2 = first; b2 <= last; b2++) {
                    const int slot = b2 == first ? af_first_slot(af_range_lo(first, U, G), rb * UN) : 0;
                    if (owner[b2 * 2 + slot] != rb) bad++;
                }
            }
            CHECK(bad == 0, "%d row blocks x %d units over %d blocks: %d inconsistencies", RBT, UN, G, bad);
            free(owner); free(covered); free(whole);
        }
}
