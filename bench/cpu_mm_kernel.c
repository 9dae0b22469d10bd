// One CPU matmul kernel call, single-threaded, with every operand resident in L1/L2: the kernel's own
// instruction rate, apart from memory and threads. Compare with the roofline's per-thread "bf16 matmul mix"
// (BS_THREADS=1 blockspec bench --ops prints it). A block's fixed costs (its horizontal sums and stores)
// show as the gap between short and long K:
//   build/cpu_mm_kernel ROWS OUT IN [PATH]      (make bench-tools; PATH a BS_CPU_KERNELS name, default avx512)
// e.g. `cpu_mm_kernel 4 6 1024` is one 6-weight-row x 4-row block of the avx512 path. BF16 weights.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include "backend/cpu/cpu.h"
#include "util/timer.h"

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: cpu_mm_kernel ROWS OUT IN [scalar|avx2|avx512|avx512bf16]\n"); return 2; }
    const int n = atoi(argv[1]), O = atoi(argv[2]), K = atoi(argv[3]);
    const char *path = argc > 4 ? argv[4] : "avx512";
    if (n < 1 || O < 1 || K < 1) { fprintf(stderr, "cpu_mm_kernel: ROWS, OUT and IN must be positive\n"); return 2; }
    int p = 0;
    while (p < BS_CPU_N_PATHS && strcmp(path, bs_cpu_path_name(p))) p++;
    if (p == BS_CPU_N_PATHS) { fprintf(stderr, "cpu_mm_kernel: unknown path '%s' (scalar, avx2, avx512 or avx512bf16)\n", path); return 2; }
    // The path's kernels as the backend installs them (be->impl: its kernel table, indexed by dtype).
    bs_backend *be = bs_backend_cpu(0);
    if (!be || bs_cpu_install_path(be, p)) { fprintf(stderr, "cpu_mm_kernel: this CPU cannot run the %s path\n", path); return 1; }
    const bs_mm_kernel *k = &((const bs_mm_kernel *)be->impl)[BS_BF16];
    uint16_t *w = malloc((size_t)O * K * 2);
    float *x = malloc(sizeof(float) * n * K), *y = malloc(sizeof(float) * n * O);
    void *xp = malloc((size_t)n * K * 4 + 64);
    if (!w || !x || !y || !xp) { fprintf(stderr, "cpu_mm_kernel: out of memory\n"); return 1; }
    for (size_t i = 0; i < (size_t)O * K; i++) w[i] = (uint16_t)(0x3c00 + (i * 2654435761u >> 24));
    for (int i = 0; i < n * K; i++) x[i] = 1e-3f * (float)(i % 17);
    bs_mat W = { .data = w, .dtype = BS_BF16, .rows = O, .cols = K };
    if (k->prep) k->prep(xp, x, n, K); else memcpy(xp, x, sizeof(float) * n * K);
    // ~0.2 s of calls per timing, best of 5
    const double fma = (double)n * O * K;
    int calls = (int)(2e8 / fma) + 1;
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = bs_now();
        for (int i = 0; i < calls; i++) k->run(&W, 0, O, xp, 0, n, y, 0);
        double t = (bs_now() - t0) / calls;
        if (t < best) best = t;
    }
    printf("%s kernel, %d rows x %d x %d (bf16), 1 thread, operands cached: %.3f us per call, %.1f GFMA/s\n", path, n, O, K,
           best * 1e6, fma / best * 1e-9);
    free(w); free(x); free(y); free(xp);
    be->destroy(be);
    return 0;
}
