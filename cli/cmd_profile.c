// blockspec profile [-m TARGET] [--device D] [--max-rows B] [--ctx N] [--block K] [--reps R] [--out FILE] [--json]
// The schedulers' cost model (docs/scheduling.md): the target's verify-shaped forwards per second with
// 1..B rows on this device, written to the cache the schedulers read (cli/cost_model.h) and printed.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "blockspec.h"
#include "cli/args.h"
#include "cli/builtin_model.h"
#include "cli/commands.h"
#include "cli/cost_model.h"

static void usage(void) {
    fprintf(stderr,
        "usage: blockspec profile [-m TARGET_DIR] [--device cpu|cuda[:N]] [--max-rows B] [--ctx N] [--block K] [--reps R]\n"
        "                         [--out FILE] [--json]\n"
        "  measures the target's forwards per second with 1..B rows (default 64) in one forward, the rows spread\n"
        "  over sequences of K rows (default 5: an anchor and 4 drafts) each after an N-row context (default 256),\n"
        "  the best of R forwards (default 3) per row count; 1..16 rows each, then every 8 to 128, every 32 after.\n"
        "  The table is cached for --schedule alg1|async ($XDG_CACHE_HOME/blockspec/profile-<device>-<shape>.json,\n"
        "  else ~/.cache/blockspec/...); --out FILE writes it there too (generate / bench --profile FILE read it).\n"
        "  -m: the built-in target by default. --json: the file's JSON on stdout instead of the table.\n");
}

int cmd_profile(int argc, char **argv) {
    const char *model = NULL, *device = "cpu", *out = NULL, *v;
    long max_rows = 64, ctx = 256, block = 5, reps = 3;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-m")) { if (!(model = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(o, "--device")) { if (!(device = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(o, "--out")) { if (!(out = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(o, "--max-rows")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 1, 4096, &max_rows)) return 2; }
        else if (!strcmp(o, "--ctx")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 1, 1 << 20, &ctx)) return 2; }
        else if (!strcmp(o, "--block")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 1, 64, &block)) return 2; }
        else if (!strcmp(o, "--reps")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 1, 1000, &reps)) return 2; }
        else if (!strcmp(o, "--json")) json = 1;
        else if (!strcmp(o, "--help") || !strcmp(o, "-h")) { usage(); return 0; }
        else { fprintf(stderr, "blockspec profile: unknown option %s\n", o); usage(); return 2; }
    }
    static char target[4096], drafter[4096];
    if (!model) {
        if (cli_builtin_model(target, drafter, sizeof target)) { fprintf(stderr, "blockspec profile: no -m TARGET_DIR and no built-in model\n"); return 2; }
        model = target;
    }
    char err[1024], dev[512], shape[256];
    blockspec *bs = NULL;
    int *rows = NULL, n = 0, rc = 1;
    double *sps = NULL;
    char *path = NULL;
    if (blockspec_open(&bs, model, NULL, device, err, sizeof err)) goto out;
    cli_cost_opts o = { .max_rows = (int)max_rows, .ctx = (int)ctx, .block = (int)block, .reps = (int)reps };
    cli_cost_keys(bs, &o, dev, sizeof dev, shape, sizeof shape);
    if (cli_cost_measure(&o, &rows, &sps, &n, err, sizeof err)) goto out;
    if ((path = cli_cost_cache_path(o.device, o.shape, 1)) && cli_cost_save(path, &o, rows, sps, n, err, sizeof err)) goto out;
    if (out && cli_cost_save(out, &o, rows, sps, n, err, sizeof err)) goto out;
    if (json) {
        const char *show = out ? out : path;
        FILE *f = show ? fopen(show, "r") : NULL;
        int ch;
        while (f && (ch = fgetc(f)) != EOF) putchar(ch);
        if (f) fclose(f);
        printf("\n");
    } else {
        printf("device %s, target %s (%s), context %ld, %ld rows per sequence, best of %ld\n", o.device, model, o.shape, ctx, block, reps);
        printf("| rows | ms per forward | forwards/s | rows/s |\n|---:|---:|---:|---:|\n");
        for (int i = 0; i < n; i++) printf("| %d | %.3f | %.1f | %.0f |\n", rows[i], 1e3 / sps[i], sps[i], rows[i] * sps[i]);
        if (path) printf("cached: %s\n", path);
        if (out) printf("written: %s\n", out);
    }
    rc = 0;
out:
    if (rc) fprintf(stderr, "blockspec profile: %s\n", err);
    free(rows); free(sps); free(path);
    blockspec_close(bs);
    return rc;
}
