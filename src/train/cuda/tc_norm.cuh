// RMSNorm (the hidden-state norms) and the per-head q/k RMSNorm fused with RoPE, forward and backward.
// One warp per row: rows are 64-256 floats (q/k heads) or H = 512-1024 floats (hidden norms), so a warp
// reads a row in a few coalesced 128-byte transactions and reduces it with shuffles, no shared memory.
// Weight gradients (sum over rows of dy * x * rstd) are column sums done by tc_colsum below, in a fixed
// order (per-chunk partials, then one pass over the chunks), so gradients are deterministic.
#pragma once
#include "tc_common.cuh"

// y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) (saved for the backward). Same order of operations as
// the engine's bs_cpu_rmsnorm_row up to the summation order.
__global__ void tc_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int rows, int C, float eps) {
    int row = blockIdx.x * TC_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float *xr = x + (size_t)row * C;
    float ss = 0.f;
    for (int j = lane; j < C; j += 32) ss += xr[j] * xr[j];
    float r = rsqrtf(tc_warp_sum(ss) / (float)C + eps);
    if (lane == 0) rstd[row] = r;
    float *yr = y + (size_t)row * C;
    for (int j = lane; j < C; j += 32) yr[j] = xr[j] * r * w[j];
}

// dx += rstd * (dy*w - xhat * mean(dy*w*xhat)), xhat = x * rstd: the gradient of y = w * xhat through the
// norm, accumulated into the residual stream's gradient.
__global__ void tc_rmsnorm_bwd(float *dx, const float *dy, const float *x, const float *rstd, const float *w, int rows, int C) {
    int row = blockIdx.x * TC_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float *xr = x + (size_t)row * C, *dyr = dy + (size_t)row * C;
    float r = rstd[row], dot = 0.f;
    for (int j = lane; j < C; j += 32) dot += dyr[j] * w[j] * xr[j] * r;
    dot = tc_warp_sum(dot) / (float)C;
    float *dxr = dx + (size_t)row * C;
    for (int j = lane; j < C; j += 32) dxr[j] += r * (dyr[j] * w[j] - xr[j] * r * dot);
}

// Per-head RMSNorm (q_norm / k_norm over head_dim) then rotate-half RoPE at position row % T (positions
// restart at 0 in every sequence of the padded batch). cs/sn: [T][hd/2] cos and sin of pos * inv_freq,
// computed on the host exactly as the engine does (fp32 inv_freq from the model's table, cosf/sinf of the
// fp32 angle). w == NULL: RoPE alone (a Llama layer has no q/k norm; rstd is not written).
// Lane i handles the pair (i, i + hd/2) that the rotation mixes.
// posv: the position of each row (pos[vec / nh]), or NULL for rows laid out as sequences of T from position 0.
__global__ void tc_qknorm_rope_fwd(float *out, float *rstd, const float *raw, const float *w, long long nvec, int nh, int hd,
                                   const int32_t *posv, int T, const float *cs, const float *sn, float eps) {
    long long vec = (long long)blockIdx.x * TC_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31, half = hd / 2;
    if (vec >= nvec) return;
    int pos = posv ? posv[vec / nh] : (int)((vec / nh) % T);
    const float *x = raw + vec * hd;
    const float *c = cs + (size_t)pos * half, *s = sn + (size_t)pos * half;
    float *o = out + vec * hd;
    if (!w) {
        for (int i = lane; i < half; i += 32) {
            float a = x[i], b = x[i + half];
            o[i] = a * c[i] - b * s[i];
            o[i + half] = b * c[i] + a * s[i];
        }
        return;
    }
    float ss = 0.f;
    for (int j = lane; j < hd; j += 32) ss += x[j] * x[j];
    float r = rsqrtf(tc_warp_sum(ss) / (float)hd + eps);
    if (lane == 0) rstd[vec] = r;
    for (int i = lane; i < half; i += 32) {
        float a = x[i] * r * w[i], b = x[i + half] * r * w[i + half];
        o[i] = a * c[i] - b * s[i];
        o[i + half] = b * c[i] + a * s[i];
    }
}

// Backward of the above. dout: gradient w.r.t. the rotated output; writes dy (w.r.t. the normed, unrotated
// vector: the rotation's transpose) for the gain's gradient, and dx (w.r.t. the raw projection). dx may
// alias dout: each lane reads its pair before it writes it. w == NULL (no norm): dx = the rotation's
// transpose of dout; dy, raw and rstd are not used.
__global__ void tc_qknorm_rope_bwd(float *dx, float *dy, const float *dout, const float *raw, const float *rstd, const float *w,
                                   long long nvec, int nh, int hd, const int32_t *posv, int T, const float *cs, const float *sn) {
    long long vec = (long long)blockIdx.x * TC_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31, half = hd / 2;
    if (vec >= nvec) return;
    int pos = posv ? posv[vec / nh] : (int)((vec / nh) % T);
    const float *g = dout + vec * hd;
    const float *c = cs + (size_t)pos * half, *s = sn + (size_t)pos * half;
    float *dxv = dx + vec * hd;
    if (!w) {
        for (int i = lane; i < half; i += 32) {
            float g1 = g[i], g2 = g[i + half];
            dxv[i] = g1 * c[i] + g2 * s[i];
            dxv[i + half] = g2 * c[i] - g1 * s[i];
        }
        return;
    }
    const float *x = raw + vec * hd;
    float r = rstd[vec], dot = 0.f;
    float *dyv = dy + vec * hd;
    for (int i = lane; i < half; i += 32) {
        float g1 = g[i], g2 = g[i + half];
        float da = g1 * c[i] + g2 * s[i], db = g2 * c[i] - g1 * s[i];
        dyv[i] = da; dyv[i + half] = db;
        dot += da * w[i] * x[i] * r + db * w[i + half] * x[i + half] * r;
    }
    __syncwarp();                         // dy written by other lanes (hd/2 not a multiple of 32) is read below,
                                          // and dout may be overwritten only after every lane has read it
    dot = tc_warp_sum(dot) / (float)hd;
    for (int i = lane; i < hd; i += 32) dxv[i] = r * (dyv[i] * w[i] - x[i] * r * dot);
}

// Column sums out[j] += sum_i dy[i][j] * x[i][j] * rstd[i] (a norm gain's gradient), in TC_CS_CHUNKS row
// chunks (partials [chunk][C]), then tc_colsum_finish adds the chunks in order.
#define TC_CS_CHUNKS 128
__global__ void tc_colsum_partial(float *part, const float *dy, const float *x, const float *rstd, long long rows, int C) {
    int j = blockIdx.x * 32 + threadIdx.x;
    long long per = (rows + TC_CS_CHUNKS - 1) / TC_CS_CHUNKS, r0 = blockIdx.y * per, r1 = r0 + per < rows ? r0 + per : rows;
    float acc = 0.f;
    if (j < C)
        for (long long i = r0 + threadIdx.y; i < r1; i += 8) acc += dy[i * C + j] * x[i * C + j] * rstd[i];
    __shared__ float sh[8][33];
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < C) {
        float t = 0.f;
        for (int k = 0; k < 8; k++) t += sh[k][threadIdx.x];
        part[(size_t)blockIdx.y * C + j] = t;
    }
}
__global__ void tc_colsum_finish(float *out, const float *part, int C) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= C) return;
    float t = 0.f;
    for (int k = 0; k < TC_CS_CHUNKS; k++) t += part[(size_t)k * C + j];
    out[j] += t;
}
