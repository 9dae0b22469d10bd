// Random checkpoints of any shape, written as users receive real ones (bf16 safetensors, optionally
// sharded with model.safetensors.index.json), so benchmarks and tests run at real sizes without weights.
#pragma once
#include <stdint.h>
#include "util/err.h"

typedef struct bs_tensor_spec {
    char name[160];
    int n_dims;
    int64_t shape[3];
    int init;          // BS_INIT_*
} bs_tensor_spec;

enum { BS_INIT_LINEAR = 0,   // variance 1/in, so activations stay O(1)
       BS_INIT_ONES = 1,     // norm gains
       BS_INIT_EMBED = 2,    // unit variance
       BS_INIT_SMALL = 3,    // a quarter of LINEAR's scale (DFlash 2's kernel projections: coefficients ~0.25)
       BS_INIT_CONV_BASE = 4,    // DFlash 2 base kernels [2][taps][H]: tap 0 near 1, the others near 0 (each +- ~0.25)
       BS_INIT_LINEAR_IN = 5 };  // a matrix stored [in][out] (x @ W: the seed's DSpark v1): variance 1/in = 1/shape[0]

// Writes the tensors (bf16) into dir/model.safetensors, or into n_shards files plus the index.
// Tensors are generated and written one at a time: memory stays at one tensor.
int bs_write_random_tensors(const char *dir, const bs_tensor_spec *specs, int n, int n_shards, uint64_t seed, bs_err *err);
// The tensors a Qwen3 target of this config needs (caller frees *specs).
struct bs_qwen3_config;
int bs_qwen3_tensor_specs(const struct bs_qwen3_config *c, bs_tensor_spec **specs, int *n, bs_err *err);
// The tensors a drafter of this config stores (z-lab DFlash: backbone only; DFlash 2: plus its convolutions and
// selector; DeepSpec: plus embed_tokens, lm_head, Markov and confidence heads), under the names official
// checkpoints use (caller frees *specs).
struct bs_drafter_config;
int bs_drafter_tensor_specs(const struct bs_drafter_config *c, bs_tensor_spec **specs, int *n, bs_err *err);
// The tensors of the seed's DSpark v1 drafter of this dspark.json (docs/dspark-v1.md), [in][out] as it stores them
// (caller frees *specs). The Markov W2 and the confidence head are random too (the seed starts them at 0).
struct bs_dspark_v1_config;
int bs_dspark_v1_tensor_specs(const struct bs_dspark_v1_config *c, bs_tensor_spec **specs, int *n, bs_err *err);
