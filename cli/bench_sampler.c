// blockspec bench --sampler [--vocab 151936]: the per-token cost of turning logits into a token
// (greedy, temperature, top-k, top-p) and of the acceptance step, next to a decode step's budget.
#include <stdio.h>
#include <stdlib.h>
#include "spec/sampler.h"
#include "spec/verify.h"
#include "util/threadpool.h"
#include "util/timer.h"

int bench_sampler(int vocab) {
    float *l = malloc(sizeof(float) * vocab), *p = malloc(sizeof(float) * vocab * 9), *scr = malloc(sizeof(float) * 2 * vocab);
    if (!l || !p || !scr) { fprintf(stderr, "bench: out of memory\n"); return 1; }
    bs_rng r; bs_rng_seed(&r, 1);
    // Logits shaped like a language model's: a few strong candidates over a long flat tail.
    for (int i = 0; i < vocab; i++) l[i] = (float)(bs_rng_uniform(&r) * 6 - 3) + (i % 997 == 0 ? 8.0f : 0.0f);
    const struct { const char *name; bs_sampling s; } C[] = {
        { "greedy (argmax)", { 0, 0, 1, 0 } }, { "temperature 0.7", { 0.7f, 0, 1, 0 } },
        { "T 0.7, top-k 20", { 0.7f, 20, 1, 0 } }, { "T 0.7, top-p 0.8", { 0.7f, 0, 0.8f, 0 } },
        { "T 0.7, top-k 20, top-p 0.8", { 0.7f, 20, 0.8f, 0 } },
    };
    printf("sampler over a %d-token vocabulary (one row; its chunks on a pool of %d threads, BS_THREADS=1: one):\n", vocab, bs_pool_size());
    for (size_t c = 0; c < sizeof C / sizeof *C; c++) {
        int reps = 50;
        volatile int32_t sink = 0;
        double t0 = bs_now();
        for (int i = 0; i < reps; i++) sink += bs_sample_logits(&C[c].s, l, vocab, p, scr, &r);
        printf("  %-28s %8.1f us/token\n", C[c].name, (bs_now() - t0) / reps * 1e6);
    }
    // Flat logits (a random-weight checkpoint, or a high temperature): top-p keeps most of the vocabulary.
    float *lf = malloc(sizeof(float) * vocab);
    if (!lf) { fprintf(stderr, "bench: out of memory\n"); return 1; }
    for (int i = 0; i < vocab; i++) lf[i] = (float)(bs_rng_uniform(&r) - 0.5);
    const bs_sampling flat = { 0.8f, 0, 0.9f, 0 };
    {
        volatile int32_t sink = 0;
        double t0 = bs_now();
        for (int i = 0; i < 20; i++) sink += bs_sample_logits(&flat, lf, vocab, p, scr, &r);
        printf("  %-28s %8.1f us/token\n", "T 0.8, top-p 0.9, flat", (bs_now() - t0) / 20 * 1e6);
    }
    free(lf);
    // Rejection-sampling acceptance of 8 drafts (processed p and q rows already built).
    bs_sampling s = { 0.7f, 0, 1, 0 };
    for (int k = 0; k < 9; k++) bs_sampling_probs(&s, l, vocab, p + (size_t)k * vocab, scr);
    int32_t d[8], next;
    for (int k = 0; k < 8; k++) d[k] = bs_sample_probs(p, vocab, &r);
    double t0 = bs_now();
    for (int i = 0; i < 50; i++) bs_accept_sampled(p + vocab, p, d, 8, vocab, &r, scr, &next);
    printf("  %-28s %8.1f us/round\n", "accept 8 drafts (sampled)", (bs_now() - t0) / 50 * 1e6);
    free(l); free(p); free(scr);
    return 0;
}
