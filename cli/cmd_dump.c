// blockspec dump -m DIR [-d DRAFTER] --prompt-ids 1,2,3 [-n N] [--block-ids 4,5] --out FILE.safetensors
// Writes what the engine computed, under the names and shapes of the reference vectors
// (shared/fixtures/{target,dflash,dspark}.expect.safetensors), so any reference set can be compared with it.
// With -d: the drafter's tensors for the block after the prompt (anchor = the greedy token after the prompt); a
// DFlash 2 drafter adds its selector's (tests/ref/make_dflash2_fixture.py lists the names).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/commands.h"
#include "engine/engine.h"
#include "model/dflash.h"
#include "spec/spec_loop.h"

static void usage(void) {
    fprintf(stderr, "usage: blockspec dump -m DIR [-d DRAFTER] --prompt-ids IDS [-n N] [--block-ids IDS] [--device D] --out FILE.safetensors\n");
}

// [rows][n_taps*H] -> [n_taps][rows][H]
static float *by_layer(const float *rows_major, int rows, int n_taps, int H) {
    float *o = malloc(sizeof(float) * rows * n_taps * H);
    for (int r = 0; r < rows; r++)
        for (int t = 0; t < n_taps; t++)
            memcpy(o + ((size_t)t * rows + r) * H, rows_major + ((size_t)r * n_taps + t) * H, sizeof(float) * H);
    return o;
}

// Host buffers of the drafter tensors (kept until the file is written).
typedef struct drafter_dump {
    int32_t ids[BS_MAX_TAPS], block[BS_MAX_DRAFT + 1], tokens[BS_MAX_DRAFT];
    float *feat, *hidden, *logits, *step, conf[BS_MAX_DRAFT];
    int32_t *spec_out;
    bs_spec_stats st;
    // DFlash 2: the selector's inputs and both walks (tests/ref/make_dflash2_fixture.py names them)
    int32_t *cand, sampled[BS_MAX_DRAFT];
    float *unary, *z, *scores, *q, *q_sampled, uniforms[BS_MAX_DRAFT];
} drafter_dump;

static void drafter_dump_free(drafter_dump *dd) {
    free(dd->cand); free(dd->unary); free(dd->z); free(dd->scores); free(dd->q); free(dd->q_sampled);
    free(dd->feat); free(dd->hidden); free(dd->logits); free(dd->step); free(dd->spec_out);
    bs_spec_stats_free(&dd->st);
}

// The greedy speculative run, recorded the way z-lab's dflash_generate records it: rounds continue
// while at most n tokens are out (one round more than needed to reach n), the output is cut to n and
// every round's acceptance length (accepted + 1) is kept.
static int dump_spec_run(bs_engine *e, bs_drafter *d, const int32_t *prompt, int n_prompt, long n,
                         bs_st_writer *w, drafter_dump *dd, bs_err *err) {
    bs_session s;
    int rc = -1, n_out = 0;
    if (bs_session_init(&s, e, 0, NULL, err)) return -1;
    dd->spec_out = malloc(sizeof(int32_t) * (n + 1));
    bs_spec_opts o = { .draft_max = d->max_drafts, .stop_at_eos = 1 };   // the whole block, as the reference verifies it
    if (!dd->spec_out) { bs_fail(err, "out of memory"); goto out; }
    if (bs_generate_spec(&s, d, prompt, n_prompt, (int)n + 1, &o, dd->spec_out, &n_out, NULL, NULL, &dd->st, err)) goto out;
    int64_t shp[1] = { n_out < n ? n_out : n };
    bs_st_writer_add(w, "spec_output_ids", "I32", 1, shp, dd->spec_out, err);
    shp[0] = dd->st.n_lengths;
    bs_st_writer_add(w, "acceptance_lengths", "I32", 1, shp, dd->st.acceptance_lengths, err);
    rc = 0;
out:
    bs_session_free(&s);
    return rc;
}

// DFlash 2's selector tensors for the block just drafted (the greedy pass again, inspected), then the walk at
// temperature 1 at the fixed uniforms (p + 0.5) / n, the ones tests/ref/make_dflash2_fixture.py uses.
static int dump_dflash2(bs_drafter *d, bs_drafter_ctx *dcx, int32_t anchor, int n, bs_st_writer *w, drafter_dump *dd, bs_err *err) {
    const bs_drafter_config *c = bs_dflash_config(d);
    int K = c->sel_top_k, R = c->sel_rank;
    dd->cand = malloc(sizeof(int32_t) * n * K);
    dd->unary = malloc(sizeof(float) * n * K); dd->z = malloc(sizeof(float) * n * R);
    dd->scores = malloc(sizeof(float) * n * K); dd->q = malloc(sizeof(float) * n * K); dd->q_sampled = malloc(sizeof(float) * n * K);
    if (!dd->cand || !dd->unary || !dd->z || !dd->scores || !dd->q || !dd->q_sampled) return bs_fail(err, "out of memory");
    bs_dflash_inspect ins = { .cand_ids = dd->cand, .cand_unary = dd->unary, .sel_hidden = dd->z, .cand_scores = dd->scores, .walk_q = dd->q };
    bs_draft dr;
    if (bs_dflash_forward_block(d, dcx, anchor, n, NULL, NULL, &dr, &ins, err)) return -1;
    double u[BS_MAX_DRAFT];
    for (int p = 0; p < n; p++) { u[p] = (p + 0.5) / n; dd->uniforms[p] = (float)u[p]; }
    bs_dflash_inspect si = { .walk_q = dd->q_sampled, .uniforms = u };
    bs_sampling t1 = { .temperature = 1.0f, .top_k = 0, .top_p = 1.0f };
    bs_rng rng;
    bs_rng_seed(&rng, 0);   // (not drawn from: the uniforms are given)
    if (bs_dflash_forward_block(d, dcx, anchor, n, &t1, &rng, &dr, &si, err)) return -1;
    memcpy(dd->sampled, dr.tokens, sizeof(int32_t) * n);
    int64_t shp[2] = { n, R };
    bs_st_writer_add(w, "selector_hidden", "F32", 2, shp, dd->z, err);
    shp[1] = K;
    bs_st_writer_add(w, "candidate_ids", "I32", 2, shp, dd->cand, err);
    bs_st_writer_add(w, "candidate_unary", "F32", 2, shp, dd->unary, err);
    bs_st_writer_add(w, "walk_scores", "F32", 2, shp, dd->scores, err);
    bs_st_writer_add(w, "sampled_q", "F32", 2, shp, dd->q_sampled, err);
    bs_st_writer_add(w, "walk_uniforms", "F32", 1, shp, dd->uniforms, err);
    bs_st_writer_add(w, "sampled_tokens", "I32", 1, shp, dd->sampled, err);
    return 0;
}

// Context features of the prompt (from the prefill's hidden states), then one drafting forward.
static int dump_drafter(bs_engine *e, bs_drafter *d, const int32_t *prompt, int n_prompt, const float *pre_logits,
                        const float *pre_taps, bs_st_writer *w, drafter_dump *dd, bs_err *err) {
    bs_backend *be = e->be;
    float *dev = NULL;
    bs_drafter_ctx dcx = { 0 };
    int rc = -1, V = e->cfg.vocab_size, H = e->cfg.hidden_size, NT = e->cfg.n_layers + 1;
    const bs_drafter_config *c = bs_dflash_config(d);
    if (!c) return bs_fail(err, "dump: drafter %s is not dumped (only config.json drafters: DFlash, DFlash 2, DeepSpec)", d->name);
    int m = d->n_taps, B = c->block_size, n = d->max_drafts, zl = c->arch == BS_DRAFTER_ZLAB;
    size_t fw = (size_t)m * H;
    dd->feat = malloc(sizeof(float) * n_prompt * fw);
    dd->hidden = malloc(sizeof(float) * B * H);
    dd->logits = malloc(sizeof(float) * n * V);
    dd->step = malloc(sizeof(float) * n * V);
    if (!dd->feat || !dd->hidden || !dd->logits || !dd->step) { bs_fail(err, "out of memory"); goto out; }
    for (int r = 0; r < n_prompt; r++)
        for (int t = 0; t < m; t++)
            memcpy(dd->feat + r * fw + (size_t)t * H, pre_taps + ((size_t)r * NT + d->taps[t]) * H, sizeof(float) * H);
    if (!(dev = be->alloc(be, sizeof(float) * n_prompt * fw, err)) || bs_drafter_ctx_init(d, &dcx, n_prompt + 1, err)) goto out;
    be->upload(be, dev, dd->feat, sizeof(float) * n_prompt * fw);
    if (d->add_context(d, &dcx, dev, n_prompt, err)) goto out;
    int32_t anchor = bs_argmax(pre_logits + (size_t)(n_prompt - 1) * V, V);
    bs_dflash_inspect ins = { .block_ids = dd->block, .block_hidden = dd->hidden, .logits = dd->logits, .step_logits = dd->step, .conf_logits = dd->conf };
    bs_draft dr;
    if (bs_dflash_forward_block(d, &dcx, anchor, n, NULL, NULL, &dr, &ins, err)) goto out;
    memcpy(dd->tokens, dr.tokens, sizeof(int32_t) * dr.n);
    for (int t = 0; t < m; t++) dd->ids[t] = c->target_layer_ids[t];
    int64_t shp[2];
    shp[0] = m; bs_st_writer_add(w, "target_layer_ids", "I32", 1, shp, dd->ids, err);
    shp[0] = n_prompt; shp[1] = (int64_t)fw; bs_st_writer_add(w, "context_features", "F32", 2, shp, dd->feat, err);
    shp[0] = B; bs_st_writer_add(w, "block_input_ids", "I32", 1, shp, dd->block, err);
    shp[1] = H; bs_st_writer_add(w, "block_hidden", "F32", 2, shp, dd->hidden, err);
    shp[0] = dr.n; shp[1] = V;
    if (c->dflash2) bs_st_writer_add(w, "unary_logits", "F32", 2, shp, dd->logits, err);   // (times output_multiplier, softcapped)
    else if (zl) bs_st_writer_add(w, "draft_logits", "F32", 2, shp, dd->logits, err);
    else {
        bs_st_writer_add(w, "base_logits", "F32", 2, shp, dd->logits, err);
        bs_st_writer_add(w, "step_logits", "F32", 2, shp, dd->step, err);
    }
    bs_st_writer_add(w, "draft_tokens", "I32", 1, shp, dd->tokens, err);
    if (dr.has_conf) bs_st_writer_add(w, "confidence_logits", "F32", 1, shp, dd->conf, err);
    if (c->dflash2 && dump_dflash2(d, &dcx, anchor, n, w, dd, err)) goto out;
    rc = 0;
out:
    if (dev) be->free(be, dev);
    bs_drafter_ctx_free(d, &dcx);
    return rc;
}

int cmd_dump(int argc, char **argv) {
    const char *model = NULL, *drafter = NULL, *out_path = NULL, *device = "cpu", *v;
    int32_t *prompt = NULL, *block = NULL; int n_prompt = 0, n_block = 0; long n_greedy = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m")) { if (!(model = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(argv[i], "-d") || !strcmp(argv[i], "--drafter")) { if (!(drafter = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(argv[i], "--out") || !strcmp(argv[i], "-o")) { if (!(out_path = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(argv[i], "--device")) { if (!(device = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(argv[i], "--prompt-ids")) { if (!(v = cli_value(argc, argv, &i)) || (n_prompt = cli_parse_ids("--prompt-ids", v, &prompt)) < 0) return 2; }
        else if (!strcmp(argv[i], "--block-ids")) { if (!(v = cli_value(argc, argv, &i)) || (n_block = cli_parse_ids("--block-ids", v, &block)) < 0) return 2; }
        else if (!strcmp(argv[i], "-n")) { if (!(v = cli_value(argc, argv, &i)) || cli_int("-n", v, 0, 1 << 20, &n_greedy)) return 2; }
        else if (!strcmp(argv[i], "--help")) { usage(); return 0; }
        else { fprintf(stderr, "blockspec dump: unknown option %s\n", argv[i]); usage(); return 2; }
    }
    if (!model || !out_path || !n_prompt) { usage(); return 2; }
    bs_err err = {0};
    bs_engine *e = NULL;
    bs_session s = {0};
    bs_st_writer *w = bs_st_writer_new();
    float *pre_logits = NULL, *pre_taps = NULL, *pre_hs = NULL, *step_logits = NULL, *blk_logits = NULL, *blk_taps = NULL, *blk_hs = NULL;
    int32_t *greedy = NULL;
    float *d_logits = NULL, *d_taps = NULL;   // backend buffers
    bs_drafter *dft = NULL;
    drafter_dump dd = {0};
    int rc = 1;
    if (bs_engine_open(&e, model, device, &err) || bs_session_init(&s, e, 0, NULL, &err)) goto out;
    const bs_qwen3_config *c = &e->cfg;
    int V = c->vocab_size, H = c->hidden_size, NT = c->n_layers + 1;
    bs_backend *be = e->be;
    int taps[1024];
    for (int t = 0; t < NT && t < 1024; t++) taps[t] = t;
    size_t rows_max = n_prompt > n_block ? n_prompt : n_block;
    if (!(d_logits = be->alloc(be, sizeof(float) * rows_max * V, &err)) ||
        !(d_taps = be->alloc(be, sizeof(float) * rows_max * NT * H, &err))) goto out;
    pre_logits = malloc(sizeof(float) * n_prompt * V); pre_taps = malloc(sizeof(float) * n_prompt * NT * H);
    bs_fwd_out fo = { .logits = d_logits, .logits_all = 1, .taps = taps, .n_taps = NT, .tap_out = d_taps };
    if (bs_qwen3_forward(&e->target, &s.kv, prompt, n_prompt, &fo, &err)) goto out;
    be->download(be, pre_logits, d_logits, sizeof(float) * n_prompt * V);
    be->download(be, pre_taps, d_taps, sizeof(float) * n_prompt * NT * H);
    pre_hs = by_layer(pre_taps, n_prompt, NT, H);
    int64_t shp[3];
    shp[0] = n_prompt; bs_st_writer_add(w, "prompt_ids", "I32", 1, shp, prompt, &err);
    shp[1] = V; bs_st_writer_add(w, "prefill_logits", "F32", 2, shp, pre_logits, &err);
    shp[0] = NT; shp[1] = n_prompt; shp[2] = H; bs_st_writer_add(w, "prefill_hidden_states", "F32", 3, shp, pre_hs, &err);
    if (n_greedy > 0) {
        if (n_prompt + n_greedy - 1 > s.kv.max_ctx) { bs_fail(&err, "prompt + %ld greedy tokens exceed the context length %d", n_greedy, s.kv.max_ctx); goto out; }
        greedy = malloc(sizeof(int32_t) * n_greedy); step_logits = malloc(sizeof(float) * n_greedy * V);
        memcpy(step_logits, pre_logits + (size_t)(n_prompt - 1) * V, sizeof(float) * V);
        bs_fwd_out one = { .logits = d_logits };
        for (long i = 0; i < n_greedy; i++) {
            if (i > 0) {
                if (bs_qwen3_forward(&e->target, &s.kv, &greedy[i - 1], 1, &one, &err)) goto out;
                be->download(be, step_logits + i * V, d_logits, sizeof(float) * V);
            }
            greedy[i] = bs_argmax(step_logits + i * V, V);
        }
        shp[0] = n_greedy; bs_st_writer_add(w, "greedy_ids", "I32", 1, shp, greedy, &err);
        shp[1] = V; bs_st_writer_add(w, "greedy_step_logits", "F32", 2, shp, step_logits, &err);
    }
    if (n_block > 0) {
        // A verify step: the block runs on top of the prompt's cache (rolled back past any greedy rows).
        if (bs_kv_rollback(&s.kv, n_prompt, &err) || bs_qwen3_forward(&e->target, &s.kv, block, n_block, &fo, &err)) goto out;
        blk_logits = malloc(sizeof(float) * n_block * V); blk_taps = malloc(sizeof(float) * n_block * NT * H);
        be->download(be, blk_logits, d_logits, sizeof(float) * n_block * V);
        be->download(be, blk_taps, d_taps, sizeof(float) * n_block * NT * H);
        blk_hs = by_layer(blk_taps, n_block, NT, H);
        shp[0] = n_block; bs_st_writer_add(w, "block_ids", "I32", 1, shp, block, &err);
        shp[1] = V; bs_st_writer_add(w, "block_logits", "F32", 2, shp, blk_logits, &err);
        shp[0] = NT; shp[1] = n_block; shp[2] = H; bs_st_writer_add(w, "block_hidden_states", "F32", 3, shp, blk_hs, &err);
    }
    // One drafter serves both the block dump and the speculative run (rolled back in between).
    if (drafter && bs_dflash_open(&dft, drafter, &e->target, s.kv.max_ctx, &err)) goto out;
    if (dft && dump_drafter(e, dft, prompt, n_prompt, pre_logits, pre_taps, w, &dd, &err)) goto out;
    if (dft && n_greedy > 0 && dump_spec_run(e, dft, prompt, n_prompt, n_greedy, w, &dd, &err)) goto out;
    if (bs_st_writer_write(w, out_path, &err)) goto out;
    rc = 0;
out:
    if (rc) fprintf(stderr, "blockspec dump: %s\n", err.msg);
    bs_st_writer_free(w);
    free(pre_logits); free(pre_taps); free(pre_hs); free(step_logits); free(greedy); free(blk_logits); free(blk_taps); free(blk_hs);
    free(prompt); free(block);
    drafter_dump_free(&dd);
    if (dft) dft->free(dft);
    if (d_logits) e->be->free(e->be, d_logits);
    if (d_taps) e->be->free(e->be, d_taps);
    if (e) { if (s.eng) bs_session_free(&s); bs_engine_close(e); }
    return rc;
}
