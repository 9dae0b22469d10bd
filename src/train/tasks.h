// The two training tasks the CLI builds (train-target, train-drafter). The factories are implemented by the
// model side of the trainer (train_target.c, train_drafter.c, train/cuda/), in tasks.c.
#pragma once
#include <stdint.h>
#include "train/task.h"

// A Qwen3 or Llama-3.x target trained with next-token cross-entropy.
typedef struct {
    const char *config_path;     // config.json of a new model (random initialisation), or NULL
    const char *init_dir;        // a Qwen3 or Llama checkpoint folder to start from, or NULL (exactly one of the two)
    const char *device;          // "cpu" or "cuda" (NULL: cpu)
    uint64_t seed;               // initialisation
    int max_batch_seqs, max_seq_len;   // the largest batch the run feeds (a GPU task sizes its buffers by it)
} bs_train_target_opts;

// A block drafter trained against a frozen target (DeepSpec's objective; z-lab DFlash's CE).
typedef struct {
    const char *target_dir;      // the frozen target: config.json + safetensors
    const char *arch;            // "dspark", "dflash" (DeepSpec, markov_rank 0), "zlab-dflash", "dflash2"
    int layers;                  // drafter depth
    int block_size;              // B
    int markov_rank;             // r; 0: no Markov head
    const char *markov_head_type;// "vanilla", "gated", "rnn"
    int confidence_head;         // 1: with the confidence head
    const int *taps; int n_taps; // target layer ids feeding the drafter; n_taps 0: the reference default
    int num_anchors;             // anchors sampled per sequence
    double gamma;                // position weight exp(-k / gamma)
    double ce_alpha, l1_alpha, conf_alpha;
    int target_labels;           // 1: labels are the target's greedy next tokens (bs_drafter_loss_opts.target_labels)
    int mask_token_id;           // -1: from the target (its tokenizer's mask token)
    int sel_rank, sel_top_k, conv_group;   // dflash2: selector rank R, candidates K, convolution group (0: defaults)
    const char *init_dir;        // start from an existing drafter checkpoint, or NULL
    const char *device;          // "cpu" or "cuda" (NULL: cpu)
    uint64_t seed;
    int max_batch_seqs, max_seq_len;   // cuda: the largest micro-batch the run feeds (the GPU task sizes its buffers by it)
} bs_train_drafter_opts;

int bs_train_target_task_new(bs_train_task **out, const bs_train_target_opts *o, bs_err *err);
int bs_train_drafter_task_new(bs_train_task **out, const bs_train_drafter_opts *o, bs_err *err);
