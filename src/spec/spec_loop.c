#include <stdlib.h>
#include <string.h>
#include "spec/spec_loop.h"
#include "spec/verify.h"
#include "util/timer.h"

#define PREFILL_CHUNK 256

void bs_spec_stats_free(bs_spec_stats *st) { free(st->acceptance_lengths); memset(st, 0, sizeof *st); }

double bs_spec_tau(const bs_spec_stats *st) {
    return st->rounds ? (double)(st->accepted + st->rounds) / st->rounds : 0;
}

static void record_round(bs_spec_stats *st, int n, int a) {
    st->rounds++; st->drafted += n; st->accepted += a;
    for (int k = 0; k < n; k++) { st->pos_tried[k]++; if (k < a) st->pos_accepted[k]++; }
    if (st->n_lengths == st->cap_lengths) {
        int cap = st->cap_lengths ? st->cap_lengths * 2 : 64;
        int *nl = realloc(st->acceptance_lengths, sizeof(int) * cap);
        if (!nl) return;
        st->acceptance_lengths = nl; st->cap_lengths = cap;
    }
    st->acceptance_lengths[st->n_lengths++] = a + 1;
}

typedef struct emitter {
    int32_t *out; int *n_out; int n_new, stop_at_eos, fill, done;
    bs_token_cb cb; void *ctx; const bs_engine *eng;
    bs_finish *finish;
} emitter;

// Emits one token; sets done (and why, in bs_generate_plain's order) when the callback, an EOS or the
// budget ends generation.
static void emit(emitter *e, int32_t t) {
    if (e->done) return;
    e->out[(*e->n_out)++] = t;
    bs_finish f = BS_FINISH_NONE;
    if (e->cb && e->cb(e->ctx, t)) f = BS_FINISH_STOP;
    else if (e->stop_at_eos && bs_is_eos(e->eng, t)) f = BS_FINISH_EOS;
    else if (*e->n_out >= e->n_new) f = e->fill ? BS_FINISH_CONTEXT : BS_FINISH_LENGTH;
    if (f != BS_FINISH_NONE) { e->done = 1; *e->finish = f; }
}

// The verify's host ids after the anchor when it cannot read the drafts on the device: dr->tokens, or a
// download of dr->dev_tokens.
static void drafts_to_host(bs_backend *be, const bs_draft *dr, int n, int32_t *ids) {
    if (n > 0 && dr->dev_tokens) be->download(be, ids + 1, dr->dev_tokens, sizeof(int32_t) * n);
    else memcpy(ids + 1, dr->tokens, sizeof(int32_t) * n);
}
// ids[1..n] <- the drafts that came back with a round's one download; they were read on the device
// unchecked, so an id outside the vocabulary is an error now.
static int take_drafts(const int32_t *got, int n, int V, int32_t *ids, bs_err *err) {
    memcpy(ids + 1, got, sizeof(int32_t) * n);
    for (int k = 1; k <= n; k++)
        if (ids[k] < 0 || ids[k] >= V) return bs_fail(err, "drafter: drafted token %d at position %d is outside the vocabulary [0, %d)", ids[k], k, V);
    return 0;
}

int bs_verify_greedy(bs_qwen3 *tm, bs_kv_cache *kv, int32_t anchor, const bs_draft *dr, int n, const bs_fwd_out *vo,
                     int32_t *scratch, int32_t *ids, int32_t *targ, bs_err *err) {
    bs_backend *be = tm->be;
    const int V = tm->cfg.vocab_size;
    ids[0] = anchor;
    if (n > 0 && dr->dev_tokens && be->argmax_to && be->embed_from) {
        if (bs_qwen3_forward_dev(tm, kv, anchor, dr->dev_tokens, n + 1, vo, err)) return -1;
        int32_t got[2 * BS_MAX_DRAFT + 1];
        be->argmax_to(be, scratch, vo->logits, n + 1, V, NULL);
        be->copy(be, scratch + n + 1, dr->dev_tokens, sizeof(int32_t) * n);
        be->download(be, got, scratch, sizeof(int32_t) * (2 * n + 1));
        memcpy(targ, got, sizeof(int32_t) * (n + 1));
        return take_drafts(got + n + 1, n, V, ids, err);
    }
    drafts_to_host(be, dr, n, ids);
    if (bs_qwen3_forward(tm, kv, ids, n + 1, vo, err)) return -1;
    be->argmax(be, targ, vo->logits, n + 1, V);
    return 0;
}

int bs_verify_sampled(bs_qwen3 *tm, bs_kv_cache *kv, int32_t anchor, const bs_draft *dr, int n, const bs_fwd_out *vo,
                      const bs_sampling *smp, const double *u, float *residual, int32_t *scratch, int32_t *ids, int32_t *next,
                      bs_err *err) {
    bs_backend *be = tm->be;
    const int V = tm->cfg.vocab_size;
    ids[0] = anchor;
    if (n > 0 && dr->dev_tokens && be->embed_from) {
        if (bs_qwen3_forward_dev(tm, kv, anchor, dr->dev_tokens, n + 1, vo, err)) return -1;
        bs_sample_rows(be, smp, vo->logits, vo->logits, n + 1, V, NULL, NULL);
        bs_accept_sampled_to(be, vo->logits, dr->q, dr->dev_tokens, n, V, u, residual, scratch);
        be->copy(be, scratch + 2, dr->dev_tokens, sizeof(int32_t) * n);
        int32_t got[BS_MAX_DRAFT + 2];
        be->download(be, got, scratch, sizeof(int32_t) * (n + 2));
        if (take_drafts(got + 2, n, V, ids, err)) return -1;
        *next = got[1];
        return got[0];
    }
    drafts_to_host(be, dr, n, ids);
    if (bs_qwen3_forward(tm, kv, ids, n + 1, vo, err)) return -1;
    // p rows in place of the logits, then the acceptance where p and q are.
    bs_sample_rows(be, smp, vo->logits, vo->logits, n + 1, V, NULL, NULL);
    return bs_accept_sampled_on(be, vo->logits, dr->q, ids + 1, n, V, u, residual, next);
}

int bs_generate_spec(bs_session *s, bs_drafter *d, const int32_t *prompt, int n_prompt, int n_new,
                     const bs_spec_opts *opts, int32_t *out, int *n_out, bs_token_cb cb, void *cb_ctx,
                     bs_spec_stats *st, bs_err *err) {
    bs_engine *eng = s->eng;
    bs_backend *be = eng->be;
    bs_qwen3 *tm = &eng->target;
    int V = eng->cfg.vocab_size, H = eng->cfg.hidden_size, F = d->n_taps * H;
    int B = d->max_drafts;
    if (opts && opts->draft_max > 0) { if (opts->draft_max < B) B = opts->draft_max; }
    else if (be->default_draft_max > 0 && B > be->default_draft_max) B = be->default_draft_max;   // backend.h
    float thr = opts ? opts->confidence_threshold : 0;
    int greedy = bs_sampling_greedy(&s->sampling);
    *n_out = 0;
    memset(st, 0, sizeof *st);
    if (s->kv.n_past != 0 || d->n_ctx != 0) return bs_fail(err, "speculative generation needs a fresh session and drafter");
    // Plain decoding's rule, so that both refuse (or run) the same requests: after it, a round always
    // has room for the anchor (checked again in the loop).
    const int fill = n_new < 0;
    if ((n_new = bs_request_tokens(&s->kv, n_prompt, n_new, err)) < 0) return -1;
    if (n_new == 0) { st->finish = BS_FINISH_LENGTH; return 0; }
    if (B < 1 || B > BS_MAX_DRAFT) return bs_fail(err, "draft length %d outside [1, %d]", B, BS_MAX_DRAFT);
    int feat_rows = n_prompt < PREFILL_CHUNK ? n_prompt : PREFILL_CHUNK;
    if (feat_rows < B + 1) feat_rows = B + 1;
    float *logits = be->alloc(be, sizeof(float) * (size_t)(B + 1) * V, err);
    float *feat = logits ? be->alloc(be, sizeof(float) * (size_t)feat_rows * F, err) : NULL;
    int32_t *scratch = feat ? be->alloc(be, sizeof(int32_t) * (2 * BS_MAX_DRAFT + 2), err) : NULL;
    int rc = -1;
    if (!logits || !feat || !scratch) goto out;

    double t_start = bs_now(), t0;
    // Prefill in chunks: each chunk's taps become drafter context right away.
    bs_fwd_out fo = { .logits = logits, .taps = d->taps, .n_taps = d->n_taps, .tap_out = feat };
    for (int r = 0; r < n_prompt; r += PREFILL_CHUNK) {
        int c = n_prompt - r < PREFILL_CHUNK ? n_prompt - r : PREFILL_CHUNK;
        if (bs_qwen3_forward(tm, &s->kv, prompt + r, c, &fo, err) || d->add_context(d, feat, c, err)) goto out;
    }
    int32_t anchor;
    if (greedy) be->argmax(be, &anchor, logits, 1, V);
    else { double u = bs_rng_uniform(&s->rng); bs_sample_rows(be, &s->sampling, logits, logits, 1, V, &u, &anchor); }
    st->n_prompt = n_prompt;
    st->t_prefill = bs_now() - t_start;
    emitter em = { out, n_out, n_new, opts ? opts->stop_at_eos : 1, fill, 0, cb, cb_ctx, eng, &st->finish };
    emit(&em, anchor);

    bs_draft dr;
    int32_t ids[BS_MAX_DRAFT + 1], targ[BS_MAX_DRAFT + 1];
    while (!em.done) {
        // Rows left after the anchor's. bs_request_tokens guarantees the anchor's row while tokens are
        // still owed (n_past = prompt + emitted - 1); running out here would be a bug, and is an error
        // rather than a silently shorter output.
        int room = s->kv.max_ctx - s->kv.n_past - 1;
        if (room < 0) { bs_fail(err, "internal error: the context (%d) is full after %d of %d tokens", s->kv.max_ctx, *n_out, n_new); goto out; }
        int max_n = B < room ? B : room;
        int n = 0;
        t0 = bs_now();
        memset(&dr, 0, sizeof dr);
        if (max_n > 0) {
            // Without a confidence cut nothing from the drafts is needed before the verify: they may stay
            // in backend memory until its one download (bs_verify_greedy / bs_verify_sampled).
            if (!(thr > 0) && d->propose_on_device) {
                if (d->propose_on_device(d, anchor, max_n, &s->sampling, &s->rng, &dr, err)) goto out;
            }
            else if (d->propose(d, anchor, max_n, &s->sampling, &s->rng, &dr, err)) goto out;
            n = dr.n < max_n ? dr.n : max_n;
            if (thr > 0 && dr.has_conf) { int k = 0; while (k < n && dr.conf[k] >= thr) k++; n = k; }
        }
        st->t_draft += bs_now() - t0;

        // Verify [anchor, d_1..d_n] in one target forward; its taps feed the drafter next.
        t0 = bs_now();
        int s0 = s->kv.n_past;
        bs_fwd_out vo = { .logits = logits, .logits_all = 1, .taps = d->taps, .n_taps = d->n_taps, .tap_out = feat };
        int a; int32_t next;
        if (greedy) {
            if (bs_verify_greedy(tm, &s->kv, anchor, &dr, n, &vo, scratch, ids, targ, err)) goto out;
            a = bs_accept_greedy(targ, ids + 1, n, &next);
        } else {
            double u[BS_MAX_DRAFT + 1];
            for (int k = 0; k <= n; k++) u[k] = bs_rng_uniform(&s->rng);
            if ((a = bs_verify_sampled(tm, &s->kv, anchor, &dr, n, &vo, &s->sampling, u, s->scratch, scratch, ids, &next, err)) < 0) goto out;
        }
        st->t_target += bs_now() - t0;
        // Keep the anchor's and the accepted drafts' K/V; the next token has none yet. Their taps
        // become drafter context (drafter time).
        if (bs_kv_rollback(&s->kv, s0 + a + 1, err)) goto out;
        t0 = bs_now();
        if (d->add_context(d, feat, a + 1, err)) goto out;
        st->t_draft += bs_now() - t0;
        record_round(st, n, a);
        for (int k = 0; k < a; k++) emit(&em, ids[1 + k]);
        emit(&em, next);
        anchor = next;
    }
    st->n_generated = *n_out;
    st->t_total = bs_now() - t_start;
    rc = 0;
out:
    if (logits) be->free(be, logits);
    if (feat) be->free(be, feat);
    if (scratch) be->free(be, scratch);
    return rc;
}
