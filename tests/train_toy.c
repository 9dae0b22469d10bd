// The toy bigram task (train_toy.h).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "io/safetensors.h"
#include "train_toy.h"

typedef struct { int V, D; float *h, *logits, *dlogits; } toy;

static int toy_loss(bs_train_task *t, const bs_train_seq *s, float scale, bs_rng *rng, bs_loss_terms *terms, int grad, bs_err *err) {
    toy *m = t->impl;
    bs_param *E = &t->params.p[0], *G = &t->params.p[1], *W = &t->params.p[2], *B = &t->params.p[3];
    int V = m->V, D = m->D, kept = 0;
    double loss = 0;
    // Which positions count: the label's mask, then (training) a 3/4 draw per position.
    int *keep = malloc(sizeof *keep * s->n);
    if (!keep) return bs_fail(err, "out of memory");
    for (int i = 0; i + 1 < s->n; i++) {
        keep[i] = (!s->loss_mask || s->loss_mask[i + 1]) && (!rng || bs_rng_uniform(rng) < 0.75);
        if (s->ids[i] >= V || s->ids[i + 1] >= V) { free(keep); return bs_fail(err, "toy task: id %d >= vocabulary %d", s->ids[i], V); }
        kept += keep[i];
    }
    for (int i = 0; i + 1 < s->n; i++) {
        if (!keep[i]) continue;
        int x = s->ids[i], y = s->ids[i + 1];
        for (int d = 0; d < D; d++) m->h[d] = E->w[(int64_t)x * D + d] * G->w[d];
        float mx = -INFINITY;
        for (int v = 0; v < V; v++) {
            float z = B->w[v];
            for (int d = 0; d < D; d++) z += m->h[d] * W->w[(int64_t)d * V + v];
            m->logits[v] = z;
            if (z > mx) mx = z;
        }
        double se = 0;
        for (int v = 0; v < V; v++) se += exp(m->logits[v] - mx);
        loss += log(se) + mx - m->logits[y];
        if (!grad) continue;
        float c = scale / kept;
        for (int v = 0; v < V; v++) m->dlogits[v] = c * (float)(exp(m->logits[v] - mx) / se - (v == y));
        for (int v = 0; v < V; v++) B->g[v] += m->dlogits[v];
        for (int d = 0; d < D; d++) {
            float dh = 0;
            for (int v = 0; v < V; v++) { W->g[(int64_t)d * V + v] += m->h[d] * m->dlogits[v]; dh += W->w[(int64_t)d * V + v] * m->dlogits[v]; }
            E->g[(int64_t)x * D + d] += dh * G->w[d];
        }
    }
    free(keep);
    memset(terms, 0, sizeof *terms);
    terms->loss = terms->ce = kept ? loss / kept : 0;
    terms->n_tokens = kept;
    return 0;
}

static int toy_grad(bs_train_task *t, const bs_train_seq *s, float scale, bs_rng *rng, bs_loss_terms *terms, bs_err *err) {
    return toy_loss(t, s, scale, rng, terms, 1, err);
}
static int toy_eval(bs_train_task *t, const bs_train_seq *s, bs_rng *rng, bs_loss_terms *terms, bs_err *err) {
    return toy_loss(t, s, 0, NULL, terms, 0, err);
}
static int toy_export(bs_train_task *t, const char *dir, bs_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    bs_st_writer *w = bs_st_writer_new();
    int rc = 0;
    for (int i = 0; i < t->params.n && !rc; i++)
        rc = bs_st_writer_add(w, t->params.p[i].name, "F32", t->params.p[i].n_dims, t->params.p[i].shape, t->params.p[i].w, err);
    if (!rc) rc = bs_st_writer_write(w, path, err);
    bs_st_writer_free(w);
    return rc;
}
static double toy_flops(const bs_train_task *t, int n) { const toy *m = t->impl; return 2.0 * m->D * m->V * n; }
static void toy_free(bs_train_task *t) {
    toy *m = t->impl;
    free(m->h); free(m->logits); free(m->dlogits); free(m);
    bs_param_set_free(&t->params);
    free(t);
}

int toy_task_new(bs_train_task **out, int vocab, int dim, uint64_t init_seed, bs_err *err) {
    bs_train_task *t = calloc(1, sizeof *t);
    toy *m = calloc(1, sizeof *m);
    if (!t || !m) { free(t); free(m); return bs_fail(err, "out of memory"); }
    m->V = vocab; m->D = dim;
    m->h = malloc(sizeof(float) * dim); m->logits = malloc(sizeof(float) * vocab); m->dlogits = malloc(sizeof(float) * vocab);
    t->kind = "toy"; t->impl = m;
    t->loss_grad = toy_grad; t->loss_eval = toy_eval; t->export_model = toy_export; t->flops_forward = toy_flops; t->free = toy_free;
    int64_t se[2] = { vocab, dim }, sg[1] = { dim }, sw[2] = { dim, vocab }, sb[1] = { vocab };
    if (bs_param_add(&t->params, "embed.weight", 2, se, 1, 1, err) < 0 || bs_param_add(&t->params, "gain", 1, sg, 0, 0, err) < 0 ||
        bs_param_add(&t->params, "head.weight", 2, sw, 1, 1, err) < 0 || bs_param_add(&t->params, "head.bias", 1, sb, 1, 0, err) < 0) {
        toy_free(t);
        return -1;
    }
    bs_rng r; bs_rng_seed(&r, init_seed);
    for (int i = 0; i < t->params.n; i++)
        for (int64_t j = 0; j < t->params.p[i].n; j++)
            t->params.p[i].w[j] = i == 1 ? 1.0f + 0.01f * (float)(j % 3) : (float)((bs_rng_uniform(&r) - 0.5) * 0.2);
    *out = t;
    return 0;
}
