// GPU drafter training step (DSpark / DeepSpec DFlash / z-lab DFlash against a frozen target), the device
// half of src/train/train_drafter_cuda.c. It mirrors the CPU reference (src/train/train_drafter.c) op for op:
//   1. the frozen target's forward (train_target.cu, no LM head): taps HS[taps[i]], final normed state T
//   2. context c = hidden_norm(sum_i HS_i fc[:, iH:(i+1)H]^T) over all nseq*Tc rows (no concatenation)
//   3. block rows x = embed(blk_ids); per layer: q from the block rows, K/V from [context ; block] (own k/v
//      proj, k_norm, RoPE at positions 0..S-1 for the context and a+j for the block), block attention
//      (td_att_fwd: one CTA per (block, K/V head), its g*B query rows see context keys [0, a) of their
//      sequence and the B keys of their block), o_proj, MLP; h = norm(x)
//   4. prediction rows (z-lab: rows 1..B-1), Markov (vanilla: u = W1[prev]) and confidence heads, logits
//      hp lm^T + u W2^T and target logits T[tpos] lm^T as full [np][V] GEMMs, per-row CE / L1 / BCE and dz
//   5. the backward of all of it; context K/V gradients of all blocks meet in dck/dcv through atomics.
// DFlash 2 (s.d2): each sublayer reads Conv_0 of its normed input and the residual gains Conv_1 of its output
// (td_dflash2.cuh, train_layer.c's order); the selector's candidates are taken from the logits before the row
// loss overwrites them, and its CE and gradients (to its three tensors only) run in the forward.
// Numerics as the target trainer's: fp32 storage, cuBLAS GEMMs (bf16 tensor-core products by default,
// exact fp32 for the tests), fp32 kernels for the rest.
#include <cublas_v2.h>
#include <vector>
#include "tc_common.cuh"
namespace {   // the target trainer's kernels, private copies in this translation unit
#include "tc_norm.cuh"
#include "tc_loss_mlp.cuh"
#include "tc_adamw.cuh"
}
extern "C" {
#include "train/cuda/td_dev.h"
#include "train/train_cuda.h"
#include "backend/backend.h"
}

#include "tc_gemm.cuh"
#define TD_TILE 32

namespace {
#include "td_dflash2.cuh"

// ---- kernels ---------------------------------------------------------------------------------------------

struct att_args {
    const float *q, *kb, *vb, *kc, *vc, *o, *lse_in;
    const int32_t *anchor, *keep, *base;
    int B, nH, nKV, hd, qd, kd;
    float scale;
};

// Loads keys t0..t0+TILE of block blk (context rows base+[0, an), then the block's own B rows) for K/V head kh.
__device__ __forceinline__ void att_load_tile(const att_args &a, float *Ks, float *Vs, int t0, int nk, int an, long long cb, int blk, int kh) {
    int hd = a.hd, hdp = hd + 1;
    for (int idx = threadIdx.x; idx < TD_TILE * hd; idx += blockDim.x) {
        int kk = idx / hd, dd = idx - kk * hd, key = t0 + kk;
        float kv = 0.f, vv = 0.f;
        if (key < nk) {
            long long row; const float *kp, *vp;
            if (key < an) { row = cb + key; kp = a.kc; vp = a.vc; }
            else { row = (long long)blk * a.B + (key - an); kp = a.kb; vp = a.vb; }
            size_t o = (size_t)row * a.kd + (size_t)kh * hd + dd;
            kv = kp[o]; vv = vp[o];
        }
        Ks[kk * hdp + dd] = kv; Vs[kk * hdp + dd] = vv;
    }
}

// Block attention forward: CTA = (block, K/V head), warp w = query row (head kh*g + w/B, row w%B); lane = key
// of a 32-key tile for the scores, lane = dimension for the output; online softmax. Dummy blocks: zeros.
__global__ void td_att_fwd(att_args a, float *o, float *lse) {
    extern __shared__ float sm[];
    int hd = a.hd, hdp = hd + 1, g = a.nH / a.nKV;
    float *Ks = sm, *Vs = Ks + TD_TILE * hdp, *Qs = Vs + TD_TILE * hdp;
    int blk = blockIdx.x / a.nKV, kh = blockIdx.x % a.nKV;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int h = kh * g + w / a.B, j = w % a.B;
    long long qr = (long long)blk * a.B + j;
    float *orow = o + qr * a.qd + (size_t)h * hd;
    if (!a.keep[blk]) {
        for (int d = lane; d < hd; d += 32) orow[d] = 0.f;
        if (lane == 0) lse[qr * a.nH + h] = 0.f;
        return;
    }
    int an = a.anchor[blk], nk = an + a.B;
    long long cb = a.base[blk];
    const float *qrow = a.q + qr * a.qd + (size_t)h * hd;
    float *Qw = Qs + w * hd;
    for (int d = lane; d < hd; d += 32) Qw[d] = qrow[d];
    float acc[4] = { 0.f, 0.f, 0.f, 0.f }, m = -INFINITY, l = 0.f;
    for (int t0 = 0; t0 < nk; t0 += TD_TILE) {
        __syncthreads();
        att_load_tile(a, Ks, Vs, t0, nk, an, cb, blk, kh);
        __syncthreads();
        int key = t0 + lane;
        float s = -INFINITY;
        if (key < nk) {
            float dot = 0.f;
            const float *kr = Ks + lane * hdp;
            for (int d = 0; d < hd; d++) dot += Qw[d] * kr[d];
            s = dot * a.scale;
        }
        float mn = fmaxf(m, tc_warp_max(s));
        float corr = expf(m - mn);
        float p = key < nk ? expf(s - mn) : 0.f;
        l = l * corr + tc_warp_sum(p);
        #pragma unroll
        for (int i = 0; i < 4; i++) acc[i] *= corr;
        int lim = nk - t0 < TD_TILE ? nk - t0 : TD_TILE;
        for (int kx = 0; kx < lim; kx++) {
            float pk = __shfl_sync(0xffffffffu, p, kx);
            const float *vr = Vs + kx * hdp;
            #pragma unroll
            for (int i = 0; i < 4; i++) { int d = lane + 32 * i; if (d < hd) acc[i] += pk * vr[d]; }
        }
        m = mn;
    }
    float inv = 1.f / l;
    #pragma unroll
    for (int i = 0; i < 4; i++) { int d = lane + 32 * i; if (d < hd) orow[d] = acc[i] * inv; }
    if (lane == 0) lse[qr * a.nH + h] = m + logf(l);
}

// Backward (probabilities recomputed from q, k and the saved log-sum-exp): dq written; the block's own key
// rows' dk / dv added (this CTA alone owns them); context rows' dk / dv added atomically (shared by every
// block whose anchor lies after them). The tile's dk / dv are summed over the CTA's g*B query rows first.
__global__ void td_att_bwd(att_args a, const float *dO, float *dq, float *dkb, float *dvb, float *dkc, float *dvc) {
    extern __shared__ float sm[];
    int hd = a.hd, hdp = hd + 1, g = a.nH / a.nKV, nw = blockDim.x >> 5;
    float *Ks = sm, *Vs = Ks + TD_TILE * hdp, *Qs = Vs + TD_TILE * hdp, *Gs = Qs + nw * hd, *Ps = Gs + nw * hd, *Ss = Ps + nw * TD_TILE;
    int blk = blockIdx.x / a.nKV, kh = blockIdx.x % a.nKV;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int h = kh * g + w / a.B, j = w % a.B;
    long long qr = (long long)blk * a.B + j;
    float *dqrow = dq + qr * a.qd + (size_t)h * hd;
    if (!a.keep[blk]) {
        for (int d = lane; d < hd; d += 32) dqrow[d] = 0.f;
        return;
    }
    int an = a.anchor[blk], nk = an + a.B;
    long long cb = a.base[blk];
    size_t qo = qr * a.qd + (size_t)h * hd;
    float *Qw = Qs + w * hd, *Gw = Gs + w * hd;
    float Dp = 0.f;
    for (int d = lane; d < hd; d += 32) { Qw[d] = a.q[qo + d]; Gw[d] = dO[qo + d]; Dp += dO[qo + d] * a.o[qo + d]; }
    float D = tc_warp_sum(Dp), L = a.lse_in[qr * a.nH + h];
    float dqa[4] = { 0.f, 0.f, 0.f, 0.f };
    for (int t0 = 0; t0 < nk; t0 += TD_TILE) {
        __syncthreads();
        att_load_tile(a, Ks, Vs, t0, nk, an, cb, blk, kh);
        __syncthreads();
        int key = t0 + lane;
        float p = 0.f, ds = 0.f;
        if (key < nk) {
            float dot = 0.f, dp = 0.f;
            const float *kr = Ks + lane * hdp, *vr = Vs + lane * hdp;
            for (int d = 0; d < hd; d++) { dot += Qw[d] * kr[d]; dp += Gw[d] * vr[d]; }
            p = expf(dot * a.scale - L);
            ds = p * (dp - D) * a.scale;
        }
        Ps[w * TD_TILE + lane] = p; Ss[w * TD_TILE + lane] = ds;
        int lim = nk - t0 < TD_TILE ? nk - t0 : TD_TILE;
        for (int kx = 0; kx < lim; kx++) {
            float dk = __shfl_sync(0xffffffffu, ds, kx);
            const float *kr = Ks + kx * hdp;
            #pragma unroll
            for (int i = 0; i < 4; i++) { int d = lane + 32 * i; if (d < hd) dqa[i] += dk * kr[d]; }
        }
        __syncthreads();
        for (int idx = threadIdx.x; idx < lim * hd; idx += blockDim.x) {
            int kk = idx / hd, dd = idx - kk * hd, key2 = t0 + kk;
            float gk = 0.f, gv = 0.f;
            for (int ww = 0; ww < nw; ww++) { gk += Ss[ww * TD_TILE + kk] * Qs[ww * hd + dd]; gv += Ps[ww * TD_TILE + kk] * Gs[ww * hd + dd]; }
            if (key2 < an) {
                size_t o = (size_t)(cb + key2) * a.kd + (size_t)kh * hd + dd;
                atomicAdd(dkc + o, gk); atomicAdd(dvc + o, gv);
            } else {
                size_t o = ((size_t)blk * a.B + (key2 - an)) * a.kd + (size_t)kh * hd + dd;
                dkb[o] += gk; dvb[o] += gv;
            }
        }
    }
    #pragma unroll
    for (int i = 0; i < 4; i++) { int d = lane + 32 * i; if (d < hd) dqrow[d] = dqa[i]; }
}

// Per prediction row: softmax of the draft logits z (CE against tid), with the target logits zt (need_t)
// the L1 between the two softmaxes and acc = clamp(1 - L1/2, 0, 1); with grad, z is overwritten by
// d loss / dz = ce_a rs (p - onehot) + l1_a rs p (sign(p - pt) - sum_j sign_j p_j) (the reference's ops).
// Rows with w == 0 carry nothing (their dz rows are zeroed: the GEMMs read every row).
__global__ void td_row_loss(float *z, const float *zt, const int32_t *tid, const float *w, const float *rs, float ce_a, float l1_a,
                            int need_t, int l1_on, int grad, float *ce_row, float *l1_row, float *accv, int V) {
    __shared__ float sh[32];
    long long r = blockIdx.x;
    float *zr = z + r * V;
    const float *tr = need_t ? zt + r * V : NULL;
    if (w[r] == 0.f) {
        if (grad) for (int j = threadIdx.x; j < V; j += blockDim.x) zr[j] = 0.f;
        if (threadIdx.x == 0) { ce_row[r] = 0.f; l1_row[r] = 0.f; accv[r] = 0.f; }
        return;
    }
    float m = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, zr[j]);
    m = tc_block_max(m, sh);
    float s = 0.f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(zr[j] - m);
    s = tc_block_sum(s, sh);
    float lse = m + logf(s);
    int lab = tid[r];
    float zl = zr[lab];
    float lst = 0.f, l1 = 0.f, ps = 0.f;
    if (need_t) {
        float mt = -INFINITY;
        for (int j = threadIdx.x; j < V; j += blockDim.x) mt = fmaxf(mt, tr[j]);
        mt = tc_block_max(mt, sh);
        float st = 0.f;
        for (int j = threadIdx.x; j < V; j += blockDim.x) st += expf(tr[j] - mt);
        st = tc_block_sum(st, sh);
        lst = mt + logf(st);
        for (int j = threadIdx.x; j < V; j += blockDim.x) {
            float p = expf(zr[j] - lse), d = p - expf(tr[j] - lst);
            l1 += fabsf(d);
            ps += d > 0.f ? p : d < 0.f ? -p : 0.f;
        }
        l1 = tc_block_sum(l1, sh);
        ps = tc_block_sum(ps, sh);
    }
    if (threadIdx.x == 0) {
        ce_row[r] = lse - zl;
        l1_row[r] = need_t ? l1 : 0.f;
        float ac = 1.f - 0.5f * l1;
        accv[r] = need_t ? (ac < 0.f ? 0.f : ac > 1.f ? 1.f : ac) : 0.f;
    }
    if (!grad) return;
    __syncthreads();                      // every thread has read zr[lab] before it is overwritten
    float ce_s = ce_a * rs[r], l1_s = l1_a * rs[r];
    int l1g = need_t && l1_on;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float p = expf(zr[j] - lse), gr = ce_s * p - (j == lab ? ce_s : 0.f);
        if (l1g) {
            float d = p - expf(tr[j] - lst), sg = d > 0.f ? 1.f : d < 0.f ? -1.f : 0.f;
            gr += l1_s * p * (sg - ps);
        }
        zr[j] = gr;
    }
}

// conf[i] = hp[i] . cw[0:H] + e[i] . cw[H:H+re] + cb (one warp per row)
// Distillation labels (bs_drafter_loss_opts.target_labels): row r's label <- argmax of its target logits (the
// first maximum, as the engine's greedy pick). One block per row.
__global__ void td_argmax_labels(const float *zt, int32_t *tid, int V) {
    __shared__ float sv[256];
    __shared__ int si[256];
    long long r = blockIdx.x;
    const float *z = zt + r * V;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        if (z[j] > bv) { bv = z[j]; bi = j; }   // strided: the first maximum of this thread's share
    sv[threadIdx.x] = bv; si[threadIdx.x] = bi;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h) {
            float ov = sv[threadIdx.x + h];
            int oi = si[threadIdx.x + h];
            if (ov > sv[threadIdx.x] || (ov == sv[threadIdx.x] && oi < si[threadIdx.x])) { sv[threadIdx.x] = ov; si[threadIdx.x] = oi; }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) tid[r] = si[0] < V ? si[0] : 0;   // all-NaN logits: a valid id; the loss reports NaN anyway
}
// The Markov head's previous token follows the labels (row 0 of a block keeps the anchor).
__global__ void td_prev_from_labels(int32_t *prev, const int32_t *tid, int P, long long n) {
    long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r < n && r % P) prev[r] = tid[r - 1];
}

__global__ void td_conf_fwd(float *conf, const float *hp, const float *e, const float *cw, const float *cb, int H, int re, long long n) {
    long long i = (long long)blockIdx.x * TC_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (i >= n) return;
    float s = 0.f;
    for (int k = lane; k < H; k += 32) s += hp[i * H + k] * cw[k];
    for (int k = lane; k < re; k += 32) s += e[i * re + k] * cw[H + k];
    s = tc_warp_sum(s);
    if (lane == 0) conf[i] = s + cb[0];
}
// BCE with logits against the detached target acc; dconf = conf_a rs (sigmoid(x) - t).
__global__ void td_bce(const float *conf, const float *accv, const float *w, const float *rs, float conf_a, int grad, float *bce_row,
                       float *dconf, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float b = 0.f, d = 0.f;
    if (w[i] > 0.f) {
        float x = conf[i], t = accv[i];
        b = fmaxf(x, 0.f) - x * t + log1pf(expf(-fabsf(x)));
        d = conf_a * rs[i] * (tc_sigmoid(x) - t);
    }
    bce_row[i] = b;
    if (grad) dconf[i] = d;
}
// dhp[i][k] += dconf[i] cw[k]; de[i][k] += dconf[i] cw[H + k]
__global__ void td_conf_bwd(float *dhp, float *de, const float *dconf, const float *cw, int H, int re, long long n) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x, W = H + re;
    if (t >= n * W) return;
    long long i = t / W; int k = (int)(t - i * W);
    if (k < H) dhp[i * H + k] += dconf[i] * cw[k];
    else de[i * re + (k - H)] += dconf[i] * cw[k];
}
// out[0] += sum x (one block, fixed order)
__global__ void td_sum(float *out, const float *x, long long n) {
    __shared__ float sh[32];
    float s = 0.f;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
    s = tc_block_sum(s, sh);
    if (threadIdx.x == 0) out[0] += s;
}
// z-lab: hp[b*P + k] = h[b*B + 1 + k]; and back (row 0 of each block gets zero gradient).
__global__ void td_gather_pred(float *hp, const float *h, int B, int P, int H, long long n) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    long long row = t / H; int x = (int)(t - row * H);
    long long b = row / P; int k = (int)(row - b * P);
    hp[t] = h[((b * B) + 1 + k) * H + x];
}
__global__ void td_scatter_pred(float *dh, const float *dhp, int B, int P, int H, long long n) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    long long row = t / H; int x = (int)(t - row * H);
    long long b = row / B; int j = (int)(row - b * B);
    dh[t] = j == 0 ? 0.f : dhp[(b * P + j - 1) * H + x];
}

}  // namespace

// ---- the device state --------------------------------------------------------------------------------------

struct td_layer {
    float *x_in, *xn1, *rstd1;
    float *qraw, *rq, *q, *kraw, *rk, *k, *v;      // block rows
    float *ckraw, *crk, *ck, *cv;                  // context rows
    float *att, *lse, *mid, *xn2, *rstd2, *gate, *up;
    float *dyn[2], *cin[2], *sub[2];               // DFlash 2, per site (attention, MLP): coefficients, Conv_0 output, sublayer output
};

struct td_dev {
    td_shape s;
    tc_dev *tgt;
    int S, T, A, qd, kd, TB;                       // max sequences, max tokens, anchors per sequence, RoPE table rows
    long long Nc, NBm, nq, np;                     // capacities
    cudaStream_t st;
    cublasHandle_t cb;
    void *cb_ws;
    cublasComputeType_t ct;
    int n_params;
    std::vector<long long> off, numel;
    long long total, decay_end, train_end;
    float *W, *G, *M, *Vm;
    const float *embed, *lm;                       // device tables (own frozen copies, or the target's)
    std::vector<td_layer> lay;
    float *c_pre, *c, *rstd_c, *dc, *dc_pre;
    float *x_final, *h, *rstd_h, *hp, *e, *conf, *dconf, *z, *zt, *tT, *dhp, *de;
    float *dres, *dxn, *datt, *dq, *dk, *dv, *dck, *dcv, *hbuf, *dh, *tmp, *part;
    float *cosT, *sinT;
    int32_t *blk_ids, *qpos, *anchor, *keep, *base, *tid, *tpos, *prev;
    float *w, *rs, *ce_row, *l1_row, *acc, *bce_row;
    double *norm_part, *norm_out;
    float *coef;
    float *dsub, *dcin, *ddyn, *cval, *zsel, *dzsel, *sel_s;   // DFlash 2
    int32_t *cand, *gold;
    size_t bytes;
    std::vector<void *> allocs;
    cudaEvent_t ev[5];
    double ms[TD_N_TIMES];
};

static float *P_(td_dev *d, int i) { return d->W + d->off[i]; }
static float *G_(td_dev *d, int i) { return d->G + d->off[i]; }
static int LI(const td_dev *d, int l, int k) { return d->s.i_layer0 + TC_PER_LAYER * l + k; }

static int dalloc(td_dev *d, void **p, size_t bytes, bs_err *err) {
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 16);
    if (e != cudaSuccess)
        return bs_fail(err, "CUDA: cannot allocate %.1f MiB on the device (%.1f GiB taken so far by the drafter): %s; use fewer "
                       "sequences or anchors", bytes / 1048576.0, d->bytes / 1073741824.0, cudaGetErrorString(e));
    d->allocs.push_back(*p);
    d->bytes += bytes;
    return 0;
}
#define DA(ptr, count) do { if (dalloc(d, (void **)&(ptr), sizeof(*(ptr)) * (size_t)(count), err)) return -1; } while (0)

static int qkrope(td_dev *d, float *out, float *rstd, const float *raw, const float *w, long long rows, int nh, const int32_t *pos, int Tc,
                  bs_err *err) {
    long long nv = rows * nh;
    tc_qknorm_rope_fwd<<<tc_blocks(nv, TC_WARPS), 32 * TC_WARPS, 0, d->st>>>(out, rstd, raw, w, nv, nh, d->s.hd, pos, Tc, d->cosT,
                                                                          d->sinT, d->s.eps);
    LAUNCHED();
    return 0;
}
// dout (in place -> d raw) and the gain's gradient
static int qkrope_bwd(td_dev *d, float *dio, const float *raw, const float *rstd, int wi, long long rows, int nh, const int32_t *pos,
                      int Tc, bs_err *err) {
    long long nv = rows * nh;
    tc_qknorm_rope_bwd<<<tc_blocks(nv, TC_WARPS), 32 * TC_WARPS, 0, d->st>>>(dio, d->tmp, dio, raw, rstd, P_(d, wi), nv, nh, d->s.hd,
                                                                          pos, Tc, d->cosT, d->sinT);
    LAUNCHED();
    return colsum(d, G_(d, wi), d->tmp, raw, rstd, nv, d->s.hd, err);
}
static att_args att(td_dev *d, const td_layer *a) {
    att_args x;
    x.q = a->q; x.kb = a->k; x.vb = a->v; x.kc = a->ck; x.vc = a->cv; x.o = a->att; x.lse_in = a->lse;
    x.anchor = d->anchor; x.keep = d->keep; x.base = d->base;
    x.B = d->s.B; x.nH = d->s.nH; x.nKV = d->s.nKV; x.hd = d->s.hd; x.qd = d->qd; x.kd = d->kd;
    x.scale = 1.f / sqrtf((float)d->s.hd);
    return x;
}
static size_t att_smem(const td_dev *d, int bwd) {
    int nw = d->s.B * (d->s.nH / d->s.nKV), hd = d->s.hd;
    size_t f = 2 * TD_TILE * (hd + 1) + (size_t)nw * hd;
    if (bwd) f += (size_t)nw * hd + 2 * (size_t)nw * TD_TILE;
    return f * sizeof(float);
}

// ---- DFlash 2's convolutions (train_layer.c's conv_in / conv_out and their backward) ----------------------------
static int dyn_w(const td_dev *d) { return 2 * d->s.conv_taps * (d->s.H / d->s.conv_group); }
static int CI(const td_dev *d, int l, int site, int proj) { return d->s.i_conv0 + 4 * l + 2 * site + proj; }
// Stage 0: coefficients from the normed input xn, cin = Conv_0(xn).
static int conv_in_fwd(td_dev *d, td_layer *a, int l, int site, const float *xn, long long n, bs_err *err) {
    int H = d->s.H, dw = dyn_w(d);
    if (lin_fwd(d, a->dyn[site], xn, P_(d, CI(d, l, site, 1)), n, dw, H, 0.f, err)) return -1;
    td_conv_fwd<<<tc_blocks(n * H, 256), 256, 0, d->st>>>(a->cin[site], xn, n, H, d->s.B, d->s.conv_taps, P_(d, CI(d, l, site, 0)), a->dyn[site],
                                                          dw, d->s.conv_group, 0);
    LAUNCHED();
    return 0;
}
// Stage 1: y += Conv_1(sub), the same coefficients.
static int conv_out_fwd(td_dev *d, td_layer *a, int l, int site, float *y, long long n, bs_err *err) {
    int H = d->s.H, T = d->s.conv_taps, G = H / d->s.conv_group;
    td_conv_fwd<<<tc_blocks(n * H, 256), 256, 0, d->st>>>(y, a->sub[site], n, H, d->s.B, T, P_(d, CI(d, l, site, 0)) + (size_t)T * H,
                                                          a->dyn[site] + (size_t)T * G, dyn_w(d), d->s.conv_group, 1);
    LAUNCHED();
    return 0;
}
// Backward of stage 1: dy -> d->dsub; stage 1's columns of d->ddyn and its base kernel's gradient.
static int conv_out_bwd(td_dev *d, td_layer *a, int l, int site, const float *dy, long long n, bs_err *err) {
    int H = d->s.H, T = d->s.conv_taps, G = H / d->s.conv_group, dw = dyn_w(d);
    const float *base = P_(d, CI(d, l, site, 0)) + (size_t)T * H;
    td_conv_bwd_dx<<<tc_blocks(n * H, 256), 256, 0, d->st>>>(d->dsub, dy, n, H, d->s.B, T, base, a->dyn[site] + (size_t)T * G, dw, d->s.conv_group);
    td_conv_bwd_ddyn<<<tc_blocks(n * T * G, 256), 256, 0, d->st>>>(d->ddyn + (size_t)T * G, dy, a->sub[site], n, H, d->s.B, T, dw, d->s.conv_group);
    td_conv_bwd_dbase<<<dim3((H + 31) / 32, T), dim3(32, 8), 0, d->st>>>(G_(d, CI(d, l, site, 0)) + (size_t)T * H, dy, a->sub[site], n, H, d->s.B);
    LAUNCHED();
    return 0;
}
// Backward of stage 0 and of the coefficients: d->dcin -> dxn (overwritten), stage 0's columns of d->ddyn, the
// base kernel's and kernel_projection's gradients.
static int conv_in_bwd(td_dev *d, td_layer *a, int l, int site, const float *xn, float *dxn, long long n, bs_err *err) {
    int H = d->s.H, T = d->s.conv_taps, dw = dyn_w(d);
    td_conv_bwd_dx<<<tc_blocks(n * H, 256), 256, 0, d->st>>>(dxn, d->dcin, n, H, d->s.B, T, P_(d, CI(d, l, site, 0)), a->dyn[site], dw, d->s.conv_group);
    td_conv_bwd_ddyn<<<tc_blocks(n * T * (H / d->s.conv_group), 256), 256, 0, d->st>>>(d->ddyn, d->dcin, xn, n, H, d->s.B, T, dw, d->s.conv_group);
    td_conv_bwd_dbase<<<dim3((H + 31) / 32, T), dim3(32, 8), 0, d->st>>>(G_(d, CI(d, l, site, 0)), d->dcin, xn, n, H, d->s.B);
    LAUNCHED();
    return lin_bwd(d, dxn, 1.f, G_(d, CI(d, l, site, 1)), d->ddyn, xn, P_(d, CI(d, l, site, 1)), n, dw, H, err);
}
// The selector's candidates (from the raw logits z), its CE into bce_row and, with grad, its gradients.
static int selector(td_dev *d, const float *hp, long long np, int grad, bs_err *err) {
    const td_shape &s = d->s;
    td_sel_cand<<<(unsigned)np, 256, 0, d->st>>>(d->z, d->tid, d->w, d->cand, d->cval, d->gold, s.V, s.K);
    LAUNCHED();
    if (lin_fwd(d, d->zsel, hp, P_(d, s.i_sel), np, s.R, s.H, 0.f, err)) return -1;
    td_sel_ce<<<tc_blocks(np, 128), 128, 0, d->st>>>(d->zsel, P_(d, s.i_sel + 1), P_(d, s.i_sel + 2), d->prev, d->cand, d->cval, d->gold, d->w,
                                                     d->rs, s.conf_alpha, grad, d->bce_row, d->dzsel, G_(d, s.i_sel + 1), G_(d, s.i_sel + 2),
                                                     d->sel_s, np, s.K, s.R);
    LAUNCHED();
    // dW_sel += dz^T hp (h itself gets nothing from the selector)
    return grad ? mm(d, true, false, s.R, s.H, (int)np, 1.f, d->dzsel, s.R, hp, s.H, 1.f, G_(d, s.i_sel), s.H, err) : 0;
}

static int forward(td_dev *d, const td_batch *b, int grad, bs_err *err) {
    const td_shape &s = d->s;
    int H = s.H, qd = d->qd, kd = d->kd, I = s.I, B = s.B, Tc = b->Tc, nw = B * (s.nH / s.nKV);
    long long Nc = (long long)b->nseq * Tc, NB = b->NB, nq = NB * B, np = NB * s.P;
    int mH = s.m * H;
    // context
    for (int i = 0; i < s.m; i++)
        if (mm(d, false, true, (int)Nc, H, H, 1.f, tc_dev_hidden(d->tgt, s.taps[i]), H, P_(d, s.i_fc) + (size_t)i * H, mH, i ? 1.f : 0.f,
               d->c_pre, H, err)) return -1;
    if (rmsnorm(d, d->c, d->rstd_c, d->c_pre, P_(d, s.i_hn), Nc, H, err)) return -1;
    tc_embed_fwd<<<(unsigned)nq, 128, 0, d->st>>>(d->lay[0].x_in, d->embed, d->blk_ids, H);
    LAUNCHED();
    for (int l = 0; l < s.L; l++) {
        td_layer *a = &d->lay[l];
        float *xout = l + 1 < s.L ? d->lay[l + 1].x_in : d->x_final;
        if (rmsnorm(d, a->xn1, a->rstd1, a->x_in, P_(d, LI(d, l, TC_IN_NORM)), nq, H, err) ||
            (s.d2 && conv_in_fwd(d, a, l, 0, a->xn1, nq, err))) return -1;
        const float *ain = s.d2 ? a->cin[0] : a->xn1;   // what the attention's projections read
        if (lin_fwd(d, a->qraw, ain, P_(d, LI(d, l, TC_WQ)), nq, qd, H, 0.f, err) ||
            lin_fwd(d, a->kraw, ain, P_(d, LI(d, l, TC_WK)), nq, kd, H, 0.f, err) ||
            lin_fwd(d, a->v, ain, P_(d, LI(d, l, TC_WV)), nq, kd, H, 0.f, err) ||
            lin_fwd(d, a->ckraw, d->c, P_(d, LI(d, l, TC_WK)), Nc, kd, H, 0.f, err) ||
            lin_fwd(d, a->cv, d->c, P_(d, LI(d, l, TC_WV)), Nc, kd, H, 0.f, err) ||
            qkrope(d, a->q, a->rq, a->qraw, P_(d, LI(d, l, TC_QNORM)), nq, s.nH, d->qpos, Tc, err) ||
            qkrope(d, a->k, a->rk, a->kraw, P_(d, LI(d, l, TC_KNORM)), nq, s.nKV, d->qpos, Tc, err) ||
            qkrope(d, a->ck, a->crk, a->ckraw, P_(d, LI(d, l, TC_KNORM)), Nc, s.nKV, NULL, Tc, err)) return -1;
        td_att_fwd<<<(unsigned)(NB * s.nKV), 32 * nw, att_smem(d, 0), d->st>>>(att(d, a), a->att, a->lse);
        LAUNCHED();
        CU(cudaMemcpyAsync(a->mid, a->x_in, sizeof(float) * nq * H, cudaMemcpyDeviceToDevice, d->st));
        if (s.d2) {
            if (lin_fwd(d, a->sub[0], a->att, P_(d, LI(d, l, TC_WO)), nq, H, qd, 0.f, err) || conv_out_fwd(d, a, l, 0, a->mid, nq, err)) return -1;
        } else if (lin_fwd(d, a->mid, a->att, P_(d, LI(d, l, TC_WO)), nq, H, qd, 1.f, err)) return -1;
        if (rmsnorm(d, a->xn2, a->rstd2, a->mid, P_(d, LI(d, l, TC_POST_NORM)), nq, H, err) ||
            (s.d2 && conv_in_fwd(d, a, l, 1, a->xn2, nq, err))) return -1;
        const float *min = s.d2 ? a->cin[1] : a->xn2;
        if (lin_fwd(d, a->gate, min, P_(d, LI(d, l, TC_WG)), nq, I, H, 0.f, err) ||
            lin_fwd(d, a->up, min, P_(d, LI(d, l, TC_WU)), nq, I, H, 0.f, err)) return -1;
        long long nI = nq * I;
        tc_swiglu_fwd<<<tc_blocks(nI, 256), 256, 0, d->st>>>(d->hbuf, a->gate, a->up, nI);
        LAUNCHED();
        CU(cudaMemcpyAsync(xout, a->mid, sizeof(float) * nq * H, cudaMemcpyDeviceToDevice, d->st));
        if (s.d2) {
            if (lin_fwd(d, a->sub[1], d->hbuf, P_(d, LI(d, l, TC_WD)), nq, H, I, 0.f, err) || conv_out_fwd(d, a, l, 1, xout, nq, err)) return -1;
        } else if (lin_fwd(d, xout, d->hbuf, P_(d, LI(d, l, TC_WD)), nq, H, I, 1.f, err)) return -1;
    }
    if (rmsnorm(d, d->h, d->rstd_h, d->x_final, P_(d, s.i_norm), nq, H, err)) return -1;
    const float *hp = d->h;
    if (s.zl) {
        long long n = np * H;
        td_gather_pred<<<tc_blocks(n, 256), 256, 0, d->st>>>(d->hp, d->h, B, s.P, H, n);
        LAUNCHED();
        hp = d->hp;
    }
    if (s.need_t) {   // the target's logits for each prediction row (before the Markov head: target labels feed it)
        tc_embed_fwd<<<(unsigned)np, 128, 0, d->st>>>(d->tT, tc_dev_hidden(d->tgt, s.t_final), d->tpos, H);
        LAUNCHED();
        if (lin_fwd(d, d->zt, d->tT, d->lm, np, s.V, H, 0.f, err)) return -1;
    }
    if (s.target_labels) {
        td_argmax_labels<<<(unsigned)np, 256, 0, d->st>>>(d->zt, d->tid, s.V);
        LAUNCHED();
        td_prev_from_labels<<<tc_blocks(np, 256), 256, 0, d->st>>>(d->prev, d->tid, s.P, np);
        LAUNCHED();
    }
    if (s.r > 0) {
        tc_embed_fwd<<<(unsigned)np, 32, 0, d->st>>>(d->e, P_(d, s.i_w1), d->prev, s.r);
        LAUNCHED();
    }
    if (s.conf_in) {
        td_conf_fwd<<<tc_blocks(np, TC_WARPS), 32 * TC_WARPS, 0, d->st>>>(d->conf, hp, d->e, P_(d, s.i_cw), P_(d, s.i_cb), H, s.conf_in - H, np);
        LAUNCHED();
    }
    if (lin_fwd(d, d->z, hp, d->lm, np, s.V, H, 0.f, err)) return -1;
    if (s.r > 0 && lin_fwd(d, d->z, d->e, P_(d, s.i_w2), np, s.V, s.r, 1.f, err)) return -1;
    if (s.d2 && selector(d, hp, np, grad, err)) return -1;   // (reads the logits before td_row_loss turns them into dz)
    td_row_loss<<<(unsigned)np, 256, 0, d->st>>>(d->z, d->zt, d->tid, d->w, d->rs, s.ce_alpha, s.l1_alpha, s.need_t, s.l1_on, grad,
                                                 d->ce_row, d->l1_row, d->acc, s.V);
    LAUNCHED();
    if (s.conf_in) {
        td_bce<<<tc_blocks(np, 256), 256, 0, d->st>>>(d->conf, d->acc, d->w, d->rs, s.conf_alpha, grad, d->bce_row, d->dconf, np);
        LAUNCHED();
    } else if (!s.d2) CU(cudaMemsetAsync(d->bce_row, 0, sizeof(float) * np, d->st));
    return 0;
}

static int backward(td_dev *d, const td_batch *b, bs_err *err) {
    const td_shape &s = d->s;
    int H = s.H, qd = d->qd, kd = d->kd, I = s.I, B = s.B, Tc = b->Tc, nw = B * (s.nH / s.nKV);
    long long Nc = (long long)b->nseq * Tc, NB = b->NB, nq = NB * B, np = NB * s.P;
    int mH = s.m * H;
    const float *hp = s.zl ? d->hp : d->h;
    // logits -> dhp (LM head frozen), de, dW2
    if (mm(d, false, false, (int)np, H, s.V, 1.f, d->z, s.V, d->lm, H, 0.f, d->dhp, H, err)) return -1;
    if (s.r > 0) {
        if (mm(d, false, false, (int)np, s.r, s.V, 1.f, d->z, s.V, P_(d, s.i_w2), s.r, 0.f, d->de, s.r, err) ||
            mm(d, true, false, s.V, s.r, (int)np, 1.f, d->z, s.V, d->e, s.r, 1.f, G_(d, s.i_w2), s.r, err)) return -1;
    }
    if (s.conf_in) {
        int re = s.conf_in - H;
        long long n = np * s.conf_in;
        td_conf_bwd<<<tc_blocks(n, 256), 256, 0, d->st>>>(d->dhp, d->de, d->dconf, P_(d, s.i_cw), H, re, np);
        LAUNCHED();
        if (mm(d, true, false, 1, H, (int)np, 1.f, d->dconf, 1, hp, H, 1.f, G_(d, s.i_cw), s.conf_in, err)) return -1;
        if (re > 0 && mm(d, true, false, 1, re, (int)np, 1.f, d->dconf, 1, d->e, re, 1.f, G_(d, s.i_cw) + H, s.conf_in, err)) return -1;
        td_sum<<<1, 1024, 0, d->st>>>(G_(d, s.i_cb), d->dconf, np);
        LAUNCHED();
    }
    if (s.r > 0) {
        tc_embed_bwd<<<(unsigned)np, 32, 0, d->st>>>(G_(d, s.i_w1), d->de, d->prev, s.r);
        LAUNCHED();
    }
    float *dh = d->dhp;
    if (s.zl) {
        long long n = nq * H;
        td_scatter_pred<<<tc_blocks(n, 256), 256, 0, d->st>>>(d->dh, d->dhp, B, s.P, H, n);
        LAUNCHED();
        dh = d->dh;
    }
    unsigned rb = tc_blocks(nq, TC_WARPS);
    CU(cudaMemsetAsync(d->dres, 0, sizeof(float) * nq * H, d->st));
    tc_rmsnorm_bwd<<<rb, 32 * TC_WARPS, 0, d->st>>>(d->dres, dh, d->x_final, d->rstd_h, P_(d, s.i_norm), (int)nq, H);
    LAUNCHED();
    if (colsum(d, G_(d, s.i_norm), dh, d->x_final, d->rstd_h, nq, H, err)) return -1;
    CU(cudaMemsetAsync(d->dc, 0, sizeof(float) * Nc * H, d->st));
    for (int l = s.L - 1; l >= 0; l--) {
        td_layer *a = &d->lay[l];
        long long nI = nq * I;
        tc_swiglu_fwd<<<tc_blocks(nI, 256), 256, 0, d->st>>>(d->hbuf, a->gate, a->up, nI);
        LAUNCHED();
        if (s.d2 && conv_out_bwd(d, a, l, 1, d->dres, nq, err)) return -1;
        if (lin_bwd(d, d->dh, 0.f, G_(d, LI(d, l, TC_WD)), s.d2 ? d->dsub : d->dres, d->hbuf, P_(d, LI(d, l, TC_WD)), nq, H, I, err)) return -1;
        tc_swiglu_bwd<<<tc_blocks(nI, 256), 256, 0, d->st>>>(d->hbuf, d->dh, d->dh, a->gate, a->up, nI);
        LAUNCHED();
        float *dmin = s.d2 ? d->dcin : d->dxn;
        const float *min = s.d2 ? a->cin[1] : a->xn2;
        if (lin_bwd(d, dmin, 0.f, G_(d, LI(d, l, TC_WG)), d->hbuf, min, P_(d, LI(d, l, TC_WG)), nq, I, H, err) ||
            lin_bwd(d, dmin, 1.f, G_(d, LI(d, l, TC_WU)), d->dh, min, P_(d, LI(d, l, TC_WU)), nq, I, H, err) ||
            (s.d2 && conv_in_bwd(d, a, l, 1, a->xn2, d->dxn, nq, err))) return -1;
        tc_rmsnorm_bwd<<<rb, 32 * TC_WARPS, 0, d->st>>>(d->dres, d->dxn, a->mid, a->rstd2, P_(d, LI(d, l, TC_POST_NORM)), (int)nq, H);
        LAUNCHED();
        if (colsum(d, G_(d, LI(d, l, TC_POST_NORM)), d->dxn, a->mid, a->rstd2, nq, H, err)) return -1;
        if (s.d2 && conv_out_bwd(d, a, l, 0, d->dres, nq, err)) return -1;
        if (lin_bwd(d, d->datt, 0.f, G_(d, LI(d, l, TC_WO)), s.d2 ? d->dsub : d->dres, a->att, P_(d, LI(d, l, TC_WO)), nq, H, qd, err)) return -1;
        CU(cudaMemsetAsync(d->dk, 0, sizeof(float) * nq * kd, d->st));
        CU(cudaMemsetAsync(d->dv, 0, sizeof(float) * nq * kd, d->st));
        CU(cudaMemsetAsync(d->dck, 0, sizeof(float) * Nc * kd, d->st));
        CU(cudaMemsetAsync(d->dcv, 0, sizeof(float) * Nc * kd, d->st));
        td_att_bwd<<<(unsigned)(NB * s.nKV), 32 * nw, att_smem(d, 1), d->st>>>(att(d, a), d->datt, d->dq, d->dk, d->dv, d->dck, d->dcv);
        LAUNCHED();
        if (qkrope_bwd(d, d->dq, a->qraw, a->rq, LI(d, l, TC_QNORM), nq, s.nH, d->qpos, Tc, err) ||
            qkrope_bwd(d, d->dk, a->kraw, a->rk, LI(d, l, TC_KNORM), nq, s.nKV, d->qpos, Tc, err) ||
            qkrope_bwd(d, d->dck, a->ckraw, a->crk, LI(d, l, TC_KNORM), Nc, s.nKV, NULL, Tc, err)) return -1;
        float *dain = s.d2 ? d->dcin : d->dxn;
        const float *ain = s.d2 ? a->cin[0] : a->xn1;
        if (lin_bwd(d, dain, 0.f, G_(d, LI(d, l, TC_WQ)), d->dq, ain, P_(d, LI(d, l, TC_WQ)), nq, qd, H, err) ||
            lin_bwd(d, dain, 1.f, G_(d, LI(d, l, TC_WK)), d->dk, ain, P_(d, LI(d, l, TC_WK)), nq, kd, H, err) ||
            lin_bwd(d, dain, 1.f, G_(d, LI(d, l, TC_WV)), d->dv, ain, P_(d, LI(d, l, TC_WV)), nq, kd, H, err) ||
            (s.d2 && conv_in_bwd(d, a, l, 0, a->xn1, d->dxn, nq, err)) ||
            lin_bwd(d, d->dc, 1.f, G_(d, LI(d, l, TC_WK)), d->dck, d->c, P_(d, LI(d, l, TC_WK)), Nc, kd, H, err) ||
            lin_bwd(d, d->dc, 1.f, G_(d, LI(d, l, TC_WV)), d->dcv, d->c, P_(d, LI(d, l, TC_WV)), Nc, kd, H, err)) return -1;
        tc_rmsnorm_bwd<<<rb, 32 * TC_WARPS, 0, d->st>>>(d->dres, d->dxn, a->x_in, a->rstd1, P_(d, LI(d, l, TC_IN_NORM)), (int)nq, H);
        LAUNCHED();
        if (colsum(d, G_(d, LI(d, l, TC_IN_NORM)), d->dxn, a->x_in, a->rstd1, nq, H, err)) return -1;
    }
    // the block embedding is frozen: dres stops here. Context: hidden_norm, fc.
    CU(cudaMemsetAsync(d->dc_pre, 0, sizeof(float) * Nc * H, d->st));
    tc_rmsnorm_bwd<<<tc_blocks(Nc, TC_WARPS), 32 * TC_WARPS, 0, d->st>>>(d->dc_pre, d->dc, d->c_pre, d->rstd_c, P_(d, s.i_hn), (int)Nc, H);
    LAUNCHED();
    if (colsum(d, G_(d, s.i_hn), d->dc, d->c_pre, d->rstd_c, Nc, H, err)) return -1;
    for (int i = 0; i < s.m; i++)
        if (mm(d, true, false, H, H, (int)Nc, 1.f, d->dc_pre, H, tc_dev_hidden(d->tgt, s.taps[i]), H, 1.f, G_(d, s.i_fc) + (size_t)i * H,
               mH, err)) return -1;
    return 0;
}

// ---- the C interface -------------------------------------------------------------------------------------

extern "C" size_t td_dev_bytes(const td_dev *d) { return d->bytes; }
extern "C" void td_dev_set_gemm(td_dev *d, int mode) {
    d->ct = mode == BS_TRAIN_GEMM_FP32 ? CUBLAS_COMPUTE_32F : mode == BS_TRAIN_GEMM_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                                        : CUBLAS_COMPUTE_32F_FAST_16BF;
}

extern "C" void td_dev_free(td_dev *d) {
    if (!d) return;
    if (d->st) cudaStreamSynchronize(d->st);
    for (void *p : d->allocs) cudaFree(p);
    for (cudaEvent_t e : d->ev) if (e) cudaEventDestroy(e);
    if (d->cb) cublasDestroy(d->cb);
    delete d;
}

static int dev_init(td_dev *d, const int64_t *numel, const int *trainable, const int *decay, bs_err *err) {
    const td_shape &s = d->s;
    d->st = (cudaStream_t)tc_dev_stream(d->tgt);    // the target's stream: its forward and ours are ordered
    CB(cublasCreate(&d->cb));
    CB(cublasSetStream(d->cb, d->st));
    size_t ws = 64u << 20;
    if (dalloc(d, &d->cb_ws, ws, err)) return -1;
    CB(cublasSetWorkspace(d->cb, d->cb_ws, ws));
    td_dev_set_gemm(d, BS_TRAIN_GEMM_BF16);
    for (cudaEvent_t &e : d->ev) CU(cudaEventCreate(&e));
    // parameters: trainable with decay, trainable without, frozen; 128-byte aligned
    int n = d->n_params;
    d->off.assign(n, 0); d->numel.assign(numel, numel + n);
    long long o = 0;
    for (int pass = 0; pass < 3; pass++) {
        for (int i = 0; i < n; i++) {
            int cls = !trainable[i] ? 2 : decay[i] ? 0 : 1;
            if (cls == pass) { d->off[i] = o; o += (numel[i] + 31) / 32 * 32; }
        }
        if (pass == 0) d->decay_end = o;
        if (pass == 1) d->train_end = o;
    }
    d->total = o;
    DA(d->W, o); DA(d->G, o); DA(d->M, o); DA(d->Vm, o);
    CU(cudaMemset(d->W, 0, sizeof(float) * o)); CU(cudaMemset(d->G, 0, sizeof(float) * o));
    CU(cudaMemset(d->M, 0, sizeof(float) * o)); CU(cudaMemset(d->Vm, 0, sizeof(float) * o));
    d->embed = s.zl ? tc_dev_param(d->tgt, s.t_embed) : d->W + d->off[s.i_embed];
    d->lm = s.zl ? tc_dev_param(d->tgt, s.t_lm) : d->W + d->off[s.i_lm];
    long long Nc = d->Nc, nq = d->nq, np = d->np, NB = d->NBm;
    int H = s.H, qd = d->qd, kd = d->kd, I = s.I, r = s.r > 0 ? s.r : 1;
    d->lay.assign(s.L, td_layer());
    for (int l = 0; l < s.L; l++) {
        td_layer *a = &d->lay[l];
        DA(a->x_in, nq * H); DA(a->xn1, nq * H); DA(a->rstd1, nq);
        DA(a->qraw, nq * qd); DA(a->rq, nq * s.nH); DA(a->q, nq * qd); DA(a->kraw, nq * kd); DA(a->rk, nq * s.nKV); DA(a->k, nq * kd);
        DA(a->v, nq * kd); DA(a->ckraw, Nc * kd); DA(a->crk, Nc * s.nKV); DA(a->ck, Nc * kd); DA(a->cv, Nc * kd);
        DA(a->att, nq * qd); DA(a->lse, nq * s.nH); DA(a->mid, nq * H); DA(a->xn2, nq * H); DA(a->rstd2, nq);
        DA(a->gate, nq * I); DA(a->up, nq * I);
        for (int k = 0; s.d2 && k < 2; k++) { DA(a->dyn[k], nq * dyn_w(d)); DA(a->cin[k], nq * H); DA(a->sub[k], nq * H); }
    }
    if (s.d2) {
        DA(d->dsub, nq * H); DA(d->dcin, nq * H); DA(d->ddyn, nq * dyn_w(d));
        DA(d->cand, np * s.K); DA(d->gold, np); DA(d->cval, np * s.K); DA(d->zsel, np * s.R); DA(d->dzsel, np * s.R); DA(d->sel_s, np * s.K);
    }
    DA(d->c_pre, Nc * H); DA(d->c, Nc * H); DA(d->rstd_c, Nc); DA(d->dc, Nc * H); DA(d->dc_pre, Nc * H);
    DA(d->x_final, nq * H); DA(d->h, nq * H); DA(d->rstd_h, nq); DA(d->hp, s.zl ? np * H : 1);
    DA(d->e, np * r); DA(d->de, np * r); DA(d->conf, np); DA(d->dconf, np);
    DA(d->z, np * s.V); DA(d->zt, s.need_t ? np * s.V : 1); DA(d->tT, s.need_t ? np * H : 1); DA(d->dhp, np * H);
    DA(d->dres, nq * H); DA(d->dxn, nq * H); DA(d->datt, nq * qd); DA(d->dq, nq * qd); DA(d->dk, nq * kd); DA(d->dv, nq * kd);
    DA(d->dck, Nc * kd); DA(d->dcv, Nc * kd); DA(d->hbuf, nq * I); DA(d->dh, nq * (I > H ? I : H));
    long long tmpn = nq * qd > Nc * kd ? nq * qd : Nc * kd;
    if (nq * kd > tmpn) tmpn = nq * kd;
    DA(d->tmp, tmpn);
    DA(d->part, (long long)TC_CS_CHUNKS * (H > s.hd ? H : s.hd));
    DA(d->cosT, (long long)d->TB * (s.hd / 2)); DA(d->sinT, (long long)d->TB * (s.hd / 2));
    DA(d->blk_ids, nq); DA(d->qpos, nq); DA(d->anchor, NB); DA(d->keep, NB); DA(d->base, NB);
    DA(d->tid, np); DA(d->tpos, np); DA(d->prev, np); DA(d->w, np); DA(d->rs, np);
    DA(d->ce_row, np); DA(d->l1_row, np); DA(d->acc, np); DA(d->bce_row, np);
    DA(d->norm_part, TC_NORM_BLOCKS); DA(d->norm_out, 1); DA(d->coef, 1);
    int half = s.hd / 2;
    if (!s.inv_freq) return bs_fail(err, "drafter (cuda): no RoPE table given");
    std::vector<float> c((size_t)d->TB * half), sn((size_t)d->TB * half);
    for (int p = 0; p < d->TB; p++)
        for (int i = 0; i < half; i++) {
            float ang = (float)p * s.inv_freq[i];
            c[(size_t)p * half + i] = cosf(ang); sn[(size_t)p * half + i] = sinf(ang);
        }
    CU(cudaMemcpy(d->cosT, c.data(), sizeof(float) * c.size(), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(d->sinT, sn.data(), sizeof(float) * sn.size(), cudaMemcpyHostToDevice));
    size_t sm1 = att_smem(d, 1);
    if (sm1 > 48 * 1024) {
        CU(cudaFuncSetAttribute(td_att_bwd, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm1));
        CU(cudaFuncSetAttribute(td_att_fwd, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)att_smem(d, 0)));
    }
    CU(cudaDeviceSynchronize());
    return 0;
}

extern "C" int td_dev_new(td_dev **out, const td_shape *s, tc_dev *target, int max_seqs, int max_T, int A, int n_params,
                          const int64_t *numel, const int *trainable, const int *decay, bs_err *err) {
    *out = NULL;
    if (s->hd > 128 || s->hd % 2) return bs_fail(err, "drafter (cuda): head_dim %d (even, at most 128 supported)", s->hd);
    if (s->nH % s->nKV) return bs_fail(err, "drafter (cuda): %d query heads on %d K/V heads", s->nH, s->nKV);
    if (s->d2 && (s->conv_taps < 1 || s->conv_group < 1 || s->H % s->conv_group || s->K < 1 || s->K > s->V || s->R < 1 || s->i_conv0 < 0 ||
                  s->i_sel < 0 || !s->zl))
        return bs_fail(err, "drafter (cuda): DFlash 2 shape (taps %d, group %d, K %d, R %d) or tensors missing", s->conv_taps, s->conv_group, s->K, s->R);
    if (s->B * (s->nH / s->nKV) > 32)
        return bs_fail(err, "drafter (cuda): block %d x %d query heads per K/V head exceeds the block attention kernel's 32 rows",
                       s->B, s->nH / s->nKV);
    td_dev *d = new (std::nothrow) td_dev();
    if (!d) return bs_fail(err, "out of memory");
    d->s = *s; d->tgt = target; d->S = max_seqs; d->T = max_T; d->A = A; d->TB = max_T + s->B;
    d->qd = s->nH * s->hd; d->kd = s->nKV * s->hd; d->n_params = n_params;
    d->Nc = (long long)max_seqs * max_T; d->NBm = (long long)max_seqs * A; d->nq = d->NBm * s->B; d->np = d->NBm * s->P;
    if (dev_init(d, numel, trainable, decay, err)) { td_dev_free(d); return -1; }
    d->s.inv_freq = nullptr;   // the caller's table: read above only
    *out = d;
    return 0;
}

extern "C" int td_dev_copy(td_dev *d, int which, int i, float *host, int to_device, bs_err *err) {
    float *base = which == TC_W ? d->W : which == TC_G ? d->G : which == TC_M ? d->M : d->Vm;
    float *dp = base + d->off[i];
    size_t bytes = sizeof(float) * (size_t)d->numel[i];
    CU(cudaMemcpyAsync(to_device ? (void *)dp : (void *)host, to_device ? (const void *)host : (const void *)dp, bytes,
                       to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, d->st));
    CU(cudaStreamSynchronize(d->st));
    return 0;
}

extern "C" int td_dev_zero_grads(td_dev *d, bs_err *err) {
    CU(cudaMemsetAsync(d->G, 0, sizeof(float) * d->total, d->st));
    CU(cudaStreamSynchronize(d->st));
    return 0;
}

extern "C" int td_dev_step(td_dev *d, const td_batch *b, int grad, bs_err *err) {
    if (b->nseq < 1 || b->nseq > d->S || b->Tc < 2 || b->Tc > d->T || b->NB < 1 || b->NB > d->NBm)
        return bs_fail(err, "drafter (cuda): batch %d x %d with %d blocks outside the allocated %d x %d, %lld", b->nseq, b->Tc, b->NB, d->S,
                       d->T, d->NBm);
    long long nq = (long long)b->NB * d->s.B, np = (long long)b->NB * d->s.P;
    CU(cudaEventRecord(d->ev[0], d->st));
    if (tc_dev_forward_hidden(d->tgt, b->ids, b->nseq, b->Tc, err)) return bs_wrap(err, "drafter (cuda): target forward");
    CU(cudaEventRecord(d->ev[1], d->st));
#define UP(dst, src, n) CU(cudaMemcpyAsync(dst, src, sizeof(*(src)) * (size_t)(n), cudaMemcpyHostToDevice, d->st))
    UP(d->blk_ids, b->blk_ids, nq); UP(d->qpos, b->qpos, nq);
    UP(d->anchor, b->anchor, b->NB); UP(d->keep, b->keep, b->NB); UP(d->base, b->base, b->NB);
    UP(d->tid, b->tid, np); UP(d->tpos, b->tpos, np); UP(d->prev, b->prev, np); UP(d->w, b->w, np); UP(d->rs, b->rs, np);
#undef UP
    if (forward(d, b, grad, err)) return -1;
    CU(cudaEventRecord(d->ev[2], d->st));
    if (grad && backward(d, b, err)) return -1;
    CU(cudaEventRecord(d->ev[3], d->st));
#define DOWN(dst, src) CU(cudaMemcpyAsync(dst, src, sizeof(float) * (size_t)np, cudaMemcpyDeviceToHost, d->st))
    DOWN(b->ce_row, d->ce_row); DOWN(b->l1_row, d->l1_row); DOWN(b->acc, d->acc); DOWN(b->bce_row, d->bce_row);
#undef DOWN
    CU(cudaStreamSynchronize(d->st));
    float t[3];
    for (int i = 0; i < 3; i++) CU(cudaEventElapsedTime(&t[i], d->ev[i], d->ev[i + 1]));
    for (int i = 0; i < 3; i++) d->ms[i] += t[i];
    return 0;
}

extern "C" int td_dev_adamw(td_dev *d, float lr, float beta1, float beta2, float eps, float wd, float clip, int64_t step,
                            double *grad_norm, bs_err *err) {
    if (step < 1) return bs_fail(err, "AdamW step %lld (must be >= 1)", (long long)step);
    CU(cudaEventRecord(d->ev[3], d->st));
    CU(tc_adamw_launch(d->st, d->W, d->G, d->M, d->Vm, d->decay_end, d->train_end, d->total, d->norm_part, d->norm_out, d->coef, lr,
                       beta1, beta2, eps, wd, clip, step, grad_norm));
    CU(cudaEventRecord(d->ev[4], d->st));
    CU(cudaStreamSynchronize(d->st));
    float o = 0;
    CU(cudaEventElapsedTime(&o, d->ev[3], d->ev[4]));
    d->ms[3] += o;
    return 0;
}

extern "C" void td_dev_times(td_dev *d, double *ms, int reset) {
    for (int i = 0; i < TD_N_TIMES; i++) { if (ms) ms[i] = d->ms[i]; if (reset) d->ms[i] = 0; }
}
