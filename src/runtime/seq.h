// A sequence: one request's whole per-request state. The loaded target and drafter are shared and
// immutable; everything a request changes lives here: its KV cache, its drafter context, its RNG, its
// sampling settings and stopping rules, its output and its statistics.
#pragma once
#include "engine/engine.h"
#include "spec/drafter.h"
#include "spec/spec_loop.h"

// What a request asks for.
typedef struct bs_seq_params {
    int n_new;                     // tokens to generate; < 0: as many as the context holds
    bs_sampling sampling;          // its own temperature / top-k / top-p and seed
    int stop_at_eos;
    int use_drafter;               // 1: speculative decoding when the runtime has a drafter
    int draft_max;                 // most drafts verified per round; 0: the backend's default_draft_max
                                   // (backend.h), else the drafter's block
    float confidence_threshold;    // > 0: verify only the leading drafts with c_k >= threshold
    int max_ctx;                   // its context (KV rows it may hold); 0: sized for this request (bs_request_ctx)
    bs_token_cb cb;                // called for every emitted token; non-zero stops the request
    void *cb_ctx;
} bs_seq_params;

// WAIT: made, not yet promised its KV pages (the runtime starts it when the pool can: bs_seq_admit).
typedef enum { BS_SEQ_WAIT, BS_SEQ_PREFILL, BS_SEQ_DECODE, BS_SEQ_DONE } bs_seq_phase;

typedef struct bs_seq {
    bs_seq_phase phase;
    int32_t *prompt; int n_prompt;             // a copy
    int n_new, fill;                           // tokens owed (bs_request_tokens) and whether "as many as fit"
    bs_sampling sampling;
    int stop_at_eos, draft_max;                // draft_max: 0 = plain decoding (no drafter, or not asked for)
    float confidence_threshold;
    bs_kv_cache *kv;                           // its KV cache: kv_own (pages in the engine's pool), or a session's
                                               // (bs_seq_init_on)
    bs_rng *rng;                               // its RNG: rng_own, or a session's
    bs_drafter_ctx dctx;                       // its drafter context (speculative sequences)
    int32_t *out; int n_out;                   // emitted tokens: out_own, or the caller's buffer
    bs_token_cb cb; void *cb_ctx;
    bs_spec_stats st;                          // rounds, acceptance, times; st.finish says why it stopped
    int32_t anchor;                            // the last emitted token: the next round starts from it
    double t_start;
    // One step's working state (src/runtime/step.c).
    bs_draft draft;
    int n_draft, row0, lrow;                   // drafts verified this step; its first row and logits row in the batch
    int n_drafted;                             // drafts proposed this step (before the scheduler's cut)
    int ran_drafter;                           // the drafter ran for it this step (a speculative round)
    // Its rounds so far, for the schedulers that plan (alg1 / async; step.c): prefix survivals smoothed
    // over rounds (calibrated confidences where they were read, else which drafts were accepted), whether
    // its drafter reports confidences, and a step's predicted confidences.
    float surv[BS_MAX_DRAFT], pred[BS_MAX_DRAFT];
    int n_surv, conf_head;
    // Drafter context rows of plain steps not yet added (step.c, defer_context): backend [BS_PENDING_ROWS]
    // rows of the drafter's features, allocated on first use.
    float *pending;
    int n_pending;
    int n_prefilled, n_chunk;                  // prompt rows already in the KV cache; those in this step's batch
    int32_t ids[BS_MAX_DRAFT + 1];             // [anchor, d_1..d_n]
    // Owned storage (unused where borrowed).
    bs_kv_cache kv_own;
    bs_rng rng_own;
    int32_t *out_own;
    const bs_engine *eng;
    bs_drafter *drafter;                       // NULL: plain
} bs_seq;

#define BS_PENDING_ROWS 64

// A sequence with its own KV cache, RNG and output buffer. The request is checked here (prompt and
// output must fit the context: bs_request_tokens' rule and message; its context must fit the KV pool:
// bs_seq_kv_rows). d: the runtime's drafter or NULL. It starts waiting (BS_SEQ_WAIT): no KV page is taken yet.
int bs_seq_init(bs_seq *s, const bs_engine *e, bs_drafter *d, const int32_t *prompt, int n_prompt, const bs_seq_params *p,
                bs_err *err);
// The same on borrowed storage (a session's KV cache and RNG, the caller's output buffer, which must hold
// the request's tokens): the single-request entry points (bs_generate_plain / bs_generate_spec) use it.
// The cache must be empty and the drafter context is fresh.
int bs_seq_init_on(bs_seq *s, const bs_engine *e, bs_drafter *d, const int32_t *prompt, int n_prompt, const bs_seq_params *p,
                   bs_kv_cache *kv, bs_rng *rng, int32_t *out, bs_err *err);
void bs_seq_free(bs_seq *s);

// The KV rows the pool promises a sequence before it starts: its context, plus a drafter's block when it
// drafts (the drafter's context pool mirrors the target's, so this promise covers it too: docs/kv-paging.md).
int bs_seq_kv_rows(const bs_seq *s);
// Starts a waiting sequence once the pool promises it bs_seq_kv_rows (then it never runs out of pages):
// 0 started (or not waiting), 1 not now (the pool is promised to others; err says so), -1 error.
int bs_seq_admit(bs_seq *s, bs_err *err);
// Gives back what a finished sequence holds in the pools (its own KV cache's pages, its drafter context);
// its tokens and statistics stay readable.
void bs_seq_release(bs_seq *s);

// Emits one token (output, callback) and ends the sequence when the callback, an EOS or the budget says so.
void bs_seq_emit(bs_seq *s, int32_t t);
// Ends the sequence now (finish "cancelled"); the runtime drops it before its next step.
void bs_seq_cancel(bs_seq *s);
static inline int bs_seq_done(const bs_seq *s) { return s->phase == BS_SEQ_DONE; }
// Drafts to verify this round: min(draft_max, the rows left after the anchor's); 0 for plain sequences.
int bs_seq_round_drafts(const bs_seq *s);
