// Fast CPU ops: dispatch by kernel path, plus the portable (scalar-path) threaded ops.
// Path files: cpu_matmul.c (driver + scalar matmul), cpu_matmul_avx2.c, cpu_matmul_avx512.c,
// cpu_ops_avx2.c (elementwise ops, norms, RoPE, argmax), cpu_attention.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu.h"
#include "util/threadpool.h"

// The path's matmul kernels are kept in be->impl (the CPU backend has no other private state); a lossy
// weight (a drafter's, BS_CPU_LAYOUT_BF16DOT) takes the avx512bf16 kernels instead.
static const bs_mm_kernel *kernels_for(bs_backend *be, const bs_mat *W) {
    return W->layout == BS_CPU_LAYOUT_BF16DOT ? bs_mm_avx512bf16 : be->impl;
}
static void mm_oom(bs_backend *be, int n, const bs_mat *W) {
    bs_backend_fail(be, "matmul: out of memory for the scratch of %d rows x %lld columns", n, (long long)W->cols);
}
static void fast_matmul(bs_backend *be, float *y, const float *x, int n, const bs_mat *W, int acc) {
    if (bs_cpu_matmul_with(kernels_for(be, W), y, x, n, W, acc)) mm_oom(be, n, W);
}

static void fast_matmul_multi(bs_backend *be, int m, float *const *y, const float *x, int n, const bs_mat *const *W, int acc) {
    int same = 1;
    for (int i = 1; i < m; i++) same &= W[i]->layout == W[0]->layout;
    if (!same) {   // (never from the models: q/k/v and gate/up are loaded alike)
        for (int i = 0; i < m; i++) if (bs_cpu_matmul_with(kernels_for(be, W[i]), y[i], x, n, W[i], acc)) { mm_oom(be, n, W[i]); return; }
        return;
    }
    if (bs_cpu_matmul_multi_with(kernels_for(be, W[0]), m, y, x, n, W, acc)) mm_oom(be, n, W[0]);
}

// Lossy weights for drafters (backend.h, weight_lossy): a BF16 matrix keeps its bytes and is marked for
// the vdpbf16ps kernels (about 2x the multiply-add rate of the exact kernels for verify-sized blocks). A
// drafter's output only proposes tokens; verification by the exact target decides what is emitted.
static int lossy_ok(bs_backend *be, const bs_mat *m) {
    return m->format == BS_WFMT_DENSE && m->dtype == BS_BF16 && m->layout == 0 && (be->impl == (void *)bs_mm_avx512 || be->impl == (void *)bs_mm_avx512bf16) &&
           bs_cpu_path_supported(BS_CPU_AVX512BF16);
}
static int fast_weight_lossy_view(bs_backend *be, bs_mat *dst, const bs_mat *src) {
    if (!lossy_ok(be, src)) return 1;
    *dst = *src;
    dst->layout = BS_CPU_LAYOUT_BF16DOT;
    return 0;
}
static int fast_weight_lossy(bs_backend *be, bs_mat *dst, const bs_mat *host, bs_err *err) {
    if (!lossy_ok(be, host)) return 1;
    if (be->weight(be, dst, host, err)) return -1;
    dst->layout = BS_CPU_LAYOUT_BF16DOT;
    return 0;
}

// ---- scalar path: the reference math, split over the pool where there is enough work ----
typedef struct { float *y; const float *x; int dim; const bs_mat *w; float eps; } rms_job;
static void rms_task(void *p, int t, int nt) {
    rms_job *j = p;
    bs_cpu_rmsnorm_row(j->y + (size_t)t * j->dim, j->x + (size_t)t * j->dim, j->dim, j->w, j->eps);
}
static void sc_rmsnorm(bs_backend *be, float *y, const float *x, int n, int dim, const bs_mat *w, float eps) {
    rms_job j = { y, x, dim, w, eps };
    if ((size_t)n * dim < 65536) for (int r = 0; r < n; r++) rms_task(&j, r, n);
    else bs_parallel_for(n, rms_task, &j);
}

typedef struct { float *h; const float *g, *u; size_t n; } sw_job;
static void sw_task(void *p, int t, int nt) {
    sw_job *j = p;
    size_t per = (j->n + nt - 1) / nt, lo = t * per, hi = lo + per > j->n ? j->n : lo + per;
    for (size_t i = lo; i < hi; i++) j->h[i] = j->g[i] / (1.0f + expf(-j->g[i])) * j->u[i];
}
static void sc_swiglu(bs_backend *be, float *h, const float *g, const float *u, size_t n) {
    sw_job j = { h, g, u, n };
    if (n < 65536) sw_task(&j, 0, 1); else bs_parallel_for(bs_pool_size() * 2, sw_task, &j);
}

// Gemma-4's GELU-tanh gate, in parallel ranges: each element is the reference's expression (bs_cpu_gelu_tanh),
// so results equal cpu-ref's.
static void gm_task(void *p, int t, int nt) {
    sw_job *j = p;
    size_t per = (j->n + nt - 1) / nt, lo = t * per, hi = lo + per > j->n ? j->n : lo + per;
    for (size_t i = lo; i < hi; i++) j->h[i] = bs_cpu_gelu_tanh(j->g[i]) * j->u[i];
}
static void fast_gelu_mul(bs_backend *be, float *h, const float *g, const float *u, size_t n) {
    sw_job j = { h, g, u, n };
    if (n < 16384) gm_task(&j, 0, 1); else bs_parallel_for(bs_pool_size() * 2, gm_task, &j);
}

// Rows in parallel (each row is a fill and a scatter: memory-bound, one row per task).
typedef struct { float *out; const float *in; const int32_t *cols; int out_w, in_w; float fill; } scatter_job;
static void scatter_task(void *p, int t, int nt) {
    scatter_job *j = p;
    bs_cpu_scatter_row(j->out + (size_t)t * j->out_w, j->out_w, j->in + (size_t)t * j->in_w, j->in_w, j->cols, j->fill);
}
static void fast_scatter_cols(bs_backend *be, float *out, int out_w, const float *in, int in_w, int n, const int32_t *cols, float fill) {
    scatter_job j = { out, in, cols, out_w, in_w, fill };
    if (n > 1) bs_parallel_for(n, scatter_task, &j);
    else if (n == 1) scatter_task(&j, 0, 1);
}

// Rows in parallel, one row per task (each row's arithmetic is the reference's: results are equal).
typedef struct { bs_hadamard t; float *y; const float *x, *pre, *post; int transpose; } hadamard_job;
static void hadamard_task(void *p, int r, int nt) {
    hadamard_job *j = p;
    bs_cpu_hadamard_row(&j->t, j->y + (size_t)r * j->t.n, j->x + (size_t)r * j->t.n, j->pre, j->post, j->transpose);
}
static void fast_hadamard_rows(bs_backend *be, float *y, const float *x, int n, int dim, const float *pre, const float *post, int transpose) {
    hadamard_job j = { .y = y, .x = x, .pre = pre, .post = post, .transpose = transpose };
    if (bs_hadamard_init(&j.t, dim)) { bs_backend_fail(be, "hadamard_rows: length %d is not m * 2^k for m in {1, 12, 20, 28}", dim); return; }
    if (n > 1 && (size_t)n * dim >= 4096) bs_parallel_for(n, hadamard_task, &j);
    else for (int r = 0; r < n; r++) hadamard_task(&j, r, n);
}

void bs_cpu_install_ops_scalar(bs_backend *be) {
    be->rmsnorm = sc_rmsnorm;
    be->swiglu = sc_swiglu;
    be->attention = bs_cpu_attention_fast;   // threaded; uses AVX2 inner loops only when the CPU has them
    be->attention_spans = bs_cpu_attention_spans_fast;
}

int bs_cpu_install_path(bs_backend *be, bs_cpu_path p) {
    if (!bs_cpu_path_supported(p)) return -1;
    bs_cpu_fill_reference(be);
    be->name = "cpu";
    static const bs_mm_kernel *mm[BS_CPU_N_PATHS] = { bs_mm_scalar, bs_mm_avx2, bs_mm_avx512, bs_mm_avx512bf16 };
    be->impl = (void *)mm[p];
    be->matmul = fast_matmul;
    be->matmul_multi = fast_matmul_multi;
    be->weight_lossy = fast_weight_lossy;
    be->weight_lossy_view = fast_weight_lossy_view;
    // Twice the multiply-add rate from 4 rows on: 7 drafts beat 3 from acceptance ~0.7 up (bench --round,
    // docs/history/benchmarks-diary.md, session 14: implied speedup at 0.8 2.36x vs 1.93x; avx2 1.68x vs 1.93x).
    be->default_draft_max = p == BS_CPU_AVX512 || p == BS_CPU_AVX512BF16 ? 7 : 4;
    if (p == BS_CPU_SCALAR) bs_cpu_install_ops_scalar(be);
    else bs_cpu_install_ops_avx2(be);
    be->embed_from = be->embed;
    be->scatter_cols = fast_scatter_cols;
    be->hadamard_rows = fast_hadamard_rows;
    be->gelu_mul = fast_gelu_mul;
    return 0;
}

void bs_cpu_install_fast(bs_backend *be) { bs_cpu_install_path(be, bs_cpu_default_path()); }
