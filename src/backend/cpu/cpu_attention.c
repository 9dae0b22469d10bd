// Attention over the KV cache: tasks are (kv head, block of query rows); each task handles the whole GQA
// group of query heads that read that kv head for its rows, so every K and V row is loaded once per task
// and reused from L1 for all its queries. Passes: scores (q.k * scale) into per-thread scratch, softmax
// (max-subtracted, fp32) per query, then o = sum_j p_j v_j, then o *= 1/sum.
// Inner loops are AVX2 where the CPU has it (scalar path: plain C); the avx512 paths run the same
// arithmetic on zmm registers (bit for bit the AVX2 results: see "The same arithmetic on AVX-512" below).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_simd_avx2.h"
#include "util/threadpool.h"
#include "util/thread_scratch.h"
#include "util/tuning.h"

// Blocking (why): K and V rows of one kv head are 4 KiB apart in the cache layout ([pos][kv head][hd]), so
// every row is on a new page, where the hardware prefetchers stop: without help each row is a demand miss.
// So (1) each task owns one kv head and a block of up to QB query rows, and walks the keys in chunks of JB
// rows: a K/V chunk (16 KiB each) is brought into L1 once and used by all the task's queries (the earlier
// (query row, kv head) tasks re-read the whole K/V of the head once per query row; QB = 16 so a 16-row
// verify reads the cache once, measured 1.1-1.2x faster than QB = 8 at 16 rows); (2) the first query
// of a chunk prefetches the rows PD ahead. (Without the chunk copy, reading the rows in place on huge
// pages, 16 rows measured ~10% slower; at 2-4 rows the copy costs more than it saves: COPY_MIN_ROWS.)
// Row invariance: each query's scores are computed one dot product at a time with the same arithmetic,
// its softmax is a per-query pass, and each output element accumulates p_j v_j over j in order in one
// chain (carried across key chunks through the output buffer: fp32 store/reload is exact), then one
// multiply by 1/sum. So a query row's result does not depend on which other rows share the call.
#define QB 16
#define JB 32
#define PD 8
// Tasks of at least this many query rows copy each K/V chunk into the L1 buffer; fewer read the rows in
// place. Measured (`blockspec bench --ops`, attention rows: 28 layers, 512 keys; 2 threads, 3 runs each,
// alternating with a build copying from 2 rows): 2 rows 7.3-8.8 ms in place vs 9.0-10.9 copied, 4 rows
// 11.9-12.7 vs 11.5-14.0 (equal within noise).
#define COPY_MIN_ROWS 5

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

// Scores: each (query vector, key) dot product keeps 8 lane chains over d (lane l sums d = l mod 8, one FMA
// per 8 d in order), reduced by one fixed tree ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)), then the scalar d tail,
// then * scale. Blocks of 2 query vectors x 4 keys (8 chains; per 8 d: 4 k loads + 2 q loads for 8 FMAs,
// the 8 reductions share 6 hadds), 1 x 4, 2 x 1 and 1 x 1 all compute exactly that, so a score never
// depends on its block (row invariance).
// Keeps a loaded vector in a register (GCC otherwise folds the load into both FMAs that use it: twice the loads).
#define INREG(v) __asm__("" : "+x"(v))
AI_AVX2 __m128 red4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {   // [tree(a0), tree(a1), tree(a2), tree(a3)]
    __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}
AI_AVX2 float red1(__m256 a) { return _mm_cvtss_f32(red4(a, a, a, a)); }
AI_AVX2 float dtail(float s, const float *q, const float *k, int d0, int hd) {
    for (int d = d0; d < hd; d++) s = fmaf(q[d], k[d], s);
    return s;
}

TGT_AVX2 static void score_avx2(float *s, size_t ss, int soff, const float *q, int G, const float *k, size_t ks, int lo, int hi,
                                int hd, float scale, int pf) {
    int hd8 = hd / 8 * 8, j = lo;
    __m128 vs = _mm_set1_ps(scale);
    for (; j + 4 <= hi; j += 4) {
        const float *k0 = k + (size_t)j * ks, *k1 = k0 + ks, *k2 = k1 + ks, *k3 = k2 + ks;
        if (pf) for (int i = 0; i < 4; i++) prefetch_row(k0 + (PD + i) * ks, hd);
        int g = 0;
        for (; g + 2 <= G; g += 2) {
            const float *q0 = q + (size_t)g * hd, *q1 = q0 + hd;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
            for (int d = 0; d < hd8; d += 8) {
                __m256 x0 = _mm256_loadu_ps(q0 + d), x1 = _mm256_loadu_ps(q1 + d), kv;
                kv = _mm256_loadu_ps(k0 + d); INREG(kv); a0 = _mm256_fmadd_ps(x0, kv, a0); b0 = _mm256_fmadd_ps(x1, kv, b0);
                kv = _mm256_loadu_ps(k1 + d); INREG(kv); a1 = _mm256_fmadd_ps(x0, kv, a1); b1 = _mm256_fmadd_ps(x1, kv, b1);
                kv = _mm256_loadu_ps(k2 + d); INREG(kv); a2 = _mm256_fmadd_ps(x0, kv, a2); b2 = _mm256_fmadd_ps(x1, kv, b2);
                kv = _mm256_loadu_ps(k3 + d); INREG(kv); a3 = _mm256_fmadd_ps(x0, kv, a3); b3 = _mm256_fmadd_ps(x1, kv, b3);
            }
            __m128 ra = red4(a0, a1, a2, a3), rb = red4(b0, b1, b2, b3);
            float *s0 = s + (size_t)g * ss + j - soff, *s1 = s0 + ss;
            if (hd8 == hd) {
                _mm_storeu_ps(s0, _mm_mul_ps(ra, vs));
                _mm_storeu_ps(s1, _mm_mul_ps(rb, vs));
            } else {
                float ta[4], tb[4];
                _mm_storeu_ps(ta, ra); _mm_storeu_ps(tb, rb);
                for (int i = 0; i < 4; i++) {
                    s0[i] = dtail(ta[i], q0, k0 + i * ks, hd8, hd) * scale;
                    s1[i] = dtail(tb[i], q1, k0 + i * ks, hd8, hd) * scale;
                }
            }
        }
        for (; g < G; g++) {
            const float *q0 = q + (size_t)g * hd;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int d = 0; d < hd8; d += 8) {
                __m256 x0 = _mm256_loadu_ps(q0 + d);
                a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(k0 + d), a0);
                a1 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(k1 + d), a1);
                a2 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(k2 + d), a2);
                a3 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(k3 + d), a3);
            }
            float ta[4];
            _mm_storeu_ps(ta, red4(a0, a1, a2, a3));
            float *s0 = s + (size_t)g * ss + j - soff;
            for (int i = 0; i < 4; i++) s0[i] = dtail(ta[i], q0, k0 + i * ks, hd8, hd) * scale;
        }
    }
    for (; j < hi; j++) {
        const float *kj = k + (size_t)j * ks;
        if (pf) prefetch_row(kj + PD * ks, hd);
        for (int g = 0; g < G; g++) {
            const float *q0 = q + (size_t)g * hd;
            __m256 a0 = _mm256_setzero_ps();
            for (int d = 0; d < hd8; d += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d), _mm256_loadu_ps(kj + d), a0);
            s[(size_t)g * ss + j - soff] = dtail(red1(a0), q0, kj, hd8, hd) * scale;
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
// o_g[d] += p_gj v_j[d]: one chain per output element over j in order (fp32 FMA), whatever the blocking.
// Blocks of 2 query vectors x 32 d (8 chains; per key 4 v loads + 2 broadcasts for 8 FMAs), then 1 x 32,
// then 8-wide and scalar d tails.
// Head dims [dstart, hd) (dstart a multiple of 32; the AVX-512 kernel below does [0, dstart)).
AI_AVX2 void accum_avx2_from(float *o, const float *p, size_t ps, int poff, int G, const float *v, size_t vs, int lo, int hi,
                             int hd, int first, int pf, int dstart) {
    int hd32 = hd / 32 * 32, hd8 = hd / 8 * 8;
    int g = 0;
    for (; g + 2 <= G; g += 2) {
        float *o0 = o + (size_t)g * hd, *o1 = o0 + hd;
        const float *p0 = p + (size_t)g * ps - poff, *p1 = p0 + ps;
        for (int d0 = dstart; d0 < hd32; d0 += 32) {
            __m256 a0, a1, a2, a3, b0, b1, b2, b3;
            if (first) { a0 = _mm256_setzero_ps(); a1 = a0; a2 = a0; a3 = a0; b0 = a0; b1 = a0; b2 = a0; b3 = a0; }
            else {
                a0 = _mm256_loadu_ps(o0 + d0); a1 = _mm256_loadu_ps(o0 + d0 + 8); a2 = _mm256_loadu_ps(o0 + d0 + 16); a3 = _mm256_loadu_ps(o0 + d0 + 24);
                b0 = _mm256_loadu_ps(o1 + d0); b1 = _mm256_loadu_ps(o1 + d0 + 8); b2 = _mm256_loadu_ps(o1 + d0 + 16); b3 = _mm256_loadu_ps(o1 + d0 + 24);
            }
            int pfr = pf && g == 0 && d0 == dstart;   // first pass: fetch rows PD ahead, one row per row consumed
            for (int j = lo; j < hi; j++) {
                const float *vj = v + (size_t)j * vs + d0;
                if (pfr) prefetch_row(v + (size_t)(j + PD) * vs, hd);
                __m256 x0 = _mm256_broadcast_ss(p0 + j), x1 = _mm256_broadcast_ss(p1 + j), w;
                w = _mm256_loadu_ps(vj); INREG(w); a0 = _mm256_fmadd_ps(x0, w, a0); b0 = _mm256_fmadd_ps(x1, w, b0);
                w = _mm256_loadu_ps(vj + 8); INREG(w); a1 = _mm256_fmadd_ps(x0, w, a1); b1 = _mm256_fmadd_ps(x1, w, b1);
                w = _mm256_loadu_ps(vj + 16); INREG(w); a2 = _mm256_fmadd_ps(x0, w, a2); b2 = _mm256_fmadd_ps(x1, w, b2);
                w = _mm256_loadu_ps(vj + 24); INREG(w); a3 = _mm256_fmadd_ps(x0, w, a3); b3 = _mm256_fmadd_ps(x1, w, b3);
            }
            _mm256_storeu_ps(o0 + d0, a0); _mm256_storeu_ps(o0 + d0 + 8, a1); _mm256_storeu_ps(o0 + d0 + 16, a2); _mm256_storeu_ps(o0 + d0 + 24, a3);
            _mm256_storeu_ps(o1 + d0, b0); _mm256_storeu_ps(o1 + d0 + 8, b1); _mm256_storeu_ps(o1 + d0 + 16, b2); _mm256_storeu_ps(o1 + d0 + 24, b3);
        }
    }
    for (; g < G; g++) {
        float *o0 = o + (size_t)g * hd;
        const float *p0 = p + (size_t)g * ps - poff;
        for (int d0 = dstart; d0 < hd32; d0 += 32) {
            __m256 a0, a1, a2, a3;
            if (first) { a0 = _mm256_setzero_ps(); a1 = a0; a2 = a0; a3 = a0; }
            else { a0 = _mm256_loadu_ps(o0 + d0); a1 = _mm256_loadu_ps(o0 + d0 + 8); a2 = _mm256_loadu_ps(o0 + d0 + 16); a3 = _mm256_loadu_ps(o0 + d0 + 24); }
            int pfr = pf && g == 0 && d0 == dstart;
            for (int j = lo; j < hi; j++) {
                const float *vj = v + (size_t)j * vs + d0;
                if (pfr) prefetch_row(v + (size_t)(j + PD) * vs, hd);
                __m256 x0 = _mm256_broadcast_ss(p0 + j);
                a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(vj), a0);
                a1 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(vj + 8), a1);
                a2 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(vj + 16), a2);
                a3 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(vj + 24), a3);
            }
            _mm256_storeu_ps(o0 + d0, a0); _mm256_storeu_ps(o0 + d0 + 8, a1); _mm256_storeu_ps(o0 + d0 + 16, a2); _mm256_storeu_ps(o0 + d0 + 24, a3);
        }
    }
    for (g = 0; g < G; g++) {   // d tails (hd not a multiple of 32): same per-element chains
        float *og = o + (size_t)g * hd;
        const float *pg = p + (size_t)g * ps - poff;
        for (int d0 = hd32; d0 < hd8; d0 += 8) {
            __m256 a = first ? _mm256_setzero_ps() : _mm256_loadu_ps(og + d0);
            for (int j = lo; j < hi; j++) a = _mm256_fmadd_ps(_mm256_broadcast_ss(pg + j), _mm256_loadu_ps(v + (size_t)j * vs + d0), a);
            _mm256_storeu_ps(og + d0, a);
        }
        for (int d = hd8; d < hd; d++) {
            float a = first ? 0 : og[d];
            for (int j = lo; j < hi; j++) a = fmaf(pg[j], v[(size_t)j * vs + d], a);
            og[d] = a;
        }
    }
}

TGT_AVX2 static void accum_avx2(float *o, const float *p, size_t ps, int poff, int G, const float *v, size_t vs, int lo, int hi,
                                int hd, int first, int pf) {
    accum_avx2_from(o, p, ps, poff, G, v, vs, lo, hi, hd, first, pf, 0);
}

// ---- The same arithmetic on AVX-512 registers (the avx512 paths), bit for bit the AVX2 kernels' ----
// accum: each output element is one lane of one FMA chain over the keys in order, whatever the register
// width, so zmm blocks of 2 query vectors x 64 head dims (8 chains of 16 lanes) compute the AVX2 results;
// the head dims past the last 64 go to the AVX2 code.
// score: a zmm holds [key a, 8 dims | key b, the same 8 dims] against the query's 8 dims in both halves,
// so lane l < 8 is key a's AVX2 lane-l chain and lane 8 + l key b's; each key's 8 lanes are then summed by
// the same red4 tree and d tail. Blocks of 2 query vectors x 8 keys (8 zmm chains); keys past the last 8
// and single query vectors go to the AVX2 code.
#define TGT512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define AI512 static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define INREG512(v) __asm__("" : "+v"(v))
AI512 __m256 lo8(__m512 v) { return _mm512_castps512_ps256(v); }
AI512 __m256 hi8(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }
AI512 __m512 pair8(const float *a, const float *b) {   // [a[0..8) | b[0..8)]
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(a)), _mm256_loadu_ps(b), 1);
}

TGT512 static void accum_avx512(float *o, const float *p, size_t ps, int poff, int G, const float *v, size_t vs, int lo, int hi,
                                int hd, int first, int pf) {
    const int hd64 = hd / 64 * 64;
    int g = 0;
    for (; g + 4 <= G; g += 4) {   // 4 query vectors x 64 head dims: 16 chains
        float *ov[4] = { o + (size_t)g * hd, o + (size_t)(g + 1) * hd, o + (size_t)(g + 2) * hd, o + (size_t)(g + 3) * hd };
        const float *pv[4] = { p + (size_t)g * ps - poff, p + (size_t)(g + 1) * ps - poff, p + (size_t)(g + 2) * ps - poff, p + (size_t)(g + 3) * ps - poff };
        for (int d0 = 0; d0 < hd64; d0 += 64) {
            __m512 acc[4][4];
            for (int u = 0; u < 4; u++)
                for (int c = 0; c < 4; c++) acc[u][c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(ov[u] + d0 + 16 * c);
            __m512 a0 = acc[0][0], a1 = acc[0][1], a2 = acc[0][2], a3 = acc[0][3], b0 = acc[1][0], b1 = acc[1][1], b2 = acc[1][2], b3 = acc[1][3];
            __m512 c0 = acc[2][0], c1 = acc[2][1], c2 = acc[2][2], c3 = acc[2][3], e0 = acc[3][0], e1 = acc[3][1], e2 = acc[3][2], e3 = acc[3][3];
            const int pfr = pf && g == 0 && d0 == 0;
            for (int j = lo; j < hi; j++) {
                const float *vj = v + (size_t)j * vs + d0;
                if (pfr) prefetch_row(v + (size_t)(j + PD) * vs, hd);
                const __m512 x0 = _mm512_set1_ps(pv[0][j]), x1 = _mm512_set1_ps(pv[1][j]), x2 = _mm512_set1_ps(pv[2][j]), x3 = _mm512_set1_ps(pv[3][j]);
                __m512 w;
#define V4(i) w = _mm512_loadu_ps(vj + 16 * i); INREG512(w); a##i = _mm512_fmadd_ps(x0, w, a##i); b##i = _mm512_fmadd_ps(x1, w, b##i); \
              c##i = _mm512_fmadd_ps(x2, w, c##i); e##i = _mm512_fmadd_ps(x3, w, e##i);
                V4(0) V4(1) V4(2) V4(3)
#undef V4
            }
            const __m512 res[4][4] = { { a0, a1, a2, a3 }, { b0, b1, b2, b3 }, { c0, c1, c2, c3 }, { e0, e1, e2, e3 } };
            for (int u = 0; u < 4; u++)
                for (int c = 0; c < 4; c++) _mm512_storeu_ps(ov[u] + d0 + 16 * c, res[u][c]);
        }
    }
    for (; g + 2 <= G; g += 2) {
        float *o0 = o + (size_t)g * hd, *o1 = o0 + hd;
        const float *p0 = p + (size_t)g * ps - poff, *p1 = p0 + ps;
        for (int d0 = 0; d0 < hd64; d0 += 64) {
            __m512 a0, a1, a2, a3, b0, b1, b2, b3;
            if (first) { a0 = _mm512_setzero_ps(); a1 = a0; a2 = a0; a3 = a0; b0 = a0; b1 = a0; b2 = a0; b3 = a0; }
            else {
                a0 = _mm512_loadu_ps(o0 + d0); a1 = _mm512_loadu_ps(o0 + d0 + 16); a2 = _mm512_loadu_ps(o0 + d0 + 32); a3 = _mm512_loadu_ps(o0 + d0 + 48);
                b0 = _mm512_loadu_ps(o1 + d0); b1 = _mm512_loadu_ps(o1 + d0 + 16); b2 = _mm512_loadu_ps(o1 + d0 + 32); b3 = _mm512_loadu_ps(o1 + d0 + 48);
            }
            const int pfr = pf && g == 0 && d0 == 0;
            for (int j = lo; j < hi; j++) {
                const float *vj = v + (size_t)j * vs + d0;
                if (pfr) prefetch_row(v + (size_t)(j + PD) * vs, hd);
                __m512 x0 = _mm512_set1_ps(p0[j]), x1 = _mm512_set1_ps(p1[j]), w;
                w = _mm512_loadu_ps(vj); INREG512(w); a0 = _mm512_fmadd_ps(x0, w, a0); b0 = _mm512_fmadd_ps(x1, w, b0);
                w = _mm512_loadu_ps(vj + 16); INREG512(w); a1 = _mm512_fmadd_ps(x0, w, a1); b1 = _mm512_fmadd_ps(x1, w, b1);
                w = _mm512_loadu_ps(vj + 32); INREG512(w); a2 = _mm512_fmadd_ps(x0, w, a2); b2 = _mm512_fmadd_ps(x1, w, b2);
                w = _mm512_loadu_ps(vj + 48); INREG512(w); a3 = _mm512_fmadd_ps(x0, w, a3); b3 = _mm512_fmadd_ps(x1, w, b3);
            }
            _mm512_storeu_ps(o0 + d0, a0); _mm512_storeu_ps(o0 + d0 + 16, a1); _mm512_storeu_ps(o0 + d0 + 32, a2); _mm512_storeu_ps(o0 + d0 + 48, a3);
            _mm512_storeu_ps(o1 + d0, b0); _mm512_storeu_ps(o1 + d0 + 16, b1); _mm512_storeu_ps(o1 + d0 + 32, b2); _mm512_storeu_ps(o1 + d0 + 48, b3);
        }
    }
    for (; g < G; g++) {
        float *o0 = o + (size_t)g * hd;
        const float *p0 = p + (size_t)g * ps - poff;
        for (int d0 = 0; d0 < hd64; d0 += 64) {
            __m512 a0, a1, a2, a3;
            if (first) { a0 = _mm512_setzero_ps(); a1 = a0; a2 = a0; a3 = a0; }
            else { a0 = _mm512_loadu_ps(o0 + d0); a1 = _mm512_loadu_ps(o0 + d0 + 16); a2 = _mm512_loadu_ps(o0 + d0 + 32); a3 = _mm512_loadu_ps(o0 + d0 + 48); }
            const int pfr = pf && g == 0 && d0 == 0;
            for (int j = lo; j < hi; j++) {
                const float *vj = v + (size_t)j * vs + d0;
                if (pfr) prefetch_row(v + (size_t)(j + PD) * vs, hd);
                __m512 x0 = _mm512_set1_ps(p0[j]);
                a0 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(vj), a0);
                a1 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(vj + 16), a1);
                a2 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(vj + 32), a2);
                a3 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(vj + 48), a3);
            }
            _mm512_storeu_ps(o0 + d0, a0); _mm512_storeu_ps(o0 + d0 + 16, a1); _mm512_storeu_ps(o0 + d0 + 32, a2); _mm512_storeu_ps(o0 + d0 + 48, a3);
        }
    }
    if (hd64 < hd) accum_avx2_from(o, p, ps, poff, G, v, vs, lo, hi, hd, first, pf && hd64 == 0, hd64);
}

TGT512 static void score_avx512(float *s, size_t ss, int soff, const float *q, int G, const float *k, size_t ks, int lo, int hi,
                                int hd, float scale, int pf) {
    const int hd8 = hd / 8 * 8;
    const __m128 vs = _mm_set1_ps(scale);
    int j = lo;
    if (G >= 2)
        for (; j + 8 <= hi; j += 8) {
            const float *k0 = k + (size_t)j * ks;
            if (pf) for (int i = 0; i < 8; i++) prefetch_row(k0 + (PD + i) * ks, hd);
            int g = 0;
            for (; g + 4 <= G; g += 4) {   // 4 query vectors x 8 keys: 16 chains
                const float *qv[4] = { q + (size_t)g * hd, q + (size_t)(g + 1) * hd, q + (size_t)(g + 2) * hd, q + (size_t)(g + 3) * hd };
                __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
                __m512 c0 = a0, c1 = a0, c2 = a0, c3 = a0, e0 = a0, e1 = a0, e2 = a0, e3 = a0;
                for (int d = 0; d < hd8; d += 8) {
                    const __m512 x0 = _mm512_broadcast_f32x8(_mm256_loadu_ps(qv[0] + d)), x1 = _mm512_broadcast_f32x8(_mm256_loadu_ps(qv[1] + d));
                    const __m512 x2 = _mm512_broadcast_f32x8(_mm256_loadu_ps(qv[2] + d)), x3 = _mm512_broadcast_f32x8(_mm256_loadu_ps(qv[3] + d));
                    __m512 kv;
#define K4(i) kv = pair8(k0 + (2 * i) * ks + d, k0 + (2 * i + 1) * ks + d); INREG512(kv); \
              a##i = _mm512_fmadd_ps(x0, kv, a##i); b##i = _mm512_fmadd_ps(x1, kv, b##i); \
              c##i = _mm512_fmadd_ps(x2, kv, c##i); e##i = _mm512_fmadd_ps(x3, kv, e##i);
                    K4(0) K4(1) K4(2) K4(3)
#undef K4
                }
                const __m512 acc[4][4] = { { a0, a1, a2, a3 }, { b0, b1, b2, b3 }, { c0, c1, c2, c3 }, { e0, e1, e2, e3 } };
                for (int u = 0; u < 4; u++) {
                    __m128 r0 = red4(lo8(acc[u][0]), hi8(acc[u][0]), lo8(acc[u][1]), hi8(acc[u][1]));
                    __m128 r1 = red4(lo8(acc[u][2]), hi8(acc[u][2]), lo8(acc[u][3]), hi8(acc[u][3]));
                    float *su = s + (size_t)(g + u) * ss + j - soff;
                    if (hd8 == hd) { _mm_storeu_ps(su, _mm_mul_ps(r0, vs)); _mm_storeu_ps(su + 4, _mm_mul_ps(r1, vs)); }
                    else {
                        float ta[8];
                        _mm_storeu_ps(ta, r0); _mm_storeu_ps(ta + 4, r1);
                        for (int i = 0; i < 8; i++) su[i] = dtail(ta[i], qv[u], k0 + i * ks, hd8, hd) * scale;
                    }
                }
            }
            for (; g + 2 <= G; g += 2) {
                const float *q0 = q + (size_t)g * hd, *q1 = q0 + hd;
                __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
                for (int d = 0; d < hd8; d += 8) {
                    const __m512 x0 = _mm512_broadcast_f32x8(_mm256_loadu_ps(q0 + d)), x1 = _mm512_broadcast_f32x8(_mm256_loadu_ps(q1 + d));
                    __m512 kv;
                    kv = pair8(k0 + d, k0 + ks + d); INREG512(kv); a0 = _mm512_fmadd_ps(x0, kv, a0); b0 = _mm512_fmadd_ps(x1, kv, b0);
                    kv = pair8(k0 + 2 * ks + d, k0 + 3 * ks + d); INREG512(kv); a1 = _mm512_fmadd_ps(x0, kv, a1); b1 = _mm512_fmadd_ps(x1, kv, b1);
                    kv = pair8(k0 + 4 * ks + d, k0 + 5 * ks + d); INREG512(kv); a2 = _mm512_fmadd_ps(x0, kv, a2); b2 = _mm512_fmadd_ps(x1, kv, b2);
                    kv = pair8(k0 + 6 * ks + d, k0 + 7 * ks + d); INREG512(kv); a3 = _mm512_fmadd_ps(x0, kv, a3); b3 = _mm512_fmadd_ps(x1, kv, b3);
                }
                // keys j..j+3 and j+4..j+7 of each query vector through the AVX2 tree
                __m128 ra0 = red4(lo8(a0), hi8(a0), lo8(a1), hi8(a1)), ra1 = red4(lo8(a2), hi8(a2), lo8(a3), hi8(a3));
                __m128 rb0 = red4(lo8(b0), hi8(b0), lo8(b1), hi8(b1)), rb1 = red4(lo8(b2), hi8(b2), lo8(b3), hi8(b3));
                float *s0 = s + (size_t)g * ss + j - soff, *s1 = s0 + ss;
                if (hd8 == hd) {
                    _mm_storeu_ps(s0, _mm_mul_ps(ra0, vs)); _mm_storeu_ps(s0 + 4, _mm_mul_ps(ra1, vs));
                    _mm_storeu_ps(s1, _mm_mul_ps(rb0, vs)); _mm_storeu_ps(s1 + 4, _mm_mul_ps(rb1, vs));
                } else {
                    float ta[8], tb[8];
                    _mm_storeu_ps(ta, ra0); _mm_storeu_ps(ta + 4, ra1); _mm_storeu_ps(tb, rb0); _mm_storeu_ps(tb + 4, rb1);
                    for (int i = 0; i < 8; i++) {
                        s0[i] = dtail(ta[i], q0, k0 + i * ks, hd8, hd) * scale;
                        s1[i] = dtail(tb[i], q1, k0 + i * ks, hd8, hd) * scale;
                    }
                }
            }
            if (G & 1)   // the last query vector alone: the AVX2 kernel on these 8 keys (prefetch done above)
                score_avx2(s + (size_t)(G - 1) * ss, ss, soff, q + (size_t)(G - 1) * hd, 1, k, ks, j, j + 8, hd, scale, 0);
        }
    if (j < hi) score_avx2(s, ss, soff, q, G, k, ks, j, hi, hd, scale, pf);
}

typedef struct {
    float *out; const float *q;
    bs_kv_view kv;    // the keys' and values' rows (a page table, or one contiguous page)
    int n_q, n_heads, n_kv, hd, n_keys, q_pos0, causal, window;
    int hg;   // kv heads per task
    score_fn score; softmax_fn softmax; accum_fn accum;
    bs_backend *be;   // where a task reports scratch it could not get (attn_setup sets it)
} attn_job;

static __thread void *scratch_buf, *chunk;
static __thread size_t scratch_cap, chunk_cap;   // bytes

static float *chunk_buf(int hd) {
    size_t need = sizeof(float) * JB * hd;
    return bs_cpu_scratch(&chunk, &chunk_cap, need, need);
}
static void _mm_prefetch_rows(const float *r, int hd) {
    for (int d = 0; d < hd; d += 16) __builtin_prefetch(r + d);
}

// Task t: kv heads [hg * (t % groups), +hg), query rows [QB * (t / groups), +QB). Each head is computed
// exactly as if it were alone (same calls, same ranges, its own scratch): grouping heads changes only the
// order in which memory is touched. Key chunk outer, heads inner: a task reads hg * hd consecutive floats
// of every cache row instead of hd (the rows are n_kv * hd apart), which the hardware prefetchers follow
// far better: at one query row a task per head read the cache at ~13 GB/s.
// The task's query vectors of one kv head (its rows x the GQA group) are packed side by side (qp), and so
// are their outputs (op, scaled and written out at the end): a key chunk that every row sees whole is then
// one kernel call over all of them, which lets the kernels block more query vectors per key (the AVX-512
// ones 4), instead of one call per row. Each (query vector, key) score and each output element is still
// computed by the same chain in the same order, so the results do not change (tests: row invariance, the
// AVX-512 == AVX2 equality).
static void attn_task(void *p, int t, int nt) {
    attn_job *j = p;
    const int groups = (j->n_kv + j->hg - 1) / j->hg;
    const int h0 = t % groups * j->hg, h1 = h0 + j->hg < j->n_kv ? h0 + j->hg : j->n_kv, nh = h1 - h0;
    int i0 = t / groups * QB, i1 = i0 + QB < j->n_q ? i0 + QB : j->n_q;
    int G = j->n_heads / j->n_kv, hd = j->hd, nr = i1 - i0;
    int lo[QB], hi[QB], jlo = j->n_keys, jhi = 0;
    for (int i = i0; i < i1; i++) {
        int h = j->causal ? j->q_pos0 + i + 1 : j->n_keys;
        if (h > j->n_keys) h = j->n_keys;
        int l = j->window > 0 && h - j->window > 0 ? h - j->window : 0;
        lo[i - i0] = l; hi[i - i0] = h;
        if (h > l) { if (l < jlo) jlo = l; if (h > jhi) jhi = h; }
        else   // no visible key: zeros (the reference's sum over an empty set)
            memset(j->out + ((size_t)i * j->n_heads + (size_t)h0 * G) * hd, 0, sizeof(float) * nh * G * hd);
    }
    if (jhi <= jlo) return;
    const int V = nr * G;   // packed query vectors per kv head: row r, group member g -> r * G + g
    size_t L = (size_t)(jhi - jlo), per = (size_t)V * (L + 1) + 2 * (size_t)V * hd, need = per * nh;
    float *scratch = bs_cpu_scratch(&scratch_buf, &scratch_cap, sizeof(float) * need, sizeof(float) * need * 2);
    float *kv_buf = chunk_buf(hd);
    if (!scratch || !kv_buf) {
        bs_backend_fail(j->be, "attention: out of memory for %zu bytes of scratch (%d query rows x %zu keys)", sizeof(float) * need, nr, L);
        return;
    }
    // per head: scores / probabilities [V][L], 1/sum [V], packed queries [V][hd], packed outputs [V][hd]
#define SC(kh) (scratch + per * (size_t)((kh) - h0))
#define INV(kh) (SC(kh) + (size_t)V * L)
#define QP(kh) (INV(kh) + V)
#define OP(kh) (QP(kh) + (size_t)V * hd)
    for (int kh = h0; kh < h1; kh++)
        for (int r = 0; r < nr; r++)
            memcpy(QP(kh) + (size_t)r * G * hd, j->q + ((size_t)(i0 + r) * j->n_heads + (size_t)kh * G) * hd, sizeof(float) * G * hd);
    size_t kvs = (size_t)j->n_kv * hd;
    float scale = 1.0f / sqrtf((float)hd);
    // Key chunk by key chunk. With COPY_MIN_ROWS or more query rows the chunk's K (then V) rows of a head
    // are first copied into a contiguous L1 buffer (one pass over 32 pages, prefetching the next chunk), so
    // the queries' passes do not miss the L1 TLB on every 4 KiB-strided row. With fewer the rows are read
    // in place (prefetched ahead). Same values either way, so the same results.
    // A chunk never straddles a KV page (bs_kv_view): it ends at the page's end, so its rows are one strided
    // run in memory, as in a contiguous cache. Causal keys start at 0 and pages hold a multiple of JB rows,
    // so there the chunks are the same as without pages; elsewhere a chunk cut short changes nothing either
    // (each score and each output chain is the same arithmetic whatever the chunk boundaries).
    const bs_kv_view *kv = &j->kv;
    const int P = kv->pages ? kv->page_rows : 0;
    for (int pass = 0; pass < 2; pass++) {   // 0: scores, 1: o = sum_j p_j v_j
        if (pass) {
            for (int kh = h0; kh < h1; kh++)
                for (int r = 0; r < nr; r++)
                    for (int g = 0; g < G && hi[r] > lo[r]; g++)
                        INV(kh)[r * G + g] = j->softmax(SC(kh) + ((size_t)r * G + g) * L + lo[r] - jlo, hi[r] - lo[r]);
        }
        for (int c0 = jlo, c1; c0 < jhi; c0 = c1) {
            // the page holding key c0: keys [pg0, pg1) at rows pgrow.. of the pool
            const int pg0 = P ? c0 / P * P : 0, pg1 = P && pg0 + P < jhi ? pg0 + P : jhi;
            const size_t pgrow = P ? (size_t)kv->pages[c0 / P] * P : 0;
            c1 = c0 + JB < pg1 ? c0 + JB : pg1;
            const int copy = nr >= COPY_MIN_ROWS;
            // One call for all rows where every row sees the whole chunk and all start (or all continue)
            // their output chains here; else a call per row over its part.
            int whole = 1, first0 = c0 == lo[0];
            for (int r = 0; r < nr && whole; r++) whole = lo[r] <= c0 && hi[r] >= c1 && (c0 == lo[r]) == first0;
            for (int kh = h0; kh < h1; kh++) {
                const float *src = (pass ? kv->v : kv->k) + pgrow * kvs + (size_t)kh * hd;   // key pg0's row
                const float *base = src;
                size_t stride = kvs;
                int off = pg0;   // rows are indexed j - off in base
                if (copy) {
                    for (int jj = c0; jj < c1; jj++) {
                        const float *row = src + (size_t)(jj - pg0) * kvs;
                        if (jj + JB < pg1) _mm_prefetch_rows(row + JB * kvs, hd);
                        memcpy(kv_buf + (size_t)(jj - c0) * hd, row, sizeof(float) * hd);
                    }
                    base = kv_buf; stride = hd; off = c0;
                }
                // prefetching PD rows ahead stays within the page
                const int pf = !copy && c1 + PD <= pg1;
                if (whole) {
                    if (!pass) j->score(SC(kh), L, jlo - off, QP(kh), V, base, stride, c0 - off, c1 - off, hd, scale, pf);
                    else j->accum(OP(kh), SC(kh), L, jlo - off, V, base, stride, c0 - off, c1 - off, hd, first0, pf);
                    continue;
                }
                for (int r = 0, pfr = pf; r < nr; r++) {
                    int a = c0 > lo[r] ? c0 : lo[r], b = c1 < hi[r] ? c1 : hi[r];
                    if (a >= b) continue;
                    const size_t v0 = (size_t)r * G;
                    if (!pass) j->score(SC(kh) + v0 * L, L, jlo - off, QP(kh) + v0 * hd, G, base, stride, a - off, b - off, hd, scale, pfr && b + PD <= pg1);
                    else j->accum(OP(kh) + v0 * hd, SC(kh) + v0 * L, L, jlo - off, G, base, stride, a - off, b - off, hd, a == lo[r], pfr && b + PD <= pg1);
                    pfr = 0;
                }
            }
        }
    }
    for (int kh = h0; kh < h1; kh++)
        for (int r = 0; r < nr; r++) {
            if (hi[r] <= lo[r]) continue;
            float *o = j->out + ((size_t)(i0 + r) * j->n_heads + (size_t)kh * G) * hd;
            for (int g = 0; g < G; g++) {
                const float *src = OP(kh) + ((size_t)r * G + g) * hd, inv = INV(kh)[r * G + g];
                for (int d = 0; d < hd; d++) o[(size_t)g * hd + d] = src[d] * inv;
            }
        }
#undef SC
#undef INV
#undef QP
#undef OP
}

// One call's job (kernels and the kv heads per task) and its task count.
static int attn_setup(bs_backend *be, attn_job *j) {
    j->be = be;
    int vec = be->impl != (void *)bs_mm_scalar && bs_cpu_path_supported(BS_CPU_AVX2);
    // The AVX-512 paths run the same arithmetic on zmm registers (bit for bit the AVX2 results).
    int wide = vec && (be->impl == (void *)bs_mm_avx512 || be->impl == (void *)bs_mm_avx512bf16) &&
               bs_cpu_path_supported(BS_CPU_AVX512);
    j->score = wide ? score_avx512 : vec ? score_avx2 : score_c;
    j->softmax = vec ? softmax_avx2 : softmax_c;
    j->accum = wide ? accum_avx512 : vec ? accum_avx2 : accum_c;
    // Heads per task: as many as still leave every pool thread a task (BS_CPU_ATT_HG=1: one head per
    // task, the previous split). Results do not depend on it.
    const int qblocks = (j->n_q + QB - 1) / QB, threads = bs_pool_size();
    int groups = (threads + qblocks - 1) / qblocks;
    if (groups > j->n_kv) groups = j->n_kv;
    if (groups < 1) groups = 1;
    j->hg = (j->n_kv + groups - 1) / groups;
    const int fixed = bs_tuning_get()->cpu_att_heads_per_task;
    if (fixed > 0) j->hg = fixed < j->n_kv ? fixed : j->n_kv;
    return ((j->n_kv + j->hg - 1) / j->hg) * qblocks;
}

// Work below which a thread dispatch costs more than it saves.
static double attn_work(const attn_job *j) { return (double)j->n_q * j->n_heads * j->hd * (j->n_keys + 1); }
#define ATTN_INLINE_WORK 32768

void bs_cpu_attention_fast(bs_backend *be, float *out, const float *q, const bs_kv_view *kv,
                           int n_q, int n_heads, int n_kv, int hd, int n_keys, int q_pos0, int causal, int window) {
    attn_job j = { out, q, *kv, n_q, n_heads, n_kv, hd, n_keys, q_pos0, causal, window, 1, NULL, NULL, NULL, be };
    int nt = attn_setup(be, &j);
    if (attn_work(&j) < ATTN_INLINE_WORK) for (int t = 0; t < nt; t++) attn_task(&j, t, nt);
    else bs_parallel_for(nt, attn_task, &j);
}

// A ragged batch's attention (backend.h, bs_row_span): every span's tasks in one thread dispatch instead of
// one dispatch per span; each task is the one a per-span call would run, so the results are the same.
typedef struct { attn_job *jobs; int *first; int n; } spans_job;

static void spans_task(void *p, int t, int nt) {
    spans_job *sj = p;
    int k = 0;
    while (k + 1 < sj->n && sj->first[k + 1] <= t) k++;
    attn_task(&sj->jobs[k], t - sj->first[k], sj->first[k + 1] - sj->first[k]);
}

void bs_cpu_attention_spans_fast(bs_backend *be, float *out, const float *q, const bs_row_span *spans, int n_spans, int n_heads, int n_kv,
                                 int hd) {
    attn_job jobs_small[64];
    int first_small[65];
    attn_job *jobs = n_spans <= 64 ? jobs_small : malloc(sizeof *jobs * n_spans);
    int *first = n_spans <= 64 ? first_small : malloc(sizeof *first * (n_spans + 1));
    if (!jobs || !first) {
        bs_backend_fail(be, "attention: out of memory for the jobs of %d sequences", n_spans);
        if (jobs != jobs_small) free(jobs);
        if (first != first_small) free(first);
        return;
    }
    size_t qw = (size_t)n_heads * hd;
    int nt = 0;
    double work = 0;
    for (int i = 0; i < n_spans; i++) {
        const bs_row_span *s = &spans[i];
        jobs[i] = (attn_job){ out + s->row0 * qw, q + s->row0 * qw, s->kv, s->n, n_heads, n_kv, hd, s->pos0 + s->n, s->pos0, 1, 0, 1,
                              NULL, NULL, NULL, be };
        first[i] = nt;
        nt += attn_setup(be, &jobs[i]);
        work += attn_work(&jobs[i]);
    }
    first[n_spans] = nt;
    spans_job sj = { jobs, first, n_spans };
    if (work < ATTN_INLINE_WORK) for (int t = 0; t < nt; t++) spans_task(&sj, t, nt);
    else bs_parallel_for(nt, spans_task, &sj);
    if (jobs != jobs_small) free(jobs);
    if (first != first_small) free(first);
}
