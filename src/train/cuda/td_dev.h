// The device half of the GPU drafter trainer (drafter_step.cu), behind a narrow C interface: the host half
// (src/train/train_drafter_cuda.c) owns the parameter set (the CPU reference task's), anchors, labels and
// the loss bookkeeping; this side owns weights, gradients, AdamW moments and every activation.
#pragma once
#include <stdint.h>
#include <stddef.h>
#include "util/err.h"
#include "train/cuda/tc_dev.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TD_MAX_TAPS 64

typedef struct {
    int V, H, L, nH, nKV, hd, I;          // the drafter backbone (Qwen3 layers: q/k norm, whatever the target)
    float eps;
    const float *inv_freq;                // host [hd/2]: the drafter's RoPE table (bs_rope_inv_freqs of its config: the
                                          // target's theta and scaling); read by td_dev_new only
    int B, P, zl, r, conf_in, m;          // block, prediction rows per block, z-lab?, Markov rank, conf head width (0: none), taps
    int taps[TD_MAX_TAPS];                // hidden_states indices of the target
    float ce_alpha, l1_alpha, conf_alpha;
    int need_t, l1_on;                    // target logits needed (L1, confidence or target labels); L1 gradient on
    int target_labels;                    // labels = the target's argmax (bs_drafter_loss_opts.target_labels)
    // parameter indices in the host set (-1: absent); layer l tensor k (TC_IN_NORM..TC_WD order) = layer0 + 11 l + k
    int i_fc, i_hn, i_layer0, i_norm, i_embed, i_lm, i_w1, i_w2, i_cw, i_cb;
    int t_embed, t_lm;                    // the target's embedding / LM head parameter indices (z-lab uses them)
    int t_final;                          // hidden_states index of the target's final normed state (its layer count)
    // DFlash 2 (d2 = 1; z-lab's layout): convolutions of conv_taps taps, groups of conv_group channels, K
    // candidates, selector rank R; layer l's conv tensors at i_conv0 + 4 l + (attention base, attention
    // kernel_projection, MLP base, MLP kernel_projection); the selector's at i_sel + (hidden_projection,
    // predecessor codebook, successor codebook). The selector's CE comes back in bce_row, weighted conf_alpha.
    int d2, conv_taps, conv_group, K, R, i_conv0, i_sel;
} td_shape;

// One micro-batch, host arrays. nseq sequences padded to Tc tokens (ids [nseq*Tc]); NB = nseq * A blocks
// (block b of sequence b / A); nq = NB * B block rows; np = NB * P prediction rows.
typedef struct {
    int nseq, Tc, NB;
    const int32_t *ids;                   // [nseq*Tc]
    const int32_t *blk_ids, *qpos;        // [nq]
    const int32_t *anchor, *keep, *base;  // [NB] (base: the sequence's first row, s*Tc)
    const int32_t *tid, *tpos, *prev;     // [np] label id, target row (global), Markov prev token
    const float *w, *rs;                  // [np] position weight (0: no loss), d(loss)/d(row term) = scale w / (den + 1e-6)
    float *ce_row, *l1_row, *acc, *bce_row;   // [np] out
} td_batch;

typedef struct td_dev td_dev;

int td_dev_new(td_dev **out, const td_shape *s, tc_dev *target, int max_seqs, int max_T, int A, int n_params,
               const int64_t *numel, const int *trainable, const int *decay, bs_err *err);
void td_dev_free(td_dev *d);
int td_dev_copy(td_dev *d, int which, int i, float *host, int to_device, bs_err *err);   // which: TC_W / TC_G / TC_M / TC_V
int td_dev_zero_grads(td_dev *d, bs_err *err);
void td_dev_set_gemm(td_dev *d, int mode);
int td_dev_step(td_dev *d, const td_batch *b, int grad, bs_err *err);
int td_dev_adamw(td_dev *d, float lr, float beta1, float beta2, float eps, float wd, float clip, int64_t step, double *grad_norm,
                 bs_err *err);
size_t td_dev_bytes(const td_dev *d);
// Device ms summed since the last reset: target forward, drafter forward + loss, drafter backward, AdamW.
#define TD_N_TIMES 4
void td_dev_times(td_dev *d, double *ms, int reset);

#ifdef __cplusplus
}
#endif
