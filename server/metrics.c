// Prometheus text exposition (version 0.0.4) of srv_metrics.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "server/metrics.h"

static void hist_init(srv_hist *h, const double *le, int n) {
    memset(h, 0, sizeof *h);
    h->n = n;
    memcpy(h->le, le, sizeof(double) * (size_t)n);
}

void srv_metrics_init(srv_metrics *m) {
    memset(m, 0, sizeof *m);
    // Seconds; the small buckets matter on a CPU, where a token takes a millisecond or two.
    static const double ttft[] = { 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80 };
    static const double itl[] = { 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5 };
    static const double e2e[] = { 0.01, 0.05, 0.1, 0.3, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480 };
    static const double rows[] = { 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024 };
    hist_init(&m->ttft, ttft, sizeof ttft / sizeof *ttft);
    hist_init(&m->itl, itl, sizeof itl / sizeof *itl);
    hist_init(&m->e2e, e2e, sizeof e2e / sizeof *e2e);
    hist_init(&m->verify_rows, rows, sizeof rows / sizeof *rows);
}

void srv_hist_observe(srv_hist *h, double v) {
    int b = 0;
    while (b < h->n && v > h->le[b]) b++;
    h->count[b]++;
    h->sum += v;
    h->total++;
}

typedef struct sbuf { char *p; size_t n, cap; int oom; } sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k < 0) { b->oom = 1; return; }
        if ((size_t)k < b->cap - b->n) { b->n += (size_t)k; return; }
        size_t cap = (b->cap + (size_t)k + 1) * 2;
        char *q = realloc(b->p, cap);
        if (!q) { b->oom = 1; return; }
        b->p = q; b->cap = cap;
    }
}

static void counter(sbuf *b, const char *name, const char *help, const char *model, unsigned long v) {
    put(b, "# HELP blockspec:%s %s\n# TYPE blockspec:%s counter\nblockspec:%s{model_name=\"%s\"} %lu\n", name, help, name, name, model, v);
}

static void gauge(sbuf *b, const char *name, const char *help, const char *model, double v) {
    put(b, "# HELP blockspec:%s %s\n# TYPE blockspec:%s gauge\nblockspec:%s{model_name=\"%s\"} %.17g\n", name, help, name, name, model, v);
}

static void hist(sbuf *b, const char *name, const char *help, const char *model, const srv_hist *h) {
    put(b, "# HELP blockspec:%s %s\n# TYPE blockspec:%s histogram\n", name, help, name);
    unsigned long cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->count[i];
        put(b, "blockspec:%s_bucket{model_name=\"%s\",le=\"%g\"} %lu\n", name, model, h->le[i], cum);
    }
    put(b, "blockspec:%s_bucket{model_name=\"%s\",le=\"+Inf\"} %lu\n", name, model, h->total);
    put(b, "blockspec:%s_sum{model_name=\"%s\"} %.17g\nblockspec:%s_count{model_name=\"%s\"} %lu\n", name, model, h->sum, name, model, h->total);
}

char *srv_metrics_render(const srv_metrics *m, const char *model) {
    sbuf b = { 0 };
    counter(&b, "spec_decode_num_drafts_total", "Speculative rounds that verified at least one draft.", model, m->num_drafts);
    counter(&b, "spec_decode_num_draft_tokens_total", "Draft tokens verified.", model, m->num_draft_tokens);
    counter(&b, "spec_decode_num_accepted_tokens_total", "Draft tokens accepted.", model, m->num_accepted_tokens);
    put(&b, "# HELP blockspec:spec_decode_num_accepted_tokens_per_pos_total Draft tokens accepted, per draft position (0: the first draft).\n"
            "# TYPE blockspec:spec_decode_num_accepted_tokens_per_pos_total counter\n");
    for (int k = 0; k < m->n_pos; k++)
        put(&b, "blockspec:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"%s\",position=\"%d\"} %lu\n", model, k, m->accepted_per_pos[k]);
    gauge(&b, "num_requests_running", "Requests being decoded.", model, m->running);
    gauge(&b, "num_requests_waiting", "Requests queued for a decoding slot.", model, m->waiting);
    counter(&b, "prompt_tokens_total", "Prompt tokens prefilled.", model, m->prompt_tokens);
    counter(&b, "generation_tokens_total", "Tokens generated.", model, m->generation_tokens);
    put(&b, "# HELP blockspec:request_success_total Requests finished, by reason.\n# TYPE blockspec:request_success_total counter\n"
            "blockspec:request_success_total{model_name=\"%s\",finished_reason=\"done\"} %lu\n"
            "blockspec:request_success_total{model_name=\"%s\",finished_reason=\"abort\"} %lu\n", model, m->requests_ok, model, m->requests_cancelled);
    counter(&b, "request_rejected_total", "Requests answered with an error before they ran (4xx/5xx).", model, m->requests_rejected);
    gauge(&b, "kv_cache_pages_in_use", "KV pages holding rows of running requests (the pool's pages: docs/kv-paging.md).", model, m->kv.pages_in_use);
    gauge(&b, "kv_cache_pages_total", "KV pages in the pool.", model, m->kv.pages_total);
    gauge(&b, "kv_cache_pages_promised", "KV pages held or promised to started requests (a request starts once its whole context is promised).",
          model, m->kv.pages_promised);
    gauge(&b, "kv_cache_rows_in_use", "KV rows in the pages in use (pages x rows per page).", model, (double)m->kv.pages_in_use * m->kv.page_rows);
    counter(&b, "engine_steps_total", "Engine steps (one batched target forward each).", model, m->steps);
    hist(&b, "time_to_first_token_seconds", "Time from a request's arrival to its first token.", model, &m->ttft);
    hist(&b, "inter_token_latency_seconds", "Time between a request's successive tokens (tokens accepted in one round arrive together).", model, &m->itl);
    hist(&b, "e2e_request_latency_seconds", "Time from a request's arrival to its last token.", model, &m->e2e);
    hist(&b, "verify_rows_per_step", "Target rows per engine step (prompt chunks and verify blocks of every request).", model, &m->verify_rows);
    if (b.oom) { free(b.p); return NULL; }
    return b.p;
}
