// DFlash 2 in the trainer (docs/training.md "DFlash 2"): finite differences of the convolution and selector ops
// and of a whole DFlash 2 drafter step, a fresh DFlash 2 giving exactly its DFlash's loss and gradients, and a
// trained export that the engine's DFlash 2 drafter loads and runs as the trainer computes it.
#include <stdlib.h>
#include <string.h>
#include "backend/backend.h"
#include "engine/engine.h"
#include "fixture_util.h"
#include "harness.h"
#include "model/dflash.h"
#include "spec/spec_loop.h"
#include "test_util_models.h"
#include "train/corpus.h"
#include "train/train_dflash2_ops.h"
#include "train/train_drafter.h"
#include "train/train_target.h"
#include "train_test_util.h"
#include "util/dtype.h"
#include "util/rng.h"

static void fill(float *x, int64_t n, bs_rng *r, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)((bs_rng_uniform(r) * 2 - 1) * scale);
}
static double dot_d(const float *a, const float *b, int64_t n) { double s = 0; for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i]; return s; }

// Central differences at every coordinate of x (these tensors are small) vs g: |fd - g| <= tol * max|g|.
typedef double (*loss_fn)(void *ctx);
static int fd_all(const char *what, float *x, int64_t n, const float *g, loss_fn f, void *ctx, double tol, char *msg, size_t cap) {
    double gmax = 0;
    for (int64_t i = 0; i < n; i++) if (fabs(g[i]) > gmax) gmax = fabs(g[i]);
    if (gmax == 0) { snprintf(msg, cap, "%s: the gradient is all zero", what); return -1; }
    for (int64_t i = 0; i < n; i++) {
        float keep = x[i];
        x[i] = keep + 1e-2f; double lp = f(ctx);
        x[i] = keep - 1e-2f; double lm = f(ctx);
        x[i] = keep;
        double fd = (lp - lm) / 2e-2;
        if (fabs(fd - g[i]) > tol * gmax) { snprintf(msg, cap, "%s[%lld]: finite difference %.6g, backward %.6g", what, (long long)i, fd, g[i]); return -1; }
    }
    return 0;
}
#define FD(what, x, n, g, f, ctx) do { char m_[300]; CHECK(fd_all(what, x, n, g, f, ctx, 2e-3, m_, sizeof m_) == 0, "%s", m_); } while (0)

// ---- the convolution -----------------------------------------------------------------------------------------
enum { CN = 8, CD = 8, CB = 3, CT = 2, CG = 4, CS = 2 * CT * (CD / CG) };   // rows (two whole blocks + 2), dim, block, taps, group
typedef struct { float x[CN * CD], base[CT * CD], dyn[CN * CS], y0[CN * CD], c[CN * CD], y[CN * CD]; } conv_ctx;
static double conv_loss(void *p) {
    conv_ctx *t = p;
    memcpy(t->y, t->y0, sizeof t->y);
    bs_op_dyn_conv_fwd(t->y, t->x, CN, CD, CB, CT, t->base, t->dyn + CT * (CD / CG), CS, CG, 1);   // stage 1's columns, accumulating
    return dot_d(t->y, t->c, CN * CD);
}

TEST(train_op_dyn_conv_grad) {
    conv_ctx t;
    bs_rng r; bs_rng_seed(&r, 3);
    fill(t.x, CN * CD, &r, 1); fill(t.base, CT * CD, &r, 1); fill(t.dyn, CN * CS, &r, 1); fill(t.y0, CN * CD, &r, 1); fill(t.c, CN * CD, &r, 1);
    // the forward is the engine's op, bit for bit (cpu-ref's dyn_conv)
    bs_backend *be = bs_backend_cpu(1);
    float ye[CN * CD];
    memcpy(ye, t.y0, sizeof ye);
    be->dyn_conv(be, ye, t.x, CN, CD, CB, CT, t.base, t.dyn + CT * (CD / CG), CS, CG, 1);
    be->destroy(be);
    conv_loss(&t);
    CHECK(memcmp(ye, t.y, sizeof ye) == 0, "the training forward differs from the engine's dyn_conv");
    // a block's first row reads no tap 1: changing the last row of block 0 leaves row 0 of block 1 alone
    float dx[CN * CD] = {0}, db[CT * CD] = {0}, dd[CN * CS] = {0};
    bs_op_dyn_conv_bwd(dx, db, dd + CT * (CD / CG), t.c, t.x, t.base, t.dyn + CT * (CD / CG), CN, CD, CB, CT, CS, CG);
    for (int s = 0; s < CN; s++)
        for (int k = 0; k < CS; k++)
            if (k < CT * (CD / CG)) CHECK(dd[s * CS + k] == 0, "stage 0's columns got a gradient");
    CHECK(dd[CB * CS + CT * (CD / CG) + CD / CG] == 0, "row %d (a block's first) has a tap-1 gradient", CB);
    FD("x", t.x, CN * CD, dx, conv_loss, &t);
    FD("base", t.base, CT * CD, db, conv_loss, &t);
    FD("dyn", t.dyn, CN * CS, dd, conv_loss, &t);
}

// ---- the selector's term -------------------------------------------------------------------------------------
enum { SV = 12, SK = 4, SR = 5 };
typedef struct { float z[SR], A[SR], B[SV * SR], logits[SV], un[SK], s[SK]; int32_t cand[SK]; int gold; } sel_ctx;
static double sel_loss(void *p) {
    sel_ctx *t = p;
    return bs_op_selector_ce(NULL, NULL, NULL, t->z, t->A, t->B, t->cand, t->un, SK, SR, t->gold, 1, t->s);
}

TEST(train_op_selector_grad) {
    sel_ctx t;
    bs_rng r; bs_rng_seed(&r, 9);
    fill(t.z, SR, &r, 1); fill(t.A, SR, &r, 1.5f); fill(t.B, SV * SR, &r, 1.5f); fill(t.logits, SV, &r, 2);
    t.logits[3] = t.logits[7] = 5;   // a tie: the smaller id first
    // candidates: the K best in the engine's order; a label among them keeps its place
    CHECK(bs_selector_candidates(t.cand, t.un, t.logits, SV, SK, 7) == 1 && t.cand[0] == 3 && t.cand[1] == 7, "ties go to the smaller id");
    for (int k = 1; k < SK; k++) CHECK(t.un[k] <= t.un[k - 1] && t.un[k] == t.logits[t.cand[k]]);
    int worst = 0;
    for (int v = 0; v < SV; v++) if (t.logits[v] < t.logits[worst]) worst = v;
    float last = t.un[SK - 1];
    t.gold = bs_selector_candidates(t.cand, t.un, t.logits, SV, SK, worst);
    CHECK(t.gold == SK - 1 && t.cand[SK - 1] == worst && t.un[SK - 1] == t.logits[worst] && t.un[SK - 1] < last, "a missing label takes the last place");
    float dz[SR] = {0}, dA[SR] = {0}, dB[SV * SR] = {0};
    float ce = bs_op_selector_ce(dz, dA, dB, t.z, t.A, t.B, t.cand, t.un, SK, SR, t.gold, 1, t.s);
    CHECK(fabsf(ce - (float)sel_loss(&t)) < 1e-6f && ce > 0);
    for (int v = 0; v < SV; v++) {   // only the candidates' rows of B move
        int is_c = 0;
        for (int k = 0; k < SK; k++) is_c |= t.cand[k] == v;
        for (int q = 0; q < SR && !is_c; q++) CHECK(dB[v * SR + q] == 0, "row %d of B is not a candidate's", v);
    }
    FD("z", t.z, SR, dz, sel_loss, &t);
    FD("A[prev]", t.A, SR, dA, sel_loss, &t);
    FD("B", t.B, SV * SR, dB, sel_loss, &t);
}

// ---- whole drafters ------------------------------------------------------------------------------------------

static void tiny_target_cfg(bs_qwen3_config *c, int V) {
    memset(c, 0, sizeof *c);
    c->vocab_size = V; c->hidden_size = 16; c->n_layers = 3; c->n_heads = 4; c->n_kv_heads = 2; c->head_dim = 8;
    c->intermediate_size = 24; c->max_position = 512; c->rms_eps = 1e-6f; c->rope_theta = 10000.0f; c->tie_embeddings = 1;
    c->bos_id = -1;
}

static int is_d2(const char *name) { return strstr(name, "_conv.") || !strncmp(name, "candidate_selector.", 19); }
static uint32_t name_hash(const char *s) { uint32_t h = 2166136261u; while (*s) h = (h ^ (uint8_t)*s++) * 16777619u; return h; }

// Every trainable tensor a DFlash drafter also has, scaled to O(1) activations (as tt_scale_weights, keyed by
// name so a DFlash and a DFlash 2 get the same values); DFlash 2's own ones left alone.
static void scale_shared(bs_train_task *t, float factor) {
    for (int i = 0; i < t->params.n; i++) {
        bs_param *p = &t->params.p[i];
        if (!p->trainable || is_d2(p->name)) continue;
        uint32_t h = name_hash(p->name) % 97;
        for (int64_t k = 0; k < p->n; k++) p->w[k] = p->n_dims >= 2 ? p->w[k] * factor : p->w[k] + 0.3f * sinf(1.7f * k + h);
    }
}
// DFlash 2's own tensors away from their fresh values: kernels around the identity, projections O(1 / sqrt(H)).
static void randomise_d2(bs_train_task *t, uint64_t seed) {
    bs_rng r; bs_rng_seed(&r, seed);
    for (int i = 0; i < t->params.n; i++) {
        bs_param *p = &t->params.p[i];
        if (!is_d2(p->name)) continue;
        float sc = strstr(p->name, "base_kernel") ? 0.4f : strstr(p->name, "codebook") ? 1.0f : 0.3f;
        for (int64_t k = 0; k < p->n; k++) p->w[k] += (float)((bs_rng_uniform(&r) * 2 - 1) * sc);
    }
}

static int32_t ids16[16] = { 3, 7, 1, 9, 30, 2, 2, 17, 8, 25, 36, 11, 4, 4, 19, 0 };
static uint8_t mask16[16] = { 0, 0, 1, 1, 1, 1, 0, 1, 1, 1, 0, 0, 1, 1, 1, 1 };

static int new_drafter(bs_train_task **dr, bs_train_task *tgt, const bs_qwen3_config *tc, const char *kind, int B, int anchors, bs_err *err) {
    bs_drafter_config dc;
    if (bs_train_drafter_config(&dc, tc, kind, 2, B, tc->vocab_size - 1, 5, 0, err)) return -1;
    dc.target_layer_ids[0] = 0; dc.target_layer_ids[1] = 2;
    if (dc.dflash2) { dc.conv_group = 4; dc.sel_top_k = 6; }
    bs_drafter_loss_opts o;
    bs_drafter_loss_defaults(&o, &dc);
    o.num_anchors = anchors;
    return bs_train_drafter_new(dr, tgt, &dc, &o, 5, err);
}

// A copy of drafter dr (same weights) whose selector term has weight alpha.
static bs_train_task *with_alpha(bs_train_task *dr, bs_train_task *tgt, float alpha, bs_err *err) {
    bs_drafter_config dc = *bs_train_drafter_config_of(dr);
    bs_drafter_loss_opts o;
    bs_drafter_loss_defaults(&o, &dc);
    o.conf_alpha = alpha;
    o.num_anchors = 7;
    bs_train_task *t;
    if (bs_train_drafter_new(&t, tgt, &dc, &o, 5, err)) return NULL;
    for (int i = 0; i < dr->params.n; i++) memcpy(t->params.p[i].w, dr->params.p[i].w, sizeof(float) * dr->params.p[i].n);
    return t;
}

// The whole DFlash 2 objective against central differences, every tensor, dummy blocks too. The selector's term
// reads the unary logits and h with their gradient stopped (as the BCE targets of DSpark are detached), so a
// difference of the loss value sees that dependence while the gradient rightly does not: the check runs twice,
// the CE (selector weight 0) against the backbone's tensors, and CE + selector against the selector's (whose
// values the CE and the candidates do not depend on). The tensors not checked in a pass are marked frozen.
TEST(train_drafter_fd_dflash2) {
    bs_qwen3_config tc;
    tiny_target_cfg(&tc, 40);
    bs_err err = {0};
    bs_train_task *tgt, *dr;
    CHECK(bs_train_target_new(&tgt, &tc, 21, &err) == 0, "%s", err.msg);
    tt_scale_weights(tgt, 20.0f);
    CHECK(new_drafter(&dr, tgt, &tc, "dflash2", 4, 7, &err) == 0, "%s", err.msg);
    CHECK(!strcmp(dr->kind, "dflash2") && bs_param_find(&dr->params, "layers.1.mlp_conv.kernel_projection.weight") &&
          bs_param_find(&dr->params, "candidate_selector.successor_codebook"), "not a DFlash 2 parameter set");
    scale_shared(dr, 20.0f);
    randomise_d2(dr, 8);
    bs_train_seq seq = { ids16, mask16, 16 };
    for (int pass = 0; pass < 2; pass++) {
        bs_train_task *t = with_alpha(dr, tgt, pass ? 1.0f : 0.0f, &err);
        CHECK(t, "%s", err.msg);
        for (int i = 0; i < t->params.n; i++)
            if (t->params.p[i].trainable) t->params.p[i].trainable = (strncmp(t->params.p[i].name, "candidate_selector.", 19) == 0) == pass;
        char msg[400];
        int rc = tt_fd_check_task(t, &seq, 77, 5, 2e-2, msg, sizeof msg);
        t->free(t);
        CHECK(rc == 0, "%s: %s", pass ? "selector" : "backbone", msg);
    }
    dr->free(dr);
    tgt->free(tgt);
}

// A fresh DFlash 2 (identity kernels, zero projections) against the z-lab DFlash of the same seed: the same CE,
// and bit-identical gradients of every tensor they share, with the selector's term on (its gradient stops at the
// selector) and off (then the losses are equal too). The selector's projection still gets a gradient.
TEST(train_dflash2_fresh_equals_dflash) {
    bs_qwen3_config tc;
    tiny_target_cfg(&tc, 40);
    bs_err err = {0};
    bs_train_task *tgt, *d1, *d2;
    CHECK(bs_train_target_new(&tgt, &tc, 21, &err) == 0, "%s", err.msg);
    tt_scale_weights(tgt, 20.0f);
    CHECK(new_drafter(&d1, tgt, &tc, "zlab-dflash", 4, 7, &err) == 0 && new_drafter(&d2, tgt, &tc, "dflash2", 4, 7, &err) == 0, "%s", err.msg);
    scale_shared(d1, 20.0f);
    scale_shared(d2, 20.0f);
    int shared = 0;
    for (int i = 0; i < d1->params.n; i++) {
        bs_param *a = &d1->params.p[i], *b = bs_param_find(&d2->params, a->name);
        CHECK(b && b->n == a->n && memcmp(a->w, b->w, sizeof(float) * a->n) == 0, "%s: initial values differ", a->name);
    }
    bs_train_seq seq = { ids16, mask16, 16 };
    int32_t anchors[7] = { 2, 3, 7, 8, 12, 14, 0 }, keep[7] = { 1, 1, 1, 1, 1, 1, 0 };
    for (int sel_on = 1; sel_on >= 0; sel_on--) {
        bs_param_zero_grad(&d1->params);
        bs_param_zero_grad(&d2->params);
        bs_loss_terms t1, t2;
        CHECK(bs_train_drafter_step(d1, &seq, anchors, keep, 7, 1, 1.0f, &t1, NULL, &err) == 0, "%s", err.msg);
        if (!sel_on) {   // the selector's weight to 0 through a reload-free path: a second task with the option
            bs_drafter_config dc = *bs_train_drafter_config_of(d2);
            bs_drafter_loss_opts o;
            bs_drafter_loss_defaults(&o, &dc);
            o.conf_alpha = 0;
            o.num_anchors = 7;
            bs_train_task *d3;
            CHECK(bs_train_drafter_new(&d3, tgt, &dc, &o, 5, &err) == 0, "%s", err.msg);
            for (int i = 0; i < d2->params.n; i++) memcpy(d3->params.p[i].w, d2->params.p[i].w, sizeof(float) * d2->params.p[i].n);
            d2->free(d2);
            d2 = d3;
        }
        CHECK(bs_train_drafter_step(d2, &seq, anchors, keep, 7, 1, 1.0f, &t2, NULL, &err) == 0, "%s", err.msg);
        CHECK(t1.ce == t2.ce && t1.n_tokens == t2.n_tokens, "CE %.9g vs DFlash's %.9g", t2.ce, t1.ce);
        if (sel_on) CHECK(t2.conf > 0 && t2.loss == t2.ce + t2.conf, "selector term %g", t2.conf);
        else CHECK(t2.loss == t1.loss, "loss %.9g vs DFlash's %.9g", t2.loss, t1.loss);
        shared = 0;
        for (int i = 0; i < d1->params.n; i++) {
            bs_param *a = &d1->params.p[i], *b = bs_param_find(&d2->params, a->name);
            if (!a->trainable) continue;
            for (int64_t k = 0; k < a->n; k++) CHECK(a->g[k] == b->g[k], "%s[%lld]: %.9g vs DFlash's %.9g (selector %s)", a->name, (long long)k, b->g[k], a->g[k], sel_on ? "on" : "off");
            shared++;
        }
        bs_param *pw = bs_param_find(&d2->params, "candidate_selector.hidden_projection.weight");
        double gn = 0;
        for (int64_t k = 0; k < pw->n; k++) gn += fabs(pw->g[k]);
        CHECK(sel_on ? gn > 0 : gn == 0, "hidden_projection's gradient %g with the selector %s", gn, sel_on ? "on" : "off");
    }
    CHECK(shared == 2 + 2 * 11 + 1, "compared %d shared tensors", shared);
    d1->free(d1); d2->free(d2);
    tgt->free(tgt);
}

static void round_bf16(bs_train_task *t) {
    for (int i = 0; i < t->params.n; i++)
        for (int64_t k = 0; k < t->params.p[i].n; k++) t->params.p[i].w[k] = bs_bf16_to_f32(bs_f32_to_bf16(t->params.p[i].w[k]));
}

// A few training steps, then the export: it loads back for training with the same tensors, the engine's DFlash 2
// drafter computes the trainer's logits for a block (and z = hidden_projection of its hidden rows), and greedy
// speculative decoding with it equals plain decoding.
TEST(train_dflash2_export_loads_in_engine) {
    const char *dir = bs_test_tmpdir("train_d2_export");
    CHECK(dir, "no temp dir");
    bs_qwen3_config tc;
    tiny_target_cfg(&tc, 96);
    bs_err err = {0};
    bs_train_task *tgt, *dr;
    CHECK(bs_train_target_new(&tgt, &tc, 40, &err) == 0, "%s", err.msg);
    tt_scale_weights(tgt, 25.0f);
    int B = 5;
    CHECK(new_drafter(&dr, tgt, &tc, "dflash2", B, 6, &err) == 0, "%s", err.msg);
    scale_shared(dr, 20.0f);
    randomise_d2(dr, 3);
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = (i * 29 + 3) % 95;
    bs_train_seq seq = { ids, NULL, 40 };
    bs_rng r; bs_rng_seed(&r, 1);
    double first = 0, last = 0;
    for (int step = 0; step < 4; step++) {   // plain SGD steps: the point is that training moves every tensor
        bs_param_zero_grad(&dr->params);
        bs_loss_terms t;
        CHECK(dr->loss_grad(dr, &seq, 1.0f, &r, &t, &err) == 0, "%s", err.msg);
        if (!step) first = t.loss;
        last = t.loss;
        for (int i = 0; i < dr->params.n; i++) {
            bs_param *p = &dr->params.p[i];
            if (p->trainable) for (int64_t k = 0; k < p->n; k++) p->w[k] -= 0.02f * p->g[k];
        }
    }
    CHECK(isfinite(last) && last < first, "loss %g -> %g", first, last);
    round_bf16(tgt);
    round_bf16(dr);
    char td[1024], dd[1024];
    snprintf(td, sizeof td, "%s/target", dir);
    snprintf(dd, sizeof dd, "%s/drafter", dir);
    CHECK(tgt->export_model(tgt, td, &err) == 0 && dr->export_model(dr, dd, &err) == 0, "%s", err.msg);
    bs_train_task *back;
    CHECK(bs_train_drafter_load(&back, tgt, dd, NULL, &err) == 0, "%s", err.msg);
    CHECK(back->params.n == dr->params.n && !strcmp(back->kind, "dflash2"), "reloaded drafter differs");
    for (int i = 0; i < dr->params.n; i++)
        CHECK(memcmp(back->params.p[i].w, dr->params.p[i].w, sizeof(float) * dr->params.p[i].n) == 0, "%s reloaded differently", dr->params.p[i].name);
    back->free(back);
    // the trainer's logits of the block at anchor P against the engine's, same bf16 weights
    int P = 23, n = B - 1, V = tc.vocab_size, H = tc.hidden_size;
    const bs_drafter_config *c = bs_train_drafter_config_of(dr);
    int R = c->sel_rank;
    float *lt = malloc(sizeof(float) * n * V), *le = malloc(sizeof(float) * n * V), *hb = malloc(sizeof(float) * B * H), *z = malloc(sizeof(float) * n * R);
    int32_t a1 = P, k1 = 1;
    bs_loss_terms t;
    bs_drafter_inspect ins = { .draft_logits = lt };
    CHECK(bs_train_drafter_step(dr, &seq, &a1, &k1, 1, 0, 0, &t, &ins, &err) == 0, "%s", err.msg);
    bs_engine *e;
    CHECK(bs_engine_open(&e, td, "cpu-ref", &err) == 0, "%s", err.msg);
    bs_drafter_ctx dc;
    bs_drafter *d = tu_drafter_with_context(e, dd, NULL, &dc, ids, P, &err);
    CHECK(d, "%s", err.msg);
    CHECK(!strcmp(d->name, "dflash2") && bs_dflash_config(d)->sel_top_k == 6, "the engine did not open a DFlash 2 (%s)", d->name);
    bs_dflash_inspect di = { .logits = le, .block_hidden = hb, .sel_hidden = z };
    bs_draft g;
    CHECK(bs_dflash_forward_block(d, &dc, ids[P], n, NULL, NULL, &g, &di, &err) == 0 && g.n == n, "%s", err.msg);
    double mx = 0;
    for (int i = 0; i < n * V; i++) if (fabs(lt[i]) > mx) mx = fabs(lt[i]);
    double dl = fx_max_abs_diff(lt, le, (long)n * V);
    CHECK(dl <= 1e-4 * (1 + mx), "engine logits differ from the trainer's by %g (max |logit| %g)", dl, mx);
    const bs_param *pw = bs_param_find(&dr->params, "candidate_selector.hidden_projection.weight");
    for (int p = 0; p < n; p++)
        for (int q = 0; q < R; q++) {
            double s = dot_d(pw->w + (size_t)q * H, hb + (size_t)(p + 1) * H, H);
            CHECK(fabs(s - z[p * R + q]) <= 1e-4 * (1 + fabs(s)), "z[%d][%d] = %g, hidden_projection(h) = %g", p, q, z[p * R + q], s);
        }
    free(lt); free(le); free(hb); free(z);
    tu_drafter_free(d, &dc);
    bs_engine_close(e);
    dr->free(dr);
    tgt->free(tgt);
    tu_greedy_spec_equals_plain(failed_, "cpu", td, dd, NULL, 4, 11);
}

// `blockspec train-drafter --arch dflash2` on the CPU through the generic loop, on a corpus written here: the
// loss falls, the export is a DFlash2DraftModel with the options given, and it decodes losslessly.
TEST(train_dflash2_cli) {
    const char *dir = bs_test_tmpdir("train_d2_cli");
    CHECK(dir, "no temp dir");
    bs_qwen3_config tc;
    tiny_target_cfg(&tc, 96);
    bs_err err = {0};
    bs_train_task *tgt;
    CHECK(bs_train_target_new(&tgt, &tc, 40, &err) == 0, "%s", err.msg);
    tt_scale_weights(tgt, 25.0f);
    char td[1024], corpus[1100], cmd[4096], out[8192];
    snprintf(td, sizeof td, "%s/target", dir);
    CHECK(tgt->export_model(tgt, td, &err) == 0, "%s", err.msg);
    tgt->free(tgt);
    snprintf(corpus, sizeof corpus, "%s/c.bsc", dir);
    bs_corpus_writer *w;
    CHECK(bs_corpus_writer_open(&w, corpus, 96, 0, 0, &err) == 0, "%s", err.msg);
    for (int d = 0; d < 20; d++) {   // a learnable text: short repeating phrases
        int32_t doc[100];
        for (int i = 0; i < 100; i++) doc[i] = (int32_t)((d * 7 + (i % 6) * 11) % 95);
        CHECK(bs_corpus_writer_add(w, doc, NULL, 100, &err) == 0, "%s", err.msg);
    }
    CHECK(bs_corpus_writer_finish(w, &err) == 0, "%s", err.msg);
    snprintf(cmd, sizeof cmd, "%s train-drafter -m %s --arch dflash2 --layers 1 --block 4 --anchors 8 --selector-rank 8 --selector-top-k 5 "
             "--conv-group 8 --mask-id 95 --data %s --steps 30 --batch 2 --seq-len 48 --lr 3e-3 --no-plot --out %s/o 2>&1", bs_cli_path(), td, corpus, dir);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 0, "%s failed:\n%s", cmd, out);
    char path[1200];
    snprintf(path, sizeof path, "%s/o/train_log.csv", dir);
    FILE *f = fopen(path, "r");
    CHECK(f, "no %s", path);
    char line[512];
    double first = -1, last = -1, sel_first = -1, sel_last = -1;
    while (fgets(line, sizeof line, f)) {
        long step; char split[16]; double loss, ce, l1, conf;
        if (sscanf(line, "%ld,%15[^,],%lf,%lf,%lf,%lf", &step, split, &loss, &ce, &l1, &conf) != 6 || strcmp(split, "train")) continue;
        if (first < 0) { first = loss; sel_first = conf; }
        last = loss; sel_last = conf;
    }
    fclose(f);
    printf("  train-drafter --arch dflash2: loss %.3f -> %.3f, selector CE %.3f -> %.3f\n", first, last, sel_first, sel_last);
    CHECK(first > 0 && last < 0.8 * first && sel_last < sel_first, "loss %g -> %g, selector %g -> %g", first, last, sel_first, sel_last);
    snprintf(path, sizeof path, "%s/o", dir);
    bs_engine *e;
    CHECK(bs_engine_open(&e, td, "cpu", &err) == 0, "%s", err.msg);
    bs_drafter *d;
    CHECK(bs_drafter_open(&d, path, e, 256, &err) == 0, "%s", err.msg);
    const bs_drafter_config *c = bs_dflash_config(d);
    CHECK(!strcmp(d->name, "dflash2") && c->dflash2 && c->sel_rank == 8 && c->sel_top_k == 5 && c->conv_group == 8 && c->conv_taps == 2 && c->block_size == 4,
          "the engine read rank %d, top-k %d, group %d", c->sel_rank, c->sel_top_k, c->conv_group);
    d->free(d);
    bs_engine_close(e);
    tu_greedy_spec_equals_plain(failed_, "cpu", td, path, NULL, 3, 5);
}
