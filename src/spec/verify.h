// Where a drafted token is accepted or rejected. The target scored [anchor, d_1..d_n] in one
// forward: row k of its output predicts the token after position k, so d_{k+1} is judged by row k.
#pragma once
#include <stdint.h>

#define BS_MAX_VERIFY_ROWS 65   // a verify block: the anchor + at most BS_MAX_DRAFT (64) drafts

// Greedy: the longest prefix with d_k == argmax(row k-1), then the target's own token after it.
// target_argmax[0..n], drafts[0..n-1] (= d_1..d_n). Returns the accepted count a; *next = target_argmax[a].
int bs_accept_greedy(const int32_t *target_argmax, const int32_t *drafts, int n, int32_t *next);

// Speculative sampling (lossless for any q): accept d_k with probability min(1, p_{k-1}(d_k) / q_k(d_k));
// at the first rejection draw from norm(max(p_{k-1} - q_k, 0)) (p_{k-1} itself if that has no mass);
// if all n are accepted, draw a bonus token from p_n.
//   p: host [n+1][vocab] processed target distributions; q: host [n][vocab] processed draft
//   distributions, or NULL for point-mass drafts (q_k = onehot(d_k)); residual: scratch [vocab].
// Returns a; *next is the token emitted after the accepted drafts.
// The uniforms are u[0..n]: u[k] decides d_{k+1}, u[n] draws the emitted token (residual or bonus); the
// caller draws all n + 1 first. bs_accept_sampled_on runs it where p and q are (backend memory:
// CUDA tests and draws on the device; a host-memory backend calls bs_accept_sampled_u).
int bs_accept_sampled_u(const float *p, const float *q, const int32_t *drafts, int n, int vocab,
                        const double *u, float *residual, int32_t *next);
typedef struct bs_backend bs_backend;
int bs_accept_sampled_on(bs_backend *be, const float *p, const float *q, const int32_t *drafts, int n, int vocab,
                         const double *u, float *residual, int32_t *next);
// The same with the drafts in backend memory and the verdict written there (out_be[0] = a, out_be[1] =
// the emitted token), so that the caller downloads it with the drafts: no synchronisation of its own on
// backends with accept_sampled_to (CUDA); a host-memory backend runs bs_accept_sampled_u in place.
void bs_accept_sampled_to(bs_backend *be, const float *p, const float *q, const int32_t *drafts_be, int n, int vocab,
                          const double *u, float *residual, int32_t *out_be);

// One sequence's verdict from the target's logits of its verify rows [anchor, d_1..d_n] (backend memory,
// [n+1][vocab]), wherever those rows were computed (alone or in a batch). Greedy is bs_accept_greedy on
// the rows' argmax (a batch step takes every row's at once). Sampled: the rows become the processed
// distributions p (in place of the logits), then bs_accept_sampled_on with the draft distributions q
// (backend memory, or NULL) and u[0..n]. Returns a; *next is the token emitted after the accepted drafts.
struct bs_sampling;
int bs_verify_rows_sampled(bs_backend *be, const struct bs_sampling *smp, float *logits, const float *q, const int32_t *drafts, int n,
                           int vocab, const double *u, float *residual, int32_t *next);
