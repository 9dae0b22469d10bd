// The record of an R1 fold (docs/rotation.md): a target written by `blockspec rotate` stores its residual
// stream as h . R1, R1 = diag(s) . M (M: MLX's Hadamard transform of length hidden_size, backend/hadamard.h),
// with its RMSNorm gains folded into the linears that read them. A drafter trained on the unrotated target
// needs s and the final norm's original gain to bind to it, so the folder records them:
//
//   config.json   "blockspec_r1": {"transform": "mlx_hadamard", "n": 5120, "file": "blockspec_r1.safetensors",
//                                  "r1Seed": 7}                    (r1Seed: only when the signs came from a seed)
//   blockspec_r1.safetensors       "signs" [n] F32 (+1 / -1), "final_norm_gain" [n] F32 (gamma before the fold)
//
// The sidecar is a file of its own so that the folded model.safetensors stays a plain Qwen3 / Llama checkpoint
// any loader reads (its norms are 1, its outputs the original model's).
#pragma once
#include <stdint.h>
#include <cjson/cJSON.h>
#include "util/err.h"

#define BS_R1_KEY "blockspec_r1"
#define BS_R1_FILE "blockspec_r1.safetensors"
#define BS_R1_TRANSFORM "mlx_hadamard"

typedef struct bs_r1_basis {
    int n;                 // the hidden size the fold rotates
    float *signs;          // [n] s_i = +1 or -1
    float *final_gain;     // [n] the final RMSNorm's gain before the fold (now inside the LM head)
    int has_seed;          // the signs are bs_r1_signs_from_seed(seed, n)
    uint32_t seed;
} bs_r1_basis;

// Reads dir/config.json's "blockspec_r1" block and its sidecar for a model of hidden size `hidden`.
// 0: the folder holds no fold (*b zeroed); 1: *b filled (free with bs_r1_basis_free); -1: err names the file and
// the field or tensor at fault (an unknown transform, n != hidden, a missing sidecar, signs not +1/-1 or not
// the seed's, a gain that is not finite).
int bs_r1_basis_load(bs_r1_basis *b, const char *dir, int hidden, bs_err *err);
void bs_r1_basis_free(bs_r1_basis *b);

// Writes dir/blockspec_r1.safetensors and adds the "blockspec_r1" block to `config` (replacing one there).
int bs_r1_basis_write(const bs_r1_basis *b, const char *dir, cJSON *config, bs_err *err);

// A signs file (`blockspec rotate --signs FILE`): a safetensors file with a 1-D tensor "signs" of n elements,
// each +1 or -1 (any float dtype; the sidecar of another fold is one). out[n].
int bs_r1_signs_load(const char *path, int n, float *out, bs_err *err);
