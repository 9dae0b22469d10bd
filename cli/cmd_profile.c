// blockspec profile [-m TARGET] [-d DRAFTER|none] [--device D] [--max-rows B] [--ctx N] [--block K] [--reps R] [--out FILE] [--json]
// The schedulers' cost model (docs/scheduling.md): the target's verify-shaped forwards per second with
// 1..B rows, its plain forwards with 1..B/K one-row sequences and the drafter's passes over 1..B/K
// sequences on this device, written to the cache the schedulers read (cli/cost_model.h) and printed.
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
        "usage: blockspec profile [-m TARGET_DIR] [-d DRAFTER_DIR|none] [--device cpu|cuda[:N]] [--max-rows B] [--ctx N] [--block K]\n"
        "                         [--reps R] [--out FILE] [--json]\n"
        "  measures the target's forwards per second with 1..B rows (default 64) in one forward, the rows spread\n"
        "  over sequences of K rows (default 5: an anchor and 4 drafts) each after an N-row context (default 256);\n"
        "  the same with 1..ceil(B/K) sequences of one row (a plain decoding step); and with a drafter, its passes\n"
        "  per second over 1..ceil(B/K) sequences drafting K-1 tokens each. The best of R (default 3) per count;\n"
        "  1..16 each, then every 8 to 128, every 32 after, each also one past. The tables are cached for --schedule alg1|async\n"
        "  ($XDG_CACHE_HOME/blockspec/profile-<device>-<shape>[-<drafter>].json, else ~/.cache/blockspec/...);\n"
        "  --out FILE writes them there too (generate / bench --cost-model FILE read it).\n"
        "  -m: the built-in target by default, with the built-in drafter unless -d none. --json: the file's JSON\n"
        "  on stdout instead of the tables.\n");
}

static void print_table(const char *title, const char *count, const int *x, const double *v, int n) {
    printf("%s\n| %s | ms | per second |\n|---:|---:|---:|\n", title, count);
    for (int i = 0; i < n; i++) printf("| %d | %.3f | %.1f |\n", x[i], 1e3 / v[i], v[i]);
}

int cmd_profile(int argc, char **argv) {
    const char *model = NULL, *drafter_dir = NULL, *device = "cpu", *out = NULL, *v;
    long max_rows = 64, ctx = 256, block = 5, reps = 3;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-m")) { if (!(model = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(o, "-d")) { if (!(drafter_dir = cli_value(argc, argv, &i))) return 2; }
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
        if (!drafter_dir && drafter[0]) drafter_dir = drafter;
    }
    if (drafter_dir && !strcmp(drafter_dir, "none")) drafter_dir = NULL;
    char err[1024], dev[512], shape[256], dshape[256];
    blockspec *bs = NULL;
    cli_profile_points p = { 0 };
    int rc = 1;
    char *path = NULL;
    if (blockspec_open(&bs, model, drafter_dir, device, err, sizeof err)) goto out;
    cli_cost_opts o = { .max_rows = (int)max_rows, .ctx = (int)ctx, .block = (int)block, .reps = (int)reps, .drafts = (int)block - 1 };
    cli_cost_keys(bs, &o, dev, sizeof dev, shape, sizeof shape, dshape, sizeof dshape);
    if (cli_cost_measure(&o, &p, err, sizeof err)) goto out;
    if ((path = cli_cost_cache_path(o.device, o.shape, o.drafter, 1)) && cli_cost_save(path, &o, &p, err, sizeof err)) goto out;
    if (out && cli_cost_save(out, &o, &p, err, sizeof err)) goto out;
    if (json) {
        const char *show = out ? out : path;
        FILE *f = show ? fopen(show, "r") : NULL;
        int ch;
        while (f && (ch = fgetc(f)) != EOF) putchar(ch);
        if (f) fclose(f);
        printf("\n");
    } else {
        printf("device %s, target %s (%s), context %ld, best of %ld\n", o.device, model, o.shape, ctx, reps);
        char title[512];
        snprintf(title, sizeof title, "target, verify forwards (rows in sequences of %ld):", block);
        print_table(title, "rows", p.rows, p.sps, p.n);
        print_table("target, plain forwards (one row per sequence):", "sequences", p.seqs1, p.sps1, p.n1);
        if (p.nd) {
            snprintf(title, sizeof title, "drafter %s, passes (%ld drafts per sequence):", o.drafter, block - 1);
            print_table(title, "sequences", p.seqsd, p.pps, p.nd);
        }
        if (path) printf("cached: %s\n", path);
        if (out) printf("written: %s\n", out);
    }
    rc = 0;
out:
    if (rc) fprintf(stderr, "blockspec profile: %s\n", err);
    cli_profile_points_free(&p);
    free(path);
    blockspec_close(bs);
    return rc;
}
