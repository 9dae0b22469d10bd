// config.json of a Qwen3 target (Qwen3ForCausalLM), in transformers-4 or transformers-5 style.
#pragma once
#include <cjson/cJSON.h>
#include "util/err.h"

#define BS_MAX_EOS 16

typedef struct bs_qwen3_config {
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
    int tie_embeddings;      // tie_word_embeddings: no lm_head.weight, the embedding is the head
    int sliding_window;      // 0 = full attention everywhere (Qwen3 dense checkpoints)
    int eos_ids[BS_MAX_EOS]; // from config.json and generation_config.json (union)
    int n_eos;
    int bos_id;              // -1 if unknown
} bs_qwen3_config;

// Parses the fields shared by every Qwen3-shaped model (targets and drafters): sizes, norms, RoPE.
int bs_qwen3_config_parse(bs_qwen3_config *c, const cJSON *root, const char *file, bs_err *err);
// Loads dir/config.json, checks it describes a Qwen3 causal LM, and merges dir/generation_config.json's
// eos ids when present.
int bs_qwen3_config_load(bs_qwen3_config *c, const char *dir, bs_err *err);
// Adds an end-of-sequence id unless it is already listed (at most BS_MAX_EOS are kept).
void bs_qwen3_config_add_eos(bs_qwen3_config *c, int id);
// Writes a config.json for a Qwen3 target of this shape (make-random, training).
cJSON *bs_qwen3_config_to_json(const bs_qwen3_config *c);
