// `blockspec rotate`: an R1-folded copy of a float Qwen3 / Llama checkpoint (docs/rotation.md).
#pragma once
#include <stdint.h>
#include "util/err.h"

typedef struct bs_rotate_opts {
    const char *signs_file;   // a safetensors file with "signs" [hidden_size] (+1/-1); NULL: the stream of `seed`
    uint32_t seed;            // r1Seed (docs/dflash2.md 3.5)
    const char *dtype;        // "F32", "BF16" or "F16" for every tensor written; NULL: each keeps its source dtype
} bs_rotate_opts;

// Writes out_dir/model.safetensors, the sidecar and config.json of the folded model, and copies every other file
// of in_dir (tokenizer, generation config). The fold, in fp32 (docs/dflash2.md 3.2), with R1 = diag(s) . M:
//   1. the head untied (a tied model gets an lm_head.weight, the embedding's copy; tie_word_embeddings false);
//   2. every RMSNorm gain folded into the linears reading its output, W <- W . diag(gamma), the gain set to 1
//      (eps kept): input_layernorm -> q/k/v, post_attention_layernorm -> gate/up, the final norm -> lm_head;
//   3. the readers of the residual stream W <- W . R1 (q/k/v, gate/up, lm_head), the embedding's rows e <- e . R1,
//      its writers W <- R1^T . W (o_proj, down_proj). q_norm / k_norm act per head after q/k: unchanged.
// Every residual-stream state becomes h . R1, and the logits stay the model's (up to the rounding of the stored
// weights). Refused: a quantised or already folded input, a hidden size the transform has no length for, a signs
// file of the wrong length or with values other than +1/-1, a tensor the fold does not know.
int bs_rotate_checkpoint(const char *in_dir, const char *out_dir, const bs_rotate_opts *o, bs_err *err);
