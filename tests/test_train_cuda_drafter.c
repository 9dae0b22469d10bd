// The GPU drafter trainer (train_cuda_drafter.h) against the CPU reference (train_drafter.c): the same tiny
// target (exported, then loaded by both), the same drafter weights, the same sequences and fixed anchors
// (dummy blocks, anchors near the end, keys over several 32-key tiles), exact fp32 GEMMs: every loss term
// within 1e-4 relative and every gradient within 1e-3 of its tensor's largest, for DSpark (vanilla Markov +
// confidence with the Markov feature), DeepSpec DFlash, z-lab DFlash and DFlash 2, against Qwen3 and Llama targets. Then: the loss falls over 20 AdamW
// steps, the export decodes in the engine with greedy speculative == plain, `blockspec train-drafter
// --device cuda` runs end to end, bad input fails cleanly. Without a GPU every test is SKIPPED with the reason.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "test_util_models.h"
#include "train_test_util.h"
#include "train/train_cuda.h"
#include "train/train_cuda_drafter.h"
#include "train/train_drafter.h"
#include "train/train_target.h"
#include "train/corpus.h"
#include "util/rng.h"

enum { TV = 128, NA = 7 };

static void tiny_cfg(bs_qwen3_config *c) {
    memset(c, 0, sizeof *c);
    c->vocab_size = TV; c->hidden_size = 64; c->n_layers = 3; c->n_heads = 4; c->n_kv_heads = 2; c->head_dim = 16;
    c->intermediate_size = 96; c->max_position = 256; c->rms_eps = 1e-6f; c->rope_theta = 10000.0f; c->tie_embeddings = 0;
    c->bos_id = -1;
}
// The same shape as a Llama-3.1 style target: no q/k norm, llama3 RoPE (original_max 16: every region of the
// rule within the 45-token sequences below); its drafter keeps Qwen3 layers and takes the target's RoPE.
static void tiny_cfg_family(bs_qwen3_config *c, int llama) {
    tiny_cfg(c);
    if (!llama) return;
    c->arch = BS_ARCH_LLAMA; c->rms_eps = 1e-5f;
    c->rope = (bs_rope_scaling){ BS_ROPE_LLAMA3, 8.0, 1.0, 4.0, 16 };
}

// A peaked random target exported to dir/target (bf16: both sides then load exactly the same weights).
static int make_target_family(const char *dir, int tied, int llama, char *tdir, size_t cap, bs_err *err) {
    bs_qwen3_config tc;
    tiny_cfg_family(&tc, llama);
    tc.tie_embeddings = tied;
    bs_train_task *t;
    if (bs_train_target_new(&t, &tc, 21 + tied, err)) return -1;
    tt_scale_weights(t, 20.0f);
    snprintf(tdir, cap, "%s/target%d%s", dir, tied, llama ? "_llama" : "");
    int rc = t->export_model(t, tdir, err);
    t->free(t);
    return rc;
}
static int make_target(const char *dir, int tied, char *tdir, size_t cap, bs_err *err) { return make_target_family(dir, tied, 0, tdir, cap, err); }

typedef struct { const char *kind; int taps[2]; int tied, target_labels, llama; } kcase;

static int drafter_cfg(bs_drafter_config *dc, bs_drafter_loss_opts *o, const kcase *k, bs_err *err) {
    bs_qwen3_config tc;
    tiny_cfg_family(&tc, k->llama);
    tc.tie_embeddings = k->tied;
    if (bs_train_drafter_config(dc, &tc, k->kind, 2, 4, TV - 1, 6, BS_MARKOV_VANILLA, err)) return -1;
    dc->target_layer_ids[0] = k->taps[0]; dc->target_layer_ids[1] = k->taps[1];
    bs_drafter_loss_defaults(o, dc);
    o->num_anchors = NA;
    o->target_labels = k->target_labels;
    if (!strcmp(k->kind, "dspark")) { o->ce_alpha = 0.3f; o->l1_alpha = 0.9f; o->conf_alpha = 1.0f; }
    return 0;
}

// Two sequences (45 and 29 tokens: context keys over two 32-key tiles), loss masks with gaps, anchors fixed:
// dummy blocks, an anchor at the last position (labels past the end), repeated tokens.
static int32_t ids0[45], ids1[29];
static uint8_t m0[45], m1[29];
static const int32_t anchors[2][NA] = { { 0, 5, 17, 33, 40, 44, 0 }, { 2, 9, 20, 27, 28, 0, 0 } };
static const int32_t keep[2][NA] = { { 1, 1, 1, 1, 1, 1, 0 }, { 1, 1, 1, 1, 1, 0, 0 } };
static void make_seqs(bs_train_seq seqs[2]) {
    bs_rng r; bs_rng_seed(&r, 99);
    for (int i = 0; i < 45; i++) { ids0[i] = (int32_t)(bs_rng_u64(&r) % (TV - 1)); m0[i] = (i % 11) != 7; }
    for (int i = 0; i < 29; i++) { ids1[i] = (int32_t)(bs_rng_u64(&r) % (TV - 1)); m1[i] = 1; }
    ids0[20] = ids0[19];
    m1[12] = 0;
    seqs[0] = (bs_train_seq){ ids0, m0, 45 };
    seqs[1] = (bs_train_seq){ ids1, m1, 29 };
}

// DFlash 2's own tensors at values that exercise them (tt_scale_weights leaves the zero projections at 0 and
// scales the identity kernels): kernels around the identity, small projections, unit codebooks.
static void set_dflash2_tensors(bs_train_task *t, uint64_t seed) {
    bs_rng r; bs_rng_seed(&r, seed);
    for (int i = 0; i < t->params.n; i++) {
        bs_param *p = &t->params.p[i];
        int base = strstr(p->name, ".base_kernel") != NULL, book = strstr(p->name, "_codebook") != NULL;
        if (!base && !book && !strstr(p->name, "kernel_projection") && !strstr(p->name, "hidden_projection")) continue;
        for (int64_t j = 0; j < p->n; j++) {
            float u = (float)(bs_rng_uniform(&r) * 2 - 1);
            p->w[j] = base ? ((j % (p->shape[1] * p->shape[2])) < p->shape[2] ? 1.0f : 0.0f) + 0.3f * u : book ? u : 0.1f * u;
        }
    }
}

static int rel_ok(double a, double b, double tol) { return fabs(a - b) <= tol * fmax(fabs(b), 1e-3); }

static void vs_cpu(int *failed_, const kcase *k) {
    NEED_CUDA_DEVICE();
    const char *dir = bs_test_tmpdir("train_cuda_drafter_ref");
    CHECK(dir, "no temp dir");
    bs_err err = {0};
    char tdir[1024];
    CHECK(make_target_family(dir, k->tied, k->llama, tdir, sizeof tdir, &err) == 0, "%s", err.msg);
    bs_drafter_config dc; bs_drafter_loss_opts o;
    CHECK(drafter_cfg(&dc, &o, k, &err) == 0, "%s", err.msg);
    bs_train_task *ct, *cd, *gd;
    CHECK(bs_train_target_load(&ct, tdir, 0, &err) == 0, "%s", err.msg);
    CHECK(bs_train_drafter_new(&cd, ct, &dc, &o, 5, &err) == 0, "%s", err.msg);
    tt_scale_weights(cd, 20.0f);
    if (dc.dflash2) set_dflash2_tensors(cd, 17);
    CHECK(bs_train_drafter_cuda_new(&gd, tdir, &dc, NULL, &o, 5, 2, 64, &err) == 0, "%s", err.msg);
    CHECK(gd->params.n == cd->params.n && !strcmp(gd->kind, cd->kind), "parameter sets differ");
    for (int i = 0; i < cd->params.n; i++) {
        CHECK(!strcmp(gd->params.p[i].name, cd->params.p[i].name) && gd->params.p[i].n == cd->params.p[i].n, "tensor %d differs", i);
        memcpy(gd->params.p[i].w, cd->params.p[i].w, sizeof(float) * cd->params.p[i].n);
    }
    CHECK(gd->sync_from_host(gd, NULL, NULL, -1, &err) == 0, "%s", err.msg);
    CHECK(bs_train_drafter_cuda_set_gemm(gd, BS_TRAIN_GEMM_FP32, &err) == 0, "%s", err.msg);
    bs_train_seq seqs[2];
    make_seqs(seqs);
    // CPU: the two sequences one after the other (gradients add), terms averaged as the loop does
    bs_param_zero_grad(&cd->params);
    bs_loss_terms c[2], g;
    for (int s = 0; s < 2; s++)
        CHECK(bs_train_drafter_step(cd, &seqs[s], anchors[s], keep[s], NA, 1, 0.5f, &c[s], NULL, &err) == 0, "%s", err.msg);
    CHECK(bs_train_drafter_cuda_zero_grads(gd, &err) == 0, "%s", err.msg);
    CHECK(bs_train_drafter_cuda_step(gd, seqs, 2, &anchors[0][0], &keep[0][0], 1, 0.5f, &g, &err) == 0, "%s", err.msg);
    CHECK(bs_train_drafter_cuda_grads_to_host(gd, &err) == 0, "%s", err.msg);
    double cl = (c[0].loss + c[1].loss) / 2, cce = (c[0].ce + c[1].ce) / 2, cl1 = (c[0].l1 + c[1].l1) / 2, ccf = (c[0].conf + c[1].conf) / 2;
    double ctau = (c[0].tau_est + c[1].tau_est) / 2;
    printf("  %s: loss cpu %.6f gpu %.6f | ce %.6f %.6f | l1 %.6f %.6f | conf %.6f %.6f | tau %.4f %.4f | tokens %g %g\n", k->kind, cl, g.loss, cce,
           g.ce, cl1, g.l1, ccf, g.conf, ctau, g.tau_est, c[0].n_tokens + c[1].n_tokens, g.n_tokens);
    CHECK(rel_ok(g.loss, cl, 1e-4) && rel_ok(g.ce, cce, 1e-4) && rel_ok(g.l1, cl1, 1e-4) && rel_ok(g.conf, ccf, 1e-4) && rel_ok(g.tau_est, ctau, 1e-4),
          "%s: loss terms differ (above)", k->kind);
    CHECK(g.n_tokens == c[0].n_tokens + c[1].n_tokens && g.n_blocks == c[0].n_blocks + c[1].n_blocks, "token / block counts differ");
    CHECK(cl > 0.1, "vacuous loss %g", cl);
    double worst = 0; const char *wn = "";
    for (int i = 0; i < cd->params.n; i++) {
        bs_param *pc = &cd->params.p[i], *pg = &gd->params.p[i];
        if (!pc->trainable) continue;
        double gmax = 0, dmax = 0; int64_t at = 0;
        for (int64_t j = 0; j < pc->n; j++) {
            if (fabs(pc->g[j]) > gmax) gmax = fabs(pc->g[j]);
            double dd = fabs((double)pc->g[j] - pg->g[j]);
            if (dd > dmax) { dmax = dd; at = j; }
        }
        CHECK(gmax > 1e-4, "%s: largest gradient %g: the comparison would be vacuous", pc->name, gmax);
        if (dmax / gmax > worst) { worst = dmax / gmax; wn = pc->name; }
        CHECK(dmax <= 1e-3 * gmax, "%s %s[%lld]: gpu %.6g cpu %.6g (largest |g| %.3g)", k->kind, pc->name, (long long)at, pg->g[at], pc->g[at], gmax);
    }
    printf("  %s: worst gradient difference %.2e of the tensor's largest (%s)\n", k->kind, worst, wn);
    // forward only: the same terms, gradients untouched
    bs_loss_terms e;
    CHECK(bs_train_drafter_cuda_step(gd, seqs, 2, &anchors[0][0], &keep[0][0], 0, 0.f, &e, &err) == 0, "%s", err.msg);
    CHECK(rel_ok(e.loss, g.loss, 1e-6), "forward-only loss %g vs %g", e.loss, g.loss);
    gd->free(gd); cd->free(cd); ct->free(ct);
}

TEST(train_cuda_drafter_vs_cpu_dspark) { kcase k = { "dspark", { 0, 2 }, 0 }; vs_cpu(failed_, &k); }
TEST(train_cuda_drafter_vs_cpu_dflash) { kcase k = { "dflash", { -1, 1 }, 1 }; vs_cpu(failed_, &k); }
TEST(train_cuda_drafter_vs_cpu_zlab) { kcase k = { "zlab-dflash", { 1, 2 }, 0 }; vs_cpu(failed_, &k); }
// DFlash 2 (convolutions with every coefficient live, the selector's CE in the conf term): z-lab's layout plus
// its three selector tensors and four convolution tensors a layer, all compared.
TEST(train_cuda_drafter_vs_cpu_dflash2) { kcase k = { "dflash2", { 1, 2 }, 0 }; vs_cpu(failed_, &k); }
TEST(train_cuda_drafter_vs_cpu_dflash2_target_labels) { kcase k = { "dflash2", { 0, 2 }, 1, 1 }; vs_cpu(failed_, &k); }
// Distillation labels (the target's argmax) chosen on the device: the same terms and gradients as the CPU's.
TEST(train_cuda_drafter_vs_cpu_dspark_target_labels) { kcase k = { "dspark", { 0, 2 }, 0, 1 }; vs_cpu(failed_, &k); }
TEST(train_cuda_drafter_vs_cpu_dflash_target_labels) { kcase k = { "dflash", { -1, 1 }, 1, 1 }; vs_cpu(failed_, &k); }
// Against a Llama target (no q/k norm, llama3 RoPE; its taps from the GPU target forward, untied and tied
// head): the drafter's Qwen3 layers rotate with the target's scaled table on both sides.
TEST(train_cuda_drafter_vs_cpu_llama_dspark) { kcase k = { "dspark", { 0, 2 }, 0, 0, 1 }; vs_cpu(failed_, &k); }
TEST(train_cuda_drafter_vs_cpu_llama_zlab) { kcase k = { "zlab-dflash", { 1, 2 }, 1, 0, 1 }; vs_cpu(failed_, &k); }
TEST(train_cuda_drafter_vs_cpu_llama_dflash_target_labels) { kcase k = { "dflash", { -1, 1 }, 0, 1, 1 }; vs_cpu(failed_, &k); }

// 20 AdamW steps on a fixed batch (bf16 GEMMs, anchors drawn): the loss falls; then the export decodes in
// the engine with greedy speculative == plain, for DSpark and z-lab.
static void learn_export(int *failed_, const kcase *k, int seed) {
    NEED_CUDA_DEVICE();
    const char *dir = bs_test_tmpdir("train_cuda_drafter_learn");
    CHECK(dir, "no temp dir");
    bs_err err = {0};
    char tdir[1024], ddir[1100];
    CHECK(make_target_family(dir, k->tied, k->llama, tdir, sizeof tdir, &err) == 0, "%s", err.msg);
    bs_drafter_config dc; bs_drafter_loss_opts o;
    CHECK(drafter_cfg(&dc, &o, k, &err) == 0, "%s", err.msg);
    o.num_anchors = 16;
    bs_train_task *gd;
    CHECK(bs_train_drafter_cuda_new(&gd, tdir, &dc, NULL, &o, 3, 4, 64, &err) == 0, "%s", err.msg);
    tt_scale_weights(gd, 5.0f);
    if (dc.dflash2) set_dflash2_tensors(gd, 4);
    CHECK(gd->sync_from_host(gd, NULL, NULL, 0, &err) == 0, "%s", err.msg);
    // the target's own greedy text is learnable; random tokens with a repeated phrase will do here
    static int32_t data[4][48];
    bs_rng r; bs_rng_seed(&r, seed);
    int32_t phrase[12];
    for (int i = 0; i < 12; i++) phrase[i] = (int32_t)(bs_rng_u64(&r) % (TV - 1));
    bs_train_seq seqs[4];
    for (int s = 0; s < 4; s++) {
        for (int i = 0; i < 48; i++) data[s][i] = phrase[(i + 3 * s) % 12];
        seqs[s] = (bs_train_seq){ data[s], NULL, 48 };
    }
    bs_adamw_settings as = { 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f };
    double first = 0, last = 0;
    for (int step = 0; step < 20; step++) {
        bs_loss_terms t; double gn;
        bs_rng ar; bs_rng_seed(&ar, 1000 + step);
        CHECK(gd->loss_grad_batch(gd, seqs, 4, 0.25f, &ar, &t, &err) == 0, "%s", err.msg);
        CHECK(gd->opt_step(gd, &as, 3e-3, &gn, &err) == 0, "%s", err.msg);
        CHECK(isfinite(t.loss) && isfinite(gn), "step %d: loss %g norm %g", step, t.loss, gn);
        if (step == 0) first = t.loss;
        last = t.loss;
    }
    printf("  %s: loss %.4f -> %.4f over 20 steps\n", k->kind, first, last);
    CHECK(last < 0.8 * first, "%s: loss fell only from %.4f to %.4f", k->kind, first, last);
    snprintf(ddir, sizeof ddir, "%s/drafter_%s", dir, k->kind);
    CHECK(gd->export_model(gd, ddir, &err) == 0, "%s", err.msg);
    gd->free(gd);
    tu_greedy_spec_equals_plain(failed_, "cpu", tdir, ddir, NULL, 3, 11);
}
TEST(train_cuda_drafter_learns_and_exports_dflash2) { kcase k = { "dflash2", { 1, 2 }, 0 }; learn_export(failed_, &k, 3); }
TEST(train_cuda_drafter_learns_and_exports_dspark) { kcase k = { "dspark", { 0, 2 }, 0 }; learn_export(failed_, &k, 1); }
TEST(train_cuda_drafter_learns_and_exports_zlab) { kcase k = { "zlab-dflash", { 1, 2 }, 1 }; learn_export(failed_, &k, 2); }
TEST(train_cuda_drafter_learns_and_exports_llama_dspark) { kcase k = { "dspark", { 0, 2 }, 0, 0, 1 }; learn_export(failed_, &k, 1); }

// `blockspec train-drafter --device cuda` through the generic loop, on a corpus written here.
TEST(train_cuda_drafter_cli) {
    NEED_CUDA_DEVICE();
    const char *dir = bs_test_tmpdir("train_cuda_drafter_cli");
    CHECK(dir, "no temp dir");
    bs_err err = {0};
    char tdir[1024], corpus[1100], cmd[4096];
    CHECK(make_target(dir, 0, tdir, sizeof tdir, &err) == 0, "%s", err.msg);
    snprintf(corpus, sizeof corpus, "%s/c.bsc", dir);
    bs_corpus_writer *w;
    CHECK(bs_corpus_writer_open(&w, corpus, TV, 0, 0, &err) == 0, "%s", err.msg);
    bs_rng r; bs_rng_seed(&r, 5);
    for (int d = 0; d < 20; d++) {
        int32_t doc[100];
        for (int i = 0; i < 100; i++) doc[i] = (int32_t)(bs_rng_u64(&r) % (TV - 1));
        CHECK(bs_corpus_writer_add(w, doc, NULL, 100, &err) == 0, "%s", err.msg);
    }
    CHECK(bs_corpus_writer_finish(w, &err) == 0, "%s", err.msg);
    snprintf(cmd, sizeof cmd, "%s train-drafter -m %s --arch dspark --device cuda --layers 1 --block 4 --markov-rank 8 --anchors 8 "
             "--mask-id %d --data %s --steps 6 --batch 2 --seq-len 48 --no-plot --out %s/o 2>&1", bs_cli_path(), tdir, TV - 1, corpus, dir);
    CHECK(system(cmd) == 0, "%s failed", cmd);
    snprintf(cmd, sizeof cmd, "%s/o/model.safetensors", dir);
    FILE *f = fopen(cmd, "rb");
    CHECK(f, "no export at %s", cmd);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s/o", dir);
    tu_greedy_spec_equals_plain(failed_, "cpu", tdir, cmd, NULL, 2, 3);
}

TEST(train_cuda_drafter_bad_input) {
    NEED_CUDA_DEVICE();
    const char *dir = bs_test_tmpdir("train_cuda_drafter_bad");
    CHECK(dir, "no temp dir");
    bs_err err = {0};
    char tdir[1024];
    CHECK(make_target(dir, 0, tdir, sizeof tdir, &err) == 0, "%s", err.msg);
    bs_qwen3_config tc; tiny_cfg(&tc);
    bs_drafter_config dc; bs_drafter_loss_opts o;
    CHECK(bs_train_drafter_config(&dc, &tc, "dspark", 1, 4, TV - 1, 6, BS_MARKOV_GATED, &err) == 0, "%s", err.msg);
    bs_train_task *gd = NULL;
    CHECK(bs_train_drafter_cuda_new(&gd, tdir, &dc, NULL, NULL, 1, 2, 64, &err) != 0 && strstr(err.msg, "not on the GPU yet"), "gated: %s", err.msg);
    CHECK(bs_train_drafter_cuda_new(&gd, "/nonexistent/target", &dc, NULL, NULL, 1, 2, 64, &err) != 0, "missing target accepted");
    kcase k = { "dspark", { 0, 2 }, 0 };
    CHECK(drafter_cfg(&dc, &o, &k, &err) == 0, "%s", err.msg);
    CHECK(bs_train_drafter_cuda_new(&gd, tdir, &dc, NULL, &o, 1, 2, 64, &err) == 0, "%s", err.msg);
    bs_train_seq seqs[3];
    make_seqs(seqs);
    seqs[2] = seqs[1];
    bs_loss_terms t;
    bs_rng r; bs_rng_seed(&r, 1);
    CHECK(gd->loss_grad_batch(gd, seqs, 3, 1.f, &r, &t, &err) != 0, "3 sequences accepted (2 allocated)");
    int32_t longids[80] = { 0 };
    bs_train_seq lg = { longids, NULL, 80 };
    CHECK(gd->loss_grad(gd, &lg, 1.f, &r, &t, &err) != 0, "80 tokens accepted (64 allocated)");
    int32_t bad[10] = { 1, 2, 3, TV + 5, 1, 2, 3, 4, 5, 6 };
    bs_train_seq bq = { bad, NULL, 10 };
    CHECK(gd->loss_grad(gd, &bq, 1.f, &r, &t, &err) != 0 && strstr(err.msg, "vocabulary"), "out-of-vocabulary id: %s", err.msg);
    int32_t an[2][NA] = { { 0 }, { 50 } }, kp[2][NA] = { { 1 }, { 1 } };
    CHECK(bs_train_drafter_cuda_step(gd, seqs, 2, &an[0][0], &kp[0][0], 1, 1.f, &t, &err) != 0 && strstr(err.msg, "outside"), "anchor 50: %s", err.msg);
    CHECK(gd->loss_grad(gd, &seqs[0], 1.f, NULL, &t, &err) != 0, "no RNG accepted");
    CHECK(gd->loss_grad(gd, &seqs[0], 1.f, &r, &t, &err) == 0, "still usable: %s", err.msg);
    gd->free(gd);
}
