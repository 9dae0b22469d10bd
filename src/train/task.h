// A training task: what the generic training loop (trainer.c) needs from a model being trained, whether a
// Qwen3 target (next-token CE) or a drafter against a frozen target (DeepSpec's DSpark/DFlash objective,
// z-lab DFlash's CE). The loop owns data, optimiser, schedule, checkpoints and logging; the task owns the
// model: its parameters, its forward and backward, and its export in the format the engine loads.
#pragma once
#include <stdint.h>
#include "train/params.h"
#include "util/rng.h"

// One training sequence (a packed window of the corpus).
typedef struct {
    const int32_t *ids;          // [n] token ids
    const uint8_t *loss_mask;    // [n] 1 where a token may serve as a label (and, for drafters, an anchor); NULL: all
    int n;
} bs_train_seq;

// Loss terms of one sequence (unscaled means, as the reference logs them).
typedef struct {
    double loss;                 // the objective
    double ce, l1, conf;         // drafter terms (a target reports ce = loss, l1 = conf = 0)
    double n_tokens;             // useful tokens: supervised label rows (weight > 0)
    double n_blocks;             // drafters: kept anchor blocks (0 for a target)
    double tau_est;              // drafters: mean over kept blocks of 1 + sum_j prod_{i<=j} (1 - L1_i/2); 0 if n/a
} bs_loss_terms;

// AdamW settings (torch semantics, docs/training.md): decoupled weight decay on params with decay set,
// global gradient-norm clipping before the update (clip <= 0: none).
typedef struct {
    float beta1, beta2, eps, weight_decay, clip;
} bs_adamw_settings;

typedef struct bs_train_task bs_train_task;
struct bs_train_task {
    const char *kind;            // "target", "dspark", "dflash", "zlab-dflash"
    bs_param_set params;         // every tensor, trainable or frozen, under its checkpoint name
    // Forward + backward of one sequence: ADDS d(scale * loss)/dparam into params[i].g and fills terms.
    // rng draws what the objective samples (drafters: anchor positions).
    int (*loss_grad)(bs_train_task *t, const bs_train_seq *seq, float scale, bs_rng *rng, bs_loss_terms *terms,
                     bs_err *err);
    // Forward only (held-out evaluation); no gradients touched.
    int (*loss_eval)(bs_train_task *t, const bs_train_seq *seq, bs_rng *rng, bs_loss_terms *terms, bs_err *err);
    // Writes config.json + model.safetensors (bf16) to dir, exactly as the engine's loader reads them.
    int (*export_model)(bs_train_task *t, const char *dir, bs_err *err);
    // Forward FLOPs per sequence of n tokens (for tokens/s and MFU figures), backward excluded.
    double (*flops_forward)(const bs_train_task *t, int n);
    void (*free)(bs_train_task *t);
    void *impl;
    void *owner_data;            // for whoever assembled the task (tasks.c: a drafter's owned frozen target)

    // Optional device-resident training (the CUDA path): when loss_grad_batch is set the loop hands over a
    // whole batch at once, and when opt_step is set the task updates its own (device) weights, so the host
    // copies in params are stale until sync_to_host. NULL: the loop calls loss_grad per sequence and runs
    // AdamW on params itself.
    int (*loss_grad_batch)(bs_train_task *t, const bs_train_seq *seqs, int n_seqs, float scale, bs_rng *rng,
                           bs_loss_terms *terms, bs_err *err);   // terms: the batch's means
    // One AdamW step with the given settings; *grad_norm gets the pre-clip global norm. Zeroes the gradients.
    int (*opt_step)(bs_train_task *t, const bs_adamw_settings *s, double lr, double *grad_norm, bs_err *err);
    // Copies the task's weights (and AdamW's moments into m / v where non-NULL, one array per param, laid out
    // as params) to the host, before a checkpoint or an export; and back after a resume, with the number of
    // AdamW steps already taken (bias correction continues from it; < 0: the count is left as it is).
    int (*sync_to_host)(bs_train_task *t, float *const *m, float *const *v, bs_err *err);
    int (*sync_from_host)(bs_train_task *t, float *const *m, float *const *v, int64_t adam_steps, bs_err *err);
};
