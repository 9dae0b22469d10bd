// Helpers for tests that need small models: random Qwen3 targets of any shape written to a temp dir.
#pragma once
#include "engine/engine.h"

// Writes a random target (bf16 safetensors + config.json) into a fresh temp dir (bs_test_tmpdir: removed when
// the test ends); returns its path or NULL. n_shards > 1 writes a sharded checkpoint.
const char *tu_make_target(int vocab, int hidden, int layers, int heads, int kv_heads, int head_dim, int inter,
                           int tied, int n_shards, uint64_t seed);
// Upper tail of the chi-square distribution with df degrees of freedom: P(X >= x).
double tu_chi2_sf(double x, int df);
// Chi-square goodness of fit of counts[n] against probabilities expect[n] (sum 1) over `total`
// draws, merging cells with expected count < 5. Returns the p-value; *df_out gets the dof used.
double tu_chi2_gof(const long *counts, const double *expect, int n, long total, int *df_out);

// A CUDA backend on device 0, or NULL with *why saying why not (BS_NO_CUDA_TESTS set, no usable GPU, a
// build without CUDA): GPU tests SKIP with that reason.
bs_backend *tu_cuda_open(const char **why);
// NULL when tu_cuda_open would give a backend (probed and closed again), else why not.
const char *tu_cuda_unavailable(void);
#define NEED_CUDA_DEVICE() do { const char *why_ = tu_cuda_unavailable(); if (why_) SKIP(why_); } while (0)

// Writes text to path; 0 on success.
int tu_write_text(const char *path, const char *text);

// Greedy speculative output == plain greedy output on `trials` random prompts and lengths (seeded), with
// the drafter in `drafter` opened with *o (NULL: defaults) on engine device `dev`: fails the test
// (through failed_) on the first difference.
struct bs_drafter_opts;
void tu_greedy_spec_equals_plain(int *failed_, const char *dev, const char *target, const char *drafter,
                                 const struct bs_drafter_opts *o, int trials, uint64_t seed);

// Opens `drafter` for engine e (opts NULL: defaults, bs_dflash_lossy_weights included) and gives it the
// context of prompt[0..P): the target's prefill taps (a scratch KV cache, freed again). NULL + err on failure.
struct bs_drafter;
struct bs_drafter *tu_drafter_with_context(bs_engine *e, const char *drafter, const struct bs_drafter_opts *o,
                                           const int32_t *prompt, int P, bs_err *err);
