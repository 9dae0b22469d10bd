// Llama-3.x targets (docs/targets.md): config.json in both transformers styles and the fields refused by
// name, the llama3 RoPE table against an independent double-precision formula, make-random and the engine
// on a random Llama target (cpu against cpu-ref; the scaling really reaches the forward), greedy
// speculative == plain with a random z-lab DFlash drafter, a hand-built Llama-3 style tokenizer.json, and
// transformers' reference vectors (tests/ref/llama, README there) on cpu-ref and cpu (CUDA: test_cuda.c).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "fixture_util.h"
#include "test_util_models.h"
#include "engine/engine.h"
#include "io/config.h"
#include "io/json.h"
#include "io/tokenizer.h"
#include "model/rope.h"
#include "spec/spec_loop.h"

#define LLAMA_REF "tests/ref/llama"

// Parses config text as config.json would be; 0 or -1 with err filled.
static int parse_text(bs_qwen3_config *c, const char *text, bs_err *err) {
    cJSON *root = bs_json_parse(text, strlen(text), "cfg.json", err);
    if (!root) return -1;
    int rc = bs_qwen3_config_parse(c, root, "cfg.json", err);
    cJSON_Delete(root);
    return rc;
}

// A Llama-3.1 style config.json as transformers 4 wrote it: rope_theta and rope_scaling at the top level,
// no head_dim (hidden / heads), eos a list. `scaling` is the rope_scaling value (JSON text).
static void t4_config(char *buf, size_t cap, int V, int H, int L, int heads, int kv, int inter, const char *scaling) {
    snprintf(buf, cap,
             "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"vocab_size\":%d,\"hidden_size\":%d,"
             "\"intermediate_size\":%d,\"num_hidden_layers\":%d,\"num_attention_heads\":%d,\"num_key_value_heads\":%d,"
             "\"rms_norm_eps\":1e-05,\"max_position_embeddings\":512,\"rope_theta\":500000.0,\"rope_scaling\":%s,"
             "\"tie_word_embeddings\":true,\"attention_bias\":false,\"mlp_bias\":false,\"hidden_act\":\"silu\","
             "\"pretraining_tp\":1,\"bos_token_id\":1,\"eos_token_id\":[2,3,%d],\"torch_dtype\":\"bfloat16\"}",
             V, H, inter, L, heads, kv, scaling, V - 2);
}

#define L3_SCALING "{\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,\"original_max_position_embeddings\":64,\"rope_type\":\"llama3\"}"

TEST(llama_config_both_styles) {
    bs_err err = {0};
    bs_qwen3_config c;
    char t4[2048];
    t4_config(t4, sizeof t4, 320, 96, 3, 3, 1, 256, L3_SCALING);
    CHECK(parse_text(&c, t4, &err) == 0, "%s", err.msg);
    CHECK(c.arch == BS_ARCH_LLAMA && !bs_qwen3_has_qk_norm(&c), "transformers-4 config: not read as Llama");
    CHECK(c.head_dim == 32, "head_dim defaults to hidden / heads = 32, got %d", c.head_dim);
    CHECK(c.rope.type == BS_ROPE_LLAMA3 && c.rope.factor == 8 && c.rope.low_freq_factor == 1 && c.rope.high_freq_factor == 4 &&
          c.rope.original_max == 64, "rope_scaling not read");
    CHECK(c.rope_theta == 500000.0f && fabsf(c.rms_eps - 1e-5f) < 1e-12f && c.tie_embeddings == 1, "theta/eps/tie");
    CHECK(c.n_eos == 3 && c.eos_ids[0] == 2 && c.eos_ids[1] == 3 && c.eos_ids[2] == 318, "eos list: %d ids", c.n_eos);
    // transformers 5: rope_parameters holds rope_theta and the scaling; head_dim given
    const char *t5 = "{\"architectures\":[\"LlamaForCausalLM\"],\"vocab_size\":384,\"hidden_size\":64,\"intermediate_size\":192,"
                     "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":16,\"rms_norm_eps\":1e-5,"
                     "\"rope_parameters\":{\"rope_type\":\"llama3\",\"rope_theta\":10000.0,\"factor\":8.0,\"low_freq_factor\":1.0,"
                     "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":64},\"tie_word_embeddings\":false,\"eos_token_id\":2}";
    CHECK(parse_text(&c, t5, &err) == 0, "%s", err.msg);
    CHECK(c.arch == BS_ARCH_LLAMA && c.rope.type == BS_ROPE_LLAMA3 && c.rope_theta == 10000.0f && c.head_dim == 16 && !c.tie_embeddings,
          "transformers-5 config not read");
    // Llama 3.0: no scaling (rope_scaling null) is default RoPE; model_type alone names the family too
    t4_config(t4, sizeof t4, 320, 96, 3, 3, 1, 256, "null");
    CHECK(parse_text(&c, t4, &err) == 0 && c.rope.type == BS_ROPE_DEFAULT, "%s", err.msg);
    CHECK(parse_text(&c, "{\"model_type\":\"llama\",\"vocab_size\":8,\"hidden_size\":8,\"intermediate_size\":8,\"num_hidden_layers\":1,"
                         "\"num_attention_heads\":2}", &err) == 0 && c.arch == BS_ARCH_LLAMA, "model_type llama: %s", err.msg);
    // a Qwen3 config stays Qwen3, and the written config reads back as what was written
    CHECK(parse_text(&c, "{\"architectures\":[\"Qwen3ForCausalLM\"],\"vocab_size\":8,\"hidden_size\":8,\"intermediate_size\":8,"
                         "\"num_hidden_layers\":1,\"num_attention_heads\":2}", &err) == 0 && c.arch == BS_ARCH_QWEN3, "%s", err.msg);
    t4_config(t4, sizeof t4, 320, 96, 3, 3, 1, 256, L3_SCALING);
    bs_qwen3_config a, b;
    CHECK(parse_text(&a, t4, &err) == 0, "%s", err.msg);
    cJSON *j = bs_qwen3_config_to_json(&a);
    char *txt = cJSON_Print(j);
    CHECK(parse_text(&b, txt, &err) == 0, "written config: %s", err.msg);
    CHECK(!memcmp(&a.rope, &b.rope, sizeof a.rope) && b.arch == BS_ARCH_LLAMA && b.rope_theta == a.rope_theta && b.head_dim == a.head_dim,
          "config written by bs_qwen3_config_to_json reads back differently");
    free(txt); cJSON_Delete(j);
}

// bench/configs/llama-3.1-8b.json (for `make-random` + `bench` at the real shape) reads as Llama-3.1-8B.
TEST(llama_bench_config_reads_as_llama31_8b) {
    bs_err err = {0};
    cJSON *root = bs_json_load("bench/configs/llama-3.1-8b.json", &err);
    CHECK(root, "%s", err.msg);
    bs_qwen3_config c;
    CHECK(bs_qwen3_config_parse(&c, root, "llama-3.1-8b.json", &err) == 0, "%s", err.msg);
    cJSON_Delete(root);
    CHECK(c.arch == BS_ARCH_LLAMA && c.hidden_size == 4096 && c.n_layers == 32 && c.n_heads == 32 && c.n_kv_heads == 8 &&
          c.head_dim == 128 && c.intermediate_size == 14336 && c.vocab_size == 128256 && c.max_position == 131072 && !c.tie_embeddings,
          "shape");
    CHECK(c.rope_theta == 500000.0f && c.rope.type == BS_ROPE_LLAMA3 && c.rope.factor == 8 && c.rope.low_freq_factor == 1 &&
          c.rope.high_freq_factor == 4 && c.rope.original_max == 8192 && c.n_eos == 3, "RoPE / eos");
}

// What blockspec does not compute is refused, with the file and the field named.
TEST(llama_config_refusals_name_the_field) {
    static const struct { const char *scaling, *extra, *want; } cases[] = {
        { "{\"rope_type\":\"yarn\",\"factor\":4.0}", "", "rope_scaling.rope_type" },
        { "{\"type\":\"dynamic\",\"factor\":2.0}", "", "rope_scaling.type" },
        { "{\"rope_type\":\"llama3\",\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,\"original_max_position_embeddings\":64}", "",
          "rope_scaling.factor" },
        { "{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":4.0,\"high_freq_factor\":4.0,\"original_max_position_embeddings\":64}", "",
          "rope_scaling.high_freq_factor" },
        { "{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,\"original_max_position_embeddings\":6.5}", "",
          "rope_scaling.original_max_position_embeddings" },
        { "null", ",\"attention_bias\":true", "attention_bias" },
        { "null", ",\"mlp_bias\":true", "mlp_bias" },
        { "null", ",\"hidden_act\":\"gelu\"", "hidden_act" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char t4[2048];
        t4_config(t4, sizeof t4, 320, 96, 3, 3, 1, 256, cases[i].scaling);
        // a later duplicate key wins (as in Python's json), which appends the case's field
        if (cases[i].extra[0]) snprintf(t4 + strlen(t4) - 1, sizeof t4 - strlen(t4) + 1, "%s}", cases[i].extra);
        bs_err err = {0};
        bs_qwen3_config c;
        CHECK(parse_text(&c, t4, &err) != 0, "case %zu (%s): accepted", i, cases[i].want);
        CHECK(strstr(err.msg, "cfg.json") && strstr(err.msg, cases[i].want), "case %zu: message does not name cfg.json and %s: %s", i,
              cases[i].want, err.msg);
    }
    // transformers 5 style: the object is named rope_parameters
    bs_err err = {0};
    bs_qwen3_config c;
    CHECK(parse_text(&c, "{\"architectures\":[\"LlamaForCausalLM\"],\"vocab_size\":8,\"hidden_size\":8,\"intermediate_size\":8,"
                         "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"rope_parameters\":{\"rope_type\":\"longrope\",\"rope_theta\":1e4}}",
                     &err) != 0 && strstr(err.msg, "rope_parameters.rope_type") && strstr(err.msg, "longrope"), "%s", err.msg);
    // a target architecture blockspec does not run
    const char *dir = bs_test_tmpdir("llama_arch");
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(tu_write_text(path, "{\"architectures\":[\"MistralForCausalLM\"],\"vocab_size\":8,\"hidden_size\":8,\"intermediate_size\":8,"
                              "\"num_hidden_layers\":1,\"num_attention_heads\":2}") == 0);
    CHECK(bs_qwen3_config_load(&c, dir, &err) != 0 && strstr(err.msg, "MistralForCausalLM") && strstr(err.msg, "LlamaForCausalLM"), "%s", err.msg);
}

// The llama3 table against the rule computed here independently, in double: wavelength 2 pi / f above
// original / low -> f / factor; below original / high -> f; between -> (1 - s) f / factor + s f with
// s = (original / wavelength - low) / (high - low). The two outer regions are exact in fp32 (f / 8 is an
// exponent shift), the blend agrees to fp32 rounding.
static void check_llama3_table(int *failed_, float theta, int hd, double factor, double low, double high, int orig, int want_mid) {
    bs_rope_scaling s = { BS_ROPE_LLAMA3, factor, low, high, orig };
    float got[256];
    bs_rope_inv_freqs(theta, &s, hd, got);
    int n_low = 0, n_mid = 0, n_high = 0;
    for (int i = 0; i < hd / 2; i++) {
        float f = bs_rope_inv_freq(theta, i, hd);   // transformers' default fp32 frequency
        double wl = 2 * M_PI / f, want;
        if (wl < orig / high) { want = f; n_high++; }
        else if (wl > orig / low) { want = f / factor; n_low++; }
        else {
            double sm = (orig / wl - low) / (high - low);
            want = (1 - sm) * f / factor + sm * f;
            n_mid++;
        }
        double tol = (wl < orig / high || wl > orig / low) ? 0 : 4e-7 * want;
        CHECK(fabs(got[i] - want) <= tol, "theta %g hd %d: inv_freq[%d] = %.9g, want %.9g", theta, hd, i, got[i], want);
    }
    CHECK(n_mid == want_mid && n_low > 0 && n_high > 0, "theta %g hd %d: %d kept, %d blended, %d slowed (want %d blended)", theta, hd, n_high,
          n_mid, n_low, want_mid);
}

TEST(llama3_rope_table_by_hand) {
    // Llama 3.1 (theta 5e5, head 128, factor 8, 1 / 4, 8192): wavelengths 2048..8192 are pairs 29..34
    // (2 pi 5e5^(i/64) in [2048, 8192] <=> i in [28.2, 35.0])
    check_llama3_table(failed_, 500000.0f, 128, 8, 1, 4, 8192, 6);
    // the fixtures' shape (theta 1e4, head 16, original 64): pairs 1 and 2 blended
    check_llama3_table(failed_, 10000.0f, 16, 8, 1, 4, 64, 2);
    // two entries by hand: pair 0 is kept (1.0), the last pair of Llama 3.1 is 5e5^(-63/64) / 8
    bs_rope_scaling s = { BS_ROPE_LLAMA3, 8, 1, 4, 8192 };
    float t[64];
    bs_rope_inv_freqs(500000.0f, &s, 128, t);
    CHECK(t[0] == 1.0f, "inv_freq[0] = %.9g", t[0]);
    CHECK(fabs(t[63] - pow(500000.0, -63.0 / 64) / 8) < 1e-6 * t[63], "inv_freq[63] = %.9g, want %.9g", t[63], pow(500000.0, -63.0 / 64) / 8);
    // pair 31 by hand: f = 5e5^(-31/64) = 1 / 576.03, wavelength 2 pi 576.03 = 3619.25, s = (8192 / 3619.25 - 1) / 3
    // = 0.42115, f' = f ((1 - s) / 8 + s) = 0.49351 f
    double f31 = pow(500000.0, -31.0 / 64), w31 = 2 * M_PI / f31, s31 = (8192 / w31 - 1) / 3;
    CHECK(fabs(w31 - 3619.25) < 0.01 && fabs(s31 - 0.42115) < 1e-5, "hand values of pair 31: wavelength %g, s %g", w31, s31);
    CHECK(fabs(t[31] / f31 - 0.49351) < 1e-5, "inv_freq[31] / f = %.6f, want 0.49351", t[31] / f31);
    // default RoPE: the table is bs_rope_inv_freq itself
    bs_rope_inv_freqs(500000.0f, NULL, 128, t);
    for (int i = 0; i < 64; i++) CHECK(t[i] == bs_rope_inv_freq(500000.0f, i, 128), "default table entry %d", i);
}

// make-random writes a Llama target from a transformers-4 config (no q/k norm tensors); the engine reads it
// on cpu and cpu-ref alike, and its llama3 scaling changes the logits (the table reaches the forward).
static const char *make_llama(const char *tag, int V, int H, int L, int heads, int kv, int inter, const char *scaling, bs_err *err) {
    const char *dir = bs_test_tmpdir(tag);
    char cfg[2048], path[1024], cmd[4096];
    if (!dir) return NULL;
    t4_config(cfg, sizeof cfg, V, H, L, heads, kv, inter, scaling);
    snprintf(path, sizeof path, "%s.json", dir);
    if (tu_write_text(path, cfg)) { bs_fail(err, "cannot write %s", path); return NULL; }
    snprintf(cmd, sizeof cmd, "%s make-random -c %s --out %s --seed 3 >/dev/null", bs_cli_path(), path, dir);
    if (system(cmd)) { bs_fail(err, "%s failed", cmd); return NULL; }
    return dir;
}

// Logits of every row of ids on a device.
static float *forward_logits(const char *dir, const char *dev, const int32_t *ids, int n, int *V, bs_err *err) {
    bs_engine *e;
    if (bs_engine_open(&e, dir, dev, err)) return NULL;
    *V = e->cfg.vocab_size;
    bs_kv_cache kv;
    float *out = malloc(sizeof(float) * n * *V);
    bs_fwd_out fo = { .logits = out, .logits_all = 1 };
    int rc = bs_kv_init(&kv, e->kv_pool, 0, err) || bs_qwen3_forward(&e->target, &kv, ids, n, &fo, err);
    bs_kv_free(&kv);
    bs_engine_close(e);
    if (rc) { free(out); return NULL; }
    return out;
}

TEST(llama_random_target_cpu_vs_reference) {
    bs_err err = {0};
    const char *dir = make_llama("llama_rand", 300, 96, 3, 3, 1, 160, L3_SCALING, &err);
    CHECK(dir, "%s", err.msg);
    bs_checkpoint *ck;
    char st[1024];
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    CHECK(bs_checkpoint_open(&ck, st, &err) == 0, "%s", err.msg);
    CHECK(!bs_checkpoint_find(ck, "model.layers.0.self_attn.q_norm.weight") && !bs_checkpoint_find(ck, "lm_head.weight") &&
          bs_checkpoint_find(ck, "model.layers.2.self_attn.k_proj.weight"), "make-random wrote a Qwen3-shaped or untied checkpoint");
    bs_checkpoint_close(ck);
    enum { N = 100 };   // past original_max (64): every region of the table turns
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 37 + 11) % 300;
    int V;
    float *a = forward_logits(dir, "cpu-ref", ids, N, &V, &err), *b = a ? forward_logits(dir, "cpu", ids, N, &V, &err) : NULL;
    CHECK(a && b, "%s", err.msg);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < (size_t)N * V; i++) { worst = fmax(worst, fabs(a[i] - b[i])); scale = fmax(scale, fabs(a[i])); }
    CHECK(worst <= 1e-4 * scale + 1e-5, "cpu vs cpu-ref logits differ by %g (max |logit| %g)", worst, scale);
    // The same weights without the scaling: identical at position 0 (no rotation), different later.
    char nod[1024], cmd[4096];
    snprintf(nod, sizeof nod, "%s_default", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s/model.safetensors %s/", nod, dir, nod);
    CHECK(system(cmd) == 0);
    char cfg[2048], path[1100];
    t4_config(cfg, sizeof cfg, 300, 96, 3, 3, 1, 160, "null");
    snprintf(path, sizeof path, "%s/config.json", nod);
    CHECK(tu_write_text(path, cfg) == 0);
    float *c = forward_logits(nod, "cpu-ref", ids, N, &V, &err);
    CHECK(c, "%s", err.msg);
    CHECK(!memcmp(a, c, sizeof(float) * V), "row 0 must not depend on the RoPE scaling");
    double d = 0;
    for (size_t i = (size_t)(N - 1) * V; i < (size_t)N * V; i++) d = fmax(d, fabs(a[i] - c[i]));
    CHECK(d > 1e-3, "the llama3 scaling does not change the last row's logits (%g): is the table used?", d);
    free(a); free(b); free(c);
    snprintf(cmd, sizeof cmd, "rm -rf %s", nod);
    if (system(cmd)) {}
}

// ---- an independent Llama forward, in double, straight from the checkpoint (no engine code) ----------------
// Until transformers' vectors are in tests/ref/llama, this is what holds the engine's Llama layer (no q/k
// norm, llama3 frequencies from the rule in double, GQA, tied head) to the architecture as written down.

typedef struct { const bs_checkpoint *ck; bs_err *err; int bad; } ref_w;

static double w_at(ref_w *w, const char *name, int64_t rows, int64_t cols, int64_t r, int64_t c) {
    bs_mat m;
    if (bs_checkpoint_mat(w->ck, name, rows, cols, &m, w->err)) { w->bad = 1; return 0; }
    return bs_load_elem(m.data, m.dtype, (size_t)(r * cols + c));
}

// y[rows] = W[rows][cols] x
static void ref_matvec(ref_w *w, const char *name, int64_t rows, int64_t cols, const double *x, double *y) {
    bs_mat m;
    if (bs_checkpoint_mat(w->ck, name, rows, cols, &m, w->err)) { w->bad = 1; return; }
    for (int64_t r = 0; r < rows; r++) {
        double s = 0;
        for (int64_t c = 0; c < cols; c++) s += bs_load_elem(m.data, m.dtype, (size_t)(r * cols + c)) * x[c];
        y[r] = s;
    }
}

static void ref_rms(ref_w *w, const char *name, const double *x, double *y, int H, double eps) {
    double ss = 0;
    for (int i = 0; i < H; i++) ss += x[i] * x[i];
    double inv = 1 / sqrt(ss / H + eps);
    for (int i = 0; i < H; i++) y[i] = x[i] * inv * w_at(w, name, 0, H, 0, i);
}

static void ref_rope(double *v, int hd, int pos, double theta, double factor, double low, double high, double orig) {
    for (int i = 0; i < hd / 2; i++) {
        double f = pow(theta, -2.0 * i / hd), wl = 2 * M_PI / f;
        if (wl > orig / low) f /= factor;
        else if (wl >= orig / high) { double s = (orig / wl - low) / (high - low); f = (1 - s) * f / factor + s * f; }
        double a = pos * f, x0 = v[i], x1 = v[i + hd / 2];
        v[i] = x0 * cos(a) - x1 * sin(a);
        v[i + hd / 2] = x1 * cos(a) + x0 * sin(a);
    }
}

// Logits of the last row of ids for a tied Llama target of this shape with llama3 scaling.
static int ref_llama_last_logits(const bs_checkpoint *ck, const bs_qwen3_config *c, const int32_t *ids, int n, double *logits, bs_err *err) {
    const int H = c->hidden_size, nH = c->n_heads, nKV = c->n_kv_heads, hd = c->head_dim, I = c->intermediate_size, V = c->vocab_size;
    const int qd = nH * hd, kd = nKV * hd;
    ref_w w = { ck, err, 0 };
    double *x = calloc((size_t)n * H, 8), *xn = malloc(8 * H), *q = malloc(8 * (size_t)n * qd), *k = malloc(8 * (size_t)n * kd);
    double *v = malloc(8 * (size_t)n * kd), *att = malloc(8 * qd), *o = malloc(8 * H), *g = malloc(8 * I), *u = malloc(8 * I), *sc = malloc(8 * n);
    char name[256];
    for (int t = 0; t < n; t++)
        for (int i = 0; i < H; i++) x[(size_t)t * H + i] = w_at(&w, "model.embed_tokens.weight", V, H, ids[t], i);
    for (int l = 0; l < c->n_layers && !w.bad; l++) {
#define LW(s) (snprintf(name, sizeof name, "model.layers.%d.%s", l, s), name)
        for (int t = 0; t < n; t++) {
            ref_rms(&w, LW("input_layernorm.weight"), x + (size_t)t * H, xn, H, c->rms_eps);
            ref_matvec(&w, LW("self_attn.q_proj.weight"), qd, H, xn, q + (size_t)t * qd);
            ref_matvec(&w, LW("self_attn.k_proj.weight"), kd, H, xn, k + (size_t)t * kd);
            ref_matvec(&w, LW("self_attn.v_proj.weight"), kd, H, xn, v + (size_t)t * kd);
            for (int h = 0; h < nH; h++)
                ref_rope(q + (size_t)t * qd + h * hd, hd, t, c->rope_theta, c->rope.factor, c->rope.low_freq_factor, c->rope.high_freq_factor,
                         c->rope.original_max);
            for (int h = 0; h < nKV; h++)
                ref_rope(k + (size_t)t * kd + h * hd, hd, t, c->rope_theta, c->rope.factor, c->rope.low_freq_factor, c->rope.high_freq_factor,
                         c->rope.original_max);
        }
        for (int t = 0; t < n; t++) {
            for (int h = 0; h < nH; h++) {   // causal softmax attention, query head h reads kv head h / (nH / nKV)
                const double *qh = q + (size_t)t * qd + h * hd;
                int kh = h / (nH / nKV);
                double mx = -1e300, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double s = 0;
                    for (int i = 0; i < hd; i++) s += qh[i] * k[(size_t)j * kd + kh * hd + i];
                    sc[j] = s / sqrt(hd);
                    if (sc[j] > mx) mx = sc[j];
                }
                for (int j = 0; j <= t; j++) { sc[j] = exp(sc[j] - mx); sum += sc[j]; }
                for (int i = 0; i < hd; i++) {
                    double a = 0;
                    for (int j = 0; j <= t; j++) a += sc[j] * v[(size_t)j * kd + kh * hd + i];
                    att[h * hd + i] = a / sum;
                }
            }
            double *xt = x + (size_t)t * H;
            ref_matvec(&w, LW("self_attn.o_proj.weight"), H, qd, att, o);
            for (int i = 0; i < H; i++) xt[i] += o[i];
            ref_rms(&w, LW("post_attention_layernorm.weight"), xt, xn, H, c->rms_eps);
            ref_matvec(&w, LW("mlp.gate_proj.weight"), I, H, xn, g);
            ref_matvec(&w, LW("mlp.up_proj.weight"), I, H, xn, u);
            for (int i = 0; i < I; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
            ref_matvec(&w, LW("mlp.down_proj.weight"), H, I, g, o);
            for (int i = 0; i < H; i++) xt[i] += o[i];
        }
#undef LW
    }
    if (!w.bad) {
        ref_rms(&w, "model.norm.weight", x + (size_t)(n - 1) * H, xn, H, c->rms_eps);
        ref_matvec(&w, "model.embed_tokens.weight", V, H, xn, logits);   // tied: the embedding is the head
    }
    free(x); free(xn); free(q); free(k); free(v); free(att); free(o); free(g); free(u); free(sc);
    return w.bad ? -1 : 0;
}

TEST(llama_random_target_vs_independent_forward) {
    bs_err err = {0};
    const char *dir = make_llama("llama_indep", 300, 96, 3, 3, 1, 160, L3_SCALING, &err);
    CHECK(dir, "%s", err.msg);
    enum { N = 90 };   // past original_max (64)
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 53 + 7) % 300;
    int V;
    float *got = forward_logits(dir, "cpu-ref", ids, N, &V, &err);
    CHECK(got, "%s", err.msg);
    bs_qwen3_config c;
    bs_checkpoint *ck;
    CHECK(bs_qwen3_config_load(&c, dir, &err) == 0 && bs_checkpoint_open(&ck, dir, &err) == 0, "%s", err.msg);
    CHECK(c.tie_embeddings && c.rope.type == BS_ROPE_LLAMA3, "the test model should be tied with llama3 scaling");
    double *want = malloc(sizeof(double) * V);
    CHECK(ref_llama_last_logits(ck, &c, ids, N, want, &err) == 0, "%s", err.msg);
    double worst = 0, scale = 0;
    const float *last = got + (size_t)(N - 1) * V;
    for (int i = 0; i < V; i++) { worst = fmax(worst, fabs(last[i] - want[i])); scale = fmax(scale, fabs(want[i])); }
    printf("  last-row logits: max |engine - independent| = %.3g (max |logit| %.3g)\n", worst, scale);
    CHECK(worst < 1e-3 * (1 + scale), "engine and the independent Llama forward differ by %g", worst);
    free(want); free(got);
    bs_checkpoint_close(ck);
}

// Greedy speculative == plain on a random Llama target with a random z-lab DFlash drafter (its backbone is
// Qwen3 layers whatever the target; here with the target's llama3 scaling, as z-lab's Llama drafters
// carry it), over random prompts; a tiny vocabulary so that some random drafts are accepted.
static void llama_spec(int *failed_, const char *dev) {
    bs_err err = {0};
    const int V = 6, H = 64, L = 3;
    const char *t = make_llama("llama_spec", V, H, L, 4, 2, 128, L3_SCALING, &err);
    CHECK(t, "%s", err.msg);
    char d[1024], cfg[2048];
    snprintf(d, sizeof d, "%s/zlab", t);
    snprintf(cfg, sizeof cfg,
             "{\"architectures\":[\"DFlashDraftModel\"],\"model_type\":\"qwen3\",\"hidden_size\":%d,\"num_attention_heads\":4,"
             "\"num_key_value_heads\":2,\"head_dim\":16,\"intermediate_size\":128,\"num_hidden_layers\":2,\"vocab_size\":%d,"
             "\"rms_norm_eps\":1e-5,\"rope_theta\":500000.0,\"rope_scaling\":" L3_SCALING ",\"block_size\":5,\"num_target_layers\":%d,"
             "\"dflash_config\":{\"mask_token_id\":%d,\"target_layer_ids\":[0,%d]}}", H, V, L, V - 1, L - 1);
    CHECK(tu_make_random_from_config(d, cfg, 9) == 0, "make-random of %s failed", d);
    tu_greedy_spec_equals_plain(failed_, dev, t, d, NULL, 16, 41);
    if (*failed_) return;
    long accepted, drafted;
    CHECK(tu_spec_acceptance(dev, t, d, V, 7, 96, &accepted, &drafted, &err) == 0, "%s", err.msg);
    printf("  random drafter: %ld of %ld drafts accepted\n", accepted, drafted);
    CHECK(accepted > 0, "no draft was ever accepted: the losslessness check only saw rejections");
}

TEST(llama_greedy_spec_equals_plain_zlab_dflash) { llama_spec(failed_, "cpu"); }
TEST(llama_greedy_spec_equals_plain_zlab_dflash_cuda) { NEED_CUDA_DEVICE(); llama_spec(failed_, "cuda"); }

// A Llama-3 style tokenizer.json built by hand: byte-level BPE behind the Llama-3 Split regex (digits in
// threes), ignore_merges (a word in the vocabulary is taken whole), a BOS from TemplateProcessing.
TEST(llama_tokenizer_hand_built) {
    const char *tj =
        "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":20,\"content\":\"<|begin_of_text|>\",\"single_word\":false,\"lstrip\":false,"
        "\"rstrip\":false,\"normalized\":false,\"special\":true},{\"id\":21,\"content\":\"<|end_of_text|>\",\"single_word\":false,"
        "\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}],\"normalizer\":null,"
        "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
        "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
        "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]},"
        "\"post_processor\":{\"type\":\"Sequence\",\"processors\":[{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":false,"
        "\"use_regex\":true},{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<|begin_of_text|>\",\"type_id\":0}},"
        "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{\"<|begin_of_text|>\":{\"id\":\"<|begin_of_text|>\","
        "\"ids\":[20],\"tokens\":[\"<|begin_of_text|>\"]}}}]},\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,"
        "\"trim_offsets\":true,\"use_regex\":true},"
        "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,"
        "\"fuse_unk\":false,\"byte_fallback\":false,\"ignore_merges\":true,\"vocab\":{\"H\":0,\"e\":1,\"l\":2,\"o\":3,\"\\u0120\":4,\"w\":5,"
        "\"r\":6,\"d\":7,\"1\":8,\"2\":9,\"3\":10,\"4\":11,\"5\":12,\"He\":13,\"ll\":14,\"Hell\":15,\"Hello\":16,\"12\":17,\"123\":18,"
        "\"\\u0120world\":19},\"merges\":[[\"H\",\"e\"],[\"l\",\"l\"],[\"He\",\"ll\"],[\"Hell\",\"o\"],[\"1\",\"2\"],[\"12\",\"3\"]]}}";
    bs_tokenizer *tok; bs_err err = {0};
    CHECK(bs_tokenizer_load_json(&tok, tj, strlen(tj), NULL, &err) == 0, "%s", err.msg);
    // "Hello" by merges; " world" whole (ignore_merges: no merge builds it); "12345" split 123|45 by the regex
    const char *text = "Hello world12345";
    int32_t *ids; size_t n;
    CHECK(bs_tokenizer_encode_ex(tok, text, strlen(text), 1, &ids, &n, &err) == 0, "%s", err.msg);
    const int32_t want[] = { 20, 16, 19, 18, 11, 12 };   // BOS, Hello, Ġworld, 123, 4, 5
    CHECK(n == 6 && !memcmp(ids, want, sizeof want), "got %zu ids: %d %d %d %d %d %d", n, n > 0 ? ids[0] : -1, n > 1 ? ids[1] : -1,
          n > 2 ? ids[2] : -1, n > 3 ? ids[3] : -1, n > 4 ? ids[4] : -1, n > 5 ? ids[5] : -1);
    char *back; size_t bl;
    CHECK(bs_tokenizer_decode(tok, ids, n, 1, &back, &bl, &err) == 0 && bl == strlen(text) && !memcmp(back, text, bl), "decode: %s", err.msg);
    free(back); free(ids);
    bs_tokenizer_free(tok);
}

// transformers' LlamaForCausalLM vectors (tests/ref/make_llama_fixture.py, tests/ref/llama/README.md).
static void llama_fixture(int *failed_, const char *name, const char *dev) {
    fx_check_ref_fixture(failed_, dev, LLAMA_REF, name, "tests/ref/llama has no reference vectors yet (made on the GPU machine by tests/ref/make_llama_fixture.py)");
}

TEST(llama_fixture_llama3_cpu_reference) { llama_fixture(failed_, "llama3", "cpu-ref"); }
TEST(llama_fixture_llama3_cpu) { llama_fixture(failed_, "llama3", "cpu"); }
TEST(llama_fixture_tied_cpu_reference) { llama_fixture(failed_, "llama_tied", "cpu-ref"); }
TEST(llama_fixture_tied_cpu) { llama_fixture(failed_, "llama_tied", "cpu"); }
