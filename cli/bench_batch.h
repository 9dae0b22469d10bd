// blockspec bench --concurrency (cli/bench_batch.c).
#pragma once

typedef struct bench_batch_opts {
    const char *model, *drafter, *device;   // drafter NULL: plain only
    const int *levels; int n_levels;         // concurrent requests per run
    int n_new, draft_max, reps;
} bench_batch_opts;

int bench_batch(const bench_batch_opts *o);
