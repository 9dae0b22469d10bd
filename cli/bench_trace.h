// blockspec bench --trace FILE (cli/bench_trace.c): the schedulers judged on any target with a recorded
// drafter's acceptance and confidences (cli/replay_drafter.h).
#pragma once
#include "runtime/schedule.h"

typedef struct bench_trace_opts {
    const char *model, *device, *trace, *profile;
    const int *levels; int n_levels;          // concurrent requests
    const bs_sched_mode *scheds; int n_scheds;
    int n_new, draft_max, prompt_len, reps;   // draft_max 0: the trace's longest round
    float threshold;                          // the threshold schedule's cut
} bench_trace_opts;

int bench_trace(const bench_trace_opts *o);
