// How fast the cores read memory in the orders the CPU kernels use, against a plain front-to-back stream
// of the same bytes: an upper bound for each kernel's memory side, apart from its arithmetic.
//   build/cpu_read_orders [THREADS] [REPS]      (make bench-tools; defaults: 2 threads, 10 reps; best rep)
// KV orders: 28 layers' fp32 K and V caches of 512 rows x 8 kv heads x 128 (4 KiB rows, 117 MB), as
// bench --ops' attention reads them; each thread takes either some kv heads (a slice of every row) or
// some key rows (whole rows). Weight orders: 1 GiB of bf16 rows of 1024 (2 KiB), each thread its half,
// read either front to back or 8 rows at a time, 32 bytes of each row in turn (the 8 x 1 matmul block of
// cpu_matmul_avx2.c), with and without that kernel's prefetch (2 blocks ahead, one line per row per 32
// weights). Every order loads each byte once with 32-byte loads and sums the floats (a dependency-free
// add per load), so the figures differ only by the order.
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "util/threadpool.h"
#include "util/timer.h"

enum { L = 28, NK = 512, KVH = 8, HD = 128, ROWF = KVH * HD, WK = 1024 };
enum { KV_HEADS_CHUNKED, KV_HALF_ROWS, KV_WHOLE_ROWS, KV_WHOLE_ROWS_HEADWISE, W_STREAM, W_8ROWS, W_8ROWS_PF, N_ORDERS };
static const char *order_name[N_ORDERS] = {
    "kv: heads per thread, 32-key chunks",     // the 1-row attention's order (a task per group of heads)
    "kv: half of every row per thread",
    "kv: whole rows, keys split",
    "kv: whole rows, 8-row chunks by head",
    "weights: front to back",
    "weights: 8 rows x 32 B in turn",
    "weights: 8 rows x 32 B + prefetch",
};

typedef struct { int order; float **kv; const uint16_t *w; size_t wrows; float sum[64]; } job;

// Thread t's weight rows [r0, r1) of nt, whole 8-row blocks.
static void w_rows(const job *j, int t, int nt, size_t *r0, size_t *r1) {
    *r0 = j->wrows * t / nt / 8 * 8;
    *r1 = j->wrows * (t + 1) / nt / 8 * 8;
}

__attribute__((target("avx2"))) static __m256 run(const float *p, int n, __m256 a) {   // n floats, multiple of 8
    for (int i = 0; i < n; i += 8) a = _mm256_add_ps(a, _mm256_loadu_ps(p + i));
    return a;
}
__attribute__((target("avx2"))) static void task(void *ctx, int t, int nt) {
    job *j = ctx;
    __m256 a = _mm256_setzero_ps(), b = a, c = a, d = a;
    if (j->order < W_STREAM) {
        const int hpt = KVH / nt, k0 = NK * t / nt, k1 = NK * (t + 1) / nt;
        for (int m = 0; m < 2 * L; m++) {
            const float *base = j->kv[m];
            switch (j->order) {
            case KV_HEADS_CHUNKED:
                for (int ch = 0; ch < NK; ch += 32)
                    for (int h = hpt * t; h < hpt * (t + 1); h++)
                        for (int k = ch; k < ch + 32; k++) a = run(base + (size_t)k * ROWF + h * HD, HD, a);
                break;
            case KV_HALF_ROWS:
                for (int k = 0; k < NK; k++) a = run(base + (size_t)k * ROWF + hpt * t * HD, hpt * HD, a);
                break;
            case KV_WHOLE_ROWS:
                for (int k = k0; k < k1; k++) a = run(base + (size_t)k * ROWF, ROWF, a);
                break;
            default:
                for (int ch = k0; ch < k1; ch += 8)
                    for (int h = 0; h < KVH; h++)
                        for (int k = ch; k < ch + 8 && k < k1; k++) a = run(base + (size_t)k * ROWF + h * HD, HD, a);
            }
        }
    } else {
        size_t r0, r1;
        w_rows(j, t, nt, &r0, &r1);
        const uint16_t *w = j->w;
        if (j->order == W_STREAM) {
            const float *p = (const float *)(w + r0 * WK), *e = (const float *)(w + r1 * WK);
            for (; p < e; p += 32) {
                a = _mm256_add_ps(a, _mm256_loadu_ps(p)); b = _mm256_add_ps(b, _mm256_loadu_ps(p + 8));
                c = _mm256_add_ps(c, _mm256_loadu_ps(p + 16)); d = _mm256_add_ps(d, _mm256_loadu_ps(p + 24));
            }
        } else {
            for (size_t r = r0; r < r1; r += 8) {
                const uint16_t *blk = w + r * WK;
                const char *pf = (const char *)(blk + (size_t)2 * 8 * WK);
                const int do_pf = j->order == W_8ROWS_PF && r + 3 * 8 <= r1;
                for (int k = 0; k < WK; k += 16) {
                    if (do_pf && !(k & 31))
                        for (int i = 0; i < 8; i++) _mm_prefetch(pf + ((size_t)i * WK + k) * 2, _MM_HINT_T0);
                    a = _mm256_add_ps(a, _mm256_loadu_ps((const float *)(blk + 0 * WK + k)));
                    b = _mm256_add_ps(b, _mm256_loadu_ps((const float *)(blk + 1 * WK + k)));
                    c = _mm256_add_ps(c, _mm256_loadu_ps((const float *)(blk + 2 * WK + k)));
                    d = _mm256_add_ps(d, _mm256_loadu_ps((const float *)(blk + 3 * WK + k)));
                    a = _mm256_add_ps(a, _mm256_loadu_ps((const float *)(blk + 4 * WK + k)));
                    b = _mm256_add_ps(b, _mm256_loadu_ps((const float *)(blk + 5 * WK + k)));
                    c = _mm256_add_ps(c, _mm256_loadu_ps((const float *)(blk + 6 * WK + k)));
                    d = _mm256_add_ps(d, _mm256_loadu_ps((const float *)(blk + 7 * WK + k)));
                }
            }
        }
    }
    float o[8];
    _mm256_storeu_ps(o, _mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
    j->sum[t & 63] = o[0];
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 10;
    if (threads < 1 || threads > 8 || KVH % threads || reps < 1) { fprintf(stderr, "cpu_read_orders: THREADS must divide 8, REPS >= 1\n"); return 2; }
    if (!bs_cpu_path_supported(BS_CPU_AVX2)) { fprintf(stderr, "cpu_read_orders: needs AVX2\n"); return 2; }
    bs_pool_init(threads);
    bs_backend *be = bs_backend_cpu(0);   // its alloc: 2 MiB pages for large buffers, as the KV cache and weights get
    bs_err err = { 0 };
    const size_t kv_bytes = sizeof(float) * NK * ROWF, w_bytes = (size_t)1 << 30;
    job j = { 0 };
    j.kv = calloc(2 * L, sizeof(float *));
    j.wrows = w_bytes / (2 * WK);
    j.w = be && j.kv ? be->alloc(be, w_bytes, &err) : NULL;
    for (int m = 0; j.w && m < 2 * L; m++) {
        if (!(j.kv[m] = be->alloc(be, kv_bytes, &err))) break;
        for (size_t i = 0; i < kv_bytes / 4; i++) j.kv[m][i] = (float)(i % 7);
    }
    if (!j.w || !j.kv[2 * L - 1]) { fprintf(stderr, "cpu_read_orders: out of memory\n"); return 1; }
    memset((void *)j.w, 1, w_bytes);
    printf("%-40s %9s %8s   (%d threads, best of %d)\n", "order", "ms", "GB/s", threads, reps);
    for (int o = 0; o < N_ORDERS; o++) {
        j.order = o;
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
            double t0 = bs_now();
            bs_parallel_for(threads, task, &j);
            double dt = bs_now() - t0;
            if (dt < best) best = dt;
        }
        double bytes = 2.0 * L * kv_bytes;
        if (o >= W_STREAM) {   // the rows the threads read (whole 8-row blocks)
            bytes = 0;
            for (int t = 0; t < threads; t++) { size_t r0, r1; w_rows(&j, t, threads, &r0, &r1); bytes += (double)(r1 - r0) * 2 * WK; }
        }
        printf("%-40s %9.2f %8.1f\n", order_name[o], best * 1e3, bytes / best / 1e9);
    }
    return 0;
}
