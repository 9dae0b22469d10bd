// The speculative loop: prefill -> anchor -> draft -> (confidence cut) -> verify [anchor, drafts] in one
// target forward -> accept -> roll the target's KV back -> feed accepted rows' taps to the drafter.
// Its output equals plain greedy decoding (greedy) or is distributed as the target (sampling).
#pragma once
#include "engine/engine.h"
#include "spec/drafter.h"

typedef struct bs_spec_opts {
    int draft_max;              // 0: the backend's default_draft_max (backend.h; CPU 4 or 7), else the drafter's block
    float confidence_threshold; // > 0: verify only the leading drafts with c_k >= threshold (needs a confidence head)
    int stop_at_eos;
} bs_spec_opts;

typedef struct bs_spec_stats {
    int n_prompt, n_generated, rounds;
    long drafted, accepted;                 // over all rounds (drafts verified / accepted)
    long pos_tried[BS_MAX_DRAFT];           // rounds that verified a draft at position k+1
    long pos_accepted[BS_MAX_DRAFT];        // ... and accepted it
    double t_prefill, t_target, t_draft, t_total;   // seconds: t_target = verify forwards + acceptance,
                                                    // t_draft = proposals + context growth, the rest bookkeeping
    int *acceptance_lengths;                // per round: accepted + 1 (the emitted bonus/correction), malloc'd
    int n_lengths, cap_lengths;
    bs_finish finish;                       // why generation stopped (engine.h), as plain decoding reports it
} bs_spec_stats;

void bs_spec_stats_free(bs_spec_stats *st);
// tau = mean tokens per round (accepted + 1).
double bs_spec_tau(const bs_spec_stats *st);

// A greedy round's verify: the target scores [anchor, d_1..d_n] (vo: logits of all rows + the drafter's
// taps) and picks its argmax per row. With the drafts still in backend memory (dr->dev_tokens,
// propose_on_device) the forward embeds them from there, the picks land beside a copy of them in
// scratch (backend memory, >= 2 n + 1 int32) and one download brings both back: the round's only host
// synchronisation. Fills ids[0..n] (anchor, drafts) and targ[0..n] (the target's picks).
int bs_verify_greedy(bs_qwen3 *tm, bs_kv_cache *kv, int32_t anchor, const bs_draft *dr, int n, const bs_fwd_out *vo,
                     int32_t *scratch, int32_t *ids, int32_t *targ, bs_err *err);

// A sampled round's verify: the target scores [anchor, d_1..d_n] (vo), its rows become the processed
// distributions p (in place of the logits), and the acceptance (u[0..n], bs_accept_sampled_u) runs where
// p and q are. With the drafts in backend memory the forward reads them there and one download brings
// the drafts and the verdict back. residual: host scratch [vocab] (host-memory backends). Fills ids[0..n];
// returns the accepted count (or -1, err), *next the emitted token.
int bs_verify_sampled(bs_qwen3 *tm, bs_kv_cache *kv, int32_t anchor, const bs_draft *dr, int n, const bs_fwd_out *vo,
                      const bs_sampling *smp, const double *u, float *residual, int32_t *scratch, int32_t *ids, int32_t *next,
                      bs_err *err);

// Speculative decoding of n_new tokens (n_new < 0: as many as the context holds) under the same
// context rule and stopping reasons as bs_generate_plain (bs_request_tokens): a request plain decoding
// refuses is refused with the same message, and one it runs yields as many tokens, never fewer.
int bs_generate_spec(bs_session *s, bs_drafter *d, const int32_t *prompt, int n_prompt, int n_new,
                     const bs_spec_opts *opts, int32_t *out, int *n_out, bs_token_cb cb, void *cb_ctx,
                     bs_spec_stats *st, bs_err *err);
