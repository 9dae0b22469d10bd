// The backend boundary. Model code (src/model) is written once against these ops; a backend
// (src/backend/cpu, src/backend/cuda) owns where buffers live and how each op runs.
//
// Conventions for every op:
// - Activations are fp32, row-major, rows contiguous: a [n][dim] buffer is n*dim floats.
//   Pointers are backend pointers (host memory on the CPU, device memory on CUDA): model code
//   may do pointer arithmetic on them but never dereferences them.
// - Weights are bs_mat views in their stored dtype (BF16/F16/F32) or MLX affine codes (4/8 bits with
//   per-group scales and biases), widened or dequantised on the fly, accumulation in fp32.
//   A Linear weight is [out][in] as nn.Linear stores it.
// - Small integer inputs (token ids) are host arrays; the backend copies what it needs.
// - Ops are asynchronous with respect to the host on devices; download() and sync() order them.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "util/dtype.h"
#include "util/err.h"

// A 2-D weight: rows x cols logical elements, row-major (a vector is rows = 1), in one of two formats.
// - BS_WFMT_DENSE: `data` holds rows*cols elements of `dtype` (BF16/F16/F32).
// - BS_WFMT_AFFINE (MLX's affine quantisation, docs/quantization.md): `data` holds rows x cols*bits/32
//   uint32 words of `bits`-bit codes q (lowest bits first: element k of a row is bits [(k % (32/bits)) *
//   bits, ...) of word k / (32/bits)); `scales` and `biases` hold rows x cols/group values of `dtype`, and
//   element (r, k) is scales[r][k/group] * q + biases[r][k/group]. Only Linear weights, embeddings and LM
//   heads take this format; vectors (norm weights) are always dense.
// Every backend either computes with a format in each op that takes a matrix (matmul, matmul_multi,
// swiglu_matmul, embed, embed_from, the fused q/k/v op) or refuses it in weight(), with an error, at load.
// `layout` is the backend's private storage order of a weight it uploaded: 0 = row-major (every
// host view, every exact CPU weight); the CUDA backend stores large BF16 matrices in the tiles its GEMM
// streams (docs/cuda.md); the CPU marks a lossy weight (weight_lossy) with BS_CPU_LAYOUT_BF16DOT: the
// same row-major bytes, multiplied with bf16-rounded activations. Model code copies views whole and
// never looks inside.
typedef enum { BS_WFMT_DENSE = 0, BS_WFMT_AFFINE = 1 } bs_wformat;
typedef struct bs_mat {
    const void *data;   // backend pointer: DENSE rows*cols elements; AFFINE rows*cols*bits/32 uint32 words
    bs_dtype dtype;     // DENSE: of the elements; AFFINE: of scales and biases
    int64_t rows, cols;
    int layout;
    bs_wformat format;
    int bits, group;              // AFFINE: 4 or 8 bits a code; group (32, 64, 128) divides cols
    const void *scales, *biases;  // AFFINE: backend pointers to [rows][cols / group] values of dtype
} bs_mat;

typedef struct bs_backend bs_backend;

// Where a sequence's K/V rows of one layer live. Rows are key positions, each row_floats = n_kv_heads *
// head_dim floats. With a page table (a KV pool's, src/model/kv_pool.h): row j is row j % page_rows of page
// pages[j / page_rows], and page p's rows start at k + p * page_rows * row_floats (v alike). Without one
// (pages NULL): row j is at k + j * row_floats, a single page (a contiguous buffer, e.g. a test's). Ops that
// read or write K/V rows (attention, store_kv, the fused q/k/v steps) take the view, so one code path serves
// both. page_rows is a multiple of BS_KV_PAGE_ALIGN, so an aligned chunk of 32 keys never straddles a page.
#define BS_KV_PAGE_ALIGN 32
typedef struct bs_kv_view {
    float *k, *v;              // backend memory
    const int32_t *pages;      // backend memory, or NULL
    int page_rows;
} bs_kv_view;

// A contiguous K/V buffer as a view (one page).
static inline bs_kv_view bs_kv_contig(float *k, float *v) { return (bs_kv_view){ k, v, NULL, 0 }; }
// Row j's index in k / v (units of row_floats). Reads the page table: only where backend memory is host memory.
static inline size_t bs_kv_row(const bs_kv_view *kv, int j) {
    return kv->pages ? (size_t)kv->pages[j / kv->page_rows] * kv->page_rows + (size_t)(j % kv->page_rows) : (size_t)j;
}

// The batch descriptor. A forward may carry the rows of several sequences in one set of buffers (a
// ragged batch); each sequence's rows are contiguous, a span. Row-wise ops (matmul, rmsnorm, swiglu, ...)
// run over the whole batch at once; the ops that depend on a row's sequence (its positions, its KV cache)
// take the spans. Per row this says: which sequence (the span), at which position (pos0 + i), against
// which KV rows (kv: the sequence's pages for the layer at hand).
typedef struct bs_row_span {
    int row0, n;        // rows [row0, row0 + n) of the batch's buffers
    int pos0;           // their positions in their sequence: pos0 .. pos0 + n - 1
    bs_kv_view kv;      // that sequence's K/V for this layer
} bs_row_span;

// RoPE inverse frequency i (0 <= i < hd/2) as transformers computes it: 1 / theta^(2i/hd) in fp32, for the
// target and every drafter alike (scaled further for llama3 RoPE: src/model/rope.h builds the tables the ops take). A model loaded with from_pretrained keeps this non-persistent buffer in
// fp32 whatever the weights' dtype (docs/numerics.md says why no bf16 rounding is applied).
static inline float bs_rope_inv_freq(float theta, int i, int hd) {
    return 1.0f / __builtin_powf(theta, (float)(2 * i) / (float)hd);
}

struct bs_backend {
    const char *name;   // "cpu", "cuda"
    void *impl;         // backend-private state
    // Most drafts a speculative round verifies when the caller sets no --draft-max (0: the drafter's
    // block). Where a verify forward of many rows is compute-bound (CPUs), long blocks cost more than their
    // extra accepted tokens return; the backend knows its own crossover (bench --round, docs/benchmarks.md).
    int default_draft_max;

    // Memory. alloc returns zeroed memory or NULL (and fills err).
    void *(*alloc)(bs_backend *be, size_t bytes, bs_err *err);
    void  (*free)(bs_backend *be, void *p);
    void  (*upload)(bs_backend *be, void *dst, const void *host_src, size_t bytes);
    void  (*download)(bs_backend *be, void *host_dst, const void *src, size_t bytes);
    void  (*copy)(bs_backend *be, void *dst, const void *src, size_t bytes);
    void  (*sync)(bs_backend *be);
    // Optional (NULL: unknown): bytes this backend could still allocate (CPU: the host's MemAvailable; CUDA:
    // the device's free memory), 0 when unknown. Sizes defaults such as the KV pool's (src/engine/engine.c).
    size_t (*mem_free)(bs_backend *be);
    // Makes a host weight usable by this backend (CPU: the same view, no copy; CUDA: upload once).
    int   (*weight)(bs_backend *be, bs_mat *dst, const bs_mat *host, bs_err *err);
    // Optional: like weight, but the backend may store the matrix lossily (CUDA: 8-bit tiles with row
    // scales, tiled_layout.h) for matmul / matmul_multi / swiglu_matmul only, where exact weights do not
    // matter to the output (a drafter's: verification decides). 0 = done, 1 = declined (use weight), -1 = error.
    int   (*weight_lossy)(bs_backend *be, bs_mat *dst, const bs_mat *host, bs_err *err);
    // Optional: a lossy view of a weight this backend already holds (`src`, from weight()), for a matrix
    // a drafter shares with the target (its LM head), without a second copy (CPU: the same bytes marked for
    // the bf16 dot-product kernels). 0 = done, 1 = declined (weight_lossy or the exact view instead).
    int   (*weight_lossy_view)(bs_backend *be, bs_mat *dst, const bs_mat *src);

    // y[n][W.rows] = x[n][W.cols] . W^T   (accumulate != 0: y += instead of =)
    void (*matmul)(bs_backend *be, float *y, const float *x, int n, const bs_mat *W, int accumulate);
    // Several matmuls sharing x: y[i][n][W[i]->rows] = x[n][cols] . W[i]^T for i < m (+= when accumulate),
    // e.g. q/k/v or gate/up in one call; no y[i] may alias x. Optional (NULL: bs_matmul_multi loops over
    // matmul); a backend may run it as one launch / one thread dispatch. Results equal m matmul calls.
    void (*matmul_multi)(bs_backend *be, int m, float *const *y, const float *x, int n, const bs_mat *const *W,
                         int accumulate);
    // y[n][dim] = x / sqrt(mean(x^2) + eps) * w   (fp32 statistics; y may alias x)
    void (*rmsnorm)(bs_backend *be, float *y, const float *x, int n, int dim, const bs_mat *w, float eps);
    // In place on x[n][n_heads*hd]: optional per-head RMSNorm with weight norm_w [hd] (NULL: none),
    // then rotate-half RoPE for positions pos0 .. pos0+n-1: pair i turns by the angle fp32(pos) * inv_freq[i].
    // inv_freq: hd/2 floats in backend memory, the model's table (src/model/rope.h: default or llama3-scaled
    // frequencies, built once at load), so every backend rotates by the same fp32 frequencies.
    void (*head_norm_rope)(bs_backend *be, float *x, int n, int n_heads, int hd, const bs_mat *norm_w,
                           float eps, int pos0, const float *inv_freq);
    // Multi-head attention with grouped K/V heads.
    //   q [n_q][n_heads*hd], out [n_q][n_heads*hd]; keys and values: rows of kv (bs_kv_view; row index = key
    //   position, n_kv_heads*hd floats each).
    //   Query i sees keys [key_lo, key_hi) where key_hi = causal ? q_pos0 + i + 1 : n_keys,
    //   key_lo = window > 0 ? max(0, key_hi - window) : 0 (window counts the query's own key).
    //   Scale hd^-0.5, softmax in fp32; query head h reads kv head h / (n_heads / n_kv_heads).
    //   kv (the struct) is read during the call; the page table it points to is read when the op runs.
    void (*attention)(bs_backend *be, float *out, const float *q, const bs_kv_view *kv,
                      int n_q, int n_heads, int n_kv_heads, int hd, int n_keys, int q_pos0, int causal,
                      int window);
    // h[i] = silu(gate[i]) * up[i] for i < n (h may alias gate)
    void (*swiglu)(bs_backend *be, float *h, const float *gate, const float *up, size_t n);
    // y[i] += x[i]
    void (*add)(bs_backend *be, float *y, const float *x, size_t n);
    // Gemma-4's elementwise steps (src/model/gemma4.c), fp32 as PyTorch computes them:
    // h[i] = gelu_tanh(gate[i]) * up[i], gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (h may alias gate)
    void (*gelu_mul)(bs_backend *be, float *h, const float *gate, const float *up, size_t n);
    // y[i] *= s
    void (*scale)(bs_backend *be, float *y, float s, size_t n);
    // y[i] = cap * tanh(y[i] / cap)   (the final-logit soft-cap)
    void (*softcap)(bs_backend *be, float *y, float cap, size_t n);
    // out[n][table.cols] = table[ids[i]] widened (ids: host array, already range-checked)
    void (*embed)(bs_backend *be, float *out, const bs_mat *table, const int32_t *ids, int n);
    // dst rows of width floats at stride dst_stride <- src rows at src_stride (both in floats)
    void (*copy_rows)(bs_backend *be, float *dst, size_t dst_stride, const float *src, size_t src_stride,
                      int n, int width);
    // out_host[i] = argmax of logits row i (first index on ties)
    void (*argmax)(bs_backend *be, int32_t *out_host, const float *logits, int n, int vocab);
    // New K/V rows into a cache: K row pos0 + i of kv = k[i], V row pos0 + i = v[i], for i < n (width floats each).
    void (*store_kv)(bs_backend *be, const bs_kv_view *kv, int pos0, const float *k, const float *v, int n, int width);
    // The same two picks with the ids in backend memory instead of on the host, so that a chain
    // argmax -> embed of the winner -> ... (a drafter's greedy Markov walk) runs without a host round
    // trip and can be recorded: out_ids[i] = argmax of logits row i, or map[that argmax] where map
    // (backend memory, vocab entries) is not NULL (a draft vocabulary's column -> token id); out[i] =
    // table[ids[i]] widened (ids in [0, table.rows): e.g. argmax_to over table.rows logits).
    void (*argmax_to)(bs_backend *be, int32_t *out_ids, const float *logits, int n, int vocab, const int32_t *map);
    void (*embed_from)(bs_backend *be, float *out, const bs_mat *table, const int32_t *ids, int n);
    // Rows of a column subset back to full width: out[i][cols[c]] = in[i][c] for c < in_w, and every
    // other element of out's rows (out_w wide) = fill, for i < n. cols: in_w strictly increasing ids in
    // [0, out_w), int32, in backend memory. (A draft vocabulary's logits into the whole vocabulary.)
    void (*scatter_cols)(bs_backend *be, float *out, int out_w, const float *in, int in_w, int n, const int32_t *cols,
                         float fill);
    // Rows through MLX's fast orthonormal Hadamard transform (backend/hadamard.h; the R1 fold, docs/rotation.md):
    // y[i] = post * T(pre * x[i]) elementwise for i < n, T(v) = v . M (transpose 0) or v . M^T (transpose 1), M the
    // transform of length dim (scale 1/sqrt(dim)); pre and post: dim floats in backend memory, or NULL (ones). y may
    // alias x. dim must be m * 2^k, m in {1, 12, 20, 28} (the caller checks it with bs_hadamard_init).
    void (*hadamard_rows)(bs_backend *be, float *y, const float *x, int n, int dim, const float *pre, const float *post,
                          int transpose);

    // DFlash 2's grouped dynamic depthwise convolution (docs/dflash2.md, "The convolution"). Rows come in blocks of
    // `block` consecutive rows (row t is row t % block of its block); for t < n, c < dim:
    //   y[t][c] (+)= sum over tau < taps with tau <= t % block of (base[tau][c] + dyn[t][tau][c / group]) * x[t - tau][c]
    // so a tap never reaches across a block boundary (the row before a block's first row counts as zero).
    // base: [taps][dim] floats; dyn: row t's coefficients [taps][dim / group] at dyn + t * dyn_stride; both
    // backend memory. y must not alias x. accumulate: y += instead of =. Products and the sum in fp32, tap 0 first.
    void (*dyn_conv)(bs_backend *be, float *y, const float *x, int n, int dim, int block, int taps, const float *base,
                     const float *dyn, int dyn_stride, int group, int accumulate);
    // The k largest entries of each logits row [n][vocab], best first: by value descending, exact ties by column
    // ascending (a NaN counts as -infinity). out_ids[i][j] (int32) = their columns, or map[column] where map is
    // not NULL (a draft vocabulary's column -> token id, as argmax_to); out_vals[i][j] = their values; both backend
    // memory. 1 <= k <= min(vocab, 1024).
    void (*topk)(bs_backend *be, int32_t *out_ids, float *out_vals, const float *logits, int n, int vocab, int k, const int32_t *map);

    // Optional (NULL: the four calls below): one layer's attention inputs in one call, equal to
    //   head_norm_rope(q, n, n_heads, hd, q_norm, eps, pos0, inv_freq); head_norm_rope(k, n, n_kv, hd, k_norm, eps, pos0, inv_freq);
    //   store_kv(kv, pos0, k, v, n, n_kv*hd).
    // pos0 is a position argument (see record_begin).
    void (*qk_norm_rope_store)(bs_backend *be, float *q, float *k, const float *v, int n, int n_heads, int n_kv, int hd,
                               const bs_mat *q_norm, const bs_mat *k_norm, float eps, int pos0, const float *inv_freq,
                               const bs_kv_view *kv);

    // Optional (NULL, or nonzero return when this backend cannot fuse the case: the two ops below): a
    // layer's q/k/v projections with the attention inputs' step fused in, equal bit for bit to
    //   matmul_multi(3, {q, k, v}, x, n, Wqkv, 0); qk_norm_rope_store(q, k, v, n, ...).
    // pos0 is a position argument (see record_begin).
    int (*qkv_norm_rope_store)(bs_backend *be, const float *x, int n, const bs_mat *const *Wqkv, float *q, float *k, float *v,
                               int n_heads, int n_kv, int hd, const bs_mat *q_norm, const bs_mat *k_norm, float eps, int pos0,
                               const float *inv_freq, const bs_kv_view *kv);

    // Optional (NULL: one head_norm_rope per buffer): head_norm_rope of `count` buffers x[i] with norm
    // weights norm_w[i] (the same n, n_heads, hd, eps, pos0, inv_freq) in one call, equal to the separate
    // calls: e.g. the new context rows' K of every drafter layer.
    void (*head_norm_rope_multi)(bs_backend *be, int count, float *const *x, int n, int n_heads, int hd,
                                 const bs_mat *const *norm_w, float eps, int pos0, const float *inv_freq);

    // Optional (NULL: swiglu into gate, then matmul): the MLP's down projection with its activation
    // fused in, y[n][W.rows] (+)= (silu(gate) * up) . W^T, equal to swiglu(gate, gate, up) followed by
    // matmul(y, gate, W). Returns 0 when done; nonzero when this backend cannot fuse this case (the
    // caller then runs the two ops, see bs_swiglu_matmul). gate and up are not modified.
    int (*swiglu_matmul)(bs_backend *be, float *y, const float *gate, const float *up, int n, const bs_mat *W, int accumulate);

    // Sampling where the logits are (the semantics are src/spec/sampler.c's and verify.c's; see
    // bs_sample_rows / bs_accept_sampled_on). Optional for backends whose memory is host memory (NULL:
    // the host code runs on the buffers in place), required for the others:
    // sample_rows: probs[n][V] = the processed distribution of each logits row (temperature <= 0: one-hot
    //   at the argmax; else softmax(logits / temperature), then top_k (0: off; ties with the k-th value
    //   kept), then top_p (>= 1: off; the most probable tokens until their mass reaches top_p, ties kept),
    //   renormalised); probs may alias logits. With ids_host != NULL, ids_host[i] = the inverse CDF of row
    //   i (index order) at u[i] in [0, 1). Returns 0 when done, nonzero to decline (host memory only).
    // accept_sampled: speculative acceptance over p [n+1][V] and q [n][V] (NULL: point-mass drafts),
    //   drafts and u[0..n] on the host, as bs_accept_sampled_u; returns the accepted count, *next_host
    //   the emitted token. n <= 64.
    int (*sample_rows)(bs_backend *be, float *probs, const float *logits, int n, int V, float temperature, int top_k,
                       float top_p, const double *u, int32_t *ids_host);
    int (*accept_sampled)(bs_backend *be, const float *p, const float *q, const int32_t *drafts, int n, int V,
                          const double *u, int32_t *next_host);
    // sample_rows with the drawn ids left in backend memory (ids_be[i], int32) instead of downloaded: a
    // chain of draws feeding later ops (DSpark's sampled Markov walk: draw -> W1[id] -> next row) runs
    // without a host round trip per draw. Same optionality as sample_rows (see bs_sample_rows_to).
    int (*sample_rows_to)(bs_backend *be, float *probs, const float *logits, int n, int V, float temperature, int top_k,
                          float top_p, const double *u, int32_t *ids_be);
    // accept_sampled with the drafts in backend memory and the verdict left there: out_be[0] = the
    // accepted count, out_be[1] = the emitted token (int32), no host synchronisation. Same optionality
    // as sample_rows (see bs_accept_sampled_to).
    void (*accept_sampled_to)(bs_backend *be, const float *p, const float *q, const int32_t *drafts_be, int n, int V,
                              const double *u, int32_t *out_be);

    // Optional (NULL: one qk_norm_rope_store per span, bs_qk_norm_rope_store_spans): the attention inputs' step
    // of every span's rows in one call (q/k norm and RoPE at the span's positions, its K/V rows into its own
    // cache through its kv view); equal per row to those calls. q [batch rows][n_heads * hd], k and v
    // [batch rows][n_kv * hd].
    void (*qk_norm_rope_store_spans)(bs_backend *be, float *q, float *k, const float *v, const bs_row_span *spans, int n_spans,
                                     int n_heads, int n_kv, int hd, const bs_mat *q_norm, const bs_mat *k_norm, float eps,
                                     const float *inv_freq);

    // Optional (NULL: one attention call per span, bs_attention_spans): causal attention of every span's
    // query rows q[row0 ..] against its own cache rows [0, pos0 + i + 1) (its kv view), in one call; equal
    // per row to those calls. out and q are [batch rows][n_heads * hd].
    void (*attention_spans)(bs_backend *be, float *out, const float *q, const bs_row_span *spans, int n_spans, int n_heads,
                            int n_kv_heads, int hd);

    // Optional recording of a sequence of ops for cheap replay (CUDA graphs); NULL where unsupported.
    // record_begin(be, pos_base) starts recording: nothing executes until a replay. While recording,
    // the *position arguments* of ops (head_norm_rope pos0; attention n_keys and q_pos0; store_kv pos0)
    // are recorded relative to pos_base, and embed's ids become inputs of the replay. replay(be, rec,
    // pos_base, ids, n_ids) runs the recorded ops as if issued with every position argument shifted by
    // (pos_base - the recording's pos_base) and embed reading `ids`. Every other argument (pointers,
    // sizes) is frozen (embed_from's ids pointer too; argmax_to records like any op). Recording must
    // not call download/argmax/alloc/free (anything that syncs). A K/V page table is read at replay: its
    // owner uploads changes to it before replaying (the table's pointer is frozen, not its contents).
    int   (*record_begin)(bs_backend *be, int pos_base);
    void *(*record_end)(bs_backend *be, bs_err *err);    // the recording, or NULL (err filled)
    void  (*replay)(bs_backend *be, void *rec, int pos_base, const int32_t *ids, int n_ids);
    void  (*record_free)(bs_backend *be, void *rec);

    void (*destroy)(bs_backend *be);

    // Failures inside ops. The ops return void (on a device they are queued, not run, and a forward issues
    // hundreds), so an op that cannot do its work (host scratch it cannot allocate, a shape or layout the
    // device kernels do not take, a device error) records why with bs_backend_fail and returns; its
    // outputs, and everything computed from them, are garbage. Model code calls bs_backend_check after
    // each forward and drafter pass, which turns the fault into an error for its caller (the request
    // fails with the message; the library never prints or exits). The check clears the fault: the
    // buffers of the forward that failed are garbage (the requests in it are unusable), but a later
    // request may run (a fault that persists, like a broken CUDA context, is simply reported again).
    int failed;          // 0: no fault; set through bs_backend_fail only
    bs_err fault;        // the first fault's message
};

// Records the first fault of an op (later ones are dropped until the next check). Thread-safe.
void bs_backend_fail(bs_backend *be, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// 0 when no op has failed since the last check; else -1 with "<backend>: <fault>" in err, and the fault cleared.
int bs_backend_check(bs_backend *be, bs_err *err);

// matmul_multi where the backend has it, else one matmul per matrix.
static inline void bs_matmul_multi(bs_backend *be, int m, float *const *y, const float *x, int n,
                                   const bs_mat *const *W, int accumulate) {
    if (be->matmul_multi) { be->matmul_multi(be, m, y, x, n, W, accumulate); return; }
    for (int i = 0; i < m; i++) be->matmul(be, y[i], x, n, W[i], accumulate);
}

// y (+)= (silu(gate) * up) . W^T; without a fused op, gate is overwritten with the activation.
static inline void bs_swiglu_matmul(bs_backend *be, float *y, float *gate, const float *up, int n, const bs_mat *W, int accumulate) {
    if (be->swiglu_matmul && be->swiglu_matmul(be, y, gate, up, n, W, accumulate) == 0) return;
    be->swiglu(be, gate, gate, up, (size_t)n * W->cols);
    be->matmul(be, y, gate, n, W, accumulate);
}

static inline void bs_head_norm_rope_multi(bs_backend *be, int count, float *const *x, int n, int n_heads, int hd,
                                           const bs_mat *const *norm_w, float eps, int pos0, const float *inv_freq) {
    if (be->head_norm_rope_multi) { be->head_norm_rope_multi(be, count, x, n, n_heads, hd, norm_w, eps, pos0, inv_freq); return; }
    for (int i = 0; i < count; i++) be->head_norm_rope(be, x[i], n, n_heads, hd, norm_w[i], eps, pos0, inv_freq);
}

// q/k norm + RoPE + storing the new K/V rows at pos0: the fused op where the backend has it, else the
// three separate ops (the two must agree bit for bit; tests/test_cuda.c checks the CUDA one).
static inline void bs_qk_norm_rope_store(bs_backend *be, float *q, float *k, const float *v, int n, int n_heads, int n_kv,
                                         int hd, const bs_mat *q_norm, const bs_mat *k_norm, float eps, int pos0,
                                         const float *inv_freq, const bs_kv_view *kv) {
    if (be->qk_norm_rope_store) {
        be->qk_norm_rope_store(be, q, k, v, n, n_heads, n_kv, hd, q_norm, k_norm, eps, pos0, inv_freq, kv);
        return;
    }
    be->head_norm_rope(be, q, n, n_heads, hd, q_norm, eps, pos0, inv_freq);
    be->head_norm_rope(be, k, n, n_kv, hd, k_norm, eps, pos0, inv_freq);
    be->store_kv(be, kv, pos0, k, v, n, n_kv * hd);
}

// q/k/v projections of x, then the attention inputs' step: the backend's fused op where it takes the
// case, else matmul_multi + qk_norm_rope_store (bit-identical; tests/test_cuda.c checks the CUDA one).
static inline void bs_qkv_norm_rope_store(bs_backend *be, const float *x, int n, const bs_mat *const *Wqkv, float *q, float *k,
                                          float *v, int n_heads, int n_kv, int hd, const bs_mat *q_norm, const bs_mat *k_norm,
                                          float eps, int pos0, const float *inv_freq, const bs_kv_view *kv) {
    if (be->qkv_norm_rope_store && be->qkv_norm_rope_store(be, x, n, Wqkv, q, k, v, n_heads, n_kv, hd, q_norm, k_norm, eps, pos0,
                                                           inv_freq, kv) == 0)
        return;
    float *y[3] = { q, k, v };
    bs_matmul_multi(be, 3, y, x, n, Wqkv, 0);
    bs_qk_norm_rope_store(be, q, k, v, n, n_heads, n_kv, hd, q_norm, k_norm, eps, pos0, inv_freq, kv);
}

// Causal attention over a ragged batch (see bs_row_span): the backend's one-call op where it has one, else
// one attention call per span, which every backend supports.
static inline void bs_attention_spans(bs_backend *be, float *out, const float *q, const bs_row_span *spans, int n_spans, int n_heads,
                                      int n_kv, int hd) {
    if (be->attention_spans) { be->attention_spans(be, out, q, spans, n_spans, n_heads, n_kv, hd); return; }
    size_t qw = (size_t)n_heads * hd;
    for (int i = 0; i < n_spans; i++) {
        const bs_row_span *s = &spans[i];
        be->attention(be, out + s->row0 * qw, q + s->row0 * qw, &s->kv, s->n, n_heads, n_kv, hd, s->pos0 + s->n, s->pos0, 1, 0);
    }
}

// q/k norm + RoPE at each span's positions and its new K/V rows into its cache (the backend's span op, else
// bs_qk_norm_rope_store per span; q [rows][n_heads*hd], k and v [rows][n_kv*hd]).
static inline void bs_qk_norm_rope_store_spans(bs_backend *be, float *q, float *k, const float *v, const bs_row_span *spans, int n_spans,
                                               int n_heads, int n_kv, int hd, const bs_mat *q_norm, const bs_mat *k_norm, float eps,
                                               const float *inv_freq) {
    if (be->qk_norm_rope_store_spans) {
        be->qk_norm_rope_store_spans(be, q, k, v, spans, n_spans, n_heads, n_kv, hd, q_norm, k_norm, eps, inv_freq);
        return;
    }
    size_t qw = (size_t)n_heads * hd, kw = (size_t)n_kv * hd;
    for (int i = 0; i < n_spans; i++) {
        const bs_row_span *s = &spans[i];
        bs_qk_norm_rope_store(be, q + s->row0 * qw, k + s->row0 * kw, v + s->row0 * kw, s->n, n_heads, n_kv, hd, q_norm, k_norm, eps,
                              s->pos0, inv_freq, &s->kv);
    }
}

// The CPU backend: `reference` selects the plain scalar ops (the exact, simple path the fast
// kernels and other backends are tested against); otherwise the fastest kernels this CPU supports.
bs_backend *bs_backend_cpu(int reference);
// "" when bs_tuning's cpu_kernels (BS_CPU_KERNELS) is empty or this CPU runs that path; else why the fast CPU
// backend uses its best exact path instead (the library does not print: its caller shows it).
const char *bs_cpu_kernels_note(void);
// The CUDA backend on device `ordinal`; NULL with a message when built without CUDA or no GPU is usable.
bs_backend *bs_backend_cuda(int ordinal, bs_err *err);
// "cpu", "cpu-ref" or "cuda[:N]".
bs_backend *bs_backend_by_name(const char *name, bs_err *err);
