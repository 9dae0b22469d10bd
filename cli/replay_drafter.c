// The trace-replay drafter (cli/replay_drafter.h). Test-only: see the header.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/replay_drafter.h"
#include "io/json.h"

void replay_trace_free(replay_trace *t) {
    for (int r = 0; r < t->n_req; r++) free(t->rounds[r]);
    free(t->rounds); free(t->n_rounds);
    memset(t, 0, sizeof *t);
}

static int add_round(replay_trace *t, int req, const replay_round *rd) {
    if (req >= t->n_req) {
        replay_round **nr = realloc(t->rounds, sizeof *nr * (req + 1));
        if (!nr) return -1;
        t->rounds = nr;
        int *nn = realloc(t->n_rounds, sizeof *nn * (req + 1));
        if (!nn) return -1;
        t->n_rounds = nn;
        for (int r = t->n_req; r <= req; r++) { t->rounds[r] = NULL; t->n_rounds[r] = 0; }
        t->n_req = req + 1;
    }
    int k = t->n_rounds[req];
    if ((k & (k - 1)) == 0) {   // grows at powers of two
        replay_round *g = realloc(t->rounds[req], sizeof *g * (k ? 2 * k : 1));
        if (!g) return -1;
        t->rounds[req] = g;
    }
    t->rounds[req][t->n_rounds[req]++] = *rd;
    if (rd->n > t->max_n) t->max_n = rd->n;
    return 0;
}

static int parse_round(const cJSON *o, const char *where, int *req, replay_round *rd, char *err, size_t len) {
    bs_err e = {0};
    int l = 0;
    memset(rd, 0, sizeof *rd);
    if (!cJSON_IsObject(o)) { snprintf(err, len, "%s: expected a JSON object", where); return -1; }
    if (bs_json_int(o, "request", 1, 0, 1 << 20, req, where, &e) || bs_json_int(o, "n", 1, 0, BS_MAX_DRAFT, &rd->n, where, &e) ||
        bs_json_int(o, "l", 1, 0, BS_MAX_DRAFT, &l, where, &e) || bs_json_int(o, "a", 1, 0, BS_MAX_DRAFT, &rd->a, where, &e)) {
        snprintf(err, len, "%s", e.msg);
        return -1;
    }
    if (l > rd->n) { snprintf(err, len, "%s: field \"l\" (%d) exceeds field \"n\" (%d)", where, l, rd->n); return -1; }
    if (rd->a > l) { snprintf(err, len, "%s: field \"a\" (%d) exceeds field \"l\" (%d)", where, rd->a, l); return -1; }
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "conf");
    if (!cJSON_IsArray(c)) { snprintf(err, len, "%s: field \"conf\" must be a list (empty without a confidence head)", where); return -1; }
    int m = cJSON_GetArraySize(c);
    if (m != 0 && m != rd->n) { snprintf(err, len, "%s: field \"conf\" has %d entries, field \"n\" says %d", where, m, rd->n); return -1; }
    int k = 0;
    for (const cJSON *it = c->child; it; it = it->next, k++) {
        if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0 && it->valuedouble <= 1)) {
            snprintf(err, len, "%s: field \"conf\": entry %d is not a number in [0, 1]", where, k);
            return -1;
        }
        rd->conf[k] = (float)it->valuedouble;
    }
    rd->has_conf = m > 0;
    return 0;
}

typedef struct trace_reader { replay_trace *t; const char *path; int rounds; } trace_reader;

static int trace_line(void *ctx, const char *line, size_t n, int lineno, char *err, size_t len) {
    trace_reader *r = ctx;
    bs_err e = {0};
    char where[1200];
    snprintf(where, sizeof where, "%s line %d", r->path, lineno);
    cJSON *o = bs_json_parse(line, n, where, &e);
    int req, rc = 0;
    replay_round rd;
    if (!o) { snprintf(err, len, "%s", e.msg); rc = -1; }
    else if (parse_round(o, where, &req, &rd, err, len)) rc = -1;
    else if (add_round(r->t, req, &rd)) { snprintf(err, len, "out of memory"); rc = -1; }
    r->rounds++;
    cJSON_Delete(o);
    return rc;
}

int replay_trace_load(replay_trace *t, const char *path, char *err, size_t len) {
    memset(t, 0, sizeof *t);
    trace_reader r = { t, path, 0 };
    int rc = cli_each_line(path, trace_line, &r, err, len);
    if (!rc && r.rounds == 0) { snprintf(err, len, "%s: no rounds (one JSON object per line, as generate --trace writes)", path); rc = -1; }
    for (int q = 0; !rc && q < t->n_req; q++)
        if (!t->n_rounds[q]) { snprintf(err, len, "%s: request %d has no rounds (requests must be numbered 0..%d)", path, q, t->n_req - 1); rc = -1; }
    if (rc) replay_trace_free(t);
    return rc;
}

// The drafter's state, and a sequence's binding.
typedef struct replay {
    const replay_trace *t;
    int V;
    int taps[1];
    long mismatches;
    struct binding { int n_prompt; const int32_t *ref; int n_ref; int req, cursor; } next;
} replay;
typedef struct binding binding;

static int r_ctx_init(bs_drafter *d, bs_drafter_ctx *c, int max_ctx, bs_err *err) {
    replay *m = d->impl;
    binding *b = malloc(sizeof *b);
    if (!b) return bs_fail(err, "out of memory");
    *b = m->next;
    *c = (bs_drafter_ctx){ .max_ctx = max_ctx, .impl = b };
    return 0;
}
static void r_ctx_free(bs_drafter *d, bs_drafter_ctx *c) { free(c->impl); c->impl = NULL; }
static int r_add_context(bs_drafter *d, bs_drafter_ctx *c, const float *feat, int n, bs_err *err) { c->n_ctx += n; return 0; }
static int r_rollback(bs_drafter *d, bs_drafter_ctx *c, int n_ctx, bs_err *err) { if (n_ctx < c->n_ctx) c->n_ctx = n_ctx; return 0; }

static int r_propose(bs_drafter *d, bs_drafter_ctx *c, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng, bs_draft *out, bs_err *err) {
    replay *m = d->impl;
    binding *b = c->impl;
    if (!bs_sampling_greedy(s)) return bs_fail(err, "the replay drafter drafts for greedy requests only");
    const replay_round *rd = &m->t->rounds[b->req][b->cursor];
    b->cursor = (b->cursor + 1) % m->t->n_rounds[b->req];
    int pos = c->n_ctx - b->n_prompt;   // the anchor is reference token pos
    if (pos < 0 || pos >= b->n_ref || b->ref[pos] != anchor) m->mismatches++;
    memset(out, 0, sizeof *out);
    out->n = rd->n < max_n ? rd->n : max_n;
    for (int k = 1; k <= out->n; k++) {
        int32_t right = pos + k >= 0 && pos + k < b->n_ref ? b->ref[pos + k] : 0;
        out->tokens[k - 1] = k <= rd->a ? right : (right + 1) % m->V;
    }
    out->has_conf = rd->has_conf;
    memcpy(out->conf, rd->conf, sizeof(float) * out->n);
    return 0;
}

static void r_free(bs_drafter *d) { free(d->impl); free(d); }

bs_drafter *replay_drafter_new(const replay_trace *t, int V, int max_drafts) {
    bs_drafter *d = calloc(1, sizeof *d);
    replay *m = calloc(1, sizeof *m);
    if (!d || !m) { free(d); free(m); return NULL; }
    m->t = t; m->V = V;
    m->taps[0] = 0;   // the embeddings: the runtime wants taps from a drafter; this is the cheapest to copy
    *d = (bs_drafter){ .name = "replay", .max_drafts = max_drafts, .n_taps = 1, .taps = m->taps, .impl = m, .ctx_init = r_ctx_init,
                       .ctx_free = r_ctx_free, .add_context = r_add_context, .rollback = r_rollback, .propose = r_propose, .free = r_free };
    return d;
}

void replay_bind(bs_drafter *d, int n_prompt, const int32_t *ref, int n_ref, int trace_req, int start) {
    replay *m = d->impl;
    m->next = (binding){ n_prompt, ref, n_ref, trace_req, start % m->t->n_rounds[trace_req] };
}

long replay_mismatches(const bs_drafter *d) { return ((const replay *)d->impl)->mismatches; }
