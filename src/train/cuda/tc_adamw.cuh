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

// One AdamW step over the flat buffers W, G, M, Vm: the tensors with weight decay first ([0, decay_end)), the
// rest up to n. Queues on st the global norm, the clip coefficient and the update, the norm's copy to
// *grad_norm_host and the zeroing of the first zero_n gradients; the caller synchronises st. step >= 1.
static cudaError_t tc_adamw_launch(cudaStream_t st, float *W, float *G, float *M, float *Vm, long long decay_end, long long n,
                                   long long zero_n, double *norm_part, double *norm_out, float *coef, float lr, float beta1,
                                   float beta2, float eps, float wd, float clip, int64_t step, double *grad_norm_host) {
    tc_sumsq_partial<<<TC_NORM_BLOCKS, 256, 0, st>>>(norm_part, G, n);
    tc_norm_finish<<<1, 32, 0, st>>>(norm_out, coef, norm_part, TC_NORM_BLOCKS, clip);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    float bc1 = (float)(1.0 - pow((double)beta1, (double)step)), bc2s = (float)sqrt(1.0 - pow((double)beta2, (double)step));
    long long lo[2] = { 0, decay_end }, hi[2] = { decay_end, n };
    for (int k = 0; k < 2; k++) {
        long long m = hi[k] - lo[k];
        if (m <= 0) continue;
        tc_adamw<<<tc_blocks(m, 256), 256, 0, st>>>(W + lo[k], G + lo[k], M + lo[k], Vm + lo[k], m, lr, beta1, beta2, eps,
                                                   k == 0 ? wd : 0.f, bc1, bc2s, coef);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    if ((e = cudaMemcpyAsync(grad_norm_host, norm_out, sizeof(double), cudaMemcpyDeviceToHost, st)) != cudaSuccess) return e;
    return cudaMemsetAsync(G, 0, sizeof(float) * zero_n, st);
}
