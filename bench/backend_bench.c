// backend_bench -m DIR [--device cuda] [--ctx 512] [--steps 64] [--block 16] [--rows N,N,...]
// Decode-shaped timings of one backend in one run: device-to-device copy bandwidth (the roofline's
// ceiling), plain greedy decode tok/s against the bandwidth roofline, the target forward of B rows
// vs 1 row at the context length, and each weight GEMM's achieved bandwidth at 1 and B rows.
// Results are printed as a table (last) and as `key value` lines for scripts.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/engine.h"
#include "model/dflash.h"
#include "runtime/runtime.h"
#include "spec/spec_loop.h"
#include "util/timer.h"

static int cmp_d(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
static double median(double *v, int n) { qsort(v, n, sizeof *v, cmp_d); return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]); }

static double mat_bytes(const bs_mat *m) { return (double)m->rows * m->cols * bs_dtype_size(m->dtype); }

int main(int argc, char **argv) {
    const char *model = NULL, *device = "cuda";
    int ctx = 512, steps = 64, B = 16;
    const char *drafters[16], *vocab[16] = { 0 }, *draft_vocab = NULL; int n_drafters = 0, lossy[16] = { 0 }, fp8 = 0, gemm_only = 0, quick = 0;
    int extra_rows[8], n_extra = 0;   // --rows: more forward sizes to time besides 1 and --block (a verify of each size)
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(argv[i], "--ctx") && i + 1 < argc) ctx = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--block") && i + 1 < argc) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--drafter") && i + 1 < argc && n_drafters < 4) drafters[n_drafters++] = argv[++i];
        else if (!strcmp(argv[i], "--drafter-fp8")) fp8 = 1;   // each drafter also with 8-bit weights (bs_drafter_opts.lossy_weights)
        else if (!strcmp(argv[i], "--draft-vocab") && i + 1 < argc) draft_vocab = argv[++i];   // ... and with this draft vocabulary
        else if (!strcmp(argv[i], "--gemm-only")) gemm_only = 1;   // stop after the GEMM figures (profiling one kernel)
        else if (!strcmp(argv[i], "--quick")) quick = 1;   // decode and the 1 / B-row forwards only
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) {   // e.g. --rows 2,4,8: forward_rowsN_ms for each (1..64)
            for (char *p = argv[++i]; *p && n_extra < 8; ) {
                long v = strtol(p, &p, 10);
                if (v < 1 || v > 64) { fprintf(stderr, "backend_bench: --rows takes row counts from 1 to 64\n"); return 2; }
                extra_rows[n_extra++] = (int)v;
                if (*p == ',') p++; else if (*p) { fprintf(stderr, "backend_bench: --rows: a comma-separated list\n"); return 2; }
            }
        }
        else { fprintf(stderr, "usage: backend_bench -m DIR [--device cuda] [--ctx 512] [--steps 64] [--block 16] [--drafter DIR]... [--drafter-fp8] [--draft-vocab FILE] [--gemm-only] [--quick] [--rows N,N,...]\n"); return 2; }
    }
    for (int i = 0, n0 = n_drafters; fp8 && i < n0; i++) { drafters[n_drafters] = drafters[i]; lossy[n_drafters++] = 1; }
    for (int i = 0, n0 = n_drafters; draft_vocab && i < n0; i++) { drafters[n_drafters] = drafters[i]; lossy[n_drafters] = lossy[i]; vocab[n_drafters++] = draft_vocab; }
    if (!model || ctx < 1 || steps < 1 || B < 1 || B > 64) { fprintf(stderr, "usage: backend_bench -m DIR [--device cuda] [--ctx 512] [--steps 64] [--block 16]\n"); return 2; }
    bs_err err = {0};
    bs_engine *e = NULL;
    double t0 = bs_now();
    if (bs_engine_open(&e, model, device, &err)) { fprintf(stderr, "backend_bench: %s\n", err.msg); return 1; }
    bs_backend *be = e->be;
    const bs_qwen3_config *c = &e->cfg;
    int V = c->vocab_size, H = c->hidden_size;
    printf("load_s %.2f\n", bs_now() - t0);

    // 1. device-to-device copy bandwidth (bytes read + bytes written)
    size_t cb = (size_t)1 << 30;
    void *ba = be->alloc(be, cb, &err), *bb = be->alloc(be, cb, &err);
    double bw = 0;
    if (ba && bb) {
        double tr[7];
        for (int r = 0; r < 2; r++) be->copy(be, bb, ba, cb);
        be->sync(be);
        for (int r = 0; r < 7; r++) {
            double s = bs_now();
            for (int k = 0; k < 10; k++) be->copy(be, (k & 1) ? ba : bb, (k & 1) ? bb : ba, cb);
            be->sync(be);
            tr[r] = bs_now() - s;
        }
        bw = 2.0 * cb * 10 / median(tr, 7);
        be->free(be, ba); be->free(be, bb);
    } else { fprintf(stderr, "backend_bench: copy buffers: %s\n", err.msg); }
    printf("copy_bw_GBps %.1f\n", bw / 1e9);

    // bytes a decode step must read: every layer weight + the LM head (the embedding: one row)
    double wbytes = mat_bytes(&e->target.lm_head) + mat_bytes(&e->target.norm);
    for (int l = 0; l < c->n_layers; l++) {
        bs_qwen3_layer *L = &e->target.layers[l];
        const bs_mat *ms[] = { &L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->q_norm, &L->k_norm, &L->mlp_norm, &L->w_gate, &L->w_up, &L->w_down };
        for (int k = 0; k < 11; k++) wbytes += mat_bytes(ms[k]);
    }
    // K and V rows (fp32) each layer's attention reads at ctx: its own heads and head size (Gemma-4's full layers
    // differ from its sliding ones; the pool's rows are the widest layer's, but a layer reads only its own
    // width), and no more than the window on a sliding layer. KV-shared layers read their source's rows.
    double kvbytes = 0;
    for (int l = 0; l < c->n_layers; l++) {
        int rows = ctx;
        if (c->arch == BS_ARCH_GEMMA4 && !c->gemma.full[l] && c->gemma.sliding_window < rows) rows = c->gemma.sliding_window;
        kvbytes += 2.0 * rows * bs_cfg_layer_kv_heads(c, l) * bs_cfg_layer_head_dim(c, l) * 4;
    }
    double roof = bw / (wbytes + kvbytes);
    printf("weight_bytes_per_step %.0f\nkv_bytes_at_ctx %.0f\nroofline_tok_s %.1f\n", wbytes, kvbytes, roof);

    // 2. per-GEMM bandwidth at 1 and B rows (layer 0 weights, the LM head)
    bs_qwen3_layer *L0 = &e->target.layers[0];
    struct { const char *name; const bs_mat *w; } gm[] = {
        { "q_proj", &L0->wq }, { "k_proj", &L0->wk }, { "o_proj", &L0->wo }, { "gate_proj", &L0->w_gate }, { "down_proj", &L0->w_down }, { "lm_head", &e->target.lm_head },
    };
    size_t maxd = (size_t)V > (size_t)c->intermediate_size ? (size_t)V : (size_t)c->intermediate_size;
    float *gx = be->alloc(be, sizeof(float) * 64 * maxd, &err), *gy = be->alloc(be, sizeof(float) * 64 * maxd, &err);
    // some non-zero activations
    float *hx = malloc(sizeof(float) * 64 * maxd);
    for (size_t i = 0; i < 64 * maxd; i++) hx[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    if (gx) be->upload(be, gx, hx, sizeof(float) * 64 * maxd);
    free(hx);
    double gemm_gbps[6][2];
    for (int g = 0; g < 6 && gx && gy && !quick; g++)
        for (int k = 0; k < 2; k++) {
            int n = k ? B : 1, reps = gm[g].w == &e->target.lm_head ? 20 : 100;
            for (int r = 0; r < 3; r++) be->matmul(be, gy, gx, n, gm[g].w, 0);
            be->sync(be);
            double s = bs_now();
            for (int r = 0; r < reps; r++) be->matmul(be, gy, gx, n, gm[g].w, 0);
            be->sync(be);
            double t = (bs_now() - s) / reps;
            gemm_gbps[g][k] = mat_bytes(gm[g].w) / t / 1e9;
            printf("gemm_%s_rows%d_us %.2f GBps %.1f\n", gm[g].name, n, t * 1e6, gemm_gbps[g][k]);
        }

    // 8-bit weights (a drafter's, --drafter-fp8) of the layer shapes at 1 and B rows, bytes = 1 per weight
    double f8_gbps[3][2] = { { 0 } };
    const int qd = c->n_heads * c->head_dim, Id = c->intermediate_size;
    const int f8_shape[3][2] = { { qd, H }, { Id, H }, { H, Id } };
    for (int g = 0; g < 3 && gx && gy && be->weight_lossy && !quick; g++) {
        bs_mat host = { NULL, BS_BF16, f8_shape[g][0], f8_shape[g][1], 0 }, w8;
        uint16_t *hw = malloc(sizeof(uint16_t) * (size_t)host.rows * host.cols);
        for (size_t i = 0; hw && i < (size_t)host.rows * host.cols; i++) hw[i] = bs_f32_to_bf16((float)((i * 2246822519u) % 2001) / 1000.0f - 1.0f);
        host.data = hw;
        if (!hw || be->weight_lossy(be, &w8, &host, &err) != 0) { free(hw); continue; }
        free(hw);
        for (int k = 0; k < 2; k++) {
            int n = k ? B : 1;
            for (int r = 0; r < 3; r++) be->matmul(be, gy, gx, n, &w8, 0);
            be->sync(be);
            double s0 = bs_now();
            for (int r = 0; r < 100; r++) be->matmul(be, gy, gx, n, &w8, 0);
            be->sync(be);
            double t = (bs_now() - s0) / 100;
            f8_gbps[g][k] = (double)host.rows * host.cols / t / 1e9;
            printf("gemm_8bit_%dx%d_rows%d_us %.2f GBps %.1f\n", f8_shape[g][0], f8_shape[g][1], n, t * 1e6, f8_gbps[g][k]);
        }
    }

    // grouped launches as the forward issues them (q/k/v, gate/up)
    double grp_us[2][2] = { { 0, 0 }, { 0, 0 } };
    for (int gi = 0; gi < 2 && gx && gy && be->matmul_multi && !quick; gi++)
        for (int k = 0; k < 2; k++) {
            int n = k ? B : 1, cnt = gi ? 2 : 3;
            const bs_mat *ws[3] = { gi ? &L0->w_gate : &L0->wq, gi ? &L0->w_up : &L0->wk, &L0->wv };
            size_t off = 0; float *ys[3];
            for (int q = 0; q < cnt; q++) { ys[q] = gy + off; off += (size_t)n * ws[q]->rows; }
            double bytes = 0; for (int q = 0; q < cnt; q++) bytes += mat_bytes(ws[q]);
            for (int r = 0; r < 3; r++) be->matmul_multi(be, cnt, ys, gx, n, ws, 0);
            be->sync(be);
            double s0 = bs_now();
            for (int r = 0; r < 100; r++) be->matmul_multi(be, cnt, ys, gx, n, ws, 0);
            be->sync(be);
            double t = (bs_now() - s0) / 100;
            grp_us[gi][k] = t * 1e6;
            printf("gemm_group_%s_rows%d_us %.2f GBps %.1f\n", gi ? "gate_up" : "qkv", n, t * 1e6, bytes / t / 1e9);
        }

    if (gemm_only) { bs_engine_close(e); return 0; }

    // 3. prefill ctx tokens, then plain greedy decode with a host sync per token (as `generate` does)
    bs_session s;
    if (bs_session_init(&s, e, ctx + steps + 2 * B + 64, NULL, &err)) { fprintf(stderr, "backend_bench: %s\n", err.msg); return 1; }
    // Logits of a whole verify block (up to 65 rows, or --block + 1); the session's buffer holds one row.
    float *lg = be->alloc(be, sizeof(float) * (size_t)(B + 1 > 65 ? B + 1 : 65) * V, &err);
    if (!lg) { fprintf(stderr, "backend_bench: %s\n", err.msg); return 1; }
    int32_t *ids = malloc(sizeof(int32_t) * (ctx + 64));
    uint64_t x = 12345;
    for (int i = 0; i < ctx + 64; i++) { x = x * 6364136223846793005ull + 1442695040888963407ull; ids[i] = (int32_t)((x >> 33) % (uint64_t)V); }
    bs_fwd_out last = { .logits = lg };
    t0 = bs_now();
    if (bs_qwen3_forward(&e->target, &s.kv, ids, ctx, &last, &err)) { fprintf(stderr, "backend_bench: %s\n", err.msg); return 1; }
    be->sync(be);
    double t_prefill = bs_now() - t0;
    printf("prefill_%d_s %.3f\n", ctx, t_prefill);
    double decode_tps[2] = { 0, 0 };
    for (int mode = 0; mode < (quick ? 1 : 2); mode++) {     // 0: recorded graphs (default), 1: plain launches
        e->target.use_graphs = mode == 0;
        int32_t tok;
        be->argmax(be, &tok, lg, 1, V);
        for (int w = 0; w < 4; w++) { bs_qwen3_forward(&e->target, &s.kv, &tok, 1, &last, &err); be->argmax(be, &tok, lg, 1, V); }
        bs_kv_rollback(&s.kv, ctx, &err);
        t0 = bs_now();
        for (int i = 0; i < steps; i++) {
            if (bs_qwen3_forward(&e->target, &s.kv, &tok, 1, &last, &err)) { fprintf(stderr, "backend_bench: %s\n", err.msg); return 1; }
            be->argmax(be, &tok, lg, 1, V);
        }
        double t = bs_now() - t0;
        decode_tps[mode] = steps / t;
        printf("decode_%s_tok_s %.2f step_ms %.3f\n", mode ? "nograph" : "graph", steps / t, t / steps * 1e3);
        bs_kv_rollback(&s.kv, ctx, &err);
    }
    e->target.use_graphs = 1;

    // 4. target forward of B rows (all logits, as a verify needs) vs 1 row, at ctx
    double fw[2];
    for (int k = 0; k < 2 + n_extra; k++) {
        int n = k == 0 ? 1 : k == 1 ? B : extra_rows[k - 2], R = 30;
        bs_fwd_out fo = { .logits = lg, .logits_all = 1 };
        double tv[30];
        for (int w = 0; w < 3; w++) { bs_qwen3_forward(&e->target, &s.kv, ids + ctx, n, &fo, &err); be->sync(be); bs_kv_rollback(&s.kv, ctx, &err); }
        for (int r = 0; r < R; r++) {
            double a = bs_now();
            bs_qwen3_forward(&e->target, &s.kv, ids + ctx, n, &fo, &err);
            be->sync(be);
            tv[r] = bs_now() - a;
            bs_kv_rollback(&s.kv, ctx, &err);
        }
        double med = median(tv, R);
        if (k < 2) fw[k] = med;
        printf("forward_rows%d_ms %.3f\n", n, med * 1e3);
    }
    if (quick) { bs_engine_close(e); return 0; }

    // 5. speculative rounds: drafter pass, verify [anchor, drafts] (all logits + taps + argmax), context
    //    growth for a full accept; each timed to completion (host sync), best of 10
    double dr_draft[16] = { 0 }, dr_ver[16] = { 0 }, dr_ctx[16] = { 0 }, dr_loop[16] = { 0 }, dec_step = 1.0 / decode_tps[0];
    int dr_n[16] = { 0 };
    for (int di = 0; di < n_drafters; di++) {
        bs_drafter *d = NULL;
        bs_drafter_opts dop = { .lossy_weights = lossy[di], .draft_vocab = vocab[di] };
        if (bs_dflash_open_opts(&d, drafters[di], &e->target, ctx + 200, &dop, &err)) { fprintf(stderr, "backend_bench: %s\n", err.msg); continue; }
        bs_drafter_ctx dc;
        if (bs_drafter_ctx_init(d, &dc, ctx + 200, &err)) { fprintf(stderr, "backend_bench: %s\n", err.msg); d->free(d); continue; }
        int n = d->max_drafts, F = d->n_taps * H;
        dr_n[di] = n;
        float *taps = be->alloc(be, sizeof(float) * (size_t)(ctx + 80) * F, &err);
        bs_kv_rollback(&s.kv, 0, &err);
        bs_fwd_out fo = { .logits = lg, .taps = d->taps, .n_taps = d->n_taps, .tap_out = taps };
        if (!taps || bs_qwen3_forward(&e->target, &s.kv, ids, ctx, &fo, &err) || d->add_context(d, &dc, taps, ctx, &err)) {
            fprintf(stderr, "backend_bench: %s\n", err.msg); bs_drafter_ctx_free(d, &dc); d->free(d); continue;
        }
        bs_sampling greedy = { 0 };
        bs_draft dr;
        double tv[10];
        for (int r = 0; r < 10; r++) {
            double a = bs_now();
            d->propose(d, &dc, ids[ctx], n, &greedy, NULL, &dr, &err);
            be->sync(be);
            tv[r] = bs_now() - a;
        }
        qsort(tv, 10, sizeof *tv, cmp_d); dr_draft[di] = tv[0];
        bs_fwd_out vo = { .logits = lg, .logits_all = 1, .taps = d->taps, .n_taps = d->n_taps, .tap_out = taps };
        int32_t vid[65], targ[65];
        vid[0] = ids[ctx]; memcpy(vid + 1, dr.tokens, sizeof(int32_t) * n);
        for (int r = 0; r < 10; r++) {
            bs_kv_rollback(&s.kv, ctx, &err);
            double a = bs_now();
            bs_qwen3_forward(&e->target, &s.kv, vid, n + 1, &vo, &err);
            be->argmax(be, targ, lg, n + 1, V);
            tv[r] = bs_now() - a;
        }
        qsort(tv, 10, sizeof *tv, cmp_d); dr_ver[di] = tv[0];
        for (int r = 0; r < 10; r++) {
            double a = bs_now();
            d->add_context(d, &dc, taps, n + 1, &err);
            be->sync(be);
            tv[r] = bs_now() - a;
            d->rollback(d, &dc, ctx, &err);
        }
        qsort(tv, 10, sizeof *tv, cmp_d); dr_ctx[di] = tv[0];
        // Whole rounds as the speculative loop runs them (spec_loop.c): propose with the drafts left on the
        // device, the verify forward from them + argmax and the one download of drafts and picks
        // (bs_verify_greedy), the full accept's context growth (no sync of its own: the next round's work
        // queues behind it). The rollbacks between rounds are host bookkeeping.
        // 20 rounds back to back, one sync at the end, per round; best of 5 such runs (the parts above: best of 10).
        int32_t *scratch = be->alloc(be, sizeof(int32_t) * (2 * BS_MAX_DRAFT + 2), &err);
        double rl[5];
        for (int rep = 0; rep < 5; rep++) {
            be->sync(be);
            double a = bs_now();
            for (int r = 0; r < 20; r++) {
                bs_kv_rollback(&s.kv, ctx, &err);
                d->rollback(d, &dc, ctx, &err);
                if (d->propose_on_device) d->propose_on_device(d, &dc, ids[ctx], n, &greedy, NULL, &dr, &err);
                else d->propose(d, &dc, ids[ctx], n, &greedy, NULL, &dr, &err);
                bs_verify_greedy(&e->target, NULL, &s.kv, ids[ctx], &dr, n, &vo, scratch, vid, targ, &err);
                d->add_context(d, &dc, taps, n + 1, &err);
            }
            be->sync(be);
            rl[rep] = (bs_now() - a) / 20;
        }
        d->rollback(d, &dc, ctx, &err);
        be->free(be, scratch);
        qsort(rl, 5, sizeof *rl, cmp_d); dr_loop[di] = rl[0];
        printf("drafter %s%s%s n %d draft_ms %.3f verify_ms %.3f ctx_ms %.3f round_ms %.3f round_loop_ms %.3f\n", drafters[di], lossy[di] ? " (8-bit)" : "", vocab[di] ? " (draft vocabulary)" : "", n, dr_draft[di] * 1e3,
               dr_ver[di] * 1e3, dr_ctx[di] * 1e3, (dr_draft[di] + dr_ver[di] + dr_ctx[di]) * 1e3, dr_loop[di] * 1e3);
        bs_kv_rollback(&s.kv, ctx, &err);
        be->free(be, taps);
        bs_drafter_ctx_free(d, &dc);
        d->free(d);
    }

    printf("\n| figure | value |\n|---|---|\n");
    printf("| device-to-device copy bandwidth (read+write) | %.0f GB/s |\n", bw / 1e9);
    printf("| bytes per decode step (weights + KV at %d) | %.2f GB + %.3f GB |\n", ctx, wbytes / 1e9, kvbytes / 1e9);
    printf("| roofline | %.1f tok/s |\n", roof);
    printf("| plain greedy decode, graphs | %.1f tok/s (%.1f%% of roofline) |\n", decode_tps[0], 100 * decode_tps[0] / roof);
    printf("| plain greedy decode, no graphs | %.1f tok/s (%.1f%% of roofline) |\n", decode_tps[1], 100 * decode_tps[1] / roof);
    printf("| target forward 1 row / %d rows (ctx %d) | %.3f ms / %.3f ms = %.3fx |\n", B, ctx, fw[0] * 1e3, fw[1] * 1e3, fw[1] / fw[0]);
    printf("| prefill %d tokens | %.1f ms |\n", ctx, t_prefill * 1e3);
    for (int g = 0; g < 6 && gx; g++)
        printf("| GEMM %s %lldx%lld: 1 row / %d rows | %.0f / %.0f GB/s |\n", gm[g].name, (long long)gm[g].w->rows, (long long)gm[g].w->cols, B,
               gemm_gbps[g][0], gemm_gbps[g][1]);
    for (int g = 0; g < 3; g++)
        if (f8_gbps[g][0] > 0)
            printf("| GEMM 8-bit weights %dx%d: 1 row / %d rows | %.0f / %.0f GB/s |\n", f8_shape[g][0], f8_shape[g][1], B, f8_gbps[g][0], f8_gbps[g][1]);
    printf("| grouped q/k/v, gate/up: 1 row | %.1f us, %.1f us |\n", grp_us[0][0], grp_us[1][0]);
    printf("| grouped q/k/v, gate/up: %d rows | %.1f us, %.1f us |\n", B, grp_us[0][1], grp_us[1][1]);
    for (int di = 0; di < n_drafters; di++) {
        char nm[300];
        snprintf(nm, sizeof nm, "%s%s%s", strrchr(drafters[di], '/') ? strrchr(drafters[di], '/') + 1 : drafters[di], lossy[di] ? " (8-bit weights)" : "",
                 vocab[di] ? " (draft vocabulary)" : "");
        double rd = dr_draft[di] + dr_ver[di] + dr_ctx[di];
        printf("| %s (%d drafts): drafter pass / decode step | %.3f ms = %.1f%% |\n", nm, dr_n[di], dr_draft[di] * 1e3, 100 * dr_draft[di] / dec_step);
        printf("| %s: verify %d rows / context growth | %.3f ms / %.3f ms |\n", nm, dr_n[di] + 1, dr_ver[di] * 1e3, dr_ctx[di] * 1e3);
        printf("| %s: round (draft + verify + accept) / decode step | %.3f ms = %.2fx |\n", nm, rd * 1e3, rd / dec_step);
        printf("| %s: round as the loop runs it (20 back to back) / decode step | %.3f ms = %.2fx |\n", nm, dr_loop[di] * 1e3, dr_loop[di] / dec_step);
    }
    if (gx) be->free(be, gx);
    if (gy) be->free(be, gy);
    free(ids);
    be->free(be, lg);
    bs_session_free(&s);
    bs_engine_close(e);
    (void)H;
    return 0;
}
