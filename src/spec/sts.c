// Sequential Temperature Scaling: the fit, ECE and reliability bins (spec/sts.h).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "spec/sts.h"

#define GRID 121                 // log-spaced temperatures over [T_MIN, T_MAX]: 1.08x apart
#define A_CLAMP 1e-12            // predictions kept inside (0, 1) for the log loss

const char *bs_sts_status_name(bs_sts_status s) {
    switch (s) {
    case BS_STS_FITTED: return "fitted";
    case BS_STS_NO_DATA: return "no data";
    case BS_STS_TOO_FEW: return "too few samples";
    case BS_STS_NO_SURVIVORS: return "no survivors";
    case BS_STS_ALL_SURVIVED: return "all survived";
    case BS_STS_FLAT: return "logits all zero";
    }
    return "?";
}

static double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }
static int valid(const bs_sts_data *d, int r, int k) { return !d->n_valid || k < d->n_valid[r]; }

double bs_sts_ece(const double *a, const uint8_t *y, int n, int bins, bs_sts_bin *out) {
    if (bins < 1) bins = 1;
    double *sp = calloc((size_t)bins * 2, sizeof(double));
    int *cnt = calloc((size_t)bins, sizeof(int));
    double ece = 0;
    if (!sp || !cnt) { free(sp); free(cnt); return NAN; }
    for (int i = 0; i < n; i++) {
        double p = a[i] < 1e-8 ? 1e-8 : a[i] > 1 - 1e-8 ? 1 - 1e-8 : a[i];
        int b = (int)(p * bins);
        if (b >= bins) b = bins - 1;
        sp[2 * b] += p; sp[2 * b + 1] += y[i]; cnt[b]++;
    }
    for (int b = 0; b < bins; b++) {
        double pred = cnt[b] ? sp[2 * b] / cnt[b] : 0, obs = cnt[b] ? sp[2 * b + 1] / cnt[b] : 0;
        if (n > 0) ece += (double)cnt[b] / n * fabs(pred - obs);
        if (out) out[b] = (bs_sts_bin){ (double)b / bins, (double)(b + 1) / bins, cnt[b], pred, obs };
    }
    free(sp); free(cnt);
    return ece;
}

int bs_sts_cumulative(const bs_sts_data *d, const double *T, int k, double *a, uint8_t *lab) {
    int m = 0;
    for (int r = 0; r < d->n_rounds; r++) {
        if (!valid(d, r, k)) continue;
        double p = 1;
        for (int i = 0; i <= k; i++) p *= sigmoid(d->z[(size_t)r * d->K + i] / (T ? T[i] : 1.0));
        a[m] = p; lab[m++] = d->y[(size_t)r * d->K + k];
    }
    return m;
}

// Mean BCE of P_i sigmoid(z_i / T) against y_i over n samples.
static double nll(const double *P, const float *z, const uint8_t *y, int n, double T) {
    double s = 0;
    for (int i = 0; i < n; i++) {
        double a = P[i] * sigmoid(z[i] / T);
        if (a < A_CLAMP) a = A_CLAMP;
        if (a > 1 - A_CLAMP) a = 1 - A_CLAMP;
        s -= y[i] ? log(a) : log1p(-a);
    }
    return n ? s / n : 0;
}

// The temperature minimising nll over [T_MIN, T_MAX]: the best of a log grid, then golden-section search on
// log T between its neighbours (the loss need not be convex in T, so the grid picks the basin first).
static double search_T(const double *P, const float *z, const uint8_t *y, int n, int *at_bound, int *flat) {
    const double lo = log(BS_STS_T_MIN), hi = log(BS_STS_T_MAX), step = (hi - lo) / (GRID - 1);
    int best = 0;
    double bl = INFINITY, wl = -INFINITY;
    for (int g = 0; g < GRID; g++) {
        double l = nll(P, z, y, n, exp(lo + g * step));
        if (l < bl) { bl = l; best = g; }
        if (l > wl) wl = l;
    }
    *flat = !(wl - bl > 1e-12);
    *at_bound = best == 0 || best == GRID - 1;
    if (*flat || *at_bound) return exp(lo + best * step);
    const double gr = (sqrt(5.0) - 1) / 2;
    double a = lo + (best - 1) * step, b = lo + (best + 1) * step;
    double c = b - gr * (b - a), e = a + gr * (b - a);
    double fc = nll(P, z, y, n, exp(c)), fe = nll(P, z, y, n, exp(e));
    while (b - a > 1e-7) {
        if (fc <= fe) { b = e; e = c; fe = fc; c = b - gr * (b - a); fc = nll(P, z, y, n, exp(c)); }
        else { a = c; c = e; fc = fe; e = a + gr * (b - a); fe = nll(P, z, y, n, exp(e)); }
    }
    return exp((a + b) / 2);
}

int bs_sts_fit(const bs_sts_data *d, int min_samples, int bins, double *T, bs_sts_pos *pos, bs_err *err) {
    if (d->K < 1 || d->n_rounds < 0 || (d->n_rounds && (!d->z || !d->y)))
        return bs_fail(err, "calibration: bad STS input (%d rounds, %d positions)", d->n_rounds, d->K);
    int N = d->n_rounds;
    double *P = malloc(sizeof(double) * (N ? N : 1)), *P1 = malloc(sizeof(double) * (N ? N : 1));
    double *a = malloc(sizeof(double) * (N ? N : 1));
    float *zk = malloc(sizeof(float) * (N ? N : 1));
    uint8_t *yk = malloc(N ? N : 1);
    int *idx = malloc(sizeof(int) * (N ? N : 1));
    if (!P || !P1 || !a || !zk || !yk || !idx) {
        free(P); free(P1); free(a); free(zk); free(yk); free(idx);
        return bs_fail(err, "calibration: out of memory for %d rounds", N);
    }
    // P[r]: prod_{i<k} sigmoid(z_i / T_i) with the fitted temperatures; P1[r]: the same with every T = 1.
    for (int r = 0; r < N; r++) P[r] = P1[r] = 1;
    for (int k = 0; k < d->K; k++) {
        bs_sts_pos *p = &pos[k];
        memset(p, 0, sizeof *p);
        int m = 0;
        double conf = 0;
        for (int r = 0; r < N; r++) {
            if (!valid(d, r, k)) continue;
            idx[m] = r; zk[m] = d->z[(size_t)r * d->K + k]; yk[m] = d->y[(size_t)r * d->K + k];
            p->survived += yk[m]; conf += sigmoid(zk[m]);
            m++;
        }
        p->n = m;
        p->mean_conf = m ? conf / m : 0;
        p->survival = m ? (double)p->survived / m : 0;
        // The prefixes of the rounds at this position, gathered, then the fit.
        double *Pk = a;
        for (int i = 0; i < m; i++) Pk[i] = P[idx[i]];
        double Tk = 1;
        int flat = 0;
        if (m == 0) p->status = BS_STS_NO_DATA;
        else if (m < min_samples) p->status = BS_STS_TOO_FEW;
        else if (p->survived == 0) p->status = BS_STS_NO_SURVIVORS;
        else if (p->survived == m) p->status = BS_STS_ALL_SURVIVED;
        else {
            Tk = search_T(Pk, zk, yk, m, &p->at_bound, &flat);
            if (flat) { p->status = BS_STS_FLAT; Tk = 1; p->at_bound = 0; }
        }
        T[k] = p->T = Tk;
        // Figures before (all T = 1) and after, on the same rounds.
        p->nll_after = nll(Pk, zk, yk, m, Tk);
        for (int i = 0; i < m; i++) Pk[i] = P1[idx[i]];
        p->nll_before = nll(Pk, zk, yk, m, 1.0);
        for (int i = 0; i < m; i++) { a[i] = P1[idx[i]] * sigmoid(zk[i]); p->mean_before += a[i]; }
        p->ece_before = bs_sts_ece(a, yk, m, bins, NULL);
        for (int i = 0; i < m; i++) { a[i] = P[idx[i]] * sigmoid(zk[i] / Tk); p->mean_after += a[i]; }
        p->ece_after = bs_sts_ece(a, yk, m, bins, NULL);
        if (m) { p->mean_before /= m; p->mean_after /= m; }
        for (int r = 0; r < N; r++) {
            if (!valid(d, r, k)) continue;
            double zr = d->z[(size_t)r * d->K + k];
            P[r] *= sigmoid(zr / Tk); P1[r] *= sigmoid(zr);
        }
    }
    free(P); free(P1); free(a); free(zk); free(yk); free(idx);
    return 0;
}
