// A control for the sampling tests: a drafter that drafts exactly as the one inside it but hands the verifier
// a wrong q, the full softmax at the sampling temperature of logits its forward reports (a DFlash 2 walk's unary
// logits, a DSpark v1 walk's base logits without the Markov bias), instead of the distribution the drafts were
// really drawn from. The chi-square test must fail with it: that is what shows the test can see a wrong q.
#pragma once
#include "engine/engine.h"
#include "spec/drafter.h"

// The inner drafter's block, with its per-draft logits [n][vocab] written to `logits` (host memory).
typedef int (*tu_logits_forward)(bs_drafter *inner, bs_drafter_ctx *c, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng,
                                 bs_draft *out, float *logits, bs_err *err);

// Wraps `inner` (owned from then on: freed with the wrapper).
bs_drafter *tu_wrong_q_wrap(bs_engine *e, bs_drafter *inner, const char *name, tu_logits_forward forward);
