// RoPE inverse frequencies of a model (target or drafter), computed once at load as transformers computes
// them, and handed to the backend ops as a table (backend.h: head_norm_rope and the fused q/k ops).
#pragma once
#include "backend/backend.h"
#include "io/config.h"

// out[i] for i < hd/2: default RoPE 1 / theta^(2i/hd) (bs_rope_inv_freq), then the llama3 scaling when
// s->type says so. Every step is the fp32 operation transformers' _compute_llama3_parameters performs on
// its fp32 tensors, in the same order, so the table equals the inv_freq buffer of a model it loads.
void bs_rope_inv_freqs(float theta, const bs_rope_scaling *s, int hd, float *out);

// The same table in backend memory (be->free releases it); NULL with err filled on failure.
float *bs_rope_table(bs_backend *be, float theta, const bs_rope_scaling *s, int hd, bs_err *err);
