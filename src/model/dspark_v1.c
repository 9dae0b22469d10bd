// The seed's DSpark v1 drafter (model/dspark_v1.h, docs/dspark-v1.md): loading, one sequence's context, one round.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "backend/affine.h"
#include "io/calibration.h"
#include "model/dspark_v1.h"
#include "model/gemma4.h"
#include "model/kv_pool.h"
#include "util/tuning.h"

typedef struct v1_layer {
    bs_mat attn_norm, q, k, v, o, ff_norm, gate, up, down;   // matrices transposed to [out][in]
} v1_layer;

typedef struct dspark_v1 {
    bs_drafter iface;
    bs_dspark_v1_config cfg;
    char *dir;
    bs_checkpoint *ck;
    bs_backend *be;
    bs_qwen3 *target;
    int G, S, D, nh, hd, I, r, H, V, max_ctx;
    int taps[1];                     // the target's hidden_states[n_layers]: its last layer after the final norm
    // Every sequence's context rows, one pool: a row is the tap of one committed position, its first hk floats in
    // the pool's K row, the rest in its V row (so a row costs H floats, not 2H). Only the last row is read, but a
    // rollback may go back any distance, so all are kept.
    bs_kv_pool ctx_pool;
    int hk;
    v1_layer *layers;
    bs_mat ctx_proj, tok_proj, out_norm, out_proj, w1, w2, conf_w;
    float conf_b;
    int calibrated;
    float conf_T[BS_MAX_DRAFT], conf_bias[BS_MAX_DRAFT];
    void **host;                     // transposed host copies (the CPU backend's weights view them)
    int n_host;
    // backend workspace (one call at a time)
    float *seq0;                     // [S][D]: pos[0], pos[1], mask_emb[j] + pos[j + 2]: the rows before the projections
    float *hctx, *emb;               // [H] the context vector, [H] the anchor's embedding row
    float *x, *xn, *q, *k, *v, *att, *gate, *up;   // [S][D] ([S][I] for gate, up)
    float *hout, *logits, *he;                     // [G][H], [G][V], [G][D + r]
} dspark_v1;

typedef struct v1_ctx {
    bs_page_table pages;
    float *qdist;                    // [G][V] the walk's processed distributions (bs_draft.q)
    int32_t *picks;                  // backend [2G]: the walk's drafts, then the confidence logits (one download)
} v1_ctx;

static void v1_free(bs_drafter *d);
int bs_is_dspark_v1(const bs_drafter *d) { return d && d->free == v1_free; }
const bs_dspark_v1_config *bs_dspark_v1_config_of(const bs_drafter *d) { return bs_is_dspark_v1(d) ? &((dspark_v1 *)d->impl)->cfg : NULL; }

// ---- loading ----------------------------------------------------------------------------------------------

static void add_warning(dspark_v1 *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_warning(dspark_v1 *m, const char *fmt, ...) {
    size_t len = strlen(m->iface.warning);
    if (len + 2 >= sizeof m->iface.warning) return;
    if (len) m->iface.warning[len++] = '\n';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->iface.warning + len, sizeof m->iface.warning - len, fmt, ap);
    va_end(ap);
}

// The host view of a tensor of the seed's shape (rows 0: a vector of cols), errors naming the folder and the tensor.
static int host_view(dspark_v1 *m, const char *name, int64_t rows, int64_t cols, bs_mat *host, bs_err *err) {
    char want[64], have[160];
    if (rows) snprintf(want, sizeof want, "[%lld, %lld]", (long long)rows, (long long)cols);
    else snprintf(want, sizeof want, "[%lld]", (long long)cols);
    const bs_tensor_info *t = bs_checkpoint_find(m->ck, name);
    if (!t) return bs_fail(err, "drafter %s: missing tensor '%s' (%s implies %s)", m->dir, name, BS_DSPARK_V1_FILE, want);
    // The shape first, so that the message names dspark.json (bs_checkpoint_mat's would name config.json).
    int ok = t->n_dims == (rows ? 2 : 1) && t->shape[0] == (rows ? rows : cols) && (!rows || t->shape[1] == cols);
    if (!ok) {
        int len = snprintf(have, sizeof have, "[");
        for (int d = 0; d < t->n_dims && len < (int)sizeof have - 24; d++) len += snprintf(have + len, sizeof have - len, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        snprintf(have + len, sizeof have - len, "]");
        return bs_fail(err, "%s: tensor '%s' has shape %s, expected %s from %s/%s", t->file, name, have, want, m->dir, BS_DSPARK_V1_FILE);
    }
    return bs_checkpoint_mat(m->ck, name, rows, cols, host, err);   // (the dtype: F32, BF16 or F16)
}

static int keep_host(dspark_v1 *m, void *p, bs_err *err) {
    void **h = realloc(m->host, sizeof *h * (m->n_host + 1));
    if (!h) { free(p); return bs_fail(err, "out of memory"); }
    m->host = h;
    m->host[m->n_host++] = p;
    return 0;
}

// A matrix stored [in][out] (the seed multiplies x @ W), as the ops' [out][in], in its stored dtype.
static int load_t(dspark_v1 *m, const char *name, int64_t in, int64_t out, bs_mat *dst, bs_err *err) {
    bs_mat host;
    if (host_view(m, name, in, out, &host, err)) return -1;
    size_t es = bs_dtype_size(host.dtype);
    char *t = bs_malloc((size_t)in * out * es, err);
    if (!t || keep_host(m, t, err)) return bs_wrap(err, "drafter %s: tensor '%s'", m->dir, name);
    const char *s = host.data;
    for (int64_t i = 0; i < in; i++)
        for (int64_t o = 0; o < out; o++) memcpy(t + ((size_t)o * in + i) * es, s + ((size_t)i * out + o) * es, es);
    bs_mat tm = host;
    tm.data = t; tm.rows = out; tm.cols = in; tm.layout = 0;
    if (m->be->weight(m->be, dst, &tm, err)) return bs_wrap(err, "drafter %s: tensor '%s'", m->dir, name);
    return 0;
}
// A tensor used as stored (norm weights, the W1 table).
static int load_as_is(dspark_v1 *m, const char *name, int64_t rows, int64_t cols, bs_mat *dst, bs_err *err) {
    bs_mat host;
    if (host_view(m, name, rows, cols, &host, err)) return -1;
    if (m->be->weight(m->be, dst, &host, err)) return bs_wrap(err, "drafter %s: tensor '%s'", m->dir, name);
    return 0;
}

// The sequence's rows before any projection: pos_emb[0] and pos_emb[1] (the projections add to them), then the
// mask rows mask_emb[j] + pos_emb[j + 2], all in fp32 (the seed's module is fp32 throughout).
static int load_seq0(dspark_v1 *m, bs_err *err) {
    bs_mat pos, mask;
    int S = m->S, D = m->D, G = m->G;
    if (host_view(m, "pos_emb", S, D, &pos, err)) return -1;
    if (G > 1 && host_view(m, "mask_emb", G - 1, D, &mask, err)) return -1;
    float *h = bs_malloc(sizeof(float) * ((size_t)S * D + D), err);
    if (!h) return -1;
    float *row = h + (size_t)S * D;
    for (int i = 0; i < S; i++) bs_mat_row_f32(&pos, i, h + (size_t)i * D);
    for (int j = 0; j + 2 < S; j++) {
        bs_mat_row_f32(&mask, j, row);
        for (int c = 0; c < D; c++) h[(size_t)(j + 2) * D + c] = row[c] + h[(size_t)(j + 2) * D + c];
    }
    m->be->upload(m->be, m->seq0, h, sizeof(float) * S * D);
    free(h);
    return 0;
}

static int load_layer(dspark_v1 *m, int i, bs_err *err) {
    v1_layer *L = &m->layers[i];
    char n[9][64];
    const char *w[9] = { "attn_norm", "q", "k", "v", "o", "ff_norm", "gate", "up", "down" };
    for (int j = 0; j < 9; j++) snprintf(n[j], sizeof n[j], "bb.%d.%s", i, w[j]);
    int D = m->D, I = m->I;
    return load_as_is(m, n[0], 0, D, &L->attn_norm, err) || load_t(m, n[1], D, D, &L->q, err) || load_t(m, n[2], D, D, &L->k, err) ||
           load_t(m, n[3], D, D, &L->v, err) || load_t(m, n[4], D, D, &L->o, err) || load_as_is(m, n[5], 0, D, &L->ff_norm, err) ||
           load_t(m, n[6], D, I, &L->gate, err) || load_t(m, n[7], D, I, &L->up, err) || load_t(m, n[8], I, D, &L->down, err) ? -1 : 0;
}

// dspark.json records the target it was trained for (dims): a target of another width or vocabulary is refused.
static int check_target(dspark_v1 *m, const bs_drafter_opts *o, bs_err *err) {
    const bs_dspark_v1_config *c = &m->cfg;
    const bs_qwen3_config *t = &m->target->cfg;
    if (c->hidden_size != t->hidden_size)
        return bs_fail(err, "drafter %s: %s field \"dims.hiddenSize\" is %d but the target's hidden_size is %d (this drafter was made for another target%s%s)",
                       m->dir, BS_DSPARK_V1_FILE, c->hidden_size, t->hidden_size, c->target_id[0] ? ": " : "", c->target_id);
    if (c->vocab_size != t->vocab_size)
        return bs_fail(err, "drafter %s: %s field \"dims.vocabSize\" is %d but the target's vocab_size is %d (this drafter was made for another target%s%s)",
                       m->dir, BS_DSPARK_V1_FILE, c->vocab_size, t->vocab_size, c->target_id[0] ? ": " : "", c->target_id);
    if (m->target->r1.n)
        return bs_fail(err, "drafter %s: the target is stored R1-rotated (docs/rotation.md); a DSpark v1 drafter does not bind to a rotated target", m->dir);
    if (o && o->draft_vocab)
        return bs_fail(err, "drafter %s: a draft vocabulary (%s) is not supported with a DSpark v1 drafter", m->dir, o->draft_vocab);
    if (!m->be->gelu_mul || !m->be->argmax_to || !m->be->embed_from)
        return bs_fail(err, "drafter %s: the %s backend lacks gelu_mul, argmax_to or embed_from (the drafter's FFN and walk)", m->dir, m->be->name);
    if (c->eps != t->rms_eps)
        add_warning(m, "drafter %s: dims.eps %g differs from the target's rms_norm_eps %g; the drafter's norms use its own", m->dir, c->eps, t->rms_eps);
    if (!c->param_names_ok)
        add_warning(m, "drafter %s: %s's param_names are not the list its config implies; tensors are read by the implied names (as the seed does)",
                    m->dir, BS_DSPARK_V1_FILE);
    return 0;
}

static int check_extra_tensors(dspark_v1 *m) {
    int n = bs_dspark_v1_n_params(&m->cfg), extra = 0;
    for (int i = 0; i < m->ck->n_tensors; i++) {
        const char *nm = m->ck->tensors[i].name;
        int known = 0;
        char want[64];
        for (int j = 0; j < n && !known; j++) { bs_dspark_v1_param_name(&m->cfg, j, want, sizeof want); known = !strcmp(want, nm); }
        if (!known && extra++ == 0) add_warning(m, "drafter %s: tensor '%s' is not one of a DSpark v1 drafter's; ignored", m->dir, nm);
    }
    return extra;
}

static int load_calibration(dspark_v1 *m, const bs_drafter_opts *o, bs_err *err) {
    if (o && o->no_calibration) return 0;
    bs_calibration cal;
    int rc = bs_calibration_load_dir(&cal, m->dir, m->G, err);
    if (rc < 0) return -1;
    if (rc == 1) { memcpy(m->conf_T, cal.T, sizeof(float) * cal.n); memcpy(m->conf_bias, cal.b, sizeof(float) * cal.n); m->calibrated = 1; }
    return 0;
}

static int v1_ctx_init(bs_drafter *d, bs_drafter_ctx *dc, int max_ctx, bs_err *err);
static void v1_ctx_free(bs_drafter *d, bs_drafter_ctx *dc);
static int v1_add_context(bs_drafter *d, bs_drafter_ctx *dc, const float *feat, int n, bs_err *err);
static int v1_rollback(bs_drafter *d, bs_drafter_ctx *dc, int n_ctx, bs_err *err);
static int v1_propose(bs_drafter *d, bs_drafter_ctx *dc, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng, bs_draft *out, bs_err *err);

#define ALLOC_BE(p, floats) do { if (!((p) = m->be->alloc(m->be, sizeof(float) * (size_t)(floats), err))) goto fail; } while (0)

int bs_dspark_v1_open(bs_drafter **out, const char *dir, bs_qwen3 *target, int max_ctx, const bs_drafter_opts *o, bs_err *err) {
    *out = NULL;
    dspark_v1 *m = calloc(1, sizeof *m);
    if (!m || !(m->dir = strdup(dir))) { free(m); return bs_fail(err, "out of memory"); }
    m->target = target; m->be = target->be;
    m->iface.impl = m;
    m->iface.free = v1_free;
    bs_dspark_v1_config *c = &m->cfg;
    if (bs_dspark_v1_config_load(c, dir, err) || check_target(m, o, err)) goto fail;
    if (bs_checkpoint_open(&m->ck, dir, err)) goto fail;   // (its message names the folder)
    m->G = c->gamma; m->S = c->gamma + 1; m->D = c->d_draft; m->nh = c->n_heads; m->hd = c->d_draft / c->n_heads;
    m->I = c->ff_mult * c->d_draft; m->r = c->markov_rank; m->H = c->hidden_size; m->V = c->vocab_size;
    m->max_ctx = max_ctx > 0 ? max_ctx : target->cfg.max_position;
    m->taps[0] = target->cfg.n_layers;
    int S = m->S, G = m->G, D = m->D, H = m->H, V = m->V, r = m->r, I = m->I;

    ALLOC_BE(m->seq0, (size_t)S * D);
    if (!(m->layers = bs_calloc(c->n_layers, sizeof *m->layers, err))) goto fail;
    for (int i = 0; i < c->n_layers; i++) if (load_layer(m, i, err)) goto fail;
    bs_mat cb;
    float cbv;
    if (load_t(m, "ctx_proj", H, D, &m->ctx_proj, err) || load_t(m, "tok_proj", H, D, &m->tok_proj, err) || load_seq0(m, err) ||
        load_as_is(m, "out_norm", 0, D, &m->out_norm, err) || load_t(m, "out_proj", D, H, &m->out_proj, err) ||
        load_as_is(m, "markov.w1", V, r, &m->w1, err) || load_t(m, "markov.w2", r, V, &m->w2, err) ||
        load_t(m, "conf.w", (int64_t)D + r, 1, &m->conf_w, err) || host_view(m, "conf.b", 0, 1, &cb, err)) goto fail;
    bs_mat_row_f32(&cb, 0, &cbv);
    m->conf_b = cbv;
    check_extra_tensors(m);
    if (load_calibration(m, o, err)) goto fail;

    // The context pool: the engine's geometry (its target pool's page count and size) or 8 contexts' worth.
    int page_rows = o && o->ctx_page_rows > 0 ? o->ctx_page_rows : BS_KV_PAGE_ROWS;
    int pages = o && o->ctx_pages > 0 ? o->ctx_pages : 8 * ((m->max_ctx + page_rows - 1) / page_rows);
    m->hk = (H + 1) / 2;
    if (bs_kv_pool_init(&m->ctx_pool, m->be, 1, m->hk, page_rows, pages, err)) { bs_wrap(err, "drafter %s", dir); goto fail; }

    ALLOC_BE(m->hctx, H); ALLOC_BE(m->emb, H);
    ALLOC_BE(m->x, S * D); ALLOC_BE(m->xn, S * D); ALLOC_BE(m->q, S * D); ALLOC_BE(m->k, S * D); ALLOC_BE(m->v, S * D);
    ALLOC_BE(m->att, S * D); ALLOC_BE(m->gate, (size_t)S * I); ALLOC_BE(m->up, (size_t)S * I);
    ALLOC_BE(m->hout, (size_t)G * H); ALLOC_BE(m->logits, (size_t)G * V); ALLOC_BE(m->he, (size_t)G * (D + r));

    bs_drafter *d = &m->iface;
    d->name = "dspark-v1";
    snprintf(d->shape, sizeof d->shape, "dspark-v1-L%d-D%d-I%d-A%dx%d-G%d-H%d-V%d-%s", c->n_layers, D, I, m->nh, m->hd, G, H, V,
             bs_dtype_name(m->layers[0].q.dtype));
    d->max_drafts = G;
    d->n_taps = 1;
    d->taps = m->taps;
    d->ctx_init = v1_ctx_init; d->ctx_free = v1_ctx_free;
    d->add_context = v1_add_context; d->rollback = v1_rollback;
    d->propose = v1_propose;
    *out = d;
    return 0;
fail:
    v1_free(&m->iface);
    return -1;
}

static void v1_free(bs_drafter *d) {
    if (!d) return;
    dspark_v1 *m = d->impl;
    bs_backend *be = m->be;
    float *bufs[] = { m->seq0, m->hctx, m->emb, m->x, m->xn, m->q, m->k, m->v, m->att, m->gate, m->up, m->hout, m->logits, m->he };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) if (bufs[i]) be->free(be, bufs[i]);
    bs_kv_pool_free(&m->ctx_pool);
    free(m->layers);
    for (int i = 0; i < m->n_host; i++) free(m->host[i]);   // after the weights: the CPU's views of them are gone with m
    free(m->host);
    bs_checkpoint_close(m->ck);
    free(m->dir);
    free(m);
}

// ---- one sequence's context ---------------------------------------------------------------------------------

static void v1_ctx_free(bs_drafter *d, bs_drafter_ctx *dc) {
    dspark_v1 *m = d->impl;
    v1_ctx *x = dc->impl;
    if (!x) return;
    bs_page_table_free(&x->pages);
    if (x->qdist) m->be->free(m->be, x->qdist);
    if (x->picks) m->be->free(m->be, x->picks);
    free(x);
    dc->impl = NULL;
}

static int v1_ctx_init(bs_drafter *d, bs_drafter_ctx *dc, int max_ctx, bs_err *err) {
    dspark_v1 *m = d->impl;
    if (max_ctx <= 0 || max_ctx > m->max_ctx) max_ctx = m->max_ctx;
    *dc = (bs_drafter_ctx){ .max_ctx = max_ctx };
    v1_ctx *x = bs_calloc(1, sizeof *x, err);
    if (!x) return -1;
    dc->impl = x;
    if (bs_page_table_init(&x->pages, &m->ctx_pool, max_ctx, err) ||
        !(x->qdist = m->be->alloc(m->be, sizeof(float) * (size_t)m->G * m->V, err)) ||
        !(x->picks = m->be->alloc(m->be, sizeof(int32_t) * 2 * (size_t)m->G, err))) {
        v1_ctx_free(d, dc);
        return bs_wrap(err, "drafter context for %d positions", max_ctx);
    }
    return 0;
}

static int v1_add_context(bs_drafter *d, bs_drafter_ctx *dc, const float *feat, int n, bs_err *err) {
    dspark_v1 *m = d->impl;
    v1_ctx *x = dc->impl;
    bs_backend *be = m->be;
    if (!x) return bs_fail(err, "drafter: the sequence context was not initialised (ctx_init)");
    if (n < 0) return bs_fail(err, "drafter: negative context row count %d", n);
    if (dc->n_ctx + n > dc->max_ctx)
        return bs_fail(err, "drafter context full: %d rows held + %d new exceed its capacity %d", dc->n_ctx, n, dc->max_ctx);
    if (bs_page_table_grow(&x->pages, dc->n_ctx + n, err)) return bs_wrap(err, "drafter context");
    const int P = m->ctx_pool.page_rows, H = m->H, hk = m->hk;
    for (int r0 = 0, rows; r0 < n; r0 += rows) {   // runs of rows within one page
        int pos = dc->n_ctx + r0;
        rows = P - pos % P;
        if (rows > n - r0) rows = n - r0;
        be->copy_rows(be, bs_page_table_k_row(&x->pages, 0, pos), hk, feat + (size_t)r0 * H, H, rows, hk);
        if (H > hk) be->copy_rows(be, bs_page_table_v_row(&x->pages, 0, pos), hk, feat + (size_t)r0 * H + hk, H, rows, H - hk);
    }
    if (bs_backend_check(be, err)) return bs_wrap(err, "drafter: adding %d context rows", n);
    dc->n_ctx += n;
    return 0;
}

static int v1_rollback(bs_drafter *d, bs_drafter_ctx *dc, int n_ctx, bs_err *err) {
    if (n_ctx < 0 || n_ctx > dc->n_ctx) return bs_fail(err, "drafter: cannot roll the context back to %d rows (it holds %d)", n_ctx, dc->n_ctx);
    dc->n_ctx = n_ctx;
    if (dc->impl) bs_page_table_shrink(&((v1_ctx *)dc->impl)->pages, n_ctx);
    return 0;
}

// ---- one round ----------------------------------------------------------------------------------------------

// The backbone over the S = gamma + 1 rows: m->xn rows 1..gamma hold h_1..h_gamma afterwards (after out_norm).
static void backbone(dspark_v1 *m, int32_t anchor) {
    bs_backend *be = m->be;
    const bs_dspark_v1_config *c = &m->cfg;
    int S = m->S, D = m->D;
    be->copy(be, m->x, m->seq0, sizeof(float) * S * D);
    // row 0: h_ctx @ ctx_proj + pos[0]; row 1: E[anchor] @ tok_proj + pos[1] (the raw embedding row: no scale)
    be->matmul(be, m->x, m->hctx, 1, &m->ctx_proj, 1);
    be->embed(be, m->emb, &m->target->embed, &anchor, 1);
    be->matmul(be, m->x + D, m->emb, 1, &m->tok_proj, 1);
    bs_kv_view kv = bs_kv_contig(m->k, m->v);
    for (int l = 0; l < c->n_layers; l++) {
        const v1_layer *L = &m->layers[l];
        // attention: every row sees every row (no mask, no RoPE: the learned pos_emb is the only position signal)
        be->rmsnorm(be, m->xn, m->x, S, D, &L->attn_norm, c->eps);
        float *qkv[3] = { m->q, m->k, m->v };
        const bs_mat *w[3] = { &L->q, &L->k, &L->v };
        bs_matmul_multi(be, 3, qkv, m->xn, S, w, 0);
        be->attention(be, m->att, m->q, &kv, S, m->nh, m->nh, m->hd, S, 0, 0, 0);
        be->matmul(be, m->x, m->att, S, &L->o, 1);
        // FFN: gelu_tanh(xn @ gate) * (xn @ up) @ down
        be->rmsnorm(be, m->xn, m->x, S, D, &L->ff_norm, c->eps);
        float *gu[2] = { m->gate, m->up };
        const bs_mat *wgu[2] = { &L->gate, &L->up };
        bs_matmul_multi(be, 2, gu, m->xn, S, wgu, 0);
        be->gelu_mul(be, m->gate, m->gate, m->up, (size_t)S * m->I);
        be->matmul(be, m->x, m->gate, S, &L->down, 1);
    }
    be->rmsnorm(be, m->xn, m->x, S, D, &m->out_norm, c->eps);
}

static float sigmoidf_(float z) { return 1.0f / (1.0f + expf(-z)); }

// What this drafter reads of the target, all here and in backbone() (docs/dspark-v1.md, "What a Gemma-4 target
// must provide"): the tap (taps[0] = n_layers: after the final norm), the raw embedding table (backbone: a
// Gemma-4 target scales its rows by sqrt(H) in its own inputs, not in the table) and this head: the target's
// logits of a hidden row exactly as the target computes its own, hout . lm_head^T, then Gemma-4's final soft-cap
// cap * tanh(U / cap) where the config has one (the seed's logitsFromHidden: "shared head (+softcap)"; a no-op for
// Qwen3 and Llama).
static void target_head(dspark_v1 *m, float *logits, const float *hout, int n) {
    m->be->matmul(m->be, logits, hout, n, &m->target->lm_head, 0);
    bs_gemma4_softcap(m->target, logits, n);
}

int bs_dspark_v1_forward_block(bs_drafter *d, bs_drafter_ctx *dc, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng,
                               bs_draft *out, const bs_dspark_v1_inspect *ins, bs_err *err) {
    memset(out, 0, sizeof *out);
    if (!bs_is_dspark_v1(d)) return bs_fail(err, "drafter: not a DSpark v1 drafter");
    dspark_v1 *m = d->impl;
    bs_backend *be = m->be;
    int D = m->D, r = m->r, V = m->V, H = m->H;
    if (anchor < 0 || anchor >= V) return bs_fail(err, "drafter: anchor token %d is outside the vocabulary [0, %d)", anchor, V);
    v1_ctx *x = dc->impl;
    if (!x) return bs_fail(err, "drafter: the sequence context was not initialised (ctx_init)");
    if (dc->n_ctx < 1)
        return bs_fail(err, "drafter: a DSpark v1 drafter needs the target's hidden state of the row before the anchor (no context rows yet)");
    if (!bs_sampling_greedy(s) && !rng && !(ins && ins->uniforms)) return bs_fail(err, "drafter: sampling needs an RNG");
    int n = max_n < m->G ? max_n : m->G;
    if (n <= 0 && !ins) return 0;
    if (n < 0) n = 0;

    // The context vector: the last committed row (the one whose logits chose the anchor).
    int hk = m->hk, last = dc->n_ctx - 1;
    be->copy_rows(be, m->hctx, H, bs_page_table_k_row(&x->pages, 0, last), hk, 1, hk);
    if (H > hk) be->copy_rows(be, m->hctx + hk, H, bs_page_table_v_row(&x->pages, 0, last), hk, 1, H - hk);
    backbone(m, anchor);
    const float *h = m->xn + D;   // h_1..h_gamma
    if (ins && ins->block_hidden) be->download(be, ins->block_hidden, h, sizeof(float) * m->G * D);
    if (n == 0) return bs_backend_check(be, err) ? bs_wrap(err, "drafter: block pass") : 0;

    // U_k: out_proj to the target's width, then the target's own LM head and soft-cap (no final norm: the seed's
    // hidden is handed to logitsFromHidden as it comes out of out_proj).
    be->matmul(be, m->hout, h, n, &m->out_proj, 0);
    target_head(m, m->logits, m->hout, n);
    if (ins && ins->head_in) be->download(be, ins->head_in, m->hout, sizeof(float) * n * H);
    if (ins && ins->base_logits) be->download(be, ins->base_logits, m->logits, sizeof(float) * n * V);

    // The walk: L_k = U_k + W2^T W1[x_{k-1}], x_0 the anchor, each step the argmax of, or a draw from, L_k processed
    // by the request's sampling (q_k kept). The picks stay in backend memory (argmax_to / the sampler's _to form)
    // and the next step gathers its W1 row from there (embed_from), so a round waits on the host once, not once
    // per draft; the uniforms are drawn first, in step order. he row k = [h_k ; W1[x_{k-1}]] (the confidence input).
    int32_t *picks = x->picks;
    float *conf_out = (float *)(x->picks + m->G);
    double u[BS_MAX_DRAFT];
    if (!bs_sampling_greedy(s)) for (int k = 0; k < n; k++) u[k] = ins && ins->uniforms ? ins->uniforms[k] : bs_rng_uniform(rng);
    be->copy_rows(be, m->he, D + r, h, D, n, D);
    for (int k = 0; k < n; k++) {
        float *e = m->he + (size_t)k * (D + r) + D, *row = m->logits + (size_t)k * V;
        if (k == 0) be->embed(be, e, &m->w1, &anchor, 1);
        else be->embed_from(be, e, &m->w1, picks + k - 1, 1);
        be->matmul(be, row, e, 1, &m->w2, 1);
        if (bs_sampling_greedy(s)) be->argmax_to(be, picks + k, row, 1, V, NULL);
        else bs_sample_rows_to(be, s, x->qdist + (size_t)k * V, row, 1, V, &u[k], picks + k);
    }
    // c_k = sigmoid(conf.w . [h_k ; W1[x_{k-1}]] + conf.b) (calibrated: sigmoid(z / T_k + b_k), docs/calibration.md)
    be->matmul(be, conf_out, m->he, n, &m->conf_w, 0);
    int32_t got[2 * BS_MAX_DRAFT];
    be->download(be, got, picks, sizeof(int32_t) * 2 * m->G);
    if (ins && ins->step_logits) be->download(be, ins->step_logits, m->logits, sizeof(float) * n * V);
    float cl[BS_MAX_DRAFT];
    memcpy(out->tokens, got, sizeof(int32_t) * n);
    memcpy(cl, got + m->G, sizeof(float) * n);
    for (int k = 0; k < n; k++) {
        cl[k] += m->conf_b;
        out->conf[k] = sigmoidf_(m->calibrated ? cl[k] / m->conf_T[k] + m->conf_bias[k] : cl[k]);
    }
    if (ins && ins->conf_logits) memcpy(ins->conf_logits, cl, sizeof(float) * n);
    out->has_conf = 1;
    out->n = n;
    out->q = bs_sampling_greedy(s) ? NULL : x->qdist;
    if (bs_backend_check(be, err)) return bs_wrap(err, "drafter: block pass");
    return 0;
}

static int v1_propose(bs_drafter *d, bs_drafter_ctx *dc, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng, bs_draft *out, bs_err *err) {
    return bs_dspark_v1_forward_block(d, dc, anchor, max_n, s, rng, out, NULL, err);
}
