// DFlash (z-lab) and DSpark (DeepSpec) drafters against the reference vectors of shared/fixtures/{dflash,dspark}:
// context features from the target's prefill, the block's hidden rows, logits, the greedy (Markov) walk and the
// confidence logits; through the library and through `blockspec dump` as a user would run it.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "util/tuning.h"
#include "harness.h"
#include "fixture_util.h"
#include "test_util_models.h"
#include "engine/engine.h"
#include "model/dflash.h"

#define TOL 1e-3
// The block's hidden rows agree with the fp32 reference to ~2e-6; a drafter that rounds its RoPE inverse
// frequencies to bf16 (as a module cast to bf16 does) moves them by ~1e-3 on these random weights and by
// ~0.5% on a trained drafter, so this tighter bound catches that artifact with a 10x margin either way.
#define TOL_HIDDEN 1e-4

static void check_drafter(int *failed_, const char *dev, const char *which) {
    char tdir[1024], ddir[1024], file[1024], tfile[1024];
    snprintf(tdir, sizeof tdir, "%s/target", bs_fixtures_dir());
    snprintf(ddir, sizeof ddir, "%s/%s", bs_fixtures_dir(), which);
    snprintf(file, sizeof file, "%s/%s.expect.safetensors", bs_fixtures_dir(), which);
    snprintf(tfile, sizeof tfile, "%s/target.expect.safetensors", bs_fixtures_dir());
    fx_check_drafter_fixture_at(failed_, dev, tdir, tfile, ddir, file);
}

void fx_check_drafter_fixture_at(int *failed_, const char *dev, const char *tdir, const char *tfile, const char *ddir, const char *file) {
    bs_err err = {0};
    bs_engine *e; bs_checkpoint *x; bs_drafter *d;
    CHECK(bs_engine_open(&e, tdir, dev, &err) == 0, "%s", err.msg);
    CHECK(bs_checkpoint_open(&x, file, &err) == 0, "%s", err.msg);
    CHECK(bs_dflash_open(&d, ddir, &e->target, 256, &err) == 0, "%s", err.msg);
    bs_drafter_ctx dc;
    CHECK(bs_drafter_ctx_init(d, &dc, 256, &err) == 0, "%s", err.msg);
    const bs_drafter_config *c = bs_dflash_config(d);
    int V = e->cfg.vocab_size, H = e->cfg.hidden_size, B = c->block_size, zl = c->arch == BS_DRAFTER_ZLAB;
    long P, m, nB, nd;
    bs_checkpoint *tx;
    CHECK(bs_checkpoint_open(&tx, tfile, &err) == 0, "%s", err.msg);
    const int32_t *prompt = fx_tensor(tx, "prompt_ids", "I32", -1, &P);
    const int32_t *ids = fx_tensor(x, "target_layer_ids", "I32", -1, &m);
    const float *feat_x = fx_tensor(x, "context_features", "F32", -1, NULL);
    const int32_t *blk_ids = fx_tensor(x, "block_input_ids", "I32", -1, &nB);
    const float *hid_x = fx_tensor(x, "block_hidden", "F32", (long)B * H, NULL);
    const int32_t *toks_x = fx_tensor(x, "draft_tokens", "I32", -1, &nd);
    CHECK(prompt && ids && feat_x && blk_ids && hid_x && toks_x, "reference tensors missing or misshaped");
    CHECK(m == c->n_taps && d->n_taps == m, "tap count %d vs %ld", d->n_taps, m);
    for (int i = 0; i < m; i++) CHECK(ids[i] == c->target_layer_ids[i] && d->taps[i] == ids[i] + 1, "tap %d", i);
    CHECK(nB == B && nd == d->max_drafts, "block %ld / drafts %ld", nB, nd);

    // Prefill with the drafter's taps.
    bs_kv_cache kv;
    CHECK(bs_kv_init(&kv, e->kv_pool, 256, &err) == 0, "%s", err.msg);
    float *logits = e->be->alloc(e->be, sizeof(float) * P * V, &err), *feat = e->be->alloc(e->be, sizeof(float) * P * m * H, &err);
    bs_fwd_out fo = { .logits = logits, .taps = d->taps, .n_taps = d->n_taps, .tap_out = feat };
    CHECK(bs_qwen3_forward(&e->target, &kv, prompt, (int)P, &fo, &err) == 0, "%s", err.msg);
    float *feat_h = malloc(sizeof(float) * P * m * H), *last = malloc(sizeof(float) * V);
    e->be->download(e->be, feat_h, feat, sizeof(float) * P * m * H);
    e->be->download(e->be, last, logits, sizeof(float) * V);
    CHECK(fx_max_abs_diff(feat_h, feat_x, P * m * H) < TOL, "context features differ by %g", fx_max_abs_diff(feat_h, feat_x, P * m * H));
    int32_t anchor = bs_argmax(last, V);
    CHECK(anchor == blk_ids[0], "anchor %d vs %d", anchor, blk_ids[0]);

    // Feed the context in two pieces (5 + rest) to exercise the incremental cache.
    CHECK(d->add_context(d, &dc, feat, 5, &err) == 0, "%s", err.msg);
    CHECK(d->add_context(d, &dc, feat + (size_t)5 * m * H, (int)P - 5, &err) == 0, "%s", err.msg);
    CHECK(dc.n_ctx == P);
    int32_t bids[BS_MAX_DRAFT + 1];
    float *hid = malloc(sizeof(float) * B * H), *lg = malloc(sizeof(float) * B * V), *st = malloc(sizeof(float) * B * V), conf[BS_MAX_DRAFT];
    bs_dflash_inspect ins = { .block_ids = bids, .block_hidden = hid, .logits = lg, .step_logits = st, .conf_logits = conf };
    bs_draft dr;
    CHECK(bs_dflash_forward_block(d, &dc, anchor, BS_MAX_DRAFT, NULL, NULL, &dr, &ins, &err) == 0, "%s", err.msg);
    CHECK(memcmp(bids, blk_ids, sizeof(int32_t) * B) == 0, "block ids differ");
    CHECK(fx_max_abs_diff(hid, hid_x, (long)B * H) < TOL_HIDDEN, "block hidden differs by %g", fx_max_abs_diff(hid, hid_x, (long)B * H));
    CHECK(dr.n == nd && dr.q == NULL);
    for (int k = 0; k < nd; k++) CHECK(dr.tokens[k] == toks_x[k], "draft %d: %d vs %d", k, dr.tokens[k], toks_x[k]);
    if (zl) {
        const float *lx = fx_tensor(x, "draft_logits", "F32", nd * V, NULL);
        CHECK(lx, "draft_logits missing");
        CHECK(fx_max_abs_diff(lg, lx, nd * V) < TOL, "draft logits differ by %g", fx_max_abs_diff(lg, lx, nd * V));
        CHECK(!dr.has_conf);
    } else {
        const float *bx = fx_tensor(x, "base_logits", "F32", nd * V, NULL), *sx = fx_tensor(x, "step_logits", "F32", nd * V, NULL);
        const float *cx = fx_tensor(x, "confidence_logits", "F32", nd, NULL);
        CHECK(bx && sx && cx, "dspark reference tensors missing");
        CHECK(fx_max_abs_diff(lg, bx, nd * V) < TOL, "base logits differ by %g", fx_max_abs_diff(lg, bx, nd * V));
        CHECK(fx_max_abs_diff(st, sx, nd * V) < TOL, "step logits differ by %g", fx_max_abs_diff(st, sx, nd * V));
        CHECK(fx_max_abs_diff(conf, cx, nd) < TOL, "confidence logits differ by %g", fx_max_abs_diff(conf, cx, nd));
        CHECK(dr.has_conf);
        printf("  %s on %s: max |diff| block hidden %.2g, base logits %.2g, step logits %.2g, confidence logits %.2g\n", ddir, dev,
               fx_max_abs_diff(hid, hid_x, (long)B * H), fx_max_abs_diff(lg, bx, nd * V), fx_max_abs_diff(st, sx, nd * V), fx_max_abs_diff(conf, cx, nd));
        for (int k = 0; k < nd; k++) CHECK_NEAR(dr.conf[k], 1.0 / (1.0 + exp(-cx[k])), 1e-4);
    }
    // propose() is the same path: same tokens; a shorter proposal is a prefix.
    bs_draft p2;
    CHECK(d->propose(d, &dc, anchor, 3, NULL, NULL, &p2, &err) == 0, "%s", err.msg);
    CHECK(p2.n == 3 && memcmp(p2.tokens, dr.tokens, sizeof(int32_t) * 3) == 0, "short proposal is not a prefix");
    // Rollback + re-adding the same rows reproduces the same proposal.
    CHECK(d->rollback(d, &dc, 4, &err) == 0 && dc.n_ctx == 4, "%s", err.msg);
    CHECK(d->rollback(d, &dc, 5, &err) != 0, "rolling forward must be refused");
    CHECK(d->add_context(d, &dc, feat + (size_t)4 * m * H, (int)P - 4, &err) == 0, "%s", err.msg);
    CHECK(d->propose(d, &dc, anchor, BS_MAX_DRAFT, NULL, NULL, &p2, &err) == 0, "%s", err.msg);
    CHECK(p2.n == dr.n && memcmp(p2.tokens, dr.tokens, sizeof(int32_t) * dr.n) == 0, "proposal after rollback differs");

    free(feat_h); free(last); free(hid); free(lg); free(st);
    e->be->free(e->be, logits); e->be->free(e->be, feat);
    bs_kv_free(&kv);
    tu_drafter_free(d, &dc);
    bs_checkpoint_close(x); bs_checkpoint_close(tx);
    bs_engine_close(e);
}

// The same on the GPU (skipped, with the reason, where no CUDA device is usable).
TEST(drafter_fixture_cuda) {
    NEED_CUDA_DEVICE();
    check_drafter(failed_, "cuda", "dflash");
    if (*failed_) return;
    check_drafter(failed_, "cuda", "dspark");
}

// A recorded block pass (CUDA graphs) replayed at later context lengths gives the plain pass's block
// hidden rows, logits (and DSpark's Markov step logits and confidences) bit for bit.
static void check_drafter_graphs(int *failed_, const char *which) {
    char tdir[1024], ddir[1024];
    bs_err err = {0};
    snprintf(tdir, sizeof tdir, "%s/target", bs_fixtures_dir());
    snprintf(ddir, sizeof ddir, "%s/%s", bs_fixtures_dir(), which);
    bs_engine *e; bs_drafter *d;
    CHECK(bs_engine_open(&e, tdir, "cuda", &err) == 0, "%s", err.msg);
    CHECK(bs_dflash_open(&d, ddir, &e->target, 256, &err) == 0, "%s", err.msg);
    bs_drafter_ctx dc;
    CHECK(bs_drafter_ctx_init(d, &dc, 256, &err) == 0, "%s", err.msg);
    const bs_drafter_config *c = bs_dflash_config(d);
    int V = e->cfg.vocab_size, H = e->cfg.hidden_size, B = c->block_size, m = d->n_taps, P = 24, n = d->max_drafts;
    int32_t prompt[24];
    for (int i = 0; i < P; i++) prompt[i] = (i * 37 + 11) % V;
    bs_kv_cache kv;
    CHECK(bs_kv_init(&kv, e->kv_pool, 256, &err) == 0, "%s", err.msg);
    float *logits = e->be->alloc(e->be, sizeof(float) * P * V, &err), *feat = e->be->alloc(e->be, sizeof(float) * P * m * H, &err);
    bs_fwd_out fo = { .logits = logits, .taps = d->taps, .n_taps = d->n_taps, .tap_out = feat };
    CHECK(bs_qwen3_forward(&e->target, &kv, prompt, P, &fo, &err) == 0, "%s", err.msg);
    CHECK(d->add_context(d, &dc, feat, 8, &err) == 0, "%s", err.msg);
    size_t nf = (size_t)B * H + 2 * (size_t)n * V + n;
    float *ref = malloc(sizeof(float) * nf), *got = malloc(sizeof(float) * nf);
    int saved = e->target.use_graphs;
    for (int step = 0; step < 6 && !*failed_; step++) {
        int32_t anchor = prompt[8 + step], bids[BS_MAX_DRAFT + 1];
        bs_draft r0, r1;
        float *bufs[2] = { ref, got };
        for (int run = 0; run < 4 && !*failed_; run++) {   // plain, then 3 with graphs: plain, record + replay, replay
            float *o = bufs[run > 0];
            bs_dflash_inspect ins = { .block_ids = bids, .block_hidden = o, .logits = o + (size_t)B * H,
                                      .step_logits = o + (size_t)B * H + (size_t)n * V, .conf_logits = o + (size_t)B * H + 2 * (size_t)n * V };
            memset(o, 0, sizeof(float) * nf);
            e->target.use_graphs = run > 0;
            CHECK(bs_dflash_forward_block(d, &dc, anchor, BS_MAX_DRAFT, NULL, NULL, run ? &r1 : &r0, &ins, &err) == 0, "%s", err.msg);
            if (run == 0) continue;
            CHECK(r1.n == r0.n && memcmp(r1.tokens, r0.tokens, sizeof(int32_t) * r0.n) == 0, "%s step %d run %d: tokens differ", which, step, run);
            CHECK(memcmp(ref, got, sizeof(float) * nf) == 0, "%s step %d run %d: block hidden / logits differ from the plain pass", which, step, run);
        }
        // Greedy picks on the device (no inspection): plain, then recorded with the pass and replayed twice;
        // the drafts and confidences of the plain host walk above every time.
        for (int run = 0; run < 4 && !*failed_; run++) {
            bs_draft r2;
            e->target.use_graphs = run > 0;
            CHECK(d->propose(d, &dc, anchor, BS_MAX_DRAFT, NULL, NULL, &r2, &err) == 0, "%s", err.msg);
            CHECK(r2.n == r0.n && memcmp(r2.tokens, r0.tokens, sizeof(int32_t) * r0.n) == 0, "%s step %d device picks run %d: tokens differ", which, step, run);
            CHECK(r2.has_conf == r0.has_conf && memcmp(r2.conf, r0.conf, sizeof(float) * r0.n) == 0, "%s step %d device picks run %d: confidences differ", which, step, run);
        }
        CHECK(d->add_context(d, &dc, feat + (size_t)(8 + step) * m * H, 1, &err) == 0, "%s", err.msg);
    }
    e->target.use_graphs = saved;
    free(ref); free(got);
    e->be->free(e->be, logits); e->be->free(e->be, feat);
    bs_kv_free(&kv);
    tu_drafter_free(d, &dc);
    bs_engine_close(e);
}

TEST(drafter_graphs_cuda) {
    NEED_CUDA_DEVICE();
    check_drafter_graphs(failed_, "dflash");
    if (*failed_) return;
    check_drafter_graphs(failed_, "dspark");
}

TEST(drafter_fixture_dflash_cpu_reference) { check_drafter(failed_, "cpu-ref", "dflash"); }
TEST(drafter_fixture_dflash_cpu) { check_drafter(failed_, "cpu", "dflash"); }
TEST(drafter_fixture_dspark_cpu_reference) { check_drafter(failed_, "cpu-ref", "dspark"); }
TEST(drafter_fixture_dspark_cpu) { check_drafter(failed_, "cpu", "dspark"); }

// `blockspec dump -m target -d drafter` as a user runs it: every reference tensor of the drafter set within
// TOL, ids exact, and (with -n) the greedy speculative run's spec_output_ids and acceptance_lengths.
static void check_dump(int *failed_, const char *which) {
    char cmd[4096], out[1024], exp_path[1024], tpath[1024];
    const char *tmp = bs_test_tmpdir("dump");
    CHECK(tmp);
    snprintf(out, sizeof out, "%s/%s.safetensors", tmp, which);
    snprintf(exp_path, sizeof exp_path, "%s/%s.expect.safetensors", bs_fixtures_dir(), which);
    snprintf(tpath, sizeof tpath, "%s/target.expect.safetensors", bs_fixtures_dir());
    bs_err err = {0};
    bs_checkpoint *x, *tx;
    CHECK(bs_checkpoint_open(&x, exp_path, &err) == 0, "%s", err.msg);
    CHECK(bs_checkpoint_open(&tx, tpath, &err) == 0, "%s", err.msg);
    long P;
    const int32_t *prompt = fx_tensor(tx, "prompt_ids", "I32", -1, &P);
    CHECK(prompt);
    char ids[2048] = "";
    fx_join_ids(prompt, P, ids, sizeof ids);
    long G = 0;
    CHECK(fx_tensor(tx, "greedy_ids", "I32", -1, &G) && G > 0);
    snprintf(cmd, sizeof cmd, "%s dump -m %s/target -d %s/%s --prompt-ids %s -n %ld --out %s", bs_cli_path(), bs_fixtures_dir(), bs_fixtures_dir(), which, ids, G, out);
    char msg[4608];
    int n_checked = fx_dump_and_compare(cmd, out, x, TOL, msg, sizeof msg);
    bs_checkpoint_close(x); bs_checkpoint_close(tx);
    CHECK(n_checked >= 0, "%s", msg);
    CHECK(n_checked >= 6, "checked only %d tensors", n_checked);
}

TEST(drafter_dump_cli_dflash) { check_dump(failed_, "dflash"); }
TEST(drafter_dump_cli_dspark) { check_dump(failed_, "dspark"); }

// DSpark's sampled walk with its draws kept in backend memory (the default) drafts exactly what the
// step-by-step walk (a download per draw) drafts from the same seed, with the same q rows and confidences.
static void sampled_walk_paths(int *failed_, const char *dev) {
    char tdir[1024], ddir[1024];
    snprintf(tdir, sizeof tdir, "%s/target", bs_fixtures_dir());
    snprintf(ddir, sizeof ddir, "%s/dspark", bs_fixtures_dir());
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, tdir, dev, &err) == 0, "%s", err.msg);
    int V = e->cfg.vocab_size, P = 6;
    int32_t prompt[6] = { 5, 77, 190, 3, 250, 41 };
    bs_sampling smp[2] = { { 1.0f, 0, 1.0f, 0 }, { 0.7f, 20, 0.9f, 0 } };
    for (int c = 0; c < 2; c++) {
        int32_t tok[2][BS_MAX_DRAFT];
        float conf[2][BS_MAX_DRAFT], *q[2];
        int n = 0;
        for (int path = 0; path < 2; path++) {
            bs_tuning_edit()->drafter_step_walk = path;
            bs_drafter_ctx dc;
            bs_drafter *d = tu_drafter_with_context(e, ddir, NULL, &dc, prompt, P, &err);
            CHECK(d, "%s", err.msg);
            bs_rng rng; bs_rng_seed(&rng, 1234 + c);
            bs_draft dr;
            CHECK(d->propose(d, &dc, 9, BS_MAX_DRAFT, &smp[c], &rng, &dr, &err) == 0, "%s", err.msg);
            n = dr.n;
            memcpy(tok[path], dr.tokens, sizeof(int32_t) * n);
            memcpy(conf[path], dr.conf, sizeof(float) * n);
            q[path] = malloc(sizeof(float) * (size_t)n * V);
            e->be->download(e->be, q[path], dr.q, sizeof(float) * (size_t)n * V);
            tu_drafter_free(d, &dc);
        }
        bs_tuning_edit()->drafter_step_walk = 0;
        CHECK(n > 1, "%d drafts", n);
        CHECK(!memcmp(tok[0], tok[1], sizeof(int32_t) * n), "%s T=%.1f: the two walks drafted different tokens", dev, smp[c].temperature);
        CHECK(!memcmp(conf[0], conf[1], sizeof(float) * n), "%s: confidences differ", dev);
        CHECK(!memcmp(q[0], q[1], sizeof(float) * (size_t)n * V), "%s: q rows differ", dev);
        free(q[0]); free(q[1]);
    }
    bs_engine_close(e);
}
TEST(drafter_sampled_walk_paths) { sampled_walk_paths(failed_, "cpu"); }
TEST(drafter_sampled_walk_paths_cuda) { NEED_CUDA_DEVICE(); sampled_walk_paths(failed_, "cuda"); }
