// Drafter configs and loading: z-lab's default taps, config variants (block_size inside dflash_config,
// top-level rope_theta, absent ids), and every refusal a user can hit (unknown architecture, mask id outside
// the vocabulary, tap ids out of range, missing tensors, a drafter for another target).
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "harness.h"
#include "fixture_util.h"
#include "engine/engine.h"
#include "io/json.h"
#include "model/dflash.h"

TEST(drafter_build_target_layer_ids) {
    struct { int lt, ld, ids[8]; } cases[] = {
        { 36, 5, { 1, 9, 17, 25, 33 } }, { 40, 5, { 1, 10, 19, 28, 37 } }, { 27, 5, { 1, 7, 12, 18, 24 } },
        { 36, 1, { 18 } }, { 6, 3, { 1, 2, 3 } }, { 64, 5, { 1, 16, 31, 46, 61 } },
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int out[8];
        bs_build_target_layer_ids(cases[c].lt, cases[c].ld, out);
        for (int i = 0; i < cases[c].ld; i++)
            CHECK(out[i] == cases[c].ids[i], "(%d,%d)[%d] = %d, expected %d", cases[c].lt, cases[c].ld, i, out[i], cases[c].ids[i]);
    }
}

// A temp folder (removed when the test ends) holding a modified copy of a fixture's config.json and a link
// to its weights.
static int variant(char *dir, size_t cap, const char *fixture, void (*edit)(cJSON *), bs_err *err) {
    char src[1024], path[1200];
    const char *tmp = bs_test_tmpdir("drafter_cfg");
    if (!tmp) return bs_fail(err, "cannot make a temp folder");
    snprintf(dir, cap, "%s", tmp);
    snprintf(src, sizeof src, "%s/%s/config.json", bs_fixtures_dir(), fixture);
    cJSON *root = bs_json_load(src, err);
    if (!root) return -1;
    edit(root);
    char *txt = cJSON_Print(root);
    cJSON_Delete(root);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) { free(txt); return bs_fail(err, "cannot write %s", path); }
    fputs(txt, f); fclose(f); free(txt);
    char ws[1024], abs_ws[4096];
    snprintf(ws, sizeof ws, "%s/%s/model.safetensors", bs_fixtures_dir(), fixture);
    if (!realpath(ws, abs_ws)) return bs_fail(err, "no %s", ws);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (symlink(abs_ws, path)) return bs_fail(err, "symlink failed");
    return 0;
}

static cJSON *dc_of(cJSON *r) { return cJSON_GetObjectItemCaseSensitive(r, "dflash_config"); }
static void ed_block_nested(cJSON *r) { cJSON_DeleteItemFromObject(r, "block_size"); cJSON_AddNumberToObject(dc_of(r), "block_size", 8); }
static void ed_rope_top(cJSON *r) { cJSON_DeleteItemFromObject(r, "rope_parameters"); cJSON_AddNumberToObject(r, "rope_theta", 10000.0); }
static void ed_no_ids(cJSON *r) { cJSON_DeleteItemFromObject(dc_of(r), "target_layer_ids"); }
static void ed_arch(cJSON *r) { cJSON_ReplaceItemInArray(cJSON_GetObjectItemCaseSensitive(r, "architectures"), 0, cJSON_CreateString("EagleDraftModel")); }
static void ed_mask_big(cJSON *r) { cJSON_ReplaceItemInObject(dc_of(r), "mask_token_id", cJSON_CreateNumber(384)); }
static void ed_mask_big_ds(cJSON *r) { cJSON_ReplaceItemInObject(r, "mask_token_id", cJSON_CreateNumber(1000)); }
static void ed_tap_big(cJSON *r) {
    cJSON *ids = cJSON_CreateArray();
    cJSON_AddItemToArray(ids, cJSON_CreateNumber(0)); cJSON_AddItemToArray(ids, cJSON_CreateNumber(4));
    cJSON_ReplaceItemInObject(dc_of(r), "target_layer_ids", ids);
}
static void ed_tap_beyond_target(cJSON *r) {   // in range for num_target_layers 8, beyond the 4-layer target
    ed_tap_big(r);
    cJSON_ReplaceItemInObject(r, "num_target_layers", cJSON_CreateNumber(8));
}
static void ed_tap_neg(cJSON *r) {
    cJSON *ids = cJSON_CreateArray();
    cJSON_AddItemToArray(ids, cJSON_CreateNumber(-1)); cJSON_AddItemToArray(ids, cJSON_CreateNumber(2));
    cJSON_ReplaceItemInObject(dc_of(r), "target_layer_ids", ids);
}
static void ed_no_ntl(cJSON *r) { cJSON_DeleteItemFromObject(r, "num_target_layers"); }
static void ed_layers3(cJSON *r) {
    cJSON_ReplaceItemInObject(r, "num_hidden_layers", cJSON_CreateNumber(3));
    cJSON_DeleteItemFromObject(r, "layer_types");
}
static void ed_markov_bad(cJSON *r) { cJSON_ReplaceItemInObject(r, "markov_head_type", cJSON_CreateString("transformer")); }
static void ed_ds_neg_tap(cJSON *r) {
    cJSON *ids = cJSON_CreateArray();
    cJSON_AddItemToArray(ids, cJSON_CreateNumber(-1)); cJSON_AddItemToArray(ids, cJSON_CreateNumber(2));
    cJSON_ReplaceItemInObject(r, "target_layer_ids", ids);
}
static void ed_sliding(cJSON *r) {
    cJSON_ReplaceItemInObject(r, "use_sliding_window", cJSON_CreateBool(1));
    cJSON_ReplaceItemInObject(r, "sliding_window", cJSON_CreateNumber(4));
    cJSON *lt = cJSON_CreateArray();
    cJSON_AddItemToArray(lt, cJSON_CreateString("sliding_attention")); cJSON_AddItemToArray(lt, cJSON_CreateString("full_attention"));
    cJSON_ReplaceItemInObject(r, "layer_types", lt);
}

// Opens the fixture target, and returns the error (if any) of opening `dir` as its drafter.
static int try_open(const char *dir, bs_err *err, bs_engine **e_out, bs_drafter **d_out) {
    char tdir[1024];
    snprintf(tdir, sizeof tdir, "%s/target", bs_fixtures_dir());
    bs_engine *e;
    if (bs_engine_open(&e, tdir, "cpu", err)) return -2;
    bs_drafter *d = NULL;
    int rc = bs_dflash_open(&d, dir, &e->target, 128, err);
    if (e_out && !rc) { *e_out = e; *d_out = d; return 0; }
    if (d) d->free(d);
    bs_engine_close(e);
    return rc;
}

// Draft tokens of the fixture's prompt through a (variant) drafter folder.
static int draft_tokens(const char *dir, int32_t *tokens, int *n, float *hidden, bs_err *err) {
    bs_engine *e; bs_drafter *d;
    if (try_open(dir, err, &e, &d)) return -1;
    char file[1024];
    snprintf(file, sizeof file, "%s/target.expect.safetensors", bs_fixtures_dir());
    bs_checkpoint *tx;
    if (bs_checkpoint_open(&tx, file, err)) return -1;
    long P;
    const int32_t *prompt = fx_tensor(tx, "prompt_ids", "I32", -1, &P);
    int V = e->cfg.vocab_size, H = e->cfg.hidden_size;
    bs_kv_cache kv;
    bs_kv_init(&kv, e->kv_pool, 128, err);
    float *logits = malloc(sizeof(float) * P * V), *feat = malloc(sizeof(float) * P * d->n_taps * H);
    bs_fwd_out fo = { .logits = logits, .taps = d->taps, .n_taps = d->n_taps, .tap_out = feat };
    bs_drafter_ctx dc = { 0 };
    int rc = bs_drafter_ctx_init(d, &dc, 128, err) || bs_qwen3_forward(&e->target, &kv, prompt, (int)P, &fo, err) ||
             d->add_context(d, &dc, feat, (int)P, err);
    bs_draft dr;
    bs_dflash_inspect ins = { .block_hidden = hidden };
    if (!rc) rc = bs_dflash_forward_block(d, &dc, bs_argmax(logits, V), BS_MAX_DRAFT, NULL, NULL, &dr, &ins, err);
    if (!rc) { memcpy(tokens, dr.tokens, sizeof(int32_t) * dr.n); *n = dr.n; }
    free(logits); free(feat); bs_kv_free(&kv); bs_drafter_ctx_free(d, &dc); d->free(d); bs_engine_close(e); bs_checkpoint_close(tx);
    return rc ? -1 : 0;
}

TEST(drafter_config_variants_same_result) {
    bs_err err = {0};
    char ref[1024], dir[256];
    int32_t t0[BS_MAX_DRAFT], t1[BS_MAX_DRAFT]; int n0, n1;
    float h0[8 * 64], h1[8 * 64];
    snprintf(ref, sizeof ref, "%s/dflash", bs_fixtures_dir());
    CHECK(draft_tokens(ref, t0, &n0, h0, &err) == 0, "%s", err.msg);
    void (*edits[])(cJSON *) = { ed_block_nested, ed_rope_top };
    for (size_t i = 0; i < sizeof edits / sizeof *edits; i++) {
        CHECK(variant(dir, sizeof dir, "dflash", edits[i], &err) == 0, "%s", err.msg);
        bs_drafter_config c;
        CHECK(bs_drafter_config_load(&c, dir, &err) == 0, "%s", err.msg);
        CHECK(c.block_size == 8 && c.mask_token_id == 383 && c.base.rope_theta == 10000.0f && c.n_taps == 2);
        CHECK(draft_tokens(dir, t1, &n1, h1, &err) == 0, "%s", err.msg);
        CHECK(n1 == n0 && memcmp(t0, t1, sizeof(int32_t) * n0) == 0, "variant %zu drafts differ", i);
        CHECK(memcmp(h0, h1, sizeof h0) == 0, "variant %zu hidden differs", i);
    }
    // Absent ids: z-lab's default spread for (num_target_layers 4, 2 layers) = [1, 1].
    CHECK(variant(dir, sizeof dir, "dflash", ed_no_ids, &err) == 0, "%s", err.msg);
    bs_drafter_config c;
    CHECK(bs_drafter_config_load(&c, dir, &err) == 0, "%s", err.msg);
    CHECK(c.taps_defaulted && c.n_taps == 2 && c.target_layer_ids[0] == 1 && c.target_layer_ids[1] == 1);
    CHECK(draft_tokens(dir, t1, &n1, h1, &err) == 0, "%s", err.msg);
    // DeepSpec allows -1 (the embeddings).
    CHECK(variant(dir, sizeof dir, "dspark", ed_ds_neg_tap, &err) == 0, "%s", err.msg);
    CHECK(bs_drafter_config_load(&c, dir, &err) == 0, "%s", err.msg);
    CHECK(c.target_layer_ids[0] == -1);
    CHECK(draft_tokens(dir, t1, &n1, h1, &err) == 0, "%s", err.msg);
}

// Sliding layers: block rows see the last W context rows (MLX semantics): a different result than full
// attention over a 12-row context with W = 4.
TEST(drafter_sliding_window) {
    bs_err err = {0};
    char ref[1024], dir[256];
    int32_t t0[BS_MAX_DRAFT], t1[BS_MAX_DRAFT]; int n0, n1;
    float h0[8 * 64], h1[8 * 64];
    snprintf(ref, sizeof ref, "%s/dflash", bs_fixtures_dir());
    CHECK(draft_tokens(ref, t0, &n0, h0, &err) == 0, "%s", err.msg);
    CHECK(variant(dir, sizeof dir, "dflash", ed_sliding, &err) == 0, "%s", err.msg);
    bs_drafter_config c;
    CHECK(bs_drafter_config_load(&c, dir, &err) == 0, "%s", err.msg);
    CHECK(c.layer_window[0] == 4 && c.layer_window[1] == 0);
    CHECK(draft_tokens(dir, t1, &n1, h1, &err) == 0, "%s", err.msg);
    CHECK(fx_max_abs_diff(h0, h1, 8 * 64) > 1e-3, "window had no effect");
}

static void expect_error(int *failed_, const char *fixture, void (*edit)(cJSON *), const char *want1, const char *want2) {
    bs_err err = {0};
    char dir[256];
    CHECK(variant(dir, sizeof dir, fixture, edit, &err) == 0, "%s", err.msg);
    int rc = try_open(dir, &err, NULL, NULL);
    CHECK(rc == -1, "opening must fail (rc %d: %s)", rc, err.msg);
    CHECK(strstr(err.msg, want1), "message lacks '%s': %s", want1, err.msg);
    if (want2) CHECK(strstr(err.msg, want2), "message lacks '%s': %s", want2, err.msg);
    CHECK(strstr(err.msg, dir), "message does not name the folder: %s", err.msg);
}

TEST(drafter_error_unknown_architecture) { expect_error(failed_, "dflash", ed_arch, "architectures[0]", "EagleDraftModel"); }
TEST(drafter_error_mask_outside_vocab) { expect_error(failed_, "dflash", ed_mask_big, "mask_token_id", "outside the vocabulary"); }
TEST(drafter_error_mask_outside_vocab_deepspec) { expect_error(failed_, "dspark", ed_mask_big_ds, "mask_token_id", "outside the vocabulary"); }
TEST(drafter_error_tap_out_of_range) { expect_error(failed_, "dflash", ed_tap_big, "target_layer_ids", "out of range"); }
TEST(drafter_error_tap_negative_zlab) { expect_error(failed_, "dflash", ed_tap_neg, "target_layer_ids", "out of range"); }
TEST(drafter_error_tap_beyond_target) { expect_error(failed_, "dflash", ed_tap_beyond_target, "target_layer_ids", "only 4 layers"); }
TEST(drafter_error_num_target_layers_missing) { expect_error(failed_, "dflash", ed_no_ntl, "num_target_layers", NULL); }
TEST(drafter_error_missing_tensor) { expect_error(failed_, "dflash", ed_layers3, "missing tensor", "layers.2."); }
TEST(drafter_error_markov_type) { expect_error(failed_, "dspark", ed_markov_bad, "markov_head_type", "transformer"); }

// A drafter for another target: the fixture drafters against random targets of another width / vocabulary.
static void ed_hidden(cJSON *r) { cJSON_ReplaceItemInObject(r, "hidden_size", cJSON_CreateNumber(32)); }
static void ed_vocab(cJSON *r) { cJSON_ReplaceItemInObject(r, "vocab_size", cJSON_CreateNumber(400)); }

static void other_target(int *failed_, void (*edit)(cJSON *), const char *which, const char *want) {
    bs_err err = {0};
    char src[1024], cfg[1200], cmd[4096], ddir[1024];
    const char *tmpl = bs_test_tmpdir("drafter_tgt");
    CHECK(tmpl);
    snprintf(src, sizeof src, "%s/target/config.json", bs_fixtures_dir());
    cJSON *root = bs_json_load(src, &err);
    CHECK(root, "%s", err.msg);
    edit(root);
    char *txt = cJSON_Print(root);
    cJSON_Delete(root);
    snprintf(cfg, sizeof cfg, "%s/config.json.in", tmpl);
    FILE *f = fopen(cfg, "w");
    CHECK(f);
    fputs(txt, f); fclose(f); free(txt);
    snprintf(cmd, sizeof cmd, "%s make-random -c %s --out %s/m --seed 3", bs_cli_path(), cfg, tmpl);
    CHECK(system(cmd) == 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "%s/m", tmpl);
    bs_engine *e;
    CHECK(bs_engine_open(&e, cmd, "cpu", &err) == 0, "%s", err.msg);
    snprintf(ddir, sizeof ddir, "%s/%s", bs_fixtures_dir(), which);
    bs_drafter *d = NULL;
    int rc = bs_dflash_open(&d, ddir, &e->target, 64, &err);
    if (d) d->free(d);
    bs_engine_close(e);
    CHECK(rc != 0, "a drafter for another target must be refused");
    CHECK(strstr(err.msg, want) && strstr(err.msg, "another target"), "unclear message: %s", err.msg);
}

TEST(drafter_error_other_target_hidden) { other_target(failed_, ed_hidden, "dflash", "hidden_size"); }
TEST(drafter_error_other_target_vocab) { other_target(failed_, ed_vocab, "dflash", "vocab_size"); }
TEST(drafter_error_other_target_vocab_dspark) { other_target(failed_, ed_vocab, "dspark", "vocab_size"); }

// The example configs under bench/configs parse to the shapes they describe.
TEST(drafter_bench_configs) {
    struct { const char *file; int arch, B, H, taps[5], r; } cases[] = {
        { "qwen3-0.6b-dflash-b16", BS_DRAFTER_ZLAB, 16, 1024, { 1, 7, 13, 19, 25 }, 0 },
        { "qwen3-0.6b-dspark-b7", BS_DRAFTER_DEEPSPEC, 7, 1024, { 1, 7, 13, 19, 25 }, 256 },
        { "qwen3-8b-dflash-b16", BS_DRAFTER_ZLAB, 16, 4096, { 1, 9, 17, 25, 33 }, 0 },
        { "qwen3-8b-dspark-b7", BS_DRAFTER_DEEPSPEC, 7, 4096, { 1, 9, 17, 25, 33 }, 256 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char path[256];
        bs_err err = {0};
        snprintf(path, sizeof path, "bench/configs/%s.json", cases[i].file);
        if (access(path, R_OK)) SKIP("bench/configs not found (run from the repository root)");
        cJSON *root = bs_json_load(path, &err);
        CHECK(root, "%s", err.msg);
        bs_drafter_config c;
        int rc = bs_drafter_config_parse(&c, root, path, &err);
        cJSON_Delete(root);
        CHECK(rc == 0, "%s", err.msg);
        CHECK(c.arch == cases[i].arch && c.block_size == cases[i].B && c.base.hidden_size == cases[i].H && c.markov_rank == cases[i].r, "%s", path);
        CHECK(c.mask_token_id == 151669 && c.n_taps == 5 && c.base.n_layers == 5 && c.base.rope_theta == 1e6f, "%s", path);
        for (int t = 0; t < 5; t++) CHECK(c.target_layer_ids[t] == cases[i].taps[t], "%s tap %d", path, t);
        if (c.arch == BS_DRAFTER_DEEPSPEC) CHECK(c.markov_type == BS_MARKOV_VANILLA && c.conf_head && c.conf_with_markov, "%s", path);
        int def[5];
        bs_build_target_layer_ids(c.num_target_layers, 5, def);
        CHECK(memcmp(def, c.target_layer_ids, sizeof def) == 0, "%s: taps are not the default spread", path);
    }
}
