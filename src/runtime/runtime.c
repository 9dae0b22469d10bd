// The runtime's bookkeeping: buffers, joining and leaving. The step itself is src/runtime/step.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/runtime.h"

int bs_runtime_init(bs_runtime *rt, const bs_engine *e, bs_drafter *d, bs_err *err) {
    memset(rt, 0, sizeof *rt);
    rt->eng = e; rt->drafter = d;
    rt->prefill_rows = BS_PREFILL_CHUNK;
    rt->async_budget = -1;
    rt->block = 5;
    rt->t_scale = 1;
    rt->probe_every = BS_PROBE_FIRST;
    bs_backend *be = e->be;
    if (bs_qwen3_ws_init(&rt->ws, &e->cfg, be, err)) return -1;
    if (!(rt->dev_scratch = be->alloc(be, sizeof(int32_t) * (2 * BS_MAX_DRAFT + 2), err)) ||
        !(rt->residual = bs_malloc(sizeof(float) * e->cfg.vocab_size, err))) {
        bs_runtime_free(rt);
        return -1;
    }
    return 0;
}

static void free_rows(bs_runtime *rt) {
    bs_backend *be = rt->eng->be;
    if (rt->logits) be->free(be, rt->logits);
    if (rt->feat) be->free(be, rt->feat);
    free(rt->row_argmax);
    rt->logits = rt->feat = NULL;
    rt->row_argmax = NULL;
    rt->cap_logits = rt->cap_feat = 0;
}

void bs_runtime_free_costs(bs_runtime *rt) {
    free(rt->sps); free(rt->sps1); free(rt->sps_hull); free(rt->sps1_hull); free(rt->dps);
    rt->sps = rt->sps1 = rt->sps_hull = rt->sps1_hull = rt->dps = NULL;
    rt->n_sps = rt->n_sps1 = rt->n_dps = 0;
}

void bs_runtime_free(bs_runtime *rt) {
    if (!rt->eng) return;
    free_rows(rt);
    if (rt->dev_scratch) rt->eng->be->free(rt->eng->be, rt->dev_scratch);
    bs_qwen3_ws_free(&rt->ws);
    free(rt->residual); free(rt->seqs); free(rt->rows);
    free(rt->draft_seqs); free(rt->draft_ctx); free(rt->draft_anchor); free(rt->draft_max); free(rt->draft_smp); free(rt->draft_rng);
    free(rt->draft_out);
    bs_runtime_free_costs(rt);
    free(rt->sched_in); free(rt->sched_l); free(rt->sched_cand);
    memset(rt, 0, sizeof *rt);
}

static int grow_to(int cap, int rows) {
    if (!cap) cap = 16;
    while (cap < rows) cap *= 2;
    return cap;
}

// Room for logit_rows rows of logits and batch_rows rows of drafter features (contents are not kept: they
// live within a step).
int bs_runtime_reserve_rows(bs_runtime *rt, int logit_rows, int batch_rows, bs_err *err) {
    if (batch_rows < BS_PREFILL_CHUNK) batch_rows = BS_PREFILL_CHUNK;   // a lone prompt's chunk
    if (logit_rows <= rt->cap_logits && (!rt->drafter || batch_rows <= rt->cap_feat)) return 0;
    bs_backend *be = rt->eng->be;
    int cl = logit_rows > rt->cap_logits ? grow_to(rt->cap_logits, logit_rows) : rt->cap_logits;
    int cf = batch_rows > rt->cap_feat ? grow_to(rt->cap_feat, batch_rows) : rt->cap_feat;
    free_rows(rt);
    size_t V = rt->eng->cfg.vocab_size;
    if (!(rt->logits = be->alloc(be, sizeof(float) * cl * V, err))) return bs_wrap(err, "logits for a batch of %d rows", cl);
    if (!(rt->row_argmax = malloc(sizeof(int32_t) * cl))) { free_rows(rt); return bs_fail(err, "out of memory for the argmax of %d rows", cl); }
    if (rt->drafter) {
        size_t F = (size_t)rt->drafter->n_taps * rt->eng->cfg.hidden_size;
        if (!(rt->feat = be->alloc(be, sizeof(float) * cf * F, err))) { free_rows(rt); return bs_wrap(err, "drafter features for %d rows", cf); }
    }
    rt->cap_logits = cl; rt->cap_feat = cf;
    return 0;
}

static int grow(void **p, size_t elem, int cap) {
    void *np = realloc(*p, elem * cap);
    if (np) *p = np;
    return np != NULL;
}

int bs_runtime_add(bs_runtime *rt, bs_seq *s, bs_err *err) {
    if (s->eng != rt->eng || (s->drafter && s->drafter != rt->drafter))
        return bs_fail(err, "a sequence joined a runtime with another engine or drafter than it was made for");
    for (int i = 0; i < rt->n_seqs; i++) if (rt->seqs[i] == s) return bs_fail(err, "the sequence is already in the runtime");
    if (rt->n_seqs == rt->cap_seqs) {
        int cap = rt->cap_seqs ? 2 * rt->cap_seqs : 8;
        // Each array grows on its own; one that fails leaves the others larger, which is harmless.
        int ok = grow((void **)&rt->seqs, sizeof *rt->seqs, cap) && grow((void **)&rt->rows, sizeof *rt->rows, cap) &&
                 grow((void **)&rt->draft_seqs, sizeof *rt->draft_seqs, cap) && grow((void **)&rt->draft_ctx, sizeof *rt->draft_ctx, cap) &&
                 grow((void **)&rt->draft_anchor, sizeof *rt->draft_anchor, cap) && grow((void **)&rt->draft_max, sizeof *rt->draft_max, cap) &&
                 grow((void **)&rt->draft_smp, sizeof *rt->draft_smp, cap) && grow((void **)&rt->draft_rng, sizeof *rt->draft_rng, cap) &&
                 grow((void **)&rt->draft_out, sizeof *rt->draft_out, cap) && grow((void **)&rt->sched_in, sizeof *rt->sched_in, cap) &&
                 grow((void **)&rt->sched_l, sizeof *rt->sched_l, cap);
        if (!ok) return bs_fail(err, "out of memory");
        rt->cap_seqs = cap;
    }
    rt->seqs[rt->n_seqs++] = s;
    bs_err ignored;
    bs_runtime_admit(rt, &ignored);   // it starts now if the pool can promise its pages (a stall is the step's to report)
    return 0;
}

void bs_runtime_remove(bs_runtime *rt, bs_seq *s) {
    int j = 0, found = 0;
    for (int i = 0; i < rt->n_seqs; i++) {
        if (rt->seqs[i] != s) rt->seqs[j++] = rt->seqs[i];
        else found = 1;
    }
    rt->n_seqs = j;
    if (!found) return;
    if (bs_seq_done(s)) bs_seq_release(s);   // its pages may start a waiting sequence
    bs_err ignored;
    bs_runtime_admit(rt, &ignored);
}

int bs_runtime_admit(bs_runtime *rt, bs_err *err) {
    int started = 0, waiting = 0;
    for (int i = 0; i < rt->n_seqs; i++) started += rt->seqs[i]->phase != BS_SEQ_WAIT && !bs_seq_done(rt->seqs[i]);
    for (int i = 0; i < rt->n_seqs; i++) {
        bs_seq *s = rt->seqs[i];
        if (s->phase != BS_SEQ_WAIT) continue;
        int rc = bs_seq_admit(s, err);
        if (rc < 0) return -1;
        if (rc > 0) { waiting = 1; break; }   // in join order: it holds back the sequences after it
        started++;
    }
    // Waiting with nothing running: no page will come back (the pool is held by caches outside this runtime).
    if (waiting && !started) return bs_wrap(err, "a request cannot start and nothing running will free KV pages");
    return 0;
}

// A checked copy of a table (NULL for none); convex: replaced by the lower hull of its step times.
static int copy_table(const double *t, int n, const char *what, const char *unit, int convex, double **out, bs_err *err) {
    *out = NULL;
    if (!t || n < 1) return 0;
    for (int i = 0; i < n; i++)
        if (!(t[i] > 0) || !isfinite(t[i])) return bs_fail(err, "cost model: %s at %d %s is %g (must be > 0 and finite)", what, i + 1, unit, t[i]);
    if (!(*out = bs_malloc(sizeof(double) * n, err))) return -1;
    memcpy(*out, t, sizeof(double) * n);
    if (convex) bs_sched_convexify(*out, n);
    return 0;
}

int bs_runtime_set_schedule_costs(bs_runtime *rt, bs_sched_mode mode, const bs_cost_tables *c, bs_err *err) {
    static const bs_cost_tables none = { 0 };
    if (!c) c = &none;
    if (!bs_sched_name(mode)) return bs_fail(err, "unknown schedule %d", (int)mode);
    if (rt->n_seqs > 0) return bs_fail(err, "the schedule cannot change while %d request(s) are running", rt->n_seqs);
    if (bs_sched_needs_sps(mode) && (!c->sps || c->n_sps < 1))
        return bs_fail(err, "schedule %s needs the target's cost model (steps per second by rows: `blockspec profile`)", bs_sched_name(mode));
    if (c->block < 0 || c->block > 64) return bs_fail(err, "cost model: block of %d rows outside [1, 64]", c->block);
    double *sps = NULL, *sps1 = NULL, *hull = NULL, *hull1 = NULL, *dps = NULL;
    if (copy_table(c->sps, c->n_sps, "steps per second", "rows", 0, &sps, err) ||
        copy_table(c->sps1, c->n_sps1, "steps per second", "one-row sequences", 0, &sps1, err) ||
        copy_table(c->sps, c->n_sps, "steps per second", "rows", 1, &hull, err) ||
        copy_table(c->sps1, c->n_sps1, "steps per second", "one-row sequences", 1, &hull1, err) ||
        copy_table(c->dps, c->n_dps, "drafter passes per second", "sequences", 0, &dps, err)) {
        free(sps); free(sps1); free(hull); free(hull1);
        return -1;
    }
    bs_runtime_free_costs(rt);
    rt->sps = sps; rt->n_sps = sps ? c->n_sps : 0;
    rt->sps1 = sps1; rt->n_sps1 = sps1 ? c->n_sps1 : 0;
    rt->sps_hull = hull; rt->sps1_hull = hull1;
    rt->dps = dps; rt->n_dps = dps ? c->n_dps : 0;
    rt->block = c->block ? c->block : 5;
    rt->sched = mode;
    rt->async_budget = -1;
    // What earlier steps taught the scheduler belongs to the old model.
    rt->fit = (bs_step_fit){ 0 };
    rt->t_fixed = 0; rt->t_scale = 1; rt->t_ctx_row = 0;
    rt->skip_drafts = rt->plain_run = rt->n_surv = 0;
    rt->probe_every = BS_PROBE_FIRST;
    return 0;
}

int bs_runtime_set_schedule(bs_runtime *rt, bs_sched_mode mode, const double *sps, int n_sps, bs_err *err) {
    bs_cost_tables c = { .sps = sps, .n_sps = n_sps };
    return bs_runtime_set_schedule_costs(rt, mode, &c, err);
}
