// Training checkpoints (docs/training.md, "Checkpoints and resume"): DIR/train_state.safetensors holds the
// trainable weights (fp32), the AdamW moments, and in its __metadata__ the step, the data position, the
// task's RNG state, the parameter list and the run's settings. It is written to a temporary file, synced
// and renamed over the old one, so a crash mid-write leaves the last checkpoint intact.
#pragma once
#include <stdint.h>
#include "train/loader.h"
#include "train/optim.h"
#include "train/task.h"
#include "util/rng.h"

#define BS_TRAIN_STATE_FILE "train_state.safetensors"

typedef struct {
    int64_t step;                // optimiser updates done
    bs_loader_pos data;          // where the training loader continues
    bs_rng rng;                  // the task's generator (anchor sampling), as it is after `step` steps
    char *settings_json;         // the run's settings (a JSON object); owned, free()d by the caller after load
} bs_train_state;

int bs_train_ckpt_save(const char *dir, const bs_train_task *task, const bs_adamw *opt, const bs_train_state *st, bs_err *err);
// Restores weights, moments (opt must be initialised on task->params) and st. Refuses a checkpoint of
// another kind of run or with other tensors (names, shapes, trainable flags), naming the first difference.
int bs_train_ckpt_load(const char *dir, bs_train_task *task, bs_adamw *opt, bs_train_state *st, bs_err *err);
