// DFlash 2's two training ops (docs/dflash2.md, docs/training.md "DFlash 2"), CPU fp32, with the conventions of
// train_ops.h (backwards ADD into their gradient outputs; NULL skips a gradient):
//   - the grouped dynamic depthwise convolution around every sublayer, the engine's `dyn_conv` (backend.h) with
//     its backward;
//   - the candidate selector's training term: a K-way cross-entropy over a slot's candidates, scored as the
//     engine's walk scores them (src/model/selector.c), teacher forced.
#pragma once
#include <stdint.h>

// ---- dynamic convolution --------------------------------------------------------------------------------------
// Rows come in blocks of `block` (row t is position t % block of its block). For every row t and channel c:
//   y[t][c] (+)= sum_{tau < taps, tau <= t % block} (base[tau][c] + dyn[t * dyn_stride + tau * G + c / group]) * x[t - tau][c]
// with G = dim / group: the coefficient is the current row's, and no tap reaches across a block's first row.
// acc 1 adds into y. The arithmetic is the engine's (fmaf, taps in order), so a trained drafter's forward and
// the engine's agree bit for bit on the same weights.
void bs_op_dyn_conv_fwd(float *y, const float *x, int n, int dim, int block, int taps, const float *base, const float *dyn,
                        int dyn_stride, int group, int acc);
// dx [n][dim], dbase [taps][dim], ddyn (rows of dyn_stride, the same columns as dyn) added into; any may be NULL.
void bs_op_dyn_conv_bwd(float *dx, float *dbase, float *ddyn, const float *dy, const float *x, const float *base, const float *dyn,
                        int n, int dim, int block, int taps, int dyn_stride, int group);

// ---- candidate selector ---------------------------------------------------------------------------------------
// The K candidates of one slot for training: the K largest unary logits of the row (value descending, then id
// ascending: the engine's topk), with the label put in the last place when it is not among them (so the loss
// always has the right answer to score; the engine's walk never sees it). Returns the label's index in cand.
int bs_selector_candidates(int32_t *cand, float *unary, const float *logits, int V, int K, int32_t label);
// One slot's term: s_k = unary[k] + sum_r A[prev][r] z[r] B[cand[k]][r]; returns the CE -log softmax(s)[gold].
// Gradients (scaled by `scale`) go to z (dz [R]), the predecessor's row dA_prev [R] and the candidates' rows of
// dB ([V][R], rows cand[k]); the unary logits are held fixed (the selector is trained as a re-ranker on top of
// the backbone: see docs/training.md). s: scratch [K]. Any gradient may be NULL.
float bs_op_selector_ce(float *dz, float *dA_prev, float *dB, const float *z, const float *A_prev, const float *B,
                        const int32_t *cand, const float *unary, int K, int R, int gold, float scale, float *s);
