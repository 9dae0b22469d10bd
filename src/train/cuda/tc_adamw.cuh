// AdamW with global gradient-norm clipping, torch semantics (torch.optim.AdamW, foreach=False;
// torch.nn.utils.clip_grad_norm_), over the trainer's one contiguous gradient buffer: the norm is a fixed
// grid of per-block partial sums (double) reduced in one block, so it is deterministic, and the clip
// coefficient stays on the device (no host round trip before the update).
#pragma once
#include "tc_common.cuh"

#define TC_NORM_BLOCKS 1024
__global__ void tc_sumsq_partial(double *part, const float *g, long long n) {
    __shared__ double sh[32];
    double acc = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        acc += (double)g[i] * g[i];
    for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) sh[w] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0;
        for (int k = 0; k < (int)(blockDim.x >> 5); k++) t += sh[k];
        part[blockIdx.x] = t;
    }
}
// out[0] = global norm (double), coef[0] = min(1, clip / (norm + 1e-6)) (1 when clip <= 0).
__global__ void tc_norm_finish(double *out, float *coef, const double *part, int n, float clip) {
    if (threadIdx.x || blockIdx.x) return;
    double t = 0;
    for (int k = 0; k < n; k++) t += part[k];
    double norm = sqrt(t);
    out[0] = norm;
    double c = clip > 0 ? (double)clip / (norm + 1e-6) : 1.0;
    coef[0] = (float)(c < 1.0 ? c : 1.0);
}
// p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps).
__global__ void tc_adamw(float *p, const float *g, float *m, float *v, long long n, float lr, float b1, float b2,
                         float eps, float wd, float bc1, float bc2_sqrt, const float *coef) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gi = g[i] * coef[0];
    float mi = b1 * m[i] + (1.f - b1) * gi, vi = b2 * v[i] + (1.f - b2) * gi * gi;
    m[i] = mi; v[i] = vi;
    float pi = p[i] * (1.f - lr * wd);
    p[i] = pi - (lr / bc1) * mi / (sqrtf(vi) / bc2_sqrt + eps);
}
