// Qwen3 forward, written once against the backend ops (src/backend/backend.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "io/quant_config.h"
#include "model/gemma4.h"
#include "model/qwen3.h"
#include "util/tuning.h"
#include "model/rope.h"

// A matrix (Linear, embedding, LM head): dense or MLX affine as the checkpoint holds it, handed to the
// backend; a backend that cannot compute with its format refuses it here, and the message names the tensor.
int bs_model_load_matrix(const bs_checkpoint *ck, const bs_quant_config *qc, bs_backend *be, const char *name, int64_t rows, int64_t cols,
                       bs_mat *dst, bs_mat *host, bs_err *err) {
    bs_mat h;
    if (bs_checkpoint_weight(ck, qc, name, rows, cols, &h, err)) return -1;
    if (be->weight(be, dst, &h, err)) return bs_wrap(err, "%s: tensor '%s'", ck->path, name);
    if (host) *host = h;
    return 0;
}

static int load_layer(bs_qwen3_layer *L, int i, const bs_qwen3_config *c, const bs_checkpoint *ck, const bs_quant_config *qc, bs_backend *be,
                      bs_err *err) {
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
        if ((w[k].m == &L->q_norm || w[k].m == &L->k_norm) && !bs_qwen3_has_qk_norm(c)) continue;   // Llama
        char name[256]; bs_mat host;
        snprintf(name, sizeof name, "model.layers.%d.%s", i, w[k].name);
        if (w[k].rows ? bs_model_load_matrix(ck, qc, be, name, w[k].rows, w[k].cols, w[k].m, NULL, err)
                      : bs_checkpoint_mat(ck, name, 0, w[k].cols, &host, err) || be->weight(be, w[k].m, &host, err)) return -1;
    }
    return 0;
}

int bs_qwen3_init(bs_qwen3 *m, const bs_qwen3_config *cfg, const bs_checkpoint *ck, bs_backend *be, bs_err *err) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg; m->be = be;
    m->use_graphs = bs_tuning_get()->graphs;
    const bs_qwen3_config *c = cfg;
    bs_mat host;
    // A quantised checkpoint's bits and group sizes (MLX affine, docs/quantization.md) come from its config.json.
    bs_quant_config qc;
    if (bs_quant_config_load(&qc, ck->path, err)) return -1;
    if (bs_r1_basis_load(&m->r1, ck->path, c->hidden_size, err) < 0) { bs_quant_config_free(&qc); return -1; }
    if (c->arch == BS_ARCH_GEMMA4) {   // its own tensor names and extra weights (model/gemma4.c)
        if (bs_gemma4_init(m, ck, &qc, err)) goto fail;
        bs_quant_config_free(&qc);
        return 0;
    }
    if (bs_model_load_matrix(ck, &qc, be, "model.embed_tokens.weight", c->vocab_size, c->hidden_size, &m->embed, &host, err)) goto fail;
    m->embed_host = m->lm_head_host = host;
    if (bs_checkpoint_mat(ck, "model.norm.weight", 0, c->hidden_size, &host, err) || be->weight(be, &m->norm, &host, err)) goto fail;
    if (c->tie_embeddings) {
        m->lm_head = m->embed;
    } else if (!bs_checkpoint_find(ck, "lm_head.weight")) {
        bs_fail(err, "%s: missing tensor 'lm_head.weight' (config.json says tie_word_embeddings is false)", ck->path); goto fail;
    } else if (bs_model_load_matrix(ck, &qc, be, "lm_head.weight", c->vocab_size, c->hidden_size, &m->lm_head, &m->lm_head_host, err)) {
        goto fail;
    }
    if (!(m->rope_inv_freq = bs_rope_table(be, c->rope_theta, &c->rope, c->head_dim, err))) goto fail;
    m->layers = calloc(c->n_layers, sizeof *m->layers);
    if (!m->layers) { bs_fail(err, "out of memory"); goto fail; }
    for (int i = 0; i < c->n_layers; i++) if (load_layer(&m->layers[i], i, c, ck, &qc, be, err)) goto fail;
    bs_quant_config_free(&qc);
    return 0;
fail:
    bs_quant_config_free(&qc);
    bs_qwen3_free(m);
    return -1;
}

void bs_qwen3_free(bs_qwen3 *m) {
    if (!m->be) return;
    if (m->rope_inv_freq) m->be->free(m->be, m->rope_inv_freq);
    bs_gemma4_free(m);
    free(m->layers);
    bs_r1_basis_free(&m->r1);
    memset(m, 0, sizeof *m);
}

int bs_qwen3_ws_init(bs_qwen3_ws *ws, const bs_qwen3_config *c, bs_backend *be, bs_err *err) {
    memset(ws, 0, sizeof *ws);
    ws->be = be;
    // (the widest layer's sizes: every layer's but Gemma-4's are the config's)
    size_t R = BS_QWEN3_CHUNK_ROWS, H = c->hidden_size, qd = bs_cfg_max_q_width(c), I = bs_cfg_max_inter(c);
    size_t kd = bs_cfg_max_kv_width(c);
    if (c->arch == BS_ARCH_GEMMA4 && (size_t)c->gemma.ple_dim > I) I = c->gemma.ple_dim;   // the per-layer gate reuses gate/up
    if (!(ws->x = be->alloc(be, R * H * 4, err)) || !(ws->xn = be->alloc(be, R * H * 4, err)) ||
        !(ws->kx = be->alloc(be, R * kd * 4, err)) || !(ws->vx = be->alloc(be, R * kd * 4, err)) ||
        !(ws->q = be->alloc(be, R * qd * 4, err)) || !(ws->att = be->alloc(be, R * qd * 4, err)) ||
        !(ws->gate = be->alloc(be, R * I * 4, err)) || !(ws->up = be->alloc(be, R * I * 4, err)) ||
        (c->arch == BS_ARCH_GEMMA4 && bs_gemma4_ws_init(ws, c, be, err))) {
        bs_qwen3_ws_free(ws);
        return bs_wrap(err, "forward scratch");
    }
    return 0;
}

void bs_qwen3_ws_free(bs_qwen3_ws *ws) {
    if (!ws->be) return;
    float *bufs[] = { ws->x, ws->xn, ws->q, ws->kx, ws->vx, ws->att, ws->gate, ws->up, ws->t, ws->ple, ws->ple2 };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) if (bufs[i]) ws->be->free(ws->be, bufs[i]);
    memset(ws, 0, sizeof *ws);
}

int bs_qwen3_kv_pool_init(bs_kv_pool *pool, const bs_qwen3 *m, int n_pages, int page_rows, bs_err *err) {
    const bs_qwen3_config *c = &m->cfg;
    if (bs_kv_pool_init(pool, m->be, c->n_layers, bs_cfg_max_kv_width(c), page_rows, n_pages, err)) return -1;
    pool->max_rows = c->max_position;
    return 0;
}

int bs_kv_init(bs_kv_cache *kv, bs_kv_pool *pool, int max_ctx, bs_err *err) {
    memset(kv, 0, sizeof *kv);
    // Capped at max_position_embeddings; kv->max_ctx tells the caller the context it got (the CLI warns).
    if (max_ctx <= 0 || (pool->max_rows > 0 && max_ctx > pool->max_rows)) max_ctx = pool->max_rows > 0 ? pool->max_rows : max_ctx;
    if (max_ctx <= 0) return bs_fail(err, "a KV cache needs a context length");
    kv->max_ctx = max_ctx; kv->be = pool->be;
    if (bs_page_table_init(&kv->pages, pool, max_ctx, err)) { memset(kv, 0, sizeof *kv); return bs_wrap(err, "KV cache for %d positions", max_ctx); }
    return 0;
}

int bs_kv_reserve(bs_kv_cache *kv, int extra_rows, bs_err *err) {
    return bs_page_table_reserve(&kv->pages, kv->max_ctx + extra_rows, err);
}

// A recorded single-chunk forward: replayable at any position with other ids.
typedef struct bs_fwd_rec {
    const bs_qwen3 *m;
    const bs_qwen3_ws *ws;
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
    bs_qwen3_ws_free(&kv->ws);
    bs_page_table_free(&kv->pages);
    memset(kv, 0, sizeof *kv);
}

int bs_kv_rollback(bs_kv_cache *kv, int n_past, bs_err *err) {
    if (n_past < 0 || n_past > kv->n_past) return bs_fail(err, "cannot roll the KV cache back to %d rows (it holds %d)", n_past, kv->n_past);
    kv->n_past = n_past;
    bs_page_table_shrink(&kv->pages, n_past);
    return 0;
}

// A chunk of a batch forward: at most BS_QWEN3_CHUNK_ROWS consecutive batch rows, cut into one piece per
// sequence they touch (a sequence longer than what is left of the chunk continues in the next one).
typedef struct piece {
    bs_kv_cache *kv;
    const int32_t *ids;
    int n;              // rows in this chunk
    int ends_seq;       // the sequence's last row is this piece's last
    int all_logits;     // a logits row per row (else only the sequence's last)
    int lrow;           // logits row of the piece's first row (all_logits), else of the sequence's last row
} piece;

typedef struct chunk {
    piece p[BS_QWEN3_CHUNK_ROWS];
    int n_pieces, n_rows, row0;      // row0: the chunk's first row in the batch
    const int32_t *dev_ids;          // bs_qwen3_forward_dev: rows 1..n-1 take their ids from backend memory
} chunk;

// Copies hidden state rows for every requested tap equal to `index` into the tap output.
static void emit_taps(const bs_qwen3 *m, const bs_fwd_out *out, int index, const float *h, int row0, int n) {
    int H = m->cfg.hidden_size;
    for (int t = 0; t < out->n_taps; t++)
        if (out->taps[t] == index)
            m->be->copy_rows(m->be, out->tap_out + (size_t)row0 * out->n_taps * H + (size_t)t * H, (size_t)out->n_taps * H, h, H, n, H);
}

// The chunk's rows of an embedding table (the token embedding; Gemma-4's per-layer one) into out.
static void embed_chunk(const bs_qwen3 *m, float *out, const bs_mat *table, const chunk *ch) {
    bs_backend *be = m->be;
    if (ch->n_pieces == 1) {   // one sequence: its ids as they are (and those in backend memory)
        const piece *p = &ch->p[0];
        be->embed(be, out, table, p->ids, ch->dev_ids ? 1 : p->n);
        if (ch->dev_ids && p->n > 1) be->embed_from(be, out + table->cols, table, ch->dev_ids, p->n - 1);
        return;
    }
    int32_t ids[BS_QWEN3_CHUNK_ROWS];
    for (int i = 0, r = 0; i < ch->n_pieces; r += ch->p[i].n, i++) memcpy(ids + r, ch->p[i].ids, sizeof(int32_t) * ch->p[i].n);
    be->embed(be, out, table, ids, ch->n_rows);
}

// The chunk's rows through every layer. Row-wise ops run over all of them at once; the ones that depend on
// a row's sequence (RoPE positions, K/V stores, attention) take the spans.
static void forward_chunk(const bs_qwen3 *m, bs_qwen3_ws *ws, const chunk *ch, const bs_fwd_out *out) {
    const bs_qwen3_config *c = &m->cfg;
    bs_backend *be = m->be;
    int H = c->hidden_size, hd = c->head_dim, nH = c->n_heads, nKV = c->n_kv_heads, n = ch->n_rows, row0 = ch->row0;
    bs_row_span spans[BS_QWEN3_CHUNK_ROWS];
    for (int i = 0, r = 0; i < ch->n_pieces; r += ch->p[i].n, i++)
        spans[i] = (bs_row_span){ .row0 = r, .n = ch->p[i].n, .pos0 = ch->p[i].kv->n_past };
    embed_chunk(m, ws->x, &m->embed, ch);
    int gemma = c->arch == BS_ARCH_GEMMA4;
    if (gemma) {   // scaled embeddings, per-layer inputs (model/gemma4.c)
        if (c->gemma.ple_dim) embed_chunk(m, ws->ple2, &m->gemma->ple_embed, ch);
        bs_gemma4_inputs(m, ws, n);
    }
    emit_taps(m, out, 0, ws->x, row0, n);
    for (int l = 0; l < c->n_layers; l++) {
        if (gemma) {
            int src = bs_cfg_layer_kv_source(c, l);   // a KV-shared layer reads its source layer's cache
            for (int i = 0; i < ch->n_pieces; i++) spans[i].kv = bs_page_table_view(&ch->p[i].kv->pages, src);
            bs_gemma4_layer_forward(m, ws, l, spans, ch->n_pieces, n);
            if (l + 1 < c->n_layers) emit_taps(m, out, l + 1, ws->x, row0, n);
            continue;
        }
        const bs_qwen3_layer *L = &m->layers[l];
        const bs_mat *qn = bs_qwen3_has_qk_norm(c) ? &L->q_norm : NULL, *kn = bs_qwen3_has_qk_norm(c) ? &L->k_norm : NULL;
        be->rmsnorm(be, ws->xn, ws->x, n, H, &L->attn_norm, c->rms_eps);
        const bs_mat *wqkv[3] = { &L->wq, &L->wk, &L->wv };
        for (int i = 0; i < ch->n_pieces; i++) spans[i].kv = bs_page_table_view(&ch->p[i].kv->pages, l);
        // q/k/v, then q/k norm + RoPE and the new K/V rows into each sequence's cache at its positions (a
        // position argument: replayable). One sequence: the fused op, bit-equal to the two steps (backend.h).
        if (ch->n_pieces == 1) {
            bs_qkv_norm_rope_store(be, ws->xn, n, wqkv, ws->q, ws->kx, ws->vx, nH, nKV, hd, qn, kn, c->rms_eps,
                                   spans[0].pos0, m->rope_inv_freq, &spans[0].kv);
        } else {
            float *y[3] = { ws->q, ws->kx, ws->vx };
            bs_matmul_multi(be, 3, y, ws->xn, n, wqkv, 0);
            bs_qk_norm_rope_store_spans(be, ws->q, ws->kx, ws->vx, spans, ch->n_pieces, nH, nKV, hd, qn, kn, c->rms_eps,
                                        m->rope_inv_freq);
        }
        bs_attention_spans(be, ws->att, ws->q, spans, ch->n_pieces, nH, nKV, hd);
        be->matmul(be, ws->x, ws->att, n, &L->wo, 1);  // residual add fused into the projection
        be->rmsnorm(be, ws->xn, ws->x, n, H, &L->mlp_norm, c->rms_eps);
        float *gu[2] = { ws->gate, ws->up };
        const bs_mat *wgu[2] = { &L->w_gate, &L->w_up };
        bs_matmul_multi(be, 2, gu, ws->xn, n, wgu, 0);
        bs_swiglu_matmul(be, ws->x, ws->gate, ws->up, n, &L->w_down, 1);
        if (l + 1 < c->n_layers) emit_taps(m, out, l + 1, ws->x, row0, n);
    }
    for (int i = 0; i < ch->n_pieces; i++) ch->p[i].kv->n_past += ch->p[i].n;
    // Final norm: needed for every row when logits of all rows or the last tap are asked for.
    int need_all = 0, last_tap = 0;
    for (int i = 0; i < ch->n_pieces; i++) need_all |= ch->p[i].all_logits;
    for (int t = 0; t < out->n_taps; t++) last_tap |= out->taps[t] == c->n_layers;
    if (need_all || last_tap) {
        be->rmsnorm(be, ws->xn, ws->x, n, H, &m->norm, c->rms_eps);
        emit_taps(m, out, c->n_layers, ws->xn, row0, n);
    }
    if (!out->logits) return;
    size_t V = c->vocab_size;
    for (int i = 0; i < ch->n_pieces;) {
        const piece *p = &ch->p[i];
        if (p->all_logits) {   // a run of pieces whose logits rows follow one another: one LM head call
            int j = i + 1, rows = p->n;
            while (j < ch->n_pieces && ch->p[j].all_logits && ch->p[j].lrow == p->lrow + rows) rows += ch->p[j++].n;
            be->matmul(be, out->logits + (size_t)p->lrow * V, ws->xn + (size_t)spans[i].row0 * H, rows, &m->lm_head, 0);
            if (gemma) bs_gemma4_softcap(m, out->logits + (size_t)p->lrow * V, rows);
            i = j;
            continue;
        }
        if (p->ends_seq) {     // only the sequence's last row
            size_t r = (size_t)spans[i].row0 + spans[i].n - 1;
            float *last = ws->xn + r * H;
            if (!need_all && !last_tap) be->rmsnorm(be, last, ws->x + r * H, 1, H, &m->norm, c->rms_eps);
            be->matmul(be, out->logits + (size_t)p->lrow * V, last, 1, &m->lm_head, 0);
            if (gemma) bs_gemma4_softcap(m, out->logits + (size_t)p->lrow * V, 1);
        }
        i++;
    }
}

// A single-sequence chunk of rows [0, n).
static chunk one_chunk(bs_kv_cache *kv, const int32_t *ids, int n, const bs_fwd_out *out, const int32_t *dev_ids) {
    chunk ch = { .n_pieces = 1, .n_rows = n, .dev_ids = dev_ids };
    ch.p[0] = (piece){ kv, ids, n, 1, out->logits_all, 0 };
    return ch;
}

// Backends with record/replay: a one-sequence forward of a shape seen before is recorded once (the
// second time) and replayed from then on. Returns 0 when done, -1 on error, 1 when the call must run plainly.
static int forward_recorded(const bs_qwen3 *m, bs_qwen3_ws *ws, bs_kv_cache *kv, const int32_t *ids, int n, const bs_fwd_out *out,
                            const int32_t *dev_ids, bs_err *err) {
    if (!m->use_graphs || out->n_taps > 16) return 1;
    bs_backend *be = m->be;
    bs_fwd_rec *r = NULL;
    for (int i = 0; i < kv->n_recs && !r; i++) {
        bs_fwd_rec *c = &kv->recs[i];
        if (c->m == m && c->ws == ws && c->n == n && c->logits_all == out->logits_all && c->logits == out->logits && c->tap_out == out->tap_out &&
            c->n_taps == out->n_taps && (out->n_taps == 0 || !memcmp(c->taps, out->taps, sizeof(int) * out->n_taps)) && c->dev_ids == dev_ids) r = c;
    }
    if (!r) {
        if (kv->n_recs == MAX_RECS) return 1;
        if (!kv->recs && !(kv->recs = calloc(MAX_RECS, sizeof *kv->recs))) return 1;
        r = &kv->recs[kv->n_recs++];
        r->m = m; r->ws = ws; r->n = n; r->logits_all = out->logits_all; r->logits = out->logits; r->tap_out = out->tap_out;
        r->n_taps = out->n_taps; if (out->n_taps) memcpy(r->taps, out->taps, sizeof(int) * out->n_taps); r->dev_ids = dev_ids;   // taps may be NULL when none
    }
    if (!r->rec && r->seen++ < 1) return 1;    // first time: plain (one-off shapes like a prompt stay unrecorded)
    int pos0 = kv->n_past;
    if (!r->rec) {
        if (be->record_begin(be, pos0)) return 1;
        chunk ch = one_chunk(kv, ids, n, out, dev_ids);
        forward_chunk(m, ws, &ch, out);
        kv->n_past = pos0;
        if (!(r->rec = be->record_end(be, err))) return -1;
        // An op that failed while recording (backend.h) left the recording incomplete: never replay it.
        if (bs_backend_check(be, err)) { be->record_free(be, r->rec); r->rec = NULL; return bs_wrap(err, "target forward (recording)"); }
    }
    be->replay(be, r->rec, pos0, ids, dev_ids ? 1 : n);
    kv->n_past = pos0 + n;
    return 0;
}

// The end of every forward: an op that could not run (backend.h, bs_backend_fail) fails the forward.
static int forward_done(const bs_qwen3 *m, bs_err *err) {
    if (bs_backend_check(m->be, err)) return bs_wrap(err, "target forward");
    return 0;
}

// What every forward checks besides its ids: room in the context and the tap indices. Then the cache takes
// the pages of the new rows, and the ops will read its page table (uploaded where it changed).
static int check_forward(const bs_qwen3 *m, bs_kv_cache *kv, int n, const bs_fwd_out *out, bs_err *err) {
    if (kv->n_past + n > kv->max_ctx)
        return bs_fail(err, "context full: %d cached + %d new tokens exceed the context length %d", kv->n_past, n, kv->max_ctx);
    for (int t = 0; t < out->n_taps; t++)
        if (out->taps[t] < 0 || out->taps[t] > m->cfg.n_layers) return bs_fail(err, "tap %d is outside hidden_states [0, %d]", out->taps[t], m->cfg.n_layers);
    if (bs_page_table_grow(&kv->pages, kv->n_past + n, err)) return -1;
    bs_page_table_sync(&kv->pages);
    return 0;
}

static int check_seq(const bs_qwen3 *m, const bs_seq_rows *s, int index, const bs_fwd_out *out, bs_err *err) {
    if (s->n <= 0) return bs_fail(err, "forward needs at least one token (sequence %d of the batch has %d)", index, s->n);
    for (int i = 0; i < s->n; i++)
        if (s->ids[i] < 0 || s->ids[i] >= m->cfg.vocab_size)
            return bs_fail(err, "token id %d at index %d is outside the vocabulary [0, %d)", s->ids[i], i, m->cfg.vocab_size);
    return check_forward(m, s->kv, s->n, out, err);
}

int bs_qwen3_forward_batch(const bs_qwen3 *m, bs_qwen3_ws *ws, const bs_seq_rows *seqs, int n_seqs, const bs_fwd_out *out,
                           bs_err *err) {
    static const bs_fwd_out none = { 0 };
    if (!out) out = &none;
    if (n_seqs <= 0) return bs_fail(err, "a batch forward needs at least one sequence");
    for (int i = 0; i < n_seqs; i++) {
        if (check_seq(m, &seqs[i], i, out, err)) return -1;
        for (int j = 0; j < i; j++)
            if (seqs[j].kv == seqs[i].kv) return bs_fail(err, "sequences %d and %d of a batch share one KV cache", j, i);
    }
    if (n_seqs == 1 && seqs[0].n <= BS_QWEN3_CHUNK_ROWS && m->be->record_begin && !(out->logits_all && seqs[0].last_logits_only)) {
        int rc = forward_recorded(m, ws, seqs[0].kv, seqs[0].ids, seqs[0].n, out, NULL, err);
        if (rc <= 0) return rc ? rc : forward_done(m, err);   // 1: not recordable, run it plainly
    }
    // Cut the batch's rows into chunks; a sequence may continue from one chunk into the next.
    chunk ch = { 0 };
    int row = 0, lrow = 0;   // lrow: the sequence's first logits row
    for (int s = 0; s < n_seqs; s++) {
        int all = out->logits_all && !seqs[s].last_logits_only;
        for (int done = 0; done < seqs[s].n;) {
            int take = seqs[s].n - done, room = BS_QWEN3_CHUNK_ROWS - ch.n_rows;
            if (take > room) take = room;
            // logits rows: the piece's first (all rows), or the sequence's one (its last row's)
            int at = all ? lrow + done : out->logits_all ? lrow : s;
            ch.p[ch.n_pieces++] = (piece){ seqs[s].kv, seqs[s].ids + done, take, done + take == seqs[s].n, all, at };
            ch.n_rows += take; done += take; row += take;
            if (ch.n_rows == BS_QWEN3_CHUNK_ROWS || (s + 1 == n_seqs && done == seqs[s].n)) {
                forward_chunk(m, ws, &ch, out);
                ch = (chunk){ .row0 = row };
            }
        }
        lrow += all ? seqs[s].n : 1;
    }
    return forward_done(m, err);
}

// The cache's own scratch, allocated on its first forward.
static bs_qwen3_ws *kv_scratch(const bs_qwen3 *m, bs_kv_cache *kv, bs_err *err) {
    if (!kv->ws.be && bs_qwen3_ws_init(&kv->ws, &m->cfg, m->be, err)) return NULL;
    return &kv->ws;
}

int bs_qwen3_forward(const bs_qwen3 *m, bs_kv_cache *kv, const int32_t *ids, int n, const bs_fwd_out *out, bs_err *err) {
    bs_qwen3_ws *ws = kv_scratch(m, kv, err);
    bs_seq_rows one = { kv, ids, n };
    return ws ? bs_qwen3_forward_batch(m, ws, &one, 1, out, err) : -1;
}

int bs_qwen3_forward_dev(const bs_qwen3 *m, bs_qwen3_ws *ws, bs_kv_cache *kv, int32_t id0, const int32_t *dev_ids, int n, const bs_fwd_out *out, bs_err *err) {
    static const bs_fwd_out none = { 0 };
    if (!out) out = &none;
    if (n <= 0 || n > BS_QWEN3_CHUNK_ROWS) return bs_fail(err, "forward with ids in backend memory takes 1..%d rows (got %d)", BS_QWEN3_CHUNK_ROWS, n);
    if (!m->be->embed_from) return bs_fail(err, "backend %s cannot embed ids from its memory", m->be->name);
    if (id0 < 0 || id0 >= m->cfg.vocab_size) return bs_fail(err, "token id %d at index 0 is outside the vocabulary [0, %d)", id0, m->cfg.vocab_size);
    if (check_forward(m, kv, n, out, err)) return -1;
    if (!ws && !(ws = kv_scratch(m, kv, err))) return -1;
    if (m->be->record_begin) {
        int rc = forward_recorded(m, ws, kv, &id0, n, out, dev_ids, err);
        if (rc <= 0) return rc ? rc : forward_done(m, err);
    }
    chunk ch = one_chunk(kv, &id0, n, out, dev_ids);
    forward_chunk(m, ws, &ch, out);
    return forward_done(m, err);
}
