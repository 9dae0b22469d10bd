// DFlash 2's candidate selector walk (docs/dflash2.md, "The selector"), on the host. The drafter hands it, for
// each of its n draft slots, the K best unary candidates (ids and unary logits, best first), the slot's selector
// hidden z = hidden_projection(h) and the anchor; the walk picks one candidate per slot, left to right:
//   s[p][k] = unary[p][k] + sum_r A[prev][r] * z[p][r] * B[cand[p][k]][r],   prev = the anchor, then pick p-1
// greedy: the first k with the largest s (candidates are best-unary first, so ties go to the larger unary, then
// the smaller id); temperature T > 0: q[p] = softmax(s[p] / T) over the K candidates (zero everywhere else),
// and the pick is q[p]'s inverse CDF in candidate order at the uniform u[p] (as bs_sample_probs_u draws).
#pragma once
#include <stdint.h>
#include "backend/backend.h"

typedef struct bs_selector {
    int k, rank;
    const bs_mat *pred, *succ;   // host views of the codebooks A, B: [vocab][rank] (any dtype bs_mat_row_f32 reads)
    int vocab;
} bs_selector;

// Host scratch bs_selector_walk needs, in floats.
static inline int64_t bs_selector_work_floats(const bs_selector *s) { return 2 * (int64_t)s->rank; }

// Walks n slots. cand, unary: [n][k]; z: [n][rank]; u: [n] uniforms (read only when temperature > 0);
// work: bs_selector_work_floats floats. Out: picks[n]; scores[n][k] and q[n][k] (either may be NULL; greedy q
// is one-hot at the pick). Candidate ids must be in [0, vocab) (the drafter's top-K guarantees it).
void bs_selector_walk(const bs_selector *s, int n, const int32_t *cand, const float *unary, const float *z, int32_t anchor,
                      float temperature, const double *u, float *work, int32_t *picks, float *scores, float *q);

// The unary logits as DFlash 2 defines them from the LM head's: x * mult, then cap * tanh(x / cap) when cap > 0.
static inline float bs_dflash2_unary(float x, float mult, float cap) {
    x *= mult;
    return cap > 0 ? cap * __builtin_tanhf(x / cap) : x;
}
