// Drafting rounds recorded for calibration (spec/calib_rounds.h).
#include <stdlib.h>
#include <string.h>
#include "model/dflash.h"
#include "spec/calib_rounds.h"
#include "util/rng.h"

#define PREFILL_CHUNK 256        // as the speculative loop prefills: the taps buffer stays small

void bs_calib_rounds_free(bs_calib_rounds *r) {
    free(r->z); free(r->y); free(r->n_valid); free(r->anchor);
    memset(r, 0, sizeof *r);
}

static int grow(bs_calib_rounds *r, int need, bs_err *err) {
    if (need <= r->cap) return 0;
    int cap = r->cap ? r->cap : 256;
    while (cap < need) cap *= 2;
    float *z = realloc(r->z, sizeof(float) * (size_t)cap * r->K);
    if (z) r->z = z;
    uint8_t *y = realloc(r->y, (size_t)cap * r->K);
    if (y) r->y = y;
    int *nv = realloc(r->n_valid, sizeof(int) * cap);
    if (nv) r->n_valid = nv;
    int *an = realloc(r->anchor, sizeof(int) * cap);
    if (an) r->anchor = an;
    if (!z || !y || !nv || !an) return bs_fail(err, "calibration: out of memory for %d rounds", cap);
    r->cap = cap;
    return 0;
}

static int desc(const void *a, const void *b) { int x = *(const int *)a, y = *(const int *)b; return (x < y) - (x > y); }

int bs_calib_record_seq(bs_engine *e, bs_drafter *d, const int32_t *ids, const uint8_t *mask, int n, int n_anchors, int K,
                        bs_rng *rng, bs_calib_rounds *out, bs_err *err) {
    const bs_drafter_config *dc = bs_dflash_config(d);
    if (!dc || dc->arch != BS_DRAFTER_DEEPSPEC || !dc->conf_head)
        return bs_fail(err, "calibration needs a DeepSpec DSpark drafter with a confidence head (config.json)");
    if (K < 1 || K > d->max_drafts) return bs_fail(err, "calibration: %d draft positions asked for, the drafter drafts 1 to %d", K, d->max_drafts);
    if (out->K == 0) out->K = K;
    if (out->K != K) return bs_fail(err, "calibration: rounds of %d positions cannot join rounds of %d", K, out->K);
    bs_backend *be = e->be;
    bs_qwen3 *tm = &e->target;
    const int V = e->cfg.vocab_size, F = d->n_taps * e->cfg.hidden_size;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V) return bs_fail(err, "calibration: token %d at position %d is outside the vocabulary [0, %d)", ids[i], i, V);

    // Anchor candidates, then a partial Fisher-Yates draw, processed from the last position to the first.
    int *cand = malloc(sizeof(int) * (n > 0 ? n : 1)), nc = 0;
    if (!cand) return bs_fail(err, "out of memory");
    for (int a = 1; a < n; a++)
        if ((!mask || mask[a]) && !bs_is_eos(e, ids[a])) cand[nc++] = a;
    int na = n_anchors < nc ? n_anchors : nc;
    for (int i = 0; i < na; i++) {
        int j = i + (int)(bs_rng_u64(rng) % (uint64_t)(nc - i));
        int t = cand[i]; cand[i] = cand[j]; cand[j] = t;
    }
    qsort(cand, na, sizeof(int), desc);
    if (na == 0) { free(cand); return 0; }

    int rc = -1, recorded = 0, a_max = cand[0];
    bs_kv_cache kv = {0};
    bs_drafter_ctx dctx = {0};
    int feat_rows = a_max < PREFILL_CHUNK ? a_max : PREFILL_CHUNK;
    float *logits = be->alloc(be, sizeof(float) * (size_t)(K + 1) * V, err);
    float *feat = logits ? be->alloc(be, sizeof(float) * (size_t)feat_rows * F, err) : NULL;
    if (!logits || !feat) goto out;
    if (bs_kv_init(&kv, e->kv_pool, a_max + K + 1, err) || bs_drafter_ctx_init(d, &dctx, a_max + K + 1, err)) goto out;
    // The held-out prefix ids[0..a_max): the target's KV rows and the drafter's context rows.
    bs_fwd_out fo = { .logits = logits, .taps = d->taps, .n_taps = d->n_taps, .tap_out = feat };
    for (int r = 0; r < a_max; r += PREFILL_CHUNK) {
        int c = a_max - r < PREFILL_CHUNK ? a_max - r : PREFILL_CHUNK;
        if (bs_qwen3_forward(tm, &kv, ids + r, c, &fo, err) || d->add_context(d, &dctx, feat, c, err)) goto out;
    }
    if (grow(out, out->n + na, err)) goto out;
    for (int i = 0; i < na; i++) {
        int a = cand[i];
        // Rows >= a were overwritten by later anchors' blocks; rows < a still hold the held-out prefix.
        if (bs_kv_rollback(&kv, a, err) || d->rollback(d, &dctx, a, err)) goto out;
        bs_draft dr;
        float z[BS_MAX_DRAFT];
        bs_dflash_inspect ins = { .conf_logits = z };
        if (bs_dflash_forward_block(d, &dctx, ids[a], K, NULL, NULL, &dr, &ins, err)) goto out;
        if (dr.n != K) { bs_fail(err, "calibration: the drafter drafted %d tokens, %d asked for", dr.n, K); goto out; }
        // The engine's greedy verify: the target scores [anchor, d_1..d_K] after the prefix.
        int32_t vin[BS_MAX_DRAFT + 1], targ[BS_MAX_DRAFT + 1];
        vin[0] = ids[a];
        memcpy(vin + 1, dr.tokens, sizeof(int32_t) * K);
        bs_fwd_out vo = { .logits = logits, .logits_all = 1 };
        if (bs_qwen3_forward(tm, &kv, vin, K + 1, &vo, err)) goto out;
        be->argmax(be, targ, logits, K + 1, V);
        float *zr = out->z + (size_t)out->n * K;
        uint8_t *yr = out->y + (size_t)out->n * K;
        int alive = 1, nv = K;
        for (int k = 0; k < K; k++) {
            alive = alive && dr.tokens[k] == targ[k];
            zr[k] = z[k]; yr[k] = (uint8_t)alive;
            // An accepted end-of-sequence draft ends the round (and generation): later positions never count.
            if (alive && nv == K && bs_is_eos(e, dr.tokens[k])) nv = k + 1;
        }
        out->anchor[out->n] = a;
        out->n_valid[out->n++] = nv;
        recorded++;
    }
    rc = recorded;
out:
    bs_drafter_ctx_free(d, &dctx);
    bs_kv_free(&kv);
    if (logits) be->free(be, logits);
    if (feat) be->free(be, feat);
    free(cand);
    return rc;
}
