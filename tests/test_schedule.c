// The confidence schedulers (src/runtime/schedule.c, docs/scheduling.md): hand-computed admissions of
// every mode, the early break's role (the paper's App. A counterexample, computed exactly), the async
// budget; then the runtime: greedy output under every schedule equals plain decoding for every request of
// a concurrent mixed run, sampled output is batch-invariant where it should be, and the trace-replay
// drafter accepts what its trace says.
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "harness.h"
#include "test_util_models.h"
#include "cli/cost_model.h"
#include "cli/replay_drafter.h"
#include "runtime/runtime.h"

static int plan(bs_sched_mode mode, const double *sps, int n_sps, int extra, int budget, const bs_sched_in *in, int R, int *l) {
    bs_sched_cand cand[256];
    bs_sched_args a = { mode, sps, n_sps, extra, budget };
    return bs_schedule(&a, in, R, l, cand);
}

TEST(sched_names) {
    bs_sched_mode m;
    const char *names[] = { "none", "fixed", "threshold", "alg1", "async" };
    for (int i = 0; i < 5; i++) CHECK(bs_sched_parse(names[i], &m) == 0 && !strcmp(bs_sched_name(m), names[i]), "%s", names[i]);
    CHECK(bs_sched_parse("ALG1", &m) != 0 && bs_sched_parse("", &m) != 0 && bs_sched_parse(NULL, &m) != 0);
    CHECK(bs_sched_name((bs_sched_mode)99) == NULL);
}

// none, fixed, and the threshold cut per request (a request without confidences, or with threshold 0,
// verifies every draft).
TEST(sched_threshold_per_request) {
    float c0[] = { 0.9f, 0.4f, 0.9f }, c1[] = { 0.9f, 0.4f, 0.9f }, c2[] = { 0.9f, 0.96f, 0.2f };
    bs_sched_in in[4] = { { 3, c0, 0.5f }, { 3, c1, 0 }, { 3, c2, 0.95f }, { 3, NULL, 0.5f } };
    int l[4];
    CHECK(plan(BS_SCHED_THRESHOLD, NULL, 0, 0, -1, in, 4, l) == 1 + 3 + 0 + 3);
    CHECK(l[0] == 1 && l[1] == 3 && l[2] == 0 && l[3] == 3, "%d %d %d %d", l[0], l[1], l[2], l[3]);
    CHECK(plan(BS_SCHED_FIXED, NULL, 0, 0, -1, in, 4, l) == 12 && l[0] == 3 && l[2] == 3);
    CHECK(plan(BS_SCHED_NONE, NULL, 0, 0, -1, in, 4, l) == 0 && l[0] == 0 && l[3] == 0);
}

// Two requests, a: (0,1) .9, (0,2) .72, (1,1) .5. Theta: 2 x 10 = 20; +(0,1): 2.9 x 9.5 = 27.55; +(0,2):
// 3.62 x 9 = 32.58; +(1,1): 4.12 x 7 = 28.84 < 32.58: break. l = {2, 0}.
TEST(sched_alg1_hand) {
    double sps[] = { 12, 10, 9.5, 9.0, 7.0 };
    float c0[] = { 0.9f, 0.8f }, c1[] = { 0.5f };
    bs_sched_in in[2] = { { 2, c0, 0 }, { 1, c1, 0 } };
    int l[2];
    CHECK(plan(BS_SCHED_ALG1, sps, 5, 0, -1, in, 2, l) == 2 && l[0] == 2 && l[1] == 0, "%d %d", l[0], l[1]);
    // SPS(5) = 8: 4.12 x 8 = 32.96 > 32.58: (1,1) is admitted too.
    sps[4] = 8.0;
    CHECK(plan(BS_SCHED_ALG1, sps, 5, 0, -1, in, 2, l) == 3 && l[0] == 2 && l[1] == 1, "%d %d", l[0], l[1]);
    // Other rows in the same forward (a prompt chunk of 1 row) shift every step time by one row: start
    // 2 x SPS(3) = 19; +(0,1): 2.9 x 9.0 = 26.1; +(0,2): 3.62 x 8 = 28.96; +(1,1): 4.12 x SPS(6) (past the
    // table: step time 1/8 + (1/8 - 1/9) = 0.13889, SPS 7.2) = 29.66 > 28.96: all three.
    CHECK(plan(BS_SCHED_ALG1, sps, 5, 1, -1, in, 2, l) == 3 && l[0] == 2 && l[1] == 1, "%d %d", l[0], l[1]);
    CHECK_NEAR(bs_sps_at(sps, 5, 6), 7.2, 1e-9);
    CHECK_NEAR(bs_sps_at(sps, 1, 6), 12, 0);           // one entry: flat
    CHECK_NEAR(bs_sps_at(sps, 5, 0), 12, 0);
}

// The early break: Theta dips at the first candidate and rises after it. Algorithm 1 stops at the dip
// (l = 0); the whole path's best point (the async budget's rule, for a later step) is further on.
TEST(sched_alg1_early_break) {
    double sps[] = { 10, 7.6, 7.5, 7.4, 7.3 };
    float c[] = { 0.3f, 1.0f, 1.0f, 1.0f };   // a = .3 at every position: ties within a request keep their order
    bs_sched_in in[1] = { { 4, c, 0 } };
    int l[1];
    bs_sched_cand cand[8];
    bs_sched_args a = { BS_SCHED_ALG1, sps, 5, 0, -1 };
    // Theta: 10; 1.3 x 7.6 = 9.88 (break); 1.6 x 7.5 = 12; 1.9 x 7.4 = 14.06; 2.2 x 7.3 = 16.06.
    CHECK(bs_schedule(&a, in, 1, l, cand) == 0 && l[0] == 0, "%d", l[0]);
    CHECK(bs_sched_plan_budget(&a, in, 1, cand) == 4);
    sps[1] = 7.8;   // 1.3 x 7.8 = 10.14 > 10: no dip, every draft
    CHECK(bs_schedule(&a, in, 1, l, cand) == 4 && l[0] == 4, "%d", l[0]);
}

// A step of greedy sequences takes the whole path's best point over the measured table; one with a sampling
// sequence keeps the early break over the hull. Step times 1 up to 3 rows, then 2.5 (a GEMM tile's step);
// survivals .95^k. Measured: Theta = 2.85 at 3 rows (k = 2), at most 6.73 / 2.5 = 2.69 past the step. The
// hull prices 4 rows at 1.3: 3.71 / 1.3 = 2.854 > 2.8525, so the early break takes k = 3 (4 rows, 2.5 s).
TEST(sched_alg1_greedy_steps_see_the_stairs) {
    double sps[8] = { 1, 1, 1, 0.4, 0.4, 0.4, 0.4, 0.4 }, hull[8];
    memcpy(hull, sps, sizeof sps);
    bs_sched_convexify(hull, 8);
    CHECK_NEAR(1 / hull[3], 1.3, 1e-9);
    float c[7] = { 0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f };
    bs_sched_in in[1] = { { 7, c, 0 } };
    int l[1];
    bs_sched_cand cand[8];
    bs_sched_args a = { BS_SCHED_ALG1, sps, 8, 0, -1 };
    a.sps_hull = hull;
    CHECK(bs_schedule(&a, in, 1, l, cand) == 3 && l[0] == 3, "sampling: early break over the hull: %d", l[0]);
    a.all_greedy = 1;
    CHECK(bs_schedule(&a, in, 1, l, cand) == 2 && l[0] == 2, "greedy: the measured table's best point: %d", l[0]);
    // The plan before the drafts (async budget, whether to draft) reads the measured table as well.
    a.all_greedy = 0;
    CHECK(bs_sched_plan_budget(&a, in, 1, cand) == 2);
}

// Ties between requests go to the lower index; a request with no drafts (plain, or no room) is a row and a
// token; a zero confidence ends its request's candidates.
TEST(sched_alg1_ties_and_empty) {
    double sps[] = { 20, 10, 8, 6 };
    float c0[] = { 0.8f }, c1[] = { 0.8f };
    bs_sched_in in[2] = { { 1, c0, 0 }, { 1, c1, 0 } };
    int l[3];
    // 2 x 10 = 20; +(0,1): 2.8 x 8 = 22.4; +(1,1): 3.6 x 6 = 21.6: break.
    CHECK(plan(BS_SCHED_ALG1, sps, 4, 0, -1, in, 2, l) == 1 && l[0] == 1 && l[1] == 0, "%d %d", l[0], l[1]);
    // r0 {.9}, r1 plain, r2 {.6}: start 3 rows, 3 tokens: 3 x 10 = 30; +(0,1): 3.9 x 9 = 35.1; +(2,1): 4.5 x 8 = 36.
    double s2[] = { 20, 15, 10, 9, 8 };
    float d0[] = { 0.9f }, d2[] = { 0.6f };
    bs_sched_in in3[3] = { { 1, d0, 0 }, { 0, NULL, 0 }, { 1, d2, 0 } };
    CHECK(plan(BS_SCHED_ALG1, s2, 5, 0, -1, in3, 3, l) == 2 && l[0] == 1 && l[1] == 0 && l[2] == 1, "%d %d %d", l[0], l[1], l[2]);
    s2[4] = 7.5;   // 4.5 x 7.5 = 33.75 < 35.1
    CHECK(plan(BS_SCHED_ALG1, s2, 5, 0, -1, in3, 3, l) == 1 && l[0] == 1 && l[2] == 0, "%d %d %d", l[0], l[1], l[2]);
    float z[] = { 0.9f, 0.0f, 0.9f };
    bs_sched_in inz[1] = { { 3, z, 0 } };
    double flat[] = { 10, 10, 10, 10 };
    CHECK(plan(BS_SCHED_ALG1, flat, 4, 0, -1, inz, 1, l) == 1 && l[0] == 1, "%d", l[0]);
}

// A sequence without confidences (DFlash) verifies every draft under alg1 / async; its rows count.
TEST(sched_alg1_without_confidences) {
    double sps[] = { 30, 20, 15, 12, 10, 9 };
    float c1[] = { 0.9f };
    bs_sched_in in[2] = { { 3, NULL, 0 }, { 1, c1, 0 } };
    int l[2];
    // start: 2 + 3 rows, 2 tokens: 2 x 10 = 20; +(1,1): 2.9 x 9 = 26.1.
    CHECK(plan(BS_SCHED_ALG1, sps, 6, 0, -1, in, 2, l) == 4 && l[0] == 3 && l[1] == 1, "%d %d", l[0], l[1]);
    sps[5] = 6;   // 2.9 x 6 = 17.4 < 20
    CHECK(plan(BS_SCHED_ALG1, sps, 6, 0, -1, in, 2, l) == 3 && l[0] == 3 && l[1] == 0, "%d %d", l[0], l[1]);
    CHECK(plan(BS_SCHED_ASYNC, sps, 6, 0, 5, in, 2, l) == 4 && l[0] == 3 && l[1] == 1, "%d %d", l[0], l[1]);
}

// Async: the top K candidates by current prefix survival, no break; K < 0 (no earlier step): Algorithm 1.
// a: (0,1) .9, (1,1) .8, (1,2) .56, (0,2) .45.
TEST(sched_async_budget) {
    double sps[] = { 10, 10, 1, 1, 1, 1 };   // Algorithm 1 would stop at once (2 x 10 = 20; 2.9 x 1)
    float c0[] = { 0.9f, 0.5f }, c1[] = { 0.8f, 0.7f };
    bs_sched_in in[2] = { { 2, c0, 0 }, { 2, c1, 0 } };
    int l[2];
    CHECK(plan(BS_SCHED_ASYNC, sps, 6, 0, 3, in, 2, l) == 3 && l[0] == 1 && l[1] == 2, "%d %d", l[0], l[1]);
    CHECK(plan(BS_SCHED_ASYNC, sps, 6, 0, 1, in, 2, l) == 1 && l[0] == 1 && l[1] == 0, "%d %d", l[0], l[1]);
    CHECK(plan(BS_SCHED_ASYNC, sps, 6, 0, 0, in, 2, l) == 0 && l[0] == 0 && l[1] == 0);
    CHECK(plan(BS_SCHED_ASYNC, sps, 6, 0, 99, in, 2, l) == 4 && l[0] == 2 && l[1] == 2);
    CHECK(plan(BS_SCHED_ASYNC, sps, 6, 0, -1, in, 2, l) == 0 && l[0] == 0 && l[1] == 0);
    // The budget for the next step: the best point of the whole path. Flat SPS: every candidate raises Theta.
    double flat[] = { 10, 10, 10, 10, 10, 10 };
    bs_sched_cand cand[8];
    bs_sched_args a = { BS_SCHED_ASYNC, flat, 6, 0, -1 };
    CHECK(bs_sched_plan_budget(&a, in, 2, cand) == 4);
    // Step times 0.1, then +0.02 per row: Theta 20, 2.9/.12 = 24.17, 3.7/.14 = 26.43, 4.26/.16 = 26.63, 4.71/.18 = 26.17.
    double lin[] = { 10, 10, 1 / 0.12, 1 / 0.14, 1 / 0.16, 1 / 0.18 };
    a.sps = lin;
    CHECK(bs_sched_plan_budget(&a, in, 2, cand) == 3);
}

// The paper's App. A: one request, gamma = 2, SPS = 1.0, 0.5, 0.45, target p_t = (0.7, 0.3), drafter
// p_d = (0.5, 0.5); c_1 = 0.8, and c_2 depends on x_1 (0.9 after A, 0.2 after B). The first emitted
// token's exact distribution, enumerating x_1: with l = 0 it is the target's sample; with l >= 1 standard
// speculative sampling accepts x_1 with min(1, p_t/p_d), else resamples from norm(max(0, p_t - p_d)).
// Algorithm 1 (early break) keeps it (0.7, 0.3); the retrospective search (the whole path's best point on
// the current draws) gives (0.85, 0.15); async with any K fixed before the draws gives (0.7, 0.3).
static double first_token_pA(int which, int K) {
    const double pt[2] = { 0.7, 0.3 }, pd[2] = { 0.5, 0.5 }, c2[2] = { 0.9, 0.2 };
    double sps[] = { 1.0, 0.5, 0.45 }, pA = 0;
    for (int x1 = 0; x1 < 2; x1++) {
        float c[2] = { 0.8f, (float)c2[x1] };
        bs_sched_in in[1] = { { 2, c, 0 } };
        bs_sched_cand cand[4];
        bs_sched_args a = { which == 2 ? BS_SCHED_ASYNC : BS_SCHED_ALG1, sps, 3, 0, which == 2 ? K : -1 };
        int l[1];
        if (which == 1) l[0] = bs_sched_plan_budget(&a, in, 1, cand);   // retrospective: no break
        else bs_schedule(&a, in, 1, l, cand);
        double out_A;
        if (l[0] == 0) out_A = pt[0];
        else {
            double acc = pt[x1] / pd[x1] < 1 ? pt[x1] / pd[x1] : 1;
            double res[2] = { pt[0] - pd[0] > 0 ? pt[0] - pd[0] : 0, pt[1] - pd[1] > 0 ? pt[1] - pd[1] : 0 };
            double resA = res[0] + res[1] > 0 ? res[0] / (res[0] + res[1]) : 0;
            out_A = (x1 == 0 ? acc : 0) + (1 - acc) * resA;
        }
        pA += pd[x1] * out_A;
    }
    return pA;
}

TEST(sched_lossless_app_a) {
    CHECK_NEAR(first_token_pA(0, -1), 0.7, 1e-12, "Algorithm 1 with its early break must keep the target's distribution");
    CHECK_NEAR(first_token_pA(1, -1), 0.85, 1e-12, "the retrospective search (the counterexample) must show its bias");
    for (int K = 0; K <= 2; K++) CHECK_NEAR(first_token_pA(2, K), 0.7, 1e-12, "async with K = %d", K);
}

// ---- the runtime ----

typedef struct req { int32_t prompt[48]; int n_prompt; bs_seq_params p; int join; } req;

// What a run did besides its tokens: drafts proposed and verified, speculative rounds, and steps that
// decoded a request plainly (no drafter pass for it: the tokens no round emitted, the prompt's first aside).
typedef struct run_counts { long proposed, verified, rounds, plain_steps; } run_counts;

// Runs reqs through one runtime under mode with the cost model c, joining at their steps; out[i] (cap 96).
static int run_sched_costs(bs_engine *e, bs_drafter *d, bs_sched_mode mode, const bs_cost_tables *c, req *r, int n, int32_t (*out)[96],
                           int *n_out, run_counts *rc_out, bs_err *err) {
    bs_runtime rt;
    bs_seq *s = calloc(n, sizeof *s);
    int rc = -1;
    if (bs_runtime_init(&rt, e, d, err)) { free(s); return -1; }
    if (bs_runtime_set_schedule_costs(&rt, mode, c, err)) goto out;
    for (int step = 0; step < 5000; step++) {
        for (int i = 0; i < n; i++)
            if (r[i].join == step && (bs_seq_init(&s[i], e, d, r[i].prompt, r[i].n_prompt, &r[i].p, err) || bs_runtime_add(&rt, &s[i], err))) goto out;
        if (bs_runtime_step(&rt, err) < 0) goto out;
        int pending = 0;
        for (int i = 0; i < n; i++) pending += !s[i].eng || !bs_seq_done(&s[i]);
        if (!pending) break;
    }
    if (rc_out) memset(rc_out, 0, sizeof *rc_out);
    for (int i = 0; i < n; i++) {
        memcpy(out[i], s[i].out, sizeof(int32_t) * s[i].n_out); n_out[i] = s[i].n_out;
        if (!rc_out) continue;
        long emitted = 0;
        for (int k = 0; k < s[i].st.n_lengths; k++) emitted += s[i].st.acceptance_lengths[k];
        rc_out->proposed += s[i].st.proposed; rc_out->verified += s[i].st.drafted; rc_out->rounds += s[i].st.rounds;
        if (s[i].drafter && s[i].n_out - 1 > emitted) rc_out->plain_steps += s[i].n_out - 1 - emitted;
    }
    rc = 0;
out:
    for (int i = 0; i < n; i++) if (s[i].eng) bs_seq_free(&s[i]);
    bs_runtime_free(&rt);
    free(s);
    return rc;
}

static int run_sched(bs_engine *e, bs_drafter *d, bs_sched_mode mode, const double *sps, int n_sps, req *r, int n, int32_t (*out)[96],
                     int *n_out, long *proposed, long *verified, bs_err *err) {
    bs_cost_tables c = { .sps = sps, .n_sps = n_sps };
    run_counts k;
    int rc = run_sched_costs(e, d, mode, &c, r, n, out, n_out, &k, err);
    if (proposed) { *proposed = k.proposed; *verified = k.verified; }
    return rc;
}

static void make_reqs(req *r, int n, int V, int sampled, uint64_t seed) {
    bs_rng g; bs_rng_seed(&g, seed);
    for (int i = 0; i < n; i++) {
        memset(&r[i], 0, sizeof r[i]);
        r[i].n_prompt = 1 + (int)(bs_rng_u64(&g) % (i % 3 == 0 ? 40 : 10));
        for (int k = 0; k < r[i].n_prompt; k++) r[i].prompt[k] = 4 + (int32_t)(bs_rng_u64(&g) % (V - 4));
        r[i].p.n_new = 20 + (int)(bs_rng_u64(&g) % 40);
        r[i].p.use_drafter = i % 5 != 4;
        r[i].p.draft_max = 1 + i % 6;
        r[i].p.confidence_threshold = i % 4 == 1 ? 0.4f : 0;
        r[i].join = i < n / 2 ? 0 : (int)(bs_rng_u64(&g) % 8);
        if (sampled && i % 2) r[i].p.sampling = (bs_sampling){ .temperature = 0.9f, .top_p = i % 4 == 1 ? 0.9f : 1.0f, .seed = 500 + i };
    }
}

// Every schedule, two cost models (steep: alg1 / async cut hard; flat: they verify nearly everything):
// every request's greedy tokens equal plain decoding's, and the steep runs really cut.
static void check_greedy_lossless(int *failed_, const char *target, const char *drafter, int n, uint64_t seed) {
    bs_engine *e; bs_drafter *d; bs_err err = {0};
    CHECK(bs_engine_open(&e, target, "cpu", &err) == 0, "%s", err.msg);
    CHECK(bs_drafter_open(&d, drafter, e, 0, &err) == 0, "%s", err.msg);
    req *r = calloc(n, sizeof *r), *plain = calloc(n, sizeof *plain);
    int32_t (*want)[96] = calloc(n, sizeof *want), (*got)[96] = calloc(n, sizeof *got);
    int *n_want = calloc(n, sizeof(int)), *n_got = calloc(n, sizeof(int));
    make_reqs(r, n, e->cfg.vocab_size, 0, seed);
    for (int i = 0; i < n; i++) { plain[i] = r[i]; plain[i].p.use_drafter = 0; }
    CHECK(run_sched(e, d, BS_SCHED_FIXED, NULL, 0, plain, n, want, n_want, NULL, NULL, &err) == 0, "plain: %s", err.msg);
    double steep[64], flat[64], plain1[64], dear[64];
    // steep: each row adds a quarter of a 1-row step (a draft must survive with ~0.2-0.6 to be worth it)
    for (int b = 1; b <= 64; b++) { steep[b - 1] = 100.0 / (1 + 0.25 * b); flat[b - 1] = 100.0 / (1 + 0.002 * b); }
    // The whole model: one-row sequences as the flat table, and a drafter pass costing five plain steps:
    // no draft pays for it, so after the first rounds the steps decode plainly (the probes aside).
    for (int b = 1; b <= 64; b++) { plain1[b - 1] = flat[b - 1]; dear[b - 1] = flat[0] / 5; }
    const bs_cost_tables none = { 0 }, c_steep = { steep, 64 }, c_flat = { flat, 64 }, c_dear = { flat, 64, 5, plain1, 64, dear, 64 };
    const struct { bs_sched_mode m; const bs_cost_tables *c; int must_cut, must_skip; } runs[] = {
        { BS_SCHED_NONE, &none, 0, 0 }, { BS_SCHED_FIXED, &none, 0, 0 }, { BS_SCHED_THRESHOLD, &none, 1, 0 }, { BS_SCHED_ALG1, &c_steep, 1, 0 },
        { BS_SCHED_ALG1, &c_flat, 0, 0 }, { BS_SCHED_ASYNC, &c_steep, 1, 0 }, { BS_SCHED_ASYNC, &c_flat, 0, 0 },
        { BS_SCHED_ALG1, &c_dear, 0, 1 }, { BS_SCHED_ASYNC, &c_dear, 0, 1 },
    };
    for (size_t k = 0; k < sizeof runs / sizeof *runs; k++) {
        run_counts rc;
        CHECK(run_sched_costs(e, d, runs[k].m, runs[k].c, r, n, got, n_got, &rc, &err) == 0, "%s: %s", bs_sched_name(runs[k].m), err.msg);
        long proposed = rc.proposed, verified = rc.verified;
        for (int i = 0; i < n; i++) {
            CHECK(n_got[i] == n_want[i], "%s: request %d: %d tokens, plain %d", bs_sched_name(runs[k].m), i, n_got[i], n_want[i]);
            for (int t = 0; t < n_want[i]; t++)
                CHECK(got[i][t] == want[i][t], "%s (%s cost model): request %d (draft_max %d, threshold %g) token %d: %d, plain %d",
                      bs_sched_name(runs[k].m), runs[k].c == &c_steep ? "steep" : runs[k].c == &c_dear ? "dear drafter" : "flat", i,
                      r[i].p.draft_max, r[i].p.confidence_threshold, t, got[i][t], want[i][t]);
        }
        // The dear drafter: plain steps outnumber speculative rounds (the rounds left are the first ones, with
        // nothing to predict from, and the probes). fixed and threshold never skip the drafter; alg1 / async
        // where rows cost next to nothing (the flat table) only in the first step of several requests with
        // nothing to predict from (one of them drafts, the others wait a step): at most one per request.
        if (runs[k].must_skip) CHECK(rc.plain_steps > 2 * rc.rounds, "%s, dear drafter: %ld plain steps, %ld rounds", bs_sched_name(runs[k].m), rc.plain_steps, rc.rounds);
        else if (runs[k].m == BS_SCHED_FIXED || runs[k].m == BS_SCHED_THRESHOLD)
            CHECK(rc.plain_steps == 0, "%s: %ld plain steps", bs_sched_name(runs[k].m), rc.plain_steps);
        else if (runs[k].c == &c_flat) CHECK(rc.plain_steps <= n, "%s (flat): %ld plain steps", bs_sched_name(runs[k].m), rc.plain_steps);
        if (runs[k].m == BS_SCHED_NONE) CHECK(proposed == 0 && verified == 0, "none drafted %ld", proposed);
        else CHECK(proposed > 0, "%s: nothing drafted", bs_sched_name(runs[k].m));
        if (runs[k].m == BS_SCHED_FIXED) CHECK(verified == proposed, "fixed verified %ld of %ld", verified, proposed);
        if (runs[k].must_cut) CHECK(verified < proposed, "%s: no draft was cut (%ld of %ld verified): the test would not see a bad cut",
                                    bs_sched_name(runs[k].m), verified, proposed);
    }
    free(r); free(plain); free(want); free(got); free(n_want); free(n_got);
    d->free(d);
    bs_engine_close(e);
}

TEST(sched_greedy_lossless_fixture_dspark) {
    char t[1024], d[1024];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(d, sizeof d, "%s/dspark", bs_fixtures_dir());
    check_greedy_lossless(failed_, t, d, 10, 11);
}

TEST(sched_greedy_lossless_builtin) {
    struct stat st;
    if (stat("models/blockspec-30m/config.json", &st) || stat("models/blockspec-30m-dspark/config.json", &st)) SKIP("no built-in DSpark drafter in models/");
    check_greedy_lossless(failed_, "models/blockspec-30m", "models/blockspec-30m-dspark", 12, 12);
}

// The DFlash drafter has no confidences: alg1 / async verify its whole blocks, output still plain decoding's.
TEST(sched_greedy_lossless_fixture_dflash) {
    char t[1024], d[1024];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(d, sizeof d, "%s/dflash", bs_fixtures_dir());
    bs_engine *e; bs_drafter *dr; bs_err err = {0};
    CHECK(bs_engine_open(&e, t, "cpu", &err) == 0 && bs_drafter_open(&dr, d, e, 0, &err) == 0, "%s", err.msg);
    req r[6], plain[6];
    int32_t want[6][96], got[6][96];
    int n_want[6], n_got[6];
    make_reqs(r, 6, e->cfg.vocab_size, 0, 13);
    for (int i = 0; i < 6; i++) { plain[i] = r[i]; plain[i].p.use_drafter = 0; r[i].p.confidence_threshold = 0; }
    CHECK(run_sched(e, dr, BS_SCHED_FIXED, NULL, 0, plain, 6, want, n_want, NULL, NULL, &err) == 0, "%s", err.msg);
    double steep[8] = { 100, 50, 33, 25, 20, 16, 14, 12 };
    for (int m = BS_SCHED_ALG1; m <= BS_SCHED_ASYNC; m++) {
        long proposed, verified;
        CHECK(run_sched(e, dr, (bs_sched_mode)m, steep, 8, r, 6, got, n_got, &proposed, &verified, &err) == 0, "%s", err.msg);
        CHECK(verified == proposed && proposed > 0, "%s: without confidences every draft is verified (%ld of %ld)", bs_sched_name(m), verified, proposed);
        for (int i = 0; i < 6; i++) CHECK(n_got[i] == n_want[i] && !memcmp(got[i], want[i], sizeof(int32_t) * n_want[i]), "%s: request %d", bs_sched_name(m), i);
    }
    // Its survivals come from its acceptance: with a drafter pass dearer than anything its drafts return,
    // alg1 / async decode plainly after the first rounds; output unchanged.
    double flat[8], plain1[8], dear[8];
    for (int b = 1; b <= 8; b++) { flat[b - 1] = plain1[b - 1] = 100.0 / (1 + 0.002 * b); dear[b - 1] = 20; }
    bs_cost_tables c_dear = { flat, 8, 5, plain1, 8, dear, 8 };
    for (int m = BS_SCHED_ALG1; m <= BS_SCHED_ASYNC; m++) {
        run_counts k;
        CHECK(run_sched_costs(e, dr, (bs_sched_mode)m, &c_dear, r, 6, got, n_got, &k, &err) == 0, "%s", err.msg);
        CHECK(k.plain_steps > 2 * k.rounds, "%s, dear drafter: %ld plain steps, %ld rounds", bs_sched_name(m), k.plain_steps, k.rounds);
        for (int i = 0; i < 6; i++) CHECK(n_got[i] == n_want[i] && !memcmp(got[i], want[i], sizeof(int32_t) * n_want[i]), "%s (dear): request %d", bs_sched_name(m), i);
    }
    dr->free(dr);
    bs_engine_close(e);
}

// Sampling: under none, fixed and threshold a request's cut depends on itself only, so its tokens in a
// concurrent run equal its tokens alone (same seed). Under alg1 / async the cut depends on the other
// requests' confidences (and so does how many uniforms a round draws): the output is distributed as the
// target's (sched_lossless_app_a) but need not match the solo run token for token; a lone request is
// still deterministic for its seed.
TEST(sched_sampled_batch_invariance) {
    char t[1024], d[1024];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(d, sizeof d, "%s/dspark", bs_fixtures_dir());
    bs_engine *e; bs_drafter *dr; bs_err err = {0};
    CHECK(bs_engine_open(&e, t, "cpu", &err) == 0 && bs_drafter_open(&dr, d, e, 0, &err) == 0, "%s", err.msg);
    enum { N = 8 };
    req r[N];
    int32_t batch[N][96], alone[N][96], again[1][96];
    int n_batch[N], n_alone[N], n_again[1];
    make_reqs(r, N, e->cfg.vocab_size, 1, 14);
    bs_sched_mode modes[] = { BS_SCHED_NONE, BS_SCHED_FIXED, BS_SCHED_THRESHOLD };
    for (int m = 0; m < 3; m++) {
        CHECK(run_sched(e, dr, modes[m], NULL, 0, r, N, batch, n_batch, NULL, NULL, &err) == 0, "%s", err.msg);
        for (int i = 0; i < N; i++) {
            req one = r[i]; one.join = 0;
            CHECK(run_sched(e, dr, modes[m], NULL, 0, &one, 1, &alone[i], &n_alone[i], NULL, NULL, &err) == 0, "%s", err.msg);
            CHECK(n_batch[i] == n_alone[i] && !memcmp(batch[i], alone[i], sizeof(int32_t) * n_alone[i]), "%s: request %d (temp %g) differs from alone",
                  bs_sched_name(modes[m]), i, r[i].p.sampling.temperature);
        }
    }
    double sps[16];
    for (int b = 1; b <= 16; b++) sps[b - 1] = 100.0 / (1 + 0.3 * b);
    for (int m = BS_SCHED_ALG1; m <= BS_SCHED_ASYNC; m++) {
        CHECK(run_sched(e, dr, (bs_sched_mode)m, sps, 16, r, N, batch, n_batch, NULL, NULL, &err) == 0, "%s", err.msg);
        for (int i = 0; i < N; i++) CHECK(n_batch[i] == r[i].p.n_new, "%s: request %d: %d of %d tokens", bs_sched_name(m), i, n_batch[i], r[i].p.n_new);
        // Alone, where no decision is near its break-even point (rows cost nothing: every step drafts and
        // verifies everything), a seeded request repeats its tokens. (Near one, the decisions follow the
        // measured step times: docs/scheduling.md.)
        double flat[16];
        for (int b = 0; b < 16; b++) flat[b] = 100;
        req one = r[1]; one.join = 0;
        CHECK(run_sched(e, dr, (bs_sched_mode)m, flat, 16, &one, 1, &alone[0], &n_alone[0], NULL, NULL, &err) == 0, "%s", err.msg);
        CHECK(run_sched(e, dr, (bs_sched_mode)m, flat, 16, &one, 1, again, n_again, NULL, NULL, &err) == 0, "%s", err.msg);
        CHECK(n_again[0] == n_alone[0] && !memcmp(again[0], alone[0], sizeof(int32_t) * n_alone[0]), "%s: a lone sampled request is not reproducible", bs_sched_name(m));
    }
    // Plain steps of sampled requests (a drafter pass dearer than what drafts return): alone and together,
    // every request gets its tokens, each plain step drawing from the target's row.
    double flat[16], dear[16];
    for (int b = 1; b <= 16; b++) { flat[b - 1] = 100.0 / (1 + 0.002 * b); dear[b - 1] = 20; }
    bs_cost_tables c_dear = { flat, 16, 5, flat, 16, dear, 16 };
    for (int m = BS_SCHED_ALG1; m <= BS_SCHED_ASYNC; m++) {
        run_counts k;
        CHECK(run_sched_costs(e, dr, (bs_sched_mode)m, &c_dear, r, N, batch, n_batch, &k, &err) == 0, "%s", err.msg);
        for (int i = 0; i < N; i++) CHECK(n_batch[i] == r[i].p.n_new, "%s (dear): request %d: %d of %d tokens", bs_sched_name(m), i, n_batch[i], r[i].p.n_new);
        CHECK(k.plain_steps > k.rounds, "%s (dear): %ld plain steps, %ld rounds", bs_sched_name(m), k.plain_steps, k.rounds);
        req one = r[1]; one.join = 0;
        CHECK(run_sched_costs(e, dr, (bs_sched_mode)m, &c_dear, &one, 1, &alone[0], &n_alone[0], &k, &err) == 0 && n_alone[0] == one.p.n_new, "%s", err.msg);
        CHECK(k.plain_steps > k.rounds, "%s (dear, alone): %ld plain steps, %ld rounds", bs_sched_name(m), k.plain_steps, k.rounds);
    }
    dr->free(dr);
    bs_engine_close(e);
}

// The schedule cannot change under running requests; alg1 / async without a cost model, or a bad one, fail.
TEST(sched_runtime_misuse) {
    char t[1024], d[1024];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(d, sizeof d, "%s/dspark", bs_fixtures_dir());
    bs_engine *e; bs_drafter *dr; bs_err err = {0};
    CHECK(bs_engine_open(&e, t, "cpu", &err) == 0 && bs_drafter_open(&dr, d, e, 0, &err) == 0, "%s", err.msg);
    bs_runtime rt;
    CHECK(bs_runtime_init(&rt, e, dr, &err) == 0, "%s", err.msg);
    CHECK(bs_runtime_set_schedule(&rt, BS_SCHED_ALG1, NULL, 0, &err) != 0 && strstr(err.msg, "cost model"), "%s", err.msg);
    double bad[2] = { 10, 0 };
    CHECK(bs_runtime_set_schedule(&rt, BS_SCHED_ASYNC, bad, 2, &err) != 0 && strstr(err.msg, "2 rows"), "%s", err.msg);
    int32_t prompt[] = { 5, 6, 7 };
    bs_seq_params p = { .n_new = 10, .use_drafter = 1 };
    bs_seq s;
    CHECK(bs_seq_init(&s, e, dr, prompt, 3, &p, &err) == 0 && bs_runtime_add(&rt, &s, &err) == 0, "%s", err.msg);
    CHECK(bs_runtime_set_schedule(&rt, BS_SCHED_NONE, NULL, 0, &err) != 0 && strstr(err.msg, "running"), "%s", err.msg);
    bs_seq_free(&s);
    bs_runtime_free(&rt);
    dr->free(dr);
    bs_engine_close(e);
}

// The replay drafter: on the fixture target, with its own greedy continuation as the reference, a fixed
// schedule accepts exactly the trace's counts round after round, and a threshold schedule min(a, l).
TEST(sched_replay_follows_trace) {
    char t[1024];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, t, "cpu", &err) == 0, "%s", err.msg);
    replay_round rounds[4] = { { 4, 2, 1, { 0.9f, 0.8f, 0.3f, 0.2f } }, { 4, 0, 1, { 0.2f, 0.9f, 0.9f, 0.9f } },
                               { 4, 4, 1, { 0.9f, 0.9f, 0.3f, 0.9f } }, { 3, 1, 1, { 0.9f, 0.1f, 0.5f } } };
    replay_round *rp = rounds;
    int n_rounds = 4;
    replay_trace tr = { 1, &rp, &n_rounds, 4 };
    req r[1];
    memset(r, 0, sizeof r);
    r[0].n_prompt = 5;
    for (int k = 0; k < 5; k++) r[0].prompt[k] = 10 + 3 * k;
    r[0].p.n_new = 60; r[0].p.draft_max = 4;
    int32_t ref[1][96];
    int n_ref[1];
    CHECK(run_sched(e, NULL, BS_SCHED_FIXED, NULL, 0, r, 1, ref, n_ref, NULL, NULL, &err) == 0, "%s", err.msg);
    bs_drafter *d = replay_drafter_new(&tr, e->cfg.vocab_size, 4);
    CHECK(d);
    r[0].p.n_new = 40; r[0].p.use_drafter = 1;
    for (int thr = 0; thr < 2; thr++) {
        r[0].p.confidence_threshold = thr ? 0.5f : 0;
        replay_bind(d, r[0].n_prompt, ref[0], n_ref[0], 0, 0);
        bs_runtime rt;
        bs_seq s;
        CHECK(bs_runtime_init(&rt, e, d, &err) == 0 && bs_runtime_set_schedule(&rt, thr ? BS_SCHED_THRESHOLD : BS_SCHED_FIXED, NULL, 0, &err) == 0, "%s", err.msg);
        CHECK(bs_seq_init(&s, e, d, r[0].prompt, r[0].n_prompt, &r[0].p, &err) == 0 && bs_runtime_add(&rt, &s, &err) == 0, "%s", err.msg);
        while (!bs_seq_done(&s)) CHECK(bs_runtime_step(&rt, &err) >= 0, "%s", err.msg);
        CHECK(s.n_out == 40 && !memcmp(s.out, ref[0], sizeof(int32_t) * 40), "replayed output differs from the reference");
        // Leading confidences >= .5: 2, 0, 2, 1 drafts; accepted min(a, l): 2, 0, 2, 1 (fixed: the trace's a).
        const int want_fixed[4] = { 2, 0, 4, 1 }, want_thr[4] = { 2, 0, 2, 1 };
        for (int k = 0; k + 1 < s.st.n_lengths; k++)   // the last round may be cut short by the token budget
            CHECK(s.st.acceptance_lengths[k] == (thr ? want_thr : want_fixed)[k % 4] + 1, "round %d: %d accepted", k, s.st.acceptance_lengths[k] - 1);
        if (thr) CHECK(s.st.drafted < s.st.proposed, "the threshold cut nothing");
        bs_seq_free(&s);
        bs_runtime_free(&rt);
    }
    CHECK(replay_mismatches(d) == 0, "%ld anchors off the reference", replay_mismatches(d));
    d->free(d);
    bs_engine_close(e);
}

// Bad input gets a message naming the file and the field: traces, cost model files, schedule names.
TEST(sched_bad_files) {
    const char *dir = bs_test_tmpdir("sched");
    CHECK(dir);
    char path[4096], err[1024];
    const struct { const char *text, *want; } traces[] = {
        { "{\"request\":0,\"n\":2,\"l\":2,\"a\":3,\"conf\":[0.5,0.5]}\n", "field \"a\" (3) exceeds field \"l\"" },
        { "{\"request\":0,\"n\":2,\"l\":2,\"a\":1,\"conf\":[0.5]}\n", "field \"conf\" has 1 entries" },
        { "{\"request\":0,\"n\":2,\"l\":2,\"a\":1,\"conf\":[0.5,1.5]}\n", "entry 1 is not a number in [0, 1]" },
        { "{\"request\":1,\"n\":2,\"l\":2,\"a\":1,\"conf\":[]}\n", "request 0 has no rounds" },
        { "{\"n\":2,\"l\":2,\"a\":1,\"conf\":[]}\n", "request" },
        { "\n\n", "no rounds" },
        { "{\"request\":0,\"n\":2,\"l\":2,\"a\":1,\"conf\":[]}\n{oops\n", "line 2" },
    };
    for (size_t i = 0; i < sizeof traces / sizeof *traces; i++) {
        snprintf(path, sizeof path, "%s/t%zu.jsonl", dir, i);
        FILE *f = fopen(path, "w"); fputs(traces[i].text, f); fclose(f);
        replay_trace t;
        CHECK(replay_trace_load(&t, path, err, sizeof err) != 0 && strstr(err, traces[i].want) && strstr(err, path), "trace %zu: %s", i, err);
    }
    snprintf(path, sizeof path, "%s/ok.jsonl", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"request\":0,\"round\":0,\"n\":2,\"l\":2,\"a\":1,\"conf\":[0.5,0.25]}\n{\"request\":0,\"round\":1,\"n\":3,\"l\":3,\"a\":0,\"conf\":[]}\n", f);
    fclose(f);
    replay_trace t;
    CHECK(replay_trace_load(&t, path, err, sizeof err) == 0, "%s", err);
    CHECK(t.n_req == 1 && t.n_rounds[0] == 2 && t.max_n == 3 && t.rounds[0][0].a == 1 && t.rounds[0][0].conf[1] == 0.25f && !t.rounds[0][1].has_conf);
    replay_trace_free(&t);

    const struct { const char *text, *want; } profiles[] = {
        { "{\"format\":\"x\",\"device\":\"cpu\",\"shape\":\"s\",\"points\":[]}", "field \"format\"" },
        { "{\"format\":\"blockspec-profile-1\",\"device\":\"cpu\",\"shape\":\"s\",\"points\":[]}", "field \"points\"" },
        { "{\"format\":\"blockspec-profile-1\",\"device\":\"cpu\",\"shape\":\"s\",\"points\":[{\"rows\":2,\"sps\":5}]}", "points[0].rows must be 1" },
        { "{\"format\":\"blockspec-profile-1\",\"device\":\"cpu\",\"shape\":\"s\",\"points\":[{\"rows\":1,\"sps\":5},{\"rows\":1,\"sps\":4}]}", "points[1].rows" },
        { "{\"format\":\"blockspec-profile-1\",\"device\":\"cpu\",\"shape\":\"s\",\"points\":[{\"rows\":1,\"sps\":-5}]}", "points[0].sps" },
    };
    for (size_t i = 0; i < sizeof profiles / sizeof *profiles; i++) {
        snprintf(path, sizeof path, "%s/p%zu.json", dir, i);
        f = fopen(path, "w"); fputs(profiles[i].text, f); fclose(f);
        double *sps; int n;
        CHECK(cli_cost_load(path, NULL, NULL, &sps, &n, err, sizeof err) != 0 && strstr(err, profiles[i].want) && strstr(err, path), "profile %zu: %s", i, err);
    }
    // A good one densifies linearly in step time, made non-decreasing: 1 row 10/s (0.1 s), 3 rows 5/s (0.2 s),
    // 5 rows 6/s (0.1667 s: a dip below 3 rows' time is noise, so 3 and 4 rows take 0.1667 s too).
    snprintf(path, sizeof path, "%s/good.json", dir);
    f = fopen(path, "w");
    fputs("{\"format\":\"blockspec-profile-1\",\"device\":\"cpu\",\"shape\":\"s\",\"points\":[{\"rows\":1,\"sps\":10},{\"rows\":3,\"sps\":5},{\"rows\":5,\"sps\":6}]}", f);
    fclose(f);
    double *sps; int n;
    CHECK(cli_cost_load(path, "cpu", "s", &sps, &n, err, sizeof err) == 0, "%s", err);
    CHECK(n == 5);
    CHECK_NEAR(sps[0], 10, 1e-9); CHECK_NEAR(sps[1], 1 / 0.15, 1e-9); CHECK_NEAR(sps[2], 6, 1e-9); CHECK_NEAR(sps[3], 6, 1e-9); CHECK_NEAR(sps[4], 6, 1e-9);
    free(sps);
    CHECK(cli_cost_load(path, "cuda:0 (H200)", NULL, &sps, &n, err, sizeof err) != 0 && strstr(err, "not this device"), "%s", err);
    // The optional tables: plain forwards by one-row sequences, the drafter's passes by sequences (with its
    // shape); a file without them asked for a drafter table is refused (the cache then measures again).
    cli_costs cc;
    CHECK(cli_costs_load(path, NULL, NULL, "dspark-x", &cc, err, sizeof err) != 0 && strstr(err, "no drafter table for dspark-x"), "%s", err);
    const char *head = "{\"format\":\"blockspec-profile-1\",\"device\":\"cpu\",\"shape\":\"s\",\"points\":[{\"rows\":1,\"sps\":10}]";
    const struct { const char *tail, *want; } more[] = {
        { ",\"plain\":[{\"seqs\":2,\"sps\":5}]}", "plain[0].seqs must be 1" },
        { ",\"plain\":[{\"seqs\":1,\"sps\":0}]}", "plain[0].sps must be a number > 0" },
        { ",\"drafter\":\"d\"}", "field \"draft\" must be a non-empty list" },
        { ",\"drafter\":7,\"draft\":[{\"seqs\":1,\"pps\":5}]}", "field \"drafter\" must be a string" },
        { ",\"drafter\":\"d\",\"draft\":[{\"seqs\":1,\"pps\":5},{\"seqs\":1,\"pps\":4}]}", "draft[1].seqs" },
        { ",\"block\":0}", "field \"block\"" },
    };
    for (size_t i = 0; i < sizeof more / sizeof *more; i++) {
        snprintf(path, sizeof path, "%s/m%zu.json", dir, i);
        f = fopen(path, "w"); fputs(head, f); fputs(more[i].tail, f); fclose(f);
        CHECK(cli_costs_load(path, NULL, NULL, NULL, &cc, err, sizeof err) != 0 && strstr(err, more[i].want) && strstr(err, path), "profile m%zu: %s", i, err);
    }
    snprintf(path, sizeof path, "%s/full.json", dir);
    f = fopen(path, "w");
    fputs(head, f);
    fputs(",\"block\":4,\"plain\":[{\"seqs\":1,\"sps\":10},{\"seqs\":3,\"sps\":5}],\"drafter\":\"d\",\"draft\":[{\"seqs\":1,\"pps\":20},{\"seqs\":2,\"pps\":10}]}", f);
    fclose(f);
    CHECK(cli_costs_load(path, "cpu", "s", "d", &cc, err, sizeof err) == 0, "%s", err);
    CHECK(cc.block == 4 && cc.n_sps == 1 && cc.n_sps1 == 3 && cc.n_dps == 2, "block %d, tables %d %d %d", cc.block, cc.n_sps, cc.n_sps1, cc.n_dps);
    CHECK_NEAR(cc.sps1[1], 1 / 0.15, 1e-9); CHECK_NEAR(cc.dps[1], 10, 1e-9);
    cli_costs_free(&cc);

    char cmd[8192], out[8192];
    snprintf(cmd, sizeof cmd, "%s generate -p x --schedule fast", bs_cli_path());
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 2 && strstr(out, "--schedule must be one of") && strstr(out, "'fast'"), "%s", out);
    snprintf(cmd, sizeof cmd, "%s bench --concurrency 1 --schedule fixed,bogus", bs_cli_path());
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 2 && strstr(out, "unknown schedule 'bogus'"), "%s", out);
    snprintf(cmd, sizeof cmd, "%s generate -p x --schedule alg1 --cost-model %s/p2.json -n 4", bs_cli_path(), dir);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 1 && strstr(out, "points[0].rows must be 1"), "%s", out);
}

// The commands end to end on the built-in model: profile writes a cost model the loader reads back (and
// the cache), generate --prompts --trace records one line per speculative round whose counts add up to the
// requests' statistics, and the outputs of fixed and alg1 are the same text.
TEST(sched_cli_profile_and_trace) {
    struct stat st;
    if (stat("models/blockspec-30m/config.json", &st) || stat("models/blockspec-30m-dspark/config.json", &st)) SKIP("no built-in DSpark drafter in models/");
    const char *dir = bs_test_tmpdir("schedcli");
    CHECK(dir);
    char cmd[8192], out[16384], path[4096], err[1024];
    snprintf(cmd, sizeof cmd, "XDG_CACHE_HOME=%s/cache %s profile --max-rows 6 --reps 1 --ctx 32 --out %s/prof.json", dir, bs_cli_path(), dir);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 0 && strstr(out, "| 6 |") && strstr(out, "cached: ") && strstr(out, "drafter dspark-L3-"), "%s", out);
    snprintf(path, sizeof path, "%s/prof.json", dir);
    // The three tables: 6 verify rows (blocks of 5), 2 one-row sequences, the built-in drafter over 2 sequences.
    cli_costs cc;
    CHECK(cli_costs_load(path, NULL, NULL, NULL, &cc, err, sizeof err) == 0 && cc.n_sps == 6 && cc.n_sps1 == 2 && cc.n_dps == 2, "%s", err);
    for (int i = 0; i < cc.n_sps; i++) CHECK(cc.sps[i] > 0 && (i == 0 || cc.sps[i] <= cc.sps[i - 1]), "rows %d: %g", i + 1, cc.sps[i]);
    CHECK(cc.dps[0] > 0 && cc.dps[1] > 0 && cc.sps1[0] > 0);
    cli_costs_free(&cc);
    // The cache's file is keyed by the drafter's shape too.
    const char *cached = strstr(out, "cached: ");
    CHECK(cached && strstr(cached, "-dspark-L3-"), "%s", out);
    snprintf(path, sizeof path, "%s/p.jsonl", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"prompt\":\"static int\"}\n{\"prompt\":\"Once upon a time\",\"confidence_threshold\":0.5}\n{\"prompt\":\"#include <stdio.h>\\n\"}\n", f);
    fclose(f);
    // alg1 with a cost model where drafting pays (rows and the drafter's pass cost nothing: on this machine
    // the measured one may well say plain decoding is faster, and a request that never drafts has no rounds).
    char flat_path[512];
    snprintf(flat_path, sizeof flat_path, "%s/flat.json", dir);
    f = fopen(flat_path, "w");
    fputs("{\"format\":\"blockspec-profile-1\",\"device\":\"cpu\",\"shape\":\"s\",\"points\":[{\"rows\":1,\"sps\":100},{\"rows\":40,\"sps\":100}],"
          "\"plain\":[{\"seqs\":1,\"sps\":100},{\"seqs\":8,\"sps\":100}],\"drafter\":\"any\",\"draft\":[{\"seqs\":1,\"pps\":1e6}]}", f);
    fclose(f);
    char texts[2][16384];
    const char *modes[2] = { "fixed", "alg1" };
    for (int m = 0; m < 2; m++) {
        snprintf(cmd, sizeof cmd, "%s generate --prompts %s -n 24 --ignore-eos --max-concurrency 3 --schedule %s%s%s --trace %s/t%d.jsonl",
                 bs_cli_path(), path, modes[m], m ? " --cost-model " : "", m ? flat_path : "", dir, m);
        CHECK(bs_test_run(cmd, 0, texts[m], sizeof texts[m]) == 0, "%s", texts[m]);
        char tpath[4096];
        snprintf(tpath, sizeof tpath, "%s/t%d.jsonl", dir, m);
        replay_trace t;
        CHECK(replay_trace_load(&t, tpath, err, sizeof err) == 0, "%s", err);
        CHECK(t.n_req == 3, "%d requests in the trace", t.n_req);
        // "rounds": R in the output line of request r equals the trace's rounds for r.
        for (int r = 0; r < 3; r++) {
            char key[64];
            snprintf(key, sizeof key, "{\"index\":%d,", r);
            const char *at = strstr(texts[m], key), *rk = at ? strstr(at, "\"rounds\":") : NULL;
            CHECK(rk && atoi(rk + 9) == t.n_rounds[r], "%s: request %d: %d rounds in the trace", modes[m], r, t.n_rounds[r]);
        }
        replay_trace_free(&t);
    }
    // A request alone (its drafts could stay in backend memory under fixed) still reports its confidences
    // to the trace.
    snprintf(cmd, sizeof cmd, "%s generate --prompts %s -n 16 --ignore-eos --max-concurrency 1 --schedule fixed --trace %s/alone.jsonl",
             bs_cli_path(), path, dir);
    CHECK(bs_test_run(cmd, 0, out, sizeof out) == 0, "%s", out);
    {
        char tpath[4096];
        snprintf(tpath, sizeof tpath, "%s/alone.jsonl", dir);
        replay_trace t;
        CHECK(replay_trace_load(&t, tpath, err, sizeof err) == 0, "%s", err);
        for (int r = 0; r < t.n_req; r++)
            for (int k = 0; k < t.n_rounds[r]; k++) CHECK(t.rounds[r][k].has_conf, "request %d round %d: no confidences in the trace", r, k);
        replay_trace_free(&t);
    }
    // Same ids for every request: strip the stats (timings differ) by comparing the "ids" arrays.
    for (int r = 0; r < 3; r++) {
        char key[64];
        snprintf(key, sizeof key, "{\"index\":%d,", r);
        const char *a = strstr(strstr(texts[0], key), "\"ids\":"), *b = strstr(strstr(texts[1], key), "\"ids\":");
        CHECK(a && b);
        size_t la = strcspn(a, "]"), lb = strcspn(b, "]");
        CHECK(la == lb && !memcmp(a, b, la), "request %d: fixed and alg1 differ", r);
    }
}

// The fixed part of a step (the drafter pass and bookkeeping, t_fixed) makes verify rows relatively
// cheaper: one request, c = 0.5, SPS(1) = 100, SPS(2) = 60. Target alone (t_fixed 0): Theta = 1 x 100 = 100
// against 1.5 x 60 = 90: nothing admitted. With t_fixed = 0.02 s: 1 / 0.03 = 33.3 against
// 1.5 / (0.02 + 1/60) = 40.9: the draft is admitted.
TEST(sched_alg1_fixed_step_cost) {
    double sps[] = { 100, 60 };
    float c[] = { 0.5f };
    bs_sched_in in[1] = { { 1, c, 0 } };
    int l[1];
    bs_sched_args a = { BS_SCHED_ALG1, sps, 2, 0, -1, 0 };
    CHECK(bs_schedule(&a, in, 1, l, (bs_sched_cand[2]){ 0 }) == 0 && l[0] == 0, "t_fixed 0: l = %d", l[0]);
    a.t_fixed = 0.02;
    CHECK(bs_schedule(&a, in, 1, l, (bs_sched_cand[2]){ 0 }) == 1 && l[0] == 1, "t_fixed 0.02: l = %d", l[0]);
    // Break-even: 1 / (t + 0.01) = 1.5 / (t + 1/60) at t = 1/300; just below it, nothing.
    a.t_fixed = 0.0032;
    CHECK(bs_schedule(&a, in, 1, l, (bs_sched_cand[2]){ 0 }) == 0, "t_fixed 0.0032: l = %d", l[0]);
    a.t_fixed = 0.0035;
    CHECK(bs_schedule(&a, in, 1, l, (bs_sched_cand[2]){ 0 }) == 1, "t_fixed 0.0035: l = %d", l[0]);
}

// The convex hull of the step times: t = 1, 2, 2, 2, 5 (ms) becomes 1, 4/3, 5/3, 2, 5 (the chord from 1 row
// to 4 rows lies below the measured 2 ms at 2 and 3 rows); a convex table is left as it is.
TEST(sched_convexify_step_times) {
    double sps[] = { 1 / 1.0, 1 / 2.0, 1 / 2.0, 1 / 2.0, 1 / 5.0 };
    bs_sched_convexify(sps, 5);
    double want[] = { 1, 4.0 / 3, 5.0 / 3, 2, 5 };
    for (int i = 0; i < 5; i++) CHECK_NEAR(1 / sps[i], want[i], 1e-12, "rows %d", i + 1);
    double convex[] = { 1 / 1.0, 1 / 1.5, 1 / 2.5, 1 / 4.0 };
    bs_sched_convexify(convex, 4);
    double keep[] = { 1, 1.5, 2.5, 4 };
    for (int i = 0; i < 4; i++) CHECK_NEAR(1 / convex[i], keep[i], 1e-12, "convex rows %d", i + 1);
}

// The forward's time by rows and sequences, block K = 5: the verify table takes b ms for b rows, the
// one-row-sequence table 2 S ms for S sequences. S = 4: t1 = 8, tK(4) = 4, a gap of 4 ms; 4 rows (plain)
// 4 + 4 = 8 = t1; 20 rows (K S: the verify table's own shape) 20; 12 rows: share (4 - 2.4) / (4 - 0.8) = 0.5,
// 12 + 2 = 14; 6 rows: share 0.875, 6 + 3.5 = 9.5. One sequence, or no plain table: the verify table alone.
TEST(sched_forward_time_per_sequence) {
    double sps[20], sps1[4];
    for (int b = 1; b <= 20; b++) sps[b - 1] = 1000.0 / b;
    for (int q = 1; q <= 4; q++) sps1[q - 1] = 1000.0 / (2 * q);
    bs_sched_args a = { BS_SCHED_ALG1, sps, 20, 0, -1, 0 };
    a.sps1 = sps1; a.n_sps1 = 4; a.block = 5;
    CHECK_NEAR(bs_sched_forward_time(&a, 4, 4) * 1e3, 8, 1e-9);
    CHECK_NEAR(bs_sched_forward_time(&a, 20, 4) * 1e3, 20, 1e-9);
    CHECK_NEAR(bs_sched_forward_time(&a, 12, 4) * 1e3, 14, 1e-9);
    CHECK_NEAR(bs_sched_forward_time(&a, 6, 4) * 1e3, 9.5, 1e-9);
    CHECK_NEAR(bs_sched_forward_time(&a, 3, 1) * 1e3, 3, 1e-9);
    a.sps1 = NULL;
    CHECK_NEAR(bs_sched_forward_time(&a, 12, 4) * 1e3, 12, 1e-9);
    // Separate sequences dearer than their rows' worth (40 ms for 4): 5 rows would come to 5 + 36 x 0.9375 =
    // 38.75 ms, below the 40 ms of 4 rows over the same sequences: the time is held at 40 (12 rows: 30 -> 40).
    sps1[3] = 1000.0 / 40;
    a.sps1 = sps1;
    CHECK_NEAR(bs_sched_forward_time(&a, 5, 4) * 1e3, 40, 1e-9);
    CHECK_NEAR(bs_sched_forward_time(&a, 12, 4) * 1e3, 40, 1e-9);
    sps1[3] = 1000.0 / 10;   // a gap of 6: 12 rows 12 + 3 = 15
    CHECK_NEAR(bs_sched_forward_time(&a, 12, 4) * 1e3, 15, 1e-9);
}

// Whether a step drafts at all. One sequence, predicted c = (0.8, 0.5): a = 0.8, 0.4; forwards of 1, 2, 3
// rows take 10, 12, 14 ms. Plain decoding: 1 / 0.010 = 100 tokens/s. A drafter pass of 5 ms: 1 / 0.015 =
// 66.7, 1.8 / 0.017 = 105.9, 2.2 / 0.019 = 115.8 > 100: draft. A pass of 15 ms: 40, 66.7, 2.2 / 0.029 =
// 75.9, and 75.9 x 1.1 (BS_SKIP_MARGIN) = 83.4 < 100: plain (and no drafter pass). A pass of 10 ms: best
// 2.2 / 0.024 = 91.7, below plain but within the margin (100.8 >= 100): draft. With 15 ms and a plain step's
// own fixed time of 3 ms: 1 / 0.013 = 76.9 < 83.4: draft.
TEST(sched_worth_drafting_hand) {
    double sps[] = { 100, 1000.0 / 12, 1000.0 / 14 };
    float c[] = { 0.8f, 0.5f };
    bs_sched_in in[1] = { { 2, c, 0 } };
    bs_sched_cand cand[4];
    bs_sched_args a = { BS_SCHED_ALG1, sps, 3, 0, -1, 0.005 };
    CHECK(bs_sched_worth_drafting(&a, in, 1, 0, cand) == 1);
    a.t_fixed = 0.015;
    CHECK(bs_sched_worth_drafting(&a, in, 1, 0, cand) == 0);
    CHECK(bs_sched_worth_drafting(&a, in, 1, 0.003, cand) == 1);
    a.t_fixed = 0.010;
    CHECK(bs_sched_worth_drafting(&a, in, 1, 0, cand) == 1);
    // Where drafting wins, the step's own cut is Algorithm 1's as before: t_fixed 5 ms admits both drafts.
    int l[1];
    a.t_fixed = 0.005;
    CHECK(bs_schedule(&a, in, 1, l, cand) == 2 && l[0] == 2, "l = %d", l[0]);
    // Two sequences, the second plain (no drafts): it is a row and a token on both sides. Forwards of 2, 3, 4
    // rows: 12, 14, 16 ms (the table past 3 rows grows at its last slope). Plain: 2 / 0.012 = 166.7; drafting
    // with a 10 ms pass: 2 / 0.022 = 90.9, 2.8 / 0.024 = 116.7, 3.2 / 0.026 = 123.1 (x 1.1: 135.4): plain.
    bs_sched_in two[2] = { { 2, c, 0 }, { 0, NULL, 0 } };
    a.t_fixed = 0.010;
    CHECK(bs_sched_worth_drafting(&a, two, 2, 0, cand) == 0);
    // A sequence that verifies its whole block (a drafter without confidences, predicted from its acceptance):
    // its rows count and its survivals add up: 1 + 0.8 + 0.4 tokens from 3 rows; a 5 ms pass: 2.2 / 0.019 =
    // 115.8 > 100; a 15 ms pass: 2.2 / 0.029 = 75.9 (x 1.1: 83.4) < 100.
    bs_sched_in whole[1] = { { 2, c, 0, 1 } };
    a.t_fixed = 0.005;
    CHECK(bs_sched_worth_drafting(&a, whole, 1, 0, cand) == 1);
    a.t_fixed = 0.015;
    CHECK(bs_sched_worth_drafting(&a, whole, 1, 0, cand) == 0);
}

// A drafter that counts its passes by kind, passing every call on to the drafter it wraps (the copy of its
// interface keeps its impl, so the other calls go straight through).
typedef struct counting { bs_drafter iface; bs_drafter *inner; long host, device, batch; } counting;
static int c_propose(bs_drafter *d, bs_drafter_ctx *c, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng, bs_draft *out, bs_err *err) {
    counting *w = (counting *)d;
    w->host++;
    return w->inner->propose(w->inner, c, anchor, max_n, s, rng, out, err);
}
static int c_propose_dev(bs_drafter *d, bs_drafter_ctx *c, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng, bs_draft *out, bs_err *err) {
    counting *w = (counting *)d;
    w->device++;
    return w->inner->propose_on_device(w->inner, c, anchor, max_n, s, rng, out, err);
}
static int c_propose_batch(bs_drafter *d, int n, bs_drafter_ctx *const *c, const int32_t *anchors, const int *max_n, const bs_sampling *const *s,
                           bs_rng *const *rng, bs_draft *out, bs_err *err) {
    counting *w = (counting *)d;
    w->batch++;
    return w->inner->propose_batch(w->inner, n, c, anchors, max_n, s, rng, out, err);
}
static void counting_wrap(counting *w, bs_drafter *inner) {
    w->iface = *inner;
    w->inner = inner;
    w->iface.propose = c_propose; w->iface.propose_on_device = c_propose_dev; w->iface.propose_batch = c_propose_batch;
    w->host = w->device = w->batch = 0;
}

// alg1 with one request: where the plan over its predicted confidences keeps every draft (a flat table:
// rows cost nothing), each round after the first (nothing to predict from yet) is fixed's own: the drafts
// stay in backend memory (propose_on_device), no confidences are read, and a seeded sampled request draws
// exactly the tokens fixed draws. Where rows are dear (steep), every round reads its confidences for the
// cut. Greedy output is plain decoding's either way.
TEST(sched_alg1_alone_takes_fixed_path) {
    char t[1024], dd[1024];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(dd, sizeof dd, "%s/dspark", bs_fixtures_dir());
    bs_engine *e; bs_drafter *inner; bs_err err = {0};
    CHECK(bs_engine_open(&e, t, "cpu", &err) == 0 && bs_drafter_open(&inner, dd, e, 0, &err) == 0, "%s", err.msg);
    CHECK(inner->propose_on_device != NULL, "the fixture drafter has no propose_on_device: the test would see nothing");
    counting w;
    counting_wrap(&w, inner);
    req r[1], plain[1];
    int32_t want[1][96], got[1][96], fixed_out[1][96];
    int n_want[1], n_got[1], n_fixed[1];
    make_reqs(r, 1, e->cfg.vocab_size, 0, 21);
    r[0].p.n_new = 60; r[0].p.draft_max = 4; r[0].p.confidence_threshold = 0; r[0].p.use_drafter = 1;
    plain[0] = r[0]; plain[0].p.use_drafter = 0;
    CHECK(run_sched(e, &w.iface, BS_SCHED_FIXED, NULL, 0, plain, 1, want, n_want, NULL, NULL, &err) == 0, "%s", err.msg);
    double flat[8], steep[8];
    for (int b = 1; b <= 8; b++) { flat[b - 1] = 100; steep[b - 1] = 100.0 / (1 + 0.5 * b); }
    run_counts k;
    bs_cost_tables c_flat = { flat, 8 }, c_steep = { steep, 8 };
    counting_wrap(&w, inner);
    CHECK(run_sched_costs(e, &w.iface, BS_SCHED_ALG1, &c_flat, r, 1, got, n_got, &k, &err) == 0, "%s", err.msg);
    CHECK(n_got[0] == n_want[0] && !memcmp(got[0], want[0], sizeof(int32_t) * n_want[0]), "alg1 (flat) alone differs from plain decoding");
    CHECK(k.rounds > 3 && w.host == 1 && w.device == k.rounds - 1 && w.batch == 0, "flat: %ld rounds, %ld host proposals, %ld on the device",
          k.rounds, w.host, w.device);
    CHECK(k.verified == k.proposed, "flat: %ld of %ld drafts verified", k.verified, k.proposed);
    counting_wrap(&w, inner);
    CHECK(run_sched_costs(e, &w.iface, BS_SCHED_ALG1, &c_steep, r, 1, got, n_got, &k, &err) == 0, "%s", err.msg);
    CHECK(n_got[0] == n_want[0] && !memcmp(got[0], want[0], sizeof(int32_t) * n_want[0]), "alg1 (steep) alone differs from plain decoding");
    CHECK(w.device == 0 && w.host == k.rounds && k.rounds > 0, "steep: %ld rounds, %ld host proposals, %ld on the device", k.rounds, w.host, w.device);
    // Sampled: fixed's tokens exactly (same draws: propose_on_device draws what propose would).
    r[0].p.sampling = (bs_sampling){ .temperature = 0.8f, .seed = 77 };
    CHECK(run_sched(e, inner, BS_SCHED_FIXED, NULL, 0, r, 1, fixed_out, n_fixed, NULL, NULL, &err) == 0, "%s", err.msg);
    CHECK(run_sched_costs(e, inner, BS_SCHED_ALG1, &c_flat, r, 1, got, n_got, &k, &err) == 0, "%s", err.msg);
    CHECK(n_got[0] == n_fixed[0] && !memcmp(got[0], fixed_out[0], sizeof(int32_t) * n_fixed[0]), "sampled alg1 (flat) alone differs from fixed");
    inner->free(inner);
    bs_engine_close(e);
}

// The drafter context of plain steps waits and goes in at once before the sequence drafts again
// (step.c, defer_context): the probes of a run whose steps are plain (a drafter pass dearer than anything
// drafts return) propose exactly what they propose when every plain step's row is added at once. Greedy
// output cannot show a wrong context (it stays plain decoding's), so the rounds themselves are compared.
// One request: with several, which one probes depends on the rows waiting, so the two runs would probe
// different requests.
typedef struct round_log { int n; int32_t tok[256][8]; float conf[256][8]; int len[256]; } round_log;
static void log_round(void *ctx, const bs_seq *s, int n_drafted, int n_verified, int n_accepted) {
    round_log *g = ctx;
    if (g->n == 256) return;
    g->len[g->n] = n_drafted;
    for (int k = 0; k < n_drafted && k < 8; k++) { g->tok[g->n][k] = s->ids[1 + k]; g->conf[g->n][k] = s->draft.has_conf ? s->draft.conf[k] : -1; }
    g->n++;
}
TEST(sched_deferred_context_same_drafts) {
    char t[1024], dd[1024];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(dd, sizeof dd, "%s/dspark", bs_fixtures_dir());
    bs_engine *e; bs_drafter *d; bs_err err = {0};
    CHECK(bs_engine_open(&e, t, "cpu", &err) == 0 && bs_drafter_open(&d, dd, e, 0, &err) == 0, "%s", err.msg);
    double flat[8], dear[8];
    for (int b = 0; b < 8; b++) { flat[b] = 100; dear[b] = 1; }
    bs_cost_tables c = { flat, 8, 5, flat, 8, dear, 8 };
    req r[1];
    make_reqs(r, 1, e->cfg.vocab_size, 0, 31);
    static round_log logs[2];
    for (int now = 0; now < 2; now++) {
        bs_runtime rt;
        bs_seq s[1];
        memset(&logs[now], 0, sizeof logs[now]);
        CHECK(bs_runtime_init(&rt, e, d, &err) == 0 && bs_runtime_set_schedule_costs(&rt, BS_SCHED_ALG1, &c, &err) == 0, "%s", err.msg);
        rt.add_context_now = now;
        rt.on_round = log_round; rt.on_round_ctx = &logs[now];
        for (int i = 0; i < 1; i++) {
            r[i].p.n_new = 130; r[i].p.draft_max = 4; r[i].p.use_drafter = 1; r[i].p.confidence_threshold = 0;
            CHECK(bs_seq_init(&s[i], e, d, r[i].prompt, r[i].n_prompt, &r[i].p, &err) == 0 && bs_runtime_add(&rt, &s[i], &err) == 0, "%s", err.msg);
        }
        int left;
        while ((left = bs_runtime_step(&rt, &err)) > 0) {}
        CHECK(left == 0, "%s", err.msg);
        for (int i = 0; i < 1; i++) bs_seq_free(&s[i]);
        bs_runtime_free(&rt);
    }
    // Rounds: the first (nothing to predict from) and probes after 8, 16, 32, 64 plain steps, each after
    // those rows had waited.
    CHECK(logs[0].n >= 4 && logs[0].n == logs[1].n, "%d rounds deferred, %d added at once", logs[0].n, logs[1].n);
    for (int k = 0; k < logs[0].n && k < logs[1].n; k++) {
        CHECK(logs[0].len[k] == logs[1].len[k], "round %d: %d vs %d drafts", k, logs[0].len[k], logs[1].len[k]);
        for (int j = 0; j < logs[0].len[k] && j < 8; j++) {
            CHECK(logs[0].tok[k][j] == logs[1].tok[k][j], "round %d draft %d: %d vs %d", k, j, logs[0].tok[k][j], logs[1].tok[k][j]);
            CHECK_NEAR(logs[0].conf[k][j], logs[1].conf[k][j], 1e-5, "round %d confidence %d", k, j);
        }
    }
    d->free(d);
    bs_engine_close(e);
}

// The step-time model fitted to whole steps (y = t_fixed + t_scale x, later steps weighing 1, earlier 0.95).
// Same x twice (10 ms; 12 then 14 ms): nothing to tell the parts apart, t_scale 1 and t_fixed the weighted
// mean residual (0.95 x 2 + 4) / 1.95 = 3.026 ms. x 10 then 40 ms taking 30 then 90 ms (the line 10 ms + 2x):
// weighted means x 25.385, y 60.769 ms; sxx 2.2483e-4, sxy 4.4968e-4; the pull towards 1 (1% of x^2 =
// 6.444e-6) gives t_scale (4.4968e-4 + 6.444e-6) / (2.2483e-4 + 6.444e-6) = 1.97214, t_fixed 10.707 ms.
// 15 then 40 ms for x 10 and 20 (every part slowed, more than the line through 0 allows): t_fixed would be
// negative, so it is 0 and t_scale the ratio of the means, 30.256 / 16.154 = 1.83898.
TEST(sched_step_fit_hand) {
    double a, b;
    bs_step_fit f = { 0 };
    bs_step_fit_get(&f, &a, &b);
    CHECK(a == 0 && b == 1);
    bs_step_fit_add(&f, 0.010, 0.012); bs_step_fit_add(&f, 0.010, 0.014);
    bs_step_fit_get(&f, &a, &b);
    CHECK_NEAR(b, 1, 1e-9); CHECK_NEAR(a * 1e3, 3.025641, 1e-5);
    f = (bs_step_fit){ 0 };
    bs_step_fit_add(&f, 0.010, 0.030); bs_step_fit_add(&f, 0.040, 0.090);
    bs_step_fit_get(&f, &a, &b);
    CHECK_NEAR(b, 1.972140, 1e-5); CHECK_NEAR(a * 1e3, 10.707203, 1e-5);
    f = (bs_step_fit){ 0 };
    bs_step_fit_add(&f, 0.010, 0.015); bs_step_fit_add(&f, 0.020, 0.040);
    bs_step_fit_get(&f, &a, &b);
    CHECK(a == 0); CHECK_NEAR(b, 1.838983, 1e-5);
    // In the decision (the tables of sched_worth_drafting_hand, a 12 ms drafter pass): plain 1 token from a
    // 10 ms forward, drafting at best 2.2 tokens from a 14 ms one. The rest additive (t_fixed 20 ms, t_scale
    // 1): plain 1 / 0.030 = 33.3 against 2.2 / (0.020 + 0.012 + 0.014) = 47.8: draft. The same 20 ms of
    // slowdown as every part taking 3x (t_fixed 0, t_scale 3): plain 1 / 0.030 = 33.3 against 2.2 / (3 x
    // 0.026) = 28.2, x 1.1 = 31.0: plain. A shared CPU slows the drafter pass and the extra rows too.
    double sps[] = { 100, 1000.0 / 12, 1000.0 / 14 };
    float c[] = { 0.8f, 0.5f };
    bs_sched_in in[1] = { { 2, c, 0 } };
    bs_sched_cand cand[4];
    bs_sched_args s = { BS_SCHED_ALG1, sps, 3, 0, -1, 0.020 + 0.012 };
    CHECK(bs_sched_worth_drafting(&s, in, 1, 0.020, cand) == 1);
    s.t_fixed = 3 * 0.012; s.t_scale = 3;
    CHECK(bs_sched_worth_drafting(&s, in, 1, 0, cand) == 0);
}
