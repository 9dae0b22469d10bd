// Qwen3 / Llama-3.x target pre-training on one GPU (src/train/cuda/): a bs_train_task whose weights, gradients and
// AdamW moments live on the device. Built only by `make cuda` (BS_WITH_CUDA); a CPU-only build links a
// stub (train_cuda_stub.c) whose constructor fails with "built without CUDA", so callers need no #ifdefs.
//
// Semantics (the same as the CPU task's, so the generic loop can use either):
//   loss_grad_batch(seqs, n, scale): ADDS, into the device gradients, exactly what loss_grad on each sequence
//     with the same scale would add: scale * sum_s d(loss_s)/dparam, where loss_s is the mean next-token CE of
//     sequence s over its rows i whose label ids[i+1] has loss_mask 1 (a sequence with no such row adds 0).
//     terms: loss / ce = the mean over sequences of loss_s (sequences without labels left out), n_tokens = the
//     batch's supervised rows in total.
//   loss_grad(seq) is loss_grad_batch of one sequence: gradients stay on the device (opt_step uses them;
//     bs_train_target_cuda_grads_to_host copies them to params[i].g).
//   opt_step: torch.optim.AdamW (bias-corrected, eps outside the sqrt, weight decay p -= lr*wd*p on tensors
//     with decay set) after torch.nn.utils.clip_grad_norm_ (coef = clip / (norm + 1e-6), capped at 1), all on
//     the device; *grad_norm = the pre-clip global norm; zeroes the gradients; counts its steps (bias
//     correction): after a resume, set the count with bs_train_target_cuda_set_step.
//   sync_to_host / sync_from_host: weights (and AdamW m, v when the arrays are non-NULL, one per param, laid
//     out as params.p[i]) between the device and params.p[i].w.
#pragma once
#include <stdint.h>
#include "train/task.h"

// config_json: the config.json text (starts with '{'), or a path to a config.json file or to a folder
// holding one; NULL: init_dir's config.json. init_dir: a Qwen3 or Llama checkpoint folder whose weights (any stored
// dtype) start the run; NULL: transformers' initialisation (Linear/Embedding N(0, initializer_range), default
// 0.02; norm gains 1) from a generator seeded with seed. Buffers are sized for max_batch_seqs sequences of
// at most max_seq_len tokens. The first CUDA device is used.
int bs_train_target_cuda_new(bs_train_task **out, const char *config_json, const char *init_dir_or_null, uint64_t seed,
                             int max_batch_seqs, int max_seq_len, bs_err *err);

// Matmul arithmetic (cuBLAS compute type): BS_TRAIN_GEMM_BF16 (default: fp32 storage, bf16 tensor-core
// products, fp32 accumulation), BS_TRAIN_GEMM_TF32, BS_TRAIN_GEMM_FP32 (exact fp32: gradient checks).
enum { BS_TRAIN_GEMM_BF16 = 0, BS_TRAIN_GEMM_TF32 = 1, BS_TRAIN_GEMM_FP32 = 2 };
int bs_train_target_cuda_set_gemm(bs_train_task *t, int mode, bs_err *err);
// AdamW's step count (the next opt_step is step + 1).
int bs_train_target_cuda_set_step(bs_train_task *t, int64_t step, bs_err *err);
// Device gradients <-> params.p[i].g (tests, a host optimiser); zero_grads clears the device gradients.
int bs_train_target_cuda_grads_to_host(bs_train_task *t, bs_err *err);
int bs_train_target_cuda_grads_from_host(bs_train_task *t, bs_err *err);
int bs_train_target_cuda_zero_grads(bs_train_task *t, bs_err *err);
// The training forward's logits of one sequence, [seq->n][vocab] fp32 on the host (tests against the engine).
int bs_train_target_cuda_logits(bs_train_task *t, const bs_train_seq *seq, float *out, bs_err *err);
// Device time (ms, from CUDA events) summed since the last reset, in 6 slots: forward (attention included),
// attention forward, cross-entropy, backward (attention included), attention backward, AdamW.
int bs_train_target_cuda_times(bs_train_task *t, double ms[6], int reset, bs_err *err);
// Peak device memory the task allocated, bytes (for the benchmark's report).
size_t bs_train_target_cuda_device_bytes(const bs_train_task *t);
