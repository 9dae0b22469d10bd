// As in sampler.c: no FP trap is ever enabled, and without this GCC keeps the compare-select loops scalar.
#pragma GCC optimize ("no-trapping-math")
#include <stddef.h>
#include <string.h>
#include "backend/backend.h"
#include "spec/sampler.h"
#include "spec/verify.h"

int bs_accept_greedy(const int32_t *t, const int32_t *d, int n, int32_t *next) {
    int a = 0;
    while (a < n && d[a] == t[a]) a++;
    *next = t[a];
    return a;
}

int bs_accept_sampled_u(const float *p, const float *q, const int32_t *d, int n, int V, const double *u, float *res, int32_t *next) {
    for (int k = 0; k < n; k++) {
        const float *pk = p + (size_t)k * V;
        const float *qk = q ? q + (size_t)k * V : NULL;
        float px = pk[d[k]], qx = qk ? qk[d[k]] : 1.0f;
        // u < min(1, px/qx) written without the division; qx > 0 whenever d_k was drawn from q.
        if (u[k] * qx < px) continue;
        // The residual max(p - q, 0), written as separate simple loops so that they vectorise.
        if (qk) {
            for (int i = 0; i < V; i++) { float r = pk[i] - qk[i]; res[i] = r > 0 ? r : 0; }
        } else {   // q = onehot(d_k)
            memcpy(res, pk, sizeof(float) * V);
            float r = pk[d[k]] - 1.0f;
            res[d[k]] = r > 0 ? r : 0;
        }
        *next = bs_sum_f32(res, V) > 1e-8 ? bs_sample_probs_u(res, V, u[n]) : bs_sample_probs_u(pk, V, u[n]);
        return k;
    }
    *next = bs_sample_probs_u(p + (size_t)n * V, V, u[n]);
    return n;
}

void bs_accept_sampled_to(bs_backend *be, const float *p, const float *q, const int32_t *d, int n, int V, const double *u,
                          float *res, int32_t *out) {
    if (be->accept_sampled_to) { be->accept_sampled_to(be, p, q, d, n, V, u, out); return; }
    out[0] = bs_accept_sampled_u(p, q, d, n, V, u, res, &out[1]);
}

int bs_accept_sampled_on(bs_backend *be, const float *p, const float *q, const int32_t *d, int n, int V, const double *u,
                         float *res, int32_t *next) {
    if (be->accept_sampled) return be->accept_sampled(be, p, q, d, n, V, u, next);
    return bs_accept_sampled_u(p, q, d, n, V, u, res, next);
}

int bs_verify_rows_sampled(bs_backend *be, const bs_sampling *smp, float *logits, const float *q, const int32_t *d, int n, int V,
                           const double *u, float *res, int32_t *next) {
    bs_sample_rows(be, smp, logits, logits, n + 1, V, NULL, NULL);
    return bs_accept_sampled_on(be, logits, q, d, n, V, u, res, next);
}
