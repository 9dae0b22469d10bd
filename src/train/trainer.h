// The generic training loop (docs/training.md, "Training loop and logs"): batches from a corpus loader
// into a bs_train_task, AdamW with warmup + cosine and clipping, held-out evaluation, a CSV log, a loss
// plot, checkpoints, exports and exact resume. The library prints nothing: progress goes to a callback
// (the CLI prints bs_train_format_progress on one stderr line).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "train/corpus.h"
#include "train/task.h"

typedef struct {
    int64_t steps;               // optimiser steps of the whole run (the schedule's length)
    int batch, seq_len, accum;   // one step = accum x batch sequences of seq_len tokens
    double lr, warmup_ratio, weight_decay, clip;   // clip <= 0: no clipping
    int64_t eval_every;          // held-out evaluation every N steps (0: only at the end); needs a held-out corpus
    int eval_seqs;               // held-out windows per evaluation (the first ones, in corpus order)
    int64_t save_every;          // checkpoint + export every N steps (0: only at the end)
    int64_t stop_after;          // stop, saving, after N steps in this invocation (0: run to `steps`)
    double time_limit_s;         // stop, saving, once this much time has passed (0: none)
    const char *out_dir;         // created if missing
    const char *resume_dir;      // NULL: a fresh run; else continue the checkpoint in this folder
    uint64_t seed;               // data order and the task's generator
    double peak_flops;           // dense peak FLOP/s for the MFU figure (0: no MFU)
    int no_export;               // 1: checkpoints only (tests)
    int no_plot;                 // 1: no PNG
} bs_train_opts;

// Defaults: DeepSpec's optimiser settings (lr 6e-4, warmup 0.04, wd 0, clip 1.0), 1 x 1 x 1024 tokens.
bs_train_opts bs_train_opts_default(void);

typedef struct {
    int64_t step, steps;         // steps done / total
    int is_eval;                 // 1: a held-out evaluation (terms are the held-out means)
    bs_loss_terms terms;         // means over the step's sequences (n_tokens: the step's sum)
    double lr, grad_norm;
    double tok_per_s;            // useful (label) tokens per second over this step
    double mfu;                  // 0 when no peak was given
    double elapsed_s, eta_s;     // this invocation
    const char *note;            // a one-off message (checkpoint written, plot skipped), else NULL
} bs_train_progress;

typedef void (*bs_train_progress_fn)(const bs_train_progress *p, void *ctx);

// heldout may be NULL. Returns 0 when the run reached `steps` or stopped as asked (checkpoint written).
int bs_train_run(bs_train_task *task, const bs_corpus *train, const bs_corpus *heldout, const bs_train_opts *o,
                 bs_train_progress_fn cb, void *ctx, bs_err *err);

// One progress line (no newline): step/total, loss terms, lr, grad norm, tokens/s, MFU, ETA.
void bs_train_format_progress(const bs_train_progress *p, char *buf, size_t cap);

// Plots OUT_DIR/train_log.csv to OUT_DIR/loss.png with gnuplot. Returns 0 when written, 1 when gnuplot is not
// installed (err says so; nothing is written), -1 on failure.
int bs_train_plot(const char *out_dir, bs_err *err);
