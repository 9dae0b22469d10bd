// The CPU reference ops: plain scalar C, one thread, written to be obviously right.
// Every faster kernel (cpu_fast*.c, the CUDA backend) is tested against these.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "backend/affine.h"
#include "backend/hadamard.h"
#include "backend/cpu/cpu.h"
#include "util/tuning.h"

// Every CPU backend is allocated as this struct (bs_backend first), so its ops can reach the weight arena.
typedef struct { bs_backend be; bs_cpu_weights w; int huge; } cpu_backend;

// Buffers come from anonymous mappings: zero-filled by the kernel page by page as they are first
// touched, so a KV cache sized for a long context costs memory only for the rows actually written.
// The mapping's start and length are kept in a header page just before the page-aligned pointer handed out.
// The fast backend ("cpu", unless BS_CPU_HUGEPAGES=0) puts buffers of 2 MiB or more on a 2 MiB boundary
// with MADV_HUGEPAGE (still touched lazily, 2 MiB at a time): the KV cache rows of one head are 4 KiB apart,
// so on 4 KiB pages attention takes a TLB miss on every key row.
// Buffers under SMALL_BUF come from the heap instead (zeroed here; the header's length 0 says so): a
// request's small scratch (a tiny model's, a verify block's ids) then costs no system call per request.
#define SMALL_BUF ((size_t)64 << 10)
static void *cpu_alloc(bs_backend *be, size_t bytes, bs_err *err) {
    size_t page = 4096, huge = (size_t)2 << 20, body = (bytes + page - 1) / page * page;
    if (bytes < SMALL_BUF) {
        char *m = NULL;
        if (posix_memalign((void **)&m, page, page + body)) { bs_fail(err, "out of host memory allocating %zu bytes", bytes); return NULL; }
        memset(m + page, 0, body);
        ((size_t *)m)[0] = (size_t)m;
        ((size_t *)m)[1] = 0;
        return m + page;
    }
    int h = ((cpu_backend *)be)->huge && bytes >= huge;
    size_t len = page + body + (h ? huge : 0);
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | (h ? MAP_NORESERVE : 0), -1, 0);
    if (m == MAP_FAILED) { bs_fail(err, "out of host memory allocating %zu bytes", bytes); return NULL; }
    char *p = m + page;
    if (h) {
        p = (char *)(((uintptr_t)m + page + huge - 1) & ~(uintptr_t)(huge - 1));
        madvise(p, body, MADV_HUGEPAGE);   // advice only: on failure the buffer simply stays on 4 KiB pages
    }
    ((size_t *)(p - page))[0] = (size_t)m;
    ((size_t *)(p - page))[1] = len;
    return p;
}
static void cpu_free(bs_backend *be, void *p) {
    if (!p) return;
    size_t *hd = (size_t *)((char *)p - 4096);
    if (hd[1] == 0) free((void *)hd[0]);
    else munmap((void *)hd[0], hd[1]);
}
static void cpu_memcpy(bs_backend *be, void *dst, const void *src, size_t bytes) { if (bytes) memmove(dst, src, bytes); }
static void cpu_sync(bs_backend *be) {}
static int cpu_weight(bs_backend *be, bs_mat *dst, const bs_mat *host, bs_err *err) { *dst = *host; return 0; }

static void cpu_destroy(bs_backend *be);

// The fast backend's weight op: a copy in huge-page memory where possible (cpu_mem.c), else the mmap view.
static int cpu_weight_huge(bs_backend *be, bs_mat *dst, const bs_mat *host, bs_err *err) {
    if (bs_cpu_weights_copy(&((cpu_backend *)be)->w, dst, host)) *dst = *host;
    return 0;
}

size_t bs_cpu_weight_bytes_copied(const bs_backend *be) {
    if (!be || be->destroy != cpu_destroy) return 0;
    return ((const cpu_backend *)be)->w.bytes;
}

static void ref_matmul(bs_backend *be, float *y, const float *x, int n, const bs_mat *W, int acc) {
    float *w = malloc(sizeof(float) * W->cols);   // one weight row, widened (or dequantised) once for all n rows
    if (!w) { bs_backend_fail(be, "matmul (reference): out of memory for a row of %lld weights", (long long)W->cols); return; }
    for (int64_t o = 0; o < W->rows; o++) {
        bs_mat_row_f32(W, o, w);
        for (int r = 0; r < n; r++) {
            float s = 0;
            for (int64_t i = 0; i < W->cols; i++) s += x[r * W->cols + i] * w[i];
            y[r * W->rows + o] = acc ? y[r * W->rows + o] + s : s;
        }
    }
    free(w);
}

static void ref_matmul_multi(bs_backend *be, int m, float *const *y, const float *x, int n, const bs_mat *const *W, int acc) {
    for (int i = 0; i < m; i++) ref_matmul(be, y[i], x, n, W[i], acc);
}

void bs_cpu_rmsnorm_row(float *y, const float *x, int dim, const bs_mat *w, float eps) {
    float ss = 0;
    for (int i = 0; i < dim; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / dim + eps);
    for (int i = 0; i < dim; i++) y[i] = x[i] * inv * (w ? bs_load_elem(w->data, w->dtype, i) : 1.0f);
}

static void ref_rmsnorm(bs_backend *be, float *y, const float *x, int n, int dim, const bs_mat *w, float eps) {
    for (int r = 0; r < n; r++) bs_cpu_rmsnorm_row(y + (size_t)r * dim, x + (size_t)r * dim, dim, w, eps);
}

// RoPE angles as transformers computes them: angle = fp32(pos) * inv_freq[i] (the model's fp32 table).
void bs_cpu_rope_row(float *x, int hd, int pos, const float *inv_freq) {
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        float a = (float)pos * inv_freq[i], c = cosf(a), s = sinf(a);
        float x0 = x[i], x1 = x[i + half];
        x[i] = x0 * c - x1 * s;
        x[i + half] = x1 * c + x0 * s;
    }
}

static void ref_head_norm_rope(bs_backend *be, float *x, int n, int n_heads, int hd, const bs_mat *norm_w,
                               float eps, int pos0, const float *inv_freq) {
    for (int r = 0; r < n; r++)
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((size_t)r * n_heads + h) * hd;
            if (norm_w) bs_cpu_rmsnorm_row(v, v, hd, norm_w, eps);
            bs_cpu_rope_row(v, hd, pos0 + r, inv_freq);
        }
}

static void ref_attention(bs_backend *be, float *out, const float *q, const bs_kv_view *kv,
                          int n_q, int n_heads, int n_kv, int hd, int n_keys, int q_pos0, int causal, int window) {
    int group = n_heads / n_kv;
    float scale = 1.0f / sqrtf((float)hd);
    float *sc = malloc(sizeof(float) * (n_keys > 0 ? n_keys : 1));
    if (!sc) { bs_backend_fail(be, "attention (reference): out of memory for %d scores", n_keys); return; }
    for (int i = 0; i < n_q; i++) {
        int hi = causal ? q_pos0 + i + 1 : n_keys;
        if (hi > n_keys) hi = n_keys;
        int lo = window > 0 && hi - window > 0 ? hi - window : 0;
        for (int h = 0; h < n_heads; h++) {
            const float *qh = q + ((size_t)i * n_heads + h) * hd;
            int kh = h / group;
            float mx = -INFINITY;
            for (int j = lo; j < hi; j++) {
                const float *kj = kv->k + (bs_kv_row(kv, j) * n_kv + kh) * hd;
                float s = 0;
                for (int d = 0; d < hd; d++) s += qh[d] * kj[d];
                sc[j] = s * scale;
                if (sc[j] > mx) mx = sc[j];
            }
            float sum = 0;
            for (int j = lo; j < hi; j++) { sc[j] = expf(sc[j] - mx); sum += sc[j]; }
            float *o = out + ((size_t)i * n_heads + h) * hd;
            for (int d = 0; d < hd; d++) o[d] = 0;
            for (int j = lo; j < hi; j++) {
                const float *vj = kv->v + (bs_kv_row(kv, j) * n_kv + kh) * hd;
                float p = sc[j] / sum;
                for (int d = 0; d < hd; d++) o[d] += p * vj[d];
            }
        }
    }
    free(sc);
}

static void ref_swiglu(bs_backend *be, float *h, const float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i++) h[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}
static void ref_add(bs_backend *be, float *y, const float *x, size_t n) { for (size_t i = 0; i < n; i++) y[i] += x[i]; }
// PyTorch's GELU "tanh" approximation: kBeta = sqrt(2) * 2/sqrt(pi) * 0.5, inner = kBeta * (x + 0.044715 * x^3)
float bs_cpu_gelu_tanh(float x) {
    const float beta = (float)(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;
    float cube = x * x * x, inner = beta * (x + kappa * cube);
    return 0.5f * x * (1.0f + tanhf(inner));
}
static void ref_gelu_mul(bs_backend *be, float *h, const float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i++) h[i] = bs_cpu_gelu_tanh(g[i]) * u[i];
}
static void ref_scale(bs_backend *be, float *y, float s, size_t n) { for (size_t i = 0; i < n; i++) y[i] *= s; }
static void ref_softcap(bs_backend *be, float *y, float cap, size_t n) { for (size_t i = 0; i < n; i++) y[i] = tanhf(y[i] / cap) * cap; }

static void ref_embed(bs_backend *be, float *out, const bs_mat *t, const int32_t *ids, int n) {
    for (int r = 0; r < n; r++) bs_mat_row_f32(t, ids[r], out + (size_t)r * t->cols);
}

static void cpu_copy_rows(bs_backend *be, float *dst, size_t ds, const float *src, size_t ss, int n, int width) {
    for (int r = 0; r < n; r++) memmove(dst + r * ds, src + r * ss, sizeof(float) * width);
}

static void cpu_store_kv(bs_backend *be, const bs_kv_view *kv, int pos0, const float *k, const float *v, int n, int width) {
    for (int i = 0; i < n; i++) {
        size_t r = bs_kv_row(kv, pos0 + i) * width;
        memmove(kv->k + r, k + (size_t)i * width, sizeof(float) * width);
        memmove(kv->v + r, v + (size_t)i * width, sizeof(float) * width);
    }
}

static void cpu_argmax(bs_backend *be, int32_t *out, const float *logits, int n, int vocab) {
    for (int r = 0; r < n; r++) {
        const float *l = logits + (size_t)r * vocab;
        int best = 0;
        for (int i = 1; i < vocab; i++) if (l[i] > l[best]) best = i;
        out[r] = best;
    }
}

void bs_cpu_scatter_row(float *out, int out_w, const float *in, int in_w, const int32_t *cols, float fill) {
    int v = 0;
    for (int c = 0; c < in_w; c++) {
        while (v < cols[c]) out[v++] = fill;
        out[v++] = in[c];
    }
    while (v < out_w) out[v++] = fill;
}
static void cpu_scatter_cols(bs_backend *be, float *out, int out_w, const float *in, int in_w, int n, const int32_t *cols, float fill) {
    for (int r = 0; r < n; r++) bs_cpu_scatter_row(out + (size_t)r * out_w, out_w, in + (size_t)r * in_w, in_w, cols, fill);
}

// One row of hadamard_rows (backend.h): y = post * T(pre * x), in place when y == x.
void bs_cpu_hadamard_row(const bs_hadamard *t, float *y, const float *x, const float *pre, const float *post, int transpose) {
    if (y != x) memmove(y, x, sizeof(float) * t->n);
    if (pre) for (int64_t i = 0; i < t->n; i++) y[i] *= pre[i];
    bs_hadamard_row(t, y, transpose);
    if (post) for (int64_t i = 0; i < t->n; i++) y[i] *= post[i];
}
static void ref_hadamard_rows(bs_backend *be, float *y, const float *x, int n, int dim, const float *pre, const float *post, int transpose) {
    bs_hadamard t;
    if (bs_hadamard_init(&t, dim)) { bs_backend_fail(be, "hadamard_rows: length %d is not m * 2^k for m in {1, 12, 20, 28}", dim); return; }
    for (int r = 0; r < n; r++) bs_cpu_hadamard_row(&t, y + (size_t)r * dim, x + (size_t)r * dim, pre, post, transpose);
}

// argmax_to with host ids: argmax, then the optional column -> id map.
static void cpu_argmax_to(bs_backend *be, int32_t *out, const float *logits, int n, int vocab, const int32_t *map) {
    be->argmax(be, out, logits, n, vocab);
    if (map) for (int r = 0; r < n; r++) out[r] = map[out[r]];
}

// DFlash 2's convolution (backend.h dyn_conv): every output element alone, taps in order.
static void cpu_dyn_conv(bs_backend *be, float *y, const float *x, int n, int dim, int block, int taps, const float *base,
                         const float *dyn, int dyn_stride, int group, int acc) {
    const int groups = dim / group;
    for (int t = 0; t < n; t++) {
        const float *d = dyn + (size_t)t * dyn_stride;
        const int reach = t % block;   // taps beyond the block's first row read zeros
        for (int c = 0; c < dim; c++) {
            float s = 0;
            for (int tau = 0; tau < taps && tau <= reach; tau++)
                // fmaf, not `s += a * b`: whether the compiler fuses that depends on flags; the CUDA kernel
                // fuses explicitly, so the two agree bit for bit (tests/test_dflash2_ops.c).
                s = fmaf(base[(size_t)tau * dim + c] + d[tau * groups + c / group], x[(size_t)(t - tau) * dim + c], s);
            y[(size_t)t * dim + c] = acc ? y[(size_t)t * dim + c] + s : s;
        }
    }
}

// (value, column) ordered as topk orders them: a before b when a's value is larger, or equal with a smaller column.
static inline int topk_before(float va, int ca, float vb, int cb) {
    if (va != va) va = -INFINITY;
    if (vb != vb) vb = -INFINITY;
    return va > vb || (va == vb && ca < cb);
}
// backend.h topk: one pass per row keeping the k best seen so far in order (insertion; most entries fail the
// first comparison against the current k-th).
static void cpu_topk(bs_backend *be, int32_t *ids, float *vals, const float *logits, int n, int vocab, int k, const int32_t *map) {
    int cols[1024];
    for (int r = 0; r < n; r++) {
        const float *l = logits + (size_t)r * vocab;
        int m = 0;
        for (int c = 0; c < vocab; c++) {
            if (m == k && !topk_before(l[c], c, l[cols[k - 1]], cols[k - 1])) continue;
            int j = m < k ? m++ : k - 1;
            while (j > 0 && topk_before(l[c], c, l[cols[j - 1]], cols[j - 1])) { cols[j] = cols[j - 1]; j--; }
            cols[j] = c;
        }
        for (int j = 0; j < k; j++) {
            ids[(size_t)r * k + j] = map ? map[cols[j]] : cols[j];
            vals[(size_t)r * k + j] = l[cols[j]];
        }
    }
}

static void cpu_destroy(bs_backend *be) {
    bs_cpu_weights_free(&((cpu_backend *)be)->w);
    free(be);
}

void bs_cpu_fill_reference(bs_backend *be) {
    be->default_draft_max = 4;   // the AVX2 path's best block at acceptance 0.6-0.9 (bench --round)
    be->alloc = cpu_alloc; be->free = cpu_free;
    be->upload = cpu_memcpy; be->download = cpu_memcpy; be->copy = cpu_memcpy;
    be->sync = cpu_sync; be->weight = cpu_weight; be->mem_free = bs_cpu_mem_free;
    be->matmul = ref_matmul; be->matmul_multi = ref_matmul_multi; be->rmsnorm = ref_rmsnorm; be->head_norm_rope = ref_head_norm_rope;
    be->attention = ref_attention; be->swiglu = ref_swiglu; be->add = ref_add; be->embed = ref_embed;
    be->copy_rows = cpu_copy_rows; be->argmax = cpu_argmax; be->argmax_to = cpu_argmax_to; be->embed_from = ref_embed; be->scatter_cols = cpu_scatter_cols; be->hadamard_rows = ref_hadamard_rows; be->store_kv = cpu_store_kv; be->destroy = cpu_destroy;
    be->dyn_conv = cpu_dyn_conv; be->topk = cpu_topk;
    be->gelu_mul = ref_gelu_mul; be->scale = ref_scale; be->softcap = ref_softcap;
}

bs_backend *bs_backend_cpu(int reference) {
    bs_tuning_init();   // the BS_CPU_* knobs, when no engine opened this backend
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb) return NULL;
    bs_backend *be = &cb->be;
    bs_cpu_fill_reference(be);
    be->name = "cpu-ref";
    if (!reference) {
        be->name = "cpu";
        bs_cpu_install_fast(be);
        if (bs_cpu_hugepages_wanted()) { be->weight = cpu_weight_huge; cb->huge = 1; }
    }
    return be;
}

bs_backend *bs_backend_by_name(const char *name, bs_err *err) {
    if (!name || !strcmp(name, "cpu")) return bs_backend_cpu(0);
    if (!strcmp(name, "cpu-ref")) return bs_backend_cpu(1);
    if (!strncmp(name, "cuda", 4)) {
        int ord = name[4] == ':' ? atoi(name + 5) : 0;
        return bs_backend_cuda(ord, err);
    }
    bs_fail(err, "unknown device '%s' (expected cpu, cpu-ref or cuda[:N])", name);
    return NULL;
}

#ifndef BS_WITH_CUDA
bs_backend *bs_backend_cuda(int ordinal, bs_err *err) {
    bs_fail(err, "this blockspec was built without CUDA (rebuild with `make cuda` on a machine with nvcc)");
    return NULL;
}
#endif
