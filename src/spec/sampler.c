// No FP traps are ever enabled here, and without this GCC keeps the exp and compare-select passes scalar
// (it will not if-convert or vectorise float compares and float->int conversions that could trap); the
// values are the same bits either way. Measured, temperature 0.7 over 151,936 logits: 0.88 -> 0.2 ms.
#pragma GCC optimize ("no-trapping-math")
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spec/sampler.h"
#include "util/threadpool.h"
#include "backend/backend.h"
#include "util/thread_scratch.h"

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

// A row is processed in SAMPLE_CHUNKS fixed chunks (multiples of 8 tokens); their partial maxima, sums
// and histograms are combined in chunk order, so a row's distribution is the same bits whether the
// chunks ran on one thread or on the pool (they do when the caller is not itself a pool task: plain
// sampled decoding on a GPU waits for this one row).
#define SAMPLE_CHUNKS 16
enum { P_SCALE_MAX, P_EXP_SUM, P_NORM, P_HIST, P_CUT_SUM, P_DIV };
typedef struct {
    const float *logits; float *p; int vocab, pass;
    float inv_t, mx, cut, inv, thr, fsum;
    int shift; int64_t match;               // P_HIST: mass_by_key's arguments
    float cmax[SAMPLE_CHUNKS];
    double csum[SAMPLE_CHUNKS];
    int ckept[SAMPLE_CHUNKS];
    double hmass[SAMPLE_CHUNKS][256];
    int hcount[SAMPLE_CHUNKS][256];
} probs_job;

static void chunk_of(int vocab, int c, int *lo, int *hi) {
    int per = ((vocab + SAMPLE_CHUNKS - 1) / SAMPLE_CHUNKS + 7) & ~7;
    *lo = c * per < vocab ? c * per : vocab;
    *hi = *lo + per < vocab ? *lo + per : vocab;
}

// Written as simple, separate loops with 8 partial accumulators so that each one vectorises.
static void probs_chunk(probs_job *j, int c) {
    int lo, hi;
    chunk_of(j->vocab, c, &lo, &hi);
    float *p = j->p + lo, acc8[8] = { 0 };
    const int n = hi - lo;
    int i = 0, kept = 0;
    switch (j->pass) {
    case P_SCALE_MAX: {
        const float *l = j->logits + lo;
        for (i = 0; i < n; i++) p[i] = l[i] * j->inv_t;
        for (int u = 0; u < 8; u++) acc8[u] = -INFINITY;
        for (i = 0; i + 8 <= n; i += 8)
            for (int u = 0; u < 8; u++) acc8[u] = p[i + u] > acc8[u] ? p[i + u] : acc8[u];
        float mx = acc8[0];
        for (int u = 1; u < 8; u++) mx = acc8[u] > mx ? acc8[u] : mx;
        for (; i < n; i++) mx = p[i] > mx ? p[i] : mx;
        j->cmax[c] = mx;
        return;
    }
    case P_EXP_SUM:
        for (i = 0; i < n; i++) p[i] = p[i] >= j->cut ? exp_nonpos(p[i] - j->mx) : 0.0f;
        break;
    case P_CUT_SUM:
        for (i = 0; i < n; i++) p[i] = p[i] < j->thr ? 0.0f : p[i];
        break;
    case P_NORM:
        for (i = 0; i < n; i++) { p[i] *= j->inv; kept += p[i] > 0; }
        j->ckept[c] = kept;
        return;
    case P_DIV:
        for (i = 0; i < n; i++) { p[i] /= j->fsum; kept += p[i] > 0; }
        j->ckept[c] = kept;
        return;
    case P_HIST:
        mass_by_key(p, n, j->shift, j->match, j->hmass[c], j->hcount[c]);
        return;
    }
    // P_EXP_SUM, P_CUT_SUM: the chunk's sum, in double (float partials of ~1,200 terms each left the
    // normalisation ~1e-5 off at a 151,936-token vocabulary).
    double accd[8] = { 0 };
    for (i = 0; i + 8 <= n; i += 8)
        for (int u = 0; u < 8; u++) accd[u] += p[i + u];
    for (; i < n; i++) accd[0] += p[i];
    double sum = 0;
    for (int u = 0; u < 8; u++) sum += accd[u];
    j->csum[c] = sum;
}
static void probs_task(void *ctx, int t, int nt) {
    for (int c = t; c < SAMPLE_CHUNKS; c += nt) probs_chunk(ctx, c);
}
static void run_pass(probs_job *j, int pass, int parallel) {
    j->pass = pass;
    int nt = parallel ? bs_pool_size() : 1;
    if (nt > SAMPLE_CHUNKS) nt = SAMPLE_CHUNKS;
    if (nt > 1 && j->vocab >= 8192) bs_parallel_for(nt, probs_task, j);
    else probs_task(j, 0, 1);
}
static double chunk_sum(const probs_job *j) { double s = 0; for (int c = 0; c < SAMPLE_CHUNKS; c++) s += j->csum[c]; return s; }
static int chunk_kept(const probs_job *j) { int k = 0; for (int c = 0; c < SAMPLE_CHUNKS; c++) k += j->ckept[c]; return k; }

// The smallest probability top-p keeps: sorted by probability, the shortest prefix whose mass reaches
// top_p ends at it. Found without sorting the vocabulary: positive floats order like their bit
// patterns, so the mass by the top 8 bits (sign and exponent) finds the key where the running mass from
// the top crosses top_p, and when that key holds many tokens the mass by the next 8 bits narrows it to
// ~1/256; only the tokens left are sorted. (A flat distribution puts most of the vocabulary in one
// exponent: sorting it was ~13 ms per row at 151,936 tokens.) If rounding leaves the total short of
// top_p, everything is kept.
static float top_p_threshold(probs_job *j, double top_p, float *scratch, int parallel) {
    const float *p = j->p;
    double above = 0, mass[256];
    int count[256];
    int64_t prefix = -1;   // the bits >> shift fixed so far (none)
    int shift = 23;
    for (;; shift -= 8) {
        j->shift = shift; j->match = prefix;
        run_pass(j, P_HIST, parallel);
        for (int k = 0; k < 256; k++) {
            mass[k] = 0; count[k] = 0;
            for (int c = 0; c < SAMPLE_CHUNKS; c++) { mass[k] += j->hmass[c][k]; count[k] += j->hcount[c][k]; }
        }
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
    for (int i = 0; i < j->vocab; i++) if (p[i] > 0 && (int64_t)(bs_f32_bits(p[i]) >> shift) == prefix) scratch[m++] = p[i];
    qsort(scratch, m, sizeof(float), cmp_desc);
    float thr = m ? scratch[0] : 0.0f;
    double acc = above;
    for (int i = 0; i < m; i++) { thr = scratch[i]; acc += scratch[i]; if (acc >= top_p) break; }
    return thr;
}

static int probs_row(const bs_sampling *s, const float *logits, int vocab, float *p, float *scratch, int parallel) {
    if (bs_sampling_greedy(s)) {
        memset(p, 0, sizeof(float) * vocab);
        p[bs_argmax(logits, vocab)] = 1.0f;
        return 1;
    }
    float *own = NULL;
    if (!scratch && !(scratch = own = malloc(sizeof(float) * 2 * vocab))) return -1;   // the caller reports it
    probs_job j;
    j.logits = logits; j.p = p; j.vocab = vocab; j.inv_t = 1.0f / s->temperature;
    run_pass(&j, P_SCALE_MAX, parallel);
    j.mx = j.cmax[0];
    for (int c = 1; c < SAMPLE_CHUNKS; c++) j.mx = j.cmax[c] > j.mx ? j.cmax[c] : j.mx;
    j.cut = -INFINITY;
    if (s->top_k > 0 && s->top_k < vocab) j.cut = kth_largest(p, vocab, s->top_k, scratch);
    run_pass(&j, P_EXP_SUM, parallel);
    j.inv = (float)(1.0 / chunk_sum(&j));
    run_pass(&j, P_NORM, parallel);
    int kept = chunk_kept(&j);
    if (s->top_p > 0 && s->top_p < 1) {
        // Smallest set of the most probable tokens whose mass reaches top_p; tokens tied with the
        // last one admitted are kept too, so the result does not depend on index order.
        j.thr = top_p_threshold(&j, s->top_p, scratch, parallel);
        run_pass(&j, P_CUT_SUM, parallel);
        j.fsum = (float)chunk_sum(&j);
        run_pass(&j, P_DIV, parallel);
        kept = chunk_kept(&j);
    }
    free(own);
    return kept;
}

int bs_sampling_probs(const bs_sampling *s, const float *logits, int vocab, float *p, float *scratch) {
    return probs_row(s, logits, vocab, p, scratch, 1);
}

typedef struct { const bs_sampling *s; const float *logits; float *probs; int n, vocab, parallel, failed; } rows_job;
static __thread float *row_scratch;
static __thread size_t row_scratch_n;
static void rows_task(void *ctx, int t, int nt) {
    rows_job *j = ctx;
    size_t need = 2 * (size_t)j->vocab;
    if (row_scratch_n < need) {
        if (!row_scratch) bs_thread_scratch_register((void **)&row_scratch);
        free(row_scratch);
        row_scratch = malloc(sizeof(float) * need);
        row_scratch_n = row_scratch ? need : 0;
    }
    for (int r = t; r < j->n; r += nt)   // NULL scratch (out of memory): probs_row allocates its own
        if (probs_row(j->s, j->logits + (size_t)r * j->vocab, j->vocab, j->probs + (size_t)r * j->vocab, row_scratch, j->parallel) < 0)
            __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
}
// Rows on the pool, or (one row, or one thread) on the caller with each row's chunks on the pool.
int bs_sampling_probs_rows(const bs_sampling *s, const float *logits, int n, int vocab, float *probs) {
    int tasks = n < bs_pool_size() ? n : bs_pool_size();
    rows_job j = { s, logits, probs, n, vocab, tasks <= 1, 0 };
    if (tasks <= 1) rows_task(&j, 0, 1);
    else bs_parallel_for(tasks, rows_task, &j);
    return j.failed ? -1 : 0;
}

int32_t bs_sample_probs(const float *p, int vocab, bs_rng *rng) { return bs_sample_probs_u(p, vocab, bs_rng_uniform(rng)); }

double bs_sum_f32(const float *p, int n) {
    double part[8] = { 0 }, s = 0;
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) part[j] += p[i + j];
    for (; i < n; i++) s += p[i];
    for (int j = 0; j < 8; j++) s += part[j];
    return s;
}

#define DRAW_BLOCK 512
int32_t bs_sample_probs_u(const float *p, int vocab, double u01) {
    // The total first (robust to rounding in the normalisation, and to unnormalised residuals), then the
    // point u * total is found a block of 512 tokens at a time (block sums vectorise) and walked to inside
    // its block. Sums in double: in float, 19,000 terms per partial put the total ~1e-4 off at a
    // 151,936-token vocabulary, which moved flat rows' draws by dozens of tokens against an exact sum
    // (the device sampler's, cuda_sample.cu). Measured (bench --sampler, temperature 0.7, one row): the
    // token-by-token walk over the whole prefix was ~100 us of the ~300.
    const double u = u01 * bs_sum_f32(p, vocab);
    double acc = 0;
    for (int b0 = 0; b0 < vocab; b0 += DRAW_BLOCK) {
        const int b1 = b0 + DRAW_BLOCK < vocab ? b0 + DRAW_BLOCK : vocab;
        const double bs = bs_sum_f32(p + b0, b1 - b0);
        if (!(u < acc + bs)) { acc += bs; continue; }
        for (int i = b0; i < b1; i++) {   // the point is in this block, to rounding
            if (p[i] <= 0) continue;
            acc += p[i];
            if (u < acc) return i;
        }
    }
    for (int i = vocab - 1; i >= 0; i--) if (p[i] > 0) return i;   // rounding left u past the end
    return 0;
}

int32_t bs_sample_logits(const bs_sampling *s, const float *logits, int vocab, float *probs, float *scratch, bs_rng *rng) {
    if (bs_sampling_greedy(s)) return bs_argmax(logits, vocab);
    if (bs_sampling_probs(s, logits, vocab, probs, scratch) < 0) return -1;
    return bs_sample_probs(probs, vocab, rng);
}

void bs_sample_rows(bs_backend *be, const bs_sampling *s, float *probs, const float *logits, int n, int vocab,
                    const double *u, int32_t *ids) {
    if (be->sample_rows &&
        be->sample_rows(be, probs, logits, n, vocab, bs_sampling_greedy(s) ? 0.0f : s->temperature, s->top_k, s->top_p, u, ids) == 0)
        return;
    if (bs_sampling_probs_rows(s, logits, n, vocab, probs)) {
        bs_backend_fail(be, "sampler: out of memory for %zu bytes of scratch per row", sizeof(float) * 2 * (size_t)vocab);
        return;
    }
    if (ids)
        for (int i = 0; i < n; i++) ids[i] = bs_sample_probs_u(probs + (size_t)i * vocab, vocab, u[i]);
}

void bs_sample_rows_to(bs_backend *be, const bs_sampling *s, float *probs, const float *logits, int n, int vocab,
                       const double *u, int32_t *ids_be) {
    if (be->sample_rows_to &&
        be->sample_rows_to(be, probs, logits, n, vocab, bs_sampling_greedy(s) ? 0.0f : s->temperature, s->top_k, s->top_p, u, ids_be) == 0)
        return;
    bs_sample_rows(be, s, probs, logits, n, vocab, u, ids_be);
}
