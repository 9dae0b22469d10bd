#include "engine/engine.h"
#include "model/dflash.h"
#include "model/dspark_v1.h"
#include "spec/drafter.h"

// Every drafter architecture blockspec reads (z-lab DFlash, DeepSpec DFlash/DSpark) is opened by
// src/model/dflash.c, which dispatches on config.json's architectures[0]; a folder with a dspark.json (the seed's
// own DSpark v1 format, which has no config.json) by src/model/dspark_v1.c. Its context pool takes the
// geometry of the engine's KV pool unless the options say otherwise (bs_drafter_opts, docs/kv-paging.md).
int bs_drafter_open(bs_drafter **out, const char *dir, bs_engine *e, int max_ctx, bs_err *err) {
    return bs_drafter_open_opts(out, dir, e, max_ctx, NULL, err);
}
int bs_drafter_open_opts(bs_drafter **out, const char *dir, bs_engine *e, int max_ctx, const bs_drafter_opts *o, bs_err *err) {
    bs_drafter_opts mo = o ? *o : (bs_drafter_opts){ .lossy_weights = -1 };
    if (mo.ctx_pages <= 0) { mo.ctx_pages = e->kv_pool->n_pages; mo.ctx_page_rows = e->kv_pool->page_rows; }
    if (bs_dspark_v1_present(dir)) return bs_dspark_v1_open(out, dir, &e->target, max_ctx, &mo, err);
    return bs_dflash_open_opts(out, dir, &e->target, max_ctx, &mo, err);
}
