#include "backend/cuda/cuda_internal.cuh"

// ---------------------------------------------------------------------------------------------
// Attention (flash-decoding): block (kv head, split s) walks key chunks s, s+S, ... for every query
// vector (query row x head of the group), online softmax in fp32; partials are combined in split
// order by a second kernel. Key ranges are per query row, so results do not depend on n_q.
// Keys and values are read through the sequence's page table (backend.h, bs_kv_view): a chunk of 32 keys
// starts at a multiple of 32 and pages hold a multiple of 32 rows, so each chunk is one run of rows in one
// page, found with one table read; a contiguous cache (pages NULL) is one page.

struct att_args {
    const float *q, *k, *v;
    const int32_t *pages;    // K/V page table (NULL: contiguous rows), page_rows rows per page
    int page_rows;
    float *part;             // [S][n_q * n_heads][hd + 2]  (m, l, acc[hd])
    int n_q, n_heads, n_kv, hd, causal, window;
    posarg n_keys, q_pos0;
    posarg old_keys;         // v3, v4: K/V rows below this were written by kernels that have completed (see cu_attention)
    float scale;
};

// Key j's row in a.k / a.v (rows of n_kv * hd floats).
__device__ __forceinline__ size_t kv_row(const att_args &a, int j) {
    return a.pages ? (size_t)a.pages[j / a.page_rows] * a.page_rows + (size_t)(j % a.page_rows) : (size_t)j;
}

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
            const size_t crow = kv_row(a, c0);   // the chunk's rows run on from here in its page
            for (int idx = threadIdx.x; idx < ATT_CHUNK * (hd / 4); idx += blockDim.x) {
                int j = idx / (hd / 4), d4 = idx % (hd / 4);
                float4 kk = make_float4(0, 0, 0, 0), vv = kk;
                if (j < nkeys) {
                    kk = *(const float4 *)(a.k + (crow + j) * kvd + kh * hd + d4 * 4);
                    vv = *(const float4 *)(a.v + (crow + j) * kvd + kh * hd + d4 * 4);
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
    pdl_enter();
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
// - The head dimension is a template constant for 64, 128 and 256 (index arithmetic by shifts, loops
//   unrolled); other sizes run the same code with it at run time.
#define AT2_WARPS 8
#define AT2_QPW 2     // query vectors per warp: 16 per block, so a 16-row GQA-4 block runs as 4 row groups.
                      // Measured on the H200 (16-row forward): 4 per warp, K/V reads shared, 6.15 vs 5.96 ms
                      // (fewer blocks hide less latency); a single K/V buffer (4 blocks per SM) 5.91 vs 5.94.
#define AT2_QV (AT2_WARPS * AT2_QPW)

__device__ __forceinline__ void cp_async16(void *smem, const void *g, int src_bytes) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(g), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

struct att2_args {
    att_args a;
    float *ml;     // [S][R][2]  (running max, sum)
    float *acc;    // [S][R][hd]
    int rows_per_z;
    int gsh;       // log2 of the GQA group size when it is a power of two, else -1
    float *out;    // [n_q * n_heads][hd]: this call's output rows
    int R;         // partial rows of the launch: its query rows x heads (split s's rows start at s * R)
    int row_base;  // this call's first query row among the partials' (a span's, in a span launch; else 0)
};

// The chunks split s walks for block rows [r0, r0 + nr): t in [tfirst, tend) (chunk t starts at key
// s ATT_CHUNK + t ATT_SPLITS ATT_CHUNK); skip: no key of the split is visible to these rows (nothing is
// written, and the combine never reads its partials).
struct split_walk { int tfirst, tend; bool skip; };
__device__ __forceinline__ split_walk walk_of(const att_args &a, int r0, int nr, int s, int nk, int qp0) {
    int ulo, uhi, t0, t1;
    key_range(a, r0, nk, qp0, ulo, t0);
    key_range(a, r0 + nr - 1, nk, qp0, t1, uhi);
    if (t0 > uhi) uhi = t0;
    const int STEP = ATT_SPLITS * ATT_CHUNK, need = ulo - ATT_CHUNK - s * ATT_CHUNK;
    split_walk w;
    w.skip = s * ATT_CHUNK >= uhi;
    w.tfirst = need < 0 ? 0 : need / STEP + 1;                  // first chunk with keys >= ulo
    w.tend = (uhi - s * ATT_CHUNK + STEP - 1) / STEP;            // chunks below uhi
    return w;
}

// Chunk t of split s of kv head kh into K/V buffer b (rows kp / vp floats apart), zeros past n_keys; one
// commit group. Each thread issues an element's K and V copies side by side. The same copies as two
// load_rows calls (v4's loader: all K rows, then all V rows) decoded 0.8% slower at 4096 keys on the H200
// (187.0 / 185.9 / 187.1 vs 187.9 / 188.7 / 188.3 tok/s, session 13), so the two loaders stay apart.
__device__ __forceinline__ void load_chunk(const att_args &a, float *Kb, float *Vb, int hd, int kp, int vp, int kh, int s, int t, int nk, int b,
                                           int jfrom = 0, int jto = ATT_CHUNK) {   // rows [jfrom, jto) of the chunk
    const int c0 = s * ATT_CHUNK + t * ATT_SPLITS * ATT_CHUNK, nkeys = min(ATT_CHUNK, nk - c0), hd4 = hd / 4, kvd = a.n_kv * hd;
    const size_t crow = kv_row(a, c0);   // the chunk's rows run on from here in its page
    for (int idx = jfrom * hd4 + threadIdx.x; idx < jto * hd4; idx += blockDim.x) {
        const int j = idx / hd4, d4 = idx - j * hd4;
        const bool ok = j < nkeys;
        const size_t off = (crow + (ok ? j : 0)) * kvd + (size_t)kh * hd + d4 * 4;
        cp_async16(Kb + (b * ATT_CHUNK + j) * kp + d4 * 4, a.k + off, ok ? 16 : 0);
        cp_async16(Vb + (b * ATT_CHUNK + j) * vp + d4 * 4, a.v + off, ok ? 16 : 0);
    }
    cp_async_commit();
}

// Query vector gq of a block (row-major over (row, head of the group)) -> its row; a shift for the usual
// power-of-two groups instead of an integer division.
__device__ __forceinline__ int qv_row(int gq, int G, int gsh) { return gsh >= 0 ? gq >> gsh : gq / G; }

// Output of one (query row, head) = wid: lane s holds split s's (m, l); accumulators merged in split order.
// wid: the (row, head) within this call's rows; gw: its partial row among the launch's.
template <int NV4>
__device__ void attention2_combine_row(const att2_args &A, int wid, int lane) {
    const att_args &a = A.a;
    const int R = A.R, hd = a.hd, gw = A.row_base * a.n_heads + wid;
    int lo, hi;
    key_range(a, wid / a.n_heads, pv(a.n_keys), pv(a.q_pos0), lo, hi);
    int ns = (hi + ATT_CHUNK - 1) / ATT_CHUNK;
    if (ns > ATT_SPLITS) ns = ATT_SPLITS;
    float m = -INFINITY, l = 0.f;
    if (lane < ns) { m = __ldcg(&A.ml[((size_t)lane * R + gw) * 2]); l = __ldcg(&A.ml[((size_t)lane * R + gw) * 2 + 1]); }
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
                p[u][v] = s0 + u < ns && dd < hd ? __ldcg((const float4 *)(A.acc + ((size_t)(s0 + u) * R + gw) * hd + dd))
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
        if (dd < hd) *(float4 *)(A.out + (size_t)wid * hd + dd) = make_float4(o[v][0] * inv, o[v][1] * inv, o[v][2] * inv, o[v][3] * inv);
    }
}

// NV4: float4 slots per lane of a head vector (ceil(hd / 128)); HDC: the head dimension, or 0 (a.hd).
template <int NV4, int HDC>
__device__ __forceinline__ void attention2_body(const att2_args &A, int z) {
    pdl_enter();
    constexpr int QPW = AT2_QPW;
    const att_args &a = A.a;
    extern __shared__ __align__(16) float sm[];
    const int kh = blockIdx.x, s = blockIdx.y, hd = HDC ? HDC : a.hd, hdp = hd + 4, hd4 = hd / 4;
    const int G = a.n_heads / a.n_kv;
    const int r0 = z * A.rows_per_z, nr = min(A.rows_per_z, a.n_q - r0);
    if (nr <= 0) return;
    const int nqv = nr * G, R = A.R;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Kb = sm, *Vb = Kb + 2 * ATT_CHUNK * hdp, *Qs = Vb + 2 * ATT_CHUNK * hdp;
    const int nk = pv(a.n_keys), qp0 = pv(a.q_pos0);
    const split_walk W = walk_of(a, r0, nr, s, nk, qp0);
    const int tfirst = W.tfirst, tend = W.tend, STEP = ATT_SPLITS * ATT_CHUNK;
    for (int qv0 = 0; qv0 < nqv && !W.skip; qv0 += AT2_QV) {
        const int nv = min(AT2_QV, nqv - qv0);
        __syncthreads();
        for (int idx = threadIdx.x; idx < nv * hd4; idx += blockDim.x) {
            int qv = idx / hd4, d4 = idx - qv * hd4, gq = qv0 + qv, gr = qv_row(gq, G, A.gsh), i = r0 + gr, h = kh * G + gq - gr * G;
            cp_async16(Qs + qv * hd + d4 * 4, a.q + ((size_t)i * a.n_heads + h) * hd + d4 * 4, 16);
        }
        cp_async_commit();
        auto load = [&](int t, int b) { load_chunk(a, Kb, Vb, hd, hdp, hdp, kh, s, t, nk, b); };
        float acc[QPW][NV4][4], mx[QPW], ls[QPW];
        int lo[QPW], hi[QPW];   // each query vector's key range (empty for a warp without one)
#pragma unroll
        for (int u = 0; u < QPW; u++) {
            mx[u] = -INFINITY; ls[u] = 0.f; lo[u] = hi[u] = 0;
            const int qv = warp + AT2_WARPS * u;
            if (qv < nv) key_range(a, r0 + qv_row(qv0 + qv, G, A.gsh), nk, qp0, lo[u], hi[u]);
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
            // The warp's query vectors go through the chunk together: each K row / V row read from
            // shared memory serves all of them (shared-memory bandwidth bounds this loop at 16 rows).
            // Per query vector the arithmetic and its order are exactly those of one vector alone.
            bool act[QPW];   // warp-uniform: this chunk holds keys of query vector u
#pragma unroll
            for (int u = 0; u < QPW; u++) act[u] = c0 < hi[u] && c0 + ATT_CHUNK > lo[u];
            const int j = c0 + lane;
            float d0[QPW], d1[QPW];
#pragma unroll
            for (int u = 0; u < QPW; u++) d0[u] = d1[u] = 0.f;
            {
                const float *kr = Kc + lane * hdp;
#pragma unroll 16
                for (int d = 0; d < hd; d += 8) {
                    const float4 k4 = *(const float4 *)(kr + d);
                    float4 k5 = make_float4(0.f, 0.f, 0.f, 0.f);
                    if (d + 4 < hd) k5 = *(const float4 *)(kr + d + 4);
#pragma unroll
                    for (int u = 0; u < QPW; u++) {
                        if (!act[u]) continue;
                        const float *qq = Qs + (warp + AT2_WARPS * u) * hd;
                        const float4 q4 = *(const float4 *)(qq + d);
                        d0[u] = fmaf(q4.x, k4.x, d0[u]); d0[u] = fmaf(q4.y, k4.y, d0[u]); d0[u] = fmaf(q4.z, k4.z, d0[u]); d0[u] = fmaf(q4.w, k4.w, d0[u]);
                        if (d + 4 < hd) {
                            const float4 q5 = *(const float4 *)(qq + d + 4);
                            d1[u] = fmaf(q5.x, k5.x, d1[u]); d1[u] = fmaf(q5.y, k5.y, d1[u]); d1[u] = fmaf(q5.z, k5.z, d1[u]); d1[u] = fmaf(q5.w, k5.w, d1[u]);
                        }
                    }
                }
            }
            float p[QPW];
#pragma unroll
            for (int u = 0; u < QPW; u++) {
                p[u] = 0.f;
                if (!act[u]) continue;
                const float sc = j >= lo[u] && j < hi[u] ? (d0[u] + d1[u]) * a.scale : -INFINITY;
                float m = sc;
                for (int off = 16; off; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
                const float mold = mx[u], mnew = fmaxf(mold, m);
                p[u] = sc == -INFINITY ? 0.f : expf(sc - mnew);
                float ps = p[u];
                for (int off = 16; off; off >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, off);
                const float alpha = mold == -INFINITY ? 0.f : expf(mold - mnew);
#pragma unroll
                for (int v = 0; v < NV4; v++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[u][v][e] *= alpha;
                mx[u] = mnew; ls[u] = ls[u] * alpha + ps;
            }
#pragma unroll 4
            for (int jj = 0; jj < ATT_CHUNK; jj++) {
                float pj[QPW];
#pragma unroll
                for (int u = 0; u < QPW; u++) pj[u] = act[u] ? __shfl_sync(0xffffffffu, p[u], jj) : 0.f;
#pragma unroll
                for (int v = 0; v < NV4; v++) {
                    const int dd = 4 * (lane + 32 * v);
                    if (dd < hd) {
                        const float4 vv = *(const float4 *)(Vc + jj * hdp + dd);
#pragma unroll
                        for (int u = 0; u < QPW; u++) {
                            if (!act[u]) continue;
                            acc[u][v][0] = fmaf(pj[u], vv.x, acc[u][v][0]); acc[u][v][1] = fmaf(pj[u], vv.y, acc[u][v][1]);
                            acc[u][v][2] = fmaf(pj[u], vv.z, acc[u][v][2]); acc[u][v][3] = fmaf(pj[u], vv.w, acc[u][v][3]);
                        }
                    }
                }
            }
            __syncthreads();   // buffer b is refilled by the next iteration's prefetch
        }
        cp_async_wait<0>();
        // partials of this split
#pragma unroll
        for (int u = 0; u < QPW; u++) {
            const int qv = warp + AT2_WARPS * u;
            if (qv >= nv) continue;
            const int gq = qv0 + qv, gr = qv_row(gq, G, A.gsh), i = r0 + gr, h = kh * G + gq - gr * G;
            const size_t row = (size_t)s * R + (size_t)(A.row_base + i) * a.n_heads + h;
            if (lane == 0) { A.ml[row * 2] = mx[u]; A.ml[row * 2 + 1] = ls[u]; }
#pragma unroll
            for (int v = 0; v < NV4; v++) {
                const int dd = 4 * (lane + 32 * v);
                if (dd < hd) *(float4 *)(A.acc + row * hd + dd) = make_float4(acc[u][v][0], acc[u][v][1], acc[u][v][2], acc[u][v][3]);
            }
        }
    }
}

// One warp per (query row, head). (Folding this into the last split block of each (kv head, row group)
// saves the launch but was measured slower on the H200: 12.98 vs 11.28 us per layer at 1 row, 38.1 vs
// 29.0 at 16, since only one block per group then combines.)
template <int NV4>
__global__ void attention2_combine_kernel(att2_args A) {
    pdl_enter();
    const int R = A.a.n_q * A.a.n_heads;
    const int wid = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (wid >= R) return;
    attention2_combine_row<NV4>(A, wid, lane);
}

// ---------------------------------------------------------------------------------------------
// Attention v3 (default for head_dim 64 and 128; BS_CUDA_ATT=v2 / old select the kernels above): v2's
// grid, key partition, online softmax per split and combine, with both products on the tensor cores.
// Why: at 16 query rows v2 is bound by FMA and shared-memory issue (every warp reads all 32 K rows of a
// chunk for its 2 query vectors).
// - A warp owns 16 query vectors (the M of mma.m16n8k8), a block 4 warps = 64 (a 16-row GQA-4 verify
//   block is one block per (kv head, split)). S = Q K^T: 4 key tiles of 8 x hd/8 k-steps; O += P V: hd/8
//   d tiles x 4 key steps.
// - fp32 accuracy from TF32 tensor cores: x = hi + lo, hi = x with its low 13 bits dropped (what the
//   tensor core reads from an fp32 register: no conversion needed), lo = x - hi (exact in fp32, itself
//   truncated by the tensor core), and a.b ~ a_hi.b_hi + (a_hi.b_lo + a_lo.b_hi): three mmas into three
//   accumulators (short dependency chains), summed at the end. Error ~2^-20 relative per product.
// - P goes from S's accumulator layout straight into P V's A operand without shuffles: A column t of a key
//   step stands for key 2t and column t + 4 for key 2t + 1 (V's rows are read in the same order).
// - Batch invariance: a row of an mma result depends only on that row of A, and every query vector runs
//   the same instruction sequence wherever it sits in the tile, so a row alone == the row in a block, bit
//   for bit. A chunk that the warp needs but a row of it does not is an exact no-op for that row (p = 0,
//   alpha = 1); padding rows of a partial tile are zeros with empty key ranges.
#define AT3_WARPS 4
#define AT3_QV (AT3_WARPS * 16)

__device__ __forceinline__ uint32_t tf32_lo(float x) { return __float_as_uint(x - __uint_as_float(__float_as_uint(x) & 0xffffe000u)); }
__device__ __forceinline__ void mma_tf32(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// hh += a_hi b_hi, x += a_hi b_lo + a_lo b_hi (a, b: fp32 values; hi is the register itself)
__device__ __forceinline__ void mma_3xtf32(float (&hh)[4], float (&x)[4], float a0, float a1, float a2, float a3, float b0, float b1) {
    const uint32_t A0 = __float_as_uint(a0), A1 = __float_as_uint(a1), A2 = __float_as_uint(a2), A3 = __float_as_uint(a3);
    const uint32_t B0 = __float_as_uint(b0), B1 = __float_as_uint(b1);
    mma_tf32(x, tf32_lo(a0), tf32_lo(a1), tf32_lo(a2), tf32_lo(a3), B0, B1);
    mma_tf32(x, A0, A1, A2, A3, tf32_lo(b0), tf32_lo(b1));
    mma_tf32(hh, A0, A1, A2, A3, B0, B1);
}

template <int HD>
__device__ __forceinline__ void attention3_body(const att2_args &A, int z) {
    pdl_trigger();
    constexpr int HDP = HD + 4, NT = HD / 8, HD4 = HD / 4;   // HDP = 4 mod 32: conflict-free fragment reads
    static_assert(ATT_CHUNK == 32, "4 key tiles of 8 per chunk");
    const att_args &a = A.a;
    extern __shared__ __align__(16) float sm[];
    const int kh = blockIdx.x, s = blockIdx.y;
    const int G = a.n_heads / a.n_kv;
    const int r0 = z * A.rows_per_z, nr = min(A.rows_per_z, a.n_q - r0);
    if (nr <= 0) return;
    const int nqv = nr * G, R = A.R;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float *Kb = sm, *Vb = Kb + 2 * ATT_CHUNK * HDP, *Qs = Vb + 2 * ATT_CHUNK * HDP;
    const int nk = pv(a.n_keys), qp0 = pv(a.q_pos0);
    const split_walk W = walk_of(a, r0, nr, s, nk, qp0);
    const int tfirst = W.tfirst, tend = W.tend, STEP = ATT_SPLITS * ATT_CHUNK;
    const int w0 = warp * 16;   // this warp's first query vector in the block's tile
    // K/V rows of earlier forwards (below a.old_keys: see cu_attention) cannot change any more: the first
    // chunk's share of them streams in before the wait, while the q/k norm kernel before this one runs
    int pre = 0;
    if (!W.skip && tfirst < tend) {
        pre = min(max(pv(a.old_keys) - (s * ATT_CHUNK + tfirst * STEP), 0), ATT_CHUNK);
        if (pre > 0) load_chunk(a, Kb, Vb, HD, HDP, HDP, kh, s, tfirst, nk, 0, 0, pre);
    }
    pdl_wait();
    for (int qv0 = 0; qv0 < nqv && !W.skip; qv0 += AT3_QV) {
        const int nv = min(AT3_QV, nqv - qv0);
        __syncthreads();
        for (int idx = threadIdx.x; idx < AT3_QV * HD4; idx += blockDim.x) {
            const int qv = idx / HD4, d4 = idx - qv * HD4;
            if (qv < nv) {
                const int gq = qv0 + qv, gr = qv_row(gq, G, A.gsh), i = r0 + gr, h = kh * G + gq - gr * G;
                cp_async16(Qs + qv * HDP + d4 * 4, a.q + ((size_t)i * a.n_heads + h) * HD + d4 * 4, 16);
            } else if (qv < ((nv + 15) & ~15)) {   // padding rows of the last used tile
                *(float4 *)(Qs + qv * HDP + d4 * 4) = make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }
        cp_async_commit();
        auto load = [&](int tt, int b) { load_chunk(a, Kb, Vb, HD, HDP, HDP, kh, s, tt, nk, b, qv0 == 0 && tt == tfirst ? pre : 0); };
        // mma rows g and g + 8 of this warp: query vectors w0 + g and w0 + g + 8 (key range empty past nv)
        int lo[2], hi[2];
        int wlo = 1 << 30, whi = 0;
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            const int qv = w0 + g + 8 * h2;
            lo[h2] = hi[h2] = 0;
            if (qv < nv) {
                key_range(a, r0 + qv_row(qv0 + qv, G, A.gsh), nk, qp0, lo[h2], hi[h2]);
                if (hi[h2] > lo[h2]) { wlo = min(wlo, lo[h2]); whi = max(whi, hi[h2]); }
            }
        }
        for (int off = 1; off < 32; off <<= 1) {
            wlo = min(wlo, __shfl_xor_sync(0xffffffffu, wlo, off));
            whi = max(whi, __shfl_xor_sync(0xffffffffu, whi, off));
        }
        float o[NT][4], ox[NT][4], mx[2] = { -INFINITY, -INFINITY }, ls[2] = { 0.f, 0.f };
#pragma unroll
        for (int dn = 0; dn < NT; dn++) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = ox[dn][0] = ox[dn][1] = ox[dn][2] = ox[dn][3] = 0.f;
        if (tfirst < tend) load(tfirst, 0);
        for (int tt = tfirst, it = 0; tt < tend; tt++, it++) {
            const int b = it & 1;
            if (tt + 1 < tend) { load(tt + 1, b ^ 1); cp_async_wait<1>(); } else cp_async_wait<0>();
            __syncthreads();
            const float *Kc = Kb + b * ATT_CHUNK * HDP, *Vc = Vb + b * ATT_CHUNK * HDP;
            const int c0 = s * ATT_CHUNK + tt * STEP;
            if (w0 < nv && c0 < whi && c0 + ATT_CHUNK > wlo) {   // warp-uniform
                // S = Q K^T: sc[nt] = S[rows g, g + 8][keys c0 + 8 nt + 2t, + 1]
                float sc[4][4], sx[4][4];
#pragma unroll
                for (int nt = 0; nt < 4; nt++) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = sx[nt][0] = sx[nt][1] = sx[nt][2] = sx[nt][3] = 0.f;
#pragma unroll 4
                for (int ks = 0; ks < NT; ks++) {
                    const float *qa = Qs + (w0 + g) * HDP + ks * 8 + t;
                    const float a0 = qa[0], a1 = qa[8 * HDP], a2 = qa[4], a3 = qa[8 * HDP + 4];
#pragma unroll
                    for (int nt = 0; nt < 4; nt++) {
                        const float *kb = Kc + (nt * 8 + g) * HDP + ks * 8 + t;
                        mma_3xtf32(sc[nt], sx[nt], a0, a1, a2, a3, kb[0], kb[4]);
                    }
                }
                // online softmax per row (a row's 32 scores sit in the 4 lanes of its quad)
#pragma unroll
                for (int h2 = 0; h2 < 2; h2++) {
                    float m = -INFINITY;
#pragma unroll
                    for (int nt = 0; nt < 4; nt++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const int r = 2 * h2 + e, j = c0 + nt * 8 + 2 * t + e;
                            const float v = j >= lo[h2] && j < hi[h2] ? (sc[nt][r] + sx[nt][r]) * a.scale : -INFINITY;
                            sc[nt][r] = v;
                            m = fmaxf(m, v);
                        }
                    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
                    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
                    const float mold = mx[h2], mnew = fmaxf(mold, m);
                    float ps = 0.f;
#pragma unroll
                    for (int nt = 0; nt < 4; nt++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const float v = sc[nt][2 * h2 + e], p = v == -INFINITY ? 0.f : expf(v - mnew);
                            sc[nt][2 * h2 + e] = p;
                            ps += p;
                        }
                    ps += __shfl_xor_sync(0xffffffffu, ps, 1);
                    ps += __shfl_xor_sync(0xffffffffu, ps, 2);
                    const float alpha = mold == -INFINITY ? 0.f : expf(mold - mnew);
#pragma unroll
                    for (int dn = 0; dn < NT; dn++) {
                        o[dn][2 * h2] *= alpha; o[dn][2 * h2 + 1] *= alpha;
                        ox[dn][2 * h2] *= alpha; ox[dn][2 * h2 + 1] *= alpha;
                    }
                    mx[h2] = mnew; ls[h2] = ls[h2] * alpha + ps;
                }
                // O += P V, key step kt: A column t <-> key 2t, column t + 4 <-> key 2t + 1
#pragma unroll
                for (int kt = 0; kt < 4; kt++) {
                    const float *vb = Vc + (kt * 8 + 2 * t) * HDP + g;
#pragma unroll
                    for (int dn = 0; dn < NT; dn++)
                        mma_3xtf32(o[dn], ox[dn], sc[kt][0], sc[kt][2], sc[kt][1], sc[kt][3], vb[dn * 8], vb[HDP + dn * 8]);
                }
            }
            __syncthreads();   // buffer b is refilled by the next iteration's prefetch
        }
        cp_async_wait<0>();
        // partials of this split: thread holds d = 8 dn + 2t, + 1 of rows g and g + 8
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            const int qv = w0 + g + 8 * h2;
            if (qv >= nv) continue;
            const int gq = qv0 + qv, gr = qv_row(gq, G, A.gsh), i = r0 + gr, h = kh * G + gq - gr * G;
            const size_t row = (size_t)s * R + (size_t)(A.row_base + i) * a.n_heads + h;
            if (t == 0) { A.ml[row * 2] = mx[h2]; A.ml[row * 2 + 1] = ls[h2]; }
#pragma unroll
            for (int dn = 0; dn < NT; dn++)
                *(float2 *)(A.acc + row * HD + dn * 8 + 2 * t) = make_float2(o[dn][2 * h2] + ox[dn][2 * h2], o[dn][2 * h2 + 1] + ox[dn][2 * h2 + 1]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Attention v4 (BS_CUDA_ATT=v4, head_dim 64 and 128; not the default: faster at one decode row at long
// contexts, slower at 16 rows, see docs/cuda.md).
// Why: at one decode row v3's 4 query vectors fill a quarter of one warp's 16-row mma tile, so that warp
// runs all 384 mmas of the chunk while the other three wait at barriers (Nsight Compute: 0.12 instructions
// issued per scheduler-cycle, DRAM at 8%: the latency of one warp's chain). v4 transposes both products,
// S^T = K Q^T and O^T = V^T P^T: query vectors are the mma's N (tiles of 8), keys and head dims its M.
// - A decode row's group fills half an n-tile, so a chunk needs half the mmas, and the chunk's work is cut
//   into items the 4 warps share: S^T items (key m-tile, query n-tile, half of the head dims), O^T items
//   (head-dim m-tile, query n-tile). At one row every warp has one S^T item and two O^T items.
// - The online softmax sits between them in shared memory: 4 threads per query vector, keys sub + 4e.
// - 3xTF32 as in v3, with the cross terms in separate accumulators in S^T (shorter chains); a score is
//   (half 0 + half 1) * scale, each half hi.hi + (hi.lo + lo.hi).
// - Same grid, key partition, online softmax per split, partials and combine as v2/v3. Batch invariance:
//   a query vector's arithmetic is the same in whatever n-tile, item, warp or block it runs (an mma's
//   element [m][n] depends only on row m of A and column n of B), and a chunk outside its key range is an
//   exact no-op for it (p = 0, alpha = 1), so a row alone == the row in a block, bit for bit. Results
//   differ from v3's in the last bits (another summation order), never between row counts.
// - Under PDL the kernel starts while the q/k norm kernel before it runs; K/V rows of earlier forwards
//   (below a.old_keys) cannot change any more, so the first chunk's share of them is loaded before
//   pdl_wait and only the new rows (and Q) after it (cu_attention says when that is safe).
// - One K and one V buffer, pipelined: the next chunk's K streams in while this chunk's softmax and
//   O^T run, its V while the next S^T runs (K and V are separate cp.async groups).
// - NTQ query n-tiles per block, NW warps: a launch of at most 8 query vectors (a decode row) runs NTQ 1
//   with 4 warps (41 KB of shared memory); more rows run NTQ 8 with 8 warps (87 KB, 2 blocks per SM: a
//   16-row GQA-4 verify is one block per kv head and split, as in v3). BS_CUDA_AT4_NTQ=4 runs them as
//   NTQ 4 with 4 warps instead (A/B).
#define AT4_SP 36                 // pitch of the score / probability rows (4 mod 32: conflict-free fragments)

template <int HD, int NTQ> constexpr size_t attention4_smem_floats() {
    return ATT_CHUNK * (HD + 4) + ATT_CHUNK * (HD + 8) + NTQ * 8 * (HD + 4) + 2 * NTQ * 8 * AT4_SP + NTQ * 8;
}

// rows [jfrom, jto) of the chunk at key c0 of kv head kh (src: a.k or a.v, read through a's page table)
// into dst, rows p floats apart; zeros past n_keys; one commit group
__device__ __forceinline__ void load_rows(const att_args &a, const float *src, float *dst, int p, int hd, int kvd, int kh, int c0, int nk, int jfrom,
                                          int jto) {
    const int hd4 = hd / 4, nkeys = nk - c0;
    const size_t crow = kv_row(a, c0);
    for (int idx = jfrom * hd4 + threadIdx.x; idx < jto * hd4; idx += blockDim.x) {
        const int j = idx / hd4, d4 = idx - j * hd4;
        const bool ok = j < nkeys;
        cp_async16(dst + j * p + d4 * 4, src + (crow + (ok ? j : 0)) * kvd + (size_t)kh * hd + d4 * 4, ok ? 16 : 0);
    }
    cp_async_commit();
}

template <int HD, int NTQ, int NW>
__device__ __forceinline__ void attention4_body(const att2_args &A, int z) {
    pdl_trigger();
    // pitches: K and Q rows 4 mod 32 (A / B fragments of S^T read banks 4g + t), V rows 8 mod 32 (V^T's
    // A fragment reads banks 8t + g)
    constexpr int KP = HD + 4, VP = HD + 8, QP = HD + 4, NK8 = HD / 8, MT = HD / 16, HD4 = HD / 4;
    // S^T: a warp keeps one of the 4 (key m-tile, half) pairs for SI n-tiles. O^T: a warp keeps MTW head-dim
    // m-tiles pv_mt(m) for NTW n-tiles pv_nt(u) (one m-tile for a share of the n-tiles where NW >= MT).
    constexpr int QV = NTQ * 8, SI = NTQ * 4 / NW, SG = NW == 8 && SI > 2 ? 2 : SI;
    constexpr int MTW = NW >= MT ? 1 : MT / NW, NTW = NW >= MT ? NTQ * MT / NW : NTQ;
    static_assert(ATT_CHUNK == 32 && HD % 16 == 0 && NW % 4 == 0 && SI * NW == NTQ * 4 && (NW >= MT ? NW % MT == 0 && NTW * NW == NTQ * MT : MT % NW == 0)
                  && NW * 8 >= QV, "2 key m-tiles per chunk, whole head-dim m-tiles, whole items per warp, 4 softmax threads per query vector");
    const att_args &a = A.a;
    extern __shared__ __align__(16) float sm[];
    // P overwrites half 0 of S in place (each element is read and then written by the same thread)
    float *Kc = sm, *Vc = Kc + ATT_CHUNK * KP, *Qs = Vc + ATT_CHUNK * VP;
    float *Ss = Qs + QV * QP, *Ps = Ss, *Al = Ss + 2 * QV * AT4_SP;
    const int kh = blockIdx.x, s = blockIdx.y, G = a.n_heads / a.n_kv, kvd = a.n_kv * HD;
    const int r0 = z * A.rows_per_z, nr = min(A.rows_per_z, a.n_q - r0);
    if (nr <= 0) return;
    const int nqv = nr * G, R = A.R;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int sq = threadIdx.x >> 2, sub = threadIdx.x & 3;   // softmax: query vector sq, keys sub + 4e
    auto pv_mt = [&](int m) { return NW >= MT ? warp % MT : warp + NW * m; };
    auto pv_nt = [&](int u) { return NW >= MT ? warp / MT + (NW / MT) * u : u; };
    const int nk = pv(a.n_keys), qp0 = pv(a.q_pos0);   // positions: set before the step's first kernel
    const split_walk W = walk_of(a, r0, nr, s, nk, qp0);
    const int STEP = ATT_SPLITS * ATT_CHUNK;
    auto chunk0 = [&](int tt) { return s * ATT_CHUNK + tt * STEP; };
    int pre = 0;   // rows of the first chunk loaded before the wait
    if (!W.skip && W.tfirst < W.tend) {
        pre = min(max(pv(a.old_keys) - chunk0(W.tfirst), 0), ATT_CHUNK);
        if (pre > 0) {
            load_rows(a, a.k, Kc, KP, HD, kvd, kh, chunk0(W.tfirst), nk, 0, pre);
            load_rows(a, a.v, Vc, VP, HD, kvd, kh, chunk0(W.tfirst), nk, 0, pre);
        }
    }
    pdl_wait();
    for (int qv0 = 0; qv0 < nqv && !W.skip; qv0 += QV) {
        const int nv = min(QV, nqv - qv0), ntq = (nv + 7) >> 3;
        __syncthreads();
        for (int idx = threadIdx.x; idx < ntq * 8 * HD4; idx += blockDim.x) {
            const int qv = idx / HD4, d4 = idx - qv * HD4;
            if (qv < nv) {
                const int gq = qv0 + qv, gr = qv_row(gq, G, A.gsh), i = r0 + gr, h = kh * G + gq - gr * G;
                cp_async16(Qs + qv * QP + d4 * 4, a.q + ((size_t)i * a.n_heads + h) * HD + d4 * 4, 16);
            } else {   // padding columns of the last n-tile
                *(float4 *)(Qs + qv * QP + d4 * 4) = make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }
        cp_async_commit();
        int slo = 0, shi = 0;   // the softmax thread's query vector's key range (empty for padding)
        if (sq < nv) key_range(a, r0 + qv_row(qv0 + sq, G, A.gsh), nk, qp0, slo, shi);
        float smx = -INFINITY, sls = 0.f;
        float o[MTW][NTW][4], ox[MTW][NTW][4];
#pragma unroll
        for (int m = 0; m < MTW; m++)
#pragma unroll
            for (int u = 0; u < NTW; u++)
#pragma unroll
                for (int e = 0; e < 4; e++) o[m][u][e] = ox[m][u][e] = 0.f;
        if (W.tfirst < W.tend) {
            const int jf = qv0 == 0 ? pre : 0;
            load_rows(a, a.k, Kc, KP, HD, kvd, kh, chunk0(W.tfirst), nk, jf, ATT_CHUNK);
            load_rows(a, a.v, Vc, VP, HD, kvd, kh, chunk0(W.tfirst), nk, jf, ATT_CHUNK);
        }
        for (int tt = W.tfirst; tt < W.tend; tt++) {
            const int c0 = chunk0(tt);
            const bool more = tt + 1 < W.tend;
            cp_async_wait<1>();   // all but this chunk's V: its K (and Q, the rows loaded early)
            __syncthreads();
            // S^T: c[0..3] = S^T[keys 16 mt + g, + 8][queries 8 nt + 2t, + 1] over half the head dims. A warp
            // keeps one (key m-tile, half) and walks n-tiles nt0, nt0 + NW / 4, ...: each K fragment it
            // loads (and splits) serves all of them.
#pragma unroll
            for (int u0 = 0; u0 < SI; u0 += SG) {   // SG n-tiles at a time (registers)
                const int mt = warp & 1, half = (warp >> 1) & 1, nt0 = warp >> 2;
                float sc[SG][4], sa[SG][4], sb[SG][4];
#pragma unroll
                for (int u = 0; u < SG; u++)
#pragma unroll
                    for (int e = 0; e < 4; e++) sc[u][e] = sa[u][e] = sb[u][e] = 0.f;
                const float *ka = Kc + (mt * 16 + g) * KP + half * (HD / 2) + t, *qb = Qs + g * QP + half * (HD / 2) + t;
#pragma unroll
                for (int ks = 0; ks < NK8 / 2; ks++) {
                    const float a0 = ka[ks * 8], a1 = ka[8 * KP + ks * 8], a2 = ka[ks * 8 + 4], a3 = ka[8 * KP + ks * 8 + 4];
                    const uint32_t A0 = __float_as_uint(a0), A1 = __float_as_uint(a1), A2 = __float_as_uint(a2), A3 = __float_as_uint(a3);
                    const uint32_t L0 = tf32_lo(a0), L1 = tf32_lo(a1), L2 = tf32_lo(a2), L3 = tf32_lo(a3);
#pragma unroll
                    for (int u = 0; u < SG; u++) {
                        const int nt = nt0 + (NW / 4) * (u0 + u);
                        if (nt >= ntq) break;   // warp-uniform
                        const float b0 = qb[nt * 8 * QP + ks * 8], b1 = qb[nt * 8 * QP + ks * 8 + 4];
                        const uint32_t B0 = __float_as_uint(b0), B1 = __float_as_uint(b1);
                        mma_tf32(sa[u], A0, A1, A2, A3, tf32_lo(b0), tf32_lo(b1));
                        mma_tf32(sb[u], L0, L1, L2, L3, B0, B1);
                        mma_tf32(sc[u], A0, A1, A2, A3, B0, B1);
                    }
                }
#pragma unroll
                for (int u = 0; u < SG; u++) {
                    const int nt = nt0 + (NW / 4) * (u0 + u);
                    if (nt >= ntq) break;
                    float *so = Ss + half * QV * AT4_SP + (nt * 8 + 2 * t) * AT4_SP + mt * 16 + g;
                    so[0] = sc[u][0] + (sa[u][0] + sb[u][0]);
                    so[AT4_SP] = sc[u][1] + (sa[u][1] + sb[u][1]);
                    so[8] = sc[u][2] + (sa[u][2] + sb[u][2]);
                    so[AT4_SP + 8] = sc[u][3] + (sa[u][3] + sb[u][3]);
                }
            }
            __syncthreads();
            if (more) load_rows(a, a.k, Kc, KP, HD, kvd, kh, chunk0(tt + 1), nk, 0, ATT_CHUNK);   // K is free: the next chunk's
            // online softmax of query vector sq over this chunk's keys; the 4 threads of a query vector are
            // one quad, and all four keep the same running (max, sum)
            if (sq < ntq * 8) {
                float sv[8], m = -INFINITY;
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    const int kj = sub + 4 * e, j = c0 + kj;
                    sv[e] = j >= slo && j < shi ? (Ss[sq * AT4_SP + kj] + Ss[(QV + sq) * AT4_SP + kj]) * a.scale : -INFINITY;
                    m = fmaxf(m, sv[e]);
                }
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
                const float mnew = fmaxf(smx, m);
                float ps = 0.f;
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    const float p = sv[e] == -INFINITY ? 0.f : expf(sv[e] - mnew);
                    Ps[sq * AT4_SP + sub + 4 * e] = p;
                    ps += p;
                }
                ps += __shfl_xor_sync(0xffffffffu, ps, 1);
                ps += __shfl_xor_sync(0xffffffffu, ps, 2);
                const float alpha = smx == -INFINITY ? 0.f : expf(smx - mnew);
                if (sub == 0) Al[sq] = alpha;
                smx = mnew; sls = sls * alpha + ps;
            }
            if (more) cp_async_wait<1>(); else cp_async_wait<0>();   // this chunk's V (the next K may stream on)
            __syncthreads();
            // O^T: o[m][u] = O^T[dims 16 mt(m) + g, + 8][queries 8 nt(u) + 2t, + 1]; key step kk: k = t <->
            // key 8 kk + t. Each V^T fragment a warp loads (and splits) serves all its n-tiles.
#pragma unroll
            for (int m = 0; m < MTW; m++)
#pragma unroll
                for (int u = 0; u < NTW; u++) {
                    const int nt = pv_nt(u);
                    if (nt >= ntq) break;   // warp-uniform
                    const float al0 = Al[nt * 8 + 2 * t], al1 = Al[nt * 8 + 2 * t + 1];
                    o[m][u][0] *= al0; o[m][u][1] *= al1; o[m][u][2] *= al0; o[m][u][3] *= al1;
                    ox[m][u][0] *= al0; ox[m][u][1] *= al1; ox[m][u][2] *= al0; ox[m][u][3] *= al1;
                }
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
#pragma unroll
                for (int m = 0; m < MTW; m++) {
                    const float *va = Vc + (kk * 8 + t) * VP + pv_mt(m) * 16 + g;
                    const float a0 = va[0], a1 = va[8], a2 = va[4 * VP], a3 = va[4 * VP + 8];
                    const uint32_t A0 = __float_as_uint(a0), A1 = __float_as_uint(a1), A2 = __float_as_uint(a2), A3 = __float_as_uint(a3);
                    const uint32_t L0 = tf32_lo(a0), L1 = tf32_lo(a1), L2 = tf32_lo(a2), L3 = tf32_lo(a3);
#pragma unroll
                    for (int u = 0; u < NTW; u++) {
                        const int nt = pv_nt(u);
                        if (nt >= ntq) break;
                        const float *pb = Ps + (nt * 8 + g) * AT4_SP + kk * 8 + t;
                        const float b0 = pb[0], b1 = pb[4];
                        const uint32_t B0 = __float_as_uint(b0), B1 = __float_as_uint(b1);
                        mma_tf32(ox[m][u], A0, A1, A2, A3, tf32_lo(b0), tf32_lo(b1));
                        mma_tf32(ox[m][u], L0, L1, L2, L3, B0, B1);
                        mma_tf32(o[m][u], A0, A1, A2, A3, B0, B1);
                    }
                }
            __syncthreads();   // V, S, P and alpha are rewritten for the next chunk
            if (more) load_rows(a, a.v, Vc, VP, HD, kvd, kh, chunk0(tt + 1), nk, 0, ATT_CHUNK);
        }
        cp_async_wait<0>();
        // partials of this split
        if (sq < nv && sub == 0) {
            const int gq = qv0 + sq, gr = qv_row(gq, G, A.gsh), i = r0 + gr, h = kh * G + gq - gr * G;
            const size_t row = (size_t)s * R + (size_t)(A.row_base + i) * a.n_heads + h;
            A.ml[row * 2] = smx; A.ml[row * 2 + 1] = sls;
        }
#pragma unroll
        for (int m = 0; m < MTW; m++)
#pragma unroll
            for (int u = 0; u < NTW; u++) {
                const int nt = pv_nt(u);
                if (nt >= ntq) break;
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int qv = nt * 8 + 2 * t + (e & 1), d = pv_mt(m) * 16 + g + 8 * (e >> 1);
                    if (qv >= nv) continue;
                    const int gq = qv0 + qv, gr = qv_row(gq, G, A.gsh), i = r0 + gr, h = kh * G + gq - gr * G;
                    A.acc[((size_t)s * R + (size_t)(A.row_base + i) * a.n_heads + h) * HD + d] = o[m][u][e] + ox[m][u][e];
                }
            }
    }
}

// ---------------------------------------------------------------------------------------------
// The kernels: one call's query rows (grid z: its row groups), or every span of a ragged batch in one launch
// (the native span attention, attention_spans: grid z runs over the row groups of all spans, and each block
// takes its span's queries, positions, K/V and page table, then runs the same body as a call of that span
// alone, so a row's result is bit for bit the one a per-span call gives).
#define ATT_MAX_SPANS 64   // query rows (so spans, and row groups) of one span launch: a forward chunk's

struct att_span {
    const float *k, *v;
    const int32_t *pages;
    int page_rows;
    int row0, n, pos0;     // its rows in the batch's q / out, their count, the first one's position
    int prow0;             // its first row among the launch's partials
};
struct att2_span_args {
    att2_args A;                              // the launch's shapes and partials; a.q, out: the batch's row 0
    att_span sp[ATT_MAX_SPANS];
    unsigned char z_span[ATT_MAX_SPANS], z_in_span[ATT_MAX_SPANS];   // row group z: its span, its index there
    unsigned char prow_span[ATT_MAX_SPANS];  // partial row -> its span (the combine)
    int n_rows;                               // partial rows (query rows of the launch)
    int early;                                // each span's K/V rows below its pos0 may load before the PDL wait
};

// Span i of a launch as one call.
__device__ __forceinline__ att2_args span_call(const att2_span_args &S, int i) {
    const att_span &sp = S.sp[i];
    att2_args A = S.A;
    const size_t qw = (size_t)A.a.n_heads * A.a.hd;
    A.a.q = S.A.a.q + (size_t)sp.row0 * qw;
    A.out = S.A.out + (size_t)sp.row0 * qw;
    A.a.k = sp.k; A.a.v = sp.v; A.a.pages = sp.pages; A.a.page_rows = sp.page_rows;
    A.a.n_q = sp.n;
    A.a.q_pos0 = posarg{ sp.pos0, NULL };
    A.a.n_keys = posarg{ sp.pos0 + sp.n, NULL };
    A.a.old_keys = posarg{ S.early ? sp.pos0 : 0, NULL };
    A.row_base = sp.prow0;
    return A;
}

template <int NV4, int HDC>
__global__ void __launch_bounds__(AT2_WARPS * 32) attention2_kernel(att2_args A) { attention2_body<NV4, HDC>(A, blockIdx.z); }
template <int NV4, int HDC>
__global__ void __launch_bounds__(AT2_WARPS * 32) attention2_spans_kernel(const __grid_constant__ att2_span_args S) {
    attention2_body<NV4, HDC>(span_call(S, S.z_span[blockIdx.z]), S.z_in_span[blockIdx.z]);
}
template <int HD>
__global__ void __launch_bounds__(AT3_WARPS * 32) attention3_kernel(att2_args A) { attention3_body<HD>(A, blockIdx.z); }
template <int HD>
__global__ void __launch_bounds__(AT3_WARPS * 32) attention3_spans_kernel(const __grid_constant__ att2_span_args S) {
    attention3_body<HD>(span_call(S, S.z_span[blockIdx.z]), S.z_in_span[blockIdx.z]);
}
template <int HD, int NTQ, int NW>
__global__ void __launch_bounds__(NW * 32, NW == 8 ? 2 : 1) attention4_kernel(att2_args A) {   // 8 warps: 2 blocks per SM
    attention4_body<HD, NTQ, NW>(A, blockIdx.z);
}
template <int HD, int NTQ, int NW>
__global__ void __launch_bounds__(NW * 32, NW == 8 ? 2 : 1) attention4_spans_kernel(const __grid_constant__ att2_span_args S) {
    attention4_body<HD, NTQ, NW>(span_call(S, S.z_span[blockIdx.z]), S.z_in_span[blockIdx.z]);
}
template <int NV4>
__global__ void attention2_combine_spans_kernel(const __grid_constant__ att2_span_args S) {
    pdl_enter();
    const int nh = S.A.a.n_heads, wid = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (wid >= S.n_rows * nh) return;
    const int i = S.prow_span[wid / nh];
    attention2_combine_row<NV4>(span_call(S, i), wid - S.sp[i].prow0 * nh, lane);
}

// What a v2 / v3 / v4 launch runs over: one call (A), or the spans of a batch (S != NULL).
struct att_launch { const att2_args *A; const att2_span_args *S; dim3 grid; };

// The combine of a v2 / v3 / v4 launch (NV4: float4 slots per lane of a head vector).
template <int NV4>
static void attention2_combine_launch(cuda_impl *c, const att_launch &L) {
    if (ablated("combine")) return;
    if (L.S) launch_k(c, "attention combine", attention2_combine_spans_kernel<NV4>, dim3((unsigned)((L.S->n_rows * L.S->A.a.n_heads + 3) / 4)), dim3(128), 0, *L.S);
    else launch_k(c, "attention combine", attention2_combine_kernel<NV4>, dim3((unsigned)((L.A->a.n_q * L.A->a.n_heads + 3) / 4)), dim3(128), 0, *L.A);
}

// 0: v1 (BS_CUDA_ATT=old), 1: v2 (BS_CUDA_ATT=v2), 2: v3 where the head dim has it (default), 3: v4
// (BS_CUDA_ATT=v4) where the head dim has it
static int att_variant(void) {
    static int v = -1;
    if (v < 0) v = bs_tuning_get()->cuda_att;
    return v;
}

// Rows of a v2 / v3 / v4 block: blocks of qv_per_block query vectors (whole rows, or one row's group in
// several passes).
static int rows_per_block(int G, int qv_per_block) { return G >= qv_per_block ? 1 : qv_per_block / G; }

// v2 / v3 / v4 launch arguments of one call: partials in the attention workspace, grid (kv heads, splits, row groups).
static att2_args att2_setup(cuda_impl *c, float *out, const att_args &a0, int qv_per_block, dim3 *grid) {
    att2_args A;
    A.a = a0;
    const int G = a0.n_heads / a0.n_kv;
    A.rows_per_z = rows_per_block(G, qv_per_block);
    A.gsh = (G & (G - 1)) == 0 ? __builtin_ctz((unsigned)G) : -1;
    const size_t R = (size_t)a0.n_q * a0.n_heads;
    A.ml = c->att_ws;
    A.acc = c->att_ws + ((ATT_SPLITS * R * 2 + 3) & ~(size_t)3);
    A.out = out;
    A.R = (int)R; A.row_base = 0;
    *grid = dim3(a0.n_kv, ATT_SPLITS, (a0.n_q + A.rows_per_z - 1) / A.rows_per_z);
    return A;
}

// A span launch's arguments (S->A.a: the shapes, the batch's q; S->sp, n_rows: its spans, filled by the
// caller) for blocks of qv_per_block query vectors: the row groups of every span, the partials.
static void spans_setup(cuda_impl *c, att2_span_args *S, int n_spans, float *out, int qv_per_block, dim3 *grid) {
    att2_args &A = S->A;
    const int G = A.a.n_heads / A.a.n_kv;
    A.rows_per_z = rows_per_block(G, qv_per_block);
    A.gsh = (G & (G - 1)) == 0 ? __builtin_ctz((unsigned)G) : -1;
    const size_t R = (size_t)S->n_rows * A.a.n_heads;
    A.ml = c->att_ws;
    A.acc = c->att_ws + ((ATT_SPLITS * R * 2 + 3) & ~(size_t)3);
    A.out = out;
    A.R = (int)R; A.row_base = 0;
    int z = 0;
    for (int i = 0; i < n_spans; i++) {
        for (int r = 0; r < S->sp[i].n; r++) S->prow_span[S->sp[i].prow0 + r] = (unsigned char)i;
        for (int g = 0; g * A.rows_per_z < S->sp[i].n; g++, z++) { S->z_span[z] = (unsigned char)i; S->z_in_span[z] = (unsigned char)g; }
    }
    *grid = dim3(A.a.n_kv, ATT_SPLITS, z);
}

// The launch of one call or a span batch for a kernel pair (single, spans) with smem bytes of shared memory.
template <typename K1, typename K2>
static void att_launch_kernels(cuda_impl *c, const att_launch &L, K1 one, K2 spans, dim3 block, size_t smem) {
    if (L.S) launch_k(c, "attention", spans, L.grid, block, smem, *L.S);
    else launch_k(c, "attention", one, L.grid, block, smem, *L.A);
}

// Each variant's launch over L (its grid set by att2_setup or spans_setup for the variant's block size).
template <int HD>
static void attention3_launch(cuda_impl *c, const att_launch &L) {
    static size_t smem_set = 48 * 1024;
    size_t smem = sizeof(float) * (4 * ATT_CHUNK * (HD + 4) + (size_t)AT3_QV * (HD + 4));
    if (smem > smem_set) {
        CK(cudaFuncSetAttribute(attention3_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        CK(cudaFuncSetAttribute(attention3_spans_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        smem_set = smem;
    }
    att_launch_kernels(c, L, attention3_kernel<HD>, attention3_spans_kernel<HD>, dim3(AT3_WARPS * 32), smem);
    attention2_combine_launch<(HD + 127) / 128>(c, L);
}

template <int HD, int NTQ, int NW>
static void attention4_launch(cuda_impl *c, const att_launch &L) {
    static size_t smem_set = 48 * 1024;
    const size_t smem = sizeof(float) * attention4_smem_floats<HD, NTQ>();
    if (smem > smem_set) {
        CK(cudaFuncSetAttribute(attention4_kernel<HD, NTQ, NW>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        CK(cudaFuncSetAttribute(attention4_spans_kernel<HD, NTQ, NW>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        smem_set = smem;
    }
    att_launch_kernels(c, L, attention4_kernel<HD, NTQ, NW>, attention4_spans_kernel<HD, NTQ, NW>, dim3(NW * 32), smem);
    attention2_combine_launch<(HD + 127) / 128>(c, L);
}

template <int NV4, int HDC>
static void attention2_launch(cuda_impl *c, const att_launch &L) {
    static size_t smem_set = 48 * 1024;
    const int hd = (L.S ? L.S->A : *L.A).a.hd;
    size_t smem = sizeof(float) * (4 * ATT_CHUNK * (hd + 4) + (size_t)AT2_QV * hd);
    if (smem > smem_set) {
        CK(cudaFuncSetAttribute(attention2_kernel<NV4, HDC>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        CK(cudaFuncSetAttribute(attention2_spans_kernel<NV4, HDC>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        smem_set = smem;
    }
    att_launch_kernels(c, L, attention2_kernel<NV4, HDC>, attention2_spans_kernel<NV4, HDC>, dim3(AT2_WARPS * 32), smem);
    attention2_combine_launch<NV4>(c, L);
}

// The v2 / v3 / v4 kernel for this head size and variant, over one call (S NULL: a0, its output out) or a
// span batch (S: filled but for the setup, out: the batch's output). max_qv: the most query vectors of
// one call (one span) of it, which picks v4's tile.
static void attention_v2plus(cuda_impl *c, float *out, const att_args &a0, att2_span_args *S, int n_spans, int max_qv) {
    const int hd = a0.hd, v = att_variant();
    static int ntq = -1;
    if (ntq < 0) ntq = bs_tuning_get()->cuda_at4_ntq;
    int qv_block, kind;   // kind: 4 v4, 3 v3, 2 v2
    if (v == 3 && (hd == 128 || hd == 64)) { kind = 4; qv_block = max_qv <= 8 ? 8 : ntq == 4 ? 32 : 64; }
    else if (v >= 2 && (hd == 128 || hd == 64)) { kind = 3; qv_block = AT3_QV; }
    else { kind = 2; qv_block = AT2_QV; }
    att2_args A1;
    att_launch L;
    L.A = NULL; L.S = S;
    if (S) spans_setup(c, S, n_spans, out, qv_block, &L.grid);
    else { A1 = att2_setup(c, out, a0, qv_block, &L.grid); L.A = &A1; }
    if (kind == 4) {
        // NTQ 1 (4 warps) for at most 8 query vectors, else NTQ 8 (BS_CUDA_AT4_NTQ=4: NTQ 4); the bits do not depend on it
        if (hd == 128) { if (qv_block == 8) attention4_launch<128, 1, 4>(c, L); else if (qv_block == 32) attention4_launch<128, 4, 4>(c, L); else attention4_launch<128, 8, 8>(c, L); }
        else { if (qv_block == 8) attention4_launch<64, 1, 4>(c, L); else if (qv_block == 32) attention4_launch<64, 4, 4>(c, L); else attention4_launch<64, 8, 8>(c, L); }
    } else if (kind == 3) {
        if (hd == 128) attention3_launch<128>(c, L); else attention3_launch<64>(c, L);
    } else if (hd == 128) attention2_launch<1, 128>(c, L);
    else if (hd == 64) attention2_launch<1, 64>(c, L);
    else if (hd == 256) attention2_launch<2, 256>(c, L);
    else if (hd <= 128) attention2_launch<1, 0>(c, L);
    else attention2_launch<2, 0>(c, L);
}

// Whether the kernels take this shape (else the op declines: the backend's fault, backend.h).
static bool att_shape_ok(cuda_impl *c, int n_heads, int n_kv, int hd) {
    if (hd <= ATT_MAX_HD && hd % 4 == 0 && n_heads % n_kv == 0) return true;
    bs_backend_fail(c->be, "CUDA attention: head_dim %d / heads %d/%d unsupported (head_dim a multiple of 4, <= %d; heads a multiple of kv heads)", hd,
                    n_heads, n_kv, ATT_MAX_HD);
    return false;
}

// K/V rows below a causal call's q_pos0 may load before the kernel's PDL wait when they cannot still be in
// flight: the attention is causal (the model's forward: rows below q_pos0 come from earlier forwards, rows
// from q_pos0 on are this forward's) and the kernel before it waited for its own predecessor before
// letting this one start (qk_norm_rope_store, c->kv_settled), so every kernel of earlier forwards has
// completed. Pages do not change that: a sequence's rows below q_pos0 sit in pages only it holds.
// BS_CUDA_ATT_EARLY=0 turns it off (A/B).
static bool early_loads(cuda_impl *c) {
    static int early_on = -1;
    if (early_on < 0) early_on = bs_tuning_get()->cuda_att_early;
    return c->kv_settled && early_on;
}

// Heads wider than ATT_MAX_HD (Gemma-4's 512-wide full-attention heads): a plain kernel, one block of 256
// threads per (query row, head), an online softmax over its key range, each thread holding hd / 256 of the
// head's dimensions. Slow (a block reduction per key) but general; every narrower head takes the kernels above.
#define ATT_WIDE_MAX_HD 2048
__global__ void __launch_bounds__(256) attention_wide_kernel(att_args a, float *out) {
    pdl_enter();
    __shared__ float sh[8];
    const int i = blockIdx.x, h = blockIdx.y, hd = a.hd, kh = h / (a.n_heads / a.n_kv), t = threadIdx.x;
    const int nk = pv(a.n_keys), qp0 = pv(a.q_pos0);
    int lo, hi;
    key_range(a, i, nk, qp0, lo, hi);
    const float *q = a.q + ((size_t)i * a.n_heads + h) * hd;
    float qv[ATT_WIDE_MAX_HD / 256], acc[ATT_WIDE_MAX_HD / 256];
#pragma unroll
    for (int u = 0; u < ATT_WIDE_MAX_HD / 256; u++) { int d = t + 256 * u; qv[u] = d < hd ? q[d] : 0.f; acc[u] = 0.f; }
    float m = -INFINITY, l = 0.f;
    for (int j = lo; j < hi; j++) {
        const size_t row = (kv_row(a, j) * a.n_kv + kh) * hd;
        float s = 0.f;
#pragma unroll
        for (int u = 0; u < ATT_WIDE_MAX_HD / 256; u++) { int d = t + 256 * u; if (d < hd) s += qv[u] * a.k[row + d]; }
        for (int off = 16; off; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        __syncthreads();
        if ((t & 31) == 0) sh[t >> 5] = s;
        __syncthreads();
        s = 0.f;
        for (int w = 0; w < 8; w++) s += sh[w];
        s *= a.scale;
        float mn = fmaxf(m, s), corr = expf(m - mn), p = expf(s - mn);
        l = l * corr + p;
#pragma unroll
        for (int u = 0; u < ATT_WIDE_MAX_HD / 256; u++) { int d = t + 256 * u; if (d < hd) acc[u] = acc[u] * corr + p * a.v[row + d]; }
        m = mn;
    }
    float inv = l > 0.f ? 1.0f / l : 0.f;
#pragma unroll
    for (int u = 0; u < ATT_WIDE_MAX_HD / 256; u++) { int d = t + 256 * u; if (d < hd) out[((size_t)i * a.n_heads + h) * hd + d] = acc[u] * inv; }
}

static void attention_wide(cuda_impl *c, float *out, const float *q, const bs_kv_view *kv, int n_q, int n_heads, int n_kv, int hd, int n_keys,
                           int q_pos0, int causal, int window) {
    if (hd > ATT_WIDE_MAX_HD || n_kv <= 0 || n_heads % n_kv)
        CU_DECLINE(c, "attention: head_dim %d with %d/%d heads unsupported (at most %d)", hd, n_heads, n_kv, ATT_WIDE_MAX_HD);
    att_args a;
    memset(&a, 0, sizeof a);
    a.q = q; a.k = kv->k; a.v = kv->v; a.pages = kv->pages; a.page_rows = kv->page_rows;
    a.n_q = n_q; a.n_heads = n_heads; a.n_kv = n_kv; a.hd = hd; a.causal = causal; a.window = window;
    a.n_keys = P(c, n_keys); a.q_pos0 = P(c, q_pos0); a.old_keys = P(c, 0); a.scale = 1.0f / sqrtf((float)hd);
    launch_k(c, "attention wide", attention_wide_kernel, dim3(n_q, n_heads), dim3(256), 0, a, out);
}

void cu_attention(bs_backend *be, float *out, const float *q, const bs_kv_view *kv, int n_q, int n_heads,
                  int n_kv, int hd, int n_keys, int q_pos0, int causal, int window) {
    cuda_impl *c = CI(be);
    if (n_q > 0 && hd > ATT_MAX_HD && !ablated("att")) { attention_wide(c, out, q, kv, n_q, n_heads, n_kv, hd, n_keys, q_pos0, causal, window); return; }
    if (n_q <= 0 || ablated("att") || !att_shape_ok(c, n_heads, n_kv, hd)) return;
    if (kv->pages && kv->page_rows % ATT_CHUNK) CU_DECLINE(c, "attention: K/V pages of %d rows (a multiple of %d needed)", kv->page_rows, ATT_CHUNK);
    size_t smem = sizeof(float) * (2 * ATT_CHUNK * (hd + 4) + 2 * ATT_QV * hd + 2 * ATT_QV);
    static size_t smem_set = 48 * 1024;
    if (smem > smem_set) { CK(cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)); smem_set = smem; }
    const int RB = 64;   // query rows per launch
    if (ensure_ws(c, &c->att_ws, &c->att_ws_bytes, sizeof(float) * (ATT_SPLITS * (size_t)(n_q < RB ? n_q : RB) * n_heads * (hd + 2) + 4))) return;
    posarg old_keys = { 0, NULL };
    if (causal && early_loads(c)) old_keys = P(c, q_pos0);
    const float *k = kv->k, *v = kv->v;
    const bool v2 = att_variant() && ((uintptr_t)q & 15) == 0 && ((uintptr_t)k & 15) == 0 && ((uintptr_t)v & 15) == 0 && ((uintptr_t)out & 15) == 0;
    for (int r = 0; r < n_q; r += RB) {
        int nq = n_q - r < RB ? n_q - r : RB;
        att_args a;
        a.q = q + (size_t)r * n_heads * hd; a.k = k; a.v = v; a.part = c->att_ws;
        a.pages = kv->pages; a.page_rows = kv->page_rows;
        a.n_q = nq; a.n_heads = n_heads; a.n_kv = n_kv; a.hd = hd; a.causal = causal; a.window = window;
        a.n_keys = P(c, n_keys); a.q_pos0 = P(c, q_pos0 + r); a.scale = 1.0f / sqrtf((float)hd);
        a.old_keys = old_keys;
        if (v2) { attention_v2plus(c, out + (size_t)r * n_heads * hd, a, NULL, 0, nq * (n_heads / n_kv)); continue; }
        launch_flags_clear(c);
        attention_kernel<<<dim3(n_kv, ATT_SPLITS), 128, smem, c->st>>>(a);
        LAUNCHED("attention");
        int rows = nq * n_heads;
        attention_combine_kernel<<<(rows + 3) / 4, 128, 0, c->st>>>(out + (size_t)r * n_heads * hd, c->att_ws, rows, hd, a);
        LAUNCHED("attention combine");
    }
}

// The native span attention (backend.h attention_spans): the spans of a forward chunk in one launch (and one
// combine), each block reading its span's page table; a row's result is the one cu_attention gives its span.
// One span (a lone sequence's forward, which is recorded as a graph: its positions must be position
// arguments), a recording, the v1 kernel (BS_CUDA_ATT=old), unaligned buffers and spans of more than
// ATT_MAX_SPANS rows go through cu_attention per span instead.
void cu_attention_spans(bs_backend *be, float *out, const float *q, const bs_row_span *spans, int n_spans, int n_heads, int n_kv, int hd) {
    cuda_impl *c = CI(be);
    const size_t qw = (size_t)n_heads * hd;
    if (hd > ATT_MAX_HD) {   // wide heads: per span (cu_attention's wide kernel)
        for (int i = 0; i < n_spans; i++)
            cu_attention(be, out + spans[i].row0 * qw, q + spans[i].row0 * qw, &spans[i].kv, spans[i].n, n_heads, n_kv, hd, spans[i].pos0 + spans[i].n,
                         spans[i].pos0, 1, 0);
        return;
    }
    if (n_spans <= 0 || ablated("att") || !att_shape_ok(c, n_heads, n_kv, hd)) return;
    bool together = n_spans > 1 && !c->capturing && att_variant() && ((uintptr_t)q & 15) == 0 && ((uintptr_t)out & 15) == 0;
    for (int i = 0; i < n_spans && together; i++) {
        const bs_kv_view *kv = &spans[i].kv;
        together = ((uintptr_t)kv->k & 15) == 0 && ((uintptr_t)kv->v & 15) == 0 && (!kv->pages || kv->page_rows % ATT_CHUNK == 0);
    }
    for (int i = 0; i < n_spans;) {
        const bs_row_span *s0 = &spans[i];
        if (!together || s0->n > ATT_MAX_SPANS) {
            cu_attention(be, out + s0->row0 * qw, q + s0->row0 * qw, &s0->kv, s0->n, n_heads, n_kv, hd, s0->pos0 + s0->n, s0->pos0, 1, 0);
            i++;
            continue;
        }
        // the spans from i on that fit one launch's ATT_MAX_SPANS query rows
        att2_span_args S;   // ~3 KB of kernel parameters (a launch copies them)
        memset(&S, 0, sizeof S);
        int n = 0, rows = 0, max_qv = 0;
        for (; i < n_spans && spans[i].n <= ATT_MAX_SPANS - rows; i++, n++) {
            const bs_row_span *sp = &spans[i];
            S.sp[n] = att_span{ sp->kv.k, sp->kv.v, sp->kv.pages, sp->kv.page_rows, sp->row0, sp->n, sp->pos0, rows };
            rows += sp->n;
            if (sp->n * (n_heads / n_kv) > max_qv) max_qv = sp->n * (n_heads / n_kv);
        }
        if (ensure_ws(c, &c->att_ws, &c->att_ws_bytes, sizeof(float) * (ATT_SPLITS * (size_t)rows * n_heads * (hd + 2) + 4))) return;
        S.n_rows = rows;
        S.early = early_loads(c);
        att_args &a = S.A.a;
        a.q = q; a.part = c->att_ws;
        a.n_heads = n_heads; a.n_kv = n_kv; a.hd = hd; a.causal = 1; a.window = 0; a.scale = 1.0f / sqrtf((float)hd);
        attention_v2plus(c, out, a, &S, n, max_qv);
    }
}
