// The seed's own DSpark v1 drafter (mlx-bun 0.0.9, package/src/spec/dspark/module.ts: DSparkDrafter; docs/dspark-v1.md),
// written against the backend ops. A folder with dspark.json + model.safetensors (src/io/dspark_v1_config.h).
//
// Unlike DeepSpec's DSpark (Qwen3DSparkModel, src/model/dflash.c) it keeps no context cache: its only context is
// ONE vector, the target's final post-norm hidden state of the row before the anchor (tap n_layers). Per round:
//   seq   = [ctx_proj(h_ctx) + pos[0] ; tok_proj(E[anchor]) + pos[1] ; mask_emb[j] + pos[j + 2] for j < gamma - 1]
//   nLayers pre-norm layers over those gamma + 1 rows: bidirectional attention (no RoPE, no mask, head dim
//   dDraft / nHeads), gated-GELU (tanh) FFN; out_norm; rows 1..gamma (the context row is dropped)
//   U_k   = LM_head(out_proj(h_k))                 the TARGET's head (+ Gemma-4's soft-cap), no final norm
//   L_k   = U_k + W2^T W1[x_{k-1}]                  walked left to right, x_0 = the anchor, x_k = the draft k
//   c_k   = sigmoid(conf.w . [h_k ; W1[x_{k-1}]] + conf.b)
// Every stored matrix is [in][out] (x @ W); the loader transposes them into the ops' [out][in].
#pragma once
#include "model/qwen3.h"
#include "io/dspark_v1_config.h"
#include "spec/drafter.h"

// Opens the drafter in dir for target (which must stay alive). Checks dspark.json against the target (hidden size,
// vocabulary), every tensor's presence and shape, and the backend's ops. max_ctx as bs_dflash_open.
int bs_dspark_v1_open(bs_drafter **out, const char *dir, bs_qwen3 *target, int max_ctx, const bs_drafter_opts *o, bs_err *err);
// 1 if d was opened by bs_dspark_v1_open.
int bs_is_dspark_v1(const bs_drafter *d);
const bs_dspark_v1_config *bs_dspark_v1_config_of(const bs_drafter *d);

// Optional host outputs of one round (any pointer may be NULL), for tests.
typedef struct bs_dspark_v1_inspect {
    float *block_hidden;     // [gamma][dDraft] h_1..h_gamma after out_norm
    float *head_in;          // [n][H] out_proj(h_k): the rows handed to the target's head
    float *base_logits;      // [n][V] U_k (the target's head, soft-capped where the target is)
    float *step_logits;      // [n][V] L_k = U_k + the Markov bias of the walk's previous token
    float *conf_logits;      // [n] the confidence head's pre-sigmoid value (bias included, no calibration)
    const double *uniforms;  // input [n]: a sampled walk draws step k at uniforms[k] instead of from the RNG
} bs_dspark_v1_inspect;

// One round: exactly propose() (which is this with ins = NULL).
int bs_dspark_v1_forward_block(bs_drafter *d, bs_drafter_ctx *dc, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng,
                               bs_draft *out, const bs_dspark_v1_inspect *ins, bs_err *err);
