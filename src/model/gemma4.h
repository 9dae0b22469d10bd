// Gemma-4 text targets (docs/gemma4.md): what a Gemma-4 layer adds to the shared target (src/model/qwen3.c runs
// the chunking, K/V cache, taps and LM head for every family; this file loads the Gemma-4 tensors and computes
// its embedding inputs, its layer and its logit soft-cap, written against the backend ops).
//
// Per layer, as transformers' Gemma4TextDecoderLayer: x += post_attn_norm(attn(input_norm(x))),
// x += post_ff_norm(down(gelu_tanh(gate) * up)(pre_ff_norm(x))), then with per-layer embeddings
// x += post_ple_norm(ple_proj(gelu_tanh(ple_gate(x)) * ple_input[l])), and x *= layer_scalar. Attention: q/k
// RMSNorm with weights, V RMSNorm without, RoPE, scale 1; sliding layers see the last sliding_window keys.
#pragma once
#include "model/qwen3.h"

struct bs_quant_config;

typedef struct bs_gemma4_layer {
    bs_mat post_attn_norm, pre_ff_norm, post_ff_norm;   // [H] post_attention_layernorm, pre/post_feedforward_layernorm
    bs_mat q_norm;               // [hd] F32: self_attn.q_norm.weight * sqrt(hd) (undoes the ops' hd^-0.5: Gemma-4 scales by 1)
    bs_mat ple_gate, ple_proj;   // per_layer_input_gate [P, H], per_layer_projection [H, P] (P = 0: absent)
    bs_mat ple_norm;             // post_per_layer_input_norm [H]
    float scalar;                // layer_scalar
    int full, hd, n_kv, inter;   // full attention (else sliding), head size, K/V heads, MLP width
    int kv_src;                  // the layer whose K/V it attends to (itself unless KV-shared)
    int has_v;                   // own v_proj (attention_k_eq_v full layers: V is k_proj's output)
    float *q_norm_host;          // host copy behind q_norm
} bs_gemma4_layer;

typedef struct bs_gemma4 {
    bs_gemma4_layer *layers;     // [n_layers]
    bs_mat ple_embed;            // embed_tokens_per_layer [ple_vocab, L * P]
    bs_mat ple_model_proj;       // per_layer_model_projection [L * P, H]
    bs_mat ple_proj_norm;        // per_layer_projection_norm [P]
    bs_mat ones_sliding, ones_full;   // v_norm (no weight): ones [hd], [global hd]
    float *ones_host;
    float *rope_full;            // backend [global hd / 2]: proportional RoPE of full-attention layers
    char prefix[32];             // "model." or "model.language_model."
} bs_gemma4;

// The tensors of layer l ("<prefix>layers.<l>.*") into L (the shared fields) and G, shaped by config c (also the
// DeepSpec Gemma-4 DSpark drafter's layers, src/model/dflash.c: c is the drafter's config, every layer full).
int bs_gemma4_load_layer(bs_backend *be, const bs_qwen3_config *c, const char *prefix, int l, bs_qwen3_layer *L, bs_gemma4_layer *G,
                         const bs_checkpoint *ck, const struct bs_quant_config *qc, bs_err *err);
// The full-attention layers' RoPE table (proportional, or default over global_head_dim), backend memory [global hd / 2].
float *bs_gemma4_rope_full(bs_backend *be, const bs_gemma4_config *g, bs_err *err);
// A layer's projections of the normed rows xn (n rows): q (NULL: none, as for a drafter's context rows), k, and
// v (k_proj's output under attention_k_eq_v) with the weightless value norm (ones: [hd] of 1). q and k are left
// for the q/k norm + RoPE step.
void bs_gemma4_project_qkv(bs_backend *be, const bs_qwen3_layer *L, const bs_gemma4_layer *G, const bs_mat *ones, float eps, const float *xn, int n,
                           float *q, float *kx, float *vx);
// The layer after its attention: x += post_attn_norm(o_proj(att)); x += post_ff_norm(down(gelu_tanh(gate) * up)(pre_ff_norm(x))).
// xn, t [n][H], gate, up [n][inter]: scratch.
void bs_gemma4_attn_out_mlp(bs_backend *be, const bs_qwen3_config *c, const bs_qwen3_layer *L, const bs_gemma4_layer *G, float *x, float *xn,
                            const float *att, float *t, float *gate, float *up, int n);
// Loads a Gemma-4 text model's tensors into m (m->cfg, m->be set; m->layers gets the shared fields).
int bs_gemma4_init(bs_qwen3 *m, const bs_checkpoint *ck, const struct bs_quant_config *qc, bs_err *err);
void bs_gemma4_free(bs_qwen3 *m);
// Scratch the Gemma-4 layer needs beyond the shared ones (ws->t, ws->ple, ws->ple2).
int bs_gemma4_ws_init(bs_qwen3_ws *ws, const bs_qwen3_config *c, bs_backend *be, bs_err *err);
// The embedding rows ws->x (looked up) scaled by sqrt(H); with per-layer embeddings, ws->ple2 (looked up from
// ple_embed) becomes the per-layer inputs in ws->ple. n rows.
void bs_gemma4_inputs(const bs_qwen3 *m, bs_qwen3_ws *ws, int n);
// Layer l on ws->x, n rows; spans[i].kv is the view of the layer's K/V source (bs_cfg_layer_kv_source).
void bs_gemma4_layer_forward(const bs_qwen3 *m, bs_qwen3_ws *ws, int l, const bs_row_span *spans, int n_spans, int n);
// The final-logit soft-cap on rows x V logits (no-op without one).
void bs_gemma4_softcap(const bs_qwen3 *m, float *logits, int rows);
