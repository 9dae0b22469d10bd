// The server's counters, gauges and histograms, written in Prometheus' text format under the names
// vLLM's dashboards already use, with the blockspec: prefix (blockspec:spec_decode_num_drafts_total means
// what vllm:spec_decode_num_drafts_total means). Updated by the engine thread and read by /metrics, both
// under the server's lock.
#pragma once
#include <stddef.h>
#include "blockspec.h"

#define SRV_HIST_MAX 24
#define SRV_MAX_POS 64

typedef struct srv_hist {
    int n; double le[SRV_HIST_MAX];          // upper bounds (the +Inf bucket is implicit)
    unsigned long count[SRV_HIST_MAX + 1];   // per bucket (not cumulative)
    double sum; unsigned long total;
} srv_hist;

typedef struct srv_metrics {
    // Speculative decoding (per draft position k, 0-based, as vLLM's per_pos metric)
    unsigned long num_drafts, num_draft_tokens, num_accepted_tokens;
    unsigned long accepted_per_pos[SRV_MAX_POS];
    int n_pos;
    // Requests and tokens
    int running, waiting;
    unsigned long prompt_tokens, generation_tokens;
    unsigned long requests_ok, requests_cancelled, requests_rejected;   // rejected: 4xx/5xx before running
    blockspec_kv_pages kv;                   // the library's KV pool after the latest step
    unsigned long steps;
    srv_hist ttft, itl, e2e, verify_rows;
} srv_metrics;

void srv_metrics_init(srv_metrics *m);
void srv_hist_observe(srv_hist *h, double v);
// Renders every metric; returns a malloc'ed NUL-terminated text (NULL: out of memory).
char *srv_metrics_render(const srv_metrics *m, const char *model_name);
