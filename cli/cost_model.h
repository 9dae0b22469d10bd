// The schedulers' cost model on the command line (docs/scheduling.md): the target's forwards per second by
// rows, measured by the library (blockspec_profile / bs_profile_forwards), cached here in a JSON file per
// device and model shape: $XDG_CACHE_HOME/blockspec/profile-<device>-<shape>.json ($HOME/.cache without
// XDG_CACHE_HOME). The library never reads the environment or files for it: the CLI hands it the table.
#pragma once
#include <stddef.h>

// Measures sps[i] for rows[i] (the library call behind it: a blockspec handle or an engine).
typedef int (*cli_measure_fn)(void *ctx, const int *rows, int n, int ctx_rows, int block, int reps, double *sps, char *err, size_t len);

typedef struct cli_cost_opts {
    const char *file;             // --profile FILE: read this table, no cache, no measurement
    const char *device, *shape;   // the cache key (the device as the library names it; CPU: the CLI adds the model and threads)
    int max_rows;                 // rows the caller's steps may reach: a cached table must cover them
    int ctx, block, reps;         // the measurement's context, rows per sequence, repetitions
    int quiet;                    // 1: no note on stderr when measuring
    cli_measure_fn measure; void *measure_ctx;
} cli_cost_opts;

// The dense table sps[0..*n) (rows 1..*n; malloc'ed): --profile FILE, else the cache when it covers
// max_rows, else measured now and cached (a note on stderr says so). 0, or -1 with a message in err.
int cli_cost_model(const cli_cost_opts *o, double **sps, int *n, char *err, size_t len);
// Measures the grid of row counts up to o->max_rows (1..16 each, then every 8 to 128, then every 32) into
// points (malloc'ed rows[], sps[]).
int cli_cost_measure(const cli_cost_opts *o, int **rows, double **sps, int *n, char *err, size_t len);
// Writes points as the profile JSON (atomically); prints nothing.
int cli_cost_save(const char *path, const cli_cost_opts *o, const int *rows, const double *sps, int n, char *err, size_t len);
// Reads a profile JSON into a dense table (linear in step time between measured points). want_device /
// want_shape: when non-NULL the file must be for them. Errors name the file and the field.
int cli_cost_load(const char *path, const char *want_device, const char *want_shape, double **sps, int *n, char *err, size_t len);
// The cache file's path for a device and shape (characters other than [A-Za-z0-9._-] become '_'); NULL
// when neither XDG_CACHE_HOME nor HOME is set. Malloc'ed. mkdirs: create the folder.
char *cli_cost_cache_path(const char *device, const char *shape, int mkdirs);
// The device part of the key: the library's name, plus for "cpu" the CPU model and the thread count.
void cli_cost_device_key(const char *device_name, char *buf, size_t len);

#include "blockspec.h"
// cli_measure_fn over a blockspec handle (ctx: the blockspec *).
int cli_measure_handle(void *ctx, const int *rows, int n, int ctx_rows, int block, int reps, double *sps, char *err, size_t len);
// o->device / o->shape (pointing into dev / shape) and the measurement through bs; other fields untouched.
void cli_cost_keys(blockspec *bs, cli_cost_opts *o, char *dev, size_t dev_len, char *shape, size_t shape_len);
// cli_measure_fn over an engine the command opened itself (ctx: the const bs_engine *).
int cli_measure_engine(void *ctx, const int *rows, int n, int ctx_rows, int block, int reps, double *sps, char *err, size_t len);
// Sets bs's schedule; for alg1 / async with its cost model (cost_model FILE, else the cache or a measurement)
// sized for max_concurrency blocks of draft_max + 1 rows (draft_max 0: 16). 0, or -1 with a message in err.
int cli_set_schedule(blockspec *bs, blockspec_schedule sched, const char *cost_model, int max_concurrency, int draft_max, char *err, size_t len);
