// Attention over the KV cache: tasks are (kv head, block of query rows); each task handles the whole GQA
// group of query heads that read that kv head for its rows, so every K and V row is loaded once per task
// and reused from L1 for all its queries. Passes: scores (q.k * scale) into per-thread scratch, softmax
// (max-subtracted, fp32) per query, then o = sum_j p_j v_j, then o *= 1/sum.
// Inner loops are AVX2 where the CPU has it (scalar path: plain C).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_simd_avx2.h"
#include "util/threadpool.h"

// Blocking (why): K and V rows of one kv head are 4 KiB apart in the cache layout ([pos][kv head][hd]), so
// every row is on a new page, where the hardware prefetchers stop: without help each row is a demand miss.
// So (1) each task owns one kv head and a block of up to QB query rows, and walks the keys in chunks of JB
// rows: a K/V chunk (16 KiB each) is brought into L1 once and used by all the task's queries (the earlier
// (query row, kv head) tasks re-read the whole K/V of the head once per query row); (2) the first query
// of a chunk prefetches the rows PD ahead.
// Row invariance: each query's scores are computed one dot product at a time with the same arithmetic,
// its softmax is a per-query pass, and each output element accumulates p_j v_j over j in order in one
// chain (carried across key chunks through the output buffer: fp32 store/reload is exact), then one
// multiply by 1/sum. So a query row's result does not depend on which other rows share the call.
#define QB 8
#define JB 32
#define PD 8

// s[g * ss + j - soff] = scale * q_g . k_j for g < G, j in [lo, hi)
typedef void (*score_fn)(float *s, size_t ss, int soff, const float *q, int G, const float *k, size_t kstride, int lo,
                         int hi, int hd, float scale, int pf);
// one query: r[0..len) <- exp(r - max) in place; returns 1/sum
typedef float (*softmax_fn)(float *r, int len);
// o_g[d] (+)= sum_{j in [lo, hi)} p[g * ps + j - poff] v_j[d]  (first: start from 0, else continue from o)
typedef void (*accum_fn)(float *o, const float *p, size_t ps, int poff, int G, const float *v, size_t vstride, int lo,
                         int hi, int hd, int first, int pf);

static void score_c(float *s, size_t ss, int soff, const float *q, int G, const float *k, size_t ks, int lo, int hi, int hd,
                    float scale, int pf) {
    for (int j = lo; j < hi; j++) {
        const float *kj = k + (size_t)j * ks;
        for (int g = 0; g < G; g++) {
            const float *qg = q + (size_t)g * hd;
            float a = 0;
            for (int d = 0; d < hd; d++) a += qg[d] * kj[d];
            s[(size_t)g * ss + j - soff] = a * scale;
        }
    }
}
static float softmax_c(float *r, int len) {
    float mx = -INFINITY, sum = 0;
    for (int j = 0; j < len; j++) if (r[j] > mx) mx = r[j];
    for (int j = 0; j < len; j++) { r[j] = expf(r[j] - mx); sum += r[j]; }
    return 1.0f / sum;
}
static void accum_c(float *o, const float *p, size_t ps, int poff, int G, const float *v, size_t vs, int lo, int hi, int hd,
                    int first, int pf) {
    for (int g = 0; g < G; g++) {
        float *og = o + (size_t)g * hd;
        if (first) memset(og, 0, sizeof(float) * hd);
        for (int j = lo; j < hi; j++) {
            const float *vj = v + (size_t)j * vs;
            float pj = p[(size_t)g * ps + j - poff];
            for (int d = 0; d < hd; d++) og[d] += pj * vj[d];
        }
    }
}

AI_AVX2 void prefetch_row(const float *r, int hd) {
    for (int d = 0; d < hd; d += 16) _mm_prefetch((const char *)(r + d), _MM_HINT_T0);
}

TGT_AVX2 static void score_avx2(float *s, size_t ss, int soff, const float *q, int G, const float *k, size_t ks, int lo, int hi,
                                int hd, float scale, int pf) {
    int hd8 = hd / 8 * 8, j = lo;
    // Two keys x two heads per pass where hd is a multiple of 16 (each q load feeds two FMAs, each k load
    // two): every (head, key) dot product keeps exactly the arithmetic of the one-key loop below (the same
    // a/b chains over the same d order, the same horizontal sum), so pairing keys changes no result.
    if (hd % 16 == 0 && G % 2 == 0)
        for (; j + 2 <= hi; j += 2) {
            const float *kj = k + (size_t)j * ks, *kk = kj + ks;
            if (pf) { prefetch_row(kj + PD * ks, hd); prefetch_row(kk + PD * ks, hd); }
            for (int g = 0; g < G; g += 2) {
                const float *q0 = q + (size_t)g * hd, *q1 = q0 + hd;
                __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, c0 = a0, c1 = a0, e0 = a0, e1 = a0;
                for (int d = 0; d < hd; d += 16) {
                    __m256 x0 = _mm256_loadu_ps(q0 + d), x1 = _mm256_loadu_ps(q0 + d + 8);
                    __m256 y0 = _mm256_loadu_ps(q1 + d), y1 = _mm256_loadu_ps(q1 + d + 8);
                    __m256 k0 = _mm256_loadu_ps(kj + d), k1 = _mm256_loadu_ps(kj + d + 8);
                    a0 = _mm256_fmadd_ps(x0, k0, a0); b0 = _mm256_fmadd_ps(x1, k1, b0);
                    a1 = _mm256_fmadd_ps(y0, k0, a1); b1 = _mm256_fmadd_ps(y1, k1, b1);
                    k0 = _mm256_loadu_ps(kk + d); k1 = _mm256_loadu_ps(kk + d + 8);
                    c0 = _mm256_fmadd_ps(x0, k0, c0); e0 = _mm256_fmadd_ps(x1, k1, e0);
                    c1 = _mm256_fmadd_ps(y0, k0, c1); e1 = _mm256_fmadd_ps(y1, k1, e1);
                }
                s[(size_t)g * ss + j - soff] = bs_hsum8(_mm256_add_ps(a0, b0)) * scale;
                s[(size_t)(g + 1) * ss + j - soff] = bs_hsum8(_mm256_add_ps(a1, b1)) * scale;
                s[(size_t)g * ss + j + 1 - soff] = bs_hsum8(_mm256_add_ps(c0, e0)) * scale;
                s[(size_t)(g + 1) * ss + j + 1 - soff] = bs_hsum8(_mm256_add_ps(c1, e1)) * scale;
            }
        }
    for (; j < hi; j++) {
        const float *kj = k + (size_t)j * ks;
        if (pf) prefetch_row(kj + PD * ks, hd);
        int g = 0;
        for (; g + 2 <= G; g += 2) {   // two heads per pass: each k vector load feeds two FMAs
            const float *q0 = q + (size_t)g * hd, *q1 = q0 + hd;
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
            int d = 0;
            for (; d + 16 <= hd8; d += 16) {
                __m256 k0 = _mm256_loadu_ps(kj + d), k1 = _mm256_loadu_ps(kj + d + 8);
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d), k0, a0);
                b0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d + 8), k1, b0);
                a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q1 + d), k0, a1);
                b1 = _mm256_fmadd_ps(_mm256_loadu_ps(q1 + d + 8), k1, b1);
            }
            for (; d < hd8; d += 8) {
                __m256 k0 = _mm256_loadu_ps(kj + d);
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d), k0, a0);
                a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q1 + d), k0, a1);
            }
            float s0 = bs_hsum8(_mm256_add_ps(a0, b0)), s1 = bs_hsum8(_mm256_add_ps(a1, b1));
            for (; d < hd; d++) { s0 += q0[d] * kj[d]; s1 += q1[d] * kj[d]; }
            s[(size_t)g * ss + j - soff] = s0 * scale;
            s[(size_t)(g + 1) * ss + j - soff] = s1 * scale;
        }
        for (; g < G; g++) {
            const float *q0 = q + (size_t)g * hd;
            __m256 a0 = _mm256_setzero_ps();
            int d = 0;
            for (; d < hd8; d += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d), _mm256_loadu_ps(kj + d), a0);
            float s0 = bs_hsum8(a0);
            for (; d < hd; d++) s0 += q0[d] * kj[d];
            s[(size_t)g * ss + j - soff] = s0 * scale;
        }
    }
}
TGT_AVX2 static float softmax_avx2(float *r, int len) {
    int l8 = len / 8 * 8;
    float mx = -INFINITY;
    __m256 m = _mm256_set1_ps(-INFINITY);
    for (int j = 0; j < l8; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(r + j));
    if (l8) mx = bs_hmax8(m);
    for (int j = l8; j < len; j++) if (r[j] > mx) mx = r[j];
    __m256 vm = _mm256_set1_ps(mx), acc = _mm256_setzero_ps();
    for (int j = 0; j < l8; j += 8) {
        __m256 e = bs_exp8(_mm256_sub_ps(_mm256_loadu_ps(r + j), vm));
        _mm256_storeu_ps(r + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    float sum = bs_hsum8(acc);
    for (int j = l8; j < len; j++) { r[j] = expf(r[j] - mx); sum += r[j]; }
    return 1.0f / sum;
}
TGT_AVX2 static void accum_avx2(float *o, const float *p, size_t ps, int poff, int G, const float *v, size_t vs, int lo, int hi,
                                int hd, int first, int pf) {
    int hd8 = hd / 8 * 8;
    for (int g = 0; g < G; g++) {
        float *og = o + (size_t)g * hd;
        const float *pg = p + (size_t)g * ps - poff;
        for (int d0 = 0; d0 < hd8; d0 += 64) {           // 64 output floats in 8 registers per pass
            int w = hd8 - d0 < 64 ? (hd8 - d0) / 8 : 8;
            __m256 a[8];
            for (int i = 0; i < 8; i++) a[i] = first || i >= w ? _mm256_setzero_ps() : _mm256_loadu_ps(og + d0 + 8 * i);
            if (w == 8) {
                int pfr = pf && g == 0 && d0 == 0;   // first pass: fetch rows PD ahead, one row per row consumed
                for (int j = lo; j < hi; j++) {
                    const float *vj = v + (size_t)j * vs + d0;
                    if (pfr) prefetch_row(v + (size_t)(j + PD) * vs, hd);
                    __m256 pj = _mm256_set1_ps(pg[j]);
                    for (int i = 0; i < 8; i++) a[i] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * i), a[i]);
                }
            } else {
                for (int j = lo; j < hi; j++) {
                    const float *vj = v + (size_t)j * vs + d0;
                    __m256 pj = _mm256_set1_ps(pg[j]);
                    for (int i = 0; i < w; i++) a[i] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * i), a[i]);
                }
            }
            for (int i = 0; i < w; i++) _mm256_storeu_ps(og + d0 + 8 * i, a[i]);
        }
        for (int d = hd8; d < hd; d++) {
            float a = first ? 0 : og[d];
            for (int j = lo; j < hi; j++) a += pg[j] * v[(size_t)j * vs + d];
            og[d] = a;
        }
    }
}

typedef struct {
    float *out; const float *q, *k, *v;
    int n_q, n_heads, n_kv, hd, n_keys, q_pos0, causal, window;
    score_fn score; softmax_fn softmax; accum_fn accum;
} attn_job;

static __thread float *scratch, *chunk;
static __thread size_t scratch_cap, chunk_cap;

static float *chunk_buf(int hd) {
    size_t need = (size_t)JB * hd;
    if (need > chunk_cap) {
        free(chunk);
        if (posix_memalign((void **)&chunk, 64, sizeof(float) * need)) abort();
        chunk_cap = need;
    }
    return chunk;
}
static void _mm_prefetch_rows(const float *r, int hd) {
    for (int d = 0; d < hd; d += 16) __builtin_prefetch(r + d);
}

// Task t: kv head t % n_kv, query rows [QB * (t / n_kv), +QB).
static void attn_task(void *p, int t, int nt) {
    attn_job *j = p;
    int kh = t % j->n_kv, i0 = t / j->n_kv * QB, i1 = i0 + QB < j->n_q ? i0 + QB : j->n_q;
    int G = j->n_heads / j->n_kv, hd = j->hd, nr = i1 - i0;
    int lo[QB], hi[QB], jlo = j->n_keys, jhi = 0;
    for (int i = i0; i < i1; i++) {
        int h = j->causal ? j->q_pos0 + i + 1 : j->n_keys;
        if (h > j->n_keys) h = j->n_keys;
        int l = j->window > 0 && h - j->window > 0 ? h - j->window : 0;
        lo[i - i0] = l; hi[i - i0] = h;
        if (h > l) { if (l < jlo) jlo = l; if (h > jhi) jhi = h; }
        else   // no visible key: zeros (the reference's sum over an empty set)
            memset(j->out + ((size_t)i * j->n_heads + (size_t)kh * G) * hd, 0, sizeof(float) * G * hd);
    }
    if (jhi <= jlo) return;
    size_t L = (size_t)(jhi - jlo), need = (size_t)nr * G * (L + 1);
    if (need > scratch_cap) {
        free(scratch);
        scratch_cap = need * 2;
        scratch = malloc(sizeof(float) * scratch_cap);
        if (!scratch) abort();
    }
    size_t kvs = (size_t)j->n_kv * hd;
    const float *kb = j->k + (size_t)kh * hd, *vb = j->v + (size_t)kh * hd;
    float scale = 1.0f / sqrtf((float)hd);
    float *sc = scratch, *inv = scratch + (size_t)nr * G * L;
    // Key chunk by key chunk. With several query rows the chunk's K (then V) rows of this head are first
    // copied into a contiguous L1 buffer (one pass over 32 pages, prefetching the next chunk), so the
    // queries' passes do not miss the L1 TLB on every 4 KiB-strided row. With one query row the rows are
    // read in place (prefetched ahead). Same values either way, so the same results.
    float *kv_buf = chunk_buf(hd);
    for (int pass = 0; pass < 2; pass++) {   // 0: scores, 1: o = sum_j p_j v_j
        const float *src = pass ? vb : kb;
        if (pass) {
            for (int r = 0; r < nr; r++)
                for (int g = 0; g < G && hi[r] > lo[r]; g++)
                    inv[r * G + g] = j->softmax(sc + ((size_t)r * G + g) * L + lo[r] - jlo, hi[r] - lo[r]);
        }
        for (int c0 = jlo; c0 < jhi; c0 += JB) {
            int c1 = c0 + JB < jhi ? c0 + JB : jhi, copy = nr > 1;
            const float *base = src;
            size_t stride = kvs;
            int off = 0;   // rows are indexed j - off in base
            if (copy) {
                for (int jj = c0; jj < c1; jj++) {
                    const float *row = src + (size_t)jj * kvs;
                    if (jj + JB < jhi) _mm_prefetch_rows(row + JB * kvs, hd);
                    memcpy(kv_buf + (size_t)(jj - c0) * hd, row, sizeof(float) * hd);
                }
                base = kv_buf; stride = hd; off = c0;
            }
            int pf = !copy;
            for (int r = 0; r < nr; r++) {
                int a = c0 > lo[r] ? c0 : lo[r], b = c1 < hi[r] ? c1 : hi[r];
                if (a >= b) continue;
                if (!pass) {
                    const float *qg = j->q + ((size_t)(i0 + r) * j->n_heads + (size_t)kh * G) * hd;
                    j->score(sc + (size_t)r * G * L, L, jlo - off, qg, G, base, stride, a - off, b - off, hd, scale,
                             pf && b + PD <= jhi);
                } else {
                    float *o = j->out + ((size_t)(i0 + r) * j->n_heads + (size_t)kh * G) * hd;
                    j->accum(o, sc + (size_t)r * G * L, L, jlo - off, G, base, stride, a - off, b - off, hd, a == lo[r],
                             pf && b + PD <= jhi);
                }
                pf = 0;
            }
        }
    }
    for (int r = 0; r < nr; r++) {
        if (hi[r] <= lo[r]) continue;
        float *o = j->out + ((size_t)(i0 + r) * j->n_heads + (size_t)kh * G) * hd;
        for (int g = 0; g < G; g++)
            for (int d = 0; d < hd; d++) o[(size_t)g * hd + d] *= inv[r * G + g];
    }
}

void bs_cpu_attention_fast(bs_backend *be, float *out, const float *q, const float *k, const float *v,
                           int n_q, int n_heads, int n_kv, int hd, int n_keys, int q_pos0, int causal, int window) {
    attn_job j = { out, q, k, v, n_q, n_heads, n_kv, hd, n_keys, q_pos0, causal, window, NULL, NULL, NULL };
    int vec = be->impl != (void *)bs_mm_scalar && bs_cpu_path_supported(BS_CPU_AVX2);
    j.score = vec ? score_avx2 : score_c;
    j.softmax = vec ? softmax_avx2 : softmax_c;
    j.accum = vec ? accum_avx2 : accum_c;
    int nt = n_kv * ((n_q + QB - 1) / QB);
    if ((double)n_q * n_heads * hd * (n_keys + 1) < 32768) for (int t = 0; t < nt; t++) attn_task(&j, t, nt);
    else bs_parallel_for(nt, attn_task, &j);
}
