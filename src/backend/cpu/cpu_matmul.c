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
#include "backend/affine.h"
#include "backend/cpu/cpu.h"
#include "util/threadpool.h"
#include "util/thread_scratch.h"

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
// Widens (or dequantises: affine.h's formula) a panel [k0, k0 + kl) of weight row o.
static void widen_panel(const bs_mat *W, int64_t o, int64_t k0, int kl, float *out) {
    if (W->format != BS_WFMT_AFFINE) {
        for (int k = 0; k < kl; k++) out[k] = bs_load_elem(W->data, W->dtype, (size_t)o * W->cols + k0 + k);
        return;
    }
    const uint32_t *row = (const uint32_t *)W->data + o * bs_affine_words(W->cols, W->bits);
    size_t gb = (size_t)o * (W->cols / W->group);
    for (int k = 0; k < kl;) {   // a group (or the part of one inside the panel) at a time
        int64_t e = k0 + k, g = e / W->group, end = (g + 1) * W->group - k0;
        if (end > kl) end = kl;
        float s = bs_load_elem(W->scales, W->dtype, gb + g), b = bs_load_elem(W->biases, W->dtype, gb + g);
        for (; k < end; k++) out[k] = bs_affine_value(s, bs_affine_code(row, W->bits, k0 + k), b);
    }
}

void bs_mm_scalar_strided(const bs_mat *W, int64_t o0, int64_t o1, const float *x, int64_t xs, int r0, int r1, float *y, int acc) {
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
                for (int i = 0; i < ro; i++) widen_panel(W, o + i, k0, kl, wbuf[i]);   // once per activation group
                for (int i = 0; i < ro; i++)
                    for (int j = 0; j < rn; j++) {
                        const float *xr = x + (size_t)(r + j) * xs + k0;
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

static void run_scalar(const bs_mat *W, int64_t o0, int64_t o1, const void *xpv, int r0, int r1, float *y, int acc) {
    bs_mm_scalar_strided(W, o0, o1, xpv, W->cols, r0, r1, y, acc);
}

const bs_mm_kernel bs_mm_scalar[BS_MM_KINDS] = {
    [BS_F32] = { NULL, 4, run_scalar }, [BS_BF16] = { NULL, 4, run_scalar }, [BS_F16] = { NULL, 4, run_scalar },
    [BS_MM_AFF4] = { NULL, 4, run_scalar }, [BS_MM_AFF8] = { NULL, 4, run_scalar },
};

// ---- threaded driver ----
// One call computes m matmuls that share x (q/k/v, gate/up: one dispatch instead of several, x laid out
// once). The work is cut into tasks, each (matrix, weight-row range, activation-row chunk); weight-row
// ranges are multiples of 12 rows (the AVX2 kernels' 3- and 4-row blocks divide them) and every matrix
// gets a number of ranges proportional to its rows, ~8 tasks per thread in all, claimed dynamically
// (threads that lose time slices to other processes simply claim fewer). K is never split, so each output
// is computed by one kernel call with one accumulation order whatever the split.
typedef struct { int mat, r0, r1; int64_t o0, o1; } mm_task_t;
typedef struct {
    const bs_mm_kernel *k; const bs_mat *const *W; const void *xp; float *const *y; int acc;
    const mm_task_t *tasks;
} mm_job;

static void mm_task(void *p, int t, int nt) {
    mm_job *j = p;
    const mm_task_t *q = &j->tasks[t];
    j->k->run(j->W[q->mat], q->o0, q->o1, j->xp, q->r0, q->r1, j->y[q->mat], j->acc);
}

static __thread void *xp_buf, *task_mem;
static __thread size_t xp_cap, task_cap;   // bytes

#define O_UNIT 12
#define MM_MAX_MULTI 16

int bs_cpu_matmul_multi_with(const bs_mm_kernel *kt, int m, float *const *y, const float *x, int n,
                             const bs_mat *const *W, int acc) {
    if (n <= 0 || m <= 0) return 0;
    // Shared x layout needs one weight kind (one kernel), one K and (affine) one group size; otherwise run
    // the matrices one by one.
    int same = m <= MM_MAX_MULTI;
    for (int i = 1; i < m && same; i++)
        same = bs_mm_kind(W[i]) == bs_mm_kind(W[0]) && W[i]->dtype == W[0]->dtype && W[i]->cols == W[0]->cols && W[i]->group == W[0]->group;
    if (!same) {
        for (int i = 0; i < m; i++) if (bs_cpu_matmul_multi_with(kt, 1, &y[i], x, n, &W[i], acc)) return -1;
        return 0;
    }
    const bs_mm_kernel *k = &kt[bs_mm_kind(W[0])];
    int64_t K = W[0]->cols, Osum = 0;
    for (int i = 0; i < m; i++) Osum += W[i]->rows;
    if (Osum <= 0) return 0;
    const void *xp = x;
    if (k->prep || k->prep_w) {
        size_t need = (k->prep_w ? (size_t)n * k->xp_floats(W[0]) * 4 : (size_t)n * K * k->xp_elem) + 64;
        if (!bs_cpu_scratch(&xp_buf, &xp_cap, need, need * 2)) return -1;
        if (k->prep_w) k->prep_w(xp_buf, x, n, W[0]);
        else k->prep(xp_buf, x, n, (int)K);
        xp = xp_buf;
    }
    // Row tiles: all rows at once up to 32; beyond, as many rows as keep ~384 KiB of x in L2 (multiple of 12
    // so the kernels' activation-row groups divide it).
    int rows_per_chunk = n;
    if (n > 32) {
        int64_t rc = (384 << 10) / (K * 4);
        rc = rc / 12 * 12;
        if (rc < 12) rc = 12;
        if (rc > n) rc = n;
        rows_per_chunk = (int)rc;
    }
    int n_chunks = (n + rows_per_chunk - 1) / rows_per_chunk;
    int nth = bs_pool_size();
    double work = (double)n * Osum * K;
    int want = work < 65536 ? 1 : nth * 8;               // tiny problems: one task, no dispatch
    int o_want = (want + n_chunks - 1) / n_chunks;
    // per matrix: o-ranges proportional to its rows
    int64_t per[MM_MAX_MULTI];
    size_t n_tasks = 0;
    for (int i = 0; i < m; i++) {
        int64_t units = (W[i]->rows + O_UNIT - 1) / O_UNIT;
        int64_t ot = (int64_t)((double)o_want * W[i]->rows / Osum + 0.5);
        if (ot < 1) ot = 1;
        if (ot > units) ot = units;
        per[i] = units ? (units + ot - 1) / ot * O_UNIT : O_UNIT;
        n_tasks += (size_t)((W[i]->rows + per[i] - 1) / per[i]) * n_chunks;
    }
    mm_task_t *task_buf = bs_cpu_scratch(&task_mem, &task_cap, sizeof(mm_task_t) * n_tasks, sizeof(mm_task_t) * n_tasks * 2);
    if (!task_buf) return -1;
    size_t t = 0;
    for (int i = 0; i < m; i++)
        for (int64_t o0 = 0; o0 < W[i]->rows; o0 += per[i])
            for (int c = 0; c < n_chunks; c++) {
                mm_task_t *q = &task_buf[t++];
                q->mat = i; q->o0 = o0; q->o1 = o0 + per[i] < W[i]->rows ? o0 + per[i] : W[i]->rows;
                q->r0 = c * rows_per_chunk; q->r1 = q->r0 + rows_per_chunk < n ? q->r0 + rows_per_chunk : n;
            }
    mm_job j = { .k = k, .W = W, .xp = xp, .y = y, .acc = acc, .tasks = task_buf };
    if (t == 1) mm_task(&j, 0, 1);
    else bs_parallel_for((int)t, mm_task, &j);
    return 0;
}

int bs_cpu_matmul_with(const bs_mm_kernel *kt, float *y, const float *x, int n, const bs_mat *W, int acc) {
    return bs_cpu_matmul_multi_with(kt, 1, &y, x, n, &W, acc);
}
