// The schedulers' cost model (docs/scheduling.md): how many target forwards per second this device runs
// with b rows in the forward. A verify forward is measured as the runtime runs it: b rows spread over
// ceil(b / block) sequences of `block` rows (anchor + drafts; the last one shorter), each against its own
// KV cache of ctx committed rows, logits for every row.
#pragma once
#include "engine/engine.h"
#include "spec/drafter.h"

// sps[i] = 1 / (the best of reps forwards of rows[i] rows), for i < n. rows[i] in [1, 4096].
int bs_profile_forwards(const bs_engine *e, const int *rows, int n, int ctx, int block, int reps, double *sps, bs_err *err);
// pps[i] = 1 / (the best of reps drafter passes over seqs[i] sequences), each drafting `drafts` tokens
// (0: the drafter's most) greedily after a ctx-row context, as a step runs them: one propose for one
// sequence (the lone path), propose_batch for several where the drafter has it. seqs[i] in [1, 4096].
int bs_profile_drafter(const bs_engine *e, bs_drafter *d, const int *seqs, int n, int ctx, int drafts, int reps, double *pps, bs_err *err);
// The target's shape as a cache key: "L36-H4096-I12288-A32x8x128-V151936-bf16" (layers, hidden, intermediate,
// heads x kv heads x head dim, vocabulary, weight dtype). 0, or -1 when buf is too small.
int bs_model_shape(const bs_engine *e, char *buf, size_t len);
