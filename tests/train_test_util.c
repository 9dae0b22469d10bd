// Helpers for the training tests (train_test_util.h).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "train_test_util.h"

void tt_scale_weights(bs_train_task *t, float factor) {
    for (int i = 0; i < t->params.n; i++) {
        bs_param *p = &t->params.p[i];
        if (!p->trainable) continue;   // a drafter's frozen copies of the target's embedding and head stay equal to it
        for (int64_t k = 0; k < p->n; k++)
            p->w[k] = p->n_dims >= 2 && p->shape[0] > 1 ? p->w[k] * factor : p->w[k] + 0.3f * sinf(1.7f * k + i);
    }
}

static double eval(bs_train_task *t, const bs_train_seq *seq, uint64_t seed, int *bad) {
    bs_rng r; bs_rng_seed(&r, seed);
    bs_loss_terms terms; bs_err err = {0};
    if (t->loss_eval(t, seq, &r, &terms, &err)) { *bad = 1; fprintf(stderr, "  loss_eval: %s\n", err.msg); }
    return terms.loss;
}

int tt_fd_check_task(bs_train_task *t, const bs_train_seq *seq, uint64_t seed, int per_tensor, double tol, char *msg, size_t cap) {
    bs_param_zero_grad(&t->params);
    bs_rng r; bs_rng_seed(&r, seed);
    bs_loss_terms terms; bs_err err = {0};
    if (t->loss_grad(t, seq, 1.0f, &r, &terms, &err)) { snprintf(msg, cap, "loss_grad: %s", err.msg); return -1; }
    int bad = 0;
    double l0 = eval(t, seq, seed, &bad);
    if (bad || fabs(l0 - terms.loss) > 1e-6 * (1 + fabs(l0))) { snprintf(msg, cap, "loss_eval %.9g != loss_grad's %.9g", l0, terms.loss); return -1; }
    for (int i = 0; i < t->params.n; i++) {
        bs_param *p = &t->params.p[i];
        if (!p->trainable) continue;
        int64_t arg = 0;
        double gmax = 0;
        for (int64_t k = 0; k < p->n; k++) if (fabs(p->g[k]) > gmax) { gmax = fabs(p->g[k]); arg = k; }
        if (gmax == 0) { snprintf(msg, cap, "%s: gradient is all zero", p->name); return -1; }
        for (int c = 0; c < per_tensor && c < p->n; c++) {
            int64_t k = c == 0 ? arg : (int64_t)((c * 7919ull + i * 104729ull) % (uint64_t)p->n);
            float keep = p->w[k];
            double h = 2e-3 * (fabs(keep) > 1 ? fabs(keep) : 1);   // small: the L1 term has kinks where p_draft = p_target
            p->w[k] = keep + (float)h; double lp = eval(t, seq, seed, &bad);
            p->w[k] = keep - (float)h; double lm = eval(t, seq, seed, &bad);
            p->w[k] = keep;
            double fd = (lp - lm) / (2 * h);
            if (bad || fabs(fd - p->g[k]) > tol * gmax + 2e-4) {
                snprintf(msg, cap, "%s[%lld]: finite difference %.6g, backward %.6g (max |grad| %.3g)", p->name, (long long)k, fd, p->g[k], gmax);
                return -1;
            }
        }
    }
    return 0;
}
