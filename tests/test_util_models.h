// Helpers for tests that need small models: random Qwen3 targets of any shape written to a temp dir.
#pragma once
#include "spec/drafter.h"
#include "engine/engine.h"

// Writes a random target (bf16 safetensors + config.json) into a fresh temp dir (bs_test_tmpdir: removed when
// the test ends); returns its path or NULL. n_shards > 1 writes a sharded checkpoint.
const char *tu_make_target(int vocab, int hidden, int layers, int heads, int kv_heads, int head_dim, int inter,
                           int tied, int n_shards, uint64_t seed);
// Upper tail of the chi-square distribution with df degrees of freedom: P(X >= x).
double tu_chi2_sf(double x, int df);
// Chi-square goodness of fit of counts[n] against probabilities expect[n] (sum 1) over `total`
// draws, merging neighbouring cells (index order) until each group expects >= 5 draws; the degrees of
// freedom are the groups - 1. Returns the p-value (0 when any draw landed in a cell of probability 0,
// wherever it is: merging would otherwise hide it); *df_out gets the dof used.
double tu_chi2_gof(const long *counts, const double *expect, int n, long total, int *df_out);
// Draws that landed on outcomes of probability exactly 0 (tokens the filters removed): every sampling
// test checks this is 0 on its own, not only through the chi-square.
long tu_impossible_draws(const long *counts, const double *expect, int n);

// The processed distribution (temperature -> top-k -> top-p, transformers' order) by brute force, in
// double and by sorting, written independently of src/spec/sampler.c (which avoids sorting for speed):
// the reference bs_sampling_probs and the spec tests' expected distributions are held to.
//   greedy (T <= 0): one-hot at the first argmax; top-k (0 < k < V): logits >= the k-th largest (ties
//   kept); top-p (0 < p < 1): after renormalising, the most probable tokens in order until their mass
//   reaches p, with every token tied with the last one admitted.
// out[V]; returns the kept count. *boundary (may be NULL) = the distance of the top-p walk's running mass
// from p at the step that admitted the last token or the one before it, or 0 when a top-k or top-p cut
// falls between two values within 1e-6 relative of each other but not equal (float rounding can flip the
// cut in these cases, or make the two one tie; callers comparing kept sets skip them below ~1e-6).
int tu_ref_probs(const bs_sampling *s, const float *logits, int V, double *out, double *boundary);

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

// A random checkpoint of config JSON text `cfg` in folder dir (the config is written to dir.json, then
// `blockspec make-random --seed seed`); 0 on success.
int tu_make_random_from_config(const char *dir, const char *cfg, unsigned seed);

// Drafts accepted and drafted by `drafter` over 4 greedy speculative runs of n_new tokens on engine device dev,
// prompts of 8 ids (i * 5 + trial * step) % vocab: the runs a losslessness check compared must have met
// accepted drafts, or it only saw the rejection path. 0, or -1 and err.
int tu_spec_acceptance(const char *dev, const char *target, const char *drafter, int vocab, int step, int n_new, long *accepted,
                       long *drafted, bs_err *err);

// Opens `drafter` for engine e (opts NULL: defaults, bs_tuning's drafter_fp8 included) and gives it the
// context of prompt[0..P): the target's prefill taps (a scratch KV cache, freed again). NULL + err on failure.
struct bs_drafter *tu_drafter_with_context(bs_engine *e, const char *drafter, const struct bs_drafter_opts *o, struct bs_drafter_ctx *dc,
                                           const int32_t *prompt, int P, bs_err *err);

// A drafter's test context freed, then the drafter.
static inline void tu_drafter_free(bs_drafter *d, bs_drafter_ctx *dc) { bs_drafter_ctx_free(d, dc); d->free(d); }

// The p-value of the first three tokens' counts against their exact joint under the target (prompt 1, 5, 2),
// over `runs` seeded generations: speculative with drafter d (opened by the caller), or plain (d NULL). The
// joint is computed from the engine's own logits by the brute-force reference (tu_ref_probs), not the sampler
// under test, whatever backend samples the runs. Returns -1 when a run fails (never evidence either way) and 0
// when any draw landed on an impossible outcome (*impossible counts them); *accept_rate = accepted / drafted.
double tu_spec_sampling_pvalue(bs_engine *e, bs_drafter *d, const bs_sampling *smp, long runs, double *accept_rate, long *impossible);
