// PENDING: weak stand-ins for the task factories of tasks.h, so the CLI links before the model side of the
// trainer (train_target.c, train_drafter.c) is merged. Their strong definitions replace these at link
// time; delete this file when they are merged.
#include "train/tasks.h"

__attribute__((weak)) int bs_train_target_task_new(bs_train_task **out, const bs_train_target_opts *o, bs_err *err) {
    *out = 0;
    return bs_fail(err, "target training (the Qwen3 training task) is not built in this build");
}

__attribute__((weak)) int bs_train_drafter_task_new(bs_train_task **out, const bs_train_drafter_opts *o, bs_err *err) {
    *out = 0;
    return bs_fail(err, "drafter training (the %s training task) is not built in this build", o && o->arch ? o->arch : "drafter");
}
