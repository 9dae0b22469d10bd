// The target: a decoder-only transformer (RMSNorm, GQA, RoPE, SwiGLU) over a rollback-able KV cache, able to
// hand out "taps" (hidden states of chosen layers) for drafters. One layer for both families it runs
// (docs/targets.md): Qwen3 (q/k-norm before RoPE) and Llama-3.x (no q/k-norm, llama3-scaled RoPE); the
// config's flags (cfg.arch, cfg.rope) pick, the code path is the same.
#pragma once
#include "backend/backend.h"
#include "io/config.h"
#include "io/r1_basis.h"
#include "io/safetensors.h"
#include "model/kv_pool.h"

typedef struct bs_qwen3_layer {
    bs_mat attn_norm;            // [H]
    bs_mat wq, wk, wv, wo;       // [nH*hd, H], [nKV*hd, H], [nKV*hd, H], [H, nH*hd]
    bs_mat q_norm, k_norm;       // [hd] (Qwen3; absent, all zero, in a Llama target)
    bs_mat mlp_norm;             // [H]   post_attention_layernorm
    bs_mat w_gate, w_up, w_down; // [I, H], [I, H], [H, I]
} bs_qwen3_layer;

typedef struct bs_qwen3 {
    bs_qwen3_config cfg;
    bs_backend *be;
    bs_mat embed;                // [V, H]
    bs_mat norm;                 // [H]
    bs_mat lm_head;              // [V, H] (the embedding when tied)
    bs_mat embed_host, lm_head_host;   // their views in the checkpoint (valid while it is open): drafters compare
                                       // their bundled copies with them and may upload an 8-bit LM head
    bs_qwen3_layer *layers;      // [n_layers]
    int use_graphs;              // record/replay forwards on backends that can (CUDA graphs): bs_tuning's graphs
                                 // at init (BS_GRAPHS), the open options' no_graphs after; drafters follow it
    float *rope_inv_freq;        // [head_dim / 2] backend memory: the RoPE table (model/rope.h)
    struct bs_gemma4 *gemma;     // Gemma-4 targets: the tensors and tables the Gemma-4 layer adds (model/gemma4.h); else NULL
    bs_r1_basis r1;              // the R1 fold the checkpoint is stored in (config.json "blockspec_r1"; r1.n == 0: none).
                                 // The target computes in that basis unchanged; drafters trained on the unrotated
                                 // model cross it where they read it (model/r1_bind.h, docs/rotation.md)
} bs_qwen3;   // immutable after bs_qwen3_init (use_graphs aside, set before use): one target serves any number of sequences

// Rows per forward chunk: longer inputs (and batches) run in chunks of at most this many rows.
#define BS_QWEN3_CHUNK_ROWS 64

// Scratch of a forward, backend memory, BS_QWEN3_CHUNK_ROWS rows each. Whoever runs forwards owns one
// (a KV cache for its own single-sequence forwards, the runtime for its batches), never the model.
typedef struct bs_qwen3_ws {
    bs_backend *be;
    float *x, *xn, *q, *kx, *vx, *att, *gate, *up;
    float *t, *ple, *ple2;       // Gemma-4 only (model/gemma4.h): a sublayer's output [R][H], per-layer inputs [R][L * P] x 2
} bs_qwen3_ws;
int bs_qwen3_ws_init(bs_qwen3_ws *ws, const bs_qwen3_config *cfg, bs_backend *be, bs_err *err);
void bs_qwen3_ws_free(bs_qwen3_ws *ws);

// The KV cache of one timeline: its rows live in pages of the model's KV pool (model/kv_pool.h), taken as
// forwards append rows. Rows [0, n_past) are committed; rolling back sets n_past and gives back the pages
// past it.
typedef struct bs_kv_cache {
    int max_ctx, n_past;
    bs_page_table pages;         // its pages in the pool (every layer: the same page ids)
    bs_backend *be;
    bs_qwen3_ws ws;              // scratch of bs_qwen3_forward on this timeline (allocated on first use)
    // Recorded forwards (backends with record/replay, e.g. CUDA graphs), keyed by the call's shape. They
    // read the page table where it lives in backend memory, so pages taken later are seen at replay.
    struct bs_fwd_rec *recs;
    int n_recs;
} bs_kv_cache;

// What a forward should hand back besides updating the cache.
typedef struct bs_fwd_out {
    float *logits;               // backend buffer [rows][V] or NULL
    int logits_all;              // 1: a row of logits per input row; 0: only for the last row
    const int *taps;             // hidden_states indices (0 = embeddings, i = after layer i-1, n_layers = after final norm)
    int n_taps;
    float *tap_out;              // backend buffer [rows][n_taps * H], taps concatenated in the given order
} bs_fwd_out;

// One matrix of a checkpoint (dense or MLX affine, as stored) checked against rows x cols and handed to the
// backend (host: the checkpoint's view, may be NULL); the message names the file and tensor. The target's and
// Gemma-4's loaders share it.
struct bs_quant_config;
int bs_model_load_matrix(const bs_checkpoint *ck, const struct bs_quant_config *qc, bs_backend *be, const char *name, int64_t rows,
                         int64_t cols, bs_mat *dst, bs_mat *host, bs_err *err);

// Loads weights from a checkpoint (kept open by the caller) for a parsed config; every tensor's
// name and shape is checked. Weights are used in place on the CPU.
int bs_qwen3_init(bs_qwen3 *m, const bs_qwen3_config *cfg, const bs_checkpoint *ck, bs_backend *be, bs_err *err);
void bs_qwen3_free(bs_qwen3 *m);

// A KV pool for m's layers: n_pages pages of page_rows rows (model/kv_pool.h); its tables may hold up to the
// model's max_position_embeddings rows.
int bs_qwen3_kv_pool_init(bs_kv_pool *pool, const bs_qwen3 *m, int n_pages, int page_rows, bs_err *err);

// An empty cache drawing from pool, for up to max_ctx rows (<= 0 or past max_position_embeddings: the model's
// limit; kv->max_ctx tells the caller the context it got). No page is taken or promised yet.
int bs_kv_init(bs_kv_cache *kv, bs_kv_pool *pool, int max_ctx, bs_err *err);
void bs_kv_free(bs_kv_cache *kv);
// Promises the pages of its whole context plus extra_rows (a drafter's block, see src/runtime/seq.c), so
// that no forward within max_ctx can run out of pages: bs_page_table_reserve's 0 / 1 (not now) / -1 (never).
int bs_kv_reserve(bs_kv_cache *kv, int extra_rows, bs_err *err);
// O(1) in the rows: later rows are simply overwritten by the next forward; the pages past n_past go back to
// the pool.
int bs_kv_rollback(bs_kv_cache *kv, int n_past, bs_err *err);

// Runs n new rows (ids at positions kv->n_past ...) and appends their K/V. Checks ids and context room, and
// takes the pages the new rows need (an error, naming the pool's size, when it has none left for them).
// (A batch of one sequence, with the cache's own scratch.)
int bs_qwen3_forward(const bs_qwen3 *m, bs_kv_cache *kv, const int32_t *ids, int n, const bs_fwd_out *out, bs_err *err);
// The same for n <= BS_QWEN3_CHUNK_ROWS rows whose ids after the first are in backend memory (int32, not
// checked here: a drafter's device picks), so the host need not wait for them: row 0 = id0, row i =
// dev_ids[i-1]. ws: the scratch to use (NULL: the cache's own).
int bs_qwen3_forward_dev(const bs_qwen3 *m, bs_qwen3_ws *ws, bs_kv_cache *kv, int32_t id0, const int32_t *dev_ids, int n, const bs_fwd_out *out, bs_err *err);

// One sequence's rows in a batch forward: n new rows (ids, host) at positions kv->n_past ... of its cache.
typedef struct bs_seq_rows {
    bs_kv_cache *kv;
    const int32_t *ids;
    int n;
    int last_logits_only;        // 1: one logits row (its last) even when the forward asks for every row's
                                 // (a prompt chunk beside verify blocks)
} bs_seq_rows;

// One forward over the rows of several sequences (a ragged batch: each contributes its n rows, at its own
// positions, against its own KV cache, which gains them). Rows are numbered in the order given. Outputs:
// logits_all: a row of logits per batch row (one, its last, for a sequence with last_logits_only), packed
// in order; else one per sequence (its last row), in order; taps: a row per batch row. Each row's results equal the same row computed with its sequence alone (the kernels are
// row-invariant: tests/test_row_invariance.c, tests/test_runtime.c). ws: the caller's scratch.
int bs_qwen3_forward_batch(const bs_qwen3 *m, bs_qwen3_ws *ws, const bs_seq_rows *seqs, int n_seqs, const bs_fwd_out *out,
                           bs_err *err);
