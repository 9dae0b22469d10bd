#include "backend/cuda/cuda_internal.cuh"
extern "C" {
#include "backend/hadamard.h"
}

// ---------------------------------------------------------------------------------------------
// hadamard_rows (backend.h): MLX's fast Hadamard transform of each row (backend/hadamard.h), one block per
// row with the row in shared memory: the FWHT of every 2^k chunk stage by stage, then the m x m mix of the
// chunks column by column (one thread a column, the m values in registers) straight to y. The operations and
// their order are the CPU's (hadamard.c), so the two agree bit for bit. The row is read whole before any of
// it is written: y may alias x.

struct hm_arg { signed char h[BS_HADAMARD_MAX_M * BS_HADAMARD_MAX_M]; };

__global__ void hadamard_rows_kernel(float *y, const float *x, int dim, int m, int p, float scale, const float *pre, const float *post,
                                     int transpose, hm_arg hm) {
    pdl_enter();
    extern __shared__ float s[];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *yr = y + (size_t)blockIdx.x * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) s[i] = pre ? xr[i] * pre[i] : xr[i];
    __syncthreads();
    const int hp = p / 2;
    for (int h = 1; h < p; h <<= 1) {
        for (int t = threadIdx.x; t < dim / 2; t += blockDim.x) {
            int c = t / hp, i = t - c * hp, k = i & (h - 1), j = c * p + ((i - k) << 1) + k;
            float u = s[j], v = s[j + h];
            s[j] = u + v;
            s[j + h] = u - v;
        }
        __syncthreads();
    }
    if (m == 1) {
        for (int i = threadIdx.x; i < dim; i += blockDim.x) {
            float v = s[i] * scale;
            yr[i] = post ? v * post[i] : v;
        }
        return;
    }
    for (int b = threadIdx.x; b < p; b += blockDim.x) {
        float col[BS_HADAMARD_MAX_M];
        for (int a = 0; a < m; a++) col[a] = s[a * p + b];
        for (int r = 0; r < m; r++) {
            float acc = 0.0f;
            for (int a = 0; a < m; a++) {
                signed char e = transpose ? hm.h[a * m + r] : hm.h[r * m + a];
                acc = e > 0 ? acc + col[a] : acc - col[a];
            }
            float v = acc * scale;
            int i = r * p + b;
            yr[i] = post ? v * post[i] : v;
        }
    }
}

void cu_hadamard_rows(bs_backend *be, float *y, const float *x, int n, int dim, const float *pre, const float *post, int transpose) {
    cuda_impl *c = CI(be);
    if (n <= 0) return;
    bs_hadamard t;
    if (bs_hadamard_init(&t, dim)) CU_DECLINE(c, "hadamard_rows: length %d is not m * 2^k for m in {1, 12, 20, 28}", dim);
    hm_arg hm;
    memcpy(hm.h, t.h, sizeof hm.h);
    size_t smem = (size_t)dim * sizeof(float);
    static size_t smem_set = 48u << 10;
    if (smem > smem_set) {
        cudaError_t e = cudaFuncSetAttribute(hadamard_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) { cudaGetLastError(); CU_DECLINE(c, "hadamard_rows: a row of %d floats does not fit in shared memory (%s)", dim, cudaGetErrorString(e)); }
        smem_set = smem;
    }
    for (int r = 0; r < n; r += 65535) {   // grid.x rows per launch
        int nn = n - r < 65535 ? n - r : 65535;
        launch_k(c, "hadamard_rows", hadamard_rows_kernel, dim3(nn), dim3(256), smem, y + (size_t)r * dim, x + (size_t)r * dim, dim, t.m,
                 (int)t.p, t.scale, pre, post, transpose, hm);
    }
}
