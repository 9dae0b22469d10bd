// Causal attention's non-GEMM parts. The products (S = scale Q K^T, O = P V and their backward) are cuBLAS
// batched GEMMs over (sequence, head) with pointer arrays (train_target.cu): a pointer per matrix lets the
// GEMMs read q/k/v in their token-major layout ([rows][heads * hd]) and map a query head to its K/V head
// (GQA) without permuting or repeating K/V. What is left is the row softmax and its backward, one warp per
// score row (T <= a few thousand floats: the row stays in L1 between the passes).
#pragma once
#include "tc_common.cuh"

// Pointer array entry for batch item (b, head h): base + b * sb + (h / hdiv) * sh.
struct tc_pspec { float *base; long long sb, sh; int hdiv; };
// out[0..n) = A pointers, out[n..2n) = B, out[2n..3n) = C, for items i = b * nj + j with head h = j * hmul + hadd.
__global__ void tc_build_ptrs(float **out, tc_pspec a, tc_pspec b, tc_pspec c, int nb, int nj, int hmul, int hadd) {
    int i = blockIdx.x * blockDim.x + threadIdx.x, n = nb * nj;
    if (i >= n) return;
    int bb = i / nj, h = (i % nj) * hmul + hadd;
    out[i] = a.base + bb * a.sb + (h / a.hdiv) * a.sh;
    out[n + i] = b.base + bb * b.sb + (h / b.hdiv) * b.sh;
    out[2 * n + i] = c.base + bb * c.sb + (h / c.hdiv) * c.sh;
}

// In place: row r (query position i = r % T) of the T x T score blocks becomes softmax over keys 0..i;
// keys after i get exactly 0 (so the full-block P V product adds nothing from the future).
__global__ void tc_softmax_causal(float *p, int T, long long nrows) {
    long long r = (long long)blockIdx.x * TC_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= nrows) return;
    int n = (int)(r % T) + 1;
    float *x = p + r * T;
    float m = -INFINITY;
    for (int j = lane; j < n; j += 32) m = fmaxf(m, x[j]);
    m = tc_warp_max(m);
    float s = 0.f;
    for (int j = lane; j < n; j += 32) { float e = expf(x[j] - m); x[j] = e; s += e; }
    float inv = 1.f / tc_warp_sum(s);
    for (int j = lane; j < T; j += 32) x[j] = j < n ? x[j] * inv : 0.f;
}

// In place on dP: dS = P * (dP - sum_j P_j dP_j) (the softmax's backward). Future keys: P = 0, so dS = 0.
__global__ void tc_softmax_bwd(float *dp, const float *p, int T, long long nrows) {
    long long r = (long long)blockIdx.x * TC_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= nrows) return;
    int n = (int)(r % T) + 1;
    float *g = dp + r * T;
    const float *pr = p + r * T;
    float dot = 0.f;
    for (int j = lane; j < n; j += 32) dot += pr[j] * g[j];
    dot = tc_warp_sum(dot);
    for (int j = lane; j < T; j += 32) g[j] = j < n ? pr[j] * (g[j] - dot) : 0.f;
}
