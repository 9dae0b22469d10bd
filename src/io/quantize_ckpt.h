// `blockspec quantize`: a float checkpoint folder -> an MLX affine-quantised one (docs/quantization.md).
#pragma once
#include "util/err.h"

// Writes out_dir/model.safetensors with every 2-D "*.weight" whose width the group divides quantised to
// `bits` (4 or 8) in groups of `group` (32, 64, 128), as mlx-lm quantises Linear and Embedding modules
// (codes U32, scales and biases in the source dtype), every other tensor copied as is; config.json with a
// "quantization" block (and its "quantization_config" copy); and every other file of in_dir (tokenizer,
// generation config, calibration) copied. *n_quantised (may be NULL) = how many matrices were quantised.
int bs_quantize_checkpoint(const char *in_dir, const char *out_dir, int bits, int group, int *n_quantised, bs_err *err);
