// blockspec bench --model TARGET --round DRAFTER[,DRAFTER...] [--ctx 512]
// One speculative round at a real shape, split into its parts, each beside its roofline:
//   draft  : the drafter's block forward + LM head over the drafted rows (+ Markov walk / confidence)
//   verify : the target's forward over [anchor, drafts] with logits for every row and the taps
//   context: the drafter's K/V projection of the committed rows (measured for a full accept)
// as fractions of a plain decode step, and the speedup these imply at per-position acceptance
// rates alpha: tau = sum_{k=0..n} alpha^k tokens per round, speedup = tau * t_decode / t_round.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_roofline.h"
#include "engine/engine.h"
#include "model/dflash.h"
#include "io/drafter_config.h"
#include "util/timer.h"

double bench_roofline_time(const bs_roofline *rl, double bytes, double fmas, bs_dtype dt, int *compute_bound);
extern const char *bench_device, *bench_draft_vocab;

// Bytes of all tensors of a checkpoint folder (what one pass over the weights streams).
static double checkpoint_bytes(const char *dir) {
    bs_checkpoint *ck; bs_err err;
    if (bs_checkpoint_open(&ck, dir, &err)) return 0;
    double b = 0;
    for (int i = 0; i < ck->n_tensors; i++) b += (double)ck->tensors[i].nbytes;
    bs_checkpoint_close(ck);
    return b;
}

static double best_of(int reps, double *samples) {
    double b = 1e30;
    for (int i = 0; i < reps; i++) if (samples[i] < b) b = samples[i];
    return b;
}

int bench_round(const char *target_dir, const char *drafters, int ctx, const bs_roofline *rl) {
    bs_err err = {0};
    bs_engine *e = NULL;
    int rc = 1;
    if (bs_engine_open(&e, target_dir, bench_device, &err)) { fprintf(stderr, "bench: %s\n", err.msg); return 1; }
    const bs_qwen3_config *c = &e->cfg;
    bs_backend *be = e->be;
    int V = c->vocab_size, H = c->hidden_size;
    int64_t q = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim, I = c->intermediate_size;
    double t_layer = (double)H * q * 2 + (double)H * kvd * 2 + 3.0 * H * I;
    double t_fma_row = t_layer * c->n_layers + (double)V * H;              // target multiply-adds per row
    double t_bytes = t_fma_row * 2;                                        // bf16 weights streamed per forward
    bs_dtype dt = BS_BF16;
    bs_kv_cache kv = {0};
    float *logits = NULL, *taps = NULL;
    int32_t *ids = malloc(sizeof(int32_t) * (ctx + 64));
    for (int i = 0; i < ctx + 64; i++) ids[i] = (int32_t)((i * 7919 + 13) % V);
    if (bs_kv_init(&kv, e->kv_pool, ctx + 80, &err) || !(logits = be->alloc(be, sizeof(float) * 65 * V, &err))) goto out;
    // Plain decode step after a ctx-token cache (best of 8).
    bs_fwd_out last = { .logits = logits };
    if (bs_qwen3_forward(&e->target, &kv, ids, ctx, &last, &err)) goto out;
    double s[8];
    for (int r = 0; r < 8; r++) {
        bs_kv_rollback(&kv, ctx, &err);
        double t0 = bs_now();
        if (bs_qwen3_forward(&e->target, &kv, ids + r, 1, &last, &err)) goto out;
        int32_t tok; be->argmax(be, &tok, logits, 1, V);
        s[r] = bs_now() - t0;
    }
    double t_dec = best_of(8, s);
    int cb;
    double r_dec = bench_roofline_time(rl, t_bytes, t_fma_row, dt, &cb);
    printf("round benchmark: target %s, context %d tokens\n", target_dir, ctx);
    printf("plain decode step: %.2f ms (roofline %.2f ms, %.0f%%)\n\n", t_dec * 1e3, r_dec * 1e3, 100 * r_dec / t_dec);
    printf("%-28s %5s | %9s %6s %6s | %9s %6s %6s | %7s %7s | %s\n", "drafter", "n", "draft_ms", "x_dec", "roof%",
           "verify_ms", "x_dec", "roof%", "ctx_ms", "round", "implied speedup at alpha = 0.6 / 0.7 / 0.8 / 0.9");
    char list[4096];
    snprintf(list, sizeof list, "%s", drafters);
    for (char *dir = strtok(list, ","); dir; dir = strtok(NULL, ",")) {
        bs_drafter *d = NULL;
        bs_drafter_opts dop = { .lossy_weights = -1, .draft_vocab = bench_draft_vocab };
        if (bs_dflash_open_opts(&d, dir, &e->target, ctx + 80, &dop, &err)) { fprintf(stderr, "bench: %s\n", err.msg); goto out; }
        bs_drafter_ctx dcx;
        if (bs_drafter_ctx_init(d, &dcx, ctx + 80, &err)) { fprintf(stderr, "bench: %s\n", err.msg); d->free(d); goto out; }
        const bs_drafter_config *dc = bs_dflash_config(d);
        int n = d->max_drafts, B = dc->block_size, F = d->n_taps * H;
        if (taps) be->free(be, taps);
        if (!(taps = be->alloc(be, sizeof(float) * (size_t)(ctx > 65 ? ctx : 65) * F, &err))) { bs_drafter_ctx_free(d, &dcx); d->free(d); goto out; }
        // Drafter context for the ctx-token prompt.
        bs_kv_rollback(&kv, 0, &err);
        bs_fwd_out fo = { .logits = logits, .taps = d->taps, .n_taps = d->n_taps, .tap_out = taps };
        if (bs_qwen3_forward(&e->target, &kv, ids, ctx, &fo, &err) || d->add_context(d, &dcx, taps, ctx, &err)) { bs_drafter_ctx_free(d, &dcx); d->free(d); goto out; }
        bs_sampling greedy = { 0 };
        bs_draft dr;
        for (int r = 0; r < 8; r++) {
            double t0 = bs_now();
            if (d->propose(d, &dcx, ids[ctx], n, &greedy, NULL, &dr, &err)) { bs_drafter_ctx_free(d, &dcx); d->free(d); goto out; }
            be->sync(be);
            s[r] = bs_now() - t0;
        }
        double t_draft = best_of(8, s);
        // Verify [anchor, n drafts]: logits of every row, the drafter's taps, argmax.
        bs_fwd_out vo = { .logits = logits, .logits_all = 1, .taps = d->taps, .n_taps = d->n_taps, .tap_out = taps };
        int32_t vid[65], targ[65];
        vid[0] = ids[ctx]; memcpy(vid + 1, dr.tokens, sizeof(int32_t) * n);
        for (int r = 0; r < 8; r++) {
            bs_kv_rollback(&kv, ctx, &err);
            double t0 = bs_now();
            if (bs_qwen3_forward(&e->target, &kv, vid, n + 1, &vo, &err)) { bs_drafter_ctx_free(d, &dcx); d->free(d); goto out; }
            be->argmax(be, targ, logits, n + 1, V);
            s[r] = bs_now() - t0;
        }
        double t_ver = best_of(8, s);
        // Context growth after a full accept (n + 1 rows), then rolled back.
        for (int r = 0; r < 8; r++) {
            double t0 = bs_now();
            if (d->add_context(d, &dcx, taps, n + 1, &err)) { bs_drafter_ctx_free(d, &dcx); d->free(d); goto out; }
            be->sync(be);
            s[r] = bs_now() - t0;
            d->rollback(d, &dcx, ctx, &err);
        }
        double t_ctx = best_of(8, s);
        // Rooflines. Drafter: its own weights once (backbone + fc + LM head, the bundled DSpark copies
        // counted once) vs B rows through the backbone and n rows through the LM head.
        // With a draft vocabulary the LM head and Markov W2 stream only its Vd rows.
        double d_bytes = checkpoint_bytes(dir), Vd = bs_dflash_vocab_rows(d), r = dc->markov_rank;
        if (dc->arch == BS_DRAFTER_ZLAB) d_bytes += Vd * H * 2;                    // the target's LM head (its rows)
        else d_bytes -= (double)V * H * 2 + (V - Vd) * (H + r) * 2;               // bundled embedding: rows only; unlisted head / W2 rows
        int64_t dq = (int64_t)dc->base.n_heads * dc->base.head_dim, dkv = (int64_t)dc->base.n_kv_heads * dc->base.head_dim;
        double d_layer = (double)H * dq * 2 + (double)H * dkv * 2 + 3.0 * H * dc->base.intermediate_size;
        double d_fma = (double)B * d_layer * dc->base.n_layers + (double)n * Vd * H + (double)n * r * Vd;
        double r_draft = bench_roofline_time(rl, d_bytes, d_fma, dt, &cb);
        double r_ver = bench_roofline_time(rl, t_bytes, (n + 1) * t_fma_row, dt, &cb);
        double t_round = t_draft + t_ver + t_ctx;
        printf("%-28.28s %5d | %9.2f %6.2f %5.0f%% | %9.2f %6.2f %5.0f%% | %7.2f %7.2f |", strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir, n,
               t_draft * 1e3, t_draft / t_dec, 100 * r_draft / t_draft, t_ver * 1e3, t_ver / t_dec, 100 * r_ver / t_ver,
               t_ctx * 1e3, t_round / t_dec);
        for (double a = 0.6; a < 0.95; a += 0.1) {
            double tau = 0, p = 1;
            for (int k = 0; k <= n; k++) { tau += p; p *= a; }
            printf(" %.2fx", tau * t_dec / t_round);
        }
        printf("\n");
        fflush(stdout);
        bs_drafter_ctx_free(d, &dcx);
        d->free(d);
    }
    printf("(x_dec: time / plain decode step; round = draft + verify + context growth; roof%%: roofline time / measured time)\n");
    rc = 0;
out:
    if (rc && err.msg[0]) fprintf(stderr, "bench: %s\n", err.msg);
    if (taps) be->free(be, taps);
    if (logits) be->free(be, logits);
    bs_kv_free(&kv);
    free(ids);
    bs_engine_close(e);
    return rc;
}
