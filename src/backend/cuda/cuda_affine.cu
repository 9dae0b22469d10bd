// MLX affine weights on the GPU (docs/quantization.md): upload, and the matmul for decode-sized blocks.
//
// A weight is one device allocation: the packed codes, then the scales, then the biases, as the host
// holds them (layout BS_CUDA_AFFINE). The matmul gives each output row to one warp: lane l reads words
// l, l + 32, ... of the row (coalesced), dequantises each word's codes with the format's formula
// (fmaf(scale, q, bias) in fp32, as the CPU does) and accumulates w * x in fp32 for up to AF_ROWS
// activation rows at a time; a fixed shuffle tree then sums the lanes. A row's result depends only on its
// own x row and the weight (never on how many rows share the call or which pass it falls in): batch
// invariance, which keeps greedy speculative decoding equal to plain decoding on a quantised target.
// Performance is not tuned yet (no shared-memory staging of x, one warp per row).
#include "backend/cuda/cuda_internal.cuh"

#define AF_ROWS 8     // activation rows per pass (registers per lane)
#define AF_WARPS 8    // output rows per block

int cu_affine_upload(cuda_impl *c, bs_mat *dst, const bs_mat *host, void **d_out, bs_err *err) {
    size_t code_bytes = (size_t)host->rows * (size_t)(host->cols * host->bits / 32) * 4;
    size_t par_bytes = (size_t)host->rows * (size_t)(host->cols / host->group) * (host->dtype == BS_F32 ? 4 : 2);
    char *d = NULL;
    if (cudaMalloc((void **)&d, code_bytes + 2 * par_bytes) != cudaSuccess) {
        cudaGetLastError();
        return bs_fail(err, "out of GPU memory uploading a %lldx%lld affine %d-bit weight (%.1f MiB) on %s", (long long)host->rows,
                       (long long)host->cols, host->bits, (code_bytes + 2 * par_bytes) / 1048576.0, c->name);
    }
    CK(cudaMemcpy(d, host->data, code_bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d + code_bytes, host->scales, par_bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d + code_bytes + par_bytes, host->biases, par_bytes, cudaMemcpyHostToDevice));
    *dst = *host;
    dst->data = d; dst->scales = d + code_bytes; dst->biases = d + code_bytes + par_bytes;
    dst->layout = BS_CUDA_AFFINE;
    *d_out = d;
    return 0;
}

template <int BITS>
__global__ void mm_affine_kernel(float *y, const float *x, int n, const uint32_t *codes, const void *scales, const void *biases, int dt,
                                 int M, int K, int group, int acc) {
    constexpr int P = 32 / BITS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int o = blockIdx.x * AF_WARPS + warp;
    if (o >= M) return;
    const int wpr = K / P, G = K / group;
    const uint32_t *row = codes + (size_t)o * wpr;
    for (int r0 = 0; r0 < n; r0 += AF_ROWS) {
        const int nr = n - r0 < AF_ROWS ? n - r0 : AF_ROWS;
        float a[AF_ROWS];
#pragma unroll
        for (int r = 0; r < AF_ROWS; r++) a[r] = 0.f;
        for (int w = lane; w < wpr; w += 32) {
            const uint32_t v = __ldg(row + w);
            const int k0 = w * P, g = k0 / group;   // a word never straddles a group (group >= 32, a multiple of P)
            const float s = ld_elem(scales, dt, (size_t)o * G + g), b = ld_elem(biases, dt, (size_t)o * G + g);
            float wv[P];
#pragma unroll
            for (int j = 0; j < P; j++) wv[j] = fmaf(s, (float)((v >> (j * BITS)) & ((1u << BITS) - 1u)), b);
#pragma unroll
            for (int r = 0; r < AF_ROWS; r++)
                if (r < nr) {
                    const float *xr = x + (size_t)(r0 + r) * K + k0;
#pragma unroll
                    for (int j = 0; j < P; j++) a[r] = fmaf(wv[j], __ldg(xr + j), a[r]);
                }
        }
#pragma unroll
        for (int r = 0; r < AF_ROWS; r++) {
            float v = a[r];
            for (int off = 16; off; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
            if (lane == 0 && r < nr) {
                float *d = y + (size_t)(r0 + r) * M + o;
                *d = acc ? *d + v : v;
            }
        }
    }
}

void mm_affine(cuda_impl *c, float *y, const float *x, int n, const bs_mat *W, int acc) {
    const int M = (int)W->rows, K = (int)W->cols;
    launch_flags_clear(c);
    dim3 grid((M + AF_WARPS - 1) / AF_WARPS);
    for (int r = 0; r < n; r += 64) {   // 64 rows per launch (the kernel loops over them AF_ROWS at a time)
        const int nn = n - r < 64 ? n - r : 64;
        if (W->bits == 4)
            mm_affine_kernel<4><<<grid, AF_WARPS * 32, 0, c->st>>>(y + (size_t)r * M, x + (size_t)r * K, nn, (const uint32_t *)W->data, W->scales,
                                                                  W->biases, (int)W->dtype, M, K, W->group, acc);
        else
            mm_affine_kernel<8><<<grid, AF_WARPS * 32, 0, c->st>>>(y + (size_t)r * M, x + (size_t)r * K, nn, (const uint32_t *)W->data, W->scales,
                                                                  W->biases, (int)W->dtype, M, K, W->group, acc);
        LAUNCHED("matmul (affine)");
    }
}
