// config.json of a decoder-only target: Qwen3 (Qwen3ForCausalLM) or Llama-3.x (LlamaForCausalLM), in
// transformers-4 or transformers-5 style. The two differ only in flags read here (docs/targets.md): q/k-norm
// (Qwen3) or none (Llama), and the RoPE frequencies (default, or llama3-scaled).
#pragma once
#include <cjson/cJSON.h>
#include "util/err.h"

#define BS_MAX_EOS 16

// The target's family; 0 is Qwen3 so that a zeroed config (tests, training, drafter backbones) is Qwen3.
typedef enum { BS_ARCH_QWEN3 = 0, BS_ARCH_LLAMA = 1 } bs_model_arch;
typedef enum { BS_ROPE_DEFAULT = 0, BS_ROPE_LLAMA3 = 1 } bs_rope_type;

// rope_scaling (transformers 4) / rope_parameters (transformers 5) beyond rope_theta. llama3: inverse
// frequencies with wavelength above original_max / low_freq_factor are divided by factor, those below
// original_max / high_freq_factor kept, those between interpolated (src/model/rope.c).
typedef struct bs_rope_scaling {
    bs_rope_type type;
    double factor, low_freq_factor, high_freq_factor;
    int original_max;        // original_max_position_embeddings
} bs_rope_scaling;

typedef struct bs_qwen3_config {
    bs_model_arch arch;      // Qwen3 (q/k-norm in attention) or Llama (none)
    int vocab_size;          // rows of embed_tokens / lm_head
    int hidden_size;         // H
    int n_layers;            // num_hidden_layers
    int n_heads;             // num_attention_heads
    int n_kv_heads;          // num_key_value_heads (GQA)
    int head_dim;            // head_dim (default hidden_size / n_heads)
    int intermediate_size;   // MLP width
    int max_position;        // max_position_embeddings: the longest context blockspec allows
    float rms_eps;           // rms_norm_eps
    float rope_theta;        // rope_theta or rope_parameters.rope_theta
    bs_rope_scaling rope;    // how inv_freq is scaled (zero: default RoPE)
    int tie_embeddings;      // tie_word_embeddings: no lm_head.weight, the embedding is the head
    int sliding_window;      // 0 = full attention everywhere (Qwen3 dense checkpoints)
    int eos_ids[BS_MAX_EOS]; // from config.json and generation_config.json (union)
    int n_eos;
    int bos_id;              // -1 if unknown
} bs_qwen3_config;

// Qwen3 normalises each q and k head (q_norm / k_norm) before RoPE; Llama does not.
static inline int bs_qwen3_has_qk_norm(const bs_qwen3_config *c) { return c->arch == BS_ARCH_QWEN3; }

// Parses the fields shared by every Qwen3-shaped model (targets and drafters): sizes, norms, RoPE (default or
// llama3), and refuses what blockspec's layer does not compute (attention_bias / mlp_bias true, other
// activations, other RoPE types). arch comes from architectures[0] / model_type (bs_model_arch_of), Qwen3
// when they name neither (drafter backbones).
int bs_qwen3_config_parse(bs_qwen3_config *c, const cJSON *root, const char *file, bs_err *err);
// Loads dir/config.json, checks it describes a Qwen3 or Llama causal LM (architectures[0], else model_type),
// and merges dir/generation_config.json's eos ids when present.
int bs_qwen3_config_load(bs_qwen3_config *c, const char *dir, bs_err *err);
// Adds an end-of-sequence id unless it is already listed (at most BS_MAX_EOS are kept).
void bs_qwen3_config_add_eos(bs_qwen3_config *c, int id);
// The family named by a config's architectures[0] (else its model_type); -1 if neither names Qwen3 or Llama.
int bs_model_arch_of(const cJSON *root);
// Writes a config.json for a target of this shape and family (make-random, training).
cJSON *bs_qwen3_config_to_json(const bs_qwen3_config *c);
