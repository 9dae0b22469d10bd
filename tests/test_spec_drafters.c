// Losslessness with the real drafter models (DFlash, DSpark) in the loop:
// greedy speculative output == plain greedy output over random prompts and lengths, and under
// sampling the first tokens follow the target's exact distribution with the drafters' own q
// (random-weight drafters on a tiny-vocabulary target, so acceptance is partial).
#include <stdlib.h>
#include <string.h>
#include "util/tuning.h"
#include "harness.h"
#include "test_util_models.h"
#include "runtime/runtime.h"
#include "spec/spec_loop.h"
#include "spec/verify.h"
#include "model/dflash.h"
#include "backend/cpu/cpu.h"
#include <math.h>
#include <stdio.h>

static void greedy_random_prompts(int *failed_, const char *dev, const char *target, const char *drafter, int trials) {
    tu_greedy_spec_equals_plain(failed_, dev, target, drafter, NULL, trials, 99);
}

static void greedy_fixture_drafters(int *failed_, const char *dev) {
    char t[1024], d1[1024], d2[1024];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(d1, sizeof d1, "%s/dflash", bs_fixtures_dir());
    snprintf(d2, sizeof d2, "%s/dspark", bs_fixtures_dir());
    greedy_random_prompts(failed_, dev, t, d1, 12);
    if (*failed_) return;
    greedy_random_prompts(failed_, dev, t, d2, 12);
}

TEST(spec_drafters_greedy_lossless_fixtures) { greedy_fixture_drafters(failed_, "cpu"); }

TEST(spec_drafters_greedy_lossless_cuda) {
    NEED_CUDA_DEVICE();
    greedy_fixture_drafters(failed_, "cuda");
}

// Writes a random drafter for a target dir; arch "zlab" or "dspark".
static int make_drafter(const char *target, const char *out, const char *arch, int V, int H, int L, int heads, int kv, int hd, int inter) {
    char cfg[2048], path[512], cmd[2048];
    if (!strcmp(arch, "zlab"))
        snprintf(cfg, sizeof cfg, "{\"architectures\":[\"DFlashDraftModel\"],\"model_type\":\"qwen3\",\"hidden_size\":%d,"
                 "\"num_attention_heads\":%d,\"num_key_value_heads\":%d,\"head_dim\":%d,\"intermediate_size\":%d,"
                 "\"num_hidden_layers\":2,\"vocab_size\":%d,\"rms_norm_eps\":1e-6,\"rope_theta\":10000,\"block_size\":4,"
                 "\"num_target_layers\":%d,\"dflash_config\":{\"mask_token_id\":%d,\"target_layer_ids\":[0,%d]}}",
                 H, heads, kv, hd, inter, V, L, V - 1, L - 1);
    else
        snprintf(cfg, sizeof cfg, "{\"architectures\":[\"Qwen3DSparkModel\"],\"model_type\":\"qwen3\",\"hidden_size\":%d,"
                 "\"num_attention_heads\":%d,\"num_key_value_heads\":%d,\"head_dim\":%d,\"intermediate_size\":%d,"
                 "\"num_hidden_layers\":2,\"vocab_size\":%d,\"rms_norm_eps\":1e-6,\"rope_parameters\":{\"rope_theta\":10000},"
                 "\"block_size\":3,\"num_target_layers\":%d,\"mask_token_id\":%d,\"target_layer_ids\":[0],\"markov_rank\":4,"
                 "\"markov_head_type\":\"vanilla\",\"enable_confidence_head\":true,\"confidence_head_with_markov\":true}",
                 H, heads, kv, hd, inter, V, L, V - 1);
    snprintf(path, sizeof path, "%s.json", out);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(cfg, f); fclose(f);
    snprintf(cmd, sizeof cmd, "%s make-random -c %s --out %s --seed 5", bs_cli_path(), path, out);
    return system(cmd);
}

// A random target (2 heads, 1 kv head) with a z-lab and a DSpark drafter of the same widths in target/zlab
// and target/dspark.
static int make_target_and_drafters(int V, int H, int L, int hd, int inter, uint64_t seed, char target[256], char dz[300], char dd[300]) {
    const char *t = tu_make_target(V, H, L, 2, 1, hd, inter, 0, 1, seed);
    if (!t) return -1;
    snprintf(target, 256, "%s", t);
    snprintf(dz, 300, "%s/zlab", target);
    snprintf(dd, 300, "%s/dspark", target);
    return make_drafter(target, dz, "zlab", V, H, L, 2, 1, hd, inter) || make_drafter(target, dd, "dspark", V, H, L, 2, 1, hd, inter) ? -1 : 0;
}

// The p-value of the first three tokens' counts against the target's exact joint (tu_spec_sampling_pvalue),
// speculative with the drafter in `drafter` (opened here, with the draft vocabulary `vocab` or NULL), or plain
// (drafter NULL).
static double drafter_sampling_pvalue(bs_engine *e, const char *drafter, const char *vocab, const bs_sampling *smp, long runs, double *accept_rate,
                                      long *impossible) {
    bs_drafter *d = NULL;
    bs_err err;
    bs_drafter_opts dop = { .lossy_weights = -1, .draft_vocab = vocab };
    if (drafter && bs_drafter_open_opts(&d, drafter, e, 64, &dop, &err)) { fprintf(stderr, "  %s\n", err.msg); return -1; }
    double pv = tu_spec_sampling_pvalue(e, d, smp, runs, accept_rate, impossible);
    if (d) d->free(d);
    return pv;
}

TEST(spec_drafters_sampling_lossless) {
    int V = 12, H = 16, L = 2;
    char target[256], dz[300], dd[300];
    CHECK(make_target_and_drafters(V, H, L, 8, 32, 11, target, dz, dd) == 0, "make-random target or drafters failed");
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, target, "cpu-ref", &err) == 0, "%s", err.msg);
    bs_sampling cfgs[] = { { 1.0f, 0, 1.0f, 0 }, { 0.8f, 6, 0.9f, 0 } };
    const char *drafters[] = { dz, dd };
    for (int c = 0; c < 2; c++)
        for (int k = 0; k < 2; k++) {
            double ar = 0; long imp = 0;
            double pv = drafter_sampling_pvalue(e, drafters[k], NULL, &cfgs[c], 20000, &ar, &imp);
            CHECK(pv >= 0, "a run failed");
            CHECK(imp == 0, "%ld draws of impossible outcomes", imp);
            printf("  %s T=%.1f top_k=%d top_p=%.1f: p-value %.3g, draft acceptance %.2f\n", k ? "dspark" : "dflash",
                   cfgs[c].temperature, cfgs[c].top_k, cfgs[c].top_p, pv, ar);
            CHECK(pv > 1e-4, "speculative sampling with a real drafter is not distributed as the target (p = %g)", pv);
            CHECK(ar > 0.05 && ar < 0.95, "acceptance %.2f gives the test little power", ar);
        }
    // With a draft vocabulary: q has no mass outside the listed tokens, the target still decides.
    char vp[400];
    snprintf(vp, sizeof vp, "%s/vocab.json", target);
    CHECK(tu_write_text(vp, "[0, 2, 3, 5, 8, 11]") == 0);   // 11 = V - 1, the mask id, never drafted otherwise
    for (int k = 0; k < 2; k++) {
        double ar = 0; long imp = 0;
        double pv = drafter_sampling_pvalue(e, drafters[k], vp, &cfgs[k], 20000, &ar, &imp);
        CHECK(pv >= 0, "a run failed");
        CHECK(imp == 0, "%ld draws of impossible outcomes", imp);
        printf("  %s with a draft vocabulary, T=%.1f top_k=%d top_p=%.1f: p-value %.3g, draft acceptance %.2f\n", k ? "dspark" : "dflash",
               cfgs[k].temperature, cfgs[k].top_k, cfgs[k].top_p, pv, ar);
        CHECK(pv > 1e-4, "speculative sampling with a draft vocabulary is not distributed as the target (p = %g)", pv);
        CHECK(ar > 0.02 && ar < 0.95, "acceptance %.2f gives the test little power", ar);
    }
    bs_engine_close(e);
}

// The same on the GPU, where the distributions, draws and acceptance tests run on the device
// (cuda_sample.cu): plain sampled decoding and both drafters follow the target's exact joint. Fewer runs
// than on the CPU (each round synchronises with the device), so one sampling configuration per check.
TEST(spec_drafters_sampling_lossless_cuda) {
    NEED_CUDA_DEVICE();
    int V = 12, H = 16, L = 2;
    char target[256], dz[300], dd[300];
    CHECK(make_target_and_drafters(V, H, L, 8, 32, 11, target, dz, dd) == 0, "make-random target or drafters failed");
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, target, "cuda", &err) == 0, "%s", err.msg);
    bs_sampling cfgs[] = { { 1.0f, 0, 1.0f, 0 }, { 0.8f, 6, 0.9f, 0 } };
    char vp[400];
    snprintf(vp, sizeof vp, "%s/vocab.json", target);
    CHECK(tu_write_text(vp, "[0, 2, 3, 5, 8, 11]") == 0);
    struct { const char *dir, *name, *vocab; int cfg, power; } runs[] = {
        { NULL, "plain", NULL, 1, 0 }, { dz, "dflash", NULL, 0, 1 }, { dd, "dspark", NULL, 1, 1 }, { dz, "dflash", NULL, 1, 0 },
        { dd, "dspark with a draft vocabulary", vp, 0, 1 },
    };
    for (int k = 0; k < 5; k++) {
        const bs_sampling *c = &cfgs[runs[k].cfg];
        double ar = 0; long imp = 0;
        double pv = drafter_sampling_pvalue(e, runs[k].dir, runs[k].vocab, c, 6000, &ar, &imp);
        CHECK(pv >= 0, "a run failed");
        CHECK(imp == 0, "%ld draws of impossible outcomes", imp);
        printf("  cuda %s T=%.1f top_k=%d top_p=%.1f: p-value %.3g, draft acceptance %.2f\n", runs[k].name, c->temperature, c->top_k,
               c->top_p, pv, ar);
        CHECK(pv > 1e-4, "%s sampling on the GPU is not distributed as the target (p = %g)", runs[k].name, pv);
        if (runs[k].power) CHECK(ar > 0.05 && ar < 0.95, "acceptance %.2f gives the test little power", ar);
    }
    bs_engine_close(e);
}

// DSpark's confidence cut (--confidence-threshold): fewer drafts are verified, the output is unchanged.
TEST(spec_confidence_threshold_lossless) {
    char t[1024], d[1024];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(d, sizeof d, "%s/dspark", bs_fixtures_dir());
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, t, "cpu", &err) == 0, "%s", err.msg);
    int32_t prompt[] = { 11, 22, 33, 44, 55 }, out[3][48];
    int n[3];
    long drafted[3];
    float thr[3] = { 0.0f, 0.5f, 1.0f };
    for (int i = 0; i < 3; i++) {
        bs_session s; bs_drafter *dr; bs_spec_stats st;
        CHECK(bs_session_init(&s, e, 128, NULL, &err) == 0 && bs_drafter_open(&dr, d, e, 128, &err) == 0, "%s", err.msg);
        bs_spec_opts o = { .draft_max = 7, .confidence_threshold = thr[i], .stop_at_eos = 0 };
        CHECK(bs_generate_spec(&s, dr, prompt, 5, 48, &o, out[i], &n[i], NULL, NULL, &st, &err) == 0, "%s", err.msg);
        drafted[i] = st.drafted;
        bs_spec_stats_free(&st); dr->free(dr); bs_session_free(&s);
    }
    CHECK(n[0] == 48 && n[1] == 48 && n[2] == 48);
    CHECK(!memcmp(out[0], out[1], sizeof out[0]) && !memcmp(out[0], out[2], sizeof out[0]), "the confidence cut changed the output");
    CHECK(drafted[2] < drafted[0], "a threshold of 1 must cut drafts (verified %ld vs %ld)", drafted[2], drafted[0]);
    CHECK(drafted[1] <= drafted[0] && drafted[2] <= drafted[1]);
    bs_engine_close(e);
}

// 8-bit drafter weights (bs_tuning's drafter_fp8, CUDA): the drafter's logits move (it really runs on
// the 8-bit copies) but stay close to the bf16 drafter's, and greedy speculative output still equals
// plain greedy output. A 128-wide target, so every drafter matrix can be stored in 8 bits.
static void fp8_drafter_logits(int *failed_, bs_engine *e, const char *drafter) {
    bs_err err = {0};
    int V = e->cfg.vocab_size, P = 9;
    int32_t prompt[9] = { 3, 14, 15, 9, 26, 5, 35, 8, 9 };
    float *lg[2] = { NULL, NULL };
    int n = 0;
    for (int lossy = 0; lossy < 2; lossy++) {
        bs_tuning_edit()->drafter_fp8 = lossy;
        bs_drafter_ctx dc;
        bs_drafter *d = tu_drafter_with_context(e, drafter, NULL, &dc, prompt, P, &err);
        CHECK(d, "%s", err.msg);
        n = d->max_drafts;
        lg[lossy] = calloc((size_t)n * V, sizeof(float));
        bs_dflash_inspect ins = { .logits = lg[lossy] };
        bs_draft dr;
        CHECK(bs_dflash_forward_block(d, &dc, 7, BS_MAX_DRAFT, NULL, NULL, &dr, &ins, &err) == 0, "%s", err.msg);
        tu_drafter_free(d, &dc);
    }
    bs_tuning_edit()->drafter_fp8 = 0;
    double mx = 1e-30, dif = 0;
    for (size_t i = 0; i < (size_t)n * V; i++) { if (fabs(lg[0][i]) > mx) mx = fabs(lg[0][i]); if (fabs(lg[1][i] - lg[0][i]) > dif) dif = fabs(lg[1][i] - lg[0][i]); }
    printf("  %s: lossy vs exact drafter logits: max |diff| %.3g (max |logit| %.3g)\n", drafter, dif, mx);
    CHECK(dif > 0, "%s: the lossy drafter gives the exact drafter's logits bit for bit (its weights were not made lossy)", drafter);
    CHECK(dif < 0.1 * mx, "%s: the lossy drafter's logits are far from the exact drafter's (%g of %g)", drafter, dif, mx);
    free(lg[0]); free(lg[1]);
}

// Lossy drafters on a device, from a 128-wide target and a z-lab and a DSpark drafter made with seed.
static void lossy_drafters_case(int *failed_, const char *dev, uint64_t seed) {
    int V = 64, H = 128, L = 2;
    char target[256], dz[300], dd[300];
    CHECK(make_target_and_drafters(V, H, L, 64, 256, seed, target, dz, dd) == 0, "make-random target or drafters failed");
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, target, dev, &err) == 0, "%s", err.msg);
    fp8_drafter_logits(failed_, e, dz);
    fp8_drafter_logits(failed_, e, dd);
    bs_engine_close(e);
    if (*failed_) return;
    bs_tuning_edit()->drafter_fp8 = 1;
    greedy_random_prompts(failed_, dev, target, dz, 12);
    if (!*failed_) greedy_random_prompts(failed_, dev, target, dd, 12);
    bs_tuning_edit()->drafter_fp8 = 0;
}

TEST(spec_drafters_fp8_lossless_cuda) {
    NEED_CUDA_DEVICE();
    lossy_drafters_case(failed_, "cuda", 17);
}

// The same on the CPU, where lossy means the bf16 dot-product kernels (AVX512-BF16; activations rounded to
// bf16): the drafter's logits move but stay close, and greedy speculative output equals plain greedy output.
TEST(spec_drafters_lossy_lossless_cpu) {
    if (!bs_cpu_path_supported(BS_CPU_AVX512BF16)) SKIP("this CPU has no AVX512-BF16: the CPU keeps exact drafter weights");
    if (bs_cpu_default_path() != BS_CPU_AVX512 && bs_cpu_default_path() != BS_CPU_AVX512BF16)
        SKIP("the CPU backend runs a non-AVX-512 path (BS_CPU_KERNELS): it keeps exact drafter weights");
    lossy_drafters_case(failed_, "cpu", 19);
}

// A round's drafts left in backend memory (propose_on_device) and verified from there (the forward
// embeds them on the device, one download) == the drafts downloaded by propose and verified from host
// ids. Greedy (bs_verify_greedy): the same drafts, target picks, logits and taps bit for bit, over rounds
// that replay recorded forwards on backends that record. Sampled (bs_verify_sampled, two sampling
// configurations, the same RNG seed and uniforms): the same drafts, accepted count and emitted token.
static void verify_paths(int *failed_, const char *dev, const char *drafter_dir) {
    bs_err err = {0};
    char t[1024];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    bs_engine *e;
    CHECK(bs_engine_open(&e, t, dev, &err) == 0, "%s", err.msg);
    bs_backend *be = e->be;
    int32_t prompt[12];
    for (int i = 0; i < 12; i++) prompt[i] = (i * 37 + 5) % e->cfg.vocab_size;
    bs_drafter_ctx dc;
    bs_drafter *d = tu_drafter_with_context(e, drafter_dir, NULL, &dc, prompt, 12, &err);
    CHECK(d, "%s", err.msg);
    CHECK(d->propose_on_device, "%s: no propose_on_device", drafter_dir);
    const int V = e->cfg.vocab_size, F = d->n_taps * e->cfg.hidden_size, n = d->max_drafts;
    bs_kv_cache ka, kb;
    CHECK(bs_kv_init(&ka, e->kv_pool, 128, &err) == 0 && bs_kv_init(&kb, e->kv_pool, 128, &err) == 0, "%s", err.msg);
    float *la = be->alloc(be, sizeof(float) * (n + 1) * V, &err), *lb = be->alloc(be, sizeof(float) * (n + 1) * V, &err);
    float *ta = be->alloc(be, sizeof(float) * (n + 1) * F, &err), *tb = be->alloc(be, sizeof(float) * (n + 1) * F, &err);
    int32_t *scratch = be->alloc(be, sizeof(int32_t) * (2 * BS_MAX_DRAFT + 2), &err);
    CHECK(la && lb && ta && tb && scratch, "%s", err.msg);
    bs_fwd_out fa = { .logits = la }, fb = { .logits = lb };
    CHECK(bs_qwen3_forward(&e->target, &ka, prompt, 12, &fa, &err) == 0 && bs_qwen3_forward(&e->target, &kb, prompt, 12, &fb, &err) == 0, "%s", err.msg);
    static const bs_sampling greedy = { 0 };
    for (int round = 0; round < 4; round++) {
        const int32_t anchor = (round * 101 + 7) % V;
        bs_draft dh, dd;
        CHECK(d->propose(d, &dc, anchor, n, &greedy, NULL, &dh, &err) == 0, "%s", err.msg);
        CHECK(d->propose_on_device(d, &dc, anchor, n, &greedy, NULL, &dd, &err) == 0, "%s", err.msg);
        CHECK(dd.dev_tokens && dd.n == dh.n && !dh.dev_tokens, "round %d: drafts not left on the device (n %d / %d)", round, dd.n, dh.n);
        bs_fwd_out va = { .logits = la, .logits_all = 1, .taps = d->taps, .n_taps = d->n_taps, .tap_out = ta };
        bs_fwd_out vb = { .logits = lb, .logits_all = 1, .taps = d->taps, .n_taps = d->n_taps, .tap_out = tb };
        int32_t ia[BS_MAX_DRAFT + 1], ib[BS_MAX_DRAFT + 1], pa[BS_MAX_DRAFT + 1], pb[BS_MAX_DRAFT + 1];
        CHECK(bs_verify_greedy(&e->target, NULL, &ka, anchor, &dh, dh.n, &va, scratch, ia, pa, &err) == 0, "%s", err.msg);
        CHECK(bs_verify_greedy(&e->target, NULL, &kb, anchor, &dd, dd.n, &vb, scratch, ib, pb, &err) == 0, "%s", err.msg);
        CHECK(!memcmp(ia, ib, sizeof(int32_t) * (dh.n + 1)) && !memcmp(pa, pb, sizeof(int32_t) * (dh.n + 1)),
              "round %d: drafts or target picks differ between the two paths", round);
        const size_t nl = (size_t)(dh.n + 1) * V, nt = (size_t)(dh.n + 1) * F;
        float *a = malloc(sizeof(float) * nl), *b = malloc(sizeof(float) * nl);
        be->download(be, a, la, sizeof(float) * nl); be->download(be, b, lb, sizeof(float) * nl);
        CHECK(!memcmp(a, b, sizeof(float) * nl), "round %d: verify logits differ between the two paths", round);
        free(a); free(b);
        a = malloc(sizeof(float) * nt); b = malloc(sizeof(float) * nt);
        be->download(be, a, ta, sizeof(float) * nt); be->download(be, b, tb, sizeof(float) * nt);
        CHECK(!memcmp(a, b, sizeof(float) * nt), "round %d: verify taps differ between the two paths", round);
        free(a); free(b);
        CHECK(bs_kv_rollback(&ka, 12 + round, &err) == 0 && bs_kv_rollback(&kb, 12 + round, &err) == 0, "%s", err.msg);
    }
    // Sampled rounds: the same RNG state on both paths, so the same draws; the host path's drafts are
    // verified before the device path proposes (the drafter's q rows are its own buffer).
    const bs_sampling smp[2] = { { .temperature = 0.8f }, { .temperature = 1.0f, .top_k = 20, .top_p = 0.9f } };
    float *res = malloc(sizeof(float) * V);
    for (int round = 0; round < 6 && !*failed_; round++) {
        const bs_sampling *sm = &smp[round & 1];
        const int32_t anchor = (round * 53 + 11) % V;
        bs_rng ra, rb;
        bs_rng_seed(&ra, 1000 + round); bs_rng_seed(&rb, 1000 + round);
        double u[BS_MAX_DRAFT + 1];
        for (int k = 0; k <= n; k++) u[k] = (k * 0.37 + round * 0.11) - (int)(k * 0.37 + round * 0.11);
        bs_fwd_out va = { .logits = la, .logits_all = 1, .taps = d->taps, .n_taps = d->n_taps, .tap_out = ta };
        bs_fwd_out vb = { .logits = lb, .logits_all = 1, .taps = d->taps, .n_taps = d->n_taps, .tap_out = tb };
        int32_t ia[BS_MAX_DRAFT + 1], ib[BS_MAX_DRAFT + 1], na, nb;
        bs_draft dh, dd;
        CHECK(d->propose(d, &dc, anchor, n, sm, &ra, &dh, &err) == 0, "%s", err.msg);
        int aa = bs_verify_sampled(&e->target, NULL, &ka, anchor, &dh, dh.n, &va, sm, u, res, scratch, ia, &na, &err);
        CHECK(aa >= 0, "%s", err.msg);
        CHECK(d->propose_on_device(d, &dc, anchor, n, sm, &rb, &dd, &err) == 0, "%s", err.msg);
        CHECK(dd.n == dh.n && dd.q && dd.dev_tokens, "sampled round %d: n %d / %d, q %p, drafts not left on the device", round, dd.n, dh.n,
              (const void *)dd.q);
        int ab = bs_verify_sampled(&e->target, NULL, &kb, anchor, &dd, dd.n, &vb, sm, u, res, scratch, ib, &nb, &err);
        CHECK(ab >= 0, "%s", err.msg);
        CHECK(aa == ab && na == nb && !memcmp(ia, ib, sizeof(int32_t) * (dh.n + 1)),
              "sampled round %d: host path accepted %d then %d, device path %d then %d", round, aa, na, ab, nb);
        CHECK(bs_kv_rollback(&ka, 12, &err) == 0 && bs_kv_rollback(&kb, 12, &err) == 0, "%s", err.msg);
    }
    free(res);
    be->free(be, la); be->free(be, lb); be->free(be, ta); be->free(be, tb); be->free(be, scratch);
    bs_kv_free(&ka); bs_kv_free(&kb);
    tu_drafter_free(d, &dc);
    bs_engine_close(e);
}
static void verify_paths_fixtures(int *failed_, const char *dev) {
    char d1[1024], d2[1024];
    snprintf(d1, sizeof d1, "%s/dflash", bs_fixtures_dir());
    snprintf(d2, sizeof d2, "%s/dspark", bs_fixtures_dir());
    verify_paths(failed_, dev, d1);
    if (!*failed_) verify_paths(failed_, dev, d2);
}
TEST(spec_verify_greedy_paths) { verify_paths_fixtures(failed_, "cpu"); }
TEST(spec_verify_greedy_paths_cuda) {
    NEED_CUDA_DEVICE();
    verify_paths_fixtures(failed_, "cuda");
}

// The speculative loop synchronises with the host once per round (the issue's "one host
// synchronisation at most"), greedy and sampled, DFlash and DSpark: the CPU backend's ops that hand
// results to the host (download, argmax to the host, sample_rows with host ids, accept_sampled, sync)
// are counted while bs_generate_spec runs. The prefill's first token is one more. With a confidence
// cut the drafts' confidences are needed before the verify: two per round there.
static long g_host_syncs;
static bs_backend g_orig;
static void cnt_download(bs_backend *be, void *d, const void *s, size_t n) { g_host_syncs++; g_orig.download(be, d, s, n); }
static void cnt_sync(bs_backend *be) { g_host_syncs++; g_orig.sync(be); }
// The CPU implements its "results stay in backend memory" ops with the host-returning ones; calls made
// inside them (depth > 0) hand nothing to a host that waits.
static int g_depth;
static void cnt_argmax(bs_backend *be, int32_t *o, const float *l, int n, int V) { if (!g_depth) g_host_syncs++; g_orig.argmax(be, o, l, n, V); }
static void cnt_argmax_to(bs_backend *be, int32_t *o, const float *l, int n, int V, const int32_t *map) {
    g_depth++; g_orig.argmax_to(be, o, l, n, V, map); g_depth--;
}
static int cnt_sample_rows(bs_backend *be, float *p, const float *l, int n, int V, float t, int k, float tp, const double *u, int32_t *ids) {
    if (ids && !g_depth) g_host_syncs++;
    return g_orig.sample_rows ? g_orig.sample_rows(be, p, l, n, V, t, k, tp, u, ids) : -1;
}
static int cnt_sample_rows_to(bs_backend *be, float *p, const float *l, int n, int V, float t, int k, float tp, const double *u, int32_t *ids) {
    const bs_sampling s = { .temperature = t, .top_k = k, .top_p = tp };
    g_depth++;
    bs_sample_rows(be, &s, p, l, n, V, u, ids);   // the host sampler (cnt_sample_rows declines), ids in host memory
    g_depth--;
    return 0;
}
static int cnt_accept(bs_backend *be, const float *p, const float *q, const int32_t *d, int n, int V, const double *u, int32_t *next) {
    g_host_syncs++;   // returns the verdict to the host
    if (g_orig.accept_sampled) return g_orig.accept_sampled(be, p, q, d, n, V, u, next);
    float *res = malloc(sizeof(float) * V);
    int a = bs_accept_sampled_u(p, q, d, n, V, u, res, next);
    free(res);
    return a;
}
static void syncs_per_run(int *failed_, bs_engine *e, const char *drafter, const bs_sampling *smp, float thr, int *rounds, long *syncs) {
    bs_err err = {0};
    bs_session s; bs_drafter *dr; bs_spec_stats st;
    int32_t prompt[] = { 11, 22, 33, 44, 55 }, out[40];
    int n = 0;
    *rounds = 0; *syncs = -1;
    CHECK(bs_session_init(&s, e, 128, smp, &err) == 0, "%s", err.msg);
    CHECK(bs_drafter_open(&dr, drafter, e, 128, &err) == 0, "%s", err.msg);
    bs_spec_opts o = { .draft_max = 7, .confidence_threshold = thr, .stop_at_eos = 0 };
    g_host_syncs = 0;
    int rc = bs_generate_spec(&s, dr, prompt, 5, 40, &o, out, &n, NULL, NULL, &st, &err);
    *syncs = g_host_syncs;
    *rounds = st.rounds;
    bs_spec_stats_free(&st); dr->free(dr); bs_session_free(&s);
    CHECK(rc == 0 && n == 40, "%s", err.msg);
}
TEST(spec_one_host_sync_per_round) {
    char t[1024], dirs[2][1024];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(dirs[0], sizeof dirs[0], "%s/dflash", bs_fixtures_dir());
    snprintf(dirs[1], sizeof dirs[1], "%s/dspark", bs_fixtures_dir());
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, t, "cpu", &err) == 0, "%s", err.msg);
    bs_backend *be = e->be;
    g_orig = *be;
    be->download = cnt_download; be->sync = cnt_sync; be->argmax = cnt_argmax;
    if (be->argmax_to) be->argmax_to = cnt_argmax_to;
    be->sample_rows = cnt_sample_rows;
    if (!be->sample_rows_to) be->sample_rows_to = cnt_sample_rows_to;
    be->accept_sampled = cnt_accept;
    const bs_sampling smp[2] = { { 0 }, { .temperature = 0.8f, .top_p = 0.95f, .seed = 7 } };
    for (int di = 0; di < 2 && !*failed_; di++)
        for (int si = 0; si < 2 && !*failed_; si++) {
            int rounds; long syncs;
            syncs_per_run(failed_, e, dirs[di], &smp[si], 0.0f, &rounds, &syncs);
            CHECK(rounds > 0 && syncs == rounds + 1, "%s, %s: %ld host synchronisations for %d rounds (want one per round + the first token)",
                  dirs[di], si ? "sampled" : "greedy", syncs, rounds);
        }
    if (!*failed_) {   // DSpark with a confidence cut (greedy): the confidences come first, then the verdict
        int rounds; long syncs;
        syncs_per_run(failed_, e, dirs[1], &smp[0], 0.5f, &rounds, &syncs);
        CHECK(rounds > 0 && syncs <= 2 * rounds + 1, "confidence cut: %ld host synchronisations for %d rounds", syncs, rounds);
    }
    *be = g_orig;
    bs_engine_close(e);
}
