// The schedulers' cost model on the command line (docs/scheduling.md), measured by the library
// (blockspec_profile / blockspec_profile_drafter, or bs_profile_* on an engine) and cached here in a JSON
// file per device, target shape and drafter shape: $XDG_CACHE_HOME/blockspec/profile-<device>-<shape>[-<drafter>].json
// ($HOME/.cache without XDG_CACHE_HOME). Three tables: the target's verify forwards by rows (rows in
// sequences of `block`), its plain forwards by one-row sequences, and the drafter's passes by sequences.
// The library never reads the environment or files for it: the CLI hands it the tables.
#pragma once
#include <stddef.h>

// Measures sps[i] for rows[i] rows in sequences of `block` rows (the library call behind it: a handle or an engine).
typedef int (*cli_measure_fn)(void *ctx, const int *rows, int n, int ctx_rows, int block, int reps, double *sps, char *err, size_t len);
// Measures pps[i], drafter passes per second over seqs[i] sequences drafting `drafts` tokens each.
typedef int (*cli_measure_draft_fn)(void *ctx, const int *seqs, int n, int ctx_rows, int drafts, int reps, double *pps, char *err, size_t len);

typedef struct cli_cost_opts {
    const char *file;             // --cost-model FILE: read this file, no cache, no measurement
    const char *device, *shape;   // the cache key (the device as the library names it; CPU: the CLI adds the model and threads)
    const char *drafter;          // the drafter's shape: its pass is measured too and keys the file (NULL: no drafter table)
    int max_rows;                 // verify rows the caller's steps may reach: a cached table must cover them
    int max_seqs;                 // sequences they may hold: the plain and drafter tables must cover them (0: max_rows / block)
    int ctx, block, reps;         // the measurement's context, rows per sequence, repetitions
    int drafts;                   // drafts per sequence in the drafter's measured pass (0: the drafter's block)
    int quiet;                    // 1: no note on stderr when measuring
    cli_measure_fn measure; void *measure_ctx;
    cli_measure_draft_fn measure_draft; void *measure_draft_ctx;
} cli_cost_opts;

// What a measurement gives: each table's points, counts ascending from 1 (malloc'ed).
typedef struct cli_profile_points {
    int *rows; double *sps; int n;        // verify forwards by rows
    int *seqs1; double *sps1; int n1;     // plain forwards by one-row sequences
    int *seqsd; double *pps; int nd;      // drafter passes by sequences (nd 0: no drafter)
} cli_profile_points;
void cli_profile_points_free(cli_profile_points *p);

// The dense tables a schedule takes (index = count - 1; malloc'ed; NULL / 0 where the file has none).
typedef struct cli_costs {
    double *sps; int n_sps, block;
    double *sps1; int n_sps1;
    double *dps; int n_dps;
} cli_costs;
void cli_costs_free(cli_costs *c);

// The tables: --cost-model FILE (as it is), else the cache when it covers max_rows / max_seqs (and has a
// drafter table when o->drafter is set), else measured now and cached (a note on stderr says so).
int cli_costs_get(const cli_cost_opts *o, cli_costs *c, char *err, size_t len);
// Measures every table (the grid of counts: 1..16 each, then every 8 to 128, then every 32, each also one past, and the last).
int cli_cost_measure(const cli_cost_opts *o, cli_profile_points *p, char *err, size_t len);
// Writes the points as the profile JSON (atomically); prints nothing.
int cli_cost_save(const char *path, const cli_cost_opts *o, const cli_profile_points *p, char *err, size_t len);
// Reads a profile JSON into dense tables (linear in step time between measured points). want_device /
// want_shape / want_drafter: when non-NULL the file must be for them. Errors name the file and the field.
int cli_costs_load(const char *path, const char *want_device, const char *want_shape, const char *want_drafter, cli_costs *c, char *err,
                   size_t len);
// The verify table alone (cli_costs_load's sps).
int cli_cost_load(const char *path, const char *want_device, const char *want_shape, double **sps, int *n, char *err, size_t len);
// The cache file's path for a device, a target shape and a drafter shape (NULL: none); characters other
// than [A-Za-z0-9._-] become '_'. NULL when neither XDG_CACHE_HOME nor HOME is set. Malloc'ed. mkdirs: create the folder.
char *cli_cost_cache_path(const char *device, const char *shape, const char *drafter, int mkdirs);
// The device part of the key: the library's name, plus for "cpu" the CPU model and the thread count.
void cli_cost_device_key(const char *device_name, char *buf, size_t len);

#include "blockspec.h"
// cli_measure_fn / cli_measure_draft_fn over a blockspec handle (ctx: the blockspec *).
int cli_measure_handle(void *ctx, const int *rows, int n, int ctx_rows, int block, int reps, double *sps, char *err, size_t len);
int cli_measure_handle_draft(void *ctx, const int *seqs, int n, int ctx_rows, int drafts, int reps, double *pps, char *err, size_t len);
// o->device / o->shape / o->drafter (pointing into dev / shape / drafter; drafter NULL when the handle has
// none) and the measurements through bs; other fields untouched.
void cli_cost_keys(blockspec *bs, cli_cost_opts *o, char *dev, size_t dev_len, char *shape, size_t shape_len, char *drafter, size_t drafter_len);
// The public form of the tables (pointing into c).
blockspec_cost_model cli_costs_public(const cli_costs *c);
// cli_measure_fn over an engine the command opened itself (ctx: the const bs_engine *), and
// cli_measure_draft_fn over its drafter (ctx: a cli_engine_drafter *).
int cli_measure_engine(void *ctx, const int *rows, int n, int ctx_rows, int block, int reps, double *sps, char *err, size_t len);
struct bs_engine; struct bs_drafter;
typedef struct cli_engine_drafter { const struct bs_engine *e; struct bs_drafter *d; } cli_engine_drafter;
int cli_measure_engine_draft(void *ctx, const int *seqs, int n, int ctx_rows, int drafts, int reps, double *pps, char *err, size_t len);
// Sets bs's schedule; for alg1 / async with its cost model (cost_model FILE, else the cache or a measurement)
// sized for max_concurrency blocks of draft_max + 1 rows (draft_max 0: 16). 0, or -1 with a message in err.
int cli_set_schedule(blockspec *bs, blockspec_schedule sched, const char *cost_model, int max_concurrency, int draft_max, char *err, size_t len);
