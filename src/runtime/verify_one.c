// A lone sequence's verify: the target forward over [anchor, d_1..d_n] with the drafts read where the
// drafter left them, and the verdict (src/spec/verify.c decides) brought back with one download. A batch
// of several sequences takes the drafts to the host instead (step.c): one forward, then the same verdicts.
#include <string.h>
#include "runtime/runtime.h"
#include "spec/verify.h"

// The verify's host ids after the anchor when it cannot read the drafts on the device: dr->tokens, or a
// download of dr->dev_tokens.
static void drafts_to_host(bs_backend *be, const bs_draft *dr, int n, int32_t *ids) {
    if (n > 0 && dr->dev_tokens) be->download(be, ids + 1, dr->dev_tokens, sizeof(int32_t) * n);
    else memcpy(ids + 1, dr->tokens, sizeof(int32_t) * n);
}
// ids[1..n] <- the drafts that came back with a round's one download; they were read on the device
// unchecked, so an id outside the vocabulary is an error now.
static int take_drafts(const int32_t *got, int n, int V, int32_t *ids, bs_err *err) {
    memcpy(ids + 1, got, sizeof(int32_t) * n);
    for (int k = 1; k <= n; k++)
        if (ids[k] < 0 || ids[k] >= V) return bs_fail(err, "drafter: drafted token %d at position %d is outside the vocabulary [0, %d)", ids[k], k, V);
    return 0;
}

static int forward_host_ids(const bs_qwen3 *tm, bs_qwen3_ws *ws, bs_kv_cache *kv, const int32_t *ids, int n, const bs_fwd_out *vo,
                            bs_err *err) {
    if (!ws) return bs_qwen3_forward(tm, kv, ids, n, vo, err);
    bs_seq_rows one = { kv, ids, n };
    return bs_qwen3_forward_batch(tm, ws, &one, 1, vo, err);
}

int bs_verify_greedy(const bs_qwen3 *tm, bs_qwen3_ws *ws, bs_kv_cache *kv, int32_t anchor, const bs_draft *dr, int n,
                     const bs_fwd_out *vo, int32_t *scratch, int32_t *ids, int32_t *targ, bs_err *err) {
    bs_backend *be = tm->be;
    const int V = tm->cfg.vocab_size;
    ids[0] = anchor;
    if (n > 0 && dr->dev_tokens && be->argmax_to && be->embed_from) {
        if (bs_qwen3_forward_dev(tm, ws, kv, anchor, dr->dev_tokens, n + 1, vo, err)) return -1;
        int32_t got[2 * BS_MAX_DRAFT + 1];
        be->argmax_to(be, scratch, vo->logits, n + 1, V, NULL);
        be->copy(be, scratch + n + 1, dr->dev_tokens, sizeof(int32_t) * n);
        be->download(be, got, scratch, sizeof(int32_t) * (2 * n + 1));
        memcpy(targ, got, sizeof(int32_t) * (n + 1));
        return take_drafts(got + n + 1, n, V, ids, err);
    }
    drafts_to_host(be, dr, n, ids);
    if (forward_host_ids(tm, ws, kv, ids, n + 1, vo, err)) return -1;
    be->argmax(be, targ, vo->logits, n + 1, V);
    return 0;
}

int bs_verify_sampled(const bs_qwen3 *tm, bs_qwen3_ws *ws, bs_kv_cache *kv, int32_t anchor, const bs_draft *dr, int n,
                      const bs_fwd_out *vo, const bs_sampling *smp, const double *u, float *residual, int32_t *scratch, int32_t *ids,
                      int32_t *next, bs_err *err) {
    bs_backend *be = tm->be;
    const int V = tm->cfg.vocab_size;
    ids[0] = anchor;
    if (n > 0 && dr->dev_tokens && be->embed_from) {
        if (bs_qwen3_forward_dev(tm, ws, kv, anchor, dr->dev_tokens, n + 1, vo, err)) return -1;
        bs_sample_rows(be, smp, vo->logits, vo->logits, n + 1, V, NULL, NULL);
        bs_accept_sampled_to(be, vo->logits, dr->q, dr->dev_tokens, n, V, u, residual, scratch);
        be->copy(be, scratch + 2, dr->dev_tokens, sizeof(int32_t) * n);
        int32_t got[BS_MAX_DRAFT + 2];
        be->download(be, got, scratch, sizeof(int32_t) * (n + 2));
        if (take_drafts(got + 2, n, V, ids, err)) return -1;
        *next = got[1];
        return got[0];
    }
    drafts_to_host(be, dr, n, ids);
    if (forward_host_ids(tm, ws, kv, ids, n + 1, vo, err)) return -1;
    return bs_verify_rows_sampled(be, smp, vo->logits, dr->q, ids + 1, n, V, u, residual, next);
}
