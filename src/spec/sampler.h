// Turning logits into a token. The processed distribution (temperature -> top-k -> top-p, the order
// transformers uses) is materialised as a vector, because speculative sampling needs p and q.
#pragma once
#include <stdint.h>
#include "util/rng.h"

typedef struct bs_sampling {
    float temperature;   // <= 0: greedy (argmax, first index on ties)
    int top_k;           // 0: off. Keeps every token whose logit is >= the k-th largest (ties kept, as transformers)
    float top_p;         // >= 1: off. Keeps the most probable tokens until their mass reaches top_p
    uint64_t seed;
} bs_sampling;

static inline int bs_sampling_greedy(const bs_sampling *s) { return !s || s->temperature <= 0; }

int32_t bs_argmax(const float *logits, int vocab);
// probs[vocab] = the processed distribution of logits (one-hot at the argmax when greedy). `scratch`
// needs 2*vocab floats (NULL: allocated). Returns the number of tokens with non-zero probability, or -1 when
// scratch was NULL and could not be allocated (probs unfinished).
int bs_sampling_probs(const bs_sampling *s, const float *logits, int vocab, float *probs, float *scratch);
// The same for n rows (logits and probs [n][vocab], probs may alias logits), rows in parallel on the
// thread pool: a verify block's rows are independent, and at a 151,936-token vocabulary one row is
// ~0.3-1.3 ms of host time (one thread), which beside a GPU step of a few ms is not small.
// Returns 0, or -1 when a row's scratch could not be allocated.
int bs_sampling_probs_rows(const bs_sampling *s, const float *logits, int n, int vocab, float *probs);
// Draws from a distribution that sums to ~1 (zeros never drawn): the inverse CDF in index order at
// u * total (u uniform in [0, 1)). bs_sample_probs takes u from rng.
int32_t bs_sample_probs_u(const float *probs, int vocab, double u);
// Sum of p[0..n) in double (8 partial sums, so it vectorises; the draw's and the acceptance's totals).
double bs_sum_f32(const float *p, int n);
int32_t bs_sample_probs(const float *probs, int vocab, bs_rng *rng);
// logits -> token (greedy or sampled from the processed distribution); scratch as above (-1: out of memory).
int32_t bs_sample_logits(const bs_sampling *s, const float *logits, int vocab, float *probs, float *scratch, bs_rng *rng);

typedef struct bs_backend bs_backend;
// Sampling where the logits are: probs[n][vocab] = the processed distributions of logits[n][vocab]
// (backend memory; probs may alias logits) and, with ids != NULL, ids[i] (host) = the token drawn from
// row i at uniform u[i]. Runs as the backend's sample_rows op where it has one (CUDA: on the device,
// without downloading the rows), else on the host (the backend's memory is host memory then). Host scratch
// that cannot be allocated is the backend's fault (bs_backend_fail; the caller's bs_backend_check reports it).
void bs_sample_rows(bs_backend *be, const bs_sampling *s, float *probs, const float *logits, int n, int vocab,
                    const double *u, int32_t *ids);
// The same with the ids written to backend memory (ids_be): no host round trip (the backend's
// sample_rows_to op, else the host code, where backend memory is host memory).
void bs_sample_rows_to(bs_backend *be, const bs_sampling *s, float *probs, const float *logits, int n, int vocab,
                       const double *u, int32_t *ids_be);
