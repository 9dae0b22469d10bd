// blockspec quantize -m DIR --bits 4|8 [--group 64] --out DIR
// A float (BF16/F16/F32) checkpoint folder -> an MLX affine-quantised folder that blockspec and mlx-lm load
// (docs/quantization.md). Targets and drafters alike.
#include <stdio.h>
#include <string.h>
#include "cli/args.h"
#include "cli/commands.h"
#include "io/quantize_ckpt.h"

#define USAGE "usage: blockspec quantize -m DIR --bits 4|8 [--group 32|64|128] --out DIR\n"

int cmd_quantize(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *v;
    long bits = 0, group = 64;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) { if (!(in = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(argv[i], "--out") || !strcmp(argv[i], "-o")) { if (!(out = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(argv[i], "--bits")) { if (!(v = cli_value(argc, argv, &i)) || cli_int("--bits", v, 1, 64, &bits)) return 2; }
        else if (!strcmp(argv[i], "--group")) { if (!(v = cli_value(argc, argv, &i)) || cli_int("--group", v, 1, 4096, &group)) return 2; }
        else if (!strcmp(argv[i], "--help")) { fprintf(stderr, USAGE); return 0; }
        else { fprintf(stderr, "blockspec quantize: unknown option %s\n" USAGE, argv[i]); return 2; }
    }
    if (!in || !out || !bits) { fprintf(stderr, USAGE); return 2; }
    if (bits != 4 && bits != 8) { fprintf(stderr, "blockspec quantize: --bits must be 4 or 8, not %ld\n", bits); return 2; }
    if (group != 32 && group != 64 && group != 128) { fprintf(stderr, "blockspec quantize: --group must be 32, 64 or 128, not %ld\n", group); return 2; }
    if (!strcmp(in, out)) { fprintf(stderr, "blockspec quantize: --out must be another folder than -m\n"); return 2; }
    bs_err err = {0};
    int n = 0;
    if (bs_quantize_checkpoint(in, out, (int)bits, (int)group, &n, &err)) { fprintf(stderr, "blockspec quantize: %s\n", err.msg); return 1; }
    fprintf(stderr, "blockspec quantize: %d matrices in %ld-bit affine codes (group %ld) -> %s\n", n, bits, group, out);
    return 0;
}
