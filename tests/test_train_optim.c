// AdamW, the learning-rate schedule and gradient clipping against references computed here in double
// precision from torch's formulas (docs/training.md, "Optimiser and schedule").
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "train/optim.h"
#include "util/rng.h"

// Reference AdamW (torch.optim.AdamW semantics) on one tensor, in double.
static void ref_adamw(double *w, double *m, double *v, const float *g, int64_t n, int64_t t, double lr, double wd,
                      int decay) {
    double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    for (int64_t j = 0; j < n; j++) {
        if (decay) w[j] -= lr * wd * w[j];
        m[j] = b1 * m[j] + (1 - b1) * g[j];
        v[j] = b2 * v[j] + (1 - b2) * (double)g[j] * g[j];
        double mhat = m[j] / (1 - pow(b1, t)), vhat = v[j] / (1 - pow(b2, t));
        w[j] -= lr * mhat / (sqrt(vhat) + eps);
    }
}

TEST(train_adamw_matches_reference) {
    bs_param_set ps = { 0 };
    bs_err err;
    int64_t sh_a[2] = { 300, 700 }, sh_b[1] = { 33 }, sh_c[2] = { 5, 7 };   // a spans several update chunks
    CHECK(bs_param_add(&ps, "a.weight", 2, sh_a, 1, 1, &err) == 0, "%s", err.msg);
    CHECK(bs_param_add(&ps, "b.bias", 1, sh_b, 1, 0, &err) == 1, "%s", err.msg);
    CHECK(bs_param_add(&ps, "frozen.weight", 2, sh_c, 0, 1, &err) == 2, "%s", err.msg);
    bs_rng r; bs_rng_seed(&r, 7);
    double *rw[2], *rm[2], *rv[2];
    for (int i = 0; i < 3; i++) for (int64_t j = 0; j < ps.p[i].n; j++) ps.p[i].w[j] = (float)(bs_rng_uniform(&r) * 2 - 1);
    float *frozen_before = malloc(sizeof(float) * ps.p[2].n);
    memcpy(frozen_before, ps.p[2].w, sizeof(float) * ps.p[2].n);
    for (int i = 0; i < 2; i++) {
        rw[i] = malloc(sizeof(double) * ps.p[i].n); rm[i] = calloc(ps.p[i].n, sizeof(double)); rv[i] = calloc(ps.p[i].n, sizeof(double));
        for (int64_t j = 0; j < ps.p[i].n; j++) rw[i][j] = ps.p[i].w[j];
    }
    bs_adamw_cfg cfg = bs_adamw_defaults(1e-2, 0.1);
    bs_adamw o;
    CHECK(bs_adamw_init(&o, &ps, &cfg, &err) == 0, "%s", err.msg);
    CHECK(o.m[2] == NULL && o.v[2] == NULL, "a frozen tensor got moments");
    double lrs[4] = { 1e-2, 5e-3, 2e-3, 1e-3 };
    for (int step = 0; step < 4; step++) {
        for (int i = 0; i < 2; i++)   // gradients of mixed scale, some tiny (eps matters there)
            for (int64_t j = 0; j < ps.p[i].n; j++) ps.p[i].g[j] = (float)((bs_rng_uniform(&r) - 0.5) * (j % 5 == 0 ? 1e-7 : 3.0));
        bs_adamw_step(&o, lrs[step]);
        for (int i = 0; i < 2; i++) ref_adamw(rw[i], rm[i], rv[i], ps.p[i].g, ps.p[i].n, step + 1, lrs[step], 0.1, ps.p[i].decay);
    }
    CHECK(o.t == 4, "step count %lld", (long long)o.t);
    double worst = 0;
    for (int i = 0; i < 2; i++)
        for (int64_t j = 0; j < ps.p[i].n; j++) {
            double d = fabs(ps.p[i].w[j] - rw[i][j]) / (fabs(rw[i][j]) + 1e-3);
            if (d > worst) worst = d;
        }
    CHECK(worst < 2e-6, "AdamW weights differ from the double reference by %g (relative)", worst);
    CHECK(memcmp(frozen_before, ps.p[2].w, sizeof(float) * ps.p[2].n) == 0, "a frozen tensor changed");
    for (int i = 0; i < 2; i++) { free(rw[i]); free(rm[i]); free(rv[i]); }
    free(frozen_before);
    bs_adamw_free(&o);
    bs_param_set_free(&ps);
}

// Weight decay only where param.decay: with zero gradients, only the decayed tensor shrinks.
TEST(train_adamw_decay_only_where_marked) {
    bs_param_set ps = { 0 };
    bs_err err;
    int64_t sh[1] = { 4 };
    CHECK(bs_param_add(&ps, "w", 1, sh, 1, 1, &err) == 0, "%s", err.msg);
    CHECK(bs_param_add(&ps, "norm", 1, sh, 1, 0, &err) == 1, "%s", err.msg);
    for (int i = 0; i < 2; i++) for (int j = 0; j < 4; j++) ps.p[i].w[j] = 1.0f;
    bs_adamw_cfg cfg = bs_adamw_defaults(0.5, 0.1);
    bs_adamw o;
    CHECK(bs_adamw_init(&o, &ps, &cfg, &err) == 0, "%s", err.msg);
    bs_adamw_step(&o, 0.5);
    CHECK_NEAR(ps.p[0].w[0], 1.0 - 0.5 * 0.1, 1e-7, "decayed tensor");
    CHECK(ps.p[1].w[0] == 1.0f, "a tensor without decay changed: %g", ps.p[1].w[0]);
    bs_adamw_free(&o);
    bs_param_set_free(&ps);
}

TEST(train_lr_schedule_values) {
    // W = int(0.04 * 100) = 4: lr (t+1)/4 for t < 4, then cosine over the 96 remaining steps.
    CHECK(bs_warmup_steps(0.04, 100) == 4, "%lld", (long long)bs_warmup_steps(0.04, 100));
    CHECK(bs_warmup_steps(0.29, 100) == 28, "Python's int(0.29 * 100) is 28, got %lld", (long long)bs_warmup_steps(0.29, 100));
    CHECK(bs_warmup_steps(0, 100) == 0, "no warmup");
    double lr = 6e-4;
    CHECK_NEAR(bs_lr_schedule(lr, 0, 4, 100), 1.5e-4, 1e-15);
    CHECK_NEAR(bs_lr_schedule(lr, 2, 4, 100), 4.5e-4, 1e-15);
    CHECK_NEAR(bs_lr_schedule(lr, 3, 4, 100), 6e-4, 1e-15);
    CHECK_NEAR(bs_lr_schedule(lr, 4, 4, 100), 6e-4, 1e-15);                  // cosine starts at the peak
    CHECK_NEAR(bs_lr_schedule(lr, 52, 4, 100), 3e-4, 1e-15);                 // half way: (1 + cos(pi/2)) / 2
    CHECK_NEAR(bs_lr_schedule(lr, 28, 4, 100), 6e-4 * 0.5 * (1 + cos(M_PI * 0.25)), 1e-15);
    CHECK_NEAR(bs_lr_schedule(lr, 99, 4, 100), 6e-4 * 0.5 * (1 + cos(M_PI * 95.0 / 96.0)), 1e-15);
    CHECK(bs_lr_schedule(lr, 99, 4, 100) > 0 && bs_lr_schedule(lr, 99, 4, 100) < 2e-7, "last step near 0");
    CHECK_NEAR(bs_lr_schedule(lr, 0, 0, 10), 6e-4, 1e-15);                   // no warmup: cosine from step 0
}

TEST(train_grad_clip) {
    bs_param_set ps = { 0 };
    bs_err err;
    int64_t sh[1] = { 1 }, big[1] = { 100000 };
    CHECK(bs_param_add(&ps, "x", 1, sh, 1, 1, &err) == 0, "%s", err.msg);
    CHECK(bs_param_add(&ps, "y", 1, big, 1, 1, &err) == 1, "%s", err.msg);
    ps.p[0].g[0] = 3;
    ps.p[1].g[99999] = 4;   // the global norm is 5, over both tensors
    CHECK_NEAR(bs_grad_norm(&ps), 5.0, 1e-12);
    double pre = bs_clip_grad_norm(&ps, 1.0);
    CHECK_NEAR(pre, 5.0, 1e-12, "returns the norm before clipping");
    CHECK_NEAR(ps.p[0].g[0], 3 / (5 + 1e-6), 1e-6);
    CHECK_NEAR(ps.p[1].g[99999], 4 / (5 + 1e-6), 1e-6);
    CHECK_NEAR(bs_grad_norm(&ps), 1.0, 1e-6);
    pre = bs_clip_grad_norm(&ps, 1.5);   // below the limit: untouched
    CHECK(ps.p[0].g[0] == (float)(3 / (5 + 1e-6)), "a gradient under the limit was scaled");
    bs_param_set_free(&ps);
}
