// DFlash 2 drafters (docs/dflash2.md) written by `blockspec make-random`: rounds through the library (greedy drafts
// are the selector's walk over the top-K of the unary logits, recomputed here from the checkpoint's codebooks;
// sampled q is the walk's softmax over the candidates and zero elsewhere), greedy speculative == plain on the
// CPU and CUDA, the sampling chi-square with the candidate-restricted q (passes) and with a wrong q (fails), a
// fresh DFlash 2 (identity convolutions, zero selector) drafting exactly what its DFlash drafts, and bad input.
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "fixture_util.h"
#include "test_util_models.h"
#include "backend/affine.h"
#include "engine/engine.h"
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

// A drafter that drafts exactly as the DFlash 2 drafter inside it, but hands the verifier a wrong q: the full
// softmax of the unary logits at the sampling temperature (what a DFlash drafter reports for its rows) instead
// of the walk's distribution over the candidates that the drafts were really drawn from.
typedef struct { bs_drafter iface; bs_drafter *inner; bs_backend *be; float *q_dev, *q, *lg; int V; } wrong_q;
static int wq_ctx_init(bs_drafter *d, bs_drafter_ctx *c, int max_ctx, bs_err *err) {
    wrong_q *w = d->impl;
    return w->inner->ctx_init(w->inner, c, max_ctx, err);
}
static void wq_ctx_free(bs_drafter *d, bs_drafter_ctx *c) { wrong_q *w = d->impl; w->inner->ctx_free(w->inner, c); }
static int wq_add_context(bs_drafter *d, bs_drafter_ctx *c, const float *feat, int n, bs_err *err) {
    wrong_q *w = d->impl;
    return w->inner->add_context(w->inner, c, feat, n, err);
}
static int wq_rollback(bs_drafter *d, bs_drafter_ctx *c, int n_ctx, bs_err *err) {
    wrong_q *w = d->impl;
    return w->inner->rollback(w->inner, c, n_ctx, err);
}
static int wq_propose(bs_drafter *d, bs_drafter_ctx *c, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng, bs_draft *out,
                      bs_err *err) {
    wrong_q *w = d->impl;
    bs_dflash_inspect ins = { .logits = w->lg };
    if (bs_dflash_forward_block(w->inner, c, anchor, max_n, s, rng, out, &ins, err)) return -1;
    if (!out->q) return 0;
    for (int k = 0; k < out->n; k++) {
        const float *l = w->lg + (size_t)k * w->V;
        float *q = w->q + (size_t)k * w->V;
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < w->V; v++) if (l[v] > mx) mx = l[v];
        for (int v = 0; v < w->V; v++) sum += exp((l[v] - mx) / s->temperature);
        for (int v = 0; v < w->V; v++) q[v] = (float)(exp((l[v] - mx) / s->temperature) / sum);
    }
    w->be->upload(w->be, w->q_dev, w->q, sizeof(float) * out->n * w->V);
    out->q = w->q_dev;
    return 0;
}
static void wq_free(bs_drafter *d) {
    wrong_q *w = d->impl;
    w->inner->free(w->inner);
    w->be->free(w->be, w->q_dev);
    free(w->q); free(w->lg); free(w);
}
static bs_drafter *wrong_q_wrap(bs_engine *e, bs_drafter *inner) {
    wrong_q *w = calloc(1, sizeof *w);
    bs_err err;
    int V = e->cfg.vocab_size, n = inner->max_drafts;
    *w = (wrong_q){ .inner = inner, .be = e->be, .V = V, .q = malloc(sizeof(float) * n * V), .lg = malloc(sizeof(float) * n * V),
                    .q_dev = e->be->alloc(e->be, sizeof(float) * n * V, &err) };
    w->iface = (bs_drafter){ .name = "dflash2-wrong-q", .max_drafts = n, .n_taps = inner->n_taps, .taps = inner->taps, .impl = w,
                             .ctx_init = wq_ctx_init, .ctx_free = wq_ctx_free, .add_context = wq_add_context, .rollback = wq_rollback,
                             .propose = wq_propose, .free = wq_free };
    return &w->iface;
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
            if (wrong) d = wrong_q_wrap(e, d);
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
