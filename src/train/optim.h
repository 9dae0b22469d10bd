// AdamW over a parameter set, as torch.optim.AdamW computes it (decoupled weight decay, bias-corrected
// moments), with the schedule and gradient clipping of DeepSpec's trainer (docs/training.md,
// "Optimiser and schedule"). Gradient accumulation is the training loop's job: it scales each
// sequence's gradient by 1/(batch x accum) before the step.
#pragma once
#include <stdint.h>
#include "train/params.h"

typedef struct {
    double lr;             // peak learning rate
    double beta1, beta2;   // torch defaults 0.9, 0.999
    double eps;            // torch default 1e-8
    double weight_decay;   // decoupled; applied only to tensors whose param.decay is set
} bs_adamw_cfg;

// Torch's defaults for the given lr and weight decay.
bs_adamw_cfg bs_adamw_defaults(double lr, double weight_decay);

typedef struct {
    bs_adamw_cfg cfg;
    bs_param_set *params;  // not owned; tensors must not be added after init
    float **m, **v;        // first and second moments per tensor (NULL for frozen tensors)
    int64_t t;             // updates done so far (torch's `step` state)
} bs_adamw;

// Zeroed moments for every trainable tensor of ps.
int bs_adamw_init(bs_adamw *o, bs_param_set *ps, const bs_adamw_cfg *cfg, bs_err *err);
// One update with learning rate lr (from bs_lr_schedule); increments o->t.
void bs_adamw_step(bs_adamw *o, double lr);
void bs_adamw_free(bs_adamw *o);

// Warmup steps W = int(warmup_ratio * total_steps), truncated as Python's int() does.
int64_t bs_warmup_steps(double warmup_ratio, int64_t total_steps);
// Learning rate of step t (0-based): lr * (t+1) / W for t < W, then cosine from lr to 0 over the
// remaining total_steps - W steps: lr * (1 + cos(pi * (t - W) / (total_steps - W))) / 2.
double bs_lr_schedule(double lr, int64_t t, int64_t warmup, int64_t total_steps);

// L2 norm of all gradients together (double accumulation, fixed order: the same on any thread count).
double bs_grad_norm(const bs_param_set *ps);
// Scales the gradients so their global norm is at most max_norm (torch's clip_grad_norm_: factor
// max_norm / (norm + 1e-6) when below 1). Returns the norm before clipping. max_norm <= 0: no clipping.
double bs_clip_grad_norm(bs_param_set *ps, double max_norm);
