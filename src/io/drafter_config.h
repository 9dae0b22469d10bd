// config.json of a block drafter, dispatched on architectures[0]:
//   "DFlashDraftModel"  z-lab DFlash: block [anchor, MASK x (B-1)], rows 1..B-1 are drafts (B-1 per round),
//                       no embedding / LM head of its own (the target's are used).
//   "Qwen3DSparkModel"  DeepSpec (its DFlash baseline with markov_rank 0, and DSpark): rows 0..B-1 are drafts
//                       (B per round), bundled embed_tokens / lm_head, optional Markov and confidence heads.
//   "Gemma4DSparkModel" DeepSpec's DSpark for Gemma-4 targets: arch BS_DRAFTER_DEEPSPEC with gemma = 1; Gemma-4
//                       layers (src/model/gemma4.c), every one full attention (docs/gemma4.md, "DSpark drafters").
//   "DFlash2DraftModel" DFlash 2: z-lab's layout (arch BS_DRAFTER_ZLAB, dflash2 = 1) plus a grouped two-tap
//                       dynamic convolution around every sublayer and a candidate selector (docs/dflash2.md).
// See shared/docs/dflash-dspark.md sections 2 and 4, shared/docs/dflash2.md.
#pragma once
#include <cjson/cJSON.h>
#include "io/config.h"
#include "spec/drafter.h"
#include "util/err.h"

#define BS_MAX_TAPS 64
#define BS_MAX_DRAFT_LAYERS 256

typedef enum { BS_DRAFTER_ZLAB = 0, BS_DRAFTER_DEEPSPEC = 1 } bs_drafter_arch;
typedef enum { BS_MARKOV_NONE = 0, BS_MARKOV_VANILLA = 1, BS_MARKOV_GATED = 2, BS_MARKOV_RNN = 3 } bs_markov_type;

typedef struct bs_drafter_config {
    bs_qwen3_config base;        // the drafter's backbone (n_layers = drafter depth Ld)
    bs_drafter_arch arch;
    const char *arch_name;       // "DFlashDraftModel" / "Qwen3DSparkModel" / "Gemma4DSparkModel" / "DFlash2DraftModel"
    int gemma;                   // Gemma4DSparkModel: base is a Gemma-4 config (BS_ARCH_GEMMA4); head_dim, n_kv_heads: the full layers' 
    int block_size;              // B
    int mask_token_id;
    int num_target_layers;       // Lt the drafter was trained against
    int n_taps;                  // m
    int target_layer_ids[BS_MAX_TAPS];   // target layer ids (tap = hidden_states[id + 1]; -1 = embeddings, DeepSpec)
    int taps_defaulted;          // 1 if target_layer_ids was absent and build_target_layer_ids was used
    int markov_rank;             // r (0: no Markov head)
    bs_markov_type markov_type;
    int conf_head;               // enable_confidence_head
    int conf_with_markov;        // confidence_head_with_markov: input [h ; W1[x_{k-1}]] instead of [h]
    // Sliding window per drafter layer (0 = full attention). Applied with the MLX port's semantics:
    // every block row sees the last `window` context rows plus the whole block.
    int layer_window[BS_MAX_DRAFT_LAYERS];

    // DFlash 2 (architectures ["DFlash2DraftModel"]; docs/dflash2.md). arch stays BS_DRAFTER_ZLAB: the block
    // layout, the taps and the borrowed embedding / LM head are z-lab's.
    int dflash2;
    int conv_taps;               // dflash_config.conv_kernel_size: taps of each convolution (2 in every checkpoint)
    int conv_group;              // dflash_config.conv_group_size: channels sharing one dynamic coefficient
    int sel_rank;                // dflash_config.selector_rank R: codebook / projection width
    int sel_top_k;               // dflash_config.selector_top_k K: candidates per slot
    float out_mult;              // output_multiplier (1: none): multiplies the unary logits
    float softcap;               // final_logit_softcapping (0: none): cap * tanh(logit / cap) after the multiplier
    float embed_scale;           // input_embedding_scale (1: none): multiplies the block's embedding rows
    // Block rows attend causally to the block in layer i (is_causal; when absent, the MLX reference's rule:
    // causal exactly on sliding layers). The official checkpoints say is_causal false.
    int layer_causal[BS_MAX_DRAFT_LAYERS];
} bs_drafter_config;

// 1 if architectures[0] names a drafter blockspec knows.
int bs_is_drafter_arch(const char *arch);
// z-lab's default taps: Ld == 1 -> [Lt / 2]; else round(1 + i * (Lt - 4) / (Ld - 1)), Python's
// round-half-to-even. Writes Ld ids.
void bs_build_target_layer_ids(int n_target_layers, int n_draft_layers, int *out);
// Parses a drafter config (file names the source in errors).
int bs_drafter_config_parse(bs_drafter_config *c, const cJSON *root, const char *file, bs_err *err);
// Loads dir/config.json.
int bs_drafter_config_load(bs_drafter_config *c, const char *dir, bs_err *err);
// Draft tokens per round: B-1 (z-lab) or B (DeepSpec).
static inline int bs_drafter_gamma(const bs_drafter_config *c) { return c->arch == BS_DRAFTER_ZLAB ? c->block_size - 1 : c->block_size; }
