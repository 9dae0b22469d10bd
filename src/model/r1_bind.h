// Binding a drafter trained on the unrotated target to an R1-folded one (docs/rotation.md; docs/dflash2.md 3.3).
// The folded target stores every residual-stream state as h' = h . R1, R1 = diag(s) . M, and its LM head as
// W' = W . diag(gamma_f) . R1 (gamma_f: the final norm's gain before the fold). The drafter keeps computing in
// the basis it was trained in; only the three seams where it touches the target's basis change:
//   1. taps -> fc        fc's column block k (the tap of target layer k) folded once at bind time:
//                        F_k <- F_k . R1, or F_k . diag(gamma_f) . R1 for the tap after the final norm
//                        (the folded target's final norm has gain 1: that tap is (t / gamma_f) . R1);
//   2. embedding rows    e = e' . R1^T = (e' . M^T) * s, on the rows it embeds (anchor and mask rows alike);
//   3. -> the LM head    u = ((h / gamma_f) * s) . M, so that u . W'^T = h . W^T (a head that is the target's
//                        embedding, a tied drafter's, takes u = (h * s) . M: the embedding carries no gamma).
// 2 and 3 are the backend op hadamard_rows, so they run wherever the drafter does and join recorded passes;
// everything else the drafter computes (its layers, norms, a DFlash 2 convolution, a Markov or selector head
// reading its own hidden h) stays in its own basis.
#pragma once
#include "backend/backend.h"
#include "io/r1_basis.h"

typedef struct bs_r1_bind {
    int n;                   // hidden size; 0: nothing bound (an unrotated target)
    float *signs;            // backend [n]: s (post of seam 2)
    float *head_pre;         // backend [n]: s / gamma_f (pre of seam 3 into the target's LM head)
    bs_backend *be;
} bs_r1_bind;

// Smallest |gamma_f[c]| relative to the largest the head seam divides by: below it the drafter's hidden channel c
// would be amplified past what the folded head's stored precision carries, so binding is refused.
#define BS_R1_MIN_GAIN_RATIO 1e-3f

// The bind for `r1` (NULL or r1->n == 0: *b zeroed, nothing to cross). needs_gain: the drafter reads the
// target's LM head (seam 3 divides by gamma_f), which is then checked against BS_R1_MIN_GAIN_RATIO. what: the
// drafter, for messages.
int bs_r1_bind_init(bs_r1_bind *b, const bs_r1_basis *r1, int needs_gain, bs_backend *be, const char *what, bs_err *err);
void bs_r1_bind_free(bs_r1_bind *b);

// Seam 1: fc [H][n_taps * H] (host view, dense or MLX affine) folded for taps of hidden_states indices taps[k]
// (final_tap: the index of the tap after the final norm, the target's layer count). *out: the folded matrix in
// the same format (dense: the source dtype; affine: requantised with the same bits and group), its bytes in
// *owned (the caller frees them after the backend is done with the view).
int bs_r1_fold_fc(const bs_r1_basis *r1, const bs_mat *fc, const int *taps, int n_taps, int final_tap, bs_mat *out, void **owned,
                  bs_err *err);

// Seam 2, in place on x[n][H]: rows of the target's embedding back into the drafter's basis.
static inline void bs_r1_unrotate_rows(const bs_r1_bind *b, float *x, int n) {
    b->be->hadamard_rows(b->be, x, x, n, b->n, NULL, b->signs, 1);
}
// Seam 3: u[n][H] = the drafter's normed hidden rows h[n][H] in the basis of the target's LM head (pre: head_pre
// for the target's LM head, signs for its embedding). u may be h.
static inline void bs_r1_to_head(const bs_r1_bind *b, const float *pre, float *u, const float *h, int n) {
    b->be->hadamard_rows(b->be, u, h, n, b->n, pre, NULL, 0);
}
