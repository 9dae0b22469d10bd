// blockspec generate --prompts FILE: many prompts decoded together through the public runtime API
// (blockspec_submit / blockspec_step), at most --max-concurrency at once; one JSON line out per prompt,
// in input order. Input: JSON lines, {"prompt": TEXT} or {"prompt_ids": [IDS]}, with optional
// "max_tokens", "temperature", "top_p", "top_k", "seed" (the command line's values are the defaults).
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "blockspec.h"
#include "cli/args.h"
#include "cli/cost_model.h"
#include "cli/generate_prompts.h"
#include "io/json.h"

typedef struct prompt_line {
    int line;                    // 1-based line number in the file
    int32_t *ids; size_t n_ids;
    blockspec_params p;
    blockspec_request *req;      // while submitted
    char *result;                // the output JSON line once finished
} prompt_line;

static const char *const known_keys[] = { "prompt", "prompt_ids", "max_tokens", "temperature", "top_p", "top_k", "seed", "confidence_threshold" };

static int check_keys(const cJSON *o, const char *where, char *err, size_t len) {
    for (const cJSON *it = o->child; it; it = it->next) {
        int ok = 0;
        for (size_t k = 0; k < sizeof known_keys / sizeof *known_keys; k++) ok |= !strcmp(it->string, known_keys[k]);
        if (!ok) {
            snprintf(err, len, "%s: unknown field \"%s\" (known: prompt, prompt_ids, max_tokens, temperature, top_p, top_k, seed, confidence_threshold)", where, it->string);
            return -1;
        }
    }
    return 0;
}

static int read_ids(const cJSON *v, const char *where, prompt_line *pl, char *err, size_t len) {
    int n = cJSON_GetArraySize(v);
    if (!cJSON_IsArray(v) || n == 0) { snprintf(err, len, "%s: field \"prompt_ids\" must be a non-empty list of token ids", where); return -1; }
    if (!(pl->ids = malloc(sizeof(int32_t) * n))) { snprintf(err, len, "out of memory"); return -1; }
    int i = 0;
    for (const cJSON *it = v->child; it; it = it->next, i++) {
        if (!bs_json_is_int(it, 0, INT32_MAX)) { snprintf(err, len, "%s: field \"prompt_ids\": entry %d is not a token id (an integer >= 0)", where, i); return -1; }
        pl->ids[i] = (int32_t)it->valuedouble;
    }
    pl->n_ids = (size_t)n;
    return 0;
}

// One input line into pl: its prompt (ids, tokenised when given as text) and its settings.
static int parse_line(blockspec *bs, const char *text, size_t len, const char *file, int line, const blockspec_params *defaults,
                      prompt_line *pl, char *err, size_t err_len) {
    char where[1200];
    snprintf(where, sizeof where, "%s line %d", file, line);
    bs_err e = {0};
    cJSON *o = bs_json_parse(text, len, where, &e);
    int rc = -1;
    if (!o) { snprintf(err, err_len, "%s", e.msg); return -1; }
    pl->line = line; pl->p = *defaults;
    if (!cJSON_IsObject(o)) { snprintf(err, err_len, "%s: expected a JSON object", where); goto out; }
    if (check_keys(o, where, err, err_len)) goto out;
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(o, "prompt"), *pi = cJSON_GetObjectItemCaseSensitive(o, "prompt_ids");
    if (!!pr == !!pi) { snprintf(err, err_len, "%s: give exactly one of \"prompt\" (text) and \"prompt_ids\" (a list of ids)", where); goto out; }
    if (pr) {
        if (!cJSON_IsString(pr) || !pr->valuestring[0]) { snprintf(err, err_len, "%s: field \"prompt\" must be a non-empty string", where); goto out; }
        char terr[512];
        if (blockspec_tokenize(bs, pr->valuestring, &pl->ids, &pl->n_ids, terr, sizeof terr)) { snprintf(err, err_len, "%s: %s", where, terr); goto out; }
        if (!pl->n_ids) { snprintf(err, err_len, "%s: field \"prompt\" encodes to no tokens", where); goto out; }
    } else if (read_ids(pi, where, pl, err, err_len)) goto out;
    int n_new = pl->p.n_new, top_k = pl->p.top_k, seed_set = 0;
    double t = pl->p.temperature, tp = pl->p.top_p, thr = pl->p.confidence_threshold;
    long seed = (long)pl->p.seed;
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(o, "seed");
    if (bs_json_int(o, "max_tokens", 0, -1, 1 << 24, &n_new, where, &e) || bs_json_num(o, "temperature", 0, &t, where, &e) ||
        bs_json_num(o, "top_p", 0, &tp, where, &e) || bs_json_int(o, "top_k", 0, 0, 1 << 24, &top_k, where, &e) ||
        bs_json_num(o, "confidence_threshold", 0, &thr, where, &e)) {
        snprintf(err, err_len, "%s", e.msg); goto out;
    }
    if (sv) {
        if (!bs_json_is_int(sv, 0, 9007199254740991.0)) { snprintf(err, err_len, "%s: field \"seed\" must be an integer in [0, 2^53)", where); goto out; }
        seed = (long)sv->valuedouble; seed_set = 1;
    }
    if (!(t >= 0 && t <= 100)) { snprintf(err, err_len, "%s: field \"temperature\" must be in [0, 100]", where); goto out; }
    if (!(tp > 0 && tp <= 1)) { snprintf(err, err_len, "%s: field \"top_p\" must be in (0, 1]", where); goto out; }
    if (!(thr >= 0 && thr <= 1)) { snprintf(err, err_len, "%s: field \"confidence_threshold\" must be in [0, 1]", where); goto out; }
    pl->p.confidence_threshold = (float)thr;
    pl->p.n_new = n_new; pl->p.top_k = top_k; pl->p.temperature = (float)t; pl->p.top_p = (float)tp;
    if (seed_set) pl->p.seed = (uint64_t)seed;
    rc = 0;
out:
    cJSON_Delete(o);
    return rc;
}

typedef struct prompts_reader { blockspec *bs; const char *file; const blockspec_params *defaults; prompt_line *v; int n, cap; } prompts_reader;

static int prompt_line_cb(void *ctx, const char *line, size_t n, int lineno, char *err, size_t len) {
    prompts_reader *r = ctx;
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 16;
        prompt_line *np = realloc(r->v, sizeof *np * cap);
        if (!np) { snprintf(err, len, "out of memory"); return -1; }
        r->v = np; r->cap = cap;
    }
    memset(&r->v[r->n], 0, sizeof *r->v);
    return parse_line(r->bs, line, n, r->file, lineno, r->defaults, &r->v[r->n++], err, len);
}

// Every line of the file (blank lines skipped); *out is malloc'ed, *n its count.
static int read_prompts(blockspec *bs, const char *file, const blockspec_params *defaults, prompt_line **out, int *n, char *err, size_t len) {
    prompts_reader r = { bs, file, defaults, NULL, 0, 0 };
    int rc = cli_each_line(file, prompt_line_cb, &r, err, len);
    *out = r.v; *n = r.n;
    if (!rc && r.n == 0) { snprintf(err, len, "%s: no prompts (one JSON object per line)", file); rc = -1; }
    return rc;
}

// The finished request as one JSON line: index, text (when there is a tokenizer), ids, finish reason, stats.
static char *result_json(blockspec *bs, int index, const prompt_line *pl) {
    size_t n;
    const int32_t *ids = blockspec_request_tokens(pl->req, &n);
    blockspec_stats st;
    blockspec_request_stats(pl->req, &st);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "index", index);
    char *text = NULL, terr[256];
    if (blockspec_detokenize(bs, ids, n, &text, terr, sizeof terr) == 0) cJSON_AddStringToObject(j, "text", text);
    free(text);
    cJSON *a = cJSON_AddArrayToObject(j, "ids");
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    cJSON_AddStringToObject(j, "finish_reason", st.finish_reason);
    cJSON *s = cJSON_AddObjectToObject(j, "stats");
    cJSON_AddNumberToObject(s, "n_prompt", st.n_prompt);
    cJSON_AddNumberToObject(s, "n_generated", st.n_generated);
    cJSON_AddNumberToObject(s, "rounds", st.rounds);
    cJSON_AddNumberToObject(s, "tau", st.tau);
    cJSON_AddNumberToObject(s, "t_prefill_s", st.t_prefill);
    cJSON_AddNumberToObject(s, "t_generate_s", st.t_generate);
    cJSON_AddNumberToObject(s, "decode_tok_per_s", st.n_generated > 1 && st.t_generate > 0 ? (st.n_generated - 1) / st.t_generate : 0);
    char *out = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return out;
}

// --trace: one JSON line per speculative round: the request's index (its line's place in the input), its
// round number, the drafts proposed (n) with their confidences, verified (l) and accepted (a).
typedef struct tracer { FILE *f; prompt_line *pl; int n; int *rounds; } tracer;

static void trace_round(void *ctx, const blockspec_request *r, const blockspec_round *rd) {
    tracer *t = ctx;
    int i = 0;
    while (i < t->n && t->pl[i].req != r) i++;
    if (i == t->n) return;
    fprintf(t->f, "{\"request\":%d,\"round\":%d,\"n\":%d,\"l\":%d,\"a\":%d,\"conf\":[", i, t->rounds[i]++, rd->n_drafted, rd->n_verified,
            rd->n_accepted);
    for (int k = 0; rd->conf && k < rd->n_drafted; k++) fprintf(t->f, "%s%.6g", k ? "," : "", rd->conf[k]);
    fprintf(t->f, "]}\n");
}

int cli_generate_prompts(const cli_prompts_opts *o) {
    char err[2048] = "";
    blockspec *bs = NULL;
    prompt_line *pl = NULL;
    int n = 0, rc = 1;
    tracer tr = { 0 };
    blockspec_open_options oo = { .draft_vocab = o->draft_vocab, .drafter_fp8 = o->drafter_fp8, .no_calibration = o->no_calibration,
                                  .threads = o->threads, .no_graphs = o->no_graphs, .kv_rows = o->kv_rows };
    if (blockspec_open_ex(&bs, o->model, o->drafter, o->device, &oo, err, sizeof err)) goto out;
    cli_print_warnings(bs);
    if (read_prompts(bs, o->prompts_file, &o->defaults, &pl, &n, err, sizeof err)) goto out;
    if (cli_set_schedule(bs, o->sched, o->cost_model, o->max_concurrency, cli_batch_block(o->defaults.draft_max), o->defaults.draft_max,
                         err, sizeof err)) goto out;
    if (o->trace) {
        if (!(tr.f = fopen(o->trace, "w"))) { snprintf(err, sizeof err, "%s: cannot write the trace", o->trace); goto out; }
        if (!(tr.rounds = calloc(n, sizeof(int)))) { snprintf(err, sizeof err, "out of memory"); goto out; }
        tr.pl = pl; tr.n = n;
        blockspec_set_round_observer(bs, trace_round, &tr);
    }
    // At most max_concurrency requests run; each finished one makes room for the next, and results are
    // printed in input order as soon as every earlier one is printed.
    int next = 0, printed = 0, running = 0;
    while (printed < n) {
        while (running < o->max_concurrency && next < n) {
            char serr[1024];
            if (blockspec_submit(bs, pl[next].ids, pl[next].n_ids, &pl[next].p, NULL, NULL, &pl[next].req, serr, sizeof serr)) {
                snprintf(err, sizeof err, "%s line %d: %s", o->prompts_file, pl[next].line, serr);
                goto out;
            }
            next++; running++;
        }
        if (blockspec_step(bs, err, sizeof err) < 0) goto out;
        for (int i = printed; i < next; i++)
            if (pl[i].req && blockspec_request_done(pl[i].req)) {
                if (!(pl[i].result = result_json(bs, i, &pl[i]))) { snprintf(err, sizeof err, "out of memory"); goto out; }
                blockspec_request_free(bs, pl[i].req);
                pl[i].req = NULL;
                running--;
            }
        for (; printed < next && pl[printed].result; printed++) { printf("%s\n", pl[printed].result); fflush(stdout); }
    }
    rc = 0;
out:
    if (rc) fprintf(stderr, "blockspec generate: %s\n", err);
    for (int i = 0; i < n; i++) { blockspec_request_free(bs, pl[i].req); free(pl[i].ids); free(pl[i].result); }
    free(pl);
    blockspec_close(bs);
    if (tr.f && fclose(tr.f) && !rc) { fprintf(stderr, "blockspec generate: %s: writing the trace failed\n", o->trace); rc = 1; }
    free(tr.rounds);
    return rc;
}
