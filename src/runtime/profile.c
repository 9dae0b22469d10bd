// The cost model's measurement (profile.h). The best of several forwards, not their mean: on a shared
// machine a mean mixes in forwards that lost their time slice, and the scheduler wants what the forward
// costs when it runs.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/profile.h"
#include "util/timer.h"

int bs_profile_forwards(const bs_engine *e, const int *rows, int n, int ctx, int block, int reps, double *sps, bs_err *err) {
    const bs_qwen3_config *c = &e->cfg;
    bs_backend *be = e->be;
    int max_rows = 0, rc = -1;
    if (block < 1 || block > 64) return bs_fail(err, "profile: block of %d rows outside [1, 64]", block);
    if (reps < 1) reps = 1;
    if (ctx < 1) ctx = 1;
    for (int i = 0; i < n; i++) {
        if (rows[i] < 1 || rows[i] > 4096) return bs_fail(err, "profile: %d rows outside [1, 4096]", rows[i]);
        if (rows[i] > max_rows) max_rows = rows[i];
    }
    if (ctx + block > c->max_position) return bs_fail(err, "profile: a context of %d rows plus a block of %d exceeds the model's %d", ctx, block, c->max_position);
    int n_seq = (max_rows + block - 1) / block;
    bs_kv_cache *kv = calloc(n_seq, sizeof *kv);
    bs_seq_rows *sr = calloc(n_seq, sizeof *sr);
    int32_t *ids = malloc(sizeof(int32_t) * (ctx > block ? ctx : block));
    float *logits = NULL;
    bs_qwen3_ws ws = {0};
    int n_kv = 0;
    if (!kv || !sr || !ids) { bs_fail(err, "out of memory"); goto out; }
    for (int i = 0; i < (ctx > block ? ctx : block); i++) ids[i] = (int32_t)((i * 7919 + 13) % c->vocab_size);
    if (bs_qwen3_ws_init(&ws, c, be, err)) goto out;
    if (!(logits = be->alloc(be, sizeof(float) * (size_t)max_rows * c->vocab_size, err))) goto out;
    for (; n_kv < n_seq; n_kv++) if (bs_kv_init(&kv[n_kv], e->kv_pool, ctx + block, err)) goto out;
    // Every cache gets its ctx rows in one ragged prefill (last logits only).
    for (int s = 0; s < n_seq; s++) sr[s] = (bs_seq_rows){ &kv[s], ids, ctx, 1 };
    bs_fwd_out pre = { .logits = logits, .logits_all = 0 };
    if (bs_qwen3_forward_batch(&e->target, &ws, sr, n_seq, &pre, err)) goto out;
    bs_fwd_out all = { .logits = logits, .logits_all = 1 };
    for (int i = 0; i < n; i++) {
        int b = rows[i], m = (b + block - 1) / block;
        double best = 1e30;
        for (int rep = 0; rep < reps + 1; rep++) {   // one more: the first of a shape may pay for warm-up
            for (int s = 0; s < m; s++) {
                if (bs_kv_rollback(&kv[s], ctx, err)) goto out;
                sr[s] = (bs_seq_rows){ &kv[s], ids, b - s * block < block ? b - s * block : block, 0 };
            }
            be->sync(be);
            double t0 = bs_now();
            if (bs_qwen3_forward_batch(&e->target, &ws, sr, m, &all, err)) goto out;
            be->sync(be);
            double t = bs_now() - t0;
            if (rep > 0 && t < best) best = t;
        }
        sps[i] = 1 / best;
    }
    rc = 0;
out:
    for (int s = 0; s < n_kv; s++) bs_kv_free(&kv[s]);
    if (logits) be->free(be, logits);
    if (ws.be) bs_qwen3_ws_free(&ws);
    free(kv); free(sr); free(ids);
    return rc;
}

int bs_model_shape(const bs_engine *e, char *buf, size_t len) {
    const bs_qwen3_config *c = &e->cfg;
    int n = snprintf(buf, len, "L%d-H%d-I%d-A%dx%dx%d-V%d-%s", c->n_layers, c->hidden_size, c->intermediate_size, c->n_heads, c->n_kv_heads,
                     c->head_dim, c->vocab_size, bs_dtype_name(e->target.layers[0].wq.dtype));
    return n < 0 || (size_t)n >= len ? -1 : 0;
}
