// Matmul driver: y[n][O] = x[n][K] . W[O][K]^T, threaded over (row chunks x weight-row ranges).
// The per-dtype kernels (scalar here, AVX2 / AVX-512 in their own files) compute one tile; this file
// lays out x for them once per call and splits the work.
//
// Blocking strategy (shared by all kernels):
// - A kernel walks its weight rows in blocks of 4 and, for each block, all activation rows of its tile
//   in groups of up to 3-4, so each weight element is loaded once per tile and used for every row;
//   accumulators stay in registers and are summed horizontally once per (weight row, activation row).
// - n <= 32 (decode, verify, drafter blocks): one row tile; the weight rows are split over tasks, so each
//   weight byte is streamed from memory exactly once per call.
// - larger n (prefill): rows are tiled so a tile of x stays in L2 while the weight rows stream past it.
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu.h"
#include "util/threadpool.h"

void bs_mm_prep_evenodd(float *xp, const float *x, int n, int K, int chunk) {
    int kf = K / chunk * chunk, h = chunk / 2;
    for (int r = 0; r < n; r++) {
        const float *s = x + (size_t)r * K;
        float *d = xp + (size_t)r * K;
        for (int c = 0; c < kf; c += chunk)
            for (int j = 0; j < h; j++) { d[c + j] = s[c + 2 * j]; d[c + h + j] = s[c + 2 * j + 1]; }
        for (int k = kf; k < K; k++) d[k] = s[k];
    }
}

// ---- scalar kernel (portable C; the compiler may vectorise the inner loops with SSE2) ----
static void run_scalar(const bs_mat *W, int64_t o0, int64_t o1, const void *xpv, int r0, int r1, float *y, int acc) {
    const float *x = xpv;
    int64_t K = W->cols, O = W->rows;
    float wbuf[4][256];
    for (int64_t o = o0; o < o1; o += 4) {
        int ro = o1 - o < 4 ? (int)(o1 - o) : 4;
        float s[4][4];
        for (int r = r0; r < r1; r += 4) {
            int rn = r1 - r < 4 ? r1 - r : 4;
            memset(s, 0, sizeof s);
            for (int64_t k0 = 0; k0 < K; k0 += 256) {
                int kl = K - k0 < 256 ? (int)(K - k0) : 256;
                for (int i = 0; i < ro; i++)   // widen a 256-wide panel of the weight rows once per activation group
                    for (int k = 0; k < kl; k++) wbuf[i][k] = bs_load_elem(W->data, W->dtype, (size_t)(o + i) * K + k0 + k);
                for (int i = 0; i < ro; i++)
                    for (int j = 0; j < rn; j++) {
                        const float *xr = x + (size_t)(r + j) * K + k0;
                        float a = 0;
                        for (int k = 0; k < kl; k++) a += wbuf[i][k] * xr[k];
                        s[i][j] += a;
                    }
            }
            for (int i = 0; i < ro; i++)
                for (int j = 0; j < rn; j++) {
                    float *d = y + (size_t)(r + j) * O + o + i;
                    *d = acc ? *d + s[i][j] : s[i][j];
                }
        }
    }
}

const bs_mm_kernel bs_mm_scalar[3] = {
    [BS_F32] = { NULL, 4, run_scalar }, [BS_BF16] = { NULL, 4, run_scalar }, [BS_F16] = { NULL, 4, run_scalar },
};

// ---- threaded driver ----
typedef struct {
    const bs_mm_kernel *k; const bs_mat *W; const void *xp; float *y; int n, acc;
    int rows_per_chunk, n_chunks; int64_t o_per_task; int o_tasks;
} mm_job;

static void mm_task(void *p, int t, int nt) {
    mm_job *j = p;
    int c = t % j->n_chunks, ot = t / j->n_chunks;
    int r0 = c * j->rows_per_chunk, r1 = r0 + j->rows_per_chunk > j->n ? j->n : r0 + j->rows_per_chunk;
    int64_t o0 = ot * j->o_per_task, o1 = o0 + j->o_per_task > j->W->rows ? j->W->rows : o0 + j->o_per_task;
    if (o0 < o1) j->k->run(j->W, o0, o1, j->xp, r0, r1, j->y, j->acc);
}

static __thread void *xp_buf;
static __thread size_t xp_cap;

void bs_cpu_matmul_with(const bs_mm_kernel *kt, float *y, const float *x, int n, const bs_mat *W, int acc) {
    if (n <= 0 || W->rows <= 0) return;
    const bs_mm_kernel *k = &kt[W->dtype];
    int64_t K = W->cols, O = W->rows;
    const void *xp = x;
    if (k->prep) {
        size_t need = (size_t)n * K * k->xp_elem + 64;
        if (need > xp_cap) {
            free(xp_buf);
            xp_cap = need * 2;
            if (posix_memalign(&xp_buf, 64, xp_cap)) { xp_buf = NULL; xp_cap = 0; abort(); }
        }
        k->prep(xp_buf, x, n, (int)K);
        xp = xp_buf;
    }
    mm_job j = { .k = k, .W = W, .xp = xp, .y = y, .n = n, .acc = acc };
    // Row tiles: all rows at once up to 32; beyond, as many rows as keep ~384 KiB of x in L2 (multiple of 12
    // so the 3- and 4-row kernel groups divide it).
    if (n <= 32) j.rows_per_chunk = n;
    else {
        int64_t rc = (384 << 10) / (K * 4);
        rc = rc / 12 * 12;
        if (rc < 12) rc = 12;
        if (rc > n) rc = n;
        j.rows_per_chunk = (int)rc;
    }
    j.n_chunks = (n + j.rows_per_chunk - 1) / j.rows_per_chunk;
    int nth = bs_pool_size();
    double work = (double)n * O * K;
    int64_t oblocks = (O + 3) / 4;
    int want = work < 65536 ? 1 : nth * 8;               // tiny problems: one task, no dispatch
    int o_tasks = (want + j.n_chunks - 1) / j.n_chunks;
    if (o_tasks > oblocks) o_tasks = (int)oblocks;
    if (o_tasks < 1) o_tasks = 1;
    j.o_per_task = (oblocks + o_tasks - 1) / o_tasks * 4;
    j.o_tasks = (int)((O + j.o_per_task - 1) / j.o_per_task);
    int nt = j.n_chunks * j.o_tasks;
    if (nt == 1) mm_task(&j, 0, 1);
    else bs_parallel_for(nt, mm_task, &j);
}
