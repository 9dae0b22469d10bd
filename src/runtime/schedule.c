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

// The candidates of the sequences with confidences, ranked; *rows0 / *tau0: the forward's rows and the
// expected tokens before any of them is admitted (every anchor, the prompt rows, and the blocks of
// sequences without confidences, which verify in full).
static int candidates(const bs_sched_args *a, const bs_sched_in *in, int R, bs_sched_cand *cand, int *rows0, double *tau0) {
    int m = 0, rows = R + a->extra_rows;
    for (int r = 0; r < R; r++) {
        if (!in[r].conf) { rows += in[r].n; continue; }
        double s = 1;
        for (int j = 1; j <= in[r].n; j++) {
            s *= in[r].conf[j - 1];
            if (!(s > 0)) break;   // 0 (or NaN): this draft and every later one survive with probability 0
            cand[m++] = (bs_sched_cand){ s, r, j };
        }
    }
    qsort(cand, m, sizeof *cand, by_survival);
    *rows0 = rows; *tau0 = R;
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

// Tokens per second of a step that yields tau expected tokens from a forward of `rows` rows.
static double throughput(const bs_sched_args *a, double tau, int rows) { return tau / (a->t_fixed + 1 / bs_sps_at(a->sps, a->n_sps, rows)); }

// Algorithm 1 along the ranked candidates: admitting one adds a row and a_{r,j} expected tokens; Theta =
// tokens / step time (= tokens x SPS(rows) when t_fixed is 0, the paper's form). early_break: stop at the first candidate that does not raise Theta (the paper's rule,
// what makes it lossless within a step); else walk the whole path and keep its best point. Returns how many
// of the ranked candidates the chosen point admits.
static int best_prefix(const bs_sched_args *a, const bs_sched_cand *cand, int m, int rows0, double tau0, int early_break) {
    double tau = tau0, best = throughput(a, tau0, rows0);
    int keep = 0;
    for (int i = 0; i < m; i++) {
        tau += cand[i].a;
        double theta = throughput(a, tau, rows0 + i + 1);
        if (theta > best) { best = theta; keep = i + 1; }
        else if (early_break) break;
    }
    return keep;
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
        for (int r = 0; r < R; r++) if (in[r].conf) l[r] = 0;
        m = candidates(a, in, R, cand, &rows0, &tau0);
        int keep = a->mode == BS_SCHED_ASYNC && a->budget >= 0 ? (a->budget < m ? a->budget : m)
                                                               : best_prefix(a, cand, m, rows0, tau0, 1);
        // The admitted candidates are the first `keep` of the ranking: per sequence, positions 1..l_r.
        for (int i = 0; i < keep; i++) if (cand[i].j > l[cand[i].r]) l[cand[i].r] = cand[i].j;
    }
    for (int r = 0; r < R; r++) total += l[r];
    return total;
}

int bs_sched_plan_budget(const bs_sched_args *a, const bs_sched_in *in, int R, bs_sched_cand *cand) {
    int rows0;
    double tau0;
    int m = candidates(a, in, R, cand, &rows0, &tau0);
    return best_prefix(a, cand, m, rows0, tau0, 0);
}
