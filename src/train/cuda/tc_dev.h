// The device half of the CUDA target trainer (train_target.cu), behind a narrow C interface so that the
// host half (src/train/train_target_cuda.c: config, parameter set, initialisation, checkpoints, export,
// the bs_train_task glue) needs no CUDA headers and nvcc needs no cJSON.
//
// Parameter order (the host builds the set in exactly this order; the device finds tensors by index):
//   0: model.embed_tokens.weight [V][H]
//   tc_layer_param(qk_norm, l, k), k = TC_IN_NORM .. TC_WD: layer l's tensors (enum below): 1 + 11*l + k for
//   Qwen3; a Llama layer has no q_norm / k_norm, so its 9 tensors are 1 + 9*l + k with k past TC_KNORM moved 2 down
//   1 + P*L: model.norm.weight [H];  2 + P*L: lm_head.weight [V][H] (untied only), P = tc_per_layer(qk_norm)
#pragma once
#include <stdint.h>
#include <stddef.h>
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { TC_IN_NORM, TC_WQ, TC_WK, TC_WV, TC_WO, TC_QNORM, TC_KNORM, TC_POST_NORM, TC_WG, TC_WU, TC_WD, TC_PER_LAYER };
enum { TC_W = 0, TC_G = 1, TC_M = 2, TC_V = 3 };   // which per-parameter buffer a copy addresses

// Tensors per layer, and the index of layer l's tensor k (never TC_QNORM / TC_KNORM without q/k norm).
static inline int tc_per_layer(int qk_norm) { return qk_norm ? TC_PER_LAYER : TC_PER_LAYER - 2; }
static inline int tc_layer_param(int qk_norm, int l, int k) { return 1 + tc_per_layer(qk_norm) * l + (!qk_norm && k > TC_KNORM ? k - 2 : k); }

typedef struct {
    int V, H, L, nH, nKV, hd, I, tied;
    float eps;
    int qk_norm;                 // 1: q_norm / k_norm (Qwen3); 0: none (Llama)
    const float *inv_freq;       // host [hd/2]: the RoPE table as the engine builds it (bs_rope_inv_freqs: default or
                                 // llama3-scaled); read by tc_dev_new only
} tc_shape;

typedef struct tc_dev tc_dev;

// Allocates weights, gradients, AdamW moments (all zero) and activations for B sequences of T tokens.
int tc_dev_new(tc_dev **out, const tc_shape *s, int B, int T, int n_params, const int64_t *numel, const int *decay,
               bs_err *err);
void tc_dev_free(tc_dev *d);
// Copies parameter i's buffer `which` between the device and host (n elements, fp32).
int tc_dev_copy(tc_dev *d, int which, int i, float *host, int to_device, bs_err *err);
int tc_dev_zero_grads(tc_dev *d, bs_err *err);
// Parameter i's weights ~ N(0, std) from a counter-based generator keyed by (seed, i); std 0: all ones.
int tc_dev_init_normal(tc_dev *d, int i, double std, uint64_t seed, bs_err *err);
void tc_dev_set_gemm(tc_dev *d, int mode);   // BS_TRAIN_GEMM_* (train_cuda.h)
// One forward over nb sequences padded to Tc tokens (row b*Tc + t): ids [nb*Tc], labels [nb*Tc] (-1: no loss
// at that row), wrow [nb*Tc] (d loss / d row-CE). Writes each row's CE to rowloss [nb*Tc] (0 where no label).
// grad: also the backward, ADDING into the gradients. logits (grad == 0 only; may be NULL): [nb*Tc][V].
int tc_dev_step(tc_dev *d, const int32_t *ids, const int32_t *labels, const float *wrow, int nb, int Tc, int grad,
                float *rowloss, float *logits, bs_err *err);
// AdamW over every parameter (torch semantics; train_cuda.h), then zeroes the gradients.
int tc_dev_adamw(tc_dev *d, float lr, float beta1, float beta2, float eps, float wd, float clip, int64_t step,
                 double *grad_norm, bs_err *err);
size_t tc_dev_bytes(const tc_dev *d);
// Device milliseconds summed since the last reset: TC_N_TIMES entries, the order of bs_train_target_cuda_times.
#define TC_N_TIMES 6
void tc_dev_times(tc_dev *d, double *ms, int reset);

// The frozen target of the GPU drafter trainer (drafter_step.cu): the forward without the LM head (ids
// [nb*Tc] uploaded on the task's stream, nothing synchronised); then tc_dev_hidden(idx) is hidden_states[idx]
// as transformers numbers them ([nb*Tc][H], row b*Tc + t; 0 = embeddings, L = the final normed state), valid
// until the next step. tc_dev_param: parameter i's device weights; tc_dev_stream: the cudaStream_t.
int tc_dev_forward_hidden(tc_dev *d, const int32_t *ids, int nb, int Tc, bs_err *err);
const float *tc_dev_hidden(tc_dev *d, int idx);
float *tc_dev_param(tc_dev *d, int i);
void *tc_dev_stream(tc_dev *d);
// The device half of a CUDA target task (train_target_cuda.c); NULL if t is not one.
struct bs_train_task;
tc_dev *bs_train_target_cuda_dev(struct bs_train_task *t);

#ifdef __cplusplus
}
#endif
