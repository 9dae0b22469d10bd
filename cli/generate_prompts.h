// blockspec generate --prompts FILE (cli/generate_prompts.c).
#pragma once
#include "blockspec.h"

typedef struct cli_prompts_opts {
    const char *model, *drafter, *device, *draft_vocab, *prompts_file;
    int drafter_fp8, max_concurrency, no_calibration, threads, no_graphs, kv_rows;
    blockspec_schedule sched;
    const char *cost_model;      // the cost model file for alg1 / async (NULL: the cache, or measured)
    const char *trace;           // NULL, or where every speculative round is written (JSON lines)
    blockspec_params defaults;   // every line's settings unless it gives its own
} cli_prompts_opts;

// Returns the exit status (0, or 1 with the message printed).
int cli_generate_prompts(const cli_prompts_opts *o);
