// Sampling on the device: the backend ops sample_rows (processed distributions and draws) and
// accept_sampled (the speculative acceptance test and the residual or bonus draw). Without them a
// sampled step downloads every logits row (0.6 MB at a 151,936-token vocabulary) and processes it on
// the host; with them it downloads the drawn ids.
//
// The semantics are the host sampler's (src/spec/sampler.c, src/spec/verify.c): temperature, then top-k
// (ties with the k-th value kept), then top-p (the most probable tokens until their mass reaches top_p,
// ties kept), renormalised; draws are the inverse CDF in index order at u * total. The arithmetic is
// not the host's bit for bit (sums run in another order), so a device distribution matches the host's
// to rounding, and a draw can differ only where u * total falls within rounding of a CDF step.
//
// A row is split over a cluster of 8 blocks of 1024 threads (8 SMs; Hopper thread-block clusters), each
// block a contiguous eighth of it; blocks combine their partial results through distributed shared
// memory, always in block-rank order. The row itself (probs, in L2) is the working memory:
//   - every reduction is a fixed shuffle tree, and histograms count with integer atomics (mass in
//     2^-50 fixed point), so a row's result is the same bits on every run: a seeded run repeats;
//   - top-k and top-p find their thresholds by radix selection over the float bits (positive floats
//     order like their bit patterns): 4 histogram passes of 8 bits each, no sort. The mass histograms
//     are exact integers, so each narrower level sums to exactly the bin it refines and the crossing
//     bin always exists.
#include <limits.h>
#include <cooperative_groups.h>
#include "backend/cuda/cuda_internal.cuh"

namespace cg = cooperative_groups;

#define SR_THREADS 1024
#define SR_CLUSTER 8        // blocks per row
#define SR_MAX_ROWS 64
struct sr_uniforms { double u[SR_MAX_ROWS + 1]; };
struct sr_drafts { int d[SR_MAX_ROWS]; };

struct sr_shared {
    unsigned long long h[16][256];   // histograms (counts or fixed-point mass), per warp pair
    unsigned long long merged[256];  // this block's histogram (read by the cluster's blocks)
    unsigned long long total[256];   // the cluster's: the blocks' merged, summed in rank order
    double cd; float cf; int ci;     // one value per block, read by the cluster's blocks
    double d[33];
    float f[33];
    int i[33];
    unsigned prefix;
    unsigned long long above;
    long long k_left;
    int flag;
};

// Reductions over the block (1024 threads): the same shuffle tree on every run. Every thread gets the result.
template <typename T, typename Op>
__device__ T sr_reduce(T v, T *sh, Op op) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        v = sh[lane];
#pragma unroll
        for (int o = 16; o; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (lane == 0) sh[32] = v;
    }
    __syncthreads();
    return sh[32];
}
// One pass over a row, thread t taking t, t + 1024, ...: U loads issued before any of them is used. A
// plain loop is latency-bound here: with probs aliasing logits (in place) the compiler cannot move a
// load above the previous element's store, so every element waited a full L2 round trip.
template <int U = 8, typename Load, typename Op>
__device__ __forceinline__ void sr_pass_fn(int V, Load load, Op op) {
    for (int base = threadIdx.x; base < V; base += U * SR_THREADS) {
        float v[U];
#pragma unroll
        for (int j = 0; j < U; j++) { const int i = base + j * SR_THREADS; v[j] = i < V ? load(i) : 0.0f; }
#pragma unroll
        for (int j = 0; j < U; j++) { const int i = base + j * SR_THREADS; if (i < V) op(i, v[j]); }
    }
}

// The same over a row in memory: float4 loads (4 issued before any is used) where the row allows
// (V % 4 == 0, 16-byte aligned; else the scalar pass). Thread t takes the float4s t, t + 1024, ...
template <typename Op>
__device__ __forceinline__ void sr_pass(int V, const float *src, Op op) {
    if ((V & 3) || ((uintptr_t)src & 15)) { sr_pass_fn<8>(V, [&](int i) { return src[i]; }, op); return; }
    const int V4 = V >> 2;
    const float4 *s4 = (const float4 *)src;
    for (int base = threadIdx.x; base < V4; base += 4 * SR_THREADS) {
        float4 v[4];
#pragma unroll
        for (int j = 0; j < 4; j++) { const int i = base + j * SR_THREADS; v[j] = i < V4 ? s4[i] : make_float4(0.f, 0.f, 0.f, 0.f); }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int i = base + j * SR_THREADS;
            if (i < V4) { op(4 * i, v[j].x); op(4 * i + 1, v[j].y); op(4 * i + 2, v[j].z); op(4 * i + 3, v[j].w); }
        }
    }
}

// dst[i] = fn(i, src[i]) over a row (dst may be src), float4 loads and stores where the row allows:
// per-element stores from a float4 load would each touch four lines.
template <typename Fn>
__device__ __forceinline__ void sr_map(int V, const float *src, float *dst, Fn fn) {
    if ((V & 3) || (((uintptr_t)src | (uintptr_t)dst) & 15)) {
        sr_pass_fn<8>(V, [&](int i) { return src[i]; }, [&](int i, float x) { dst[i] = fn(i, x); });
        return;
    }
    const int V4 = V >> 2;
    const float4 *s4 = (const float4 *)src;
    float4 *d4 = (float4 *)dst;
    for (int base = threadIdx.x; base < V4; base += 4 * SR_THREADS) {
        float4 v[4];
#pragma unroll
        for (int j = 0; j < 4; j++) { const int i = base + j * SR_THREADS; v[j] = i < V4 ? s4[i] : make_float4(0.f, 0.f, 0.f, 0.f); }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int i = base + j * SR_THREADS;
            if (i < V4) d4[i] = make_float4(fn(4 * i, v[j].x), fn(4 * i + 1, v[j].y), fn(4 * i + 2, v[j].z), fn(4 * i + 3, v[j].w));
        }
    }
}

struct sr_add { template <typename T> __device__ T operator()(T a, T b) const { return a + b; } };
struct sr_max { __device__ float operator()(float a, float b) const { return fmaxf(a, b); } };
struct sr_imax { __device__ int operator()(int a, int b) const { return a > b ? a : b; } };
struct sr_imin { __device__ int operator()(int a, int b) const { return a < b ? a : b; } };

// Exclusive prefix sum of v over the threads in index order.
__device__ double sr_exclusive_scan(double v, double *sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    double incl = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) { double t = __shfl_up_sync(0xffffffffu, incl, o); if (lane >= o) incl += t; }
    __syncthreads();
    if (lane == 31) sh[w] = incl;
    __syncthreads();
    if (w == 0) {
        double t = sh[lane], s = t;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) { double u = __shfl_up_sync(0xffffffffu, s, o); if (lane >= o) s += u; }
        sh[lane] = s - t;   // exclusive over the warps
    }
    __syncthreads();
    return sh[w] + incl - v;
}

// The cluster's blocks combine one value each, in rank order; every thread of every block gets the result.
template <typename T, typename Op>
__device__ T sr_cluster_combine(T block_value, T *slot, Op op) {
    cg::cluster_group cl = cg::this_cluster();
    if (threadIdx.x == 0) *slot = block_value;
    cl.sync();
    T r = *cl.map_shared_rank(slot, 0);
    for (int b = 1; b < SR_CLUSTER; b++) r = op(r, *cl.map_shared_rank(slot, b));
    cl.sync();   // no block rewrites its slot before every block has read it
    return r;
}
// A reduction over the whole row: the block's tree, then the cluster's blocks in rank order.
template <typename T, typename Op>
__device__ T sr_all(T v, T *sh, T *slot, Op op) { return sr_cluster_combine(sr_reduce(v, sh, op), slot, op); }

// This block's slice of a row: [lo, lo + n), lo a multiple of 4 (float4 passes stay aligned).
struct sr_slice { int lo, n; };
__device__ __forceinline__ sr_slice sr_my_slice(int V) {
    const int per = (V + 4 * SR_CLUSTER - 1) / (4 * SR_CLUSTER) * 4;
    const int lo = min(V, (int)cg::this_cluster().block_rank() * per), hi = min(V, lo + per);
    return { lo, hi - lo };
}

// The inverse CDF of the weights value(i) >= 0 over the row (i global; this block holds the slice sl)
// at u * (their total), in index order; the last positive weight when rounding leaves u * total past the
// end. Thread t of a block sums its contiguous part of the block's slice; the parts' sums are scanned in
// thread order, the blocks' in rank order, and the part holding the point is walked.
template <typename F>
__device__ int sr_draw(F value, sr_slice sl, double u, sr_shared &S) {
    const int seg = (sl.n + SR_THREADS - 1) / SR_THREADS;
    const int lo = sl.lo + min(sl.n, (int)threadIdx.x * seg), hi = sl.lo + min(sl.n, ((int)threadIdx.x + 1) * seg);
    double own = 0; int last = -1;
    for (int i0 = lo; i0 < hi; i0 += 8) {
        float x[8];
#pragma unroll
        for (int j = 0; j < 8; j++) x[j] = i0 + j < hi ? value(i0 + j) : 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) if (x[j] > 0) { own += x[j]; last = i0 + j; }
    }
    const double excl = sr_exclusive_scan(own, S.d);
    const double block_total = sr_reduce(own, S.d, sr_add());
    // The blocks' totals: the sum of those before this one, and of all, in rank order.
    cg::cluster_group cl = cg::this_cluster();
    if (threadIdx.x == 0) S.cd = block_total;
    cl.sync();
    double before = 0, total = 0;
    for (int b = 0; b < SR_CLUSTER; b++) {
        if (b == (int)cl.block_rank()) before = total;
        total += *cl.map_shared_rank(&S.cd, b);
    }
    cl.sync();
    const int last_all = sr_all(last, S.i, &S.ci, sr_imax());
    const double target = u * total, start = before + excl;
    int pick = INT_MAX;
    if (own > 0 && target >= start && target < start + own) {
        double acc = start; pick = last;
        for (int i = lo; i < hi; i++) {
            float x = value(i);
            if (x <= 0) continue;
            acc += x;
            if (target < acc) { pick = i; break; }
        }
    }
    // Neighbouring parts can both claim a point within rounding of their border: the first one wins.
    pick = sr_all(pick, S.i, &S.ci, sr_imin());
    return pick != INT_MAX ? pick : last_all < 0 ? 0 : last_all;
}

// Order-preserving key of a float (for top-k over possibly negative scaled logits).
__device__ __forceinline__ unsigned sr_key(float f) { unsigned b = __float_as_uint(f); return b & 0x80000000u ? ~b : b | 0x80000000u; }
__device__ __forceinline__ float sr_unkey(unsigned k) { return __uint_as_float(k & 0x80000000u ? k & 0x7fffffffu : ~k); }

// Clears the histograms, adds weight(x) (type W) to bin(x) for every element x of this block's slice with
// bin(x) >= 0 (shared-memory atomics into this warp pair's copy), merges the copies into S.merged and the
// cluster's blocks' S.merged into S.total. A pass's
// cost is its atomics, not its loads: measured on the H200 (one row, 151,936 tokens), top-k 20's four
// levels cost ~45 us with 32-bit counts and ~330 us with 64-bit ones, so counts are 32-bit; top-p's
// masses need 64 bits (2^-31 fixed point in 32 bits was ~1.7x faster but moved tokens of p ~ 7e-8 across
// the threshold at top_p 0.999). Summing a warp's equal bins first (__match_any_sync) was slower.
template <typename W, typename Bin, typename Wt>
__device__ void sr_histogram_merged(int n, const float *src, Bin bin, Wt weight, sr_shared &S) {
    W *const all = (W *)&S.h[0][0], *h = all + (threadIdx.x >> 6) * 256;
    for (int i = threadIdx.x; i < 16 * 256; i += SR_THREADS) all[i] = 0;
    __syncthreads();
    sr_pass(n, src, [&](int, float x) { const int bn = bin(x); if (bn >= 0) atomicAdd(&h[bn], (W)weight(x)); });
    __syncthreads();
    if (threadIdx.x < 256) {
        unsigned long long m = 0;
        for (int q = 0; q < 16; q++) m += all[q * 256 + threadIdx.x];
        S.merged[threadIdx.x] = m;
    }
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    if (threadIdx.x < 256) {
        unsigned long long m = 0;
        for (int b = 0; b < SR_CLUSTER; b++) m += cl.map_shared_rank(S.merged, b)[threadIdx.x];
        S.total[threadIdx.x] = m;
    }
    cl.sync();   // S.total is complete, and no block clears S.merged before the others have read it
}

// The k-th largest of the row (1 <= k < V; this block holds p[0..n) of it), by four 8-bit radix levels
// over sr_key.
__device__ float sr_kth_largest(const float *p, int n, int k, sr_shared &S) {
    unsigned prefix = 0;
    for (int level = 0; level < 4; level++) {
        const int shift = 24 - 8 * level;
        sr_histogram_merged<unsigned>(n, p, [&](float x) {
            const unsigned key = sr_key(x);
            return level == 0 || key >> (shift + 8) == prefix ? (int)((key >> shift) & 255) : -1;
        }, [](float) { return 1u; }, S);
        if (threadIdx.x == 0) {
            long long left = level == 0 ? k : S.k_left;
            int b = 255;
            for (; b > 0; b--) { if ((long long)S.total[b] >= left) break; left -= (long long)S.total[b]; }
            S.k_left = left;
            S.prefix = (prefix << 8) | (unsigned)b;
        }
        __syncthreads();
        prefix = S.prefix;
    }
    return sr_unkey(prefix);
}

// The smallest probability top-p keeps (0: keep every token): the value where the mass counted from the
// most probable token down first reaches top_p. Levels over the bits of positive floats: 30..23,
// 22..15, 14..7, 6..0; masses in 2^-50 fixed point (a token rounds by at most 2^-51: the mass counted
// at the crossing is within V 2^-51 of the exact sum).
__device__ float sr_top_p_threshold(const float *p, int n, float top_p, sr_shared &S) {
    const unsigned long long T = (unsigned long long)((double)top_p * 0x1p50);
    const int shifts[4] = { 23, 15, 7, 0 }, widths[4] = { 8, 8, 8, 7 };
    unsigned prefix = 0;
    for (int level = 0; level < 4; level++) {
        const int shift = shifts[level], width = widths[level];
        sr_histogram_merged<unsigned long long>(n, p, [&](float x) {
            const unsigned b = __float_as_uint(x);
            return x > 0 && (level == 0 || b >> (shift + width) == prefix) ? (int)((b >> shift) & ((1u << width) - 1)) : -1;
        }, [](float x) { return (unsigned long long)__double2ull_rn((double)x * 0x1p50); }, S);
        if (threadIdx.x == 0) {
            unsigned long long above = level == 0 ? 0 : S.above;
            int b = (1 << width) - 1;
            for (; b >= 0; b--) { if (above + S.total[b] >= T) break; above += S.total[b]; }
            // Level 0 never reaching top_p: the total is short of it by rounding, keep everything. A
            // narrower level always reaches it (its bins sum exactly to the bin it refines).
            S.flag = b < 0;
            S.above = above;
            S.prefix = (prefix << width) | (unsigned)(b < 0 ? 0 : b);
        }
        __syncthreads();
        if (S.flag) return 0.0f;
        prefix = S.prefix;
    }
    return __uint_as_float(prefix);
}

// Row blockIdx.y, its slice blockIdx.x of SR_CLUSTER.
__global__ void __launch_bounds__(SR_THREADS) __cluster_dims__(SR_CLUSTER, 1, 1)
sr_rows_kernel(float *probs, const float *logits, int V, float temperature, int top_k, float top_p, sr_uniforms U, int *ids) {
    __shared__ sr_shared S;
    const int r = blockIdx.y;
    const sr_slice sl = sr_my_slice(V);
    const bool first = cg::this_cluster().block_rank() == 0 && threadIdx.x == 0;
    const float *l = logits + (size_t)r * V + sl.lo;
    float *p = probs + (size_t)r * V + sl.lo;
    const int n = sl.n;
    if (temperature <= 0) {   // greedy: one-hot at the argmax (first index on ties)
        float bv = -INFINITY; int bi = INT_MAX;
        sr_pass(n, l, [&](int i, float v) { if (v > bv || bi == INT_MAX) { bv = v; bi = sl.lo + i; } });
        const float mv = sr_all(bv, S.f, &S.cf, sr_max());
        const int best = sr_all(bv == mv ? bi : INT_MAX, S.i, &S.ci, sr_imin());
        for (int i = threadIdx.x; i < n; i += SR_THREADS) p[i] = sl.lo + i == best ? 1.0f : 0.0f;   // stores only
        if (ids && first) ids[r] = best == INT_MAX ? 0 : best;
        return;
    }
    const float inv_t = 1.0f / temperature;
    float mx = -INFINITY;
    sr_map(n, l, p, [&](int, float x) { const float v = x * inv_t; mx = fmaxf(mx, v); return v; });
    mx = sr_all(mx, S.f, &S.cf, sr_max());   // its barriers also publish p to the block
    const float cut = top_k > 0 && top_k < V ? sr_kth_largest(p, n, top_k, S) : -INFINITY;
    double sum = 0;
    sr_map(n, p, p, [&](int, float v) { const float e = v >= cut ? expf(v - mx) : 0.0f; sum += e; return e; });
    const float inv = (float)(1.0 / sr_all(sum, S.d, &S.cd, sr_add()));
    sr_map(n, p, p, [&](int, float v) { return v * inv; });
    if (top_p > 0 && top_p < 1) {
        __syncthreads();
        const float thr = sr_top_p_threshold(p, n, top_p, S);
        double fsum = 0;
        sr_map(n, p, p, [&](int, float x) { const float v = x < thr ? 0.0f : x; fsum += v; return v; });
        const float fs = (float)sr_all(fsum, S.d, &S.cd, sr_add());
        sr_map(n, p, p, [&](int, float x) { return x / fs; });
    }
    if (!ids) return;
    __syncthreads();
    const float *row = probs + (size_t)r * V;
    const int t = sr_draw([&](int i) { return row[i]; }, sl, U.u[r], S);
    if (first) ids[r] = t;
}

// Speculative acceptance (bs_accept_sampled_u), one cluster: out[0] = accepted count, out[1] = the
// emitted token.
__global__ void __launch_bounds__(SR_THREADS) __cluster_dims__(SR_CLUSTER, 1, 1)
sr_accept_kernel(const float *p, const float *q, int n, int V, sr_drafts D, const int32_t *dd, sr_uniforms U, int *out) {
    __shared__ sr_shared S;
    int a = n;   // every thread decides the same (the same n values)
    for (int k = 0; k < n; k++) {
        const int d = dd ? dd[k] : D.d[k];   // drafts in device memory (accept_sampled_to) or in the arguments
        const float px = p[(size_t)k * V + d], qx = q ? q[(size_t)k * V + d] : 1.0f;
        if (U.u[k] * qx < px) continue;
        a = k;
        break;
    }
    const sr_slice sl = sr_my_slice(V);
    const float *pa = p + (size_t)a * V, *qa = q && a < n ? q + (size_t)a * V : NULL;
    const int da = a < n ? (dd ? dd[a] : D.d[a]) : -1;
    auto residual = [&](int i) { const float r = pa[i] - (qa ? qa[i] : (i == da ? 1.0f : 0.0f)); return r > 0 ? r : 0.0f; };
    bool use_residual = false;
    if (a < n) {
        double m = 0;
        sr_pass_fn(sl.n, [&](int i) { return residual(sl.lo + i); }, [&](int, float r) { m += r; });
        use_residual = sr_all(m, S.d, &S.cd, sr_add()) > 1e-8;
    }
    const int t = use_residual ? sr_draw(residual, sl, U.u[n], S) : sr_draw([&](int i) { return pa[i]; }, sl, U.u[n], S);
    if (cg::this_cluster().block_rank() == 0 && threadIdx.x == 0) { out[0] = a; out[1] = t; }
}

static void ids_download(cuda_impl *c, int32_t *host, int n) {
    CK(cudaMemcpyAsync(c->h_argmax, c->d_argmax, sizeof(int32_t) * n, cudaMemcpyDeviceToHost, c->st));
    CK(cudaStreamSynchronize(c->st));
    memcpy(host, c->h_argmax, sizeof(int32_t) * n);
    ids_sane(c, host, n);
}

// Rows in launches of SR_MAX_ROWS; the draws (when u is given) go to ids_dev (device memory) or, with
// ids_dev NULL and ids_host given, to the host through the backend's download buffer.
static void sr_rows(cuda_impl *c, float *probs, const float *logits, int n, int V, float temperature, int top_k, float top_p,
                    const double *u, int32_t *ids_dev, int32_t *ids_host) {
    launch_flags_clear(c);
    for (int r = 0; r < n; r += SR_MAX_ROWS) {
        const int nn = n - r < SR_MAX_ROWS ? n - r : SR_MAX_ROWS;
        sr_uniforms U; memset(&U, 0, sizeof U);
        if (ids_dev || ids_host) for (int i = 0; i < nn; i++) U.u[i] = u[r + i];
        int *ids = ids_dev ? ids_dev + r : ids_host ? c->d_argmax : NULL;
        sr_rows_kernel<<<dim3(SR_CLUSTER, nn), SR_THREADS, 0, c->st>>>(probs + (size_t)r * V, logits + (size_t)r * V, V, temperature, top_k, top_p, U, ids);
        LAUNCHED("sample_rows");
        if (!ids_dev && ids_host) ids_download(c, ids_host + r, nn);
    }
}
int cu_sample_rows(bs_backend *be, float *probs, const float *logits, int n, int V, float temperature, int top_k, float top_p,
                   const double *u, int32_t *ids_host) {
    sr_rows(CI(be), probs, logits, n, V, temperature, top_k, top_p, u, NULL, ids_host);
    return 0;
}
int cu_sample_rows_to(bs_backend *be, float *probs, const float *logits, int n, int V, float temperature, int top_k, float top_p,
                      const double *u, int32_t *ids_dev) {
    sr_rows(CI(be), probs, logits, n, V, temperature, top_k, top_p, u, ids_dev, NULL);
    return 0;
}

// The acceptance kernel with the drafts from the host (copied into the arguments) or from device memory
// (drafts_dev), the verdict (a, next) into out (device memory).
static void accept_launch(cuda_impl *c, const float *p, const float *q, const int32_t *drafts_host, const int32_t *drafts_dev, int n,
                          int V, const double *u, int32_t *out) {
    if (n > SR_MAX_ROWS) CU_DECLINE(c, "accept_sampled: %d drafts (at most %d)", n, SR_MAX_ROWS);
    launch_flags_clear(c);
    sr_drafts D; sr_uniforms U;
    memset(&D, 0, sizeof D); memset(&U, 0, sizeof U);
    for (int k = 0; drafts_host && k < n; k++) D.d[k] = drafts_host[k];
    for (int k = 0; k <= n; k++) U.u[k] = u[k];
    sr_accept_kernel<<<SR_CLUSTER, SR_THREADS, 0, c->st>>>(p, q, n, V, D, drafts_dev, U, out);
    LAUNCHED("accept_sampled");
}
int cu_accept_sampled(bs_backend *be, const float *p, const float *q, const int32_t *drafts, int n, int V, const double *u,
                      int32_t *next_host) {
    cuda_impl *c = CI(be);
    accept_launch(c, p, q, drafts, NULL, n, V, u, c->d_argmax);
    int32_t got[2];
    ids_download(c, got, 2);
    *next_host = got[1];
    return got[0];
}
void cu_accept_sampled_to(bs_backend *be, const float *p, const float *q, const int32_t *drafts_dev, int n, int V, const double *u,
                          int32_t *out_dev) {
    accept_launch(CI(be), p, q, NULL, drafts_dev, n, V, u, out_dev);
}
