// The seed's own DSpark v1 drafter (docs/dspark-v1.md, src/model/dspark_v1.c): the reference vectors of
// tests/ref/dspark_v1 (tests/ref/make_dspark_v1_fixture.py, a PyTorch port of the seed's module.ts) on the CPU, the
// scalar reference CPU and CUDA, greedy speculative == plain, the sampling chi-square with the walk's q (passes)
// and with a q that leaves out the Markov bias (must fail), `make-random` adapters, and bad input.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "tests/wrong_q.h"
#include "harness.h"
#include "fixture_util.h"
#include "test_util_models.h"
#include "engine/engine.h"
#include "io/dspark_v1_config.h"
#include "io/json.h"
#include "util/dtype.h"
#include "backend/affine.h"
#include "model/dspark_v1.h"

#define REF "tests/ref/dspark_v1"
#define TARGET "tests/ref/dflash2/target"
#define TOL 1e-3

static void check_fixture(int *failed_, const char *dev) {
    const char *file = REF "/dspark_v1.expect.safetensors";
    if (access(file, R_OK) || access(TARGET "/model.safetensors", R_OK)) SKIP(REF " or " TARGET " is missing");
    bs_err err = {0};
    bs_engine *e; bs_checkpoint *x; bs_drafter *d;
    CHECK(bs_engine_open(&e, TARGET, dev, &err) == 0, "%s", err.msg);
    CHECK(bs_checkpoint_open(&x, file, &err) == 0, "%s", err.msg);
    CHECK(bs_drafter_open(&d, REF "/adapter", e, 64, &err) == 0, "%s", err.msg);   // found by its dspark.json
    CHECK(bs_is_dspark_v1(d) && !strcmp(d->name, "dspark-v1"), "opened as %s", d->name);
    CHECK(d->n_taps == 1 && d->taps[0] == e->cfg.n_layers, "the tap is hidden_states[%d], want the last (%d)", d->taps[0], e->cfg.n_layers);
    const bs_dspark_v1_config *c = bs_dspark_v1_config_of(d);
    int V = e->cfg.vocab_size, H = e->cfg.hidden_size, G = c->gamma, D = c->d_draft;
    CHECK(d->max_drafts == G, "max_drafts %d, gamma %d", d->max_drafts, G);
    long A;
    const int32_t *anchors = fx_tensor(x, "anchors", "I32", -1, &A);
    const float *hctx = fx_tensor(x, "ctx_hidden", "F32", A * H, NULL), *hid_x = fx_tensor(x, "block_hidden", "F32", A * G * D, NULL);
    const float *U_x = fx_tensor(x, "base_logits", "F32", A * G * V, NULL), *L_x = fx_tensor(x, "step_logits", "F32", A * G * V, NULL);
    const float *z_x = fx_tensor(x, "conf_logits", "F32", A * G, NULL), *c_x = fx_tensor(x, "conf", "F32", A * G, NULL);
    const int32_t *tok_x = fx_tensor(x, "draft_tokens", "I32", A * G, NULL), *st_x = fx_tensor(x, "sampled_tokens", "I32", A * G, NULL);
    const float *u_x = fx_tensor(x, "walk_uniforms", "F32", A * G, NULL), *q_x = fx_tensor(x, "sampled_q", "F32", A * G * V, NULL);
    const float *T_x = fx_tensor(x, "sample_temperature", "F32", 1, NULL);
    CHECK(anchors && hctx && hid_x && U_x && L_x && z_x && c_x && tok_x && st_x && u_x && q_x && T_x, "%s: tensors missing or misshaped", file);

    // The A context vectors as context rows 0..A-1 (added in two pieces); case a is then drafted with the context
    // rolled back to a + 1 rows, so its last row is case a's vector.
    float *feat = e->be->alloc(e->be, sizeof(float) * A * H, &err);
    CHECK(feat, "%s", err.msg);
    e->be->upload(e->be, feat, hctx, sizeof(float) * A * H);
    bs_drafter_ctx dc;
    CHECK(bs_drafter_ctx_init(d, &dc, 64, &err) == 0, "%s", err.msg);
    CHECK(d->add_context(d, &dc, feat, 1, &err) == 0 && d->add_context(d, &dc, feat + H, (int)A - 1, &err) == 0, "%s", err.msg);
    float *hid = malloc(sizeof(float) * G * D), *U = malloc(sizeof(float) * G * V), *L = malloc(sizeof(float) * G * V), *q = malloc(sizeof(float) * G * V);
    float z[BS_MAX_DRAFT];
    double worst = 0;
    for (int a = (int)A - 1; a >= 0; a--) {
        CHECK(d->rollback(d, &dc, a + 1, &err) == 0, "%s", err.msg);
        bs_dspark_v1_inspect ins = { .block_hidden = hid, .base_logits = U, .step_logits = L, .conf_logits = z };
        bs_draft dr;
        CHECK(bs_dspark_v1_forward_block(d, &dc, anchors[a], G, NULL, NULL, &dr, &ins, &err) == 0 && dr.n == G && !dr.q && dr.has_conf, "%s", err.msg);
        double dh = fx_max_abs_diff(hid, hid_x + (size_t)a * G * D, (long)G * D), dU = fx_max_abs_diff(U, U_x + (size_t)a * G * V, (long)G * V);
        double dL = fx_max_abs_diff(L, L_x + (size_t)a * G * V, (long)G * V), dz = fx_max_abs_diff(z, z_x + (size_t)a * G, G);
        CHECK(dh < TOL && dU < TOL && dL < TOL && dz < TOL, "case %d: block hidden %g, base logits %g, step logits %g, conf logits %g", a, dh, dU, dL, dz);
        for (int k = 0; k < G; k++) {
            CHECK(dr.tokens[k] == tok_x[a * G + k], "case %d: greedy draft %d: %d vs %d", a, k, dr.tokens[k], tok_x[a * G + k]);
            CHECK_NEAR(dr.conf[k], c_x[a * G + k], TOL, "case %d: confidence %d", a, k);
        }
        double m4 = dh > dU ? dh : dU; m4 = m4 > dL ? m4 : dL; m4 = m4 > dz ? m4 : dz;
        if (m4 > worst) worst = m4;
        // The walk at the reference's temperature and uniforms: the same draws, q_k the distribution drawn from.
        double u[BS_MAX_DRAFT];
        for (int k = 0; k < G; k++) u[k] = u_x[a * G + k];
        bs_dspark_v1_inspect si = { .uniforms = u };
        bs_sampling t = { .temperature = T_x[0], .top_k = 0, .top_p = 1.0f };
        CHECK(bs_dspark_v1_forward_block(d, &dc, anchors[a], G, &t, NULL, &dr, &si, &err) == 0 && dr.n == G && dr.q, "%s", err.msg);
        e->be->download(e->be, q, dr.q, sizeof(float) * G * V);
        for (int k = 0; k < G; k++) CHECK(dr.tokens[k] == st_x[a * G + k], "case %d: sampled draft %d: %d vs %d", a, k, dr.tokens[k], st_x[a * G + k]);
        double dq = fx_max_abs_diff(q, q_x + (size_t)a * G * V, (long)G * V);
        CHECK(dq < TOL, "case %d: q differs by %g", a, dq);
    }
    printf("  dspark v1 on %s: max |diff| over hidden, logits, confidence logits %.2g\n", dev, worst);
    // Fewer drafts than gamma: the leading ones, unchanged.
    bs_draft d2;
    CHECK(bs_dspark_v1_forward_block(d, &dc, anchors[0], 2, NULL, NULL, &d2, NULL, &err) == 0 && d2.n == 2, "%s", err.msg);
    CHECK(d2.tokens[0] == tok_x[0] && d2.tokens[1] == tok_x[1], "a shorter block drafted other tokens");
    free(hid); free(U); free(L); free(q);
    e->be->free(e->be, feat);
    tu_drafter_free(d, &dc);
    bs_checkpoint_close(x);
    bs_engine_close(e);
}

TEST(dspark_v1_fixture) { check_fixture(failed_, "cpu"); }
TEST(dspark_v1_fixture_reference_cpu) { check_fixture(failed_, "cpu-ref"); }
TEST(dspark_v1_fixture_cuda) {
    NEED_CUDA_DEVICE();
    check_fixture(failed_, "cuda");
}

// ---- random adapters (make-random) ----------------------------------------------------------------------------

// A dspark.json for a target of width H and vocabulary V ("extra": more members of "config", "" none).
static int write_v1_json(const char *path, int H, int V, int G, int D, int L, int nh, int r, int ff, const char *target_id) {
    char js[2048];
    snprintf(js, sizeof js,
             "{\"kind\":\"dspark-drafter\",\"version\":1,\"target_id\":\"%s\",\"config\":{\"gamma\":%d,\"dDraft\":%d,\"nLayers\":%d,"
             "\"nHeads\":%d,\"markovRank\":%d,\"ffMult\":%d},\"dims\":{\"hiddenSize\":%d,\"vocabSize\":%d,\"eps\":1e-6}}",
             target_id, G, D, L, nh, r, ff, H, V);
    return tu_write_text(path, js);
}
// A random target (2 heads, 1 KV head) and a random DSpark v1 adapter for it (make-random) in target/v1.
static int make_pair(int V, int H, int Lt, int G, int D, int r, char target[256], char v1[300]) {
    const char *t = tu_make_target(V, H, Lt, 2, 1, H / 2, 2 * H, 0, 1, 33);
    if (!t) return -1;
    snprintf(target, 256, "%s", t);
    snprintf(v1, 300, "%s/v1", target);
    char cfg[400], cmd[1200];
    snprintf(cfg, sizeof cfg, "%s/v1.json", target);
    if (write_v1_json(cfg, H, V, G, D, 2, 4, r, 2, "random")) return -1;
    snprintf(cmd, sizeof cmd, "%s make-random -c %s --out %s --seed 7 > /dev/null", bs_cli_path(), cfg, v1);
    return system(cmd) == 0 ? 0 : -1;
}

static void greedy_lossless(int *failed_, const char *dev) {
    if (!access(TARGET "/model.safetensors", R_OK)) tu_greedy_spec_equals_plain(failed_, dev, TARGET, REF "/adapter", NULL, 8, 41);
    if (*failed_) return;
    char target[256], v1[300];
    CHECK(make_pair(64, 32, 3, 6, 32, 8, target, v1) == 0, "make-random failed");
    tu_greedy_spec_equals_plain(failed_, dev, target, v1, NULL, 10, 42);
}
TEST(dspark_v1_greedy_spec_equals_plain) { greedy_lossless(failed_, "cpu"); }
TEST(dspark_v1_greedy_spec_equals_plain_cuda) {
    NEED_CUDA_DEVICE();
    greedy_lossless(failed_, "cuda");
}

// ---- sampling: the walk's q keeps the target's distribution; a q without the Markov bias does not ----------

// The wrong q of the control (tests/wrong_q.h): softmax(U_k / T), the base logits' distribution without the
// Markov bias the drafts were really drawn with (temperature only, no top-k / top-p).
static int dspark_v1_base(bs_drafter *inner, bs_drafter_ctx *c, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng, bs_draft *out,
                          float *logits, bs_err *err) {
    bs_dspark_v1_inspect ins = { .base_logits = logits };
    return bs_dspark_v1_forward_block(inner, c, anchor, max_n, s, rng, out, &ins, err);
}

static void sampling_pvalues(int *failed_, const char *dev, long runs) {
    char target[256], v1[300];
    CHECK(make_pair(12, 16, 2, 4, 16, 6, target, v1) == 0, "make-random failed");
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, target, dev, &err) == 0, "%s", err.msg);
    bs_sampling cfgs[] = { { 1.0f, 0, 1.0f, 0 }, { 0.8f, 6, 0.9f, 0 } };
    for (int c = 0; c < 2; c++)
        for (int wrong = 0; wrong < 1 + (c == 0); wrong++) {   // the wrong q is a plain softmax: temperature-only config
            bs_drafter *d;
            CHECK(bs_drafter_open(&d, v1, e, 64, &err) == 0, "%s", err.msg);
            if (wrong) d = tu_wrong_q_wrap(e, d, "dspark-v1-wrong-q", dspark_v1_base);
            double ar = 0; long imp = 0;
            double pv = tu_spec_sampling_pvalue(e, d, &cfgs[c], runs, &ar, &imp);
            d->free(d);
            printf("  %s dspark v1 %s q, T=%.1f top_k=%d top_p=%.1f: p-value %.3g, draft acceptance %.2f\n", dev,
                   wrong ? "WRONG (no Markov bias)" : "the walk's", cfgs[c].temperature, cfgs[c].top_k, cfgs[c].top_p, pv, ar);
            CHECK(pv >= 0, "a run failed");
            CHECK(ar > 0.05 && ar < 0.95, "acceptance %.2f gives the test little power", ar);
            if (!wrong) {
                CHECK(imp == 0, "%ld draws of impossible outcomes", imp);
                CHECK(pv > 1e-4, "sampling with the DSpark v1 walk's q is not distributed as the target (p = %g)", pv);
            } else CHECK(pv < 1e-6, "a wrong q went unnoticed (p = %g): the test has no power", pv);
        }
    bs_engine_close(e);
}
TEST(dspark_v1_sampling_lossless) { sampling_pvalues(failed_, "cpu-ref", 20000); }
TEST(dspark_v1_sampling_lossless_cuda) {
    NEED_CUDA_DEVICE();
    sampling_pvalues(failed_, "cuda", 6000);
}

// ---- bad input ----------------------------------------------------------------------------------------------

// Copies the fixture adapter into dir with its safetensors rewritten: tensor `drop` left out (NULL: none), tensor
// `grow` given one more row (NULL: none), every float tensor stored as `dtype` ("F32", "BF16", "F16"; `only`: just
// that tensor, NULL every one), and dspark.json = json (NULL: the fixture's).
static const char *zero_tensors;   // write_variant: tensors listed here (" a b ") are written as zeros
static int write_variant(const char *dir, const char *drop, const char *grow, const char *dtype, const char *only, const char *json) {
    bs_err err = {0};
    bs_checkpoint *ck;
    if (bs_checkpoint_open(&ck, REF "/adapter", &err)) return -1;
    bs_st_writer *w = bs_st_writer_new();
    void **bufs = calloc(ck->n_tensors, sizeof *bufs);
    int rc = 0;
    for (int i = 0; i < ck->n_tensors && !rc; i++) {
        const bs_tensor_info *t = &ck->tensors[i];
        if (drop && !strcmp(t->name, drop)) continue;
        int64_t shape[BS_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        size_t n = 1;
        for (int k = 0; k < t->n_dims; k++) n *= (size_t)t->shape[k];
        int g = grow && !strcmp(t->name, grow);
        size_t row = t->n_dims > 1 ? n / (size_t)t->shape[0] : 1;
        if (g) shape[0]++;
        size_t m = n + (g ? row : 0);
        const char *dt = !only || !strcmp(only, t->name) ? dtype : "F32";
        int half = strcmp(dt, "F32") && strcmp(dt, "I32");
        char *b = calloc(m, half ? 2 : 4);
        const float *src = t->data;
        char key[80];
        snprintf(key, sizeof key, " %s ", t->name);
        int zero = zero_tensors && strstr(zero_tensors, key);
        for (size_t k = 0; k < n && !zero; k++) {
            if (!strcmp(dt, "I32")) ((int32_t *)b)[k] = (int32_t)src[k];
            else if (!half) ((float *)b)[k] = src[k];
            else ((uint16_t *)b)[k] = !strcmp(dt, "BF16") ? bs_f32_to_bf16(src[k]) : bs_f32_to_f16(src[k]);
        }
        bufs[i] = b;
        rc = bs_st_writer_add(w, t->name, dt, t->n_dims, shape, b, &err);
    }
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!rc) rc = bs_st_writer_write(w, path, &err);
    bs_st_writer_free(w);
    for (int i = 0; i < ck->n_tensors; i++) free(bufs[i]);
    free(bufs);
    bs_checkpoint_close(ck);
    snprintf(path, sizeof path, "%s/%s", dir, BS_DSPARK_V1_FILE);
    if (!rc && json) rc = tu_write_text(path, json);
    if (!rc && !json) {
        size_t len;
        char *txt = bs_read_file(REF "/adapter/" BS_DSPARK_V1_FILE, &len, &err);
        rc = txt ? tu_write_text(path, txt) : -1;
        free(txt);
    }
    return rc;
}

// Opening dir for e must fail with a message containing every one of the words (NULL-terminated).
static void expect_open_error(int *failed_, bs_engine *e, const char *dir, const char *what, const char *const *words) {
    bs_err err = {0};
    bs_drafter *d = NULL;
    int rc = bs_drafter_open(&d, dir, e, 64, &err);
    if (rc == 0) d->free(d);
    CHECK(rc != 0, "%s: opened", what);
    for (int i = 0; words[i]; i++) CHECK(strstr(err.msg, words[i]), "%s: the message does not name '%s': %s", what, words[i], err.msg);
}

static const char *v1_json(char *buf, size_t cap, int G, int D, int L, int nh, int r, int ff, int H, int V, const char *more) {
    snprintf(buf, cap,
             "{\"kind\":\"dspark-drafter\",\"version\":1,\"config\":{\"gamma\":%d,\"dDraft\":%d,\"nLayers\":%d,\"nHeads\":%d,"
             "\"markovRank\":%d,\"ffMult\":%d},\"dims\":{\"hiddenSize\":%d,\"vocabSize\":%d,\"eps\":1e-6}%s}",
             G, D, L, nh, r, ff, H, V, more);
    return buf;
}

TEST(dspark_v1_bad_input) {
    if (access(REF "/dspark_v1.expect.safetensors", R_OK)) SKIP(REF " is missing");
    bs_err err = {0};
    bs_engine *e;
    CHECK(bs_engine_open(&e, TARGET, "cpu", &err) == 0, "%s", err.msg);
    const char *tmp = bs_test_tmpdir("dsv1");
    CHECK(tmp);
    char dir[600], js[1024];
    snprintf(dir, sizeof dir, "%s/a", tmp);
    CHECK(mkdir(dir, 0755) == 0);
    // (the fixture: G 5, D 32, 2 layers, 4 heads, r 8, ffMult 2, H 64, V 256)
    struct { const char *what, *drop, *grow, *dtype, *json; const char *words[4]; } cases[] = {
        { "missing tensor", "markov.w2", NULL, "F32", NULL, { "markov.w2", "missing", "[8, 256]", NULL } },
        { "missing layer tensor", "bb.1.down", NULL, "F32", NULL, { "bb.1.down", "missing", NULL } },
        { "wrong shape", NULL, "conf.w", "F32", NULL, { "conf.w", "[41, 1], expected [40, 1] from", "dspark.json" } },
        { "wrong shape (pos_emb)", NULL, "pos_emb", "F32", NULL, { "pos_emb", NULL } },
        { "dDraft not divisible", NULL, NULL, "F32", v1_json(js, sizeof js, 5, 32, 2, 5, 8, 2, 64, 256, ""), { "config.dDraft", "config.nHeads", "divisible", NULL } },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        CHECK(write_variant(dir, cases[i].drop, cases[i].grow, cases[i].dtype, NULL, cases[i].json) == 0, "writing %s", cases[i].what);
        expect_open_error(failed_, e, dir, cases[i].what, cases[i].words);
        if (*failed_) return;
    }
    // an integer tensor is refused by name
    CHECK(write_variant(dir, NULL, NULL, "I32", "out_norm", NULL) == 0);
    expect_open_error(failed_, e, dir, "integer tensor", (const char *const[]){ "out_norm", "dtype I32", NULL });
    if (*failed_) return;
    // dspark.json against the target, and its fields
    struct { const char *what, *json; const char *words[4]; } jcases[] = {
        { "hidden size", v1_json((char[1024]){0}, 1024, 5, 32, 2, 4, 8, 2, 96, 256, ""), { "dims.hiddenSize", "96", "64", NULL } },
        { "vocabulary", v1_json((char[1024]){0}, 1024, 5, 32, 2, 4, 8, 2, 64, 300, ""), { "dims.vocabSize", "300", "256", NULL } },
        { "version", "{\"kind\":\"dspark-drafter\",\"version\":2,\"config\":{},\"dims\":{}}", { "version", NULL } },
        { "kind", "{\"kind\":\"lora\",\"version\":1,\"config\":{},\"dims\":{}}", { "kind", "dspark-drafter", NULL } },
        { "no config", "{\"kind\":\"dspark-drafter\",\"version\":1,\"dims\":{}}", { "config", NULL } },
        { "missing gamma", "{\"config\":{\"dDraft\":32,\"nLayers\":2,\"nHeads\":4,\"markovRank\":8,\"ffMult\":2},"
                           "\"dims\":{\"hiddenSize\":64,\"vocabSize\":256,\"eps\":1e-6}}", { "config.gamma", "missing", NULL } },
        { "fractional nHeads", "{\"config\":{\"gamma\":5,\"dDraft\":32,\"nLayers\":2,\"nHeads\":4.5,\"markovRank\":8,\"ffMult\":2},"
                               "\"dims\":{\"hiddenSize\":64,\"vocabSize\":256,\"eps\":1e-6}}", { "config.nHeads", "integer", NULL } },
        { "missing eps", "{\"config\":{\"gamma\":5,\"dDraft\":32,\"nLayers\":2,\"nHeads\":4,\"markovRank\":8,\"ffMult\":2},"
                         "\"dims\":{\"hiddenSize\":64,\"vocabSize\":256}}", { "dims.eps", NULL } },
        { "gamma too large", v1_json((char[1024]){0}, 1024, 65, 32, 2, 4, 8, 2, 64, 256, ""), { "config.gamma", NULL } },
        { "not JSON", "{\"config\": ", { BS_DSPARK_V1_FILE, NULL } },
    };
    for (size_t i = 0; i < sizeof jcases / sizeof *jcases; i++) {
        CHECK(write_variant(dir, NULL, NULL, "F32", NULL, jcases[i].json) == 0, "writing %s", jcases[i].what);
        expect_open_error(failed_, e, dir, jcases[i].what, jcases[i].words);
        if (*failed_) return;
    }
    // Stored dtypes: BF16 and F16 weights load and draft close to the F32 ones (their rounding apart).
    float *ref = NULL;
    const char *dts[] = { "F32", "BF16", "F16" };
    for (int k = 0; k < 3; k++) {
        CHECK(write_variant(dir, NULL, NULL, dts[k], NULL, NULL) == 0, "writing %s", dts[k]);
        bs_drafter_ctx dc;
        int32_t prompt[6] = { 3, 1, 4, 1, 5, 9 };
        bs_drafter *d = tu_drafter_with_context(e, dir, NULL, &dc, prompt, 6, &err);
        CHECK(d, "%s: %s", dts[k], err.msg);
        const bs_dspark_v1_config *c = bs_dspark_v1_config_of(d);
        int n = c->gamma, V = e->cfg.vocab_size;
        float *L = malloc(sizeof(float) * n * V);
        bs_dspark_v1_inspect ins = { .base_logits = L };
        bs_draft dr;
        CHECK(bs_dspark_v1_forward_block(d, &dc, 2, n, NULL, NULL, &dr, &ins, &err) == 0 && dr.n == n, "%s: %s", dts[k], err.msg);
        if (!ref) ref = L;
        else {
            double diff = fx_max_abs_diff(L, ref, (long)n * V);
            printf("  %s weights: base logits within %.3g of F32's\n", dts[k], diff);
            CHECK(diff < 0.1, "%s weights: base logits %g from F32's", dts[k], diff);
            free(L);
        }
        tu_drafter_free(d, &dc);
    }
    free(ref);
    // A propose before any context row: the drafter has no context vector.
    {
        bs_drafter *d;
        bs_drafter_ctx dc;
        bs_draft dr;
        CHECK(bs_drafter_open(&d, REF "/adapter", e, 64, &err) == 0, "%s", err.msg);
        CHECK(bs_drafter_ctx_init(d, &dc, 64, &err) == 0, "%s", err.msg);
        CHECK(d->propose(d, &dc, 1, 4, NULL, NULL, &dr, &err) != 0 && strstr(err.msg, "hidden state"), "no context: %s", err.msg);
        CHECK(d->propose(d, &dc, 999, 4, NULL, NULL, &dr, &err) != 0 && strstr(err.msg, "anchor"), "bad anchor: %s", err.msg);
        tu_drafter_free(d, &dc);
    }
    bs_engine_close(e);
}

// gelu_mul (the op the Gemma-4 target added) is the seed's geluApprox: MLX's gelu_approx in double, on both CPU backends.
TEST(dspark_v1_gelu_mul_op) {
    const char *devs[] = { "cpu", "cpu-ref" };
    for (int b = 0; b < 2; b++) {
        bs_err err = {0};
        bs_backend *be = bs_backend_by_name(devs[b], &err);
        CHECK(be && be->gelu_mul, "%s: %s", devs[b], err.msg);
        enum { N = 41 };
        float g[N], u[N], h[N];
        for (int i = 0; i < N; i++) { g[i] = -6.0f + 0.3f * i; u[i] = 0.5f + 0.05f * i; }
        be->gelu_mul(be, h, g, u, N);
        for (int i = 0; i < N; i++) {
            double x = g[i], want = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))) * u[i];
            CHECK_NEAR(h[i], want, 1e-6 * fabs(want) + 1e-7, "%s: gelu_mul(%g, %g)", devs[b], g[i], u[i]);
        }
        be->gelu_mul(be, g, g, u, N);   // in place (h aliasing gate)
        CHECK(!memcmp(g, h, sizeof h), "%s: gelu_mul in place differs", devs[b]);
        be->destroy(be);
    }
}

// A calibration.json beside the adapter scales its confidence logits (c_k = sigmoid(z_k / T_k + b_k),
// docs/calibration.md), as for DeepSpec's DSpark; --no-calibration (no_calibration) keeps the raw ones; a file
// for another number of positions is refused.
TEST(dspark_v1_calibration) {
    if (access(REF "/dspark_v1.expect.safetensors", R_OK)) SKIP(REF " is missing");
    bs_err err = {0};
    bs_engine *e;
    CHECK(bs_engine_open(&e, TARGET, "cpu", &err) == 0, "%s", err.msg);
    const char *tmp = bs_test_tmpdir("dsv1cal");
    CHECK(tmp);
    char dir[600], cal[700];
    snprintf(dir, sizeof dir, "%s/a", tmp);
    snprintf(cal, sizeof cal, "%s/calibration.json", dir);
    CHECK(mkdir(dir, 0755) == 0 && write_variant(dir, NULL, NULL, "F32", NULL, NULL) == 0);
    CHECK(tu_write_text(cal, "{\"version\": 1, \"temperatures\": [2, 2, 0.5, 1, 4], \"biases\": [0, 0.5, 0, -1, 0]}") == 0);
    const float T[5] = { 2, 2, 0.5f, 1, 4 }, b[5] = { 0, 0.5f, 0, -1, 0 };
    int32_t prompt[6] = { 3, 1, 4, 1, 5, 9 };
    for (int raw = 0; raw < 2; raw++) {
        bs_drafter_opts o = { .lossy_weights = -1, .no_calibration = raw };
        bs_drafter_ctx dc;
        bs_drafter *d = tu_drafter_with_context(e, dir, &o, &dc, prompt, 6, &err);
        CHECK(d, "%s", err.msg);
        float z[BS_MAX_DRAFT];
        bs_dspark_v1_inspect ins = { .conf_logits = z };
        bs_draft dr;
        CHECK(bs_dspark_v1_forward_block(d, &dc, 7, 5, NULL, NULL, &dr, &ins, &err) == 0 && dr.n == 5 && dr.has_conf, "%s", err.msg);
        for (int k = 0; k < 5; k++) {
            double want = 1 / (1 + exp(-(raw ? z[k] : z[k] / T[k] + b[k])));
            CHECK_NEAR(dr.conf[k], want, 1e-6, "%s confidence %d", raw ? "raw" : "calibrated", k);
        }
        tu_drafter_free(d, &dc);
    }
    CHECK(tu_write_text(cal, "{\"version\": 1, \"temperatures\": [2, 2]}") == 0);
    const char *words[] = { "calibration.json", NULL };
    expect_open_error(failed_, e, dir, "calibration for 2 positions", words);
    bs_engine_close(e);
}

// ---- a Gemma-4 target (tests/ref/gemma4, docs/gemma4.md): the adapter attaches as to any target -------------

#define GEMMA4_SPEC "tests/ref/gemma4/gemma4_spec"   // vocabulary 8, H 32, final_logit_softcapping 2, tied, PLE
#define GEMMA4_TEXT "tests/ref/gemma4/gemma4_text"

// A random DSpark v1 adapter (make-random, bf16) for the target in target_dir, written to a fresh folder in *out.
static int make_v1_for(const char *target_dir, int G, char out[600]) {
    bs_err err = {0};
    bs_qwen3_config c;
    const char *tmp = bs_test_tmpdir("dsv1g");
    if (!tmp || bs_qwen3_config_load(&c, target_dir, &err)) return -1;
    char cfg[700], cmd[2000];
    snprintf(cfg, sizeof cfg, "%s/v1.json", tmp);
    snprintf(out, 600, "%s/v1", tmp);
    if (write_v1_json(cfg, c.hidden_size, c.vocab_size, G, 32, 2, 4, 8, 2, target_dir)) return -1;
    snprintf(cmd, sizeof cmd, "%s make-random -c %s --out %s --seed 9 > /dev/null", bs_cli_path(), cfg, out);
    return system(cmd) == 0 ? 0 : -1;
}

// U_k is the Gemma-4 target's own logit of out_proj(h_k): its (tied) head, then its soft-cap, recomputed here on
// the host from the checkpoint's table; the context vector is the target's tap after its final norm.
static void gemma4_head(int *failed_, const char *dev) {
    if (access(GEMMA4_SPEC "/config.json", R_OK)) SKIP("no Gemma-4 reference target in tests/ref/gemma4");
    char v1[600];
    CHECK(make_v1_for(GEMMA4_SPEC, 5, v1) == 0, "make-random failed");
    bs_err err = {0};
    bs_engine *e;
    CHECK(bs_engine_open(&e, GEMMA4_SPEC, dev, &err) == 0, "%s", err.msg);
    float cap = e->cfg.gemma.final_softcap;
    CHECK(cap > 0, "the fixture target has no soft-cap");
    int32_t prompt[7] = { 1, 5, 2, 7, 3, 3, 6 };
    bs_drafter_ctx dc;
    bs_drafter *d = tu_drafter_with_context(e, v1, NULL, &dc, prompt, 7, &err);
    CHECK(d, "%s", err.msg);
    CHECK(d->taps[0] == e->cfg.n_layers, "tap %d, want %d (after the final norm)", d->taps[0], e->cfg.n_layers);
    int H = e->cfg.hidden_size, V = e->cfg.vocab_size, n = d->max_drafts;
    float *hin = malloc(sizeof(float) * n * H), *U = malloc(sizeof(float) * n * V), *row = malloc(sizeof(float) * H);
    bs_dspark_v1_inspect ins = { .head_in = hin, .base_logits = U };
    bs_draft dr;
    CHECK(bs_dspark_v1_forward_block(d, &dc, 4, n, NULL, NULL, &dr, &ins, &err) == 0 && dr.n == n, "%s", err.msg);
    double worst = 0, raw_max = 0;
    for (int k = 0; k < n; k++)
        for (int v = 0; v < V; v++) {
            bs_mat_row_f32(&e->target.lm_head_host, v, row);
            double dot = 0;
            for (int i = 0; i < H; i++) dot += (double)row[i] * hin[(size_t)k * H + i];
            double want = cap * tanh(dot / cap), diff = fabs(want - U[(size_t)k * V + v]);
            if (diff > worst) worst = diff;
            if (fabs(dot) > raw_max) raw_max = fabs(dot);
        }
    printf("  gemma4_spec on %s: U_k within %.2g of cap * tanh(head / cap) (cap %g, raw head logits up to %.3g)\n", dev, worst, cap, raw_max);
    CHECK(worst < 1e-4, "U_k is not the target's soft-capped head: %g", worst);
    free(hin); free(U); free(row);
    tu_drafter_free(d, &dc);
    bs_engine_close(e);
}
TEST(dspark_v1_gemma4_head) { gemma4_head(failed_, "cpu"); }
TEST(dspark_v1_gemma4_head_cuda) {
    NEED_CUDA_DEVICE();
    gemma4_head(failed_, "cuda");
}

static void gemma4_greedy(int *failed_, const char *dev) {
    if (access(GEMMA4_SPEC "/config.json", R_OK)) SKIP("no Gemma-4 reference targets in tests/ref/gemma4");
    const char *targets[] = { GEMMA4_SPEC, GEMMA4_TEXT };
    for (int t = 0; t < 2; t++) {
        char v1[600];
        CHECK(make_v1_for(targets[t], 4 + t, v1) == 0, "make-random failed");
        tu_greedy_spec_equals_plain(failed_, dev, targets[t], v1, NULL, 8, 50 + t);
        if (*failed_) return;
    }
}
TEST(dspark_v1_gemma4_greedy_spec_equals_plain) { gemma4_greedy(failed_, "cpu"); }
TEST(dspark_v1_gemma4_greedy_spec_equals_plain_cuda) {
    NEED_CUDA_DEVICE();
    gemma4_greedy(failed_, "cuda");
}

// Sampling with a Gemma-4 target (vocabulary 8, soft-capped logits): the first three tokens are distributed as
// the target's, with the walk's q.
static void gemma4_sampling(int *failed_, const char *dev, long runs) {
    if (access(GEMMA4_SPEC "/config.json", R_OK)) SKIP("no Gemma-4 reference target in tests/ref/gemma4");
    char v1[600];
    CHECK(make_v1_for(GEMMA4_SPEC, 4, v1) == 0, "make-random failed");
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, GEMMA4_SPEC, dev, &err) == 0, "%s", err.msg);
    bs_sampling cfgs[] = { { 1.0f, 0, 1.0f, 0 }, { 0.7f, 5, 0.9f, 0 } };
    for (int c = 0; c < 2; c++) {
        bs_drafter *d;
        CHECK(bs_drafter_open(&d, v1, e, 64, &err) == 0, "%s", err.msg);
        double ar = 0; long imp = 0;
        double pv = tu_spec_sampling_pvalue(e, d, &cfgs[c], runs, &ar, &imp);
        d->free(d);
        printf("  %s gemma4_spec + dspark v1, T=%.1f top_k=%d top_p=%.1f: p-value %.3g, draft acceptance %.2f\n", dev, cfgs[c].temperature,
               cfgs[c].top_k, cfgs[c].top_p, pv, ar);
        CHECK(pv >= 0, "a run failed");
        CHECK(imp == 0, "%ld draws of impossible outcomes", imp);
        CHECK(ar > 0.02, "acceptance %.2f: the drafts are never accepted, the test checks little", ar);
        CHECK(pv > 1e-4, "sampling with a Gemma-4 target and the DSpark v1 walk's q is not distributed as the target (p = %g)", pv);
    }
    bs_engine_close(e);
}
TEST(dspark_v1_gemma4_sampling_lossless) { gemma4_sampling(failed_, "cpu-ref", 10000); }
TEST(dspark_v1_gemma4_sampling_lossless_cuda) {
    NEED_CUDA_DEVICE();
    gemma4_sampling(failed_, "cuda", 6000);
}

// The seed's fresh adapter (initFromDims): W2 = 0, so the walk is the pure parallel DFlash baseline (L_k = U_k
// exactly, drafts = argmax U_k), and conf.w = conf.b = 0, so every c_k = 0.5.
TEST(dspark_v1_fresh_init) {
    if (access(REF "/dspark_v1.expect.safetensors", R_OK)) SKIP(REF " is missing");
    bs_err err = {0};
    bs_engine *e;
    CHECK(bs_engine_open(&e, TARGET, "cpu", &err) == 0, "%s", err.msg);
    const char *tmp = bs_test_tmpdir("dsv1fresh");
    CHECK(tmp);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/a", tmp);
    CHECK(mkdir(dir, 0755) == 0);
    zero_tensors = " markov.w2 conf.w conf.b ";
    int rc = write_variant(dir, NULL, NULL, "F32", NULL, NULL);
    zero_tensors = NULL;
    CHECK(rc == 0);
    int32_t prompt[5] = { 9, 8, 7, 6, 5 };
    bs_drafter_ctx dc;
    bs_drafter *d = tu_drafter_with_context(e, dir, NULL, &dc, prompt, 5, &err);
    CHECK(d, "%s", err.msg);
    int n = d->max_drafts, V = e->cfg.vocab_size;
    float *U = malloc(sizeof(float) * n * V), *L = malloc(sizeof(float) * n * V);
    bs_dspark_v1_inspect ins = { .base_logits = U, .step_logits = L };
    bs_draft dr;
    CHECK(bs_dspark_v1_forward_block(d, &dc, 11, n, NULL, NULL, &dr, &ins, &err) == 0 && dr.n == n, "%s", err.msg);
    CHECK(!memcmp(U, L, sizeof(float) * n * V), "W2 = 0 but the walk moved the logits");
    for (int k = 0; k < n; k++) {
        CHECK(dr.tokens[k] == bs_argmax(U + (size_t)k * V, V), "draft %d is not argmax U_%d", k, k);
        CHECK(dr.conf[k] == 0.5f, "c_%d = %g with a zero confidence head", k, dr.conf[k]);
    }
    free(U); free(L);
    tu_drafter_free(d, &dc);
    bs_engine_close(e);
}
