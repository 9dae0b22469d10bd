// Attention over the KV cache: tasks are (query row, kv head); each task handles the whole GQA group of
// query heads that read that kv head, so every K and V row is loaded once (from L2/L3) and reused from
// L1 for all heads of the group. Two passes: scores (q.k * scale) into a per-thread scratch row, softmax
// (max-subtracted, fp32), then o = sum_j p_j v_j with the output kept in registers.
// Inner loops are AVX2 where the CPU has it (scalar path: plain C).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_simd_avx2.h"
#include "util/threadpool.h"

// s[g][j - lo] = scale * q_g . k_j for g < G, j in [lo, hi)
typedef void (*score_fn)(float *s, const float *q, int G, const float *k, size_t kstride, int lo, int hi, int hd, float scale);
// p[g][:] <- exp(p - max) in place; returns 1/sum per head in inv[g]
typedef void (*softmax_fn)(float *s, int G, int len, float *inv);
// o_g = inv_g * sum_j p[g][j - lo] v_j
typedef void (*accum_fn)(float *o, const float *p, int G, const float *v, size_t vstride, int lo, int hi, int hd, const float *inv);

static void score_c(float *s, const float *q, int G, const float *k, size_t ks, int lo, int hi, int hd, float scale) {
    int len = hi - lo;
    for (int j = lo; j < hi; j++) {
        const float *kj = k + (size_t)j * ks;
        for (int g = 0; g < G; g++) {
            const float *qg = q + (size_t)g * hd;
            float a = 0;
            for (int d = 0; d < hd; d++) a += qg[d] * kj[d];
            s[(size_t)g * len + j - lo] = a * scale;
        }
    }
}
static void softmax_c(float *s, int G, int len, float *inv) {
    for (int g = 0; g < G; g++) {
        float *r = s + (size_t)g * len, mx = -INFINITY, sum = 0;
        for (int j = 0; j < len; j++) if (r[j] > mx) mx = r[j];
        for (int j = 0; j < len; j++) { r[j] = expf(r[j] - mx); sum += r[j]; }
        inv[g] = 1.0f / sum;
    }
}
static void accum_c(float *o, const float *p, int G, const float *v, size_t vs, int lo, int hi, int hd, const float *inv) {
    int len = hi - lo;
    for (int g = 0; g < G; g++) {
        float *og = o + (size_t)g * hd;
        memset(og, 0, sizeof(float) * hd);
        for (int j = lo; j < hi; j++) {
            const float *vj = v + (size_t)j * vs;
            float pj = p[(size_t)g * len + j - lo];
            for (int d = 0; d < hd; d++) og[d] += pj * vj[d];
        }
        for (int d = 0; d < hd; d++) og[d] *= inv[g];
    }
}

TGT_AVX2 static void score_avx2(float *s, const float *q, int G, const float *k, size_t ks, int lo, int hi, int hd, float scale) {
    int len = hi - lo, hd8 = hd / 8 * 8;
    for (int j = lo; j < hi; j++) {
        const float *kj = k + (size_t)j * ks;
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
            s[(size_t)g * len + j - lo] = s0 * scale;
            s[(size_t)(g + 1) * len + j - lo] = s1 * scale;
        }
        for (; g < G; g++) {
            const float *q0 = q + (size_t)g * hd;
            __m256 a0 = _mm256_setzero_ps();
            int d = 0;
            for (; d < hd8; d += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d), _mm256_loadu_ps(kj + d), a0);
            float s0 = bs_hsum8(a0);
            for (; d < hd; d++) s0 += q0[d] * kj[d];
            s[(size_t)g * len + j - lo] = s0 * scale;
        }
    }
}
TGT_AVX2 static void softmax_avx2(float *s, int G, int len, float *inv) {
    int l8 = len / 8 * 8;
    for (int g = 0; g < G; g++) {
        float *r = s + (size_t)g * len, mx = -INFINITY;
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
        inv[g] = 1.0f / sum;
    }
}
TGT_AVX2 static void accum_avx2(float *o, const float *p, int G, const float *v, size_t vs, int lo, int hi, int hd, const float *inv) {
    int len = hi - lo, hd8 = hd / 8 * 8;
    for (int g = 0; g < G; g++) {
        float *og = o + (size_t)g * hd;
        const float *pg = p + (size_t)g * len;
        for (int d0 = 0; d0 < hd8; d0 += 64) {           // 64 output floats in 8 registers per pass
            int w = hd8 - d0 < 64 ? (hd8 - d0) / 8 : 8;
            __m256 a[8];
            for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_ps();
            if (w == 8) {
                for (int j = lo; j < hi; j++) {
                    const float *vj = v + (size_t)j * vs + d0;
                    __m256 pj = _mm256_set1_ps(pg[j - lo]);
                    for (int i = 0; i < 8; i++) a[i] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * i), a[i]);
                }
            } else {
                for (int j = lo; j < hi; j++) {
                    const float *vj = v + (size_t)j * vs + d0;
                    __m256 pj = _mm256_set1_ps(pg[j - lo]);
                    for (int i = 0; i < w; i++) a[i] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * i), a[i]);
                }
            }
            __m256 sc = _mm256_set1_ps(inv[g]);
            for (int i = 0; i < w; i++) _mm256_storeu_ps(og + d0 + 8 * i, _mm256_mul_ps(a[i], sc));
        }
        for (int d = hd8; d < hd; d++) {
            float a = 0;
            for (int j = lo; j < hi; j++) a += pg[j - lo] * v[(size_t)j * vs + d];
            og[d] = a * inv[g];
        }
    }
}

typedef struct {
    float *out; const float *q, *k, *v;
    int n_q, n_heads, n_kv, hd, n_keys, q_pos0, causal, window;
    score_fn score; softmax_fn softmax; accum_fn accum;
} attn_job;

static __thread float *scratch;
static __thread size_t scratch_cap;

static void attn_task(void *p, int t, int nt) {
    attn_job *j = p;
    int i = t / j->n_kv, kh = t % j->n_kv, G = j->n_heads / j->n_kv;
    int hi = j->causal ? j->q_pos0 + i + 1 : j->n_keys;
    if (hi > j->n_keys) hi = j->n_keys;
    int lo = j->window > 0 && hi - j->window > 0 ? hi - j->window : 0;
    float *o = j->out + ((size_t)i * j->n_heads + (size_t)kh * G) * j->hd;
    if (hi <= lo) {   // no visible key: the reference leaves 0/0 = NaN-free zeros (sum over an empty set)
        memset(o, 0, sizeof(float) * G * j->hd);
        return;
    }
    size_t need = (size_t)G * (hi - lo) + G;
    if (need > scratch_cap) {
        free(scratch);
        scratch_cap = need * 2;
        scratch = malloc(sizeof(float) * scratch_cap);
        if (!scratch) abort();
    }
    float *s = scratch, *inv = scratch + (size_t)G * (hi - lo);
    size_t kvs = (size_t)j->n_kv * j->hd;
    const float *qg = j->q + ((size_t)i * j->n_heads + (size_t)kh * G) * j->hd;
    j->score(s, qg, G, j->k + (size_t)kh * j->hd, kvs, lo, hi, j->hd, 1.0f / sqrtf((float)j->hd));
    j->softmax(s, G, hi - lo, inv);
    j->accum(o, s, G, j->v + (size_t)kh * j->hd, kvs, lo, hi, j->hd, inv);
}

void bs_cpu_attention_fast(bs_backend *be, float *out, const float *q, const float *k, const float *v,
                           int n_q, int n_heads, int n_kv, int hd, int n_keys, int q_pos0, int causal, int window) {
    attn_job j = { out, q, k, v, n_q, n_heads, n_kv, hd, n_keys, q_pos0, causal, window, NULL, NULL, NULL };
    int vec = be->impl != (void *)bs_mm_scalar && bs_cpu_path_supported(BS_CPU_AVX2);
    j.score = vec ? score_avx2 : score_c;
    j.softmax = vec ? softmax_avx2 : softmax_c;
    j.accum = vec ? accum_avx2 : accum_c;
    int nt = n_q * n_kv;
    if ((double)nt * (n_heads / n_kv) * hd * (n_keys + 1) < 32768) for (int t = 0; t < nt; t++) attn_task(&j, t, nt);
    else bs_parallel_for(nt, attn_task, &j);
}
