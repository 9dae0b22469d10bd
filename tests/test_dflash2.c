// DFlash 2 drafters (docs/dflash2.md) written by `blockspec make-random`: rounds through the library (greedy drafts
// are the selector's walk over the top-K of the unary logits, recomputed here from the checkpoint's codebooks;
// sampled q is the walk's softmax over the candidates and zero elsewhere), greedy speculative == plain on the
// CPU and CUDA, the sampling chi-square with the candidate-restricted q (passes) and with a wrong q (fails), a
// fresh DFlash 2 (identity convolutions, zero selector) drafting exactly what its DFlash drafts, and bad input.
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "tests/wrong_q.h"
#include "harness.h"
#include "fixture_util.h"
#include "test_util_models.h"
#include "backend/affine.h"
#include "engine/engine.h"
#include "io/file.h"
#include "io/json.h"
#include "model/dflash.h"
#include "model/selector.h"
#include "spec/spec_loop.h"

// A DFlash 2 config for a target of this shape: 2 layers (the first sliding with window `window`, 0: both
// full), block B, K candidates, rank R. extra: more JSON members at the top level ("" none), e.g. to break it.
static int write_d2_config(const char *path, int V, int H, int heads, int kv, int hd, int inter, int Lt, int B, int K, int R, int window,
                           const char *extra) {
    char cfg[4096];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\":[\"DFlash2DraftModel\"],\"model_type\":\"qwen3\",\"hidden_size\":%d,\"num_attention_heads\":%d,"
             "\"num_key_value_heads\":%d,\"head_dim\":%d,\"intermediate_size\":%d,\"num_hidden_layers\":2,\"vocab_size\":%d,"
             "\"rms_norm_eps\":1e-6,\"rope_parameters\":{\"rope_theta\":10000,\"rope_type\":\"default\"},\"max_position_embeddings\":4096,"
             "\"num_target_layers\":%d,\"is_causal\":false,\"layer_types\":[\"%s\",\"full_attention\"],%s"
             "\"dflash_config\":{\"block_size\":%d,\"mask_token_id\":%d,\"target_layer_ids\":[0,%d],\"conv_kernel_size\":2,"
             "\"conv_group_size\":4,\"selector_rank\":%d,\"selector_top_k\":%d}%s%s}",
             H, heads, kv, hd, inter, V, Lt, window ? "sliding_attention" : "full_attention", window ? "" : "", B, V - 1, Lt - 1, R, K,
             *extra ? "," : "", extra);
    if (window) {   // the window: one more top-level member
        char *p = strstr(cfg, "\"layer_types\"");
        char tail[4096];
        snprintf(tail, sizeof tail, "%s", p);
        snprintf(p, sizeof cfg - (p - cfg), "\"sliding_window\":%d,%s", window, tail);
    }
    return tu_write_text(path, cfg);
}

static int make_random_at(const char *cfg, const char *out, int seed) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s make-random -c %s --out %s --seed %d > /dev/null", bs_cli_path(), cfg, out, seed);
    return system(cmd) == 0 ? 0 : -1;
}

// A random target (2 query heads, 1 KV head) and a DFlash 2 drafter of the same widths in target/d2.
static int make_pair(int V, int H, int Lt, int hd, int inter, int B, int K, int R, int window, char target[256], char d2[300]) {
    const char *t = tu_make_target(V, H, Lt, 2, 1, hd, inter, 0, 1, 21);
    if (!t) return -1;
    snprintf(target, 256, "%s", t);
    snprintf(d2, 300, "%s/d2", target);
    char cfg[400];
    snprintf(cfg, sizeof cfg, "%s/d2.json", target);
    return write_d2_config(cfg, V, H, 2, 1, hd, inter, Lt, B, K, R, window, "") || make_random_at(cfg, d2, 5) ? -1 : 0;
}

// Greedy drafts are the walk over the top-K of the unary logits: the candidates, scores and picks recomputed
// here from the inspected logits and z and the checkpoint's own codebooks (read with bs_checkpoint_open);
// sampled q rows are the walk's q at the candidates and zero elsewhere.
static void check_rounds(int *failed_, const char *dev, const char *target, const char *d2dir) {
    bs_err err = {0};
    bs_engine *e;
    CHECK(bs_engine_open(&e, target, dev, &err) == 0, "%s", err.msg);
    int32_t prompt[20];
    int V = e->cfg.vocab_size;
    for (int i = 0; i < 20; i++) prompt[i] = (i * 37 + 5) % V;
    bs_drafter_ctx dc;
    bs_drafter *d = tu_drafter_with_context(e, d2dir, NULL, &dc, prompt, 16, &err);
    CHECK(d, "%s", err.msg);
    const bs_drafter_config *c = bs_dflash_config(d);
    int n = d->max_drafts, K = c->sel_top_k, R = c->sel_rank;
    CHECK(c->dflash2 && n == c->block_size - 1 && !strcmp(d->name, "dflash2"));
    float *lg = malloc(sizeof(float) * n * V), *cu = malloc(sizeof(float) * n * K), *z = malloc(sizeof(float) * n * R);
    float *sc = malloc(sizeof(float) * n * K), *wq = malloc(sizeof(float) * n * K), *qh = malloc(sizeof(float) * n * V);
    int32_t *ci = malloc(sizeof(int32_t) * n * K);
    bs_dflash_inspect ins = { .logits = lg, .cand_ids = ci, .cand_unary = cu, .sel_hidden = z, .cand_scores = sc, .walk_q = wq };
    bs_draft g;
    CHECK(bs_dflash_forward_block(d, &dc, prompt[16], n, NULL, NULL, &g, &ins, &err) == 0, "%s", err.msg);
    CHECK(g.n == n && g.q == NULL);
    bs_checkpoint *ck;
    CHECK(bs_checkpoint_open(&ck, d2dir, &err) == 0, "%s", err.msg);
    bs_mat A, Bm;
    CHECK(bs_checkpoint_mat(ck, "candidate_selector.predecessor_codebook", V, R, &A, &err) == 0, "%s", err.msg);
    CHECK(bs_checkpoint_mat(ck, "candidate_selector.successor_codebook", V, R, &Bm, &err) == 0, "%s", err.msg);
    int32_t prev = prompt[16];
    for (int p = 0; p < n; p++) {
        // the candidates: the K best unary logits of the row (ties to the smaller id)
        const float *row = lg + (size_t)p * V;
        for (int k = 0; k < K; k++) {
            int32_t id = ci[p * K + k];
            CHECK(id >= 0 && id < V && row[id] == cu[p * K + k], "slot %d candidate %d", p, k);
            int better = 0;
            for (int v = 0; v < V; v++) better += row[v] > row[id] || (row[v] == row[id] && v < id);
            CHECK(better == k, "slot %d: candidate %d (id %d) has %d better entries", p, k, id, better);
        }
        int best = 0;
        for (int k = 0; k < K; k++) {
            double edge = 0;
            for (int r = 0; r < R; r++) edge += (double)bs_mat_elem(&A, prev, r) * z[p * R + r] * bs_mat_elem(&Bm, ci[p * K + k], r);
            CHECK_NEAR(sc[p * K + k], cu[p * K + k] + edge, 1e-4, "slot %d score %d", p, k);
            if (sc[p * K + k] > sc[p * K + best]) best = k;
        }
        CHECK(g.tokens[p] == ci[p * K + best], "slot %d: draft %d, walk %d", p, g.tokens[p], ci[p * K + best]);
        prev = g.tokens[p];
    }
    bs_checkpoint_close(ck);
    // propose (no inspection) drafts the same; a shorter proposal is a prefix.
    bs_draft g2;
    CHECK(d->propose(d, &dc, prompt[16], n, NULL, NULL, &g2, &err) == 0 && g2.n == n, "%s", err.msg);
    CHECK(memcmp(g2.tokens, g.tokens, sizeof(int32_t) * n) == 0, "propose differs from the inspected pass");
    CHECK(d->propose(d, &dc, prompt[16], 2, NULL, NULL, &g2, &err) == 0 && g2.n == 2 && memcmp(g2.tokens, g.tokens, 8) == 0, "short proposal");
    // Sampled: q row p is the walk's q over slot p's candidates, zero elsewhere; the draft is a candidate.
    bs_sampling sm = { .temperature = 0.9f, .top_k = 3, .top_p = 0.5f };   // (top-k/top-p are the target's: q ignores them)
    bs_rng rng; bs_rng_seed(&rng, 4);
    bs_draft sd;
    CHECK(bs_dflash_forward_block(d, &dc, prompt[16], n, &sm, &rng, &sd, &ins, &err) == 0 && sd.n == n && sd.q, "%s", err.msg);
    e->be->download(e->be, qh, sd.q, sizeof(float) * n * V);
    for (int p = 0; p < n; p++) {
        double sum = 0, mx = -INFINITY, zsum = 0;
        int drawn_is_cand = 0;
        for (int k = 0; k < K; k++) if (sc[p * K + k] > mx) mx = sc[p * K + k];
        for (int k = 0; k < K; k++) zsum += exp((sc[p * K + k] - mx) / 0.9);
        for (int v = 0; v < V; v++) sum += qh[(size_t)p * V + v];
        for (int k = 0; k < K; k++) {
            int32_t id = ci[p * K + k];
            CHECK(qh[(size_t)p * V + id] == wq[p * K + k], "slot %d: dense q differs from the walk's", p);
            CHECK_NEAR(wq[p * K + k], exp((sc[p * K + k] - mx) / 0.9) / zsum, 1e-6, "slot %d q %d", p, k);
            drawn_is_cand |= id == sd.tokens[p];
        }
        CHECK_NEAR(sum, 1.0, 1e-5, "q row %d does not sum to 1: mass outside the candidates?", p);
        CHECK(drawn_is_cand, "slot %d: drawn token %d is not a candidate", p, sd.tokens[p]);
    }
    bs_rng_seed(&rng, 4);
    bs_draft sd2;
    CHECK(d->propose(d, &dc, prompt[16], n, &sm, &rng, &sd2, &err) == 0 && memcmp(sd2.tokens, sd.tokens, sizeof(int32_t) * n) == 0,
          "the same seed drafted differently");
    free(lg); free(cu); free(z); free(sc); free(wq); free(qh); free(ci);
    tu_drafter_free(d, &dc);
    bs_engine_close(e);
}

TEST(dflash2_random_rounds) {
    char target[256], d2[300];
    CHECK(make_pair(96, 32, 3, 16, 64, 6, 5, 8, 0, target, d2) == 0, "make-random failed");
    check_rounds(failed_, "cpu", target, d2);
    if (*failed_) return;
    check_rounds(failed_, "cpu-ref", target, d2);
}

// Greedy speculative decoding with a random DFlash 2 drafter == plain greedy decoding; the first layer slides
// with a window shorter than the prompts (the per-row window is in use), blocks of 5 and of 8.
static void greedy_lossless(int *failed_, const char *dev) {
    char target[256], d2[300];
    CHECK(make_pair(64, 32, 3, 16, 64, 5, 4, 8, 6, target, d2) == 0, "make-random failed");
    tu_greedy_spec_equals_plain(failed_, dev, target, d2, NULL, 10, 31);
    if (*failed_) return;
    CHECK(make_pair(64, 32, 3, 16, 64, 8, 16, 8, 0, target, d2) == 0, "make-random failed");
    tu_greedy_spec_equals_plain(failed_, dev, target, d2, NULL, 10, 32);
}
TEST(dflash2_greedy_spec_equals_plain) { greedy_lossless(failed_, "cpu"); }
TEST(dflash2_greedy_spec_equals_plain_cuda) {
    NEED_CUDA_DEVICE();
    greedy_lossless(failed_, "cuda");
}

// ---- sampling: the candidate-restricted q keeps the target's distribution; a wrong q does not ----

// The wrong q of the control (tests/wrong_q.h): the full softmax of the unary logits at the sampling
// temperature (what a DFlash drafter reports for its rows), not the walk's distribution over the candidates
// that the drafts were really drawn from.
static int dflash2_unary(bs_drafter *inner, bs_drafter_ctx *c, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng, bs_draft *out,
                         float *logits, bs_err *err) {
    bs_dflash_inspect ins = { .logits = logits };
    return bs_dflash_forward_block(inner, c, anchor, max_n, s, rng, out, &ins, err);
}

// The first three sampled tokens against the target's exact joint (a 12-token vocabulary, 8 candidates per
// slot): with the drafter's own q the chi-square passes; with the wrong q above, the same drafts are accepted
// at the wrong rate and the test must fail (p < 1e-6): the check has the power to see a q that is not
// restricted to the candidates.
static void sampling_pvalues(int *failed_, const char *dev, long runs) {
    char target[256], d2[300];
    CHECK(make_pair(12, 16, 2, 8, 32, 4, 8, 6, 0, target, d2) == 0, "make-random failed");
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, target, dev, &err) == 0, "%s", err.msg);
    bs_sampling cfgs[] = { { 1.0f, 0, 1.0f, 0 }, { 0.8f, 6, 0.9f, 0 } };
    for (int c = 0; c < 2; c++)
        for (int wrong = 0; wrong < 2; wrong++) {
            bs_drafter *d;
            CHECK(bs_drafter_open(&d, d2, e, 64, &err) == 0, "%s", err.msg);
            if (wrong) d = tu_wrong_q_wrap(e, d, "dflash2-wrong-q", dflash2_unary);
            double ar = 0; long imp = 0;
            double pv = tu_spec_sampling_pvalue(e, d, &cfgs[c], runs, &ar, &imp);
            d->free(d);
            printf("  %s dflash2 %s q, T=%.1f top_k=%d top_p=%.1f: p-value %.3g, draft acceptance %.2f\n", dev,
                   wrong ? "WRONG (full softmax)" : "candidate-restricted", cfgs[c].temperature, cfgs[c].top_k, cfgs[c].top_p, pv, ar);
            CHECK(pv >= 0, "a run failed");
            CHECK(ar > 0.05 && ar < 0.95, "acceptance %.2f gives the test little power", ar);
            if (!wrong) {
                CHECK(imp == 0, "%ld draws of impossible outcomes", imp);
                CHECK(pv > 1e-4, "sampling with DFlash 2's q is not distributed as the target (p = %g)", pv);
            } else CHECK(pv < 1e-6, "a wrong q went unnoticed (p = %g): the test has no power", pv);
        }
    bs_engine_close(e);
}
TEST(dflash2_sampling_lossless) { sampling_pvalues(failed_, "cpu-ref", 20000); }
TEST(dflash2_sampling_lossless_cuda) {
    NEED_CUDA_DEVICE();
    sampling_pvalues(failed_, "cuda", 6000);
}

// ---- a fresh DFlash 2 is its DFlash ----

// Writes into out/ the DFlash 2 that training starts from on top of the DFlash drafter in dflash_dir: the same
// backbone tensors, convolutions at the identity (base kernel tap 0 = 1, the other taps and the kernel
// projections 0) and a selector whose hidden projection is 0 (every edge 0; the codebooks random all the same).
static int write_fresh_dflash2(const char *dflash_dir, const char *out, int V, int H, int L, int taps, int group, int R, int K,
                               const char *config_json) {
    bs_err err;
    bs_checkpoint *ck;
    if (bs_checkpoint_open(&ck, dflash_dir, &err)) { fprintf(stderr, "  %s\n", err.msg); return -1; }
    bs_st_writer *w = bs_st_writer_new();
    for (int i = 0; i < ck->n_tensors; i++) {
        const bs_tensor_info *t = &ck->tensors[i];
        bs_st_writer_add(w, t->name, t->dtype_name, t->n_dims, t->shape, t->data, &err);
    }
    int G = H / group;
    uint16_t *base = calloc((size_t)2 * taps * H, 2), *proj = calloc((size_t)2 * taps * G * H, 2), *hp = calloc((size_t)R * H, 2);
    uint16_t *cb = malloc((size_t)V * R * 2);
    bs_rng r; bs_rng_seed(&r, 9);
    for (int s = 0; s < 2; s++) for (int c = 0; c < H; c++) base[(size_t)s * taps * H + c] = bs_f32_to_bf16(1.0f);   // tap 0 of each stage
    for (size_t i = 0; i < (size_t)V * R; i++) cb[i] = bs_f32_to_bf16((float)bs_rng_uniform(&r) * 2 - 1);
    int64_t sb[3] = { 2, taps, H }, sp[2] = { 2 * taps * G, H }, sh[2] = { R, H }, sc[2] = { V, R };
    char names[8][128];
    for (int l = 0; l < L; l++) {
        snprintf(names[0], 128, "layers.%d.attention_conv.base_kernel", l);
        snprintf(names[1], 128, "layers.%d.attention_conv.kernel_projection.weight", l);
        snprintf(names[2], 128, "layers.%d.mlp_conv.base_kernel", l);
        snprintf(names[3], 128, "layers.%d.mlp_conv.kernel_projection.weight", l);
        bs_st_writer_add(w, names[0], "BF16", 3, sb, base, &err); bs_st_writer_add(w, names[1], "BF16", 2, sp, proj, &err);
        bs_st_writer_add(w, names[2], "BF16", 3, sb, base, &err); bs_st_writer_add(w, names[3], "BF16", 2, sp, proj, &err);
    }
    bs_st_writer_add(w, "candidate_selector.hidden_projection.weight", "BF16", 2, sh, hp, &err);
    bs_st_writer_add(w, "candidate_selector.predecessor_codebook", "BF16", 2, sc, cb, &err);
    bs_st_writer_add(w, "candidate_selector.successor_codebook", "BF16", 2, sc, cb, &err);
    char path[600];
    mkdir(out, 0755);
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    int rc = bs_st_writer_write(w, path, &err);
    if (rc) fprintf(stderr, "  %s\n", err.msg);
    snprintf(path, sizeof path, "%s/config.json", out);
    if (!rc) rc = tu_write_text(path, config_json);
    bs_st_writer_free(w);
    bs_checkpoint_close(ck);
    free(base); free(proj); free(hp); free(cb);
    return rc;
}

// Block hidden rows, logits and greedy drafts of the two, bit for bit, over several contexts; the full
// speculative run drafts and accepts the same.
TEST(dflash2_fresh_equals_dflash) {
    int V = 96, H = 32, Lt = 3, hd = 16, inter = 64, B = 6;
    const char *t = tu_make_target(V, H, Lt, 2, 1, hd, inter, 0, 1, 21);
    CHECK(t);
    char target[256], d1[300], d2[300], cfg1[300], json[4096];
    snprintf(target, sizeof target, "%s", t);
    snprintf(d1, sizeof d1, "%s/d1", target); snprintf(d2, sizeof d2, "%s/d2", target); snprintf(cfg1, sizeof cfg1, "%s/d1.json", target);
    const char *common = "\"model_type\":\"qwen3\",\"hidden_size\":32,\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":16,"
                         "\"intermediate_size\":64,\"num_hidden_layers\":2,\"vocab_size\":96,\"rms_norm_eps\":1e-6,\"rope_theta\":10000,"
                         "\"num_target_layers\":3,\"max_position_embeddings\":4096";
    snprintf(json, sizeof json, "{\"architectures\":[\"DFlashDraftModel\"],%s,\"block_size\":%d,\"dflash_config\":{\"mask_token_id\":95,"
             "\"target_layer_ids\":[0,2]}}", common, B);
    CHECK(tu_write_text(cfg1, json) == 0 && make_random_at(cfg1, d1, 17) == 0, "make-random DFlash failed");
    snprintf(json, sizeof json, "{\"architectures\":[\"DFlash2DraftModel\"],%s,\"is_causal\":false,\"dflash_config\":{\"block_size\":%d,"
             "\"mask_token_id\":95,\"target_layer_ids\":[0,2],\"conv_kernel_size\":2,\"conv_group_size\":8,\"selector_rank\":4,"
             "\"selector_top_k\":6}}", common, B);
    CHECK(write_fresh_dflash2(d1, d2, V, H, 2, 2, 8, 4, 6, json) == 0);
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, target, "cpu", &err) == 0, "%s", err.msg);
    int32_t prompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = (i * 29 + 3) % V;
    float *h1 = malloc(sizeof(float) * B * H), *h2 = malloc(sizeof(float) * B * H), *l1 = malloc(sizeof(float) * B * V), *l2 = malloc(sizeof(float) * B * V);
    for (int P = 1; P <= 33; P += 8) {
        bs_drafter_ctx c1, c2;
        bs_drafter *a = tu_drafter_with_context(e, d1, NULL, &c1, prompt, P, &err);
        CHECK(a, "%s", err.msg);
        bs_drafter *b = tu_drafter_with_context(e, d2, NULL, &c2, prompt, P, &err);
        CHECK(b, "%s", err.msg);
        bs_dflash_inspect i1 = { .block_hidden = h1, .logits = l1 }, i2 = { .block_hidden = h2, .logits = l2 };
        bs_draft r1, r2;
        CHECK(bs_dflash_forward_block(a, &c1, prompt[P], B, NULL, NULL, &r1, &i1, &err) == 0, "%s", err.msg);
        CHECK(bs_dflash_forward_block(b, &c2, prompt[P], B, NULL, NULL, &r2, &i2, &err) == 0, "%s", err.msg);
        CHECK(memcmp(h1, h2, sizeof(float) * B * H) == 0, "context %d: block hidden rows differ by %g", P, fx_max_abs_diff(h1, h2, (long)B * H));
        CHECK(memcmp(l1, l2, sizeof(float) * (B - 1) * V) == 0, "context %d: logits differ", P);
        CHECK(r1.n == r2.n && memcmp(r1.tokens, r2.tokens, sizeof(int32_t) * r1.n) == 0, "context %d: greedy drafts differ", P);
        tu_drafter_free(a, &c1);
        tu_drafter_free(b, &c2);
    }
    // The speculative runs accept the same drafts.
    bs_session s;
    CHECK(bs_session_init(&s, e, 256, NULL, &err) == 0, "%s", err.msg);
    int32_t o1[40], o2[40];
    int n1, n2;
    bs_spec_stats st1, st2;
    bs_spec_opts so = { 0 };
    bs_drafter *a, *b;
    CHECK(bs_drafter_open(&a, d1, e, s.kv.max_ctx, &err) == 0 && bs_drafter_open(&b, d2, e, s.kv.max_ctx, &err) == 0, "%s", err.msg);
    CHECK(bs_generate_spec(&s, a, prompt, 20, 40, &so, o1, &n1, NULL, NULL, &st1, &err) == 0, "%s", err.msg);
    bs_kv_rollback(&s.kv, 0, &err);
    CHECK(bs_generate_spec(&s, b, prompt, 20, 40, &so, o2, &n2, NULL, NULL, &st2, &err) == 0, "%s", err.msg);
    CHECK(n1 == n2 && memcmp(o1, o2, sizeof(int32_t) * n1) == 0 && st1.accepted == st2.accepted && st1.drafted == st2.drafted,
          "speculative runs differ: accepted %ld/%ld vs %ld/%ld", (long)st1.accepted, (long)st1.drafted, (long)st2.accepted, (long)st2.drafted);
    bs_spec_stats_free(&st1); bs_spec_stats_free(&st2);
    a->free(a); b->free(b);
    bs_session_free(&s);
    free(h1); free(h2); free(l1); free(l2);
    bs_engine_close(e);
}

// ---- bad input: clear errors naming the file, field or tensor ----

// Config values: each broken config is refused with a message naming the field.
TEST(dflash2_bad_config) {
    const char *dir = bs_test_tmpdir("d2cfg");
    CHECK(dir);
    char path[400];
    snprintf(path, sizeof path, "%s/config.json", dir);
    static const struct { const char *extra_or_edit, *want; int window; } cases[] = {
        { "\"final_logit_softcapping\":-1", "final_logit_softcapping", 0 },
        { "\"output_multiplier\":0", "output_multiplier", 0 },
        { "\"is_causal\":\"no\"", "is_causal", 0 },
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        CHECK(write_d2_config(path, 96, 32, 2, 1, 16, 64, 3, 6, 5, 8, cases[k].window, cases[k].extra_or_edit) == 0);
        bs_drafter_config c; bs_err err = {0};
        CHECK(bs_drafter_config_load(&c, dir, &err) != 0, "case %zu accepted", k);
        CHECK(strstr(err.msg, cases[k].want) && strstr(err.msg, "config.json"), "case %zu: '%s' does not name %s", k, err.msg, cases[k].want);
    }
    // dflash_config fields: replace one value inside the nested object.
    static const struct { const char *from, *to, *want; } nested[] = {
        { "\"conv_group_size\":4", "\"conv_group_size\":5", "does not divide hidden_size" },
        { "\"conv_kernel_size\":2", "\"conv_kernel_size\":0", "dflash_config.conv_kernel_size" },
        { "\"conv_kernel_size\":2", "\"conv_kernel_size\":7", "exceeds the block" },
        { "\"selector_rank\":8,\"selector_top_k\":5", "\"selector_rank\":8", "dflash_config.selector_top_k" },
        { "\"selector_top_k\":5", "\"selector_top_k\":97", "exceeds the vocabulary" },
        { "\"selector_rank\":8", "\"selector_rank\":2.5", "dflash_config.selector_rank" },
        { "\"sliding_window\":4,", "", "sliding_window" },
    };
    for (size_t k = 0; k < sizeof nested / sizeof *nested; k++) {
        CHECK(write_d2_config(path, 96, 32, 2, 1, 16, 64, 3, 6, 5, 8, 4, "") == 0);
        size_t len;
        bs_err err = {0};
        char *txt = bs_read_file(path, &len, &err), *at = txt ? strstr(txt, nested[k].from) : NULL;
        CHECK(at, "case %zu: '%s' not in the config", k, nested[k].from);
        char edited[4096];
        snprintf(edited, sizeof edited, "%.*s%s%s", (int)(at - txt), txt, nested[k].to, at + strlen(nested[k].from));
        free(txt);
        CHECK(tu_write_text(path, edited) == 0);
        bs_drafter_config c;
        int rc = bs_drafter_config_load(&c, dir, &err);
        CHECK(rc != 0, "case %zu (%s) accepted", k, nested[k].to);
        CHECK(strstr(err.msg, nested[k].want), "case %zu: '%s' does not say '%s'", k, err.msg, nested[k].want);
    }
}

// Tensors: a missing one, a base kernel of the wrong shape, codebooks of another rank: refused at open with
// the file and tensor named.
TEST(dflash2_bad_tensors) {
    char target[256], d2[300], cfg[400];
    CHECK(make_pair(96, 32, 3, 16, 64, 6, 5, 8, 0, target, d2) == 0, "make-random failed");
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, target, "cpu", &err) == 0, "%s", err.msg);
    bs_drafter *d = NULL;
    // conv_kernel_size 3 on a checkpoint made for 2 taps: kernel projection [12, 32] stored as [16, 32]... any
    // shape error names the tensor.
    snprintf(cfg, sizeof cfg, "%s/config.json", d2);
    CHECK(write_d2_config(cfg, 96, 32, 2, 1, 16, 64, 3, 6, 5, 8, 0, "") == 0);
    char *txt; size_t len;
    CHECK((txt = bs_read_file(cfg, &len, &err)) != NULL);
    static const struct { const char *from, *to, *want; } cases[] = {
        { "\"conv_kernel_size\":2", "\"conv_kernel_size\":3", "layers.0.attention_conv.kernel_projection.weight" },
        { "\"conv_group_size\":4", "\"conv_group_size\":8", "layers.0.attention_conv.kernel_projection.weight" },
        { "\"selector_rank\":8", "\"selector_rank\":4", "candidate_selector.hidden_projection.weight" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char edited[4096], *at = strstr(txt, cases[k].from);
        CHECK(at);
        snprintf(edited, sizeof edited, "%.*s%s%s", (int)(at - txt), txt, cases[k].to, at + strlen(cases[k].from));
        CHECK(tu_write_text(cfg, edited) == 0);
        CHECK(bs_drafter_open(&d, d2, e, 64, &err) != 0, "case %zu accepted", k);
        CHECK(strstr(err.msg, cases[k].want) && strstr(err.msg, "shape"), "case %zu: '%s'", k, err.msg);
    }
    CHECK(tu_write_text(cfg, txt) == 0);
    free(txt);
    CHECK(bs_drafter_open(&d, d2, e, 64, &err) == 0, "the restored config: %s", err.msg);
    d->free(d);
    // A base kernel missing, one of the wrong shape, a codebook missing: the checkpoint rewritten from a kept copy.
    char st[400], good[420];
    snprintf(st, sizeof st, "%s/model.safetensors", d2);
    snprintf(good, sizeof good, "%s/good.safetensors", target);
    CHECK(rename(st, good) == 0);
    for (int variant = 0; variant < 3; variant++) {
        bs_checkpoint *ck;
        CHECK(bs_checkpoint_open(&ck, good, &err) == 0, "%s", err.msg);
        bs_st_writer *w = bs_st_writer_new();
        uint16_t bad[3 * 2 * 32] = { 0 };
        int64_t shp[3] = { 3, 2, 32 };
        const char *victim = variant == 2 ? "candidate_selector.successor_codebook" : "layers.1.mlp_conv.base_kernel";
        for (int i = 0; i < ck->n_tensors; i++) {
            const bs_tensor_info *t = &ck->tensors[i];
            if (strcmp(t->name, victim)) bs_st_writer_add(w, t->name, t->dtype_name, t->n_dims, t->shape, t->data, &err);
            else if (variant == 1) bs_st_writer_add(w, t->name, "BF16", 3, shp, bad, &err);   // [3, 2, 32]: three stages
        }
        CHECK(bs_st_writer_write(w, st, &err) == 0, "%s", err.msg);
        bs_st_writer_free(w);
        bs_checkpoint_close(ck);
        CHECK(bs_drafter_open(&d, d2, e, 64, &err) != 0, "variant %d accepted", variant);
        CHECK(strstr(err.msg, victim), "variant %d: '%s' does not name %s", variant, err.msg, victim);
        CHECK(strstr(err.msg, variant == 1 ? "shape [3, 2, 32], expected [2, 2, 32]" : "missing"), "variant %d: '%s'", variant, err.msg);
    }
    bs_engine_close(e);
}

// With a draft vocabulary the candidates are the top-K of its columns, mapped to token ids before the codebooks
// (docs/draft-vocab.md): every candidate and draft is a listed token, greedy output still equals plain output,
// and a list shorter than the selector's K is refused.
TEST(dflash2_draft_vocab) {
    char target[256], d2[300], vp[400], list[2048];
    CHECK(make_pair(64, 32, 3, 16, 64, 5, 4, 8, 6, target, d2) == 0, "make-random failed");
    snprintf(vp, sizeof vp, "%s/vocab.json", target);
    int n = 0, listed[64] = { 0 };
    strcpy(list, "[");
    for (int id = 1; id < 64; id += 3) { snprintf(list + strlen(list), 16, "%s%d", n ? "," : "", id); listed[id] = 1; n++; }
    strcat(list, "]");
    CHECK(tu_write_text(vp, list) == 0);
    bs_drafter_opts o = { .lossy_weights = -1, .draft_vocab = vp };
    tu_greedy_spec_equals_plain(failed_, "cpu", target, d2, &o, 8, 41);
    if (*failed_) return;
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, target, "cpu", &err) == 0, "%s", err.msg);
    int32_t prompt[12] = { 3, 9, 27, 17, 51, 25, 11, 33, 35, 41, 59, 13 };
    bs_drafter_ctx dc;
    bs_drafter *d = tu_drafter_with_context(e, d2, &o, &dc, prompt, 10, &err);
    CHECK(d, "%s", err.msg);
    int32_t ci[4 * 4];
    bs_dflash_inspect ins = { .cand_ids = ci };
    bs_sampling sm = { .temperature = 1.0f, .top_p = 1.0f };
    bs_rng rng; bs_rng_seed(&rng, 2);
    bs_draft dr;
    CHECK(bs_dflash_forward_block(d, &dc, prompt[10], 4, &sm, &rng, &dr, &ins, &err) == 0 && dr.n == 4, "%s", err.msg);
    for (int i = 0; i < 16; i++) CHECK(listed[ci[i]], "candidate %d is not in the draft vocabulary", ci[i]);
    for (int k = 0; k < 4; k++) CHECK(listed[dr.tokens[k]], "draft %d is not in the draft vocabulary", dr.tokens[k]);
    tu_drafter_free(d, &dc);
    CHECK(tu_write_text(vp, "[1, 2, 3]") == 0);
    CHECK(bs_drafter_open_opts(&d, d2, e, 64, &o, &err) != 0 && strstr(err.msg, "selector_top_k"), "a 3-token list for 4 candidates: %s", err.msg);
    bs_engine_close(e);
}
