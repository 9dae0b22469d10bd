#include <math.h>
#include "backend/affine.h"
#include "model/selector.h"
#include "spec/sampler.h"

void bs_selector_walk(const bs_selector *s, int n, const int32_t *cand, const float *unary, const float *z, int32_t anchor,
                      float temperature, const double *u, float *work, int32_t *picks, float *scores, float *q) {
    const int K = s->k, R = s->rank;
    float *w = work, *b = work + R;   // w = A[prev] * z (one slot's bilinear form), b = one candidate's B row
    int32_t prev = anchor;
    for (int p = 0; p < n; p++) {
        const int32_t *c = cand + (size_t)p * K;
        const float *zp = z + (size_t)p * R;
        float sc[1024], *qp = q ? q + (size_t)p * K : NULL;
        bs_mat_row_f32(s->pred, prev, w);
        for (int r = 0; r < R; r++) w[r] *= zp[r];
        int best = 0;
        for (int k = 0; k < K; k++) {
            bs_mat_row_f32(s->succ, c[k], b);
            float edge = 0;
            for (int r = 0; r < R; r++) edge += w[r] * b[r];
            sc[k] = unary[(size_t)p * K + k] + edge;
            if (sc[k] > sc[best]) best = k;
        }
        if (temperature > 0) {
            // softmax(s / T) over the candidates, in double (the largest term is exactly 1), then the draw.
            float qq[1024];
            double mx = sc[0], sum = 0;
            for (int k = 1; k < K; k++) if (sc[k] > mx) mx = sc[k];
            for (int k = 0; k < K; k++) sum += exp(((double)sc[k] - mx) / temperature);
            for (int k = 0; k < K; k++) qq[k] = (float)(exp(((double)sc[k] - mx) / temperature) / sum);
            best = bs_sample_probs_u(qq, K, u[p]);
            if (qp) for (int k = 0; k < K; k++) qp[k] = qq[k];
        } else if (qp) {
            for (int k = 0; k < K; k++) qp[k] = k == best ? 1.0f : 0.0f;
        }
        if (scores) for (int k = 0; k < K; k++) scores[(size_t)p * K + k] = sc[k];
        picks[p] = prev = c[best];
    }
}
