// The training tasks the CLI builds (tasks.h): options -> the model side's constructors (train_target.c,
// train_drafter.c, and train/cuda/ for a target on the GPU). A drafter task owns its frozen target.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "io/json.h"
#include "io/tokenizer.h"
#include "train/tasks.h"
#include "train/train_drafter.h"
#include "train/train_target.h"
#include "train/train_cuda.h"
#include "train/train_cuda_drafter.h"

static int is_cuda(const char *device) { return device && !strncmp(device, "cuda", 4); }

int bs_train_target_task_new(bs_train_task **out, const bs_train_target_opts *o, bs_err *err) {
    *out = NULL;
    if (o->device && strcmp(o->device, "cpu") && !is_cuda(o->device))
        return bs_fail(err, "--device %s: training runs on cpu or cuda", o->device);
    if (is_cuda(o->device))   // a build without CUDA answers "built without CUDA"
        return bs_train_target_cuda_new(out, o->init_dir ? NULL : o->config_path, o->init_dir, o->seed, o->max_batch_seqs,
                                        o->max_seq_len, err);
    if (o->init_dir) return bs_train_target_load(out, o->init_dir, 1, err);
    // --config names a config.json (or a folder holding one) of the new model's shape.
    bs_qwen3_config cfg;
    struct stat st;
    if (!stat(o->config_path, &st) && S_ISDIR(st.st_mode)) {
        if (bs_qwen3_config_load(&cfg, o->config_path, err)) return -1;
    } else {
        cJSON *root = bs_json_load(o->config_path, err);
        if (!root) return -1;
        int rc = bs_qwen3_config_parse(&cfg, root, o->config_path, err);
        cJSON_Delete(root);
        if (rc) return -1;
    }
    return bs_train_target_new(out, &cfg, o->seed, err);
}

// The mask token a fresh drafter feeds: --mask-id, else the target tokenizer's "<|mask|>" token.
static int mask_id(const bs_train_drafter_opts *o, int vocab, bs_err *err) {
    if (o->mask_token_id >= 0) {
        if (o->mask_token_id >= vocab) return bs_fail(err, "--mask-id %d is outside the target's vocabulary (%d)", o->mask_token_id, vocab);
        return o->mask_token_id;
    }
    bs_tokenizer *t;
    if (bs_tokenizer_load(&t, o->target_dir, err))
        return bs_wrap(err, "no --mask-id given and the target's tokenizer (for its <|mask|> token) did not load");
    int32_t id = bs_tokenizer_token_id(t, "<|mask|>");
    bs_tokenizer_free(t);
    if (id < 0 || id >= vocab) return bs_fail(err, "the target's tokenizer has no <|mask|> token inside the vocabulary: pass --mask-id N");
    return id;
}

static bs_markov_type markov_type(const char *name) {
    if (!name || !strcmp(name, "vanilla")) return BS_MARKOV_VANILLA;
    if (!strcmp(name, "gated")) return BS_MARKOV_GATED;
    if (!strcmp(name, "rnn")) return BS_MARKOV_RNN;
    return BS_MARKOV_NONE;
}

// A drafter task frees its borrowed target with itself.
typedef struct { void (*inner_free)(bs_train_task *); bs_train_task *target; } owned_target;
static owned_target *owned_of(bs_train_task *t) { return (owned_target *)t->owner_data; }
static void free_with_target(bs_train_task *t) {
    owned_target *ow = owned_of(t);
    ow->inner_free(t);
    if (ow->target) ow->target->free(ow->target);
    free(ow);
}

int bs_train_drafter_task_new(bs_train_task **out, const bs_train_drafter_opts *o, bs_err *err) {
    *out = NULL;
    if (o->device && strcmp(o->device, "cpu") && !is_cuda(o->device)) return bs_fail(err, "--device %s: training runs on cpu or cuda", o->device);
    bs_train_task *target = NULL, *t = NULL;
    bs_drafter_config c;
    if (bs_train_target_load(&target, o->target_dir, 0, err)) return bs_wrap(err, "the frozen target %s", o->target_dir);
    const bs_qwen3_config *tc = bs_train_target_config(target);
    bs_drafter_loss_opts lo = { (float)o->gamma, (float)o->ce_alpha, (float)o->l1_alpha, (float)o->conf_alpha, o->num_anchors,
                              o->target_labels };
    owned_target *ow = calloc(1, sizeof *ow);
    if (!ow) { target->free(target); return bs_fail(err, "out of memory"); }
    int rc;
    if (o->init_dir) rc = is_cuda(o->device) ? 0 : bs_train_drafter_load(&t, target, o->init_dir, &lo, err);
    else {
        bs_markov_type mt = markov_type(o->markov_head_type);
        int mask = mask_id(o, tc->vocab_size, err);
        rc = mask < 0 ? -1 : 0;
        if (!rc && o->markov_rank > 0 && mt == BS_MARKOV_NONE)
            rc = bs_fail(err, "--markov-head %s: vanilla, gated or rnn", o->markov_head_type);
        if (!rc) rc = bs_train_drafter_config(&c, tc, o->arch, o->layers, o->block_size, mask, o->markov_rank,
                                              o->markov_rank > 0 ? mt : BS_MARKOV_NONE, err);
        if (!rc && o->n_taps > 0) {
            if (o->n_taps > BS_MAX_TAPS) rc = bs_fail(err, "--taps: %d taps (at most %d)", o->n_taps, BS_MAX_TAPS);
            for (int i = 0; !rc && i < o->n_taps; i++) {
                if (o->taps[i] < -1 || o->taps[i] >= tc->n_layers || (i && o->taps[i] <= o->taps[i - 1]))
                    rc = bs_fail(err, "--taps: ids must increase and lie in -1..%d (the target has %d layers)", tc->n_layers - 1, tc->n_layers);
                c.target_layer_ids[i] = o->taps[i];
            }
            c.n_taps = o->n_taps;
            c.taps_defaulted = 0;
        }
        if (!rc && c.dflash2) {   // (bs_train_drafter_new checks them against the shapes)
            if (o->sel_rank > 0) c.sel_rank = o->sel_rank;
            if (o->sel_top_k > 0) c.sel_top_k = o->sel_top_k;
            if (o->conv_group > 0) c.conv_group = o->conv_group;
        }
        if (!rc && c.arch == BS_DRAFTER_DEEPSPEC) {
            c.conf_head = o->confidence_head;
            c.conf_with_markov = o->confidence_head && o->markov_rank > 0;
        }
        if (!rc && !is_cuda(o->device)) rc = bs_train_drafter_new(&t, target, &c, &lo, o->seed, err);
    }
    if (!rc && is_cuda(o->device)) {   // the GPU task loads the target itself (on the GPU, and on the host for its tables)
        free(ow);
        target->free(target);
        if (o->max_batch_seqs < 1 || o->max_seq_len < 2)
            return bs_fail(err, "--device cuda: the micro-batch size and sequence length are not set (max_batch_seqs, max_seq_len)");
        return bs_train_drafter_cuda_new(out, o->target_dir, o->init_dir ? NULL : &c, o->init_dir, &lo, o->seed, o->max_batch_seqs,
                                         o->max_seq_len, err);
    }
    if (rc) { free(ow); target->free(target); return -1; }
    ow->inner_free = t->free;
    ow->target = target;
    t->owner_data = ow;
    t->free = free_with_target;
    *out = t;
    return 0;
}
