// Speculative decoding of one request: prefill -> anchor -> draft -> (confidence cut) -> verify [anchor,
// drafts] in one target forward -> accept -> roll the target's KV back -> feed accepted rows' taps to the
// drafter: one runtime step (src/runtime/step.c) per round.
// Its output equals plain greedy decoding (greedy) or is distributed as the target (sampling).
#pragma once
#include "engine/engine.h"
#include "spec/drafter.h"

// A runtime scheduler for bs_generate_spec: mode is a bs_sched_mode (runtime/schedule.h); sps[0..n_sps) its
// cost model (alg1, async), and optionally the rest of it (runtime/schedule.h, bs_cost_tables: the verify
// table's block, the one-row-sequence table, the drafter table; NULL / 0: none).
typedef struct bs_spec_sched {
    int mode; const double *sps; int n_sps;
    int block; const double *sps1; int n_sps1; const double *dps; int n_dps;
} bs_spec_sched;

typedef struct bs_spec_opts {
    int draft_max;              // 0: the backend's default_draft_max (backend.h; CPU 4 or 7), else the drafter's block
    float confidence_threshold; // > 0: verify only the leading drafts with c_k >= threshold (needs a confidence head)
    int stop_at_eos;
    // NULL: the default (the confidence_threshold cut); else the runtime's scheduler (runtime/schedule.h)
    // and, for alg1 / async, its cost model.
    const bs_spec_sched *sched;
} bs_spec_opts;

typedef struct bs_spec_stats {
    int n_prompt, n_generated, rounds;
    long drafted, accepted;                 // over all rounds (drafts verified / accepted)
    long proposed;                          // drafts proposed, before the scheduler's cut
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

// Speculative decoding of n_new tokens (n_new < 0: as many as the context holds; a runtime of one
// sequence, src/runtime/single.c) under the same
// context rule and stopping reasons as bs_generate_plain (bs_request_tokens): a request plain decoding
// refuses is refused with the same message, and one it runs yields as many tokens, never fewer.
int bs_generate_spec(bs_session *s, bs_drafter *d, const int32_t *prompt, int n_prompt, int n_new,
                     const bs_spec_opts *opts, int32_t *out, int *n_out, bs_token_cb cb, void *cb_ctx,
                     bs_spec_stats *st, bs_err *err);
