// MLX affine weights on the GPU (docs/quantization.md): upload into the layout of affine_layout.h, and
// the matmul y[n][M] (+)= x[n][K] . W^T for any number of activation rows, on tensor cores.
//
// Why tensor cores even at one row: the project promises batch invariance (a row's result never depends
// on how many rows share the call: a verify block reproduces decode steps bit for bit, which keeps greedy
// speculative decoding equal to plain decoding). A CUDA-core kernel for 1-2 rows and a tensor-core one
// for more would sum in different orders; CUDA cores alone cost n FMAs per weight, which at 16 rows is
// ~4x the bytes' time on an H200. So every row count runs the same mma.m16n8k16 arithmetic, one output
// element per (row, column) of the mma, each column independent of the others (as the BF16 GEMMs do).
//
// Exactness: a bf16 product of a code with x is exact only if the code is exact in bf16 - and a code
// (0..255) is, while scale * code + bias is not. So the kernel never forms the weight. Per group of the
// row (32, 64 or 128 k sharing a scale s and bias b) it uses
//     sum_k (s q_k + b) x_k  =  s * (sum_k q_k x_k)  +  b * (sum_k x_k):
// the tensor cores compute D = sum_k q_k x_k over the group (codes as bf16, exact; x split into bf16 hi +
// bf16 lo, two MMAs, fp32 accumulate: ~16 mantissa bits of x, as the BF16 GEMMs), then in fp32
//     acc = fma(s, D, acc);  acc = fma(b, xsum_g, acc)
// with xsum_g = sum of x over the group in fp32, computed once per staged slice of x (a fixed shuffle
// tree). Error bound: docs/quantization.md ("CUDA").
//
// Codes to bf16: 4 bits: (word >> 4j) & 0x000F000F | 0x43004300 is the bf16 pair (128 + q0, 128 + q1),
// and one bf16x2 fma (v * 1 - 128) leaves (q0, q1) exactly: 11 instructions per 8 codes, thanks to the
// nibble order of affine_layout.h. 8 bits: prmt puts a byte under the exponent of 2^23 (fp32 2^23 + q),
// an fadd removes 2^23, and a prmt packs the upper halves of two such floats (q is exact in bf16, so
// the lower half of its fp32 is zero): 5 instructions per 2 codes.
//
// Work split (stream-K over units): a block of 8 warps owns row blocks of 256 rows (warp w: rows 32 w ..
// 32 w + 31 of each, two m16 tiles). The (row block, 128-k unit) pairs of every weight of a launch (q/k/v
// or gate/up together; they share K) are numbered row block by row block, and cut into G = 2 x SMs equal
// contiguous ranges, one per block (affine_layout.h: af_range_lo). A row block completed inside one block
// is written directly; one cut between blocks leaves a partial sum per block (two slots per block, as in
// cuda_gemm_tiled.cu), and the last block to finish it (an arrival counter) sums the partials in block
// order. Nothing depends on n: the partition is a function of the shapes and the SM count, so every output
// is summed in the same order whatever the row count (batch invariance).
//
// Weights: each warp streams its tile's 2 KiB (4 bits) or 4 KiB (8 bits) of every unit of the block's range
// through its own ring of 2 KiB stages in shared memory (cp.async, L2 evict-first; 4 stages at 1-8 rows, 3
// from 9), across row-block boundaries without draining. A lane reads back only the 16-byte chunks it
// copied itself, so cp.async.wait_group is all the synchronisation the ring needs. (A ring in registers
// spilled at the 128 registers two blocks per SM allow.)
//
// x: each block stages a window of up to C units of x (the call's rows only: an mma column past them reads
// row 0 again, and its outputs are never stored) in shared memory, split into bf16 hi/lo in the order the
// B fragment wants ({hi01, hi23, lo01, lo23} per (column, 16-k step, t): one 16-byte load per mma pair),
// with the group sums beside it. The window moves when the block's range leaves it. 1-8 rows: one n-tile;
// 9-16: two; ... 25-32: four; more rows run in passes of 32 (prefill: each pass streams the weights again;
// on tensor cores that is about the BF16 GEMM's cost per row).
//
// Occupancy: 256 threads; 94-100 registers at 1-8 rows, 120-127 at 9-16, 128 with a few spilled bytes at
// 17-24 (two blocks per SM), ~170 at 25-32 (one). Shared memory <= 108 KiB per block. At one row: 16 warps x
// 3 stages x 2 KiB = 96 KiB of weights in flight per SM, well above the ~25 KiB that covers HBM latency.
// SwiGLU (swiglu_matmul, up to 32 rows): the staged x is silu(gate) * up, with the swiglu kernel's fp32
// expression (silu_mul), so fused and unfused results are the same bits.
#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/affine_layout.h"

#define AF_WARPS 8
#define AF_THREADS (AF_WARPS * 32)
#define AF_RB_ROWS (AF_WARPS * AF_TM)     // rows per row block
#define AF_PASS 32                        // activation rows per launch (four n-tiles)
#define AF_SMEM_BUDGET (108 << 10)        // shared memory per block: two blocks per SM
// 2 KiB weight stages per warp in the ring (shared memory): 4 at 1-8 rows, 3 from 9 rows (more mma work
// per stage hides more latency, and x needs the room).
__host__ __device__ constexpr int af_stages(int NT) { return NT == 1 ? 4 : 3; }

size_t cu_affine_bytes(const bs_mat *host) {
    af_shape s = af_shape_of(host->rows, host->cols, host->bits, host->group, (int)bs_dtype_size(host->dtype));
    return af_bytes(&s);
}

// ---- upload -------------------------------------------------------------------------------------------

// Writes blocks [ui0, ui0 + nb) of the device layout (whole warp tiles) from the staged source rows
// [r0, r0 + 32 * tiles): codes [rows][K * bits / 32] words, then scales and biases [rows][K / group].
// One thread per destination word; padding becomes zeros.
__global__ void af_relayout_kernel(uint32_t *dst, const unsigned char *stage, af_shape S, int64_t ui0, int64_t nb, int64_t r0,
                                   int64_t nr) {
    const int64_t wpb = S.UB / 4, rw = S.K * S.bits / 32;
    const unsigned char *sc = stage + (size_t)nr * rw * 4, *bi = sc + (size_t)nr * (S.K / S.group) * S.ds;
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < nb * wpb; q += (int64_t)gridDim.x * blockDim.x)
        dst[ui0 * wpb + q] = af_dst_word(&S, ui0 + q / wpb, (int)(q % wpb), (const uint32_t *)stage, sc, bi, r0);
}

// Uploads an affine host matrix into d (cu_affine_bytes): whole warp tiles at a time through the pinned
// double buffer into the staging buffer, each piece relaid out by af_relayout_kernel.
int cu_affine_upload(cuda_impl *c, void *d, const bs_mat *host, bs_err *err) {
    const int ds = (int)bs_dtype_size(host->dtype);
    const af_shape S = af_shape_of(host->rows, host->cols, host->bits, host->group, ds);
    const size_t code_row = (size_t)host->cols * host->bits / 8, par_row = (size_t)(host->cols / host->group) * ds;
    const size_t tile_bytes = AF_TM * (code_row + 2 * par_row);
    const int64_t per = (64 << 20) / (int64_t)tile_bytes > 0 ? (64 << 20) / (int64_t)tile_bytes : 1;
    if (upload_buffers(c, (size_t)per * tile_bytes, (size_t)per * tile_bytes, err)) return -1;
    for (int64_t t0 = 0, k = 0; t0 < S.WT; t0 += per, k++) {
        const int64_t nt = S.WT - t0 < per ? S.WT - t0 : per, r0 = t0 * AF_TM;
        const int64_t nr = host->rows - r0 < nt * AF_TM ? host->rows - r0 : nt * AF_TM;
        const int b = (int)(k & 1);
        CK(cudaEventSynchronize(c->pin_ev[b]));
        char *p = (char *)c->pin[b];
        memcpy(p, (const char *)host->data + (size_t)r0 * code_row, (size_t)nr * code_row);
        memcpy(p + (size_t)nr * code_row, (const char *)host->scales + (size_t)r0 * par_row, (size_t)nr * par_row);
        memcpy(p + (size_t)nr * (code_row + par_row), (const char *)host->biases + (size_t)r0 * par_row, (size_t)nr * par_row);
        CK(cudaMemcpyAsync(c->stage, p, (size_t)nr * (code_row + 2 * par_row), cudaMemcpyHostToDevice, c->st));
        CK(cudaEventRecord(c->pin_ev[b], c->st));
        const int64_t words = nt * S.UN * S.UB / 4;
        const int grid = (int)((words + 255) / 256 < 65535 ? (words + 255) / 256 : 65535);
        af_relayout_kernel<<<grid, 256, 0, c->st>>>((uint32_t *)d, (const unsigned char *)c->stage, S, t0 * S.UN, nt * S.UN, r0, nr);
        LAUNCHED("affine weight relayout");
    }
    CK(cudaStreamSynchronize(c->st));
    return 0;
}

// ---- the matmul ---------------------------------------------------------------------------------------

struct af_job { float *y; const char *W; int M, acc, rb0; };   // rb0: the job's first row block in the launch
struct af_args {
    af_job j[MM_MAX_JOBS];
    int count;
    int n;                 // activation rows of this launch (<= AF_PASS)
    int K, UN, group, dt;  // shared by the jobs
    long long UB;          // bytes of a (tile, unit) block
    int CB;                // bytes of its codes
    int RBT, G;            // row blocks of all jobs; blocks (ranges) of the launch
    int U;                 // units = RBT * UN (< 2^31: checked at launch)
    int C, CS;             // units of x per staged window; uint4 per staged column (C * 32 + 4)
    const float *x, *up;   // up != NULL: the staged input is silu(x) * up
    int xvec;              // x (and up) 16-byte aligned: float4 loads
    float *ws;             // [G][2][n][256] partial sums of cut row blocks
    unsigned *counters;    // per row block, zero between launches
    int evict_first;
};

// First unit of block b, and the block whose range holds unit u (affine_layout.h).
__device__ __forceinline__ int af_lo(int b, const af_args &A) { return af_range_lo(b, A.U, A.G); }
__device__ __forceinline__ int af_block_of(int u, const af_args &A) { return af_range_of(u, A.U, A.G); }

__device__ __forceinline__ uint64_t af_policy() {
    uint64_t p; asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p)); return p;
}
__device__ __forceinline__ uint32_t af_w(const uint4 &v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }
__device__ __forceinline__ void af_mma(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Nibbles j and j + 4 of w as the bf16 pair (q_j, q_j+4): (128 + q) from the bits, then * 1 - 128 (exact).
__device__ __forceinline__ uint32_t af_q4(uint32_t w, int j) {
    const uint32_t v = ((w >> (4 * j)) & 0x000F000Fu) | 0x43004300u;
    uint32_t r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(v), "r"(0x3F803F80u), "r"(0xC300C300u));
    return r;
}
// Bytes b and b + 1 of w as the bf16 pair (q_b, q_b+1).
__device__ __forceinline__ uint32_t af_q8(uint32_t w, int b) {
    const float f0 = __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540 | b)) - 8388608.f;
    const float f1 = __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540 | (b + 1))) - 8388608.f;
    return __byte_perm(__float_as_uint(f0), __float_as_uint(f1), 0x7632);
}
// fp32 (hi, lo) bf16 split of a pair, as the BF16 GEMMs do.
__device__ __forceinline__ void af_split(float a, float b, uint32_t &hi, uint32_t &lo) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    float2 hf = __bfloat1622float2(h);
    __nv_bfloat162 l = __floats2bfloat162_rn(a - hf.x, b - hf.y);
    hi = *(uint32_t *)&h; lo = *(uint32_t *)&l;
}
// Stages x (or silu(x) * up) for units [ua, ua + cu) of K, the call's n columns: xs[col][16-k step][t] =
// {hi(4t, 4t+1), hi(4t+2, 4t+3), lo(...), lo(...)}, and xsum[unit * J + group][col] = the group's sum in fp32
// (per float4 ((x0 + x1) + (x2 + x3)), then a fixed xor tree over the group's lanes: the same bits in every
// lane, for every n). The mma columns past n read column 0 (compute) and are never stored.
__device__ void af_stage_x(const af_args &A, uint4 *xs, float *xsum, int ua, int cu, int ncol) {
    const int lane = threadIdx.x & 31, G4 = A.group / 4, J = AF_KU / A.group, per_col = cu * 32;
    for (int idx = threadIdx.x; idx < A.n * per_col; idx += AF_THREADS) {   // a warp: one column, one unit
        const int col = idx / per_col, f = idx % per_col, uc = f >> 5, q = f & 31;
        const int k = (ua + uc) * AF_KU + 4 * q;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (k < A.K) {
            const size_t at = (size_t)col * A.K + k;
            if (A.xvec) v = *(const float4 *)(A.x + at);
            else v = make_float4(A.x[at], A.x[at + 1], A.x[at + 2], A.x[at + 3]);
            if (A.up) {
                float4 u;
                if (A.xvec) u = *(const float4 *)(A.up + at);
                else u = make_float4(A.up[at], A.up[at + 1], A.up[at + 2], A.up[at + 3]);
                v = make_float4(silu_mul(v.x, u.x), silu_mul(v.y, u.y), silu_mul(v.z, u.z), silu_mul(v.w, u.w));
            }
        }
        uint4 s;
        af_split(v.x, v.y, s.x, s.z);
        af_split(v.z, v.w, s.y, s.w);
        xs[(size_t)col * A.CS + (uc * 8 + (q >> 2)) * 4 + (q & 3)] = s;
        float sm = (v.x + v.y) + (v.z + v.w);
        for (int off = 1; off < G4; off <<= 1) sm += __shfl_xor_sync(0xffffffffu, sm, off);
        if ((lane & (G4 - 1)) == 0) xsum[(uc * J + q / G4) * ncol + col] = sm;
    }
}

// A position in a block's stream of stages: row block (of the launch), unit, stage of the unit, and the
// warp's (tile, unit) block there (NULL where the warp's rows are past its job's).
struct af_cur { int rbg, un, h; const char *p; };
__device__ __forceinline__ const char *af_ptr(const af_args &A, int rbg, int un, int warp) {
    int ji = 0;
#pragma unroll
    for (int q = 1; q < MM_MAX_JOBS; q++) if (q < A.count && rbg >= A.j[q].rb0) ji = q;
    const int wt = (rbg - A.j[ji].rb0) * AF_WARPS + warp;
    if (wt * AF_TM >= A.j[ji].M) return NULL;
    return A.j[ji].W + ((size_t)wt * A.UN + un) * A.UB;
}
template <int SPU>
__device__ __forceinline__ void af_next(af_cur &c, const af_args &A, int warp) {
    if (++c.h < SPU) return;
    c.h = 0;
    if (++c.un < A.UN) { if (c.p) c.p += A.UB; return; }
    c.un = 0; c.rbg++;
    c.p = af_ptr(A, c.rbg, 0, warp);
}

__device__ __forceinline__ void af_cp16(void *smem, const void *g, uint64_t pol, int ef) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    if (ef) asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" :: "r"(sa), "l"(g), "l"(pol) : "memory");
    else asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(sa), "l"(g) : "memory");
}
__device__ __forceinline__ void af_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void af_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }

template <int BITS, int NT, bool PF32>
__global__ void __launch_bounds__(AF_THREADS, NT <= 3 ? 2 : 1) af_mm_kernel(const __grid_constant__ af_args A) {
    constexpr int SPU = BITS / 4;          // 2 KiB stages per unit
    constexpr int KPS = 8 / SPU;           // 16-k steps per stage
    constexpr int PW = PF32 ? 2 : 1;       // 16-byte pair loads per lane per unit
    constexpr int SB = 2048 + 512 * PW;    // bytes of a stage slot per warp: codes, then the unit's pairs
    constexpr int STG = af_stages(NT);
    extern __shared__ uint4 af_smem[];
    __shared__ int s_last;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    // Shared memory: each warp's ring of STG weight slots, then the x window and its group sums.
    char *ring = (char *)af_smem + (size_t)warp * STG * SB;
    uint4 *xs = (uint4 *)((char *)af_smem + (size_t)AF_WARPS * STG * SB);
    float *xsum = (float *)(xs + (size_t)A.n * A.CS);
    const int J = AF_KU / A.group;                       // groups per unit
    const int spgm = A.group / 16 - 1, spgs = A.group == 32 ? 1 : A.group == 64 ? 2 : 3;   // 16-k steps per group: mask, log2
    const int jp = t % J;                                // the group whose pairs this lane loads
    const int lo = af_lo(blockIdx.x, A), hi = af_lo(blockIdx.x + 1, A), NS = (hi - lo) * SPU;
    const uint64_t pol = af_policy();

    // Stage loads: cp.async of this lane's 16-byte chunks into the warp's ring; the lane later reads back
    // exactly the chunks it copied, so cp.async.wait_group is the only synchronisation it needs.
    af_cur lc = { lo / A.UN, lo % A.UN, 0, NULL };   // the next stage to load
    lc.p = af_ptr(A, lc.rbg, lc.un, warp);
    int ls = 0;                                       // its slot
    auto issue = [&]() {
        if (lc.p) {
            char *d = ring + ls * SB;
#pragma unroll
            for (int i = 0; i < 4; i++) af_cp16(d + i * 512 + lane * 16, lc.p + (lc.h * 4 + i) * 512 + lane * 16, pol, A.evict_first);
            if (lc.h == 0) {
#pragma unroll
                for (int w = 0; w < PW; w++) af_cp16(d + 2048 + w * 512 + lane * 16, lc.p + A.CB + (jp * 8 + g) * (PF32 ? 32 : 16) + 16 * w, pol, A.evict_first);
            }
        }
        af_next<SPU>(lc, A, warp);
        ls = ls + 1 == STG ? 0 : ls + 1;
    };

    // The weights are never written by a kernel: their first stages are requested before the wait.
    pdl_trigger();
    for (int p = 0; p < STG - 1; p++) { if (p < NS) issue(); af_commit(); }
    pdl_wait();

    float acc[2][NT][4], D[2][NT][4];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int jn = 0; jn < NT; jn++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[m][jn][e] = D[m][jn][e] = 0.f;
    uint4 up[PW];
    int wa = 0, wb = 0;        // units [wa, wb) of K are staged in xs

    // Row block rbg's sums over units [a, b) of the launch are complete in acc: write them (the whole row
    // block in this range), or leave a partial and, in the last block to finish it, sum all partials.
    auto flush = [&](int rbg, int a, int b) {
        int ji = 0;
#pragma unroll
        for (int q = 1; q < MM_MAX_JOBS; q++) if (q < A.count && rbg >= A.j[q].rb0) ji = q;
        const af_job &Jb = A.j[ji];
        const int M = Jb.M, rbl = rbg - Jb.rb0, r_lo = rbg * A.UN, r_hi = r_lo + A.UN;
        if (a == r_lo && b == r_hi) {
#pragma unroll
            for (int m = 0; m < 2; m++)
#pragma unroll
                for (int jn = 0; jn < NT; jn++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int row = rbl * AF_RB_ROWS + warp * AF_TM + 16 * m + 8 * (e >> 1) + g, col = 8 * jn + 2 * t + (e & 1);
                        if (row < M && col < A.n) { float *o = Jb.y + (size_t)col * M + row; *o = Jb.acc ? *o + acc[m][jn][e] : acc[m][jn][e]; }
                    }
            return;
        }
        float *wp = A.ws + ((size_t)blockIdx.x * 2 + af_slot(a, lo)) * A.n * AF_RB_ROWS;
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int jn = 0; jn < NT; jn++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int rr = warp * AF_TM + 16 * m + 8 * (e >> 1) + g, col = 8 * jn + 2 * t + (e & 1);
                    if (col < A.n) wp[(size_t)col * AF_RB_ROWS + rr] = acc[m][jn][e];
                }
        __threadfence();
        __syncthreads();
        const int first = af_block_of(r_lo, A), last = af_block_of(r_hi - 1, A);
        if (tid == 0) s_last = atomicAdd(&A.counters[rbg], 1u) == (unsigned)(last - first);
        __syncthreads();
        if (!s_last) return;
        __threadfence();
        const int fs = af_first_slot(af_lo(first, A), r_lo);   // the first block's slot
        const int row = rbl * AF_RB_ROWS + tid;
        if (row < M)
            for (int col = 0; col < A.n; col++) {
                float v = 0.f;
                for (int b2 = first; b2 <= last; b2++) {
                    const float p = __ldcg(A.ws + (((size_t)b2 * 2 + (b2 == first ? fs : 0)) * A.n + col) * AF_RB_ROWS + tid);
                    v = b2 == first ? p : v + p;
                }
                float *o = Jb.y + (size_t)col * M + row;
                *o = Jb.acc ? *o + v : v;
            }
        if (tid == 0) A.counters[rbg] = 0;
    };

    // This lane's B column in each n-tile, as an offset in xs (uint4). An mma column past the call's rows
    // reads row 0's x instead: a column's outputs depend on its own B column only, and those are never
    // stored, so any finite values do (no zeros to stage or select).
    int xcol[NT];
#pragma unroll
    for (int jn = 0; jn < NT; jn++) xcol[jn] = (8 * jn + g < A.n ? 8 * jn + g : 0) * A.CS;

    // One 2 KiB stage: KPS 16-k steps of the warp's two m-tiles against every n-tile; a group's sums are
    // scaled into acc when its last step is done.
    auto compute = [&](const char *slot, int ucl, int h) {
        uint4 c[4];
#pragma unroll
        for (int i = 0; i < 4; i++) c[i] = *(const uint4 *)(slot + i * 512 + lane * 16);
        const uint4 *xb[NT];   // this lane's quads of x for the stage's first step, per n-tile
#pragma unroll
        for (int jn = 0; jn < NT; jn++) xb[jn] = xs + xcol[jn] + (ucl * 8 + h * KPS) * 4 + t;
#pragma unroll
        for (int ks = 0; ks < KPS; ks++) {
            const int st = h * KPS + ks;   // step in the unit
            uint32_t a[2][4];
#pragma unroll
            for (int m = 0; m < 2; m++) {
                if (BITS == 4) {
                    const uint32_t w0 = af_w(c[2 * m], ks >> 1), w1 = af_w(c[2 * m + 1], ks >> 1);
                    const int j0 = 2 * (ks & 1);
                    a[m][0] = af_q4(w0, j0); a[m][1] = af_q4(w1, j0); a[m][2] = af_q4(w0, j0 + 1); a[m][3] = af_q4(w1, j0 + 1);
                } else {
                    const uint32_t w0 = af_w(c[2 * m], ks), w1 = af_w(c[2 * m + 1], ks);
                    a[m][0] = af_q8(w0, 0); a[m][1] = af_q8(w1, 0); a[m][2] = af_q8(w0, 2); a[m][3] = af_q8(w1, 2);
                }
            }
#pragma unroll
            for (int jn = 0; jn < NT; jn++) {
                const uint4 b = xb[jn][ks * 4];
#pragma unroll
                for (int m = 0; m < 2; m++) { af_mma(D[m][jn], a[m], b.x, b.y); af_mma(D[m][jn], a[m], b.z, b.w); }
            }
            if (((st + 1) & spgm) == 0) {   // the group's last step: acc = fma(s, D, acc), then fma(b, xsum, acc)
                const int jg = st >> spgs, src = (lane & ~3) | jg;   // lane 4g + jg loaded this group's pairs
                float sc[4], bs[4];
                if (PF32) {
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const uint4 &pv = up[(i >> 1) & (PW - 1)];
                        sc[i] = __uint_as_float(__shfl_sync(0xffffffffu, (i & 1) ? pv.z : pv.x, src));
                        bs[i] = __uint_as_float(__shfl_sync(0xffffffffu, (i & 1) ? pv.w : pv.y, src));
                    }
                } else if (A.dt == BS_BF16) {
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const uint32_t w = __shfl_sync(0xffffffffu, af_w(up[0], i), src);
                        sc[i] = __uint_as_float(w << 16); bs[i] = __uint_as_float(w & 0xFFFF0000u);
                    }
                } else {
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const uint32_t w = __shfl_sync(0xffffffffu, af_w(up[0], i), src);
                        const float2 sb = __half22float2(*(const __half2 *)&w);
                        sc[i] = sb.x; bs[i] = sb.y;
                    }
                }
#pragma unroll
                for (int jn = 0; jn < NT; jn++) {
                    const float2 xv = *(const float2 *)(xsum + (ucl * J + jg) * (NT * 8) + 8 * jn + 2 * t);
#pragma unroll
                    for (int m = 0; m < 2; m++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int i = 2 * m + (e >> 1);
                            acc[m][jn][e] = fmaf(sc[i], D[m][jn][e], acc[m][jn][e]);
                            acc[m][jn][e] = fmaf(bs[i], (e & 1) ? xv.y : xv.x, acc[m][jn][e]);
                            D[m][jn][e] = 0.f;
                        }
                }
            }
        }
    };

    af_cur cc = { lo / A.UN, lo % A.UN, 0, NULL };   // the next stage to compute
    cc.p = af_ptr(A, cc.rbg, cc.un, warp);
    int cur = cc.rbg, run_lo = lo, cs = 0;          // row block being summed, its first unit here; compute slot
    for (int sg = 0; sg < NS; sg++) {
        if (sg + STG - 1 < NS) issue();   // into the slot computed in the previous iteration
        af_commit();
        if (cc.h == 0) {
            const int u = cc.rbg * A.UN + cc.un;
            if (cc.rbg != cur) {   // a new row block: the previous one's sums are done
                flush(cur, run_lo, u);
                cur = cc.rbg; run_lo = u;
#pragma unroll
                for (int m = 0; m < 2; m++)
#pragma unroll
                    for (int jn = 0; jn < NT; jn++)
#pragma unroll
                        for (int e = 0; e < 4; e++) acc[m][jn][e] = 0.f;
            }
            if (cc.un < wa || cc.un >= wb) {   // move the x window to units [un, un + C) (within K and this range)
                int cu = A.C < A.UN - cc.un ? A.C : A.UN - cc.un;
                if (cu > hi - u) cu = hi - u;
                __syncthreads();
                af_stage_x(A, xs, xsum, cc.un, cu, NT * 8);
                __syncthreads();
                wa = cc.un; wb = cc.un + cu;
            }
        }
        af_wait<STG - 1>();   // this stage's copies (this lane's own) have landed
        if (cc.p) {
            const char *slot = ring + cs * SB;
            if (cc.h == 0) {
#pragma unroll
                for (int w = 0; w < PW; w++) up[w] = *(const uint4 *)(slot + 2048 + w * 512 + lane * 16);
            }
            compute(slot, cc.un - wa, cc.h);
        }
        af_next<SPU>(cc, A, warp);
        cs = cs + 1 == STG ? 0 : cs + 1;
    }
    af_wait<0>();
    if (NS > 0) flush(cur, run_lo, hi);
}

// Row blocks of an affine weight.
static int af_rb(const bs_mat *W) { return (int)((((W->rows + AF_TM - 1) / AF_TM) + AF_WARPS - 1) / AF_WARPS); }

template <int BITS, int NT, bool PF32>
static void af_launch_k(cuda_impl *c, const af_args &A, size_t smem) {
    static bool attr = false;   // once, at the most any launch asks (mm_affine keeps smem within the budget)
    if (!attr) {
        CK(cudaFuncSetAttribute(af_mm_kernel<BITS, NT, PF32>, cudaFuncAttributeMaxDynamicSharedMemorySize, AF_SMEM_BUDGET));
        attr = true;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(A.G); cfg.blockDim = dim3(AF_THREADS); cfg.dynamicSmemBytes = smem; cfg.stream = c->st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at; cfg.numAttrs = pdl_gemm() ? 1 : 0;
    CK(cudaLaunchKernelEx(&cfg, af_mm_kernel<BITS, NT, PF32>, A));
}
template <int BITS, bool PF32>
static void af_launch_b(cuda_impl *c, const af_args &A, size_t smem, int NT) {
    if (NT == 1) af_launch_k<BITS, 1, PF32>(c, A, smem);
    else if (NT == 2) af_launch_k<BITS, 2, PF32>(c, A, smem);
    else if (NT == 3) af_launch_k<BITS, 3, PF32>(c, A, smem);
    else af_launch_k<BITS, 4, PF32>(c, A, smem);
}

int cu_affine_grid(cuda_impl *c, long long units) {
    const long long G = (long long)c->sms * 2;
    return (int)(G < units ? G : units);
}

void mm_affine(cuda_impl *c, int count, float *const *y, const bs_mat *const *W, const int *acc, const float *x, int n, const float *up) {
    if (n <= 0) return;
    af_args A;
    memset(&A, 0, sizeof A);
    const bs_mat *W0 = W[0];
    const af_shape S = af_shape_of(W0->rows, W0->cols, W0->bits, W0->group, (int)bs_dtype_size(W0->dtype));
    A.count = count; A.K = (int)W0->cols; A.UN = (int)S.UN; A.group = W0->group; A.dt = (int)W0->dtype;
    A.UB = S.UB; A.CB = (int)S.CB;
    int rbt = 0;
    for (int i = 0; i < count; i++) {
        A.j[i].W = (const char *)W[i]->data; A.j[i].M = (int)W[i]->rows; A.j[i].acc = acc[i]; A.j[i].rb0 = rbt;
        rbt += af_rb(W[i]);
    }
    if ((long long)rbt * A.UN >= (1ll << 31)) CU_DECLINE(c, "matmul (affine): weights too large for one launch (%d row blocks x %d units)", rbt, A.UN);
    A.RBT = rbt; A.U = rbt * A.UN; A.G = cu_affine_grid(c, A.U);
    A.up = up;
    A.evict_first = bs_tuning_get()->cuda_evf;
    if (rbt > c->n_counters) {
        if (c->capturing) CU_DECLINE(c, "matmul (affine): %d row-block counters needed while recording a graph (%d held)", rbt, c->n_counters);
        CK(cudaStreamSynchronize(c->st)); CK(cudaFree(c->counters));
        c->n_counters = rbt; CK(cudaMalloc(&c->counters, sizeof(unsigned) * rbt)); CK(cudaMemsetAsync(c->counters, 0, sizeof(unsigned) * rbt, c->st));
    }
    A.counters = c->counters;
    const bool pf32 = W0->dtype == BS_F32;
    for (int r = 0; r < n; r += AF_PASS) {
        const int nn = n - r < AF_PASS ? n - r : AF_PASS, NT = (nn + 7) / 8;
        if (ensure_ws(c, &c->ws, &c->ws_bytes, sizeof(float) * (size_t)A.G * 2 * nn * AF_RB_ROWS)) return;
        A.ws = c->ws; A.n = nn;
        A.x = x + (size_t)r * A.K; A.up = up ? up + (size_t)r * A.K : NULL;
        A.xvec = ((uintptr_t)A.x & 15) == 0 && (!A.up || ((uintptr_t)A.up & 15) == 0);
        for (int i = 0; i < count; i++) A.j[i].y = y[i] + (size_t)r * A.j[i].M;
        // x window: as many units as fit beside the weight ring (a unit of x: nn columns x 128 k of 16-byte
        // hi/lo quads, + 64 bytes of padding per column, + its group sums, NT * 8 of them per group). Only
        // where the staging happens depends on this, never the arithmetic.
        const size_t ring = (size_t)AF_WARPS * af_stages(NT) * (2048 + 512 * (pf32 ? 2 : 1));
        int C = (int)((AF_SMEM_BUDGET - ring - (size_t)nn * 64) / ((size_t)nn * 512 + (size_t)NT * 8 * 16));
        if (C > A.UN) C = A.UN;
        if (C < 1) C = 1;
        A.C = C; A.CS = C * 32 + 4;
        const size_t smem = ring + (size_t)nn * A.CS * 16 + (size_t)C * 4 * NT * 8 * 4;
        if (W0->bits == 4) { if (pf32) af_launch_b<4, true>(c, A, smem, NT); else af_launch_b<4, false>(c, A, smem, NT); }
        else { if (pf32) af_launch_b<8, true>(c, A, smem, NT); else af_launch_b<8, false>(c, A, smem, NT); }
    }
    // As after the tiled GEMM: the next kernel is launched with PDL after multi-row launches.
    static int after1 = -1;
    if (after1 < 0) after1 = bs_tuning_get()->cuda_pdl_after1;
    launch_flags_clear(c);
    c->after_gemm = n > 1 || after1;
}
