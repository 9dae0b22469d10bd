// blockspec bench --concurrency 1,2,4,8 [--schedule none,fixed,...]: many requests decoded together through
// the public runtime API, under each schedule (docs/scheduling.md; default none and fixed, i.e. plain and
// speculative). Per level C: the same prompts (8 built-in ones or --prompts FILE; C of them at a time, more
// requests when C > their count), total tokens/s (every request's tokens over the wall time, prefills
// included) and the mean per-request decode rate; the schedules run interleaved, --reps times, and the
// table shows each one's median (a shared machine's noise hits every schedule alike).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "blockspec.h"
#include <cjson/cJSON.h>
#include "cli/bench_batch.h"
#include "cli/cost_model.h"
#include "io/json.h"
#include "util/timer.h"

// Distinct prompts (code and prose), request i gets prompt i % 8.
static const char *const bench_prompts[8] = {
    "static int", "It is a truth universally acknowledged", "int main(void) {", "The history of the",
    "#include <stdio.h>\n", "Once upon a time", "struct list_head {", "In this paper we",
};

typedef struct batch_figures { double total_tps, per_request_tps, tau, rounds, plain_steps; long tokens; } batch_figures;

// max(np, c) requests (prompt i % np), at most c at a time: a finished one makes room for the next
// (continuous batching), so every level decodes the same prompts and the figures compare.
static int run_level(blockspec *bs, int32_t **ids, size_t *n_ids, int np, int c, const blockspec_params *pp, batch_figures *f, char *err, size_t len) {
    int n = c > np ? c : np, next = 0, running = 0, rc = -1;
    blockspec_request **r = calloc(n, sizeof *r);
    if (!r) { snprintf(err, len, "out of memory"); return -1; }
    double t0 = bs_now();
    for (;;) {
        for (; running < c && next < n; next++, running++)
            if (blockspec_submit(bs, ids[next % np], n_ids[next % np], pp, NULL, NULL, &r[next], err, len)) goto out;
        if (running == 0) break;
        if ((running = blockspec_step(bs, err, len)) < 0) goto out;
    }
    double wall = bs_now() - t0, rate = 0, rounds = 0, emitted = 0, plain = 0;
    f->tokens = 0;
    for (int i = 0; i < n; i++) {
        blockspec_stats st;
        blockspec_request_stats(r[i], &st);
        f->tokens += st.n_generated;
        rate += st.n_generated > 1 && st.t_generate > 0 ? (st.n_generated - 1) / st.t_generate : 0;
        rounds += st.rounds; emitted += st.rounds * st.tau;
        // Steps without a drafter pass (alg1 / async chose plain decoding): the tokens no round emitted
        // (the first one comes from the prompt; a last round cut by the budget makes this an estimate).
        double p = st.n_generated - 1 - st.rounds * st.tau;
        if (pp->use_drafter && p > 0) plain += p;
    }
    f->plain_steps = plain / n;
    f->rounds = rounds / n;
    f->tau = rounds ? emitted / rounds : 1;
    f->total_tps = f->tokens / wall;
    f->per_request_tps = rate / n;
    rc = 0;
out:
    for (int i = 0; i < n; i++) blockspec_request_free(bs, r[i]);
    free(r);
    return rc;
}

// --prompts FILE: the "prompt" of every line (JSON lines; other fields are ignored).
static int read_prompts(blockspec *bs, const char *path, int32_t ***ids, size_t **n_ids, int *n, char *err, size_t len) {
    bs_err e = {0};
    size_t size;
    char *text = bs_read_file(path, &size, &e);
    if (!text) { snprintf(err, len, "%s", e.msg); return -1; }
    int cap = 0, line = 0, rc = 0;
    *n = 0;
    for (char *at = text; at < text + size && !rc; line++) {
        char *end = memchr(at, '\n', (size_t)(text + size - at));
        size_t l = end ? (size_t)(end - at) : (size_t)(text + size - at);
        char where[600];
        snprintf(where, sizeof where, "%.500s line %d", path, line + 1);
        size_t k = 0;
        while (k < l && (at[k] == ' ' || at[k] == '\t' || at[k] == '\r')) k++;
        if (k < l) {
            cJSON *o = bs_json_parse(at, l, where, &e);
            const cJSON *p = o ? cJSON_GetObjectItemCaseSensitive(o, "prompt") : NULL;
            if (!o) { snprintf(err, len, "%s", e.msg); rc = -1; }
            else if (!cJSON_IsString(p) || !p->valuestring[0]) { snprintf(err, len, "%s: field \"prompt\" must be a non-empty string", where); rc = -1; }
            else {
                if (*n == cap) {
                    cap = cap ? 2 * cap : 16;
                    int32_t **ni = realloc(*ids, sizeof *ni * cap);
                    size_t *nn = ni ? realloc(*n_ids, sizeof *nn * cap) : NULL;
                    if (ni) *ids = ni;
                    if (nn) *n_ids = nn;
                    if (!ni || !nn) { snprintf(err, len, "out of memory"); rc = -1; }
                }
                if (!rc && blockspec_tokenize(bs, p->valuestring, &(*ids)[*n], &(*n_ids)[*n], err, len)) rc = -1;
                if (!rc) (*n)++;
            }
            cJSON_Delete(o);
        }
        at += l + 1;
    }
    free(text);
    if (!rc && *n == 0) { snprintf(err, len, "%s: no prompts", path); rc = -1; }
    return rc;
}

static int by_value(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
static double median(double *v, int n) { qsort(v, n, sizeof *v, by_value); return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2; }

int bench_batch(const bench_batch_opts *o) {
    char err[1024];
    blockspec *bs = NULL;
    int32_t **ids = NULL; size_t *n_ids = NULL;
    int np = 0, rc = 1, max_c = 1;
    cli_costs costs = { 0 };
    int have_costs = 0;
    batch_figures *fig = NULL;
    blockspec_schedule defaults[2] = { BLOCKSPEC_SCHEDULE_NONE, BLOCKSPEC_SCHEDULE_FIXED };
    const blockspec_schedule *sch = o->n_scheds ? o->scheds : defaults;
    int n_sch = o->n_scheds ? o->n_scheds : o->drafter ? 2 : 1;
    for (int i = 0; i < o->n_levels; i++) if (o->levels[i] > max_c) max_c = o->levels[i];
    if (blockspec_open(&bs, o->model, o->drafter, o->device, err, sizeof err)) goto out;
    if (o->prompts) { if (read_prompts(bs, o->prompts, &ids, &n_ids, &np, err, sizeof err)) goto out; }
    else {
        if (!(ids = calloc(8, sizeof *ids)) || !(n_ids = calloc(8, sizeof *n_ids))) { snprintf(err, sizeof err, "out of memory"); goto out; }
        for (np = 0; np < 8; np++) if (blockspec_tokenize(bs, bench_prompts[np], &ids[np], &n_ids[np], err, sizeof err)) goto out;
    }
    for (int si = 0; si < n_sch; si++) {
        if (!o->drafter && sch[si] != BLOCKSPEC_SCHEDULE_NONE) { snprintf(err, sizeof err, "--schedule %s needs a drafter", blockspec_schedule_name(sch[si])); goto out; }
        if ((sch[si] == BLOCKSPEC_SCHEDULE_ALG1 || sch[si] == BLOCKSPEC_SCHEDULE_ASYNC) && !have_costs) {
            char dev[512], shape[256], dshape[256];
            int block = 1 + (o->draft_max ? o->draft_max : 16);
            cli_cost_opts co = { .file = o->cost_model, .max_rows = max_c * block, .max_seqs = max_c, .ctx = 256, .block = block, .reps = 3,
                                 .drafts = o->draft_max };
            cli_cost_keys(bs, &co, dev, sizeof dev, shape, sizeof shape, dshape, sizeof dshape);
            if (cli_costs_get(&co, &costs, err, sizeof err)) goto out;
            have_costs = 1;
        }
    }
    if (!(fig = calloc((size_t)n_sch * o->reps, sizeof *fig))) { snprintf(err, sizeof err, "out of memory"); goto out; }
    printf("| concurrent | schedule | total tok/s | per-request tok/s | tau | tokens | rounds / plain steps per request |\n"
           "|---:|---|---:|---:|---:|---:|---|\n");
    for (int li = 0; li < o->n_levels; li++) {
        for (int rep = 0; rep < o->reps; rep++)
            for (int si = 0; si < n_sch; si++) {
                blockspec_params p = blockspec_default_params();
                p.n_new = o->n_new; p.stop_at_eos = 0; p.use_drafter = sch[si] != BLOCKSPEC_SCHEDULE_NONE; p.draft_max = o->draft_max;
                p.confidence_threshold = sch[si] == BLOCKSPEC_SCHEDULE_THRESHOLD ? o->threshold : 0;
                blockspec_cost_model cm = cli_costs_public(&costs);
                if (blockspec_set_schedule_costs(bs, sch[si], &cm, err, sizeof err)) goto out;
                if (run_level(bs, ids, n_ids, np, o->levels[li], &p, &fig[si * o->reps + rep], err, sizeof err)) goto out;
            }
        for (int si = 0; si < n_sch; si++) {
            double v[100], u[100];
            const batch_figures *f = &fig[si * o->reps];
            for (int r = 0; r < o->reps; r++) { v[r] = f[r].total_tps; u[r] = f[r].per_request_tps; }
            printf("| %d | %s | %.1f | %.1f | %.2f | %ld | %.1f / %.1f |\n", o->levels[li], blockspec_schedule_name(sch[si]), median(v, o->reps),
                   median(u, o->reps), f[0].tau, f[0].tokens, f[0].rounds, f[0].plain_steps);
        }
        fflush(stdout);
    }
    rc = 0;
out:
    if (rc) fprintf(stderr, "bench: %s\n", err);
    for (int i = 0; i < np; i++) free(ids[i]);
    free(ids); free(n_ids); free(fig);
    cli_costs_free(&costs);
    blockspec_close(bs);
    return rc;
}
