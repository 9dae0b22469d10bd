// Block drafters over a Qwen3 target: z-lab DFlash ("DFlashDraftModel"), DFlash 2 ("DFlash2DraftModel": z-lab's
// layout plus convolutions around every sublayer and a candidate selector walk, docs/dflash2.md) and DeepSpec's
// DFlash baseline / DSpark ("Qwen3DSparkModel", optional Markov head: vanilla, gated or rnn, optional confidence head).
// Written against the backend ops only (src/backend/backend.h); small per-step vectors (Markov gates,
// confidences, sampling) are handled on the host after a download. Spec: shared/docs/dflash-dspark.md 2 and 4.
//
// Data flow per round (spec 2.5 / 4.6):
//   add_context(feat rows)  c = RMSNorm_hidden_norm(fc(feat)); for every drafter layer K/V of c (k_norm + RoPE at
//                           the rows' absolute positions) are appended to that layer's context cache, once.
//   propose(anchor)         block [anchor, MASK x (B-1)] at positions n_ctx .. n_ctx+B-1; block K/V are written
//                           transiently after the committed rows; non-causal attention over [context ; block];
//                           final norm; LM head on the prediction rows (z-lab rows 1..B-1, DeepSpec rows 0..B-1);
//                           DeepSpec: Markov walk L_k = U_k + bias(x_{k-1}) and confidences.
#pragma once
#include "io/drafter_config.h"
#include "io/safetensors.h"
#include "model/qwen3.h"
#include "spec/drafter.h"

// Opens the drafter in `dir` (config.json + safetensors, single or sharded) for `target` (which must stay alive
// and is not modified). Checks hidden size, vocabulary, tap ids against the target and every tensor's shape.
// max_ctx: the most committed context rows a sequence's context may hold (<= 0: the target's
// max_position_embeddings); each sequence's context (ctx_init) holds what it asks for, up to that.
int bs_dflash_open(bs_drafter **out, const char *dir, bs_qwen3 *target, int max_ctx, bs_err *err);
// The same with options (NULL: all defaults).
int bs_dflash_open_opts(bs_drafter **out, const char *dir, bs_qwen3 *target, int max_ctx, const bs_drafter_opts *o, bs_err *err);
// Lossy drafter weights (bs_drafter_opts.lossy_weights; default bs_tuning's drafter_fp8, BS_DRAFTER_FP8):
// the large matrices (layers, fc, LM head, Markov W2) stored lossily where the backend can (weight_lossy):
// 8 bits on CUDA, halving the bytes a drafter pass reads; bf16 dot products on a CPU with AVX512-BF16
// (activations rounded to bf16, ~2x the exact kernels' rate for a block). Output stays exactly the
// target's (verification decides); only how often drafts are accepted can change.
//
// bs_tuning's drafter_step_walk (tests, A/B; BS_DRAFTER_STEP_WALK=1) makes DeepSpec's sampled walk draw
// step by step (a host round trip per draft), the path gated and RNN Markov heads take; the default walk
// keeps the draws in backend memory. Both draft the same.

// The parsed config of a drafter opened with bs_dflash_open (NULL for any other drafter, e.g. model/dspark_v1.h's).
const bs_drafter_config *bs_dflash_config(const bs_drafter *d);
// The confidence temperatures T_1..T_gamma applied from the folder's calibration.json (docs/calibration.md),
// or NULL when the drafter uses its raw confidences; *bias (bias may be NULL) gets the biases b_1..b_gamma.
const float *bs_dflash_calibration(const bs_drafter *d, const float **bias);
// Rows of its LM head (and Markov W2): the draft vocabulary's size, or the vocabulary's without one.
int bs_dflash_vocab_rows(const bs_drafter *d);

// Optional host outputs of one drafting forward (any pointer may be NULL), for dump and tests.
typedef struct bs_dflash_inspect {
    int32_t *block_ids;      // [B]   [anchor, MASK x (B-1)]
    float *block_hidden;     // [B][H] backbone output after the final norm, all B rows
    float *logits;           // [n][V] LM head on the prediction rows (z-lab: rows 1..n; DeepSpec: U_k, rows 0..n-1)
    float *step_logits;      // [n][V] DeepSpec: Markov-corrected L_k along the walk (= logits without a Markov head)
    float *conf_logits;      // [n]   DeepSpec with a confidence head: pre-sigmoid c_k, the head's raw output
                             //       (a calibration's temperatures apply only to bs_draft.conf)
    // DFlash 2 (logits above are then its unary logits: the LM head's times output_multiplier, softcapped):
    int32_t *cand_ids;       // [n][K] each slot's top-K unary candidates, best first (value desc, id asc)
    float *cand_unary;       // [n][K] their unary logits
    float *sel_hidden;       // [n][R] z = candidate_selector.hidden_projection(h) of each slot's row
    float *cand_scores;      // [n][K] walk scores unary + edge, from the predecessor the walk actually chose
    float *walk_q;           // [n][K] the walk's q over the candidates (greedy: one-hot at the pick)
    const double *uniforms;  // input, [n]: a sampled walk draws slot p at uniforms[p] instead of from the RNG
                             // (reference vectors, dump; NULL: the RNG)
} bs_dflash_inspect;

// One drafting forward: exactly what propose() does (propose is this with ins = NULL), optionally copying
// intermediate tensors out. n = min(max_n, max_drafts) drafts are produced.
int bs_dflash_forward_block(bs_drafter *d, bs_drafter_ctx *dc, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng,
                            bs_draft *out, const bs_dflash_inspect *ins, bs_err *err);
