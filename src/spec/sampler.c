#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "spec/sampler.h"

static inline uint32_t bs_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

int32_t bs_argmax(const float *l, int vocab) {
    int best = 0;
    for (int i = 1; i < vocab; i++) if (l[i] > l[best]) best = i;
    return best;
}

static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

// The k-th largest value of v[0..n) (1-based k), by quickselect on a copy.
static float kth_largest(const float *v, int n, int k, float *tmp) {
    memcpy(tmp, v, sizeof(float) * n);
    int lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        float pivot = tmp[(lo + hi) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (tmp[i] > pivot) i++;
            while (tmp[j] < pivot) j--;
            if (i <= j) { float t = tmp[i]; tmp[i] = tmp[j]; tmp[j] = t; i++; j--; }
        }
        if (want <= j) hi = j; else if (want >= i) lo = i; else break;
    }
    return tmp[want];
}

int bs_sampling_probs(const bs_sampling *s, const float *logits, int vocab, float *p, float *scratch) {
    if (bs_sampling_greedy(s)) {
        memset(p, 0, sizeof(float) * vocab);
        p[bs_argmax(logits, vocab)] = 1.0f;
        return 1;
    }
    float *own = NULL;
    if (!scratch) scratch = own = malloc(sizeof(float) * 2 * vocab);
    float inv_t = 1.0f / s->temperature, mx = -INFINITY;
    for (int i = 0; i < vocab; i++) { p[i] = logits[i] * inv_t; if (p[i] > mx) mx = p[i]; }
    float cut = -INFINITY;
    if (s->top_k > 0 && s->top_k < vocab) cut = kth_largest(p, vocab, s->top_k, scratch);
    double sum = 0;
    for (int i = 0; i < vocab; i++) { p[i] = p[i] >= cut ? expf(p[i] - mx) : 0.0f; sum += p[i]; }
    int kept = 0;
    for (int i = 0; i < vocab; i++) { p[i] = (float)(p[i] / sum); kept += p[i] > 0; }
    if (s->top_p > 0 && s->top_p < 1) {
        // Smallest set of the most probable tokens whose mass reaches top_p; tokens tied with the
        // last one admitted are kept too, so the result does not depend on index order.
        // Only tokens in the binary orders of magnitude that can matter are sorted: bucket by the
        // float exponent, walk buckets from the top until their mass reaches top_p.
        double bmass[256] = { 0 };
        for (int i = 0; i < vocab; i++) if (p[i] > 0) bmass[(bs_f32_bits(p[i]) >> 23) & 0xff] += p[i];
        int lowest = 255; double acc = 0;
        for (; lowest > 0; lowest--) { acc += bmass[lowest]; if (acc >= s->top_p) break; }
        int m = 0;
        for (int i = 0; i < vocab; i++) if (p[i] > 0 && (int)((bs_f32_bits(p[i]) >> 23) & 0xff) >= lowest) scratch[m++] = p[i];
        qsort(scratch, m, sizeof(float), cmp_desc);
        float thr = scratch[0];
        acc = 0;
        for (int i = 0; i < m; i++) { thr = scratch[i]; acc += scratch[i]; if (acc >= s->top_p) break; }
        sum = 0; kept = 0;
        for (int i = 0; i < vocab; i++) { if (p[i] < thr) p[i] = 0; sum += p[i]; kept += p[i] > 0; }
        for (int i = 0; i < vocab; i++) p[i] = (float)(p[i] / sum);
    }
    free(own);
    return kept;
}

int32_t bs_sample_probs(const float *p, int vocab, bs_rng *rng) {
    double u = bs_rng_uniform(rng), acc = 0, total = 0;
    for (int i = 0; i < vocab; i++) total += p[i];
    u *= total;  // robust to rounding in the normalisation
    int last = -1;
    for (int i = 0; i < vocab; i++) {
        if (p[i] <= 0) continue;
        acc += p[i]; last = i;
        if (u < acc) return i;
    }
    return last < 0 ? 0 : last;
}

int32_t bs_sample_logits(const bs_sampling *s, const float *logits, int vocab, float *probs, float *scratch, bs_rng *rng) {
    if (bs_sampling_greedy(s)) return bs_argmax(logits, vocab);
    bs_sampling_probs(s, logits, vocab, probs, scratch);
    return bs_sample_probs(probs, vocab, rng);
}
