// RMSNorm over rows, per-head RMSNorm + RoPE, and the fused attention-input step.
#include "backend/cuda/cuda_internal.cuh"

// ---------------------------------------------------------------------------------------------
// Row ops

__device__ __forceinline__ float block_sum(float v, float *sh) {
    for (int off = 16; off; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    int w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sh[w] = v;
    __syncthreads();
    float s = 0.f;
    for (int i = 0; i < nw; i++) s += sh[i];
    return s;
}

__global__ void rmsnorm_kernel(float *y, const float *x, int dim, const void *w, int dt, float eps) {
    pdl_enter();
    __shared__ float sh[32];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *yr = y + (size_t)blockIdx.x * dim;
    float ss = 0.f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, sh);
    float inv = 1.0f / sqrtf(ss / dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = xr[i] * inv * (w ? ld_elem(w, dt, i) : 1.0f);
}

// dim % 4 == 0, dim <= 256 * 4 * RN_MAX, 16-byte aligned rows: the row stays in registers (one read of x and w,
// all loads in flight at once), one block reduction.
#define RN_MAX 8
__global__ void __launch_bounds__(256) rmsnorm_vec_kernel(float *y, const float *x, int dim, const void *w, int dt, float eps) {
    pdl_enter();
    __shared__ float sh[32];
    const float4 *xr = (const float4 *)(x + (size_t)blockIdx.x * dim);
    float4 *yr = (float4 *)(y + (size_t)blockIdx.x * dim);
    const int d4 = dim / 4;
    float4 v[RN_MAX], wv[RN_MAX];
    float ss = 0.f;
#pragma unroll
    for (int u = 0; u < RN_MAX; u++) {
        int i = threadIdx.x + 256 * u;
        v[u] = make_float4(0.f, 0.f, 0.f, 0.f); wv[u] = make_float4(1.f, 1.f, 1.f, 1.f);
        if (i < d4) {
            v[u] = xr[i];
            if (w && dt == BS_BF16) {
                uint2 b = ((const uint2 *)w)[i];
                float2 lo = __bfloat1622float2(*(__nv_bfloat162 *)&b.x), hi = __bfloat1622float2(*(__nv_bfloat162 *)&b.y);
                wv[u] = make_float4(lo.x, lo.y, hi.x, hi.y);
            } else if (w) {
                wv[u] = make_float4(ld_elem(w, dt, 4 * i), ld_elem(w, dt, 4 * i + 1), ld_elem(w, dt, 4 * i + 2), ld_elem(w, dt, 4 * i + 3));
            }
        }
    }
#pragma unroll
    for (int u = 0; u < RN_MAX; u++) ss += v[u].x * v[u].x + v[u].y * v[u].y + v[u].z * v[u].z + v[u].w * v[u].w;
    ss = block_sum(ss, sh);
    const float inv = 1.0f / sqrtf(ss / dim + eps);
#pragma unroll
    for (int u = 0; u < RN_MAX; u++) {
        int i = threadIdx.x + 256 * u;
        if (i < d4) yr[i] = make_float4(v[u].x * inv * wv[u].x, v[u].y * inv * wv[u].y, v[u].z * inv * wv[u].z, v[u].w * inv * wv[u].w);
    }
}

// Norm weights are vectors (rows = 1), which the backend never tiles; a tiled one here is a bug.
#define REQUIRE_ROW_MAJOR(c, w, op) do { if ((w) && (w)->layout) \
    CU_DECLINE(c, "%s: a %lldx%lld weight in tiled layout (norm weights must be vectors)", op, (long long)(w)->rows, (long long)(w)->cols); } while (0)
// RoPE pairs element i with i + hd/2 and a warp holds at most ATT_MAX_HD elements of a head.
#define REQUIRE_HEAD_DIM(c, hd) do { if ((hd) > ATT_MAX_HD || (hd) % 2) \
    CU_DECLINE(c, "head_norm_rope: head_dim %d unsupported (even, <= %d)", hd, ATT_MAX_HD); } while (0)

void cu_rmsnorm(bs_backend *be, float *y, const float *x, int n, int dim, const bs_mat *w, float eps) {
    if (n <= 0 || ablated("rmsnorm")) return;
    REQUIRE_ROW_MAJOR(CI(be), w, "rmsnorm");
    if (dim % 4 == 0 && dim <= 256 * 4 * RN_MAX && ((uintptr_t)x & 15) == 0 && ((uintptr_t)y & 15) == 0 &&
        (!w || w->dtype != BS_BF16 || ((uintptr_t)w->data & 7) == 0)) {
        launch_k(CI(be), "rmsnorm", rmsnorm_vec_kernel, dim3(n), dim3(256), 0, y, x, dim, (const void *)(w ? w->data : NULL), (int)(w ? w->dtype : 0), eps);
        return;
    }
    launch_k(CI(be), "rmsnorm", rmsnorm_kernel, dim3(n), dim3(dim >= 1024 ? 512 : 128), 0, y, x, dim, (const void *)(w ? w->data : NULL), (int)(w ? w->dtype : 0), eps);
}

__global__ void head_norm_rope_kernel(float *x, int n, int n_heads, int hd, const void *nw, int dt, float eps,
                                      posarg pos0, const float *inv_freq) {
    pdl_enter();
    int wid = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (wid >= n * n_heads) return;
    int r = wid / n_heads;
    head_norm_rope_warp(x + (size_t)wid * hd, NULL, hd, nw, dt, eps, pv(pos0) + r, inv_freq, lane);
}

// head_norm_rope of up to HNR_MULTI buffers in one launch: blockIdx.y picks the buffer.
#define HNR_MULTI 8
struct hnr_multi_arg { float *x[HNR_MULTI]; const void *w[HNR_MULTI]; int dt[HNR_MULTI]; };
__global__ void head_norm_rope_multi_kernel(hnr_multi_arg A, int n, int n_heads, int hd, float eps, posarg pos0, const float *inv_freq) {
    pdl_enter();
    int wid = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31, i = blockIdx.y;
    if (wid >= n * n_heads) return;
    head_norm_rope_warp(A.x[i] + (size_t)wid * hd, NULL, hd, A.w[i], A.dt[i], eps, pv(pos0) + wid / n_heads, inv_freq, lane);
}
static void head_norm_rope_wide(cuda_impl *c, float *x, int n, int n_heads, int hd, const bs_mat *norm_w, float eps, int pos0, const float *inv_freq);

void cu_head_norm_rope_multi(bs_backend *be, int count, float *const *x, int n, int n_heads, int hd, const bs_mat *const *norm_w,
                             float eps, int pos0, const float *inv_freq) {
    cuda_impl *c = CI(be);
    if (n <= 0) return;
    if (hd > ATT_MAX_HD) {   // wide heads (a Gemma-4 DSpark drafter's context keys, 512 wide): the wide kernel per matrix
        for (int i = 0; i < count; i++) head_norm_rope_wide(c, x[i], n, n_heads, hd, norm_w[i], eps, pos0, inv_freq);
        return;
    }
    REQUIRE_HEAD_DIM(c, hd);
    int warps = n * n_heads;
    for (int i0 = 0; i0 < count; i0 += HNR_MULTI) {
        hnr_multi_arg A;
        memset(&A, 0, sizeof A);
        int m = count - i0 < HNR_MULTI ? count - i0 : HNR_MULTI;
        for (int i = 0; i < m; i++) {
            const bs_mat *w = norm_w[i0 + i];
            REQUIRE_ROW_MAJOR(c, w, "head_norm_rope");
            A.x[i] = x[i0 + i]; A.w[i] = w ? w->data : NULL; A.dt[i] = w ? (int)w->dtype : 0;
        }
        launch_k(c, "head_norm_rope", head_norm_rope_multi_kernel, dim3((warps + 7) / 8, m), dim3(256), 0, A, n, n_heads, hd, eps, P(c, pos0), inv_freq);
    }
}

// The attention-input step of a layer in one launch: warps [0, n*nq) norm+rope the q heads in place,
// [n*nq, n*(nq+nkv)) the k heads (in place and into the cache's row pos0 + r, through its page table), the
// rest copy v rows into the cache.
__global__ void qk_norm_rope_store_kernel(float *q, float *k, const float *v, int n, int nq, int nkv, int hd,
                                          const void *qw, int qdt, const void *kw, int kdt, float eps, posarg pos0,
                                          const float *inv_freq, kv_dev kv) {
    // waits before it lets the attention start: when the attention's blocks begin, every kernel before
    // this one has completed, so it may read the K/V rows of earlier forwards before its own wait
    pdl_wait(); pdl_trigger();
    int wid = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    const int nqw = n * nq, nkw = n * nkv;
    const int p0 = pv(pos0);
    if (wid < nqw) {
        head_norm_rope_warp(q + (size_t)wid * hd, NULL, hd, qw, qdt, eps, p0 + wid / nq, inv_freq, lane);
    } else if (wid < nqw + nkw) {
        int w = wid - nqw, r = w / nkv;
        float *dst = kv.k + (kv_dev_row(kv, p0 + r) * nkv + w % nkv) * hd;
        head_norm_rope_warp(k + (size_t)w * hd, dst, hd, kw, kdt, eps, p0 + r, inv_freq, lane);
    } else if (wid < nqw + 2 * nkw) {
        int w = wid - nqw - nkw, r = w / nkv;
        const float *src = v + (size_t)w * hd;
        float *dst = kv.v + (kv_dev_row(kv, p0 + r) * nkv + w % nkv) * hd;
        for (int i = lane; i < hd; i += 32) dst[i] = src[i];
    }
}

// Heads wider than a warp's ATT_MAX_HD (Gemma-4's 512-wide full-attention heads): one block of 256 threads per
// (row, head); the same arithmetic as the CPU reference (norm, then the pair (i, i + hd/2) turned by pos * inv_freq[i]).
#define WIDE_MAX_HD 2048
__global__ void __launch_bounds__(256) head_norm_rope_wide_kernel(float *x, int n_heads, int hd, const void *nw, int dt, float eps, posarg pos0,
                                                                  const float *inv_freq) {
    pdl_enter();
    __shared__ float sh[32];
    const int r = blockIdx.x / n_heads, half = hd / 2;
    float *v = x + (size_t)blockIdx.x * hd;
    float ss = 0.f;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) ss += v[i] * v[i];
    float inv = nw ? 1.0f / sqrtf(block_sum(ss, sh) / hd + eps) : 1.0f;
    const int pos = pv(pos0) + r;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float x0 = v[i], x1 = v[i + half];
        if (nw) { x0 = x0 * inv * ld_elem(nw, dt, i); x1 = x1 * inv * ld_elem(nw, dt, i + half); }
        float a = (float)pos * inv_freq[i], cs = cosf(a), sn = sinf(a);
        v[i] = x0 * cs - x1 * sn;
        v[i + half] = x1 * cs + x0 * sn;
    }
}

static void head_norm_rope_wide(cuda_impl *c, float *x, int n, int n_heads, int hd, const bs_mat *norm_w, float eps, int pos0, const float *inv_freq) {
    if (hd > WIDE_MAX_HD || hd % 2) CU_DECLINE(c, "head_norm_rope: head_dim %d unsupported (even, <= %d)", hd, WIDE_MAX_HD);
    launch_k(c, "head_norm_rope wide", head_norm_rope_wide_kernel, dim3(n * n_heads), dim3(256), 0, x, n_heads, hd,
             (const void *)(norm_w ? norm_w->data : NULL), norm_w ? (int)norm_w->dtype : 0, eps, P(c, pos0), inv_freq);
}

void cu_qk_norm_rope_store(bs_backend *be, float *q, float *k, const float *v, int n, int n_heads, int n_kv, int hd,
                                  const bs_mat *q_norm, const bs_mat *k_norm, float eps, int pos0, const float *inv_freq,
                                  const bs_kv_view *kv) {
    cuda_impl *c = CI(be);
    if (n <= 0 || ablated("qknrs")) return;
    if (hd > ATT_MAX_HD) {   // wide heads: the three steps (backend.h: they must agree with the fused op, which they are here)
        REQUIRE_ROW_MAJOR(c, q_norm, "qk_norm_rope_store"); REQUIRE_ROW_MAJOR(c, k_norm, "qk_norm_rope_store");
        head_norm_rope_wide(c, q, n, n_heads, hd, q_norm, eps, pos0, inv_freq);
        head_norm_rope_wide(c, k, n, n_kv, hd, k_norm, eps, pos0, inv_freq);
        cu_store_kv(be, kv, pos0, k, v, n, n_kv * hd);
        return;
    }
    REQUIRE_ROW_MAJOR(c, q_norm, "qk_norm_rope_store"); REQUIRE_ROW_MAJOR(c, k_norm, "qk_norm_rope_store");
    REQUIRE_HEAD_DIM(c, hd);
    int warps = n * (n_heads + 2 * n_kv);
    launch_k(c, "qk_norm_rope_store", qk_norm_rope_store_kernel, dim3((warps + 7) / 8), dim3(256), 0, q, k, v, n, n_heads, n_kv, hd, q_norm ? q_norm->data : NULL,
        q_norm ? q_norm->dtype : 0, k_norm ? k_norm->data : NULL, k_norm ? k_norm->dtype : 0, eps, P(c, pos0), inv_freq, kv_dev_of(kv));
    qknrs_launched(c, n);
}

// The same step for the spans of a batch in one launch (backend.h qk_norm_rope_store_spans): a batched decode
// step of R sequences otherwise launches it R times a layer (on the H200 8B shape at 64 sequences, 2,304
// launches of 5.7 us a step: 13 ms of a 33 ms step). The warps are laid out as one call over the launch's
// rows; each row finds its span and takes that span's position and page table, then runs the per-span body,
// so every row's bits are the ones a call of its span alone gives.
#define QKS_MAX_SPANS 64
struct qks_span { kv_dev kv; int row0, n, pos0, lrow0; };   // lrow0: its first row among the launch's rows
struct qks_args { qks_span sp[QKS_MAX_SPANS]; int n_spans, rows; };

__global__ void qk_norm_rope_store_spans_kernel(float *q, float *k, const float *v, int nq, int nkv, int hd, const void *qw, int qdt,
                                                const void *kw, int kdt, float eps, const float *inv_freq, const __grid_constant__ qks_args S) {
    pdl_wait(); pdl_trigger();   // as qk_norm_rope_store_kernel
    const int wid = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    const int per_row = nq + 2 * nkv, lr = wid / per_row, h = wid % per_row;
    if (lr >= S.rows) return;
    int i = 0;
    while (i + 1 < S.n_spans && S.sp[i + 1].lrow0 <= lr) i++;
    const qks_span &sp = S.sp[i];
    const int j = lr - sp.lrow0, row = sp.row0 + j, pos = sp.pos0 + j;
    if (h < nq) {
        head_norm_rope_warp(q + ((size_t)row * nq + h) * hd, NULL, hd, qw, qdt, eps, pos, inv_freq, lane);
    } else if (h < nq + nkv) {
        const int hk = h - nq;
        float *dst = sp.kv.k + (kv_dev_row(sp.kv, pos) * nkv + hk) * hd;
        head_norm_rope_warp(k + ((size_t)row * nkv + hk) * hd, dst, hd, kw, kdt, eps, pos, inv_freq, lane);
    } else {
        const int hv = h - nq - nkv;
        const float *src = v + ((size_t)row * nkv + hv) * hd;
        float *dst = sp.kv.v + (kv_dev_row(sp.kv, pos) * nkv + hv) * hd;
        for (int e = lane; e < hd; e += 32) dst[e] = src[e];
    }
}

// One span, a recording (whose positions must be position arguments) or wide heads: the per-span op.
void cu_qk_norm_rope_store_spans(bs_backend *be, float *q, float *k, const float *v, const bs_row_span *spans, int n_spans, int n_heads,
                                 int n_kv, int hd, const bs_mat *q_norm, const bs_mat *k_norm, float eps, const float *inv_freq) {
    cuda_impl *c = CI(be);
    const size_t qw = (size_t)n_heads * hd, kw = (size_t)n_kv * hd;
    if (n_spans <= 0 || ablated("qknrs")) return;
    if (n_spans == 1 || c->capturing || hd > ATT_MAX_HD) {   // (heads past ATT_MAX_HD: the per-span op's wide kernels)
        for (int i = 0; i < n_spans; i++) {
            const bs_row_span *s = &spans[i];
            cu_qk_norm_rope_store(be, q + s->row0 * qw, k + s->row0 * kw, v + s->row0 * kw, s->n, n_heads, n_kv, hd, q_norm, k_norm, eps,
                                  s->pos0, inv_freq, &s->kv);
        }
        return;
    }
    REQUIRE_ROW_MAJOR(c, q_norm, "qk_norm_rope_store"); REQUIRE_ROW_MAJOR(c, k_norm, "qk_norm_rope_store");
    REQUIRE_HEAD_DIM(c, hd);
    for (int i0 = 0; i0 < n_spans; i0 += QKS_MAX_SPANS) {
        qks_args S;   // ~2.3 KB of kernel parameters
        memset(&S, 0, sizeof S);
        S.n_spans = n_spans - i0 < QKS_MAX_SPANS ? n_spans - i0 : QKS_MAX_SPANS;
        for (int i = 0; i < S.n_spans; i++) {
            const bs_row_span *s = &spans[i0 + i];
            S.sp[i] = qks_span{ kv_dev_of(&s->kv), (int)s->row0, s->n, s->pos0, S.rows };
            S.rows += s->n;
        }
        if (S.rows <= 0) continue;
        const long long warps = (long long)S.rows * (n_heads + 2 * n_kv);
        launch_k(c, "qk_norm_rope_store spans", qk_norm_rope_store_spans_kernel, dim3((unsigned)((warps + 7) / 8)), dim3(256), 0, q, k, v,
                 n_heads, n_kv, hd, q_norm ? q_norm->data : NULL, q_norm ? q_norm->dtype : 0, k_norm ? k_norm->data : NULL,
                 k_norm ? k_norm->dtype : 0, eps, inv_freq, S);
        qknrs_launched(c, S.rows);
    }
}

void qknrs_launched(cuda_impl *c, int n) {
    c->kv_settled = 1;
    // Above one row the attention after it launches with PDL, so that its blocks start, and load the K/V
    // rows of earlier forwards, while this kernel runs (BS_CUDA_ATT_PDL=0: never; =all: at one row too).
    // Measured on the H200 (docs/history/benchmarks-diary.md, session 11): 16-row forward 5.21 vs 5.25 ms at 512 keys,
    // 5.91 vs 5.99 at 4096; decode +0.5% at 512 keys but -4.6% at 4096.
    static int att_pdl = -1;
    if (att_pdl < 0) att_pdl = bs_tuning_get()->cuda_att_pdl;
    c->pdl_next = pdl_gemm() && (att_pdl == 2 || (att_pdl == 1 && n > 1));
}

void cu_head_norm_rope(bs_backend *be, float *x, int n, int n_heads, int hd, const bs_mat *norm_w, float eps, int pos0, const float *inv_freq) {
    cuda_impl *c = CI(be);
    if (n <= 0) return;
    REQUIRE_ROW_MAJOR(c, norm_w, "head_norm_rope");
    if (hd > ATT_MAX_HD) { head_norm_rope_wide(c, x, n, n_heads, hd, norm_w, eps, pos0, inv_freq); return; }
    REQUIRE_HEAD_DIM(c, hd);
    int warps = n * n_heads;
    launch_k(c, "head_norm_rope", head_norm_rope_kernel, dim3((warps + 7) / 8), dim3(256), 0, x, n, n_heads, hd, norm_w ? norm_w->data : NULL,
                                                             norm_w ? norm_w->dtype : 0, eps, P(c, pos0), inv_freq);
}

