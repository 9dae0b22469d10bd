// Random-weight drafters written by `blockspec make-random` (single file and --shards 3) over random targets
// (untied and tied): every drafter kind loads and runs rounds; greedy drafts are the argmax of the logits they
// came from (the Markov walk step by step); sampled drafts come with q = the processed distribution of exactly
// those logits; confidences are probabilities; rollback + re-adding context reproduces the proposal.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "harness.h"
#include "test_util_models.h"
#include "fixture_util.h"
#include "engine/engine.h"
#include "io/json.h"
#include "model/dflash.h"

static int write_json(const char *path, cJSON *root) {
    char *txt = cJSON_Print(root);
    FILE *f = fopen(path, "w");
    int ok = f && txt && fputs(txt, f) >= 0;
    if (f) fclose(f);
    free(txt);
    return ok ? 0 : -1;
}

// make-random of a fixture config edited by `edit` into dir/name; returns 0 on success.
static int make_random(const char *dir, const char *name, const char *fixture, void (*edit)(cJSON *, int), int arg, int shards) {
    char src[1024], cfg[1200], cmd[4096];
    bs_err err = {0};
    snprintf(src, sizeof src, "%s/%s/config.json", bs_fixtures_dir(), fixture);
    cJSON *root = bs_json_load(src, &err);
    if (!root) { fprintf(stderr, "  %s\n", err.msg); return -1; }
    if (edit) edit(root, arg);
    snprintf(cfg, sizeof cfg, "%s/%s.json", dir, name);
    int rc = write_json(cfg, root);
    cJSON_Delete(root);
    if (rc) return -1;
    snprintf(cmd, sizeof cmd, "%s make-random -c %s --out %s/%s --seed %d --shards %d", bs_cli_path(), cfg, dir, name, 7 + arg, shards);
    return system(cmd) == 0 ? 0 : -1;
}

static void set_num(cJSON *r, const char *k, double v) {
    if (cJSON_GetObjectItemCaseSensitive(r, k)) cJSON_ReplaceItemInObject(r, k, cJSON_CreateNumber(v));
    else cJSON_AddNumberToObject(r, k, v);
}
static void ed_tied(cJSON *r, int arg) { cJSON_ReplaceItemInObject(r, "tie_word_embeddings", cJSON_CreateBool(1)); }
// z-lab: block 16, no ids (default spread), 3 layers.
static void ed_zlab(cJSON *r, int arg) {
    set_num(r, "block_size", arg);
    set_num(r, "num_hidden_layers", 3);
    cJSON_DeleteItemFromObject(r, "layer_types");
    cJSON_DeleteItemFromObject(cJSON_GetObjectItemCaseSensitive(r, "dflash_config"), "target_layer_ids");
}
// DeepSpec: arg selects 0 = no Markov (DeepSpec DFlash), 1 vanilla, 2 gated, 3 rnn; block 5.
static void ed_deepspec(cJSON *r, int arg) {
    static const char *types[] = { "", "vanilla", "gated", "rnn" };
    set_num(r, "block_size", 5);
    set_num(r, "markov_rank", arg ? 8 : 0);
    cJSON_DeleteItemFromObject(r, "markov_head_type");
    if (arg) cJSON_AddStringToObject(r, "markov_head_type", types[arg]);
    cJSON_ReplaceItemInObject(r, "enable_confidence_head", cJSON_CreateBool(arg != 0));
    cJSON_ReplaceItemInObject(r, "confidence_head_with_markov", cJSON_CreateBool(arg == 1 || arg == 3));
    cJSON *ids = cJSON_CreateArray();
    int tap[3] = { -1, 0, 3 };   // embeddings, layer 0 and the last layer (post-norm tap)
    for (int i = 0; i < 3; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(tap[i]));
    cJSON_ReplaceItemInObject(r, "target_layer_ids", ids);
}

static void run_rounds(int *failed_, const char *tdir, const char *ddir, const char *label) {
    bs_err err = {0};
    bs_engine *e;
    CHECK(bs_engine_open(&e, tdir, "cpu", &err) == 0, "%s: %s", label, err.msg);
    bs_drafter *d;
    CHECK(bs_dflash_open(&d, ddir, &e->target, 96, &err) == 0, "%s: %s", label, err.msg);
    bs_drafter_ctx dc;
    CHECK(bs_drafter_ctx_init(d, &dc, 96, &err) == 0, "%s", err.msg);
    const bs_drafter_config *c = bs_dflash_config(d);
    int V = e->cfg.vocab_size, H = e->cfg.hidden_size, m = d->n_taps, n = d->max_drafts, B = c->block_size;
    CHECK(n == (c->arch == BS_DRAFTER_ZLAB ? B - 1 : B), "%s", label);
    int32_t prompt[20];
    for (int i = 0; i < 20; i++) prompt[i] = (i * 37 + 5) % V;
    bs_kv_cache kv;
    CHECK(bs_kv_init(&kv, e->kv_pool, 96, &err) == 0, "%s", err.msg);
    float *logits = malloc(sizeof(float) * 20 * V), *feat = malloc(sizeof(float) * 20 * m * H);
    bs_fwd_out fo = { .logits = logits, .logits_all = 1, .taps = d->taps, .n_taps = m, .tap_out = feat };
    CHECK(bs_qwen3_forward(&e->target, &kv, prompt, 20, &fo, &err) == 0, "%s", err.msg);
    CHECK(d->add_context(d, &dc, feat, 16, &err) == 0, "%s", err.msg);
    int32_t anchor = prompt[16];
    float *lg = malloc(sizeof(float) * n * V), *st = malloc(sizeof(float) * n * V), *probs = malloc(sizeof(float) * V), conf[BS_MAX_DRAFT];
    bs_dflash_inspect ins = { .logits = lg, .step_logits = st, .conf_logits = conf };
    // Greedy: each draft is the argmax of the logits it was drawn from.
    bs_draft g;
    CHECK(bs_dflash_forward_block(d, &dc, anchor, n, NULL, NULL, &g, &ins, &err) == 0, "%s", err.msg);
    CHECK(g.n == n && g.q == NULL, "%s", label);
    const float *from = c->arch == BS_DRAFTER_ZLAB ? lg : st;
    for (int k = 0; k < n; k++) CHECK(g.tokens[k] == bs_argmax(from + (size_t)k * V, V), "%s: greedy draft %d", label, k);
    CHECK(g.has_conf == c->conf_head, "%s", label);
    for (int k = 0; k < n && g.has_conf; k++) CHECK(g.conf[k] > 0 && g.conf[k] < 1, "%s: conf %g", label, g.conf[k]);
    if (c->markov_rank > 0) CHECK(fx_max_abs_diff(lg, st, (long)n * V) > 0, "%s: Markov head added nothing", label);
    // Without inspection, greedy picks are made by backend ops (argmax_to / embed_from, the path a GPU
    // records in one graph): the same drafts and confidences as the step-by-step walk above.
    bs_draft gd;
    CHECK(d->propose(d, &dc, anchor, n, NULL, NULL, &gd, &err) == 0, "%s", err.msg);
    CHECK(gd.n == g.n && memcmp(gd.tokens, g.tokens, sizeof(int32_t) * n) == 0, "%s: device-side picks differ from the walk", label);
    CHECK(gd.has_conf == g.has_conf && memcmp(gd.conf, g.conf, sizeof(float) * n) == 0, "%s: device-side confidences differ", label);
    // Sampled: q_k is the processed distribution of the logits d_k was drawn from.
    bs_sampling sm = { .temperature = 0.8f, .top_k = 50, .top_p = 0.95f };
    bs_rng rng; bs_rng_seed(&rng, 11);
    bs_draft sd;
    CHECK(bs_dflash_forward_block(d, &dc, anchor, n, &sm, &rng, &sd, &ins, &err) == 0, "%s", err.msg);
    CHECK(sd.n == n && sd.q, "%s", label);
    for (int k = 0; k < n; k++) {
        const float *q = sd.q + (size_t)k * V;
        double sum = 0;
        for (int i = 0; i < V; i++) sum += q[i];
        CHECK_NEAR(sum, 1.0, 1e-4, "%s: q row %d", label, k);
        CHECK(q[sd.tokens[k]] > 0, "%s: draft %d has q = 0", label, k);
        bs_sampling_probs(&sm, from + (size_t)k * V, V, probs, NULL);
        CHECK(fx_max_abs_diff(probs, q, V) < 1e-6, "%s: q row %d is not processed(logits)", label, k);
    }
    // Same seed, same drafts; a shorter proposal is a prefix.
    bs_rng_seed(&rng, 11);
    bs_draft s2;
    CHECK(d->propose(d, &dc, anchor, 2, &sm, &rng, &s2, &err) == 0 && s2.n == (n < 2 ? n : 2), "%s", err.msg);
    CHECK(memcmp(s2.tokens, sd.tokens, sizeof(int32_t) * s2.n) == 0, "%s: not reproducible", label);
    // Next rounds: commit 3 more rows, roll back 2, re-add them: identical greedy proposal.
    CHECK(d->add_context(d, &dc, feat + (size_t)16 * m * H, 3, &err) == 0 && dc.n_ctx == 19, "%s", err.msg);
    bs_draft a, b;
    CHECK(d->propose(d, &dc, prompt[19], n, NULL, NULL, &a, &err) == 0, "%s", err.msg);
    CHECK(d->rollback(d, &dc, 17, &err) == 0, "%s", err.msg);
    CHECK(d->add_context(d, &dc, feat + (size_t)17 * m * H, 2, &err) == 0, "%s", err.msg);
    CHECK(d->propose(d, &dc, prompt[19], n, NULL, NULL, &b, &err) == 0, "%s", err.msg);
    CHECK(a.n == b.n && memcmp(a.tokens, b.tokens, sizeof(int32_t) * a.n) == 0, "%s: rollback changed the proposal", label);
    CHECK(d->propose(d, &dc, V, n, NULL, NULL, &b, &err) != 0, "%s: anchor outside the vocabulary accepted", label);
    CHECK(d->add_context(d, &dc, feat, 200, &err) != 0, "%s: context overflow accepted", label);
    free(logits); free(feat); free(lg); free(st); free(probs);
    bs_kv_free(&kv);
    tu_drafter_free(d, &dc);
    bs_engine_close(e);
}

TEST(drafter_random_all_kinds) {
    char t[1200], dd[1200];
    const char *tmpl = bs_test_tmpdir("drafter_rand");
    CHECK(tmpl);
    CHECK(make_random(tmpl, "target", "target", NULL, 0, 1) == 0);
    CHECK(make_random(tmpl, "target_tied", "target", ed_tied, 0, 3) == 0);
    CHECK(make_random(tmpl, "zlab16", "dflash", ed_zlab, 16, 3) == 0);
    CHECK(make_random(tmpl, "zlab4", "dflash", ed_zlab, 4, 1) == 0);
    const char *ds[] = { "ds_dflash", "ds_vanilla", "ds_gated", "ds_rnn" };
    for (int k = 0; k < 4; k++) CHECK(make_random(tmpl, ds[k], "dspark", ed_deepspec, k, k == 1 ? 3 : 1) == 0, "%s", ds[k]);
    const char *targets[] = { "target", "target_tied" };
    const char *drafters[] = { "zlab16", "zlab4", "ds_dflash", "ds_vanilla", "ds_gated", "ds_rnn" };
    for (int ti = 0; ti < 2; ti++)
        for (int di = 0; di < 6; di++) {
            char label[128];
            snprintf(t, sizeof t, "%s/%s", tmpl, targets[ti]);
            snprintf(dd, sizeof dd, "%s/%s", tmpl, drafters[di]);
            snprintf(label, sizeof label, "%s on %s", drafters[di], targets[ti]);
            run_rounds(failed_, t, dd, label);
            if (*failed_) break;
        }
}
