// A persistent pool of worker threads for data-parallel loops.
// Decoding dispatches hundreds of small loops per token, so workers spin briefly on an atomic
// generation counter before sleeping: a wake-up costs well under a microsecond when busy.
#pragma once

typedef void (*bs_task_fn)(void *ctx, int task, int n_tasks);

// Global pool (created on first use with BS_THREADS or all online cores).
void bs_pool_init(int n_threads);
int  bs_pool_size(void);
// Runs fn(ctx, t, n_tasks) for t in [0, n_tasks) across the pool and the caller; returns when all are done.
void bs_parallel_for(int n_tasks, bs_task_fn fn, void *ctx);
void bs_pool_shutdown(void);
