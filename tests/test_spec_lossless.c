// Losslessness of the speculative loop, independent of any real drafter:
// - greedy: speculative output == plain greedy output, token for token, with drafters whose proposals
//   are forced (the target's own continuation with chosen corruptions), covering long accepts, the
//   bonus token, rejection at the first row, KV rollback and drafter context growth;
// - sampling: the first tokens under speculative sampling follow the target's exact distribution
//   (computed by enumeration on a tiny-vocabulary target), and the same test fails when the drafter
//   reports a wrong q.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "test_util_models.h"
#include "spec/spec_loop.h"

// ---- a drafter that replays a script ----
typedef struct forced {
    const int32_t *script; int script_len;   // token at each absolute position
    int corrupt;                             // 0 never, k > 0: pseudo-randomly 1 in k, -1: always the first draft
    int round, vocab, taps[2];
    bs_backend *be;
    const float *ref_feat; int F;            // expected context features per position (host)
    double max_feat_err;
    float *tmp;
} forced;

static int forced_add(bs_drafter *d, bs_drafter_ctx *c, const float *feat, int n, bs_err *err) {
    forced *f = d->impl;
    f->be->download(f->be, f->tmp, feat, sizeof(float) * n * f->F);
    for (int r = 0; r < n; r++)
        for (int i = 0; i < f->F; i++) {
            double e = fabs(f->tmp[(size_t)r * f->F + i] - f->ref_feat[(size_t)(c->n_ctx + r) * f->F + i]);
            if (!(e <= f->max_feat_err)) f->max_feat_err = e;
        }
    c->n_ctx += n;
    return 0;
}
static int forced_rollback(bs_drafter *d, bs_drafter_ctx *c, int n, bs_err *err) { c->n_ctx = n; return 0; }
static int forced_propose(bs_drafter *d, bs_drafter_ctx *c, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng, bs_draft *out, bs_err *err) {
    forced *f = d->impl;
    int pos = c->n_ctx;
    out->n = max_n; out->q = NULL; out->has_conf = 0;
    for (int k = 1; k <= max_n; k++) {
        int32_t t = pos + k < f->script_len ? f->script[pos + k] : 0;
        int bad = f->corrupt < 0 ? k == 1 : f->corrupt > 0 && ((f->round * 7 + k * 3) % f->corrupt) == 0;
        out->tokens[k - 1] = bad ? (t + 1) % f->vocab : t;
    }
    f->round++;
    return 0;
}

// prompt_len 0: a random short prompt; otherwise that many tokens (long prompts prefill in chunks).
static void greedy_case(int *failed_, bs_engine *e, int block, int corrupt, uint64_t seed, int prompt_len) {
    bs_err err = {0};
    bs_rng rng; bs_rng_seed(&rng, seed);
    int V = e->cfg.vocab_size, H = e->cfg.hidden_size, L = e->cfg.n_layers;
    int P = 2 + (int)(bs_rng_u64(&rng) % 20), N = 5 + (int)(bs_rng_u64(&rng) % 50);
    if (prompt_len) P = prompt_len;
    int32_t *seq = malloc(sizeof(int32_t) * (P + N)), *spec = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < P; i++) seq[i] = (int32_t)(bs_rng_u64(&rng) % V);
    bs_session s;
    CHECK(bs_session_init(&s, e, P + N + 80, NULL, &err) == 0, "%s", err.msg);
    int n_plain;
    CHECK(bs_generate_plain(&s, seq, P, N, 0, seq + P, &n_plain, NULL, NULL, &err) == 0, "%s", err.msg);
    CHECK(n_plain == N);
    // Reference taps of every position from one long forward.
    forced f = { .script = seq, .script_len = P + N, .corrupt = corrupt, .vocab = V, .taps = { 1, L }, .be = e->be, .F = 2 * H };
    float *ref = malloc(sizeof(float) * (P + N) * f.F);
    float *ref_be = e->be->alloc(e->be, sizeof(float) * (P + N) * f.F, &err);   // backend memory (a device on CUDA)
    CHECK(ref_be, "%s", err.msg);
    f.tmp = malloc(sizeof(float) * (P + N) * f.F);
    bs_fwd_out fo = { .taps = f.taps, .n_taps = 2, .tap_out = ref_be };
    CHECK(bs_kv_rollback(&s.kv, 0, &err) == 0 && bs_qwen3_forward(&e->target, &s.kv, seq, P + N, &fo, &err) == 0, "%s", err.msg);
    e->be->download(e->be, ref, ref_be, sizeof(float) * (P + N) * f.F);
    e->be->free(e->be, ref_be);
    f.ref_feat = ref;
    bs_kv_rollback(&s.kv, 0, &err);
    bs_drafter d = { .name = "forced", .max_drafts = block, .n_taps = 2, .taps = f.taps, .impl = &f,
                     .add_context = forced_add, .rollback = forced_rollback, .propose = forced_propose };
    bs_spec_opts o = { .draft_max = block, .stop_at_eos = 0 };
    bs_spec_stats st; int n_spec;
    CHECK(bs_generate_spec(&s, &d, seq, P, N, &o, spec, &n_spec, NULL, NULL, &st, &err) == 0, "%s", err.msg);
    CHECK(n_spec == N, "spec produced %d tokens, plain %d", n_spec, N);
    for (int i = 0; i < N; i++) CHECK(spec[i] == seq[P + i], "block %d corrupt %d seed %llu: token %d differs: spec %d, plain %d", block, corrupt, (unsigned long long)seed, i, spec[i], seq[P + i]);
    CHECK(f.max_feat_err < 1e-4, "drafter context features differ from a plain forward by %g", f.max_feat_err);
    if (corrupt == 0) CHECK(st.rounds <= N / (block + 1) + 2, "uncorrupted drafts should be accepted (%d rounds for %d tokens, block %d)", st.rounds, N, block);
    if (corrupt == -1) CHECK(st.accepted == 0, "corrupted first drafts must all be rejected");
    bs_spec_stats_free(&st);
    bs_session_free(&s);
    free(seq); free(spec); free(ref); free(f.tmp);
}

static void greedy_suite_on(int *failed_, const char *dir, const char *device) {
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, dir, device, &err) == 0, "%s", err.msg);
    int blocks[] = { 1, 4, 7, 16 }, corrupts[] = { 0, 3, 2, -1 };
    for (int b = 0; b < 4; b++)
        for (int c = 0; c < 4; c++)
            for (uint64_t seed = 1; seed <= 3; seed++) {
                greedy_case(failed_, e, blocks[b], corrupts[c], seed * 100 + b * 10 + c, 0);
                if (*failed_) { bs_engine_close(e); return; }
            }
    bs_engine_close(e);
}

static void greedy_suite(int *failed_, const char *dir) { greedy_suite_on(failed_, dir, "cpu"); }

// The same on the GPU (SKIPPED with the reason where no CUDA backend is usable).
TEST(spec_greedy_lossless_cuda) {
    NEED_CUDA_DEVICE();
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/target", bs_fixtures_dir());
    greedy_suite_on(failed_, dir, "cuda");
    if (*failed_) return;
    const char *d2 = tu_make_target(300, 48, 3, 6, 2, 8, 96, 1, 3, 42);
    CHECK(d2, "could not write a random target");
    greedy_suite_on(failed_, d2, "cuda");
}

TEST(spec_greedy_lossless_fixture_target) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/target", bs_fixtures_dir());
    greedy_suite(failed_, dir);
}

// A prompt longer than one prefill chunk (256 rows) and than one forward chunk (64 rows): the drafter's
// context must still receive every prompt row's taps, in order.
TEST(spec_greedy_lossless_long_prompt) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/target", bs_fixtures_dir());
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, dir, "cpu", &err) == 0, "%s", err.msg);
    greedy_case(failed_, e, 7, 3, 77, 300);
    if (!*failed_) greedy_case(failed_, e, 16, 0, 78, 257);
    bs_engine_close(e);
}

TEST(spec_greedy_lossless_tied_sharded_target) {
    const char *dir = tu_make_target(300, 48, 3, 6, 2, 8, 96, 1, 3, 42);
    CHECK(dir, "could not write a random target");
    greedy_suite(failed_, dir);
}

// ---- sampling: a drafter that samples from its own q ----
typedef struct qdraft {
    int vocab, wrong_q, taps[1];
    float *q;          // [max][vocab]
    float *scratch;
} qdraft;

// A deterministic, context-dependent draft distribution: logits from a hash of (position, previous token).
static void draft_logits(float *l, int V, int pos, int prev) {
    uint64_t h = (uint64_t)pos * 0x9e3779b97f4a7c15ull ^ (uint64_t)(prev + 1) * 0xbf58476d1ce4e5b9ull;
    for (int i = 0; i < V; i++) { h = bs_splitmix64(&h); l[i] = (float)((h >> 40) % 1000) / 250.0f; }
}

static int q_add(bs_drafter *d, bs_drafter_ctx *c, const float *feat, int n, bs_err *err) { c->n_ctx += n; return 0; }
static int q_rollback(bs_drafter *d, bs_drafter_ctx *c, int n, bs_err *err) { c->n_ctx = n; return 0; }
static int q_propose(bs_drafter *d, bs_drafter_ctx *c, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng, bs_draft *out, bs_err *err) {
    qdraft *g = d->impl;
    int prev = anchor, V = g->vocab;
    float l[64];
    for (int k = 0; k < max_n; k++) {
        float *q = g->q + (size_t)k * V;
        draft_logits(l, V, c->n_ctx + k + 1, prev);
        bs_sampling_probs(s, l, V, q, g->scratch);
        out->tokens[k] = prev = bs_sample_probs(q, V, rng);
        if (g->wrong_q) for (int i = 0; i < V; i++) q[i] = 1.0f / V;   // reports a q it did not draw from
    }
    out->n = max_n; out->q = g->q; out->has_conf = 0;
    return 0;
}

// Exact joint distribution of the first T tokens (T <= 4) by enumeration with plain forwards, each
// step's distribution from the brute-force reference (tu_ref_probs), not from the sampler under test.
static void exact_joint(bs_engine *e, const bs_sampling *smp, const int32_t *prompt, int P, int T, double *joint) {
    int V = e->cfg.vocab_size;
    bs_err err; bs_kv_cache kv; bs_kv_init(&kv, e->kv_pool, 64, &err);
    float *lg = malloc(sizeof(float) * V);
    double *p = malloc(sizeof(double) * V * T);   // p[t]: the step-t distribution of the current prefix
    bs_fwd_out fo = { .logits = lg };
    bs_qwen3_forward(&e->target, &kv, prompt, P, &fo, &err);
    tu_ref_probs(smp, lg, V, p, NULL);
    // Cells in index order (token 0 varies slowest); p[t] depends on the prefix idx[0..t-1], so it is
    // recomputed (one forward of idx[t-1] after the prompt and idx[0..t-2]) whenever idx[t..T-1] wrap to 0.
    int idx[4] = { 0 };
    long cells = 1;
    for (int t = 0; t < T; t++) cells *= V;
    for (long c = 0; c < cells; c++) {
        long r = c;
        for (int t = T - 1; t >= 0; t--) { idx[t] = (int)(r % V); r /= V; }
        for (int t = 1; t < T; t++) {
            int fresh = 1;
            for (int u = t; u < T; u++) fresh &= idx[u] == 0;
            if (!fresh) continue;
            bs_kv_rollback(&kv, P + t - 1, &err);
            bs_qwen3_forward(&e->target, &kv, &idx[t - 1], 1, &fo, &err);
            tu_ref_probs(smp, lg, V, p + (size_t)t * V, NULL);
        }
        double j = 1;
        for (int t = 0; t < T; t++) j *= p[(size_t)t * V + idx[t]];
        joint[c] = j;
    }
    free(lg); free(p);
    bs_kv_free(&kv);
}

// The first T tokens' counts over `runs` seeded generations (speculative with a drafter of `block` drafts
// per round, or plain), against the exact joint: the chi-square p-value, the draws on impossible outcomes,
// and whether every run produced its T tokens (a failed run is reported, never counted as evidence).
typedef struct { double pv; long impossible; int df, failed; double accept; } sampling_result;
static sampling_result sampling_check(bs_engine *e, const bs_sampling *smp, int block, int wrong_q, int use_spec, int T, long runs) {
    int V = e->cfg.vocab_size;
    int32_t prompt[3] = { 1, 5, 2 }, out[4];
    long cells = 1;
    for (int t = 0; t < T; t++) cells *= V;
    double *joint = malloc(sizeof(double) * cells);
    long *counts = calloc((size_t)cells, sizeof(long));
    exact_joint(e, smp, prompt, 3, T, joint);
    bs_err err;
    qdraft g = { .vocab = V, .wrong_q = wrong_q, .taps = { 1 } };
    g.q = malloc(sizeof(float) * BS_MAX_DRAFT * V); g.scratch = malloc(sizeof(float) * 2 * V);
    bs_drafter d = { .name = "q", .max_drafts = block, .n_taps = 1, .taps = g.taps, .impl = &g,
                     .add_context = q_add, .rollback = q_rollback, .propose = q_propose };
    bs_session s;
    bs_sampling sm = *smp;
    bs_session_init(&s, e, 64, &sm, &err);
    bs_spec_opts o = { .draft_max = block, .stop_at_eos = 0 };
    sampling_result res = { 0 };
    long acc = 0, drafted = 0;
    for (long r = 0; r < runs; r++) {
        bs_rng_seed(&s.rng, 1000003ull * r + 17 + block);
        bs_kv_rollback(&s.kv, 0, &err);
        int n = 0; bs_spec_stats st;
        int rc = use_spec ? bs_generate_spec(&s, &d, prompt, 3, T, &o, out, &n, NULL, NULL, &st, &err)
                          : bs_generate_plain(&s, prompt, 3, T, 0, out, &n, NULL, NULL, &err);
        if (use_spec) { acc += st.accepted; drafted += st.drafted; bs_spec_stats_free(&st); }
        if (rc || n != T) { fprintf(stderr, "  run %ld failed (%d tokens): %s\n", r, n, rc ? err.msg : ""); res.failed = 1; break; }
        long c = 0;
        for (int t = 0; t < T; t++) c = c * V + out[t];
        counts[c]++;
    }
    if (!res.failed) {
        res.impossible = tu_impossible_draws(counts, joint, (int)cells);
        res.pv = tu_chi2_gof(counts, joint, (int)cells, runs, &res.df);
        res.accept = drafted ? (double)acc / drafted : 0;
    }
    bs_session_free(&s);
    free(joint); free(counts); free(g.q); free(g.scratch);
    return res;
}

// 20,000 runs per check. Power (the wrong-q check): a drafter that reports a uniform q where it drew from
// another is rejected at p < 1e-6 in every configuration; the pass threshold 1e-4 makes a false alarm
// over the 8 checks below ~1e-3. The runs it counts must all complete (a failed run is a failure).
TEST(spec_sampling_lossless_distribution) {
    const char *dir = tu_make_target(8, 16, 1, 2, 1, 8, 32, 0, 1, 7);
    CHECK(dir, "could not write a random target");
    bs_engine *e; bs_err err = {0};
    // The scalar reference backend: for a model this small it beats dispatching to threads.
    CHECK(bs_engine_open(&e, dir, "cpu-ref", &err) == 0, "%s", err.msg);
    bs_sampling cfgs[] = { { 1.0f, 0, 1.0f, 0 }, { 0.7f, 5, 1.0f, 0 }, { 1.0f, 0, 0.8f, 0 }, { 1.3f, 6, 0.9f, 0 } };
    const long RUNS = 20000;
    for (int c = 0; c < 4; c++) {
        sampling_result plain = sampling_check(e, &cfgs[c], 1, 0, 0, 3, RUNS);
        sampling_result spec = sampling_check(e, &cfgs[c], 2 + c % 3, 0, 1, 3, RUNS);
        sampling_result wrong = sampling_check(e, &cfgs[c], 2 + c % 3, 1, 1, 3, RUNS);
        printf("  T=%.1f top_k=%d top_p=%.1f: p-value plain %.3g (df %d), speculative %.3g (df %d), wrong q %.3g\n",
               cfgs[c].temperature, cfgs[c].top_k, cfgs[c].top_p, plain.pv, plain.df, spec.pv, spec.df, wrong.pv);
        CHECK(!plain.failed && !spec.failed && !wrong.failed, "a run failed");
        CHECK(plain.impossible == 0 && spec.impossible == 0, "draws of impossible tokens: plain %ld, speculative %ld", plain.impossible, spec.impossible);
        CHECK(plain.pv > 1e-4, "plain sampling does not follow the processed distribution (p = %g)", plain.pv);
        CHECK(spec.pv > 1e-4, "speculative sampling is not distributed as the target (p = %g)", spec.pv);
        CHECK(wrong.pv < 1e-6, "a wrong q went undetected (p = %g): the test has no power", wrong.pv);
    }
    bs_engine_close(e);
}

// The bonus token and later rounds. With one draft per round the first three tokens are the prefill's
// anchor, then d_1 and the bonus (all accepted) or the correction and the next round's anchor; with two
// drafts the fourth token is the bonus after a fully accepted block or comes from the second round. (The
// test above, with at least two drafts and three tokens, never sees either.) Combined filters under
// top-k keep the 4-token joint's support small; impossible tokens are counted.
TEST(spec_sampling_bonus_and_later_rounds) {
    const char *dir = tu_make_target(8, 16, 1, 2, 1, 8, 32, 0, 1, 7);
    CHECK(dir, "could not write a random target");
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, dir, "cpu-ref", &err) == 0, "%s", err.msg);
    const bs_sampling cfgs[] = { { 1.0f, 0, 1.0f, 0 }, { 1.3f, 4, 0.9f, 0 } };
    const long RUNS = 10000;   // the bonus drawn from the wrong row scores p = 0 at 10,000 (make mutants)
    for (int c = 0; c < 2; c++)
        for (int block = 1; block <= 2; block++) {
            sampling_result r = sampling_check(e, &cfgs[c], block, 0, 1, block + 2, RUNS);
            printf("  T=%.1f top_k=%d top_p=%.1f, %d draft(s), %d tokens: p-value %.3g (df %d), acceptance %.2f\n", cfgs[c].temperature,
                   cfgs[c].top_k, cfgs[c].top_p, block, block + 2, r.pv, r.df, r.accept);
            CHECK(!r.failed, "a run failed");
            CHECK(r.impossible == 0, "%ld draws of impossible outcomes", r.impossible);
            CHECK(r.pv > 1e-4, "the bonus / later-round tokens are not distributed as the target (p = %g)", r.pv);
            CHECK(r.accept > 0.1 && r.accept < 0.9, "acceptance %.2f: too few (or too many) bonus draws for power", r.accept);
        }
    bs_engine_close(e);
}

// End of sequence inside a block: when an accepted draft (or the bonus token) is an EOS, generation
// stops right after it, exactly where plain decoding stops.
TEST(spec_eos_inside_accepted_block) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/target", bs_fixtures_dir());
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, dir, "cpu", &err) == 0, "%s", err.msg);
    int V = e->cfg.vocab_size, H = e->cfg.hidden_size, L = e->cfg.n_layers, P = 6, N = 40;
    int32_t seq[64], plain[64], spec[64];
    for (int i = 0; i < P; i++) seq[i] = (int32_t)(i * 37 % V);
    bs_session s;
    CHECK(bs_session_init(&s, e, 128, NULL, &err) == 0, "%s", err.msg);
    int n_plain, n_spec;
    CHECK(bs_generate_plain(&s, seq, P, N, 0, seq + P, &n_plain, NULL, NULL, &err) == 0, "%s", err.msg);
    int cases = 0;
    for (int k = 3; k < 20; k += 5) {
        // Make the k-th generated token an end-of-sequence token (if it did not occur earlier).
        int32_t eos = seq[P + k];
        int earlier = 0;
        for (int i = 0; i < k; i++) earlier |= seq[P + i] == eos;
        if (earlier) continue;
        cases++;
        e->cfg.n_eos = 1; e->cfg.eos_ids[0] = eos;
        bs_kv_rollback(&s.kv, 0, &err);
        CHECK(bs_generate_plain(&s, seq, P, N, 1, plain, &n_plain, NULL, NULL, &err) == 0, "%s", err.msg);
        CHECK(n_plain == k + 1 && plain[k] == eos, "plain decoding should stop at the EOS (%d tokens)", n_plain);
        forced f = { .script = seq, .script_len = P + N, .corrupt = 0, .vocab = V, .taps = { 1, L }, .be = e->be, .F = 2 * H };
        float *ref = malloc(sizeof(float) * (P + N) * f.F);
        f.tmp = malloc(sizeof(float) * (P + N) * f.F);
        bs_fwd_out fo = { .taps = f.taps, .n_taps = 2, .tap_out = ref };
        bs_kv_rollback(&s.kv, 0, &err);
        CHECK(bs_qwen3_forward(&e->target, &s.kv, seq, P + N, &fo, &err) == 0, "%s", err.msg);
        f.ref_feat = ref;
        bs_kv_rollback(&s.kv, 0, &err);
        bs_drafter d = { .name = "forced", .max_drafts = 7, .n_taps = 2, .taps = f.taps, .impl = &f,
                         .add_context = forced_add, .rollback = forced_rollback, .propose = forced_propose };
        bs_spec_opts o = { .draft_max = 7, .stop_at_eos = 1 };
        bs_spec_stats st;
        CHECK(bs_generate_spec(&s, &d, seq, P, N, &o, spec, &n_spec, NULL, NULL, &st, &err) == 0, "%s", err.msg);
        CHECK(n_spec == n_plain && memcmp(spec, plain, sizeof(int32_t) * n_plain) == 0, "EOS at %d: speculative output (%d tokens) differs from plain (%d)", k, n_spec, n_plain);
        CHECK(st.accepted > 0, "the EOS case should go through accepted drafts");
        bs_spec_stats_free(&st);
        free(ref); free(f.tmp);
    }
    CHECK(cases >= 2, "only %d EOS placements were usable", cases);
    bs_session_free(&s);
    bs_engine_close(e);
}
