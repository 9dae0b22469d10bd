#include "backend/cuda/cuda_internal.cuh"

// ---------------------------------------------------------------------------------------------
// BS_CUDA_PROFILE=1: every op is bracketed by CUDA events and its device time summed per (op, rows);
// the table is printed to stderr when the backend is destroyed. Recording (graphs) is off then, so
// the figures are per-op device times of plain launches.

#define PROF_PAIRS 4096
#define PROF_KEYS 64
struct prof_state {
    bs_backend inner;                       // the real ops
    cudaEvent_t ev[PROF_PAIRS][2]; int key[PROF_PAIRS]; int n;
    char names[PROF_KEYS][48]; double ms[PROF_KEYS]; long calls[PROF_KEYS]; int n_keys;
};
static prof_state *g_prof;
bool prof_active(void) { return g_prof != NULL; }

static void prof_flush(void) {
    prof_state *p = g_prof;
    if (!p || !p->n) return;
    cudaEventSynchronize(p->ev[p->n - 1][1]);
    for (int i = 0; i < p->n; i++) {
        float ms = 0; cudaEventElapsedTime(&ms, p->ev[i][0], p->ev[i][1]);
        p->ms[p->key[i]] += ms; p->calls[p->key[i]]++;
    }
    p->n = 0;
}
static int prof_begin(bs_backend *be, const char *op, long rows) {
    prof_state *p = g_prof;
    char name[48];
    snprintf(name, sizeof name, "%s n=%ld", op, rows);
    int k = 0;
    while (k < p->n_keys && strcmp(p->names[k], name)) k++;
    if (k == p->n_keys) { if (k == PROF_KEYS) k = PROF_KEYS - 1; else { snprintf(p->names[k], 48, "%s", name); p->n_keys++; } }
    if (p->n == PROF_PAIRS) prof_flush();
    int i = p->n++;
    p->key[i] = k;
    cudaEventRecord(p->ev[i][0], CI(be)->st);
    return i;
}
static void prof_end(bs_backend *be, int i) { cudaEventRecord(g_prof->ev[i][1], CI(be)->st); }
#define PROF(op, rows, call) do { int i_ = prof_begin(be, op, rows); call; prof_end(be, i_); } while (0)
static void pf_matmul(bs_backend *be, float *y, const float *x, int n, const bs_mat *W, int acc) {
    char nm[40]; snprintf(nm, sizeof nm, "matmul %lldx%lld%s", (long long)W->rows, (long long)W->cols, W->layout == BS_CUDA_FP8 ? " 8-bit" : "");
    PROF(nm, n, g_prof->inner.matmul(be, y, x, n, W, acc));
}
static void pf_matmul_multi(bs_backend *be, int count, float *const *y, const float *x, int n, const bs_mat *const *W, int accumulate) {
    char nm[40]; snprintf(nm, sizeof nm, "matmul_multi x%d %lld%s", count, (long long)W[0]->rows, W[0]->layout == BS_CUDA_FP8 ? " 8-bit" : "");
    PROF(nm, n, g_prof->inner.matmul_multi(be, count, y, x, n, W, accumulate));
}
static void pf_rmsnorm(bs_backend *be, float *y, const float *x, int n, int dim, const bs_mat *w, float eps) { PROF("rmsnorm", n, g_prof->inner.rmsnorm(be, y, x, n, dim, w, eps)); }
static void pf_hnr_multi(bs_backend *be, int count, float *const *x, int n, int nh, int hd, const bs_mat *const *w, float eps, int pos0, const float *inv_freq) {
    PROF("head_norm_rope_multi", n, g_prof->inner.head_norm_rope_multi(be, count, x, n, nh, hd, w, eps, pos0, inv_freq));
}
static void pf_hnr(bs_backend *be, float *x, int n, int nh, int hd, const bs_mat *w, float eps, int pos0, const float *inv_freq) {
    PROF("head_norm_rope", n, g_prof->inner.head_norm_rope(be, x, n, nh, hd, w, eps, pos0, inv_freq));
}
static void pf_attention(bs_backend *be, float *out, const float *q, const bs_kv_view *kv, int n_q, int nh, int nkv, int hd,
                         int n_keys, int q_pos0, int causal, int window) {
    PROF(causal ? "attention causal" : "attention bidir", n_q, g_prof->inner.attention(be, out, q, kv, n_q, nh, nkv, hd, n_keys, q_pos0, causal, window));
}
static void pf_attention_spans(bs_backend *be, float *out, const float *q, const bs_row_span *sp, int n_spans, int nh, int nkv, int hd) {
    PROF("attention spans", n_spans, g_prof->inner.attention_spans(be, out, q, sp, n_spans, nh, nkv, hd));
}
static void pf_qkrs(bs_backend *be, float *q, float *k, const float *v, int n, int nh, int nkv, int hd, const bs_mat *qw,
                    const bs_mat *kw, float eps, int pos0, const float *inv_freq, const bs_kv_view *kv) {
    PROF("qk_norm_rope_store", n, g_prof->inner.qk_norm_rope_store(be, q, k, v, n, nh, nkv, hd, qw, kw, eps, pos0, inv_freq, kv));
}
static void pf_qkrs_spans(bs_backend *be, float *q, float *k, const float *v, const bs_row_span *sp, int n_spans, int nh, int nkv, int hd,
                          const bs_mat *qw, const bs_mat *kw, float eps, const float *inv_freq) {
    PROF("qk_norm_rope_store spans", n_spans, g_prof->inner.qk_norm_rope_store_spans(be, q, k, v, sp, n_spans, nh, nkv, hd, qw, kw, eps, inv_freq));
}
static int pf_qkv(bs_backend *be, const float *x, int n, const bs_mat *const *W, float *q, float *k, float *v, int nh, int nkv, int hd,
                  const bs_mat *qw, const bs_mat *kw, float eps, int pos0, const float *inv_freq, const bs_kv_view *kv) {
    int r;
    PROF("matmul q/k/v + qk_norm_rope_store", n, r = g_prof->inner.qkv_norm_rope_store(be, x, n, W, q, k, v, nh, nkv, hd, qw, kw, eps, pos0, inv_freq, kv));
    return r;
}
static int pf_swiglu_matmul(bs_backend *be, float *y, const float *g, const float *u, int n, const bs_mat *W, int acc) {
    int r;
    char nm[40]; snprintf(nm, sizeof nm, "swiglu+matmul %lldx%lld", (long long)W->rows, (long long)W->cols);
    PROF(nm, n, r = g_prof->inner.swiglu_matmul(be, y, g, u, n, W, acc));
    return r;
}
static void pf_swiglu(bs_backend *be, float *h, const float *g, const float *u, size_t n) { PROF("swiglu", (long)n, g_prof->inner.swiglu(be, h, g, u, n)); }
static void pf_add(bs_backend *be, float *y, const float *x, size_t n) { PROF("add", (long)n, g_prof->inner.add(be, y, x, n)); }
static void pf_embed(bs_backend *be, float *out, const bs_mat *t, const int32_t *ids, int n) { PROF("embed", n, g_prof->inner.embed(be, out, t, ids, n)); }
static void pf_copy_rows(bs_backend *be, float *dst, size_t ds, const float *src, size_t ss, int n, int width) {
    PROF("copy_rows", n, g_prof->inner.copy_rows(be, dst, ds, src, ss, n, width));
}
static void pf_store_kv(bs_backend *be, const bs_kv_view *kv, int pos0, const float *k, const float *v, int n, int width) {
    PROF("store_kv", n, g_prof->inner.store_kv(be, kv, pos0, k, v, n, width));
}
static void pf_argmax(bs_backend *be, int32_t *out, const float *l, int n, int vocab) { PROF("argmax (+sync)", n, g_prof->inner.argmax(be, out, l, n, vocab)); }
static void pf_argmax_to(bs_backend *be, int32_t *out, const float *l, int n, int vocab, const int32_t *map) { PROF("argmax", n, g_prof->inner.argmax_to(be, out, l, n, vocab, map)); }
static void pf_scatter_cols(bs_backend *be, float *o, int ow, const float *in, int iw, int n, const int32_t *cols, float fill) { PROF("scatter_cols", n, g_prof->inner.scatter_cols(be, o, ow, in, iw, n, cols, fill)); }
static void pf_hadamard_rows(bs_backend *be, float *y, const float *x, int n, int dim, const float *pre, const float *post, int tr) {
    PROF("hadamard_rows", n, g_prof->inner.hadamard_rows(be, y, x, n, dim, pre, post, tr));
}
static void pf_embed_from(bs_backend *be, float *out, const bs_mat *t, const int32_t *ids, int n) { PROF("embed", n, g_prof->inner.embed_from(be, out, t, ids, n)); }

void prof_install(bs_backend *be) {
    prof_state *p = (prof_state *)calloc(1, sizeof *p);
    for (int i = 0; i < PROF_PAIRS; i++) { cudaEventCreate(&p->ev[i][0]); cudaEventCreate(&p->ev[i][1]); }
    p->inner = *be;
    g_prof = p;
    be->matmul = pf_matmul; be->matmul_multi = pf_matmul_multi; be->rmsnorm = pf_rmsnorm; be->head_norm_rope = pf_hnr;
    be->attention = pf_attention; be->swiglu = pf_swiglu; be->add = pf_add; be->embed = pf_embed; be->copy_rows = pf_copy_rows;
    be->store_kv = pf_store_kv; be->argmax = pf_argmax; be->argmax_to = pf_argmax_to; be->embed_from = pf_embed_from; be->scatter_cols = pf_scatter_cols; be->hadamard_rows = pf_hadamard_rows;
    if (be->qk_norm_rope_store) be->qk_norm_rope_store = pf_qkrs;
    if (be->attention_spans) be->attention_spans = pf_attention_spans;
    if (be->qk_norm_rope_store_spans) be->qk_norm_rope_store_spans = pf_qkrs_spans;
    if (be->head_norm_rope_multi) be->head_norm_rope_multi = pf_hnr_multi;
    if (be->swiglu_matmul) be->swiglu_matmul = pf_swiglu_matmul;
    if (be->qkv_norm_rope_store) be->qkv_norm_rope_store = pf_qkv;
    be->record_begin = NULL; be->record_end = NULL; be->replay = NULL; be->record_free = NULL;
}
void prof_report(void) {
    prof_state *p = g_prof;
    if (!p) return;
    prof_flush();
    fprintf(stderr, "\nBS_CUDA_PROFILE: device time per op (ms total, calls, us per call)\n");
    for (int k = 0; k < p->n_keys; k++)
        fprintf(stderr, "  %-40s %10.3f %8ld %10.2f\n", p->names[k], p->ms[k], p->calls[k], p->calls[k] ? 1e3 * p->ms[k] / p->calls[k] : 0.0);
    g_prof = NULL;
    free(p);
}

// ---------------------------------------------------------------------------------------------
// BS_CUDA_MM_TRACE=1: timestamps of every tiled-GEMM launch (see cuda_internal.cuh). A diagnosis
// tool: it answers "where does a GEMM lose time against the copy rate" (ramp, skew, tail, cut
// tiles) and "how long are the gaps between GEMMs" without a profiler.
#define TRACE_LAUNCHES 4096
#define TRACE_MAX_G 1024
struct trace_meta { int G, M, K, count, n, swiglu; long long bytes; };
static unsigned long long *g_tr_dev;
static trace_meta *g_tr_meta;
static int g_tr_n = -1, g_tr_full;

unsigned long long *mm_trace_next(int G, int M, int K, int count, int n, long long bytes, bool swiglu) {
    if (g_tr_n < 0) {
        g_tr_n = 0;
        if (!bs_tuning_get()->cuda_mm_trace) { g_tr_n = TRACE_LAUNCHES; return NULL; }
        size_t sz = sizeof(unsigned long long) * TRACE_LAUNCHES * TRACE_MAX_G * 5;
        if (cudaMalloc(&g_tr_dev, sz) != cudaSuccess || cudaMemset(g_tr_dev, 0, sz) != cudaSuccess) {
            cudaGetLastError(); g_tr_n = TRACE_LAUNCHES; fprintf(stderr, "BS_CUDA_MM_TRACE: no memory for the trace\n"); return NULL;
        }
        g_tr_meta = (trace_meta *)calloc(TRACE_LAUNCHES, sizeof *g_tr_meta);
    }
    if (g_tr_n >= TRACE_LAUNCHES || G > TRACE_MAX_G) { g_tr_full = 1; return NULL; }
    trace_meta m = { G, M, K, count, n, swiglu, bytes };
    g_tr_meta[g_tr_n] = m;
    return g_tr_dev + (size_t)(g_tr_n++) * TRACE_MAX_G * 5;
}

static int cmp_u64(const void *a, const void *b) {
    unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}

void mm_trace_report(void) {
    if (!g_tr_dev || g_tr_n <= 0) return;
    cudaDeviceSynchronize();
    size_t per = (size_t)TRACE_MAX_G * 5;
    unsigned long long *h = (unsigned long long *)malloc(sizeof *h * per * g_tr_n);
    unsigned long long *v = (unsigned long long *)malloc(sizeof *v * TRACE_MAX_G);
    if (!h || !v || cudaMemcpy(h, g_tr_dev, sizeof *h * per * g_tr_n, cudaMemcpyDeviceToHost) != cudaSuccess) { free(h); free(v); return; }
    fprintf(stderr, "\nBS_CUDA_MM_TRACE: per launch, us from the first block's entry unless noted "
                    "(gap = this entry - previous launch's last end; wait/first/red = median and max over blocks)\n"
                    "  #  jobs M_tot K n sw | gap | entry_skew | wait_med | first_med first_max | end_min end_med end_max | red_med red_max | GB/s\n");
    unsigned long long prev_end = 0;
    for (int i = 0; i < g_tr_n; i++) {
        const trace_meta &m = g_tr_meta[i];
        const unsigned long long *t = h + (size_t)i * per;
        unsigned long long t0 = ~0ull, emax = 0, e0 = ~0ull, e1 = 0;
        int ok = 1;
        for (int b = 0; b < m.G; b++) {
            if (!t[b * 5] || !t[b * 5 + 3]) ok = 0;
            if (t[b * 5] < t0) t0 = t[b * 5];
            if (t[b * 5] > emax) emax = t[b * 5];
            if (t[b * 5 + 3] < e0) e0 = t[b * 5 + 3];
            if (t[b * 5 + 3] > e1) e1 = t[b * 5 + 3];
        }
        if (!ok) { fprintf(stderr, "%4d (not run)\n", i); continue; }
        double st[3][2];   // wait, first, red: median / max (relative to t0 for wait and first)
        for (int f = 0; f < 3; f++) {
            int col = f == 0 ? 1 : f == 1 ? 2 : 4;
            for (int b = 0; b < m.G; b++) v[b] = col == 4 ? t[b * 5 + 4] : t[b * 5 + col] - t0;
            qsort(v, m.G, sizeof *v, cmp_u64);
            st[f][0] = v[m.G / 2] / 1e3; st[f][1] = v[m.G - 1] / 1e3;
        }
        for (int b = 0; b < m.G; b++) v[b] = t[b * 5 + 3] - t0;
        qsort(v, m.G, sizeof *v, cmp_u64);
        double gap = prev_end && t0 > prev_end ? (t0 - prev_end) / 1e3 : (prev_end ? -((double)(prev_end - t0)) / 1e3 : 0);
        fprintf(stderr, "%4d %d %6d %5d %2d %d | %6.2f | %5.2f | %5.2f | %5.2f %5.2f | %6.2f %6.2f %6.2f | %5.2f %5.2f | %6.0f\n",
                i, m.count, m.M, m.K, m.n, m.swiglu, gap, (emax - t0) / 1e3, st[0][0], st[1][0], st[1][1], (e0 - t0) / 1e3,
                v[m.G / 2] / 1e3, (e1 - t0) / 1e3, st[2][0], st[2][1], m.bytes / ((e1 - t0) * 1e-9) / 1e9);
        prev_end = e1;
    }
    if (g_tr_full) fprintf(stderr, "BS_CUDA_MM_TRACE: later launches were not traced (buffer of %d launches full, or G > %d)\n", TRACE_LAUNCHES, TRACE_MAX_G);
    free(h); free(v);
    cudaFree(g_tr_dev); g_tr_dev = NULL;
}
