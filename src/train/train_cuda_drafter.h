// Block-drafter training on one GPU (src/train/cuda/drafter_step.cu): a bs_train_task for DSpark (vanilla
// Markov head, confidence head), DeepSpec DFlash and z-lab DFlash against a frozen Qwen3 or Llama-3.x target that runs
// on the GPU too (the target trainer's forward, src/train/cuda/train_target.cu). The objective is the CPU
// reference's (train_drafter.h, docs/training.md "The drafter step") op for op; the host side keeps a CPU
// drafter task for the parameter set, the initialisation and the export, so both paths write the same files.
// Built by `make cuda`; a CPU-only build's constructor fails with "built without CUDA".
//
// Semantics (as the CPU task's, so the generic loop can drive either):
//   loss_grad_batch(seqs, n, scale, rng): draws each sequence's anchors in order with bs_drafter_sample_anchors
//     (the same draws as n loss_grad calls of the CPU task), then ADDS scale * sum_s d loss_s / d param into
//     the device gradients, loss_s being sequence s's objective normalised as DeepSpec does. terms: the means
//     over the sequences of loss, ce, l1, conf and tau_est; n_tokens and n_blocks: totals.
//   loss_grad / loss_eval: one sequence. opt_step: AdamW + clip_grad_norm_ on the device (train_cuda.h).
//   sync_to_host / sync_from_host: weights (and m / v) between the device and params.p[i].w.
//   export_model: syncs the weights to the host, then the CPU task's export (config.json + bf16 safetensors).
#pragma once
#include <stdint.h>
#include "train/task.h"
#include "train/train_drafter.h"

// target_dir: the frozen target's folder (config.json + safetensors, any dtype). Either c (a fresh drafter,
// initialised as bs_train_drafter_new with seed) or init_dir (a drafter checkpoint folder, as
// bs_train_drafter_load). o: loss options (NULL: the kind's defaults). Buffers hold max_batch_seqs sequences of
// at most max_seq_len tokens with o->num_anchors anchors each. Gated and rnn Markov heads are refused.
int bs_train_drafter_cuda_new(bs_train_task **out, const char *target_dir, const bs_drafter_config *c, const char *init_dir,
                              const bs_drafter_loss_opts *o, uint64_t seed, int max_batch_seqs, int max_seq_len, bs_err *err);

// One step with fixed anchors: anchors / keep [n_seqs][num_anchors] (keep 0: a dummy block). With do_grad the
// gradients are added on the device. terms as loss_grad_batch's.
int bs_train_drafter_cuda_step(bs_train_task *t, const bs_train_seq *seqs, int n_seqs, const int32_t *anchors, const int32_t *keep,
                               int do_grad, float scale, bs_loss_terms *terms, bs_err *err);
// BS_TRAIN_GEMM_* (train_cuda.h) for the drafter and its target.
int bs_train_drafter_cuda_set_gemm(bs_train_task *t, int mode, bs_err *err);
// Device gradients -> params.p[i].g (trainable tensors); zero_grads clears the device gradients.
int bs_train_drafter_cuda_grads_to_host(bs_train_task *t, bs_err *err);
int bs_train_drafter_cuda_zero_grads(bs_train_task *t, bs_err *err);
// Device ms summed since the last reset: target forward, drafter forward + loss, drafter backward, AdamW.
int bs_train_drafter_cuda_times(bs_train_task *t, double ms[4], int reset, bs_err *err);
size_t bs_train_drafter_cuda_device_bytes(const bs_train_task *t);
