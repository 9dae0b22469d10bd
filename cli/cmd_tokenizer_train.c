// blockspec tokenizer-train: byte-level BPE training to a Hugging Face tokenizer.json.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/commands.h"
#include "train/bpe_train.h"

static void usage(void) {
    fprintf(stderr,
        "usage: blockspec tokenizer-train --vocab N [--special '<|endoftext|>,<|mask|>'] [--min-frequency N]\n"
        "                                 --out tokenizer.json CORPUS...\n"
        "  Trains a byte-level BPE (NFC, Qwen-style Split regex, ByteLevel) of N tokens in all: the special\n"
        "  tokens (ids 0..), the 256 byte tokens, then one token per merge.\n");
}

static void print_progress(void *ctx, const char *line) { (void)ctx; fprintf(stderr, "tokenizer-train: %s\n", line); }

int cmd_tokenizer_train(int argc, char **argv) {
    bs_bpe_train_opts o = { 0 };
    const char *out = NULL, *special = NULL;
    const char **files = calloc(argc + 1, sizeof *files);
    size_t n_files = 0;
    if (!files) return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); free(files); return 0; }
        else if (!strcmp(a, "--vocab") && has) o.vocab_size = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(a, "--special") && has) special = argv[++i];
        else if (!strcmp(a, "--min-frequency") && has) o.min_frequency = strtol(argv[++i], NULL, 10);
        else if (!strcmp(a, "--out") && has) out = argv[++i];
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) o.progress = print_progress;
        else if (a[0] == '-' && a[1]) { fprintf(stderr, "blockspec tokenizer-train: unknown or incomplete option '%s'\n", a); usage(); free(files); return 2; }
        else files[n_files++] = a;
    }
    if (!o.vocab_size || !out || !n_files) { usage(); free(files); return 2; }
    char *sp = special ? strdup(special) : NULL;
    const char **names = calloc(sp ? strlen(sp) + 1 : 1, sizeof *names);
    if (sp) for (char *tok = strtok(sp, ","); tok; tok = strtok(NULL, ",")) if (*tok) names[o.n_special++] = tok;
    o.special = names;
    bs_err err;
    int rc = bs_bpe_train_files(files, n_files, &o, out, &err);
    if (rc) fprintf(stderr, "blockspec tokenizer-train: %s\n", err.msg);
    free(sp); free(names); free(files);
    return rc ? 1 : 0;
}
