// One matmul of the Qwen3-0.6B MLP shape (3072 x 1024) per call, BF16 vs MLX affine 4-bit vs 8-bit weights
// (group 64, BF16 scales), 1-16 activation rows, on the avx2 and avx512 paths; 24 copies of each weight are
// cycled so the weights stream from memory as in a forward. Prints microseconds per call (mean over ~0.4 s).
// Run with BS_THREADS=1 for one core's kernel rate (docs/benchmarks.md, section 13). `make bench-tools`.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "backend/affine.h"
#include "backend/cpu/cpu.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
    int O = 3072, K = 1024, NC = 24;   // NC copies: ~streamed
    uint16_t *wb = malloc((size_t)NC * O * K * 2);
    for (size_t i = 0; i < (size_t)NC * O * K; i++) wb[i] = bs_f32_to_bf16((float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f);
    uint32_t *codes[2]; uint16_t *sc = malloc((size_t)NC * O * K / 64 * 2), *bi = malloc((size_t)NC * O * K / 64 * 2);
    for (int b = 0; b < 2; b++) { codes[b] = malloc((size_t)NC * O * K * (b ? 8 : 4) / 8); for (size_t i = 0; i < (size_t)NC * O * K * (b ? 8 : 4) / 32; i++) codes[b][i] = (uint32_t)(i * 2654435761u); }
    for (size_t i = 0; i < (size_t)NC * O * K / 64; i++) { sc[i] = bs_f32_to_bf16(0.01f); bi[i] = bs_f32_to_bf16(-0.1f); }
    float *x = malloc(sizeof(float) * 32 * K), *y = malloc(sizeof(float) * 32 * O);
    for (int i = 0; i < 32 * K; i++) x[i] = (float)(i % 17) / 17.0f;
    const char *paths[] = { "avx2", "avx512" };
    int rows[] = { 1, 2, 4, 8, 16 };
    for (int p = 1; p <= 2; p++) {
        bs_backend *be = bs_backend_cpu(1); bs_cpu_install_path(be, p);
        for (int kind = 0; kind < 3; kind++) {
            printf("%-7s %-5s", paths[p - 1], kind == 0 ? "bf16" : kind == 1 ? "q4" : "q8");
            for (int ri = 0; ri < 5; ri++) {
                int n = rows[ri], reps = 0; double t0 = now(), t;
                do {
                    int c = reps % NC;
                    bs_mat W = kind == 0 ? (bs_mat){ .data = wb + (size_t)c * O * K, .dtype = BS_BF16, .rows = O, .cols = K }
                             : (bs_mat){ .data = (char *)codes[kind - 1] + (size_t)c * O * K * (kind == 1 ? 4 : 8) / 8, .dtype = BS_BF16, .rows = O, .cols = K,
                                         .format = BS_WFMT_AFFINE, .bits = kind == 1 ? 4 : 8, .group = 64, .scales = sc + (size_t)c * O * K / 64, .biases = bi + (size_t)c * O * K / 64 };
                    be->matmul(be, y, x, n, &W, 0);
                    reps++; t = now() - t0;
                } while (t < 0.4);
                printf("  n=%-2d %7.1f us", n, t / reps * 1e6);
            }
            printf("\n");
        }
        be->destroy(be);
    }
}
