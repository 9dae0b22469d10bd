#include "backend/cuda/cuda_internal.cuh"

// ---------------------------------------------------------------------------------------------
// Elementwise, embedding, copies, argmax

__global__ void swiglu_kernel(float *h, const float *g, const float *u, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float x = g[i];
        h[i] = x / (1.0f + expf(-x)) * u[i];
    }
}
__global__ void add_kernel(float *y, const float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) y[i] += x[i];
}
static int ew_blocks(size_t n) { size_t b = (n + 255) / 256; return b > 4096 ? 4096 : (int)(b ? b : 1); }
void cu_swiglu(bs_backend *be, float *h, const float *g, const float *u, size_t n) {
    if (!n) return;
    swiglu_kernel<<<ew_blocks(n), 256, 0, CI(be)->st>>>(h, g, u, n); LAUNCHED("swiglu");
}
void cu_add(bs_backend *be, float *y, const float *x, size_t n) {
    if (!n) return;
    add_kernel<<<ew_blocks(n), 256, 0, CI(be)->st>>>(y, x, n); LAUNCHED("add");
}

struct ids_arg { int ids[MAX_STEP_IDS]; };
__global__ void embed_kernel(float *out, const void *table, int dt, int cols, ids_arg ids, const step_state *st) {
    int r = blockIdx.x;
    int id = st ? st->ids[r] : ids.ids[r];
    for (int i = threadIdx.x; i < cols; i += blockDim.x) out[(size_t)r * cols + i] = ld_elem(table, dt, (size_t)id * cols + i);
}
void cu_embed(bs_backend *be, float *out, const bs_mat *t, const int32_t *ids, int n) {
    cuda_impl *c = CI(be);
    if (c->capturing && n > MAX_STEP_IDS) { fprintf(stderr, "blockspec: recording an embed of %d > %d rows\n", n, MAX_STEP_IDS); exit(1); }
    for (int r = 0; r < n; r += MAX_STEP_IDS) {
        int nn = n - r < MAX_STEP_IDS ? n - r : MAX_STEP_IDS;
        ids_arg a;
        for (int i = 0; i < nn; i++) a.ids[i] = ids[r + i];
        embed_kernel<<<nn, 256, 0, c->st>>>(out + (size_t)r * t->cols, t->data, t->dtype, (int)t->cols, a, c->capturing ? c->d_state : NULL);
        LAUNCHED("embed");
    }
}

void cu_copy_rows(bs_backend *be, float *dst, size_t ds, const float *src, size_t ss, int n, int width) {
    if (n <= 0 || width <= 0) return;
    CK(cudaMemcpy2DAsync(dst, ds * 4, src, ss * 4, (size_t)width * 4, n, cudaMemcpyDeviceToDevice, CI(be)->st));
}

__global__ void store_rows_kernel(float *dst, posarg row0, const float *src, int n, int width) {
    size_t total = (size_t)n * width, base = (size_t)pv(row0) * width;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) dst[base + i] = src[i];
}
void cu_store_rows(bs_backend *be, float *dst, int row0, const float *src, int n, int width) {
    cuda_impl *c = CI(be);
    if (n <= 0) return;
    store_rows_kernel<<<ew_blocks((size_t)n * width), 256, 0, c->st>>>(dst, P(c, row0), src, n, width);
    LAUNCHED("store_rows");
}

__global__ void argmax_kernel(int32_t *out, const float *logits, int vocab) {
    const float *l = logits + (size_t)blockIdx.x * vocab;
    float best = -INFINITY; int bi = vocab;   // vocab = "none yet"
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) { float v = l[i]; if (v > best || bi == vocab) { best = v; bi = i; } }
    // (a NaN never wins, as in the CPU's `>` scan, unless everything is NaN)
    for (int off = 16; off; off >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, off); int oi = __shfl_xor_sync(0xffffffffu, bi, off);
        if (oi < vocab && (bi == vocab || ov > best || (ov == best && oi < bi) || (best != best && ov == ov))) { best = ov; bi = oi; }
    }
    __shared__ float sv[32]; __shared__ int si[32];
    if ((threadIdx.x & 31) == 0) { sv[threadIdx.x >> 5] = best; si[threadIdx.x >> 5] = bi; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++) {
            float ov = sv[w]; int oi = si[w];
            if (oi < vocab && (bi == vocab || ov > best || (ov == best && oi < bi) || (best != best && ov == ov))) { best = ov; bi = oi; }
        }
        out[blockIdx.x] = bi < vocab ? bi : 0;
    }
}
void cu_argmax(bs_backend *be, int32_t *out_host, const float *logits, int n, int vocab) {
    cuda_impl *c = CI(be);
    for (int r = 0; r < n; r += 64) {
        int nn = n - r < 64 ? n - r : 64;
        argmax_kernel<<<nn, 1024, 0, c->st>>>(c->d_argmax, logits + (size_t)r * vocab, vocab);
        LAUNCHED("argmax");
        CK(cudaMemcpyAsync(c->h_argmax, c->d_argmax, sizeof(int32_t) * nn, cudaMemcpyDeviceToHost, c->st));
        CK(cudaStreamSynchronize(c->st));
        memcpy(out_host + r, c->h_argmax, sizeof(int32_t) * nn);
    }
}

