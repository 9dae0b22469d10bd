// The sampler: processed distributions (temperature -> top-k -> top-p) on hand-checked vectors, and
// draws that follow them (chi-square over many draws, fixed seeds).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "test_util_models.h"
#include "spec/sampler.h"

TEST(sampler_processed_distribution) {
    float l[6] = { 2.0f, 1.0f, 1.0f, 0.0f, -1.0f, 3.0f }, p[6];
    CHECK(bs_argmax(l, 6) == 5);
    float tie[3] = { 1, 4, 4 };
    CHECK(bs_argmax(tie, 3) == 1, "ties go to the first index");
    bs_sampling g = { 0 };
    CHECK(bs_sampling_probs(&g, l, 6, p, NULL) == 1 && p[5] == 1.0f && p[0] == 0.0f, "greedy is one-hot at the argmax");
    // Plain softmax at T = 1 and T = 0.5.
    bs_sampling s1 = { 1.0f, 0, 1.0f, 0 };
    bs_sampling_probs(&s1, l, 6, p, NULL);
    double z = 0; for (int i = 0; i < 6; i++) z += exp(l[i]);
    for (int i = 0; i < 6; i++) CHECK_NEAR(p[i], exp(l[i]) / z, 1e-6);
    bs_sampling s2 = { 0.5f, 0, 1.0f, 0 };
    bs_sampling_probs(&s2, l, 6, p, NULL);
    z = 0; for (int i = 0; i < 6; i++) z += exp(2 * l[i]);
    for (int i = 0; i < 6; i++) CHECK_NEAR(p[i], exp(2 * l[i]) / z, 1e-6);
    // top-k 2 keeps {5, 0}; top-k 3 keeps the tied pair at the boundary too ({5, 0, 1, 2}).
    bs_sampling k2 = { 1.0f, 2, 1.0f, 0 };
    CHECK(bs_sampling_probs(&k2, l, 6, p, NULL) == 2 && p[1] == 0 && p[3] == 0);
    CHECK_NEAR(p[5], exp(3.0) / (exp(3.0) + exp(2.0)), 1e-6);
    bs_sampling k3 = { 1.0f, 3, 1.0f, 0 };
    CHECK(bs_sampling_probs(&k3, l, 6, p, NULL) == 4 && p[1] > 0 && p[2] > 0 && p[3] == 0, "ties with the k-th value are kept");
    // top-p: the sorted probabilities are ~.63 .23 .09 .09 .03 .01 -> 0.5 keeps one, 0.8 keeps two, 0.9 four (tie).
    bs_sampling p5 = { 1.0f, 0, 0.5f, 0 }, p8 = { 1.0f, 0, 0.8f, 0 }, p9 = { 1.0f, 0, 0.9f, 0 };
    CHECK(bs_sampling_probs(&p5, l, 6, p, NULL) == 1 && p[5] == 1.0f);
    CHECK(bs_sampling_probs(&p8, l, 6, p, NULL) == 2 && p[0] > 0);
    CHECK(bs_sampling_probs(&p9, l, 6, p, NULL) == 4);
    double sum = 0; for (int i = 0; i < 6; i++) sum += p[i];
    CHECK_NEAR(sum, 1.0, 1e-6);
}

TEST(sampler_draws_follow_distribution) {
    enum { V = 50, N = 200000 };
    float l[V];
    bs_rng r; bs_rng_seed(&r, 1);
    for (int i = 0; i < V; i++) l[i] = (float)(bs_rng_uniform(&r) * 4 - 2);
    bs_sampling cfgs[] = { { 1.0f, 0, 1.0f, 1 }, { 0.7f, 10, 1.0f, 2 }, { 1.2f, 0, 0.7f, 3 } };
    for (int c = 0; c < 3; c++) {
        long counts[V] = { 0 };
        double expect[V];   // the brute-force reference, not the sampler under test
        tu_ref_probs(&cfgs[c], l, V, expect, NULL);
        bs_rng rng; bs_rng_seed(&rng, cfgs[c].seed);
        float probs[V], scratch[2 * V];
        for (int n = 0; n < N; n++) counts[bs_sample_logits(&cfgs[c], l, V, probs, scratch, &rng)]++;
        CHECK(tu_impossible_draws(counts, expect, V) == 0, "drew tokens the filters removed");
        int df;
        double pv = tu_chi2_gof(counts, expect, V, N, &df);
        CHECK(pv > 1e-4, "config %d: draws do not follow the processed distribution (p = %g, df %d)", c, pv, df);
        // Power check: the same draws against the unfiltered softmax must be rejected when a filter is on.
        if (c > 0) {
            bs_sampling plain = { 1.0f, 0, 1.0f, 0 };
            tu_ref_probs(&plain, l, V, expect, NULL);
            CHECK(tu_chi2_gof(counts, expect, V, N, &df) < 1e-6, "the chi-square test cannot tell distributions apart");
        }
    }
}

// The draw is the inverse CDF in index order at u * total, exactly (to rounding) wherever u falls: rows of
// 1 to 151,936 tokens (one to ~300 of the draw's 512-token blocks, a partial last one), zeros inside and
// at the ends, all-zero blocks, unnormalised weights (a residual), u = 0 and u just below 1.
TEST(sampler_draw_is_the_inverse_cdf) {
    const int sizes[] = { 1, 7, 511, 512, 513, 1500, 151936 };
    bs_rng r; bs_rng_seed(&r, 99);
    int checked = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        const int V = sizes[si];
        float *p = malloc(sizeof(float) * V);
        long double *cdf = malloc(sizeof(long double) * V);
        CHECK(p && cdf, "out of memory");
        for (int rep = 0; rep < 4; rep++) {
            for (int i = 0; i < V; i++) {
                double x = bs_rng_uniform(&r);
                p[i] = rep == 0 ? 1.0f / V : (x < 0.3 || (i / 512) % 3 == 1) ? 0.0f : (float)(x * x * 3);
            }
            if (rep == 3 && V > 1) { p[0] = 0; p[V - 1] = 0; }
            long double acc = 0;
            int first = -1, last = -1;
            for (int i = 0; i < V; i++) { acc += p[i]; cdf[i] = acc; if (p[i] > 0) { if (first < 0) first = i; last = i; } }
            const double us[] = { 0.0, 0.5, 0.25, 0.999, 1.0 - 0x1p-53, bs_rng_uniform(&r), bs_rng_uniform(&r), bs_rng_uniform(&r) };
            for (size_t k = 0; k < sizeof us / sizeof *us; k++) {
                const int32_t t = bs_sample_probs_u(p, V, us[k]);
                if (last < 0) { CHECK(t == 0, "an all-zero row drew %d", t); continue; }
                CHECK(t >= 0 && t < V && p[t] > 0, "V %d: drew %d, which has no mass", V, t);
                const long double target = us[k] * acc, eps = 1e-9L * acc;
                const long double lo = t > 0 ? cdf[t - 1] : 0;
                CHECK(target >= lo - eps && (target < cdf[t] + eps || t == last), "V %d u %.17g: drew %d, whose CDF step [%.12Lg, %.12Lg) misses %.12Lg",
                      V, us[k], t, lo / acc, cdf[t] / acc, target / acc);
                if (us[k] == 0.0) CHECK(t == first, "u = 0 drew %d, not the first positive token %d", t, first);
                checked++;
            }
        }
        free(p); free(cdf);
    }
    printf("  %d draws at their CDF steps\n", checked);
}

static int cmp_desc_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

// top-p against a brute-force reference (sort everything, walk the mass in double): the same kept set
// on flat, peaked, tied and mixed distributions, large and small vocabularies, top_p from 0.05 to
// 0.999. (A difference is allowed only where the reference's running mass is within 1e-6 of top_p at
// the boundary: the two sum in different orders.) The fast path buckets by float bits and, for a
// bucket of more than 4096 tokens, by the next 8 bits, so the flat cases exercise both levels.
TEST(sampler_top_p_matches_sorting) {
    enum { VMAX = 151936 };
    float *l = malloc(sizeof(float) * VMAX), *p0 = malloc(sizeof(float) * VMAX), *p = malloc(sizeof(float) * VMAX);
    float *srt = malloc(sizeof(float) * VMAX);
    CHECK(l && p0 && p && srt);
    bs_rng r; bs_rng_seed(&r, 7);
    static const double tps[] = { 0.05, 0.5, 0.8, 0.9, 0.999 };
    static const int vocabs[] = { 151936, 5000, 7 };
    for (int vi = 0; vi < 3; vi++)
        for (int shape = 0; shape < 4; shape++)
            for (int ti = 0; ti < 5; ti++) {
                int V = vocabs[vi];
                for (int i = 0; i < V; i++) {
                    double u = bs_rng_uniform(&r);
                    l[i] = shape == 0 ? (float)(u - 0.5)                                 // flat
                         : shape == 1 ? (float)(u * 6 - 3) + (i % 997 == 0 ? 8.0f : 0)   // a few strong ones
                         : shape == 2 ? (float)(int)(u * 4)                               // 4 values: many exact ties
                                      : (float)(u * 30 - 15);                             // wide range of exponents
                }
                bs_sampling full = { 0.9f, 0, 1.0f, 0 }, tp = { 0.9f, 0, (float)tps[ti], 0 };
                bs_sampling_probs(&full, l, V, p0, NULL);
                bs_sampling_probs(&tp, l, V, p, NULL);
                memcpy(srt, p0, sizeof(float) * V);
                qsort(srt, V, sizeof(float), cmp_desc_f);
                double acc = 0, at_thr = 0;
                float thr = srt[0];
                for (int i = 0; i < V; i++) { thr = srt[i]; acc += srt[i]; if (acc >= (float)tps[ti]) break; }
                at_thr = acc;
                int diff = 0;
                for (int i = 0; i < V; i++) diff += (p0[i] >= thr) != (p[i] > 0);
                CHECK(diff == 0 || fabs(at_thr - (float)tps[ti]) < 1e-6 || fabs(at_thr - thr - (float)tps[ti]) < 1e-6,
                      "V %d shape %d top_p %g: %d tokens kept differently from the sorted reference", V, shape, tps[ti], diff);
            }
    free(l); free(p0); free(p); free(srt);
}

// A row's distribution does not depend on how its chunks were scheduled: the pool (bs_sampling_probs)
// and one thread (a row of bs_sampling_probs_rows, whose rows already run in parallel) give the same bits.
TEST(sampler_chunks_same_bits_any_threads) {
    enum { V = 151936 };
    float *l = malloc(sizeof(float) * 3 * V), *a = malloc(sizeof(float) * 3 * V), *b = malloc(sizeof(float) * 3 * V);
    CHECK(l && a && b);
    bs_rng r; bs_rng_seed(&r, 3);
    for (int i = 0; i < 3 * V; i++) l[i] = (float)(bs_rng_uniform(&r) * (i < V ? 1 : i < 2 * V ? 8 : 30)) + (i % 1013 == 0 ? 6.0f : 0);
    const bs_sampling cfgs[] = { { 0.8f, 0, 1.0f, 0 }, { 0.7f, 40, 1.0f, 0 }, { 0.9f, 0, 0.9f, 0 }, { 1.1f, 100, 0.5f, 0 } };
    for (int c = 0; c < 4; c++) {
        bs_sampling_probs_rows(&cfgs[c], l, 3, V, a);
        for (int row = 0; row < 3; row++) {
            bs_sampling_probs(&cfgs[c], l + (size_t)row * V, V, b + (size_t)row * V, NULL);
            CHECK(memcmp(a + (size_t)row * V, b + (size_t)row * V, sizeof(float) * V) == 0, "config %d row %d: chunked on the pool != one thread", c, row);
        }
    }
    free(l); free(a); free(b);
}

// bs_sampling_probs (and the row-parallel bs_sampling_probs_rows) against the brute-force reference
// (tu_ref_probs: sort, softmax in double, cut) with every filter combination on, including all three at
// once: the kept sets are the same and every probability agrees to 2e-6 relative (float vs double). Rows:
// random, flat, a few strong tokens, four-level ties (at the top-k and top-p boundaries), -inf masks; 7 to
// 151,936 tokens. A top-p cut whose running mass is within 1e-6 of p (where float rounding may decide it)
// is skipped and counted; the test fails if that leaves fewer than 90% of the cases checked.
TEST(sampler_matches_bruteforce_reference) {
    const bs_sampling cfgs[] = {
        { 1.0f, 0, 1.0f, 0 }, { 0.6f, 0, 1.0f, 0 }, { 1.0f, 5, 1.0f, 0 }, { 1.0f, 0, 0.7f, 0 },
        { 0.7f, 5, 0.9f, 0 }, { 1.3f, 20, 0.5f, 0 }, { 1.0f, 3, 0.99f, 0 }, { 0.5f, 1000, 0.8f, 0 },
        { 2.0f, 40, 0.95f, 0 }, { 1.0f, 1, 0.5f, 0 }, { 0.9f, 7, 0.01f, 0 }, { 1.1f, 100000, 0.3f, 0 },
        { 0.0f, 5, 0.5f, 0 },
    };
    const int vocabs[] = { 7, 50, 1000, 151936 };
    enum { SHAPES = 5 };
    bs_rng r; bs_rng_seed(&r, 2024);
    int checked = 0, ambiguous = 0;
    for (int vi = 0; vi < 4; vi++) {
        const int V = vocabs[vi];
        float *l = malloc(sizeof(float) * V), *p = malloc(sizeof(float) * V), *pr = malloc(sizeof(float) * V);
        double *ref = malloc(sizeof(double) * V);
        CHECK(l && p && pr && ref, "out of memory");
        for (int shape = 0; shape < SHAPES; shape++) {
            for (int i = 0; i < V; i++) {
                double u = bs_rng_uniform(&r);
                l[i] = shape == 0 ? (float)(u * 8 - 4)
                     : shape == 1 ? (float)(u * 0.5)
                     : shape == 2 ? (float)(u * 3) + (i % 13 == 5 ? 6.0f : 0)
                     : shape == 3 ? (float)(int)(u * 4)
                                  : (u < 0.3 ? -INFINITY : (float)(u * 10 - 5));
            }
            for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++) {
                // The large vocabulary with a few configurations only (the reference sorts it each time).
                if (V > 1000 && c % 4 != 0 && c != 4 && c != 5) continue;
                double boundary;
                int kept_ref = tu_ref_probs(&cfgs[c], l, V, ref, &boundary);
                if (boundary < 1e-6) { ambiguous++; continue; }
                int kept = bs_sampling_probs(&cfgs[c], l, V, p, NULL);
                bs_sampling_probs_rows(&cfgs[c], l, 1, V, pr);
                // A -inf logit gets e^-87 / sum (< 1e-37) from the host's clamped exp, not 0: counted as removed.
                int diff = 0, first = -1, kept_p = 0, positive = 0;
                kept_ref = 0;
                for (int i = 0; i < V; i++) {
                    int bad = (ref[i] > 0) != (p[i] > 1e-30f) || fabs(p[i] - ref[i]) > 2e-6 * ref[i] + 1e-30 || pr[i] != p[i];
                    if (bad && first < 0) first = i;
                    diff += bad; kept_p += p[i] > 1e-30f; kept_ref += ref[i] > 0; positive += p[i] > 0;
                }
                if (diff && getenv("BS_DEBUG_REF")) {
                    for (int i = 0; i < V; i++) if (ref[i] > 0 || p[i] > 1e-30f) printf("   %d l %.9g p %.9g ref %.9g\n", i, l[i], p[i], ref[i]);
                    printf("   boundary %g\n", boundary);
                }
                CHECK(diff == 0 && kept_p == kept_ref && kept == positive, "V %d shape %d config %zu (T %.2f top_k %d top_p %.2f): %d tokens "
                      "differ from the reference (kept %d, reference %d, returned %d; first: token %d p %.9g rows %.9g reference %.9g)", V, shape, c,
                      cfgs[c].temperature, cfgs[c].top_k, cfgs[c].top_p, diff, kept_p, kept_ref, kept, first, first >= 0 ? p[first] : 0,
                      first >= 0 ? pr[first] : 0, first >= 0 ? ref[first] : 0);
                checked++;
            }
        }
        free(l); free(p); free(pr); free(ref);
    }
    printf("  %d rows equal to the reference, %d skipped at an ambiguous top-p boundary\n", checked, ambiguous);
    CHECK(ambiguous * 10 < checked, "too many ambiguous cases (%d of %d)", ambiguous, checked + ambiguous);
}

// The reference itself on a hand-worked row, so that a bug in it cannot make the test above agree with a
// bug in the sampler: logits {2, 1, 1, 0, -1, 3} at T = 1, top-k 3 keeps {5, 0, 1, 2} (a tie at the
// k-th), whose softmax is e^{3,2,1,1} / (e^3 + e^2 + 2e); top-p 0.8 then keeps {5, 0} (mass .63 + .23).
TEST(sampler_reference_hand_worked) {
    const float l[6] = { 2.0f, 1.0f, 1.0f, 0.0f, -1.0f, 3.0f };
    double ref[6];
    bs_sampling k3 = { 1.0f, 3, 1.0f, 0 }, k3p8 = { 1.0f, 3, 0.8f, 0 }, p5 = { 1.0f, 0, 0.5f, 0 }, g = { 0 };
    CHECK(tu_ref_probs(&k3, l, 6, ref, NULL) == 4 && ref[3] == 0 && ref[4] == 0);
    double z = exp(3.0) + exp(2.0) + 2 * exp(1.0);
    CHECK_NEAR(ref[5], exp(3.0) / z, 1e-12);
    CHECK_NEAR(ref[1], exp(1.0) / z, 1e-12);
    CHECK(tu_ref_probs(&k3p8, l, 6, ref, NULL) == 2 && ref[1] == 0 && ref[2] == 0);
    CHECK_NEAR(ref[5], exp(3.0) / (exp(3.0) + exp(2.0)), 1e-12);
    CHECK(tu_ref_probs(&p5, l, 6, ref, NULL) == 1 && ref[5] == 1.0);
    CHECK(tu_ref_probs(&g, l, 6, ref, NULL) == 1 && ref[5] == 1.0);
    // Four tied tokens: top-p 0.3 admits the first (mass .25), needs another (.5 >= .3), and keeps the
    // other two because they tie with the last admitted.
    const float t4[5] = { 1, 1, 1, 1, -30 };
    bs_sampling p3 = { 1.0f, 0, 0.3f, 0 };
    CHECK(tu_ref_probs(&p3, t4, 5, ref, NULL) == 4 && ref[4] == 0);
}
