// The GPU target trainer (src/train/cuda, train_cuda.h) on tiny Qwen3 and Llama-3.x models: gradients against central
// finite differences of its own loss (exact fp32 GEMMs), the loss falling over 20 AdamW steps, the export
// loading in the engine with the same logits, AdamW against a double-precision host AdamW, bad input.
// Without a GPU (or in a build without CUDA) every test here is SKIPPED with the reason.
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "harness.h"
#include "test_util_models.h"
#include "train/train_cuda.h"
#include "engine/engine.h"
#include "util/dtype.h"
#include "util/rng.h"
#include "io/safetensors.h"
#include <sys/stat.h>

// vocab 61, 2 layers, 4 query heads on 2 K/V heads (GQA), head_dim 8, MLP 48. llama: the same shape as a
// Llama-3.1 style model (no q/k norm, llama3 RoPE with original_max 8: every region of the rule within 16 tokens).
static char *tiny_cfg_arch(int tied, double init_range, int llama) {
    static char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"architectures\": [\"%s\"], \"vocab_size\": 61, \"hidden_size\": 32, \"num_hidden_layers\": 2,"
             " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 8, \"intermediate_size\": 48,"
             " \"max_position_embeddings\": 64, \"rms_norm_eps\": %s, \"rope_theta\": 10000, %s \"tie_word_embeddings\": %s,"
             " \"initializer_range\": %g}", llama ? "LlamaForCausalLM" : "Qwen3ForCausalLM", llama ? "1e-5" : "1e-6",
             llama ? "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
                     " \"original_max_position_embeddings\": 8}," : "",
             tied ? "true" : "false", init_range);
    return buf;
}
static char *tiny_cfg(int tied, double init_range) { return tiny_cfg_arch(tied, init_range, 0); }

static void rand_ids(int32_t *ids, int n, int V, bs_rng *r) { for (int i = 0; i < n; i++) ids[i] = (int32_t)(bs_rng_u64(r) % V); }

// Sum over sequences of each sequence's loss, forward only.
static int eval_sum(bs_train_task *t, const bs_train_seq *seqs, int n, double *out, bs_err *err) {
    *out = 0;
    for (int s = 0; s < n; s++) {
        bs_loss_terms tm;
        if (t->loss_eval(t, &seqs[s], NULL, &tm, err)) return -1;
        *out += tm.loss;
    }
    return 0;
}

static void fd_check(int *failed_, int tied, int llama) {
    bs_train_task *t; bs_err err = {0};
    CHECK(bs_train_target_cuda_new(&t, tiny_cfg_arch(tied, 0.3, llama), NULL, 7, 3, 16, &err) == 0, "%s", err.msg);
    CHECK(t->params.n == 1 + (llama ? 9 : 11) * 2 + 1 + !tied, "%d tensors", t->params.n);
    CHECK(bs_train_target_cuda_set_gemm(t, BS_TRAIN_GEMM_FP32, &err) == 0, "%s", err.msg);
    // three sequences of different lengths (padding), one with masked labels
    bs_rng r; bs_rng_seed(&r, 11);
    static int32_t a[11], b[7], c[9];
    static uint8_t mb[7] = { 1, 1, 0, 1, 0, 1, 1 };
    rand_ids(a, 11, 61, &r); rand_ids(b, 7, 61, &r); rand_ids(c, 9, 61, &r);
    bs_train_seq seqs[3] = { { a, NULL, 11 }, { b, mb, 7 }, { c, NULL, 9 } };
    bs_loss_terms tm;
    CHECK(bs_train_target_cuda_zero_grads(t, &err) == 0, "%s", err.msg);
    CHECK(t->loss_grad_batch(t, seqs, 3, 1.0f, NULL, &tm, &err) == 0, "%s", err.msg);
    CHECK(bs_train_target_cuda_grads_to_host(t, &err) == 0, "%s", err.msg);
    double base;
    CHECK(eval_sum(t, seqs, 3, &base, &err) == 0, "%s", err.msg);
    CHECK_NEAR(base / 3, tm.loss, 1e-5, "batched loss vs per-sequence evaluation");
    CHECK(tm.n_tokens == 10 + 4 + 8, "supervised rows %g", tm.n_tokens);
    double worst = 0; const char *worst_name = "";
    for (int i = 0; i < t->params.n; i++) {
        bs_param *p = &t->params.p[i];
        int64_t am = 0; double gmax = 0;
        for (int64_t j = 0; j < p->n; j++) if (fabs(p->g[j]) > gmax) { gmax = fabs(p->g[j]); am = j; }
        CHECK(gmax > 1e-2, "%s: largest gradient %g: the check would be vacuous", p->name, gmax);
        for (int k = 0; k < 4; k++) {
            int64_t j = k == 0 ? am : (int64_t)(bs_rng_u64(&r) % p->n);
            float w0 = p->w[j];
            double h = 5e-3, lp, lm;
            p->w[j] = w0 + (float)h;
            CHECK(t->sync_from_host(t, NULL, NULL, -1, &err) == 0 && eval_sum(t, seqs, 3, &lp, &err) == 0, "%s", err.msg);
            p->w[j] = w0 - (float)h;
            CHECK(t->sync_from_host(t, NULL, NULL, -1, &err) == 0 && eval_sum(t, seqs, 3, &lm, &err) == 0, "%s", err.msg);
            p->w[j] = w0;
            double fd = (lp - lm) / (2 * h), e = fabs(fd - p->g[j]) / gmax;
            if (e > worst) { worst = e; worst_name = p->name; }
            CHECK(fabs(fd - p->g[j]) < 2e-2 * gmax + 2e-4, "%s[%lld]: backward %.6g, finite difference %.6g (largest |g| %.3g)", p->name, (long long)j, p->g[j], fd, gmax);
        }
        CHECK(t->sync_from_host(t, NULL, NULL, -1, &err) == 0, "%s", err.msg);
    }
    printf("  %s%s: worst |fd - g| / max|g| = %.2e (%s)\n", llama ? "llama, " : "", tied ? "tied" : "untied", worst, worst_name);
    t->free(t);
}

TEST(train_cuda_grad_fd) { NEED_CUDA_DEVICE(); fd_check(failed_, 1, 0); if (*failed_) return; fd_check(failed_, 0, 0); }
// A Llama target: RoPE alone where Qwen3 normalises q and k (tc_norm.cuh, w == NULL), llama3 table.
TEST(train_cuda_llama_grad_fd) { NEED_CUDA_DEVICE(); fd_check(failed_, 1, 1); if (*failed_) return; fd_check(failed_, 0, 1); }

// 20 AdamW steps on a fixed batch (bf16 GEMMs, the default): the loss must fall well below its start.
TEST(train_cuda_loss_decreases) {
    NEED_CUDA_DEVICE();
    bs_train_task *t; bs_err err = {0};
    CHECK(bs_train_target_cuda_new(&t, tiny_cfg(1, 0.02), NULL, 3, 4, 32, &err) == 0, "%s", err.msg);
    static int32_t ids[4][32];
    bs_train_seq seqs[4];
    bs_rng r; bs_rng_seed(&r, 5);
    for (int b = 0; b < 4; b++) {
        for (int i = 0; i < 32; i++) ids[b][i] = i < 8 ? (int32_t)(bs_rng_u64(&r) % 61) : ids[b][i - 8];
        seqs[b] = (bs_train_seq){ ids[b], NULL, 32 };
    }
    bs_adamw_settings as = { 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f };
    double first = 0, last = 0;
    for (int s = 0; s < 20; s++) {
        bs_loss_terms tm; double gn;
        CHECK(t->loss_grad_batch(t, seqs, 4, 0.25f, NULL, &tm, &err) == 0, "%s", err.msg);
        CHECK(t->opt_step(t, &as, 1e-2f, &gn, &err) == 0, "%s", err.msg);
        CHECK(isfinite(tm.loss) && isfinite(gn) && gn > 0, "step %d: loss %g, grad norm %g", s, tm.loss, gn);
        if (s == 0) first = tm.loss;
        last = tm.loss;
    }
    printf("  loss %.4f -> %.4f over 20 steps\n", first, last);
    CHECK(fabs(first - log(61.0)) < 0.3, "initial loss %g, expected about ln 61 = %g", first, log(61.0));
    CHECK(last < 0.6 * first, "loss %g -> %g: did not fall by 40%%", first, last);
    t->free(t);
}

// Export -> the engine loads it (library and CLI) and its CPU forward gives the training forward's logits.
// The weights are first rounded to bf16 on the trainer's side, so both forwards use identical values and
// differ only by fp32 summation order.
static void export_case(int *failed_, int llama) {
    NEED_CUDA_DEVICE();
    for (int tied = 1; tied >= 0; tied--) {
        bs_train_task *t; bs_err err = {0};
        CHECK(bs_train_target_cuda_new(&t, tiny_cfg_arch(tied, 0.2, llama), NULL, 9, 2, 24, &err) == 0, "%s", err.msg);
        int32_t ids[20]; bs_rng r; bs_rng_seed(&r, 2); rand_ids(ids, 20, 61, &r);
        bs_train_seq seq = { ids, NULL, 20 };
        bs_adamw_settings as = { 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f };
        for (int s = 0; s < 3; s++) {   // a few steps, so the norm gains are no longer all 1
            bs_loss_terms tm; double gn;
            CHECK(t->loss_grad_batch(t, &seq, 1, 1.0f, NULL, &tm, &err) == 0 && t->opt_step(t, &as, 1e-2f, &gn, &err) == 0, "%s", err.msg);
        }
        CHECK(t->sync_to_host(t, NULL, NULL, &err) == 0, "%s", err.msg);
        for (int i = 0; i < t->params.n; i++)
            for (int64_t j = 0; j < t->params.p[i].n; j++) t->params.p[i].w[j] = bs_bf16_to_f32(bs_f32_to_bf16(t->params.p[i].w[j]));
        CHECK(t->sync_from_host(t, NULL, NULL, -1, &err) == 0, "%s", err.msg);
        CHECK(bs_train_target_cuda_set_gemm(t, BS_TRAIN_GEMM_FP32, &err) == 0, "%s", err.msg);
        float *lt = malloc(sizeof(float) * 20 * 61), *le = malloc(sizeof(float) * 20 * 61);
        CHECK(bs_train_target_cuda_logits(t, &seq, lt, &err) == 0, "%s", err.msg);
        const char *dir = bs_test_tmpdir("train_export");
        CHECK(dir);
        CHECK(t->export_model(t, dir, &err) == 0, "%s", err.msg);
        bs_engine *e;
        CHECK(bs_engine_open(&e, dir, "cpu", &err) == 0, "%s", err.msg);
        CHECK(e->cfg.tie_embeddings == tied && e->cfg.vocab_size == 61 && e->cfg.n_kv_heads == 2);
        CHECK(e->cfg.arch == (llama ? BS_ARCH_LLAMA : BS_ARCH_QWEN3) && e->cfg.rope.type == (llama ? BS_ROPE_LLAMA3 : BS_ROPE_DEFAULT),
              "the export reads back as another family or RoPE");
        bs_kv_cache kv;
        CHECK(bs_kv_init(&kv, e->kv_pool, 32, &err) == 0, "%s", err.msg);
        bs_fwd_out fo = { .logits = le, .logits_all = 1 };
        CHECK(bs_qwen3_forward(&e->target, &kv, ids, 20, &fo, &err) == 0, "%s", err.msg);
        double mx = 1, d = 0;
        for (int i = 0; i < 20 * 61; i++) { if (fabs(le[i]) > mx) mx = fabs(le[i]); double q = fabs((double)lt[i] - le[i]); if (!(q <= d)) d = q; }
        printf("  %s%s: max |train - engine| logits = %.2e (max |logit| %.2f)\n", llama ? "llama, " : "", tied ? "tied" : "untied", d, mx);
        CHECK(d / mx < 1e-4, "training and engine logits differ by %g (relative %g)", d, d / mx);
        bs_kv_free(&kv); bs_engine_close(e);
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1,2,3 -n 4 --print-ids > /dev/null 2>&1", bs_cli_path(), dir);
        CHECK(system(cmd) == 0, "blockspec generate did not load the export: %s", cmd);
        free(lt); free(le);
        t->free(t);
    }
}
TEST(train_cuda_export_loads_in_engine) { export_case(failed_, 0); }
TEST(train_cuda_llama_export_loads_in_engine) { export_case(failed_, 1); }

// opt_step against torch's AdamW + clip_grad_norm_ computed here in double, over every tensor (decay on
// matrices only), 3 steps with fresh random gradients and clipping active.
TEST(train_cuda_adamw_vs_host) {
    NEED_CUDA_DEVICE();
    bs_train_task *t; bs_err err = {0};
    CHECK(bs_train_target_cuda_new(&t, tiny_cfg(0, 0.1), NULL, 4, 1, 8, &err) == 0, "%s", err.msg);
    bs_param_set *ps = &t->params;
    int64_t tot = bs_param_count(ps, 0);
    double *w = malloc(sizeof(double) * tot), *m = calloc(tot, sizeof(double)), *v = calloc(tot, sizeof(double));
    int64_t o = 0;
    for (int i = 0; i < ps->n; i++) for (int64_t j = 0; j < ps->p[i].n; j++) w[o++] = ps->p[i].w[j];
    bs_adamw_settings as = { 0.9f, 0.99f, 1e-8f, 0.1f, 0.5f };
    float lrs[3] = { 1e-2f, 5e-3f, 2e-2f };
    bs_rng r; bs_rng_seed(&r, 77);
    for (int step = 1; step <= 3; step++) {
        double ss = 0;
        for (int i = 0; i < ps->n; i++)
            for (int64_t j = 0; j < ps->p[i].n; j++) { ps->p[i].g[j] = (float)(bs_rng_uniform(&r) * 2 - 1) * 0.1f; ss += (double)ps->p[i].g[j] * ps->p[i].g[j]; }
        CHECK(bs_train_target_cuda_grads_from_host(t, &err) == 0, "%s", err.msg);
        double gn, norm = sqrt(ss), coef = as.clip / (norm + 1e-6);
        if (coef > 1) coef = 1;
        CHECK(coef < 1, "clipping must be active for this check (norm %g)", norm);
        CHECK(t->opt_step(t, &as, lrs[step - 1], &gn, &err) == 0, "%s", err.msg);
        CHECK(fabs(gn - norm) < 1e-6 * norm, "grad norm %.9g, host %.9g", gn, norm);
        double b1 = as.beta1, b2 = as.beta2, lr = lrs[step - 1], bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
        o = 0;
        for (int i = 0; i < ps->n; i++)
            for (int64_t j = 0; j < ps->p[i].n; j++, o++) {
                double g = (double)ps->p[i].g[j] * coef;
                m[o] = b1 * m[o] + (1 - b1) * g; v[o] = b2 * v[o] + (1 - b2) * g * g;
                if (ps->p[i].decay) w[o] *= 1 - lr * as.weight_decay;
                w[o] -= lr / bc1 * m[o] / (sqrt(v[o]) / sqrt(bc2) + as.eps);
            }
    }
    CHECK(t->sync_to_host(t, NULL, NULL, &err) == 0, "%s", err.msg);
    CHECK(bs_train_target_cuda_grads_to_host(t, &err) == 0, "%s", err.msg);
    double worst = 0;
    o = 0;
    for (int i = 0; i < ps->n; i++)
        for (int64_t j = 0; j < ps->p[i].n; j++, o++) {
            double e = fabs(ps->p[i].w[j] - w[o]);
            if (e > worst) worst = e;
            CHECK(e < 2e-6, "%s[%lld]: device %.9g, host %.9g", ps->p[i].name, (long long)j, ps->p[i].w[j], w[o]);
            CHECK(ps->p[i].g[j] == 0, "%s: gradient not zeroed after opt_step", ps->p[i].name);
        }
    printf("  worst |device - host double| weight after 3 steps = %.2e\n", worst);
    free(w); free(m); free(v);
    t->free(t);
}

TEST(train_cuda_bad_input) {
    NEED_CUDA_DEVICE();
    bs_train_task *t; bs_err err = {0};
    CHECK(bs_train_target_cuda_new(&t, "{\"hidden_size\": 32}", NULL, 1, 1, 8, &err) != 0 && t == NULL);
    CHECK(strstr(err.msg, "vocab_size"), "%s", err.msg);
    CHECK(bs_train_target_cuda_new(&t, "/nonexistent/config.json", NULL, 1, 1, 8, &err) != 0);
    CHECK(bs_train_target_cuda_new(&t, tiny_cfg(1, 0.02), NULL, 1, 1, 1000, &err) != 0, "longer than max_position must fail");
    CHECK(bs_train_target_cuda_new(&t, tiny_cfg(1, 0.02), "/nonexistent", 1, 1, 8, &err) != 0);
    CHECK(bs_train_target_cuda_new(&t, tiny_cfg(1, 0.02), NULL, 1, 2, 8, &err) == 0, "%s", err.msg);
    int32_t ids[9] = { 1, 2, 3, 61, 4, 5, 6, 7, 8 };
    bs_train_seq s = { ids, NULL, 8 };
    bs_loss_terms tm;
    CHECK(t->loss_grad_batch(t, &s, 1, 1.0f, NULL, &tm, &err) != 0 && strstr(err.msg, "vocabulary"), "%s", err.msg);
    ids[3] = 3; s.n = 9;
    CHECK(t->loss_grad_batch(t, &s, 1, 1.0f, NULL, &tm, &err) != 0, "a sequence longer than the buffers must fail");
    s.n = 8;
    CHECK(t->loss_grad_batch(t, &s, 3, 1.0f, NULL, &tm, &err) != 0, "more sequences than the buffers must fail");
    bs_adamw_settings bad = { 1.5f, 0.95f, 1e-8f, 0.1f, 1.0f };
    double gn;
    CHECK(t->opt_step(t, &bad, 1e-3f, &gn, &err) != 0);
    CHECK(t->loss_grad_batch(t, &s, 1, 1.0f, NULL, &tm, &err) == 0, "%s", err.msg);   // still usable afterwards
    t->free(t);
}

// init_dir: a BF16 export and an F32 checkpoint of the same weights start a task with exactly those weights
// (config.json read from the folder) and the same loss.
TEST(train_cuda_init_from_checkpoint) {
    NEED_CUDA_DEVICE();
    bs_train_task *a, *b; bs_err err = {0};
    CHECK(bs_train_target_cuda_new(&a, tiny_cfg(0, 0.2), NULL, 21, 1, 16, &err) == 0, "%s", err.msg);
    int32_t ids[16]; bs_rng r; bs_rng_seed(&r, 8); rand_ids(ids, 16, 61, &r);
    bs_train_seq seq = { ids, NULL, 16 };
    bs_adamw_settings as = { 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f };
    bs_loss_terms ta, tb; double gn;
    CHECK(a->loss_grad_batch(a, &seq, 1, 1.0f, NULL, &ta, &err) == 0 && a->opt_step(a, &as, 1e-2f, &gn, &err) == 0, "%s", err.msg);
    const char *dir = bs_test_tmpdir("train_init");
    CHECK(dir);
    char d16[4096], d32[4096], path[8400];
    snprintf(d16, sizeof d16, "%s/bf16", dir); snprintf(d32, sizeof d32, "%s/f32", dir);
    CHECK(a->export_model(a, d16, &err) == 0, "%s", err.msg);          // also syncs a's weights to the host
    // the same weights in F32, beside a copy of the config
    CHECK(system(NULL) && mkdir(d32, 0755) == 0);
    snprintf(path, sizeof path, "cp %s/config.json %s/config.json", d16, d32);
    CHECK(system(path) == 0);
    bs_st_writer *w = bs_st_writer_new();
    for (int i = 0; i < a->params.n; i++)
        CHECK(bs_st_writer_add(w, a->params.p[i].name, "F32", a->params.p[i].n_dims, a->params.p[i].shape, a->params.p[i].w, &err) == 0, "%s", err.msg);
    snprintf(path, sizeof path, "%s/model.safetensors", d32);
    CHECK(bs_st_writer_write(w, path, &err) == 0, "%s", err.msg);
    bs_st_writer_free(w);
    for (int k = 1; k >= 0; k--) {
        if (k == 0) {   // compare the BF16 export with a's weights rounded the same way
            for (int i = 0; i < a->params.n; i++)
                for (int64_t j = 0; j < a->params.p[i].n; j++) a->params.p[i].w[j] = bs_bf16_to_f32(bs_f32_to_bf16(a->params.p[i].w[j]));
            CHECK(a->sync_from_host(a, NULL, NULL, -1, &err) == 0, "%s", err.msg);
        }
        CHECK(a->loss_eval(a, &seq, NULL, &ta, &err) == 0, "%s", err.msg);
        CHECK(bs_train_target_cuda_new(&b, NULL, k ? d32 : d16, 99, 1, 16, &err) == 0, "%s", err.msg);
        CHECK(b->params.n == a->params.n);
        for (int i = 0; i < a->params.n; i++)
            for (int64_t j = 0; j < a->params.p[i].n; j++)
                CHECK(b->params.p[i].w[j] == a->params.p[i].w[j], "%s %s[%lld]: %g, want %g", k ? "F32" : "BF16", a->params.p[i].name,
                      (long long)j, b->params.p[i].w[j], a->params.p[i].w[j]);
        CHECK(b->loss_eval(b, &seq, NULL, &tb, &err) == 0, "%s", err.msg);
        CHECK(tb.loss == ta.loss, "%s checkpoint: same weights, loss %.9g vs %.9g", k ? "F32" : "BF16", tb.loss, ta.loss);
        b->free(b);
    }
    a->free(a);
}
