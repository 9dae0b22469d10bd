// Qwen3 forward, written once against the backend ops (src/backend/backend.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/qwen3.h"

#define CHUNK_ROWS 64

int bs_qwen3_use_graphs = -1;

static int load_layer(bs_qwen3_layer *L, int i, const bs_qwen3_config *c, const bs_checkpoint *ck, bs_backend *be, bs_err *err) {
    int H = c->hidden_size, qd = c->n_heads * c->head_dim, kd = c->n_kv_heads * c->head_dim, I = c->intermediate_size;
    struct { bs_mat *m; const char *name; int64_t rows, cols; } w[] = {
        { &L->attn_norm, "input_layernorm.weight", 0, H },
        { &L->wq, "self_attn.q_proj.weight", qd, H }, { &L->wk, "self_attn.k_proj.weight", kd, H },
        { &L->wv, "self_attn.v_proj.weight", kd, H }, { &L->wo, "self_attn.o_proj.weight", H, qd },
        { &L->q_norm, "self_attn.q_norm.weight", 0, c->head_dim }, { &L->k_norm, "self_attn.k_norm.weight", 0, c->head_dim },
        { &L->mlp_norm, "post_attention_layernorm.weight", 0, H },
        { &L->w_gate, "mlp.gate_proj.weight", I, H }, { &L->w_up, "mlp.up_proj.weight", I, H },
        { &L->w_down, "mlp.down_proj.weight", H, I },
    };
    for (size_t k = 0; k < sizeof w / sizeof *w; k++) {
        char name[256]; bs_mat host;
        snprintf(name, sizeof name, "model.layers.%d.%s", i, w[k].name);
        if (bs_checkpoint_mat(ck, name, w[k].rows, w[k].cols, &host, err) || be->weight(be, w[k].m, &host, err)) return -1;
    }
    return 0;
}

int bs_qwen3_init(bs_qwen3 *m, const bs_qwen3_config *cfg, const bs_checkpoint *ck, bs_backend *be, bs_err *err) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg; m->be = be; m->max_rows = CHUNK_ROWS;
    const bs_qwen3_config *c = cfg;
    bs_mat host;
    if (bs_checkpoint_mat(ck, "model.embed_tokens.weight", c->vocab_size, c->hidden_size, &host, err) ||
        be->weight(be, &m->embed, &host, err)) goto fail;
    m->embed_host = m->lm_head_host = host;
    if (bs_checkpoint_mat(ck, "model.norm.weight", 0, c->hidden_size, &host, err) || be->weight(be, &m->norm, &host, err)) goto fail;
    if (c->tie_embeddings) {
        m->lm_head = m->embed;
    } else if (!bs_checkpoint_find(ck, "lm_head.weight")) {
        bs_fail(err, "%s: missing tensor 'lm_head.weight' (config.json says tie_word_embeddings is false)", ck->path); goto fail;
    } else if (bs_checkpoint_mat(ck, "lm_head.weight", c->vocab_size, c->hidden_size, &host, err) || be->weight(be, &m->lm_head, &host, err)) {
        goto fail;
    } else m->lm_head_host = host;
    m->layers = calloc(c->n_layers, sizeof *m->layers);
    if (!m->layers) { bs_fail(err, "out of memory"); goto fail; }
    for (int i = 0; i < c->n_layers; i++) if (load_layer(&m->layers[i], i, c, ck, be, err)) goto fail;
    size_t R = m->max_rows, H = c->hidden_size, qd = (size_t)c->n_heads * c->head_dim, I = c->intermediate_size;
    size_t kd = (size_t)c->n_kv_heads * c->head_dim;
    if (!(m->x = be->alloc(be, R * H * 4, err)) || !(m->xn = be->alloc(be, R * H * 4, err)) ||
        !(m->kx = be->alloc(be, R * kd * 4, err)) || !(m->vx = be->alloc(be, R * kd * 4, err)) ||
        !(m->q = be->alloc(be, R * qd * 4, err)) || !(m->att = be->alloc(be, R * qd * 4, err)) ||
        !(m->gate = be->alloc(be, R * I * 4, err)) || !(m->up = be->alloc(be, R * I * 4, err))) goto fail;
    return 0;
fail:
    bs_qwen3_free(m);
    return -1;
}

void bs_qwen3_free(bs_qwen3 *m) {
    if (!m->be) return;
    float *bufs[] = { m->x, m->xn, m->q, m->kx, m->vx, m->att, m->gate, m->up };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) if (bufs[i]) m->be->free(m->be, bufs[i]);
    free(m->layers);
    memset(m, 0, sizeof *m);
}

int bs_kv_init(bs_kv_cache *kv, const bs_qwen3_config *c, int max_ctx, bs_backend *be, bs_err *err) {
    memset(kv, 0, sizeof *kv);
    // Capped at max_position_embeddings; kv->max_ctx tells the caller the context it got (the CLI warns).
    if (max_ctx <= 0 || max_ctx > c->max_position) max_ctx = c->max_position;
    kv->n_layers = c->n_layers; kv->kv_dim = c->n_kv_heads * c->head_dim; kv->max_ctx = max_ctx; kv->be = be;
    kv->k = calloc(c->n_layers, sizeof *kv->k); kv->v = calloc(c->n_layers, sizeof *kv->v);
    if (!kv->k || !kv->v) { bs_kv_free(kv); return bs_fail(err, "out of memory"); }
    size_t bytes = (size_t)max_ctx * kv->kv_dim * sizeof(float);
    for (int l = 0; l < c->n_layers; l++)
        if (!(kv->k[l] = be->alloc(be, bytes, err)) || !(kv->v[l] = be->alloc(be, bytes, err))) {
            bs_kv_free(kv);
            return bs_wrap(err, "KV cache for %d positions", max_ctx);
        }
    return 0;
}

// A recorded single-chunk forward: replayable at any position with other ids.
typedef struct bs_fwd_rec {
    const bs_qwen3 *m;
    int n, logits_all, n_taps, taps[16];
    float *logits, *tap_out;
    const int32_t *dev_ids;      // the rows' ids after the first were read from here (bs_qwen3_forward_dev)
    int seen;                    // calls with this key so far (the second one records)
    void *rec;
} bs_fwd_rec;
#define MAX_RECS 64   // per KV cache: shapes x output buffers x (host ids, device ids); past it a shape runs unrecorded

void bs_kv_free(bs_kv_cache *kv) {
    for (int i = 0; i < kv->n_recs; i++)
        if (kv->recs[i].rec) kv->be->record_free(kv->be, kv->recs[i].rec);
    free(kv->recs);
    for (int l = 0; kv->be && l < kv->n_layers; l++) {
        if (kv->k && kv->k[l]) kv->be->free(kv->be, kv->k[l]);
        if (kv->v && kv->v[l]) kv->be->free(kv->be, kv->v[l]);
    }
    free(kv->k); free(kv->v);
    memset(kv, 0, sizeof *kv);
}

int bs_kv_rollback(bs_kv_cache *kv, int n_past, bs_err *err) {
    if (n_past < 0 || n_past > kv->n_past) return bs_fail(err, "cannot roll the KV cache back to %d rows (it holds %d)", n_past, kv->n_past);
    kv->n_past = n_past;
    return 0;
}

// Copies hidden state rows for every requested tap equal to `index` into the tap output.
static void emit_taps(bs_qwen3 *m, const bs_fwd_out *out, int index, const float *h, int row0, int n) {
    int H = m->cfg.hidden_size;
    for (int t = 0; t < out->n_taps; t++)
        if (out->taps[t] == index)
            m->be->copy_rows(m->be, out->tap_out + (size_t)row0 * out->n_taps * H + (size_t)t * H, (size_t)out->n_taps * H, h, H, n, H);
}

// dev_ids != NULL: rows 1..n-1 take their ids from backend memory (bs_qwen3_forward_dev), row 0 from ids[0].
static void forward_chunk(bs_qwen3 *m, bs_kv_cache *kv, const int32_t *ids, int n, const bs_fwd_out *out, int row0, int is_last_chunk,
                          const int32_t *dev_ids) {
    const bs_qwen3_config *c = &m->cfg;
    bs_backend *be = m->be;
    int H = c->hidden_size, hd = c->head_dim, nH = c->n_heads, nKV = c->n_kv_heads;
    int pos0 = kv->n_past;
    be->embed(be, m->x, &m->embed, ids, dev_ids ? 1 : n);
    if (dev_ids && n > 1) be->embed_from(be, m->x + H, &m->embed, dev_ids, n - 1);
    emit_taps(m, out, 0, m->x, row0, n);
    for (int l = 0; l < c->n_layers; l++) {
        bs_qwen3_layer *L = &m->layers[l];
        be->rmsnorm(be, m->xn, m->x, n, H, &L->attn_norm, c->rms_eps);
        const bs_mat *wqkv[3] = { &L->wq, &L->wk, &L->wv };
        // q/k/v, then q/k norm + RoPE and the new K/V rows into the cache at their positions (a position
        // argument: replayable).
        bs_qkv_norm_rope_store(be, m->xn, n, wqkv, m->q, m->kx, m->vx, nH, nKV, hd, &L->q_norm, &L->k_norm, c->rms_eps, pos0,
                               c->rope_theta, kv->k[l], kv->v[l]);
        be->attention(be, m->att, m->q, kv->k[l], kv->v[l], n, nH, nKV, hd, pos0 + n, pos0, 1, 0);
        be->matmul(be, m->x, m->att, n, &L->wo, 1);  // residual add fused into the projection
        be->rmsnorm(be, m->xn, m->x, n, H, &L->mlp_norm, c->rms_eps);
        float *gu[2] = { m->gate, m->up };
        const bs_mat *wgu[2] = { &L->w_gate, &L->w_up };
        bs_matmul_multi(be, 2, gu, m->xn, n, wgu, 0);
        bs_swiglu_matmul(be, m->x, m->gate, m->up, n, &L->w_down, 1);
        if (l + 1 < c->n_layers) emit_taps(m, out, l + 1, m->x, row0, n);
    }
    kv->n_past += n;
    // Final norm: needed for every row when logits of all rows or the last tap are asked for.
    int need_all = out->logits_all, last_tap = 0;
    for (int t = 0; t < out->n_taps; t++) last_tap |= out->taps[t] == c->n_layers;
    if (need_all || last_tap) {
        be->rmsnorm(be, m->xn, m->x, n, H, &m->norm, c->rms_eps);
        emit_taps(m, out, c->n_layers, m->xn, row0, n);
        if (out->logits && need_all) be->matmul(be, out->logits + (size_t)row0 * c->vocab_size, m->xn, n, &m->lm_head, 0);
    }
    if (out->logits && !need_all && is_last_chunk) {
        float *last = m->xn + (size_t)(n - 1) * H;
        if (!last_tap) be->rmsnorm(be, last, m->x + (size_t)(n - 1) * H, 1, H, &m->norm, c->rms_eps);
        be->matmul(be, out->logits, last, 1, &m->lm_head, 0);
    }
}

// Backends with record/replay: a forward of a shape seen before is recorded once (the second time)
// and replayed from then on. Returns 0 when done, -1 on error, 1 when the call must run plainly.
static int forward_recorded(bs_qwen3 *m, bs_kv_cache *kv, const int32_t *ids, int n, const bs_fwd_out *out, const int32_t *dev_ids,
                            bs_err *err) {
    if (bs_qwen3_use_graphs < 0) { const char *e = getenv("BS_GRAPHS"); bs_qwen3_use_graphs = !(e && !strcmp(e, "0")); }
    if (!bs_qwen3_use_graphs || out->n_taps > 16) return 1;
    bs_backend *be = m->be;
    bs_fwd_rec *r = NULL;
    for (int i = 0; i < kv->n_recs && !r; i++) {
        bs_fwd_rec *c = &kv->recs[i];
        if (c->m == m && c->n == n && c->logits_all == out->logits_all && c->logits == out->logits && c->tap_out == out->tap_out &&
            c->n_taps == out->n_taps && !memcmp(c->taps, out->taps, sizeof(int) * out->n_taps) && c->dev_ids == dev_ids) r = c;
    }
    if (!r) {
        if (kv->n_recs == MAX_RECS) return 1;
        if (!kv->recs && !(kv->recs = calloc(MAX_RECS, sizeof *kv->recs))) return 1;
        r = &kv->recs[kv->n_recs++];
        r->m = m; r->n = n; r->logits_all = out->logits_all; r->logits = out->logits; r->tap_out = out->tap_out;
        r->n_taps = out->n_taps; memcpy(r->taps, out->taps, sizeof(int) * out->n_taps); r->dev_ids = dev_ids;
    }
    if (!r->rec && r->seen++ < 1) return 1;    // first time: plain (one-off shapes like a prompt stay unrecorded)
    int pos0 = kv->n_past;
    if (!r->rec) {
        if (be->record_begin(be, pos0)) return 1;
        forward_chunk(m, kv, ids, n, out, 0, 1, dev_ids);
        kv->n_past = pos0;
        if (!(r->rec = be->record_end(be, err))) return -1;
    }
    be->replay(be, r->rec, pos0, ids, dev_ids ? 1 : n);
    kv->n_past = pos0 + n;
    return 0;
}

// What every forward checks besides its ids: room in the context and the tap indices.
static int check_forward(const bs_qwen3 *m, const bs_kv_cache *kv, int n, const bs_fwd_out *out, bs_err *err) {
    if (kv->n_past + n > kv->max_ctx)
        return bs_fail(err, "context full: %d cached + %d new tokens exceed the context length %d", kv->n_past, n, kv->max_ctx);
    for (int t = 0; t < out->n_taps; t++)
        if (out->taps[t] < 0 || out->taps[t] > m->cfg.n_layers) return bs_fail(err, "tap %d is outside hidden_states [0, %d]", out->taps[t], m->cfg.n_layers);
    return 0;
}

int bs_qwen3_forward(bs_qwen3 *m, bs_kv_cache *kv, const int32_t *ids, int n, const bs_fwd_out *out, bs_err *err) {
    static const bs_fwd_out none = { 0 };
    if (!out) out = &none;
    if (n <= 0) return bs_fail(err, "forward needs at least one token");
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab_size) return bs_fail(err, "token id %d at index %d is outside the vocabulary [0, %d)", ids[i], i, m->cfg.vocab_size);
    if (check_forward(m, kv, n, out, err)) return -1;
    if (n <= m->max_rows && m->be->record_begin) {
        int rc = forward_recorded(m, kv, ids, n, out, NULL, err);
        if (rc <= 0) return rc;   // 1: not recordable, run it plainly
    }
    for (int r = 0; r < n; r += m->max_rows) {
        int c = n - r < m->max_rows ? n - r : m->max_rows;
        forward_chunk(m, kv, ids + r, c, out, r, r + c == n, NULL);
    }
    return 0;
}

int bs_qwen3_forward_dev(bs_qwen3 *m, bs_kv_cache *kv, int32_t id0, const int32_t *dev_ids, int n, const bs_fwd_out *out, bs_err *err) {
    static const bs_fwd_out none = { 0 };
    if (!out) out = &none;
    if (n <= 0 || n > m->max_rows) return bs_fail(err, "forward with ids in backend memory takes 1..%d rows (got %d)", m->max_rows, n);
    if (!m->be->embed_from) return bs_fail(err, "backend %s cannot embed ids from its memory", m->be->name);
    if (id0 < 0 || id0 >= m->cfg.vocab_size) return bs_fail(err, "token id %d at index 0 is outside the vocabulary [0, %d)", id0, m->cfg.vocab_size);
    if (check_forward(m, kv, n, out, err)) return -1;
    if (m->be->record_begin) {
        int rc = forward_recorded(m, kv, &id0, n, out, dev_ids, err);
        if (rc <= 0) return rc;
    }
    forward_chunk(m, kv, &id0, n, out, 0, 1, dev_ids);
    return 0;
}
