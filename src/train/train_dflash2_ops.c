// DFlash 2's training ops (train_dflash2_ops.h).
#include <math.h>
#include <stddef.h>
#include "train/train_dflash2_ops.h"

void bs_op_dyn_conv_fwd(float *y, const float *x, int n, int dim, int block, int taps, const float *base, const float *dyn,
                        int dyn_stride, int group, int acc) {
    const int G = dim / group;
    for (int t = 0; t < n; t++) {
        const float *d = dyn + (size_t)t * dyn_stride;
        const int reach = t % block;
        for (int c = 0; c < dim; c++) {
            float s = 0;
            for (int tau = 0; tau < taps && tau <= reach; tau++)   // fmaf in tap order: the engine's cpu_dyn_conv exactly
                s = fmaf(base[(size_t)tau * dim + c] + d[tau * G + c / group], x[(size_t)(t - tau) * dim + c], s);
            y[(size_t)t * dim + c] = acc ? y[(size_t)t * dim + c] + s : s;
        }
    }
}

void bs_op_dyn_conv_bwd(float *dx, float *dbase, float *ddyn, const float *dy, const float *x, const float *base, const float *dyn,
                        int n, int dim, int block, int taps, int dyn_stride, int group) {
    const int G = dim / group;
    // Rows in order, taps in order: dx[t] first gets tap 0 of row t, then tap 1 of row t + 1, ... so with the
    // identity kernel (tap 0 = 1, the rest 0) dx is dy exactly (a fresh DFlash 2's gradients are DFlash's).
    for (int t = 0; t < n; t++) {
        const float *d = dyn + (size_t)t * dyn_stride;
        const float *g = dy + (size_t)t * dim;
        const int reach = t % block;
        for (int tau = 0; tau < taps && tau <= reach; tau++) {
            const float *xs = x + (size_t)(t - tau) * dim;
            float *dxs = dx ? dx + (size_t)(t - tau) * dim : NULL;
            float *dd = ddyn ? ddyn + (size_t)t * dyn_stride + tau * G : NULL;
            for (int k = 0; k < G; k++) {
                float acc = 0;   // d coefficient of the group: sum over its channels
                for (int c = k * group; c < (k + 1) * group; c++) {
                    if (dxs) dxs[c] += (base[(size_t)tau * dim + c] + d[tau * G + k]) * g[c];
                    if (dbase) dbase[(size_t)tau * dim + c] += g[c] * xs[c];
                    acc += g[c] * xs[c];
                }
                if (dd) dd[k] += acc;
            }
        }
    }
}

// (value, id) before (value', id') in the engine's topk order: larger value first, then smaller id.
static int before(float va, int32_t a, float vb, int32_t b) { return va > vb || (va == vb && a < b); }

int bs_selector_candidates(int32_t *cand, float *unary, const float *logits, int V, int K, int32_t label) {
    int m = 0;
    for (int32_t v = 0; v < V; v++) {   // insertion into the K best seen so far
        float x = logits[v];
        if (x != x) x = -INFINITY;
        if (m == K && !before(x, v, unary[K - 1], cand[K - 1])) continue;
        int j = m < K ? m++ : K - 1;
        while (j > 0 && before(x, v, unary[j - 1], cand[j - 1])) { cand[j] = cand[j - 1]; unary[j] = unary[j - 1]; j--; }
        cand[j] = v; unary[j] = x;
    }
    for (int k = 0; k < K; k++) if (cand[k] == label) return k;
    cand[K - 1] = label;
    unary[K - 1] = logits[label];
    return K - 1;
}

float bs_op_selector_ce(float *dz, float *dA_prev, float *dB, const float *z, const float *A_prev, const float *B,
                        const int32_t *cand, const float *unary, int K, int R, int gold, float scale, float *s) {
    float mx = -INFINITY;
    for (int k = 0; k < K; k++) {
        const float *b = B + (size_t)cand[k] * R;
        float e = 0;
        for (int r = 0; r < R; r++) e += A_prev[r] * z[r] * b[r];
        s[k] = unary[k] + e;
        if (s[k] > mx) mx = s[k];
    }
    double sum = 0;
    for (int k = 0; k < K; k++) sum += exp((double)s[k] - mx);
    float lse = mx + (float)log(sum), ce = lse - s[gold];
    if (!dz && !dA_prev && !dB) return ce;
    for (int k = 0; k < K; k++) {
        float ds = scale * ((float)(exp((double)s[k] - lse)) - (k == gold));   // d ce / d s_k, scaled
        const float *b = B + (size_t)cand[k] * R;
        float *db = dB ? dB + (size_t)cand[k] * R : NULL;
        for (int r = 0; r < R; r++) {
            float az = A_prev[r] * z[r];
            if (db) db[r] += ds * az;
            if (dz) dz[r] += ds * A_prev[r] * b[r];
            if (dA_prev) dA_prev[r] += ds * z[r] * b[r];
        }
    }
    return ce;
}
