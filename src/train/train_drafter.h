// Block drafters as training tasks against a frozen Qwen3 target (CPU fp32), DeepSpec's objective
// (shared/docs/dflash-dspark.md 7.2-7.6):
//   "dspark"       Qwen3DSparkModel with a Markov head and/or a confidence head: rows 0..B-1 predict a+1..a+B
//   "dflash"       Qwen3DSparkModel with markov_rank 0 and no confidence head (DeepSpec's DFlash baseline)
//   "zlab-dflash"  DFlashDraftModel: rows 1..B-1 predict a+1..a+B-1 (CE); no embedding / LM head of its own
//   "dflash2"      DFlash2DraftModel: z-lab's, with the convolutions around every sublayer and the candidate
//                  selector; loss = ce_alpha CE + conf_alpha selector CE (the `conf` term; docs/training.md)
// Per sequence: the target runs on it (taps + final normed hidden state, no gradient), anchors are drawn
// among valid candidates, the blocks [anchor, MASK...] are packed after the S context rows under DeepSpec's
// block mask, and loss = ce_alpha CE + l1_alpha L1(p_draft, p_target) + conf_alpha BCE(conf, 1 - L1/2), each a
// position-weighted mean (weights eval_mask * exp(-k / gamma), denominators sum(w) + 1e-6).
// The embedding and LM head are the target's, frozen (DeepSpec kinds keep them as frozen copies, exported).
#pragma once
#include "io/drafter_config.h"
#include "train/task.h"

typedef struct {
    float gamma;                 // loss_decay_gamma; <= 0: no decay
    float ce_alpha, l1_alpha, conf_alpha;
    int num_anchors;             // anchors drawn per sequence
    // 1: the labels are the target's own greedy next tokens on the data (argmax of its logits at the position
    // before each label, teacher forced) instead of the data's tokens. Greedy acceptance asks exactly this of a
    // draft, and a small target's greedy text is far more predictable than the data (hard distillation).
    int target_labels;
} bs_drafter_loss_opts;

// DSpark: gamma 4, (0.1, 0.9, 1.0); DeepSpec DFlash and z-lab: gamma 4, (1, 0, 0); 512 anchors.
void bs_drafter_loss_defaults(bs_drafter_loss_opts *o, const bs_drafter_config *c);
// "dspark", "dflash", "zlab-dflash" or "dflash2" for a config.
const char *bs_drafter_kind(const bs_drafter_config *c);

// A drafter config for a fresh drafter of `kind` over `target` (backbone = the target's shape with n_layers
// layers; taps z-lab's default spread; DSpark: Markov head of `markov_rank` and type, confidence head with the
// Markov embedding when markov_rank > 0; "dflash2": z-lab's with 2-tap convolutions in groups of 16 channels (or
// the largest divisor of H below), a selector of rank markov_rank (> 0; else 64) over 16 candidates: fields the
// caller may change before bs_train_drafter_new).
int bs_train_drafter_config(bs_drafter_config *c, const bs_qwen3_config *target, const char *kind, int n_layers, int block_size,
                            int mask_token_id, int markov_rank, bs_markov_type type, bs_err *err);
// A fresh drafter initialised as DeepSpec does (Linear / Embedding N(0, 0.02), biases 0, norm gains 1; the
// embedding and LM head copied from the target and frozen). target: a target task (bs_train_target_*),
// borrowed (it must outlive the drafter; it is only run forward). o NULL: the kind's defaults.
int bs_train_drafter_new(bs_train_task **out, bs_train_task *target, const bs_drafter_config *c, const bs_drafter_loss_opts *o,
                         uint64_t seed, bs_err *err);
// A drafter checkpoint folder (config.json + safetensors) to continue training or evaluate.
int bs_train_drafter_load(bs_train_task **out, bs_train_task *target, const char *dir, const bs_drafter_loss_opts *o, bs_err *err);

const bs_drafter_config *bs_train_drafter_config_of(const bs_train_task *t);
// Prediction rows per block: B (DeepSpec) or B - 1 (z-lab).
int bs_train_drafter_rows(const bs_train_task *t);

// Optional outputs of one step (any pointer NULL: not wanted); P = bs_train_drafter_rows.
typedef struct {
    float *draft_logits;         // [A][P][V] after the teacher-forced Markov head
    float *conf_logits;          // [A][P]
    int32_t *eval_mask;          // [A][P]
    int32_t *target_ids;         // [A][P]
} bs_drafter_inspect;

// One step with fixed anchors (anchors[n_anchors], keep[n_anchors]: 0 = dummy block): the loss terms, and with
// do_grad d(scale * loss) added into the trainable gradients. loss_grad / loss_eval are this with anchors drawn.
int bs_train_drafter_step(bs_train_task *t, const bs_train_seq *seq, const int32_t *anchors, const int32_t *keep, int n_anchors,
                          int do_grad, float scale, bs_loss_terms *terms, const bs_drafter_inspect *ins, bs_err *err);
// DeepSpec's anchor draw: up to n_anchors distinct positions a in [0, n-2] with loss_mask[a] and loss_mask[a+1]
// (all positions without a mask), uniformly without replacement, sorted; the rest are dummy blocks (anchor 0,
// keep 0). Returns the number kept.
int bs_drafter_sample_anchors(const bs_train_seq *seq, int n_anchors, bs_rng *rng, int32_t *anchors, int32_t *keep);
// Gradient checks: the confidence BCE's targets clamp(1 - L1/2, 0, 1) are detached (DeepSpec), so a finite
// difference of the loss value sees their change while the gradient rightly does not. hold 1: the next step
// records its targets and later steps reuse them (same anchors assumed), making the loss value's derivative
// the gradient; hold 0: back to normal.
void bs_train_drafter_hold_conf_targets(bs_train_task *t, int hold);
