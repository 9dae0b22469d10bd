// The "quantization" block of an MLX quantised checkpoint's config.json (docs/quantization.md):
//   "quantization": {"group_size": 64, "bits": 4, "mode": "affine",
//                    "model.layers.0.mlp.down_proj": {"group_size": 64, "bits": 8},   (a per-module override)
//                    "lm_head": false}                                                 (left unquantised)
// HF-style exports repeat it as "quantization_config"; "quantization" wins when both are present.
#pragma once
#include <cjson/cJSON.h>
#include "util/err.h"

typedef struct bs_quant_override {
    char *module;            // the module path: a tensor name without ".weight"
    int bits, group;         // 0 bits = false: the module is not quantised
} bs_quant_override;

typedef struct bs_quant_config {
    int present;             // config.json has the block
    int bits, group;         // defaults for every quantised module
    int n;
    bs_quant_override *over;
    char file[512];          // config.json's path, for messages
} bs_quant_config;

// Parses the block from a config.json root; absent = present 0 (not an error). bits must be 4 or 8 and
// group_size 32, 64 or 128; mode, if given, "affine".
int bs_quant_config_parse(bs_quant_config *q, const cJSON *root, const char *file, bs_err *err);
// dir/config.json (a path that is not a folder with one: present 0).
int bs_quant_config_load(bs_quant_config *q, const char *dir, bs_err *err);
void bs_quant_config_free(bs_quant_config *q);
// The bits and group the config gives `module`: 1 = quantised with *bits/*group, 0 = not quantised
// (no block, or an override of false).
int bs_quant_config_for(const bs_quant_config *q, const char *module, int *bits, int *group);
