// Sampled speculative decoding with the trained built-in drafters (models/, issue 24): the first three
// tokens after a prompt are distributed exactly as the target's own. The random drafters of
// test_spec_drafters.c accept little; trained ones accept most drafts, so the accept path (and, with
// draft-max 1, the bonus token after an accepted draft) carries most of the mass here.
//
// The vocabulary is 8192, so the exact joint is enumerated over top-k 4 filtering (at most 4 x 4 x 4 outcomes;
// the target's filtered distribution from the engine's own logits through the brute-force reference
// tu_ref_probs), and the counts of seeded runs are held to it with a chi-square test.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/builtin_model.h"
#include "harness.h"
#include "spec/spec_loop.h"
#include "test_util_models.h"

enum { K = 4, RUNS = 800 };   // ~12 runs per outcome: enough to see a wrong bonus row or acceptance rule (test_spec_drafters.c
                               // covers the rules themselves with 20,000 runs on small models)

typedef struct { int32_t ids[3]; double p; } outcome;

// Every outcome of three filtered draws after prompt (probability > 0), by enumeration.
static int joint(bs_engine *e, const int32_t *prompt, int n_prompt, const bs_sampling *smp, outcome *out, bs_err *err) {
    int V = e->cfg.vocab_size, n = 0;
    bs_kv_cache kv;
    if (bs_kv_init(&kv, e->kv_pool, 64, err)) return -1;
    float *lg_be = e->be->alloc(e->be, sizeof(float) * V, err), *lg = malloc(sizeof(float) * V);
    double *p[3];
    for (int i = 0; i < 3; i++) p[i] = malloc(sizeof(double) * V);
    bs_fwd_out fo = { .logits = lg_be };
#define ROW(dst) (e->be->download(e->be, lg, lg_be, sizeof(float) * V), tu_ref_probs(smp, lg, V, dst, NULL))
    if (bs_qwen3_forward(&e->target, &kv, prompt, n_prompt, &fo, err)) { n = -1; goto out; }
    ROW(p[0]);
    for (int a = 0; a < V; a++) {
        if (p[0][a] <= 0) continue;
        bs_kv_rollback(&kv, n_prompt, err);
        bs_qwen3_forward(&e->target, &kv, &a, 1, &fo, err);
        ROW(p[1]);
        for (int b = 0; b < V; b++) {
            if (p[1][b] <= 0) continue;
            bs_kv_rollback(&kv, n_prompt + 1, err);
            bs_qwen3_forward(&e->target, &kv, &b, 1, &fo, err);
            ROW(p[2]);
            for (int c = 0; c < V; c++)
                if (p[2][c] > 0) out[n++] = (outcome){ { a, b, c }, p[0][a] * p[1][b] * p[2][c] };
        }
    }
#undef ROW
out:
    for (int i = 0; i < 3; i++) free(p[i]);
    free(lg);
    e->be->free(e->be, lg_be);
    bs_kv_free(&kv);
    return n;
}

static void builtin_sampling(int *failed_, int draft_max) {
    char target[1024], drafter[1024];
    if (cli_builtin_model(target, drafter, sizeof target) || !drafter[0]) SKIP("no built-in model (models/ beside the build folder)");
    bs_engine *e;
    bs_err err = {0};
    CHECK(bs_engine_open(&e, target, "cpu", &err) == 0, "%s", err.msg);
    const int32_t prompt[2] = { 636, 419 };   // "static int" in the built-in tokenizer
    bs_sampling smp = { 1.0f, K, 1.0f, 0 };
    outcome *oc = malloc(sizeof(outcome) * K * K * K);
    int n = joint(e, prompt, 2, &smp, oc, &err);
    CHECK(n > 8, "the joint has %d outcomes: %s", n, err.msg);
    long *counts = calloc((size_t)n, sizeof(long)), other = 0;
    double *expect = malloc(sizeof(double) * n);
    for (int i = 0; i < n; i++) expect[i] = oc[i].p;
    bs_session s;
    bs_drafter *d;
    CHECK(bs_session_init(&s, e, 64, &smp, &err) == 0, "%s", err.msg);
    CHECK(bs_drafter_open_opts(&d, drafter, e, 64, NULL, &err) == 0, "%s", err.msg);
    long acc = 0, drafted = 0;
    for (long r = 0; r < RUNS; r++) {
        bs_rng_seed(&s.rng, 104729ull * r + 11);
        bs_kv_rollback(&s.kv, 0, &err);
        int32_t out[3];
        int got = 0;
        bs_spec_opts o = { .draft_max = draft_max };
        bs_spec_stats st;
        CHECK(bs_generate_spec(&s, d, prompt, 2, 3, &o, out, &got, NULL, NULL, &st, &err) == 0 && got == 3, "run %ld: %s", r, err.msg);
        acc += st.accepted; drafted += st.drafted;
        bs_spec_stats_free(&st);
        int i = 0;
        while (i < n && memcmp(oc[i].ids, out, sizeof out)) i++;
        if (i < n) counts[i]++; else other++;
    }
    int df = 0;
    double pv = tu_chi2_gof(counts, expect, n, RUNS, &df), ar = drafted ? (double)acc / drafted : 0;
    printf("  built-in drafter, T=1 top_k=%d, draft-max %d: %d outcomes, p-value %.3g (df %d), draft acceptance %.2f\n", K, draft_max, n, pv, df, ar);
    CHECK(other == 0, "%ld runs produced a sequence of probability 0 under the target", other);
    CHECK(pv > 1e-4, "sampling with the trained drafter is not distributed as the target (p = %g)", pv);
    CHECK(ar > 0.25, "acceptance %.2f: the trained drafter should accept many drafts here (measured 0.37)", ar);
    d->free(d);
    bs_session_free(&s);
    bs_engine_close(e);
    free(oc); free(counts); free(expect);
}

// draft-max 1: the second token is an accepted draft or a resample, the third the bonus token or the next
// round's (the runs cover both).
TEST(builtin_drafter_sampling_lossless) { builtin_sampling(failed_, 1); }
