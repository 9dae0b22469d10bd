// The CUDA backend: every op of src/backend/backend.h as CUDA C kernels on one stream.
//
// Design notes (see docs/cuda.md):
// - Weights stay in their stored dtype on the device (uploaded once). BF16 weights go through the
//   tensor-core small-row GEMM below; F32/F16 weights use a plain (slow, exact) kernel.
// - Activations are fp32. The GEMM splits each fp32 activation into bf16 hi + bf16 lo and runs two
//   bf16 MMAs (fp32 accumulate), so the product with a bf16 weight keeps ~16 mantissa bits of the
//   activation: results agree with the fp32 CPU reference to ~1e-5 relative.
// - Batch invariance: the summation order of every output element depends only on the shapes of the
//   weight and on the query's own key range, never on how many rows are in the call. A row computed in
//   a 16-row verify forward is bit-identical to the same row computed alone, so greedy speculative
//   decoding reproduces plain greedy decoding exactly on the GPU too.
// - Position arguments can be read from device memory ("step state") so that a recorded CUDA graph
//   of a forward replays at any position (record_begin / record_end / replay).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <math.h>

extern "C" {
#include "backend/backend.h"
}

#define MAX_STEP_IDS 64
#define ATT_SPLITS 32        // fixed number of key splits (batch invariance: never depends on n_keys)
#define ATT_CHUNK 32         // keys per chunk; split s handles chunks s, s + ATT_SPLITS, ...
#define ATT_QV 32            // query vectors per pass held in shared memory
#define ATT_MAX_HD 256

struct step_state { int pos; int ids[MAX_STEP_IDS]; };

// A position argument: value = rel + (*base when base != NULL).
struct posarg { int rel; const int *base; };
__device__ __forceinline__ int pv(posarg p) { return p.rel + (p.base ? *p.base : 0); }

struct cuda_impl {
    int dev, sms;
    cudaStream_t st;
    step_state *d_state;
    int capturing, cap_base;
    float *ws; size_t ws_bytes;          // matmul split-K partials
    unsigned *counters; int n_counters;  // matmul split-K arrival counters (kept at zero between uses)
    float *att_ws; size_t att_ws_bytes;  // attention partials
    int32_t *d_argmax, *h_argmax;
    void **weights; int n_weights, cap_weights;
    char name[320];
};

static cuda_impl *CI(bs_backend *be) { return (cuda_impl *)be->impl; }

static void fatal(const char *what, cudaError_t e) {
    fprintf(stderr, "blockspec: CUDA error in %s: %s (%s)\n", what, cudaGetErrorString(e), cudaGetErrorName(e));
    exit(1);
}
#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) fatal(#call, e_); } while (0)
#define LAUNCHED(what) do { cudaError_t e_ = cudaGetLastError(); if (e_ != cudaSuccess) fatal(what, e_); } while (0)

static posarg P(cuda_impl *c, int v) {
    posarg p;
    if (c->capturing) { p.rel = v - c->cap_base; p.base = &c->d_state->pos; }
    else { p.rel = v; p.base = NULL; }
    return p;
}

__device__ __forceinline__ float ld_elem(const void *d, int dt, size_t i) {
    if (dt == BS_F32) return ((const float *)d)[i];
    if (dt == BS_BF16) return __bfloat162float(((const __nv_bfloat16 *)d)[i]);
    return __half2float(((const __half *)d)[i]);
}

// ---------------------------------------------------------------------------------------------
// Memory

static void *cu_alloc(bs_backend *be, size_t bytes, bs_err *err) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 16);
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t fr = 0, tot = 0; cudaMemGetInfo(&fr, &tot);
        bs_fail(err, "out of GPU memory allocating %.1f MiB on %s (%.1f of %.1f GiB free): %s", bytes / 1048576.0,
                CI(be)->name, fr / 1073741824.0, tot / 1073741824.0, cudaGetErrorString(e));
        return NULL;
    }
    CK(cudaMemsetAsync(p, 0, bytes, CI(be)->st));
    return p;
}
static void cu_free(bs_backend *be, void *p) { if (p) { CK(cudaStreamSynchronize(CI(be)->st)); CK(cudaFree(p)); } }
static void cu_upload(bs_backend *be, void *dst, const void *src, size_t n) {
    if (!n) return;
    CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, CI(be)->st));
    CK(cudaStreamSynchronize(CI(be)->st));
}
static void cu_download(bs_backend *be, void *dst, const void *src, size_t n) {
    if (!n) return;
    CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, CI(be)->st));
    CK(cudaStreamSynchronize(CI(be)->st));
}
static void cu_copy(bs_backend *be, void *dst, const void *src, size_t n) {
    if (n) CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, CI(be)->st));
}
static void cu_sync(bs_backend *be) { CK(cudaStreamSynchronize(CI(be)->st)); }

static int cu_weight(bs_backend *be, bs_mat *dst, const bs_mat *host, bs_err *err) {
    cuda_impl *c = CI(be);
    size_t bytes = (size_t)host->rows * host->cols * bs_dtype_size(host->dtype);
    void *d = NULL;
    cudaError_t e = cudaMalloc(&d, bytes ? bytes : 16);
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t fr = 0, tot = 0; cudaMemGetInfo(&fr, &tot);
        return bs_fail(err, "out of GPU memory uploading a %lldx%lld %s weight (%.1f MiB; %.1f of %.1f GiB free on %s)",
                       (long long)host->rows, (long long)host->cols, bs_dtype_name(host->dtype), bytes / 1048576.0,
                       fr / 1073741824.0, tot / 1073741824.0, c->name);
    }
    // Staged through pinned memory in pieces: pageable (mmapped) sources copy much slower.
    static const size_t PIECE = 64 << 20;
    static void *pin[2]; static cudaEvent_t ev[2];
    if (!pin[0]) {
        for (int i = 0; i < 2; i++) { CK(cudaMallocHost(&pin[i], PIECE)); CK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming)); }
    }
    for (size_t off = 0, k = 0; off < bytes; off += PIECE, k++) {
        size_t n = bytes - off < PIECE ? bytes - off : PIECE;
        int b = k & 1;
        CK(cudaEventSynchronize(ev[b]));
        memcpy(pin[b], (const char *)host->data + off, n);
        CK(cudaMemcpyAsync((char *)d + off, pin[b], n, cudaMemcpyHostToDevice, c->st));
        CK(cudaEventRecord(ev[b], c->st));
    }
    CK(cudaStreamSynchronize(c->st));
    if (c->n_weights == c->cap_weights) {
        c->cap_weights = c->cap_weights ? 2 * c->cap_weights : 256;
        c->weights = (void **)realloc(c->weights, sizeof(void *) * c->cap_weights);
    }
    c->weights[c->n_weights++] = d;
    *dst = *host;
    dst->data = d;
    return 0;
}

// Grows a workspace outside of recording (recording cannot allocate).
static void ensure_ws(cuda_impl *c, float **p, size_t *have, size_t need) {
    if (need <= *have) return;
    if (c->capturing) { fprintf(stderr, "blockspec: CUDA workspace too small while recording a graph (%zu < %zu bytes)\n", *have, need); exit(1); }
    CK(cudaStreamSynchronize(c->st));
    if (*p) CK(cudaFree(*p));
    size_t n = need + need / 2;
    CK(cudaMalloc((void **)p, n));
    *have = n;
}

// ---------------------------------------------------------------------------------------------
// Small-row GEMM: y[n][M] (+)= x[n][K] . W[M][K]^T with bf16 W, fp32 x (split to bf16 hi + lo).
// Block: 4 warps over one 32-row tile of W; the warps take interleaved 32-wide K chunks of the
// block's K range; grid.y splits K over blocks (deterministic last-block reduction).
// mma.m16n8k16: A = 16 W rows x 16 k, B = 16 k x 8 x-rows. Any permutation of k applied to both
// A and B gives the same dot product, so each thread loads 8 consecutive k (16 bytes of W) and
// uses them as its fragment slots of two MMAs.

#define MM_WARPS 4
#define MM_UNROLL 4

__device__ __forceinline__ void mma_bf16(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *(uint32_t *)&h;
}
__device__ __forceinline__ void split_pair(float a, float b, uint32_t &hi, uint32_t &lo) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    float2 hf = __bfloat1622float2(h);
    hi = *(uint32_t *)&h;
    lo = pack_bf16(a - hf.x, b - hf.y);
}

__device__ __forceinline__ uint4 ldg_stream(const void *p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

// Up to MM_MAX_JOBS weights sharing one input x run in one launch (q/k/v, gate/up): the flat grid
// is the concatenation of each job's (tile, split) blocks.
#define MM_MAX_JOBS 4
struct mm_job { float *y; const __nv_bfloat16 *W; int M, acc, kper, S, tiles, blk0; float *ws; unsigned *counters; };
struct mm_jobs { mm_job j[MM_MAX_JOBS]; int count; };

template <int NT, bool SPLIT>
__global__ void __launch_bounds__(MM_WARPS * 32, NT <= 2 ? 4 : 1) mm_bf16_kernel(const float *__restrict__ x, int n, int K, mm_jobs jobs) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int ji = 0;
#pragma unroll
    for (int q = 1; q < MM_MAX_JOBS; q++) if (q < jobs.count && (int)blockIdx.x >= jobs.j[q].blk0) ji = q;
    const mm_job &J = jobs.j[ji];
    float *__restrict__ y = J.y; const __nv_bfloat16 *__restrict__ W = J.W;
    const int M = J.M, acc = J.acc, kper = J.kper, S = J.S, tiles = J.tiles;
    float *__restrict__ ws = J.ws; unsigned *__restrict__ counters = J.counters;
    const int local = blockIdx.x - J.blk0, tile = local % tiles, s = local / tiles;
    const int row0 = tile * 32;
    const int kbeg = s * kper, kend = min(K, kbeg + kper);
    float d[2][NT][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < NT; j++) d[i][j][0] = d[i][j][1] = d[i][j][2] = d[i][j][3] = 0.f;
    // rows this thread loads: r[0..3] = row0 + {g, g+8, g+16, g+24}
    const __nv_bfloat16 *wr[4];
    bool rok[4];
#pragma unroll
    for (int i = 0; i < 4; i++) { int r = row0 + g + 8 * i; rok[i] = r < M; wr[i] = W + (size_t)(rok[i] ? r : 0) * K; }
    const float *xr[NT];
    bool xok[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) { int c = j * 8 + g; xok[j] = c < n; xr[j] = x + (size_t)(xok[j] ? c : 0) * K; }

    // (A register double-buffered variant of this loop was measured slower on the H200: 187 registers
    // halved the resident warps; see docs/cuda.md.) SPLIT: products with the bf16-hi and bf16-lo parts
    // of x go to separate accumulators (two independent MMA chains), summed at the end; otherwise one
    // chain hi, lo, hi, lo. Either way the order never depends on n (batch invariance).
    float dl[2][NT][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < NT; j++) dl[i][j][0] = dl[i][j][1] = dl[i][j][2] = dl[i][j][3] = 0.f;
    for (int k0 = kbeg + warp * 32; k0 < kend; k0 += MM_WARPS * 32 * MM_UNROLL) {
        uint4 w[MM_UNROLL][4];
#pragma unroll
        for (int u = 0; u < MM_UNROLL; u++) {
            int k = k0 + u * MM_WARPS * 32 + t * 8;
#pragma unroll
            for (int i = 0; i < 4; i++) w[u][i] = (k < kend && rok[i]) ? ldg_stream(wr[i] + k) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < MM_UNROLL; u++) {
            int kc = k0 + u * MM_WARPS * 32, k = kc + t * 8;
            if (kc >= kend) continue;   // warp-uniform: mma.sync needs every lane
            bool lok = k < kend;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                uint32_t hi[4], lo[4];
                if (xok[j] && lok) {
                    float4 a = *(const float4 *)(xr[j] + k), b = *(const float4 *)(xr[j] + k + 4);
                    split_pair(a.x, a.y, hi[0], lo[0]); split_pair(a.z, a.w, hi[1], lo[1]);
                    split_pair(b.x, b.y, hi[2], lo[2]); split_pair(b.z, b.w, hi[3], lo[3]);
                } else {
                    hi[0] = hi[1] = hi[2] = hi[3] = lo[0] = lo[1] = lo[2] = lo[3] = 0;
                }
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    // m-tile i: rows g (w[u][2i]) and g+8 (w[u][2i+1]) of the 16-row tile
                    uint32_t a0[4] = { w[u][2 * i].x, w[u][2 * i + 1].x, w[u][2 * i].y, w[u][2 * i + 1].y };
                    uint32_t a1[4] = { w[u][2 * i].z, w[u][2 * i + 1].z, w[u][2 * i].w, w[u][2 * i + 1].w };
                    mma_bf16(d[i][j], a0, hi[0], hi[1]);
                    mma_bf16(SPLIT ? dl[i][j] : d[i][j], a0, lo[0], lo[1]);
                    mma_bf16(d[i][j], a1, hi[2], hi[3]);
                    mma_bf16(SPLIT ? dl[i][j] : d[i][j], a1, lo[2], lo[3]);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) if (SPLIT) d[i][j][q] += dl[i][j][q];
    // Note on rows: the thread's rows are {g, g+8} in m-tile 0 = block rows g, g+8 ... but we loaded
    // w[u][0..3] as rows g, g+8, g+16, g+24: m-tile 0 = rows (g, g+8) and m-tile 1 = (g+16, g+24).
    // Accumulator d[i][j]: c0,c1 -> row 16i+g, cols 2t,2t+1; c2,c3 -> row 16i+g+8.
    __shared__ float red[MM_WARPS][NT * 8][33];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < NT; j++) {
            red[warp][j * 8 + 2 * t][16 * i + g] = d[i][j][0];
            red[warp][j * 8 + 2 * t + 1][16 * i + g] = d[i][j][1];
            red[warp][j * 8 + 2 * t][16 * i + g + 8] = d[i][j][2];
            red[warp][j * 8 + 2 * t + 1][16 * i + g + 8] = d[i][j][3];
        }
    __syncthreads();
    const int r = threadIdx.x & 31;
    if (S == 1) {
        for (int col = threadIdx.x >> 5; col < n; col += MM_WARPS) {
            float v = 0.f;
#pragma unroll
            for (int w2 = 0; w2 < MM_WARPS; w2++) v += red[w2][col][r];
            if (row0 + r < M) { float *o = y + (size_t)col * M + row0 + r; *o = acc ? *o + v : v; }
        }
        return;
    }
    for (int col = threadIdx.x >> 5; col < n; col += MM_WARPS) {
        float v = 0.f;
#pragma unroll
        for (int w2 = 0; w2 < MM_WARPS; w2++) v += red[w2][col][r];
        ws[((size_t)s * n + col) * (tiles * 32) + row0 + r] = v;
    }
    __threadfence();
    __syncthreads();
    __shared__ unsigned last;
    if (threadIdx.x == 0) last = atomicAdd(&counters[tile], 1u) == (unsigned)S - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int col = threadIdx.x >> 5; col < n; col += MM_WARPS) {
        float v = 0.f;
        for (int s2 = 0; s2 < S; s2++) v += __ldcg(&ws[((size_t)s2 * n + col) * (tiles * 32) + row0 + r]);
        if (row0 + r < M) { float *o = y + (size_t)col * M + row0 + r; *o = acc ? *o + v : v; }
    }
    if (threadIdx.x == 0) counters[tile] = 0;
}

// Any dtype, any alignment: one block per (output row, x row); exact fp32 FMA.
__global__ void mm_generic_kernel(float *y, const float *x, int n, const void *W, int dt, int M, int K, int acc) {
    int o = blockIdx.x, r = blockIdx.y;
    float s = 0.f;
    for (int k = threadIdx.x; k < K; k += blockDim.x) s += x[(size_t)r * K + k] * ld_elem(W, dt, (size_t)o * K + k);
    for (int off = 16; off; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    __shared__ float part[32];
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float v = 0.f;
        for (int i = 0; i < (int)(blockDim.x >> 5); i++) v += part[i];
        float *dst = y + (size_t)r * M + o;
        *dst = acc ? *dst + v : v;
    }
}

static bool mm_fast(const float *x, const bs_mat *W) {
    return W->dtype == BS_BF16 && W->cols % 8 == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)W->data & 15) == 0;
}

static void mm_generic(cuda_impl *c, float *y, const float *x, int n, const bs_mat *W, int acc) {
    int M = (int)W->rows, K = (int)W->cols;
    for (int r = 0; r < n; r += 65535) {
        dim3 grid(M, n - r < 65535 ? n - r : 65535);
        mm_generic_kernel<<<grid, 128, 0, c->st>>>(y + (size_t)r * M, x + (size_t)r * K, grid.y, W->data, W->dtype, M, K, acc);
        LAUNCHED("matmul (generic)");
    }
}

// GEMM variant: BS_CUDA_MM=split (two accumulator chains) or BS_CUDA_MM=chain (one); see docs/cuda.md.
static int mm_variant(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("BS_CUDA_MM"); v = e && !strcmp(e, "chain") ? 0 : 1; }
    return v;
}

// y[i] (+)= x . W[i]^T for `count` bf16 weights of the same K, in one launch per 64 rows.
static void mm_launch(cuda_impl *c, int count, float *const *y, const bs_mat *const *W, const int *acc, const float *x, int n) {
    int K = (int)W[0]->cols;
    mm_jobs jobs; memset(&jobs, 0, sizeof jobs);
    jobs.count = count;
    int blocks = 0, ctr = 0;
    for (int i = 0; i < count; i++) {
        mm_job *J = &jobs.j[i];
        int M = (int)W[i]->rows;
        // The K split depends on the weight's shape only (batch invariance).
        int tiles = (M + 31) / 32, kchunks = (K + 31) / 32;
        int S = (c->sms * 4) / tiles, smax = kchunks / (MM_WARPS * 4);
        if (S > smax) S = smax;
        if (S > 16) S = 16;
        if (S < 1) S = 1;
        int kper = ((kchunks + S - 1) / S) * 32;
        S = (K + kper - 1) / kper;
        J->W = (const __nv_bfloat16 *)W[i]->data; J->M = M; J->acc = acc[i]; J->kper = kper; J->S = S; J->tiles = tiles;
        J->blk0 = blocks; blocks += tiles * S;
        J->counters = NULL;
        if (S > 1) { J->counters = (unsigned *)(uintptr_t)ctr; ctr += tiles; }   // offsets, fixed below
    }
    if (ctr > c->n_counters) {
        if (c->capturing) { fprintf(stderr, "blockspec: too many GEMM tiles while recording\n"); exit(1); }
        CK(cudaStreamSynchronize(c->st)); CK(cudaFree(c->counters));
        c->n_counters = ctr; CK(cudaMalloc(&c->counters, sizeof(unsigned) * ctr)); CK(cudaMemsetAsync(c->counters, 0, sizeof(unsigned) * ctr, c->st));
    }
    for (int r = 0; r < n; r += 64) {
        int nn = n - r < 64 ? n - r : 64;
        size_t wsz = 0;
        for (int i = 0; i < count; i++) if (jobs.j[i].S > 1) wsz += (size_t)jobs.j[i].S * nn * jobs.j[i].tiles * 32;
        if (wsz) ensure_ws(c, &c->ws, &c->ws_bytes, wsz * sizeof(float));
        mm_jobs jr = jobs;
        size_t off = 0;
        for (int i = 0; i < count; i++) {
            mm_job *J = &jr.j[i];
            J->y = y[i] + (size_t)r * J->M;
            if (J->S > 1) { J->ws = c->ws + off; off += (size_t)J->S * nn * J->tiles * 32; J->counters = c->counters + (uintptr_t)jobs.j[i].counters; }
        }
        const float *xx = x + (size_t)r * K;
        if (mm_variant()) {
            if (nn <= 8) mm_bf16_kernel<1, true><<<blocks, MM_WARPS * 32, 0, c->st>>>(xx, nn, K, jr);
            else if (nn <= 16) mm_bf16_kernel<2, true><<<blocks, MM_WARPS * 32, 0, c->st>>>(xx, nn, K, jr);
            else if (nn <= 32) mm_bf16_kernel<4, true><<<blocks, MM_WARPS * 32, 0, c->st>>>(xx, nn, K, jr);
            else mm_bf16_kernel<8, true><<<blocks, MM_WARPS * 32, 0, c->st>>>(xx, nn, K, jr);
        } else {
            if (nn <= 8) mm_bf16_kernel<1, false><<<blocks, MM_WARPS * 32, 0, c->st>>>(xx, nn, K, jr);
            else if (nn <= 16) mm_bf16_kernel<2, false><<<blocks, MM_WARPS * 32, 0, c->st>>>(xx, nn, K, jr);
            else if (nn <= 32) mm_bf16_kernel<4, false><<<blocks, MM_WARPS * 32, 0, c->st>>>(xx, nn, K, jr);
            else mm_bf16_kernel<8, false><<<blocks, MM_WARPS * 32, 0, c->st>>>(xx, nn, K, jr);
        }
        LAUNCHED("matmul");
    }
}

static void cu_matmul(bs_backend *be, float *y, const float *x, int n, const bs_mat *W, int acc) {
    cuda_impl *c = CI(be);
    if (n <= 0 || W->rows <= 0) return;
    if (!mm_fast(x, W)) { mm_generic(c, y, x, n, W, acc); return; }
    mm_launch(c, 1, &y, &W, &acc, x, n);
}

static void cu_matmul_multi(bs_backend *be, int count, float *const *y, const float *x, int n, const bs_mat *const *W, int accumulate) {
    cuda_impl *c = CI(be);
    if (n <= 0) return;
    int ok = count <= MM_MAX_JOBS, acc[MM_MAX_JOBS];
    for (int i = 0; i < count && ok; i++) { acc[i] = accumulate; ok = mm_fast(x, W[i]) && W[i]->cols == W[0]->cols && W[i]->rows > 0; }
    if (ok) { mm_launch(c, count, y, W, acc, x, n); return; }
    for (int i = 0; i < count; i++) cu_matmul(be, y[i], x, n, W[i], accumulate);
}

// ---------------------------------------------------------------------------------------------
// Row ops

__device__ __forceinline__ float block_sum(float v, float *sh) {
    for (int off = 16; off; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    int w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sh[w] = v;
    __syncthreads();
    float s = 0.f;
    for (int i = 0; i < nw; i++) s += sh[i];
    return s;
}

__global__ void rmsnorm_kernel(float *y, const float *x, int dim, const void *w, int dt, float eps) {
    __shared__ float sh[32];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *yr = y + (size_t)blockIdx.x * dim;
    float ss = 0.f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, sh);
    float inv = 1.0f / sqrtf(ss / dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = xr[i] * inv * (w ? ld_elem(w, dt, i) : 1.0f);
}

// dim % 4 == 0, dim <= 256 * 4 * RN_MAX, 16-byte aligned rows: the row stays in registers (one read of x and w,
// all loads in flight at once), one block reduction.
#define RN_MAX 8
__global__ void __launch_bounds__(256) rmsnorm_vec_kernel(float *y, const float *x, int dim, const void *w, int dt, float eps) {
    __shared__ float sh[32];
    const float4 *xr = (const float4 *)(x + (size_t)blockIdx.x * dim);
    float4 *yr = (float4 *)(y + (size_t)blockIdx.x * dim);
    const int d4 = dim / 4;
    float4 v[RN_MAX], wv[RN_MAX];
    float ss = 0.f;
#pragma unroll
    for (int u = 0; u < RN_MAX; u++) {
        int i = threadIdx.x + 256 * u;
        v[u] = make_float4(0.f, 0.f, 0.f, 0.f); wv[u] = make_float4(1.f, 1.f, 1.f, 1.f);
        if (i < d4) {
            v[u] = xr[i];
            if (w && dt == BS_BF16) {
                uint2 b = ((const uint2 *)w)[i];
                float2 lo = __bfloat1622float2(*(__nv_bfloat162 *)&b.x), hi = __bfloat1622float2(*(__nv_bfloat162 *)&b.y);
                wv[u] = make_float4(lo.x, lo.y, hi.x, hi.y);
            } else if (w) {
                wv[u] = make_float4(ld_elem(w, dt, 4 * i), ld_elem(w, dt, 4 * i + 1), ld_elem(w, dt, 4 * i + 2), ld_elem(w, dt, 4 * i + 3));
            }
        }
    }
#pragma unroll
    for (int u = 0; u < RN_MAX; u++) ss += v[u].x * v[u].x + v[u].y * v[u].y + v[u].z * v[u].z + v[u].w * v[u].w;
    ss = block_sum(ss, sh);
    const float inv = 1.0f / sqrtf(ss / dim + eps);
#pragma unroll
    for (int u = 0; u < RN_MAX; u++) {
        int i = threadIdx.x + 256 * u;
        if (i < d4) yr[i] = make_float4(v[u].x * inv * wv[u].x, v[u].y * inv * wv[u].y, v[u].z * inv * wv[u].z, v[u].w * inv * wv[u].w);
    }
}

static void cu_rmsnorm(bs_backend *be, float *y, const float *x, int n, int dim, const bs_mat *w, float eps) {
    if (n <= 0) return;
    if (dim % 4 == 0 && dim <= 256 * 4 * RN_MAX && ((uintptr_t)x & 15) == 0 && ((uintptr_t)y & 15) == 0 &&
        (!w || w->dtype != BS_BF16 || ((uintptr_t)w->data & 7) == 0)) {
        rmsnorm_vec_kernel<<<n, 256, 0, CI(be)->st>>>(y, x, dim, w ? w->data : NULL, w ? w->dtype : 0, eps);
        LAUNCHED("rmsnorm");
        return;
    }
    rmsnorm_kernel<<<n, dim >= 1024 ? 512 : 128, 0, CI(be)->st>>>(y, x, dim, w ? w->data : NULL, w ? w->dtype : 0, eps);
    LAUNCHED("rmsnorm");
}

// One warp per (row, head): optional per-head RMSNorm, then rotate-half RoPE; the result goes back to v
// and, when v2 != NULL, to v2 too (the fused K path writes the rotated key into the cache as well).
__device__ __forceinline__ void head_norm_rope_warp(float *v, float *v2, int hd, const void *nw, int dt, float eps, int pos,
                                                    float theta, int lane) {
    int half = hd / 2;
    float a[4], b[4];   // hd <= 256
    float ss = 0.f;
#pragma unroll
    for (int u = 0; u < 4; u++) {
        int i = lane + 32 * u;
        a[u] = i < half ? v[i] : 0.f; b[u] = i < half ? v[i + half] : 0.f;
        ss += a[u] * a[u] + b[u] * b[u];
    }
    if (nw) {
        for (int off = 16; off; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
        float inv = 1.0f / sqrtf(ss / hd + eps);
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int i = lane + 32 * u;
            if (i < half) { a[u] = a[u] * inv * ld_elem(nw, dt, i); b[u] = b[u] * inv * ld_elem(nw, dt, i + half); }
        }
    }
#pragma unroll
    for (int u = 0; u < 4; u++) {
        int i = lane + 32 * u;
        if (i < half) {
            // theta < 0: base |theta|, inv_freq rounded to bf16 (bs_rope_inv_freq)
            float inv_freq = 1.0f / powf(fabsf(theta), (float)(2 * i) / (float)hd);
            if (theta < 0) inv_freq = __bfloat162float(__float2bfloat16_rn(inv_freq));
            float ang = (float)pos * inv_freq, cs = cosf(ang), sn = sinf(ang);
            float r0 = a[u] * cs - b[u] * sn, r1 = b[u] * cs + a[u] * sn;
            v[i] = r0; v[i + half] = r1;
            if (v2) { v2[i] = r0; v2[i + half] = r1; }
        }
    }
}

__global__ void head_norm_rope_kernel(float *x, int n, int n_heads, int hd, const void *nw, int dt, float eps,
                                      posarg pos0, float theta) {
    int wid = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (wid >= n * n_heads) return;
    int r = wid / n_heads;
    head_norm_rope_warp(x + (size_t)wid * hd, NULL, hd, nw, dt, eps, pv(pos0) + r, theta, lane);
}

// The attention-input step of a layer in one launch: warps [0, n*nq) norm+rope the q heads in place,
// [n*nq, n*(nq+nkv)) the k heads (in place and into kcache row pos0 + r), the rest copy v rows into vcache.
__global__ void qk_norm_rope_store_kernel(float *q, float *k, const float *v, int n, int nq, int nkv, int hd,
                                          const void *qw, int qdt, const void *kw, int kdt, float eps, posarg pos0,
                                          float theta, float *kc, float *vc) {
    int wid = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    const int nqw = n * nq, nkw = n * nkv;
    const int p0 = pv(pos0);
    if (wid < nqw) {
        head_norm_rope_warp(q + (size_t)wid * hd, NULL, hd, qw, qdt, eps, p0 + wid / nq, theta, lane);
    } else if (wid < nqw + nkw) {
        int w = wid - nqw, r = w / nkv;
        head_norm_rope_warp(k + (size_t)w * hd, kc + (size_t)p0 * nkv * hd + (size_t)w * hd, hd, kw, kdt, eps, p0 + r, theta, lane);
    } else if (wid < nqw + 2 * nkw) {
        int w = wid - nqw - nkw;
        const float *src = v + (size_t)w * hd;
        float *dst = vc + (size_t)p0 * nkv * hd + (size_t)w * hd;
        for (int i = lane; i < hd; i += 32) dst[i] = src[i];
    }
}

static void cu_qk_norm_rope_store(bs_backend *be, float *q, float *k, const float *v, int n, int n_heads, int n_kv, int hd,
                                  const bs_mat *q_norm, const bs_mat *k_norm, float eps, int pos0, float theta,
                                  float *kcache, float *vcache) {
    cuda_impl *c = CI(be);
    if (n <= 0) return;
    if (hd > ATT_MAX_HD || hd % 2) { fprintf(stderr, "blockspec: CUDA head_norm_rope: head_dim %d unsupported (even, <= %d)\n", hd, ATT_MAX_HD); exit(1); }
    int warps = n * (n_heads + 2 * n_kv);
    qk_norm_rope_store_kernel<<<(warps + 7) / 8, 256, 0, c->st>>>(q, k, v, n, n_heads, n_kv, hd, q_norm ? q_norm->data : NULL,
        q_norm ? q_norm->dtype : 0, k_norm ? k_norm->data : NULL, k_norm ? k_norm->dtype : 0, eps, P(c, pos0), theta, kcache, vcache);
    LAUNCHED("qk_norm_rope_store");
}

static void cu_head_norm_rope(bs_backend *be, float *x, int n, int n_heads, int hd, const bs_mat *norm_w, float eps, int pos0, float theta) {
    cuda_impl *c = CI(be);
    if (n <= 0) return;
    if (hd > ATT_MAX_HD || hd % 2) { fprintf(stderr, "blockspec: CUDA head_norm_rope: head_dim %d unsupported (even, <= %d)\n", hd, ATT_MAX_HD); exit(1); }
    int warps = n * n_heads;
    head_norm_rope_kernel<<<(warps + 7) / 8, 256, 0, c->st>>>(x, n, n_heads, hd, norm_w ? norm_w->data : NULL,
                                                             norm_w ? norm_w->dtype : 0, eps, P(c, pos0), theta);
    LAUNCHED("head_norm_rope");
}

// ---------------------------------------------------------------------------------------------
// Attention (flash-decoding): block (kv head, split s) walks key chunks s, s+S, ... for every query
// vector (query row x head of the group), online softmax in fp32; partials are combined in split
// order by a second kernel. Key ranges are per query row, so results do not depend on n_q.

struct att_args {
    const float *q, *k, *v;
    float *part;             // [S][n_q * n_heads][hd + 2]  (m, l, acc[hd])
    int n_q, n_heads, n_kv, hd, causal, window;
    posarg n_keys, q_pos0;
    float scale;
};

__device__ __forceinline__ void key_range(const att_args &a, int i, int nk, int qp0, int &lo, int &hi) {
    hi = a.causal ? qp0 + i + 1 : nk;
    if (hi > nk) hi = nk;
    lo = a.window > 0 && hi - a.window > 0 ? hi - a.window : 0;
}

__global__ void __launch_bounds__(128) attention_kernel(att_args a) {
    extern __shared__ float sm[];
    const int kh = blockIdx.x, s = blockIdx.y, hd = a.hd, hdp = hd + 4;
    const int G = a.n_heads / a.n_kv, nqv = a.n_q * G;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Ks = sm, *Vs = Ks + ATT_CHUNK * hdp, *Qs = Vs + ATT_CHUNK * hdp, *Acc = Qs + ATT_QV * hd;
    float *Mx = Acc + ATT_QV * hd, *Ls = Mx + ATT_QV;
    const int nk = pv(a.n_keys), qp0 = pv(a.q_pos0);
    const int kvd = a.n_kv * hd;
    // the union of key ranges of all rows, to skip chunks nobody needs
    int ulo, uhi, t0, t1;
    key_range(a, 0, nk, qp0, ulo, t0);
    key_range(a, a.n_q - 1, nk, qp0, t1, uhi);
    if (t0 > uhi) uhi = t0;
    if (s * ATT_CHUNK >= uhi) return;   // no key of this split is visible to any row: nothing written, the combine skips it
    for (int qv0 = 0; qv0 < nqv; qv0 += ATT_QV) {
        int nv = min(ATT_QV, nqv - qv0);
        __syncthreads();
        for (int idx = threadIdx.x; idx < nv * hd; idx += blockDim.x) {
            int qv = qv0 + idx / hd, d = idx % hd, i = qv / G, h = kh * G + qv % G;
            Qs[idx] = a.q[((size_t)i * a.n_heads + h) * hd + d];
            Acc[idx] = 0.f;
        }
        for (int idx = threadIdx.x; idx < nv; idx += blockDim.x) { Mx[idx] = -INFINITY; Ls[idx] = 0.f; }
        for (int c0 = s * ATT_CHUNK; c0 < uhi; c0 += ATT_SPLITS * ATT_CHUNK) {
            if (c0 + ATT_CHUNK <= ulo) continue;
            __syncthreads();
            int nkeys = min(ATT_CHUNK, nk - c0);
            for (int idx = threadIdx.x; idx < ATT_CHUNK * (hd / 4); idx += blockDim.x) {
                int j = idx / (hd / 4), d4 = idx % (hd / 4);
                float4 kk = make_float4(0, 0, 0, 0), vv = kk;
                if (j < nkeys) {
                    kk = *(const float4 *)(a.k + (size_t)(c0 + j) * kvd + kh * hd + d4 * 4);
                    vv = *(const float4 *)(a.v + (size_t)(c0 + j) * kvd + kh * hd + d4 * 4);
                }
                *(float4 *)(Ks + j * hdp + d4 * 4) = kk;
                *(float4 *)(Vs + j * hdp + d4 * 4) = vv;
            }
            __syncthreads();
            for (int qv = warp; qv < nv; qv += 4) {
                int i = (qv0 + qv) / G, lo, hi;
                key_range(a, i, nk, qp0, lo, hi);
                int j = c0 + lane;
                if (c0 >= hi || c0 + ATT_CHUNK <= lo) continue;
                float sc = -INFINITY;
                if (j >= lo && j < hi) {
                    const float *qq = Qs + qv * hd, *kr = Ks + lane * hdp;
                    float dot = 0.f;
                    for (int d = 0; d < hd; d += 4) {
                        float4 k4 = *(const float4 *)(kr + d), q4 = *(const float4 *)(qq + d);
                        dot += q4.x * k4.x; dot += q4.y * k4.y; dot += q4.z * k4.z; dot += q4.w * k4.w;
                    }
                    sc = dot * a.scale;
                }
                float mx = sc;
                for (int off = 16; off; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
                float mold = Mx[qv], mnew = fmaxf(mold, mx);
                float p = sc == -INFINITY ? 0.f : expf(sc - mnew);
                float ps = p;
                for (int off = 16; off; off >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, off);
                float alpha = mold == -INFINITY ? 0.f : expf(mold - mnew);
                float *ac = Acc + qv * hd;
                for (int d0 = 0; d0 < hd; d0 += 32) {   // every lane takes part in the shuffles
                    int d = d0 + lane;
                    float o = d < hd ? ac[d] * alpha : 0.f;
                    for (int jj = 0; jj < ATT_CHUNK; jj++) {
                        float pj = __shfl_sync(0xffffffffu, p, jj);
                        if (d < hd) o += pj * Vs[jj * hdp + d];
                    }
                    if (d < hd) ac[d] = o;
                }
                __syncwarp();
                if (lane == 0) { Mx[qv] = mnew; Ls[qv] = Ls[qv] * alpha + ps; }
                __syncwarp();
            }
        }
        __syncthreads();
        for (int idx = threadIdx.x; idx < nv * (hd + 2); idx += blockDim.x) {
            int qv = idx / (hd + 2), e = idx % (hd + 2);
            int gq = qv0 + qv, i = gq / G, h = kh * G + gq % G;
            float val = e == 0 ? Mx[qv] : e == 1 ? Ls[qv] : Acc[qv * hd + e - 2];
            a.part[((size_t)s * a.n_q * a.n_heads + (size_t)i * a.n_heads + h) * (hd + 2) + e] = val;
        }
    }
}

// One warp per (query row, head): combine, in split order, the splits that hold keys below the row's hi.
__global__ void attention_combine_kernel(float *out, const float *part, int nrows, int hd, att_args a) {
    int wid = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (wid >= nrows) return;
    int lo, hi;
    key_range(a, wid / a.n_heads, pv(a.n_keys), pv(a.q_pos0), lo, hi);
    int ns = (hi + ATT_CHUNK - 1) / ATT_CHUNK;
    if (ns > ATT_SPLITS) ns = ATT_SPLITS;
    float M = -INFINITY;
    for (int s = 0; s < ns; s++) M = fmaxf(M, part[((size_t)s * nrows + wid) * (hd + 2)]);
    float L = 0.f, o[ATT_MAX_HD / 32];
#pragma unroll
    for (int u = 0; u < ATT_MAX_HD / 32; u++) o[u] = 0.f;
    for (int s = 0; s < ns; s++) {
        const float *p = part + ((size_t)s * nrows + wid) * (hd + 2);
        float m = p[0];
        if (m == -INFINITY) continue;
        float f = expf(m - M);
        L += p[1] * f;
#pragma unroll
        for (int u = 0; u < ATT_MAX_HD / 32; u++) { int d = lane + 32 * u; if (d < hd) o[u] += p[2 + d] * f; }
    }
    float inv = L > 0.f ? 1.0f / L : 0.f;
#pragma unroll
    for (int u = 0; u < ATT_MAX_HD / 32; u++) { int d = lane + 32 * u; if (d < hd) out[(size_t)wid * hd + d] = o[u] * inv; }
}

// ---------------------------------------------------------------------------------------------
// Attention v2 (default; BS_CUDA_ATT=old selects the kernel above). Same key partition as v1 (32-key
// chunks, split s = chunks s, s + ATT_SPLITS, ...; online softmax per split in chunk order, combine in
// split order), so a query's result still depends only on its own key range. Changes:
// - 8 warps; each warp owns up to AT2_QPW query vectors (query row x head of the GQA group) with their
//   accumulators in registers; all of them share each K/V chunk in shared memory.
// - K/V chunks arrive with cp.async (every 16-byte load of a chunk in flight at once), double-buffered
//   so the next chunk streams in while this one is used; Q too.
// - Query rows are split over gridDim.z (AT2_QV query vectors per block), so a 16-row block of 32 heads
//   runs as (kv heads x 32 splits x row groups) blocks instead of one block walking all of them.
// - The combine reads the splits' (m, l) with one lane per split and their accumulators as float4s.
#define AT2_WARPS 8
#define AT2_QPW 2     // query vectors per warp: 16 per block, so a 16-row GQA-4 block runs as 4 row groups
#define AT2_QV (AT2_WARPS * AT2_QPW)

__device__ __forceinline__ void cp_async16(void *smem, const void *g, int src_bytes) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(g), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

struct att2_args {
    att_args a;
    float *ml;     // [S][n_q * n_heads][2]  (running max, sum)
    float *acc;    // [S][n_q * n_heads][hd]
    int rows_per_z;
};

template <int NV4>   // float4 slots per lane of a head vector: ceil(hd / 128)
__global__ void __launch_bounds__(AT2_WARPS * 32) attention2_kernel(att2_args A) {
    const att_args &a = A.a;
    extern __shared__ __align__(16) float sm[];
    const int kh = blockIdx.x, s = blockIdx.y, hd = a.hd, hdp = hd + 4, hd4 = hd / 4;
    const int G = a.n_heads / a.n_kv;
    const int r0 = blockIdx.z * A.rows_per_z, nr = min(A.rows_per_z, a.n_q - r0);
    if (nr <= 0) return;
    const int nqv = nr * G, R = a.n_q * a.n_heads;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Kb = sm, *Vb = Kb + 2 * ATT_CHUNK * hdp, *Qs = Vb + 2 * ATT_CHUNK * hdp;
    const int nk = pv(a.n_keys), qp0 = pv(a.q_pos0);
    const int kvd = a.n_kv * hd;
    int ulo, uhi, t0, t1;
    key_range(a, r0, nk, qp0, ulo, t0);
    key_range(a, r0 + nr - 1, nk, qp0, t1, uhi);
    if (t0 > uhi) uhi = t0;
    if (s * ATT_CHUNK >= uhi) return;   // no key of this split is visible to these rows: the combine skips it
    const int STEP = ATT_SPLITS * ATT_CHUNK;
    int need = ulo - ATT_CHUNK - s * ATT_CHUNK;
    const int tfirst = need < 0 ? 0 : need / STEP + 1;               // first chunk with keys >= ulo
    const int tend = (uhi - s * ATT_CHUNK + STEP - 1) / STEP;         // chunks below uhi
    for (int qv0 = 0; qv0 < nqv; qv0 += AT2_QV) {
        const int nv = min(AT2_QV, nqv - qv0);
        __syncthreads();
        for (int idx = threadIdx.x; idx < nv * hd4; idx += blockDim.x) {
            int qv = idx / hd4, d4 = idx - qv * hd4, gq = qv0 + qv, i = r0 + gq / G, h = kh * G + gq % G;
            cp_async16(Qs + qv * hd + d4 * 4, a.q + ((size_t)i * a.n_heads + h) * hd + d4 * 4, 16);
        }
        cp_async_commit();
        auto load = [&](int t, int b) {
            int c0 = s * ATT_CHUNK + t * STEP, nkeys = min(ATT_CHUNK, nk - c0);
            for (int idx = threadIdx.x; idx < ATT_CHUNK * hd4; idx += blockDim.x) {
                int j = idx / hd4, d4 = idx - j * hd4;
                bool ok = j < nkeys;
                size_t off = (size_t)(ok ? c0 + j : 0) * kvd + (size_t)kh * hd + d4 * 4;
                cp_async16(Kb + (b * ATT_CHUNK + j) * hdp + d4 * 4, a.k + off, ok ? 16 : 0);
                cp_async16(Vb + (b * ATT_CHUNK + j) * hdp + d4 * 4, a.v + off, ok ? 16 : 0);
            }
            cp_async_commit();
        };
        float acc[AT2_QPW][NV4][4], mx[AT2_QPW], ls[AT2_QPW];
#pragma unroll
        for (int u = 0; u < AT2_QPW; u++) {
            mx[u] = -INFINITY; ls[u] = 0.f;
#pragma unroll
            for (int v = 0; v < NV4; v++) acc[u][v][0] = acc[u][v][1] = acc[u][v][2] = acc[u][v][3] = 0.f;
        }
        if (tfirst < tend) load(tfirst, 0);
        for (int t = tfirst, it = 0; t < tend; t++, it++) {
            const int b = it & 1;
            if (t + 1 < tend) { load(t + 1, b ^ 1); cp_async_wait<1>(); } else cp_async_wait<0>();
            __syncthreads();
            const float *Kc = Kb + b * ATT_CHUNK * hdp, *Vc = Vb + b * ATT_CHUNK * hdp;
            const int c0 = s * ATT_CHUNK + t * STEP;
#pragma unroll
            for (int u = 0; u < AT2_QPW; u++) {
                const int qv = warp + AT2_WARPS * u;
                if (qv >= nv) continue;                 // warp-uniform
                int i = r0 + (qv0 + qv) / G, lo, hi;
                key_range(a, i, nk, qp0, lo, hi);
                if (c0 >= hi || c0 + ATT_CHUNK <= lo) continue;
                const int j = c0 + lane;
                float sc = -INFINITY;
                if (j >= lo && j < hi) {
                    const float *qq = Qs + qv * hd, *kr = Kc + lane * hdp;
                    float d0 = 0.f, d1 = 0.f;
                    for (int d = 0; d < hd; d += 8) {
                        float4 k4 = *(const float4 *)(kr + d), q4 = *(const float4 *)(qq + d);
                        d0 = fmaf(q4.x, k4.x, d0); d0 = fmaf(q4.y, k4.y, d0); d0 = fmaf(q4.z, k4.z, d0); d0 = fmaf(q4.w, k4.w, d0);
                        if (d + 4 < hd) {
                            float4 k5 = *(const float4 *)(kr + d + 4), q5 = *(const float4 *)(qq + d + 4);
                            d1 = fmaf(q5.x, k5.x, d1); d1 = fmaf(q5.y, k5.y, d1); d1 = fmaf(q5.z, k5.z, d1); d1 = fmaf(q5.w, k5.w, d1);
                        }
                    }
                    sc = (d0 + d1) * a.scale;
                }
                float m = sc;
                for (int off = 16; off; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
                const float mold = mx[u], mnew = fmaxf(mold, m);
                const float p = sc == -INFINITY ? 0.f : expf(sc - mnew);
                float ps = p;
                for (int off = 16; off; off >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, off);
                const float alpha = mold == -INFINITY ? 0.f : expf(mold - mnew);
                float o[NV4][4];
#pragma unroll
                for (int v = 0; v < NV4; v++)
#pragma unroll
                    for (int e = 0; e < 4; e++) o[v][e] = acc[u][v][e] * alpha;
#pragma unroll 8
                for (int jj = 0; jj < ATT_CHUNK; jj++) {
                    const float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
                    for (int v = 0; v < NV4; v++) {
                        const int dd = 4 * (lane + 32 * v);
                        if (dd < hd) {
                            float4 vv = *(const float4 *)(Vc + jj * hdp + dd);
                            o[v][0] = fmaf(pj, vv.x, o[v][0]); o[v][1] = fmaf(pj, vv.y, o[v][1]);
                            o[v][2] = fmaf(pj, vv.z, o[v][2]); o[v][3] = fmaf(pj, vv.w, o[v][3]);
                        }
                    }
                }
#pragma unroll
                for (int v = 0; v < NV4; v++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[u][v][e] = o[v][e];
                mx[u] = mnew; ls[u] = ls[u] * alpha + ps;
            }
            __syncthreads();   // buffer b is refilled by the next iteration's prefetch
        }
        cp_async_wait<0>();
        // partials of this split
#pragma unroll
        for (int u = 0; u < AT2_QPW; u++) {
            const int qv = warp + AT2_WARPS * u;
            if (qv >= nv) continue;
            const int gq = qv0 + qv, i = r0 + gq / G, h = kh * G + gq % G;
            const size_t row = (size_t)s * R + (size_t)i * a.n_heads + h;
            if (lane == 0) { A.ml[row * 2] = mx[u]; A.ml[row * 2 + 1] = ls[u]; }
#pragma unroll
            for (int v = 0; v < NV4; v++) {
                const int dd = 4 * (lane + 32 * v);
                if (dd < hd) *(float4 *)(A.acc + row * hd + dd) = make_float4(acc[u][v][0], acc[u][v][1], acc[u][v][2], acc[u][v][3]);
            }
        }
    }
}

// One warp per (query row, head): lane s holds split s's (m, l); accumulators merged in split order.
template <int NV4>
__global__ void attention2_combine_kernel(float *out, att2_args A) {
    const att_args &a = A.a;
    const int R = a.n_q * a.n_heads, hd = a.hd;
    const int wid = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (wid >= R) return;
    int lo, hi;
    key_range(a, wid / a.n_heads, pv(a.n_keys), pv(a.q_pos0), lo, hi);
    int ns = (hi + ATT_CHUNK - 1) / ATT_CHUNK;
    if (ns > ATT_SPLITS) ns = ATT_SPLITS;
    float m = -INFINITY, l = 0.f;
    if (lane < ns) { m = A.ml[((size_t)lane * R + wid) * 2]; l = A.ml[((size_t)lane * R + wid) * 2 + 1]; }
    float M = m;
    for (int off = 16; off; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
    const float f = m == -INFINITY ? 0.f : expf(m - M);
    float L = l * f;
    for (int off = 16; off; off >>= 1) L += __shfl_xor_sync(0xffffffffu, L, off);
    float o[NV4][4];
#pragma unroll
    for (int v = 0; v < NV4; v++) o[v][0] = o[v][1] = o[v][2] = o[v][3] = 0.f;
    // 8 splits' loads in flight at a time (no branch between them); a split with f == 0 (no visible key
    // of this row) holds finite partials, so its term adds exactly zero.
    for (int s0 = 0; s0 < ns; s0 += 8) {
        float4 p[8][NV4];
#pragma unroll
        for (int u = 0; u < 8; u++)
#pragma unroll
            for (int v = 0; v < NV4; v++) {
                const int dd = 4 * (lane + 32 * v);
                p[u][v] = s0 + u < ns && dd < hd ? __ldcg((const float4 *)(A.acc + ((size_t)(s0 + u) * R + wid) * hd + dd))
                                                 : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const float fs = __shfl_sync(0xffffffffu, f, (s0 + u) & 31);
            if (s0 + u < ns)
#pragma unroll
                for (int v = 0; v < NV4; v++) {
                    o[v][0] = fmaf(p[u][v].x, fs, o[v][0]); o[v][1] = fmaf(p[u][v].y, fs, o[v][1]);
                    o[v][2] = fmaf(p[u][v].z, fs, o[v][2]); o[v][3] = fmaf(p[u][v].w, fs, o[v][3]);
                }
        }
    }
    const float inv = L > 0.f ? 1.0f / L : 0.f;
#pragma unroll
    for (int v = 0; v < NV4; v++) {
        const int dd = 4 * (lane + 32 * v);
        if (dd < hd) *(float4 *)(out + (size_t)wid * hd + dd) = make_float4(o[v][0] * inv, o[v][1] * inv, o[v][2] * inv, o[v][3] * inv);
    }
}

static int att_variant(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("BS_CUDA_ATT"); v = e && !strcmp(e, "old") ? 0 : 1; }
    return v;
}

template <int NV4>
static void attention2_launch(cuda_impl *c, float *out, const att_args &a0) {
    static size_t smem_set = 48 * 1024;
    const int hd = a0.hd;
    size_t smem = sizeof(float) * (4 * ATT_CHUNK * (hd + 4) + (size_t)AT2_QV * hd);
    if (smem > smem_set) { CK(cudaFuncSetAttribute(attention2_kernel<NV4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)); smem_set = smem; }
    att2_args A;
    A.a = a0;
    const int G = a0.n_heads / a0.n_kv;
    A.rows_per_z = G >= AT2_QV ? 1 : AT2_QV / G;
    const size_t R = (size_t)a0.n_q * a0.n_heads;
    A.ml = c->att_ws;
    A.acc = c->att_ws + ((ATT_SPLITS * R * 2 + 3) & ~(size_t)3);
    dim3 grid(a0.n_kv, ATT_SPLITS, (a0.n_q + A.rows_per_z - 1) / A.rows_per_z);
    attention2_kernel<NV4><<<grid, AT2_WARPS * 32, smem, c->st>>>(A);
    LAUNCHED("attention");
    attention2_combine_kernel<NV4><<<(unsigned)((R + 3) / 4), 128, 0, c->st>>>(out, A);
    LAUNCHED("attention combine");
}

static void cu_attention(bs_backend *be, float *out, const float *q, const float *k, const float *v, int n_q, int n_heads,
                         int n_kv, int hd, int n_keys, int q_pos0, int causal, int window) {
    cuda_impl *c = CI(be);
    if (n_q <= 0) return;
    if (hd > ATT_MAX_HD || hd % 4 || n_heads % n_kv) {
        fprintf(stderr, "blockspec: CUDA attention: head_dim %d / heads %d/%d unsupported\n", hd, n_heads, n_kv); exit(1);
    }
    size_t smem = sizeof(float) * (2 * ATT_CHUNK * (hd + 4) + 2 * ATT_QV * hd + 2 * ATT_QV);
    static size_t smem_set = 48 * 1024;
    if (smem > smem_set) { CK(cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)); smem_set = smem; }
    const int RB = 64;   // query rows per launch
    ensure_ws(c, &c->att_ws, &c->att_ws_bytes, sizeof(float) * (ATT_SPLITS * (size_t)(n_q < RB ? n_q : RB) * n_heads * (hd + 2) + 4));
    const bool v2 = att_variant() && ((uintptr_t)q & 15) == 0 && ((uintptr_t)k & 15) == 0 && ((uintptr_t)v & 15) == 0 && ((uintptr_t)out & 15) == 0;
    for (int r = 0; r < n_q; r += RB) {
        int nq = n_q - r < RB ? n_q - r : RB;
        att_args a;
        a.q = q + (size_t)r * n_heads * hd; a.k = k; a.v = v; a.part = c->att_ws;
        a.n_q = nq; a.n_heads = n_heads; a.n_kv = n_kv; a.hd = hd; a.causal = causal; a.window = window;
        a.n_keys = P(c, n_keys); a.q_pos0 = P(c, q_pos0 + r); a.scale = 1.0f / sqrtf((float)hd);
        if (v2) {
            if (hd <= 128) attention2_launch<1>(c, out + (size_t)r * n_heads * hd, a);
            else attention2_launch<2>(c, out + (size_t)r * n_heads * hd, a);
            continue;
        }
        attention_kernel<<<dim3(n_kv, ATT_SPLITS), 128, smem, c->st>>>(a);
        LAUNCHED("attention");
        int rows = nq * n_heads;
        attention_combine_kernel<<<(rows + 3) / 4, 128, 0, c->st>>>(out + (size_t)r * n_heads * hd, c->att_ws, rows, hd, a);
        LAUNCHED("attention combine");
    }
}

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
static void cu_swiglu(bs_backend *be, float *h, const float *g, const float *u, size_t n) {
    if (!n) return;
    swiglu_kernel<<<ew_blocks(n), 256, 0, CI(be)->st>>>(h, g, u, n); LAUNCHED("swiglu");
}
static void cu_add(bs_backend *be, float *y, const float *x, size_t n) {
    if (!n) return;
    add_kernel<<<ew_blocks(n), 256, 0, CI(be)->st>>>(y, x, n); LAUNCHED("add");
}

struct ids_arg { int ids[MAX_STEP_IDS]; };
__global__ void embed_kernel(float *out, const void *table, int dt, int cols, ids_arg ids, const step_state *st) {
    int r = blockIdx.x;
    int id = st ? st->ids[r] : ids.ids[r];
    for (int i = threadIdx.x; i < cols; i += blockDim.x) out[(size_t)r * cols + i] = ld_elem(table, dt, (size_t)id * cols + i);
}
static void cu_embed(bs_backend *be, float *out, const bs_mat *t, const int32_t *ids, int n) {
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

static void cu_copy_rows(bs_backend *be, float *dst, size_t ds, const float *src, size_t ss, int n, int width) {
    if (n <= 0 || width <= 0) return;
    CK(cudaMemcpy2DAsync(dst, ds * 4, src, ss * 4, (size_t)width * 4, n, cudaMemcpyDeviceToDevice, CI(be)->st));
}

__global__ void store_rows_kernel(float *dst, posarg row0, const float *src, int n, int width) {
    size_t total = (size_t)n * width, base = (size_t)pv(row0) * width;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) dst[base + i] = src[i];
}
static void cu_store_rows(bs_backend *be, float *dst, int row0, const float *src, int n, int width) {
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
static void cu_argmax(bs_backend *be, int32_t *out_host, const float *logits, int n, int vocab) {
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

// ---------------------------------------------------------------------------------------------
// Recording (CUDA graphs)

struct cu_rec { cudaGraphExec_t exec; };

static int cu_record_begin(bs_backend *be, int pos_base) {
    cuda_impl *c = CI(be);
    if (c->capturing) return -1;
    // Workspaces big enough for any 64-row forward of a large model, so recording never allocates.
    if (cudaStreamBeginCapture(c->st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) { cudaGetLastError(); return -1; }
    c->capturing = 1; c->cap_base = pos_base;
    return 0;
}
static void *cu_record_end(bs_backend *be, bs_err *err) {
    cuda_impl *c = CI(be);
    if (!c->capturing) { bs_fail(err, "record_end without record_begin"); return NULL; }
    c->capturing = 0;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(c->st, &g);
    if (e != cudaSuccess) { cudaGetLastError(); bs_fail(err, "CUDA graph capture failed: %s", cudaGetErrorString(e)); return NULL; }
    cu_rec *r = (cu_rec *)calloc(1, sizeof *r);
    e = cudaGraphInstantiate(&r->exec, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) { cudaGetLastError(); free(r); bs_fail(err, "CUDA graph instantiate failed: %s", cudaGetErrorString(e)); return NULL; }
    return r;
}
__global__ void set_state_kernel(step_state *st, step_state v) { *st = v; }
static void cu_replay(bs_backend *be, void *rec, int pos_base, const int32_t *ids, int n_ids) {
    cuda_impl *c = CI(be);
    step_state v; memset(&v, 0, sizeof v);
    v.pos = pos_base;
    for (int i = 0; i < n_ids && i < MAX_STEP_IDS; i++) v.ids[i] = ids[i];
    set_state_kernel<<<1, 1, 0, c->st>>>(c->d_state, v);
    LAUNCHED("set_state");
    CK(cudaGraphLaunch(((cu_rec *)rec)->exec, c->st));
}
static void cu_record_free(bs_backend *be, void *rec) {
    if (!rec) return;
    CK(cudaStreamSynchronize(CI(be)->st));
    cudaGraphExecDestroy(((cu_rec *)rec)->exec);
    free(rec);
}

// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// BS_CUDA_PROFILE=1: every op is bracketed by CUDA events and its device time summed per (op, rows);
// the table is printed to stderr when the backend is destroyed. Recording (graphs) is off then, so
// the figures are per-op device times of plain launches.

#define PROF_PAIRS 4096
#define PROF_KEYS 64
struct prof_state {
    bs_backend inner;                       // the real ops
    cudaEvent_t ev[PROF_PAIRS][2]; int key[PROF_PAIRS]; int n;
    char names[PROF_KEYS][48]; double ms[PROF_KEYS]; long calls[PROF_KEYS]; int n_keys;
};
static prof_state *g_prof;

static void prof_flush(void) {
    prof_state *p = g_prof;
    if (!p || !p->n) return;
    cudaEventSynchronize(p->ev[p->n - 1][1]);
    for (int i = 0; i < p->n; i++) {
        float ms = 0; cudaEventElapsedTime(&ms, p->ev[i][0], p->ev[i][1]);
        p->ms[p->key[i]] += ms; p->calls[p->key[i]]++;
    }
    p->n = 0;
}
static int prof_begin(bs_backend *be, const char *op, long rows) {
    prof_state *p = g_prof;
    char name[48];
    snprintf(name, sizeof name, "%s n=%ld", op, rows);
    int k = 0;
    while (k < p->n_keys && strcmp(p->names[k], name)) k++;
    if (k == p->n_keys) { if (k == PROF_KEYS) k = PROF_KEYS - 1; else { snprintf(p->names[k], 48, "%s", name); p->n_keys++; } }
    if (p->n == PROF_PAIRS) prof_flush();
    int i = p->n++;
    p->key[i] = k;
    cudaEventRecord(p->ev[i][0], CI(be)->st);
    return i;
}
static void prof_end(bs_backend *be, int i) { cudaEventRecord(g_prof->ev[i][1], CI(be)->st); }
#define PROF(op, rows, call) do { int i_ = prof_begin(be, op, rows); call; prof_end(be, i_); } while (0)
static void pf_matmul(bs_backend *be, float *y, const float *x, int n, const bs_mat *W, int acc) {
    char nm[32]; snprintf(nm, sizeof nm, "matmul %lldx%lld", (long long)W->rows, (long long)W->cols);
    PROF(nm, n, g_prof->inner.matmul(be, y, x, n, W, acc));
}
static void pf_matmul_multi(bs_backend *be, int count, float *const *y, const float *x, int n, const bs_mat *const *W, int accumulate) {
    char nm[32]; snprintf(nm, sizeof nm, "matmul_multi x%d %lld", count, (long long)W[0]->rows);
    PROF(nm, n, g_prof->inner.matmul_multi(be, count, y, x, n, W, accumulate));
}
static void pf_rmsnorm(bs_backend *be, float *y, const float *x, int n, int dim, const bs_mat *w, float eps) { PROF("rmsnorm", n, g_prof->inner.rmsnorm(be, y, x, n, dim, w, eps)); }
static void pf_hnr(bs_backend *be, float *x, int n, int nh, int hd, const bs_mat *w, float eps, int pos0, float theta) {
    PROF("head_norm_rope", n, g_prof->inner.head_norm_rope(be, x, n, nh, hd, w, eps, pos0, theta));
}
static void pf_attention(bs_backend *be, float *out, const float *q, const float *k, const float *v, int n_q, int nh, int nkv, int hd,
                         int n_keys, int q_pos0, int causal, int window) {
    PROF(causal ? "attention causal" : "attention bidir", n_q, g_prof->inner.attention(be, out, q, k, v, n_q, nh, nkv, hd, n_keys, q_pos0, causal, window));
}
static void pf_qkrs(bs_backend *be, float *q, float *k, const float *v, int n, int nh, int nkv, int hd, const bs_mat *qw,
                    const bs_mat *kw, float eps, int pos0, float theta, float *kc, float *vc) {
    PROF("qk_norm_rope_store", n, g_prof->inner.qk_norm_rope_store(be, q, k, v, n, nh, nkv, hd, qw, kw, eps, pos0, theta, kc, vc));
}
static void pf_swiglu(bs_backend *be, float *h, const float *g, const float *u, size_t n) { PROF("swiglu", (long)n, g_prof->inner.swiglu(be, h, g, u, n)); }
static void pf_add(bs_backend *be, float *y, const float *x, size_t n) { PROF("add", (long)n, g_prof->inner.add(be, y, x, n)); }
static void pf_embed(bs_backend *be, float *out, const bs_mat *t, const int32_t *ids, int n) { PROF("embed", n, g_prof->inner.embed(be, out, t, ids, n)); }
static void pf_copy_rows(bs_backend *be, float *dst, size_t ds, const float *src, size_t ss, int n, int width) {
    PROF("copy_rows", n, g_prof->inner.copy_rows(be, dst, ds, src, ss, n, width));
}
static void pf_store_rows(bs_backend *be, float *dst, int row0, const float *src, int n, int width) { PROF("store_rows", n, g_prof->inner.store_rows(be, dst, row0, src, n, width)); }
static void pf_argmax(bs_backend *be, int32_t *out, const float *l, int n, int vocab) { PROF("argmax (+sync)", n, g_prof->inner.argmax(be, out, l, n, vocab)); }

static void prof_install(bs_backend *be) {
    prof_state *p = (prof_state *)calloc(1, sizeof *p);
    for (int i = 0; i < PROF_PAIRS; i++) { cudaEventCreate(&p->ev[i][0]); cudaEventCreate(&p->ev[i][1]); }
    p->inner = *be;
    g_prof = p;
    be->matmul = pf_matmul; be->matmul_multi = pf_matmul_multi; be->rmsnorm = pf_rmsnorm; be->head_norm_rope = pf_hnr;
    be->attention = pf_attention; be->swiglu = pf_swiglu; be->add = pf_add; be->embed = pf_embed; be->copy_rows = pf_copy_rows;
    be->store_rows = pf_store_rows; be->argmax = pf_argmax;
    if (be->qk_norm_rope_store) be->qk_norm_rope_store = pf_qkrs;
    be->record_begin = NULL; be->record_end = NULL; be->replay = NULL; be->record_free = NULL;
}
static void prof_report(void) {
    prof_state *p = g_prof;
    if (!p) return;
    prof_flush();
    fprintf(stderr, "\nBS_CUDA_PROFILE: device time per op (ms total, calls, us per call)\n");
    for (int k = 0; k < p->n_keys; k++)
        fprintf(stderr, "  %-40s %10.3f %8ld %10.2f\n", p->names[k], p->ms[k], p->calls[k], p->calls[k] ? 1e3 * p->ms[k] / p->calls[k] : 0.0);
    g_prof = NULL;
    free(p);
}

static void cu_destroy(bs_backend *be) {
    if (g_prof) prof_report();
    cuda_impl *c = CI(be);
    if (c) {
        cudaStreamSynchronize(c->st);
        for (int i = 0; i < c->n_weights; i++) cudaFree(c->weights[i]);
        free(c->weights);
        cudaFree(c->ws); cudaFree(c->att_ws); cudaFree(c->counters); cudaFree(c->d_state); cudaFree(c->d_argmax);
        cudaFreeHost(c->h_argmax);
        cudaStreamDestroy(c->st);
        free(c);
    }
    free(be);
}

extern "C" bs_backend *bs_backend_cuda(int ordinal, bs_err *err) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        bs_fail(err, "no usable CUDA GPU: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        return NULL;
    }
    if (ordinal < 0 || ordinal >= count) { bs_fail(err, "CUDA device %d does not exist (%d found)", ordinal, count); return NULL; }
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, ordinal)) != cudaSuccess || (e = cudaSetDevice(ordinal)) != cudaSuccess) {
        cudaGetLastError(); bs_fail(err, "CUDA device %d: %s", ordinal, cudaGetErrorString(e)); return NULL;
    }
    if (prop.major < 9) { bs_fail(err, "CUDA device %d (%s) has compute capability %d.%d; this build of blockspec needs 9.0 (Hopper) or newer", ordinal, prop.name, prop.major, prop.minor); return NULL; }
    bs_backend *be = (bs_backend *)calloc(1, sizeof *be);
    cuda_impl *c = (cuda_impl *)calloc(1, sizeof *c);
    c->dev = ordinal; c->sms = prop.multiProcessorCount;
    snprintf(c->name, sizeof c->name, "cuda:%d (%s)", ordinal, prop.name);
    if ((e = cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMalloc(&c->d_state, sizeof(step_state))) != cudaSuccess ||
        (e = cudaMalloc(&c->d_argmax, sizeof(int32_t) * 64)) != cudaSuccess ||
        (e = cudaMallocHost(&c->h_argmax, sizeof(int32_t) * 64)) != cudaSuccess ||
        (e = cudaMalloc(&c->counters, sizeof(unsigned) * 8192)) != cudaSuccess ||
        (e = cudaMemset(c->counters, 0, sizeof(unsigned) * 8192)) != cudaSuccess ||
        (e = cudaMemset(c->d_state, 0, sizeof(step_state))) != cudaSuccess) {
        cudaGetLastError();
        bs_fail(err, "initialising CUDA device %d (%s): %s", ordinal, prop.name, cudaGetErrorString(e));
        free(c); free(be);
        return NULL;
    }
    c->n_counters = 8192;
    cudaDeviceSynchronize();
    // Workspaces sized for 64-row calls of large models, so graph recording never has to grow them.
    c->ws_bytes = 64u << 20; c->att_ws_bytes = 64u << 20;
    if ((e = cudaMalloc(&c->ws, c->ws_bytes)) != cudaSuccess || (e = cudaMalloc(&c->att_ws, c->att_ws_bytes)) != cudaSuccess) {
        cudaGetLastError();
        bs_fail(err, "initialising CUDA device %d: out of memory for workspaces", ordinal);
        free(c); free(be);
        return NULL;
    }
    be->name = "cuda"; be->impl = c;
    be->alloc = cu_alloc; be->free = cu_free; be->upload = cu_upload; be->download = cu_download; be->copy = cu_copy;
    be->sync = cu_sync; be->weight = cu_weight;
    be->matmul = cu_matmul; be->rmsnorm = cu_rmsnorm; be->head_norm_rope = cu_head_norm_rope; be->attention = cu_attention;
    be->swiglu = cu_swiglu; be->add = cu_add; be->embed = cu_embed; be->copy_rows = cu_copy_rows; be->argmax = cu_argmax;
    be->store_rows = cu_store_rows; be->matmul_multi = cu_matmul_multi;
    { const char *f = getenv("BS_CUDA_FUSE"); if (!(f && !strcmp(f, "0"))) be->qk_norm_rope_store = cu_qk_norm_rope_store; }
    be->record_begin = cu_record_begin; be->record_end = cu_record_end; be->replay = cu_replay; be->record_free = cu_record_free;
    be->destroy = cu_destroy;
    if (getenv("BS_CUDA_PROFILE") && !g_prof) prof_install(be);
    return be;
}
