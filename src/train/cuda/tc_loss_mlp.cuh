// Cross-entropy over the vocabulary (one block per row), SwiGLU, and the embedding lookup, each with its
// backward.
#pragma once
#include "tc_common.cuh"

// Row CE = logsumexp(x) - x[label]; rows with label < 0 carry no loss. With grad, the row is overwritten by
// d(w * CE)/dx = w * (softmax(x) - onehot(label)) (zeros for rows without a label: the LM-head GEMMs read
// every row). Two passes: max, then sum of exp; the third (grad) pass recomputes exp.
__global__ void tc_cross_entropy(float *x_dx, float *rowloss, const int32_t *labels, const float *w, int V, int grad) {
    __shared__ float sh[32];
    long long row = blockIdx.x;
    float *x = x_dx + row * V;
    int lab = labels[row];
    if (lab < 0) {
        if (grad) for (int j = threadIdx.x; j < V; j += blockDim.x) x[j] = 0.f;
        if (threadIdx.x == 0) rowloss[row] = 0.f;
        return;
    }
    float m = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, x[j]);
    m = tc_block_max(m, sh);
    float s = 0.f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(x[j] - m);
    s = tc_block_sum(s, sh);
    float lse = m + logf(s);
    float xl = x[lab];
    __syncthreads();                      // every thread has read x[lab] before the grad pass overwrites it
    if (threadIdx.x == 0) rowloss[row] = lse - xl;
    if (!grad) return;
    float wr = w[row];
    for (int j = threadIdx.x; j < V; j += blockDim.x) x[j] = wr * (expf(x[j] - lse) - (j == lab ? 1.f : 0.f));
}

__device__ __forceinline__ float tc_sigmoid(float g) { return 1.f / (1.f + expf(-g)); }

// h = silu(g) * u
__global__ void tc_swiglu_fwd(float *h, const float *g, const float *u, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float gi = g[i]; h[i] = gi * tc_sigmoid(gi) * u[i]; }
}
// dg = dh * u * silu'(g), du = dh * silu(g); du may alias dh.
__global__ void tc_swiglu_bwd(float *dg, float *du, const float *dh, const float *g, const float *u, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gi = g[i], s = tc_sigmoid(gi), d = dh[i];
    dg[i] = d * u[i] * s * (1.f + gi * (1.f - s));
    du[i] = d * gi * s;
}

__global__ void tc_embed_fwd(float *x, const float *E, const int32_t *ids, int H) {
    long long row = blockIdx.x;
    const float *e = E + (size_t)ids[row] * H;
    for (int j = threadIdx.x; j < H; j += blockDim.x) x[row * H + j] = e[j];
}
// dE[id] += dx[row]: rows sharing a token add concurrently, hence the atomics.
__global__ void tc_embed_bwd(float *dE, const float *dx, const int32_t *ids, int H) {
    long long row = blockIdx.x;
    float *e = dE + (size_t)ids[row] * H;
    for (int j = threadIdx.x; j < H; j += blockDim.x) atomicAdd(e + j, dx[row * H + j]);
}
