// Training ops, CPU fp32 reference (train_ops.h).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backend/backend.h"
#include "train/train_ops.h"
#include "util/threadpool.h"

// ---- embedding ----------------------------------------------------------------------------------------------

void bs_op_embed_fwd(float *out, const float *table, const int32_t *ids, int n, int d) {
    for (int i = 0; i < n; i++) memcpy(out + (size_t)i * d, table + (size_t)ids[i] * d, sizeof(float) * d);
}

void bs_op_embed_bwd(float *dtable, const float *dout, const int32_t *ids, int n, int d) {
    if (!dtable) return;
    for (int i = 0; i < n; i++) {
        float *row = dtable + (size_t)ids[i] * d;
        const float *g = dout + (size_t)i * d;
        for (int k = 0; k < d; k++) row[k] += g[k];
    }
}

// ---- linear ---------------------------------------------------------------------------------------------------
// Two kernels, both with 8-wide vector accumulators (GCC/Clang vector extensions: AVX on x86-64-v3 builds,
// SSE on portable ones):
//   forward   a 4-row x 2-output tile of dot products over `in`;
//   backward  C[m][:] += sum_t A(m, t) B[t][:], a 4-row x 16-column tile of axpys (dx = dy W, dW = dy^T x),
//             A read through strides so dy is never transposed.

typedef float v8 __attribute__((vector_size(32)));
static inline v8 ld8(const float *p) { v8 v; memcpy(&v, p, sizeof v); return v; }
static inline void st8(float *p, v8 v) { memcpy(p, &v, sizeof v); }
static inline float hsum8(v8 v) { return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7])); }

typedef struct {
    float *y; const float *x, *W, *b;
    int n, in, out, ldx, ldy, accumulate, rb, ob, n_ob;
} linear_job;

static void linear_task(void *ctx, int t, int nt) {
    const linear_job *j = ctx;
    int r0 = (t / j->n_ob) * j->rb, o0 = (t % j->n_ob) * j->ob;
    int r1 = r0 + j->rb < j->n ? r0 + j->rb : j->n, o1 = o0 + j->ob < j->out ? o0 + j->ob : j->out;
    int in = j->in, in8 = in & ~7;
    for (int i = r0; i < r1; i += 4) {
        const float *xr[4];
        for (int a = 0; a < 4; a++) xr[a] = j->x + (size_t)(i + a < r1 ? i + a : r1 - 1) * j->ldx;   // pad by repeating
        for (int o = o0; o < o1; o += 2) {
            const float *wr[2] = { j->W + (size_t)o * in, j->W + (size_t)(o + 1 < o1 ? o + 1 : o) * in };
            v8 acc[4][2] = {{{0}}};
            for (int k = 0; k < in8; k += 8) {
                v8 w0 = ld8(wr[0] + k), w1 = ld8(wr[1] + k);
                for (int a = 0; a < 4; a++) {
                    v8 xv = ld8(xr[a] + k);
                    acc[a][0] += xv * w0;
                    acc[a][1] += xv * w1;
                }
            }
            for (int a = 0; a < 4 && i + a < r1; a++)
                for (int c = 0; c < 2 && o + c < o1; c++) {
                    float s = hsum8(acc[a][c]);
                    for (int k = in8; k < in; k++) s += xr[a][k] * wr[c][k];
                    if (j->b) s += j->b[o + c];
                    float *dst = j->y + (size_t)(i + a) * j->ldy + o + c;
                    *dst = j->accumulate ? *dst + s : s;
                }
        }
    }
}

// y[i * ldy + o] (+)= x[i * ldx + :] . W[o][:] (+ b[o])
static void linear_fwd_strided(float *y, int ldy, const float *x, int ldx, const float *W, const float *b, int n, int in, int out,
                               int accumulate) {
    if (n <= 0 || out <= 0) return;
    linear_job j = { y, x, W, b, n, in, out, ldx, ldy, accumulate, 32, 64, 0 };
    if (n <= 8) j.ob = 16;            // few rows: split the outputs finer so every thread has work
    j.n_ob = (out + j.ob - 1) / j.ob;
    int n_rb = (n + j.rb - 1) / j.rb;
    bs_parallel_for(n_rb * j.n_ob, linear_task, &j);
}

void bs_op_linear_fwd(float *y, const float *x, const float *W, const float *b, int n, int in, int out, int accumulate) {
    linear_fwd_strided(y, out, x, in, W, b, n, in, out, accumulate);
}

typedef struct {
    float *C; const float *A, *B;
    int64_t ldc, sm, st, ldb;
    int M, N, T, mb, nb, n_nb;
} gemm_job;

#define TCHUNK 256
static void gemm_task(void *ctx, int task, int nt) {
    const gemm_job *j = ctx;
    int m0 = (task / j->n_nb) * j->mb, c0 = (task % j->n_nb) * j->nb;
    int m1 = m0 + j->mb < j->M ? m0 + j->mb : j->M, c1 = c0 + j->nb < j->N ? c0 + j->nb : j->N;
    for (int t0 = 0; t0 < j->T; t0 += TCHUNK) {
        int t1 = t0 + TCHUNK < j->T ? t0 + TCHUNK : j->T;
        for (int m = m0; m < m1; m += 4) {
            int nm = m1 - m < 4 ? m1 - m : 4;
            int c = c0;
            for (; c + 16 <= c1; c += 16) {
                v8 acc[4][2] = {{{0}}};
                for (int t = t0; t < t1; t++) {
                    const float *brow = j->B + (size_t)t * j->ldb + c;
                    v8 b0 = ld8(brow), b1 = ld8(brow + 8);
                    for (int a = 0; a < 4; a++) {
                        float av = a < nm ? j->A[(size_t)(m + a) * j->sm + (size_t)t * j->st] : 0.0f;
                        acc[a][0] += av * b0;
                        acc[a][1] += av * b1;
                    }
                }
                for (int a = 0; a < nm; a++) {
                    float *crow = j->C + (size_t)(m + a) * j->ldc + c;
                    st8(crow, ld8(crow) + acc[a][0]);
                    st8(crow + 8, ld8(crow + 8) + acc[a][1]);
                }
            }
            for (; c < c1; c++)       // column tail
                for (int a = 0; a < nm; a++) {
                    float s = 0;
                    for (int t = t0; t < t1; t++) s += j->A[(size_t)(m + a) * j->sm + (size_t)t * j->st] * j->B[(size_t)t * j->ldb + c];
                    j->C[(size_t)(m + a) * j->ldc + c] += s;
                }
        }
    }
}

// C[m * ldc + c] += sum_t A[m * sm + t * st] * B[t * ldb + c] for m < M, c < N, t < T.
static void gemm_acc(float *C, int64_t ldc, const float *A, int64_t sm, int64_t st, const float *B, int64_t ldb, int M, int N, int T) {
    if (M <= 0 || N <= 0 || T <= 0) return;
    gemm_job j = { C, A, B, ldc, sm, st, ldb, M, N, T, 32, 256, 0 };
    j.n_nb = (N + j.nb - 1) / j.nb;
    bs_parallel_for(((M + j.mb - 1) / j.mb) * j.n_nb, gemm_task, &j);
}

// The backward with x rows ldx floats apart (the Markov heads read their inputs out of save arrays).
static void linear_bwd_strided(float *dx, float *dW, float *db, const float *dy, const float *x, int ldx, const float *W, int n, int in,
                               int out) {
    if (n <= 0) return;
    if (dx) gemm_acc(dx, in, dy, out, 1, W, in, n, in, out);      // dx[i][:] += sum_o dy[i][o] W[o][:]
    if (dW) gemm_acc(dW, in, dy, 1, out, x, ldx, out, in, n);     // dW[o][:] += sum_i dy[i][o] x[i][:]
    if (db)
        for (int i = 0; i < n; i++)
            for (int o = 0; o < out; o++) db[o] += dy[(size_t)i * out + o];
}

void bs_op_linear_bwd(float *dx, float *dW, float *db, const float *dy, const float *x, const float *W, int n, int in, int out) {
    linear_bwd_strided(dx, dW, db, dy, x, in, W, n, in, out);
}

// ---- RMSNorm --------------------------------------------------------------------------------------------------

void bs_op_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int n, int d, float eps) {
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * d;
        float *yi = y + (size_t)i * d;
        float ss = 0;
        for (int k = 0; k < d; k++) ss += xi[k] * xi[k];
        float r = 1.0f / sqrtf(ss / d + eps);
        rstd[i] = r;
        for (int k = 0; k < d; k++) yi[k] = w[k] * (xi[k] * r);
    }
}

void bs_op_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w, const float *rstd, int n, int d) {
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * d, *gi = dy + (size_t)i * d;
        float r = rstd[i], dot = 0;   // dot = sum(dn * xhat) with dn = dy * w, xhat = x * rstd
        for (int k = 0; k < d; k++) {
            float xh = xi[k] * r;
            if (dw) dw[k] += gi[k] * xh;
            dot += gi[k] * w[k] * xh;
        }
        if (!dx) continue;
        float *di = dx + (size_t)i * d, m = dot / d;
        for (int k = 0; k < d; k++) di[k] += r * (gi[k] * w[k] - xi[k] * r * m);
    }
}

// ---- RoPE -----------------------------------------------------------------------------------------------------

static void rope(float *x, const int32_t *pos, int n, int heads, int hd, const float *inv, float sign) {
    int half = hd / 2;
    for (int i = 0; i < n; i++) {
        float *row = x + (size_t)i * heads * hd;
        for (int k = 0; k < half; k++) {
            float f = (float)pos[i] * inv[k], c = cosf(f), s = sign * sinf(f);
            for (int h = 0; h < heads; h++) {
                float *v = row + (size_t)h * hd, a = v[k], b = v[k + half];
                v[k] = a * c - b * s;
                v[k + half] = b * c + a * s;
            }
        }
    }
}
void bs_op_rope_fwd(float *x, const int32_t *pos, int n, int heads, int hd, const float *inv_freq) { rope(x, pos, n, heads, hd, inv_freq, 1.0f); }
void bs_op_rope_bwd(float *dx, const int32_t *pos, int n, int heads, int hd, const float *inv_freq) { rope(dx, pos, n, heads, hd, inv_freq, -1.0f); }

// ---- attention ------------------------------------------------------------------------------------------------

void bs_mask_causal(int32_t *kr, int nq) {
    for (int i = 0; i < nq; i++) { kr[4 * i] = 0; kr[4 * i + 1] = i + 1; kr[4 * i + 2] = 0; kr[4 * i + 3] = 0; }
}

void bs_mask_dspark(int32_t *kr, const int32_t *anchor, const int32_t *keep, int n_blocks, int B, int S) {
    for (int b = 0; b < n_blocks; b++)
        for (int j = 0; j < B; j++) {
            int32_t *m = kr + 4 * ((size_t)b * B + j);
            if (!keep[b]) { m[0] = m[1] = m[2] = m[3] = 0; continue; }
            m[0] = 0; m[1] = anchor[b] < S ? anchor[b] : S;
            m[2] = S + b * B; m[3] = S + (b + 1) * B;
        }
}

static inline float dotf(const float *a, const float *b, int n) {
    float s = 0;
    for (int k = 0; k < n; k++) s += a[k] * b[k];
    return s;
}

typedef struct {
    float *out, *dq, *dk, *dv;
    float *lse_out;                  // forward writes
    const float *lse;                // backward reads
    const float *q, *k, *v, *dout, *o;
    const int32_t *kr;
    int nq, nk, nh, nkv, hd, chunk;
} attn_job;

// Forward over a chunk of queries: one pass over the visible keys with a running max (online softmax, so no
// score buffer of nk floats is needed), the output rescaled whenever the max grows.
static void attn_fwd_task(void *ctx, int t, int nt) {
    const attn_job *j = ctx;
    int g = j->nh / j->nkv, hd = j->hd, qd = j->nh * hd, kd = j->nkv * hd;
    float scale = 1.0f / sqrtf((float)hd);
    int i0 = t * j->chunk, i1 = i0 + j->chunk < j->nq ? i0 + j->chunk : j->nq;
    for (int i = i0; i < i1; i++) {
        const int32_t *m = j->kr + 4 * (size_t)i;
        for (int h = 0; h < j->nh; h++) {
            const float *qi = j->q + (size_t)i * qd + (size_t)h * hd;
            float *oi = j->out + (size_t)i * qd + (size_t)h * hd;
            int kvh = h / g;
            memset(oi, 0, sizeof(float) * hd);
            float mx = -INFINITY, sum = 0;
            for (int r = 0; r < 2; r++)
                for (int key = m[2 * r]; key < m[2 * r + 1]; key++) {
                    size_t ka = (size_t)key * kd + (size_t)kvh * hd;
                    float s = dotf(qi, j->k + ka, hd) * scale;
                    if (s > mx) {
                        float c = expf(mx - s);   // 0 on the first key
                        sum *= c;
                        for (int d = 0; d < hd; d++) oi[d] *= c;
                        mx = s;
                    }
                    float p = expf(s - mx);
                    sum += p;
                    const float *vk = j->v + ka;
                    for (int d = 0; d < hd; d++) oi[d] += p * vk[d];
                }
            if (mx == -INFINITY) { j->lse_out[(size_t)i * j->nh + h] = -INFINITY; continue; }
            float inv = 1.0f / sum;
            for (int d = 0; d < hd; d++) oi[d] *= inv;
            j->lse_out[(size_t)i * j->nh + h] = mx + logf(sum);
        }
    }
}

void bs_op_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v, const int32_t *kr,
                         int nq, int nk, int nh, int nkv, int hd) {
    attn_job j = { .out = out, .lse_out = lse, .q = q, .k = k, .v = v, .kr = kr, .nq = nq, .nk = nk, .nh = nh, .nkv = nkv, .hd = hd, .chunk = 8 };
    bs_parallel_for((nq + j.chunk - 1) / j.chunk, attn_fwd_task, &j);
}

// Backward. With p_j = exp(s_j - lse) recomputed and D = dout . out (per query and head):
//   ds_j = p_j (dout . v_j - D),  dq += scale sum_j ds_j k_j,  dk_j += scale ds_j q,  dv_j += p_j dout.
// Pass 1 (over query chunks) forms dq; pass 2 (over kv heads x key chunks, so no two tasks write the same
// dk/dv row) forms dk and dv. Each recomputes the probabilities it needs.
static void attn_dq_task(void *ctx, int t, int nt) {
    const attn_job *j = ctx;
    int g = j->nh / j->nkv, hd = j->hd, qd = j->nh * hd, kd = j->nkv * hd;
    float scale = 1.0f / sqrtf((float)hd);
    int i0 = t * j->chunk, i1 = i0 + j->chunk < j->nq ? i0 + j->chunk : j->nq;
    for (int i = i0; i < i1; i++) {
        const int32_t *m = j->kr + 4 * (size_t)i;
        for (int h = 0; h < j->nh; h++) {
            size_t at = (size_t)i * qd + (size_t)h * hd;
            float L = j->lse[(size_t)i * j->nh + h];
            if (L == -INFINITY) continue;
            const float *qi = j->q + at, *gi = j->dout + at;
            float D = dotf(gi, j->o + at, hd), *dqi = j->dq + at;
            int kvh = h / g;
            for (int r = 0; r < 2; r++)
                for (int key = m[2 * r]; key < m[2 * r + 1]; key++) {
                    const float *kk = j->k + (size_t)key * kd + (size_t)kvh * hd, *vk = j->v + (size_t)key * kd + (size_t)kvh * hd;
                    float p = expf(dotf(qi, kk, hd) * scale - L);
                    float ds = p * (dotf(gi, vk, hd) - D) * scale;
                    for (int d = 0; d < hd; d++) dqi[d] += ds * kk[d];
                }
        }
    }
}

static void attn_dkv_task(void *ctx, int t, int nt) {
    const attn_job *j = ctx;
    int g = j->nh / j->nkv, hd = j->hd, qd = j->nh * hd, kd = j->nkv * hd;
    float scale = 1.0f / sqrtf((float)hd);
    int n_kc = (j->nk + j->chunk - 1) / j->chunk;
    int kvh = t / n_kc, c0 = (t % n_kc) * j->chunk, c1 = c0 + j->chunk < j->nk ? c0 + j->chunk : j->nk;
    for (int i = 0; i < j->nq; i++) {
        const int32_t *m = j->kr + 4 * (size_t)i;
        for (int r = 0; r < 2; r++) {
            int lo = m[2 * r] > c0 ? m[2 * r] : c0, hi = m[2 * r + 1] < c1 ? m[2 * r + 1] : c1;
            if (lo >= hi) continue;
            for (int h = kvh * g; h < (kvh + 1) * g; h++) {
                size_t at = (size_t)i * qd + (size_t)h * hd;
                float L = j->lse[(size_t)i * j->nh + h];
                const float *qi = j->q + at, *gi = j->dout + at;
                float D = dotf(gi, j->o + at, hd);
                for (int key = lo; key < hi; key++) {
                    size_t ka = (size_t)key * kd + (size_t)kvh * hd;
                    float p = expf(dotf(qi, j->k + ka, hd) * scale - L);
                    float ds = p * (dotf(gi, j->v + ka, hd) - D) * scale;
                    float *dkk = j->dk + ka, *dvk = j->dv + ka;
                    for (int d = 0; d < hd; d++) { dvk[d] += p * gi[d]; dkk[d] += ds * qi[d]; }
                }
            }
        }
    }
}

void bs_op_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k, const float *v,
                         const float *out, const float *lse, const int32_t *kr, int nq, int nk, int nh, int nkv, int hd) {
    attn_job j = { .dq = dq, .dk = dk, .dv = dv, .q = q, .k = k, .v = v, .dout = dout, .o = out, .lse = lse, .kr = kr,
                   .nq = nq, .nk = nk, .nh = nh, .nkv = nkv, .hd = hd, .chunk = 8 };
    bs_parallel_for((nq + j.chunk - 1) / j.chunk, attn_dq_task, &j);
    j.chunk = 64;
    bs_parallel_for(nkv * ((nk + j.chunk - 1) / j.chunk), attn_dkv_task, &j);
}

// ---- SwiGLU ---------------------------------------------------------------------------------------------------

static inline float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }

void bs_op_swiglu_fwd(float *h, const float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) h[i] = g[i] * sigm(g[i]) * u[i];
}
void bs_op_swiglu_bwd(float *dg, float *du, const float *dh, const float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float s = sigm(g[i]), silu = g[i] * s;
        if (du) du[i] += dh[i] * silu;
        if (dg) dg[i] += dh[i] * u[i] * (s + g[i] * s * (1.0f - s));
    }
}

// ---- losses ---------------------------------------------------------------------------------------------------

float bs_op_softmax(float *p, const float *z, int V) {
    float mx = -INFINITY;
    for (int i = 0; i < V; i++) if (z[i] > mx) mx = z[i];
    double sum = 0;
    for (int i = 0; i < V; i++) { p[i] = expf(z[i] - mx); sum += p[i]; }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < V; i++) p[i] *= inv;
    return mx + (float)log(sum);
}

float bs_op_ce(float *dz, const float *p, float lse, const float *z, int label, int V, float scale) {
    if (dz && scale != 0) {
        for (int i = 0; i < V; i++) dz[i] += scale * p[i];
        dz[label] -= scale;
    }
    return lse - z[label];
}

float bs_op_l1(float *dz, const float *p, const float *pt, int V, float scale) {
    double l1 = 0, ps = 0;
    for (int i = 0; i < V; i++) {
        float d = p[i] - pt[i];
        l1 += fabsf(d);
        ps += d > 0 ? p[i] : d < 0 ? -p[i] : 0;
    }
    if (dz && scale != 0)
        for (int i = 0; i < V; i++) {
            float d = p[i] - pt[i], s = d > 0 ? 1.0f : d < 0 ? -1.0f : 0.0f;
            dz[i] += scale * p[i] * (s - (float)ps);
        }
    return (float)l1;
}

float bs_op_bce_logits(float *dx, float x, float t, float scale) {
    if (dx) *dx += scale * (sigm(x) - t);
    return (x > 0 ? x : 0) - x * t + log1pf(expf(-fabsf(x)));
}

// ---- Markov heads -------------------------------------------------------------------------------------------
// save per row:    gated [he = [h ; e] (H + r) | gate (r)];  rnn [z (2r + H) | proj (3r) | state s_k (r)]
// scratch per row: gated [dgate_raw (r) | dhe (H + r)];      rnn [dproj (3r) | block temporaries ds (r), dz (2r + H)]

int64_t bs_op_markov_save_per_row(const bs_op_markov *m) {
    if (m->type == BS_OP_MARKOV_GATED) return (int64_t)m->H + 2 * m->r;
    if (m->type == BS_OP_MARKOV_RNN) return (int64_t)6 * m->r + m->H;
    return 0;
}
int64_t bs_op_markov_scratch_per_row(const bs_op_markov *m) {
    if (m->type == BS_OP_MARKOV_GATED) return (int64_t)m->H + 2 * m->r;
    if (m->type == BS_OP_MARKOV_RNN) return (int64_t)6 * m->r + m->H;
    return 0;
}

typedef struct { const bs_op_markov *m; float *u, *save, *scratch, *dh, *de; const float *h, *e, *du; } markov_job;

static void rnn_fwd_task(void *ctx, int b, int nb) {
    const markov_job *j = ctx;
    const bs_op_markov *m = j->m;
    int r = m->r, H = m->H, zin = 2 * r + H;
    int64_t sp = bs_op_markov_save_per_row(m);
    for (int k = 0; k < m->B; k++) {
        size_t row = (size_t)b * m->B + k;
        float *z = j->save + row * sp, *proj = z + zin, *st = proj + 3 * r;
        const float *prev = k ? j->save + (row - 1) * sp + zin + 3 * r : NULL;
        for (int i = 0; i < r; i++) z[i] = prev ? prev[i] : 0.0f;
        memcpy(z + r, j->e + row * r, sizeof(float) * r);
        memcpy(z + 2 * r, j->h + row * H, sizeof(float) * H);
        for (int o = 0; o < 3 * r; o++) proj[o] = dotf(m->w + (size_t)o * zin, z, zin) + m->b[o];
        float *u = j->u + row * r;
        for (int i = 0; i < r; i++) {
            float g = sigm(proj[i]), c = tanhf(proj[r + i]);
            st[i] = g * z[i] + (1.0f - g) * c;
            u[i] = tanhf(proj[2 * r + i]);
        }
    }
}

void bs_op_markov_fwd(const bs_op_markov *m, float *u, float *save, const float *h, const float *e) {
    int n = m->n_rows, r = m->r, H = m->H;
    int64_t sp = bs_op_markov_save_per_row(m);
    if (m->type == BS_OP_MARKOV_VANILLA) { memcpy(u, e, sizeof(float) * (size_t)n * r); return; }
    if (m->type == BS_OP_MARKOV_GATED) {
        for (int i = 0; i < n; i++) {
            memcpy(save + (size_t)i * sp, h + (size_t)i * H, sizeof(float) * H);
            memcpy(save + (size_t)i * sp + H, e + (size_t)i * r, sizeof(float) * r);
        }
        linear_fwd_strided(save + H + r, (int)sp, save, (int)sp, m->w, m->b, n, H + r, r, 0);   // raw gate into the gate slot
        for (int i = 0; i < n; i++) {
            float *gate = save + (size_t)i * sp + H + r;
            for (int k = 0; k < r; k++) {
                gate[k] = sigm(gate[k]);
                u[(size_t)i * r + k] = gate[k] * e[(size_t)i * r + k];
            }
        }
        return;
    }
    markov_job j = { .m = m, .u = u, .save = save, .h = h, .e = e };
    bs_parallel_for(n / m->B, rnn_fwd_task, &j);
}

// RNN backward of one block, last step first: fills the block's dproj rows and adds dh, de. The state's
// gradient runs backwards through s_k = sg s_{k-1} + (1 - sg) c and through z's first r entries (s_{k-1}
// feeds the projection).
static void rnn_bwd_task(void *ctx, int b, int nb) {
    const markov_job *j = ctx;
    const bs_op_markov *m = j->m;
    int r = m->r, H = m->H, zin = 2 * r + H;
    int64_t sp = bs_op_markov_save_per_row(m), cp = bs_op_markov_scratch_per_row(m);
    float *ds = j->scratch + (size_t)b * m->B * cp + 3 * r, *dz = ds + r;   // in the block's first row
    for (int i = 0; i < r; i++) ds[i] = 0;
    for (int k = m->B - 1; k >= 0; k--) {
        size_t row = (size_t)b * m->B + k;
        const float *z = j->save + row * sp, *proj = z + zin;
        float *dp = j->scratch + row * cp;
        const float *du = j->du + row * r;
        for (int i = 0; i < r; i++) {
            float g = sigm(proj[i]), c = tanhf(proj[r + i]), uo = tanhf(proj[2 * r + i]);
            dp[2 * r + i] = du[i] * (1.0f - uo * uo);
            float dg = ds[i] * (z[i] - c), dc = ds[i] * (1.0f - g);
            dp[i] = dg * g * (1.0f - g);
            dp[r + i] = dc * (1.0f - c * c);
            ds[i] = ds[i] * g;   // the direct path s_{k-1} -> s_k
        }
        for (int c = 0; c < zin; c++) dz[c] = 0;   // dz = dproj Wj
        for (int o = 0; o < 3 * r; o++) {
            const float *w = m->w + (size_t)o * zin;
            float gr = dp[o];
            if (gr != 0) for (int c = 0; c < zin; c++) dz[c] += gr * w[c];
        }
        for (int i = 0; i < r; i++) ds[i] += dz[i];   // s_{k-1} also enters through z
        if (j->de) for (int i = 0; i < r; i++) j->de[row * r + i] += dz[r + i];
        if (j->dh) for (int i = 0; i < H; i++) j->dh[row * H + i] += dz[2 * r + i];
    }
}

void bs_op_markov_bwd(const bs_op_markov *m, float *dh, float *de, float *dw, float *db, float *scratch, const float *du,
                      const float *save, const float *h, const float *e) {
    int n = m->n_rows, r = m->r, H = m->H;
    int64_t sp = bs_op_markov_save_per_row(m), cp = bs_op_markov_scratch_per_row(m);
    if (m->type == BS_OP_MARKOV_VANILLA) {
        if (de) for (size_t i = 0; i < (size_t)n * r; i++) de[i] += du[i];
        return;
    }
    if (m->type == BS_OP_MARKOV_GATED) {
        // u = g * e, g = sigmoid(Wg he + bg): dg_raw = du e g (1 - g); de += du g (direct) + dhe's e part.
        for (int i = 0; i < n; i++) {
            const float *gate = save + (size_t)i * sp + H + r;
            float *dgr = scratch + (size_t)i * cp, *dhe = dgr + r;
            for (int k = 0; k < r; k++) {
                float g = gate[k], d = du[(size_t)i * r + k];
                dgr[k] = d * e[(size_t)i * r + k] * g * (1.0f - g);
                if (de) de[(size_t)i * r + k] += d * g;
            }
            for (int k = 0; k < H + r; k++) dhe[k] = 0;
        }
        gemm_acc(scratch + r, cp, scratch, cp, 1, m->w, H + r, n, H + r, r);       // dhe = dgr Wg
        if (dw) gemm_acc(dw, H + r, scratch, 1, cp, save, sp, r, H + r, n);        // dWg += dgr^T he
        for (int i = 0; i < n; i++) {
            const float *dgr = scratch + (size_t)i * cp, *dhe = dgr + r;
            if (db) for (int k = 0; k < r; k++) db[k] += dgr[k];
            if (dh) for (int k = 0; k < H; k++) dh[(size_t)i * H + k] += dhe[k];
            if (de) for (int k = 0; k < r; k++) de[(size_t)i * r + k] += dhe[H + k];
        }
        return;
    }
    markov_job j = { .m = m, .save = (float *)save, .scratch = scratch, .dh = dh, .de = de, .h = h, .e = e, .du = du };
    bs_parallel_for(n / m->B, rnn_bwd_task, &j);
    // dWj += dproj^T z, dbj += sum dproj (z read in place from the save rows)
    if (dw) gemm_acc(dw, 2 * r + H, scratch, 1, cp, save, sp, 3 * r, 2 * r + H, n);
    if (db)
        for (int i = 0; i < n; i++)
            for (int o = 0; o < 3 * r; o++) db[o] += scratch[(size_t)i * cp + o];
}
