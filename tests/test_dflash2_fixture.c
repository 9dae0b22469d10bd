// DFlash 2 against the reference vectors of tests/ref/dflash2 (made by tests/ref/make_dflash2_fixture.py, a
// standalone PyTorch reference of z-lab's MLX DFlash2DraftModel and vLLM's qwen3_dflash2; the script's header
// says where the two differ and what it follows): the target's taps, the block's hidden rows, the unary logits,
// the selector's candidates, z and scores, the greedy walk, and the walk at temperature 1 at given uniforms with
// its q; through the library and through `blockspec dump`. Two drafters: is_causal false (the official
// checkpoints) and is_causal absent (the MLX reference then attends causally in its sliding layer).
// 1e-3 absolute on values, ids exactly. SKIPPED while the folder has no vectors.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "harness.h"
#include "fixture_util.h"
#include "test_util_models.h"
#include "engine/engine.h"
#include "model/dflash.h"

#define REF "tests/ref/dflash2"
#define TOL 1e-3

static void check_d2_fixture(int *failed_, const char *dev, const char *name) {
    char tdir[512], ddir[512], file[512];
    snprintf(tdir, sizeof tdir, REF "/target");
    snprintf(ddir, sizeof ddir, REF "/%s", name);
    snprintf(file, sizeof file, REF "/%s.expect.safetensors", name);
    if (access(file, R_OK)) SKIP(REF " has no reference vectors (make them with tests/ref/make_dflash2_fixture.py " REF ")");
    bs_err err = {0};
    bs_engine *e; bs_checkpoint *x; bs_drafter *d;
    CHECK(bs_engine_open(&e, tdir, dev, &err) == 0, "%s", err.msg);
    CHECK(bs_checkpoint_open(&x, file, &err) == 0, "%s", err.msg);
    CHECK(bs_dflash_open(&d, ddir, &e->target, 64, &err) == 0, "%s", err.msg);
    const bs_drafter_config *c = bs_dflash_config(d);
    int V = e->cfg.vocab_size, H = e->cfg.hidden_size, B = c->block_size, n = d->max_drafts, K = c->sel_top_k, R = c->sel_rank, m = d->n_taps;
    long P;
    const int32_t *prompt = fx_tensor(x, "prompt_ids", "I32", -1, &P);
    const float *feat_x = fx_tensor(x, "context_features", "F32", P * m * H, NULL);
    const int32_t *blk_x = fx_tensor(x, "block_input_ids", "I32", B, NULL);
    const float *hid_x = fx_tensor(x, "block_hidden", "F32", (long)B * H, NULL), *un_x = fx_tensor(x, "unary_logits", "F32", (long)n * V, NULL);
    const float *z_x = fx_tensor(x, "selector_hidden", "F32", (long)n * R, NULL), *cu_x = fx_tensor(x, "candidate_unary", "F32", (long)n * K, NULL);
    const int32_t *ci_x = fx_tensor(x, "candidate_ids", "I32", (long)n * K, NULL), *tok_x = fx_tensor(x, "draft_tokens", "I32", n, NULL);
    const float *sc_x = fx_tensor(x, "walk_scores", "F32", (long)n * K, NULL), *u_x = fx_tensor(x, "walk_uniforms", "F32", n, NULL);
    const int32_t *st_x = fx_tensor(x, "sampled_tokens", "I32", n, NULL);
    const float *sq_x = fx_tensor(x, "sampled_q", "F32", (long)n * K, NULL);
    CHECK(prompt && feat_x && blk_x && hid_x && un_x && z_x && cu_x && ci_x && tok_x && sc_x && u_x && st_x && sq_x,
          "%s: reference tensors missing or misshaped", file);

    // The target's prefill taps, then the context in two pieces.
    bs_kv_cache kv;
    CHECK(bs_kv_init(&kv, e->kv_pool, 64, &err) == 0, "%s", err.msg);
    float *logits = e->be->alloc(e->be, sizeof(float) * P * V, &err), *feat = e->be->alloc(e->be, sizeof(float) * P * m * H, &err);
    bs_fwd_out fo = { .logits = logits, .taps = d->taps, .n_taps = m, .tap_out = feat };
    CHECK(bs_qwen3_forward(&e->target, &kv, prompt, (int)P, &fo, &err) == 0, "%s", err.msg);
    float *feat_h = malloc(sizeof(float) * P * m * H), *last = malloc(sizeof(float) * V);
    e->be->download(e->be, feat_h, feat, sizeof(float) * P * m * H);
    e->be->download(e->be, last, logits, sizeof(float) * V);
    CHECK(fx_max_abs_diff(feat_h, feat_x, P * m * H) < TOL, "context features differ by %g", fx_max_abs_diff(feat_h, feat_x, P * m * H));
    CHECK(bs_argmax(last, V) == blk_x[0], "anchor %d vs %d", bs_argmax(last, V), blk_x[0]);
    bs_drafter_ctx dc;
    CHECK(bs_drafter_ctx_init(d, &dc, 64, &err) == 0, "%s", err.msg);
    CHECK(d->add_context(d, &dc, feat, 5, &err) == 0 && d->add_context(d, &dc, feat + (size_t)5 * m * H, (int)P - 5, &err) == 0, "%s", err.msg);

    // The greedy pass, inspected.
    int32_t bids[BS_MAX_DRAFT + 1], *ci = malloc(sizeof(int32_t) * n * K);
    float *hid = malloc(sizeof(float) * B * H), *un = malloc(sizeof(float) * n * V), *z = malloc(sizeof(float) * n * R);
    float *cu = malloc(sizeof(float) * n * K), *sc = malloc(sizeof(float) * n * K), *q = malloc(sizeof(float) * n * K);
    bs_dflash_inspect ins = { .block_ids = bids, .block_hidden = hid, .logits = un, .cand_ids = ci, .cand_unary = cu, .sel_hidden = z,
                              .cand_scores = sc, .walk_q = q };
    bs_draft dr;
    CHECK(bs_dflash_forward_block(d, &dc, blk_x[0], n, NULL, NULL, &dr, &ins, &err) == 0 && dr.n == n, "%s", err.msg);
    CHECK(memcmp(bids, blk_x, sizeof(int32_t) * B) == 0, "block ids differ");
    CHECK(fx_max_abs_diff(hid, hid_x, (long)B * H) < TOL, "%s: block hidden differs by %g", name, fx_max_abs_diff(hid, hid_x, (long)B * H));
    CHECK(fx_max_abs_diff(un, un_x, (long)n * V) < TOL, "%s: unary logits differ by %g", name, fx_max_abs_diff(un, un_x, (long)n * V));
    CHECK(fx_max_abs_diff(z, z_x, (long)n * R) < TOL, "%s: selector hidden differs by %g", name, fx_max_abs_diff(z, z_x, (long)n * R));
    CHECK(memcmp(ci, ci_x, sizeof(int32_t) * n * K) == 0, "%s: candidate ids differ", name);
    CHECK(fx_max_abs_diff(cu, cu_x, (long)n * K) < TOL, "%s: candidate unary differs by %g", name, fx_max_abs_diff(cu, cu_x, (long)n * K));
    CHECK(fx_max_abs_diff(sc, sc_x, (long)n * K) < TOL, "%s: walk scores differ by %g", name, fx_max_abs_diff(sc, sc_x, (long)n * K));
    for (int p = 0; p < n; p++) CHECK(dr.tokens[p] == tok_x[p], "%s: greedy draft %d: %d vs %d", name, p, dr.tokens[p], tok_x[p]);
    printf("  %s on %s: max |diff| block hidden %.2g, unary logits %.2g, z %.2g, scores %.2g\n", name, dev, fx_max_abs_diff(hid, hid_x, (long)B * H),
           fx_max_abs_diff(un, un_x, (long)n * V), fx_max_abs_diff(z, z_x, (long)n * R), fx_max_abs_diff(sc, sc_x, (long)n * K));

    // The walk at temperature 1 at the reference's uniforms.
    double u[BS_MAX_DRAFT];
    for (int p = 0; p < n; p++) u[p] = u_x[p];
    bs_dflash_inspect si = { .walk_q = q, .uniforms = u };
    bs_sampling t1 = { .temperature = 1.0f, .top_k = 0, .top_p = 1.0f };
    bs_rng rng; bs_rng_seed(&rng, 1);
    CHECK(bs_dflash_forward_block(d, &dc, blk_x[0], n, &t1, &rng, &dr, &si, &err) == 0 && dr.n == n && dr.q, "%s", err.msg);
    for (int p = 0; p < n; p++) CHECK(dr.tokens[p] == st_x[p], "%s: sampled draft %d: %d vs %d", name, p, dr.tokens[p], st_x[p]);
    CHECK(fx_max_abs_diff(q, sq_x, (long)n * K) < TOL, "%s: q at temperature 1 differs by %g", name, fx_max_abs_diff(q, sq_x, (long)n * K));

    // `blockspec dump -d` writes the same names (every reference tensor compared).
    if (!strcmp(dev, "cpu")) {
        char ids[256], cmd[2048], outf[600], msg[512];
        const char *tmp = bs_test_tmpdir("d2dump");
        CHECK(tmp);
        fx_join_ids(prompt, P, ids, sizeof ids);
        snprintf(outf, sizeof outf, "%s/dump.safetensors", tmp);
        snprintf(cmd, sizeof cmd, "%s dump -m %s -d %s --prompt-ids %s --out %s", bs_cli_path(), tdir, ddir, ids, outf);
        int got = fx_dump_and_compare(cmd, outf, x, TOL, msg, sizeof msg);
        CHECK(got == 14, "%s: dump: %s (%d tensors compared)", name, got < 0 ? msg : "", got);
    }
    free(feat_h); free(last); free(ci); free(hid); free(un); free(z); free(cu); free(sc); free(q);
    e->be->free(e->be, logits); e->be->free(e->be, feat);
    bs_kv_free(&kv);
    tu_drafter_free(d, &dc);
    bs_checkpoint_close(x);
    bs_engine_close(e);
}

TEST(dflash2_fixture) { check_d2_fixture(failed_, "cpu", "dflash2"); }
TEST(dflash2_fixture_causal) { check_d2_fixture(failed_, "cpu", "dflash2_causal"); }
TEST(dflash2_fixture_reference_cpu) { check_d2_fixture(failed_, "cpu-ref", "dflash2"); }
TEST(dflash2_fixture_cuda) {
    NEED_CUDA_DEVICE();
    check_d2_fixture(failed_, "cuda", "dflash2");
    if (*failed_) return;
    check_d2_fixture(failed_, "cuda", "dflash2_causal");
}

// A recorded DFlash 2 block pass (CUDA graphs: the convolutions, the per-row windowed attention, the top-K and z
// in the recording) replayed at later context lengths gives the plain pass's block rows, unary logits,
// candidates, scores and drafts bit for bit (the window moves past context rows as the context grows).
static void check_d2_graphs(int *failed_, const char *dev, const char *name) {
    char ddir[512];
    snprintf(ddir, sizeof ddir, REF "/%s", name);
    if (access(REF "/dflash2.expect.safetensors", R_OK)) SKIP(REF " has no reference vectors");
    bs_err err = {0};
    bs_engine *e; bs_drafter *d;
    CHECK(bs_engine_open(&e, REF "/target", dev, &err) == 0, "%s", err.msg);
    CHECK(bs_dflash_open(&d, ddir, &e->target, 64, &err) == 0, "%s", err.msg);
    bs_drafter_ctx dc;
    CHECK(bs_drafter_ctx_init(d, &dc, 64, &err) == 0, "%s", err.msg);
    const bs_drafter_config *c = bs_dflash_config(d);
    int V = e->cfg.vocab_size, H = e->cfg.hidden_size, B = c->block_size, m = d->n_taps, P = 30, n = d->max_drafts, K = c->sel_top_k;
    int32_t prompt[30];
    for (int i = 0; i < P; i++) prompt[i] = (i * 37 + 11) % V;
    bs_kv_cache kv;
    CHECK(bs_kv_init(&kv, e->kv_pool, 64, &err) == 0, "%s", err.msg);
    float *logits = e->be->alloc(e->be, sizeof(float) * P * V, &err), *feat = e->be->alloc(e->be, sizeof(float) * P * m * H, &err);
    bs_fwd_out fo = { .logits = logits, .taps = d->taps, .n_taps = m, .tap_out = feat };
    CHECK(bs_qwen3_forward(&e->target, &kv, prompt, P, &fo, &err) == 0, "%s", err.msg);
    CHECK(d->add_context(d, &dc, feat, 4, &err) == 0, "%s", err.msg);
    size_t nf = (size_t)B * H + (size_t)n * V + 2 * (size_t)n * K;
    float *ref = malloc(sizeof(float) * nf), *got = malloc(sizeof(float) * nf);
    int32_t ci[2][BS_MAX_DRAFT * 64];
    int saved = e->target.use_graphs;
    double u[BS_MAX_DRAFT];
    for (int p = 0; p < n; p++) u[p] = (p + 0.3) / n;
    bs_sampling t1 = { .temperature = 1.0f, .top_k = 0, .top_p = 1.0f };
    for (int step = 0; step < 12 && !*failed_; step++) {
        int32_t anchor = prompt[4 + step];
        bs_draft r0, r1;
        for (int sampled = 0; sampled < 2; sampled++)
            for (int run = 0; run < 4 && !*failed_; run++) {   // plain, then 3 with graphs: plain, record + replay, replay
                float *o = run ? got : ref;
                bs_dflash_inspect ins = { .block_hidden = o, .logits = o + (size_t)B * H, .cand_ids = ci[run > 0],
                                          .cand_scores = o + (size_t)B * H + (size_t)n * V, .walk_q = o + (size_t)B * H + (size_t)n * V + (size_t)n * K,
                                          .uniforms = u };
                memset(o, 0, sizeof(float) * nf);
                e->target.use_graphs = run > 0;
                bs_rng rng; bs_rng_seed(&rng, 1);
                CHECK(bs_dflash_forward_block(d, &dc, anchor, BS_MAX_DRAFT, sampled ? &t1 : NULL, &rng, run ? &r1 : &r0, &ins, &err) == 0, "%s", err.msg);
                if (run == 0) continue;
                CHECK(r1.n == r0.n && memcmp(r1.tokens, r0.tokens, sizeof(int32_t) * r0.n) == 0, "%s step %d run %d: drafts differ", name, step, run);
                CHECK(memcmp(ci[0], ci[1], sizeof(int32_t) * n * K) == 0, "%s step %d run %d: candidates differ", name, step, run);
                CHECK(memcmp(ref, got, sizeof(float) * nf) == 0, "%s step %d run %d: a recorded pass differs from the plain one", name, step, run);
            }
        CHECK(d->add_context(d, &dc, feat + (size_t)(4 + step) * m * H, 1, &err) == 0, "%s", err.msg);
    }
    e->target.use_graphs = saved;
    free(ref); free(got);
    e->be->free(e->be, logits); e->be->free(e->be, feat);
    bs_kv_free(&kv);
    tu_drafter_free(d, &dc);
    bs_engine_close(e);
}
TEST(dflash2_graphs_cuda) {
    NEED_CUDA_DEVICE();
    check_d2_graphs(failed_, "cuda", "dflash2");
    if (*failed_) return;
    check_d2_graphs(failed_, "cuda", "dflash2_causal");
}
// (On the CPU, which records nothing, every run is a plain pass: the passes are deterministic.)
TEST(dflash2_repeat_passes_cpu) { check_d2_graphs(failed_, "cpu", "dflash2"); }
