// Shared helpers of the CUDA trainer's kernels (warp and block reductions).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>
#include <math.h>

__device__ __forceinline__ float tc_warp_sum(float v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float tc_warp_max(float v) {
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Block-wide sum / max (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ __forceinline__ float tc_block_sum(float v, float *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = tc_warp_sum(v);
    __syncthreads();                      // sh may still be read by a previous reduction
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.f;
    return tc_warp_sum(v);
}
__device__ __forceinline__ float tc_block_max(float v, float *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = tc_warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return tc_warp_max(v);
}
// Warps per block for the one-warp-per-row kernels.
#define TC_WARPS 8
static inline unsigned tc_blocks(long long n, int per) { return (unsigned)((n + per - 1) / per); }
