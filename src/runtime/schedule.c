// The confidence schedulers (schedule.h). Why each is lossless is in docs/scheduling.md; in short, the
// decision to verify draft k of a sequence may use c_1..c_k (c_k is a function of d_1..d_k-1, not of d_k),
// other sequences' values (drawn from their own RNGs) and anything from earlier steps, never d_k or later.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/schedule.h"

static const char *const names[] = { "threshold", "none", "fixed", "alg1", "async" };

const char *bs_sched_name(bs_sched_mode m) { return (unsigned)m < sizeof names / sizeof *names ? names[m] : NULL; }

int bs_sched_parse(const char *name, bs_sched_mode *m) {
    for (unsigned i = 0; i < sizeof names / sizeof *names; i++)
        if (name && !strcmp(name, names[i])) { *m = (bs_sched_mode)i; return 0; }
    return -1;
}

double bs_sps_at(const double *sps, int n_sps, int rows) {
    if (rows < 1) rows = 1;
    if (rows <= n_sps) return sps[rows - 1];
    if (n_sps == 1) return sps[0];
    double t1 = 1 / sps[n_sps - 1], slope = t1 - 1 / sps[n_sps - 2];
    if (slope < 0) slope = 0;
    return 1 / (t1 + slope * (rows - n_sps));
}

// Ranked by prefix survival, highest first; ties by sequence then position, so that within a sequence
// (a_{r,j} is non-increasing in j) position j always comes before j + 1: every admitted set is a prefix.
static int by_survival(const void *x, const void *y) {
    const bs_sched_cand *p = x, *q = y;
    if (p->a != q->a) return p->a > q->a ? -1 : 1;
    if (p->r != q->r) return p->r < q->r ? -1 : 1;
    return p->j < q->j ? -1 : p->j > q->j;
}

// The candidates of the sequences that are cut by survival, ranked; *rows0 / *tau0: the forward's rows and
// the expected tokens before any of them is admitted (every anchor, the prompt rows, and the blocks of
// sequences that verify in full: without confidences their drafts add no expected token, with them (a
// plan) their survivals' sum).
static int candidates(const bs_sched_args *a, const bs_sched_in *in, int R, bs_sched_cand *cand, int *rows0, double *tau0) {
    int m = 0, rows = R + a->extra_rows;
    double tau = R;
    for (int r = 0; r < R; r++) {
        double s = 1;
        if (!in[r].conf || in[r].whole) {
            rows += in[r].n;
            for (int j = 0; in[r].conf && j < in[r].n; j++) tau += s *= in[r].conf[j];
            continue;
        }
        for (int j = 1; j <= in[r].n; j++) {
            s *= in[r].conf[j - 1];
            if (!(s > 0)) break;   // 0 (or NaN): this draft and every later one survive with probability 0
            cand[m++] = (bs_sched_cand){ s, r, j };
        }
    }
    qsort(cand, m, sizeof *cand, by_survival);
    *rows0 = rows; *tau0 = tau;
    return m;
}

void bs_sched_convexify(double *sps, int n) {
    if (n < 3) return;
    int *hull = malloc(sizeof(int) * (size_t)n), h = 0;
    if (!hull) return;   // out of memory: the measured table as it is
    // Andrew's monotone chain, lower half, over the points (b, t_b), b = 1..n (x already sorted).
    for (int b = 0; b < n; b++) {
        while (h >= 2) {
            int i = hull[h - 2], j = hull[h - 1];
            double ti = 1 / sps[i], tj = 1 / sps[j], tb = 1 / sps[b];
            if ((tj - ti) * (b - i) >= (tb - ti) * (j - i)) h--;   // j lies on or above the chord i..b
            else break;
        }
        hull[h++] = b;
    }
    for (int k = 0; k + 1 < h; k++) {
        int i = hull[k], j = hull[k + 1];
        double ti = 1 / sps[i], tj = 1 / sps[j];
        for (int b = i + 1; b < j; b++) sps[b] = 1 / (ti + (tj - ti) * (b - i) / (j - i));
    }
    free(hull);
}

double bs_sched_forward_time(const bs_sched_args *a, int rows, int seqs) {
    double t = 1 / bs_sps_at(a->sps, a->n_sps, rows);
    int K = a->block;
    if (!a->sps1 || a->n_sps1 < 1 || K < 2 || seqs < 2) return t;
    double t1 = 1 / bs_sps_at(a->sps1, a->n_sps1, seqs), gap = t1 - 1 / bs_sps_at(a->sps, a->n_sps, seqs);
    if (gap > 0) {
        double share = (seqs - (double)rows / K) / (seqs - (double)seqs / K);
        t += gap * (share < 0 ? 0 : share > 1 ? 1 : share);
    }
    return rows >= seqs && t < t1 ? t1 : t;
}

// Tokens per second of a step that yields tau expected tokens from a forward of `rows` rows over `seqs`
// sequences.
static double scale_of(const bs_sched_args *a) { return a->t_scale > 0 ? a->t_scale : 1; }

static double throughput(const bs_sched_args *a, double tau, int rows, int seqs) {
    return tau / (a->t_fixed + scale_of(a) * bs_sched_forward_time(a, rows, seqs));
}

// Algorithm 1 along the ranked candidates: admitting one adds a row and a_{r,j} expected tokens; Theta =
// tokens / step time (= tokens x SPS(rows) when t_fixed is 0, the paper's form). early_break: stop at the
// first candidate that does not raise Theta (the paper's rule, what makes it lossless within a step); else
// walk the whole path and keep its best point. Returns how many of the ranked candidates the chosen point
// admits; *theta: its value.
static int best_prefix(const bs_sched_args *a, const bs_sched_cand *cand, int m, int rows0, double tau0, int seqs, int early_break,
                       double *theta_out) {
    double tau = tau0, best = throughput(a, tau0, rows0, seqs);
    int keep = 0;
    for (int i = 0; i < m; i++) {
        tau += cand[i].a;
        double theta = throughput(a, tau, rows0 + i + 1, seqs);
        if (theta > best) { best = theta; keep = i + 1; }
        else if (early_break) break;
    }
    if (theta_out) *theta_out = best;
    return keep;
}

// The same arguments over the tables' convex hulls, where the caller has them.
static bs_sched_args on_hull(const bs_sched_args *a) {
    bs_sched_args h = *a;
    if (a->sps_hull) h.sps = a->sps_hull;
    if (a->sps1_hull) h.sps1 = a->sps1_hull;
    return h;
}

int bs_schedule(const bs_sched_args *a, const bs_sched_in *in, int R, int *l, bs_sched_cand *cand) {
    int total = 0;
    for (int r = 0; r < R; r++) {
        int n = in[r].n;
        switch (a->mode) {
        case BS_SCHED_NONE: n = 0; break;
        case BS_SCHED_THRESHOLD:
            if (in[r].conf && in[r].threshold > 0) { int k = 0; while (k < n && in[r].conf[k] >= in[r].threshold) k++; n = k; }
            break;
        default: break;   // fixed; alg1 / async start from every draft for sequences without confidences
        }
        l[r] = n;
    }
    if (bs_sched_needs_sps(a->mode)) {
        int rows0, m;
        double tau0;
        for (int r = 0; r < R; r++) if (in[r].conf && !in[r].whole) l[r] = 0;
        m = candidates(a, in, R, cand, &rows0, &tau0);
        int keep, seqs = R + a->extra_seqs;
        if (a->mode == BS_SCHED_ASYNC && a->budget >= 0) {
            keep = a->budget < m ? a->budget : m;
        } else if (a->all_greedy) {
            // Greedy verification accepts exactly the target's own tokens, so no choice of prefix can bias
            // the output: the whole path's best point over the measured table (its steps included: on the
            // H200 8B shape 8.6 ms at 32 rows, 15.4 at 40) instead of the early break over the hull.
            keep = best_prefix(a, cand, m, rows0, tau0, seqs, 0, NULL);
        } else {
            bs_sched_args h = on_hull(a);
            keep = best_prefix(&h, cand, m, rows0, tau0, seqs, 1, NULL);
        }
        // The admitted candidates are the first `keep` of the ranking: per sequence, positions 1..l_r.
        for (int i = 0; i < keep; i++) if (cand[i].j > l[cand[i].r]) l[cand[i].r] = cand[i].j;
    }
    for (int r = 0; r < R; r++) total += l[r];
    return total;
}

double bs_sched_plan(const bs_sched_args *a, const bs_sched_in *in, int R, bs_sched_cand *cand, int *keep) {
    int rows0;
    double tau0, theta;
    int m = candidates(a, in, R, cand, &rows0, &tau0);
    int k = best_prefix(a, cand, m, rows0, tau0, R + a->extra_seqs, 0, &theta);
    if (keep) *keep = k;
    return theta;
}

int bs_sched_plan_budget(const bs_sched_args *a, const bs_sched_in *in, int R, bs_sched_cand *cand) {
    int keep;
    bs_sched_plan(a, in, R, cand, &keep);
    return keep;
}

int bs_sched_worth_drafting(const bs_sched_args *a, const bs_sched_in *pred, int R, double t_plain_fixed, bs_sched_cand *cand) {
    double spec = bs_sched_plan(a, pred, R, cand, NULL);
    double plain = R / (t_plain_fixed + scale_of(a) * bs_sched_forward_time(a, R + a->extra_rows, R + a->extra_seqs));
    return spec * BS_SKIP_MARGIN >= plain;
}

void bs_step_fit_add(bs_step_fit *f, double x, double y) {
    const double keep = 0.95;
    f->w = keep * f->w + 1;
    f->x = keep * f->x + x; f->y = keep * f->y + y;
    f->xx = keep * f->xx + x * x; f->xy = keep * f->xy + x * y;
}

void bs_step_fit_get(const bs_step_fit *f, double *t_fixed, double *t_scale) {
    *t_fixed = 0; *t_scale = 1;
    if (!(f->w > 0) || !(f->x > 0)) return;
    double mx = f->x / f->w, my = f->y / f->w;
    double sxx = f->xx / f->w - mx * mx, sxy = f->xy / f->w - mx * my;
    // The pull towards 1 weighs as much as steps spread 10% around their mean x.
    double prior = 0.01 * mx * mx, b = (sxy + prior) / ((sxx > 0 ? sxx : 0) + prior);
    if (b < 0.25) b = 0.25;
    if (b > 16) b = 16;
    double a = my - b * mx;
    if (a < 0) { a = 0; b = my / mx; }   // steps faster than the tables say: all of it scales
    *t_fixed = a; *t_scale = b;
}
