// Gemma-4 text targets (docs/gemma4.md): the reference vectors of tests/ref/gemma4 (README there; made by the
// standalone PyTorch reference tests/ref/make_gemma4_fixture.py, checked against transformers with its
// --check-transformers mode) on cpu-ref, cpu and CUDA (SKIP without a GPU): both checkpoint layouts, sliding and
// full layers with their own head sizes, attention_k_eq_v, KV-shared layers, per-layer embeddings, the soft-cap;
// greedy speculative == plain with random z-lab DFlash and DSpark drafters on a Gemma-4 target; config.json
// refusals naming the field; a Gemma-4 config keeps Qwen3 / Llama layers' shapes untouched.
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
#include "spec/spec_loop.h"

#define GEMMA4_REF "tests/ref/gemma4"

static void gemma4_fixture(int *failed_, const char *name, const char *dev) {
    fx_check_ref_fixture(failed_, dev, GEMMA4_REF, name, "tests/ref/gemma4 has no reference vectors (python3 tests/ref/make_gemma4_fixture.py makes them)");
}

TEST(gemma4_fixture_text_cpu_reference) { gemma4_fixture(failed_, "gemma4_text", "cpu-ref"); }
TEST(gemma4_fixture_text_cpu) { gemma4_fixture(failed_, "gemma4_text", "cpu"); }
TEST(gemma4_fixture_multimodal_layout_cpu_reference) { gemma4_fixture(failed_, "gemma4_mm", "cpu-ref"); }
TEST(gemma4_fixture_multimodal_layout_cpu) { gemma4_fixture(failed_, "gemma4_mm", "cpu"); }
TEST(gemma4_fixture_spec_cpu) { gemma4_fixture(failed_, "gemma4_spec", "cpu"); }
// Gemma-4's real head sizes (256 sliding, 512 full) on a tiny model: the CPU kernels at those widths, and on CUDA
// the wide-head kernels (heads past ATT_MAX_HD, docs/gemma4.md).
TEST(gemma4_fixture_wide_heads_cpu_reference) { gemma4_fixture(failed_, "gemma4_wide", "cpu-ref"); }
TEST(gemma4_fixture_wide_heads_cpu) { gemma4_fixture(failed_, "gemma4_wide", "cpu"); }
TEST(cuda_gemma4_fixture_wide_heads) { NEED_CUDA_DEVICE(); gemma4_fixture(failed_, "gemma4_wide", "cuda"); }
TEST(cuda_gemma4_fixture_text) { NEED_CUDA_DEVICE(); gemma4_fixture(failed_, "gemma4_text", "cuda"); }
TEST(cuda_gemma4_fixture_multimodal_layout) { NEED_CUDA_DEVICE(); gemma4_fixture(failed_, "gemma4_mm", "cuda"); }
TEST(cuda_gemma4_fixture_spec) { NEED_CUDA_DEVICE(); gemma4_fixture(failed_, "gemma4_spec", "cuda"); }

// What the parser reads from the two fixture configs: per-layer shapes, the K/V sources, the layouts.
TEST(gemma4_config_per_layer_shapes) {
    bs_qwen3_config c; bs_err err = {0};
    CHECK(bs_qwen3_config_load(&c, GEMMA4_REF "/gemma4_text", &err) == 0, "%s", err.msg);
    const bs_gemma4_config *g = &c.gemma;
    CHECK(c.arch == BS_ARCH_GEMMA4 && !g->multimodal && c.tie_embeddings);
    CHECK(c.n_layers == 6 && c.head_dim == 16 && g->global_head_dim == 32 && g->global_kv_heads == 1 && g->k_eq_v);
    CHECK(g->sliding_window == 5 && g->ple_dim == 8 && g->n_kv_shared == 2 && g->double_wide_mlp && g->final_softcap == 3.0f);
    CHECK(g->full_partial == 0.25f && g->full_theta == 1e6f && g->sliding_theta == 1e4f);
    static const int full[6] = { 0, 0, 1, 0, 0, 1 }, src[6] = { 0, 1, 2, 3, 3, 2 }, hd[6] = { 16, 16, 32, 16, 16, 32 };
    for (int l = 0; l < 6; l++) {
        CHECK(g->full[l] == full[l] && bs_cfg_layer_kv_source(&c, l) == src[l] && bs_cfg_layer_head_dim(&c, l) == hd[l], "layer %d", l);
        CHECK(bs_cfg_layer_inter(&c, l) == (l >= 4 ? 96 : 48), "layer %d MLP", l);
    }
    CHECK(bs_cfg_max_kv_width(&c) == 32 && bs_cfg_max_q_width(&c) == 128 && bs_cfg_max_inter(&c) == 96);
    CHECK(c.n_eos == 1 && c.eos_ids[0] == 1);
    CHECK(bs_qwen3_config_load(&c, GEMMA4_REF "/gemma4_mm", &err) == 0, "%s", err.msg);
    CHECK(c.arch == BS_ARCH_GEMMA4 && c.gemma.multimodal && c.vocab_size == 96 && c.gemma.global_kv_heads == 1 && !c.gemma.k_eq_v);
    CHECK(c.gemma.final_softcap == 0 && c.gemma.n_kv_shared == 0 && c.gemma.ple_dim == 4);
    // a Qwen3 config: every layer the config's shape
    const char *q = "{\"architectures\":[\"Qwen3ForCausalLM\"],\"vocab_size\":10,\"hidden_size\":8,\"num_hidden_layers\":2,"
                    "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":4,\"intermediate_size\":16}";
    cJSON *root = bs_json_parse(q, strlen(q), "q.json", &err);
    CHECK(root && bs_qwen3_config_parse(&c, root, "q.json", &err) == 0, "%s", err.msg);
    cJSON_Delete(root);
    CHECK(bs_cfg_max_kv_width(&c) == 4 && bs_cfg_max_q_width(&c) == 8 && bs_cfg_max_inter(&c) == 16 && bs_cfg_layer_kv_source(&c, 1) == 1);
}

// A Gemma-4 text config with `extra` spliced in (JSON members, may override), parsed; 0 or -1 with err.
static int parse_gemma(bs_qwen3_config *c, const char *extra, bs_err *err) {
    char text[4096];
    snprintf(text, sizeof text,
             "{\"architectures\":[\"Gemma4ForCausalLM\"],\"model_type\":\"gemma4_text\",\"vocab_size\":64,\"hidden_size\":32,"
             "\"intermediate_size\":48,\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":8,"
             "\"global_head_dim\":16,\"sliding_window\":4,\"hidden_size_per_layer_input\":0%s%s}", *extra ? "," : "", extra);
    cJSON *root = bs_json_parse(text, strlen(text), "config.json", err);
    if (!root) return -1;
    int rc = bs_qwen3_config_parse(c, root, "config.json", err);
    cJSON_Delete(root);
    return rc;
}

TEST(gemma4_config_refusals_name_the_field) {
    static const struct { const char *extra, *want; } bad[] = {
        { "\"enable_moe_block\":true", "enable_moe_block" },
        { "\"hidden_activation\":\"silu\"", "hidden_activation" },
        { "\"attention_bias\":true", "attention_bias" },
        { "\"use_bidirectional_attention\":\"all\"", "use_bidirectional_attention" },
        { "\"layer_types\":[\"sliding_attention\",\"full_attention\"]", "layer_types" },
        { "\"layer_types\":[\"sliding_attention\",\"local\",\"sliding_attention\",\"full_attention\"]", "layer_types[1]" },
        { "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000.0}", "keyed by layer type" },
        { "\"rope_parameters\":{\"sliding_attention\":{\"rope_type\":\"default\",\"rope_theta\":10000.0}}", "rope_parameters.full_attention" },
        { "\"rope_parameters\":{\"sliding_attention\":{\"rope_type\":\"yarn\",\"rope_theta\":10000.0},\"full_attention\":{\"rope_type\":"
          "\"proportional\",\"rope_theta\":1e6}}", "rope_parameters.sliding_attention.rope_type" },
        { "\"rope_parameters\":{\"sliding_attention\":{\"rope_type\":\"default\",\"rope_theta\":10000.0},\"full_attention\":{\"rope_type\":"
          "\"proportional\",\"rope_theta\":1e6,\"partial_rotary_factor\":1.5}}", "partial_rotary_factor" },
        { "\"rope_parameters\":{\"sliding_attention\":{\"rope_type\":\"default\",\"rope_theta\":10000.0},\"full_attention\":{\"rope_type\":"
          "\"default\",\"rope_theta\":1e6}}", "global_head_dim" },
        { "\"rope_parameters\":{\"sliding_attention\":{\"rope_type\":\"default\"},\"full_attention\":{\"rope_type\":\"proportional\","
          "\"rope_theta\":1e6}}", "rope_theta" },
        { "\"num_key_value_heads\":3", "num_key_value_heads" },
        { "\"attention_k_eq_v\":true,\"num_global_key_value_heads\":3", "num_global_key_value_heads" },
        { "\"global_head_dim\":15", "global_head_dim" },
        { "\"hidden_size_per_layer_input\":4,\"vocab_size_per_layer_input\":10", "vocab_size_per_layer_input" },
        { "\"num_kv_shared_layers\":4", "num_kv_shared_layers" },
        { "\"num_kv_shared_layers\":3,\"layer_types\":[\"full_attention\",\"sliding_attention\",\"sliding_attention\",\"full_attention\"]",
          "no earlier layer is a sliding layer" },
        { "\"final_logit_softcapping\":\"30\"", "final_logit_softcapping" },
        { "\"sliding_window\":0", "sliding_window" },
        { "\"num_hidden_layers\":300", "num_hidden_layers" },
        { "\"rms_norm_eps\":2", "rms_norm_eps" },
    };
    bs_qwen3_config c; bs_err err = {0};
    CHECK(parse_gemma(&c, "", &err) == 0, "the base config must parse: %s", err.msg);
    CHECK(c.gemma.full[3] && !c.gemma.full[0] && c.gemma.global_kv_heads == 2, "defaults: last layer full, KV heads shared");
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        memset(&err, 0, sizeof err);
        CHECK(parse_gemma(&c, bad[i].extra, &err) != 0, "accepted: %s", bad[i].extra);
        CHECK(strstr(err.msg, bad[i].want) && strstr(err.msg, "config.json"), "%s: message \"%s\" does not name \"%s\"", bad[i].extra, err.msg,
              bad[i].want);
    }
    // the multimodal layout without its text tower
    const char *mm = "{\"architectures\":[\"Gemma4ForConditionalGeneration\"],\"model_type\":\"gemma4\",\"vision_config\":null}";
    cJSON *root = bs_json_parse(mm, strlen(mm), "config.json", &err);
    CHECK(root);
    CHECK(bs_qwen3_config_parse(&c, root, "config.json", &err) != 0 && strstr(err.msg, "text_config"), "%s", err.msg);
    cJSON_Delete(root);
    // a missing tensor is named with both layouts' names
    const char *t = bs_test_tmpdir("gemma4_bad");
    CHECK(t);
    char path[1024], cmd[2048];
    snprintf(cmd, sizeof cmd, "cp " GEMMA4_REF "/gemma4_mm/config.json %s/ && printf '\\010\\0\\0\\0\\0\\0\\0\\0{}      ' > %s/model.safetensors", t, t);
    CHECK(system(cmd) == 0, "%s", cmd);
    bs_engine *e;
    CHECK(bs_engine_open(&e, t, "cpu", &err) != 0, "an empty checkpoint was accepted");
    CHECK(strstr(err.msg, "model.language_model.embed_tokens.weight") && strstr(err.msg, "model.embed_tokens.weight"), "%s", err.msg);
    (void)path;
}

// Greedy speculative == plain on a Gemma-4 target (vocabulary 8: random drafts do get accepted) with random
// drafters of both families reading its taps and using its embedding and LM head.
static void gemma4_spec(int *failed_, const char *dev, const char *arch) {
    bs_err err = {0};
    const char *t = GEMMA4_REF "/gemma4_spec";
    const char *tmp = bs_test_tmpdir("gemma4_spec");
    CHECK(tmp);
    char d[1024], cfg[2048];
    snprintf(d, sizeof d, "%s/drafter", tmp);
    if (!strcmp(arch, "DFlashDraftModel"))
        snprintf(cfg, sizeof cfg,
                 "{\"architectures\":[\"DFlashDraftModel\"],\"model_type\":\"qwen3\",\"hidden_size\":32,\"num_attention_heads\":4,"
                 "\"num_key_value_heads\":2,\"head_dim\":8,\"intermediate_size\":64,\"num_hidden_layers\":2,\"vocab_size\":8,"
                 "\"rms_norm_eps\":1e-6,\"rope_theta\":10000.0,\"block_size\":5,\"num_target_layers\":4,"
                 "\"dflash_config\":{\"mask_token_id\":7,\"target_layer_ids\":[0,2]}}");
    else
        snprintf(cfg, sizeof cfg,
                 "{\"architectures\":[\"Qwen3DSparkModel\"],\"model_type\":\"qwen3\",\"hidden_size\":32,\"num_attention_heads\":4,"
                 "\"num_key_value_heads\":2,\"head_dim\":8,\"intermediate_size\":64,\"num_hidden_layers\":2,\"vocab_size\":8,"
                 "\"rms_norm_eps\":1e-6,\"rope_theta\":10000.0,\"block_size\":4,\"num_target_layers\":4,\"target_layer_ids\":[1,2],"
                 "\"mask_token_id\":7,\"markov_rank\":4,\"markov_head_type\":\"vanilla\",\"enable_confidence_head\":true,"
                 "\"confidence_head_with_markov\":true}");
    CHECK(tu_make_random_from_config(d, cfg, 5) == 0, "make-random of %s failed", d);
    tu_greedy_spec_equals_plain(failed_, dev, t, d, NULL, 12, 43);
    if (*failed_) return;
    long accepted, drafted;
    CHECK(tu_spec_acceptance(dev, t, d, 8, 3, 64, &accepted, &drafted, &err) == 0, "%s", err.msg);
    printf("  random %s drafter: %ld of %ld drafts accepted\n", arch, accepted, drafted);
    CHECK(accepted > 0, "no draft was ever accepted: the losslessness check only saw rejections");
}

TEST(gemma4_greedy_spec_equals_plain_dflash) { gemma4_spec(failed_, "cpu", "DFlashDraftModel"); }
TEST(gemma4_greedy_spec_equals_plain_dspark) { gemma4_spec(failed_, "cpu", "Qwen3DSparkModel"); }
TEST(cuda_gemma4_greedy_spec_equals_plain_dflash) { NEED_CUDA_DEVICE(); gemma4_spec(failed_, "cuda", "DFlashDraftModel"); }

// Chunking and batching on a Gemma-4 target: a 100-row prompt (two chunks of at most 64 rows: sliding windows and
// KV-shared layers across the chunk boundary) equals the same rows fed one at a time, and two sequences in one
// ragged batch equal each alone (per-span sliding attention, per-layer inputs of both).
static void gemma4_chunks_and_batches(int *failed_, const char *dev) {
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, GEMMA4_REF "/gemma4_text", dev, &err) == 0, "%s", err.msg);
    bs_backend *be = e->be;
    const int N = 100, V = e->cfg.vocab_size;
    int32_t ids[100];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 37 + 11) % V);
    float *all = malloc(sizeof(float) * N * V), *one = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * N * V);
    float *dl = be->alloc(be, sizeof(float) * N * V, &err);
    CHECK(all && one && b && dl, "%s", err.msg);
    bs_kv_cache kv, kv2;
    CHECK(bs_kv_init(&kv, e->kv_pool, 256, &err) == 0 && bs_kv_init(&kv2, e->kv_pool, 256, &err) == 0, "%s", err.msg);
    bs_fwd_out fo = { .logits = dl, .logits_all = 1 }, fl = { .logits = dl };
    CHECK(bs_qwen3_forward(&e->target, &kv, ids, N, &fo, &err) == 0, "%s", err.msg);
    be->download(be, all, dl, sizeof(float) * N * V);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        CHECK(bs_qwen3_forward(&e->target, &kv2, ids + i, 1, &fl, &err) == 0, "%s", err.msg);
        be->download(be, one, dl, sizeof(float) * V);
        double d = fx_max_abs_diff(one, all + (size_t)i * V, V);
        if (d > worst) worst = d;
    }
    CHECK(worst < 1e-4, "a 100-row forward and 100 one-row forwards differ by %g", worst);
    // two sequences in one batch: 23 rows after 50 cached, and 9 fresh rows
    CHECK(bs_kv_rollback(&kv, 50, &err) == 0 && bs_kv_rollback(&kv2, 0, &err) == 0, "%s", err.msg);
    bs_seq_rows seqs[2] = { { &kv, ids + 50, 23, 0 }, { &kv2, ids + 3, 9, 0 } };
    CHECK(bs_qwen3_forward_batch(&e->target, &kv.ws, seqs, 2, &fo, &err) == 0, "%s", err.msg);
    be->download(be, b, dl, sizeof(float) * 32 * V);
    double d1 = fx_max_abs_diff(b, all + (size_t)50 * V, (long)23 * V);
    CHECK(bs_kv_rollback(&kv2, 0, &err) == 0, "%s", err.msg);
    CHECK(bs_qwen3_forward(&e->target, &kv2, ids + 3, 9, &fo, &err) == 0, "%s", err.msg);
    be->download(be, one, dl, sizeof(float) * V);   // its first row
    float *alone = malloc(sizeof(float) * 9 * V);
    be->download(be, alone, dl, sizeof(float) * 9 * V);
    double d2 = fx_max_abs_diff(b + (size_t)23 * V, alone, (long)9 * V);
    printf("  chunked vs one at a time %.3g, batched vs alone %.3g / %.3g\n", worst, d1, d2);
    CHECK(d1 < 1e-4 && d2 < 1e-4, "a batch and its sequences alone differ by %g / %g", d1, d2);
    free(alone); free(all); free(one); free(b); be->free(be, dl);
    bs_kv_free(&kv); bs_kv_free(&kv2);
    bs_engine_close(e);
}

TEST(gemma4_chunks_and_batches_cpu_reference) { gemma4_chunks_and_batches(failed_, "cpu-ref"); }
TEST(gemma4_chunks_and_batches_cpu) { gemma4_chunks_and_batches(failed_, "cpu"); }
TEST(cuda_gemma4_chunks_and_batches) { NEED_CUDA_DEVICE(); gemma4_chunks_and_batches(failed_, "cuda"); }

// The three elementwise ops Gemma-4 added (backend.h: gelu_mul, scale, softcap) on a backend against cpu-ref, and
// cpu-ref's GELU against the formula in double.
static void gemma4_ops(int *failed_, const char *dev) {
    bs_err err = {0};
    bs_backend *ref = bs_backend_by_name("cpu-ref", &err), *be = bs_backend_by_name(dev, &err);
    CHECK(ref && be, "%s", err.msg);
    enum { N = 4099 };
    float g[N], u[N], y[N], want[N], got[N];
    for (int i = 0; i < N; i++) { g[i] = (float)((i % 201) - 100) / 12.5f; u[i] = (float)((i * 7) % 13 - 6) / 3.0f; }
    for (int i = 0; i < N; i++) {
        double x = g[i], gd = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
        float r[1]; const float gi[1] = { g[i] }, ui[1] = { 1.0f };
        ref->gelu_mul(ref, r, gi, ui, 1);
        CHECK(fabs(r[0] - gd) <= 1e-6 * (1 + fabs(gd)), "gelu_tanh(%g) = %g, formula %g", x, r[0], gd);
    }
    float *dg = be->alloc(be, sizeof g, &err), *du = be->alloc(be, sizeof u, &err), *dy = be->alloc(be, sizeof y, &err);
    CHECK(dg && du && dy, "%s", err.msg);
    be->upload(be, dg, g, sizeof g); be->upload(be, du, u, sizeof u);
    ref->gelu_mul(ref, want, g, u, N);
    be->gelu_mul(be, dy, dg, du, N);
    be->download(be, got, dy, sizeof got);
    CHECK(fx_max_abs_diff(want, got, N) <= 1e-5, "gelu_mul differs by %g", fx_max_abs_diff(want, got, N));
    memcpy(want, g, sizeof g); ref->scale(ref, want, 0.37f, N);
    be->upload(be, dy, g, sizeof g); be->scale(be, dy, 0.37f, N); be->download(be, got, dy, sizeof got);
    CHECK(!memcmp(want, got, sizeof got), "scale differs");
    for (int i = 0; i < N; i++) y[i] = g[i] * 4;
    memcpy(want, y, sizeof y); ref->softcap(ref, want, 3.0f, N);
    be->upload(be, dy, y, sizeof y); be->softcap(be, dy, 3.0f, N); be->download(be, got, dy, sizeof got);
    CHECK(fx_max_abs_diff(want, got, N) <= 1e-6, "softcap differs by %g", fx_max_abs_diff(want, got, N));
    for (int i = 0; i < N; i++) CHECK(fabsf(want[i]) < 3.0f + 1e-6f && fabs(want[i] - 3.0 * tanh(y[i] / 3.0)) < 1e-5, "softcap(%g)", y[i]);
    be->free(be, dg); be->free(be, du); be->free(be, dy);
    // a long gelu_mul (the CPU splits it over threads): equal to the reference's elementwise
    size_t M = 70001;
    float *G = malloc(sizeof(float) * M * 4), *U = G + M, *A = U + M, *B = A + M;
    float *dG = be->alloc(be, sizeof(float) * M, &err), *dU = be->alloc(be, sizeof(float) * M, &err);
    CHECK(G && dG && dU, "%s", err.msg);
    for (size_t i = 0; i < M; i++) { G[i] = (float)((long)(i % 1009) - 504) / 60.0f; U[i] = (float)(i % 17) / 8.0f - 1.0f; }
    ref->gelu_mul(ref, A, G, U, M);
    be->upload(be, dG, G, sizeof(float) * M); be->upload(be, dU, U, sizeof(float) * M);
    be->gelu_mul(be, dG, dG, dU, M);
    be->download(be, B, dG, sizeof(float) * M);
    CHECK(fx_max_abs_diff(A, B, (long)M) <= 1e-5, "long gelu_mul differs by %g", fx_max_abs_diff(A, B, (long)M));
    if (!strcmp(dev, "cpu")) CHECK(!memcmp(A, B, sizeof(float) * M), "the CPU's threaded gelu_mul is not the reference's bit for bit");
    be->free(be, dG); be->free(be, dU); free(G);
    be->destroy(be); ref->destroy(ref);
}

TEST(gemma4_ops_cpu) { gemma4_ops(failed_, "cpu"); }
TEST(cuda_gemma4_ops) { NEED_CUDA_DEVICE(); gemma4_ops(failed_, "cuda"); }

// google/gemma-4-E2B's text_config as its config.json ships it (35 layers, 4 sliding : 1 full, 20 KV-shared layers
// with double-wide MLPs, per-layer embeddings): the shapes blockspec derives from it.
TEST(gemma4_config_e2b_shapes) {
    char lt[2048] = "";
    for (int l = 0; l < 35; l++) strcat(lt, l % 5 == 4 ? "\"full_attention\"," : "\"sliding_attention\",");
    lt[strlen(lt) - 1] = 0;
    char text[4096];
    snprintf(text, sizeof text,
             "{\"architectures\":[\"Gemma4ForConditionalGeneration\"],\"model_type\":\"gemma4\",\"tie_word_embeddings\":true,"
             "\"text_config\":{\"model_type\":\"gemma4_text\",\"vocab_size\":262144,\"hidden_size\":1536,\"intermediate_size\":6144,"
             "\"num_hidden_layers\":35,\"num_attention_heads\":8,\"num_key_value_heads\":1,\"head_dim\":256,\"global_head_dim\":512,"
             "\"num_global_key_value_heads\":null,\"max_position_embeddings\":131072,\"rms_norm_eps\":1e-06,\"sliding_window\":512,"
             "\"num_kv_shared_layers\":20,\"final_logit_softcapping\":30.0,\"hidden_size_per_layer_input\":256,"
             "\"vocab_size_per_layer_input\":262144,\"use_double_wide_mlp\":true,\"attention_k_eq_v\":false,\"enable_moe_block\":false,"
             "\"hidden_activation\":\"gelu_pytorch_tanh\",\"attention_bias\":false,\"layer_types\":[%s],"
             "\"rope_parameters\":{\"full_attention\":{\"partial_rotary_factor\":0.25,\"rope_theta\":1000000.0,\"rope_type\":\"proportional\"},"
             "\"sliding_attention\":{\"rope_theta\":10000.0,\"rope_type\":\"default\"}},\"bos_token_id\":2,\"eos_token_id\":[1,106],"
             "\"pad_token_id\":0},\"vision_config\":{\"model_type\":\"gemma4_vision\"},\"audio_config\":{\"model_type\":\"gemma4_audio\"}}", lt);
    bs_err err = {0};
    cJSON *root = bs_json_parse(text, strlen(text), "config.json", &err);
    CHECK(root, "%s", err.msg);
    bs_qwen3_config c;
    int rc = bs_qwen3_config_parse(&c, root, "config.json", &err);
    cJSON_Delete(root);
    CHECK(rc == 0, "%s", err.msg);
    CHECK(c.arch == BS_ARCH_GEMMA4 && c.gemma.multimodal && c.n_layers == 35 && c.gemma.global_kv_heads == 1 && c.gemma.final_softcap == 30.0f);
    CHECK(bs_cfg_max_kv_width(&c) == 512 && bs_cfg_max_q_width(&c) == 4096 && bs_cfg_max_inter(&c) == 12288);
    for (int l = 0; l < 35; l++) {
        int full = l % 5 == 4, want_src = l < 15 ? l : full ? 14 : 13;
        CHECK(c.gemma.full[l] == full && bs_cfg_layer_kv_source(&c, l) == want_src, "layer %d: source %d", l, bs_cfg_layer_kv_source(&c, l));
        CHECK(bs_cfg_layer_inter(&c, l) == (l >= 15 ? 12288 : 6144) && bs_cfg_layer_head_dim(&c, l) == (full ? 512 : 256), "layer %d", l);
    }
    CHECK(c.n_eos == 2 && c.eos_ids[1] == 106);
}

// make-random writes Gemma-4 text targets (bench/peer/peer30_device.sh benchmarks the 12B shape on them): the
// loader, which checks every tensor's shape against config.json, opens them, and greedy decoding runs. Two
// structures: bench/configs/gemma-4-12b.json's (5 sliding : 1 full, attention_k_eq_v with one global K/V head,
// so no v_proj on full layers; proportional RoPE, soft-cap) scaled down, and the E variants' (KV-shared layers
// without K/V projections, double-wide MLPs, per-layer embeddings), plus speculative == plain on the latter.
static void gemma4_make_random(int *failed_, const char *tag, const char *extra, int spec) {
    char lt[1024] = "", cfg[4096], dir[1024];
    for (int l = 0; l < 12; l++) strcat(lt, l % 6 == 5 ? "\"full_attention\"," : "\"sliding_attention\",");
    lt[strlen(lt) - 1] = 0;
    snprintf(cfg, sizeof cfg,
             "{\"architectures\":[\"Gemma4ForCausalLM\"],\"model_type\":\"gemma4_text\",\"vocab_size\":8,\"hidden_size\":32,"
             "\"intermediate_size\":48,\"num_hidden_layers\":12,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":8,"
             "\"global_head_dim\":16,\"sliding_window\":4,\"layer_types\":[%s],\"final_logit_softcapping\":30.0,"
             "\"rope_parameters\":{\"sliding_attention\":{\"rope_type\":\"default\",\"rope_theta\":10000.0},"
             "\"full_attention\":{\"rope_type\":\"proportional\",\"rope_theta\":1000000.0,\"partial_rotary_factor\":0.25}},%s}", lt, extra);
    const char *tmp = bs_test_tmpdir(tag);
    CHECK(tmp);
    snprintf(dir, sizeof dir, "%s/target", tmp);
    CHECK(tu_make_random_from_config(dir, cfg, 3) == 0, "make-random of %s failed", cfg);
    bs_err err = {0};
    bs_engine *e;
    CHECK(bs_engine_open(&e, dir, "cpu", &err) == 0, "%s", err.msg);
    bs_session s;
    int32_t prompt[6] = { 1, 2, 3, 4, 5, 6 }, out[16]; int n = 0;
    CHECK(bs_session_init(&s, e, 64, NULL, &err) == 0, "%s", err.msg);
    CHECK(bs_generate_plain(&s, prompt, 6, 16, 0, out, &n, NULL, NULL, &err) == 0 && n == 16, "%s", err.msg);
    for (int i = 0; i < n; i++) CHECK(out[i] >= 0 && out[i] < 8, "token %d: %d", i, out[i]);
    bs_session_free(&s);
    bs_engine_close(e);
    if (!spec) return;
    char d[1100], dcfg[1024];
    snprintf(d, sizeof d, "%s/drafter", tmp);
    snprintf(dcfg, sizeof dcfg,
             "{\"architectures\":[\"DFlashDraftModel\"],\"model_type\":\"qwen3\",\"hidden_size\":32,\"num_attention_heads\":4,"
             "\"num_key_value_heads\":2,\"head_dim\":8,\"intermediate_size\":64,\"num_hidden_layers\":1,\"vocab_size\":8,"
             "\"rms_norm_eps\":1e-6,\"rope_theta\":10000.0,\"block_size\":4,\"num_target_layers\":12,"
             "\"dflash_config\":{\"mask_token_id\":7,\"target_layer_ids\":[1,10]}}");
    CHECK(tu_make_random_from_config(d, dcfg, 4) == 0, "make-random of the drafter failed");
    tu_greedy_spec_equals_plain(failed_, "cpu", dir, d, NULL, 6, 44);
}

TEST(gemma4_make_random_12b_structure) {
    gemma4_make_random(failed_, "gemma4_mr12", "\"attention_k_eq_v\":true,\"num_global_key_value_heads\":1,\"hidden_size_per_layer_input\":0", 0);
}
TEST(gemma4_make_random_e_variant_structure) {
    gemma4_make_random(failed_, "gemma4_mre", "\"num_kv_shared_layers\":4,\"use_double_wide_mlp\":true,\"hidden_size_per_layer_input\":4,"
                       "\"vocab_size_per_layer_input\":8,\"tie_word_embeddings\":false", 1);
}

// bench/configs/gemma-4-12b.json (docs/benchmarks.md says where its numbers come from): the shapes it gives.
TEST(gemma4_config_12b_benchmark_shape) {
    bs_qwen3_config c; bs_err err = {0};
    size_t len;
    char *txt = bs_read_file("bench/configs/gemma-4-12b.json", &len, &err);
    CHECK(txt, "%s", err.msg);
    cJSON *root = bs_json_parse(txt, len, "gemma-4-12b.json", &err);
    free(txt);
    CHECK(root, "%s", err.msg);
    int rc = bs_qwen3_config_parse(&c, root, "gemma-4-12b.json", &err);
    cJSON_Delete(root);
    CHECK(rc == 0, "%s", err.msg);
    CHECK(c.arch == BS_ARCH_GEMMA4 && !c.gemma.multimodal && c.tie_embeddings && c.n_layers == 48 && c.hidden_size == 3840);
    CHECK(c.vocab_size == 262144 && c.gemma.sliding_window == 1024 && c.gemma.final_softcap == 30.0f && c.gemma.k_eq_v);
    CHECK(bs_cfg_max_kv_width(&c) == 2048 && bs_cfg_max_q_width(&c) == 8192 && bs_cfg_max_inter(&c) == 15360);
    for (int l = 0; l < 48; l++) {
        int full = l % 6 == 5;
        CHECK(c.gemma.full[l] == full && bs_cfg_layer_head_dim(&c, l) == (full ? 512 : 256) && bs_cfg_layer_kv_heads(&c, l) == (full ? 1 : 8),
              "layer %d", l);
    }
}
