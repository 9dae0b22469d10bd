// One decoder layer for training (train_layer.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/rope.h"
#include "train/train_dflash2_ops.h"
#include "train/train_layer.h"
#include "train/train_ops.h"

#define ZERO(p, count) memset((p), 0, sizeof(float) * (size_t)(count))

// Width of a DFlash 2 coefficient row: [2 stages][taps][groups] (0 without convolutions).
static size_t dyn_width(const bs_layer_shape *s) { return s->conv_taps ? (size_t)2 * s->conv_taps * (s->H / s->conv_group) : 0; }

bs_layer_shape bs_layer_shape_of(const bs_qwen3_config *c) {
    return (bs_layer_shape){ c->hidden_size, c->n_heads, c->n_kv_heads, c->head_dim, c->intermediate_size, c->rms_eps,
                             bs_qwen3_has_qk_norm(c), c->rope_theta, c->rope };
}

int bs_layer_act_alloc(bs_layer_act *a, const bs_layer_shape *s, int n, int m, bs_err *err) {
    memset(a, 0, sizeof *a);
    size_t N = n, K = (size_t)m + n, H = s->H, qd = (size_t)s->nh * s->hd, kd = (size_t)s->nkv * s->hd, I = s->I;
    struct { float **p; size_t count; } b[] = {
        { &a->xn, N * H }, { &a->rstd1, N }, { &a->q_pre, N * qd }, { &a->rstd_q, N * s->nh }, { &a->q, N * qd },
        { &a->k_pre, K * kd }, { &a->rstd_k, K * s->nkv }, { &a->k, K * kd }, { &a->v, K * kd },
        { &a->att, N * qd }, { &a->lse, N * s->nh }, { &a->x1, N * H }, { &a->xn2, N * H }, { &a->rstd2, N },
        { &a->g, N * I }, { &a->u, N * I }, { &a->hh, N * I }, { &a->out, N * H },
        { &a->dyn[0], N * dyn_width(s) }, { &a->dyn[1], N * dyn_width(s) }, { &a->cin[0], s->conv_taps ? N * H : 0 },
        { &a->cin[1], s->conv_taps ? N * H : 0 }, { &a->sub[0], s->conv_taps ? N * H : 0 }, { &a->sub[1], s->conv_taps ? N * H : 0 },
    };
    for (size_t i = 0; i < sizeof b / sizeof *b; i++)
        if (!(*b[i].p = bs_malloc(sizeof(float) * (b[i].count ? b[i].count : 1), err))) {
            bs_layer_act_free(a);
            return bs_wrap(err, "training activations for %d rows + %d context rows", n, m);
        }
    a->n_cap = n; a->m_cap = m;
    return 0;
}

void bs_layer_act_free(bs_layer_act *a) {
    float *b[] = { a->xn, a->rstd1, a->q_pre, a->rstd_q, a->q, a->k_pre, a->rstd_k, a->k, a->v, a->att, a->lse, a->x1, a->xn2,
                   a->rstd2, a->g, a->u, a->hh, a->out, a->dyn[0], a->dyn[1], a->cin[0], a->cin[1], a->sub[0], a->sub[1] };
    for (size_t i = 0; i < sizeof b / sizeof *b; i++) free(b[i]);
    memset(a, 0, sizeof *a);
}

int bs_layer_grad_alloc(bs_layer_grad *g, const bs_layer_shape *s, int n, int m, bs_err *err) {
    memset(g, 0, sizeof *g);
    size_t N = n, K = (size_t)m + n, H = s->H, qd = (size_t)s->nh * s->hd, kd = (size_t)s->nkv * s->hd, I = s->I;
    struct { float **p; size_t count; } b[] = {
        { &g->dx1, N * H }, { &g->dxn, N * H }, { &g->datt, N * qd }, { &g->dq, N * qd }, { &g->dq_pre, N * qd },
        { &g->dk, K * kd }, { &g->dk_pre, K * kd }, { &g->dv, K * kd }, { &g->dhh, N * I }, { &g->dg, N * I }, { &g->du, N * I },
        { &g->dsub, s->conv_taps ? N * H : 0 }, { &g->dcin, s->conv_taps ? N * H : 0 }, { &g->ddyn, N * dyn_width(s) },
    };
    for (size_t i = 0; i < sizeof b / sizeof *b; i++)
        if (!(*b[i].p = bs_malloc(sizeof(float) * (b[i].count ? b[i].count : 1), err))) {
            bs_layer_grad_free(g);
            return bs_wrap(err, "training gradient scratch for %d rows + %d context rows", n, m);
        }
    g->n_cap = n; g->m_cap = m;
    return 0;
}

void bs_layer_grad_free(bs_layer_grad *g) {
    float *b[] = { g->dx1, g->dxn, g->datt, g->dq, g->dq_pre, g->dk, g->dk_pre, g->dv, g->dhh, g->dg, g->du, g->dsub, g->dcin, g->ddyn };
    for (size_t i = 0; i < sizeof b / sizeof *b; i++) free(b[i]);
    memset(g, 0, sizeof *g);
}

// ---- DFlash 2's convolutions around sublayer `site` (0: attention, 1: MLP) ----------------------------------------
// Stage 0: the site's coefficients from its normed input xn, and cin = Conv_0(xn) (what the sublayer reads).
static void conv_in_fwd(const bs_layer_shape *s, const bs_layer_w *w, bs_layer_act *a, int site, const float *xn, int n) {
    int H = s->H, dw = (int)dyn_width(s);
    bs_op_linear_fwd(a->dyn[site], xn, w->conv_proj[site], NULL, n, H, dw, 0);
    bs_op_dyn_conv_fwd(a->cin[site], xn, n, H, s->conv_block, s->conv_taps, w->conv_base[site], a->dyn[site], dw, s->conv_group, 0);
}
// Stage 1: the residual stream y gains Conv_1(sub) (sub: the sublayer's output), with the same coefficients.
static void conv_out_fwd(const bs_layer_shape *s, const bs_layer_w *w, const bs_layer_act *a, int site, float *y, int n) {
    int H = s->H, dw = (int)dyn_width(s), T = s->conv_taps;
    bs_op_dyn_conv_fwd(y, a->sub[site], n, H, s->conv_block, T, w->conv_base[site] + (size_t)T * H, a->dyn[site] + (size_t)T * (H / s->conv_group),
                       dw, s->conv_group, 1);
}
// Backward of stage 1: dy (the residual's gradient) -> gw->dsub (overwritten); starts the site's coefficient
// gradient gw->ddyn (overwritten) and adds the stage's base-kernel gradient.
static void conv_out_bwd(const bs_layer_shape *s, const bs_layer_w *w, const bs_layer_act *a, bs_layer_grad *gw, int site, const float *dy, int n) {
    int H = s->H, dw = (int)dyn_width(s), T = s->conv_taps;
    ZERO(gw->dsub, (size_t)n * H);
    ZERO(gw->ddyn, (size_t)n * dw);
    bs_op_dyn_conv_bwd(gw->dsub, w->g_conv_base[site] ? w->g_conv_base[site] + (size_t)T * H : NULL, gw->ddyn + (size_t)T * (H / s->conv_group), dy,
                       a->sub[site], w->conv_base[site] + (size_t)T * H, a->dyn[site] + (size_t)T * (H / s->conv_group), n, H, s->conv_block, T, dw,
                       s->conv_group);
}
// Backward of stage 0 and of the coefficients: gw->dcin (the sublayer input's gradient) -> dxn (added into),
// with the coefficients' gradient (both stages, in gw->ddyn) through kernel_projection.
static void conv_in_bwd(const bs_layer_shape *s, const bs_layer_w *w, const bs_layer_act *a, bs_layer_grad *gw, int site, const float *xn,
                        float *dxn, int n) {
    int H = s->H, dw = (int)dyn_width(s);
    bs_op_dyn_conv_bwd(dxn, w->g_conv_base[site], gw->ddyn, gw->dcin, xn, w->conv_base[site], a->dyn[site], n, H, s->conv_block, s->conv_taps, dw,
                       s->conv_group);
    bs_op_linear_bwd(dxn, w->g_conv_proj[site], NULL, gw->ddyn, xn, w->conv_proj[site], n, H, dw);
}

void bs_layer_fwd(const bs_layer_shape *s, const bs_layer_w *w, bs_layer_act *a, const float *x, int n, const float *ctx, int m,
                  const int32_t *qpos, const int32_t *kpos, const int32_t *kr) {
    int H = s->H, qd = s->nh * s->hd, kd = s->nkv * s->hd, I = s->I, K = m + n;
    float inv[s->hd / 2];
    bs_rope_inv_freqs(s->theta, &s->rope, s->hd, inv);
    a->x_in = x;
    int cv = s->conv_taps > 0;
    bs_op_rmsnorm_fwd(a->xn, a->rstd1, x, w->ln1, n, H, s->eps);
    if (cv) conv_in_fwd(s, w, a, 0, a->xn, n);
    const float *ain = cv ? a->cin[0] : a->xn;   // what the attention's projections read
    // queries: projection, per-head norm, RoPE (q_pre kept for the norm's backward)
    bs_op_linear_fwd(a->q_pre, ain, w->wq, NULL, n, H, qd, 0);
    if (s->qk_norm) bs_op_rmsnorm_fwd(a->q, a->rstd_q, a->q_pre, w->qn, n * s->nh, s->hd, s->eps);
    else memcpy(a->q, a->q_pre, sizeof(float) * (size_t)n * qd);
    bs_op_rope_fwd(a->q, qpos, n, s->nh, s->hd, inv);
    // keys and values: [context ; own rows]
    if (m > 0) {
        bs_op_linear_fwd(a->k_pre, ctx, w->wk, NULL, m, H, kd, 0);
        bs_op_linear_fwd(a->v, ctx, w->wv, NULL, m, H, kd, 0);
    }
    bs_op_linear_fwd(a->k_pre + (size_t)m * kd, ain, w->wk, NULL, n, H, kd, 0);
    bs_op_linear_fwd(a->v + (size_t)m * kd, ain, w->wv, NULL, n, H, kd, 0);
    if (s->qk_norm) bs_op_rmsnorm_fwd(a->k, a->rstd_k, a->k_pre, w->kn, K * s->nkv, s->hd, s->eps);
    else memcpy(a->k, a->k_pre, sizeof(float) * (size_t)K * kd);
    bs_op_rope_fwd(a->k, kpos, K, s->nkv, s->hd, inv);
    bs_op_attention_fwd(a->att, a->lse, a->q, a->k, a->v, kr, n, K, s->nh, s->nkv, s->hd);
    memcpy(a->x1, x, sizeof(float) * (size_t)n * H);
    if (cv) {
        bs_op_linear_fwd(a->sub[0], a->att, w->wo, NULL, n, qd, H, 0);
        conv_out_fwd(s, w, a, 0, a->x1, n);
    } else bs_op_linear_fwd(a->x1, a->att, w->wo, NULL, n, qd, H, 1);
    // MLP
    bs_op_rmsnorm_fwd(a->xn2, a->rstd2, a->x1, w->ln2, n, H, s->eps);
    if (cv) conv_in_fwd(s, w, a, 1, a->xn2, n);
    const float *min = cv ? a->cin[1] : a->xn2;
    bs_op_linear_fwd(a->g, min, w->wg, NULL, n, H, I, 0);
    bs_op_linear_fwd(a->u, min, w->wu, NULL, n, H, I, 0);
    bs_op_swiglu_fwd(a->hh, a->g, a->u, (int64_t)n * I);
    memcpy(a->out, a->x1, sizeof(float) * (size_t)n * H);
    if (cv) {
        bs_op_linear_fwd(a->sub[1], a->hh, w->wd, NULL, n, I, H, 0);
        conv_out_fwd(s, w, a, 1, a->out, n);
    } else bs_op_linear_fwd(a->out, a->hh, w->wd, NULL, n, I, H, 1);
}

void bs_layer_bwd(const bs_layer_shape *s, const bs_layer_w *w, const bs_layer_act *a, bs_layer_grad *gw, float *dx, float *dctx,
                  const float *ctx, int n, int m, const int32_t *qpos, const int32_t *kpos, const int32_t *kr) {
    int H = s->H, qd = s->nh * s->hd, kd = s->nkv * s->hd, I = s->I, K = m + n;
    float inv[s->hd / 2];
    bs_rope_inv_freqs(s->theta, &s->rope, s->hd, inv);
    int cv = s->conv_taps > 0;
    // out = x1 + hh Wd^T (DFlash 2: x1 + Conv_1(hh Wd^T))
    memcpy(gw->dx1, dx, sizeof(float) * (size_t)n * H);
    if (cv) conv_out_bwd(s, w, a, gw, 1, dx, n);
    ZERO(gw->dhh, (size_t)n * I);
    bs_op_linear_bwd(gw->dhh, w->g_wd, NULL, cv ? gw->dsub : dx, a->hh, w->wd, n, I, H);
    ZERO(gw->dg, (size_t)n * I); ZERO(gw->du, (size_t)n * I);
    bs_op_swiglu_bwd(gw->dg, gw->du, gw->dhh, a->g, a->u, (int64_t)n * I);
    float *dmin = cv ? gw->dcin : gw->dxn;   // the gradient of what gate / up read
    ZERO(dmin, (size_t)n * H);
    bs_op_linear_bwd(dmin, w->g_wg, NULL, gw->dg, cv ? a->cin[1] : a->xn2, w->wg, n, H, I);
    bs_op_linear_bwd(dmin, w->g_wu, NULL, gw->du, cv ? a->cin[1] : a->xn2, w->wu, n, H, I);
    if (cv) { ZERO(gw->dxn, (size_t)n * H); conv_in_bwd(s, w, a, gw, 1, a->xn2, gw->dxn, n); }
    bs_op_rmsnorm_bwd(gw->dx1, w->g_ln2, gw->dxn, a->x1, w->ln2, a->rstd2, n, H);
    // x1 = x + att Wo^T (DFlash 2: x + Conv_1(att Wo^T))
    if (cv) conv_out_bwd(s, w, a, gw, 0, gw->dx1, n);
    ZERO(gw->datt, (size_t)n * qd);
    bs_op_linear_bwd(gw->datt, w->g_wo, NULL, cv ? gw->dsub : gw->dx1, a->att, w->wo, n, qd, H);
    ZERO(gw->dq, (size_t)n * qd); ZERO(gw->dk, (size_t)K * kd); ZERO(gw->dv, (size_t)K * kd);
    bs_op_attention_bwd(gw->dq, gw->dk, gw->dv, gw->datt, a->q, a->k, a->v, a->att, a->lse, kr, n, K, s->nh, s->nkv, s->hd);
    bs_op_rope_bwd(gw->dq, qpos, n, s->nh, s->hd, inv);
    bs_op_rope_bwd(gw->dk, kpos, K, s->nkv, s->hd, inv);
    // through the q/k norm to the projections (without it, the rotated gradient is the projection's)
    const float *dq_pre = gw->dq, *dk_pre = gw->dk;
    if (s->qk_norm) {
        ZERO(gw->dq_pre, (size_t)n * qd); ZERO(gw->dk_pre, (size_t)K * kd);
        bs_op_rmsnorm_bwd(gw->dq_pre, w->g_qn, gw->dq, a->q_pre, w->qn, a->rstd_q, n * s->nh, s->hd);
        bs_op_rmsnorm_bwd(gw->dk_pre, w->g_kn, gw->dk, a->k_pre, w->kn, a->rstd_k, K * s->nkv, s->hd);
        dq_pre = gw->dq_pre; dk_pre = gw->dk_pre;
    }
    // projections of the own rows (from Conv_0(xn) in DFlash 2)
    float *dain = cv ? gw->dcin : gw->dxn;
    const float *ain = cv ? a->cin[0] : a->xn;
    ZERO(dain, (size_t)n * H);
    bs_op_linear_bwd(dain, w->g_wq, NULL, dq_pre, ain, w->wq, n, H, qd);
    bs_op_linear_bwd(dain, w->g_wk, NULL, dk_pre + (size_t)m * kd, ain, w->wk, n, H, kd);
    bs_op_linear_bwd(dain, w->g_wv, NULL, gw->dv + (size_t)m * kd, ain, w->wv, n, H, kd);
    if (cv) { ZERO(gw->dxn, (size_t)n * H); conv_in_bwd(s, w, a, gw, 0, a->xn, gw->dxn, n); }
    // ... and of the context rows
    if (m > 0) {
        bs_op_linear_bwd(dctx, w->g_wk, NULL, dk_pre, ctx, w->wk, m, H, kd);
        bs_op_linear_bwd(dctx, w->g_wv, NULL, gw->dv, ctx, w->wv, m, H, kd);
    }
    // x1's gradient flows on to x through the residual and through the input norm
    memcpy(dx, gw->dx1, sizeof(float) * (size_t)n * H);
    bs_op_rmsnorm_bwd(dx, w->g_ln1, gw->dxn, a->x_in, w->ln1, a->rstd1, n, H);
}

double bs_layer_flops(const bs_layer_shape *s, int n, int m, double attended) {
    double H = s->H, qd = (double)s->nh * s->hd, kd = (double)s->nkv * s->hd, I = s->I;
    double proj = (double)n * (H * qd + 2 * H * kd + qd * H + 3 * H * I + 2 * H * dyn_width(s)) + (double)m * 2 * H * kd;
    return 2 * proj + 2 * 2 * attended * s->nh * s->hd;
}

static const char *const layer_names[11] = {
    "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight", "post_attention_layernorm.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
};

int bs_layer_params_add(bs_param_set *ps, const char *prefix, const bs_layer_shape *s, int trainable, bs_err *err) {
    int64_t qd = (int64_t)s->nh * s->hd, kd = (int64_t)s->nkv * s->hd;
    int64_t shapes[11][2] = { { s->H, 0 }, { qd, s->H }, { kd, s->H }, { kd, s->H }, { s->H, qd }, { s->hd, 0 }, { s->hd, 0 },
                              { s->H, 0 }, { s->I, s->H }, { s->I, s->H }, { s->H, s->I } };
    for (int i = 0; i < 11; i++) {
        if (!s->qk_norm && (i == 5 || i == 6)) continue;   // Llama: no q_norm / k_norm
        char name[BS_PARAM_NAME_MAX];
        snprintf(name, sizeof name, "%s%s", prefix, layer_names[i]);
        int mat = shapes[i][1] > 0;
        if (bs_param_add(ps, name, mat ? 2 : 1, shapes[i], trainable, mat, err) < 0) return -1;
    }
    return 0;
}

int bs_layer_conv_params_add(bs_param_set *ps, const char *prefix, const bs_layer_shape *s, int trainable, bs_err *err) {
    for (int site = 0; site < 2; site++) {
        char name[BS_PARAM_NAME_MAX];
        snprintf(name, sizeof name, "%s%s_conv.base_kernel", prefix, site ? "mlp" : "attention");
        if (bs_param_add(ps, name, 3, (int64_t[]){ 2, s->conv_taps, s->H }, trainable, 0, err) < 0) return -1;
        snprintf(name, sizeof name, "%s%s_conv.kernel_projection.weight", prefix, site ? "mlp" : "attention");
        if (bs_param_add(ps, name, 2, (int64_t[]){ (int64_t)dyn_width(s), s->H }, trainable, 1, err) < 0) return -1;
    }
    return 0;
}

void bs_layer_w_bind(bs_layer_w *w, const bs_param_set *ps, const char *prefix) {
    float **ws[11] = { &w->ln1, &w->wq, &w->wk, &w->wv, &w->wo, &w->qn, &w->kn, &w->ln2, &w->wg, &w->wu, &w->wd };
    float **gs[11] = { &w->g_ln1, &w->g_wq, &w->g_wk, &w->g_wv, &w->g_wo, &w->g_qn, &w->g_kn, &w->g_ln2, &w->g_wg, &w->g_wu, &w->g_wd };
    for (int i = 0; i < 11; i++) {
        char name[BS_PARAM_NAME_MAX];
        snprintf(name, sizeof name, "%s%s", prefix, layer_names[i]);
        bs_param *p = bs_param_find(ps, name);
        *ws[i] = p ? p->w : NULL;
        *gs[i] = p ? p->g : NULL;
    }
    for (int site = 0; site < 2; site++) {   // DFlash 2's (absent: NULL)
        char name[BS_PARAM_NAME_MAX];
        snprintf(name, sizeof name, "%s%s_conv.base_kernel", prefix, site ? "mlp" : "attention");
        bs_param *p = bs_param_find(ps, name);
        w->conv_base[site] = p ? p->w : NULL; w->g_conv_base[site] = p ? p->g : NULL;
        snprintf(name, sizeof name, "%s%s_conv.kernel_projection.weight", prefix, site ? "mlp" : "attention");
        p = bs_param_find(ps, name);
        w->conv_proj[site] = p ? p->w : NULL; w->g_conv_proj[site] = p ? p->g : NULL;
    }
}
