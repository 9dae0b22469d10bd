// DeepSpec's Gemma-4 DSpark drafter (Gemma4DSparkModel; docs/gemma4.md, "DSpark drafters"): the reference vectors
// of tests/ref/gemma4/gemma4_dspark{,_spec} (made by tests/ref/make_gemma4_dspark_fixture.py, a standalone PyTorch
// forward written from DeepSpec's gemma4/modeling.py) on cpu-ref, cpu and CUDA (SKIP without a GPU): context
// features, the block's hidden rows, base and Markov-step logits (soft-capped), confidences, greedy drafts; greedy
// speculative == plain and sampled output distributed as the target's on a Gemma-4 target; make-random; config.json
// refusals naming the field.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "harness.h"
#include "engine/engine.h"
#include "fixture_util.h"
#include "test_util_models.h"
#include "io/drafter_config.h"

#define GEMMA4_REF "tests/ref/gemma4"

static void dspark_fixture(int *failed_, const char *dev, const char *target, const char *drafter) {
    char tdir[256], tfile[256], ddir[256], dfile[256];
    snprintf(tdir, sizeof tdir, GEMMA4_REF "/%s", target);
    snprintf(tfile, sizeof tfile, GEMMA4_REF "/%s.expect.safetensors", target);
    snprintf(ddir, sizeof ddir, GEMMA4_REF "/%s", drafter);
    snprintf(dfile, sizeof dfile, GEMMA4_REF "/%s.expect.safetensors", drafter);
    fx_check_drafter_fixture_at(failed_, dev, tdir, tfile, ddir, dfile);
}

TEST(gemma4_dspark_fixture_cpu_reference) { dspark_fixture(failed_, "cpu-ref", "gemma4_text", "gemma4_dspark"); }
TEST(gemma4_dspark_fixture_cpu) { dspark_fixture(failed_, "cpu", "gemma4_text", "gemma4_dspark"); }
TEST(gemma4_dspark_fixture_spec_cpu) { dspark_fixture(failed_, "cpu", "gemma4_spec", "gemma4_dspark_spec"); }
TEST(cuda_gemma4_dspark_fixture) {
    NEED_CUDA_DEVICE();
    dspark_fixture(failed_, "cuda", "gemma4_text", "gemma4_dspark");
    if (*failed_) return;
    dspark_fixture(failed_, "cuda", "gemma4_spec", "gemma4_dspark_spec");
}

// Greedy speculative == plain on the vocabulary-8 Gemma-4 target with its Gemma-4 DSpark drafter; drafts accepted.
static void dspark_spec(int *failed_, const char *dev) {
    bs_err err = {0};
    const char *t = GEMMA4_REF "/gemma4_spec", *d = GEMMA4_REF "/gemma4_dspark_spec";
    tu_greedy_spec_equals_plain(failed_, dev, t, d, NULL, 12, 43);
    if (*failed_) return;
    long accepted, drafted;
    CHECK(tu_spec_acceptance(dev, t, d, 8, 3, 64, &accepted, &drafted, &err) == 0, "%s", err.msg);
    printf("  Gemma4DSparkModel drafter: %ld of %ld drafts accepted\n", accepted, drafted);
    CHECK(accepted > 0, "no draft was ever accepted: the losslessness check only saw rejections");
}
TEST(gemma4_dspark_greedy_spec_equals_plain_cpu) { dspark_spec(failed_, "cpu"); }
TEST(gemma4_dspark_greedy_spec_equals_plain_cpu_reference) { dspark_spec(failed_, "cpu-ref"); }
TEST(cuda_gemma4_dspark_greedy_spec_equals_plain) { NEED_CUDA_DEVICE(); dspark_spec(failed_, "cuda"); }

// With a draft vocabulary (the soft-cap then runs on its rows of the LM head): greedy speculative == plain.
TEST(gemma4_dspark_draft_vocab_greedy) {
    const char *tmp = bs_test_tmpdir("gemma4_dspark_dv");
    CHECK(tmp);
    char vocab[1024];
    snprintf(vocab, sizeof vocab, "%s/dv.json", tmp);
    CHECK(tu_write_text(vocab, "[0, 2, 3, 5, 6]") == 0);
    bs_drafter_opts o = { .lossy_weights = -1, .draft_vocab = vocab };
    tu_greedy_spec_equals_plain(failed_, "cpu", GEMMA4_REF "/gemma4_spec", GEMMA4_REF "/gemma4_dspark_spec", &o, 6, 45);
}

// Sampling (vocabulary 8, soft-capped logits on both sides): the first three tokens are distributed as the target's,
// with the drafter's q (its soft-capped logits plus the Markov bias along the sampled walk).
static void dspark_sampling(int *failed_, const char *dev, long runs) {
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, GEMMA4_REF "/gemma4_spec", dev, &err) == 0, "%s", err.msg);
    bs_sampling cfgs[] = { { 1.0f, 0, 1.0f, 0 }, { 0.7f, 5, 0.9f, 0 } };
    for (int c = 0; c < 2; c++) {
        bs_drafter *d;
        CHECK(bs_drafter_open(&d, GEMMA4_REF "/gemma4_dspark_spec", e, 64, &err) == 0, "%s", err.msg);
        double ar = 0; long imp = 0;
        double pv = tu_spec_sampling_pvalue(e, d, &cfgs[c], runs, &ar, &imp);
        d->free(d);
        printf("  %s gemma4_spec + Gemma4DSparkModel, T=%.1f top_k=%d top_p=%.1f: p-value %.3g, draft acceptance %.2f\n", dev, cfgs[c].temperature,
               cfgs[c].top_k, cfgs[c].top_p, pv, ar);
        CHECK(pv >= 0, "a run failed");
        CHECK(imp == 0, "%ld draws of impossible outcomes", imp);
        CHECK(ar > 0.02, "acceptance %.2f: the drafts are never accepted, the test checks little", ar);
        CHECK(pv > 1e-4, "sampling with the Gemma-4 DSpark drafter's q is not distributed as the target (p = %g)", pv);
    }
    bs_engine_close(e);
}
TEST(gemma4_dspark_sampling_lossless) { dspark_sampling(failed_, "cpu-ref", 6000); }
TEST(cuda_gemma4_dspark_sampling_lossless) { NEED_CUDA_DEVICE(); dspark_sampling(failed_, "cuda", 6000); }

// The fixture's config with one field set (JSON text) or removed (NULL), parsed; returns the parser's status.
static int parse_edited(const char *field, const char *json, bs_drafter_config *c, bs_err *err) {
    char *text = NULL;
    FILE *f = fopen(GEMMA4_REF "/gemma4_dspark/config.json", "rb");
    if (!f) return bs_fail(err, "no fixture config");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = calloc(1, n + 1);
    if (fread(text, 1, n, f) != (size_t)n) n = 0;
    fclose(f);
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) return bs_fail(err, "fixture config does not parse");
    if (field) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, field);
        if (json) cJSON_AddItemToObject(root, field, cJSON_Parse(json));
    }
    int rc = bs_drafter_config_parse(c, root, "config.json", err);
    cJSON_Delete(root);
    return rc;
}

TEST(gemma4_dspark_config) {
    bs_drafter_config c;
    bs_err err = {0};
    CHECK(parse_edited(NULL, NULL, &c, &err) == 0, "%s", err.msg);
    // every layer full: the full layers' head size and K/V heads (k_eq_v: num_global_key_value_heads), no sharing
    CHECK(c.gemma && c.arch == BS_DRAFTER_DEEPSPEC && !strcmp(c.arch_name, "Gemma4DSparkModel"));
    CHECK(c.base.head_dim == 32 && c.base.n_kv_heads == 1 && c.base.n_layers == 2 && c.base.gemma.n_kv_shared == 0, "hd %d kv %d",
          c.base.head_dim, c.base.n_kv_heads);
    CHECK(c.base.gemma.full[0] && c.base.gemma.full[1] && c.base.gemma.final_softcap == 3.0f);
    CHECK(c.block_size == 4 && c.mask_token_id == 4 && c.n_taps == 2 && c.markov_rank == 8 && c.conf_head && c.conf_with_markov);
    // a sliding entry in layer_types does not change DeepSpec's layers (always full attention)
    CHECK(parse_edited("layer_types", "[\"sliding_attention\",\"full_attention\"]", &c, &err) == 0, "%s", err.msg);
    CHECK(c.base.gemma.full[0] && c.base.head_dim == 32 && c.layer_window[0] == 0);
    // without attention_k_eq_v: num_key_value_heads (transformers ignores num_global_key_value_heads then)
    CHECK(parse_edited("attention_k_eq_v", "false", &c, &err) == 0 && c.base.n_kv_heads == 2, "%s", err.msg);
    // num_kv_shared_layers may exceed the drafter's depth (it is the target's)
    CHECK(parse_edited("num_kv_shared_layers", "20", &c, &err) == 0, "%s", err.msg);
    static const struct { const char *field, *json, *named; } bad[] = {
        { "hidden_size_per_layer_input", "8", "hidden_size_per_layer_input" },
        { "num_kv_shared_layers", "1", "use_double_wide_mlp" },      // the drafter's last layer would be double-wide
        { "enable_moe_block", "true", "enable_moe_block" },
        { "hidden_activation", "\"silu\"", "hidden_activation" },
        { "attention_bias", "true", "attention_bias" },
        { "rope_parameters", "{\"sliding_attention\":{\"rope_type\":\"default\",\"rope_theta\":10000.0},"
                             "\"full_attention\":{\"rope_type\":\"yarn\",\"rope_theta\":1e6}}", "rope_parameters.full_attention" },
        { "markov_head_type", "\"lstm\"", "markov_head_type" },
        { "mask_token_id", "128", "mask_token_id" },
        { "block_size", NULL, "block_size" },
        { "target_layer_ids", "[1, 6]", "target_layer_ids" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err.msg[0] = 0;
        CHECK(parse_edited(bad[i].field, bad[i].json, &c, &err) != 0, "%s = %s accepted", bad[i].field, bad[i].json ? bad[i].json : "(absent)");
        CHECK(strstr(err.msg, bad[i].named), "%s: error does not name %s: %s", bad[i].field, bad[i].named, err.msg);
    }
}

// make-random writes a Gemma4DSparkModel checkpoint (the spec fixture's config) that loads and stays lossless.
TEST(gemma4_dspark_make_random) {
    const char *tmp = bs_test_tmpdir("gemma4_dspark_random");
    CHECK(tmp);
    char d[1024], *cfg = NULL;
    snprintf(d, sizeof d, "%s/drafter", tmp);
    FILE *f = fopen(GEMMA4_REF "/gemma4_dspark_spec/config.json", "rb");
    CHECK(f, "no fixture config");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    cfg = calloc(1, n + 1);
    CHECK(cfg && fread(cfg, 1, n, f) == (size_t)n);
    fclose(f);
    int rc = tu_make_random_from_config(d, cfg, 7);
    free(cfg);
    CHECK(rc == 0, "make-random of %s failed", d);
    tu_greedy_spec_equals_plain(failed_, "cpu", GEMMA4_REF "/gemma4_spec", d, NULL, 6, 44);
}
