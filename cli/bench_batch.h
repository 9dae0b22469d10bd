// blockspec bench --concurrency (cli/bench_batch.c).
#pragma once
#include "blockspec.h"

typedef struct bench_batch_opts {
    const char *model, *drafter, *device;   // drafter NULL: plain only
    const int *levels; int n_levels;         // concurrent requests per run
    int n_new, draft_max, reps;
    const blockspec_schedule *scheds; int n_scheds;   // n_scheds 0: none and fixed (none alone without a drafter)
    float threshold;                         // the threshold schedule's cut
    const char *cost_model;                  // alg1 / async: this cost model file (NULL: the cache, or measured)
    const char *prompts;                     // NULL: 8 built-in prompts; else JSON lines {"prompt": TEXT}
} bench_batch_opts;

int bench_batch(const bench_batch_opts *o);
