// DFlash 2's kernels for the GPU drafter trainer (included by drafter_step.cu inside its anonymous namespace):
// the dynamic convolution around every sublayer with its backward, the selector's candidates and its K-way CE.
// Each mirrors the CPU op of src/train/train_dflash2_ops.c; the forward convolution is the same arithmetic
// (fmaf in tap order), the reductions of the backward run in another order (results equal to rounding).

// y[t][c] (+)= sum_{tau < taps, tau <= t % block} (base[tau][c] + dyn[t * stride + tau * G + c / group]) * x[t - tau][c]
__global__ void td_conv_fwd(float *y, const float *x, long long n, int dim, int block, int taps, const float *base, const float *dyn,
                            int stride, int group, int acc) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * dim) return;
    long long t = i / dim;
    int c = (int)(i % dim), G = dim / group, reach = (int)(t % block);
    const float *d = dyn + t * stride;
    float s = 0.f;
    for (int tau = 0; tau < taps && tau <= reach; tau++) s = fmaf(base[(size_t)tau * dim + c] + d[tau * G + c / group], x[(t - tau) * dim + c], s);
    y[i] = acc ? y[i] + s : s;
}

// dx[t][c] = sum over the rows u = t + tau of t's block that read x[t] through tap tau: coef(u, tau, c) dy[u][c]
// (overwrites dx).
__global__ void td_conv_bwd_dx(float *dx, const float *dy, long long n, int dim, int block, int taps, const float *base, const float *dyn,
                               int stride, int group) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * dim) return;
    long long t = i / dim;
    int c = (int)(i % dim), G = dim / group, pos = (int)(t % block);
    float s = 0.f;
    for (int tau = 0; tau < taps && pos + tau < block && t + tau < n; tau++) {
        long long u = t + tau;
        s += (base[(size_t)tau * dim + c] + dyn[u * stride + tau * G + c / group]) * dy[u * dim + c];
    }
    dx[i] = s;
}

// ddyn[t * stride + tau * G + g] = sum over group g's channels of dy[t][c] x[t - tau][c] (0 where the tap is cut)
__global__ void td_conv_bwd_ddyn(float *ddyn, const float *dy, const float *x, long long n, int dim, int block, int taps, int stride,
                                 int group) {
    int G = dim / group;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * taps * G) return;
    long long t = i / ((long long)taps * G);
    int tau = (int)(i / G % taps), g = (int)(i % G);
    float s = 0.f;
    if (tau <= (int)(t % block))
        for (int c = g * group; c < (g + 1) * group; c++) s += dy[t * dim + c] * x[(t - tau) * dim + c];
    ddyn[t * stride + tau * G + g] = s;
}

// dbase[tau][c] += sum_t dy[t][c] x[t - tau][c] over the rows whose tap tau is live. Grid (ceil(dim / 32), taps),
// block (32, 8): column c = lane, rows strided by 8, then a fixed-order sum of the 8 partials (deterministic).
__global__ void td_conv_bwd_dbase(float *dbase, const float *dy, const float *x, long long n, int dim, int block) {
    __shared__ float part[8][32];
    int c = blockIdx.x * 32 + threadIdx.x, tau = blockIdx.y;
    float s = 0.f;
    if (c < dim)
        for (long long t = threadIdx.y; t < n; t += 8)
            if (tau <= (int)(t % block)) s += dy[t * dim + c] * x[(t - tau) * dim + c];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < dim) {
        float a = 0.f;
        for (int k = 0; k < 8; k++) a += part[k][threadIdx.x];
        dbase[(size_t)tau * dim + c] += a;
    }
}

// (va, a) before (vb, b) in the engine's topk order: larger value first, then smaller id.
__device__ __forceinline__ bool td_before(float va, int a, float vb, int b) { return va > vb || (va == vb && a < b); }

// A row's K candidates (bs_selector_candidates): K passes, each taking the best entry after the previous pick in
// topk order; the label takes the last place when missing. One block (256 threads) per row; rows with w == 0
// are skipped. z: the row's raw logits (read before td_row_loss overwrites them with dz).
__global__ void td_sel_cand(const float *z, const int32_t *tid, const float *w, int32_t *cand, float *cval, int32_t *gold, int V, int K) {
    __shared__ float sv[256];
    __shared__ int si[256];
    long long row = blockIdx.x;
    if (w[row] == 0.f) return;
    const float *l = z + row * V;
    float pv = INFINITY;
    int pi = -1;
    for (int k = 0; k < K; k++) {
        float bv = -INFINITY;
        int bi = -1;
        for (int v = threadIdx.x; v < V; v += blockDim.x) {
            float x = l[v];
            if (x != x) x = -INFINITY;
            if (pi >= 0 && !td_before(pv, pi, x, v)) continue;   // taken already
            if (bi < 0 || td_before(x, v, bv, bi)) { bv = x; bi = v; }
        }
        sv[threadIdx.x] = bv; si[threadIdx.x] = bi;
        __syncthreads();
        for (int o = blockDim.x / 2; o; o >>= 1) {
            if (threadIdx.x < o) {
                float ov = sv[threadIdx.x + o];
                int oi = si[threadIdx.x + o];
                if (oi >= 0 && (si[threadIdx.x] < 0 || td_before(ov, oi, sv[threadIdx.x], si[threadIdx.x]))) { sv[threadIdx.x] = ov; si[threadIdx.x] = oi; }
            }
            __syncthreads();
        }
        pv = sv[0]; pi = si[0];
        if (threadIdx.x == 0) { cand[row * K + k] = pi; cval[row * K + k] = pv; }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        int g = -1, lab = tid[row];
        for (int k = 0; k < K; k++) if (cand[row * K + k] == lab) { g = k; break; }
        if (g < 0) { g = K - 1; cand[row * K + g] = lab; cval[row * K + g] = l[lab]; }
        gold[row] = g;
    }
}

// The selector's K-way CE per row (bs_op_selector_ce), one thread per row: s_k = cval[k] + sum_r A[prev][r] z[r]
// B[cand_k][r]; ce_out[row] = CE (0 for w == 0). With grad: dz (the row's, overwritten), dA[prev] and dB[cand_k]
// (atomically: rows share tokens) get alpha rs[row] (softmax - onehot) times their factors. s: scratch [n][K].
__global__ void td_sel_ce(const float *zsel, const float *A, const float *Bt, const int32_t *prev, const int32_t *cand, const float *cval,
                          const int32_t *gold, const float *w, const float *rs, float alpha, int grad, float *ce_out, float *dz, float *dA,
                          float *dB, float *s, long long n, int K, int R) {
    long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    const float *z = zsel + row * R;
    if (grad) for (int r = 0; r < R; r++) dz[row * R + r] = 0.f;
    if (w[row] == 0.f) { ce_out[row] = 0.f; return; }
    const float *a = A + (size_t)prev[row] * R;
    float *sr = s + row * K;
    float mx = -INFINITY;
    for (int k = 0; k < K; k++) {
        const float *b = Bt + (size_t)cand[row * K + k] * R;
        float e = 0.f;
        for (int r = 0; r < R; r++) e += a[r] * z[r] * b[r];
        sr[k] = cval[row * K + k] + e;
        mx = fmaxf(mx, sr[k]);
    }
    double sum = 0;
    for (int k = 0; k < K; k++) sum += exp((double)sr[k] - mx);
    float lse = mx + (float)log(sum);
    int g = gold[row];
    ce_out[row] = lse - sr[g];
    if (!grad) return;
    float sc = alpha * rs[row];
    for (int k = 0; k < K; k++) {
        float ds = sc * ((float)exp((double)sr[k] - lse) - (k == g ? 1.f : 0.f));
        int c = cand[row * K + k];
        const float *b = Bt + (size_t)c * R;
        for (int r = 0; r < R; r++) {
            atomicAdd(&dB[(size_t)c * R + r], ds * a[r] * z[r]);
            dz[row * R + r] += ds * a[r] * b[r];
            atomicAdd(&dA[(size_t)prev[row] * R + r], ds * z[r] * b[r]);
        }
    }
}
