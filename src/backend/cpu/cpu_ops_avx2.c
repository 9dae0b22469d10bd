// AVX2 versions of the small ops: rmsnorm, head_norm_rope, swiglu, add, embed, argmax.
// Elementwise work is split over the pool only when large (>= 64K elements): below that the dispatch
// costs more than it saves. Attention lives in cpu_attention.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backend/affine.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_simd_avx2.h"
#include "util/threadpool.h"

#define PAR_MIN 65536

// ---- rmsnorm ----
TGT_AVX2 static void rms_row(float *y, const float *x, int dim, const bs_mat *w, float eps) {
    int d8 = dim / 8 * 8, i = 0;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (; i + 16 <= d8; i += 16) {
        __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        a0 = _mm256_fmadd_ps(v0, v0, a0);
        a1 = _mm256_fmadd_ps(v1, v1, a1);
    }
    for (; i < d8; i += 8) { __m256 v0 = _mm256_loadu_ps(x + i); a0 = _mm256_fmadd_ps(v0, v0, a0); }
    float ss = bs_hsum8(_mm256_add_ps(a0, a1));
    for (; i < dim; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / dim + eps);
    __m256 vi = _mm256_set1_ps(inv);
    for (i = 0; i < d8; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vi);
        if (w) v = _mm256_mul_ps(v, bs_load8_w(w->data, w->dtype, i));
        _mm256_storeu_ps(y + i, v);
    }
    for (; i < dim; i++) y[i] = x[i] * inv * (w ? bs_load_elem(w->data, w->dtype, i) : 1.0f);
}

typedef struct { float *y; const float *x; int dim; const bs_mat *w; float eps; } rms_job;
static void rms_task(void *p, int t, int nt) {
    rms_job *j = p;
    rms_row(j->y + (size_t)t * j->dim, j->x + (size_t)t * j->dim, j->dim, j->w, j->eps);
}
static void v_rmsnorm(bs_backend *be, float *y, const float *x, int n, int dim, const bs_mat *w, float eps) {
    rms_job j = { y, x, dim, w, eps };
    if ((size_t)n * dim < PAR_MIN) for (int r = 0; r < n; r++) rms_task(&j, r, n);
    else bs_parallel_for(n, rms_task, &j);
}

// ---- head_norm_rope ----
// inv_freq is the model's table (model/rope.h: transformers' fp32 values), cos/sin once per row with libm from angle = fp32(pos) * inv_freq, so the angles equal the reference's bit for bit.
typedef struct {
    float *x; int n, n_heads, hd; const bs_mat *nw; float eps; int pos0; const float *inv_freq;
} rope_job;

TGT_AVX2 static void rope_task(void *p, int r, int nt) {
    rope_job *j = p;
    int half = j->hd / 2, h8 = half / 8 * 8;
    float cs[512], sn[512];   // hd <= 1024 (checked by the caller)
    for (int i = 0; i < half; i++) {
        float a = (float)(j->pos0 + r) * j->inv_freq[i];
        cs[i] = cosf(a); sn[i] = sinf(a);
    }
    for (int h = 0; h < j->n_heads; h++) {
        float *v = j->x + ((size_t)r * j->n_heads + h) * j->hd;
        if (j->nw) rms_row(v, v, j->hd, j->nw, j->eps);
        int i = 0;
        for (; i < h8; i += 8) {
            __m256 x0 = _mm256_loadu_ps(v + i), x1 = _mm256_loadu_ps(v + i + half);
            __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(sn + i);
            // same rounding as the reference: x0*c - x1*s and x1*c + x0*s, each product rounded then summed
            _mm256_storeu_ps(v + i, _mm256_sub_ps(_mm256_mul_ps(x0, c), _mm256_mul_ps(x1, s)));
            _mm256_storeu_ps(v + i + half, _mm256_add_ps(_mm256_mul_ps(x1, c), _mm256_mul_ps(x0, s)));
        }
        for (; i < half; i++) {
            float x0 = v[i], x1 = v[i + half];
            v[i] = x0 * cs[i] - x1 * sn[i];
            v[i + half] = x1 * cs[i] + x0 * sn[i];
        }
    }
}

static void v_head_norm_rope(bs_backend *be, float *x, int n, int n_heads, int hd, const bs_mat *norm_w,
                             float eps, int pos0, const float *inv_freq) {
    if (hd > 1024) {   // beyond the stack buffers: the reference is exact and fine for such odd shapes
        for (int r = 0; r < n; r++)
            for (int h = 0; h < n_heads; h++) {
                float *v = x + ((size_t)r * n_heads + h) * hd;
                if (norm_w) bs_cpu_rmsnorm_row(v, v, hd, norm_w, eps);
                bs_cpu_rope_row(v, hd, pos0 + r, inv_freq);
            }
        return;
    }
    rope_job j = { x, n, n_heads, hd, norm_w, eps, pos0, inv_freq };
    if ((size_t)n * n_heads * hd < PAR_MIN) for (int r = 0; r < n; r++) rope_task(&j, r, n);
    else bs_parallel_for(n, rope_task, &j);
}

// ---- swiglu and add: contiguous ranges split over tasks ----
typedef struct { float *h; const float *g, *u; size_t n; } ew_job;

TGT_AVX2 static void swiglu_range(float *h, const float *g, const float *u, size_t lo, size_t hi) {
    size_t i = lo;
    __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    for (; i + 8 <= hi; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 e = bs_exp8(_mm256_sub_ps(zero, x));
        _mm256_storeu_ps(h + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
    }
    for (; i < hi; i++) h[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}
TGT_AVX2 static void add_range(float *y, const float *x, size_t lo, size_t hi) {
    size_t i = lo;
    for (; i + 8 <= hi; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < hi; i++) y[i] += x[i];
}
static void ew_bounds(size_t n, int t, int nt, size_t *lo, size_t *hi) {
    size_t per = (n + nt - 1) / nt;
    per = (per + 15) / 16 * 16;
    *lo = (size_t)t * per; *hi = *lo + per;
    if (*lo > n) *lo = n;
    if (*hi > n) *hi = n;
}
static void swiglu_task(void *p, int t, int nt) { ew_job *j = p; size_t lo, hi; ew_bounds(j->n, t, nt, &lo, &hi); swiglu_range(j->h, j->g, j->u, lo, hi); }
static void add_task(void *p, int t, int nt) { ew_job *j = p; size_t lo, hi; ew_bounds(j->n, t, nt, &lo, &hi); add_range(j->h, j->g, lo, hi); }

static void v_swiglu(bs_backend *be, float *h, const float *g, const float *u, size_t n) {
    ew_job j = { h, g, u, n };
    if (n < PAR_MIN) swiglu_range(h, g, u, 0, n); else bs_parallel_for(bs_pool_size() * 2, swiglu_task, &j);
}
static void v_add(bs_backend *be, float *y, const float *x, size_t n) {
    ew_job j = { y, x, NULL, n };
    if (n < 4 * PAR_MIN) add_range(y, x, 0, n); else bs_parallel_for(bs_pool_size(), add_task, &j);
}

// ---- embed ----
TGT_AVX2 static void v_embed(bs_backend *be, float *out, const bs_mat *t, const int32_t *ids, int n) {
    if (t->format == BS_WFMT_AFFINE) {   // a few rows a call: the host formula (affine.h) is fast enough
        for (int r = 0; r < n; r++) bs_mat_row_f32(t, ids[r], out + (size_t)r * t->cols);
        return;
    }
    int64_t D = t->cols, d8 = D / 8 * 8;
    for (int r = 0; r < n; r++) {
        size_t base = (size_t)ids[r] * D;
        float *o = out + (size_t)r * D;
        int64_t i = 0;
        for (; i < d8; i += 8) _mm256_storeu_ps(o + i, bs_load8_w(t->data, t->dtype, base + i));
        for (; i < D; i++) o[i] = bs_load_elem(t->data, t->dtype, base + i);
    }
}

// ---- argmax: vector max, then the first index holding it (ties: first index, as the reference).
// NaN logits are not expected; a row containing NaN may pick a different index than the reference.
TGT_AVX2 static int argmax_row(const float *l, int vocab) {
    int v8 = vocab / 8 * 8;
    if (v8 == 0) { int b = 0; for (int i = 1; i < vocab; i++) if (l[i] > l[b]) b = i; return b; }
    __m256 m0 = _mm256_loadu_ps(l), m1 = m0;
    int i = 8;
    for (; i + 16 <= v8; i += 16) { m0 = _mm256_max_ps(m0, _mm256_loadu_ps(l + i)); m1 = _mm256_max_ps(m1, _mm256_loadu_ps(l + i + 8)); }
    for (; i < v8; i += 8) m0 = _mm256_max_ps(m0, _mm256_loadu_ps(l + i));
    float mx = bs_hmax8(_mm256_max_ps(m0, m1));
    for (i = v8; i < vocab; i++) if (l[i] > mx) mx = l[i];
    __m256 vm = _mm256_set1_ps(mx);
    for (i = 0; i < v8; i += 8) {
        int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(l + i), vm, _CMP_EQ_OQ));
        if (mask) return i + __builtin_ctz(mask);
    }
    for (; i < vocab; i++) if (l[i] == mx) return i;
    return 0;
}
typedef struct { int32_t *out; const float *l; int vocab; } am_job;
static void am_task(void *p, int t, int nt) { am_job *j = p; j->out[t] = argmax_row(j->l + (size_t)t * j->vocab, j->vocab); }
static void v_argmax(bs_backend *be, int32_t *out, const float *logits, int n, int vocab) {
    am_job j = { out, logits, vocab };
    if (n > 1 && (size_t)n * vocab >= PAR_MIN) bs_parallel_for(n, am_task, &j);
    else for (int r = 0; r < n; r++) am_task(&j, r, n);
}

void bs_cpu_install_ops_avx2(bs_backend *be) {
    be->rmsnorm = v_rmsnorm;
    be->head_norm_rope = v_head_norm_rope;
    be->attention = bs_cpu_attention_fast;
    be->attention_spans = bs_cpu_attention_spans_fast;
    be->swiglu = v_swiglu;
    be->add = v_add;
    be->embed = v_embed;
    be->argmax = v_argmax;
}
