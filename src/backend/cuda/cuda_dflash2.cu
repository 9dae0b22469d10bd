#include "backend/cuda/cuda_internal.cuh"

// ---------------------------------------------------------------------------------------------
// DFlash 2's two ops (backend.h dyn_conv and topk; docs/dflash2.md). Both are small next to the layer's
// matmuls, so they are written for clarity and batch invariance, not tuned.

// One thread per output element; the taps in order, each tap one fused multiply-add in fp32 as the CPU's loop.
__global__ void dyn_conv_kernel(float *y, const float *x, int n, int dim, int block, int taps, const float *base, const float *dyn,
                                int dyn_stride, int group, int acc) {
    pdl_enter();
    const int groups = dim / group;
    const size_t total = (size_t)n * dim;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const int t = (int)(i / dim), c = (int)(i % dim), reach = t % block;
        const float *d = dyn + (size_t)t * dyn_stride;
        float s = 0.f;
        for (int tau = 0; tau < taps && tau <= reach; tau++)
            s = __fmaf_rn(__fadd_rn(base[(size_t)tau * dim + c], d[tau * groups + c / group]), x[i - (size_t)tau * dim], s);
        y[i] = acc ? __fadd_rn(y[i], s) : s;
    }
}
void cu_dyn_conv(bs_backend *be, float *y, const float *x, int n, int dim, int block, int taps, const float *base, const float *dyn,
                 int dyn_stride, int group, int acc) {
    if (n <= 0 || dim <= 0) return;
    size_t total = (size_t)n * dim, b = (total + 255) / 256;
    launch_k(CI(be), "dyn_conv", dyn_conv_kernel, dim3(b > 4096 ? 4096 : (unsigned)b), dim3(256), 0, y, x, n, dim, block, taps, base, dyn,
             dyn_stride, group, acc);
}

// topk: one block per row finds the k entries one after another; pass j takes the best entry strictly after
// pass j-1's in the (value descending, column ascending) order, so no set of chosen columns is kept and the
// result does not depend on the partition of the row over threads. k passes over the row: ~k x the cost of
// an argmax, small beside the LM head that wrote the row.
#define TOPK_THREADS 1024
__device__ __forceinline__ float tk_key(float v) { return v != v ? -INFINITY : v; }
// (va, ca) before (vb, cb); cb < 0 means "nothing yet" (everything is before it).
__device__ __forceinline__ bool tk_before(float va, int ca, float vb, int cb) {
    return cb < 0 || va > vb || (va == vb && ca < cb);
}
__global__ void __launch_bounds__(TOPK_THREADS) topk_kernel(int32_t *ids, float *vals, const float *logits, int vocab, int k,
                                                             const int32_t *map) {
    pdl_enter();
    const float *l = logits + (size_t)blockIdx.x * vocab;
    __shared__ float sv[TOPK_THREADS / 32];
    __shared__ int sc[TOPK_THREADS / 32];
    __shared__ float prev_v;
    __shared__ int prev_c;
    if (threadIdx.x == 0) { prev_v = INFINITY; prev_c = -1; }
    __syncthreads();
    for (int j = 0; j < k; j++) {
        const float pvv = prev_v;
        const int pc = prev_c;
        float best = 0.f;
        int bc = -1;
        for (int c = threadIdx.x; c < vocab; c += blockDim.x) {
            float v = tk_key(l[c]);
            bool after_prev = pc < 0 || v < pvv || (v == pvv && c > pc);
            if (after_prev && tk_before(v, c, best, bc)) { best = v; bc = c; }
        }
        for (int off = 16; off; off >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, best, off);
            int oc = __shfl_xor_sync(0xffffffffu, bc, off);
            if (oc >= 0 && tk_before(ov, oc, best, bc)) { best = ov; bc = oc; }
        }
        if ((threadIdx.x & 31) == 0) { sv[threadIdx.x >> 5] = best; sc[threadIdx.x >> 5] = bc; }
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < (int)(blockDim.x >> 5); w++)
                if (sc[w] >= 0 && tk_before(sv[w], sc[w], best, bc)) { best = sv[w]; bc = sc[w]; }
            const int col = bc < 0 ? 0 : bc;   // (never: k <= vocab)
            ids[(size_t)blockIdx.x * k + j] = map ? map[col] : col;
            vals[(size_t)blockIdx.x * k + j] = l[col];
            prev_v = best; prev_c = col;
        }
        __syncthreads();
    }
}
void cu_topk(bs_backend *be, int32_t *ids, float *vals, const float *logits, int n, int vocab, int k, const int32_t *map) {
    cuda_impl *c = CI(be);
    if (n <= 0) return;
    if (k < 1 || k > vocab || k > 1024) CU_DECLINE(c, "topk: k = %d for rows of %d (1 <= k <= min(vocab, 1024))", k, vocab);
    launch_k(c, "topk", topk_kernel, dim3(n), dim3(TOPK_THREADS), 0, ids, vals, logits, vocab, k, map);
}
