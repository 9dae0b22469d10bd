// Finite-difference checks of every training op's backward (src/train/train_ops.c). Each op's output is
// reduced to a scalar loss = sum(c * y) with a fixed random c (in double); the backward is fed dy = c and its
// gradients are compared with central differences of that loss on a spread of coordinates of every input.
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "model/rope.h"
#include "train/train_ops.h"
#include "util/rng.h"

static void fill(float *x, int64_t n, bs_rng *r, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)((bs_rng_uniform(r) * 2 - 1) * scale);
}
static float *rnd(int64_t n, bs_rng *r, float scale) { float *x = malloc(sizeof(float) * (n > 0 ? n : 1)); fill(x, n, r, scale); return x; }
static float *zeros(int64_t n) { return calloc(n > 0 ? n : 1, sizeof(float)); }
static double dot_d(const float *a, const float *b, int64_t n) { double s = 0; for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i]; return s; }

typedef double (*loss_fn)(void *ctx);
// Central differences of f at up to 48 coordinates of x spread over it vs the analytic gradient g: the
// largest difference, relative to the largest |g| over the tensor, must stay below tol.
static int fd_check(const char *what, float *x, int64_t n, const float *g, loss_fn f, void *ctx, double eps, double tol, char *msg, size_t cap) {
    double gmax = 0;
    for (int64_t i = 0; i < n; i++) if (fabs(g[i]) > gmax) gmax = fabs(g[i]);
    if (gmax == 0) { snprintf(msg, cap, "%s: the analytic gradient is all zero", what); return -1; }
    int64_t step = n > 48 ? n / 48 : 1;
    for (int64_t i = 0; i < n; i += step) {
        float keep = x[i];
        x[i] = keep + (float)eps; double lp = f(ctx);
        x[i] = keep - (float)eps; double lm = f(ctx);
        x[i] = keep;
        double fd = (lp - lm) / (2 * eps);
        if (fabs(fd - g[i]) > tol * gmax) {
            snprintf(msg, cap, "%s[%lld]: finite difference %.6g, backward %.6g (max |grad| %.3g)", what, (long long)i, fd, g[i], gmax);
            return -1;
        }
    }
    return 0;
}
#define FD(what, x, n, g, f, ctx, eps, tol) do { char m_[300]; CHECK(fd_check(what, x, n, g, f, ctx, eps, tol, m_, sizeof m_) == 0, "%s", m_); } while (0)

// ---- linear -------------------------------------------------------------------------------------------------
typedef struct { float *x, *W, *b, *y, *c; int n, in, out; } lin_ctx;
static double lin_loss(void *p) {
    lin_ctx *t = p;
    bs_op_linear_fwd(t->y, t->x, t->W, t->b, t->n, t->in, t->out, 0);
    return dot_d(t->y, t->c, (int64_t)t->n * t->out);
}

TEST(train_op_linear_grad) {
    bs_rng r; bs_rng_seed(&r, 1);
    // shapes with tails in every tiled dimension (rows % 4, outputs % 2, in % 8, columns % 16)
    int shapes[][3] = { { 7, 37, 19 }, { 1, 8, 3 }, { 33, 70, 66 } };
    for (int s = 0; s < 3; s++) {
        lin_ctx t = { .n = shapes[s][0], .in = shapes[s][1], .out = shapes[s][2] };
        t.x = rnd((int64_t)t.n * t.in, &r, 1); t.W = rnd((int64_t)t.out * t.in, &r, 0.5f); t.b = rnd(t.out, &r, 1);
        t.y = zeros((int64_t)t.n * t.out); t.c = rnd((int64_t)t.n * t.out, &r, 1);
        float *dx = zeros((int64_t)t.n * t.in), *dW = zeros((int64_t)t.out * t.in), *db = zeros(t.out);
        // forward against a plain double loop
        lin_loss(&t);
        for (int i = 0; i < t.n; i++)
            for (int o = 0; o < t.out; o++) {
                double want = t.b[o];
                for (int k = 0; k < t.in; k++) want += (double)t.x[(size_t)i * t.in + k] * t.W[(size_t)o * t.in + k];
                CHECK_NEAR(t.y[(size_t)i * t.out + o], want, 1e-4, "y[%d][%d]", i, o);
            }
        bs_op_linear_bwd(dx, dW, db, t.c, t.x, t.W, t.n, t.in, t.out);
        FD("linear dx", t.x, (int64_t)t.n * t.in, dx, lin_loss, &t, 1e-2, 2e-3);
        FD("linear dW", t.W, (int64_t)t.out * t.in, dW, lin_loss, &t, 1e-2, 2e-3);
        FD("linear db", t.b, t.out, db, lin_loss, &t, 1e-2, 2e-3);
        // accumulate mode adds
        float y0 = t.y[0];
        bs_op_linear_fwd(t.y, t.x, t.W, t.b, t.n, t.in, t.out, 1);
        CHECK_NEAR(t.y[0], 2 * y0, 1e-4);
        free(t.x); free(t.W); free(t.b); free(t.y); free(t.c); free(dx); free(dW); free(db);
    }
}

// ---- embedding ----------------------------------------------------------------------------------------------
typedef struct { float *table, *y, *c; const int32_t *ids; int n, d; } emb_ctx;
static double emb_loss(void *p) { emb_ctx *t = p; bs_op_embed_fwd(t->y, t->table, t->ids, t->n, t->d); return dot_d(t->y, t->c, (int64_t)t->n * t->d); }

TEST(train_op_embed_grad) {
    bs_rng r; bs_rng_seed(&r, 2);
    int32_t ids[6] = { 3, 0, 3, 5, 1, 3 };   // repeated ids: their gradients add
    emb_ctx t = { .ids = ids, .n = 6, .d = 5 };
    t.table = rnd(7 * 5, &r, 1); t.y = zeros(30); t.c = rnd(30, &r, 1);
    float *g = zeros(35);
    bs_op_embed_bwd(g, t.c, ids, 6, 5);
    FD("embed dtable", t.table, 35, g, emb_loss, &t, 1e-2, 1e-3);
    free(t.table); free(t.y); free(t.c); free(g);
}

// ---- RMSNorm ------------------------------------------------------------------------------------------------
typedef struct { float *x, *w, *y, *rstd, *c; int n, d; } rms_ctx;
static double rms_loss(void *p) { rms_ctx *t = p; bs_op_rmsnorm_fwd(t->y, t->rstd, t->x, t->w, t->n, t->d, 1e-6f); return dot_d(t->y, t->c, (int64_t)t->n * t->d); }

TEST(train_op_rmsnorm_grad) {
    bs_rng r; bs_rng_seed(&r, 3);
    rms_ctx t = { .n = 5, .d = 24 };
    t.x = rnd(120, &r, 2); t.w = rnd(24, &r, 1.5f); t.y = zeros(120); t.rstd = zeros(5); t.c = rnd(120, &r, 1);
    float *dx = zeros(120), *dw = zeros(24);
    rms_loss(&t);
    bs_op_rmsnorm_bwd(dx, dw, t.c, t.x, t.w, t.rstd, t.n, t.d);
    FD("rmsnorm dx", t.x, 120, dx, rms_loss, &t, 1e-3, 2e-3);
    FD("rmsnorm dw", t.w, 24, dw, rms_loss, &t, 1e-3, 2e-3);
    free(t.x); free(t.w); free(t.y); free(t.rstd); free(t.c); free(dx); free(dw);
}

// ---- RoPE ---------------------------------------------------------------------------------------------------
typedef struct { float *x, *y, *c; const int32_t *pos; const float *inv; int n, heads, hd; } rope_ctx;
static double rope_loss(void *p) {
    rope_ctx *t = p;
    int64_t m = (int64_t)t->n * t->heads * t->hd;
    memcpy(t->y, t->x, sizeof(float) * m);
    bs_op_rope_fwd(t->y, t->pos, t->n, t->heads, t->hd, t->inv);
    return dot_d(t->y, t->c, m);
}

// Default RoPE and a llama3-scaled table (original_max 16 so that every region of the rule occurs at hd 8).
TEST(train_op_rope_grad) {
    bs_rope_scaling l3 = { BS_ROPE_LLAMA3, 8.0, 1.0, 4.0, 16 };
    for (int scaled = 0; scaled < 2; scaled++) {
        bs_rng r; bs_rng_seed(&r, 4);
        int32_t pos[4] = { 0, 7, 3, 1000 };
        float inv[4];
        bs_rope_inv_freqs(10000.0f, scaled ? &l3 : NULL, 8, inv);
        rope_ctx t = { .pos = pos, .inv = inv, .n = 4, .heads = 3, .hd = 8 };
        t.x = rnd(96, &r, 1); t.y = zeros(96); t.c = rnd(96, &r, 1);
        float *g = malloc(sizeof(float) * 96);
        memcpy(g, t.c, sizeof(float) * 96);
        bs_op_rope_bwd(g, pos, t.n, t.heads, t.hd, inv);
        FD(scaled ? "rope (llama3) dx" : "rope dx", t.x, 96, g, rope_loss, &t, 1e-2, 1e-3);
        // forward: position 0 is the identity, and the rotation keeps each pair's norm
        rope_loss(&t);
        for (int k = 0; k < 24; k++) CHECK_NEAR(t.y[k], t.x[k], 1e-7);
        free(t.x); free(t.y); free(t.c); free(g);
    }
}

// ---- attention ----------------------------------------------------------------------------------------------
typedef struct { float *q, *k, *v, *out, *lse, *c; const int32_t *kr; int nq, nk, nh, nkv, hd; } att_ctx;
static double att_loss(void *p) {
    att_ctx *t = p;
    bs_op_attention_fwd(t->out, t->lse, t->q, t->k, t->v, t->kr, t->nq, t->nk, t->nh, t->nkv, t->hd);
    return dot_d(t->out, t->c, (int64_t)t->nq * t->nh * t->hd);
}

// Dense reference: softmax over the keys the mask lets query i see (checked elementwise via a dense bool).
static int att_dense_check(att_ctx *t, const unsigned char *allowed, char *msg, size_t cap) {
    int qd = t->nh * t->hd, kd = t->nkv * t->hd, g = t->nh / t->nkv;
    for (int i = 0; i < t->nq; i++)
        for (int h = 0; h < t->nh; h++) {
            double mx = -1e300, s[64], sum = 0;
            for (int j = 0; j < t->nk; j++) {
                if (!allowed[i * t->nk + j]) continue;
                double d = 0;
                for (int e = 0; e < t->hd; e++) d += (double)t->q[i * qd + h * t->hd + e] * t->k[j * kd + (h / g) * t->hd + e];
                s[j] = d / sqrt((double)t->hd);
                if (s[j] > mx) mx = s[j];
            }
            for (int j = 0; j < t->nk; j++) if (allowed[i * t->nk + j]) sum += exp(s[j] - mx);
            for (int e = 0; e < t->hd; e++) {
                double o = 0;
                for (int j = 0; j < t->nk; j++) if (allowed[i * t->nk + j]) o += exp(s[j] - mx) / sum * t->v[j * kd + (h / g) * t->hd + e];
                if (fabs(o - t->out[i * qd + h * t->hd + e]) > 1e-5) {
                    snprintf(msg, cap, "out[%d][head %d][%d] = %g, dense reference %g", i, h, e, t->out[i * qd + h * t->hd + e], o);
                    return -1;
                }
            }
        }
    return 0;
}

static void att_case(int *failed_, att_ctx *t, const unsigned char *allowed, bs_rng *r) {
    int64_t nqd = (int64_t)t->nq * t->nh * t->hd, nkd = (int64_t)t->nk * t->nkv * t->hd;
    t->q = rnd(nqd, r, 1.5f); t->k = rnd(nkd, r, 1.5f); t->v = rnd(nkd, r, 1);
    t->out = zeros(nqd); t->lse = zeros((int64_t)t->nq * t->nh); t->c = rnd(nqd, r, 1);
    float *dq = zeros(nqd), *dk = zeros(nkd), *dv = zeros(nkd);
    att_loss(t);
    char msg[300];
    CHECK(att_dense_check(t, allowed, msg, sizeof msg) == 0, "%s", msg);
    bs_op_attention_bwd(dq, dk, dv, t->c, t->q, t->k, t->v, t->out, t->lse, t->kr, t->nq, t->nk, t->nh, t->nkv, t->hd);
    FD("attention dq", t->q, nqd, dq, att_loss, t, 1e-2, 3e-3);
    FD("attention dk", t->k, nkd, dk, att_loss, t, 1e-2, 3e-3);
    FD("attention dv", t->v, nkd, dv, att_loss, t, 1e-2, 3e-3);
    free(t->q); free(t->k); free(t->v); free(t->out); free(t->lse); free(t->c); free(dq); free(dk); free(dv);
}

TEST(train_op_attention_causal_grad) {
    bs_rng r; bs_rng_seed(&r, 5);
    int n = 9;
    int32_t kr[4 * 9];
    bs_mask_causal(kr, n);
    unsigned char allowed[81];
    for (int i = 0; i < n; i++) for (int j = 0; j < n; j++) allowed[i * n + j] = j <= i;
    att_ctx t = { .kr = kr, .nq = n, .nk = n, .nh = 4, .nkv = 2, .hd = 8 };
    att_case(failed_, &t, allowed, &r);
}

// The packed DSpark block mask, compared key by key with DeepSpec's create_dspark_attention_mask written out
// densely, then the gradients through it (a dummy block included: zero output, no gradient).
TEST(train_op_attention_dspark_mask_grad) {
    bs_rng r; bs_rng_seed(&r, 6);
    enum { S = 10, NB = 4, B = 3, NQ = NB * B, NK = S + NQ };
    int32_t anchor[NB] = { 2, 5, 0, 8 }, keep[NB] = { 1, 1, 0, 1 };
    int32_t kr[4 * NQ];
    bs_mask_dspark(kr, anchor, keep, NB, B, S);
    unsigned char allowed[NQ * NK];
    for (int q = 0; q < NQ; q++)
        for (int kv = 0; kv < NK; kv++) {
            int qb = q / B;
            int ctx = kv < S && kv < anchor[qb], drf = kv >= S && (kv - S) / B == qb;
            allowed[q * NK + kv] = (ctx || drf) && keep[qb];
            int in_ranges = (kv >= kr[4 * q] && kv < kr[4 * q + 1]) || (kv >= kr[4 * q + 2] && kv < kr[4 * q + 3]);
            CHECK(in_ranges == allowed[q * NK + kv], "query %d key %d: ranges say %d, DeepSpec's mask %d", q, kv, in_ranges, allowed[q * NK + kv]);
        }
    att_ctx t = { .kr = kr, .nq = NQ, .nk = NK, .nh = 4, .nkv = 1, .hd = 4 };
    att_case(failed_, &t, allowed, &r);
    if (*failed_) return;
    // the dummy block's rows are exactly zero
    t.q = rnd(NQ * 16, &r, 1); t.k = rnd(NK * 4, &r, 1); t.v = rnd(NK * 4, &r, 1); t.out = zeros(NQ * 16); t.lse = zeros(NQ * 4);
    bs_op_attention_fwd(t.out, t.lse, t.q, t.k, t.v, kr, NQ, NK, 4, 1, 4);
    for (int i = 2 * B * 16; i < 3 * B * 16; i++) CHECK(t.out[i] == 0, "dummy block output %d = %g", i, t.out[i]);
    free(t.q); free(t.k); free(t.v); free(t.out); free(t.lse);
}

// ---- SwiGLU -------------------------------------------------------------------------------------------------
typedef struct { float *g, *u, *h, *c; int n; } sw_ctx;
static double sw_loss(void *p) { sw_ctx *t = p; bs_op_swiglu_fwd(t->h, t->g, t->u, t->n); return dot_d(t->h, t->c, t->n); }

TEST(train_op_swiglu_grad) {
    bs_rng r; bs_rng_seed(&r, 7);
    sw_ctx t = { .n = 40 };
    t.g = rnd(40, &r, 3); t.u = rnd(40, &r, 2); t.h = zeros(40); t.c = rnd(40, &r, 1);
    float *dg = zeros(40), *du = zeros(40);
    bs_op_swiglu_bwd(dg, du, t.c, t.g, t.u, 40);
    FD("swiglu dg", t.g, 40, dg, sw_loss, &t, 1e-3, 1e-3);
    FD("swiglu du", t.u, 40, du, sw_loss, &t, 1e-3, 1e-3);
    free(t.g); free(t.u); free(t.h); free(t.c); free(dg); free(du);
}

// ---- losses -------------------------------------------------------------------------------------------------
typedef struct { float *z, *p, *pt; int V, label, which; float x, t; } loss_ctx;
static double loss_eval(void *p) {
    loss_ctx *c = p;
    float lse = bs_op_softmax(c->p, c->z, c->V);
    if (c->which == 0) return bs_op_ce(NULL, c->p, lse, c->z, c->label, c->V, 0);
    return bs_op_l1(NULL, c->p, c->pt, c->V, 0);
}

TEST(train_op_ce_l1_bce_grad) {
    bs_rng r; bs_rng_seed(&r, 8);
    int V = 50;
    loss_ctx c = { .V = V, .label = 17 };
    c.z = rnd(V, &r, 3); c.p = zeros(V); c.pt = zeros(V);
    float *zt = rnd(V, &r, 3);
    bs_op_softmax(c.pt, zt, V);
    float *g = zeros(V);
    // CE, with a scale (the position weight over the denominator)
    float lse = bs_op_softmax(c.p, c.z, V);
    double ce = bs_op_ce(g, c.p, lse, c.z, c.label, V, 1.0f);
    double sum = 0; for (int i = 0; i < V; i++) sum += exp((double)c.z[i]);
    double want = log(sum) - c.z[17];
    CHECK_NEAR(ce, want, 1e-5);
    c.which = 0;
    FD("ce dz", c.z, V, g, loss_eval, &c, 1e-3, 1e-3);
    // L1 between the softmaxes
    memset(g, 0, sizeof(float) * V);
    bs_op_softmax(c.p, c.z, V);
    double l1 = bs_op_l1(g, c.p, c.pt, V, 1.0f), wl1 = 0;
    for (int i = 0; i < V; i++) wl1 += fabs((double)c.p[i] - c.pt[i]);
    CHECK_NEAR(l1, wl1, 1e-5);
    c.which = 1;
    FD("l1 dz", c.z, V, g, loss_eval, &c, 1e-3, 2e-3);
    // BCE with logits at both signs and against the naive formula
    float xs[4] = { -3.5f, -0.2f, 0.7f, 4.0f }, ts[4] = { 0.1f, 0.9f, 0.5f, 0.3f };
    for (int k = 0; k < 4; k++) {
        float dx = 0;
        double b = bs_op_bce_logits(&dx, xs[k], ts[k], 1.0f);
        double s = 1 / (1 + exp(-(double)xs[k]));
        CHECK_NEAR(b, -(ts[k] * log(s) + (1 - ts[k]) * log(1 - s)), 1e-5);
        double h = 1e-3, fd = (bs_op_bce_logits(NULL, xs[k] + (float)h, ts[k], 1) - bs_op_bce_logits(NULL, xs[k] - (float)h, ts[k], 1)) / (2 * h);
        CHECK_NEAR(dx, fd, 1e-3);
    }
    free(c.z); free(c.p); free(c.pt); free(zt); free(g);
}

// ---- Markov heads -------------------------------------------------------------------------------------------
typedef struct { bs_op_markov m; float *h, *e, *u, *save, *c; } mk_ctx;
static double mk_loss(void *p) {
    mk_ctx *t = p;
    bs_op_markov_fwd(&t->m, t->u, t->save, t->h, t->e);
    return dot_d(t->u, t->c, (int64_t)t->m.n_rows * t->m.r);
}

static void markov_case(int *failed_, bs_op_markov_type type) {
    bs_rng r; bs_rng_seed(&r, 9 + type);
    int B = 4, nb = 3, n = B * nb, H = 12, rk = 5;
    mk_ctx t = { .m = { .type = type, .n_rows = n, .B = B, .H = H, .r = rk } };
    int64_t wn = type == BS_OP_MARKOV_GATED ? (int64_t)rk * (H + rk) : (int64_t)3 * rk * (2 * rk + H);
    int64_t bn = type == BS_OP_MARKOV_GATED ? rk : 3 * rk;
    float *w = rnd(wn, &r, 0.6f), *b = rnd(bn, &r, 0.5f);
    t.m.w = w; t.m.b = b;
    t.h = rnd((int64_t)n * H, &r, 1); t.e = rnd((int64_t)n * rk, &r, 1); t.u = zeros((int64_t)n * rk); t.c = rnd((int64_t)n * rk, &r, 1);
    t.save = zeros(n * bs_op_markov_save_per_row(&t.m));
    float *scratch = zeros(n * bs_op_markov_scratch_per_row(&t.m));
    float *dh = zeros((int64_t)n * H), *de = zeros((int64_t)n * rk), *dw = zeros(wn), *db = zeros(bn);
    mk_loss(&t);
    if (type == BS_OP_MARKOV_RNN) {   // the state carries within a block and restarts at 0 in the next
        // row 0 of block 1 must equal a fresh single-block run of that block's first row
        bs_op_markov m1 = t.m; m1.n_rows = B;
        float *u1 = zeros((int64_t)B * rk), *s1 = zeros(B * bs_op_markov_save_per_row(&m1));
        bs_op_markov_fwd(&m1, u1, s1, t.h + (size_t)B * H, t.e + (size_t)B * rk);
        for (int i = 0; i < B * rk; i++) CHECK_NEAR(u1[i], t.u[(size_t)B * rk + i], 1e-6, "rnn block restart");
        free(u1); free(s1);
    }
    bs_op_markov_bwd(&t.m, dh, de, type == BS_OP_MARKOV_VANILLA ? NULL : dw, type == BS_OP_MARKOV_VANILLA ? NULL : db, scratch, t.c, t.save, t.h, t.e);
    FD("markov de", t.e, (int64_t)n * rk, de, mk_loss, &t, 1e-3, 2e-3);
    if (type != BS_OP_MARKOV_VANILLA) {
        FD("markov dh", t.h, (int64_t)n * H, dh, mk_loss, &t, 1e-3, 2e-3);
        FD("markov dw", w, wn, dw, mk_loss, &t, 1e-3, 2e-3);
        FD("markov db", b, bn, db, mk_loss, &t, 1e-3, 2e-3);
    }
    free(w); free(b); free(t.h); free(t.e); free(t.u); free(t.c); free(t.save); free(scratch); free(dh); free(de); free(dw); free(db);
}
TEST(train_op_markov_vanilla_grad) { markov_case(failed_, BS_OP_MARKOV_VANILLA); }
TEST(train_op_markov_gated_grad) { markov_case(failed_, BS_OP_MARKOV_GATED); }
TEST(train_op_markov_rnn_grad) { markov_case(failed_, BS_OP_MARKOV_RNN); }
