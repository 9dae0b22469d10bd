// Qwen3 / Llama-3.x target training step on one GPU (llm.c's train_gpt2.cu is the model; a Llama layer is
// Qwen3's without the q/k norm: tc_shape.qk_norm): the forward keeps what the
// backward needs, the backward runs the layers in reverse, AdamW updates fp32 master weights in place.
//
// Numerics. Weights, activations and gradients are stored in fp32; every matmul is a cuBLAS GEMM whose
// compute type decides the arithmetic: CUBLAS_COMPUTE_32F_FAST_16BF (default) feeds the tensor cores bf16
// operands and accumulates in fp32, CUBLAS_COMPUTE_32F is exact fp32 (the gradient checks use it). fp32
// storage keeps every non-GEMM op (norms, RoPE, softmax, CE, residual adds, AdamW) in fp32 without a second
// copy of the weights, and makes the fp32 mode a plain switch; the price is memory traffic: each GEMM reads
// 4-byte operands and converts them (docs/training.md, "CUDA training", has what that costs).
//
// Layout. A batch is nb sequences padded to Tc tokens, row b*Tc + t, every activation token-major
// [rows][width]. Padding sits after each sequence's last token, so under the causal mask no real row ever
// sees it, and padded rows carry no loss, so their gradients are exactly zero.
//
// Attention. S = Q K^T / sqrt(hd) and O = P V per (sequence, head) are batched GEMMs over the full Tc x Tc
// block (the causal softmax writes exact zeros above the diagonal); P is not kept per layer: the backward
// recomputes it from the saved rotated q and k (one GEMM and one softmax), so the score memory is two
// buffers of nb * nH * Tc * Tc floats whatever the depth.
#include <cublas_v2.h>
#include <vector>
#include "tc_common.cuh"
#include "tc_norm.cuh"
#include "tc_attention.cuh"
#include "tc_loss_mlp.cuh"
#include "tc_adamw.cuh"
extern "C" {
#include "train/cuda/tc_dev.h"
#include "train/train_cuda.h"
#include "backend/backend.h"
}

#include "tc_gemm.cuh"

struct tc_layer_act {
    float *x_in;                   // residual stream entering the layer [rows][H] (x_in of layer l+1 = its output)
    float *xn1, *rstd1;            // input_layernorm output [rows][H], 1/rms [rows]
    float *qraw, *kraw, *v;        // projections [rows][qd], [rows][kd], [rows][kd]
    float *rq, *rk;                // q/k-norm 1/rms [rows*nH], [rows*nKV]
    float *q, *k;                  // normed + rotated [rows][qd], [rows][kd]
    float *att;                    // attention output before o_proj [rows][qd]
    float *mid;                    // residual after attention [rows][H]
    float *xn2, *rstd2;            // post_attention_layernorm output, 1/rms
    float *gate, *up;              // MLP projections [rows][I]
};

struct tc_dev {
    tc_shape s;
    int B, T, qd, kd, n_params;
    long long N;                   // B * T rows at most
    cudaStream_t st;
    cublasHandle_t cb;
    void *cb_ws;
    cublasComputeType_t ct;
    // parameters: one buffer each for weights, gradients, m, v (same offsets; decayed tensors first so that
    // AdamW is two launches); padding between tensors stays zero.
    std::vector<long long> off, numel;
    std::vector<int> decay;
    long long total, decay_end;
    float *W, *G, *M, *Vm;
    // activations
    std::vector<tc_layer_act> act;
    float *x_final, *xf, *rstdf, *logits;
    float *P, *dP;                 // [B * nH][T][T]
    float *dres, *dxn, *dq, *dk, *dv, *datt, *hbuf, *dh, *tmp;
    float *part;                   // colsum partials
    float *cosT, *sinT;            // [T][hd/2]
    int32_t *ids, *labels;
    float *wrow, *rowloss;
    float **ptrs;                  // 3 * B * nH
    double *norm_part, *norm_out;
    float *coef;
    size_t bytes;
    std::vector<void *> allocs;
    // timing split (cudaEvents, summed after each call's final sync): forward (attention included), attention
    // forward, cross-entropy, backward (attention included), attention backward, AdamW
    cudaEvent_t ev_fwd[2], ev_ce, ev_bwd, ev_opt[2];
    std::vector<cudaEvent_t> ev_att;    // [2 (fwd, bwd)][L][2 (start, end)]
    double ms[TC_N_TIMES];
};

static float *P_(tc_dev *d, int i) { return d->W + d->off[i]; }
static float *G_(tc_dev *d, int i) { return d->G + d->off[i]; }
static int LI(const tc_dev *d, int l, int k) { return tc_layer_param(d->s.qk_norm, l, k); }
static int final_norm(const tc_dev *d) { return 1 + tc_per_layer(d->s.qk_norm) * d->s.L; }
static int head(const tc_dev *d) { return d->s.tied ? 0 : final_norm(d) + 1; }
// layer l's q_norm / k_norm gains, or NULL (Llama: RoPE alone, tc_norm.cuh)
static float *qk_gain(tc_dev *d, int l, int k) { return d->s.qk_norm ? P_(d, LI(d, l, k)) : nullptr; }

static int dalloc(tc_dev *d, void **p, size_t bytes, bs_err *err) {
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 16);
    if (e != cudaSuccess)
        return bs_fail(err, "CUDA: cannot allocate %.1f MiB on the device (%.1f GiB taken so far): %s; use fewer or shorter sequences",
                       bytes / 1048576.0, d->bytes / 1073741824.0, cudaGetErrorString(e));
    d->allocs.push_back(*p);
    d->bytes += bytes;
    return 0;
}
#define DA(ptr, count) do { if (dalloc(d, (void **)&(ptr), sizeof(*(ptr)) * (size_t)(count), err)) return -1; } while (0)

// ---- GEMMs, row-major (mm, lin_fwd, lin_bwd: tc_gemm.cuh) --------------------------------------------------
// Batched over nb * nj items (see tc_build_ptrs): C_i = alpha op(A_i) op(B_i) + beta C_i.
static int mm_batched(tc_dev *d, bool ta, bool tb, int M, int N, int K, float alpha, tc_pspec a, int lda, tc_pspec b, int ldb,
                      float beta, tc_pspec c, int ldc, int nb, int nj, int hmul, int hadd, bs_err *err) {
    int n = nb * nj;
    tc_build_ptrs<<<tc_blocks(n, 256), 256, 0, d->st>>>(d->ptrs, a, b, c, nb, nj, hmul, hadd);
    LAUNCHED();
    CB(cublasGemmBatchedEx(d->cb, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
                           (const void *const *)(d->ptrs + n), CUDA_R_32F, ldb, (const void *const *)d->ptrs, CUDA_R_32F,
                           lda, &beta, (void *const *)(d->ptrs + 2 * n), CUDA_R_32F, ldc, n, d->ct, CUBLAS_GEMM_DEFAULT));
    return 0;
}

// ---- attention -------------------------------------------------------------------------------------------
static tc_pspec ps(float *base, long long sb, long long sh, int hdiv) { tc_pspec p = { base, sb, sh, hdiv }; return p; }

// P = causal softmax(Q K^T / sqrt(hd)) for every (sequence, head).
static int scores(tc_dev *d, const tc_layer_act *a, int nb, int Tc, bs_err *err) {
    const tc_shape &s = d->s;
    int g = s.nH / s.nKV;
    long long TT = (long long)Tc * Tc;
    if (mm_batched(d, false, true, Tc, Tc, s.hd, 1.f / sqrtf((float)s.hd), ps(a->q, (long long)Tc * d->qd, s.hd, 1), d->qd,
                   ps(a->k, (long long)Tc * d->kd, s.hd, g), d->kd, 0.f, ps(d->P, s.nH * TT, TT, 1), Tc, nb, s.nH, 1, 0, err))
        return -1;
    long long nrows = (long long)nb * s.nH * Tc;
    tc_softmax_causal<<<tc_blocks(nrows, TC_WARPS), 32 * TC_WARPS, 0, d->st>>>(d->P, Tc, nrows);
    LAUNCHED();
    return 0;
}

static cudaEvent_t att_ev(tc_dev *d, int bwd, const tc_layer_act *a, int end) {
    int l = (int)(a - d->act.data());
    return d->ev_att[((size_t)bwd * d->s.L + l) * 2 + end];
}

static int attention_fwd(tc_dev *d, tc_layer_act *a, int nb, int Tc, bs_err *err) {
    const tc_shape &s = d->s;
    int g = s.nH / s.nKV;
    long long TT = (long long)Tc * Tc;
    if (scores(d, a, nb, Tc, err)) return -1;
    return mm_batched(d, false, false, Tc, s.hd, Tc, 1.f, ps(d->P, s.nH * TT, TT, 1), Tc, ps(a->v, (long long)Tc * d->kd, s.hd, g),
                      d->kd, 0.f, ps(a->att, (long long)Tc * d->qd, s.hd, 1), d->qd, nb, s.nH, 1, 0, err);
}

// datt -> dq (w.r.t. the rotated q), dk, dv. K/V heads shared by g query heads get their gradients summed
// over the group: one batched GEMM per group member, the first writing, the rest adding (items of one
// batched call must not write the same matrix).
static int attention_bwd(tc_dev *d, const tc_layer_act *a, int nb, int Tc, bs_err *err) {
    const tc_shape &s = d->s;
    int g = s.nH / s.nKV, qd = d->qd, kd = d->kd;
    long long TT = (long long)Tc * Tc, nrows = (long long)nb * s.nH * Tc;
    float scale = 1.f / sqrtf((float)s.hd);
    if (scores(d, a, nb, Tc, err)) return -1;
    // dP = dO V^T
    if (mm_batched(d, false, true, Tc, Tc, s.hd, 1.f, ps(d->datt, (long long)Tc * qd, s.hd, 1), qd, ps(a->v, (long long)Tc * kd, s.hd, g),
                   kd, 0.f, ps(d->dP, s.nH * TT, TT, 1), Tc, nb, s.nH, 1, 0, err)) return -1;
    tc_softmax_bwd<<<tc_blocks(nrows, TC_WARPS), 32 * TC_WARPS, 0, d->st>>>(d->dP, d->P, Tc, nrows);
    LAUNCHED();
    // dQ = scale dS K
    if (mm_batched(d, false, false, Tc, s.hd, Tc, scale, ps(d->dP, s.nH * TT, TT, 1), Tc, ps(a->k, (long long)Tc * kd, s.hd, g), kd,
                   0.f, ps(d->dq, (long long)Tc * qd, s.hd, 1), qd, nb, s.nH, 1, 0, err)) return -1;
    for (int gi = 0; gi < g; gi++) {
        float beta = gi ? 1.f : 0.f;
        // dV[kh] += P_h^T dO_h ;  dK[kh] += scale dS_h^T Q_h   for h = kh * g + gi
        if (mm_batched(d, true, false, Tc, s.hd, Tc, 1.f, ps(d->P, s.nH * TT, TT, 1), Tc, ps(d->datt, (long long)Tc * qd, s.hd, 1), qd,
                       beta, ps(d->dv, (long long)Tc * kd, s.hd, g), kd, nb, s.nKV, g, gi, err)) return -1;
        if (mm_batched(d, true, false, Tc, s.hd, Tc, scale, ps(d->dP, s.nH * TT, TT, 1), Tc, ps(a->q, (long long)Tc * qd, s.hd, 1), qd,
                       beta, ps(d->dk, (long long)Tc * kd, s.hd, g), kd, nb, s.nKV, g, gi, err)) return -1;
    }
    return 0;
}

// ---- forward / backward ----------------------------------------------------------------------------------
static int forward(tc_dev *d, int nb, int Tc, int with_logits, bs_err *err) {
    const tc_shape &s = d->s;
    int rows = nb * Tc, H = s.H, qd = d->qd, kd = d->kd, I = s.I;
    tc_embed_fwd<<<rows, 256, 0, d->st>>>(d->act[0].x_in, P_(d, 0), d->ids, H);
    LAUNCHED();
    for (int l = 0; l < s.L; l++) {
        tc_layer_act *a = &d->act[l];
        float *x_out = l + 1 < s.L ? d->act[l + 1].x_in : d->x_final;
        if (rmsnorm(d, a->xn1, a->rstd1, a->x_in, P_(d, LI(d, l, TC_IN_NORM)), rows, H, err) ||
            lin_fwd(d, a->qraw, a->xn1, P_(d, LI(d, l, TC_WQ)), rows, qd, H, 0.f, err) ||
            lin_fwd(d, a->kraw, a->xn1, P_(d, LI(d, l, TC_WK)), rows, kd, H, 0.f, err) ||
            lin_fwd(d, a->v, a->xn1, P_(d, LI(d, l, TC_WV)), rows, kd, H, 0.f, err)) return -1;
        long long nq = (long long)rows * s.nH, nk = (long long)rows * s.nKV;
        tc_qknorm_rope_fwd<<<tc_blocks(nq, TC_WARPS), 32 * TC_WARPS, 0, d->st>>>(a->q, a->rq, a->qraw, qk_gain(d, l, TC_QNORM), nq, s.nH,
                                                                              s.hd, nullptr, Tc, d->cosT, d->sinT, s.eps);
        tc_qknorm_rope_fwd<<<tc_blocks(nk, TC_WARPS), 32 * TC_WARPS, 0, d->st>>>(a->k, a->rk, a->kraw, qk_gain(d, l, TC_KNORM), nk, s.nKV,
                                                                              s.hd, nullptr, Tc, d->cosT, d->sinT, s.eps);
        LAUNCHED();
        CU(cudaEventRecord(att_ev(d, 0, a, 0), d->st));
        if (attention_fwd(d, a, nb, Tc, err)) return -1;
        CU(cudaEventRecord(att_ev(d, 0, a, 1), d->st));
        // residual adds: the GEMM accumulates (beta = 1) into a copy of the stream
        CU(cudaMemcpyAsync(a->mid, a->x_in, sizeof(float) * rows * H, cudaMemcpyDeviceToDevice, d->st));
        if (lin_fwd(d, a->mid, a->att, P_(d, LI(d, l, TC_WO)), rows, H, qd, 1.f, err) ||
            rmsnorm(d, a->xn2, a->rstd2, a->mid, P_(d, LI(d, l, TC_POST_NORM)), rows, H, err) ||
            lin_fwd(d, a->gate, a->xn2, P_(d, LI(d, l, TC_WG)), rows, I, H, 0.f, err) ||
            lin_fwd(d, a->up, a->xn2, P_(d, LI(d, l, TC_WU)), rows, I, H, 0.f, err)) return -1;
        long long nI = (long long)rows * I;
        tc_swiglu_fwd<<<tc_blocks(nI, 256), 256, 0, d->st>>>(d->hbuf, a->gate, a->up, nI);
        LAUNCHED();
        CU(cudaMemcpyAsync(x_out, a->mid, sizeof(float) * rows * H, cudaMemcpyDeviceToDevice, d->st));
        if (lin_fwd(d, x_out, d->hbuf, P_(d, LI(d, l, TC_WD)), rows, H, I, 1.f, err)) return -1;
    }
    if (rmsnorm(d, d->xf, d->rstdf, d->x_final, P_(d, final_norm(d)), rows, H, err)) return -1;
    if (!with_logits) return 0;
    return lin_fwd(d, d->logits, d->xf, P_(d, head(d)), rows, s.V, H, 0.f, err);
}

// d->logits holds d loss / d logits.
static int backward(tc_dev *d, int nb, int Tc, bs_err *err) {
    const tc_shape &s = d->s;
    int rows = nb * Tc, H = s.H, qd = d->qd, kd = d->kd, I = s.I, nrm = final_norm(d), hd_i = head(d);
    unsigned rb = tc_blocks(rows, TC_WARPS);
    if (lin_bwd(d, d->dxn, 0.f, G_(d, hd_i), d->logits, d->xf, P_(d, hd_i), rows, s.V, H, err)) return -1;
    CU(cudaMemsetAsync(d->dres, 0, sizeof(float) * rows * H, d->st));
    tc_rmsnorm_bwd<<<rb, 32 * TC_WARPS, 0, d->st>>>(d->dres, d->dxn, d->x_final, d->rstdf, P_(d, nrm), rows, H);
    LAUNCHED();
    if (colsum(d, G_(d, nrm), d->dxn, d->x_final, d->rstdf, rows, H, err)) return -1;
    for (int l = s.L - 1; l >= 0; l--) {
        tc_layer_act *a = &d->act[l];
        long long nI = (long long)rows * I;
        // MLP: out = mid + (silu(gate) * up) Wd^T
        tc_swiglu_fwd<<<tc_blocks(nI, 256), 256, 0, d->st>>>(d->hbuf, a->gate, a->up, nI);   // h, recomputed
        LAUNCHED();
        if (lin_bwd(d, d->dh, 0.f, G_(d, LI(d, l, TC_WD)), d->dres, d->hbuf, P_(d, LI(d, l, TC_WD)), rows, H, I, err)) return -1;
        tc_swiglu_bwd<<<tc_blocks(nI, 256), 256, 0, d->st>>>(d->hbuf, d->dh, d->dh, a->gate, a->up, nI);   // dgate -> hbuf, dup -> dh
        LAUNCHED();
        if (lin_bwd(d, d->dxn, 0.f, G_(d, LI(d, l, TC_WG)), d->hbuf, a->xn2, P_(d, LI(d, l, TC_WG)), rows, I, H, err) ||
            lin_bwd(d, d->dxn, 1.f, G_(d, LI(d, l, TC_WU)), d->dh, a->xn2, P_(d, LI(d, l, TC_WU)), rows, I, H, err)) return -1;
        tc_rmsnorm_bwd<<<rb, 32 * TC_WARPS, 0, d->st>>>(d->dres, d->dxn, a->mid, a->rstd2, P_(d, LI(d, l, TC_POST_NORM)), rows, H);
        LAUNCHED();
        if (colsum(d, G_(d, LI(d, l, TC_POST_NORM)), d->dxn, a->mid, a->rstd2, rows, H, err)) return -1;
        // attention: mid = x_in + att Wo^T
        if (lin_bwd(d, d->datt, 0.f, G_(d, LI(d, l, TC_WO)), d->dres, a->att, P_(d, LI(d, l, TC_WO)), rows, H, qd, err)) return -1;
        CU(cudaEventRecord(att_ev(d, 1, a, 0), d->st));
        if (attention_bwd(d, a, nb, Tc, err)) return -1;
        CU(cudaEventRecord(att_ev(d, 1, a, 1), d->st));
        long long nq = (long long)rows * s.nH, nk = (long long)rows * s.nKV;
        tc_qknorm_rope_bwd<<<tc_blocks(nq, TC_WARPS), 32 * TC_WARPS, 0, d->st>>>(d->dq, d->tmp, d->dq, a->qraw, a->rq,
            qk_gain(d, l, TC_QNORM), nq, s.nH, s.hd, nullptr, Tc, d->cosT, d->sinT);
        LAUNCHED();
        if (s.qk_norm && colsum(d, G_(d, LI(d, l, TC_QNORM)), d->tmp, a->qraw, a->rq, nq, s.hd, err)) return -1;
        tc_qknorm_rope_bwd<<<tc_blocks(nk, TC_WARPS), 32 * TC_WARPS, 0, d->st>>>(d->dk, d->tmp, d->dk, a->kraw, a->rk,
            qk_gain(d, l, TC_KNORM), nk, s.nKV, s.hd, nullptr, Tc, d->cosT, d->sinT);
        LAUNCHED();
        if (s.qk_norm && colsum(d, G_(d, LI(d, l, TC_KNORM)), d->tmp, a->kraw, a->rk, nk, s.hd, err)) return -1;
        if (lin_bwd(d, d->dxn, 0.f, G_(d, LI(d, l, TC_WQ)), d->dq, a->xn1, P_(d, LI(d, l, TC_WQ)), rows, qd, H, err) ||
            lin_bwd(d, d->dxn, 1.f, G_(d, LI(d, l, TC_WK)), d->dk, a->xn1, P_(d, LI(d, l, TC_WK)), rows, kd, H, err) ||
            lin_bwd(d, d->dxn, 1.f, G_(d, LI(d, l, TC_WV)), d->dv, a->xn1, P_(d, LI(d, l, TC_WV)), rows, kd, H, err)) return -1;
        tc_rmsnorm_bwd<<<rb, 32 * TC_WARPS, 0, d->st>>>(d->dres, d->dxn, a->x_in, a->rstd1, P_(d, LI(d, l, TC_IN_NORM)), rows, H);
        LAUNCHED();
        if (colsum(d, G_(d, LI(d, l, TC_IN_NORM)), d->dxn, a->x_in, a->rstd1, rows, H, err)) return -1;
    }
    tc_embed_bwd<<<rows, 256, 0, d->st>>>(G_(d, 0), d->dres, d->ids, H);
    LAUNCHED();
    return 0;
}

// ---- initialisation ----------------------------------------------------------------------------------------
__device__ __forceinline__ uint64_t tc_mix(uint64_t z) {   // splitmix64's finaliser
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
// w[j] ~ N(0, std): Box-Muller in double on two counter-based uniforms per pair (j/2), keyed by (seed, tensor),
// so the result does not depend on the launch shape; std == 0: every element 1 (norm gains).
__global__ void tc_init_normal(float *w, long long n, uint64_t seed, uint64_t tensor, double std) {
    long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    if (std == 0) { w[j] = 1.f; return; }
    uint64_t key = tc_mix(seed ^ tc_mix(tensor)), p = (uint64_t)(j >> 1);
    double u1 = ((tc_mix(key ^ (2 * p)) >> 11) + 1) * 0x1.0p-53, u2 = (tc_mix(key ^ (2 * p + 1)) >> 11) * 0x1.0p-53;
    double r = sqrt(-2.0 * log(u1)) * std, sn, cs;
    sincospi(2.0 * u2, &sn, &cs);
    w[j] = (float)(j & 1 ? r * sn : r * cs);
}

// ---- the C interface -------------------------------------------------------------------------------------
extern "C" size_t tc_dev_bytes(const tc_dev *d) { return d->bytes; }

extern "C" void tc_dev_set_gemm(tc_dev *d, int mode) {
    d->ct = mode == BS_TRAIN_GEMM_FP32 ? CUBLAS_COMPUTE_32F : mode == BS_TRAIN_GEMM_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                                        : CUBLAS_COMPUTE_32F_FAST_16BF;
}

extern "C" void tc_dev_free(tc_dev *d) {
    if (!d) return;
    if (d->st) cudaStreamSynchronize(d->st);
    for (void *p : d->allocs) cudaFree(p);
    for (cudaEvent_t e : d->ev_att) cudaEventDestroy(e);
    cudaEvent_t *ev[] = { &d->ev_fwd[0], &d->ev_fwd[1], &d->ev_ce, &d->ev_bwd, &d->ev_opt[0], &d->ev_opt[1] };
    for (cudaEvent_t *e : ev) if (*e) cudaEventDestroy(*e);
    if (d->cb) cublasDestroy(d->cb);
    if (d->st) cudaStreamDestroy(d->st);
    delete d;
}

static int dev_init(tc_dev *d, const tc_shape *s, int B, int T, int n_params, const int64_t *numel, const int *decay, bs_err *err) {
    int dn = 0;
    CU(cudaGetDeviceCount(&dn));
    if (dn < 1) return bs_fail(err, "no CUDA device");
    CU(cudaSetDevice(0));
    CU(cudaStreamCreateWithFlags(&d->st, cudaStreamNonBlocking));
    CB(cublasCreate(&d->cb));
    CB(cublasSetStream(d->cb, d->st));
    size_t ws = 64u << 20;
    if (dalloc(d, &d->cb_ws, ws, err)) return -1;
    CB(cublasSetWorkspace(d->cb, d->cb_ws, ws));
    tc_dev_set_gemm(d, BS_TRAIN_GEMM_BF16);
    cudaEvent_t *ev[] = { &d->ev_fwd[0], &d->ev_fwd[1], &d->ev_ce, &d->ev_bwd, &d->ev_opt[0], &d->ev_opt[1] };
    for (cudaEvent_t *e : ev) CU(cudaEventCreate(e));
    d->ev_att.assign((size_t)4 * s->L, (cudaEvent_t)0);
    for (cudaEvent_t &e : d->ev_att) CU(cudaEventCreate(&e));
    // parameters: decayed tensors first, each at a 128-byte aligned offset
    d->off.assign(n_params, 0); d->numel.assign(numel, numel + n_params); d->decay.assign(decay, decay + n_params);
    long long o = 0;
    for (int pass = 1; pass >= 0; pass--) {
        for (int i = 0; i < n_params; i++) if (!!decay[i] == pass) { d->off[i] = o; o += (numel[i] + 31) / 32 * 32; }
        if (pass) d->decay_end = o;
    }
    d->total = o;
    DA(d->W, o); DA(d->G, o); DA(d->M, o); DA(d->Vm, o);
    CU(cudaMemset(d->W, 0, sizeof(float) * o)); CU(cudaMemset(d->G, 0, sizeof(float) * o));
    CU(cudaMemset(d->M, 0, sizeof(float) * o)); CU(cudaMemset(d->Vm, 0, sizeof(float) * o));
    // activations
    long long N = d->N;
    int H = s->H, qd = d->qd, kd = d->kd, I = s->I;
    d->act.assign(s->L, tc_layer_act());
    for (int l = 0; l < s->L; l++) {
        tc_layer_act *a = &d->act[l];
        DA(a->x_in, N * H); DA(a->xn1, N * H); DA(a->rstd1, N); DA(a->qraw, N * qd); DA(a->kraw, N * kd); DA(a->v, N * kd);
        DA(a->rq, N * s->nH); DA(a->rk, N * s->nKV); DA(a->q, N * qd); DA(a->k, N * kd); DA(a->att, N * qd);
        DA(a->mid, N * H); DA(a->xn2, N * H); DA(a->rstd2, N); DA(a->gate, N * I); DA(a->up, N * I);
    }
    DA(d->x_final, N * H); DA(d->xf, N * H); DA(d->rstdf, N); DA(d->logits, N * s->V);
    DA(d->P, (long long)B * s->nH * T * T); DA(d->dP, (long long)B * s->nH * T * T);
    DA(d->dres, N * H); DA(d->dxn, N * H); DA(d->dq, N * qd); DA(d->dk, N * kd); DA(d->dv, N * kd); DA(d->datt, N * qd);
    DA(d->hbuf, N * I); DA(d->dh, N * I); DA(d->tmp, N * qd);
    DA(d->part, (long long)TC_CS_CHUNKS * (H > s->hd ? H : s->hd));
    DA(d->cosT, (long long)T * (s->hd / 2)); DA(d->sinT, (long long)T * (s->hd / 2));
    DA(d->ids, N); DA(d->labels, N); DA(d->wrow, N); DA(d->rowloss, N);
    DA(d->ptrs, 3LL * B * s->nH);
    DA(d->norm_part, TC_NORM_BLOCKS); DA(d->norm_out, 1); DA(d->coef, 1);
    // RoPE tables exactly as the engine computes them (bs_cpu_rope_row): the model's fp32 inv_freq table (default
    // or llama3-scaled, built by the host with bs_rope_inv_freqs), cosf / sinf of the fp32 angle
    int half = s->hd / 2;
    if (!s->inv_freq) return bs_fail(err, "no RoPE table given");
    std::vector<float> c((size_t)T * half), sn((size_t)T * half);
    for (int p = 0; p < T; p++)
        for (int i = 0; i < half; i++) {
            float ang = (float)p * s->inv_freq[i];
            c[(size_t)p * half + i] = cosf(ang); sn[(size_t)p * half + i] = sinf(ang);
        }
    CU(cudaMemcpy(d->cosT, c.data(), sizeof(float) * c.size(), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(d->sinT, sn.data(), sizeof(float) * sn.size(), cudaMemcpyHostToDevice));
    CU(cudaDeviceSynchronize());          // the set-up above ran on the legacy stream; the task's stream does not wait for it
    return 0;
}

extern "C" int tc_dev_new(tc_dev **out, const tc_shape *s, int B, int T, int n_params, const int64_t *numel, const int *decay,
                          bs_err *err) {
    *out = NULL;
    tc_dev *d = new (std::nothrow) tc_dev();
    if (!d) return bs_fail(err, "out of memory");
    d->s = *s; d->B = B; d->T = T; d->N = (long long)B * T;
    d->qd = s->nH * s->hd; d->kd = s->nKV * s->hd; d->n_params = n_params;
    if (dev_init(d, s, B, T, n_params, numel, decay, err)) { tc_dev_free(d); return -1; }
    d->s.inv_freq = nullptr;   // the caller's table: read above only
    *out = d;
    return 0;
}

extern "C" int tc_dev_copy(tc_dev *d, int which, int i, float *host, int to_device, bs_err *err) {
    float *base = which == TC_W ? d->W : which == TC_G ? d->G : which == TC_M ? d->M : d->Vm;
    float *dp = base + d->off[i];
    size_t bytes = sizeof(float) * (size_t)d->numel[i];
    // on the task's stream (non-blocking: a plain cudaMemcpy would not order against its kernels), then wait
    CU(cudaMemcpyAsync(to_device ? (void *)dp : (void *)host, to_device ? (const void *)host : (const void *)dp, bytes,
                       to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, d->st));
    CU(cudaStreamSynchronize(d->st));
    return 0;
}

extern "C" int tc_dev_init_normal(tc_dev *d, int i, double std, uint64_t seed, bs_err *err) {
    tc_init_normal<<<tc_blocks(d->numel[i], 256), 256, 0, d->st>>>(d->W + d->off[i], d->numel[i], seed, (uint64_t)i, std);
    LAUNCHED();
    return 0;
}

extern "C" int tc_dev_zero_grads(tc_dev *d, bs_err *err) {
    CU(cudaMemsetAsync(d->G, 0, sizeof(float) * d->total, d->st));
    CU(cudaStreamSynchronize(d->st));
    return 0;
}

extern "C" int tc_dev_step(tc_dev *d, const int32_t *ids, const int32_t *labels, const float *wrow, int nb, int Tc, int grad,
                           float *rowloss, float *logits, bs_err *err) {
    if (nb < 1 || nb > d->B || Tc < 1 || Tc > d->T) return bs_fail(err, "batch %d x %d outside the allocated %d x %d", nb, Tc, d->B, d->T);
    size_t rows = (size_t)nb * Tc;
    CU(cudaMemcpyAsync(d->ids, ids, sizeof(int32_t) * rows, cudaMemcpyHostToDevice, d->st));
    CU(cudaMemcpyAsync(d->labels, labels, sizeof(int32_t) * rows, cudaMemcpyHostToDevice, d->st));
    CU(cudaMemcpyAsync(d->wrow, wrow, sizeof(float) * rows, cudaMemcpyHostToDevice, d->st));
    CU(cudaEventRecord(d->ev_fwd[0], d->st));
    if (forward(d, nb, Tc, 1, err)) return -1;
    CU(cudaEventRecord(d->ev_fwd[1], d->st));
    if (logits && !grad) CU(cudaMemcpyAsync(logits, d->logits, sizeof(float) * rows * d->s.V, cudaMemcpyDeviceToHost, d->st));
    tc_cross_entropy<<<(unsigned)rows, 512, 0, d->st>>>(d->logits, d->rowloss, d->labels, d->wrow, d->s.V, grad);
    LAUNCHED();
    CU(cudaEventRecord(d->ev_ce, d->st));
    if (grad && backward(d, nb, Tc, err)) return -1;
    CU(cudaEventRecord(d->ev_bwd, d->st));
    CU(cudaMemcpyAsync(rowloss, d->rowloss, sizeof(float) * rows, cudaMemcpyDeviceToHost, d->st));
    CU(cudaStreamSynchronize(d->st));
    float f = 0, c = 0, b = 0, af = 0, ab = 0, x;
    CU(cudaEventElapsedTime(&f, d->ev_fwd[0], d->ev_fwd[1]));
    CU(cudaEventElapsedTime(&c, d->ev_fwd[1], d->ev_ce));
    CU(cudaEventElapsedTime(&b, d->ev_ce, d->ev_bwd));
    for (int l = 0; l < d->s.L; l++) {
        CU(cudaEventElapsedTime(&x, d->ev_att[2 * l], d->ev_att[2 * l + 1])); af += x;
        if (grad) { CU(cudaEventElapsedTime(&x, d->ev_att[2 * (d->s.L + l)], d->ev_att[2 * (d->s.L + l) + 1])); ab += x; }
    }
    d->ms[0] += f; d->ms[1] += af; d->ms[2] += c; d->ms[3] += b; d->ms[4] += ab;
    return 0;
}

extern "C" int tc_dev_adamw(tc_dev *d, float lr, float beta1, float beta2, float eps, float wd, float clip, int64_t step,
                            double *grad_norm, bs_err *err) {
    if (step < 1) return bs_fail(err, "AdamW step %lld (must be >= 1)", (long long)step);
    CU(cudaEventRecord(d->ev_opt[0], d->st));
    CU(tc_adamw_launch(d->st, d->W, d->G, d->M, d->Vm, d->decay_end, d->total, d->total, d->norm_part, d->norm_out, d->coef, lr, beta1,
                       beta2, eps, wd, clip, step, grad_norm));
    CU(cudaEventRecord(d->ev_opt[1], d->st));
    CU(cudaStreamSynchronize(d->st));
    float o = 0;
    CU(cudaEventElapsedTime(&o, d->ev_opt[0], d->ev_opt[1]));
    d->ms[5] += o;
    return 0;
}

extern "C" void tc_dev_times(tc_dev *d, double *ms, int reset) {
    for (int i = 0; i < TC_N_TIMES; i++) { if (ms) ms[i] = d->ms[i]; if (reset) d->ms[i] = 0; }
}

// ---- the frozen target of the GPU drafter trainer (drafter_step.cu) ---------------------------------------
extern "C" int tc_dev_forward_hidden(tc_dev *d, const int32_t *ids, int nb, int Tc, bs_err *err) {
    if (nb < 1 || nb > d->B || Tc < 1 || Tc > d->T) return bs_fail(err, "batch %d x %d outside the allocated %d x %d", nb, Tc, d->B, d->T);
    CU(cudaMemcpyAsync(d->ids, ids, sizeof(int32_t) * (size_t)nb * Tc, cudaMemcpyHostToDevice, d->st));
    return forward(d, nb, Tc, 0, err);
}
extern "C" const float *tc_dev_hidden(tc_dev *d, int idx) {
    if (idx < 0 || idx > d->s.L) return NULL;
    return idx == d->s.L ? d->xf : d->act[idx].x_in;
}
extern "C" float *tc_dev_param(tc_dev *d, int i) { return i >= 0 && i < d->n_params ? d->W + d->off[i] : NULL; }
extern "C" void *tc_dev_stream(tc_dev *d) { return (void *)d->st; }
