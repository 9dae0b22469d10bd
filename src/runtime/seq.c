#include <stdlib.h>
#include <string.h>
#include "runtime/seq.h"
#include "util/timer.h"

// Drafts per round for a speculative request: draft_max if given, else the backend's default (CPUs verify
// short blocks: backend.h), never more than the drafter's block.
static int drafts_per_round(const bs_engine *e, const bs_drafter *d, int draft_max) {
    int B = d->max_drafts;
    if (draft_max > 0) return draft_max < B ? draft_max : B;
    if (e->be->default_draft_max > 0 && B > e->be->default_draft_max) return e->be->default_draft_max;
    return B;
}

// Everything but the storage: settings, the request check, the drafter context.
static int seq_setup(bs_seq *s, const bs_engine *e, bs_drafter *d, const int32_t *prompt, int n_prompt, const bs_seq_params *p,
                     bs_err *err) {
    s->eng = e;
    s->sampling = p->sampling;
    s->stop_at_eos = p->stop_at_eos;
    s->confidence_threshold = p->confidence_threshold;
    s->cb = p->cb; s->cb_ctx = p->cb_ctx;
    s->fill = p->n_new < 0;
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= e->cfg.vocab_size)
            return bs_fail(err, "token id %d at index %d is outside the vocabulary [0, %d)", prompt[i], i, e->cfg.vocab_size);
    if ((s->n_new = bs_request_tokens(s->kv, n_prompt, p->n_new, err)) < 0) return -1;
    if (!(s->prompt = bs_malloc(sizeof(int32_t) * n_prompt, err))) return -1;
    memcpy(s->prompt, prompt, sizeof(int32_t) * n_prompt);
    s->n_prompt = n_prompt;
    s->phase = BS_SEQ_WAIT;
    if (d && p->use_drafter) {
        s->drafter = d;
        s->draft_max = drafts_per_round(e, d, p->draft_max);
        if (s->draft_max < 1 || s->draft_max > BS_MAX_DRAFT) return bs_fail(err, "draft length %d outside [1, %d]", s->draft_max, BS_MAX_DRAFT);
        if (bs_drafter_ctx_init(d, &s->dctx, s->kv->max_ctx, err)) { s->drafter = NULL; return -1; }
    }
    // A request its pool could never hold is refused now rather than waiting for ever.
    const bs_kv_pool *pool = s->kv->pages.pool;
    int pages = bs_kv_pool_pages_for(pool, bs_seq_kv_rows(s));
    if (pages > pool->n_pages)
        return bs_fail(err, "the request needs %d KV rows (context %d%s) = %d pages of %d rows, but the KV pool has %d pages (%ld rows) in "
                       "all: give it more rows (kv_rows, --kv-rows) or ask for a shorter context", bs_seq_kv_rows(s), s->kv->max_ctx,
                       s->drafter ? " + a drafter block" : "", pages, pool->page_rows, pool->n_pages, (long)pool->n_pages * pool->page_rows);
    if (s->n_new == 0) { s->phase = BS_SEQ_DONE; s->st.finish = BS_FINISH_LENGTH; }
    return 0;
}

int bs_seq_init(bs_seq *s, const bs_engine *e, bs_drafter *d, const int32_t *prompt, int n_prompt, const bs_seq_params *p,
                bs_err *err) {
    memset(s, 0, sizeof *s);
    if (n_prompt <= 0) return bs_fail(err, "the prompt is empty");
    int max_ctx = p->max_ctx > 0 ? p->max_ctx : p->n_new < 0 ? e->cfg.max_position : bs_request_ctx(&e->cfg, n_prompt, p->n_new);
    if (bs_kv_init(&s->kv_own, e->kv_pool, max_ctx, err)) return -1;
    s->kv = &s->kv_own;
    bs_rng_seed(&s->rng_own, p->sampling.seed);
    s->rng = &s->rng_own;
    if (seq_setup(s, e, d, prompt, n_prompt, p, err) ||
        !(s->out = s->out_own = bs_malloc(sizeof(int32_t) * (s->n_new > 0 ? s->n_new : 1), err))) {
        bs_seq_free(s);
        return -1;
    }
    return 0;
}

int bs_seq_init_on(bs_seq *s, const bs_engine *e, bs_drafter *d, const int32_t *prompt, int n_prompt, const bs_seq_params *p,
                   bs_kv_cache *kv, bs_rng *rng, int32_t *out, bs_err *err) {
    memset(s, 0, sizeof *s);
    if (kv->n_past != 0) return bs_fail(err, "a new sequence needs an empty KV cache (it holds %d rows)", kv->n_past);
    s->kv = kv; s->rng = rng; s->out = out;
    if (seq_setup(s, e, d, prompt, n_prompt, p, err)) { bs_seq_free(s); return -1; }
    return 0;
}

int bs_seq_kv_rows(const bs_seq *s) { return s->kv->max_ctx + (s->drafter ? s->drafter->max_drafts + 1 : 0); }

int bs_seq_admit(bs_seq *s, bs_err *err) {
    if (s->phase != BS_SEQ_WAIT) return 0;
    int rc = bs_kv_reserve(s->kv, bs_seq_kv_rows(s) - s->kv->max_ctx, err);
    if (rc == 0) s->phase = BS_SEQ_PREFILL;
    return rc;
}

void bs_seq_release(bs_seq *s) {
    bs_drafter_ctx_free(s->drafter, &s->dctx);
    if (s->kv == &s->kv_own && s->kv_own.pages.pool) bs_kv_free(&s->kv_own);
}

void bs_seq_free(bs_seq *s) {
    if (s->pending) s->eng->be->free(s->eng->be, s->pending);
    bs_drafter_ctx_free(s->drafter, &s->dctx);
    if (s->kv == &s->kv_own) bs_kv_free(&s->kv_own);
    free(s->out_own);
    free(s->prompt);
    bs_spec_stats_free(&s->st);
    memset(s, 0, sizeof *s);
}

static void finish(bs_seq *s, bs_finish why) {
    s->phase = BS_SEQ_DONE;
    s->st.finish = why;
    s->st.n_generated = s->n_out;
    s->st.t_total = bs_now() - s->t_start;
}

// In bs_generate_plain's order: the callback first, then EOS, then the budget.
void bs_seq_emit(bs_seq *s, int32_t t) {
    if (s->phase == BS_SEQ_DONE) return;
    s->out[s->n_out++] = t;
    s->anchor = t;
    if (s->cb && s->cb(s->cb_ctx, t)) finish(s, BS_FINISH_STOP);
    else if (s->stop_at_eos && bs_is_eos(s->eng, t)) finish(s, BS_FINISH_EOS);
    else if (s->n_out >= s->n_new) finish(s, s->fill ? BS_FINISH_CONTEXT : BS_FINISH_LENGTH);
}

void bs_seq_cancel(bs_seq *s) { if (s->phase != BS_SEQ_DONE) finish(s, BS_FINISH_CANCELLED); }

int bs_seq_round_drafts(const bs_seq *s) {
    int room = s->kv->max_ctx - s->kv->n_past - 1;
    return s->draft_max < room ? s->draft_max : room;
}
