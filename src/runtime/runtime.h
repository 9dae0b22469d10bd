// The runtime: many sequences (src/runtime/seq.h) sharing one loaded target and drafter, decoded
// together. One step advances every active sequence by one round:
//   1. every decoding speculative sequence drafts its k_r tokens, each from its own context, in one
//      drafter pass over all their blocks (propose_batch; else one call per sequence);
//   2. ONE target forward over all their rows, ragged (bs_qwen3_forward_batch): a decoding sequence
//      contributes [anchor, d_1..d_k_r], a sequence still prefilling a chunk of its prompt (at most
//      prefill_rows prompt rows per step over all of them), each at its own positions against its own KV;
//   3. per sequence: acceptance (src/spec/verify.c), KV rollback, drafter context growth (the taps),
//      emission; a sequence whose prompt is now done emits its first token.
// A lone sequence takes the single-request path instead: its whole prompt, then rounds whose drafts stay
// in backend memory until one download per round (verify_one.c).
// Sequences join (bs_runtime_add) and leave (done or cancelled) between steps. A sequence starts only when
// the engine's KV pool can promise it every page it may need (bs_seq_admit): until then it waits, in join
// order, and a request never runs out of KV memory mid-generation (docs/kv-paging.md). A sequence that
// leaves gives its pages back at once. A request's tokens are the
// same whatever else is in the batch: every row is computed as it would be alone (row-invariant kernels)
// and every random draw comes from the request's own RNG in the order it would draw alone.
#pragma once
#include "runtime/seq.h"
#include "runtime/schedule.h"

#define BS_PROBE_FIRST 16         // alg1 / async: after this many plain steps in a row one drafts anyway (a probe),
#define BS_PROBE_MAX 256          // the gap doubling after each probe up to this, back to the first after a drafting decision
#define BS_PREFILL_CHUNK 256     // prompt rows per prefill forward: each chunk's taps become drafter context at once

typedef struct bs_runtime {
    const bs_engine *eng;
    bs_drafter *drafter;         // shared by the speculative sequences, or NULL
    bs_qwen3_ws ws;              // the target's forward scratch
    bs_seq **seqs;               // active sequences, in join order (not owned)
    int n_seqs, cap_seqs;
    int prefill_rows;            // prompt rows per step over all prefilling sequences (BS_PREFILL_CHUNK; tests
                                 // set it small to cut prompts into many chunks)
    int add_context_now;         // 1: a plain step's drafter context rows are added at once, not deferred
                                 // (step.c, defer_context; tests compare the two)
    // Batch buffers (backend memory), grown to the largest step seen.
    float *logits;               // [cap_logits][V]
    int32_t *row_argmax;         // [cap_logits], host: a batch step's greedy targets, one argmax for all rows
    float *feat;                 // [cap_feat][n_taps * H] drafter context features, a row per batch row
    int cap_logits, cap_feat;
    double t_fwd_step;           // this step's target forward seconds
    bs_step_fit fit;             // earlier steps' times against the tables' (alg1 / async; schedule.h): a step
    double t_fixed, t_scale;     // takes t_fixed + t_scale x the tables' time (its forward, its drafter pass)
    int last_rows;               // target rows in the latest step's forward(s) (for servers' metrics)
    int last_prompt_rows;        // of them, prompt rows of the batched forward (what bs_runtime_prompt_rows planned)
    int last_seqs;               // sequences in the latest step's forward (the cost model's per-sequence term)
    int32_t *dev_scratch;        // [2 * BS_MAX_DRAFT + 2]: a lone sequence's verify (one download per round)
    float *residual;             // host [V]: the host acceptance's residual row
    bs_seq_rows *rows;           // host [cap_seqs]: the batch descriptor of step 3
    // host [cap_seqs]: the drafter call of step 2 (propose_batch's arguments)
    bs_seq **draft_seqs;
    bs_drafter_ctx **draft_ctx;
    int32_t *draft_anchor;
    int *draft_max;
    const bs_sampling **draft_smp;
    bs_rng **draft_rng;
    bs_draft *draft_out;
    // Which drafts each step verifies (schedule.h): the mode, its cost model (owned copy), the async budget
    // planned by the previous step (-1: none yet) and the step's scheduler arrays (host [cap_seqs], and
    // [cap_cand] candidates).
    bs_sched_mode sched;
    double *sps; int n_sps;      // the verify table as measured, rows in sequences of `block` rows
    int block;
    double *sps1; int n_sps1;    // one-row sequences as measured, or NULL
    double *sps_hull, *sps1_hull; // their lower convex hulls (Algorithm 1's early break), or NULL
    double *dps; int n_dps;      // drafter passes per second by sequences, or NULL
    // Whether a step drafts at all (alg1 / async; step.c, decide_drafting): predictions from earlier rounds.
    int skip_drafts;             // this step decodes plainly: no drafter pass, every sequence verifies its anchor
    struct bs_seq *probe;        // ... except this one, which drafts (a probe; NULL: none)
    int plain_run, probe_every;  // consecutive plain steps; the probe_every-th has a probe (its round refreshes
                                 // the predictions a plain step cannot)
    unsigned probe_next;         // probes go round the drafting sequences
    int n_drafting;              // sequences the drafter ran for in this step
    double t_ctx_row;            // seconds per drafter context row added in a flush of waiting rows (smoothed)
    double t_flush_step;         // this step's seconds of such flushes
    float surv[BS_MAX_DRAFT];    // every sequence's prefix survivals, smoothed: a new sequence's prediction
    int n_surv;
    int async_budget, async_R;
    bs_sched_in *sched_in;
    int *sched_l;
    bs_sched_cand *sched_cand; int cap_cand;
    // Optional: called after each speculative round's verdict with what was drafted (s->draft: tokens,
    // confidences), how many were drafted (before the scheduler's cut), verified and accepted.
    void (*on_round)(void *ctx, const bs_seq *s, int n_drafted, int n_verified, int n_accepted);
    void *on_round_ctx;
} bs_runtime;

int bs_runtime_init(bs_runtime *rt, const bs_engine *e, bs_drafter *d, bs_err *err);
// Frees the runtime's own buffers; the sequences stay the caller's.
void bs_runtime_free(bs_runtime *rt);
// s joins before the next step (it must have been made with this runtime's engine and drafter); it starts
// at once when the KV pool can promise its pages, else it waits (bs_runtime_admit).
int bs_runtime_add(bs_runtime *rt, bs_seq *s, bs_err *err);
// s leaves (finished, cancelled, or simply dropped); a no-op if it is not in the runtime. A finished one
// gives back its KV pages (bs_seq_release).
void bs_runtime_remove(bs_runtime *rt, bs_seq *s);
// Starts waiting sequences, in join order, while the KV pool can promise them their pages (every step
// does this first and last). -1 (err) when some wait while none runs: nothing in the runtime will give
// pages back, so they would wait for ever.
int bs_runtime_admit(bs_runtime *rt, bs_err *err);
// One step over the active sequences; finished and cancelled ones leave. Returns how many are still
// active or waiting, or -1 (err): an error inside a step leaves the sequences in it unusable.
int bs_runtime_step(bs_runtime *rt, bs_err *err);

// Frees the schedule's cost tables (and their hulls) a runtime holds; the runtime keeps working without them.
void bs_runtime_free_costs(bs_runtime *rt);

// The scheduler of later steps: mode, and for alg1 / async the cost model sps[0..n_sps) (forwards per
// second with 1..n_sps rows; copied). Refused while sequences are active (a sequence that started under
// "none" has no drafter context to draft from).
int bs_runtime_set_schedule(bs_runtime *rt, bs_sched_mode mode, const double *sps, int n_sps, bs_err *err);
// The same with the whole cost model (tables copied; c NULL: none).
int bs_runtime_set_schedule_costs(bs_runtime *rt, bs_sched_mode mode, const bs_cost_tables *c, bs_err *err);

// The prompt rows the next step's batched forward will take (prefill_rows shared by the prefilling
// sequences in join order): the scheduler prices the step with it before the forward runs.
int bs_runtime_prompt_rows(const bs_runtime *rt);

// Inside the runtime (step.c): room for logit_rows rows of logits and batch_rows rows of features.
int bs_runtime_reserve_rows(bs_runtime *rt, int logit_rows, int batch_rows, bs_err *err);

// A lone sequence's verify forward and verdict, with the drafts possibly still in backend memory
// (propose_on_device): the forward reads them there and one download per round brings the drafts and
// the verdict back. ws: the forward's scratch (NULL: the cache's own). Greedy fills ids[0..n] and targ[0..n] (the target's
// picks); sampled fills ids[0..n] and returns the accepted count (or -1), *next the emitted token.
int bs_verify_greedy(const bs_qwen3 *tm, bs_qwen3_ws *ws, bs_kv_cache *kv, int32_t anchor, const bs_draft *dr, int n,
                     const bs_fwd_out *vo, int32_t *scratch, int32_t *ids, int32_t *targ, bs_err *err);
int bs_verify_sampled(const bs_qwen3 *tm, bs_qwen3_ws *ws, bs_kv_cache *kv, int32_t anchor, const bs_draft *dr, int n,
                      const bs_fwd_out *vo, const bs_sampling *smp, const double *u, float *residual, int32_t *scratch, int32_t *ids,
                      int32_t *next, bs_err *err);
