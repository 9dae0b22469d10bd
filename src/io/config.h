// config.json of a decoder-only target: Qwen3 (Qwen3ForCausalLM) or Llama-3.x (LlamaForCausalLM), in
// transformers-4 or transformers-5 style. The two differ only in flags read here (docs/targets.md): q/k-norm
// (Qwen3) or none (Llama), and the RoPE frequencies (default, or llama3-scaled). Gemma-4 text targets
// (Gemma4ForCausalLM, or the text tower of Gemma4ForConditionalGeneration) carry their extra shape in
// `gemma` (src/io/gemma4_config.c, docs/gemma4.md).
#pragma once
#include <cjson/cJSON.h>
#include "util/err.h"

#define BS_MAX_EOS 16

// The target's family; 0 is Qwen3 so that a zeroed config (tests, training, drafter backbones) is Qwen3.
typedef enum { BS_ARCH_QWEN3 = 0, BS_ARCH_LLAMA = 1, BS_ARCH_GEMMA4 = 2 } bs_model_arch;
typedef enum { BS_ROPE_DEFAULT = 0, BS_ROPE_LLAMA3 = 1 } bs_rope_type;

// rope_scaling (transformers 4) / rope_parameters (transformers 5) beyond rope_theta. llama3: inverse
// frequencies with wavelength above original_max / low_freq_factor are divided by factor, those below
// original_max / high_freq_factor kept, those between interpolated (src/model/rope.c).
typedef struct bs_rope_scaling {
    bs_rope_type type;
    double factor, low_freq_factor, high_freq_factor;
    int original_max;        // original_max_position_embeddings
} bs_rope_scaling;

// What a Gemma-4 text model adds to the shared sizes (docs/gemma4.md). Sliding-window layers use the
// config's head_dim / n_kv_heads and default RoPE; full-attention layers their own head size, K/V heads
// (k_eq_v) and proportional RoPE. Field names in comments are config.json's (text_config's when nested).
#define BS_GEMMA4_MAX_LAYERS 256
typedef struct bs_gemma4_config {
    int multimodal;              // Gemma4ForConditionalGeneration: tensors under model.language_model.
    int global_head_dim;         // global_head_dim (full-attention layers)
    int global_kv_heads;         // num_global_key_value_heads when attention_k_eq_v, else num_key_value_heads
    int k_eq_v;                  // attention_k_eq_v: full layers have no v_proj, V = k_proj's output
    int sliding_window;          // sliding_window: a sliding query sees itself and the window - 1 keys before it
    float final_softcap;         // final_logit_softcapping (0: none): logits = c * tanh(logits / c)
    float sliding_theta;         // rope_parameters.sliding_attention.rope_theta (default RoPE over head_dim)
    float full_theta, full_partial, full_factor;   // rope_parameters.full_attention: proportional RoPE
    int ple_dim;                 // hidden_size_per_layer_input (0: no per-layer embeddings)
    int ple_vocab;               // vocab_size_per_layer_input
    int n_kv_shared;             // num_kv_shared_layers: the last ones reuse an earlier layer's K/V
    int double_wide_mlp;         // use_double_wide_mlp: those shared layers have 2 x intermediate_size
    unsigned char full[BS_GEMMA4_MAX_LAYERS];      // layer_types: 1 = full_attention, 0 = sliding_attention
} bs_gemma4_config;

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
    bs_gemma4_config gemma;  // arch == BS_ARCH_GEMMA4 only (zero otherwise)
} bs_qwen3_config;

// Qwen3 normalises each q and k head (q_norm / k_norm) before RoPE; Llama does not.
static inline int bs_qwen3_has_qk_norm(const bs_qwen3_config *c) { return c->arch == BS_ARCH_QWEN3; }

// Per-layer shapes (Gemma-4 layers differ; every other family: the config's sizes).
int bs_cfg_layer_head_dim(const bs_qwen3_config *c, int l);
int bs_cfg_layer_kv_heads(const bs_qwen3_config *c, int l);
int bs_cfg_layer_inter(const bs_qwen3_config *c, int l);
// The layer whose K/V cache layer l attends to (itself, or a Gemma-4 KV-shared layer's source).
int bs_cfg_layer_kv_source(const bs_qwen3_config *c, int l);
// Largest over the layers: K/V row width (n_kv * hd), query width (n_heads * hd), MLP width.
int bs_cfg_max_kv_width(const bs_qwen3_config *c);
int bs_cfg_max_q_width(const bs_qwen3_config *c);
int bs_cfg_max_inter(const bs_qwen3_config *c);
// Gemma-4: parses a Gemma4ForCausalLM config (root) or a Gemma4ForConditionalGeneration one (its text_config);
// called by bs_qwen3_config_parse when architectures[0] / model_type names Gemma-4 (src/io/gemma4_config.c).
int bs_gemma4_config_parse(bs_qwen3_config *c, const cJSON *root, const char *file, bs_err *err);

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
