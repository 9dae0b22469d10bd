// One step of the runtime: draft, one target forward over every verify row and the prompt chunks of the
// sequences still prefilling, then each sequence's verdict, rollback and emission (runtime.h). A lone
// sequence takes the single-request path (its whole prompt, then a one-sync verify).
#include <stdlib.h>
#include <string.h>
#include "runtime/runtime.h"
#include "spec/verify.h"
#include "util/timer.h"

static void record_round(bs_spec_stats *st, int proposed, int n, int a) {
    st->rounds++; st->proposed += proposed; st->drafted += n; st->accepted += a;
    for (int k = 0; k < n; k++) { st->pos_tried[k]++; if (k < a) st->pos_accepted[k]++; }
    if (st->n_lengths == st->cap_lengths) {
        int cap = st->cap_lengths ? st->cap_lengths * 2 : 64;
        int *nl = realloc(st->acceptance_lengths, sizeof(int) * cap);
        if (!nl) return;
        st->acceptance_lengths = nl; st->cap_lengths = cap;
    }
    st->acceptance_lengths[st->n_lengths++] = a + 1;
}

// The drafter a sequence drafts with this step: none under the "none" schedule (plain decoding, no
// drafter pass, no drafter context; the schedule cannot change while sequences run).
static bs_drafter *drafter_of(const bs_runtime *rt, const bs_seq *s) { return rt->sched == BS_SCHED_NONE ? NULL : s->drafter; }

// Whether the step's cut reads confidences (else the drafts may stay in backend memory, alone).
static int needs_conf(const bs_runtime *rt, const bs_seq *s) {
    return bs_sched_needs_sps(rt->sched) || (rt->sched == BS_SCHED_THRESHOLD && s->confidence_threshold > 0);
}

// A token from one row of logits (backend memory, processed in place): the argmax, or a draw at the
// sequence's next uniform.
// argmax: the row's argmax when the caller already has it (a batch step takes all rows' at once), or NULL.
static int32_t token_from_row(bs_backend *be, bs_seq *s, float *row, int V, const int32_t *argmax) {
    int32_t t;
    if (bs_sampling_greedy(&s->sampling)) {
        if (argmax) return *argmax;
        be->argmax(be, &t, row, 1, V);
        return t;
    }
    double u = bs_rng_uniform(s->rng);
    bs_sample_rows(be, &s->sampling, row, row, 1, V, &u, &t);
    return t;
}

// The prompt is in the KV cache (and the drafter context): the first token, from the last row's logits.
static void prompt_done(bs_seq *s, float *logits_row, const int32_t *argmax) {
    int32_t t = token_from_row(s->eng->be, s, logits_row, s->eng->cfg.vocab_size, argmax);
    s->st.n_prompt = s->n_prompt;
    s->st.t_prefill = bs_now() - s->t_start;
    s->phase = BS_SEQ_DECODE;
    bs_seq_emit(s, t);
}

// A lone sequence's whole prompt in chunks (each chunk's taps become drafter context at once).
static int prefill_alone(bs_runtime *rt, bs_seq *s, bs_err *err) {
    const bs_engine *e = rt->eng;
    bs_drafter *d = drafter_of(rt, s);
    if (!s->n_prefilled) s->t_start = bs_now();
    if (bs_runtime_reserve_rows(rt, 1, BS_PREFILL_CHUNK, err)) return -1;
    bs_fwd_out fo = { .logits = rt->logits };
    if (d) { fo.taps = d->taps; fo.n_taps = d->n_taps; fo.tap_out = rt->feat; }
    rt->last_rows = s->n_prompt - s->n_prefilled;
    for (int r = s->n_prefilled; r < s->n_prompt; r += BS_PREFILL_CHUNK) {
        bs_seq_rows chunk = { s->kv, s->prompt + r, s->n_prompt - r < BS_PREFILL_CHUNK ? s->n_prompt - r : BS_PREFILL_CHUNK };
        if (bs_qwen3_forward_batch(&e->target, &rt->ws, &chunk, 1, &fo, err)) return -1;
        if (d && d->add_context(d, &s->dctx, rt->feat, chunk.n, err)) return -1;
    }
    s->n_prefilled = s->n_prompt;
    prompt_done(s, rt->logits, NULL);
    return 0;
}

// This round's drafts: none for plain sequences or in a plain step; else up to bs_seq_round_drafts, then cut by the
// scheduler (cut_drafts). Alone (and without a cut that reads confidences) they may stay in backend memory
// for the verify to read; in a batch they come to the host (ids[1..n]) for the one forward, and a drafter
// with propose_batch drafts for every sequence in one pass.
static int plan_drafts(const bs_runtime *rt, bs_seq *s, bs_err *err) {
    memset(&s->draft, 0, sizeof s->draft);
    s->n_draft = s->n_drafted = s->ran_drafter = 0;
    s->ids[0] = s->anchor;
    if (!drafter_of(rt, s) || (rt->skip_drafts && s != rt->probe)) return 0;
    int max_n = bs_seq_round_drafts(s);
    // bs_request_tokens guarantees the anchor's row while tokens are still owed; running out here would be
    // a bug, and is an error rather than a silently shorter output.
    if (max_n < 0)
        return bs_fail(err, "internal error: the context (%d) is full after %d of %d tokens", s->kv->max_ctx, s->n_out, s->n_new);
    return max_n;
}

// The first n of the drafts are verified (n <= s->n_drafted: the scheduler's cut).
static void take_drafts(bs_seq *s, int n, int alone) {
    s->n_draft = n;
    if (!alone && n > 0) {
        bs_backend *be = s->eng->be;
        if (s->draft.dev_tokens) be->download(be, s->ids + 1, s->draft.dev_tokens, sizeof(int32_t) * n);
        else memcpy(s->ids + 1, s->draft.tokens, sizeof(int32_t) * n);
    }
}

// The prompt rows sequence s puts into this step's forward when `budget` of the step's prefill rows are
// still free: the rest of its prompt, cut to the budget (0 for a sequence not prefilling). Prefilling
// sequences take the budget in join order. forward_batch hands out the rows with this and the scheduler
// prices the step with bs_runtime_prompt_rows (the same walk), so the cost it plans is the forward that runs.
static int chunk_rows(const bs_seq *s, int budget) {
    if (s->phase != BS_SEQ_PREFILL) return 0;
    int left = s->n_prompt - s->n_prefilled;
    return left < budget ? left : budget;
}

// The prompt rows of the next batched forward and (*seqs) how many sequences they belong to.
static int prompt_rows(const bs_runtime *rt, int *seqs) {
    int budget = rt->prefill_rows, rows = 0;
    *seqs = 0;
    for (int i = 0; i < rt->n_seqs; i++) {
        int n = chunk_rows(rt->seqs[i], budget);
        budget -= n; rows += n; *seqs += n > 0;
    }
    return rows;
}

int bs_runtime_prompt_rows(const bs_runtime *rt) { int seqs; return prompt_rows(rt, &seqs); }

// ---- the cost model and the predictions the planning schedulers use (alg1, async) ----

// Seconds of the drafter pass over n sequences' blocks by the drafter table (0 without one: the pass then
// stays in the measured rest of a drafting step, t_other).
static double draft_time(const bs_runtime *rt, int n) { return rt->dps && n > 0 ? 1 / bs_sps_at(rt->dps, rt->n_dps, n) : 0; }

// The scheduler's arguments for a step: the tables, the prompt rows and sequences beside the R decoding
// ones, and the fixed part of a step whose drafter runs for `drafting` sequences.
static bs_sched_args sched_args(const bs_runtime *rt, int extra_rows, int extra_seqs, int drafting) {
    bs_sched_args a = { rt->sched, rt->sps, rt->n_sps, extra_rows, -1, rt->t_fixed + rt->t_scale * draft_time(rt, drafting) };
    a.sps1 = rt->sps1; a.n_sps1 = rt->n_sps1; a.block = rt->block; a.extra_seqs = extra_seqs; a.t_scale = rt->t_scale;
    a.sps_hull = rt->sps_hull; a.sps1_hull = rt->sps1_hull;
    return a;
}

static int reserve_cand(bs_runtime *rt, int m, bs_err *err) {
    if (m <= rt->cap_cand) return 0;
    bs_sched_cand *c = realloc(rt->sched_cand, sizeof *c * m);
    if (!c) return bs_fail(err, "out of memory");
    rt->sched_cand = c; rt->cap_cand = m;
    return 0;
}

// Sequence s's predicted confidences for up to n drafts in s->pred (c_j = S_j / S_{j-1} of its smoothed
// survivals S, or of every sequence's for one without rounds yet); returns how many (0: nothing to go on).
static int predict(const bs_runtime *rt, bs_seq *s, int n) {
    const float *sv = s->n_surv ? s->surv : rt->surv;
    int m = s->n_surv ? s->n_surv : rt->n_surv;
    if (m > n) m = n;
    float prev = 1;
    for (int j = 0; j < m; j++) {
        float c = prev > 0 ? sv[j] / prev : 0;
        s->pred[j] = c < 1 ? c : 1;   // smoothing over rounds of different lengths can leave S_j a hair above S_{j-1}
        prev = sv[j];
    }
    return m;
}

// This round's prefix survivals of s in x: with its confidences read, their running products (calibrated
// when the drafter has calibration.json); without them, whether drafts 1..j were all accepted, known for
// every j when the whole block was verified or a verified draft was rejected (the later ones then did not
// survive either). Returns how many leading positions are known.
static int round_survivals(const bs_seq *s, int a, float *x) {
    int n = s->n_drafted, l = s->n_draft;
    if (s->draft.has_conf) {
        float p = 1;
        for (int j = 0; j < n; j++) x[j] = p *= s->draft.conf[j];
        return n;
    }
    int known = a < l || l == n ? n : l;
    for (int j = 0; j < known; j++) x[j] = j < a;
    return known;
}

static void smooth(float *avg, int *n_avg, const float *x, int n, float alpha) {
    for (int j = 0; j < n; j++) avg[j] = j < *n_avg ? avg[j] + alpha * (x[j] - avg[j]) : x[j];
    if (n > *n_avg) *n_avg = n;
}

// After a speculative round with a accepted: s's smoothed survivals (starting from every sequence's) and
// every sequence's, slower (many sequences feed it each step).
static void learn_survivals(bs_runtime *rt, bs_seq *s, int a) {
    float x[BS_MAX_DRAFT];
    int n = round_survivals(s, a, x);
    s->conf_head |= s->draft.has_conf;
    if (!s->n_surv && rt->n_surv) { memcpy(s->surv, rt->surv, sizeof s->surv); s->n_surv = rt->n_surv; }
    smooth(s->surv, &s->n_surv, x, n, 0.3f);
    smooth(rt->surv, &rt->n_surv, x, n, 0.05f);
}

// The probe among the first D of rt->draft_seqs: the one with the fewest context rows waiting (they go to
// its drafter before it drafts: a sequence that joined since the last drafting step has none), the
// sequences in turn among equals.
static bs_seq *cheapest_probe(bs_runtime *rt, int D) {
    int start = (int)(rt->probe_next++ % (unsigned)D), best = start;
    for (int k = 1; k < D; k++) {
        int i = (start + k) % D;
        if (rt->draft_seqs[i]->n_pending < rt->draft_seqs[best]->n_pending) best = i;
    }
    return rt->draft_seqs[best];
}

// alg1 / async: does this step run the drafter? Decided before anything of the step is drawn, from
// earlier rounds only: the plan over each drafting sequence's predicted confidences, the drafter pass
// priced by the drafter table, against plain decoding of the same sequences (a forward of one row each,
// priced by the one-row-sequence table), both through the step-time model fitted to earlier steps. A step that does not
// draft is a round of plain decoding for every sequence (exact as always; it decides nothing about any
// draft), but for at most one, the probe, which drafts: plain steps teach the predictions nothing, so after
// plain steps in a row one sequence's round refreshes them (cheapest_probe); and when some
// sequence has nothing to predict from yet (nor the runtime, from any sequence), one of them drafts
// alone rather than all at once. A lone sequence with nothing to go on drafts.
static void decide_drafting(bs_runtime *rt) {
    rt->skip_drafts = 0;
    rt->probe = NULL;
    if (!bs_sched_needs_sps(rt->sched) || !rt->n_sps) return;
    int R = 0, D = 0, m = 0, extra_seqs, pending = 0;
    bs_seq *unknown = NULL;
    for (int i = 0; i < rt->n_seqs; i++) {
        bs_seq *s = rt->seqs[i];
        if (s->phase != BS_SEQ_DECODE) continue;
        bs_sched_in *in = &rt->sched_in[R++];
        *in = (bs_sched_in){ 0 };
        int n = drafter_of(rt, s) ? bs_seq_round_drafts(s) : 0;
        if (n <= 0) continue;
        rt->draft_seqs[D++] = s;   // scratch until the drafter call: the sequences that could draft
        pending += s->n_pending;
        int k = predict(rt, s, n);
        if (k == 0 && !unknown) unknown = s;
        *in = (bs_sched_in){ k, s->pred, 0, !s->conf_head };
        m += k;
    }
    bs_err oom;
    if (D <= 1 && unknown) return;
    if (unknown) { rt->skip_drafts = 1; rt->probe = unknown; return; }
    if (!D || reserve_cand(rt, m, &oom)) return;
    int extra_rows = prompt_rows(rt, &extra_seqs);
    bs_sched_args a = sched_args(rt, extra_rows, extra_seqs, D);
    a.t_fixed += rt->t_ctx_row * pending;   // drafting now first adds their plain steps' context rows
    if (bs_sched_worth_drafting(&a, rt->sched_in, R, rt->t_fixed, rt->sched_cand)) {
        rt->plain_run = 0;
        rt->probe_every = BS_PROBE_FIRST;
        return;
    }
    rt->skip_drafts = 1;
    if (++rt->plain_run >= rt->probe_every) {
        rt->plain_run = 0;
        rt->probe_every = rt->probe_every * 2 < BS_PROBE_MAX ? rt->probe_every * 2 : BS_PROBE_MAX;
        rt->probe = cheapest_probe(rt, D);
    }
}

// alg1, a lone sequence: whether the plan over its predicted confidences verifies every draft it will
// propose. Then the round is fixed's own (the drafts stay in backend memory, no confidences are read, one
// download per round): Algorithm 1 could only have cut rows the cost model says are worth their time on
// average, and reading the confidences costs a host synchronisation per round on a device. Decided from
// earlier rounds only, so it never depends on this round's drafts.
static int lone_verifies_all(bs_runtime *rt, bs_seq *s, int n) {
    if (rt->sched != BS_SCHED_ALG1 || !rt->n_sps || predict(rt, s, n) < n) return 0;
    bs_sched_in in = { n, s->pred, 0, !s->conf_head };
    bs_sched_cand cand[BS_MAX_DRAFT];
    bs_sched_args a = sched_args(rt, 0, 0, 1);
    int keep;
    bs_sched_plan(&a, &in, 1, cand, &keep);
    return in.whole || keep == n;
}

// The scheduler over this step's decoding sequences (their drafts in s->draft, s->n_drafted of them; 0 for
// plain ones): each one's verified count, then the async budget for the next step.
static int cut_drafts(bs_runtime *rt, bs_seq **seqs, int R, int extra_rows, int extra_seqs, int alone, bs_err *err) {
    int m = 0;
    for (int i = 0; i < R; i++) {
        bs_seq *s = seqs[i];
        rt->sched_in[i] = (bs_sched_in){ s->n_drafted, s->draft.has_conf ? s->draft.conf : NULL, s->confidence_threshold };
        m += s->n_drafted;
    }
    if (reserve_cand(rt, m, err)) return -1;
    bs_sched_args a = sched_args(rt, extra_rows, extra_seqs, rt->n_drafting);
    a.all_greedy = 1;
    for (int i = 0; i < R; i++) a.all_greedy &= bs_sampling_greedy(&seqs[i]->sampling);
    // async: the budget the previous step planned, scaled to this step's number of sequences (both known
    // before any of this step's drafts was drawn).
    if (rt->sched == BS_SCHED_ASYNC && rt->async_budget >= 0) a.budget = (int)((double)rt->async_budget * R / rt->async_R + 0.5);
    bs_schedule(&a, rt->sched_in, R, rt->sched_l, rt->sched_cand);
    for (int i = 0; i < R; i++) take_drafts(seqs[i], rt->sched_l[i], alone);
    // (A probe's step plans no budget: one sequence's drafts say little about a step where all draft.)
    if (rt->sched == BS_SCHED_ASYNC && !rt->probe) { rt->async_budget = bs_sched_plan_budget(&a, rt->sched_in, R, rt->sched_cand); rt->async_R = R; }
    return 0;
}

// ---- the drafter context of plain steps ----
// A plain step's row of a sequence with a drafter still has to reach its drafter context before it drafts
// again. Added one row per step, it would cost the drafter's context projections a pass over their weights
// per sequence and step (on the built-in model's CPU step, more than a third of a plain step's forward);
// so the rows wait (up to BS_PENDING_ROWS) and go in together before the sequence next drafts, and not at
// all when it finishes first. The drafter computes the same context either way (row-invariant kernels).

// The waiting rows go in; their time per row (flushes of 4 rows or more) prices the flushes a decision to
// draft would cause (decide_drafting), and stays out of the step-time model's observations.
static int flush_context(bs_runtime *rt, bs_seq *s, bs_err *err) {
    if (!s->n_pending) return 0;
    double t0 = bs_now();
    int rc = s->drafter->add_context(s->drafter, &s->dctx, s->pending, s->n_pending, err);
    double t = bs_now() - t0;
    s->st.t_draft += t;
    rt->t_flush_step += t;
    if (s->n_pending >= 4) rt->t_ctx_row = rt->t_ctx_row > 0 ? 0.8 * rt->t_ctx_row + 0.2 * t / s->n_pending : t / s->n_pending;
    s->n_pending = 0;
    return rc;
}

static int defer_context(bs_runtime *rt, bs_seq *s, const float *feat, int n, bs_err *err) {
    bs_backend *be = s->eng->be;
    size_t F = (size_t)s->drafter->n_taps * s->eng->cfg.hidden_size;
    if (s->n_pending + n > BS_PENDING_ROWS && flush_context(rt, s, err)) return -1;
    if (n > BS_PENDING_ROWS) return s->drafter->add_context(s->drafter, &s->dctx, feat, n, err);
    if (!s->pending && !(s->pending = be->alloc(be, sizeof(float) * F * BS_PENDING_ROWS, err))) return -1;
    be->copy(be, s->pending + (size_t)s->n_pending * F, feat, sizeof(float) * F * n);
    s->n_pending += n;
    return 0;
}

// A lone sequence's drafts. Where the round verifies every draft whatever the confidences say (fixed, no
// threshold, or alg1 when its plan keeps the whole block), nothing is cut and they stay in backend memory
// for the verify; else they come to the host with their confidences (one transfer) for the cut.
static int draft_alone(bs_runtime *rt, bs_seq *s, bs_err *err) {
    int max_n = plan_drafts(rt, s, err);
    if (max_n <= 0) return max_n;   // an error, or nothing to draft (a plain sequence or step, no room)
    bs_drafter *d = s->drafter;
    if (flush_context(rt, s, err)) return -1;
    int whole = !needs_conf(rt, s) || lone_verifies_all(rt, s, max_n);
    // The round observer reports confidences: with one, they are read (a trace recorded under fixed on a
    // device would otherwise lack them for the rounds a request ran alone).
    int on_device = whole && !rt->on_round && d->propose_on_device;
    double t0 = bs_now();
    int rc = on_device ? d->propose_on_device(d, &s->dctx, s->anchor, max_n, &s->sampling, s->rng, &s->draft, err)
                       : d->propose(d, &s->dctx, s->anchor, max_n, &s->sampling, s->rng, &s->draft, err);
    if (rc) return -1;
    s->n_drafted = s->draft.n < max_n ? s->draft.n : max_n;
    s->st.t_draft += bs_now() - t0;
    s->ran_drafter = 1;
    rt->n_drafting = 1;
    if (whole) { take_drafts(s, s->n_drafted, 1); return 0; }
    return cut_drafts(rt, &s, 1, 0, 0, 1, err);
}

// Every decoding sequence's drafts, in one drafter pass where the drafter has propose_batch.
static int draft_batch(bs_runtime *rt, bs_err *err) {
    int n = 0, R = 0;
    for (int i = 0; i < rt->n_seqs; i++) {
        bs_seq *s = rt->seqs[i];
        if (s->phase != BS_SEQ_DECODE) continue;
        int max_n = plan_drafts(rt, s, err);
        if (max_n < 0 || (max_n > 0 && flush_context(rt, s, err))) return -1;
        if (max_n == 0) continue;
        rt->draft_seqs[n] = s; rt->draft_ctx[n] = &s->dctx; rt->draft_anchor[n] = s->anchor; rt->draft_max[n] = max_n;
        rt->draft_smp[n] = &s->sampling; rt->draft_rng[n] = s->rng;
        n++;
    }
    if (rt->skip_drafts && !rt->probe) return 0;   // a plain step: every sequence verifies its anchor alone
    double t0 = bs_now();
    bs_drafter *d = rt->drafter;
    rt->n_drafting = n;
    if (n == 0) {}
    else if (d->propose_batch) {
        if (d->propose_batch(d, n, rt->draft_ctx, rt->draft_anchor, rt->draft_max, rt->draft_smp, rt->draft_rng, rt->draft_out, err)) return -1;
        for (int i = 0; i < n; i++) rt->draft_seqs[i]->draft = rt->draft_out[i];
    } else {
        for (int i = 0; i < n; i++) {
            bs_seq *s = rt->draft_seqs[i];
            if (d->propose(d, &s->dctx, s->anchor, rt->draft_max[i], &s->sampling, s->rng, &s->draft, err)) return -1;
        }
    }
    // The shared pass counts in full for every sequence in it.
    double t = bs_now() - t0;
    for (int i = 0; i < n; i++) {
        bs_seq *s = rt->draft_seqs[i];
        s->n_drafted = s->draft.n < rt->draft_max[i] ? s->draft.n : rt->draft_max[i];
        s->st.t_draft += t;
        s->ran_drafter = 1;
    }
    // Every decoding sequence takes part in the cut (plain ones as one row each): the forward's cost is
    // all of them. draft_seqs is reused as the list (the drafter call is over).
    for (int i = 0; i < rt->n_seqs; i++) if (rt->seqs[i]->phase == BS_SEQ_DECODE) rt->draft_seqs[R++] = rt->seqs[i];
    int extra_seqs, extra_rows = prompt_rows(rt, &extra_seqs);
    return R ? cut_drafts(rt, rt->draft_seqs, R, extra_rows, extra_seqs, 0, err) : 0;
}

// After the verdict: keep the anchor's and the accepted drafts' K/V (the next token has none yet), feed
// their taps (feat rows) to the drafter, emit.
static int finish_round(bs_runtime *rt, bs_seq *s, int a, int32_t next, const float *feat, bs_err *err) {
    int n = s->n_draft, s0 = s->kv->n_past - (n + 1);
    bs_drafter *d = drafter_of(rt, s);
    if (bs_kv_rollback(s->kv, s0 + a + 1, err)) return -1;
    if (d) {
        double t0 = bs_now();
        int now = s->ran_drafter || !rt->skip_drafts || rt->add_context_now;
        if (now ? d->add_context(d, &s->dctx, feat, a + 1, err) : defer_context(rt, s, feat, a + 1, err)) return -1;
        s->st.t_draft += bs_now() - t0;
        if (s->ran_drafter) {   // a speculative round (in a plain step the drafter only took the anchor's row)
            record_round(&s->st, s->n_drafted, n, a);
            if (rt->on_round) rt->on_round(rt->on_round_ctx, s, s->n_drafted, n, a);
            learn_survivals(rt, s, a);
        }
    }
    for (int k = 0; k < a; k++) bs_seq_emit(s, s->ids[1 + k]);
    bs_seq_emit(s, next);
    return 0;
}

static void draw_uniforms(bs_seq *s, double *u) { for (int k = 0; k <= s->n_draft; k++) u[k] = bs_rng_uniform(s->rng); }

// A lone sequence: its verify as a single request always ran it (drafts read in backend memory, one
// download per round; a recordable forward shape).
static int verify_alone(bs_runtime *rt, bs_seq *s, bs_err *err) {
    const bs_engine *e = rt->eng;
    bs_drafter *d = drafter_of(rt, s);
    int n = s->n_draft, a = 0;
    int32_t next;
    double t0 = bs_now();
    if (bs_runtime_reserve_rows(rt, n + 1, n + 1, err)) return -1;
    rt->last_rows += n + 1;
    rt->last_seqs = 1;
    if (!d) {
        bs_seq_rows one = { s->kv, &s->anchor, 1 };
        bs_fwd_out fo = { .logits = rt->logits };
        if (bs_qwen3_forward_batch(&e->target, &rt->ws, &one, 1, &fo, err)) return -1;
        next = token_from_row(e->be, s, rt->logits, e->cfg.vocab_size, NULL);
    } else {
        bs_fwd_out vo = { .logits = rt->logits, .logits_all = 1, .taps = d->taps, .n_taps = d->n_taps, .tap_out = rt->feat };
        if (bs_sampling_greedy(&s->sampling)) {
            int32_t targ[BS_MAX_VERIFY_ROWS];
            if (bs_verify_greedy(&e->target, &rt->ws, s->kv, s->anchor, &s->draft, n, &vo, rt->dev_scratch, s->ids, targ, err)) return -1;
            a = bs_accept_greedy(targ, s->ids + 1, n, &next);
        } else {
            double u[BS_MAX_VERIFY_ROWS];
            draw_uniforms(s, u);
            a = bs_verify_sampled(&e->target, &rt->ws, s->kv, s->anchor, &s->draft, n, &vo, &s->sampling, u, rt->residual, rt->dev_scratch,
                                  s->ids, &next, err);
            if (a < 0) return -1;
        }
    }
    double t = bs_now() - t0;
    s->st.t_target += t;
    rt->t_fwd_step += t;
    return finish_round(rt, s, a, next, rt->feat, err);
}

// Several sequences: one ragged forward over all their rows (verify blocks, and prompt chunks within this
// step's prefill budget), then each one's verdict from its rows, or its prompt's progress.
static int forward_batch(bs_runtime *rt, bs_err *err) {
    const bs_engine *e = rt->eng;
    bs_backend *be = e->be;
    const int V = e->cfg.vocab_size;
    int n_rows = 0, n_logits = 0, n_batch = 0, any_drafter = 0, budget = rt->prefill_rows;
    double t0 = bs_now();
    for (int i = 0; i < rt->n_seqs; i++) {
        bs_seq *s = rt->seqs[i];
        int rows;
        if (s->phase == BS_SEQ_PREFILL) {
            rows = chunk_rows(s, budget);
            s->n_chunk = rows;
            if (rows == 0) continue;   // waits for a later step's budget
            if (!s->n_prefilled) s->t_start = t0;
            budget -= rows;
            rt->last_prompt_rows += rows;
            rt->rows[n_batch++] = (bs_seq_rows){ s->kv, s->prompt + s->n_prefilled, rows, 1 };
        } else if (s->phase == BS_SEQ_DECODE) {
            rows = s->n_draft + 1;
            rt->rows[n_batch++] = (bs_seq_rows){ s->kv, s->ids, rows, 0 };
        } else continue;
        s->row0 = n_rows; s->lrow = n_logits;
        n_rows += rows;
        n_logits += s->phase == BS_SEQ_PREFILL ? 1 : rows;
        any_drafter |= drafter_of(rt, s) != NULL;
    }
    if (n_batch == 0) return 0;
    rt->last_rows = n_rows;
    rt->last_seqs = n_batch;
    if (bs_runtime_reserve_rows(rt, n_logits, n_rows, err)) return -1;
    bs_fwd_out fo = { .logits = rt->logits, .logits_all = 1 };
    if (any_drafter) { fo.taps = rt->drafter->taps; fo.n_taps = rt->drafter->n_taps; fo.tap_out = rt->feat; }
    if (bs_qwen3_forward_batch(&e->target, &rt->ws, rt->rows, n_batch, &fo, err)) return -1;
    // The greedy sequences' targets: one argmax over all logit rows (one launch and one download on a
    // device) instead of a synchronising call per sequence; rows of sampled sequences cost a little extra.
    int any_greedy = 0;
    for (int i = 0; i < rt->n_seqs; i++) any_greedy |= bs_sampling_greedy(&rt->seqs[i]->sampling);
    if (any_greedy) be->argmax(be, rt->row_argmax, rt->logits, n_logits, V);
    double t_forward = bs_now() - t0;
    rt->t_fwd_step += t_forward;
    size_t F = any_drafter ? (size_t)rt->drafter->n_taps * e->cfg.hidden_size : 0;
    for (int i = 0; i < rt->n_seqs; i++) {
        bs_seq *s = rt->seqs[i];
        float *rows = rt->logits + (size_t)s->lrow * V, *feat = any_drafter ? rt->feat + (size_t)s->row0 * F : NULL;
        if (s->phase == BS_SEQ_PREFILL) {
            if (!s->n_chunk) continue;
            bs_drafter *d = drafter_of(rt, s);
            if (d && d->add_context(d, &s->dctx, feat, s->n_chunk, err)) return -1;
            s->n_prefilled += s->n_chunk;
            if (s->n_prefilled == s->n_prompt) prompt_done(s, rows, any_greedy ? rt->row_argmax + s->lrow : NULL);
            continue;
        }
        if (s->phase != BS_SEQ_DECODE) continue;
        int a = 0;
        int32_t next;
        t0 = bs_now();
        if (!drafter_of(rt, s)) next = token_from_row(be, s, rows, V, rt->row_argmax + s->lrow);
        else if (bs_sampling_greedy(&s->sampling)) a = bs_accept_greedy(rt->row_argmax + s->lrow, s->ids + 1, s->n_draft, &next);
        else {
            double u[BS_MAX_VERIFY_ROWS];
            draw_uniforms(s, u);
            a = bs_verify_rows_sampled(be, &s->sampling, rows, s->draft.q, s->ids + 1, s->n_draft, V, u, rt->residual, &next);
        }
        // The shared forward counts in full for every sequence in it: each waited for all of it.
        s->st.t_target += t_forward + (bs_now() - t0);
        if (finish_round(rt, s, a, next, feat, err)) return -1;
    }
    return 0;
}

// Finished and cancelled sequences leave, giving their KV pages back at once (their tokens stay readable).
static void drop_finished(bs_runtime *rt) {
    int j = 0;
    for (int i = 0; i < rt->n_seqs; i++) {
        if (!bs_seq_done(rt->seqs[i])) rt->seqs[j++] = rt->seqs[i];
        else bs_seq_release(rt->seqs[i]);
    }
    rt->n_seqs = j;
}

// The step-time model (schedule.h, bs_step_fit): every step of decoding sequences (drafting, probing or
// plain) against the tables' time for it, its forward's rows over its sequences and its drafter pass.
// Steps that also prefill are left out: their prompt rows are no part of a decoding step's cost. Only past
// steps feed it, so a step's cut never depends on its own draws.
static void observe_step_cost(bs_runtime *rt, double t_step, int decoding, int prefilled) {
    if (!decoding || prefilled || rt->t_fwd_step <= 0 || !rt->n_sps) return;
    bs_sched_args a = sched_args(rt, 0, 0, 0);
    bs_step_fit_add(&rt->fit, bs_sched_forward_time(&a, rt->last_rows, rt->last_seqs) + draft_time(rt, rt->n_drafting), t_step - rt->t_flush_step);
    bs_step_fit_get(&rt->fit, &rt->t_fixed, &rt->t_scale);
}

int bs_runtime_step(bs_runtime *rt, bs_err *err) {
    drop_finished(rt);
    if (bs_runtime_admit(rt, err)) return -1;
    rt->last_rows = 0;
    rt->last_prompt_rows = 0;
    rt->t_fwd_step = 0;
    rt->n_drafting = 0;
    rt->t_flush_step = 0;
    double t0 = bs_now();
    decide_drafting(rt);
    int with_drafter = 0, prefilled = 0, n_started = 0;   // some sequence decodes with a drafter; some prefills
    bs_seq *one = NULL;
    for (int i = 0; i < rt->n_seqs; i++) {
        with_drafter |= rt->seqs[i]->phase == BS_SEQ_DECODE && drafter_of(rt, rt->seqs[i]) != NULL;
        prefilled |= rt->seqs[i]->phase == BS_SEQ_PREFILL;
        if (rt->seqs[i]->phase != BS_SEQ_WAIT) { n_started++; one = rt->seqs[i]; }
    }
    if (n_started == 1) {   // alone (others may wait for KV pages): the single-request path
        bs_seq *s = one;
        if (s->phase == BS_SEQ_PREFILL && prefill_alone(rt, s, err)) return -1;
        if (s->phase == BS_SEQ_DECODE && (draft_alone(rt, s, err) || verify_alone(rt, s, err))) return -1;
    } else if (n_started > 1) {
        // The decoding sequences' drafts were planned from their anchors; sequences still prefilling sit
        // this round out (drafting needs their whole prompt).
        if (draft_batch(rt, err) || forward_batch(rt, err)) return -1;
    }
    // The ops after the forwards (acceptance, sampling) report their failures here (backend.h).
    if (bs_backend_check(rt->eng->be, err)) return -1;
    observe_step_cost(rt, bs_now() - t0, with_drafter, prefilled);
    drop_finished(rt);
    if (bs_runtime_admit(rt, err)) return -1;
    return rt->n_seqs;
}
