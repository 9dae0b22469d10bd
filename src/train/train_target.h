// A Qwen3 or Llama-3.x target as a training task (kind "target"), CPU fp32: next-token cross-entropy over
// loss_mask labels, and the frozen online target of the drafter tasks (taps and the final normed hidden state
// of a sequence). The family comes from the config (bs_qwen3_config.arch: q/k norm or none; .rope: default
// or llama3-scaled RoPE, the engine's table); tied or untied head. Parameters carry the checkpoint names
// transformers writes ("model.layers.0.mlp.up_proj.weight", ...; no q_norm / k_norm for Llama).
#pragma once
#include "io/config.h"
#include "train/task.h"

// A fresh target of this shape, initialised as transformers does (every Linear and the embedding
// N(0, 0.02), RMSNorm gains 1), seeded.
int bs_train_target_new(bs_train_task **out, const bs_qwen3_config *cfg, uint64_t seed, bs_err *err);
// A target loaded from a checkpoint folder (config.json + safetensors of any stored dtype, widened to fp32).
// trainable 0: every tensor frozen (the online target of a drafter: no gradient buffers at all).
int bs_train_target_load(bs_train_task **out, const char *dir, int trainable, bs_err *err);

const bs_qwen3_config *bs_train_target_config(const bs_train_task *t);
// The embedding [V][H] and the LM head [V][H] (the embedding itself when tied).
const float *bs_train_target_embed(const bs_train_task *t);
const float *bs_train_target_lm_head(const bs_train_task *t);

// Forward of ids[n] at positions 0..n-1 (causal), no gradients. taps: hidden_states indices as transformers
// numbers them (0 = embeddings, i = output of layer i-1, n_layers = the final normed state); tap_out
// [n][n_taps * H] gets them concatenated in the given order (NULL: none). final_out [n][H] (NULL: not
// wanted) gets the final normed hidden state; logits_out [n][V] (NULL: not computed) the logits.
int bs_train_target_forward(bs_train_task *t, const int32_t *ids, int n, const int *taps, int n_taps, float *tap_out,
                            float *final_out, float *logits_out, bs_err *err);
