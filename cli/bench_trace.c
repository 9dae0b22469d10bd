// blockspec bench --trace FILE --concurrency 1,4,16 --schedule none,fixed,alg1 [--model DIR] [-n 128]
// Trace-driven evaluation of the schedulers (docs/scheduling.md): a recorded drafter's rounds (confidences,
// acceptance) replayed on any target through the test-only replay drafter (cli/replay_drafter.h), so the
// target does real verify work with real acceptance statistics. Greedy requests with random prompt ids
// (the target needs no tokenizer). First a plain greedy run gives every request's reference continuation
// (the replay's "right" drafts); then per level, the schedules run interleaved, --reps times, medians kept.
// Drafting costs nothing here (no drafter model runs): every speculative schedule drafts the same blocks,
// so they compare among themselves as they would with a real drafter, but against `none` this leaves out
// the drafter's share of a round.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/bench_trace.h"
#include "cli/cost_model.h"
#include "cli/replay_drafter.h"
#include "runtime/profile.h"
#include "runtime/runtime.h"
#include "util/threadpool.h"
#include "util/timer.h"

typedef struct figures { double total_tps, user_tps, tau, verified, proposed, plain; long tokens; } figures;

// Requests 0..n-1 (prompt i, reference i), at most c at a time; d NULL: plain, out[i] (cap) the tokens.
static int run_level(const bs_engine *e, bs_drafter *d, bs_sched_mode mode, const cli_costs *costs, int32_t **prompts, int n_prompt,
                     int32_t **refs, int n_ref, int n, int c, int n_new, int draft_max, float thr, const replay_trace *t, figures *f,
                     bs_err *err) {
    bs_runtime rt;
    bs_seq *seqs = calloc(n, sizeof *seqs);
    int rc = -1, next = 0;
    if (!seqs) return bs_fail(err, "out of memory");
    if (bs_runtime_init(&rt, e, d, err)) { free(seqs); return -1; }
    bs_cost_tables ct = { costs->sps, costs->n_sps, costs->block, costs->sps1, costs->n_sps1, costs->dps, costs->n_dps };
    if (bs_runtime_set_schedule_costs(&rt, mode, &ct, err)) goto out;
    double t0 = bs_now();
    for (;;) {
        while (rt.n_seqs < c && next < n) {
            bs_seq_params p = { .n_new = n_new, .use_drafter = d != NULL, .draft_max = draft_max,
                                .confidence_threshold = mode == BS_SCHED_THRESHOLD ? thr : 0 };
            if (d) replay_bind(d, n_prompt, refs[next], n_ref, next % t->n_req, 7 * (next / t->n_req));
            if (bs_seq_init(&seqs[next], e, d, prompts[next], n_prompt, &p, err) || bs_runtime_add(&rt, &seqs[next], err)) goto out;
            next++;
        }
        if (rt.n_seqs == 0) break;
        if (bs_runtime_step(&rt, err) < 0) goto out;
    }
    double wall = bs_now() - t0, rate = 0;
    long rounds = 0, acc = 0, ver = 0, prop = 0;
    memset(f, 0, sizeof *f);
    for (int i = 0; i < n; i++) {
        const bs_spec_stats *st = &seqs[i].st;
        double tg = st->t_total - st->t_prefill;
        f->tokens += seqs[i].n_out;
        rate += seqs[i].n_out > 1 && tg > 0 ? (seqs[i].n_out - 1) / tg : 0;
        rounds += st->rounds; acc += st->accepted; ver += st->drafted; prop += st->proposed;
        // Steps without a drafter pass (alg1 / async chose plain decoding): tokens no round emitted (the
        // first comes from the prompt; a last round cut by the budget makes this an estimate).
        long emitted = 0;
        for (int k = 0; k < st->n_lengths; k++) emitted += st->acceptance_lengths[k];
        if (d && seqs[i].n_out - 1 > emitted) f->plain += seqs[i].n_out - 1 - emitted;
        if (!d && refs[i]) memcpy(refs[i], seqs[i].out, sizeof(int32_t) * seqs[i].n_out);
    }
    f->total_tps = f->tokens / wall;
    f->user_tps = rate / n;
    f->tau = rounds ? (double)(acc + rounds) / rounds : 1;
    f->verified = rounds ? (double)ver / rounds : 0;
    f->proposed = rounds ? (double)prop / rounds : 0;
    f->plain /= n;
    rc = 0;
out:
    for (int i = 0; i < n; i++) if (seqs[i].eng) bs_seq_free(&seqs[i]);
    bs_runtime_free(&rt);
    free(seqs);
    return rc;
}

// cli_measure_fn over the engine this bench opened itself (ctx: the const bs_engine *).
static int measure_engine(void *ctx, const int *rows, int n, int ctx_rows, int block, int reps, double *sps, char *err, size_t len) {
    bs_err e = {0};
    if (bs_profile_forwards(ctx, rows, n, ctx_rows, block, reps, sps, &e)) { snprintf(err, len, "%s", e.msg); return -1; }
    return 0;
}

static int by_value(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
static double median(double *v, int n) { qsort(v, n, sizeof *v, by_value); return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2; }

int bench_trace(const bench_trace_opts *o) {
    bs_err err = {0};
    char cerr[1024];
    bs_engine *e = NULL;
    bs_drafter *d = NULL;
    replay_trace t = {0};
    int32_t **prompts = NULL, **refs = NULL;
    cli_costs costs = { 0 };
    figures *fig = NULL;
    int rc = 1, max_c = 8, N = 0, any_sps = 0;
    for (int i = 0; i < o->n_levels; i++) if (o->levels[i] > max_c) max_c = o->levels[i];
    for (int i = 0; i < o->n_scheds; i++) any_sps |= bs_sched_needs_sps(o->scheds[i]);
    N = max_c;
    if (replay_trace_load(&t, o->trace, cerr, sizeof cerr)) { bs_fail(&err, "%s", cerr); goto out; }
    if (bs_engine_open(&e, o->model, o->device, &err)) goto out;
    const int V = e->cfg.vocab_size, K = o->draft_max ? o->draft_max : t.max_n, n_ref = o->n_new + K + 1;
    if (K < 1 || K > BS_MAX_DRAFT) { bs_fail(&err, "draft length %d outside [1, %d]", K, BS_MAX_DRAFT); goto out; }
    if (!(d = replay_drafter_new(&t, V, K))) { bs_fail(&err, "out of memory"); goto out; }
    if (!(prompts = calloc(N, sizeof *prompts)) || !(refs = calloc(N, sizeof *refs))) { bs_fail(&err, "out of memory"); goto out; }
    for (int i = 0; i < N; i++) {
        bs_rng g; bs_rng_seed(&g, 1000 + i);
        if (!(prompts[i] = malloc(sizeof(int32_t) * o->prompt_len)) || !(refs[i] = calloc(n_ref, sizeof(int32_t)))) { bs_fail(&err, "out of memory"); goto out; }
        for (int k = 0; k < o->prompt_len; k++) prompts[i][k] = (int32_t)(bs_rng_u64(&g) % V);
    }
    long n_rounds = 0;
    for (int r = 0; r < t.n_req; r++) n_rounds += t.n_rounds[r];
    printf("trace %s: %d requests, %ld rounds over all, longest %d drafts; target %s on %s; %d drafts per round, %d tokens per request, "
           "prompts of %d random ids\n", o->trace, t.n_req, n_rounds, t.max_n, o->model, e->be->name, K, o->n_new, o->prompt_len);
    // The references: every request's greedy continuation, decoded plainly (all at once).
    double t0 = bs_now();
    figures ff;
    if (run_level(e, NULL, BS_SCHED_FIXED, &costs, prompts, o->prompt_len, refs, n_ref, N, N, n_ref, K, 0, &t, &ff, &err)) goto out;
    printf("references: %d greedy continuations of %d tokens in %.1f s\n", N, n_ref, bs_now() - t0);
    if (any_sps) {
        char dev[512], shape[256];
        // The target's tables only: the replay drafter costs nothing (a drafter table in a given file is dropped).
        cli_cost_opts co = { .file = o->profile, .max_rows = max_c * (K + 1), .max_seqs = max_c, .ctx = 256, .block = K + 1, .reps = 3,
                             .measure = measure_engine, .measure_ctx = e };
        cli_cost_device_key(e->be->name, bs_pool_size(), dev, sizeof dev);
        if (bs_model_shape(e, shape, sizeof shape)) snprintf(shape, sizeof shape, "unknown");
        co.device = dev; co.shape = shape;
        if (cli_costs_get(&co, &costs, cerr, sizeof cerr)) { bs_fail(&err, "%s", cerr); goto out; }
        free(costs.dps); costs.dps = NULL; costs.n_dps = 0;
        printf("cost model: %d rows, %.1f forwards/s at 1 row, %.1f at %d", costs.n_sps, costs.sps[0], costs.sps[costs.n_sps - 1], costs.n_sps);
        if (costs.sps1) printf("; plain: %.1f forwards/s with %d one-row sequences", costs.sps1[costs.n_sps1 - 1], costs.n_sps1);
        printf("\n");
    }
    if (!(fig = calloc((size_t)o->n_scheds * o->reps, sizeof *fig))) { bs_fail(&err, "out of memory"); goto out; }
    printf("| concurrent | schedule | total tok/s | per-user tok/s | tau | verified/round | drafted/round | plain steps/request | x fixed (total) | x none (per-user) |\n"
           "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int li = 0; li < o->n_levels; li++) {
        int c = o->levels[li], n = c > 8 ? c : 8;
        for (int rep = 0; rep < o->reps; rep++)
            for (int si = 0; si < o->n_scheds; si++)
                if (run_level(e, d, o->scheds[si], &costs, prompts, o->prompt_len, refs, n_ref, n, c, o->n_new, K, o->threshold, &t,
                              &fig[si * o->reps + rep], &err)) goto out;
        double tot[64], usr[64], fixed_tot = 0, none_usr = 0, v[64];
        figures med[64];
        for (int si = 0; si < o->n_scheds && si < 64; si++) {
            const figures *fs = &fig[si * o->reps];
            for (int r = 0; r < o->reps; r++) v[r] = fs[r].total_tps;
            med[si].total_tps = median(v, o->reps);
            for (int r = 0; r < o->reps; r++) v[r] = fs[r].user_tps;
            med[si].user_tps = median(v, o->reps);
            med[si].tau = fs[0].tau; med[si].verified = fs[0].verified; med[si].proposed = fs[0].proposed; med[si].plain = fs[0].plain;
            tot[si] = med[si].total_tps; usr[si] = med[si].user_tps;
            if (o->scheds[si] == BS_SCHED_FIXED) fixed_tot = tot[si];
            if (o->scheds[si] == BS_SCHED_NONE) none_usr = usr[si];
        }
        for (int si = 0; si < o->n_scheds && si < 64; si++) {
            printf("| %d | %s | %.1f | %.2f | %.2f | %.2f | %.2f | %.1f | ", c, bs_sched_name(o->scheds[si]), tot[si], usr[si], med[si].tau,
                   med[si].verified, med[si].proposed, med[si].plain);
            if (fixed_tot > 0) printf("%.2fx | ", tot[si] / fixed_tot); else printf("- | ");
            if (none_usr > 0) printf("%.2fx |\n", usr[si] / none_usr); else printf("- |\n");
        }
        fflush(stdout);
    }
    printf("reference mismatches (anchors off the reference: should be 0): %ld\n", replay_mismatches(d));
    rc = 0;
out:
    if (rc) fprintf(stderr, "bench: %s\n", err.msg);
    for (int i = 0; prompts && i < N; i++) { free(prompts[i]); free(refs[i]); }
    free(prompts); free(refs); free(fig);
    cli_costs_free(&costs);
    if (d) d->free(d);
    replay_trace_free(&t);
    bs_engine_close(e);
    return rc;
}
