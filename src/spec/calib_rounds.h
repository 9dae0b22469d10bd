// Recording drafting rounds for confidence calibration (`blockspec calibrate`, docs/calibration.md): at
// sampled anchor positions of held-out sequences, the engine's own greedy round (the drafter's block pass,
// then the target's verify forward over [anchor, d_1..d_K]) and, per draft position k, the confidence
// head's raw logit z_k and whether drafts 1..k all survived (d_i == the target's argmax after the accepted
// prefix, for every i <= k). The prefix before each anchor is the held-out text itself (teacher forcing).
#pragma once
#include <stdint.h>
#include "engine/engine.h"
#include "spec/drafter.h"

typedef struct bs_calib_rounds {
    int K;                       // draft positions verified per round
    int n, cap;                  // rounds recorded
    float *z;                    // [cap][K] raw confidence logits
    uint8_t *y;                  // [cap][K] 1: drafts 1..k all survived
    int *n_valid;                // [cap] positions that count: K, or fewer after an accepted end-of-sequence draft
    int *anchor;                 // [cap] the anchor's position in its sequence
} bs_calib_rounds;

void bs_calib_rounds_free(bs_calib_rounds *r);

// Records up to n_anchors rounds on the sequence ids[0..n): anchors drawn uniformly without replacement
// (rng) among positions a in [1, n-1] whose token is no end-of-sequence token and, with a loss mask (mask
// NULL: none), mask[a] = 1 (a response token). d: a DeepSpec drafter with a confidence head (model/dflash.h),
// opened with room for n context rows; K <= d->max_drafts. Cost: one target prefill of the prefix up to the
// last anchor, then per anchor one drafter pass and one (K + 1)-row verify forward: the anchors run from
// the last to the first, so rolling the KV caches back (O(1)) leaves every earlier prefix intact.
// Returns the rounds recorded, or -1 (err).
int bs_calib_record_seq(bs_engine *e, bs_drafter *d, const int32_t *ids, const uint8_t *mask, int n, int n_anchors, int K,
                        bs_rng *rng, bs_calib_rounds *out, bs_err *err);
