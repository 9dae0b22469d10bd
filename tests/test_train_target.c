// The target training task (src/train/train_target.c), Qwen3 and Llama-3.x: its fp32 forward against
// transformers' (fixtures: shared/fixtures/target, tests/ref/llama) and against the engine's on the same
// checkpoint (every hidden state), finite-difference gradients of the next-token CE, and its export loaded by
// the engine.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "engine/engine.h"
#include "fixture_util.h"
#include "harness.h"
#include "train/train_target.h"
#include "train_test_util.h"

// The training forward (frozen: no gradient buffers) of a target folder against its NAME.expect.safetensors:
// prefill logits and every hidden state within tol.
static void forward_vs_fixture(int *failed_, const char *dir, const char *file, double tol) {
    bs_err err = {0};
    bs_train_task *t;
    bs_checkpoint *x;
    CHECK(bs_train_target_load(&t, dir, 0, &err) == 0, "%s", err.msg);
    CHECK(bs_checkpoint_open(&x, file, &err) == 0, "%s", err.msg);
    const bs_qwen3_config *c = bs_train_target_config(t);
    int V = c->vocab_size, H = c->hidden_size, NT = c->n_layers + 1;
    long P;
    const int32_t *prompt = fx_tensor(x, "prompt_ids", "I32", -1, &P);
    const float *want_logits = fx_tensor(x, "prefill_logits", "F32", P * V, NULL);
    const float *want_hs = fx_tensor(x, "prefill_hidden_states", "F32", NT * P * H, NULL);
    CHECK(prompt && want_logits && want_hs, "fixture tensors missing");
    int taps[16];
    for (int i = 0; i < NT; i++) taps[i] = i;
    float *logits = malloc(sizeof(float) * P * V), *tap = malloc(sizeof(float) * P * NT * H), *fin = malloc(sizeof(float) * P * H);
    CHECK(bs_train_target_forward(t, prompt, (int)P, taps, NT, tap, fin, logits, &err) == 0, "%s", err.msg);
    double d = fx_max_abs_diff(logits, want_logits, P * V), worst = 0;
    CHECK(d < tol, "prefill logits differ from transformers' by %g", d);
    for (int k = 0; k < NT; k++)
        for (long r = 0; r < P; r++) {
            double e = fx_max_abs_diff(tap + ((size_t)r * NT + k) * H, want_hs + ((size_t)k * P + r) * H, H);
            CHECK(e < tol, "hidden_states[%d] row %ld differs by %g", k, r, e);
            if (e > worst) worst = e;
        }
    printf("  %s: logits within %.2g, hidden states within %.2g of transformers'\n", dir, d, worst);
    CHECK(fx_max_abs_diff(fin, tap + (size_t)(NT - 1) * H, H) == 0, "final_out is not hidden_states[L]");
    // a frozen target refuses to compute gradients
    bs_train_seq seq = { prompt, NULL, (int)P };
    bs_loss_terms terms;
    CHECK(t->loss_grad(t, &seq, 1, NULL, &terms, &err) != 0, "a frozen target accepted loss_grad");
    free(logits); free(tap); free(fin);
    bs_checkpoint_close(x);
    t->free(t);
}

TEST(train_target_forward_matches_fixture) {
    char dir[1024], file[1024];
    snprintf(dir, sizeof dir, "%s/target", bs_fixtures_dir());
    snprintf(file, sizeof file, "%s/target.expect.safetensors", bs_fixtures_dir());
    forward_vs_fixture(failed_, dir, file, 1e-4);
}

// transformers' LlamaForCausalLM vectors (tests/ref/llama: llama3 RoPE, no q/k norm, GQA / MQA, tied and
// untied, both config styles).
TEST(train_target_llama_forward_matches_transformers) {
    forward_vs_fixture(failed_, "tests/ref/llama/llama3", "tests/ref/llama/llama3.expect.safetensors", 1e-4);
    forward_vs_fixture(failed_, "tests/ref/llama/llama_tied", "tests/ref/llama/llama_tied.expect.safetensors", 1e-4);
}

// The training forward against the engine's on the same Llama checkpoint over 100 positions (past the
// fixtures' original_max_position_embeddings 64: every region of the llama3 rule turns): every hidden state
// (the drafter's taps) and the logits within 1e-4 of the largest magnitude, on cpu-ref and cpu.
static void llama_vs_engine(int *failed_, const char *dir, const char *dev) {
    bs_err err = {0};
    bs_train_task *t;
    CHECK(bs_train_target_load(&t, dir, 0, &err) == 0, "%s", err.msg);
    const bs_qwen3_config *c = bs_train_target_config(t);
    CHECK(c->arch == BS_ARCH_LLAMA && c->rope.type == BS_ROPE_LLAMA3, "%s is not a llama3-scaled Llama target", dir);
    for (int i = 0; i < t->params.n; i++) CHECK(!strstr(t->params.p[i].name, "_norm.weight") || !strstr(t->params.p[i].name, "self_attn"),
                                               "a Llama target with %s", t->params.p[i].name);
    enum { N = 100 };
    int V = c->vocab_size, H = c->hidden_size, NT = c->n_layers + 1, taps[16];
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 37 + 11) % V;
    for (int i = 0; i < NT; i++) taps[i] = i;
    size_t nh = (size_t)N * NT * H, nl = (size_t)N * V;
    float *tr_h = malloc(sizeof(float) * nh), *tr_l = malloc(sizeof(float) * nl), *en_h = malloc(sizeof(float) * nh), *en_l = malloc(sizeof(float) * nl);
    CHECK(bs_train_target_forward(t, ids, N, taps, NT, tr_h, NULL, tr_l, &err) == 0, "%s", err.msg);
    bs_engine *e;
    CHECK(bs_engine_open(&e, dir, dev, &err) == 0, "%s", err.msg);
    bs_kv_cache kv;
    CHECK(bs_kv_init(&kv, e->kv_pool, 0, &err) == 0, "%s", err.msg);
    float *dl = e->be->alloc(e->be, sizeof(float) * nl, &err), *dh = e->be->alloc(e->be, sizeof(float) * nh, &err);
    CHECK(dl && dh, "%s", err.msg);
    bs_fwd_out fo = { .logits = dl, .logits_all = 1, .taps = taps, .n_taps = NT, .tap_out = dh };
    CHECK(bs_qwen3_forward(&e->target, &kv, ids, N, &fo, &err) == 0, "%s", err.msg);
    e->be->download(e->be, en_l, dl, sizeof(float) * nl);
    e->be->download(e->be, en_h, dh, sizeof(float) * nh);
    double worst = 0;
    for (int k = 0; k < NT; k++) {
        double scale = 0, d = 0;
        for (int r = 0; r < N; r++)
            for (int j = 0; j < H; j++) {
                size_t at = ((size_t)r * NT + k) * H + j;
                scale = fmax(scale, fabs(en_h[at]));
                d = fmax(d, fabs(en_h[at] - tr_h[at]));
            }
        CHECK(d <= 1e-4 * fmax(scale, 1), "%s (%s): hidden_states[%d] differ by %g (max |h| %g)", dir, dev, k, d, scale);
        worst = fmax(worst, d / fmax(scale, 1));
    }
    double ls = 0;
    for (size_t i = 0; i < nl; i++) ls = fmax(ls, fabs(en_l[i]));
    double dlg = fx_max_abs_diff(tr_l, en_l, (long)nl);
    CHECK(dlg <= 1e-4 * fmax(ls, 1), "%s (%s): logits differ by %g (max |logit| %g)", dir, dev, dlg, ls);
    printf("  %s on %s: hidden states within %.2g (relative to the largest), logits within %.2g (max |logit| %.3g)\n", dir, dev, worst, dlg, ls);
    e->be->free(e->be, dl); e->be->free(e->be, dh);
    bs_kv_free(&kv);
    bs_engine_close(e);
    free(tr_h); free(tr_l); free(en_h); free(en_l);
    t->free(t);
}

TEST(train_target_llama_forward_matches_engine) {
    static const char *const dirs[] = { "tests/ref/llama/llama3", "tests/ref/llama/llama_tied" };
    for (int i = 0; i < 2; i++) {
        llama_vs_engine(failed_, dirs[i], "cpu-ref");
        llama_vs_engine(failed_, dirs[i], "cpu");
    }
}

static void tiny_cfg(bs_qwen3_config *c, int tied) {
    memset(c, 0, sizeof *c);
    c->vocab_size = 40; c->hidden_size = 16; c->n_layers = 2; c->n_heads = 4; c->n_kv_heads = 2; c->head_dim = 8;
    c->intermediate_size = 24; c->max_position = 128; c->rms_eps = 1e-6f; c->rope_theta = 10000.0f; c->tie_embeddings = tied;
    c->bos_id = -1;
}
// The same shape as a Llama-3.1 style target: no q/k norm, llama3 RoPE (original_max 4 at head_dim 8, so
// that the 11-token sequences below meet blended and slowed-down pairs).
static void tiny_llama_cfg(bs_qwen3_config *c, int tied) {
    tiny_cfg(c, tied);
    c->arch = BS_ARCH_LLAMA; c->rms_eps = 1e-5f;
    c->rope = (bs_rope_scaling){ BS_ROPE_LLAMA3, 8.0, 1.0, 4.0, 4 };
}

// Finite differences of the whole next-token CE over every tensor (tied and untied heads; a loss mask);
// Qwen3 and Llama (no q/k norm tensors at all, llama3 RoPE).
static void target_fd(int *failed_, int llama) {
    for (int tied = 0; tied < 2; tied++) {
        bs_qwen3_config c;
        if (llama) tiny_llama_cfg(&c, tied); else tiny_cfg(&c, tied);
        bs_err err = {0};
        bs_train_task *t;
        CHECK(bs_train_target_new(&t, &c, 3 + tied, &err) == 0, "%s", err.msg);
        tt_scale_weights(t, 15.0f);   // O(1) activations: gradients well above fp32 noise
        int32_t ids[11] = { 1, 5, 9, 2, 33, 7, 7, 0, 39, 12, 4 };
        uint8_t mask[11] = { 0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 1 };
        bs_train_seq seq = { ids, mask, 11 };
        char msg[400];
        CHECK(t->params.n == 1 + (llama ? 9 : 11) * c.n_layers + 1 + !tied, "%d tensors", t->params.n);
        CHECK(tt_fd_check_task(t, &seq, 0, 6, 2e-2, msg, sizeof msg) == 0, "%s (tied %d, %s)", msg, tied, llama ? "llama" : "qwen3");
        t->free(t);
    }
}
TEST(train_target_grad_fd) { target_fd(failed_, 0); }
TEST(train_target_llama_grad_fd) { target_fd(failed_, 1); }

// export_model writes what `blockspec generate -m` loads; its logits equal the training forward's on the
// same (bf16-rounded) weights, and the unrounded training weights' within bf16 rounding. Qwen3, and Llama
// (the export is a LlamaForCausalLM with its llama3 scaling, read back as one).
static void export_case(int *failed_, int llama) {
    bs_qwen3_config c;
    if (llama) tiny_llama_cfg(&c, 0); else tiny_cfg(&c, 0);
    c.vocab_size = 300; c.hidden_size = 64; c.intermediate_size = 96;
    bs_err err = {0};
    bs_train_task *t, *back;
    CHECK(bs_train_target_new(&t, &c, 11, &err) == 0, "%s", err.msg);
    tt_scale_weights(t, 20.0f);
    const char *dir = bs_test_tmpdir("train_target_export");
    CHECK(dir, "no temp dir");
    CHECK(t->export_model(t, dir, &err) == 0, "%s", err.msg);
    CHECK(bs_train_target_load(&back, dir, 0, &err) == 0, "%s", err.msg);
    const bs_qwen3_config *bc = bs_train_target_config(back);
    CHECK(bc->arch == c.arch && bc->rope.type == c.rope.type && bc->rope.original_max == c.rope.original_max &&
          back->params.n == t->params.n, "the export reads back as another model");
    int32_t ids[9] = { 5, 17, 299, 3, 100, 42, 42, 8, 250 };
    int n = 9, V = c.vocab_size;
    float *l_train = malloc(sizeof(float) * n * V), *l_back = malloc(sizeof(float) * n * V), *l_eng = malloc(sizeof(float) * n * V);
    CHECK(bs_train_target_forward(t, ids, n, NULL, 0, NULL, NULL, l_train, &err) == 0, "%s", err.msg);
    CHECK(bs_train_target_forward(back, ids, n, NULL, 0, NULL, NULL, l_back, &err) == 0, "%s", err.msg);
    bs_engine *e;
    CHECK(bs_engine_open(&e, dir, "cpu", &err) == 0, "%s", err.msg);
    bs_kv_cache kv;
    CHECK(bs_kv_init(&kv, e->kv_pool, 64, &err) == 0, "%s", err.msg);
    float *dl = e->be->alloc(e->be, sizeof(float) * n * V, &err);
    bs_fwd_out fo = { .logits = dl, .logits_all = 1 };
    CHECK(bs_qwen3_forward(&e->target, &kv, ids, n, &fo, &err) == 0, "%s", err.msg);
    e->be->download(e->be, l_eng, dl, sizeof(float) * n * V);
    double scale = 0;
    for (int i = 0; i < n * V; i++) if (fabs(l_train[i]) > scale) scale = fabs(l_train[i]);
    double d_same = fx_max_abs_diff(l_back, l_eng, (long)n * V), d_round = fx_max_abs_diff(l_train, l_eng, (long)n * V);
    CHECK(d_same < 1e-4 * (1 + scale), "engine vs training forward on the exported weights: %g", d_same);
    CHECK(d_round < 3e-2 * scale, "engine vs unrounded training weights: %g (logit scale %g)", d_round, scale);
    CHECK(d_round > 0, "bf16 export left the weights unrounded?");
    e->be->free(e->be, dl);
    bs_kv_free(&kv);
    bs_engine_close(e);
    free(l_train); free(l_back); free(l_eng);
    back->free(back);
    t->free(t);
}
TEST(train_target_export_loads_in_engine) { export_case(failed_, 0); }
TEST(train_target_llama_export_loads_in_engine) { export_case(failed_, 1); }
