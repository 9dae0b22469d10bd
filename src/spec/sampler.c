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

// The k-th largest value of v[0..n) (1-based k). Small k: one pass keeping a min-heap of the k largest
// (almost every element fails the first comparison); large k: quickselect on a copy.
static float kth_largest(const float *v, int n, int k, float *tmp) {
    if (k <= 4096) {
        float *h = tmp;   // min-heap of size k
        int m = 0;
        for (int i = 0; i < n; i++) {
            float x = v[i];
            if (m < k) {   // sift up
                int j = m++;
                while (j > 0 && h[(j - 1) / 2] > x) { h[j] = h[(j - 1) / 2]; j = (j - 1) / 2; }
                h[j] = x;
            } else if (x > h[0]) {   // replace the smallest, sift down
                int j = 0;
                for (;;) {
                    int c = 2 * j + 1;
                    if (c >= k) break;
                    if (c + 1 < k && h[c + 1] < h[c]) c++;
                    if (h[c] >= x) break;
                    h[j] = h[c]; j = c;
                }
                h[j] = x;
            }
        }
        return h[0];
    }
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

// e^x for x <= 0, within ~2 ulp of expf: x = n ln2 + r with |r| <= ln2/2, a degree-6 polynomial
// for e^r, 2^n by exponent bits. Branch-free, so the softmax loop vectorises (libm's expf does not).
static inline float exp_nonpos(float x) {
    x = x < -87.0f ? -87.0f : x;
    float n = floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f;
    float e = 1.0f + r * (1.0f + r * (0.5f + r * (1.66666672e-1f + r * (4.16666418e-2f + r * (8.33336077e-3f + r * 1.38773955e-3f)))));
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale; memcpy(&scale, &bits, 4);
    return e * scale;
}

int bs_sampling_probs(const bs_sampling *s, const float *logits, int vocab, float *p, float *scratch) {
    if (bs_sampling_greedy(s)) {
        memset(p, 0, sizeof(float) * vocab);
        p[bs_argmax(logits, vocab)] = 1.0f;
        return 1;
    }
    float *own = NULL;
    if (!scratch) scratch = own = malloc(sizeof(float) * 2 * vocab);
    // Written as simple, separate passes with 8 partial accumulators so that each one vectorises.
    float inv_t = 1.0f / s->temperature, m8[8], part[8] = { 0 };
    for (int i = 0; i < vocab; i++) p[i] = logits[i] * inv_t;
    for (int j = 0; j < 8; j++) m8[j] = -INFINITY;
    int i = 0;
    for (; i + 8 <= vocab; i += 8)
        for (int j = 0; j < 8; j++) m8[j] = p[i + j] > m8[j] ? p[i + j] : m8[j];
    float mx = m8[0];
    for (int j = 1; j < 8; j++) mx = m8[j] > mx ? m8[j] : mx;
    for (; i < vocab; i++) mx = p[i] > mx ? p[i] : mx;
    float cut = -INFINITY;
    if (s->top_k > 0 && s->top_k < vocab) cut = kth_largest(p, vocab, s->top_k, scratch);
    for (i = 0; i < vocab; i++) p[i] = p[i] >= cut ? exp_nonpos(p[i] - mx) : 0.0f;
    for (i = 0; i + 8 <= vocab; i += 8)
        for (int j = 0; j < 8; j++) part[j] += p[i + j];
    for (; i < vocab; i++) part[0] += p[i];
    double sum = 0;
    for (int j = 0; j < 8; j++) sum += part[j];
    float inv = (float)(1.0 / sum);
    int kept = 0;
    for (i = 0; i < vocab; i++) { p[i] *= inv; kept += p[i] > 0; }
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
    // The total first (robust to rounding in the normalisation, and to unnormalised residuals),
    // then a scan that stops at the drawn token.
    float part[8] = { 0 };
    int i = 0;
    for (; i + 8 <= vocab; i += 8)
        for (int j = 0; j < 8; j++) part[j] += p[i + j];
    double total = 0, acc = 0;
    for (; i < vocab; i++) total += p[i];
    for (int j = 0; j < 8; j++) total += part[j];
    double u = bs_rng_uniform(rng) * total;
    int last = -1;
    for (i = 0; i < vocab; i++) {
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
