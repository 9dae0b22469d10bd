// blockspec rotate -m DIR --out DIR [--seed N | --signs FILE] [--dtype f32|bf16|f16]
// A float Qwen3 / Llama checkpoint -> its R1 fold (docs/rotation.md): the same model with its residual stream
// stored in a rotated basis, which 4-bit quantisation loses less of. Drafters trained on the original bind to it
// (blockspec generate -m FOLDED -d DRAFTER); `blockspec quantize` on the result gives a rotated 4-bit model.
#include <stdio.h>
#include <string.h>
#include "cli/args.h"
#include "cli/commands.h"
#include "io/rotate_ckpt.h"

#define USAGE "usage: blockspec rotate -m DIR --out DIR [--seed N | --signs FILE] [--dtype f32|bf16|f16]\n" \
              "  --seed N      the R1 signs from seed N (the r1Seed stream; default 1)\n" \
              "  --signs FILE  the R1 signs from FILE (safetensors, a tensor \"signs\" of hidden_size values +1/-1)\n" \
              "  --dtype T     store every tensor as T (default: each tensor's own dtype)\n"

int cmd_rotate(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *v;
    bs_rotate_opts o = { .seed = 1 };
    int have_seed = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) { if (!(in = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(argv[i], "--out") || !strcmp(argv[i], "-o")) { if (!(out = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(argv[i], "--signs")) { if (!(o.signs_file = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(argv[i], "--dtype")) { if (!(o.dtype = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(argv[i], "--seed")) {
            long s;
            if (!(v = cli_value(argc, argv, &i)) || cli_int("--seed", v, 0, 4294967295L, &s)) return 2;
            o.seed = (uint32_t)s;
            have_seed = 1;
        }
        else if (!strcmp(argv[i], "--help")) { fprintf(stderr, USAGE); return 0; }
        else { fprintf(stderr, "blockspec rotate: unknown option %s\n" USAGE, argv[i]); return 2; }
    }
    if (!in || !out) { fprintf(stderr, USAGE); return 2; }
    if (have_seed && o.signs_file) { fprintf(stderr, "blockspec rotate: --seed and --signs are alternatives; give one\n"); return 2; }
    if (!strcmp(in, out)) { fprintf(stderr, "blockspec rotate: --out must be another folder than -m\n"); return 2; }
    bs_err err = {0};
    if (bs_rotate_checkpoint(in, out, &o, &err)) { fprintf(stderr, "blockspec rotate: %s\n", err.msg); return 1; }
    if (o.signs_file) fprintf(stderr, "blockspec rotate: R1-folded (signs from %s) -> %s\n", o.signs_file, out);
    else fprintf(stderr, "blockspec rotate: R1-folded (r1Seed %u) -> %s\n", o.seed, out);
    return 0;
}
