// dspark.json: the sidecar of the seed's own DSpark v1 drafter (mlx-bun's package/src/spec/dspark/module.ts,
// DSparkDrafter.save; docs/dspark-v1.md). A folder with dspark.json + model.safetensors is this format, whatever
// else it holds; the fields, as the seed writes them:
//   { "kind": "dspark-drafter", "version": 1, "target_id": "...",
//     "config": { "gamma", "dDraft", "nLayers", "nHeads", "markovRank", "ffMult" },
//     "dims":   { "hiddenSize", "vocabSize", "eps" },
//     "param_names": [ ... ] }
#pragma once
#include <cjson/cJSON.h>
#include "spec/drafter.h"
#include "util/err.h"

#define BS_DSPARK_V1_FILE "dspark.json"
#define BS_DSPARK_V1_MAX_LAYERS 64

typedef struct bs_dspark_v1_config {
    int gamma;          // config.gamma: block positions (drafts per round), also the rows of pos_emb - 1
    int d_draft;        // config.dDraft: backbone width
    int n_layers;       // config.nLayers
    int n_heads;        // config.nHeads (head dim = dDraft / nHeads)
    int markov_rank;    // config.markovRank r
    int ff_mult;        // config.ffMult: the FFN is ffMult * dDraft wide
    int hidden_size;    // dims.hiddenSize: the target's H
    int vocab_size;     // dims.vocabSize: the target's V
    float eps;          // dims.eps: the target's rms_norm_eps, which every RMSNorm of the drafter uses
    char target_id[256];// target_id ("" when absent): the seed's registry key, informational
    int n_param_names;  // param_names listed (0: absent); param_names_ok: 1 if they are the canonical list
    int param_names_ok;
} bs_dspark_v1_config;

// 1 if dir holds a dspark.json (the format is then this one).
int bs_dspark_v1_present(const char *dir);
// Parses dspark.json's object (file names it in errors: every message names the field, e.g. "config.nHeads").
int bs_dspark_v1_config_parse(bs_dspark_v1_config *c, const cJSON *root, const char *file, bs_err *err);
// Loads dir/dspark.json.
int bs_dspark_v1_config_load(bs_dspark_v1_config *c, const char *dir, bs_err *err);
// The canonical tensor name i (0 <= i < bs_dspark_v1_n_params(c)) in the seed's order (buildNames): per layer
// bb.{i}.attn_norm, q, k, v, o, ff_norm, gate, up, down; then ctx_proj, tok_proj, mask_emb, pos_emb, out_norm,
// out_proj, markov.w1, markov.w2, conf.w, conf.b.
int bs_dspark_v1_n_params(const bs_dspark_v1_config *c);
void bs_dspark_v1_param_name(const bs_dspark_v1_config *c, int i, char *buf, size_t cap);
