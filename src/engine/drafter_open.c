#include "engine/engine.h"
#include "model/dflash.h"
#include "spec/drafter.h"

// Every drafter architecture blockspec reads (z-lab DFlash, DeepSpec DFlash/DSpark) is opened by
// src/model/dflash.c, which dispatches on config.json's architectures[0].
int bs_drafter_open(bs_drafter **out, const char *dir, bs_engine *e, int max_ctx, bs_err *err) {
    return bs_dflash_open(out, dir, &e->target, max_ctx, err);
}
int bs_drafter_open_opts(bs_drafter **out, const char *dir, bs_engine *e, int max_ctx, const bs_drafter_opts *o, bs_err *err) {
    return bs_dflash_open_opts(out, dir, &e->target, max_ctx, o, err);
}
