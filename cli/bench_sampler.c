// blockspec bench --sampler [--device cpu|cuda]: the cost of turning logits into tokens (greedy,
// temperature, top-k, top-p) and of the acceptance step, next to a decode step's budget, through
// bs_sample_rows / bs_accept_sampled_on: on the host sampler for the CPU, on the device for CUDA
// (times include the download of the drawn ids). One row (plain decoding) and 16 rows (a verify block).
#include <stdio.h>
#include <stdlib.h>
#include "backend/backend.h"
#include "spec/sampler.h"
#include "spec/verify.h"
#include "util/threadpool.h"
#include "util/timer.h"

#define ROWS 16

// Mean seconds per call of sampling `n` rows of dl (backend memory) into dp.
static double time_rows(bs_backend *be, const bs_sampling *s, float *dp, const float *dl, int n, int vocab, bs_rng *r, int reps) {
    double u[ROWS];
    int32_t ids[ROWS];
    for (int k = 0; k < n; k++) u[k] = bs_rng_uniform(r);
    bs_sample_rows(be, s, dp, dl, n, vocab, u, ids);   // warm-up
    double t0 = bs_now();
    for (int i = 0; i < reps; i++) {
        for (int k = 0; k < n; k++) u[k] = bs_rng_uniform(r);
        bs_sample_rows(be, s, dp, dl, n, vocab, u, ids);
    }
    return (bs_now() - t0) / reps;
}

int bench_sampler(int vocab, const char *device) {
    bs_err err = {0};
    bs_backend *be = bs_backend_by_name(device ? device : "cpu", &err);
    if (!be) { fprintf(stderr, "bench: %s\n", err.msg); return 1; }
    const size_t rowb = sizeof(float) * (size_t)vocab;
    float *l = malloc(rowb * ROWS), *scr = malloc(rowb * 2);
    float *dl = be->alloc(be, rowb * ROWS, &err), *dlf = dl ? be->alloc(be, rowb * ROWS, &err) : NULL;
    float *dp = dlf ? be->alloc(be, rowb * (ROWS + 1), &err) : NULL;
    if (!l || !scr || !dp) { fprintf(stderr, "bench: out of memory%s%s\n", err.msg[0] ? ": " : "", err.msg); return 1; }
    bs_rng r; bs_rng_seed(&r, 1);
    // Logits shaped like a language model's: a few strong candidates over a long flat tail.
    for (int k = 0; k < ROWS; k++)
        for (int i = 0; i < vocab; i++) l[(size_t)k * vocab + i] = (float)(bs_rng_uniform(&r) * 6 - 3) + ((i + k) % 997 == 0 ? 8.0f : 0.0f);
    be->upload(be, dl, l, rowb * ROWS);
    // Flat logits (a random-weight checkpoint, or a high temperature): top-p keeps most of the vocabulary.
    for (size_t i = 0; i < (size_t)vocab * ROWS; i++) l[i] = (float)(bs_rng_uniform(&r) - 0.5);
    be->upload(be, dlf, l, rowb * ROWS);
    const struct { const char *name; bs_sampling s; int flat; } C[] = {
        { "greedy (argmax)", { 0, 0, 1, 0 }, 0 }, { "temperature 0.7", { 0.7f, 0, 1, 0 }, 0 },
        { "T 0.7, top-k 20", { 0.7f, 20, 1, 0 }, 0 }, { "T 0.7, top-p 0.8", { 0.7f, 0, 0.8f, 0 }, 0 },
        { "T 0.7, top-k 20, top-p 0.8", { 0.7f, 20, 0.8f, 0 }, 0 }, { "T 0.8, top-p 0.9, flat", { 0.8f, 0, 0.9f, 0 }, 1 },
    };
    printf("sampler over a %d-token vocabulary on %s", vocab, be->name);
    if (!be->sample_rows) printf(" (host code; a row's chunks, or the rows, on a pool of %d threads; BS_THREADS sets it)", bs_pool_size());
    printf(":\n  %-28s %12s %14s\n", "", "1 row", "16 rows");
    for (size_t c = 0; c < sizeof C / sizeof *C; c++) {
        const float *src = C[c].flat ? dlf : dl;
        int32_t id;
        double t1, t16;
        if (C[c].s.temperature <= 0) {   // greedy decoding takes the argmax op, not the sampler
            be->argmax(be, &id, src, 1, vocab);
            double t0 = bs_now();
            for (int i = 0; i < 50; i++) be->argmax(be, &id, src, 1, vocab);
            t1 = (bs_now() - t0) / 50;
            int32_t ids[ROWS];
            t0 = bs_now();
            for (int i = 0; i < 20; i++) be->argmax(be, ids, src, ROWS, vocab);
            t16 = (bs_now() - t0) / 20;
        } else {
            t1 = time_rows(be, &C[c].s, dp, src, 1, vocab, &r, 50);
            t16 = time_rows(be, &C[c].s, dp, src, ROWS, vocab, &r, 10);
        }
        printf("  %-28s %9.1f us %11.1f us\n", C[c].name, t1 * 1e6, t16 * 1e6);
    }
    // Acceptance of 8 drafts over processed rows (the drafts drawn from their own rows): p == q accepts
    // all and draws the bonus token; p = the next rows rejects at the first and draws from the residual.
    const bs_sampling s = { 0.7f, 0, 1, 0 };
    double u[ROWS];
    int32_t d[ROWS], next;
    for (int k = 0; k < ROWS; k++) u[k] = bs_rng_uniform(&r);
    bs_sample_rows(be, &s, dp, dl, ROWS, vocab, u, d);
    for (int pass = 0; pass < 2; pass++) {
        const float *p = pass ? dp + vocab : dp;
        int a = 0;
        double t0 = bs_now();
        for (int i = 0; i < 50; i++) {
            for (int k = 0; k <= 8; k++) u[k] = bs_rng_uniform(&r);
            a += bs_accept_sampled_on(be, p, dp, d, 8, vocab, u, scr, &next);
        }
        printf("  %-28s %9.1f us/round (%.1f accepted)\n", pass ? "accept 8 drafts: rejection" : "accept 8 drafts: all", (bs_now() - t0) / 50 * 1e6,
               a / 50.0);
    }
    be->free(be, dl); be->free(be, dlf); be->free(be, dp);
    be->destroy(be);
    free(l); free(scr);
    return 0;
}
