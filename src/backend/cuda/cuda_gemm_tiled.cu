// The weight-streaming GEMM for tiled BF16 weights: y[n][M] (+)= x[n][K] . W[M][K]^T, n <= 64.
//
// Why tiled: at batch 1 a forward is a stream of weights, so the GEMM must keep HBM busy from the
// first byte to the last. At upload (mm_tiled_upload) a BF16 matrix with K % 64 == 0 is rewritten
// into 16 KiB tiles of 128 rows x 64 k, tile-major ([M/128][K/64][128][64], rows padded with zeros),
// each already in the order the kernel wants it in shared memory. A pipeline stage is then one
// contiguous 16 KiB copy (perfectly coalesced cp.async), and no thread ever does address arithmetic
// on a weight row.
//
// Inside a tile (row rr, k in [0, 64)): the 64 k are 4 groups of 16 (one mma k-step each), a group is
// two 16-byte chunks, and chunks are XOR-swizzled by (rr & 7) so that ldmatrix reads 8 rows of the
// same chunk without bank conflicts. Within a 16-k group the k are permuted: any permutation shared by
// A and B leaves a dot product unchanged, and this one puts the four k a thread needs for its B
// fragment (mma k = 2t, 2t+1, 2t+8, 2t+9) next to each other (physical k = 4t .. 4t+3), so the
// thread reads its slice of x with one float4 load.
//
// Work split ("stream-K"): the (tile, 64-k stage) units of all jobs of a launch are cut into G equal
// contiguous ranges, one per block (G = 2 x SMs, fixed per device; BS_CUDA_MM_BLOCKS=3 measured slower;
// G <= the unit count, so no block is empty). A block runs one cp.async
// pipeline over its whole range, across tile boundaries, so it never drains between tiles. A tile cut
// between blocks is summed from per-block partials, in block order, by the fixup kernel launched right
// after the GEMM (or, with BS_CUDA_MM_FIXUP=0, by the last block to finish it).
// Nothing here depends on n (the number of activation rows): every output element is summed in an
// order fixed by the weight's shape and G, so a row's result is bit-identical whether it is computed
// alone or in a 64-row call (batch invariance; see cuda_gemm.cu).
//
// Numerics as in cuda_gemm.cu: fp32 x is split into bf16 hi + bf16 lo, two MMAs (fp32 accumulate)
// in separate accumulators summed at the end.
//
// Launch: with programmatic dependent launch (BS_CUDA_PDL, cuda_internal.cuh), the first weight stages
// are requested before griddepcontrol.wait; x, y and the workspaces only after it.
#include "backend/cuda/cuda_internal.cuh"

#define TT_STAGES 4                  // pipeline depth (16 KiB of weights each; 5 and 6 measured, docs/history/benchmarks-diary.md session 12)
// Stages of a launch with NT x 8 activation rows. At 33-64 rows (NT = 8) four stages took 144 KB of shared
// memory (64 KB of weights, 80 KB of x), so one block fitted an SM and the grid's 2 x SMs blocks ran in two
// waves: a forward cost twice a 32-row one (H200 8B shape: 8.6 ms at 32 rows, 15.0 at 33, 16.9 at 64). Two
// stages (72 KB) let two blocks share an SM, one wave, as at 32 rows. The stage count changes only when
// weights arrive, never which block sums which k or in what order, so a row's bits stay the same.
__host__ __device__ constexpr int tt_stages(int nt) { return nt >= 8 ? 2 : TT_STAGES; }
#define TT_XSTRIDE 80                // floats per staged x row: 64 + 16 keeps the float4 fragment loads conflict-free
#define TT_THREADS 128

bool mm_tiled_eligible(const bs_mat *host) {
    static int off = -1;
    if (off < 0) off = bs_tuning_get()->cuda_mm_old;
    return !off && host->dtype == BS_BF16 && host->rows >= 2 && host->cols % TT_K == 0 && host->cols <= (1 << 20);
}
size_t mm_tiled_bytes(const bs_mat *host) { return (size_t)((host->rows + TT_M - 1) / TT_M) * TT_M * host->cols * 2; }

// dst (tiled, rows0 / 128 tiles in) <- src rows [rows0, rows0 + nrows) of a row-major [M][K] matrix.
// One thread per 16-byte destination chunk.
__global__ void tt_relayout_kernel(__nv_bfloat16 *dst, const __nv_bfloat16 *src, int64_t rows0, int64_t nrows_pad, int64_t M, int64_t K) {
    const int64_t chunks = nrows_pad * K / 8, kst = K / TT_K;
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < chunks; q += (int64_t)gridDim.x * blockDim.x) {
        int64_t r, k[8];
        tt_chunk_source(q, K, &r, k);   // r counts from rows0
        __align__(16) __nv_bfloat16 v[8];
#pragma unroll
        for (int e = 0; e < 8; e++) v[e] = rows0 + r < M ? src[r * K + k[e]] : __float2bfloat16(0.f);
        *(uint4 *)(dst + (size_t)(rows0 / TT_M) * kst * TT_ELEMS + (size_t)q * 8) = *(uint4 *)v;
    }
}

// Streams a row-major BF16 host matrix into the device staging buffer a whole number of 128-row tiles
// at a time (through the pinned double buffer) and queues convert(r0, nt) after each piece: the kernel
// that turns the staged rows [r0, r0 + 128 nt) into the weight's device layout.
template <typename F>
static int stage_tile_pieces(cuda_impl *c, const bs_mat *host, bs_err *err, F convert) {
    const int64_t M = host->rows, K = host->cols, tile_bytes = (int64_t)TT_M * K * 2;
    const int64_t PIECE = 64 << 20, per = PIECE / tile_bytes > 0 ? PIECE / tile_bytes : 1;
    const size_t piece_bytes = (size_t)(per * tile_bytes);
    if (upload_buffers(c, piece_bytes, piece_bytes, err)) return -1;
    const int64_t tiles = (M + TT_M - 1) / TT_M;
    for (int64_t t0 = 0, k = 0; t0 < tiles; t0 += per, k++) {
        int64_t nt = tiles - t0 < per ? tiles - t0 : per;
        int64_t r0 = t0 * TT_M, nr = M - r0 < nt * TT_M ? M - r0 : nt * TT_M;
        int b = k & 1;
        CK(cudaEventSynchronize(c->pin_ev[b]));
        memcpy(c->pin[b], (const char *)host->data + (size_t)r0 * K * 2, (size_t)nr * K * 2);
        CK(cudaMemcpyAsync(c->stage, c->pin[b], (size_t)nr * K * 2, cudaMemcpyHostToDevice, c->st));
        CK(cudaEventRecord(c->pin_ev[b], c->st));
        convert(r0, nt);
    }
    CK(cudaStreamSynchronize(c->st));
    return 0;
}
static int grid_for(int64_t items) { return (int)((items + 255) / 256 < 65535 ? (items + 255) / 256 : 65535); }

// Uploads a row-major host matrix into d (mm_tiled_bytes of device memory).
int mm_tiled_upload(cuda_impl *c, void *d, const bs_mat *host, bs_err *err) {
    const int64_t M = host->rows, K = host->cols;
    return stage_tile_pieces(c, host, err, [&](int64_t r0, int64_t nt) {
        tt_relayout_kernel<<<grid_for(nt * TT_M * K / 8), 256, 0, c->st>>>((__nv_bfloat16 *)d, (const __nv_bfloat16 *)c->stage, r0, nt * TT_M, M, K);
        LAUNCHED("weight relayout");
    });
}

// ---- 8-bit tiles (tiled_layout.h): quantized at upload from the staged BF16 rows ----------------------

bool mm_fp8_eligible(const bs_mat *host) {
    return host->dtype == BS_BF16 && host->rows >= 2 && host->cols % T8_K == 0 && host->cols <= (1 << 20);
}
size_t mm_fp8_bytes(const bs_mat *host) {
    const size_t rows = (size_t)((host->rows + TT_M - 1) / TT_M) * TT_M;
    return rows * host->cols + rows * sizeof(float);
}

// scale[r0 + i] = max |src row i| / T8_MAX for the nrows staged rows (one warp per row; 0 past M).
__global__ void t8_scale_kernel(float *scale, const __nv_bfloat16 *src, int64_t r0, int64_t nrows_pad, int64_t M, int64_t K) {
    const int64_t i = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (i >= nrows_pad) return;
    float mx = 0.f;
    if (r0 + i < M)
        for (int64_t k = lane; k < K; k += 32) mx = fmaxf(mx, fabsf(__bfloat162float(src[i * K + k])));
    for (int off = 16; off; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    if (lane == 0) scale[r0 + i] = mx / T8_MAX;
}

// dst (8-bit tiles, rows0 / 128 tiles in) <- the staged rows, one thread per 16-byte chunk.
__global__ void t8_encode_kernel(unsigned char *dst, const float *scale, const __nv_bfloat16 *src, int64_t rows0, int64_t nrows_pad,
                                 int64_t M, int64_t K) {
    const int64_t chunks = nrows_pad * K / 16, kst = K / T8_K;
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < chunks; q += (int64_t)gridDim.x * blockDim.x) {
        int64_t r, k0;
        t8_chunk_source(q, K, &r, &k0);   // r counts from rows0
        __align__(16) unsigned char v[16];
        const float sc = rows0 + r < M ? scale[rows0 + r] : 0.f;
#pragma unroll
        for (int e = 0; e < 16; e++) v[e] = sc > 0.f ? t8_encode(__bfloat162float(src[r * K + k0 + e]) / sc) : 0;
        *(uint4 *)(dst + (size_t)(rows0 / TT_M) * kst * 16384 + (size_t)q * 16) = *(uint4 *)v;
    }
}

// Quantizes and uploads a row-major BF16 host matrix into d (mm_fp8_bytes), staged like mm_tiled_upload.
int mm_fp8_upload(cuda_impl *c, void *d, const bs_mat *host, bs_err *err) {
    const int64_t M = host->rows, K = host->cols, tiles = (M + TT_M - 1) / TT_M;
    float *scale = (float *)((unsigned char *)d + (size_t)tiles * TT_M * K);
    return stage_tile_pieces(c, host, err, [&](int64_t r0, int64_t nt) {
        t8_scale_kernel<<<(unsigned)((nt * TT_M + 7) / 8), 256, 0, c->st>>>(scale, (const __nv_bfloat16 *)c->stage, r0, nt * TT_M, M, K);
        LAUNCHED("weight scales (8-bit)");
        t8_encode_kernel<<<grid_for(nt * TT_M * K / 16), 256, 0, c->st>>>((unsigned char *)d, scale, (const __nv_bfloat16 *)c->stage, r0,
                                                                          nt * TT_M, M, K);
        LAUNCHED("weight quantization (8-bit)");
    });
}

// ---------------------------------------------------------------------------------------------

// The attention inputs' step fused into the q/k/v GEMM's fixup (cu_qkv_norm_rope_store): jobs 0, 1, 2 are
// q, k, v; a 128-row tile is one head; every tile is cut, so the fixup sums every (head, activation row).
struct tt_qk { const void *qw, *kw; int qdt, kdt, nkv; float eps; const float *inv_freq; posarg pos0; kv_dev kv; };

struct tt_job { float *y; const __nv_bfloat16 *W; const float *scale; int M, acc, tile0; };   // scale: 8-bit tiles only
struct tt_args {
    tt_job j[MM_MAX_JOBS];
    int count, n, K, kst, G;
    int U;                    // units = tiles x kst (< 2^31: checked at launch)
    const float *x;
    const float *up;          // SwiGLU-fused down projection: the GEMM's input is silu(x) * up
    float *ws;                // [G][2][n][128] partial sums of cut tiles
    unsigned *counters;       // per tile, zero between launches
    unsigned long long *trace;  // BS_CUDA_MM_TRACE: [G][5] timestamps per block (NULL: off)
    int evict_first;            // stream this launch's weights with the L2 evict-first policy
    int fixup;                  // cut tiles are summed by tt_fixup_kernel after the launch
    int spread;                 // the fixup spreads a cut tile's columns over the blocks at its cuts
    int qk_on;                  // the fixup also runs qk_norm_rope_store's step on each summed head (tt_qk)
    tt_qk qk;
    int pre;                    // weight stages requested before the PDL wait (BS_CUDA_MM_PRE, default TT_STAGES - 1)
};

// First unit of block b (64-bit product: U * G can pass 2^31).
__device__ __forceinline__ int tt_lo(int b, const tt_args &A) { return (int)((long long)b * A.U / A.G); }
// The block whose range holds unit u.
__device__ int tt_block_of(int u, const tt_args &A) {
    int b = (int)((long long)u * A.G / A.U);
    while (b + 1 < A.G && tt_lo(b + 1, A) <= u) b++;
    while (b > 0 && tt_lo(b, A) > u) b--;
    return b;
}
__device__ __forceinline__ int tt_job_of(int T, const tt_args &A) {
    int ji = 0;
#pragma unroll
    for (int q = 1; q < MM_MAX_JOBS; q++) if (q < A.count && T >= A.j[q].tile0) ji = q;
    return ji;
}
__device__ __forceinline__ void cp_async16(void *smem, const void *g) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(s), "l"(g));
}
// Weights are read once per forward: evict-first leaves L2 to what is read again (activations,
// partial sums, the KV cache).
__device__ __forceinline__ void cp_async16_ef(void *smem, const void *g, uint64_t pol) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" :: "r"(s), "l"(g), "l"(pol));
}
__device__ __forceinline__ uint64_t policy_evict_first() {
    uint64_t p; asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p)); return p;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N)); }
__device__ __forceinline__ void ldmatrix_x4(uint32_t *r, const void *smem) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void tt_mma(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void tt_split(float a, float b, uint32_t &hi, uint32_t &lo) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    float2 hf = __bfloat1622float2(h);
    __nv_bfloat162 l = __floats2bfloat162_rn(a - hf.x, b - hf.y);
    hi = *(uint32_t *)&h; lo = *(uint32_t *)&l;
}

__device__ __forceinline__ unsigned long long gtimer() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }

// Tile Tu was cut between blocks first..last: y (+)= the sum of their partials, in block order. The
// columns c0, c0 + cstep, ... are summed here (the fixup spreads a tile's columns over the blocks at
// its cuts); warp w of nw takes the w-th, (w + nw)-th, ... of them; lane l rows 4l .. 4l + 3 (float4).
// A column's partials are independent loads, issued NB at a time; the additions stay in block order
// whatever NB is, and whoever sums a column.
// hs (qk_on only): 128 floats of shared memory per warp, where a summed head waits for its norm and RoPE.
template <int NB>
__device__ void tt_sum_cut_tile(const tt_args &A, const tt_job &J, int Tu, int first, int last, int warp, int lane, int nw,
                                int c0 = 0, int cstep = 1, float *hs = NULL) {
    const int n = A.n, M = J.M, rbase = (Tu - J.tile0) * TT_M, t_lo = Tu * A.kst;
    const int fs = tt_lo(first, A) < t_lo ? 1 : 0;
    for (int col = c0 + warp * cstep; col < n; col += nw * cstep) {
        float *yc = J.y + (size_t)col * M + rbase + 4 * lane;
        float y0[4] = { 0.f, 0.f, 0.f, 0.f };   // accumulate: y is read alongside the partials, not after them
        if (J.acc) {
#pragma unroll
            for (int e = 0; e < 4; e++) if (rbase + 4 * lane + e < M) y0[e] = yc[e];
        }
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int b0 = first; b0 <= last; b0 += NB) {
            float4 p[NB];
#pragma unroll
            for (int e = 0; e < NB; e++) {
                int b2 = b0 + e;
                if (b2 <= last) p[e] = __ldcg((const float4 *)(A.ws + (((size_t)b2 * 2 + (b2 == first ? fs : 0)) * n + col) * TT_M) + lane);
            }
#pragma unroll
            for (int e = 0; e < NB; e++)
                if (b0 + e <= last) { v.x += p[e].x; v.y += p[e].y; v.z += p[e].z; v.w += p[e].w; }
        }
        const float vv[4] = { v.x, v.y, v.z, v.w };
        if (hs) {   // qk_norm_rope_store's step for this head and row, with its arithmetic (head_norm_rope_warp)
            const int ji = tt_job_of(Tu, A), h = Tu - J.tile0, p = pv(A.qk.pos0) + col;
            float *hw = hs + warp * TT_M, *head = J.y + (size_t)col * M + rbase;
            if (ji == 2) {
                float *vr = A.qk.kv.v + (kv_dev_row(A.qk.kv, p) * A.qk.nkv + h) * TT_M + 4 * lane;
#pragma unroll
                for (int e = 0; e < 4; e++) { yc[e] = vv[e]; vr[e] = vv[e]; }
                continue;
            }
#pragma unroll
            for (int e = 0; e < 4; e++) hw[4 * lane + e] = vv[e];
            __syncwarp();
            if (ji == 0) {
                head_norm_rope_warp(hw, head, TT_M, A.qk.qw, A.qk.qdt, A.qk.eps, p, A.qk.inv_freq, lane);
            } else {
                head_norm_rope_warp(hw, A.qk.kv.k + (kv_dev_row(A.qk.kv, p) * A.qk.nkv + h) * TT_M, TT_M, A.qk.kw, A.qk.kdt, A.qk.eps, p, A.qk.inv_freq, lane);
                __syncwarp();
#pragma unroll
                for (int e = 0; e < 4; e++) yc[e] = hw[4 * lane + e];
            }
            __syncwarp();   // hw is rewritten for the warp's next column
            continue;
        }
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (rbase + 4 * lane + e < M) yc[e] = J.acc ? y0[e] + vv[e] : vv[e];
    }
}

// With A.fixup the GEMM blocks only write the partials of cut tiles, and this kernel (launched right
// after, PDL) sums them: the GEMM's blocks then end as soon as their stream does, instead of waiting
// for a fence, an arrival counter and, for the last block of a tile, the sum (measured: 1.6 us for
// every block, up to ~8 us for the block that sums, all of it in the launch's tail). Block i looks at
// the boundary between GEMM blocks i and i + 1 and, if it cuts a tile, sums its share of the tile's
// columns. One warp per column up to 16 columns (tt_fixup_threads): each column's loads are
// one round trip, so the sum does not grow with the row count (4 warps for 16 columns took 4). At most
// 64 registers (8 loads in flight per lane), so that two 512-thread blocks fit an SM and all G - 1
// blocks run in one wave (117 registers gave one block per SM: two waves at 16 rows).
// QK: the q/k/v launch of cu_qkv_norm_rope_store. It then waits before it lets its successor start, as
// qk_norm_rope_store does (the attention after it may read earlier forwards' K/V rows before its own wait).
template <bool QK>
__global__ void __launch_bounds__(512, 2) tt_fixup_kernel(tt_args A) {
    __shared__ float hs[QK ? 16 * TT_M : 1];
    if (QK) { pdl_wait(); pdl_trigger(); }
    else { pdl_trigger(); pdl_wait(); }
    const int b = blockIdx.x + 1, lb = tt_lo(b, A), T = lb / A.kst, t_lo = T * A.kst;
    if (lb == t_lo) return;   // GEMM block b starts a tile: no cut here
    // Tile T is cut at the starts of GEMM blocks first + 1 .. last; the block at the k-th of those nb
    // cuts sums the columns k, k + nb, ... (16 columns of a tile cut 8 times: 2 each instead of 16 for
    // one block, which at 16 rows read the whole tile's partials through one SM).
    const int first = tt_block_of(t_lo, A), last = tt_block_of(t_lo + A.kst - 1, A), k = b - first - 1;
    int nb = last - first;
    if (!A.spread) { if (k) return; nb = 1; }   // the first cut's block sums every column
    if (k >= A.n) return;
    tt_sum_cut_tile<8>(A, A.j[tt_job_of(T, A)], T, first, last, threadIdx.x >> 5, threadIdx.x & 31, blockDim.x >> 5, k, nb, QK ? hs : NULL);
}
// BS_CUDA_FIXUP_WARPS=k (1..16) fixes the block at k warps whatever the row count, for A/B runs (4 =
// the earlier fixed block).
static unsigned tt_fixup_threads(int n) {
    static int fixed = -1;
    if (fixed < 0) fixed = bs_tuning_get()->cuda_fixup_warps;
    return 32u * (unsigned)(fixed ? fixed : n < 16 ? n : 16);
}

// 8-bit tile bytes (b0, b1 of r for lo, b2, b3 for hi) -> bf16x2: prmt builds the sign-extended bytes
// [sx b1][b1][sx b0][b0]; shifted left by 4 each half holds s at bit 15, e and m at bits 4..10, and the
// bits the format fixes (0x3800) are forced (tiled_layout.h).
__device__ __forceinline__ uint32_t t8_pair(uint32_t r, uint32_t sel) {
    uint32_t z;
    asm("prmt.b32 %0, %1, 0, %2;" : "=r"(z) : "r"(r), "r"(sel));
    return ((z << 4) & 0x8FF08FF0u) | 0x38003800u;
}

// F8: 8-bit tiles (128 k per stage, x rounded to bf16, one accumulator chain, row scales at the end).
template <int NT, bool SW, bool F8>
__global__ void __launch_bounds__(TT_THREADS) tt_kernel(tt_args A) {
    constexpr int KS = F8 ? T8_K : TT_K;              // k per stage
    constexpr int XS = F8 ? T8_K + 16 : TT_XSTRIDE;   // floats per staged x row (= 16 mod 32: conflict-free float4 reads)
    constexpr int KSH = F8 ? 7 : 6;                   // log2(KS)
    constexpr int STG = tt_stages(NT);
    pdl_trigger();
    // Trace (diagnosis only): entry, after the dependency wait, first stage in, end, ns in cut-tile sums.
    unsigned long long *tr = A.trace && threadIdx.x == 0 ? A.trace + (size_t)blockIdx.x * 5 : NULL;
    if (tr) { tr[0] = gtimer(); tr[4] = 0; }
    extern __shared__ __align__(128) unsigned char tt_smem[];
    __nv_bfloat16 *Ws = (__nv_bfloat16 *)tt_smem;
    float *Xs = (float *)(tt_smem + STG * TT_ELEMS * 2);
    float *Us = Xs + STG * 8 * NT * XS;   // SW: the up projection, staged like x
    __shared__ int s_first, s_last;
    const int b = blockIdx.x, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int lo = tt_lo(b, A), hi = tt_lo(b + 1, A);   // never empty: G <= U
    const int kst = A.kst, n = A.n, K = A.K;

    // The load cursor runs STG - 1 units ahead of the compute cursor; both step (tile, stage)
    // without divisions.
    int lT = lo / kst, ls = lo - lT * kst, lslot = 0;
    const uint64_t pol = policy_evict_first();
    // Weight stage (tile T, stage st) -> shared slot: one contiguous 16 KiB copy.
    auto load_w = [&](int T, int st, int slot) {
        const tt_job &J = A.j[tt_job_of(T, A)];
        const char *src = (const char *)(J.W + ((size_t)(T - J.tile0) * kst + st) * TT_ELEMS);
        char *dst = (char *)(Ws + (size_t)slot * TT_ELEMS);
        if (A.evict_first) {
#pragma unroll
            for (int i = 0; i < TT_ELEMS * 2 / 16 / TT_THREADS; i++) cp_async16_ef(dst + 16 * (tid + i * TT_THREADS), src + 16 * (tid + i * TT_THREADS), pol);
        } else {
#pragma unroll
            for (int i = 0; i < TT_ELEMS * 2 / 16 / TT_THREADS; i++) cp_async16(dst + 16 * (tid + i * TT_THREADS), src + 16 * (tid + i * TT_THREADS));
        }
    };
    auto load_next = [&](bool with_w) {
        if (with_w) load_w(lT, ls, lslot);
        float *xd = Xs + (size_t)lslot * 8 * NT * XS, *ud = Us + (size_t)lslot * 8 * NT * XS;
        const float *xs = A.x + (size_t)ls * KS, *us = A.up + (size_t)ls * KS;
        for (int i = tid; i < n * (KS / 4); i += TT_THREADS) {
            int r = i >> (KSH - 2), q = i & (KS / 4 - 1);
            cp_async16(xd + r * XS + 4 * q, xs + (size_t)r * K + 4 * q);
            if (SW) cp_async16(ud + r * XS + 4 * q, us + (size_t)r * K + 4 * q);
        }
        if (++ls == kst) { ls = 0; lT++; }
        lslot = (lslot + 1) & (STG - 1);
    };

    float d[2][NT][4], dl[2][NT][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) d[i][j][q] = dl[i][j][q] = 0.f;

    // Programmatic dependent launch: the weights do not depend on the previous kernel, so the first
    // stages stream in while it finishes; x, y and the workspaces are touched only after the wait.
    {
        int wT = lT, wsx = ls;
#pragma unroll
        for (int i = 0; i < STG - 1; i++) {
            if (lo + i < hi && i < A.pre) {
                load_w(wT, wsx, i);
                if (++wsx == kst) { wsx = 0; wT++; }
            }
        }
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (tr) tr[1] = gtimer();
#pragma unroll
    for (int i = 0; i < STG - 1; i++) { if (lo + i < hi) load_next(i >= A.pre); cp_async_commit(); }

    int T = lo / kst, s = lo - T * kst, slot = 0;
    for (int u = lo; u < hi; u++) {
        cp_async_wait<STG - 2>();
        __syncthreads();   // unit u visible to all; everyone is done with the slot refilled next
        if (tr && u == lo) tr[2] = gtimer();
        if (u + STG - 1 < hi) load_next(true);
        cp_async_commit();

        const __nv_bfloat16 *Wsl = Ws + (size_t)slot * TT_ELEMS;
        const float *Xsl = Xs + (size_t)slot * 8 * NT * XS;
        if (SW) {
            // x = silu(gate) * up, once per staged element (the same fp32 expression as swiglu_kernel, so
            // the product equals the unfused one's), in place before the warps read it.
            float *xw = Xs + (size_t)slot * 8 * NT * XS;
            const float *uw = Us + (size_t)slot * 8 * NT * XS;
            for (int i = tid; i < n * KS; i += TT_THREADS) {
                const int at = (i >> KSH) * XS + (i & (KS - 1));
                const float gv = xw[at];
                xw[at] = gv / (1.0f + expf(-gv)) * uw[at];
            }
            __syncthreads();
        }
        if constexpr (F8) {
#pragma unroll
            for (int ks = 0; ks < T8_K / 16; ks++) {
                // lanes 8i..8i+7 address rows 8i..8i+7 of the warp's 32: register i = 4 bytes (k 4t..4t+3)
                // of row g of m-tile i/2, rows +8 for odd i.
                uint32_t r4[4], a[2][4];
                const int rr = warp * 32 + lane;
                ldmatrix_x4(r4, (const unsigned char *)Wsl + rr * T8_K + ((ks ^ (rr & 7)) << 4));
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    a[mt][0] = t8_pair(r4[2 * mt], 0x9180u); a[mt][1] = t8_pair(r4[2 * mt + 1], 0x9180u);
                    a[mt][2] = t8_pair(r4[2 * mt], 0xB3A2u); a[mt][3] = t8_pair(r4[2 * mt + 1], 0xB3A2u);
                }
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    float4 xv = *(const float4 *)(Xsl + (j * 8 + g) * XS + ks * 16 + 4 * t);
                    __nv_bfloat162 b0 = __floats2bfloat162_rn(xv.x, xv.y), b1 = __floats2bfloat162_rn(xv.z, xv.w);
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) tt_mma(d[mt][j], a[mt], *(uint32_t *)&b0, *(uint32_t *)&b1);
                }
            }
        } else {
#pragma unroll
        for (int ks = 0; ks < TT_K / 16; ks++) {
            uint32_t a[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                int rr = warp * 32 + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, c = ks * 2 + (lane >> 4);
                ldmatrix_x4(a[mt], Wsl + rr * TT_K + ((c ^ (rr & 7)) << 3));
            }
#pragma unroll
            for (int j = 0; j < NT; j++) {
                float4 xv = *(const float4 *)(Xsl + (j * 8 + g) * TT_XSTRIDE + ks * 16 + 4 * t);
                uint32_t h0, l0, h1, l1;
                tt_split(xv.x, xv.y, h0, l0); tt_split(xv.z, xv.w, h1, l1);
#pragma unroll
                for (int mt = 0; mt < 2; mt++) { tt_mma(d[mt][j], a[mt], h0, h1); tt_mma(dl[mt][j], a[mt], l0, l1); }
            }
        }
        }
        slot = (slot + 1) & (STG - 1);
        const int Tu = T;
        if (++s == kst) { s = 0; T++; }
        if (s != 0 && u != hi - 1) continue;

        // ---- the block is done with tile Tu (or with its part of it)
        const tt_job &J = A.j[tt_job_of(Tu, A)];
        const int M = J.M, rbase = (Tu - J.tile0) * TT_M;
        const int t_lo = Tu * kst, t_hi = t_lo + kst;
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    if constexpr (F8) {   // the row's scale (rows past M: zero tiles, never written)
                        const int row = rbase + warp * 32 + i * 16 + g + (q >= 2 ? 8 : 0);
                        d[i][j][q] *= row < M ? __ldg(J.scale + row) : 0.f;
                    } else {
                        d[i][j][q] += dl[i][j][q]; dl[i][j][q] = 0.f;
                    }
                }
        // Each accumulator's (row in the tile, column), as mma.m16n8k16 lays out D; clears them.
        auto drain = [&](auto &&put) {
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        put(warp * 32 + i * 16 + g + (q >= 2 ? 8 : 0), j * 8 + 2 * t + (q & 1), d[i][j][q]);
                        d[i][j][q] = 0.f;
                    }
        };
        if (t_lo >= lo && t_hi <= hi) {
            drain([&](int rr, int col, float v) {
                const int row = rbase + rr;
                if (row < M && col < n) { float *o = J.y + (size_t)col * M + row; *o = J.acc ? *o + v : v; }
            });
            continue;
        }
        // A cut tile: this block's partial goes to its slot 0, or slot 1 when its range began in an
        // earlier tile (only the first block of a tile can start before it).
        const unsigned long long tr0 = tr ? gtimer() : 0;
        float *wp = A.ws + ((size_t)b * 2 + (lo >= t_lo ? 0 : 1)) * n * TT_M;
        drain([&](int rr, int col, float v) { if (col < n) wp[(size_t)col * TT_M + rr] = v; });
        if (A.fixup) { if (tr) tr[4] += gtimer() - tr0; continue; }
        __threadfence();
        __syncthreads();
        if (tid == 0) {
            const int first = tt_block_of(t_lo, A), last = tt_block_of(t_hi - 1, A);
            s_first = atomicAdd(&A.counters[Tu], 1u) == (unsigned)(last - first) ? first : -1;
            s_last = last;
        }
        __syncthreads();
        const int first = s_first;
        if (first >= 0) {
            __threadfence();
            tt_sum_cut_tile<16>(A, J, Tu, first, s_last, warp, lane, TT_THREADS / 32);
            if (tid == 0) A.counters[Tu] = 0;
        }
        if (tr) tr[4] += gtimer() - tr0;
    }
    if (tr) tr[3] = gtimer();
}

static int tt_blocks_per_sm(void) {
    static int v = 0;
    if (!v) v = bs_tuning_get()->cuda_mm_blocks > 0 ? bs_tuning_get()->cuda_mm_blocks : 2;
    return v;
}

template <int NT, bool SW, bool F8>
static void tt_launch_nt(cuda_impl *c, const tt_args &A) {
    static bool attr = false;
    const size_t xs = F8 ? T8_K + 16 : TT_XSTRIDE;
    const size_t smem = (size_t)tt_stages(NT) * TT_ELEMS * 2 + (size_t)tt_stages(NT) * 8 * NT * xs * 4 * (SW ? 2 : 1);
    if (!attr) { CK(cudaFuncSetAttribute(tt_kernel<NT, SW, F8>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)); attr = true; }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(A.G); cfg.blockDim = dim3(TT_THREADS); cfg.dynamicSmemBytes = smem; cfg.stream = c->st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at; cfg.numAttrs = pdl_gemm() ? 1 : 0;
    CK(cudaLaunchKernelEx(&cfg, tt_kernel<NT, SW, F8>, A));
    if (A.fixup && A.G > 1 && !ablated("fixup")) {
        cfg.gridDim = dim3(A.G - 1); cfg.blockDim = dim3(tt_fixup_threads(A.n)); cfg.dynamicSmemBytes = 0;
        CK(cudaLaunchKernelEx(&cfg, A.qk_on ? tt_fixup_kernel<true> : tt_fixup_kernel<false>, A));
    }
    // PDL for the kernel after it (BS_CUDA_PDL=after) only after multi-row launches: measured on the H200
    // in one run, after 1-row GEMMs it now costs decode 6% (199.5 vs 211.8 tok/s), after 16-row ones it
    // still saves 1% (5.70 vs 5.76 ms).
    static int after1 = -1;   // BS_CUDA_PDL_AFTER1=1: PDL after 1-row GEMMs too (A/B runs)
    if (after1 < 0) after1 = bs_tuning_get()->cuda_pdl_after1;
    launch_flags_clear(c);
    c->after_gemm = A.n > 1 || after1;
    if (A.qk_on) qknrs_launched(c, A.n);   // what qk_norm_rope_store's launch would have set
}

// Streamed weights use the L2 evict-first policy (BS_CUDA_EVF=0 turns it off).
static int evict_first_on(void) {
    static int v = -1;
    if (v < 0) v = bs_tuning_get()->cuda_evf;
    return v;
}
// Cut tiles summed by a separate kernel (default) or by the last GEMM block to finish the tile
// (BS_CUDA_MM_FIXUP=0: the previous scheme, kept for A/B runs). Same sums, same order, same bits.
static int fixup_kernel_on(void) {
    static int v = -1;
    if (v < 0) v = bs_tuning_get()->cuda_mm_fixup;
    return v;
}

// Units (64-k or 128-k stages) per tile of a tiled weight.
static int tt_kst(const bs_mat *W) { return (int)(W->cols / (W->layout == BS_CUDA_FP8 ? T8_K : TT_K)); }
// GEMM blocks of a launch over U units: 2 per SM (BS_CUDA_MM_BLOCKS), and never more than the units, so
// every block gets at least one (the partial sums count on it). Depends on the shapes and the GPU only.
static int tt_grid(cuda_impl *c, long long U) { const long long G = (long long)c->sms * tt_blocks_per_sm(); return (int)(G < U ? G : U); }

template <int NT, bool SW>
static void tt_launch_f(cuda_impl *c, const tt_args &A, bool f8) {
    if (f8) tt_launch_nt<NT, SW, true>(c, A);
    else tt_launch_nt<NT, SW, false>(c, A);
}

// y[i] (+)= x . W[i]^T for `count` tiled weights of the same K and layout (all BF16 tiles or all 8-bit
// tiles), one launch per 64 rows; with up != NULL (one weight) the input is silu(x) * up instead of x;
// with qk != NULL (q/k/v) the fixup runs the attention inputs' step at positions pos0 + row.
static void tt_run(cuda_impl *c, int count, float *const *y, const bs_mat *const *W, const int *acc, const float *x, int n,
                   const float *up, const tt_qk *qk, int pos0) {
    tt_args A; memset(&A, 0, sizeof A);
    const bool f8 = W[0]->layout == BS_CUDA_FP8;
    A.count = count; A.K = (int)W[0]->cols; A.kst = tt_kst(W[0]);
    int tiles = 0;
    for (int i = 0; i < count; i++) {
        const int tl = (int)((W[i]->rows + TT_M - 1) / TT_M);
        A.j[i].W = (const __nv_bfloat16 *)W[i]->data; A.j[i].M = (int)W[i]->rows; A.j[i].acc = acc[i]; A.j[i].tile0 = tiles;
        A.j[i].scale = f8 ? (const float *)((const char *)W[i]->data + (size_t)tl * TT_M * A.K) : NULL;
        tiles += tl;
    }
    if ((long long)tiles * A.kst >= (1ll << 31)) CU_DECLINE(c, "matmul: weight too large for the tiled GEMM (%d tiles)", tiles);
    A.U = tiles * A.kst;
    A.G = tt_grid(c, A.U);
    static int spread_on = -1;   // BS_CUDA_FIXUP_SPREAD=0: one fixup block sums a whole tile (A/B runs)
    if (spread_on < 0) spread_on = bs_tuning_get()->cuda_fixup_spread;
    A.spread = spread_on;
    if (tiles > c->n_counters) {
        if (c->capturing) CU_DECLINE(c, "matmul: %d GEMM tiles while recording a graph (%d counters held)", tiles, c->n_counters);
        CK(cudaStreamSynchronize(c->st)); CK(cudaFree(c->counters));
        c->n_counters = tiles; CK(cudaMalloc(&c->counters, sizeof(unsigned) * tiles)); CK(cudaMemsetAsync(c->counters, 0, sizeof(unsigned) * tiles, c->st));
    }
    A.counters = c->counters;
    A.evict_first = evict_first_on();
    A.fixup = fixup_kernel_on();
    static int pre = -1;
    if (pre < 0) { const int k = bs_tuning_get()->cuda_mm_pre; pre = k >= 0 && k < TT_STAGES ? k : TT_STAGES - 1; }
    A.pre = pre;
    long long bytes = 0;
    for (int i = 0; i < count; i++) bytes += (long long)(f8 ? mm_fp8_bytes(W[i]) : mm_tiled_bytes(W[i]));
    for (int r = 0; r < n; r += 64) {
        int nn = n - r < 64 ? n - r : 64;
        if (ensure_ws(c, &c->ws, &c->ws_bytes, sizeof(float) * (size_t)A.G * 2 * nn * TT_M)) return;
        A.ws = c->ws; A.n = nn; A.x = x + (size_t)r * A.K; A.up = up ? up + (size_t)r * A.K : NULL;
        for (int i = 0; i < count; i++) A.j[i].y = y[i] + (size_t)r * A.j[i].M;
        A.trace = mm_trace_next(A.G, tiles * TT_M, A.K, count, nn, bytes, up != NULL);
        if (qk) { A.qk_on = 1; A.qk = *qk; A.qk.pos0 = P(c, pos0 + r); }
        if (up) {   // callers fuse up to 8 rows (cu_swiglu_matmul: 1 by default)
            tt_launch_f<1, true>(c, A, f8);
        } else {
            if (nn <= 8) tt_launch_f<1, false>(c, A, f8);
            else if (nn <= 16) tt_launch_f<2, false>(c, A, f8);
            else if (nn <= 32) tt_launch_f<4, false>(c, A, f8);
            else tt_launch_f<8, false>(c, A, f8);
        }
    }
}

void mm_tiled_launch(cuda_impl *c, int count, float *const *y, const bs_mat *const *W, const int *acc, const float *x, int n,
                     const float *up) {
    tt_run(c, count, y, W, acc, x, n, up, NULL, 0);
}

// Every tile of a launch over these weights is cut between GEMM blocks (so the fixup sums every output):
// a block's range, ceil(U / G) units at most, is shorter than a tile. Depends on the shapes and the GPU only.
static bool tt_every_tile_cut(cuda_impl *c, int count, const bs_mat *const *W) {
    const long long kst = tt_kst(W[0]);
    long long tiles = 0;
    for (int i = 0; i < count; i++) tiles += (W[i]->rows + TT_M - 1) / TT_M;
    const long long U = tiles * kst, G = tt_grid(c, U);   // the partition tt_run launches
    return G > 1 && (U + G - 1) / G < kst;
}

// q/k/v with qk_norm_rope_store's step in the q/k/v fixup (backend.h, qkv_norm_rope_store): one kernel
// less on a layer's chain (H200 measurements in docs/history/benchmarks-diary.md, session 12). Declined (-1: the model
// runs matmul_multi + qk_norm_rope_store, the same bits) unless the heads are 128 wide (one tile), the
// weights tiled alike, every tile cut (tt_every_tile_cut), the fixup kernel on. BS_CUDA_QKV_FUSE=0 declines
// always (A/B runs).
int cu_qkv_norm_rope_store(bs_backend *be, const float *x, int n, const bs_mat *const *W, float *q, float *k, float *v, int n_heads,
                           int n_kv, int hd, const bs_mat *q_norm, const bs_mat *k_norm, float eps, int pos0, const float *inv_freq,
                           const bs_kv_view *kv) {
    cuda_impl *c = CI(be);
    static int on = -1;
    if (on < 0) on = bs_tuning_get()->cuda_qkv_fuse;
    if (n <= 0) return 0;
    if (!on || !fuse_enabled() || ablated("qknrs") || ablated("fixup") || !fixup_kernel_on() || hd != TT_M || ((uintptr_t)x & 15)) return -1;
    for (int i = 0; i < 3; i++)
        if ((W[i]->layout != BS_CUDA_TILED && W[i]->layout != BS_CUDA_FP8) || W[i]->layout != W[0]->layout || W[i]->cols != W[0]->cols)
            return -1;
    if (W[0]->rows != (int64_t)n_heads * hd || W[1]->rows != (int64_t)n_kv * hd || W[2]->rows != (int64_t)n_kv * hd) return -1;
    if ((q_norm && q_norm->layout) || (k_norm && k_norm->layout) || !tt_every_tile_cut(c, 3, W)) return -1;
    tt_qk qk;
    memset(&qk, 0, sizeof qk);
    qk.qw = q_norm ? q_norm->data : NULL; qk.qdt = q_norm ? (int)q_norm->dtype : 0;
    qk.kw = k_norm ? k_norm->data : NULL; qk.kdt = k_norm ? (int)k_norm->dtype : 0;
    qk.nkv = n_kv; qk.eps = eps; qk.inv_freq = inv_freq; qk.kv = kv_dev_of(kv);
    float *y[3] = { q, k, v };
    const int acc[3] = { 0, 0, 0 };
    tt_run(c, 3, y, W, acc, x, n, NULL, &qk, pos0);
    return 0;
}
