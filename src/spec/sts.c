// Sequential Temperature Scaling: the fit, ECE and reliability bins (spec/sts.h).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "spec/sts.h"

#define GRID 121                 // log-spaced temperatures over [T_MIN, T_MAX]: 1.08x apart (25 x 41 biases with a bias)
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

double bs_sts_ece_floor(const double *a, int n, int bins, int draws, uint64_t seed, double *sd) {
    uint8_t *y = malloc(n > 0 ? (size_t)n : 1);
    if (!y || draws < 1) { free(y); if (sd) *sd = NAN; return NAN; }
    double sum = 0, sum2 = 0;
    uint64_t s = seed;
    for (int d = 0; d < draws; d++) {
        for (int i = 0; i < n; i++) {
            // splitmix64: a uniform in [0, 1) from the top 53 bits
            uint64_t z = (s += 0x9E3779B97F4A7C15ull);
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            z ^= z >> 31;
            y[i] = (double)(z >> 11) * 0x1.0p-53 < a[i];
        }
        double e = bs_sts_ece(a, y, n, bins, NULL);
        sum += e; sum2 += e * e;
    }
    free(y);
    double mean = sum / draws;
    if (sd) *sd = draws > 1 ? sqrt(fmax(0, (sum2 - draws * mean * mean) / (draws - 1))) : 0;
    return mean;
}

int bs_sts_cumulative(const bs_sts_data *d, const double *T, const double *B, int k, double *a, uint8_t *lab) {
    int m = 0;
    for (int r = 0; r < d->n_rounds; r++) {
        if (!valid(d, r, k)) continue;
        double p = 1;
        for (int i = 0; i <= k; i++) p *= sigmoid(d->z[(size_t)r * d->K + i] / (T ? T[i] : 1.0) + (B ? B[i] : 0.0));
        a[m] = p; lab[m++] = d->y[(size_t)r * d->K + k];
    }
    return m;
}

// The rounds at one position: prefixes P (products of the earlier positions' calibrated confidences),
// raw logits z and labels y.
typedef struct fit_set { const double *P; const float *z; const uint8_t *y; int n; } fit_set;

// Mean BCE of P_i sigmoid(z_i / T + b) against y_i, T = exp(u).
static double nll(const fit_set *f, double u, double b) {
    double s = 0, iT = exp(-u);
    for (int i = 0; i < f->n; i++) {
        double a = f->P[i] * sigmoid(f->z[i] * iT + b);
        if (a < A_CLAMP) a = A_CLAMP;
        if (a > 1 - A_CLAMP) a = 1 - A_CLAMP;
        s -= f->y[i] ? log(a) : log1p(-a);
    }
    return f->n ? s / f->n : 0;
}

// Golden-section search along one coordinate over [lo, hi] (which: 0 = u, 1 = c), the other fixed. The bias is
// searched as c = b + mean(z) / T: centring the logits decouples the two coordinates (with b itself, T and b
// trade off along a narrow valley whenever the logits' mean is far from 0, and one-coordinate steps crawl).
static double nll_c(const fit_set *f, double u, double c, double zbar) { return nll(f, u, c - zbar * exp(-u)); }
static double golden(const fit_set *f, int which, double lo, double hi, double other, double zbar) {
    const double gr = (sqrt(5.0) - 1) / 2;
    double a = lo, b = hi, c = b - gr * (b - a), e = a + gr * (b - a);
#define F(x) (which ? nll_c(f, other, (x), zbar) : nll_c(f, (x), other, zbar))
    double fc = F(c), fe = F(e);
    while (b - a > 1e-7) {
        if (fc <= fe) { b = e; e = c; fe = fc; c = b - gr * (b - a); fc = F(c); }
        else { a = c; c = e; fc = fe; e = a + gr * (b - a); fe = F(e); }
    }
#undef F
    return (a + b) / 2;
}

static double clampd(double x, double lo, double hi) { return x < lo ? lo : x > hi ? hi : x; }

// Minimises nll: T over [T_MIN, T_MAX] (log scale) and, with fit_bias, b over [B_MIN, B_MAX] (else b = 0).
// A grid picks the basin (the loss need not be convex), then golden-section searches refine it, one coordinate
// at a time, within two grid steps of the current point. *flat: the loss does not depend on T (logits all 0;
// with fit_bias only b is then fitted, at T = 1). *at_bound: the optimum is an end of a range.
static void search(const fit_set *f, int fit_bias, double *T, double *B, int *at_bound, int *flat) {
    const double ulo = log(BS_STS_T_MIN), uhi = log(BS_STS_T_MAX);
    const int nu = fit_bias ? 25 : GRID, nb = fit_bias ? 41 : 1;
    const double su = (uhi - ulo) / (nu - 1), sb = nb > 1 ? (BS_STS_B_MAX - BS_STS_B_MIN) / (nb - 1) : 0;
    int zero = 1;
    double zbar = 0;
    for (int i = 0; i < f->n; i++) { zero = zero && f->z[i] == 0; zbar += f->z[i]; }
    zbar = fit_bias && f->n ? zbar / f->n : 0;   // without a bias c = b = 0 throughout
    *flat = zero; *at_bound = 0;
    double u = 0, b = 0;
    if (zero && !fit_bias) { *T = 1; *B = 0; return; }
    double best = INFINITY;
    for (int i = 0; i < (zero ? 1 : nu); i++)
        for (int j = 0; j < nb; j++) {
            double ui = zero ? 0 : ulo + i * su, bj = nb > 1 ? BS_STS_B_MIN + j * sb : 0, l = nll(f, ui, bj);
            if (l < best) { best = l; u = ui; b = bj; }
        }
    double c = b + zbar * exp(-u);
    for (int it = 0; it < (fit_bias ? 60 : 1); it++) {
        double u0 = u, c0 = c;
        if (!zero) u = golden(f, 0, clampd(u - 2 * su, ulo, uhi), clampd(u + 2 * su, ulo, uhi), c, zbar);
        if (fit_bias) c = golden(f, 1, c - 2 * sb, c + 2 * sb, u, zbar);
        if (fabs(u - u0) < 1e-6 && fabs(c - c0) < 1e-6) break;
    }
    b = c - zbar * exp(-u);
    *at_bound = !zero && (u - ulo < 1e-6 || uhi - u < 1e-6);
    if (fit_bias && (b < BS_STS_B_MIN || b > BS_STS_B_MAX)) { b = clampd(b, BS_STS_B_MIN, BS_STS_B_MAX); *at_bound = 1; }
    *T = exp(u); *B = b;
}

int bs_sts_fit(const bs_sts_data *d, const bs_sts_opts *o, double *T, double *B, bs_sts_pos *pos, bs_err *err) {
    if (d->K < 1 || d->n_rounds < 0 || (d->n_rounds && (!d->z || !d->y)))
        return bs_fail(err, "calibration: bad STS input (%d rounds, %d positions)", d->n_rounds, d->K);
    int N = d->n_rounds;
    double *P = malloc(sizeof(double) * (N ? N : 1)), *P1 = malloc(sizeof(double) * (N ? N : 1));
    double *Pk = malloc(sizeof(double) * (N ? N : 1)), *a = malloc(sizeof(double) * (N ? N : 1));
    float *zk = malloc(sizeof(float) * (N ? N : 1));
    uint8_t *yk = malloc(N ? N : 1);
    int *idx = malloc(sizeof(int) * (N ? N : 1));
    if (!P || !P1 || !Pk || !a || !zk || !yk || !idx) {
        free(P); free(P1); free(Pk); free(a); free(zk); free(yk); free(idx);
        return bs_fail(err, "calibration: out of memory for %d rounds", N);
    }
    // P[r]: prod_{i<k} of the calibrated confidences so far; P1[r]: the same raw (every T = 1, b = 0).
    for (int r = 0; r < N; r++) P[r] = P1[r] = 1;
    for (int k = 0; k < d->K; k++) {
        bs_sts_pos *p = &pos[k];
        memset(p, 0, sizeof *p);
        int m = 0;
        double conf = 0;
        for (int r = 0; r < N; r++) {
            if (!valid(d, r, k)) continue;
            idx[m] = r; zk[m] = d->z[(size_t)r * d->K + k]; yk[m] = d->y[(size_t)r * d->K + k];
            Pk[m] = P[r];
            p->survived += yk[m]; conf += sigmoid(zk[m]);
            m++;
        }
        p->n = m;
        p->mean_conf = m ? conf / m : 0;
        p->survival = m ? (double)p->survived / m : 0;
        fit_set f = { Pk, zk, yk, m };
        double Tk = 1, bk = 0;
        int flat = 0;
        if (m == 0) p->status = BS_STS_NO_DATA;
        else if (m < o->min_samples) p->status = BS_STS_TOO_FEW;
        else if (p->survived == 0) p->status = BS_STS_NO_SURVIVORS;
        else if (p->survived == m) p->status = BS_STS_ALL_SURVIVED;
        else {
            search(&f, o->fit_bias, &Tk, &bk, &p->at_bound, &flat);
            if (flat && !o->fit_bias) p->status = BS_STS_FLAT;
        }
        T[k] = p->T = Tk;
        if (B) B[k] = bk;
        p->b = bk;
        // Figures after and before (raw: T = 1, b = 0), on the same rounds.
        p->nll_after = nll(&f, log(Tk), bk);
        for (int i = 0; i < m; i++) { a[i] = Pk[i] * sigmoid(zk[i] / Tk + bk); p->mean_after += a[i]; }
        p->ece_after = bs_sts_ece(a, yk, m, o->bins, NULL);
        for (int i = 0; i < m; i++) Pk[i] = P1[idx[i]];
        p->nll_before = nll(&f, 0, 0);
        for (int i = 0; i < m; i++) { a[i] = Pk[i] * sigmoid(zk[i]); p->mean_before += a[i]; }
        p->ece_before = bs_sts_ece(a, yk, m, o->bins, NULL);
        if (m) { p->mean_before /= m; p->mean_after /= m; }
        for (int i = 0; i < m; i++) { P[idx[i]] *= sigmoid(zk[i] / Tk + bk); P1[idx[i]] *= sigmoid(zk[i]); }
    }
    free(P); free(P1); free(Pk); free(a); free(zk); free(yk); free(idx);
    return 0;
}
