// Training ops, CPU fp32 reference path: each op is a forward and a backward over plain float arrays with
// explicit shapes (llm.c's train_gpt2.c style), so the CUDA path can mirror them one for one.
//
// Conventions:
//   - rows are contiguous, row-major; a matrix W is stored [out][in] like the checkpoints (y = x W^T).
//   - every backward ADDS into its gradient outputs (dx, dW, ...): callers zero them once, and a tensor read
//     by several ops (a residual stream, the context rows every drafter layer projects) simply collects the
//     sum. A NULL gradient pointer skips that gradient (frozen weights, inputs nobody needs).
//   - what a backward needs from its forward is either an input the caller keeps or a small "save" array
//     named in the signature (RMSNorm's 1/rms per row, attention's log-sum-exp per query and head).
#pragma once
#include <stdint.h>

// ---- embedding ----------------------------------------------------------------------------------------------
// out[i] = table[ids[i]] ([n][d]).
void bs_op_embed_fwd(float *out, const float *table, const int32_t *ids, int n, int d);
// dtable[ids[i]] += dout[i].
void bs_op_embed_bwd(float *dtable, const float *dout, const int32_t *ids, int n, int d);

// ---- linear: y[n][out] = x[n][in] W[out][in]^T (+ b[out]) -----------------------------------------------------
// accumulate: 1 adds into y instead of overwriting it. Multithreaded over row and output tiles.
void bs_op_linear_fwd(float *y, const float *x, const float *W, const float *b, int n, int in, int out, int accumulate);
// dx[n][in] += dy W; dW[out][in] += dy^T x; db[out] += sum over rows of dy. Any of dx, dW, db may be NULL.
void bs_op_linear_bwd(float *dx, float *dW, float *db, const float *dy, const float *x, const float *W, int n, int in, int out);

// ---- RMSNorm over the last dim d (n rows): y = w * x / sqrt(mean(x^2) + eps) ------------------------------------
// Per-head q/k norm is the same op over n * heads rows of d = head_dim. rstd[n] is saved for the backward.
// y may alias x.
void bs_op_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int n, int d, float eps);
void bs_op_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w, const float *rstd, int n, int d);

// ---- RoPE, rotate-half (NeoX) style, in place ----------------------------------------------------------------
// x [n][heads * hd]; row i is at position pos[i]; inv_freq [hd/2]: the model's table, as the engine builds it
// (bs_rope_inv_freqs, src/model/rope.h: default or llama3-scaled, fp32); angle = (float)pos * inv_freq[k],
// x' = x cos + rotate_half(x) sin.
void bs_op_rope_fwd(float *x, const int32_t *pos, int n, int heads, int hd, const float *inv_freq);
// The transpose rotation applied to a gradient in place (dx = R^T dy).
void bs_op_rope_bwd(float *dx, const int32_t *pos, int n, int heads, int hd, const float *inv_freq);

// ---- attention with GQA and a per-query key-range mask ------------------------------------------------------
// q [nq][nh*hd], k/v [nk][nkv*hd], out [nq][nh*hd]; query head h reads kv head h / (nh / nkv); scale hd^-0.5.
// Query i sees keys [kr[4i], kr[4i+1]) and [kr[4i+2], kr[4i+3]) (empty ranges: lo >= hi). A query that sees
// no key gets a zero output (as flex attention returns for fully masked rows). lse[nq][nh] is saved (-inf for
// empty rows). Masks are built by the helpers below, never as a dense nq x nk matrix.
void bs_op_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v, const int32_t *kr,
                         int nq, int nk, int nh, int nkv, int hd);
// dq [nq][nh*hd], dk/dv [nk][nkv*hd] (added into); out and lse from the forward.
void bs_op_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k, const float *v,
                         const float *out, const float *lse, const int32_t *kr, int nq, int nk, int nh, int nkv, int hd);
// Causal mask of a target: query i (at key index i) sees keys [0, i].
void bs_mask_causal(int32_t *kr, int nq);
// DeepSpec's create_dspark_attention_mask for n_blocks packed blocks of B rows after S context keys:
// query (b, j) sees context keys [0, anchor[b]) and its own block's keys [S + bB, S + (b+1)B); a block with
// keep[b] == 0 sees nothing.
void bs_mask_dspark(int32_t *kr, const int32_t *anchor, const int32_t *keep, int n_blocks, int B, int S);

// ---- SwiGLU: h = silu(g) * u ---------------------------------------------------------------------------------
void bs_op_swiglu_fwd(float *h, const float *g, const float *u, int64_t n);
void bs_op_swiglu_bwd(float *dg, float *du, const float *dh, const float *g, const float *u, int64_t n);

// ---- losses on one row of V logits ----------------------------------------------------------------------------
// p = softmax(z); returns log(sum(exp(z))).
float bs_op_softmax(float *p, const float *z, int V);
// Cross-entropy -log softmax(z)[label] = lse - z[label], given p = softmax(z) and lse; dz += scale * (p - onehot).
float bs_op_ce(float *dz, const float *p, float lse, const float *z, int label, int V, float scale);
// L1 distance sum |p - pt| between p = softmax(z) and a fixed distribution pt (DeepSpec's "l1" = 2 x TV; no
// gradient into pt); dz += scale * p * (s - sum(p s)) with s = sign(p - pt) (sign(0) = 0, as torch's abs).
float bs_op_l1(float *dz, const float *p, const float *pt, int V, float scale);
// Binary cross-entropy with logits (torch's stable form) of a logit x against a target t in [0, 1];
// *dx += scale * (sigmoid(x) - t) when dx is not NULL.
float bs_op_bce_logits(float *dx, float x, float t, float scale);

// ---- DeepSpec's Markov heads, teacher forced --------------------------------------------------------------
// Rows come in blocks of B (row b*B + k is draft position k of block b). Inputs per row: e = W1[x_{k-1}] [r]
// and h = the backbone row after the final norm [H]. Output per row: u [r], the vector the head's W2 maps
// to the logit bias (bias = W2 u):
//   vanilla  u = e
//   gated    u = sigmoid(Wg [h ; e] + bg) * e
//   rnn      z = [s_{k-1} ; e ; h] (s_{-1} = 0), [g ; c ; o] = Wj z + bj, s_k = sg s_{k-1} + (1 - sg) tanh(c)
//            with sg = sigmoid(g), u = tanh(o)
typedef enum { BS_OP_MARKOV_VANILLA = 1, BS_OP_MARKOV_GATED = 2, BS_OP_MARKOV_RNN = 3 } bs_op_markov_type;
typedef struct {
    bs_op_markov_type type;
    int n_rows, B, H, r;
    const float *w, *b;      // gated: Wg [r][H + r], bg [r]; rnn: Wj [3r][2r + H], bj [3r]; vanilla: unused
} bs_op_markov;
// Floats per row of the forward's save array (what the backward reads) and of the backward's scratch.
int64_t bs_op_markov_save_per_row(const bs_op_markov *m);
int64_t bs_op_markov_scratch_per_row(const bs_op_markov *m);
void bs_op_markov_fwd(const bs_op_markov *m, float *u, float *save, const float *h, const float *e);
// dh, de: added into (may be NULL); dw, db: the head's weight gradients (NULL: frozen).
void bs_op_markov_bwd(const bs_op_markov *m, float *dh, float *de, float *dw, float *db, float *scratch, const float *du,
                      const float *save, const float *h, const float *e);
