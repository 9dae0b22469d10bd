#include "backend/cuda/cuda_internal.cuh"

// ---------------------------------------------------------------------------------------------
// Elementwise, embedding, copies, argmax

__global__ void swiglu_kernel(float *h, const float *g, const float *u, size_t n) {
    pdl_enter();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float x = g[i];
        h[i] = x / (1.0f + expf(-x)) * u[i];
    }
}
__global__ void add_kernel(float *y, const float *x, size_t n) {
    pdl_enter();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) y[i] += x[i];
}
static int ew_blocks(size_t n) { size_t b = (n + 255) / 256; return b > 4096 ? 4096 : (int)(b ? b : 1); }
void cu_swiglu(bs_backend *be, float *h, const float *g, const float *u, size_t n) {
    if (!n) return;
    launch_k(CI(be), "swiglu", swiglu_kernel, dim3(ew_blocks(n)), dim3(256), 0, h, g, u, n);
}
void cu_add(bs_backend *be, float *y, const float *x, size_t n) {
    if (!n) return;
    launch_k(CI(be), "add", add_kernel, dim3(ew_blocks(n)), dim3(256), 0, y, x, n);
}

// Gemma-4's elementwise steps (backend.h): the same fp32 expressions as the CPU reference (cpu_ref.c).
__global__ void gelu_mul_kernel(float *h, const float *g, const float *u, size_t n) {
    pdl_enter();
    const float beta = (float)(1.4142135623730951 * 1.1283791670955126 * 0.5), kappa = 0.044715f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float x = g[i], cube = x * x * x, inner = beta * (x + kappa * cube);
        h[i] = 0.5f * x * (1.0f + tanhf(inner)) * u[i];
    }
}
__global__ void scale_kernel(float *y, float s, size_t n) {
    pdl_enter();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) y[i] *= s;
}
__global__ void softcap_kernel(float *y, float cap, size_t n) {
    pdl_enter();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) y[i] = tanhf(y[i] / cap) * cap;
}
void cu_gelu_mul(bs_backend *be, float *h, const float *g, const float *u, size_t n) {
    if (!n) return;
    launch_k(CI(be), "gelu_mul", gelu_mul_kernel, dim3(ew_blocks(n)), dim3(256), 0, h, g, u, n);
}
void cu_scale(bs_backend *be, float *y, float s, size_t n) {
    if (!n) return;
    launch_k(CI(be), "scale", scale_kernel, dim3(ew_blocks(n)), dim3(256), 0, y, s, n);
}
void cu_softcap(bs_backend *be, float *y, float cap, size_t n) {
    if (!n) return;
    launch_k(CI(be), "softcap", softcap_kernel, dim3(ew_blocks(n)), dim3(256), 0, y, cap, n);
}

struct ids_arg { int ids[MAX_STEP_IDS]; };
// ids from (first non-NULL) dev_ids (device memory: embed_from), the replay's step state, or the launch arguments.
// An affine table's scales and biases (bits 0: the table is dense).
struct aff_arg { const void *scales, *biases; int bits, group; };
static aff_arg aff_of(const bs_mat *t) {
    aff_arg a = { t->scales, t->biases, t->layout == BS_CUDA_AFFINE ? t->bits : 0, t->group };
    return a;
}
__global__ void embed_kernel(float *out, const void *table, int dt, int tiled, int cols, ids_arg ids, const step_state *st,
                             const int32_t *dev_ids, aff_arg aff) {
    pdl_enter();
    int r = blockIdx.x;
    int id = dev_ids ? dev_ids[r] : st ? st->ids[r] : ids.ids[r];
    for (int i = threadIdx.x; i < cols; i += blockDim.x)
        out[(size_t)r * cols + i] = aff.bits ? affine_elem((const uint32_t *)table, aff.scales, aff.biases, dt, aff.bits, aff.group, cols, id, i)
                                  : tiled ? __bfloat162float(((const __nv_bfloat16 *)table)[tt_index(id, i, cols)])
                                          : ld_elem(table, dt, (size_t)id * cols + i);
}
#define EMBED_TABLE_CHECK(c, t) do { if ((t)->layout == BS_CUDA_FP8) \
    CU_DECLINE(c, "embed: a %lldx%lld table stored in 8 bits (lossy weights are for matmuls only)", (long long)(t)->rows, (long long)(t)->cols); } while (0)
void cu_embed(bs_backend *be, float *out, const bs_mat *t, const int32_t *ids, int n) {
    cuda_impl *c = CI(be);
    EMBED_TABLE_CHECK(c, t);
    if (c->capturing && n > MAX_STEP_IDS) CU_DECLINE(c, "embed: recording %d rows (at most %d)", n, MAX_STEP_IDS);
    for (int r = 0; r < n; r += MAX_STEP_IDS) {
        int nn = n - r < MAX_STEP_IDS ? n - r : MAX_STEP_IDS;
        ids_arg a;
        for (int i = 0; i < nn; i++) a.ids[i] = ids[r + i];
        launch_k(c, "embed", embed_kernel, dim3(nn), dim3(256), 0, out + (size_t)r * t->cols, t->data, (int)t->dtype, (int)(t->layout == BS_CUDA_TILED),
                 (int)t->cols, a, (const step_state *)(c->capturing ? c->d_state : NULL), (const int32_t *)NULL, aff_of(t));
    }
}
void cu_embed_from(bs_backend *be, float *out, const bs_mat *t, const int32_t *dev_ids, int n) {
    cuda_impl *c = CI(be);
    EMBED_TABLE_CHECK(c, t);
    if (n <= 0) return;
    ids_arg a;
    memset(&a, 0, sizeof a);
    launch_k(c, "embed", embed_kernel, dim3(n), dim3(256), 0, out, t->data, (int)t->dtype, (int)(t->layout == BS_CUDA_TILED),
             (int)t->cols, a, (const step_state *)NULL, dev_ids, aff_of(t));
}

void cu_copy_rows(bs_backend *be, float *dst, size_t ds, const float *src, size_t ss, int n, int width) {
    cuda_impl *c = CI(be);
    if (n <= 0 || width <= 0) return;
    CK(cudaMemcpy2DAsync(dst, ds * 4, src, ss * 4, (size_t)width * 4, n, cudaMemcpyDeviceToDevice, c->st));
}

// scatter_cols: block (x, row) owns output columns [x * SC_SLICE, +SC_SLICE) of its row. cols is sorted, so the
// input columns landing there are one range, found by binary search; the block writes fill over its slice,
// then (after a barrier, so the scatter lands last) those inputs. One launch, every element written once
// or twice, no atomics.
#define SC_SLICE 4096
__device__ static int sc_lower_bound(const int32_t *cols, int n, int v) {
    int lo = 0, hi = n;
    while (lo < hi) { int mid = (lo + hi) >> 1; if (cols[mid] < v) lo = mid + 1; else hi = mid; }
    return lo;
}
__global__ void scatter_cols_kernel(float *out, int out_w, const float *in, int in_w, const int32_t *cols, float fill) {
    pdl_enter();
    int v0 = blockIdx.x * SC_SLICE, v1 = min(out_w, v0 + SC_SLICE);
    float *o = out + (size_t)blockIdx.y * out_w;
    const float *x = in + (size_t)blockIdx.y * in_w;
    __shared__ int range[2];
    if (threadIdx.x == 0) range[0] = sc_lower_bound(cols, in_w, v0);
    if (threadIdx.x == 32) range[1] = sc_lower_bound(cols, in_w, v1);
    for (int v = v0 + threadIdx.x; v < v1; v += blockDim.x) o[v] = fill;
    __syncthreads();
    for (int c = range[0] + threadIdx.x; c < range[1]; c += blockDim.x) o[cols[c]] = x[c];
}
void cu_scatter_cols(bs_backend *be, float *out, int out_w, const float *in, int in_w, int n, const int32_t *cols, float fill) {
    if (n <= 0 || out_w <= 0) return;
    launch_k(CI(be), "scatter_cols", scatter_cols_kernel, dim3((out_w + SC_SLICE - 1) / SC_SLICE, n), dim3(256), 0, out, out_w,
             in, in_w, cols, fill);
}

// K and V rows i < n into the cache's rows pos0 + i, through its page table.
__global__ void store_kv_kernel(kv_dev kv, posarg pos0, const float *k, const float *v, int n, int width) {
    pdl_enter();
    const int p0 = pv(pos0);
    size_t total = (size_t)n * width;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const int r = (int)(i / width);
        const size_t at = kv_dev_row(kv, p0 + r) * width + (i - (size_t)r * width);
        kv.k[at] = k[i]; kv.v[at] = v[i];
    }
}
void cu_store_kv(bs_backend *be, const bs_kv_view *kv, int pos0, const float *k, const float *v, int n, int width) {
    cuda_impl *c = CI(be);
    if (n <= 0) return;
    launch_k(c, "store_kv", store_kv_kernel, dim3(ew_blocks((size_t)n * width)), dim3(256), 0, kv_dev_of(kv), P(c, pos0), k, v, n, width);
}

// Argmax of each row: AM_PARTS blocks per row scan slices with 4 independent loads in flight per
// thread (a single block per row was latency-bound: ~50 us for Qwen3's 151,936 logits); the last
// block of a row to finish merges the parts. The winner is the largest value, the first index on ties,
// and a NaN only when everything is NaN, whatever the partition.
#define AM_PARTS 32
__device__ __forceinline__ bool am_better(float ov, int oi, float best, int bi, int vocab) {
    return oi < vocab && (bi == vocab || ov > best || (ov == best && oi < bi) || (best != best && ov == ov));
}
__global__ void __launch_bounds__(256) argmax_kernel(int32_t *out, const float *logits, int vocab, float *pv, int *pi, unsigned *ctr,
                                                     const int32_t *map) {
    pdl_enter();
    const int row = blockIdx.y, part = blockIdx.x;
    const float *l = logits + (size_t)row * vocab;
    const int len = (vocab + AM_PARTS - 1) / AM_PARTS, lo = part * len, hi = min(vocab, lo + len);
    float best = -INFINITY; int bi = vocab;   // vocab = "none yet"
    for (int i0 = lo + threadIdx.x; i0 < hi; i0 += 4 * blockDim.x) {
        float v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) { int i = i0 + u * blockDim.x; v[u] = i < hi ? l[i] : 0.f; }
#pragma unroll
        for (int u = 0; u < 4; u++) { int i = i0 + u * blockDim.x; if (i < hi && am_better(v[u], i, best, bi, vocab)) { best = v[u]; bi = i; } }
    }
    for (int off = 16; off; off >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, off); int oi = __shfl_xor_sync(0xffffffffu, bi, off);
        if (am_better(ov, oi, best, bi, vocab)) { best = ov; bi = oi; }
    }
    __shared__ float sv[8]; __shared__ int si[8]; __shared__ int s_last;
    if ((threadIdx.x & 31) == 0) { sv[threadIdx.x >> 5] = best; si[threadIdx.x >> 5] = bi; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++) if (am_better(sv[w], si[w], best, bi, vocab)) { best = sv[w]; bi = si[w]; }
        pv[row * AM_PARTS + part] = best; pi[row * AM_PARTS + part] = bi;
        __threadfence();
        s_last = atomicAdd(&ctr[row], 1u) == AM_PARTS - 1;
    }
    __syncthreads();
    if (!s_last || threadIdx.x >= 32) return;
    __threadfence();
    best = __ldcg(&pv[row * AM_PARTS + threadIdx.x]); bi = __ldcg(&pi[row * AM_PARTS + threadIdx.x]);
    for (int off = 16; off; off >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, off); int oi = __shfl_xor_sync(0xffffffffu, bi, off);
        if (am_better(ov, oi, best, bi, vocab)) { best = ov; bi = oi; }
    }
    if (threadIdx.x == 0) { bi = bi < vocab ? bi : 0; out[row] = map ? map[bi] : bi; ctr[row] = 0; }
}
// 64 rows per launch: the per-part scratch and the row counters hold 64 rows.
void cu_argmax_to(bs_backend *be, int32_t *out_dev, const float *logits, int n, int vocab, const int32_t *map) {
    cuda_impl *c = CI(be);
    for (int r = 0; r < n; r += 64) {
        int nn = n - r < 64 ? n - r : 64;
        launch_k(c, "argmax", argmax_kernel, dim3(AM_PARTS, nn), dim3(256), 0, out_dev + r, logits + (size_t)r * vocab, vocab,
                 c->am_v, c->am_i, c->am_ctr, map);
    }
}
void cu_argmax(bs_backend *be, int32_t *out_host, const float *logits, int n, int vocab) {
    cuda_impl *c = CI(be);
    for (int r = 0; r < n; r += 64) {
        int nn = n - r < 64 ? n - r : 64;
        cu_argmax_to(be, c->d_argmax, logits + (size_t)r * vocab, nn, vocab, (const int32_t *)NULL);
        CK(cudaMemcpyAsync(c->h_argmax, c->d_argmax, sizeof(int32_t) * nn, cudaMemcpyDeviceToHost, c->st));
        CK(cudaStreamSynchronize(c->st));
        memcpy(out_host + r, c->h_argmax, sizeof(int32_t) * nn);
        ids_sane(c, out_host + r, nn);
    }
}
