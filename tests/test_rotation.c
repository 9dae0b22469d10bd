// The R1 fold (docs/rotation.md): `blockspec rotate` keeps the model's outputs (logits and greedy tokens; every
// residual state becomes h . R1), drafters trained on the unrotated target bind to the folded one and draft what
// they draft for the original (tokens, logits, confidences), speculative output stays the folded target's own,
// rotate -> quantize works end to end, and bad input is refused naming the file and the field.
//
// The random checkpoints are rewritten in F32 with norm gains drawn from [0.5, 1.5] (make-random's gains are 1,
// which would leave the gamma fold untested), so the folded model differs from the original only by fp32
// rounding and the bounds below are tight. Hidden sizes cover every kind of transform: 48 = 12 x 4, 80 = 20 x 4,
// 56 = 28 x 2 and 64 = 2^6.
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "harness.h"
#include "test_util_models.h"
#include "backend/hadamard.h"
#include "engine/engine.h"
#include "io/json.h"
#include "io/quantize_ckpt.h"
#include "io/r1_basis.h"
#include "io/rotate_ckpt.h"
#include "io/safetensors.h"
#include "model/dflash.h"
#include "spec/spec_loop.h"
#include "train/train_target.h"
#include "util/rng.h"

// ---- checkpoints -----------------------------------------------------------------------------------------------

typedef struct rewrite {
    int random_gains;          // every "*norm.weight" drawn from [0.5, 1.5]
    int llama;                 // config made LlamaForCausalLM, q/k norms dropped
    const char *shared_from;   // a target dir: embed_tokens / lm_head replaced by its (the drafter's bundled copies = the target's)
    int drop_shared;           // embed_tokens / lm_head removed (the drafter then uses the target's)
    float tiny_final_gain;     // != 0: model.norm.weight[0] set to this
    double outliers;           // this fraction of every matrix's entries times outlier_scale (heavy-tailed weights)
    float outlier_scale;
    uint64_t seed;
} rewrite;

static int ends_with(const char *s, const char *t) { size_t a = strlen(s), b = strlen(t); return a >= b && !strcmp(s + a - b, t); }

// src rewritten into a fresh temp dir as F32 (config.json edited alike); NULL on failure (message printed).
static const char *rewrite_f32(const char *src, const rewrite *o) {
    const char *dir = bs_test_tmpdir("r1_f32");
    bs_err err = {0};
    char path[1024];
    bs_checkpoint *ck = NULL, *sh = NULL;
    if (!dir || bs_checkpoint_open(&ck, src, &err) || (o->shared_from && bs_checkpoint_open(&sh, o->shared_from, &err))) {
        fprintf(stderr, "  rewrite: %s\n", err.msg);
        return NULL;
    }
    bs_st_writer *w = bs_st_writer_new();
    void **bufs = calloc(ck->n_tensors + 2, sizeof *bufs);
    int nb = 0, rc = 0;
    bs_rng r; bs_rng_seed(&r, o->seed);
    for (int i = 0; i < ck->n_tensors && !rc; i++) {
        const bs_tensor_info *t = &ck->tensors[i];
        int is_shared = !strcmp(t->name, "embed_tokens.weight") || !strcmp(t->name, "lm_head.weight");
        if ((o->llama && (ends_with(t->name, "q_norm.weight") || ends_with(t->name, "k_norm.weight"))) || (is_shared && o->drop_shared)) continue;
        const bs_tensor_info *from = t;
        if (is_shared && sh) {
            from = bs_checkpoint_find(sh, !strcmp(t->name, "embed_tokens.weight") ? "model.embed_tokens.weight" : "lm_head.weight");
            if (!from) from = bs_checkpoint_find(sh, "model.embed_tokens.weight");   // a tied target's head
        }
        size_t count = 1;
        for (int d = 0; d < from->n_dims; d++) count *= (size_t)from->shape[d];
        float *v = bufs[nb++] = malloc(sizeof(float) * count);
        for (size_t k = 0; k < count; k++) v[k] = bs_load_elem(from->data, from->dtype, k);
        if (o->random_gains && ends_with(t->name, "norm.weight")) for (size_t k = 0; k < count; k++) v[k] = 0.5f + (float)bs_rng_uniform(&r);
        if (o->tiny_final_gain != 0 && !strcmp(t->name, "model.norm.weight")) v[0] = o->tiny_final_gain;
        if (o->outliers > 0 && from->n_dims == 2) for (size_t k = 0; k < count; k++) if (bs_rng_uniform(&r) < o->outliers) v[k] *= o->outlier_scale;
        rc = bs_st_writer_add(w, t->name, "F32", from->n_dims, from->shape, v, &err);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!rc) rc = bs_st_writer_write(w, path, &err);
    bs_st_writer_free(w);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    free(bufs);
    bs_checkpoint_close(ck);
    bs_checkpoint_close(sh);
    snprintf(path, sizeof path, "%s/config.json", src);
    cJSON *cfg = rc ? NULL : bs_json_load(path, &err);
    if (!cfg) { fprintf(stderr, "  rewrite: %s\n", err.msg); return NULL; }
    if (o->llama) {
        cJSON_ReplaceItemInObject(cfg, "architectures", cJSON_CreateStringArray((const char *[]){ "LlamaForCausalLM" }, 1));
        cJSON_ReplaceItemInObject(cfg, "model_type", cJSON_CreateString("llama"));
    }
    cJSON_DeleteItemFromObject(cfg, "dtype");
    cJSON_AddStringToObject(cfg, "dtype", "float32");
    snprintf(path, sizeof path, "%s/config.json", dir);
    rc = bs_json_write_file(cfg, path, &err);
    cJSON_Delete(cfg);
    if (rc) { fprintf(stderr, "  rewrite: %s\n", err.msg); return NULL; }
    return dir;
}

// A random target of hidden size H in F32 with random gains (llama: Llama's layer).
static const char *f32_target(int V, int H, int L, int tied, int llama, uint64_t seed) {
    const char *bf = tu_make_target(V, H, L, 2, 1, H / 2, 2 * H, tied, 1, seed);
    if (!bf) return NULL;
    rewrite o = { .random_gains = 1, .llama = llama, .seed = seed + 1 };
    return rewrite_f32(bf, &o);
}

// Rotates src into a fresh dir (library call; dtype NULL: each tensor's own). NULL + message on failure.
static const char *rotated(const char *src, uint32_t seed, const char *dtype) {
    const char *out = bs_test_tmpdir("r1_rot");
    bs_rotate_opts o = { .seed = seed, .dtype = dtype };
    bs_err err = {0};
    if (!out || bs_rotate_checkpoint(src, out, &o, &err)) { fprintf(stderr, "  rotate %s: %s\n", src, err.msg); return NULL; }
    return out;
}

// A random drafter of `kind` ("zlab", "dspark", "dspark_tied") for a target of this shape, made by make-random.
static const char *make_drafter(const char *kind, int V, int H, int L, uint64_t seed) {
    const char *dir = bs_test_tmpdir("r1_drafter");
    char cfg[2048], path[1024], cmd[2048];
    if (!dir) return NULL;
    if (!strcmp(kind, "zlab"))   // taps: layer 0's output and the last layer's (the tap after the final norm)
        snprintf(cfg, sizeof cfg, "{\"architectures\":[\"DFlashDraftModel\"],\"model_type\":\"qwen3\",\"hidden_size\":%d,"
                 "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":%d,\"intermediate_size\":%d,"
                 "\"num_hidden_layers\":2,\"vocab_size\":%d,\"rms_norm_eps\":1e-6,\"rope_theta\":10000,\"block_size\":4,"
                 "\"num_target_layers\":%d,\"dflash_config\":{\"mask_token_id\":%d,\"target_layer_ids\":[0,%d]}}",
                 H, H / 2, 2 * H, V, L, V - 1, L - 1);
    else   // taps: the embeddings, layer 0 and the last layer (after the final norm)
        snprintf(cfg, sizeof cfg, "{\"architectures\":[\"Qwen3DSparkModel\"],\"model_type\":\"qwen3\",\"hidden_size\":%d,"
                 "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":%d,\"intermediate_size\":%d,"
                 "\"num_hidden_layers\":2,\"vocab_size\":%d,\"rms_norm_eps\":1e-6,\"rope_parameters\":{\"rope_theta\":10000},"
                 "\"tie_word_embeddings\":%s,\"block_size\":4,\"num_target_layers\":%d,\"mask_token_id\":%d,\"target_layer_ids\":[-1,0,%d],"
                 "\"markov_rank\":4,\"markov_head_type\":\"vanilla\",\"enable_confidence_head\":true,\"confidence_head_with_markov\":true}",
                 H, H / 2, 2 * H, V, !strcmp(kind, "dspark_tied") ? "true" : "false", L, V - 1, L - 1);
    snprintf(path, sizeof path, "%s.json", dir);
    if (tu_write_text(path, cfg)) return NULL;
    snprintf(cmd, sizeof cmd, "%s make-random -c %s --out %s --seed %llu >/dev/null 2>&1", bs_cli_path(), path, dir, (unsigned long long)seed);
    return system(cmd) ? NULL : dir;
}

// ---- what the fold keeps ---------------------------------------------------------------------------------------

enum { P = 11 };
static const int32_t PROMPT[P] = { 3, 17, 5, 60, 2, 44, 9, 31, 7, 23, 12 };

// Logits of every prompt row and the taps (hidden_states 0 .. L) of the target in dir, on dev.
static int forward_all(const char *dir, const char *dev, float **logits, float **taps, int *V, int *H, int *L, bs_err *err) {
    bs_engine *e;
    if (bs_engine_open(&e, dir, dev, err)) return -1;
    *V = e->cfg.vocab_size; *H = e->cfg.hidden_size; *L = e->cfg.n_layers;
    int n_taps = *L + 1, tap_ids[64];
    for (int i = 0; i < n_taps; i++) tap_ids[i] = i;
    bs_kv_cache kv;
    float *lg = e->be->alloc(e->be, sizeof(float) * P * *V, err), *tp = e->be->alloc(e->be, sizeof(float) * P * n_taps * *H, err);
    bs_fwd_out fo = { .logits = lg, .logits_all = 1, .taps = tap_ids, .n_taps = n_taps, .tap_out = tp };
    int rc = !lg || !tp || bs_kv_init(&kv, e->kv_pool, 64, err) || bs_qwen3_forward(&e->target, &kv, PROMPT, P, &fo, err) ? -1 : 0;
    if (!rc) {
        *logits = malloc(sizeof(float) * P * *V); *taps = malloc(sizeof(float) * P * n_taps * *H);
        e->be->download(e->be, *logits, lg, sizeof(float) * P * *V);
        e->be->download(e->be, *taps, tp, sizeof(float) * P * n_taps * *H);
        bs_kv_free(&kv);
    }
    if (lg) e->be->free(e->be, lg);
    if (tp) e->be->free(e->be, tp);
    bs_engine_close(e);
    return rc;
}

// Largest finite |a[i]| (a draft vocabulary's logits are -inf outside it).
static double max_abs(const float *a, size_t n) { double m = 0; for (size_t i = 0; i < n; i++) if (isfinite(a[i]) && fabs(a[i]) > m) m = fabs(a[i]); return m; }
// |a - b|, 0 where both are the same infinity.
static double elem_diff(float a, float b) { return a == b ? 0 : fabs((double)a - b); }

// Greedy tokens of the target in dir after PROMPT.
static int greedy(const char *dir, const char *dev, int n, int32_t *out, bs_err *err) {
    bs_engine *e;
    if (bs_engine_open(&e, dir, dev, err)) return -1;
    bs_session s;
    int got = 0, rc = bs_session_init(&s, e, 128, NULL, err) || bs_generate_plain(&s, PROMPT, P, n, 0, out, &got, NULL, NULL, err) ? -1 : 0;
    if (!rc) bs_session_free(&s);
    bs_engine_close(e);
    return rc || got != n ? -1 : 0;
}

// The folded target's logits equal the original's, its taps are the original's times R1 (the final-norm tap:
// (t / gamma_f) . R1), and greedy decoding emits the same tokens. rel_bound: |logit diff| / max |logit|.
static void check_fold_keeps_model(int *failed_, const char *orig, const char *rot, double rel_bound, const char *label) {
    bs_err err = {0};
    float *la, *ta, *lb, *tb;
    int V, H, L, V2, H2, L2;
    CHECK(forward_all(orig, "cpu-ref", &la, &ta, &V, &H, &L, &err) == 0, "%s: %s", label, err.msg);
    CHECK(forward_all(rot, "cpu-ref", &lb, &tb, &V2, &H2, &L2, &err) == 0, "%s: %s", label, err.msg);
    CHECK(V == V2 && H == H2 && L == L2);
    double scale = max_abs(la, (size_t)P * V), diff = 0;
    for (size_t i = 0; i < (size_t)P * V; i++) if (fabs(la[i] - lb[i]) > diff) diff = fabs(la[i] - lb[i]);
    printf("  %s: max |logit diff| %.3g (max |logit| %.3g)\n", label, diff, scale);
    CHECK(diff <= rel_bound * scale, "%s: logits differ by %g (bound %g)", label, diff, rel_bound * scale);
    bs_r1_basis r1;
    CHECK(bs_r1_basis_load(&r1, rot, H, &err) == 1, "%s: %s", label, err.msg);
    bs_hadamard t;
    CHECK(bs_hadamard_init(&t, H) == 0);
    float *f = malloc(sizeof(float) * H);
    double tdiff = 0, tscale = 0;
    for (int row = 0; row < P; row++)
        for (int k = 0; k <= L; k++) {
            const float *a = ta + ((size_t)row * (L + 1) + k) * H, *b = tb + ((size_t)row * (L + 1) + k) * H;
            for (int c = 0; c < H; c++) f[c] = (k == L ? a[c] / r1.final_gain[c] : a[c]) * r1.signs[c];
            bs_hadamard_row(&t, f, 0);
            for (int c = 0; c < H; c++) { tdiff = fmax(tdiff, fabs(f[c] - b[c])); tscale = fmax(tscale, fabs(f[c])); }
        }
    free(f);
    bs_r1_basis_free(&r1);
    CHECK(tdiff <= rel_bound * tscale, "%s: taps are not the original's times R1: %g (max %g)", label, tdiff, tscale);
    free(la); free(ta); free(lb); free(tb);
    int32_t ga[24], gb[24];
    CHECK(greedy(orig, "cpu", 24, ga, &err) == 0 && greedy(rot, "cpu", 24, gb, &err) == 0, "%s: %s", label, err.msg);
    for (int i = 0; i < 24; i++) CHECK(ga[i] == gb[i], "%s: greedy token %d: %d vs %d", label, i, ga[i], gb[i]);
}

TEST(rotate_keeps_logits_f32) {
    static const struct { int H, tied, llama; } cases[] = { { 48, 0, 0 }, { 80, 1, 0 }, { 56, 0, 1 }, { 64, 1, 1 } };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char label[64];
        snprintf(label, sizeof label, "H %d %s %s", cases[k].H, cases[k].tied ? "tied" : "untied", cases[k].llama ? "Llama" : "Qwen3");
        const char *orig = f32_target(96, cases[k].H, 3, cases[k].tied, cases[k].llama, 40 + k);
        CHECK(orig, "%s", label);
        const char *rot = rotated(orig, 7 + (uint32_t)k, NULL);
        CHECK(rot, "%s", label);
        check_fold_keeps_model(failed_, orig, rot, 2e-5, label);
        if (*failed_) return;
        // The folded checkpoint: gains 1, the head untied, the fold recorded with the original final gain.
        bs_checkpoint *ck;
        bs_err err = {0};
        CHECK(bs_checkpoint_open(&ck, rot, &err) == 0, "%s", err.msg);
        const bs_tensor_info *g = bs_checkpoint_find(ck, "model.layers.1.post_attention_layernorm.weight");
        CHECK(g && bs_checkpoint_find(ck, "lm_head.weight") && bs_load_elem(g->data, g->dtype, 3) == 1.0f, "%s", label);
        bs_checkpoint_close(ck);
    }
}

// bf16 storage (make-random's own checkpoints, gains 1): the fold's rounding is the stored weights' (2^-9 relative).
TEST(rotate_keeps_logits_bf16) {
    const char *orig = tu_make_target(96, 80, 3, 2, 1, 40, 160, 0, 1, 5);
    CHECK(orig);
    const char *rot = rotated(orig, 3, NULL);
    CHECK(rot);
    bs_err err = {0};
    float *la, *ta, *lb, *tb;
    int V, H, L;
    CHECK(forward_all(orig, "cpu-ref", &la, &ta, &V, &H, &L, &err) == 0 && forward_all(rot, "cpu-ref", &lb, &tb, &V, &H, &L, &err) == 0, "%s", err.msg);
    double scale = max_abs(la, (size_t)P * V), diff = 0;
    for (size_t i = 0; i < (size_t)P * V; i++) diff = fmax(diff, fabs(la[i] - lb[i]));
    printf("  bf16: max |logit diff| %.3g (max |logit| %.3g, %.2f%%)\n", diff, scale, 100 * diff / scale);
    CHECK(diff <= 0.02 * scale, "bf16 fold: logits differ by %g of max %g", diff, scale);
    free(la); free(ta); free(lb); free(tb);
}

// The same through the command line, with --dtype f32 over a bf16 source and --signs from the first fold's sidecar.
TEST(rotate_cli_signs_file) {
    const char *orig = f32_target(64, 48, 2, 0, 0, 9);
    CHECK(orig);
    const char *a = rotated(orig, 99, NULL), *b = bs_test_tmpdir("r1_cli");
    CHECK(a && b);
    char cmd[4096], out[4096];
    snprintf(cmd, sizeof cmd, "%s rotate -m %s --out %s --signs %s/%s --dtype f32", bs_cli_path(), orig, b, a, BS_R1_FILE);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 0, "%s", out);
    check_fold_keeps_model(failed_, orig, b, 2e-5, "cli --signs");
    if (*failed_) return;
    // the same signs: the two folds are the same bytes but for the recorded seed
    bs_checkpoint *ca, *cb;
    bs_err err = {0};
    CHECK(bs_checkpoint_open(&ca, a, &err) == 0 && bs_checkpoint_open(&cb, b, &err) == 0, "%s", err.msg);
    const bs_tensor_info *x = bs_checkpoint_find(ca, "model.layers.1.mlp.down_proj.weight"), *y = bs_checkpoint_find(cb, "model.layers.1.mlp.down_proj.weight");
    CHECK(x && y && x->nbytes == y->nbytes && !memcmp(x->data, y->data, x->nbytes));
    bs_checkpoint_close(ca); bs_checkpoint_close(cb);
    snprintf(cmd, sizeof cmd, "%s rotate -m %s --out %s --seed 3 --signs x", bs_cli_path(), orig, b);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 2 && strstr(out, "alternatives"), "%s", out);
}

// ---- drafters bound to a folded target ---------------------------------------------------------------------------

typedef struct drafted { int32_t tok[8], batch_tok[8]; float logits[8 * 128], conf[8], hidden[4 * 128]; int n, batch_n; } drafted;

// Greedy drafts of `drafter` over target `dir` after PROMPT, for three anchors.
static int draft_rounds(const char *dir, const char *drafter, const char *dev, const bs_drafter_opts *opts, drafted out[3], char *warning, bs_err *err) {
    bs_engine *e;
    if (bs_engine_open(&e, dir, dev, err)) return -1;
    bs_drafter_ctx dc;
    bs_drafter *d = tu_drafter_with_context(e, drafter, opts, &dc, PROMPT, P, err);
    if (!d) { bs_engine_close(e); return -1; }
    if (warning) snprintf(warning, 512, "%s", d->warning);
    int rc = 0;
    bs_sampling greedy_s = { 0 };
    for (int k = 0; k < 3 && !rc; k++) {
        bs_draft dr;
        bs_dflash_inspect ins = { .logits = out[k].logits, .conf_logits = out[k].conf, .block_hidden = out[k].hidden };
        rc = bs_dflash_forward_block(d, &dc, (int32_t)(5 + 13 * k), 8, &greedy_s, NULL, &dr, &ins, err);
        out[k].n = dr.n;
        memcpy(out[k].tok, dr.tokens, sizeof(int32_t) * dr.n);
        // the batched pass (propose_batch, the runtime's path for many sequences) on the same context
        bs_drafter_ctx *cs[1] = { &dc };
        int32_t anchor = 5 + 13 * k;
        int max_n = 8;
        const bs_sampling *sp[1] = { &greedy_s };
        bs_rng *rp[1] = { NULL };
        if (!rc) rc = d->propose_batch(d, 1, cs, &anchor, &max_n, sp, rp, &dr, err);
        out[k].batch_n = dr.n;
        memcpy(out[k].batch_tok, dr.tokens, sizeof(int32_t) * dr.n);
    }
    tu_drafter_free(d, &dc);
    bs_engine_close(e);
    return rc;
}

// The drafter bound to the folded target drafts the tokens it drafts for the original, with close logits,
// confidences and block hidden states (its own basis: the same numbers).
static void check_same_drafts_opts(int *failed_, const char *orig, const char *rot, const char *drafter, const char *dev, const bs_drafter_opts *opts,
                                   double rel, const char *label, char *warning_rot) {
    drafted a[3], b[3];
    bs_err err = {0};
    memset(a, 0, sizeof a); memset(b, 0, sizeof b);
    CHECK(draft_rounds(orig, drafter, dev, opts, a, NULL, &err) == 0, "%s: %s", label, err.msg);
    CHECK(draft_rounds(rot, drafter, dev, opts, b, warning_rot, &err) == 0, "%s: %s", label, err.msg);
    double worst = 0;
    for (int k = 0; k < 3; k++) {
        CHECK(a[k].n == b[k].n && a[k].n > 0, "%s", label);
        for (int i = 0; i < a[k].n; i++) CHECK(a[k].tok[i] == b[k].tok[i], "%s anchor %d: draft %d is %d vs %d", label, k, i, a[k].tok[i], b[k].tok[i]);
        CHECK(b[k].batch_n == a[k].n, "%s", label);
        for (int i = 0; i < a[k].n; i++) CHECK(b[k].batch_tok[i] == a[k].tok[i], "%s anchor %d: batched draft %d is %d vs %d", label, k, i, b[k].batch_tok[i], a[k].tok[i]);
        double s = max_abs(a[k].logits, sizeof a[k].logits / sizeof(float)), d = 0, hs = max_abs(a[k].hidden, sizeof a[k].hidden / sizeof(float)), hd = 0;
        for (size_t i = 0; i < sizeof a[k].logits / sizeof(float); i++) { double x = elem_diff(a[k].logits[i], b[k].logits[i]); if (!(x <= d)) d = x; }
        for (size_t i = 0; i < sizeof a[k].hidden / sizeof(float); i++) hd = fmax(hd, fabs(a[k].hidden[i] - b[k].hidden[i]));
        for (int i = 0; i < a[k].n; i++) CHECK_NEAR(a[k].conf[i], b[k].conf[i], rel * (1 + fabs(a[k].conf[i])), "%s confidence %d", label, i);
        CHECK(d <= rel * s, "%s anchor %d: drafter logits differ by %g (max %g)", label, k, d, s);
        CHECK(hd <= rel * hs, "%s anchor %d: block hidden differs by %g (max %g)", label, k, hd, hs);
        worst = fmax(worst, d / s);
    }
    printf("  %s: drafts equal, worst relative logit diff %.3g\n", label, worst);
}
static void check_same_drafts(int *failed_, const char *orig, const char *rot, const char *drafter, const char *dev, double rel, const char *label,
                              char *warning_rot) {
    check_same_drafts_opts(failed_, orig, rot, drafter, dev, NULL, rel, label, warning_rot);
}

TEST(rotate_drafters_draft_the_same) {
    static const struct { int H; const char *kind; int variant; } cases[] = {
        { 48, "zlab", 0 }, { 80, "zlab", 0 }, { 56, "dspark", 0 }, { 64, "dspark", 1 }, { 80, "dspark", 2 }, { 48, "dspark_tied", 1 },
    };
    // variant (DSpark): 0 bundled embedding/head dropped (the target's shared through the seams), 1 bundled =
    // the target's (shared: equal up to the fold), 2 bundled random (the drafter's own: no seams, a warning)
    const int V = 96, L = 3;
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char label[96];
        snprintf(label, sizeof label, "H %d %s variant %d", cases[k].H, cases[k].kind, cases[k].variant);
        const char *orig = f32_target(V, cases[k].H, L, k % 2, 0, 60 + k);
        const char *raw = orig ? make_drafter(cases[k].kind, V, cases[k].H, L, 70 + k) : NULL;
        CHECK(raw, "%s", label);
        rewrite o = { .random_gains = 1, .seed = 80 + k, .drop_shared = cases[k].variant == 0 && strcmp(cases[k].kind, "zlab"),
                      .shared_from = cases[k].variant == 1 ? orig : NULL };
        const char *drafter = rewrite_f32(raw, &o);
        const char *rot = drafter ? rotated(orig, 11 + (uint32_t)k, NULL) : NULL;
        CHECK(rot, "%s", label);
        char warning[512] = "";
        check_same_drafts(failed_, orig, rot, drafter, "cpu-ref", 1e-4, label, warning);
        if (*failed_) return;
        if (cases[k].variant == 2) CHECK(strstr(warning, "up to its R1 fold"), "%s: warning '%s'", label, warning);
        else CHECK(!*warning, "%s: warning '%s'", label, warning);
        check_same_drafts(failed_, orig, rot, drafter, "cpu", 1e-4, label, NULL);
        if (*failed_) return;
        if (k == 0) {   // with a draft vocabulary: the head's rows the drafter gathers are the folded target's too
            char vocab[1024];
            snprintf(vocab, sizeof vocab, "%s/dv.json", drafter);
            CHECK(tu_write_text(vocab, "[0, 2, 3, 5, 8, 13, 21, 34, 55, 60, 61, 62, 63, 70, 89, 95]") == 0);
            bs_drafter_opts dv = { .lossy_weights = -1, .draft_vocab = vocab };
            char l2[128];
            snprintf(l2, sizeof l2, "%s, draft vocabulary", label);
            check_same_drafts_opts(failed_, orig, rot, drafter, "cpu", &dv, 1e-4, l2, NULL);
            if (*failed_) return;
        }
    }
}

// Greedy speculative output on the folded target is its plain output (lossless, as on any target), and with F32
// weights the rounds accept exactly what they accept on the original (the same drafts, the same verdicts).
static int spec_run(const char *target, const char *drafter, int32_t *out, long *accepted, bs_err *err) {
    bs_engine *e;
    if (bs_engine_open(&e, target, "cpu", err)) return -1;
    int32_t prompt[P];
    for (int i = 0; i < P; i++) prompt[i] = PROMPT[i] % e->cfg.vocab_size;
    bs_session s;
    bs_drafter *d = NULL;
    bs_spec_stats st;
    int n = 0, rc = bs_session_init(&s, e, 256, NULL, err) || bs_drafter_open(&d, drafter, e, s.kv.max_ctx, err) ? -1 : 0;
    bs_spec_opts so = { 0 };
    if (!rc) rc = bs_generate_spec(&s, d, prompt, P, 40, &so, out, &n, NULL, NULL, &st, err);
    if (!rc) { *accepted = st.accepted; bs_spec_stats_free(&st); }
    if (d) d->free(d);
    if (!rc) bs_session_free(&s);
    bs_engine_close(e);
    return rc;
}

TEST(rotate_spec_greedy_equals_plain) {
    const int V = 8, L = 3, H = 80;   // a tiny vocabulary: random drafters are accepted now and then
    const char *orig = f32_target(V, H, L, 0, 0, 90);
    const char *kinds[2] = { "zlab", "dspark" };
    for (int k = 0; k < 2; k++) {
        const char *raw = orig ? make_drafter(kinds[k], V, H, L, 91 + k) : NULL;
        rewrite o = { .random_gains = 1, .drop_shared = k == 1, .seed = 92 };
        const char *drafter = raw ? rewrite_f32(raw, &o) : NULL;
        const char *rot = drafter ? rotated(orig, 5, NULL) : NULL;
        CHECK(rot, "%s", kinds[k]);
        tu_greedy_spec_equals_plain(failed_, "cpu", rot, drafter, NULL, 6, 17 + k);
        if (*failed_) return;
        int32_t a[40], b[40];
        long acc_a = -1, acc_b = -2;
        bs_err err = {0};
        CHECK(spec_run(orig, drafter, a, &acc_a, &err) == 0 && spec_run(rot, drafter, b, &acc_b, &err) == 0, "%s", err.msg);
        for (int i = 0; i < 40; i++) CHECK(a[i] == b[i], "%s: token %d", kinds[k], i);
        CHECK(acc_a == acc_b && acc_a > 0, "%s: accepted %ld drafts on the original, %ld on the folded target", kinds[k], acc_a, acc_b);
        printf("  %s: %ld drafts accepted on both\n", kinds[k], acc_a);
    }
}

// Relative logit RMS error of dir against ref over 96 pseudo-random tokens (every row's logits), and in how many
// rows the two argmaxes agree (*agree, may be NULL).
static double logit_err_agree(const char *ref, const char *dir, int *agree) {
    enum { N = 96 };
    bs_err err = {0};
    float *l[2] = { NULL, NULL };
    int V = 0;
    const char *dirs[2] = { ref, dir };
    for (int k = 0; k < 2; k++) {
        bs_engine *e;
        if (bs_engine_open(&e, dirs[k], "cpu", &err)) { fprintf(stderr, "  %s\n", err.msg); return INFINITY; }
        V = e->cfg.vocab_size;
        int32_t ids[N];
        uint64_t x = 12345;
        for (int i = 0; i < N; i++) ids[i] = (int32_t)(bs_splitmix64(&x) % (uint64_t)V);
        bs_kv_cache kv;
        float *dev = e->be->alloc(e->be, sizeof(float) * N * V, &err);
        bs_fwd_out fo = { .logits = dev, .logits_all = 1 };
        l[k] = malloc(sizeof(float) * N * V);
        int rc = !dev || bs_kv_init(&kv, e->kv_pool, N + 8, &err) || bs_qwen3_forward(&e->target, &kv, ids, N, &fo, &err);
        if (!rc) { e->be->download(e->be, l[k], dev, sizeof(float) * N * V); bs_kv_free(&kv); }
        if (dev) e->be->free(e->be, dev);
        bs_engine_close(e);
        if (rc) { fprintf(stderr, "  %s\n", err.msg); return INFINITY; }
    }
    double d = 0, t = 0;
    int same = 0;
    for (int r = 0; r < N; r++) {
        int ia = 0, ib = 0;
        for (int v = 0; v < V; v++) {
            double x = l[0][r * V + v] - l[1][r * V + v];
            d += x * x;
            t += (double)l[0][r * V + v] * l[0][r * V + v];
            if (l[0][r * V + v] > l[0][r * V + ia]) ia = v;
            if (l[1][r * V + v] > l[1][r * V + ib]) ib = v;
        }
        same += ia == ib;
    }
    free(l[0]); free(l[1]);
    if (agree) *agree = same;
    return sqrt(d / t);
}
static double logit_err(const char *ref, const char *dir) { return logit_err_agree(ref, dir, NULL); }

// The built-in model (trained weights) and its two drafters: rotate, then speculative decoding on the fold
// accepts what it accepts on the original (bf16 storage: measured, not required to be equal).
TEST(rotate_builtin_model) {
    struct stat st;
    if (stat("models/blockspec-30m/config.json", &st)) SKIP("models/blockspec-30m not here (run from the repository root)");
    const char *rot = rotated("models/blockspec-30m", 7, NULL);
    CHECK(rot);
    const char *drafters[2] = { "models/blockspec-30m-dspark", "models/blockspec-30m-dflash" };
    for (int k = 0; k < 2; k++) {
        int32_t a[40], b[40];
        long acc_a = 0, acc_b = 0;
        bs_err err = {0};
        CHECK(spec_run("models/blockspec-30m", drafters[k], a, &acc_a, &err) == 0 && spec_run(rot, drafters[k], b, &acc_b, &err) == 0, "%s", err.msg);
        int same = 0;
        for (int i = 0; i < 40; i++) same += a[i] == b[i];
        printf("  %s: accepted %ld (original) vs %ld (folded); %d/40 tokens equal\n", drafters[k], acc_a, acc_b, same);
        CHECK(acc_b >= acc_a * 8 / 10, "%s: the folded target accepts far fewer drafts (%ld vs %ld): the binding is off", drafters[k], acc_b, acc_a);
        tu_greedy_spec_equals_plain(failed_, "cpu", rot, drafters[k], NULL, 2, 3 + k);
        if (*failed_) return;
    }
    // Its 4-bit error (group 64) with and without the fold, against the BF16 original (docs/rotation.md; 8 bits
    // measured by editing `bits`).
    for (int bits = 4; bits <= 4; bits += 4) {
        const char *q = bs_test_tmpdir("r1_bq"), *qr = bs_test_tmpdir("r1_bqr");
        bs_err err = {0};
        CHECK(q && qr && bs_quantize_checkpoint("models/blockspec-30m", q, bits, 64, NULL, &err) == 0 &&
              bs_quantize_checkpoint(rot, qr, bits, 64, NULL, &err) == 0, "%s", err.msg);
        int a1 = 0, a2 = 0, a0 = 0;
        double e0 = logit_err_agree("models/blockspec-30m", rot, &a0), e1 = logit_err_agree("models/blockspec-30m", q, &a1),
               e2 = logit_err_agree("models/blockspec-30m", qr, &a2);
        printf("  built-in model, %d-bit g64: relative logit RMS error %.4f unrotated, %.4f rotated (bf16 fold alone %.4f); "
               "argmax agrees on %d / %d of 96 rows\n", bits, e1, e2, e0, a1, a2);
        CHECK(isfinite(e1) && isfinite(e2) && e0 < 0.01, "the bf16 fold alone moved the logits by %g", e0);
    }
}

// rotate -> quantize 4-bit: the fold's record survives, drafters bind to the quantised fold, greedy speculative
// output equals plain on it; and the 4-bit logit error with and without the rotation (printed: docs/rotation.md).


// One model quantised to 4 bits (group 64) as it is and after the fold: the relative logit RMS errors against it.
static void q4_errors(int *failed_, const char *orig, double *e_plain, double *e_rot) {
    const char *rot = rotated(orig, 4, NULL), *q_rot = bs_test_tmpdir("r1_q4"), *q_orig = bs_test_tmpdir("r1_q4o");
    bs_err err = {0};
    CHECK(rot && q_rot && q_orig && bs_quantize_checkpoint(rot, q_rot, 4, 64, NULL, &err) == 0 &&
          bs_quantize_checkpoint(orig, q_orig, 4, 64, NULL, &err) == 0, "%s", err.msg);
    *e_plain = logit_err(orig, q_orig);
    *e_rot = logit_err(orig, q_rot);
}

TEST(rotate_then_quantize_4bit) {
    const int V = 96, L = 3, H = 128;
    const char *orig = tu_make_target(V, H, L, 2, 1, 64, 256, 0, 1, 31);
    const char *raw = orig ? make_drafter("dspark", V, H, L, 32) : NULL;
    rewrite o = { .drop_shared = 1, .seed = 33 };
    const char *drafter = raw ? rewrite_f32(raw, &o) : NULL;
    const char *rot = drafter ? rotated(orig, 4, NULL) : NULL;
    CHECK(rot);
    const char *q_rot = bs_test_tmpdir("r1_q4");
    bs_err err = {0};
    CHECK(q_rot && bs_quantize_checkpoint(rot, q_rot, 4, 64, NULL, &err) == 0, "%s", err.msg);
    bs_r1_basis r1;
    CHECK(bs_r1_basis_load(&r1, q_rot, H, &err) == 1, "the fold's record did not survive quantize: %s", err.msg);
    bs_r1_basis_free(&r1);
    tu_greedy_spec_equals_plain(failed_, "cpu", q_rot, drafter, NULL, 4, 8);
    if (*failed_) return;
    // The 4-bit error with and without the fold (docs/rotation.md, "Measured"), on a wider random target (H = 512).
    // make-random's weights are uniform: bounded, no outliers, the best case for min/max groups, which the rotation
    // makes Gaussian (wider groups): the fold costs there. With rare large entries (0.1% of every matrix's entries
    // x30, heavy tails) the rotation spreads each over its row and the error drops (measured 0.373 -> 0.274).
    double up, ur, hp, hr;
    const char *wide = tu_make_target(V, 512, 2, 8, 2, 512 / 8, 2 * 512, 0, 1, 35);
    CHECK(wide);
    q4_errors(failed_, wide, &up, &ur);
    if (*failed_) return;
    rewrite heavy = { .outliers = 0.001, .outlier_scale = 30, .seed = 34 };
    const char *tail = rewrite_f32(wide, &heavy);
    CHECK(tail);
    q4_errors(failed_, tail, &hp, &hr);
    if (*failed_) return;
    printf("  4-bit g64, random H = 512: relative logit RMS error: uniform weights %.4f unrotated, %.4f rotated; heavy-tailed %.4f unrotated, %.4f rotated\n",
           up, ur, hp, hr);
    CHECK(isfinite(up) && isfinite(ur) && hr < 0.85 * hp, "the rotation did not reduce the error on heavy-tailed weights");
}

// ---- bad input ---------------------------------------------------------------------------------------------------

static int write_signs(const char *path, int n, float fill_bad) {
    float *s = malloc(sizeof(float) * n);
    for (int i = 0; i < n; i++) s[i] = i % 3 ? 1.0f : -1.0f;
    if (fill_bad != 0) s[n / 2] = fill_bad;
    bs_st_writer *w = bs_st_writer_new();
    int64_t shape[1] = { n };
    bs_err err;
    int rc = bs_st_writer_add(w, "signs", "F32", 1, shape, s, &err) || bs_st_writer_write(w, path, &err);
    bs_st_writer_free(w);
    free(s);
    return rc;
}

static void expect_rotate_error(int *failed_, const char *src, const bs_rotate_opts *o, const char *want1, const char *want2) {
    const char *out = bs_test_tmpdir("r1_bad");
    bs_err err = {0};
    CHECK(out && bs_rotate_checkpoint(src, out, o, &err) == -1, "rotate accepted bad input (want '%s')", want1);
    CHECK(strstr(err.msg, want1) && (!want2 || strstr(err.msg, want2)), "message '%s' lacks '%s' / '%s'", err.msg, want1, want2 ? want2 : "");
}

TEST(rotate_bad_input) {
    // a hidden size no m x 2^k matches (36 = 9 x 4)
    const char *odd = tu_make_target(64, 36, 1, 2, 1, 18, 64, 0, 1, 1);
    CHECK(odd);
    bs_rotate_opts o = { .seed = 1 };
    expect_rotate_error(failed_, odd, &o, "hidden_size 36", "config.json");
    const char *orig = f32_target(64, 48, 2, 0, 0, 2);
    CHECK(orig);
    // a signs file of the wrong length, or with a value other than +1/-1
    char path[1024];
    snprintf(path, sizeof path, "%s/short.safetensors", orig);
    CHECK(write_signs(path, 40, 0) == 0);
    o.signs_file = path;
    expect_rotate_error(failed_, orig, &o, "short.safetensors", "40 elements, but the model's hidden_size is 48");
    snprintf(path, sizeof path, "%s/half.safetensors", orig);
    CHECK(write_signs(path, 48, 0.5f) == 0);
    expect_rotate_error(failed_, orig, &o, "half.safetensors", "+1 or -1");
    o.signs_file = NULL;
    // quantised or already folded input
    const char *rot = rotated(orig, 1, NULL), *q = bs_test_tmpdir("r1_badq");
    bs_err err = {0};
    CHECK(rot && q && bs_quantize_checkpoint(orig, q, 8, 32, NULL, &err) == 0, "%s", err.msg);
    expect_rotate_error(failed_, q, &o, "quantised", "rotate first, then quantize");
    expect_rotate_error(failed_, rot, &o, "already R1-folded", NULL);
    // an unknown tensor beside the decoder's
    const char *extra = bs_test_tmpdir("r1_extra");
    char cmd[4096], out[4096];
    snprintf(cmd, sizeof cmd, "cp %s/config.json %s/ && cp %s/model.safetensors %s/", orig, extra, orig, extra);
    CHECK(system(cmd) == 0);
    {
        bs_checkpoint *ck;
        CHECK(bs_checkpoint_open(&ck, orig, &err) == 0, "%s", err.msg);
        bs_st_writer *w = bs_st_writer_new();
        for (int i = 0; i < ck->n_tensors; i++)
            bs_st_writer_add(w, ck->tensors[i].name, ck->tensors[i].dtype_name, ck->tensors[i].n_dims, ck->tensors[i].shape, ck->tensors[i].data, &err);
        const bs_tensor_info *e = bs_checkpoint_find(ck, "model.embed_tokens.weight");
        bs_st_writer_add(w, "model.extra_proj.weight", e->dtype_name, 2, e->shape, e->data, &err);
        snprintf(path, sizeof path, "%s/model.safetensors", extra);
        CHECK(bs_st_writer_write(w, path, &err) == 0, "%s", err.msg);
        bs_st_writer_free(w);
        bs_checkpoint_close(ck);
    }
    expect_rotate_error(failed_, extra, &o, "model.extra_proj.weight", "refuses to copy it unrotated");
    if (*failed_) return;

    // a folded target's record that is wrong: each a clear error at open, naming the file
    struct { const char *edit, *want; } recs[] = {
        { "\"n\": 64", "\"n\" is 64 but hidden_size is 48" },
        { "\"transform\": \"other\"", "\"transform\" must be \"mlx_hadamard\"" },
        { "\"file\": \"missing.safetensors\"", "missing.safetensors" },
        { "\"r1Seed\": 2", "not the sign stream of r1Seed 2" },
    };
    for (size_t k = 0; k < sizeof recs / sizeof *recs; k++) {
        const char *bad = bs_test_tmpdir("r1_rec");
        snprintf(cmd, sizeof cmd, "cp %s/* %s/", rot, bad);
        CHECK(system(cmd) == 0);
        snprintf(path, sizeof path, "%s/config.json", bad);
        cJSON *cfg = bs_json_load(path, &err);
        CHECK(cfg, "%s", err.msg);
        cJSON *blk = cJSON_GetObjectItemCaseSensitive(cfg, BS_R1_KEY);
        char obj[200];
        snprintf(obj, sizeof obj, "{%s}", recs[k].edit);
        cJSON *e = cJSON_Parse(obj);
        cJSON_ReplaceItemInObjectCaseSensitive(blk, e->child->string, cJSON_Duplicate(e->child, 1));
        cJSON_Delete(e);
        CHECK(bs_json_write_file(cfg, path, &err) == 0, "%s", err.msg);
        cJSON_Delete(cfg);
        bs_engine *eng = NULL;
        CHECK(bs_engine_open(&eng, bad, "cpu", &err) == -1, "opened a target with %s", recs[k].edit);
        CHECK(strstr(err.msg, recs[k].want), "message '%s' lacks '%s'", err.msg, recs[k].want);
    }

    // a drafter whose hidden size differs from the folded target's
    const char *wide = make_drafter("zlab", 64, 64, 2, 3);
    CHECK(wide);
    bs_engine *e;
    CHECK(bs_engine_open(&e, rot, "cpu", &err) == 0, "%s", err.msg);
    bs_drafter *d = NULL;
    CHECK(bs_drafter_open(&d, wide, e, 64, &err) == -1 && strstr(err.msg, "hidden_size 64 does not match the target's 48"), "%s", err.msg);
    bs_engine_close(e);

    // a final norm gain too small to divide by: rotate works, binding a drafter that reads the head refuses
    const char *bf = tu_make_target(64, 48, 2, 2, 1, 24, 96, 0, 1, 4);
    rewrite tw = { .random_gains = 1, .tiny_final_gain = 1e-7f, .seed = 5 };
    const char *tiny = bf ? rewrite_f32(bf, &tw) : NULL;
    const char *tiny_rot = tiny ? rotated(tiny, 1, NULL) : NULL;
    const char *zl = make_drafter("zlab", 64, 48, 2, 6);
    CHECK(tiny_rot && zl);
    CHECK(bs_engine_open(&e, tiny_rot, "cpu", &err) == 0, "%s", err.msg);
    CHECK(bs_drafter_open(&d, zl, e, 64, &err) == -1 && strstr(err.msg, "final_norm_gain") && strstr(err.msg, "gamma[0]"), "%s", err.msg);
    bs_engine_close(e);

    // drafter training against a folded target is refused (the drafter would learn the rotated basis)
    bs_train_task *task = NULL;
    CHECK(bs_train_target_load(&task, rot, 0, &err) == -1 && strstr(err.msg, "R1-folded"), "%s", err.msg);
    (void)out;
}

// ---- CUDA ---------------------------------------------------------------------------------------------------------

// On the GPU: the bound drafter drafts on the folded target what it drafts on the original (tokens equal, logits
// close), and greedy speculative output equals plain there.
TEST(cuda_rotate_drafters_and_spec) {
    NEED_CUDA_DEVICE();
    const int V = 96, L = 3, H = 80;
    const char *orig = f32_target(V, H, L, 0, 0, 100);
    const char *kinds[2] = { "zlab", "dspark" };
    for (int k = 0; k < 2; k++) {
        const char *raw = orig ? make_drafter(kinds[k], V, H, L, 101 + k) : NULL;
        rewrite o = { .random_gains = 1, .drop_shared = k == 1, .seed = 102 };
        const char *drafter = raw ? rewrite_f32(raw, &o) : NULL;
        const char *rot = drafter ? rotated(orig, 9, NULL) : NULL;
        CHECK(rot, "%s", kinds[k]);
        check_same_drafts(failed_, orig, rot, drafter, "cuda", 1e-4, kinds[k], NULL);
        if (*failed_) return;
        tu_greedy_spec_equals_plain(failed_, "cuda", rot, drafter, NULL, 4, 23 + k);
        if (*failed_) return;
    }
}
