// blockspec dump -m DIR --prompt-ids 1,2,3 [-n N] [--block-ids 4,5] --out FILE.safetensors
// Writes what the engine computed, under the names and shapes of the reference vectors
// (shared/fixtures/target.expect.safetensors), so any reference set can be compared with it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/commands.h"
#include "engine/engine.h"

static void usage(void) {
    fprintf(stderr, "usage: blockspec dump -m DIR --prompt-ids IDS [-n N] [--block-ids IDS] [--device D] --out FILE.safetensors\n");
}

// [rows][n_taps*H] -> [n_taps][rows][H]
static float *by_layer(const float *rows_major, int rows, int n_taps, int H) {
    float *o = malloc(sizeof(float) * rows * n_taps * H);
    for (int r = 0; r < rows; r++)
        for (int t = 0; t < n_taps; t++)
            memcpy(o + ((size_t)t * rows + r) * H, rows_major + ((size_t)r * n_taps + t) * H, sizeof(float) * H);
    return o;
}

int cmd_dump(int argc, char **argv) {
    const char *model = NULL, *out_path = NULL, *device = "cpu", *v;
    int32_t *prompt = NULL, *block = NULL; int n_prompt = 0, n_block = 0; long n_greedy = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m")) { if (!(model = cli_value(argc, argv, &i))) return 2; }
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
    int rc = 1;
    if (bs_engine_open(&e, model, device, &err) || bs_session_init(&s, e, 0, NULL, &err)) goto out;
    const bs_qwen3_config *c = &e->cfg;
    int V = c->vocab_size, H = c->hidden_size, NT = c->n_layers + 1;
    bs_backend *be = e->be;
    int taps[1024];
    for (int t = 0; t < NT && t < 1024; t++) taps[t] = t;
    size_t rows_max = n_prompt > n_block ? n_prompt : n_block;
    float *d_logits = be->alloc(be, sizeof(float) * rows_max * V, &err), *d_taps = be->alloc(be, sizeof(float) * rows_max * NT * H, &err);
    if (!d_logits || !d_taps) goto out;
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
    be->free(be, d_logits); be->free(be, d_taps);
    if (bs_st_writer_write(w, out_path, &err)) goto out;
    rc = 0;
out:
    if (rc) fprintf(stderr, "blockspec dump: %s\n", err.msg);
    bs_st_writer_free(w);
    free(pre_logits); free(pre_taps); free(pre_hs); free(step_logits); free(greedy); free(blk_logits); free(blk_taps); free(blk_hs);
    free(prompt); free(block);
    if (e) { if (s.eng) bs_session_free(&s); bs_engine_close(e); }
    return rc;
}
