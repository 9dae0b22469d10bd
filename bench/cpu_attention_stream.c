// The CPU attention op of one Qwen3-0.6B-shaped layer (16 query heads, 8 kv heads, head dim 128) over a
// 512-token cache, timed per call with the K/V either cached (one layer's, reused) or streamed from memory
// (64 layers' caches in turn, as in a forward), on the fast backend's default path and all threads:
//   build/cpu_attention_stream ROWS [ROUNDS]     (make bench-tools; default 50 rounds of 64 calls)
// Prints the time per layer (best round's mean over 64 calls, for both figures: the best single call
// would hide the call-to-call spread, which on a shared 2-vCPU host is 15-35% of the mean) and the K/V
// bytes per second it implies. The cache is on huge pages, as the engine's is.
#include <stdio.h>
#include <stdlib.h>
#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "util/threadpool.h"
#include "util/timer.h"

// Best over rounds of the mean time per call in a round of `layers` calls: over the layers' caches in
// turn, or (cached) `layers` calls on the first one, so both figures average the same number of calls.
static double run(bs_backend *be, float *o, const float *q, float *const *k, float *const *v, int layers, int rounds, int n,
                  int keys, int cached) {
    double best = 1e30;
    for (int r = 0; r < rounds; r++) {
        double t0 = bs_now();
        for (int l = 0; l < layers; l++) {
            const int c = cached ? 0 : l;
            const bs_kv_view kv = bs_kv_contig(k[c], v[c]);
            be->attention(be, o, q, &kv, n, 16, 8, 128, keys + n, keys, 1, 0);
        }
        double t = (bs_now() - t0) / layers;
        if (t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: cpu_attention_stream ROWS [ROUNDS]\n"); return 2; }
    const int n = atoi(argv[1]), rounds = argc > 2 ? atoi(argv[2]) : 50, keys = 512, L = 64;
    if (n < 1 || n > 512 || rounds < 1) { fprintf(stderr, "cpu_attention_stream: ROWS in 1..512, ROUNDS positive\n"); return 2; }
    bs_pool_init(0);
    bs_backend *be = bs_backend_cpu(0);
    const size_t kv = (size_t)(keys + n) * 8 * 128;
    float **k = calloc(L, sizeof *k), **v = calloc(L, sizeof *v);
    float *q = malloc(sizeof(float) * n * 16 * 128), *o = malloc(sizeof(float) * n * 16 * 128);
    if (!be || !k || !v || !q || !o) { fprintf(stderr, "cpu_attention_stream: out of memory\n"); return 1; }
    for (int l = 0; l < L; l++) {
        size_t len;
        k[l] = bs_cpu_huge_map(kv * 4, 1, &len);
        v[l] = bs_cpu_huge_map(kv * 4, 1, &len);
        if (!k[l] || !v[l]) { fprintf(stderr, "cpu_attention_stream: out of memory (%d caches of %zu bytes)\n", L, kv * 8); return 1; }
        for (size_t i = 0; i < kv; i++) { k[l][i] = 0.01f * (float)((i * 7) % 13); v[l][i] = 0.01f * (float)((i * 5) % 11); }
    }
    for (int i = 0; i < n * 16 * 128; i++) q[i] = 0.01f * (float)(i % 7);
    const double bytes = (double)kv * 8;
    double tc = run(be, o, q, k, v, L, rounds, n, keys, 1), ts = run(be, o, q, k, v, L, rounds, n, keys, 0);
    printf("attention, %d rows over %d keys, %d threads: cached %.1f us per layer (%.1f GB/s of K/V), from memory %.1f us (%.1f GB/s)\n",
           n, keys, bs_pool_size(), tc * 1e6, bytes / tc * 1e-9, ts * 1e6, bytes / ts * 1e-9);
    return 0;
}
