// Shared internals of the CUDA backend (one translation unit per job: cuda_backend.cu = device,
// memory, weights, graphs and the op table; cuda_gemm.cu, cuda_attention.cu, cuda_norm_rope.cu,
// cuda_elementwise.cu, cuda_sample.cu = the ops; cuda_profile.cu = BS_CUDA_PROFILE).
#pragma once
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <math.h>
#include <utility>

extern "C" {
#include "backend/backend.h"
#include "util/tuning.h"   // the knobs (BS_CUDA_*): read from bs_tuning_get(), never from the environment
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
    int after_gemm;                      // the last kernel launched was the tiled GEMM (or its fixup)
    int kv_settled;                      // the last kernel launched waits for its predecessor before it lets
                                         // its successor start (qk_norm_rope_store): see cu_attention
    int pdl_next;                        // launch the next kernel with PDL (qk_norm_rope_store for the attention;
                                         // harmless if a stale flag reaches another kernel: every launch_k
                                         // kernel waits before it reads)
    float *ws; size_t ws_bytes;          // matmul split-K partials
    unsigned *counters; int n_counters;  // matmul split-K arrival counters (kept at zero between uses)
    float *att_ws; size_t att_ws_bytes;  // attention partials
    float *xal; size_t xal_bytes;        // matmul: 16-byte aligned copy of unaligned activations
    int32_t *d_argmax, *h_argmax;
    float *am_v; int *am_i; unsigned *am_ctr;   // argmax: per-part winners of 64 rows x 32 parts, row counters
    void *pin[2]; size_t pin_bytes; cudaEvent_t pin_ev[2];  // weight upload: pinned double buffer
    void *stage; size_t stage_bytes;      // weight upload: device staging for the tiled relayout
    void **weights; int n_weights, cap_weights;
    char name[320];
    bs_backend *be;                      // the backend this is the state of: where ops report faults
};

static inline cuda_impl *CI(bs_backend *be) { return (cuda_impl *)be->impl; }

// A CUDA call or launch that failed becomes the backend's fault (backend.h): the op goes on (what it
// computes is garbage), the forward's bs_backend_check returns the error to the caller, and nothing
// exits the process. The error is taken off the runtime's last-error slot so that later calls are judged
// on their own (one that persists, like a lost context, simply fails them too).
static inline void cu_fault(cuda_impl *c, const char *what, cudaError_t e) {
    cudaGetLastError();
    bs_backend_fail(c->be, "CUDA error in %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}
// An op that declines its arguments (a shape its kernels do not take, a recording it cannot make): the
// backend's fault, then the op returns without launching anything.
#define CU_DECLINE(c, ...) do { bs_backend_fail((c)->be, "CUDA " __VA_ARGS__); return; } while (0)
// Ids or counts read back to the host after a fault may be stale values of another op (the pinned buffer is
// shared): zeros instead, always in range (a count of 0, token 0), until the caller's check reports the fault.
static inline void ids_sane(cuda_impl *c, int32_t *host, int n) {
    if (__atomic_load_n(&c->be->failed, __ATOMIC_ACQUIRE)) memset(host, 0, sizeof(int32_t) * (size_t)n);
}
#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) cu_fault(c, #call, e_); } while (0)
#define LAUNCHED(what) do { cudaError_t e_ = cudaGetLastError(); if (e_ != cudaSuccess) cu_fault(c, what, e_); } while (0)

// A K/V view on the device (backend.h, bs_kv_view): key j's row through the page table, or j itself.
struct kv_dev { float *k, *v; const int32_t *pages; int page_rows; };
static inline kv_dev kv_dev_of(const bs_kv_view *kv) { kv_dev d = { kv->k, kv->v, kv->pages, kv->page_rows }; return d; }
__device__ __forceinline__ size_t kv_dev_row(const kv_dev &kv, int j) {
    return kv.pages ? (size_t)kv.pages[j / kv.page_rows] * kv.page_rows + (size_t)(j % kv.page_rows) : (size_t)j;
}

static inline posarg P(cuda_impl *c, int v) {
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

// (cuda_norm_rope.cu's head norm kernels, and the q/k/v fixup of cuda_gemm_tiled.cu)
// One warp per (row, head): optional per-head RMSNorm, then rotate-half RoPE; the result goes back to v
// and, when v2 != NULL, to v2 too (the fused K path writes the rotated key into the cache as well).
__device__ __forceinline__ void head_norm_rope_warp(float *v, float *v2, int hd, const void *nw, int dt, float eps, int pos,
                                                    const float *inv_freq, int lane) {
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
            float ang = (float)pos * inv_freq[i], cs = cosf(ang), sn = sinf(ang);   // the model's fp32 table (model/rope.h)
            float r0 = a[u] * cs - b[u] * sn, r1 = b[u] * cs + a[u] * sn;
            v[i] = r0; v[i + half] = r1;
            if (v2) { v2[i] = r0; v2[i + half] = r1; }
        }
    }
}

// Tiled BF16 weights (cuda_gemm_tiled.cu): [M/128][K/64] tiles of 128 rows x 64 k, XOR-swizzled
// 16-byte chunks, k permuted inside each 16-k group. layout = BS_CUDA_TILED in their bs_mat.
#define BS_CUDA_TILED 1
#include "backend/cuda/tiled_layout.h"
bool mm_tiled_eligible(const bs_mat *host);
size_t mm_tiled_bytes(const bs_mat *host);
int mm_tiled_upload(cuda_impl *c, void *d, const bs_mat *host, bs_err *err);
// 8-bit tiles with row scales (tiled_layout.h), layout = BS_CUDA_FP8: lossy weights (weight_lossy).
#define BS_CUDA_FP8 2
// MLX affine codes + scales + biases in one allocation (cuda_affine.cu), layout = BS_CUDA_AFFINE.
#define BS_CUDA_AFFINE 3
// Uploads an affine weight: *dst its device view, *d the allocation to free with the backend.
int cu_affine_upload(cuda_impl *c, bs_mat *dst, const bs_mat *host, void **d, bs_err *err);
// y (+)= x . W^T for an affine W (any row count; batch-invariant).
void mm_affine(cuda_impl *c, float *y, const float *x, int n, const bs_mat *W, int acc);
// Element (id, i) of an affine table, dequantised with the format's formula (fmaf(scale, q, bias) in fp32).
__device__ __forceinline__ float affine_elem(const uint32_t *codes, const void *scales, const void *biases, int dt, int bits, int group,
                                             int cols, int id, int i) {
    const int P = 32 / bits;
    const uint32_t v = codes[(size_t)id * (cols / P) + i / P];
    const size_t g = (size_t)id * (cols / group) + i / group;
    return fmaf(dt == BS_F32 ? ((const float *)scales)[g] : dt == BS_BF16 ? __bfloat162float(((const __nv_bfloat16 *)scales)[g]) : __half2float(((const __half *)scales)[g]),
                (float)((v >> ((i % P) * bits)) & ((1u << bits) - 1u)),
                dt == BS_F32 ? ((const float *)biases)[g] : dt == BS_BF16 ? __bfloat162float(((const __nv_bfloat16 *)biases)[g]) : __half2float(((const __half *)biases)[g]));
}
bool mm_fp8_eligible(const bs_mat *host);
size_t mm_fp8_bytes(const bs_mat *host);
int mm_fp8_upload(cuda_impl *c, void *d, const bs_mat *host, bs_err *err);
#define MM_MAX_JOBS 4
void mm_tiled_launch(cuda_impl *c, int count, float *const *y, const bs_mat *const *W, const int *acc, const float *x, int n,
                     const float *up = NULL);
int cu_swiglu_matmul(bs_backend *be, float *y, const float *g, const float *u, int n, const bs_mat *W, int accumulate);
int cu_qkv_norm_rope_store(bs_backend *be, const float *x, int n, const bs_mat *const *W, float *q, float *k, float *v, int n_heads,
                           int n_kv, int hd, const bs_mat *q_norm, const bs_mat *k_norm, float eps, int pos0, const float *inv_freq,
                           const bs_kv_view *kv);
// The flags qk_norm_rope_store's launch leaves for the attention after it (cuda_norm_rope.cu); the fused
// q/k/v fixup sets the same.
void qknrs_launched(cuda_impl *c, int n);

// Programmatic dependent launch (BS_CUDA_PDL=0 turns it off). Every kernel of a forward is launched
// with launch_k, which lets it start while the kernel before it is still running: it first allows
// its own successor to launch (pdl_trigger), then waits until its predecessor has completed and its
// writes are visible (pdl_wait) before it reads or writes any activation. The time the GPU needs to
// get a kernel's blocks onto the SMs thus overlaps the previous kernel, and the tiled GEMM streams its
// first weight stages (which no kernel writes) before it waits.
bool pdl_enabled(void);   // small kernels launched with PDL
bool pdl_gemm(void);      // the tiled GEMM launched with PDL
bool pdl_after_gemm(void);   // ... and the kernel right after it (c->after_gemm)
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_enter() { pdl_trigger(); pdl_wait(); }

// after_gemm, kv_settled and pdl_next describe the kernel launched last, for the next launch: every
// launch clears them (launch_k here, launches of their own through this), then the op that launched
// sets what holds for its kernel.
static inline void launch_flags_clear(cuda_impl *c) { c->after_gemm = 0; c->kv_settled = 0; c->pdl_next = 0; }

template <typename... KArgs, typename... Args>
static inline void launch_k(cuda_impl *c, const char *what, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, Args &&...args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid; cfg.blockDim = block; cfg.dynamicSmemBytes = smem; cfg.stream = c->st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at; cfg.numAttrs = pdl_enabled() || (c->after_gemm && pdl_after_gemm()) || c->pdl_next ? 1 : 0;
    launch_flags_clear(c);
    cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
    if (e != cudaSuccess) cu_fault(c, what, e);
}

bool fuse_enabled(void);   // BS_CUDA_FUSE (cuda_backend.cu)
// BS_CUDA_ABLATE=rmsnorm,qknrs,att,combine,fixup (diagnosis of timing only: the named kernels are not
// launched, so results are WRONG): what each link of a layer's chain costs inside a graphed step.
bool ablated(const char *what);

// The weight-upload buffers (one set per backend, kept until it is destroyed): a pinned double buffer
// of at least pin_bytes and a device staging buffer of at least stage_bytes (0: none needed).
int upload_buffers(cuda_impl *c, size_t pin_bytes, size_t stage_bytes, bs_err *err);

// Grows a workspace outside of recording (recording cannot allocate). Returns 0, or -1 with the backend's
// fault set (too small while recording, or out of memory): the caller must not launch into it.
int ensure_ws(cuda_impl *c, float **p, size_t *have, size_t need);

// The ops (each defined in the file of its job).
void cu_matmul(bs_backend *be, float *y, const float *x, int n, const bs_mat *W, int acc);
void cu_matmul_multi(bs_backend *be, int count, float *const *y, const float *x, int n, const bs_mat *const *W, int accumulate);
void cu_rmsnorm(bs_backend *be, float *y, const float *x, int n, int dim, const bs_mat *w, float eps);
void cu_head_norm_rope(bs_backend *be, float *x, int n, int n_heads, int hd, const bs_mat *norm_w, float eps, int pos0, const float *inv_freq);
void cu_qk_norm_rope_store(bs_backend *be, float *q, float *k, const float *v, int n, int n_heads, int n_kv, int hd,
                           const bs_mat *q_norm, const bs_mat *k_norm, float eps, int pos0, const float *inv_freq,
                           const bs_kv_view *kv);
void cu_attention(bs_backend *be, float *out, const float *q, const bs_kv_view *kv, int n_q, int n_heads,
                  int n_kv, int hd, int n_keys, int q_pos0, int causal, int window);
void cu_attention_spans(bs_backend *be, float *out, const float *q, const bs_row_span *spans, int n_spans, int n_heads, int n_kv, int hd);
void cu_qk_norm_rope_store_spans(bs_backend *be, float *q, float *k, const float *v, const bs_row_span *spans, int n_spans, int n_heads,
                                 int n_kv, int hd, const bs_mat *q_norm, const bs_mat *k_norm, float eps, const float *inv_freq);
void cu_swiglu(bs_backend *be, float *h, const float *g, const float *u, size_t n);
void cu_add(bs_backend *be, float *y, const float *x, size_t n);
void cu_gelu_mul(bs_backend *be, float *h, const float *g, const float *u, size_t n);
void cu_scale(bs_backend *be, float *y, float s, size_t n);
void cu_softcap(bs_backend *be, float *y, float cap, size_t n);
void cu_embed(bs_backend *be, float *out, const bs_mat *t, const int32_t *ids, int n);
void cu_copy_rows(bs_backend *be, float *dst, size_t ds, const float *src, size_t ss, int n, int width);
void cu_store_kv(bs_backend *be, const bs_kv_view *kv, int pos0, const float *k, const float *v, int n, int width);
void cu_scatter_cols(bs_backend *be, float *out, int out_w, const float *in, int in_w, int n, const int32_t *cols, float fill);
void cu_dyn_conv(bs_backend *be, float *y, const float *x, int n, int dim, int block, int taps, const float *base, const float *dyn,
                 int dyn_stride, int group, int acc);
void cu_topk(bs_backend *be, int32_t *ids, float *vals, const float *logits, int n, int vocab, int k, const int32_t *map);
void cu_hadamard_rows(bs_backend *be, float *y, const float *x, int n, int dim, const float *pre, const float *post, int transpose);
void cu_argmax(bs_backend *be, int32_t *out_host, const float *logits, int n, int vocab);
void cu_argmax_to(bs_backend *be, int32_t *out_dev, const float *logits, int n, int vocab, const int32_t *map);
void cu_embed_from(bs_backend *be, float *out, const bs_mat *t, const int32_t *dev_ids, int n);
void cu_head_norm_rope_multi(bs_backend *be, int count, float *const *x, int n, int n_heads, int hd, const bs_mat *const *norm_w,
                             float eps, int pos0, const float *inv_freq);
int cu_sample_rows(bs_backend *be, float *probs, const float *logits, int n, int V, float temperature, int top_k, float top_p,
                   const double *u, int32_t *ids_host);
int cu_sample_rows_to(bs_backend *be, float *probs, const float *logits, int n, int V, float temperature, int top_k, float top_p,
                      const double *u, int32_t *ids_dev);
int cu_accept_sampled(bs_backend *be, const float *p, const float *q, const int32_t *drafts, int n, int V, const double *u,
                      int32_t *next_host);
void cu_accept_sampled_to(bs_backend *be, const float *p, const float *q, const int32_t *drafts_dev, int n, int V, const double *u,
                          int32_t *out_dev);

// BS_CUDA_MM_TRACE=1 (cuda_profile.cu): every tiled-GEMM launch records per-block timestamps
// (%globaltimer) into a device buffer; the report at exit gives each launch's span, start skew,
// first-data latency, end spread and cut-tile time, and the gap since the previous GEMM. Works under
// graph capture (a captured launch keeps its slot, so the report shows the last replay).
unsigned long long *mm_trace_next(int G, int M, int K, int count, int n, long long bytes, bool swiglu);
void mm_trace_report(void);

// BS_CUDA_PROFILE (cuda_profile.cu)
void prof_install(bs_backend *be);
void prof_report(void);
bool prof_active(void);

