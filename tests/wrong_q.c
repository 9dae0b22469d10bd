#include "tests/wrong_q.h"
#include <math.h>
#include <stdlib.h>

typedef struct {
    bs_drafter iface;
    bs_drafter *inner;
    tu_logits_forward forward;
    bs_backend *be;
    float *q_dev, *q, *lg;
    int V;
} wrong_q;

static int wq_ctx_init(bs_drafter *d, bs_drafter_ctx *c, int max_ctx, bs_err *err) {
    wrong_q *w = d->impl;
    return w->inner->ctx_init(w->inner, c, max_ctx, err);
}
static void wq_ctx_free(bs_drafter *d, bs_drafter_ctx *c) { wrong_q *w = d->impl; w->inner->ctx_free(w->inner, c); }
static int wq_add_context(bs_drafter *d, bs_drafter_ctx *c, const float *feat, int n, bs_err *err) {
    wrong_q *w = d->impl;
    return w->inner->add_context(w->inner, c, feat, n, err);
}
static int wq_rollback(bs_drafter *d, bs_drafter_ctx *c, int n_ctx, bs_err *err) {
    wrong_q *w = d->impl;
    return w->inner->rollback(w->inner, c, n_ctx, err);
}
static int wq_propose(bs_drafter *d, bs_drafter_ctx *c, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng, bs_draft *out,
                      bs_err *err) {
    wrong_q *w = d->impl;
    if (w->forward(w->inner, c, anchor, max_n, s, rng, out, w->lg, err)) return -1;
    if (!out->q) return 0;   // greedy: no q to get wrong
    for (int k = 0; k < out->n; k++) {
        const float *l = w->lg + (size_t)k * w->V;
        float *q = w->q + (size_t)k * w->V;
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < w->V; v++) if (l[v] > mx) mx = l[v];
        for (int v = 0; v < w->V; v++) sum += exp((l[v] - mx) / s->temperature);
        for (int v = 0; v < w->V; v++) q[v] = (float)(exp((l[v] - mx) / s->temperature) / sum);
    }
    w->be->upload(w->be, w->q_dev, w->q, sizeof(float) * out->n * w->V);
    out->q = w->q_dev;
    return 0;
}
static void wq_free(bs_drafter *d) {
    wrong_q *w = d->impl;
    w->inner->free(w->inner);
    w->be->free(w->be, w->q_dev);
    free(w->q); free(w->lg); free(w);
}

bs_drafter *tu_wrong_q_wrap(bs_engine *e, bs_drafter *inner, const char *name, tu_logits_forward forward) {
    wrong_q *w = calloc(1, sizeof *w);
    bs_err err;
    int V = e->cfg.vocab_size, n = inner->max_drafts;
    *w = (wrong_q){ .inner = inner, .forward = forward, .be = e->be, .V = V, .q = malloc(sizeof(float) * n * V),
                    .lg = malloc(sizeof(float) * n * V), .q_dev = e->be->alloc(e->be, sizeof(float) * n * V, &err) };
    w->iface = (bs_drafter){ .name = name, .max_drafts = n, .n_taps = inner->n_taps, .taps = inner->taps, .impl = w,
                             .ctx_init = wq_ctx_init, .ctx_free = wq_ctx_free, .add_context = wq_add_context, .rollback = wq_rollback,
                             .propose = wq_propose, .free = wq_free };
    return &w->iface;
}
