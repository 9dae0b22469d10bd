// blockspec: the command-line program. Each subcommand lives in its own cli/cmd_*.c file and
// uses the library; this file only dispatches.
#include <stdio.h>
#include <string.h>
#include "cli/commands.h"

static const struct { const char *name, *help; int (*run)(int argc, char **argv); } COMMANDS[] = {
    { "generate",        "generate tokens (plain or speculative with -d DRAFTER)", cmd_generate },
    { "dump",            "write the engine's tensors for given ids to a safetensors file", cmd_dump },
    { "bench",           "benchmark forwards and print figures beside the machine's rooflines", cmd_bench },
    { "make-random",     "write a random checkpoint of any Qwen3 / Llama / Gemma-4 / drafter shape", cmd_make_random },
    { "quantize",        "write an MLX affine 4- or 8-bit copy of a float checkpoint (docs/quantization.md)", cmd_quantize },
    { "rotate",          "write the R1-folded copy of a float Qwen3 / Llama checkpoint (docs/rotation.md)", cmd_rotate },
    { "tokenize",        "print the ids of a text", cmd_tokenize },
    { "tokenizer-train", "train a byte-level BPE tokenizer.json", cmd_tokenizer_train },
    { "train-target",    "train a Qwen3 target on a tokenised corpus (docs/training.md)", cmd_train_target },
    { "train-drafter",   "train a DSpark / DFlash drafter against a frozen target (docs/training.md)", cmd_train_drafter },
    { "distill-corpus",  "the target's own greedy continuations of corpus prompts, as a corpus for drafter training", cmd_distill_corpus },
    { "draft-vocab",     "pick a draft vocabulary (the drafter's proposable tokens) from sample text", cmd_draft_vocab },
    { "loss",            "evaluate one drafter training step (loss terms, logits, gradients) for a fixed batch", cmd_loss },
    { "serve",           "an OpenAI-compatible HTTP server with batched speculative decoding (docs/serving.md)", cmd_serve },
    { "profile",         "measure the target's forwards per second by rows: the schedulers' cost model", cmd_profile },
    { "calibrate",       "fit a DSpark drafter's confidences to held-out survival (docs/calibration.md)", cmd_calibrate },
};

static void usage(void) {
    fprintf(stderr, "usage: blockspec COMMAND [options]   (blockspec COMMAND --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof *COMMANDS; i++)
        fprintf(stderr, "  %-16s %s\n", COMMANDS[i].name, COMMANDS[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) { usage(); return argc < 2 ? 2 : 0; }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof *COMMANDS; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].run(argc - 1, argv + 1);
    fprintf(stderr, "blockspec: unknown command '%s'\n", argv[1]);
    usage();
    return 2;
}
