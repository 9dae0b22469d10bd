// Sequential Temperature Scaling (STS, shared/docs/dflash-dspark.md 6.4): one temperature T_k per draft
// position, fitted in order k = 1..K so that the cumulative products a_k = prod_{i<=k} sigmoid(z_i / T_i) of
// the confidence head's raw logits z match the empirical prefix survival y_k (drafts 1..k all accepted).
// Optionally a bias b_k per position as well, c_k = sigmoid(z_k / T_k + b_k) (Platt scaling, fitted in the
// same sequential way): a temperature alone cannot move a confidence across 0.5, so it cannot repair a head
// whose logits sit on the wrong side of 0 (docs/calibration.md has a measured case).
// Pure arithmetic over recorded rounds: src/spec/calib_collect.c records them, cli/cmd_calibrate.c prints.
#pragma once
#include <stdint.h>
#include "util/err.h"

// Recorded rounds: z and y are [n_rounds][K]; a round counts at positions k < n_valid[r] only (a round
// cut by an accepted end-of-sequence draft, or one the context had no room for, verified fewer).
typedef struct bs_sts_data {
    int n_rounds, K;
    const float *z;              // raw confidence logits (the head's output, bias included, before any T)
    const uint8_t *y;            // 1: drafts 1..k all survived verification
    const int *n_valid;          // NULL: every round counts at every position
} bs_sts_data;

// Why a position's temperature is what it is. Every status but FITTED leaves T = 1 (the raw head), so
// degenerate data never yields a NaN or an arbitrary temperature.
typedef enum {
    BS_STS_FITTED = 0,
    BS_STS_NO_DATA,              // no round reached the position
    BS_STS_TOO_FEW,              // fewer rounds than min_samples
    BS_STS_NO_SURVIVORS,         // no round survived through the position: only "0" is ever right
    BS_STS_ALL_SURVIVED,         // every round survived: only "1" is ever right
    BS_STS_FLAT,                 // the logits are all 0: a temperature changes nothing (with a bias, only b is fitted)
} bs_sts_status;
const char *bs_sts_status_name(bs_sts_status s);   // "fitted", "no data", ... (also written to calibration.json)

#define BS_STS_T_MIN 0.01        // the searched range of temperatures (log scale)
#define BS_STS_T_MAX 100.0
#define BS_STS_B_MIN -10.0       // the searched range of biases
#define BS_STS_B_MAX 10.0

typedef struct bs_sts_opts {
    int min_samples;             // rounds a position needs to be fitted
    int bins;                    // equal-width bins of the ECE
    int fit_bias;                // 1: fit b_k too; 0: b_k = 0 (the paper's STS)
} bs_sts_opts;

typedef struct bs_sts_pos {
    int n, survived;             // rounds that reached the position, and survived through it
    double mean_conf;            // mean raw per-position confidence sigmoid(z_k)
    double survival;             // survived / n: the empirical prefix survival
    double mean_before, mean_after;   // mean predicted a_k, raw (all T = 1) and calibrated
    double ece_before, ece_after;     // binned ECE of a_k against y_k
    double nll_before, nll_after;     // mean BCE of a_k against y_k
    double T, b;
    int at_bound;                // the best T (or b) is an end of its searched range
    bs_sts_status status;
} bs_sts_pos;

// Fits T[0..K) (and, with o->fit_bias, B[0..K); B may be NULL without) sequentially, minimising the mean BCE of
// a_k given the already fitted positions 1..k-1: a grid over [T_MIN, T_MAX] (log scale) x [B_MIN, B_MAX], then
// golden-section refinements around the best grid point. Fills pos[0..K) with the figures before and after
// (ECE with o->bins equal-width bins). Returns -1 (err) only on bad arguments or memory; degenerate positions
// keep T = 1, b = 0 and say why in pos[k].status.
int bs_sts_fit(const bs_sts_data *d, const bs_sts_opts *o, double *T, double *B, bs_sts_pos *pos, bs_err *err);

// One reliability bin: rounds whose predicted survival fell in [lo, hi), their mean prediction and observed rate.
typedef struct bs_sts_bin { double lo, hi; int n; double pred, obs; } bs_sts_bin;

// ECE = sum_b (n_b / n) |mean predicted_b - observed_b| over `bins` equal-width bins of [0, 1] (predictions
// clamped to [1e-8, 1 - 1e-8] as DeepSpec's recorder does). out[bins] (may be NULL) receives the bins.
double bs_sts_ece(const double *a, const uint8_t *y, int n, int bins, bs_sts_bin *out);

// The ECE's noise floor: the mean (and standard deviation) of the ECE that a perfectly calibrated predictor
// with these same predictions a[0..n) would show, its outcomes drawn as Bernoulli(a_i), over `draws` draws
// (deterministic: the generator is seeded by `seed`). A measured ECE near it is as good as n rounds can show;
// only more rounds lower both.
double bs_sts_ece_floor(const double *a, int n, int bins, int draws, uint64_t seed, double *sd);

// a_k of every round at position k (0-based) under temperatures T[0..k] and biases B[0..k] (NULL: all 1, all 0),
// for the rounds that reached it, in round order: writes a[] and lab[] (capacity n_rounds), returns their count.
int bs_sts_cumulative(const bs_sts_data *d, const double *T, const double *B, int k, double *a, uint8_t *lab);
