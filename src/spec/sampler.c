// No FP traps are ever enabled here, and without this GCC keeps the exp and compare-select passes scalar
// (it will not if-convert or vectorise float compares and float->int conversions that could trap); the
// values are the same bits either way. Measured, temperature 0.7 over 151,936 logits: 0.88 -> 0.2 ms.
#pragma GCC optimize ("no-trapping-math")
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "spec/sampler.h"
#include "util/threadpool.h"

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

// Mass and count of the p[i] (>= 0) whose bits >> (shift + 8) equal `match` (any when match < 0), by
// the 8 bits above `shift`. Branch-free (the others land in a 257th key that is never read) over four
// interleaved histograms, since consecutive tokens often share a key and one histogram would chain
// every add through memory. Zeros count in key 0 of the exponents, where top_p is never reached.
static void mass_by_key(const float *p, int vocab, int shift, int64_t match, double mass[256], int count[256]) {
    double h[4][257] = { { 0 } };
    int c[4][257] = { { 0 } };
    const uint32_t want = match < 0 ? 0 : (uint32_t)match, any = match < 0;
    int i = 0;
#define KEY(b) ((any | ((b) >> (shift + 8) == want)) ? ((b) >> shift) & 0xff : 256)
    for (; i + 4 <= vocab; i += 4)
        for (int u = 0; u < 4; u++) {
            const uint32_t b = bs_f32_bits(p[i + u]), k = KEY(b);
            h[u][k] += p[i + u]; c[u][k]++;
        }
    for (; i < vocab; i++) {
        const uint32_t b = bs_f32_bits(p[i]), k = KEY(b);
        h[0][k] += p[i]; c[0][k]++;
    }
#undef KEY
    for (int k = 0; k < 256; k++) { mass[k] = (h[0][k] + h[1][k]) + (h[2][k] + h[3][k]); count[k] = c[0][k] + c[1][k] + c[2][k] + c[3][k]; }
}

// The smallest probability top-p keeps: sorted by probability, the shortest prefix whose mass reaches
// top_p ends at it. Found without sorting the vocabulary: positive floats order like their bit
// patterns, so the mass by the top 8 bits (sign and exponent) finds the key where the running mass from
// the top crosses top_p, and when that key holds many tokens the mass by the next 8 bits narrows it to
// ~1/256; only the tokens left are sorted. (A flat distribution puts most of the vocabulary in one
// exponent: sorting it was ~13 ms per row at 151,936 tokens.) If rounding leaves the total short of
// top_p, everything is kept.
static float top_p_threshold(const float *p, int vocab, double top_p, float *scratch) {
    double above = 0, mass[256];
    int count[256];
    int64_t prefix = -1;   // the bits >> shift fixed so far (none)
    int shift = 23;
    for (;; shift -= 8) {
        mass_by_key(p, vocab, shift, prefix, mass, count);
        int k = 255, lowest_nonempty = -1;
        for (; k >= 0; k--) {
            if (mass[k] > 0) lowest_nonempty = k;
            if (above + mass[k] >= top_p) break;
            above += mass[k];
        }
        if (k < 0) {
            if (shift == 23) return 0.0f;   // never reached: keep every positive token
            k = lowest_nonempty;            // rounding: the narrower histogram summed a little less
            above -= mass[k];
        }
        prefix = ((prefix < 0 ? 0 : prefix) << 8) | k;
        if (count[k] <= 4096 || shift == 15) break;
    }
    int m = 0;
    for (int i = 0; i < vocab; i++) if (p[i] > 0 && (int64_t)(bs_f32_bits(p[i]) >> shift) == prefix) scratch[m++] = p[i];
    qsort(scratch, m, sizeof(float), cmp_desc);
    float thr = m ? scratch[0] : 0.0f;
    double acc = above;
    for (int i = 0; i < m; i++) { thr = scratch[i]; acc += scratch[i]; if (acc >= top_p) break; }
    return thr;
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
        float thr = top_p_threshold(p, vocab, s->top_p, scratch);
        float keep[8] = { 0 };
        for (i = 0; i < vocab; i++) p[i] = p[i] < thr ? 0.0f : p[i];
        for (i = 0; i + 8 <= vocab; i += 8)
            for (int j = 0; j < 8; j++) keep[j] += p[i + j];
        for (; i < vocab; i++) keep[0] += p[i];
        sum = 0; kept = 0;
        for (int j = 0; j < 8; j++) sum += keep[j];
        const float fsum = (float)sum;
        for (i = 0; i < vocab; i++) { p[i] /= fsum; kept += p[i] > 0; }
    }
    free(own);
    return kept;
}

typedef struct { const bs_sampling *s; const float *logits; float *probs; int n, vocab; } rows_job;
static __thread float *row_scratch;
static __thread size_t row_scratch_n;
static void rows_task(void *ctx, int t, int nt) {
    rows_job *j = ctx;
    size_t need = 2 * (size_t)j->vocab;
    if (row_scratch_n < need) {
        free(row_scratch);
        row_scratch = malloc(sizeof(float) * need);
        row_scratch_n = row_scratch ? need : 0;
    }
    for (int r = t; r < j->n; r += nt)   // NULL scratch (out of memory): bs_sampling_probs allocates its own
        bs_sampling_probs(j->s, j->logits + (size_t)r * j->vocab, j->vocab, j->probs + (size_t)r * j->vocab, row_scratch);
}
void bs_sampling_probs_rows(const bs_sampling *s, const float *logits, int n, int vocab, float *probs) {
    rows_job j = { s, logits, probs, n, vocab };
    int tasks = n < bs_pool_size() ? n : bs_pool_size();
    if (tasks <= 1) { rows_task(&j, 0, 1); return; }
    bs_parallel_for(tasks, rows_task, &j);
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
