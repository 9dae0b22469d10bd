// The device sampler (CUDA sample_rows / accept_sampled, cuda_sample.cu) against the host sampler whose
// semantics it implements (src/spec/sampler.c, verify.c), on rows of the shapes users meet: random,
// flat, peaked, tied and masked logits, vocabularies of 12 to 151,936 tokens, every processing step.
//   - distributions: every probability within 4e-6 relative of the host's (fp32, other summation
//     order; device expf vs the host's polynomial), the same kept tokens;
//   - draws: the same token as the host draws from its own distribution at the same uniform;
//   - the same bits on a second run and in place (probs aliasing logits);
//   - acceptance: the same accepted count and emitted token as bs_accept_sampled_u on the same p, q,
//     drafts and uniforms.
// Skipped with the reason where no GPU is usable.
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "harness.h"
#include "test_util_models.h"
#include "backend/backend.h"
#include "spec/sampler.h"
#include "spec/verify.h"
#include "util/rng.h"

static bs_backend *sample_be(void) {
    static bs_backend *be; static int tried; static const char *why;
    if (!tried) { tried = 1; be = tu_cuda_open(&why); }
    if (!be) bs_test_skip(why);
    return be;
}

enum { ROW_RANDOM, ROW_FLAT, ROW_PEAKED, ROW_TIED, ROW_MASKED, ROW_KINDS };
static void fill_row(float *l, int V, int kind, bs_rng *rng) {
    for (int i = 0; i < V; i++) {
        double u = bs_rng_uniform(rng);
        switch (kind) {
        case ROW_RANDOM: l[i] = (float)(6 * u - 3); break;
        case ROW_FLAT: l[i] = 0.25f; break;
        case ROW_PEAKED: l[i] = (float)(2 * u) + (i % 997 == 3 ? 14.0f : 0.0f); break;
        case ROW_TIED: l[i] = (float)(int)(4 * u); break;               // four levels, many ties
        case ROW_MASKED: l[i] = u < 0.5 ? -INFINITY : (float)(4 * u); break;
        }
    }
}

static int close_rel(float d, float h) { return fabsf(d - h) <= 4e-6f * h + 1e-30f; }

TEST(cuda_sample_rows_vs_host) {
    bs_backend *be = sample_be();
    if (!be) return;
    const bs_sampling cfgs[] = {
        { 1.0f, 0, 1.0f, 0 }, { 0.7f, 50, 1.0f, 0 }, { 1.3f, 0, 0.9f, 0 }, { 0.8f, 40, 0.95f, 0 }, { 1.0f, 1, 1.0f, 0 },
        { 1.0f, 0, 0.5f, 0 }, { 0.6f, 0, 0.999f, 0 }, { 1.0f, 5000, 0.8f, 0 }, { 0.0f, 0, 1.0f, 0 },
    };
    const int sizes[] = { 12, 1000, 151936 };
    bs_rng rng; bs_rng_seed(&rng, 4242);
    bs_err err = {0};
    int draws = 0;
    for (int si = 0; si < 3; si++) {
        const int V = sizes[si], R = ROW_KINDS;
        float *l = malloc(sizeof(float) * R * V), *ph = malloc(sizeof(float) * R * V), *pd = malloc(sizeof(float) * R * V);
        float *pd2 = malloc(sizeof(float) * R * V), *scr = malloc(sizeof(float) * 2 * V);
        float *dl = be->alloc(be, sizeof(float) * R * V, &err), *dp = be->alloc(be, sizeof(float) * R * V, &err);
        CHECK(l && ph && pd && pd2 && scr && dl && dp, "out of memory");
        for (int r = 0; r < R; r++) fill_row(l + (size_t)r * V, V, r, &rng);
        be->upload(be, dl, l, sizeof(float) * R * V);
        for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++) {
            const bs_sampling *s = &cfgs[c];
            double u[ROW_KINDS];
            int32_t id[ROW_KINDS], id2[ROW_KINDS];
            for (int r = 0; r < R; r++) u[r] = bs_rng_uniform(&rng);
            bs_sample_rows(be, s, dp, dl, R, V, u, id);
            be->download(be, pd, dp, sizeof(float) * R * V);
            bs_sample_rows(be, s, dp, dl, R, V, u, id2);
            be->download(be, pd2, dp, sizeof(float) * R * V);
            CHECK(!memcmp(pd, pd2, sizeof(float) * R * V) && !memcmp(id, id2, sizeof id), "V %d config %zu: a second run differs", V, c);
            for (int r = 0; r < R; r++) {
                const float *h = ph + (size_t)r * V, *d = pd + (size_t)r * V;
                bs_sampling_probs(s, l + (size_t)r * V, V, ph + (size_t)r * V, scr);
                for (int i = 0; i < V; i++) {
                    CHECK(isfinite(d[i]) && d[i] >= 0, "V %d config %zu row %d: p[%d] = %g", V, c, r, i, d[i]);
                    if (h[i] < 1e-30f && d[i] < 1e-30f) continue;   // masked tokens: the host keeps e^-87, the device 0
                    CHECK(close_rel(d[i], h[i]), "V %d config %zu (T %.2f top_k %d top_p %.3f) row %d: p[%d] device %.9g host %.9g", V, c,
                          s->temperature, s->top_k, s->top_p, r, i, d[i], h[i]);
                }
                const int32_t want = bs_sample_probs_u(h, V, u[r]);
                CHECK(id[r] == want, "V %d config %zu row %d: device drew %d, the host %d at u = %.17g", V, c, r, id[r], want, u[r]);
                draws++;
            }
            // In place (the engine processes logits where they are): the same bits.
            float *tmp = be->alloc(be, sizeof(float) * R * V, &err);
            CHECK(tmp, "%s", err.msg);
            be->copy(be, tmp, dl, sizeof(float) * R * V);
            bs_sample_rows(be, s, tmp, tmp, R, V, u, id2);
            be->download(be, pd2, tmp, sizeof(float) * R * V);
            be->free(be, tmp);
            CHECK(!memcmp(pd, pd2, sizeof(float) * R * V) && !memcmp(id, id2, sizeof id), "V %d config %zu: in place differs", V, c);
        }
        be->free(be, dl); be->free(be, dp);
        free(l); free(ph); free(pd); free(pd2); free(scr);
    }
    printf("  %d rows' distributions and draws equal the host sampler's\n", draws);
}

// A processed distribution over V tokens: softmax of random logits, a random subset of them zeroed.
static void rand_dist(float *p, int V, bs_rng *rng, double keep) {
    double s = 0;
    for (int i = 0; i < V; i++) { p[i] = bs_rng_uniform(rng) < keep ? (float)exp(3 * bs_rng_uniform(rng)) : 0.0f; s += p[i]; }
    if (s == 0) { p[0] = 1; s = 1; }
    for (int i = 0; i < V; i++) p[i] = (float)(p[i] / s);
}

TEST(cuda_accept_sampled_vs_host) {
    bs_backend *be = sample_be();
    if (!be) return;
    bs_rng rng; bs_rng_seed(&rng, 777);
    bs_err err = {0};
    const int sizes[] = { 12, 1000, 151936 }, trials[] = { 300, 100, 12 };
    int outcomes[3] = { 0 };   // accepted all, rejected, point-mass drafts
    for (int si = 0; si < 3; si++) {
        const int V = sizes[si], NM = 16;
        float *p = malloc(sizeof(float) * (NM + 1) * V), *q = malloc(sizeof(float) * NM * V), *res = malloc(sizeof(float) * V);
        float *dp = be->alloc(be, sizeof(float) * (NM + 1) * V, &err), *dq = be->alloc(be, sizeof(float) * NM * V, &err);
        CHECK(p && q && res && dp && dq, "out of memory");
        for (int t = 0; t < trials[si]; t++) {
            const int n = (int)(bs_rng_u64(&rng) % (NM + 1)), point = t % 4 == 3;
            const double keep = t % 3 == 0 ? 1.0 : 0.3;
            int32_t d[NM];
            double u[NM + 1];
            for (int k = 0; k <= n; k++) rand_dist(p + (size_t)k * V, V, &rng, keep);
            for (int k = 0; k < n; k++) {
                // q close to p (high acceptance) or unrelated (low), the draft drawn from q
                if (t % 2) memcpy(q + (size_t)k * V, p + (size_t)k * V, sizeof(float) * V);
                else rand_dist(q + (size_t)k * V, V, &rng, keep);
                if (t % 2 && V > 1) q[(size_t)k * V + (int)(bs_rng_u64(&rng) % V)] += 0.05f;
                d[k] = bs_sample_probs_u(q + (size_t)k * V, V, bs_rng_uniform(&rng));
            }
            for (int k = 0; k <= n; k++) u[k] = bs_rng_uniform(&rng);
            be->upload(be, dp, p, sizeof(float) * (n + 1) * V);
            if (n) be->upload(be, dq, q, sizeof(float) * n * V);
            int32_t next_h = -1, next_d = -2;
            const int ah = bs_accept_sampled_u(p, point ? NULL : q, d, n, V, u, res, &next_h);
            const int ad = be->accept_sampled(be, dp, point ? NULL : dq, d, n, V, u, &next_d);
            CHECK(ad == ah && next_d == next_h, "V %d trial %d (n %d%s): device accepted %d then %d, the host %d then %d", V, t, n,
                  point ? ", point-mass drafts" : "", ad, next_d, ah, next_h);
            outcomes[point ? 2 : ah == n ? 0 : 1]++;
        }
        be->free(be, dp); be->free(be, dq);
        free(p); free(q); free(res);
    }
    printf("  acceptance outcomes equal the host's: %d all accepted, %d rejections, %d with point-mass drafts\n", outcomes[0], outcomes[1],
           outcomes[2]);
    CHECK(outcomes[0] > 10 && outcomes[1] > 10 && outcomes[2] > 10, "the trials did not cover every outcome");
}
