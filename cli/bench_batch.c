// blockspec bench --concurrency 1,2,4,8: many requests decoded together through the public runtime API,
// plain and speculative. Per level C: the same 8 prompts (C of them at a time; more requests when C > 8),
// total tokens/s (every request's tokens over the wall time, prefills included) and the mean per-request
// decode rate; the best of --reps runs.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "blockspec.h"
#include "cli/bench_batch.h"
#include "util/timer.h"

// Distinct prompts (code and prose), request i gets prompt i % 8.
static const char *const bench_prompts[8] = {
    "static int", "It is a truth universally acknowledged", "int main(void) {", "The history of the",
    "#include <stdio.h>\n", "Once upon a time", "struct list_head {", "In this paper we",
};

typedef struct batch_figures { double total_tps, per_request_tps; long tokens; } batch_figures;

// max(8, c) requests (prompt i % 8), at most c at a time: a finished one makes room for the next
// (continuous batching), so every level decodes the same prompts and the figures compare.
static int run_level(blockspec *bs, int32_t **ids, size_t *n_ids, int c, const blockspec_params *p, batch_figures *f, char *err, size_t len) {
    int n = c > 8 ? c : 8, next = 0, running = 0, rc = -1;
    blockspec_request **r = calloc(n, sizeof *r);
    if (!r) { snprintf(err, len, "out of memory"); return -1; }
    double t0 = bs_now();
    for (;;) {
        for (; running < c && next < n; next++, running++)
            if (blockspec_submit(bs, ids[next % 8], n_ids[next % 8], p, NULL, NULL, &r[next], err, len)) goto out;
        if (running == 0) break;
        if ((running = blockspec_step(bs, err, len)) < 0) goto out;
    }
    double wall = bs_now() - t0, rate = 0;
    f->tokens = 0;
    for (int i = 0; i < n; i++) {
        blockspec_stats st;
        blockspec_request_stats(r[i], &st);
        f->tokens += st.n_generated;
        rate += st.n_generated > 1 && st.t_generate > 0 ? (st.n_generated - 1) / st.t_generate : 0;
    }
    f->total_tps = f->tokens / wall;
    f->per_request_tps = rate / n;
    rc = 0;
out:
    for (int i = 0; i < n; i++) blockspec_request_free(bs, r[i]);
    free(r);
    return rc;
}

int bench_batch(const bench_batch_opts *o) {
    char err[1024];
    blockspec *bs = NULL;
    int32_t *ids[8] = { 0 }; size_t n_ids[8];
    int rc = 1;
    if (blockspec_open(&bs, o->model, o->drafter, o->device, err, sizeof err)) goto out;
    for (int i = 0; i < 8; i++) if (blockspec_tokenize(bs, bench_prompts[i], &ids[i], &n_ids[i], err, sizeof err)) goto out;
    printf("| concurrent | mode | total tok/s | per-request tok/s | tokens |\n|---:|---|---:|---:|---:|\n");
    for (int li = 0; li < o->n_levels; li++)
        for (int spec = 0; spec < (o->drafter ? 2 : 1); spec++) {
            blockspec_params p = blockspec_default_params();
            p.n_new = o->n_new; p.stop_at_eos = 0; p.use_drafter = spec; p.draft_max = o->draft_max;
            batch_figures best = { 0 }, f;
            for (int rep = 0; rep < o->reps; rep++) {
                if (run_level(bs, ids, n_ids, o->levels[li], &p, &f, err, sizeof err)) goto out;
                if (f.total_tps > best.total_tps) best = f;
            }
            printf("| %d | %s | %.1f | %.1f | %ld |\n", o->levels[li], spec ? "speculative" : "plain", best.total_tps, best.per_request_tps,
                   best.tokens);
            fflush(stdout);
        }
    rc = 0;
out:
    if (rc) fprintf(stderr, "bench: %s\n", err);
    for (int i = 0; i < 8; i++) free(ids[i]);
    blockspec_close(bs);
    return rc;
}
