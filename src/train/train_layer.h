// One decoder layer for training (CPU fp32): forward keeping what the backward needs, and the backward.
// Qwen3's layer, and Llama-3.x's, which is the same without the per-head q/k norm (docs/targets.md), with
// the model's RoPE table (default or llama3-scaled, as the engine builds it). The same layer serves the
// target (causal mask, no context rows) and the block drafters (DFlash / DSpark: m context rows c projected
// by the layer's own k_proj / v_proj (+ k_norm, RoPE) and placed before the block's keys, [context ; block],
// docs/dflash-dspark.md 2.5 and 7.3; drafter layers are always Qwen3's, whatever the target).
//
//   xn = RMSNorm_in(x); q = rope(q_norm(xn Wq^T)); K = rope(k_norm([c ; xn] Wk^T)); V = [c ; xn] Wv^T
//   x1 = x + attention(q, K, V, mask) Wo^T;  out = x1 + (silu(xn2 Wg^T) * (xn2 Wu^T)) Wd^T, xn2 = RMSNorm_post(x1)
//   (no q_norm / k_norm when qk_norm is 0)
// DFlash 2 (conv_taps > 0; docs/dflash2.md): each sublayer reads Conv_0 of its normed input and the residual
// stream gains Conv_1 of its output, both with per-row coefficients D = kernel_projection(normed input):
//   D = xn Wkp_a^T; a = Conv_0(xn); q/k/v from a; x1 = x + Conv_1(att Wo^T)
//   D' = xn2 Wkp_m^T; u = Conv_0(xn2); out = x1 + Conv_1((silu(u Wg^T) * (u Wu^T)) Wd^T)
// (train_dflash2_ops.h; the context rows' K/V are projected from c directly, as in the engine).
#pragma once
#include <stdint.h>
#include "io/config.h"
#include "util/err.h"

typedef struct {
    int H, nh, nkv, hd, I;
    float eps;
    int qk_norm;                 // 1: q_norm / k_norm (Qwen3, every drafter); 0: none (Llama)
    float theta;                 // RoPE: rope_theta and the scaling (the table is bs_rope_inv_freqs of both)
    bs_rope_scaling rope;
    int conv_taps, conv_group, conv_block;   // DFlash 2's convolutions (0: none); rows come in blocks of conv_block
} bs_layer_shape;

// The layer shape of a config (target or drafter backbone): sizes, eps, RoPE, and q/k norm by its family.
bs_layer_shape bs_layer_shape_of(const bs_qwen3_config *c);

// A layer's weights (fp32, [out][in]) and their gradients (NULL when frozen: nothing is accumulated).
typedef struct {
    float *ln1, *wq, *wk, *wv, *wo, *qn, *kn, *ln2, *wg, *wu, *wd;
    float *g_ln1, *g_wq, *g_wk, *g_wv, *g_wo, *g_qn, *g_kn, *g_ln2, *g_wg, *g_wu, *g_wd;
    // DFlash 2, per site (0: attention, 1: MLP): base kernels [2 stages][taps][H], kernel_projection
    // [2 * taps * G][H] (its output row read as [stage][tap][group]); NULL without convolutions
    float *conv_base[2], *conv_proj[2], *g_conv_base[2], *g_conv_proj[2];
} bs_layer_w;

// Activations of one layer for up to n_cap rows and m_cap context rows.
typedef struct {
    int n_cap, m_cap;
    const float *x_in;                     // [n][H] the layer's input (owned by the caller: the previous layer's out)
    float *xn, *rstd1;                     // [n][H], [n]
    float *q_pre, *rstd_q, *q;             // [n][nh*hd] before the norm, [n*nh], after norm + RoPE
    float *k_pre, *rstd_k, *k, *v;         // [m+n][nkv*hd] (context rows first), [(m+n)*nkv]
    float *att, *lse;                      // [n][nh*hd], [n][nh]
    float *x1, *xn2, *rstd2;               // [n][H], [n][H], [n]
    float *g, *u, *hh;                     // [n][I]
    float *out;                            // [n][H]
    // DFlash 2, per site: coefficients [n][2 * taps * G], Conv_0 of the normed input (what the sublayer reads)
    // and the sublayer's output before Conv_1, [n][H] each
    float *dyn[2], *cin[2], *sub[2];
} bs_layer_act;

// Gradient scratch shared by all layers of a model (sized like one layer's activations).
typedef struct {
    int n_cap, m_cap;
    float *dx1, *dxn, *datt, *dq, *dq_pre, *dk, *dk_pre, *dv, *dhh, *dg, *du;
    float *dsub, *dcin, *ddyn;             // DFlash 2 ([n][H], [n][H], [n][2 * taps * G])
} bs_layer_grad;

int bs_layer_act_alloc(bs_layer_act *a, const bs_layer_shape *s, int n, int m, bs_err *err);
void bs_layer_act_free(bs_layer_act *a);
int bs_layer_grad_alloc(bs_layer_grad *g, const bs_layer_shape *s, int n, int m, bs_err *err);
void bs_layer_grad_free(bs_layer_grad *g);

// Forward of n rows x (positions qpos) after m context rows ctx (positions kpos[0..m), may be NULL when m == 0).
// kpos [m + n]: every key row's position (context rows, then the n rows: kpos[m + i] = qpos[i]).
// kr: the attention mask as per-query key ranges over the m + n keys (train_ops.h). Result in a->out.
void bs_layer_fwd(const bs_layer_shape *s, const bs_layer_w *w, bs_layer_act *a, const float *x, int n, const float *ctx, int m,
                  const int32_t *qpos, const int32_t *kpos, const int32_t *kr);
// Backward: dx holds d(out) on entry and d(x) on return (in place). dctx [m][H] is added into (NULL: not
// needed); the weights' gradients are added into w's g_ pointers. ctx must be the forward's context rows.
void bs_layer_bwd(const bs_layer_shape *s, const bs_layer_w *w, const bs_layer_act *a, bs_layer_grad *gw, float *dx, float *dctx,
                  const float *ctx, int n, int m, const int32_t *qpos, const int32_t *kpos, const int32_t *kr);

// Forward FLOPs of one layer over n rows with m context rows, whose queries see `attended` keys in total
// (summed over queries): 2 per multiply-add.
double bs_layer_flops(const bs_layer_shape *s, int n, int m, double attended);

// Adds the layer's tensors (eleven; nine without q/k norm) to a parameter set under prefix + the transformers
// names ("input_layernorm.weight", "self_attn.q_proj.weight", ...); matrices decay, norm gains do not.
#include "train/params.h"
int bs_layer_params_add(bs_param_set *ps, const char *prefix, const bs_layer_shape *s, int trainable, bs_err *err);
// DFlash 2: the layer's four convolution tensors, {attention,mlp}_conv.base_kernel (no decay) and
// .kernel_projection.weight. Separate so a drafter can add them after all layers: the eleven of every layer
// then stay evenly spaced in the set, as the GPU trainer indexes them (td_shape.i_layer0 + 11 l + k).
int bs_layer_conv_params_add(bs_param_set *ps, const char *prefix, const bs_layer_shape *s, int trainable, bs_err *err);
// Points w at those tensors (call after the set is complete); frozen tensors leave their g_ NULL, absent ones
// (q/k norm of a Llama layer) both.
void bs_layer_w_bind(bs_layer_w *w, const bs_param_set *ps, const char *prefix);
