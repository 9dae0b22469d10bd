#include "backend/cuda/cuda_internal.cuh"

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
struct mm_job { float *y; const __nv_bfloat16 *W; int M, acc, kper, S, tiles, blk0; float *ws; unsigned *counters; };
struct mm_jobs { mm_job j[MM_MAX_JOBS]; int count; };

template <int NT, bool SPLIT>
__global__ void __launch_bounds__(MM_WARPS * 32, NT <= 2 ? 4 : 1) mm_bf16_kernel(const float *__restrict__ x, int n, int K, mm_jobs jobs) {
    pdl_enter();
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
    // chain hi, lo, hi, lo (no longer launched: the same speed, docs/cuda.md). Either way the order never
    // depends on n (batch invariance).
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
    return W->layout == 0 && W->dtype == BS_BF16 && W->cols % 8 == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)W->data & 15) == 0;
}

static void mm_generic(cuda_impl *c, float *y, const float *x, int n, const bs_mat *W, int acc) {
    int M = (int)W->rows, K = (int)W->cols;
    for (int r = 0; r < n; r += 65535) {
        dim3 grid(M, n - r < 65535 ? n - r : 65535);
        mm_generic_kernel<<<grid, 128, 0, c->st>>>(y + (size_t)r * M, x + (size_t)r * K, grid.y, W->data, W->dtype, M, K, acc);
        LAUNCHED("matmul (generic)");
    }
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
        if (c->capturing) CU_DECLINE(c, "matmul: %d split-K counters needed while recording a graph (%d held)", ctr, c->n_counters);
        CK(cudaStreamSynchronize(c->st)); CK(cudaFree(c->counters));
        c->n_counters = ctr; CK(cudaMalloc(&c->counters, sizeof(unsigned) * ctr)); CK(cudaMemsetAsync(c->counters, 0, sizeof(unsigned) * ctr, c->st));
    }
    for (int r = 0; r < n; r += 64) {
        int nn = n - r < 64 ? n - r : 64;
        size_t wsz = 0;
        for (int i = 0; i < count; i++) if (jobs.j[i].S > 1) wsz += (size_t)jobs.j[i].S * nn * jobs.j[i].tiles * 32;
        if (wsz && ensure_ws(c, &c->ws, &c->ws_bytes, wsz * sizeof(float))) return;
        mm_jobs jr = jobs;
        size_t off = 0;
        for (int i = 0; i < count; i++) {
            mm_job *J = &jr.j[i];
            J->y = y[i] + (size_t)r * J->M;
            if (J->S > 1) { J->ws = c->ws + off; off += (size_t)J->S * nn * J->tiles * 32; J->counters = c->counters + (uintptr_t)jobs.j[i].counters; }
        }
        const float *xx = x + (size_t)r * K;
        // Two accumulator chains (SPLIT); the one-chain form (BS_CUDA_MM=chain) measured the same speed and is gone.
        if (nn <= 8) mm_bf16_kernel<1, true><<<blocks, MM_WARPS * 32, 0, c->st>>>(xx, nn, K, jr);
        else if (nn <= 16) mm_bf16_kernel<2, true><<<blocks, MM_WARPS * 32, 0, c->st>>>(xx, nn, K, jr);
        else if (nn <= 32) mm_bf16_kernel<4, true><<<blocks, MM_WARPS * 32, 0, c->st>>>(xx, nn, K, jr);
        else mm_bf16_kernel<8, true><<<blocks, MM_WARPS * 32, 0, c->st>>>(xx, nn, K, jr);
        LAUNCHED("matmul");
    }
}

void cu_matmul(bs_backend *be, float *y, const float *x, int n, const bs_mat *W, int acc) {
    cuda_impl *c = CI(be);
    if (n <= 0 || W->rows <= 0) return;
    if (W->layout == BS_CUDA_AFFINE) { mm_affine(c, y, x, n, W, acc); return; }
    if (W->layout == BS_CUDA_TILED || W->layout == BS_CUDA_FP8) {
        if ((uintptr_t)x & 15) {   // the tiled kernel copies x with 16-byte cp.async: realign it first
            if (ensure_ws(c, &c->xal, &c->xal_bytes, sizeof(float) * (size_t)n * W->cols)) return;
            CK(cudaMemcpyAsync(c->xal, x, sizeof(float) * (size_t)n * W->cols, cudaMemcpyDeviceToDevice, c->st));
            x = c->xal;
        }
        mm_tiled_launch(c, 1, &y, &W, &acc, x, n); return;
    }
    if (!mm_fast(x, W)) { mm_generic(c, y, x, n, W, acc); return; }
    mm_launch(c, 1, &y, &W, &acc, x, n);
}

void cu_matmul_multi(bs_backend *be, int count, float *const *y, const float *x, int n, const bs_mat *const *W, int accumulate) {
    cuda_impl *c = CI(be);
    if (n <= 0) return;
    // More weights than one launch takes (a drafter's context growth: the K and V weights of every layer,
    // 10 for z-lab's 5): launches of MM_MAX_JOBS. One by one, each a launch + fixup, 10 took 104 us for
    // 42 MB (8-bit, 16 rows; H200, session 8); in launches of 4, the context growth fell 0.161 -> 0.102 ms.
    // (A 16-job launch was tried: with its larger parameter block and job lookup in the weight-loading
    // loop every GEMM ran slower, decode 197.0 vs 208.4 tok/s, same call.)
    if (count > MM_MAX_JOBS) {
        for (int i = 0; i < count; i += MM_MAX_JOBS)
            cu_matmul_multi(be, count - i < MM_MAX_JOBS ? count - i : MM_MAX_JOBS, y + i, x, n, W + i, accumulate);
        return;
    }
    int ok = 1, tiled = ((uintptr_t)x & 15) == 0, acc[MM_MAX_JOBS];
    for (int i = 0; i < count; i++) {
        acc[i] = accumulate;
        ok = ok && mm_fast(x, W[i]) && W[i]->cols == W[0]->cols && W[i]->rows > 0;
        tiled = tiled && (W[i]->layout == BS_CUDA_TILED || W[i]->layout == BS_CUDA_FP8) && W[i]->layout == W[0]->layout &&
                W[i]->cols == W[0]->cols && W[i]->rows > 0;
    }
    if (tiled) { mm_tiled_launch(c, count, y, W, acc, x, n); return; }
    if (ok) { mm_launch(c, count, y, W, acc, x, n); return; }
    for (int i = 0; i < count; i++) cu_matmul(be, y[i], x, n, W[i], accumulate);
}


// The down projection with SwiGLU fused into the tiled GEMM's input staging: tiled weights, 1 row by
// default. Every staged element gets the activation (exact expf and a division) in every block that
// stages it, which only pays where it saves a launch on a short GEMM chain: at 1 row 35.7 vs 38.8 us
// per layer (session 4); at 16 rows 61.4 vs 45.5 us, and (session 10, H200, same call) an 8-row
// forward took 5.363 ms fused up to 8 rows, 5.194 up to 4, 5.174 at 1 row only; a 4-row one 4.920
// fused, 4.824 not. BS_CUDA_SWIGLU_ROWS=k (0-8) fuses up to k rows for A/B runs. Declining is safe for
// batch invariance: both paths compute the same fp32 activation and run the same GEMM, so their
// results are bit-identical (tested).
int cu_swiglu_matmul(bs_backend *be, float *y, const float *g, const float *u, int n, const bs_mat *W, int acc) {
    if (n <= 0) return 0;
    static int max_rows = -1;
    if (max_rows < 0) max_rows = bs_tuning_get()->cuda_swiglu_rows;
    if (n > max_rows || (W->layout != BS_CUDA_TILED && W->layout != BS_CUDA_FP8) || ((uintptr_t)g & 15) || ((uintptr_t)u & 15) || !fuse_enabled()) return -1;
    mm_tiled_launch(CI(be), 1, &y, &W, &acc, g, n, u);
    return 0;
}
