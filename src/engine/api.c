// The public API (include/blockspec.h): a thin layer over the engine, sessions and the speculative loop.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "blockspec.h"
#include "engine/engine.h"
#include "io/chat.h"
#include "io/weight_check.h"
#include "runtime/profile.h"
#include "runtime/runtime.h"
#include "spec/spec_loop.h"
#include "util/threadpool.h"

// The loaded target and drafter are shared by every request: each request's state (KV cache, drafter
// context, RNG) is its own sequence. Submitted requests run in the handle's runtime (made on first use).
// Every call that runs or changes requests holds the handle's lock (recursive: a token callback may cancel
// or read requests from inside blockspec_step), so threads may share a handle; they take turns.
// A token callback runs inside a step, while the runtime walks its sequences: requests submitted or freed
// from there join or are freed once the step is over (cancelling only marks the sequence, which the step
// drops at its end). sched / sps: the scheduler every request runs under (blockspec_set_schedule);
// on_round: the round observer.
struct blockspec {
    bs_engine *eng; bs_drafter *drafter; char warnings[1024];
    bs_runtime rt; int has_rt;
    pthread_mutex_t mu;
    int in_step;
    struct blockspec_request **join_later, **free_later;
    int n_join, cap_join, n_free, cap_free;
    bs_sched_mode sched; double *sps, *sps1, *dps; int n_sps, n_sps1, n_dps, block;
    blockspec_round_fn on_round; void *on_round_ctx;
};
struct blockspec_request { bs_seq seq; blockspec *bs; };

static int fail(char *err, size_t len, const char *msg) { if (err && len) snprintf(err, len, "%s", msg); return -1; }

static int push(struct blockspec_request ***list, int *n, int *cap, struct blockspec_request *r) {
    if (*n == *cap) {
        int c = *cap ? *cap * 2 : 8;
        struct blockspec_request **l = realloc(*list, sizeof *l * (size_t)c);
        if (!l) return -1;
        *list = l; *cap = c;
    }
    (*list)[(*n)++] = r;
    return 0;
}

blockspec_params blockspec_default_params(void) {
    return (blockspec_params){ .n_new = 128, .top_p = 1.0f, .stop_at_eos = 1, .use_drafter = 1 };
}

int blockspec_open(blockspec **out, const char *target_dir, const char *drafter_dir, const char *device, char *err, size_t err_len) {
    return blockspec_open_ex(out, target_dir, drafter_dir, device, NULL, err, err_len);
}

// Appends a line to what blockspec_warnings() reports.
static void add_warning(blockspec *bs, const char *w) {
    size_t l = strlen(bs->warnings);
    snprintf(bs->warnings + l, sizeof bs->warnings - l, "%s%s", l ? "\n" : "", w);
}

int blockspec_open_ex(blockspec **out, const char *target_dir, const char *drafter_dir, const char *device,
                      const blockspec_open_options *o, char *err, size_t err_len) {
    *out = NULL;
    bs_err e = {0};
    blockspec *bs = calloc(1, sizeof *bs);
    if (!bs) return fail(err, err_len, "out of memory");
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&bs->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    bs_engine_opts eo = { .threads = o ? o->threads : 0, .no_graphs = o && o->no_graphs, .kv_rows = o ? o->kv_rows : 0 };
    if (bs_engine_open_opts(&bs->eng, target_dir, device ? device : "cpu", &eo, &e)) { free(bs); return fail(err, err_len, e.msg); }
    // Context rows up to the model's limit: host buffers fill lazily, so only what is used costs memory.
    bs_drafter_opts dop = { .lossy_weights = o && o->drafter_fp8 ? 1 : -1, .draft_vocab = o ? o->draft_vocab : NULL,
                           .no_calibration = o && o->no_calibration };
    if (o && o->draft_vocab && !drafter_dir) { blockspec_close(bs); return fail(err, err_len, "a draft vocabulary needs a drafter"); }
    if (drafter_dir && bs_drafter_open_opts(&bs->drafter, drafter_dir, bs->eng, bs->eng->cfg.max_position, &dop, &e)) {
        blockspec_close(bs);
        return fail(err, err_len, e.msg);
    }
    // Weights holding NaN/Inf load but compute garbage: kept for blockspec_warnings().
    char w[512] = "";
    snprintf(bs->warnings, sizeof bs->warnings, "%s", bs->eng->weight_warning);
    if (bs->eng->setup_warning[0]) add_warning(bs, bs->eng->setup_warning);
    if (bs->drafter && bs->drafter->warning[0]) add_warning(bs, bs->drafter->warning);
    if (drafter_dir && bs_weights_check_path(drafter_dir, w, sizeof w, &e) > 0) add_warning(bs, w);
    *out = bs;
    return 0;
}

void blockspec_close(blockspec *bs) {
    if (!bs) return;
    if (bs->has_rt) bs_runtime_free(&bs->rt);
    free(bs->join_later); free(bs->free_later);
    if (bs->drafter) bs->drafter->free(bs->drafter);
    bs_engine_close(bs->eng);
    pthread_mutex_destroy(&bs->mu);
    free(bs->sps); free(bs->sps1); free(bs->dps);
    free(bs);
}

// A request's sequence settings from the public parameters.
static bs_seq_params seq_params(const blockspec_params *p, blockspec_token_fn on_token, void *ctx) {
    return (bs_seq_params){ .n_new = p->n_new, .sampling = { p->temperature, p->top_k, p->top_p, p->seed }, .stop_at_eos = p->stop_at_eos,
                            .use_drafter = p->use_drafter, .draft_max = p->draft_max, .confidence_threshold = p->confidence_threshold,
                            .max_ctx = p->n_ctx, .cb = on_token, .cb_ctx = ctx };
}

static void runtime_observe(blockspec *bs);

static int submit_locked(blockspec *bs, const int32_t *prompt, size_t n_prompt, const blockspec_params *p, blockspec_token_fn on_token,
                         void *ctx, blockspec_request **out, char *err, size_t err_len) {
    blockspec_params dp = blockspec_default_params();
    if (!p) p = &dp;
    *out = NULL;
    bs_err e = {0};
    if (n_prompt > (size_t)INT32_MAX) return fail(err, err_len, "prompt too long");
    if (!bs->has_rt) {
        if (bs_runtime_init(&bs->rt, bs->eng, bs->drafter, &e)) return fail(err, err_len, e.msg);
        bs->has_rt = 1;
        if (bs_runtime_set_schedule_costs(&bs->rt, bs->sched, &(bs_cost_tables){ bs->sps, bs->n_sps, bs->block, bs->sps1, bs->n_sps1, bs->dps, bs->n_dps }, &e))
            return fail(err, err_len, e.msg);
        runtime_observe(bs);
    }
    blockspec_request *r = calloc(1, sizeof *r);
    if (!r) return fail(err, err_len, "out of memory");
    bs_seq_params sp = seq_params(p, on_token, ctx);
    if (bs_seq_init(&r->seq, bs->eng, bs->drafter, prompt, (int)n_prompt, &sp, &e)) { free(r); return fail(err, err_len, e.msg); }
    r->bs = bs;
    if (bs->in_step) {   // from a token callback: it joins when this step is over
        if (push(&bs->join_later, &bs->n_join, &bs->cap_join, r)) { bs_seq_free(&r->seq); free(r); return fail(err, err_len, "out of memory"); }
        *out = r;
        return 0;
    }
    if (bs_runtime_add(&bs->rt, &r->seq, &e)) { bs_seq_free(&r->seq); free(r); return fail(err, err_len, e.msg); }
    *out = r;
    return 0;
}

static void request_free_now(blockspec_request *r) { bs_seq_free(&r->seq); free(r); }

static int step_locked(blockspec *bs, char *err, size_t err_len) {
    if (!bs->has_rt) return 0;
    if (bs->in_step) return fail(err, err_len, "blockspec_step called from inside a token callback");
    bs_err e = {0};
    bs->in_step = 1;
    int n = bs_runtime_step(&bs->rt, &e);
    bs->in_step = 0;
    for (int i = 0; i < bs->n_free; i++) { bs_runtime_remove(&bs->rt, &bs->free_later[i]->seq); request_free_now(bs->free_later[i]); }
    bs->n_free = 0;
    for (int i = 0; i < bs->n_join; i++) {
        blockspec_request *r = bs->join_later[i];
        if (bs_seq_done(&r->seq)) continue;   // cancelled before it joined
        if (bs_runtime_add(&bs->rt, &r->seq, &e)) { bs_seq_cancel(&r->seq); if (n >= 0) { n = -1; } }
        else if (n >= 0) n++;
    }
    bs->n_join = 0;
    return n < 0 ? fail(err, err_len, e.msg) : n;
}

int blockspec_request_done(const blockspec_request *r) {
    pthread_mutex_lock(&r->bs->mu);
    int d = bs_seq_done(&r->seq);
    pthread_mutex_unlock(&r->bs->mu);
    return d;
}

const int32_t *blockspec_request_tokens(const blockspec_request *r, size_t *n) {
    pthread_mutex_lock(&r->bs->mu);
    *n = (size_t)r->seq.n_out;
    const int32_t *t = r->seq.out;
    pthread_mutex_unlock(&r->bs->mu);
    return t;
}

void blockspec_request_stats(const blockspec_request *r, blockspec_stats *st) {
    pthread_mutex_lock(&r->bs->mu);
    const bs_spec_stats *s = &r->seq.st;
    double t_gen = bs_seq_done(&r->seq) ? s->t_total - s->t_prefill : 0;
    *st = (blockspec_stats){ s->n_prompt, r->seq.n_out, s->rounds, bs_spec_tau(s), s->t_prefill, t_gen, bs_finish_name(s->finish),
                             s->t_target, s->t_draft };
    pthread_mutex_unlock(&r->bs->mu);
}

static void cancel_locked(blockspec *bs, blockspec_request *r) {
    bs_seq_cancel(&r->seq);
    if (bs->has_rt && !bs->in_step) bs_runtime_remove(&bs->rt, &r->seq);   // in a step: dropped at its end
}

static void request_free_locked(blockspec *bs, blockspec_request *r) {
    if (!r) return;
    cancel_locked(bs, r);
    if (bs->in_step) {   // the step may still hold it: freed when the step is over
        for (int i = 0; i < bs->n_join; i++) if (bs->join_later[i] == r) { bs->join_later[i] = bs->join_later[--bs->n_join]; request_free_now(r); return; }
        if (!push(&bs->free_later, &bs->n_free, &bs->cap_free, r)) return;
        // Out of memory for the list: the sequence is cancelled and leaves at the step's end, but its memory
        // must outlive the step; it is leaked rather than freed under the runtime's feet.
        return;
    }
    request_free_now(r);
}

static int generate_locked(blockspec *bs, const int32_t *prompt, size_t n_prompt, const blockspec_params *p,
                           int32_t *out, size_t cap, size_t *n_out, blockspec_token_fn on_token, void *ctx,
                           blockspec_stats *stats, char *err, size_t err_len) {
    blockspec_params dp = blockspec_default_params();
    if (!p) p = &dp;
    bs_err e = {0};
    bs_sampling smp = { p->temperature, p->top_k, p->top_p, p->seed };
    bs_session s;
    bs_drafter *d = p->use_drafter ? bs->drafter : NULL;
    size_t cap_i = cap < (size_t)INT32_MAX ? cap : (size_t)INT32_MAX;
    int n = 0, rc = -1, want = p->n_new < 0 ? -1 : p->n_new < (int)cap_i ? p->n_new : (int)cap_i;
    *n_out = 0;
    if (n_prompt > (size_t)INT32_MAX) return fail(err, err_len, "prompt too long");
    int n_ctx = p->n_ctx ? p->n_ctx : want < 0 ? bs->eng->cfg.max_position : bs_request_ctx(&bs->eng->cfg, (int)n_prompt, want);
    if (bs_session_init(&s, bs->eng, n_ctx, &smp, &e)) return fail(err, err_len, e.msg);
    if (want < 0) {   // as many as fit: the output buffer must hold them all
        int fits = bs_request_tokens(&s.kv, (int)n_prompt, -1, &e);
        if (fits < 0) goto out;
        if ((size_t)fits > cap_i) { bs_fail(&e, "n_new -1 needs room for %d tokens (the context holds them) but cap is %zu", fits, cap); goto out; }
    }
    if (d) {
        bs_spec_stats st = {0};
        bs_spec_sched sch = { bs->sched, bs->sps, bs->n_sps, bs->block, bs->sps1, bs->n_sps1, bs->dps, bs->n_dps };
        bs_spec_opts o = { p->draft_max, p->confidence_threshold, p->stop_at_eos, &sch };
        if (bs_generate_spec(&s, d, prompt, (int)n_prompt, want, &o, out, &n, on_token, ctx, &st, &e)) goto out;
        if (stats) *stats = (blockspec_stats){ st.n_prompt, st.n_generated, st.rounds, bs_spec_tau(&st), st.t_prefill, st.t_total - st.t_prefill,
                                               bs_finish_name(st.finish), st.t_target, st.t_draft };
        bs_spec_stats_free(&st);
    } else {
        if (bs_generate_plain(&s, prompt, (int)n_prompt, want, p->stop_at_eos, out, &n, on_token, ctx, &e)) goto out;
        if (stats) *stats = (blockspec_stats){ s.stats.n_prompt, s.stats.n_generated, 0, 0, s.stats.t_prefill, s.stats.t_decode,
                                               bs_finish_name(s.stats.finish) };
    }
    *n_out = (size_t)n;
    rc = 0;
out:
    bs_session_free(&s);
    return rc ? fail(err, err_len, e.msg) : 0;
}

typedef struct text_ctx { bs_detok dt; blockspec_text_fn fn; void *ctx; } text_ctx;

static int text_token(void *c, int32_t t) {
    text_ctx *tc = c;
    char buf[1024];
    int n = bs_detok_push(&tc->dt, t, buf, sizeof buf);
    return n > 0 && tc->fn ? tc->fn(tc->ctx, buf, (size_t)n) : 0;
}

int blockspec_generate_text(blockspec *bs, const char *prompt, const blockspec_params *p,
                            blockspec_text_fn on_text, void *ctx, blockspec_stats *stats, char *err, size_t err_len) {
    blockspec_params dp = blockspec_default_params();
    if (!p) p = &dp;
    int32_t *ids = NULL; size_t n = 0, n_out = 0;
    if (blockspec_tokenize(bs, prompt, &ids, &n, err, err_len)) return -1;
    // n_new -1: room for whatever the context can hold.
    size_t cap = p->n_new >= 0 ? (size_t)p->n_new : (size_t)(p->n_ctx > 0 ? p->n_ctx : bs->eng->cfg.max_position) + 1;
    int32_t *out = malloc(sizeof(int32_t) * (cap ? cap : 1));
    text_ctx tc = { .fn = on_text, .ctx = ctx };
    bs_detok_init(&tc.dt, bs->eng->tok, 1);
    int rc = out ? blockspec_generate(bs, ids, n, p, out, cap, &n_out, text_token, &tc, stats, err, err_len)
                 : fail(err, err_len, "out of memory");
    if (!rc) {
        char buf[64];
        int m = bs_detok_flush(&tc.dt, buf, sizeof buf);
        if (m > 0 && on_text) on_text(ctx, buf, (size_t)m);
    }
    free(ids); free(out);
    return rc;
}

int blockspec_tokenize(blockspec *bs, const char *text, int32_t **ids, size_t *n, char *err, size_t err_len) {
    bs_err e = {0};
    if (!bs->eng->tok) return fail(err, err_len, bs->eng->tok_error[0] ? bs->eng->tok_error : "this model folder has no tokenizer.json");
    if (bs_tokenizer_encode(bs->eng->tok, text, strlen(text), ids, n, &e)) return fail(err, err_len, e.msg);
    return 0;
}

int blockspec_detokenize(blockspec *bs, const int32_t *ids, size_t n, char **text, char *err, size_t err_len) {
    bs_err e = {0};
    size_t len;
    if (!bs->eng->tok) return fail(err, err_len, bs->eng->tok_error[0] ? bs->eng->tok_error : "this model folder has no tokenizer.json");
    if (bs_tokenizer_decode(bs->eng->tok, ids, n, 1, text, &len, &e)) return fail(err, err_len, e.msg);
    return 0;
}

const char *blockspec_warnings(const blockspec *bs) { return bs->warnings[0] ? bs->warnings : NULL; }
const char *blockspec_tokenizer_error(const blockspec *bs) { return bs->eng->tok ? NULL : bs->eng->tok_error; }
int blockspec_max_context(const blockspec *bs) { return bs->eng->cfg.max_position; }

// ---- For servers ----

int blockspec_chat_render(blockspec *bs, const blockspec_chat_message *msgs, size_t n, int enable_thinking, char **text,
                          char *err, size_t err_len) {
    return blockspec_chat_render_as(bs, NULL, msgs, n, enable_thinking, text, err, err_len);
}

int blockspec_chat_render_as(blockspec *bs, const char *template_name, const blockspec_chat_message *msgs, size_t n,
                             int enable_thinking, char **text, char *err, size_t err_len) {
    bs_err e = {0};
    *text = NULL;
    if (!bs->eng->tok) return fail(err, err_len, bs->eng->tok_error[0] ? bs->eng->tok_error : "this model folder has no tokenizer.json");
    bs_chat_opts o = { BS_CHAT_AUTO, 1, enable_thinking };
    if (template_name && bs_chat_kind_parse(template_name, &o.kind, &e)) return fail(err, err_len, e.msg);
    bs_chat_msg *m = calloc(n ? n : 1, sizeof *m);
    if (!m) return fail(err, err_len, "out of memory");
    for (size_t i = 0; i < n; i++) m[i] = (bs_chat_msg){ msgs[i].role, msgs[i].content, NULL };
    int rc = bs_chat_render(bs->eng->tok, m, n, &o, text, &e);
    free(m);
    return rc ? fail(err, err_len, e.msg) : 0;
}

struct blockspec_detokenizer { bs_detok dt; };

blockspec_detokenizer *blockspec_detokenizer_new(blockspec *bs) {
    if (!bs->eng->tok) return NULL;
    blockspec_detokenizer *d = calloc(1, sizeof *d);
    if (d) bs_detok_init(&d->dt, bs->eng->tok, 1);
    return d;
}
int blockspec_detokenizer_push(blockspec_detokenizer *d, int32_t token, char *out, size_t cap) { return bs_detok_push(&d->dt, token, out, cap); }
int blockspec_detokenizer_flush(blockspec_detokenizer *d, char *out, size_t cap) { return bs_detok_flush(&d->dt, out, cap); }
void blockspec_detokenizer_free(blockspec_detokenizer *d) { free(d); }

void blockspec_request_spec_counts(const blockspec_request *r, blockspec_spec_counts *c) {
    pthread_mutex_lock(&r->bs->mu);
    const bs_spec_stats *s = &r->seq.st;
    int n_pos = 0;
    for (int k = 0; k < BS_MAX_DRAFT; k++) if (s->pos_tried[k]) n_pos = k + 1;
    const bs_page_table *t = r->seq.kv ? &r->seq.kv->pages : NULL;
    *c = (blockspec_spec_counts){ s->rounds, s->drafted, s->accepted, n_pos, s->pos_tried, s->pos_accepted,
                                  t && t->pool ? t->n_held * t->pool->page_rows : 0, s->n_lengths, s->acceptance_lengths };
    pthread_mutex_unlock(&r->bs->mu);
}

int blockspec_last_step_rows(const blockspec *bs) {
    pthread_mutex_lock((pthread_mutex_t *)&bs->mu);
    int n = bs->has_rt ? bs->rt.last_rows : 0;
    pthread_mutex_unlock((pthread_mutex_t *)&bs->mu);
    return n;
}
int blockspec_vocab_size(const blockspec *bs) { return bs->eng->cfg.vocab_size; }

void blockspec_kv_usage(const blockspec *bs, blockspec_kv_pages *u) {
    pthread_mutex_lock((pthread_mutex_t *)&bs->mu);
    const bs_kv_pool *p = bs->eng->kv_pool;
    *u = (blockspec_kv_pages){ p->page_rows, p->n_pages, bs_kv_pool_in_use(p), p->n_promised };
    pthread_mutex_unlock((pthread_mutex_t *)&bs->mu);
}

// ---- The entry points that run or change requests, each under the handle's lock ----

int blockspec_submit(blockspec *bs, const int32_t *prompt, size_t n_prompt, const blockspec_params *p, blockspec_token_fn on_token,
                     void *ctx, blockspec_request **out, char *err, size_t err_len) {
    pthread_mutex_lock(&bs->mu);
    int rc = submit_locked(bs, prompt, n_prompt, p, on_token, ctx, out, err, err_len);
    pthread_mutex_unlock(&bs->mu);
    return rc;
}

int blockspec_step(blockspec *bs, char *err, size_t err_len) {
    pthread_mutex_lock(&bs->mu);
    int rc = step_locked(bs, err, err_len);
    pthread_mutex_unlock(&bs->mu);
    return rc;
}

void blockspec_cancel(blockspec *bs, blockspec_request *r) {
    pthread_mutex_lock(&bs->mu);
    cancel_locked(bs, r);
    pthread_mutex_unlock(&bs->mu);
}

void blockspec_request_free(blockspec *bs, blockspec_request *r) {
    pthread_mutex_lock(&bs->mu);
    request_free_locked(bs, r);
    pthread_mutex_unlock(&bs->mu);
}

int blockspec_generate(blockspec *bs, const int32_t *prompt, size_t n_prompt, const blockspec_params *p,
                       int32_t *out, size_t cap, size_t *n_out, blockspec_token_fn on_token, void *ctx,
                       blockspec_stats *stats, char *err, size_t err_len) {
    pthread_mutex_lock(&bs->mu);
    int rc = bs->in_step ? fail(err, err_len, "blockspec_generate called from inside a token callback (submit a request instead)")
                         : generate_locked(bs, prompt, n_prompt, p, out, cap, n_out, on_token, ctx, stats, err, err_len);
    pthread_mutex_unlock(&bs->mu);
    return rc;
}

// ---- Confidence schedulers (issue 26; docs/scheduling.md) ----

int blockspec_schedule_parse(const char *name, blockspec_schedule *out) {
    bs_sched_mode m;
    if (bs_sched_parse(name, &m)) return -1;
    *out = (blockspec_schedule)m;
    return 0;
}

const char *blockspec_schedule_name(blockspec_schedule s) { return bs_sched_name((bs_sched_mode)s); }

// A copy of a public table (NULL for none).
static int copy_doubles(const double *v, size_t n, double **out) {
    *out = NULL;
    if (!v || !n) return 0;
    if (!(*out = malloc(sizeof(double) * n))) return -1;
    memcpy(*out, v, sizeof(double) * n);
    return 0;
}

static int set_schedule_locked(blockspec *bs, blockspec_schedule mode, const blockspec_cost_model *cm, char *err, size_t err_len) {
    static const blockspec_cost_model none = { 0 };
    bs_err e = {0};
    if (!cm) cm = &none;
    if (cm->n_verify > 4096 || cm->n_plain > 4096 || cm->n_draft > 4096) return fail(err, err_len, "cost model: more than 4096 entries in a table");
    bs_cost_tables c = { cm->verify, (int)cm->n_verify, cm->block, cm->plain, (int)cm->n_plain, cm->draft, (int)cm->n_draft };
    // The handle's runtime checks and copies the tables (and refuses while requests run); a scratch runtime
    // does the same checks when there is none yet.
    bs_runtime tmp, *rt = bs->has_rt ? &bs->rt : &tmp;
    memset(&tmp, 0, sizeof tmp);
    if (bs_runtime_set_schedule_costs(rt, (bs_sched_mode)mode, &c, &e)) return fail(err, err_len, e.msg);
    if (rt == &tmp) bs_runtime_free_costs(&tmp);
    double *sps, *sps1 = NULL, *dps = NULL;
    if (copy_doubles(cm->verify, cm->n_verify, &sps) || copy_doubles(cm->plain, cm->n_plain, &sps1) || copy_doubles(cm->draft, cm->n_draft, &dps)) {
        free(sps); free(sps1);
        return fail(err, err_len, "out of memory");
    }
    free(bs->sps); free(bs->sps1); free(bs->dps);
    bs->sps = sps; bs->n_sps = sps ? (int)cm->n_verify : 0;
    bs->sps1 = sps1; bs->n_sps1 = sps1 ? (int)cm->n_plain : 0;
    bs->dps = dps; bs->n_dps = dps ? (int)cm->n_draft : 0;
    bs->block = cm->block;
    bs->sched = (bs_sched_mode)mode;
    return 0;
}

int blockspec_set_schedule(blockspec *bs, blockspec_schedule mode, const double *sps, size_t n_sps, char *err, size_t err_len) {
    blockspec_cost_model cm = { .verify = sps, .n_verify = n_sps };
    return blockspec_set_schedule_costs(bs, mode, &cm, err, err_len);
}

int blockspec_set_schedule_costs(blockspec *bs, blockspec_schedule mode, const blockspec_cost_model *cm, char *err, size_t err_len) {
    pthread_mutex_lock(&bs->mu);
    int rc = set_schedule_locked(bs, mode, cm, err, err_len);
    pthread_mutex_unlock(&bs->mu);
    return rc;
}

int blockspec_profile(blockspec *bs, const int *rows, size_t n, int ctx, int block, int reps, double *sps, char *err, size_t err_len) {
    bs_err e = {0};
    if (n > 4096) return fail(err, err_len, "profile: more than 4096 row counts");
    pthread_mutex_lock(&bs->mu);   // the forwards use the backend, as steps do
    int rc = bs_profile_forwards(bs->eng, rows, (int)n, ctx, block, reps, sps, &e);
    pthread_mutex_unlock(&bs->mu);
    return rc ? fail(err, err_len, e.msg) : 0;
}

int blockspec_profile_drafter(blockspec *bs, const int *seqs, size_t n, int ctx, int drafts, int reps, double *pps, char *err, size_t err_len) {
    bs_err e = {0};
    if (!bs->drafter) return fail(err, err_len, "profile: the handle has no drafter");
    if (n > 4096) return fail(err, err_len, "profile: more than 4096 sequence counts");
    pthread_mutex_lock(&bs->mu);
    int rc = bs_profile_drafter(bs->eng, bs->drafter, seqs, (int)n, ctx, drafts, reps, pps, &e);
    pthread_mutex_unlock(&bs->mu);
    return rc ? fail(err, err_len, e.msg) : 0;
}

int blockspec_drafter_shape(const blockspec *bs, char *buf, size_t len) {
    if (!bs->drafter || !len) return -1;
    int n = snprintf(buf, len, "%s", bs->drafter->shape[0] ? bs->drafter->shape : bs->drafter->name);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

int blockspec_drafter_block(const blockspec *bs) { return bs->drafter ? bs->drafter->max_drafts : 0; }
int blockspec_threads(const blockspec *bs) { return bs_pool_size(); }

const char *blockspec_device_name(const blockspec *bs) { return bs->eng->be->name; }

int blockspec_model_shape(const blockspec *bs, char *buf, size_t len) { return bs_model_shape(bs->eng, buf, len); }

// The runtime's observer hands out the sequence; a request is its sequence (the first member).
static void on_round(void *ctx, const bs_seq *s, int n_drafted, int n_verified, int n_accepted) {
    blockspec *bs = ctx;
    blockspec_round r = { n_drafted, n_verified, n_accepted, s->draft.has_conf ? s->draft.conf : NULL };
    bs->on_round(bs->on_round_ctx, (const blockspec_request *)s, &r);
}

static void runtime_observe(blockspec *bs) {
    bs->rt.on_round = bs->on_round ? on_round : NULL;
    bs->rt.on_round_ctx = bs;
}

void blockspec_set_round_observer(blockspec *bs, blockspec_round_fn fn, void *ctx) {
    pthread_mutex_lock(&bs->mu);
    bs->on_round = fn; bs->on_round_ctx = ctx;
    if (bs->has_rt) runtime_observe(bs);
    pthread_mutex_unlock(&bs->mu);
}
