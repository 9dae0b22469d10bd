#include "engine/engine.h"
#include "spec/drafter.h"

// Placeholder until the DFlash/DSpark models land (src/model/dflash.c).
int bs_drafter_open(bs_drafter **out, const char *dir, bs_engine *e, int max_ctx, bs_err *err) {
    *out = NULL;
    return bs_fail(err, "%s: drafter models are not built into this blockspec yet", dir);
}
