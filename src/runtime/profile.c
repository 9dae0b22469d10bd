// The cost model's measurement (profile.h). The best of several forwards, not their mean: on a shared
// machine a mean mixes in forwards that lost their time slice, and the scheduler wants what the forward
// costs when it runs.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/profile.h"
#include "util/timer.h"

// A measured call: prepare (untimed; may be NULL), then run, timed between device syncs.
typedef struct timed_call { int (*prepare)(void *ctx, bs_err *err); int (*run)(void *ctx, bs_err *err); void *ctx; } timed_call;

// *best = the least time of reps runs after `warmup` untimed ones (a shape's first run may pay for warm-up;
// a device records a drafter pass as a graph the second time it sees it).
static int best_time(bs_backend *be, const timed_call *c, int warmup, int reps, double *best, bs_err *err) {
    *best = 1e30;
    for (int rep = 0; rep < warmup + reps; rep++) {
        if (c->prepare && c->prepare(c->ctx, err)) return -1;
        be->sync(be);
        double t0 = bs_now();
        if (c->run(c->ctx, err)) return -1;
        be->sync(be);
        double t = bs_now() - t0;
        if (rep >= warmup && t < *best) *best = t;
    }
    return 0;
}

// One verify-shaped forward: b rows over m sequences of `block` rows, each cache back at its ctx rows.
typedef struct verify_shape {
    const bs_engine *e; bs_qwen3_ws *ws; bs_kv_cache *kv; bs_seq_rows *sr; const int32_t *ids; bs_fwd_out *out;
    int ctx, block, b, m;
} verify_shape;

static int verify_prepare(void *ctx, bs_err *err) {
    verify_shape *v = ctx;
    for (int s = 0; s < v->m; s++) {
        if (bs_kv_rollback(&v->kv[s], v->ctx, err)) return -1;
        v->sr[s] = (bs_seq_rows){ &v->kv[s], v->ids, v->b - s * v->block < v->block ? v->b - s * v->block : v->block, 0 };
    }
    return 0;
}

static int verify_run(void *ctx, bs_err *err) {
    verify_shape *v = ctx;
    return bs_qwen3_forward_batch(&v->e->target, v->ws, v->sr, v->m, v->out, err);
}

int bs_profile_forwards(const bs_engine *e, const int *rows, int n, int ctx, int block, int reps, double *sps, bs_err *err) {
    const bs_qwen3_config *c = &e->cfg;
    bs_backend *be = e->be;
    int max_rows = 0, rc = -1;
    if (block < 1 || block > 64) return bs_fail(err, "profile: block of %d rows outside [1, 64]", block);
    if (reps < 1) reps = 1;
    if (ctx < 1) ctx = 1;
    for (int i = 0; i < n; i++) {
        if (rows[i] < 1 || rows[i] > 4096) return bs_fail(err, "profile: %d rows outside [1, 4096]", rows[i]);
        if (rows[i] > max_rows) max_rows = rows[i];
    }
    if (ctx + block > c->max_position) return bs_fail(err, "profile: a context of %d rows plus a block of %d exceeds the model's %d", ctx, block, c->max_position);
    int n_seq = (max_rows + block - 1) / block;
    bs_kv_cache *kv = calloc(n_seq, sizeof *kv);
    bs_seq_rows *sr = calloc(n_seq, sizeof *sr);
    int32_t *ids = malloc(sizeof(int32_t) * (ctx > block ? ctx : block));
    float *logits = NULL;
    bs_qwen3_ws ws = {0};
    int n_kv = 0;
    if (!kv || !sr || !ids) { bs_fail(err, "out of memory"); goto out; }
    for (int i = 0; i < (ctx > block ? ctx : block); i++) ids[i] = (int32_t)((i * 7919 + 13) % c->vocab_size);
    if (bs_qwen3_ws_init(&ws, c, be, err)) goto out;
    if (!(logits = be->alloc(be, sizeof(float) * (size_t)max_rows * c->vocab_size, err))) goto out;
    for (; n_kv < n_seq; n_kv++) if (bs_kv_init(&kv[n_kv], e->kv_pool, ctx + block, err)) goto out;
    // Every cache gets its ctx rows in one ragged prefill (last logits only).
    for (int s = 0; s < n_seq; s++) sr[s] = (bs_seq_rows){ &kv[s], ids, ctx, 1 };
    bs_fwd_out pre = { .logits = logits, .logits_all = 0 };
    if (bs_qwen3_forward_batch(&e->target, &ws, sr, n_seq, &pre, err)) goto out;
    bs_fwd_out all = { .logits = logits, .logits_all = 1 };
    for (int i = 0; i < n; i++) {
        verify_shape v = { e, &ws, kv, sr, ids, &all, ctx, block, rows[i], (rows[i] + block - 1) / block };
        double best;
        if (best_time(be, &(timed_call){ verify_prepare, verify_run, &v }, 1, reps, &best, err)) goto out;
        sps[i] = 1 / best;
    }
    rc = 0;
out:
    for (int s = 0; s < n_kv; s++) bs_kv_free(&kv[s]);
    if (logits) be->free(be, logits);
    if (ws.be) bs_qwen3_ws_free(&ws);
    free(kv); free(sr); free(ids);
    return rc;
}

// One drafter pass over the first m contexts (the runtime's calls: propose alone, else propose_batch).
typedef struct draft_shape {
    bs_drafter *d; int m; bs_drafter_ctx **c; const int32_t *anchors; const int *max_n; const bs_sampling **smp; bs_rng **rng; bs_draft *out;
} draft_shape;

static int draft_pass(void *ctx, bs_err *err) {
    draft_shape *p = ctx;
    bs_drafter *d = p->d;
    if (p->m == 1 || !d->propose_batch) {
        for (int s = 0; s < p->m; s++) if (d->propose(d, p->c[s], p->anchors[s], p->max_n[s], p->smp[s], p->rng[s], &p->out[s], err)) return -1;
        return 0;
    }
    return d->propose_batch(d, p->m, p->c, p->anchors, p->max_n, p->smp, p->rng, p->out, err);
}

int bs_profile_drafter(const bs_engine *e, bs_drafter *d, const int *seqs, int n, int ctx, int drafts, int reps, double *pps, bs_err *err) {
    const bs_qwen3_config *c = &e->cfg;
    bs_backend *be = e->be;
    int max_seqs = 0, n_ctx = 0, rc = -1;
    if (reps < 1) reps = 1;
    if (ctx < 1) ctx = 1;
    if (drafts <= 0 || drafts > d->max_drafts) drafts = d->max_drafts;
    for (int i = 0; i < n; i++) {
        if (seqs[i] < 1 || seqs[i] > 4096) return bs_fail(err, "profile: %d drafting sequences outside [1, 4096]", seqs[i]);
        if (seqs[i] > max_seqs) max_seqs = seqs[i];
    }
    bs_drafter_ctx *ctxs = calloc(max_seqs, sizeof *ctxs);
    bs_drafter_ctx **cp = calloc(max_seqs, sizeof *cp);
    bs_draft *out = calloc(max_seqs, sizeof *out);
    bs_rng *rngs = calloc(max_seqs, sizeof *rngs);
    bs_rng **rp = calloc(max_seqs, sizeof *rp);
    const bs_sampling **smp = calloc(max_seqs, sizeof *smp);
    int32_t *anchors = malloc(sizeof(int32_t) * max_seqs);
    int *max_n = malloc(sizeof(int) * max_seqs);
    float *feat = NULL;
    static const bs_sampling greedy = { 0 };
    if (!ctxs || !cp || !out || !rngs || !rp || !smp || !anchors || !max_n) { bs_fail(err, "out of memory"); goto out; }
    // The context's features: zeros (the pass's cost does not depend on their values), ctx rows at once.
    if (!(feat = be->alloc(be, sizeof(float) * (size_t)ctx * d->n_taps * c->hidden_size, err))) goto out;
    for (; n_ctx < max_seqs; n_ctx++) {
        if (bs_drafter_ctx_init(d, &ctxs[n_ctx], ctx + 1, err)) goto out;
        if (d->add_context(d, &ctxs[n_ctx], feat, ctx, err)) { n_ctx++; goto out; }
        cp[n_ctx] = &ctxs[n_ctx];
        anchors[n_ctx] = (int32_t)((n_ctx * 7919 + 13) % c->vocab_size);
        max_n[n_ctx] = drafts;
        bs_rng_seed(&rngs[n_ctx], 1 + n_ctx);
        rp[n_ctx] = &rngs[n_ctx];
        smp[n_ctx] = &greedy;
    }
    for (int i = 0; i < n; i++) {
        draft_shape p = { d, seqs[i], cp, anchors, max_n, smp, rp, out };
        double best;
        if (best_time(be, &(timed_call){ NULL, draft_pass, &p }, 2, reps, &best, err)) goto out;
        pps[i] = 1 / best;
    }
    rc = 0;
out:
    for (int s = 0; s < n_ctx; s++) bs_drafter_ctx_free(d, &ctxs[s]);
    if (feat) be->free(be, feat);
    free(ctxs); free(cp); free(out); free(rngs); free(rp); free(smp); free(anchors); free(max_n);
    return rc;
}

int bs_model_shape(const bs_engine *e, char *buf, size_t len) {
    const bs_qwen3_config *c = &e->cfg;
    int n = snprintf(buf, len, "L%d-H%d-I%d-A%dx%dx%d-V%d-%s", c->n_layers, c->hidden_size, c->intermediate_size, c->n_heads, c->n_kv_heads,
                     c->head_dim, c->vocab_size, bs_dtype_name(e->target.layers[0].wq.dtype));
    return n < 0 || (size_t)n >= len ? -1 : 0;
}
