// One CPU matmul of forward shape, timed call by call, with its weights either streamed from memory
// (enough copies to exceed the last-level cache, cycled, as in a forward) or one copy that stays cached:
// how much of the kernel's speed the weight stream costs, apart from the rest of a forward.
//   build/cpu_mm_stream ROWS OUT IN [CALLS] [THREADS]     (make bench-tools; defaults: 200 calls, 2 threads)
// Prints min and median per call for both; GFMA/s = ROWS x OUT x IN / time.
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "util/threadpool.h"
#include "util/timer.h"

static int cmp_double(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

static void report(const char *what, double *t, int calls, double fma) {
    qsort(t, calls, sizeof *t, cmp_double);
    printf("%-30s min %9.1f us (%5.1f GFMA/s)   median %9.1f us (%5.1f GFMA/s)\n", what, t[0] * 1e6, fma / t[0] * 1e-9,
           t[calls / 2] * 1e6, fma / t[calls / 2] * 1e-9);
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: cpu_mm_stream ROWS OUT IN [CALLS] [THREADS]\n"); return 2; }
    const int n = atoi(argv[1]), O = atoi(argv[2]), K = atoi(argv[3]);
    const int calls = argc > 4 ? atoi(argv[4]) : 200, threads = argc > 5 ? atoi(argv[5]) : 2;
    if (n < 1 || O < 1 || K < 1 || calls < 1 || threads < 1) { fprintf(stderr, "cpu_mm_stream: ROWS, OUT, IN, CALLS and THREADS must be positive\n"); return 2; }
    bs_pool_init(threads);
    bs_backend *be = bs_backend_cpu(0);   // the fast backend on its default kernel path (BS_CPU_KERNELS)
    const size_t wbytes = (size_t)O * K * 2;
    const int copies = (int)(256e6 / wbytes) + 1;   // beyond any last-level cache of these machines
    bs_mat *W = calloc(copies, sizeof *W);
    float *x = malloc(sizeof(float) * n * K), *y = malloc(sizeof(float) * n * O);
    double *t = malloc(sizeof(double) * calls);
    if (!be || !W || !x || !y || !t) { fprintf(stderr, "cpu_mm_stream: out of memory\n"); return 1; }
    for (int m = 0; m < copies; m++) {
        uint16_t *w = malloc(wbytes);
        if (!w) { fprintf(stderr, "cpu_mm_stream: out of memory (%d copies of %zu bytes)\n", copies, wbytes); return 1; }
        for (size_t i = 0; i < (size_t)O * K; i++) w[i] = (uint16_t)(0x3c00 + (i * 2654435761u >> 24));   // bf16 ~[0.0078, 0.016)
        W[m] = (bs_mat){ .data = w, .dtype = BS_BF16, .rows = O, .cols = K };
    }
    for (int i = 0; i < n * K; i++) x[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    printf("matmul %d x %d (bf16) x %d rows, %d threads, %s kernels, %d copies of the weights when streamed\n", O, K, n, threads,
           bs_cpu_path_name(bs_cpu_default_path()), copies);
    const double fma = (double)n * O * K;
    for (int pass = 0; pass < 2; pass++) {
        for (int c = 0; c < calls; c++) {
            const bs_mat *w = &W[pass == 0 ? c % copies : 0];
            double t0 = bs_now();
            be->matmul(be, y, x, n, w, 0);
            t[c] = bs_now() - t0;
        }
        report(pass == 0 ? "weights streamed from memory" : "weights cached (one copy)", t, calls, fma);
    }
    return 0;
}
