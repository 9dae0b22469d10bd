// Parameter-set I/O for the training tasks: initialisation, loading from a checkpoint (any stored dtype,
// widened to fp32), and exports in the bf16 safetensors + config.json layout the engine loads.
#pragma once
#include <cjson/cJSON.h>
#include "io/safetensors.h"
#include "train/params.h"
#include "util/rng.h"

// w[i] ~ N(0, std^2) (Box-Muller on the seeded RNG).
void bs_train_fill_normal(float *w, int64_t n, float std, bs_rng *r);
// Fills p from the checkpoint tensor `name` (or "model." + name, as some exports prefix it): the stored
// shape must equal p's; BF16 / F16 / F32 are widened. Errors name the file, the tensor and both shapes.
int bs_train_param_load(bs_param *p, const bs_checkpoint *ck, const char *name, bs_err *err);
// dir/model.safetensors with every tensor of ps in BF16 (round to nearest even) under its name.
int bs_train_write_bf16(const bs_param_set *ps, const char *dir, bs_err *err);
// dir/config.json (pretty-printed); creates dir if needed.
int bs_train_write_config(const cJSON *root, const char *dir, bs_err *err);
